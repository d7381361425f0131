"""Bulk copies between the host and the GPU over a USB bridge running the open firmware: the bridge's SRAM
DMA (0xF2) moves the bytes, the GPU's SDMA engine moves them on and says when (docs/usb.md, "Bulk copies on
the open firmware").

The copier has an SDMA queue of its own (the engine hcq's copies do not use) whose ring is built once per
device and pushed once: entries that alternate between two windows k = 0, 1, each "if the direction word k
says in, run descriptor in-k; if it says out, run descriptor out-k" (COND_EXE, INDIRECT). The descriptors
(small IBs), the direction words and the ring's write-pointer shadow live in a VRAM page of the copier's
(amdrv.placement), written by 0xF0 single-dword posted writes and one HDP flush, so a chunk needs no ring push:
the host writes the few descriptor dwords that changed (an address, a count, a marker, a sequence number), the
direction word and the write pointer, and rings the doorbell, in the same round trip as the chunk's own
transfer. The fence (a signal, VRAM) is read by one 0xF0 single read and its 0xF0 IN report, also on EP0.
- The windows: two runs of whole SRAM slots, one after the other, as large as the bridge's 512 KiB SRAM
  leaves them (window_slots: every free slot, at most 16, 256 KiB, each): two 256 KiB windows, the whole SRAM,
  while no host buffer holds any. Everything else hcq keeps is in VRAM on this firmware (amdrv.placement) but
  the dummy pages, scratch pages in slot 0 that the windows may overwrite. A host buffer that finds the SRAM
  full takes the windows back (release_windows: after the GPU is seen done with them); the next copy takes
  what is free then.
- The sentinel is each window's last dword, which the GPU sets to a marker after copying a chunk out of it:
  descriptor in-k polls until that dword differs from the marker, then copies. A chunk ends at its window's
  end (a short one is sent in the window's last slots), so its own last dword is the sentinel; where that
  dword equals the marker standing there, the chunk is sent 4 bytes shorter with a pad dword that does not
  (collides()). A chunk's payload is the whole window. Assumption, the peer's design too: the SRAM DMA writes
  a transfer's bytes in address order, so the last dword's arrival means the rest is there.
- Copy-in: the two windows used in turn. Descriptor in-k: POLL_REGMEM until window k's last dword differs
  from the marker there, COPY_LINEAR window → VRAM, the next marker into that last dword, the sequence number
  into a fence (a signal, VRAM). Per chunk one round trip: the descriptor words, the HDP flush, the doorbell,
  the fence's 0xF0 read and report, 0xF2 and bulk OUT of the chunk's slots. A window is refilled only after a
  fence read has shown the GPU done with the chunk that was in it (its marker written); the copy returns once
  its last chunk is in the SRAM (pending(): later work waits for the last fence on the GPU).
- Copy-out: both windows as one region but their last dwords (the markers stay) and the SRAM's first dword,
  the go word (the one place the host writes without a TLP: 0xE5 at XDATA 0xF000): descriptor out-k waits
  for the go word to hold the chunk's number, copies the chunk into window 0 from its second dword up to its
  last and on into window 1 up to its, then writes to the bridge's completion window (PCIe 0x822000), which
  releases the armed SRAM-to-host DMA. Per chunk one round trip: the descriptor words and the doorbell, 0xF2
  (SRAM to host), the go word, then bulk IN of the region: a TLP request drops an armed DMA, so the go must
  be an 0xE5, and it follows the arm on EP0, so the GPU's release cannot come before the arm.
"""
from __future__ import annotations

import struct
import time

from amdrv import placement, sdma_packets
from amdrv.queue import SDMAQueue
from pcie.usb import protocol as p
from pcie.usb.link import Bulk, Control
from pcie.usb.transport import BusWindow, sram_dma_request, xdata_writes

MAX_WINDOW_SLOTS = 16         # 256 KiB a window at most (issue 16's design: two 256 KiB windows)
WINDOWS = 2                   # used in turn: a window is refilled once the fence read at the start of a round
                              # trip shows the chunk before copied (the GPU copies 256 KiB in tens of us, less
                              # than a round trip's latency); if not yet, the host reads the fence again
RING_BYTES = 4096             # the copier's ring: 32 entries of 32 dwords
ENTRY_DW = 32
DIR_IN, DIR_OUT = 1, 2
# The copier's words in its VRAM page: descriptors (IBs, 32-byte aligned), the direction words, the
# write-pointer shadow.
IN_DESC = (0x000, 0x060)      # POLL_REGMEM 6 + COPY_LINEAR 7 + FENCE 4 (the marker) + FENCE 4 dwords
OUT_DESC = (0x0C0, 0x120)     # POLL_REGMEM 6 + COPY_LINEAR 7 (window 0) + COPY_LINEAR 7 or NOP 7 (window 1) + FENCE 4
IN_DW, OUT_DW = 21, 24
DIR_WORD = (0x180, 0x184)
WPTR_SHADOW = 0x188
GO_AT = 0                    # copy-out: the SRAM's first dword (XDATA 0xF000), the chunk the GPU may copy
                              # (written by 0xE5 after the DMA's arm)
AREA = 0x190
MARKER = 0x5E9D0000           # markers are MARKER | (sequence number & 0xFFFF): any value works (collides())
_M32 = 0xFFFFFFFF


def window_slots(fn) -> int:
    """SRAM slots per window: half of the longest run of free slots, at most MAX_WINDOW_SLOTS (the SRAM is
    512 KiB; the dummy pages are scratch the windows may overwrite; host buffers hold the rest)."""
    free = fn.sram_free_run(over_scratch=True)
    slots = min(MAX_WINDOW_SLOTS, free // WINDOWS)
    if slots < 1:
        from hcq import HCQError
        raise HCQError(f"{fn.address}: bulk copies through the USB bridge need two windows of at least one "
                       f"{p.SRAM_SLOT >> 10} KiB SRAM slot; {free} of the {p.SRAM_SLOTS} slots are free in one run "
                       f"(docs/usb.md, SRAM budget): free host buffers first")
    return slots


def collides(data, marker: int) -> bool:
    """Whether a chunk ending at its window's end would end in `marker` (its bytes zero-padded to a dword)."""
    tail = bytes(data[len(data) - (len(data) - 1) % 4 - 1:]) if len(data) else b""
    return len(data) > 0 and struct.unpack("<I", tail + bytes(4 - len(tail)))[0] == marker


class _CopierQueue(SDMAQueue):
    """Queue 0 of an SDMA engine set up as sdma_v6_0_gfx_resume does (SDMAQueue), with its write-pointer
    shadow (RB_WPTR_POLL_ADDR) in the copier's page and a ring that holds the copier's entries for good:
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
        c.store(WPTR_SHADOW, bytes(8), flush=True)

    def bump(self) -> int:
        """One entry more for the engine: the shadow's changed dwords, the HDP flush (for the descriptor words
        written before too), then the doorbell (all queued on EP0, in order). Returns the entry's window."""
        k = self.wptr // ENTRY_DW % WINDOWS
        self.wptr += ENTRY_DW
        value = self.wptr * 4 // self.wptr_unit
        self.copier.store(WPTR_SHADOW, struct.pack("<Q", value), flush=True)
        self.doorbell.write64(self.doorbell_index * 4, value)
        return k


class BridgeCopier:
    """Per hcq device: the two SRAM windows (one DMA buffer) and their GPU mapping (taken at a copy, given
    back to host buffers that need the SRAM), the copier's queue, its page of descriptors and words (VRAM), the
    fence, the completion window's mapping, and the sequence number (it only grows)."""

    def __init__(self, dev):
        self.dev, self.fn = dev, dev.gpu.dev.pci
        self.region = self.map = None
        self.release = dev.gpu.gmc.map_system(self.fn.completion_window())
        self.go_map = dev.gpu.gmc.map_system(BusWindow(self.fn, p.WINDOW_BUS, p.WINDOW_PAGE))   # the SRAM's first page
        self.fence = dev.new_signal(0)
        self.page = placement.host_written(dev.gpu, 4096, "bridge copier")
        self.page_map = dev.gpu.gmc.map_system(self.page)
        self.page_va = self.page_map.va
        self.seq = 0                          # chunks so far, both ways (the fences' values)
        self.in_window = [0] * WINDOWS        # the copy-in chunk last sent into each window (0: none pending)
        self.unseen = 0                       # the last copy-in's last chunk, until a fence read shows it copied
        self.markers: list[int] | None = None  # what each window's last dword holds (None: not known)
        # The SRAM's first dword as the host last wrote it; None: unknown. The bridge's SRAM keeps what the last
        # user left there (a run before this one, or the stock firmware's read-back page), so the first go is
        # written whole: a go that only patched the bytes differing from an assumed 0 left a stale value, which
        # either let the GPU copy and release before the DMA's arm (a stale go equal to the chunk's number: the
        # release is lost, the bulk IN stalls) or never matched (the GPU waits for ever).
        self.go: int | None = None
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
        self.out_chunk = 2 * self.sentinel - 4            # a copy-out chunk: both windows but their last dwords
                                                          # and the go word
        self.region = self.fn.alloc_dma(WINDOWS * self.window_bytes, device_written=True, over_scratch=True)
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

    def detach(self) -> None:
        """The device closes: the function no longer asks this copier for its windows."""
        if self.release_windows in self.fn.sram_reclaimers:
            self.fn.sram_reclaimers.remove(self.release_windows)

    def _set_markers(self) -> None:
        """Writes a marker into each window's last dword from the host (the windows' last slots, one SRAM DMA
        each): needed when no descriptor has written them (new windows, a reset queue)."""
        self.markers = [MARKER ^ 0xFFFF] * WINDOWS
        for k in range(WINDOWS):
            end = (k + 1) * self.window_bytes
            struct.pack_into("<I", self.region.view, end - 4, self.markers[k])
            self.region.push(end - p.SRAM_SLOT, p.SRAM_SLOT)
        self._set_go(0)

    def _set_go(self, value: int) -> None:
        """The go word (the SRAM's first dword) by 0xE5 writes, queued: the bytes that differ from what the
        host last put there (all four while that is unknown)."""
        new = struct.pack("<I", value)
        old = struct.pack("<I", ~value & _M32) if self.go is None else struct.pack("<I", self.go)
        for i in range(4):
            if old[i] != new[i]:
                self.fn.queue(xdata_writes(p.WINDOW_XDATA + GO_AT + i, new[i:i + 1])[0])
        self.go = value

    # -- the words in the copier's page
    def store(self, offset: int, data: bytes, whole: bool = False, flush: bool = False) -> None:
        """Writes data at offset of the copier's page: each dword that changed goes out as one 0xF0 posted
        write (queued); whole=True sends it all. flush: the HDP flush after them (the engine reads them after
        it; bump() flushes for the descriptor words written before it)."""
        view = self.page.view
        if whole:
            view[offset:offset + len(data)] = data
            self.page.push(offset, len(data))
            return
        assert offset % 4 == 0 and len(data) % 4 == 0
        for i in range(0, len(data), 4):
            if view[offset + i:offset + i + 4] != data[i:i + 4]:
                view[offset + i:offset + i + 4] = data[i:i + 4]
                self.page.push(offset + i, 4, flush=False)
        if flush:
            self.dev.gpu.nbio.hdp_flush()

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
        s.poll_mem(self.go_map.va + GO_AT, seq & _M32, function=sdma_packets.POLL_EQ)
        first = min(n, self.sentinel - 4)
        s.copy(va[0] + 4, src, first)
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
    def _fence_read(self) -> list:
        """The fence's low dword by one 0xF0 single read and its report (both on EP0)."""
        a = self.fence.dma.bus_address_bar0(self.fence.offset)
        return [Control(p.REQ_OUT, p.REQ_PCIE, p.MRD32 | 0x0F << 8, p.PCIE_SINGLE, struct.pack("<III", a & _M32,
                                                                                              a >> 32, 0)),
                Control(p.REQ_IN, p.REQ_PCIE, 0, 0, length=8)]

    def _fence_value(self, report: bytes, done: int) -> int:
        """The fence from a read's report (the sequence numbers' high half from what was seen); no completion
        yet reads as `done` (the loop asks again)."""
        if report[7]:
            return done
        low = struct.unpack_from("<I", report)[0]
        return (done & ~_M32 | low) + (1 << 32 if low < done & _M32 else 0)

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
            done = self._fence_value(self.fn.execute(self._fence_read())[-1], done)
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
            got = self.fn.execute(self._fence_read() + [self._sram_dma(k * W + W - sent, sent),
                                                        Bulk(p.OPEN_BULK_OUT, bytes(payload))])
            done = self._fence_value(got[1], done)
            if self.region.first == 0 and k * W + W - sent == 0:
                self.go = struct.unpack_from("<I", payload)[0]    # the go word's place holds data now
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
        W, first = self.window_bytes, self.sentinel - 4
        if self.markers is None:
            self._set_markers()
        for at in range(0, n, self.out_chunk):
            k = self.queue.wptr // ENTRY_DW % WINDOWS
            self.seq += 1
            if self.seq & _M32 == self.go:      # the go word's place holds this number already (copy-in data)
                self.seq += 1
            size = min(self.out_chunk, n - at)
            sent = -(-(4 + size if size <= first else W + size - first) // p.BLOCK) * p.BLOCK
            self._chunk(k, OUT_DESC[k], self._out_desc(k, va + at, size, self.seq), DIR_OUT)
            self.queue.bump()
            # a TLP request (the doorbell) drops an armed DMA, so the arm follows it; the GPU waits for the go
            # word, written after the arm, so its release cannot come before the arm
            self.fn.queue(self._sram_dma(0, sent, to_host=True))
            self._set_go(self.seq & _M32)
            got = self.fn.execute([Bulk(p.OPEN_BULK_IN, length=sent)])[-1]
            if size <= first:
                out[at:at + size] = got[4:4 + size]
            else:
                out[at:at + first] = got[4:4 + first]
                out[at + first:at + size] = got[W:W + size - first]
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
        go = base + 1
        if not base:
            _first_words(fn, dma.view, go)
        dev.sdma.submit(dev._behind_bridge_copy(q), flush=False)
        if r + BOUNCE_ROUND >= len(pieces):
            dev.timeline_submitted = dev.timeline_value
        if base:
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
                dev._wait(dev.timeline, dev.timeline_submitted, dev.default_timeout, pull_from=0)
                dst[at:at + k] = dma.view[:k]
    dev._wait(dev.timeline, dev.timeline_submitted, dev.default_timeout)     # the fault check (one poll)


def _first_words(fn, view, go: int) -> None:
    """A run's first bounce: done and start 0, go = go, written whole (queued, before the doorbell: the engine may
    run at once). The page holds what the last user of the bridge left there (its SRAM keeps it across a close
    and reopen), not the zeros of the host's shadow: a stale go lets the engine run ahead of the reads, and a
    stale done == start in this round's numbers would be taken for a piece of this copy (wrong bytes)."""
    view[DONE:GO + 4] = struct.pack("<3I", 0, 0, go)
    fn.queue_xdata(p.WINDOW_XDATA + DONE, bytes(view[DONE:GO + 4]))


def _changed(view, offset: int, value: int) -> tuple[int, bytes]:
    """The read-back page's shadow at offset set to value (u32); returns (XDATA address of the first changed
    byte, the changed span) for 0xE5 writes."""
    new = struct.pack("<I", value & _M32)
    diff = [i for i in range(4) if view[offset + i] != new[i]]
    if not diff:
        return p.WINDOW_XDATA + offset, b""
    view[offset + diff[0]:offset + diff[-1] + 1] = new[diff[0]:diff[-1] + 1]
    return p.WINDOW_XDATA + offset + diff[0], new[diff[0]:diff[-1] + 1]
