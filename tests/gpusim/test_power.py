"""The board's power and thermal model behind the simulated SMU (gpusim.power): calibration to the
products' figures, activity averaged over time, the fan curve, the hotspot and PPT throttlers as the
metrics table reports them, and the real-time clock of a kept GPU."""
import struct

import pytest

from amdrv.autogen import smu_13_0_0 as S
from gpusim import power, provider

from .test_smu import send

SECOND = 1_000_000   # clock steps


@pytest.fixture(params=["navi31", "navi33"])
def board(sim_bus, request):
    f = provider.open_function(request.param, vram_size=1 << 30, fresh=True, bus=sim_bus)
    smu = f.dev.blocks["SMU"]
    smu.firmware_loaded()
    send(f, S.PPSMC_MSG_EnableAllSmuFeatures)
    yield f, smu
    f.close()   # and off the test's bus (sim_bus): no later am:sim:navi33 finds this 1 GiB board


def metrics(smu):
    return structs_unpack(smu.metrics())


def structs_unpack(raw: bytes) -> dict:
    # Offsets read by hand from smu13_driver_if_v13_0_0.h's SmuMetrics_t (a check on the generated layout).
    return {"gfx_activity": struct.unpack_from("<H", raw, 104)[0], "power": struct.unpack_from("<H", raw, 118)[0],
            "edge": struct.unpack_from("<H", raw, 120)[0], "hotspot": struct.unpack_from("<H", raw, 122)[0],
            "fan_pwm": raw[150], "fan_rpm": struct.unpack_from("<H", raw, 152)[0],
            "throttling": list(raw[154:176]), "gfxclk": struct.unpack_from("<I", raw, 0)[0]}


def test_idle_floor_with_gfxoff_and_lowest_dpm(board):
    f, smu = board
    chip = f.dev.chip
    ungated = smu.power()
    send(f, S.PPSMC_MSG_AllowGfxOff)
    f.dev.step(SECOND)
    m = metrics(smu)
    assert smu.gfx_gated() and m["gfxclk"] == 0 and m["gfx_activity"] == 0
    assert m["power"] == power.IDLE_W[chip] < ungated
    if chip == "navi31":
        assert 15 <= m["power"] <= 20          # what a 7900 XTX idles at under amdgpu
    # the driver's request holds GFX on, idle or not; answered once GFX is back on (a GFXOFF exit)
    send(f, S.PPSMC_MSG_DisallowGfxOff, polls=2000)
    assert not smu.gfx_gated() and smu.power() == ungated


def test_full_load_fits_the_board_power_limit(board):
    f, smu = board
    chip = f.dev.chip
    smu.set_activity("gfx", 1.0)
    smu.set_activity("mem", 1.0)
    f.dev.step(2 * SECOND)
    m = metrics(smu)
    assert m["gfx_activity"] == 100
    assert 0.8 * power.PPT_LIMIT_W[chip] <= m["power"] <= power.PPT_LIMIT_W[chip]
    send(f, S.PPSMC_MSG_SetPptLimit, power.PPT_LIMIT_W[chip] // 2)
    m = metrics(smu)
    assert m["power"] <= power.PPT_LIMIT_W[chip] // 2 + 1 and m["throttling"][S.THROTTLER_PPT0_BIT] > 0
    # without the throttlers feature nothing holds the board to its limit
    send(f, S.PPSMC_MSG_DisableSmuFeaturesHigh if S.FEATURE_THROTTLERS_BIT >= 32 else S.PPSMC_MSG_DisableSmuFeaturesLow,
         1 << (S.FEATURE_THROTTLERS_BIT % 32))
    assert smu.power() > power.PPT_LIMIT_W[chip] // 2 + 20 and not any(metrics(smu)["throttling"])


def test_activity_is_an_average_over_time(board):
    f, smu = board
    smu.set_activity("gfx", 1.0)
    assert metrics(smu)["gfx_activity"] == 0            # no time has passed yet
    f.dev.step(int(power.ACTIVITY_TAU_S * SECOND))
    assert 55 <= metrics(smu)["gfx_activity"] <= 70     # 1 - 1/e of the way
    f.dev.step(SECOND * 3)
    assert metrics(smu)["gfx_activity"] == 100
    smu.set_activity("gfx", 0.0)
    assert smu.clocks()[S.PPCLK_GFXCLK] > 500            # DPM follows the average down, not the instant
    f.dev.step(SECOND * 3)
    assert metrics(smu)["gfx_activity"] == 0 and smu.clocks()[S.PPCLK_GFXCLK] == 500


def test_heats_under_load_cools_idle_and_the_fan_follows(board):
    f, smu = board
    send(f, S.PPSMC_MSG_AllowGfxOff)
    f.dev.step(600 * SECOND)
    idle = metrics(smu)
    assert idle["fan_pwm"] == 0 and idle["fan_rpm"] == 0 and 30 <= idle["edge"] <= 50     # zero-RPM idle
    smu.set_activity("gfx", 1.0)
    f.dev.step(300 * SECOND)
    hot = metrics(smu)
    assert 55 <= hot["edge"] <= 85 and hot["edge"] < hot["hotspot"] < power.HOTSPOT_LIMIT_C
    assert hot["fan_pwm"] >= 30 and hot["fan_rpm"] > 500 and not any(hot["throttling"])
    smu.set_activity("gfx", 0.0)
    f.dev.step(600 * SECOND)
    assert metrics(smu)["edge"] <= idle["edge"] + 2 and metrics(smu)["fan_pwm"] == 0


def test_a_stalled_fan_overheats_and_the_hotspot_throttler_holds_the_limit(board):
    f, smu = board
    smu.pm.fan_stalled = True
    smu.set_activity("gfx", 1.0)
    f.dev.step(900 * SECOND)
    m = metrics(smu)
    assert power.HOTSPOT_LIMIT_C - 3 <= m["hotspot"] <= power.HOTSPOT_LIMIT_C + 2
    assert m["throttling"][S.THROTTLER_TEMP_HOTSPOT_BIT] > 0 and m["fan_rpm"] == 0
    assert m["gfxclk"] < smu.dpm[S.PPCLK_GFXCLK][0][-1] and m["power"] < 0.6 * power.PPT_LIMIT_W[f.dev.chip]


def test_fan_curve():
    assert power.fan_pwm(40) == 0 and power.fan_pwm(power.FAN_START_C) == power.FAN_MIN_PWM
    assert power.fan_pwm(power.FAN_FULL_C) == power.fan_pwm(120) == 1.0
    assert power.fan_pwm(40, controlled=False) == power.FAN_BOOT_PWM


def test_a_kept_gpu_runs_on_the_wall_clock(monkeypatch, board):
    f, smu = board
    now = [1000.0]
    monkeypatch.setattr(power_time(), "time", lambda: now[0])
    f.dev.wall_clock = True
    smu.set_activity("gfx", 1.0)      # integrates across the switch of time base (no negative interval)
    now[0] += 2.0
    assert metrics(smu)["gfx_activity"] == 100
    f.dev.step(SECOND)                # simulated time no longer counts
    smu.set_activity("gfx", 0.0)
    now[0] += 0.01
    assert metrics(smu)["gfx_activity"] >= 90
    smu.executor_ran(0.0)             # the executor's time is busy time on the wall clock
    now[0] += 1.0
    smu.executor_ran(1.0)
    assert metrics(smu)["gfx_activity"] >= 95


def power_time():
    from gpusim import smu as smu_mod
    return smu_mod.time
