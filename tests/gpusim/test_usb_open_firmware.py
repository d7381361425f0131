"""The simulated ASM2464PD with the open replacement firmware, driven by hand through pyusb.

The requests are written out here from the firmware's source (tinygrad/asm2464pd-firmware handmade/src/main.c,
usb.h; README.md; pcie/test_sram_verify.py), not taken from the model: ids ADD1:0001 and a vendor-class
interface with bulk 0x81/0x02; 0xE4 (IN, wValue address, up to 512 bytes on USB 3, 64 on USB 2) and 0xE5
(OUT, wValue address, wIndex low byte value); 0xF0 OUT with 12 bytes (address low, address high, value,
little-endian), wValue fmt/type | byte enables << 8, wIndex mode 0 single / 1 stream write / 2 stream read;
0xF0 IN 8 bytes (data, completion header, 0xB284, result 0 / 1 / 0xFF); 0xF2 SRAM DMA (wValue sectors | bit
15 IN, wIndex first 16 KiB slot | slots << 8) whose IN direction waits for the GPU's write at PCIe 0x822000;
0xF3 PCIe power.
"""
from __future__ import annotations

import errno
import struct

import pytest
import usb.core

from gpusim import usb_bridge
from gpusim.usb_open_firmware import Transfer

GPU_BUS = 4
SRAM_PCI, SLOT = 0x200000, 0x4000
BAR0, BAR5 = 0xE0000000, 0xF0200000
OUT, IN = 0x40, 0xC0


class Host:
    def __init__(self, dev):
        self.dev = dev
        dev.set_configuration()

    def xr(self, addr: int, n: int) -> bytes:
        return bytes(self.dev.ctrl_transfer(IN, 0xE4, addr, 0, n))

    def xw(self, addr: int, value: int) -> None:
        self.dev.ctrl_transfer(OUT, 0xE5, addr, value, None)

    def tlp(self, fmt: int, addr: int, value: int = 0, be: int = 0xF) -> tuple[int, int, int] | None:
        """One TLP (mode 0); a non-posted one returns (result, completion status, data)."""
        self.dev.ctrl_transfer(OUT, 0xF0, fmt | (be << 8), 0, struct.pack("<III", addr & 0xFFFFFFFF, addr >> 32, value))
        if fmt in (0x40, 0x60):
            return None
        r = bytes(self.dev.ctrl_transfer(IN, 0xF0, 0, 0, 8))
        return r[7], r[4] >> 5, struct.unpack_from("<I", r)[0]

    def cfg(self, bus: int, reg: int, value: int | None = None, be: int = 0xF):
        fmt = (0x44 if value is not None else 0x04) | int(bus > 0)
        return self.tlp(fmt, (bus << 24) | reg, value or 0, be)

    def assign(self) -> None:
        for bus in range(GPU_BUS):
            self.cfg(bus, 0x18, bus | ((bus + 1) << 8) | (GPU_BUS << 16))
            self.cfg(bus, 0x20, 0xE000 | (0xFFF0 << 16))
            self.cfg(bus, 0x24, 0x0000FFF0)
            self.cfg(bus, 0x04, 0x6, be=0x3)
        for reg, value in ((0x10, BAR0), (0x14, 0), (0x24, BAR5)):
            self.cfg(GPU_BUS, reg, value)
        self.cfg(GPU_BUS, 0x04, 0x0006, be=0x3)

    def sram_dma(self, sectors: int, slot: int, slots: int = 1, to_host: bool = False) -> None:
        self.dev.ctrl_transfer(OUT, 0xF2, sectors | (0x8000 if to_host else 0), slot | (slots << 8), None)


@pytest.fixture
def rig(sim_bus):
    b = usb_bridge.backend("navi31", fresh=True, small_bar=True, vram_size=1 << 30, bus=sim_bus, firmware="open")
    dev = usb.core.find(idVendor=0xADD1, idProduct=0x0001, backend=b)
    return b.bridge, dev


def test_ids_and_a_vendor_interface_with_one_bulk_pair(rig):
    bridge, dev = rig
    assert usb.core.find(idVendor=0x174C, backend=usb_bridge.backend(bridge=bridge, firmware="open")) is None
    intf = dev[0][(0, 0)]
    assert (intf.bInterfaceClass, intf.bInterfaceSubClass, intf.bInterfaceProtocol) == (0xFF, 0xFF, 0xFF)
    assert sorted(e.bEndpointAddress for e in intf) == [0x02, 0x81]
    assert dev.bcdUSB == 0x0320 and dev[0].bNumInterfaces == 1


def test_xdata_by_control_requests_512_bytes_a_read(rig):
    bridge, dev = rig
    h = Host(dev)
    bridge.sram[:600] = bytes(i & 0xFF for i in range(600))
    t = bridge.counters.round_trips
    assert h.xr(0xF000, 600) == bytes(i & 0xFF for i in range(512))      # USB 3: 512 at most, a short answer
    assert bridge.counters.round_trips - t == 1
    h.xw(0xF010, 0xA5)
    assert bridge.sram[0x10] == 0xA5 and h.xr(0xF00F, 3) == bytes((0x0F, 0xA5, 0x11))
    with pytest.raises(usb.core.USBError, match="Pipe"):
        dev.ctrl_transfer(IN, 0xE4, 0xF000, 0x100, 4)                    # another bank: not modelled
    slow = usb_bridge.backend(bridge=bridge, firmware="open", usb2=True)
    d2 = usb.core.find(idVendor=0xADD1, backend=slow)
    assert len(d2.ctrl_transfer(IN, 0xE4, 0xF000, 0, 600)) == 64         # USB 2: 64


def test_single_tlps_config_and_memory(rig):
    bridge, dev = rig
    h = Host(dev)
    assert h.cfg(0, 0) == (0, 0, 0x24611B21)                               # the switch port answers
    assert h.cfg(GPU_BUS, 0)[0:2] == (0, 1)                                # not routed yet: UR
    h.assign()
    assert h.cfg(GPU_BUS, 0) == (0, 0, 0x744C1002)
    reg = bridge.dev.reg_addr("GC", "SCRATCH_REG0") * 4
    assert h.tlp(0x40, BAR5 + reg, 0x1234ABCD) is None                     # posted
    assert h.tlp(0x00, BAR5 + reg) == (0, 0, 0x1234ABCD)
    assert h.tlp(0x20, BAR5 + reg) == (0, 0, 0x1234ABCD)                   # a 4-DW header (MRd64), high bits 0
    assert h.tlp(0x00, 0xD0000000)[:2] == (0, 1)                           # outside the windows: UR
    r = bytes(dev.ctrl_transfer(IN, 0xF0, 0, 0, 8))                        # read again: the same completion
    assert r[7] == 0
    bridge.inject("gpu_silent")
    assert h.tlp(0x00, BAR5 + reg)[0] == 1                                 # no completion: the error result
    bridge.heal()


def test_streamed_tlps_both_ways(rig):
    bridge, dev = rig
    h = Host(dev)
    h.assign()
    data = bytes((i * 7 + 1) & 0xFF for i in range(4096))
    dev.ctrl_transfer(OUT, 0xF0, 0x40 | (0xF << 8), 1, struct.pack("<III", BAR0 + 0x2000, 0, len(data) // 4))
    assert dev.write(0x02, data) == len(data)
    assert bridge.dev.vram.host_read(0x2000, len(data)) == data
    dev.ctrl_transfer(OUT, 0xF0, 0x00 | (0xF << 8), 2, struct.pack("<III", BAR0 + 0x2000, 0, len(data) // 4))
    assert bytes(dev.read(0x81, len(data))) == data
    # A stream write past its count: the packets it covers land, then the endpoint stays unarmed.
    dev.ctrl_transfer(OUT, 0xF0, 0x40 | (0xF << 8), 1, struct.pack("<III", BAR0 + 0x4000, 0, 256))
    with pytest.raises(usb.core.USBTimeoutError):
        dev.write(0x02, b"\x11" * 2048)
    assert bridge.dev.vram.host_read(0x4000, 1024) == b"\x11" * 1024
    assert bridge.dev.vram.host_read(0x4400, 4) != b"\x11" * 4
    with pytest.raises(usb.core.USBTimeoutError):                         # nothing armed: the endpoint NAKs
        dev.read(0x81, 16)


def test_sram_dma_slots_both_ways_and_the_completion_trigger(rig):
    bridge, dev = rig
    h = Host(dev)
    h.assign()
    gpu = bridge.dev
    data = bytes((i * 13 + 5) & 0xFF for i in range(SLOT + 1024))
    h.sram_dma(len(data) // 512, slot=3, slots=2)
    t = bridge.counters.round_trips
    assert dev.write(0x02, data) == len(data)
    assert bridge.counters.round_trips - t == 1
    assert bytes(bridge.sram[3 * SLOT:3 * SLOT + len(data)]) == data
    assert gpu.dma_read(SRAM_PCI + 3 * SLOT, len(data)) == data               # the GPU sees it at 0x200000 + ...
    # More than was armed, or more than the slots hold: not taken.
    h.sram_dma(2, slot=5)
    with pytest.raises(usb.core.USBTimeoutError):
        dev.write(0x02, bytes(3 * 512))
    h.sram_dma(40, slot=5, slots=1)
    with pytest.raises(usb.core.USBTimeoutError):
        dev.write(0x02, bytes(40 * 512))
    # SRAM -> host: nothing until the GPU writes into the completion window at 0x822000.
    gpu.dma_write(SRAM_PCI + 7 * SLOT, b"out!" * 256)
    gpu.dma_write(0x822000, b"\x01" * 16)                                    # before the arm: not remembered
    h.sram_dma(2, slot=7, to_host=True)
    with pytest.raises(usb.core.USBTimeoutError):
        dev.read(0x81, 1024)
    h.sram_dma(2, slot=7, to_host=True)
    gpu.dma_write(0x822000, b"\x01" * 16)
    assert bytes(dev.read(0x81, 1024)) == b"out!" * 256
    assert h.xr(0xB800, 16) == b"\x01" * 16                                   # the window's XDATA view
    with pytest.raises(usb_bridge.DMAError, match="queue windows"):
        gpu.dma_write(0x823000, b"\0" * 4)


def test_a_batch_runs_its_control_requests_before_its_bulk_data(rig):
    """One submission, one round trip. Two SRAM DMAs in one batch: both arms run before either bulk transfer
    (the host orders neither pipe against the other), so the first data land where the second arm points."""
    bridge, dev = rig
    Host(dev)
    be = dev._ctx.backend
    a, b = b"A" * 1024, b"B" * 1024
    batch = [Transfer(0, b"", OUT, 0xF2, 2, 1), Transfer(0x02, a), Transfer(0, b"", OUT, 0xF2, 2, 2),
             Transfer(0x02, b), Transfer(0, bytearray(4), IN, 0xE4, 0xF000, 0)]
    t = bridge.counters.round_trips
    with pytest.raises(usb.core.USBTimeoutError):
        be.submit_async(None, batch, 1000)
    assert bridge.counters.round_trips - t == 1
    assert bytes(bridge.sram[2 * SLOT:2 * SLOT + 1024]) == a and bytes(bridge.sram[SLOT:SLOT + 4]) != b"A" * 4
    assert [x.status for x in batch] == ["completed", "completed", "completed", "timed out", "completed"]
    # The same two copies in two batches land where each arm points.
    be.submit_async(None, [Transfer(0, b"", OUT, 0xF2, 2, 1), Transfer(0x02, a)], 1000)
    be.submit_async(None, [Transfer(0, b"", OUT, 0xF2, 2, 2), Transfer(0x02, b)], 1000)
    assert bytes(bridge.sram[SLOT:SLOT + 1024]) == a and bytes(bridge.sram[2 * SLOT:2 * SLOT + 1024]) == b


def test_pcie_power_off_and_on(rig):
    bridge, dev = rig
    h = Host(dev)
    h.assign()
    reg = bridge.dev.reg_addr("GC", "SCRATCH_REG0") * 4
    h.tlp(0x40, BAR5 + reg, 0x5A5A5A5A)
    assert h.cfg(GPU_BUS, 0x10)[2] == BAR0 | 0xC
    dev.ctrl_transfer(OUT, 0xF3, 0, 0, None)
    assert h.cfg(0, 0)[0] == 1                                               # the link is down: no completion
    dev.ctrl_transfer(OUT, 0xF3, 1, 0, None)
    assert h.cfg(0, 0) == (0, 0, 0x24611B21)
    assert h.cfg(GPU_BUS, 0x10)[2] & ~0xF == 0                                # PERST#: BARs unassigned
    h.assign()
    assert h.tlp(0x00, BAR5 + reg) == (0, 0, 0)                               # registers at power-on values


def test_link_timing_turns_round_trips_and_bytes_into_seconds():
    g2 = usb_bridge.USB3_GEN2
    assert g2.bytes_per_microframe == 151_515 and usb_bridge.USB3_GEN1.bytes_per_microframe == 62_500
    wire = usb_bridge.wire_bytes(256 << 10)
    t = g2.seconds(wire, 1)
    assert t == pytest.approx(wire / 151_515 * 125e-6 + 100e-6)
    assert 800 < g2.mb_per_s(256 << 10, wire, 1) < 1200                     # 256 KiB per round trip
    assert g2.mb_per_s(4080, usb_bridge.wire_bytes(4080), 1) < 50            # 16 E4s of 255 bytes per round trip


def test_sram_dma_past_the_32nd_slot_stalls(rig):
    """The SRAM is 512 KiB, 32 slots of 16 KiB (issue 16; pcie/test_sram_verify.py SRAM_EXPECTED): an 0xF2
    into the last slot works, one whose slots run past it is refused (a stall: the model's assumption, since
    nothing is there to take the bytes), also one the one-byte slot number could name but the SRAM lacks."""
    bridge, dev = rig
    h = Host(dev)
    h.sram_dma(32, slot=31)
    assert dev.write(0x02, b"\xC3" * SLOT) == SLOT and bytes(bridge.sram[-SLOT:]) == b"\xC3" * SLOT
    for slot, slots in ((31, 2), (32, 1), (200, 1)):
        with pytest.raises(usb.core.USBError) as e:
            h.sram_dma(1, slot=slot, slots=slots)
        assert e.value.errno == errno.EPIPE
    h.sram_dma(1, slot=0)                                                  # the endpoint answers again
    assert dev.write(0x02, bytes(512)) == 512


def test_sram_dma_lands_in_address_order_while_the_gpu_runs(rig):
    """Host to SRAM, the data land a 16 KiB burst at a time in address order, the GPU stepping between bursts
    (the assumption the copy-in's sentinel rests on): a GPU reading mid-transfer sees the new start and the old
    rest, and the last dword changes last."""
    bridge, dev = rig
    h = Host(dev)
    h.assign()
    gpu = bridge.dev
    bridge.sram[0:4 * SLOT] = b"\xAA" * (4 * SLOT)
    seen, step = [], gpu.step

    def spy(n=1):
        seen.append((bridge.sram[0], bridge.sram[2 * SLOT], bridge.sram[4 * SLOT - 1]))
        return step(n)
    gpu.step = spy
    h.sram_dma(4 * SLOT // 512, slot=0, slots=4)
    dev.write(0x02, b"\x55" * (4 * SLOT))
    gpu.step = step
    assert (0x55, 0xAA, 0xAA) in seen and (0x55, 0x55, 0xAA) in seen          # the start first, the end last
    # the last byte lands at the end: a step that sees it new sees the rest new (the GPU runs on after the data,
    # while the transfer's answer travels back: half the round trip's latency)
    assert all((first, middle) == (0x55, 0x55) for first, middle, last in seen if last == 0x55)
    assert bytes(bridge.sram[0:4 * SLOT]) == b"\x55" * (4 * SLOT)
