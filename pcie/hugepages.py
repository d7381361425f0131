"""DMA memory without an IOMMU: 2 MiB hugepages, with physical addresses read from /proc/self/pagemap.

A hugepage is physically contiguous and never swapped or split, so one pagemap lookup per 2 MiB gives
an address that stays valid for as long as the mapping lives. Ordinary 4 KiB pages may be moved by the
kernel (compaction, NUMA balancing) behind the device's back, even when locked.

pagemap format (Documentation/admin-guide/mm/pagemap.rst): one little-endian 64-bit entry per 4 KiB
virtual page; bits 0-54 the page frame number, bit 62 swapped, bit 63 present. Since Linux 4.2 the PFN
reads as zero without CAP_SYS_ADMIN.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

from pcie.interface import PCIError

PAGE_SIZE = 4096
HUGEPAGE_SIZE = 2 << 20
PAGEMAP = Path("/proc/self/pagemap")

_PFN_MASK = (1 << 55) - 1
_SWAPPED = 1 << 62
_PRESENT = 1 << 63


def mapping_address(mapping: mmap.mmap) -> int:
    """The virtual address of an mmap (Python does not expose it; a ctypes view of it does)."""
    anchor = ctypes.c_char.from_buffer(mapping)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor  # drop the buffer export so the mapping can still be closed


def physical_pages(vaddr: int, count: int, stride: int = PAGE_SIZE, pagemap: Path = PAGEMAP) -> list[int]:
    """Physical addresses of the pages at vaddr, vaddr+stride, ... (`count` of them), which must be
    present (touched) and must not be swapped."""
    if vaddr % PAGE_SIZE or stride % PAGE_SIZE:
        raise PCIError(f"pagemap: address {vaddr:#x} or stride {stride:#x} is not page aligned")
    try:
        with open(pagemap, "rb", buffering=0) as f:
            entries = [int.from_bytes(os.pread(f.fileno(), 8, (vaddr + i * stride) // PAGE_SIZE * 8),
                                      "little") for i in range(count)]
    except OSError as e:
        raise PCIError(f"cannot read {pagemap}: {e}") from None
    out = []
    for i, entry in enumerate(entries):
        va = vaddr + i * stride
        if not entry & _PRESENT or entry & _SWAPPED:
            raise PCIError(f"pagemap: page at {va:#x} is {'swapped out' if entry & _SWAPPED else 'not present'};"
                           f" DMA memory must be resident")
        pfn = entry & _PFN_MASK
        if pfn == 0:
            raise PCIError(f"pagemap: {pagemap} hides physical frame numbers from this process; DMA "
                           f"addresses without an IOMMU need root (CAP_SYS_ADMIN), or use the vfio provider")
        out.append(pfn * PAGE_SIZE)
    return out


def _hugepages_free() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("HugePages_Free:"):
                return line.split()[1]
    except OSError:
        pass
    return "unknown"


class HugepageMemory:
    """`size` bytes (rounded up to whole 2 MiB pages) of resident hugepage memory and the physical
    address of each of its hugepages."""

    def __init__(self, size: int, pagemap: Path = PAGEMAP):
        if size <= 0:
            raise PCIError(f"DMA allocation of {size} bytes")
        pages = -(-size // HUGEPAGE_SIZE)
        self.size = pages * HUGEPAGE_SIZE
        try:
            fd = os.memfd_create("driverless-dma", os.MFD_CLOEXEC | os.MFD_HUGETLB | os.MFD_HUGE_2MB)
        except OSError as e:
            raise PCIError(f"cannot create hugepage memory ({e.strerror}): this kernel lacks hugetlbfs "
                           f"(CONFIG_HUGETLBFS)") from None
        try:
            os.ftruncate(fd, self.size)
            # The hugepages are reserved here, so a shortage fails now rather than at first touch.
            self.map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise PCIError(f"cannot get {pages} free 2 MiB hugepages ({e.strerror}; HugePages_Free is "
                           f"{_hugepages_free()}): reserve more as root with `echo N > "
                           f"/proc/sys/vm/nr_hugepages` (docs/hardware.md)") from None
        finally:
            os.close(fd)
        for off in range(0, self.size, HUGEPAGE_SIZE):
            self.map[off] = 0  # fault every page in; pagemap reports untouched pages as not present
        self.vaddr = mapping_address(self.map)
        try:
            self.page_addresses = physical_pages(self.vaddr, pages, HUGEPAGE_SIZE, pagemap)
            for va, pa in zip(range(self.vaddr, self.vaddr + self.size, HUGEPAGE_SIZE), self.page_addresses):
                if pa % HUGEPAGE_SIZE:
                    raise PCIError(f"pagemap: {va:#x} maps to {pa:#x}, which is not 2 MiB aligned: the "
                                   f"memory is not backed by a hugepage")
        except PCIError:
            self.map.close()
            raise

    def physical_address(self, offset: int) -> int:
        return self.page_addresses[offset // HUGEPAGE_SIZE] + offset % HUGEPAGE_SIZE

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass  # a caller still holds a view; the pages go when it is dropped
