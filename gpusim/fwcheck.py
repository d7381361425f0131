"""The simulated PSP's own reader of the pinned firmware: the exact bytes each PSP load must carry.

Hand-written from the header layouts of amdgpu_ucode.h (every offset below is read off that header) and
from how upstream amdgpu cuts each file into PSP loads: amdgpu_ucode.c amdgpu_ucode_init_single_fw (which
header field gives each load's offset and size), amdgpu_rlc.c amdgpu_gfx_rlc_init_microcode_v2_* (the RLC
pieces) and amdgpu_psp.c parse_sos_bin_descriptor (the sos package). It deliberately shares no code with
the driver's parser (amdrv/firmware/headers.py): if that parser takes a wrong offset or size, the payload it
hands the PSP differs from the bytes here and the simulated PSP rejects it. The pinned files are located
through the driver's firmware store (the cache), which verifies size and sha256 and nothing else.
"""
import struct
from dataclasses import dataclass
from typing import Callable

from amdrv.autogen import psp as P
from amdrv.autogen import ucode as U
from amdrv.chips import NAVI31, Chip


class FirmwareLayoutError(Exception):
    """A pinned file does not have the layout its header promises (the simulator cannot check loads)."""


@dataclass(frozen=True)
class Piece:
    """One PSP load: `size` bytes at `offset` of firmware `file`."""
    name: str
    file: str
    offset: int
    size: int
    data: bytes
    version: int = 0     # sos components: the package descriptor's fw_version; others: the file's ucode_version


def _u16(b: bytes, off: int) -> int:
    return struct.unpack_from("<H", b, off)[0]


def _u32(b: bytes, off: int) -> int:
    return struct.unpack_from("<I", b, off)[0]


# struct common_firmware_header (32 bytes): size_bytes +0, header_size_bytes +4, header_version_major +8 (u16),
# header_version_minor +10 (u16), ip_version_major +12, ip_version_minor +14, ucode_version +16,
# ucode_size_bytes +20, ucode_array_offset_bytes +24, crc32 +28.
_HDR_SIZE_BYTES, _HDR_VER_MAJOR, _HDR_VER_MINOR, _UCODE_VERSION, _UCODE_SIZE, _UCODE_OFFSET = 0, 8, 10, 16, 20, 24

# What each LOAD_IP_FW type is cut from: (file part, how). Offsets are those of the header structs:
#  gfx_firmware_header_v2_0 (RS64 PFP/ME/MEC): ucode_size_bytes +36, data_size_bytes +44, data_offset_bytes +48;
#    the code starts at the common ucode_array_offset_bytes; every Pn stack is the same data section.
#  mes_firmware_header_v1_0: mes_ucode_size_bytes +36, mes_ucode_offset_bytes +40,
#    mes_ucode_data_size_bytes +48, mes_ucode_data_offset_bytes +52.
#  imu_firmware_header_v1_0: imu_iram_ucode_size_bytes +32, imu_dram_ucode_size_bytes +40; IRAM starts at
#    ucode_array_offset_bytes and DRAM right after it (upstream ignores the *_offset_bytes fields).
#  sdma_firmware_header_v2_0: ctx_ucode_size_bytes +36 (TH0, at ucode_array_offset_bytes),
#    ctl_ucode_offset +48, ctl_ucode_size_bytes +52 (TH1).
#  rlc_firmware_header_v2_1..v2_4: (size, offset) pairs, offsets from the start of the file.
_RS64 = {"pfp": ("RS64_PFP", ("RS64_PFP_P0_STACK", "RS64_PFP_P1_STACK")),
         "me": ("RS64_ME", ("RS64_ME_P0_STACK", "RS64_ME_P1_STACK")),
         "mec": ("RS64_MEC", ("RS64_MEC_P0_STACK", "RS64_MEC_P1_STACK", "RS64_MEC_P2_STACK",
                              "RS64_MEC_P3_STACK"))}
_MES = {"mes": ("CP_MES", "MES_STACK"), "mes1": ("CP_MES_KIQ", "MES_KIQ_STACK")}
# rlc header minor version -> [(fw type, size field offset, offset field offset)]
_RLC = (
    (1, "RLC_RESTORE_LIST_SRM_CNTL", 116, 120),
    (1, "RLC_RESTORE_LIST_GPM_MEM", 132, 136),
    (1, "RLC_RESTORE_LIST_SRM_MEM", 148, 152),
    (2, "RLC_IRAM", 156, 160),
    (2, "RLC_DRAM_BOOT", 164, 168),
    (3, "RLC_P", 180, 184),
    (3, "RLC_V", 196, 200),
    (4, "GLOBAL_TAP_DELAYS", 204, 208),
    (4, "SE0_TAP_DELAYS", 212, 216),
    (4, "SE1_TAP_DELAYS", 220, 224),
    (4, "SE2_TAP_DELAYS", 228, 232),
    (4, "SE3_TAP_DELAYS", 236, 240),
)
# psp_firmware_header_v2_0: psp_fw_bin_count +32, then psp_fw_bin_desc[16 bytes] from +36:
# fw_type +0, fw_version +4, offset_bytes +8 (from ucode_array_offset_bytes), size_bytes +12.
_SOS_COUNT, _SOS_DESCS, _SOS_DESC_SIZE = 32, 36, 16
_UCODE_MAX_PSP_PACKAGING = 16   # amdgpu_ucode.h bound on psp_fw_bin_count

SOS_NAMES = {U.PSP_FW_TYPE_PSP_SOS: "SOS", U.PSP_FW_TYPE_PSP_SYS_DRV: "SYS_DRV", U.PSP_FW_TYPE_PSP_KDB: "KDB",
             U.PSP_FW_TYPE_PSP_TOC: "TOC", U.PSP_FW_TYPE_PSP_SPL: "SPL", U.PSP_FW_TYPE_PSP_RL: "RL",
             U.PSP_FW_TYPE_PSP_SOC_DRV: "SOC_DRV", U.PSP_FW_TYPE_PSP_INTF_DRV: "INTF_DRV",
             U.PSP_FW_TYPE_PSP_DBG_DRV: "DBG_DRV", U.PSP_FW_TYPE_PSP_RAS_DRV: "RAS_DRV"}


def fw_type_name(fw_type: int) -> str:
    """'RS64_MEC' for GFX_FW_TYPE_RS64_MEC; the number in words when it is not a psp_gfx_fw_type."""
    names = P.ENUMS["psp_gfx_fw_type"]
    for n in names:
        if getattr(P, n) == fw_type:
            return n.removeprefix("GFX_FW_TYPE_")
    return f"unknown fw type {fw_type}"


def _default_reader() -> Callable[[str], bytes]:
    from amdrv.firmware.store import FirmwareStore   # locating the pinned files only
    return FirmwareStore().read


class PinnedFirmware:
    """The pieces of a chip's pinned firmware that the PSP loads, cut by the simulator's own reading.

    `read(name) -> bytes` supplies a pinned file (default: the driver's firmware store/cache).
    """

    def __init__(self, chip: Chip = NAVI31, read: Callable[[str], bytes] | None = None):
        self.chip = chip
        self._read = read or _default_reader()
        gc, mp0, mp1, sdma = (chip.ip_tag(b) for b in ("gc", "mp0", "mp1", "sdma"))
        self.files = {"sos": f"psp_{mp0}_sos.bin", "smu": f"smu_{mp1}.bin", "sdma": f"sdma_{sdma}.bin",
                      **{p: f"gc_{gc}_{p}.bin" for p in ("pfp", "me", "mec", "mes", "mes1", "imu", "rlc")}}
        self._ip: dict[int, Piece] | None = None
        self._sos: dict[int, Piece] | None = None
        self._cache: dict[str, bytes] = {}

    def _file(self, part: str) -> tuple[str, bytes]:
        name = self.files[part]
        if name not in self._cache:
            data = self._read(name)
            if len(data) < 32 or _u32(data, _HDR_SIZE_BYTES) != len(data):
                raise FirmwareLayoutError(f"gpusim firmware: {name} header size_bytes does not match its "
                                          f"{len(data)} bytes")
            self._cache[name] = data
        return name, self._cache[name]

    @staticmethod
    def _piece(kind: str, name: str, data: bytes, offset: int, size: int, version: int = 0) -> Piece:
        if offset + size > len(data):
            raise FirmwareLayoutError(f"gpusim firmware: {name}: {kind} at {offset:#x}+{size:#x} runs past the "
                                      f"end of the {len(data)}-byte file")
        return Piece(kind, name, offset, size, bytes(data[offset:offset + size]), version)

    def _ip_pieces(self) -> dict[int, Piece]:
        out: dict[int, Piece] = {}

        def add(kind, name, data, offset, size):
            if size:   # upstream skips zero-sized loads (fw_load_skip_check)
                out[getattr(P, "GFX_FW_TYPE_" + kind)] = self._piece(kind, name, data, offset, size,
                                                                     _u32(data, _UCODE_VERSION))

        for part, (code, stacks) in _RS64.items():
            name, d = self._file(part)
            add(code, name, d, _u32(d, _UCODE_OFFSET), _u32(d, 36))
            for stack in stacks:
                add(stack, name, d, _u32(d, 48), _u32(d, 44))
        for part, (code, stack) in _MES.items():
            name, d = self._file(part)
            add(code, name, d, _u32(d, 40), _u32(d, 36))
            add(stack, name, d, _u32(d, 52), _u32(d, 48))
        name, d = self._file("imu")
        base, iram = _u32(d, _UCODE_OFFSET), _u32(d, 32)
        add("IMU_I", name, d, base, iram)
        add("IMU_D", name, d, base + iram, _u32(d, 40))
        name, d = self._file("sdma")
        add("SDMA_UCODE_TH0", name, d, _u32(d, _UCODE_OFFSET), _u32(d, 36))
        add("SDMA_UCODE_TH1", name, d, _u32(d, 48), _u32(d, 52))
        name, d = self._file("rlc")
        if _u16(d, _HDR_VER_MAJOR) != 2:
            raise FirmwareLayoutError(f"gpusim firmware: {name} has rlc header v{_u16(d, _HDR_VER_MAJOR)}, "
                                      "gfx11 needs v2.x")
        minor = _u16(d, _HDR_VER_MINOR)
        add("RLC_G", name, d, _u32(d, _UCODE_OFFSET), _u32(d, _UCODE_SIZE))
        for since, kind, size_at, off_at in _RLC:
            if minor >= since:
                add(kind, name, d, _u32(d, off_at), _u32(d, size_at))
        name, d = self._file("smu")
        add("SMU", name, d, _u32(d, _UCODE_OFFSET), _u32(d, _UCODE_SIZE))
        # psp_rl_load sends the sos package's RL component as LOAD_IP_FW of type REG_LIST
        rl = self.sos_pieces().get(U.PSP_FW_TYPE_PSP_RL)
        if rl is not None:
            out[P.GFX_FW_TYPE_REG_LIST] = rl
        return out

    def _sos_pieces(self) -> dict[int, Piece]:
        name, d = self._file("sos")
        if _u16(d, _HDR_VER_MAJOR) != 2:
            raise FirmwareLayoutError(f"gpusim firmware: {name} has psp header v{_u16(d, _HDR_VER_MAJOR)}, "
                                      "PSP 13.0.x packages its components with v2.0")
        count = _u32(d, _SOS_COUNT)
        if count >= _UCODE_MAX_PSP_PACKAGING:
            raise FirmwareLayoutError(f"gpusim firmware: {name} claims {count} packed components")
        base = _u32(d, _UCODE_OFFSET)
        out = {}
        for i in range(count):
            at = _SOS_DESCS + i * _SOS_DESC_SIZE
            fw_type, version, offset, size = (_u32(d, at + k) for k in (0, 4, 8, 12))
            if fw_type not in SOS_NAMES:
                raise FirmwareLayoutError(f"gpusim firmware: {name} descriptor {i} has unknown type {fw_type}")
            out[fw_type] = self._piece(SOS_NAMES[fw_type], name, d, base + offset, size, version)
        return out

    def ip_fw_pieces(self) -> dict[int, Piece]:
        """GFX_FW_TYPE_* -> Piece for every LOAD_IP_FW payload the chip's firmware provides."""
        if self._ip is None:
            self._ip = self._ip_pieces()
        return self._ip

    def sos_pieces(self) -> dict[int, Piece]:
        """PSP_FW_TYPE_PSP_* -> Piece for every component packed in the sos file."""
        if self._sos is None:
            self._sos = self._sos_pieces()
        return self._sos

    def ip_fw(self, fw_type: int) -> bytes:
        """The exact LOAD_IP_FW payload of a GFX_FW_TYPE_*; KeyError when the chip has none of that type."""
        return self.ip_fw_pieces()[fw_type].data

    def sos_component(self, psp_fw_type: int) -> bytes:
        """The exact bytes of a packed sos component (PSP_FW_TYPE_PSP_SOS, _SYS_DRV, _KDB, _TOC, ...)."""
        return self.sos_pieces()[psp_fw_type].data
