"""Freed buffers, buffers of a closed device and closed devices are refused everywhere with a clear error
(issue 13 items 3, 8, 9): never a write through a stale address that now belongs to another buffer, never
an AttributeError, never a launch that waits out its timeout. Collected buffers give their VRAM back."""
import gc
import time

import numpy as np
import pytest

import hcq
from rdna3 import assemble
from rdna3.codeobj import KernelArg, KernelSpec, write_code_object

# fill(dst, value): dst[work-item] = value, for one workgroup
FILL = write_code_object([KernelSpec(
    "fill", assemble("s_load_b64 s[2:3], s[0:1], 0x0\ns_load_b32 s4, s[0:1], 0x8\nv_lshlrev_b32 v1, 2, v0\n"
                     "s_waitcnt lgkmcnt(0)\nv_mov_b32 v2, s4\nglobal_store_b32 v1, v2, s[2:3]\ns_endpgm\n"),
    args=[KernelArg(0, 8, "global_buffer", "global", "dst"), KernelArg(8, 4, "by_value", name="value")])])


def words(dev, buf):
    return np.frombuffer(dev.copyout(buf), np.uint32)


def test_a_freed_buffer_is_refused_and_the_buffer_at_its_address_stays_intact(dev):
    fill = dev.program(FILL, "fill")
    old = dev.alloc(4096)
    va = old.va
    view = old.view(256, 256)
    dev.free(old)
    new = dev.alloc(4096)
    assert new.va == va            # the address is reused: a stale handle would write into `new`
    dev.copyin(new, np.full(1024, 7, np.uint32))
    other = dev.alloc(4096)
    for use in (lambda: fill(old, 1, global_size=(1,), local_size=(32,), wait=True),
                lambda: fill(view, 1, global_size=(1,), local_size=(32,), wait=True),
                lambda: dev.copy(old, other), lambda: dev.copy(other, view),
                lambda: dev.copyin(old, b"x"), lambda: dev.copyout(view), lambda: old.view(0, 16)):
        with pytest.raises(hcq.HCQError, match=r"was freed; allocate a new buffer"):
            use()
    with pytest.raises(hcq.HCQError, match=r"free: <hcq.Buffer 4 KiB \(0x1000 bytes\) \(dead\) .* was freed"):
        dev.free(old)              # a second free: said so, not an AttributeError
    assert (words(dev, new) == 7).all()
    fill(new, 5, global_size=(1,), local_size=(32,), wait=True)   # the live one works
    assert (words(dev, new)[:32] == 5).all() and (words(dev, new)[32:] == 7).all()


def test_queues_and_graphs_refuse_buffers_freed_after_they_were_built(dev):
    fill = dev.program(FILL, "fill")
    a, b = dev.alloc(4096), dev.alloc(4096)
    q = dev.compute_queue()
    q.exec(fill, [a, 3])
    cq = dev.copy_queue()
    cq.copy(b, a, 4096)
    g = dev.graph()
    x = g.var("x")
    g.exec(fill, x, 9, global_size=(1,), local_size=(32,))
    g.copy(b, x, 128)
    g(x=a, wait=True)
    assert (words(dev, b)[:32] == 9).all()
    dev.free(a)
    for use in (q.submit, cq.submit, lambda: g(wait=True)):    # x is still bound to the freed a
        with pytest.raises(hcq.HCQError, match="was freed"):
            use()
    c = dev.alloc(4096)
    g(x=c, wait=True)              # rebinding to a live buffer replays
    assert (words(dev, c)[:32] == 9).all()
    dev.free(b)
    with pytest.raises(hcq.HCQError, match="graph replay: .* was freed"):
        g(x=c)
    g2 = dev.graph()
    with pytest.raises(hcq.HCQError, match="graph capture of kernel fill: .* was freed"):
        g2.exec(fill, b, 1, global_size=(1,), local_size=(32,))


def test_a_closed_device_refuses_work_at_once_and_its_buffers_are_dead(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    dev = hcq.open("am:sim", fresh=True)
    fill = dev.program(FILL, "fill")
    buf = dev.alloc(4096)
    sig = dev.new_signal()
    dev.close()
    t0 = time.perf_counter()
    for use, what in ((lambda: dev.alloc(16), "alloc"), (lambda: dev.copyout(buf), "copyout"),
                      (lambda: fill(buf, 1, global_size=(1,), local_size=(32,), wait=True, timeout=30), "launch"),
                      (lambda: sig.wait(1, timeout=30), "wait"), (dev.synchronize, "wait"),
                      (lambda: dev.program(FILL, "fill"), "program"), (dev.recover, "recover")):
        with pytest.raises(hcq.HCQError, match=f"am:sim: {what}.* on a closed device"):
            use()
    assert time.perf_counter() - t0 < 2          # no timeout waited out
    with pytest.raises(hcq.HCQError, match=r"belonged to am:sim, which was closed"):
        dev.free(buf)
    assert "(dead)" in repr(buf)


def test_collected_buffers_give_their_vram_back(dev):
    used_before = dev.gpu.dev.mm.in_use()
    for _ in range(100):           # 24 GiB of VRAM: without the finalizer the 23rd fails
        b = dev.alloc(1 << 30)
        dev.copyin(b, b"abc")
        del b
    dev.alloc(16)                  # the next alloc reclaims the last one
    assert dev.gpu.dev.mm.in_use() <= used_before + (1 << 20)


def test_a_buffer_dropped_while_work_may_use_it_is_freed_only_after_that_work(dev):
    fill = dev.program(FILL, "fill")
    gate = dev.new_signal(0)
    q = dev.compute_queue()
    q.wait(gate, 1)                # the queue stalls here: the launch behind it has not run
    a = dev.alloc(4096)
    va = a.va
    q.exec(fill, [a, 4])
    q.signal(dev.timeline, dev.next_timeline())
    q.submit()
    del q, a                       # the queue held the last reference
    gc.collect()
    b = dev.alloc(4096)
    assert b.va != va              # not reclaimed: the launch may still write it
    gate.value = 1
    dev.synchronize(timeout=10)
    c = dev.alloc(4096)
    assert c.va == va              # reclaimed once the timeline passed the drop


def test_sizes_that_do_not_fit_a_launch_are_argument_errors(dev):
    fill = dev.program(FILL, "fill")
    buf = dev.alloc(4096)
    for g, l_, msg in (((1 << 32,), (1,), r"4294967296 work-items along x; a launch holds at most 4294967295"),
                       ((1 << 31,), (2,), "along x"), ((1,), (32.0,), "positive integer counts"),
                       ((1, 1, 1, 1), (1,), "up to 3"), (4, (1,), "up to 3")):
        with pytest.raises(hcq.ArgumentError, match=msg):
            fill(buf, 1, global_size=g, local_size=l_)
    q = dev.compute_queue()
    with pytest.raises(hcq.ArgumentError, match="along y"):
        q.exec(fill, [buf, 1], (1, 1 << 32, 1), (1, 1, 1))   # the queue's fast path too
    assert fill(buf, 1, global_size=(np.int64(1),), local_size=(np.int32(32),), wait=True) is not None


def test_allocations_the_host_cannot_back_are_hcq_errors(dev):
    with pytest.raises(hcq.HCQError, match=r"am:sim: no 64 TiB|am:sim: no 65536 GiB of host memory"):
        dev.alloc(1 << 46, host=True)
    with pytest.raises(hcq.HCQError, match="a byte count is an integer"):
        dev.alloc(4096.0)
