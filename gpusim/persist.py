"""Saving a simulated device to a file and loading it back, so a new process finds the GPU as the last
one left it (a driver restart on real hardware keeps the GPU powered).

The file is a pickle of the SimGPU: registers, block state, pending clock events, and VRAM as its touched,
non-zero 2 MiB chunks (gpusim.device.VRAM). Host DMA memory belongs to the process and is not saved; a
loaded device is on no bus until the provider plugs it in.
"""
from __future__ import annotations

import copyreg
import os
import pickle
from pathlib import Path
from types import MappingProxyType

MAGIC = b"gpusim-state-1\n"

# Register field maps (amdrv.regs) are read-only mapping proxies that blocks may keep; save them as dicts.
def _proxy(d: dict) -> MappingProxyType:
    return MappingProxyType(d)


copyreg.pickle(MappingProxyType, lambda m: (_proxy, (dict(m),)))

# Classes renamed since files were saved: (module, old name) -> new name, so an older file still loads.
RENAMED = {("gpusim.device", "Device"): "SimGPU"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        return super().find_class(module, RENAMED.get((module, name), name))


def save(dev, path) -> None:
    path = Path(path)
    remove_stale_temporaries(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with dev.lock, open(tmp, "wb") as f:
        f.write(MAGIC)
        pickle.dump(dev, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)   # a process killed mid-save leaves the previous state intact


def load(path):
    path = Path(path)
    remove_stale_temporaries(path)
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a gpusim device state file (or one of another version); "
                             f"delete it to power on a fresh device")
        try:
            return _Unpickler(f).load()
        except Exception as e:  # noqa: BLE001 - whatever a cut-short or damaged pickle raises
            raise ValueError(f"{path}: the simulated GPU saved there cannot be read ({type(e).__name__}: {e}); "
                             "the file was cut short or damaged: delete it to power on a fresh device") from None


def remove_stale_temporaries(path: Path) -> None:
    """Deletes PATH.tmpPID files of processes that no longer run: a process killed while saving leaves
    one (save writes there first, so the state file itself stays whole)."""
    for tmp in path.parent.glob(path.name + ".tmp*"):
        pid = tmp.name[len(path.name) + 4:]
        if not pid.isdigit() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        try:
            tmp.unlink()
        except OSError:
            pass    # another process removed it first, or the directory is read-only: harmless


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True     # it exists (another user's)
    return True
