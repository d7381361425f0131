"""The CUDA generator: IR -> CUDA C++ -> NVRTC cubins for sm_90. Every kernel of the corpus (the generator
samples and the kernels the demo and a spread of Tensor programs schedule) compiles, and its cubin has the
parameter layout, launch bounds and no relocations the IR implies. The generated source is also built for
the host (a few macros stand in for CUDA's) and run against the C reference, so its semantics are checked
without a GPU. Running the cubins needs an NVIDIA GPU: with DEVICE=nv (a lent H100/H200) the samples run
through hcq; nv:sim, the ioctl model, cannot execute SASS, and those checks skip saying so."""
import ctypes
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from compiler_bridge.codegen import cuda as C
from compiler_bridge.codegen import samples as S
from compiler_bridge import ir, runtime
from compiler_bridge.codegen.c_dialect import float_lit
from compiler_bridge.demo import BATCH, HIDDEN, IN, OUT, mlp_softmax
from compiler_bridge.tensor import Tensor
from nvdrv import cubin, nvrtc

SAMPLES = S.samples()
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason=f"NVRTC is not installed (pip install "
                                 f"{nvrtc.PIP_PACKAGE}; `make test` installs it)")
DEVICE = os.environ.get("DEVICE", "")


def assert_close(got, ref, what):
    for t, (g, r) in enumerate(zip(got, ref)):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=f"{what} output {t}")
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{what} output {t}")


def corpus() -> dict[str, ir.Kernel]:
    """The generator samples and the kernels a spread of Tensor programs schedule (nothing runs)."""
    out = {f"sample:{n}": s.kernel for n, s in SAMPLES.items()}
    rng = np.random.default_rng(5)

    def t(*shape, dtype=np.float32):
        return Tensor(rng.uniform(-2, 2, shape).astype(dtype), device="c")

    x, w1, b1, w2, b2 = t(BATCH, IN), t(IN, HIDDEN), t(HIDDEN), t(HIDDEN, OUT), t(OUT)
    programs = {
        "demo": mlp_softmax(x, w1, b1, w2, b2)[1],
        "movement": (t(4, 6)[::-1, 1:5].pad(((0, 1), (2, 0)), 0.5) * 3 > 2).where(t(5, 6), -1.0).sum(1),
        "ints": ((t(7, 5, dtype=np.int32) * 3 - 1).maximum(2) > 0).sum(0) + t(5, dtype=np.int32).max(),
        "cat_cast": Tensor.cat([t(3, 4), t(2, 4).exp()], 0).cast("int32").cast("float32").mean(),
        "math": (t(33).sqrt().log() + t(33).sigmoid() - t(33).tanh() / 3).relu(),
        "long_reduce": t(5000).sum(),                               # split into two kernels (rule 5)
        "batched_matmul": t(2, 3, 8) @ t(8, 5),
    }
    for name, tensor in programs.items():
        for i, item in enumerate(tensor.schedule()):
            out[f"{name}:{i}"] = item.kernel
    return out


def test_source_shape():
    src = C.cuda_source(SAMPLES["softmax"].kernel)
    assert 'extern "C" __global__ void __launch_bounds__(64) softmax(const float *__restrict__ b0, ' \
           'float *__restrict__ b1) {' in src
    assert "int gid = (int)(blockIdx.x * 64u + threadIdx.x);" in src
    assert "if (gid >= 60) return;" in src and src.count("for (int v") == 2
    assert "int s0, float s1)" in C.cuda_source(SAMPLES["uniform"].kernel)
    # float constants are bit-exact, NaN and infinities included (NaN as the quiet NaN)
    assert float_lit(float("inf"), C.CUDA) == "__int_as_float(0x7f800000)"
    assert float_lit(-0.0, C.CUDA) == "__int_as_float(0x80000000)"
    assert float_lit(1e-45, C.CUDA) == "__int_as_float(0x00000001)"
    assert float_lit(float("nan"), C.CUDA) == "__int_as_float(0x7fc00000)"


@needs_nvrtc
def test_every_corpus_kernel_compiles_for_sm_90(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    kernels = corpus()
    assert len(kernels) >= 20
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = dict(zip(kernels, pool.map(C.generate, kernels.values())))
    for what, k in kernels.items():
        data, name, launch = built[what]
        assert name == k.name and launch == ir.launch_dims(k), what
        c = cubin.parse_cubin(data, f"{what}.cubin", sm=90)
        ck = c.kernel(k.name)
        # the IR's arguments: an 8-byte pointer per buffer, then a 4-byte value per scalar, naturally aligned
        expect, at = [], 0
        for size in [8] * len(k.bufs) + [4] * len(k.scalars):
            at = -(-at // size) * size
            expect.append((at, size, "untyped"))
            at += size
        assert ck.arg_entries() == expect, what
        assert ck.max_threads == (launch[1][0], 1, 1), what
        assert c.relocations == {} and c.module_sections == {}, what      # nothing for a loader to patch
        assert ck.frame_size == 0 and ck.registers > 0, what             # no local-memory spills
        ck.check_block(launch[1])


@needs_nvrtc
def test_no_fma_contraction():
    # the C reference rounds a*b and then +c; NVRTC contracts them into an fma unless told --fmad=false
    src = C.cuda_source(SAMPLES["matmul"].kernel)
    ptx = nvrtc.compile_ptx(src, arch=C.ARCH, options=C.OPTIONS)
    assert "mul.rn.f32" in ptx and "fma.rn.f32" not in ptx
    assert "fma.rn.f32" in nvrtc.compile_ptx(src, arch=C.ARCH)         # what the option prevents


def test_registered_and_default_on_nv():
    assert runtime.codegens()["cuda"] is C.generate
    assert runtime.default_codegen("nv") == runtime.default_codegen("nv:sim") == "cuda"
    assert runtime.default_codegen("am:sim") in ("rdna3", "llvm")


# ------------------------------------------------------------------- the source's semantics on the host
HOST_PRELUDE = r'''
#include <math.h>
#include <string.h>
#define __global__
#define __launch_bounds__(n)
struct host_dim3 { unsigned x, y, z; };
static host_dim3 blockIdx, threadIdx;
static inline float __int_as_float(unsigned bits) { float f; memcpy(&f, &bits, 4); return f; }
'''


def host_program(k: ir.Kernel, tmp_path):
    """The generated CUDA source built for the host with c++ (CUDA's builtins as macros and globals) and a
    launcher that runs every (block, thread) of ir.launch_dims in order: run(buffers..., scalars...)."""
    (groups, _, _), (local, _, _) = ir.launch_dims(k)
    ctype = {"float32": "float", "int32": "int"}
    params = [f"void *p{i}" for i in range(len(k.bufs))] + [f"{ctype[p.dtype]} s{i}" for i, p in enumerate(k.scalars)]
    args = [f"({'const ' if b.access == 'r' else ''}{ctype[b.dtype]} *)p{i}" for i, b in enumerate(k.bufs)]
    args += [f"s{i}" for i in range(len(k.scalars))]
    launcher = (f'extern "C" void run({", ".join(params)}) {{\n'
                f"  for (unsigned g = 0; g < {groups}; g++) for (unsigned t = 0; t < {local}; t++) {{\n"
                f"    blockIdx.x = g; threadIdx.x = t; {k.name}({', '.join(args)});\n  }}\n}}\n")
    src = tmp_path / f"{k.name}.cpp"
    src.write_text(HOST_PRELUDE + C.cuda_source(k) + launcher)
    lib = tmp_path / f"{k.name}.so"
    r = subprocess.run(["c++", "-O1", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", str(src), "-o",
                        str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fn = ctypes.CDLL(str(lib)).run
    fn.argtypes = [ctypes.c_void_p] * len(k.bufs) + [ctypes.c_float if p.dtype == "float32" else ctypes.c_int
                                                      for p in k.scalars]
    return fn


@pytest.mark.skipif(not shutil.which("c++"), reason="a host C++ compiler (c++) is needed to run the generated source")
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_source_matches_c_reference_on_host(name, tmp_path):
    s = SAMPLES[name]
    run = host_program(s.kernel, tmp_path)
    bufs = [a.copy() for a in S._buffers(s)]
    # one element of slack past each buffer: a kernel whose items past n touched memory would show there
    padded = [np.concatenate([b, np.full(1, 7, b.dtype)]) for b in bufs]
    run(*(p.ctypes.data for p in padded), *s.scalars)
    outs = [padded[t][:-1] for t in S.outputs(s.kernel)]
    assert all(p[-1] == 7 for p in padded), "an item past n wrote memory"
    assert_close(outs, S.run_reference(s), f"cuda-on-host {name}")


# ------------------------------------------------------------------------------- on an NVIDIA GPU
@needs_nvrtc
def test_runs_on_an_nvidia_gpu():
    no_gpu = ("executing cubins needs an NVIDIA GPU (DEVICE=nv on a lent H100/H200); nv:sim, the ioctl model, "
              "cannot run SASS")
    if not DEVICE.startswith("nv"):
        pytest.skip(no_gpu)
    import hcq
    dev = hcq.open(DEVICE)
    try:
        if not getattr(dev, "executes_kernels", True):
            pytest.skip(no_gpu)
        for name, s in SAMPLES.items():
            assert_close(S.run_hcq(dev, s, *C.generate(s.kernel)), S.run_reference(s), f"{DEVICE} cuda {name}")
    finally:
        dev.close()


@needs_nvrtc
def test_tensors_on_nv_sim_compile_load_and_launch(monkeypatch, tmp_path):
    """On the model of NVIDIA's kernel module a Tensor program's kernel goes through the whole path (CUDA
    source, NVRTC, the cubin loader, a QMD launch the model checks and records) and then the runtime says
    the result was not computed."""
    import hcq
    import struct as st
    from gpusim.nv.rm import SimProvider
    from nvdrv.device import NVHCQDevice
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    monkeypatch.setattr(hcq, "open", lambda spec, **kw: NVHCQDevice(spec, SimProvider(), "0"))
    dev = runtime.open_device("nv:sim")
    try:
        assert dev.codegen == "cuda" and not dev.executes_kernels
        rng = np.random.default_rng(1)
        x, w = (Tensor(rng.uniform(-1, 1, s).astype(np.float32), device="nv:sim") for s in ((5, 7), (7, 3)))
        y = (x @ w).relu()
        (item,) = y.schedule()
        with pytest.raises(runtime.KernelsNotExecuted, match=f"kernel {item.kernel.name} was compiled, loaded and "
                                                             "launched"):
            y.numpy()
        (rec,) = dev.dev.prov.rm.gpu.launches
        (groups, _, _), (local, _, _) = ir.launch_dims(item.kernel)
        assert rec.grid == (groups, 1, 1) and rec.block == (local, 1, 1)
        k = cubin.parse_cubin(C.generate(item.kernel)[0]).kernel(item.kernel.name)
        assert rec.registers >= k.registers
        # constant bank 0 carries the buffers' addresses where the cubin's parameter records put them
        addrs = st.unpack_from(f"<{len(item.kernel.bufs)}Q", rec.cb0, k.param_base)
        assert addrs[1:] == tuple(n.buffer.handle.va for n in item.inputs) and addrs[0] != 0
    finally:
        runtime.close_device("nv:sim")
