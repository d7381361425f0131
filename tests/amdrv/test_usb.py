"""pcie.usb: the PCI function behind an ASM24xx bridge, against a TEST DOUBLE of the bridge.

FakeBridge below is a test double, not the simulator: a pyusb backend that implements only what the
driver's protocol needs, from the same public facts (Bulk-Only Transport; vendor SCSI 0xE4/0xE5 on XDATA;
WRITE(16) into XDATA 0xF000; the TLP engine registers at 0xB210-0xB296), with one bridge at bus 0 and a
Navi31-like endpoint behind it. gpusim.usb_bridge (written independently) replaces it once it lands.
"""
from __future__ import annotations

import errno
import struct
from types import SimpleNamespace

import pytest
import usb.backend
import usb.core

from pcie.usb import protocol as p
from pcie.usb.link import BridgeError, BridgeNotFound, TransferStalled
from pcie.usb.transport import GPUNotAnswering, LinkDown, open_function, parse_device_string
from pcie.interface import PCIError
from pcie.lock import DeviceLock

OUT_EP, IN_EP = 0x02, 0x81


def _desc(**kw):
    return SimpleNamespace(extra_descriptors=[], **kw)


class FakePCIe:
    """Bus 0: a bridge (type 1 header); its secondary bus: a GPU endpoint with BAR0 (64-bit prefetchable
    256 MiB), BAR2 (64-bit prefetchable 2 MiB), BAR4 (I/O), BAR5 (32-bit 1 MiB)."""
    SIZES = {0: 256 << 20, 2: 2 << 20, 4: 256, 5: 1 << 20}

    def __init__(self, gpu_present=True):
        self.bridge, self.gpu = bytearray(4096), bytearray(4096)
        struct.pack_into("<HH", self.bridge, 0, 0x1B21, 0x2463)
        self.bridge[0x0E], self.bridge[0x0B] = 0x01, 0x06
        struct.pack_into("<HH", self.gpu, 0, 0x1002, 0x744C)
        self.gpu[0x0E], self.gpu[0x0B] = 0x80, 0x03
        struct.pack_into("<IIIIII", self.gpu, 0x10, 0xC, 0, 0xC, 0, 0x1, 0x0)
        self.gpu_present = gpu_present
        self.mem: dict[int, int] = {}

    def _bar_of(self, address):
        if not self.gpu[0x04] & 0x2:
            return None
        for i, size in self.SIZES.items():
            if i == 4:
                continue
            base = struct.unpack_from("<I", self.gpu, 0x10 + 4 * i)[0] & ~0xF
            if base <= address < base + size:
                return i
        return None

    def config(self, bus, reg, be, write, value):
        if bus == 0:
            space = self.bridge
        elif bus == self.bridge[0x19] and self.gpu_present:
            space = self.gpu
        else:
            return 1, 0                       # unsupported request
        old = struct.unpack_from("<I", space, reg)[0]
        if write:
            new = old
            for lane in range(4):
                if be >> lane & 1:
                    new = (new & ~(0xFF << 8 * lane)) | (value & (0xFF << 8 * lane))
            if space is self.gpu and 0x10 <= reg < 0x28:
                i = (reg - 0x10) // 4
                if new == 0xFFFFFFFF:         # sizing
                    if i in self.SIZES:
                        new = ((~(self.SIZES[i] - 1)) & 0xFFFFFFFF) | (old & 0xF)
                    elif i - 1 in (0, 2):
                        new = 0xFFFFFFFF
                    else:
                        new = 0
                elif i in self.SIZES:
                    new = (new & ~(self.SIZES[i] - 1) & ~0xF) | (old & 0xF)
            struct.pack_into("<I", space, reg, new & 0xFFFFFFFF)
            return 0, 0
        return 0, old

    def memory(self, address, be, write, value):
        if self._bar_of(address) is None:
            return 1, 0
        old = self.mem.get(address, 0)
        if write:
            for lane in range(4):
                if be >> lane & 1:
                    old = (old & ~(0xFF << 8 * lane)) | (value & (0xFF << 8 * lane))
            self.mem[address] = old
            return 0, 0
        return 0, old


class FakeBridge(usb.backend.IBackend):
    """TEST DOUBLE of an ASM24xx bridge behind a pyusb backend (see module docstring)."""

    def __init__(self, pcie=None, link_up=True, gpu_silent=False, stall_after=None, bus=3, address=7):
        self.pcie, self.link_up, self.gpu_silent = pcie or FakePCIe(), link_up, gpu_silent
        self.stall_after, self.commands = stall_after, 0
        self.xdata = bytearray(0x20000)
        self.sram = bytearray(p.WINDOW_SIZE)     # GPU bus 0x200000; its first 4 KiB is XDATA 0xF000
        self.bus, self.address = bus, address
        self._cbw = None
        self._pending_in: bytes | None = None
        self._csw: bytes | None = None
        self.log: list[bytes] = []

    # descriptors
    def enumerate_devices(self):
        return [self]

    def get_device_descriptor(self, dev):
        return _desc(bLength=18, bDescriptorType=1, bcdUSB=0x320, bDeviceClass=0, bDeviceSubClass=0,
                     bDeviceProtocol=0, bMaxPacketSize0=9, idVendor=0x174C, idProduct=0x2463, bcdDevice=0x100,
                     iManufacturer=0, iProduct=0, iSerialNumber=0, bNumConfigurations=1, address=self.address,
                     bus=self.bus, port_number=1, port_numbers=(1,), speed=None)

    def get_configuration_descriptor(self, dev, config):
        return _desc(bLength=9, bDescriptorType=2, wTotalLength=32, bNumInterfaces=1, bConfigurationValue=1,
                     iConfiguration=0, bmAttributes=0x80, bMaxPower=0)

    def get_interface_descriptor(self, dev, intf, alt, config):
        if intf or alt:
            raise IndexError
        return _desc(bLength=9, bDescriptorType=4, bInterfaceNumber=0, bAlternateSetting=0, bNumEndpoints=2,
                     bInterfaceClass=8, bInterfaceSubClass=6, bInterfaceProtocol=0x50, iInterface=0)

    def get_endpoint_descriptor(self, dev, ep, intf, alt, config):
        return _desc(bLength=7, bDescriptorType=5, bEndpointAddress=(IN_EP, OUT_EP)[ep], bmAttributes=2,
                     wMaxPacketSize=1024, bInterval=0, bRefresh=0, bSynchAddress=0)

    def open_device(self, dev):
        return self

    def close_device(self, h):
        pass

    def get_configuration(self, h):
        return 1

    def set_configuration(self, h, v):
        pass

    def claim_interface(self, h, i):
        pass

    def release_interface(self, h, i):
        pass

    def set_interface_altsetting(self, h, i, a):
        pass

    def is_kernel_driver_active(self, h, i):
        return False

    def clear_halt(self, h, ep):
        self._cbw = self._pending_in = self._csw = None

    # Bulk-Only Transport
    def bulk_write(self, h, ep, intf, data, timeout):
        data = bytes(data)
        if self._cbw is None:
            sig, tag, length, flags, lun, cblen, cdb = struct.unpack("<IIIBBB16s", data)
            assert sig == p.CBW_SIGNATURE and len(data) == 31
            self.commands += 1
            if self.stall_after is not None and self.commands > self.stall_after:
                raise usb.core.USBTimeoutError("Operation timed out", -7, errno.ETIMEDOUT)
            self._cbw = (tag, length, flags, cdb[:cblen])
            self.log.append(cdb[:cblen])
            if not (length and not flags & 0x80):
                self._run(None)
        else:
            self._run(data)
        return len(data)

    def bulk_read(self, h, ep, intf, buff, timeout):
        if self._pending_in is not None:
            out, self._pending_in = self._pending_in, None
        else:
            out, self._csw = self._csw, None
            self._cbw = None
        buff[:len(out)] = type(buff)("B", out)
        return len(out)

    def _run(self, data_out):
        tag, length, flags, cdb = self._cbw
        status = 0
        if cdb[0] == p.XDATA_READ:
            a = ((cdb[2] << 16 | cdb[3] << 8 | cdb[4]) & p.XDATA_MASK)
            assert cdb[2] & 0xFE == 0x50
            mem, a = (self.sram, a - 0xF000) if 0xF000 <= a < 0x10000 else (self.xdata, a)
            self._pending_in = bytes(mem[a:a + cdb[1]])
        elif cdb[0] == p.XDATA_WRITE:
            self._xwrite((cdb[2] << 16 | cdb[3] << 8 | cdb[4]) & p.XDATA_MASK, cdb[1])
        elif cdb[0] == p.SCSI_WRITE16:
            lba = struct.unpack_from(">Q", cdb, 2)[0]
            self.sram[lba * 512:lba * 512 + len(data_out)] = data_out
        else:
            status = 1
        self._csw = struct.pack("<IIIB", p.CSW_SIGNATURE, tag, 0, status)

    def _xwrite(self, a, v):
        if a == p.TLP_STATUS:
            self.xdata[a] &= ~v
            return
        self.xdata[a] = v
        if a == p.TLP_KICK and v == p.TLP_KICK_VALUE:
            self._tlp()

    def _tlp(self):
        x = self.xdata
        fmt, be = x[p.TLP_FMT_TYPE], x[p.TLP_BYTE_ENABLE]
        address = struct.unpack_from(">I", x, p.TLP_ADDRESS)[0]
        value = struct.unpack_from(">I", x, p.TLP_DATA)[0]
        x[p.TLP_STATUS] = (x[p.TLP_STATUS] & ~0x3) | p.TLP_STATUS_SENT
        write = bool(fmt & 0x40)
        if not self.link_up or (self.gpu_silent and (fmt & 1 or fmt & 0xBF == 0)):
            x[p.TLP_STATUS] |= p.TLP_STATUS_ERROR
            return
        if fmt & 0xBE == p.CFGRD0:
            st, val = self.pcie.config(address >> 24, address & 0xFFC, be, write, value)
            count = 4
        else:
            st, val = self.pcie.memory(address, be, write, value)
            count = bin(be).count("1")
        if write and fmt & 0xDF == p.MWR32:
            return
        struct.pack_into(">I", x, p.TLP_DATA, val)
        struct.pack_into(">H", x, p.TLP_COMPLETION, st << 13 | (0 if st else count))
        x[p.TLP_STATUS] |= p.TLP_STATUS_DONE


@pytest.fixture(autouse=True)
def _private_locks(tmp_path, monkeypatch):
    """Bridge locks in a folder of this test's own (every fake bridge is 3-7, a simulated one 1-(2 + slot))."""
    from pcie.usb import transport
    monkeypatch.setattr(transport, "DeviceLock", lambda address, directory=None: DeviceLock(address, tmp_path))


@pytest.fixture
def bridge():
    return FakeBridge()


@pytest.fixture
def fn(bridge):
    f = open_function(backend=bridge)
    yield f
    f.close()


def test_enumerates_and_reads_gpu_ids(fn, bridge):
    assert (fn.vendor_id, fn.device_id) == (0x1002, 0x744C)
    assert fn.address == "usb:3-7" and fn.gpu_bus == 1
    assert fn.config_read(0x0B, 1) == 0x03
    # the bridge forwards bus 1, the BARs sit below 4 GiB, largest first, memory decode on
    assert bridge.pcie.bridge[0x19] == 1
    assert fn.bar(0).address == 0x1000_0000 and fn.bar(0).size == 256 << 20
    assert fn.bar(2).address == 0x2000_0000 and fn.bar(5).address == 0x2020_0000
    assert fn.config_read(0x04, 2) & 0x2
    with pytest.raises(PCIError, match="BAR4"):
        fn.bar(4)


def test_register_reads_and_writes(fn, bridge):
    regs = fn.bar(5)
    regs.write32(0x100, 0xDEADBEEF)
    regs.write32(0x104, 0x01234567)
    assert regs.read32(0x100) == 0xDEADBEEF and regs.read32(0x104) == 0x01234567
    assert bridge.pcie.mem[0x2020_0100] == 0xDEADBEEF
    regs.write64(0x200, 0x1122334455667788)
    assert regs.read64(0x200) == 0x1122334455667788
    assert fn.counters.mmio_reads == 4 and fn.counters.mmio_writes == 4


def test_posted_writes_are_batched_until_a_read(fn, bridge):
    regs = fn.bar(5)
    before, n = fn.counters.round_trips, len(bridge.log)
    regs.write32(0x10, 1)
    regs.write32(0x14, 2)
    assert fn.counters.round_trips == before and len(bridge.log) == n       # nothing sent yet
    assert 0x2020_0010 not in bridge.pcie.mem
    regs.flush()
    assert bridge.pcie.mem[0x2020_0010] == 1 and bridge.pcie.mem[0x2020_0014] == 2
    writes = fn.counters.round_trips - before
    # a dword write: changed data/address bytes, the kick and the status clear; never more than 10
    assert writes <= 2 * 10
    regs.write32(0x10, 3)
    t = fn.counters.round_trips
    assert regs.read32(0x10) == 3                                            # the read flushed the write first
    read_cost = fn.counters.round_trips - t
    assert read_cost <= 16


def test_awkward_sizes_through_bar0_both_ways(fn):
    vram = fn.bar(0)
    for offset, size in ((0, 1), (1, 2), (3, 5), (5, 13), (0x1001, 31)):
        data = bytes((offset * 7 + i * 13) & 0xFF for i in range(size))
        vram.write(offset, data)
        assert vram.read(offset, size) == data
    vram.write(2, b"\xAA")
    assert vram.read(0, 4)[2] == 0xAA


def test_dma_window_pages_both_ways(fn, bridge):
    buf = fn.alloc_dma(1000, readback=True)                     # the one page the host reads back
    assert buf.bus_address(0) == 0x200000 and buf.bus_address(999) == 0x200000 + 999
    assert not buf.coherent
    buf.view[:7] = b"payload"
    t = fn.counters.round_trips
    buf.push()
    assert fn.counters.round_trips == t                         # queued like posted writes
    fn.flush()
    assert bridge.sram[:7] == b"payload"
    assert fn.counters.round_trips - t == 1 + 5                 # WRITE(16) and the firmware's reset bytes
    bridge.sram[0x100:0x105] = b"fromG"                           # what the GPU wrote there
    buf.pull(0x100, 5)
    assert bytes(buf.view[0x100:0x105]) == b"fromG"
    with pytest.raises(PCIError, match="in use"):
        fn.alloc_dma(16, readback=True)
    with pytest.raises(PCIError, match="first page"):
        fn.alloc_dma(0x1001, readback=True)
    big = fn.alloc_dma(0x3001)                                    # four pages, never the read-back one
    assert big.bus_address(0) == 0x201000 and big.bus_address(0x2000) == 0x203000
    big.view[0x1FFF:0x2001] = b"xy"
    big.view[0x3000] = 0x5A
    t = fn.counters.round_trips
    big.push(0x1FFF, 2)                                           # the two pages the range touches, in one
    fn.flush()                                                    # WRITE(16) (up to 64 KiB each)
    assert fn.counters.round_trips - t == 1 + 5
    assert bridge.sram[0x2FFF:0x3001] == b"xy" and bridge.sram[0x4000] == 0
    big.push()
    fn.flush()
    assert bridge.sram[0x4000] == 0x5A
    with pytest.raises(PCIError, match="outside"):
        big.push(0x3000, 2)
    with pytest.raises(PCIError, match="first 4 KiB"):
        big.pull()
    with pytest.raises(PCIError, match="SRAM holds 512 KiB.*492 KiB free"):       # the bridge's SRAM: 512 KiB
        fn.alloc_dma((512 << 10) + 1)
    with pytest.raises(PCIError, match=r"0x7f000 bytes \(508 KiB contiguous\).*492 KiB left.*free DMA buffers"):
        fn.alloc_dma((512 << 10) - 0x1000)                            # fits the SRAM, not what is left
    buf.free()
    with pytest.raises(PCIError, match="after free"):
        buf.view
    assert fn.alloc_dma(64).bus_address() == 0x205000             # plain buffers skip page 0
    assert fn.alloc_dma(64, readback=True).bus_address() == 0x200000


def test_stall_mid_transfer_is_an_error_not_a_hang(bridge):
    f = open_function(backend=bridge)
    bridge.stall_after = bridge.commands + 3
    with pytest.raises(TransferStalled, match="timed out .*stalled"):
        f.bar(0).read(0, 64)
    f.close()


def test_no_bridge():
    class Empty(FakeBridge):
        def enumerate_devices(self):
            return []
    with pytest.raises(BridgeNotFound, match="no ASM24xx"):
        open_function(backend=Empty())
    with pytest.raises(BridgeNotFound, match="no bridge at 9-9; bridges: 3-7"):
        open_function("9-9", backend=FakeBridge())


def test_link_down():
    with pytest.raises(LinkDown, match="link behind the bridge is down"):
        open_function(backend=FakeBridge(link_up=False))


def test_gpu_absent_or_silent():
    with pytest.raises(GPUNotAnswering, match="nothing at bus 1"):
        open_function(backend=FakeBridge(pcie=FakePCIe(gpu_present=False)))
    with pytest.raises(GPUNotAnswering, match="does not answer"):
        open_function(backend=FakeBridge(gpu_silent=True))


def test_one_driver_per_bridge(fn, bridge):
    with pytest.raises(PCIError, match="busy"):
        open_function(backend=bridge)


def test_device_strings():
    assert parse_device_string("am:usb") == ("usb", ("",))
    assert parse_device_string("am:usb:003-007") == ("usb", ("3-7",))
    for bad in ("am:usb:3", "am:usb:x-1", "am:sim", "am:usb:1-2:3"):
        with pytest.raises(PCIError):
            parse_device_string(bad)


# -- against the simulated bridge (gpusim.usb_bridge, written independently from the same facts)

@pytest.fixture
def sim(sim_bus, monkeypatch):
    """The simulated bridge over Bulk-Only Transport, whose counts these tests spell out command by command
    (tests/pcie/test_usb_uas.py covers the pipelining link)."""
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    monkeypatch.setenv("DRIVERLESS_USB_LINK", "bot")
    return usb_bridge.backend("navi31", fresh=True, bus=sim_bus)


def test_sim_bridge_enumeration_and_counts_agree(sim):
    f = open_function(backend=sim)
    try:
        assert (f.vendor_id, f.device_id) == (0x1002, 0x744C)
        assert f.gpu_bus == 4                                   # ASM2461 ports and the Navi31 switch ports
        assert f.bar(0).size == 256 << 20                       # resizable BAR shrunk: 3-dword TLPs only
        assert f.counters.round_trips <= 600                    # the whole open, init writes included
        assert sim.bridge.counters.round_trips == f.counters.round_trips   # both sides count the same
    finally:
        f.close()


def test_a_driver_that_takes_the_sram_for_larger_is_refused(sim, monkeypatch):
    """The simulated bridge's SRAM is 512 KiB: a transport that believed the old 6 MiB (its page map, its
    WRITE(16)s) places a buffer past it, and the push is refused by the bridge (CHECK CONDITION, LBA out of
    range) instead of landing somewhere."""
    from pcie.usb import protocol
    monkeypatch.setattr(protocol, "WINDOW_SIZE", 6 << 20)
    f = open_function(backend=sim)
    try:
        buf = f.alloc_dma(1 << 20)
        assert buf.bus_address(buf.size - 1) >= 0x200000 + (512 << 10)
        buf.push()
        with pytest.raises(BridgeError, match=r"SCSI 0x8a .* failed: CSW status 1"):
            f.flush()
    finally:
        f.close()


def test_sim_bridge_registers_batching_and_awkward_copies(sim):
    f = open_function(backend=sim)
    regs, vram = f.bar(5), f.bar(0)
    scratch = 4 * 0xC040                                          # a scratch register (any R/W dword works)
    regs.write32(scratch, 0x13572468)
    regs.flush()
    t = f.counters.round_trips
    regs.write32(scratch, 0xCAFEF00D)
    assert f.counters.round_trips == t                           # queued
    assert regs.read32(scratch) == 0xCAFEF00D                    # flushed before the read
    # 6 for the write (4 data bytes, kick, status clear), 5 for the read (type, kick, clear, then the status
    # and the completion, read in one batch with the request; over BOT one round trip each)
    assert f.counters.round_trips - t == 11
    for offset, size in ((1, 3), (6, 11), (0x1FFF, 5)):
        data = bytes(range(size))
        vram.write(offset, data)
        assert vram.read(offset, size) == data
    buf = f.alloc_dma(333, readback=True)
    buf.view[:] = bytes(i & 0xFF for i in range(333))
    buf.push()
    buf.view[:] = bytes(333)
    buf.pull(1, 331)                                             # read back what the bridge holds
    assert bytes(buf.view) == b"\0" + bytes(i & 0xFF for i in range(1, 332)) + b"\0"
    second = f.alloc_dma(4096)
    second.view[:4] = b"\1\2\3\4"
    second.push()                                                 # WRITE(16) at LBA 8
    f.flush()
    assert sim.bridge.sram[0x1000:0x1004] == b"\1\2\3\4"
    f.close()


def test_sim_bridge_failures(sim_bus, sim):
    f = open_function(backend=sim)
    sim.bridge.inject("stall", after=2)
    with pytest.raises(TransferStalled):
        f.bar(5).read32(0)
    f.close()
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    down = usb_bridge.backend("navi31", fresh=True, bus=sim_bus)
    down.bridge.inject("link_down")
    with pytest.raises(LinkDown):
        open_function(backend=down)
    silent = usb_bridge.backend("navi31", fresh=True, bus=sim_bus)
    silent.bridge.inject("gpu_silent")
    with pytest.raises(GPUNotAnswering):
        open_function(backend=silent)
    unplugged = usb_bridge.backend("navi31", fresh=True, bus=sim_bus)
    g = open_function(backend=unplugged)
    unplugged.bridge.inject("drop")
    with pytest.raises(BridgeError, match="gone"):
        g.bar(5).read32(0)
    g.close()


def test_bench_usb_json(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    import json
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "bench" / "usb.py"
    out = subprocess.run([sys.executable, str(script), "--kib", "1", "--sizes", "1", "--json"], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    res = json.loads(out)
    uas, bot, vendor = res["links"]["uas"], res["links"]["bot"], res["links"]["open"]
    assert (uas["link"], bot["link"], vendor["link"]) == ("UASLink", "BOTLink", "VendorLink")
    assert bot["mmio_read_round_trips"] <= 5 and bot["mmio_write_round_trips"] <= 7
    assert uas["mmio_read_round_trips"] == 1 and uas["mmio_write_round_trips"] < 1
    assert 5 * 256 <= bot["to_vram"]["round_trips"] <= 7 * 256 + 8   # <= 4 data bytes, address, kick, clear
    for r in (uas, bot):
        assert r["window_push_4k"]["payload_efficiency"] > 0.9
        assert r["warm_boot"]["kind"] == "warm"
        assert r["warm_boot"]["steps"]["gmc"] < 1_000                 # the root directory is not rewritten
        assert sum(r["warm_boot"]["steps"].values()) == r["warm_boot"]["round_trips"]
        assert r["hcq"]["synchronize_round_trips"] == 1               # one read of the signals
        assert r["hcq"]["copies"]["1 MiB"]["copyin"]["payload_efficiency"] > 0.9
    assert uas["warm_boot"]["round_trips"] <= 500 and uas["hcq"]["launch_round_trips"] <= 2   # the aims
    assert uas["hcq"]["copies"]["1 MiB"]["copyin"]["round_trips_per_mib"] <= 20   # WRITE(16) of 64 KiB: 9
    assert bot["hcq"]["launch_round_trips"] <= 24
    # 4 chunks of 256 KiB, the ring, the last fence (and the fence poll a copy-out before it left to the next)
    ours = vendor["hcq"]["copies"]["1 MiB"]
    assert ours["copyin"]["round_trips"] <= 7 and ours["copyout"]["round_trips"] <= 5
    assert vendor["warm_boot"]["kind"] == "warm" and vendor["hcq"]["launch_round_trips"] <= 3


def test_warm_boot_through_the_bridge(sim_bus, debian_firmware, monkeypatch):
    """A GPU left by a clean AM run (cold-booted here over simulated PCIe, small BAR) boots warm through the
    bridge. Its round trips (118 measured over UAS, 132 before the independent reads were batched, with the GPU
    running a round trip's latency each (gpusim.usb_bridge; 141 at a clock step per command): no 4 KiB root
    directory rewritten, the
    discovery binary taken from the host cache the cold boot filled, by the key that run recorded; each
    register read one batch with the writes before it) are asserted with a little margin;
    the issue's aim is 500 (docs/usb.md)."""
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    import pcie
    from amdrv.am import AMGPU
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    f = open_function(backend=usb_bridge.backend("navi31", bus=sim_bus))
    before = f.counters.snapshot()
    gpu = AMGPU.open(f)
    try:
        assert gpu.boot_report.kind == "warm"
        spent = f.counters - before
        # 180 measured before issue 14, 183 since: the warm boot sends DisallowGfxOff before it reads GC
        # (fini leaves GFXOFF allowed) and programs the THM alert (a read-modify-write), as upstream's load
        # 144 since the run's records (discovery key, SMU versions and top clocks in DRIVER_SCRATCH_6..11) and
        # batched boot-state reads (189 before; tests/amdrv/test_usb_open_costs.py)
        assert type(f.link).__name__ == "UASLink" and spent.round_trips <= 121   # 118 measured
        assert spent.bulk_write_bytes <= 8                      # nothing block-sized rewritten through BAR0
        print(f"warm boot through the bridge: {spent.round_trips} round trips, {spent}")
    finally:
        gpu.fini()
