"""The hcq contract through the simulated USB bridge: the same kernels, graphs, faults and recovery as
test_am_run.py, on a GPU whose DMA memory is the bridge's SRAM window (not coherent: pushed and pulled),
whose signals sit in the one page the host reads back, and whose copy-out bounces through that page. Plus
the round trips a launch and a fence poll cost (docs/usb.md)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import hcq
import pcie
from amdrv.am import AMGPU
from amdrv.hcq import SIGNAL_AREA, SIGNAL_BYTES, AMHCQDevice

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from pcie.usb.transport import open_function  # noqa: E402

RNG = np.random.default_rng(11)

# test_am_run's tests, collected here again with this module's `dev`: the same contract over USB.
_spec = importlib.util.spec_from_file_location("hcq_am_run_contract", Path(__file__).with_name("test_am_run.py"))
_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_run)
test_add_saxpy_local_reverse = _run.test_add_saxpy_local_reverse
test_matmul_tiled_2d = _run.test_matmul_tiled_2d
test_reduce_sum_and_atomics = _run.test_reduce_sum_and_atomics
test_grid3d_dispatch_packet_sizes = _run.test_grid3d_dispatch_packet_sizes
test_gpu_copy_within_device = _run.test_gpu_copy_within_device
test_ordering_copy_kernel_copy_across_queues = _run.test_ordering_copy_kernel_copy_across_queues
test_graph_replay_with_changed_inputs = _run.test_graph_replay_with_changed_inputs
test_timestamps_monotonic = _run.test_timestamps_monotonic
test_fault_is_decoded_then_recover = _run.test_fault_is_decoded_then_recover
test_graph_larger_than_the_ring = _run.test_graph_larger_than_the_ring
test_host_and_uncached_buffers = _run.test_host_and_uncached_buffers
test_a_built_queue_keeps_its_kernargs_across_arena_wraps = _run.test_a_built_queue_keeps_its_kernargs_across_arena_wraps
# test_am_faults: a fault found after its fence through the IH write-back in the read-back page
_fspec = importlib.util.spec_from_file_location("hcq_am_faults_contract", Path(__file__).with_name("test_am_faults.py"))
_faults = importlib.util.module_from_spec(_fspec)
_fspec.loader.exec_module(_faults)
test_the_queue_runs_on_past_a_fault = _faults.test_the_queue_runs_on_past_a_fault
# test_am_timeline: copy-out bounces through the read-back page (bridge_copy.bounce_out), with its own fence
_tspec = importlib.util.spec_from_file_location("hcq_am_timeline_contract", Path(__file__).with_name("test_am_timeline.py"))
_timeline = importlib.util.module_from_spec(_tspec)
_tspec.loader.exec_module(_timeline)


@pytest.mark.parametrize("wait", ["copyout", "the launch arena's wrap"])
def test_a_value_taken_and_never_submitted_blocks_no_wait(dev, kernel_corpus, monkeypatch, wait):
    _timeline._after_a_value_never_submitted(dev, kernel_corpus, monkeypatch, wait)


@pytest.fixture
def dev(sim_bus, debian_firmware, monkeypatch):
    """A GPU left warm by a clean AM run over simulated PCIe, then opened through the simulated bridge."""
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv("DRIVERLESS_PUBLISH_S", "0")   # round-trip counts are the driver's own (amdrv.monitor)
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    backend = usb_bridge.backend("navi31", bus=sim_bus)
    d = AMHCQDevice(AMGPU.open(open_function(backend=backend)), "am:sim:usb")
    d.bridge = backend.bridge
    assert not d.coherent
    yield d
    d.close()


def test_hang_times_out_then_recover(dev, kernel_corpus, monkeypatch):
    # test_am_run reaches the simulated GPU as pci.dev; behind the bridge it is the bridge's GPU
    monkeypatch.setattr(dev.gpu.dev.pci, "dev", dev.bridge.dev, raising=False)
    _run.test_hang_times_out_then_recover(dev, kernel_corpus)


def test_copies_awkward_sizes_both_ways(dev):
    big = dev.alloc(40000)
    ref = bytearray(big.size)
    for size, off in ((1, 0), (1, 7), (3, 4093), (3072, 0), (3073, 1), (4096, 5), (12289, 333), (20000, 19999)):
        data = RNG.integers(0, 256, size, dtype=np.uint8).tobytes()
        dev.copyin(big, data, offset=off)
        ref[off:off + size] = data
        assert dev.copyout(big, size, off) == data
    assert dev.copyout(big) == bytes(ref)


def test_launch_and_fence_round_trips(dev, kernel_corpus):
    """A launch is its kernargs and ring dwords (one WRITE(16) of a window page each, with the firmware's
    bookkeeping writes) and the doorbell (two posted dword TLPs), sent at submit as one batch of about 22
    commands: 2 round trips at 16 commands each over UAS (the issue's aim). A fence poll is one read of the
    signals in use: 1 round trip, no register read."""
    f = dev.gpu.dev.pci
    assert type(f.link).__name__ == "UASLink"
    n = 256
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    a = dev.alloc(4 * n)
    dev.copyin(a, np.ones(n, np.float32))
    add(a, a, a, n, global_size=(1,), local_size=(256,), wait=True)
    for _ in range(3):
        c0 = f.counters.snapshot()
        add(a, a, a, n, global_size=(1,), local_size=(256,))
        launch = (f.counters - c0).round_trips
        c1 = f.counters.snapshot()
        dev.synchronize()
        polls = (f.counters - c1)
        assert launch <= 2, launch
        assert 1 <= polls.round_trips <= 3 and polls.mmio_reads == 0, polls
    assert np.array_equal(np.frombuffer(dev.copyout(a), np.float32), np.full(n, 16, np.float32))


def test_ring_wraps_through_the_window(dev, kernel_corpus):
    """More launches than the 64 KiB ring holds: the dwords that wrap are pushed from the ring's start, and
    the ring is found full by reading the engine's rptr register (its write-back does not read back)."""
    n = 64
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    a = dev.alloc(4 * n)
    dev.copyin(a, np.zeros(n, np.float32))
    one = dev.alloc(4 * n)
    dev.copyin(one, np.ones(n, np.float32))
    ring = dev.compute
    reads = []
    hw_rptr = ring._hw_rptr
    ring._hw_rptr = lambda: reads.append(1) or hw_rptr()
    start = ring.wptr
    launches = 0
    while ring.wptr - start < 2 * ring.ring_dw:
        add(a, a, one, n, global_size=(1,), local_size=(64,))
        launches += 1
    dev.synchronize()
    assert 1 <= len(reads) <= 4                 # once per lap or so, not per launch
    assert np.array_equal(np.frombuffer(dev.copyout(a), np.float32), np.full(n, launches, np.float32))


def test_signals_live_in_the_read_back_page(dev):
    first = dev._signal_pages[0][0]
    assert first.bus_address() == 0x200000                  # the bridge's XDATA 0xF000 window
    s = dev.new_signal(5)
    assert s.value == 5
    s.value = 9                                             # sent byte-exact: neighbours keep their values
    assert dev.timeline.value == dev.timeline_value and s.value == 9
    left = len(dev._free_signals)
    got = [dev.new_signal() for _ in range(left)]
    assert len(got) == left and SIGNAL_AREA // SIGNAL_BYTES == 64
    with pytest.raises(hcq.HCQError, match="out of signals.*one page"):
        dev.new_signal()


def test_gpus_behind_bridges_do_not_share_host_memory(sim_bus, dev, debian_firmware):
    other = hcq.open("am:sim", bus=sim_bus, fresh=True)
    try:
        a, b = dev.alloc(64), other.alloc(64)
        with pytest.raises(hcq.HCQError, match="USB bridge.*copyout"):
            other.copy(b, a)
    finally:
        other.close()


def test_copy_out_pipelines_the_read_back_page(dev):
    """Stock firmware copy-out: one round trip per 3060-byte piece (the piece and its done/start words read,
    then the next go written, in one ordered batch of 15 commands), plus the program's submission and the
    last poll: ~345 round trips per MiB, against the 1 025 of a submit-and-poll per piece."""
    from amdrv import bridge_copy
    f = dev.gpu.dev.pci
    n = 256 << 10
    buf = dev.alloc(n)
    data = RNG.integers(0, 256, n, dtype=np.uint8).tobytes()
    dev.copyin(buf, data)
    c0 = f.counters.snapshot()
    assert dev.copyout(buf) == data
    rt = (f.counters - c0).round_trips
    pieces = -(-n // bridge_copy.PIECE)
    assert pieces <= rt <= pieces + 6, rt


def test_copy_out_needs_the_go_word(dev, monkeypatch):
    """Each piece waits for the host's go word: without it the GPU copies nothing and the copy-out reports
    the hang. Sent before the reads of the piece (not after), the done/start bracket still tells which piece
    the page holds: the right bytes."""
    import hcq
    f = dev.gpu.dev.pci
    n = 16 << 10
    buf = dev.alloc(n)
    data = RNG.integers(0, 256, n, dtype=np.uint8).tobytes()
    dev.copyin(buf, data)
    real = f.read_then_write

    def go_first(reads, writes):
        for a, d in writes:
            f.queue_xdata(a, d)
        return real(reads, [])
    monkeypatch.setattr(f, "read_then_write", go_first)
    assert dev.copyout(buf) == data
    monkeypatch.setattr(f, "read_then_write", lambda reads, writes: real(reads, []))
    monkeypatch.setattr(f, "queue_xdata", lambda a, d: None)
    dev.default_timeout = 0.5
    with pytest.raises(hcq.HCQTimeout, match="piece 1 of"):
        dev.copyout(buf)
    monkeypatch.undo()
    dev.recover()


def test_an_sdma_wait_that_gives_up_fails_at_usb_time_scales(dev, monkeypatch):
    """The bridge's round trip (usb_bridge.USB3_GEN2.round_trip_s, 100 us) runs the GPU's clock that long, so
    the copy-out's SDMA waits about a round trip for each go word the host raises. A driver whose POLL_REGMEM
    gives up after 64 retries of 1 us (upstream waits with RETRY_COUNT 0xFFF, forever: sdma_v6_0_ring_emit_
    reg_wait) hangs its queue at USB time scales; with no link latency (a clock step per round trip, the old
    model) the same driver passes."""
    import dataclasses

    from amdrv.bridge_copy import PIECE
    from amdrv.sdma_packets import SDMABuilder
    from hcq import HCQTimeout
    big = dev.alloc(3 * PIECE)
    data = RNG.integers(0, 256, big.size, dtype=np.uint8).tobytes()
    dev.copyin(big, data)
    poll_mem = SDMABuilder.poll_mem
    monkeypatch.setattr(SDMABuilder, "poll_mem", lambda self, *a, **k: poll_mem(self, *a, **{**k, "retry": 64}))
    with monkeypatch.context() as m:
        m.setattr(usb_bridge, "USB3_GEN2", dataclasses.replace(usb_bridge.USB3_GEN2, round_trip_s=1e-6))
        assert dev.copyout(big) == data
    assert not any("retries" in str(e) for e in dev.bridge.dev.errors)
    dev.default_timeout = 0.5
    with pytest.raises(HCQTimeout, match="copy-out through the USB bridge"):
        dev.copyout(big)
    assert any("SDMA0 gfx ring hung" in str(e) and "no match after 64 retries" in str(e) for e in dev.bridge.dev.errors)
    monkeypatch.undo()
    dev.recover()
    assert dev.copyout(big) == data
