"""SMU 13.0.x (MP1, the power-management firmware): the message mailbox and what the driver asks of it.

Facts (drivers/gpu/drm/amd/pm/swsmu):
- Mailbox (smu_v13_0_0_set_smu_mailbox_registers, smu_cmn.c): message MP1_SMN_C2PMSG_66, argument C2PMSG_82,
  response C2PMSG_90. smu_cmn_send_smc_msg_with_param waits for a non-zero response (the previous message
  done), writes 0 to the response, the argument, then the message, polls the response and reads the output
  argument back from C2PMSG_82. Responses: PPSMC_Result_OK 1, Failed 0xFF, UnknownCmd 0xFE,
  CmdRejectedPrereq 0xFD, CmdRejectedBusy 0xFC; 0 is "still busy". Timeout usec_timeout * 20 (2 s).
- The firmware is loaded by the PSP (amdrv.ip.psp); before that nothing answers the mailbox.
- smu_v13_0_check_fw_version: GetSmuVersion (program << 24 | major << 16 | minor << 8 | debug) and
  GetDriverIfVersion, expected SMU13_DRIVER_IF_VERSION_SMU_V13_0_0_0 / _V13_0_7 = 0x37; a mismatch is only a
  warning upstream (the firmware is backward compatible).
- Driver table (smu_v13_0_set_driver_table_location, smu_cmn_update_table): one VRAM buffer as large as the
  largest table, its MC address given by SetDriverDramAddrHigh/Low; TransferTableSmu2Dram/Dram2Smu take the
  table id (TABLE_*). The metrics table is SmuMetricsExternal_t (smu13_driver_if_v13_0_0.h), read as
  smu_v13_0_0_get_smu_metrics_data does (average clocks pre/post deep sleep by a 15% busy threshold).
- Features (smu_smc_hw_setup, smu_v13_0_set_allowed_mask, smu_v13_0_system_features_control):
  SetAllowedFeaturesMaskHigh/Low, then EnableAllSmuFeatures; the enabled mask from GetRunningSmuFeaturesLow/High.
  With SCPM (adev->scpm_enabled, from the PSP runtime database: amdrv.ip.psp.runtime_scpm) the allowed
  mask is not sent: the PMFW refuses it and decides the features itself.
- DPM (smu_v13_0.c): clock messages take PPCLK_e << 16 | value; GetDpmFreqByIndex with index 0xFF answers the
  level count, bit 31 set for fine-grained DPM; frequencies in MHz. Soft limits: SetSoftMaxByFreq, then
  SetSoftMinByFreq (smu_v13_0_set_soft_freq_limited_range).
- Power limit (smu_v13_0_get_current_power_limit/set_power_limit): GetPptLimit with the power source << 16
  (0 AC), SetPptLimit in W.
- Mode1 reset (smu_v13_0_0_mode1_reset, amdgpu_device_mode1_reset): PCI config space saved, bus mastering
  off, Mode1Reset, no register access for SMU13_MODE1_RESET_WAIT_TIME_IN_MS (500 ms), the config space
  restored (amdrv.pci_state: the reset clears memory decode, bus mastering and the BARs), then wait until the
  memory size register reads something other than all ones.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from amdrv import pci_state, structs
from amdrv.autogen import ih as IHIDS
from amdrv.autogen import smu_13_0_0 as S
from amdrv.ip.base import IPBlock
from amdrv.ip.psp import runtime_scpm
from amdrv.poll import poll
from pcie import PCIError

log = logging.getLogger("amdrv.smu")

DRIVER_IF_VERSION = {(13, 0, 0): 0x37, (13, 0, 7): 0x37}    # smu_v13_0.h
MODE1_RESET_WAIT_S = 0.5                                    # SMU13_MODE1_RESET_WAIT_TIME_IN_MS
BUSY_THRESHOLD = 15                                         # SMU_13_0_0_BUSY_THRESHOLD
MEMSIZE_DWORD = 0xDE3                                       # RCC_CONFIG_MEMSIZE (nbio get_memsize)
SMN_MP1_FIRMWARE_FLAGS = 0x03B00000 | 0x3010024              # smu_v13_0.h: MP1_Public | smnMP1_FIRMWARE_FLAGS

MSG_NAMES = {v: k.removeprefix("PPSMC_MSG_") for k, v in vars(S).items()
             if k.startswith("PPSMC_MSG_") and isinstance(v, int) and k != "PPSMC_MSG_Count"}
RESULTS = {
    S.PPSMC_Result_OK: ("OK", ""),
    S.PPSMC_Result_Failed: ("Failed", "the SMU executed the message and it failed (a value out of range, or a "
                                      "feature it needs is off)"),
    S.PPSMC_Result_UnknownCmd: ("UnknownCmd", "this SMU firmware does not know the message"),
    S.PPSMC_Result_CmdRejectedPrereq: ("CmdRejectedPrereq", "valid message, but its prerequisites are not met "
                                                            "(e.g. a table transfer before the driver table "
                                                            "address was set)"),
    S.PPSMC_Result_CmdRejectedBusy: ("CmdRejectedBusy", "the SMU is busy with other work; retry"),
    0xFB: ("DebugDataDumpEnd", "the SMU firmware is in a debug mode (smu_cmn.c SMU_RESP_DEBUG_END)"),
}
CLOCKS = {"gfxclk": S.PPCLK_GFXCLK, "socclk": S.PPCLK_SOCCLK, "uclk": S.PPCLK_UCLK, "fclk": S.PPCLK_FCLK,
          "vclk": S.PPCLK_VCLK_0, "dclk": S.PPCLK_DCLK_0, "vclk1": S.PPCLK_VCLK_1, "dclk1": S.PPCLK_DCLK_1}
LOW_CLOCKS = ("gfxclk", "socclk", "uclk", "fclk")   # what low_clocks() pins to the lowest level
# the tables smu_v13_0_0_tables_init declares that go through the driver table (the tool table is separate)
DRIVER_TABLES = ("PPTable_t", "WatermarksExternal_t", "SmuMetricsExternal_t", "SwI2cRequestExternal_t",
                 "OverDriveTableExternal_t", "DpmActivityMonitorCoeffIntExternal_t")
METRICS = structs.get(S, "SmuMetricsExternal_t")
# Thermal interrupts (smu_v13_0.c): THM's digital thermal interrupt, source ids THM_11_0__SRCID__*
THM_SRCID_DIG_THERM_L2H, THM_SRCID_DIG_THERM_H2L = 0, 1
# The alert threshold: upstream programs min(255, the powerplay table's software_shutdown_temp); that table
# is the board's VBIOS, not read here: 118 C is an assumption (above the 110 C hotspot limit the PMFW
# throttles to, so only a cooling failure reaches it). The low threshold is where the driver lifts its own
# throttle (upstream's is the range minimum, 0 C: it powers the system off instead; see thermal_alert).
THERMAL_ALERT_C, THERMAL_CLEAR_C = 118, 100
# THROTTLER_*_BIT names by bit (smu13_driver_if_v13_0_0.h), as smu_v13_0_0_get_throttler_status reads them
THROTTLERS = [next(k[len("THROTTLER_"):-len("_BIT")] for k, v in vars(S).items()
                   if k.startswith("THROTTLER_") and k.endswith("_BIT") and v == i) for i in range(S.THROTTLER_COUNT)]


class SMUError(Exception):
    """The SMU answered a message with an error; `result` is the PPSMC_Result_* code."""

    def __init__(self, message: str, msg: int | None = None, result: int | None = None):
        super().__init__(message)
        self.msg, self.result = msg, result


class SMUTimeout(SMUError):
    """The SMU did not answer: its firmware is not running (not loaded by the PSP, or reset) or it hangs."""


@dataclasses.dataclass(frozen=True)
class DPMLevels:
    clock: str
    mhz: tuple[int, ...]
    fine_grained: bool      # any frequency between the first and the last level can be chosen


@dataclasses.dataclass(frozen=True)
class Metrics:
    """What an operator looks at, from SmuMetricsExternal_t."""
    edge_c: int
    hotspot_c: int
    mem_c: int
    socket_power_w: int
    board_power_w: int
    gfxclk_mhz: int             # current (0 while GFX is powered off)
    socclk_mhz: int
    uclk_mhz: int
    fclk_mhz: int
    average_gfxclk_mhz: int     # as upstream reports it: before deep sleep when busy, after it when idle
    average_uclk_mhz: int
    gfx_activity: int           # percent
    mem_activity: int
    energy_accumulator: int
    counter: int
    fan_pwm: int                # percent
    fan_rpm: int
    throttling: dict            # THROTTLER_* name (TEMP_HOTSPOT, PPT0, ...) -> percent, only those throttling
    raw: structs.StructValue = dataclasses.field(repr=False, compare=False)


def clock_id(clock: str | int) -> int:
    if isinstance(clock, int):
        return clock
    try:
        return CLOCKS[clock.lower()]
    except KeyError:
        raise SMUError(f"unknown clock {clock!r}; known: {', '.join(CLOCKS)}") from None


def msg_name(msg: int) -> str:
    return MSG_NAMES.get(msg, f"message {msg:#x}")


class SMU(IPBlock):
    """The SMU of one AMDevice. Messages by number (`amdrv.autogen.smu_13_0_0.PPSMC_MSG_*`)."""

    def __init__(self, dev, timeout_s: float = 2.0, reset_wait_s: float = MODE1_RESET_WAIT_S):
        self.dev = dev
        self.timeout_s, self.reset_wait_s = timeout_s, reset_wait_s
        mp1 = dev.reg("MP1")
        self.msg_reg, self.arg_reg, self.resp_reg = (mp1.reg(f"MP1_SMN_C2PMSG_{n}") for n in (66, 82, 90))
        self._idle = False       # the last response we read was non-zero: no need to poll before the next
        # One message at a time: the holder's metrics publisher (amdrv.monitor) sends from its own thread.
        self.lock = threading.RLock()
        self.scpm = None         # the PMFW runs with SCPM; None: read from the PSP runtime database at init
        self.thermal_range: tuple[int, int] | None = None    # (low, high) C the THM interrupts at
        self.sw_init()
        self.version = self.if_version = None
        self.recorded = None             # a warm boot's boot state (nbio.BootState): what the previous run recorded
        self.top_mhz = (0,) * len(LOW_CLOCKS)   # each LOW_CLOCKS' top DPM level (MHz), where known: recorded

    # -- the mailbox ------------------------------------------------------------------------------------
    def response_seen(self, value: int) -> None:
        """The response register as a caller just read it (AMGPU._decide, with no message sent since): non-zero
        says the mailbox is ready, which is what the next message's first poll would find, so it polls no more."""
        with self.lock:
            if value:
                self._idle = True

    def _poll(self, gone=None) -> int | None:
        """The non-zero response, or None on timeout; 0 as soon as gone() says the answer cannot come."""
        def answer() -> int | None:      # None: nothing yet, keep polling
            try:
                v = self.resp_reg.read()
            except PCIError:
                if gone is None:
                    raise
                return 0     # behind a USB bridge the reset GPU's refusal (Unsupported Request) is an error
            if v and not (gone is not None and v == 0xFFFFFFFF):
                return v
            if gone is not None and (v == 0xFFFFFFFF or self._gone(gone)):
                return 0     # all ones: the reset took the bus interface with it (memory decode off)
            return None
        # min_reads=1: the SMU's timeout_s alone ends the wait (__smu_cmn_poll_stat: usec_timeout * 20 reads)
        return poll(answer, lambda r: r is not None, self.timeout_s, min_reads=1)[1]

    @staticmethod
    def _gone(gone) -> bool:
        try:
            return gone()
        except PCIError:     # the check's own read refused (a USB bridge's Unsupported Request): gone too
            return True

    def send(self, msg: int, arg: int = 0, read_arg: bool = False, gone=None) -> int | None:
        """One message (smu_cmn_send_smc_msg_with_param); returns C2PMSG_82 if read_arg. `gone` (see
        mode1_reset) tells that the SMU was reset after answering, which wipes the answer."""
        with self.lock:      # smu_cmn holds smu->message_lock the same way
            return self._send(msg, arg, read_arg, gone)

    def _send(self, msg: int, arg: int, read_arg: bool, gone) -> int | None:
        name = msg_name(msg)
        where = f"{self.dev.name}: SMU {name}({arg:#x})"
        if not self._idle and self._poll() is None:
            raise SMUTimeout(
                f"{where}: timeout: the mailbox never became ready (MP1_SMN_C2PMSG_90 stayed 0 for "
                f"{self.timeout_s:g} s, so no firmware answered since power-on or reset, or the previous message "
                f"never finished): the SMU firmware is not running — not loaded yet (the PSP loads it) or "
                f"stopped by a mode1 reset — or it hangs (a mode1 reset or power cycle recovers it)", msg)
        self._idle = False
        self.resp_reg.write(0)
        self.arg_reg.write(arg & 0xFFFFFFFF)
        self.msg_reg.write(msg)
        resp = self._poll(gone)
        if resp == 0:
            return None
        if resp is None:
            raise SMUTimeout(
                f"{where}: no response in MP1_SMN_C2PMSG_90 within {self.timeout_s:g} s: the SMU firmware is "
                f"not running or hangs (a mode1 reset or power cycle recovers it)", msg)
        self._idle = True
        if resp != S.PPSMC_Result_OK:
            rname, meaning = RESULTS.get(resp, ("unexpected response", "not a PPSMC_Result code"))
            raise SMUError(f"{where} failed: {rname} ({resp:#x}): {meaning}", msg, resp)
        return self.arg_reg.read() if read_arg else None

    def query(self, msg: int, arg: int = 0) -> int:
        return self.send(msg, arg, read_arg=True)

    # -- life cycle -------------------------------------------------------------------------------------
    name = "smu"

    def sw_init(self) -> None:
        # Boot memory, allocated here so it lands at the same address on every boot (warm ones included).
        size = max(structs.get(S, t).size for t in DRIVER_TABLES)
        self.table = self.dev.mm.alloc_boot((size + 0xFFF) & ~0xFFF, align=0x1000, tag="SMU driver table")

    def hw_init(self, warm: bool = False) -> None:
        if warm:
            self.resume_warm()
        else:
            self.init()

    def hw_fini(self) -> None:
        self.fini()

    def resume_warm(self) -> None:
        """Warm boot: the SMU firmware runs on from the previous run, its features enabled, its driver table
        where that run set it (the boot region replayed: the same MC address, so SetDriverDramAddr is not sent
        again; upstream's smu_smc_hw_setup sends it because its resume follows a firmware reload), the thermal
        alert (every driver load programs it: smu_hw_init), and the soft maximum of each clock fini lowered back
        to its top level (the soft minimum fini set is the lowest level already). What that run recorded
        (`recorded`, the boot state: nbio RECORD_REGS) is taken instead of asked again: the firmware's versions
        and each clock's top level come from the same firmware, which no reset reloaded since (the warm boot's
        premise, am.AMGPU._decide). Anything not recorded is asked (GetSmuVersion, GetMaxDpmFreq)."""
        rec = self.recorded
        if rec is not None and rec.smu_version and rec.smu_if_version:
            self.version, self.if_version = rec.smu_version, rec.smu_if_version
        else:
            self.check_versions()
        self.enable_thermal_alert()
        tops = []
        for clk, top in zip(LOW_CLOCKS, rec.top_mhz if rec is not None else (0,) * len(LOW_CLOCKS)):
            top = top or self.query(S.PPSMC_MSG_GetMaxDpmFreq, clock_id(clk) << 16)
            self.set_soft_limits(clk, max_mhz=top)
            tops.append(top)
        self.top_mhz = tuple(tops)

    def firmware_running(self) -> bool:
        """smu_v13_0_check_fw_status: MP1_FIRMWARE_FLAGS.INTERRUPTS_ENABLED (bit 0), set while the firmware
        runs, read at its SMN address through the RSMU index/data pair as RREG32_PCIE does."""
        nbif = self.dev.reg("NBIF")
        nbif.BIF_BX_PF0_RSMU_INDEX.write(SMN_MP1_FIRMWARE_FLAGS)
        return bool(nbif.BIF_BX_PF0_RSMU_DATA.read() & 1)

    def mailbox_cleared(self) -> bool:
        """The firmware runs but its response register stays 0: a driver cleared it to post a message and
        never posted one (it died in between). smu_cmn_send_smc_msg_with_param then sends nothing
        (SMU_RESP_NONE after __smu_cmn_poll_stat's wait), so neither can this driver: no message, no mode1
        reset through the SMU. Waits as that poll does (timeout_s) for a message still being answered."""
        if self.resp_reg.read() != 0 or not self.firmware_running():
            return False
        return self._poll() is None

    def take_cleared_mailbox(self) -> None:
        """After mailbox_cleared() waited in vain: no message is in flight, so the next one is posted without
        waiting for a response first (the one exception to smu_cmn's rule: where no other reset exists)."""
        self._idle = True

    def alive(self) -> bool:
        """Whether SMU firmware runs: a response is in C2PMSG_90 (none since power-on or reset reads 0)
        and GetSmuVersion is answered. Costs one register read when nothing runs."""
        if self.resp_reg.read() == 0:
            return False
        self._idle = True
        try:
            self.query(S.PPSMC_MSG_GetSmuVersion)
        except SMUTimeout:
            return False
        return True

    def init(self) -> None:
        """After the PSP loaded the SMU firmware: versions, driver table, every feature enabled."""
        if self.scpm is None:
            self.scpm = runtime_scpm(self.dev)   # psp_sw_init's adev->scpm_enabled
        self.check_versions()
        self.set_driver_table()
        self.enable_features()
        self.enable_thermal_alert()     # smu_hw_init -> smu_enable_thermal_alert

    def attach(self) -> None:
        """Warm boot: the firmware a previous run set up still runs; versions, driver table again (same
        address), and the clocks fini lowered back to their whole range."""
        self.check_versions()
        self.set_driver_table()
        self.enable_thermal_alert()
        self.auto_clocks()

    def fini(self) -> None:
        """The GPU left idle: every main clock at its lowest level (their top levels kept for the record)."""
        self.top_mhz = self.low_clocks()

    def check_versions(self) -> tuple[int, int]:
        self.version = self.query(S.PPSMC_MSG_GetSmuVersion)
        self.if_version = self.query(S.PPSMC_MSG_GetDriverIfVersion)
        want = DRIVER_IF_VERSION.get(self.dev.disc.version_of("MP1"))
        if want is not None and self.if_version != want:
            log.warning("%s: SMU firmware %s speaks driver interface %#x, this driver %#x (the firmware is "
                        "backward compatible; tables may differ)", self.dev.name, self.version_str(),
                        self.if_version, want)
        return self.version, self.if_version

    def version_str(self) -> str:
        v = self.version or 0
        return f"{v >> 16 & 0xFF}.{v >> 8 & 0xFF}.{v & 0xFF} (program {v >> 24})"

    def set_driver_table(self) -> None:
        mc = self.dev.mc_address(self.table.addr)
        self.send(S.PPSMC_MSG_SetDriverDramAddrHigh, mc >> 32)
        self.send(S.PPSMC_MSG_SetDriverDramAddrLow, mc & 0xFFFFFFFF)

    def enable_features(self, allowed: int = (1 << S.NUM_FEATURES) - 1) -> int:
        """SetAllowedFeaturesMaskHigh/Low (not with SCPM: smu_smc_hw_setup skips it, the PMFW refuses it),
        EnableAllSmuFeatures; returns the enabled mask."""
        if not self.scpm:
            self.send(S.PPSMC_MSG_SetAllowedFeaturesMaskHigh, allowed >> 32)
            self.send(S.PPSMC_MSG_SetAllowedFeaturesMaskLow, allowed & 0xFFFFFFFF)
        self.send(S.PPSMC_MSG_EnableAllSmuFeatures)
        return self.enabled_features()

    def enabled_features(self) -> int:
        return (self.query(S.PPSMC_MSG_GetRunningSmuFeaturesHigh) << 32
                | self.query(S.PPSMC_MSG_GetRunningSmuFeaturesLow))

    # -- tables -----------------------------------------------------------------------------------------
    def read_table(self, table_id: int, size: int) -> bytes:
        """TransferTableSmu2Dram into the driver table, then its bytes (smu_cmn_update_table)."""
        with self.lock:      # the table is one buffer: its transfer and read go together
            self.send(S.PPSMC_MSG_TransferTableSmu2Dram, table_id)
            return self.dev.vram.read(self.table.addr, size)

    def metrics(self) -> Metrics:
        raw = METRICS.unpack(self.read_table(S.TABLE_SMU_METRICS, METRICS.size)).SmuMetrics
        t = raw.AvgTemperature
        busy_gfx, busy_mem = raw.AverageGfxActivity > BUSY_THRESHOLD, raw.AverageUclkActivity > BUSY_THRESHOLD
        return Metrics(
            edge_c=t[S.TEMP_EDGE], hotspot_c=t[S.TEMP_HOTSPOT], mem_c=t[S.TEMP_MEM],
            socket_power_w=raw.AverageSocketPower, board_power_w=raw.AverageTotalBoardPower,
            gfxclk_mhz=raw.CurrClock[S.PPCLK_GFXCLK], socclk_mhz=raw.CurrClock[S.PPCLK_SOCCLK],
            uclk_mhz=raw.CurrClock[S.PPCLK_UCLK], fclk_mhz=raw.CurrClock[S.PPCLK_FCLK],
            average_gfxclk_mhz=raw.AverageGfxclkFrequencyPreDs if busy_gfx else raw.AverageGfxclkFrequencyPostDs,
            average_uclk_mhz=raw.AverageMemclkFrequencyPreDs if busy_mem else raw.AverageMemclkFrequencyPostDs,
            gfx_activity=raw.AverageGfxActivity, mem_activity=raw.AverageUclkActivity,
            energy_accumulator=raw.EnergyAccumulator, counter=raw.MetricsCounter, fan_pwm=raw.AvgFanPwm,
            fan_rpm=raw.AvgFanRpm, throttling={name: pct for name, pct in zip(THROTTLERS, raw.ThrottlingPercentage)
                                               if pct}, raw=raw)

    # -- clocks ------------------------------------------------------------------------------------------
    def dpm_levels(self, clock: str | int) -> DPMLevels:
        """The DPM frequency table of a clock (GetDpmFreqByIndex, index 0xFF for the count)."""
        cid = clock_id(clock)
        count = self.query(S.PPSMC_MSG_GetDpmFreqByIndex, cid << 16 | 0xFF)
        fine, n = bool(count & 0x80000000), count & 0x7FFFFFFF
        mhz = tuple(self.query(S.PPSMC_MSG_GetDpmFreqByIndex, cid << 16 | i) & 0x7FFFFFFF for i in range(n))
        name = clock if isinstance(clock, str) else next((k for k, v in CLOCKS.items() if v == cid), str(cid))
        return DPMLevels(name, mhz, fine)

    def dpm_range(self, clock: str | int) -> tuple[int, int]:
        cid = clock_id(clock)
        return (self.query(S.PPSMC_MSG_GetMinDpmFreq, cid << 16), self.query(S.PPSMC_MSG_GetMaxDpmFreq, cid << 16))

    def set_soft_limits(self, clock: str | int, min_mhz: int | None = None, max_mhz: int | None = None) -> None:
        """Soft max, then soft min, as smu_v13_0_set_soft_freq_limited_range sends them."""
        cid = clock_id(clock)
        for msg, mhz in ((S.PPSMC_MSG_SetSoftMaxByFreq, max_mhz), (S.PPSMC_MSG_SetSoftMinByFreq, min_mhz)):
            if mhz is not None:
                if not 0 < mhz <= 0xFFFF:
                    raise SMUError(f"{self.dev.name}: SMU {msg_name(msg)}: {mhz} MHz does not fit 16 bits")
                self.send(msg, cid << 16 | mhz)

    def low_clocks(self) -> tuple[int, ...]:
        """Every main clock pinned to its lowest DPM level (fini: the GPU is left idle and cool); returns each
        clock's top level (MHz), which its DPM table read here holds (what the next warm boot restores)."""
        tops = []
        for clk in LOW_CLOCKS:
            levels = self.dpm_levels(clk).mhz
            self.set_soft_limits(clk, levels[0], levels[0])
            tops.append(levels[-1])
        return tuple(tops)

    def auto_clocks(self) -> None:
        """Soft limits back to the whole DPM range (undoes low_clocks; a warm boot starts here)."""
        for clk in LOW_CLOCKS:
            lv = self.dpm_levels(clk).mhz
            self.set_soft_limits(clk, lv[0], lv[-1])

    # -- power -------------------------------------------------------------------------------------------
    def power_limit(self) -> int:
        """The package power limit (PPT) in W, for AC power."""
        return self.query(S.PPSMC_MSG_GetPptLimit, 0 << 16)

    def set_power_limit(self, watts: int) -> None:
        self.send(S.PPSMC_MSG_SetPptLimit, watts)

    # -- thermal interrupts ----------------------------------------------------------------------------
    def thm(self):
        return self.dev.reg("THM")     # thm_13_0_2, the header smu_v13_0.c includes (amdrv.discovery)

    def enable_thermal_alert(self, high_c: int = THERMAL_ALERT_C, low_c: int = THERMAL_CLEAR_C) -> None:
        """smu_v13_0_set_irq_state(ENABLE) for THM: thresholds in THM_THERMAL_INT_CTRL, both interrupts
        unmasked and routed to the IH (THERM_IH_HW_ENA, MAX_IH_CREDIT 5, THERM_TRIGGER_MASK clear), then
        the pending status cleared through THM_THERMAL_INT_ENA. The IV arrives as client THM, source
        THM_SRCID_DIG_THERM_L2H (above high) or _H2L (below low)."""
        if not (0 <= low_c <= high_c <= 255):
            raise SMUError(f"{self.dev.name}: thermal alert thresholds {low_c}..{high_c} C must satisfy "
                           f"0 <= low <= high <= 255 (SMU_THERMAL_MAXIMUM_ALERT_TEMP)")
        thm = self.thm()
        thm.THM_THERMAL_INT_CTRL.update(MAX_IH_CREDIT=5, THERM_IH_HW_ENA=1, THERM_INTH_MASK=0, THERM_INTL_MASK=0,
                                        DIG_THERM_INTH=high_c, DIG_THERM_INTL=low_c, THERM_TRIGGER_MASK=0)
        thm.THM_THERMAL_INT_ENA.write(THERM_INTH_CLR=1, THERM_INTL_CLR=1, THERM_TRIGGER_CLR=1)
        self.thermal_range = (low_c, high_c)

    @staticmethod
    def thermal_iv(iv) -> str | None:
        """"above" / "below" for THM's digital thermal interrupt IVs (smu_v13_0_irq_process), else None."""
        if iv.client_id != IHIDS.SOC15_IH_CLIENTID_THM:
            return None
        return {THM_SRCID_DIG_THERM_L2H: "above", THM_SRCID_DIG_THERM_H2L: "below"}.get(iv.src_id)

    def gfx_off(self, allow: bool) -> None:
        """AllowGfxOff / DisallowGfxOff (smu_v13_0_gfx_off_control): whether the PMFW may power GFX off
        while it is idle. amdrv.monitor.GfxOff decides when, as amdgpu_gfx_off_ctrl does."""
        self.send(S.PPSMC_MSG_AllowGfxOff if allow else S.PPSMC_MSG_DisallowGfxOff)

    # -- reset -------------------------------------------------------------------------------------------
    def _memsize_after_reset(self) -> int:
        """RCC_CONFIG_MEMSIZE, or all ones while the GPU does not answer: a root complex completes a read the
        function refuses (BARs not restored yet, decode off) with all ones; behind a USB bridge the refusal
        (an Unsupported Request completion) comes back as an error instead."""
        try:
            return self.dev.mmio.read32(MEMSIZE_DWORD * 4)
        except PCIError:
            return 0xFFFFFFFF

    def mode1_reset(self) -> None:
        """The whole GPU back to its power-on state (amdgpu_device_mode1_reset through the SMU): PSP back to
        its bootloader, SMU firmware stopped, every engine reset, the PCI config space at its defaults.
        Afterwards the firmware must be loaded again.

        As upstream: the config space is saved first (amdgpu_device_cache_pci_state), bus mastering off,
        Mode1Reset, no register access for 500 ms, the saved config space restored (memory decode, BARs,
        bus mastering: amdgpu_device_load_pci_state), then RCC_CONFIG_MEMSIZE polled until it reads other
        than all ones."""
        # A state kept by a process that died inside a reset is the good one: what the config space reads now
        # may already be that reset's defaults (its Mode1Reset may still have been in flight).
        saved = pci_state.kept(self.dev.pci) or pci_state.save(self.dev.pci)
        pci_state.keep(self.dev.pci, saved)   # for the next process, should this one die before the restore
        # The reset follows the answer and clears the response register with everything else; a driver
        # that reads too late (a slow link, a preempted process) sees the sOS sign of life gone instead.
        sos = self.dev.reg("MP0").MP0_SMN_C2PMSG_81
        gone = (lambda: sos.read() in (0, 0xFFFFFFFF)) if sos.read() else None
        self.dev.pci.set_bus_master(False)
        self.send(S.PPSMC_MSG_Mode1Reset, gone=gone)
        self._idle = False
        time.sleep(self.reset_wait_s)    # upstream touches no register meanwhile
        pci_state.restore(self.dev.pci, saved)
        retried = False

        def memsize() -> int:
            # A reset that finished only after the restore above (a shorter wait than the reset took) reset
            # the config space again: before each further read, restore once more (only what differs is
            # written).
            nonlocal retried
            if retried:
                pci_state.restore(self.dev.pci, saved)
            retried = True
            return self._memsize_after_reset()
        ok, _ = poll(memsize, lambda v: v != 0xFFFFFFFF, self.timeout_s, min_reads=1)
        if not ok:
            raise SMUTimeout(f"{self.dev.name}: after Mode1Reset the GPU did not come back within "
                             f"{self.timeout_s:g} s (RCC_CONFIG_MEMSIZE reads all ones): power-cycle it")
