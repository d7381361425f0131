"""The simulated PCIe bus: the GPUs plugged into it and the host memory they may reach by DMA.

`HostBus` is the host's bus with its slots: whoever creates one (a test, a benchmark) owns the GPUs in its
slots, and they go when it goes. The device strings (`am:sim...`) use the process's default one
(gpusim.provider.default_bus()).

Host DMA memory is mapped in 2 MiB segments at bus addresses that are not contiguous with each other
(a gap follows every segment), as hugepage-backed memory is on a real host: a driver that assumes a
buffer's bus addresses are contiguous beyond a 2 MiB page reaches unmapped space, which faults.
"""
from __future__ import annotations

import mmap
import weakref

from gpusim.device import DMAError

SEGMENT = 2 << 20
BUS_BASE = 0x1_0000_0000     # first host bus address handed out (above 4 GiB, as an IOMMU would)


class Bus:
    def __init__(self):
        self.devices: list = []
        self._segments: dict[int, tuple[memoryview, int]] = {}   # bus segment base -> (host view, offset)
        self._next = BUS_BASE

    def plug(self, dev) -> None:
        dev.bus = self
        if dev not in self.devices:
            self.devices.append(dev)

    def unplug(self, dev) -> None:
        if dev in self.devices:
            self.devices.remove(dev)
        dev.bus = None

    def map_host(self, view: memoryview) -> list[int]:
        """Maps host memory for DMA; returns the bus address of each 2 MiB segment."""
        bases = []
        for off in range(0, len(view), SEGMENT):
            base = self._next
            self._next += 2 * SEGMENT
            self._segments[base] = (view, off)
            bases.append(base)
        return bases

    def unmap_host(self, bases: list[int]) -> None:
        for b in bases:
            self._segments.pop(b, None)

    def _locate(self, addr: int, what: str) -> tuple[memoryview, int, int]:
        base = addr - (addr - BUS_BASE) % SEGMENT if addr >= BUS_BASE else None
        seg = self._segments.get(base)
        if seg is None:
            raise DMAError(f"DMA {what} at bus address {addr:#x}: no host memory is mapped there")
        view, off = seg
        at = off + addr - base
        if at >= len(view):
            raise DMAError(f"DMA {what} at bus address {addr:#x}: past the end of its host buffer")
        return view, at, min(base + SEGMENT, base + len(view) - off) - addr

    def read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        while n > 0:
            view, at, avail = self._locate(addr, "read")
            k = min(n, avail)
            out += view[at:at + k]
            addr, n = addr + k, n - k
        return bytes(out)

    def write(self, addr: int, data) -> None:
        data = memoryview(bytes(data))
        while len(data):
            view, at, avail = self._locate(addr, "write")
            k = min(len(data), avail)
            view[at:at + k] = data[:k]
            addr, data = addr + k, data[k:]


class HostBus(Bus):
    """The host's PCIe bus: numbered slots, each holding at most one simulated GPU, and the host memory
    those GPUs reach by DMA. A GPU outlives the functions opened on it (as a real one stays powered between
    driver runs): opening its slot again finds it as it was left. `held` is the open function of each slot
    (one driver per GPU); weak, so a function dropped without close() frees its slot. A GPU behind a
    simulated USB bridge stays in its slot but leaves this bus's DMA (gpusim.usb_bridge); `enclosures`
    keeps that bridge by slot, so reopening the slot finds the enclosure as it was left."""

    def __init__(self):
        super().__init__()
        self.slots: dict[int, object] = {}       # slot -> gpusim.device.SimGPU
        self.state_files: dict = {}              # slot -> the state file it was opened with (gpusim.provider)
        self.held: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # slot -> open function
        self.enclosures: dict[int, object] = {}  # slot -> the USB bridge in front of its GPU
        LIVE.add(self)

    def pick_slot(self, chip: str, enclosed: bool = False) -> int:
        """The slot already holding `chip` on this bus (not behind a USB bridge), else the first free one.
        enclosed (a bridge's open): the slot of an enclosure holding `chip` comes first."""
        mine = sorted(s for s, d in self.slots.items() if d.chip == chip)
        return next((s for s in mine if enclosed and s in self.enclosures),
                    next((s for s in mine if self.slots[s].bus is self),
                         next(i for i in range(len(self.slots) + 1) if i not in self.slots)))

    def close(self) -> None:
        """Unplugs every GPU (their asynchronous clocks stop): what an owner does when done with them."""
        for dev in self.slots.values():
            dev.stop_async()
            if dev.bus is self:
                self.unplug(dev)
        self.slots.clear()
        self.state_files.clear()
        self.held.clear()
        self.enclosures.clear()


LIVE: weakref.WeakSet = weakref.WeakSet()   # every HostBus not yet collected (the provider saves their state files at exit)


def host_memory(size: int) -> mmap.mmap:
    """Page-aligned anonymous host memory, as a DMA allocation is."""
    return mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
