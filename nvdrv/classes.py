"""NVIDIA RM class numbers and the Hopper methods nvdrv uses, as facts from the public headers.

Provenance (facts only, no header text): NVIDIA/open-gpu-kernel-modules tag 580.105.08,
src/common/sdk/nvidia/inc/class/cl*.h (class ids), clc86f.h / kernel-open/nvidia-uvm/clc36f.h, clb06f.h
(GPFIFO host methods, entry and method-header formats); NVIDIA/open-gpu-doc commit c8607fe,
classes/compute/clcbc0.h and clcbc0qmd.h (HOPPER_COMPUTE_A methods, QMD V03_00 layout),
classes/dma-copy/clc8b5.h (HOPPER_DMA_COPY_A). The headers are not on the build machine, so this is a
small committed table rather than generated; only what nvdrv and the model use is here.
"""
from __future__ import annotations

# ------------------------------------------------------------------------------------------ classes
NV01_ROOT = 0x0                       # cl0000.h; userspace allocations are forced to NV01_ROOT_CLIENT
NV01_ROOT_NON_PRIV = 0x1              # cl0001.h
NV01_ROOT_CLIENT = 0x41               # cl0041.h
NV01_DEVICE_0 = 0x80                  # cl0080.h
NV20_SUBDEVICE_0 = 0x2080             # cl2080.h
NV01_MEMORY_SYSTEM = 0x3E             # cl003e.h
NV01_MEMORY_LOCAL_USER = 0x40         # cl0040.h
NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x71   # cl0071.h: user pages described to RM (NV_ESC_RM_ALLOC_MEMORY)
NV50_MEMORY_VIRTUAL = 0x50A0          # cl50a0.h: a GPU VA range that NVOS46 maps memory into
FERMI_VASPACE_A = 0x90F1              # cl90f1.h
KEPLER_CHANNEL_GROUP_A = 0xA06C       # cla06c.h (a TSG)
HOPPER_CHANNEL_GPFIFO_A = 0xC86F      # clc86f.h
HOPPER_DMA_COPY_A = 0xC8B5            # clc8b5.h
HOPPER_COMPUTE_A = 0xCBC0             # clcbc0.h
HOPPER_USERMODE_A = 0xC661            # clc661.h

CLASS_NAMES = {v: k for k, v in list(globals().items()) if k.isupper() and isinstance(v, int) and k != "NV01_ROOT"}
CLASS_NAMES[NV01_ROOT] = "NV01_ROOT"


def class_name(cls: int) -> str:
    return CLASS_NAMES.get(cls, f"class {cls:#x}")


# ------------------------------------------------------------------------------------------ usermode
# clc361.h NVC361_NOTIFY_CHANNEL_PENDING (HOPPER_USERMODE_A keeps the VOLTA_USERMODE_A layout): a
# channel's work submit token written here tells the host to fetch its GPFIFO.
USERMODE_NOTIFY_CHANNEL_PENDING = 0x90
USERMODE_MAP_BYTES = 0x10000          # assumption: one 64 KiB page of the usermode region is mapped

# ------------------------------------------------------------------------------------------ USERD
# clc86f.h Nvc86fControl: the channel's USERD; the driver writes GPPut, the host updates GPGet.
USERD_GP_GET = 0x88
USERD_GP_PUT = 0x8C
USERD_BYTES = 0x200                   # sizeof(Nvc86fControl): 0x90 used bytes + Ignored05[0x5c]

# ------------------------------------------------------------------------------------------ GPFIFO
GP_ENTRY_BYTES = 8                    # NVC86F_GP_ENTRY__SIZE
# entry 0: GET 31:2 (pushbuffer address bits 31:2); entry 1: GET_HI 7:0, LENGTH 30:10 (dwords),
# LEVEL 9:9, SYNC 31:31
GP_ENTRY1_LENGTH_SHIFT, GP_ENTRY1_LENGTH_BITS = 10, 21
GP_ENTRY1_LEVEL_SUBROUTINE = 1 << 9

# method headers (clb06f.h NVB06F_DMA_*): SEC_OP 31:29, COUNT 28:16, SUBCHANNEL 15:13, ADDRESS 11:0 (method/4)
DMA_SEC_OP_INC_METHOD = 1
DMA_SEC_OP_NON_INC_METHOD = 3
DMA_SEC_OP_IMMD_DATA_METHOD = 4
DMA_SEC_OP_ONE_INC = 5
DMA_MAX_COUNT = (1 << 13) - 1

# subchannels nvdrv binds its engine classes to (SET_OBJECT on each); host methods (< 0x100) work on any
SUBCHANNEL_COMPUTE = 1
SUBCHANNEL_COPY = 4

# ------------------------------------------------------------------------------------- host methods
NVC86F_SET_OBJECT = 0x0000
NVC86F_MEM_OP_A, NVC86F_MEM_OP_B, NVC86F_MEM_OP_C, NVC86F_MEM_OP_D = 0x28, 0x2C, 0x30, 0x34
MEM_OP_D_OPERATION_SHIFT = 27         # MEM_OP_D_OPERATION 31:27
MEM_OP_D_OPERATION_MEMBAR = 0x5
MEM_OP_D_OPERATION_MMU_TLB_INVALIDATE = 0x9
MEM_OP_D_OPERATION_L2_FLUSH_DIRTY = 0x10
NVC86F_SEM_ADDR_LO = 0x5C             # OFFSET 31:2 (4-byte aligned)
NVC86F_SEM_ADDR_HI = 0x60             # OFFSET 24:0
NVC86F_SEM_PAYLOAD_LO = 0x64
NVC86F_SEM_PAYLOAD_HI = 0x68
NVC86F_SEM_EXECUTE = 0x6C
SEM_EXECUTE_OPERATION_MASK = 0x7      # OPERATION 2:0
SEM_EXECUTE_OPERATION_ACQUIRE = 0
SEM_EXECUTE_OPERATION_RELEASE = 1
SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ = 3
SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN = 1 << 12
SEM_EXECUTE_RELEASE_WFI_EN = 1 << 20  # clc36f.h RELEASE_WFI_EN
SEM_EXECUTE_PAYLOAD_SIZE_64BIT = 1 << 24   # clc36f.h PAYLOAD_SIZE_64BIT
SEM_EXECUTE_RELEASE_TIMESTAMP_EN = 1 << 25
NVC86F_WFI = 0x78

# --------------------------------------------------------------------------------- HOPPER_COMPUTE_A
NVCBC0_SET_OBJECT = 0x0000
NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_A = 0x02A0
NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_B = 0x02A4
NVCBC0_SEND_PCAS_A = 0x02B4           # QMD_ADDRESS_SHIFTED8 31:0
NVCBC0_SEND_SIGNALING_PCAS2_B = 0x02C0     # PCAS_ACTION 3:0
PCAS_ACTION_INVALIDATE_COPY_SCHEDULE = 0x3
NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_A = 0x07B0
NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_B = 0x07B4
NVCBC0_INVALIDATE_SHADER_CACHES = 0x021C

# --------------------------------------------------------------------------------- HOPPER_DMA_COPY_A
NVC8B5_SET_OBJECT = 0x0000
NVC8B5_SET_SEMAPHORE_A = 0x0240       # UPPER 24:0
NVC8B5_SET_SEMAPHORE_B = 0x0244       # LOWER 31:0
NVC8B5_SET_SEMAPHORE_PAYLOAD = 0x0248
NVC8B5_SET_SEMAPHORE_PAYLOAD_UPPER = 0x024C
NVC8B5_LAUNCH_DMA = 0x0300
NVC8B5_OFFSET_IN_UPPER = 0x0400
NVC8B5_OFFSET_IN_LOWER = 0x0404
NVC8B5_OFFSET_OUT_UPPER = 0x0408
NVC8B5_OFFSET_OUT_LOWER = 0x040C
NVC8B5_LINE_LENGTH_IN = 0x0418
# LAUNCH_DMA fields
LAUNCH_DMA_DATA_TRANSFER_TYPE_MASK = 0x3          # 1:0; NONE 0, PIPELINED 1, NON_PIPELINED 2
LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED = 2
LAUNCH_DMA_FLUSH_ENABLE = 1 << 2
LAUNCH_DMA_SEMAPHORE_TYPE_SHIFT = 3               # 4:3; NONE 0, ONE_WORD 1, FOUR_WORD (with timestamp) 2
LAUNCH_DMA_SEMAPHORE_TYPE_FOUR_WORD = 2
LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH = 1 << 7
LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH = 1 << 8
LAUNCH_DMA_MULTI_LINE_ENABLE = 1 << 9
LAUNCH_DMA_SRC_TYPE_PHYSICAL = 1 << 12
LAUNCH_DMA_DST_TYPE_PHYSICAL = 1 << 13
LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE_64BIT = 1 << 27  # 27:27; ONE_WORD 0

# ------------------------------------------------------------------------------------ QMD V03_00
# clcbc0qmd.h NVCBC0_QMDV03_00_*: (low bit, high bit) of each field in the 2048-bit QMD. Array fields
# (CONSTANT_BUFFER_*(i)) are given for bank 0 and their stride.
QMD_BYTES = 256
QMD_FIELDS = {
    "INVALIDATE_TEXTURE_HEADER_CACHE": (186, 186), "INVALIDATE_TEXTURE_SAMPLER_CACHE": (187, 187),
    "INVALIDATE_TEXTURE_DATA_CACHE": (188, 188), "INVALIDATE_SHADER_DATA_CACHE": (189, 189),
    "INVALIDATE_INSTRUCTION_CACHE": (190, 190), "INVALIDATE_SHADER_CONSTANT_CACHE": (191, 191),
    "CWD_MEMBAR_TYPE": (368, 369), "API_VISIBLE_CALL_LIMIT": (378, 378), "SAMPLER_INDEX": (382, 382),
    "CTA_RASTER_WIDTH": (384, 415), "CTA_RASTER_HEIGHT": (416, 431), "CTA_RASTER_DEPTH": (448, 463),
    "SHARED_MEMORY_SIZE": (544, 561), "MIN_SM_CONFIG_SHARED_MEM_SIZE": (562, 567),
    "MAX_SM_CONFIG_SHARED_MEM_SIZE": (569, 574), "QMD_VERSION": (576, 579), "QMD_MAJOR_VERSION": (580, 583),
    "CTA_THREAD_DIMENSION0": (592, 607), "CTA_THREAD_DIMENSION1": (608, 623),
    "CTA_THREAD_DIMENSION2": (624, 639), "CONSTANT_BUFFER_VALID0": (640, 640), "REGISTER_COUNT_V": (648, 656),
    "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (657, 662), "SHADER_LOCAL_MEMORY_LOW_SIZE": (736, 759),
    "BARRIER_COUNT": (763, 767),
    "RELEASE0_ADDRESS_LOWER": (768, 799), "RELEASE0_ADDRESS_UPPER": (800, 807), "RELEASE0_MEMBAR_TYPE": (819, 819),
    "RELEASE0_ENABLE": (823, 823), "RELEASE0_PAYLOAD64B": (829, 829), "RELEASE0_STRUCTURE_SIZE": (830, 831),
    "RELEASE0_PAYLOAD_LOWER": (832, 863), "RELEASE0_PAYLOAD_UPPER": (864, 895),
    "CONSTANT_BUFFER_ADDR_LOWER0": (1024, 1055), "CONSTANT_BUFFER_ADDR_UPPER0": (1056, 1072),
    "CONSTANT_BUFFER_SIZE_SHIFTED4_0": (1075, 1087),
    "PROGRAM_ADDRESS_LOWER": (1536, 1567), "PROGRAM_ADDRESS_UPPER": (1568, 1584),
    "SHADER_LOCAL_MEMORY_HIGH_SIZE": (1600, 1623),
}
CONSTANT_BUFFER_STRIDE_BITS = 64      # CONSTANT_BUFFER_*(i): i * 64 bits apart
QMD_MAJOR_VERSION_V03 = 3             # the layout's name (V03_00): major 3, minor 0 -- assumption that
QMD_VERSION_V03_00 = 0                # the fields carry the name's numbers
QMD_RELEASE_STRUCTURE_SIZE_ONE_WORD = 1
QMD_RELEASE_STRUCTURE_SIZE_FOUR_WORDS = 0
QMD_MAX_THREADS_PER_CTA = 1024        # CUDA's limit on sm_90 (threads per block)
QMD_CTA_RASTER_HEIGHT_MAX = (1 << 16) - 1   # 16-bit fields
QMD_CTA_RASTER_DEPTH_MAX = (1 << 16) - 1
CONSTANT_BANK0_PARAM_OFFSET = 0x210   # sm_90 kernel parameters start at c[0x0][0x210] -- assumption
                                      # from NVRTC output; nvdrv.cubin reports the real offset
