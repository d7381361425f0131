"""The LLVM generator: IR -> OpenCL C -> clang-15 code objects that match the C reference on the wave
executor and on am:sim; compiles are cached by source hash; a missing clang is a clear error."""
import shutil

import numpy as np
import pytest

import hcq
from rdna3 import opencl as codegen_clang
from compiler_bridge.codegen import llvm as L
from compiler_bridge.codegen import samples as S
from compiler_bridge import ir, runtime

SAMPLES = S.samples()
needs_clang = pytest.mark.skipif(not codegen_clang.available(), reason="clang-15/ld.lld-15 not installed")


def assert_close(got, ref, what):
    for t, (g, r) in enumerate(zip(got, ref)):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=f"{what} output {t}")
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{what} output {t}")


def test_source_shape():
    src = L.opencl_source(SAMPLES["softmax"].kernel)
    assert "__kernel __attribute__((reqd_work_group_size(64, 1, 1)))" in src
    assert "void softmax(__global const float *restrict b0, __global float *restrict b1)" in src
    assert "if (gid >= 60) return;" in src
    assert src.count("for (int v") == 2
    src = L.opencl_source(SAMPLES["uniform"].kernel)
    assert "int s0, float s1)" in src


@needs_clang
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_matches_c_reference_on_wave_executor(name):
    s = SAMPLES[name]
    co, kname, launch = L.generate(s.kernel)
    assert kname == s.kernel.name and launch == ir.launch_dims(s.kernel)
    assert_close(S.run_wave(s, co, kname, launch), S.run_reference(s), f"llvm {name}")


@needs_clang
def test_runs_on_am_sim_through_hcq(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    dev = hcq.open("am:sim", fresh=True)
    try:
        for name in ("ew_chain", "matmul", "uniform"):
            s = SAMPLES[name]
            assert_close(S.run_hcq(dev, s, *L.generate(s.kernel)), S.run_reference(s), f"hcq llvm {name}")
    finally:
        dev.close()


def test_registered():
    assert runtime.codegens()["llvm"] is L.generate


@needs_clang
def test_compiles_are_cached_by_source(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    monkeypatch.setattr(codegen_clang, "_memo", {})
    src = L.opencl_source(SAMPLES["row_sum_max"].kernel) + "/* cache test */\n"
    before = dict(codegen_clang.stats)
    a = codegen_clang.compile_opencl(src)
    assert codegen_clang.stats["compiles"] == before["compiles"] + 1
    assert len(list((tmp_path / "kernels").glob("*.co"))) == 1
    assert codegen_clang.compile_opencl(src) == a                       # memory
    codegen_clang._memo.clear()
    assert codegen_clang.compile_opencl(src) == a                       # disk
    assert codegen_clang.stats["compiles"] == before["compiles"] + 1
    assert codegen_clang.stats["disk_hits"] == before["disk_hits"] + 1


def test_missing_clang_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    with pytest.raises(codegen_clang.ClangMissing, match="clang-15 and ld.lld-15 .*apt-get install clang-15 lld-15"):
        codegen_clang.compile_opencl("__kernel void never_built_before(void) {}\n")


@needs_clang
def test_compile_error_shows_diagnostics_and_source(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    diag = r"(?s)clang-15 failed .*undeclared identifier 'nope'.*source:\n   1  __kernel void bad"
    with pytest.raises(codegen_clang.ClangError, match=diag):
        codegen_clang.compile_opencl("__kernel void bad(__global float *o) { o[0] = nope; }\n")
