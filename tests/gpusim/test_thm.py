"""THM's digital thermal interrupt (gpusim.thm), driven through BAR5 as smu_v13_0_set_irq_state programs it:
nothing before the driver enables it, an L2H IV (client THM, source 0) when the hotspot crosses the high
threshold, H2L (source 1) below the low one, masks and IH routing honoured, status latched until cleared."""
import pytest

from amdrv import regs
from amdrv.autogen import ih as IHIDS
from amdrv.autogen import smu_13_0_0 as S
from gpusim import power, provider

from .test_smu import send

SECOND = 1_000_000
THM = regs.load("thm_13_0_2")


@pytest.fixture
def hot(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    smu = f.dev.blocks["SMU"]
    smu.firmware_loaded()
    send(f, S.PPSMC_MSG_EnableAllSmuFeatures)
    ivs = []
    f.dev.ih_sink = ivs.append        # what reaches the IH (its ring is gpusim.ih's business)
    yield f, smu, ivs
    f.close()


def reg(f, name, value=None):
    addr = (f.dev.layout.bases("THM")[THM[name].base_idx] + THM[name].offset) * 4
    if value is None:
        return f.bar(5).read32(addr)
    f.bar(5).write32(addr, value)


def enable(f, high, low, **over):
    """smu_v13_0_set_irq_state(AMDGPU_IRQ_STATE_ENABLE), THM part."""
    d = THM["THM_THERMAL_INT_CTRL"]
    fields = dict(MAX_IH_CREDIT=5, THERM_IH_HW_ENA=1, THERM_INTH_MASK=0, THERM_INTL_MASK=0, DIG_THERM_INTH=high,
                  DIG_THERM_INTL=low, THERM_TRIGGER_MASK=0)
    fields.update(over)
    reg(f, "THM_THERMAL_INT_CTRL", d.encode(reg(f, "THM_THERMAL_INT_CTRL"), **fields))
    reg(f, "THM_THERMAL_INT_ENA", THM["THM_THERMAL_INT_ENA"].encode(THERM_INTH_CLR=1, THERM_INTL_CLR=1,
                                                                   THERM_TRIGGER_CLR=1))


def overheat(f, smu, seconds=600):
    smu.pm.fan_stalled, smu.pm.ambient_c = True, 100.0     # a dead fan in a hot case
    smu.set_activity("gfx", 1.0)
    f.dev.step(seconds * SECOND)
    smu.metrics()


def cool(f, smu):
    smu.pm.fan_stalled, smu.pm.ambient_c = False, power.AMBIENT_C
    smu.set_activity("gfx", 0.0)
    f.dev.step(1200 * SECOND)
    smu.metrics()


def test_nothing_arrives_before_the_driver_enables_it(hot):
    f, smu, ivs = hot
    overheat(f, smu)
    assert smu.pm.temperatures()[1] > 118 and ivs == []


def test_crossing_the_thresholds_raises_l2h_then_h2l(hot):
    f, smu, ivs = hot
    enable(f, high=118, low=100)
    overheat(f, smu)
    assert [(iv.client_id, iv.source_id) for iv in ivs] == [(IHIDS.SOC15_IH_CLIENTID_THM, 0)]   # once
    assert THM["THM_THERMAL_INT_STATUS"].decode(reg(f, "THM_THERMAL_INT_STATUS"))["THERM_INTH_DETECT"] == 1
    reg(f, "THM_THERMAL_INT_ENA", THM["THM_THERMAL_INT_ENA"].encode(THERM_INTH_CLR=1))
    assert reg(f, "THM_THERMAL_INT_STATUS") == 0
    cool(f, smu)
    assert [(iv.client_id, iv.source_id) for iv in ivs] == [(IHIDS.SOC15_IH_CLIENTID_THM, 0),
                                                            (IHIDS.SOC15_IH_CLIENTID_THM, 1)]


@pytest.mark.parametrize("over", [{"THERM_INTH_MASK": 1}, {"THERM_IH_HW_ENA": 0}])
def test_a_masked_or_unrouted_interrupt_does_not_reach_the_ih(hot, over):
    f, smu, ivs = hot
    enable(f, high=118, low=100, **over)
    overheat(f, smu)
    assert ivs == []
    status = THM["THM_THERMAL_INT_STATUS"].decode(reg(f, "THM_THERMAL_INT_STATUS"))
    assert status["THERM_INTH_DETECT"] == (0 if "THERM_INTH_MASK" in over else 1)   # latched, not delivered


def test_the_threshold_is_the_one_programmed(hot):
    f, smu, ivs = hot
    enable(f, high=200, low=0)        # higher than the overheat reaches
    overheat(f, smu, 300)
    assert smu.pm.temperatures()[1] < 200 and ivs == []
