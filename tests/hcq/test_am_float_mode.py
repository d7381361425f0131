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
