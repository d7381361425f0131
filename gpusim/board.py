"""A Navi31/Navi33 board: the device core with its config space and every modeled block, at power-on.

Blocks built in parallel by other models (PSP, GMC, IH) join through BLOCKS: a module listed there that
is not present yet is skipped, so the board is usable while they are written.
"""
from __future__ import annotations

import importlib

from gpusim import discovery
from gpusim.device import Block, SimGPU
from gpusim.vbios import DEFAULT_FW_RESERVED_KB, VBIOS
from gpusim.pci import DOORBELL_BAR_MAX, DOORBELL_BAR_SIZE, REBAR_MIN, ConfigSpace, pow2_at_least

VRAM_SIZE = {"navi31": 24 << 30, "navi33": 8 << 30}   # RX 7900 XTX, RX 7600
SMALL_BAR = REBAR_MIN                                 # 256 MiB, what a host without resizable BAR maps
DRIVER_SCRATCH = tuple(f"BIF_BX0_DRIVER_SCRATCH_{i}" for i in range(16))

# (module, class); order matters only for attach/reset order.
BLOCKS = [
    ("gpusim.nbio", "NBIO"),
    ("gpusim.hdp", "HDP"),
    ("gpusim.smu", "SMU"),
    ("gpusim.thm", "THMBlock"),
    ("gpusim.ih", "IH"),
    ("gpusim.gmc", "GMC"),
    ("gpusim.gl2", "GL2"),
    ("gpusim.psp", "PSP"),
    ("gpusim.gfx", "GFX"),
    ("gpusim.cp", "CP"),
    ("gpusim.sq", "SQ"),
    ("gpusim.sdma", "SDMA"),
]
_PARALLEL = {"gpusim.ih", "gpusim.gmc", "gpusim.psp"}


def block_names() -> set[str]:
    """The blocks build() gives a device (a state file saved by an older simulator may lack some)."""
    names = {DiscoveryTMR.name, VBIOS.name}
    for mod, cls in BLOCKS:
        try:
            names.add(getattr(importlib.import_module(mod), cls).name)
        except ModuleNotFoundError as e:
            if not (mod in _PARALLEL and e.name == mod):
                raise
    return names


class DiscoveryTMR(Block):
    """What the boot firmware leaves at power-on: the IP discovery binary at VRAM end - 64 KiB."""
    name = "DISCOVERY"

    def reset(self) -> None:
        binary = discovery.build(self.dev.layout)
        self.dev.vram.write(self.dev.vram.size - discovery.TMR_OFFSET, binary)


def build(chip: str = "navi31", vram_size: int | None = None, small_bar: bool = False,
          slot: int = 0, harvest: tuple = (), scpm: bool = True,
          driver_scratch_survives_reset: bool = False, fw_reserved_kb: int | None = None,
          vbios_rom_offset: int = 0) -> SimGPU:
    """harvest: (hw_id, instance) pairs the discovery harvest table lists as fused off (a cut-down
    product, e.g. one VCN instance). scpm: the board's PMFW runs with secure power management (retail
    Navi31 boards do; gpusim.smu), which the PSP runtime database reports. driver_scratch_survives_reset:
    whether BIF_BX0_DRIVER_SCRATCH_* keep their values across a mode1 reset (not documented either way; both
    are modeled so that the driver is right in both: see mode1_reset). fw_reserved_kb: the VBIOS firmwareinfo's
    fw_reserved_size_in_kb, the VRAM the firmware keeps at the top (gpusim.vbios; None: its default);
    vbios_rom_offset: where the image starts in the ROM (REGS_ROM_OFFSET_CTRL.ROM_OFFSET, 128 KiB units)."""
    vram_size = vram_size or VRAM_SIZE[chip]
    if vram_size % (1 << 20) or vram_size < 2 * SMALL_BAR:
        raise ValueError(f"{chip}: VRAM size {vram_size:#x} must be a multiple of 1 MiB and at least "
                         f"{2 * SMALL_BAR >> 20} MiB")
    # A host with resizable BAR grows both (the BIOS's choice); without, the reset sizes stay.
    bar0, bar2 = (SMALL_BAR, DOORBELL_BAR_SIZE) if small_bar else (pow2_at_least(vram_size), DOORBELL_BAR_MAX)
    dev = SimGPU(chip, vram_size, tuple(harvest))
    dev.scpm = bool(scpm)
    dev.driver_scratch_survives_reset = bool(driver_scratch_survives_reset)
    dev.pci = ConfigSpace(chip, vram_size, bar0, slot, bar2)
    dev.add(DiscoveryTMR(dev))
    dev.add(VBIOS(dev, DEFAULT_FW_RESERVED_KB if fw_reserved_kb is None else fw_reserved_kb, vbios_rom_offset))
    for mod, cls in BLOCKS:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if mod in _PARALLEL and e.name == mod:
                continue
            raise
        dev.add(getattr(m, cls)(dev))
    return dev


def mode1_reset(dev: SimGPU) -> None:
    """The whole ASIC back to power-on, as the SMU's Mode1Reset does: every block's registers and state,
    and the bus interface's config space (gpusim.pci.ConfigSpace.reset: no memory decode, no bus mastering,
    BARs unassigned, resizable BARs at their default sizes; amdgpu_device_mode1_reset restores the saved
    config space afterwards). VRAM contents are not guaranteed by hardware; the discovery binary is written
    again by the boot firmware. Whether BIF_BX0_DRIVER_SCRATCH_* survive is not public (assumption): the
    board's driver_scratch_survives_reset setting decides; every GC register (SCRATCH_REG*, the VM fault
    status) is reset with the ASIC either way."""
    with dev.lock:
        kept = {}
        if getattr(dev, "driver_scratch_survives_reset", False):
            kept = {n: dev.get("NBIO", n) for n in DRIVER_SCRATCH}
        dev.pci.reset()
        dev.power_on_reset()
        for n, v in kept.items():
            dev.set("NBIO", n, v)
