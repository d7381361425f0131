"""The board's power and thermal physics behind the simulated SMU: activity averaged over time, board
power from clocks, activity and GFX gating, a first-order thermal model cooled by a fan the PMFW drives
along its fan curve, and the throttlers' view of both limits.

The SMU model (gpusim.smu) decides clocks and gating; this module integrates what they cost over time.
Time is in seconds from a clock the SMU chooses (the device's simulated clock, or the wall clock for a
GPU kept in a state file, whose operator watches it in real time: gpusim.provider).

Calibration (board-level, the sources are the products' public figures; docs/smi.md lists them):
- RX 7900 XTX (Navi31): 355 W total board power (AMD's specification); an idle floor of 16 W with GFX
  off and every clock at its lowest level, within the 15-20 W amdgpu reaches on that card (issue 14's
  reference figure). GFX powered but idle leaks 5% of its peak (15 W on Navi31: assumption; no public
  figure separates it).
- RX 7600 (Navi33): 165 W total board power (AMD's specification); idle floor 8 W (assumption: scaled).
- Thermal: ambient 25 C; junction (hotspot) limit 110 C, the Tjmax AMD gives for RDNA3 boards; edge and
  memory follow the die with offsets that grow with power (assumption: the constants below put a
  355 W load at roughly 70 C edge / 90 C hotspot with the fan near full speed and an idle card near
  40 C with its fan stopped, as reviews of the reference card report).
- Fan: zero-RPM below FAN_START_C (hotspot), then a linear curve from FAN_MIN_PWM to 100% at
  FAN_FULL_C; the curve's shape is that of PPTable's FanLinearTempPoints/FanLinearPwmPoints and
  FanZeroRpmEnable (smu13_driver_if_v13_0_0.h), its points are assumptions. Without the PMFW's fan
  control (FEATURE_FAN_CONTROL off) the fan holds FAN_BOOT_PWM (assumption).
- Activity: AverageGfxActivity / AverageUclkActivity are averages (smu13_driver_if_v13_0_0.h names
  them so); the window is not public: an exponential average with ACTIVITY_TAU_S (assumption).
"""
from __future__ import annotations

import math

PPT_LIMIT_W = {"navi31": 355, "navi33": 165}
IDLE_W = {"navi31": 16.0, "navi33": 8.0}     # board floor: GFX off, every clock at its lowest level
GFX_W = {"navi31": 300.0, "navi33": 135.0}   # GFX at max clock, fully busy
MEM_W = {"navi31": 30.0, "navi33": 15.0}     # memory at max clock, fully busy
LEAK = 0.05                                  # GFX powered but idle, as a share of GFX_W (assumption)

AMBIENT_C = 25.0
HOTSPOT_LIMIT_C = 110.0                      # Tjmax (AMD, RDNA3 boards)
HOTSPOT_C_PER_W = 0.06                       # hotspot above edge, per W of board power
MEM_OFFSET_C, MEM_C_PER_W = 4.0, 0.02
HEAT_CAPACITY_J_PER_C = 64.0                 # the cooler and board, lumped
PASSIVE_W_PER_C = 1.07                       # heat the heatsink sheds with the fan stopped
FAN_W_PER_C = 7.3                            # more at full fan speed
FAN_START_C, FAN_FULL_C, FAN_MIN_PWM, FAN_BOOT_PWM = 55.0, 95.0, 0.2, 0.3
FAN_MAX_RPM = {"navi31": 3300, "navi33": 3000}
ACTIVITY_TAU_S = 0.25
MAX_SUBSTEP_S = 0.5                          # the fan follows temperature: integrate in pieces


def fan_pwm(hotspot_c: float, controlled: bool = True) -> float:
    """The fan's duty (0..1) the PMFW's curve sets for a hotspot temperature."""
    if not controlled:
        return FAN_BOOT_PWM
    if hotspot_c < FAN_START_C:
        return 0.0
    return min(1.0, FAN_MIN_PWM + (1 - FAN_MIN_PWM) * (hotspot_c - FAN_START_C) / (FAN_FULL_C - FAN_START_C))


class PowerModel:
    """Time-integrated state of one board: activity averages, die temperature, energy, fan."""

    def __init__(self, chip: str, now_s: float):
        self.chip = chip
        self.last_s = now_s
        self.level = {"gfx": 0.0, "mem": 0.0}     # how busy each engine is now (0..1)
        self.average = {"gfx": 0.0, "mem": 0.0}   # what the metrics report
        self.temperature = AMBIENT_C + IDLE_W[chip] / PASSIVE_W_PER_C * 0.5   # a powered board settling
        self.energy_j = 0.0
        self.ambient_c = AMBIENT_C
        self.fan_stalled = False                  # a test's broken fan: no airflow whatever the duty
        self.fan_controlled = True
        self.power_w = IDLE_W[chip]               # the power of the interval being integrated

    # -- temperatures -----------------------------------------------------------------------------
    def temperatures(self, power_w: float | None = None) -> tuple[float, float, float]:
        """(edge, hotspot, memory) in C."""
        p = self.power_w if power_w is None else power_w
        edge = self.temperature
        return edge, edge + HOTSPOT_C_PER_W * p, edge + MEM_OFFSET_C + MEM_C_PER_W * p

    def fan(self) -> tuple[float, int]:
        """(duty 0..1, RPM)."""
        duty = fan_pwm(self.temperatures()[1], self.fan_controlled)
        rpm = 0 if self.fan_stalled else round(duty * FAN_MAX_RPM[self.chip])
        return duty, rpm

    def _conductance(self, duty: float) -> float:
        return PASSIVE_W_PER_C + (0.0 if self.fan_stalled else FAN_W_PER_C * duty)

    def thermal_budget_w(self) -> float:
        """The board power at which the hotspot settles at its limit with the fan at its current duty:
        what the hotspot throttler allows once the limit is reached."""
        g = self._conductance(max(self.fan()[0], FAN_MIN_PWM if self.fan_controlled else FAN_BOOT_PWM))
        return max(0.0, (HOTSPOT_LIMIT_C - self.ambient_c) / (1 / g + HOTSPOT_C_PER_W))

    def too_hot(self) -> bool:
        return self.temperatures()[1] >= HOTSPOT_LIMIT_C - 1

    # -- integration --------------------------------------------------------------------------------
    def advance(self, now_s: float, power_fn) -> None:
        """Integrates from the last call to now with the activity levels held constant (the SMU calls
        this before every change of state). power_fn() gives the board power for the current state and
        temperature; it is asked again every MAX_SUBSTEP_S, since the throttlers act on temperature."""
        dt = now_s - self.last_s
        self.last_s = now_s        # also when the clock went back (another time base after a reload)
        if dt <= 0:
            self.power_w = power_fn()
            return
        k = math.exp(-dt / ACTIVITY_TAU_S)
        for e, lv in self.level.items():
            self.average[e] = lv + (self.average[e] - lv) * k
            if self.average[e] < 5e-4 and lv == 0:
                self.average[e] = 0.0
        n = min(2000, max(1, math.ceil(dt / MAX_SUBSTEP_S)))
        h = dt / n
        for _ in range(n):
            p = self.power_w = power_fn()
            self.energy_j += p * h
            g = self._conductance(fan_pwm(self.temperatures(p)[1], self.fan_controlled))
            target = self.ambient_c + p / g
            self.temperature = target + (self.temperature - target) * math.exp(-h * g / HEAT_CAPACITY_J_PER_C)
        self.power_w = power_fn()

    def set_level(self, engine: str, busy: float) -> None:
        if engine not in self.level:
            raise KeyError(f"SMU activity: unknown engine {engine!r}; known: {', '.join(self.level)}")
        self.level[engine] = min(max(float(busy), 0.0), 1.0)
