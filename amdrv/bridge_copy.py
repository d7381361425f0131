"""Bulk copies between the host and the GPU over a USB bridge running the open firmware: the bridge's SRAM
DMA (0xF2) moves the bytes, the GPU's SDMA engine moves them on and says when (docs/usb.md, "Bulk copies on
the open firmware").

The copier has an SDMA queue of its own (the engine hcq's copies do not use) whose ring is built once per
device and pushed once: entries that alternate between two windows k = 0, 1, each "if the direction word k
says in, run descriptor in-k; if it says out, run descriptor out-k" (COND_EXE, INDIRECT). The descriptors
(small IBs), the direction words and the ring's write-pointer shadow live in the page the host reaches byte by
byte (XDATA 0xF000, 0xE5 writes), so a chunk needs no ring push: the host writes the few descriptor bytes that
changed (an address, a count, a marker, a sequence number), the direction word and the write pointer, and
rings the doorbell, in the same round trip as the chunk's own transfer.
- The windows: two runs of whole SRAM slots, one after the other, as large as the bridge's 512 KiB SRAM
  leaves them (window_slots: every free slot, at most 16, 256 KiB, each). The rings, kernarg arena and page
  tables are in VRAM on this firmware (amdrv.placement), so only the read-back page and the dummy pages
  share the SRAM with them. A host buffer that finds the SRAM full takes the windows back (release_windows:
  after the GPU is seen done with them); the next copy takes what is free then.
- The sentinel is each window's last dword, which the GPU sets to a marker after copying a chunk out of it:
  descriptor in-k polls until that dword differs from the marker, then copies. A chunk ends at its window's
  end (a short one is sent in the window's last slots), so its own last dword is the sentinel; where that
  dword equals the marker standing there, the chunk is sent 4 bytes shorter with a pad dword that does not
  (collides()). A chunk's payload is the whole window. Assumption, the peer's design too: the SRAM DMA writes
  a transfer's bytes in address order, so the last dword's arrival means the rest is there.
- Copy-in: the two windows used in turn. Descriptor in-k: POLL_REGMEM until window k's last dword differs
  from the marker there, COPY_LINEAR window → VRAM, the next marker into that last dword, the sequence number
  into a fence in the read-back page. Per chunk one round trip: the descriptor bytes, the doorbell, an 0xE4
  read of the fence, 0xF2 and bulk OUT of the chunk's slots. A window is refilled only after a fence read has
  shown the GPU done with the chunk that was in it (its marker written); the copy ends with a wait for the
  last fence.
- Copy-out: both windows as one region but their last dwords (the markers stay): descriptor out-k copies the
  chunk into window 0 up to its last dword and on into window 1 up to its, then writes to the bridge's
  completion window (PCIe 0x822000), which releases the armed SRAM-to-host DMA. Per chunk one round trip: the
  descriptor bytes and the doorbell, 0xF2 (SRAM to host), the go word the GPU waits for, then bulk IN of the
  region: the go follows the arm on EP0, so the GPU's release cannot come before the arm.
"""
from __future__ import annotations

import struct
import time

from amdrv import sdma_packets
from amdrv.queue import SDMAQueue
from amdrv.usb import protocol as p
from amdrv.usb.link import Bulk
from amdrv.usb.transport import sram_dma_request, xdata_read

MAX_WINDOW_SLOTS = 16         # 256 KiB a window at most (issue 16's design: two 256 KiB windows)
WINDOWS = 2                   # used in turn: a window is refilled once the fence read at the start of a round
                              # trip shows the chunk before copied (the GPU copies 256 KiB in tens of us, less
                              # than a round trip's latency); if not yet, the host reads the fence again
RING_BYTES = 4096             # the copier's ring: 32 entries of 32 dwords
ENTRY_DW = 32
DIR_IN, DIR_OUT = 1, 2
# The copier's words in the read-back page (its first 3 KiB hold no signals; on the open firmware nothing
# bounces through them): descriptors (IBs, 32-byte aligned), the direction words, the write-pointer shadow.
IN_DESC = (0x000, 0x060)      # POLL_REGMEM 6 + COPY_LINEAR 7 + FENCE 4 (the marker) + FENCE 4 dwords
OUT_DESC = (0x0C0, 0x120)     # POLL_REGMEM 6 + COPY_LINEAR 7 (window 0) + COPY_LINEAR 7 or NOP 7 (window 1) + FENCE 4
IN_DW, OUT_DW = 21, 24
DIR_WORD = (0x180, 0x184)
WPTR_SHADOW = 0x188
GO_WORD = 0x190               # copy-out: the chunk the GPU may copy (written after the DMA's arm)
AREA = 0x1A0
MARKER = 0x5E9D0000           # markers are MARKER | (sequence number & 0xFFFF): any value works (collides())
_M32 = 0xFFFFFFFF


def window_slots(fn) -> int:
    """SRAM slots per window: half of what is free, at most MAX_WINDOW_SLOTS (the SRAM is 512 KiB; the
    read-back page and the dummy pages hold the rest, with host buffers)."""
    free = fn.sram_free_slots()
    slots = min(MAX_WINDOW_SLOTS, free // WINDOWS)
    if slots < 1:
        from hcq import HCQError
        raise HCQError(f"{fn.address}: bulk copies through the USB bridge need two windows of at least one "
                       f"{p.SRAM_SLOT >> 10} KiB SRAM slot; {free} of the {p.SRAM_SLOTS} slots are free "
                       f"(docs/usb.md, SRAM budget): free host buffers first")
    return slots


def collides(data, marker: int) -> bool:
    """Whether a chunk ending at its window's end would end in `marker` (its bytes zero-padded to a dword)."""
    tail = bytes(data[len(data) - (len(data) - 1) % 4 - 1:]) if len(data) else b""
    return len(data) > 0 and struct.unpack("<I", tail + bytes(4 - len(tail)))[0] == marker


class _CopierQueue(SDMAQueue):
    """Queue 0 of an SDMA engine set up as sdma_v6_0_gfx_resume does (SDMAQueue), with its write-pointer
    shadow (RB_WPTR_POLL_ADDR) in the read-back page and a ring that holds the copier's entries for good:
    (re)initialising it (recover()) writes them back."""

    def __init__(self, gpu, engine: int, copier: "BridgeCopier"):
        self.copier = copier
        super().__init__(gpu, engine, RING_BYTES)

    def init(self) -> None:
        self.wptr_va = self.copier.page_va + WPTR_SHADOW
        super().init()

    def _reset_ring(self) -> None:
        self.wptr = self.rptr_seen = 0
        c = self.copier
        c.in_window, c.unseen = [0] * WINDOWS, 0       # what was in flight is dropped
        c.markers = None                               # a chunk may have landed uncopied: set the markers again
        self.mem.view[:self.ring_size] = c.ring_image()
        self.mem.dma.push(0, self.ring_size)
        c.store(WPTR_SHADOW, bytes(8))

    def bump(self) -> int:
        """One entry more for the engine: the shadow's changed bytes, then the doorbell (both queued on
        EP0, in order). Returns the entry's window."""
        k = self.wptr // ENTRY_DW % WINDOWS
        self.wptr += ENTRY_DW
        value = self.wptr * 4 // self.wptr_unit
        self.copier.store(WPTR_SHADOW, struct.pack("<Q", value))
        self.doorbell.write64(self.doorbell_index * 4, value)
        return k


class BridgeCopier:
    """Per hcq device: the two SRAM windows (one DMA buffer) and their GPU mapping (taken at a copy, given
    back to host buffers that need the SRAM), the copier's queue, its descriptors in the read-back page, the
    fence, the completion window's mapping, and the sequence number (it only grows)."""

    def __init__(self, dev):
        self.dev, self.fn = dev, dev.gpu.dev.pci
        self.region = self.map = None
        self.release = dev.gpu.gmc.map_system(self.fn.completion_window())
        self.fence = dev.new_signal(0)
        self.page, m = dev._signal_pages[0]
        self.page_va = m.va
        self.seq = 0                          # chunks so far, both ways (the fences' values)
        self.in_window = [0] * WINDOWS        # the copy-in chunk last sent into each window (0: none pending)
        self.unseen = 0                       # the last copy-in's last chunk, until a fence read shows it copied
        self.markers: list[int] | None = None  # what each window's last dword holds (None: not known)
        self.store(0, self._descriptors(), whole=True)
        engines = [e for e in dev.gpu.sdma.engines if e != dev.sdma.engine]
        if not engines:
            from hcq import HCQError
            raise HCQError(f"{dev.name}: bulk copies through the USB bridge need a second SDMA engine; this GPU "
                           f"has {dev.gpu.sdma.engines}")
        self.queue = _CopierQueue(dev.gpu, engines[-1], self)
        self.fn.sram_reclaimers.append(self.release_windows)
        self._windows()

    # -- the windows
    def _windows(self) -> None:
        """Takes the windows (every free slot, up to 16 each) and maps them, once per take."""
        if self.region is not None:
            return
        slots = window_slots(self.fn)
        self.window_bytes = slots * p.SRAM_SLOT
        self.chunk = self.window_bytes                    # a copy-in chunk: the whole window
        self.sentinel = self.window_bytes - 4             # each window's last dword
        self.out_chunk = 2 * self.sentinel                # a copy-out chunk: both windows but their last dwords
        self.region = self.fn.alloc_dma(WINDOWS * self.window_bytes, device_written=True)
        self.map = self.dev.gpu.gmc.map_system(self.region)
        self.window_va = [self.map.va + k * self.window_bytes for k in range(WINDOWS)]
        self.markers = None

    def release_windows(self) -> bool:
        """Gives the windows' slots back (for a host buffer that found the SRAM full), once the GPU is seen done
        with them; the next copy takes what is free then. False when there were none."""
        if self.region is None:
            return False
        gate = self.pending()
        if gate is not None:
            self.dev._wait(*gate, self.dev.default_timeout)
            self.unseen = 0
        self.dev.gpu.gmc.unmap(self.map)
        self.region.free()
        self.region = self.map = None
        self.in_window = [0] * WINDOWS
        return True

    def _set_markers(self) -> None:
        """Writes a marker into each window's last dword from the host (the windows' last slots, one SRAM DMA
        each): needed when no descriptor has written them (new windows, a reset queue)."""
        self.markers = [MARKER ^ 0xFFFF] * WINDOWS
        for k in range(WINDOWS):
            end = (k + 1) * self.window_bytes
            struct.pack_into("<I", self.region.view, end - 4, self.markers[k])
            self.region.push(end - p.SRAM_SLOT, p.SRAM_SLOT)

    # -- the words in the read-back page
    def store(self, offset: int, data: bytes, whole: bool = False) -> None:
        """Writes data at offset of the read-back page: the span of bytes that changed goes out as 0xE5
        writes (queued); whole=True sends it all (one SRAM DMA)."""
        view = self.page.view
        if whole:
            view[offset:offset + len(data)] = data
            self.page.push(offset, len(data))
            return
        changed = [i for i in range(len(data)) if view[offset + i] != data[i]]
        runs: list[list[int]] = []
        for i in changed:               # one 0xE5 per byte: runs of changed bytes, not the span between them
            if runs and i - runs[-1][1] <= 1:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
        for a, b in runs:
            view[offset + a:offset + b] = data[a:b]
            self.page.push(offset + a, b - a)

    def _in_desc(self, k: int, dst: int, at: int, n: int, marker: int, seq: int, window_va=None) -> bytes:
        """In-k: wait for window k's last dword to differ from `marker` (the chunk's arrival), copy n bytes from
        `at` in the window to dst, set the next marker (from seq) there, write seq to the fence."""
        va = (window_va or self.window_va)[k]
        s = sdma_packets.SDMABuilder()
        s.poll_mem(va + self.sentinel, marker, function=sdma_packets.POLL_NE, interval=1)
        s.copy(dst, va + at, n)
        s.fence(va + self.sentinel, self._marker(seq))
        s.fence(self.fence.va, seq & _M32)
        assert len(s) == IN_DW
        return s.buf.tobytes()

    @staticmethod
    def _marker(seq: int) -> int:
        return MARKER | seq & 0xFFFF

    def _out_desc(self, k: int, src: int, n: int, seq: int, window_va=None) -> bytes:
        va = window_va or self.window_va
        s = sdma_packets.SDMABuilder()
        s.poll_mem(self.page_va + GO_WORD, seq & _M32, function=sdma_packets.POLL_GE)
        first = min(n, self.sentinel)
        s.copy(va[0], src, first)
        if n > first:
            s.copy(va[1], src + first, n - first)
        else:
            s.nop(7)
        s.fence(self.release.va, seq & _M32)     # the write that releases the armed DMA
        assert len(s) == OUT_DW
        return s.buf.tobytes()

    def _descriptors(self) -> bytes:
        area = bytearray(AREA)
        self.sentinel, va = p.SRAM_SLOT - 4, [0, 0]      # placeholders: every chunk rewrites what differs
        for k in range(WINDOWS):
            area[IN_DESC[k]:IN_DESC[k] + 4 * IN_DW] = self._in_desc(k, 0, 0, 4, 0, 0, va)
            area[OUT_DESC[k]:OUT_DESC[k] + 4 * OUT_DW] = self._out_desc(k, 0, 4, 0, va)
        return bytes(area)

    def ring_image(self) -> bytes:
        """The ring's entries: per window, COND_EXE on its direction word then INDIRECT, once for each
        direction; NOPs so each INDIRECT ends on an 8-dword boundary (sdma_v6_0_ring_emit_ib)."""
        s = sdma_packets.SDMABuilder()
        for i in range(RING_BYTES // 4 // ENTRY_DW):
            k = i % WINDOWS
            for want, desc, ndw in ((DIR_IN, IN_DESC[k], IN_DW), (DIR_OUT, OUT_DESC[k], OUT_DW)):
                s.cond_exe(self.page_va + DIR_WORD[k], want, 11)
                s.nop(5)
                s.indirect(self.page_va + desc, ndw)
        assert len(s) * 4 == RING_BYTES
        return s.buf.tobytes()

    # -- copies
    def _fence_read(self):
        return xdata_read(p.WINDOW_XDATA + self.fence.offset, 8)

    def _window_free(self, k: int, done: int) -> int:
        """Reads the fence until the copy-in chunk last sent into window k is copied; returns the fence.
        HCQTimeout after the device's default timeout (the copier's queue is then stuck: recover() resets it)."""
        end = time.perf_counter() + self.dev.default_timeout
        while done < self.in_window[k]:
            if time.perf_counter() > end:
                from hcq import HCQTimeout
                raise HCQTimeout(f"{self.dev.name}: copy-in through the USB bridge: the GPU has not copied chunk "
                                 f"{self.in_window[k]} out of its SRAM window after {self.dev.default_timeout} s "
                                 f"(fence {done}); its SDMA queue may be hung: recover() the device")
            done = struct.unpack("<Q", self.fn.execute([self._fence_read()])[0])[0]
        return done

    def _chunk(self, k: int, desc: int, data: bytes, direction: int) -> None:
        self.store(desc, data)
        self.store(DIR_WORD[k], struct.pack("<I", direction))

    def copy_in(self, va: int, data: memoryview) -> None:
        self._windows()
        if self.markers is None:
            self._set_markers()
        n, at = len(data), 0
        done = self.fence.mem[0]
        W = self.window_bytes
        while at < n:
            k = self.queue.wptr // ENTRY_DW % WINDOWS
            done = self._window_free(k, done)
            self.seq += 1
            size = min(W, n - at)
            pad = -size % 4
            if collides(data[at:at + size], self.markers[k]):
                size = min(size, W - pad - 4)    # a pad dword that is not the marker ends the chunk instead
                pad = -size % 4 + 4
            sent = -(-(size + pad) // p.SRAM_SLOT) * p.SRAM_SLOT       # the window's last slots
            payload = bytearray(sent)
            payload[sent - pad - size:sent - pad] = data[at:at + size]
            if pad >= 4 and collides(payload, self.markers[k]):
                payload[-4:] = struct.pack("<I", self.markers[k] ^ 1)
            self._chunk(k, IN_DESC[k], self._in_desc(k, va + at, W - pad - size, size, self.markers[k], self.seq),
                        DIR_IN)
            self.queue.bump()
            got = self.fn.execute([self._fence_read(), self._sram_dma(k * W + W - sent, sent),
                                   Bulk(p.OPEN_BULK_OUT, bytes(payload))])
            done = struct.unpack("<Q", got[0])[0]
            self.in_window[k] = self.seq
            self.markers[k] = self._marker(self.seq)
            at += size
        self.fence.mem[0] = done
        # The last chunk is in the SRAM; the GPU copies it after this returns. Every later submission on the
        # device's other queues waits for its fence on the GPU (pending()), synchronize() reads it with the
        # other signals, and copy-out runs behind it on this queue: no round trip of its own.
        self.unseen = self.seq if done < self.seq else 0

    def copy_out(self, va: int, n: int, out: memoryview) -> None:
        self._windows()
        W, last = self.window_bytes, self.sentinel
        for at in range(0, n, self.out_chunk):
            k = self.queue.wptr // ENTRY_DW % WINDOWS
            self.seq += 1
            size = min(self.out_chunk, n - at)
            sent = -(-(size if size <= last else W + size - last) // p.BLOCK) * p.BLOCK
            self._chunk(k, OUT_DESC[k], self._out_desc(k, va + at, size, self.seq), DIR_OUT)
            self.queue.bump()
            # a TLP request (the doorbell) drops an armed DMA, so the arm follows it; the GPU waits for the go
            # word, written after the arm, so its release cannot come before the arm
            self.fn.queue(self._sram_dma(0, sent, to_host=True))
            self.store(GO_WORD, struct.pack("<I", self.seq & _M32))
            got = self.fn.execute([Bulk(p.OPEN_BULK_IN, length=sent)])[-1]
            if size <= last:
                out[at:at + size] = got[:size]
            else:
                out[at:at + last] = got[:last]
                out[at + last:at + size] = got[W:W + size - last]
        self.in_window, self.unseen = [0] * WINDOWS, 0     # the data in hand: every entry before it ran

    def _sram_dma(self, offset: int, nbytes: int, to_host: bool = False):
        """0xF2 for nbytes of the region from offset (a slot boundary)."""
        return sram_dma_request(self.region, nbytes, to_host=to_host, offset=offset)

    def pending(self):
        """(fence, value) while the last copy-in's last chunk has not been seen copied, else None."""
        if self.unseen and self.fence.mem[0] >= self.unseen:
            self.unseen = 0
        return (self.fence, self.unseen) if self.unseen else None


# -- the stock firmware's copy-out ----------------------------------------------------------------------------
# There the host reads back only the SRAM's first page (XDATA 0xF000), 255 bytes an 0xE4, 16 UAS commands a round
# trip: at most 16 x 255 bytes per round trip (257 round trips per MiB). One SDMA program per round of pieces
# copies them one after another into the page's start, each once the host's go word allows it, bracketed by a
# start word (written before the copy) and a done word (after it). Per round trip the host reads done, the
# piece, then start, and raises go by one after those reads (an ordered batch): done == start == s proves the
# bytes between are piece s whole, whatever the GPU did since. The go word runs ahead of what the host has
# seen, so a slow GPU can overwrite a piece before it is read: such a piece is fetched again at the end.
PIECE = 12 * 255              # 12 reads of 255 bytes, with done, start and go: 15 commands
DONE, START, GO = PIECE, PIECE + 4, PIECE + 8
BOUNCE_ROUND = 256            # pieces per SDMA submission (~22 KiB of the stock bridge's 32 KiB SDMA ring)


def bounce_out(dev, va: int, n: int, dst: memoryview) -> None:
    from amdrv.hcq import BOUNCE, AMCopyQueue
    assert GO + 4 <= BOUNCE
    dma, m = dev._signal_pages[0]
    fn = dev.gpu.dev.pci
    pieces = [(at, min(PIECE, n - at)) for at in range(0, n, PIECE)]
    for r in range(0, len(pieces), BOUNCE_ROUND):
        part = pieces[r:r + BOUNCE_ROUND]
        base = getattr(dev, "_bounce_seq", 0)
        last = base + len(part)
        dev._bounce_seq = last
        q = AMCopyQueue(dev)
        for i, (at, k) in enumerate(part):
            s = (base + i + 1) & _M32
            q.b.poll_mem(m.va + GO, s, function=sdma_packets.POLL_GE, interval=1)
            q.b.write(m.va + START, s)
            q.copy_va(m.va, va + at, k)
            q.b.fence(m.va + DONE, s)
        if r + BOUNCE_ROUND >= len(pieces):
            q.signal(dev.timeline, dev.next_timeline())
        dev.sdma.submit(dev._behind_bridge_copy(q), flush=False)
        go = base + 1
        fn.queue_xdata(*_changed(dma.view, GO, go))
        fn.flush()
        got: set[int] = set()
        seen, end = 0, time.perf_counter() + dev.default_timeout
        while seen < last:
            nxt = min(go + 1, last)
            raw = fn.read_then_write([(p.WINDOW_XDATA + DONE, 4), (p.WINDOW_XDATA, PIECE), (p.WINDOW_XDATA + START, 4)],
                                     [_changed(dma.view, GO, nxt)])
            go = nxt
            done, start = struct.unpack("<I", raw[0])[0], struct.unpack("<I", raw[2])[0]
            if done != seen:
                seen, end = done, time.perf_counter() + dev.default_timeout
            if done == start and base < done <= last and done not in got:
                at, k = part[done - base - 1]
                dst[at:at + k] = raw[1][:k]
                got.add(done)
            elif time.perf_counter() > end:
                from hcq import HCQTimeout
                raise HCQTimeout(f"{dev.name}: copy-out through the USB bridge's read-back page: piece "
                                 f"{max(seen, base) - base + 1} of {len(part)} not copied after "
                                 f"{dev.default_timeout} s; the SDMA queue may be hung: recover() the device")
        for i, (at, k) in enumerate(part):          # pieces a slow GPU overwrote before they were read
            if base + i + 1 not in got:
                q = AMCopyQueue(dev)
                q.copy_va(m.va, va + at, k)
                q.signal(dev.timeline, dev.next_timeline())
                q.submit()
                dev._wait(dev.timeline, dev.timeline_value, dev.default_timeout, pull_from=0)
                dst[at:at + k] = dma.view[:k]
    dev._wait(dev.timeline, dev.timeline_value, dev.default_timeout)     # the fault check (one poll)


def _changed(view, offset: int, value: int) -> tuple[int, bytes]:
    """The read-back page's shadow at offset set to value (u32); returns (XDATA address of the first changed
    byte, the changed span) for 0xE5 writes."""
    new = struct.pack("<I", value & _M32)
    diff = [i for i in range(4) if view[offset + i] != new[i]]
    if not diff:
        return p.WINDOW_XDATA + offset, b""
    view[offset + diff[0]:offset + diff[-1] + 1] = new[diff[0]:diff[-1] + 1]
    return p.WINDOW_XDATA + offset + diff[0], new[diff[0]:diff[-1] + 1]
