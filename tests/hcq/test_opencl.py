"""Plain OpenCL C runs unchanged (issue 12, docs/hcq.md): dev.compile_opencl builds it with the shipped
work-item header (rdna3/include/driverless_cl.h) for the device's gfx target, and it runs on am:sim."""
import shutil
import subprocess

import numpy as np
import pytest

from rdna3 import opencl

pytestmark = pytest.mark.skipif(not opencl.available(), reason="clang-15 and ld.lld-15 are not installed")

# Nothing but standard OpenCL C: no #include, no amdgcn builtins.
SCALE_ADD = """
__kernel void scale_add(__global float *out, __global const float *a, float s, uint n) {
  size_t i = get_global_id(0);
  if (i < n) out[i] = a[i] * s + (float)get_work_dim();
}
"""

# A 2-D grid with local memory and a barrier: each work-item writes what the work-item functions return
# for it, and its group's linear ids reversed through local memory.
GRID = """
__kernel void grid(__global uint *ids, __global uint *rev) {
  __local uint tile[64];
  size_t x = get_global_id(0), y = get_global_id(1), w = get_global_size(0);
  size_t l = get_local_linear_id(), n = get_local_size(0) * get_local_size(1);
  __global uint *o = ids + 8 * (y * w + x);
  o[0] = x; o[1] = y; o[2] = get_local_id(0); o[3] = get_group_id(0);
  o[4] = get_local_size(0); o[5] = get_num_groups(0); o[6] = get_global_linear_id(); o[7] = get_enqueued_local_size(0);
  tile[l] = (uint)get_global_linear_id();
  barrier(CLK_LOCAL_MEM_FENCE);
  rev[get_global_linear_id()] = tile[n - 1 - l];
}
"""


def test_plain_opencl_with_get_global_id_compiles_and_runs_on_am_sim(dev):
    prog = dev.program(dev.compile_opencl(SCALE_ADD), "scale_add")
    n = 1000
    a = np.arange(n, dtype=np.float32)
    src, out = dev.alloc(4 * 1024), dev.alloc(4 * 1024)
    dev.copyin(src, a.tobytes())
    prog(out, src, 2.0, n, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
    np.testing.assert_array_equal(np.frombuffer(dev.copyout(out, size=4 * n), np.float32), a * 2 + 1)


def test_work_item_functions_follow_the_dispatch_on_a_2d_grid(dev):
    groups, lx, ly = (3, 2), 8, 2         # hcq's global_size counts work-groups
    gx, gy = groups[0] * lx, groups[1] * ly
    ids, rev = dev.alloc(4 * 8 * gx * gy), dev.alloc(4 * gx * gy)
    prog = dev.program(dev.compile_opencl(GRID), "grid")
    prog(ids, rev, global_size=(*groups, 1), local_size=(lx, ly, 1), wait=True)
    got = np.frombuffer(dev.copyout(ids), np.uint32).reshape(gy, gx, 8)
    for y in range(gy):
        for x in range(gx):
            assert list(got[y, x]) == [x, y, x % lx, x // lx, lx, groups[0], y * gx + x, lx], (x, y)
    rev_got = np.frombuffer(dev.copyout(rev), np.uint32).reshape(gy, gx)
    for y in range(gy):
        for x in range(gx):
            l = (y % ly) * lx + x % lx
            m = lx * ly - 1 - l                                   # the work-item whose id this one reads back
            ox, oy = x - x % lx + m % lx, y - y % ly + m // lx
            assert rev_got[y, x] == oy * gx + ox, (x, y)


def test_code_object_is_for_the_device_and_holds_only_the_kernel(dev, tmp_path):
    from rdna3.codeobj import CodeObject
    co = CodeObject(dev.compile_opencl(SCALE_ADD))
    assert co.kernel("scale_add")                          # the kernel is there, the header's functions are not
    llvm_nm = shutil.which("llvm-nm-15")
    if llvm_nm:
        (tmp_path / "k.so").write_bytes(dev.compile_opencl(SCALE_ADD))
        syms = subprocess.run([llvm_nm, str(tmp_path / "k.so")], capture_output=True, text=True).stdout
        assert "get_global_id" not in syms


def test_without_the_shipped_header_plain_opencl_does_not_link(tmp_path, monkeypatch):
    # What the header is for: with -nogpulib nothing defines get_global_id (clang only declares it).
    monkeypatch.setattr(opencl, "HEADER", tmp_path / "empty.h")
    monkeypatch.setattr(opencl, "_header", None)
    (tmp_path / "empty.h").write_text("")
    with pytest.raises(opencl.ClangError, match="undefined hidden symbol: get_global_id"):
        opencl.compile_opencl(SCALE_ADD, use_cache=False)


def test_navi33_gets_its_own_target():
    a = opencl.compile_opencl(SCALE_ADD, mcpu="gfx1100")
    b = opencl.compile_opencl(SCALE_ADD, mcpu="gfx1102")
    assert a != b and b"gfx1102" in b


def test_compile_error_names_the_source_line(dev):
    with pytest.raises(opencl.ClangError, match=r"(?s)undeclared identifier 'nope'.*   2  __kernel"):
        dev.compile_opencl("\n__kernel void bad(__global float *o) { o[0] = nope; }\n")
