"""The SCSI link to the bridge, over pyusb: Bulk-Only Transport or UAS with USB 3 bulk streams.

- `BOTLink` (alternate setting 0, USB Mass Storage Bulk-Only Transport 1.0): strictly one command at a
  time: CBW out, optional data, CSW in. Each command is one round trip.
- `UASLink` (alternate setting 1, USB Attached SCSI, interface protocol 0x62): up to 16 commands in
  flight, each on its own bulk stream (stream = tag), all of a batch submitted at once and waited for
  together: one round trip per 16 commands, as tinygrad drives this bridge. The streams come from
  pcie.usb.streams (the pyusb backend's own, or libusb-1.0 through ctypes).

- `VendorLink` (the open replacement firmware, ids ADD1:0001): vendor control requests and bulk data, no SCSI.

`make_link` picks VendorLink for a bridge running the open firmware (detect_firmware), otherwise UAS when the
bridge offers it and streams can be had, else BOT. `Link.execute` takes
whole batches, so the PCI layer is the same over both.
"""
from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass

import usb.core
import usb.util

from pcie.interface import AccessCounters, PCIError
from pcie.usb import protocol as p
from pcie.usb import streams as st

DEFAULT_TIMEOUT_MS = 1000


class BridgeError(PCIError):
    """The USB bridge or its link failed; the message names the bridge (bus-address) and the step."""


class BridgeNotFound(BridgeError):
    pass


class TransferStalled(BridgeError):
    pass


@dataclass
class LinkCounters:
    """What crossed the wire: commands (each a round trip over BOT), USB transfers, and bytes each way
    with the payload share (data phases only) for efficiency figures."""
    commands: int = 0
    transfers: int = 0
    wire_out: int = 0
    wire_in: int = 0
    payload_out: int = 0
    payload_in: int = 0

    def snapshot(self) -> LinkCounters:
        return LinkCounters(**vars(self))

    def __sub__(self, other: LinkCounters) -> LinkCounters:
        return LinkCounters(**{k: v - getattr(other, k) for k, v in vars(self).items()})


@dataclass(frozen=True)
class Command:
    cdb: bytes
    read: int = 0                 # bytes expected in the data-in phase
    write: bytes | None = None    # data-out phase


def find_bridges(backend=None) -> list:
    return list(usb.core.find(find_all=True, backend=backend,
                              custom_match=lambda d: p.is_bridge_id(d.idVendor, d.idProduct)))


def name_of(dev) -> str:
    return f"{dev.bus}-{dev.address}"


def _claim(dev, intf, name: str) -> None:
    """Configures the device, detaches a kernel driver (usb-storage/uas) where the OS lets us, claims the
    interface and selects the alternate setting `intf` is (also 0: a previous run may have left UAS on)."""
    number = intf.bInterfaceNumber
    try:
        try:
            dev.get_active_configuration()
        except usb.core.USBError:
            dev.set_configuration()
        try:
            active = bool(dev.is_kernel_driver_active(number))
        except (NotImplementedError, usb.core.USBError):
            active = False    # macOS/Windows backends: no kernel driver on a claimed vendor interface
        if active:
            dev.detach_kernel_driver(number)
        usb.util.claim_interface(dev, number)
        if intf.bAlternateSetting != 0 or _alt_settings(dev, number) > 1:
            dev.set_interface_altsetting(number, intf.bAlternateSetting)
    except usb.core.USBError as e:
        raise BridgeError(f"{name}: cannot claim interface {number}: {e}; on Linux give your user access "
                          f"(docs/usb.md, udev rule) or run as root") from None


def _release(dev, intf) -> None:
    """_claim's undoing at close: the interface released (a bridge already gone is no error) and libusb's
    handle dropped."""
    try:
        usb.util.release_interface(dev, intf)
    except usb.core.USBError:
        pass
    usb.util.dispose_resources(dev)


def _alt_settings(dev, number: int) -> int:
    return sum(1 for cfg in dev for i in cfg if i.bInterfaceNumber == number)


def _interface(dev, protocol: int):
    for cfg in dev:
        for intf in cfg:
            if (intf.bInterfaceClass, intf.bInterfaceSubClass, intf.bInterfaceProtocol) == \
                    (p.MSC_CLASS, p.SCSI_SUBCLASS, protocol):
                return intf
    return None


def _usb_error(link, what: str, fn):
    """Runs a transfer, mapping pyusb's errors: a timeout -> TransferStalled, a stalled endpoint ->
    TransferStalled (after clearing the halts), a vanished device -> BridgeError 'gone'."""
    try:
        return fn()
    except usb.core.USBTimeoutError:
        stalled = f"{link.name}: {what} timed out after {link.timeout} ms (the transfer stalled)"
        why = _reset_after_stall(link)
        if why is None:
            raise TransferStalled(f"{stalled}; the bridge was reset (a USB port reset, then the interface "
                                  f"claimed again) and answers again, but this operation did not complete: "
                                  f"reopen the device (no replug needed)") from None
        raise TransferStalled(f"{stalled}, and a USB reset of the bridge did not bring it back ({why}): unplug "
                              f"and replug the enclosure") from None
    except usb.core.USBError as e:
        if e.errno == errno.EPIPE:
            link._recover()
            raise TransferStalled(f"{link.name}: {what}: the bridge stalled the endpoint") from None
        if e.errno in (errno.ENODEV, errno.EIO, 19):
            raise BridgeError(f"{link.name}: {what}: the device is gone ({e})") from None
        raise BridgeError(f"{link.name}: {what}: {e}") from None


def _reset_after_stall(link) -> str | None:
    """A transfer that never completes leaves the bridge's firmware wedged until a USB reset: a port reset
    (libusb_reset_device; the device re-enumerates at the same address when its descriptors are unchanged),
    then the link's interface claimed and set up again. None when the bridge answers after it, else why not.
    The operation is not retried: a TLP may have gone out before the stall, and a repeated write is not
    always harmless (a firmware command register)."""
    try:
        link.dev.reset()
        link.reattach()
        return None
    except Exception as e:   # a backend without reset (NotImplementedError), the device gone, no streams
        return str(e) or type(e).__name__


class BOTLink:
    """Opens the bridge's mass-storage interface (detaching usb-storage/uas where the OS lets us) and
    runs SCSI commands. Every command adds one to `access.round_trips`."""

    pipelined = False       # one command per round trip: a batch saves none (transport.USBBAR.read32_many)

    def __init__(self, dev, access: AccessCounters, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        self.dev, self.access, self.timeout = dev, access, timeout_ms
        self.name = f"USB bridge {name_of(dev)} ({dev.idVendor:04x}:{dev.idProduct:04x})"
        self.stats = LinkCounters()
        self._tag = 0
        intf = self._bot_interface()
        self.intf = intf.bInterfaceNumber
        _claim(dev, intf, self.name)
        eps = list(intf)
        self.ep_out = next((e.bEndpointAddress for e in eps if usb.util.endpoint_direction(e.bEndpointAddress)
                            == usb.util.ENDPOINT_OUT), None)
        self.ep_in = next((e.bEndpointAddress for e in eps if usb.util.endpoint_direction(e.bEndpointAddress)
                           == usb.util.ENDPOINT_IN), None)
        if self.ep_out is None or self.ep_in is None:
            raise BridgeError(f"{self.name}: the mass-storage interface has no bulk endpoint pair")

    def _bot_interface(self):
        intf = _interface(self.dev, p.BOT_PROTOCOL)
        if intf is not None:
            return intf
        raise BridgeError(f"{self.name}: no mass-storage Bulk-Only interface (class 08/06/50); "
                          f"is it running the stock firmware?")

    def close(self) -> None:
        _release(self.dev, self.intf)

    # -- commands

    def execute(self, commands: list[Command]) -> list[bytes | None]:
        return [self._one(c) for c in commands]

    def _transfer(self, what: str, fn):
        return _usb_error(self, what, fn)

    def reattach(self) -> None:
        """After a USB reset: the interface claimed again (the reset released it)."""
        _claim(self.dev, self._bot_interface(), self.name)

    def _recover(self) -> None:
        for ep in (self.ep_in, self.ep_out):
            try:
                self.dev.clear_halt(ep)
            except usb.core.USBError:
                pass

    def _one(self, c: Command) -> bytes | None:
        self._tag = (self._tag + 1) & 0xFFFFFFFF
        s, op = self.stats, f"SCSI {c.cdb[0]:#04x}"
        data_len = c.read or (len(c.write) if c.write is not None else 0)
        wrapper = p.cbw(self._tag, c.cdb, data_len, bool(c.read))
        self.access.round_trips += 1
        s.commands += 1
        self._transfer(f"{op} command", lambda: self.dev.write(self.ep_out, wrapper, self.timeout))
        s.transfers += 1
        s.wire_out += len(wrapper)
        data = None
        if c.read:
            data = bytes(self._transfer(f"{op} data in", lambda: self.dev.read(self.ep_in, c.read, self.timeout)))
            s.transfers += 1
            s.wire_in += len(data)
            s.payload_in += len(data)
        elif c.write is not None:
            self._transfer(f"{op} data out", lambda: self.dev.write(self.ep_out, c.write, self.timeout))
            s.transfers += 1
            s.wire_out += len(c.write)
            s.payload_out += len(c.write)
        raw = bytes(self._transfer(f"{op} status", lambda: self.dev.read(self.ep_in, p.CSW_SIZE, self.timeout)))
        s.transfers += 1
        s.wire_in += len(raw)
        try:
            tag, residue, status = p.parse_csw(raw)
        except ValueError as e:
            raise BridgeError(f"{self.name}: {op}: {e}") from None
        if tag != self._tag or status != p.CSW_PASSED:
            raise BridgeError(f"{self.name}: {op} (CDB {c.cdb.hex()}) failed: CSW status {status}, tag {tag} "
                              f"(sent {self._tag}), residue {residue}")
        if c.read and len(data) != c.read:
            raise BridgeError(f"{self.name}: {op} returned {len(data)} of {c.read} bytes")
        return data



# USB Attached SCSI (T10 UAS-2): information units and the Pipe Usage descriptor.
UAS_PROTOCOL = 0x62
UAS_COMMAND_IU, UAS_SENSE_IU, UAS_RESPONSE_IU = 0x01, 0x03, 0x04
UAS_COMMAND_IU_SIZE, UAS_STATUS_SIZE = 32, 64          # status buffer: a Sense IU with up to 48 bytes of sense
TASK_SIMPLE, TASK_ORDERED = 0, 2
PIPE_USAGE, SS_ENDPOINT_COMPANION = 0x24, 0x30         # class-specific / SuperSpeed companion descriptor types
PIPE_COMMAND, PIPE_STATUS, PIPE_DATA_IN, PIPE_DATA_OUT = 1, 2, 3, 4
UAS_MAX_IN_FLIGHT = 16       # commands per round trip: what tinygrad runs this bridge with (proven on hardware)
SCSI_GOOD, SCSI_CHECK_CONDITION = 0x00, 0x02
UAS_RESPONSE_CODES = {0x00: "task management function complete", 0x02: "invalid information unit",
                      0x04: "task management function not supported", 0x05: "task management function failed",
                      0x08: "task management function succeeded", 0x09: "incorrect logical unit number",
                      0x0A: "overlapped tag attempted"}
SENSE_KEYS = {0x0: "NO SENSE", 0x1: "RECOVERED ERROR", 0x2: "NOT READY", 0x3: "MEDIUM ERROR",
              0x4: "HARDWARE ERROR", 0x5: "ILLEGAL REQUEST", 0x6: "UNIT ATTENTION", 0x7: "DATA PROTECT",
              0xB: "ABORTED COMMAND"}


def command_iu(tag: int, cdb: bytes, attribute: int = TASK_ORDERED) -> bytes:
    """The 32-byte Command IU: IU id, tag (big-endian), task attribute, no additional CDB, LUN 0, the CDB."""
    if len(cdb) > 16:
        raise ValueError(f"a {len(cdb)}-byte CDB does not fit a Command IU without additional CDB bytes")
    return struct.pack(">BxHBxBx8s16s", UAS_COMMAND_IU, tag, attribute & 7, 0, bytes(8), bytes(cdb))


def parse_status_iu(raw: bytes) -> tuple[int, int, bytes]:
    """(tag, SCSI status, sense data) of a Sense IU; raises ValueError for a Response IU (naming its code) or
    anything else."""
    if len(raw) >= 8 and raw[0] == UAS_RESPONSE_IU:
        code = raw[7]
        raise ValueError(f"Response IU for tag {struct.unpack_from('>H', raw, 2)[0]}: response code {code:#04x} "
                         f"({UAS_RESPONSE_CODES.get(code, 'reserved')})")
    if len(raw) < 16 or raw[0] != UAS_SENSE_IU:
        raise ValueError(f"status pipe returned {len(raw)} bytes starting {raw[:4].hex() or 'nothing'} "
                         f"(expected a Sense IU, id {UAS_SENSE_IU:#04x})")
    tag, status, length = struct.unpack_from(">H", raw, 2)[0], raw[6], struct.unpack_from(">H", raw, 14)[0]
    return tag, status, bytes(raw[16:16 + length])


def describe_sense(sense: bytes) -> str:
    """Sense key and ASC/ASCQ of fixed (0x70/0x71) or descriptor (0x72/0x73) format sense data (SPC)."""
    if len(sense) >= 14 and sense[0] & 0x7F in (0x70, 0x71):
        key, asc, ascq = sense[2] & 0xF, sense[12], sense[13]
    elif len(sense) >= 4 and sense[0] & 0x7F in (0x72, 0x73):
        key, asc, ascq = sense[1] & 0xF, sense[2], sense[3]
    else:
        return f"sense data {sense.hex() or 'none'}"
    return f"sense key {key:#x} ({SENSE_KEYS.get(key, 'other')}), ASC/ASCQ {asc:#04x}/{ascq:#04x}"


class UASUnavailable(BridgeError):
    """No UAS link on this bridge (no alternate setting with protocol 0x62, no stream endpoints, or no bulk
    streams from the host): make_link falls back to Bulk-Only Transport."""


def _uas_pipes(intf) -> dict[int, tuple[int, int]]:
    """{pipe id: (endpoint address, log2 of its max streams)} from each endpoint's extra descriptors: the
    SuperSpeed companion (bmAttributes bits 4:0 for bulk) and the UAS Pipe Usage descriptor (bPipeID)."""
    pipes = {}
    for ep in intf:
        extra, pos, pipe, log2 = bytes(getattr(ep, "extra_descriptors", b"") or b""), 0, None, 0
        while pos + 2 <= len(extra) and extra[pos] >= 2:
            length, kind = extra[pos], extra[pos + 1]
            if kind == SS_ENDPOINT_COMPANION and length >= 4 and pos + 3 < len(extra):
                log2 = extra[pos + 3] & 0x1F
            elif kind == PIPE_USAGE and length >= 3 and pos + 2 < len(extra):
                pipe = extra[pos + 2]
            pos += length
        if pipe is not None:
            pipes[pipe] = (ep.bEndpointAddress, log2)
    return pipes


class UASLink:
    """USB Attached SCSI on the bridge's alternate setting 1 with bulk streams. A batch of up to `slots`
    commands (16, or fewer if the host gives fewer streams) is one submission: for command i (tag and
    stream i + 1) its Command IU on the command pipe, its data on the data-in or data-out pipe and its
    Sense IU on the status pipe, all in flight at once; the batch waits for all of them: one round trip.
    Every command is ORDERED: the driver relies on the bridge running a batch in order (a TLP kick, then
    reads of the engine's status and completion, in one batch)."""

    def __init__(self, dev, access: AccessCounters, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 max_in_flight: int = UAS_MAX_IN_FLIGHT):
        self.dev, self.access, self.timeout = dev, access, timeout_ms
        self.name = f"USB bridge {name_of(dev)} ({dev.idVendor:04x}:{dev.idProduct:04x})"
        self.stats = LinkCounters()
        intf = _interface(dev, UAS_PROTOCOL)
        if intf is None:
            raise UASUnavailable(f"{self.name}: no UAS alternate setting (class 08/06/62)")
        self.intf, self.alt = intf.bInterfaceNumber, intf.bAlternateSetting
        pipes = _uas_pipes(intf)
        missing = [n for n in (PIPE_COMMAND, PIPE_STATUS, PIPE_DATA_IN, PIPE_DATA_OUT) if n not in pipes]
        if missing:
            raise UASUnavailable(f"{self.name}: the UAS interface has no Pipe Usage descriptor for pipe(s) "
                                 f"{missing}")
        self.ep_command, self.ep_status = pipes[PIPE_COMMAND][0], pipes[PIPE_STATUS][0]
        self.ep_in, self.ep_out = pipes[PIPE_DATA_IN][0], pipes[PIPE_DATA_OUT][0]
        streamed = (PIPE_STATUS, PIPE_DATA_IN, PIPE_DATA_OUT)
        offered = min(1 << pipes[n][1] if pipes[n][1] else 0 for n in streamed)
        if offered < 1:
            raise UASUnavailable(f"{self.name}: the UAS endpoints offer no bulk streams (SuperSpeed companion)")
        _claim(dev, intf, self.name)
        try:
            self.engine = st.open_engine(dev, [self.ep_in, self.ep_out, self.ep_status],
                                         min(max_in_flight, offered), status_endpoint=self.ep_status)
        except st.StreamsUnavailable as e:
            self._leave()
            raise UASUnavailable(f"{self.name}: no bulk streams: {e}") from None
        except usb.core.USBError as e:
            self._leave()
            raise UASUnavailable(f"{self.name}: allocating bulk streams failed: {e}") from None
        self.slots = max(1, min(max_in_flight, offered, self.engine.streams))

    def _leave(self) -> None:
        """Back to alternate setting 0 (Bulk-Only), the interface released: for the BOT fallback."""
        for step in (lambda: self.dev.set_interface_altsetting(self.intf, 0),
                     lambda: usb.util.release_interface(self.dev, self.intf)):
            try:
                step()
            except (usb.core.USBError, ValueError):
                pass

    def close(self) -> None:
        try:
            self.engine.close()
        except usb.core.USBError:
            pass
        _release(self.dev, self.intf)

    def reattach(self) -> None:
        """After a USB reset: the bridge is back at alternate setting 0 with no streams; UAS selected and
        the streams allocated again."""
        try:
            self.engine.close()
        except usb.core.USBError:
            pass
        _claim(self.dev, _interface(self.dev, UAS_PROTOCOL), self.name)
        self.engine = st.open_engine(self.dev, [self.ep_in, self.ep_out, self.ep_status], self.slots,
                                     status_endpoint=self.ep_status)

    def _recover(self) -> None:
        for ep in (self.ep_command, self.ep_status, self.ep_in, self.ep_out):
            try:
                self.dev.clear_halt(ep)
            except usb.core.USBError:
                pass

    # -- commands

    def execute(self, commands: list[Command]) -> list[bytes | None]:
        out: list[bytes | None] = []
        for i in range(0, len(commands), self.slots):
            out += self._batch(commands[i:i + self.slots])
        return out

    def _batch(self, batch: list[Command]) -> list[bytes | None]:
        s, transfers, per = self.stats, [], []
        for i, c in enumerate(batch):
            tag = i + 1
            cmd = st.StreamTransfer(self.ep_command, 0, command_iu(tag, c.cdb))
            data = None
            if c.read:
                data = st.StreamTransfer(self.ep_in, tag, bytearray(c.read))
            elif c.write is not None:
                data = st.StreamTransfer(self.ep_out, tag, bytes(c.write))
            status = st.StreamTransfer(self.ep_status, tag, bytearray(UAS_STATUS_SIZE))
            transfers += [cmd] + ([data] if data is not None else []) + [status]
            per.append((c, tag, cmd, data, status))
        first = batch[0].cdb
        what = (f"SCSI {first[0]:#04x}" if len(batch) == 1 else
                f"a batch of {len(batch)} SCSI commands (first {first[0]:#04x})")
        self.access.round_trips += 1
        s.commands += len(batch)
        s.transfers += len(transfers)
        _usb_error(self, what, lambda: self.engine.submit(transfers, self.timeout))
        results = []
        for c, tag, cmd, data, status in per:
            op = f"SCSI {c.cdb[0]:#04x}"
            s.wire_out += cmd.actual or len(cmd.buffer)
            s.wire_in += status.actual
            if status.status != "completed":
                raise BridgeError(f"{self.name}: {op} (CDB {c.cdb.hex()}): no status on stream {tag} "
                                  f"({status.status or 'not run'})")
            raw = bytes(status.buffer[:status.actual])
            try:
                got_tag, scsi, sense = parse_status_iu(raw)
            except ValueError as e:
                raise BridgeError(f"{self.name}: {op} (CDB {c.cdb.hex()}): {e}") from None
            if got_tag != tag:
                raise BridgeError(f"{self.name}: {op} (CDB {c.cdb.hex()}): status for tag {got_tag} on stream {tag}")
            if scsi != SCSI_GOOD:
                kind = "CHECK CONDITION" if scsi == SCSI_CHECK_CONDITION else f"status {scsi:#04x}"
                raise BridgeError(f"{self.name}: {op} (CDB {c.cdb.hex()}) failed: {kind}, {describe_sense(sense)}")
            if data is None:
                results.append(None)
            elif c.read:
                s.wire_in += data.actual
                s.payload_in += data.actual
                if data.actual != c.read:
                    raise BridgeError(f"{self.name}: {op} returned {data.actual} of {c.read} bytes")
                results.append(bytes(data.buffer))
            else:
                s.wire_out += data.actual
                s.payload_out += data.actual
                if data.actual != len(c.write):
                    raise BridgeError(f"{self.name}: {op} took {data.actual} of {len(c.write)} bytes")
                results.append(None)
        return results


# -- the open firmware: vendor control requests and bulk data, no SCSI ---------------------------------

@dataclass(frozen=True)
class Control:
    """A vendor control request (pcie.usb.protocol, open firmware): OUT with `data`, or IN of `length`."""
    request_type: int
    request: int
    value: int = 0
    index: int = 0
    data: bytes | None = None
    length: int = 0


@dataclass(frozen=True)
class Bulk:
    """A bulk transfer: OUT with `data`, or IN of `length` bytes (a short answer is an error)."""
    endpoint: int
    data: bytes | None = None
    length: int = 0


def detect_firmware(dev) -> str:
    """"open" for the open replacement firmware (ids ADD1:0001, or an interface of vendor class FF with a
    bulk pair and no mass-storage interface), else "stock" (the ROM or ASMedia's firmware: USB mass storage)."""
    if (dev.idVendor, dev.idProduct) == p.OPEN_FIRMWARE_ID:
        return "open"
    classes = {intf.bInterfaceClass for cfg in dev for intf in cfg}
    return "open" if p.VENDOR_CLASS in classes and p.MSC_CLASS not in classes else "stock"


class VendorLink:
    """The open firmware's link: control requests on EP0 and data on bulk 0x81/0x02. `execute(batch)` sends
    a batch as asynchronous transfers waited for together (one round trip) where the pyusb backend offers
    that (`submit_async`, as the simulated bridge does); otherwise each transfer is its own round trip
    (pyusb's synchronous calls). A batch ends after each bulk transfer: the host orders neither pipe against
    the other, so a control request that depends on bulk data (a doorbell after a ring's bytes, a second
    SRAM DMA arm) waits for that data first. At most MAX_IN_FLIGHT transfers per round trip."""

    MAX_IN_FLIGHT = 32   # an assumption: libusb queues more; the bridge's firmware takes EP0 requests in turn

    def __init__(self, dev, access: AccessCounters, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        self.dev, self.access, self.timeout = dev, access, timeout_ms
        self.name = f"USB bridge {name_of(dev)} ({dev.idVendor:04x}:{dev.idProduct:04x}, open firmware)"
        self.stats = LinkCounters()
        intf = next((i for cfg in dev for i in cfg if i.bInterfaceClass == p.VENDOR_CLASS), None)
        if intf is None:
            raise BridgeError(f"{self.name}: no vendor-class interface (FF); is it running the open firmware?")
        self.intf = intf.bInterfaceNumber
        _claim(dev, intf, self.name)
        eps = {e.bEndpointAddress for e in intf}
        if not {p.OPEN_BULK_IN, p.OPEN_BULK_OUT} <= eps:
            raise BridgeError(f"{self.name}: the vendor interface lacks bulk endpoints 0x81/0x02 ({sorted(eps)})")
        self.ep_in, self.ep_out = p.OPEN_BULK_IN, p.OPEN_BULK_OUT
        self._async = getattr(getattr(dev, "_ctx", None), "backend", None)
        if not callable(getattr(self._async, "submit_async", None)):
            self._async = None
        self.engine = st.open_async(dev) if self._async is None else None   # libusb's asynchronous API

    def reattach(self) -> None:
        """After a USB reset: the vendor interface claimed again (the firmware dropped any armed DMA)."""
        intf = next(i for cfg in self.dev for i in cfg if i.bInterfaceClass == p.VENDOR_CLASS)
        _claim(self.dev, intf, self.name)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        _release(self.dev, self.intf)

    def _recover(self) -> None:
        for ep in (self.ep_in, self.ep_out):
            try:
                self.dev.clear_halt(ep)
            except usb.core.USBError:
                pass

    def execute(self, items: list) -> list[bytes | None]:
        out: list[bytes | None] = []
        batch: list = []
        for item in items:
            batch.append(item)
            if isinstance(item, Bulk) or len(batch) >= self.MAX_IN_FLIGHT:
                out += self._batch(batch)
                batch = []
        if batch:
            out += self._batch(batch)
        return out

    def _what(self, item) -> str:
        if isinstance(item, Control):
            return f"vendor request {item.request:#04x} (wValue {item.value:#06x}, wIndex {item.index:#06x})"
        return f"bulk {'IN' if item.data is None else 'OUT'} of {item.length or len(item.data)} bytes"

    def _batch(self, batch: list) -> list[bytes | None]:
        s = self.stats
        what = self._what(batch[0]) if len(batch) == 1 else f"a batch of {len(batch)} transfers"
        if self.engine is not None:
            return self._libusb_batch(batch, what)
        if self._async is None:
            return [self._one(item) for item in batch]
        from types import SimpleNamespace
        transfers = []
        for item in batch:
            if isinstance(item, Control):
                buf = bytearray(item.length) if item.request_type & 0x80 else bytes(item.data or b"")
                transfers.append(SimpleNamespace(endpoint=0, buffer=buf, bmRequestType=item.request_type,
                                                 bRequest=item.request, wValue=item.value, wIndex=item.index))
            else:
                buf = bytearray(item.length) if item.data is None else bytes(item.data)
                transfers.append(SimpleNamespace(endpoint=item.endpoint, buffer=buf))
        self.access.round_trips += 1
        s.commands += sum(isinstance(i, Control) for i in batch)
        s.transfers += len(batch)
        _usb_error(self, what, lambda: self._async.submit_async(None, transfers, self.timeout))
        return [self._result(item, t.buffer, t.actual) for item, t in zip(batch, transfers)]

    def _libusb_batch(self, batch: list, what: str) -> list[bytes | None]:
        transfers = [st.ControlTransfer(i.request_type, i.request, i.value, i.index, i.data or b"", i.length)
                     if isinstance(i, Control) else
                     st.StreamTransfer(i.endpoint, 0, bytearray(i.length) if i.data is None else bytes(i.data))
                     for i in batch]
        self.access.round_trips += 1
        self.stats.commands += sum(isinstance(i, Control) for i in batch)
        self.stats.transfers += len(batch)
        _usb_error(self, what, lambda: self.engine.submit(transfers, self.timeout))
        return [self._result(i, t.data if isinstance(t, st.ControlTransfer) else t.buffer, t.actual)
                for i, t in zip(batch, transfers)]

    def _result(self, item, buf, actual: int) -> bytes | None:
        s = self.stats
        is_in = item.request_type & 0x80 if isinstance(item, Control) else item.data is None
        setup = 8 if isinstance(item, Control) else 0
        if is_in:
            want = item.length
            s.wire_out += setup
            s.wire_in += actual
            s.payload_in += actual
            if isinstance(item, Bulk) and actual != want:
                raise BridgeError(f"{self.name}: {self._what(item)} returned {actual} bytes")
            return bytes(buf[:actual])
        s.wire_out += setup + actual
        s.payload_out += actual if isinstance(item, Bulk) else 0
        return None

    def _one(self, item) -> bytes | None:
        self.access.round_trips += 1
        self.stats.transfers += 1
        what = self._what(item)
        if isinstance(item, Control):
            self.stats.commands += 1
            if item.request_type & 0x80:
                got = _usb_error(self, what, lambda: self.dev.ctrl_transfer(item.request_type, item.request,
                                                                            item.value, item.index, item.length,
                                                                            self.timeout))
                return self._result(item, bytes(got), len(got))
            _usb_error(self, what, lambda: self.dev.ctrl_transfer(item.request_type, item.request, item.value,
                                                                  item.index, item.data, self.timeout))
            return self._result(item, b"", len(item.data or b""))
        if item.data is None:
            got = _usb_error(self, what, lambda: self.dev.read(item.endpoint, item.length, self.timeout))
            return self._result(item, bytes(got), len(got))
        n = _usb_error(self, what, lambda: self.dev.write(item.endpoint, item.data, self.timeout))
        return self._result(item, b"", n)


LINKS = ("uas", "bot")


def make_link(dev, access: AccessCounters, timeout_ms: int = DEFAULT_TIMEOUT_MS, link: str | None = None):
    """The link to a bridge. `link` ("uas" or "bot"), else the environment's DRIVERLESS_USB_LINK, forces
    one; otherwise UAS with bulk streams where the bridge has the UAS alternate setting and a stream engine
    is available (pcie.usb.streams), falling back to Bulk-Only Transport on alternate setting 0 (the ROM
    174c:2463 has no UAS; pyusb backends without streams; a host that refuses streams)."""
    if detect_firmware(dev) == "open":
        return VendorLink(dev, access, timeout_ms)
    choice = (link or os.environ.get("DRIVERLESS_USB_LINK") or "").strip().lower()
    if choice not in ("",) + LINKS:
        raise BridgeError(f"usb: unknown link {choice!r} (link= or DRIVERLESS_USB_LINK: {' or '.join(LINKS)})")
    if choice == "bot":
        return BOTLink(dev, access, timeout_ms)
    try:
        return UASLink(dev, access, timeout_ms)
    except UASUnavailable as e:
        if choice == "uas":
            raise BridgeError(f"{e} (the UAS link was asked for: link='uas' or DRIVERLESS_USB_LINK=uas)") from None
    return BOTLink(dev, access, timeout_ms)
