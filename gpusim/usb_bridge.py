"""An ASMedia ASM24xx USB-to-PCIe bridge (ASM2464PD class) in front of a simulated GPU, as pyusb sees it.

    backend(chip="navi31", *, pid=0x2464, gpu_bus=4, **sim) -> BridgeBackend  (a usb.backend.IBackend)
    usb.core.find(idVendor=0x174C, backend=b); b.bridge is the ASM24Bridge (counters, inject())

What is modeled is the stock firmware's path, as public reverse engineering documents it (docs/usb.md has
every fact with its source): a USB mass-storage interface (alt 0 Bulk-Only, alt 1 UAS) whose vendor SCSI
commands 0xE4/0xE5 read and write the bridge's XDATA memory; the PCIe TLP engine registers in XDATA
(0xB210..0xB296) that send one-dword config and memory requests and return their completion; SCSI
WRITE(16) that lands bulk data in the bridge's SRAM at PCIe address 0x200000 + LBA * 512, which the GPU
reaches by bus-master DMA and the 8051 sees through a 4 KiB window at XDATA 0xF000. Behind the bridge is
the topology seen through a real enclosure: type-1 bridges on buses 0..gpu_bus-1 (ASM2461 switch ports,
the Navi upstream/downstream ports), each with secondary/subordinate bus numbers the host must program
before a type-1 config request reaches the next bus, and the GPU's function 0 on gpu_bus.

The wire: SuperSpeed+ 10 Gbit/s (128b/132b) with 1024-byte bulk packets; every transfer is counted with
its packet overhead, every SCSI command and control transfer is a round trip (LinkCounters).
UAS over USB 3 bulk streams, which pyusb lacks, is a backend extension (BridgeBackend.alloc_streams,
free_streams, submit_streams: many commands in one round trip, run by the firmware one at a time in arrival
order).
Failures (ASM24Bridge.inject): "stall" (a bulk transfer never completes: USBTimeoutError, and the bridge
stays wedged until a USB reset), "drop" (device gone: USBError ENODEV, find() no longer sees it),
"gpu_silent" (non-posted TLPs to the GPU get no completion: status bit 0), "link_down" (the PCIe link
behind the bridge is down: no TLP gets a completion, posted writes vanish).
"""
from __future__ import annotations

import errno
import functools
import struct
from collections import deque
from dataclasses import dataclass

import usb.backend
import usb.core

from gpusim import provider
from gpusim.bus import Bus
from gpusim.device import DMAError

VENDOR_ASMEDIA = 0x174C
PRODUCTS = (0x2463, 0x2464)             # ASM2463 / ASM2464PD in their stock (ROM) firmware

# Endpoints (tinygrad's USB3 class: data in 0x81, status 0x83, data out 0x02, command 0x04).
EP_DATA_IN, EP_STATUS, EP_DATA_OUT, EP_COMMAND = 0x81, 0x83, 0x02, 0x04
MAX_PACKET = 1024                       # SuperSpeed bulk

# SCSI operation codes.
OP_TEST_UNIT_READY, OP_REQUEST_SENSE = 0x00, 0x03
OP_WRITE16 = 0x8A
OP_XDATA_READ, OP_XDATA_WRITE = 0xE4, 0xE5
XDATA_ADDR_MASK = 0x1FFFF               # the CDB carries (addr & 0x1FFFF) | 0x500000
BLOCK = 512

# XDATA map (bridge registers and windows).
XDATA_SIZE = 0x20000
TLP_FMT_TYPE = 0xB210
TLP_BYTE_EN = 0xB217
TLP_ADDR = 0xB218                       # 4 bytes, big-endian
TLP_ADDR_HIGH = 0xB21C                  # 4 bytes, little-endian: address bits 63:32 of a 4-DW header (the open
                                        # firmware's pcie_pio.h register layout: 0xB21C holds bits 39:32)
TLP_DATA = 0xB220                       # 4 bytes, big-endian: write data, then the read completion data
TLP_CPL = 0xB22A                        # 2 bytes, big-endian: status << 13 | byte count
TLP_CPL_DATA = 0xB284                   # bit 0: the completion carried data (CplD)
TLP_STATUS = 0xB296                     # bit 2 (write): send; bit 1: completion in; bit 0: timeout/error
# (0xB254, which the host sets to 0x0F before each request, is plain storage here: its meaning is unknown.)
ST_ERROR, ST_DONE, ST_SEND = 0x01, 0x02, 0x04
SRAM_XDATA_WINDOW = 0xF000              # the 8051's 4 KiB view of the SRAM's start
SRAM_XDATA_WINDOW_SIZE = 0x1000

# The SRAM data buffer on the PCIe side (where the GPU's DMA lands).
SRAM_BUS_BASE = 0x200000
SRAM_SIZE = 512 << 10                   # 0x200000..0x27FFFF, both firmwares: the bridge's SRAM, measured
# (issue 16's facts from the peer's bridge work: "a SCSI WRITE(16) at LBA 0 moves 64 KiB chunks into the
# bridge's 512 KiB SRAM, which the GPU sees at PCIe 0x200000"; tinygrad asm2464pd-firmware
# pcie/test_sram_verify.py "SRAM_EXPECTED = 0x80000 # 512KB, this is verified"). A GPU access, a WRITE(16) or
# an SRAM DMA beyond it fails (SRAMOverflow / CHECK CONDITION / a stall): nothing is there to hold the bytes.
# The NVMe queue windows the GPU also reaches (issue 16's facts from the peer's bridge work: XDATA 0xA000 at
# PCIe 0x820000, XDATA 0xB800 at 0x822000; cyrozap's ASM2364 map has 0xA000-0xAFFF at 0x820000). (bus base,
# XDATA base, bytes); their sizes beyond what the sources show are an assumption (4 KiB and 512 bytes).
QUEUE_WINDOWS = ((0x820000, 0xA000, 0x1000), (0x822000, 0xB800, 0x200))

# TLP fmt/type bytes (PCIe base spec: fmt in bits 7:5, type in 4:0; 3-DW headers, 32-bit addresses).
MRD32, MWR32, CFGRD0, CFGRD1, CFGWR0, CFGWR1 = 0x00, 0x40, 0x04, 0x05, 0x44, 0x45
MRD64, MWR64 = 0x20, 0x60               # 4-DW headers: the open firmware sends them (pcie/test_sram_verify.py)
CPL_SC, CPL_UR = 0b000, 0b001

# Type-1 bridges in front of the GPU, as seen through an ASM2464PD enclosure with an RX 7900 XTX.
BRIDGE_IDS = {0: (0x1B21, 0x2461), 1: (0x1B21, 0x2461), 2: (0x1002, 0x1478), 3: (0x1002, 0x1479)}

# Link timing model: USB 3.2 Gen 2 (10 Gbit/s, 128b/132b). Per data packet: a data packet header with
# framing (20 bytes), the payload's CRC-32 and end framing (8), the receiver's ACK transaction packet with
# framing (20). Per transfer one more transaction packet (the IN request or ERDY that opens it).
LINK_BITS_PER_S = 10e9 * 128 / 132
PACKET_OVERHEAD = 48
TRANSFER_OVERHEAD = 20
TURNAROUND_S = 50e-6                    # firmware time per command (an assumption, not a measurement)

BOT_CBW_SIG, BOT_CSW_SIG = 0x43425355, 0x53425355
UAS_COMMAND_IU, UAS_SENSE_IU, UAS_RESPONSE_IU = 0x01, 0x03, 0x04
# Response IU codes (UAS; Linux include/linux/usb/uas.h): invalid information unit, overlapped tag attempted.
RC_INVALID_IU, RC_OVERLAPPED_TAG = 0x02, 0x0A
UAS_TASK_ATTRIBUTES = (0, 1, 2)         # SIMPLE, HEAD OF QUEUE, ORDERED (byte 4 bits 2:0); ACA is not supported
SENSE_ILLEGAL_REQUEST = 0x05
ASC_INVALID_OPCODE, ASC_LBA_OUT_OF_RANGE = 0x20, 0x21

LIBUSB_ERROR_NO_DEVICE, LIBUSB_ERROR_TIMEOUT, LIBUSB_ERROR_PIPE = -4, -7, -9


@dataclass
class LinkCounters:
    """What the USB link carried: transfers, round trips (SCSI commands and control transfers, each waits
    for the device's answer), payload and wire bytes (payload plus packet overhead), and TLPs sent."""
    transfers: int = 0
    round_trips: int = 0
    commands: int = 0
    payload_bytes: int = 0
    wire_bytes: int = 0
    tlps: int = 0

    def seconds(self) -> float:
        """Modeled link time: the wire bytes at 10 Gbit/s plus a firmware turnaround per round trip."""
        return self.wire_bytes * 8 / LINK_BITS_PER_S + self.round_trips * TURNAROUND_S

    def snapshot(self) -> LinkCounters:
        return LinkCounters(**vars(self))


@dataclass(frozen=True)
class LinkTiming:
    """USB 3 timing that turns counted round trips and wire bytes into seconds: the link's bytes per 125 us
    bus interval (a microframe; USB 3.2 Gen 1 is 5 Gbit/s with 8b/10b coding, Gen 2 10 Gbit/s with 128b/132b,
    before the packet overhead wire_bytes() adds) and a round-trip latency, a stated setting: the time from
    submitting a batch to its last completion, beyond the bytes (host controller scheduling, the bridge's
    firmware). 100 us is an assumption (no bridge is attached to this machine), the same the bench used."""
    name: str
    bytes_per_microframe: int
    round_trip_s: float = 100e-6

    def seconds(self, wire: int, round_trips: int) -> float:
        return wire / self.bytes_per_microframe * 125e-6 + round_trips * self.round_trip_s

    def mb_per_s(self, payload: int, wire: int, round_trips: int) -> float:
        t = self.seconds(wire, round_trips)
        return payload / t / 1e6 if t else 0.0


USB3_GEN1 = LinkTiming("USB 3.2 Gen 1 (5 Gbit/s)", 5_000_000_000 * 8 // 10 // 8 // 8000)
USB3_GEN2 = LinkTiming("USB 3.2 Gen 2 (10 Gbit/s)", 10_000_000_000 * 128 // 132 // 8 // 8000)


def wire_bytes(payload: int) -> int:
    packets = max(1, -(-payload // MAX_PACKET))
    return payload + packets * PACKET_OVERHEAD + TRANSFER_OVERHEAD


class BridgeBus(Bus):
    """The PCIe side as the GPU's DMA sees it: the bridge's SRAM at 0x200000; nothing else is host memory."""

    def __init__(self, bridge: ASM24Bridge):
        super().__init__()
        self.bridge, self.sram = bridge, bridge.sram

    def _span(self, addr: int, n: int, what: str) -> int:
        off = next((b for b, br in sorted(self.bridge.bridges.items()) if not br.bus_master), None)
        if off is not None:
            raise DMAError(f"DMA {what} at bus address {addr:#x}: the bridge on bus {off} has bus mastering off "
                           f"(its PCI_COMMAND bit 2), so the GPU's request goes no further upstream")
        if not self.bridge.link_up:
            raise DMAError(f"DMA {what} at bus address {addr:#x}: the PCIe link behind the USB bridge is down")
        if self.bridge.queue_window(addr, n) is not None:
            return -1
        if SRAM_BUS_BASE <= addr < SRAM_BUS_BASE + SRAM_SIZE < addr + n:
            raise DMAError(f"DMA {what} of {n} bytes at bus address {addr:#x}: runs past the end of the USB "
                           f"bridge's {SRAM_SIZE >> 10} KiB SRAM ({SRAM_BUS_BASE:#x}..{SRAM_BUS_BASE + SRAM_SIZE:#x}) "
                           f"by {addr + n - SRAM_BUS_BASE - SRAM_SIZE} bytes; only "
                           f"{SRAM_BUS_BASE + SRAM_SIZE - addr} bytes are left from there: map less or lower")
        if not SRAM_BUS_BASE <= addr <= addr + n <= SRAM_BUS_BASE + SRAM_SIZE:
            raise DMAError(f"DMA {what} of {n} bytes at bus address {addr:#x}: behind the USB bridge only its "
                           f"SRAM ({SRAM_BUS_BASE:#x}..{SRAM_BUS_BASE + SRAM_SIZE:#x}) and its queue windows "
                           f"({', '.join(f'{b:#x}' for b, _, _ in QUEUE_WINDOWS)}) are reachable")
        return addr - SRAM_BUS_BASE

    def read(self, addr: int, n: int) -> bytes:
        at = self._span(addr, n, "read")
        if at < 0:
            return self.bridge.queue_read(addr, n)
        return bytes(self.sram[at:at + n])

    def write(self, addr: int, data) -> None:
        at = self._span(addr, len(data), "write")
        if at < 0:
            self.bridge.queue_write(addr, bytes(data))
            return
        self.sram[at:at + len(data)] = bytes(data)


class _Type1:
    """A switch port's config header: ids, header type 1, and the bus-number registers the host programs."""

    def __init__(self, vid: int, did: int):
        self.space = bytearray(4096)
        struct.pack_into("<HH", self.space, 0, vid, did)
        self.space[0x0B], self.space[0x0E] = 0x06, 0x01      # class: bridge; header type 1

    def read(self, reg: int) -> int:
        return int.from_bytes(self.space[reg:reg + 4], "little")

    def write(self, reg: int, value: int, be: int) -> None:
        for k in range(4):
            if be >> k & 1 and reg + k >= 0x04 and not 0x08 <= reg + k < 0x10:   # ids, class: read-only
                self.space[reg + k] = (value >> (8 * k)) & 0xFF

    @property
    def secondary(self) -> int:
        return self.space[0x19]

    def forwards(self, addr: int) -> bool:
        """A memory request goes down when memory space is enabled and the address is inside the memory
        window or the prefetchable window (PCI-to-PCI bridge header: base/limit in 1 MiB units)."""
        s = self.space
        if not s[0x04] & 0x2:
            return False
        mb, ml, pb, pl, pbu, plu = struct.unpack_from("<HHHHII", s, 0x20)
        mem = (mb & 0xFFF0) << 16, ((ml & 0xFFF0) << 16) | 0xFFFFF
        pref = (((pb & 0xFFF0) << 16) | (pbu << 32)), (((pl & 0xFFF0) << 16) | 0xFFFFF | (plu << 32))
        return any(lo <= addr <= hi for lo, hi in (mem, pref))

    @property
    def bus_master(self) -> bool:
        return bool(self.space[0x04] & 0x4)

    @property
    def subordinate(self) -> int:
        return self.space[0x1A]


class ASM24Bridge:
    """The bridge: XDATA with the TLP engine, the SRAM, the SCSI command set, and injected failures."""

    def __init__(self, fn: provider.SimFunction, gpu_bus: int = 4):
        self.fn, self.dev, self.gpu_bus = fn, fn.dev, gpu_bus
        self.xdata = bytearray(XDATA_SIZE)
        self.sram = bytearray(SRAM_SIZE)
        self.bridges = {b: _Type1(*BRIDGE_IDS.get(b, (0x1B21, 0x2461))) for b in range(gpu_bus)}
        self.counters = LinkCounters()
        self.faults: dict[str, int] = {}    # kind -> transfers to let through first ("stall")
        self.wedged = False
        self.gone = False
        self.link_up = True
        self.gpu_answers = True
        self.status, self.sense = 0, (0, 0)
        self._cdb, self._last_sense = b"", bytes(18)
        self.on_completion = None           # the open firmware's DMA engine listens for completion writes
        self._owed = 0                      # clock steps of link latency the GPU has still to run (round_trip)
        # Nothing enumerates the GPU behind a USB bridge: its BARs are unassigned, decode and mastering off.
        for off in (0x10, 0x14, 0x18, 0x1C, 0x20, 0x24):
            fn.config_write(off, 4, 0)
        fn.config_write(0x04, 2, 0)
        fn.host_bus.unplug(self.dev)        # the GPU's DMA now reaches only the bridge's SRAM
        BridgeBus(self).plug(self.dev)

    # -- failures -------------------------------------------------------------------------------
    def inject(self, kind: str, after: int = 0) -> None:
        """"stall" (the bulk transfer `after` transfers from now never completes), "drop", "gpu_silent",
        "link_down"; heal() undoes the last two."""
        if kind == "stall":
            self.faults["stall"] = after
        elif kind == "drop":
            self.gone = True
        elif kind == "gpu_silent":
            self.gpu_answers = False
        elif kind == "link_down":
            self.link_up = False
        else:
            raise ValueError(f"usb bridge: unknown failure {kind!r}; stall, drop, gpu_silent, link_down")

    def heal(self) -> None:
        self.link_up = self.gpu_answers = True

    # -- the queue windows the GPU writes (completion entries) ---------------------------------
    @staticmethod
    def queue_window(addr: int, n: int) -> tuple[int, int, int] | None:
        return next((w for w in QUEUE_WINDOWS if w[0] <= addr and addr + n <= w[0] + w[2]), None)

    def queue_read(self, addr: int, n: int) -> bytes:
        base, xbase, _ = self.queue_window(addr, n)
        return bytes(self.xdata[xbase + addr - base:xbase + addr - base + n])

    def queue_write(self, addr: int, data: bytes) -> None:
        """A GPU write into a queue window lands in XDATA; one into the completion window (0x822000) is also
        the event the open firmware's SRAM-to-host DMA waits for (tinygrad asm2464pd-firmware README: "The
        SRAM read needs a write from the PCIe device side at 0x822000 to trigger the read")."""
        base, xbase, _ = self.queue_window(addr, len(data))
        self.xdata[xbase + addr - base:xbase + addr - base + len(data)] = data
        if base == QUEUE_WINDOWS[1][0] and self.on_completion is not None:
            self.on_completion()

    # -- XDATA ----------------------------------------------------------------------------------
    def xdata_read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for a in range(addr, addr + n):
            a &= XDATA_ADDR_MASK
            w = a - SRAM_XDATA_WINDOW
            out.append(self.sram[w] if 0 <= w < SRAM_XDATA_WINDOW_SIZE else self.xdata[a])
        return bytes(out)

    def xdata_write(self, addr: int, value: int) -> None:
        addr &= XDATA_ADDR_MASK
        w = addr - SRAM_XDATA_WINDOW
        if 0 <= w < SRAM_XDATA_WINDOW_SIZE:
            self.sram[w] = value
        elif addr == TLP_STATUS:
            st = self.xdata[addr] & ~(value & (ST_ERROR | ST_DONE))      # write 1 to clear
            self.xdata[addr] = st
            if value & ST_SEND:
                self._send_tlp()
        else:
            self.xdata[addr] = value

    # -- the TLP engine -------------------------------------------------------------------------
    def _send_tlp(self) -> None:
        x = self.xdata
        fmt_type, be = x[TLP_FMT_TYPE], x[TLP_BYTE_EN]
        addr = struct.unpack_from(">I", x, TLP_ADDR)[0] & ~3    # a TLP addresses dwords; lanes are the BEs
        if fmt_type in (MRD64, MWR64):
            addr |= struct.unpack_from("<I", x, TLP_ADDR_HIGH)[0] << 32
            fmt_type &= ~0x20                                    # the same request with a 64-bit address
        data = struct.unpack_from(">I", x, TLP_DATA)[0]
        x[TLP_STATUS] &= ~(ST_ERROR | ST_DONE)
        if be >> 4 or fmt_type not in (MRD32, MWR32, CFGRD0, CFGRD1, CFGWR0, CFGWR1):
            # One dword of payload is all the engine holds: a last-DW byte enable (a longer TLP) or a type
            # it does not send is refused without going on the link.
            x[TLP_STATUS] |= ST_ERROR
            return
        posted = fmt_type == MWR32
        self.counters.tlps += 1
        if not self.link_up:
            x[TLP_STATUS] |= ST_DONE if posted else ST_ERROR
            return
        if fmt_type in (MRD32, MWR32):
            status, value = self._memory(addr, be, data if posted else None)
            byte_count = self._byte_count(be)
        else:
            status, value = self._config(fmt_type, addr, be, data if fmt_type & 0x40 else None)
            byte_count = 4
        if status is None:                  # no completion arrived: completion timeout
            x[TLP_STATUS] |= ST_DONE if posted else ST_ERROR
            return
        if not posted:
            struct.pack_into(">H", x, TLP_CPL, (status << 13) | byte_count)
            has_data = status == CPL_SC and not fmt_type & 0x40
            x[TLP_CPL_DATA] = (x[TLP_CPL_DATA] & ~1) | int(has_data)
            if has_data:
                struct.pack_into(">I", x, TLP_DATA, value)
        x[TLP_STATUS] |= ST_DONE

    @staticmethod
    def _byte_count(be: int) -> int:
        if not be:
            return 1
        return (be.bit_length()) - ((be & -be).bit_length() - 1)

    def _config(self, fmt_type: int, addr: int, be: int, value: int | None) -> tuple[int | None, int]:
        bus, dev, func, reg = addr >> 24, (addr >> 19) & 0x1F, (addr >> 16) & 7, addr & 0xFFC
        if (fmt_type & 1) != (bus > 0) or not self._routes_to(bus):
            return CPL_UR, 0
        if dev or func:
            return CPL_UR, 0                # one function per bus (the GPU's audio function is not modeled)
        if bus in self.bridges:
            br = self.bridges[bus]
            if value is not None:
                br.write(reg, value, be)
            return CPL_SC, br.read(reg)
        if bus != self.gpu_bus:
            return CPL_UR, 0
        if not self.gpu_answers:
            return None, 0
        if value is not None:
            for k in range(4):
                if be >> k & 1:
                    self.fn.config_write(reg + k, 1, (value >> (8 * k)) & 0xFF)
            return CPL_SC, 0
        return CPL_SC, self.fn.config_read(reg, 4)

    def _routes_to(self, bus: int) -> bool:
        """A type-1 request climbs down the chain of bridges whose bus ranges hold its bus."""
        cur = 0
        while cur != bus:
            br = self.bridges.get(cur)
            if br is None or not br.secondary <= bus <= br.subordinate or br.secondary != cur + 1:
                return False
            cur = br.secondary
        return True

    def _memory(self, addr: int, be: int, value: int | None) -> tuple[int | None, int]:
        pci = self.dev.pci
        if not all(self.bridges[b].forwards(addr) for b in self.bridges):
            return (CPL_UR, 0) if value is None else (CPL_SC, 0)
        hit = next((i for i in (0, 2, 5) if pci.addrs[i] <= addr < pci.addrs[i] + pci.sizes[i]), None)
        if hit is None or not pci.memory_enabled:
            return (CPL_UR, 0) if value is None else (CPL_SC, 0)    # a posted write to nowhere vanishes
        if not self.gpu_answers:
            return None, 0
        bar, off = self.fn.bar(hit), addr - pci.addrs[hit]
        if off + 4 > self.dev.vram.size and hit == 0:
            return CPL_UR, 0
        if value is None:
            return CPL_SC, bar.read32(off)
        if be == 0xF:
            bar.write32(off, value)
        elif hit == 0:
            for k in range(4):
                if be >> k & 1:
                    bar.write(off + k, bytes([(value >> (8 * k)) & 0xFF]))
        else:                               # registers take whole dwords: merge with what they hold
            old = bar.read32(off)
            mask = sum(0xFF << (8 * k) for k in range(4) if be >> k & 1)
            bar.write32(off, (old & ~mask) | (value & mask))
        return CPL_SC, 0

    def round_trip(self) -> None:
        """One more round trip on the link: the host waits the link's latency (USB3_GEN2.round_trip_s, a stated
        setting: 100 us, an assumption) for the bridge's answer, and the GPU runs meanwhile, on the stepped clock
        for that long (the open firmware's model does the same, gpusim.usb_open_firmware _latency). The steps are
        run by run_gpu before the bridge's next access to the GPU or its SRAM, and at the end of the transfer
        (one clock run instead of two: the clock skips polls that find nothing, SimGPU.schedule_poll, but each
        run looks once)."""
        self.counters.round_trips += 1
        if self.dev.stepped:
            self._owed += round(USB3_GEN2.round_trip_s * 1e9) // self.dev.STEP_NS

    def run_gpu(self, steps: int = 0) -> None:
        """The GPU runs the round trips' latency not run yet, plus `steps` (stepped mode)."""
        if self.dev.stepped:
            n, self._owed = self._owed + steps, 0
            if n:
                self.dev.step(n)

    # -- SCSI -----------------------------------------------------------------------------------
    def begin(self, cdb: bytes, counted: bool = True) -> int:
        """Starts a SCSI command; returns its data phase: +n bytes it takes, -n bytes it offers, 0 none.
        The data moves through data_in()/data_out(); `status` and `sense` are its outcome. `counted`: the
        command is its own round trip (a stream batch counts its commands and its one round trip itself)."""
        self._last_sense = self.sense_data()        # REQUEST SENSE reports the previous command's
        if counted:
            self.counters.commands += 1
            self.round_trip()
        self._cdb, self.status, self.sense = bytes(cdb), 0, (0, 0)
        # The GPU runs while the bridge works: on the simulator's stepped clock one step a command, on top of
        # the round trip's latency (round_trip), so a host polling memory through the bridge (no register
        # read) sees the GPU progress as it would over the wire.
        self.run_gpu(1)
        op = cdb[0] if cdb else None
        if op == OP_XDATA_READ:
            return -cdb[1]
        if op == OP_XDATA_WRITE:
            self.xdata_write((cdb[2] << 16) | (cdb[3] << 8) | cdb[4], cdb[1])
            return 0
        if op == OP_WRITE16 and len(cdb) >= 16:
            lba, blocks = struct.unpack_from(">QI", cdb, 2)
            if (lba + blocks) * BLOCK > SRAM_SIZE:
                return self._fail(ASC_LBA_OUT_OF_RANGE)
            return blocks * BLOCK
        if op == OP_REQUEST_SENSE:
            return -min(cdb[4], 18)
        if op == OP_TEST_UNIT_READY:
            return 0
        return self._fail(ASC_INVALID_OPCODE)

    def _fail(self, asc: int) -> int:
        self.status, self.sense = 2, (SENSE_ILLEGAL_REQUEST, asc)     # CHECK CONDITION, no data phase
        return 0

    def sense_data(self) -> bytes:
        """Fixed-format sense data (SPC: response code 0x70, key in byte 2, ASC in byte 12)."""
        key, asc = self.sense
        out = bytearray(18)
        out[0], out[2], out[7], out[12] = 0x70, key, 10, asc
        return bytes(out)

    def data_in(self, n: int) -> bytes:
        self.run_gpu()
        cdb = self._cdb
        if cdb[0] == OP_XDATA_READ:
            return self.xdata_read((cdb[2] << 16) | (cdb[3] << 8) | cdb[4], n)
        return self._last_sense[:n]

    def data_out(self, at: int, data: bytes) -> None:
        """WRITE(16) data: into the SRAM from LBA * 512 on."""
        self.run_gpu()
        base = struct.unpack_from(">Q", self._cdb, 2)[0] * BLOCK + at
        self.sram[base:base + len(data)] = data


@dataclass
class _Task:
    """A command IU the bridge has received (UAS with streams) and not yet answered on its status stream.
    `response`: answer with a Response IU of this code instead of running the command."""
    tag: int
    cdb: bytes
    response: int | None = None
    started: bool = False
    direction: int = 0                  # as ASM24Bridge.begin returns it
    moved: int = 0                      # data-out bytes taken so far
    data_done: bool = False
    status: int = 0
    sense: bytes = b""


def _as(buff, data: bytes):
    return type(buff)(buff.typecode, data) if hasattr(buff, "typecode") else data


class _Desc:
    def __init__(self, **kw):
        self.extra_descriptors = []
        self.__dict__.update(kw)


# UAS pipe ids (UAS 1.0, Pipe Usage descriptor): command 1, status 2, data-in 3, data-out 4.
UAS_PIPES = {EP_COMMAND: 1, EP_STATUS: 2, EP_DATA_IN: 3, EP_DATA_OUT: 4}
UAS_STREAMS_LOG2 = 5            # 32 streams per endpoint in the SuperSpeed endpoint companion
MAX_STREAMS = 1 << UAS_STREAMS_LOG2
STREAM_ENDPOINTS = (EP_DATA_IN, EP_STATUS, EP_DATA_OUT)


def _runs_gpu(transfer):
    """A backend call the host waits for: the GPU has run the latency of its round trips when it returns."""
    @functools.wraps(transfer)
    def call(self, *args, **kwargs):
        try:
            return transfer(self, *args, **kwargs)
        finally:
            self.bridge.run_gpu()
    return call


def _endpoint(addr: int, uas: bool) -> _Desc:
    d = _Desc(bLength=7, bDescriptorType=5, bEndpointAddress=addr, bmAttributes=2,
              wMaxPacketSize=MAX_PACKET, bInterval=0, bRefresh=0, bSynchAddress=0)
    # SuperSpeed endpoint companion (bMaxBurst 15); UAS: streams on all but the command pipe, Pipe Usage
    streams = UAS_STREAMS_LOG2 if uas and addr != EP_COMMAND else 0
    d.extra_descriptors = [6, 0x30, 15, streams, 0, 0] + ([4, 0x24, UAS_PIPES[addr], 0] if uas else [])
    return d


# alt 0: Bulk-Only (class 08 SCSI 06 protocol 0x50); alt 1: UAS (protocol 0x62)
ALTS = {0: (0x50, (EP_DATA_IN, EP_DATA_OUT)), 1: (0x62, (EP_DATA_IN, EP_STATUS, EP_DATA_OUT, EP_COMMAND))}


class BridgeBackend(usb.backend.IBackend):
    """pyusb backend presenting one ASM24xx bridge; transfers run the bridge model."""

    def __init__(self, bridge: ASM24Bridge, pid: int = 0x2464, bus: int = 1, address: int | None = None):
        if pid not in PRODUCTS:
            raise ValueError(f"usb bridge: product id {pid:#06x} is not an ASM24xx ({PRODUCTS})")
        self.bridge, self.pid, self.bus, self.address = bridge, pid, bus, usb_address(bridge, address)
        self.alt = 0
        self.alts = (0,) if pid == 0x2463 else (0, 1)     # the ROM (0x2463) has Bulk-Only only
        self.streams: dict[int, int] = {}                   # endpoint -> bulk streams allocated (1..n)
        self.tasks: deque[_Task] = deque()                  # UAS task set with streams, in arrival order
        self._trip = False                                  # this stream batch's round trip is counted
        self._reset_protocol()

    def _reset_protocol(self) -> None:
        self.phase = "command"      # command, in, out, status
        self.expect = self.moved = self.direction = self.tag = 0
        self.host_in = False

    # -- descriptors ----------------------------------------------------------------------------
    def enumerate_devices(self):
        return [] if self.bridge.gone else [self]

    def get_device_descriptor(self, dev):
        return _Desc(bLength=18, bDescriptorType=1, bcdUSB=0x0320, bDeviceClass=0, bDeviceSubClass=0,
                     bDeviceProtocol=0, bMaxPacketSize0=9, idVendor=VENDOR_ASMEDIA, idProduct=self.pid,
                     bcdDevice=0x0001, iManufacturer=2, iProduct=3, iSerialNumber=1, bNumConfigurations=1,
                     address=self.address, bus=self.bus, port_number=1, port_numbers=(1,), speed=5)

    def get_configuration_descriptor(self, dev, config):
        total = sum(9 + sum(7 + 6 + 4 * (a == 1) for _ in ALTS[a][1]) for a in self.alts)
        return _Desc(bLength=9, bDescriptorType=2, wTotalLength=9 + total, bNumInterfaces=1,
                     bConfigurationValue=1, iConfiguration=0, bmAttributes=0xC0, bMaxPower=0)

    def get_interface_descriptor(self, dev, intf, alt, config):
        if intf != 0 or alt not in self.alts:
            raise IndexError(f"usb bridge: one interface, alternate settings {self.alts} (0 BOT, 1 UAS)")
        proto, eps = ALTS[alt]
        return _Desc(bLength=9, bDescriptorType=4, bInterfaceNumber=0, bAlternateSetting=alt,
                     bNumEndpoints=len(eps), bInterfaceClass=0x08, bInterfaceSubClass=0x06,
                     bInterfaceProtocol=proto, iInterface=0)

    def get_endpoint_descriptor(self, dev, ep, intf, alt, config):
        return _endpoint(ALTS[alt][1][ep], alt == 1)

    # -- handles --------------------------------------------------------------------------------
    def open_device(self, dev):
        self._alive()
        return self

    def close_device(self, dev_handle):
        # The enclosure is unplugged from this process: a GPU kept in a state file is saved there and its
        # lock released, so the next process (or open) finds it as this one left it.
        if self.bridge.fn.state is not None:
            self.bridge.fn.close()

    def set_configuration(self, dev_handle, config_value):
        self._alive()

    def get_configuration(self, dev_handle):
        return 1

    def set_interface_altsetting(self, dev_handle, intf, altsetting):
        self._alive()
        if intf != 0 or altsetting not in self.alts:
            raise usb.core.USBError(f"Pipe error (no alternate setting {altsetting})", LIBUSB_ERROR_PIPE, errno.EPIPE)
        self.alt = altsetting
        self._reset_protocol()
        self._drop_streams()

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

    def reset_device(self, dev_handle):
        """A USB port reset: the firmware restarts its protocol state; XDATA and SRAM keep their bytes."""
        self._alive()
        self.bridge.wedged = False
        self.bridge.faults.pop("stall", None)
        self._reset_protocol()
        self._drop_streams()

    # -- transfers ------------------------------------------------------------------------------
    def _alive(self) -> None:
        if self.bridge.gone:
            raise usb.core.USBError("No such device (it may have been disconnected)", LIBUSB_ERROR_NO_DEVICE,
                                    errno.ENODEV)

    def _transfer(self, n: int, bulk: bool = True) -> None:
        self._alive()
        b = self.bridge
        if bulk and "stall" in b.faults:
            if b.faults["stall"] == 0:
                del b.faults["stall"]
                b.wedged = True
            else:
                b.faults["stall"] -= 1
        if bulk and b.wedged:
            raise usb.core.USBTimeoutError("Operation timed out", LIBUSB_ERROR_TIMEOUT, errno.ETIMEDOUT)
        b.counters.transfers += 1
        b.counters.payload_bytes += n
        b.counters.wire_bytes += wire_bytes(n)

    @staticmethod
    def _pipe(why: str):
        return usb.core.USBError(f"Pipe error ({why})", LIBUSB_ERROR_PIPE, errno.EPIPE)

    @_runs_gpu
    def bulk_write(self, dev_handle, ep, intf, data, timeout):
        data = bytes(data)
        self._no_stream_id(ep)
        uas = self.alt == 1
        if uas and ep == EP_COMMAND and self.streams:      # into the task set; answered on a status stream
            self._check_iu(data)
            self._transfer(len(data))
            self.bridge.round_trip()
            self._receive(data)
            self._run({})
            return len(data)
        self._transfer(len(data))
        if (ep == EP_COMMAND and uas) or (ep == EP_DATA_OUT and not uas and self.phase == "command"):
            self._command(data, uas)
        elif ep == EP_DATA_OUT and self.phase == "out":
            if self.moved + len(data) > self.expect:
                raise self._pipe(f"{len(data)} bytes past the {self.expect}-byte data phase")
            if self.direction > 0:          # what the command takes lands; the rest is dropped
                self.bridge.data_out(self.moved, data[:max(0, self.direction - self.moved)])
            self.moved += len(data)
            if self.moved == self.expect:
                self.phase = "status"
        else:
            raise self._pipe(f"endpoint {ep:#04x} takes no data in phase {self.phase!r}")
        return len(data)

    def _command(self, data: bytes, uas: bool) -> None:
        if uas:
            if len(data) < 32 or data[0] != UAS_COMMAND_IU:
                raise self._pipe("not a UAS command IU")
            self.tag, cdb = struct.unpack_from(">H", data, 2)[0], data[16:32]
            self.direction = self.bridge.begin(cdb)
            self.expect, self.host_in = abs(self.direction), self.direction < 0
        else:
            if len(data) != 31 or struct.unpack_from("<I", data)[0] != BOT_CBW_SIG:
                raise self._pipe("not a 31-byte CBW")
            self.tag, self.expect, flags = struct.unpack_from("<IIB", data, 4)
            self.host_in = bool(flags & 0x80)
            self.direction = self.bridge.begin(data[15:15 + data[14]])
        self.moved = 0
        self.phase = ("in" if self.host_in else "out") if self.expect else "status"

    @_runs_gpu
    def bulk_read(self, dev_handle, ep, intf, buff, timeout):
        self._no_stream_id(ep)
        uas = self.alt == 1
        if ep == EP_DATA_IN and self.phase == "in":
            n = min(len(buff), self.expect - self.moved)
            have = self.bridge.data_in(-self.direction) if self.direction < 0 else b""
            chunk = have[self.moved:self.moved + n]
            chunk += bytes(n - len(chunk))          # BOT: the device pads what it does not have
            self._transfer(n)
            buff[:n] = _as(buff, chunk)
            self.moved += n
            if self.moved == self.expect:
                self.phase = "status"
            return n
        if (ep == EP_STATUS and uas) or (ep == EP_DATA_IN and not uas):
            if self.phase != "status":
                self._transfer(0)
                raise self._pipe(f"no status to send in phase {self.phase!r}")
            out = self._status_block(uas)
            self._transfer(len(out))
            n = min(len(buff), len(out))
            buff[:n] = _as(buff, out[:n])
            self._reset_protocol()
            return n
        self._transfer(0)
        raise self._pipe(f"endpoint {ep:#04x} has nothing to send in phase {self.phase!r}")

    def _status_block(self, uas: bool) -> bytes:
        b = self.bridge
        if uas:
            sense = b.sense_data() if b.status else b""
            return struct.pack(">BBHHB7xH", UAS_SENSE_IU, 0, self.tag, 0, b.status, len(sense)) + sense
        # BOT (Bulk-Only Transport 1.0, 6.7): the device wanting more data than the host allowed, or
        # data the other way, is a phase error; less data than allowed leaves a residue.
        d, offered = self.direction, abs(self.direction)
        agree = d == 0 or (d < 0) == self.host_in
        if d and (not agree or offered > self.expect):
            status = 2
        else:
            status = 1 if b.status else 0
        residue = self.expect - (min(offered, self.expect) if agree else 0)
        return struct.pack("<IIIB", BOT_CSW_SIG, self.tag, residue, status)

    @_runs_gpu
    def ctrl_transfer(self, dev_handle, bmRequestType, bRequest, wValue, wIndex, data, timeout):
        self._alive()
        b = self.bridge
        b.round_trip()
        n = len(data) if data is not None else 0
        self._transfer(n, bulk=False)
        if bmRequestType == 0x21 and bRequest == 0xFF:          # Bulk-Only Mass Storage Reset
            self._reset_protocol()
            return 0
        if bmRequestType & 0x80:
            raise self._pipe(f"control request {bmRequestType:#04x}/{bRequest:#04x} is not supported")
        if bmRequestType & 0x60 == 0x40:                      # vendor requests: the stock firmware has none
            raise self._pipe(f"vendor control request {bRequest:#04x}: the stock firmware stalls it")
        return n

    # -- USB 3 bulk streams (UAS): the backend extension a libusb streams link calls -----------------
    # pyusb has no stream API. These follow libusb_alloc_streams / libusb_free_streams and libusb's
    # asynchronous transfers with a stream id: submit every transfer, then handle events until all complete.

    def _drop_streams(self) -> None:
        self.streams.clear()
        self.tasks.clear()

    def _no_stream_id(self, ep: int) -> None:
        """A transfer without a stream id on an endpoint with streams is refused before it reaches the wire
        (xHCI takes stream 0 on such an endpoint as invalid)."""
        self._alive()
        if ep in self.streams:
            raise self._pipe(f"endpoint {ep:#04x} has bulk streams: a transfer needs a stream id (submit_streams)")

    def alloc_streams(self, dev_handle, num_streams: int, endpoints) -> int:
        """Allocates streams 1..n on the UAS data-in, status and data-out endpoints (alternate setting 1);
        returns n = min(num_streams, 32). Endpoints that already have streams are refused (free them first),
        as Linux refuses a re-allocation."""
        self._alive()
        eps = [int(e) for e in endpoints]
        if self.alt != 1:
            raise self._pipe(f"bulk streams need alternate setting 1 (UAS), not {self.alt}")
        if not eps or any(e not in STREAM_ENDPOINTS for e in eps):
            raise self._pipe(f"streams only on endpoints {', '.join(f'{e:#04x}' for e in STREAM_ENDPOINTS)}, "
                             f"not {[hex(e) for e in eps]}")
        if num_streams < 1:
            raise self._pipe(f"{num_streams} streams")
        if any(e in self.streams for e in eps):
            raise self._pipe("endpoint already has streams (free_streams first)")
        n = min(int(num_streams), MAX_STREAMS)
        for e in eps:
            self.streams[e] = n
        return n

    def free_streams(self, dev_handle, endpoints) -> None:
        """Frees the endpoints' streams (each must have some); commands still waiting on them are dropped."""
        self._alive()
        eps = [int(e) for e in endpoints]
        if not eps or any(e not in self.streams for e in eps):
            raise self._pipe(f"no streams to free on {[hex(e) for e in eps]}")
        for e in eps:
            del self.streams[e]
        self.tasks.clear()

    @_runs_gpu
    def submit_streams(self, dev_handle, transfers, timeout: int) -> None:
        """Submits every transfer at once and waits until all complete: ONE round trip.

        A transfer is any object with `endpoint`, `stream` (0 only on the command pipe 0x04) and `buffer`
        (the data for OUT endpoints; a writable bytearray of the requested length for IN endpoints); each
        that completes gets `actual` (bytes moved; IN: the first `actual` bytes of buffer) and
        `status = "completed"`. The command IUs are received in list order, then the firmware runs them one
        at a time in that order: tag T's data on stream T of 0x81/0x02, its Sense IU (or Response IU) on
        stream T of 0x83. Pieces that are missing hang as on the wire: the firmware stops at the first
        command it cannot finish, and the call raises USBTimeoutError after what could run has run (the
        transfers left get status "timed out"; a command of the submission left unanswered times it out too,
        even with no transfer of the host's pending; the unfinished commands stay in the bridge's task set and a
        later submission can bring what they wait for). A submission the bridge refuses (no alternate
        setting 1, a stream not allocated, stream 0 on a stream endpoint, a command IU whose tag has no
        status stream) raises the pipe error before anything moves; a data-out transfer longer than its
        command takes raises it when reached (that transfer "stalled", the others not done "cancelled", the
        task set cleared). `timeout` is not modeled: what would hang raises at once."""
        self._alive()
        transfers = list(transfers)
        if not transfers:
            return
        if self.alt != 1:
            raise self._pipe(f"bulk streams need alternate setting 1 (UAS), not {self.alt}")
        for t in transfers:
            ep, stream = t.endpoint, t.stream
            if ep == EP_COMMAND:
                if stream:
                    raise self._pipe(f"the command pipe {EP_COMMAND:#04x} has no streams (stream {stream})")
                self._check_iu(bytes(t.buffer))
            elif ep in STREAM_ENDPOINTS:
                n = self.streams.get(ep, 0)
                if not 1 <= stream <= n:
                    raise self._pipe(f"stream {stream} on endpoint {ep:#04x}: "
                                     + (f"streams 1..{n} allocated" if n else "no streams allocated"))
            else:
                raise self._pipe(f"endpoint {ep:#04x} is not a UAS pipe")
        for t in transfers:
            t.actual, t.status = 0, "pending"
        queues: dict[tuple[int, int], deque] = {}
        for t in transfers:
            if t.endpoint != EP_COMMAND:
                queues.setdefault((t.endpoint, t.stream), deque()).append(t)
        self._trip = False
        received = []
        try:
            for t in transfers:
                if t.endpoint == EP_COMMAND:
                    iu = bytes(t.buffer)
                    self._move(t, len(iu))
                    received.append(self._receive(iu))
            self._run(queues)
        except usb.core.USBError as e:
            left = "timed out" if isinstance(e, usb.core.USBTimeoutError) else "cancelled"
            for t in transfers:
                if t.status == "pending":
                    t.status = left
            raise
        left = [t for t in transfers if t.status == "pending"]
        waiting = [task.tag for task in self.tasks if any(task is r for r in received)]
        if left or waiting:
            for t in left:
                t.status = "timed out"
            what = ", ".join(f"{t.endpoint:#04x}/{t.stream}" for t in left[:8])
            raise usb.core.USBTimeoutError(f"Operation timed out ({len(left)} of {len(transfers)} transfers never "
                                           f"completed: endpoint/stream {what or '-'}; commands not answered: "
                                           f"tags {waiting[:8]})", LIBUSB_ERROR_TIMEOUT, errno.ETIMEDOUT)

    def _move(self, t, n: int) -> None:
        """One transfer of a batch moves n bytes (counted as _transfer does); the batch is one round trip."""
        self._transfer(n)
        if not self._trip:
            self._trip = True
            self.bridge.round_trip()
        t.actual, t.status = n, "completed"

    def _check_iu(self, iu: bytes) -> None:
        """A command IU's tag must name a status stream; otherwise there is nowhere to answer it."""
        n = self.streams.get(EP_STATUS, 0)
        tag = struct.unpack_from(">H", iu, 2)[0] if len(iu) >= 4 else None
        if tag is None or not 1 <= tag <= n:
            raise self._pipe(f"command IU tag {tag}: no status stream for it (streams 1..{n})")

    def _receive(self, iu: bytes) -> _Task:
        """A command IU arrives: into the task set; malformed or overlapped ones get a Response IU."""
        self.bridge.counters.commands += 1
        tag = struct.unpack_from(">H", iu, 2)[0]
        task = _Task(tag, iu[16:32])
        if len(iu) < 32 or iu[0] != UAS_COMMAND_IU or iu[4] & 7 not in UAS_TASK_ATTRIBUTES:
            task.response = RC_INVALID_IU
        elif any(x.tag == tag for x in self.tasks):
            task.response = RC_OVERLAPPED_TAG
        self.tasks.append(task)
        return task

    def _run(self, queues: dict) -> None:
        """The firmware: one command at a time, in arrival order, until one waits for a transfer not there."""
        b = self.bridge
        while self.tasks:
            task = self.tasks[0]
            if task.response is None:
                if not task.started:
                    task.direction, task.started = b.begin(task.cdb, counted=False), True
                    task.status, task.sense = b.status, (b.sense_data() if b.status else b"")
                if task.direction < 0 and not task.data_done:
                    q = queues.get((EP_DATA_IN, task.tag))
                    if not q:
                        return
                    t = q[0]
                    n = min(len(t.buffer), -task.direction)     # what it has, up to the host's length
                    data = b.data_in(-task.direction)[:n]
                    self._move(t, n)
                    q.popleft()
                    t.buffer[:n] = _as(t.buffer, data)
                    task.data_done = True
                while task.direction > 0 and task.moved < task.direction:
                    q = queues.get((EP_DATA_OUT, task.tag))
                    if not q:
                        return
                    t = q[0]
                    data = bytes(t.buffer)
                    if task.moved + len(data) > task.direction:
                        t.status = "stalled"
                        self.tasks.clear()
                        raise self._pipe(f"{len(data)} bytes of data-out past the {task.direction}-byte data "
                                         f"phase of tag {task.tag}")
                    self._move(t, len(data))
                    q.popleft()
                    b.data_out(task.moved, data)
                    task.moved += len(data)
                iu = struct.pack(">BBHHB7xH", UAS_SENSE_IU, 0, task.tag, 0, task.status, len(task.sense)) + task.sense
            else:
                iu = struct.pack(">BBH3xB", UAS_RESPONSE_IU, 0, task.tag, task.response)
            q = queues.get((EP_STATUS, task.tag))
            if not q:
                return
            t = q[0]
            n = min(len(t.buffer), len(iu))
            self._move(t, n)
            q.popleft()
            t.buffer[:n] = _as(t.buffer, iu[:n])
            self.tasks.popleft()


def usb_address(bridge: ASM24Bridge, address: int | None) -> int:
    """The enclosure's USB device address: given, or 2 + the simulated GPU's slot on its bus, so two simulated
    bridges on one bus have distinct USB paths and the transport's per-bridge locks (usb:BUS-ADDR, pcie.lock) are
    distinct too (the open firmware's enumerate on bus 2). USB addresses are 1..127 (USB 2.0 9.4.6)."""
    if address is None:
        address = 2 + bridge.fn.slot
    if not 1 <= address <= 127:
        raise ValueError(f"usb bridge: USB address {address} (slot {bridge.fn.slot}) is outside 1..127")
    return address


def open_bridge(chip: str = "navi31", *, gpu_bus: int = 4, **sim) -> ASM24Bridge:
    """The bridge in front of the simulated GPU of `chip` (sim keywords go to gpusim.provider.open_function).
    Reopening the same device finds its enclosure as it was left (bus numbers, BARs, XDATA, SRAM); a new
    device (fresh=True) comes with a new enclosure, just powered on."""
    host = sim.get("bus") or provider.default_bus()
    if sim.get("slot") is None and hasattr(host, "pick_slot"):   # the enclosure already holding that chip first
        sim["slot"] = host.pick_slot(chip, enclosed=True)
    fn = provider.open_function(chip, **sim)
    host = fn.host_bus
    host.held.pop(fn.slot, None)  # the enclosure reaches the GPU, not a driver: the USB transport's lock says who drives it
    br = host.enclosures.get(fn.slot)
    if br is not None and br.dev is fn.dev and br.gpu_bus == gpu_bus:
        host.unplug(fn.dev)
        BridgeBus(br).plug(fn.dev)
        br.fn, br.gone, br.wedged = fn, False, False
        return br
    br = host.enclosures[fn.slot] = ASM24Bridge(fn, gpu_bus=gpu_bus)
    return br


def backend(chip: str = "navi31", *, pid: int = 0x2464, gpu_bus: int = 4, bridge: ASM24Bridge | None = None,
            firmware: str = "stock", **sim):
    """The pyusb backend for usb.core.find(..., backend=...): one ASM24xx bridge with the GPU behind it, running
    the stock firmware (BridgeBackend) or, firmware="open", the open replacement (gpusim.usb_open_firmware)."""
    if firmware == "open":
        from gpusim import usb_open_firmware
        return usb_open_firmware.backend(chip, gpu_bus=gpu_bus, bridge=bridge, **sim)
    if firmware != "stock":
        raise ValueError(f"usb bridge: firmware {firmware!r}; 'stock' or 'open'")
    return BridgeBackend(bridge or open_bridge(chip, gpu_bus=gpu_bus, **sim), pid=pid)
