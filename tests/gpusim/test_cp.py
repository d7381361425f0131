"""The simulated MEC compute queues and PM4 packet processor, driven as a minimal driver would from upstream
facts: gfx_v11_0_kiq_init_register's HQD register writes (GRBM_GFX_CNTL selecting ME 1, a pipe and a
queue), a ring of PM4 packets in GPU memory mapped through the booted driver's page table, the 64-bit
doorbell carrying the write pointer. Packet layouts as gfx_v11_0.c emits them."""
import pickle
import shutil
import struct
import subprocess

import numpy as np
import pytest

import pcie
from gpusim.bus import HostBus
from amdrv.am import AMGPU
from amdrv.autogen import ih as IHIDS
from amdrv.autogen import pm4 as P
from rdna3.codeobj import CodeObject
from rdna3.wave import dispatch_packet, pack_kernargs

KERNELS = __import__("pathlib").Path(__file__).parents[1] / "rdna3" / "kernels"
DOORBELL_RANGE_UPPER = 0x450          # (AMDGPU_NAVI10_DOORBELL_USERQUEUE_END (0x8a) * 2) << 2
RING_BYTES = 4096


def pkt3(op: int, *body: int) -> list[int]:
    return [0xC0000000 | (len(body) - 1) << 16 | op << 8] + [b & 0xFFFFFFFF for b in body]


RELEASE_GCR = (P.PACKET3_RELEASE_MEM_GCR_SEQ | P.PACKET3_RELEASE_MEM_GCR_GL2_WB | P.PACKET3_RELEASE_MEM_GCR_GL2_INV
               | P.PACKET3_RELEASE_MEM_GCR_GL2_US | P.PACKET3_RELEASE_MEM_GCR_GL1_INV
               | P.PACKET3_RELEASE_MEM_GCR_GLV_INV | P.PACKET3_RELEASE_MEM_GCR_GLM_INV
               | P.PACKET3_RELEASE_MEM_GCR_GLM_WB)


def release_mem(addr: int, data: int = 0, data_sel: int = 2, int_sel: int = 0, ctx: int = 0) -> list[int]:
    # CACHE_FLUSH_AND_INV_TS_EVENT, EVENT_INDEX 5 and the cache actions of gfx_v11_0_ring_emit_fence (GL2
    # written back first, so the host sees what kernels stored)
    event = 0x14 | 5 << 8 | RELEASE_GCR
    return pkt3(P.PACKET3_RELEASE_MEM, event, data_sel << 29 | int_sel << 24, addr, addr >> 32,
                data, data >> 32, ctx)


MEM_SYNC_GCR = 0x1 | 1 << 5 | 1 << 4 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 14 | 1 << 15   # gfx_v11_0_emit_mem_sync:
# GLI_INV(1), GLM_INV, GLM_WB, GLK_INV, GLV_INV, GL1_INV, GL2_INV, GL2_WB (nvd.h PACKET3_ACQUIRE_MEM_GCR_CNTL_*)


def acquire_mem(gcr: int = MEM_SYNC_GCR) -> list[int]:
    return pkt3(P.PACKET3_ACQUIRE_MEM, 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 10, gcr)


def write_data(addr: int, *values: int) -> list[int]:
    return pkt3(P.PACKET3_WRITE_DATA, 5 << 8, addr, addr >> 32, *values)   # DST_SEL 5: memory


def wait_mem(addr: int, ref: int, mask: int = 0xFFFFFFFF, function: int = 3) -> list[int]:
    return pkt3(P.PACKET3_WAIT_REG_MEM, function | 1 << 4, addr, addr >> 32, ref, mask, 4)


class Queue:
    """One compute queue set up the way gfx_v11_0_kiq_init_register programs it."""

    def __init__(self, gpu, pipe: int, queue: int, doorbell: int):
        self.gpu, self.gc, self.pipe, self.queue, self.doorbell = gpu, gpu.dev.reg("GC"), pipe, queue, doorbell
        gmc = gpu.gmc
        self.ring, self.wb, self.eop = gmc.map_vram(RING_BYTES), gmc.map_vram(4096), gmc.map_vram(4096)
        self.wptr = 0
        gc = self.gc
        with self.selected():
            gc.CP_HQD_EOP_BASE_ADDR.write((self.eop.va >> 8) & 0xFFFFFFFF)
            gc.CP_HQD_EOP_BASE_ADDR_HI.write(self.eop.va >> 40)
            gc.CP_HQD_EOP_CONTROL.write(EOP_SIZE=8)                       # 2048-byte HPD
            gc.CP_HQD_PQ_DOORBELL_CONTROL.write(DOORBELL_OFFSET=doorbell, DOORBELL_EN=1)
            gc.CP_MQD_BASE_ADDR.write(self.eop.va & 0xFFFFFFFC)
            gc.CP_MQD_BASE_ADDR_HI.write(self.eop.va >> 32)
            gc.CP_HQD_PQ_BASE.write((self.ring.va >> 8) & 0xFFFFFFFF)
            gc.CP_HQD_PQ_BASE_HI.write(self.ring.va >> 40)
            gc.CP_HQD_PQ_CONTROL.write(QUEUE_SIZE=(RING_BYTES // 4).bit_length() - 2, RPTR_BLOCK_SIZE=5,
                                       PRIV_STATE=1, KMD_QUEUE=1)
            gc.CP_HQD_PQ_RPTR_REPORT_ADDR.write(self.wb.va & 0xFFFFFFFC)
            gc.CP_HQD_PQ_RPTR_REPORT_ADDR_HI.write((self.wb.va >> 32) & 0xFFFF)
            gc.CP_HQD_PQ_WPTR_POLL_ADDR.write((self.wb.va + 8) & 0xFFFFFFFC)
            gc.CP_HQD_PQ_WPTR_POLL_ADDR_HI.write(((self.wb.va + 8) >> 32) & 0xFFFF)
            gc.CP_MEC_DOORBELL_RANGE_LOWER.write(0)
            gc.CP_MEC_DOORBELL_RANGE_UPPER.write(DOORBELL_RANGE_UPPER)
            gc.CP_HQD_PQ_RPTR.write(0)
            gc.CP_HQD_PQ_WPTR_LO.write(0)
            gc.CP_HQD_PQ_WPTR_HI.write(0)
            gc.CP_HQD_VMID.write(0)
            gc.CP_HQD_ACTIVE.write(1)
            gc.CP_PQ_STATUS.update(DOORBELL_ENABLE=1)

    def selected(self):
        gc, me, pipe, queue = self.gc, 1, self.pipe, self.queue

        class Sel:
            def __enter__(self):
                gc.GRBM_GFX_CNTL.write(MEID=me, PIPEID=pipe, QUEUEID=queue)

            def __exit__(self, *exc):
                gc.GRBM_GFX_CNTL.write(0)
        return Sel()

    def submit(self, words: list[int], ring_doorbell: bool = True) -> None:
        dev = self.gpu.dev
        n = RING_BYTES // 4
        for w in words:
            dev.vram.write(self.ring.vram.addr + 4 * (self.wptr % n), (w & 0xFFFFFFFF).to_bytes(4, "little"))
            self.wptr += 1
        dev.vram.write(self.wb.vram.addr + 8, self.wptr.to_bytes(8, "little"))   # amdgpu's wptr_cpu_addr
        self.gpu.nbio.hdp_flush()    # the ring is VRAM written through BAR0: the CP reads it past the HDP
        if ring_doorbell:
            dev.pci.bar(2).write64(self.doorbell * 4, self.wptr)

    def rptr_report(self) -> int:
        return int.from_bytes(self.gpu.dev.vram.read(self.wb.vram.addr, 4), "little")

    def active(self) -> bool:
        with self.selected():
            return bool(self.gc.CP_HQD_ACTIVE.read() & 1)

    def dequeue(self, soft_reset_if_hung: bool = True) -> None:
        """As amdgpu_amdkfd_gfx_v11 hqd_destroy: request, poll CP_HQD_ACTIVE (it takes a few steps);
        a hung queue never dequeues: then the CP soft reset of gfx_v11_0_soft_reset."""
        with self.selected():
            self.gc.CP_HQD_DEQUEUE_REQUEST.write(1)
            for _ in range(50):
                if not self.gc.CP_HQD_ACTIVE.read() & 1:
                    break
            self.gc.CP_HQD_DEQUEUE_REQUEST.write(0)
            active = self.gc.CP_HQD_ACTIVE.read() & 1
        if active and soft_reset_if_hung:
            cp_soft_reset(self.gpu)
            assert not self.active()


def wait_mec(gpu) -> None:
    """udelay(50) after a MEC unhalt (gfx_v11_0_cp_compute_enable): one simulated us per register read."""
    for _ in range(50):
        gpu.dev.reg("GC").GRBM_STATUS.read()


def cp_soft_reset(gpu) -> None:
    """The CP part of gfx_v11_0_soft_reset, then the MEC started again as cp_resume does."""
    gc = gpu.dev.reg("GC")
    cntl = gc.CP_MEC_RS64_CNTL.read()
    gc.GRBM_SOFT_RESET.update(SOFT_RESET_CP=1, SOFT_RESET_CPC=1)
    gc.GRBM_SOFT_RESET.update(SOFT_RESET_CP=0, SOFT_RESET_CPC=0)
    gc.CP_MEC_RS64_CNTL.write(cntl)
    gpu.gfx.config_mec_rs64()
    gpu.gfx.cp_compute_enable(True)


@pytest.fixture(scope="module")
def gpu(debian_firmware):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
        g = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=HostBus(), vram_size=1 << 30))
        g.sim = g.dev.pci.dev
        yield g
        g.fini()


@pytest.fixture
def sim(gpu):
    """The simulated board; its errors from one test do not leak into the next."""
    gpu.sim.errors.clear()
    return gpu.sim


_queues = iter(range(1, 1000))


@pytest.fixture
def queue(gpu):
    """A fresh queue (pipe 0..3, queue 0..7 round robin) with its own doorbell."""
    n = next(_queues)
    q = Queue(gpu, n % 4, (n // 4) % 8, 2 * (n % 64) + 6)
    yield q
    q.dequeue()


def buf(gpu, size=4096):
    m = gpu.gmc.map_vram(size)
    gpu.dev.vram.write(m.vram.addr, bytes(size))
    return m


def u32(gpu, m, off=0, n=1) -> list[int]:
    return list(np.frombuffer(gpu.dev.vram.read(m.vram.addr + off, 4 * n), np.uint32))


def u64(gpu, m, off=0) -> int:
    return int.from_bytes(gpu.dev.vram.read(m.vram.addr + off, 8), "little")


def busy(gpu) -> bool:
    return bool(gpu.dev.reg("GC").CP_STAT.read())


# ------------------------------------------------------------------------------------------------
# packets


def test_write_data_and_release_mem_fence(gpu, sim, queue):
    out = buf(gpu)
    queue.submit(write_data(out.va, 0x11, 0x22, 0x33) + release_mem(out.va + 64, 0x1_0000_0007)
                 + release_mem(out.va + 128, data_sel=1, data=0xABCD) + pkt3(P.PACKET3_NOP, 0)
                 + [0xC0000000 | 0x3FFF << 16 | P.PACKET3_NOP << 8])        # amdgpu's one-dword NOP
    assert u32(gpu, out, 0, 3) == [0x11, 0x22, 0x33]
    assert u64(gpu, out, 64) == 0x1_0000_0007
    assert u32(gpu, out, 128, 2) == [0xABCD, 0]                      # DATA_SEL 1: the low dword only
    assert queue.rptr_report() == queue.wptr                           # all consumed
    with queue.selected():
        assert gpu.dev.reg("GC").CP_HQD_PQ_RPTR.read() == queue.wptr
    assert not busy(gpu) and not sim.errors, sim.errors


def test_ring_wraps_and_copy_data(gpu, sim, queue):
    out = buf(gpu)
    queue.submit(pkt3(P.PACKET3_NOP, *[0] * (RING_BYTES // 4 - 4)))    # leaves 3 dwords before the end
    for i in range(3):
        queue.submit(write_data(out.va + 4 * i, i + 1))               # the second one wraps around
    src, dst = 5, 5 << 8                                               # immediate data -> memory
    queue.submit(pkt3(P.PACKET3_COPY_DATA, src | dst | 1 << 16, 0xDEAD, 0xBEEF, out.va + 32, (out.va + 32) >> 32))
    scratch = gpu.dev.reg("GC").SCRATCH_REG0
    scratch.write(0x1234)
    queue.submit(pkt3(P.PACKET3_COPY_DATA, 0 | dst, scratch.addr >> 2, 0, out.va + 48, (out.va + 48) >> 32))
    queue.submit(pkt3(P.PACKET3_WRITE_DATA, 0, scratch.addr >> 2, 0, 0x4321))      # DST_SEL 0: a register
    assert u32(gpu, out, 0, 3) == [1, 2, 3]
    assert u32(gpu, out, 32, 2) == [0xDEAD, 0xBEEF]
    assert u32(gpu, out, 48) == [0x1234] and scratch.read() == 0x4321
    assert queue.rptr_report() == queue.wptr % (RING_BYTES // 4)
    assert not sim.errors, sim.errors


def test_timestamps_are_monotonic(gpu, sim, queue):
    out = buf(gpu)
    for i in range(4):
        queue.submit(release_mem(out.va + 8 * i, data_sel=3))
    gpu.dev.reg("GC").GRBM_STATUS.read()                               # the clock moves on
    queue.submit(release_mem(out.va + 32, data_sel=3))
    ts = [u64(gpu, out, 8 * i) for i in range(5)]
    assert all(a < b for a, b in zip(ts, ts[1:])), ts
    assert not sim.errors


def test_wait_reg_mem_blocks_until_memory_matches(gpu, sim, queue):
    flag, out = buf(gpu), buf(gpu)
    queue.submit(wait_mem(flag.va, 1) + write_data(out.va, 0x5A))
    gpu.dev.reg("GC").GRBM_STATUS.read()
    assert u32(gpu, out) == [0] and busy(gpu)                         # blocked, the queue is busy
    assert queue.rptr_report() == 0
    saved = pickle.loads(pickle.dumps(sim))                            # gpusim.persist pickles the device
    assert any(q.waiting for q in saved.blocks["CP"].queues.values())
    gpu.dev.vram.write(flag.vram.addr, (2).to_bytes(4, "little"))    # not what it waits for
    gpu.nbio.hdp_flush()
    gpu.dev.reg("GC").GRBM_STATUS.read()
    assert u32(gpu, out) == [0]
    gpu.dev.vram.write(flag.vram.addr, (1).to_bytes(4, "little"))
    gpu.nbio.hdp_flush()
    gpu.dev.reg("GC").GRBM_STATUS.read()                               # a clock step: the CP polls again
    assert u32(gpu, out) == [0x5A] and not busy(gpu)
    # greater-or-equal on a masked value, satisfied at once
    queue.submit(wait_mem(flag.va, 0x1, mask=0xF, function=5) + write_data(out.va, 0x6B))
    assert u32(gpu, out) == [0x6B]
    assert not sim.errors, sim.errors


def test_wait_reg_mem_write_then_wait_on_registers(gpu, sim, queue):
    # gfx_v11_0_ring_emit_hdp_flush: write the HDP flush request, wait for the done bit
    nbio, out = gpu.dev.reg("NBIF"), buf(gpu)
    req, done = nbio.BIF_BX_PF0_GPU_HDP_FLUSH_REQ.addr >> 2, nbio.BIF_BX_PF0_GPU_HDP_FLUSH_DONE.addr >> 2
    bit = 1 << 4
    queue.submit(pkt3(P.PACKET3_WAIT_REG_MEM, 3 | 1 << 6, req, done, bit, bit, 0x20) + write_data(out.va, 7))
    assert u32(gpu, out) == [7] and nbio.BIF_BX_PF0_GPU_HDP_FLUSH_DONE.read() & bit
    assert not sim.errors, sim.errors


def test_indirect_buffer(gpu, sim, queue):
    out, ib = buf(gpu), buf(gpu)
    words = write_data(out.va, 1, 2) + release_mem(out.va + 16, 99)
    gpu.dev.vram.write(ib.vram.addr, np.array(words, np.uint32).tobytes())
    control = P.INDIRECT_BUFFER_VALID | len(words)                     # VMID 0
    queue.submit(pkt3(P.PACKET3_INDIRECT_BUFFER, ib.va, ib.va >> 32, control) + write_data(out.va + 32, 3))
    assert u32(gpu, out, 0, 2) == [1, 2] and u64(gpu, out, 16) == 99 and u32(gpu, out, 32) == [3]
    assert not sim.errors, sim.errors


def test_release_mem_interrupt_when_enabled(gpu, sim, queue):
    out = buf(gpu)
    gpu.ih.poll()
    gc = gpu.dev.reg("GC")
    reg = gc.reg(f"CP_ME1_PIPE{queue.pipe}_INT_CNTL")
    reg.update(TIME_STAMP_INT_ENABLE=0)
    queue.submit(release_mem(out.va, 1, int_sel=2, ctx=0x77))
    assert u64(gpu, out) == 1
    assert not [iv for iv in gpu.ih.poll() if iv.client_id == IHIDS.SOC21_IH_CLIENTID_GRBM_CP]
    reg.update(TIME_STAMP_INT_ENABLE=1)
    queue.submit(release_mem(out.va, 2, int_sel=2, ctx=0x77))
    eops = [iv for iv in gpu.ih.poll() if iv.client_id == IHIDS.SOC21_IH_CLIENTID_GRBM_CP]
    reg.update(TIME_STAMP_INT_ENABLE=0)
    assert len(eops) == 1
    iv = eops[0]
    assert iv.src_id == IHIDS.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT and iv.src_data[0] == 0x77
    # gfx_v11_0_eop_irq's decoding
    assert ((iv.ring_id & 0x0C) >> 2, iv.ring_id & 0x03, (iv.ring_id & 0x70) >> 4) == (1, queue.pipe, queue.queue)
    assert not sim.errors, sim.errors


# ------------------------------------------------------------------------------------------------
# strictness: hangs, resets, doorbells, a halted MEC


@pytest.mark.parametrize("bad, why", [
    (pkt3(P.PACKET3_DRAW_INDEX_AUTO, 0, 0), "unknown PM4 opcode 0x2d"),
    (pkt3(P.PACKET3_RELEASE_MEM, 0, 0, 0, 0, 0, 0), "RELEASE_MEM with 6 body dwords"),
    ([0x00001234], "type-0 packet"),
])
def test_bad_packet_hangs_the_queue_until_a_cp_soft_reset(gpu, sim, queue, bad, why):
    out = buf(gpu)
    queue.submit(write_data(out.va, 1))
    at = queue.wptr
    queue.submit(bad + write_data(out.va + 4, 2))
    assert u32(gpu, out, 0, 2) == [1, 0]                               # stopped at the bad packet
    assert queue.rptr_report() == at
    assert busy(gpu) and gpu.dev.reg("GC").GRBM_STATUS.decode()["GUI_ACTIVE"]
    assert any(why in e.message and "hung" in e.message for e in sim.errors), sim.errors
    queue.submit(write_data(out.va + 8, 3))                            # a hung queue stays hung
    assert u32(gpu, out, 8) == [0] and busy(gpu)
    queue.dequeue(soft_reset_if_hung=False)                            # a hung queue does not dequeue
    assert queue.active() and busy(gpu)
    assert any("never served" in e.message for e in sim.errors), sim.errors
    cp_soft_reset(gpu)                                                 # the reset upstream does
    assert not busy(gpu) and not queue.active()
    queue.__init__(gpu, queue.pipe, queue.queue, queue.doorbell)       # set up again: runs
    queue.submit(write_data(out.va + 12, 4))
    assert u32(gpu, out, 12) == [4]


def test_fault_on_packet_address_takes_the_default_page_unless_the_cp_halts(gpu, sim, queue):
    """gfxhub_v3_0_set_fault_enable_default: faults go to the default page and "NO halt CP when page fault"
    (CP_DEBUG.CPG_UTCL1_ERROR_HALT_DISABLE): the write lands in the driver's dummy page, the fault is latched
    and posted, the queue carries on. With the halt not disabled (CP_DEBUG's power-on value) it hangs."""
    gpu.ih.poll()
    out = buf(gpu)
    unmapped = (1 << 44) + (900 << 20)                                  # in the VRAM window, never mapped
    dummy = gpu.gmc.dummy_page.view
    dummy[:8] = bytes(8)
    queue.submit(write_data(unmapped + 4, 0xC0FFEE) + write_data(out.va, 1))
    assert not busy(gpu) and u32(gpu, out) == [1]
    assert int.from_bytes(dummy[4:8], "little") == 0xC0FFEE
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address == unmapped and fault.write and fault.client == "CPC"
    assert any(iv.client_id == IHIDS.SOC21_IH_CLIENTID_GFX for iv in gpu.ih.poll())
    gc = gpu.dev.reg("GC")
    gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=0)
    try:
        queue.submit(write_data(unmapped, 1) + write_data(out.va, 2))
        assert busy(gpu) and u32(gpu, out) == [1]
        assert gpu.gmc.decode_fault("GC").address == unmapped
        assert any("WRITE_DATA" in e.message for e in sim.errors)
    finally:
        gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=1)


def test_doorbell_outside_the_mec_range_does_not_reach_it(gpu, sim, queue):
    out = buf(gpu)
    gc = gpu.dev.reg("GC")
    gc.CP_MEC_DOORBELL_RANGE_UPPER.write(queue.doorbell * 4 - 4)
    try:
        queue.submit(write_data(out.va, 1))
        assert u32(gpu, out) == [0]
        assert any("CP_MEC_DOORBELL_RANGE" in e.message for e in sim.errors)
    finally:
        gc.CP_MEC_DOORBELL_RANGE_UPPER.write(DOORBELL_RANGE_UPPER)
    queue.submit([])                                                   # rung again, in range now
    assert u32(gpu, out) == [1]


def test_queue_does_not_run_while_the_mec_is_halted(gpu, sim, queue):
    out = buf(gpu)
    gc = gpu.dev.reg("GC")
    cntl = gc.CP_MEC_RS64_CNTL.read()
    gc.CP_MEC_RS64_CNTL.update(MEC_HALT=1)
    try:
        queue.submit(write_data(out.va, 1))
        for _ in range(3):
            gc.GRBM_STATUS.read()
        assert u32(gpu, out) == [0] and queue.rptr_report() == 0
    finally:
        gc.CP_MEC_RS64_CNTL.write(cntl)
    wait_mec(gpu)                                                      # the MEC runs again: the queue goes on
    assert u32(gpu, out) == [1]
    assert not sim.errors, sim.errors


def test_pipe_halt_and_reset_keep_the_hqd_only_a_cp_soft_reset_clears_it(gpu, sim, queue):
    """Issue 11 point 9: HQD state survives a pipe halt/reset (CP_MEC_RS64_CNTL); a hung queue stays hung
    through it; the GRBM soft reset of the CP (gfx_v11_0_soft_reset) clears it."""
    out = buf(gpu)
    gc = gpu.dev.reg("GC")
    cntl = gc.CP_MEC_RS64_CNTL.read()
    gc.CP_MEC_RS64_CNTL.update(MEC_HALT=1, **{f"MEC_PIPE{queue.pipe}_RESET": 1})
    gc.CP_MEC_RS64_CNTL.write(cntl)
    wait_mec(gpu)
    assert queue.active()                                              # still active: runs on
    queue.submit(write_data(out.va, 5))
    assert u32(gpu, out) == [5]
    queue.submit(pkt3(P.PACKET3_DRAW_INDEX_AUTO, 0, 0))
    assert busy(gpu) and queue.active()
    gc.CP_MEC_RS64_CNTL.update(MEC_HALT=1, **{f"MEC_PIPE{queue.pipe}_RESET": 1})
    gc.CP_MEC_RS64_CNTL.write(cntl)
    assert busy(gpu) and queue.active()                                # still hung
    cp_soft_reset(gpu)
    assert not busy(gpu) and not queue.active()


def test_dequeue_takes_time_and_saves_the_hqd_to_the_mqd(gpu, sim, queue):
    """CP_HQD_ACTIVE reads 1 for a few steps after CP_HQD_DEQUEUE_REQUEST; then the HQD registers are
    in the MQD at CP_MQD_BASE_ADDR (v11_compute_mqd layout, generated from v11_structs.h)."""
    from gpusim.cp import COMPUTE_MQD
    out = buf(gpu)
    mqd = buf(gpu)
    gc = gpu.dev.reg("GC")
    queue.submit(write_data(out.va, 1) + write_data(out.va, 2))
    with queue.selected():
        gc.CP_MQD_BASE_ADDR.write(mqd.va & 0xFFFFFFFC)
        gc.CP_MQD_BASE_ADDR_HI.write(mqd.va >> 32)
        gc.CP_HQD_DEQUEUE_REQUEST.write(1)
        assert gc.CP_HQD_ACTIVE.read() & 1                              # not at once
        for _ in range(20):
            if not gc.CP_HQD_ACTIVE.read() & 1:
                break
        assert not gc.CP_HQD_ACTIVE.read() & 1
        gc.CP_HQD_DEQUEUE_REQUEST.write(0)
    image = gpu.dev.vram.read(mqd.vram.addr, COMPUTE_MQD.size)
    m = COMPUTE_MQD.unpack_from(image)
    assert m.cp_hqd_pq_base_lo == (queue.ring.va >> 8) & 0xFFFFFFFF
    assert m.cp_hqd_eop_base_addr_lo == (queue.eop.va >> 8) & 0xFFFFFFFF
    assert m.cp_mqd_base_addr_lo == mqd.va & 0xFFFFFFFC
    assert m.cp_hqd_pq_rptr == queue.wptr and m.cp_hqd_active == 0
    assert m.header == 0                                               # the driver's part is not the CP's


def test_dequeue_with_an_unmapped_mqd_faults(gpu, sim, queue):
    """The MQD save goes through the page tables as a CPC access: with the driver's CP_DEBUG (no halt on
    a UTCL1 error) it lands in the default page and the fault is latched; with the halt it never completes."""
    gc = gpu.dev.reg("GC")
    gpu.ih.poll()
    with queue.selected():
        gc.CP_MQD_BASE_ADDR.write(0)
        gc.CP_MQD_BASE_ADDR_HI.write(0x7F00)                           # never mapped
    queue.dequeue(soft_reset_if_hung=False)
    assert not queue.active()
    fault = gpu.gmc.decode_fault("GC")                                 # read and cleared
    assert fault is not None and fault.address >> 32 == 0x7F00 and fault.write
    gpu.ih.poll()
    queue.__init__(gpu, queue.pipe, queue.queue, queue.doorbell)
    with queue.selected():
        gc.CP_MQD_BASE_ADDR.write(0)
        gc.CP_MQD_BASE_ADDR_HI.write(0x7F00)
    gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=0)
    try:
        queue.dequeue(soft_reset_if_hung=False)
        assert queue.active()
        assert any("MQD save" in e.message for e in sim.errors), sim.errors
    finally:
        gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=1)
    assert gpu.gmc.decode_fault("GC") is not None
    gpu.ih.poll()
    cp_soft_reset(gpu)
    assert not queue.active()


# ------------------------------------------------------------------------------------------------
# dispatch: SET_SH_REG + DISPATCH_DIRECT, as a driver sets up a clang-built kernel

INITIATOR = 1 | 1 << 2 | 1 << 15          # COMPUTE_SHADER_EN, FORCE_START_AT_000, CS_W32_EN


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """{name: Kernel} of clang-built corpus kernels."""
    if not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("clang-15 and ld.lld-15 are needed to build the kernels")
    out, found = tmp_path_factory.mktemp("cp_kernels"), {}
    for name in ("add_f32", "private_array", "grid3d", "local_reverse", "generic_lds_private"):
        obj, so = out / f"{name}.o", out / f"{name}.so"
        subprocess.run(["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100",
                        "-nogpulib", "-O2", "-c", str(KERNELS / f"{name}.cl"), "-o", str(obj)], check=True)
        subprocess.run(["ld.lld-15", "-shared", str(obj), "-o", str(so)], check=True)
        found[name] = CodeObject.load(so).kernel(name)
    return found


@pytest.fixture(scope="module")
def add_f32(kernels):
    return kernels["add_f32"]


def sh(gpu, name: str, *values: int) -> list[int]:
    reg = gpu.dev.reg("GC").reg(name).addr >> 2
    return pkt3(P.PACKET3_SET_SH_REG, reg - P.PACKET3_SET_SH_REG_START, *values)


def upload(gpu, data: bytes):
    m = gpu.gmc.map_vram(max(len(data), 1))
    gpu.dev.vram.write(m.vram.addr, data)
    return m


def kernel_packets(gpu, kern, args, groups, block, swap_pointers=False, scratch=True, lds=True,
                   initiator=INITIATOR, scratch_va=None, tmpring=None) -> list[int]:
    """What a driver emits for a clang kernel: code and kernargs in memory, the caches invalidated
    (gfx_v11_0_emit_mem_sync's ACQUIRE_MEM), the user SGPRs its descriptor enables (AMDGPUUsage order), its
    RSRC registers, the workgroup size and the dispatch, then GL2 written back as the fence that ends
    amdgpu's IB does (a RELEASE_MEM with no data here), so the host reads the results through BAR0."""
    kd = kern.descriptor
    code = upload(gpu, kern.code)
    kernargs = upload(gpu, pack_kernargs(kern, args).ljust(kd.kernarg_size + 256, b"\0"))
    grid = tuple(g * b for g, b in zip(groups, block))
    packet = upload(gpu, dispatch_packet(grid, block, kernargs.va))
    values = {"dispatch_ptr": packet.va, "kernarg_segment_ptr": kernargs.va}
    if swap_pointers:
        values = {"dispatch_ptr": kernargs.va, "kernarg_segment_ptr": packet.va}
    user = [0] * 16
    for name, at, count in kd.user_sgpr_layout():
        v = values.get(name, 0)
        user[at:at + count] = [(v >> (32 * j)) & 0xFFFFFFFF for j in range(count)]
    lds_granules = -(-kd.group_segment_fixed_size // 512) if lds else 0     # RSRC2.LDS_SIZE
    rsrc2 = kd.compute_pgm_rsrc2 | lds_granules << 15
    # private memory: COMPUTE_TMPRING_SIZE.WAVESIZE in 256-byte units per (wave32) wave, 32 slots of it in a
    # scratch buffer at COMPUTE_DISPATCH_SCRATCH_BASE (address >> 8)
    wavesize = -(-kd.private_segment_fixed_size * 32 // 256) if scratch else 0
    if scratch_va is None and wavesize:
        scratch_va = buf(gpu, max(32 * wavesize * 256, 4096)).va
    return (acquire_mem()
            + sh(gpu, "COMPUTE_PGM_LO", code.va >> 8, code.va >> 40)
            + sh(gpu, "COMPUTE_TMPRING_SIZE", 32 | wavesize << 12 if tmpring is None else tmpring)
            + (sh(gpu, "COMPUTE_DISPATCH_SCRATCH_BASE_LO", scratch_va >> 8 & 0xFFFFFFFF, scratch_va >> 40)
               if scratch_va is not None else [])
            + sh(gpu, "COMPUTE_PGM_RSRC1", kd.compute_pgm_rsrc1, rsrc2)
            + sh(gpu, "COMPUTE_PGM_RSRC3", kd.compute_pgm_rsrc3)
            + sh(gpu, "COMPUTE_NUM_THREAD_X", *block)
            + sh(gpu, "COMPUTE_USER_DATA_0", *user)
            + pkt3(P.PACKET3_DISPATCH_DIRECT, *groups, initiator)
            + release_mem(0, data_sel=0))


def test_clang_kernel_dispatch_matches_numpy(gpu, sim, queue, add_f32):
    n = 1000
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    ma, mb, mo, ts = upload(gpu, a.tobytes()), upload(gpu, b.tobytes()), buf(gpu, 4 * n), buf(gpu)
    words = (release_mem(ts.va, data_sel=3)
             + kernel_packets(gpu, add_f32, [mo.va, ma.va, mb.va, np.uint32(n)], (-(-n // 64), 1, 1), (64, 1, 1))
             + release_mem(ts.va + 8, data_sel=3) + release_mem(ts.va + 16, 5))
    queue.submit(words)
    out = np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.float32)
    np.testing.assert_array_equal(out, a + b)
    assert u64(gpu, ts, 16) == 5 and not busy(gpu)
    start, end = u64(gpu, ts, 0), u64(gpu, ts, 8)
    assert end > start                                                 # the kernel took GPU time
    assert not sim.errors, sim.errors


def test_user_data_the_kernel_does_not_expect_reads_garbage(gpu, sim, queue, add_f32):
    """The hardware loads COMPUTE_USER_DATA as written: with the kernarg and dispatch pointers swapped the
    kernel reads its arguments from the dispatch packet (n = its private segment size, 0) and computes
    nothing; the same packets with the pointers right compute the sum."""
    ones, mo = upload(gpu, np.ones(16, np.float32).tobytes()), buf(gpu)
    for swap, want in ((True, 0.0), (False, 2.0)):
        queue.submit(kernel_packets(gpu, add_f32, [mo.va, ones.va, ones.va, np.uint32(16)], (1, 1, 1), (16, 1, 1),
                                    swap_pointers=swap))
        assert (np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 64), np.float32) == want).all()
    assert not busy(gpu) and not sim.errors, sim.errors


def test_kernel_fault_takes_the_default_page_and_the_fence_comes(gpu, sim, queue, add_f32):
    """set_fault_enable_default: GL1C_UTCL0_CNTL1.RESP_FAULT_MODE 2 ("SUCCESS"): the faulting store goes to
    the default page, the kernel ends and its fence comes; only the latch and the IV tell."""
    gpu.ih.poll()
    n = 64
    ma, fence = upload(gpu, np.ones(n, np.float32).tobytes()), buf(gpu)
    unmapped = (1 << 44) + (800 << 20)
    dummy = gpu.gmc.dummy_page.view
    dummy[:4 * n] = bytes(4 * n)
    queue.submit(kernel_packets(gpu, add_f32, [unmapped, ma.va, ma.va, np.uint32(n)], (1, 1, 1), (64, 1, 1))
                 + release_mem(fence.va, 1))
    assert u64(gpu, fence) == 1 and not busy(gpu)
    assert np.array_equal(np.frombuffer(dummy[:4 * n], np.float32), np.full(n, 2, np.float32))
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address == unmapped and fault.write and fault.vmid == 0
    ivs = [iv for iv in gpu.ih.poll() if iv.client_id == IHIDS.SOC21_IH_CLIENTID_GFX]
    assert ivs and ivs[0].src_data[0] == (unmapped >> 12) & 0xFFFFFFFF


def test_kernel_fault_hangs_the_queue_without_the_success_response(gpu, sim, queue, add_f32):
    """RESP_FAULT_MODE other than 2 (its power-on 0): the wave gets the error and stops (assumption)."""
    gpu.ih.poll()
    n = 64
    ma, fence = upload(gpu, np.ones(n, np.float32).tobytes()), buf(gpu)
    unmapped = (1 << 44) + (800 << 20)
    gc = gpu.dev.reg("GC")
    gc.GL1C_UTCL0_CNTL1.update(RESP_FAULT_MODE=0)
    try:
        queue.submit(kernel_packets(gpu, add_f32, [unmapped, ma.va, ma.va, np.uint32(n)], (1, 1, 1), (64, 1, 1))
                     + release_mem(fence.va, 1))
    finally:
        gc.GL1C_UTCL0_CNTL1.update(RESP_FAULT_MODE=2)
    assert u64(gpu, fence) == 0 and busy(gpu)                          # the fence never comes
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address == unmapped and fault.write and fault.vmid == 0
    ivs = [iv for iv in gpu.ih.poll() if iv.client_id == IHIDS.SOC21_IH_CLIENTID_GFX]
    assert ivs and ivs[0].src_data[0] == (unmapped >> 12) & 0xFFFFFFFF
    assert any("faulted" in e.message and "hung" in e.message for e in sim.errors), sim.errors


def test_kernel_that_never_ends_keeps_the_queue_busy(gpu, sim, queue):
    """Register-level: no descriptor at all, just COMPUTE_PGM_* and a loop (s_branch -1)."""
    code, fence = upload(gpu, (0xBFA0FFFF).to_bytes(4, "little") + (0xBFB00000).to_bytes(4, "little")), buf(gpu)
    cp = sim.blocks["CP"]
    cp.kernel_max_steps = 2000
    try:
        queue.submit(sh(gpu, "COMPUTE_PGM_LO", code.va >> 8, code.va >> 40) + sh(gpu, "COMPUTE_PGM_RSRC1", 0, 0)
                     + sh(gpu, "COMPUTE_NUM_THREAD_X", 32, 1, 1) + pkt3(P.PACKET3_DISPATCH_DIRECT, 1, 1, 1, INITIATOR)
                     + release_mem(fence.va, 1))
    finally:
        cp.kernel_max_steps = 500_000
    for _ in range(5):
        assert busy(gpu) and u64(gpu, fence) == 0
    assert any("still running" in e.message for e in sim.errors), sim.errors
    queue.dequeue()
    assert not busy(gpu)


def test_async_clock_polls_a_blocked_wait(gpu, sim, queue):
    import time
    flag, out = buf(gpu), buf(gpu)
    sim.start_async()
    try:
        queue.submit(wait_mem(flag.va, 1) + write_data(out.va, 9))
        time.sleep(0.01)
        assert u32(gpu, out) == [0]
        gpu.dev.vram.write(flag.vram.addr, (1).to_bytes(4, "little"))    # no register access from here on
        gpu.nbio.hdp_flush()
        deadline = time.monotonic() + 5
        while u32(gpu, out) != [9] and time.monotonic() < deadline:
            time.sleep(0.001)
        assert u32(gpu, out) == [9]
    finally:
        sim.stop_async()
    assert not sim.errors, sim.errors


def test_private_memory_from_tmpring_size(gpu, sim, queue, kernels):
    kern = kernels["private_array"]
    assert kern.descriptor.rsrc2["enable_private_segment"]
    n = 96
    a = np.random.default_rng(3).integers(-1000, 1000, n).astype(np.int32)
    ma, mo = upload(gpu, a.tobytes()), buf(gpu, 4 * n)
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (3, 1, 1), (32, 1, 1)))
    i = np.arange(n)
    t = a[(i[:, None] + np.arange(64)) % n] * np.arange(64)
    j = a.view(np.uint32) & 63
    out = np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.int32)
    assert np.array_equal(out, t[i, j] + t[i, (j * 7) & 63])
    assert not sim.errors, sim.errors
    # SCRATCH_EN without a wave size: the kernel's private accesses are outside its allocation (the
    # executor refuses them: the queue hangs)
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (3, 1, 1), (32, 1, 1), scratch=False))
    assert busy(gpu) and any("private" in e.message and "hung" in e.message for e in sim.errors), sim.errors


def test_private_memory_lives_in_the_scratch_buffer(gpu, sim, queue, kernels):
    """gfx11 scratch: each wave's private memory is a slot of COMPUTE_TMPRING_SIZE.WAVESIZE x 256 bytes in the
    buffer at COMPUTE_DISPATCH_SCRATCH_BASE, reached through the page tables (gpusim.dispatch; slot order and
    lane interleave: rdna3.wave_memory.ScratchSpace). A base never set up, or a WAVESIZE larger than the
    buffer was sized for (the mutation run's inverted TMPRING_SIZE), sends private accesses to memory that
    is not mapped: the fault is latched (the driver's fault setting answers them with the default page)."""
    kern = kernels["private_array"]
    n = 96
    a = np.random.default_rng(4).integers(-1000, 1000, n).astype(np.int32)
    ma, mo = upload(gpu, a.tobytes()), buf(gpu, 4 * n)
    wavesize = -(-kern.descriptor.private_segment_fixed_size * 32 // 256)
    slot = wavesize * 256
    ring = buf(gpu, 32 * slot)
    gpu.gmc.decode_fault("GC")
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (3, 1, 1), (32, 1, 1), scratch_va=ring.va))
    i = np.arange(n)
    t = a[(i[:, None] + np.arange(64)) % n] * np.arange(64)
    j = a.view(np.uint32) & 63
    out = np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.int32)
    assert np.array_equal(out, t[i, j] + t[i, (j * 7) & 63]) and gpu.gmc.decode_fault("GC") is None
    # the array t sits in the slots: t[k] of work-item i (wave i // 32, lane i % 32) is private dword
    # 1 + k (clang's frame: scratch_store_b128 at offset 4 + 16 m) at slot + (1 + k) * 128 + lane * 4
    held = np.frombuffer(gpu.dev.vram.read(ring.vram.addr, 3 * slot), np.int32)
    k = np.arange(64)
    for item in (0, 33, 95):
        w, lane = divmod(item, 32)
        assert np.array_equal(held[(w * slot + (1 + k) * 128 + lane * 4) // 4], t[item])
    # no scratch buffer set up (base 0): the private accesses fault
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (3, 1, 1), (32, 1, 1), scratch_va=0))
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address < 3 * slot
    # WAVES and WAVESIZE inverted: wave 1's slot starts ~8 MiB past the 32-slot buffer
    flipped = ~(32 | wavesize << 12) & 0x07FFFFFF
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (3, 1, 1), (32, 1, 1), scratch_va=ring.va,
                                tmpring=flipped))
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address >= ring.va + 32 * slot
    assert not busy(gpu)
    # no slot at all (WAVES 0): the dispatch cannot start a wave; the queue hangs naming it (assumption)
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (3, 1, 1), (32, 1, 1), scratch_va=ring.va,
                                tmpring=wavesize << 12))
    assert busy(gpu) and any("WAVES 0" in e.message for e in sim.errors), sim.errors


def test_write_pointer_polling(gpu, sim, queue):
    out = buf(gpu)
    gc = gpu.dev.reg("GC")
    queue.submit(write_data(out.va, 1), ring_doorbell=False)
    gc.GRBM_STATUS.read()
    assert u32(gpu, out) == [0]                                        # no doorbell, no polling: nothing
    gc.CP_PQ_WPTR_POLL_CNTL.update(EN=1)
    try:
        gc.GRBM_STATUS.read()
        gc.GRBM_STATUS.read()
        assert u32(gpu, out) == [1]                                    # the CP read the write pointer
        queue.submit(write_data(out.va + 4, 2), ring_doorbell=False)
        for _ in range(3):
            gc.GRBM_STATUS.read()
        assert u32(gpu, out, 4) == [2]
    finally:
        gc.CP_PQ_WPTR_POLL_CNTL.update(EN=0)
    assert not sim.errors, sim.errors


def test_3d_dispatch_workgroup_and_work_item_ids(gpu, sim, queue, kernels):
    nx, ny, nz = 10, 5, 3
    block, groups = (4, 2, 2), (3, 3, 2)
    mo = buf(gpu, 8 * nx * ny * nz)
    queue.submit(kernel_packets(gpu, kernels["grid3d"], [mo.va, np.uint32(nx), np.uint32(ny), np.uint32(nz)],
                                groups, block))
    o = np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 8 * nx * ny * nz), np.uint32).reshape(nz, ny, nx, 2)
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    assert np.array_equal(o[..., 0], (x % 4) | (y % 2) << 8 | (z % 2) << 16)
    assert np.array_equal(o[..., 1], (x // 4) | (y // 2) << 8 | (z // 2) << 16)
    assert not sim.errors, sim.errors


def test_dispatch_initiator_bits(gpu, sim, queue, add_f32):
    n = 128
    ones, mo = upload(gpu, np.ones(n, np.float32).tobytes()), buf(gpu, 4 * n)
    args = [mo.va, ones.va, ones.va, np.uint32(n)]

    def out():
        return np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.float32)
    # COMPUTE_SHADER_EN clear: nothing is dispatched
    queue.submit(kernel_packets(gpu, add_f32, args, (2, 1, 1), (64, 1, 1), initiator=INITIATOR & ~1))
    assert not out().any() and not busy(gpu)
    # USE_THREAD_DIMENSIONS: the dimensions count work-items; the last workgroup is partial
    queue.submit(kernel_packets(gpu, add_f32, args, (100, 1, 1), (64, 1, 1), initiator=INITIATOR | 1 << 5))
    assert (out()[:100] == 2).all() and not out()[100:].any()
    assert not sim.errors, sim.errors
    # CS_W32_EN clear asks for wave64, which the executor does not model: the queue hangs, saying so
    queue.submit(kernel_packets(gpu, add_f32, args, (2, 1, 1), (64, 1, 1), initiator=INITIATOR & ~(1 << 15)))
    assert busy(gpu) and any("wave64" in e.message for e in sim.errors)


def test_lds_from_rsrc2(gpu, sim, queue, kernels):
    kern = kernels["local_reverse"]
    assert kern.descriptor.group_segment_fixed_size == 1024
    n = 512
    a = np.arange(n, dtype=np.float32)
    ma, mo = upload(gpu, a.tobytes()), buf(gpu, 4 * n)
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (2, 1, 1), (256, 1, 1)))
    out = np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.float32)
    assert np.array_equal(out, a.reshape(2, 256)[:, ::-1].ravel())
    assert not sim.errors, sim.errors
    # the descriptor's group segment size means nothing to the hardware: without RSRC2.LDS_SIZE the
    # kernel's LDS accesses are outside its allocation (hardware drops them silently and the kernel computes
    # garbage; the executor refuses them, so the simulated queue hangs, naming the access)
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (2, 1, 1), (256, 1, 1), lds=False))
    assert busy(gpu) and any("LDS" in e.message and "hung" in e.message for e in sim.errors), sim.errors


# ------------------------------------------------------------------------------------------------
# caches (gpusim.gl2): ACQUIRE_MEM and RELEASE_MEM's GCR actions


def _add(gpu, kern, mo, ma, mb, n, acquire=True, release=True):
    """add_f32's packets with the ACQUIRE_MEM before and the write-back RELEASE_MEM after made optional."""
    words = kernel_packets(gpu, kern, [mo.va, ma.va, mb.va, np.uint32(n)], (-(-n // 64), 1, 1), (64, 1, 1))
    if not acquire:
        words = words[8:]                        # the leading ACQUIRE_MEM is 8 dwords
    if not release:
        words = words[:-8]                       # the trailing RELEASE_MEM is 8
    return words


def test_kernel_results_reach_the_host_only_after_a_gl2_write_back(gpu, sim, queue, add_f32):
    n = 256
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    ma, mb, mo = upload(gpu, a.tobytes()), upload(gpu, b.tobytes()), buf(gpu, 4 * n)
    queue.submit(_add(gpu, add_f32, mo, ma, mb, n, release=False))
    read = lambda: np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.float32)  # noqa: E731
    assert not read().any() and sim.blocks["GL2"].dirty_bytes == 4 * n   # in GL2, not in VRAM
    queue.submit(release_mem(0, data_sel=0) [:1] + [0x14 | 5 << 8 | P.PACKET3_RELEASE_MEM_GCR_GL2_INV]
                 + release_mem(0, data_sel=0)[2:])                      # invalidate only: dirty bytes stay
    assert not read().any()
    queue.submit(release_mem(0, data_sel=0))                            # GL2_WB (gfx_v11_0_ring_emit_fence)
    assert np.array_equal(read(), a + b) and not sim.errors


def test_a_release_mem_with_the_wrong_event_or_index_never_signals(gpu, sim, queue):
    out = buf(gpu)
    bad = release_mem(out.va, 7)
    bad[1] = (bad[1] & ~0xF00) | 4 << 8                                  # EVENT_INDEX 4 (partial flushes)
    queue.submit(bad)
    assert u32(gpu, out) == [0] and busy(gpu) and "EVENT_INDEX 4" in sim.errors[-1].message
    queue.dequeue()
    bad = release_mem(out.va, 7)
    bad[1] = (bad[1] & ~0x3F) | 0x07                                     # CS_PARTIAL_FLUSH: not a TS event
    q2 = Queue(gpu, 3, 7, 2 * 63 + 6)
    q2.submit(bad)
    assert u32(gpu, out) == [0] and "event 0x7" in sim.errors[-1].message
    q2.dequeue()


def test_without_acquire_mem_a_dispatch_reads_old_kernargs(gpu, sim, queue, add_f32):
    from amdrv.ip.gmc import VRAM_VA
    n = 64
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2, np.float32)
    ma, mb, mo, mo2 = upload(gpu, a.tobytes()), upload(gpu, b.tobytes()), buf(gpu, 4 * n), buf(gpu, 4 * n)
    words = _add(gpu, add_f32, mo, ma, mb, n)
    queue.submit(words)
    assert np.array_equal(np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.float32), a + b)
    # the kernarg segment's first argument (out) rewritten to mo2 through BAR0 and flushed past the HDP
    user = sh(gpu, "COMPUTE_USER_DATA_0", 0)[:2]
    i = next(k for k in range(len(words)) if words[k + 1] == user[1] and words[k] >> 8 & 0xFF == user[0] >> 8 & 0xFF)
    at = dict((name, at) for name, at, _ in add_f32.descriptor.user_sgpr_layout())["kernarg_segment_ptr"]
    kernargs = words[i + 2 + at] | words[i + 3 + at] << 32
    gpu.dev.vram.write(kernargs - VRAM_VA, struct.pack("<Q", mo2.va))
    gpu.nbio.hdp_flush()
    no_acquire = words[8:]
    queue.submit(no_acquire)           # the K$ still holds the old one (the fence's RELEASE_MEM has no GLK_INV)
    assert not np.frombuffer(gpu.dev.vram.read(mo2.vram.addr, 4 * n), np.float32).any() and not sim.errors
    queue.submit(acquire_mem(MEM_SYNC_GCR & ~(1 << 7)) + no_acquire)    # all but GLK_INV: K$ still old
    assert not np.frombuffer(gpu.dev.vram.read(mo2.vram.addr, 4 * n), np.float32).any()
    queue.submit(words)                                                  # gfx_v11_0_emit_mem_sync first
    assert np.array_equal(np.frombuffer(gpu.dev.vram.read(mo2.vram.addr, 4 * n), np.float32), a + b)
    assert not sim.errors


# ------------------------------------------------------------------------------------------------
# flat apertures from the dispatching VMID's SH_MEM_BASES (issue 11 point 4)

def generic_lds_private(gpu, queue, kern, n=64):
    """Runs generic_lds_private (flat loads through both the LDS and the private aperture); returns
    (what it wrote, what it should have)."""
    a = np.random.default_rng(5).integers(-1000, 1000, n).astype(np.int32)
    ma, mo = upload(gpu, a.tobytes()), buf(gpu, 4 * n)
    queue.submit(kernel_packets(gpu, kern, [mo.va, ma.va, np.uint32(n)], (n // 64, 1, 1), (64, 1, 1)))
    i = np.arange(n)
    want = np.where(a & 1, a[(i // 64) * 64 + (i % 64 + 1) % 64] * 3, a[(i + (a & 15)) % n] + (a & 15))
    return np.frombuffer(gpu.dev.vram.read(mo.vram.addr, 4 * n), np.int32), want


def set_sh_mem_bases(gpu, vmid: int, **fields) -> int:
    gc = gpu.dev.reg("GC")
    gc.GRBM_GFX_CNTL.write(VMID=vmid)
    try:
        old = gc.SH_MEM_BASES.read()
        gc.SH_MEM_BASES.write(gc.SH_MEM_BASES.encode(**fields))
    finally:
        gc.GRBM_GFX_CNTL.write(0)
    return old


def test_sh_mem_bases_are_banked_per_vmid_and_the_driver_programs_vmid_0(gpu, sim):
    gc = gpu.dev.reg("GC")
    seen = {}
    for vmid in (0, 1, 8):
        gc.GRBM_GFX_CNTL.write(VMID=vmid)
        seen[vmid] = gc.SH_MEM_BASES.decode()
    gc.GRBM_GFX_CNTL.write(0)
    # gmc_v11_0: shared aperture 0x2000..., private 0x1000... (>> 48); VMIDs 8..15: LDS_APP_BASE/SCRATCH_APP_BASE
    assert (seen[0]["SHARED_BASE"], seen[0]["PRIVATE_BASE"]) == (0x2000, 0x1000) == \
        (seen[1]["SHARED_BASE"], seen[1]["PRIVATE_BASE"])
    assert (seen[8]["SHARED_BASE"], seen[8]["PRIVATE_BASE"]) == (1, 2)
    assert sim.blocks["CP"].apertures(0) == (0x2000 << 48, 0x1000 << 48)


def test_flat_lds_and_private_follow_the_vmids_sh_mem_bases(gpu, sim, queue, kernels):
    kern = kernels["generic_lds_private"]
    got, want = generic_lds_private(gpu, queue, kern)
    assert np.array_equal(got, want) and not sim.errors, sim.errors
    old = set_sh_mem_bases(gpu, 0, SHARED_BASE=0x4000, PRIVATE_BASE=0x5000)   # elsewhere: the kernel reads
    try:                                                                      # them, so it still works
        got, want = generic_lds_private(gpu, queue, kern)
        assert np.array_equal(got, want)
        set_sh_mem_bases(gpu, 0, SHARED_BASE=0, PRIVATE_BASE=0)              # never programmed: one aperture
        got, want = generic_lds_private(gpu, queue, kern)                     # holds both, private reads
        assert not np.array_equal(got, want)                                  # land in LDS
    finally:
        gc = gpu.dev.reg("GC")
        gc.GRBM_GFX_CNTL.write(VMID=0)
        gc.SH_MEM_BASES.write(old)
        gc.GRBM_GFX_CNTL.write(0)



def test_a_driver_that_leaves_vmid_0_sh_mem_bases_unprogrammed_gets_wrong_data(sim_bus, debian_firmware, kernels,
                                                                               monkeypatch):
    """Upstream gfx_v11_0_constants_init skips SH_MEM_BASES for VMID 0 (amdgpu runs no shaders there);
    this driver dispatches in VMID 0, so doing as upstream does breaks generic pointers."""
    from amdrv.ip.gfx import GFX
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    real = GFX.constants_init

    def upstream_vmid0(self):
        real(self)
        self.grbm_select(vmid=0)
        self.gc.SH_MEM_BASES.write(0)          # as if never written (its reset value)
        self.grbm_select()
    monkeypatch.setattr(GFX, "constants_init", upstream_vmid0)
    g = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, vram_size=512 << 20))
    try:
        got, want = generic_lds_private(g, Queue(g, 0, 0, 6), kernels["generic_lds_private"])
        assert not np.array_equal(got, want)
    finally:
        g.dev.close()


def test_release_mem_writes_an_eop_record_at_eop_base_shifted_by_8(gpu, sim, queue):
    from gpusim.cp import EOP_RECORD_BYTES
    out = buf(gpu)
    gpu.dev.vram.write(queue.eop.vram.addr, bytes(4096))
    queue.submit(release_mem(out.va, 7) + release_mem(out.va + 8, 8))
    assert u64(gpu, out) == 7 and u64(gpu, out, 8) == 8
    rec = u32(gpu, queue.eop, 0, 2 * EOP_RECORD_BYTES // 4)
    assert rec[2] == out.va & 0xFFFFFFFF and rec[EOP_RECORD_BYTES // 4 + 2] == (out.va + 8) & 0xFFFFFFFF
    # the base unshifted (the address, not the address >> 8): the records go to an unmapped address
    gpu.ih.poll()
    with queue.selected():
        gpu.dev.reg("GC").CP_HQD_EOP_BASE_ADDR.write(queue.eop.va & 0xFFFFFFFF)
        gpu.dev.reg("GC").CP_HQD_EOP_BASE_ADDR_HI.write(queue.eop.va >> 32)
    queue.submit(release_mem(out.va + 16, 9))              # the driver's CP_DEBUG: no halt, the fence comes
    assert u64(gpu, out, 16) == 9 and not busy(gpu)
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address == (queue.eop.va << 8) & ((1 << 48) - 1)
    gpu.ih.poll()
    gc = gpu.dev.reg("GC")
    gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=0)       # halting on the fault: the queue hangs
    try:
        queue.submit(release_mem(out.va + 24, 10))
        assert u64(gpu, out, 24) == 0 and busy(gpu)
        assert any("EOP buffer" in e.message and "hung" in e.message for e in sim.errors), sim.errors
    finally:
        gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=1)
    assert gpu.gmc.decode_fault("GC") is not None
    gpu.ih.poll()


def test_doorbells_do_not_reach_the_cp_without_pq_status_doorbell_enable(gpu, sim, queue):
    out = buf(gpu)
    gc = gpu.dev.reg("GC")
    gc.CP_PQ_STATUS.update(DOORBELL_ENABLE=0)
    try:
        queue.submit(write_data(out.va, 1))
        assert u32(gpu, out) == [0]
        assert any("DOORBELL_ENABLE" in e.message for e in sim.errors), sim.errors
    finally:
        gc.CP_PQ_STATUS.update(DOORBELL_ENABLE=1)
    queue.submit([])
    assert u32(gpu, out) == [1]


@pytest.mark.parametrize("eop_size, why", [(0, "holds 0 entries"), (2, "holds 1 entries"), (0xB, "> 0xa")])
def test_eop_size_outside_what_the_cp_can_use_hangs_release_mem(gpu, sim, queue, eop_size, why):
    """kfd_mqd_manager_v11.c update_mqd: 8-dword EOP entries, at most entries - 1 submitted, EOP_SIZE
    above 0xA not clamped by the hardware."""
    out = buf(gpu)
    with queue.selected():
        gpu.dev.reg("GC").CP_HQD_EOP_CONTROL.write(EOP_SIZE=eop_size)
    queue.submit(write_data(out.va, 1) + release_mem(out.va + 8, 2))
    assert u32(gpu, out) == [1] and u64(gpu, out, 8) == 0 and busy(gpu)
    assert any(why in e.message and "hung" in e.message for e in sim.errors), sim.errors



# ------------------------------------------------------------------------------------------------
# SH_MEM_CONFIG.ALIGNMENT_MODE of the dispatching VMID (gpusim.dispatch ALIGN_*; issue 11: SH_MEM_CONFIG)

UNALIGNED_CL = __import__("pathlib").Path(__file__).parents[1] / "hcq" / "kernels" / "unaligned.cl"


def set_sh_mem_config(gpu, vmid: int, **fields) -> int:
    gc = gpu.dev.reg("GC")
    gc.GRBM_GFX_CNTL.write(VMID=vmid)
    try:
        old = gc.SH_MEM_CONFIG.read()
        gc.SH_MEM_CONFIG.update(**fields)
    finally:
        gc.GRBM_GFX_CNTL.write(0)
    return old


@pytest.mark.parametrize("mode, result", [(3, "bytes"), (0, "aligned below"), (1, "hang"), (2, "hang")])
def test_a_misaligned_load_follows_the_vmids_alignment_mode(gpu, sim, queue, build_cl, mode, result):
    """UNALIGNED (what gfx_v11_0 programs) reads the bytes at the address; DWORD (the power-on value)
    drops the address's two low bits; the strict modes refuse the access (assumption) and the queue hangs."""
    kern = CodeObject.load(build_cl([UNALIGNED_CL])["unaligned"]).kernel("unaligned_words")
    data = np.arange(256, dtype=np.uint8).tobytes()
    src, out, n = upload(gpu, data), buf(gpu, 256), 32
    old = set_sh_mem_config(gpu, 0, ALIGNMENT_MODE=mode)
    try:
        queue.submit(kernel_packets(gpu, kern, [out.va, src.va, np.uint32(1)], (1, 1, 1), (n, 1, 1)))
        got = u32(gpu, out, 0, n)
        words = np.frombuffer(data, np.uint32)
        if result == "bytes":
            assert got == [int.from_bytes(data[1 + 4 * i:5 + 4 * i], "little") for i in range(n)] and not sim.errors
        elif result == "aligned below":
            assert got == list(words[:n]) and not sim.errors
        else:
            assert got == [0] * n and busy(gpu)
            assert any("ALIGNMENT_MODE" in e.message and "hung" in e.message for e in sim.errors), sim.errors
    finally:
        set_sh_mem_config(gpu, 0, ALIGNMENT_MODE=old >> 2 & 3)


# ------------------------------------------------------------------------------------------------
# the KIQ: SET_RESOURCES, MAP_QUEUES, UNMAP_QUEUES (gfx_v11_0.c gfx11_kiq_*, nvd.h); the HQD loaded from the MQD

KIQ_PIPE, KIQ_QUEUE, KIQ_DOORBELL = 3, 0, 0      # amdgpu_gfx_kiq_acquire on gfx11; AMDGPU_NAVI10_DOORBELL_KIQ
ALL_QUEUES = 0xFFFFFFFF & ~(1 << (KIQ_PIPE * 8 + KIQ_QUEUE))


def set_resources(mask: int = ALL_QUEUES, queue_type: int = 0) -> list[int]:
    return pkt3(P.PACKET3_SET_RESOURCES, queue_type << 29, mask, mask >> 32, 0, 0, 0, 0)


def map_queues(pipe: int, queue: int, doorbell: int, mqd_va: int, wptr_va: int, me: int = 1, engine: int = 0,
               queue_sel: int = 0, num: int = 1) -> list[int]:
    control = queue_sel << 4 | queue << 13 | pipe << 16 | me << 18 | engine << 26 | num << 29
    return pkt3(P.PACKET3_MAP_QUEUES, control, doorbell << 2, mqd_va, mqd_va >> 32, wptr_va, wptr_va >> 32)


def unmap_queues(doorbell: int, action: int = 1) -> list[int]:
    return pkt3(P.PACKET3_UNMAP_QUEUES, action | 1 << 29, doorbell << 2, 0, 0, 0)


class Mapped(Queue):
    """A compute queue whose HQD is loaded by MAP_QUEUES from its MQD (gfx_v11_0_compute_mqd_init's fields),
    written through BAR0; flush=False leaves it in the HDP."""

    def __init__(self, gpu, pipe: int, queue: int, doorbell: int, flush: bool = True):
        self.gpu, self.gc, self.pipe, self.queue, self.doorbell = gpu, gpu.dev.reg("GC"), pipe, queue, doorbell
        gmc = gpu.gmc
        self.ring, self.wb, self.eop, self.mqd = (gmc.map_vram(RING_BYTES), gmc.map_vram(4096), gmc.map_vram(4096),
                                                  gmc.map_vram(4096))
        self.wptr = 0
        gc = self.gc
        self.values = dict(
            cp_hqd_eop_base_addr_lo=(self.eop.va >> 8) & 0xFFFFFFFF, cp_hqd_eop_base_addr_hi=self.eop.va >> 40,
            cp_hqd_eop_control=gc.CP_HQD_EOP_CONTROL.encode(EOP_SIZE=8),
            cp_hqd_pq_doorbell_control=gc.CP_HQD_PQ_DOORBELL_CONTROL.encode(DOORBELL_OFFSET=doorbell, DOORBELL_EN=1),
            cp_mqd_base_addr_lo=self.mqd.va & 0xFFFFFFFC, cp_mqd_base_addr_hi=self.mqd.va >> 32,
            cp_mqd_control=gc.CP_MQD_CONTROL.encode(PRIV_STATE=1),
            cp_hqd_pq_base_lo=(self.ring.va >> 8) & 0xFFFFFFFF, cp_hqd_pq_base_hi=self.ring.va >> 40,
            cp_hqd_pq_control=gc.CP_HQD_PQ_CONTROL.encode(QUEUE_SIZE=(RING_BYTES // 4).bit_length() - 2,
                                                          RPTR_BLOCK_SIZE=5, PRIV_STATE=1, KMD_QUEUE=1),
            cp_hqd_pq_rptr_report_addr_lo=self.wb.va & 0xFFFFFFFC,
            cp_hqd_pq_rptr_report_addr_hi=(self.wb.va >> 32) & 0xFFFF,
            cp_hqd_pq_wptr_poll_addr_lo=(self.wb.va + 8) & 0xFFFFFFFC,
            cp_hqd_pq_wptr_poll_addr_hi=((self.wb.va + 8) >> 32) & 0xFFFF, cp_hqd_active=1)
        self.write_mqd(flush)

    def write_mqd(self, flush: bool = True) -> None:
        from gpusim.cp import COMPUTE_MQD
        self.gpu.dev.vram.write(self.mqd.vram.addr, COMPUTE_MQD.pack(**self.values).ljust(4096, b"\0"))
        if flush:
            self.gpu.nbio.hdp_flush()

    def map(self) -> list[int]:
        return map_queues(self.pipe, self.queue, self.doorbell, self.mqd.va, self.wb.va + 8)


@pytest.fixture
def kiq(gpu, sim):
    """ME1 pipe 3 queue 0 as the KIQ: programmed by MMIO (gfx_v11_0_kiq_init_register) and named in
    RLC_CP_SCHEDULERS (gfx_v11_0_kiq_setting)."""
    gc = gpu.dev.reg("GC")
    k = Queue(gpu, KIQ_PIPE, KIQ_QUEUE, KIQ_DOORBELL)
    gc.RLC_CP_SCHEDULERS.write(1 << 5 | KIQ_PIPE << 3 | KIQ_QUEUE | 0x80)
    yield k
    k.dequeue()
    gc.RLC_CP_SCHEDULERS.write(0)


def hqd(gpu, pipe: int, queue: int, *names: str) -> list[int]:
    gc = gpu.dev.reg("GC")
    gc.GRBM_GFX_CNTL.write(MEID=1, PIPEID=pipe, QUEUEID=queue)
    try:
        return [gc.reg(n).read() for n in names]
    finally:
        gc.GRBM_GFX_CNTL.write(0)


def test_map_queues_loads_the_hqd_from_the_mqd_and_unmap_saves_it_back(gpu, sim, kiq):
    from gpusim.cp import COMPUTE_MQD
    out = buf(gpu)
    t = Mapped(gpu, 1, 5, 40)
    assert not t.active()
    kiq.submit(set_resources() + t.map() + write_data(out.va, 1))
    assert u32(gpu, out) == [1] and t.active() and not sim.errors, sim.errors
    v = t.values
    assert hqd(gpu, 1, 5, "CP_HQD_PQ_BASE", "CP_HQD_PQ_CONTROL", "CP_HQD_PQ_DOORBELL_CONTROL", "CP_MQD_BASE_ADDR",
               "CP_HQD_EOP_BASE_ADDR") == [v["cp_hqd_pq_base_lo"], v["cp_hqd_pq_control"],
                                           v["cp_hqd_pq_doorbell_control"], v["cp_mqd_base_addr_lo"],
                                           v["cp_hqd_eop_base_addr_lo"]]
    t.submit(write_data(out.va + 4, 2) + release_mem(out.va + 8, 3))      # its doorbell reaches it: it runs
    assert u32(gpu, out, 4) == [2] and u64(gpu, out, 8) == 3 and t.rptr_report() == t.wptr
    kiq.submit(unmap_queues(40) + write_data(out.va, 4))                  # RESET_QUEUES, as disable_kcq
    assert u32(gpu, out) == [4] and not t.active()
    m = COMPUTE_MQD.unpack_from(gpu.dev.vram.read(t.mqd.vram.addr, COMPUTE_MQD.size))
    assert m.cp_hqd_pq_rptr == t.wptr and m.cp_hqd_pq_wptr_lo == t.wptr and m.cp_hqd_active == 0
    t.submit(write_data(out.va + 16, 5))                                 # unmapped: its doorbell reaches nothing
    assert u32(gpu, out, 16) == [0]


def test_a_map_reads_the_mqd_past_the_hdp_a_stale_one_gives_a_queue_that_never_runs(gpu, sim, kiq):
    """The KIQ's firmware reads the MQD from memory like any engine: what the host wrote through BAR0 is
    held in the HDP until a flush (gpusim.hdp), so a map after an unflushed MQD write loads the old MQD,
    here zeros: no doorbell, no ring, and the queue's work never runs (issue 17)."""
    out = buf(gpu)
    t = Mapped(gpu, 2, 6, 42)
    gpu.dev.vram.write(t.mqd.vram.addr, bytes(4096))
    gpu.nbio.hdp_flush()                                                 # the memory holds zeros
    kiq.submit(set_resources() + t.map() + write_data(out.va, 1), ring_doorbell=False)   # (flushes its ring)
    t.write_mqd(flush=False)                                             # the MQD, left in the HDP
    gpu.dev.pci.bar(2).write64(KIQ_DOORBELL * 4, kiq.wptr)
    assert u32(gpu, out) == [1]
    assert hqd(gpu, 2, 6, "CP_HQD_PQ_DOORBELL_CONTROL", "CP_HQD_PQ_BASE") == [0, 0]
    t.submit(write_data(out.va + 4, 2))
    assert u32(gpu, out, 4) == [0]
    kiq.submit(unmap_queues(0) + write_data(out.va, 2))                 # its HQD holds doorbell offset 0
    gpu.nbio.hdp_flush()
    t.write_mqd()
    kiq.submit(t.map() + write_data(out.va, 3))
    assert u32(gpu, out) == [3]
    t.submit([])
    assert u32(gpu, out, 4) == [2]
    kiq.submit(unmap_queues(42) + write_data(out.va, 4))


@pytest.mark.parametrize("packet, why", [
    (lambda t: map_queues(1, 4, 50, t.mqd.va, 0, engine=4), "ENGINE_SEL 4"),
    (lambda t: map_queues(1, 4, 50, t.mqd.va, 0, me=2), "ME 2"),
    (lambda t: map_queues(1, 4, 50, t.mqd.va, 0, queue_sel=1), "QUEUE_SEL 1"),
    (lambda t: map_queues(1, 4, 50, t.mqd.va, 0, num=2), "NUM_QUEUES 2"),
    (lambda t: map_queues(KIQ_PIPE, KIQ_QUEUE, 50, t.mqd.va, 0), "KIQ's own slot"),
    (lambda t: set_resources(queue_type=1), "QUEUE_TYPE 1"),
    (lambda t: pkt3(P.PACKET3_UNMAP_QUEUES, 2 | 1 << 29, 50 << 2, 0, 0, 0), "ACTION 2"),
])
def test_malformed_kiq_packets_hang_the_kiq(gpu, sim, kiq, packet, why):
    out = buf(gpu)
    t = Mapped(gpu, 1, 4, 50)
    kiq.submit(set_resources() + packet(t) + write_data(out.va, 1))
    assert u32(gpu, out) == [0] and not t.active() and busy(gpu)
    assert any(why in e.message and "hung" in e.message for e in sim.errors), sim.errors
    cp_soft_reset(gpu)


def test_map_queues_needs_the_kiq_and_its_resources(gpu, sim, kiq, queue):
    """Only the queue RLC_CP_SCHEDULERS names runs the scheduler packets, and the KIQ maps only queues in
    the mask of its SET_RESOURCES (amdgpu_gfx_enable_kcq sends it first; a CP soft reset forgets it)."""
    out = buf(gpu)
    t = Mapped(gpu, 1, 3, 52)
    queue.submit(set_resources() + t.map() + write_data(out.va, 1))     # on an ordinary compute queue
    assert u32(gpu, out) == [0] and not t.active()
    assert any("not the KIQ" in e.message for e in sim.errors), sim.errors
    cp_soft_reset(gpu)                        # frees the hung queue; the KIQ's firmware restarts too
    kiq.__init__(gpu, KIQ_PIPE, KIQ_QUEUE, KIQ_DOORBELL)
    kiq.submit(t.map() + write_data(out.va, 2))                          # no SET_RESOURCES since then
    assert u32(gpu, out) == [0] and not t.active()
    assert any("no SET_RESOURCES" in e.message for e in sim.errors), sim.errors
    cp_soft_reset(gpu)
    kiq.__init__(gpu, KIQ_PIPE, KIQ_QUEUE, KIQ_DOORBELL)
    kiq.submit(set_resources(ALL_QUEUES & ~(1 << (1 * 8 + 3))) + t.map() + write_data(out.va, 3))
    assert u32(gpu, out) == [0] and any("queue mask" in e.message for e in sim.errors), sim.errors
    cp_soft_reset(gpu)
    kiq.__init__(gpu, KIQ_PIPE, KIQ_QUEUE, KIQ_DOORBELL)
    kiq.submit(set_resources() + t.map() + write_data(out.va, 4))
    assert u32(gpu, out) == [4] and t.active()
    kiq.submit(unmap_queues(52) + write_data(out.va, 5))
    assert u32(gpu, out) == [5] and not t.active()


def test_a_map_of_an_unmapped_mqd_faults(gpu, sim, kiq):
    """The MQD read is a CPC access through the KIQ's page tables: unmapped, it faults (the default page
    with the driver's CP_DEBUG: the fault is latched; with the halt the KIQ hangs at the packet)."""
    out = buf(gpu)
    gpu.ih.poll()
    kiq.submit(set_resources() + map_queues(1, 6, 54, 0x7F00_0000_0000, 0) + write_data(out.va, 1))
    faults = [f for f in map(gpu.gmc.fault_from_iv, gpu.ih.poll()) if f is not None]
    assert any(f.address >> 32 == 0x7F00 and not f.write for f in faults), faults
    assert u32(gpu, out) == [1]
    gpu.gmc.decode_fault("GC")
    kiq.submit(unmap_queues(0) + write_data(out.va, 2))
    gc = gpu.dev.reg("GC")
    gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=0)
    try:
        kiq.submit(map_queues(1, 6, 54, 0x7F00_0000_0000, 0) + write_data(out.va, 3))
        assert u32(gpu, out) == [2] and busy(gpu)
        assert any("MQD read" in e.message and "hung" in e.message for e in sim.errors), sim.errors
    finally:
        gc.CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=1)
    gpu.gmc.decode_fault("GC")
    gpu.ih.poll()
    cp_soft_reset(gpu)


def test_unmap_of_a_hung_queue_waits_until_the_cp_soft_reset(gpu, sim, kiq):
    out = buf(gpu)
    t = Mapped(gpu, 2, 2, 56)
    kiq.submit(set_resources() + t.map() + write_data(out.va, 1))
    t.submit(pkt3(P.PACKET3_DRAW_INDEX_AUTO, 0, 0))                     # hangs it
    kiq.submit(unmap_queues(56) + write_data(out.va, 2))
    assert u32(gpu, out) == [1] and t.active() and busy(gpu)             # the KIQ waits at the unmap
    cp_soft_reset(gpu)
    assert not t.active()


def test_a_reset_waves_dequeue_takes_a_hung_queue_off_the_pipe_stays_faulted_until_the_cp_soft_reset(gpu, sim, queue):
    """gfx_v11_0_soft_reset writes CP_HQD_DEQUEUE_REQUEST 2 (RESET_WAVES) to every queue and polls
    CP_HQD_ACTIVE for 0 before its GRBM soft reset: a hung queue goes off its HQD then (a drain request, 1,
    is never served), but the CP stays busy until the GRBM soft reset of the CP."""
    gc = gpu.dev.reg("GC")
    queue.submit(pkt3(P.PACKET3_DRAW_INDEX_AUTO, 0, 0))
    assert queue.active() and busy(gpu)
    with queue.selected():
        gc.CP_HQD_DEQUEUE_REQUEST.write(2)
        for _ in range(20):
            if not gc.CP_HQD_ACTIVE.read() & 1:
                break
        assert not gc.CP_HQD_ACTIVE.read() & 1
        gc.CP_HQD_DEQUEUE_REQUEST.write(0)
    assert busy(gpu)                                                   # the pipe's firmware is still faulted
    cp_soft_reset(gpu)
    wait_mec(gpu)
    assert not busy(gpu)


def test_the_cp_wraps_at_its_own_queue_size_and_reports_no_rptr_with_no_update_rptr(gpu, sim, queue):
    """CP_HQD_PQ_CONTROL as tools/mutate.py's reg-flip leaves it for the KIQ (tests/amdrv/test_queue.py::
    test_a_kiq_with_an_inverted_pq_control_fails_once_its_ring_wraps): NO_UPDATE_RPTR set, the CP writes no
    read pointer to the report address (the field's name; kfd_mqd_manager_v11 sets it for AQL queues, whose
    read index is reported otherwise), and a QUEUE_SIZE above the ring the host wraps at makes the CP read on
    past the ring's end (2^(QUEUE_SIZE+1) dwords, gfx_v11_0_kiq_init_register's order_base_2(ring_size / 4) - 1),
    where the wrapped packets are not."""
    out = buf(gpu)
    with queue.selected():
        queue.gc.CP_HQD_PQ_CONTROL.update(NO_UPDATE_RPTR=1)
    queue.submit(write_data(out.va, 1))
    assert u32(gpu, out) == [1] and queue.rptr_report() == 0          # the work ran; nothing reported
    with queue.selected():
        queue.gc.CP_HQD_PQ_CONTROL.update(NO_UPDATE_RPTR=0, QUEUE_SIZE=(RING_BYTES // 4).bit_length() - 1)
    n = RING_BYTES // 4
    queue.submit(pkt3(P.PACKET3_NOP, *[0] * (n - queue.wptr - 1)))    # up to the ring's end
    assert queue.rptr_report() == n and not busy(gpu)
    queue.submit(write_data(out.va + 4, 2))                            # at the start of the host's ring
    assert u32(gpu, out, 4) == [0]                                     # never run: the CP read on past the end,
    assert busy(gpu) and "header" in sim.errors[-1].message            # where the next page holds no packet


def test_the_write_pointer_counts_modulo_the_ring_and_the_doorbell_sets_both_halves(gpu, sim, queue):
    """Compute rings keep a 64-bit write pointer that is never masked (amdgpu_ring_init: ptr_mask all ones with
    support_64bit_ptrs; gfx_v11_0_ring_set_wptr_compute rings WDOORBELL64 with it), so the CP takes it modulo
    its ring: a CP_HQD_PQ_WPTR_HI of all ones over a LO of 0 (tools/mutate.py's reg-flip of the KIQ's
    write of 0, an EXPECTED survivor) reads as an empty ring, and the first doorbell replaces both halves."""
    out = buf(gpu)
    with queue.selected():
        queue.gc.CP_HQD_PQ_WPTR_HI.write(0xFFFFFFFF)
        assert queue.gc.CP_HQD_PQ_RPTR.read() == 0 and not busy(gpu)      # nothing to read
    queue.submit(write_data(out.va, 7))
    assert u32(gpu, out) == [7]
    with queue.selected():
        assert queue.gc.CP_HQD_PQ_WPTR_HI.read() == 0 and queue.gc.CP_HQD_PQ_WPTR_LO.read() == queue.wptr
    assert not sim.errors, sim.errors
