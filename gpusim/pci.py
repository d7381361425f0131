"""PCI configuration space of the GPU's function 0 (the VGA function; the HDMI audio function .1 is not
modeled).

Facts: ids from amdrv.chips (0x1002:0x744C Navi31, 0x1002:0x7480 Navi33); class 0x030000 as the
products enumerate; BAR layout of an RX 7900 XTX / RX 7600 as lspci shows it: BAR0 64-bit prefetchable
VRAM aperture (256 MiB, or the whole VRAM rounded up to a power of two with resizable BAR), BAR2 64-bit
prefetchable doorbells (256 MiB), BAR4 I/O (256 bytes), BAR5 32-bit registers (1 MiB). Register layout
of the header, capabilities and the resizable-BAR extended capability from include/uapi/linux/pci_regs.h
(PCI_COMMAND 0x04, PCI_EXT_CAP_ID_REBAR 0x15, PCI_REBAR_CAP 4 with sizes in bits 4.., PCI_REBAR_CTRL 8
with BAR index bits 0-2, NBAR bits 5-7 and BAR size bits 8-13, sizes as log2(MiB)).
"""
from __future__ import annotations

import struct

from amdrv import chips

COMMAND = 0x04
CMD_MEMORY = 1 << 1
CMD_BUS_MASTER = 1 << 2
_CMD_WRITABLE = 0x0547      # IO, MEM, BME, PERR, SERR, INTx disable

BAR_OFFSETS = {0: 0x10, 2: 0x18, 4: 0x20, 5: 0x24}
DOORBELL_BAR_SIZE = 256 << 20
REG_BAR_SIZE = 1 << 20
IO_BAR_SIZE = 256

CAP_PM, CAP_EXP, CAP_MSI = 0x50, 0x64, 0xA0
EXT_REBAR = 0x200
REBAR_MIN = 256 << 20

REVISION = {"navi31": 0xC8, "navi33": 0xC7}  # RX 7900 XTX, RX 7600


def pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()


class ConfigSpace:
    """4 KiB of config space with the read-only, writable and sizing behaviour of the real registers."""

    def __init__(self, chip: str, vram_size: int, bar0_size: int, slot: int = 0):
        c = chips.by_name(chip)
        self.chip = chip
        self.vram_size = vram_size
        self.rebar_max = pow2_at_least(vram_size)
        self.sizes = {0: bar0_size, 2: DOORBELL_BAR_SIZE, 4: IO_BAR_SIZE, 5: REG_BAR_SIZE}
        # Host addresses as a BIOS would assign them, distinct per slot on the simulated bus.
        self.addrs = {0: (0x8 + slot) << 40, 2: ((0x8 + slot) << 40) + (1 << 39), 4: 0x1000 + slot * IO_BAR_SIZE,
                      5: 0xF0000000 + slot * REG_BAR_SIZE}
        self._device_id = c.pci_device_ids[0]
        self.power_on()

    def power_on(self) -> None:
        s = self.space = bytearray(4096)
        struct.pack_into("<HH", s, 0x00, chips.AMD_VENDOR_ID, self._device_id)
        # Memory decode is on (the host enumerated the device and assigned BARs); bus mastering is not:
        # the driver has to ask for it, as pci_set_master does.
        struct.pack_into("<HH", s, COMMAND, CMD_MEMORY, 0x0010)          # status: capabilities list
        s[0x08] = REVISION[self.chip]
        s[0x09:0x0C] = bytes((0x00, 0x00, 0x03))                         # prog-if, subclass, class
        s[0x0E] = 0x80                                                   # multi-function (audio at .1)
        struct.pack_into("<HH", s, 0x2C, chips.AMD_VENDOR_ID, 0x0E3B)
        s[0x34] = CAP_PM
        s[0x3D] = 1                                                      # INTA
        # Power management -> PCI Express -> MSI.
        s[CAP_PM:CAP_PM + 4] = bytes((0x01, CAP_EXP, 0x03, 0x06))
        s[CAP_EXP:CAP_EXP + 2] = bytes((0x10, CAP_MSI))
        struct.pack_into("<H", s, CAP_EXP + 2, 0x0002)                   # v2, endpoint
        struct.pack_into("<I", s, CAP_EXP + 0x0C, 4 | (16 << 4))         # link cap: 16 GT/s x16
        struct.pack_into("<H", s, CAP_EXP + 0x12, 4 | (16 << 4))         # link status
        s[CAP_MSI:CAP_MSI + 4] = bytes((0x05, 0x00, 0x80, 0x00))         # MSI, 64-bit
        # Extended capabilities: resizable BAR for BAR0 only, first in the list.
        struct.pack_into("<I", s, 0x100, 0x15 | (1 << 16) | (0 << 20))
        struct.pack_into("<I", s, 0x104, self._rebar_sizes())
        self._write_rebar_ctrl()
        for i in BAR_OFFSETS:
            self._store_bar(i)

    def _rebar_sizes(self) -> int:
        bits, size = 0, REBAR_MIN
        while size <= self.rebar_max:
            bits |= 1 << ((size >> 20).bit_length() - 1 + 4)
            size <<= 1
        return bits

    def _write_rebar_ctrl(self) -> None:
        log = (self.sizes[0] >> 20).bit_length() - 1
        struct.pack_into("<I", self.space, 0x108, 0 | (1 << 5) | (log << 8))

    def _store_bar(self, i: int) -> None:
        off, a = BAR_OFFSETS[i], self.addrs[i]
        if i == 4:
            struct.pack_into("<I", self.space, off, (a & ~(IO_BAR_SIZE - 1)) | 1)
        elif i == 5:
            struct.pack_into("<I", self.space, off, a & ~(REG_BAR_SIZE - 1) & 0xFFFFFFFF)
        else:
            struct.pack_into("<Q", self.space, off, (a & ~(self.sizes[i] - 1)) | 0xC)

    @property
    def command(self) -> int:
        return struct.unpack_from("<H", self.space, COMMAND)[0]

    @property
    def bus_master(self) -> bool:
        return bool(self.command & CMD_BUS_MASTER)

    @property
    def memory_enabled(self) -> bool:
        return bool(self.command & CMD_MEMORY)

    def read(self, offset: int, size: int) -> int:
        return int.from_bytes(self.space[offset:offset + size], "little")

    def write(self, offset: int, size: int, value: int) -> str | None:
        """Applies a write; returns a complaint for writes hardware ignores (the caller records it)."""
        for k in range(size):
            self._write_byte(offset + k, (value >> (8 * k)) & 0xFF)
        if offset <= 0x108 < offset + size or offset <= 0x109 < offset + size:
            return self._apply_rebar()
        return None

    def _write_byte(self, at: int, b: int) -> None:
        s = self.space
        if at in (COMMAND, COMMAND + 1):
            mask = (_CMD_WRITABLE >> (8 * (at - COMMAND))) & 0xFF
            s[at] = (s[at] & ~mask) | (b & mask)
        elif 0x10 <= at < 0x28:
            self._write_bar_byte(at, b)
        elif at in (0x3C, 0x109):   # interrupt line; rebar control's size field (validated after)
            s[at] = b

    def _write_bar_byte(self, at: int, b: int) -> None:
        for i, off in BAR_OFFSETS.items():
            width = 4 if i in (4, 5) else 8
            if off <= at < off + width:
                raw = bytearray(self.space[off:off + width])
                raw[at - off] = b
                v = int.from_bytes(raw, "little")
                size = self.sizes[i]
                flags = 1 if i == 4 else (0 if i == 5 else 0xC)
                v = (v & ~(size - 1) & ((1 << (8 * width)) - 1)) | flags   # sizing: low bits read 0
                self.space[off:off + width] = v.to_bytes(width, "little")
                self.addrs[i] = v & ~0xF
                return

    def _apply_rebar(self) -> str | None:
        log = (self.space[0x109] & 0x3F)
        size = 1 << (log + 20)
        ok = self._rebar_sizes() >> (log + 4) & 1
        if not ok:
            self._write_rebar_ctrl()
            return f"resizable BAR: BAR0 size {size >> 20} MiB is not supported (see PCI_REBAR_CAP)"
        if self.memory_enabled:
            self._write_rebar_ctrl()
            return "resizable BAR: BAR0 resized while memory decode is on; clear PCI_COMMAND_MEMORY first"
        self.sizes[0] = size
        self._write_rebar_ctrl()
        self._store_bar(0)
        return None
