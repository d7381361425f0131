"""The VBIOS: how much VRAM the firmware keeps at the top, read from the ROM as amdgpu reads it.

    reserved = vbios.read_fw_reserved(dev)    # after IP discovery (the SMUIO and NBIO bases)
    reserved.size, reserved.why               # bytes at the top of VRAM; where the number came from

Facts (drivers/gpu/drm/amd, linux 6.1):
- amdgpu_soc15_read_bios_from_rom: write the ROM byte address to SMUIO ROM_INDEX (smuio_v13_0_6 on SOC21),
  starting at REGS_ROM_OFFSET_CTRL.ROM_OFFSET << 17 (nbio_v4_3_get_rom_offset), then read ROM_DATA once
  per dword: the index moves on by itself.
- The image (check_atom_bios, amdgpu_atom_parse, atom.h, atomfirmware.h): 0x55 0xAA, byte 2 the size in
  512-byte units; ATOM_ATI_MAGIC at 0x30; at 0x48 (ATOM_ROM_TABLE_PTR) the offset of atom_rom_header_v2_2,
  "ATOM" at +4 and masterdatatable_offset; the master data table's firmwareinfo entry (ATOM_DATA_FWI_PTR);
  amdgpu_atom_parse_data_header gives its size, format and content revisions.
- amdgpu_atomfirmware_get_fw_reserved_fb_size: no firmwareinfo table -> 0; format revision other than 3 ->
  -EINVAL; content revision 4 -> fw_reserved_size_in_kb << 10, others 0. amdgpu_ttm_reserve_tmr reserves
  that at the top of VRAM, DISCOVERY_TMR_OFFSET (64 KiB) when it is 0. A dGPU without a readable VBIOS does
  not load at all (amdgpu_get_bios fails amdgpu_device_init).

Cost: upstream reads the whole image (64 KiB and more on a real card: 16k+ register reads, each a round trip
over USB). Only the bytes the walk needs are read here, each dword once: a jump is one ROM_INDEX write, then
ROM_DATA reads; with the ROM offset read through the RSMU pair that is 9 writes and 11 reads, on opens
with no AM boot state only: the boot state records the size (AMDevice._firmware_reserved).
A damaged image is refused with an error naming the field; format 3 with another content revision, or a
size of 0, falls back to 64 KiB as upstream does.
"""
from __future__ import annotations

from dataclasses import dataclass

from amdrv import structs
from amdrv.autogen import atomfirmware as A
from amdrv.discovery import DISCOVERY_TMR_OFFSET

ATOM_ATI_MAGIC = b" 761295520"            # atom.h ATOM_ATI_MAGIC
ATOM_ROM_MAGIC = b"ATOM"                  # atom.h ATOM_ROM_MAGIC, at ATOM_ROM_MAGIC_PTR of the ROM header
ROM_OFFSET_SHIFT = 17                     # amdgpu_soc15_read_bios_from_rom
_ROM_HEADER = structs.get(A, "atom_rom_header_v2_2")
_TABLE_HEADER = structs.get(A, "atom_common_table_header")
_FIRMWARE_INFO = structs.get(A, "atom_firmware_info_v3_4")
_FW_RESERVED_AT = _FIRMWARE_INFO.offset("fw_reserved_size_in_kb")


class VBIOSError(RuntimeError):
    """The VBIOS ROM is missing or damaged; the message names the device, the field and what to do."""


@dataclass(frozen=True)
class FirmwareReserved:
    size: int       # bytes the firmware keeps at the top of VRAM
    why: str        # where the size came from, in words


class ROMReader:
    """Random access to the ROM through ROM_INDEX/ROM_DATA, every dword read at most once."""

    def __init__(self, index, data, base: int):
        self.index, self.data, self.base = index, data, base
        self._dwords: dict[int, int] = {}
        self._next = None            # the dword offset ROM_INDEX points at now

    def read(self, offset: int, n: int) -> bytes:
        out = bytearray()
        for dw in range(offset & ~3, offset + n, 4):
            if dw not in self._dwords:
                if self._next != dw:
                    self.index.write(self.base + dw)
                self._dwords[dw] = self.data.read()
                self._next = dw + 4
            out += self._dwords[dw].to_bytes(4, "little")
        skip = offset & 3
        return bytes(out[skip:skip + n])

    def u16(self, offset: int) -> int:
        return int.from_bytes(self.read(offset, 2), "little")


def read_fw_reserved(dev) -> FirmwareReserved:
    """amdgpu_atomfirmware_get_fw_reserved_fb_size through the ROM, with amdgpu_ttm_reserve_tmr's fallback."""
    from amdrv.ip.nbio import NBIO      # the RSMU pair reaches REGS_ROM_OFFSET_CTRL past the register BAR
    smuio = dev.reg("SMUIO")
    rom_offset = NBIO(dev).regs.REGS_ROM_OFFSET_CTRL.read() & 0x7F
    rom = ROMReader(smuio.ROM_INDEX, smuio.ROM_DATA, rom_offset << ROM_OFFSET_SHIFT)
    where = f"{dev.name}: VBIOS (SMUIO ROM_INDEX/ROM_DATA at ROM offset {rom_offset << ROM_OFFSET_SHIFT:#x})"
    fix = "the card is not posted or its ROM is damaged: flash a good VBIOS or use another card"
    head = rom.read(0, 4)
    if head[:2] != b"\x55\xaa":
        raise VBIOSError(f"{where}: no ROM signature (0x55 0xAA) at byte 0, read {head[0]:#04x} {head[1]:#04x}; {fix}")
    size = head[2] << 9
    if size < A.ATOM_ROM_TABLE_PTR + 2:
        raise VBIOSError(f"{where}: the image size byte says {size} bytes, too small for an ATOM ROM; {fix}")

    def inside(offset: int, n: int, what: str) -> int:
        if not offset or offset + n > size:
            raise VBIOSError(f"{where}: {what} {offset:#x} (+{n}) is not inside the {size}-byte image; {fix}")
        return offset

    magic = rom.read(A.ATOM_ATI_MAGIC_PTR, len(ATOM_ATI_MAGIC))
    if magic != ATOM_ATI_MAGIC:
        raise VBIOSError(f"{where}: ATOM_ATI_MAGIC at {A.ATOM_ATI_MAGIC_PTR:#x} reads {magic!r}, not "
                         f"{ATOM_ATI_MAGIC!r}; {fix}")
    header = inside(rom.u16(A.ATOM_ROM_TABLE_PTR), _ROM_HEADER.size, "ATOM_ROM_TABLE_PTR (the ROM header offset)")
    sig = rom.read(header + A.ATOM_ROM_MAGIC_PTR, 4)
    if sig != ATOM_ROM_MAGIC:
        raise VBIOSError(f"{where}: atom_rom_header_v2_2.atom_bios_string at {header + 4:#x} reads {sig!r}, not "
                         f"{ATOM_ROM_MAGIC!r}; {fix}")
    data_table = inside(rom.u16(header + _ROM_HEADER.offset("masterdatatable_offset")), A.ATOM_DATA_FWI_PTR + 2,
                        "atom_rom_header_v2_2.masterdatatable_offset")
    info = rom.u16(data_table + A.ATOM_DATA_FWI_PTR)
    if not info:   # amdgpu_atom_parse_data_header fails: 0, so the fallback
        return FirmwareReserved(DISCOVERY_TMR_OFFSET, "the VBIOS has no firmwareinfo table: the 64 KiB fallback")
    inside(info, _TABLE_HEADER.size, "the master data table's firmwareinfo offset")
    th = _TABLE_HEADER.unpack(rom.read(info, _TABLE_HEADER.size))
    if th.format_revision != 3:
        raise VBIOSError(f"{where}: firmwareinfo format revision {th.format_revision} (content "
                         f"{th.content_revision}), amdgpu knows only 3 (amdgpu_atomfirmware_get_fw_reserved_fb_size "
                         f"fails with -EINVAL); {fix}")
    if th.content_revision != 4:
        return FirmwareReserved(DISCOVERY_TMR_OFFSET, f"firmwareinfo v3.{th.content_revision} carries no "
                                                      "fw_reserved_size_in_kb amdgpu 6.1 reads: the 64 KiB fallback")
    if th.structuresize < _FW_RESERVED_AT + 4:
        raise VBIOSError(f"{where}: firmwareinfo v3.4 is {th.structuresize} bytes (structuresize), too short for "
                         f"fw_reserved_size_in_kb at {_FW_RESERVED_AT}; {fix}")
    kb = int.from_bytes(rom.read(inside(info, _FIRMWARE_INFO.size, "firmwareinfo v3.4") + _FW_RESERVED_AT, 4),
                        "little")
    if not kb:
        return FirmwareReserved(DISCOVERY_TMR_OFFSET, "firmwareinfo v3.4 fw_reserved_size_in_kb is 0: the 64 KiB "
                                                      "fallback")
    vram = dev.vram.size
    if kb << 10 >= vram:   # amdgpu_bo_create_kernel_at cannot place it: amdgpu_ttm_init fails
        raise VBIOSError(f"{where}: firmwareinfo v3.4 fw_reserved_size_in_kb is {kb} KiB, not below the "
                         f"{vram >> 20} MiB of VRAM; {fix}")
    size = -(-(kb << 10) // 4096) * 4096     # amdgpu_bo_create_kernel_at rounds the size up to pages
    return FirmwareReserved(size, f"VBIOS firmwareinfo v3.4 fw_reserved_size_in_kb = {kb}")
