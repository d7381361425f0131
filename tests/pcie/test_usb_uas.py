"""pcie.usb: the UAS link with USB 3 bulk streams (pcie.usb.link.UASLink, pcie.usb.streams).

- The ctypes declarations of libusb's stream API: struct libusb_transfer compared with the C layout
  (compiled against <libusb-1.0/libusb.h>), and every declared symbol resolved in the system libusb.
- The link over the simulated bridge (gpusim.usb_bridge and its stream extension).
- The libusb engine's batch logic against `ScriptedLibusb`, a test double of libusb's asynchronous API.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import struct
import subprocess

import pytest

from pcie.usb import link as L
from pcie.usb import protocol as p
from pcie.usb import streams
from pcie.usb.link import BOTLink, BridgeError, Command, TransferStalled, UASLink
from pcie.lock import DeviceLock



# -- libusb through ctypes ------------------------------------------------------------------------------

FIELDS = ("dev_handle", "flags", "endpoint", "type", "timeout", "status", "length", "actual_length", "callback",
          "user_data", "buffer", "num_iso_packets", "iso_packet_desc")
HEADER = "/usr/include/libusb-1.0/libusb.h"


def test_libusb_transfer_layout_matches_the_header(tmp_path):
    import os
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler (gcc) to check struct libusb_transfer against")
    if not os.path.exists(HEADER):
        pytest.skip(f"{HEADER} is missing: install libusb-1.0-0-dev (scripts/install-system-deps.sh)")
    src = tmp_path / "layout.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <libusb-1.0/libusb.h>\nint main(void) {\n"
                   '  printf("sizeof %zu\\n", sizeof(struct libusb_transfer));\n'
                   + "".join(f'  printf("{f} %zu\\n", offsetof(struct libusb_transfer, {f}));\n' for f in FIELDS)
                   + '  printf("iso_sizeof %zu\\n", sizeof(struct libusb_iso_packet_descriptor));\n'
                   + '  printf("BULK %d\\nBULK_STREAM %d\\nCOMPLETED %d\\nTIMED_OUT %d\\nCANCELLED %d\\n'
                     'STALL %d\\nNO_DEVICE %d\\nOVERFLOW %d\\nERROR %d\\n", LIBUSB_TRANSFER_TYPE_BULK, '
                     'LIBUSB_TRANSFER_TYPE_BULK_STREAM, LIBUSB_TRANSFER_COMPLETED, LIBUSB_TRANSFER_TIMED_OUT, '
                     'LIBUSB_TRANSFER_CANCELLED, LIBUSB_TRANSFER_STALL, LIBUSB_TRANSFER_NO_DEVICE, '
                     'LIBUSB_TRANSFER_OVERFLOW, LIBUSB_TRANSFER_ERROR);\n  return 0;\n}\n')
    exe = tmp_path / "layout"
    r = subprocess.run([cc, str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    c = {k: int(v) for k, v in (line.split() for line in subprocess.check_output([str(exe)], text=True).splitlines())}
    T = streams.LibusbTransfer
    assert ctypes.sizeof(T) == c["sizeof"]
    for f in FIELDS:
        assert getattr(T, f).offset == c[f], f
    assert ctypes.sizeof(streams.IsoPacketDescriptor) == c["iso_sizeof"]
    assert (streams.LIBUSB_TRANSFER_TYPE_BULK, streams.LIBUSB_TRANSFER_TYPE_BULK_STREAM) == (c["BULK"],
                                                                                           c["BULK_STREAM"])
    assert (streams.LIBUSB_TRANSFER_COMPLETED, streams.LIBUSB_TRANSFER_ERROR, streams.LIBUSB_TRANSFER_TIMED_OUT,
            streams.LIBUSB_TRANSFER_CANCELLED, streams.LIBUSB_TRANSFER_STALL, streams.LIBUSB_TRANSFER_NO_DEVICE,
            streams.LIBUSB_TRANSFER_OVERFLOW) == tuple(c[k] for k in ("COMPLETED", "ERROR", "TIMED_OUT", "CANCELLED",
                                                                     "STALL", "NO_DEVICE", "OVERFLOW"))


def test_libusb_stream_symbols_resolve():
    name = ctypes.util.find_library("usb-1.0")
    if not name:
        pytest.skip("libusb-1.0 is not installed")
    lib = ctypes.CDLL(name)
    api = streams.LibusbAPI(lib)
    for sym in streams.PROTOTYPES:
        assert getattr(api, sym[len("libusb_"):]) is not None
    # pyusb's own prototypes on the same library object stay as pyusb declared them
    assert lib.libusb_alloc_transfer is not lib["libusb_alloc_transfer"]


def test_libusb_transfer_round_trip_in_memory():
    """libusb's own allocator gives a transfer our Structure reads and writes (no device needed)."""
    name = ctypes.util.find_library("usb-1.0")
    if not name:
        pytest.skip("libusb-1.0 is not installed")
    api = streams.LibusbAPI(ctypes.CDLL(name))
    t = api.alloc_transfer(0)
    try:
        t.contents.endpoint, t.contents.type, t.contents.length = 0x81, streams.LIBUSB_TRANSFER_TYPE_BULK_STREAM, 64
        api.transfer_set_stream_id(t, 7)
        assert (t.contents.endpoint, t.contents.type, t.contents.length, t.contents.num_iso_packets) == \
            (0x81, 4, 64, 0)
    finally:
        api.free_transfer(t)


# -- the UAS wire format ---------------------------------------------------------------------------------

def test_command_iu_and_status_iu():
    cdb = p.xdata_write_cdb(0xB296, 4)
    iu = L.command_iu(5, cdb)
    assert len(iu) == 32 and iu[0] == 0x01 and iu[2:4] == b"\x00\x05" and iu[4] & 7 == L.TASK_ORDERED
    assert iu[6] == 0 and iu[8:16] == bytes(8) and iu[16:16 + len(cdb)] == cdb and iu[16 + len(cdb):] == bytes(
        16 - len(cdb))
    sense = bytes([0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00, 0, 0, 0, 0])
    raw = struct.pack(">BxHHB7xH", 0x03, 5, 0, 2, len(sense)) + sense
    assert L.parse_status_iu(raw) == (5, 2, sense)
    assert "ILLEGAL REQUEST" in L.describe_sense(sense) and "0x20" in L.describe_sense(sense)
    with pytest.raises(ValueError, match="response code 0x02"):
        L.parse_status_iu(struct.pack(">BxH3xB", 0x04, 5, 0x02))
    with pytest.raises(ValueError):
        L.command_iu(1, bytes(17))


# -- over the simulated bridge ---------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _private_locks(tmp_path, monkeypatch):
    from pcie.usb import transport
    monkeypatch.setattr(transport, "DeviceLock", lambda address, directory=None: DeviceLock(address, tmp_path))
    monkeypatch.delenv("DRIVERLESS_USB_LINK", raising=False)


def _sim(bus, **kw):
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    return usb_bridge.backend("navi31", fresh=True, bus=bus, **kw)


def _open(backend, **kw):
    from pcie.usb.transport import open_function
    return open_function("", backend=backend, **kw)


def test_sim_picks_uas_with_ordered_commands(sim_bus, monkeypatch):
    b = _sim(sim_bus)
    ius, submits = [], []
    real = b.submit_streams

    def recording(handle, transfers, timeout_ms):
        submits.append(len(transfers))
        ius.extend(bytes(t.buffer) for t in transfers if t.endpoint == 0x04)
        return real(handle, transfers, timeout_ms)
    monkeypatch.setattr(b, "submit_streams", recording)
    f = _open(b)
    try:
        assert isinstance(f.link, UASLink) and f.link.slots == 16
        assert (f.link.ep_command, f.link.ep_status, f.link.ep_in, f.link.ep_out) == (0x04, 0x83, 0x81, 0x02)
        assert (f.vendor_id, f.device_id) == (0x1002, 0x744C) and f.gpu_bus == 4
        assert ius and all(iu[4] & 7 == L.TASK_ORDERED for iu in ius)
        assert len(submits) == f.counters.round_trips                # one submission per round trip
        assert b.bridge.counters.round_trips == f.counters.round_trips    # both sides count the same
        assert len(ius) == f.link.stats.commands > f.counters.round_trips
    finally:
        f.close()


def _register_costs(f):
    regs, scratch = f.bar(5), 4 * 0xC040
    regs.write32(scratch, 0x13572468)
    regs.flush()
    t = f.counters.round_trips
    regs.write32(scratch, 0xCAFEF00D)
    regs.flush()
    write = f.counters.round_trips - t
    t = f.counters.round_trips
    assert regs.read32(scratch) == 0xCAFEF00D
    read = f.counters.round_trips - t
    t = f.counters.round_trips
    for i in range(16):
        regs.write32(scratch, 0x1000 + i)                          # changes the low data byte (and the 2nd)
    assert regs.read32(scratch) == 0x100F
    burst = f.counters.round_trips - t
    buf = f.alloc_dma(4096)
    buf.view[:] = bytes(i & 0xFF for i in range(4096))
    t = f.counters.round_trips
    buf.push()
    f.flush()                                                     # pushes are queued like posted writes
    push = f.counters.round_trips - t
    return write, read, burst, push


def test_sim_uas_costs_fewer_round_trips_than_bot(sim_bus, monkeypatch):
    uas = _open(_sim(sim_bus))
    try:
        assert isinstance(uas.link, UASLink)
        opened_uas = uas.counters.round_trips
        costs_uas = _register_costs(uas)
    finally:
        uas.close()
    monkeypatch.setenv("DRIVERLESS_USB_LINK", "bot")
    bot = _open(_sim(sim_bus))
    try:
        assert isinstance(bot.link, BOTLink)
        opened_bot = bot.counters.round_trips
        costs_bot = _register_costs(bot)
    finally:
        bot.close()
    print(f"open {opened_uas} vs {opened_bot}; write, read, 16 writes + read, 4 KiB push: {costs_uas} vs {costs_bot}")
    # BOT, one round trip per command: a write is its 4 changed data bytes, the kick and the status clear (6);
    # a read: the type (MWr -> MRd), kick, clear, then the status poll and the completion read (5). The 16
    # writes: the first changes all 4 data bytes (the read left 0xCAFEF00D there) and the type back to MWr
    # (4 + 1 + 2), the 15 others the low byte only (1 + 2 each), then the read: 7 + 45 + 5 = 57. A pushed
    # page: the WRITE(16) and its 5 bookkeeping E5s (6).
    assert costs_bot == (6, 5, 57, 6)
    # UAS, up to 16 commands per round trip, a read riding in the batch of the writes before it: the write's
    # 6 E5s (1); a read: type, kick, clear, the status poll (E4) and the completion read (E4): 5 commands (1);
    # the 16 writes + read: 52 + 3 E5s, poll, completion = 57 commands in 4 batches (4); the push: the
    # WRITE(16) and its 5 bookkeeping E5s, queued, sent by the flush (1).
    assert costs_uas == (1, 1, 4, 1)
    assert opened_uas * 5 < opened_bot                     # 68 vs 459 measured


def test_sim_uas_registers_and_window_both_ways(sim_bus):
    b = _sim(sim_bus)
    f = _open(b)
    try:
        assert isinstance(f.link, UASLink)
        regs, vram = f.bar(5), f.bar(0)
        regs.write32(4 * 0xC040, 0xDEADBEEF)
        assert regs.read32(4 * 0xC040) == 0xDEADBEEF
        for offset, size in ((1, 3), (6, 11), (0x1FFF, 5)):
            data = bytes(range(size))
            vram.write(offset, data)
            assert vram.read(offset, size) == data
        buf = f.alloc_dma(333, readback=True)
        buf.view[:] = bytes(i & 0xFF for i in range(333))
        buf.push()
        buf.view[:] = bytes(333)
        buf.pull()                                                # 2 E4 reads (255 + 78 bytes): one batch
        assert bytes(buf.view) == bytes(i & 0xFF for i in range(333))
        second = f.alloc_dma(8192)
        second.view[:] = bytes(range(256)) * 32
        second.push()
        f.flush()
        assert b.bridge.sram[0x1000:0x3000] == bytes(range(256)) * 32
        s = f.link.stats
        assert s.payload_out >= 3 * 4096 and s.payload_in >= 333 and s.wire_out > s.payload_out
    finally:
        f.close()


def test_sim_uas_stall_is_an_error_not_a_hang(sim_bus):
    b = _sim(sim_bus)
    f = _open(b)
    assert isinstance(f.link, UASLink)
    b.bridge.inject("stall", after=2)
    with pytest.raises(TransferStalled, match="USB bridge"):
        f.bar(5).read32(0)
    f.link.close()
    f._lock.release()


def test_sim_uas_check_condition_names_cdb_and_sense(sim_bus):
    f = _open(_sim(sim_bus))
    try:
        with pytest.raises(BridgeError, match=r"(?s)CDB 12.*ILLEGAL REQUEST.*0x20"):
            f.link.execute([Command(bytes([0x12, 0, 0, 0, 36, 0]), read=36)])   # INQUIRY: not modeled
    finally:
        f.close()


def test_bot_forced_by_env_or_argument(sim_bus, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_USB_LINK", "bot")
    f = _open(_sim(sim_bus))
    try:
        assert isinstance(f.link, BOTLink)
        assert f.bar(5).read32(4 * 0xC040) is not None
    finally:
        f.close()
    from pcie.interface import AccessCounters
    for env, arg, kind in (("uas", "bot", BOTLink), ("bot", "uas", UASLink), ("", None, UASLink)):
        monkeypatch.setenv("DRIVERLESS_USB_LINK", env)
        b = _sim(sim_bus)
        dev = L.find_bridges(b)[0]
        link = L.make_link(dev, AccessCounters(), link=arg)
        assert isinstance(link, kind)
        link.close()
    monkeypatch.setenv("DRIVERLESS_USB_LINK", "scsi")
    with pytest.raises(BridgeError, match="unknown link"):
        L.make_link(L.find_bridges(_sim(sim_bus))[0], AccessCounters())


def test_falls_back_to_bot_without_streams(sim_bus, monkeypatch):
    """No UAS on the ROM (174c:2463); a backend without streams; streams refused: BOT on alt 0, working."""
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    rom = usb_bridge.backend("navi31", fresh=True, bus=sim_bus, pid=0x2463)
    f = _open(rom)
    try:
        assert isinstance(f.link, BOTLink)
    finally:
        f.close()

    class NoStreams(usb_bridge.BridgeBackend):
        alloc_streams = submit_streams = free_streams = None

    plain = NoStreams(usb_bridge.open_bridge("navi31", fresh=True, bus=sim_bus))
    f = _open(plain)
    try:
        assert isinstance(f.link, BOTLink) and plain.alt == 0
        assert f.bar(5).read32(4 * 0xC040) is not None
    finally:
        f.close()

    refusing = _sim(sim_bus)
    monkeypatch.setattr(type(refusing), "alloc_streams", lambda self, h, n, eps: 0)
    f = _open(refusing)
    try:
        assert isinstance(f.link, BOTLink) and refusing.alt == 0
        assert f.bar(5).read32(4 * 0xC040) is not None
    finally:
        f.close()
    monkeypatch.setenv("DRIVERLESS_USB_LINK", "uas")
    with pytest.raises(BridgeError, match="bulk streams"):
        _open(refusing)


# -- the libusb engine's batch logic, against a scripted stand-in for libusb (no device needed) ----------

class _Fn:
    def __init__(self, fn):
        self.fn, self.restype, self.argtypes = fn, None, None

    def __call__(self, *a):
        return self.fn(*a)


class ScriptedLibusb:
    """A TEST DOUBLE of libusb-1.0's asynchronous API: real `struct libusb_transfer`s (our Structure),
    completed in handle_events by `answer(transfer) -> (status, data) | None` (None: never completes)."""

    def __init__(self, answer, streams_granted=16):
        self.answer, self.granted = answer, streams_granted
        self.live, self.pending, self.order, self.cancelled, self.stream_of = {}, [], [], [], {}

    def __getitem__(self, name):
        return _Fn(getattr(self, name[len("libusb_"):]))

    def alloc_streams(self, handle, n, eps, k):
        return min(n, self.granted)

    def free_streams(self, handle, eps, k):
        return 0

    def alloc_transfer(self, iso):
        t = streams.LibusbTransfer()
        p = ctypes.pointer(t)
        self.live[ctypes.addressof(t)] = t
        return p

    def free_transfer(self, p):
        del self.live[ctypes.addressof(p.contents)]

    def transfer_set_stream_id(self, p, sid):
        self.stream_of[ctypes.addressof(p.contents)] = sid

    def submit_transfer(self, p):
        self.order.append((p.contents.endpoint, self.stream_of.get(ctypes.addressof(p.contents), 0)))
        self.pending.append(p)
        return 0

    def cancel_transfer(self, p):
        self.cancelled.append(p.contents.endpoint)
        p.contents.status = streams.LIBUSB_TRANSFER_CANCELLED
        return 0

    def handle_events_timeout_completed(self, ctx, tv, completed):
        for ptr in list(self.pending):
            x = ptr.contents
            if x.status == streams.LIBUSB_TRANSFER_CANCELLED:
                done = (streams.LIBUSB_TRANSFER_CANCELLED, b"")
            else:
                done = self.answer(x, self.stream_of.get(ctypes.addressof(x), 0))
            if done is None:
                continue
            self.pending.remove(ptr)
            x.status, data = done
            if x.endpoint & 0x80:
                ctypes.memmove(x.buffer, data, len(data))
                x.actual_length = len(data)
            elif x.status == streams.LIBUSB_TRANSFER_COMPLETED:
                x.actual_length = x.length
            x.callback(ptr)
        return 0


def _engine(lib):
    return streams.LibusbStreams(lib, None, 0x1234, [0x81, 0x02, 0x83], 16, status_endpoint=0x83)


def test_libusb_engine_runs_a_batch_ins_first():
    def answer(x, sid):
        if x.endpoint == 0x81:
            return streams.LIBUSB_TRANSFER_COMPLETED, bytes([sid]) * x.length
        return streams.LIBUSB_TRANSFER_COMPLETED, b"\x03" + bytes(x.length - 1) if x.endpoint == 0x83 else b""
    lib = ScriptedLibusb(answer, streams_granted=8)
    eng = _engine(lib)
    assert eng.streams == 8
    batch = [streams.StreamTransfer(0x04, 0, bytes(32)), streams.StreamTransfer(0x81, 1, bytearray(5)),
             streams.StreamTransfer(0x83, 1, bytearray(64)), streams.StreamTransfer(0x04, 0, bytes(32)),
             streams.StreamTransfer(0x02, 2, b"abc"), streams.StreamTransfer(0x83, 2, bytearray(64))]
    eng.submit(batch, 1000)
    assert [ep for ep, _ in lib.order[:3]] == [0x81, 0x83, 0x83]          # the host is ready before commands
    assert sorted(lib.order) == sorted((t.endpoint, t.stream) for t in batch)
    assert batch[1].buffer == b"\x01" * 5 and batch[4].actual == 3 and all(t.status == "completed" for t in batch)
    assert not lib.live                                                    # every transfer freed


def test_libusb_engine_deadline_cancels_and_raises():
    import usb.core
    lib = ScriptedLibusb(lambda x, sid: None if x.endpoint == 0x83 else (streams.LIBUSB_TRANSFER_COMPLETED, b""))
    eng = _engine(lib)
    batch = [streams.StreamTransfer(0x04, 0, bytes(32)), streams.StreamTransfer(0x83, 1, bytearray(64))]
    with pytest.raises(usb.core.USBTimeoutError):
        eng.submit(batch, 50)
    assert lib.cancelled == [0x83] and not lib.live and not lib.pending


def test_libusb_engine_stall_and_failed_command_data():
    import errno
    import usb.core
    lib = ScriptedLibusb(lambda x, sid: (streams.LIBUSB_TRANSFER_STALL, b"") if x.endpoint == 0x02
                         else None if x.endpoint == 0x83 else (streams.LIBUSB_TRANSFER_COMPLETED, b""))
    batch = [streams.StreamTransfer(0x04, 0, bytes(32)), streams.StreamTransfer(0x02, 1, b"x"),
             streams.StreamTransfer(0x83, 1, bytearray(64))]
    with pytest.raises(usb.core.USBError) as e:
        _engine(lib).submit(batch, 1000)
    assert e.value.errno == errno.EPIPE and not lib.live
    # a command answered (its Sense IU in) whose data never comes: the data transfer is cancelled, no error
    lib = ScriptedLibusb(lambda x, sid: None if x.endpoint == 0x81 else
                         (streams.LIBUSB_TRANSFER_COMPLETED, b"\x03" + bytes(15) if x.endpoint == 0x83 else b""))
    batch = [streams.StreamTransfer(0x04, 0, bytes(32)), streams.StreamTransfer(0x81, 1, bytearray(8)),
             streams.StreamTransfer(0x83, 1, bytearray(64))]
    _engine(lib).submit(batch, 1000)
    assert [t.status for t in batch] == ["completed", "cancelled", "completed"] and not lib.live
