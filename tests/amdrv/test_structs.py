"""Generated struct/constant tables against values read by hand from the upstream headers, and the codec.

Every expected number below was taken from Debian linux-source-6.1, drivers/gpu/drm/amd/<header named
in the comment>, by reading the header, not by running the generator.
"""
import struct

import pytest

from amdrv import structs
from amdrv.autogen import atomfirmware, discovery, gmc, ih, mqd_v11, pm4, psp, sdma6, smu_13_0_0, ucode


def layout(mod, name):
    s = structs.get(mod, name)
    return s.size, {f: s.offset(f) for f in s.fields}


# ---------------------------------------------------------------- ucode (amdgpu/amdgpu_ucode.h)

def test_common_firmware_header_layout():
    # amdgpu_ucode.h: u32 size_bytes, u32 header_size_bytes, 4 x u16 versions, 4 x u32
    size, offs = layout(ucode, "common_firmware_header")
    assert size == 32
    assert offs == {
        "size_bytes": 0, "header_size_bytes": 4,
        "header_version_major": 8, "header_version_minor": 10,
        "ip_version_major": 12, "ip_version_minor": 14,
        "ucode_version": 16, "ucode_size_bytes": 20, "ucode_array_offset_bytes": 24, "crc32": 28,
    }


def test_psp_firmware_header_v2_0_layout():
    # amdgpu_ucode.h: { common_firmware_header header; u32 psp_fw_bin_count; psp_fw_bin_desc psp_fw_bin[]; }
    # psp_fw_bin_desc: u32 fw_type, fw_version, offset_bytes, size_bytes (16 bytes)
    s = structs.get(ucode, "psp_firmware_header_v2_0")
    assert s.size == 36
    assert s.offset("psp_fw_bin_count") == 32
    assert s.offset("psp_fw_bin") == 36
    assert s.flex is not None and s.flex.name == "psp_fw_bin"
    assert structs.get(ucode, "psp_fw_bin_desc").size == 16


def test_psp_v1_3_and_gfx_v2_0_and_others():
    # psp_firmware_header_v1_0 = 32 + 12 (sos legacy desc); v1_1 adds toc, kdb (68); v1_3 = v1_1 + 4 descs (116)
    assert structs.get(ucode, "psp_firmware_header_v1_0").size == 44
    assert structs.get(ucode, "psp_firmware_header_v1_1").size == 68
    s13 = structs.get(ucode, "psp_firmware_header_v1_3")
    assert s13.size == 116 and s13.offset("spl") == 68 and s13.offset("sos_aux") == 104
    # gfx_firmware_header_v2_0 (RS64): header + 7 x u32; ucode_start_addr_hi is the last one at 56
    g = structs.get(ucode, "gfx_firmware_header_v2_0")
    assert g.size == 60 and g.offset("ucode_offset_bytes") == 40 and g.offset("ucode_start_addr_hi") == 56
    # mes_firmware_header_v1_0: header + 10 x u32
    assert structs.get(ucode, "mes_firmware_header_v1_0").size == 72
    # imu_firmware_header_v1_0: header + 4 x u32
    assert structs.get(ucode, "imu_firmware_header_v1_0").size == 48
    # rlc v2_0: header + 18 u32 = 104; v2_1 + 13 = 156; v2_2 + 4 = 172; v2_3 + 8 = 204; v2_4 + 10 = 244
    for name, size in [("rlc_firmware_header_v2_0", 104), ("rlc_firmware_header_v2_1", 156),
                       ("rlc_firmware_header_v2_2", 172), ("rlc_firmware_header_v2_3", 204),
                       ("rlc_firmware_header_v2_4", 244), ("sdma_firmware_header_v2_0", 64),
                       ("smc_firmware_header_v2_1", 44)]:
        assert structs.get(ucode, name).size == size, name
    # union amdgpu_firmware_header ends with uint8_t raw[0x100]
    assert structs.get(ucode, "amdgpu_firmware_header").size == 256
    assert structs.get(ucode, "amdgpu_firmware_header").kind == "union"


def test_ucode_enums_and_constants():
    # enum psp_fw_type: implicit values from PSP_FW_TYPE_UNKOWN = 0
    assert ucode.PSP_FW_TYPE_PSP_SOS == 1 and ucode.PSP_FW_TYPE_PSP_SYS_DRV == 2
    assert ucode.PSP_FW_TYPE_PSP_KDB == 3 and ucode.PSP_FW_TYPE_PSP_RAS_DRV == 10
    assert structs.enum(ucode, "psp_fw_type")["PSP_FW_TYPE_PSP_TOC"] == 4
    # enum AMDGPU_UCODE_ID: CAP = 0, SDMA0..7 = 1..8, SDMA_UCODE_TH0 = 9
    assert ucode.AMDGPU_UCODE_ID_SDMA_UCODE_TH0 == 9
    assert ucode.AMDGPU_UCODE_ID_CP_RS64_MEC == 16
    # UCODE_MAX_PSP_PACKAGING = (sizeof(union) 256 - 32 - 4) / sizeof(psp_fw_bin_desc) 16 = 13
    assert ucode.UCODE_MAX_PSP_PACKAGING == 13
    assert ucode.AMDGPU_CPRLC_UCODE_LOADED == 0x100
    assert "amdgpu_firmware_info" in ucode.SKIPPED  # holds pointers: no device layout


# ---------------------------------------------------------------- discovery (include/discovery.h, soc15_hw_ip.h)

def test_discovery_packed_layouts():
    # #pragma pack(1): table_info 4 x u16; binary_header u32 + 4 x u16 + table_info[TOTAL_TABLES=6]
    assert structs.get(discovery, "table_info").size == 8
    bh = structs.get(discovery, "binary_header")
    assert bh.size == 60 and bh.offset("table_list") == 12 and bh.field("table_list").dims == (6,)
    # ip_discovery_header: u32 + u16 + u16 + u32 + u16 (14) + die_info[16] (64) + u16 padding[1]
    idh = structs.get(discovery, "ip_discovery_header")
    assert idh.size == 80 and idh.offset("die_info") == 14 and idh.offset("padding") == 78
    assert structs.get(discovery, "harvest_table").size == 8 + 32 * 4


def test_discovery_ip_bitfields():
    # struct ip (little-endian branch): ... u8 revision; u8 harvest:4; u8 reserved:4; u32 base_address[]
    ip = structs.get(discovery, "ip")
    assert ip.size == 8
    assert ip.fields == ("hw_id", "number_instance", "num_base_address", "major", "minor", "revision",
                         "harvest", "reserved", "base_address")
    raw = bytes([11, 0, 1, 2, 11, 0, 0, 0xA3]) + struct.pack("<2I", 0x1260, 0xA000)
    v = ip.unpack_from(raw)
    assert v.hw_id == 11 and v.number_instance == 1 and v.num_base_address == 2
    assert (v.major, v.minor, v.revision) == (11, 0, 0)
    assert v.harvest == 0x3 and v.reserved == 0xA  # low nibble first
    assert ip.unpack_flex(raw, v.num_base_address) == (0x1260, 0xA000)
    # ip_v3: sub_revision:4 then variant:4, base_address[1]
    v3 = structs.get(discovery, "ip_v3")
    assert v3.size == 12 and v3.offset("base_address") == 8
    assert v3.unpack_from(bytes(7) + b"\x5c" + bytes(4)).sub_revision == 0xC
    assert ip.pack(harvest=0xF, reserved=1)[7] == 0x1F


def test_discovery_constants():
    assert discovery.BINARY_SIGNATURE == 0x28211407
    assert discovery.DISCOVERY_TABLE_SIGNATURE == 0x53445049
    assert discovery.GC_TABLE_ID == 0x4347
    assert discovery.HARVEST_TABLE_SIGNATURE == 0x56524148
    assert (discovery.IP_DISCOVERY, discovery.GC, discovery.TOTAL_TABLES) == (0, 1, 6)
    # soc15_hw_ip.h
    assert discovery.GC_HWID == 11 and discovery.MP1_HWID == 1 and discovery.MP0_HWID == 255
    assert discovery.VCN_HWID == discovery.UVD_HWID == 12
    assert discovery.HWIP_TO_HWID["GC_HWIP"] == 11
    assert discovery.HWIP_TO_HWID["NBIO_HWIP"] == discovery.NBIF_HWID
    # amdgpu.h enum amd_hw_ip_block_type: GC_HWIP = 1, ..., UVD_HWIP (17), VCN_HWIP = JPEG_HWIP = UVD_HWIP,
    # VCN1_HWIP 18, ..., PCIE_HWIP 32, MAX_HWIP 33
    assert discovery.GC_HWIP == 1 and discovery.MP0_HWIP == 15 and discovery.MP1_HWIP == 16
    assert discovery.VCN_HWIP == discovery.JPEG_HWIP == discovery.UVD_HWIP == 17
    assert discovery.VCN1_HWIP == 18 and discovery.MAX_HWIP == 33
    assert discovery.HWIP_MAX_INSTANCE == 11 and discovery.HW_ID_MAX == 300
    assert discovery.HWID_NAMES[11] == "GC" and discovery.HWID_NAMES[255] == "MP0"
    # vcn_instance_info_v1_0: u32 + union _fuse_data (bits struct of 1-bit fields / u32) + u32[2]
    fuse = structs.get(discovery, "vcn_instance_info_v1_0").unpack_from(struct.pack("<4I", 0, 0b1010, 0, 0))
    assert fuse.fuse_data.all_bits == 0b1010
    assert fuse.fuse_data.bits.vp9_disabled == 1 and fuse.fuse_data.bits.av1_disabled == 0
    assert fuse.fuse_data.bits.h264_disabled == 1


# ---------------------------------------------------------------- PSP (amdgpu/psp_gfx_if.h, amdgpu_psp.h)

def test_psp_ids():
    assert psp.GFX_CMD_ID_LOAD_IP_FW == 6 and psp.GFX_CMD_ID_SETUP_TMR == 5
    assert psp.GFX_CMD_ID_LOAD_TOC == 0x20 and psp.GFX_CMD_ID_AUTOLOAD_RLC == 0x21
    assert psp.GFX_CTRL_CMD_ID_INIT_GPCOM_RING == 0x00020000
    assert psp.GFX_CTRL_CMD_ID_DESTROY_RINGS == 0x00030000
    assert psp.GFX_FW_TYPE_CP_MEC == 4 and psp.GFX_FW_TYPE_RLC_G == 8 and psp.GFX_FW_TYPE_CP_MES == 33
    assert psp.GFX_FW_TYPE_RS64_MEC_P3_STACK == 97 and psp.GFX_FW_TYPE_MAX == 98
    assert psp.GFX_FLAG_RESPONSE == 0x80000000 and psp.GFX_CMD_STATUS_MASK == 0xFFFF
    assert psp.PSP_BL__LOAD_SYSDRV == 0x10000 and psp.PSP_BL__LOAD_SOSDRV == 0x20000
    assert psp.PSP_BL__LOAD_KEY_DATABASE == 0x80000 and psp.PSP_BL__LOAD_TOS_SPL_TABLE == 0x10000000
    assert psp.TEE_ERROR_NOT_SUPPORTED == 0xFFFF000A
    assert structs.enum_name(psp, "psp_gfx_fw_type", 8) == "GFX_FW_TYPE_RLC_G"


def test_psp_command_buffer_layout():
    # psp_gfx_cmd_resp: comments in the header give +28 cmd, +864 resp, total 1024
    c = structs.get(psp, "psp_gfx_cmd_resp")
    assert c.size == 1024 and c.offset("cmd") == 28 and c.offset("resp") == 864
    # reserved_1[864 - sizeof(union psp_gfx_commands) - 28]: the union is cmd_invoke_cmd-sized (784)
    assert structs.get(psp, "psp_gfx_commands").size == 784
    assert c.field("reserved_1").dims == (864 - 784 - 28,)
    assert structs.get(psp, "psp_gfx_resp").size == 96  # "total 96 bytes"
    assert structs.get(psp, "psp_gfx_resp").offset("uresp") == 64
    f = structs.get(psp, "psp_gfx_rb_frame")  # "total 64 bytes", vmid at +32, reserved2 at +36
    assert f.size == 64 and f.offset("vmid") == 32 and f.offset("reserved2") == 36
    lf = structs.get(psp, "psp_gfx_cmd_load_ip_fw")  # 3 x u32 + enum fw_type
    assert lf.size == 16 and lf.offset("fw_type") == 12
    # setup_tmr: anonymous union { struct {sriov_enabled:1; virt_phy_addr:1; reserved:30} bitfield; tmr_flags }
    t = structs.get(psp, "psp_gfx_cmd_setup_tmr")
    assert t.size == 24 and t.offset("tmr_flags") == 12 and t.offset("bitfield") == 12
    raw = t.pack(buf_size=0x100000, bitfield={"virt_phy_addr": 1})
    assert struct.unpack_from("<I", raw, 12)[0] == 2
    assert t.unpack_from(raw).tmr_flags == 2


def test_psp_command_round_trip():
    c = structs.get(psp, "psp_gfx_cmd_resp")
    raw = c.pack(buf_size=1024, buf_version=psp.PSP_GFX_CMD_BUF_VERSION, cmd_id=psp.GFX_CMD_ID_LOAD_IP_FW,
                 cmd={"cmd_load_ip_fw": {"fw_phy_addr_lo": 0x1000, "fw_size": 0x2000,
                                         "fw_type": psp.GFX_FW_TYPE_CP_MEC}},
                 resp={"status": 7, "fw_addr_hi": 1})
    assert len(raw) == 1024
    assert struct.unpack_from("<3I", raw, 0) == (1024, 1, 6)
    assert struct.unpack_from("<4I", raw, 28) == (0x1000, 0, 0x2000, 4)
    v = c.unpack_from(raw)
    assert v.cmd.cmd_load_ip_fw.fw_type == psp.GFX_FW_TYPE_CP_MEC
    assert v.resp.status == 7 and v.resp.fw_addr_hi == 1
    assert c.pack(**v.as_dict()) == raw
    assert c.pack(**{k: v[k] for k in v}) == raw


# ---------------------------------------------------------------- PM4 (amdgpu/nvd.h)

def test_pm4_opcodes_and_fields():
    assert pm4.PACKET3_SET_SH_REG == 0x76
    assert pm4.PACKET3_RELEASE_MEM == 0x49
    assert pm4.PACKET3_ACQUIRE_MEM == 0x58
    assert pm4.PACKET3_WRITE_DATA == 0x37
    assert pm4.PACKET3_INDIRECT_BUFFER == 0x3F
    assert pm4.PACKET3_MAP_QUEUES == 0xA2
    assert pm4.PACKET3_SET_SH_REG_START == 0x00002c00
    assert pm4.PACKET_TYPE3 == 3
    # #define PACKET3_RELEASE_MEM_DATA_SEL(x) ((x) << 29) ; WAIT_REG_MEM_FUNCTION(x) ((x) << 0)
    assert pm4.FIELDS["PACKET3_RELEASE_MEM_DATA_SEL"] == (29,)
    assert pm4.FIELDS["PACKET3_RELEASE_MEM_INT_SEL"] == (24,)
    assert pm4.FIELDS["WAIT_REG_MEM_MEM_SPACE"] == (4,)
    assert pm4.PACKET3_RELEASE_MEM_GCR_GL2_WB == 1 << 21
    # PACKET3(op, n) ((PACKET_TYPE3 << 30) | (((op) & 0xFF) << 8) | ((n) & 0x3FFF) << 16)
    assert pm4.MACROS["PACKET3"] == (0xC0000000, (("op", 8, 8), ("n", 16, 14)))
    # CP_PACKET_GET_COUNT(h) (((h) >> 16) & 0x3FFF)
    assert pm4.EXTRACTORS["CP_PACKET_GET_COUNT"] == (16, 14)
    assert "PACKET2" in pm4.UNEXPRESSED  # uses REG_SET, which nvd.h never defines


# ---------------------------------------------------------------- SDMA v6 (amdgpu/sdma_v6_0_0_pkt_open.h)

def test_sdma6_packets():
    assert sdma6.SDMA_OP_COPY == 1 and sdma6.SDMA_OP_FENCE == 5 and sdma6.SDMA_OP_POLL_REGMEM == 8
    assert sdma6.SDMA_OP_TIMESTAMP == 13 and sdma6.SDMA_OP_GCR_REQ == 17
    assert sdma6.SDMA_SUBOP_COPY_LINEAR == 0 and sdma6.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL == 2
    cl = sdma6.PACKETS["COPY_LINEAR"]
    # SDMA_PKT_COPY_LINEAR_HEADER_sub_op_{offset 0, mask 0xFF, shift 8}; _COUNT_count_{1, 0x3FFFFFFF, 0}
    assert cl[0]["sub_op"] == (8, 0xFF)
    assert cl[0]["tmz"] == (18, 1)
    assert cl[1]["count"] == (0, 0x3FFFFFFF)
    assert cl[6]["dst_addr_63_32"] == (0, 0xFFFFFFFF)
    assert sdma6.WORDS["COPY_LINEAR"]["DST_ADDR_HI"] == 6
    # FENCE: HEADER, ADDR_LO (1), ADDR_HI (2), DATA (3)
    assert sdma6.PACKETS["FENCE"][3]["data"] == (0, 0xFFFFFFFF)
    assert sdma6.PACKETS["POLL_REGMEM"][0]["func"] == (28, 7)
    assert sdma6.FIELDS["SDMA_GCR_GL2_RANGE"] == (11, 2)  # (((x) & 0x3) << 11)
    assert not hasattr(sdma6, "SDMA_PKT_COPY_LINEAR_HEADER_op_shift")  # folded into PACKETS


# ---------------------------------------------------------------- SMU 13.0.0 (pm/swsmu/inc/pmfw_if)

def test_smu_ids():
    # smu_v13_0_0_ppsmc.h
    assert smu_13_0_0.PPSMC_MSG_TestMessage == 1
    assert smu_13_0_0.PPSMC_MSG_GetSmuVersion == 2
    assert smu_13_0_0.PPSMC_MSG_TransferTableSmu2Dram == 0x12
    assert smu_13_0_0.PPSMC_Result_OK == 1 and smu_13_0_0.PPSMC_Result_CmdRejectedBusy == 0xFC
    # smu13_driver_if_v13_0_0.h
    assert smu_13_0_0.PPCLK_GFXCLK == 0 and smu_13_0_0.PPCLK_UCLK == 2 and smu_13_0_0.PPCLK_COUNT == 13
    assert smu_13_0_0.FEATURE_DPM_GFXCLK_BIT == 1 and smu_13_0_0.FEATURE_FW_CTF_BIT == 29
    assert smu_13_0_0.NUM_FEATURES == 64
    assert smu_13_0_0.TABLE_SMU_METRICS == 5 and smu_13_0_0.TABLE_PPTABLE == 0
    assert smu_13_0_0.TEMP_COUNT == 13 and smu_13_0_0.SVI_PLANE_COUNT == 5
    assert smu_13_0_0.THROTTLER_COUNT == 22 and smu_13_0_0.D3HOT_SEQUENCE_COUNT == 4


def test_smu_metrics_layout():
    # By hand: CurrClock[13] u32 = 52; 14 x u16 -> 80 MetricsCounter; AvgVoltage[5] u16 @84,
    # AvgCurrent[5] @94; 4 x u16 -> 112 EnergyAccumulator; 2 x u16 -> 120 AvgTemperature[13] (26) -> 146
    # AvgTemperatureFanIntake; 4 x u8 @148..151; AvgFanRpm @152; ThrottlingPercentage[22] @154 -> 176;
    # 3 x u32[4] -> 224; 4 x u16 -> 232; 2 x u32 -> 240.
    m = structs.get(smu_13_0_0, "SmuMetrics_t")
    assert m.size == 240
    assert m.offset("MetricsCounter") == 80
    assert m.offset("AvgVoltage") == 84 and m.offset("AvgCurrent") == 94
    assert m.offset("AverageGfxActivity") == 104
    assert m.offset("EnergyAccumulator") == 112
    assert m.offset("AvgTemperature") == 120 and m.field("AvgTemperature").dims == (13,)
    assert m.offset("AvgFanRpm") == 152
    assert m.offset("ThrottlingPercentage") == 154
    assert m.offset("D3HotEntryCountPerMode") == 176
    assert m.offset("PublicSerialNumberUpper") == 236
    # SmuMetricsExternal_t: SmuMetrics_t + u32 Spare[30] + u32 MmHubPadding[8] = 240 + 120 + 32
    ext = structs.get(smu_13_0_0, "SmuMetricsExternal_t")
    assert ext.size == 392 and ext.offset("Spare") == 240
    buf = bytearray(392)
    struct.pack_into("<H", buf, 104, 57)
    struct.pack_into("<13H", buf, 120, *range(13))
    v = ext.unpack_from(bytes(buf))
    assert v.SmuMetrics.AverageGfxActivity == 57
    assert v.SmuMetrics.AvgTemperature == tuple(range(13))


# ---------------------------------------------------------------- IH and GMC

def test_ih_ids():
    # include/soc15_ih_clientid.h: soc21 has its own enum; GRBM_CP and VMC keep soc15's numbers
    assert ih.SOC15_IH_CLIENTID_GRBM_CP == 0x14 and ih.SOC21_IH_CLIENTID_GRBM_CP == 0x14
    assert ih.SOC15_IH_CLIENTID_VMC == 0x12 and ih.SOC21_IH_CLIENTID_VMC == 0x12
    assert ih.SOC21_IH_CLIENTID_GFX == 0x0a
    # include/ivsrcid/gfx/irqsrcs_gfx_11_0_0.h
    assert ih.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT == 181
    assert ih.GFX_11_0_0__SRCID__SDMA_TRAP == 0x31
    # include/ivsrcid/vmc/irqsrcs_vmc_1_0.h
    assert ih.VMC_1_0__SRCID__VM_FAULT == 0 and ih.UTCL2_1_0__SRCID__FAULT == 0


def test_gmc_pte_bits():
    # amdgpu/amdgpu_vm.h
    assert gmc.AMDGPU_PTE_VALID == 1 << 0
    assert gmc.AMDGPU_PTE_SYSTEM == 1 << 1
    assert gmc.AMDGPU_PTE_SNOOPED == 1 << 2
    assert gmc.AMDGPU_PTE_EXECUTABLE == 1 << 4
    assert gmc.AMDGPU_PTE_READABLE == 1 << 5
    assert gmc.AMDGPU_PTE_WRITEABLE == 1 << 6
    assert gmc.AMDGPU_PTE_PRT == 1 << 51
    assert gmc.AMDGPU_PDE_PTE == 1 << 54
    assert gmc.FIELDS["AMDGPU_PTE_FRAG"] == (7, 5)         # ((x & 0x1fULL) << 7)
    assert gmc.FIELDS["AMDGPU_PTE_MTYPE_NV10"] == (48,)    # ((uint64_t)(a) << 48)
    assert gmc.FIELDS["AMDGPU_PDE_BFS"] == (59,)
    assert gmc.AMDGPU_PTE_MTYPE_NV10_MASK == 7 << 48
    assert (gmc.AMDGPU_VM_PDB2, gmc.AMDGPU_VM_PDB1, gmc.AMDGPU_VM_PDB0, gmc.AMDGPU_VM_PTB) == (0, 1, 2, 3)


# ---------------------------------------------------------------- codec

def test_v11_compute_mqd_layout():
    # include/v11_structs.h: 512 dwords, each field's "offset:" comment is its dword index
    s = structs.get(mqd_v11, "v11_compute_mqd")
    assert s.size == 2048
    for name, dword in [("header", 0), ("compute_pipelinestat_enable", 11), ("compute_misc_reserved", 32),
                        ("cp_mqd_base_addr_lo", 128), ("cp_hqd_active", 130), ("cp_hqd_vmid", 131),
                        ("cp_hqd_pq_base_lo", 136), ("cp_hqd_pq_control", 145), ("cp_mqd_control", 162),
                        ("cp_hqd_eop_base_addr_lo", 165), ("cp_hqd_eop_control", 167),
                        ("cp_hqd_pq_wptr_lo", 182), ("cp_hqd_pq_wptr_hi", 183)]:
        assert s.offset(name) == 4 * dword, name
    assert structs.get(mqd_v11, "v11_sdma_mqd").size == 512


def test_round_trip_and_views():
    h = structs.get(ucode, "common_firmware_header")
    vals = dict(size_bytes=0x1234, header_size_bytes=32, header_version_major=2, header_version_minor=1,
                ip_version_major=11, ip_version_minor=0, ucode_version=0xDEADBEEF, ucode_size_bytes=4,
                ucode_array_offset_bytes=256, crc32=0xFFFFFFFF)
    raw = h.pack(**vals)
    assert raw == struct.pack("<II4HIIII", 0x1234, 32, 2, 1, 11, 0, 0xDEADBEEF, 4, 256, 0xFFFFFFFF)
    v = h.unpack_from(b"\xAA" * 8 + raw, offset=8)
    assert v.as_dict() == vals
    assert v.ucode_version == v["ucode_version"] == 0xDEADBEEF
    assert h.pack() == bytes(32)
    assert h.unpack_from(memoryview(bytearray(raw))) == v
    nested = structs.get(ucode, "psp_firmware_header_v1_0")
    nv = nested.unpack_from(nested.pack(header=vals, sos={"fw_version": 9, "offset_bytes": 0x100}))
    assert isinstance(nv.header, structs.StructValue) and nv.header.crc32 == 0xFFFFFFFF
    assert nv.sos.fw_version == 9 and nv.as_dict()["sos"]["offset_bytes"] == 0x100


def test_arrays_and_flex():
    bh = structs.get(discovery, "binary_header")
    raw = bh.pack(binary_signature=discovery.BINARY_SIGNATURE,
                  table_list=[{"offset": 0x3C, "size": 0x100}, {"offset": 0x200}])
    v = bh.unpack_from(raw)
    assert isinstance(v.table_list, tuple) and len(v.table_list) == 6
    assert v.table_list[0].offset == 0x3C and v.table_list[1].offset == 0x200 and v.table_list[2].offset == 0
    assert struct.unpack_from("<H", raw, 12 + 8)[0] == 0x200
    hdr = structs.get(ucode, "psp_firmware_header_v2_0")
    desc = structs.get(ucode, "psp_fw_bin_desc")
    blob = hdr.pack(psp_fw_bin_count=2) + desc.pack(fw_type=1, size_bytes=10) + desc.pack(fw_type=2)
    hv = hdr.unpack_from(blob)
    assert hv.psp_fw_bin == ()
    bins = hdr.unpack_flex(blob, hv.psp_fw_bin_count)
    assert [b.fw_type for b in bins] == [1, 2] and bins[0].size_bytes == 10
    with pytest.raises(ValueError, match="psp_fw_bin"):
        hdr.unpack_flex(blob, 3)


def test_short_buffer_error():
    h = structs.get(ucode, "common_firmware_header")
    with pytest.raises(ValueError, match=r"common_firmware_header.*32.*31 available"):
        h.unpack_from(bytes(31))
    with pytest.raises(ValueError, match=r"needs 32 bytes at offset 8"):
        h.unpack_from(bytes(32), offset=8)


def test_unknown_names():
    with pytest.raises(KeyError, match=r"amdrv.autogen.ucode.*common_firmware_header"):
        structs.get(ucode, "common_firmware_headr")
    h = structs.get(ucode, "common_firmware_header")
    with pytest.raises(KeyError, match=r"no field 'crc'.*crc32"):
        h.pack(crc=1)
    with pytest.raises(KeyError, match="no device layout"):
        structs.get(ucode, "amdgpu_firmware_info")
    with pytest.raises(KeyError):
        structs.enum(ucode, "psp_fw_typ")


def test_overflow_errors():
    h = structs.get(ucode, "common_firmware_header")
    with pytest.raises(ValueError, match="header_version_major"):
        h.pack(header_version_major=0x10000)
    with pytest.raises(ValueError, match="crc32"):
        h.pack(crc32=-1)
    ip = structs.get(discovery, "ip")
    with pytest.raises(ValueError, match="harvest"):
        ip.pack(harvest=16)
    bh = structs.get(discovery, "binary_header")
    with pytest.raises(ValueError, match="table_list"):
        bh.pack(table_list=[{}] * 7)
    with pytest.raises(ValueError, match=r"table_list\[1\]\.size"):
        bh.pack(table_list=[{}, {"size": 1 << 16}])
    m = structs.get(smu_13_0_0, "SmuMetrics_t")
    with pytest.raises(TypeError, match="AvgFanRpm"):
        m.pack(AvgFanRpm="fast")


def test_signed_fields():
    # OverDriveTable_t (smu13_driver_if_v13_0_0.h) has int16_t GfxclkFmin
    od = structs.get(smu_13_0_0, "OverDriveTable_t")
    raw = od.pack(GfxclkFmin=-5)
    assert od.unpack_from(raw).GfxclkFmin == -5
    with pytest.raises(ValueError, match="GfxclkFmin"):
        od.pack(GfxclkFmin=0x8000)


# ---------------------------------------------------------------- against a real C compiler

# the headers: the session fixture kernel_tree (tests/conftest.py), unpacked once


@pytest.mark.parametrize("mod,headers", [
    (ucode, ["amdgpu/amdgpu_socbb.h", "amdgpu/amdgpu_ucode.h"]),
    (discovery, ["include/discovery.h"]),
    # amdgpu_psp.h is kernel-internal: only its PSP runtime DB section (what gentables reads of it) is compiled
    (psp, ["amdgpu/psp_gfx_if.h", ("amdgpu/amdgpu_psp.h", "/** PSP runtime DB **/", "struct psp_context")]),
    (smu_13_0_0, ["pm/swsmu/inc/pmfw_if/smu13_driver_if_v13_0_0.h"]),
    (mqd_v11, ["include/v11_structs.h"]),
    (atomfirmware, ["include/atomfirmware.h"]),   # pack(1): the VBIOS tables amdrv/vbios.py walks
])
def test_layouts_match_gcc(mod, headers, tmp_path, kernel_tree):
    """Every generated offset, size and bitfield position equals what gcc computes for the header."""
    import re
    import shutil
    import subprocess
    gcc = shutil.which("gcc") or shutil.which("cc")
    tree = kernel_tree
    if gcc is None or tree is None:
        pytest.skip("needs gcc and the linux-source-6.1 headers")
    paths = []
    for h in headers:
        if isinstance(h, tuple):   # (header, start marker, end marker): that part of it
            text = tree.read(h[0])
            start = text.index(h[1])
            part = tmp_path / h[0].replace("/", "_")
            part.write_text(text[start:text.index(h[2], start)])
            paths.append(part)
        else:
            paths.append(tree.path(h))
    texts = "\n".join(p.read_text() for p in paths)
    shim = tmp_path / "shim.c"
    body = ["#include <stdint.h>", "#include <stddef.h>", "#include <stdio.h>", "#include <string.h>",
            "#include <stdbool.h>", "typedef uint8_t u8;", "struct mutex { long opaque[4]; };"]
    body += [f'#include "{p}"' for p in paths]
    body.append("int main(void) {")
    expected = []
    for name, (size, _align, _kind, fields) in mod.STRUCTS.items():
        if "." in name:
            continue  # tagless nested types are checked through their parents
        ctype = f"struct {name}" if re.search(rf"\b(struct|union)\s+{re.escape(name)}\s*\{{", texts) else name
        if ctype.startswith("struct") and re.search(rf"\bunion\s+{re.escape(name)}\s*\{{", texts):
            ctype = f"union {name}"
        body.append(f'printf("%zu\\n", sizeof({ctype}));')
        expected.append(str(size))
        for f in fields:
            fname, off = f[0], f[1]
            if len(f) > 4:  # bitfield: set it to all ones, report its lowest byte and bit
                shift, width, nbytes = f[4]
                body.append(f"{{ {ctype} s; unsigned char *p = (unsigned char *)&s; memset(&s, 0, sizeof s);"
                            f" s.{fname} = -1; int lo = -1, n = 0;"
                            f" for (int i = 0; i < (int)(8 * sizeof s); i++)"
                            f" if (p[i / 8] >> (i % 8) & 1) {{ if (lo < 0) lo = i; n++; }}"
                            f' printf("%d %d\\n", lo, n); }}')
                expected.append(f"{off * 8 + shift} {width}")
            else:
                body.append(f'printf("%zu\\n", offsetof({ctype}, {fname}));')
                expected.append(str(off))
    body.append("return 0; }")
    shim.write_text("\n".join(body) + "\n")
    exe = tmp_path / "shim"
    subprocess.run([gcc, "-w", "-o", str(exe), str(shim)], check=True, capture_output=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")[:-1]
    assert len(got) == len(expected)
    bad = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    assert not bad, bad[:10]


@pytest.mark.parametrize("snippet,name,size,checks", [
    # a bitfield that would straddle its u32 unit moves to the next one (expected values from gcc 12)
    ("struct s { uint32_t a:20; uint32_t b:20; uint8_t c; };", "s", 8, {"b": (4, 0), "c": 7}),
    # packed: fields and bitfields are placed bit-contiguously
    ("#pragma pack(1)\nstruct s { uint8_t a; uint32_t b:12; uint32_t c:20; uint64_t d; };\n#pragma pack()",
     "s", 13, {"b": (1, 0), "c": (2, 4), "d": 5}),
    ("struct s { uint8_t a; uint64_t b; } __attribute__((packed));", "s", 9, {"b": 1}),
    # array size from macros, enums and sizeof
    ("#define N (2 * M + 1)\n#define M 3\nenum e { X, Y = 4, Z };\n"
     "struct t { uint16_t a; };\nstruct s { uint8_t v[N]; uint8_t w[Z - sizeof(struct t)]; uint32_t x; };",
     "s", 16, {"w": 7, "x": 12}),
    # anonymous union members are hoisted; the union takes its largest member's size
    ("struct s { uint8_t a; union { uint16_t b; uint64_t c; }; uint8_t d; };", "s", 24, {"b": 8, "c": 8, "d": 16}),
])
def test_cparse_layout_rules(snippet, name, size, checks):
    from tools.gentables.cparse import Header
    h = Header()
    h.read(snippet, "t.h")
    got_size, _, fields = h.records[name].layout(h)
    assert got_size == size
    by = {f.name: f for f in fields}
    for fname, want in checks.items():
        f = by[fname]
        if isinstance(want, tuple):
            assert (f.offset + f.bits[0] // 8, f.bits[0] % 8) == want or \
                (f.offset * 8 + f.bits[0]) == want[0] * 8 + want[1], (fname, f)
        else:
            assert f.offset == want, (fname, f)


def test_cparse_macros_and_conditionals():
    from tools.gentables.cparse import Header, CError
    h = Header()
    h.read("#if defined(__BIG_ENDIAN)\n#define E 1\n#else\n#define E 2\n#endif\n"
           "#define F(x) (((x) & 0x7) << 4)\n#define G(a, b) (((a) & 0xFF) | (((b) & 0xFF) << 8) | 0x10000)\n"
           "#define H(x) (x + 1)\n#define U (~0u)\n#define S \"str\"\n", "t.h")
    assert h.value("E") == 2
    assert h.macro_field("F") == (4, 3)
    assert h.macro_field("G") == (0x10000, (("a", 0, 8), ("b", 8, 8)))
    with pytest.raises(CError):
        h.macro_field("H")  # x + 1 is arithmetic, not a field
    with pytest.raises(CError):
        h.value("S")


def test_generated_modules_are_current(tmp_path, kernel_tree):
    """Regenerating from the headers reproduces the committed modules byte for byte."""
    from pathlib import Path
    tree = kernel_tree
    if tree is None:
        pytest.skip("needs the linux-source-6.1 headers")
    from tools.gentables import structs as gen
    paths = gen.generate(tree, tmp_path)
    autogen = Path(ucode.__file__).parent
    for p in paths:
        assert p.read_text() == (autogen / p.name).read_text(), f"{p.name} is stale: regenerate"
