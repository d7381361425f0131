"""The HDP write path and the GPU caches, from the driver's side: each flush or invalidation the driver
emits (as upstream amdgpu does) is needed, and a driver that leaves one out gets wrong data or a fault.

- HDP (hdp_v6_0_flush_hdp; gmc_v11_0_flush_gpu_tlb flushes it before invalidating; amdgpu flushes it
  before an engine reads what the CPU wrote): VRAM written through BAR0 is held until the flush.
"""
import numpy as np
import pytest

import hcq
from amdrv.ip.nbio import NBIO

RNG = np.random.default_rng(11)


def _no_hdp_flush(dev, monkeypatch) -> list:
    """Makes the driver's HDP flush a no-op; returns the list its skipped calls are counted in."""
    skipped = []
    monkeypatch.setattr(NBIO, "hdp_flush", lambda *a, **k: skipped.append(a))
    return skipped


def test_copyin_without_the_hdp_flush_leaves_the_kernel_reading_old_input(dev, kernel_corpus, monkeypatch):
    n = 256
    a, b = RNG.random(n, np.float32), RNG.random(n, np.float32)
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    ba, bb, out = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
    dev.copyin(ba, a)
    dev.copyin(bb, b)
    add(out, ba, bb, n, global_size=(1,), local_size=(256,), wait=True)
    assert np.array_equal(np.frombuffer(dev.copyout(out), np.float32), a + b)     # with the flush
    skipped = _no_hdp_flush(dev, monkeypatch)
    dev.copyin(ba, 2 * a)                       # through BAR0, then no flush: still in the HDP
    add(out, ba, bb, n, global_size=(1,), local_size=(256,), wait=True)
    assert skipped
    assert np.array_equal(np.frombuffer(dev.copyout(out), np.float32), a + b)     # the old input
    monkeypatch.undo()
    dev.gpu.nbio.hdp_flush()
    add(out, ba, bb, n, global_size=(1,), local_size=(256,), wait=True)
    assert np.array_equal(np.frombuffer(dev.copyout(out), np.float32), 2 * a + b)


def test_a_tlb_flush_without_the_hdp_flush_leaves_the_walker_on_old_tables(dev, kernel_corpus, monkeypatch):
    n = 256
    a = RNG.random(n, np.float32)
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    ba = dev.alloc(4 * n)
    dev.copyin(ba, a)
    _no_hdp_flush(dev, monkeypatch)
    out = dev.alloc(64 << 20)                   # new page-table entries, written through BAR0
    with pytest.raises(hcq.HCQFault, match="(?i)fault"):
        add(out, ba, ba, n, global_size=(1,), local_size=(256,), wait=True)
    dev.recover()
