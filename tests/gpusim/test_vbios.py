"""The VBIOS ROM behind SMUIO ROM_INDEX/ROM_DATA and the firmware-reserved top of VRAM (gpusim/vbios.py)."""
import pytest

from amdrv import structs
from amdrv.autogen import atomfirmware as A
from gpusim import board
from gpusim.gmc import FB_BASE, HubRefused
from gpusim.vbios import ATOM_ATI_MAGIC


def rom_read(dev, at, n_dwords):
    """amdgpu_soc15_read_bios_from_rom: one ROM_INDEX write, then ROM_DATA reads."""
    dev.regs.write(dev.reg_addr("SMUIO", "ROM_INDEX"), at)
    return b"".join(dev.regs.read(dev.reg_addr("SMUIO", "ROM_DATA")).to_bytes(4, "little") for _ in range(n_dwords))


@pytest.mark.parametrize("rom_offset", [0, 3])
def test_the_rom_reads_as_amdgpu_walks_it(rom_offset):
    """The image at REGS_ROM_OFFSET_CTRL.ROM_OFFSET << 17, the index moving on by 4 a read; check_atom_bios's
    signature and ATOM magic, amdgpu_atom_parse's pointers, firmwareinfo v3.4 with the board's size."""
    dev = board.build("navi31", vram_size=1 << 30, fw_reserved_kb=12 << 10, vbios_rom_offset=rom_offset)
    base = dev.get("NBIO", "REGS_ROM_OFFSET_CTRL") << 17
    assert base == rom_offset << 17
    img = rom_read(dev, base, 0x400 // 4)
    assert img[:2] == b"\x55\xaa" and img[2] << 9 == len(img)
    assert img[A.ATOM_ATI_MAGIC_PTR:A.ATOM_ATI_MAGIC_PTR + 10] == ATOM_ATI_MAGIC
    hdr = structs.get(A, "atom_rom_header_v2_2").unpack_from(img, int.from_bytes(img[0x48:0x4A], "little"))
    assert bytes(hdr.atom_bios_string) == b"ATOM"
    mdt = structs.get(A, "atom_master_data_table_v2_1").unpack_from(img, hdr.masterdatatable_offset)
    fwi = structs.get(A, "atom_firmware_info_v3_4").unpack_from(img, mdt.listOfdatatables.firmwareinfo)
    assert (fwi.table_header.format_revision, fwi.table_header.content_revision) == (3, 4)
    assert fwi.fw_reserved_size_in_kb == 12 << 10
    # past the image, and below the ROM offset: erased flash
    assert rom_read(dev, base + 0x400, 1) == b"\xff" * 4
    if rom_offset:
        assert rom_read(dev, 0, 1) == b"\xff" * 4
    # without auto-increment every read returns the same dword
    cntl = dev.table("SMUIO")["ROM_CNTL"]
    dev.regs.write(dev.reg_addr("SMUIO", "ROM_CNTL"), cntl.encode(ROM_INDEX_ADDRESS_AUTO_INCREASE=0))
    assert rom_read(dev, base, 2) == img[:4] * 2


def test_host_writes_into_the_reserved_top_never_reach_memory():
    """Assumption (gpusim/vbios.py): the HDP drops host writes into the firmware-reserved region at the
    flush, and says so; reads are served (the discovery binary is read there); below it writes land."""
    dev = board.build("navi31", vram_size=1 << 30, fw_reserved_kb=4 << 10)
    top = dev.vram.size
    discovery = dev.vram.read(top - (64 << 10), 16)
    assert dev.vram.host_read(top - (64 << 10), 16) == discovery != bytes(16)
    dev.vram.host_write(top - (3 << 20), b"\x11" * 8)      # inside the 4 MiB
    dev.vram.host_write(top - (5 << 20), b"\x22" * 8)      # below it
    dev.blocks["HDP"].flush("test")
    assert dev.vram.read(top - (3 << 20), 8) == bytes(8)
    assert dev.vram.host_read(top - (3 << 20), 8) == bytes(8)
    assert dev.vram.read(top - (5 << 20), 8) == b"\x22" * 8
    assert "firmware-reserved" in str(dev.errors[-1])


def test_engine_writes_into_the_reserved_top_are_refused():
    """Assumption (gpusim/vbios.py): a hub write there stops the engine (HubRefused); below it it lands."""
    dev = board.build("navi31", vram_size=1 << 30, fw_reserved_kb=4 << 10)
    gmc, top = dev.blocks["GMC"], dev.vram.size
    gmc.mc_write(FB_BASE + top - (5 << 20), b"\x33" * 4)        # power-on: every VMID 0 address physical
    assert dev.vram.read(top - (5 << 20), 4) == b"\x33" * 4
    with pytest.raises(HubRefused, match="firmware-reserved"):
        gmc.mc_write(FB_BASE + top - (3 << 20), b"\x44" * 4)
    assert dev.vram.read(top - (3 << 20), 4) == bytes(4)
    assert gmc.mc_read(FB_BASE + top - (3 << 20), 4) == bytes(4)   # reads are served
