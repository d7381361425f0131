"""The ASM2464PD bridge running the open replacement firmware, as pyusb sees it.

    backend(chip="navi31", *, gpu_bus=4, usb2=False, **sim) -> OpenFirmwareBackend (a usb.backend.IBackend)
    gpusim.usb_bridge.backend(..., firmware="open") returns the same.

The firmware is tinygrad's asm2464pd-firmware (handmade/src/main.c and usb.h; README.md). Its facts, which
this model follows:
- USB ids ADD1:0001, bcdUSB 3.20, EP0 512 bytes; one interface of vendor class FF/FF/FF with bulk IN 0x81
  and bulk OUT 0x02 (1024-byte packets, burst 15). Its SuperSpeed descriptor also lists an alternate setting
  1 that no handler serves; it is not modelled.
- Vendor control requests only (no SCSI):
  0xE4 IN: XDATA read, wValue = address, wLength bytes up to 512 on USB 3 (64 on USB 2): a longer request
       gets a short answer; wIndex high byte = bank (DPX; only bank 0, plain XDATA, is modelled).
  0xE5 OUT: XDATA write of one byte: wValue = address, wIndex low byte = value, no data stage.
  0xF0 OUT, 12 bytes of data (address bits 31:0, address bits 63:32, value; little-endian): the PCIe TLP
       engine. wValue = fmt/type | first-DW byte enables << 8; wIndex bits 1:0 = mode: 0 one TLP (value is
       the write data), 1 stream write (value = dwords: the next bulk OUT data go out as memory writes at
       increasing addresses, a packet past the count is dropped and the endpoint not re-armed), 2 stream
       read (value = dwords, returned on bulk IN in packets of 1024 bytes).
  0xF0 IN, 8 bytes: the read completion's data (little-endian), the completion header bytes (XDATA 0xB22A,
       0xB22B), 0xB284, and a result: 0 completed, 1 error bit, 0xFF no completion.
  0xF2 OUT: SRAM DMA. wValue bits 14:0 = sectors of 512 bytes, bit 15 = direction (1: SRAM to host on bulk
       IN); wIndex low byte = first 16 KiB slot, high byte = slots (0 means 1). Host to SRAM: the next bulk
       OUT data land in the slots from the first on. SRAM to host: the data go out on bulk IN once the GPU
       writes into the completion window at PCIe 0x822000 (README: "The SRAM read needs a write from the
       PCIe device side at 0x822000 to trigger the read"; pcie/test_sram_verify.py arms 0xF2 first).
  0xF3 OUT: PCIe power, wValue bit 0: off asserts PERST# and drops the 3.3 V and 12 V rails.
  Any other request with no data stage is acknowledged ("if (wLen == 0) usb_send_zlp()"); with data it stalls.
Where the sources are silent (assumptions, not facts):
- The order of a batch's transfers across pipes: the host controller orders neither EP0 against the bulk
  endpoints nor one bulk endpoint against the other, so `submit_async` runs every control request of a
  batch first (in order), then the bulk transfers (in order): a driver that sends a control request
  depending on bulk data in the same batch sees it run early, as it can on the wire.
- An SRAM DMA from the host writes the SRAM in address order, a burst of 16 packets at a time, the GPU running
  between bursts (the peer's copy-in rests on it: a chunk's last dword is its sentinel).
- Bulk data beyond an SRAM DMA's sectors, or past its slots, is not taken (the endpoint stays unarmed: the
  transfer times out); an SRAM-to-host DMA whose completion write has not come NAKs (times out); a
  completion write that comes before the 0xF2 IN arm is not remembered.
- The completion header bytes of 0xF0 IN are XDATA 0xB22A/0xB22B (the names REG_PCIE_CPL_HDR_HI/LO).
- Power on after off: the GPU comes back in its power-on state, its BARs unassigned (PERST#).
"""
from __future__ import annotations

import errno
import struct
import time
from dataclasses import dataclass

import usb.backend
import usb.core

from gpusim import usb_bridge as ub

VENDOR, PRODUCT = 0xADD1, 0x0001
EP_IN, EP_OUT = 0x81, 0x02
SLOT = 0x4000                       # 16 KiB per SRAM DMA slot (pcie/test_sram_verify.py SLOT_SIZE)
SECTOR = 512
E4_MAX_USB3, E4_MAX_USB2 = 512, 64
STREAM_PACKET = 1024                # the firmware streams 256 dwords per bulk packet on USB 3
SRAM_DMA_BURST = 16 * 1024          # host-to-SRAM DMA lands a burst (bMaxBurst 15 + 1 packets of 1024 bytes) at a
                                    # time, in address order (assumption: bulk_out)
REQ_XDATA_READ, REQ_XDATA_WRITE, REQ_PCIE, REQ_SRAM_DMA, REQ_POWER = 0xE4, 0xE5, 0xF0, 0xF2, 0xF3
F0_SINGLE, F0_STREAM_WRITE, F0_STREAM_READ = 0, 1, 2
RESULT_DONE, RESULT_ERROR, RESULT_NONE = 0x00, 0x01, 0xFF


@dataclass
class _DMA:
    """What the bulk endpoints are armed for: an SRAM DMA (0xF2) or a TLP stream (0xF0 modes 1 and 2)."""
    kind: str                       # "sram_out", "sram_in", "pcie_write", "pcie_read"
    at: int                         # SRAM offset, or PCIe address
    left: int                       # bytes still to move
    end: int = 0                    # SRAM DMA: the end of its slot range (SRAM offset)
    fmt: int = 0
    triggered: bool = False


@dataclass
class Transfer:
    """One transfer of an asynchronous batch (the backend's submit_async): a control transfer (endpoint 0,
    with its setup fields) or a bulk transfer; `buffer` holds OUT data or receives IN data (its length is
    the request's). After the batch: `actual` bytes moved, `status` "completed", "timed out" or "stalled"."""
    endpoint: int
    buffer: bytes | bytearray
    bmRequestType: int = 0
    bRequest: int = 0
    wValue: int = 0
    wIndex: int = 0
    actual: int = 0
    status: str = "pending"


class OpenFirmware:
    """The firmware's request handlers over the bridge's XDATA, TLP engine and SRAM (gpusim.usb_bridge)."""

    def __init__(self, bridge: ub.ASM24Bridge, usb2: bool = False):
        self.bridge, self.usb2 = bridge, usb2
        self.dma: _DMA | None = None
        self.powered = True
        bridge.on_completion = self._completion

    def _completion(self) -> None:
        if self.dma is not None and self.dma.kind == "sram_in":
            self.dma.triggered = True

    # -- control requests -----------------------------------------------------------------------
    def control(self, req_type: int, req: int, value: int, index: int, data: bytes | None, length: int) -> bytes | None:
        """Runs one control request; returns the IN data (None for OUT). Raises ValueError for a stall."""
        b = self.bridge
        b.counters.commands += 1
        b.dev.poll_tick()           # the GPU runs while the bridge works (one step per request)
        if req_type & 0x60 != 0x40:
            raise ValueError(f"standard/class request {req_type:#04x}/{req:#04x} is not modelled")
        if req_type & 0x80:
            if req == REQ_XDATA_READ:
                if index >> 8:
                    raise ValueError(f"XDATA bank {index >> 8} is not modelled")
                n = min(length, E4_MAX_USB2 if self.usb2 else E4_MAX_USB3)
                return b.xdata_read(value, n)
            if req == REQ_PCIE:
                return self._completion_report()[:length]
            raise ValueError(f"vendor IN request {req:#04x}")
        n = len(data) if data is not None else 0
        if req == REQ_XDATA_WRITE:
            b.xdata_write(value, index & 0xFF)
        elif req == REQ_PCIE:
            if n != 12:
                raise ValueError(f"0xF0 takes 12 bytes of data, not {n}")
            self._pcie(value & 0xFF, value >> 8, index & 3, *struct.unpack("<III", data))
        elif req == REQ_SRAM_DMA:
            self._arm_sram(value, index)
        elif req == REQ_POWER:
            self._power(bool(value & 1))
        elif n:
            raise ValueError(f"vendor OUT request {req:#04x} with {n} bytes of data")
        return None

    def _pcie(self, fmt: int, be: int, mode: int, lo: int, hi: int, value: int) -> None:
        b, x = self.bridge, self.bridge.xdata
        self.dma = None             # "Reset any in-flight streaming transfer"
        x[ub.TLP_FMT_TYPE], x[ub.TLP_BYTE_EN] = fmt, be
        struct.pack_into(">I", x, ub.TLP_ADDR, lo)
        struct.pack_into("<I", x, ub.TLP_ADDR_HIGH, hi)
        if mode == F0_SINGLE:
            if fmt & 0x40:
                struct.pack_into(">I", x, ub.TLP_DATA, value)
            b.xdata_write(ub.TLP_STATUS, ub.ST_ERROR | ub.ST_DONE | ub.ST_SEND)
        elif mode in (F0_STREAM_WRITE, F0_STREAM_READ) and value:
            kind = "pcie_write" if mode == F0_STREAM_WRITE else "pcie_read"
            self.dma = _DMA(kind, (hi << 32) | lo, value * 4, fmt=fmt)

    def _completion_report(self) -> bytes:
        x = self.bridge.xdata
        st = x[ub.TLP_STATUS]
        if st & ub.ST_ERROR:
            x[ub.TLP_STATUS] &= ~ub.ST_ERROR
            return bytes(7) + bytes((RESULT_ERROR,))
        if not st & ub.ST_DONE:
            return bytes(7) + bytes((RESULT_NONE,))
        data = struct.unpack_from(">I", x, ub.TLP_DATA)[0]
        return struct.pack("<I", data) + bytes((x[ub.TLP_CPL], x[ub.TLP_CPL + 1], x[ub.TLP_CPL_DATA], RESULT_DONE))

    def _arm_sram(self, value: int, index: int) -> None:
        sectors, slot, slots = value & 0x7FFF, index & 0xFF, (index >> 8) or 1
        end = (slot + slots) * SLOT
        if end > ub.SRAM_SIZE:
            # assumption: the firmware's slot arithmetic has nothing past the SRAM's 32 slots to put bytes in;
            # the model stalls the request instead of wrapping or dropping data silently
            raise ValueError(f"usb bridge (open firmware): 0xF2 SRAM DMA of {sectors * SECTOR} bytes from slot "
                             f"{slot} ({slots} slots) runs past the {ub.SRAM_SIZE >> 10} KiB SRAM "
                             f"({ub.SRAM_SIZE // SLOT} slots of {SLOT >> 10} KiB; "
                             f"{max(0, ub.SRAM_SIZE - slot * SLOT)} bytes left from that slot): send less")
        self.dma = _DMA("sram_in" if value & 0x8000 else "sram_out", slot * SLOT, sectors * SECTOR, end=end)

    def _power(self, on: bool) -> None:
        b = self.bridge
        if not on:
            b.link_up, self.powered = False, False
            return
        if not self.powered:        # PERST# and the rails came back: the GPU starts from power-on
            b.dev.power_on_reset()
            for off in (0x10, 0x14, 0x18, 0x1C, 0x20, 0x24):
                b.fn.config_write(off, 4, 0)
            b.fn.config_write(0x04, 2, 0)
        b.link_up, self.powered = True, True

    # -- bulk data ------------------------------------------------------------------------------
    def bulk_out(self, data: bytes) -> int | None:
        """Takes host data for the armed DMA; returns the bytes taken, None when the endpoint NAKs (nothing
        armed, or data beyond what is armed: the stream's packets that fit are written first, as the
        firmware writes each packet that its remaining count covers)."""
        d, b = self.dma, self.bridge
        self._run_gpu(min(len(data), SRAM_DMA_BURST) if d is not None and d.kind == "sram_out" else len(data))
        if d is None or d.kind not in ("sram_out", "pcie_write"):
            return None
        if d.kind == "pcie_write":
            for i in range(0, len(data), STREAM_PACKET):
                pkt = data[i:i + STREAM_PACKET]
                if self.dma is None or len(pkt) > self.dma.left:
                    return None
                self._stream_write(pkt)
            return len(data)
        if len(data) > d.left or d.at + len(data) > d.end:
            return None
        # Assumption (the peer's copy-in design rests on it, asm2464pd-firmware: a chunk's last dword is its
        # sentinel): the DMA writes the SRAM in address order as the data arrive, a burst of packets at a time,
        # while the GPU runs, so what the GPU reads mid-transfer is the start of the new data and the rest old.
        for i in range(0, len(data), SRAM_DMA_BURST):
            piece = data[i:i + SRAM_DMA_BURST]
            if i:
                self._run_gpu(len(piece))
            b.sram[d.at:d.at + len(piece)] = piece
            d.at += len(piece)
            d.left -= len(piece)
        if not d.left:
            self.dma = None
        return len(data)

    def _run_gpu(self, nbytes: int) -> None:
        """The GPU runs while the bridge moves data: on the stepped clock (1 us a step) for as long as the
        link takes to carry the bytes (usb_bridge.USB3_GEN2's bytes per microframe), at least one step."""
        dev = self.bridge.dev
        if dev.stepped:
            dev.step(max(1, nbytes * 125 // ub.USB3_GEN2.bytes_per_microframe))

    def _wait_for_release(self, d: _DMA, timeout_s: float = 2.0) -> None:
        """The host controller keeps asking (the bridge NAKs) until the GPU's completion write comes or the
        transfer's deadline: the GPU runs meanwhile (stepped: a step per try)."""
        dev, end = self.bridge.dev, time.monotonic() + timeout_s
        while not d.triggered and time.monotonic() < end:
            if dev.stepped:
                dev.step()
            else:
                time.sleep(1e-4)

    def _stream_write(self, data: bytes) -> None:
        d, b = self.dma, self.bridge
        for i in range(0, len(data) - len(data) % 4, 4):
            b.xdata[ub.TLP_FMT_TYPE], b.xdata[ub.TLP_BYTE_EN] = d.fmt, 0x0F
            struct.pack_into(">I", b.xdata, ub.TLP_ADDR, d.at & 0xFFFFFFFF)
            struct.pack_into("<I", b.xdata, ub.TLP_ADDR_HIGH, d.at >> 32)
            struct.pack_into(">I", b.xdata, ub.TLP_DATA, struct.unpack_from("<I", data, i)[0])
            b.xdata_write(ub.TLP_STATUS, ub.ST_ERROR | ub.ST_DONE | ub.ST_SEND)
            d.at, d.left = d.at + 4, d.left - 4
        if d.left <= 0:
            self.dma = None

    def bulk_in(self, n: int) -> bytes | None:
        """Data for a bulk IN of up to n bytes; None when the endpoint NAKs (nothing armed or not triggered)."""
        d, b = self.dma, self.bridge
        self._run_gpu(n)
        if d is not None and d.kind == "sram_in" and not d.triggered:
            self._wait_for_release(d)
        if d is None or d.kind == "sram_in" and not d.triggered or d.kind not in ("sram_in", "pcie_read"):
            return None
        k = min(n, d.left)
        if d.kind == "sram_in":
            k = min(k, d.end - d.at)
            out = bytes(b.sram[d.at:d.at + k])
        else:
            out = bytearray()
            for _ in range(k // 4):
                b.xdata[ub.TLP_FMT_TYPE], b.xdata[ub.TLP_BYTE_EN] = d.fmt, 0x0F
                struct.pack_into(">I", b.xdata, ub.TLP_ADDR, d.at & 0xFFFFFFFF)
                struct.pack_into("<I", b.xdata, ub.TLP_ADDR_HIGH, d.at >> 32)
                b.xdata_write(ub.TLP_STATUS, ub.ST_ERROR | ub.ST_DONE | ub.ST_SEND)
                ok = b.xdata[ub.TLP_STATUS] & ub.ST_DONE and b.xdata[ub.TLP_CPL] >> 5 == 0
                out += struct.pack("<I", struct.unpack_from(">I", b.xdata, ub.TLP_DATA)[0] if ok else 0xFFFFFFFF)
                d.at += 4
            out = bytes(out)
        if d.kind == "sram_in":
            d.at += k
        d.left -= k
        if d.left <= 0 or (d.kind == "sram_in" and d.at >= d.end):
            self.dma = None
        return out


def _pipe(why: str):
    return usb.core.USBError(f"Pipe error ({why})", ub.LIBUSB_ERROR_PIPE, errno.EPIPE)


def _timeout(why: str):
    return usb.core.USBTimeoutError(f"Operation timed out ({why})", ub.LIBUSB_ERROR_TIMEOUT, errno.ETIMEDOUT)


class OpenFirmwareBackend(usb.backend.IBackend):
    """pyusb backend presenting one ASM2464PD with the open firmware. Every synchronous transfer is a round
    trip; `submit_async` (the backend's extension, as libusb's asynchronous transfers) runs a batch of
    control and bulk transfers waited for together: one round trip. Every round trip, whatever its transfer
    kind, gives the GPU the same time: the link's round-trip latency (half while the request travels, half
    while the answer comes back), plus the time its bulk bytes take on the wire (OpenFirmware._run_gpu)."""

    def __init__(self, bridge: ub.ASM24Bridge, usb2: bool = False, bus: int = 2, address: int | None = None):
        self.bridge, self.bus, self.address, self.usb2 = bridge, bus, ub.usb_address(bridge, address), usb2
        self.fw = OpenFirmware(bridge, usb2)

    # -- descriptors ----------------------------------------------------------------------------
    def enumerate_devices(self):
        return [] if self.bridge.gone else [self]

    def get_device_descriptor(self, dev):
        return ub._Desc(bLength=18, bDescriptorType=1, bcdUSB=0x0200 if self.usb2 else 0x0320, bDeviceClass=0,
                        bDeviceSubClass=0, bDeviceProtocol=0, bMaxPacketSize0=64 if self.usb2 else 9,
                        idVendor=VENDOR, idProduct=PRODUCT, bcdDevice=0x0001, iManufacturer=1, iProduct=2,
                        iSerialNumber=3, bNumConfigurations=1, address=self.address, bus=self.bus,
                        port_number=1, port_numbers=(1,), speed=3 if self.usb2 else 5)

    def get_configuration_descriptor(self, dev, config):
        return ub._Desc(bLength=9, bDescriptorType=2, wTotalLength=9 + 9 + 2 * 13, bNumInterfaces=1,
                        bConfigurationValue=1, iConfiguration=0, bmAttributes=0xC0, bMaxPower=0)

    def get_interface_descriptor(self, dev, intf, alt, config):
        if intf != 0 or alt != 0:
            raise IndexError("usb bridge (open firmware): one interface, alternate setting 0")
        return ub._Desc(bLength=9, bDescriptorType=4, bInterfaceNumber=0, bAlternateSetting=0, bNumEndpoints=2,
                        bInterfaceClass=0xFF, bInterfaceSubClass=0xFF, bInterfaceProtocol=0xFF, iInterface=0)

    def get_endpoint_descriptor(self, dev, ep, intf, alt, config):
        d = ub._Desc(bLength=7, bDescriptorType=5, bEndpointAddress=(EP_IN, EP_OUT)[ep], bmAttributes=2,
                     wMaxPacketSize=512 if self.usb2 else ub.MAX_PACKET, bInterval=0, bRefresh=0, bSynchAddress=0)
        d.extra_descriptors = [] if self.usb2 else [6, 0x30, 15, 0, 0, 0]
        return d

    # -- handles --------------------------------------------------------------------------------
    def open_device(self, dev):
        self._alive()
        return self

    def close_device(self, dev_handle):
        if self.bridge.fn.state is not None:
            self.bridge.fn.close()

    def set_configuration(self, dev_handle, config_value):
        self._alive()
        self.fw.dma = None              # SET_CONFIGURATION clears the bulk endpoints

    def get_configuration(self, dev_handle):
        return 1

    def set_interface_altsetting(self, dev_handle, intf, altsetting):
        self._alive()
        if intf != 0 or altsetting != 0:
            raise _pipe(f"no alternate setting {altsetting}")
        self.fw.dma = None

    def claim_interface(self, dev_handle, intf):
        self._alive()

    def release_interface(self, dev_handle, intf):
        pass

    def is_kernel_driver_active(self, dev_handle, intf):
        return False

    def detach_kernel_driver(self, dev_handle, intf):
        pass

    def attach_kernel_driver(self, dev_handle, intf):
        pass

    def clear_halt(self, dev_handle, ep):
        self._alive()
        self.fw.dma = None              # CLEAR_FEATURE(ENDPOINT_HALT) cancels streaming (dma_dwords = 0)

    def reset_device(self, dev_handle):
        self._alive()
        self.bridge.wedged = False
        self.bridge.faults.pop("stall", None)
        self.fw.dma = None

    def _alive(self) -> None:
        if self.bridge.gone:
            raise usb.core.USBError("No such device (it may have been disconnected)", ub.LIBUSB_ERROR_NO_DEVICE,
                                    errno.ENODEV)

    def _latency(self) -> None:
        """Half a round trip's latency (usb_bridge.USB3_GEN2.round_trip_s, a stated setting) on the GPU's
        stepped clock (1 us a step): the GPU runs while requests and answers travel. Each round trip runs it
        twice, on every transfer kind (a round trip is a round trip: the stock firmware's model runs the same
        latency per round trip, usb_bridge.ASM24Bridge.round_trip)."""
        dev = self.bridge.dev
        if dev.stepped:
            dev.step(max(1, int(ub.USB3_GEN2.round_trip_s * 1e6) // 2))

    def _count(self, n: int, trip: bool) -> None:
        c = self.bridge.counters
        c.transfers += 1
        c.payload_bytes += n
        c.wire_bytes += ub.wire_bytes(n)
        if trip:
            c.round_trips += 1

    # -- synchronous transfers (each one round trip) ---------------------------------------------
    def ctrl_transfer(self, dev_handle, bmRequestType, bRequest, wValue, wIndex, data, timeout):
        self._alive()
        out = None if bmRequestType & 0x80 else (bytes(data) if data is not None else b"")
        length = len(data) if data is not None else 0
        self._count(8 + length, True)
        self._latency()
        try:
            got = self.fw.control(bmRequestType, bRequest, wValue, wIndex, out, length)
        except ValueError as e:
            raise _pipe(str(e)) from None
        finally:
            self._latency()             # the answer (data, status or STALL) travels back
        if got is None:
            return length
        data[:len(got)] = ub._as(data, got)
        return len(got)

    def bulk_write(self, dev_handle, ep, intf, data, timeout):
        self._alive()
        data = bytes(data)
        self._count(len(data), True)
        if ep != EP_OUT:
            raise _pipe(f"endpoint {ep:#04x} is not the bulk OUT endpoint {EP_OUT:#04x}")
        self._latency()
        try:
            if self.fw.bulk_out(data) is None:
                raise _timeout(f"bulk OUT of {len(data)} bytes: the endpoint is not armed for them")
        finally:
            self._latency()
        return len(data)

    def bulk_read(self, dev_handle, ep, intf, buff, timeout):
        self._alive()
        if ep != EP_IN:
            raise _pipe(f"endpoint {ep:#04x} is not the bulk IN endpoint {EP_IN:#04x}")
        self._latency()
        try:
            got = self.fw.bulk_in(len(buff))
        finally:
            self._latency()
        self._count(len(got or b""), True)
        if got is None:
            raise _timeout(f"bulk IN of {len(buff)} bytes: nothing armed, or no completion write yet")
        buff[:len(got)] = ub._as(buff, got)
        return len(got)

    # -- the asynchronous batch (backend extension) ----------------------------------------------
    def submit_async(self, dev_handle, transfers, timeout: int) -> None:
        """Submits every transfer at once and waits for all: ONE round trip. Control transfers run first, in
        order, then bulk transfers, in order (the host orders neither pipe against the other; module
        docstring). A control request the firmware stalls raises the pipe error when reached (that transfer
        "stalled", the rest "cancelled"); bulk transfers that cannot complete (endpoint not armed, no
        completion write) time out after the rest have run."""
        self._alive()
        transfers = list(transfers)
        if not transfers:
            return
        self.bridge.counters.round_trips += 1
        self._latency()
        for t in transfers:
            t.actual, t.status = 0, "pending"
        for t in (t for t in transfers if t.endpoint == 0):
            is_in = t.bmRequestType & 0x80
            self._count(8 + len(t.buffer), False)
            try:
                got = self.fw.control(t.bmRequestType, t.bRequest, t.wValue, t.wIndex,
                                      None if is_in else bytes(t.buffer), len(t.buffer))
            except ValueError as e:
                t.status = "stalled"
                for u in transfers:
                    if u.status == "pending":
                        u.status = "cancelled"
                raise _pipe(str(e)) from None
            if is_in:
                t.buffer[:len(got)] = got
                t.actual = len(got)
            else:
                t.actual = len(t.buffer)
            t.status = "completed"
        stuck = []
        for t in (t for t in transfers if t.endpoint != 0):
            if stuck:                   # a bulk pipe stops at the first transfer it cannot finish
                stuck.append(t)
                continue
            if t.endpoint == EP_OUT:
                took = self.fw.bulk_out(bytes(t.buffer))
                self._count(len(t.buffer), False)
                if took is None:
                    stuck.append(t)
                    continue
                t.actual = took
            elif t.endpoint == EP_IN:
                got = self.fw.bulk_in(len(t.buffer))
                if got is None:
                    stuck.append(t)
                    continue
                self._count(len(got), False)
                t.buffer[:len(got)] = got
                t.actual = len(got)
            else:
                raise _pipe(f"endpoint {t.endpoint:#04x} is not a bulk endpoint of this interface")
            t.status = "completed"
        self._latency()
        if stuck:
            for t in stuck:
                t.status = "timed out"
            raise _timeout(f"{len(stuck)} of {len(transfers)} transfers never completed (first: endpoint "
                           f"{stuck[0].endpoint:#04x}, {len(stuck[0].buffer)} bytes)")


def backend(chip: str = "navi31", *, gpu_bus: int = 4, usb2: bool = False, bridge: ub.ASM24Bridge | None = None,
            **sim) -> OpenFirmwareBackend:
    """The pyusb backend of one ASM2464PD with the open firmware and the simulated GPU behind it."""
    return OpenFirmwareBackend(bridge or ub.open_bridge(chip, gpu_bus=gpu_bus, **sim), usb2=usb2)
