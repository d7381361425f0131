"""Kernel dispatch on the simulated GPU: what the compute pipe does with a DISPATCH_DIRECT, from its
registers, on the wave executor, with memory through the GPU page tables.

Facts (gc_11_0_0 registers; LLVM AMDGPUUsage for what the hardware loads into a wave):
- COMPUTE_PGM_LO/HI hold the code address >> 8. COMPUTE_PGM_RSRC1.VGPRS is the VGPR granule count
  (granules of 8 in wave32), RSRC2.USER_SGPR how many of COMPUTE_USER_DATA_0..15 are loaded into s0..,
  TGID_X/Y/Z_EN the workgroup-id SGPRs that follow them, TIDIG_COMP_CNT the work-item id dimensions
  packed in v0 (x | y << 10 | z << 20 on gfx11), LDS_SIZE the LDS per workgroup in 512-byte granules
  (128 dwords, AMDGPUUsage's gfx7-gfx11 granularity), SCRATCH_EN private memory, whose size per wave
  COMPUTE_TMPRING_SIZE.WAVESIZE gives (in 256-byte units).
- COMPUTE_NUM_THREAD_X/Y/Z.NUM_THREAD_FULL is the workgroup size; DISPATCH_DIRECT's dimensions count
  workgroups unless COMPUTE_DISPATCH_INITIATOR.USE_THREAD_DIMENSIONS; CS_W32_EN selects wave32;
  COMPUTE_START_X/Y/Z is the first workgroup id unless FORCE_START_AT_000.
The hardware does not know what the user data mean (kernarg pointer, dispatch pointer): a kernel whose
user SGPRs the driver did not set up as its descriptor expects reads whatever was written there.

Simulator choices: wave64 dispatches are not modeled (the queue hangs, saying so); private memory is the
scratch buffer at COMPUTE_DISPATCH_SCRATCH_BASE, a TMPRING_SIZE.WAVESIZE slot per wave (slot assignment
and lane interleaving assumed: rdna3.wave_memory.ScratchSpace); GPU time is DISPATCH_NS plus
WAVE_INSTRUCTION_NS per executed wave instruction.
"""
from __future__ import annotations

import numpy as np

from rdna3.wave import ExecError, launch_regs_steps
from rdna3.wave_memory import ByteSpace, MemoryFault
from gpusim.device import DMAError
from gpusim.gmc import VMFault

U8, U32, U64 = np.uint8, np.uint32, np.uint64
PAGE = 4096
LDS_GRANULE = 512
SCRATCH_WAVE_UNIT = 256
# GC hub fault client ids (gfxhub_v3_0.c gfxhub_client_ids): shader memory goes through TCP, instruction
# fetch through the SQC's instruction side
CLIENT_TCP, CLIENT_SQC_INST = 8, 9
# SH_MEM_CONFIG.ALIGNMENT_MODE (navi10_enum.h SH_MEM_ALIGNMENT_MODE_*): what a vector memory access at an
# address that is not a multiple of its size does. gfx_v11_0.c's DEFAULT_SH_MEM_CONFIG asks for UNALIGNED,
# which LLVM's amdhsa targets rely on (unaligned-access-mode: clang emits a dword load for a pointer it
# assumes aligned, whatever the address at run time). DWORD: "for Dword or larger reads or writes, the two
# LSBs of the byte-address are ignored, thus forcing Dword alignment" (the GCN ISA manual, 8.1.6, as quoted
# in LLVM's SIISelLowering allowsMisalignedMemoryAccesses), and a smaller access is aligned to its size.
# DWORD_STRICT/STRICT: the misaligned access is refused as a memory violation (assumption: the names say the
# alignment is enforced; the manual's wording is not in the sources at hand).
ALIGN_DWORD, ALIGN_DWORD_STRICT, ALIGN_STRICT, ALIGN_UNALIGNED = 0, 1, 2, 3
DISPATCH_NS = 2000               # launch overhead of one dispatch
WAVE_INSTRUCTION_NS = 0.05       # ~4 cycles at 2.5 GHz over the 192 SIMDs of Navi31, in parallel


class VMMemory:
    """The wave executor's memory interface (rdna3.wave_memory) over one VMID of the GC hub: every
    access translates its pages through gmc.translate, so unmapped or protected pages fault the way the
    hardware reports it (fault registers, IH entry). The VMFault is kept in `fault`."""

    def __init__(self, gmc, vmid: int, client: int = CLIENT_TCP, alignment: int = ALIGN_UNALIGNED):
        self.gmc, self.vmid, self.client = gmc, vmid, client
        self.alignment = alignment             # SH_MEM_CONFIG.ALIGNMENT_MODE of the dispatching VMID
        self.caches = gmc.dev.blocks["GL2"]    # loads, stores and fetches go through gpusim.gl2
        self.fault: Exception | None = None
        # (page, write, execute) -> Translation: nothing can invalidate the TLB while a dispatch runs
        # (the driver waits for it), so one lookup per page and kind of access is enough
        self._seen: dict[tuple[int, bool, bool], object] = {}

    def _pages(self, addrs: np.ndarray, size: int, write: bool, execute: bool = False, kind: str = "v"):
        """A ByteSpace holding every page the accesses touch (in page order, so an access that runs into
        the next page continues in it), as the caches of `kind` answer a load ("v" vector, "k" scalar,
        "i" instruction; a store sees GL2 only), the accesses' offsets in it, and the translations. A load
        fills the caches with the lines it touched."""
        addrs = np.asarray(addrs, U64).reshape(-1)
        first = addrs >> U64(12)
        pages = np.unique(np.concatenate([first, (addrs + U64(size - 1)) >> U64(12)]))
        trans = []
        seen = self._seen
        for p in pages.tolist():
            t = seen.get((p, write, execute))
            if t is None:
                va = p << 12
                client = CLIENT_SQC_INST if execute else self.client
                try:
                    t = self.gmc.translate(self.vmid, va, write=write, execute=execute, client=client)
                    # a fault answered with the default page: the wave carries on with it or stops, per
                    # GL1C_UTCL0_CNTL1.RESP_FAULT_MODE (gpusim.gmc.GMC.client_halts)
                    if t.fault is not None and self.gmc.client_halts("GC", client):
                        raise t.fault
                except (VMFault, DMAError) as e:
                    self.fault = e
                    raise MemoryFault("global", va, size, write, str(e)) from None
                seen[(p, write, execute)] = t
            trans.append(t)
        space = ByteSpace(len(pages) * PAGE, "global")
        caches = self.caches
        answer = "w" if write else kind
        for i, t in enumerate(trans):
            try:
                space.u8[i * PAGE:(i + 1) * PAGE] = np.frombuffer(self.gmc._phys_read(t.system, t.addr, PAGE), U8)
            except DMAError as e:
                self.fault = e
                raise MemoryFault("global", pages[i].item() << 12, size, write, str(e)) from None
            caches.overlay(answer, (t.system, t.addr), space.u8[i * PAGE:(i + 1) * PAGE])
        off = np.searchsorted(pages, first).astype(np.int64) * PAGE + (addrs & U64(PAGE - 1)).astype(np.int64)
        if not write:   # the 64-byte granules the accesses touched (a load of <= 64 bytes spans at most two)
            if size <= 64:
                granules = np.unique(np.concatenate([off >> 6, (off + size - 1) >> 6])).tolist()
            else:       # instruction fetch: one address, many bytes
                granules = sorted({g for o in off.tolist() for g in range(o >> 6, ((o + size - 1) >> 6) + 1)})
            per_page = PAGE >> 6
            for i, t in enumerate(trans):
                mine = [g - i * per_page for g in granules if g // per_page == i]
                if mine:
                    caches.fill(kind, (t.system, t.addr), t.pte, space.u8[i * PAGE:(i + 1) * PAGE], mine)
        return space, off, trans

    def _write_back(self, space, off, size, trans) -> None:
        lo = off // PAGE
        for i, t in enumerate(trans):
            sel = off[(lo == i) | ((off + size - 1) // PAGE == i)]
            a = max(int(sel.min()), i * PAGE) if sel.size else i * PAGE
            b = min(int(sel.max()) + size, (i + 1) * PAGE) if sel.size else i * PAGE
            if b > a:
                self.caches.store((t.system, t.addr), t.pte, a - i * PAGE, space.u8[a:b].tobytes())

    def _aligned(self, addrs, size: int, write: bool):
        """The addresses a vector load or store really uses under SH_MEM_CONFIG.ALIGNMENT_MODE (see
        ALIGN_DWORD above): UNALIGNED as given, DWORD with the low bits below min(size, 4) dropped, the
        strict modes refuse a misaligned access."""
        if self.alignment == ALIGN_UNALIGNED or size <= 1:
            return addrs
        addrs = np.asarray(addrs, U64).reshape(-1)
        unit = min(size, 4) if self.alignment != ALIGN_STRICT else size
        low = addrs & U64(unit - 1)
        if not np.any(low):
            return addrs
        if self.alignment == ALIGN_DWORD:
            return addrs & ~U64(unit - 1)
        bad = int(addrs[low != 0][0])
        raise MemoryFault("global", bad, size, write, f"not {unit}-byte aligned, and SH_MEM_CONFIG.ALIGNMENT_MODE "
                          f"of VMID {self.vmid} is {self.alignment} (strict): a memory violation")

    def load(self, addrs, size):
        if len(addrs) == 0:
            return np.zeros((0, max(1, size // 4)), U32)
        addrs = self._aligned(addrs, size, False)
        space, off, _ = self._pages(addrs, size, False)
        return space.load(off, size)

    def load_scalar(self, addrs, size):
        """A scalar (SMEM) load: through the K$ rather than the vector L0."""
        if len(addrs) == 0:
            return np.zeros((0, max(1, size // 4)), U32)
        space, off, _ = self._pages(addrs, size, False, kind="k")
        return space.load(off, size)

    def store(self, addrs, data, size):
        if len(addrs) == 0:
            return
        addrs = self._aligned(addrs, size, True)
        space, off, trans = self._pages(addrs, size, True)
        space.store(off, np.asarray(data, U32).reshape(len(off), -1), size)
        self._write_back(space, off, size, trans)

    def atomic(self, op, addrs, data, dtype, cmp=None):
        size = np.dtype(dtype).itemsize
        space, off, trans = self._pages(addrs, size, True)
        out = space.atomic(op, off, data, dtype, cmp)
        self._write_back(space, off, size, trans)
        return out

    def fetch(self, addr: int, n: int) -> bytes:
        """Instruction fetch (execute permission), within one page."""
        space, off, _ = self._pages(np.array([addr], U64), n, False, execute=True, kind="i")
        return space.u8[off[0]:off[0] + n].tobytes()


class DispatchFailed(Exception):
    """The dispatch did not complete: `hang` says why; `fault` is the VMFault when one caused it."""

    def __init__(self, why: str, instructions: int = 0, fault=None, running: bool = False, waves=()):
        super().__init__(why)
        self.why, self.instructions, self.fault, self.running = why, instructions, fault, running
        self.waves = list(waves)     # the stopped waves as the SQ shows them (gpusim.sq)


# TRAPSTS.ILLEGAL_INST (gc_11_0_0_sh_mask.h): the bit an instruction the hardware cannot decode sets
TRAPSTS_ILLEGAL_INST = 1 << 11


def stopped_waves(e: ExecError) -> list[dict]:
    """The waves an ExecError stopped, as gpusim.sq holds them: halted at the PC, except those of a dispatch
    stopped for running too long (resident, still running there)."""
    trapsts = TRAPSTS_ILLEGAL_INST if e.kind == "illegal" else 0
    execs = e.execs or [0] * len(e.waves)
    modes = e.modes or [0] * len(e.waves)
    return [{"pc": e.pc, "exec": x, "halt": e.kind != "running", "trapsts": trapsts, "id": w, "mode": m}
            for w, x, m in zip(e.waves, execs, modes)]


def run_dispatch(dev, sh: dict, dims, initiator: int, vmid: int, max_steps: int, apertures=(0, 0),
                 alignment: int = ALIGN_UNALIGNED):
    """Runs one DISPATCH_DIRECT with the SH registers `sh` (register name -> value) in `vmid`'s address
    space, with `apertures` = (shared, private) flat aperture bases from that VMID's SH_MEM_BASES;
    and `alignment` its SH_MEM_CONFIG.ALIGNMENT_MODE; returns (instructions, waves) or raises DispatchFailed."""
    gen = dispatch_steps(dev, sh, dims, initiator, vmid, max_steps, apertures, alignment=alignment)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


def dispatch_steps(dev, sh: dict, dims, initiator: int, vmid: int, max_steps: int, apertures=(0, 0),
                   slice_steps: int | None = None, alignment: int = ALIGN_UNALIGNED):
    """run_dispatch as a generator that yields after each `slice_steps` executor steps: the CP runs a long
    dispatch across several of the GPU's clock steps while the host goes on (polls, other queues)."""
    t = dev.table("GC")
    ini = t["COMPUTE_DISPATCH_INITIATOR"].decode(initiator)
    if not ini["COMPUTE_SHADER_EN"]:
        return 0, 0
    if not ini["CS_W32_EN"]:
        raise DispatchFailed("a wave64 dispatch (COMPUTE_DISPATCH_INITIATOR.CS_W32_EN=0): not modeled by the "
                             "wave32 executor")
    block = tuple(t["COMPUTE_NUM_THREAD_" + a].decode(sh.get("COMPUTE_NUM_THREAD_" + a, 0))["NUM_THREAD_FULL"]
                  for a in "XYZ")
    if 0 in block:
        raise DispatchFailed(f"COMPUTE_NUM_THREAD_X/Y/Z = {block}: a workgroup of no work-items")
    dims = tuple(int(d) for d in dims)
    if 0 in dims:
        return 0, 0
    grid = dims if ini["USE_THREAD_DIMENSIONS"] else tuple(d * b for d, b in zip(dims, block))
    start = (0, 0, 0) if ini["FORCE_START_AT_000"] else tuple(sh.get("COMPUTE_START_" + a, 0) for a in "XYZ")
    code = (sh.get("COMPUTE_PGM_LO", 0) | (sh.get("COMPUTE_PGM_HI", 0) & 0xFF) << 32) << 8
    rsrc1, rsrc2, rsrc3 = (sh.get(f"COMPUTE_PGM_RSRC{i}", 0) for i in (1, 2, 3))
    r2 = t["COMPUTE_PGM_RSRC2"].decode(rsrc2)
    lds = r2["LDS_SIZE"] * LDS_GRANULE
    private, scratch = 0, None
    if r2["SCRATCH_EN"]:
        # the waves' private memory: a slot of WAVESIZE x 256 bytes per wave, of WAVES slots, in the buffer
        # at COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI (address bits 47:8, as COMPUTE_PGM_LO/HI) (gc_11_0_0 fields;
        # rdna3.wave_memory.ScratchSpace says what is assumed)
        ring = t["COMPUTE_TMPRING_SIZE"].decode(sh.get("COMPUTE_TMPRING_SIZE", 0))
        private = ring["WAVESIZE"] * SCRATCH_WAVE_UNIT // 32
        base = (sh.get("COMPUTE_DISPATCH_SCRATCH_BASE_LO", 0) | (sh.get("COMPUTE_DISPATCH_SCRATCH_BASE_HI", 0) & 0xFF)
                << 32) << 8
        if not ring["WAVES"]:
            raise DispatchFailed("COMPUTE_PGM_RSRC2.SCRATCH_EN with COMPUTE_TMPRING_SIZE.WAVES 0: no scratch slot "
                                 "for any wave (assumption: the SPI launches none)")
        scratch = (base, ring["WAVESIZE"] * SCRATCH_WAVE_UNIT, ring["WAVES"])
    user = [sh.get(f"COMPUTE_USER_DATA_{i}", 0) for i in range(16)]
    mem = VMMemory(dev.blocks["GMC"], vmid, alignment=alignment)
    try:
        r = yield from launch_regs_steps(code, mem, grid, block, user, rsrc1, rsrc2, rsrc3, lds, private,
                                         name=f"kernel@{code:#x}", max_steps=max_steps, wg_offset=start,
                                         apertures=apertures, slice_steps=slice_steps, scratch=scratch)
    except ExecError as e:
        done = getattr(e, "instructions", 0)
        if mem.fault is not None:
            raise DispatchFailed(f"kernel at {code:#x} faulted: {e}", done, mem.fault, waves=stopped_waves(e)) from None
        running = e.kind == "running"
        raise DispatchFailed(f"kernel at {code:#x}: {e}", done, running=running, waves=stopped_waves(e)) from None
    except ValueError as e:
        raise DispatchFailed(f"kernel at {code:#x}: {e}") from None
    return r.instructions, r.waves


def work_ns(instructions: int) -> int:
    return DISPATCH_NS + int(instructions * WAVE_INSTRUCTION_NS)
