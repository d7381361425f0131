"""SMU 13.0.0 mailbox and power model, driven through BAR5 the way smu_cmn.c does it."""
import struct

import pytest

from amdrv.autogen import smu_13_0_0 as S
from gpusim import provider

# MP1 base[0] 0x16000 + smu_v13_0_0_ppt.c's mmMP1_SMN_C2PMSG_* offsets.
MSG, ARG, RESP = (0x16000 + 0x282) * 4, (0x16000 + 0x292) * 4, (0x16000 + 0x29A) * 4
DBG_MSG, DBG_ARG, DBG_RESP = (0x16000 + 0x28B) * 4, (0x16000 + 0x275) * 4, (0x16000 + 0x276) * 4


class Timeout(Exception):
    pass


def send(fn, msg, arg=0, polls=50):
    """smu_cmn_send_smc_msg_with_param: wait ready, clear response, argument, message, poll."""
    bar = fn.bar(5)
    for _ in range(polls):
        if bar.read32(RESP):
            break
    else:
        raise Timeout("SMU not ready")
    bar.write32(RESP, 0)
    bar.write32(ARG, arg)
    bar.write32(MSG, msg)
    for _ in range(polls):
        r = bar.read32(RESP)
        if r:
            return r, bar.read32(ARG)
    raise Timeout(f"no response to message {msg:#x}")


@pytest.fixture
def fn(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    f.dev.blocks["SMU"].firmware_loaded()
    yield f
    f.close()


def test_message_before_firmware_times_out(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    bar = f.bar(5)
    bar.write32(ARG, 0)
    bar.write32(MSG, S.PPSMC_MSG_GetSmuVersion)
    assert all(bar.read32(RESP) == 0 for _ in range(1000))    # never answered
    f.dev.blocks["SMU"].firmware_loaded()
    assert send(f, S.PPSMC_MSG_GetSmuVersion) == (S.PPSMC_Result_OK, 0x004E4B00)


def test_versions(fn):
    assert send(fn, S.PPSMC_MSG_GetSmuVersion)[1] == 0x004E4B00      # smu_13_0_0.bin, 78.75.0
    assert send(fn, S.PPSMC_MSG_GetDriverIfVersion)[1] == 0x37


def test_unknown_message_gets_unknown_command(fn):
    assert send(fn, 0x99)[0] == S.PPSMC_Result_UnknownCmd == 0xFE
    assert send(fn, S.PPSMC_MSG_EnterBaco)[0] == S.PPSMC_Result_Failed   # real but not modeled
    assert "EnterBaco" in str(fn.dev.errors[-1])


def test_response_waits_for_the_clock(fn):
    bar = fn.bar(5)
    bar.write32(RESP, 0)
    bar.write32(MSG, S.PPSMC_MSG_GetSmuVersion)
    assert fn.dev.regs.peek(RESP // 4) == 0                    # nothing happens until time passes
    fn.dev.step(5)
    assert fn.dev.regs.peek(RESP // 4) == S.PPSMC_Result_OK


def test_features(sim_bus, fn):
    """A board without SCPM: the driver's allowed mask decides what EnableAllSmuFeatures enables."""
    fn = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus, scpm=False)
    fn.dev.blocks["SMU"].firmware_loaded()
    assert send(fn, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] == 0
    send(fn, S.PPSMC_MSG_SetAllowedFeaturesMaskLow, 0x0000000F)
    send(fn, S.PPSMC_MSG_SetAllowedFeaturesMaskHigh, 0x1)
    send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)
    assert send(fn, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] == 0xF
    assert send(fn, S.PPSMC_MSG_GetRunningSmuFeaturesHigh)[1] == 0x1
    send(fn, S.PPSMC_MSG_DisableSmuFeaturesLow, 1 << S.FEATURE_DPM_GFXCLK_BIT)
    assert send(fn, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] == 0xD


def test_dpm_tables_and_soft_limits(fn):
    gfx, uclk = S.PPCLK_GFXCLK << 16, S.PPCLK_UCLK << 16
    assert send(fn, S.PPSMC_MSG_GetDpmFreqByIndex, gfx | 0xFF)[1] == 0x80000002   # fine-grained, 2
    assert send(fn, S.PPSMC_MSG_GetDpmFreqByIndex, uclk | 0xFF)[1] == 4
    assert [send(fn, S.PPSMC_MSG_GetDpmFreqByIndex, uclk | i)[1] for i in range(4)] == [96, 456, 772, 1249]
    assert send(fn, S.PPSMC_MSG_GetDpmFreqByIndex, uclk | 4)[0] == S.PPSMC_Result_Failed
    assert send(fn, S.PPSMC_MSG_GetMaxDpmFreq, gfx)[1] == 2500
    assert send(fn, S.PPSMC_MSG_GetMinDpmFreq, gfx)[1] == 500
    assert send(fn, S.PPSMC_MSG_GetMaxDpmFreq, 40 << 16)[0] == S.PPSMC_Result_Failed
    smu = fn.dev.blocks["SMU"]
    send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)
    smu.set_activity("gfx", 1.0)
    assert smu.clocks()[S.PPCLK_GFXCLK] == 2500
    send(fn, S.PPSMC_MSG_SetSoftMaxByFreq, gfx | 1800)
    assert smu.clocks()[S.PPCLK_GFXCLK] == 1800
    smu.set_activity("gfx", 0.0)
    send(fn, S.PPSMC_MSG_SetSoftMinByFreq, gfx | 1200)
    assert smu.clocks()[S.PPCLK_GFXCLK] == 1200


def test_ppt_limit(fn):
    assert send(fn, S.PPSMC_MSG_GetPptLimit, 0 << 16) == (S.PPSMC_Result_OK, 355)
    assert send(fn, S.PPSMC_MSG_SetPptLimit, 200)[0] == S.PPSMC_Result_OK
    assert send(fn, S.PPSMC_MSG_GetPptLimit, 0)[1] == 200
    smu = fn.dev.blocks["SMU"]
    send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)
    smu.set_activity("gfx", 1.0)
    smu.set_activity("mem", 1.0)
    assert smu.power() <= 201 and smu.clocks()[S.PPCLK_GFXCLK] < 2500    # throttled to the limit


def test_power_and_temperature_follow_activity_and_gating(fn):
    smu = fn.dev.blocks["SMU"]
    send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)
    idle_ungated = smu.power()
    send(fn, S.PPSMC_MSG_AllowGfxOff)
    assert smu.gfx_gated() and smu.clocks()[S.PPCLK_GFXCLK] == 0
    idle = smu.power()
    assert idle < idle_ungated < 40
    t0 = smu.temperature
    fn.dev.step(20_000_000)                      # 20 s of simulated time, idle
    smu.set_activity("gfx", 1.0)
    t_idle = smu.temperature
    assert abs(t_idle - t0) < 5
    assert not smu.gfx_gated() and smu.power() > 300
    fn.dev.step(20_000_000)
    smu.set_activity("gfx", 0.0)
    assert smu.temperature > t_idle + 30           # heated up towards ambient + power * C_PER_W


def test_metrics_table_layout_in_vram(fn):
    pytest.importorskip("gpusim.gmc")
    dev = fn.dev
    smu = dev.blocks["SMU"]
    fb_base = fn.bar(5).read32(dev.reg_addr("MMHUB", "MMMC_VM_FB_LOCATION_BASE") * 4) << 24
    table_off = 0x100000
    send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)
    assert send(fn, S.PPSMC_MSG_TransferTableSmu2Dram, S.TABLE_SMU_METRICS)[0] == \
        S.PPSMC_Result_CmdRejectedPrereq                                   # no driver table yet
    send(fn, S.PPSMC_MSG_SetDriverDramAddrHigh, (fb_base + table_off) >> 32)
    send(fn, S.PPSMC_MSG_SetDriverDramAddrLow, (fb_base + table_off) & 0xFFFFFFFF)
    smu.set_activity("gfx", 0.5)
    dev.step(3_000_000)     # AverageGfxActivity is an average over time (gpusim.power): 3 s at 50%
    assert send(fn, S.PPSMC_MSG_TransferTableSmu2Dram, S.TABLE_SMU_METRICS)[0] == S.PPSMC_Result_OK
    raw = fn.bar(0).read(table_off, 392)
    # Offsets read by hand from smu13_driver_if_v13_0_0.h's SmuMetrics_t.
    curr = struct.unpack_from("<13I", raw, 0)
    assert curr[S.PPCLK_GFXCLK] == 2500 and curr[S.PPCLK_UCLK] == 96
    assert struct.unpack_from("<I", raw, 80)[0] == 1                  # MetricsCounter
    assert struct.unpack_from("<H", raw, 104)[0] == 50                # AverageGfxActivity
    power = struct.unpack_from("<H", raw, 116)[0]                     # AverageSocketPower
    assert power == round(smu.power()) and power > 50
    edge, hotspot = struct.unpack_from("<2H", raw, 120)               # AvgTemperature[EDGE, HOTSPOT]
    assert 20 < edge < hotspot < 110
    send(fn, S.PPSMC_MSG_TransferTableSmu2Dram, S.TABLE_SMU_METRICS)
    assert struct.unpack_from("<I", fn.bar(0).read(table_off, 84), 80)[0] == 2
    # Dram2Smu keeps what the driver wrote; a table the SMU does not take fails.
    fn.bar(0).write(table_off, b"\x5a" * 140)
    fn.bar(5).write32(dev.reg_addr("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_REQ") * 4, 1)   # past the HDP
    fn.bar(5).read32(dev.reg_addr("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_DONE") * 4)
    assert send(fn, S.PPSMC_MSG_TransferTableDram2Smu, S.TABLE_OVERDRIVE)[0] == S.PPSMC_Result_OK
    assert smu.tables[S.TABLE_OVERDRIVE] == b"\x5a" * 140
    assert send(fn, S.PPSMC_MSG_TransferTableSmu2Dram, S.TABLE_PMSTATUSLOG)[0] == S.PPSMC_Result_Failed


def test_mode1_reset_returns_to_power_on(fn):
    dev = fn.dev
    bar = fn.bar(5)
    scratch = dev.reg_addr("NBIO", "BIF_BX0_BIOS_SCRATCH_7") * 4
    gc_scratch = dev.reg_addr("GC", "SCRATCH_REG0") * 4
    bar.write32(scratch, 0xC0FFEE)
    bar.write32(gc_scratch, 0x1234)
    fn.set_bus_master(True)
    send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)
    discovery_at = dev.vram.size - (64 << 10)
    dev.vram.write32(discovery_at, 0)                   # damage the discovery binary
    saved = [fn.config_read(4 * i, 4) for i in range(16)]   # amdgpu_device_cache_pci_state
    assert send(fn, S.PPSMC_MSG_Mode1Reset)[0] == S.PPSMC_Result_OK
    bar.read32(0)                                       # time passes: the reset happens
    # the bus interface was reset too: no memory decode, no bus mastering, BARs unassigned (amdgpu saves
    # and restores the config space around it, amdgpu_device_mode1_reset)
    assert fn.config_read(0x04, 2) & 0x6 == 0 and not dev.bus_master
    assert fn.config_read(0x10, 4) & ~0xF == 0 and fn.config_read(0x24, 4) == 0
    assert bar.read32(0xde3 * 4) == 0xFFFFFFFF and "master abort" in str(dev.errors[-1])
    for i in reversed(range(16)):                       # pci_restore_config_space: the command register last
        fn.config_write(4 * i, 4, saved[i])
    assert bar.read32(scratch) == 0 and bar.read32(gc_scratch) == 0
    assert dev.vram.read32(discovery_at) == 0x28211407  # the boot firmware wrote discovery again
    assert bar.read32(0xde3 * 4) == 1024                # RCC_CONFIG_MEMSIZE back
    smu = dev.blocks["SMU"]
    assert not smu.running and smu.features == 0
    with pytest.raises(Timeout):                        # SMU firmware must be loaded again
        send(fn, S.PPSMC_MSG_GetSmuVersion)


def test_debug_mailbox_mode1_reset(fn):
    bar = fn.bar(5)
    bar.write32(DBG_ARG, 0)
    bar.write32(DBG_MSG, 2)          # DEBUGSMC_MSG_Mode1Reset
    bar.write32(DBG_RESP, 0)
    fn.dev.step(5)
    assert not fn.dev.blocks["SMU"].running


def test_without_scpm_nothing_is_allowed_before_set_allowed_features_mask(sim_bus):
    """smu_smc_hw_setup sends SetAllowedFeaturesMask before EnableAllSmuFeatures when SCPM is off; a PMFW
    told nothing enables nothing (the model's default allowed mask is empty: assumption)."""
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus, scpm=False)
    f.dev.blocks["SMU"].firmware_loaded()
    assert send(f, S.PPSMC_MSG_EnableAllSmuFeatures)[0] == S.PPSMC_Result_OK
    assert send(f, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] == 0
    assert send(f, S.PPSMC_MSG_GetRunningSmuFeaturesHigh)[1] == 0
    assert send(f, S.PPSMC_MSG_SetAllowedFeaturesMaskHigh, 0xFFFFFFFF)[0] == S.PPSMC_Result_OK
    assert send(f, S.PPSMC_MSG_SetAllowedFeaturesMaskLow, 0xFFFFFFFF)[0] == S.PPSMC_Result_OK
    send(f, S.PPSMC_MSG_EnableAllSmuFeatures)
    assert send(f, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] >> S.FEATURE_DPM_GFXCLK_BIT & 1
    assert send(f, S.PPSMC_MSG_DisableAllSmuFeatures)[0] == S.PPSMC_Result_OK
    f.close()


def test_scpm_refuses_the_drivers_feature_configuration(fn):
    """amdgpu_smu.c: with SCPM, SetAllowedFeaturesMask*, DisableAllSmuFeatures and the PPTable upload are not
    permitted; the PMFW enables its own feature set."""
    assert fn.dev.scpm                                      # the default board, as retail Navi31
    for msg in (S.PPSMC_MSG_SetAllowedFeaturesMaskHigh, S.PPSMC_MSG_SetAllowedFeaturesMaskLow):
        assert send(fn, msg, 0xFFFFFFFF)[0] == S.PPSMC_Result_Failed
        assert "SCPM" in str(fn.dev.errors[-1])
    assert send(fn, S.PPSMC_MSG_EnableAllSmuFeatures)[0] == S.PPSMC_Result_OK
    low = send(fn, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1]
    assert low >> S.FEATURE_DPM_GFXCLK_BIT & 1 and low >> S.FEATURE_DPM_UCLK_BIT & 1
    assert send(fn, S.PPSMC_MSG_DisableAllSmuFeatures)[0] == S.PPSMC_Result_Failed
    assert send(fn, S.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] == low
    assert send(fn, S.PPSMC_MSG_TransferTableDram2Smu, S.TABLE_PPTABLE)[0] == S.PPSMC_Result_Failed


@pytest.mark.parametrize("scpm", [True, False])
def test_the_psp_runtime_database_reports_scpm(sim_bus, scpm):
    """amdgpu_psp.h PSP_RUNTIME_DB_*: at VRAM size - 1 MiB the header, the directory and the SCPM entry
    psp_sw_init reads; written again at a mode1 reset."""
    from amdrv import structs
    from amdrv.autogen import psp as P
    from gpusim import board
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus, scpm=scpm)
    dev = f.dev
    pos = dev.vram.size - P.PSP_RUNTIME_DB_OFFSET

    def entry():
        head = structs.get(P, "psp_runtime_data_header").unpack(dev.vram.read(pos, 4))
        assert (head.cookie, head.version) == (0x0ED5, 0x0100)
        d = structs.get(P, "psp_runtime_data_directory").unpack(dev.vram.read(pos + 4, 516))
        e = next(e for e in d.entry_list[:d.entry_count]
                 if e.entry_type == P.PSP_RUNTIME_ENTRY_TYPE_PPTABLE_ERR_STATUS)
        return struct.unpack("<I", dev.vram.read(pos + e.offset, 4))[0]
    assert entry() == (P.SCPM_ENABLE if scpm else P.SCPM_DISABLE)
    dev.vram.write(pos, bytes(4))
    board.mode1_reset(dev)
    assert entry() == (P.SCPM_ENABLE if scpm else P.SCPM_DISABLE)
    f.close()


def test_firmware_flags_say_whether_the_firmware_runs(sim_bus):
    """smu_v13_0_check_fw_status: MP1_FIRMWARE_FLAGS.INTERRUPTS_ENABLED at SMN MP1_Public | smnMP1_FIRMWARE_FLAGS,
    read through the RSMU index/data pair (nbio_v4_3 get_pcie_index/data_offset): 1 only while it runs,
    whatever the response register holds."""
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    bar, dev = f.bar(5), f.dev
    index, data = (dev.reg_addr("NBIO", n) * 4 for n in ("BIF_BX_PF0_RSMU_INDEX", "BIF_BX_PF0_RSMU_DATA"))

    def flags():
        bar.write32(index, 0x03B00000 | 0x3010024)
        return bar.read32(data)
    assert flags() == 0
    dev.blocks["SMU"].firmware_loaded()
    assert flags() == 1
    bar.write32(RESP, 0)                                # a driver clears it to post a message: still running
    assert flags() == 1
    dev.blocks["SMU"].reset()                           # what a mode1 or PCI reset does to it
    assert flags() == 0
    f.close()
