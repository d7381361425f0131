"""A PCI function behind an ASM24xx USB-to-PCIe bridge: the `usb` pcie provider.

    open_function(spec="", *, backend=None, timeout_ms=1000) -> USBFunction
    parse_device_string("am:usb" | "am:usb:BUS-ADDR") -> (provider, args)

Config space and MMIO are TLPs the bridge's engine sends (pcie.usb.protocol). Posted memory writes are
queued and sent at `BAR.flush()` or before the next read, which is the ordering PCIe gives posted writes
anyway; the engine's address/byte-enable/type bytes are cached so unchanged ones are not rewritten.
At open the driver walks the bridges from bus 0 to the first display-class endpoint, programs each
bridge's bus numbers and memory windows, and places the GPU's memory BARs below 4 GiB (3-dword TLPs
only), so a BAR must fit there: the 256 MiB VRAM aperture does, a resized one does not.

The GPU reaches host memory only through the bridge: `alloc_dma` hands out 4 KiB pages of the bridge's
SRAM (512 KiB at bus 0x200000) at the bus addresses the GPU must use; their host view is a shadow the
caller moves with `push()` (any page) and `pull()` (the first page only) (docs/usb.md, Driver transport).
"""
from __future__ import annotations

from importlib import metadata

import struct
import time

from pcie.interface import BAR, DMABuffer, PCIError, PCIFunction
from pcie.lock import DeviceLock
from pcie.usb import protocol as p
from pcie.usb.link import (BridgeError, BridgeNotFound, Bulk, Command, Control, detect_firmware, find_bridges,
                            make_link, name_of)

MAX_BRIDGE_DEPTH = 8
MMIO_BASE = 0x1000_0000      # where memory BARs start (below 4 GiB)
MMIO_LIMIT = 1 << 32
POLLS = 64                   # status reads before a request counts as unanswered
RETRIES = 3                  # a timed-out TLP is retried this often (tinygrad retries too)
CRS_RETRIES = 10
XDATA_PUSH_MAX = 64          # a push this short into the read-back page goes byte by byte through XDATA
MERGE_PUSH_MAX = 128 << 10   # open firmware: two queued pushes of one buffer within this span go as one
STREAM_MIN_DWORDS = 16       # open firmware: a posted write of this many aligned dwords or more goes as one 0xF0 stream
STREAM_MAX_BYTES = 256 << 10 # one 0xF0 stream's data at most: the firmware sends a TLP a dword (~3.6 MB/s written,
                             # 1.8 MB/s read, its README), so this is ~70-150 ms, well inside a transfer's deadline
SCRATCH_PAGES = range(1, 4)  # open firmware: slot 0's pages after the read-back page, for scratch pages
READS_PER_BATCH = 16         # register reads sent as one batch (read32_many): the open firmware's 32 requests a round trip
MAX_PENDING = 512            # queued commands sent at once: a bulk copy goes out while it is being made, so
                             # the read after it (a firmware wait with its own deadline) does not pay for it


class LinkDown(BridgeError):
    pass


class GPUNotAnswering(BridgeError):
    pass


def parse_device_string(text: str) -> tuple[str, tuple]:
    """`am:usb` -> ("usb", ("",)), `am:usb:3-7` -> ("usb", ("3-7",)); for amdrv.device_spec."""
    parts = text.strip().split(":")
    if len(parts) < 2 or parts[0].lower() != "am" or parts[1].lower() != "usb" or len(parts) > 3:
        raise PCIError(f"{text!r} is not a USB device string; expected am:usb or am:usb:BUS-ADDR (e.g. am:usb:3-7)")
    if len(parts) == 2:
        return "usb", ("",)
    bus, dash, addr = parts[2].partition("-")
    if not (dash and bus.isdigit() and addr.isdigit()):
        raise PCIError(f"{text!r}: USB location {parts[2]!r} is not BUS-ADDR (decimal, as `lsusb` prints "
                       f"'Bus 003 Device 007' -> 3-7)")
    return "usb", (f"{int(bus)}-{int(addr)}",)


def open_function(spec: str = "", *, backend=None, timeout_ms: int = 1000, lock_dir=None, root=None,
                  sim: dict | None = None) -> USBFunction:
    """The `driverless.pcie` entry point "usb": spec "" (first bridge) or "BUS-ADDR". lock_dir: where the
    per-bridge lock file goes (pcie.lock); root (the sysfs root other providers take) is not used.
    spec "sim:CHIP" (from `am:sim:usb`) plugs in the simulated bridge's pyusb backend, found by name in the
    `driverless.usb_backends` entry-point group so that the driver never imports the simulator; `sim`
    holds that backend's keywords (state=PATH: the simulated GPU's state file, from amdrv.device_spec)."""
    if spec.startswith("sim"):
        backend, spec = _named_backend("sim")(spec.partition(":")[2] or "navi31", **(sim or {})), ""
    found = find_bridges(backend)
    if not found:
        raise BridgeNotFound("usb: no ASM24xx USB-to-PCIe bridge found (ids 174c:236x/246x, 2d01:3666); is the "
                             "enclosure plugged in and powered, and can this user open it (docs/usb.md)?")
    if spec:
        chosen = [d for d in found if name_of(d) == spec]
        if not chosen:
            raise BridgeNotFound(f"usb: no bridge at {spec}; bridges: {', '.join(name_of(d) for d in found)}")
        found = chosen
    cls = OpenUSBFunction if detect_firmware(found[0]) == "open" else USBFunction
    return cls(found[0], timeout_ms=timeout_ms, lock_dir=lock_dir)


def _named_backend(name: str):
    eps = {ep.name: ep for ep in metadata.entry_points(group="driverless.usb_backends")}
    if name not in eps:
        raise BridgeNotFound(f"usb: no pyusb backend named {name!r} is installed (driverless.usb_backends: "
                             f"{', '.join(sorted(eps)) or 'none'})")
    return eps[name].load()


class USBBAR(BAR):
    def __init__(self, fn: USBFunction, index: int, address: int, size: int):
        self.fn, self.index, self.address, self.size = fn, index, address, size

    def read32(self, offset: int) -> int:
        self._check(offset, 4, 4)
        self.fn.counters.mmio_reads += 1
        return self.fn._mem_read(self.address + offset, 4)

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4, 4)
        self.fn.counters.mmio_writes += 1
        self.fn._mem_write(self.address + offset, 4, value & 0xFFFFFFFF)

    def read32_many(self, offsets) -> list[int]:
        """Several reads in one batch behind the queued writes: each request followed by the reads of its status
        and completion, the next request after them (the bridge runs a batch in order)."""
        offsets = list(offsets)
        if not getattr(self.fn.link, "pipelined", True):
            return [self.read32(o) for o in offsets]   # each read alone keeps its data for a write that follows
        for o in offsets:
            self._check(o, 4, 4)
        self.fn.counters.mmio_reads += len(offsets)
        out = []
        for i in range(0, len(offsets), READS_PER_BATCH):
            out += self.fn._mem_reads([self.address + o for o in offsets[i:i + READS_PER_BATCH]])
        return out

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        self.fn.counters.bulk_read_bytes += size
        return self.fn._mem_read_bytes(self.address + offset, size)

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self.fn.counters.bulk_write_bytes += len(data)
        self.fn._mem_write_bytes(self.address + offset, bytes(data))

    def flush(self) -> None:
        self.fn.flush()


def _pieces(address: int, size: int):
    """Splits a byte range into accesses that stay inside one dword (a TLP's byte enables)."""
    end = address + size
    while address < end:
        n = min(4 - (address & 3), end - address)
        yield address, n
        address += n


class WindowBuffer(DMABuffer):
    """Whole 4 KiB pages of the bridge's SRAM: the GPU reaches them at `bus_address()`, the host through a
    shadow (not coherent): `push(offset, size)` sends the pages the range touches (one WRITE(16) each),
    `pull(offset, size)` fetches what the GPU wrote, which only the window's first page (XDATA 0xF000)
    allows: `alloc_dma(..., readback=True)` hands that page out."""
    coherent = False

    def __init__(self, fn: USBFunction, first: int, pages: int, size: int):
        self.fn, self.first, self.pages, self.size = fn, first, pages, size
        self._shadow = bytearray(pages * p.WINDOW_PAGE)
        self._view: memoryview | None = memoryview(self._shadow)[:size]

    @property
    def view(self) -> memoryview:
        if self._view is None:
            raise PCIError(f"{self.fn.address}: DMA buffer at bus "
                           f"{p.WINDOW_BUS + self.first * p.WINDOW_PAGE:#x} used after free")
        return self._view

    def bus_address(self, offset: int = 0) -> int:
        if not 0 <= offset < self.size:
            raise PCIError(f"{self.fn.address}: offset {offset:#x} is outside the {self.size:#x}-byte DMA buffer")
        return p.WINDOW_BUS + self.first * p.WINDOW_PAGE + offset

    def _range(self, offset: int, size: int | None) -> tuple[int, int]:
        size = self.size - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > self.size:
            raise PCIError(f"{self.fn.address}: range {offset:#x}+{size:#x} is outside the {self.size:#x}-byte "
                           f"DMA buffer")
        self.view
        return offset, size

    def push(self, offset: int = 0, size: int | None = None) -> None:
        """Ranges of up to XDATA_PUSH_MAX bytes in the read-back page go byte-exact through its XDATA view
        (posted E5 writes), so they do not overwrite what the device wrote next to them (signals); other
        ranges send the whole pages they touch."""
        offset, size = self._range(offset, size)
        if size and self.first == 0 and size <= XDATA_PUSH_MAX:
            self.fn._queue_write(p.WINDOW_XDATA + offset, bytes(self._shadow[offset:offset + size]), cached=False)
        elif size:
            lo, hi = offset // p.WINDOW_PAGE, -(-(offset + size) // p.WINDOW_PAGE)
            self.fn._window_push(self.first + lo, self._shadow[lo * p.WINDOW_PAGE:hi * p.WINDOW_PAGE])

    def pull(self, offset: int = 0, size: int | None = None) -> None:
        offset, size = self._range(offset, size)
        if self.first or offset + size > p.WINDOW_PAGE:
            raise PCIError(f"{self.fn.address}: the host reads back only the window's first 4 KiB page (XDATA "
                           f"{p.WINDOW_XDATA:#x}, bus {p.WINDOW_BUS:#x}); allocate read-back buffers with "
                           f"alloc_dma(size, readback=True), 4 KiB at most")
        if size:
            self._view[offset:offset + size] = self.fn._xdata_read(p.WINDOW_XDATA + offset, size)

    _slots = "_window"     # the function's table of taken pages this buffer's pages are marked in

    def free(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
            getattr(self.fn, self._slots)[self.first:self.first + self.pages] = [False] * self.pages


class USBFunction(PCIFunction):
    # assumption: no public documentation of the bridges says how (or whether) a GPU's MSI write could
    # become a USB event the host can wait on; the transport does not use one
    msi_unavailable = "the USB bridge delivers no interrupts to the host"
    dma_coherent = False    # alloc_dma's buffers are host shadows of the bridge's SRAM (push/pull)

    def __init__(self, dev, timeout_ms: int = 1000, lock_dir=None):
        super().__init__(f"usb:{name_of(dev)}")
        self._lock = DeviceLock(self.address, lock_dir)     # one driver process per bridge
        try:
            self.link = make_link(dev, self.counters, timeout_ms)
        except BaseException:
            self._lock.release()
            raise
        self._pending: list[Command] = []
        self._cache: dict[int, int] = {}
        self._window = [False] * (p.WINDOW_SIZE // p.WINDOW_PAGE)     # pages in use
        self._bars: dict[int, USBBAR] = {}
        try:
            self._setup()
            self.gpu_bus = self._enumerate()
        except BaseException:
            self.link.close()
            self._lock.release()
            raise

    firmware = "stock"

    def _setup(self) -> None:
        self._xdata_write_now(p.INIT_WRITES)

    # -- XDATA

    def _queue_write(self, address: int, data: bytes, cached: bool) -> None:
        for i, b in enumerate(data):
            a = address + i
            if cached and self._cache.get(a) == b:
                continue
            self._pending.append(Command(p.xdata_write_cdb(a, b)))
            self._cache[a] = b
        if len(self._pending) >= MAX_PENDING:
            self.flush()

    def _xdata_write_now(self, writes) -> None:
        for address, data in writes:
            self._queue_write(address, data, cached=False)
        self.flush()

    def _xdata_read(self, address: int, size: int) -> bytes:
        cmds = [Command(p.xdata_read_cdb(address + o, min(p.XDATA_READ_MAX, size - o)),
                        read=min(p.XDATA_READ_MAX, size - o)) for o in range(0, size, p.XDATA_READ_MAX)]
        for o in range(size):
            self._cache.pop(address + o, None)
        return b"".join(self._run(cmds))

    def queue_xdata(self, address: int, data: bytes) -> None:
        """Queues byte writes of XDATA (0xE5 each), sent with the next batch."""
        self._queue_write(address, data, cached=False)

    def read_then_write(self, reads: list[tuple[int, int]], writes: list[tuple[int, bytes]]) -> list[bytes]:
        """The queued posted writes, XDATA reads of (address, size), then XDATA byte writes, as one batch: the
        bridge runs a batch in order, so the writes land after the reads. Returns each read's bytes."""
        cmds, ends = [], []
        for a, n in reads:
            for o in range(0, n, p.XDATA_READ_MAX):
                k = min(p.XDATA_READ_MAX, n - o)
                cmds.append(Command(p.xdata_read_cdb(a + o, k), read=k))
            ends.append(len(cmds))
            for o in range(n):
                self._cache.pop(a + o, None)
        after = [Command(p.xdata_write_cdb(a + i, v)) for a, data in writes for i, v in enumerate(data)]
        batch, self._pending = self._pending + cmds + after, []
        got = self.link.execute(batch)
        first = len(batch) - len(cmds) - len(after)
        data, out, i = got[first:first + len(cmds)], [], 0
        for j in ends:
            out.append(b"".join(data[i:j]))
            i = j
        return out

    def _run(self, reads: list[Command]) -> list[bytes]:
        """The queued posted writes, then `reads`, as one batch (the writes land first: the bridge runs a
        batch in order); returns the reads' data."""
        batch, self._pending = self._pending + reads, []
        return self.link.execute(batch)[len(batch) - len(reads):]

    def flush(self) -> None:
        """Sends the queued posted writes (one batch; over BOT each is still its own round trip)."""
        if self._pending:
            batch, self._pending = self._pending, []
            self.link.execute(batch)

    # -- TLPs

    def _request(self, fmt_type: int, address: int, size: int, value: int | None, what: str) -> int | None:
        offset = address & 3
        if value is not None:
            self._queue_write(p.TLP_DATA, struct.pack(">I", (value << 8 * offset) & 0xFFFFFFFF), cached=True)
        self._queue_write(p.TLP_ADDRESS, struct.pack(">I", address & 0xFFFFFFFC), cached=True)
        self._queue_write(p.TLP_BYTE_ENABLE, bytes((((1 << size) - 1) << offset,)), cached=True)
        self._queue_write(p.TLP_FMT_TYPE, bytes((fmt_type,)), cached=True)
        self._queue_write(p.TLP_KICK, bytes((p.TLP_KICK_VALUE,)), cached=False)
        self._queue_write(p.TLP_STATUS, bytes((p.TLP_STATUS_SENT,)), cached=False)
        if p.is_posted(fmt_type):
            return None
        for o in range(4):                     # the completion overwrites the data register
            self._cache.pop(p.TLP_DATA + o, None)
        for attempt in range(RETRIES + 1):
            status, raw = self._poll(what)
            if status & p.TLP_STATUS_DONE:
                break
            self._queue_write(p.TLP_STATUS, bytes((p.TLP_STATUS_ERROR,)), cached=False)   # clear, resend
            if attempt < RETRIES:
                self._queue_write(p.TLP_KICK, bytes((p.TLP_KICK_VALUE,)), cached=False)
                self._queue_write(p.TLP_STATUS, bytes((p.TLP_STATUS_SENT,)), cached=False)
        else:
            self.flush()
            raise self._no_answer(what)
        for o in range(4):   # the data register now holds the completion data, just read: a write that
            self._cache[p.TLP_DATA + o] = raw[o]   # follows (read-modify-write) resends changed bytes only
        cpl = struct.unpack_from(">H", raw, p.TLP_COMPLETION - p.TLP_DATA)[0]
        return _completion(f"{self.address}: {what}", cpl, struct.unpack_from(">I", raw, 0)[0], fmt_type, size,
                           offset, value)

    def _poll(self, what: str) -> tuple[int, bytes]:
        """The engine's status and completion registers, read in the batch that carries the queued request
        (the bridge runs a batch in order): one round trip on a pipelining link when the completion is in by
        the time the bridge runs the reads, as it is for a GPU answering in microseconds."""
        n = p.TLP_COMPLETION + 2 - p.TLP_DATA
        reads = [Command(p.xdata_read_cdb(p.TLP_STATUS, 1), read=1), Command(p.xdata_read_cdb(p.TLP_DATA, n), read=n)]
        for _ in range(POLLS):
            status, raw = self._run(reads)
            if status[0] & (p.TLP_STATUS_DONE | p.TLP_STATUS_ERROR):
                return status[0], raw
        raise self._no_answer(what)

    def _no_answer(self, what: str) -> BridgeError:
        return GPUNotAnswering(f"{self.address}: {what}: no completion after {RETRIES + 1} tries; the GPU "
                               f"does not answer (powered off, hung, or link lost)")

    def _config(self, bus: int, offset: int, size: int, value: int | None = None) -> int | None:
        if size not in (1, 2, 4) or offset % size or not 0 <= offset < 0x1000:
            raise PCIError(f"{self.address}: config access of {size} bytes at {offset:#x} is misaligned or out "
                           f"of range")
        fmt = (p.CFGWR0 if value is not None else p.CFGRD0) | (p.CFG_TYPE1 if bus else 0)
        what = f"config {'write' if value is not None else 'read'} {offset:#x} at {bus:02x}:00.0"
        for _ in range(CRS_RETRIES):
            try:
                return self._request(fmt, p.config_address(bus, 0, 0, offset) | (offset & 3), size, value, what)
            except _CompletionError as e:
                if e.status != 2:
                    raise
                time.sleep(0.001)    # CRS: the device is still initializing
        raise GPUNotAnswering(f"{self.address}: {what}: the device kept answering 'retry' (still initializing)")

    def _mem_read(self, address: int, size: int) -> int:
        return self._request(p.MRD32, address, size, None, f"memory read at {address:#x}")

    def _mem_reads(self, addresses: list[int]) -> list[int]:
        """Dword reads, each request's status and completion read right behind it, all in one batch; a read
        whose status does not say done then is sent again alone (_request: its retries and errors)."""
        n = p.TLP_COMPLETION + 2 - p.TLP_DATA
        if len(self._pending) + 12 * len(addresses) >= MAX_PENDING:
            self.flush()
        where = []
        for a in addresses:
            self._queue_write(p.TLP_ADDRESS, struct.pack(">I", a & 0xFFFFFFFC), cached=True)
            self._queue_write(p.TLP_BYTE_ENABLE, b"\x0f", cached=True)
            self._queue_write(p.TLP_FMT_TYPE, bytes((p.MRD32,)), cached=True)
            self._queue_write(p.TLP_KICK, bytes((p.TLP_KICK_VALUE,)), cached=False)
            self._queue_write(p.TLP_STATUS, bytes((p.TLP_STATUS_SENT,)), cached=False)
            where.append(len(self._pending))
            self._pending += [Command(p.xdata_read_cdb(p.TLP_STATUS, 1), read=1),
                              Command(p.xdata_read_cdb(p.TLP_DATA, n), read=n)]
        batch, self._pending = self._pending, []
        got = self.link.execute(batch)
        out, last = [], where[-1]
        for o in range(4):                     # the data register holds the last completion's data now
            if got[last][0] & p.TLP_STATUS_DONE:
                self._cache[p.TLP_DATA + o] = got[last + 1][o]
            else:
                self._cache.pop(p.TLP_DATA + o, None)
        for a, i in zip(addresses, where):
            status, raw = got[i][0], got[i + 1]
            if not status & p.TLP_STATUS_DONE:
                if status & p.TLP_STATUS_ERROR:
                    self._queue_write(p.TLP_STATUS, bytes((p.TLP_STATUS_ERROR,)), cached=False)
                out.append(self._mem_read(a, 4))
                continue
            cpl = struct.unpack_from(">H", raw, p.TLP_COMPLETION - p.TLP_DATA)[0]
            what = f"memory read at {a:#x}"
            if cpl >> 13:
                raise _CompletionError(cpl >> 13, f"{self.address}: {what}: "
                                                  f"{p.COMPLETION_STATUS.get(cpl >> 13, f'reserved status {cpl >> 13:#05b}')}")
            if cpl & 0xFFF != 4:
                raise BridgeError(f"{self.address}: {what}: completion byte count {cpl & 0xFFF} (expected 4)")
            out.append(struct.unpack_from(">I", raw, 0)[0])
        return out

    def _mem_write(self, address: int, size: int, value: int) -> None:
        self._request(p.MWR32, address, size, value, f"memory write at {address:#x}")

    # -- the PCIe tree behind the bridge

    def _mem_read_bytes(self, address: int, size: int) -> bytes:
        """A memory read of any size and alignment: one TLP per dword (the engine sends no more)."""
        out = bytearray()
        for a, n in _pieces(address, size):
            out += self._mem_read(a, n).to_bytes(n, "little")
        return bytes(out)

    def _mem_write_bytes(self, address: int, data: bytes) -> None:
        """Posted memory writes of any size and alignment: one TLP per dword, byte enables at the ends."""
        pos = 0
        for a, n in _pieces(address, len(data)):
            self._mem_write(a, n, int.from_bytes(data[pos:pos + n], "little"))
            pos += n

    def _enumerate(self) -> int:
        self.gpu_bus = None
        for bus in range(MAX_BRIDGE_DEPTH):
            try:
                vendor = self._config(bus, 0, 2)
            except GPUNotAnswering:
                if bus == 0:
                    raise LinkDown(f"{self.address}: nothing answers on the bridge's PCIe port (bus 0): the PCIe "
                                   f"link behind the bridge is down; check the GPU's power cables and reseat the "
                                   f"card") from None
                raise
            except _CompletionError as e:
                if bus == 0:
                    raise LinkDown(f"{self.address}: the bridge's PCIe port answers {e}; the link is down") from None
                raise GPUNotAnswering(f"{self.address}: nothing at bus {bus} behind the bridge ({e}); the GPU "
                                      f"does not answer: check its power and seating") from None
            if vendor in (0xFFFF, 0):
                raise GPUNotAnswering(f"{self.address}: bus {bus} reads vendor {vendor:#06x}: no device answers")
            header = self._config(bus, 0x0E, 1) & 0x7F
            if header == 1:
                self._config(bus, 0x18, 4, bus | ((bus + 1) << 8) | (MAX_BRIDGE_DEPTH << 16))
                self._config(bus, 0x20, 4, ((MMIO_LIMIT - 1) >> 16 & 0xFFF0) << 16 | (MMIO_BASE >> 16))
                self._config(bus, 0x24, 4, ((MMIO_LIMIT - 1) >> 16 & 0xFFF0) << 16 | (MMIO_BASE >> 16))
                self._config(bus, 0x28, 4, 0)
                self._config(bus, 0x2C, 4, 0)
                self._config(bus, 0x04, 2, 0x0006)       # memory space, bus master (forwards GPU DMA)
                continue
            if self._config(bus, 0x0B, 1) != 0x03:
                raise GPUNotAnswering(f"{self.address}: the endpoint at bus {bus} ({vendor:04x}) is not a GPU "
                                      f"(class {self._config(bus, 0x0B, 1):#04x})")
            self.gpu_bus = bus
            self._assign_bars()
            return bus
        raise GPUNotAnswering(f"{self.address}: more than {MAX_BRIDGE_DEPTH} bridges and no GPU behind the bridge")

    def _assign_bars(self) -> None:
        bus, found, reg = self.gpu_bus, [], 0x10
        self._config(bus, 0x04, 2, self._config(bus, 0x04, 2) & ~0x6)   # decode off while sizing
        self._shrink_resizable_bars()
        while reg < 0x28:
            low = self._config(bus, reg, 4)
            if low & 1:                                                # I/O BAR: not used over USB
                reg += 4
                continue
            wide = (low >> 1) & 3 == 2
            self._config(bus, reg, 4, 0xFFFFFFFF)
            mask = self._config(bus, reg, 4) & ~0xF
            if wide:
                self._config(bus, reg + 4, 4, 0xFFFFFFFF)
                mask |= self._config(bus, reg + 4, 4) << 32
            size = (~mask + 1) & ((1 << (64 if wide else 32)) - 1)
            if size:
                found.append(((reg - 0x10) // 4, reg, wide, size))
            reg += 8 if wide else 4
        address = MMIO_BASE
        for index, reg, wide, size in sorted(found, key=lambda b: -b[3]):
            address = -(-address // size) * size
            if address + size > MMIO_LIMIT:
                raise BridgeError(f"{self.address}: BAR{index} ({size >> 20} MiB) does not fit below 4 GiB next to "
                                  f"the others; the bridge path needs the 256 MiB VRAM aperture (no resizable BAR)")
            self._config(bus, reg, 4, address & 0xFFFFFFFF)
            if wide:
                self._config(bus, reg + 4, 4, 0)
            self._bars[index] = USBBAR(self, index, address, size)
            address += size
        self._config(bus, 0x04, 2, self._config(bus, 0x04, 2) | 0x2)     # memory decode on

    def _shrink_resizable_bars(self) -> None:
        """Every BAR in the Physical Resizable BAR capability (PCI_EXT_CAP_ID_REBAR 0x15, pci_regs.h) goes to
        its smallest size, so all fit below 4 GiB for 3-dword TLPs: the 256 MiB VRAM aperture of small-BAR."""
        bus, cap, seen = self.gpu_bus, 0x100, set()
        while cap and cap not in seen:
            seen.add(cap)
            header = self._config(bus, cap, 4)
            if header & 0xFFFF == 0x15:
                count = (self._config(bus, cap + 8, 4) >> 5) & 7
                for i in range(count):
                    sizes = self._config(bus, cap + 4 + 8 * i, 4) >> 4
                    ctrl = self._config(bus, cap + 8 + 8 * i, 4)
                    if sizes:
                        smallest = (sizes & -sizes).bit_length() - 1
                        if (ctrl >> 8) & 0x3F != smallest:
                            self._config(bus, cap + 8 + 8 * i, 4, (ctrl & ~0x3F00) | (smallest << 8))
                return
            cap = header >> 20

    # -- PCIFunction

    def config_read(self, offset: int, size: int) -> int:
        self.counters.config_reads += 1
        return self._config(self.gpu_bus, offset, size)

    def config_write(self, offset: int, size: int, value: int) -> None:
        self.counters.config_writes += 1
        self._config(self.gpu_bus, offset, size, value & ((1 << 8 * size) - 1))

    def bar(self, index: int) -> BAR:
        if index not in self._bars:
            raise PCIError(f"{self.address}: BAR{index} is not a memory BAR placed behind the bridge; "
                           f"memory BARs: {', '.join(f'BAR{i}' for i in sorted(self._bars)) or 'none'}")
        return self._bars[index]

    def alloc_dma(self, size: int, *, readback: bool = False, device_written: bool = False) -> DMABuffer:
        """Pages of the bridge's SRAM (512 KiB), first fit. The first page is the only one the host reads back,
        so it goes to a readback=True buffer (4 KiB at most) and to nothing else. device_written: a hint the
        open firmware's slots need (OpenUSBFunction.alloc_dma); WRITE(16) pushes whole pages, so not here."""
        pages = -(-size // p.WINDOW_PAGE)
        if readback:
            if not 0 < size <= p.WINDOW_PAGE:
                raise PCIError(f"{self.address}: a read-back DMA buffer of {size:#x} bytes: the host reads back "
                               f"only the window's first page ({p.WINDOW_PAGE:#x} bytes, XDATA {p.WINDOW_XDATA:#x})")
            if self._window[0]:
                raise PCIError(f"{self.address}: the window's one read-back page (bus {p.WINDOW_BUS:#x}) is in use; "
                               f"free that DMA buffer first, or put signals the host polls in one page")
            self._window[0] = True
            return WindowBuffer(self, 0, 1, size)
        if size <= 0 or pages >= len(self._window):
            raise PCIError(f"{self.address}: DMA buffer of {size:#x} bytes: the bridge's SRAM holds "
                           f"{p.WINDOW_SIZE >> 10} KiB, its first page kept for read-back, {self.sram_left() >> 10} "
                           f"KiB free (docs/usb.md, SRAM budget); allocate less, or VRAM")
        for first in range(1, len(self._window) - pages + 1):
            if not any(self._window[first:first + pages]):
                self._window[first:first + pages] = [True] * pages
                return WindowBuffer(self, first, pages, size)
        raise self._sram_full(size, pages * p.WINDOW_PAGE)

    def sram_left(self) -> int:
        """Bytes of the bridge's SRAM no DMA buffer holds."""
        return self._window.count(False) * p.WINDOW_PAGE

    def _sram_full(self, size: int, need: int) -> PCIError:
        return PCIError(f"{self.address}: no room for a DMA buffer of {size:#x} bytes ({need >> 10} KiB contiguous) "
                        f"in the bridge's {p.WINDOW_SIZE >> 10} KiB SRAM (bus {p.WINDOW_BUS:#x}): "
                        f"{self.sram_left() >> 10} KiB left, not in one piece that large. Everything the GPU reads "
                        f"from the host lives there (docs/usb.md, SRAM budget): free DMA buffers (host buffers, "
                        f"graphs) first, or put the data in VRAM")

    def _window_push(self, first: int, data: bytes) -> None:
        """Whole pages from page `first` on, one WRITE(16) per 64 KiB (p.WRITE16_MAX, tinygrad's chunk), each
        followed by the firmware's bookkeeping reset (as tinygrad does), queued like posted writes: they go out
        with the next batch, in order with the MMIO around them."""
        for i in range(0, len(data), p.WRITE16_MAX):
            lba = (first * p.WINDOW_PAGE + i) // p.BLOCK
            chunk = bytes(data[i:i + p.WRITE16_MAX])
            self._pending.append(Command(p.write16_cdb(lba, len(chunk)), write=chunk))
            for address, reset in p.WRITE16_RESETS:
                self._queue_write(address, reset, cached=False)

    def close(self) -> None:
        if self.link is not None:
            try:
                self.flush()
            finally:
                self.link.close()
                self.link = None
                self._lock.release()


class _CompletionError(BridgeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _completion(where: str, cpl: int, data: int, fmt_type: int, size: int, offset: int, value: int | None):
    """A TLP's completion (status and byte count from its completion word; data: the completion's data dword,
    as both firmwares return it): a read's value, None for a write; an error status or a short completion
    raises, naming the request (where)."""
    status, count = cpl >> 13, cpl & 0xFFF
    if status:
        raise _CompletionError(status, f"{where}: {p.COMPLETION_STATUS.get(status, f'reserved status {status:#05b}')}")
    expected = 4 if fmt_type & 0xBE == p.CFGRD0 else size
    if value is None and count != expected:
        raise BridgeError(f"{where}: completion byte count {count} (expected {expected})")
    if value is None:
        return (data >> 8 * offset) & ((1 << 8 * size) - 1)
    return None


class SlotBuffer(WindowBuffer):
    """A DMA buffer on the open firmware: pages of the SRAM, pushed by its DMA (0xF2), which starts at a 16 KiB
    slot: push() sends from the start of the slot the range touches to the sector that holds its end. The host
    view is the function's one shadow of the whole SRAM, so the pages before the range in that slot (another
    small buffer's) go out as the host last wrote them; buffers the device writes get whole slots of their own
    (OpenUSBFunction.alloc_dma)."""

    def __init__(self, fn: "OpenUSBFunction", first: int, pages: int, size: int):
        self.fn, self.first, self.pages, self.size = fn, first, pages, size
        at = first * p.WINDOW_PAGE
        self._shadow = memoryview(fn._sram)[at:at + pages * p.WINDOW_PAGE]
        self._shadow[:] = bytes(len(self._shadow))
        self._view = self._shadow[:size]

    def push(self, offset: int = 0, size: int | None = None) -> None:
        offset, size = self._range(offset, size)
        if size and self.first == 0 and size <= XDATA_PUSH_MAX:
            self.fn._queue_write(p.WINDOW_XDATA + offset, bytes(self._shadow[offset:offset + size]), cached=False)
        elif size:
            base = self.first * p.WINDOW_PAGE
            start = (base + offset) // p.SRAM_SLOT * p.SRAM_SLOT
            end = base + -(-(offset + size) // p.BLOCK) * p.BLOCK
            last = self.fn._last_push
            pending = self.fn._pending
            if last is not None and last[0] is self and len(pending) >= 2 and pending[-1] is last[3] and \
                    max(end, last[2]) - min(start, last[1]) <= MERGE_PUSH_MAX:
                # the same buffer's previous push is still the last thing queued (a ring's dwords, then its
                # write-pointer word): one 0xF2 request for both ranges
                del pending[-2:]
                start, end = min(start, last[1]), max(end, last[2])
            self.fn._sram_push(start, self.fn._sram[start:end])
            self.fn._last_push = (self, start, end, self.fn._pending[-1])

    def free(self) -> None:
        if self._view is not None:
            self._view.release()
            self._shadow.release()
            self._view = None
            self.fn._release(self.first, self.pages)


class ScratchBuffer(SlotBuffer):
    """Scratch pages in slot 0 (OpenUSBFunction.alloc_dma(scratch=True)): bytes nobody relies on, which the
    copier's windows may overwrite; pushing them would be pointless, so it is refused."""

    def __init__(self, fn: "OpenUSBFunction", first: int, pages: int, size: int):
        self.fn, self.first, self.pages, self.size = fn, first, pages, size
        self._shadow = memoryview(bytearray(pages * p.WINDOW_PAGE))
        self._view = self._shadow[:size]

    def push(self, offset: int = 0, size: int | None = None) -> None:
        raise PCIError(f"{self.fn.address}: a scratch page (bus {self.bus_address():#x}) is not pushed: its bytes are "
                       "nobody's (the bulk copies' windows overwrite them)")

    _slots = "_scratch_used"
    free = WindowBuffer.free     # its pages are marked in the scratch table, not SlotBuffer's slots


class OpenUSBFunction(USBFunction):
    """The bridge running the open firmware (pcie.usb.protocol; link.VendorLink): TLPs by 0xF0 requests (a
    read: the request and its 8-byte completion report in one round trip), XDATA by 0xE4 (512 bytes a read)
    and 0xE5, DMA buffers in the SRAM's 32 slots of 16 KiB (alloc_dma), pushed by 0xF2 and bulk OUT."""

    firmware = "open"
    SLOTS = p.SRAM_SLOTS             # what the SRAM has (0xF2's one-byte slot number could name 256)
    _last_push = None            # (buffer, start, end, its queued bulk transfer), SRAM offsets: SlotBuffer.push merges

    def _setup(self) -> None:
        # the stock controller's set-up bytes (tinygrad's) are for ASMedia's firmware; the host's one view
        # of the SRAM (SlotBuffer) and which slots hold whole buffers, shared small ones, or nothing
        self._sram = bytearray(p.WINDOW_SIZE)
        self._slot_kind: list[str | None] = [None] * self.SLOTS
        self.sram_reclaimers: list = []      # callables giving SRAM buffers back (True if they freed any)
        self._scratch_used = [False] * (p.SRAM_SLOT // p.WINDOW_PAGE)

    def _queue_write(self, address: int, data: bytes, cached: bool) -> None:
        for i, b in enumerate(data):
            self._pending.append(Control(p.REQ_OUT, p.REQ_XDATA_WRITE, (address + i) & 0xFFFF, b))
        if len(self._pending) >= MAX_PENDING:
            self.flush()

    def _xdata_read(self, address: int, size: int) -> bytes:
        step = p.OPEN_XDATA_READ_MAX
        cmds = [Control(p.REQ_IN, p.REQ_XDATA_READ, (address + o) & 0xFFFF, 0, length=min(step, size - o))
                for o in range(0, size, step)]
        got = b"".join(self._run(cmds))
        if len(got) != size:
            raise BridgeError(f"{self.address}: XDATA read of {size} bytes at {address:#06x} returned {len(got)}")
        return got

    def _request(self, fmt_type: int, address: int, size: int, value: int | None, what: str) -> int | None:
        offset = address & 3
        be = ((1 << size) - 1) << offset
        data = struct.pack("<III", address & 0xFFFFFFFC, address >> 32,
                           (value << 8 * offset) & 0xFFFFFFFF if value is not None else 0)
        send = Control(p.REQ_OUT, p.REQ_PCIE, fmt_type | (be << 8), p.PCIE_SINGLE, data)
        self._pending.append(send)
        if p.is_posted(fmt_type):
            if len(self._pending) >= MAX_PENDING:
                self.flush()
            return None
        report = Control(p.REQ_IN, p.REQ_PCIE, 0, 0, length=8)
        for attempt in range(RETRIES + 1):
            raw = self._run([report])[0]
            if raw[7] == 0:
                break
            if attempt < RETRIES:
                self._pending.append(send)          # no completion or the error bit: resend (as the stock path)
        else:
            raise self._no_answer(what)
        return _completion(f"{self.address}: {what}", (raw[4] << 8) | raw[5], struct.unpack_from("<I", raw, 0)[0],
                           fmt_type, size, offset, value)

    def _mem_reads(self, addresses: list[int]) -> list[int]:
        """Dword reads as one batch: each 0xF0 request followed by its report; one whose report is not a completion
        is sent again alone (_request: its retries and errors)."""
        items = []
        for a in addresses:
            data = struct.pack("<III", a & 0xFFFFFFFC, a >> 32, 0)
            items += [Control(p.REQ_OUT, p.REQ_PCIE, p.MRD32 | (0xF << 8), p.PCIE_SINGLE, data),
                      Control(p.REQ_IN, p.REQ_PCIE, 0, 0, length=8)]
        got = self._run(items)
        out = []
        for k, a in enumerate(addresses):
            raw = got[2 * k + 1]
            cpl = (raw[4] << 8) | raw[5]
            if raw[7] != 0 or cpl >> 13 or cpl & 0xFFF != 4:
                out.append(self._mem_read(a, 4))     # its own request: retried, or the error raised as such
                continue
            out.append(struct.unpack_from("<I", raw, 0)[0])
        return out

    def _mem_write_bytes(self, address: int, data: bytes) -> None:
        """Posted writes; the dword-aligned middle of STREAM_MIN_DWORDS or more goes as 0xF0 streamed writes
        (mode 1: the dword count, then the data on bulk OUT, a memory write per dword at increasing addresses;
        asm2464pd-firmware handmade/src/main.c): one round trip for up to STREAM_MAX_BYTES, queued like posted
        writes (the link ends the round trip after the bulk data, so what is queued after them waits for them)."""
        head = -address % 4
        body = (len(data) - head) // 4 * 4 if len(data) > head else 0
        if body // 4 < STREAM_MIN_DWORDS:
            return super()._mem_write_bytes(address, data)
        if head:
            super()._mem_write_bytes(address, data[:head])
        for at in range(0, body, STREAM_MAX_BYTES):
            part = data[head + at:head + min(body, at + STREAM_MAX_BYTES)]
            a = address + head + at
            self._pending.append(Control(p.REQ_OUT, p.REQ_PCIE, p.MWR32 | (0x0F << 8), p.PCIE_STREAM_WRITE,
                                         struct.pack("<III", a & 0xFFFFFFFF, a >> 32, len(part) // 4)))
            self._pending.append(Bulk(p.OPEN_BULK_OUT, bytes(part)))
        if head + body < len(data):
            super()._mem_write_bytes(address + head + body, data[head + body:])
        if len(self._pending) >= MAX_PENDING:
            self.flush()

    def _mem_read_bytes(self, address: int, size: int) -> bytes:
        """Reads; the dword-aligned middle of two dwords or more comes as 0xF0 streamed reads (mode 2: the
        dword count, the data on bulk IN): one round trip for up to STREAM_MAX_BYTES, after the queued writes."""
        head = -address % 4
        body = (size - head) // 4 * 4 if size > head else 0
        if body < 8:
            return super()._mem_read_bytes(address, size)
        out = bytearray(super()._mem_read_bytes(address, head) if head else b"")
        for at in range(0, body, STREAM_MAX_BYTES):
            n = min(STREAM_MAX_BYTES, body - at)
            a = address + head + at
            arm = Control(p.REQ_OUT, p.REQ_PCIE, p.MRD32 | (0x0F << 8), p.PCIE_STREAM_READ,
                          struct.pack("<III", a & 0xFFFFFFFF, a >> 32, n // 4))
            out += self._run([arm, Bulk(p.OPEN_BULK_IN, length=n)])[1]
        if head + body < size:
            out += super()._mem_read_bytes(address + head + body, size - head - body)
        return bytes(out)

    def alloc_dma(self, size: int, *, readback: bool = False, device_written: bool = False, scratch: bool = False,
                  over_scratch: bool = False) -> DMABuffer:
        """_alloc_sram; where the SRAM is full, the holders of reclaimable buffers (sram_reclaimers: the bulk
        copier's windows, amdrv.bridge_copy) give theirs back first, then it is tried again.
        scratch=True: pages whose bytes nobody relies on (amdgpu's dummy page: the IH's dummy reads, the hubs'
        default page for faulting accesses): slot 0's pages after its first (SCRATCH_PAGES), which a buffer
        allocated with over_scratch=True (the copier's windows, which then own slot 0) may overlap."""
        if scratch:
            return self._alloc_scratch(size)
        kw = dict(readback=readback, device_written=device_written, over_scratch=over_scratch)
        try:
            return self._alloc_sram(size, **kw)
        except PCIError:
            if not any([reclaim() for reclaim in list(self.sram_reclaimers)]):
                raise
        return self._alloc_sram(size, **kw)

    def _alloc_scratch(self, size: int) -> DMABuffer:
        pages = -(-size // p.WINDOW_PAGE)
        for at in range(SCRATCH_PAGES.start, SCRATCH_PAGES.stop - pages + 1):
            if not any(self._scratch_used[at:at + pages]):
                self._scratch_used[at:at + pages] = [True] * pages
                return ScratchBuffer(self, at, pages, size)
        return self._alloc_sram(size)          # slot 0's scratch pages are taken: an ordinary shared page

    def _alloc_sram(self, size: int, *, readback: bool = False, device_written: bool = False,
                    over_scratch: bool = False) -> DMABuffer:
        """Pages of the SRAM (its 32 slots of 16 KiB). Slot 0's first page is the one the host reads back (XDATA
        0xF000), for a readback=True buffer of at most 4 KiB; the rest of slot 0 stays unused, since a push
        into it would resend that page from the host's view over what the device wrote there. A buffer of a
        slot or more, or one the device writes and the host reads (device_written=True: a push of a neighbour
        would resend it from the host's view), takes whole slots; smaller ones share slots with each other
        (page tables, dummy pages: the host is their only writer)."""
        per = p.SRAM_SLOT // p.WINDOW_PAGE
        if readback:
            if not 0 < size <= p.WINDOW_PAGE:
                raise PCIError(f"{self.address}: a read-back DMA buffer of {size:#x} bytes: the host reads back "
                               f"only the window's first page ({p.WINDOW_PAGE:#x} bytes, XDATA {p.WINDOW_XDATA:#x})")
            if self._window[0]:
                raise PCIError(f"{self.address}: the window's one read-back page (bus {p.WINDOW_BUS:#x}) is in use; "
                               f"free that DMA buffer first, or put signals the host polls in one page")
            self._window[0:per] = [True] * per
            self._slot_kind[0] = "whole"
            return SlotBuffer(self, 0, per, size)
        pages = -(-size // p.WINDOW_PAGE)
        if size <= 0 or pages > (self.SLOTS - (0 if over_scratch else 1)) * per:
            raise PCIError(f"{self.address}: DMA buffer of {size:#x} bytes: the bridge's SRAM holds "
                           f"{self.SLOTS} slots of {p.SRAM_SLOT >> 10} KiB, slot 0 kept for read-back, "
                           f"{self.sram_left() >> 10} KiB free (docs/usb.md, SRAM budget); allocate less, or VRAM")
        if pages < per and not device_written:
            for slot in [k for k in range(1, self.SLOTS) if self._slot_kind[k] == "shared"] + \
                        [k for k in range(1, self.SLOTS) if self._slot_kind[k] is None]:
                for at in range(slot * per, (slot + 1) * per - pages + 1):
                    if not any(self._window[at:at + pages]):
                        self._window[at:at + pages] = [True] * pages
                        self._slot_kind[slot] = "shared"
                        return SlotBuffer(self, at, pages, size)
            raise self._sram_full(size, pages * p.WINDOW_PAGE)
        slots = -(-pages // per)
        for first in range(0 if over_scratch else 1, self.SLOTS - slots + 1):
            if all(self._slot_free(k, over_scratch) for k in range(first, first + slots)):
                at = first * per
                self._window[at:at + slots * per] = [True] * (slots * per)
                self._slot_kind[first:first + slots] = ["whole"] * slots
                return SlotBuffer(self, at, slots * per, size)
        raise self._sram_full(size, slots * p.SRAM_SLOT)

    def sram_left(self) -> int:
        """Bytes of the SRAM a new buffer could still get (slot 0's unused pages are not counted)."""
        per = p.SRAM_SLOT // p.WINDOW_PAGE
        return sum(self._window[k * per:(k + 1) * per].count(False) for k in range(1, self.SLOTS)
                   if self._slot_kind[k] != "whole") * p.WINDOW_PAGE

    def sram_free_slots(self, over_scratch: bool = False) -> int:
        """Slots no buffer holds any page of (what a buffer of whole slots can still get); over_scratch: with
        slot 0 where only scratch pages are in it (what the copier's windows may take)."""
        return sum(self._slot_free(k, over_scratch) for k in range(self.SLOTS))

    def sram_free_run(self, over_scratch: bool = False) -> int:
        """The longest run of free slots (the largest buffer of whole slots that fits now)."""
        best = run = 0
        for k in range(self.SLOTS):
            run = run + 1 if self._slot_free(k, over_scratch) else 0
            best = max(best, run)
        return best

    def _slot_free(self, k: int, over_scratch: bool) -> bool:
        if k == 0:      # slot 0: the read-back page and the scratch pages; whole only over scratch
            return over_scratch and self._slot_kind[0] is None
        return self._slot_kind[k] is None

    def _release(self, first: int, pages: int) -> None:
        per = p.SRAM_SLOT // p.WINDOW_PAGE
        self._window[first:first + pages] = [False] * pages
        for k in range(first // per, -(-(first + pages) // per)):
            if not any(self._window[k * per:(k + 1) * per]):
                self._slot_kind[k] = None

    def _sram_push(self, offset: int, data: bytes) -> None:
        """0xF2 (host to SRAM) from the slot at `offset` on, then the data on bulk OUT, queued like posted
        writes (the link ends the round trip after the bulk data, so what follows waits for them)."""
        step = p.SRAM_SLOTS_MAX * p.SRAM_SLOT
        for i in range(0, len(data), step):
            chunk = bytes(data[i:i + step])
            chunk += bytes(-len(chunk) % p.BLOCK)
            slot = (offset + i) // p.SRAM_SLOT
            self._pending.append(Control(p.REQ_OUT, p.REQ_SRAM_DMA, len(chunk) // p.BLOCK,
                                         slot | (-(-len(chunk) // p.SRAM_SLOT) << 8)))
            self._pending.append(Bulk(p.OPEN_BULK_OUT, chunk))
        if len(self._pending) >= MAX_PENDING:
            self.flush()

    def _window_push(self, first: int, data: bytes) -> None:
        self._sram_push(first * p.WINDOW_PAGE, data)

    # -- what bulk copies use (amdrv.bridge_copy)

    sram_dma = True

    def execute(self, items: list) -> list:
        """The queued posted writes, then `items` (link.Control / link.Bulk), sent as the link batches them;
        returns each item's IN data (None for OUT)."""
        return self._run(list(items))

    def queue(self, item) -> None:
        """Queues a link.Control behind the posted writes queued so far: it goes out, in order, with the next
        batch (what must precede a doorbell queued after it on EP0: an SRAM-to-host DMA's arm)."""
        self._pending.append(item)

    def completion_window(self) -> "BusWindow":
        """The bridge's completion window (PCIe 0x822000, 4 KiB) for the GPU's page tables: a GPU write there
        releases an armed SRAM-to-host DMA."""
        return BusWindow(self, p.COMPLETION_WINDOW, p.WINDOW_PAGE)


class BusWindow:
    """Bus addresses of the bridge the GPU may write that are not host memory (no host view)."""
    coherent = False

    def __init__(self, fn, base: int, size: int):
        self.fn, self.base, self.size = fn, base, size

    def bus_address(self, offset: int = 0) -> int:
        if not 0 <= offset < self.size:
            raise PCIError(f"{self.fn.address}: offset {offset:#x} is outside the bridge window at {self.base:#x}")
        return self.base + offset


def sram_dma_request(buf: WindowBuffer, nbytes: int, to_host: bool = False, offset: int = 0) -> Control:
    """0xF2 for `nbytes` (whole sectors) from `offset` of `buf` (a SlotBuffer; offset on a slot boundary of
    the SRAM) on."""
    at = buf.first * p.WINDOW_PAGE + offset
    if at % p.SRAM_SLOT:
        raise PCIError(f"{buf.fn.address}: an SRAM DMA from SRAM offset {at:#x}: 0xF2 starts at a "
                       f"{p.SRAM_SLOT >> 10} KiB slot")
    first = at // p.SRAM_SLOT
    sectors = -(-nbytes // p.BLOCK)
    slots = -(-nbytes // p.SRAM_SLOT)
    if sectors > p.SRAM_SECTORS_MAX or first + slots > p.SRAM_SLOTS or offset + nbytes > buf.size:
        raise PCIError(f"{buf.fn.address}: an SRAM DMA (0xF2) of {nbytes:#x} bytes from slot {first} runs past the "
                       f"{buf.size:#x}-byte buffer or the SRAM's {p.SRAM_SLOTS} slots of {p.SRAM_SLOT >> 10} KiB "
                       f"({(p.SRAM_SLOTS - first) * p.SRAM_SLOT:#x} bytes left from that slot); send less")
    return Control(p.REQ_OUT, p.REQ_SRAM_DMA, sectors | (p.SRAM_DMA_IN if to_host else 0), first | (slots << 8))


def xdata_writes(address: int, data: bytes) -> list[Control]:
    return [Control(p.REQ_OUT, p.REQ_XDATA_WRITE, (address + i) & 0xFFFF, b) for i, b in enumerate(data)]


def xdata_read(address: int, n: int) -> Control:
    return Control(p.REQ_IN, p.REQ_XDATA_READ, address & 0xFFFF, 0, length=n)
