"""The launch's COMPUTE_PGM_RSRC1 decides the waves' float mode (AMDGPUUsage: the CP starts each wave with
the round and denormal modes, DX10_CLAMP and IEEE of FLOAT_MODE/RSRC1; gpusim's executor honours them,
tests/rdna3/test_wave_mode.py): the AM backend must program the descriptor's value. A driver that writes
another one (the mutation tool's inverted dword, or the float mode left 0) gets other sums on denormals and
on inexact values, and a kernel built to flush denormals flushes through hcq."""
import subprocess
from pathlib import Path

import numpy as np

from amdrv import pm4

KERNELS = Path(__file__).resolve().parents[1] / "rdna3" / "kernels"
f32 = np.float32
# a denormal plus zero, denormal sums, inexact sums (1 + 2**-30), a sum that only a directed rounding moves
A = np.array([1e-39, -2e-39, 1.0, 3e-39, 1.0, -1.0, 0.1, 3.0], f32)
B = np.array([0.0, 1e-39, 2.0 ** -30, -1e-39, 2.0 ** -25, -(2.0 ** -30), 0.2, 1e-7], f32)


def _add(dev, code, n=64):
    a, b = np.resize(A, n), np.resize(B, n)
    ba, bb, out = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
    dev.copyin(ba, a)
    dev.copyin(bb, b)
    add = dev.program(code, "add_f32")
    add(out, ba, bb, n, global_size=(1,), local_size=(n,), wait=True)
    return np.frombuffer(dev.copyout(out), f32), a, b


def _rsrc1_written_as(monkeypatch, dev):
    """A list holding one function: the driver writes COMPUTE_PGM_RSRC1 as list[0](value) instead of the
    descriptor's value."""
    at = pm4.sh_offset(dev.gc, "COMPUTE_PGM_RSRC1")
    orig = pm4.PM4.set_sh_reg
    change = [lambda v: v]

    def set_sh_reg(self, offset, *values):
        if offset == at:
            values = (change[0](values[0]) & 0xFFFFFFFF,) + values[1:]
        return orig(self, offset, *values)
    monkeypatch.setattr(pm4.PM4, "set_sh_reg", set_sh_reg)
    return change


def test_the_descriptors_float_mode_is_what_the_waves_run_with(dev, kernel_corpus, monkeypatch):
    got, a, b = _add(dev, kernel_corpus["add_f32"])
    assert np.array_equal(got, a + b)           # nearest even, denormals kept: clang-15's descriptor
    # inverted (the mutation tool's reg-flip): round toward zero, denormals flushed, no DX10 clamp
    change = _rsrc1_written_as(monkeypatch, dev)
    change[0] = lambda v: ~v
    wrong, _, _ = _add(dev, kernel_corpus["add_f32"])
    assert not np.array_equal(wrong, a + b)
    assert wrong[0] == 0 and wrong[2] == 1.0 and wrong[4] == 1.0     # flushed; toward zero as nearest here
    # a driver that leaves FLOAT_MODE 0 (flush sources and results): the denormal sums are lost
    change[0] = lambda v: v & ~(0xFF << 12)
    got, _, _ = _add(dev, kernel_corpus["add_f32"])
    keep = a + b
    assert not np.array_equal(got, keep)
    assert (got[np.abs(keep) < np.finfo(f32).tiny] == 0).all()


def test_a_kernel_built_to_flush_denormals_flushes_through_hcq(dev, kernel_corpus, tmp_path):
    from tests.conftest import CLANG_CL
    obj, so = tmp_path / "add.o", tmp_path / "add.so"
    for cmd in (CLANG_CL + ["-cl-denorms-are-zero", str(KERNELS / "add_f32.cl"), "-o", str(obj)],
                ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
        subprocess.run(cmd, check=True, capture_output=True)
    got, a, b = _add(dev, so.read_bytes())
    keep = a + b
    tiny = np.finfo(f32).tiny
    flush = np.where(np.abs(a) < tiny, 0, a) + np.where(np.abs(b) < tiny, 0, b)
    flush = np.where(np.abs(flush) < tiny, 0, flush).astype(f32)
    assert np.array_equal(got, flush) and not np.array_equal(got, keep)


# fmin/fmax as clang-15 builds them in IEEE mode (v_max_f32 x, x quiets a possible signalling NaN, then
# v_min/v_max), and a compare of denormals: what RSRC1's IEEE_MODE and FLOAT_MODE say decides the results
FMODE_CL = """#include "common.h"
__kernel void fmode(__global float *out, __global const float *a, __global const float *b, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  out[3 * i] = __builtin_fminf(a[i], b[i]);
  out[3 * i + 1] = __builtin_fmaxf(a[i], b[i]);
  out[3 * i + 2] = a[i] < b[i] ? 1.0f : 0.0f;
}
"""
SNAN, SNAN_QUIETED, QNAN = 0x7FA00000, 0x7FE00000, 0x7FC00001
IEEE_MODE = 1 << 23          # COMPUTE_PGM_RSRC1.IEEE_MODE (gc_11_0_0_sh_mask.h)


def _fmode(dev, so: bytes, n=32):
    a = np.resize(np.array([SNAN, f32(-1e-39).view(np.uint32), f32(1.0).view(np.uint32)], np.uint32), n)
    b = np.resize(np.array([QNAN, 0, f32(2.0).view(np.uint32)], np.uint32), n)
    ba, bb, out = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(12 * n)
    dev.copyin(ba, a)
    dev.copyin(bb, b)
    dev.program(so, "fmode")(out, ba, bb, n, global_size=(1,), local_size=(n,), wait=True)
    return np.frombuffer(dev.copyout(out), np.uint32).reshape(n, 3)


def test_ieee_mode_and_the_denormal_mode_reach_min_max_and_compares(dev, tmp_path, monkeypatch):
    from tests.conftest import CLANG_CL
    (tmp_path / "fmode.cl").write_text(FMODE_CL)
    obj, so = tmp_path / "fmode.o", tmp_path / "fmode.so"
    for cmd in (CLANG_CL + [str(tmp_path / "fmode.cl"), "-o", str(obj)], ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
        subprocess.run(cmd, check=True, capture_output=True)
    code = so.read_bytes()
    got = _fmode(dev, code)
    # IEEE mode: fmin/fmax of (sNaN, qNaN) give the sNaN quieted; -1e-39 < 0 with denormals kept
    assert list(got[0, :2]) == [SNAN_QUIETED, SNAN_QUIETED] and got[1, 2] == f32(1.0).view(np.uint32)
    assert list(got[2]) == [f32(1.0).view(np.uint32), f32(2.0).view(np.uint32), f32(1.0).view(np.uint32)]
    # a driver that drops RSRC1.IEEE_MODE: the signalling NaN comes through unquieted
    change = _rsrc1_written_as(monkeypatch, dev)
    change[0] = lambda v: v & ~IEEE_MODE
    got = _fmode(dev, code)
    assert list(got[0, :2]) == [SNAN, SNAN]
    # a driver that leaves FLOAT_MODE 0 (flush denormal sources): the compare sees -0 < 0, false
    change[0] = lambda v: v & ~(0xFF << 12)
    got = _fmode(dev, code)
    assert got[1, 2] == 0 and list(got[0, :2]) == [SNAN_QUIETED, SNAN_QUIETED]
