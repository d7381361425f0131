"""SDMA 6.0 (sdma_v6_0.c) engines started with their firmware loaded by the PSP (front door).

sdma_v6_0_start with AMDGPU_FW_LOAD_PSP: the PSP has loaded SDMA_UCODE_TH0/TH1, so the driver only
unhalts each engine's F32 (SDMA0_F32_CNTL.HALT = 0, sdma_v6_0_enable) and releases its context-switch
thread (TH1_RESET = 0, as sdma_v6_0_gfx_resume's final unhalt does); sdma_v6_0_ctx_switch_enable is empty
on v6.0. An engine is ready when it runs and reports idle
(SDMA0_STATUS_REG.IDLE, as sdma_v6_0_is_idle reads it). The block owns its queue registers: `gfx_resume`
programs an engine's queue 0 (sdma_v6_0_gfx_resume) for the ring amdrv.queue.SDMAQueue keeps, and
`soft_reset` is sdma_v6_0_soft_reset then sdma_v6_0_start. Engine 1's registers are engine 0's at the fixed distance upstream
uses (SDMA1_REG_OFFSET, SDMA1_HYP_DEC_REG_OFFSET), spelled SDMA1_* in the GC register table.
`fini` stops the rings and halts the engines (sdma_v6_0_hw_fini -> sdma_v6_0_enable(false): gfx_stop, HALT).
"""
from __future__ import annotations

import re

from amdrv import regs
from amdrv.ip.base import IPBlock
from amdrv.ip.nbio import DOORBELL_SDMA_ENGINE, SDMA_DOORBELL_RANGE
from amdrv.poll import poll

IDLE_TIMEOUT_S = 0.1  # adev->usec_timeout
CACHE_READ_POLICY_L2_DEFAULT, CACHE_WRITE_POLICY_L2_DEFAULT = 2, 3   # sdma_common.h (NOA, BYPASS)


class SDMAError(RuntimeError):
    """SDMA bring-up failed: names the device, the engine, the register and what was read."""


class SDMA(IPBlock):
    name = "sdma"

    def __init__(self, dev, nbio):
        self.dev, self.gc, self.nbio = dev, dev.reg("SDMA0"), nbio  # gfx11 SDMA registers live in GC's space
        self.version = dev.disc.version_of("SDMA0")
        self.engines = sorted(int(name[4:]) for name, _ in dev.disc.ips if re.fullmatch(r"SDMA\d", name))
        self.sw_init()

    def _reg(self, engine: int, name: str):
        return self.gc.reg(f"SDMA{engine}_{name}")

    def _fail(self, engine: int, what: str) -> SDMAError:
        v = ".".join(map(str, self.version))
        return SDMAError(f"{self.dev.name}: SDMA{engine} (SDMA {v}): {what}")

    def hw_init(self, warm: bool = False) -> None:
        self.init()       # the same on a warm boot: fini halted the engines

    def hw_fini(self) -> None:
        self.fini()

    def init(self) -> None:
        self.enable(True)
        # every engine's F32_CNTL (unhalted?) and STATUS_REG (idle?) as one batch (one round trip over USB)
        f32 = [self._reg(e, "F32_CNTL") for e in self.engines]
        status = [self._reg(e, "STATUS_REG") for e in self.engines]
        values = regs.read_all(f32 + status)
        for e, r, v in zip(self.engines, f32, values):
            if r.decode(v)["HALT"]:
                raise self._fail(e, f"still halted after unhalting it: SDMA{e}_F32_CNTL reads {v:#010x}")
        if not all(r.decode(v)["IDLE"] for r, v in zip(status, values[len(f32):])):
            self.wait_idle()

    def enable(self, enable: bool) -> None:
        """sdma_v6_0_enable: unhalt, or stop the rings (gfx_stop) and halt."""
        if not enable:
            self.gfx_stop()
        cntl = [self._reg(e, "F32_CNTL") for e in self.engines]
        for r, old in zip(cntl, regs.read_all(cntl)):     # the read-modify-writes' reads as one batch
            if enable:
                r.update(old, HALT=0, TH1_RESET=0)
            else:
                r.update(old, HALT=1)

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

    # ---------------------------------------------------------------- queues
    def gfx_resume(self, engine: int, ring_va: int, ring_dw: int, rptr_va: int, wptr_va: int,
                   doorbell_index: int) -> None:
        """sdma_v6_0_gfx_resume for one engine's queue 0: the ring at ring_va (ring_dw dwords, a power of
        two), the rptr write-back at rptr_va, the wptr poll word at wptr_va, the doorbell; the NBIO SDMA
        doorbell range; then the engine unhalted with its ring and indirect buffers enabled."""
        r = lambda name: self._reg(engine, name)  # noqa: E731
        cntl = r("QUEUE0_RB_CNTL")
        # the ring's and UTCL1's read-modify-writes' reads as one batch (one USB round trip): no write before theirs
        # changes them. F32_CNTL and IB_CNTL stay read where upstream reads them, around the unhalt and the
        # ring's enable, while the engine may run.
        rmw = ("QUEUE0_RB_CNTL", "QUEUE0_DOORBELL", "QUEUE0_DOORBELL_OFFSET", "UTCL1_CNTL", "UTCL1_PAGE")
        old = dict(zip(rmw, regs.read_all([r(n) for n in rmw])))
        r("SEM_WAIT_FAIL_TIMER_CNTL").write(0)
        rb = cntl.defn.encode(old["QUEUE0_RB_CNTL"], RB_SIZE=ring_dw.bit_length() - 1, RB_PRIV=1, RB_ENABLE=0)
        cntl.write(rb)
        for name in ("RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI"):
            r(f"QUEUE0_{name}").write(0)
        r("QUEUE0_RB_WPTR_POLL_ADDR_LO").write(wptr_va & 0xFFFFFFFF)
        r("QUEUE0_RB_WPTR_POLL_ADDR_HI").write(wptr_va >> 32)
        r("QUEUE0_RB_RPTR_ADDR_HI").write(rptr_va >> 32)
        r("QUEUE0_RB_RPTR_ADDR_LO").write(rptr_va & 0xFFFFFFFC)
        rb = cntl.defn.encode(rb, RPTR_WRITEBACK_ENABLE=1, WPTR_POLL_ENABLE=0, F32_WPTR_POLL_ENABLE=1)
        r("QUEUE0_RB_BASE").write((ring_va >> 8) & 0xFFFFFFFF)
        r("QUEUE0_RB_BASE_HI").write(ring_va >> 40)
        r("QUEUE0_MINOR_PTR_UPDATE").write(1)
        r("QUEUE0_RB_WPTR").write(0)
        r("QUEUE0_RB_WPTR_HI").write(0)
        r("QUEUE0_DOORBELL").update(old["QUEUE0_DOORBELL"], ENABLE=1)
        r("QUEUE0_DOORBELL_OFFSET").update(old["QUEUE0_DOORBELL_OFFSET"], OFFSET=doorbell_index)
        # NBIO 4.3 has one SDMA routing entry, instance 0's, covering every engine's doorbells: whichever
        # engine's queue comes up programs it (upstream's gfx_resume always sets up instance 0 too)
        self.nbio.sdma_doorbell_range(0, DOORBELL_SDMA_ENGINE[0] << 1, SDMA_DOORBELL_RANGE * len(self.engines))
        r("QUEUE0_MINOR_PTR_UPDATE").write(0)
        r("UTCL1_CNTL").update(old["UTCL1_CNTL"], RESP_MODE=3, REDO_DELAY=9)
        page = r("UTCL1_PAGE")
        v = (old["UTCL1_PAGE"] & 0xFF0FFF) | CACHE_READ_POLICY_L2_DEFAULT << 12 | CACHE_WRITE_POLICY_L2_DEFAULT << 14
        page.write(v | page.defn.fields["LLC_NOALLOC"].mask)
        r("F32_CNTL").update(HALT=0, TH1_RESET=0)
        cntl.write(cntl.defn.encode(rb, RB_ENABLE=1))
        r("QUEUE0_IB_CNTL").update(IB_ENABLE=1)

    def rptr(self, engine: int) -> int:
        """QUEUE0_RB_RPTR in bytes (sdma_v6_0_ring_get_rptr reads the write-back; this where the host cannot)."""
        return self._reg(engine, "QUEUE0_RB_RPTR").read()

    def queue_registers(self, engine: int) -> dict[str, int]:
        """What an error report says of an engine's queue 0: RB_RPTR/RB_WPTR (bytes), STATUS_REG, F32_CNTL."""
        r = lambda name: self._reg(engine, name)  # noqa: E731
        return {"rptr": r("QUEUE0_RB_RPTR").read() | r("QUEUE0_RB_RPTR_HI").read() << 32,
                "wptr": r("QUEUE0_RB_WPTR").read() | r("QUEUE0_RB_WPTR_HI").read() << 32,
                "status": r("STATUS_REG").read(), "f32_cntl": r("F32_CNTL").read()}

    # ---------------------------------------------------------------- soft_reset
    def soft_reset(self) -> None:
        """sdma_v6_0_soft_reset, then sdma_v6_0_start (the engines unhalted; rings come with the queues):
        rings stopped, FREEZE, F32 halted with TH1 reset, QUEUE0_PREEMPT 0, GRBM_SOFT_RESET.SOFT_RESET_SDMA<n>
        pulsed."""
        gc = self.gc
        self.gfx_stop()
        for e in self.engines:
            self._reg(e, "FREEZE").update(FREEZE=1)
            self._reg(e, "F32_CNTL").update(HALT=1, TH1_RESET=1)
            self._reg(e, "QUEUE0_PREEMPT").write(0)
            gc.GRBM_SOFT_RESET.write(gc.GRBM_SOFT_RESET.encode(**{f"SOFT_RESET_SDMA{e}": 1}))
            gc.GRBM_SOFT_RESET.read()
            gc.GRBM_SOFT_RESET.write(0)
            gc.GRBM_SOFT_RESET.read()
        self.enable(True)

    def fini(self) -> None:
        self.enable(False)
