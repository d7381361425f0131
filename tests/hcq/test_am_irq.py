"""Interrupt waits (amdrv.irq) on the simulated GPU running on its own clock: a wait sleeps on the MSI
eventfd and wakes on the fence's end-of-pipe interrupt; a driver that leaves the pipe's interrupt off,
or whose fence asks for none, still completes through the fallback check but says so; the stepped
simulator (and every transport without an eventfd) polls."""
import re
import time
import warnings
from pathlib import Path

import pytest

import hcq
from gpusim.bus import HostBus
from amdrv import irq, sdma_packets
from amdrv.hcq import queues
from amdrv.ip.ih import IVEntry


class _Async:
    """A fresh simulated GPU opened through hcq on the stepped clock (boot and set-up fast and deterministic),
    with what the tests use allocated and loaded there, then running on its own clock (gpusim's start_async)
    and asked again for interrupts (AMHCQDevice.enable_interrupts), as a real GPU runs on its own. Allocations
    after that would wait for TLB invalidations on the threaded clock, slow on a loaded machine."""

    def __init__(self, busy: bytes, faults: bytes):
        self.d = d = hcq.open("am:sim", bus=HostBus())   # a bus of its own: no later test finds this GPU
        assert d.irq is None and "stepped clock" in d.wait_mode
        self.busy = d.program(busy, "busy")
        self.spin = d.program(faults, "spin")
        self.buf = d.alloc(64 * 4)
        self.flag = d.alloc(4, host=True)
        d._host_view(self.flag, 0, 4)[:] = (1).to_bytes(4, "little")     # spin returns at once
        self.a, self.b = d.alloc(1 << 16), d.alloc(1 << 16)
        self.fn = d.gpu.dev.pci
        self.fn.dev.start_async()
        self.fn.async_clock = True
        assert d.enable_interrupts() == "interrupts: MSI on an eventfd"

    def close(self) -> None:
        self.fn.dev.stop_async()     # fini on the stepped clock, as it booted
        self.fn.async_clock = False
        self.d.close()


@pytest.fixture(scope="module")
def busy_kernel(build_cl) -> bytes:
    return build_cl([Path(__file__).parent / "kernels" / "busy.cl"])["busy"].read_bytes()


@pytest.fixture
def rig(debian_firmware, monkeypatch, busy_kernel, kernel_corpus):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    r = _Async(busy_kernel, kernel_corpus["faults"])
    yield r
    r.close()


def _busy_wait(r, n: int) -> tuple[float, float]:
    """A kernel of n multiply-adds per work item, launched and waited for: (wall, CPU time of this thread).
    A kernel the GPU finished before the wait began (a loaded host may not run this thread for a while)
    tells nothing about the wait: then again, longer."""
    d = r.d
    for _ in range(4):
        r.busy(r.buf, n, global_size=(1,), local_size=(64,), wait=False)
        t0, c0 = time.perf_counter(), time.thread_time()
        if d.timeline.value < d.timeline_value:
            d.synchronize()
            return time.perf_counter() - t0, time.thread_time() - c0
        d.synchronize()
        n *= 2
    pytest.fail("every kernel was done before its wait began")


def test_a_wait_sleeps_until_the_eop_interrupt(rig):
    d = rig.d
    before = d.irq.received
    wall, cpu = _busy_wait(rig, 6000)
    assert d.irq.received > before and d.irq.fallbacks == 0
    assert cpu < 0.2 * wall, f"a wait on the interrupt used {cpu:.3f} s of CPU in {wall:.3f} s"
    # the same wait polled (what a transport without an eventfd does) keeps the thread busy
    waits, d.irq = d.irq, None
    try:
        poll_wall, poll_cpu = _busy_wait(rig, 6000)
    finally:
        d.irq = waits
    assert poll_cpu > 3 * cpu, (poll_cpu, cpu)


def test_fence_interrupts_name_their_queue_and_engine(rig):
    d = rig.d
    # every fence asks for its interrupt: RELEASE_MEM INT_SEL 2 (gfx_v11_0_ring_emit_fence), an SDMA TRAP
    # after the fence (sdma_v6_0_ring_emit_fence)
    q = d.compute_queue()
    q.signal(d.timeline, 1)
    assert q.buf[2] >> 24 & 7 == 2
    c = d.copy_queue()
    c.signal(d.timeline, 1)
    assert len(c.buf) == len(_sdma_fence()) + 2 and list(c.buf[-2:]) == list(_sdma_trap())
    rig.spin(rig.flag, global_size=(1,), local_size=(32,), wait=False)
    with d._ih_lock:                      # the test reads the IH ring itself, as _ivs would
        deadline, ivs = time.perf_counter() + 10, []
        while not ivs and time.perf_counter() < deadline:
            assert d.irq.wait(deadline - time.perf_counter()), "no MSI for the launch's fence"
            ivs = [iv for iv in d.gpu.ih.poll() if irq.is_fence_interrupt(iv)]
    (iv,) = ivs
    assert isinstance(iv, IVEntry) and (iv.client, iv.source) == ("GRBM_CP", "CP_EOP_INTERRUPT")
    # gfx_v11_0_eop_irq: me = ring_id 3:2, pipe 1:0, queue 6:4
    assert (iv.ring_id >> 2 & 3, iv.ring_id & 3, iv.ring_id >> 4 & 7) == (d.compute.me, d.compute.pipe,
                                                                          d.compute.queue)
    d.synchronize()
    d.copyin(rig.a, bytes(range(256)) * 256)
    received = d.irq.received
    d.copy(rig.b, rig.a)                  # SDMA: woken by its trap
    assert d.copyout(rig.b) == bytes(range(256)) * 256
    assert d.irq.received > received and d.irq.fallbacks == 0


@pytest.mark.parametrize("omit", ["pipe interrupt", "INT_SEL"])
def test_a_missing_fence_interrupt_is_found_by_the_fallback_and_said(rig, monkeypatch, omit):
    d = rig.d
    if omit == "pipe interrupt":      # a driver that skipped gfx_v11_0_set_compute_eop_interrupt_state
        d.gc.reg(f"CP_ME1_PIPE{d.compute.pipe}_INT_CNTL").update(TIME_STAMP_INT_ENABLE=0)
    else:                             # fences that ask for no interrupt
        monkeypatch.setattr(queues, "_C_SIGNAL_INT", queues._C_SIGNAL)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wall, _ = _busy_wait(rig, 4000)     # runs across clock steps: the wait blocks
    lost = [w for w in seen if issubclass(w.category, irq.InterruptLost)]
    assert len(lost) == 1 and re.search(r"no interrupt in [\d.]+ s \(found by the fallback check\)", str(lost[0].message)), \
        (wall, d.irq.received, rig.fn.dev.msis_sent, [str(w.message) for w in seen])
    assert wall >= 0.2 and d.irq.fallbacks == 1     # the wave-check period, at the least


def test_the_stepped_simulator_polls_and_its_fences_ask_for_no_interrupt(dev):
    assert dev.irq is None
    assert dev.wait_mode.startswith("polling: the simulated GPU runs on the stepped clock")
    q = dev.compute_queue()
    q.signal(dev.timeline, 1)
    assert q.buf[2] >> 24 & 7 == 0
    c = dev.copy_queue()
    c.signal(dev.timeline, 1)
    assert len(c.buf) == len(_sdma_fence())


def _sdma_fence():
    b = sdma_packets.SDMABuilder()
    b.fence(0, 1, bits64=True)
    return b.buf


def _sdma_trap():
    b = sdma_packets.SDMABuilder()
    b.trap(0)
    return b.buf
