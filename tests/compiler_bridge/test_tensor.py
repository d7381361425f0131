"""Every Tensor op against numpy on the host reference device "c", on awkward shapes. With DEVICE set (e.g.
DEVICE=am:sim CODEGEN=llvm) every test runs on that device instead; test_tensor_sim.py runs a subset on
am:sim with the LLVM code generator in the normal suite."""
import os

import numpy as np
import pytest

from compiler_bridge import runtime
from compiler_bridge.tensor import Tensor

rng = np.random.default_rng(0)
DEVICE = os.environ.get("DEVICE", "c")


@pytest.fixture(autouse=True)
def _c_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setattr("compiler_bridge.codegen.c._cache_dir", lambda: tmp_path_factory.getbasetemp() / "c_cache")


@pytest.fixture(scope="module", autouse=True)
def _device(request):
    if DEVICE == "c":
        yield
        return
    # a simulated AMD GPU: a fresh one with the real firmware; other devices (nv, a real am) take no options
    sim_amd = DEVICE.lower().split(":")[:2] == ["am", "sim"]
    with pytest.MonkeyPatch.context() as mp:
        if DEVICE.lower().startswith("am"):
            mp.setenv("DRIVERLESS_FIRMWARE_DIR", str(request.getfixturevalue("debian_firmware")))
        runtime.open_device(DEVICE, **({"fresh": True} if sim_amd else {}))
        yield
        runtime.close_device(DEVICE)


def T(x):
    return Tensor(x, device=DEVICE)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def close(t, ref, rtol=2e-6, atol=1e-6):
    got = t.numpy()
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    assert got.dtype == np.asarray(ref).dtype, (got.dtype, np.asarray(ref).dtype)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op,ref,lo", [
    ("exp", np.exp, -3), ("log", np.log, 0.01), ("sqrt", np.sqrt, 0), ("tanh", np.tanh, -3),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), -5), ("relu", lambda x: np.maximum(x, 0), -2),
])
def test_unary(op, ref, lo):
    x = f32(7, 13, lo=lo, hi=3)
    close(getattr(T(x), op)(), ref(x).astype(np.float32), rtol=1e-5)
    close(-T(x), -x)


def test_binary_broadcasting_and_scalars():
    a, b = f32(5, 1, 3), f32(4, 1, lo=0.5, hi=2)
    close(T(a) + T(b), a + b)
    close(T(a) - T(b), a - b)
    close(T(a) * T(b), a * b)
    close(T(a) / T(b), a / b)
    close(T(a).maximum(T(b)), np.maximum(a, b))
    close(2.5 - T(a), 2.5 - a)
    close(1 / T(b), (1 / b).astype(np.float32))
    close(T(a) * 3 + 1, a * 3 + 1)


def test_int_and_bool_arithmetic():
    i, j = rng.integers(-50, 50, (3, 7)).astype(np.int32), rng.integers(1, 9, (7,)).astype(np.int32)
    close(T(i) + T(j), i + j)
    close(T(i) * T(j) - 3, i * j - 3)
    close(-T(i), -i)
    close(T(i).relu(), np.maximum(i, 0))
    close(T(i) / T(j), (i / j).astype(np.float32))          # true division is float32
    close(T(i) + 0.5, (i + 0.5).astype(np.float32))
    m = i > 0
    close(T(m) + T(m), (m.astype(np.int32) * 2))            # bool arithmetic works in int32
    close(T(i).sum(axis=1), i.sum(axis=1).astype(np.int32))
    close(T(m).sum(), np.int32(m.sum()))
    close(T(m).max(axis=1), m.max(axis=1))
    close(T(i).max(axis=0), i.max(axis=0))


def test_comparisons_where_casts():
    a, b = f32(6, 5), f32(5)
    b[2] = a[1, 2]  # an equal pair
    close(T(a) < T(b), a < b)
    close(T(a) <= T(b), a <= b)
    close(T(a) > 0.5, a > 0.5)
    close(T(a) >= T(b), a >= b)
    close(T(a).eq(T(b)), a == b)
    close(T(a).ne(T(b)), a != b)
    close((T(a) > 0).where(T(a), T(b) * 2), np.where(a > 0, a, b * 2))
    close((T(a) > 0).where(1.0, 0.0), np.where(a > 0, 1.0, 0.0).astype(np.float32))
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 1e6], np.float32)
    close(T(x).cast("int32"), x.astype(np.int32))              # truncation toward zero
    close(T(x).cast("bool"), x.astype(bool))
    close(T(x).cast("bool").cast("float32"), x.astype(bool).astype(np.float32))
    i = np.array([-3, 0, 7, 2**24 + 1], np.int32)
    close(T(i).cast("float32"), i.astype(np.float32))
    close(T(i).cast("bool"), i.astype(bool))


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(axis, keepdims):
    x = f32(3, 5, 7)
    close(T(x).sum(axis, keepdims), x.sum(axis, keepdims=keepdims), rtol=1e-5, atol=1e-5)
    close(T(x).max(axis, keepdims), x.max(axis, keepdims=keepdims))
    close(T(x).mean(axis, keepdims), x.mean(axis, keepdims=keepdims), rtol=1e-5, atol=1e-5)


def test_large_reduction_and_size_one():
    x = f32(100_003, lo=0, hi=1)
    close(T(x).sum(), np.float32(x.astype(np.float64).sum()), rtol=1e-4)
    close(T(x).max(), x.max())
    one = f32(1, 1)
    close(T(one).sum(axis=0), one.sum(axis=0))
    o2 = f32(1)
    close(T(one) * T(o2), one * o2)
    close(T(np.float32(3.0)) + 1, np.float32(4.0))             # 0-d
    r = f32(1, 9)
    close(T(r).max(axis=1, keepdims=True), r.max(axis=1, keepdims=True))


def test_movement():
    x = f32(4, 6, 5)
    close(T(x).reshape(6, 20), x.reshape(6, 20))
    close(T(x).reshape(-1), x.reshape(-1))
    close(T(x).permute(2, 0, 1), x.transpose(2, 0, 1))
    close(T(x).transpose(0, 1) + 1, x.transpose(1, 0, 2) + 1)
    close(T(x).T, x.T)
    close(T(x).permute(2, 0, 1).reshape(10, 12), x.transpose(2, 0, 1).reshape(10, 12))
    close(T(x[:, :1]).expand(4, 3, 5), np.broadcast_to(x[:, :1], (4, 3, 5)))
    close(T(x)[1:4:2, ::-1, 3], x[1:4:2, ::-1, 3])
    close(T(x)[..., ::-2], x[..., ::-2])
    close(T(x)[None, 2, :, 1:4], x[None, 2, :, 1:4])
    close(T(x)[-1], x[-1])
    close(T(x).pad(((1, 0), (0, 2), (3, 1))), np.pad(x, ((1, 0), (0, 2), (3, 1))))
    close(T(x).pad(((0, 0), (1, 1), (0, 0)), value=-1.5), np.pad(x, ((0, 0), (1, 1), (0, 0)), constant_values=-1.5))
    y, z = f32(4, 2, 5), f32(4, 1, 5)
    close(Tensor.cat([T(x), T(y), T(z)], axis=1), np.concatenate([x, y, z], axis=1))
    close(Tensor.cat([T(x[0]), T(x[1])], axis=-1).exp(), np.exp(np.concatenate([x[0], x[1]], -1)), rtol=1e-5)
    # views of views of computed values
    close((T(x) * 2)[::2].permute(1, 0, 2).reshape(6, 10)[1:5], (x * 2)[::2].transpose(1, 0, 2).reshape(6, 10)[1:5])
    b = x > 0
    close(Tensor.cat([T(b), T(b)], 0), np.concatenate([b, b]))


def test_matmul():
    a, b = f32(7, 13), f32(13, 5)
    close(T(a) @ T(b), a @ b, rtol=1e-5, atol=1e-5)
    c, d = f32(2, 3, 4), f32(4, 6)
    close(T(c) @ T(d), c @ d, rtol=1e-5, atol=1e-5)
    v = f32(13)
    close(T(v) @ T(b), v @ b, rtol=1e-5, atol=1e-5)
    close(T(a) @ T(v), a @ v, rtol=1e-5, atol=1e-5)
    close(T(a).T @ T(a), a.T @ a, rtol=1e-5, atol=1e-5)


def test_mlp_and_softmax():
    x, w1, b1, w2 = f32(9, 10), f32(10, 17), f32(17), f32(17, 3)
    out = ((T(x) @ T(w1) + T(b1)).relu() @ T(w2)).softmax(-1)
    h = np.maximum(x @ w1 + b1, 0) @ w2
    e = np.exp(h - h.max(-1, keepdims=True))
    close(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_realized_tensors_are_reused():
    a = f32(3, 4)
    t = T(a) + 1
    np.testing.assert_allclose(t.numpy(), a + 1)
    assert t.schedule() == []                    # realized: nothing left to run
    u = t * 2
    (item,) = u.schedule()
    assert item.inputs == [t.node]               # reads t's buffer, does not recompute a + 1
    close(u, (a + 1) * 2)
    assert T(a).numpy() is not a and np.array_equal(T(a).numpy(), a)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="do not broadcast"):
        T(f32(3, 4)) + T(f32(5))
    with pytest.raises(ValueError, match="cannot become"):
        T(f32(3, 4)).reshape(5, 3)
    with pytest.raises(ValueError, match="matmul"):
        T(f32(3, 4)) @ T(f32(3, 4))
    with pytest.raises(TypeError, match="unsupported dtype"):
        T(np.zeros(3, np.complex64))
    with pytest.raises(ValueError, match="different devices"):
        T(f32(3)) + Tensor(f32(3), device="am:sim" if DEVICE == "c" else "c")
    with pytest.raises(IndexError, match="out of range"):
        T(f32(3))[3]
    # these were a ZeroDivisionError, "cannot become (12, 12)" and "tuple index out of range"
    with pytest.raises(ValueError, match="cannot be inferred next to a 0"):
        T(f32(0, 3)).reshape(0, -1)
    with pytest.raises(ValueError, match="at most one may be -1"):
        T(f32(4, 3)).reshape(-1, -1)
    with pytest.raises(IndexError, match=r"3 indices for 2 axes \(4, 3\)"):
        T(f32(4, 3))[1, 2, 0]
