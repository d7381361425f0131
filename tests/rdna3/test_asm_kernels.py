"""Whole clang-15-built gfx1100 kernels: our disassembly equals llvm-objdump-15's, instruction for
instruction, and the text reassembles to the original .text bytes."""
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from rdna3 import assemble, decode_all, disassemble

TOOLS = {t: shutil.which(t) for t in ("clang-15", "ld.lld-15", "llvm-objdump-15")}
pytestmark = pytest.mark.skipif(not all(TOOLS.values()), reason="needs clang-15, lld-15 and llvm-15")

KERNELS = r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define GID (__builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x())
__kernel void elementwise(__global float *a, __global const float *b, __global const float *c, int n) {
  int i = GID;
  if (i < n) a[i] = b[i] * c[i] + __builtin_sqrtf(b[i]) / c[i] + __builtin_expf(c[i]) - __builtin_logf(b[i])
                    + __builtin_fabsf(b[i]) * __builtin_fminf(b[i], 2.5f) + __builtin_floorf(c[i]);
}
__kernel void reduce(__global int *out, __global const int *in, __local int *tmp) {
  int l = __builtin_amdgcn_workitem_id_x();
  tmp[l] = in[GID];
  __builtin_amdgcn_s_barrier();
  for (int s = 32; s > 0; s >>= 1) { if (l < s) tmp[l] += tmp[l + s]; __builtin_amdgcn_s_barrier(); }
  if (l == 0) __atomic_fetch_add(out, tmp[0], __ATOMIC_RELAXED);
}
__kernel void wide(__global double *a, __global const long *b, __global half *h, __global ulong *u) {
  int i = GID;
  a[i] = (double)b[i] * 3.5 + __builtin_fma((double)i, a[i], 1.0) / a[i + 1];
  h[i] = h[i] * (half)2.5h + h[i + 1];
  u[i] = (u[i] >> 7) * 0x123456789ull + (u[i] % 1000003ull);
}
__kernel void matmul(__global float *c, __global const float *a, __global const float *b, int n) {
  __local float ta[16][16], tb[16][16];
  int tx = __builtin_amdgcn_workitem_id_x(), ty = __builtin_amdgcn_workitem_id_y();
  int row = __builtin_amdgcn_workgroup_id_y() * 16 + ty, col = __builtin_amdgcn_workgroup_id_x() * 16 + tx;
  float acc = 0;
  for (int k = 0; k < n; k += 16) {
    ta[ty][tx] = a[row * n + k + tx]; tb[ty][tx] = b[(k + ty) * n + col];
    __builtin_amdgcn_s_barrier();
    for (int j = 0; j < 16; j++) acc += ta[ty][j] * tb[j][tx];
    __builtin_amdgcn_s_barrier();
  }
  c[row * n + col] = acc;
}
__kernel void branchy(__global int *a, __global const uint *b) {
  int i = GID;
  uint x = b[i];
  int r = 0;
  while (x > 1) { r++; x = (x & 1) ? 3 * x + 1 : x >> 1; if (r > 1000) break; }
  if (i & 1) r = -r; else r = __builtin_popcount(b[i]) + __builtin_clz(b[i] | 1);
  a[i] = r;
}
__kernel void lanes(__global int *a, __global const int *b) {
  int i = GID;
  int x = b[i];
  x = __builtin_amdgcn_mov_dpp(x, 0x111, 0xf, 0xf, false);
  x += __builtin_amdgcn_update_dpp(0, x, 0x4e, 0xf, 0xf, true);
  x += __builtin_amdgcn_ds_swizzle(x, 0x041f);
  x += __builtin_amdgcn_readfirstlane(x);
  x += __builtin_amdgcn_ds_bpermute(i * 4, x);
  x += __builtin_amdgcn_ds_permute(i * 4, x);
  a[i] = x + __builtin_popcount(__builtin_amdgcn_read_exec_lo());
}
__kernel void divs(__global double *d, __global long *l, __global uint *u, __global float *f) {
  int i = GID;
  d[i] = d[i] / d[i + 1] + __builtin_sqrt(d[i]);
  l[i] = l[i] / (l[i + 1] | 1) + l[i] % 7;
  u[i] = u[i] / (u[i + 1] | 1);
  f[i] = __builtin_fmaf(f[i], f[i+1], 1.0f) / 3.0f + __builtin_amdgcn_rcpf(f[i]) + __builtin_amdgcn_rsqf(f[i]);
  f[i] += __builtin_amdgcn_sinf(f[i]) + __builtin_amdgcn_cosf(f[i]) + __builtin_amdgcn_fractf(f[i]) + __builtin_amdgcn_ldexpf(f[i], 3);
}
__kernel void priv(__global int *a, int n) {
  int arr[64];
  int i = GID;
  for (int k = 0; k < 64; k++) arr[k] = a[(i + k) % n];
  for (int k = 1; k < 64; k++) arr[k] += arr[k - 1] * arr[(k * 7) & 63];
  a[i] = arr[i & 63];
}
__kernel void atomics(__global long *l, __global int *x, __global float *f, __local int *s) {
  int i = GID;
  __atomic_fetch_add(l, (long)i, __ATOMIC_RELAXED);
  __atomic_fetch_max(x, i, __ATOMIC_RELAXED);
  __atomic_fetch_min(x + 1, i, __ATOMIC_SEQ_CST);
  int e = 5; __atomic_compare_exchange_n(x + 2, &e, i, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  __atomic_fetch_xor(s, i, __ATOMIC_RELAXED);
  __atomic_fetch_add(s + 1, 1, __ATOMIC_RELAXED);
  __builtin_amdgcn_s_barrier();
  x[i + 4] = s[0] + s[1] + __atomic_exchange_n(x + 3, i, __ATOMIC_ACQUIRE);
}
__kernel void halves(__global half8 *h, __global short8 *s, __global uchar *c) {
  int i = GID;
  h[i] = h[i] * h[i + 1] + (half8)(1.5h) - h[i] / h[i + 2];
  s[i] = s[i] * s[i + 1] + (s[i] >> 3) + (s[i] > s[i+1] ? s[i] : s[i+1]);
  c[i] = (uchar)(c[i] * 3 + c[i + 1]) ^ (uchar)__builtin_clz(i);
}
"""


@pytest.fixture(scope="module")
def code_object(tmp_path_factory):
    d = tmp_path_factory.mktemp("kernels")
    (d / "k.cl").write_text(KERNELS)
    subprocess.run([TOOLS["clang-15"], "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa",
                    "-mcpu=gfx1100", "-nogpulib", "-O2", "-c", str(d / "k.cl"), "-o", str(d / "k.o")], check=True)
    subprocess.run([TOOLS["ld.lld-15"], "-shared", str(d / "k.o"), "-o", str(d / "k.so")], check=True)
    return d / "k.so"


def _text(path):
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(".text").data()


def _objdump(path):
    out = subprocess.run([TOOLS["llvm-objdump-15"], "-d", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return [" ".join(line.split("//")[0].split()) for line in out.splitlines() if line.startswith("\t")]


def test_disassembly_equals_llvm_objdump(code_object):
    ref = _objdump(code_object)
    mine = [" ".join(t.split()) for t in disassemble(_text(code_object))]
    assert len(ref) > 300
    diffs = [(i, r, m) for i, (r, m) in enumerate(zip(ref, mine)) if r != m]
    assert not diffs, f"{len(diffs)} lines differ from llvm-objdump-15, e.g. {diffs[:10]}"
    assert len(mine) == len(ref)
    for needed in ("v_dual_", "s_delay_alu", "s_waitcnt", "global_load", "ds_", "s_cbranch", "v_fma_f64", "_dpp",
                   "ds_swizzle_b32", "ds_bpermute", "scratch_store", "buffer_gl0_inv", "global_atomic_cmpswap",
                   "v_pk_", "s_waitcnt_vscnt"):
        assert any(needed in t for t in mine), f"kernels no longer exercise {needed}"


def test_kernels_reassemble_to_their_bytes(code_object):
    text = _text(code_object)
    assert assemble("\n".join(disassemble(text))) == text
    for inst in decode_all(text):
        assert assemble(str(inst)) == text[inst.offset:inst.offset + inst.size], str(inst)
