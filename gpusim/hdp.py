"""HDP 6.0 (the host data path): the write path from BAR0 into VRAM and its flush.

Host writes through BAR0 pass the HDP; amdgpu flushes it (hdp_v6_0.c: a write of 0 to the remapped
HDP_MEM_FLUSH_CNTL page, or a CP/SDMA request through BIF_BX_PF0_GPU_HDP_FLUSH_REQ) before a GPU engine
may rely on what the CPU wrote. The simulator's VRAM is coherent, so what is modeled is the bookkeeping
engines can check: how many host writes are pending since the last flush.
"""
from __future__ import annotations

from gpusim.device import Block


class HDP(Block):
    name = "HDP"

    def reset(self) -> None:
        self.flushes = 0
        self.unflushed_writes = 0   # BAR0 writes since the last flush (direct memoryview writes not seen)
        self.last_flush_by = None

    def host_write(self, nbytes: int) -> None:
        self.unflushed_writes += 1

    def flush(self, by: str) -> None:
        self.flushes += 1
        self.unflushed_writes = 0
        self.last_flush_by = by
