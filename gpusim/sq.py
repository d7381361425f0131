"""The SQ (shader sequencer) as a driver sees it: the state of the waves of a dispatch that did not finish,
read through SQ_IND_INDEX / SQ_IND_DATA.

Facts (amdgpu/gfx_v11_0.c wave_read_ind, gfx_v11_0_read_wave_data; gc_11_0_0_offset.h ixSQ_WAVE_*,
gc_11_0_0_sh_mask.h): a driver writes SQ_IND_INDEX with WAVE_ID (4:0) and INDEX (31:16, an ixSQ_WAVE_*
register number), then reads the register through SQ_IND_DATA; AUTO_INCR (bit 11) steps INDEX after each
read. SQ_WAVE_STATUS.VALID (16) marks a resident wave, HALT (13) a halted one; SQ_WAVE_TRAPSTS.ILLEGAL_INST
(11) records an illegal instruction; SQ_WAVE_PC_LO/HI hold the wave's program counter and
SQ_WAVE_EXEC_LO its EXEC mask, SQ_WAVE_MODE the wave's MODE register (the float round and denormal modes,
DX10_CLAMP, IEEE, FP16_OVFL: what s_getreg HW_REG_MODE reads; gfx_v11_0_read_wave_data reads it too).

Simulator choices: the CP hands the SQ the waves of a dispatch that stopped (gpusim.dispatch
DispatchFailed.waves), which stay resident while their queue is hung (until a dequeue, a pipe or CP reset,
or a mode1 reset clears the hang); they sit in wave slots 0.. of the SE/SA/WGP GRBM_GFX_INDEX selects,
whatever it selects (assumption: placement is not modelled). A wave at an instruction the hardware cannot
decode is halted with TRAPSTS.ILLEGAL_INST (assumption: no trap handler is installed, so the wave stops
there); a wave stopped at an instruction the executor does not model, or at a memory fault, is shown
halted with TRAPSTS clear (the model cannot run it further; gpusim's dev.errors says why); a wave of a
dispatch stopped for running too long is shown resident and not halted, at the PC it had reached. Every
other ixSQ_WAVE_* register reads 0.
"""
from __future__ import annotations

from gpusim.device import Block

GC = "GC"
# gc_11_0_0_offset.h
IX_MODE, IX_STATUS, IX_TRAPSTS, IX_PC_LO, IX_PC_HI, IX_EXEC_LO = 0x101, 0x102, 0x103, 0x108, 0x109, 0x27E
# gc_11_0_0_sh_mask.h
STATUS_EXECZ, STATUS_HALT, STATUS_VALID = 1 << 9, 1 << 13, 1 << 16
TRAPSTS_ILLEGAL_INST = 1 << 11
IND_WAVE_ID_MASK, IND_AUTO_INCR, IND_INDEX_SHIFT = 0x1F, 1 << 11, 16
MAX_WAVES = 32               # SQ_IND_INDEX.WAVE_ID is 5 bits


class SQ(Block):
    name = "SQ"

    def attach(self) -> None:
        self.on_write(GC, "SQ_IND_INDEX", self._w_index)
        self.on_read(GC, "SQ_IND_DATA", self._r_data)

    def reset(self) -> None:
        self.queue = None
        self.waves: list[dict] = []
        self.index = 0
        self.generation = None

    def hold(self, queue, waves: list[dict]) -> None:
        """The stopped waves of `queue`'s dispatch: dicts with pc, exec, halt, trapsts, mode."""
        self.queue, self.waves = queue, list(waves)[:MAX_WAVES]
        self.generation = getattr(queue, "generation", None)

    def resident(self) -> list[dict]:
        # the hang was cleared (dequeue, reset: the queue's generation moved on): the waves are gone, also
        # when the queue set up again later hangs for another reason (found by tools/fuzz/packets.py: a
        # halted wave of an earlier kernel was reported for an unknown PM4 opcode)
        q = self.queue
        if q is None or not getattr(q, "hung", None) or getattr(q, "generation", None) != getattr(self, "generation", None):
            self.queue, self.waves = None, []
            return []
        return self.waves

    def _w_index(self, value: int) -> None:
        self.index = value

    def _r_data(self) -> int:
        v = self.index
        wave, reg = v & IND_WAVE_ID_MASK, v >> IND_INDEX_SHIFT
        if v & IND_AUTO_INCR:
            self.index = (v & 0xFFFF) | ((reg + 1) & 0xFFFF) << IND_INDEX_SHIFT
            self.dev.regs.poke(self.dev.reg_addr(GC, "SQ_IND_INDEX"), self.index)
        waves = self.resident()
        if wave >= len(waves):
            return 0
        w = waves[wave]
        if reg == IX_STATUS:
            return (STATUS_VALID | (STATUS_HALT if w["halt"] else 0)
                    | (STATUS_EXECZ if not w["exec"] else 0))
        if reg == IX_TRAPSTS:
            return w["trapsts"]
        if reg == IX_PC_LO:
            return w["pc"] & 0xFFFFFFFF
        if reg == IX_PC_HI:
            return w["pc"] >> 32 & 0xFFFF
        if reg == IX_EXEC_LO:
            return w["exec"]
        if reg == IX_MODE:
            return w.get("mode", 0)
        return 0
