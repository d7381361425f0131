"""HDP 6.0 (the host data path): the write path from BAR0 into VRAM and its flush.

Host writes to VRAM (BAR0, its direct mapping, MM_INDEX/MM_DATA) pass the HDP, which holds them until a
flush; only then do the GPU's engines (page-table walker, CP, SDMA, shaders, PSP, IH, SMU) see them. amdgpu
flushes before any engine may rely on what the CPU wrote: per IB (amdgpu_ib_schedule's emit_hdp_flush),
before a TLB invalidation after page-table writes (gmc_v11_0_flush_gpu_tlb), after writing firmware and
command buffers for the PSP. The flush is a write of 0 to the page BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL points
at (hdp_v6_0_flush_hdp, the NBIO model routes it here) or a client's bit in BIF_BX_PF0_GPU_HDP_FLUSH_REQ
(nbio_v4_3_hdp_flush, the CP's WAIT_REG_MEM and SDMA's POLL_REGMEM HDP flush forms write it).

Model: VRAM's host mapping is copy-on-write over the memory (gpusim.device.VRAM), so a host write of any
kind is held until `flush` merges it, byte-exact. How long the real write buffer takes to drain on its own
is not documented; the model holds writes until the flush (assumption: the only ordering amdgpu relies on).
The host's own BAR0 reads see its pending writes (assumption). A flush from the engines' clock thread
(asynchronous mode) merges without releasing the host's page copies, since the host may be writing them.
"""
from __future__ import annotations

import threading

from gpusim.device import Block


class HDP(Block):
    name = "HDP"

    def reset(self) -> None:
        self.flushes = 0
        self.unflushed_writes = 0   # BAR0/MM_DATA writes since the last flush (direct writes are not seen)
        self.last_flush_by = None

    def host_write(self, nbytes: int) -> None:
        self.unflushed_writes += 1

    def flush(self, by: str) -> None:
        self.flushes += 1
        self.unflushed_writes = 0
        self.last_flush_by = by
        self.dev.vram.host_flush(drop=threading.current_thread() is not self.dev._thread)
