"""GFX 11 and SDMA 6.0 bring-up against the simulated GC: the MEC runs its firmware on all four pipes
and both SDMA engines run after a boot, fini halts them at low clocks and a warm boot restarts them;
the driver's own checks catch an incomplete autoload, a wrong MEC start address and an SDMA unhalt the
hardware refused."""
import pytest

import pcie
from amdrv.am import AMError, AMGPU
from amdrv.autogen.smu_13_0_0 import PPCLK_GFXCLK
from amdrv.device import AMDevice
from amdrv.ip.gfx import GFX, GFXError
from amdrv.ip.gmc import GMC
from amdrv.ip.nbio import NBIO
from amdrv.ip.sdma import SDMA, SDMAError


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def fresh(bus):
    return pcie.open_function("sim", "navi31", fresh=True, bus=bus)


def test_engines_run_fini_halts_them_at_low_clocks_warm_restarts_them(sim_bus):
    gpu = AMGPU.open(fresh(sim_bus))
    sim = gpu.dev.pci.dev  # the simulated board behind the function (tests may look)
    gfx, sdma, smu = sim.blocks["GFX"], sim.blocks["SDMA"], sim.blocks["SMU"]
    assert gfx.mec_pipes == {0, 1, 2, 3}  # started at the firmware's entry point, none hung
    assert all(sdma.running(i) and sdma.ctx_switch_running(i) for i in (0, 1))
    assert gpu.gfx.mec_ready() and gpu.sdma.ready()
    assert gpu.gfx.gb_addr_config == gpu.dev.reg("GC").GB_ADDR_CONFIG.read()
    assert not sim.errors, sim.errors
    levels = smu.dpm[PPCLK_GFXCLK][0]
    assert smu.soft[PPCLK_GFXCLK] == [levels[0], levels[-1]]
    gpu.fini()
    assert not gfx.mec_running and not any(sdma.running(i) for i in (0, 1))
    assert smu.soft[PPCLK_GFXCLK] == [levels[0], levels[0]]  # idle at the lowest level

    gpu = AMGPU.open(pcie.open_function("sim", "navi31", bus=sim_bus))
    assert gpu.boot_report.kind == "warm"
    assert gfx.mec_pipes == {0, 1, 2, 3} and all(sdma.running(i) for i in (0, 1))
    assert smu.soft[PPCLK_GFXCLK] == [levels[0], levels[-1]]  # clocks free again
    assert not sim.errors, sim.errors
    gpu.fini()


def test_gfx_waits_for_the_rlc_autoload(sim_bus):
    dev = AMDevice("am:sim", fresh(sim_bus))
    try:
        nbio, gmc = NBIO(dev), GMC(dev)
        nbio.init()
        gmc.init()
        with pytest.raises(GFXError, match="RLC autoload did not complete.*RLC_RLCS_BOOTLOAD_STATUS "
                                           "0x00000000 .BOOTLOAD_COMPLETE clear.*AUTOLOAD_RLC"):
            GFX(dev, gmc, nbio).wait_for_rlc_autoload(timeout_s=0.01)
    finally:
        dev.close()


def test_sdma_unhalt_refused_without_firmware_is_an_error(sim_bus):
    dev = AMDevice("am:sim", fresh(sim_bus))
    try:
        with pytest.raises(SDMAError, match=r"SDMA0 \(SDMA 6.0.0\): still halted after unhalting it: "
                                            r"SDMA0_F32_CNTL reads 0x08084001"):
            SDMA(dev, NBIO(dev)).init()
        assert any("SDMA0 stays halted" in str(e) for e in dev.pci.dev.errors)
    finally:
        dev.close()


def test_a_wrong_mec_start_address_hangs_the_mec_and_the_boot_says_so(sim_bus, monkeypatch):
    real_init = GFX.__init__

    def off_by_one_instruction(self, *args):
        real_init(self, *args)
        self.mec_start = (self.mec_start[0] + 4, self.mec_start[1])

    monkeypatch.setattr(GFX, "__init__", off_by_one_instruction)
    fn = fresh(sim_bus)
    with pytest.raises(AMError, match="cold boot failed in gfx: .*(GFX did not go idle: GRBM_STATUS .* GUI_ACTIVE|"
                                        "the MEC did not come up after unhalting it: CP_STAT reads 0x8)"):
        AMGPU.open(fn)
    assert any("entry point" in str(e) for e in fn.dev.errors)
