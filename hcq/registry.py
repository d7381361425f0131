"""Backends by device-string prefix, found through the `driverless.hcq` entry-point group.

`hcq.open("am:sim")` loads the entry point named "am" and calls it with the whole string; hcq never
imports a backend's package, so a backend is whatever package declares itself in that group:

    [project.entry-points."driverless.hcq"]
    am = "amdrv.hcq:open_device"
"""
from __future__ import annotations

from importlib import metadata

from hcq.api import Device, HCQError

ENTRY_POINT_GROUP = "driverless.hcq"


def backends() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def open(spec: str, **kwargs) -> Device:  # noqa: A001 - hcq.open is the contract's name
    """Opens a device: the text before the first ':' names the backend ("am:sim" -> "am")."""
    prefix = spec.partition(":")[0].strip().lower()
    eps = backends()
    if prefix not in eps:
        raise HCQError(f"hcq: no backend {prefix!r} for device {spec!r}; installed: "
                       f"{', '.join(sorted(eps)) or 'none'} (is the package installed with `pip install -e .`?)")
    dev = eps[prefix].load()(spec, **kwargs)
    if not isinstance(dev, Device):
        raise HCQError(f"hcq: backend {prefix!r} ({eps[prefix].value}) returned {type(dev).__name__}, "
                       "not an hcq.Device")
    return dev
