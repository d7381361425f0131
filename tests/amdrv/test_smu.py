"""amdrv.ip.smu against the simulated SMU: mailbox results and timeouts, versions, metrics, DPM, power, reset."""
import pytest

import pcie
from amdrv.autogen import smu_13_0_0 as S
from amdrv.device import AMDevice
from amdrv.ip.nbio import NBIO
from amdrv.ip.psp import PSP
from amdrv.ip import smu as smu_ip
from amdrv.ip.smu import SMU, SMUError, SMUTimeout



@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def open_dev(bus, chip="navi31") -> AMDevice:
    dev = AMDevice(f"am:sim:{chip}", pcie.open_function("sim", chip, fresh=True, bus=bus))
    # Stand-in for the GMC block: the FB location the VBIOS left (mmhub_v3_0_get_fb_location).
    dev.fb_base = (dev.reg("MMHUB").MMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24
    NBIO(dev).init()    # soc21_common_hw_init before the PSP: the HDP flush page its flushes write
    return dev


@pytest.fixture
def booted(sim_bus):
    dev = open_dev(sim_bus)
    psp = PSP(dev)
    psp.init()
    smu = SMU(dev, timeout_s=0.2, reset_wait_s=0)
    yield dev, psp, smu, dev.pci.dev.blocks["SMU"]
    dev.close()


def test_message_before_the_firmware_times_out(sim_bus):
    dev = open_dev(sim_bus)
    smu = SMU(dev, timeout_s=0.05)
    with pytest.raises(SMUTimeout) as e:
        smu.query(S.PPSMC_MSG_GetSmuVersion)
    msg = str(e.value)
    assert msg.startswith("am:sim:navi31: SMU GetSmuVersion(0x0): timeout") and "MP1_SMN_C2PMSG_90" in msg
    assert "not running" in msg and "PSP" in msg
    assert e.value.msg == S.PPSMC_MSG_GetSmuVersion
    dev.close()


@pytest.mark.parametrize("chip,version", [("navi31", 0x004E4B00), ("navi33", 0x00523C00)])
def test_init_reads_versions_and_enables_features(sim_bus, chip, version):
    dev = open_dev(sim_bus, chip)
    psp = PSP(dev)
    psp.init()
    smu = SMU(dev)
    before = dev.pci.counters.snapshot()
    smu.init()
    assert (smu.version, smu.if_version) == (version, 0x37)
    assert smu.version == psp.image(psp.files["smu"]).ucode_version   # what the PSP loaded is what runs
    assert smu.version_str().startswith(f"{version >> 16 & 0xFF}.{version >> 8 & 0xFF}.0")
    model = dev.pci.dev.blocks["SMU"]
    assert model.driver_table == dev.mc_address(smu.table.addr)
    assert smu.enabled_features() == model.features != 0
    assert (dev.pci.counters - before).mmio_reads < 40
    dev.close()


def test_unknown_message_and_failed_results(booted):
    dev, psp, smu, model = booted
    with pytest.raises(SMUError, match=r"SMU message 0x99\(0x0\) failed: UnknownCmd \(0xfe\)") as e:
        smu.send(0x99)
    assert e.value.result == S.PPSMC_Result_UnknownCmd
    with pytest.raises(SMUError, match=r"TransferTableSmu2Dram\(0x5\) failed: CmdRejectedPrereq \(0xfd\)"):
        smu.send(S.PPSMC_MSG_TransferTableSmu2Dram, S.TABLE_SMU_METRICS)   # no driver table address yet
    with pytest.raises(SMUError, match=r"TransferTableSmu2Dram\(0x5\) failed: CmdRejectedPrereq"):
        smu.metrics()
    with pytest.raises(SMUError, match=r"SetPptLimit\(0x2710\) failed: Failed \(0xff\)"):
        smu.set_power_limit(10000)
    assert smu.query(S.PPSMC_MSG_GetSmuVersion) == 0x004E4B00   # the mailbox still works


def test_metrics_decode_sane_values(booted):
    dev, psp, smu, model = booted
    smu.init()
    m = smu.metrics()
    assert 20 <= m.edge_c <= m.hotspot_c < 110 and 20 <= m.mem_c < 110
    assert 0 < m.socket_power_w <= m.board_power_w < smu.power_limit()
    assert (m.gfx_activity, m.mem_activity) == (0, 0)
    clocks = model.clocks()
    assert (m.gfxclk_mhz, m.socclk_mhz, m.uclk_mhz, m.fclk_mhz) == (
        clocks[S.PPCLK_GFXCLK], clocks[S.PPCLK_SOCCLK], clocks[S.PPCLK_UCLK], clocks[S.PPCLK_FCLK])
    model.set_activity("gfx", 1.0)
    model.set_activity("mem", 1.0)
    model.dev.step(3_000_000)   # the activities are averages over time (gpusim.power): 3 s busy
    busy = smu.metrics()
    assert busy.counter == m.counter + 1
    assert (busy.gfx_activity, busy.mem_activity) == (100, 100)
    top = smu.dpm_levels("gfxclk").mhz[-1]
    # busy: the highest levels, GFXCLK as far as the power limit lets the throttler keep it
    assert busy.gfxclk_mhz == busy.average_gfxclk_mhz == model.clocks()[S.PPCLK_GFXCLK]
    assert 0.9 * top <= busy.gfxclk_mhz <= top and busy.gfxclk_mhz > m.gfxclk_mhz
    assert busy.uclk_mhz == smu.dpm_levels("uclk").mhz[-1]
    assert m.socket_power_w < busy.socket_power_w == round(model.power()) <= smu.power_limit()


def test_dpm_tables_soft_limits_and_low_clocks(booted):
    dev, psp, smu, model = booted
    smu.init()
    gfx, uclk = smu.dpm_levels("gfxclk"), smu.dpm_levels(S.PPCLK_UCLK)
    assert gfx.fine_grained and not uclk.fine_grained
    assert len(uclk.mhz) > 2 and list(uclk.mhz) == sorted(uclk.mhz)
    assert smu.dpm_range("uclk") == (uclk.mhz[0], uclk.mhz[-1])
    model.set_activity("gfx", 1.0)
    model.set_activity("mem", 1.0)
    smu.set_soft_limits("uclk", max_mhz=uclk.mhz[1])
    assert smu.metrics().uclk_mhz == uclk.mhz[1]
    smu.low_clocks()
    m = smu.metrics()
    assert (m.gfxclk_mhz, m.uclk_mhz) == (gfx.mhz[0], uclk.mhz[0])    # busy, yet pinned low
    smu.auto_clocks()
    assert smu.metrics().uclk_mhz == uclk.mhz[-1] and smu.metrics().gfxclk_mhz > gfx.mhz[0]
    with pytest.raises(SMUError, match="unknown clock 'memclk'"):
        smu.dpm_levels("memclk")


def test_power_limit(booted):
    dev, psp, smu, model = booted
    smu.init()
    assert smu.power_limit() == 355
    smu.set_power_limit(300)
    assert smu.power_limit() == model.ppt_limit == 300


def test_mode1_reset_then_boot_again(booted):
    dev, psp, smu, model = booted
    smu.init()
    dev.pci.set_bus_master(True)
    smu.mode1_reset()
    # reads that raced the reset (the response poll) hit a function with decode off: master aborts, nothing else
    gpu = dev.pci.dev
    assert all("master abort" in e.message for e in gpu.errors), gpu.errors
    gpu.errors.clear()
    assert not psp.sos_alive()
    assert dev.pci.config_read(0x04, 2) & 0x06 == 0x06  # memory decode and bus mastering restored (PCI state)
    with pytest.raises(SMUTimeout):
        smu.query(S.PPSMC_MSG_GetSmuVersion)             # the firmware is gone with the reset
    NBIO(dev).init()                                     # common hw_init again, as amdgpu after a reset
    psp.init()
    smu.init()
    assert smu.version == 0x004E4B00 and dev.pci.dev.errors == []


def test_alive_fini_and_warm_attach(sim_bus):
    dev = open_dev(sim_bus)
    smu = SMU(dev)
    before = dev.pci.counters.snapshot()
    assert not smu.alive()                               # nothing loaded: one register read, no timeout
    assert (dev.pci.counters - before).mmio_reads == 1
    PSP(dev).init()
    assert smu.alive()
    smu.init()
    model = dev.pci.dev.blocks["SMU"]
    model.set_activity("gfx", 1.0)
    smu.fini()                                           # idle and cool: lowest levels even under load
    low, lowest = smu.metrics(), smu.dpm_levels("gfxclk").mhz[0]
    dev.close()
    again = AMDevice("am:sim:navi31", pcie.open_function("sim", "navi31", bus=sim_bus))   # a new driver instance
    again.fb_base = dev.fb_base
    smu2 = SMU(again)
    assert smu2.table.addr == smu.table.addr             # boot memory: the same driver table
    assert smu2.alive()
    smu2.attach()
    high = smu2.metrics()
    assert low.gfxclk_mhz == lowest < high.gfxclk_mhz
    assert dev.pci.dev.errors == []
    again.close()


def test_driver_interface_mismatch_is_a_warning(booted, monkeypatch, caplog):
    dev, psp, smu, model = booted
    monkeypatch.setitem(smu_ip.DRIVER_IF_VERSION, (13, 0, 0), 0x36)
    with caplog.at_level("WARNING", logger="amdrv.smu"):
        smu.init()                                       # upstream only warns: the firmware is compatible
    assert "driver interface 0x37, this driver 0x36" in caplog.text and "78.75.0" in caplog.text


def test_boot_and_mode1_reset_with_an_asynchronous_clock(sim_bus):
    # the simulator steps from a thread, as a real device runs on its own: waits must not rely on steps
    dev = AMDevice("am:sim:navi31", pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, async_clock=True))
    dev.fb_base = (dev.reg("MMHUB").MMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24
    NBIO(dev).init()
    psp, smu = PSP(dev), SMU(dev, reset_wait_s=0.2)   # the reset must land in the wait on a loaded host
    psp.init()
    smu.init()
    smu.mode1_reset()
    assert not psp.sos_alive() and not smu.alive()
    NBIO(dev).init()
    psp.init()
    smu.init()
    # only reads that raced the reset (decode off until the config space is restored) may have aborted
    assert smu.metrics().counter == 1
    assert all("master abort" in e.message for e in dev.pci.dev.errors), dev.pci.dev.errors
    dev.close()


class SlowLink:
    """A response register read that arrives late (a USB round trip, a preempted process): the GPU runs
    5 clock steps before the value is taken."""

    def __init__(self, reg, gpu):
        self.reg, self.gpu = reg, gpu

    def read(self):
        self.gpu.step(5)
        return self.reg.read()

    def write(self, value):
        self.reg.write(value)


def test_mode1_reset_whose_answer_is_wiped_before_it_is_read(booted):
    dev, psp, smu, model = booted
    smu.init()
    smu.resp_reg = SlowLink(smu.resp_reg, dev.pci.dev)
    smu.mode1_reset()                  # the answer came and was reset away: the sOS sign of life tells
    assert not psp.sos_alive() and not model.running


# -- SCPM (amdgpu_smu.c smu_smc_hw_setup; amdgpu_psp.c psp_sw_init) ------------------------------------------

def open_board(bus, scpm: bool) -> AMDevice:
    dev = AMDevice("am:sim:navi31", pcie.open_function("sim", "navi31", fresh=True, bus=bus, scpm=scpm))
    dev.fb_base = (dev.reg("MMHUB").MMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24
    NBIO(dev).init()    # the HDP flush page before the PSP (soc21_common_hw_init)
    PSP(dev).init()
    return dev


@pytest.mark.parametrize("scpm", [True, False])
def test_scpm_is_read_from_the_psp_runtime_database_and_features_come_up(sim_bus, scpm):
    from amdrv.ip.psp import runtime_scpm
    dev = open_board(sim_bus, scpm)
    assert runtime_scpm(dev) is scpm
    smu = SMU(dev)
    smu.init()
    assert smu.scpm is scpm
    features = smu.enabled_features()
    assert features >> S.FEATURE_DPM_GFXCLK_BIT & 1 and features >> S.FEATURE_DPM_UCLK_BIT & 1
    assert dev.pci.dev.errors == []
    dev.close()


def test_sending_the_allowed_mask_with_scpm_fails(sim_bus):
    """With SCPM the PMFW refuses SetAllowedFeaturesMask: a driver that does not skip it stops the boot."""
    dev = open_board(sim_bus, True)
    smu = SMU(dev)
    smu.scpm = False                     # the driver ignores the runtime database
    with pytest.raises(SMUError, match=r"SetAllowedFeaturesMaskHigh\(0x[0-9a-f]+\) failed: Failed"):
        smu.init()
    dev.close()


def test_skipping_the_allowed_mask_without_scpm_leaves_every_feature_off(sim_bus):
    """Without SCPM the PMFW enables what the driver allowed: nothing, if the mask is not sent; DPM stays off
    and GFXCLK stays at its boot level under load."""
    dev = open_board(sim_bus, False)
    smu = SMU(dev)
    smu.scpm = True                      # the driver wrongly believes SCPM is on and skips the mask
    smu.init()
    assert smu.enabled_features() == 0
    model = dev.pci.dev.blocks["SMU"]
    model.set_activity("gfx", 1.0)
    assert smu.metrics().gfxclk_mhz == smu.dpm_levels("gfxclk").mhz[0]
    dev.close()


def test_mode1_reset_without_restoring_the_config_space_never_comes_back(booted, monkeypatch):
    """amdgpu_device_mode1_reset restores the saved config space: the reset cleared memory decode, bus
    mastering and the BARs, so without it every register read is a master abort (all ones)."""
    from amdrv import pci_state
    dev, psp, smu, model = booted
    smu.init()
    dev.pci.set_bus_master(True)
    monkeypatch.setattr(pci_state, "restore", lambda pci, state: pci.set_bus_master(True))   # the old driver
    with pytest.raises(SMUTimeout, match=r"RCC_CONFIG_MEMSIZE reads all ones") as e:
        smu.mode1_reset()
    assert str(e.value).startswith(f"{dev.name}: after Mode1Reset") and isinstance(e.value, SMUError)
    assert dev.pci.config_read(0x14, 4) == 0 and dev.pci.config_read(0x24, 4) == 0    # BARs still unassigned


def test_mode1_reset_restores_bars_decode_and_resizable_bar_sizes(sim_bus):
    """pci_restore_state: the resizable BAR sizes (reset to 256 MiB / 2 MiB) come back with the header."""
    dev = AMDevice("am:sim:navi31", pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus))
    dev.fb_base = (dev.reg("MMHUB").MMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24
    assert dev.pci.bar(0).size == 32 << 30            # large BAR: the BIOS resized it
    NBIO(dev).init()    # the HDP flush page before the PSP (soc21_common_hw_init)
    before = [dev.pci.config_read(o, 4) for o in (0x04, 0x10, 0x14, 0x18, 0x1C, 0x24, 0x208, 0x210)]
    PSP(dev).init()
    smu = SMU(dev, reset_wait_s=0)
    smu.init()
    smu.mode1_reset()
    after = [dev.pci.config_read(o, 4) for o in (0x04, 0x10, 0x14, 0x18, 0x1C, 0x24, 0x208, 0x210)]
    assert after == before and after[0] & 0x2       # memory decode back (bus mastering as it was)
    assert dev.pci.bar(0).size == 32 << 30 and dev.vram.read32(dev.vram.size - (64 << 10)) == 0x28211407
    dev.close()
