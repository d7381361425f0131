"""Fusion is asserted by counting kernels; the IR validator rejects broken kernels by name; the C
reference follows the IR's integer and cast semantics; the default device is chosen as documented."""
import numpy as np
import pytest

from compiler_bridge import ir, runtime
from compiler_bridge.codegen.c import CProgram
from compiler_bridge.schedule import SOFTMAX_KERNELS
from compiler_bridge.tensor import Tensor

rng = np.random.default_rng(1)


@pytest.fixture(autouse=True)
def _c_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setattr("compiler_bridge.codegen.c._cache_dir", lambda: tmp_path_factory.getbasetemp() / "c_cache")


def T(x):
    return Tensor(np.asarray(x, np.float32), device="c")


def f32(*shape):
    return rng.uniform(-2, 2, shape).astype(np.float32)


def kernels(t):
    return [it.kernel for it in t.schedule()]


def ops(k):
    return [op.op for op in k.walk()]


def test_elementwise_chain_is_one_kernel():
    a, b, c = f32(3, 5), f32(5), f32(3, 1)
    t = (T(a) * T(b) + T(c)).relu()
    (k,) = kernels(t)
    assert ops(k).count("load") == 3 and "idiv" in ops(k)      # broadcasting is index arithmetic
    before = len(runtime.launches)
    np.testing.assert_allclose(t.numpy(), np.maximum(a * b + c, 0), rtol=1e-6)
    assert len(runtime.launches) == before + 1


def test_views_cost_no_kernels_and_no_division_when_contiguous():
    x = f32(4, 6)
    t = (T(x) * 2).reshape(2, 12).reshape(24)[::3].exp()
    assert len(kernels(t)) == 1
    (k,) = kernels((T(x) + 1).reshape(4, 1, 6))
    assert "idiv" not in ops(k) and "mod" not in ops(k)
    pad_cat = Tensor.cat([T(x).pad(((1, 1), (0, 0))), T(x)[::-1].pad(((0, 2), (0, 0)))], axis=1).tanh()
    assert len(kernels(pad_cat)) == 1


def test_reduce_fusion():
    x, w = f32(7, 9), f32(9, 4)
    assert len(kernels((T(x) * T(x)).sum(1))) == 1                   # producer fused into the loop
    assert len(kernels((T(x).sum(1) * 2).exp())) == 1                # consumer fused after the loop
    assert len(kernels(T(x) @ T(w))) == 1
    (k,) = kernels(T(x) @ T(w))
    assert ops(k).count("reduce") == 1 and ops(k).count("store") == 1
    assert len(kernels(T(x) - T(x).max(1, keepdims=True))) == 2      # broadcast reduce is realized
    s = T(x).sum(1)
    assert len(kernels(s * s.exp())) == 1 and len(kernels(s.reshape(7, 1) + s.reshape(1, 7))) == 2


def test_softmax_and_mlp_kernel_counts():
    x = f32(5, 33)
    sm = T(x).softmax(-1)
    assert len(kernels(sm)) == SOFTMAX_KERNELS == 3
    before = len(runtime.launches)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
    assert len(runtime.launches) - before == SOFTMAX_KERNELS
    w1, w2 = f32(33, 8), f32(8, 3)
    assert len(kernels((T(x) @ T(w1)).relu() @ T(w2))) == 2           # relu rides in the second matmul


def test_long_reductions_split_in_two():
    x = rng.uniform(-3, -1, 100_003).astype(np.float32)
    part, total = kernels(T(x).max())
    assert 310 <= part.size <= 320 and total.size == 1                 # ~sqrt(n) parallel partials
    np.testing.assert_array_equal(T(x).max().numpy(), x.max())         # padded with -inf, not 0
    assert len(kernels(T(x[:7 * 4095].reshape(7, 4095)).sum(1))) == 1   # short rows: one kernel
    rows = x[:99_999].reshape(3, 33_333)
    assert len(kernels(T(rows).sum(1))) == 2
    np.testing.assert_allclose(T(rows).sum(1).numpy(), rows.sum(1), rtol=1e-5)
    i = rng.integers(-9, -1, 5000).astype(np.int32)
    assert Tensor(i, device="c").max().numpy() == i.max()


def test_realize_several_shares_their_kernels():
    from compiler_bridge import realize
    x = f32(6, 9)
    h = T(x) @ T(f32(9, 9))
    a, b = h.sum(0), h.max(1)             # h is a reduce with two consumers: realized once
    before = len(runtime.launches)
    realize(a, b)
    assert len(runtime.launches) - before == 3
    assert a.schedule() == [] and b.schedule() == []


def test_loop_invariant_loads_leave_the_loop():
    x = f32(4, 6)
    m = T(x).max(1, keepdims=True)
    m.realize()
    (k,) = kernels((T(x) - m).exp().sum(1))
    red = next(op for op in k.body if op.op == "reduce")
    assert sum(op.op == "load" for op in red.body) == 1               # x inside, max hoisted out


def _kernel(build, bufs, size):
    b = ir.Builder()
    build(b)
    return b.kernel("t", bufs, size)


def test_validator_rejects_broken_kernels():
    bufs = (ir.BufParam("o", "float32", 4, "w"), ir.BufParam("a", "float32", 4, "r"))
    with pytest.raises(ir.IRError, match="idiv is not defined for float32"):
        _kernel(lambda b: b.store(0, b.gid(), b.binary("idiv", b.load(1, b.gid(), "float32"),
                                                        b.const(2, "float32"))), bufs, 4)
    with pytest.raises(ir.IRError, match="store to"):
        _kernel(lambda b: b.store(1, b.gid(), b.const(1, "float32")), bufs, 4)
    with pytest.raises(ir.IRError, match="stores nothing"):
        _kernel(lambda b: b.gid(), bufs, 4)
    bad = ir.Kernel("t", bufs, (), 4, (ir.Op(0, "gid", "int32"), ir.Op(-1, "store", "void", (0, 5), 0)))
    with pytest.raises(ir.IRError, match="uses %5 before it is defined"):
        ir.validate(bad)
    inner = ir.Builder()
    g = inner.gid()
    v = inner.begin_reduce()
    x = inner.load(1, v, "float32")
    r = inner.end_reduce("sum", 4, x)
    inner.store(0, g, r)
    k = inner.kernel("ok", bufs, 4)
    leak = ir.Kernel("t", bufs, (), 4, k.body[:-1] + (ir.Op(-1, "store", "void", (g, x), 0),))
    with pytest.raises(ir.IRError, match="out of its scope"):
        ir.validate(leak)
    assert "reduce.sum" in str(k)


def test_c_reference_int_semantics():
    n = 6
    bufs = (ir.BufParam("q", "int32", n, "w"), ir.BufParam("m", "int32", n, "w"), ir.BufParam("w", "int32", n, "w"),
            ir.BufParam("c", "int32", n, "w"), ir.BufParam("a", "int32", n, "r"), ir.BufParam("f", "float32", n, "r"))

    def build(b):
        g = b.gid()
        a = b.load(4, g, "int32")
        three = b.const(3, "int32")
        b.store(0, g, b.binary("idiv", a, three))
        b.store(1, g, b.binary("mod", a, three))
        b.store(2, g, b.binary("mul", a, b.const(2**30, "int32")))
        b.store(3, g, b.cast(b.load(5, g, "float32"), "int32"))
    k = _kernel(build, bufs, n)
    a = np.array([-7, -1, 0, 1, 7, 5], np.int32)
    f = np.array([-2.9, -0.1, 0, 0.9, 2.5, 1e3], np.float32)
    outs = [np.zeros(n, np.int32) for _ in range(4)]
    CProgram(k)(*outs, a, f)
    assert outs[0].tolist() == [-2, 0, 0, 0, 2, 1]            # truncation toward zero
    assert outs[1].tolist() == [-1, -1, 0, 1, 1, 2]           # sign of the dividend
    assert outs[2].tolist() == ((a.astype(np.int64) * 2**30 + 2**31) % 2**32 - 2**31).tolist()  # wraps
    assert outs[3].tolist() == [-2, 0, 0, 0, 2, 1000]
    with pytest.raises(TypeError, match="needs a contiguous int32 array"):
        CProgram(k)(*outs[:3], np.zeros(n, np.float32), a, f)


def test_default_device(monkeypatch, capsys):
    monkeypatch.setenv("DEVICE", "c")
    assert runtime.default_device() == "c"
    monkeypatch.delenv("DEVICE")
    from amdrv import device_spec
    monkeypatch.setattr(device_spec, "pick_real_gpu", lambda: (None, "0000:03:00.0 is bound to amdgpu; no USB-to-PCIe bridge"))
    runtime._real_or_sim.cache_clear()
    assert runtime.default_device() == "am:sim"
    assert runtime.default_device() == "am:sim"          # searched once per process, said once
    err = capsys.readouterr().err.splitlines()
    assert err == ["driverless: no real GPU chosen (0000:03:00.0 is bound to amdgpu; no USB-to-PCIe bridge); "
                   "using the simulator am:sim (set DEVICE to choose)"]
    for found in ("am:0000:03:00.0", "am:usb:2-5"):
        monkeypatch.setattr(device_spec, "pick_real_gpu", lambda: (found, ""))
        runtime._real_or_sim.cache_clear()
        assert runtime.default_device() == found and capsys.readouterr().err == ""
    runtime._real_or_sim.cache_clear()
    monkeypatch.setenv("DEVICE", "c")
    assert Tensor(np.ones(3)).device == "c"


def test_kernel_names_say_what_they_compute_and_stay_unique_and_stable():
    a, b, c = T(f32(3, 5)), T(f32(5)), T(f32(3, 1))
    [k] = kernels((a * b + c).relu())
    assert k.name.startswith("mul_add_relu_f32_15_") and k.name.isidentifier()
    assert [k.name for k in kernels((a * b + c).relu())] == [k.name]              # stable: same graph, same name
    assert kernels(a.sum(1))[0].name.startswith("sum_f32_3_")
    assert kernels(a.max(1))[0].name.startswith("max_f32_3_")
    x = a - a.max(1, keepdims=True)
    e = x.exp()
    names = [k.name for k in kernels(e / e.sum(1, keepdims=True))]
    assert [n.rsplit("_", 3)[0] for n in names] == ["max", "sub_exp_sum", "sub_exp_div"]
    assert kernels(a.reshape(5, 3))[0].name.startswith("copy_f32_15_")
    assert kernels(a < b)[0].name.startswith("cmplt_bool_15_")
    # same op words, different kernels: the hash keeps them apart
    assert kernels(a + b)[0].name != kernels(a + c)[0].name
    # a long chain lists four ops and keeps the last (the stored one)
    long = ((((a + 1) * 2).exp() - 3).sqrt()).relu()
    assert kernels(long)[0].name.startswith("add_mul_exp_relu_f32_15_")
