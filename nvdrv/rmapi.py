"""The RM ioctl interface of the NVIDIA kernel module: escape codes, parameter structures, status codes.

Provenance (facts only): NVIDIA/open-gpu-kernel-modules tag 580.105.08 --
src/nvidia/arch/nvalloc/unix/include/nv_escape.h and nv-ioctl-numbers.h (escape numbers), nv-ioctl.h
(nv_ioctl_rm_api_version_t, nv_ioctl_register_fd_t), src/common/sdk/nvidia/inc/nvos.h (NVOS00/02/21/33/34/
46/47/54 and the allocation parameter structures), alloc/alloc_channel.h (NV_CHANNEL_ALLOC_PARAMS),
class/cl0080.h, cl2080.h, clb0b5sw.h, cl0070.h, ctrl/ctrl0000/ctrl0000gpu.h, ctrl/ctrl2080/ctrl2080gpu.h,
ctrl/ctrla06c.h, ctrl/ctrlc36f.h (control commands), nvstatuscodes.h (status codes),
kernel-open/nvidia-uvm/uvm_ioctl.h and uvm_linux_ioctl.h (UVM). Layouts are ctypes structures with the
natural x86-64/aarch64 alignment the headers' NV_ALIGN_BYTES(8) spell out; tests pin their sizes.

How an escape reaches RM (kernel-open/nvidia/nv.c nvidia_ioctl): the ioctl number is
_IOWR('F', NV_IOCTL_BASE + n or the NV_ESC_RM_* number, sizeof(params)); the module reads the size from
the number. A size RM does not expect fails the ioctl (EINVAL, escape.c RmIoctl: "dataSize !=
sizeof(*pApi)"); an ioctl RM accepts returns 0 and its result is the `status` field.
"""
from __future__ import annotations

import ctypes
from ctypes import c_char, c_int32, c_uint8, c_uint16, c_uint32, c_uint64

NvU8, NvU16, NvU32, NvU64, NvS32 = c_uint8, c_uint16, c_uint32, c_uint64, c_int32
NvHandle = NvV32 = NvU32
NvP64 = c_uint64                       # a user pointer in a 64-bit field
NvBool = c_uint8

RM_VERSION = "580.105.08"             # the headers these tables come from

# ------------------------------------------------------------------------------------- escape codes
NV_IOCTL_MAGIC = ord("F")
NV_IOCTL_BASE = 200
NV_ESC_CARD_INFO = NV_IOCTL_BASE + 0
NV_ESC_REGISTER_FD = NV_IOCTL_BASE + 1
NV_ESC_ALLOC_OS_EVENT = NV_IOCTL_BASE + 6
NV_ESC_FREE_OS_EVENT = NV_IOCTL_BASE + 7
NV_ESC_STATUS_CODE = NV_IOCTL_BASE + 9
NV_ESC_CHECK_VERSION_STR = NV_IOCTL_BASE + 10
NV_ESC_IOCTL_XFER_CMD = NV_IOCTL_BASE + 11
NV_ESC_ATTACH_GPUS_TO_FD = NV_IOCTL_BASE + 12
NV_ESC_SYS_PARAMS = NV_IOCTL_BASE + 14
NV_ESC_WAIT_OPEN_COMPLETE = NV_IOCTL_BASE + 18
NV_ESC_RM_ALLOC_MEMORY = 0x27
NV_ESC_RM_FREE = 0x29
NV_ESC_RM_CONTROL = 0x2A
NV_ESC_RM_ALLOC = 0x2B
NV_ESC_RM_DUP_OBJECT = 0x34
NV_ESC_RM_MAP_MEMORY = 0x4E
NV_ESC_RM_UNMAP_MEMORY = 0x4F
NV_ESC_RM_MAP_MEMORY_DMA = 0x57
NV_ESC_RM_UNMAP_MEMORY_DMA = 0x58

ESCAPE_NAMES = {v: k for k, v in list(globals().items()) if k.startswith("NV_ESC_")}

# asm-generic/ioctl.h: dir 31:30 (read|write = 3), size 29:16, type 15:8, nr 7:0
_IOC_WRITE, _IOC_READ = 1, 2


def ioc(direction: int, typ: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (typ << 8) | nr


def nv_iowr(nr: int, size: int) -> int:
    """The ioctl number of escape `nr` with a `size`-byte parameter structure."""
    return ioc(_IOC_READ | _IOC_WRITE, NV_IOCTL_MAGIC, nr, size)


def ioc_nr(request: int) -> int:
    return request & 0xFF


def ioc_size(request: int) -> int:
    return (request >> 16) & 0x3FFF


def ioc_type(request: int) -> int:
    return (request >> 8) & 0xFF


# ------------------------------------------------------------------------------------- structures
class _S(ctypes.Structure):
    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n, *_ in self._fields_)})"


NV_RM_API_VERSION_STRING_LENGTH = 64
NV_RM_API_VERSION_CMD_STRICT = 0
NV_RM_API_VERSION_CMD_RELAXED = ord("1")
NV_RM_API_VERSION_CMD_QUERY = ord("2")
NV_RM_API_VERSION_REPLY_UNRECOGNIZED = 0
NV_RM_API_VERSION_REPLY_RECOGNIZED = 1


class nv_ioctl_rm_api_version_t(_S):
    _fields_ = [("cmd", NvU32), ("reply", NvU32), ("versionString", c_char * NV_RM_API_VERSION_STRING_LENGTH)]


class nv_ioctl_register_fd_t(_S):
    _fields_ = [("ctl_fd", c_int32)]


class NVOS00_PARAMETERS(_S):            # NV_ESC_RM_FREE
    _fields_ = [("hRoot", NvHandle), ("hObjectParent", NvHandle), ("hObjectOld", NvHandle), ("status", NvV32)]


class NVOS02_PARAMETERS(_S):            # NV_ESC_RM_ALLOC_MEMORY (inside nv_ioctl_nvos02_parameters_with_fd)
    _fields_ = [("hRoot", NvHandle), ("hObjectParent", NvHandle), ("hObjectNew", NvHandle), ("hClass", NvV32),
                ("flags", NvV32), ("pMemory", NvP64), ("limit", NvU64), ("status", NvV32)]


class nv_ioctl_nvos02_parameters_with_fd(_S):   # nv-unix-nvos-params-wrappers.h
    _fields_ = [("params", NVOS02_PARAMETERS), ("fd", c_int32)]


class NVOS21_PARAMETERS(_S):            # NV_ESC_RM_ALLOC
    _fields_ = [("hRoot", NvHandle), ("hObjectParent", NvHandle), ("hObjectNew", NvHandle), ("hClass", NvV32),
                ("pAllocParms", NvP64), ("paramsSize", NvU32), ("status", NvV32)]


class NVOS64_PARAMETERS(_S):            # NV_ESC_RM_ALLOC with requested rights (the other accepted size)
    _fields_ = [("hRoot", NvHandle), ("hObjectParent", NvHandle), ("hObjectNew", NvHandle), ("hClass", NvV32),
                ("pAllocParms", NvP64), ("pRightsRequested", NvP64), ("paramsSize", NvU32), ("flags", NvU32),
                ("status", NvV32)]


class NVOS33_PARAMETERS(_S):            # NV_ESC_RM_MAP_MEMORY (inside nv_ioctl_nvos33_parameters_with_fd)
    _fields_ = [("hClient", NvHandle), ("hDevice", NvHandle), ("hMemory", NvHandle), ("offset", NvU64),
                ("length", NvU64), ("pLinearAddress", NvP64), ("status", NvU32), ("flags", NvU32)]


class nv_ioctl_nvos33_parameters_with_fd(_S):   # nv-unix-nvos-params-wrappers.h
    _fields_ = [("params", NVOS33_PARAMETERS), ("fd", c_int32)]


class NVOS34_PARAMETERS(_S):            # NV_ESC_RM_UNMAP_MEMORY
    _fields_ = [("hClient", NvHandle), ("hDevice", NvHandle), ("hMemory", NvHandle), ("pLinearAddress", NvP64),
                ("status", NvU32), ("flags", NvU32)]


class NVOS46_PARAMETERS(_S):            # NV_ESC_RM_MAP_MEMORY_DMA
    _fields_ = [("hClient", NvHandle), ("hDevice", NvHandle), ("hDma", NvHandle), ("hMemory", NvHandle),
                ("offset", NvU64), ("length", NvU64), ("flags", NvV32), ("flags2", NvV32), ("kindOverride", NvV32),
                ("dmaOffset", NvU64), ("status", NvV32)]


class NVOS47_PARAMETERS(_S):            # NV_ESC_RM_UNMAP_MEMORY_DMA
    _fields_ = [("hClient", NvHandle), ("hDevice", NvHandle), ("hDma", NvHandle), ("hMemory", NvHandle),
                ("flags", NvV32), ("dmaOffset", NvU64), ("size", NvU64), ("status", NvV32)]


class NVOS54_PARAMETERS(_S):            # NV_ESC_RM_CONTROL
    _fields_ = [("hClient", NvHandle), ("hObject", NvHandle), ("cmd", NvV32), ("flags", NvU32), ("params", NvP64),
                ("paramsSize", NvU32), ("status", NvV32)]


# NVOS02 flags (nvos.h): PHYSICALITY 7:4 (CONTIGUOUS 0, NONCONTIGUOUS 1), LOCATION 11:8 (PCI 0, VIDEO 2...),
# COHERENCY 15:12 (UNCACHED 0, CACHED 1, WRITE_COMBINE 2...), MAPPING 31:30 (DEFAULT 0, NO_MAP 1, NEVER_MAP 2)
NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS = 1 << 4
NVOS02_FLAGS_COHERENCY_CACHED = 1 << 12
NVOS02_FLAGS_MAPPING_NO_MAP = 1 << 30

# NVOS46 flags (nvos.h): DMA_OFFSET_FIXED 15:15, CACHE_SNOOP 4:4
NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE = 1 << 15
NVOS46_FLAGS_CACHE_SNOOP_ENABLE = 1 << 4

# ----------------------------------------------------------------------------- allocation parameters
NV_MAX_SUBDEVICES = 8                 # nvlimits.h
NV_MAX_DEVICES = 32


class NV0080_ALLOC_PARAMETERS(_S):
    _fields_ = [("deviceId", NvU32), ("hClientShare", NvHandle), ("hTargetClient", NvHandle),
                ("hTargetDevice", NvHandle), ("flags", NvV32), ("vaSpaceSize", NvU64), ("vaStartInternal", NvU64),
                ("vaLimitInternal", NvU64), ("vaMode", NvV32)]


class NV2080_ALLOC_PARAMETERS(_S):
    _fields_ = [("subDeviceId", NvU32)]


class NV_VASPACE_ALLOCATION_PARAMETERS(_S):
    _fields_ = [("index", NvU32), ("flags", NvV32), ("vaSize", NvU64), ("vaStartInternal", NvU64),
                ("vaLimitInternal", NvU64), ("bigPageSize", NvU32), ("vaBase", NvU64), ("pasid", NvU32)]


class NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(_S):
    _fields_ = [("hObjectError", NvHandle), ("hObjectEccError", NvHandle), ("hVASpace", NvHandle),
                ("engineType", NvU32), ("bIsCallingContextVgpuPlugin", NvBool)]


class NV_MEMORY_DESC_PARAMS(_S):
    _fields_ = [("base", NvU64), ("size", NvU64), ("addressSpace", NvU32), ("cacheAttrib", NvU32)]


class NV_CHANNEL_ALLOC_PARAMS(_S):
    _fields_ = [("hObjectError", NvHandle), ("hObjectBuffer", NvHandle), ("gpFifoOffset", NvU64),
                ("gpFifoEntries", NvU32), ("flags", NvU32), ("hContextShare", NvHandle), ("hVASpace", NvHandle),
                ("hUserdMemory", NvHandle * NV_MAX_SUBDEVICES), ("userdOffset", NvU64 * NV_MAX_SUBDEVICES),
                ("engineType", NvU32), ("cid", NvU32), ("subDeviceId", NvU32), ("hObjectEccError", NvHandle),
                ("instanceMem", NV_MEMORY_DESC_PARAMS), ("userdMem", NV_MEMORY_DESC_PARAMS),
                ("ramfcMem", NV_MEMORY_DESC_PARAMS), ("mthdbufMem", NV_MEMORY_DESC_PARAMS),
                ("hPhysChannelGroup", NvHandle), ("internalFlags", NvU32),
                ("errorNotifierMem", NV_MEMORY_DESC_PARAMS), ("eccErrorNotifierMem", NV_MEMORY_DESC_PARAMS),
                ("ProcessID", NvU32), ("SubProcessID", NvU32), ("encryptIv", NvU32 * 3), ("decryptIv", NvU32 * 3),
                ("hmacNonce", NvU32 * 8), ("tpcConfigID", NvU32)]


class NV_MEMORY_ALLOCATION_PARAMS(_S):   # NV01_MEMORY_LOCAL_USER, NV01_MEMORY_SYSTEM, NV50_MEMORY_VIRTUAL
    _fields_ = [("owner", NvU32), ("type", NvU32), ("flags", NvU32), ("width", NvU32), ("height", NvU32),
                ("pitch", NvS32), ("attr", NvU32), ("attr2", NvU32), ("format", NvU32), ("comprCovg", NvU32),
                ("zcullCovg", NvU32), ("rangeLo", NvU64), ("rangeHi", NvU64), ("size", NvU64), ("alignment", NvU64),
                ("offset", NvU64), ("limit", NvU64), ("address", NvP64), ("ctagOffset", NvU32),
                ("hVASpace", NvHandle), ("internalflags", NvU32), ("tag", NvU32), ("numaNode", NvS32)]


# NVOS32 allocation flags (nvos.h NVOS32_ALLOC_FLAGS_*) nvdrv uses
NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE = 0x00000100
NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE = 0x00000010
NVOS32_ALLOC_FLAGS_VIRTUAL = 0x00080000
NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM = 0x00010000
NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED = 0x00008000
NVOS32_TYPE_IMAGE = 0
# NVOS32 attr: PAGE_SIZE 24:23 (HUGE 3), LOCATION 26:25 (VIDMEM 0, PCI 1), PHYSICALITY 28:27 (CONTIGUOUS 2)
NVOS32_ATTR_LOCATION_PCI = 1 << 25
NVOS32_ATTR_PAGE_SIZE_HUGE = 3 << 23
NVOS32_ATTR_PHYSICALITY_CONTIGUOUS = 2 << 27
NVOS32_ATTR2_GPU_CACHEABLE_YES = 1 << 2   # attr2 GPU_CACHEABLE 3:2 (DEFAULT 0, YES 1, NO 2)
NVOS32_ATTR2_GPU_CACHEABLE_NO = 2 << 2


class NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS(_S):
    _fields_ = [("offset", NvU64), ("limit", NvU64), ("hVASpace", NvHandle)]


class NVB0B5_ALLOCATION_PARAMETERS(_S):    # the copy class's engine (clb0b5sw.h)
    _fields_ = [("version", NvU32), ("engineType", NvU32)]


class NV_GR_ALLOCATION_PARAMETERS(_S):     # the compute class (nvos.h)
    _fields_ = [("version", NvU32), ("flags", NvU32), ("size", NvU32), ("caps", NvU32)]


class NV_HOPPER_USERMODE_A_PARAMS(_S):
    _fields_ = [("bBar1Mapping", NvBool), ("bPriv", NvBool)]


NVB0B5_ALLOCATION_PARAMETERS_VERSION_1 = 1
NV2080_ENGINE_TYPE_GRAPHICS = 0x1          # ctrl2080gpu.h NV2080_ENGINE_TYPE_GR0
NV2080_ENGINE_TYPE_COPY0 = 0x9             # NV2080_ENGINE_TYPE_COPY(0)

# ------------------------------------------------------------------------------------------ controls
NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 = 0x205
NV0000_CTRL_CMD_GPU_GET_PROBED_IDS = 0x214
NV0000_CTRL_GPU_INVALID_ID = 0xFFFFFFFF
NV2080_CTRL_CMD_GPU_GET_GID_INFO = 0x2080014A
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY = 0x2
NV2080_GPU_MAX_GID_LENGTH = 0x100
NVA06C_CTRL_CMD_GPFIFO_SCHEDULE = 0xA06C0101
NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN = 0xC36F0108


class NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS(_S):
    _fields_ = [("gpuIds", NvU32 * NV_MAX_DEVICES), ("excludedGpuIds", NvU32 * NV_MAX_DEVICES),
                ("gpuFlags", NvU32 * NV_MAX_DEVICES)]


class NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS(_S):
    _fields_ = [("gpuId", NvU32), ("gpuFlags", NvU32), ("deviceInstance", NvU32), ("subDeviceInstance", NvU32),
                ("sliStatus", NvU32), ("boardId", NvU32), ("gpuInstance", NvU32), ("numaId", NvS32)]


class NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(_S):
    _fields_ = [("index", NvU32), ("flags", NvU32), ("length", NvU32), ("data", NvU8 * NV2080_GPU_MAX_GID_LENGTH)]


class NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(_S):   # = NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS (ctrla06f.h)
    _fields_ = [("bEnable", NvBool), ("bSkipSubmit", NvBool), ("bSkipEnable", NvBool)]


class NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS(_S):
    _fields_ = [("workSubmitToken", NvU32)]


CONTROL_PARAMS = {
    NV0000_CTRL_CMD_GPU_GET_PROBED_IDS: NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS,
    NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2: NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS,
    NV2080_CTRL_CMD_GPU_GET_GID_INFO: NV2080_CTRL_GPU_GET_GID_INFO_PARAMS,
    NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS,
    NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS,
}

# ----------------------------------------------------------------------------------------------- UVM
# uvm_linux_ioctl.h / uvm_ioctl.h: on Linux the ioctl number is the plain command number
UVM_INITIALIZE = 0x30000001
UVM_DEINITIALIZE = 0x30000002
UVM_REGISTER_GPU = 37
UVM_INIT_FLAGS_MULTI_PROCESS_SHARING_MODE = 0x2


class UVM_INITIALIZE_PARAMS(_S):
    _fields_ = [("flags", NvU64), ("rmStatus", NvU32)]


class NvProcessorUuid(_S):
    _fields_ = [("uuid", NvU8 * 16)]


class UVM_REGISTER_GPU_PARAMS(_S):
    _fields_ = [("gpu_uuid", NvProcessorUuid), ("numaEnabled", NvBool), ("numaNodeId", NvS32), ("rmCtrlFd", NvS32),
                ("hClient", NvHandle), ("hSmcPartRef", NvHandle), ("rmStatus", NvU32)]


# -------------------------------------------------------------------------------------- status codes
# nvstatuscodes.h: the codes RM returns that nvdrv and the model name (others decode as their number)
STATUS = {
    "NV_OK": 0x00, "NV_ERR_BUFFER_TOO_SMALL": 0x02, "NV_ERR_GPU_IS_LOST": 0x0F, "NV_ERR_ILLEGAL_ACTION": 0x16,
    "NV_ERR_IN_USE": 0x17, "NV_ERR_INSERT_DUPLICATE_NAME": 0x19, "NV_ERR_INSUFFICIENT_RESOURCES": 0x1A,
    "NV_ERR_INSUFFICIENT_PERMISSIONS": 0x1B, "NV_ERR_INVALID_ADDRESS": 0x1E, "NV_ERR_INVALID_ARGUMENT": 0x1F,
    "NV_ERR_INVALID_CHANNEL": 0x21, "NV_ERR_INVALID_CLASS": 0x22, "NV_ERR_INVALID_CLIENT": 0x23,
    "NV_ERR_INVALID_COMMAND": 0x24, "NV_ERR_INVALID_DATA": 0x25, "NV_ERR_INVALID_DEVICE": 0x26,
    "NV_ERR_INVALID_FLAGS": 0x29, "NV_ERR_INVALID_INDEX": 0x2C, "NV_ERR_INVALID_LIMIT": 0x2E,
    "NV_ERR_INVALID_METHOD": 0x30, "NV_ERR_INVALID_OBJECT": 0x31, "NV_ERR_INVALID_OBJECT_BUFFER": 0x32,
    "NV_ERR_INVALID_OBJECT_HANDLE": 0x33, "NV_ERR_INVALID_OBJECT_NEW": 0x34, "NV_ERR_INVALID_OBJECT_OLD": 0x35,
    "NV_ERR_INVALID_OBJECT_PARENT": 0x36, "NV_ERR_INVALID_OFFSET": 0x37, "NV_ERR_INVALID_OWNER": 0x39,
    "NV_ERR_INVALID_PARAM_STRUCT": 0x3A, "NV_ERR_INVALID_PARAMETER": 0x3B, "NV_ERR_INVALID_POINTER": 0x3D,
    "NV_ERR_INVALID_REQUEST": 0x3F, "NV_ERR_INVALID_STATE": 0x40, "NV_ERR_INVALID_READ": 0x42,
    "NV_ERR_INVALID_WRITE": 0x43, "NV_ERR_NO_MEMORY": 0x51, "NV_ERR_NOT_READY": 0x55,
    "NV_ERR_NOT_SUPPORTED": 0x56, "NV_ERR_OBJECT_NOT_FOUND": 0x57, "NV_ERR_OPERATING_SYSTEM": 0x59,
    "NV_ERR_RC_ERROR": 0x60, "NV_ERR_STATE_IN_USE": 0x63, "NV_ERR_TIMEOUT": 0x65, "NV_ERR_GENERIC": 0xFFFF,
}
globals().update(STATUS)
STATUS_NAMES = {v: k for k, v in STATUS.items()}


def status_name(code: int) -> str:
    """NV_ERR_INVALID_OBJECT_HANDLE for 0x33; an unknown code as its hex number."""
    return STATUS_NAMES.get(code, f"RM status {code:#x}")


class RMError(OSError):
    """An RM call that failed: `status` is the RM status code, `call` what was asked, in words."""

    def __init__(self, call: str, status: int, hint: str = ""):
        self.call, self.status = call, status
        super().__init__(f"{call}: {status_name(status)} ({status:#x}){'; ' + hint if hint else ''}")
