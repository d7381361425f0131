"""The board's VBIOS ROM, read through SMUIO ROM_INDEX/ROM_DATA, and the VRAM its firmware reserves at the top.

Facts (drivers/gpu/drm/amd, linux 6.1):
- amdgpu_soc15_read_bios_from_rom: the byte address goes to ROM_INDEX (smuio_v13_0_6_get_rom_index_offset:
  SMUIO regROM_INDEX, the SMUIO 13.0.6 of SOC21), starting at nbio_v4_3_get_rom_offset's
  REGS_ROM_OFFSET_CTRL.ROM_OFFSET << 17; then every read of ROM_DATA returns the next dword, so the index
  moves on by 4 per read (ROM_CNTL.ROM_INDEX_ADDRESS_AUTO_INCREASE; amdgpu never sets it, so it is on from
  power-on: assumption). ROM_INDEX holds 25 bits (smuio_13_0_6_sh_mask.h). Flash past the image reads as
  erased, all ones (assumption).
- The image (amdgpu_bios.c check_atom_bios and amdgpu_read_bios_from_rom, atom.c amdgpu_atom_parse,
  atomfirmware.h, atom.h): 0x55 0xAA, byte 2 = image size / 512 (AMD_VBIOS_LENGTH); ATOM_ATI_MAGIC
  " 761295520" at ATOM_ATI_MAGIC_PTR (0x30); at ATOM_ROM_TABLE_PTR (0x48) the u16 offset of the
  atom_rom_header_v2_2 ("ATOM" at +4), whose masterdatatable_offset points at the
  atom_master_data_table_v2_1; its listOfdatatables.firmwareinfo points at atom_firmware_info_v3_4
  (table header format revision 3, content revision 4), whose fw_reserved_size_in_kb is what
  amdgpu_atomfirmware_get_fw_reserved_fb_size returns (<< 10). The layouts come from the generated
  amdrv.autogen.atomfirmware tables.
- amdgpu_ttm_reserve_tmr reserves [VRAM size - that size, VRAM size) for the firmware ("the TMR region
  reserved by PSP BL", the commit that added the field); the IP discovery binary (-64 KiB) and the PSP
  runtime database (-1 MiB) lie inside it, and upstream reads both there, so reads are served.

What hardware does to a write into the reserved region is not public (assumption, chosen so that a driver
that places its memory there fails visibly, as upstream never does): a host write (BAR0, its mapping,
MM_DATA) is dropped when the HDP flush would hand it to memory, and an engine's write through the hubs is
refused (HubRefused: the engine stops). Both are recorded in dev.errors. The firmware's own writes (the
models of the boot firmware and the PSP) are not host or hub writes and go on.
"""
from __future__ import annotations

from amdrv import structs
from amdrv.autogen import atomfirmware as A
from gpusim.device import Block

ATOM_ROM_MAGIC = b"ATOM"                 # atom.h ATOM_ROM_MAGIC at ATOM_ROM_MAGIC_PTR of the ROM header
ATOM_ATI_MAGIC = b" 761295520"           # atom.h ATOM_ATI_MAGIC (= amdgpu_bios.c AMD_VBIOS_SIGNATURE)
ROM_OFFSET_UNIT = 17                     # amdgpu_soc15_read_bios_from_rom: rom_offset << 17
ROM_INDEX_MASK = (1 << 25) - 1           # ROM_INDEX__ROM_INDEX_MASK
ERASED = 0xFFFFFFFF
# Where the tables sit in the simulated image (any place the pointers name would do; 4-byte aligned here)
ROM_HEADER_AT, DATA_TABLE_AT, FIRMWARE_INFO_AT, IMAGE_SIZE = 0x100, 0x200, 0x300, 0x400
# A board's firmware-reserved size when it is not given (board.build's fw_reserved_kb); not a published
# Navi31 value (none is public): large enough that the PSP runtime database lies inside it.
DEFAULT_FW_RESERVED_KB = 8 << 10

ROM_HEADER = structs.get(A, "atom_rom_header_v2_2")
DATA_TABLE = structs.get(A, "atom_master_data_table_v2_1")
FIRMWARE_INFO = structs.get(A, "atom_firmware_info_v3_4")


def build_image(fw_reserved_kb: int, subsystem: tuple[int, int] = (0, 0)) -> bytes:
    """A minimal ATOM ROM: the option-ROM header, the ATI magic, the ROM header, the master data table with
    the firmwareinfo entry and firmwareinfo v3.4 carrying fw_reserved_size_in_kb (see the module docstring)."""
    img = bytearray(IMAGE_SIZE)
    img[0:3] = bytes((0x55, 0xAA, IMAGE_SIZE >> 9))
    img[A.ATOM_ATI_MAGIC_PTR:A.ATOM_ATI_MAGIC_PTR + len(ATOM_ATI_MAGIC)] = ATOM_ATI_MAGIC
    img[A.ATOM_ROM_TABLE_PTR:A.ATOM_ROM_TABLE_PTR + 2] = ROM_HEADER_AT.to_bytes(2, "little")
    ROM_HEADER.pack_into(img, ROM_HEADER_AT, table_header=dict(structuresize=ROM_HEADER.size, format_revision=2,
                                                               content_revision=2),
                         atom_bios_string=list(ATOM_ROM_MAGIC), subsystem_vendor_id=subsystem[0],
                         subsystem_id=subsystem[1], masterdatatable_offset=DATA_TABLE_AT)
    DATA_TABLE.pack_into(img, DATA_TABLE_AT, table_header=dict(structuresize=DATA_TABLE.size, format_revision=2,
                                                               content_revision=1),
                         listOfdatatables=dict(firmwareinfo=FIRMWARE_INFO_AT))
    FIRMWARE_INFO.pack_into(img, FIRMWARE_INFO_AT, table_header=dict(structuresize=FIRMWARE_INFO.size,
                                                                     format_revision=3, content_revision=4),
                            fw_reserved_size_in_kb=fw_reserved_kb)
    return bytes(img)


class VBIOS(Block):
    """The ROM behind SMUIO ROM_INDEX/ROM_DATA and the reserved top of VRAM it declares. `image` may be
    replaced (tests: a damaged ROM); `fw_reserved_kb` is the board's value; `rom_offset` the
    REGS_ROM_OFFSET_CTRL.ROM_OFFSET the board straps (128 KiB units)."""
    name = "VBIOS"

    def __init__(self, dev, fw_reserved_kb: int = DEFAULT_FW_RESERVED_KB, rom_offset: int = 0):
        self.fw_reserved_kb, self.rom_offset = fw_reserved_kb, rom_offset
        self.image = build_image(fw_reserved_kb)
        super().__init__(dev)

    def attach(self) -> None:
        self.on_write("SMUIO", "ROM_INDEX", self._w_index)
        self.on_read("SMUIO", "ROM_DATA", self._r_data)
        self.dev.vram.protect(self.reserved(), self._refused)

    def reset(self) -> None:
        cntl = self.dev.table("SMUIO")["ROM_CNTL"]
        self.set("SMUIO", "ROM_CNTL", cntl.encode(ROM_INDEX_ADDRESS_AUTO_INCREASE=1))
        self.set("NBIO", "REGS_ROM_OFFSET_CTRL", self.rom_offset)   # the ROM_OFFSET field at bit 0

    def reserved(self) -> tuple[int, int]:
        """[first, end) VRAM byte offsets of the firmware-reserved top (64 KiB if the board declares none,
        as amdgpu_ttm_reserve_tmr falls back to DISCOVERY_TMR_OFFSET)."""
        size = (self.fw_reserved_kb << 10) or (64 << 10)
        return self.dev.vram.size - size, self.dev.vram.size

    def _refused(self, what: str) -> None:
        lo, hi = self.reserved()
        self.error(f"{what} lies in the firmware-reserved VRAM [{lo:#x}, {hi:#x}) (the VBIOS firmwareinfo "
                   f"fw_reserved_size_in_kb, amdgpu_ttm_reserve_tmr): dropped")

    # -- ROM_INDEX / ROM_DATA -------------------------------------------------------------------------
    def _w_index(self, value: int) -> int:
        return value & ROM_INDEX_MASK

    def _r_data(self) -> int:
        at = self.get("SMUIO", "ROM_INDEX")
        base = self.get("NBIO", "REGS_ROM_OFFSET_CTRL") << ROM_OFFSET_UNIT
        off = at - base
        chunk = self.image[off:off + 4] if 0 <= off < len(self.image) else b""
        value = int.from_bytes(chunk + b"\xff" * (4 - len(chunk)), "little")
        if self.dev.field("SMUIO", "ROM_CNTL", "ROM_INDEX_ADDRESS_AUTO_INCREASE"):
            self.set("SMUIO", "ROM_INDEX", (at + 4) & ROM_INDEX_MASK)
        return value
