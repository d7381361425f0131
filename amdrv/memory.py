"""VRAM physical memory: a page-granular allocator with a separate, deterministic boot region.

Layout, from the top of VRAM down:

    [vram_size - reserved_top, vram_size)   firmware's: IP discovery and the PSP's reserved area
    gap up to the 2 MiB boundary below it   left alone, so the boot region is 2 MiB aligned
    [boot_base, boot_end)                   boot region: firmware, TMR, rings, boot page tables
    [0, boot_base)                          heap

With a small BAR (`visible` < VRAM) the boot region ends at the top of the CPU-visible window instead,
and the VRAM above it up to the reserved top is heap too.

amdgpu reserves the top of VRAM (amdgpu_ttm_reserve_tmr: the VBIOS's reserved size, else
DISCOVERY_TMR_OFFSET). The boot region sits at a fixed place below it and is handed out by a bump
pointer, never freed, so the same sequence of boot allocations lands at the same addresses on every
boot: a warm boot finds what the previous run left where it left it.

Heap allocations are best fit with alignment. By default an allocation of 2 MiB or more is 2 MiB
aligned and one of 1 GiB or more 1 GiB aligned (falling back to smaller alignment when no such place is
free), so the page tables can map them with 2 MiB and 1 GiB pages.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from amdrv.discovery import DISCOVERY_TMR_OFFSET

PAGE = 4 << 10
HUGE = 2 << 20
GIANT = 1 << 30
BOOT_SIZE = 64 << 20


class VRAMError(Exception):
    """A misuse of VRAM memory: double free, freeing a boot block, a bad size or alignment."""


class VRAMExhausted(VRAMError, MemoryError):
    """No free range fits an allocation; the message names the request and the largest free block."""


@dataclass(frozen=True, eq=False)
class Block:
    """An allocation: VRAM byte offset, size (whole pages), what it is for, and whether it is boot
    memory. Identity matters: freeing a Block twice is an error even if its range was reallocated."""
    addr: int
    size: int
    tag: str = ""
    boot: bool = False

    @property
    def end(self) -> int:
        return self.addr + self.size

    def __repr__(self) -> str:
        kind = "boot " if self.boot else ""
        return f"<{kind}VRAM {self.addr:#x}+{self.size:#x} {self.tag}>"


def fmt_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"


class VRAMAllocator:
    def __init__(self, vram_size: int, *, boot_size: int = BOOT_SIZE, reserved_top: int = DISCOVERY_TMR_OFFSET,
                 visible: int | None = None):
        if vram_size % PAGE or vram_size <= 0:
            raise VRAMError(f"VRAM size {vram_size:#x} is not a positive multiple of {PAGE:#x}")
        self.vram_size = vram_size
        top = _align_down(vram_size - reserved_top, HUGE)
        # With a small BAR the CPU reaches VRAM past `visible` only through MM_INDEX/MM_DATA (three
        # register writes a dword): keep the boot region, which the CPU fills, inside the window.
        self.boot_end = min(top, _align_down(visible, HUGE)) if visible is not None else top
        self.boot_base = self.boot_end - _align_up(boot_size, HUGE)
        if self.boot_base <= 0:
            raise VRAMError(f"VRAM of {fmt_size(vram_size)} cannot hold a {fmt_size(boot_size)} boot region "
                            f"below the {fmt_size(reserved_top)} reserved at its top")
        self._boot_next = self.boot_base
        self._boot: list[Block] = []
        # free ranges, sorted and disjoint: parallel lists of starts and ends
        self._starts: list[int] = [0] + ([self.boot_end] if self.boot_end < top else [])
        self._ends: list[int] = [self.boot_base] + ([top] if self.boot_end < top else [])
        self._live: dict[int, Block] = {}
        self._in_use = 0
        self.heap_size = sum(e - s for s, e in zip(self._starts, self._ends))

    # ---------------------------------------------------------------- boot region
    def alloc_boot(self, size: int, align: int = PAGE, tag: str = "") -> Block:
        """Boot memory: the next aligned range of the boot region. Deterministic for a given sequence
        of calls; never freed."""
        size, align = _check(size, align)
        addr = _align_up(self._boot_next, align)
        if addr + size > self.boot_end:
            raise VRAMExhausted(f"boot region exhausted: {tag or 'allocation'} needs {fmt_size(size)} "
                                f"({size:#x}) aligned to {align:#x}, {fmt_size(self.boot_end - addr)} is left "
                                f"of {fmt_size(self.boot_end - self.boot_base)} at {self.boot_base:#x}; "
                                "raise boot_size")
        self._boot_next = addr + size
        block = Block(addr, size, tag, boot=True)
        self._boot.append(block)
        return block

    def boot_layout(self) -> list[tuple[str, int, int]]:
        """(tag, addr, size) of every boot allocation in order: what a warm boot must find again."""
        return [(b.tag, b.addr, b.size) for b in self._boot]

    @property
    def boot_used(self) -> int:
        return self._boot_next - self.boot_base

    # ---------------------------------------------------------------- heap
    def alloc(self, size: int, align: int | None = None, tag: str = "") -> Block:
        """A heap range of size bytes (rounded up to pages). align None picks 1 GiB / 2 MiB / 4 KiB from
        the size and falls back to smaller alignments when nothing that aligned is free."""
        if align is None:
            size, _ = _check(size, PAGE)
            aligns = [a for a in (GIANT, HUGE) if size >= a] + [PAGE]
        else:
            size, align = _check(size, align)
            aligns = [align]
        for a in aligns:
            at = self._best_fit(size, a)
            if at is not None:
                return self._take(at, size, tag)
        largest = max((e - s for s, e in zip(self._starts, self._ends)), default=0)
        free = sum(e - s for s, e in zip(self._starts, self._ends))
        raise VRAMExhausted(f"VRAM exhausted: cannot allocate {fmt_size(size)} ({size:#x}) aligned to "
                            f"{aligns[-1]:#x}{f' for {tag}' if tag else ''}: the largest free block is "
                            f"{fmt_size(largest)} ({largest:#x}); {fmt_size(free)} free in {len(self._starts)} "
                            f"block(s), {fmt_size(self._in_use)} in {len(self._live)} allocation(s)")

    def _best_fit(self, size: int, align: int) -> int | None:
        best = None  # (free range size, aligned address)
        for s, e in zip(self._starts, self._ends):
            a = _align_up(s, align)
            if a + size <= e and (best is None or e - s < best[0]):
                best = (e - s, a)
        return None if best is None else best[1]

    def _take(self, addr: int, size: int, tag: str) -> Block:
        i = bisect.bisect_right(self._starts, addr) - 1
        s, e = self._starts[i], self._ends[i]
        pieces = [(lo, hi) for lo, hi in ((s, addr), (addr + size, e)) if hi > lo]
        self._starts[i:i + 1] = [p[0] for p in pieces]
        self._ends[i:i + 1] = [p[1] for p in pieces]
        block = Block(addr, size, tag)
        self._live[addr] = block
        self._in_use += size
        return block

    def free(self, block: Block) -> None:
        if block.boot:
            raise VRAMError(f"{block} is boot memory, which is never freed (a warm boot reuses it)")
        if self._live.get(block.addr) is not block:
            raise VRAMError(f"free of {block}: not a live allocation of this allocator (double free?)")
        del self._live[block.addr]
        self._in_use -= block.size
        lo, hi = block.addr, block.end
        i = bisect.bisect_left(self._starts, lo)
        if i > 0 and self._ends[i - 1] == lo:  # merge with the free range below
            i -= 1
            lo = self._starts[i]
            del self._starts[i], self._ends[i]
        if i < len(self._starts) and self._starts[i] == hi:  # and the one above
            hi = self._ends[i]
            del self._starts[i], self._ends[i]
        self._starts.insert(i, lo)
        self._ends.insert(i, hi)

    def in_use(self) -> int:
        """Bytes of live heap allocations (boot memory not counted): 0 after everything is freed."""
        return self._in_use

    def allocations(self) -> list[Block]:
        """Live heap allocations by address, for leak reports."""
        return [self._live[a] for a in sorted(self._live)]

    def largest_free(self) -> int:
        return max((e - s for s, e in zip(self._starts, self._ends)), default=0)

    def free_ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends))

    def __repr__(self) -> str:
        return (f"<VRAMAllocator {fmt_size(self.vram_size)}: heap {fmt_size(self._in_use)} in use of "
                f"{fmt_size(self.heap_size)}, boot {fmt_size(self.boot_used)} of "
                f"{fmt_size(self.boot_end - self.boot_base)} at {self.boot_base:#x}>")


def _check(size: int, align: int) -> tuple[int, int]:
    if size <= 0:
        raise VRAMError(f"allocation size must be positive, got {size:#x}")
    if align <= 0 or align & (align - 1):
        raise VRAMError(f"alignment must be a power of two, got {align:#x}")
    return _align_up(size, PAGE), max(align, PAGE)


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) & -a


def _align_down(x: int, a: int) -> int:
    return x & -a
