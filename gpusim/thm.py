"""THM, the thermal monitor: the digital thermal interrupt that tells the driver the GPU crossed a
temperature threshold, delivered through the IH ring as the hardware does.

Facts (smu_v13_0.c smu_v13_0_set_irq_state, smu_v13_0_irq_process, smu_v13_0_register_irq_handler;
thm_13_0_2_offset.h / _sh_mask.h, which smu_v13_0.c includes for every SMU 13 part):
- The driver enables the interrupt by writing THM_THERMAL_INT_CTRL: DIG_THERM_INTH (high, C) and
  DIG_THERM_INTL (low, C), THERM_INTH_MASK = THERM_INTL_MASK = 0, THERM_IH_HW_ENA = 1, MAX_IH_CREDIT = 5,
  THERM_TRIGGER_MASK cleared; then THM_THERMAL_INT_ENA with THERM_INTH_CLR | THERM_INTL_CLR |
  THERM_TRIGGER_CLR. Disabling sets both masks and writes THM_THERMAL_INT_ENA 0.
- The interrupt arrives as client SOC15_IH_CLIENTID_THM with source id THM_11_0__SRCID__THM_DIG_THERM_L2H
  (0: "ASIC_TEMP > DIG_THERM_INTH") or _H2L (1: "ASIC_TEMP < DIG_THERM_INTL").

Assumptions: the temperature THM compares is the hotspot (the hottest die sensor, what the PMFW throttles
on); the interrupt is edge-triggered, once per crossing; at power-on both masks are set and the IH
delivery is off (nothing arrives before the driver enables it: the register's reset value is not in
the public headers); THM_THERMAL_INT_STATUS latches THERM_INTH/INTL_DETECT until a *_CLR write.
The SMU model calls `observe(hotspot_c)` whenever it brings its thermal model up to date.
"""
from __future__ import annotations

from amdrv.autogen import ih as IHIDS
from gpusim.device import Block, IVEntry

THM = "THM"
SRCID_DIG_THERM_L2H, SRCID_DIG_THERM_H2L = 0, 1     # smu_v13_0.c THM_11_0__SRCID__*
POWER_ON_CTRL = 1 << 24 | 1 << 25                   # both masks set, IH delivery off (assumption)


class THMBlock(Block):
    name = "THM"

    def attach(self) -> None:
        self.on_write(THM, "THM_THERMAL_INT_ENA", self._w_ena)

    def reset(self) -> None:
        self.set(THM, "THM_THERMAL_INT_CTRL", POWER_ON_CTRL)
        self.set(THM, "THM_THERMAL_INT_STATUS", 0)
        self.last_c: float | None = None
        self.alerts = 0

    def _w_ena(self, value: int) -> int:
        f = self.dev.table(THM)["THM_THERMAL_INT_ENA"].decode(value)
        status = self.get(THM, "THM_THERMAL_INT_STATUS")
        if f["THERM_INTH_CLR"]:
            status &= ~1
        if f["THERM_INTL_CLR"]:
            status &= ~2
        if f["THERM_TRIGGER_CLR"]:
            status &= ~4
        self.set(THM, "THM_THERMAL_INT_STATUS", status)
        return value

    def observe(self, hotspot_c: float) -> None:
        """The die's hottest sensor now reads hotspot_c: a crossing of either threshold interrupts."""
        prev, self.last_c = self.last_c, hotspot_c
        if prev is None:
            return
        ctrl = self.dev.table(THM)["THM_THERMAL_INT_CTRL"].decode(self.get(THM, "THM_THERMAL_INT_CTRL"))
        high, low = ctrl["DIG_THERM_INTH"], ctrl["DIG_THERM_INTL"]
        if prev <= high < hotspot_c:
            self._fire(ctrl, "THERM_INTH_MASK", 1, SRCID_DIG_THERM_L2H)
        elif prev >= low > hotspot_c:
            self._fire(ctrl, "THERM_INTL_MASK", 2, SRCID_DIG_THERM_H2L)

    def _fire(self, ctrl: dict, mask: str, detect: int, src_id: int) -> None:
        if ctrl[mask]:
            return
        self.set(THM, "THM_THERMAL_INT_STATUS", self.get(THM, "THM_THERMAL_INT_STATUS") | detect)
        if ctrl["THERM_IH_HW_ENA"]:
            self.alerts += 1
            self.dev.post_interrupt(IVEntry(client_id=IHIDS.SOC15_IH_CLIENTID_THM, source_id=src_id))
