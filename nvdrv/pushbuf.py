"""Pushbuffer method encoding, GPFIFO entries and QMDs for Hopper channels (nvdrv.classes for the facts).

    pb = PushBuffer()
    i = pb.methods(SUBCHANNEL_COPY, NVC8B5_OFFSET_IN_UPPER, hi, lo, ohi, olo)   # index of the first data word
    pb.words[i + 1] = new_lo                                                   # patched in place later
    e0, e1 = gp_entry(gpu_address_of_words, len(pb.words))

A method header is SEC_OP (incrementing: consecutive methods), the data count, the subchannel and the
method address / 4 (clb06f.h NVB06F_DMA_INCR_*). Builders return data-word indices so queues are built
once and patched, as hcq's update_* need.
"""
from __future__ import annotations

import struct
from array import array

from nvdrv import classes as C


def header(subchannel: int, method: int, count: int, op: int = C.DMA_SEC_OP_INC_METHOD) -> int:
    if not 0 < count <= C.DMA_MAX_COUNT or method & 3 or method >= 1 << 14 or not 0 <= subchannel < 8:
        raise ValueError(f"method {method:#x} x{count} on subchannel {subchannel} does not fit a method header")
    return (op << 29) | (count << 16) | (subchannel << 13) | (method >> 2)


class PushBuffer:
    """A list of 32-bit method words."""

    __slots__ = ("words",)

    def __init__(self):
        self.words = array("I")

    def methods(self, subchannel: int, method: int, *data: int) -> int:
        """Incrementing methods from `method`; returns the index of the first data word."""
        self.words.append(header(subchannel, method, len(data)))
        at = len(self.words)
        self.words.extend(d & 0xFFFFFFFF for d in data)
        return at

    def __len__(self) -> int:
        return len(self.words)


def gp_entry(address: int, dwords: int) -> tuple[int, int]:
    """A GPFIFO entry for `dwords` method words at GPU address `address` (4-byte aligned, 40 bits):
    entry 0 GET 31:2, entry 1 GET_HI 7:0 and LENGTH 30:10 (clc86f.h NVC86F_GP_ENTRY*)."""
    if address & 3 or address >> 40 or not 0 < dwords < 1 << C.GP_ENTRY1_LENGTH_BITS:
        raise ValueError(f"GPFIFO entry for {dwords} dwords at {address:#x} does not fit")
    return address & 0xFFFFFFFC, (address >> 32) | (dwords << C.GP_ENTRY1_LENGTH_SHIFT)


# -------------------------------------------------------------------------------------------- semaphores
def sem_release(pb: PushBuffer, subchannel: int, va: int, value: int, timestamp: bool = True, wfi: bool = True) -> int:
    """Host semaphore release of a 64-bit value (and the GPU time 8 bytes after it); returns the index of
    SEM_PAYLOAD_LO, so update patches the value there and SEM_PAYLOAD_HI after it."""
    ex = (C.SEM_EXECUTE_OPERATION_RELEASE | C.SEM_EXECUTE_PAYLOAD_SIZE_64BIT
          | (C.SEM_EXECUTE_RELEASE_TIMESTAMP_EN if timestamp else 0) | (C.SEM_EXECUTE_RELEASE_WFI_EN if wfi else 0))
    i = pb.methods(subchannel, C.NVC86F_SEM_ADDR_LO, va & 0xFFFFFFFF, va >> 32, value & 0xFFFFFFFF, value >> 32, ex)
    return i


def sem_acquire(pb: PushBuffer, subchannel: int, va: int, value: int) -> int:
    """Waits until the 64-bit value at va is >= value (ACQ_CIRC_GEQ with a 64-bit payload); returns the
    index of SEM_ADDR_LO (address at +0/+1, value at +2/+3)."""
    ex = (C.SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ | C.SEM_EXECUTE_PAYLOAD_SIZE_64BIT | C.SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN)
    return pb.methods(subchannel, C.NVC86F_SEM_ADDR_LO, va & 0xFFFFFFFF, va >> 32, value & 0xFFFFFFFF, value >> 32, ex)


def patch_address(words: array, i: int, va: int) -> None:
    words[i], words[i + 1] = va & 0xFFFFFFFF, va >> 32


def patch_value(words: array, i: int, value: int) -> None:
    """A 64-bit payload at SEM_PAYLOAD_LO/HI = words[i + 2], words[i + 3] of a semaphore built above."""
    words[i + 2], words[i + 3] = value & 0xFFFFFFFF, value >> 32


# ------------------------------------------------------------------------------------------ copy engine
COPY_LAUNCH = (C.LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED | C.LAUNCH_DMA_FLUSH_ENABLE
               | C.LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH | C.LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH)


def copy(pb: PushBuffer, dst: int, src: int, n: int) -> int:
    """A linear copy of n bytes (virtual addresses, pitch layout, one line); returns the index of
    OFFSET_IN_UPPER (in hi, lo at +0/+1, out hi, lo at +2/+3), then LINE_LENGTH_IN and LAUNCH_DMA."""
    if not 0 < n < 1 << 32:
        raise ValueError(f"copy of {n} bytes: one LAUNCH_DMA line moves 1 byte to 4 GiB - 1")
    i = pb.methods(C.SUBCHANNEL_COPY, C.NVC8B5_OFFSET_IN_UPPER, src >> 32, src & 0xFFFFFFFF, dst >> 32,
                   dst & 0xFFFFFFFF)
    pb.methods(C.SUBCHANNEL_COPY, C.NVC8B5_LINE_LENGTH_IN, n)
    pb.methods(C.SUBCHANNEL_COPY, C.NVC8B5_LAUNCH_DMA, COPY_LAUNCH)
    return i


def patch_copy(words: array, i: int, dst: int | None = None, src: int | None = None) -> None:
    if src is not None:
        words[i], words[i + 1] = src >> 32, src & 0xFFFFFFFF
    if dst is not None:
        words[i + 2], words[i + 3] = dst >> 32, dst & 0xFFFFFFFF


# ----------------------------------------------------------------------------------------------- QMD
class QMD:
    """A QMD V03_00 (HOPPER_COMPUTE_A's launch descriptor, 256 bytes) built field by field."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0

    def set(self, name: str, v: int) -> None:
        lo, hi = C.QMD_FIELDS[name]
        width = hi - lo + 1
        if not 0 <= v < 1 << width:
            raise ValueError(f"QMD field {name} is {width} bits; {v} does not fit")
        self.value = (self.value & ~(((1 << width) - 1) << lo)) | (v << lo)

    def get(self, name: str) -> int:
        lo, hi = C.QMD_FIELDS[name]
        return (self.value >> lo) & ((1 << (hi - lo + 1)) - 1)

    def to_bytes(self) -> bytes:
        return self.value.to_bytes(C.QMD_BYTES, "little")


# Shared memory carveouts an SM can be configured with on sm_90, in KiB (CUDA C Programming Guide,
# compute capability 9.0: 0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
SM90_CARVEOUTS_KIB = (8, 16, 32, 64, 100, 132, 164, 196, 228)


def shared_config(shared_bytes: int) -> int:
    """The *_SM_CONFIG_SHARED_MEM_SIZE value for a CTA's shared memory: the smallest carveout that
    holds it, in 4 KiB units plus one (assumption: the encoding is not in the public header)."""
    kib = next((c for c in SM90_CARVEOUTS_KIB if c * 1024 >= shared_bytes), None)
    if kib is None:
        raise ValueError(f"{shared_bytes} bytes of shared memory: an sm_90 SM has at most 228 KiB")
    return kib * 1024 // 4096 + 1


def build_qmd(program_va: int, grid, block, shared_bytes: int, registers: int, cb0_va: int, cb0_bytes: int,
              barriers: int = 1) -> QMD:
    """A QMD for one launch: the program, grid (CTAs) and block (threads), shared memory, registers and
    constant bank 0 (the kernel's parameters); caches invalidated before it (INVALIDATE_*)."""
    q = QMD()
    q.set("QMD_MAJOR_VERSION", C.QMD_MAJOR_VERSION_V03)
    q.set("QMD_VERSION", C.QMD_VERSION_V03_00)
    for f in ("INVALIDATE_TEXTURE_HEADER_CACHE", "INVALIDATE_TEXTURE_SAMPLER_CACHE", "INVALIDATE_TEXTURE_DATA_CACHE",
              "INVALIDATE_SHADER_DATA_CACHE", "INVALIDATE_INSTRUCTION_CACHE", "INVALIDATE_SHADER_CONSTANT_CACHE"):
        q.set(f, 1)
    q.set("CWD_MEMBAR_TYPE", 1)              # L1_SYSMEMBAR: the CTA's writes are visible system-wide after it
    q.set("API_VISIBLE_CALL_LIMIT", 1)       # NO_CHECK
    q.set("SAMPLER_INDEX", 1)                # VIA_HEADER_INDEX
    set_grid(q, grid, block)
    q.set("SHARED_MEMORY_SIZE", (shared_bytes + 127) & ~127)   # assumption: 128-byte granules
    cfg = shared_config(shared_bytes)
    q.set("MIN_SM_CONFIG_SHARED_MEM_SIZE", cfg)
    q.set("MAX_SM_CONFIG_SHARED_MEM_SIZE", shared_config(228 * 1024))
    q.set("TARGET_SM_CONFIG_SHARED_MEM_SIZE", cfg)
    q.set("REGISTER_COUNT_V", registers)
    q.set("BARRIER_COUNT", barriers)
    q.set("PROGRAM_ADDRESS_LOWER", program_va & 0xFFFFFFFF)
    q.set("PROGRAM_ADDRESS_UPPER", program_va >> 32)
    q.set("CONSTANT_BUFFER_VALID0", 1)
    q.set("CONSTANT_BUFFER_ADDR_LOWER0", cb0_va & 0xFFFFFFFF)
    q.set("CONSTANT_BUFFER_ADDR_UPPER0", cb0_va >> 32)
    q.set("CONSTANT_BUFFER_SIZE_SHIFTED4_0", (cb0_bytes + 15) >> 4)
    return q


def set_grid(q: QMD, grid, block) -> None:
    q.set("CTA_RASTER_WIDTH", grid[0])
    q.set("CTA_RASTER_HEIGHT", grid[1])
    q.set("CTA_RASTER_DEPTH", grid[2])
    q.set("CTA_THREAD_DIMENSION0", block[0])
    q.set("CTA_THREAD_DIMENSION1", block[1])
    q.set("CTA_THREAD_DIMENSION2", block[2])


# The fields a launch changes, written straight into a copy of the program's QMD (byte-aligned 16/32-bit
# fields in the V03_00 layout; an address's upper bits are 17 wide, of which GPU VAs below 2**48 use 16)
_PATCH = {}
for _name, _width in (("CTA_RASTER_WIDTH", 32), ("CTA_RASTER_HEIGHT", 16), ("CTA_RASTER_DEPTH", 16),
                      ("CTA_THREAD_DIMENSION0", 16), ("CTA_THREAD_DIMENSION1", 16), ("CTA_THREAD_DIMENSION2", 16),
                      ("CONSTANT_BUFFER_ADDR_LOWER0", 32), ("CONSTANT_BUFFER_ADDR_UPPER0", 16)):
    _lo, _hi = C.QMD_FIELDS[_name]
    assert _lo % 8 == 0 and _hi - _lo + 1 >= _width, _name
    _PATCH[_name] = (_lo // 8, {16: "<H", 32: "<I"}[_width])
_GRID = struct.Struct("<I")
_OFF_W, _OFF_H, _OFF_D = (_PATCH[n][0] for n in ("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"))
_OFF_T = _PATCH["CTA_THREAD_DIMENSION0"][0]
_OFF_CB = _PATCH["CONSTANT_BUFFER_ADDR_LOWER0"][0]
assert (_PATCH["CTA_THREAD_DIMENSION1"][0], _PATCH["CTA_THREAD_DIMENSION2"][0]) == (_OFF_T + 2, _OFF_T + 4)
assert _PATCH["CONSTANT_BUFFER_ADDR_UPPER0"][0] == _OFF_CB + 4


def patch_qmd(view, off: int, grid=None, block=None, cb0_va: int | None = None) -> None:
    """Writes a launch's grid, block and constant bank address into the QMD at view[off:]: the per-launch
    part of a program's QMD template (build_qmd made the rest once)."""
    if grid is not None:
        if grid[1] > 0xFFFF or grid[2] > 0xFFFF or grid[0] > 0xFFFFFFFF:
            raise ValueError(f"grid {tuple(grid)}: CTA_RASTER_HEIGHT/DEPTH are 16 bits, WIDTH 32")
        struct.pack_into("<I", view, off + _OFF_W, grid[0])
        struct.pack_into("<H", view, off + _OFF_H, grid[1])
        struct.pack_into("<H", view, off + _OFF_D, grid[2])
    if block is not None:
        struct.pack_into("<HHH", view, off + _OFF_T, *block)
    if cb0_va is not None:
        if cb0_va >> 48:
            raise ValueError(f"constant bank at {cb0_va:#x}: above the 48-bit addresses nvdrv uses")
        struct.pack_into("<IH", view, off + _OFF_CB, cb0_va & 0xFFFFFFFF, cb0_va >> 32)


def launch(pb: PushBuffer, qmd_va: int) -> int:
    """SEND_PCAS_A with the QMD's address >> 8, then SEND_SIGNALING_PCAS2_B INVALIDATE_COPY_SCHEDULE;
    returns the index of the address word."""
    if qmd_va & 0xFF:
        raise ValueError(f"QMD at {qmd_va:#x}: SEND_PCAS_A takes a 256-byte aligned address")
    i = pb.methods(C.SUBCHANNEL_COMPUTE, C.NVCBC0_SEND_PCAS_A, qmd_va >> 8)
    pb.methods(C.SUBCHANNEL_COMPUTE, C.NVCBC0_SEND_SIGNALING_PCAS2_B, C.PCAS_ACTION_INVALIDATE_COPY_SCHEDULE)
    return i
