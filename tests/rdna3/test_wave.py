"""The wave executor runs clang-built gfx1100 kernels and matches numpy."""
from fractions import Fraction

import numpy as np
import pytest

from rdna3.codeobj import CodeObject, KernelArg, KernelSpec, write_code_object
from rdna3.wave import ExecError, dispatch, pack_kernargs
from rdna3.wave_memory import FlatMemory, MemoryFault
from rdna3.wave_ops import fma_f32

f32, f64, i32, u32, u64 = np.float32, np.float64, np.int32, np.uint32, np.uint64


def run(path, grid, block, args, outputs=()):
    """Upload array arguments, dispatch, and return the arrays named by index in `outputs`."""
    co = CodeObject.load(path)
    kern = co.kernel()
    mem = FlatMemory()
    values, addrs = [], {}
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            addrs[i] = mem.upload(a)
            values.append(addrs[i])
        else:
            values.append(a)
    res = dispatch(co, None, mem, grid, block, pack_kernargs(kern, values))
    out = {i: mem.array(addrs[i], args[i].dtype, args[i].size).reshape(args[i].shape) for i in outputs}
    return out, res


def ulps(got, want):
    """Distance in float32 units in the last place."""
    g = np.asarray(got, f32).view(i32).astype(np.int64)
    w = np.asarray(want, f64).astype(f32).view(i32).astype(np.int64)
    g = np.where(g < 0, -(g & 0x7FFFFFFF), g)
    w = np.where(w < 0, -(w & 0x7FFFFFFF), w)
    return np.abs(g - w)


def fma_ref(a, b, c):
    """Exact fma, one rounding, from rationals (independent of the executor's implementation)."""
    return np.array([f32(float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))))
                     for x, y, z in zip(a, b, c)], f32)


SIZES = {"even": (256, 64), "awkward": (203, 64)}
rng = np.random.default_rng(1234)


def rand_f(n, lo=-4.0, hi=4.0):
    return rng.uniform(lo, hi, n).astype(f32)


# ------------------------------------------------------------------------------------------------
# one test per kernel, each at an even size and an awkward one (a partial last workgroup)


@pytest.fixture(params=sorted(SIZES))
def size(request):
    return SIZES[request.param]


def test_add_f32(kernel_corpus, size):
    n, wg = size
    a, b = rand_f(n), rand_f(n)
    out, _ = run(kernel_corpus["add_f32"], (n,), (wg,), [np.zeros(n, f32), a, b, u32(n)], [0])
    assert np.array_equal(out[0], a + b)


def test_float_arith(kernel_corpus, size):
    n, wg = size
    a, b, c = rand_f(n), rand_f(n), rand_f(n)
    out, _ = run(kernel_corpus["float_arith"], (n,), (wg,), [np.zeros(8 * n, f32), a, b, c, u32(n)], [0])
    o = out[0].reshape(n, 8)
    assert np.array_equal(o[:, 0], a - b)
    assert np.array_equal(o[:, 1], a * b)
    assert np.array_equal(o[:, 2], fma_ref(a, b, c))
    assert np.array_equal(o[:, 3], np.fmin(a, b) + np.fmax(b, c))
    assert np.array_equal(o[:, 4], np.abs(a) + c)
    assert np.array_equal(o[:, 5], np.floor(a) + np.ceil(b))
    assert np.array_equal(o[:, 6], np.trunc(c) * np.copysign(f32(1.5), a))
    assert np.array_equal(o[:, 7], fma_ref(a, b, c))     # clang contracts x * y + z


def test_div_f32(kernel_corpus, size):
    n, wg = size
    a, b = rand_f(n, -1e3, 1e3), rand_f(n, 0.001, 10) * np.where(rng.random(n) < 0.5, -1, 1).astype(f32)
    # operands at the edges of the range, where the hardware sequence scales: results stay IEEE
    edge = np.array([[3e38, 1e-3], [1e-38, 3e5], [1e-40, 7.0], [5.0, 1e-40], [1.0, 0.0], [-1.0, 0.0],
                     [0.0, 0.0], [np.inf, 2.0], [2.0, np.inf], [np.nan, 1.0], [3e38, 3e-39]], f32)
    a[:len(edge)], b[:len(edge)] = edge[:, 0], edge[:, 1]
    out, _ = run(kernel_corpus["div_f32"], (n,), (wg,), [np.zeros(n, f32), a, b, u32(n)], [0])
    with np.errstate(all="ignore"):
        want = a / b
    assert np.array_equal(out[0], want, equal_nan=True)      # IEEE division, correctly rounded


def test_exp_log(kernel_corpus, size):
    n, wg = size
    a, b = rand_f(n, -20, 20), rand_f(n, 1e-3, 1e3)
    out, _ = run(kernel_corpus["exp_log"], (n,), (wg,), [np.zeros(4 * n, f32), a, b, u32(n)], [0])
    o = out[0].reshape(n, 4)
    # exp2/log2 are one v_exp_f32/v_log_f32 each: the modeled bound is 1 ulp
    assert ulps(o[:, 2], np.exp2(a.astype(f64))).max() <= 1
    assert ulps(o[:, 3], np.log2(b.astype(f64))).max() <= 1
    # exp/log scale by log2(e) / ln(2) in float32 first (clang-15's fast lowering), which adds
    # |x| * 2**-24 relative error in the argument
    np.testing.assert_allclose(o[:, 0], np.exp(a.astype(f64)), rtol=4e-6)
    np.testing.assert_allclose(o[:, 1], np.log(b.astype(f64)), rtol=1e-6, atol=1e-6)


def test_sqrt_rcp(kernel_corpus, size):
    n, wg = size
    a = rand_f(n, 1e-4, 1e4)
    out, _ = run(kernel_corpus["sqrt_rcp"], (n,), (wg,), [np.zeros(3 * n, f32), a, u32(n)], [0])
    o = out[0].reshape(n, 3)
    x = a.astype(f64)
    assert ulps(o[:, 0], np.sqrt(x)).max() <= 1
    assert ulps(o[:, 1], 1 / np.sqrt(x)).max() <= 1
    assert ulps(o[:, 2], 1 / x).max() <= 1


def test_sincos(kernel_corpus, size):
    n, wg = size
    a = rand_f(n, -50, 50)
    out, _ = run(kernel_corpus["sincos"], (n,), (wg,), [np.zeros(2 * n, f32), a, u32(n)], [0])
    o = out[0].reshape(n, 2)
    # v_sin/v_cos see x / (2 pi) rounded to float32: absolute error about |x| * 2**-24 plus the
    # unit's 2**-24
    tol = np.abs(a) * 2.0 ** -23 + 2.0 ** -22
    assert np.all(np.abs(o[:, 0] - np.sin(a.astype(f64))) <= tol)
    assert np.all(np.abs(o[:, 1] - np.cos(a.astype(f64))) <= tol)


def test_int_arith(kernel_corpus, size):
    n, wg = size
    a, b = rng.integers(-2**31, 2**31, n).astype(i32), rng.integers(-2**31, 2**31, n).astype(i32)
    b[::7] = a[::7]
    out, _ = run(kernel_corpus["int_arith"], (n,), (wg,), [np.zeros(10 * n, i32), a, b, u32(n)], [0])
    o = out[0].reshape(n, 10)
    ua, ub = a.view(u32), b.view(u32)
    sh = ub & 31
    with np.errstate(over="ignore"):
        assert np.array_equal(o[:, 0], a + b)
        assert np.array_equal(o[:, 1], a - b)
        assert np.array_equal(o[:, 2], a * b)
    assert np.array_equal(o[:, 3], ((a.astype(np.int64) * b) >> 32).astype(i32))
    assert np.array_equal(o[:, 4].view(u32), ((ua.astype(u64) * ub) >> u64(32)).astype(u32))
    assert np.array_equal(o[:, 5], (a << sh.astype(i32)) ^ (a >> sh.astype(i32)))
    assert np.array_equal(o[:, 6].view(u32), (ua >> sh) | (a & b).view(u32))
    assert np.array_equal(o[:, 7], np.minimum(a, b))
    assert np.array_equal(o[:, 8].view(u32), np.maximum(ua, ub))
    assert np.array_equal(o[:, 9], ~a + (a == b))


def test_int_divrem(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-2**31 + 1, 2**31, n).astype(i32)
    b = rng.integers(-70000, 70000, n).astype(i32)
    b[b == 0] = 3
    b[::5] = rng.integers(1, 10, len(b[::5]))
    out, _ = run(kernel_corpus["int_divrem"], (n,), (wg,), [np.zeros(4 * n, i32), a, b, u32(n)], [0])
    o = out[0].reshape(n, 4)
    q = np.trunc(a.astype(f64) / b).astype(np.int64)
    assert np.array_equal(o[:, 0], q)
    assert np.array_equal(o[:, 1], a - q * b)
    ua, ub = a.view(u32), b.view(u32)
    assert np.array_equal(o[:, 2].view(u32), ua // ub)
    assert np.array_equal(o[:, 3].view(u32), ua % ub)


def test_int64(kernel_corpus, size):
    n, wg = size
    a = rng.integers(0, 2**64, n, dtype=u64)
    b = rng.integers(0, 2**64, n, dtype=u64)
    out, _ = run(kernel_corpus["int64"], (n,), (wg,), [np.zeros(5 * n, u64), a, b, u32(n)], [0])
    o = out[0].reshape(n, 5)
    s = b & u64(63)
    assert np.array_equal(o[:, 0], a + b)
    assert np.array_equal(o[:, 1], a * b)
    assert np.array_equal(o[:, 2], (a << s) | (a >> u64(7)))
    assert np.array_equal(o[:, 3], (a.view(np.int64) >> s.astype(np.int64)).view(u64))
    assert np.array_equal(o[:, 4], np.where(a > b, a - b, b ^ a))


def test_addr64(kernel_corpus, size):
    n, wg = size
    stride, base = 3, 5
    a = rand_f(base + n * stride)
    out, _ = run(kernel_corpus["addr64"], (n,), (wg,), [np.zeros(n, f32), a, u64(stride), u64(base), u32(n)], [0])
    assert np.array_equal(out[0], a[base::stride][:n] * 2)


def test_saxpy(kernel_corpus, size):
    n, wg = size
    x, y = rand_f(n), rand_f(n)
    out, _ = run(kernel_corpus["saxpy"], (n,), (wg,), [y.copy(), x, f32(1.75), u32(n)], [0])
    assert np.array_equal(out[0], fma_ref(np.full(n, 1.75, f32), x, y))


def test_loop_sum(kernel_corpus, size):
    n, wg = size
    m = 9
    a = rand_f(n * m)
    out, _ = run(kernel_corpus["loop_sum"], (n,), (wg,), [np.zeros(n, f32), a, u32(m), u32(n)], [0])
    want = np.zeros(n, f32)
    for k in range(m):                      # the same left-to-right float32 order as the kernel
        want = want + a.reshape(n, m)[:, k]
    assert np.array_equal(out[0], want)


def test_collatz(kernel_corpus, size):
    n, wg = size
    a = rng.integers(1, 5000, n).astype(u32)
    out, _ = run(kernel_corpus["collatz"], (n,), (wg,), [np.zeros(n, u32), a, u32(n)], [0])
    want = []
    for x in a.tolist():
        s = 0
        while x != 1 and s < 1000:
            x = 3 * x + 1 if x & 1 else x >> 1
            s += 1
        want.append(s)
    assert np.array_equal(out[0], want)


def test_branch(kernel_corpus, size):
    n, wg = size
    a = rand_f(n, -3, 3)
    out, _ = run(kernel_corpus["branch"], (n,), (wg,), [np.zeros(n, f32), a, u32(n)], [0])
    i = np.arange(n)
    sq = np.where(i & 1, -(a * a), a * a)
    want = np.where(a > 1, sq, np.where(a < -1, f32(1) / a, a + f32(100)))
    assert np.array_equal(out[0], want)


def test_convert(kernel_corpus, size):
    n, wg = size
    b = rng.integers(0, 256, n).astype(np.uint8)
    s = rng.integers(-2**15, 2**15, n).astype(np.int16)
    f = rand_f(n, -3e9, 3e9)
    f[::4] = rand_f(len(f[::4]), -100, 100)
    args = [np.zeros(2 * n, f32), np.zeros(2 * n, i32), np.zeros(n, np.uint8), b, s, f, u32(n)]
    out, _ = run(kernel_corpus["convert"], (n,), (wg,), args, [0, 1, 2])
    of, oi = out[0].reshape(n, 2), out[1].reshape(n, 2)
    assert np.array_equal(of[:, 0], b.astype(f32) + s.astype(f32))
    assert np.array_equal(of[:, 1], (b.astype(u32) * u32(1000003)).astype(f32))
    # float -> int conversion saturates on gfx11
    assert np.array_equal(oi[:, 0], np.clip(np.trunc(f.astype(f64)), -2**31, 2**31 - 1).astype(i32))
    assert np.array_equal(oi[:, 1].view(u32), np.clip(np.trunc(np.abs(f.astype(f64))), 0, 2**32 - 1).astype(u32))
    assert np.array_equal(out[2], (b.astype(np.int32) + s).astype(np.uint8))


def test_f64(kernel_corpus, size):
    n, wg = size
    n = min(n, 100)          # the exact f64 fma model is a per-lane loop
    a, b = rng.uniform(-1e3, 1e3, n), rng.uniform(0.5, 1e3, n)
    out, _ = run(kernel_corpus["f64"], (n,), (wg,), [np.zeros(4 * n, f64), a, b, u32(n)], [0])
    o = out[0].reshape(n, 4)
    assert np.array_equal(o[:, 0], a + b)
    assert np.array_equal(o[:, 1], a * b)
    assert np.array_equal(o[:, 2], [float(Fraction(x) * Fraction(y) + Fraction(x)) for x, y in zip(a, b)])
    assert np.array_equal(o[:, 3], a / b)


def test_local_reverse(kernel_corpus, size):
    n, wg = size
    a = rand_f(n)
    out, _ = run(kernel_corpus["local_reverse"], (n,), (wg,), [np.zeros(n, f32), a, u32(n)], [0])
    want = np.concatenate([a[g:g + wg][::-1] for g in range(0, n, wg)])
    assert np.array_equal(out[0], want)


def test_local_scan(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-1000, 1000, n).astype(i32)
    out, _ = run(kernel_corpus["local_scan"], (n,), (wg,), [np.zeros(n, i32), a, u32(n)], [0])
    want = np.concatenate([np.cumsum(a[g:g + wg]) for g in range(0, n, wg)])
    assert np.array_equal(out[0], want)


def test_histogram(kernel_corpus, size):
    n, wg = size
    a = rng.integers(0, 1000, n).astype(u32)
    nb = 7
    out, _ = run(kernel_corpus["histogram"], (n,), (wg,), [np.zeros(nb, u32), a, u32(nb), u32(n)], [0])
    assert np.array_equal(out[0], np.bincount(a % nb, minlength=nb))


def test_atomics(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-10**6, 10**6, n).astype(i32)
    acc = np.array([2**31 - 1, -2**31, 0, -1, 0, 0, 0, 0, 0], i32)
    out, _ = run(kernel_corpus["atomics"], (n,), (wg,), [acc, np.zeros(n, i32), a, u32(n)], [0, 1])
    got = out[0]
    assert got[0] == a.min() and got[1] == a.max()
    assert got[2] == np.bitwise_or.reduce((1 << (a & 31).astype(np.int64)).astype(np.int64)).astype(i32)
    want_and = np.int64(-1)
    for i in range(n):
        want_and &= ~(1 << (i & 31))
    assert got[3] == np.int32(np.int64(want_and).astype(i32))
    assert got[4] == n
    assert sorted(out[1].tolist()) == list(range(n))     # every ticket exactly once
    # cmpxchg from 0: the first lane (in lane order) of each residue class wins
    assert got[5:9].tolist() == [r + 1 for r in range(4)]


def test_reduce_sum(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-1000, 1000, n).astype(i32)
    ngroups = -(-n // wg)
    out, _ = run(kernel_corpus["reduce_sum"], (n,), (wg,),
                 [np.zeros(1, i32), np.zeros(ngroups, i32), a, u32(n)], [0, 1])
    assert out[0][0] == a.sum()
    assert np.array_equal(out[1], [a[g:g + wg].sum() for g in range(0, n, wg)])


@pytest.mark.parametrize("mnk", [(16, 24, 16), (13, 21, 11)], ids=["even", "awkward"])
def test_matmul_tiled(kernel_corpus, mnk):
    M, N, K = mnk
    A, B = rand_f(M * K).reshape(M, K), rand_f(K * N).reshape(K, N)
    out, _ = run(kernel_corpus["matmul_tiled"], (N, M), (8, 8),
                 [np.zeros((M, N), f32), A, B, u32(M), u32(N), u32(K)], [0])
    np.testing.assert_allclose(out[0], A.astype(f64) @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wh", [(32, 16), (37, 11)], ids=["even", "awkward"])
def test_transpose(kernel_corpus, wh):
    w, h = wh
    a = rng.integers(0, 2**31, (h, w)).astype(i32)
    out, _ = run(kernel_corpus["transpose"], (w, h), (16, 4), [np.zeros((w, h), i32), a, u32(w), u32(h)], [0])
    assert np.array_equal(out[0], a.T)


@pytest.mark.parametrize("dims", [(8, 4, 4), (9, 5, 3)], ids=["even", "awkward"])
def test_grid3d(kernel_corpus, dims):
    nx, ny, nz = dims
    block = (4, 2, 2)
    out, _ = run(kernel_corpus["grid3d"], dims, block, [np.zeros(2 * nx * ny * nz, u32), u32(nx), u32(ny), u32(nz)], [0])
    o = out[0].reshape(nz, ny, nx, 2)
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    assert np.array_equal(o[..., 0], (x % 4) | (y % 2) << 8 | (z % 2) << 16)
    assert np.array_equal(o[..., 1], (x // 4) | (y // 2) << 8 | (z // 2) << 16)


def test_select_clamp(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-500, 500, n).astype(i32)
    f = rand_f(n, -2, 2)
    out, _ = run(kernel_corpus["select_clamp"], (n,), (wg,),
                 [np.zeros(2 * n, i32), np.zeros(n, f32), a, f, i32(-100), i32(200), u32(n)], [0, 1])
    o = out[0].reshape(n, 2)
    assert np.array_equal(o[:, 0], np.clip(a, -100, 200))
    assert np.array_equal(o[:, 1], np.abs(a))
    assert np.array_equal(out[1], np.clip(f, -1, 1) + np.where(f > 0.5, f32(2), f32(0.25)))


def test_bitops(kernel_corpus, size):
    n, wg = size
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(u32)
    a[:3] = [0, 1, 0x80000000]
    out, _ = run(kernel_corpus["bitops"], (n,), (wg,), [np.zeros(5 * n, u32), a, u32(n)], [0])
    o = out[0].reshape(n, 5)
    bits = [format(int(x), "032b") for x in a]
    assert np.array_equal(o[:, 0], [b.count("1") for b in bits])
    assert np.array_equal(o[:, 1], [len(b) - len(b.lstrip("0")) for b in bits])
    assert np.array_equal(o[:, 2], [len(b) - len(b.rstrip("0")) for b in bits])
    assert np.array_equal(o[:, 3], (a >> 5) & 0x3FF)
    rev = np.array([int(b[::-1], 2) for b in bits], u32)
    assert np.array_equal(o[:, 4], rev + a.byteswap())


def test_private_array(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-1000, 1000, n).astype(i32)
    out, _ = run(kernel_corpus["private_array"], (n,), (wg,), [np.zeros(n, i32), a, u32(n)], [0])
    i = np.arange(n)
    t = a[(i[:, None] + np.arange(64)) % n] * np.arange(64)
    j = a.view(u32) & 63
    assert np.array_equal(out[0], t[i, j] + t[i, (j * 7) & 63])


def test_cross_lane(kernel_corpus, size):
    n, wg = size
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(u32)
    out, _ = run(kernel_corpus["cross_lane"], (n,), (wg,), [np.zeros(6 * n, u32), a, u32(n)], [0])
    o = out[0].reshape(n, 6)
    for w0 in range(0, n, 32):           # waves are 32 consecutive work-items (wg is a multiple of 32)
        x = a[w0:w0 + 32]
        act = len(x)
        odd = (x & 1).astype(bool)
        ballot = sum(1 << k for k in range(act) if odd[k])
        assert np.all(o[w0:w0 + act, 0] == x[0])
        assert np.all(o[w0:w0 + act, 1] == ballot)
        assert np.array_equal(o[w0:w0 + act, 2], [bin(ballot & ((1 << k) - 1)).count("1") for k in range(act)])
        rot = [x[(k + 1) % 32] if (k + 1) % 32 < act else 0 for k in range(act)]
        assert np.array_equal(o[w0:w0 + act, 3], rot)     # inactive source lanes read as 0
        swap = [x[k ^ 1] if k ^ 1 < act else 0 for k in range(act)]
        assert np.array_equal(o[w0:w0 + act, 4], swap)
        quad = [x[(k & ~3) | (3 - (k & 3))] if (k & ~3) | (3 - (k & 3)) < act else 0 for k in range(act)]
        assert np.array_equal(o[w0:w0 + act, 5], quad)


@pytest.mark.parametrize("n", [256, 203], ids=["even", "awkward"])
def test_handoff(kernel_corpus, n):
    # workgroup 0 spins on a flag that the last workgroup sets: the scheduler must be fair
    out, _ = run(kernel_corpus["handoff"], (n,), (64,), [np.zeros(1, i32), np.zeros(2, i32), u32(n)], [0, 1])
    assert out[0][0] == 1 and out[1].tolist() == [43, 42]


def test_half_math(kernel_corpus, size):
    n, wg = size
    f16 = np.float16
    a, b, c = (rng.uniform(0.5, 4, n).astype(f16) for _ in range(3))
    args = [np.zeros(4 * n, f16), np.zeros(n, f32), a, b, c, u32(n)]
    out, _ = run(kernel_corpus["half_math"], (n,), (wg,), args, [0, 1])
    o = out[0].reshape(n, 4)
    exact = [float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)]
    assert np.array_equal(o[:, 0], np.array(exact).astype(f16))        # one rounding (fma)
    assert np.array_equal(o[:, 1], np.fmax(a, b) - np.fmin(b, c))
    sq = np.sqrt(a.astype(f64))
    assert np.all(np.abs(o[:, 2].astype(f64) - sq) <= np.spacing(sq.astype(f16)).astype(f64))  # 1 ulp
    assert np.array_equal(o[:, 3], (a.astype(f64) * 3).astype(f16))
    assert np.array_equal(out[1], b.astype(f32) + c.astype(f32))


def test_dynamic_local(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-100, 100, n).astype(i32)
    co = CodeObject.load(kernel_corpus["dynamic_local"])
    kern = co.kernel()
    assert [x.value_kind for x in kern.args][2] == "dynamic_shared_pointer"
    mem = FlatMemory()
    po, pa = mem.upload(np.zeros(n, i32)), mem.upload(a)
    lds_offset = kern.descriptor.group_segment_fixed_size      # the dynamic part follows the fixed one
    dispatch(co, None, mem, (n,), (wg,), pack_kernargs(kern, [po, pa, lds_offset, u32(n)]), dynamic_lds=4 * wg)
    want = []
    for g in range(0, n, wg):
        part = a[g:g + wg].astype(np.int64)
        want += list(np.cumsum(part * np.arange(1, len(part) + 1)) + len(part))
    assert np.array_equal(mem.array(po, i32, n), want)
    with pytest.raises(ExecError, match="LDS"):               # without the dynamic LDS it overruns
        dispatch(co, None, mem, (n,), (wg,), pack_kernargs(kern, [po, pa, lds_offset, u32(n)]))


def test_packed_math(kernel_corpus, size):
    n, wg = size
    f16, i16 = np.float16, np.int16
    a, b = (rng.uniform(-4, 4, 2 * n).astype(f16) for _ in range(2))
    sa = rng.integers(-2**15, 2**15, 2 * n).astype(i16)
    args = [np.zeros(10 * n, f16), a, b, np.zeros(4 * n, i16), sa, u32(n)]
    out, _ = run(kernel_corpus["packed_math"], (n,), (wg,), args, [0, 3])
    o, so = out[0].reshape(n, 5, 2), out[3].reshape(n, 2, 2)
    x, y, s2 = a.reshape(n, 2), b.reshape(n, 2), sa.reshape(n, 2)
    exact = np.array([float(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(p)))
                      for p, q in zip(x.ravel(), y.ravel())]).astype(f16).reshape(n, 2)
    assert np.array_equal(o[:, 0], exact)                      # v_pk_fma_f16, one rounding per half
    assert np.array_equal(o[:, 1], x - y[:, ::-1])             # op_sel swizzle and neg
    assert np.array_equal(o[:, 2], np.fmax(x, y))
    assert np.array_equal(o[:, 3], x + np.array([0, 1], f16))
    assert np.array_equal(o[:, 4], x * np.array([0.5, 0], f16))
    with np.errstate(over="ignore"):
        assert np.array_equal(so[:, 0], s2 + s2[:, ::-1])
        assert np.array_equal(so[:, 1], s2 * np.array([3, -2], i16))


def test_generic_ptr(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-1000, 1000, n).astype(i32)
    out, _ = run(kernel_corpus["generic_ptr"], (n,), (wg,), [np.zeros(n, i32), a.copy(), u32(n)], [0, 1])
    i = np.arange(n)
    l = i % wg
    assert np.array_equal(out[0], np.where(i & 1, 2001 + 2 * l, a + 1000 + l))
    assert np.array_equal(out[1], np.where(i & 1, a, a + 1))      # the global half was incremented


def test_generic_lds_private(kernel_corpus):
    """Flat loads through both apertures (src_shared_base/src_private_base via SH_MEM_BASES)."""
    n, wg = 128, 64
    a = rng.integers(-1000, 1000, n).astype(i32)
    out, _ = run(kernel_corpus["generic_lds_private"], (n,), (wg,), [np.zeros(n, i32), a, u32(n)], [0])
    i = np.arange(n)
    want = np.where(a & 1, a[(i // wg) * wg + (i % wg + 1) % wg] * 3, a[(i + (a & 15)) % n] + (a & 15))
    assert np.array_equal(out[0], want)


def test_dpp_shuffle(kernel_corpus, size):
    n, wg = size
    a = rng.integers(-10**6, 10**6, n).astype(i32)
    out, _ = run(kernel_corpus["dpp_shuffle"], (n,), (wg,), [np.zeros(5 * n, i32), a, u32(n)], [0])
    o = out[0].reshape(n, 5)
    for w0 in range(0, n, 32):           # waves are 32 consecutive work-items
        x = a[w0:w0 + 32]
        act = len(x)

        def read(src, valid=True):       # bound_ctrl: out-of-range or inactive sources read 0
            return x[src] if valid and src < act else 0

        for k in range(act):
            row, base = k & 15, k & ~15
            got = o[w0 + k]
            if row >= 1:                                             # row_shr:1 (no bound_ctrl)
                assert got[0] == x[k - 1]
            assert got[1] == read((k & ~3) | [2, 3, 0, 1][k & 3])    # quad_perm:[2,3,0,1]
            assert got[2] == read(base | (15 - row))                 # row_mirror
            assert got[3] == read(k + 1, row < 15)                   # row_shl:1
            # row_share:3 on row 0 only (row_mask 0x5); elsewhere or from an inactive lane the
            # destination keeps its old value -7
            share = x[base | 3] if k < 16 and (base | 3) < act else -7
            assert got[4] == share + x[k]


def test_short_math(kernel_corpus, size):
    n, wg = size
    i16 = np.int16
    a = rng.integers(-2**15, 2**15, 8 * n).astype(i16)
    b = rng.integers(-2**15, 2**15, 8 * n).astype(i16)
    d = rng.integers(0, 256, n + 1).astype(np.uint8)
    args = [np.zeros(16 * n, i16), a, b, np.zeros(n, np.uint8), d, u32(n)]
    out, _ = run(kernel_corpus["short_math"], (n,), (wg,), args, [0, 3])
    o = out[0].reshape(n, 2, 8)
    x, y = a.reshape(n, 8), b.reshape(n, 8)
    with np.errstate(over="ignore"):
        assert np.array_equal(o[:, 0], x * y + (x >> 3) + np.maximum(x, y))
        assert np.array_equal(o[:, 1], np.minimum(x, y) - i16(7) * y)
    assert np.array_equal(out[3], ((d[:n].astype(np.int64) * 3 + d[1:]) ^ np.arange(n)).astype(np.uint8))


def test_corpus_is_covered(kernel_corpus):
    tested = {name[len("test_"):] for name in globals() if name.startswith("test_")}
    assert len(kernel_corpus) >= 20
    assert set(kernel_corpus) <= tested, set(kernel_corpus) - tested


# ------------------------------------------------------------------------------------------------
# exactness of the float model


def test_fma_f32_single_rounding():
    # a*b+c where rounding the float64 sum first and then to float32 would round twice
    a = np.array([1 + 2**-23, 1 + 2**-12, 3.0, 1.0], f32)
    b = np.array([1 + 2**-23, 1 + 2**-12, 1 / 3, 1 + 2**-23], f32)
    c = np.array([-1.0, 2**-48, -1.0, 2**-24 + 2**-60], f32)
    want = fma_ref(a, b, c)
    assert np.array_equal(fma_f32(a, b, c), want)
    x = rng.uniform(-1, 1, 2000).astype(f32)
    y = rng.uniform(-1, 1, 2000).astype(f32)
    z = (-(x.astype(f64) * y) * (1 + rng.uniform(-1e-7, 1e-7, 2000))).astype(f32)   # cancellation
    assert np.array_equal(fma_f32(x, y, z), fma_ref(x, y, z))


# ------------------------------------------------------------------------------------------------
# faults are reported, not ignored


def _raw_kernel(tmp_path, code: bytes, vgprs=4, sgprs=8, lds=0):
    spec = KernelSpec("raw", code, vgprs, sgprs, group_segment_size=lds,
                      user_sgprs=("kernarg_segment_ptr",))
    path = tmp_path / "raw.so"
    path.write_bytes(write_code_object([spec]))
    return CodeObject.load(path)


def test_out_of_range_store_is_reported(kernel_corpus):
    co = CodeObject.load(kernel_corpus["add_f32"])
    mem = FlatMemory()
    a = mem.upload(np.zeros(64, f32))
    # the output pointer runs 4 KiB past the end of a 64-element buffer
    args = pack_kernargs(co.kernel(), [a + 4096, a, a, u32(64)])
    with pytest.raises(ExecError) as e:
        dispatch(co, None, mem, (64,), (64,), args)
    assert "global_store_b32" in str(e.value) and "memory fault" in str(e.value)
    assert e.value.pc >= co.kernel().code_address


def test_out_of_range_load_is_reported(kernel_corpus):
    co = CodeObject.load(kernel_corpus["add_f32"])
    mem = FlatMemory()
    a = mem.upload(np.zeros(64, f32))
    args = pack_kernargs(co.kernel(), [a, a, a, u32(100)])      # n larger than the buffers
    with pytest.raises(ExecError, match=r"global_load_b32.*memory fault.*read of 4 bytes"):
        dispatch(co, None, mem, (100,), (64,), args)


def test_out_of_range_lds_is_reported(kernel_corpus):
    # local_reverse has a 256-entry tile; a 512-wide workgroup indexes past its LDS allocation
    co = CodeObject.load(kernel_corpus["local_reverse"])
    mem = FlatMemory()
    a = mem.upload(np.zeros(512, f32))
    with pytest.raises(ExecError, match=r"local_reverse\+0x[0-9a-f]+\): ds_store_b32 .*LDS address 0x400.*1024 bytes of LDS"):
        dispatch(co, None, mem, (512,), (512,), pack_kernargs(co.kernel(), [a, a, u32(512)]))


def test_user_sgprs_follow_the_descriptor(kernel_corpus):
    """The same code under a descriptor that omits the dispatch pointer: the kernarg pointer lands
    in s[0:1] where the code expects the packet, s[2:3] stay 0, and the kernarg load faults."""
    k = CodeObject.load(kernel_corpus["add_f32"]).kernel()
    spec = KernelSpec("add_f32", k.code, args=k.args, user_sgprs=("kernarg_segment_ptr",), user_sgpr_count=15)
    co = CodeObject(write_code_object([spec]))
    mem = FlatMemory()
    a = mem.upload(np.zeros(64, f32))
    with pytest.raises(ExecError, match=r"s_load_b32 s1, s\[2:3\], 0x18: memory fault: read of 4 bytes at global address 0x18"):
        dispatch(co, None, mem, (64,), (64,), pack_kernargs(co.kernel(), [a, a, a, u32(64)]))


def test_register_beyond_allocation_is_reported():
    from rdna3 import assemble
    code = assemble("v_mov_b32 v20, 1\ns_endpgm\n")
    co = CodeObject(write_code_object([KernelSpec("k", code, vgpr_count=8)]))
    with pytest.raises(ExecError, match=r"v_mov_b32_e32 v20, 1: unsupported: v20 is beyond the kernel's 8 VGPRs"):
        dispatch(co, None, FlatMemory(), (32,), (32,), b"")


def test_hang_is_reported():
    from rdna3 import assemble
    co = CodeObject(write_code_object([KernelSpec("spin", assemble("top:\ns_branch top\ns_endpgm\n"))]))
    with pytest.raises(ExecError, match=r"\(spin\+0x0\): s_branch .*still running after 1000 instructions"):
        dispatch(co, None, FlatMemory(), (64,), (32,), b"", max_steps=1000)


def test_illegal_instruction_is_reported(tmp_path):
    co = _raw_kernel(tmp_path, bytes([0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0xb0, 0xbf]))
    with pytest.raises(ExecError, match=r"PC 0x[0-9a-f]+ \(raw\+0x0\): <ffffffff0000b0bf>: illegal instruction"):
        dispatch(co, None, FlatMemory(), (32,), (32,), b"")


def test_running_off_the_end_is_reported(tmp_path):
    # v_mov_b32 v1, 0 then padding; no s_endpgm
    co = _raw_kernel(tmp_path, bytes([0x80, 0x02, 0x02, 0x7e, 0x00, 0x00, 0x9f, 0xbf]))
    with pytest.raises(ExecError, match="s_code_end"):
        dispatch(co, None, FlatMemory(), (32,), (32,), b"")


@pytest.mark.parametrize("op,dtype", [("add", u32), ("max", i32), ("swap", u32), ("sub", u32), ("add_f32", f32),
                                      ("add_f32_ftz", f32), ("cmpswap", u32), ("inc", u32), ("add", u64)])
@pytest.mark.parametrize("addresses", [3, 200])
def test_atomics_apply_in_lane_order(op, dtype, addresses):
    """Vectorized atomics (rounds of distinct addresses, or one accumulate per address) equal a
    lane-by-lane sequential application."""
    from rdna3.wave_memory import ByteSpace
    r = np.random.default_rng(addresses)
    k = np.dtype(dtype).itemsize // 4
    init = r.integers(0, 2**32, 2048, dtype=u64).astype(u32)
    n = 300
    off = (r.integers(0, addresses, n) * 4 * k).astype(np.int64)
    data = r.integers(0, 2**32, (n, k), dtype=u64).astype(u32)
    if dtype == f32:
        data = r.random((n, 1)).astype(f32).view(u32)
    cmp = data[r.permutation(n)] if op == "cmpswap" else None
    space = ByteSpace(8192)
    space.u32[:] = init
    old = space.atomic(op, off, data, dtype, cmp)
    ref = init.copy()
    want_old = []
    for i in range(n):
        w = off[i] // 4
        o = ref[w:w + k].copy()
        want_old.append(o)
        ref[w:w + k] = np.asarray(ByteSpace._apply(op, o.view(dtype), data[i].view(dtype),
                                                   None if cmp is None else cmp[i].view(dtype))).view(u32)
    assert np.array_equal(old, np.array(want_old, u32))
    assert np.array_equal(space.u32, ref)


@pytest.mark.parametrize("case", ["denormal inputs", "a partial sum that is denormal"])
def test_a_cache_float_add_on_one_address_flushes_at_every_step(case):
    """add_f32_ftz (global/flat float atomic add: denormal inputs flushed) with many lanes on one address takes
    the one-accumulate path; it must equal lane-by-lane application, also where a running sum is denormal."""
    from rdna3.wave_memory import ByteSpace
    tiny = np.finfo(f32).tiny
    if case == "denormal inputs":
        data = np.array([2 * tiny, tiny / 2, tiny / 4, 3 * tiny] * 8, f32)   # running sums stay normal
    else:      # 1.5 tiny - 1.25 tiny = 0.25 tiny, a denormal that the next add flushes
        data = np.array([1.5 * tiny, -1.25 * tiny, tiny, 3 * tiny] * 8, f32)
    space = ByteSpace(64)
    old = space.atomic("add_f32_ftz", np.zeros(len(data), np.int64), data.view(u32).reshape(-1, 1), f32)
    ref, want = f32(0), []
    for d in data:
        want.append(ref)
        ref = np.asarray(ByteSpace._apply("add_f32_ftz", np.array([ref], f32), np.array([d], f32), None))[0]
    assert np.array_equal(old.view(f32).reshape(-1), np.array(want, f32))
    assert space.u32[:1].view(f32)[0] == ref


def test_flat_memory_faults():
    mem = FlatMemory()
    a = mem.alloc(16)
    mem.store(np.array([a, a + 12], u64), np.array([[1], [2]], u32), 4)
    assert mem.load(np.array([a + 12], u64), 4)[0, 0] == 2
    with pytest.raises(MemoryFault, match="write of 4 bytes"):
        mem.store(np.array([a + 14], u64), np.array([[1]], u32), 4)
    with pytest.raises(MemoryFault):
        mem.load(np.array([0x10], u64), 4)


# ------------------------------------------------------------------------------------------------
# targeted semantics, in assembly (assembled by rdna3.assemble, which is checked against llvm-mc)


def run_asm(text, out_words=256, lanes=32, lds=0):
    """Run one workgroup of `lanes` work-items of an assembled kernel whose only argument is an
    output buffer (pointer at s[0:1] of the kernarg segment, loaded into s[4:5] by the prologue)."""
    from rdna3 import assemble
    code = assemble("s_load_b64 s[4:5], s[0:1], 0x0\ns_waitcnt lgkmcnt(0)\n" + text + "\ns_endpgm\n")
    spec = KernelSpec("t", code, args=[KernelArg(0, 8, "global_buffer", "global")], group_segment_size=lds)
    co = CodeObject(write_code_object([spec]))
    mem = FlatMemory()
    out = mem.upload(np.zeros(out_words, u32))
    dispatch(co, None, mem, (lanes,), (lanes,), pack_kernargs(co.kernel(), [out]))
    return mem.array(out, u32, out_words)


def test_scalar_alu_semantics():
    regs = {7: 0x10, 8: 1, 9: 0xFFFFFFFE, 10: 9, 11: 0xD12, 12: 0xFFFFFFFF, 13: 11, 14: 8, 15: 16,
            16: 0xFFFFFFFE, 17: 0x80000000, 18: 0xFFFFFFFD, 19: 0xF8000000, 26: 0xFFFFFF80, 28: 0xFFFFFFFF,
            29: 0}
    v = (0x000C0008ABCD1234 << 40) & (2**64 - 1)
    regs[24], regs[25] = v & 0xFFFFFFFF, v >> 32
    stores = "\n".join(f"v_mov_b32 v1, s{r}\nglobal_store_b32 v3, v1, s[4:5] offset:{4 * k}"
                       for k, r in enumerate(regs))
    out = run_asm(f"""
        s_mov_b32 s6, 0xfffffff0
        s_add_u32 s7, s6, 32
        s_addc_u32 s8, 0, 0
        s_sub_u32 s9, 5, 7
        s_subb_u32 s10, 10, 0
        s_mov_b32 s20, 0xabcd1234
        s_mov_b32 s21, 0xc0008
        s_bfe_u32 s11, s20, s21
        s_mov_b32 s22, 0xf00000
        s_mov_b32 s23, 0x40014
        s_bfe_i32 s12, s22, s23
        s_cmp_lt_i32 -1, 0
        s_cselect_b32 s13, 11, 22
        s_ctz_i32_b32 s14, 0x100
        s_bcnt1_i32_b32 s15, 0xff00ff
        s_mul_hi_u32 s16, -1, -1
        s_brev_b32 s17, 1
        s_min_i32 s18, -3, 2
        s_ashr_i32 s19, 0x80000000, 4
        s_lshl_b64 s[24:25], s[20:21], 40
        s_sext_i32_i8 s26, 0x80
        s_mov_b32 s27, 5
        s_and_saveexec_b32 s28, s27
        v_mov_b32 v2, 7
        s_mov_b32 exec_lo, s28
        s_mov_b32 s29, 0
        v_cmp_eq_u32 vcc_lo, 99, v0
        s_cbranch_vccz skip
        s_mov_b32 s29, 1
    skip:
        v_mov_b32 v3, 0
        {stores}
        v_lshlrev_b32 v4, 2, v0
        global_store_b32 v4, v2, s[4:5] offset:512
    """)
    assert [hex(x) for x in out[:len(regs)]] == [hex(x) for x in regs.values()]
    lanes = out[128:160]
    assert lanes[0] == 7 and lanes[2] == 7 and lanes[1] == 0 and np.all(lanes[3:] == 0)   # exec = 0b101


def test_lane_and_misc_vector_semantics():
    out = run_asm("""
        v_cvt_f32_i32 v5, v0
        v_add_f32 v5, -4.0, v5
        v_mul_f32 v5, 0.5, v5
        v_mov_b32 v2, 99
        v_readlane_b32 s6, v0, 5
        v_writelane_b32 v2, s6, 7
        v_mbcnt_lo_u32_b32 v3, -1, 0
        v_mbcnt_hi_u32_b32 v3, -1, v3
        v_cmp_class_f32 vcc_lo, v5, 0x60
        v_cndmask_b32 v7, 0, 1, vcc_lo
        v_ldexp_f32 v8, v5, 3
        v_fract_f32 v9, v5
        v_frexp_exp_i32_f32 v10, v5
        v_sub_nc_u32 v11, 16, v0
        v_cls_i32 v11, v11
        v_med3_i32 v13, v0, 5, 10
        v_alignbit_b32 v14, v0, 0xf0000000, 4
        s_bitcmp1_b32 s6, 2
        s_cselect_b32 s7, 1, 2
        v_mov_b32 v15, s7
        v_lshlrev_b32 v1, 2, v0
        global_store_b32 v1, v2, s[4:5]
        global_store_b32 v1, v3, s[4:5] offset:128
        global_store_b32 v1, v7, s[4:5] offset:256
        global_store_b32 v1, v8, s[4:5] offset:384
        global_store_b32 v1, v9, s[4:5] offset:512
        global_store_b32 v1, v10, s[4:5] offset:640
        global_store_b32 v1, v11, s[4:5] offset:768
        global_store_b32 v1, v13, s[4:5] offset:896
        global_store_b32 v1, v14, s[4:5] offset:1024
        global_store_b32 v1, v15, s[4:5] offset:1152
    """, out_words=320)
    lane = np.arange(32)
    x = ((lane - 4.0) * 0.5).astype(f32)                          # -2.0, -1.5, ... 13.5
    o = out.reshape(10, 32)
    assert np.array_equal(o[0], np.where(lane == 7, 5, 99))      # readlane 5 -> writelane 7
    assert np.array_equal(o[1], lane)                             # mbcnt of all lanes below
    assert np.array_equal(o[2], (x == 0).astype(u32))            # class mask 0x60: -0 or +0
    assert np.array_equal(o[3].view(f32), x * 8)
    assert np.array_equal(o[4].view(f32), x - np.floor(x))
    assert np.array_equal(o[5].view(i32), np.where(x == 0, 0, np.frexp(x)[1]))
    v = (16 - lane).astype(i32)
    cls = [-1 if t in (0, -1) else format(int(t) if t >= 0 else ~int(t), "032b").index("1") for t in v]
    assert np.array_equal(o[6].view(i32), cls)                  # first bit that differs from the sign
    assert np.array_equal(o[7], np.clip(lane, 5, 10))
    assert np.array_equal(o[8], ((lane.astype(np.uint64) << 32 | 0xF0000000) >> 4) & 0xFFFFFFFF)
    assert np.all(o[9] == 1)                                     # bit 2 of s6 = 5 is set


def test_memory_ops_with_no_active_lanes():
    out = run_asm("""
        v_mov_b32 v1, 7
        v_mov_b32 v2, 0
        s_mov_b32 s10, exec_lo
        s_mov_b32 exec_lo, 0
        ds_add_u32 v2, v1
        ds_add_rtn_u32 v3, v2, v1
        global_store_b32 v2, v1, s[4:5]
        global_atomic_add_u32 v2, v1, s[4:5] offset:4
        global_load_b32 v4, v2, s[4:5]
        s_mov_b32 exec_lo, s10
        ds_load_b32 v5, v2
        global_store_b32 v2, v5, s[4:5] offset:8
    """, lds=64)
    assert out[:3].tolist() == [0, 0, 0]


def test_lds_vopd_and_returning_atomics():
    out = run_asm("""
        v_lshlrev_b32 v3, 2, v0
        v_add_nc_u32 v9, 100, v0
        ds_store_b32 v3, v0
        ds_store_b32 v3, v9 offset:256
        v_mov_b32 v4, 1
        v_mov_b32 v6, 0
        ds_add_rtn_u32 v5, v6, v4
        ds_load_2addr_stride64_b32 v[7:8], v3 offset1:1
        ds_load_b32 v10, v6
        v_add_nc_u32 v11, 1, v0
        v_mov_b32 v12, 0
        v_mov_b32 v13, 0
        global_atomic_cmpswap_b32 v14, v13, v[11:12], s[4:5] offset:1020 glc
        v_mov_b32 v20, v0
        v_add_nc_u32 v21, 1000, v0
        v_dual_mov_b32 v20, v21 :: v_dual_mov_b32 v21, v20
        global_store_b32 v3, v5, s[4:5]
        global_store_b32 v3, v7, s[4:5] offset:128
        global_store_b32 v3, v8, s[4:5] offset:256
        global_store_b32 v3, v10, s[4:5] offset:384
        global_store_b32 v3, v14, s[4:5] offset:512
        global_store_b32 v3, v20, s[4:5] offset:640
        global_store_b32 v3, v21, s[4:5] offset:768
    """, lds=512)
    lane = np.arange(32)
    assert np.array_equal(out[0:32], lane)                   # ds_add_rtn returns in lane order
    assert np.array_equal(out[32:64], np.r_[32, lane[1:]])   # lds[0] after the 32 adds
    assert np.array_equal(out[64:96], lane + 100)             # stride64: second address + 256 bytes
    assert np.all(out[96:128] == 32)                          # 32 increments of lds[0]
    assert out[128] == 0 and np.all(out[129:160] == 1)        # lane 0 swapped 0 -> 1, the rest saw 1
    assert out[255] == 1
    assert np.array_equal(out[160:192], lane + 1000) and np.array_equal(out[192:224], lane)   # VOPD swap
