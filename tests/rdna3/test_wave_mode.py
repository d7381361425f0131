"""The wave's MODE register: set from COMPUTE_PGM_RSRC1 at launch (AMDGPUUsage: the CP sets the wave's
round and denormal modes, DX10_CLAMP and IEEE from the descriptor's FLOAT_MODE bits), changed by
s_round_mode / s_denorm_mode / s_setreg, read by s_getreg, and honoured by the float ops (denormals flushed on
input or output, directed rounding), against references computed here from exact rationals."""
import dataclasses
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from rdna3 import assemble
from rdna3.codeobj import CodeObject, KernelArg, KernelSpec, write_code_object
from rdna3.wave import dispatch_packet, launch, pack_kernargs
from rdna3.wave_memory import FlatMemory

f16, f32, f64, u32, u64 = np.float16, np.float32, np.float64, np.uint32, np.uint64
KERNELS = Path(__file__).parent / "kernels"
# COMPUTE_PGM_RSRC1 (gc_11_0_0_sh_mask.h): FLOAT_MODE 19:12 (round f32 13:12, round f16/f64 15:14, denorm f32
# 17:16, denorm f16/f64 19:18), DX10_CLAMP 21, IEEE_MODE 23
FLOAT_MODE_SHIFT, DX10_CLAMP, IEEE_MODE = 12, 1 << 21, 1 << 23
NEAREST, UP, DOWN, ZERO = range(4)       # AMDGPUUsage FLOAT_ROUND_MODE_*
FLUSH_BOTH, FLUSH_DST, FLUSH_SRC, FLUSH_NONE = range(4)    # AMDGPUUsage FLOAT_DENORM_MODE_*
rng = np.random.default_rng(7)


def float_mode(round32=NEAREST, round16_64=NEAREST, denorm32=FLUSH_NONE, denorm16_64=FLUSH_NONE) -> int:
    return (round32 | round16_64 << 2 | denorm32 << 4 | denorm16_64 << 6) << FLOAT_MODE_SHIFT


def with_float_mode(rsrc1: int, **kw) -> int:
    return rsrc1 & ~(0xFF << FLOAT_MODE_SHIFT) | float_mode(**kw)


def run_valu(text, *inputs, lanes=64, rsrc1=None, block=None, dwords=1):
    """Runs `text` (writing v4, or v[4:5] with dwords=2, from v1, v2, v3, or v[1:2], v[3:4] with dwords=2)
    with inputs loaded per lane, launched with COMPUTE_PGM_RSRC1 = rsrc1 (default: the descriptor's,
    clang's defaults); returns v4 (v[4:5]) of every lane as uint32 (uint64)."""
    t = u32 if dwords == 1 else u64
    load = "global_load_b32" if dwords == 1 else "global_load_b64"
    regs = ["v1", "v2", "v3"] if dwords == 1 else ["v[1:2]", "v[3:4]", "v[5:6]"]
    loads = "\n".join(f"{load} {regs[k]}, v10, s[6:7] offset:{4 * dwords * lanes * k}" for k in range(len(inputs)))
    store = "global_store_b32 v10, v4, s[4:5]" if dwords == 1 else "global_store_b64 v10, v[4:5], s[4:5]"
    code = assemble(f"""
        s_load_b128 s[4:7], s[0:1], 0x0
        v_lshlrev_b32 v10, {2 if dwords == 1 else 3}, v0
        s_waitcnt lgkmcnt(0)
        {loads}
        s_waitcnt vmcnt(0)
        {text}
        {store}
        s_endpgm
    """)
    spec = KernelSpec("t", code, args=[KernelArg(0, 8, "global_buffer", "global"),
                                       KernelArg(8, 8, "global_buffer", "global")], vgpr_count=16)
    co = CodeObject(write_code_object([spec]))
    kern = co.kernel()
    mem = FlatMemory()
    out = mem.upload(np.zeros(lanes, t))
    src = mem.upload(np.concatenate([np.asarray(a).view(t) for a in inputs]) if inputs else np.zeros(1, t))
    kd = kern.descriptor
    if rsrc1 is not None:       # the float mode bits given, the VGPR count the code's
        kd = dataclasses.replace(kd, compute_pgm_rsrc1=rsrc1 & ~0x3F | kd.compute_pgm_rsrc1 & 0x3F)
    args = mem.upload(np.frombuffer(pack_kernargs(kern, [out, src]).ljust(256, b"\0"), np.uint8), 64)
    launch(kd, kern.code, kern.code_address, mem, (lanes,), (block or lanes,), {"kernarg_segment_ptr": args})
    return mem.array(out, t, lanes)


def default_rsrc1() -> int:
    spec = KernelSpec("t", assemble("s_endpgm"))
    return CodeObject(write_code_object([spec])).kernel().descriptor.compute_pgm_rsrc1


def directed(x: Fraction, t, mode):
    """x rounded to float type t in `mode`, by searching the neighbours of the nearest double (a reference
    independent of the executor's method)."""
    c = t(float(x)) if abs(x) < 2 ** 1000 else t(np.inf if x > 0 else -np.inf)
    cands = sorted({c, np.nextafter(c, t(np.inf)), np.nextafter(c, t(-np.inf))}, key=float)
    exact = [v for v in cands if np.isfinite(v) and Fraction(float(v)) == x]
    if exact:
        return exact[0]
    lo = max((v for v in cands if np.isfinite(v) and Fraction(float(v)) < x), key=float, default=t(-np.inf))
    hi = min((v for v in cands if np.isfinite(v) and Fraction(float(v)) > x), key=float, default=t(np.inf))
    if mode == UP:
        return hi
    if mode == DOWN:
        return lo
    if mode == ZERO:
        return lo if x > 0 else hi
    return t(float(x))


def flushed(a):
    a = np.asarray(a)
    return np.where(np.abs(a) < np.finfo(a.dtype).tiny, np.copysign(a.dtype.type(0), a), a)


# ------------------------------------------------------------------------------------------------
# the MODE register itself


def test_mode_starts_from_rsrc1_and_s_getreg_reads_it():
    base = default_rsrc1()
    # clang's defaults: nearest even, no flush, DX10_CLAMP and IEEE set: MODE 0x3f0
    got = run_valu("s_getreg_b32 s8, hwreg(HW_REG_MODE)\nv_mov_b32 v4, s8", lanes=32, rsrc1=base)
    assert (got == 0x3F0).all()
    r1 = with_float_mode(base, round32=ZERO, round16_64=UP, denorm32=FLUSH_DST, denorm16_64=FLUSH_SRC) & ~DX10_CLAMP
    got = run_valu("s_getreg_b32 s8, hwreg(HW_REG_MODE)\nv_mov_b32 v4, s8", lanes=32, rsrc1=r1)
    assert (got == (3 | 1 << 2 | 1 << 4 | 2 << 6 | 1 << 9)).all()
    # a field: FP_DENORM alone
    got = run_valu("s_getreg_b32 s8, hwreg(HW_REG_MODE, 4, 4)\nv_mov_b32 v4, s8", lanes=32, rsrc1=r1)
    assert (got == (1 | 2 << 2)).all()


def test_s_round_mode_s_denorm_mode_and_s_setreg_change_mode():
    text = """
        s_round_mode 0x6
        s_denorm_mode 0x9
        s_getreg_b32 s8, hwreg(HW_REG_MODE, 0, 10)
        v_mov_b32 v4, s8
    """
    assert (run_valu(text, lanes=32) == (0x6 | 0x9 << 4 | 0x300)).all()
    text = """
        s_mov_b32 s9, 0x2b
        s_setreg_b32 hwreg(HW_REG_MODE, 2, 4), s9
        s_setreg_imm32_b32 hwreg(HW_REG_MODE, 8, 1), 0
        s_getreg_b32 s8, hwreg(HW_REG_MODE)
        v_mov_b32 v4, s8
    """
    # bits 5:2 take the low 4 bits of 0x2b (0xb); DX10_CLAMP cleared; the rest as launched
    assert (run_valu(text, lanes=32) == ((0x3F0 & ~(0xF << 2) & ~0x100) | 0xB << 2)).all()


# ------------------------------------------------------------------------------------------------
# denormals


def test_f32_denormal_modes_flush_sources_and_results_as_each_mode_says():
    d = f32(1e-39)                       # an f32 denormal
    tiny = np.finfo(f32).tiny
    # (op, a, b, result when no flush, whether a source is denormal, whether the result is)
    cases = [("v_add_f32", d, f32(0), d, True, True),
             ("v_add_f32", f32(1.5 * tiny), f32(-tiny), f32(0.5 * tiny), False, True),
             ("v_mul_f32", d, f32(2.0 ** 100), f32(d * f32(2.0 ** 100)), True, False),
             ("v_mul_f32", f32(2.0 ** -100), f32(2.0 ** -30), f32(2.0 ** -130), False, True)]
    a = np.array([c[1] for c in cases] * 8, f32)
    b = np.array([c[2] for c in cases] * 8, f32)
    for mode in range(4):
        r1 = with_float_mode(default_rsrc1(), denorm32=mode)
        for k, (op, _, _, full, src_den, res_den) in enumerate(cases):
            got = run_valu(f"{op} v4, v1, v2", a, b, lanes=32, rsrc1=r1).view(f32)[k]
            flush_src = mode in (FLUSH_BOTH, FLUSH_SRC) and src_den
            flush_dst = mode in (FLUSH_BOTH, FLUSH_DST) and res_den
            want = f32(0) if flush_src or flush_dst else full
            assert got == want and np.signbit(got) == np.signbit(want), (mode, op, got, want)


def test_denormal_flush_keeps_the_sign_and_follows_the_fma_and_conversions():
    d = np.array([-1e-39, 1e-39, 3e-40, 1.0] * 8, f32)
    one = np.ones(32, f32)
    r1 = with_float_mode(default_rsrc1(), denorm32=FLUSH_BOTH)
    got = run_valu("v_mul_f32 v4, v1, v2", d, one, rsrc1=r1, lanes=32).view(f32)
    assert np.array_equal(got, flushed(d)) and np.signbit(got[0]) and not np.signbit(got[1])
    got = run_valu("v_fma_f32 v4, v1, v2, 1.0", d, one, rsrc1=r1, lanes=32).view(f32)
    assert np.array_equal(got, flushed(d) + 1)
    # conversion f32 -> f16: the f32 source flushed by the f32 mode, the f16 result by the f16/f64 mode
    x = np.array([1e-39, 3e-5, 1.0, -3e-5] * 8, f32)       # 3e-5 is an f16 denormal
    for d32, d16, want in ((FLUSH_NONE, FLUSH_NONE, x.astype(f16)), (FLUSH_BOTH, FLUSH_NONE, flushed(x).astype(f16)),
                           (FLUSH_NONE, FLUSH_BOTH, flushed(x.astype(f16)))):
        r1 = with_float_mode(default_rsrc1(), denorm32=d32, denorm16_64=d16)
        got = (run_valu("v_cvt_f16_f32 v4, v1", x, rsrc1=r1, lanes=32) & 0xFFFF).astype(np.uint16).view(f16)
        assert np.array_equal(got, want), (d32, d16)


def test_f16_and_f64_follow_their_own_mode_bits():
    h = np.array([6e-6, 1.0] * 16, f16)     # an f16 denormal
    bits = h.view(np.uint16).astype(u32)
    only32 = with_float_mode(default_rsrc1(), denorm32=FLUSH_BOTH)
    only16 = with_float_mode(default_rsrc1(), denorm16_64=FLUSH_BOTH)
    got = lambda r1: (run_valu("v_mul_f16 v4, v1, 1.0", bits, rsrc1=r1, lanes=32) & 0xFFFF).astype(np.uint16).view(f16)
    assert np.array_equal(got(only32), h)
    assert np.array_equal(got(only16), flushed(h))
    dd = np.array([1e-310, 2.0] * 16, f64)
    got64 = lambda r1: run_valu("v_add_f64 v[4:5], v[1:2], 0", dd, rsrc1=r1, lanes=32, dwords=2).view(f64)
    assert np.array_equal(got64(only32), dd)
    assert np.array_equal(got64(only16), flushed(dd))
    # packed f16 math too
    pk = (bits | bits << 16).astype(u32)
    got = run_valu("v_pk_mul_f16 v4, v1, 1.0 op_sel_hi:[1,0]", pk, rsrc1=only16, lanes=32)
    want = flushed(h).view(np.uint16).astype(u32)
    assert np.array_equal(got, want | want << 16)


# ------------------------------------------------------------------------------------------------
# round modes


@pytest.mark.parametrize("mode", [NEAREST, UP, DOWN, ZERO])
def test_f32_round_modes_round_add_mul_fma_and_conversions_as_ieee_directed_rounding(mode):
    n = 64
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(f32)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(f32)
    c = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(f32)
    a[:4] = [3.0e38, -3.0e38, 1e-39, 1.0]      # overflow, underflow into the denormals
    b[:4] = [3.0e38, -3.0e38, 1e-39, -1.0]     # exact zero sum: -0 rounding down
    r1 = with_float_mode(default_rsrc1(), round32=mode)
    F = lambda v: Fraction(float(v))   # noqa: E731
    ops = {"v_add_f32 v4, v1, v2": lambda x, y, z: F(x) + F(y),
           "v_mul_f32 v4, v1, v2": lambda x, y, z: F(x) * F(y),
           "v_fma_f32 v4, v1, v2, v3": lambda x, y, z: F(x) * F(y) + F(z)}
    for text, exact in ops.items():
        got = run_valu(text, a, b, c, rsrc1=r1, lanes=n).view(f32)
        for i in range(4, n):
            assert got[i] == directed(exact(a[i], b[i], c[i]), f32, mode), (text, i)
    got = run_valu("v_add_f32 v4, v1, v2", a, b, rsrc1=r1, lanes=n).view(f32)
    assert got[0] == {NEAREST: np.inf, UP: np.inf, DOWN: np.finfo(f32).max, ZERO: np.finfo(f32).max}[mode]
    assert got[1] == {NEAREST: -np.inf, UP: -np.finfo(f32).max, DOWN: -np.inf, ZERO: -np.finfo(f32).max}[mode]
    assert got[3] == 0 and np.signbit(got[3]) == (mode == DOWN)
    # int -> f32 conversions round too (2**24 + 1 is not an f32)
    ints = np.array([2 ** 24 + 1, -(2 ** 24 + 1), 2 ** 31 - 1, 7] * 8, np.int32)
    got = run_valu("v_cvt_f32_i32 v4, v1", ints.view(u32), rsrc1=r1, lanes=32).view(f32)
    assert [float(v) for v in got[:4]] == [float(directed(Fraction(int(v)), f32, mode)) for v in ints[:4]]


def test_f64_round_mode_is_the_f16_f64_field():
    a = np.array([1.0, -1.0] * 16, f64)
    b = np.full(32, 2.0 ** -60, f64)
    r1 = with_float_mode(default_rsrc1(), round16_64=UP, round32=DOWN)
    got = run_valu("v_add_f64 v[4:5], v[1:2], v[3:4]", a, b, rsrc1=r1, lanes=32, dwords=2).view(f64)
    assert got[0] == np.nextafter(1.0, 2.0) and got[1] == np.nextafter(-1.0, 0.0)


def test_s_round_mode_and_s_denorm_mode_take_effect_for_the_next_instruction():
    a = np.array([1.0, 1e-39] * 16, f32)
    b = np.array([2.0 ** -30, 0.0] * 16, f32)
    got = run_valu("v_add_f32 v4, v1, v2", a, b, lanes=32).view(f32)
    assert got[0] == 1 and got[1] == f32(1e-39)
    # round toward +inf for f32 (the f16/f64 field 0), flush f32 denormals (the f16/f64 field 3: none)
    text = """
        s_round_mode 0x1
        s_denorm_mode 0xc
        v_add_f32 v4, v1, v2
    """
    got = run_valu(text, a, b, lanes=32).view(f32)
    assert got[0] == np.nextafter(f32(1), f32(2)) and got[1] == 0


def test_waves_with_different_modes_in_one_lockstep_group_each_use_their_own():
    # wave k sets its f32 denormal mode to 3 * (k & 1): even waves flush, odd ones keep denormals
    text = """
        v_readfirstlane_b32 s8, v0
        s_lshr_b32 s8, s8, 5
        s_and_b32 s8, s8, 1
        s_mul_i32 s8, s8, 3
        s_setreg_b32 hwreg(HW_REG_MODE, 4, 2), s8
        v_add_f32 v4, v1, 0
    """
    d = np.full(128, 1e-39, f32)
    got = run_valu(text, d, lanes=128).view(f32)
    assert np.array_equal(got, np.repeat([0, 1e-39, 0, 1e-39], 32).astype(f32))


def test_fp16_ovfl_clamps_an_overflowing_f16_result_but_keeps_true_infinities():
    FP16_OVFL = 1 << 26          # COMPUTE_PGM_RSRC1.FP16_OVFL (gc_11_0_0_sh_mask.h), MODE bit 23
    h = np.array([300.0, -300.0, np.inf, 2.0] * 8, f16)
    bits = h.view(np.uint16).astype(u32)
    base = default_rsrc1()
    for r1, big in ((base, np.inf), (base | FP16_OVFL, 65504.0)):
        got = (run_valu("v_mul_f16 v4, v1, v1", bits, rsrc1=r1, lanes=32) & 0xFFFF).astype(np.uint16).view(f16)
        assert got[0] == big and got[1] == big and got[2] == np.inf and got[3] == 4
        pk = (bits | bits << 16).astype(u32)
        got = run_valu("v_pk_mul_f16 v4, v1, v1", pk, rsrc1=r1, lanes=32)
        assert (got & 0xFFFF).astype(np.uint16).view(f16)[0] == big and (got >> 16).astype(np.uint16).view(f16)[2] == np.inf
    got = run_valu("s_getreg_b32 s8, hwreg(HW_REG_MODE)\nv_mov_b32 v4, s8", lanes=32, rsrc1=base | FP16_OVFL)
    assert (got == 0x3F0 | 1 << 23).all()


def test_dx10_clamp_turns_a_nan_into_zero_when_set():
    a = np.array([np.nan, 2.0, -1.0, 0.25] * 8, f32)
    base = default_rsrc1()
    got = run_valu("v_add_f32 v4, v1, 0 clamp", a, rsrc1=base, lanes=32).view(f32)
    assert np.array_equal(got[:4], [0, 1, 0, 0.25])
    got = run_valu("v_add_f32 v4, v1, 0 clamp", a, rsrc1=base & ~DX10_CLAMP, lanes=32).view(f32)
    assert np.isnan(got[0]) and np.array_equal(got[1:4], [1, 0, 0.25])


# ------------------------------------------------------------------------------------------------
# clang-built kernels: the descriptor's FLOAT_MODE decides what the same code computes


def _clang(src: Path, tmp: Path, *flags) -> Path:
    from tests.conftest import CLANG_CL
    obj, so = tmp / (src.stem + "".join(flags) + ".o"), tmp / (src.stem + "".join(flags) + ".so")
    for cmd in (CLANG_CL + list(flags) + [str(src), "-o", str(obj)], ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
        subprocess.run(cmd, check=True, capture_output=True)
    return so


def _run_kernel(so, a, b, rsrc1=None):
    """Launches the kernel of `so` on out, a, b, n as a CP would: its descriptor's registers, with
    COMPUTE_PGM_RSRC1 = rsrc1 when given."""
    kern = CodeObject.load(so).kernel()
    kd = kern.descriptor if rsrc1 is None else dataclasses.replace(kern.descriptor, compute_pgm_rsrc1=rsrc1)
    mem = FlatMemory()
    out = mem.upload(np.zeros(len(a), f32))
    args = pack_kernargs(kern, [out, mem.upload(a), mem.upload(b), u32(len(a))])
    ka = mem.upload(np.frombuffer(args.ljust(512, b"\0"), np.uint8), 64)
    grid, block = (len(a), 1, 1), (64, 1, 1)
    packet = mem.upload(np.frombuffer(dispatch_packet(grid, block, ka), np.uint8), 64)
    launch(kd, kern.code, kern.code_address, mem, grid, block, {"dispatch_ptr": packet, "kernarg_segment_ptr": ka})
    return mem.array(out, f32, len(a))


def test_a_clang_kernel_gives_other_results_on_denormals_under_another_float_mode(kernel_corpus, tmp_path):
    """add_f32 as clang-15 builds it (FLOAT_DENORM_MODE_32 3) and with -cl-denorms-are-zero (0): the same
    instructions; launched with its own descriptor each gives its own result, and the default kernel launched
    with the other's RSRC1 gives the other's: what the CP programs decides, not the code."""
    if not kernel_corpus:
        pytest.skip("no clang")
    daz = _clang(KERNELS / "add_f32.cl", tmp_path, "-cl-denorms-are-zero")
    plain = kernel_corpus["add_f32"]
    kd_plain, kd_daz = (CodeObject.load(p).kernel().descriptor for p in (plain, daz))
    assert kd_plain.rsrc1["float_denorm_mode_32"] == FLUSH_NONE and kd_daz.rsrc1["float_denorm_mode_32"] == FLUSH_BOTH
    a = np.array([1e-39, -2e-39, 1.0, 3e-39] * 16, f32)
    b = np.array([0.0, 1e-39, 2.0, -1e-39] * 16, f32)
    keep, flush = a + b, flushed(flushed(a) + flushed(b))
    assert not np.array_equal(keep, flush)
    assert np.array_equal(_run_kernel(plain, a, b), keep)
    assert np.array_equal(_run_kernel(daz, a, b), flush)
    assert np.array_equal(_run_kernel(plain, a, b, kd_daz.compute_pgm_rsrc1), flush)
    # and a round mode the descriptor does not ask for changes inexact sums
    x, y = np.full(64, 1.0, f32), np.full(64, 2.0 ** -30, f32)
    rz = with_float_mode(kd_plain.compute_pgm_rsrc1, round32=UP)
    assert (_run_kernel(plain, x, y) == 1.0).all() and (_run_kernel(plain, x, y, rz) == np.nextafter(f32(1), f32(2))).all()


def test_a_flush_mode_division_switches_denormals_on_around_its_scaling(kernel_corpus, tmp_path):
    """clang-15 builds an IEEE f32 division in a flush-denormals kernel with s_denorm_mode 15 ... 12 around
    the div_scale/fma sequence (LLVM SIISelLowering's LowerFDIV32): the quotient is right for normal results
    and the denormal ones are flushed by the restored mode."""
    if not kernel_corpus:
        pytest.skip("no clang")
    so = _clang(KERNELS / "div_f32.cl", tmp_path, "-cl-denorms-are-zero", "-cl-fp32-correctly-rounded-divide-sqrt")
    from rdna3 import decode
    code, at, texts = CodeObject.load(so).kernel().code, 0, []
    while at < len(code) and not texts[-1:] == ["s_endpgm"]:
        inst = decode(code, at)
        texts.append(inst.op)
        at += inst.size
    assert texts.count("s_denorm_mode") == 2
    a = np.concatenate([rng.uniform(-100, 100, 60), [1e-38, -3e-38, 5.0, 1.0]]).astype(f32)
    b = np.concatenate([rng.uniform(0.5, 10, 60), [8.0, 16.0, 3.0, 3.0]]).astype(f32)
    got = _run_kernel(so, a, b)
    assert np.array_equal(got, flushed(a / b))
    assert got[60] == 0 and got[61] == 0 and np.signbit(got[61])


# ------------------------------------------------------------------------------------------------
# MODE.IEEE: the NaN rules of the float min/max ops (RDNA3 ISA, V_MIN_F32 and its kin; MODE register)

SNAN, SNAN_Q, QNAN, QNAN2, ONE = 0x7FA00000, 0x7FE00000, 0x7FC00001, 0xFFC00002, 0x3F800000


def _f32_pairs(pairs):
    a = np.array([p[0] for p in pairs] * (32 // len(pairs) + 1), u32)[:32]
    b = np.array([p[1] for p in pairs] * (32 // len(pairs) + 1), u32)[:32]
    return a, b


@pytest.mark.parametrize("op", ["v_min_f32", "v_max_f32"])
def test_ieee_mode_decides_whether_min_max_quiet_a_signalling_nan(op):
    # (S0, S1, result with IEEE, result without): with IEEE an sNaN (S0 first) comes back quieted and a quiet
    # NaN yields the other operand; without, any NaN yields the other operand (S1's NaN checked first) and an
    # sNaN passes unquieted
    cases = [(SNAN, ONE, SNAN_Q, ONE), (ONE, SNAN, SNAN_Q, ONE), (QNAN, ONE, ONE, ONE), (ONE, QNAN, ONE, ONE),
             (SNAN, QNAN, SNAN_Q, SNAN), (QNAN, SNAN, SNAN_Q, QNAN), (QNAN, QNAN2, QNAN, QNAN)]
    a, b = _f32_pairs(cases)
    base = default_rsrc1()
    ieee = run_valu(f"{op} v4, v1, v2", a, b, lanes=32, rsrc1=base)
    dx10 = run_valu(f"{op} v4, v1, v2", a, b, lanes=32, rsrc1=base & ~IEEE_MODE)
    assert [hex(v) for v in ieee[:len(cases)]] == [hex(c[2]) for c in cases]
    assert [hex(v) for v in dx10[:len(cases)]] == [hex(c[3]) for c in cases]
    # the three-source forms compose them (V_MIN3_F32 = v_min_f32(v_min_f32(S0, S1), S2))
    three = f"{op.replace('_f32', '3_f32')} v4, v1, v2, v3"
    c = np.full(32, QNAN, u32)
    ieee = run_valu(three, a, b, c, lanes=32, rsrc1=base)
    dx10 = run_valu(three, a, b, c, lanes=32, rsrc1=base & ~IEEE_MODE)
    assert [hex(v) for v in ieee[[0, 4]]] == [hex(SNAN_Q)] * 2
    assert [hex(v) for v in dx10[[0, 4]]] == [hex(ONE), hex(SNAN)]


def test_ieee_mode_min_max_in_f16_f64_and_packed_math():
    h_snan, h_snan_q, h_one = 0x7D00, 0x7F00, 0x3C00
    a = np.array([h_snan, h_one] * 16, u32)
    b = np.array([h_one, h_snan] * 16, u32)
    base = default_rsrc1()
    ieee = run_valu("v_max_f16 v4, v1, v2", a, b, lanes=32, rsrc1=base) & 0xFFFF
    dx10 = run_valu("v_max_f16 v4, v1, v2", a, b, lanes=32, rsrc1=base & ~IEEE_MODE) & 0xFFFF
    assert list(ieee[:2]) == [h_snan_q, h_snan_q] and list(dx10[:2]) == [h_one, h_one]
    pk = (a | a << 16).astype(u32)
    got = run_valu("v_pk_min_f16 v4, v1, v2", pk, (b | b << 16).astype(u32), lanes=32, rsrc1=base)
    assert got[0] == h_snan_q | h_snan_q << 16
    got = run_valu("v_pk_min_f16 v4, v1, v2", pk, (b | b << 16).astype(u32), lanes=32, rsrc1=base & ~IEEE_MODE)
    assert got[0] == h_one | h_one << 16
    d_snan, d_one = 0x7FF4000000000000, 0x3FF0000000000000
    da = np.array([d_snan, d_one] * 16, u64)
    db = np.array([d_one, d_snan] * 16, u64)
    got = run_valu("v_min_f64 v[4:5], v[1:2], v[3:4]", da, db, lanes=32, rsrc1=base, dwords=2)
    assert list(got[:2]) == [d_snan | 1 << 51] * 2
    got = run_valu("v_min_f64 v[4:5], v[1:2], v[3:4]", da, db, lanes=32, rsrc1=base & ~IEEE_MODE, dwords=2)
    assert list(got[:2]) == [d_one] * 2


def test_min_max_order_minus_zero_below_plus_zero_in_both_modes():
    z, nz = 0x00000000, 0x80000000
    a, b = _f32_pairs([(z, nz), (nz, z), (nz, nz), (z, z)])
    for r1 in (default_rsrc1(), default_rsrc1() & ~IEEE_MODE):
        assert list(run_valu("v_min_f32 v4, v1, v2", a, b, lanes=32, rsrc1=r1)[:4]) == [nz, nz, nz, z]
        assert list(run_valu("v_max_f32 v4, v1, v2", a, b, lanes=32, rsrc1=r1)[:4]) == [z, z, nz, z]


def test_med3_with_a_nan_source_is_min3_of_its_sources():
    nan = np.float32(np.nan)
    a = np.array([1.0, nan, 1.0, 5.0] * 8, f32)
    b = np.array([2.0, 1.0, nan, 1.0] * 8, f32)
    c = np.array([nan, 2.0, 2.0, 3.0] * 8, f32)
    got = run_valu("v_med3_f32 v4, v1, v2, v3", a, b, c, lanes=32).view(f32)
    # min3 ignores a quiet NaN: (1, 2, NaN) -> 1, where a min/max sandwich would give 2
    assert list(got[:4]) == [1.0, 1.0, 1.0, 3.0]


def test_min_max_results_follow_the_input_denormal_mode_only():
    """RDNA3 ISA, V_MIN_F32: with input denormals allowed the min/max result is a denormal "regardless of output
    denorm mode"; with them flushed it cannot be one. Other ops flush their results under mode 1."""
    d = np.full(32, 1e-39, f32)
    for mode, keeps in ((FLUSH_NONE, True), (FLUSH_DST, True), (FLUSH_SRC, False), (FLUSH_BOTH, False)):
        r1 = with_float_mode(default_rsrc1(), denorm32=mode)
        got = run_valu("v_max_f32 v4, v1, v1", d, lanes=32, rsrc1=r1).view(f32)
        assert (got == (d if keeps else 0)).all(), mode
    r1 = with_float_mode(default_rsrc1(), denorm32=FLUSH_DST)
    assert (run_valu("v_mul_f32 v4, 1.0, v1", d, lanes=32, rsrc1=r1).view(f32) == 0).all()
    h = np.full(32, np.float16(6e-6).view(np.uint16), u32)
    r1 = with_float_mode(default_rsrc1(), denorm16_64=FLUSH_DST)
    assert ((run_valu("v_pk_max_f16 v4, v1, v1", h, lanes=32, rsrc1=r1) & 0xFFFF) == h).all()


# ------------------------------------------------------------------------------------------------
# denormals in compares, transcendentals and v_div_fmas


@pytest.mark.parametrize("mode", [FLUSH_BOTH, FLUSH_DST, FLUSH_SRC, FLUSH_NONE])
def test_compares_see_a_flushed_denormal_source_as_zero(mode):
    d = np.array([1e-39, -1e-39, 1.0, 0.0] * 8, f32)
    flush = mode in (FLUSH_BOTH, FLUSH_SRC)
    r1 = with_float_mode(default_rsrc1(), denorm32=mode)
    text = "v_cmp_eq_f32 vcc_lo, 0, v1\nv_cndmask_b32 v4, 0, 1, vcc_lo"
    assert list(run_valu(text, d, lanes=32, rsrc1=r1)[:4]) == [int(flush), int(flush), 0, 1]
    text = "v_cmp_lt_f32 vcc_lo, v1, 0\nv_cndmask_b32 v4, 0, 1, vcc_lo"     # -d < 0 only when kept
    assert list(run_valu(text, d, lanes=32, rsrc1=r1)[:4]) == [0, int(not flush), 0, 0]
    # v_cmpx writes EXEC from the same flushed compare
    text = "v_cmpx_neq_f32 0, v1\nv_mov_b32 v4, 7"
    assert list(run_valu(text, d, lanes=32, rsrc1=r1)[:4]) == [0 if flush else 7, 0 if flush else 7, 7, 0]
    # v_cmp_class reads the raw bits: +denormal (bit 7) whatever the mode
    text = "v_cmp_class_f32 vcc_lo, v1, 0x80\nv_cndmask_b32 v4, 0, 1, vcc_lo"
    assert list(run_valu(text, d, lanes=32, rsrc1=r1)[:4]) == [1, 0, 0, 0]


def test_f16_and_f64_compares_follow_the_f16_f64_denormal_mode():
    h = np.full(32, np.float16(6e-6).view(np.uint16), u32)
    text = "v_cmp_eq_f16 vcc_lo, 0, v1\nv_cndmask_b32 v4, 0, 1, vcc_lo"
    for d16, want in ((FLUSH_NONE, 0), (FLUSH_SRC, 1)):
        r1 = with_float_mode(default_rsrc1(), denorm32=FLUSH_BOTH, denorm16_64=d16)
        assert (run_valu(text, h, lanes=32, rsrc1=r1) == want).all()
    dd = np.full(32, 1e-310, f64)
    text = "v_cmp_gt_f64 vcc_lo, v[1:2], 0\nv_cndmask_b32 v4, 0, 1, vcc_lo\nv_mov_b32 v5, 0"
    for d16, want in ((FLUSH_NONE, 1), (FLUSH_BOTH, 0)):
        r1 = with_float_mode(default_rsrc1(), denorm16_64=d16)
        assert (run_valu(text, dd, lanes=32, rsrc1=r1, dwords=2) == want).all()


def test_f32_transcendentals_flush_denormals_in_every_mode():
    """RDNA3 ISA: V_EXP/LOG/RCP/RSQ/SQRT_F32 "denormals are flushed"; their f16 forms and V_SIN_F32 support
    denormals, so the mode decides there."""
    d = np.full(32, 1e-39, f32)
    r1 = with_float_mode(default_rsrc1(), denorm32=FLUSH_NONE)
    assert (run_valu("v_sqrt_f32 v4, v1", d, lanes=32, rsrc1=r1).view(f32) == 0).all()
    assert (run_valu("v_log_f32 v4, v1", d, lanes=32, rsrc1=r1).view(f32) == -np.inf).all()
    assert (run_valu("v_rsq_f32 v4, v1", d, lanes=32, rsrc1=r1).view(f32) == np.inf).all()
    assert (run_valu("v_rcp_f32 v4, v1", -d, lanes=32, rsrc1=r1).view(f32) == -np.inf).all()
    # results: 2**-130 and 1 / (1.5 * 2**127) are f32 denormals
    got = run_valu("v_exp_f32 v4, v1", np.full(32, -130.0, f32), lanes=32, rsrc1=r1).view(f32)
    assert (got == 0).all()
    got = run_valu("v_rcp_f32 v4, v1", np.full(32, 1.5 * 2.0 ** 127, f32), lanes=32, rsrc1=r1).view(f32)
    assert (got == 0).all()
    # v_sin_f32 keeps a denormal under mode 3 (sin(2 pi x) ~ 2 pi x, still a denormal)
    got = run_valu("v_sin_f32 v4, v1", d, lanes=32, rsrc1=r1).view(f32)
    assert (got > 0).all() and (got < np.finfo(f32).tiny).all()
    h = np.full(32, np.float16(2.0 ** -20).view(np.uint16), u32)
    got = (run_valu("v_sqrt_f16 v4, v1", h, lanes=32, rsrc1=r1) & 0xFFFF).astype(np.uint16).view(np.float16)
    assert (got == np.float16(2.0 ** -10)).all()


def test_div_fmas_does_not_flush_its_sources():
    """RDNA3 ISA, V_DIV_FMAS_F32: "Input denormals are not flushed, but output flushing is allowed"."""
    d = np.full(32, 1e-39, f32)
    big = np.full(32, 2.0 ** 100, f32)
    r1 = with_float_mode(default_rsrc1(), denorm32=FLUSH_BOTH)
    fmas = run_valu("s_mov_b32 vcc_lo, 0\nv_div_fmas_f32 v4, v1, v2, 0", d, big, lanes=32, rsrc1=r1).view(f32)
    fma = run_valu("v_fma_f32 v4, v1, v2, 0", d, big, lanes=32, rsrc1=r1).view(f32)
    assert (fmas == f32(d[0] * f32(2.0 ** 100))).all() and (fma == 0).all()


def test_fract_obeys_the_round_mode_and_keeps_its_clamp():
    """RDNA3 ISA, V_FRACT_F32: S0 + -floor(S0), "obey round mode, result clamped to 0x3f7fffff"."""
    x = np.array([-(0.25 + 2.0 ** -25), -1e-9, 2.5, -np.inf] * 8, f32)   # 0.75 - 2**-25: a tie; 1 - 1e-9
    want = {NEAREST: [0.75, 0.99999994], UP: [0.75, 0.99999994], DOWN: [0.75 - 2.0 ** -24, 0.99999994],
            ZERO: [0.75 - 2.0 ** -24, 0.99999994]}
    for mode, w in want.items():
        got = run_valu("v_fract_f32 v4, v1", x, lanes=32, rsrc1=with_float_mode(default_rsrc1(), round32=mode))
        got = got.view(f32)
        assert list(got[:3]) == [f32(w[0]), f32(w[1]), 0.5] and np.isnan(got[3]), mode


def test_a_global_float_atomic_add_flushes_its_denormal_inputs_in_every_mode():
    """RDNA3 ISA 13.2 ("Cache Atomic Float Denormal"): a global/flat/scratch Add_F32 flushes all input denormals,
    the memory's value and the data, whatever MODE says (LDS's follows the MODE)."""
    d, tiny = f32(1e-39), np.finfo(f32).tiny
    a = np.array([d, d, 1.0, 0.0] * 8, f32)          # stored first: the memory's old value
    b = np.array([0.0, tiny, d, d] * 8, f32)         # then added atomically
    text = """
        global_store_b32 v10, v1, s[4:5]
        global_atomic_add_f32 v10, v2, s[4:5]
        s_waitcnt vmcnt(0)
        global_load_b32 v4, v10, s[4:5]
        s_waitcnt vmcnt(0)
    """
    got = run_valu(text, a, b, lanes=32, rsrc1=with_float_mode(default_rsrc1(), denorm32=FLUSH_NONE)).view(f32)
    assert list(got[:4]) == [0.0, tiny, 1.0, 0.0]
    # the same sum through the VALU keeps them under this mode
    got = run_valu("v_add_f32 v4, v1, v2", a, b, lanes=32).view(f32)
    assert got[0] == d and got[3] == d
