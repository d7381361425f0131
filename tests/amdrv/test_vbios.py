"""The driver's VBIOS read (amdrv/vbios.py): the firmware-reserved size as amdgpu reads it, the boot region
below it, a clear error for a damaged ROM, and what a driver that ignores the ROM gets on a board whose
firmware keeps more than 64 KiB."""
import pytest

import pcie
from amdrv import structs, vbios
from amdrv.am import AMError, AMGPU
from amdrv.autogen import atomfirmware as A
from amdrv.device import AMDevice
from amdrv.discovery import DISCOVERY_TMR_OFFSET
from amdrv.vbios import VBIOSError
from gpusim.vbios import DATA_TABLE_AT, FIRMWARE_INFO_AT, ROM_HEADER_AT, build_image

BIG = 66 << 10   # KiB: over the whole boot region of a driver that reserves 64 KiB (66..2 MiB below the top)


@pytest.fixture
def firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def device(bus, **board):
    return AMDevice("am:sim", pcie.open_function("sim", "navi31", fresh=True, bus=bus, **board))


@pytest.mark.parametrize("kb, rom_offset", [(8 << 10, 0), (BIG, 5)])
def test_the_boot_region_goes_below_the_reserved_size_the_rom_declares(sim_bus, kb, rom_offset):
    dev = device(sim_bus, fw_reserved_kb=kb, vbios_rom_offset=rom_offset)
    try:
        assert dev.fw_reserved.size == kb << 10 and "fw_reserved_size_in_kb" in dev.fw_reserved.why
        assert dev.mm.boot_end <= dev.vram.size - (kb << 10) and dev.mm.boot_end % (2 << 20) == 0
        c = dev.pci.counters.snapshot()
        vbios.read_fw_reserved(dev)
        d = dev.pci.counters - c
        assert (d.mmio_reads, d.mmio_writes) == (11, 9)     # the cost docs/fidelity.md states
    finally:
        dev.close()


def damaged(**change):
    img = bytearray(build_image(BIG))
    for at, value in change.items():
        img[int(at[1:], 16)] = value
    return bytes(img)


FWI = FIRMWARE_INFO_AT
FW_KB_AT = FWI + structs.get(A, "atom_firmware_info_v3_4").offset("fw_reserved_size_in_kb")


@pytest.mark.parametrize("change, error", [
    ({"x0": 0x00}, "no ROM signature"),
    ({f"x{A.ATOM_ATI_MAGIC_PTR:x}": ord("x")}, "ATOM_ATI_MAGIC"),
    ({f"x{ROM_HEADER_AT + 4:x}": ord("X")}, "atom_bios_string"),
    ({f"x{A.ATOM_ROM_TABLE_PTR:x}": 0, f"x{A.ATOM_ROM_TABLE_PTR + 1:x}": 0}, "ATOM_ROM_TABLE_PTR"),
    ({f"x{ROM_HEADER_AT + 33:x}": 0x40}, "masterdatatable_offset"),
    ({f"x{FWI + 2:x}": 2}, "format revision 2"),
    ({f"x{FWI:x}": 8, f"x{FWI + 1:x}": 0}, "structuresize"),
])
def test_a_damaged_rom_is_refused_naming_the_field(sim_bus, change, error):
    fn = pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus)
    try:
        fn.dev.blocks["VBIOS"].image = damaged(**change)
        with pytest.raises(VBIOSError, match=error) as e:
            AMDevice("am:sim", fn)
        assert "am:sim" in str(e.value) and "VBIOS" in str(e.value)
    finally:
        fn.close()


@pytest.mark.parametrize("change, why", [
    ({f"x{FWI + 3:x}": 3}, "v3.3"),                                              # content revision 3
    ({f"x{FW_KB_AT + i:x}": 0 for i in range(4)}, "is 0"),                       # no size
    ({f"x{DATA_TABLE_AT + A.ATOM_DATA_FWI_PTR + i:x}": 0 for i in range(2)}, "no firmwareinfo"),
])
def test_upstreams_fallback_is_64_kib(sim_bus, change, why):
    """amdgpu_atomfirmware_get_fw_reserved_fb_size returns 0 (no table, content revision not 4, a size of 0):
    amdgpu_ttm_reserve_tmr reserves DISCOVERY_TMR_OFFSET."""
    fn = pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus)
    try:
        fn.dev.blocks["VBIOS"].image = damaged(**change)
        dev = AMDevice("am:sim", fn)
        assert dev.fw_reserved.size == DISCOVERY_TMR_OFFSET and why in dev.fw_reserved.why
    finally:
        fn.close()


def test_a_driver_that_ignores_the_vbios_fails_where_the_firmware_keeps_more(sim_bus, firmware):
    """A driver placing its boot region below a fixed 64 KiB (the old behaviour) on a board whose firmware keeps
    66 MiB puts its page tables, rings and TMR in the reserved region: its writes there never land,
    so the boot fails. Reading the VBIOS, the same board boots."""
    fixed = vbios.FirmwareReserved(DISCOVERY_TMR_OFFSET, "fixed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vbios, "read_fw_reserved", lambda dev: fixed)
        with pytest.raises(AMError):
            AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, fw_reserved_kb=BIG))
    assert any("firmware-reserved" in str(e) for e in sim_bus.slots[0].errors)
    gpu = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, fw_reserved_kb=BIG))
    try:
        assert gpu.boot_report.kind == "cold"
    finally:
        gpu.fini()
        gpu.dev.close()
