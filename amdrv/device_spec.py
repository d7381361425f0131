"""AM device strings and the pcie provider each one opens through.

    am                   the first AMD GPU no kernel driver programs (unbound, or bound to vfio-pci)
    am:sim               a simulated Navi31
    am:sim:navi33        a simulated Navi33 (any chip of amdrv.chips)
    am:0000:03:00.0      the GPU at that PCI address (am:03:00.0 means domain 0000)

A simulated GPU is persisted: every entry point (the demo, `python -m amdrv info`, hcq.open, the Tensor
API) opens `am:sim[:CHIP]` with the state file `sim_state_path(CHIP)` and `am:sim[:CHIP]:usb` with
`sim_state_path(CHIP, usb=True)`, so the same string means the same GPU in every process, found as the
last process left it (warm after a clean fini), as a real GPU stays powered between driver runs. The
provider locks the file while a process drives it (pcie.lock).

A real device opens through "vfio" when it is bound to vfio-pci and through "sysfs" when it is unbound;
one bound to another kernel driver (amdgpu) is refused with the command that unbinds it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from amdrv import chips
from pcie.usb import transport as usb_transport
from hcq import cache as hcq_cache
from pcie import PCIError, PCIFunction, open_function
from pcie import discover

FORMS = ("am, am:sim, am:sim:<chip>, am:sim:usb, am:sim:<chip>:usb, am:usb, am:usb:<BUS-ADDR>, "
         "am:<pci address> (e.g. am:0000:03:00.0 or am:03:00.0)")


class DeviceSpecError(PCIError, ValueError):
    """A device string that is not one of the AM forms."""


@dataclass(frozen=True)
class DeviceSpec:
    """A resolved device string: `open()` is `pcie.open_function(provider, *args, **options)`."""
    text: str
    provider: str
    args: tuple
    options: dict = field(default_factory=dict, compare=False)

    def open(self, **kwargs) -> PCIFunction:
        return open_function(self.provider, *self.args, **{**self.options, **kwargs})

    @property
    def persistent(self) -> bool:
        """Whether the GPU outlives this process as the process leaves it: a real one stays powered; a
        simulated one only when it is kept in a state file."""
        if self.provider == "sim":
            return bool(self.options.get("state"))
        if self.args and str(self.args[0]).startswith("sim"):
            return bool(self.options.get("sim", {}).get("state"))
        return True

    def __str__(self) -> str:
        return f"{self.text} ({self.provider}: {', '.join(map(str, self.args))})"


def cache_root() -> Path:
    """$DRIVERLESS_CACHE, else $XDG_CACHE_HOME/driverless, else ~/.cache/driverless (hcq.cache)."""
    return hcq_cache.root()


def sim_state_path(chip: str = chips.NAVI31.name, usb: bool = False) -> Path:
    """The file that keeps the simulated GPU `am:sim[:CHIP][:usb]` between processes (its directory is
    created): CACHE/sim/CHIP.state, or CHIP-usb.state for the one behind the simulated USB bridge."""
    path = cache_root() / "sim" / f"{chip.lower()}{'-usb' if usb else ''}.state"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _kept(chip: str, usb: bool) -> dict:
    """{"state": path} for a simulated GPU, or {} when the cache directory cannot be created (a read-only
    home): the GPU then lives in this process only, and DeviceSpec.persistent says so."""
    try:
        return {"state": str(sim_state_path(chip, usb))}
    except OSError:
        return {}


def parse(text: str, sysfs: Path = discover.SYSFS) -> DeviceSpec:
    """Resolves an AM device string. Simulator strings need nothing from the machine; real devices are
    looked up in sysfs (which kernel driver, if any, holds them)."""
    spec = text.strip()
    head, sep, rest = spec.partition(":")
    if head.lower() != "am":
        raise DeviceSpecError(f"{text!r} is not an AM device string; expected {FORMS}")
    if not sep:
        return _provider_for(spec, discover.pick_amd_gpu(sysfs), sysfs)
    if not rest:
        raise DeviceSpecError(f"{text!r}: nothing after 'am:'; expected {FORMS}")
    kind, colon, chip = rest.partition(":")
    if kind.lower() == "usb":
        return DeviceSpec(spec, *usb_transport.parse_device_string(spec))
    if kind.lower() == "sim":
        parts = chip.split(":") if colon else []
        via = parts.pop() if parts and parts[-1].lower() == "usb" else ""
        if len(parts) > 1:
            raise DeviceSpecError(f"{text!r}: a simulated GPU is reached directly or through 'usb'; expected {FORMS}")
        chip = parts[0] if parts else chips.NAVI31.name
        name = chip.lower()
        if name not in {c.name for c in chips.SUPPORTED}:
            raise DeviceSpecError(f"{text!r}: no simulated chip {chip!r}; supported: "
                                  f"{', '.join(c.name for c in chips.SUPPORTED)}")
        state = _kept(name, bool(via))
        if via:  # the simulated ASM24xx bridge in front of the simulated GPU
            return DeviceSpec(spec, "usb", (f"sim:{name}",), {"sim": state} if state else {})
        return DeviceSpec(spec, "sim", (name,), state)
    try:
        address = discover.normalize_address(rest)
    except PCIError as e:
        raise DeviceSpecError(f"{text!r}: {e}; expected {FORMS}") from None
    return _provider_for(spec, discover.read_info(address, sysfs), sysfs)


def pick_real_gpu(sysfs: Path = discover.SYSFS, usb_backend=None) -> tuple[str | None, str]:
    """(device string, "") of the first AMD GPU the AM driver can take, PCIe before USB: an AM-supported
    GPU that is unbound or on vfio-pci (`am:ADDRESS`), else the first ASM24xx USB-to-PCIe bridge
    (`am:usb:BUS-ADDR`; what sits behind it is found when it opens). Else (None, one line saying why no
    real GPU was chosen), e.g. "0000:03:00.0 is bound to amdgpu; no USB-to-PCIe bridge"."""
    why = []
    try:
        gpus = discover.find_amd_gpus(sysfs)
    except (OSError, PCIError) as e:   # no sysfs (not Linux), unreadable entries
        gpus = None
        why.append(f"PCIe not searched ({e})")
    if gpus == []:
        why.append("no AMD GPU on PCIe")
    for gpu in gpus or []:
        if chips.by_pci_id(gpu.device_id) is None:
            why.append(f"{gpu.address} ({gpu.vendor_id:04x}:{gpu.device_id:04x}) is not a chip AM supports")
        elif gpu.driver not in (None, "vfio-pci"):
            why.append(f"{gpu.address} is bound to {gpu.driver}")
        else:
            return f"am:{gpu.address}", ""
    try:
        from pcie.usb import link    # pyusb: imported only when USB is searched
        bridges = link.find_bridges(usb_backend)
    except Exception as e:  # no libusb (usb.core.NoBackendError), no permission to list: USB is not there
        bridges = None
        why.append(f"USB not searched ({e})")
    if bridges:
        return f"am:usb:{link.name_of(bridges[0])}", ""
    if bridges == []:
        why.append("no USB-to-PCIe bridge")
    if why == ["no AMD GPU on PCIe", "no USB-to-PCIe bridge"]:
        return None, "no AMD GPU on PCIe or USB"
    return None, "; ".join(why)


def _provider_for(text: str, info: discover.FunctionInfo, sysfs: Path) -> DeviceSpec:
    if info.vendor_id != chips.AMD_VENDOR_ID or not info.is_display:
        raise PCIError(f"{info.address} is not an AMD GPU ({info}); `lspci -D -d 1002:` lists AMD's")
    if chips.by_pci_id(info.device_id) is None:
        supported = "; ".join(f"{c.name} ({', '.join(f'{d:04x}' for d in c.pci_device_ids)})"
                              for c in chips.SUPPORTED)
        raise PCIError(f"{info.address}: AMD GPU {info.vendor_id:04x}:{info.device_id:04x} is not one the AM "
                       f"driver supports: {supported}")
    if info.driver == "vfio-pci":
        return DeviceSpec(text, "vfio", (info.address,))
    discover.check_not_bound(info.address, sysfs)  # names the unbind command when a driver holds it
    return DeviceSpec(text, "sysfs", (info.address,))
