"""Enumeration over a fake sysfs tree and the bound-driver check."""
import pytest

from pcie import PCIError
from pcie.discover import (FunctionInfo, check_not_bound, find_amd_gpus, list_functions, normalize_address,
                           pick_amd_gpu, read_info)


@pytest.fixture
def machine(fake_sysfs):
    fake_sysfs.add("0000:00:02.0", ids=(0x8086, 0x4680), class_code=0x030000, driver="i915")  # iGPU
    fake_sysfs.add("0000:03:00.0", class_code=0x030000, iommu=(14, "DMA"))             # Navi31, unbound
    fake_sysfs.add("0000:03:00.1", ids=(0x1002, 0xAB30), class_code=0x040300, driver="snd_hda_intel",
                   iommu=(14, "DMA"))                                                  # its HDMI audio
    fake_sysfs.add("0000:0a:00.0", ids=(0x1002, 0x7480), class_code=0x038000, driver="amdgpu")  # Navi33
    fake_sysfs.add("0000:0b:00.0", ids=(0x1002, 0x1478), class_code=0x060400, driver="pcieport")  # AMD bridge
    return fake_sysfs.root


def test_list_functions(machine):
    fns = list_functions(machine)
    assert [f.address for f in fns] == ["0000:00:02.0", "0000:03:00.0", "0000:03:00.1", "0000:0a:00.0",
                                        "0000:0b:00.0"]
    audio = fns[2]
    assert audio == FunctionInfo("0000:03:00.1", 0x1002, 0xAB30, 0x040300, 0xC8, "snd_hda_intel", 14)
    assert not audio.is_display
    assert str(fns[1]) == "0000:03:00.0 1002:744c rev c8 class 030000 driver (none)"


def test_find_amd_gpus_keeps_display_class_amd_functions(machine):
    gpus = find_amd_gpus(machine)
    assert [(g.address, g.device_id, g.driver) for g in gpus] == [("0000:03:00.0", 0x744C, None),
                                                                  ("0000:0a:00.0", 0x7480, "amdgpu")]
    assert gpus[0].iommu_group == 14 and gpus[1].iommu_group is None


def test_no_amd_gpus(fake_sysfs):
    fake_sysfs.add("0000:00:02.0", ids=(0x8086, 0x4680))
    assert find_amd_gpus(fake_sysfs.root) == []


def test_missing_sysfs(tmp_path):
    with pytest.raises(PCIError, match="is sysfs mounted"):
        list_functions(tmp_path)


def test_check_not_bound(machine, fake_sysfs):
    check_not_bound("03:00.0", machine)
    with pytest.raises(PCIError) as e:
        check_not_bound("0000:0a:00.0", machine)
    assert str(e.value) == ("0000:0a:00.0 is bound to amdgpu; unbind it first (as root): "
                            "`echo 0000:0a:00.0 > /sys/bus/pci/drivers/amdgpu/unbind`, or unload amdgpu for "
                            "every GPU with `modprobe -r amdgpu`")
    with pytest.raises(PCIError, match="bound to the kernel driver i915; .*`echo 0000:00:02.0 > "
                                       "/sys/bus/pci/drivers/i915/unbind`"):
        check_not_bound("00:02.0", machine)
    fake_sysfs.add("0000:0c:00.0", driver="vfio-pci")
    with pytest.raises(PCIError, match="0000:0c:00.0 is bound to vfio-pci: open it through the vfio provider, "
                                       "or unbind it first \\(as root\\): `echo 0000:0c:00.0 > "
                                       "/sys/bus/pci/drivers/vfio-pci/unbind`"):
        check_not_bound("0c:00.0", machine)


@pytest.mark.parametrize("given,expected", [("03:00.0", "0000:03:00.0"), ("0000:0A:1f.7", "0000:0a:1f.7"),
                                            (" 0001:c1:00.0\n", "0001:c1:00.0")])
def test_normalize_address(given, expected):
    assert normalize_address(given) == expected


@pytest.mark.parametrize("bad", ["", "3:00.0", "03:00.8", "03:20.0", "0000:03:00", "sim0"])
def test_bad_addresses(bad):
    with pytest.raises(PCIError, match="is not a PCI address"):
        normalize_address(bad)


def test_unreadable_attribute_names_the_file(machine):
    (machine / "bus/pci/devices/0000:03:00.0/vendor").write_text("garbage\n")
    with pytest.raises(PCIError, match="0000:03:00.0: cannot read .*/vendor"):
        read_info("0000:03:00.0", machine)


def test_pick_amd_gpu(machine, fake_sysfs):
    assert pick_amd_gpu(machine).address == "0000:03:00.0"
    (machine / "bus/pci/devices/0000:03:00.0/driver").symlink_to(machine / "bus/pci/drivers/amdgpu")
    with pytest.raises(PCIError) as e:
        pick_amd_gpu(machine)
    assert str(e.value) == ("every AMD GPU is driven by a kernel driver: 0000:03:00.0 by amdgpu (unbind: "
                            "`echo 0000:03:00.0 > /sys/bus/pci/drivers/amdgpu/unbind`); 0000:0a:00.0 by amdgpu "
                            "(unbind: `echo 0000:0a:00.0 > /sys/bus/pci/drivers/amdgpu/unbind`)")
    fake_sysfs.add("0000:0c:00.0", class_code=0x030000, driver="vfio-pci")
    assert pick_amd_gpu(machine).driver == "vfio-pci"


def test_pick_amd_gpu_without_any(fake_sysfs):
    fake_sysfs.add("0000:00:02.0", ids=(0x8086, 0x4680))
    with pytest.raises(PCIError, match="no AMD GPU found"):
        pick_amd_gpu(fake_sysfs.root)
