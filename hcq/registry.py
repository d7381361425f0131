"""Backends by device-string prefix, found through the `driverless.hcq` entry-point group.

`hcq.open("am:sim")` loads the entry point named "am" and calls it with the whole string; hcq never
imports a backend's package, so a backend is whatever package declares itself in that group:

    [project.entry-points."driverless.hcq"]
    am = "amdrv.hcq:open_device"

Two optional questions a backend answers through functions beside its entry point (in the module the entry
point names), so that callers such as the tensor compiler choose devices without importing a backend:

    find_real_device() -> (device string | None, why not)   hcq.find_real_device("am")
    device_facts(spec) -> {"persistent": bool, "state": path | None}   hcq.device_facts("am:sim")
"""
from __future__ import annotations

import importlib
from importlib import metadata

from hcq.api import HCQDevice, HCQError

ENTRY_POINT_GROUP = "driverless.hcq"


def backends() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def open(spec: str, **kwargs) -> HCQDevice:  # noqa: A001 - hcq.open is the contract's name
    """Opens a device: the text before the first ':' names the backend ("am:sim" -> "am")."""
    prefix = spec.partition(":")[0].strip().lower()
    eps = backends()
    if prefix not in eps:
        raise HCQError(f"hcq: no backend {prefix!r} for device {spec!r}; installed: "
                       f"{', '.join(sorted(eps)) or 'none'} (is the package installed with `pip install -e .`?)")
    dev = eps[prefix].load()(spec, **kwargs)
    if not isinstance(dev, HCQDevice):
        raise HCQError(f"hcq: backend {prefix!r} ({eps[prefix].value}) returned {type(dev).__name__}, "
                       "not an hcq.HCQDevice")
    return dev


def _backend_hook(prefix: str, name: str):
    """The backend module's function `name`, or None when the backend is not installed or has none."""
    ep = backends().get(prefix)
    return None if ep is None else getattr(importlib.import_module(ep.module), name, None)


def find_real_device(prefix: str = "am") -> tuple[str | None, str]:
    """(device string, "") of the first real GPU backend `prefix` can take, else (None, one line saying why
    none was chosen)."""
    hook = _backend_hook(prefix, "find_real_device")
    if hook is None:
        return None, f"no {prefix!r} backend that searches for real GPUs is installed"
    return hook()


def device_facts(spec: str) -> dict:
    """What a device string means beyond opening it: `persistent` (the GPU outlives the process as the
    backend's close leaves it: a real one, or a simulated one kept in a state file) and `state` (that file,
    or None). A string no backend understands: not persistent, no state."""
    hook = _backend_hook(spec.partition(":")[0].strip().lower(), "device_facts")
    if hook is None:
        return {"persistent": False, "state": None}
    return hook(spec)
