"""Compilation of decoded gfx11 instructions into closures over lockstep wave groups.

`compile_instruction(inst, pc, prog)` returns (kind, fn, branch target): kind OP runs fn(g, x)
on a wave group g (the `Waves` of rdna3/wave.py: SGPR rows s[row, wave], VGPRs v[reg, wave,
lane], EXEC mask) with the executor x (memory, LDS, private memory); CBR's fn(g) says per wave
whether the branch is taken. Operand access is specialized here once per instruction: register
rows, constants, modifiers and types are resolved before anything runs. What the hardware would do
that is not modelled raises `Unsupported`.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from rdna3 import instruction as ins
from rdna3 import wave_ops as ops
from rdna3.wave_memory import MemoryFault

U8, U16, U32, U64, I32 = np.uint8, np.uint16, np.uint32, np.uint64, np.int32

# SGPR file rows: s0..s105, then the specials at their encodings; SCC gets row 128, the wave's MODE
# register (SQ_WAVE_MODE: round and denormal modes, DX10_CLAMP, IEEE; see rdna3.wave_ops) row 129.
VCC, M0, NULL, EXEC, SCC, MODE = 106, 125, 124, 126, 128, 129
N_SROWS = 130
SPECIAL_ROWS = {"vcc_lo": VCC, "vcc_hi": VCC + 1, "vcc": VCC, "m0": M0, "exec_lo": EXEC,
                "exec_hi": EXEC + 1, "exec": EXEC, "scc": SCC, "src_scc": SCC, "null": NULL}
NOPS = {"s_nop", "s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_lgkmcnt",
        "s_waitcnt_expcnt", "s_waitcnt_depctr", "s_delay_alu", "s_clause", "s_sendmsg",
        "s_set_inst_prefetch_distance", "s_sleep", "s_setprio",
        "s_icache_inv", "buffer_gl0_inv", "buffer_gl1_inv", "s_dcache_inv", "s_ttracedata",
        "s_sendmsg_rtn_b32"}
CBRANCH = {"s_cbranch_scc0": (SCC, True), "s_cbranch_scc1": (SCC, False),
           "s_cbranch_vccz": (VCC, True), "s_cbranch_vccnz": (VCC, False),
           "s_cbranch_execz": (EXEC, True), "s_cbranch_execnz": (EXEC, False)}
# Flat-address apertures (the high dword of a 64-bit flat address) for LDS and private memory, as
# SH_MEM_BASES reports them: shared base in bits 31:16, private base in bits 15:0. A dispatch takes
# them from its VMID's SH_MEM_BASES (Program.apertures); these defaults, for the executor used on its
# own, are gmc_v11_0_early_init's shared (0x2000...) and private (0x1000...) aperture starts.
SHARED_HI, PRIVATE_HI = 0x2000_0000, 0x1000_0000
SH_MEM_BASES = (SHARED_HI >> 16) << 16 | (PRIVATE_HI >> 16)
HW_REGS = {15: SH_MEM_BASES}          # hwreg ids s_getreg_b32 may read: HW_REG_SH_MEM_BASES
HW_REG_MODE, HW_REG_SH_MEM_BASES = 1, 15     # LLVM SIDefines.h Hwreg::ID_MODE, ID_SH_MEM_BASES (gfx11)
FLOATS = (ops.F32, ops.F16, ops.F64)
# ops that move float bits without computing (assumption: no flush, as for v_mov_b32 and v_cndmask_b32)
MODE_EXEMPT = {"v_pack_b32_f16"}
APERTURE_REGS = {"src_shared_base": SHARED_HI, "src_private_base": PRIVATE_HI}
SEXT_LOADS = {"i8": (1, 8), "i16": (2, 16)}
LOAD_SIZES = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2,
              "b8": 1, "b16": 2}


# SALU ops whose result type is not their first source's
SALU_RESULT = {"s_bcnt1_i32_b64": U32, "s_bcnt0_i32_b64": U32, "s_ctz_i32_b64": U32, "s_clz_i32_u64": U32,
               "s_bfm_b64": U64}


class Unsupported(Exception):
    """An instruction, operand or modifier whose semantics the executor does not model."""


def pack_lanes(mask: np.ndarray) -> np.ndarray:
    """bool[W, 32] lane mask -> uint32[W]."""
    return np.packbits(mask, axis=-1, bitorder="little").view(U32)[:, 0]


def unpack_lanes(bits: np.ndarray) -> np.ndarray:
    """uint32[W] -> bool[W, 32]."""
    b = np.ascontiguousarray(bits, U32)
    return np.unpackbits(b.view(U8).reshape(-1, 4), axis=1, bitorder="little").view(bool)


def _gather(reg: np.ndarray, m, full) -> np.ndarray:
    return reg.reshape(-1) if full else reg[m]


def _scatter(reg: np.ndarray, m, full, vals):
    if full:
        reg[...] = vals.reshape(reg.shape)
    else:
        reg[m] = vals


# ------------------------------------------------------------------------------------------------
# operand access, specialized at compile time


def _const_bits(op: ins.Operand, t) -> np.ndarray:
    size = np.dtype(t).itemsize if t is not bool else 4
    v = op.value
    if size == 8:
        if op.kind == ins.ICONST:
            return np.array(v, np.int64).view(U64).astype(U64)
        return np.array(v & (2**64 - 1), U64)
    return np.array(v & 0xFFFFFFFF, U32)


def _srow(op: ins.Operand) -> int:
    if op.kind == ins.SGPR:
        return op.index
    if op.kind == ins.TTMP:
        return 108 + op.index if op.index < 16 else op.index
    if op.kind == ins.SPECIAL:
        if op.reg not in SPECIAL_ROWS:
            raise Unsupported(f"special register {op.reg}")
        return SPECIAL_ROWS[op.reg]
    raise Unsupported(f"operand kind {op.kind}")


def _fmods(t, op: ins.Operand, f):
    if not (op.neg or op.abs):
        return f
    if t in (U32, U64):
        # untyped moves (v_cndmask_b32, v_mov_b64) apply the modifiers to the sign bit
        sign = t(1 << (8 * np.dtype(t).itemsize - 1))
        if op.abs and op.neg:
            return lambda g: f(g) | sign
        if op.abs:
            return lambda g: f(g) & ~sign
        return lambda g: f(g) ^ sign
    if t not in (ops.F32, ops.F64, ops.F16):
        raise Unsupported("neg/abs modifier on an integer operand")
    if op.abs and op.neg:
        return lambda g: -np.abs(f(g))
    if op.abs:
        return lambda g: np.abs(f(g))
    return lambda g: -f(g)


def _aperture(op: ins.Operand) -> ins.Operand:
    """src_shared_base/src_private_base read as the constant high dword of their aperture."""
    if op.kind == ins.SPECIAL and op.reg in APERTURE_REGS:
        return ins.Operand(ins.LITERAL, value=APERTURE_REGS[op.reg], name=op.name)
    return op


def vreader(op: ins.Operand, t, hi: bool = False, nv: int = 256):
    """fn(g) -> array of type t broadcastable to [W, 32] (scalars come as [W, 1])."""
    op = _aperture(op)
    if t is bool:
        if op.kind in ins.CONSTANT_KINDS:
            c = unpack_lanes(np.array([op.value & 0xFFFFFFFF], U32))
            return lambda g: c
        row = _srow(op)
        if row == NULL:
            z = np.zeros((1, 32), bool)
            return lambda g: z
        return lambda g: unpack_lanes(g.s[row])
    size = np.dtype(t).itemsize
    if op.kind in ins.CONSTANT_KINDS:
        bits = _const_bits(op, t)
        if size == 2:
            c = np.array(int(bits) & 0xFFFF, U16).view(t)
        else:
            c = bits.view(t) if bits.dtype.itemsize == size else bits.astype(U64).view(t)
        return _fmods(t, op, lambda g: c)
    if op.kind == ins.VGPR:
        r = op.index
        if r + (2 if size == 8 else 1) > nv:
            raise Unsupported(f"v{r} is beyond the kernel's {nv} VGPRs")
        if size == 8:
            f = lambda g: (g.v[r].astype(U64) | (g.v[r + 1].astype(U64) << U64(32))).view(t)
        elif size == 4:
            f = (lambda g: g.v[r]) if t == U32 else (lambda g: g.v[r].view(t))
        else:
            sh = U32(16 if hi else 0)
            f = lambda g: ((g.v[r] >> sh) & U32(0xFFFF)).astype(U16).view(t)
        return _fmods(t, op, f)
    row = _srow(op)
    if row == NULL:
        z = np.zeros((1, 1), t)
        return lambda g: z
    if size == 8:
        f = lambda g: (g.s[row].astype(U64) | (g.s[row + 1].astype(U64) << U64(32))).view(t)[:, None]
    elif size == 4:
        f = lambda g: g.s[row].view(t)[:, None]
    else:
        sh = U32(16 if hi else 0)
        f = lambda g: ((g.s[row] >> sh) & U32(0xFFFF)).astype(U16).view(t)[:, None]
    return _fmods(t, op, f)


def sreader(op: ins.Operand, t):
    """fn(g) -> array of type t, shape [W] (constants as 0-d arrays)."""
    op = _aperture(op)
    if t is bool:
        row = _srow(op)
        return lambda g: g.s[row] != 0
    size = np.dtype(t).itemsize
    if op.kind in ins.CONSTANT_KINDS or op.kind == ins.IMM:
        bits = _const_bits(op, t)
        c = bits.view(t) if bits.dtype.itemsize == size else bits.astype(U64).view(t)
        return lambda g: c
    row = _srow(op)
    if row == NULL:
        z = np.zeros((), t)
        return lambda g: z
    if size == 8:
        return lambda g: (g.s[row].astype(U64) | (g.s[row + 1].astype(U64) << U64(32))).view(t)
    return (lambda g: g.s[row]) if t == U32 else (lambda g: g.s[row].view(t))


def swriter(op: ins.Operand, t):
    """fn(g, value) storing a [W] (or 0-d) result of type t into scalar registers."""
    row = _srow(op)
    if row == NULL:
        return lambda g, r: None
    size = np.dtype(t).itemsize
    g_exec = row <= EXEC + 1 and EXEC < row + (2 if size == 8 else 1)
    if size == 8:
        def w(g, r):
            r = np.asarray(r, t).view(U64)
            g.s[row] = (r & U64(0xFFFFFFFF)).astype(U32)
            g.s[row + 1] = (r >> U64(32)).astype(U32)
            if g_exec:
                g._exec = None
        return w

    def w(g, r):
        g.s[row] = np.asarray(r, t).view(U32) if np.dtype(t).itemsize == 4 else np.asarray(r).astype(U32)
        if g_exec:
            g._exec = None
    return w


def vwriter(op: ins.Operand, t, hi: bool = False, nv: int = 256):
    """fn(g, value, mask) storing a lane result of type t into VGPRs, in the lanes of `mask`
    (16-bit results go to the low or, with op_sel, the high half and keep the other)."""
    if op.kind != ins.VGPR:
        raise Unsupported(f"vector result into {op.kind}")
    r = op.index
    size = np.dtype(t).itemsize
    if r + (2 if size == 8 else 1) > nv:
        raise Unsupported(f"v{r} is beyond the kernel's {nv} VGPRs")
    if size == 8:
        def w(g, val, m):
            val = np.asarray(val).astype(t, copy=False).view(U64)
            np.copyto(g.v[r], (val & U64(0xFFFFFFFF)).astype(U32), where=m)
            np.copyto(g.v[r + 1], (val >> U64(32)).astype(U32), where=m)
        return w
    if size == 4:
        def w(g, val, m):
            if g._full:
                g.v[r][...] = np.asarray(val, t).view(U32)
            else:
                np.copyto(g.v[r], np.asarray(val, t).view(U32), where=m)
        return w
    sh = U32(16 if hi else 0)
    keep = U32(0xFFFF0000 if not hi else 0x0000FFFF)

    def w(g, val, m):
        bits = np.asarray(val, t).view(U16).astype(U32) << sh
        np.copyto(g.v[r], (g.v[r] & keep) | bits, where=m)
    return w


# ------------------------------------------------------------------------------------------------
# compilation of one instruction into (kind, fn)

OP, BRANCH, CBR, END, BARRIER, IBR = range(6)


def _with_apertures(inst, shared_hi: int, private_hi: int):
    """inst with src_shared_base/src_private_base replaced by the dispatch's aperture high dwords."""
    vals = {"src_shared_base": shared_hi, "src_private_base": private_hi}
    ops = tuple(ins.Operand(ins.LITERAL, value=vals[o.reg], name=o.name)
                if o.kind == ins.SPECIAL and o.reg in vals else o for o in inst.operands)
    y = inst.vopd_y
    if y is not None:
        y = _with_apertures(y, shared_hi, private_hi)
    if ops == inst.operands and y is inst.vopd_y:
        return inst
    return replace(inst, operands=ops, vopd_y=y)


def compile_instruction(inst, pc, prog):
    """(kind, fn, branch target) for one instruction at `pc`; `prog.nv` is the VGPR allocation;
    `prog.shared_hi`/`prog.private_hi` (when present) the flat apertures' high dwords."""
    shared_hi = getattr(prog, "shared_hi", SHARED_HI)
    private_hi = getattr(prog, "private_hi", PRIVATE_HI)
    if (shared_hi, private_hi) != (SHARED_HI, PRIVATE_HI):
        inst = _with_apertures(inst, shared_hi, private_hi)
    name = inst.op
    fmt = inst.fmt
    if name in NOPS:
        return OP, None, 0
    if name in ("s_round_mode", "s_denorm_mode"):
        # MODE.FP_ROUND (3:0) / MODE.FP_DENORM (7:4) = simm16[3:0] (RDNA3 ISA, SOPP; LLVM emits s_denorm_mode
        # around an f32 division in a flush-denormals kernel, SIISelLowering's lowerFDIV_FAST/toggleSPDenormMode)
        imm = inst.srcs[0].value & 0xF
        return OP, _set_mode(0 if name == "s_round_mode" else 4, 4, lambda g: U32(imm)), 0
    if name == "s_endpgm":
        return END, None, 0
    if name == "s_barrier":
        return BARRIER, None, 0
    if name == "s_code_end":
        raise Unsupported("s_code_end is padding; the program ran past its end")
    for o in (*inst.dsts, *inst.srcs):   # every path, memory operands' data included (tools/fuzz/packets.py
        if o.kind == ins.VGPR and o.index + o.count > prog.nv:   # found an IndexError past the allocation)
            raise Unsupported(f"v{o.index} is beyond the kernel's {prog.nv} VGPRs")
    if name == "s_branch":
        return BRANCH, None, pc + 4 + 4 * _label(inst)
    if name in ("s_setpc_b64", "s_swappc_b64", "s_call_b64"):
        return IBR, _jump(name, inst, pc), 0
    if name in CBRANCH:
        row, zero = CBRANCH[name]
        if zero:
            return CBR, (lambda g: g.s[row] == 0), pc + 4 + 4 * _label(inst)
        return CBR, (lambda g: g.s[row] != 0), pc + 4 + 4 * _label(inst)
    if fmt == "VOPD":
        return OP, _vopd(inst, prog), 0
    if fmt == "VOP3P":
        return OP, _packed(name, inst, prog), 0
    if fmt in ("VOP1", "VOP2", "VOP3", "VOP3SD", "VOPC"):
        return OP, _valu(name, inst.dsts, inst.srcs, inst.mods, prog, inst), 0
    if fmt in ("SOP1", "SOP2", "SOPK", "SOPC"):
        return OP, _salu(name, inst, pc), 0
    if fmt == "SMEM":
        return OP, _smem(name, inst), 0
    if fmt == "SCRATCH":
        return OP, _scratch(name, inst, prog), 0
    if fmt in ("GLOBAL", "FLAT"):
        return OP, _global(name, inst, prog), 0
    if fmt == "DS":
        return OP, _ds(name, inst, prog), 0
    raise Unsupported(f"format {fmt}")


def _jump(name, inst, pc):
    """IBR: fn(g) -> each wave's next PC (uint64[W]). S_SETPC_B64: PC = S0; S_SWAPPC_B64: D = PC + 4,
    PC = S0; S_CALL_B64: D = PC + 4, PC = PC + 4 + simm16 * 4 (RDNA3 ISA, SOP1/SOPK)."""
    ret = np.full(1, pc + 4, U64)
    if name == "s_call_b64":
        w = swriter(inst.dsts[0], U64)
        target = np.full(1, pc + 4 + 4 * _label(inst), U64)

        def call(g):
            w(g, np.broadcast_to(ret, (g.n,)))
            return np.broadcast_to(target, (g.n,))
        return call
    src = sreader(inst.srcs[0], U64)
    if name == "s_setpc_b64":
        return lambda g: np.broadcast_to(src(g), (g.n,))
    w = swriter(inst.dsts[0], U64)

    def swap(g):
        t = np.broadcast_to(src(g), (g.n,)).copy()       # read before the write: D may be S0
        w(g, np.broadcast_to(ret, (g.n,)))
        return t
    return swap


def _label(inst) -> int:
    for o in inst.operands:
        if o.kind in (ins.LABEL, ins.IMM):
            return o.value if o.value < 0x8000 else o.value - 0x10000
    raise Unsupported("branch without a target")


def _mods_int(mods, key):
    v = mods.get(key, 0)
    if isinstance(v, (list, tuple)):
        return sum(int(b) << i for i, b in enumerate(v))
    return int(v or 0)


def _post(rtype, mods, dx10_clamp: bool = True):
    """clamp/omod for float results. With MODE.DX10_CLAMP (set by clang-15's kernel descriptors) clamp
    turns a NaN into 0, without it the NaN passes (RDNA3 ISA, MODE register: "DX10_CLAMP: when set,
    clamp NaN to zero; otherwise, pass NaN through")."""
    clamp, omod = bool(mods.get("clamp")), _mods_int(mods, "omod")
    if not clamp and not omod:
        return None
    if rtype not in (ops.F32, ops.F64, ops.F16):
        if omod:
            raise Unsupported("omod on an integer result")
        raise Unsupported("clamp on an integer result")
    scale = {0: 1.0, 1: 2.0, 2: 4.0, 3: 0.5}[omod]
    zero, one = rtype(0), rtype(1)

    def post(r):
        r = r * rtype(scale) if omod else r
        if not clamp:
            return r
        r = np.clip(r, zero, one)
        return np.where(np.isnan(r), zero, r) if dx10_clamp else r
    return post


def _mode_aware(name, rtype, stypes, fn, rd, mods, fast):
    """compute(g) honouring the waves' MODE register (rdna3.wave_ops: round and denormal modes,
    DX10_CLAMP) for a VALU op `fn` on sources read by `rd`: `fast` (the plain semantics) when the mode
    bits that concern the op's float types hold the default, else sources flushed as the denormal mode
    says, the result rounded as the round mode says (the ops of wave_ops.DIRECTED; the others as fn
    computes them), clamp/omod applied, and the result flushed. Waves with different modes each get
    their own."""
    bits = default = 0
    for t in {t for t in (rtype, *stypes) if t in FLOATS}:
        bits |= ops.mode_bits(t)
        default |= ops.mode_default(t)
    if mods.get("clamp"):
        bits |= ops.MODE_DX10_CLAMP
        default |= ops.MODE_DX10_CLAMP
    if rtype == ops.F16:
        bits |= ops.MODE_FP16_OVFL      # default 0 (clang-15's descriptors)
    minmax = name in ops.MINMAX         # MODE.IEEE picks their NaN rules; default 1 (clang-15's descriptors)
    if minmax:
        bits |= ops.MODE_IEEE
        default |= ops.MODE_IEEE
    keep_sources = name in ops.KEEP_SOURCE_DENORMALS
    float_result = rtype in FLOATS
    exact = ops.DIRECTED.get(name) if float_result else None
    posts = {dx10: _post(rtype, mods, dx10) for dx10 in (False, True)} if float_result else {}

    def slow(g, m):
        vals = [f(g) for f in rd]
        if not keep_sources:
            vals = [ops.flush_denormals(v) if t in FLOATS and ops.flushes_source(m, t) else v
                    for v, t in zip(vals, stypes)]
        rmode = ops.round_mode(m, rtype) if float_result else ops.ROUND_NEAREST
        if exact is not None and rmode != ops.ROUND_NEAREST:
            r = ops.round_directed(*exact(*vals), rtype, rmode)
            if name in ops.DIRECTED_CLAMP:
                r = ops.DIRECTED_CLAMP[name](r)
        elif minmax and not m & ops.MODE_IEEE:
            r = ops.IEEE_OFF[name](*vals)
        else:
            r = fn(*vals)
        if not float_result:
            return r
        r = np.asarray(r).astype(rtype, copy=False)
        if rtype == ops.F16 and m & ops.MODE_FP16_OVFL:
            r = ops.fp16_overflow_clamp(r, [v for v, t in zip(vals, stypes) if t in FLOATS])
        post = posts[bool(m & ops.MODE_DX10_CLAMP)]
        if post is not None:
            r = post(r)
        return ops.flush_denormals(r) if ops.flushes_result(m, rtype) and not minmax else r

    def compute(g):
        m = g._fpmode
        if m is None:
            m = g.fpmode()
        if m >= 0:
            return fast(g) if m & bits == default else slow(g, m)
        row, out = g.s[MODE], None
        for u in np.unique(row).tolist():
            r = np.broadcast_to(np.asarray(fast(g) if u & bits == default else slow(g, u)), (g.n, 32))
            out = r.copy() if out is None else np.where((row == u)[:, None], r, out)
        return out
    return compute


def _flushing_compare(t, fn, a, b):
    """compute(g) for a float compare whose denormal sources are zeros of their sign where the waves' MODE
    flushes sources of type t (RDNA3 ISA, MODE register: "Denorm mode affects float ops in: VALU"; the
    compare pages add no exception). v_cmp_class reads its source unflushed (assumption: LLVM lowers
    llvm.is.fpclass, which ignores the denormal mode, to it)."""
    shift = ops.MODE_DENORM_SHIFT[t]

    def flushed(g):
        return fn(ops.flush_denormals(a(g)), ops.flush_denormals(b(g)))

    def compute(g):
        m = g._fpmode
        if m is None:
            m = g.fpmode()
        if m >= 0:
            return flushed(g) if ops.flushes_source(m, t) else fn(a(g), b(g))
        flush = np.isin((g.s[MODE] >> U32(shift)) & U32(3), (0, 2))
        return np.where(flush[:, None], flushed(g), fn(a(g), b(g)))
    return compute


def _valu_compute(name, dsts, srcs, mods, prog, src0_wrap=None):
    """(compute(g) -> result(s), write(g, result, mask)) for a VALU instruction; `src0_wrap`
    wraps the first source's reader (DPP lane permutation)."""
    nv = prog.nv
    wrap = src0_wrap or (lambda f: f)
    opsel = _mods_int(mods, "op_sel")
    cmp = ops.vopc(name)
    if cmp is not None:
        stypes, fn, to_exec = cmp
        rd = [vreader(o, t, bool(opsel >> i & 1), nv) for i, (o, t) in enumerate(zip(srcs, stypes))]
        a, b = wrap(rd[0]), rd[1]
        compute = (lambda g: fn(a(g), b(g)))
        if stypes[0] in FLOATS and not name.startswith(("v_cmp_class", "v_cmpx_class")):
            compute = _flushing_compare(stypes[0], fn, a, b)
        if to_exec:
            def write(g, r, m):
                g.s[EXEC] = pack_lanes(r & m)
                g._exec = None
        else:
            dst = _srow(dsts[0])

            def write(g, r, m):
                if dst != NULL:
                    g.s[dst] = pack_lanes(r & m)
                    if dst == EXEC:
                        g._exec = None
        return compute, write

    if name in ops.CARRY:
        rtype, stypes, fn = ops.CARRY[name]
        rd = [vreader(o, t, False, nv) for o, t in zip(srcs, stypes)]
        rd[0] = wrap(rd[0])
        wv = vwriter(dsts[0], rtype, False, nv)
        crow = _srow(dsts[1]) if len(dsts) > 1 else VCC

        def write(g, r, m):
            val, carry = r
            wv(g, val, m)
            if crow != NULL:
                g.s[crow] = pack_lanes(carry & m)
        if len(rd) == 2:
            a, b = rd
            return (lambda g: fn(a(g), b(g))), write
        a, b, c = rd
        return (lambda g: fn(a(g), b(g), c(g))), write

    if src0_wrap is not None and name.startswith(("v_readfirstlane", "v_readlane", "v_writelane", "v_mbcnt")):
        raise Unsupported(f"DPP on {name}")
    if name in ("v_readfirstlane_b32", "v_readlane_b32"):
        src = vreader(srcs[0], U32, False, nv)
        lane = sreader(srcs[1], U32) if len(srcs) > 1 else None
        w = swriter(dsts[0], U32)

        def compute(g):
            v = np.broadcast_to(src(g), (g.n, 32))
            if lane is None:
                m = g.mask()
                first = np.where(m.any(axis=1), m.argmax(axis=1), 0)
            else:
                first = np.broadcast_to(lane(g) & U32(31), (g.n,)).astype(np.intp)
            return v[np.arange(g.n), first]
        return compute, (lambda g, r, m: w(g, r))
    if name == "v_writelane_b32":
        val, lane = sreader(srcs[0], U32), sreader(srcs[1], U32)
        r0 = dsts[0].index

        def compute(g):
            return np.broadcast_to(val(g), (g.n,)), np.broadcast_to(lane(g) & U32(31), (g.n,)).astype(np.intp)

        def write(g, r, m):
            g.v[r0][np.arange(g.n), r[1]] = r[0]
        return compute, write
    if name in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        a, b = vreader(srcs[0], U32, False, nv), vreader(srcs[1], U32, False, nv)
        w = vwriter(dsts[0], U32, False, nv)
        below = (np.uint64(1) << np.arange(32, dtype=U64)) - U64(1)
        below = below.astype(U32) if name.endswith("lo_u32_b32") else np.zeros(32, U32)
        return (lambda g: ops.popcount(a(g) & below) + b(g)), w

    if name not in ops.VALU:
        raise Unsupported(f"no semantics for {name}")
    rtype, stypes, fn = ops.VALU[name]
    srcs = list(srcs)
    if name in ("v_fmac_f32", "v_fmac_f64", "v_fmac_f16"):
        srcs.append(dsts[0])
    if name == "v_cndmask_b32" and len(srcs) == 2:
        srcs.append(ins.Operand(ins.SPECIAL, VCC, 1, reg="vcc_lo"))
    if len(srcs) != len(stypes):
        raise Unsupported(f"{name} with {len(srcs)} sources, expected {len(stypes)}")
    rd = [vreader(o, t, bool(opsel >> i & 1), nv) for i, (o, t) in enumerate(zip(srcs, stypes))]
    rd[0] = wrap(rd[0])
    w = vwriter(dsts[0], rtype, bool(opsel >> 3 & 1), nv)
    post = _post(rtype, mods)
    plain = fn
    if post is not None:
        fn = lambda *a: post(plain(*a))
    if len(rd) == 1:
        a, = rd
        fast = lambda g: fn(a(g))      # noqa: E731
    elif len(rd) == 2:
        a, b = rd
        fast = lambda g: fn(a(g), b(g))      # noqa: E731
    else:
        a, b, c = rd
        fast = lambda g: fn(a(g), b(g), c(g))      # noqa: E731
    if name in MODE_EXEMPT or not any(t in FLOATS for t in (rtype, *stypes)):
        return fast, w
    return _mode_aware(name, rtype, stypes, plain, rd, mods, fast), w


def _dpp_lanes(mods):
    """For a DPP instruction: (source lane of each lane, whether it is in range, whether the lane
    may be written (row_mask/bank_mask), bound_ctrl (out-of-range reads 0 instead of skipping the
    lane), fetch-inactive)."""
    lane = np.arange(32)
    write = np.ones(32, bool)
    if "dpp8" in mods:
        sel = np.array(mods["dpp8"])
        return (lane & ~7) | sel[lane & 7], np.ones(32, bool), write, True, bool(mods.get("fi"))
    c, row, base = mods["dpp_ctrl"], lane & 15, lane & ~15
    valid = np.ones(32, bool)
    if c < 0x100:                                  # quad_perm
        src = (lane & ~3) | ((c >> (2 * (lane & 3))) & 3)
    elif 0x101 <= c <= 0x10F:                      # row_shl: read the lane n above
        src, valid = lane + (c - 0x100), row + (c - 0x100) < 16
    elif 0x111 <= c <= 0x11F:                      # row_shr: read the lane n below
        src, valid = lane - (c - 0x110), row - (c - 0x110) >= 0
    elif 0x121 <= c <= 0x12F:                      # row_ror
        src = base | ((row - (c - 0x120)) & 15)
    elif c == 0x140:
        src = base | (15 - row)
    elif c == 0x141:
        src = (lane & ~7) | (7 - (lane & 7))
    elif 0x150 <= c <= 0x15F:                      # row_share
        src = base | (c - 0x150)
    elif 0x160 <= c <= 0x16F:                      # row_xmask
        src = base | (row ^ (c - 0x160))
    else:
        raise Unsupported(f"DPP control {c:#x}")
    write = ((mods["row_mask"] >> (lane >> 4)) & 1).astype(bool) & ((mods["bank_mask"] >> ((lane >> 2) & 3)) & 1).astype(bool)
    return np.clip(src, 0, 31), valid, write, bool(mods["bound_ctrl"]), bool(mods.get("fi"))


def _valu(name, dsts, srcs, mods, prog, inst):
    if inst.enc_suffix not in ("", "_e32", "_e64", "_dpp"):
        raise Unsupported(f"encoding {inst.enc_suffix}")
    neg, ab = _mods_int(mods, "neg"), _mods_int(mods, "abs")
    if neg or ab:
        srcs = [replace(o, neg=o.neg or bool(neg >> i & 1), abs=o.abs or bool(ab >> i & 1))
                for i, o in enumerate(srcs)]
    if inst.enc_suffix != "_dpp":
        compute, write = _valu_compute(name, dsts, srcs, mods, prog)

        def run(g, x):
            write(g, compute(g), g.mask())
        return run

    # DPP: src0 is read from another lane of the same row; lanes whose source is out of range or
    # inactive (unless fetch-inactive) read 0 with bound_ctrl, else are not written; row_mask and
    # bank_mask disable writes.
    src, valid, allowed, bound_zero, fetch_inactive = _dpp_lanes(mods)
    ok_cell = [None]

    def wrap(f):
        def read(g):
            v = np.broadcast_to(f(g), (g.n, 32))[:, src]
            return np.where(ok_cell[0], v, v.dtype.type(0)) if bound_zero else v
        return read

    compute, write = _valu_compute(name, dsts, srcs, mods, prog, wrap)

    def run(g, x):
        m = g.mask()
        ok = valid & (True if fetch_inactive else m[:, src])
        ok_cell[0] = ok
        enable = m & allowed & (True if bound_zero else ok)
        full = g._full
        g._full = False                  # the writers must honour `enable`, not the EXEC fast path
        try:
            write(g, compute(g), enable)
        finally:
            g._full = full
    return run


def _packed(name, inst, prog):
    """VOP3P: the op runs on the low and the high 16-bit halves; op_sel picks which half of each
    source feeds the low result, op_sel_hi which feeds the high one, neg/neg_hi negate (floats).
    An inline constant is its 16-bit value in the low half and 0 in the high half (which is how
    LLVM decides what a v2f16/v2i16 constant can inline: splats come from op_sel_hi)."""
    if name not in ops.PACKED:
        raise Unsupported(f"no semantics for {name}")
    t, fn = ops.PACKED[name]
    mods = inst.mods
    if _mods_int(mods, "clamp"):
        raise Unsupported("clamp on packed math")
    srcs = inst.srcs
    sel_lo, sel_hi = _mods_int(mods, "op_sel"), _mods_int(mods, "op_sel_hi")
    neg_lo, neg_hi = _mods_int(mods, "neg"), _mods_int(mods, "neg_hi")
    if (neg_lo or neg_hi) and t != ops.F16:
        raise Unsupported("neg on integer packed math")
    raw = []
    for o in srcs:
        if o.kind in (ins.ICONST, ins.FCONST):
            raw.append((lambda c: lambda g: c)(np.array(o.value & 0xFFFF, U32)))
        else:
            raw.append(vreader(o, U32, False, prog.nv))
    w = vwriter(inst.dsts[0], U32, False, prog.nv)

    def half(r, hi, negate):
        h = ((r >> U32(16 if hi else 0)) & U32(0xFFFF)).astype(U16).view(t)
        return -h if negate else h

    def compute(g, op=fn):
        vals = [f(g) for f in raw]
        out = []
        for sel, neg in ((sel_lo, neg_lo), (sel_hi, neg_hi)):
            r = op(*[half(v, sel >> i & 1, neg >> i & 1) for i, v in enumerate(vals)])
            out.append(np.asarray(r).astype(t, copy=False).view(U16).astype(U32))
        return out[0] | (out[1] << U32(16))

    if t != ops.F16:
        def run(g, x):
            w(g, compute(g), g.mask())
        return run

    # f16 halves follow the f16/f64 round and denormal modes and FP16_OVFL of MODE, as the VALU ops (_mode_aware)
    bits, default = ops.mode_bits(ops.F16) | ops.MODE_FP16_OVFL, ops.mode_default(ops.F16)
    exact = ops.DIRECTED.get("v_" + name[len("v_pk_"):])
    minmax = name in ops.MINMAX       # MODE.IEEE picks the NaN rules, results not flushed (as v_min_f16)
    if minmax:
        bits, default = bits | ops.MODE_IEEE, default | ops.MODE_IEEE

    def moded(m):
        rmode, fin, fout = ops.round_mode(m, ops.F16), ops.flushes_source(m, ops.F16), ops.flushes_result(m, ops.F16)
        ovfl = bool(m & ops.MODE_FP16_OVFL)
        f = ops.IEEE_OFF[name] if minmax and not m & ops.MODE_IEEE else fn
        fout = fout and not minmax

        def op(*h):
            if fin:
                h = [ops.flush_denormals(v) for v in h]
            if exact is not None and rmode != ops.ROUND_NEAREST:
                r = ops.round_directed(*exact(*h), ops.F16, rmode)
            else:
                r = np.asarray(f(*h)).astype(ops.F16, copy=False)
            if ovfl and t == ops.F16:
                r = ops.fp16_overflow_clamp(r, h)
            return ops.flush_denormals(r) if fout else r
        return op

    def run(g, x):
        m = g._fpmode
        if m is None:
            m = g.fpmode()
        if m >= 0:
            w(g, compute(g) if m & bits == default else compute(g, moded(m)), g.mask())
            return
        row, out = g.s[MODE], None
        for u in np.unique(row).tolist():
            r = np.broadcast_to(compute(g) if u & bits == default else compute(g, moded(u)), (g.n, 32))
            out = r.copy() if out is None else np.where((row == u)[:, None], r, out)
        w(g, out, g.mask())
    return run


def _vopd(inst, prog):
    halves = []
    for h in (inst, inst.vopd_y):
        name = "v_" + h.op[len("v_dual_"):]
        halves.append(_valu_compute(name, h.dsts, h.srcs, h.mods, prog))
    (cx, wx), (cy, wy) = halves

    def run(g, x):
        # Both halves read their sources before either writes (a move returns a view of its
        # source register, which the X write could change).
        rx, ry = cx(g), cy(g)
        if isinstance(ry, np.ndarray) and ry.base is not None:
            ry = ry.copy()
        m = g.mask()
        wx(g, rx, m)
        wy(g, ry, m)
    return run


def _salu(name, inst, pc):
    dsts, srcs = inst.dsts, list(inst.srcs)
    if name.endswith("_saveexec_b32") or name.endswith("_saveexec_b64"):
        op = name[2:name.index("_saveexec")]
        f = ops.SAVEEXEC[op]
        s0 = sreader(srcs[0], U32)
        w = swriter(dsts[0], U32)

        def run(g, x):
            old = g.s[EXEC].copy()
            new = f(s0(g), old).astype(U32)
            w(g, old)
            g.s[EXEC] = new
            g.s[SCC] = new != 0
            g._exec = None
        return run
    if name in ("s_setreg_b32", "s_setreg_imm32_b32"):
        v = inst.srcs[0].value
        hwid, lo, width = v & 0x3F, (v >> 6) & 0x1F, ((v >> 11) & 0x1F) + 1
        if hwid != HW_REG_MODE:
            raise Unsupported(f"{name} of hardware register {hwid}")
        src = sreader(inst.srcs[1], U32)
        return _set_mode(lo, width, src)
    if name == "s_getreg_b32":
        v = inst.srcs[0].value
        hwid, lo, width = v & 0x3F, (v >> 6) & 0x1F, ((v >> 11) & 0x1F) + 1
        if hwid not in HW_REGS and hwid != HW_REG_MODE:
            raise Unsupported(f"s_getreg_b32 of hardware register {hwid}")
        mask = (1 << width) - 1
        w = swriter(dsts[0], U32)
        if hwid == HW_REG_MODE:
            return lambda g, x: w(g, (g.s[MODE] >> U32(lo)) & U32(mask))
        if hwid == HW_REG_SH_MEM_BASES:     # the dispatch's apertures (Executor.shared_hi/private_hi)
            return lambda g, x: w(g, np.array(((x.shared_hi >> 16) << 16 | x.private_hi >> 16) >> lo & mask, U32))
        val = np.array((HW_REGS[hwid] >> lo) & mask, U32)
        return lambda g, x: w(g, val)
    if name == "s_getpc_b64":
        w = swriter(dsts[0], U64)
        return lambda g, x: w(g, np.full(g.n, pc + 4, U64))
    if inst.fmt == "SOPC" or name.startswith("s_cmpk_"):
        t, fn = ops.sopc(name) or (None, None)
        if fn is None:
            raise Unsupported(f"no semantics for {name}")
        if name.startswith("s_cmpk_"):
            srcs = list(inst.operands)
        a, b = sreader(srcs[0], t), sreader(srcs[1], t)

        def run(g, x):
            g.s[SCC] = fn(a(g), b(g))
        return run
    if name not in ops.SALU:
        raise Unsupported(f"no semantics for {name}")
    stypes, fn = ops.SALU[name]
    if name in ("s_addk_i32", "s_mulk_i32"):
        srcs = [dsts[0]] + srcs
    if name in ("s_bitset0_b32", "s_bitset1_b32"):
        srcs = srcs + [dsts[0]]
    if name in ("s_cmov_b32", "s_cmov_b64", "s_cmovk_i32", "s_cselect_b32", "s_cselect_b64", "s_addc_u32",
                "s_subb_u32"):
        if name.startswith("s_cmov"):
            srcs = srcs + [dsts[0]]
        srcs = srcs + [ins.Operand(ins.SPECIAL, SCC, 1, reg="scc")]
    if len(srcs) != len(stypes):
        raise Unsupported(f"{name} with {len(srcs)} sources, expected {len(stypes)}")
    rd = [sreader(o, t) for o, t in zip(srcs, stypes)]
    rtype = SALU_RESULT.get(name, stypes[0])
    w = swriter(dsts[0], rtype) if dsts else (lambda g, r: None)

    def run(g, x):
        r, scc = fn(*[f(g) for f in rd])
        if r is not None:
            w(g, np.asarray(r).astype(rtype, copy=False))   # 0-d results broadcast on assignment
        if scc is not None:
            g.s[SCC] = scc
    return run


def _set_mode(lo: int, width: int, value):
    """fn(g, x) writing MODE bits lo..lo+width-1 from value(g) (a SETREG's size field, RDNA3 ISA: the low
    bits of the data)."""
    field = ((1 << width) - 1) << lo & 0xFFFFFFFF
    keep = U32(~field & 0xFFFFFFFF)

    def run(g, x):
        g.s[MODE] = (g.s[MODE] & keep) | ((np.asarray(value(g), U32) << U32(lo)) & U32(field))
        g._fpmode = None
    return run


def _find(inst, *names):
    for o in inst.operands:
        if o.name in names:
            return o
    return None


def _smem(name, inst):
    if not name.startswith("s_load_b"):
        raise Unsupported(f"scalar memory op {name}")
    k = int(name[len("s_load_b"):]) // 32
    dst = inst.dsts[0]
    row = _srow(dst)
    sbase = _srow(_find(inst, "sbase"))
    soff = _find(inst, "soffset")
    soff_row = _srow(soff) if soff is not None and soff.kind != ins.IMM else NULL
    imm = _mods_int(inst.mods, "offset")
    if soff is not None and soff.kind == ins.IMM:
        imm = soff.value
    imm_off = _find(inst, "offset")
    if imm_off is not None and imm_off.kind in (ins.IMM, ins.LITERAL, ins.ICONST):
        imm = imm_off.value
    if imm >= 1 << 20:
        imm -= 1 << 21

    def run(g, x):
        addr = g.s[sbase].astype(U64) | (g.s[sbase + 1].astype(U64) << U64(32))
        addr = addr + U64(imm & (2**64 - 1))
        if soff_row != NULL:
            addr = addr + g.s[soff_row].astype(U64)
        addr &= ~U64(3)
        vals = getattr(x.memory, "load_scalar", x.memory.load)(addr, 4 * k)   # the K$ where one is modeled
        g.s[row:row + k] = vals.T
        if row <= EXEC < row + k:
            g._exec = None
    return run


def _global(name, inst, prog):
    kind, _, rest = name.partition("_")       # global / flat
    vaddr = _find(inst, "vaddr", "addr")
    saddr = _find(inst, "saddr")
    if saddr is not None and (saddr.kind == ins.SPECIAL and saddr.reg in ("off", "null")):
        saddr = None
    offset = _mods_int(inst.mods, "offset")
    if offset >= 1 << 12 and kind != "flat":
        offset -= 1 << 13
    va = vaddr.index
    srow = _srow(saddr) if saddr is not None else None

    def address(g, m, full):
        if srow is None:
            a = _gather(g.v[va], m, full).astype(U64)
            a |= _gather(g.v[va + 1], m, full).astype(U64) << U64(32)
        else:
            base = g.s[srow].astype(U64) | (g.s[srow + 1].astype(U64) << U64(32))
            a = _gather(np.broadcast_to(base[:, None], m.shape), m, full) + _gather(g.v[va], m, full)
        if offset:
            a += U64(offset & (2**64 - 1))
        return a

    if kind == "flat":
        load, store, atomic = _flat_load, _flat_store, _flat_atomic
    else:
        load = lambda g, m, full, x, a, size: x.memory.load(a, size)
        store = lambda g, m, full, x, a, vals, size: x.memory.store(a, vals, size)
        atomic = lambda g, m, full, x, op, a, new, dtype, cmp: x.memory.atomic(op, a, new, dtype, cmp)

    if rest.startswith("load_"):
        t = rest[len("load_"):]
        size = LOAD_SIZES[t]
        k = max(1, size // 4)
        d = inst.dsts[0].index
        if d + k > prog.nv:
            raise Unsupported(f"v{d} is beyond the kernel's {prog.nv} VGPRs")
        sext = SEXT_LOADS.get(t)

        def run(g, x):
            m, full = g.active()
            vals = load(g, m, full, x, address(g, m, full), size)
            if sext:
                sh = U32(32 - sext[1])
                vals = ((vals << sh).view(I32) >> I32(32 - sext[1])).view(U32)
            for j in range(k):
                _scatter(g.v[d + j], m, full, vals[:, j])
        return run
    if rest.startswith("store_"):
        size = LOAD_SIZES[rest[len("store_"):]]
        k = max(1, size // 4)
        data = _find(inst, "data", "vdata").index

        def run(g, x):
            m, full = g.active()
            vals = np.stack([_gather(g.v[data + j], m, full) for j in range(k)], axis=1)
            if size < 4:
                vals &= U32((1 << (8 * size)) - 1)
            store(g, m, full, x, address(g, m, full), vals, size)
        return run
    if rest.startswith("atomic_"):
        aop, dtype, k = ops.atomic_type(rest[len("atomic_"):])
        if aop == "add_f32":
            aop = "add_f32_ftz"      # through the cache: denormal inputs flushed (wave_ops.ATOMICS)
        data = _find(inst, "data", "vdata").index
        ret = inst.dsts[0].index if inst.ndst else None

        def run(g, x):
            m, full = g.active()
            vals = np.stack([_gather(g.v[data + j], m, full) for j in range(k * (2 if aop == "cmpswap" else 1))], axis=1)
            new, cmp = (vals[:, :k], vals[:, k:]) if aop == "cmpswap" else (vals, None)
            old = atomic(g, m, full, x, aop, address(g, m, full), np.ascontiguousarray(new), dtype,
                         None if cmp is None else np.ascontiguousarray(cmp))
            if ret is not None:
                for j in range(k):
                    g.v[ret + j][m] = old[:, j]
        return run
    raise Unsupported(f"memory op {name}")


def _lane_values(g, m, full, per_lane):
    """A [W, 32] (or [W, 1]) array of per-lane values, gathered for the active lanes."""
    return _gather(np.broadcast_to(per_lane, m.shape), m, full)


def _private_base(g, m, full, x):
    """Byte offset of each active lane's private segment in the executor's scratch space."""
    lane = (g.ids - x.first_wave)[:, None] * 32 + np.arange(32, dtype=np.int64)
    return _lane_values(g, m, full, lane * x.private_size)


def _check(off, size, limit, space, write, what):
    if off.size and (off.min() < 0 or off.max() + size > limit):
        bad = int(off[(off < 0) | (off + size > limit)][0])
        raise MemoryFault(space, bad, size, write, f"outside the {what}'s {limit} bytes")


def _flat_parts(g, m, full, x, a, size, write):
    """Route flat addresses: the LDS and private apertures to those spaces (offset = the low
    dword), everything else to global memory. None when every lane is global."""
    hi = (a >> U64(32)).astype(U32)
    # an address in both (equal bases, e.g. SH_MEM_BASES never written) goes to LDS: assumption
    lds = hi == U32(x.shared_hi)
    prv = (hi == U32(x.private_hi)) & ~lds
    if not (lds.any() or prv.any()):
        return None
    parts = []
    glob = ~(lds | prv)
    if glob.any():
        parts.append((glob, x.memory, a[glob]))
    if lds.any():
        off = (a[lds] & U64(0xFFFFFFFF)).astype(np.int64)
        _check(off, size, x.lds_size, "LDS", write, "workgroup's LDS")
        parts.append((lds, x.lds, off + _lane_values(g, m, full, (g.slot * x.lds_size)[:, None])[lds]))
    if prv.any():
        off = (a[prv] & U64(0xFFFFFFFF)).astype(np.int64)
        _check(off, size, x.private_size, "private", write, "work-item's private memory")
        parts.append((prv, x.scratch, off + _private_base(g, m, full, x)[prv]))
    return parts


def _flat_load(g, m, full, x, a, size):
    parts = _flat_parts(g, m, full, x, a, size, False)
    if parts is None:
        return x.memory.load(a, size)
    out = np.zeros((len(a), max(1, size // 4)), U32)
    for sel, space, off in parts:
        out[sel] = space.load(off, size)
    return out


def _flat_store(g, m, full, x, a, vals, size):
    parts = _flat_parts(g, m, full, x, a, size, True)
    if parts is None:
        return x.memory.store(a, vals, size)
    for sel, space, off in parts:
        space.store(off, vals[sel], size)


def _flat_atomic(g, m, full, x, op, a, new, dtype, cmp):
    parts = _flat_parts(g, m, full, x, a, np.dtype(dtype).itemsize, True)
    if parts is None:
        return x.memory.atomic(op, a, new, dtype, cmp)
    out = np.zeros((len(a), np.dtype(dtype).itemsize // 4), U32)
    for sel, space, off in parts:
        # a flat atomic into the LDS aperture is an LDS atomic: no cache flush rule
        sop = "add_f32" if op == "add_f32_ftz" and space is x.lds else op
        out[sel] = space.atomic(sop, off, new[sel], dtype, None if cmp is None else cmp[sel])
    return out


def _scratch(name, inst, prog):
    """scratch_load/store: per-work-item private memory. The address (VGPR when present, plus an
    SGPR when present, plus the offset) is an offset into the work-item's own private segment;
    the hardware's per-lane swizzle is invisible to the program and not modeled."""
    vaddr = _find(inst, "addr", "vaddr")
    vaddr = vaddr.index if vaddr is not None and vaddr.kind == ins.VGPR else None
    saddr = [o for o in inst.operands if o.name == "saddr" and o.kind == ins.SGPR]
    srow = saddr[0].index if saddr else None
    offset = _mods_int(inst.mods, "offset")
    if offset >= 1 << 12:
        offset -= 1 << 13

    def offsets(g, m, x, size):
        full = g._full
        a = np.zeros(g.n * 32 if full else int(m.sum()), np.int64) + offset
        if vaddr is not None:
            a += _gather(g.v[vaddr], m, full)
        if srow is not None:
            a += _gather(np.broadcast_to(g.s[srow][:, None], m.shape), m, full)
        _check(a, size, x.private_size, "private", False, "work-item's private memory")
        return a + _private_base(g, m, full, x)

    rest = name[len("scratch_"):]
    if rest.startswith("load_"):
        t = rest[len("load_"):]
        size = LOAD_SIZES[t]
        k = max(1, size // 4)
        d = inst.dsts[0].index
        sext = SEXT_LOADS.get(t)

        def run(g, x):
            m = g.mask()
            vals = x.scratch.load(offsets(g, m, x, size), size)
            if sext:
                vals = ((vals << U32(32 - sext[1])).view(I32) >> I32(32 - sext[1])).view(U32)
            for j in range(k):
                _scatter(g.v[d + j], m, g._full, vals[:, j])
        return run
    if rest.startswith("store_"):
        size = LOAD_SIZES[rest[len("store_"):]]
        k = max(1, size // 4)
        data = _find(inst, "data", "vdata").index

        def run(g, x):
            m = g.mask()
            vals = np.stack([_gather(g.v[data + j], m, g._full) for j in range(k)], axis=1)
            if size < 4:
                vals &= U32((1 << (8 * size)) - 1)
            x.scratch.store(offsets(g, m, x, size), vals, size)
        return run
    raise Unsupported(f"private memory op {name}")


def _permute(name, inst):
    """ds_bpermute_b32 (gather from lane (addr + offset) / 4) and ds_permute_b32 (scatter to it);
    no LDS is touched. Inactive source lanes read as 0; of several writes the higher lane wins."""
    addr = _find(inst, "addr", "vaddr").index
    data = [o for o in inst.srcs if o.kind == ins.VGPR and o.name != "addr"][0].index
    d = inst.dsts[0].index
    offset = _mods_int(inst.mods, "offset0") | (_mods_int(inst.mods, "offset1") << 8)
    rows = np.arange(32)

    def run(g, x):
        m = g.mask()
        sel = ((g.v[addr] + U32(offset)) >> U32(2)) & U32(31)
        src = np.where(m, g.v[data], U32(0))
        w = np.arange(g.n)[:, None]
        if name == "ds_bpermute_b32":
            out = src[w, sel]
        else:
            out = np.zeros_like(src)
            # lanes in increasing order so the highest writer of a lane wins
            for lane in rows:
                act = m[:, lane]
                out[act, sel[act, lane]] = src[act, lane]
        np.copyto(g.v[d], out, where=m)
    return run


def _swizzle(inst):
    """ds_swizzle_b32: each lane reads another lane of its 32 by the offset's pattern: quad
    permute (offset bit 15) or and/or/xor masks on the lane id; inactive sources read as 0."""
    off = _mods_int(inst.mods, "offset0") | (_mods_int(inst.mods, "offset1") << 8)
    lane = np.arange(32)
    if off >= 0xE000:
        raise Unsupported(f"ds_swizzle FFT/rotate mode (offset {off:#x})")
    if off & 0x8000:
        src = (lane & ~3) | ((off >> (2 * (lane & 3))) & 3)
    else:
        src = (((lane & (off & 0x1F)) | ((off >> 5) & 0x1F)) ^ ((off >> 10) & 0x1F)) & 31
    data, d = inst.srcs[0].index, inst.dsts[0].index

    def run(g, x):
        m = g.mask()
        vals = np.where(m, g.v[data], U32(0))[:, src]
        np.copyto(g.v[d], vals, where=m)
    return run


def _ds(name, inst, prog):
    if name in ("ds_bpermute_b32", "ds_permute_b32"):
        return _permute(name, inst)
    if name == "ds_swizzle_b32":
        return _swizzle(inst)
    rest = name[len("ds_"):]
    addr = _find(inst, "addr", "vaddr").index
    off0, off1 = _mods_int(inst.mods, "offset0"), _mods_int(inst.mods, "offset1")
    offset = _mods_int(inst.mods, "offset") if "offset" in inst.mods else off0 | (off1 << 8)
    datas = [o for o in inst.srcs if o.kind == ins.VGPR and o.name != "addr" and o is not _find(inst, "addr")]

    def offsets(g, m, x, extra, size):
        # LDS addresses are 32-bit: the offset add wraps (clang relies on it)
        full = g._full
        a = _gather(g.v[addr], m, full) + U32(extra)
        if a.size and int(a.max()) + size > x.lds_size:
            bad = int(a[a.astype(np.int64) + size > x.lds_size][0])
            raise MemoryFault("LDS", bad, size, False, f"outside the workgroup's {x.lds_size} bytes of LDS")
        base = (g.slot * x.lds_size)[:, None]
        if full:
            return (a.reshape(g.n, 32) + base).reshape(-1)
        return a + np.broadcast_to(base, m.shape)[m]

    if rest.startswith(("load_2addr", "store_2addr")):
        stride = 64 if "stride64" in rest else 1
        size = 8 if rest.endswith("b64") else 4
        k = size // 4
        o0, o1 = off0 * size * stride, off1 * size * stride
        if rest.startswith("load"):
            d = inst.dsts[0].index

            def run(g, x):
                m = g.mask()
                for j, o in enumerate((o0, o1)):
                    vals = x.lds.load(offsets(g, m, x, o, size), size)
                    for i in range(k):
                        _scatter(g.v[d + j * k + i], m, g._full, vals[:, i])
            return run
        d0, d1 = datas[0].index, datas[1].index

        def run(g, x):
            m = g.mask()
            for o, dd in ((o0, d0), (o1, d1)):
                vals = np.stack([_gather(g.v[dd + i], m, g._full) for i in range(k)], axis=1)
                x.lds.store(offsets(g, m, x, o, size), vals, size)
        return run
    if rest.startswith("load_"):
        t = rest[len("load_"):]
        size = LOAD_SIZES[t]
        k = max(1, size // 4)
        d = inst.dsts[0].index
        sext = SEXT_LOADS.get(t)

        def run(g, x):
            m = g.mask()
            vals = x.lds.load(offsets(g, m, x, offset, size), size)
            if sext:
                vals = ((vals << U32(32 - sext[1])).view(I32) >> I32(32 - sext[1])).view(U32)
            for j in range(k):
                _scatter(g.v[d + j], m, g._full, vals[:, j])
        return run
    if rest.startswith("store_"):
        size = LOAD_SIZES[rest[len("store_"):]]
        k = max(1, size // 4)
        data = datas[0].index

        def run(g, x):
            m = g.mask()
            vals = np.stack([_gather(g.v[data + j], m, g._full) for j in range(k)], axis=1)
            if size < 4:
                vals &= U32((1 << (8 * size)) - 1)
            x.lds.store(offsets(g, m, x, offset, size), vals, size)
        return run
    # LDS atomics: ds_<op>_<type>, ds_<op>_rtn_<type>, ds_cmpstore[_rtn]_b32 (data: new, cmp)
    rtn = "_rtn_" in rest
    base = rest.replace("_rtn", "")
    if base.startswith("cmpstore_"):
        base = "cmpswap_" + base[len("cmpstore_"):]
    aop, dtype, k = ops.atomic_type(base)
    ret = inst.dsts[0].index if rtn and inst.ndst else None

    def run(g, x):
        m = g.mask()
        vals = [np.stack([_gather(g.v[o.index + j], m, g._full) for j in range(k)], axis=1) for o in datas]
        # ds_cmpstore_b32 vaddr, vdata(new), vcmp -- gfx11 operand order
        cmp = vals[1] if aop == "cmpswap" else None
        old = x.lds.atomic(aop, offsets(g, m, x, offset, 4 * k), np.ascontiguousarray(vals[0]), dtype,
                           None if cmp is None else np.ascontiguousarray(cmp))
        if ret is not None:
            for j in range(k):
                _scatter(g.v[ret + j], m, g._full, old[:, j])
    return run
