"""A register trace for debugging: DRIVERLESS_TRACE=mmio logs every MMIO register access of the AM
driver, one line each, with the register's name (amdrv.regs, as bound through IP discovery) and value.

    DRIVERLESS_TRACE=mmio              to stderr
    DRIVERLESS_TRACE=mmio:PATH         appended to the file PATH

    am:sim W GC regCP_MEC_CNTL @0x8c00 = 0x50000000
    am:sim R NBIO RCC_CONFIG_MEMSIZE @0x378c = 0x00006000

The switch is read once when a device opens (AMDevice); when it is off the driver holds the provider's BAR
itself, so tracing costs nothing then. Accesses through MM_INDEX/MM_DATA (VRAM beyond the CPU-visible
window) show as those registers. Doorbells and VRAM are not MMIO registers and are not logged.
"""
from __future__ import annotations

import sys
from typing import Callable, Iterable, TextIO

from amdrv.ip import nbio

ENV_TRACE = "DRIVERLESS_TRACE"
# Registers at fixed byte offsets that no bound block names: the MM_INDEX/MM_DATA window
# (amdgpu_device_mm_access), RCC_CONFIG_MEMSIZE read before IP discovery (amdgpu_discovery.c), and the HDP
# flush registers NBIO remaps into the MMIO hole (soc21.c rmmio_remap, amdrv.ip.nbio).
FIXED = {0x0: "MM_INDEX", 0x4: "MM_DATA", 0x18: "MM_INDEX_HI", 0xDE3 * 4: "NBIO RCC_CONFIG_MEMSIZE",
         nbio.MMIO_REG_HOLE_OFFSET + nbio.KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL: "HDP MEM_FLUSH_CNTL (remapped)",
         nbio.MMIO_REG_HOLE_OFFSET + nbio.KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL: "HDP REG_FLUSH_CNTL (remapped)"}


class TraceError(ValueError):
    """DRIVERLESS_TRACE names something this driver cannot trace."""


def target(value: str | None, device: str) -> TextIO | None:
    """Where the MMIO trace goes for the switch's value: None (off), stderr, or an opened file."""
    if not value:
        return None
    kind, _, path = value.partition(":")
    if kind.strip().lower() != "mmio":
        raise TraceError(f"{device}: {ENV_TRACE}={value!r}: the trace knows 'mmio' (to stderr) or "
                         f"'mmio:PATH' (to a file); unset it to trace nothing")
    if not path:
        return sys.stderr
    try:
        return open(path, "a", buffering=1)   # line-buffered: a crash keeps the lines before it
    except OSError as e:
        raise TraceError(f"{device}: {ENV_TRACE}={value!r}: cannot open {path} for the trace: {e}") from None


class TracedMMIO:
    """The MMIO BAR with every read32/write32 logged; everything else passes through."""

    def __init__(self, bar, out: TextIO, device: str, blocks: Callable[[], Iterable] = tuple):
        self._bar, self._out, self._device, self._blocks = bar, out, device, blocks
        self._names: dict[int, str] = dict(FIXED)
        self._mapped: set[int] = set()

    def name(self, offset: int) -> str:
        """The register at a byte offset: "BLOCK NAME", or the offset when no bound block names it."""
        name = self._names.get(offset)
        if name is None:
            for blk in list(self._blocks()):   # blocks bound since the last miss
                if id(blk) not in self._mapped:
                    self._mapped.add(id(blk))
                    self._map(blk)
            name = self._names.get(offset, "?")
        return name

    def _map(self, blk) -> None:
        for reg in blk.table.names():
            d = blk.table[reg]
            if d.base_idx < len(blk.bases):
                self._names.setdefault((blk.bases[d.base_idx] + d.offset) * 4, f"{blk.name} {reg}")

    def read32(self, offset: int) -> int:
        value = self._bar.read32(offset)
        self._out.write(f"{self._device} R {self.name(offset)} @{offset:#x} = {value:#010x}\n")
        return value

    def write32(self, offset: int, value: int) -> None:
        self._out.write(f"{self._device} W {self.name(offset)} @{offset:#x} = {value:#010x}\n")
        self._bar.write32(offset, value)

    def read32_many(self, offsets) -> list[int]:
        return [self.read32(o) for o in offsets]     # each logged (unbatched: a debugging mode)

    def __getattr__(self, attr):
        return getattr(self._bar, attr)


def wrap_mmio(bar, value: str | None, device: str, blocks: Callable[[], Iterable] = tuple):
    """The BAR itself when the trace is off, else a TracedMMIO around it."""
    out = target(value, device)
    return bar if out is None else TracedMMIO(bar, out, device, blocks)
