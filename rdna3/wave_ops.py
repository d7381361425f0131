"""Execution semantics of gfx11 ALU instructions, keyed by LLVM mnemonic, on numpy arrays.

Every function takes its sources already converted to the operand type of the opcode (see
`VALU`/`SALU` entries: result type, source types, function) and works elementwise, so the same
function runs one wave (32 lanes) or many waves in lockstep.

Exactness. Integer ops and f32/f64 add, sub, mul, fma, min, max, conversions are bit-exact to IEEE
round-to-nearest-even, which is what gfx11 does with denormals enabled (clang's default mode for
gfx1100, FLOAT_DENORM_MODE 3). Other MODE register settings (round toward +inf, -inf or zero; denormals
flushed) are applied around these functions by rdna3.wave_compile, with the helpers at the end of this
module (DIRECTED, round_directed, flush_denormals), and MODE.IEEE picks the NaN rules of the float
min/max ops (IEEE_OFF holds their IEEE-clear forms). fma is computed in float64 with round-to-odd before the final rounding
to float32, which makes the single rounding exact. The transcendental units are approximations on
the hardware; the model computes them in float64 and rounds once to float32 (error <= 0.5 ulp plus
the float64 error), i.e. inside the hardware's documented bound of 1 ulp for v_exp_f32, v_log_f32,
v_rcp_f32, v_rsq_f32, v_sqrt_f32. v_sin_f32/v_cos_f32 take revolutions (x * 2pi radians); the model
reduces x mod 1 exactly, so its absolute error is < 2**-24 for any finite input, tighter than the
hardware's. Division: v_div_scale/v_div_fmas model the no-scaling path and v_div_fixup returns the
correctly rounded quotient of its numerator and denominator operands, which is what the clang
division sequence computes on hardware for every input.
"""
from __future__ import annotations

import re

import numpy as np

U8, U16, I16, F16 = np.uint8, np.uint16, np.int16, np.float16
U32, I32, F32 = np.uint32, np.int32, np.float32
U64, I64, F64 = np.uint64, np.int64, np.float64

# ------------------------------------------------------------------------------------------------
# float helpers


def fma_f32(a, b, c):
    """Single-rounded float32 fma. The product is exact in float64 and the sum is rounded once to
    float64; rounding that to float32 is exact unless it lands on a float32 rounding midpoint (or
    in the float32 subnormal range), and only those lanes redo the sum with round-to-odd, which
    makes the second rounding exact (53 >= 24 + 2 bits)."""
    p = np.asarray(a, F64) * np.asarray(b, F64)      # exact: 24+24 bits
    c = np.asarray(c, F64)
    s = p + c
    low = np.asarray(s).view(U64) & U64(0x1FFFFFFF)
    suspect = (low == U64(0x10000000)) | (np.abs(s) < 2.0 ** -125)
    if np.any(suspect):
        s = np.array(s, F64)
        p, c = np.broadcast_to(p, s.shape)[suspect], np.broadcast_to(c, s.shape)[suspect]
        t = s[suspect]
        bb = t - p
        err = (p - (t - bb)) + (c - bb)              # exact error of the f64 sum (TwoSum)
        bits = t.view(U64)
        fix = (err != 0) & ((bits & U64(1)) == 0) & np.isfinite(t)
        toward = np.where(np.signbit(err) == np.signbit(t), U64(1), U64(2**64 - 1))
        s[suspect] = np.where(fix, bits + toward, bits).view(F64)
    return np.asarray(s).astype(F32)


def fma_f16(a, b, c):
    """Single-rounded float16 fma: exact product in float64, the sum rounded to odd in float64
    (53 >= 11 + 2 bits), then one rounding to float16."""
    p = np.asarray(a, F64) * np.asarray(b, F64)
    c = np.asarray(c, F64)
    s = np.array(p + c, F64)
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    bits = s.view(U64)
    fix = (err != 0) & ((bits & U64(1)) == 0) & np.isfinite(s)
    toward = np.where(np.signbit(err) == np.signbit(s), U64(1), U64(2**64 - 1))
    return np.where(fix, bits + toward, bits).view(F64).astype(F16)


def fma_f64(a, b, c):
    """float64 fma with one rounding, from exact rational arithmetic per lane (numpy has no fma;
    f64 kernels are rare and small in tests)."""
    from fractions import Fraction
    a, b, c = np.broadcast_arrays(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64))
    out = np.empty(a.shape, F64)
    for i, (x, y, z) in enumerate(zip(a.ravel(), b.ravel(), c.ravel())):
        if np.isfinite(x) and np.isfinite(y) and np.isfinite(z):
            exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
            # a zero sum keeps IEEE's sign rules, which x * y + z already follows
            try:
                out.flat[i] = float(exact) if exact != 0 else x * y + z
            except OverflowError:
                out.flat[i] = np.inf if exact > 0 else -np.inf
        else:
            out.flat[i] = x * y + z
    return out


def to_f32(x):
    return np.asarray(x, F64).astype(F32)


def cvt_f32_to_int(x, lo, hi, dtype):
    x = np.asarray(x, F64)
    r = np.where(np.isnan(x), 0, np.clip(np.trunc(x), lo, hi))
    return r.astype(dtype)


def sin_rev(x):
    x = np.asarray(x, F64)
    return to_f32(np.sin(2 * np.pi * np.where(np.isfinite(x), x - np.floor(x), np.nan)))


def cos_rev(x):
    x = np.asarray(x, F64)
    return to_f32(np.cos(2 * np.pi * np.where(np.isfinite(x), x - np.floor(x), np.nan)))


def frexp_exp(x):
    return np.where(np.isfinite(x) & (x != 0), np.frexp(x)[1], 0).astype(I32)


def fclass(x, mask):
    """v_cmp_class: bit 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal,
    8 +normal, 9 +inf."""
    x = np.asarray(x)
    mask = np.asarray(mask).astype(U32)
    finfo = np.finfo(x.dtype)
    neg = np.signbit(x)
    ax = np.abs(x)
    nan = np.isnan(x)
    quiet_bit = 22 if x.dtype == F32 else 51
    raw = x.view(U32 if x.dtype == F32 else U64)
    qnan = nan & (((raw >> raw.dtype.type(quiet_bit)) & raw.dtype.type(1)) == 1)
    inf = np.isinf(x)
    zero = ax == 0
    den = (ax < finfo.tiny) & ~zero
    norm = np.isfinite(x) & ~zero & ~den
    cls = [nan & ~qnan, qnan, inf & neg, norm & neg, den & neg, zero & neg, zero & ~neg, den & ~neg,
           norm & ~neg, inf & ~neg]
    out = np.zeros(np.broadcast(x, mask).shape, bool)
    for bit, c in enumerate(cls):
        out |= c & (((mask >> U32(bit)) & U32(1)) == 1)
    return out


def div_fixup(q, d, n):
    """The IEEE quotient n / d, correctly rounded (see module docstring); for f16 and f32 the
    float64 quotient rounded once more is exact (53 >= 2 * 24 + 2)."""
    quotient = np.asarray(n, F64) / np.asarray(d, F64)
    return quotient.astype(q.dtype) if q.dtype in (F32, F16) else quotient


# ------------------------------------------------------------------------------------------------
# integer helpers


def popcount(x):
    return np.bitwise_count(x).astype(U32)


def clz32(x):
    x = np.asarray(x, U32)
    n = np.full(x.shape, 32, I32)
    nz = x != 0
    n[nz] = 31 - np.floor(np.log2(x[nz].astype(F64))).astype(I32)
    return n


def ctz32(x):
    x = np.asarray(x, U32)
    low = x & (U32(0) - x)           # lowest set bit
    return np.where(x == 0, -1, 31 - clz32(low)).astype(I32)


def ffbh_u32(x):
    """v_clz_i32_u32: leading zeros, -1 (all ones) for 0."""
    c = clz32(x)
    return np.where(np.asarray(x) == 0, -1, c).astype(I32)


def ctz64(x):
    """s_ctz_i32_b64: trailing zeros of a 64-bit value, -1 for 0."""
    x = np.asarray(x, U64)
    lo, hi = lo32(x), lo32(x >> U64(32))
    return np.where(lo != 0, ctz32(lo), np.where(hi != 0, 32 + ctz32(hi), -1)).astype(I32)


def clz64(x):
    """s_clz_i32_u64: leading zeros of a 64-bit value, -1 for 0."""
    x = np.asarray(x, U64)
    lo, hi = lo32(x), lo32(x >> U64(32))
    return np.where(hi != 0, clz32(hi), np.where(lo != 0, 32 + clz32(lo), -1)).astype(I32)


def cls_i32(x):
    """v_cls_i32: position (from the MSB, 1..31) of the first bit that differs from the sign bit;
    -1 when all bits equal it (0 and -1)."""
    x = np.asarray(x).view(I32) if np.asarray(x).dtype == U32 else np.asarray(x, I32)
    y = np.where(x < 0, ~x, x).astype(U32)
    return np.where((x == 0) | (x == -1), -1, clz32(y)).astype(I32)


def bfrev32(x):
    x = np.asarray(x, U32)
    b = x.view(U8) if x.ndim else np.array([x]).view(U8)
    r = np.unpackbits(b.reshape(-1, 4), axis=1, bitorder="little")[:, ::-1]
    return np.packbits(r, axis=1, bitorder="little").copy().view("<u4").reshape(x.shape)


def bfe_u32(v, off, w):
    off, w = off & U32(31), w & U32(31)
    mask = np.where(w == 0, U32(0), (U32(1) << w) - U32(1)).astype(U32)
    return ((v >> off) & mask).astype(U32)


def bfe_i32(v, off, w):
    off, w = (np.asarray(off) & 31).astype(U32), (np.asarray(w) & 31).astype(U32)
    u = bfe_u32(np.asarray(v).view(U32) if np.asarray(v).dtype == I32 else v, off, w)
    sh = (U32(32) - w) & U32(31)
    r = ((u << sh).view(I32) >> sh.astype(I32)).astype(I32)
    return np.where(w == 0, 0, r).astype(I32)


def perm_b32(s0, s1, sel):
    """v_perm_b32: each result byte picks a byte of {s0:s1} (s1 low) or a fill by its selector."""
    s0, s1, sel = np.broadcast_arrays(np.asarray(s0, U32), np.asarray(s1, U32), np.asarray(sel, U32))
    both = (s1.astype(U64) | (s0.astype(U64) << U64(32)))
    out = np.zeros(s0.shape, U32)
    for k in range(4):
        b = (sel >> U32(8 * k)) & U32(0xFF)
        pick = ((both >> (b.astype(U64) * U64(8) & U64(63))) & U64(0xFF)).astype(U32)
        sign = lambda v, bit: np.where((v >> U32(bit)) & U32(1), U32(0xFF), U32(0))
        r = np.where(b < 8, pick,
            np.where(b == 8, sign(s1, 15), np.where(b == 9, sign(s1, 31),
            np.where(b == 10, sign(s0, 15), np.where(b == 11, sign(s0, 31),
            np.where(b == 12, U32(0), U32(0xFF)))))))
        out |= r.astype(U32) << U32(8 * k)
    return out


def _pk_rtz(x):
    """float32 -> float16 bits, rounding toward zero (v_cvt_pk_rtz_f16_f32)."""
    x = np.asarray(x, F32)
    h = x.astype(F16)
    over = np.isfinite(x) & (np.abs(h.astype(F64)) > np.abs(x.astype(F64)))
    h = np.where(over, np.nextafter(h, F16(0)), h).astype(F16)
    return h.view(U16).astype(U32)


def med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


# Float min/max (RDNA3 ISA, V_MIN_F32/V_MAX_F32 and their f16/f64 forms): -0 orders below +0 ("differs from
# IEEE"); with MODE.IEEE a signalling NaN operand (S0 first) gives that NaN quieted and a quiet NaN gives the
# other operand; with IEEE clear any NaN gives the other operand (S1's checked first), a signalling NaN passing
# unquieted ("IEEE==0: ... pass signaling NaN", MODE register). MIN3/MAX3/MINMAX/MAXMIN are compositions
# of these, MED3 their median with min3's answer when any source is a NaN.
_QUIET_BIT = {F32: (U32, 1 << 22), F16: (U16, 1 << 9), F64: (U64, 1 << 51)}


def _quieted(x):
    """x with the quiet bit of its NaNs set (cvtToQuietNAN)."""
    it, q = _QUIET_BIT[x.dtype.type]
    return np.where(np.isnan(x), x.view(it) | it(q), x.view(it)).view(x.dtype)


def _signalling(x):
    it, q = _QUIET_BIT[x.dtype.type]
    return np.isnan(x) & ((x.view(it) & it(q)) == 0)


def _minmax(a, b, is_max: bool, ieee: bool):
    # the common case (no NaN, no zero) needs none of the special rules: one select and one check
    r = np.maximum(a, b) if is_max else np.minimum(a, b)
    if (np.abs(r) > 0).all():
        return r
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    zeros = (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))
    take_a = (a > b) if is_max else (a < b)
    take_a = take_a | (zeros & (np.signbit(b) if is_max else np.signbit(a)))
    r = np.where(take_a, a, b)
    na, nb = np.isnan(a), np.isnan(b)
    r = np.where(na, b, r)
    r = np.where(nb, a, r)
    if ieee:
        r = np.where(_signalling(b), _quieted(b), r)
        r = np.where(_signalling(a), _quieted(a), r)
    return r


def fmin_ieee(a, b):
    return _minmax(a, b, False, True)


def fmax_ieee(a, b):
    return _minmax(a, b, True, True)


def fmin_dx10(a, b):
    return _minmax(a, b, False, False)


def fmax_dx10(a, b):
    return _minmax(a, b, True, False)


def _med3(mn, mx):
    def med3(a, b, c):
        a, b, c = np.broadcast_arrays(np.asarray(a), np.asarray(b), np.asarray(c))
        top = mx(mx(a, b), c)
        r = np.where(top == a, mx(b, c), np.where(top == b, mx(a, c), mx(a, b)))
        nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
        return np.where(nan, mn(mn(a, b), c), r) if nan.any() else r
    return med3


med3_f, med3_f_dx10 = _med3(fmin_ieee, fmax_ieee), _med3(fmin_dx10, fmax_dx10)


def lo32(x):
    return (np.asarray(x).astype(U64) & U64(0xFFFFFFFF)).astype(U32)


# ------------------------------------------------------------------------------------------------
# VALU table: mnemonic (without _e32/_e64) -> (result type, source types, fn)
# A result type "carry" marks VOP3SD ops whose fn returns (value, carry-out bool array).

VALU: dict[str, tuple] = {}


def _v(names, rtype, stypes, fn):
    for n in names.split():
        VALU[n] = (rtype, stypes, fn)


_ABS = np.abs
f1, f2, f3 = (F32,), (F32, F32), (F32, F32, F32)
u1, u2, u3 = (U32,), (U32, U32), (U32, U32, U32)
i2 = (I32, I32)
d1, d2, d3 = (F64,), (F64, F64), (F64, F64, F64)

# moves and bit ops
_v("v_mov_b32", U32, u1, lambda a: a)
_v("v_not_b32", U32, u1, lambda a: ~a)
_v("v_and_b32", U32, u2, lambda a, b: a & b)
_v("v_or_b32", U32, u2, lambda a, b: a | b)
_v("v_xor_b32", U32, u2, lambda a, b: a ^ b)
_v("v_xnor_b32", U32, u2, lambda a, b: ~(a ^ b))
_v("v_and_or_b32", U32, u3, lambda a, b, c: (a & b) | c)
_v("v_or3_b32", U32, u3, lambda a, b, c: a | b | c)
_v("v_xor3_b32", U32, u3, lambda a, b, c: a ^ b ^ c)
_v("v_bfi_b32", U32, u3, lambda a, b, c: (a & b) | (~a & c))
_v("v_bfe_u32", U32, u3, bfe_u32)
_v("v_bfe_i32", I32, (I32, U32, U32), bfe_i32)
_v("v_bfm_b32", U32, u2, lambda a, b: (((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31))).astype(U32))
_v("v_perm_b32", U32, u3, perm_b32)
_v("v_alignbit_b32", U32, u3,
   lambda a, b, c: lo32(((a.astype(U64) << U64(32)) | b.astype(U64)) >> (c & U32(31)).astype(U64)))
_v("v_alignbyte_b32", U32, u3,
   lambda a, b, c: lo32(((a.astype(U64) << U64(32)) | b.astype(U64)) >> (U64(8) * (c & U32(3)).astype(U64))))
_v("v_bcnt_u32_b32", U32, u2, lambda a, b: popcount(a) + b)
_v("v_clz_i32_u32", I32, u1, ffbh_u32)
_v("v_ctz_i32_b32", I32, u1, ctz32)
_v("v_cls_i32", I32, (I32,), cls_i32)
_v("v_bfrev_b32", U32, u1, bfrev32)
_v("v_cndmask_b32", U32, (U32, U32, bool), lambda a, b, m: np.where(m, b, a))
# shifts (the "rev" forms take the shift amount first)
_v("v_lshlrev_b32", U32, u2, lambda s, a: a << (s & U32(31)))
_v("v_lshrrev_b32", U32, u2, lambda s, a: a >> (s & U32(31)))
_v("v_ashrrev_i32", I32, (U32, I32), lambda s, a: a >> (s & U32(31)).astype(I32))
_v("v_lshlrev_b64", U64, (U32, U64), lambda s, a: a << (s & U32(63)).astype(U64))
_v("v_lshrrev_b64", U64, (U32, U64), lambda s, a: a >> (s & U32(63)).astype(U64))
_v("v_ashrrev_i64", I64, (U32, I64), lambda s, a: a >> (s & U32(63)).astype(I64))
_v("v_lshl_or_b32", U32, u3, lambda a, s, c: (a << (s & U32(31))) | c)
_v("v_lshl_add_u32", U32, u3, lambda a, s, c: (a << (s & U32(31))) + c)
_v("v_add_lshl_u32", U32, u3, lambda a, b, s: (a + b) << (s & U32(31)))
_v("v_lshlrev_b16", U16, (U16, U16), lambda s, a: a << (s & U16(15)))
_v("v_lshrrev_b16", U16, (U16, U16), lambda s, a: a >> (s & U16(15)))
# integer arithmetic
_v("v_add_nc_u32 v_add_u32", U32, u2, lambda a, b: a + b)
_v("v_sub_nc_u32", U32, u2, lambda a, b: a - b)
_v("v_subrev_nc_u32", U32, u2, lambda a, b: b - a)
_v("v_add_nc_i32", I32, i2, lambda a, b: a + b)
_v("v_sub_nc_i32", I32, i2, lambda a, b: a - b)
_v("v_add_nc_u16", U16, (U16, U16), lambda a, b: a + b)
_v("v_sub_nc_u16", U16, (U16, U16), lambda a, b: a - b)
_v("v_mul_lo_u16", U16, (U16, U16), lambda a, b: a * b)
_v("v_add_nc_i16", I16, (I16, I16), lambda a, b: a + b)
_v("v_sub_nc_i16", I16, (I16, I16), lambda a, b: a - b)
_v("v_mad_u16", U16, (U16,) * 3, lambda a, b, c: a * b + c)
_v("v_mad_i16", I16, (I16,) * 3, lambda a, b, c: a * b + c)
_v("v_max_u16", U16, (U16, U16), np.maximum)
_v("v_min_u16", U16, (U16, U16), np.minimum)
_v("v_max_i16", I16, (I16, I16), np.maximum)
_v("v_min_i16", I16, (I16, I16), np.minimum)
_v("v_med3_u16", U16, (U16,) * 3, med3)
_v("v_med3_i16", I16, (I16,) * 3, med3)
_v("v_ashrrev_i16", I16, (U16, I16), lambda s, a: a >> (s & U16(15)).astype(I16))
_v("v_add3_u32", U32, u3, lambda a, b, c: a + b + c)
_v("v_xad_u32", U32, u3, lambda a, b, c: (a ^ b) + c)
_v("v_mul_lo_u32", U32, u2, lambda a, b: a * b)
_v("v_mul_hi_u32", U32, u2, lambda a, b: ((a.astype(U64) * b) >> U64(32)).astype(U32))
_v("v_mul_hi_i32", I32, i2, lambda a, b: ((a.astype(I64) * b) >> I64(32)).astype(I32))
_v("v_mul_u32_u24", U32, u2, lambda a, b: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)))
_v("v_mul_hi_u32_u24", U32, u2,
   lambda a, b: (((a & U32(0xFFFFFF)).astype(U64) * (b & U32(0xFFFFFF))) >> U64(32)).astype(U32))
_v("v_mul_i32_i24", I32, (U32, U32),
   lambda a, b: bfe_i32(a, U32(0), U32(24)) * bfe_i32(b, U32(0), U32(24)))
_v("v_mad_u32_u24", U32, u3, lambda a, b, c: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)) + c)
_v("v_mad_u32_u16", U32, u3, lambda a, b, c: (a & U32(0xFFFF)) * (b & U32(0xFFFF)) + c)
_v("v_min_u32", U32, u2, np.minimum)
_v("v_max_u32", U32, u2, np.maximum)
_v("v_min_i32", I32, i2, np.minimum)
_v("v_max_i32", I32, i2, np.maximum)
_v("v_med3_u32", U32, u3, med3)
_v("v_med3_i32", I32, (I32, I32, I32), med3)
_v("v_min3_u32", U32, u3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
_v("v_max3_u32", U32, u3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
_v("v_min3_i32", I32, (I32,) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
_v("v_max3_i32", I32, (I32,) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
_v("v_sad_u32", U32, u3, lambda a, b, c: np.where(a > b, a - b, b - a) + c)
# 24-bit multiplies read the low 24 bits of S0/S1 sign- or zero-extended; mad adds S2 modulo 2**32
# (RDNA3 ISA: V_MAD_I32_I24, V_MUL_HI_I32_I24); the 16-bit mad takes i16 sources (op_sel picks halves)
_v("v_mad_i32_i24", I32, (U32, U32, I32),
   lambda a, b, c: bfe_i32(a, U32(0), U32(24)) * bfe_i32(b, U32(0), U32(24)) + c)
_v("v_mul_hi_i32_i24", I32, (U32, U32),
   lambda a, b: ((bfe_i32(a, U32(0), U32(24)).astype(I64) * bfe_i32(b, U32(0), U32(24))) >> I64(32)).astype(I32))
_v("v_mad_i32_i16", I32, (I16, I16, I32), lambda a, b, c: a.astype(I32) * b.astype(I32) + c)
# V_MAXMIN_*: D = min(max(S0, S1), S2); V_MINMAX_*: D = max(min(S0, S1), S2) (RDNA3 ISA, VOP3 opcodes
# 0x25e-0x265); the float forms follow v_max/v_min's NaN rule (a NaN operand yields the other)
for _t, _n, _mx, _mn in (("f32", F32, fmax_ieee, fmin_ieee), ("f16", F16, fmax_ieee, fmin_ieee),
                         ("i32", I32, np.maximum, np.minimum), ("u32", U32, np.maximum, np.minimum)):
    _v(f"v_maxmin_{_t}", _n, (_n,) * 3, lambda a, b, c, mx=_mx, mn=_mn: mn(mx(a, b), c))
    _v(f"v_minmax_{_t}", _n, (_n,) * 3, lambda a, b, c, mx=_mx, mn=_mn: mx(mn(a, b), c))
_v("v_min3_u16", U16, (U16,) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
_v("v_max3_u16", U16, (U16,) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
_v("v_min3_i16", I16, (I16,) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
_v("v_max3_i16", I16, (I16,) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
_v("v_and_b16", U16, (U16, U16), lambda a, b: a & b)
_v("v_or_b16", U16, (U16, U16), lambda a, b: a | b)
_v("v_xor_b16", U16, (U16, U16), lambda a, b: a ^ b)
_v("v_not_b16", U16, (U16,), lambda a: ~a)
_v("v_cvt_i32_i16", I32, (I16,), lambda a: a.astype(I32))
_v("v_cvt_u32_u16", U32, (U16,), lambda a: a.astype(U32))
_v("v_add_nc_u64 v_lshl_add_u64", U64, (U64, U64), lambda a, b: a + b)


def _add_co(a, b):
    s = a + b
    return s, s < a


def _sub_co(a, b):
    return a - b, b > a


def _addc(a, b, c):
    s = a + b
    t = s + c.astype(U32)
    return t, (s < a) | (t < s)


def _subb(a, b, c):
    s = a.astype(I64) - b.astype(I64) - c.astype(I64)
    return (s & I64(0xFFFFFFFF)).astype(U32), s < 0


def _mad_u64_u32(a, b, c):
    p = a.astype(U64) * b.astype(U64)
    s = p + c
    return s, s < p


def _mad_i64_i32(a, b, c):
    p = a.astype(I64) * b.astype(I64)
    s = (p.view(U64) + c.view(U64)).view(I64)
    # signed overflow of the add: operands of equal sign, result of the other sign
    return s, ((p < 0) == (c < 0)) & ((s < 0) != (p < 0))


# VOP3SD: (carry-out) ops; result type, source types, fn -> (value, carry)
CARRY = {
    "v_add_co_u32": (U32, u2, _add_co),
    "v_sub_co_u32": (U32, u2, _sub_co),
    "v_subrev_co_u32": (U32, u2, lambda a, b: _sub_co(b, a)),
    "v_add_co_ci_u32": (U32, (U32, U32, bool), _addc),
    "v_sub_co_ci_u32": (U32, (U32, U32, bool), _subb),
    "v_subrev_co_ci_u32": (U32, (U32, U32, bool), lambda a, b, c: _subb(b, a, c)),
    "v_mad_u64_u32": (U64, (U32, U32, U64), _mad_u64_u32),
    "v_mad_i64_i32": (I64, (I32, I32, I64), _mad_i64_i32),
    # No scaling is modeled (see module docstring): value unchanged, VCC clear.
    "v_div_scale_f32": (F32, f3, lambda a, b, c: (a, np.zeros(np.broadcast(a, b, c).shape, bool))),
    "v_div_scale_f64": (F64, d3, lambda a, b, c: (a, np.zeros(np.broadcast(a, b, c).shape, bool))),
}

# f32
_v("v_add_f32", F32, f2, np.add)
_v("v_sub_f32", F32, f2, np.subtract)
_v("v_subrev_f32", F32, f2, lambda a, b: b - a)
_v("v_mul_f32", F32, f2, np.multiply)
_v("v_mul_legacy_f32 v_mul_dx9_zero_f32", F32, f2, lambda a, b: np.where((a == 0) | (b == 0), F32(0), a * b))
_v("v_fma_f32 v_fmamk_f32 v_fmaak_f32", F32, f3, fma_f32)
_v("v_fmac_f32", F32, f3, fma_f32)     # the accumulator is appended as third source by the executor
_v("v_min_f32", F32, f2, fmin_ieee)
_v("v_max_f32", F32, f2, fmax_ieee)
_v("v_min3_f32", F32, f3, lambda a, b, c: fmin_ieee(fmin_ieee(a, b), c))
_v("v_max3_f32", F32, f3, lambda a, b, c: fmax_ieee(fmax_ieee(a, b), c))
_v("v_med3_f32", F32, f3, med3_f)
_v("v_ldexp_f32", F32, (F32, I32), lambda a, e: to_f32(np.ldexp(a.astype(F64), np.clip(e, -400, 400))))
_v("v_floor_f32", F32, f1, np.floor)
_v("v_ceil_f32", F32, f1, np.ceil)
_v("v_trunc_f32", F32, f1, np.trunc)
_v("v_rndne_f32", F32, f1, np.rint)
_v("v_fract_f32", F32, f1, lambda a: np.where(np.isinf(a), F32(np.nan), np.minimum(a - np.floor(a), F32(0.99999994))))
_v("v_exp_f32", F32, f1, lambda a: to_f32(np.exp2(a.astype(F64))))
_v("v_log_f32", F32, f1, lambda a: to_f32(np.log2(a.astype(F64))))
_v("v_rcp_f32 v_rcp_iflag_f32", F32, f1, lambda a: to_f32(1.0 / a.astype(F64)))
_v("v_rsq_f32", F32, f1, lambda a: to_f32(1.0 / np.sqrt(a.astype(F64))))
_v("v_sqrt_f32", F32, f1, lambda a: to_f32(np.sqrt(a.astype(F64))))
_v("v_sin_f32", F32, f1, sin_rev)
_v("v_cos_f32", F32, f1, cos_rev)
_v("v_frexp_exp_i32_f32", I32, f1, frexp_exp)
_v("v_frexp_mant_f32", F32, f1, lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a).astype(F32))
_v("v_div_fmas_f32", F32, f3, fma_f32)   # VCC clear: see v_div_scale
_v("v_div_fixup_f32", F32, f3, div_fixup)
_v("v_cvt_f32_i32", F32, (I32,), lambda a: a.astype(F32))
_v("v_cvt_f32_u32", F32, u1, lambda a: a.astype(F32))
_v("v_cvt_i32_f32", I32, f1, lambda a: cvt_f32_to_int(a, -2**31, 2**31 - 1, I32))
_v("v_cvt_u32_f32", U32, f1, lambda a: cvt_f32_to_int(a, 0, 2**32 - 1, U32))
_v("v_cvt_floor_i32_f32", I32, f1, lambda a: cvt_f32_to_int(np.floor(a), -2**31, 2**31 - 1, I32))
# V_CVT_NEAREST_I32_F32: (int)floor(S0.f + 0.5), the add in f32 as the ISA's pseudo-code has it
_v("v_cvt_nearest_i32_f32", I32, f1, lambda a: cvt_f32_to_int(np.floor(a + F32(0.5)), -2**31, 2**31 - 1, I32))
_v("v_cvt_f32_f64", F32, d1, lambda a: a.astype(F32))
_v("v_cvt_f64_f32", F64, f1, lambda a: a.astype(F64))
_v("v_cvt_f64_i32", F64, (I32,), lambda a: a.astype(F64))
_v("v_cvt_f64_u32", F64, u1, lambda a: a.astype(F64))
_v("v_cvt_i32_f64", I32, d1, lambda a: cvt_f32_to_int(a, -2**31, 2**31 - 1, I32))
_v("v_cvt_u32_f64", U32, d1, lambda a: cvt_f32_to_int(a, 0, 2**32 - 1, U32))
_v("v_cvt_f16_f32", F16, f1, lambda a: a.astype(F16))
_v("v_cvt_f32_f16", F32, (F16,), lambda a: a.astype(F32))
for _k in range(4):
    _v(f"v_cvt_f32_ubyte{_k}", F32, u1, lambda a, k=_k: ((a >> U32(8 * k)) & U32(0xFF)).astype(F32))
# f64
_v("v_add_f64", F64, d2, np.add)
_v("v_mul_f64", F64, d2, np.multiply)
_v("v_fma_f64", F64, d3, fma_f64)
_v("v_min_f64", F64, d2, fmin_ieee)
_v("v_max_f64", F64, d2, fmax_ieee)
_v("v_ldexp_f64", F64, (F64, I32), lambda a, e: np.ldexp(a, np.clip(e, -2200, 2200)))
_v("v_rcp_f64", F64, d1, lambda a: 1.0 / a)
_v("v_rsq_f64", F64, d1, lambda a: 1.0 / np.sqrt(a))
_v("v_sqrt_f64", F64, d1, np.sqrt)
_v("v_floor_f64", F64, d1, np.floor)
_v("v_ceil_f64", F64, d1, np.ceil)
_v("v_trunc_f64", F64, d1, np.trunc)
_v("v_rndne_f64", F64, d1, np.rint)
_v("v_fract_f64", F64, d1, lambda a: np.minimum(a - np.floor(a), F64(0.9999999999999999)))
_v("v_frexp_exp_i32_f64", I32, d1, frexp_exp)
_v("v_frexp_mant_f64", F64, d1, lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a))
_v("v_div_fmas_f64", F64, d3, fma_f64)
_v("v_div_fixup_f64", F64, d3, div_fixup)
# f16: numpy computes f16 add/sub/mul in float32 and rounds once, which is exact (24 >= 2*11 + 2)
h1, h2, h3 = (F16,), (F16, F16), (F16, F16, F16)
_v("v_add_f16", F16, h2, np.add)
_v("v_sub_f16", F16, h2, np.subtract)
_v("v_subrev_f16", F16, h2, lambda a, b: b - a)
_v("v_mul_f16", F16, h2, np.multiply)
_v("v_fma_f16 v_fmac_f16 v_fmamk_f16 v_fmaak_f16", F16, h3, fma_f16)
_v("v_min_f16", F16, h2, fmin_ieee)
_v("v_max_f16", F16, h2, fmax_ieee)
_v("v_min3_f16", F16, h3, lambda a, b, c: fmin_ieee(fmin_ieee(a, b), c))
_v("v_max3_f16", F16, h3, lambda a, b, c: fmax_ieee(fmax_ieee(a, b), c))
_v("v_med3_f16", F16, h3, med3_f)
_v("v_ldexp_f16", F16, (F16, I16), lambda a, e: np.ldexp(a.astype(F64), e).astype(F16))
_v("v_floor_f16", F16, h1, np.floor)
_v("v_ceil_f16", F16, h1, np.ceil)
_v("v_trunc_f16", F16, h1, np.trunc)
_v("v_rndne_f16", F16, h1, np.rint)
_v("v_sqrt_f16", F16, h1, lambda a: np.sqrt(a.astype(F64)).astype(F16))
_v("v_rcp_f16", F16, h1, lambda a: (1.0 / a.astype(F64)).astype(F16))
_v("v_rsq_f16", F16, h1, lambda a: (1.0 / np.sqrt(a.astype(F64))).astype(F16))
_v("v_exp_f16", F16, h1, lambda a: np.exp2(a.astype(F64)).astype(F16))
_v("v_log_f16", F16, h1, lambda a: np.log2(a.astype(F64)).astype(F16))
_v("v_sin_f16", F16, h1, lambda a: sin_rev(a).astype(F16))
_v("v_cos_f16", F16, h1, lambda a: cos_rev(a).astype(F16))
_v("v_div_fixup_f16", F16, h3, div_fixup)
_v("v_cvt_f16_i16", F16, (I16,), lambda a: a.astype(F16))
_v("v_cvt_f16_u16", F16, (U16,), lambda a: a.astype(F16))
_v("v_cvt_i16_f16", I16, h1, lambda a: cvt_f32_to_int(a, -2**15, 2**15 - 1, I16))
_v("v_cvt_u16_f16", U16, h1, lambda a: cvt_f32_to_int(a, 0, 2**16 - 1, U16))
_v("v_pack_b32_f16", U32, h2, lambda a, b: a.view(U16).astype(U32) | (b.view(U16).astype(U32) << U32(16)))
_v("v_cvt_pk_rtz_f16_f32", U32, f2, lambda a, b: _pk_rtz(a) | (_pk_rtz(b) << U32(16)))


# VOP3P packed math: mnemonic -> (half type, fn on one half)
PACKED = {
    "v_pk_add_f16": (F16, np.add), "v_pk_mul_f16": (F16, np.multiply), "v_pk_fma_f16": (F16, fma_f16),
    "v_pk_max_f16": (F16, fmax_ieee), "v_pk_min_f16": (F16, fmin_ieee),
    "v_pk_add_u16": (U16, np.add), "v_pk_sub_u16": (U16, np.subtract),
    "v_pk_add_i16": (I16, np.add), "v_pk_sub_i16": (I16, np.subtract),
    "v_pk_mul_lo_u16": (U16, np.multiply), "v_pk_mad_u16": (U16, lambda a, b, c: a * b + c),
    "v_pk_mad_i16": (I16, lambda a, b, c: a * b + c),
    "v_pk_max_u16": (U16, np.maximum), "v_pk_min_u16": (U16, np.minimum),
    "v_pk_max_i16": (I16, np.maximum), "v_pk_min_i16": (I16, np.minimum),
    "v_pk_lshlrev_b16": (U16, lambda s, a: a << (s & U16(15))),
    "v_pk_lshrrev_b16": (U16, lambda s, a: a >> (s & U16(15))),
    "v_pk_ashrrev_i16": (I16, lambda s, a: a >> (s & I16(15))),
}


# Float min/max ops with MODE.IEEE clear (the entries above are MODE.IEEE set, clang-15's descriptors):
# rdna3.wave_compile picks these by the wave's MODE. Their results are never flushed: "denorm flushing for
# this operation is effectively controlled by the input denorm mode" (RDNA3 ISA, V_MIN_F32 notes).
IEEE_OFF = {}
for _t in ("f16", "f32", "f64"):
    IEEE_OFF[f"v_min_{_t}"], IEEE_OFF[f"v_max_{_t}"] = fmin_dx10, fmax_dx10
for _t in ("f16", "f32"):
    IEEE_OFF[f"v_min3_{_t}"] = lambda a, b, c: fmin_dx10(fmin_dx10(a, b), c)
    IEEE_OFF[f"v_max3_{_t}"] = lambda a, b, c: fmax_dx10(fmax_dx10(a, b), c)
    IEEE_OFF[f"v_med3_{_t}"] = med3_f_dx10
    IEEE_OFF[f"v_maxmin_{_t}"] = lambda a, b, c: fmin_dx10(fmax_dx10(a, b), c)
    IEEE_OFF[f"v_minmax_{_t}"] = lambda a, b, c: fmax_dx10(fmin_dx10(a, b), c)
IEEE_OFF["v_pk_min_f16"], IEEE_OFF["v_pk_max_f16"] = fmin_dx10, fmax_dx10
MINMAX = frozenset(IEEE_OFF)

# The f32 transcendental units flush denormal sources and results whatever MODE says (RDNA3 ISA, V_EXP_F32,
# V_LOG_F32, V_RCP_F32, V_RSQ_F32, V_SQRT_F32: "denormals are flushed"; LLVM's SIISelLowering: "v_rcp_f32 and
# v_rsq_f32 do not support denormals"); their f16 forms, sin/cos and the f64 ones support denormals (same
# pages), so the MODE decides for those.
for _n in ("v_exp_f32", "v_log_f32", "v_rcp_f32", "v_rsq_f32", "v_sqrt_f32"):
    _r, _s, _f = VALU[_n]
    VALU[_n] = (_r, _s, lambda a, f=_f: flush_denormals(f(flush_denormals(a))))
# V_DIV_FMAS_F32/F64: "Input denormals are not flushed, but output flushing is allowed" (RDNA3 ISA)
KEEP_SOURCE_DENORMALS = frozenset({"v_div_fmas_f32", "v_div_fmas_f64"})


# ------------------------------------------------------------------------------------------------
# VOPC: v_cmp[x]_<cond>_<type>

_FCMP = {
    "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
    "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
    "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
}
_ICMP = {"f": _FCMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
         "ne": np.not_equal, "ge": np.greater_equal, "t": _FCMP["t"]}
_TYPES = {"f32": F32, "f64": F64, "f16": F16, "i32": I32, "u32": U32, "i64": I64, "u64": U64,
          "i16": I16, "u16": U16}
_CMP_RE = re.compile(r"v_cmpx?_(\w+?)_([fiu](?:16|32|64))$")


def vopc(name):
    """(source type, fn -> bool array, writes exec) for a v_cmp/v_cmpx mnemonic, or None."""
    if name.startswith(("v_cmp_class_", "v_cmpx_class_")):
        t = _TYPES[name.rsplit("_", 1)[1]]
        return (t, U32), fclass, name.startswith("v_cmpx")
    m = _CMP_RE.match(name)
    if not m:
        return None
    cond, t = m.groups()
    table = _FCMP if t[0] == "f" else _ICMP
    if cond not in table:
        return None
    return (_TYPES[t], _TYPES[t]), table[cond], name.startswith("v_cmpx")


# ------------------------------------------------------------------------------------------------
# SALU: mnemonic -> (source types, fn -> (result or None, scc or None)); 64-bit ops use U64 sources.

SALU: dict[str, tuple] = {}


def _s(names, stypes, fn):
    for n in names.split():
        SALU[n] = (stypes, fn)


def _nz(r):
    return r, r != 0


def _ovf_add(a, b):
    r = (a.astype(I64) + b)
    return r.astype(I32), (r > 2**31 - 1) | (r < -2**31)


def _ovf_sub(a, b):
    r = (a.astype(I64) - b)
    return r.astype(I32), (r > 2**31 - 1) | (r < -2**31)


s2, S2 = (U32, U32), (U64, U64)
_s("s_mov_b32 s_movk_i32", (U32,), lambda a: (a, None))
_s("s_mov_b64", (U64,), lambda a: (a, None))
_s("s_cmov_b32 s_cmovk_i32", (U32, U32, bool), lambda a, d, scc: (np.where(scc, a, d), None))
_s("s_not_b32", (U32,), lambda a: _nz(~a))
_s("s_not_b64", (U64,), lambda a: _nz(~a))
for _w, _t in (("b32", s2), ("b64", S2)):
    _s(f"s_and_{_w}", _t, lambda a, b: _nz(a & b))
    _s(f"s_or_{_w}", _t, lambda a, b: _nz(a | b))
    _s(f"s_xor_{_w}", _t, lambda a, b: _nz(a ^ b))
    _s(f"s_and_not1_{_w} s_andn2_{_w}", _t, lambda a, b: _nz(a & ~b))
    _s(f"s_or_not1_{_w} s_orn2_{_w}", _t, lambda a, b: _nz(a | ~b))
    _s(f"s_nand_{_w}", _t, lambda a, b: _nz(~(a & b)))
    _s(f"s_nor_{_w}", _t, lambda a, b: _nz(~(a | b)))
    _s(f"s_xnor_{_w}", _t, lambda a, b: _nz(~(a ^ b)))
_s("s_add_u32", s2, lambda a, b: (a + b, (a + b) < a))
_s("s_sub_u32", s2, lambda a, b: (a - b, b > a))
_s("s_addc_u32", (U32, U32, bool), lambda a, b, c: _addc(a, b, c))
_s("s_subb_u32", (U32, U32, bool), lambda a, b, c: _subb(a, b, c))
_s("s_add_i32 s_addk_i32", (I32, I32), _ovf_add)
_s("s_sub_i32", (I32, I32), _ovf_sub)
_s("s_mul_i32 s_mulk_i32", s2, lambda a, b: (a * b, None))
_s("s_mul_hi_u32", s2, lambda a, b: (((a.astype(U64) * b) >> U64(32)).astype(U32), None))
_s("s_mul_hi_i32", (I32, I32), lambda a, b: (((a.astype(I64) * b) >> I64(32)).astype(I32), None))
_s("s_lshl_b32", s2, lambda a, b: _nz(a << (b & U32(31))))
_s("s_lshr_b32", s2, lambda a, b: _nz(a >> (b & U32(31))))
_s("s_ashr_i32", (I32, U32), lambda a, b: _nz(a >> (b & U32(31)).astype(I32)))
_s("s_lshl_b64", (U64, U32), lambda a, b: _nz(a << (b & U32(63)).astype(U64)))
_s("s_lshr_b64", (U64, U32), lambda a, b: _nz(a >> (b & U32(63)).astype(U64)))
_s("s_ashr_i64", (I64, U32), lambda a, b: _nz(a >> (b & U32(63)).astype(I64)))
for _k in range(1, 5):
    _s(f"s_lshl{_k}_add_u32", s2, lambda a, b, k=_k: (
        lo32((a.astype(U64) << U64(k)) + b), ((a.astype(U64) << U64(k)) + b) > U64(0xFFFFFFFF)))
_s("s_min_i32", (I32, I32), lambda a, b: (np.minimum(a, b), a < b))
_s("s_max_i32", (I32, I32), lambda a, b: (np.maximum(a, b), a > b))
_s("s_min_u32", s2, lambda a, b: (np.minimum(a, b), a < b))
_s("s_max_u32", s2, lambda a, b: (np.maximum(a, b), a > b))
_s("s_cselect_b32", (U32, U32, bool), lambda a, b, scc: (np.where(scc, a, b), None))
_s("s_cselect_b64", (U64, U64, bool), lambda a, b, scc: (np.where(scc, a, b), None))
_s("s_bfe_u32", s2, lambda a, b: _nz(bfe_u32(a, b & U32(31), (b >> U32(16)) & U32(0x7F))))
_s("s_bfe_i32", (I32, U32), lambda a, b: _nz(bfe_i32(a, b & U32(31), (b >> U32(16)) & U32(0x7F))))
_s("s_bfm_b32", s2, lambda a, b: ((((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31))).astype(U32), None))
_s("s_bcnt1_i32_b32", (U32,), lambda a: _nz(popcount(a)))
_s("s_bcnt1_i32_b64", (U64,), lambda a: _nz(popcount(a)))
_s("s_ctz_i32_b32 s_ff1_i32_b32", (U32,), lambda a: (ctz32(a), None))
_s("s_clz_i32_u32 s_flbit_i32_b32", (U32,), lambda a: (ffbh_u32(a), None))
_s("s_brev_b32", (U32,), lambda a: (bfrev32(a), None))
_s("s_sext_i32_i8", (U32,), lambda a: ((a & U32(0xFF)).astype(U8).view(np.int8).astype(I32), None))
_s("s_sext_i32_i16", (U32,), lambda a: ((a & U32(0xFFFF)).astype(U16).view(I16).astype(I32), None))
_s("s_abs_i32", (I32,), lambda a: _nz(np.abs(a)))
_s("s_absdiff_i32", (I32, I32), lambda a, b: _nz(np.abs(a.astype(I64) - b).astype(I32)))
_s("s_pack_ll_b32_b16", s2, lambda a, b: ((a & U32(0xFFFF)) | (b << U32(16)), None))
_s("s_pack_lh_b32_b16", s2, lambda a, b: ((a & U32(0xFFFF)) | (b & U32(0xFFFF0000)), None))
_s("s_pack_hh_b32_b16", s2, lambda a, b: ((a >> U32(16)) | (b & U32(0xFFFF0000)), None))
_s("s_pack_hl_b32_b16", s2, lambda a, b: ((a >> U32(16)) | (b << U32(16)), None))
_s("s_bcnt0_i32_b32", (U32,), lambda a: _nz(popcount(~a)))
_s("s_bcnt0_i32_b64", (U64,), lambda a: _nz(popcount(~a)))
_s("s_ctz_i32_b64", (U64,), lambda a: (ctz64(a), None))
_s("s_clz_i32_u64", (U64,), lambda a: (clz64(a), None))
_s("s_cls_i32", (I32,), lambda a: (cls_i32(a), None))
_s("s_brev_b64", (U64,), lambda a: ((bfrev32(lo32(a)).astype(U64) << U64(32)) | bfrev32(lo32(a >> U64(32))), None))
_s("s_bfm_b64", (U32, U32), lambda a, b: (((U64(1) << (a & U32(63)).astype(U64)) - U64(1)) << (b & U32(63)).astype(U64), None))
_s("s_cmov_b64", (U64, U64, bool), lambda a, d, scc: (np.where(scc, a, d), None))
# S_BITSET0/1: D[S0[4:0]] = 0/1, the rest of D kept (the executor appends D as the second source)
_s("s_bitset0_b32", s2, lambda a, d: (d & ~(U32(1) << (a & U32(31))), None))
_s("s_bitset1_b32", s2, lambda a, d: (d | (U32(1) << (a & U32(31))), None))

_SCMP = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal,
         "lt": np.less, "le": np.less_equal}


def sopc(name):
    """(source type, fn) for s_cmp[k]_<cond>_<type> and s_bitcmp, or None."""
    m = re.match(r"s_cmpk?_(eq|lg|gt|ge|lt|le)_(i32|u32|u64)$", name)
    if m:
        return _TYPES[m.group(2)], _SCMP[m.group(1)]
    m = re.match(r"s_bitcmp([01])_b(32|64)$", name)
    if m:
        want = int(m.group(1))
        t = U32 if m.group(2) == "32" else U64
        return t, lambda a, b: ((a >> (b & t(int(m.group(2)) - 1)).astype(t)) & t(1)) == want
    return None


# saveexec: D = EXEC; EXEC = f(S0, EXEC); SCC = EXEC != 0
SAVEEXEC = {
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
    "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
    "and_not0": lambda s, e: ~s & e, "or_not0": lambda s, e: ~s | e,
    "and_not1": lambda s, e: s & ~e, "or_not1": lambda s, e: s | ~e,
    "andn1": lambda s, e: ~s & e, "orn1": lambda s, e: ~s | e,
    "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e,
}


# ------------------------------------------------------------------------------------------------
# atomics: name -> fn(old, data[, cmp]) -> new, on the operand's integer/float type

ATOMICS = {
    "add": lambda o, d: o + d, "sub": lambda o, d: o - d,
    "min": np.minimum, "max": np.maximum,
    "and": lambda o, d: o & d, "or": lambda o, d: o | d, "xor": lambda o, d: o ^ d,
    "swap": lambda o, d: d,
    "inc": lambda o, d: np.where(o >= d, 0, o + 1).astype(o.dtype),
    "dec": lambda o, d: np.where((o == 0) | (o > d), d, o - 1).astype(o.dtype),
    "add_f32": lambda o, d: o + d,
    # a cache (global, flat, scratch, buffer) atomic float add flushes its denormal inputs whatever MODE says
    # (RDNA3 ISA 13.2, "Cache Atomic Float Denormal": Add_F32 "Flush" = flush all input denorm); LDS's follows
    # the MODE (assumption: the executor keeps LDS denormals, the mode clang-15's descriptors ask for)
    "add_f32_ftz": lambda o, d: flush_denormals(o) + flush_denormals(d),
}


def atomic_type(name):
    """For an atomic mnemonic suffix like 'add_u32', 'min_i32', 'cmpswap_b64', 'add_f32':
    (operation, numpy type, dwords)."""
    op, t = name.rsplit("_", 1)
    if op in ("add", "sub", "min", "max", "and", "or", "xor", "swap", "cmpswap", "inc", "dec") or t == "f32":
        dtype = {"u32": U32, "i32": I32, "b32": U32, "f32": F32, "u64": U64, "i64": I64, "b64": U64}[t]
        if t == "f32":
            op = op + "_f32" if op == "add" else op
        return op, dtype, 2 if t.endswith("64") else 1
    raise KeyError(name)


# ------------------------------------------------------------------------------------------------
# the wave's MODE register: rounding and denormal modes
#
# SQ_WAVE_MODE (gc_11_0_0_sh_mask.h): FP_ROUND 3:0 (1:0 f32, 3:2 f16 and f64), FP_DENORM 7:4 (5:4 f32,
# 7:6 f16 and f64), DX10_CLAMP 8, IEEE 9, FP16_OVFL 23 (f16 overflow to +-65504: fp16_overflow_clamp).
# Round mode values (AMDGPUUsage FLOAT_ROUND_MODE_*): 0 nearest even, 1 toward +inf, 2 toward -inf, 3
# toward zero. Denormal mode values (AMDGPUUsage FLOAT_DENORM_MODE_*): 0 flush source and destination, 1
# flush destination only, 2 flush source only, 3 no flush. A flushed denormal becomes a zero of its sign.
MODE_ROUND_SHIFT = {F32: 0, F16: 2, F64: 2}
MODE_DENORM_SHIFT = {F32: 4, F16: 6, F64: 6}
MODE_DX10_CLAMP, MODE_IEEE, MODE_FP16_OVFL = 1 << 8, 1 << 9, 1 << 23
ROUND_NEAREST, ROUND_UP, ROUND_DOWN, ROUND_ZERO = range(4)
DENORM_FLUSH_NONE = 3
_TINY = {F32: F32(np.finfo(F32).tiny), F16: F16(np.finfo(F16).tiny), F64: np.finfo(F64).tiny}


def mode_bits(t) -> int:
    """The MODE bits that decide how an op of float type t rounds and treats denormals."""
    return 3 << MODE_ROUND_SHIFT[t] | 3 << MODE_DENORM_SHIFT[t]


def mode_default(t) -> int:
    """The value of mode_bits(t) under which the plain numpy semantics above are exact: nearest even,
    denormals kept (clang-15's default for gfx1100 kernels)."""
    return DENORM_FLUSH_NONE << MODE_DENORM_SHIFT[t]


def round_mode(mode: int, t) -> int:
    return mode >> MODE_ROUND_SHIFT[t] & 3


def flushes_source(mode: int, t) -> bool:
    return (mode >> MODE_DENORM_SHIFT[t] & 3) in (0, 2)


def flushes_result(mode: int, t) -> bool:
    return (mode >> MODE_DENORM_SHIFT[t] & 3) in (0, 1)


def flush_denormals(x):
    """Denormals of a float array to zeros of their sign."""
    x = np.asarray(x)
    tiny = _TINY[x.dtype.type]
    return np.where(np.abs(x) < tiny, np.copysign(x.dtype.type(0), x), x)


def fp16_overflow_clamp(r, sources):
    """MODE.FP16_OVFL: "an overflowed FP16 result is clamped to +/- MAX_FP16 regardless of round mode, while
    still preserving true INF values" (RDNA3 ISA, MODE register): an infinite f16 result of finite sources
    becomes +-65504; NaNs and infinities from infinite sources stay."""
    finite = np.ones(np.shape(r), bool)
    for v in sources:
        finite = finite & np.isfinite(np.asarray(v))
    return np.where(np.isinf(r) & finite, np.copysign(F16(65504), r), r).astype(F16)


def _two_sum(a, b):
    """(s, err) with s = fl64(a + b) and s + err exactly a + b (Knuth's TwoSum; exact unless it overflows)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _neg_zero_sum(a, b):
    """Where an exactly zero sum a + b is -0 when rounding toward -inf (IEEE 754 6.3): unless both are +0."""
    return ~((a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b))


def _exact_add(a, b):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    s, err = _two_sum(a, b)
    return s, err, _neg_zero_sum(a, b)


def _exact_mul(a, b):
    """f32/f16 products are exact in float64 (24 + 24 bits); f64 ones get their error from Dekker's
    TwoProduct (Veltkamp splitting; exact unless the product under- or overflows)."""
    if np.asarray(a).dtype != F64:
        return np.asarray(a, F64) * np.asarray(b, F64), F64(0), None
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    p = a * b
    split = F64(134217729.0)     # 2**27 + 1

    def halves(x):
        c = split * x
        hi = c - (c - x)
        return hi, x - hi
    ah, al = halves(a)
    bh, bl = halves(b)
    err = al * bl - (((p - ah * bh) - al * bh) - ah * bl)
    return p, np.where(np.isfinite(err), err, 0), None


def _exact_fma(a, b, c):
    """a * b + c as (s, err): f32/f16 products are exact in float64, so TwoSum gives the exact error; f64
    from exact rational arithmetic per lane (as fma_f64)."""
    if np.asarray(a).dtype != F64:
        p, c = np.asarray(a, F64) * np.asarray(b, F64), np.asarray(c, F64)
        s, err = _two_sum(p, c)
        return s, err, _neg_zero_sum(p, c)
    from fractions import Fraction
    a, b, c = np.broadcast_arrays(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64))
    s = fma_f64(a, b, c)
    err = np.zeros(s.shape, F64)
    for i, (x, y, z, r) in enumerate(zip(a.ravel(), b.ravel(), c.ravel(), s.ravel())):
        if np.isfinite(x) and np.isfinite(y) and np.isfinite(z) and np.isfinite(r):
            err.flat[i] = float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)) - Fraction(float(r)))
    p = a * b
    return s, err, _neg_zero_sum(p, c)


def _exact_value(a):
    """A conversion's source, exact in float64 (an f64, an f32, an f16 or an integer of up to 32 bits)."""
    return np.asarray(a).astype(F64), F64(0), None


# Ops whose result the round mode changes, as fn(*sources) -> (s, err, neg_zero) in float64 with s + err
# the exact result (neg_zero: where an exact zero is -0 when rounding down, or None). Exact ops (min, max,
# floor, fract, frexp, ...) round nothing; the transcendental units (rcp, rsq, sqrt, exp, log, sin, cos)
# and div_fixup are approximations whose directed rounding no public source describes (assumption: the
# round mode leaves them as modelled above).
DIRECTED = {}
for _t in ("f32", "f16", "f64"):
    DIRECTED[f"v_add_{_t}"] = _exact_add
    DIRECTED[f"v_mul_{_t}"] = _exact_mul
    for _n in ("fma", "fmac", "fmamk", "fmaak", "div_fmas"):
        DIRECTED[f"v_{_n}_{_t}"] = _exact_fma
DIRECTED.update({
    "v_sub_f32": lambda a, b: _exact_add(a, -b), "v_subrev_f32": lambda a, b: _exact_add(b, -a),
    "v_sub_f16": lambda a, b: _exact_add(a, -b), "v_subrev_f16": lambda a, b: _exact_add(b, -a),
    "v_cvt_f32_f64": _exact_value, "v_cvt_f32_i32": _exact_value, "v_cvt_f32_u32": _exact_value,
    "v_cvt_f16_f32": _exact_value, "v_cvt_f16_i16": _exact_value, "v_cvt_f16_u16": _exact_value,
    "v_ldexp_f32": lambda a, e: (np.ldexp(np.asarray(a, F64), np.clip(e, -400, 400)), F64(0), None),
    "v_ldexp_f16": lambda a, e: (np.ldexp(np.asarray(a, F64), e), F64(0), None),
    "v_mul_legacy_f32": lambda a, b: (np.where((a == 0) | (b == 0), 0.0, np.asarray(a, F64) * b), F64(0), None),
})
DIRECTED["v_mul_dx9_zero_f32"] = DIRECTED["v_mul_legacy_f32"]
# V_FRACT_F32/F64: S0 + -floor(S0), "obey round mode, result clamped to 0x3f7fffff" (0x3fefffffffffffff)
# (RDNA3 ISA): the exact difference rounded, then the clamp (DIRECTED_CLAMP, applied after the rounding)
DIRECTED["v_fract_f32"] = DIRECTED["v_fract_f64"] = lambda a: _exact_add(a, -np.floor(np.asarray(a, F64)))
DIRECTED_CLAMP = {"v_fract_f32": lambda r: np.minimum(r, F32(0.99999994)),
                  "v_fract_f64": lambda r: np.minimum(r, F64(0.9999999999999999))}


def round_directed(s, err, neg_zero, t, mode: int):
    """The exact value s + err (float64 pair) rounded to type t in direction `mode` (ROUND_UP, _DOWN,
    _ZERO): the nearest value of t is one of the two neighbours of the exact value, and the sign of its
    distance to it (computed exactly: the nearest value is within a factor 2 of s) says whether to step
    one ulp. Infinities and NaNs stay as they are."""
    s = np.asarray(s, F64)
    r = s.astype(t)
    d = r.astype(F64) - s            # exact (Sterbenz), or inf where r overflowed
    above, below = d > err, d < err     # r > exact, r < exact (False for NaN)
    if mode == ROUND_UP:
        step, toward = below, np.inf
    elif mode == ROUND_DOWN:
        step, toward = above, -np.inf
    else:
        step, toward = np.where(s > 0, above, below), 0
    r = np.where(step, np.nextafter(r, t(toward)), r).astype(t)
    if mode == ROUND_DOWN and neg_zero is not None:
        r = np.where((s == 0) & (err == 0) & neg_zero, t(-0.0), r).astype(t)
    return r
