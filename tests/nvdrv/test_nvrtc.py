"""NVRTC through ctypes (nvdrv.nvrtc): CUDA C++ -> cubin for sm_90 on the CPU, errors with NVRTC's log,
architectures checked, a content-addressed cache under $DRIVERLESS_CACHE/nvrtc, a clear error without NVRTC."""
import pytest

from nvdrv import cubin, nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason=f"NVRTC is not installed (pip install "
                                 f"{nvrtc.PIP_PACKAGE}; `make test` installs it)")

SAXPY = r'''
extern "C" __global__ void saxpy(float *out, const float *x, const float *y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
'''


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch):
    monkeypatch.setattr(nvrtc, "_memo", {})


@needs_nvrtc
def test_library_from_the_wheel_and_versions():
    assert nvrtc.version() >= (12, 0)
    assert "sm_90" in nvrtc.supported_archs()
    assert "libnvrtc" in nvrtc.library_path()


@needs_nvrtc
def test_compiles_a_cubin_for_sm_90():
    data = nvrtc.compile_cuda(SAXPY, "saxpy.cu")
    assert data[:4] == b"\x7fELF"
    c = cubin.parse_cubin(data, "saxpy.cu", sm=90)
    assert c.arch == "sm_90" and list(c.kernels) == ["saxpy"]
    assert [(p.offset, p.size) for p in c.kernel("saxpy").params] == [(0, 8), (8, 8), (16, 8), (24, 4), (28, 4)]


@needs_nvrtc
def test_arch_reaches_nvrtc():
    c80 = cubin.parse_cubin(nvrtc.compile_cuda(SAXPY, arch="sm_80"))
    c90a = cubin.parse_cubin(nvrtc.compile_cuda(SAXPY, arch="sm_90a"))
    assert (c80.arch, c90a.arch) == ("sm_80", "sm_90a")


@needs_nvrtc
def test_options_reach_nvrtc():
    src = 'extern "C" __global__ void k(int *o) { o[0] = VALUE; }\n'
    with pytest.raises(nvrtc.NVRTCError, match="VALUE"):
        nvrtc.compile_cuda(src)
    assert nvrtc.compile_cuda(src, options=["-DVALUE=7"])[:4] == b"\x7fELF"


@needs_nvrtc
def test_compile_error_has_the_log_and_the_numbered_source():
    with pytest.raises(nvrtc.NVRTCError) as e:
        nvrtc.compile_cuda('extern "C" __global__ void f(int *x) {\n  x[0] = y;\n}\n', "broken.cu")
    msg = str(e.value)
    assert "broken.cu" in msg and "sm_90" in msg and "NVRTC_ERROR_COMPILATION" in msg
    assert 'broken.cu(2): error: identifier "y" is undefined' in msg
    assert "   2    x[0] = y;" in msg


@needs_nvrtc
@pytest.mark.parametrize("arch, match", [("compute_90", "not a real SM architecture"),
                                         ("sm_91", "does not compile for sm_91; it supports .*sm_90"),
                                         ("90", "not a real SM")])
def test_bad_arch_is_a_clear_error(arch, match):
    with pytest.raises(nvrtc.NVRTCError, match=match):
        nvrtc.compile_cuda(SAXPY, arch=arch)


def test_arch_given_as_an_option_is_refused():
    with pytest.raises(nvrtc.NVRTCError, match="give the architecture as arch="):
        nvrtc.compile_cuda(SAXPY, options=["--gpu-architecture=sm_80"])


@needs_nvrtc
def test_cache_is_content_addressed_under_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    before = dict(nvrtc.stats)
    a = nvrtc.compile_cuda(SAXPY)
    files = list((tmp_path / "nvrtc").glob("*.cubin"))
    assert len(files) == 1 and files[0].read_bytes() == a
    assert nvrtc.compile_cuda(SAXPY) == a                                   # memory
    nvrtc._memo.clear()
    assert nvrtc.compile_cuda(SAXPY) == a                                   # disk
    assert nvrtc.stats["compiles"] == before["compiles"] + 1
    assert nvrtc.stats["disk_hits"] == before["disk_hits"] + 1
    # every input is in the key: another arch, option or source is another cubin
    nvrtc.compile_cuda(SAXPY, arch="sm_80")
    nvrtc.compile_cuda(SAXPY, options=["-DUNUSED=1"])
    nvrtc.compile_cuda(SAXPY + "\n")
    assert len(list((tmp_path / "nvrtc").glob("*.cubin"))) == 4
    assert nvrtc.stats["compiles"] == before["compiles"] + 4


@needs_nvrtc
def test_a_damaged_cache_file_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    a = nvrtc.compile_cuda(SAXPY)
    (f,) = (tmp_path / "nvrtc").glob("*.cubin")
    f.write_bytes(b"garbage")
    nvrtc._memo.clear()
    assert nvrtc.compile_cuda(SAXPY) == a
    assert f.read_bytes() == a


@needs_nvrtc
def test_ptx_shows_what_the_options_did():
    src = 'extern "C" __global__ void k(float *o, float a, float b, float c) { o[0] = a * b + c; }\n'
    assert "fma.rn.f32" in nvrtc.compile_ptx(src)
    fused_off = nvrtc.compile_ptx(src, options=["--fmad=false"])
    assert "fma.rn.f32" not in fused_off and "mul.rn.f32" in fused_off


def test_missing_nvrtc_names_the_package(monkeypatch):
    monkeypatch.setattr(nvrtc, "_lib", None)
    monkeypatch.setattr(nvrtc, "library_path", lambda: None)
    assert not nvrtc.available()
    with pytest.raises(nvrtc.NVRTCMissing, match=f"pip install {nvrtc.PIP_PACKAGE}"):
        nvrtc.compile_cuda(SAXPY)


def test_unloadable_nvrtc_is_a_clear_error(monkeypatch, tmp_path):
    bogus = tmp_path / "libnvrtc.so.12"
    bogus.write_bytes(b"not a library")
    monkeypatch.setattr(nvrtc, "_lib", None)
    monkeypatch.setattr(nvrtc, "library_path", lambda: str(bogus))
    with pytest.raises(nvrtc.NVRTCMissing, match=f"{bogus} could not be loaded .*reinstall"):
        nvrtc.version()
