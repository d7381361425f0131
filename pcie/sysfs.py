"""A PCI function through Linux sysfs: config space from the `config` file, BARs by mapping the
`resourceN` files, DMA memory from hugepages addressed through pagemap, reset through `reset`.

Needs root (the resource files are root-only, and pagemap hides physical addresses from others) and
DMA that the IOMMU does not translate; docs/hardware.md prepares a machine for it.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

from pcie.discover import SYSFS, check_not_bound, device_dir
from pcie.hugepages import PAGEMAP, HugepageMemory
from pcie.interface import BAR, DMABuffer, PCIError, PCIFunction
from pcie.lock import DeviceLock
from pcie.mmio import MappedBAR, MappedDMABuffer

# Resource flags as the `resource` file prints them (include/linux/ioport.h).
IORESOURCE_IO = 0x100
IORESOURCE_MEM = 0x200
IORESOURCE_PREFETCH = 0x2000
IORESOURCE_MEM_64 = 0x100000


def parse_resources(text: str) -> list[tuple[int, int, int]]:
    """The `resource` file: one "start end flags" line (hex) per BAR 0-5, then the ROM and any bridge
    windows. Returns (start, size, flags) per line; size 0 for an unimplemented BAR (and for the upper
    half of a 64-bit BAR)."""
    out = []
    for line in text.splitlines():
        start, end, flags = (int(x, 16) for x in line.split())
        out.append((start, end - start + 1 if end else 0, flags))
    return out


class HugepageBuffer(MappedDMABuffer):
    def __init__(self, memory: HugepageMemory, size: int, owner: SysfsFunction):
        self.size, self._memory, self._owner = size, memory, owner
        self._view = memoryview(memory.map)[:size]

    def bus_address(self, offset: int = 0) -> int:
        return self._memory.physical_address(self._offset(offset))

    def free(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
            self._memory.close()
            self._owner._dma.discard(self)


class SysfsFunction(PCIFunction):
    """`root` is the sysfs mount (a fake tree in tests). BARs listed in `wc_bars` are mapped
    write-combined when the kernel offers resourceN_wc (prefetchable BARs only): on AMD GPUs BAR0 is
    VRAM, where write combining makes bulk copies several times faster; register and doorbell BARs
    must stay uncached. A later uncached access drains the CPU's write-combining buffers, so a doorbell
    write orders itself after the VRAM writes before it."""

    msi_unavailable = ("sysfs resource files carry no interrupts (the kernel delivers a device's MSI only to "
                       "a kernel driver, or through VFIO's eventfds: use the vfio provider)")

    def __init__(self, address: str, root: Path = SYSFS, lock_dir: Path | None = None,
                 wc_bars: tuple[int, ...] = (0,), pagemap: Path = PAGEMAP):
        self._dir = device_dir(address, root)
        super().__init__(self._dir.name)
        check_not_bound(self.address, root)
        self._wc_bars, self._pagemap = wc_bars, pagemap
        self._bars: dict[int, MappedBAR] = {}
        self._dma: set[HugepageBuffer] = set()
        self._config_fd = -1
        self._lock = DeviceLock(self.address, lock_dir)
        try:
            self._config_fd = self._open(self._dir / "config", os.O_RDWR)
            self._config_size = os.fstat(self._config_fd).st_size
            self._resources = parse_resources((self._dir / "resource").read_text())
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, flags: int) -> int:
        try:
            return os.open(path, flags | os.O_CLOEXEC)
        except PermissionError:
            raise PCIError(f"{self.address}: permission denied opening {path}; the sysfs provider needs "
                           f"root (or use the vfio provider, see docs/hardware.md)") from None
        except OSError as e:
            raise PCIError(f"{self.address}: cannot open {path}: {e.strerror}") from None

    # -- config space

    def _config_check(self, offset: int, size: int) -> None:
        if size not in (1, 2, 4):
            raise PCIError(f"{self.address}: config access size {size} (must be 1, 2 or 4)")
        if offset < 0 or offset + size > self._config_size or offset % size:
            raise PCIError(f"{self.address}: config access of {size} bytes at {offset:#x} is misaligned or "
                           f"outside the {self._config_size:#x}-byte config space")

    def config_read(self, offset: int, size: int) -> int:
        self._config_check(offset, size)
        self.counters.config_reads += 1
        try:
            data = os.pread(self._config_fd, size, offset)
        except OSError as e:
            raise PCIError(f"{self.address}: config read at {offset:#x} failed: {e.strerror}") from None
        if len(data) != size:
            # sysfs gives unprivileged readers only the 64-byte standard header.
            raise PCIError(f"{self.address}: config read at {offset:#x} returned {len(data)} of {size} "
                           f"bytes; reading past the first 64 bytes needs root")
        return int.from_bytes(data, "little")

    def config_write(self, offset: int, size: int, value: int) -> None:
        self._config_check(offset, size)
        self.counters.config_writes += 1
        try:
            os.pwrite(self._config_fd, (value & ((1 << 8 * size) - 1)).to_bytes(size, "little"), offset)
        except OSError as e:
            raise PCIError(f"{self.address}: config write at {offset:#x} failed: {e.strerror} (needs root)") \
                from None

    # -- BARs

    def bar(self, index: int) -> BAR:
        if index in self._bars:
            return self._bars[index]
        present = [i for i, (_, size, flags) in enumerate(self._resources[:6])
                   if size and flags & IORESOURCE_MEM]
        if not 0 <= index < 6 or index not in present:
            kind = ("an I/O port BAR, which cannot be mapped" if 0 <= index < len(self._resources)
                    and self._resources[index][2] & IORESOURCE_IO else "not implemented")
            raise PCIError(f"{self.address}: BAR{index} is {kind}; memory BARs: "
                           f"{', '.join(f'BAR{i}' for i in present) or 'none'}")
        _, size, flags = self._resources[index]
        path = self._dir / f"resource{index}"
        wc = path.with_name(f"resource{index}_wc")
        if index in self._wc_bars and flags & IORESOURCE_PREFETCH and wc.exists():
            path = wc
        fd = self._open(path, os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            hint = (" (even root is refused under kernel lockdown/Secure Boot; use the vfio provider)"
                    if isinstance(e, PermissionError) else "")
            raise PCIError(f"{self.address}: cannot map BAR{index} ({size:#x} bytes) from {path}: {e}{hint}") \
                from None
        finally:
            os.close(fd)
        self._bars[index] = MappedBAR(index, mapping, self.counters, self.address)
        return self._bars[index]

    # -- DMA

    def _check_dma_untranslated(self) -> None:
        group = self._dir / "iommu_group"
        if not group.exists():
            return  # no IOMMU in front of this device: bus addresses are physical addresses
        try:
            kind = (group / "type").read_text().strip()
        except OSError:
            kind = "unknown"
        if kind != "identity":
            raise PCIError(f"{self.address}: the IOMMU translates this device's DMA (iommu group "
                           f"{os.path.basename(os.readlink(group))}, domain type {kind}), so physical addresses "
                           f"are not bus addresses; use the vfio provider, or boot with iommu=pt "
                           f"(docs/hardware.md)")

    def alloc_dma(self, size: int, *, readback: bool = False) -> DMABuffer:
        self._check_dma_untranslated()
        try:
            memory = HugepageMemory(size, self._pagemap)
        except PCIError as e:
            raise PCIError(f"{self.address}: {e}") from None
        buf = HugepageBuffer(memory, size, self)
        self._dma.add(buf)
        return buf

    # -- reset and life cycle

    def reset_methods(self) -> tuple[str, ...]:
        """What the kernel lists in `reset_method` (Linux 5.15+); with only a `reset` file (older kernels) the
        kernel still picks a method, named "function" here; () when neither exists."""
        try:
            return tuple((self._dir / "reset_method").read_text().split())
        except OSError:
            return ("function",) if (self._dir / "reset").exists() else ()

    def reset(self) -> None:
        path = self._dir / "reset"
        if not path.exists():
            raise PCIError(f"{self.address}: the kernel offers no function reset for this device "
                           f"(no {path})")
        try:
            path.write_text("1")
        except OSError as e:
            raise PCIError(f"{self.address}: reset through {path} failed: {e.strerror}") from None

    def close(self) -> None:
        for buf in list(self._dma):
            buf.free()
        for b in self._bars.values():
            b.close()
        self._bars.clear()
        if self._config_fd >= 0:
            os.close(self._config_fd)
            self._config_fd = -1
        self._lock.release()

    def __repr__(self) -> str:
        return f"SysfsFunction({self.address!r})"


def open_function(address: str, **kwargs) -> SysfsFunction:
    """The `sysfs` entry point of the driverless.pcie group."""
    return SysfsFunction(address, **kwargs)
