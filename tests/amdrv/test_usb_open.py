"""The driver's transport for the bridge running the open firmware (pcie.usb: detect_firmware, VendorLink,
OpenUSBFunction) and its bulk copies (amdrv.bridge_copy), against the simulated bridge
(gpusim.usb_open_firmware). Negative tests: each driver step the copies depend on, left out, fails."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import pcie
from pcie.interface import PCIError

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from amdrv import bridge_copy  # noqa: E402
from pcie.usb import link as usb_link  # noqa: E402
from pcie.usb import protocol as p  # noqa: E402
from pcie.usb.link import BridgeError, VendorLink, detect_firmware  # noqa: E402
from pcie.usb.transport import OpenUSBFunction, USBFunction, open_function  # noqa: E402

RNG = np.random.default_rng(5)


@pytest.fixture
def fn(sim_bus):
    f = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware="open"))
    f.bridge = f.link.dev._ctx.backend.bridge
    yield f
    f.close()


def test_the_firmware_is_told_by_ids_and_interface_class(sim_bus):
    stock = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus))
    assert type(stock) is USBFunction and stock.firmware == "stock" and type(stock.link).__name__ == "UASLink"
    stock.close()

    class Intf:
        def __init__(self, cls):
            self.bInterfaceClass = cls

    class Dev:
        def __init__(self, ids, classes):
            self.idVendor, self.idProduct = ids
            self._cfg = [[Intf(c) for c in classes]]

        def __iter__(self):
            return iter(self._cfg)

    assert detect_firmware(Dev((0xADD1, 0x0001), [0x08])) == "open"          # the open firmware's ids
    assert detect_firmware(Dev((0x174C, 0x2464), [0xFF])) == "open"          # re-flashed, ids kept: vendor class
    assert detect_firmware(Dev((0x174C, 0x2464), [0x08, 0x08])) == "stock"   # mass storage
    assert p.is_bridge_id(0xADD1, 0x0001)


def test_tlps_by_vendor_requests(fn):
    assert isinstance(fn, OpenUSBFunction) and isinstance(fn.link, VendorLink) and fn.gpu_bus == 4
    regs = fn.bar(5)
    scratch = 4 * 0xC040
    t = fn.counters.round_trips
    for i in range(40):
        regs.write32(scratch, i)
    assert fn.counters.round_trips == t                            # posted: queued
    assert regs.read32(scratch) == 39
    assert fn.counters.round_trips - t == 2                       # 41 requests, 32 a round trip
    t = fn.counters.round_trips
    assert regs.read32(scratch) == 39 and fn.counters.round_trips - t == 1
    vram = fn.bar(0)
    for off, size in ((0, 1), (1, 2), (3, 5), (0x1001, 31)):
        data = bytes((off * 7 + i * 13) & 0xFF for i in range(size))
        vram.write(off, data)
        assert vram.read(off, size) == data
    assert fn.config_read(0, 4) == 0x744C1002


def test_slot_buffers_pushed_by_sram_dma_and_read_back_through_xdata(fn):
    br = fn.bridge
    rb = fn.alloc_dma(4096, readback=True)
    assert rb.bus_address() == 0x200000
    buf = fn.alloc_dma(3 * 4096)
    assert buf.bus_address() == 0x200000 + p.SRAM_SLOT                # slot 0 keeps the read-back page
    assert fn.alloc_dma(1).bus_address() == 0x200000 + p.SRAM_SLOT + 3 * 4096     # small ones share a slot
    assert fn.alloc_dma(1, device_written=True).bus_address() == 0x200000 + 2 * p.SRAM_SLOT   # one of its own
    buf.view[:] = bytes(i & 0xFF for i in range(3 * 4096))
    t = fn.counters.round_trips
    buf.push(0x2000, 100)                                           # from the slot's start to the sector past it
    fn.flush()
    assert fn.counters.round_trips - t == 1
    at = buf.bus_address() - 0x200000
    assert bytes(br.sram[at:at + 0x2200]) == bytes(buf.view[:0x2200]) and br.sram[at + 0x2200] == 0
    buf.view[8] = 0xEE
    buf.view[0x2FF0] = 0xDD
    buf.push(8, 1)
    buf.push(0x2FF0, 1)                                             # the same buffer's next push: one request
    t = fn.counters.round_trips
    fn.flush()
    assert fn.counters.round_trips - t == 1 and br.sram[at + 8] == 0xEE and br.sram[at + 0x2FF0] == 0xDD
    br.sram[0:600] = bytes((i * 3) & 0xFF for i in range(600))       # what the GPU wrote in the read-back page
    t = fn.counters.round_trips
    rb.pull(0, 600)
    assert bytes(rb.view[:600]) == bytes(br.sram[:600]) and fn.counters.round_trips - t == 1   # two 0xE4s
    rb.view[:200] = b"\x42" * 200
    rb.push(0, 200)                                                 # > 64 bytes: by SRAM DMA into slot 0
    fn.flush()
    assert bytes(br.sram[:200]) == b"\x42" * 200
    with pytest.raises(PCIError, match="slots"):
        fn.alloc_dma(256 * p.SRAM_SLOT)


def test_small_buffers_share_a_slot_and_a_push_resends_its_neighbours(fn):
    """0xF2 starts at a 16 KiB slot, so a push of a small buffer sends its slot from the start: the host's one
    view of the SRAM supplies the neighbours' bytes (a per-buffer view would zero them). What the device wrote
    into a neighbour is lost that way, so device_written buffers get a slot of their own and keep it."""
    br = fn.bridge
    a, b = fn.alloc_dma(4096), fn.alloc_dma(4096)
    assert b.bus_address() - a.bus_address() == 4096 and a.bus_address() % p.SRAM_SLOT == 0
    at = a.bus_address() - 0x200000
    a.view[:4] = b"AAAA"
    a.push(0, 4)
    b.view[:4] = b"BBBB"
    b.push(0, 4)                                                    # from the slot's start: a's page again
    fn.flush()
    assert bytes(br.sram[at:at + 4]) == b"AAAA" and bytes(br.sram[at + 4096:at + 4100]) == b"BBBB"
    br.sram[at:at + 4] = b"GPU!"                                    # the device writes a's page
    b.push(0, 4)
    fn.flush()
    assert bytes(br.sram[at:at + 4]) == b"AAAA"                     # resent from the host's view
    mine = fn.alloc_dma(4096, device_written=True)
    assert mine.bus_address() % p.SRAM_SLOT == 0 and mine.bus_address() - 0x200000 >= at + p.SRAM_SLOT
    m = mine.bus_address() - 0x200000
    br.sram[m:m + 4] = b"GPU!"
    c = fn.alloc_dma(4096)                                          # not in mine's slot
    assert c.bus_address() // p.SRAM_SLOT != mine.bus_address() // p.SRAM_SLOT
    c.push()
    a.push()
    fn.flush()
    assert bytes(br.sram[m:m + 4]) == b"GPU!"
    a.free()
    b.free()
    c.free()
    assert fn.alloc_dma(p.SRAM_SLOT).bus_address() - 0x200000 == at    # the slot whole again once empty


def test_the_sram_is_full_at_512_kib(fn):
    """32 slots of 16 KiB, slot 0 the read-back page's: a buffer that does not fit is an error naming the
    bridge, the size asked, what is left and what to do; freeing makes room again."""
    with pytest.raises(PCIError, match=r"usb:.*DMA buffer of 0x80000 bytes: the bridge's SRAM holds 32 slots of "
                                       r"16 KiB, slot 0 kept for read-back, 496 KiB free .*allocate less, or VRAM"):
        fn.alloc_dma(32 * p.SRAM_SLOT)
    big = fn.alloc_dma(30 * p.SRAM_SLOT)
    small = fn.alloc_dma(4096)
    with pytest.raises(PCIError, match=r"no room for a DMA buffer of 0x4000 bytes \(16 KiB contiguous\) in the "
                                       r"bridge's 512 KiB SRAM .*: 12 KiB left.*free DMA buffers"):
        fn.alloc_dma(p.SRAM_SLOT)
    assert fn.sram_left() == 12 << 10 and fn.sram_free_slots() == 0
    fn.alloc_dma(4096)                                              # a page still fits beside the small one
    big.free()
    assert fn.sram_free_slots() == 30
    small.free()


def test_a_control_request_after_bulk_data_waits_for_it(fn, monkeypatch):
    """The link ends a round trip after bulk data: a push then a read of the same bytes reads what was
    pushed. Sent as one batch (the host orders neither pipe), the read runs before the data land."""
    rb = fn.alloc_dma(4096, readback=True)
    rb.view[:512] = b"\x5A" * 512
    rb.push(0, 512)
    rb.pull(0, 512)
    assert bytes(rb.view[:512]) == b"\x5A" * 512
    monkeypatch.setattr(VendorLink, "execute", lambda self, items: self._batch(list(items)) if items else [])
    rb.view[:512] = b"\xA5" * 512
    rb.push(0, 512)
    rb.pull(0, 512)
    assert bytes(rb.view[:512]) == b"\x5A" * 512                     # stale: the read ran first


def test_without_asynchronous_transfers_each_is_a_round_trip(sim_bus, monkeypatch):
    """A pyusb backend with no submit_async (pyusb's libusb1 backend): the same requests one by one, each
    waited for; the bytes land the same."""
    from gpusim import usb_open_firmware
    monkeypatch.setattr(usb_open_firmware.OpenFirmwareBackend, "submit_async", None)
    f = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware="open"))
    try:
        regs = f.bar(5)
        t = f.counters.round_trips
        regs.write32(4 * 0xC040, 0xABCD)
        assert regs.read32(4 * 0xC040) == 0xABCD and f.counters.round_trips - t == 3   # write, read, report
        buf = f.alloc_dma(4096)
        buf.view[:4] = b"sync"
        t = f.counters.round_trips
        buf.push(0, 4)
        f.flush()
        at = buf.bus_address() - 0x200000
        assert f.counters.round_trips - t == 2 and bytes(f.link.dev._ctx.backend.bridge.sram[at:at + 4]) == b"sync"
    finally:
        f.close()


def test_every_round_trip_gives_the_gpu_the_same_time(sim_bus):
    """A round trip is a round trip: a synchronous control transfer, a synchronous bulk OUT and IN, and an
    asynchronous batch each give the GPU the link's round-trip latency (usb_bridge.USB3_GEN2.round_trip_s on
    its 1 us clock), plus a step or two for the request and the bytes; before, a control transfer ran half of
    it and a bulk transfer none."""
    from gpusim import usb_open_firmware as of
    be = usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware="open")
    dev = be.bridge.dev
    assert dev.stepped
    rtt = int(usb_bridge.USB3_GEN2.round_trip_s * 1e6)

    def steps(transfer):
        s0 = dev.steps
        transfer()
        return dev.steps - s0

    ctrl_in = 0xC0
    got = {"control": steps(lambda: be.ctrl_transfer(be, ctrl_in, of.REQ_XDATA_READ, 0xF000, 0, bytearray(4), 100))}
    be.fw.control(0x40, of.REQ_SRAM_DMA, 1, 1, b"", 0)           # one sector into slot 1
    got["bulk out"] = steps(lambda: be.bulk_write(be, of.EP_OUT, 0, bytes(512), 100))
    be.fw.control(0x40, of.REQ_SRAM_DMA, 0x8001, 1, b"", 0)      # one sector of slot 1 to the host
    be.fw._completion()                 # the GPU's release write
    got["bulk in"] = steps(lambda: be.bulk_read(be, of.EP_IN, 0, bytearray(512), 100))
    got["batch"] = steps(lambda: be.submit_async(be, [of.Transfer(0, bytearray(4), ctrl_in, of.REQ_XDATA_READ, 0xF000)],
                                                 100))
    assert all(rtt <= n <= rtt + 3 for n in got.values()), got


def test_cold_boot_through_the_open_firmware(sim_bus, debian_firmware, monkeypatch):
    """A cold boot (PSP, SMU, firmware staged in SRAM slots) through the open firmware: 829 round trips
    measured with the discovery cache filled, ~980 without (UAS on the stock firmware: ~3 200)."""
    from amdrv.am import AMGPU
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    f = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus, small_bar=True,
                                                 firmware="open"))
    t = f.counters.round_trips
    gpu = AMGPU.open(f, cold=True)
    try:
        assert gpu.boot_report.kind == "cold" and f.counters.round_trips - t <= 1100
    finally:
        gpu.fini()


def test_sram_dma_requests_stay_within_what_0xf2_names(fn):
    from pcie.usb.transport import sram_dma_request
    buf = fn.alloc_dma(p.SRAM_SLOT)
    c = sram_dma_request(buf, 3 * 512 + 1, to_host=True)
    assert (c.request_type, c.request, c.value, c.index) == (0x40, 0xF2, 0x8000 | 4, 1 | (1 << 8))
    with pytest.raises(PCIError, match="0xF2"):
        sram_dma_request(buf, 256 * p.SRAM_SLOT)


# -- bulk copies (amdrv.bridge_copy) through hcq, and what breaks them ------------------------------

@pytest.fixture
def dev(sim_bus, debian_firmware, monkeypatch):
    from amdrv.am import AMGPU
    from amdrv.hcq import AMHCQDevice
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    d = AMHCQDevice(AMGPU.open(open_function(backend=usb_bridge.backend("navi31", bus=sim_bus, firmware="open"))),
                    "am:sim:usb")
    d.default_timeout = 1.0
    yield d
    d.close()


def _data(n: int) -> bytes:
    return RNG.integers(0, 256, n, dtype=np.uint8).tobytes()


MARK = 0xDEADBEEF


def _marked(dev, monkeypatch):
    """Every marker the GPU writes is MARK from here on (two small copies put it in both windows)."""
    monkeypatch.setattr(bridge_copy.BridgeCopier, "_marker", staticmethod(lambda seq: MARK))
    buf = dev.alloc(4 << 20)
    dev.copyin(buf, _data(4096))
    dev.copyin(buf, _data(4096))
    assert dev._bridge_copies().markers == [MARK, MARK]
    return buf


@pytest.mark.parametrize("size", [1 << 20, (1 << 20) + 3, 3 * 0x3C000 - 2])
def test_chunks_ending_in_the_marker_get_a_pad_dword(dev, monkeypatch, size):
    """A chunk's last dword is its sentinel: data whose every dword is the marker standing in the windows
    (each chunk's last dword equal to it, odd sizes too) goes 4 bytes a chunk shorter with a pad dword that
    is not the marker, and comes back whole."""
    buf = _marked(dev, monkeypatch)
    data = (struct.pack("<I", MARK) * (size // 4 + 1))[:size]
    dev.copyin(buf, data)
    assert dev.copyout(buf, size) == data


def test_copies_need_the_sentinel_to_differ_from_the_marker(dev, monkeypatch):
    """Sent without that pad dword, such a chunk looks to the GPU as if it never came: the wait for the copy
    says so (HCQTimeout), as it does for any chunk whose sentinel does not change."""
    from hcq import HCQError
    buf = _marked(dev, monkeypatch)
    monkeypatch.setattr(bridge_copy, "collides", lambda data, marker: False)
    with pytest.raises(HCQError):
        dev.copyin(buf, struct.pack("<I", MARK) * (1 << 18))


def test_copies_need_the_gpu_to_set_the_marker(dev, monkeypatch):
    """After copying a chunk the GPU writes the next marker into the window's last dword; without that write the
    next chunk's wait passes on the old chunk's bytes, before the new ones land: wrong bytes in VRAM."""
    from amdrv import sdma_packets
    buf = dev.alloc(2 << 20)
    dev.copyin(buf, _data(4096))

    def no_marker(self, k, dst, at, n, marker, seq, window_va=None):
        va = (window_va or self.window_va)[k]
        s = sdma_packets.SDMABuilder()
        s.poll_mem(va + self.sentinel, marker, function=sdma_packets.POLL_NE, interval=1)
        s.copy(dst, va + at, n)
        s.fence(self.fence.va, seq)                               # where the marker write was
        s.fence(self.fence.va, seq)
        return s.buf.tobytes()
    monkeypatch.setattr(bridge_copy.BridgeCopier, "_in_desc", no_marker)
    data = _data(2 << 20)
    dev.copyin(buf, data)
    monkeypatch.undo()
    assert dev.copyout(buf) != data


def test_the_sentinel_must_be_the_chunks_last_dword(dev, monkeypatch):
    """The SRAM DMA lands a chunk in address order while the GPU runs (gpusim.usb_open_firmware): a copier that
    waits for the chunk's first dword instead of its last copies a window whose end still holds the chunk
    before: wrong bytes in VRAM."""
    from amdrv import sdma_packets
    buf = dev.alloc(2 << 20)
    dev.copyin(buf, _data(4096))
    data = _data(2 << 20)

    def first_dword(self, k, dst, at, n, marker, seq, window_va=None):
        va = (window_va or self.window_va)[k]
        s = sdma_packets.SDMABuilder()
        s.poll_mem(va + at, struct.unpack_from("<I", data, dst - buf.va)[0], function=sdma_packets.POLL_EQ,
                   interval=1)
        s.copy(dst, va + at, n)
        s.fence(va + self.sentinel, self._marker(seq))
        s.fence(self.fence.va, seq)
        return s.buf.tobytes()
    monkeypatch.setattr(bridge_copy.BridgeCopier, "_in_desc", first_dword)
    dev.copyin(buf, data)
    monkeypatch.undo()
    assert dev.copyout(buf) != data


def test_a_fault_mid_copy_is_reported_and_recover_sets_the_markers_again(dev):
    """A copy whose destination runs off its buffer into unmapped memory after the first chunk: the copier's
    SDMA faults (the hub answers with the default page, so the chunks after it go nowhere useful), and the next
    wait reports the fault (HCQFault: copyin returns once the data are in the SRAM). recover() resets the
    copier's queue (the windows' markers are written again, since a chunk may have landed uncopied) and copies
    work again."""
    from amdrv.ip.gmc import SYSTEM_VA
    from hcq import HCQFault
    buf = dev.alloc(1 << 20)
    dev.copyin(buf, _data(4096))
    c = dev._bridge_copies()
    hole = SYSTEM_VA + (1 << 40)                                        # nothing mapped there
    with pytest.raises(HCQFault, match="fault"):
        c.copy_in(hole, memoryview(_data(3 * c.chunk)))
        dev.synchronize()
    dev.recover()
    assert c.markers is None
    data = _data(1 << 20)
    dev.copyin(buf, data)
    assert dev.copyout(buf) == data


def test_copy_out_needs_the_release_write(dev):
    """The GPU's write into the bridge's completion window releases each chunk: written elsewhere, the bulk
    IN never gets its data and the transfer is reported stalled."""
    buf = dev.alloc(1 << 20)
    data = _data(1 << 20)
    dev.copyin(buf, data)
    assert dev.copyout(buf) == data
    c = dev._bridge_copies()
    c.release = c.map                                                # a window page instead of 0x822000
    with pytest.raises(BridgeError, match="stalled.*the bridge was reset"):   # and answers again
        dev.copyout(buf)
    assert dev.gpu.dev.pci.bar(5).read32(4 * 0xC040) is not None


def _copier_doorbell(dev):
    """Whether a queued request is one of the copier's doorbell writes (0xF0 single memory writes to its
    doorbell's dwords in BAR2)."""
    import struct as _s
    q = dev._bridge_copies().queue
    at = q.doorbell.address + q.doorbell_index * 4

    def test(c):
        if getattr(c, "request", None) != p.REQ_PCIE or c.request_type & 0x80 or c.index & 3 != p.PCIE_SINGLE:
            return False
        lo, hi, _ = _s.unpack("<III", c.data)
        return (hi << 32 | lo) in (at, at + 4)
    return test


def _blocked_sdma(dev, monkeypatch, release_at: int):
    """The GPU is held back: the copier's doorbells (0xF0 requests) are kept from the bridge until the
    release_at-th batch of the copy, which sends the last of them (as a late doorbell would): until then
    the copier's SDMA queue sees no entry and copies nothing."""
    f = dev.gpu.dev.pci
    door = _copier_doorbell(dev)
    calls, held, real = [0], [], f.execute

    def execute(items):
        calls[0] += 1
        if calls[0] < release_at:
            held.extend(c for c in f._pending if door(c))
            f._pending[:] = [c for c in f._pending if not door(c)]
        elif calls[0] == release_at:
            f._pending.extend(held[-2:])
        return real(items)
    monkeypatch.setattr(f, "execute", execute)


def test_copy_in_waits_for_the_window_it_refills(dev, monkeypatch):
    """With the GPU held back (its SDMA queue busy), the host reads the fence again before it refills a
    window (more round trips, the right bytes); refilling without that check overwrites chunks the GPU has
    not copied yet."""
    buf = dev.alloc(2 << 20)
    dev.copyin(buf, _data(4096))
    f = dev.gpu.dev.pci
    data = _data(2 << 20)
    _blocked_sdma(dev, monkeypatch, release_at=6)
    t = f.counters.round_trips
    dev.copyin(buf, data)
    assert f.counters.round_trips - t > 8 + 3                        # fence reads beyond one per chunk
    monkeypatch.undo()
    assert dev.copyout(buf) == data
    monkeypatch.setattr(bridge_copy.BridgeCopier, "_window_free", lambda self, k, done: done)
    other = _data(2 << 20)
    _blocked_sdma(dev, monkeypatch, release_at=6)
    dev.copyin(buf, other)
    monkeypatch.undo()
    assert dev.copyout(buf) != other


def _copy_in_held(dev, monkeypatch, buf, data):
    """copyin with the copier's doorbells kept from the bridge (the GPU copies nothing yet); the last of them
    goes out right behind the next submission's doorbell on the device's own SDMA queue."""
    f = dev.gpu.dev.pci
    door = _copier_doorbell(dev)
    held, real = [], f.execute

    def execute(items):
        held.extend(c for c in f._pending if door(c))
        f._pending[:] = [c for c in f._pending if not door(c)]
        return real(items)
    monkeypatch.setattr(f, "execute", execute)
    dev.copyin(buf, data)
    monkeypatch.setattr(f, "execute", real)
    submit = dev.sdma.submit

    def late(dwords, flush=True):
        submit(dwords, flush=False)
        f._pending.extend(held[-2:])
        if flush:
            f.flush()
    monkeypatch.setattr(dev.sdma, "submit", late)
    return held


def test_work_after_a_copy_in_waits_for_its_last_chunk_on_the_gpu(dev, monkeypatch):
    """copyin returns once its last chunk is in the bridge's SRAM, before the GPU has copied it: a copy on the
    device's SDMA queue right after waits for the copier's fence on the GPU (and synchronize() for it on the
    host). Without that wait the copy reads what the buffer held before."""
    from amdrv.hcq import AMHCQDevice
    from hcq import HCQTimeout
    n = 2 * dev._bridge_copies().chunk                                 # two chunks: no window refilled
    src, dst = dev.alloc(n), dev.alloc(n)
    old, new = _data(n), _data(n)
    dev.copyin(src, old)
    held = _copy_in_held(dev, monkeypatch, src, new)
    assert held and dev._bridge_copies().pending() is not None
    with pytest.raises(HCQTimeout):                                    # the host side: synchronize() reads it
        dev.synchronize()
    dev.copy(dst, src)
    monkeypatch.undo()
    assert dev.copyout(dst) == new
    # the same without the wait on the GPU: the copy runs before the copier's last chunk
    dev.copyin(src, old)
    monkeypatch.setattr(AMHCQDevice, "_behind_bridge_copy", lambda self, q: q.buf)
    _copy_in_held(dev, monkeypatch, src, new)
    dev.copy(dst, src)
    monkeypatch.undo()
    assert dev.copyout(dst) == old


class _Fn:
    def __init__(self, fn):
        self.fn, self.restype, self.argtypes = fn, None, None

    def __call__(self, *a):
        return self.fn(*a)


class _ScriptedLibusb:
    """A TEST DOUBLE of libusb-1.0's asynchronous API answering control transfers (setup packet in the first
    8 bytes of the buffer, data after it, actual_length counting data only, as libusb.h describes) and bulk
    transfers; records the order of submission."""

    def __init__(self, answers: dict):
        self.answers, self.live, self.pending, self.order = answers, {}, [], []

    def __getitem__(self, name):
        return _Fn(getattr(self, name[len("libusb_"):]))

    def alloc_transfer(self, iso):
        import ctypes
        from pcie.usb import streams
        t = streams.LibusbTransfer()
        self.live[ctypes.addressof(t)] = t
        return ctypes.pointer(t)

    def free_transfer(self, p):
        import ctypes
        del self.live[ctypes.addressof(p.contents)]

    def submit_transfer(self, p):
        import ctypes
        x = p.contents
        self.order.append((x.type, x.endpoint, ctypes.string_at(x.buffer, min(8, x.length))))
        self.pending.append(p)
        return 0

    def cancel_transfer(self, p):
        return 0

    def handle_events_timeout_completed(self, ctx, tv, completed):
        import ctypes
        for p in list(self.pending):
            x = p.contents
            self.pending.remove(p)
            if x.type == 0:                                          # control
                req_type, req = ctypes.string_at(x.buffer, 2)
                data = self.answers.get(req, b"")
                if req_type & 0x80:
                    ctypes.memmove(x.buffer + 8, data, len(data))
                    x.actual_length = len(data)
                else:
                    x.actual_length = x.length - 8
            else:
                x.actual_length = x.length
            x.status = 0
            x.callback(p)
        return 0

    def transfer_set_stream_id(self, p, sid):
        pass

    def alloc_streams(self, *a):
        return 0

    def free_streams(self, *a):
        return 0


def test_libusb_batches_vendor_requests_and_bulk_data():
    """On pyusb's libusb backend the open firmware's link sends each batch through libusb's asynchronous
    API (pcie.usb.streams.LibusbAsync): control transfers with their setup packets, in order, the bulk data
    with them, one round trip; a request after bulk data goes in the next one."""
    from pcie.interface import AccessCounters
    from pcie.usb import streams
    from pcie.usb.link import Bulk, Control, LinkCounters
    lib = _ScriptedLibusb({0xE4: b"fence-ok"})
    link = object.__new__(VendorLink)
    link.dev, link.access, link.timeout, link.name, link.stats = None, AccessCounters(), 1000, "test", LinkCounters()
    link._async, link.engine = None, streams.LibusbAsync(lib, None, 0x1234)
    got = link.execute([Control(0xC0, 0xE4, 0xF000, 0, length=8), Control(0x40, 0xF2, 8, 1 | (1 << 8)),
                        Bulk(0x02, b"x" * 4096), Control(0x40, 0xE5, 0xF010, 7)])
    assert got == [b"fence-ok", None, None, None] and link.access.round_trips == 2
    assert [(t, ep) for t, ep, _ in lib.order] == [(0, 0), (0, 0), (2, 0x02), (0, 0)]
    assert lib.order[0][2] == bytes.fromhex("c0e400f000000800")          # bmRequestType, bRequest, wValue...
    assert lib.order[1][2] == bytes.fromhex("40f2080001010000") and not lib.live
