"""AM device strings: simulator forms, PCI addresses resolved against a fake sysfs tree, and errors."""
import os
from pathlib import Path

import pytest

from amdrv.device_spec import DeviceSpec, DeviceSpecError, parse
from pcie import PCIError


def add(root: Path, address: str, ids=(0x1002, 0x744C), class_code=0x030000, driver=None):
    d = root / "bus/pci/devices" / address
    d.mkdir(parents=True)
    for name, value in (("vendor", ids[0]), ("device", ids[1]), ("class", class_code), ("revision", 0xC8)):
        (d / name).write_text(f"{value:#x}\n")
    if driver:
        drv = root / "bus/pci/drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(os.path.relpath(drv, d))


@pytest.fixture
def sysfs(tmp_path):
    (tmp_path / "bus/pci/devices").mkdir(parents=True)
    add(tmp_path, "0000:03:00.0")                                   # unbound Navi31
    add(tmp_path, "0000:03:00.1", ids=(0x1002, 0xAB30), class_code=0x040300)  # its HDMI audio
    add(tmp_path, "0000:07:00.0", ids=(0x1002, 0x7480), driver="vfio-pci")    # Navi33 for VFIO
    add(tmp_path, "0000:0a:00.0", driver="amdgpu")
    add(tmp_path, "0001:0b:00.0", ids=(0x1002, 0x73BF))             # Navi21: not an AM chip
    add(tmp_path, "0000:00:02.0", ids=(0x8086, 0x4680))             # someone else's GPU
    return tmp_path


@pytest.mark.parametrize("text,args", [
    ("am:sim", ("navi31",)), ("am:sim:navi33", ("navi33",)), ("am:sim:navi31", ("navi31",)),
    ("AM:SIM:Navi33", ("navi33",)), ("  am:sim ", ("navi31",)),
])
def test_sim(text, args, tmp_path):
    spec = parse(text, sysfs=tmp_path / "nothing")  # the simulator needs nothing from the machine
    assert (spec.provider, spec.args) == ("sim", args) and isinstance(spec, DeviceSpec)


@pytest.mark.parametrize("text,provider,address", [
    ("am:0000:03:00.0", "sysfs", "0000:03:00.0"),
    ("am:03:00.0", "sysfs", "0000:03:00.0"),
    ("am:0000:07:00.0", "vfio", "0000:07:00.0"),
    ("am:07:00.0", "vfio", "0000:07:00.0"),
])
def test_pci_address(sysfs, text, provider, address):
    spec = parse(text, sysfs=sysfs)
    assert (spec.provider, spec.args) == (provider, (address,))


def test_am_picks_the_first_gpu_no_kernel_driver_holds(sysfs):
    assert (parse("am", sysfs=sysfs).provider, parse("am", sysfs=sysfs).args) == ("sysfs", ("0000:03:00.0",))
    (sysfs / "bus/pci/devices/0000:03:00.0/driver").symlink_to(sysfs / "bus/pci/drivers/amdgpu")
    assert parse("am", sysfs=sysfs).args == ("0000:07:00.0",) and parse("am", sysfs=sysfs).provider == "vfio"


def test_am_with_every_gpu_bound_names_the_unbind_command(tmp_path):
    add(tmp_path, "0000:03:00.0", driver="amdgpu")
    with pytest.raises(PCIError, match=r"0000:03:00.0 by amdgpu \(unbind: `echo 0000:03:00.0 > "
                                       r"/sys/bus/pci/drivers/amdgpu/unbind`\)"):
        parse("am", sysfs=tmp_path)


def test_amdgpu_bound_address_is_refused_with_the_unbind_command(sysfs):
    with pytest.raises(PCIError, match=r"bound to amdgpu; unbind it first .*amdgpu/unbind"):
        parse("am:0a:00.0", sysfs=sysfs)


@pytest.mark.parametrize("text,match", [
    ("am:00:02.0", "is not an AMD GPU"),
    ("am:03:00.1", "is not an AMD GPU"),
    ("am:0001:0b:00.0", r"1002:73bf is not one the AM driver supports: navi31 \(744c, 7448\)"),
    ("am:05:00.0", "no such PCI function"),
])
def test_real_device_errors(sysfs, text, match):
    with pytest.raises(PCIError, match=match):
        parse(text, sysfs=sysfs)


@pytest.mark.parametrize("text,match", [
    ("", "is not an AM device string"),
    ("nv:0", "is not an AM device string"),
    ("amd:sim", "is not an AM device string"),
    ("am:", "nothing after 'am:'"),
    ("am:sim:navi21", r"no simulated chip 'navi21'; supported: navi31, navi33"),
    ("am:sim:", r"no simulated chip ''"),
    ("am:3:0.0", "is not a PCI address"),
    ("am:0000:03:00.8", "is not a PCI address"),
    ("am:0000:03:20.0", "is not a PCI address"),
    ("am:gpu0", "is not a PCI address"),
])
def test_malformed(text, match, tmp_path):
    with pytest.raises(DeviceSpecError, match=match):
        parse(text, sysfs=tmp_path)
    assert issubclass(DeviceSpecError, PCIError)


def test_sim_usb_strings_open_the_simulated_bridge():
    """am:sim:usb reaches a simulated GPU through the simulated ASM24xx bridge (named backend)."""
    spec = parse("am:sim:navi33:usb")
    assert (spec.provider, spec.args) == ("usb", ("sim:navi33",))
    fn = spec.open()
    try:
        assert (fn.vendor_id, fn.device_id) == (0x1002, 0x7480)
        assert fn.counters.round_trips > 0  # every access was a USB transaction
    finally:
        fn.close()


# --- the default device: a real GPU on PCIe, else behind a USB bridge, else why none (issue 12) ---------
def _fake_function(root, address, ids=(0x1002, 0x744C), class_code=0x030000, driver=None):
    d = root / "bus/pci/devices" / address
    d.mkdir(parents=True)
    for name, value in (("vendor", ids[0]), ("device", ids[1]), ("class", class_code), ("revision", 0xC8)):
        (d / name).write_text(f"{value:#x}\n")
    if driver:
        (root / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(root / "bus/pci/drivers" / driver)


class _Bridge:
    bus, address = 2, 5


@pytest.fixture
def usb_listing(monkeypatch):
    """Sets what the USB search finds: a list of bridges, or an exception to raise."""
    from pcie.usb import link
    found = {"bridges": []}

    def find_bridges(backend=None):
        if isinstance(found["bridges"], Exception):
            raise found["bridges"]
        return found["bridges"]
    monkeypatch.setattr(link, "find_bridges", find_bridges)
    return found


def test_an_unbound_pcie_gpu_is_picked_before_a_usb_bridge(tmp_path, usb_listing):
    from amdrv.device_spec import pick_real_gpu
    _fake_function(tmp_path, "0000:03:00.0", driver="amdgpu")
    _fake_function(tmp_path, "0000:03:00.1", ids=(0x1002, 0xAB30), class_code=0x040300)   # its HDMI audio
    _fake_function(tmp_path, "0000:08:00.0")
    usb_listing["bridges"] = [_Bridge()]
    assert pick_real_gpu(tmp_path) == ("am:0000:08:00.0", "")


def test_a_usb_bridge_is_picked_when_every_pcie_gpu_is_bound(tmp_path, usb_listing):
    from amdrv.device_spec import pick_real_gpu
    _fake_function(tmp_path, "0000:03:00.0", driver="amdgpu")
    usb_listing["bridges"] = [_Bridge()]
    assert pick_real_gpu(tmp_path) == ("am:usb:2-5", "")


@pytest.mark.parametrize("functions, usb, why", [
    ([], [], "no AMD GPU on PCIe or USB"),
    ([("0000:03:00.0", (0x1002, 0x744C), "amdgpu")], [], "0000:03:00.0 is bound to amdgpu; no USB-to-PCIe bridge"),
    ([("0000:03:00.0", (0x1002, 0x73BF), None)], [],
     "0000:03:00.0 (1002:73bf) is not a chip AM supports; no USB-to-PCIe bridge"),
    ([], RuntimeError("No backend available"), "no AMD GPU on PCIe; USB not searched (No backend available)"),
])
def test_when_no_real_gpu_is_chosen_one_line_says_why(tmp_path, usb_listing, functions, usb, why):
    from amdrv.device_spec import pick_real_gpu
    (tmp_path / "bus/pci/devices").mkdir(parents=True)
    for address, ids, driver in functions:
        _fake_function(tmp_path, address, ids=ids, driver=driver)
    usb_listing["bridges"] = usb
    assert pick_real_gpu(tmp_path) == (None, why)


def test_no_sysfs_is_a_reason_not_an_error(tmp_path, usb_listing):
    from amdrv.device_spec import pick_real_gpu
    name, why = pick_real_gpu(tmp_path / "nothing")
    assert name is None and why.startswith("PCIe not searched (") and why.endswith("; no USB-to-PCIe bridge")
