"""USB 3 bulk streams for the UAS link: many transfers in flight at once, one round trip per batch.

pyusb has no bulk-stream API, so a stream engine sits beside it, on the device pyusb opened:

- `BackendStreams`: a pyusb backend that offers streams itself (the simulated bridge,
  gpusim.usb_bridge): `backend.alloc_streams(handle, n, endpoints) -> int`,
  `backend.free_streams(handle, endpoints)`, `backend.submit_streams(handle, transfers, timeout_ms)`;
  each transfer (`StreamTransfer`) gets `.actual` and `.status = "completed"`; a missing piece or a stall
  raises usb.core.USBTimeoutError, other failures usb.core.USBError (errno EPIPE, ENODEV).
- `LibusbStreams`: libusb-1.0 through ctypes, on pyusb's own libusb1 backend (its CDLL `backend.lib`,
  its context `backend.ctx`, the `libusb_device_handle *` in `dev._ctx.handle.handle`), declaring what
  pyusb does not: libusb_alloc_streams / free_streams, asynchronous transfers with a stream id, and
  libusb_handle_events_timeout_completed (libusb-1.0 API, libusb.h).

Both raise pyusb's exceptions (USBTimeoutError on a missed deadline, USBError with an errno otherwise), so
the link maps errors the same way whichever engine runs. `open_engine` picks one, or returns None.
"""
from __future__ import annotations

import ctypes
import errno
import struct
import time
from ctypes import CFUNCTYPE, POINTER, Structure, byref, c_int, c_uint, c_uint8, c_uint32, c_ubyte, c_void_p

import usb.core


class StreamsUnavailable(Exception):
    """No stream engine for this device (backend without streams, host controller or kernel refusing
    libusb_alloc_streams): the caller falls back to Bulk-Only Transport."""


class StreamTransfer:
    """One bulk transfer of a batch: `stream` 0 is a plain bulk transfer (the UAS command pipe).
    OUT: `buffer` holds the bytes; IN: a bytearray of the requested length, filled up to `actual`."""
    __slots__ = ("endpoint", "stream", "buffer", "actual", "status")

    def __init__(self, endpoint: int, stream: int, buffer):
        self.endpoint, self.stream, self.buffer = endpoint, stream, buffer
        self.actual, self.status = 0, None

    @property
    def is_in(self) -> bool:
        return bool(self.endpoint & 0x80)

    def __repr__(self) -> str:
        return f"StreamTransfer(ep={self.endpoint:#04x}, stream={self.stream}, len={len(self.buffer)})"


class ControlTransfer(StreamTransfer):
    """A control transfer for the asynchronous engine (the open firmware's vendor requests): `buffer` is the
    8-byte setup packet followed by the OUT data or room for the IN data (libusb's layout for
    LIBUSB_TRANSFER_TYPE_CONTROL); `actual` counts data bytes only, as libusb's actual_length does."""
    __slots__ = ("request_in",)
    data_offset = 8

    def __init__(self, request_type: int, request: int, value: int, index: int, data: bytes = b"", length: int = 0):
        n = length if request_type & 0x80 else len(data)
        setup = struct.pack("<BBHHH", request_type, request, value, index, n)
        super().__init__(0, 0, bytearray(setup + (bytes(n) if request_type & 0x80 else bytes(data))))
        self.request_in = bool(request_type & 0x80)

    @property
    def is_in(self) -> bool:
        return self.request_in

    @property
    def data(self) -> bytes:
        return bytes(self.buffer[8:8 + self.actual])


class BackendStreams:
    """Streams offered by the pyusb backend itself (one submit_streams call = one round trip)."""

    def __init__(self, backend, handle, endpoints: list[int], num_streams: int, status_endpoint: int | None = None):
        self.backend, self.handle, self.endpoints = backend, handle, list(endpoints)
        self.status_endpoint = status_endpoint
        got = backend.alloc_streams(handle, num_streams, self.endpoints)
        if not got or got < 1:
            raise StreamsUnavailable(f"the backend allocated {got} streams")
        self.streams = int(got)

    def submit(self, transfers: list[StreamTransfer], timeout_ms: int) -> None:
        """As LibusbStreams.submit: a timeout where every status-pipe transfer completed is a command that
        failed without its data phase; its data transfers get status "cancelled" and nothing is raised."""
        try:
            self.backend.submit_streams(self.handle, transfers, timeout_ms)
        except usb.core.USBTimeoutError:
            answers = [t for t in transfers if t.endpoint == self.status_endpoint]
            if not answers or any(t.status != "completed" for t in answers):
                raise
            for t in transfers:
                if t.status != "completed":
                    t.status = "cancelled"

    def close(self) -> None:
        try:
            self.backend.free_streams(self.handle, self.endpoints)
        except (usb.core.USBError, NotImplementedError):
            pass


# -- libusb-1.0 through ctypes --------------------------------------------------------------------------

LIBUSB_TRANSFER_TYPE_CONTROL = 0
LIBUSB_TRANSFER_TYPE_BULK = 2
LIBUSB_TRANSFER_TYPE_BULK_STREAM = 4
# enum libusb_transfer_status
(LIBUSB_TRANSFER_COMPLETED, LIBUSB_TRANSFER_ERROR, LIBUSB_TRANSFER_TIMED_OUT, LIBUSB_TRANSFER_CANCELLED,
 LIBUSB_TRANSFER_STALL, LIBUSB_TRANSFER_NO_DEVICE, LIBUSB_TRANSFER_OVERFLOW) = range(7)
TRANSFER_STATUS = {LIBUSB_TRANSFER_COMPLETED: "completed", LIBUSB_TRANSFER_ERROR: "error",
                   LIBUSB_TRANSFER_TIMED_OUT: "timed out", LIBUSB_TRANSFER_CANCELLED: "cancelled",
                   LIBUSB_TRANSFER_STALL: "stalled", LIBUSB_TRANSFER_NO_DEVICE: "no device",
                   LIBUSB_TRANSFER_OVERFLOW: "overflow"}
TRANSFER_ERRNO = {LIBUSB_TRANSFER_ERROR: errno.EIO, LIBUSB_TRANSFER_TIMED_OUT: errno.ETIMEDOUT,
                  LIBUSB_TRANSFER_CANCELLED: errno.EINTR, LIBUSB_TRANSFER_STALL: errno.EPIPE,
                  LIBUSB_TRANSFER_NO_DEVICE: errno.ENODEV, LIBUSB_TRANSFER_OVERFLOW: errno.EOVERFLOW}
# enum libusb_error (negative return codes)
LIBUSB_ERRNO = {-1: errno.EIO, -2: errno.EINVAL, -3: errno.EACCES, -4: errno.ENODEV, -5: errno.ENOENT,
                -6: errno.EBUSY, -7: errno.ETIMEDOUT, -8: errno.EOVERFLOW, -9: errno.EPIPE, -10: errno.EINTR,
                -11: errno.ENOMEM, -12: errno.ENOSYS}


class IsoPacketDescriptor(Structure):
    _fields_ = [("length", c_uint), ("actual_length", c_uint), ("status", c_int)]


class LibusbTransfer(Structure):
    """struct libusb_transfer (libusb.h), field for field; tests compare it with the C layout."""


TRANSFER_CALLBACK = CFUNCTYPE(None, POINTER(LibusbTransfer))

LibusbTransfer._fields_ = [
    ("dev_handle", c_void_p),
    ("flags", c_uint8),
    ("endpoint", c_ubyte),
    ("type", c_ubyte),
    ("timeout", c_uint),
    ("status", c_int),
    ("length", c_int),
    ("actual_length", c_int),
    ("callback", TRANSFER_CALLBACK),
    ("user_data", c_void_p),
    ("buffer", c_void_p),
    ("num_iso_packets", c_int),
    ("iso_packet_desc", IsoPacketDescriptor * 0),
]


class Timeval(Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


# name: (restype, argtypes), as libusb.h declares them
PROTOTYPES = {
    "libusb_alloc_streams": (c_int, [c_void_p, c_uint32, POINTER(c_ubyte), c_int]),
    "libusb_free_streams": (c_int, [c_void_p, POINTER(c_ubyte), c_int]),
    "libusb_alloc_transfer": (POINTER(LibusbTransfer), [c_int]),
    "libusb_free_transfer": (None, [POINTER(LibusbTransfer)]),
    "libusb_submit_transfer": (c_int, [POINTER(LibusbTransfer)]),
    "libusb_cancel_transfer": (c_int, [POINTER(LibusbTransfer)]),
    "libusb_transfer_set_stream_id": (None, [POINTER(LibusbTransfer), c_uint32]),
    "libusb_handle_events_timeout_completed": (c_int, [c_void_p, POINTER(Timeval), POINTER(c_int)]),
}


class LibusbAPI:
    """The stream functions of a loaded libusb-1.0. Taken with `lib[name]`, which gives fresh function
    objects, so pyusb's own prototypes for the same names (on `lib.name`) are left as they are."""

    def __init__(self, lib):
        self.lib = lib
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = lib[name]
            except AttributeError:
                raise StreamsUnavailable(f"libusb has no {name} (libusb-1.0.19 or newer has streams)") from None
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name[len("libusb_"):], fn)


def _libusb_error(code: int, what: str) -> usb.core.USBError:
    e = LIBUSB_ERRNO.get(code, errno.EIO)
    if e == errno.ETIMEDOUT:
        return usb.core.USBTimeoutError(f"{what}: timed out", code, e)
    return usb.core.USBError(f"{what}: libusb error {code}", code, e)


CANCEL_GRACE_S = 2.0       # how long cancelled transfers get to report back before they are abandoned
EVENT_SLICE_S = 0.05


class LibusbStreams:
    """Bulk-stream transfers on pyusb's libusb1 backend. A batch: every transfer submitted (IN transfers
    first, so the host is ready for what the commands produce), then libusb events are handled until all
    have called back or the batch's deadline passes; then everything still in flight is cancelled and its
    cancellation waited for, and the batch raises USBTimeoutError."""

    def __init__(self, lib, ctx, handle, endpoints: list[int], num_streams: int, status_endpoint: int | None = None):
        self.api, self.ctx, self.handle = LibusbAPI(lib), ctx, handle
        self.status_endpoint = status_endpoint
        self.endpoints = list(endpoints)
        self._eps = (c_ubyte * len(self.endpoints))(*self.endpoints)
        got = self.api.alloc_streams(handle, num_streams, self._eps, len(self.endpoints))
        if got < 1:
            raise StreamsUnavailable(f"libusb_alloc_streams({num_streams}) failed: libusb error {got} (the host "
                                     f"controller or kernel gives no bulk streams)")
        self.streams = got
        self._done: set[int] = set()
        self._callback = TRANSFER_CALLBACK(self._completed)     # kept alive as long as the engine
        self._abandoned: list = []                               # transfers libusb never gave back

    def _completed(self, transfer) -> None:
        self._done.add(int(transfer.contents.user_data or 0))

    def _events(self, seconds: float) -> None:
        tv = Timeval(int(seconds), int((seconds % 1) * 1e6))
        rc = self.api.handle_events_timeout_completed(self.ctx, byref(tv), None)
        if rc < 0 and rc != -10:                                 # LIBUSB_ERROR_INTERRUPTED: try again
            raise _libusb_error(rc, "libusb_handle_events")

    def submit(self, transfers: list[StreamTransfer], timeout_ms: int) -> None:
        """Runs the batch; a transfer that ends otherwise than completed raises, except data transfers
        cancelled because every status-pipe transfer had completed (their commands failed without data:
        the caller reads why from the status); those get status "cancelled"."""
        api, n = self.api, len(transfers)
        self._done = set()
        ptrs, bufs, submitted = [], [], []
        try:
            for i, t in enumerate(transfers):
                p = api.alloc_transfer(0)
                if not p:
                    raise usb.core.USBError("libusb_alloc_transfer failed", -11, errno.ENOMEM)
                ptrs.append(p)
                size = len(t.buffer)
                buf = ctypes.create_string_buffer(max(1, size))
                if size and (not t.is_in or isinstance(t, ControlTransfer)):   # a control IN's setup packet too
                    ctypes.memmove(buf, bytes(t.buffer), size)
                bufs.append(buf)
                x = p.contents
                x.dev_handle, x.endpoint, x.timeout, x.flags = self.handle, t.endpoint, 0, 0
                x.type = (LIBUSB_TRANSFER_TYPE_CONTROL if isinstance(t, ControlTransfer) else
                          LIBUSB_TRANSFER_TYPE_BULK_STREAM if t.stream else LIBUSB_TRANSFER_TYPE_BULK)
                x.length, x.actual_length, x.status = size, 0, -1
                x.buffer = ctypes.addressof(buf)
                x.callback, x.user_data, x.num_iso_packets = self._callback, i + 1, 0
                if t.stream:
                    api.transfer_set_stream_id(p, t.stream)
            # bulk INs first (the host is ready for what the commands produce); control transfers keep
            # their order among the rest (EP0 runs them in turn)
            early = [i for i, t in enumerate(transfers) if t.is_in and not isinstance(t, ControlTransfer)]
            order = early + [i for i in range(n) if i not in early]
            for i in order:
                rc = api.submit_transfer(ptrs[i])
                if rc < 0:
                    raise _libusb_error(rc, f"libusb_submit_transfer (endpoint {transfers[i].endpoint:#04x}, "
                                            f"stream {transfers[i].stream})")
                submitted.append(i)
            deadline = time.monotonic() + timeout_ms / 1000
            answers, kept = {i + 1 for i, t in enumerate(transfers) if t.endpoint == self.status_endpoint}, set()
            while len(self._done) < n:
                if answers and answers <= self._done:       # every command answered: a failed one's data
                    kept = self._cancel([i for i in range(n) if i + 1 not in self._done], ptrs, bufs)
                    break                                   # never comes
                left = deadline - time.monotonic()
                if left <= 0:
                    raise usb.core.USBTimeoutError(f"{n - len(self._done)} of {n} stream transfers did not "
                                                   f"complete in {timeout_ms} ms", -7, errno.ETIMEDOUT)
                self._events(min(left, EVENT_SLICE_S))
                failed = next((i for i in sorted(self._done) if ptrs[i - 1].contents.status), None)
                if failed is not None and len(self._done) < n:      # one failed: the rest will not come
                    st, t = ptrs[failed - 1].contents.status, transfers[failed - 1]
                    raise usb.core.USBError(f"endpoint {t.endpoint:#04x} stream {t.stream}: "
                                            f"{TRANSFER_STATUS.get(st, st)}", None, TRANSFER_ERRNO.get(st, errno.EIO))
        except BaseException:
            kept = self._cancel([i for i in submitted if i + 1 not in self._done], ptrs, bufs)
            for i, p in enumerate(ptrs):
                if i not in kept:
                    api.free_transfer(p)
            raise
        statuses = []
        for i, t in enumerate(transfers):
            if i in kept:                                   # abandoned to libusb: not ours to read or free
                t.actual, st = 0, LIBUSB_TRANSFER_CANCELLED
            else:
                x = ptrs[i].contents
                t.actual, st = x.actual_length, x.status
                if t.is_in:
                    off = getattr(t, "data_offset", 0)
                    t.buffer[off:off + t.actual] = ctypes.string_at(x.buffer + off, t.actual)
                api.free_transfer(ptrs[i])
            t.status = TRANSFER_STATUS.get(st, f"status {st}")
            statuses.append(st)
        for t, st in zip(transfers, statuses):
            if st == LIBUSB_TRANSFER_CANCELLED and self.status_endpoint is not None:
                continue
            if st == LIBUSB_TRANSFER_TIMED_OUT:
                raise usb.core.USBTimeoutError(f"endpoint {t.endpoint:#04x} stream {t.stream}: timed out", -7,
                                               errno.ETIMEDOUT)
            if st != LIBUSB_TRANSFER_COMPLETED:
                raise usb.core.USBError(f"endpoint {t.endpoint:#04x} stream {t.stream}: "
                                        f"{TRANSFER_STATUS.get(st, st)}", None, TRANSFER_ERRNO.get(st, errno.EIO))

    def _cancel(self, pending: list[int], ptrs, bufs) -> set[int]:
        """Cancels what is still in flight and waits for libusb to give each back; a transfer that never
        comes back is abandoned (with its buffer) rather than freed under libusb's feet."""
        for i in pending:
            self.api.cancel_transfer(ptrs[i])
        end = time.monotonic() + CANCEL_GRACE_S
        while any(i + 1 not in self._done for i in pending) and time.monotonic() < end:
            try:
                self._events(EVENT_SLICE_S)
            except usb.core.USBError:
                break
        kept = {i for i in pending if i + 1 not in self._done}
        self._abandoned += [(ptrs[i], bufs[i]) for i in kept]
        return kept

    def close(self) -> None:
        self.api.free_streams(self.handle, self._eps, len(self.endpoints))


class LibusbAsync(LibusbStreams):
    """The same asynchronous batches without streams: control transfers and plain bulk transfers (the open
    firmware's link): no libusb_alloc_streams, nothing to free."""

    def __init__(self, lib, ctx, handle):
        self.api, self.ctx, self.handle = LibusbAPI(lib), ctx, handle
        self.status_endpoint, self.endpoints, self.streams = None, [], 0
        self._done: set[int] = set()
        self._callback = TRANSFER_CALLBACK(self._completed)
        self._abandoned: list = []

    def close(self) -> None:
        pass


def open_async(dev):
    """libusb's asynchronous transfers on pyusb's libusb1 backend for `dev` (opened, interface claimed), or
    None with another backend (one that offers `submit_async` itself, or none: synchronous calls)."""
    ctx = dev._ctx
    try:
        from usb.backend import libusb1
    except ImportError:                  # pragma: no cover - pyusb always ships it
        return None
    if not isinstance(ctx.backend, libusb1._LibUSB):
        return None
    try:
        return LibusbAsync(ctx.backend.lib, ctx.backend.ctx, ctx.managed_open().handle)
    except StreamsUnavailable:
        return None


def open_engine(dev, endpoints: list[int], num_streams: int, status_endpoint: int | None = None):
    """A stream engine for `dev` (a pyusb Device, opened and its interface claimed) with `num_streams`
    streams on `endpoints`; raises StreamsUnavailable when there is none. `status_endpoint`: once all of a
    batch's transfers there have completed, what is still in flight is cancelled, not waited for."""
    ctx = dev._ctx                       # pyusb's _ResourceManager: .backend, .handle (after open)
    backend, handle = ctx.backend, ctx.managed_open()
    if callable(getattr(backend, "submit_streams", None)) and callable(getattr(backend, "alloc_streams", None)):
        return BackendStreams(backend, handle, endpoints, num_streams, status_endpoint)
    try:
        from usb.backend import libusb1
    except ImportError:                  # pragma: no cover - pyusb always ships it
        libusb1 = None
    if libusb1 is not None and isinstance(backend, libusb1._LibUSB):
        return LibusbStreams(backend.lib, backend.ctx, handle.handle, endpoints, num_streams, status_endpoint)
    raise StreamsUnavailable(f"the pyusb backend {type(backend).__name__} has no bulk streams")

