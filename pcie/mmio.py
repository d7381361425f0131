"""BARs over a host mapping (sysfs resourceN files, VFIO regions) or over pread/pwrite on a file.

Register accesses go through memoryviews cast to 32- and 64-bit items: CPython moves such an item with
a fixed-size copy that compiles to one aligned load or store of that width. A register must never be
touched with narrower or split accesses (and a 64-bit doorbell write must reach the device as one
transaction), which a byte-slice copy does not promise.
"""
from __future__ import annotations

import mmap
import os

from pcie.interface import BAR, AccessCounters, DMABuffer, PCIError


class HostBAR(BAR):
    """A BAR this host reaches itself; errors name the function as well as the BAR."""
    name: str

    def _check(self, offset: int, size: int, align: int = 1) -> None:
        if offset < 0 or offset + size > self.size or offset % align:
            raise PCIError(f"{self.name} BAR{self.index}: access of {size} bytes at {offset:#x} is "
                           f"{'misaligned' if offset % align else 'outside the BAR'} "
                           f"(BAR size {self.size:#x}, alignment {align})")


class MappedBAR(HostBAR):
    """A BAR mapped into this process; `direct()` hands out the mapping itself."""

    def __init__(self, index: int, mapping: mmap.mmap, counters: AccessCounters, name: str):
        self.index, self.size, self.name = index, len(mapping), name
        self._map = mapping
        self._bytes = memoryview(mapping)
        self._u32 = self._bytes.cast("I")
        # A mapping whose size is not a multiple of 8 only happens for tiny test BARs.
        self._u64 = self._bytes.cast("Q") if self.size % 8 == 0 else None
        self._counters = counters
        self._closed = False

    def read32(self, offset: int) -> int:
        self._check(offset, 4, 4)
        self._counters.mmio_reads += 1
        return self._u32[offset >> 2]

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4, 4)
        self._counters.mmio_writes += 1
        self._u32[offset >> 2] = value & 0xFFFFFFFF

    def read64(self, offset: int) -> int:
        self._check(offset, 8, 8)
        self._counters.mmio_reads += 1
        return self._u64[offset >> 3]

    def write64(self, offset: int, value: int) -> None:
        self._check(offset, 8, 8)
        self._counters.mmio_writes += 1
        self._u64[offset >> 3] = value & 0xFFFFFFFFFFFFFFFF

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        self._counters.bulk_read_bytes += size
        return bytes(self._bytes[offset:offset + size])

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self._counters.bulk_write_bytes += len(data)
        self._bytes[offset:offset + len(data)] = data

    def direct(self) -> memoryview:
        return self._bytes

    def _check(self, offset: int, size: int, align: int = 1) -> None:
        if self._closed:
            raise PCIError(f"{self.name} BAR{self.index}: used after the function was closed")
        if align == 8 and self._u64 is None:
            raise PCIError(f"{self.name} BAR{self.index}: 64-bit access to a {self.size}-byte BAR")
        super()._check(offset, size, align)

    def close(self) -> None:
        """Unmaps the BAR. Views obtained from `direct()` must be released first, or the mapping
        stays until they are (the kernel keeps the pages mapped; nothing is lost)."""
        self._closed = True
        for view in (self._u64, self._u32, self._bytes):
            if view is not None:
                view.release()
        try:
            self._map.close()
        except BufferError:
            pass


class FileBAR(HostBAR):
    """A BAR reached with pread/pwrite at `base` in a file (a VFIO region the kernel will not let us
    map). Every access is a system call, so `direct()` is None."""

    def __init__(self, index: int, fd: int, base: int, size: int, counters: AccessCounters, name: str):
        self.index, self.size, self.name = index, size, name
        self._fd, self._base, self._counters = fd, base, counters

    def _pread(self, offset: int, size: int) -> bytes:
        try:
            data = os.pread(self._fd, size, self._base + offset)
        except OSError as e:
            raise PCIError(f"{self.name} BAR{self.index}: read of {size} bytes at {offset:#x} failed: {e}")
        if len(data) != size:
            raise PCIError(f"{self.name} BAR{self.index}: short read at {offset:#x} ({len(data)}/{size})")
        return data

    def _pwrite(self, offset: int, data: bytes) -> None:
        try:
            done = os.pwrite(self._fd, data, self._base + offset)
        except OSError as e:
            raise PCIError(f"{self.name} BAR{self.index}: write of {len(data)} bytes at {offset:#x} "
                           f"failed: {e}")
        if done != len(data):
            raise PCIError(f"{self.name} BAR{self.index}: short write at {offset:#x} ({done}/{len(data)})")

    def read32(self, offset: int) -> int:
        self._check(offset, 4, 4)
        self._counters.mmio_reads += 1
        return int.from_bytes(self._pread(offset, 4), "little")

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4, 4)
        self._counters.mmio_writes += 1
        self._pwrite(offset, (value & 0xFFFFFFFF).to_bytes(4, "little"))

    def read64(self, offset: int) -> int:
        self._check(offset, 8, 8)
        self._counters.mmio_reads += 1
        return int.from_bytes(self._pread(offset, 8), "little")

    def write64(self, offset: int, value: int) -> None:
        self._check(offset, 8, 8)
        self._counters.mmio_writes += 1
        self._pwrite(offset, (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        self._counters.bulk_read_bytes += size
        return self._pread(offset, size)

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self._counters.bulk_write_bytes += len(data)
        self._pwrite(offset, bytes(data))

    def close(self) -> None:
        """The fd belongs to the function, which closes it."""


class MappedDMABuffer(DMABuffer):
    """DMA memory mapped into this process (sysfs hugepages, VFIO): the view until freed, and offsets
    checked against the buffer before a bus address is computed. Subclasses set size, _owner, _view."""
    _owner: object
    _view: memoryview | None

    @property
    def view(self) -> memoryview:
        if self._view is None:
            raise PCIError(f"{self._owner.address}: DMA buffer used after free")
        return self._view

    def _offset(self, offset: int) -> int:
        if not 0 <= offset < self.size:
            raise PCIError(f"{self._owner.address}: offset {offset:#x} is outside the {self.size:#x}-byte "
                           f"DMA buffer")
        return offset
