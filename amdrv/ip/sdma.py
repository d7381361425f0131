"""SDMA 6.0 (sdma_v6_0.c) engines started with their firmware loaded by the PSP (front door).

sdma_v6_0_start with AMDGPU_FW_LOAD_PSP: the PSP has loaded SDMA_UCODE_TH0/TH1, so the driver only
unhalts each engine's F32 (SDMA0_F32_CNTL.HALT = 0, sdma_v6_0_enable) and releases its context-switch
thread (TH1_RESET = 0, as sdma_v6_0_gfx_resume's final unhalt does); sdma_v6_0_ctx_switch_enable is empty
on v6.0. An engine is ready when it runs and reports idle
(SDMA0_STATUS_REG.IDLE, as sdma_v6_0_is_idle reads it). The gfx rings (sdma_v6_0_gfx_resume) are
queues, built by the queue code. Engine 1's registers are engine 0's at the fixed distance upstream
uses (SDMA1_REG_OFFSET, SDMA1_HYP_DEC_REG_OFFSET), spelled SDMA1_* in the GC register table.
`fini` stops the rings and halts the engines (sdma_v6_0_hw_fini -> sdma_v6_0_enable(false): gfx_stop, HALT).
"""
from __future__ import annotations

import re

from amdrv.poll import poll

IDLE_TIMEOUT_S = 0.1  # adev->usec_timeout


class SDMAError(RuntimeError):
    """SDMA bring-up failed: names the device, the engine, the register and what was read."""


class SDMA:
    def __init__(self, dev):
        self.dev, self.gc = dev, dev.reg("SDMA0")  # gfx11 SDMA registers live in GC's space
        self.version = dev.disc.version_of("SDMA0")
        self.engines = sorted(int(name[4:]) for name, _ in dev.disc.ips if re.fullmatch(r"SDMA\d", name))

    def _reg(self, engine: int, name: str):
        return self.gc.reg(f"SDMA{engine}_{name}")

    def _fail(self, engine: int, what: str) -> SDMAError:
        v = ".".join(map(str, self.version))
        return SDMAError(f"{self.dev.name}: SDMA{engine} (SDMA {v}): {what}")

    def init(self) -> None:
        self.enable(True)
        for e in self.engines:
            if not self.engine_ready(e):
                raise self._fail(e, f"still halted after unhalting it: SDMA{e}_F32_CNTL reads "
                                    f"{self._reg(e, 'F32_CNTL').read():#010x}")
        self.wait_idle()

    def enable(self, enable: bool) -> None:
        """sdma_v6_0_enable: unhalt, or stop the rings (gfx_stop) and halt."""
        if not enable:
            self.gfx_stop()
        for e in self.engines:
            if enable:
                self._reg(e, "F32_CNTL").update(HALT=0, TH1_RESET=0)
            else:
                self._reg(e, "F32_CNTL").update(HALT=1)

    def gfx_stop(self) -> None:
        """sdma_v6_0_gfx_stop: RB_ENABLE and IB_ENABLE off on every engine, so an unhalt (the next boot's)
        does not resume a ring whose memory and write-pointer shadow (F32_WPTR_POLL_ENABLE) were freed."""
        for e in self.engines:
            self._reg(e, "QUEUE0_RB_CNTL").update(RB_ENABLE=0)
            self._reg(e, "QUEUE0_IB_CNTL").update(IB_ENABLE=0)

    def engine_ready(self, engine: int) -> bool:
        return not self._reg(engine, "F32_CNTL").decode()["HALT"]

    def ready(self) -> bool:
        return all(self.engine_ready(e) for e in self.engines) and self.is_idle()

    def is_idle(self) -> bool:
        return all(self._reg(e, "STATUS_REG").decode()["IDLE"] for e in self.engines)

    def wait_idle(self, timeout_s: float = IDLE_TIMEOUT_S) -> None:
        for e in self.engines:
            reg = self._reg(e, "STATUS_REG")
            idle = reg.defn.fields["IDLE"].mask
            ok, v = poll(reg.read, lambda v: v & idle, timeout_s, 1000)
            if not ok:
                raise self._fail(e, f"not idle: SDMA{e}_STATUS_REG {v:#010x} has IDLE clear "
                                    f"({timeout_s * 1e3:.0f} ms); its firmware may not be loaded "
                                    "(cold boot) or a queue is hung")

    def fini(self) -> None:
        self.enable(False)
