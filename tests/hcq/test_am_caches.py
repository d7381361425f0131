"""The HDP write path and the GPU caches, from the driver's side: each flush or invalidation the driver
emits (as upstream amdgpu does) is needed, and a driver that leaves one out gets wrong data or a fault.

- HDP (hdp_v6_0_flush_hdp; gmc_v11_0_flush_gpu_tlb flushes it before invalidating; amdgpu flushes it
  before an engine reads what the CPU wrote): VRAM written through BAR0 is held until the flush.
- Caches (gpusim.gl2): every launch starts with gfx_v11_0_emit_mem_sync's ACQUIRE_MEM (without it, or
  without its GLK_INV, a graph replay's kernels read the kernargs of the replay before from the K$), and
  every signal is gfx_v11_0_ring_emit_fence's RELEASE_MEM (without GL2_WB the kernel's results stay in GL2,
  out of the host's sight; with another event index the CP never signals).
"""
import numpy as np
import pytest

import hcq
from amdrv import pm4
from amdrv.hcq import queues as am_queues
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


def _saxpy_graph(dev, kernel_corpus):
    n = 256
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    x = RNG.random(n, np.float32)
    y, bx = dev.alloc(4 * n), dev.alloc(4 * n)
    dev.copyin(bx, x)
    g = dev.graph()
    alpha = g.var("alpha")
    g.exec(saxpy, y, bx, alpha, n, global_size=(1,), local_size=(256,))

    def run(a):
        dev.copyin(y, np.zeros(n, np.float32))
        g(alpha=a, wait=True)
        return np.frombuffer(dev.copyout(y), np.float32)
    return run, x


def test_graph_replays_read_new_kernargs_with_the_acquire_mem(dev, kernel_corpus):
    run, x = _saxpy_graph(dev, kernel_corpus)
    for a in (2.0, 0.5, -3.0):
        assert np.allclose(run(a), a * x)


@pytest.mark.parametrize("gcr", [None, pm4.MEM_SYNC_GCR & ~pm4._f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV", 1)],
                         ids=["no ACQUIRE_MEM", "no GLK_INV"])
def test_without_the_scalar_cache_invalidation_a_replay_reads_old_kernargs(dev, kernel_corpus, monkeypatch, gcr):
    real = pm4.PM4.acquire_mem
    if gcr is None:   # the packet dropped: a NOP of its length keeps the template's patch indices
        monkeypatch.setattr(pm4.PM4, "acquire_mem", lambda self, *a, **k: self.nop(8) + 7)
    else:
        monkeypatch.setattr(pm4.PM4, "acquire_mem", lambda self, *a, **k: real(self, gcr))
    run, x = _saxpy_graph(dev, kernel_corpus)
    assert np.allclose(run(2.0), 2.0 * x)
    assert np.allclose(run(0.5), 2.0 * x)          # the K$ still holds alpha = 2


def _signal_event(monkeypatch, event):
    for name, sel in (("_C_SIGNAL", pm4.DATA_64), ("_C_STAMP", pm4.DATA_GPU_CLOCK)):
        monkeypatch.setattr(am_queues, name, am_queues._template(
            lambda b, sel=sel: pm4.PM4(b).release_mem(0, 0, data_sel=sel, event=event)))


def test_a_signal_without_the_gl2_write_back_leaves_results_out_of_the_hosts_sight(dev, kernel_corpus,
                                                                                    monkeypatch):
    n = 256
    a = RNG.random(n, np.float32)
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    ba, out = dev.alloc(4 * n), dev.alloc(4 * n)
    dev.copyin(ba, a)
    _signal_event(monkeypatch, pm4.RELEASE_EVENT & ~pm4.P.PACKET3_RELEASE_MEM_GCR_GL2_WB)
    add(out, ba, ba, n, global_size=(1,), local_size=(256,), wait=True)
    assert not np.frombuffer(dev.copyout(out), np.float32).any()      # still in GL2
    monkeypatch.undo()
    add(out, ba, ba, n, global_size=(1,), local_size=(256,), wait=True)
    assert np.array_equal(np.frombuffer(dev.copyout(out), np.float32), 2 * a)


def test_a_signal_with_the_wrong_event_index_never_arrives(dev, kernel_corpus, monkeypatch):
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    out = dev.alloc(1024)
    bad = (pm4.RELEASE_EVENT & ~pm4._f("PACKET3_RELEASE_MEM_EVENT_INDEX", 0xF)) \
        | pm4._f("PACKET3_RELEASE_MEM_EVENT_INDEX", 6)                 # EOS index for a TS event
    _signal_event(monkeypatch, bad)
    with pytest.raises(hcq.HCQTimeout):
        add(out, out, out, 256, global_size=(1,), local_size=(256,), wait=True, timeout=0.5)
    monkeypatch.undo()
    dev.recover()


@pytest.mark.parametrize("acquire", [True, False], ids=["with ACQUIRE_MEM", "without"])
def test_code_loaded_where_a_freed_program_was_runs_only_after_the_instruction_cache_invalidation(
        dev, kernel_corpus, monkeypatch, acquire):
    if not acquire:
        monkeypatch.setattr(pm4.PM4, "acquire_mem", lambda self, *a, **k: self.nop(8) + 7)
    n = 256
    x = RNG.random(n, np.float32)
    bx, y = dev.alloc(4 * n), dev.alloc(4 * n)
    dev.copyin(bx, x)
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    add(y, bx, bx, n, global_size=(1,), local_size=(256,), wait=True)     # its code now in the I$ and GL2
    old = add.handle.image.va
    dev.free(add.handle.image)
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")                  # copied in where add_f32 was
    assert saxpy.handle.image.va == old
    dev.copyin(y, np.zeros(n, np.float32))
    try:
        saxpy(y, bx, 3.0, n, global_size=(1,), local_size=(256,), wait=True, timeout=1.0)
        got = np.frombuffer(dev.copyout(y), np.float32)
    except hcq.HCQError:
        got = None
    if acquire:
        assert got is not None and np.allclose(got, 3 * x)
    else:                                        # add_f32's code ran on saxpy's arguments
        assert got is None or not np.allclose(got, 3 * x)
