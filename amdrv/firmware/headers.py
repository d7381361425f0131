"""Readers for the amdgpu firmware file headers that the Navi31/Navi33 files use.

Each file starts with common_firmware_header; its header_version picks the layout that follows
(amdgpu_ucode.h). A parser returns the components the PSP loads, with the offsets and sizes upstream
amdgpu uses (amdgpu_ucode.c, amdgpu_psp.c, amdgpu_rlc.c) and the psp_gfx_fw_type each is loaded as.
"""
import re
from dataclasses import dataclass, field

from amdrv import structs
from amdrv.autogen import psp as psp_tables
from amdrv.autogen import ucode

from amdrv.firmware.store import FirmwareError


@dataclass(frozen=True)
class Component:
    name: str                 # what it is: "RS64_MEC", "RS64_MEC_P0_STACK", "SYS_DRV", "TA_ASD", ...
    offset: int               # byte offset in the file
    size: int
    version: int | None
    psp_fw_type: int | None   # psp_gfx_fw_type for LOAD_IP_FW / LOAD_TOC; None for bootloader and TA parts
    data: bytes = field(repr=False, compare=False)


@dataclass(frozen=True)
class FirmwareImage:
    name: str
    kind: str                 # "sos", "ta", "smu", "sdma", "pfp", "me", "mec", "mes", "mes1", "imu", "rlc"
    header_version: tuple[int, int]
    ip_version: tuple[int, int]
    ucode_version: int
    header: dict              # every field of the versioned header, nested structs flattened by name
    components: tuple[Component, ...]

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise FirmwareError(f"firmware: {self.name} has no component {name}; it has "
                            + ", ".join(c.name for c in self.components))


def _gfx_type(name: str) -> int:
    return getattr(psp_tables, f"GFX_FW_TYPE_{name}")


class _Reader:
    """Holds one file's bytes and turns out-of-bounds or inconsistent fields into named errors."""

    def __init__(self, fname: str, data: bytes):
        self.fname, self.data = fname, data

    def fail(self, what: str) -> FirmwareError:
        return FirmwareError(f"firmware: {self.fname}: {what}")

    def struct(self, sname: str, offset: int = 0) -> structs.StructValue:
        st = structs.get(ucode, sname)
        if offset + st.size > len(self.data):
            raise self.fail(f"truncated: {sname} needs {st.size} bytes at offset {offset}, "
                            f"the file has {len(self.data)}")
        return st.unpack_from(self.data, offset)

    def part(self, name: str, offset: int, size: int, version=None, psp_fw_type=None, *,
             fields: tuple[str, str]) -> Component:
        """One component; `fields` names the header fields its offset and size come from, for the error."""
        if offset < 0 or size <= 0 or offset + size > len(self.data):
            raise self.fail(f"component {name} at offset {offset} ({fields[0]}) size {size} ({fields[1]}) lies "
                            f"outside the {len(self.data)}-byte file (truncated or corrupt header)")
        return Component(name, offset, size, version, psp_fw_type, bytes(self.data[offset:offset + size]))


def _flatten(fields: dict, prefix: str = "") -> dict:
    """Nested header structs as one dict: 'header.ucode_version', 'rlcp_ucode_size_bytes'.

    The vX_Y members that chain one header version to the previous add no name, as in amdgpu's casts.
    """
    out = {}
    for k, v in fields.items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix if re.fullmatch(r"v\d+_\d+", k) else f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _psp_v2(r: _Reader, hdr, prefix: str, type_enum: str, count_field: str) -> list[Component]:
    """psp/ta_firmware_header_v2_0: a count, then psp_fw_bin_desc entries; offsets from the ucode array."""
    count = hdr[count_field]
    head = structs.get(ucode, "psp_firmware_header_v2_0")
    desc = structs.get(ucode, "psp_fw_bin_desc")
    base = hdr["header"]["ucode_array_offset_bytes"]
    if count == 0 or head.size + count * desc.size > base:
        raise r.fail(f"{count_field}={count} descriptors do not fit before the ucode array at {base}")
    names = {getattr(ucode, member): member.removeprefix(prefix) for member in ucode.ENUMS[type_enum]}
    parts = []
    for i in range(count):
        d = r.struct("psp_fw_bin_desc", head.size + i * desc.size)
        if d.fw_type not in names:
            raise r.fail(f"component {i} has unknown {type_enum} {d.fw_type}")
        name = names[d.fw_type]
        psp_type = _gfx_type("TOC") if name == "PSP_TOC" else None
        parts.append(r.part(name.removeprefix("PSP_"), base + d.offset_bytes, d.size_bytes, d.fw_version, psp_type,
                            fields=(f"ucode_array_offset_bytes + descriptor {i} offset_bytes",
                                    f"descriptor {i} size_bytes")))
    return parts


def _rs64(r: _Reader, hdr, kind: str) -> list[Component]:
    """gfx_firmware_header_v2_0 (RS64 PFP/ME/MEC): the ucode, and one data (stack) image per pipe."""
    engine = kind.upper()
    stacks = {"pfp": 2, "me": 2, "mec": 4}[kind]
    c = hdr["header"]
    parts = [r.part(f"RS64_{engine}", c["ucode_array_offset_bytes"], hdr["ucode_size_bytes"],
                    c["ucode_version"], _gfx_type(f"RS64_{engine}"),
                    fields=("ucode_array_offset_bytes", "ucode_size_bytes"))]
    for p in range(stacks):
        name = f"RS64_{engine}_P{p}_STACK"
        parts.append(r.part(name, hdr["data_offset_bytes"], hdr["data_size_bytes"], c["ucode_version"],
                            _gfx_type(name), fields=("data_offset_bytes", "data_size_bytes")))
    return parts


def _rlc(r: _Reader, hdr, minor: int) -> list[Component]:
    """rlc_firmware_header_v2_x: RLC_G from the ucode array; later versions add images at file offsets."""
    flat = _flatten(hdr)
    parts = [r.part("RLC_G", flat["header.ucode_array_offset_bytes"], flat["header.ucode_size_bytes"],
                    flat["header.ucode_version"], _gfx_type("RLC_G"),
                    fields=("ucode_array_offset_bytes", "ucode_size_bytes"))]
    extra = []
    if minor >= 1:
        extra += [("RLC_RESTORE_LIST_SRM_CNTL", "save_restore_list_cntl"),
                  ("RLC_RESTORE_LIST_GPM_MEM", "save_restore_list_gpm"),
                  ("RLC_RESTORE_LIST_SRM_MEM", "save_restore_list_srm")]
    if minor >= 2:
        extra += [("RLC_IRAM", "rlc_iram_ucode"), ("RLC_DRAM_BOOT", "rlc_dram_ucode")]
    if minor >= 3:
        extra += [("RLC_P", "rlcp_ucode"), ("RLC_V", "rlcv_ucode")]
    if minor >= 4:
        extra += [("GLOBAL_TAP_DELAYS", "global_tap_delays_ucode")] + [
            (f"SE{i}_TAP_DELAYS", f"se{i}_tap_delays_ucode") for i in range(4)]
    for name, stem in extra:
        size = flat[f"{stem}_size_bytes"]
        if size:  # an absent image has size 0, as amdgpu skips it
            ver = flat.get(f"{stem.removesuffix('_ucode')}_ucode_version")
            parts.append(r.part(name, flat[f"{stem}_offset_bytes"], size, ver, _gfx_type(name),
                                fields=(f"{stem}_offset_bytes", f"{stem}_size_bytes")))
    return parts


# kind -> {(major, minor): header struct}; the versions the 20230210 files for these chips use and the
# ones amdgpu 6.1 reads for the same blocks.
_LAYOUTS = {
    "sos": {(2, 0): "psp_firmware_header_v2_0"},
    "ta": {(2, 0): "ta_firmware_header_v2_0"},
    "smu": {(1, 0): "smc_firmware_header_v1_0", (2, 0): "smc_firmware_header_v2_0",
            (2, 1): "smc_firmware_header_v2_1"},
    "sdma": {(2, 0): "sdma_firmware_header_v2_0"},
    "pfp": {(2, 0): "gfx_firmware_header_v2_0"},
    "me": {(2, 0): "gfx_firmware_header_v2_0"},
    "mec": {(2, 0): "gfx_firmware_header_v2_0"},
    "mes": {(1, 0): "mes_firmware_header_v1_0"},
    "mes1": {(1, 0): "mes_firmware_header_v1_0"},
    "imu": {(1, 0): "imu_firmware_header_v1_0"},
    "rlc": {(2, m): f"rlc_firmware_header_v2_{m}" for m in range(5)},
}


def kind_of(fname: str) -> str:
    stem = fname.rsplit("/", 1)[-1].removesuffix(".bin")
    if stem.startswith(("smu_", "sdma_")):
        return stem.split("_")[0]
    kind = stem.rsplit("_", 1)[-1]
    if kind not in _LAYOUTS:
        raise FirmwareError(f"firmware: {fname}: cannot tell the firmware kind from the name "
                            f"(expected one of {', '.join(sorted(_LAYOUTS))} as in gc_11_0_0_mec.bin)")
    return kind


def parse(fname: str, data: bytes) -> FirmwareImage:
    """Parses one firmware file; every component is checked to lie inside the file."""
    r = _Reader(fname, data)
    kind = kind_of(fname)
    common = r.struct("common_firmware_header")
    version = (common.header_version_major, common.header_version_minor)
    layout = _LAYOUTS[kind].get(version)
    if layout is None:
        supported = ", ".join(f"v{a}.{b}" for a, b in _LAYOUTS[kind])
        raise r.fail(f"{kind} header version v{version[0]}.{version[1]} is not one this driver reads "
                     f"(supported: {supported}); is this the pinned linux-firmware file?")
    if common.size_bytes != len(data):
        raise r.fail(f"header says the file is {common.size_bytes} bytes, it is {len(data)} (truncated?)")
    st = structs.get(ucode, layout)
    if common.header_size_bytes < st.size:
        raise r.fail(f"header_size_bytes={common.header_size_bytes} is smaller than {layout} ({st.size} bytes)")
    hdr = r.struct(layout).as_dict()
    c = common
    if kind == "sos":
        parts = _psp_v2(r, hdr, "PSP_FW_TYPE_", "psp_fw_type", "psp_fw_bin_count")
    elif kind == "ta":
        parts = _psp_v2(r, hdr, "TA_FW_TYPE_", "ta_fw_type", "ta_fw_bin_count")
    elif kind == "smu":
        parts = [r.part("SMU", c.ucode_array_offset_bytes, c.ucode_size_bytes, c.ucode_version, _gfx_type("SMU"),
                        fields=("ucode_array_offset_bytes", "ucode_size_bytes"))]
        if version == (2, 1):
            count, table = hdr["pptable_count"], hdr["pptable_entry_offset"]
            entry = structs.get(ucode, "smc_soft_pptable_entry")
            if table + count * entry.size > len(data):
                raise r.fail(f"pptable_count={count} entries of {entry.size} bytes at pptable_entry_offset={table} "
                             f"run past the end of the {len(data)}-byte file (truncated or corrupt header)")
            for i in range(count):
                e = r.struct("smc_soft_pptable_entry", table + i * entry.size)
                # Soft pptables go to the SMU through its driver table, not through the PSP.
                parts.append(r.part(f"PPTABLE_{e.id}", e.ppt_offset_bytes, e.ppt_size_bytes, None, None,
                                    fields=(f"pptable entry {i} ppt_offset_bytes",
                                            f"pptable entry {i} ppt_size_bytes")))
    elif kind == "sdma":
        parts = [r.part("SDMA_UCODE_TH0", c.ucode_array_offset_bytes, hdr["ctx_ucode_size_bytes"],
                        c.ucode_version, _gfx_type("SDMA_UCODE_TH0"),
                        fields=("ucode_array_offset_bytes", "ctx_ucode_size_bytes")),
                 r.part("SDMA_UCODE_TH1", hdr["ctl_ucode_offset"], hdr["ctl_ucode_size_bytes"],
                        c.ucode_version, _gfx_type("SDMA_UCODE_TH1"),
                        fields=("ctl_ucode_offset", "ctl_ucode_size_bytes"))]
    elif kind in ("pfp", "me", "mec"):
        parts = _rs64(r, hdr, kind)
    elif kind in ("mes", "mes1"):
        code, stack = ("CP_MES", "MES_STACK") if kind == "mes" else ("CP_MES_KIQ", "MES_KIQ_STACK")
        parts = [r.part(code, hdr["mes_ucode_offset_bytes"], hdr["mes_ucode_size_bytes"],
                        hdr["mes_ucode_version"], _gfx_type(code),
                        fields=("mes_ucode_offset_bytes", "mes_ucode_size_bytes")),
                 r.part(stack, hdr["mes_ucode_data_offset_bytes"], hdr["mes_ucode_data_size_bytes"],
                        hdr["mes_ucode_data_version"], _gfx_type(stack),
                        fields=("mes_ucode_data_offset_bytes", "mes_ucode_data_size_bytes"))]
    elif kind == "imu":
        base = c.ucode_array_offset_bytes
        parts = [r.part("IMU_I", base, hdr["imu_iram_ucode_size_bytes"], c.ucode_version, _gfx_type("IMU_I"),
                        fields=("ucode_array_offset_bytes", "imu_iram_ucode_size_bytes")),
                 r.part("IMU_D", base + hdr["imu_iram_ucode_size_bytes"], hdr["imu_dram_ucode_size_bytes"],
                        c.ucode_version, _gfx_type("IMU_D"),
                        fields=("ucode_array_offset_bytes + imu_iram_ucode_size_bytes", "imu_dram_ucode_size_bytes"))]
    else:
        parts = _rlc(r, hdr, version[1])
    return FirmwareImage(fname, kind, version, (c.ip_version_major, c.ip_version_minor), c.ucode_version,
                         _flatten(hdr), tuple(parts))
