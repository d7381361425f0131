"""The GPUs the AM driver supports, with the IP versions their firmware and register tables follow.

IP versions are those the chips' IP discovery tables report (and upstream amdgpu's firmware names use).
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Chip:
    name: str
    products: str
    gfx_target: str
    pci_device_ids: tuple[int, ...]
    ip: dict  # block -> (major, minor, revision)

    def ip_tag(self, block: str) -> str:
        """'gc' -> '11_0_0': the version spelling of upstream firmware and header names."""
        return "_".join(map(str, self.ip[block]))


NAVI31 = Chip("navi31", "Radeon RX 7900 XTX/XT/GRE, Radeon PRO W7900", "gfx1100", (0x744C, 0x7448),
              {"gc": (11, 0, 0), "mp0": (13, 0, 0), "mp1": (13, 0, 0), "sdma": (6, 0, 0), "mmhub": (3, 0, 0),
               "nbio": (4, 3, 0), "osssys": (6, 0, 0), "hdp": (6, 0, 0)})
NAVI33 = Chip("navi33", "Radeon RX 7600/7600 XT, RX 7600M/7600M XT/7700S", "gfx1102", (0x7480, 0x7483),
              {"gc": (11, 0, 2), "mp0": (13, 0, 7), "mp1": (13, 0, 7), "sdma": (6, 0, 2), "mmhub": (3, 0, 2),
               "nbio": (4, 3, 0), "osssys": (6, 0, 0), "hdp": (6, 0, 0)})

SUPPORTED = (NAVI31, NAVI33)
AMD_VENDOR_ID = 0x1002


def by_name(name: str) -> Chip:
    for chip in SUPPORTED:
        if chip.name == name:
            return chip
    raise KeyError(f"unknown chip {name!r}; supported: {', '.join(c.name for c in SUPPORTED)}")


def by_pci_id(device_id: int) -> Chip | None:
    return next((c for c in SUPPORTED if device_id in c.pci_device_ids), None)
