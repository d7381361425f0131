"""A wave32 RDNA3 (gfx11) executor.

Waves run in lockstep groups: one `Waves` object holds the register files of W waves as arrays
(SGPRs [row, wave], VGPRs [reg, wave, lane]) that share one program counter, so one numpy
operation executes an instruction for every lane of every wave in the group. A scalar branch that
goes different ways in different waves splits the group; the scheduler runs the group with the
lowest PC and merges groups that meet at one PC, which is where structured control flow
reconverges, and lets a group that keeps looping at the lowest PC yield to the others now and then
(a spin on a flag another workgroup sets). s_barrier parks waves until all live waves of their
workgroup are parked.

Each instruction is decoded once per code address (rdna3.decode) and compiled into a closure
specialized for its operands; the run loop only calls closures. Global memory goes through the
interface described in rdna3/wave_memory.py; LDS is one ByteSpace with a slot per workgroup,
private memory one with a segment per work-item, and flat addresses are routed by aperture.

Faults are exceptions: `ExecError` names the PC, the kernel and offset, the instruction and the
waves, for an undecodable or unsupported instruction, a memory access outside what is mapped
(global) or allocated (LDS, private), a register beyond the kernel's allocation, running into the
padding after the code, or a dispatch that does not finish.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from rdna3.wave_compile import (BARRIER, BRANCH, CBR, END, EXEC, IBR, MODE, N_SROWS, OP, PRIVATE_HI, SHARED_HI,
                                    Unsupported, compile_instruction, pack_lanes, unpack_lanes)
from rdna3.wave_memory import ByteSpace, FlatMemory, MemoryFault, ScratchSpace

U32, U64 = np.uint32, np.uint64
# encoding bits 31:26 of the RDNA3 formats rdna3 does not decode: MTBUF 111010, MIMG 111100, EXP 111110
# (RDNA3 ISA, "Microcode Formats"); VINTERP and LDSDIR are bits 31:24 = 0xCD, 0xCE
UNDECODED_FORMATS = (0x3A, 0x3C, 0x3E)


class ExecError(RuntimeError):
    """An instruction the executor cannot or must not execute; names the PC and instruction."""

    # kind: "illegal" (no gfx11 instruction decodes there), "unsupported" (an instruction the executor
    # does not model), "fault" (a memory access), "running" (out of steps: hung), "error" (anything else)
    def __init__(self, pc: int, text: str, why: str, waves=None, where: str = "", kind: str = "error",
                 execs=None, modes=None):
        self.pc, self.text, self.why, self.kind = pc, text, why, kind
        self.waves = [] if waves is None else [int(w) for w in waves]
        self.execs = [] if execs is None else [int(e) for e in execs]     # EXEC of each of `waves`
        self.modes = [] if modes is None else [int(m) for m in modes]     # MODE register of each of `waves`
        who = ""
        if self.waves:
            more = f" and {len(self.waves) - 4} more" if len(self.waves) > 4 else ""
            who = f" in waves {', '.join(map(str, self.waves[:4]))}{more}"
        super().__init__(f"PC {pc:#x}{f' ({where})' if where else ''}: {text}: {why}{who}")


class Waves:
    """W waves in lockstep at one PC."""

    __slots__ = ("pc", "s", "v", "slot", "ids", "_exec", "_full", "waiting", "turn", "_fpmode")

    def __init__(self, pc, s, v, slot, ids):
        self.pc, self.s, self.v, self.slot, self.ids = pc, s, v, slot, ids
        self._exec = None
        self._fpmode = None     # the MODE register all waves share, -1 when they differ; None: not known
        self.waiting = False
        self.turn = -1          # scheduler step at which this group last ran

    @property
    def n(self):
        return self.s.shape[1]

    def mask(self) -> np.ndarray:
        if self._exec is None:
            self._exec = unpack_lanes(self.s[EXEC])
            self._full = bool((self.s[EXEC] == 0xFFFFFFFF).all())
        return self._exec

    def fpmode(self) -> int:
        """The MODE register (row MODE) of the group's waves if they all hold one value, else -1."""
        row = self.s[MODE]
        m = int(row[0]) if row.size else 0
        self._fpmode = m if row.size <= 1 or bool((row == m).all()) else -1
        return self._fpmode

    def keep_only(self, keep: "Waves") -> None:
        """This group becomes `keep` (a take() of it): the others went to other groups."""
        self.s, self.v, self.slot, self.ids = keep.s, keep.v, keep.slot, keep.ids
        self._exec = self._fpmode = None

    def active(self):
        """(lane mask, whether every lane of every wave is active)."""
        m = self.mask()
        return m, self._full

    def take(self, sel) -> "Waves":
        # indexing the middle axis yields a transposed layout; keep register rows contiguous
        return Waves(self.pc, np.ascontiguousarray(self.s[:, sel]), np.ascontiguousarray(self.v[:, sel]),
                     self.slot[sel], self.ids[sel])

    def absorb(self, other: "Waves"):
        self.s = np.concatenate([self.s, other.s], axis=1)
        self.v = np.concatenate([self.v, other.v], axis=1)
        self.slot = np.concatenate([self.slot, other.slot])
        self.ids = np.concatenate([self.ids, other.ids])
        self._exec = None
        if self._fpmode != other._fpmode:
            self._fpmode = None


# ------------------------------------------------------------------------------------------------
# decoded and compiled code


@dataclass
class Compiled:
    kind: int
    fn: object
    size: int
    text: str
    target: int = 0


class Program:
    """Decoded and compiled instructions of a code blob at a virtual address, compiled lazily.

    With `fetch` (fn(address, nbytes) -> bytes, raising MemoryFault) the code is not known up
    front: it is fetched from memory as the waves reach it, a page at a time, as the hardware's
    instruction fetch does (a command processor knows only COMPUTE_PGM_LO/HI)."""

    PAGE = 4096

    def __init__(self, code: bytes, base: int, vgprs: int = 256, name: str = "kernel", fetch=None,
                 entry: int | None = None, apertures=None):
        self.code, self.base, self.nv, self.name = bytes(code), base, vgprs, name
        self.entry = base if entry is None else entry      # where() counts from the kernel's first instruction
        self.fetch = fetch
        self.pages: dict[int, bytes] = {}       # fetch mode: code pages by address
        # flat apertures (shared, private): 64-bit bases of 4 GiB windows, the high dword compared
        if apertures is None:
            self.shared_hi, self.private_hi = SHARED_HI, PRIVATE_HI
        else:
            self.shared_hi, self.private_hi = (int(a) >> 32 & 0xFFFFFFFF for a in apertures)
        self.cache: dict[int, Compiled] = {}

    def where(self, pc: int) -> str:
        off = pc - self.entry
        return f"{self.name}+{off:#x}" if off >= 0 else f"{self.name}-{-off:#x}"

    def at(self, pc: int) -> Compiled:
        c = self.cache.get(pc)
        if c is None:
            c = self.cache[pc] = self._compile(pc)
        return c

    def _fetched(self, pc: int, end: int) -> tuple[bytes, int]:
        """Fetch mode: (bytes from the page holding pc up to `end`, offset of pc in them), a page at a
        time, never past the page holding end - 1."""
        page = pc - pc % self.PAGE
        out = b""
        at = page
        while at < end:
            data = self.pages.get(at)
            if data is None:
                try:
                    data = self.pages[at] = bytes(self.fetch(at, self.PAGE))
                except MemoryFault as e:
                    raise ExecError(pc, "?", f"instruction fetch: memory fault: {e}", where=self.where(pc),
                                    kind="fault") from None
            out += data
            at += self.PAGE
        return out, pc - page

    def _compile(self, pc: int) -> Compiled:
        from rdna3 import decode
        if self.fetch is not None:
            # the rest of this page; an instruction that runs past it needs the next one
            code, off = self._fetched(pc, pc - pc % self.PAGE + self.PAGE)
            if len(code) - off < 16:
                try:
                    decode(code, off)
                except Exception as e:
                    if "truncated" in str(e):
                        code, off = self._fetched(pc, pc + 16)
        else:
            code, off = self.code, pc - self.base
            if not 0 <= off < len(code):
                raise ExecError(pc, "?", f"PC outside the kernel's code [{self.base:#x}, {self.base + len(code):#x})",
                                where=self.where(pc))
        raw = code[off:off + 8]
        try:
            inst = decode(code, off)
        except Exception as e:
            # a word of a format the decoder lacks (MTBUF, MIMG, EXP, VINTERP, LDSDIR) may be a valid
            # instruction: a model gap, not an illegal one
            w0 = int.from_bytes(raw[:4].ljust(4, b"\0"), "little")
            gap = w0 >> 26 in UNDECODED_FORMATS or w0 >> 24 in (0xCD, 0xCE)
            raise ExecError(pc, f"<{raw.hex()}>", f"{'undecodable' if gap else 'illegal'} instruction: {e}",
                            where=self.where(pc), kind="unsupported" if gap else "illegal") from None
        text = str(inst)
        try:
            kind, fn, target = compile_instruction(inst, pc, self)
        except Unsupported as e:
            raise ExecError(pc, text, f"unsupported: {e}", where=self.where(pc), kind="unsupported") from None
        except KeyError as e:
            raise ExecError(pc, text, f"unsupported instruction ({e})", where=self.where(pc),
                            kind="unsupported") from None
        return Compiled(kind, fn, inst.size, text, target)


# ------------------------------------------------------------------------------------------------
# running


class Executor:
    """Runs groups of waves of one program against a memory and an LDS."""

    def __init__(self, program: Program, memory, n_slots: int, lds_size: int,
                 n_waves: int = 0, first_wave: int = 0, private_size: int = 0, scratch=None):
        self.prog = program
        self.shared_hi, self.private_hi = program.shared_hi, program.private_hi
        self.memory = memory
        self.lds_size = lds_size
        self.lds = ByteSpace(max(1, n_slots * lds_size), "LDS")
        # private (scratch) memory: private_size bytes per work-item, indexed by wave id - first_wave
        self.private_size, self.first_wave = private_size, first_wave
        if scratch is None:      # the executor's own, for an executor without a GPU around it
            self.scratch = ByteSpace(max(1, n_waves * 32 * private_size), "private")
        else:                    # (base, bytes per wave, slots): the dispatch's scratch buffer in `memory`
            self.scratch = ScratchSpace(memory, scratch[0], scratch[1], scratch[2], private_size, first_wave)
        self.n_slots = n_slots
        self.instructions = 0      # wave instructions executed

    def _release_barriers(self, groups: list[Waves], live: np.ndarray):
        """Release the waves of every workgroup whose live waves are all parked at s_barrier."""
        parked = [g for g in groups if g.waiting]
        if not parked:
            return
        count = np.bincount(np.concatenate([g.slot for g in parked]), minlength=self.n_slots)
        ready = (count == live) & (live > 0)
        for g in parked:
            sel = ready[g.slot]
            if not sel.any():
                continue
            if not sel.all():          # waves of a workgroup still on its way stay parked
                rest = g.take(~sel)
                rest.waiting = True
                groups.append(rest)
                keep = g.take(sel)
                g.keep_only(keep)
            g.waiting = False
            g.pc += 4

    def run(self, groups: list[Waves], max_steps: int = 10**7):
        for _ in self.run_steps(groups, max_steps):
            pass

    def run_steps(self, groups: list[Waves], max_steps: int = 10**7, slice_steps: int | None = None):
        """run() as a generator that yields after each `slice_steps` scheduler steps (at a group's turn
        or branch), so a caller (a simulated command processor) can run a long dispatch in pieces."""
        prog, steps = self.prog, 0
        pause = slice_steps
        live = np.bincount(np.concatenate([g.slot for g in groups]), minlength=self.n_slots)
        prev, streak = None, 0
        # numpy's error state is entered per turn, not across a yield: the caller may resume this generator
        # from another thread (a simulated GPU is stepped by whichever host thread touches it), and a context
        # variable set in one thread cannot be reset from another.
        while groups:
            with np.errstate(all="ignore"):
                self._release_barriers(groups, live)
                runnable = [g for g in groups if not g.waiting]
                g = min(runnable, key=lambda w: w.pc)
                streak = streak + 1 if g is prev else 0
                if streak >= 16 and len(runnable) > 1:
                    # A group that keeps looping at the lowest PC may be waiting for another one
                    # (a spin on a flag): give the longest-waiting group a turn.
                    g = min((o for o in runnable if o is not prev), key=lambda w: w.turn)
                    streak = 0
                prev, g.turn = g, steps
                for other in [o for o in runnable if o is not g and o.pc == g.pc]:
                    g.absorb(other)
                    groups.remove(other)
                budget = max_steps - steps if pause is None else min(max_steps, pause) - steps
                steps += self._run_group(g, groups, prog, budget)
                if not any(o is g for o in groups):   # it ended: its waves no longer count at barriers
                    live -= np.bincount(g.slot, minlength=self.n_slots)
                if steps > max_steps:
                    raise ExecError(g.pc, prog.at(g.pc).text, f"still running after {max_steps} instructions",
                                    g.ids, prog.where(g.pc), "running", g.s[EXEC], g.s[MODE])
            if pause is not None and steps >= pause and groups:
                pause = steps + slice_steps
                yield steps

    def _run_group(self, g: Waves, groups: list, prog: Program, budget: int) -> int:
        """Run one group until it branches while others wait, splits, parks, ends, or has taken
        more than `budget` steps (checked at branches); returns the steps taken."""
        pc, n, steps = g.pc, g.n, 0
        cache = prog.cache
        try:
            while True:
                c = cache.get(pc) or prog.at(pc)
                steps += 1
                self.instructions += n
                kind = c.kind
                if kind == OP:
                    if c.fn is not None:
                        c.fn(g, self)
                    pc += c.size
                    continue
                if kind == CBR:
                    taken = c.fn(g)
                    if taken.all():
                        pc = c.target
                    elif not taken.any():
                        pc += c.size
                    else:
                        other = g.take(~taken)
                        other.pc = pc + c.size
                        keep = g.take(taken)
                        g.keep_only(keep)
                        g.pc = c.target
                        groups.append(other)
                        return steps
                    if len(groups) > 1 or steps > budget:
                        g.pc = pc
                        return steps
                    continue
                if kind == BRANCH:
                    pc = c.target
                    if len(groups) > 1 or steps > budget:
                        g.pc = pc
                        return steps
                    continue
                if kind == END:
                    groups.remove(g)
                    return steps
                if kind == IBR:            # s_setpc/s_swappc/s_call: a target per wave
                    t = c.fn(g)
                    pc = int(t[0])
                    if g.n > 1 and not (t == t[0]).all():
                        for u in np.unique(t[t != t[0]]).tolist():
                            other = g.take(t == u)
                            other.pc = u
                            groups.append(other)
                        keep = g.take(t == t[0])
                        g.keep_only(keep)
                        g.pc = pc
                        return steps
                    if len(groups) > 1 or steps > budget:
                        g.pc = pc
                        return steps
                    continue
                if kind == BARRIER:
                    g.pc, g.waiting = pc, True
                    return steps
        except ExecError as e:
            if not e.waves:
                raise ExecError(e.pc, e.text, e.why, g.ids, prog.where(e.pc), e.kind, g.s[EXEC], g.s[MODE]) from None
            raise
        except MemoryFault as e:
            raise ExecError(pc, cache[pc].text, f"memory fault: {e}", g.ids, prog.where(pc), "fault",
                            g.s[EXEC], g.s[MODE]) from None
        except Exception as e:
            text = cache[pc].text if pc in cache else "?"
            raise ExecError(pc, text, f"{type(e).__name__}: {e}", g.ids, prog.where(pc), "error", g.s[EXEC],
                            g.s[MODE]) from e


# ------------------------------------------------------------------------------------------------
# dispatch


def dispatch_packet(grid, block, kernarg_addr, kernel_object=0, group_segment=0, private_segment=0) -> bytes:
    """hsa_kernel_dispatch_packet_t (64 bytes)."""
    dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
    header = 2  # HSA_PACKET_TYPE_KERNEL_DISPATCH
    return struct.pack("<HHHHHHIIIIIQQQQ", header, dims, block[0], block[1], block[2], 0,
                       grid[0], grid[1], grid[2], private_segment, group_segment,
                       kernel_object, kernarg_addr, 0, 0)


def pack_kernargs(kernel, values) -> bytes:
    """Kernel arguments laid out as the metadata says; pointers and scalars given in order. The
    hidden arguments (value kind hidden_*, which clang keeps at -O0) may be left out: they stay 0."""
    buf = bytearray(max(kernel.kernarg_size, 1))
    args = kernel.args
    explicit = [a for a in args if not a.value_kind.startswith("hidden_")]
    if len(values) == len(explicit) < len(args):
        args = explicit
    if len(values) != len(args):
        raise ValueError(f"kernel {kernel.name} takes {len(args)} arguments, got {len(values)}")
    for a, v in zip(args, values):
        if isinstance(v, (bytes, bytearray)):
            raw = bytes(v)
        elif isinstance(v, (np.generic, np.ndarray)):
            raw = np.asarray(v).tobytes()
        elif isinstance(v, float):
            raw = struct.pack("<f" if a.size == 4 else "<d", v)
        else:
            raw = int(v).to_bytes(a.size, "little", signed=int(v) < 0)
        if len(raw) != a.size:
            raise ValueError(f"kernel {kernel.name}: argument at offset {a.offset} is {a.size} bytes, got {len(raw)}")
        buf[a.offset:a.offset + a.size] = raw
    return bytes(buf)


@dataclass
class DispatchResult:
    instructions: int
    waves: int


def dispatch(code_object, kernel_name, memory: FlatMemory, grid, block, kernargs: bytes,
             dynamic_lds: int = 0, max_waves: int = 16384, max_steps: int = 10**7) -> DispatchResult:
    """Run one kernel of a code object over `grid` work-items (x, y, z) in `block`-sized
    workgroups: writes the kernarg segment and a dispatch packet into `memory`, then `launch`es.
    `dynamic_lds` bytes of LDS follow the kernel's fixed LDS (for `__local` pointer arguments,
    whose kernarg value is their byte offset in the group segment)."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    kern = code_object.kernel(kernel_name)
    kd = kern.descriptor
    # Compilers load kernel arguments in wide s_load_b128/b256 chunks that may run past the last
    # argument; a real kernarg segment is allocated with room for that, so is this one.
    kernarg_len = (max(len(kernargs), kern.kernarg_size) + 63) // 64 * 64 + 256
    kernarg_addr = memory.upload(kernargs.ljust(kernarg_len, b"\0"), 64)
    group_segment = kd.group_segment_fixed_size + dynamic_lds
    packet_addr = memory.upload(dispatch_packet(grid, block, kernarg_addr, kern.descriptor_address,
                                                group_segment, kd.private_segment_fixed_size), 64)
    queue_addr = memory.alloc(256, 64)
    # the code is the whole loadable segment, so that calls into other functions of the object work
    seg = next(((va, off, filesz) for va, off, filesz, _ in code_object.segments
                 if va <= kern.code_address < va + filesz), None)
    code, base = kern.code, None
    if seg is not None:
        va, off, filesz = seg
        code, base = code_object.data[off:off + filesz], va
    return launch(kd, code, kern.code_address, memory, grid, block,
                  {"dispatch_ptr": packet_addr, "queue_ptr": queue_addr, "kernarg_segment_ptr": kernarg_addr},
                  kern.name, group_segment, max_waves, max_steps, code_base=base)


def launch(kd, code: bytes, code_address: int, memory, grid, block, user_values: dict,
           name: str = "kernel", group_segment_size: int | None = None, max_waves: int = 16384,
           max_steps: int = 10**7, code_base: int | None = None) -> DispatchResult:
    """Run the code of a kernel described by `kd` (a KernelDescriptor) as the command processor
    would after a driver set it up: the user SGPRs the descriptor enables, in AMDGPUUsage order,
    take their values from `user_values` (dispatch_ptr, queue_ptr, kernarg_segment_ptr,
    dispatch_id, ...; 0 when absent); the rest is `launch_regs`. LDS per workgroup is
    `group_segment_size` (the packet's; at least the descriptor's fixed size)."""
    if not kd.wave32:
        raise ValueError(f"kernel {name} is wave64; this executor runs wave32 only")
    user = np.zeros(16, U32)
    for uname, at, count in kd.user_sgpr_layout():
        v = user_values.get(uname, 0)
        for j in range(count):
            user[at + j] = (v >> (32 * j)) & 0xFFFFFFFF if j < 2 else 0
    if kd.properties["uses_dynamic_stack"]:
        raise ValueError(f"kernel {name} uses a dynamic stack, whose size only the caller knows; "
                         "not supported by this executor")
    lds_size = max(kd.group_segment_fixed_size, group_segment_size or 0)
    return launch_regs(code_address, memory, grid, block, user, kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2,
                       kd.compute_pgm_rsrc3, lds_size, kd.private_segment_fixed_size, name=name,
                       max_waves=max_waves, max_steps=max_steps, code=code, code_base=code_base)


def launch_regs(*args, **kwargs) -> DispatchResult:
    """Run a wave32 dispatch from what a command processor knows, its registers: the code at
    `code_address` (COMPUTE_PGM_LO/HI; `code` if given, else fetched through `memory.fetch(addr, n)`
    or `memory.load`), `grid` work-items (x, y, z) in `block`-sized workgroups (NUM_THREAD_*),
    s0..s15 = `user_sgprs` (COMPUTE_USER_DATA_*, of which RSRC2.USER_SGPR are loaded), then the
    workgroup ids RSRC2 enables (TGID_X/Y/Z_EN; `wg_offset` added, as COMPUTE_START_*), v0 the
    work-item ids packed x | y << 10 | z << 20 for the dimensions RSRC2.TIDIG_COMP_CNT enables,
    RSRC1.VGPRS granules of 8 VGPRs, `lds_bytes` of LDS per workgroup and `private_bytes` of
    private memory per work-item. Partial workgroups at the grid's edges launch only their
    work-items. A dispatch that takes more than `max_steps` scheduler steps (instructions of one
    lockstep group) is reported as hung (ExecError). `apertures` = (shared, private) flat aperture bases
    (SH_MEM_BASES of the dispatching VMID; default gmc_v11_0's)."""
    gen = launch_regs_steps(*args, **kwargs)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


def _setup(code_address, memory, grid, block, user_sgprs, rsrc1, rsrc2, rsrc3, lds_bytes, private_bytes, name,
           max_waves, max_steps, code, wg_offset, code_base, apertures, scratch=None):
    """launch_regs' checks and setup: (workgroups, workgroups per batch, waves per workgroup, context)."""
    from rdna3.codeobj import RSRC1, RSRC2, _fields
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    if np.prod(block) > 1024:
        raise ValueError(f"kernel {name}: workgroup of {np.prod(block)} work-items exceeds 1024")
    r1, r2 = _fields(RSRC1, rsrc1), _fields(RSRC2, rsrc2)
    nuser = r2["user_sgpr_count"]
    user = np.zeros(16, U32)
    user[:min(nuser, 16)] = np.asarray(user_sgprs, U32).reshape(-1)[:min(nuser, 16)]
    wg_rows, row = [], nuser
    for d, axis in enumerate("xyz"):
        if r2[f"enable_sgpr_workgroup_id_{axis}"]:
            wg_rows.append((d, row))
            row += 1
    # The workgroup-info and private-segment-wave-offset SGPRs that may follow stay 0: private
    # memory here is addressed per work-item from 0 (see _scratch).
    private_size = (private_bytes + 3) // 4 * 4
    id_dims = r2["enable_vgpr_workitem_id"] + 1
    vgprs = (r1["granulated_workitem_vgpr_count"] + 1) * 8
    mode = initial_mode(rsrc1)
    fetch = None
    if code is None:
        fetch = getattr(memory, "fetch", None) or (lambda a, n: memory.load(
            np.arange(a, a + n, 4, dtype=U64), 4).astype(U32).tobytes())
        code = b""
    prog = Program(code, code_address if code_base is None else code_base, vgprs, name, fetch, code_address,
                   apertures)
    lds_size = lds_bytes
    if lds_size > 65536:
        raise ValueError(f"kernel {name}: {lds_size} bytes of LDS per workgroup exceeds 64 KiB")
    lds_size = (lds_size + 3) // 4 * 4
    ngroups = [-(-grid[d] // block[d]) for d in range(3)]
    wgs = np.stack(np.meshgrid(*[np.arange(n) for n in ngroups], indexing="ij"), -1).reshape(-1, 3)
    # z-major then y then x, the order the hardware dispatches in
    wgs = wgs[np.lexsort((wgs[:, 0], wgs[:, 1], wgs[:, 2]))]
    waves_per_wg = -(-int(np.prod(block)) // 32)
    if private_size:     # keep a batch's scratch under 64 MiB
        max_waves = max(1, min(max_waves, (64 << 20) // (32 * private_size)))
    if private_size and scratch is not None:    # no more waves at once than scratch slots (ScratchSpace)
        max_waves = max(1, min(max_waves, scratch[2]))
    per_batch = max(1, max_waves // waves_per_wg)
    return wgs, per_batch, waves_per_wg, (grid, block, user, wg_rows, id_dims, prog, code_address, memory,
                                         lds_size, private_size, wg_offset, mode)


def launch_regs_steps(code_address: int, memory, grid, block, user_sgprs, rsrc1: int, rsrc2: int, rsrc3: int = 0,
                      lds_bytes: int = 0, private_bytes: int = 0, name: str = "kernel", max_waves: int = 16384,
                      max_steps: int = 10**7, code: bytes | None = None, wg_offset=(0, 0, 0),
                      code_base: int | None = None, apertures=None, slice_steps: int | None = None,
                      scratch=None):
    """launch_regs as a generator: yields after each `slice_steps` executor steps, returns its result.
    `scratch` = (base address, bytes per wave, slots): private memory in `memory` (rdna3.wave_memory
    ScratchSpace) instead of the executor's own."""
    wgs, per_batch, waves_per_wg, ctx = _setup(
        code_address, memory, grid, block, user_sgprs, rsrc1, rsrc2, rsrc3, lds_bytes, private_bytes, name,
        max_waves, max_steps, code, wg_offset, code_base, apertures, scratch)
    grid, block, user, wg_rows, id_dims, prog, code_address, memory, lds_size, private_size, wg_offset, mode = ctx
    total_insts = total_waves = since_yield = 0
    for start in range(0, len(wgs), per_batch):
        batch = wgs[start:start + per_batch]
        groups, nwaves = _make_waves(batch, start, grid, block, user, wg_rows, id_dims, prog, code_address,
                                     np.asarray(wg_offset, np.int64), mode)
        ex = Executor(prog, memory, len(batch), lds_size, len(batch) * waves_per_wg,
                      start * waves_per_wg, private_size, scratch)
        try:
            yield from ex.run_steps(groups, max_steps, slice_steps)
        except ExecError as e:
            e.instructions = total_insts + ex.instructions   # the work done before the fault or hang
            raise
        total_insts += ex.instructions
        total_waves += nwaves
        # the slice budget counts across batches too: a dispatch of billions of short workgroups (a grid
        # from a corrupted DISPATCH_DIRECT, found by tools/fuzz/packets.py) yields to the host like a long
        # kernel does, so the driver's timeout can end it, instead of holding the doorbell write for hours
        since_yield += ex.instructions
        if slice_steps and since_yield >= slice_steps and start + per_batch < len(wgs):
            since_yield = 0
            yield
    return DispatchResult(total_insts, total_waves)


def initial_mode(rsrc1: int) -> int:
    """The MODE register a wave starts with, from COMPUTE_PGM_RSRC1 (AMDGPUUsage, kernel descriptor: the
    CP sets the wave's round and denormal modes from FLOAT_MODE, and DX10_CLAMP, IEEE_MODE and FP16_OVFL
    from their bits; gc_11_0_0_sh_mask.h: FLOAT_MODE 19:12 lands in SQ_WAVE_MODE's FP_ROUND/FP_DENORM 7:0,
    DX10_CLAMP 21 -> 8, IEEE_MODE 23 -> 9, FP16_OVFL 26 -> 23)."""
    return ((rsrc1 >> 12 & 0xFF) | (rsrc1 >> 21 & 1) << 8 | (rsrc1 >> 23 & 1) << 9
            | (rsrc1 >> 26 & 1) << 23)


def _make_waves(batch, first, grid, block, user, wg_rows, id_dims, prog, pc, wg_offset=(0, 0, 0), mode=0):
    """One group of all waves of `batch` workgroups (the first being dispatch workgroup `first`);
    wave ids count waves in dispatch order, each workgroup holding as many as a full one."""
    full_waves = -(-int(np.prod(block)) // 32)
    sizes = np.minimum(np.array(block), np.array(grid) - batch * np.array(block))
    s_parts, v_parts, slots, ids = [], [], [], []
    nv = max(prog.nv, 1)
    shapes = {}
    for i, sz in enumerate(map(tuple, sizes)):
        shapes.setdefault(sz, []).append(i)
    for (ax, ay, az), members in shapes.items():
        n = ax * ay * az
        nw = -(-n // 32)
        lin = np.arange(nw * 32)
        valid = lin < n
        x, y, z = lin % ax, (lin // ax) % ay, lin // (ax * ay)
        packed = x.astype(U32)
        if id_dims >= 2:
            packed |= (y.astype(U32) << U32(10))
        if id_dims >= 3:
            packed |= (z.astype(U32) << U32(20))
        packed = np.where(valid, packed, 0).astype(U32).reshape(nw, 32)
        execs = pack_lanes(valid.reshape(nw, 32))
        m = np.array(members)
        W = len(m) * nw
        s = np.zeros((N_SROWS, W), U32)
        s[:16] = user[:, None]
        for d, row in wg_rows:
            s[row] = np.repeat(batch[m, d] + wg_offset[d], nw).astype(U32)
        s[EXEC] = np.tile(execs, len(m))
        s[MODE] = mode
        v = np.zeros((nv, W, 32), U32)
        v[0] = np.tile(packed, (len(m), 1))
        s_parts.append(s)
        v_parts.append(v)
        slots.append(np.repeat(m, nw))
        ids.append(np.repeat(first + m, nw) * full_waves + np.tile(np.arange(nw), len(m)))
    if len(s_parts) == 1:
        s, v = s_parts[0], v_parts[0]
    else:
        s, v = np.concatenate(s_parts, axis=1), np.concatenate(v_parts, axis=1)
    return [Waves(pc, s, v, np.concatenate(slots), np.concatenate(ids))], s.shape[1]
