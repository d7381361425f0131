"""PCI configuration space of the GPU's function 0 (the VGA function; the HDMI audio function .1 is not
modeled).

Facts: ids from amdrv.chips (0x1002:0x744C Navi31, 0x1002:0x7480 Navi33); class 0x030000 as the
products enumerate; BAR layout of an RX 7900 XTX / RX 7600 as lspci shows it: BAR0 64-bit prefetchable
VRAM aperture (256 MiB, or the whole VRAM rounded up to a power of two with resizable BAR), BAR2 64-bit
prefetchable doorbells (2 MiB, 256 MiB with resizable BAR), BAR4 I/O (256 bytes), BAR5 32-bit registers
(1 MiB); the Physical Resizable BAR capability at 0x200 with entries for BAR0 (256 MiB up) and BAR2 (2 MiB
to 256 MiB), behind a vendor-specific capability at 0x100. Register layout of the header, capabilities and
the resizable-BAR capability from include/uapi/linux/pci_regs.h (PCI_COMMAND 0x04, PCI_EXT_CAP_ID_REBAR
0x15; per BAR an 8-byte entry: PCI_REBAR_CAP with sizes in bits 4.., PCI_REBAR_CTRL with BAR index bits
0-2, NBAR bits 5-7 in the first entry, BAR size bits 8-13, sizes as log2(MiB)).
"""
from __future__ import annotations

import struct

from amdrv import chips

COMMAND = 0x04
CMD_MEMORY = 1 << 1
CMD_BUS_MASTER = 1 << 2
_CMD_WRITABLE = 0x0547      # IO, MEM, BME, PERR, SERR, INTx disable

BAR_OFFSETS = {0: 0x10, 2: 0x18, 4: 0x20, 5: 0x24}
DOORBELL_BAR_SIZE = 2 << 20         # 256 MiB once resized
DOORBELL_BAR_MAX = 256 << 20
REG_BAR_SIZE = 1 << 20
IO_BAR_SIZE = 256

CAP_PM, CAP_EXP, CAP_MSI = 0x50, 0x64, 0xA0
EXT_VSEC, EXT_REBAR = 0x100, 0x200
REBAR_MIN = 256 << 20
REBAR_BARS = (0, 2)                 # entry order in the capability

REVISION = {"navi31": 0xC8, "navi33": 0xC7}  # RX 7900 XTX, RX 7600


def pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()


class ConfigSpace:
    """4 KiB of config space with the read-only, writable and sizing behaviour of the real registers.

    `reset()` is what an ASIC reset that takes the bus interface with it (mode1) leaves: the header's
    writable registers at their defaults (command 0: no memory decode, no bus mastering; BARs unassigned,
    reading 0), the resizable BAR sizes back to their defaults. That is why amdgpu_device_mode1_reset saves
    the config space first (amdgpu_device_cache_pci_state, pci_save_state) and restores it after
    (amdgpu_device_load_pci_state, pci_restore_state: resizable BAR controls, then the header with the
    command register last). A BAR whose register was reset claims no host address: the device answers
    nothing there (master abort, all ones) until it is written back."""

    def __init__(self, chip: str, vram_size: int, bar0_size: int, slot: int = 0,
                 bar2_size: int = DOORBELL_BAR_SIZE):
        self.default_sizes = {0: REBAR_MIN, 2: DOORBELL_BAR_SIZE}    # the Resizable BAR controls' reset sizes
        c = chips.by_name(chip)
        self.chip = chip
        self.vram_size = vram_size
        self.rebar_max = pow2_at_least(vram_size)
        self.sizes = {0: bar0_size, 2: bar2_size, 4: IO_BAR_SIZE, 5: REG_BAR_SIZE}
        self.rebar_range = {0: (REBAR_MIN, self.rebar_max), 2: (DOORBELL_BAR_SIZE, DOORBELL_BAR_MAX)}
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
        # Extended capabilities: vendor-specific -> Physical Resizable BAR (BAR0, BAR2).
        struct.pack_into("<II", s, EXT_VSEC, 0x000B | (1 << 16) | (EXT_REBAR << 20), 0x01 | (1 << 16) | (0x10 << 20))
        struct.pack_into("<I", s, EXT_REBAR, 0x15 | (1 << 16))
        for i, bar in enumerate(REBAR_BARS):
            struct.pack_into("<I", s, EXT_REBAR + 4 + 8 * i, self._rebar_sizes(bar))
            self._write_rebar_ctrl(i)
        for i in BAR_OFFSETS:
            self._store_bar(i)

    def reset(self) -> None:
        """The function's config space after a mode1 reset (see the class doc); host-side bookkeeping (the
        addresses the host assigned) is gone from the device: the BARs read back unassigned."""
        s = self.space
        struct.pack_into("<H", s, COMMAND, 0)
        s[0x3C] = 0
        for bar, size in self.default_sizes.items():
            self.sizes[bar] = size
        for i in range(len(REBAR_BARS)):
            self._write_rebar_ctrl(i)
        for i, off in BAR_OFFSETS.items():
            self.addrs[i] = 0
            self._store_bar(i)

    def assigned(self, bar: int) -> bool:
        """Whether the BAR holds an address (a reset leaves it 0, claiming nothing)."""
        return self.addrs[bar] != 0

    def _rebar_sizes(self, bar: int) -> int:
        lo, hi = self.rebar_range[bar]
        bits, size = 0, lo
        while size <= hi:
            bits |= 1 << ((size >> 20).bit_length() - 1 + 4)
            size <<= 1
        return bits

    def _write_rebar_ctrl(self, i: int) -> None:
        bar = REBAR_BARS[i]
        log = (self.sizes[bar] >> 20).bit_length() - 1
        nbar = len(REBAR_BARS) << 5 if i == 0 else 0
        struct.pack_into("<I", self.space, EXT_REBAR + 8 + 8 * i, bar | nbar | (log << 8))

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
    def msi_enabled(self) -> bool:
        """MSI Enable, bit 0 of the MSI capability's message control (PCI Local Bus spec 6.8.1.3)."""
        return bool(self.space[CAP_MSI + 2] & 1)

    @property
    def memory_enabled(self) -> bool:
        return bool(self.command & CMD_MEMORY)

    def read(self, offset: int, size: int) -> int:
        return int.from_bytes(self.space[offset:offset + size], "little")

    def write(self, offset: int, size: int, value: int) -> str | None:
        """Applies a write; returns a complaint for writes hardware ignores (the caller records it)."""
        for k in range(size):
            self._write_byte(offset + k, (value >> (8 * k)) & 0xFF)
        for i in range(len(REBAR_BARS)):
            at = EXT_REBAR + 9 + 8 * i      # the size byte of entry i's control register
            if offset <= at < offset + size:
                return self._apply_rebar(i)
        return None

    def _write_byte(self, at: int, b: int) -> None:
        s = self.space
        if at in (COMMAND, COMMAND + 1):
            mask = (_CMD_WRITABLE >> (8 * (at - COMMAND))) & 0xFF
            s[at] = (s[at] & ~mask) | (b & mask)
        elif 0x10 <= at < 0x28:
            self._write_bar_byte(at, b)
        elif at == CAP_MSI + 2:       # MSI message control: MSI Enable (bit 0) is RW (PCI spec); the IH's
            s[at] = (s[at] & ~1) | (b & 1)   # dummy read depends on it (gpusim/ih.py)
        elif at == 0x3C or at in (EXT_REBAR + 9 + 8 * i for i in range(len(REBAR_BARS))):
            s[at] = b                 # interrupt line; a rebar size field (validated after)

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

    def _apply_rebar(self, i: int) -> str | None:
        bar = REBAR_BARS[i]
        log = self.space[EXT_REBAR + 9 + 8 * i] & 0x3F
        size = 1 << (log + 20)
        if not self._rebar_sizes(bar) >> (log + 4) & 1:
            self._write_rebar_ctrl(i)
            return f"resizable BAR: BAR{bar} size {size >> 20} MiB is not supported (see PCI_REBAR_CAP)"
        if self.memory_enabled:
            self._write_rebar_ctrl(i)
            return (f"resizable BAR: BAR{bar} resized while memory decode is on; clear PCI_COMMAND_MEMORY "
                    f"first")
        self.sizes[bar] = size
        self._write_rebar_ctrl(i)
        self._store_bar(bar)
        return None
