"""The ASM24xx bridge's stock-firmware protocol, as public reverse engineering documents it.

Sources (facts only; docs/usb.md cites them in full):
- cyrozap/usb-to-pcie-re, ASM2x6x/doc/Notes.md ("USB protocol"): everything goes through vendor SCSI
  commands; 0xE4 reads up to 255 bytes of the 8051's XDATA, 0xE5 writes one byte; XDATA 0xF000-0xFFFF is
  also reachable from PCIe at bus address 0x00200000 and 0xA000-0xAFFF at 0x00820000 (ASM2364 memory
  map); ASM236x/ASM246x USB ids 174c:236x and 174c:246x (ASM2x6x/etc/99-asm2x6x.rules).
- tinygrad, tinygrad/runtime/support/usb.py (ASM24Controller): the XDATA address in the CDB is
  (address & 0x1FFFF) | 0x500000 in bytes 2-4; the PCIe TLP engine's registers (below); a SCSI WRITE(16)
  of 4 KiB lands in XDATA 0xF000, after which the firmware's bookkeeping bytes 0x171 (3 x 0xFF) and
  0xCE6E (2 x 0x00) are reset; tinygrad/runtime/support/system.py: the same 0xF000 <-> 0x200000 window
  used as the GPU's view of "system memory".
- USB Mass Storage Bulk-Only Transport 1.0: the 31-byte CBW ("USBC") and 13-byte CSW ("USBS").
"""
from __future__ import annotations

import struct

# USB ids: ASMedia's own (udev patterns of usb-to-pcie-re) and the eGPU enclosure tinygrad opens.
ASMEDIA_VID = 0x174C
ASMEDIA_PIDS = tuple(range(0x2360, 0x236A)) + tuple(range(0x2460, 0x246A))
TINYGRAD_ENCLOSURE = (0x2D01, 0x3666)


def is_bridge_id(vendor: int, product: int) -> bool:
    return (vendor == ASMEDIA_VID and product in ASMEDIA_PIDS) or (vendor, product) in (TINYGRAD_ENCLOSURE,
                                                                                        OPEN_FIRMWARE_ID)


# USB Mass Storage, Bulk-Only Transport: interface class/subclass/protocol and the wrappers.
MSC_CLASS, SCSI_SUBCLASS, BOT_PROTOCOL = 0x08, 0x06, 0x50
CBW_SIGNATURE, CSW_SIGNATURE = 0x43425355, 0x53425355
CBW_SIZE, CSW_SIZE = 31, 13
CSW_PASSED, CSW_FAILED, CSW_PHASE_ERROR = 0, 1, 2


def cbw(tag: int, cdb: bytes, data_length: int, data_in: bool) -> bytes:
    return struct.pack("<IIIBBB16s", CBW_SIGNATURE, tag, data_length, 0x80 if data_in else 0x00, 0,
                       len(cdb), cdb)


def parse_csw(raw: bytes) -> tuple[int, int, int]:
    """(tag, residue, status); raises ValueError on a malformed wrapper."""
    if len(raw) != CSW_SIZE:
        raise ValueError(f"CSW of {len(raw)} bytes (expected {CSW_SIZE})")
    sig, tag, residue, status = struct.unpack("<IIIB", raw)
    if sig != CSW_SIGNATURE:
        raise ValueError(f"CSW signature {sig:#010x} (expected {CSW_SIGNATURE:#010x})")
    return tag, residue, status


# Vendor SCSI commands of the stock firmware.
XDATA_READ, XDATA_WRITE = 0xE4, 0xE5
XDATA_READ_MAX = 255
XDATA_SPACE = 0x500000        # tinygrad ORs this into the 3-byte address field
XDATA_MASK = 0x1FFFF


def _xaddr(address: int) -> bytes:
    a = (address & XDATA_MASK) | XDATA_SPACE
    return bytes((a >> 16, (a >> 8) & 0xFF, a & 0xFF))


def xdata_read_cdb(address: int, n: int) -> bytes:
    if not 0 < n <= XDATA_READ_MAX:
        raise ValueError(f"XDATA read of {n} bytes (1..{XDATA_READ_MAX})")
    return bytes((XDATA_READ, n)) + _xaddr(address) + b"\0"


def xdata_write_cdb(address: int, value: int) -> bytes:
    return bytes((XDATA_WRITE, value & 0xFF)) + _xaddr(address) + b"\0"


# SCSI WRITE(16) of one 4 KiB window page (8 blocks of 512 bytes at LBA 0) lands in XDATA 0xF000.
SCSI_WRITE16 = 0x8A
BLOCK = 512


# Bytes one WRITE(16) carries at most: tinygrad's stock-firmware driver splits bulk writes into 64 KiB
# commands (tinygrad/runtime/support/usb.py, ASM24Controller; asm2464pd-firmware USBGPU.md, "SCSI WRITE (Fast -
# 64KB chunks)"), the size proven on the hardware; the firmware's own limit is not documented.
WRITE16_MAX = 0x10000


def write16_cdb(lba: int, nbytes: int) -> bytes:
    return struct.pack(">BBQIBB", SCSI_WRITE16, 0, lba, nbytes // BLOCK, 0, 0)


# Firmware bookkeeping that tinygrad resets after each WRITE(16) (meaning not documented).
WRITE16_RESETS = ((0x171, b"\xff\xff\xff"), (0xCE6E, b"\x00\x00"))
# Controller set-up tinygrad's ASM24Controller writes once at open (meaning not documented).
INIT_WRITES = ((0x054B, b" "), (0x05A8, b"\x02"), (0x05F8, b"\x04"), (0x07EC, b"\x01\x00\x00\x00"),
               (0xC422, b"\x02"), (0x0000, b"\x33"))

# The PCIe TLP engine (XDATA registers). Multi-byte fields are big-endian; the data register holds the
# dword shifted left by 8 * (address & 3), as tinygrad packs it.
TLP_FMT_TYPE = 0xB210
TLP_BYTE_ENABLE = 0xB217
TLP_ADDRESS = 0xB218          # 4 bytes: the dword-aligned 32-bit address (bus/dev/fn/reg for config)
TLP_DATA = 0xB220             # 4 bytes
TLP_COMPLETION = 0xB22A       # 2 bytes: status in bits 15:13, byte count in bits 11:0
TLP_KICK, TLP_KICK_VALUE = 0xB254, 0x0F
TLP_STATUS = 0xB296           # bit 0: timeout/error (write 1 to clear), bit 1: completion in,
TLP_STATUS_ERROR, TLP_STATUS_DONE, TLP_STATUS_SENT = 0x01, 0x02, 0x04   # bit 2: sent (write 1 to clear)

# TLP fmt/type bytes (PCIe base spec): 3-dword headers only, so every BAR is placed below 4 GiB.
MRD32, MWR32 = 0x00, 0x40
CFGRD0, CFGWR0, CFG_TYPE1 = 0x04, 0x44, 0x01

COMPLETION_STATUS = {0: "successful completion", 1: "unsupported request (UR)",
                     2: "configuration request retry status (CRS)", 4: "completer abort (CA)"}


def is_posted(fmt_type: int) -> bool:
    return fmt_type & 0xDF == MWR32


def config_address(bus: int, dev: int, fn: int, offset: int) -> int:
    return (bus << 24) | (dev << 19) | (fn << 16) | (offset & 0xFFC)


# The DMA window: the bridge's SRAM, which the GPU reaches at bus 0x200000 + offset. The host fills it with
# WRITE(16) at LBA offset // 512 (geohot/asm2464pd-firmware USBGPU.md: data lands at 0x200000 + LBA * 512)
# and reads back only its first 4 KiB, through XDATA 0xF000 (cyrozap's memory map). Its size: 512 KiB on
# both firmwares (issue 16's facts from the peer's bridge work, "the bridge's 512 KiB SRAM"; tinygrad
# asm2464pd-firmware pcie/test_sram_verify.py "SRAM_EXPECTED = 0x80000 # 512KB, this is verified").
WINDOW_BUS, WINDOW_XDATA, WINDOW_SIZE, WINDOW_PAGE = 0x200000, 0xF000, 512 << 10, 0x1000


# The open replacement firmware (tinygrad/asm2464pd-firmware, handmade/src/main.c and usb.h; its README): the
# bridge enumerates as ADD1:0001 with one vendor-class interface (FF/FF/FF, bulk IN 0x81, bulk OUT 0x02) and
# speaks vendor control requests only, no SCSI:
#   0xE4 IN   XDATA read: wValue = address, up to 512 bytes per request on USB 3 (64 on USB 2)
#   0xE5 OUT  XDATA write: wValue = address, wIndex low byte = the value
#   0xF0 OUT  the TLP engine, 12 bytes of data (address bits 31:0, bits 63:32, value; little-endian); wValue =
#             fmt/type | byte enables << 8; wIndex bits 1:0 = mode (0 one TLP, 1 streamed writes on bulk OUT,
#             2 streamed reads on bulk IN; value = dwords)
#   0xF0 IN   8 bytes: the read data (little-endian), the completion header (status << 13 | byte count,
#             big-endian), 0xB284, and a result byte (0 done, 1 error, 0xFF no completion)
#   0xF2 OUT  SRAM DMA: wValue = sectors of 512 bytes | 0x8000 for SRAM to host; wIndex = first 16 KiB slot |
#             slots << 8; the data then go on bulk OUT (or come on bulk IN after the GPU writes PCIe 0x822000)
#   0xF3 OUT  PCIe power, wValue bit 0
OPEN_FIRMWARE_ID = (0xADD1, 0x0001)
VENDOR_CLASS = 0xFF
REQ_OUT, REQ_IN = 0x40, 0xC0            # vendor requests to the device, host to device / device to host
REQ_XDATA_READ, REQ_XDATA_WRITE, REQ_PCIE, REQ_SRAM_DMA, REQ_POWER = 0xE4, 0xE5, 0xF0, 0xF2, 0xF3
OPEN_XDATA_READ_MAX = 512
PCIE_SINGLE, PCIE_STREAM_WRITE, PCIE_STREAM_READ = 0, 1, 2
PCIE_RESULT = {0x00: "completed", 0x01: "error (no completion or a refused request)", 0xFF: "no completion"}
SRAM_SLOT = 0x4000                      # 16 KiB per SRAM DMA slot (pcie/test_sram_verify.py)
SRAM_DMA_IN = 0x8000
SRAM_SLOTS_MAX = 255                    # one byte each for the first slot and the count
SRAM_SLOTS = WINDOW_SIZE // SRAM_SLOT    # 32: the slots the SRAM has (0xF2 could name more)
SRAM_SECTORS_MAX = 0x7FFF
OPEN_BULK_IN, OPEN_BULK_OUT = 0x81, 0x02
COMPLETION_WINDOW = 0x822000            # a GPU write here releases an SRAM-to-host DMA (README)
