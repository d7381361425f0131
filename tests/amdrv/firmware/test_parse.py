"""Firmware header readers on the real linux-firmware 20230210 files, and on damaged copies of them."""
import struct

import pytest

from amdrv import chips
from amdrv.firmware import FirmwareError, PINS, files_for, parse

# Header versions of the pinned files, read by hand with `xxd -l 16` (bytes 8..11 of each file).
EXPECTED_HEADER = {"sos": (2, 0), "ta": (2, 0), "smu": (2, 1), "sdma": (2, 0), "pfp": (2, 0), "me": (2, 0),
                   "mec": (2, 0), "mes": (1, 0), "mes1": (1, 0), "imu": (1, 0), "rlc": (2, 3)}
IP_MAJOR = {"sos": 13, "ta": 13, "smu": 13, "sdma": 6, "pfp": 11, "me": 11, "mec": 11, "mes": 11, "mes1": 11,
            "imu": 11, "rlc": 11}


@pytest.fixture(scope="module")
def images(debian_firmware):
    return {n: (parse(n, (debian_firmware / n).read_bytes()), (debian_firmware / n).read_bytes()) for n in PINS}


def test_every_pinned_file_parses_with_components_inside(images):
    for name, (img, data) in images.items():
        assert img.header_version == EXPECTED_HEADER[img.kind], name
        assert img.ip_version[0] == IP_MAJOR[img.kind], name
        assert img.ucode_version == struct.unpack_from("<I", data, 16)[0]
        assert img.components, name
        for c in img.components:
            assert 0 < c.offset and c.offset + c.size <= len(data), (name, c.name)
            assert c.data == data[c.offset:c.offset + c.size]


def test_psp_sos_components(images):
    img, data = images["psp_13_0_0_sos.bin"]
    names = [c.name for c in img.components]
    assert names[:2] == ["SYS_DRV", "SOS"] and {"TOC", "KDB", "SPL", "RL"} <= set(names)
    # The PSP bootloader parts are packed back to back after the 256-byte header, in descriptor order.
    ends = [c.offset + c.size for c in img.components]
    assert [c.offset for c in img.components[1:]] == ends[:-1]
    assert img.component("SOS").version == img.ucode_version == 0x310025
    assert img.component("TOC").psp_fw_type == 24  # GFX_FW_TYPE_TOC in psp_gfx_if.h


def test_rs64_stacks_and_load_types(images):
    img, _ = images["gc_11_0_0_mec.bin"]
    stacks = [c for c in img.components if c.name.endswith("_STACK")]
    assert [c.name for c in stacks] == [f"RS64_MEC_P{i}_STACK" for i in range(4)]
    assert len({(c.offset, c.size) for c in stacks}) == 1  # one data image, loaded once per pipe
    # psp_gfx_if.h: GFX_FW_TYPE_RS64_MEC = 89, RS64_MEC_P0_STACK..P3_STACK = 94..97
    assert [c.psp_fw_type for c in img.components] == [89, 94, 95, 96, 97]
    code = img.component("RS64_MEC")
    assert code.offset == 256 and code.offset + code.size <= stacks[0].offset


def test_imu_sdma_mes_rlc_smu_layouts(images):
    imu, _ = images["gc_11_0_2_imu.bin"]
    i, d = imu.component("IMU_I"), imu.component("IMU_D")
    assert d.offset == i.offset + i.size and (i.psp_fw_type, d.psp_fw_type) == (68, 69)
    sdma, _ = images["sdma_6_0_0.bin"]
    assert [c.psp_fw_type for c in sdma.components] == [71, 72]
    mes1, _ = images["gc_11_0_0_mes1.bin"]
    assert [c.name for c in mes1.components] == ["CP_MES_KIQ", "MES_KIQ_STACK"]
    rlc, _ = images["gc_11_0_0_rlc.bin"]
    assert {"RLC_G", "RLC_IRAM", "RLC_DRAM_BOOT", "RLC_P", "RLC_V"} <= {c.name for c in rlc.components}
    smu, _ = images["smu_13_0_0.bin"]
    assert smu.component("SMU").psp_fw_type == 18
    assert any(c.name.startswith("PPTABLE_") and c.psp_fw_type is None for c in smu.components)


def test_both_chips_have_a_full_set(images):
    for chip in chips.SUPPORTED:
        kinds = sorted(images[n][0].kind for n in files_for(chip))
        assert kinds == sorted(EXPECTED_HEADER), chip.name


def _patched(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_truncated_file(images):
    _, data = images["gc_11_0_0_mec.bin"]
    with pytest.raises(FirmwareError, match=r"gc_11_0_0_mec.bin: truncated: common_firmware_header"):
        parse("gc_11_0_0_mec.bin", data[:20])
    with pytest.raises(FirmwareError, match=r"gc_11_0_0_mec.bin: header says the file is 407072 bytes, it is 4096"):
        parse("gc_11_0_0_mec.bin", data[:4096])


def test_wrong_header_version(images):
    _, data = images["gc_11_0_0_rlc.bin"]
    with pytest.raises(FirmwareError, match=r"gc_11_0_0_rlc.bin: rlc header version v3.3 is not one this driver reads"):
        parse("gc_11_0_0_rlc.bin", _patched(data, 8, "<H", 3))


def test_component_outside_file(images):
    _, data = images["sdma_6_0_0.bin"]
    # sdma_firmware_header_v2_0.ctl_ucode_offset is at byte 48 (32-byte common header + 4 dwords).
    bad = _patched(data, 48, "<I", len(data) - 16)
    with pytest.raises(FirmwareError, match=r"sdma_6_0_0.bin: component SDMA_UCODE_TH1 .*\(ctl_ucode_offset\) "
                                            r"size \d+ \(ctl_ucode_size_bytes\) lies outside"):
        parse("sdma_6_0_0.bin", bad)


def test_pptable_entries_past_the_end_name_the_fields(images):
    # Found by tools/fuzz/firmware (overflow of smc_firmware_header_v2_1.pptable_entry_offset, at byte 40):
    # the error named the entry struct, not the header fields that put it there.
    _, data = images["smu_13_0_0.bin"]
    with pytest.raises(FirmwareError, match=r"smu_13_0_0.bin: pptable_count=\d+ entries of \d+ bytes at "
                                            r"pptable_entry_offset=4294967295 run past the end"):
        parse("smu_13_0_0.bin", _patched(data, 40, "<I", 0xFFFFFFFF))


def test_bad_psp_descriptor(images):
    _, data = images["psp_13_0_0_sos.bin"]
    with pytest.raises(FirmwareError, match=r"psp_fw_bin_count=4000 descriptors do not fit"):
        parse("psp_13_0_0_sos.bin", _patched(data, 32, "<I", 4000))
    with pytest.raises(FirmwareError, match=r"component 0 has unknown psp_fw_type 77"):
        parse("psp_13_0_0_sos.bin", _patched(data, 36, "<I", 77))


def test_unknown_kind_from_name(images):
    _, data = images["gc_11_0_0_mec.bin"]
    with pytest.raises(FirmwareError, match="cannot tell the firmware kind"):
        parse("mystery.bin", data)
