"""Saving a GPU's PCI config space before a reset that takes the bus interface with it, and restoring it
after (amdgpu_device_mode1_reset: amdgpu_device_cache_pci_state, then amdgpu_device_load_pci_state).

A mode1 reset returns the function's config space to its defaults: no memory decode, no bus mastering,
BARs unassigned, resizable BARs at their default sizes. What is saved and how it goes back follows Linux's
pci_save_state/pci_restore_state for what this GPU has: the Resizable BAR controls (PCI_EXT_CAP_ID_REBAR,
pci_restore_rebar_state, restored first while decode is off), then the 16 dwords of the header from the
last to the first (pci_restore_config_space_range), each written only when it reads back different, so
the command register (memory decode, bus mastering) comes back last, once the BARs hold their addresses.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from pcie import PCIError

log = logging.getLogger("amdrv.pci_state")

PCI_COMMAND = 0x04
HEADER_DWORDS = 16
EXT_CAP_START = 0x100
EXT_CAP_ID_REBAR = 0x15     # include/uapi/linux/pci_regs.h PCI_EXT_CAP_ID_REBAR
REBAR_CTRL_NBAR = 0xE0      # PCI_REBAR_CTRL_NBAR_MASK (in the first entry's control register)


@dataclass(frozen=True)
class PCIState:
    header: tuple[int, ...]                   # dwords 0..15
    rebar: tuple[tuple[int, int], ...]        # (control register offset, value) per resizable BAR


def _rebar_controls(pci) -> list[int]:
    """Config offsets of the Resizable BAR control registers (PCI_REBAR_CTRL of each entry)."""
    at, seen = EXT_CAP_START, set()
    while at and at not in seen and at < 0x1000:
        seen.add(at)
        hdr = pci.config_read(at, 4)
        if hdr in (0, 0xFFFFFFFF):
            return []
        if hdr & 0xFFFF == EXT_CAP_ID_REBAR:
            count = (pci.config_read(at + 8, 4) & REBAR_CTRL_NBAR) >> 5
            return [at + 8 + 8 * i for i in range(count)]
        at = hdr >> 20
    return []


def save(pci) -> PCIState:
    """pci_save_state for this function: the header and the resizable BAR controls."""
    header = tuple(pci.config_read(4 * i, 4) for i in range(HEADER_DWORDS))
    return PCIState(header, tuple((off, pci.config_read(off, 4)) for off in _rebar_controls(pci)))


def restore(pci, state: PCIState) -> None:
    """pci_restore_state for this function: resizable BAR sizes with decode off, then the header from the
    last dword to the first, each only where it differs (the command register last)."""
    if state.rebar:
        cmd = pci.config_read(PCI_COMMAND, 2)
        if cmd & 0x3:
            pci.config_write(PCI_COMMAND, 2, cmd & ~0x3)   # a BAR is resized with decode off
        for off, value in state.rebar:
            if pci.config_read(off, 4) != value:
                pci.config_write(off, 4, value)
    for i in reversed(range(HEADER_DWORDS)):
        if pci.config_read(4 * i, 4) != state.header[i]:
            pci.config_write(4 * i, 4, state.header[i])


# A process that dies between the reset and the restore leaves the GPU with its config space at the reset
# defaults (no memory decode, BARs unassigned) and nothing in the kernel restores it on the sysfs path (VFIO
# restores its own saved state when the device is released). So the saved state is also kept in a file
# beside the device's lock file until the restore is done; the next open restores from it when the GPU does
# not answer register reads (amdrv.device.AMDevice).
def _kept_path(pci) -> Path:
    from pcie.lock import default_lock_dir
    return default_lock_dir() / f"driverless-{pci.address}.pcistate"


def keep(pci, state: PCIState) -> None:
    """Keeps `state` on disk until forget(); not being able to is logged, not raised (the reset goes on)."""
    try:
        path = _kept_path(pci)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"header": state.header, "rebar": state.rebar}))
        os.replace(tmp, path)
    except (OSError, PCIError) as e:
        log.warning("%s: cannot keep the PCI config space on disk during the reset (%s): a process killed "
                    "before the restore leaves the GPU without BARs", pci.address, e)


def forget(pci) -> None:
    try:
        _kept_path(pci).unlink(missing_ok=True)
    except (OSError, PCIError):
        pass


def kept(pci) -> PCIState | None:
    """The config space a reset kept on disk and a dead process never restored, or None. It stays until a
    boot completes (forget): the dead process's reset may still land after the next open restored it."""
    try:
        data = json.loads(_kept_path(pci).read_text())
        return PCIState(tuple(data["header"]), tuple(tuple(r) for r in data["rebar"]))
    except (OSError, PCIError, ValueError, KeyError, TypeError):
        return None
