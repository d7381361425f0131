"""A fake sysfs tree: regular files stand in for config and resourceN (mapping a regular file works
like mapping a BAR), symlinks for driver and iommu_group, as Linux lays them out."""
import os
from pathlib import Path

import pytest

NAVI31 = (0x1002, 0x744C)
MEM, PREFETCH, MEM64, IO = 0x200, 0x2000, 0x100000, 0x100


class FakeSysfs:
    def __init__(self, root: Path):
        self.root = root
        (root / "bus/pci/devices").mkdir(parents=True)
        (root / "bus/pci/drivers").mkdir(parents=True)

    def add(self, address="0000:03:00.0", ids=NAVI31, class_code=0x030000, revision=0xC8,
            bars=None, driver=None, iommu=None, reset=True, config_size=4096):
        """bars: {index: (size, flags)}; iommu: (group number, domain type) or None."""
        if bars is None:
            bars = {0: (1 << 20, MEM | PREFETCH | MEM64), 2: (1 << 16, MEM | PREFETCH | MEM64),
                    4: (256, IO), 5: (1 << 16, MEM)}
        d = self.root / "bus/pci/devices" / address
        d.mkdir()
        (d / "vendor").write_text(f"{ids[0]:#06x}\n")
        (d / "device").write_text(f"{ids[1]:#06x}\n")
        (d / "class").write_text(f"{class_code:#08x}\n")
        (d / "revision").write_text(f"{revision:#04x}\n")
        config = bytearray(config_size)
        config[0:4] = (ids[0] | ids[1] << 16).to_bytes(4, "little")
        config[8] = revision
        config[9:12] = class_code.to_bytes(3, "little")
        (d / "config").write_bytes(config)
        lines = []
        for i in range(13):
            size, flags = bars.get(i, (0, 0))
            start = 0xF000_0000 + i * (1 << 28) if size else 0
            lines.append(f"{start:#018x} {start + size - 1 if size else 0:#018x} {flags:#018x}")
            if size and flags & MEM:
                (d / f"resource{i}").write_bytes(bytes(size))
                if flags & PREFETCH:
                    (d / f"resource{i}_wc").write_bytes(bytes(size))
        (d / "resource").write_text("\n".join(lines) + "\n")
        if reset:
            (d / "reset").write_text("")
        if driver:
            drv = self.root / "bus/pci/drivers" / driver
            drv.mkdir(exist_ok=True)
            (d / "driver").symlink_to(os.path.relpath(drv, d))
        if iommu:
            group, kind = iommu
            g = self.root / "kernel/iommu_groups" / str(group)
            (g / "devices").mkdir(parents=True, exist_ok=True)
            (g / "type").write_text(kind + "\n")
            (g / "devices" / address).symlink_to(d)
            (d / "iommu_group").symlink_to(os.path.relpath(g, d))
        return d


@pytest.fixture
def fake_sysfs(tmp_path) -> FakeSysfs:
    return FakeSysfs(tmp_path / "sys")


@pytest.fixture
def lock_dir(tmp_path) -> Path:
    d = tmp_path / "locks"
    d.mkdir()
    return d
