"""The sysfs provider over a fake sysfs tree (regular files mapped like BARs)."""
import mmap
import os
import re
from pathlib import Path

import pytest

import pcie
from pcie.hugepages import HUGEPAGE_SIZE, physical_pages
from pcie.sysfs import SysfsFunction, parse_resources

ADDR = "0000:03:00.0"


@pytest.fixture
def fn(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR)
    f = SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir)
    yield f
    f.close()


def test_opens_through_the_entry_point(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR)
    with pcie.open_function("sysfs", "03:00.0", root=fake_sysfs.root, lock_dir=lock_dir) as f:
        assert isinstance(f, SysfsFunction)
        assert f.address == ADDR
        assert (f.vendor_id, f.device_id) == (0x1002, 0x744C)


def test_config_sizes_values_and_counters(fn, fake_sysfs):
    assert fn.config_read(0, 4) == 0x744C1002
    assert fn.config_read(2, 2) == 0x744C
    assert fn.config_read(8, 1) == 0xC8
    assert fn.config_read(0x0B, 1) == 0x03  # base class: display
    fn.config_write(0x04, 2, 0x0006)
    fn.config_write(0x3C, 1, 0x1FF)  # wider values are cut to the access size
    fn.config_write(0x100, 4, 0xDEADBEEF)
    raw = (fake_sysfs.root / "bus/pci/devices" / ADDR / "config").read_bytes()
    assert raw[4:6] == b"\x06\x00" and raw[0x3C] == 0xFF and raw[0x100:0x104] == bytes.fromhex("efbeadde")
    assert fn.config_read(0x100, 4) == 0xDEADBEEF
    assert (fn.counters.config_reads, fn.counters.config_writes) == (5, 3)
    fn.set_bus_master(False)
    assert fn.config_read(4, 2) == 0x0002


@pytest.mark.parametrize("offset,size", [(1, 2), (2, 4), (0x1000, 1), (0xFFE, 4), (-4, 4)])
def test_config_rejects_bad_accesses(fn, offset, size):
    words = f"{ADDR}: config access of {size} bytes at {offset:#x} is misaligned or outside the 0x1000-byte"
    with pytest.raises(pcie.PCIError, match=re.escape(words)):
        fn.config_read(offset, size)
    with pytest.raises(pcie.PCIError, match=re.escape(words)):
        fn.config_write(offset, size, 0)
    with pytest.raises(pcie.PCIError, match=re.escape(f"{ADDR}: config access size 3 (must be 1, 2 or 4)")):
        fn.config_read(0, 3)
    assert fn.counters.config_reads == fn.counters.config_writes == 0


def test_short_config_space(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR, config_size=256)
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        assert f.config_read(0xFC, 4) == 0
        with pytest.raises(pcie.PCIError, match="0x100-byte config space"):
            f.config_read(0x100, 4)


def test_mmio_widths_endianness_and_counters(fn, fake_sysfs):
    bar5 = fn.bar(5)
    assert fn.bar(5) is bar5 and bar5.size == 1 << 16 and bar5.index == 5
    bar5.write32(0x10, 0x11223344)
    bar5.write64(0x18, 0x8877665544332211)
    assert bar5.read32(0x10) == 0x11223344
    assert bar5.read64(0x18) == 0x8877665544332211
    assert bar5.read32(0x1C) == 0x88776655
    bar5.write(0x100, b"hello")
    assert bar5.read(0x100, 5) == b"hello"
    c = fn.counters
    assert (c.mmio_reads, c.mmio_writes, c.bulk_read_bytes, c.bulk_write_bytes) == (3, 2, 5, 5)
    bar5.flush()
    # The bytes reached the resource file (the BAR) little-endian.
    raw = (fake_sysfs.root / "bus/pci/devices" / ADDR / "resource5").read_bytes()
    assert raw[0x10:0x14] == bytes.fromhex("44332211") and raw[0x18:0x20] == bytes(range(0x11, 0x99, 0x11))
    assert raw[0x100:0x105] == b"hello"


def test_write_combining_only_where_asked_and_prefetchable(fake_sysfs, lock_dir):
    d = fake_sysfs.add(ADDR)
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir, wc_bars=(0, 5)) as f:
        f.bar(0).write32(0, 0xAABBCCDD)
        f.bar(2).write32(0, 0x12345678)
        f.bar(5).write32(0, 0x0BADF00D)  # not prefetchable: never write-combined
    assert (d / "resource0_wc").read_bytes()[:4] == bytes.fromhex("ddccbbaa")
    assert (d / "resource0").read_bytes()[:4] == bytes(4)
    assert (d / "resource2").read_bytes()[:4] == bytes.fromhex("78563412")  # 2 not in wc_bars
    assert (d / "resource2_wc").read_bytes()[:4] == bytes(4)
    assert (d / "resource5").read_bytes()[:4] == bytes.fromhex("0df0ad0b")


@pytest.mark.parametrize("call,words", [
    (lambda b: b.read32(2), "misaligned"),
    (lambda b: b.write32(0x10001, 0), "misaligned"),
    (lambda b: b.read32(1 << 16), "outside the BAR"),
    (lambda b: b.read32(-4), "outside the BAR"),
    (lambda b: b.read64(4), "misaligned"),
    (lambda b: b.write64((1 << 16) - 4, 0), "misaligned"),
    (lambda b: b.write64(1 << 16, 0), "outside the BAR"),
    (lambda b: b.read((1 << 16) - 2, 4), "outside the BAR"),
    (lambda b: b.write((1 << 16) - 1, b"xy"), "outside the BAR"),
])
def test_bad_mmio_is_rejected_naming_the_bar(fn, call, words):
    with pytest.raises(pcie.PCIError, match=f"{ADDR} BAR5: .*{words}"):
        call(fn.bar(5))
    c = fn.counters
    assert c.mmio_reads == c.mmio_writes == c.bulk_read_bytes == c.bulk_write_bytes == 0


def test_direct_view_is_the_mapping(fn):
    bar0 = fn.bar(0)
    view = bar0.direct()
    assert isinstance(view, memoryview) and len(view) == bar0.size
    view[0x40:0x44] = (0xCAFEF00D).to_bytes(4, "little")
    assert bar0.read32(0x40) == 0xCAFEF00D
    bar0.write(0x80, b"\x01\x02")
    assert bytes(view[0x80:0x82]) == b"\x01\x02"
    del view


@pytest.mark.parametrize("index,words", [
    (4, "BAR4 is an I/O port BAR"), (1, "BAR1 is not implemented"), (6, "BAR6 is not implemented"),
    (-1, "BAR-1 is not implemented"),
])
def test_missing_bars_are_named(fn, index, words):
    with pytest.raises(pcie.PCIError, match=f"{ADDR}: {words}.*memory BARs: BAR0, BAR2, BAR5"):
        fn.bar(index)


def test_resource_file_parsing():
    text = ("0x000000f000000000 0x000000f7ffffffff 0x000000000014220c\n"
            "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
            "0x000000000000e000 0x000000000000e0ff 0x0000000000040101\n")
    assert parse_resources(text) == [(0xF000000000, 0x800000000, 0x14220C), (0, 0, 0), (0xE000, 0x100, 0x40101)]


def test_amdgpu_bound_is_refused_with_the_unbind_command(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR, driver="amdgpu")
    with pytest.raises(pcie.PCIError) as e:
        SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir)
    assert f"echo {ADDR} > /sys/bus/pci/drivers/amdgpu/unbind" in str(e.value)
    assert "modprobe -r amdgpu" in str(e.value)
    assert not list(lock_dir.iterdir())  # refused before the lock was taken


def test_second_open_is_busy_and_close_releases(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR)
    f = SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir)
    with pytest.raises(pcie.PCIError, match=f"device {ADDR} busy, held by pid {os.getpid()} \\(this process"):
        SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir)
    bar = f.bar(0)
    f.close()
    with pytest.raises(pcie.PCIError, match="closed"):
        bar.read32(0)
    f.close()  # twice is harmless
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as g:
        assert g.vendor_id == 0x1002


def test_unknown_address(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR)
    with pytest.raises(pcie.PCIError, match="0000:04:00.0: no such PCI function"):
        SysfsFunction("04:00.0", root=fake_sysfs.root, lock_dir=lock_dir)
    with pytest.raises(pcie.PCIError, match="not a PCI address"):
        SysfsFunction("gpu0", root=fake_sysfs.root, lock_dir=lock_dir)


def test_reset_writes_the_reset_file(fake_sysfs, lock_dir):
    d = fake_sysfs.add(ADDR)
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        f.reset()
    assert (d / "reset").read_text() == "1"
    (d / "reset").unlink()
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        with pytest.raises(pcie.PCIError, match=f"{ADDR}: the kernel offers no function reset"):
            f.reset()


def test_reset_methods_are_what_the_kernel_lists(fake_sysfs, lock_dir):
    d = fake_sysfs.add(ADDR)
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        assert f.reset_methods() == ("function",)        # a kernel before reset_method (5.15): it picks one
        (d / "reset_method").write_text("bus\n")
        assert f.reset_methods() == ("bus",)
        (d / "reset_method").write_text("\n")           # nothing offered: the reset file is then absent too
        (d / "reset").unlink()
        assert f.reset_methods() == ()


def test_dma_refused_when_the_iommu_translates(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR, iommu=(7, "DMA-FQ"))
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        with pytest.raises(pcie.PCIError, match="IOMMU translates .*group 7, domain type DMA-FQ.*vfio.*iommu=pt"):
            f.alloc_dma(4096)


def test_empty_dma_allocation(fn):
    with pytest.raises(pcie.PCIError, match=f"{ADDR}: DMA allocation of 0 bytes"):
        fn.alloc_dma(0)


def _hugepages_free() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("HugePages_Free:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(_hugepages_free() > 0, reason="hugepages are reserved here; the shortage path is not reachable")
def test_dma_without_hugepages_says_how_to_reserve(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR, iommu=(7, "identity"))
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        with pytest.raises(pcie.PCIError,
                           match=f"{ADDR}: cannot get 2 free 2 MiB hugepages.*/proc/sys/vm/nr_hugepages"):
            f.alloc_dma(HUGEPAGE_SIZE + 1)


@pytest.mark.skipif(_hugepages_free() < 2 or os.geteuid() != 0,
                    reason="needs 2 free 2 MiB hugepages (echo 2 > /proc/sys/vm/nr_hugepages) and root")
def test_dma_from_hugepages(fake_sysfs, lock_dir):
    fake_sysfs.add(ADDR)
    with SysfsFunction(ADDR, root=fake_sysfs.root, lock_dir=lock_dir) as f:
        buf = f.alloc_dma(HUGEPAGE_SIZE + 8)
        assert buf.size == len(buf.view) == HUGEPAGE_SIZE + 8
        assert bytes(buf.view[:16]) == bytes(16)
        buf.view[HUGEPAGE_SIZE:HUGEPAGE_SIZE + 4] = b"abcd"
        first, second = buf.bus_address(0), buf.bus_address(HUGEPAGE_SIZE)
        assert first % HUGEPAGE_SIZE == 0 and second % HUGEPAGE_SIZE == 0
        assert buf.bus_address(4100) == first + 4100
        assert buf.bus_address(HUGEPAGE_SIZE + 7) == second + 7
        # The physical page really holds what we wrote: /proc/kpageflags says it is a huge page (bit 17).
        with open("/proc/kpageflags", "rb") as kf:
            flags = int.from_bytes(os.pread(kf.fileno(), 8, second // 4096 * 8), "little")
        assert flags & (1 << 17), "HUGE flag missing on the page pagemap named"
        with pytest.raises(pcie.PCIError, match="outside the"):
            buf.bus_address(HUGEPAGE_SIZE + 8)
        buf.free()
        with pytest.raises(pcie.PCIError, match="after free"):
            buf.view
        f.alloc_dma(1)  # freed by close


def test_pagemap_parsing_on_a_fabricated_file(tmp_path):
    pagemap = tmp_path / "pagemap"
    entries = {0x10: (1 << 63) | 0x12345, 0x210: (1 << 63) | (1 << 55) | 0x400,  # soft-dirty bit ignored
               0x410: 0, 0x610: (1 << 63) | (1 << 62) | 0x77, 0x810: (1 << 63)}
    raw = bytearray(8 * 0x1000)
    for page, entry in entries.items():
        raw[page * 8:page * 8 + 8] = entry.to_bytes(8, "little")
    pagemap.write_bytes(raw)
    assert physical_pages(0x10000, 2, HUGEPAGE_SIZE, pagemap) == [0x12345000, 0x400000]
    assert physical_pages(0x10000, 1, pagemap=pagemap) == [0x12345000]
    with pytest.raises(pcie.PCIError, match="0x410000 is not present"):
        physical_pages(0x10000, 3, HUGEPAGE_SIZE, pagemap)
    with pytest.raises(pcie.PCIError, match="0x610000 is swapped out"):
        physical_pages(0x610000, 1, pagemap=pagemap)
    with pytest.raises(pcie.PCIError, match="hides physical frame numbers.*root"):
        physical_pages(0x810000, 1, pagemap=pagemap)
    with pytest.raises(pcie.PCIError, match="not page aligned"):
        physical_pages(0x10001, 1, pagemap=pagemap)


def test_pagemap_of_this_process():
    m = mmap.mmap(-1, 2 * 4096)
    m[0] = m[4096] = 1
    from pcie.hugepages import mapping_address
    addrs = physical_pages(mapping_address(m), 2)  # PFNs read as 0 without root: then it must say so
    assert all(a % 4096 == 0 and a > 0 for a in addrs)
    m.close()  # the address lookup left no export behind


def test_close_while_direct_views_are_held(fn):
    bar = fn.bar(0)
    view, piece = bar.direct(), bar.direct()[16:32]
    fn.close()  # the slice keeps the pages mapped, but the BAR and the view it handed out are closed
    with pytest.raises(pcie.PCIError, match=f"{ADDR} BAR0: used after the function was closed"):
        bar.read32(0)
    with pytest.raises(ValueError, match="released"):
        view[0] = 1
    piece[0] = 1
    piece.release()
