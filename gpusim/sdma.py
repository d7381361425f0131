"""SDMA 6.0 at boot: the F32 engines' halt/reset state, their status register, and what they need to run.

Facts (amdgpu/sdma_v6_0.c, amdgpu_psp.c, imu_v11_0.c; registers from gc_11_0_0, where gfx11's SDMA lives):
- sdma_v6_0_get_reg_offset: SDMA1's registers are SDMA0's + 0x600, except the HYP_DEC range
  (0x5880..0x589a, base index 1, SDMA0_F32_CNTL included) where they are + 0x20; gc_11_0_0's SDMA1_* names
  are exactly those addresses.
- sdma_v6_0_start with PSP loading: sdma_v6_0_enable(true) writes SDMA{i}_F32_CNTL.HALT = 0 on each instance;
  sdma_v6_0_gfx_resume programs the ring (QUEUE0_RB_*, DOORBELL, MINOR_PTR_UPDATE), UTCL1_CNTL (RESP_MODE,
  REDO_DELAY), UTCL1_PAGE (cache policies, LLC_NOALLOC), SEM_WAIT_FAIL_TIMER_CNTL, then unhalts again with
  HALT = 0 and TH1_RESET = 0. hw_fini / sdma_v6_0_enable(false) write HALT = 1. sdma_v6_0_soft_reset sets
  FREEZE, HALT | TH1_RESET, then pulses GRBM_SOFT_RESET.SOFT_RESET_SDMA0 << i and starts again without
  reloading firmware (the ucode survives a soft reset).
- sdma_v6_0_is_idle / wait_for_idle: SDMA{i}_STATUS_REG.IDLE.
- The firmware reaches the engines through the PSP and the RLC autoload: psp_load_non_psp_fw sends one SDMA
  image (SDMA_UCODE_TH0 and TH1; "PSP only receive one SDMA fw", the autoload gives it to every instance)
  before AUTOLOAD_RLC, and the IMU holds SDMA in reset until it releases GFX_IMU_GFX_RESET_CTRL.SDMA_RESETB.

Strictness: HALT written 0 before the PSP has loaded SDMA_UCODE_TH0 and TH1 and the RLC autoload has
completed is refused: the engine stays halted (HALT reads back 1) and dev.errors says why.

Simulator choices (no public fact): power-on F32_CNTL reads HALT = 1; an idle engine's STATUS_REG has every
*_IDLE/*_EMPTY bit set (0x465EE557) and a busy one clears IDLE, RB_EMPTY, RB_CMD_IDLE, BLOCK_IDLE, EX_IDLE,
CONTEXT_EMPTY and PREV_CMD_IDLE; a soft reset puts F32_CNTL back to its power-on value. Direct ucode loads
(SDMA0_UCODE_* / BROADCAST_UCODE_*) are plain storage and load nothing.

State for other models: `running(i)` (the control thread TH0 executes firmware), `ctx_switch_running(i)` (TH1
too), `set_busy(i, busy)`.
"""
from __future__ import annotations

import functools

from amdrv.autogen import psp as P
from gpusim.device import Block
from gpusim.fwcheck import fw_type_name

GC = "GC"
INSTANCES = 2          # Navi31 and Navi33 both have SDMA0 and SDMA1
FIRMWARE = (P.GFX_FW_TYPE_SDMA_UCODE_TH0, P.GFX_FW_TYPE_SDMA_UCODE_TH1)
IDLE_FIELDS = ("IDLE", "REG_IDLE", "RB_EMPTY", "RB_CMD_IDLE", "IB_CMD_IDLE", "BLOCK_IDLE", "EX_IDLE",
               "MC_WR_IDLE", "SRBM_IDLE", "CONTEXT_EMPTY", "RB_MC_RREQ_IDLE", "IB_MC_RREQ_IDLE", "MC_RD_IDLE",
               "DELTA_RPTR_EMPTY", "MC_RD_NO_POLL_IDLE", "PREV_CMD_IDLE", "SEM_IDLE", "INT_IDLE")
BUSY_CLEARS = ("IDLE", "RB_EMPTY", "RB_CMD_IDLE", "BLOCK_IDLE", "EX_IDLE", "CONTEXT_EMPTY", "PREV_CMD_IDLE")


def reg(i: int, name: str) -> str:
    """gc_11_0_0's name of an SDMA register of instance i: reg(1, "F32_CNTL") -> "SDMA1_F32_CNTL"."""
    return f"SDMA{i}_{name}"


class SDMA(Block):
    name = "SDMA"

    def attach(self) -> None:
        for i in range(INSTANCES):
            self.on_write(GC, reg(i, "F32_CNTL"), functools.partial(self._w_f32_cntl, i))
            self.on_read(GC, reg(i, "STATUS_REG"), functools.partial(self._r_status, i))

    def reset(self) -> None:
        self.busy = [False] * INSTANCES
        for i in range(INSTANCES):
            self._power_on(i)

    def _power_on(self, i: int) -> None:
        self.set(GC, reg(i, "F32_CNTL"), self.dev.table(GC)[reg(i, "F32_CNTL")].encode(HALT=1))

    # -- state for other models ----------------------------------------------------------------------
    def _f32(self, i: int) -> dict:
        return self.dev.table(GC)[reg(i, "F32_CNTL")].decode(self.get(GC, reg(i, "F32_CNTL")))

    def running(self, i: int) -> bool:
        """Instance i's control thread (TH0) executes its firmware: its queues can be served."""
        f = self._f32(i)
        return not (f["HALT"] or f["TH0_RESET"])

    def ctx_switch_running(self, i: int) -> bool:
        """The context-switch thread (TH1) runs too (upstream releases TH1_RESET when it unhalts)."""
        return self.running(i) and not self._f32(i)["TH1_RESET"]

    def set_busy(self, i: int, busy: bool) -> None:
        self.busy[i] = busy

    def missing(self) -> list[str]:
        """Why no SDMA engine can run yet (empty when they can)."""
        gfx, psp = self.dev.blocks.get("GFX"), self.dev.blocks.get("PSP")
        why = []
        absent = [t for t in FIRMWARE if psp is None or not psp.is_loaded(t)]
        if absent:
            why.append("the PSP has not loaded " + ", ".join(fw_type_name(t) for t in absent))
        if gfx is None or not gfx.rlc_autoload_complete:
            why.append("the RLC autoload has not completed (the IMU holds SDMA in reset)")
        return why

    def soft_reset(self, i: int) -> None:
        """GRBM_SOFT_RESET.SOFT_RESET_SDMA<i> (called by the GFX model): the engine stops; firmware stays."""
        self.busy[i] = False
        self._power_on(i)

    # -- registers ------------------------------------------------------------------------------------
    def _w_f32_cntl(self, i: int, value: int) -> int:
        r = self.dev.table(GC)[reg(i, "F32_CNTL")]
        if not r.decode(value)["HALT"] and self._f32(i)["HALT"]:
            why = self.missing()
            if why:
                self.error(f"{reg(i, 'F32_CNTL')}.HALT written 0 but {' and '.join(why)}: SDMA{i} stays halted")
                value = r.encode(value, HALT=1)
        return value

    def _r_status(self, i: int) -> int:
        r = self.dev.table(GC)[reg(i, "STATUS_REG")]
        v = r.encode(**{f: 1 for f in IDLE_FIELDS})
        return r.encode(v, **{f: 0 for f in BUSY_CLEARS}) if self.busy[i] else v
