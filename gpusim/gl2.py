"""The GC's caches between the shaders and memory: GL2 (write-back), GL1, and the L0 caches (vector L0,
scalar K$, instruction I$), with the GCR actions of ACQUIRE_MEM, RELEASE_MEM and SDMA's GCR_REQ.

Facts (gfx_v11_0.c, nvd.h, sdma_v6_0.c, sdma_v6_0_0_pkt_open.h, amdgpu_vm.h / soc21_enum.h MTYPE):
- Before each IB amdgpu invalidates every read cache and writes GL2 back (gfx_v11_0_emit_mem_sync:
  ACQUIRE_MEM GCR_CNTL GLI_INV(1), GLK_INV, GLV_INV, GL1_INV, GL2_INV, GL2_WB, GLM_INV/WB; the same bits
  in SDMA's GCR_REQ, sdma_v6_0_ring_emit_mem_sync), and its fence is a RELEASE_MEM whose GCR bits write
  GL2 back before the fence is written (gfx_v11_0_ring_emit_fence: GL2_WB, GL2_INV, GL1_INV, GLV_INV, GLM).
  GCR_CNTL bits: GLI_INV 1:0, GLK_WB 6, GLK_INV 7, GLV_INV 8, GL1_INV 9, GL2_DISCARD 13, GL2_INV 14,
  GL2_WB 15 (nvd.h PACKET3_ACQUIRE_MEM_GCR_CNTL_*, SDMA_GCR_*); RELEASE_MEM dword 1: GLV_INV 14, GL1_INV 15,
  GL2_DISCARD 19, GL2_INV 20, GL2_WB 21 (PACKET3_RELEASE_MEM_GCR_*).
- A page's MTYPE (PTE bits 50:48) decides whether GL2 caches it: UC (3) is not cached in GL2 (the
  driver maps host memory snooped UC, as amdgpu's GART); NC/RW/CC are.

Model (the rest is assumption, chosen so that a missing flush or invalidate gives a wrong result, never
so that a correct upstream sequence does):
- Shader loads fill the L0 cache of their kind (vector, scalar, instruction), GL1 and, for cacheable
  memory, GL2; a later load is answered by the first level holding the line, so what the host (or HDP)
  changed underneath stays invisible until the levels holding it are invalidated. One instance of each
  level stands for all of them (all CUs' L0s, all GL1s), with a capacity of the chip's totals; lines are
  128 bytes (GL2, GL1, vector L0) and 64 bytes (K$, I$), as the RDNA whitepaper gives them.
- Shader stores and atomics to cacheable memory stay dirty in GL2 (byte masks) until GL2_WB or an
  eviction writes them back; to UC memory they go through. A store drops its lines from GL1 and the
  vector L0; K$ and I$ are not coherent with stores.
- The CP and SDMA read through GL2 (they see its dirty bytes) without filling it, and write through to
  memory, updating GL2's copies: GL2 is the GPU's point of coherence. The host (BAR0 via the HDP, DMA
  memory) sees memory only, so results in GL2 are invisible to it until written back.
- GL2_INV drops clean lines and keeps dirty bytes (assumption: a plain invalidate never loses data);
  GL2_DISCARD drops dirty bytes; write-back precedes invalidation in one request. Ranges (GL2_RANGE,
  GL1_RANGE, ACQUIRE_MEM COHER_BASE/SIZE, GCR_REQ BASE/LIMIT) are not modeled: every action covers the
  whole cache (what upstream always asks for).
- Eviction is oldest page first (deterministic); evicting dirty bytes writes them back.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from gpusim.device import Block

PAGE = 4096
MTYPE_UC = 3                 # soc21_enum.h MTYPE
MTYPE_SHIFT = 48
# GCR_CNTL bits of ACQUIRE_MEM and SDMA GCR_REQ (nvd.h, sdma_v6_0_0_pkt_open.h)
GLI_INV, GLK_INV, GLV_INV, GL1_INV = 0x3, 1 << 7, 1 << 8, 1 << 9
GL2_DISCARD, GL2_INV, GL2_WB = 1 << 13, 1 << 14, 1 << 15
# RELEASE_MEM dword 1 (nvd.h PACKET3_RELEASE_MEM_GCR_*)
REL_GLV_INV, REL_GL1_INV, REL_GL2_DISCARD, REL_GL2_INV, REL_GL2_WB = 1 << 14, 1 << 15, 1 << 19, 1 << 20, 1 << 21
# capacities in bytes (Navi31 totals: 96 CUs x 16 KiB vector L0, 48 WGPs x 16 KiB K$ and 32 KiB I$,
# 12 x 256 KiB GL1, 6 MiB GL2)
CAPACITY = {"v": 96 * 16 << 10, "k": 48 * 16 << 10, "i": 48 * 32 << 10, "gl1": 12 * 256 << 10, "gl2": 6 << 20}
LINE = {"v": 128, "k": 64, "i": 64, "gl1": 128, "gl2": 128}


class _Level:
    """Lines of one cache level: page key (system, physical page) -> {line index: bytes}, oldest page
    first; `dirty` (GL2 only): page key -> {line index: bytearray byte mask}."""

    def __init__(self, name: str):
        self.name, self.line = name, LINE[name]
        self.per_page = PAGE // self.line
        self.cap = CAPACITY[name] // self.line
        self.pages: OrderedDict = OrderedDict()
        self.count = 0

    def clear(self) -> None:
        self.pages.clear()
        self.count = 0


class GL2(Block):
    name = "GL2"

    def reset(self) -> None:
        self.levels = {n: _Level(n) for n in ("v", "k", "i", "gl1", "gl2")}
        self.dirty: dict = {}            # page key -> {line: bytearray mask} of GL2's dirty bytes
        self.actions: list[str] = []     # the last few GCR requests, for tests and error messages

    # -- memory underneath ----------------------------------------------------------------------------------
    def _mem_read(self, key, off: int, n: int) -> bytes:
        system, page = key
        return self.dev.blocks["GMC"]._phys_read(system, page + off, n)

    def _mem_write(self, key, off: int, data: bytes) -> None:
        system, page = key
        self.dev.blocks["GMC"]._phys_write(system, page + off, data)

    # -- shader accesses (gpusim.dispatch) ---------------------------------------------------------------
    def overlay(self, kind: str, key, buf: np.ndarray) -> None:
        """buf (a page's bytes as memory holds them) becomes what a load of `kind` ("v", "k", "i"; "w" for
        a store's read-modify-write, which sees GL2 only) finds: GL2, then GL1, then the L0 of its kind."""
        order = ("gl2",) if kind == "w" else ("gl2", "gl1", kind)
        for name in order:
            lv = self.levels[name]
            lines = lv.pages.get(key)
            if lines:
                size = lv.line
                for i, data in lines.items():
                    buf[i * size:(i + 1) * size] = np.frombuffer(data, np.uint8)

    def fill(self, kind: str, key, pte: int, buf: np.ndarray, granules: list[int]) -> None:
        """A load of `kind` touched the 64-byte granules `granules` of the page whose bytes (as found) are
        buf: their lines enter the L0 of that kind, GL1 and (unless MTYPE UC) GL2."""
        names = (kind, "gl1") if (pte >> MTYPE_SHIFT) & 7 == MTYPE_UC else (kind, "gl1", "gl2")
        for name in names:
            lv = self.levels[name]
            size = lv.line
            lines = lv.pages.get(key)
            if lines is None:
                lines = lv.pages[key] = {}
                if lv.count >= lv.cap:
                    self._evict(lv)
            for i in {g * 64 // size for g in granules}:
                if i not in lines:
                    lines[i] = buf[i * size:(i + 1) * size].tobytes()
                    lv.count += 1

    def store(self, key, pte: int, off: int, data: bytes) -> None:
        """A shader store or atomic result: dirty in GL2 for cacheable memory, else through to memory."""
        v, g1 = self.levels["v"], self.levels["gl1"]
        for lv in (v, g1):
            lines = lv.pages.get(key)
            if lines:
                for i in range(off // lv.line, (off + len(data) - 1) // lv.line + 1):
                    if lines.pop(i, None) is not None:
                        lv.count -= 1
        if (pte >> MTYPE_SHIFT) & 7 == MTYPE_UC:
            self.write_through(key, off, data)
            return
        l2 = self.levels["gl2"]
        lines = l2.pages.get(key)
        if lines is None:
            lines = l2.pages[key] = {}
            if l2.count >= l2.cap:
                self._evict(l2)
        masks = self.dirty.setdefault(key, {})
        end = off + len(data)
        for i in range(off // 128, (end - 1) // 128 + 1):
            a, b = max(off, i * 128), min(end, (i + 1) * 128)
            line = lines.get(i)
            if line is None:
                line = self._mem_read(key, i * 128, 128)
                l2.count += 1
            line = bytearray(line)
            line[a - i * 128:b - i * 128] = data[a - off:b - off]
            lines[i] = bytes(line)
            mask = masks.setdefault(i, bytearray(128))
            mask[a - i * 128:b - i * 128] = b"\x01" * (b - a)

    # -- the CP and SDMA (coherent GL2 clients, through gpusim.gmc) ------------------------------------------
    def coherent_read(self, key, off: int, data: bytes) -> bytes:
        """What the CP/SDMA read at [off, off + len) of a page: memory with GL2's lines over it."""
        lines = self.levels["gl2"].pages.get(key)
        if not lines:
            return data
        out = bytearray(data)
        end = off + len(data)
        for i, line in lines.items():
            a, b = max(off, i * 128), min(end, (i + 1) * 128)
            if a < b:
                out[a - off:b - off] = line[a - i * 128:b - i * 128]
        return bytes(out)

    def write_through(self, key, off: int, data: bytes) -> None:
        """A CP/SDMA write (or a UC store): to memory, and into GL2's copies (those bytes are clean then)."""
        self._mem_write(key, off, data)
        lines = self.levels["gl2"].pages.get(key)
        if not lines:
            return
        masks = self.dirty.get(key, {})
        end = off + len(data)
        for i in list(lines):
            a, b = max(off, i * 128), min(end, (i + 1) * 128)
            if a < b:
                line = bytearray(lines[i])
                line[a - i * 128:b - i * 128] = data[a - off:b - off]
                lines[i] = bytes(line)
                if i in masks:
                    masks[i][a - i * 128:b - i * 128] = bytes(b - a)

    # -- GCR actions -----------------------------------------------------------------------------------------
    def gcr(self, cntl: int, by: str) -> None:
        """An ACQUIRE_MEM GCR_CNTL or SDMA GCR_REQ GCR_CONTROL value."""
        self._act(by, gli=bool(cntl & GLI_INV), glk=bool(cntl & GLK_INV), glv=bool(cntl & GLV_INV),
                  gl1=bool(cntl & GL1_INV), wb=bool(cntl & GL2_WB), inv=bool(cntl & GL2_INV),
                  discard=bool(cntl & GL2_DISCARD))

    def release(self, event_dword: int, by: str) -> None:
        """RELEASE_MEM's cache actions (its dword 1), done before its data is written."""
        d = event_dword
        self._act(by, gli=False, glk=False, glv=bool(d & REL_GLV_INV), gl1=bool(d & REL_GL1_INV),
                  wb=bool(d & REL_GL2_WB), inv=bool(d & REL_GL2_INV), discard=bool(d & REL_GL2_DISCARD))

    def _act(self, by: str, *, gli, glk, glv, gl1, wb, inv, discard) -> None:
        done = [n for n, on in (("GLI_INV", gli), ("GLK_INV", glk), ("GLV_INV", glv), ("GL1_INV", gl1),
                                ("GL2_WB", wb), ("GL2_INV", inv), ("GL2_DISCARD", discard)) if on]
        self.actions = (self.actions + [f"{by}: {' '.join(done) or 'none'}"])[-8:]
        for flag, name in ((gli, "i"), (glk, "k"), (glv, "v"), (gl1, "gl1")):
            if flag:
                self.levels[name].clear()
        if wb:
            self.write_back()
        if discard:
            self.dirty.clear()
        if inv:
            self._invalidate_gl2()

    def write_back(self) -> None:
        """Every dirty byte of GL2 to memory; the lines stay, clean."""
        l2 = self.levels["gl2"].pages
        for key, masks in self.dirty.items():
            lines = l2.get(key, {})
            for i, mask in masks.items():
                self._write_masked(key, i, lines.get(i), mask)
        self.dirty.clear()

    def _write_masked(self, key, i: int, line: bytes | None, mask: bytearray) -> None:
        if line is None or not any(mask):
            return
        m = np.frombuffer(mask, np.uint8).astype(bool)
        if m.all():
            self._mem_write(key, i * 128, line)
            return
        idx = np.flatnonzero(m)
        runs = np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1)
        for r in runs:
            a, b = int(r[0]), int(r[-1]) + 1
            self._mem_write(key, i * 128 + a, line[a:b])

    def _invalidate_gl2(self) -> None:
        l2 = self.levels["gl2"]
        kept = OrderedDict()
        count = 0
        for key, masks in self.dirty.items():      # dirty lines survive a plain invalidate
            lines = l2.pages.get(key, {})
            keep = {i: lines[i] for i in masks if i in lines and any(masks[i])}
            if keep:
                kept[key] = keep
                count += len(keep)
        l2.pages, l2.count = kept, count

    def _evict(self, lv: _Level) -> None:
        key, lines = lv.pages.popitem(last=False)
        lv.count -= len(lines)
        if lv.name == "gl2":
            for i, mask in self.dirty.pop(key, {}).items():
                self._write_masked(key, i, lines.get(i), mask)

    @property
    def dirty_bytes(self) -> int:
        return sum(sum(m) for masks in self.dirty.values() for m in masks.values())
