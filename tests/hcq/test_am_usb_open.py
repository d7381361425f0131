"""The hcq contract through the simulated bridge running the open firmware (docs/usb.md): TLPs by vendor
requests, DMA memory in 16 KiB SRAM slots pushed by its SRAM DMA (rings, kernarg arena and page tables in VRAM
instead: amdrv.placement), and copies in and out of VRAM through two SRAM windows that the GPU's SDMA empties and fills, completed by sentinels, fences and the bridge's
completion window (amdrv.bridge_copy)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import pcie
from amdrv.am import AMGPU
from amdrv.hcq import AMHCQDevice

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from pcie.usb.transport import OpenUSBFunction, open_function  # noqa: E402

RNG = np.random.default_rng(16)

_spec = importlib.util.spec_from_file_location("hcq_am_run_contract_open", Path(__file__).with_name("test_am_run.py"))
_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_run)
test_add_saxpy_local_reverse = _run.test_add_saxpy_local_reverse
test_graph_replay_with_changed_inputs = _run.test_graph_replay_with_changed_inputs
test_ordering_copy_kernel_copy_across_queues = _run.test_ordering_copy_kernel_copy_across_queues
test_fault_is_decoded_then_recover = _run.test_fault_is_decoded_then_recover
test_host_and_uncached_buffers = _run.test_host_and_uncached_buffers
# test_am_timeline: prog(...) submits through the ring's launch slots (RingSlots), copies through the bridge
_tspec = importlib.util.spec_from_file_location("hcq_am_timeline_open", Path(__file__).with_name("test_am_timeline.py"))
_timeline = importlib.util.module_from_spec(_tspec)
_tspec.loader.exec_module(_timeline)


def test_a_value_taken_and_never_submitted_blocks_no_wait(dev, kernel_corpus, monkeypatch):
    assert dev._ring_slots is not None
    _timeline._after_a_value_never_submitted(dev, kernel_corpus, monkeypatch, "synchronize")


@pytest.fixture
def dev(sim_bus, debian_firmware, monkeypatch):
    """A GPU left warm by a clean AM run over simulated PCIe, then opened through the open firmware."""
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv("DRIVERLESS_PUBLISH_S", "0")   # round-trip counts are the driver's own (amdrv.monitor)
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    backend = usb_bridge.backend("navi31", bus=sim_bus, firmware="open")
    fn = open_function(backend=backend)
    assert isinstance(fn, OpenUSBFunction) and type(fn.link).__name__ == "VendorLink"
    d = AMHCQDevice(AMGPU.open(fn), "am:sim:usb")
    d.bridge = backend.bridge
    assert not d.coherent and d.gpu.boot_report.kind == "warm"
    yield d
    d.close()


def test_copies_awkward_sizes_both_ways(dev):
    CHUNK = dev._bridge_copies().chunk                      # a copy-in chunk: one window's payload
    big = dev.alloc(2 * CHUNK + 40000)
    ref = bytearray(big.size)
    dev.copyin(big, ref)                                    # VRAM is not cleared by alloc
    for size, off in ((1, 0), (3, 4093), (4096, 5), (CHUNK - 1, 7), (CHUNK + 513, 333), (2 * CHUNK + 1, 1000)):
        data = RNG.integers(0, 256, size, dtype=np.uint8).tobytes()
        dev.copyin(big, data, offset=off)
        ref[off:off + size] = data
        assert dev.copyout(big, size, off) == data
    assert dev.copyout(big) == bytes(ref)
    host = dev.alloc(5000, host=True)                       # a host buffer's bytes come out the same way
    dev.copyin(host, b"h" * 5000)
    assert dev.copyout(host) == b"h" * 5000


def test_copy_round_trips_per_mib(dev):
    """One round trip per chunk each way (the copier's ring is built and pushed once per device; a chunk carries
    its descriptor words and doorbell). Everything else hcq keeps is in VRAM on this firmware (amdrv.placement)
    but the dummy pages, scratch the windows may overwrite: two windows of 16 slots (256 KiB), the whole SRAM
    (docs/usb.md, SRAM budget). Copy-in moves a whole window a round trip (its last dword is the sentinel),
    copy-out both but their last dwords and the go word: 64 and 33 round trips for 16 MiB, issue 16's 4 per MiB
    each way at most. Copy-in returns once the last chunk is in the bridge's SRAM;
    the copy-out behind it runs on the same queue. The first copy also maps the windows (page tables) and sets
    up the copier's queue once per device: left out here."""
    f = dev.gpu.dev.pci
    n = 16 << 20
    data = RNG.integers(0, 256, n, dtype=np.uint8).tobytes()
    buf = dev.alloc(n)
    dev.copyin(buf, data[:4096])
    c0 = f.counters.snapshot()
    dev.copyin(buf, data)
    rt_in = (f.counters - c0).round_trips
    c0 = f.counters.snapshot()
    assert dev.copyout(buf) == data
    rt_out = (f.counters - c0).round_trips
    print(f"16 MiB: copy-in {rt_in}, copy-out {rt_out} round trips")
    c = dev._bridge_copies()
    assert c.window_bytes == 16 * 0x4000 and c.chunk == c.window_bytes and c.out_chunk == 2 * c.window_bytes - 12
    assert rt_in == -(-n // c.chunk) == 64
    assert -(-n // c.out_chunk) == 33 <= rt_out <= 34     # the first chunk's descriptor words may need a batch more
    assert rt_in / 16 <= 4 and rt_out / 16 <= 4


def test_launch_round_trips(dev, kernel_corpus):
    """A launch: its kernargs in the ring next to its PM4 (amdrv.hcq.launch.RingSlots), one 0xF0 streamed write
    into VRAM (amdrv.placement), then the HDP flush and the doorbell: 2 round trips; a fence poll: 1."""
    f = dev.gpu.dev.pci
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
        assert launch == 2, launch
        assert 1 <= (f.counters - c1).round_trips <= 3
    assert np.array_equal(np.frombuffer(dev.copyout(a), np.float32), np.full(n, 16, np.float32))


def test_everything_fits_the_bridges_512_kib_sram(dev):
    """What hcq keeps in the bridge's SRAM (docs/usb.md, SRAM budget): nothing but the dummy pages, scratch
    pages in slot 0 the copy windows may overwrite; rings, kernarg arena, page tables, signals and the copier's
    words are VRAM (amdrv.placement). The copy windows take all 32 slots; a host buffer that finds the SRAM
    full takes them back (after the GPU is done with them) and the next copy gets smaller windows; a host
    buffer larger than the SRAM is an error that says so."""
    from pcie import PCIError
    f = dev.gpu.dev.pci
    assert f.sram_free_slots(over_scratch=True) == 32 and f.sram_free_slots() == 31
    assert f._scratch_used.count(True) == 2                              # the GMC's and the IH's dummy pages
    data = RNG.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    buf = dev.alloc(1 << 20)
    dev.copyin(buf, data)
    assert dev.copyout(buf) == data
    assert dev._bridge_copies().window_bytes == 16 * 0x4000 and f.sram_free_slots(over_scratch=True) == 0
    dev.copyin(buf, data[::-1])                     # in flight when the host buffer takes the windows back
    host = dev.alloc(64 << 10, host=True)
    assert dev._bridge_copies().region is None and f.sram_free_slots(over_scratch=True) == 28
    assert dev.copyout(buf) == data[::-1]
    assert dev._bridge_copies().window_bytes == 13 * 0x4000
    dev.copyin(host, data[:host.size])
    assert dev.copyout(host) == data[:host.size]
    with pytest.raises(PCIError, match="DMA buffer of 0x80000 bytes: the bridge.s SRAM holds 32 slots"):
        dev.alloc(512 << 10, host=True)                 # more than the SRAM: the windows given back do not help


def test_the_windows_take_what_is_free_at_the_first_copy(dev):
    """Host buffers allocated before the first copy leave less SRAM: the windows are smaller (more round trips
    per MiB, the copies still right)."""
    f = dev.gpu.dev.pci
    free = f.sram_free_slots(over_scratch=True)
    early = dev.alloc(6 * 0x4000, host=True)                      # 6 whole slots before the windows: slots 1-6
    data = RNG.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    buf = dev.alloc(1 << 20)
    dev.copyin(buf, data)
    assert dev.copyout(buf) == data
    assert dev._bridge_copies().window_bytes == (free - 7) // 2 * 0x4000     # slot 0 alone: the run is 7-31
    assert early.size == 6 * 0x4000


def test_copies_are_refused_when_the_sram_is_taken(dev):
    """Under one slot per window left: the copy says what to free instead of failing later."""
    from hcq import HCQError
    f = dev.gpu.dev.pci
    hog = dev.alloc((f.sram_free_slots() - 1) * 0x4000, host=True)  # slots 1-30: slots 0 and 31 left, apart
    buf = dev.alloc(4096)
    with pytest.raises(HCQError, match=r"two windows of at least one 16 KiB SRAM slot; 1 of "
                                       r"the 32 slots are free in one run .*free host buffers first"):
        dev.copyin(buf, b"x" * 4096)
    assert hog.size > 0


@pytest.mark.parametrize("hint", [True, False])
def test_a_host_buffer_the_gpu_writes_survives_a_neighbours_push(dev, monkeypatch, hint):
    """hcq allocates host buffers device_written (amdrv/hcq/device.py _map): behind the open firmware a push
    resends its whole 16 KiB slot from the host's view, so a small buffer the GPU wrote must not share a
    slot with one the host writes. Without the hint (hint=False) the host's write to b loses what SDMA
    wrote into a."""
    if not hint:
        f, orig = dev.gpu.dev.pci, dev.gpu.dev.pci.alloc_dma
        monkeypatch.setattr(f, "alloc_dma", lambda size, **kw: orig(size, **{**kw, "device_written": False}))
    slot = lambda buf: buf.mem.dma.bus_address() // 0x4000            # noqa: E731
    bufs = [dev.alloc(4096, host=True) for _ in range(5)]       # before the copy windows take the SRAM
    pairs = [(x, y) for x, y in zip(bufs, bufs[1:]) if slot(x) == slot(y)]   # 5 pages: 2 share unless hinted
    assert bool(pairs) != hint
    a, b = pairs[0] if pairs else bufs[:2]
    src = dev.alloc(4096)
    dev.copyin(src, b"GPU!" * 1024)
    dev.copy(a, src)                                   # the GPU writes a
    dev.copyin(b, b"host" * 1024)                      # the host writes b: a push of b's slot
    got = dev.copyout(a)
    assert (got == b"GPU!" * 1024) == hint, got[:8]


@pytest.mark.parametrize("flush", ["missing", "before the write"])
def test_rings_in_vram_need_the_hdp_flush(dev, kernel_corpus, monkeypatch, flush):
    """On the open firmware the rings and the kernarg arena are VRAM written through BAR0 (amdrv.placement), a
    launch's kernargs in the ring with its PM4 (RingSlots): without the HDP flush after a push, or with the flush
    sent before the write rather than after it, the CP reads what was there before and the launch never
    completes."""
    from amdrv import placement
    from hcq import HCQTimeout
    n = 256
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    a = dev.alloc(4 * n)
    dev.copyin(a, np.ones(n, np.float32))
    add(a, a, a, n, global_size=(1,), local_size=(256,), wait=True)
    assert isinstance(dev.compute.mem.dma, placement.VRAMBuffer) and isinstance(dev.arena.buf, placement.VRAMBuffer)
    push = placement.VRAMBuffer.push
    def early(self, offset=0, size=None, flush=True):
        self.gpu.nbio.hdp_flush()
        push(self, offset, size, flush=False)

    monkeypatch.setattr(placement.VRAMBuffer, "push", early if flush == "before the write" else
                        lambda self, offset=0, size=None, flush=True: push(self, offset, size, flush=False))
    dev.default_timeout = 0.5
    with pytest.raises(HCQTimeout):
        add(a, a, a, n, global_size=(1,), local_size=(256,), wait=True)
    monkeypatch.undo()
    dev.recover()                                    # the CP stuck on stale ring bytes: reset, then it runs again
    add(a, a, a, n, global_size=(1,), local_size=(256,), wait=True)


def _saxpy_laps(dev, kernel_corpus, launches: int = 40):
    """launches of saxpy, wait=False, each with its own alpha into one of 4 buffers: over two laps of the 8 KiB
    ring (18 a lap). Returns (round trips, laps, whether every buffer holds its launches' sum)."""
    f = dev.gpu.dev.pci
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    ys, x = [dev.alloc(4 * 64) for _ in range(4)], dev.alloc(4 * 64)
    dev.copyin(x, np.ones(64, np.float32))
    for y in ys:
        dev.copyin(y, np.zeros(64, np.float32))
    ring = dev.compute
    w0, c0 = ring.wptr, f.counters.snapshot()
    for i in range(launches):
        saxpy(ys[i % 4], x, float(i + 1), 64, global_size=(1,), local_size=(64,))
    rt, laps = (f.counters - c0).round_trips, (ring.wptr - w0) / ring.ring_dw
    dev.synchronize()
    ok = all(np.all(np.frombuffer(dev.copyout(y), np.float32) == sum(range(j + 1, launches + 1, 4)))
             for j, y in enumerate(ys))
    return rt, laps, ok


def test_kernargs_in_the_ring_across_laps(dev, kernel_corpus):
    """Launches whose kernargs ride in the ring (RingSlots) over two laps of it: every launch reads its own
    arguments, a launch that would cross the ring's end starts at its beginning instead (the end skipped by a
    NOP: kernargs are one contiguous slot), and the laps cost a timeline read each (the launches a lap back are
    done before their slots are written again) and nothing more: 2 round trips a launch and 1 a lap."""
    rt, laps, ok = _saxpy_laps(dev, kernel_corpus)
    assert ok and laps > 2
    assert rt <= 2 * 40 + int(laps) + 1, rt
    assert all(v <= dev.timeline_value for _, _, v in dev._ring_slots.live)


def test_kernargs_in_the_ring_need_the_skipped_end(dev, kernel_corpus, monkeypatch):
    """Without skipping the ring's end a launch that crosses it is written where the CP does not look for its
    slot: the kernel reads another launch's bytes as its kernargs (a fault, a hang or wrong sums)."""
    from amdrv.queue import ComputeQueue
    from hcq import HCQError
    monkeypatch.setattr(ComputeQueue, "skip_to_start", lambda self: None)
    dev.default_timeout = 1.0
    try:
        _, _, ok = _saxpy_laps(dev, kernel_corpus, 24)
    except HCQError:                  # here: a page fault, the kernel using ring bytes as buffer pointers
        ok = False
    assert not ok


def test_kernargs_in_the_ring_wait_for_the_lap_before(dev, kernel_corpus, monkeypatch):
    """The CP reading past a launch says nothing about its waves, which read its kernargs while they run (the
    simulated CP finishes a dispatch before reading on, so no wrong sums show here): a dword of the ring where a
    launch's slot submission lies is written again, by a launch or by a queue built through the hcq API, only
    once the host has seen that launch's timeline value. Checked at each write into the ring; without
    RingSlots._retire it fails."""
    from amdrv.hcq.launch import RingSlots
    ring, seen, slots = dev.compute, dev.timeline.mem, []
    rdw = ring.ring_dw

    def check(lo, hi):
        late = [v for a, b, v in slots if a < hi - rdw and b > lo - rdw and v > seen[0]]
        assert not late, f"ring dwords [{lo}, {hi}) written while launches {late} a lap back were not seen done"

    submit, skip, slot_submit = type(ring).submit, type(ring).skip_to_start, RingSlots.submit

    def checked_submit(self, dwords, flush=True):
        check(self.wptr, self.wptr + len(dwords))
        submit(self, dwords, flush)

    def checked_skip(self):
        check(self.wptr, self.wptr + 1)
        skip(self)

    def recorded(self, *a):
        slot_submit(self, *a)
        slots.append(self.live[-1])

    monkeypatch.setattr(type(ring), "submit", checked_submit)
    monkeypatch.setattr(type(ring), "skip_to_start", checked_skip)
    monkeypatch.setattr(RingSlots, "submit", recorded)
    _, laps, ok = _saxpy_laps(dev, kernel_corpus)
    assert ok and laps > 2
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    a = dev.alloc(4 * 64)
    dev.copyin(a, np.zeros(64, np.float32))

    def mixed():     # launches with their slots in the ring, then API queues over them: a lap and more
        for _ in range(12):
            add(a, a, a, 64, global_size=(1,), local_size=(64,))
        for _ in range(30):
            q = dev.compute_queue()
            q.exec(add, (a, a, a, 64), (1,), (64,))
            q.signal(dev.timeline, dev.next_timeline())
            q.submit()
        dev.synchronize()

    mixed()
    monkeypatch.setattr(RingSlots, "_retire", lambda self, lo, hi: None)
    with pytest.raises(AssertionError, match="a lap back were not seen done"):
        mixed()


def test_a_launch_too_large_for_the_ring_goes_to_the_arena(dev, kernel_corpus, monkeypatch):
    """A launch larger than half the ring (RingSlots.fits: a large kernarg block) takes a slot in the kernarg
    arena instead: its kernargs and ring dwords are then two writes (3 round trips), the results the same."""
    f = dev.gpu.dev.pci
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    slots = dev._ring_slots
    assert slots.fits(add.handle)
    monkeypatch.setattr(slots, "max_dw", add.handle.slot // 4 + len(add.handle.template))    # under what it needs
    assert not slots.fits(add.handle)
    a = dev.alloc(4 * 256)
    dev.copyin(a, np.ones(256, np.float32))
    add(a, a, a, 256, global_size=(1,), local_size=(256,), wait=True)
    arena = dev.arena.at
    c0 = f.counters.snapshot()
    add(a, a, a, 256, global_size=(1,), local_size=(256,))
    assert (f.counters - c0).round_trips == 3 and dev.arena.at > arena
    dev.synchronize()
    assert np.array_equal(np.frombuffer(dev.copyout(a), np.float32), np.full(256, 4, np.float32))
