"""Compute (MEC) and SDMA queues of a booted AM GPU, their submission, waits, and recovery.

    from amdrv.queue import ComputeQueue, SDMAQueue, HostBuffer, Fence, recover
    q = ComputeQueue(gpu)                      # ME1 pipe 0 queue 0, 64 KiB ring, doorbell MEC_RING0
    s = SDMAQueue(gpu, engine=0)               # SDMA0 QUEUE0, 64 KiB ring
    mem = HostBuffer(gpu, 4096)                # host memory the engines reach at mem.va (mem.view)
    f = Fence(mem, 0)                          # a 64-bit value at mem.va + 0: f.va, f.value
    q.submit(pm4_dwords)                       # array('I') / list / numpy uint32: copied into the ring
    q.wait(f, 1, timeout_s=2.0)                # QueueError naming the queue, rptr/wptr and any fault
    recover(gpu)                               # reset GFX and SDMA engines, clear faults, re-create queues

This module keeps the rings, their pointers and doorbells, the MQDs, the KIQ's packets and the set of
queues; the registers belong to their blocks, which it calls: amdrv.ip.gfx programs and dequeues HQDs
(the KIQ's by MMIO) and does the GFX soft reset, amdrv.ip.sdma programs an engine's queue 0 and does the
SDMA soft reset.

Both queues run in VMID 0 (the AM driver's single address space, amdrv.ip.gmc). Their rings and
pointer write-back words live in host DMA memory mapped for the GPU (as amdgpu's rings live in GTT),
so `submit` is a memory copy, one 64-bit wptr store and one 64-bit doorbell write: no MMIO read.
Whoever writes VRAM through BAR0 for an engine to read must flush HDP first (`gpu.nbio.hdp_flush()`,
or PM4/SDMA packets: see amdrv.pm4 / amdrv.sdma_packets); a compute queue does it after writing its MQD,
which the CP reads when the KIQ maps it (`KIQ.of(gpu)`, set up with the first compute queue).

Facts (drivers/gpu/drm/amd):
- Compute queues are mapped through the KIQ, as amdgpu does without MES (gfx_v11_0_cp_resume ->
  gfx_v11_0_kiq_resume, gfx_v11_0_kcq_resume -> amdgpu_gfx_enable_kcq). The KIQ is ME1 pipe 3 queue 0
  (amdgpu_gfx_kiq_acquire), doorbell AMDGPU_NAVI10_DOORBELL_KIQ, named in RLC_CP_SCHEDULERS
  (gfx_v11_0_kiq_setting) and programmed by MMIO as gfx_v11_0_kiq_init_register does under GRBM_GFX_CNTL's
  queue select (soc21_grbm_select; amdgpu's srbm_mutex is a per-device lock here): wptr polling off, EOP
  buffer (GFX11_MEC_HPD_SIZE 2048 bytes, EOP_SIZE = log2(2048/4) - 1), doorbell control, dequeue if active,
  MQD address (MQD_CONTROL VMID 0), ring base >> 8 and PQ_CONTROL (QUEUE_SIZE = log2(size/4) - 1,
  RPTR_BLOCK_SIZE = log2(4096/4) - 1, PRIV_STATE, KMD_QUEUE), rptr report and wptr poll addresses,
  CP_MEC_DOORBELL_RANGE_LOWER/UPPER = (kiq*2) << 2 / (userqueue_end*2) << 2, wptr 0, VMID 0,
  PERSISTENT_STATE.PRELOAD_SIZE 0x55, CP_HQD_ACTIVE 1, CP_PQ_STATUS.DOORBELL_ENABLE. It then gets
  SET_RESOURCES (every MEC queue but its own) and, per compute queue, MAP_QUEUES with the MQD address,
  doorbell offset and wptr address (gfx11_kiq_set_resources, gfx11_kiq_map_queues); each batch ends with a
  WRITE_DATA of SCRATCH_REG0 that the driver polls (gfx_v11_0_ring_test_ring for the KIQ). The MQD
  (include/v11_structs.h v11_compute_mqd, its layout generated into amdrv.autogen.mqd_v11) gets what
  gfx_v11_0_compute_mqd_init fills; it is written through BAR0 and the HDP flushed before the map, since the
  CP reads it. Behind the stock USB bridge firmware the MQD and the EOP buffer share a page of host memory
  instead (upstream's GTT: amdgpu_gfx_mqd_sw_init, gfx_v11_0_mec_init), pushed whole before the map. fini unmaps the compute queues (UNMAP_QUEUES RESET_QUEUES, amdgpu_gfx_disable_kcq) and then
  dequeues the KIQ by MMIO (upstream leaves it on its HQD and halts the MEC). Unlike upstream, the MQD's
  read pointer is 0 even when the HQD held another: after `recover` it may hold the old queue's.
- Doorbells (amdgpu_doorbell.h, soc21_init_doorbell_index): indices in 64-bit units, rings use index
  << 1 in dwords: MEC ring n at (AMDGPU_NAVI10_DOORBELL_MEC_RING0 + n) << 1, SDMA engine e at
  sDMA_ENGINE0/1 << 1. Compute wptr: dwords, 64-bit, never wrapped (support_64bit_ptrs), stored to the
  wptr poll word and rung as a 64-bit doorbell (gfx_v11_0_ring_set_wptr_compute). SDMA wptr: the same in
  bytes (wptr << 2, sdma_v6_0_ring_set_wptr); rptr write-back in bytes too (sdma_v6_0_ring_get_rptr).
- SDMA queue set-up is sdma_v6_0_gfx_resume for one engine (ring, pointers, wptr poll, rptr write-back,
  doorbell enable/offset, the NBIO SDMA doorbell range (instance 0's entry, 20 dwords per engine, set up
  by any engine's queue),
  UTCL1 RESP_MODE 3 / REDO_DELAY 9 and the L2 read/write policies (sdma_common.h defaults NOA/BYPASS),
  unhalt, RB_ENABLE, IB_ENABLE).
- Recovery: the compute side is gfx_v11_0_soft_reset (every MEC queue dequeued with RESET_WAVES (2) and
  SPI_COMPUTE_QUEUE_RESET, CP_VMID_RESET, GRBM_SOFT_RESET of CP/GFX/CPF/CPC/CPG pulsed,
  CP_SOFT_RESET_CNTL.CMP_HQD_REG_RESET, then cp_resume: the RS64 MEC restarted as at boot, the KIQ set up
  again and the compute queues mapped through it); the SDMA side
  is sdma_v6_0_soft_reset (rings stopped, FREEZE, F32 halted with TH1 reset, QUEUE0_PREEMPT 0,
  GRBM_SOFT_RESET.SOFT_RESET_SDMA<n> pulsed, then the engine started again). Latched VM faults are
  cleared and the IH ring drained; every queue of the GPU is then set up again with empty rings.
"""
from __future__ import annotations

import struct
import time

from amdrv import placement, pm4, regs, structs
from amdrv.autogen import mqd_v11
from amdrv.ip.gfx import (DOORBELL_KIQ, DOORBELL_MEC_RING0, DOORBELL_USERQUEUE_END, MEC_PIPES,
                          MEC_QUEUES_PER_PIPE)
from amdrv.ip.nbio import DOORBELL_SDMA_ENGINE
from amdrv.ip.gmc import GPUMapping
from amdrv.poll import USEC_TIMEOUT, poll

DOORBELL_BAR = 2
GFX11_MEC_HPD_SIZE = 2048              # gfx_v11_0.c: EOP buffer bytes per queue
MQD_SIZE = 4096                        # v11_compute_mqd is 512 dwords (2 KiB); one page
GPU_PAGE = 4096                        # AMDGPU_GPU_PAGE_SIZE
RING_SIZE = 64 << 10
# amdgpu_gfx_kiq_acquire: the KIQ takes queue 0 of the highest MEC pipe no compute ring uses (gfx11: ME1
# pipe 3 queue 0); its doorbell is AMDGPU_NAVI10_DOORBELL_KIQ. Upstream's ring is 1024 dwords x 256
# submissions (amdgpu_ring_init); this driver sends a few packets per queue set-up, so 2048 dwords.
KIQ_PIPE, KIQ_QUEUE = 3, 0
KIQ_RING_SIZE = 8 << 10
UNMAP_PREEMPT_QUEUES, UNMAP_RESET_QUEUES = 0, 1   # amdgpu_unmap_queues_action (amdgpu_gfx_disable_kcq: RESET)
RING_TEST_IDLE = 0xCAFEDEAD            # gfx_v11_0_ring_test_ring: SCRATCH_REG0 before the ring writes it

# v11_compute_mqd (include/v11_structs.h), generated by tools/gentables into amdrv.autogen.mqd_v11
COMPUTE_MQD = structs.get(mqd_v11, "v11_compute_mqd")
MQD_HEADER = 0xC0310800                # gfx_v11_0_compute_mqd_init
HOST_EOP_OFFSET = 2048                 # a queue's page of host memory: its MQD (2 KiB), then its EOP buffer


class QueueError(RuntimeError):
    """A queue failed: names the GPU, the queue, its read/write pointers and any fault, and what to do."""


def _log2(n: int, what: str) -> int:
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{what} must be a power of two, not {n}")
    return n.bit_length() - 1


class HostBuffer:
    """Host DMA memory mapped for the engines: `va` (GPU address), `view` (a writable memoryview of the
    bytes), `free()`. Page-granular."""

    def __init__(self, gpu, size: int):
        self.gpu = gpu
        self.dma = placement.host_written(gpu, size, "ring")
        try:
            self.mapping = gpu.gmc.map_system(self.dma)
        except BaseException:
            self.dma.free()
            raise
        self.va, self.size, self.view = self.mapping.va, size, self.dma.view

    def free(self) -> None:
        if self.dma is not None:
            self.gpu.gmc.unmap(self.mapping)
            self.dma.free()
            self.dma = None


class Fence:
    """A 64-bit value in host memory the engines write: `va`; `value` reads (and sets) it."""

    __slots__ = ("buf", "offset", "va", "_view")

    def __init__(self, buf: HostBuffer, offset: int = 0):
        if offset & 7:
            raise ValueError(f"fence at offset {offset:#x}: 64-bit values must be 8-byte aligned")
        self.buf, self.offset, self.va = buf, offset, buf.va + offset
        self._view = buf.view[offset:offset + 8].cast("Q")

    @property
    def value(self) -> int:
        return self._view[0]

    @value.setter
    def value(self, v: int) -> None:
        self._view[0] = v


class _Queue:
    """Ring in host memory, pointer write-back words, doorbell; subclasses program the engine."""

    kind = "queue"
    wptr_unit = 4           # bytes per wptr unit as the engine counts it (compute: dwords)

    def __init__(self, gpu, ring_size: int, extra: int = 0):
        self.gpu, self.dev = gpu, gpu.dev
        self.ring_size = ring_size
        self.ring_dw = ring_size // 4
        _log2(ring_size, f"{self.kind} ring size")
        # ring, then one page: rptr report at +0, wptr poll word at +8; then `extra` bytes of the subclass's
        self.mem = HostBuffer(gpu, ring_size + GPU_PAGE + extra)
        self.ring = self.mem.view[:ring_size].cast("I")
        self.wb = self.mem.view[ring_size:ring_size + 16].cast("Q")
        self.ring_va, self.rptr_va, self.wptr_va = self.mem.va, self.mem.va + ring_size, self.mem.va + ring_size + 8
        self.doorbell = self.dev.pci.bar(DOORBELL_BAR)
        self.wptr = 0       # dwords written since set-up
        self.rptr_seen = 0  # the last rptr read: the engine is at least this far, so no read while there is room
        # Behind a USB bridge the ring is a host shadow of the bridge's memory: each submit pushes the
        # dwords it wrote, and the rptr write-back (which the host cannot read back there) is replaced by
        # the engine's rptr register.
        self.coherent = self.mem.dma.coherent
        gpu.queues.add(self)

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _reset_ring(self) -> None:
        self.wptr = self.rptr_seen = 0
        self.wb[0] = self.wb[1] = 0
        self.mem.view[:self.ring_size] = bytes(self.ring_size)
        self.mem.dma.push()

    @property
    def rptr(self) -> int:
        """Where the engine reads in the ring, in dwords from its start (the rptr write-back, which
        the CP reports wrapped at the ring size; the engine's register where the host cannot read memory
        the device wrote)."""
        if not self.coherent:
            return self._hw_rptr()
        return self.wb[0] * self.wptr_unit // 4 % self.ring_dw

    def _hw_rptr(self) -> int:
        raise NotImplementedError

    @property
    def pending(self) -> int:
        """Dwords submitted that the engine has not read yet."""
        return (self.wptr - self.rptr) % self.ring_dw

    def submit(self, dwords, flush: bool = True) -> None:
        """Copies dwords (array('I'), a uint32 numpy array or a list of ints) into the ring and rings the
        doorbell. Waits for room if the ring is full (QueueError if the engine does not move). flush=False
        leaves a transport's queued writes (USB) to go with the caller's next batch."""
        n = len(dwords)
        if not isinstance(dwords, memoryview):
            try:
                mv = memoryview(dwords)
                if mv.itemsize != 4:    # int64 numpy, array('L'/'Q'): its bytes are not n dwords; by value below
                    raise TypeError
                dwords = mv.cast("B").cast("I")
            except TypeError:
                try:
                    dwords = memoryview(struct.pack(f"<{n}I", *dwords)).cast("I")
                except struct.error as e:
                    raise QueueError(f"{self.name}: submit of {n} values that are not all 32-bit unsigned dwords "
                                     f"({e}); pass array('I') or a numpy uint32 array") from None
        if n >= self.ring_dw:
            raise QueueError(f"{self.name}: {n} dwords do not fit the {self.ring_dw}-dword ring; "
                             "submit in parts or use an indirect buffer")
        self._room(n)
        at = self.wptr % self.ring_dw
        first = min(n, self.ring_dw - at)
        self.ring[at:at + first] = dwords[:first]
        if first < n:
            self.ring[:n - first] = dwords[first:]
        self.wptr += n
        value = self.wptr * 4 // self.wptr_unit
        self.wb[1] = value
        if not self.coherent:
            dma = self.mem.dma
            dma.push(at * 4, first * 4)
            if first < n:
                dma.push(0, (n - first) * 4)
            if self.polls_wptr:
                dma.push(self.ring_size + 8, 8)
        self.doorbell.write64(self.doorbell_index * 4, value)
        if flush:
            self.doorbell.flush()   # an ordering point: transports that queue posted writes (USB) send them now

    def _room(self, n: int) -> None:
        # One dword short of full: a full ring would read as empty. The last rptr seen can only be behind
        # the engine, so the ring is read again only when that one says there is no room.
        if (self.wptr - self.rptr_seen) % self.ring_dw + n >= self.ring_dw:
            self.rptr_seen = self.rptr
            if (self.wptr - self.rptr_seen) % self.ring_dw + n >= self.ring_dw:   # pending, without a 2nd read
                self._wait_room(n)

    def consumed(self, upto: int) -> None:
        """The engine is known to have read the ring up to dword `upto` (counted since set-up: a fence after it
        was seen), so the room check needs no rptr read until there."""
        if 0 <= self.wptr - upto < (self.wptr - self.rptr_seen) % self.ring_dw:
            self.rptr_seen = upto % self.ring_dw

    def _wait_room(self, n: int) -> None:
        # polls an always-on register (OSSSYS), not the engine's GC status: GFX may be coming out of GFXOFF
        ih_wptr = self.dev.reg("OSSSYS").IH_RB_WPTR.read
        ok, _ = poll(lambda: (ih_wptr(), self.pending)[1], lambda p: p + n < self.ring_dw, 2.0, 1000)
        if not ok:
            raise self._error(f"the ring stays full ({n} dwords to add)")
        self.rptr_seen = self.rptr

    def _tick(self) -> int:
        """One status register read: lets a stepped simulator run, and tells whether the engine is busy."""
        raise NotImplementedError

    def wait(self, fence, value: int, timeout_s: float = 2.0, min_reads: int = 2000) -> None:
        """Waits until fence.value >= value. A VM fault reported on the IH ring ends the wait at once;
        otherwise after timeout_s (and at least min_reads status reads) the queue is taken as hung.
        Raises QueueError naming the queue, its pointers and the fault in words."""
        t0, n = time.perf_counter(), 0
        while fence.value < value:
            self._tick()
            n += 1
            if n & 255 == 0:
                faults = self._faults()
                if faults:
                    raise self._error(f"a VM fault while waiting for the fence at {fence.va:#x} to reach {value}",
                                      faults)
                if n >= min_reads and time.perf_counter() - t0 >= timeout_s:
                    raise self._error(f"timed out after {time.perf_counter() - t0:.2f} s waiting for the fence "
                                      f"at {fence.va:#x} to reach {value} (it holds {fence.value})",
                                      self._faults())
        # The hubs answer a faulting access with the default page (set_fault_enable_default) and the work
        # completes: only the IH ring and the fault latch tell (gmc_v11_0_process_interrupt).
        faults = self._faults()
        if faults:
            raise self._error(f"the fence at {fence.va:#x} reached {value}, but the work faulted (the faulting "
                              "accesses went to the default page: the results are wrong)", faults, hung=False)

    def _faults(self) -> list[str]:
        """VM faults from the IH ring and the hubs' latches, in words (both cleared). Other interrupts
        (end-of-pipe, SDMA traps) are consumed: nothing in the AM driver waits on them."""
        gmc = self.gpu.gmc
        out = [str(f) for f in map(gmc.fault_from_iv, self.gpu.ih.poll()) if f is not None]
        for hub in ("GC", "MM"):
            f = gmc.decode_fault(hub)
            if f is not None:
                out.append(str(f))
        return out

    def state(self) -> str:
        raise NotImplementedError

    def _error(self, what: str, faults: list[str] | None = None, hung: bool = True) -> QueueError:
        fault = "; ".join(faults) if faults else "no VM fault reported"
        state = "The queue is hung: call" if hung else "To start clean, call"
        return QueueError(f"{self.dev.name}: {self.name}: {what}; {self.state()}; {fault}. {state} gpu.recover() "
                          "(amdrv.queue.recover) to reset the engines and re-create the queues")


class ComputeQueue(_Queue):
    """A compute queue on the MEC (ME1): its MQD written through BAR0 and flushed past the HDP, then mapped
    by the KIQ (MAP_QUEUES), as amdgpu_gfx_enable_kcq maps its compute rings. ring_id picks the doorbell
    (MEC_RING0 + ring_id) and the EOP slot, as amdgpu's compute rings do. ME1 pipe 3 queue 0 is the KIQ's."""

    kind = "compute"
    wptr_unit = 4
    polls_wptr = False      # CP_PQ_WPTR_POLL is off: the doorbell carries the wptr

    def __init__(self, gpu, pipe: int = 0, queue: int = 0, ring_size: int = RING_SIZE, ring_id: int | None = None):
        if not (0 <= pipe < MEC_PIPES and 0 <= queue < MEC_QUEUES_PER_PIPE):
            raise ValueError(f"MEC pipe {pipe} queue {queue}: ME1 has pipes 0..{MEC_PIPES - 1} and queues "
                             f"0..{MEC_QUEUES_PER_PIPE - 1}")
        if (pipe, queue) == (KIQ_PIPE, KIQ_QUEUE) and self.kind != "KIQ":
            raise ValueError(f"MEC pipe {pipe} queue {queue} is the KIQ's (amdgpu_gfx_kiq_acquire); pick another")
        self.me, self.pipe, self.queue = 1, pipe, queue
        self.ring_id = pipe * MEC_QUEUES_PER_PIPE + queue if ring_id is None else ring_id
        self.doorbell_index = self._doorbell_index()
        if self.doorbell_index > DOORBELL_USERQUEUE_END << 1:
            raise ValueError(f"compute ring {self.ring_id}: doorbell {self.doorbell_index:#x} is past the MEC range")
        # Behind the stock bridge firmware a VRAM byte costs a TLP: the MQD and the EOP buffer go where upstream
        # puts them, host memory (GTT: amdgpu_gfx_mqd_sw_init for compute MQDs, gfx_v11_0_mec_init and
        # amdgpu_gfx_kiq_init for EOP buffers; the KIQ's MQD too, where upstream had it before moving it to VRAM
        # for SR-IOV, its comment says): a page after the ring's (one mapping, one TLB flush), pushed whole.
        pci = gpu.dev.pci
        host = not getattr(pci, "dma_coherent", True) and not getattr(pci, "sram_dma", False)
        super().__init__(gpu, ring_size, GPU_PAGE if host else 0)
        self.gc = self.dev.reg("GC")
        self.mapped = False     # the KIQ mapped it and nothing (unmap, CP soft reset) took it off since
        self.mqd_host = None    # the MQD page's host view where it is host memory; its offset in self.mem
        if not host:
            self.mqd = gpu.gmc.map_vram(MQD_SIZE, tag=f"mqd {self.name}")
            self.eop = gpu.gmc.map_vram(GPU_PAGE, tag=f"eop {self.name}")
        else:
            self._mqd_at = ring_size + GPU_PAGE
            self.mqd_host = self.mem.view[self._mqd_at:self._mqd_at + GPU_PAGE]
            va, dma = self.mem.va + self._mqd_at, self.mem.dma
            self.mqd = GPUMapping(va, COMPUTE_MQD.size, dma=dma)
            self.eop = GPUMapping(va + HOST_EOP_OFFSET, GFX11_MEC_HPD_SIZE, dma=dma)
        self.init()

    def _doorbell_index(self) -> int:
        return (DOORBELL_MEC_RING0 + self.ring_id) << 1

    def skip_to_start(self) -> None:
        """Fills the ring from the write pointer to its end with one NOP (PM4 type 3: the CP skips its count + 1
        body dwords; PACKET3(NOP, 0x3FFF) is one dword) so that the next submit starts at dword 0, in one piece.
        Only the header is written (the body's stale bytes are skipped): behind a bridge one posted dword that
        goes out with the next push; the doorbell is the next submit's."""
        n = -self.wptr % self.ring_dw
        if not n:
            return
        self._room(n)
        at = self.wptr % self.ring_dw
        self.ring[at] = pm4.NOP_1DW if n == 1 else pm4.header(pm4.P.PACKET3_NOP, n - 2)
        self.wptr += n
        if not self.coherent:
            self.mem.dma.push(at * 4, 4)

    @property
    def name(self) -> str:
        return f"compute queue ME{self.me} pipe {self.pipe} queue {self.queue}"

    def _write_mqd(self) -> dict[str, int]:
        """gfx_v11_0_compute_mqd_init with the queue selected (it reads some HQD registers), the MQD
        written through BAR0, then the HDP flushed so the engines see it (amdgpu flushes HDP before the
        GPU reads what the CPU wrote: amdgpu_ib.c, amdgpu_device_flush_hdp)."""
        dev = self.dev
        if self.mqd_host is None:
            dev.vram.write(self.eop.vram.addr, bytes(GFX11_MEC_HPD_SIZE))
        with self.gpu.gfx.selected(self.me, self.pipe, self.queue):
            m = self._mqd_values()
        if self.mqd_host is not None:      # host memory (behind a bridge): the page pushed, no HDP in the way
            view = self.mqd_host
            view[:HOST_EOP_OFFSET] = COMPUTE_MQD.pack(**m).ljust(HOST_EOP_OFFSET, b"\0")
            view[HOST_EOP_OFFSET:HOST_EOP_OFFSET + GFX11_MEC_HPD_SIZE] = bytes(GFX11_MEC_HPD_SIZE)
            self.mem.dma.push(self._mqd_at, GPU_PAGE)
            return m
        dev.vram.write(self.mqd.vram.addr, COMPUTE_MQD.pack(**m).ljust(MQD_SIZE, b"\0"))
        self.gpu.nbio.hdp_flush()
        return m

    def init(self) -> None:
        """(Re)creates the queue with an empty ring: taken off the MEC first if mapped (UNMAP_QUEUES), the
        MQD written, then MAP_QUEUES on the KIQ (amdgpu_gfx_enable_kcq; the KIQ comes up with the first
        compute queue)."""
        kiq = KIQ.of(self.gpu)
        if self.mapped:
            kiq.unmap([self], UNMAP_RESET_QUEUES)
        self._reset_ring()
        self._write_mqd()
        kiq.map(self)

    def _mqd_values(self) -> dict[str, int]:
        gc = self.gc
        eop = self.eop.va >> 8
        pq = self.ring_va >> 8
        # the five registers whose other fields the MQD keeps, read as one batch (one USB round trip)
        eop_cntl, mqd_cntl, pq_cntl, persistent, ib_cntl = regs.read_all([
            gc.CP_HQD_EOP_CONTROL, gc.CP_MQD_CONTROL, gc.CP_HQD_PQ_CONTROL, gc.CP_HQD_PERSISTENT_STATE,
            gc.CP_HQD_IB_CONTROL])
        return dict(
            header=MQD_HEADER, compute_pipelinestat_enable=1,
            compute_static_thread_mgmt_se0=0xFFFFFFFF, compute_static_thread_mgmt_se1=0xFFFFFFFF,
            compute_static_thread_mgmt_se2=0xFFFFFFFF, compute_static_thread_mgmt_se3=0xFFFFFFFF,
            compute_misc_reserved=7,
            cp_hqd_eop_base_addr_lo=eop & 0xFFFFFFFF, cp_hqd_eop_base_addr_hi=eop >> 32,
            cp_hqd_eop_control=gc.CP_HQD_EOP_CONTROL.defn.encode(
                eop_cntl, EOP_SIZE=_log2(GFX11_MEC_HPD_SIZE // 4, "EOP") - 1),
            cp_hqd_pq_doorbell_control=gc.CP_HQD_PQ_DOORBELL_CONTROL.encode(
                DOORBELL_OFFSET=self.doorbell_index, DOORBELL_EN=1, DOORBELL_SOURCE=0, DOORBELL_HIT=0),
            cp_hqd_dequeue_request=0, cp_hqd_pq_rptr=0, cp_hqd_pq_wptr_lo=0, cp_hqd_pq_wptr_hi=0,
            cp_mqd_base_addr_lo=self.mqd.va & 0xFFFFFFFC, cp_mqd_base_addr_hi=self.mqd.va >> 32,
            cp_mqd_control=gc.CP_MQD_CONTROL.defn.encode(mqd_cntl, VMID=0),
            cp_hqd_pq_base_lo=pq & 0xFFFFFFFF, cp_hqd_pq_base_hi=pq >> 32,
            cp_hqd_pq_control=gc.CP_HQD_PQ_CONTROL.defn.encode(
                pq_cntl, QUEUE_SIZE=_log2(self.ring_dw, "ring") - 1,
                RPTR_BLOCK_SIZE=_log2(GPU_PAGE // 4, "page") - 1, UNORD_DISPATCH=0, TUNNEL_DISPATCH=0,
                PRIV_STATE=1, KMD_QUEUE=1),
            cp_hqd_pq_rptr_report_addr_lo=self.rptr_va & 0xFFFFFFFC,
            cp_hqd_pq_rptr_report_addr_hi=(self.rptr_va >> 32) & 0xFFFF,
            cp_hqd_pq_wptr_poll_addr_lo=self.wptr_va & 0xFFFFFFFC,
            cp_hqd_pq_wptr_poll_addr_hi=(self.wptr_va >> 32) & 0xFFFF,
            cp_hqd_vmid=0,
            cp_hqd_persistent_state=gc.CP_HQD_PERSISTENT_STATE.defn.encode(persistent, PRELOAD_SIZE=0x55),
            cp_hqd_ib_control=gc.CP_HQD_IB_CONTROL.defn.encode(ib_cntl, MIN_IB_AVAIL_SIZE=3),
            cp_hqd_pipe_priority=0, cp_hqd_queue_priority=0, cp_hqd_active=1)

    def fini(self) -> None:
        """Takes the queue off the MEC through the KIQ (UNMAP_QUEUES RESET_QUEUES, amdgpu_gfx_disable_kcq
        from gfx_v11_0_hw_fini), so no HQD outlives the driver with its ring in freed memory."""
        kiq = getattr(self.gpu, "kiq", None)
        if self.mapped and kiq is not None:
            kiq.unmap([self], UNMAP_RESET_QUEUES)

    def _tick(self) -> int:
        return self.gc.GRBM_STATUS.read()

    def _hw_rptr(self) -> int:
        return self.gpu.gfx.hqd_rptr(self.me, self.pipe, self.queue) % self.ring_dw

    def state(self) -> str:
        hqd = self.gpu.gfx.hqd_registers(self.me, self.pipe, self.queue)
        active, rptr, wptr = hqd["active"], hqd["rptr"], hqd["wptr"]
        return (f"rptr {self.rptr} (write-back) / {rptr} (CP_HQD_PQ_RPTR), wptr {self.wptr} "
                f"(driver) / {wptr} (CP_HQD_PQ_WPTR) dwords, CP_HQD_ACTIVE {active}, "
                f"GRBM_STATUS {self.gc.GRBM_STATUS.read():#010x}{self._packet_at(rptr, wptr)}")

    def _packet_at(self, rptr: int, wptr: int) -> str:
        """The packet the CP stopped at, from the driver's own ring (PM4 type-3 header: opcode 15:8)."""
        if rptr % self.ring_dw == wptr % self.ring_dw:
            return ""
        h = self.ring[rptr % self.ring_dw]
        if h >> 30 != 3:
            return f", stopped at a non-type-3 header {h:#010x}"
        from amdrv.autogen import pm4 as P
        op = h >> 8 & 0xFF
        name = next((k[len("PACKET3_"):] for k, v in vars(P).items() if k.startswith("PACKET3_") and v == op
                     and isinstance(v, int)), f"opcode {op:#x}")
        return f", stopped at PACKET3 {name} (header {h:#010x})"


class KIQ(ComputeQueue):
    """The kernel interface queue (gfx_v11_0_kiq_init_queue): ME1 pipe 3 queue 0, programmed directly into
    its HQD registers (gfx_v11_0_kiq_init_register), named to the RLC in RLC_CP_SCHEDULERS
    (gfx_v11_0_kiq_setting). It maps and unmaps the compute queues with PM4 packets (gfx11_kiq_*), each
    batch followed by a register write the driver polls for (gfx_v11_0_ring_test_ring's SCRATCH_REG0,
    as amdgpu_gfx_enable_kcq's amdgpu_ring_test_helper). One per GPU: `KIQ.of(gpu)`."""

    kind = "KIQ"

    def __init__(self, gpu):
        self.seq = 0
        super().__init__(gpu, KIQ_PIPE, KIQ_QUEUE, KIQ_RING_SIZE)

    @classmethod
    def of(cls, gpu) -> "KIQ":
        """The GPU's KIQ, set up (with SET_RESOURCES) on first use."""
        kiq = getattr(gpu, "kiq", None)
        if kiq is None:
            kiq = cls(gpu)
            gpu.kiq = kiq
        return kiq

    def _doorbell_index(self) -> int:
        return DOORBELL_KIQ << 1

    @property
    def name(self) -> str:
        return f"KIQ (ME{self.me} pipe {self.pipe} queue {self.queue})"

    def init(self) -> None:
        """(Re)creates the KIQ with an empty ring: gfx_v11_0_kiq_setting, its MQD, the HQD registers by MMIO
        (gfx_v11_0_kiq_init_register), then SET_RESOURCES with every MEC queue but its own (what
        amdgpu_gfx_enable_kcq sends before mapping; gfx11 with MES sends all ones)."""
        self._reset_ring()
        gfx = self.gpu.gfx
        gfx.kiq_setting(self.me, self.pipe, self.queue)
        m = self._write_mqd()
        with gfx.selected(self.me, self.pipe, self.queue):
            gfx.kiq_init_register(self.name, m)
        self.mapped = True
        self.set_resources()

    def set_resources(self) -> None:
        """SET_RESOURCES (gfx11_kiq_set_resources) with every MEC queue but the KIQ's own."""
        mask = sum(1 << (p * MEC_QUEUES_PER_PIPE + q) for p in range(MEC_PIPES) for q in range(MEC_QUEUES_PER_PIPE)
                   if (p, q) != (self.pipe, self.queue))
        self._run(pm4.set_resources(mask), "SET_RESOURCES")

    def map(self, q: ComputeQueue) -> None:
        """MAP_QUEUES for q (gfx11_kiq_map_queues): the CP loads q's HQD from its MQD and activates it."""
        self._run(pm4.map_queues(q.me, q.pipe, q.queue, q.doorbell_index, q.mqd.va, q.wptr_va),
                  f"MAP_QUEUES of the {q.name}")
        q.mapped = True

    def unmap(self, queues, action: int = UNMAP_RESET_QUEUES) -> None:
        """UNMAP_QUEUES for each queue (gfx11_kiq_unmap_queues; amdgpu_gfx_disable_kcq uses RESET_QUEUES):
        the CP takes them off their HQDs and saves their state to their MQDs."""
        queues = [q for q in queues if q.mapped]
        if not queues:
            return
        words = []
        for q in queues:
            words += pm4.unmap_queues(action, q.doorbell_index)
        self._run(words, "UNMAP_QUEUES of the " + ", ".join(q.name for q in queues))
        for q in queues:
            q.mapped = False

    def _run(self, words, what: str) -> None:
        """Submits words and a SCRATCH_REG0 write after them; polls SCRATCH_REG0 until the KIQ got there."""
        gc = self.gc
        self.seq = self.seq % 0x7FFFFFFF + 1
        gc.SCRATCH_REG0.write(RING_TEST_IDLE)
        b = pm4.PM4()
        b.buf.extend(words)
        b.write_reg(gc.SCRATCH_REG0.addr // 4, self.seq)
        self.submit(b.buf)
        ok, v = poll(gc.SCRATCH_REG0.read, lambda v: v == self.seq, USEC_TIMEOUT, 1000)
        if not ok:
            raise self._error(f"{what} did not complete (SCRATCH_REG0 reads {v:#010x}, not {self.seq:#x}); "
                              "the KIQ or the queue it serves is stuck", self._faults())

    def fini(self) -> None:
        """Dequeues the KIQ itself by MMIO (amdgpu_amdkfd_gfx_v11 hqd_destroy: select, CP_HQD_DEQUEUE_REQUEST,
        poll CP_HQD_ACTIVE). Upstream's hw_fini halts the MEC with the KIQ still on its HQD; this driver takes
        it off too, so no HQD outlives the driver with its ring in freed memory."""
        self.mapped = False
        self.gpu.gfx.hqd_destroy(self.me, self.pipe, self.queue, self.name)


class SDMAQueue(_Queue):
    """Queue 0 of an SDMA engine (its gfx ring), as sdma_v6_0_gfx_resume sets it up."""

    kind = "SDMA"
    wptr_unit = 1           # SDMA pointers count bytes
    polls_wptr = True       # F32_WPTR_POLL_ENABLE: the engine also reads the wptr poll word

    def __init__(self, gpu, engine: int = 0, ring_size: int = RING_SIZE):
        if engine not in gpu.sdma.engines:
            raise ValueError(f"{gpu.dev.name}: no SDMA engine {engine}; it has {gpu.sdma.engines}")
        self.engine = engine
        self.doorbell_index = DOORBELL_SDMA_ENGINE[engine] << 1
        super().__init__(gpu, ring_size)
        self.gc = self.dev.reg("SDMA0")
        self.init()

    @property
    def name(self) -> str:
        return f"SDMA{self.engine} queue 0"

    def _reg(self, name: str):
        return self.gc.reg(f"SDMA{self.engine}_{name}")

    def init(self) -> None:
        """(Re)creates the ring: sdma_v6_0_gfx_resume for this engine."""
        self._reset_ring()
        self.gpu.sdma.gfx_resume(self.engine, self.ring_va, self.ring_dw, self.rptr_va, self.wptr_va,
                                 self.doorbell_index)

    def _tick(self) -> int:
        return self._reg("STATUS_REG").read()

    def _hw_rptr(self) -> int:
        return self.gpu.sdma.rptr(self.engine) // 4 % self.ring_dw

    def state(self) -> str:
        r = self.gpu.sdma.queue_registers(self.engine)
        return (f"rptr {self.rptr} dwords into the ring (write-back) / {r['rptr']:#x} bytes (RB_RPTR), "
                f"wptr {self.wptr} dwords (driver) / {r['wptr']:#x} bytes (RB_WPTR), "
                f"SDMA{self.engine}_STATUS_REG {r['status']:#010x}, F32_CNTL {r['f32_cntl']:#010x}")


# ---------------------------------------------------------------- fini and recovery
def fini_queues(gpu) -> None:
    """Unmaps every compute queue created on this GPU through the KIQ in one batch (amdgpu_gfx_disable_kcq,
    from gfx_v11_0_hw_fini), then takes the KIQ off its HQD; the SDMA rings are stopped by the SDMA block's
    fini."""
    kiq = getattr(gpu, "kiq", None)
    if kiq is None:
        return
    kiq.unmap(sorted((q for q in gpu.queues if q.kind == "compute"), key=lambda q: q.doorbell_index))
    kiq.fini()
    gpu.kiq = None


def reset_queues(gpu) -> None:
    """After the engines' soft reset (AMGPU.recover): cp_resume's KIQ set up again by MMIO
    (gfx_v11_0_kiq_resume), then the compute queues mapped through it again (gfx_v11_0_kcq_resume), and
    the SDMA rings set up again (sdma_v6_0_gfx_resume); the reset took every HQD off the MEC."""
    queues = sorted(gpu.queues, key=lambda q: (q.kind != "KIQ", q.kind, q.doorbell_index))
    for q in queues:
        if q.kind in ("KIQ", "compute"):
            q.mapped = False
    for q in queues:
        q.init()


def recover(gpu) -> list[str]:
    """gpu.recover(): the engines reset, latched faults cleared, every queue set up again with an empty
    ring; returns the faults that were pending, in words (amdrv.am.AMGPU.recover)."""
    return gpu.recover()
