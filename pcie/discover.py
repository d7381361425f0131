"""PCI functions as Linux sysfs lists them, and the checks made before a real device is touched.

Every function takes the sysfs root (`/sys` on a real machine) so tests can build a tree in a tmp dir.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pcie.interface import PCIError

SYSFS = Path("/sys")
AMD_VENDOR_ID = 0x1002
DISPLAY_CLASS = 0x03  # PCI base class "display controller" (VGA 0x0300, 3D 0x0302, other 0x0380)

_ADDRESS = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$")


def normalize_address(address: str) -> str:
    """"03:00.0" or "0000:03:00.0" -> "0000:03:00.0" (domain:bus:device.function, as sysfs names it)."""
    m = _ADDRESS.match(address.strip().lower())
    if not m:
        raise PCIError(f"{address!r} is not a PCI address; expected DDDD:BB:DD.F or BB:DD.F, "
                       f"as `lspci -D` prints them")
    domain, bus, dev, fn = m.groups()
    return f"{domain or '0000'}:{bus}:{dev}.{fn}"


def device_dir(address: str, root: Path = SYSFS) -> Path:
    path = Path(root) / "bus/pci/devices" / normalize_address(address)
    if not path.is_dir():
        raise PCIError(f"{path.name}: no such PCI function under {path.parent} (`lspci -D` lists the "
                       f"functions present)")
    return path


@dataclass(frozen=True)
class FunctionInfo:
    address: str
    vendor_id: int
    device_id: int
    class_code: int        # 24 bits: base class, subclass, programming interface
    revision: int
    driver: str | None     # the kernel driver bound to it, None when unbound
    iommu_group: int | None

    @property
    def is_display(self) -> bool:
        return self.class_code >> 16 == DISPLAY_CLASS

    def __str__(self) -> str:
        return (f"{self.address} {self.vendor_id:04x}:{self.device_id:04x} rev {self.revision:02x} "
                f"class {self.class_code:06x} driver {self.driver or '(none)'}")


def _hex_attr(path: Path, name: str) -> int:
    try:
        return int((path / name).read_text().strip(), 16)
    except (OSError, ValueError) as e:
        raise PCIError(f"{path.name}: cannot read {path / name}: {e}") from None


def _link_name(path: Path) -> str | None:
    return os.path.basename(os.readlink(path)) if path.is_symlink() else None


def read_info(address: str, root: Path = SYSFS) -> FunctionInfo:
    path = device_dir(address, root)
    group = _link_name(path / "iommu_group")
    return FunctionInfo(address=path.name, vendor_id=_hex_attr(path, "vendor"),
                        device_id=_hex_attr(path, "device"), class_code=_hex_attr(path, "class"),
                        revision=_hex_attr(path, "revision"), driver=_link_name(path / "driver"),
                        iommu_group=int(group) if group is not None else None)


def list_functions(root: Path = SYSFS) -> list[FunctionInfo]:
    devices = Path(root) / "bus/pci/devices"
    if not devices.is_dir():
        raise PCIError(f"{devices} does not exist: is sysfs mounted (this needs Linux)?")
    return [read_info(p.name, root) for p in sorted(devices.iterdir())]


def find_amd_gpus(root: Path = SYSFS) -> list[FunctionInfo]:
    """AMD display-class functions (a GPU's HDMI audio function is class 0x04 and is left out)."""
    return [f for f in list_functions(root) if f.vendor_id == AMD_VENDOR_ID and f.is_display]


def pick_amd_gpu(root: Path = SYSFS) -> FunctionInfo:
    """The first AMD GPU no kernel driver programs: unbound, or bound to vfio-pci (`driver` says which
    provider fits: sysfs for unbound, vfio for vfio-pci)."""
    gpus = find_amd_gpus(root)
    for gpu in gpus:
        if gpu.driver in (None, "vfio-pci"):
            return gpu
    if not gpus:
        raise PCIError("no AMD GPU found (no display-class function with vendor 0x1002 in "
                       f"{Path(root) / 'bus/pci/devices'})")
    raise PCIError("every AMD GPU is driven by a kernel driver: " + "; ".join(
        f"{g.address} by {g.driver} (unbind: `{unbind_command(g.address, g.driver)}`)" for g in gpus))


def unbind_command(address: str, driver: str) -> str:
    return f"echo {address} > /sys/bus/pci/drivers/{driver}/unbind"


def check_not_bound(address: str, root: Path = SYSFS) -> None:
    """Raises when a kernel driver owns the function: two drivers programming one GPU corrupt it."""
    info = read_info(address, root)
    if info.driver is None:
        return
    hint = unbind_command(info.address, info.driver)
    if info.driver == "amdgpu":
        raise PCIError(f"{info.address} is bound to amdgpu; unbind it first (as root): `{hint}`, or "
                       f"unload amdgpu for every GPU with `modprobe -r amdgpu`")
    if info.driver == "vfio-pci":
        raise PCIError(f"{info.address} is bound to vfio-pci: open it through the vfio provider, or "
                       f"unbind it first (as root): `{hint}`")
    raise PCIError(f"{info.address} is bound to the kernel driver {info.driver}; unbind it first "
                   f"(as root): `{hint}`")
