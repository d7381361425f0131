"""A PCI function through VFIO: the device bound to vfio-pci, its IOMMU group attached to a type1
container, BARs mapped from the device fd, DMA memory mapped into the IOMMU at IOVAs we choose.

Unlike sysfs this needs neither root nor hugepages: access to /dev/vfio/N and enough locked-memory
allowance (RLIMIT_MEMLOCK) for the DMA memory; docs/hardware.md prepares a machine for it.

Every number and layout below is from include/uapi/linux/vfio.h (Linux 6.1).
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from pcie.discover import SYSFS, device_dir, read_info, unbind_command
from pcie.hugepages import PAGE_SIZE, mapping_address
from pcie.interface import BAR, DMABuffer, PCIError, PCIFunction
from pcie.lock import DeviceLock
from pcie.mmio import FileBAR, MappedBAR, MappedDMABuffer

# vfio.h defines every VFIO ioctl as _IO(VFIO_TYPE, VFIO_BASE + n): VFIO_TYPE is ';', VFIO_BASE 100.
# _IO(type, nr) (include/uapi/asm-generic/ioctl.h) is _IOC(_IOC_NONE, type, nr, 0), and with direction
# _IOC_NONE = 0 and size 0 that is (type << 8) | nr. (powerpc, mips and sparc define _IOC_NONE as 1
# and would set a direction bit; only the asm-generic layout of x86-64 and arm64 is handled here.)
VFIO_TYPE, VFIO_BASE = ord(";"), 100


def _IO(nr: int) -> int:
    return VFIO_TYPE << 8 | nr


VFIO_GET_API_VERSION = _IO(VFIO_BASE + 0)
VFIO_CHECK_EXTENSION = _IO(VFIO_BASE + 1)
VFIO_SET_IOMMU = _IO(VFIO_BASE + 2)
VFIO_GROUP_GET_STATUS = _IO(VFIO_BASE + 3)
VFIO_GROUP_SET_CONTAINER = _IO(VFIO_BASE + 4)
VFIO_GROUP_UNSET_CONTAINER = _IO(VFIO_BASE + 5)
VFIO_GROUP_GET_DEVICE_FD = _IO(VFIO_BASE + 6)
VFIO_DEVICE_GET_INFO = _IO(VFIO_BASE + 7)
VFIO_DEVICE_GET_REGION_INFO = _IO(VFIO_BASE + 8)
VFIO_DEVICE_GET_IRQ_INFO = _IO(VFIO_BASE + 9)
VFIO_DEVICE_SET_IRQS = _IO(VFIO_BASE + 10)
VFIO_DEVICE_RESET = _IO(VFIO_BASE + 11)
VFIO_IOMMU_GET_INFO = _IO(VFIO_BASE + 12)
VFIO_IOMMU_MAP_DMA = _IO(VFIO_BASE + 13)
VFIO_IOMMU_UNMAP_DMA = _IO(VFIO_BASE + 14)

VFIO_API_VERSION = 0
VFIO_TYPE1_IOMMU = 1
VFIO_TYPE1v2_IOMMU = 3
VFIO_GROUP_FLAGS_VIABLE = 1 << 0
VFIO_DEVICE_FLAGS_RESET = 1 << 0
VFIO_DEVICE_FLAGS_PCI = 1 << 1
VFIO_REGION_INFO_FLAG_READ = 1 << 0
VFIO_REGION_INFO_FLAG_WRITE = 1 << 1
VFIO_REGION_INFO_FLAG_MMAP = 1 << 2
VFIO_PCI_CONFIG_REGION_INDEX = 7  # enum: BAR0..BAR5 are 0..5, ROM 6, CONFIG 7
VFIO_IOMMU_INFO_CAPS = 1 << 1
VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE = 1
VFIO_IRQ_INFO_EVENTFD = 1 << 0
VFIO_IRQ_SET_DATA_NONE = 1 << 0
VFIO_IRQ_SET_DATA_EVENTFD = 1 << 2
VFIO_IRQ_SET_ACTION_TRIGGER = 1 << 5
VFIO_PCI_MSI_IRQ_INDEX = 1        # enum: INTX 0, MSI 1, MSIX 2, ERR 3, REQ 4
VFIO_DMA_MAP_FLAG_READ = 1 << 0
VFIO_DMA_MAP_FLAG_WRITE = 1 << 1

# Struct layouts, native byte order, padding written out where the C compiler inserts it.
GROUP_STATUS = struct.Struct("=II")             # argsz, flags
DEVICE_INFO = struct.Struct("=IIIII")           # argsz, flags, num_regions, num_irqs, cap_offset
REGION_INFO = struct.Struct("=IIIIQQ")          # argsz, flags, index, cap_offset, size, offset
IOMMU_TYPE1_INFO = struct.Struct("=IIQI4x")     # argsz, flags, iova_pgsizes, cap_offset (+ tail pad)
INFO_CAP_HEADER = struct.Struct("=HHI")         # id, version, next
IOVA_RANGE_CAP = struct.Struct("=II")           # nr_iovas, reserved (after the header)
IOVA_RANGE = struct.Struct("=QQ")               # start, end (inclusive)
DMA_MAP = struct.Struct("=IIQQQ")               # argsz, flags, vaddr, iova, size
DMA_UNMAP = struct.Struct("=IIQQ")              # argsz, flags, iova, size
IRQ_INFO = struct.Struct("=IIII")               # argsz, flags, index, count
IRQ_SET = struct.Struct("=IIIII")               # argsz, flags, index, start, count; then data[]

DMA_ALIGN = 2 << 20  # IOVAs on 2 MiB boundaries let the IOMMU use large pages where the memory allows


def irq_set(index: int, eventfds: list[int] | None) -> bytes:
    """A struct vfio_irq_set for VFIO_DEVICE_SET_IRQS, ACTION_TRIGGER on vectors 0.. of `index`: with
    eventfds, each vector signals its eventfd (DATA_EVENTFD, an s32 per vector in data[]); None disables
    the index (DATA_NONE with count 0, which vfio.h says tears down all of its interrupts)."""
    if eventfds is None:
        return IRQ_SET.pack(IRQ_SET.size, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, index, 0, 0)
    data = struct.pack(f"={len(eventfds)}i", *eventfds)
    return IRQ_SET.pack(IRQ_SET.size + len(data), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                        index, 0, len(eventfds)) + data


def bind_instructions(address: str, driver: str | None) -> str:
    steps = [unbind_command(address, driver)] if driver else []
    steps += ["modprobe vfio-pci", f"echo vfio-pci > /sys/bus/pci/devices/{address}/driver_override",
              f"echo {address} > /sys/bus/pci/drivers_probe"]
    return "bind it to vfio-pci (as root): " + " && ".join(f"`{s}`" for s in steps)


def parse_iova_ranges(info: bytes) -> list[tuple[int, int]]:
    """The usable IOVA ranges, [start, end) each, from a VFIO_IOMMU_GET_INFO reply's capability chain;
    an empty list when the kernel reports none."""
    _, flags, _, cap = IOMMU_TYPE1_INFO.unpack_from(info)
    ranges = []
    seen = set()
    while flags & VFIO_IOMMU_INFO_CAPS and cap and cap not in seen:
        seen.add(cap)
        if cap + INFO_CAP_HEADER.size > len(info):
            raise PCIError(f"vfio: IOMMU info capability at {cap} runs past the {len(info)}-byte reply")
        cap_id, _, nxt = INFO_CAP_HEADER.unpack_from(info, cap)
        if cap_id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE:
            count, _ = IOVA_RANGE_CAP.unpack_from(info, cap + INFO_CAP_HEADER.size)
            base = cap + INFO_CAP_HEADER.size + IOVA_RANGE_CAP.size
            for i in range(count):
                start, end = IOVA_RANGE.unpack_from(info, base + i * IOVA_RANGE.size)
                ranges.append((start, end + 1))
        cap = nxt
    return ranges


class IOVAAllocator:
    """First-fit over the free parts of the usable IOVA ranges, aligned to DMA_ALIGN. The first 2 MiB
    stay unused, so a device access through a zero (unset) address faults instead of hitting memory."""

    def __init__(self, ranges: list[tuple[int, int]]):
        self._free = sorted((max(start, DMA_ALIGN), end) for start, end in ranges if end > DMA_ALIGN)

    def alloc(self, size: int) -> int:
        for i, (start, end) in enumerate(self._free):
            iova = -(-start // DMA_ALIGN) * DMA_ALIGN
            if iova + size <= end:
                pieces = [(a, b) for a, b in ((start, iova), (iova + size, end)) if b > a]
                self._free[i:i + 1] = pieces
                return iova
        raise PCIError(f"vfio: no free IOVA range of {size:#x} bytes left")

    def free(self, iova: int, size: int) -> None:
        self._free.append((iova, iova + size))
        self._free.sort()
        merged = [self._free[0]]
        for start, end in self._free[1:]:
            if start == merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        self._free = merged


@dataclass(frozen=True)
class Region:
    index: int
    flags: int
    size: int
    offset: int  # of the region within the device fd


class VFIODMABuffer(MappedDMABuffer):
    """Shared anonymous memory mapped into the IOMMU at one contiguous IOVA range; VFIO pins its pages."""

    def __init__(self, owner: VFIOFunction, size: int):
        self.size, self._owner = size, owner
        self._mapped = -(-size // PAGE_SIZE) * PAGE_SIZE
        self._map = mmap.mmap(-1, self._mapped, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        self.iova = owner._iovas.alloc(self._mapped)
        req = DMA_MAP.pack(DMA_MAP.size, VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
                           mapping_address(self._map), self.iova, self._mapped)
        try:
            fcntl.ioctl(owner._container, VFIO_IOMMU_MAP_DMA, req)
        except OSError as e:
            owner._iovas.free(self.iova, self._mapped)
            self._map.close()
            hint = ("; pinning counts against RLIMIT_MEMLOCK (`ulimit -l`), raise it for this user "
                    "(docs/hardware.md)" if e.errno in (errno.ENOMEM, errno.EPERM) else "")
            raise PCIError(f"{owner.address}: VFIO_IOMMU_MAP_DMA of {self._mapped:#x} bytes at IOVA "
                           f"{self.iova:#x} failed: {e.strerror}{hint}") from None
        self._view = memoryview(self._map)[:size]

    def bus_address(self, offset: int = 0) -> int:
        return self.iova + self._offset(offset)

    def free(self) -> None:
        if self._view is None:
            return
        owner = self._owner
        try:
            fcntl.ioctl(owner._container, VFIO_IOMMU_UNMAP_DMA, DMA_UNMAP.pack(DMA_UNMAP.size, 0, self.iova,
                                                                               self._mapped))
        except OSError as e:
            raise PCIError(f"{owner.address}: VFIO_IOMMU_UNMAP_DMA at IOVA {self.iova:#x} failed: "
                           f"{e.strerror}") from None
        owner._iovas.free(self.iova, self._mapped)
        owner._dma.discard(self)
        self._view.release()
        self._view = None
        try:
            self._map.close()
        except BufferError:
            pass  # a caller still holds a view; the pages go when it is dropped


class VFIOFunction(PCIFunction):
    """`root` is the sysfs mount and `dev` the /dev directory (both fakeable in tests)."""

    def __init__(self, address: str, root: Path = SYSFS, dev: Path = Path("/dev"),
                 lock_dir: Path | None = None):
        info = read_info(device_dir(address, root).name, root)
        super().__init__(info.address)
        self._fds: list[int] = []
        self._bars: dict[int, BAR] = {}
        self._dma: set[VFIODMABuffer] = set()
        self._msi_fd: int | None = None
        if info.driver != "vfio-pci":
            now = f"bound to {info.driver}" if info.driver else "not bound to any driver"
            raise PCIError(f"{self.address} is {now}, not vfio-pci; {bind_instructions(self.address, info.driver)}")
        if info.iommu_group is None:
            raise PCIError(f"{self.address} has no IOMMU group: the IOMMU is off; enable it in the firmware "
                           f"setup and boot with intel_iommu=on or amd_iommu=on (or use the sysfs provider)")
        self._lock = DeviceLock(self.address, lock_dir)
        try:
            self._open(info.iommu_group, Path(root), Path(dev))
        except BaseException:
            self.close()
            raise

    def _open_file(self, path: Path, what: str) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise PCIError(f"{self.address}: {path} does not exist: {what}") from None
        except PermissionError:
            raise PCIError(f"{self.address}: permission denied opening {path}; give this user access "
                           f"(as root): `chown {os.getuid()} {path}` or a udev rule (docs/hardware.md)") from None
        except OSError as e:
            raise PCIError(f"{self.address}: cannot open {path}: {e.strerror}") from None
        self._fds.append(fd)
        return fd

    def _ioctl(self, fd: int, request: int, arg, name: str):
        try:
            return fcntl.ioctl(fd, request, arg)
        except OSError as e:
            raise PCIError(f"{self.address}: {name} failed: {e.strerror}") from None

    def _open(self, group: int, root: Path, dev: Path) -> None:
        self._container = self._open_file(dev / "vfio/vfio", "load the VFIO driver with `modprobe vfio-pci`")
        group_fd = self._open_file(dev / f"vfio/{group}",
                                   f"vfio-pci has not claimed IOMMU group {group}: bind its devices to vfio-pci")
        try:
            version = fcntl.ioctl(self._container, VFIO_GET_API_VERSION)
        except OSError as e:
            raise PCIError(f"{self.address}: {dev / 'vfio/vfio'} is not a VFIO container ({e.strerror})") from None
        if version != VFIO_API_VERSION:
            raise PCIError(f"{self.address}: VFIO API version {version}, expected {VFIO_API_VERSION}")
        status = bytearray(GROUP_STATUS.pack(GROUP_STATUS.size, 0))
        self._ioctl(group_fd, VFIO_GROUP_GET_STATUS, status, "VFIO_GROUP_GET_STATUS")
        if not GROUP_STATUS.unpack(status)[1] & VFIO_GROUP_FLAGS_VIABLE:
            raise PCIError(group_not_viable(self.address, group, root))
        self._ioctl(group_fd, VFIO_GROUP_SET_CONTAINER, struct.pack("=i", self._container),
                    "VFIO_GROUP_SET_CONTAINER")
        for iommu in (VFIO_TYPE1v2_IOMMU, VFIO_TYPE1_IOMMU):
            if fcntl.ioctl(self._container, VFIO_CHECK_EXTENSION, iommu) == 1:
                self._ioctl(self._container, VFIO_SET_IOMMU, iommu, "VFIO_SET_IOMMU")
                break
        else:
            raise PCIError(f"{self.address}: the VFIO container offers no type1 IOMMU (vfio_iommu_type1 not "
                           f"loaded?)")
        self._iovas = IOVAAllocator(self._iova_ranges())
        name = bytearray(self.address.encode() + b"\0")
        self._device = self._ioctl(group_fd, VFIO_GROUP_GET_DEVICE_FD, name, "VFIO_GROUP_GET_DEVICE_FD")
        self._fds.append(self._device)
        info = bytearray(DEVICE_INFO.pack(DEVICE_INFO.size, 0, 0, 0, 0))
        self._ioctl(self._device, VFIO_DEVICE_GET_INFO, info, "VFIO_DEVICE_GET_INFO")
        self._device_flags, self._num_regions = DEVICE_INFO.unpack(info)[1:3]
        if not self._device_flags & VFIO_DEVICE_FLAGS_PCI:
            raise PCIError(f"{self.address}: the VFIO device is not a PCI device")
        self._config = self._region(VFIO_PCI_CONFIG_REGION_INDEX)

    def _iova_ranges(self) -> list[tuple[int, int]]:
        info = bytearray(IOMMU_TYPE1_INFO.pack(IOMMU_TYPE1_INFO.size, 0, 0, 0))
        self._ioctl(self._container, VFIO_IOMMU_GET_INFO, info, "VFIO_IOMMU_GET_INFO")
        needed = IOMMU_TYPE1_INFO.unpack_from(info)[0]
        if needed > len(info):  # the capability chain did not fit: ask again with room for it
            info = bytearray(IOMMU_TYPE1_INFO.pack(needed, 0, 0, 0)) + bytearray(needed - IOMMU_TYPE1_INFO.size)
            self._ioctl(self._container, VFIO_IOMMU_GET_INFO, info, "VFIO_IOMMU_GET_INFO")
        # Kernels before 5.4 report no ranges; 39 bits is what every x86 IOMMU translates.
        return parse_iova_ranges(bytes(info)) or [(0, 1 << 39)]

    def _region(self, index: int) -> Region:
        info = bytearray(REGION_INFO.pack(REGION_INFO.size, 0, index, 0, 0, 0))
        self._ioctl(self._device, VFIO_DEVICE_GET_REGION_INFO, info, f"VFIO_DEVICE_GET_REGION_INFO({index})")
        _, flags, _, _, size, offset = REGION_INFO.unpack(info)
        return Region(index, flags, size, offset)

    # -- config space

    def _config_check(self, offset: int, size: int) -> None:
        if size not in (1, 2, 4):
            raise PCIError(f"{self.address}: config access size {size} (must be 1, 2 or 4)")
        if offset < 0 or offset + size > self._config.size or offset % size:
            raise PCIError(f"{self.address}: config access of {size} bytes at {offset:#x} is misaligned or "
                           f"outside the {self._config.size:#x}-byte config space")

    def config_read(self, offset: int, size: int) -> int:
        self._config_check(offset, size)
        self.counters.config_reads += 1
        try:
            data = os.pread(self._device, size, self._config.offset + offset)
        except OSError as e:
            raise PCIError(f"{self.address}: config read at {offset:#x} failed: {e.strerror}") from None
        if len(data) != size:
            raise PCIError(f"{self.address}: config read at {offset:#x} returned {len(data)} of {size} bytes")
        return int.from_bytes(data, "little")

    def config_write(self, offset: int, size: int, value: int) -> None:
        self._config_check(offset, size)
        self.counters.config_writes += 1
        try:
            os.pwrite(self._device, (value & ((1 << 8 * size) - 1)).to_bytes(size, "little"),
                      self._config.offset + offset)
        except OSError as e:
            raise PCIError(f"{self.address}: config write at {offset:#x} failed: {e.strerror}") from None

    # -- BARs

    def bar(self, index: int) -> BAR:
        if index in self._bars:
            return self._bars[index]
        region = self._region(index) if 0 <= index < 6 else None
        if region is None or region.size == 0 or not region.flags & VFIO_REGION_INFO_FLAG_READ:
            raise PCIError(f"{self.address}: BAR{index} is not implemented (or is an I/O port BAR)")
        bar: BAR | None = None
        if region.flags & VFIO_REGION_INFO_FLAG_MMAP:
            try:
                mapping = mmap.mmap(self._device, region.size, mmap.MAP_SHARED,
                                    mmap.PROT_READ | mmap.PROT_WRITE, offset=region.offset)
                bar = MappedBAR(index, mapping, self.counters, self.address)
            except OSError:
                pass  # vfio-pci may refuse to map a BAR holding the MSI-X table; read/write still work
        self._bars[index] = bar or FileBAR(index, self._device, region.offset, region.size, self.counters,
                                           self.address)
        return self._bars[index]

    # -- DMA

    def alloc_dma(self, size: int, *, readback: bool = False) -> DMABuffer:
        if size <= 0:
            raise PCIError(f"{self.address}: DMA allocation of {size} bytes")
        buf = VFIODMABuffer(self, size)
        self._dma.add(buf)
        return buf

    # -- interrupts

    msi_unavailable = "vfio-pci reports no MSI vector with eventfd signalling for this device"

    def enable_msi(self) -> int | None:
        """MSI vector 0 signals a new eventfd (VFIO_DEVICE_SET_IRQS on VFIO_PCI_MSI_IRQ_INDEX: vfio-pci
        enables MSI on the device, as pci_alloc_irq_vectors would, and its handler signals the eventfd).
        None when VFIO_DEVICE_GET_IRQ_INFO reports no MSI vector that signals through an eventfd."""
        if self._msi_fd is not None:
            return self._msi_fd
        info = bytearray(IRQ_INFO.pack(IRQ_INFO.size, 0, VFIO_PCI_MSI_IRQ_INDEX, 0))
        self._ioctl(self._device, VFIO_DEVICE_GET_IRQ_INFO, info, "VFIO_DEVICE_GET_IRQ_INFO(MSI)")
        _, flags, _, count = IRQ_INFO.unpack(info)
        if count < 1 or not flags & VFIO_IRQ_INFO_EVENTFD:
            return None
        fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            self._ioctl(self._device, VFIO_DEVICE_SET_IRQS, bytearray(irq_set(VFIO_PCI_MSI_IRQ_INDEX, [fd])),
                        "VFIO_DEVICE_SET_IRQS(MSI, eventfd)")
        except BaseException:
            os.close(fd)
            raise
        self._msi_fd = fd
        return fd

    def disable_msi(self) -> None:
        fd, self._msi_fd = self._msi_fd, None
        if fd is None:
            return
        try:
            self._ioctl(self._device, VFIO_DEVICE_SET_IRQS, bytearray(irq_set(VFIO_PCI_MSI_IRQ_INDEX, None)),
                        "VFIO_DEVICE_SET_IRQS(MSI, none)")
        finally:
            os.close(fd)

    # -- reset and life cycle

    def reset_methods(self) -> tuple[str, ...]:
        return ("vfio",) if self._device_flags & VFIO_DEVICE_FLAGS_RESET else ()

    def reset(self) -> None:
        if not self._device_flags & VFIO_DEVICE_FLAGS_RESET:
            raise PCIError(f"{self.address}: vfio-pci offers no reset for this device")
        self._ioctl(self._device, VFIO_DEVICE_RESET, 0, "VFIO_DEVICE_RESET")

    def close(self) -> None:
        if getattr(self, "_msi_fd", None) is not None:
            try:
                self.disable_msi()
            except PCIError:
                pass    # closing the device fd below releases its interrupts too (vfio-pci's release)
        for buf in list(self._dma):
            buf.free()
        for b in self._bars.values():
            b.close()
        self._bars.clear()
        while self._fds:  # device, then group, then container: the reverse of opening
            os.close(self._fds.pop())
        if hasattr(self, "_lock"):
            self._lock.release()

    def __repr__(self) -> str:
        return f"VFIOFunction({self.address!r})"


def group_not_viable(address: str, group: int, root: Path = SYSFS) -> str:
    """Every device in an IOMMU group must be bound to vfio-pci or to a driver that leaves DMA alone
    (pci-stub, pcieport), or be unbound, before VFIO lets one be used; the GPU's HDMI audio function
    usually shares its group."""
    devices = Path(root) / f"kernel/iommu_groups/{group}/devices"
    others = []
    for d in sorted(devices.iterdir()) if devices.is_dir() else []:
        drv = d / "driver"
        name = os.path.basename(os.readlink(drv)) if drv.is_symlink() else None
        if name not in (None, "vfio-pci", "pci-stub", "pcieport"):
            others.append(f"{d.name} (bound to {name}; {bind_instructions(d.name, name)})")
    listed = "; ".join(others) or f"none that sysfs shows (see `ls -l /sys/kernel/iommu_groups/{group}/devices`)"
    return (f"{address}: IOMMU group {group} is not viable: every device in it must be bound to vfio-pci or "
            f"unbound. Still bound: {listed}")


def open_function(address: str, **kwargs) -> VFIOFunction:
    """The `vfio` entry point of the driverless.pcie group."""
    return VFIOFunction(address, **kwargs)
