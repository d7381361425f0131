"""SMU 13.0.0 (MP1 power-management firmware): the message mailboxes and a model of clocks, power and
temperature that follows activity, DPM limits and gating.

Facts (drivers/gpu/drm/amd/pm/swsmu, message and table numbers from amdrv.autogen.smu_13_0_0):
- smu_v13_0_0_set_smu_mailbox_registers: message MP1_SMN_C2PMSG_66, argument C2PMSG_82, response
  C2PMSG_90; debug mailbox message C2PMSG_75, argument C2PMSG_53, response C2PMSG_54. smu_cmn.c: the
  driver waits for a non-zero response, writes 0 to it, the argument, then the message, and polls the
  response: 1 OK, 0xFF failed, 0xFE unknown command, 0xFD bad prerequisites, 0xFC busy; the output
  argument is read back from C2PMSG_82. __smu_cmn_send_debug_msg writes argument, message, then 0 to the
  debug response register, and does not wait.
- A message to an SMU whose firmware is not running is never answered (the driver times out). Here the
  firmware runs once the PSP model has loaded it (`firmware_loaded`, called by gpusim.psp) and stops at
  power-on and mode1 reset. MP1_FIRMWARE_FLAGS.INTERRUPTS_ENABLED (bit 0, mp_13_0_0_sh_mask.h) reads 1 while
  it runs: smu_v13_0_check_fw_status reads it at SMN address MP1_Public | smnMP1_FIRMWARE_FLAGS (0x03b10024,
  smu_v13_0.h) through the PCIE index/data pair to tell that the firmware runs; the response register cannot
  (a driver clears it before each message).
- GetSmuVersion returns the firmware's version (program << 24 | major << 16 | minor << 8 | debug); the
  default is smu_13_0_0.bin / smu_13_0_7.bin of linux-firmware 20230210 (ucode_version 0x004E4B00,
  0x00523C00). GetDriverIfVersion: SMU13_DRIVER_IF_VERSION_SMU_V13_0_0_0 / _V13_0_7 (0x37, smu_v13_0.h).
- Feature masks are 64 bits in Low/High halves (SetAllowedFeaturesMask*, EnableSmuFeatures*,
  GetRunningSmuFeatures*); EnableAllSmuFeatures enables the allowed mask.
- SCPM (secure power management; a board setting, `dev.scpm`, on by default: retail Navi31 boards ship with
  it, and the model assumes the same of Navi33). The PSP runtime database says so (gpusim.psp writes it;
  amdgpu_psp.c psp_sw_init sets adev->scpm_enabled from it). With SCPM the PMFW owns its configuration
  (amdgpu_smu.c): SetAllowedFeaturesMask* and DisableAllSmuFeatures are "not permitted" and the PPTable is
  the PSP's to transfer (no TransferTableDram2Smu of TABLE_PPTABLE); they are answered Failed here (which
  code the firmware gives is not public: assumption). The allowed mask is then the firmware's own, every
  feature ("we just assume all the features are allowed", smu_get_driver_allowed_feature_mask). Without
  SCPM, the driver allows features with SetAllowedFeaturesMask before EnableAllSmuFeatures
  (smu_smc_hw_setup); until it does, nothing is allowed, so EnableAllSmuFeatures enables nothing
  (assumption: the PMFW's default is not documented; upstream always sends the mask first without SCPM).
- smu_v13_0.c: clock messages take PPCLK_e << 16 | value; GetDpmFreqByIndex with index 0xFF returns the
  level count with bit 31 set for fine-grained DPM (smu_v13_0_get_fine_grained_status); frequencies in MHz.
  GetPptLimit takes the power source << 16 (0 AC, 1 DC), SetPptLimit the limit in W.
- smu_cmn_update_table: TransferTableSmu2Dram/Dram2Smu take table_id | argument << 16 and move the table
  to/from the driver table at the MC address given by SetDriverDramAddrHigh/Low (reached through the GMC
  model's MC address map). Table sizes are those of the driver_if structs (metrics: SmuMetricsExternal_t).
- smu_v13_0_0_mode1_reset: Mode1Reset (13.0.10 uses the debug mailbox's DEBUGSMC_MSG_Mode1Reset = 2); the
  response comes first, then the whole GPU resets (the driver stops MMIO for 500 ms).

GFXOFF (smu_v13_0_gfx_off_control, amdgpu_gfx_off_ctrl; the model's state in `gfx_power()`):
- AllowGfxOff lets the PMFW power GFX off once it is idle (gfx_gated); DisallowGfxOff keeps it on. A
  doorbell for the CP or SDMA while GFX is off brings it back (amdgpu submits with GFXOFF allowed:
  gfx_v11_0_ring_set_wptr_compute only rings the doorbell; amdgpu_device.c: "it will exit gfxoff just
  like at runtime"); gpusim.nbio holds the doorbell until GFX is on.
- The exit takes GFXOFF_EXIT_STEPS clock steps, drawn per exit from a generator seeded by the chip. The
  figure is not public (assumption, kept small: below); PPTable's GfxclkFgfxoffExitImu/ExitRlc say the IMU then the RLC
  bring GFX back. DisallowGfxOff is answered once GFX is on again: upstream's smu_v13_0_0 path touches GC
  registers right after the message returns and polls no status (smu_v12's Renoir path polls
  SMUIO_GFX_MISC_CNTL instead; SMU 13.0.0 has no such query), so the answer must mean "GFX is on".
- While GFX is off or on its way back, host accesses to GC registers (the GC register file, which on
  GC 11 holds the CP, RLC, GCVM hub and SDMA registers) reach an unpowered block: a read returns
  0xFFFFFFFF, a write is dropped, and each is recorded in dev.errors (assumption: upstream never does
  it, always disallowing GFXOFF first; hardware reports describe garbage reads and hangs). GFX_IMU_* and
  RLC_RLCS_* stay reachable: the IMU powers GFX up and down, and gfx_v11_0_wait_for_rlc_autoload_complete
  polls RLC_RLCS_BOOTLOAD_STATUS while GFX is still coming up (assumption: always-on interface).

The DPM tables below are representative of an RX 7900 XTX and an RX 7600 (from their public
specifications: 2.5 GHz / 2.65 GHz boost, 20 / 18 Gbps GDDR6), not read from a PPTable; power and
thermals are gpusim.power's.
"""
from __future__ import annotations

import random
import time
import zlib

from amdrv import structs
from amdrv.autogen import smu_13_0_0 as S
from gpusim.device import Block, DMAError
from gpusim.power import GFX_W, IDLE_W, LEAK, MEM_W, PPT_LIMIT_W, PowerModel

DEBUGSMC_MSG_Mode1Reset = 2       # smu_v13_0_0_ppt.c
FIRMWARE_VERSION = {"navi31": 0x004E4B00, "navi33": 0x00523C00}
DRIVER_IF_VERSION = 0x37
LATENCY = 2                       # clock steps from a message to its response
GFXOFF_ENTRY = 0.01               # GFX powers off once its averaged activity is below this (gfx_gated)
# Clock steps (1 us) from a wake to GFX on: not public (assumption). Small, as the PSP model's latencies,
# since in the stepped mode every step is one polled register read (over USB, one bridge command), where
# the hardware's exit is a few polls' worth of wall time.
GFXOFF_EXIT_STEPS = (8, 24)
GC_ALWAYS_ON = ("GFX_IMU_", "RLC_RLCS_")   # GC registers reachable while GFX is off (assumption, see above)
GC_OFF_READ = 0xFFFFFFFF          # what a GC register read returns while GFX is off (assumption)
_GC_POWER_DOMAIN: dict[str, frozenset] = {}   # chip -> dword addresses of its GC registers GFXOFF powers off

# PPCLK -> DPM levels in MHz, and whether the clock is fine-grained (any value between min and max).
DPM = {
    "navi31": {S.PPCLK_GFXCLK: ([500, 2500], True), S.PPCLK_SOCCLK: ([500, 960, 1200], False),
               S.PPCLK_UCLK: ([96, 456, 772, 1249], False), S.PPCLK_FCLK: ([400, 800, 1500, 1900], False),
               S.PPCLK_VCLK_0: ([500, 1500], False), S.PPCLK_DCLK_0: ([500, 1500], False),
               S.PPCLK_VCLK_1: ([500, 1500], False), S.PPCLK_DCLK_1: ([500, 1500], False)},
    "navi33": {S.PPCLK_GFXCLK: ([500, 2655], True), S.PPCLK_SOCCLK: ([500, 960, 1200], False),
               S.PPCLK_UCLK: ([96, 456, 772, 1124], False), S.PPCLK_FCLK: ([400, 800, 1400, 1800], False),
               S.PPCLK_VCLK_0: ([500, 1500], False), S.PPCLK_DCLK_0: ([500, 1500], False),
               S.PPCLK_VCLK_1: ([500, 1500], False), S.PPCLK_DCLK_1: ([500, 1500], False)},
}
TABLES = {S.TABLE_PPTABLE: "PPTable_t", S.TABLE_WATERMARKS: "WatermarksExternal_t",
          S.TABLE_SMU_METRICS: "SmuMetricsExternal_t", S.TABLE_DRIVER_SMU_CONFIG: "DriverSmuConfigExternal_t",
          S.TABLE_ACTIVITY_MONITOR_COEFF: "DpmActivityMonitorCoeffIntExternal_t",
          S.TABLE_OVERDRIVE: "OverDriveTableExternal_t", S.TABLE_I2C_COMMANDS: "SwI2cRequestExternal_t",
          S.TABLE_DRIVER_INFO: "DriverInfoTable_t", S.TABLE_ECCINFO: "EccInfoTable_t"}

# Messages the firmware accepts whose effect nothing in the simulator observes.
_ACKNOWLEDGED = {S.PPSMC_MSG_TestMessage, S.PPSMC_MSG_SetToolsDramAddrHigh, S.PPSMC_MSG_SetToolsDramAddrLow,
                 S.PPSMC_MSG_UseDefaultPPTable, S.PPSMC_MSG_SetWorkloadMask, S.PPSMC_MSG_NotifyPowerSource,
                 S.PPSMC_MSG_SetFwDstatesMask, S.PPSMC_MSG_SetExternalClientDfCstateAllow,
                 S.PPSMC_MSG_SetMGpuFanBoostLimitRpm, S.PPSMC_MSG_SetTemperatureInputSelect,
                 S.PPSMC_MSG_SetThrottlerMask, S.PPSMC_MSG_RunDcBtc, S.PPSMC_MSG_DramLogSetDramAddrHigh,
                 S.PPSMC_MSG_DramLogSetDramAddrLow, S.PPSMC_MSG_DramLogSetDramSize,
                 S.PPSMC_MSG_SetSystemVirtualDramAddrHigh, S.PPSMC_MSG_SetSystemVirtualDramAddrLow,
                 S.PPSMC_MSG_AllowIHHostInterrupt, S.PPSMC_MSG_PowerUpVcn, S.PPSMC_MSG_PowerDownVcn,
                 S.PPSMC_MSG_PowerUpJpeg, S.PPSMC_MSG_PowerDownJpeg}
ALL_FEATURES = (1 << (S.FEATURE_EDC_PWRBRK_BIT + 1)) - 1
SMN_MP1_FIRMWARE_FLAGS = 0x03B00000 | 0x3010024   # smu_v13_0.h: MP1_Public | smnMP1_FIRMWARE_FLAGS
_MSG_NAMES = {v: k for k, v in vars(S).items() if k.startswith("PPSMC_MSG_") and isinstance(v, int)}


class SMU(Block):
    name = "SMU"
    IP = "MP1"
    # GFXOFF state (reset() sets them; class defaults for an SMU from a state file saved before them)
    gfx_exit_at = None
    _gfx_was_off = False
    rng = None
    gfxoff_entries = gfxoff_exits = gc_off_accesses = 0

    def attach(self) -> None:
        self.on_write(self.IP, "MP1_SMN_C2PMSG_66", self._message)
        self.on_write(self.IP, "MP1_SMN_C2PMSG_54", self._debug_message)
        self.dev.regs.read_handlers[SMN_MP1_FIRMWARE_FLAGS >> 2] = self._r_firmware_flags

    def _r_firmware_flags(self) -> int:
        return int(self.running)      # INTERRUPTS_ENABLED; the other bits are RESERVED

    def reset(self) -> None:
        chip = self.dev.chip
        if getattr(self, "pm", None) is not None:
            self._integrate()                    # up to the reset, with the state before it
        self.running = False
        self.version = 0
        self.messages = 0
        self._queue: list[tuple[int, int]] = []
        self.dpm = {clk: (list(levels), fine) for clk, (levels, fine) in DPM[chip].items()}
        self.soft = {clk: [lv[0], lv[-1]] for clk, (lv, _) in self.dpm.items()}
        self.hard = {clk: [lv[0], lv[-1]] for clk, (lv, _) in self.dpm.items()}
        self.allowed = 0
        self.features = 0
        self.driver_table = 0
        self.tables: dict[int, bytes] = {}
        self.ppt_limit = PPT_LIMIT_W[chip]
        self.gfxoff_allowed = False
        self.gfx_exit_at = None      # the clock step at which GFX is on again after a GFXOFF exit
        self._gfx_was_off = False
        self.dev.gfx_gate = None     # gpusim.provider asks it about GC accesses while GFXOFF may be on
        if getattr(self, "pm", None) is None:
            self.pm = PowerModel(chip, self._now_s())
        for engine in self.pm.level:             # a reset stops the engines; the board stays as warm
            self.pm.set_level(engine, 0.0)
        self.metrics_counter = 0

    # -- what other models call ---------------------------------------------------------------------
    def firmware_loaded(self, version: int | None = None) -> None:
        """The PSP has loaded and started the SMU firmware: the mailbox answers from now on."""
        self._integrate()
        self.running = True
        self.version = version if version is not None else FIRMWARE_VERSION[self.dev.chip]
        self.features = 0
        self.allowed = ALL_FEATURES if self.scpm else 0
        self.gfxoff_allowed, self.gfx_exit_at, self.dev.gfx_gate = False, None, None  # a fresh PMFW: GFX held on
        self.set(self.IP, "MP1_SMN_C2PMSG_90", S.PPSMC_Result_OK)   # ready for the first message

    def set_activity(self, engine: str, busy: float) -> None:
        """Engines report how busy they are from now on, 0..1 ("gfx": CP/shaders/SDMA, "mem": memory
        traffic); the metrics report the average over time (gpusim.power)."""
        self._integrate()
        self.pm.set_level(engine, busy)

    @property
    def activity(self) -> dict[str, float]:
        """How busy each engine is now (what DPM and gating follow)."""
        return self.pm.level

    @property
    def temperature(self) -> float:
        return self.pm.temperature

    @property
    def energy_j(self) -> float:
        return self.pm.energy_j

    def _now_s(self) -> float:
        """The power model's clock: simulated time, or the wall clock for a GPU an operator watches in
        real time (a board kept in a state file: gpusim.provider sets `wall_clock`)."""
        if self._wall():
            return time.time()
        return self.dev.now_ns * 1e-9

    def _wall(self) -> bool:
        return getattr(self.dev, "wall_clock", False)

    def executor_ran(self, wall_s: float) -> None:
        """The CP spent wall_s of host time executing a kernel slice. On the wall clock that time is GFX
        busy time: the simulated GPU is many thousand times slower than the card, and what an operator
        watching it wants to see is when it works (assumption: the executor's time stands for the GPU's)."""
        if not self._wall() or wall_s <= 0:
            return
        self._same_base()
        now = self._now_s()
        self.pm.advance(max(self.pm.last_s, now - wall_s), self.power)
        before = self.pm.level["gfx"]
        self.pm.set_level("gfx", 1.0)
        self.pm.advance(now, self.power)
        self.pm.set_level("gfx", before)
        self._thermal_sensors()

    def work_began(self) -> None:
        """On the simulated clock, the CP accounts a dispatch's GPU time next (the clock advances by it,
        then work_done): GFX busy meanwhile."""
        if self._wall():
            return
        self._integrate()
        self._level_before_work = self.pm.level["gfx"]
        self.pm.set_level("gfx", 1.0)

    def work_done(self) -> None:
        if self._wall():
            return
        self._integrate()
        self.pm.set_level("gfx", self._level_before_work)

    # -- the mailboxes --------------------------------------------------------------------------------
    def _message(self, msg: int) -> None:
        if not self.running:
            return   # nobody reads the mailbox: no response is ever written
        self._queue.append((msg, self.get(self.IP, "MP1_SMN_C2PMSG_82")))
        if len(self._queue) == 1:
            self.dev.schedule(LATENCY, self._process)

    def _process(self) -> None:
        if not self.running or not self._queue:
            return
        msg, param = self._queue.pop(0)
        self.messages += 1
        result, out = self._handle(msg, param)
        if msg == S.PPSMC_MSG_DisallowGfxOff and self.gfx_exit_at is not None:
            # answered once GFX is on again (module docstring); the mailbox stays busy meanwhile
            self.dev.schedule(self.gfx_exit_at - self.dev.steps, self._respond, msg, result, out)
            return
        self._respond(msg, result, out)

    def _respond(self, msg: int, result: int, out: int | None) -> None:
        if not self.running:
            return
        if out is not None:
            self.set(self.IP, "MP1_SMN_C2PMSG_82", out & 0xFFFFFFFF)
        self.set(self.IP, "MP1_SMN_C2PMSG_90", result)
        if msg == S.PPSMC_MSG_Mode1Reset and result == S.PPSMC_Result_OK:
            self.dev.schedule(1, self._mode1_reset)
        elif self._queue:
            self.dev.schedule(LATENCY, self._process)

    def _debug_message(self, value: int) -> None:
        if self.running and value == 0 and self.get(self.IP, "MP1_SMN_C2PMSG_75") == DEBUGSMC_MSG_Mode1Reset:
            self.dev.schedule(LATENCY, self._mode1_reset)

    def _mode1_reset(self) -> None:
        from gpusim import board
        board.mode1_reset(self.dev)

    def _handle(self, msg: int, p: int) -> tuple[int, int | None]:
        m = getattr(self, "_msg_" + _MSG_NAMES.get(msg, "?")[len("PPSMC_MSG_"):], None)
        if m is not None:
            return m(p)
        if msg in _ACKNOWLEDGED:
            return S.PPSMC_Result_OK, None
        if msg in _MSG_NAMES:
            self.error(f"{_MSG_NAMES[msg]} ({msg:#x}) is a real SMU 13.0.0 message the simulator does "
                       f"not model; answered failed")
            return S.PPSMC_Result_Failed, None
        return S.PPSMC_Result_UnknownCmd, None

    def _msg_GetSmuVersion(self, p):
        return S.PPSMC_Result_OK, self.version

    def _msg_GetDriverIfVersion(self, p):
        return S.PPSMC_Result_OK, DRIVER_IF_VERSION

    # -- features --------------------------------------------------------------------------------------
    @property
    def scpm(self) -> bool:
        return getattr(self.dev, "scpm", True)

    def _scpm_refuses(self, what: str) -> bool:
        if self.scpm:
            self.error(f"{what} with SCPM enabled: not permitted (amdgpu_smu.c skips it when "
                       f"adev->scpm_enabled); answered Failed")
        return self.scpm

    def _msg_SetAllowedFeaturesMaskLow(self, p):
        if self._scpm_refuses("SetAllowedFeaturesMaskLow"):
            return S.PPSMC_Result_Failed, None
        self.allowed = (self.allowed & ~0xFFFFFFFF) | p
        return S.PPSMC_Result_OK, None

    def _msg_SetAllowedFeaturesMaskHigh(self, p):
        if self._scpm_refuses("SetAllowedFeaturesMaskHigh"):
            return S.PPSMC_Result_Failed, None
        self.allowed = (self.allowed & 0xFFFFFFFF) | p << 32
        return S.PPSMC_Result_OK, None

    def _set_features(self, mask: int, on: bool):
        self._integrate()
        self.features = (self.features | mask) if on else (self.features & ~mask)
        return S.PPSMC_Result_OK, None

    def _msg_EnableAllSmuFeatures(self, p):
        return self._set_features(self.allowed & ALL_FEATURES, True)

    def _msg_DisableAllSmuFeatures(self, p):
        if self._scpm_refuses("DisableAllSmuFeatures"):
            return S.PPSMC_Result_Failed, None
        return self._set_features(~0, False)

    def _msg_EnableSmuFeaturesLow(self, p):
        return self._set_features(p & self.allowed, True)

    def _msg_EnableSmuFeaturesHigh(self, p):
        return self._set_features((p << 32) & self.allowed, True)

    def _msg_DisableSmuFeaturesLow(self, p):
        return self._set_features(p, False)

    def _msg_DisableSmuFeaturesHigh(self, p):
        return self._set_features(p << 32, False)

    def _msg_GetRunningSmuFeaturesLow(self, p):
        return S.PPSMC_Result_OK, self.features & 0xFFFFFFFF

    def _msg_GetRunningSmuFeaturesHigh(self, p):
        return S.PPSMC_Result_OK, self.features >> 32

    def feature(self, bit: int) -> bool:
        return bool(self.features >> bit & 1)

    # -- tables ----------------------------------------------------------------------------------------
    def _msg_SetDriverDramAddrHigh(self, p):
        self.driver_table = (self.driver_table & 0xFFFFFFFF) | p << 32
        return S.PPSMC_Result_OK, None

    def _msg_SetDriverDramAddrLow(self, p):
        self.driver_table = (self.driver_table & ~0xFFFFFFFF) | p
        return S.PPSMC_Result_OK, None

    def _table(self, p: int) -> tuple[int, object]:
        tid = p & 0xFFFF
        name = TABLES.get(tid)
        return tid, (structs.get(S, name) if name else None)

    def _mc(self):
        gmc = self.dev.blocks.get("GMC")
        if gmc is None:
            raise LookupError("no GMC model: the SMU cannot reach the driver table's MC address")
        return gmc

    def _msg_TransferTableSmu2Dram(self, p):
        tid, st = self._table(p)
        if st is None:
            self.error(f"TransferTableSmu2Dram: table id {tid} is not one this SMU transfers")
            return S.PPSMC_Result_Failed, None

        def push():
            data = self.metrics() if tid == S.TABLE_SMU_METRICS else self.tables.get(tid, bytes(st.size))
            self._mc().mc_write(self.driver_table, data)
        return self._transfer(push, "Smu2Dram", tid)

    def _msg_TransferTableDram2Smu(self, p):
        tid, st = self._table(p)
        if st is None or tid == S.TABLE_SMU_METRICS:
            self.error(f"TransferTableDram2Smu: table id {tid} cannot be written to this SMU")
            return S.PPSMC_Result_Failed, None
        if tid == S.TABLE_PPTABLE and self._scpm_refuses("TransferTableDram2Smu of the PPTable (the PSP's job)"):
            return S.PPSMC_Result_Failed, None

        def pull():
            self.tables[tid] = self._mc().mc_read(self.driver_table, st.size)
        return self._transfer(pull, "Dram2Smu", tid)

    def _transfer(self, fn, what: str, tid: int):
        if not self.driver_table:
            self.error(f"TransferTable{what} (table {tid}) before SetDriverDramAddrHigh/Low")
            return S.PPSMC_Result_CmdRejectedPrereq, None
        try:
            fn()
        except (TypeError, AttributeError, NameError):
            raise
        except Exception as e:   # a GMC translation fault or a refused DMA: the transfer failed
            self.error(f"TransferTable{what} (table {tid}) at MC address {self.driver_table:#x}: {e}")
            return S.PPSMC_Result_Failed, None
        return S.PPSMC_Result_OK, None

    # -- DPM ---------------------------------------------------------------------------------------------
    def _clk(self, p: int):
        return self.dpm.get(p >> 16 & 0xFFFF)

    def _msg_GetDpmFreqByIndex(self, p):
        d = self._clk(p)
        if d is None:
            return S.PPSMC_Result_Failed, None
        levels, fine = d
        idx = p & 0xFFFF
        if idx == 0xFF:
            return S.PPSMC_Result_OK, len(levels) | (0x80000000 if fine else 0)
        if idx >= len(levels):
            return S.PPSMC_Result_Failed, None
        return S.PPSMC_Result_OK, levels[idx]

    def _msg_GetMinDpmFreq(self, p):
        d = self._clk(p)
        return (S.PPSMC_Result_OK, d[0][0]) if d else (S.PPSMC_Result_Failed, None)

    def _msg_GetMaxDpmFreq(self, p):
        d = self._clk(p)
        return (S.PPSMC_Result_OK, d[0][-1]) if d else (S.PPSMC_Result_Failed, None)

    def _limit(self, p, which: dict, idx: int):
        clk = p >> 16 & 0xFFFF
        if clk not in self.dpm:
            return S.PPSMC_Result_Failed, None
        self._integrate()
        levels = self.dpm[clk][0]
        which[clk][idx] = min(max(p & 0xFFFF, levels[0]), levels[-1])
        return S.PPSMC_Result_OK, None

    def _msg_SetSoftMinByFreq(self, p):
        return self._limit(p, self.soft, 0)

    def _msg_SetSoftMaxByFreq(self, p):
        return self._limit(p, self.soft, 1)

    def _msg_SetHardMinByFreq(self, p):
        return self._limit(p, self.hard, 0)

    def _msg_SetHardMaxByFreq(self, p):
        return self._limit(p, self.hard, 1)

    # -- power --------------------------------------------------------------------------------------
    def _msg_GetPptLimit(self, p):
        if p >> 16 > 1:
            return S.PPSMC_Result_Failed, None
        return S.PPSMC_Result_OK, self.ppt_limit

    def _msg_SetPptLimit(self, p):
        if not 1 <= p <= PPT_LIMIT_W[self.dev.chip] * 2:
            return S.PPSMC_Result_Failed, None
        self._integrate()
        self.ppt_limit = p
        return S.PPSMC_Result_OK, None

    def _msg_AllowGfxOff(self, p):
        self._integrate()
        self.gfxoff_allowed = True
        self.dev.gfx_gate = self
        return S.PPSMC_Result_OK, None

    def _msg_DisallowGfxOff(self, p):
        self._integrate()
        self.wake()
        self.gfxoff_allowed = False
        if self.gfx_exit_at is None:     # GFX on and held on: GC accesses need no check
            self.dev.gfx_gate = None
        return S.PPSMC_Result_OK, None

    # -- GFXOFF: GFX's power state -----------------------------------------------------------------------
    def gfx_power(self) -> str:
        """"on", "off" (GFXOFF) or "exiting" (powering back up after a wake), now."""
        self._integrate()
        if self.gfx_exit_at is not None:
            if self.dev.steps < self.gfx_exit_at:
                return "exiting"
            self.gfx_exit_at = None
            if not self.gfxoff_allowed:
                self.dev.gfx_gate = None
        off = self.gfx_gated()
        if off and not self._gfx_was_off:
            self.gfxoff_entries += 1
        self._gfx_was_off = off
        return "off" if off else "on"

    def wake(self) -> int:
        """GFX is needed (DisallowGfxOff, a doorbell): starts a GFXOFF exit if GFX is off. Returns the clock
        steps until GFX is on (0: it is)."""
        if not self.running:
            return 0
        state = self.gfx_power()
        if state == "on":
            return 0
        if state == "off":
            if self.rng is None:
                self.rng = random.Random(zlib.crc32(f"SMU {self.dev.chip}".encode()))
            lo, hi = GFXOFF_EXIT_STEPS
            self.gfx_exit_at = self.dev.steps + self.rng.randint(lo, hi)
            self.gfxoff_exits += 1
            self._gfx_was_off = False
            self.dev.gfx_gate = self
            self.dev.schedule(self.gfx_exit_at - self.dev.steps, self._exit_done)
        return self.gfx_exit_at - self.dev.steps

    def _exit_done(self) -> None:
        self.gfx_power()

    def _gc_registers(self) -> frozenset:
        addrs = _GC_POWER_DOMAIN.get(self.dev.chip)
        if addrs is None:
            table = self.dev.table("GC")
            bases = self.dev.layout.bases("GC", 0)
            addrs = frozenset(bases[table[n].base_idx] + table[n].offset for n in table.names()
                              if not n.startswith(GC_ALWAYS_ON) and table[n].base_idx < len(bases))
            _GC_POWER_DOMAIN[self.dev.chip] = addrs
        return addrs

    def gc_access(self, addr: int, value: int | None) -> bool:
        """A host access to register dword `addr` (value: a write's, None for a read). True when it reached
        a powered-off GC: the caller returns GC_OFF_READ / drops the write."""
        if addr not in self._gc_registers():
            return False
        state = self.gfx_power()
        if state == "on":
            return False
        self.gc_off_accesses += 1
        what = "read" if value is None else f"write of {value:#x}"
        self.error(f"GC register {self._gc_name(addr)} {what} while GFX is {state} (GFXOFF): the block is "
                   f"unpowered, so the {'read returns ' + hex(GC_OFF_READ) if value is None else 'write is lost'}"
                   f"; amdgpu sends DisallowGfxOff (amdgpu_gfx_off_ctrl) and waits for its answer before any GC "
                   f"register access")
        return True

    def _gc_name(self, addr: int) -> str:
        table, bases = self.dev.table("GC"), self.dev.layout.bases("GC", 0)
        for n in table.names():
            d = table[n]
            if d.base_idx < len(bases) and bases[d.base_idx] + d.offset == addr:
                return n
        return f"{addr:#x}"

    def _msg_PrepareMp1ForUnload(self, p):
        return S.PPSMC_Result_OK, None

    def _msg_Mode1Reset(self, p):
        return S.PPSMC_Result_OK, None

    # -- the model ----------------------------------------------------------------------------------------
    def _bounds(self, clk: int) -> tuple[int, int]:
        lo = max(self.soft[clk][0], self.hard[clk][0])
        hi = min(self.soft[clk][1], self.hard[clk][1])
        return lo, max(lo, hi)

    def _pick(self, clk: int, busy: float, dpm_bit: int) -> int:
        """A clock's current frequency: its lowest level without DPM (the boot clock), else the lowest
        allowed level when idle and the highest when busy; fine-grained clocks scale in between."""
        levels, fine = self.dpm[clk]
        if not self.feature(dpm_bit):
            return levels[0]
        lo, hi = self._bounds(clk)
        if fine:
            return round(lo + (hi - lo) * min(1.0, busy * 2))
        allowed = [lv for lv in levels if lo <= lv <= hi] or [lo]
        return allowed[-1] if busy > 0 else allowed[0]

    def demand(self, engine: str) -> float:
        """What DPM and power follow: the averaged activity, or the current one when higher (work that
        arrives raises the clocks at once; they come down as the average decays). Assumption: the PMFW's
        DPM algorithm is not public; it works from averaged activity (SmuMetrics_t's Average*Activity)."""
        return max(self.pm.level[engine], self.pm.average[engine])

    def gfx_gated(self) -> bool:
        """GFX powered off: the PMFW runs (a stopped one holds nothing off: assumption), GFXOFF allowed
        (AllowGfxOff) and enabled, GFX idle now and on average (the average standing in for PPTable's
        GfxOffEntryHysteresis, whose value is the board's: assumption), and no exit under way."""
        return (self.running and self.gfxoff_allowed and self.feature(S.FEATURE_GFXOFF_BIT)
                and self.demand("gfx") < GFXOFF_ENTRY and getattr(self, "gfx_exit_at", None) is None)

    def clocks(self) -> dict[int, int]:
        """Current frequency per PPCLK in MHz (GFXCLK 0 while GFX is powered off)."""
        gfx, mem = self.demand("gfx"), self.demand("mem")
        out = {
            S.PPCLK_GFXCLK: 0 if self.gfx_gated() else self._gfx_throttled(),
            S.PPCLK_SOCCLK: self._pick(S.PPCLK_SOCCLK, max(gfx, mem), S.FEATURE_DPM_SOCCLK_BIT),
            S.PPCLK_UCLK: self._pick(S.PPCLK_UCLK, mem, S.FEATURE_DPM_UCLK_BIT),
            S.PPCLK_FCLK: self._pick(S.PPCLK_FCLK, mem, S.FEATURE_DPM_FCLK_BIT),
        }
        for clk in (S.PPCLK_VCLK_0, S.PPCLK_DCLK_0, S.PPCLK_VCLK_1, S.PPCLK_DCLK_1):
            out[clk] = 0   # no multimedia engine is modeled: VCN stays powered down
        return out

    def _gfx_power(self, mhz: int) -> float:
        top = self.dpm[S.PPCLK_GFXCLK][0][-1]
        return GFX_W[self.dev.chip] * self.demand("gfx") * (mhz / top) ** 3

    def _throttled(self) -> tuple[int, dict[int, int]]:
        """GFXCLK after the throttlers (FEATURE_THROTTLERS): lowered until the board power fits the PPT
        limit and, once the hotspot reaches its limit, the power at which it settles there; and the
        throttling percentage per THROTTLER_* bit (SmuMetrics_t.ThrottlingPercentage)."""
        mhz = self._pick(S.PPCLK_GFXCLK, self.demand("gfx"), S.FEATURE_DPM_GFXCLK_BIT)
        reasons: dict[int, int] = {}
        if not self.feature(S.FEATURE_THROTTLERS_BIT) or mhz == 0:
            return mhz, reasons
        fixed = IDLE_W[self.dev.chip] + LEAK * GFX_W[self.dev.chip] + self._mem_power()
        full = self._gfx_power(mhz)
        floor = self._bounds(S.PPCLK_GFXCLK)[0]
        limits = [(self.ppt_limit, S.THROTTLER_PPT0_BIT)]
        if self.pm.too_hot():
            limits.append((self.pm.thermal_budget_w(), S.THROTTLER_TEMP_HOTSPOT_BIT))
        out = mhz
        for limit, bit in limits:
            budget = limit - fixed
            if full > budget:
                cut = max(floor, int(mhz * (max(budget, 0.0) / full) ** (1 / 3))) if budget > 0 else floor
                reasons[bit] = round(100 * (mhz - cut) / mhz)
                out = min(out, cut)
        return out, reasons

    def _gfx_throttled(self) -> int:
        return self._throttled()[0]

    def _mem_power(self) -> float:
        uclk_top = self.dpm[S.PPCLK_UCLK][0][-1]
        levels = self.dpm[S.PPCLK_UCLK][0]
        u = self._pick(S.PPCLK_UCLK, self.demand("mem"), S.FEATURE_DPM_UCLK_BIT)
        return MEM_W[self.dev.chip] * (0.2 + 0.8 * self.demand("mem")) * (u - levels[0]) / (uclk_top - levels[0])

    def power(self) -> float:
        """Board power in W: idle floor, GFX (0 while gated; leakage 5% of its peak when ungated and idle),
        memory."""
        chip = self.dev.chip
        gfx = 0.0 if self.gfx_gated() else LEAK * GFX_W[chip] + self._gfx_power(self.clocks()[S.PPCLK_GFXCLK])
        return IDLE_W[chip] + gfx + self._mem_power()

    def _integrate(self) -> None:
        """Advances activity averages, temperature and energy to now with the state that held since the
        last change (gpusim.power). When the time base changed (a board built on the simulated clock,
        then kept in a state file) the gap between the two clocks is not time that passed."""
        if self._same_base():
            self.pm.advance(self._now_s(), self.power)
            self._thermal_sensors()

    def _thermal_sensors(self) -> None:
        """THM compares the hotspot with the thresholds the driver set (gpusim.thm)."""
        thm = self.dev.blocks.get("THM")
        if thm is not None:
            thm.observe(self.pm.temperatures()[1])

    def _same_base(self) -> bool:
        wall = self._wall()
        if getattr(self.pm, "wall_clock", False) != wall:
            self.pm.wall_clock = wall
            self.pm.last_s = self._now_s()
            return False
        return True

    def metrics(self) -> bytes:
        """SmuMetricsExternal_t as the firmware fills it."""
        self._integrate()
        self.metrics_counter += 1
        clk = self.clocks()
        cur = [clk.get(i, 0) for i in range(S.PPCLK_COUNT)]
        power = self.power()
        temps = [0] * S.TEMP_COUNT
        edge, hotspot, mem = self.pm.temperatures(power)
        temps[S.TEMP_EDGE], temps[S.TEMP_HOTSPOT], temps[S.TEMP_MEM] = round(edge), round(hotspot), round(mem)
        throttling = [0] * S.THROTTLER_COUNT
        for bit, pct in self._throttled()[1].items():
            throttling[bit] = pct
        duty, rpm = self.pm.fan()
        avg = self.pm.average
        inner = dict(
            CurrClock=cur, AverageGfxclkFrequencyTarget=clk[S.PPCLK_GFXCLK],
            AverageGfxclkFrequencyPreDs=clk[S.PPCLK_GFXCLK], AverageGfxclkFrequencyPostDs=clk[S.PPCLK_GFXCLK],
            AverageFclkFrequencyPreDs=clk[S.PPCLK_FCLK], AverageFclkFrequencyPostDs=clk[S.PPCLK_FCLK],
            AverageMemclkFrequencyPreDs=clk[S.PPCLK_UCLK], AverageMemclkFrequencyPostDs=clk[S.PPCLK_UCLK],
            MetricsCounter=self.metrics_counter & 0xFFFFFFFF, AverageGfxActivity=round(100 * avg["gfx"]),
            AverageUclkActivity=round(100 * avg["mem"]), AverageSocketPower=round(power),
            AverageTotalBoardPower=round(power), EnergyAccumulator=int(self.energy_j) & 0xFFFFFFFF,
            AvgTemperature=temps, AvgTemperatureFanIntake=round(self.pm.ambient_c),
            AvgFanPwm=round(100 * duty), AvgFanRpm=rpm, ThrottlingPercentage=throttling,
        )
        return structs.get(S, "SmuMetricsExternal_t").pack(SmuMetrics=inner)
