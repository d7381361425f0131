"""gfx11 GPU page tables, built the way amdgpu builds them (amdgpu_vm_pt.c, gmc_v11_0.c).

Four levels cover a 48-bit address space (gmc_v11_0_sw_init: amdgpu_vm_adjust_size(256 TB, block size
9, 3 extra levels)): PDB2 -> PDB1 -> PDB0 -> PTB, each a 4 KiB table of 512 little-endian 64-bit entries.
A PTB entry maps 4 KiB; a PDB0 entry with AMDGPU_PDE_PTE maps 2 MiB and a PDB1 entry with it 1 GiB
(gfx11 does not "translate further", so gmc_v11_0_get_vm_pde leaves those bits alone).

As amdgpu_vm_ptes_update does, a range is cut into fragments: the largest power-of-two run that is
aligned at its start (here in the virtual and the physical address both) and fits the rest of the range.
The fragment decides the level (>= 2 MiB: PDB0, >= 1 GiB: PDB1) and goes into every entry's FRAG field.
System (host DMA) pages are mapped one 4 KiB PTE each with fragment 0, as amdgpu maps pages_addr ranges,
with SYSTEM and SNOOPED set. Unused entries hold what amdgpu_vm_pt_clear writes: PDE_PTE in directories,
EXECUTABLE in PTBs (its fault-priority workaround); neither is VALID.

Table memory comes from a VRAM allocator; entries reach VRAM through `write(vram_offset, data)`, one
bulk write per touched table per map/unmap (the span of changed entries), deepest level first so that
a directory never points at a table not yet written. Then `invalidate()` (the GMC's TLB flush) runs.

With `dma` (a `size -> DMABuffer` allocator, the GMC passes `alloc_dma` when the function's DMA memory is not
coherent: the USB bridge's SRAM window), new tables below the root live in system memory instead: one
4 KiB DMA buffer each, the entry pointing at one carrying its bus address with SYSTEM set (the hardware
walker reads the next table from system memory then, as it does for amdgpu's page-table BOs in GTT).
Their writes go into the buffer's host view and are `push`ed (the changed span; over USB one WRITE(16)
per table, queued with the posted writes, so they land before the invalidation's MMIO). The root stays
in VRAM (the caller's boot block: the context registers point at it across warm boots).
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from amdrv.autogen import gmc as G
from amdrv.memory import PAGE, Block

PDB2, PDB1, PDB0, PTB = G.AMDGPU_VM_PDB2, G.AMDGPU_VM_PDB1, G.AMDGPU_VM_PDB0, G.AMDGPU_VM_PTB
ENTRIES = 512
VA_BITS = 48
SHIFT = {PDB2: 39, PDB1: 30, PDB0: 21, PTB: 12}  # bytes an entry covers at each level, as a shift
# soc21_enum.h MTYPE (not generated; amdgpu_vm.h's AMDGPU_MTYPE_* are the Vega10 encoding)
MTYPE_NC, MTYPE_WC, MTYPE_CC, MTYPE_UC = 0, 1, 2, 3

VALID = G.AMDGPU_PTE_VALID
SYSTEM = G.AMDGPU_PTE_SYSTEM
SNOOPED = G.AMDGPU_PTE_SNOOPED
EXECUTABLE = G.AMDGPU_PTE_EXECUTABLE
READABLE = G.AMDGPU_PTE_READABLE
WRITEABLE = G.AMDGPU_PTE_WRITEABLE
PDE_PTE = G.AMDGPU_PDE_PTE
FRAG_SHIFT, FRAG_WIDTH = G.FIELDS["AMDGPU_PTE_FRAG"]
MTYPE_SHIFT = G.FIELDS["AMDGPU_PTE_MTYPE_NV10"][0]
MTYPE_MASK = G.AMDGPU_PTE_MTYPE_NV10_MASK
PTE_ADDR_MASK = ((1 << VA_BITS) - 1) & ~(PAGE - 1)   # gmc_v11_0.c: PTE 47:12
PDE_ADDR_MASK = ((1 << VA_BITS) - 1) & ~0x3F         # gmc_v11_0.c: PDE 47:6
RWX = READABLE | WRITEABLE | EXECUTABLE
# the permission-like bits a caller may choose; the rest of an entry is this module's to set
CALLER_FLAGS = RWX | G.AMDGPU_PTE_TMZ | G.AMDGPU_PTE_NOALLOC
INVALID = {PDB2: PDE_PTE, PDB1: PDE_PTE, PDB0: PDE_PTE, PTB: EXECUTABLE}
# fragments stop below a PDB2 entry (512 GiB): larger runs are split into 1 GiB pages
MAX_FRAG = SHIFT[PDB2] - SHIFT[PTB] - 1


class PageTableError(Exception):
    """A map or unmap the page tables cannot do: misaligned, out of range, overlapping, not mapped."""


class TableMemory(Protocol):
    def alloc(self, size: int, align: int | None = None, tag: str = "") -> Block: ...

    def free(self, block: Block) -> None: ...


@dataclass(frozen=True)
class Translation:
    """Where a GPU virtual address goes: addr is the VRAM offset (or bus address when system) of that
    byte, page_size and level the entry that maps it, pte the raw entry."""
    addr: int
    system: bool
    page_size: int
    level: int
    pte: int


@dataclass(frozen=True)
class Mapping:
    va: int
    size: int
    pa: int | tuple[int, ...]
    system: bool


class _Table:
    __slots__ = ("block", "buf", "level", "entries", "children", "used", "lo", "hi")

    def __init__(self, block: Block | None, level: int, buf=None):
        self.block, self.buf, self.level = block, buf, level  # buf: a DMA buffer (system memory) instead
        self.entries = [INVALID[level]] * ENTRIES
        self.children: dict[int, _Table] = {}
        self.used = 0              # entries that are VALID (leaves or directories)
        self.lo, self.hi = 0, ENTRIES  # dirty span: a new table is written whole


class PageTable:
    """One GPU virtual address space (a VMID's context); `page_table_base` is what the context's
    PAGE_TABLE_BASE_ADDR registers take. `root` places the root directory in a block the caller owns (boot memory,
    so that the context's registers stay valid across a warm boot); it is cleared, never freed, unless
    `root_clear` says it holds an all-invalid directory already (`clear_root` left it so). `dma` (a
    `size -> DMABuffer` allocator) puts the tables below the root in system memory (module docstring)."""

    def __init__(self, memory: TableMemory, write: Callable[[int, bytes], None],
                 invalidate: Callable[[], None], *, vram_base_offset: int = 0, name: str = "vm",
                 root: Block | None = None, root_clear: bool = False,
                 dma: Callable[[int], object] | None = None):
        self.memory, self._write, self._invalidate = memory, write, invalidate
        self._dma = dma
        self.vram_base_offset = vram_base_offset  # gmc_v11_0: vm_manager.vram_base_offset (MC FB offset)
        self.name = name
        self._dirty: set[_Table] = set()
        if root is not None and (root.addr % PAGE or root.size < PAGE):
            raise PageTableError(f"{name}: the root directory needs a 4 KiB-aligned block of 4 KiB, got {root}")
        self._own_root = root is None
        self.root = self._new_table(PDB2, root=True) if root is None else _Table(root, PDB2)
        if root is None or not root_clear:   # root_clear: the caller's block holds an all-invalid root
            self._dirty.add(self.root)      # already (a warm boot after clear_root), not written again
        self._starts: list[int] = []       # mapping starts, sorted
        self._maps: dict[int, Mapping] = {}
        self.writes = 0                     # bulk writes issued, for tests and benchmarks
        self._flush()

    @property
    def root_address(self) -> int:
        return self.root.block.addr + self.vram_base_offset

    @property
    def page_table_base(self) -> int:
        """The PAGE_TABLE_BASE_ADDR value: the root as a PDE (amdgpu_gmc_pd_addr), address | VALID."""
        return self.root_address | VALID

    def tables(self, system: bool | None = None) -> int:
        """Tables allocated now, the root included; system=True counts only those in DMA memory,
        False only those in VRAM."""
        def count(t):
            own = system is None or (t.buf is not None) == system
            return own + sum(count(c) for c in t.children.values())
        return count(self.root)

    def mappings(self) -> list[Mapping]:
        return [self._maps[s] for s in self._starts]

    # ---------------------------------------------------------------- map
    def map(self, va: int, pa: int | Sequence[int], size: int, system: bool = False, flags: int = RWX,
            mtype: int | None = None) -> None:
        """Maps [va, va+size) to VRAM offset pa, or to host bus address(es) when system. For system
        memory pa may be a sequence of 4 KiB page addresses (DMA buffers need not be contiguous).
        flags: any of READABLE, WRITEABLE, EXECUTABLE (default all), TMZ, NOALLOC. mtype defaults to NC
        for VRAM (gmc_v11_0_map_mtype's default) and UC for system memory (as amdgpu's GART maps it)."""
        self._check_range(va, size, "map")
        if flags & ~CALLER_FLAGS:
            raise PageTableError(f"{self.name}: map flags {flags:#x} include bits the page table sets "
                                 f"itself ({flags & ~CALLER_FLAGS:#x}); pass READABLE/WRITEABLE/EXECUTABLE/"
                                 "TMZ/NOALLOC and use system=/mtype=")
        if mtype is None:
            mtype = MTYPE_UC if system else MTYPE_NC
        if not 0 <= mtype <= MTYPE_MASK >> MTYPE_SHIFT:
            raise PageTableError(f"{self.name}: mtype {mtype} does not fit the 3-bit MTYPE field")
        npages = size // PAGE
        if isinstance(pa, int):
            pages = None
            self._check_pa(pa, size, system)
        else:
            if not system:
                raise PageTableError(f"{self.name}: a list of page addresses is only for system memory; "
                                     "VRAM mappings take one contiguous offset")
            pages = tuple(pa)
            if len(pages) != npages:
                raise PageTableError(f"{self.name}: map of {size:#x} bytes needs {npages} page addresses, "
                                     f"got {len(pages)}")
            for p in pages:
                self._check_pa(p, PAGE, system)
        self._check_free(va, size)

        bits = VALID | flags | (mtype << MTYPE_SHIFT) | (SYSTEM | SNOOPED if system else 0)
        try:
            if system:
                addrs = pages if pages is not None else [pa + i * PAGE for i in range(npages)]
                self._map_system(va, addrs, bits)
            else:
                self._map_vram(va, pa + self.vram_base_offset, npages, bits)
        except BaseException:
            # out of table memory part way: take back what this map entered, tables included
            self._clear(self.root, va, va + size)
            self._commit()
            raise
        m = Mapping(va, size, pa if pages is None else pages, system)
        bisect.insort(self._starts, va)
        self._maps[va] = m
        self._commit()

    def _map_vram(self, va: int, pa: int, npages: int, bits: int) -> None:
        vpfn, ppfn = va >> 12, pa >> 12
        while npages:
            level = _level(_frag(vpfn, ppfn, npages))
            t = self._table_for(vpfn << 12, level)
            step = 1 << (SHIFT[level] - 12)  # pages per entry at this level
            first = i = (vpfn << 12 >> SHIFT[level]) & (ENTRIES - 1)
            # consecutive fragments of the same level fill this table before the next is looked up
            while npages and i < ENTRIES:
                frag = _frag(vpfn, ppfn, npages)
                if _level(frag) != level:
                    break
                per = _entries_per_fragment(frag, level)
                count = per
                if frag == _ctz(vpfn ^ ppfn):
                    # va and pa differ at this bit, so every later fragment has this same size: fill the
                    # rest of the table at once (a 4 KiB-misaligned GiB is 262144 one-page fragments)
                    count = min(ENTRIES - i, (npages >> frag) * per)
                entry = bits | (frag << FRAG_SHIFT) | (PDE_PTE if level != PTB else 0)
                t.entries[i:i + count] = [entry | ((ppfn + k * step) << 12) for k in range(count)]
                i += count
                vpfn += count * step
                ppfn += count * step
                npages -= count * step
            if i == first:   # no entry written: the loop would come back to the same place forever
                raise PageTableError(f"{self.name}: internal error: mapping {vpfn << 12:#x} made no progress "
                                     f"at level {level}")
            t.used += i - first
            self._touch(t, first, i)

    def _map_system(self, va: int, addrs: Sequence[int], bits: int) -> None:
        done = 0
        while done < len(addrs):
            v = va + done * PAGE
            i = (v >> 12) & (ENTRIES - 1)
            count = min(ENTRIES - i, len(addrs) - done)
            t = self._table_for(v, PTB)
            t.entries[i:i + count] = [bits | a for a in addrs[done:done + count]]
            t.used += count
            self._touch(t, i, i + count)
            done += count

    def _table_for(self, va: int, level: int) -> _Table:
        """The table at `level` covering va, creating directories on the way."""
        t = self.root
        while t.level < level:
            i = (va >> SHIFT[t.level]) & (ENTRIES - 1)
            child = t.children.get(i)
            if child is None:
                child = self._new_table(t.level + 1)
                t.children[i] = child
                t.entries[i] = self._pde(child)
                t.used += 1
                self._touch(t, i, i + 1)
            t = child
        return t

    # ---------------------------------------------------------------- unmap
    def unmap(self, va: int, size: int) -> None:
        """Unmaps whole mappings covering exactly [va, va+size); empty tables go back to the allocator."""
        self._check_range(va, size, "unmap")
        end = va + size
        i = bisect.bisect_left(self._starts, va)
        at, gone = va, []
        while at < end:
            if i >= len(self._starts) or self._starts[i] != at:
                prev = self._maps.get(self._starts[i - 1]) if i > 0 else None
                if prev is not None and prev.va < at < prev.va + prev.size:
                    raise PageTableError(f"{self.name}: unmap {va:#x}+{size:#x} starts inside the mapping "
                                         f"{prev.va:#x}+{prev.size:#x}; unmap whole mappings")
                raise PageTableError(f"{self.name}: unmap {va:#x}+{size:#x}: {at:#x} is not mapped")
            m = self._maps[at]
            if m.va + m.size > end:
                raise PageTableError(f"{self.name}: unmap {va:#x}+{size:#x} ends inside the mapping "
                                     f"{m.va:#x}+{m.size:#x}; unmap whole mappings")
            gone.append(m)
            at += m.size
            i += 1
        self._clear(self.root, va, end)
        for m in gone:
            del self._maps[m.va]
        j = bisect.bisect_left(self._starts, va)
        del self._starts[j:j + len(gone)]
        self._commit()

    def _clear(self, t: _Table, lo: int, hi: int) -> None:
        """Invalidates the valid entries of [lo, hi) under t and frees the tables left empty."""
        shift = SHIFT[t.level]
        first, last = (lo >> shift) & (ENTRIES - 1), ((hi - 1) >> shift) & (ENTRIES - 1)
        base = lo >> (shift + 9) << (shift + 9)  # va of t's entry 0
        cleared = []
        for i in range(first, last + 1):
            child = t.children.get(i)
            if child is not None:
                e_lo = base + (i << shift)
                self._clear(child, max(lo, e_lo), min(hi, e_lo + (1 << shift)))
                if child.used:
                    continue
                self._free_table(child)
                del t.children[i]
            elif not t.entries[i] & VALID:
                continue
            t.entries[i] = INVALID[t.level]
            cleared.append(i)
        if cleared:
            t.used -= len(cleared)
            self._touch(t, cleared[0], cleared[-1] + 1)

    def clear_root(self) -> None:
        """Writes the root's valid entries back to invalid in VRAM (only the span that holds any), so the
        next owner of a caller-given root can pass root_clear=True instead of rewriting all 4 KiB. The
        driver's own view is left as it is: call it last, with the VM context no longer in use."""
        bad = INVALID[PDB2]
        valid = [i for i, e in enumerate(self.root.entries) if e != bad]
        if valid:
            lo, hi = valid[0], valid[-1] + 1
            self._write(self.root.block.addr + 8 * lo, struct.pack(f"<{hi - lo}Q", *[bad] * (hi - lo)))
            self.writes += 1

    def close(self) -> None:
        """Returns every table to the allocator, the root too unless the caller gave it (the mappings
        are forgotten, nothing is written: the VM context must already be disabled)."""
        def free(t):
            for c in t.children.values():
                free(c)
            if t is not self.root or self._own_root:
                self._release(t)
        free(self.root)
        self._dirty.clear()
        self._starts.clear()
        self._maps.clear()

    # ---------------------------------------------------------------- lookup
    def translate(self, va: int) -> Translation | None:
        """The driver's own view: walks its copy of the tables (not VRAM)."""
        if not 0 <= va < 1 << VA_BITS:
            return None
        t = self.root
        while True:
            i = (va >> SHIFT[t.level]) & (ENTRIES - 1)
            e = t.entries[i]
            if not e & VALID:
                return None
            if t.level == PTB or e & PDE_PTE:
                size = 1 << SHIFT[t.level]
                system = bool(e & SYSTEM)
                addr = (e & PTE_ADDR_MASK & ~(size - 1)) + (va & (size - 1))
                return Translation(addr if system else addr - self.vram_base_offset, system, size, t.level, e)
            t = t.children[i]

    # ---------------------------------------------------------------- internals
    def _new_table(self, level: int, root: bool = False) -> _Table:
        if self._dma is None or root:
            t = _Table(self.memory.alloc(PAGE, PAGE, tag=f"{self.name} page table L{level}"), level)
        else:
            try:
                buf = self._dma(PAGE)
            except Exception as e:
                raise PageTableError(
                    f"{self.name}: no DMA memory for a new level-{level} page table ({e}); page tables below "
                    "the root live in the function's DMA memory here (the USB bridge's SRAM window): free DMA "
                    "buffers or unmap GPU mappings no longer used") from e
            t = _Table(None, level, buf)
        self._dirty.add(t)   # written whole (all 512 entries) at the next flush
        return t

    def _pde(self, t: _Table) -> int:
        """The directory entry pointing at table t. In VRAM: its MC address (+ vram_base_offset) | VALID.
        In DMA memory: the bus address | VALID | SYSTEM, what amdgpu_gmc_get_pde_for_bo gives a page-table
        BO in GTT (amdgpu_ttm_tt_pde_flags; gmc_v11_0_get_vm_pde leaves a SYSTEM address as it is). No
        SNOOPED: amdgpu creates page-table BOs with AMDGPU_GEM_CREATE_CPU_GTT_USWC, write-combined rather
        than cached, and pde_flags sets SNOOPED only for cached TT memory (the bridge's SRAM is no CPU
        cache's to snoop either)."""
        if t.buf is not None:
            return t.buf.bus_address(0) | VALID | SYSTEM
        return (t.block.addr + self.vram_base_offset) | VALID

    def _release(self, t: _Table) -> None:
        if t.buf is not None:
            t.buf.free()
        else:
            self.memory.free(t.block)

    def _free_table(self, t: _Table) -> None:
        self._dirty.discard(t)
        self._release(t)

    def _touch(self, t: _Table, lo: int, hi: int) -> None:
        if t in self._dirty:
            t.lo, t.hi = min(t.lo, lo), max(t.hi, hi)
        else:
            t.lo, t.hi = lo, hi
            self._dirty.add(t)

    def _flush(self) -> None:
        for t in sorted(self._dirty, key=lambda t: (-t.level, t.buf is None, _where(t))):
            n = t.hi - t.lo
            if t.buf is not None:   # host view, then pushed: queued in order with the posted writes
                struct.pack_into(f"<{n}Q", t.buf.view, 8 * t.lo, *t.entries[t.lo:t.hi])
                t.buf.push(8 * t.lo, 8 * n)
            else:
                self._write(t.block.addr + 8 * t.lo, struct.pack(f"<{n}Q", *t.entries[t.lo:t.hi]))
            self.writes += 1
        self._dirty.clear()

    def _commit(self) -> None:
        if self._dirty:
            self._flush()
            self._invalidate()

    def _check_range(self, va: int, size: int, what: str) -> None:
        if size <= 0 or va % PAGE or size % PAGE:
            raise PageTableError(f"{self.name}: {what} {va:#x}+{size:#x}: address and size must be "
                                 f"positive multiples of 4 KiB")
        if va < 0 or va + size > 1 << VA_BITS:
            raise PageTableError(f"{self.name}: {what} {va:#x}+{size:#x} is outside the 48-bit GPU "
                                 "virtual address space")

    def _check_pa(self, pa: int, size: int, system: bool) -> None:
        what = "bus address" if system else "VRAM offset"
        base = 0 if system else self.vram_base_offset
        if pa % PAGE or pa < 0 or base + pa + size > 1 << VA_BITS:
            raise PageTableError(f"{self.name}: {what} {pa:#x} (+{size:#x}) is not a 4 KiB-aligned address "
                                 "within the 48 bits a PTE holds")

    def _check_free(self, va: int, size: int) -> None:
        i = bisect.bisect_left(self._starts, va + size)
        if i:
            m = self._maps[self._starts[i - 1]]
            if m.va + m.size > va:
                raise PageTableError(f"{self.name}: map {va:#x}+{size:#x} overlaps the mapping "
                                     f"{m.va:#x}+{m.size:#x}; unmap it first")


def _where(t: _Table) -> int:
    return t.buf.bus_address(0) if t.buf is not None else t.block.addr


def _frag(vpfn: int, ppfn: int, npages: int) -> int:
    """amdgpu_vm_pte_fragment's choice, with the physical address aligned too: the largest
    power-of-two run of pages aligned at its start that fits the rest of the range."""
    return min(_ctz(vpfn), _ctz(ppfn), npages.bit_length() - 1, MAX_FRAG)


def _level(frag: int) -> int:
    return PDB1 if frag >= SHIFT[PDB1] - SHIFT[PTB] else PDB0 if frag >= SHIFT[PDB0] - SHIFT[PTB] else PTB


def _entries_per_fragment(frag: int, level: int) -> int:
    """Entries of `level` one fragment of 2**frag pages fills. amdgpu_vm_ptes_update places a fragment only
    at a level whose entry is no larger than the fragment (frag < shift: it descends) and whose parent's
    entry is larger (frag >= parent_shift: it goes up); anything else is a bug in choosing the level, and
    is an error here: a fragment smaller than the entry would fill 0 entries and the map loop would never
    end, one as large as the parent's entry would write past the table's 512 entries."""
    shift = SHIFT[level] - SHIFT[PTB]
    parent = SHIFT[level - 1] - SHIFT[PTB] if level > PDB2 else VA_BITS
    if not shift <= frag < parent:
        raise PageTableError(f"internal error: a fragment of {(1 << frag) * PAGE:#x} bytes cannot be placed at "
                             f"level {level} (entries of {(1 << shift) * PAGE:#x} bytes, "
                             f"{(1 << shift) * PAGE:#x} <= fragment < {(1 << parent) * PAGE:#x} required, "
                             "amdgpu_vm_ptes_update)")
    return 1 << (frag - shift)


def _ctz(x: int) -> int:
    """Trailing zero bits; 0 counts as infinitely aligned (amdgpu's ffs(0) - 1 wraps around too)."""
    return (x & -x).bit_length() - 1 if x else 1 << 30
