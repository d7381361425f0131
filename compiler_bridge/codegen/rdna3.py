"""The RDNA3 code generator: kernel IR (compiler_bridge.ir) -> gfx1100 wave32 machine code of our own.

    assembly(kernel) -> str          the program in LLVM syntax (what rdna3.assemble takes)
    generate(kernel) -> (code_object_bytes, kernel_name, (global_size, local_size))   registered "rdna3"

No LLVM is involved: the text goes through rdna3.assemble and codeobj.write_code_object.

Kernel shape. User SGPRs: the kernarg segment pointer in s[0:1]; the workgroup id x follows in s2;
v0 holds the work-item id x. The prologue loads every buffer pointer (s_load_b64 into an even SGPR
pair from s4 up) and scalar parameter (s_load_b32) from the kernarg segment, where they sit as the
IR says (8-byte pointers in order, then 4-byte scalars), waits lgkmcnt(0), computes
gid = s2 * L + v0 into v1 (L from ir.launch_dims, baked in), and masks exec to gid < n with
v_cmp + s_and_saveexec_b32 (s3 keeps the old exec); a wave with no live lane branches to s_endpgm.

Values and registers. Constants are immediates (inline or literal), never registers. A value is uniform
when it is derived only from constants, scalar parameters and reduce indices through int32 or bool ops:
it lives in an SGPR and is computed by SALU (s_add_i32, s_mul_i32, s_cmp + s_cselect_b32, ...), or in a
VGPR when the SGPRs run out. Everything else (gid, loads, every float op) lives in a VGPR. Bools are 0/1
in a register; compares go through VCC (v_cmp, then v_cndmask_b32 0/1). Allocation is a linear scan over
the SSA values in program order: each value lives from its definition to its last use, and a value
defined before a reduce and used inside it lives to the end of that reduce (the loop's back edge). A
value's register is never the destination of an op that reads it, so multi-instruction expansions are
safe; v2..v7 and s[NS-2:NS-1] are scratch for those expansions. Running out of registers (no spilling)
raises RegisterSpill naming the kernel. Dead values (no use) are not computed.

Before allocation, `optimize` unrolls short reduces (at most UNROLL_LENGTH iterations and UNROLL_OPS
ops unrolled; accumulated in index order from the identity, as the reference does), merges common
subexpressions, and hoists loop-invariant ops (loads included) out of the remaining reduces.

Hazards: a read of a transcendental op's result (v_exp/v_log/v_rcp/v_sqrt) within five VALU instructions
of it, or a branch or label after one, gets `s_waitcnt_depctr 0xfff` (va_vdst 0) first, as LLVM's gfx11
hazard recognizer does; other dependencies are left to the hardware's interlocks (no s_delay_alu hints).

Memory. global_load_b32/global_store_b32 with the buffer pointer as SADDR and idx*4 as the 32-bit VGPR
offset; an index `base + c` (0 <= 4c < 4096) becomes base*4 with `offset:4c`, and consecutive accesses
through one base share the shift. Loads are tracked in issue order: before an op reads a loaded value,
s_waitcnt vmcnt(k) waits for it with k = loads issued after it (VMEM loads return in order).

Reductions that stay loops: a do-while loop (length >= 1) with an SGPR counter: body, accumulate (v_add_f32 /
v_max_f32 / v_add_nc_u32 / v_max_i32 into a VGPR accumulator initialised to the identity), s_add_i32,
s_cmp_lt_u32, s_cbranch_scc1.

Precision (float32, denormals kept: the descriptor's FLOAT_DENORM_MODE_32 is 3):
    add sub mul, max, neg (sign flip), relu    exact / correctly rounded, as hardware does them
    div      the v_div_scale / v_rcp_f32 / two Newton-Raphson FMA steps / v_div_fmas / v_div_fixup
             sequence: correctly rounded, with IEEE results for 0, inf, NaN and denormals
    sqrt     v_sqrt_f32 (1 ulp on hardware)
    exp(x)   2**n * v_exp_f32(f) (v_ldexp_f32), n = rint(x log2 e) and f the rest, x * log2 e split
             exactly into two floats by FMA: about 2 ulp over the whole range (0 below -104, inf above
             89, NaN for NaN)
    log(x)   v_log_f32(x) * ln(2): relative error about 2 ulp, absolute near x = 1
    sigmoid  v_rcp_f32(1 + v_exp_f32(-x * log2(e))); tanh(x) = 1 - 2 * rcp(1 + exp2(2x log2 e)):
             absolute error about 2e-7
    cast     v_cvt_i32_f32 (truncation; NaN gives 0), v_cvt_f32_i32 (round to nearest)
int32: add/sub/mul wrap (v_add_nc_u32, v_sub_nc_u32, v_mul_lo_u32); idiv/mod by a positive constant d
with a non-negative dividend (the IR's promise): shifts and masks for powers of two, otherwise
q = mul_hi_u32(x, m) >> (l - 1) with l = ceil(log2 d), m = ceil(2**(31 + l) / d), exact for
0 <= x < 2**31; mod = x - q * d. Constant operands of int ops are folded at compile time.
"""
from __future__ import annotations

import math
import struct

from rdna3 import asm
from rdna3.codeobj import KernelArg, KernelSpec, write_code_object
from compiler_bridge import ir
from compiler_bridge.runtime import register_codegen

NV, NS = 256, 104          # VGPRs v0..v255; SGPRs s0..s103 (vcc is apart)
VTMP = (2, 3, 4, 5, 6, 7)  # scratch VGPRs for expansions
TRANS = ("v_exp_f32", "v_log_f32", "v_rcp_f32", "v_sqrt_f32", "v_rsq_f32")
LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453


class CodegenError(ir.IRError):
    """The IR holds something this generator cannot emit; the message names the kernel and the op."""


class RegisterSpill(CodegenError):
    """The kernel needs more registers than gfx11 has and this generator does not spill."""


def f32bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _lit(bits: int) -> str:
    bits &= 0xFFFFFFFF
    signed = bits - (1 << 32) if bits & 0x80000000 else bits
    return str(signed) if -16 <= signed <= 64 else f"0x{bits:08x}"


class Val:
    """Where a value lives: kind 'v' (VGPR), 's' (SGPR) or 'k' (a 32-bit constant, `bits`)."""
    __slots__ = ("kind", "reg", "bits", "dtype")

    def __init__(self, kind, dtype, reg=0, bits=0):
        self.kind, self.dtype, self.reg, self.bits = kind, dtype, reg, bits & 0xFFFFFFFF

    def __str__(self):
        return f"{self.kind}{self.reg}" if self.kind != "k" else _lit(self.bits)

    @property
    def ival(self) -> int:      # the constant as a signed int32
        return self.bits - (1 << 32) if self.bits & 0x80000000 else self.bits


def _wrap(x: int) -> int:
    return x & 0xFFFFFFFF


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _fold_int(o: str, a: int, b: int | None = None):
    if o == "add": return a + b
    if o == "sub": return a - b
    if o == "mul": return a * b
    if o == "max": return max(a, b)
    if o == "neg": return -a
    if o == "relu": return max(a, 0)
    if o == "idiv": return _trunc_div(a, b)
    if o == "mod": return a - _trunc_div(a, b) * b
    if o == "cmplt": return int(a < b)
    if o == "cmple": return int(a <= b)
    if o == "cmpeq": return int(a == b)
    if o == "cmpne": return int(a != b)
    return None


def magic(d: int) -> tuple[int, int]:
    """(m, shift) with x // d == mul_hi_u32(x, m) >> shift for 0 <= x < 2**31 (d >= 3, not a power of 2)."""
    l_ = (d - 1).bit_length()
    m = -(-(1 << (31 + l_)) // d)
    assert m < 1 << 32
    return m, l_ - 1


class _Gen:
    def __init__(self, k: ir.Kernel):
        self.k = k
        self.lines: list[str] = []
        self.vals: dict[int, Val] = {}
        self.pending: list[int] = []     # value ids of loads in flight, in issue order
        self.v2_for = None               # the index value whose byte offset v2 holds
        self.trans: dict[str, int] = {}  # VGPRs written by a transcendental op -> VALU ops since
        self.labels = 0
        (_, _, _), (self.local, _, _) = ir.launch_dims(k)
        self._fold_addresses()
        self._liveness()

    def _fold_addresses(self):
        """idx = add(base, c) with 0 <= 4c < 4096 used as a load/store index: the address becomes base * 4
        with an immediate offset of 4c (the add is then computed only if something else uses it)."""
        consts = {op.id: int(op.arg) for op in self.k.walk() if op.op == "const" and op.dtype == "int32"}
        self.fold: dict[int, tuple[int, int]] = {}
        for op in self.k.walk():
            if op.op == "add" and op.dtype == "int32":
                a, b = op.srcs
                if (a in consts) != (b in consts):
                    base, c = (b, consts[a]) if a in consts else (a, consts[b])
                    if 0 <= 4 * c < 4096:
                        self.fold[op.id] = (base, 4 * c)

    def srcs_read(self, op) -> tuple:
        """The values an op reads, with a folded load/store index replaced by its base."""
        if op.op in ("load", "store") and op.srcs[0] in self.fold:
            return (self.fold[op.srcs[0]][0],) + op.srcs[1:]
        return op.srcs

    # ----------------------------------------------------------------------------- liveness
    def _liveness(self):
        self.defpos: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.oppos: dict[int, int] = {}    # id(op) -> position
        loops = []
        pos = [0]

        def use(v, p):
            self.last[v] = max(self.last.get(v, -1), p)

        def walk(body):
            for op in body:
                p = pos[0]
                pos[0] += 1
                self.oppos[id(op)] = p
                if op.op == "reduce":
                    r = op.arg
                    self.defpos[op.id] = self.defpos[r.var] = p
                    walk(op.body)
                    end = pos[0]
                    pos[0] += 1
                    self.oppos[("end", id(op))] = end
                    use(r.var, end)
                    use(op.id, end)
                    use(r.result, end)
                    loops.append((p, end))
                else:
                    for s in self.srcs_read(op):
                        use(s, p)
                    if op.id >= 0:
                        self.defpos[op.id] = p

        walk(self.k.body)
        for v, d in self.defpos.items():
            self.last.setdefault(v, -1)
        for start, end in loops:
            for v, d in self.defpos.items():
                if d < start and self.last[v] > start:
                    self.last[v] = max(self.last[v], end)
        self.used = {v for v, p in self.last.items() if p >= 0}

    # ---------------------------------------------------------------------------- registers
    def _setup_regs(self, first_sgpr: int):
        self.free_v = list(range(VTMP[-1] + 1, NV))
        self.stmp = (NS - 2, NS - 1)
        self.free_s = list(range(first_sgpr, NS - 2))
        self.live: list[tuple[int, int]] = []      # (last use, value id) of register-held values

    def _expire(self, p: int):
        keep = []
        for last, v in self.live:
            if last < p:
                val = self.vals[v]
                (self.free_v if val.kind == "v" else self.free_s).append(val.reg)
            else:
                keep.append((last, v))
        self.live = keep
        self.free_v.sort()
        self.free_s.sort()

    def _alloc(self, vid: int, kind: str, dtype: str) -> Val:
        pool = self.free_v if kind == "v" else self.free_s
        if not pool:
            what = "VGPRs" if kind == "v" else "SGPRs"
            raise RegisterSpill(f"kernel {self.k.name}: out of {what} at value %{vid} (v0..v{VTMP[-1]} and "
                                f"s0..s{3 + 2 * len(self.k.bufs) + len(self.k.scalars)} are taken by the prologue "
                                "and scratch); this generator does not spill: split the kernel")
        val = Val(kind, dtype, pool.pop(0))
        self.vals[vid] = val
        self.live.append((self.last[vid], vid))
        return val

    # --------------------------------------------------------------------------------- emission
    def emit(self, line: str):
        parts = line.split(None, 1)
        ops = [x.strip().lstrip("-|").rstrip("|") for x in parts[1].split(",")] if len(parts) > 1 else []
        if self.trans:
            # gfx11's trans-use hazard (as LLVM's hazard recognizer handles it): an instruction that reads
            # the VGPR result of v_exp/v_log/v_rcp/v_sqrt within 5 VALU instructions needs
            # s_waitcnt_depctr va_vdst(0) first; so does leaving straight-line code
            if line.endswith(":") or "branch" in parts[0] or parts[0] == "s_endpgm" or set(ops) & set(self.trans):
                self.lines.append("s_waitcnt_depctr 0xfff")
                self.trans.clear()
            elif parts[0].startswith("v_"):
                self.trans = {r: n + 1 for r, n in self.trans.items() if n < 5}
        self.lines.append(line)
        if parts[0] in TRANS:
            self.trans[ops[0]] = 0
        # v2 keeps the byte offset of one index across loads/stores until something else writes it
        if line.endswith(":") or "branch" in parts[0] or len(parts) > 1 and parts[1].split(",")[0] == "v2":
            self.v2_for = None

    def label(self) -> str:
        self.labels += 1
        return f"L{self.labels}"

    def wait_for(self, ids):
        idx = [self.pending.index(i) for i in ids if i in self.pending]
        if idx:
            i = max(idx)
            self.emit(f"s_waitcnt vmcnt({min(63, len(self.pending) - 1 - i)})")
            self.pending = self.pending[i + 1:]

    def vsrcs(self, srcs: list[Val], scalar_ok: int = 1) -> list[str]:
        """Operand text for a VALU op: at most `scalar_ok` non-VGPR operands (the first ones); the rest are
        copied into scratch VGPRs."""
        out, budget, tmp = [], scalar_ok, iter(VTMP[::-1])
        for s in srcs:
            if s.kind == "v":
                out.append(str(s))
            elif budget > 0:
                budget -= 1
                out.append(str(s))
            else:
                t = f"v{next(tmp)}"
                self.emit(f"v_mov_b32 {t}, {s}")
                out.append(t)
        return out

    def to_v(self, s: Val, tmp: int) -> str:
        if s.kind == "v":
            return str(s)
        self.emit(f"v_mov_b32 v{tmp}, {s}")
        return f"v{tmp}"

    # ----------------------------------------------------------------------------------- ops
    def run(self) -> str:
        k = self.k
        nb = len(k.bufs)
        self.ptr = [4 + 2 * i for i in range(nb)]
        first = 4 + 2 * nb
        for i, _ in enumerate(k.bufs):
            self.emit(f"s_load_b64 s[{self.ptr[i]}:{self.ptr[i] + 1}], s[0:1], 0x{8 * i:x}")
        self.sparam = []
        for j, _ in enumerate(k.scalars):
            self.emit(f"s_load_b32 s{first + j}, s[0:1], 0x{8 * nb + 4 * j:x}")
            self.sparam.append(first + j)
        self._setup_regs(first + len(k.scalars))
        self.emit(f"s_mul_i32 s3, s2, {self.local}")
        self.emit("v_add_nc_u32 v1, s3, v0")
        self.emit(f"v_cmp_gt_u32 vcc_lo, {_lit(k.size)}, v1")
        self.emit("s_and_saveexec_b32 s3, vcc_lo")
        self.emit("s_cbranch_execz Lend")
        if k.scalars or nb:
            self.emit("s_waitcnt lgkmcnt(0)")
        self.body(k.body)
        self.emit("Lend:")
        self.emit("s_endpgm")
        return "\n".join(self.lines) + "\n"

    def body(self, ops):
        for op in ops:
            p = self.oppos[id(op)]
            self._expire(p)
            if op.op == "store":
                self.store(op)
            elif op.op == "reduce":
                if op.id in self.used or any(o.op == "store" for o in ir._walk(op.body)):
                    self.reduce(op, p)
            elif op.id in self.used:
                self.wait_for(self.srcs_read(op))
                self.op(op)

    def store(self, op):
        self.wait_for(self.srcs_read(op))
        off, imm = self.address(op.srcs[0])
        data = self.to_v(self.vals[op.srcs[1]], 3)
        self.emit(f"global_store_b32 {off}, {data}, s[{self.ptr[op.arg]}:{self.ptr[op.arg] + 1}]{imm}")

    def address(self, idx_id: int) -> tuple[str, str]:
        """(the VGPR with the byte offset, the immediate offset modifier text) of element idx."""
        base, imm = self.fold.get(idx_id, (idx_id, 0))
        idx = self.vals[base]
        if idx.kind == "k":
            self.emit(f"v_mov_b32 v2, {_lit(idx.bits * 4 + imm)}")
            imm = 0
        elif self.v2_for != base:
            self.emit(f"v_lshlrev_b32 v2, 2, {idx}")
            self.v2_for = base
        return "v2", f" offset:{imm}" if imm else ""

    def reduce(self, op, p):
        r = op.arg
        acc = self._alloc(op.id, "v", op.dtype)
        var = self._alloc(r.var, "s", "int32")
        if r.kind == "sum":
            init = 0
        else:
            init = f32bits(-math.inf) if op.dtype == "float32" else 0x80000000
        self.emit(f"v_mov_b32 {acc}, {_lit(init)}")
        self.emit(f"s_mov_b32 {var}, 0")
        top = self.label()
        self.emit(f"{top}:")
        self.body(op.body)
        self.wait_for([r.result])
        x = self.vals[r.result]
        mn = {("sum", "float32"): "v_add_f32", ("max", "float32"): "v_max_f32",
              ("sum", "int32"): "v_add_nc_u32", ("max", "int32"): "v_max_i32"}[(r.kind, op.dtype)]
        self.emit(f"{mn} {acc}, {x}, {acc}")
        self.emit(f"s_add_i32 {var}, {var}, 1")
        self.emit(f"s_cmp_lt_u32 {var}, {_lit(r.length)}")
        self.emit(f"s_cbranch_scc1 {top}")
        # the body's values are gone; their registers were expired inside the body or expire now
        self._expire(self.oppos[("end", id(op))])

    def const(self, op, bits):
        self.vals[op.id] = Val("k", op.dtype, bits=bits)

    def op(self, op):
        o, d = op.op, op.dtype
        src = [self.vals[s] for s in op.srcs] if o != "load" else []
        if o == "gid":
            self.vals[op.id] = Val("v", "int32", 1)      # v1 for the whole kernel, never freed
            return
        if o == "const":
            bits = f32bits(op.arg) if d == "float32" else int(op.arg)
            return self.const(op, bits)
        if o == "param":
            self.vals[op.id] = Val("s", d, self.sparam[op.arg])
            return
        if o == "load":
            dst = self._alloc(op.id, "v", d)
            off, imm = self.address(op.srcs[0])
            self.emit(f"global_load_b32 {dst}, {off}, s[{self.ptr[op.arg]}:{self.ptr[op.arg] + 1}]{imm}")
            self.pending.append(op.id)
            return
        sd = [s.dtype for s in src]
        isint = all(t in ("int32", "bool") for t in sd) and d in ("int32", "bool")
        # int constant folding
        if isint and src and all(s.kind == "k" for s in src):
            if o == "where":
                return self.const(op, src[1].bits if src[0].bits else src[2].bits)
            if o == "cast":
                return self.const(op, int(src[0].ival != 0) if d == "bool" else src[0].bits)
            v = _fold_int(o, *[s.ival for s in src])
            if v is not None:
                return self.const(op, _wrap(v))
        if isint and all(s.kind in "sk" for s in src) and self.free_s:
            return self.salu(op, src)            # (out of SGPRs: the VALU computes it into a VGPR)
        return self.valu(op, src)

    # SALU: uniform int32/bool values
    def salu(self, op, src):
        o = op.op
        dst = self._alloc(op.id, "s", op.dtype)
        a = src[0]
        b = src[1] if len(src) > 1 else None
        simple = {"add": "s_add_i32", "sub": "s_sub_i32", "mul": "s_mul_i32", "max": "s_max_i32"}
        if a.kind == "k" and b is not None and b.kind == "k":
            raise CodegenError(f"kernel {self.k.name}: unfolded constant op {o}")
        if o in simple:
            self.emit(f"{simple[o]} {dst}, {a}, {b}")
        elif o == "neg":
            self.emit(f"s_sub_i32 {dst}, 0, {a}")
        elif o == "relu":
            self.emit(f"s_max_i32 {dst}, {a}, 0")
        elif o in ("idiv", "mod"):
            dv = self.divisor(op, b)
            if dv & (dv - 1) == 0:
                if o == "idiv":
                    self.emit(f"s_lshr_b32 {dst}, {a}, {dv.bit_length() - 1}")
                else:
                    self.emit(f"s_and_b32 {dst}, {a}, {_lit(dv - 1)}")
            else:
                m, sh = magic(dv)
                t = f"s{self.stmp[0]}"
                self.emit(f"s_mul_hi_u32 {t}, {a}, {_lit(m)}")
                if o == "idiv":
                    self.emit(f"s_lshr_b32 {dst}, {t}, {sh}")
                else:
                    self.emit(f"s_lshr_b32 {t}, {t}, {sh}")
                    self.emit(f"s_mul_i32 {t}, {t}, {_lit(dv)}")
                    self.emit(f"s_sub_i32 {dst}, {a}, {t}")
        elif o in ir.COMPARE:
            cc = {"cmplt": "lt_i32", "cmple": "le_i32", "cmpeq": "eq_u32", "cmpne": "lg_u32"}[o]
            self.emit(f"s_cmp_{cc} {a}, {b}")
            self.emit(f"s_cselect_b32 {dst}, 1, 0")
        elif o == "where":
            c, x, y = src
            if x.kind == "k" and y.kind == "k" and not (-16 <= x.ival <= 64 and -16 <= y.ival <= 64) \
                    and x.bits != y.bits:
                self.emit(f"s_mov_b32 s{self.stmp[0]}, {x}")
                x = Val("s", x.dtype, self.stmp[0])
            if c.kind == "k":
                self.emit(f"s_mov_b32 {dst}, {x if c.bits else y}")
            else:
                self.emit(f"s_cmp_lg_u32 {c}, 0")
                self.emit(f"s_cselect_b32 {dst}, {x}, {y}")
        elif o == "cast":
            if op.dtype == "bool":
                self.emit(f"s_cmp_lg_u32 {a}, 0")
                self.emit(f"s_cselect_b32 {dst}, 1, 0")
            else:
                self.emit(f"s_mov_b32 {dst}, {a}")
        else:
            raise CodegenError(f"kernel {self.k.name}: no SALU form for {o} {op.dtype}")

    def exp(self, dst: Val, x: str):
        """exp(x) = 2**n * exp2(f): x clamped to [-150, 150] (beyond, the result is 0 or inf anyway),
        x * log2(e) = p + e exactly (FMA residual plus log2(e)'s low part), n = rint(p), f = p - n + e."""
        e = self.emit
        hi = f32bits(LOG2E)
        lo = f32bits(LOG2E - struct.unpack("<f", struct.pack("<I", hi))[0])
        e(f"v_max_f32 v2, {_lit(f32bits(-150.0))}, {x}")
        e(f"v_min_f32 v2, {_lit(f32bits(150.0))}, v2")
        e(f"v_mul_f32 v4, {_lit(hi)}, v2")
        e(f"v_fma_f32 v5, v2, {_lit(hi)}, -v4")
        e(f"v_fma_f32 v5, v2, {_lit(lo)}, v5")
        e("v_rndne_f32 v6, v4")
        e("v_sub_f32 v4, v4, v6")
        e("v_add_f32 v4, v4, v5")
        e("v_exp_f32 v4, v4")
        e("v_cvt_i32_f32 v6, v6")
        e(f"v_ldexp_f32 {dst}, v4, v6")
        e(f"v_cmp_u_f32 vcc_lo, {x}, {x}")                 # NaN in, NaN out (the clamp dropped it)
        e(f"v_cndmask_b32 {dst}, {dst}, {x}, vcc_lo")

    def divisor(self, op, b: Val) -> int:
        if b is None or b.kind != "k" or b.ival <= 0:
            raise CodegenError(f"kernel {self.k.name} at {op.op} %{op.id}: the divisor must be a positive "
                               "constant (the IR's rule for idiv/mod)")
        return b.ival

    # VALU: everything per-lane and every float op
    def valu(self, op, src):
        o, d = op.op, op.dtype
        dst = self._alloc(op.id, "v", d)
        sd = src[0].dtype if src else d
        fl = sd == "float32"
        a = src[0]
        e = self.emit
        if o in ("add", "sub", "mul", "max"):
            mn = {"add": "v_add_f32", "sub": "v_sub_f32", "mul": "v_mul_f32", "max": "v_max_f32"}[o] if fl else \
                {"add": "v_add_nc_u32", "sub": "v_sub_nc_u32", "mul": "v_mul_lo_u32", "max": "v_max_i32"}[o]
            x, y = self.vsrcs(src)
            e(f"{mn} {dst}, {x}, {y}")
        elif o == "neg":
            (x,) = self.vsrcs(src)
            e(f"v_xor_b32 {dst}, 0x80000000, {x}" if fl else f"v_sub_nc_u32 {dst}, 0, {x}")
        elif o == "relu":
            (x,) = self.vsrcs(src)
            e(f"v_max_f32 {dst}, 0, {x}" if fl else f"v_max_i32 {dst}, 0, {x}")
        elif o == "div":
            x = self.to_v(src[0], 5)
            y = self.to_v(src[1], 6)
            e(f"v_div_scale_f32 v2, null, {y}, {y}, {x}")      # scaled denominator
            e(f"v_div_scale_f32 v3, vcc_lo, {x}, {y}, {x}")    # scaled numerator; VCC for div_fmas
            e("v_rcp_f32 v4, v2")
            e("v_fma_f32 v7, -v2, v4, 1.0")
            e("v_fmac_f32 v4, v7, v4")                        # refined reciprocal
            e(f"v_mul_f32 {dst}, v3, v4")
            e(f"v_fma_f32 v7, -v2, {dst}, v3")
            e(f"v_fmac_f32 {dst}, v7, v4")
            e(f"v_fma_f32 v7, -v2, {dst}, v3")
            e(f"v_div_fmas_f32 v7, v7, v4, {dst}")
            e(f"v_div_fixup_f32 {dst}, v7, {y}, {x}")
        elif o == "sqrt":
            (x,) = self.vsrcs(src)
            e(f"v_sqrt_f32 {dst}, {x}")
        elif o == "exp":
            self.exp(dst, self.to_v(src[0], 3))
        elif o == "log":
            x = self.to_v(src[0], 3)
            e(f"v_log_f32 v2, {x}")
            e(f"v_mul_f32 {dst}, {_lit(f32bits(LN2))}, v2")
        elif o in ("sigmoid", "tanh"):
            x = self.to_v(src[0], 3)
            scale = -LOG2E if o == "sigmoid" else 2 * LOG2E
            e(f"v_mul_f32 v2, {_lit(f32bits(scale))}, {x}")
            e("v_exp_f32 v2, v2")
            e("v_add_f32 v2, 1.0, v2")
            if o == "sigmoid":
                e(f"v_rcp_f32 {dst}, v2")
            else:
                e("v_rcp_f32 v2, v2")
                e(f"v_fma_f32 {dst}, -2.0, v2, 1.0")
        elif o in ir.COMPARE:
            if fl:
                cc = {"cmplt": "lt_f32", "cmple": "le_f32", "cmpeq": "eq_f32", "cmpne": "neq_f32"}[o]
            else:
                cc = {"cmplt": "lt_i32", "cmple": "le_i32", "cmpeq": "eq_u32", "cmpne": "ne_u32"}[o]
            x, y = self.vsrcs(src)
            e(f"v_cmp_{cc} vcc_lo, {x}, {y}")
            e(f"v_cndmask_b32 {dst}, 0, 1, vcc_lo")
        elif o == "where":
            c, x, y = src
            if c.kind == "k":
                (v,) = self.vsrcs([x if c.bits else y])
                e(f"v_mov_b32 {dst}, {v}")
                return
            (cs,) = self.vsrcs([c])
            e(f"v_cmp_ne_u32 vcc_lo, 0, {cs}" if c.kind == "v" else f"v_cmp_ne_u32 vcc_lo, {cs}, 0")
            ys, xs = self.vsrcs([y, x])
            e(f"v_cndmask_b32 {dst}, {ys}, {xs}, vcc_lo")
        elif o == "cast":
            (x,) = self.vsrcs(src)
            if d == sd:
                e(f"v_mov_b32 {dst}, {x}")
            elif d == "bool":
                e(f"v_cmp_neq_f32 vcc_lo, 0, {x}" if fl else f"v_cmp_ne_u32 vcc_lo, 0, {x}")
                e(f"v_cndmask_b32 {dst}, 0, 1, vcc_lo")
            elif d == "float32":
                e(f"v_cvt_f32_i32 {dst}, {x}")
            elif fl:
                e(f"v_cvt_i32_f32 {dst}, {x}")
            else:                                           # bool -> int32: already 0/1
                e(f"v_mov_b32 {dst}, {x}")
        elif o in ("idiv", "mod"):
            dv = self.divisor(op, src[1])
            (x,) = self.vsrcs([a])
            if dv & (dv - 1) == 0:
                if o == "idiv":
                    e(f"v_lshrrev_b32 {dst}, {dv.bit_length() - 1}, {x}")
                else:
                    e(f"v_and_b32 {dst}, {_lit(dv - 1)}, {x}")
            else:
                m, sh = magic(dv)
                e(f"v_mul_hi_u32 v2, {_lit(m)}, {x}")
                if o == "idiv":
                    e(f"v_lshrrev_b32 {dst}, {sh}, v2")
                else:
                    e(f"v_lshrrev_b32 v2, {sh}, v2")
                    e(f"v_mul_lo_u32 v2, {_lit(dv)}, v2")
                    e(f"v_sub_nc_u32 {dst}, {x}, v2")
        else:
            raise CodegenError(f"kernel {self.k.name} at {o} %{op.id}: no RDNA3 form for {o} on {sd}")


UNROLL_LENGTH, UNROLL_OPS = 16, 256     # reduces this short (and this small once unrolled) are unrolled


def unroll(k: ir.Kernel) -> ir.Kernel:
    """Reduces of at most UNROLL_LENGTH iterations whose unrolled body stays within UNROLL_OPS ops become
    straight-line code: the body once per index (the index a constant), accumulated in index order from
    the identity, so sums round exactly as the C reference's loop does. Inner reduces go first."""
    next_id = [max([op.id for op in k.walk()] + [op.arg.var for op in k.walk() if op.op == "reduce"]) + 1]

    def new() -> int:
        next_id[0] += 1
        return next_id[0] - 1

    def copy(op, mp):
        srcs = tuple(mp.get(x, x) for x in op.srcs)
        if op.op == "store":
            return ir.Op(-1, op.op, op.dtype, srcs, op.arg)
        mp[op.id] = new()
        if op.op != "reduce":
            return ir.Op(mp[op.id], op.op, op.dtype, srcs, op.arg)
        r = op.arg
        mp[r.var] = new()
        body = tuple(copy(o, mp) for o in op.body)
        arg = ir.Reduce(r.kind, r.length, mp[r.var], mp.get(r.result, r.result))
        return ir.Op(mp[op.id], op.op, op.dtype, (), arg, body)

    def walk(body) -> list:
        out = []
        for op in body:
            if op.op != "reduce":
                out.append(op)
                continue
            r, inner = op.arg, walk(op.body)
            if r.length > UNROLL_LENGTH or r.length * sum(1 for _ in ir._walk(inner)) > UNROLL_OPS:
                out.append(ir.Op(op.id, op.op, op.dtype, op.srcs, r, tuple(inner)))
                continue
            if r.kind == "sum":
                ident = 0.0 if op.dtype == "float32" else 0
            else:
                ident = -math.inf if op.dtype == "float32" else -2**31
            acc = new()
            out.append(ir.Op(acc, "const", op.dtype, (), ident))
            for t in range(r.length):
                mp = {r.var: new()}
                out.append(ir.Op(mp[r.var], "const", "int32", (), t))
                out.extend(copy(o, mp) for o in inner)
                nid = op.id if t == r.length - 1 else new()
                res = mp.get(r.result, r.result)
                out.append(ir.Op(nid, "add" if r.kind == "sum" else "max", op.dtype, (acc, res)))
                acc = nid
        return out

    return ir.Kernel(k.name, k.bufs, k.scalars, k.size, tuple(walk(k.body)))


def optimize(k: ir.Kernel) -> ir.Kernel:
    """Common subexpressions merged (same op, dtype, operands and arg, the first one in scope) and
    loop-invariant ops hoisted out of reduces (an op whose operands are all defined outside a reduce's
    body runs once before it; loads qualify, as the IR never loads a buffer the kernel stores)."""
    rename: dict[int, int] = {}

    def walk(body, table: dict, variant: set | None) -> tuple[list, list]:
        """(ops that stay in this body, ops hoisted out of it). variant: the ids that change from one
        iteration of this body's loop to the next (None at the top level, where nothing is hoisted)."""
        keep, out = [], []
        table = dict(table)

        def place(op):
            if op.op != "reduce":       # defined before every later op of this body, here or further out
                table.setdefault((op.op, op.dtype, op.srcs, repr(op.arg)), op.id)
            if variant is None or any(x in variant for x in op.srcs) or op.op == "reduce":
                keep.append(op)
                if variant is not None:
                    variant.add(op.id)
            else:
                out.append(op)

        for op in body:
            srcs = tuple(rename.get(x, x) for x in op.srcs)
            if op.op == "store":
                keep.append(ir.Op(op.id, op.op, op.dtype, srcs, op.arg))
            elif op.op == "reduce":
                r = op.arg
                stay, up = walk(op.body, table, {r.var})
                for h in up:                  # invariant in the inner loop: here, or further out
                    place(h)                  # (never a duplicate: the inner body saw this table)
                arg = ir.Reduce(r.kind, r.length, r.var, rename.get(r.result, r.result))
                place(ir.Op(op.id, op.op, op.dtype, (), arg, tuple(stay)))
            else:
                key = (op.op, op.dtype, srcs, repr(op.arg))
                if key in table:
                    rename[op.id] = table[key]
                    continue
                place(ir.Op(op.id, op.op, op.dtype, srcs, op.arg))
        return keep, out

    k = unroll(k)
    body, _ = walk(k.body, {}, None)
    out = ir.Kernel(k.name, k.bufs, k.scalars, k.size, tuple(body))
    ir.validate(out)
    return out


MAX_BUF_ELEMENTS = 1 << 30    # the 32-bit VGPR byte offset (idx * 4) of global_load/store reaches 4 GiB


def assembly(k: ir.Kernel, opt: bool = True) -> str:
    ir.validate(k)
    for b in k.bufs:    # past it idx * 4 wraps, and the access lands at the start of the buffer instead
        if b.size > MAX_BUF_ELEMENTS:
            raise CodegenError(f"kernel {k.name}: buffer {b.name} has {b.size} elements; this generator addresses a "
                               f"buffer by a 32-bit byte offset, {MAX_BUF_ELEMENTS} 4-byte elements at most (4 GiB): "
                               "split the tensor, or use the LLVM generator (CODEGEN=llvm)")
    return _Gen(optimize(k) if opt else k).run()


class _Spec(KernelSpec):
    """A KernelSpec whose argument metadata also carries `.type_name` (as clang writes it), so hcq packs
    float32 scalars as floats and int32 ones as signed ints."""
    type_names: tuple = ()

    def metadata(self) -> dict:
        m = super().metadata()
        for a, t in zip(m[".args"], self.type_names):
            a[".type_name"] = t
        return m


_CTYPE = {"float32": "float", "int32": "int"}


def kernel_spec(k: ir.Kernel, code: bytes) -> KernelSpec:
    args = [KernelArg(8 * i, 8, "global_buffer", "global", b.name) for i, b in enumerate(k.bufs)]
    args += [KernelArg(8 * len(k.bufs) + 4 * j, 4, "by_value", None, s.name) for j, s in enumerate(k.scalars)]
    (_, _, _), (local, _, _) = ir.launch_dims(k)
    spec = _Spec(k.name, code, args=args, user_sgprs=("kernarg_segment_ptr",), workgroup_ids=1,
                 workitem_ids=1, max_flat_workgroup_size=local)
    spec.type_names = tuple(f"{_CTYPE[b.dtype]}*" for b in k.bufs) + tuple(_CTYPE[p.dtype] for p in k.scalars)
    return spec


_memo: dict[ir.Kernel, bytes] = {}


def generate(k: ir.Kernel):
    """(code object bytes, kernel name, (global_size, local_size)) as compiler_bridge.runtime takes them."""
    co = _memo.get(k)
    if co is None:
        text = assembly(k)
        try:
            code = asm.assemble(text)
        except asm.AsmError as exc:
            raise CodegenError(f"kernel {k.name}: generated assembly does not assemble: {exc}\n{text}") from exc
        co = _memo[k] = write_code_object([kernel_spec(k, code)])
    return co, k.name, ir.launch_dims(k)


register_codegen("rdna3", generate)
