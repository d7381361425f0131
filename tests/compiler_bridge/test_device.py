"""Tensors on the simulated Navi31 through hcq, with each GPU code generator
(rdna3, our own, and llvm through clang-15): results match numpy, kernel counts match the scheduler's."""
import shutil

import numpy as np
import pytest

from compiler_bridge import runtime
from compiler_bridge.tensor import Tensor


@pytest.fixture(params=["rdna3", "llvm"])
def sim(request, debian_firmware, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setattr("compiler_bridge.codegen.c._cache_dir", lambda: tmp_path_factory.getbasetemp() / "c_cache")
    if request.param not in runtime.codegens():
        pytest.skip(f"the {request.param} code generator is not registered (compiler_bridge.codegen_{request.param})")
    if request.param == "llvm" and not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("the llvm code generator needs clang-15 and ld.lld-15")
    # a boot failure (AMError is a RuntimeError) must fail here, not skip
    yield runtime.open_device("am:sim", codegen=request.param, fresh=True)
    runtime.close_device("am:sim")


def test_fused_kernels_on_am_sim(sim):
    rng = np.random.default_rng(2)
    x, w, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((5, 7), (7, 3), (3,)))
    t = lambda a: Tensor(a, device="am:sim")  # noqa: E731
    before = len(runtime.launches)
    out = ((t(x) @ t(w) + t(b)).relu() * 2).softmax(-1)
    got = out.numpy()
    h = np.maximum(x @ w + b, 0) * 2
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    runs = runtime.launches[before:]
    assert len(runs) == 1 + 3 and all(r.device == "am:sim" and r.seconds > 0 for r in runs)
    # movement, ints and bools on the device
    i = rng.integers(-9, 9, (4, 6)).astype(np.int32)
    u = (t(i)[::-1, 1:5].pad(((0, 1), (2, 0))) * 3 > 2).where(t(i)[0, 0] + 1, -1).sum(1)
    ref = np.where(np.pad(i[::-1, 1:5], ((0, 1), (2, 0))) * 3 > 2, i[0, 0] + 1, -1).sum(1)
    np.testing.assert_array_equal(u.numpy(), ref)


def test_results_stay_on_the_device_until_read_back(sim, monkeypatch):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    reads = []
    real = sim.dev.copyout
    monkeypatch.setattr(sim.dev, "copyout", lambda buf, *a, **k: reads.append(buf) or real(buf, *a, **k))
    sm = Tensor(x, device="am:sim").softmax(-1)
    sm.realize()
    assert reads == [] and sm.node.buffer.device is sim
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
    assert reads == [sm.node.buffer.handle]                  # the 2 intermediates never left the GPU


def test_codegen_choice(monkeypatch):
    import hcq
    monkeypatch.setattr(hcq, "open", lambda spec, **kw: object())
    monkeypatch.setattr(runtime, "_CODEGENS", {"llvm": None, "rdna3": None})
    monkeypatch.setattr(runtime, "_CODEGEN_MODULES", ())
    monkeypatch.delenv("CODEGEN", raising=False)
    assert runtime.HCQTensorDevice("am:sim").codegen == "rdna3"
    monkeypatch.setenv("CODEGEN", "llvm")
    assert runtime.HCQTensorDevice("am:sim").codegen == "llvm"
    monkeypatch.setattr(runtime, "_CODEGENS", {})
    with pytest.raises(RuntimeError, match="no code generator for am:sim.*registered: none.*DEVICE=c"):
        runtime.HCQTensorDevice("am:sim")


def test_a_device_that_does_not_execute_kernels_says_so_after_the_launch(monkeypatch):
    # nv:sim records launches without running them: a tensor computed there would be whatever memory held,
    # so the launch goes through (the model checks it) and then the kernel's output is refused
    import hcq
    from types import SimpleNamespace
    from compiler_bridge import ir
    launched = []
    model = SimpleNamespace(executes_kernels=False,
                            program=lambda code, name: lambda *a, **kw: launched.append((code, name, kw)) or 1e-6)
    monkeypatch.setattr(hcq, "open", lambda spec, **kw: model)
    monkeypatch.setattr(runtime, "_CODEGENS", {"cuda": lambda k: (b"cubin", k.name, ir.launch_dims(k))})
    monkeypatch.setattr(runtime, "_CODEGEN_MODULES", ())
    dev = runtime.HCQTensorDevice("nv:sim")
    assert dev.codegen == "cuda" and not dev.executes_kernels
    b = ir.Builder()
    b.store(0, b.gid(), b.const(1.0, "float32"))
    k = b.kernel("ones", [ir.BufParam("o", "float32", 4, "w")], 4)
    with pytest.raises(runtime.KernelsNotExecuted, match="nv:sim does not execute kernels: kernel ones was compiled, "
                                                         "loaded and launched .* but did not run"):
        dev.run(k, [])
    assert launched == [(b"cubin", "ones", {"global_size": (1, 1, 1), "local_size": (32, 1, 1), "wait": True})]
    monkeypatch.setattr(hcq, "open", lambda spec, **kw: object())    # devices that say nothing execute
    assert runtime.HCQTensorDevice("am:sim", codegen="cuda").executes_kernels


def test_op_battery_matches_the_c_reference(sim):
    """Each program once on am:sim and once on the host C reference: the same kernels, the same numbers."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, (5, 37)).astype(np.float32)
    i = rng.integers(-40, 40, (5, 37)).astype(np.int32)
    programs = [
        lambda t: (t(x).exp() + t(x).tanh() * t(x).sigmoid() - (t(x) * t(x)).sqrt()),
        lambda t: ((t(x) * 1.5).cast("int32") * t(i) - t(i).maximum(3)).cast("float32") / 7,
        lambda t: ((t(x) > 0).where(t(x), -t(x)) + 1).log().max(0),
        lambda t: (t(i) >= 2).where(t(i), t(i)[:, ::-1]).sum(1),
        lambda t: Tensor.cat([t(x)[:, ::3].pad(((1, 0), (0, 2)), value=-2.0), t(x)[::2, :15].relu()], 0).T.mean(1),
        lambda t: ((t(x).eq(t(x)[:, :1])).cast("int32") + t(i).ne(0)).sum(),
    ]
    for prog in programs:
        on_gpu = prog(lambda a: Tensor(a, device="am:sim")).numpy()
        on_c = prog(lambda a: Tensor(a, device="c")).numpy()
        assert on_gpu.dtype == on_c.dtype and on_gpu.shape == on_c.shape
        np.testing.assert_allclose(on_gpu, on_c, rtol=4e-6, atol=1e-6)


def test_the_demo_says_when_its_device_does_not_execute_kernels(monkeypatch, capsys):
    import hcq
    from types import SimpleNamespace
    from compiler_bridge import demo
    model = SimpleNamespace(executes_kernels=False, alloc=lambda n: object(), copyin=lambda *a: None,
                            free=lambda h: None, close=lambda: None, program=lambda *a: lambda *a, **kw: 1e-6)
    monkeypatch.setattr(hcq, "open", lambda spec, **kw: model)
    monkeypatch.setattr(runtime, "_CODEGENS", {"cuda": lambda k: (b"cubin", k.name, ((1, 1, 1), (32, 1, 1)))})
    monkeypatch.setattr(runtime, "_CODEGEN_MODULES", ())
    assert demo.main(["--device", "nv:sim"]) == 2
    assert "cannot run the demo on nv:sim: compiler_bridge: nv:sim does not execute kernels" in capsys.readouterr().err
