"""Bulk copies between the host and the GPU over a USB bridge running the open firmware: the bridge's SRAM
DMA (0xF2) moves the bytes, the GPU's SDMA engine moves them on and says when (docs/usb.md, "Bulk copies on
the open firmware").

Copy-in: two 256 KiB windows of SRAM slots, used in turn. One prebuilt SDMA program per copy, submitted once:
for each chunk, wait until the sentinel dword after its window holds the chunk's sequence number, copy the
window to VRAM, write the sequence number to a fence in the page the host reads back. The host sends each
chunk as one 0xF2 request and one bulk OUT (the chunk, padded to the sentinel, then the sentinel sector),
with an 0xE4 read of the fence in the same round trip; a window is refilled only after a fence read has
shown the GPU done with the chunk that was in it.
Copy-out: one SDMA program: for each chunk, wait until a host-written "go" word reaches the chunk's number,
copy the chunk into a window, write to the bridge's completion window (PCIe 0x822000), which releases the
armed SRAM-to-host DMA. The host sends, per chunk, 0xF2 (SRAM to host) first, then the go word (0xE5), then
reads the window on bulk IN: one round trip. The arm goes before the go, so the GPU's release cannot come
before the arm (the firmware takes EP0 requests in order).
Per copy beyond the chunks: the ring push and the doorbell (SDMA submit) and, for copy-in, the wait for the
last chunk's fence.
"""
from __future__ import annotations

import struct
import time

from amdrv import sdma_packets
from amdrv.usb import protocol as p
from amdrv.usb.link import Bulk
from amdrv.usb.transport import sram_dma_request, xdata_read, xdata_writes

CHUNK = 256 << 10             # each window's payload (issue 16's design)
WINDOWS = 2                   # used in turn: a window is refilled once the fence read at the start of a round
                              # trip shows the chunk before copied (the GPU copies 256 KiB in tens of us, less
                              # than a round trip's latency); if not yet, the host reads the fence again
SENTINEL = CHUNK              # the sentinel sector follows the payload
ROUND = 256                   # chunks per SDMA submission (~20 KiB of ring)
_M32 = 0xFFFFFFFF


class BridgeCopier:
    """Per hcq device: the two SRAM windows, their GPU mappings, the fence and go signals, the completion
    window's mapping, and the sequence numbers so far (they only grow)."""

    def __init__(self, dev):
        self.dev, self.fn = dev, dev.gpu.dev.pci
        gmc = dev.gpu.gmc
        self.windows = [self.fn.alloc_dma(CHUNK + p.WINDOW_PAGE) for _ in range(WINDOWS)]   # the sentinel: next page
        self.maps = [gmc.map_system(w) for w in self.windows]
        self.release = gmc.map_system(self.fn.completion_window())
        self.fence, self.go = dev.new_signal(0), dev.new_signal(0)
        self.copied_in = 0        # chunks sent in (the fence's value once the GPU has them)
        self.copied_out = 0       # chunks asked out (the go word's value)

    def _fence_read(self):
        return xdata_read(p.WINDOW_XDATA + self.fence.offset, 8)

    def _window_free(self, s: int, done: int) -> int:
        """Reads the fence until the chunk that was last in chunk s's window is copied; returns the fence.
        HCQTimeout after the device's default timeout (the SDMA queue is then stuck: recover() resets it)."""
        end = time.perf_counter() + self.dev.default_timeout
        while done < s - WINDOWS:
            if time.perf_counter() > end:
                from hcq import HCQTimeout
                raise HCQTimeout(f"{self.dev.name}: copy-in through the USB bridge: the GPU has not copied chunk "
                                 f"{s - WINDOWS} out of its SRAM window after {self.dev.default_timeout} s (fence "
                                 f"{done}); its SDMA queue may be hung: recover() the device")
            done = struct.unpack("<Q", self.fn.execute([self._fence_read()])[0])[0]
        return done

    def _queue(self):
        from amdrv.hcq import AMCopyQueue
        return AMCopyQueue(self.dev)

    def copy_in(self, va: int, data: memoryview) -> None:
        n = len(data)
        chunks = -(-n // CHUNK)
        done = self.copied_in
        for r in range(0, chunks, ROUND):
            base = self.copied_in
            last = min(chunks, r + ROUND)
            q = self._queue()
            for i in range(r, last):
                w, s = i % WINDOWS, base + (i - r) + 1
                q.b.poll_mem(self.maps[w].va + SENTINEL, s & _M32, function=sdma_packets.POLL_GE)
                q.copy_va(va + i * CHUNK, self.maps[w].va, min(CHUNK, n - i * CHUNK))
                q.signal(self.fence, s)
            if last == chunks:
                q.signal(self.dev.timeline, self.dev.next_timeline())
            self.dev.sdma.submit(q.buf, flush=False)      # the doorbell rides with the first chunk
            for i in range(r, last):
                w, s = i % WINDOWS, base + (i - r) + 1
                done = self._window_free(s, done)
                k = min(CHUNK, n - i * CHUNK)
                payload = bytearray(CHUNK + p.BLOCK)
                payload[:k] = data[i * CHUNK:i * CHUNK + k]
                struct.pack_into("<I", payload, SENTINEL, s & _M32)
                got = self.fn.execute([self._fence_read(), sram_dma_request(self.windows[w], len(payload)),
                                       Bulk(p.OPEN_BULK_OUT, bytes(payload))])
                done = struct.unpack("<Q", got[0])[0]
            self.copied_in = base + (last - r)
        self.dev._wait(self.dev.timeline, self.dev.timeline_value, self.dev.default_timeout)

    def copy_out(self, va: int, n: int, out: memoryview) -> None:
        chunks = -(-n // CHUNK)
        for r in range(0, chunks, ROUND):
            base = self.copied_out
            last = min(chunks, r + ROUND)
            q = self._queue()
            for i in range(r, last):
                w, g = i % WINDOWS, base + (i - r) + 1
                q.b.poll_mem(self.go.va, g & _M32, function=sdma_packets.POLL_GE)
                q.copy_va(self.maps[w].va, va + i * CHUNK, min(CHUNK, n - i * CHUNK))
                q.b.fence(self.release.va, g & _M32)       # the write that releases the armed DMA
            if last == chunks:
                q.signal(self.dev.timeline, self.dev.next_timeline())
            self.dev.sdma.submit(q.buf, flush=False)
            for i in range(r, last):
                w, g = i % WINDOWS, base + (i - r) + 1
                k = min(CHUNK, n - i * CHUNK)
                sent = -(-k // p.BLOCK) * p.BLOCK
                old = self.go.mem[0]
                self.go.mem[0] = g
                new = struct.pack("<Q", g)
                changed = [j for j in range(8) if new[j] != struct.pack("<Q", old)[j]]
                go = xdata_writes(p.WINDOW_XDATA + self.go.offset + changed[0], new[changed[0]:changed[-1] + 1])
                got = self.fn.execute([sram_dma_request(self.windows[w], sent, to_host=True), *go,
                                       Bulk(p.OPEN_BULK_IN, length=sent)])
                out[i * CHUNK:i * CHUNK + k] = got[-1][:k]
            self.copied_out = base + (last - r)
