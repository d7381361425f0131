"""Compute and SDMA queues on the simulated Navi31: set-up as gfx_v11_0/sdma_v6_0 do, fences, copies,
a clang kernel dispatched through PM4 and checked with numpy, hangs and faults named in the error,
and recovery after which the next submission works."""
import struct
from array import array
from pathlib import Path

import numpy as np
import pytest

import pcie
from amdrv import pm4
from amdrv import sdma_packets as S
from amdrv.am import AMGPU
from rdna3 import assemble
from rdna3.codeobj import CodeObject, KernelSpec, write_code_object
from amdrv.ip.gfx import GFXError
from amdrv.regs import Register
from amdrv.queue import (COMPUTE_MQD, KIQ, MQD_HEADER, ComputeQueue, Fence,
                         HostBuffer, QueueError, SDMAQueue)

KERNELS = Path(__file__).parents[1] / "rdna3" / "kernels"
UNMAPPED_VA = 0x7F00_0000_0000  # inside the 48-bit space, never mapped by the GMC


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


@pytest.fixture
def gpu(sim_bus):
    g = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, vram_size=512 << 20))
    yield g
    g.dev.close()


# ------------------------------------------------------------------ set-up, no engine model needed
def test_compute_queue_programs_the_hqd_as_kiq_init_register(gpu):
    q = ComputeQueue(gpu, pipe=1, queue=2)
    gc = gpu.dev.reg("GC")
    gc.GRBM_GFX_CNTL.write(MEID=1, PIPEID=1, QUEUEID=2)
    try:
        assert gc.CP_HQD_ACTIVE.read() & 1
        ctl = gc.CP_HQD_PQ_CONTROL.decode()
        # 64 KiB ring: 2^(QUEUE_SIZE+1) dwords; RPTR_BLOCK_SIZE log2(4096/4)-1; PRIV_STATE, KMD_QUEUE
        assert (ctl["QUEUE_SIZE"], ctl["RPTR_BLOCK_SIZE"], ctl["PRIV_STATE"], ctl["KMD_QUEUE"]) == (13, 9, 1, 1)
        db = gc.CP_HQD_PQ_DOORBELL_CONTROL.decode()
        # ring id = pipe * 8 + queue = 10: doorbell (MEC_RING0 + 10) << 1 dwords
        assert (db["DOORBELL_EN"], db["DOORBELL_OFFSET"]) == (1, (3 + 10) << 1)
        assert gc.CP_HQD_EOP_CONTROL.decode()["EOP_SIZE"] == 8  # 2^(8+1) dwords = GFX11_MEC_HPD_SIZE
        assert gc.CP_HQD_PQ_BASE.read() | gc.CP_HQD_PQ_BASE_HI.read() << 32 == q.ring_va >> 8
        assert gc.CP_HQD_PQ_RPTR_REPORT_ADDR.read() == q.rptr_va & 0xFFFFFFFC
        assert gc.CP_MQD_BASE_ADDR.read() | gc.CP_MQD_BASE_ADDR_HI.read() << 32 == q.mqd.va
        assert gc.CP_PQ_STATUS.decode()["DOORBELL_ENABLE"] == 1
        assert gc.CP_PQ_WPTR_POLL_CNTL.decode()["EN"] == 0
    finally:
        gc.GRBM_GFX_CNTL.write(0)
    # amdgpu_doorbell.h: the MEC's doorbells run from KIQ (0) to USERQUEUE_END (0x8A), in bytes of dwords
    assert (gc.CP_MEC_DOORBELL_RANGE_LOWER.read(), gc.CP_MEC_DOORBELL_RANGE_UPPER.read()) == (0, 0x8A * 2 * 4)
    image = gpu.dev.vram.read(q.mqd.vram.addr, 4096)
    word = lambda name: struct.unpack_from("<I", image, COMPUTE_MQD.offset(name))[0]  # noqa: E731
    assert word("header") == MQD_HEADER and word("cp_hqd_active") == 1
    assert word("cp_hqd_pq_base_lo") == (q.ring_va >> 8) & 0xFFFFFFFF
    assert word("cp_hqd_pq_doorbell_control") == gc.CP_HQD_PQ_DOORBELL_CONTROL.encode(
        DOORBELL_OFFSET=26, DOORBELL_EN=1)


def test_sdma_queue_programs_the_ring_as_gfx_resume(gpu):
    s = SDMAQueue(gpu, engine=1, ring_size=4096)
    r = lambda n: gpu.dev.reg("SDMA0").reg(f"SDMA1_{n}")  # noqa: E731
    cntl = r("QUEUE0_RB_CNTL").decode()
    assert (cntl["RB_ENABLE"], cntl["RB_SIZE"], cntl["RPTR_WRITEBACK_ENABLE"], cntl["F32_WPTR_POLL_ENABLE"],
            cntl["RB_PRIV"]) == (1, 10, 1, 1, 1)
    assert r("QUEUE0_RB_BASE").read() | r("QUEUE0_RB_BASE_HI").read() << 32 == s.ring_va >> 8
    assert r("QUEUE0_DOORBELL").decode()["ENABLE"] == 1
    assert r("QUEUE0_DOORBELL_OFFSET").decode()["OFFSET"] == 0x10A << 1
    assert r("QUEUE0_IB_CNTL").decode()["IB_ENABLE"] == 1
    assert r("QUEUE0_RB_RPTR_ADDR_LO").read() | r("QUEUE0_RB_RPTR_ADDR_HI").read() << 32 == s.rptr_va
    with pytest.raises(ValueError, match="power of two"):
        SDMAQueue(gpu, ring_size=3000)
    with pytest.raises(ValueError, match="no SDMA engine 5"):
        SDMAQueue(gpu, engine=5)
    with pytest.raises(ValueError, match="pipes 0..3"):
        ComputeQueue(gpu, pipe=4)


# ------------------------------------------------------------------ SDMA
def test_sdma_copy_fill_write_fence_timestamp_and_ring_wrap(gpu):
    s = SDMAQueue(gpu, ring_size=4096)
    host = HostBuffer(gpu, 3 * 4096)
    vram = gpu.gmc.map_vram(1 << 16)
    done = Fence(host, 0)
    data = np.arange(1000, dtype=np.uint32) * 7 + 3
    host.view[4096:4096 + data.nbytes] = data.tobytes()
    b = S.SDMABuilder()
    b.copy(vram.va + 12, host.va + 4096, data.nbytes)           # host -> VRAM, unaligned destination
    b.copy(host.va + 8192 + 4, vram.va + 12, data.nbytes)       # and back
    b.fill(vram.va + 0x8000, 0x5A5A5A5A, 256)
    b.write(host.va + 16, 0x11, 0x22)
    b.timestamp(host.va + 24)
    b.timestamp(host.va + 32)
    b.gcr()
    f = b.fence(done.va, 1)
    s.submit(b.buf)
    s.wait(done, 1, timeout_s=5)
    assert bytes(host.view[8196:8196 + data.nbytes]) == data.tobytes()
    assert gpu.dev.vram.read(vram.vram.addr + 12, data.nbytes) == data.tobytes()
    assert gpu.dev.vram.read(vram.vram.addr + 0x8000, 256) == b"\x5a" * 256
    assert bytes(host.view[16:24]) == struct.pack("<II", 0x11, 0x22)
    t0, t1 = struct.unpack_from("<QQ", host.view, 24)
    assert 0 < t0 <= t1
    # the same stream resubmitted with the fence value patched in place, many times: the 4 KiB ring wraps
    for value in range(2, 40):
        b.buf[f] = value
        s.submit(b.buf)
    s.wait(done, 39, timeout_s=5)
    assert s.wptr > s.ring_dw


def test_sdma_hang_is_named_then_recovered(gpu):
    s = SDMAQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    b = S.SDMABuilder()
    b.poll_mem(host.va + 8, 1, function=S.POLL_EQ)  # waits for a value nobody writes
    b.fence(done.va, 1)
    s.submit(b.buf)
    with pytest.raises(QueueError, match=r"SDMA0 queue 0: timed out .* rptr .* wptr.*no VM fault reported"):
        s.wait(done, 1, timeout_s=0.05, min_reads=500)
    gpu.recover()
    b = S.SDMABuilder()
    b.fence(done.va, 2)
    s.submit(b.buf)
    s.wait(done, 2, timeout_s=5)


def test_recover_needs_the_grbm_soft_reset_of_sdma(gpu, monkeypatch):
    """sdma_v6_0_soft_reset freezes each engine (SDMA0_FREEZE) and relies on GRBM_SOFT_RESET.SOFT_RESET_SDMA<i>
    to let go of it (it never writes FREEZE 0): a recovery that leaves the reset out keeps SDMA frozen."""
    from amdrv.ip.sdma import SDMA
    s = SDMAQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    real, write = SDMA.soft_reset, Register.write

    def no_grbm_soft_reset(sdma):
        with monkeypatch.context() as m:
            m.setattr(Register, "write", lambda self, *a, **f: None if self.name == "GRBM_SOFT_RESET"
                      else write(self, *a, **f))
            real(sdma)
    monkeypatch.setattr(SDMA, "soft_reset", no_grbm_soft_reset)
    gpu.recover()
    b = S.SDMABuilder()
    b.fence(done.va, 1)
    s.submit(b.buf)
    with pytest.raises(QueueError, match="timed out"):
        s.wait(done, 1, timeout_s=0.02, min_reads=300)
    assert gpu.dev.reg("GC").SDMA0_FREEZE.decode()["FROZEN"] == 1
    monkeypatch.setattr(SDMA, "soft_reset", real)
    gpu.recover()
    b = S.SDMABuilder()
    b.fence(done.va, 2)
    s.submit(b.buf)
    s.wait(done, 2, timeout_s=5)


# ------------------------------------------------------------------ compute
@pytest.fixture(scope="module")
def add_f32(build_cl):
    return CodeObject.load(build_cl([KERNELS / "add_f32.cl"])["add_f32"])


class Launcher:
    """What a runtime does for one kernel launch (the hcq layer does it for real): the code object's
    image in VRAM, an AQL dispatch packet for the dispatch pointer, kernargs, then SET_SH_REG of the
    COMPUTE_* registers the kernel descriptor asks for and DISPATCH_DIRECT (AMDGPUUsage: initial
    kernel execution state)."""

    def __init__(self, gpu, co: CodeObject, name: str):
        self.gpu, self.k = gpu, co.kernel(name)
        end = max(va + size for va, _, size, _ in co.segments)
        self.image = gpu.gmc.map_vram(end, align=1 << 16)
        for va, off, size, _ in co.segments:
            gpu.dev.vram.write(self.image.vram.addr + va, co.data[off:off + size])
        self.args = gpu.gmc.map_vram(4096)
        self.gc = gpu.dev.reg("GC")

    def emit(self, b: pm4.PM4, grid, block, argbytes: bytes) -> None:
        gpu, k, kd = self.gpu, self.k, self.k.descriptor
        code = self.image.va + k.code_address
        assert code & 0xFF == 0
        packet_va, kernarg_va = self.args.va, self.args.va + 256
        packet = struct.pack("<HHHHHHIIIIIQQQQ", 0, 3, *block, 0, *(g * l for g, l in zip(grid, block)),
                             0, kd.group_segment_fixed_size, self.image.va + k.descriptor_address, kernarg_va, 0, 0)
        gpu.dev.vram.write(self.args.vram.addr, packet + bytes(256 - len(packet)) + argbytes)
        gpu.nbio.hdp_flush()
        user = []
        for name, _, count in kd.user_sgpr_layout():
            value = {"dispatch_ptr": packet_va, "kernarg_segment_ptr": kernarg_va}.get(name, 0)
            user += [value & 0xFFFFFFFF, value >> 32][:count] + [0] * max(0, count - 2)
        sh = lambda n: pm4.sh_offset(self.gc, n)  # noqa: E731
        b.acquire_mem()
        b.set_sh_reg(sh("COMPUTE_PGM_LO"), (code >> 8) & 0xFFFFFFFF, code >> 40)
        b.set_sh_reg(sh("COMPUTE_PGM_RSRC1"), kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2)
        b.set_sh_reg(sh("COMPUTE_PGM_RSRC3"), kd.compute_pgm_rsrc3)
        b.set_sh_reg(sh("COMPUTE_TMPRING_SIZE"), 0)
        b.set_sh_reg(sh("COMPUTE_RESOURCE_LIMITS"), 0)
        b.set_sh_reg(sh("COMPUTE_START_X"), 0, 0, 0)
        b.set_sh_reg(sh("COMPUTE_NUM_THREAD_X"), *block)
        if user:  # only what the descriptor enables: the other USER_DATA registers keep their values
            b.set_sh_reg(sh("COMPUTE_USER_DATA_0"), *user)
        init = self.gc.COMPUTE_DISPATCH_INITIATOR.encode(COMPUTE_SHADER_EN=1, FORCE_START_AT_000=1,
                                                         CS_W32_EN=int(kd.wave32))
        b.dispatch_direct(*grid, init)


def add_args(out_va, a_va, b_va, n):
    return struct.pack("<QQQI", out_va, a_va, b_va, n)


def run_add(gpu, q, launcher, done, value, n=200, out_va=None):
    bufs = gpu.gmc.map_vram(3 * 4096)
    a = np.linspace(-3, 7, n, dtype=np.float32)
    c = np.arange(n, dtype=np.float32) * 0.25
    gpu.dev.vram.write(bufs.vram.addr + 4096, a.tobytes())
    gpu.dev.vram.write(bufs.vram.addr + 8192, c.tobytes())
    b = pm4.PM4()
    launcher.emit(b, ((n + 63) // 64, 1, 1), (64, 1, 1),
                  add_args(bufs.va if out_va is None else out_va, bufs.va + 4096, bufs.va + 8192, n))
    b.release_mem(done.va, value)
    q.submit(b.buf)
    return bufs, a + c


def test_release_mem_fence_and_clang_kernel_match_numpy(gpu, add_f32):
    q = ComputeQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done, clock = Fence(host, 0), Fence(host, 8)
    b = pm4.PM4()
    b.write_data(host.va + 16, 0xCAFE)
    b.release_mem(clock.va, data_sel=pm4.DATA_GPU_CLOCK)
    b.release_mem(done.va, 0x1_0000_0001, data_sel=pm4.DATA_64)
    q.submit(b.buf)
    q.wait(done, 0x1_0000_0001, timeout_s=5)
    assert struct.unpack_from("<I", host.view, 16)[0] == 0xCAFE and clock.value > 0
    launcher = Launcher(gpu, add_f32, "add_f32")
    bufs, want = run_add(gpu, q, launcher, done, 0x1_0000_0002)
    q.wait(done, 0x1_0000_0002, timeout_s=20)
    got = np.frombuffer(gpu.dev.vram.read(bufs.vram.addr, want.nbytes), dtype=np.float32)
    np.testing.assert_array_equal(got, want)


def test_unknown_packet_hang_is_named_then_recover_and_next_kernel_runs(gpu, add_f32):
    q = ComputeQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    b = pm4.PM4()
    b.buf.extend((pm4.header(0x01, 0), 0))  # opcode 1 is no PACKET3 of nvd.h
    b.release_mem(done.va, 1)
    q.submit(b.buf)
    with pytest.raises(QueueError, match=r"compute queue ME1 pipe 0 queue 0: timed out .* rptr .* wptr.*no VM fault"):
        q.wait(done, 1, timeout_s=0.05, min_reads=500)
    gpu.recover()
    launcher = Launcher(gpu, add_f32, "add_f32")
    bufs, want = run_add(gpu, q, launcher, done, 2)
    q.wait(done, 2, timeout_s=20)
    np.testing.assert_array_equal(np.frombuffer(gpu.dev.vram.read(bufs.vram.addr, want.nbytes), np.float32), want)


def test_looping_kernel_times_out_then_recover(gpu, add_f32):
    q = ComputeQueue(gpu)
    co = CodeObject(write_code_object([KernelSpec("spin", assemble("s_branch -1\ns_endpgm"), user_sgprs=())]))
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    b = pm4.PM4()
    Launcher(gpu, co, "spin").emit(b, (1, 1, 1), (32, 1, 1), b"")
    b.release_mem(done.va, 1)
    q.submit(b.buf)
    with pytest.raises(QueueError, match="timed out") as e:
        q.wait(done, 1, timeout_s=0.1, min_reads=1000)
    assert "CP_HQD_ACTIVE 1" in str(e.value)
    gpu.recover()
    bufs, want = run_add(gpu, q, Launcher(gpu, add_f32, "add_f32"), done, 2)
    q.wait(done, 2, timeout_s=20)
    np.testing.assert_array_equal(np.frombuffer(gpu.dev.vram.read(bufs.vram.addr, want.nbytes), np.float32), want)
    gpu.fini()  # the reset left the engines idle: the clean exit works after a recover


def test_unmapped_store_gives_a_decoded_fault_then_recover(gpu, add_f32):
    q = ComputeQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    launcher = Launcher(gpu, add_f32, "add_f32")
    run_add(gpu, q, launcher, done, 1, out_va=UNMAPPED_VA)
    with pytest.raises(QueueError, match=r"(?i)fault.*0x7f0000000000") as e:
        q.wait(done, 1, timeout_s=1, min_reads=2000)
    assert "no VM fault" not in str(e.value) and "write" in str(e.value)
    assert "TCP" in str(e.value)  # a shader store reaches memory through the TCP (gfxhub_client_ids)
    gpu.recover()
    assert gpu.gmc.decode_fault("GC") is None
    bufs, want = run_add(gpu, q, launcher, done, 2)
    q.wait(done, 2, timeout_s=20)
    np.testing.assert_array_equal(np.frombuffer(gpu.dev.vram.read(bufs.vram.addr, want.nbytes), np.float32), want)


def test_compute_waits_on_an_sdma_fence_ring_wraps_and_clock_is_monotonic(gpu):
    q, s = ComputeQueue(gpu, pipe=2, ring_size=4096), SDMAQueue(gpu)
    host = HostBuffer(gpu, 4096)
    gate, done = Fence(host, 0), Fence(host, 8)
    b = pm4.PM4()
    b.wait_reg_mem(gate.va, 1, function=pm4.WAIT_GE)     # blocks until the SDMA queue writes the gate
    b.release_mem(host.va + 16, data_sel=pm4.DATA_GPU_CLOCK)
    b.release_mem(host.va + 24, data_sel=pm4.DATA_GPU_CLOCK)
    b.release_mem(done.va, 1)
    q.submit(b.buf)
    with pytest.raises(QueueError, match="timed out"):
        q.wait(done, 1, timeout_s=0.02, min_reads=300)
    assert done.value == 0
    sb = S.SDMABuilder()
    sb.fence(gate.va, 1)
    s.submit(sb.buf)
    q.wait(done, 1, timeout_s=5)
    t0, t1 = struct.unpack_from("<QQ", host.view, 16)
    assert 0 < t0 <= t1
    # 60 dwords a time through a 1024-dword ring: the copy wraps at its end
    b = pm4.PM4()
    b.nop(52)
    v = b.release_mem(done.va, 0) + 2
    for value in range(2, 40):
        b.buf[v] = value
        q.submit(b.buf)
    q.wait(done, 39, timeout_s=5)
    assert q.wptr > q.ring_dw
    with pytest.raises(QueueError, match="do not fit the 1024-dword ring"):
        q.submit([0] * 1024)


def test_sdma_copy_to_unmapped_memory_is_a_decoded_fault_then_recover(gpu):
    s = SDMAQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    b = S.SDMABuilder()
    b.copy(UNMAPPED_VA, host.va + 64, 64)
    b.fence(done.va, 1)
    s.submit(b.buf)
    with pytest.raises(QueueError, match=r"SDMA0 queue 0: .*(?i:fault).*0x7f0000000000.*write"):
        s.wait(done, 1, timeout_s=1, min_reads=2000)
    gpu.recover()
    assert gpu.gmc.decode_fault("GC") is None
    b = S.SDMABuilder()
    b.fence(done.va, 2)
    s.submit(b.buf)
    s.wait(done, 2, timeout_s=5)


# ------------------------------------------------------------------ driver steps the simulator enforces
def _release(gpu, value=1):
    """A fence in a host page of its own and the PM4 that signals it (RELEASE_MEM): what a compute queue is
    given to show whether it runs."""
    host = HostBuffer(gpu, 4096)
    b = pm4.PM4()
    b.release_mem(host.va, value)
    return Fence(host, 0), b.buf


def _runs(q, value=1):
    """The queue runs: a RELEASE_MEM submitted to it signals its fence."""
    done, packets = _release(q.gpu, value)
    q.submit(packets)
    q.wait(done, value, timeout_s=5)


def _stalls(q, timeout_s=0.05, min_reads=500):
    """The queue does not run: a RELEASE_MEM submitted to it never signals (the wait times out)."""
    done, packets = _release(q.gpu)
    q.submit(packets)
    with pytest.raises(QueueError, match="timed out"):
        q.wait(done, 1, timeout_s=timeout_s, min_reads=min_reads)


def test_eop_base_must_be_shifted_by_8(gpu, monkeypatch):
    """The CP writes its end-of-pipe records at CP_HQD_EOP_BASE_ADDR << 8 (issue 17): an EOP base
    written unshifted points into unmapped space, and the first RELEASE_MEM faults."""
    mqd_values = ComputeQueue._mqd_values

    def unshifted(self):
        m = mqd_values(self)
        m["cp_hqd_eop_base_addr_lo"], m["cp_hqd_eop_base_addr_hi"] = self.eop.va & 0xFFFFFFFF, self.eop.va >> 32
        return m
    _runs(ComputeQueue(gpu))                                  # shifted: runs
    monkeypatch.setattr(ComputeQueue, "_mqd_values", unshifted)
    q2 = ComputeQueue(gpu, pipe=1)
    done, packets = _release(gpu)
    q2.submit(packets)
    with pytest.raises(QueueError, match=r"(?i)fault"):
        q2.wait(done, 1, timeout_s=1, min_reads=2000)


def test_eop_size_must_be_programmed(gpu, monkeypatch):
    """CP_HQD_EOP_CONTROL.EOP_SIZE written 0 is a 2-dword EOP buffer: no room for one 8-dword EOP entry,
    so the CP cannot submit the RELEASE_MEM (kfd_mqd_manager_v11.c). (A dropped write leaves the power-on
    EOP_SIZE 6, gc_11_0_0_default.h: 128 dwords, which works.)"""
    mqd_values = ComputeQueue._mqd_values

    def no_eop_size(self):
        m = mqd_values(self)
        m["cp_hqd_eop_control"] = 0
        return m
    monkeypatch.setattr(ComputeQueue, "_mqd_values", no_eop_size)
    _stalls(ComputeQueue(gpu))
    assert any("EOP_SIZE 0" in e.message for e in gpu.dev.pci.dev.errors)


def test_doorbells_need_cp_pq_status_doorbell_enable(gpu):
    q = ComputeQueue(gpu)
    gpu.dev.reg("GC").CP_PQ_STATUS.update(DOORBELL_ENABLE=0)   # the last step of kiq_init_register left out
    _stalls(q, timeout_s=0.02, min_reads=300)
    gpu.recover()                                             # the KIQ set up again enables them
    _runs(q)


def test_a_queue_without_the_mec_doorbell_range_lower_loses_its_doorbells(gpu, monkeypatch, dropping_registers):
    """CP_MEC_DOORBELL_RANGE_LOWER powers on at 0x110 (gc_11_0_0_default.h: doorbell dword 0x44), above the
    compute rings' doorbells (MEC_RING0 = 3: dword 6 on). gfx_v11_0_kiq_init_register writes it from the
    KIQ's doorbell (0); a driver that leaves the write out never reaches its queue."""
    gc = gpu.dev.reg("GC")
    assert gc.CP_MEC_DOORBELL_RANGE_LOWER.read() == 0x110     # nothing has written it since power-on
    # the HQD registers are the GFX block's to write (gfx_v11_0_kiq_init_register)
    monkeypatch.setattr(gpu.gfx, "gc", dropping_registers(gpu.gfx.gc, {"CP_MEC_DOORBELL_RANGE_LOWER"}))
    with pytest.raises(QueueError, match="SET_RESOURCES did not complete"):
        ComputeQueue(gpu)                                     # the KIQ's own doorbell (0) is lost first
    assert any("does not reach the MEC" in e.message for e in gpu.dev.pci.dev.errors)
    monkeypatch.undo()
    _runs(ComputeQueue(gpu))


def test_a_kiq_without_its_pq_control_wraps_at_the_power_on_ring_size(gpu, monkeypatch, dropping_registers):
    """CP_HQD_PQ_CONTROL powers on at 0x308509 (gc_11_0_0_default.h): QUEUE_SIZE 9, a 1024-dword ring. The
    KIQ is the queue programmed by MMIO (gfx_v11_0_kiq_init_register writes mqd->cp_hqd_pq_control, QUEUE_SIZE
    from its ring's size); without the write its 2048-dword ring runs while its packets stay in the first 1024
    dwords, then the CP wraps where the driver does not and the next map or unmap never completes."""
    # the HQD registers are the GFX block's to write (gfx_v11_0_kiq_init_register)
    monkeypatch.setattr(gpu.gfx, "gc", dropping_registers(gpu.gfx.gc, {"CP_HQD_PQ_CONTROL"}))
    q = ComputeQueue(gpu)
    monkeypatch.undo()
    with pytest.raises(QueueError, match="did not complete"):
        for _ in range(100):             # an unmap and a map per set-up: past 1024 dwords after ~40
            q.init()
    assert 1024 < gpu.kiq.wptr <= 1024 + 16
    assert gpu.kiq.ring_dw == 2048


def test_fini_dequeues_the_compute_queues(sim_bus, monkeypatch):
    """Upstream hw_fini unmaps its compute queues through the KIQ (amdgpu_gfx_disable_kcq: UNMAP_QUEUES); a
    fini that only halts the MEC leaves the HQDs active (pipe halts keep HQD state, issue 11 point 9), their
    rings in freed memory. (The KIQ itself is dequeued by MMIO.)"""
    def run(dequeue: bool):
        g = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, vram_size=512 << 20))
        sim = g.dev.pci.dev
        queues = [ComputeQueue(g), ComputeQueue(g, pipe=2, queue=3)]  # noqa: F841 (the driver holds them)
        with monkeypatch.context() as m:
            if not dequeue:
                m.setattr(KIQ, "unmap", lambda self, queues, action=1: None)
            g.fini()
        return sim.blocks["CP"].hqd_state()
    assert run(True) == []
    left = run(False)
    assert sorted(name for name, _ in left) == ["compute queue me 1 pipe 0 queue 0", "compute queue me 1 pipe 2 queue 3"]


def test_recover_needs_the_grbm_soft_reset_of_the_cp(gpu, monkeypatch):
    """A hung queue does not answer a dequeue request; only gfx_v11_0_soft_reset's GRBM_SOFT_RESET of the
    CP frees it (issue 17: recovery without it must fail)."""
    from amdrv.ip.gfx import GFX
    q = ComputeQueue(gpu)
    b = pm4.PM4()
    b.buf.extend((pm4.header(0x01, 0), 0))                    # no such packet: the queue hangs
    q.submit(b.buf)
    real = GFX.soft_reset
    update = Register.update

    def no_grbm_soft_reset(gfx):
        with monkeypatch.context() as m:                      # GRBM_SOFT_RESET of CP/GFX/CPF/CPC/CPG left out
            m.setattr(Register, "update", lambda self, **f: None if self.name == "GRBM_SOFT_RESET"
                      else update(self, **f))
            real(gfx)
    monkeypatch.setattr(GFX, "soft_reset", no_grbm_soft_reset)
    with pytest.raises(GFXError, match="did not (dequeue|come up)"):
        gpu.recover()                                         # the hung queue keeps the CP busy
    monkeypatch.setattr(GFX, "soft_reset", real)
    gpu.recover()
    _runs(q)


def test_recover_needs_the_hqd_dequeues(gpu, monkeypatch):
    """gfx_v11_0_soft_reset dequeues every MEC queue (CP_HQD_DEQUEUE_REQUEST RESET_WAVES) and waits for
    CP_HQD_ACTIVE 0 before the GRBM soft reset ("Failed to wait all pipes clean"): without the dequeues the
    KIQ and the compute queue stay active and the reset is refused."""
    from amdrv.ip.gfx import GFX
    q = ComputeQueue(gpu)
    real = GFX.soft_reset
    write = Register.write

    def no_dequeue(gfx):
        with monkeypatch.context() as m:
            m.setattr(Register, "write", lambda self, *a, **k: None if self.name == "CP_HQD_DEQUEUE_REQUEST"
                      else write(self, *a, **k))
            real(gfx)
    monkeypatch.setattr(GFX, "soft_reset", no_dequeue)
    with pytest.raises(GFXError, match=r"am:\S+: GFX \(GC 11\.0\.\d\): soft reset: ME1 pipe \d queue \d stays "
                                       r"active after CP_HQD_DEQUEUE_REQUEST"):
        gpu.recover()
    monkeypatch.setattr(GFX, "soft_reset", real)
    gpu.recover()
    _runs(q)


def test_cold_boot_needs_the_wait_for_the_rlc_autoload(sim_bus, monkeypatch):
    """Issue 17: the RLC autoload takes longer than the reads a boot makes before polling for it
    (gpusim.gfx AUTOLOAD_STEPS): a driver that does not wait (gfx_v11_0_wait_for_rlc_autoload_complete)
    unhalts the MEC too early and the boot fails."""
    from amdrv.am import AMError
    from amdrv.ip.gfx import GFX
    monkeypatch.setattr(GFX, "wait_for_rlc_autoload", lambda self, *a, **k: None)
    with pytest.raises(AMError, match="cold boot failed in gfx"):
        AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, vram_size=512 << 20))


def test_queues_need_the_wait_after_the_mec_unhalt(gpu, monkeypatch):
    """gfx_v11_0_cp_compute_enable's udelay(50): queues programmed while the MEC pipes are still starting
    are lost (gpusim.gfx MEC_START_STEPS). cp_compute_enable returns with the MEC ready (the boot and
    recover program queues after it); without its wait a queue set up right after does not work."""
    from amdrv.ip.gfx import GFX
    ComputeQueue(gpu)                                         # the KIQ comes up with the first queue
    with monkeypatch.context() as m:
        m.setattr(GFX, "wait_mec_start", lambda self: None)
        gpu.gfx.cp_compute_enable(False)
        gpu.gfx.cp_compute_enable(True)
        with pytest.raises(GFXError, match="KIQ .*: the HQD did not dequeue"):
            gpu.kiq.init()                                    # the queue programmed by MMIO, right after
    assert any("still starting" in e.message for e in gpu.dev.pci.dev.errors)
    gpu.gfx.cp_compute_enable(False)
    gpu.gfx.cp_compute_enable(True)
    gpu.kiq.init()
    _runs(ComputeQueue(gpu, pipe=1))


def test_a_queue_set_up_again_needs_its_rptr_zeroed(gpu, monkeypatch):
    """CP_HQD_PQ_RPTR is live and MAP_QUEUES loads it from the MQD: a queue mapped again with the read pointer
    its HQD still holds (gfx_v11_0_compute_mqd_init copies the register into mqd->cp_hqd_pq_rptr; this driver
    writes 0) starts at the old read pointer in its new, empty ring and runs the zeros there."""
    q = ComputeQueue(gpu, ring_size=4096)
    _runs(q)
    mqd_values = ComputeQueue._mqd_values

    def live_rptr(self):
        m = mqd_values(self)
        m["cp_hqd_pq_rptr"] = self.gc.CP_HQD_PQ_RPTR.read()      # the queue is selected here
        return m
    monkeypatch.setattr(ComputeQueue, "_mqd_values", live_rptr)
    q.init()
    done, packets = _release(gpu)
    q.submit(packets)
    with pytest.raises(QueueError):
        q.wait(done, 1, timeout_s=0.05, min_reads=500)


# ------------------------------------------------------------------ the KIQ maps the compute queues (issue 17)
def test_without_the_hdp_flush_after_the_mqd_the_mapped_queue_never_runs(gpu, monkeypatch):
    """MAP_QUEUES has the CP read the MQD from VRAM, past the HDP: an MQD written through BAR0 without the
    flush (amdgpu flushes before the GPU reads what the CPU wrote) is still the page's old content there,
    zeros here, and the queue the KIQ loads from it has no doorbell and no ring (issue 17)."""
    ComputeQueue(gpu)                                         # the KIQ is up
    write_mqd, inside = ComputeQueue._write_mqd, []

    def without_flush(self):
        inside.append(1)
        try:
            return write_mqd(self)
        finally:
            inside.pop()
    flush = type(gpu.nbio).hdp_flush
    monkeypatch.setattr(ComputeQueue, "_write_mqd", without_flush)
    monkeypatch.setattr(type(gpu.nbio), "hdp_flush", lambda self, *a: None if inside else flush(self, *a))
    q = ComputeQueue(gpu, pipe=1, queue=4)
    _stalls(q)
    monkeypatch.undo()
    q.init()                                                  # unmapped, written and flushed, mapped again
    _runs(q)


def test_a_compute_queue_runs_only_once_the_kiq_maps_it(gpu, monkeypatch):
    """Nothing but MAP_QUEUES loads a compute queue's HQD: a driver that writes the MQD and never maps it
    (amdgpu_gfx_enable_kcq) has a queue whose doorbells reach nothing."""
    ComputeQueue(gpu)
    monkeypatch.setattr(KIQ, "map", lambda self, q: None)
    q = ComputeQueue(gpu, pipe=2, queue=1)
    _stalls(q)
    assert "compute queue me 1 pipe 2 queue 1" not in dict(gpu.dev.pci.dev.blocks["CP"].hqd_state())
    monkeypatch.undo()
    q.init()
    _runs(q)


def test_the_kiq_maps_nothing_without_set_resources(gpu, monkeypatch):
    """amdgpu_gfx_enable_kcq sends SET_RESOURCES (the queue mask) before the MAP_QUEUES; without it the KIQ
    refuses the map and hangs at it (gpusim.cp: the firmware's queue mask, an assumption)."""
    monkeypatch.setattr(KIQ, "set_resources", lambda self: None)
    with pytest.raises(QueueError, match="MAP_QUEUES of the compute queue ME1 pipe 0 queue 0 did not complete"):
        ComputeQueue(gpu)
    assert any("no SET_RESOURCES" in e.message for e in gpu.dev.pci.dev.errors)
    monkeypatch.undo()
    gpu.recover()                                             # the KIQ set up again (and unstuck)
    _runs(ComputeQueue(gpu))


def test_the_kiq_slot_is_not_a_compute_queue(gpu):
    with pytest.raises(ValueError, match="the KIQ's"):
        ComputeQueue(gpu, pipe=3, queue=0)


def test_fini_without_stopping_sdma_leaves_a_hung_engine_to_the_next_boot(sim_bus, monkeypatch):
    """sdma_v6_0_hw_fini stops the rings (sdma_v6_0_gfx_stop) and halts the engines. An engine left running
    with F32_WPTR_POLL_ENABLE polls its write-pointer shadow on its own once the driver is gone (gpusim.sdma
    driver_gone): the page-table walk still reaches the shadow's host page (fini's cleared root is not
    flushed), which is freed, so the queue hangs and the next warm boot finds SDMA busy."""
    from amdrv.am import AMError
    from amdrv.ip.sdma import SDMA

    def run(stop: bool):
        g = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, vram_size=512 << 20))
        SDMAQueue(g)
        with monkeypatch.context() as m:
            if not stop:
                m.setattr(SDMA, "fini", lambda self: None)
            g.fini()
        g = AMGPU.open(pcie.open_function("sim", "navi31", bus=sim_bus, vram_size=512 << 20))
        g.fini()
        return g.boot_report
    assert run(True).kind == "warm"
    with pytest.raises(AMError, match="warm boot failed in sdma: .*not idle"):
        run(False)
    fn = pcie.open_function("sim", "navi31", bus=sim_bus)
    try:
        assert any("with no driver" in e.message for e in fn.dev.errors)
    finally:
        fn.close()


def test_a_kiq_without_its_rptr_report_address_stalls_once_its_ring_fills(gpu, monkeypatch, dropping_registers):
    """The driver learns where the KIQ reads only from its rptr report (gfx_v11_0_kiq_init_register writes
    CP_HQD_PQ_RPTR_REPORT_ADDR/_HI): without the address (power-on 0) the CP reports nothing, and once the
    driver has written a ring's worth it waits for room that never shows."""
    # the HQD registers are the GFX block's to write (gfx_v11_0_kiq_init_register)
    monkeypatch.setattr(gpu.gfx, "gc", dropping_registers(gpu.gfx.gc, {"CP_HQD_PQ_RPTR_REPORT_ADDR", "CP_HQD_PQ_RPTR_REPORT_ADDR_HI"}))
    q = ComputeQueue(gpu)
    monkeypatch.undo()
    with pytest.raises(QueueError, match="ring stays full"):
        for _ in range(200):             # ~28 dwords per set-up: the 2048-dword ring is full after ~73
            q.init()
    assert gpu.kiq.wptr >= 2048 - 32


class _InvertedWrites:
    """A register block whose registers named in `names` get every written value with all 32 bits inverted
    (tools/mutate.py's reg-flip), for the HQD registers the GFX block writes by MMIO."""

    def __init__(self, regs, names):
        self._regs, self._names = regs, names

    def __getattr__(self, name):
        r = getattr(self._regs, name)
        if name not in self._names:
            return r

        class Inverted:
            def write(self, value):
                r.write(~value & 0xFFFFFFFF)

            def __getattr__(self, attr):
                return getattr(r, attr)
        return Inverted()


def test_a_kiq_with_an_inverted_pq_control_fails_once_its_ring_wraps(gpu, monkeypatch):
    """tools/mutate.py's reg-flip:GC.CP_HQD_PQ_CONTROL (the KIQ's, the one HQD written by MMIO): the inverted
    value has QUEUE_SIZE 0x35, a ring of 2^54 dwords for the CP where the driver's is 2048 (gfx_v11_0_kiq_init_
    register: order_base_2(ring_size / 4) - 1), and NO_UPDATE_RPTR 1 (no rptr report: what kfd sets for AQL
    queues, whose read index the CP reports otherwise). The workload's KIQ never passes 2048 dwords; here it
    does, and the driver either waits for room the CP never reports or wraps where the CP does not."""
    monkeypatch.setattr(gpu.gfx, "gc", _InvertedWrites(gpu.gfx.gc, {"CP_HQD_PQ_CONTROL"}))
    q = ComputeQueue(gpu)
    monkeypatch.undo()
    with gpu.gfx.selected(1, gpu.kiq.pipe, gpu.kiq.queue) as gc:
        assert gc.CP_HQD_PQ_CONTROL.decode()["QUEUE_SIZE"] == 0x35
    with pytest.raises(QueueError, match="ring stays full|did not complete"):
        for _ in range(200):             # ~23 dwords per set-up: past 2048 dwords after ~90
            q.init()
    assert gpu.kiq.wptr >= 2048 - 32


def test_a_kiq_with_its_pq_control_right_runs_past_its_ring_size(gpu):
    """The counterpart of the test above: the KIQ as the driver programs it wraps its 2048-dword ring and
    goes on mapping (a compute queue set up again 100 times: ~2300 dwords)."""
    q = ComputeQueue(gpu)
    for _ in range(100):
        q.init()
    assert gpu.kiq.wptr > 2048
    _runs(q)


def test_submit_takes_dwords_by_value_whatever_the_array_type(gpu):
    """An int64 numpy array's (or array('Q')'s) bytes are not its dwords: they used to be copied as if they were,
    the first n dwords of 2n, so the engine read half a packet stream and hung."""
    s = SDMAQueue(gpu)
    host = HostBuffer(gpu, 4096)
    done = Fence(host, 0)
    for value, wrap in ((1, lambda b: np.array(b, np.int64)), (2, lambda b: array("Q", b)), (3, list)):
        b = S.SDMABuilder()
        b.fence(done.va, value)
        s.submit(wrap(b.buf))
        s.wait(done, value, timeout_s=5)
    with pytest.raises(QueueError, match=r"SDMA0 queue 0: submit of 2 values that are not all 32-bit unsigned"):
        s.submit([1, 1 << 32])
