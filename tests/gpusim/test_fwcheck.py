"""gpusim.fwcheck against the real firmware, against the generated header layouts, and against the driver's parser."""
import struct

import pytest

from amdrv import structs
from amdrv.autogen import psp as P
from amdrv.autogen import ucode as U
from amdrv.chips import NAVI31, NAVI33
from gpusim import fwcheck


def reader(directory):
    return lambda name: (directory / name).read_bytes()


@pytest.fixture(scope="module")
def navi31(debian_firmware):
    return fwcheck.PinnedFirmware(NAVI31, reader(debian_firmware))


NAVI31_IP_TYPES = {
    "RS64_PFP", "RS64_PFP_P0_STACK", "RS64_PFP_P1_STACK", "RS64_ME", "RS64_ME_P0_STACK", "RS64_ME_P1_STACK",
    "RS64_MEC", "RS64_MEC_P0_STACK", "RS64_MEC_P1_STACK", "RS64_MEC_P2_STACK", "RS64_MEC_P3_STACK",
    "CP_MES", "MES_STACK", "CP_MES_KIQ", "MES_KIQ_STACK", "IMU_I", "IMU_D", "SDMA_UCODE_TH0", "SDMA_UCODE_TH1",
    "RLC_G", "RLC_RESTORE_LIST_GPM_MEM", "RLC_RESTORE_LIST_SRM_MEM", "RLC_IRAM", "RLC_DRAM_BOOT", "RLC_P",
    "RLC_V", "SMU", "REG_LIST"}


def test_navi31_ip_fw_types_and_known_sizes(navi31):
    pieces = navi31.ip_fw_pieces()
    assert {fwcheck.fw_type_name(t) for t in pieces} == NAVI31_IP_TYPES
    # sizes read by hand from the headers of the 20230210 files (xxd)
    sizes = {p.name: p.size for p in pieces.values()}
    assert sizes["RS64_MEC"] == 267552 and sizes["RS64_MEC_P3_STACK"] == 139264
    assert sizes["SDMA_UCODE_TH0"] == 17408 and sizes["SDMA_UCODE_TH1"] == 16896
    assert sizes["RLC_G"] == 25088 and sizes["RLC_IRAM"] == 66048 and sizes["SMU"] == 261632
    # the P0..P3 stacks are the same data section
    assert navi31.ip_fw(P.GFX_FW_TYPE_RS64_MEC_P0_STACK) == navi31.ip_fw(P.GFX_FW_TYPE_RS64_MEC_P3_STACK)
    # IMU_D follows IMU_I directly
    i, d = pieces[P.GFX_FW_TYPE_IMU_I], pieces[P.GFX_FW_TYPE_IMU_D]
    assert d.offset == i.offset + i.size


def test_navi31_sos_components(navi31, debian_firmware):
    comps = navi31.sos_pieces()
    assert {p.name for p in comps.values()} == {"SYS_DRV", "SOS", "TOC", "KDB", "SPL", "RL"}
    raw = (debian_firmware / "psp_13_0_0_sos.bin").read_bytes()
    sos = comps[U.PSP_FW_TYPE_PSP_SOS]
    assert (sos.offset, sos.size) == (256 + 157584, 99200)
    assert sos.data == raw[sos.offset:sos.offset + sos.size]


def test_navi33_reads_too(debian_firmware):
    fw = fwcheck.PinnedFirmware(NAVI33, reader(debian_firmware))
    assert {fwcheck.fw_type_name(t) for t in fw.ip_fw_pieces()} == NAVI31_IP_TYPES - {"REG_LIST"}  # no RL
    assert fw.files["rlc"] == "gc_11_0_2_rlc.bin"


def test_hand_offsets_match_the_generated_header_tables():
    # fwcheck reads offsets by hand; the generated layouts of amdgpu_ucode.h must agree with every one.
    def off(sname, field):
        return structs.get(U, sname).offset(field)
    assert off("gfx_firmware_header_v2_0", "ucode_size_bytes") == 36
    assert off("gfx_firmware_header_v2_0", "data_size_bytes") == 44
    assert off("gfx_firmware_header_v2_0", "data_offset_bytes") == 48
    assert off("mes_firmware_header_v1_0", "mes_ucode_size_bytes") == 36
    assert off("mes_firmware_header_v1_0", "mes_ucode_offset_bytes") == 40
    assert off("mes_firmware_header_v1_0", "mes_ucode_data_size_bytes") == 48
    assert off("mes_firmware_header_v1_0", "mes_ucode_data_offset_bytes") == 52
    assert off("imu_firmware_header_v1_0", "imu_iram_ucode_size_bytes") == 32
    assert off("imu_firmware_header_v1_0", "imu_dram_ucode_size_bytes") == 40
    assert off("sdma_firmware_header_v2_0", "ctx_ucode_size_bytes") == 36
    assert off("sdma_firmware_header_v2_0", "ctl_ucode_offset") == 48
    assert off("sdma_firmware_header_v2_0", "ctl_ucode_size_bytes") == 52
    assert off("psp_firmware_header_v2_0", "psp_fw_bin_count") == 32
    assert off("psp_firmware_header_v2_0", "psp_fw_bin") == 36
    assert structs.get(U, "psp_fw_bin_desc").size == 16
    rlc = {f"v2_{m}": structs.get(U, f"rlc_firmware_header_v2_{m}") for m in (1, 2, 3, 4)}
    for since, kind, size_at, off_at in fwcheck._RLC:
        stem = {"RLC_RESTORE_LIST_SRM_CNTL": "save_restore_list_cntl", "RLC_RESTORE_LIST_GPM_MEM":
                "save_restore_list_gpm", "RLC_RESTORE_LIST_SRM_MEM": "save_restore_list_srm",
                "RLC_IRAM": "rlc_iram_ucode", "RLC_DRAM_BOOT": "rlc_dram_ucode", "RLC_P": "rlcp_ucode",
                "RLC_V": "rlcv_ucode"}.get(kind, kind.lower() + "_ucode")
        hdr = rlc[f"v2_{since}"]   # declared there; the older header nests at offset 0
        assert hdr.offset(stem + "_size_bytes") == size_at, kind
        assert hdr.offset(stem + "_offset_bytes") == off_at, kind


def test_same_bytes_as_the_drivers_parser(navi31, debian_firmware):
    # Two independent readers of the same files: any disagreement is a bug in one of them.
    from amdrv.firmware import parse
    seen = set()
    for part, fname in navi31.files.items():
        image = parse(fname, (debian_firmware / fname).read_bytes())
        for comp in image.components:
            if part == "sos":
                ours = navi31.sos_pieces()[next(t for t, n in fwcheck.SOS_NAMES.items() if n == comp.name)]
            elif comp.name.startswith("PPTABLE"):
                continue   # soft pptables are for the SMU driver, never a PSP load on SMU 13.0.0
            else:
                ours = navi31.ip_fw_pieces()[getattr(P, "GFX_FW_TYPE_" + comp.name)]
            assert (ours.offset, ours.size) == (comp.offset, comp.size), comp.name
            assert ours.data == comp.data, comp.name
            seen.add((part, comp.name))
    # REG_LIST is the sos package's RL component, loaded with LOAD_IP_FW (psp_rl_load)
    assert navi31.ip_fw_pieces()[P.GFX_FW_TYPE_REG_LIST] == navi31.sos_pieces()[U.PSP_FW_TYPE_PSP_RL]
    assert len(seen) == len(navi31.ip_fw_pieces()) - 1 + len(navi31.sos_pieces())


def test_damaged_file_is_refused(debian_firmware):
    raw = bytearray((debian_firmware / "gc_11_0_0_mec.bin").read_bytes())
    struct.pack_into("<I", raw, 44, 1 << 30)   # data_size_bytes far past the end
    files = {"gc_11_0_0_mec.bin": bytes(raw)}
    fw = fwcheck.PinnedFirmware(NAVI31, lambda n: files.get(n) or (debian_firmware / n).read_bytes())
    with pytest.raises(fwcheck.FirmwareLayoutError, match="RS64_MEC_P0_STACK.*past the end"):
        fw.ip_fw_pieces()
    files["gc_11_0_0_mec.bin"] = bytes(raw[:-4])
    fw = fwcheck.PinnedFirmware(NAVI31, lambda n: files.get(n) or (debian_firmware / n).read_bytes())
    with pytest.raises(fwcheck.FirmwareLayoutError, match="size_bytes"):
        fw.ip_fw_pieces()


def test_default_reader_uses_the_firmware_store(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    fw = fwcheck.PinnedFirmware(NAVI31)
    assert fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)[:4] == (debian_firmware / "psp_13_0_0_sos.bin").read_bytes()[
        256 + 259088:256 + 259088 + 4]
