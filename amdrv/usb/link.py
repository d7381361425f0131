"""USB Mass Storage Bulk-Only Transport to the bridge, over pyusb.

pyusb has no bulk-stream API, so the UAS interface (alternate setting 1, where tinygrad pipelines 16
commands per round trip with libusb streams) is out of reach; BOT (alternate setting 0) is strictly one
command at a time: CBW out, optional data, CSW in. Each command is one round trip. `Link.execute` takes
a batch, so a pipelining link (UAS streams, or the open firmware's control requests) can replace this
one without touching the PCI layer.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass

import usb.core
import usb.util

from pcie.interface import AccessCounters, PCIError
from amdrv.usb import protocol as p

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


class BOTLink:
    """Opens the bridge's mass-storage interface (detaching usb-storage/uas where the OS lets us) and
    runs SCSI commands. Every command adds one to `access.round_trips`."""

    def __init__(self, dev, access: AccessCounters, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        self.dev, self.access, self.timeout = dev, access, timeout_ms
        self.name = f"USB bridge {name_of(dev)} ({dev.idVendor:04x}:{dev.idProduct:04x})"
        self.stats = LinkCounters()
        self._tag = 0
        intf = self._bot_interface()
        self.intf = intf.bInterfaceNumber
        try:
            try:
                dev.get_active_configuration()
            except usb.core.USBError:
                dev.set_configuration()
            if self._kernel_driver_active():
                dev.detach_kernel_driver(self.intf)
            usb.util.claim_interface(dev, self.intf)
            if intf.bAlternateSetting != 0:
                dev.set_interface_altsetting(self.intf, intf.bAlternateSetting)
        except usb.core.USBError as e:
            raise BridgeError(f"{self.name}: cannot claim interface {self.intf}: {e}; on Linux give your user "
                              f"access (docs/usb.md, udev rule) or run as root") from None
        eps = list(intf)
        self.ep_out = next((e.bEndpointAddress for e in eps if usb.util.endpoint_direction(e.bEndpointAddress)
                            == usb.util.ENDPOINT_OUT), None)
        self.ep_in = next((e.bEndpointAddress for e in eps if usb.util.endpoint_direction(e.bEndpointAddress)
                           == usb.util.ENDPOINT_IN), None)
        if self.ep_out is None or self.ep_in is None:
            raise BridgeError(f"{self.name}: the mass-storage interface has no bulk endpoint pair")

    def _bot_interface(self):
        for cfg in self.dev:
            for intf in cfg:
                if (intf.bInterfaceClass, intf.bInterfaceSubClass, intf.bInterfaceProtocol) == \
                        (p.MSC_CLASS, p.SCSI_SUBCLASS, p.BOT_PROTOCOL):
                    return intf
        raise BridgeError(f"{self.name}: no mass-storage Bulk-Only interface (class 08/06/50); "
                          f"is it running the stock firmware?")

    def _kernel_driver_active(self) -> bool:
        try:
            return bool(self.dev.is_kernel_driver_active(self.intf))
        except (NotImplementedError, usb.core.USBError):
            return False    # macOS/Windows backends: no kernel driver on a claimed vendor interface

    def close(self) -> None:
        try:
            usb.util.release_interface(self.dev, self.intf)
        except usb.core.USBError:
            pass
        usb.util.dispose_resources(self.dev)

    # -- commands

    def execute(self, commands: list[Command]) -> list[bytes | None]:
        return [self._one(c) for c in commands]

    def _transfer(self, what: str, fn):
        try:
            return fn()
        except usb.core.USBTimeoutError:
            raise TransferStalled(f"{self.name}: {what} timed out after {self.timeout} ms (the transfer "
                                  f"stalled); unplug and replug the enclosure if it persists") from None
        except usb.core.USBError as e:
            if e.errno == errno.EPIPE:
                self._recover()
                raise TransferStalled(f"{self.name}: {what}: the bridge stalled the endpoint") from None
            if e.errno in (errno.ENODEV, errno.EIO, 19):
                raise BridgeError(f"{self.name}: {what}: the device is gone ({e})") from None
            raise BridgeError(f"{self.name}: {what}: {e}") from None

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


def make_link(dev, access: AccessCounters, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> BOTLink:
    """The link to a bridge: Bulk-Only Transport, one command per round trip."""
    return BOTLink(dev, access, timeout_ms)
