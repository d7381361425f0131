"""GFXOFF in the simulated SMU (gpusim.smu): GC registers are unpowered while GFX is off, DisallowGfxOff is
answered only once GFX is back on (a seeded exit latency), and a CP/SDMA doorbell wakes GFX and reaches
its engine after the exit."""
import pytest

from amdrv.autogen import smu_13_0_0 as S
from gpusim import provider, smu as smu_model

from .test_smu import send

SECOND = 1_000_000   # clock steps


@pytest.fixture
def off(sim_bus):
    """A Navi31 whose SMU runs, GFXOFF allowed and GFX powered off (idle)."""
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    smu = f.dev.blocks["SMU"]
    smu.firmware_loaded()
    send(f, S.PPSMC_MSG_EnableAllSmuFeatures)
    send(f, S.PPSMC_MSG_AllowGfxOff)
    f.dev.step(SECOND)
    assert smu.gfx_power() == "off"
    yield f, smu
    f.close()


def _reg(f, ip, name):
    return f.dev.reg_addr(ip, name) * 4


def test_gc_registers_are_unpowered_while_gfx_is_off(off):
    f, smu = off
    bar = f.bar(5)
    scratch = _reg(f, "GC", "SCRATCH_REG7")
    f.dev.set("GC", "SCRATCH_REG7", 0x1234)
    assert bar.read32(scratch) == smu_model.GC_OFF_READ
    bar.write32(scratch, 0x5678)
    assert f.dev.get("GC", "SCRATCH_REG7") == 0x1234          # the write was lost
    sdma = _reg(f, "GC", "SDMA0_QUEUE0_RB_CNTL")              # SDMA's registers are in the GC file
    assert bar.read32(sdma) == smu_model.GC_OFF_READ
    errs = [str(e) for e in f.dev.errors]
    assert len(errs) == 3 and all("while GFX is off (GFXOFF)" in e for e in errs), errs
    assert "SCRATCH_REG7 read" in errs[0] and "write of 0x5678" in errs[1]
    # other blocks, and the GC's always-on IMU/RLCS interface, answer as usual
    f.dev.errors.clear()
    f.dev.set("GC", "RLC_RLCS_BOOTLOAD_STATUS", 0x80000000)
    assert bar.read32(_reg(f, "GC", "RLC_RLCS_BOOTLOAD_STATUS")) == 0x80000000
    assert bar.read32(_reg(f, "MP1", "MP1_SMN_C2PMSG_90")) == S.PPSMC_Result_OK
    assert not f.dev.errors


def test_disallow_is_answered_after_the_exit_latency(off):
    f, smu = off
    bar = f.bar(5)
    t0 = f.dev.steps
    send(f, S.PPSMC_MSG_DisallowGfxOff, polls=2000)
    took = f.dev.steps - t0
    lo, hi = smu_model.GFXOFF_EXIT_STEPS
    assert lo <= took <= hi + 10, took
    assert smu.gfx_power() == "on" and smu.gfxoff_exits == 1
    f.dev.set("GC", "SCRATCH_REG7", 0x1234)
    assert bar.read32(_reg(f, "GC", "SCRATCH_REG7")) == 0x1234 and not f.dev.errors
    # GFX on and held on: no exit, an immediate answer
    t0 = f.dev.steps
    send(f, S.PPSMC_MSG_DisallowGfxOff)
    assert f.dev.steps - t0 < lo


def test_exit_latency_is_seeded_per_chip(sim_bus):
    def exits():
        f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
        try:
            smu = f.dev.blocks["SMU"]
            smu.firmware_loaded()
            send(f, S.PPSMC_MSG_EnableAllSmuFeatures)
            out = []
            for _ in range(3):
                send(f, S.PPSMC_MSG_AllowGfxOff)
                f.dev.step(SECOND)
                out.append(smu.wake())
                f.dev.step(out[-1])
            return out
        finally:
            f.close()
    first = exits()
    assert first == exits() and len(set(first)) > 1
    assert all(smu_model.GFXOFF_EXIT_STEPS[0] <= n <= smu_model.GFXOFF_EXIT_STEPS[1] for n in first)


def test_doorbell_wakes_gfx_and_reaches_the_engine_after_the_exit(off):
    f, smu = off
    dev, nbio = f.dev, f.dev.blocks["NBIO"]
    dev.set("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    dev.set("NBIO", "S2A_DOORBELL_ENTRY_0_CTRL", 0x30000007)   # the CP's default route (nbio_v4_3)
    nbio._routes = None
    seen = []
    saved = nbio.doorbell_clients
    nbio.doorbell_clients = {"CP": [lambda i, v: seen.append((dev.steps, i, v)) or True]}
    try:
        t0 = dev.steps
        nbio.doorbell_write(0x10, 7, 8)
        assert seen == [] and smu.gfx_power() == "exiting"
        nbio.doorbell_write(0x10, 9, 8)                     # a second one while GFX comes up: in order
        dev.step(smu_model.GFXOFF_EXIT_STEPS[1] + 1)
        assert [x[2] for x in seen] == [7, 9] and seen[0][0] - t0 >= smu_model.GFXOFF_EXIT_STEPS[0]
        assert smu.gfxoff_exits == 1
    finally:
        nbio.doorbell_clients = saved
