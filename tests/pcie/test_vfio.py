"""The VFIO provider without VFIO hardware: ioctl numbers and struct layouts checked against the
kernel header through gcc, the error paths over a fake sysfs and /dev, and the whole open/map/DMA/reset
sequence against a fake kernel that answers the ioctls the way vfio.h documents them."""
import ctypes
import fcntl
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import pcie
from pcie import vfio
from pcie.vfio import (DMA_ALIGN, IOMMU_TYPE1_INFO, IOVAAllocator, VFIOFunction, group_not_viable,
                       parse_iova_ranges)

ADDR = "0000:03:00.0"
HEADER = Path("/usr/include/linux/vfio.h")
CONSTANTS = ["VFIO_GET_API_VERSION", "VFIO_CHECK_EXTENSION", "VFIO_SET_IOMMU", "VFIO_GROUP_GET_STATUS",
             "VFIO_GROUP_SET_CONTAINER", "VFIO_GROUP_UNSET_CONTAINER", "VFIO_GROUP_GET_DEVICE_FD",
             "VFIO_DEVICE_GET_INFO", "VFIO_DEVICE_GET_REGION_INFO", "VFIO_DEVICE_RESET", "VFIO_IOMMU_GET_INFO",
             "VFIO_IOMMU_MAP_DMA", "VFIO_IOMMU_UNMAP_DMA", "VFIO_API_VERSION", "VFIO_TYPE1_IOMMU",
             "VFIO_TYPE1v2_IOMMU", "VFIO_GROUP_FLAGS_VIABLE", "VFIO_DEVICE_FLAGS_RESET", "VFIO_DEVICE_FLAGS_PCI",
             "VFIO_REGION_INFO_FLAG_READ", "VFIO_REGION_INFO_FLAG_WRITE", "VFIO_REGION_INFO_FLAG_MMAP",
             "VFIO_PCI_CONFIG_REGION_INDEX", "VFIO_IOMMU_INFO_CAPS", "VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE",
             "VFIO_DMA_MAP_FLAG_READ", "VFIO_DMA_MAP_FLAG_WRITE", "VFIO_DEVICE_GET_IRQ_INFO", "VFIO_DEVICE_SET_IRQS",
             "VFIO_IRQ_INFO_EVENTFD", "VFIO_IRQ_SET_DATA_NONE", "VFIO_IRQ_SET_DATA_EVENTFD",
             "VFIO_IRQ_SET_ACTION_TRIGGER", "VFIO_PCI_MSI_IRQ_INDEX"]
# Python struct -> (C struct, its fields in order).
STRUCTS = {
    "GROUP_STATUS": ("vfio_group_status", ["argsz", "flags"]),
    "DEVICE_INFO": ("vfio_device_info", ["argsz", "flags", "num_regions", "num_irqs", "cap_offset"]),
    "REGION_INFO": ("vfio_region_info", ["argsz", "flags", "index", "cap_offset", "size", "offset"]),
    "IOMMU_TYPE1_INFO": ("vfio_iommu_type1_info", ["argsz", "flags", "iova_pgsizes", "cap_offset"]),
    "INFO_CAP_HEADER": ("vfio_info_cap_header", ["id", "version", "next"]),
    "IOVA_RANGE": ("vfio_iova_range", ["start", "end"]),
    "DMA_MAP": ("vfio_iommu_type1_dma_map", ["argsz", "flags", "vaddr", "iova", "size"]),
    "DMA_UNMAP": ("vfio_iommu_type1_dma_unmap", ["argsz", "flags", "iova", "size"]),
    "IRQ_INFO": ("vfio_irq_info", ["argsz", "flags", "index", "count"]),
    "IRQ_SET": ("vfio_irq_set", ["argsz", "flags", "index", "start", "count"]),   # then data[]
}


def _struct_layout(s: struct.Struct) -> tuple[int, list[tuple[int, int]]]:
    """(size, [(offset, size) of each field]) of a "=..." struct with "x" padding."""
    fields, off = [], 0
    for code in s.format.lstrip("=").replace("4x", "xxxx"):
        size = struct.calcsize("=" + code)
        if code != "x":
            fields.append((off, size))
        off += size
    return s.size, fields


@pytest.mark.skipif(not HEADER.exists() or not shutil.which("gcc"),
                    reason="needs gcc and the kernel's uapi headers (Debian linux-libc-dev)")
def test_numbers_and_layouts_match_the_kernel_header(tmp_path):
    lines = [f'printf("{c} %llu\\n", (unsigned long long)({c}));' for c in CONSTANTS]
    for _, (cname, fields) in STRUCTS.items():
        lines.append(f'printf("{cname} %zu", sizeof(struct {cname}));')
        lines += [f'printf(" %zu:%zu", offsetof(struct {cname}, {f}), sizeof(((struct {cname} *)0)->{f}));'
                  for f in fields]
        lines.append('printf("\\n");')
    lines.append('printf("iova_cap %zu %zu\\n", offsetof(struct vfio_iommu_type1_info_cap_iova_range, nr_iovas),'
                 ' offsetof(struct vfio_iommu_type1_info_cap_iova_range, iova_ranges));')
    src = tmp_path / "probe.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <linux/vfio.h>\nint main(void) {\n"
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    subprocess.run(["gcc", "-o", tmp_path / "probe", src], check=True, capture_output=True)
    out = dict(line.split(" ", 1) for line in
               subprocess.run([tmp_path / "probe"], check=True, capture_output=True, text=True).stdout.splitlines())
    for c in CONSTANTS:
        assert getattr(vfio, c) == int(out[c]), c
    for pyname, (cname, _) in STRUCTS.items():
        size, fields = _struct_layout(getattr(vfio, pyname))
        assert out[cname] == f"{size} " + " ".join(f"{o}:{s}" for o, s in fields), pyname
    # The IOVA-range capability: the header, then nr_iovas and reserved, then the ranges.
    assert out["iova_cap"] == f"{vfio.INFO_CAP_HEADER.size} " \
                              f"{vfio.INFO_CAP_HEADER.size + vfio.IOVA_RANGE_CAP.size}"


def test_ioctl_numbers_as_the_header_spells_them():
    # _IO(';', 100 + n) with no direction or size bits (asm-generic/ioctl.h).
    assert vfio.VFIO_GET_API_VERSION == 0x3B64
    assert vfio.VFIO_DEVICE_GET_REGION_INFO == 0x3B6C
    assert vfio.VFIO_DEVICE_RESET == 0x3B6F
    assert vfio.VFIO_IOMMU_MAP_DMA == 0x3B71


# -- IOVA ranges and allocation

def _iommu_info(caps: list[tuple[int, bytes]], flags=vfio.VFIO_IOMMU_INFO_CAPS) -> bytes:
    """A VFIO_IOMMU_GET_INFO reply with the given (id, body) capabilities chained after the struct."""
    body = bytearray()
    base = IOMMU_TYPE1_INFO.size
    for i, (cap_id, data) in enumerate(caps):
        here = base + len(body)
        nxt = here + vfio.INFO_CAP_HEADER.size + len(data) if i + 1 < len(caps) else 0
        body += vfio.INFO_CAP_HEADER.pack(cap_id, 1, nxt) + data
    return IOMMU_TYPE1_INFO.pack(base + len(body), flags, 0x40201000, base if caps else 0) + bytes(body)


def _iova_cap(ranges) -> bytes:
    return vfio.IOVA_RANGE_CAP.pack(len(ranges), 0) + b"".join(vfio.IOVA_RANGE.pack(a, b) for a, b in ranges)


def test_parse_iova_ranges():
    x86 = [(0, 0xFEDFFFFF), (0xFEF00000, (1 << 48) - 1)]  # everything but the MSI window, inclusive ends
    info = _iommu_info([(2, b"\0" * 16), (1, _iova_cap(x86))])  # a migration cap first, skipped
    assert parse_iova_ranges(info) == [(0, 0xFEE00000), (0xFEF00000, 1 << 48)]
    assert parse_iova_ranges(_iommu_info([(1, _iova_cap(x86))], flags=0)) == []  # no caps flag
    assert parse_iova_ranges(_iommu_info([])) == []
    looped = bytearray(info)
    struct.pack_into("=I", looped, IOMMU_TYPE1_INFO.size + 4, IOMMU_TYPE1_INFO.size)  # next -> itself
    assert parse_iova_ranges(bytes(looped)) == []
    with pytest.raises(pcie.PCIError, match="runs past"):
        parse_iova_ranges(IOMMU_TYPE1_INFO.pack(24, vfio.VFIO_IOMMU_INFO_CAPS, 0, 4000))


def test_iova_allocator_aligns_skips_zero_and_holes_and_merges():
    a = IOVAAllocator([(0, 0xFEE00000), (0xFEF00000, 1 << 40)])
    first = a.alloc(4096)
    assert first == DMA_ALIGN  # never IOVA 0
    second = a.alloc(3 * DMA_ALIGN)
    assert second == 2 * DMA_ALIGN
    big = a.alloc(0xFF000000)  # does not fit below the MSI window any more
    assert big == 0xFF000000 and big % DMA_ALIGN == 0
    a.free(second, 3 * DMA_ALIGN)
    assert a.alloc(3 * DMA_ALIGN) == second  # the hole is reused
    a.free(first, 4096)
    a.free(second, 3 * DMA_ALIGN)
    assert a._free[0] == (DMA_ALIGN, 0xFEE00000)  # merged back into one range
    with pytest.raises(pcie.PCIError, match="no free IOVA range of 0x10000000000 bytes"):
        a.alloc(1 << 40)


# -- errors a user meets before VFIO is set up

def test_amdgpu_bound_says_how_to_bind_vfio(fake_sysfs, lock_dir, tmp_path):
    fake_sysfs.add(ADDR, driver="amdgpu", iommu=(14, "DMA"))
    with pytest.raises(pcie.PCIError) as e:
        VFIOFunction(ADDR, root=fake_sysfs.root, dev=tmp_path / "dev", lock_dir=lock_dir)
    assert str(e.value) == (
        f"{ADDR} is bound to amdgpu, not vfio-pci; bind it to vfio-pci (as root): "
        f"`echo {ADDR} > /sys/bus/pci/drivers/amdgpu/unbind` && `modprobe vfio-pci` && "
        f"`echo vfio-pci > /sys/bus/pci/devices/{ADDR}/driver_override` && "
        f"`echo {ADDR} > /sys/bus/pci/drivers_probe`")


def test_unbound_device_gets_the_bind_steps_only(fake_sysfs, lock_dir, tmp_path):
    fake_sysfs.add(ADDR, iommu=(14, "DMA"))
    with pytest.raises(pcie.PCIError, match=f"{ADDR} is not bound to any driver, not vfio-pci; bind it to "
                                            f"vfio-pci \\(as root\\): `modprobe vfio-pci` &&"):
        pcie.open_function("vfio", ADDR, root=fake_sysfs.root, dev=tmp_path / "dev", lock_dir=lock_dir)


def test_no_iommu_group(fake_sysfs, lock_dir, tmp_path):
    fake_sysfs.add(ADDR, driver="vfio-pci")
    with pytest.raises(pcie.PCIError, match="no IOMMU group: the IOMMU is off; .*amd_iommu=on"):
        VFIOFunction(ADDR, root=fake_sysfs.root, dev=tmp_path / "dev", lock_dir=lock_dir)


def test_missing_dev_vfio(fake_sysfs, lock_dir, tmp_path):
    fake_sysfs.add(ADDR, driver="vfio-pci", iommu=(14, "DMA"))
    dev = tmp_path / "dev"
    with pytest.raises(pcie.PCIError, match=f"{ADDR}: {dev}/vfio/vfio does not exist: .*`modprobe vfio-pci`"):
        VFIOFunction(ADDR, root=fake_sysfs.root, dev=dev, lock_dir=lock_dir)
    (dev / "vfio").mkdir(parents=True)
    (dev / "vfio/vfio").write_bytes(b"")
    with pytest.raises(pcie.PCIError, match="vfio/14 does not exist: vfio-pci has not claimed IOMMU group 14"):
        VFIOFunction(ADDR, root=fake_sysfs.root, dev=dev, lock_dir=lock_dir)
    (dev / "vfio/14").write_bytes(b"")
    with pytest.raises(pcie.PCIError, match="vfio/vfio is not a VFIO container \\(Inappropriate ioctl"):
        VFIOFunction(ADDR, root=fake_sysfs.root, dev=dev, lock_dir=lock_dir)
    # Each failure let go of the lock and its files.
    from pcie.lock import DeviceLock
    DeviceLock(ADDR, lock_dir).release()


def test_group_not_viable_names_the_devices_to_rebind(fake_sysfs):
    fake_sysfs.add(ADDR, driver="vfio-pci", iommu=(14, "DMA"))
    fake_sysfs.add("0000:03:00.1", ids=(0x1002, 0xAB30), class_code=0x040300, driver="snd_hda_intel",
                   iommu=(14, "DMA"))
    fake_sysfs.add("0000:02:00.0", ids=(0x1002, 0x1478), class_code=0x060400, driver="pcieport", iommu=(14, "DMA"))
    msg = group_not_viable(ADDR, 14, fake_sysfs.root)
    assert msg.startswith(f"{ADDR}: IOMMU group 14 is not viable: every device in it must be bound to vfio-pci")
    assert "0000:03:00.1 (bound to snd_hda_intel; bind it to vfio-pci (as root): " \
           "`echo 0000:03:00.1 > /sys/bus/pci/drivers/snd_hda_intel/unbind`" in msg
    assert "0000:02:00.0" not in msg and f"{ADDR} (" not in msg


# -- the whole sequence against a fake kernel

class FakeVFIOKernel:
    """Answers VFIO ioctls on the fake /dev/vfio files the way vfio.h describes; the device fd is a
    real file holding config space and BARs at the region offsets this kernel reports."""
    REGION_STRIDE = 1 << 20
    BAR_SIZES = {0: 1 << 20, 2: 1 << 16, 5: 1 << 16}
    MMAPPABLE = {0, 2}   # BAR5 is read/write only, as when vfio-pci will not map the MSI-X table

    def __init__(self, dev: Path, tmp: Path, group: int, iova_ranges):
        self.dev, self.group, self.iova_ranges = dev, group, iova_ranges
        (dev / "vfio").mkdir(parents=True)
        (dev / "vfio/vfio").write_bytes(b"")
        (dev / f"vfio/{group}").write_bytes(b"")
        self.device_file = tmp / "device"
        with open(self.device_file, "wb") as f:
            f.truncate(8 * self.REGION_STRIDE)
            f.seek(7 * self.REGION_STRIDE)
            f.write(struct.pack("<HH", 0x1002, 0x744C) + bytes(4092))
        self.maps, self.unmaps, self.calls, self.viable, self.reset_flag = {}, [], [], True, True
        self.memory_seen = {}
        self.msi_flags, self.msi_count, self.irq_sets, self.msi_eventfds = vfio.VFIO_IRQ_INFO_EVENTFD, 1, [], []

    def _which(self, fd):
        return os.readlink(f"/proc/self/fd/{fd}")

    def ioctl(self, fd, req, arg=0, mutate=True):
        name = next(n for n in dir(vfio) if n.startswith("VFIO_") and getattr(vfio, n) == req
                    and n not in ("VFIO_TYPE", "VFIO_BASE"))
        self.calls.append(name)
        path = self._which(fd)
        if name == "VFIO_GET_API_VERSION":
            assert path.endswith("vfio/vfio")
            return 0
        if name == "VFIO_CHECK_EXTENSION":
            return int(arg == vfio.VFIO_TYPE1v2_IOMMU)
        if name == "VFIO_SET_IOMMU":
            assert arg == vfio.VFIO_TYPE1v2_IOMMU
            return 0
        if name == "VFIO_GROUP_GET_STATUS":
            assert path.endswith(f"vfio/{self.group}") and len(arg) == 8
            struct.pack_into("=I", arg, 4, vfio.VFIO_GROUP_FLAGS_VIABLE if self.viable else 0)
            return 0
        if name == "VFIO_GROUP_SET_CONTAINER":
            assert self._which(struct.unpack("=i", arg)[0]).endswith("vfio/vfio")
            return arg
        if name == "VFIO_IOMMU_GET_INFO":
            full = _iommu_info([(1, _iova_cap(self.iova_ranges))])
            if struct.unpack_from("=I", arg)[0] < len(full):  # too small: report the size needed
                struct.pack_into("=II", arg, 0, len(full), vfio.VFIO_IOMMU_INFO_CAPS)
            else:
                arg[:len(full)] = full
            return 0
        if name == "VFIO_GROUP_GET_DEVICE_FD":
            assert bytes(arg) == ADDR.encode() + b"\0"
            return os.open(self.device_file, os.O_RDWR)
        if name == "VFIO_DEVICE_GET_INFO":
            flags = vfio.VFIO_DEVICE_FLAGS_PCI | (vfio.VFIO_DEVICE_FLAGS_RESET if self.reset_flag else 0)
            struct.pack_into("=IIII", arg, 4, flags, 9, 5, 0)
            return 0
        if name == "VFIO_DEVICE_GET_REGION_INFO":
            index = struct.unpack_from("=I", arg, 8)[0]
            size = 4096 if index == 7 else self.BAR_SIZES.get(index, 0)
            flags = (3 | (4 if index in self.MMAPPABLE else 0)) if size else 0
            struct.pack_into("=IIIIQQ", arg, 0, 32, flags, index, 0, size, index * self.REGION_STRIDE)
            return 0
        if name == "VFIO_IOMMU_MAP_DMA":
            argsz, flags, vaddr, iova, size = vfio.DMA_MAP.unpack(arg)
            assert argsz == 32 and flags == 3
            self.maps[iova] = (vaddr, size)
            return arg
        if name == "VFIO_IOMMU_UNMAP_DMA":
            argsz, flags, iova, size = vfio.DMA_UNMAP.unpack(arg)
            assert argsz == 24 and flags == 0 and self.maps.pop(iova)[1] == size
            self.unmaps.append(iova)
            return arg
        if name == "VFIO_DEVICE_RESET":
            return 0
        if name == "VFIO_DEVICE_GET_IRQ_INFO":
            argsz, _, index, _ = vfio.IRQ_INFO.unpack(arg)
            assert argsz == 16 and index == vfio.VFIO_PCI_MSI_IRQ_INDEX
            struct.pack_into("=II", arg, 4, self.msi_flags, index)
            struct.pack_into("=I", arg, 12, self.msi_count)
            return 0
        if name == "VFIO_DEVICE_SET_IRQS":
            argsz, flags, index, start, count = vfio.IRQ_SET.unpack_from(arg)
            assert argsz == len(arg) and index == vfio.VFIO_PCI_MSI_IRQ_INDEX and start == 0
            fds = list(struct.unpack_from(f"={count}i", arg, vfio.IRQ_SET.size))
            self.irq_sets.append((flags, fds))
            self.msi_eventfds = fds     # vfio-pci signals these from its MSI handler
            return 0
        raise AssertionError(name)

    def device_memory(self, offset, size):
        with open(self.device_file, "rb") as f:
            f.seek(offset)
            return f.read(size)


@pytest.fixture
def fake_kernel(fake_sysfs, tmp_path, monkeypatch):
    fake_sysfs.add(ADDR, driver="vfio-pci", iommu=(14, "DMA"))
    kernel = FakeVFIOKernel(tmp_path / "dev", tmp_path, 14, [(0, 0xFEDFFFFF), (0xFEF00000, (1 << 48) - 1)])
    monkeypatch.setattr(fcntl, "ioctl", kernel.ioctl)
    return kernel


def test_open_config_bars_dma_reset_close(fake_kernel, fake_sysfs, lock_dir):
    k = fake_kernel
    f = VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir)
    assert k.calls[:4] == ["VFIO_GET_API_VERSION", "VFIO_GROUP_GET_STATUS", "VFIO_GROUP_SET_CONTAINER",
                           "VFIO_CHECK_EXTENSION"]
    assert k.calls.count("VFIO_IOMMU_GET_INFO") == 2  # asked again with room for the capability chain
    assert (f.vendor_id, f.device_id) == (0x1002, 0x744C)
    f.config_write(0x04, 2, 0x0006)
    assert k.device_memory(7 * k.REGION_STRIDE + 4, 2) == b"\x06\x00"
    with pytest.raises(pcie.PCIError, match="outside the 0x1000-byte config space"):
        f.config_read(0x1000, 4)

    bar0, bar5 = f.bar(0), f.bar(5)
    assert bar0.direct() is not None and bar5.direct() is None  # mapped vs read/write fallback
    bar0.write32(0x10, 0x11223344)
    bar5.write32(0x20, 0xAABBCCDD)
    bar5.write64(0x28, 0x0102030405060708)
    bar5.write(0x40, b"xyz")
    assert bar5.read32(0x20) == 0xAABBCCDD and bar5.read64(0x28) == 0x0102030405060708
    assert bar5.read(0x40, 3) == b"xyz"
    assert k.device_memory(0x10, 4) == bytes.fromhex("44332211")
    assert k.device_memory(5 * k.REGION_STRIDE + 0x20, 4) == bytes.fromhex("ddccbbaa")
    with pytest.raises(pcie.PCIError, match=f"{ADDR} BAR5: .*misaligned"):
        bar5.read32(0x22)
    with pytest.raises(pcie.PCIError, match=f"{ADDR}: BAR1 is not implemented"):
        f.bar(1)
    c = f.counters
    assert (c.mmio_reads, c.mmio_writes, c.bulk_read_bytes, c.bulk_write_bytes) == (2, 3, 3, 3)
    assert (c.config_reads, c.config_writes) == (2, 1)

    buf = f.alloc_dma(5000)
    assert buf.size == len(buf.view) == 5000
    assert buf.bus_address(0) == DMA_ALIGN and buf.bus_address(4999) == DMA_ALIGN + 4999
    vaddr, size = k.maps[DMA_ALIGN]
    assert size == 8192
    buf.view[:4] = b"dma!"
    assert ctypes.string_at(vaddr, 4) == b"dma!"  # the kernel was given the buffer's real address
    with pytest.raises(pcie.PCIError, match=f"{ADDR}: DMA allocation of 0 bytes"):
        f.alloc_dma(0)
    other = f.alloc_dma(1)
    assert other.bus_address() == 2 * DMA_ALIGN
    buf.free()
    assert k.unmaps == [DMA_ALIGN]
    with pytest.raises(pcie.PCIError, match="after free"):
        buf.view

    assert f.reset_methods() == ("vfio",)
    f.reset()
    assert k.calls[-1] == "VFIO_DEVICE_RESET"
    f.close()
    assert sorted(k.unmaps) == [DMA_ALIGN, 2 * DMA_ALIGN] and not k.maps
    assert not any(os.readlink(f"/proc/self/fd/{fd}").startswith(str(k.dev)) for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))
    with VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir):
        pass  # lock released


def test_not_viable_and_no_reset(fake_kernel, fake_sysfs, lock_dir):
    k = fake_kernel
    k.viable = False
    with pytest.raises(pcie.PCIError, match="IOMMU group 14 is not viable"):
        VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir)
    k.viable, k.reset_flag = True, False
    with VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir) as f:
        assert f.reset_methods() == ()
        with pytest.raises(pcie.PCIError, match="vfio-pci offers no reset for this device"):
            f.reset()


def test_map_dma_failure_mentions_memlock(fake_kernel, fake_sysfs, lock_dir, monkeypatch):
    k = fake_kernel
    with VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir) as f:
        real = fcntl.ioctl

        def refuse(fd, req, arg=0, mutate=True):
            if req == vfio.VFIO_IOMMU_MAP_DMA:
                raise OSError(12, "Cannot allocate memory")
            return real(fd, req, arg, mutate)
        monkeypatch.setattr(fcntl, "ioctl", refuse)
        with pytest.raises(pcie.PCIError, match="VFIO_IOMMU_MAP_DMA of 0x1000 bytes at IOVA 0x200000 failed: "
                                                "Cannot allocate memory; pinning counts against RLIMIT_MEMLOCK"):
            f.alloc_dma(100)
        monkeypatch.setattr(fcntl, "ioctl", real)
        assert f.alloc_dma(100).bus_address() == DMA_ALIGN  # the failed IOVA went back


def test_irq_set_packing():
    """struct vfio_irq_set: argsz covers data[]; DATA_EVENTFD | ACTION_TRIGGER with an s32 eventfd per
    vector from `start`; DATA_NONE | ACTION_TRIGGER with count 0 disables the index (vfio.h)."""
    on = vfio.irq_set(vfio.VFIO_PCI_MSI_IRQ_INDEX, [7])
    assert on == struct.pack("=IIIIIi", 24, (1 << 2) | (1 << 5), 1, 0, 1, 7)
    assert vfio.irq_set(2, [3, -1]) == struct.pack("=IIIIIii", 28, 0x24, 2, 0, 2, 3, -1)
    assert vfio.irq_set(vfio.VFIO_PCI_MSI_IRQ_INDEX, None) == struct.pack("=IIIII", 20, (1 << 0) | (1 << 5), 1, 0, 0)
    assert vfio.VFIO_DEVICE_SET_IRQS == 0x3B6E and vfio.VFIO_DEVICE_GET_IRQ_INFO == 0x3B6D


def test_enable_msi_routes_vector_0_to_an_eventfd(fake_kernel, fake_sysfs, lock_dir):
    k = fake_kernel
    f = VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir)
    fd = f.enable_msi()
    assert k.calls[-2:] == ["VFIO_DEVICE_GET_IRQ_INFO", "VFIO_DEVICE_SET_IRQS"]
    assert k.irq_sets == [(vfio.VFIO_IRQ_SET_DATA_EVENTFD | vfio.VFIO_IRQ_SET_ACTION_TRIGGER, [fd])]
    assert f.enable_msi() == fd and len(k.irq_sets) == 1      # once
    os.eventfd_write(k.msi_eventfds[0], 1)                    # what vfio-pci's MSI handler does
    assert os.eventfd_read(fd) == 1
    f.close()                                                 # disables the index, closes the eventfd
    assert k.irq_sets[-1] == (vfio.VFIO_IRQ_SET_DATA_NONE | vfio.VFIO_IRQ_SET_ACTION_TRIGGER, [])
    with pytest.raises(OSError):
        os.fstat(fd)


def test_no_msi_vector_means_polling(fake_kernel, fake_sysfs, lock_dir):
    k = fake_kernel
    k.msi_count = 0
    with VFIOFunction(ADDR, root=fake_sysfs.root, dev=k.dev, lock_dir=lock_dir) as f:
        assert f.enable_msi() is None and "no MSI vector" in f.msi_unavailable
        assert "VFIO_DEVICE_SET_IRQS" not in k.calls
