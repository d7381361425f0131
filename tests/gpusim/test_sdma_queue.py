"""The SDMA 6.0 gfx ring queue and its packets, driven as a minimal driver would from upstream facts: a GPU
booted by amdrv.am, the ring set up as sdma_v6_0_gfx_resume does, packets built from the generated
sdma_v6_0_0_pkt_open.h table, the write pointer rung through the doorbell as sdma_v6_0_ring_set_wptr does
(WDOORBELL64 of the byte count), results read back through BAR0 and host memory."""
import struct

import pytest

import pcie
from amdrv.am import AMGPU
from amdrv.autogen import ih as IHIDS
from amdrv.autogen import sdma6 as S

SDMA_ENGINE = (0x100, 0x10A)   # AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0/1 (amdgpu_doorbell.h); soc21 uses them
MiB = 1 << 20


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


@pytest.fixture
def gpu(sim_bus):
    g = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus, vram_size=1 << 30))
    yield g
    g.dev.close()


def sim(gpu):
    return gpu.dev.pci.dev


def pkt(name, **fields):
    """One packet's dwords from the generated table: fields by name, each in the dword the table says."""
    layout = S.PACKETS[name]
    dws = [0] * len(layout)
    for dw, names in layout.items():
        for f, (shift, mask) in names.items():
            if f in fields:
                v = fields.pop(f)
                assert v & ~mask == 0, (name, f, v)
                dws[dw] |= v << shift
    assert not fields, fields
    return dws


def lo(v):
    return v & 0xFFFFFFFF


def hi(v):
    return v >> 32


def copy(src, dst, n):
    return pkt("COPY_LINEAR", op=S.SDMA_OP_COPY, sub_op=S.SDMA_SUBOP_COPY_LINEAR, count=n - 1,
               src_addr_31_0=lo(src), src_addr_63_32=hi(src), dst_addr_31_0=lo(dst), dst_addr_63_32=hi(dst))


def fence(addr, value):
    return pkt("FENCE", op=S.SDMA_OP_FENCE, mtype=3, addr_31_0=lo(addr), addr_63_32=hi(addr), data=value)


def write(addr, *values):
    head = pkt("WRITE_UNTILED", op=S.SDMA_OP_WRITE, sub_op=S.SDMA_SUBOP_WRITE_LINEAR, dst_addr_31_0=lo(addr),
               dst_addr_63_32=hi(addr), count=len(values) - 1)
    return head[:4] + list(values)


def timestamp(addr):
    return pkt("TIMESTAMP_GET_GLOBAL", op=S.SDMA_OP_TIMESTAMP, sub_op=S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL,
               write_addr_31_3=lo(addr) >> 3, write_addr_63_32=hi(addr))


def poll_mem(addr, ref, mask=0xFFFFFFFF, func=3, retry=0xFFF, interval=4):
    return pkt("POLL_REGMEM", op=S.SDMA_OP_POLL_REGMEM, func=func, mem_poll=1, addr_31_0=lo(addr),
               addr_63_32=hi(addr), value=ref, mask=mask, retry_count=retry, interval=interval)


class Ring:
    """Engine i's gfx ring, set up as sdma_v6_0_gfx_resume does on bare metal (plus set_trap_irq_state)."""

    def __init__(self, gpu, i=0, size=4096):
        self.gpu, self.i, self.size, self.wptr = gpu, i, size, 0
        self.gc = gpu.dev.reg("GC")
        self.buf = gpu.gmc.map_vram(size)
        self.wb = gpu.gmc.map_vram(4096)
        self.doorbell = SDMA_ENGINE[i] << 1
        self.resume()

    def r(self, name):
        return self.gc.reg(f"SDMA{self.i}_{name}")

    def resume(self):
        r = self.r
        r("SEM_WAIT_FAIL_TIMER_CNTL").write(0)
        cntl = r("QUEUE0_RB_CNTL").defn.encode(r("QUEUE0_RB_CNTL").read(), RB_SIZE=(self.size // 4).bit_length() - 1,
                                                RB_PRIV=1)
        r("QUEUE0_RB_CNTL").write(cntl)
        for name in ("QUEUE0_RB_RPTR", "QUEUE0_RB_RPTR_HI", "QUEUE0_RB_WPTR", "QUEUE0_RB_WPTR_HI"):
            r(name).write(0)
        r("QUEUE0_RB_WPTR_POLL_ADDR_LO").write(lo(self.wb.va + 64))
        r("QUEUE0_RB_WPTR_POLL_ADDR_HI").write(hi(self.wb.va + 64))
        r("QUEUE0_RB_RPTR_ADDR_HI").write(hi(self.wb.va))
        r("QUEUE0_RB_RPTR_ADDR_LO").write(lo(self.wb.va) & 0xFFFFFFFC)
        cntl = r("QUEUE0_RB_CNTL").defn.encode(cntl, RPTR_WRITEBACK_ENABLE=1, WPTR_POLL_ENABLE=0,
                                                F32_WPTR_POLL_ENABLE=1)
        r("QUEUE0_RB_BASE").write(lo(self.buf.va >> 8))
        r("QUEUE0_RB_BASE_HI").write(self.buf.va >> 40)
        self.wptr = 0
        r("QUEUE0_MINOR_PTR_UPDATE").write(1)
        r("QUEUE0_RB_WPTR").write(0)
        r("QUEUE0_RB_WPTR_HI").write(0)
        r("QUEUE0_DOORBELL").update(ENABLE=1)
        r("QUEUE0_DOORBELL_OFFSET").update(OFFSET=self.doorbell)
        self.gpu.nbio.sdma_doorbell_range(0, SDMA_ENGINE[0] << 1, 20 * 2)   # instance 0's entry covers both
        r("QUEUE0_MINOR_PTR_UPDATE").write(0)
        r("UTCL1_CNTL").update(RESP_MODE=3, REDO_DELAY=9)
        r("F32_CNTL").update(HALT=0, TH1_RESET=0)
        r("QUEUE0_RB_CNTL").write(cntl, RB_ENABLE=1)
        r("QUEUE0_IB_CNTL").update(IB_ENABLE=1)
        r("CNTL").update(TRAP_ENABLE=1)

    def emit(self, *packets):
        """Writes packets at wptr (wrapping) and rings the doorbell with the new byte count."""
        data = b"".join(struct.pack(f"<{len(p)}I", *p) for p in packets)
        for k in range(0, len(data), 4):
            self.gpu.dev.vram.write(self.buf.vram.addr + (self.wptr + k) % self.size, data[k:k + 4])
        self.wptr += len(data)
        self.ring()

    def ring(self):
        """sdma_v6_0_ring_set_wptr: the wptr shadow (RB_WPTR_POLL_ADDR, which the F32 polls), then the doorbell."""
        self.gpu.dev.vram.write(self.wb.vram.addr + 64, struct.pack("<Q", self.wptr))
        self.gpu.nbio.hdp_flush()   # the ring, the shadow and the tests' data are VRAM written through BAR0
        self.gpu.dev.pci.bar(2).write64(4 * self.doorbell, self.wptr)

    def rptr(self):
        """The written-back read pointer (a u64 byte count, sdma_v6_0_ring_get_rptr)."""
        return struct.unpack("<Q", self.gpu.dev.vram.read(self.wb.vram.addr, 8))[0]

    def idle(self):
        return self.r("STATUS_REG").decode()["IDLE"] == 1

    def wait_idle(self, polls=100_000):
        """Polls STATUS_REG (each read one clock step, as a driver's wait) until the engine is idle."""
        for n in range(polls):
            if self.idle():
                return n
        raise AssertionError(f"SDMA{self.i} still busy after {polls} polls: {sim(self.gpu).errors[-3:]}")

    def soft_reset(self):
        """sdma_v6_0_soft_reset for this engine (gfx_stop, freeze, halt, GRBM pulse), then the restart."""
        r = self.r
        r("QUEUE0_RB_CNTL").update(RB_ENABLE=0)
        r("QUEUE0_IB_CNTL").update(IB_ENABLE=0)
        r("FREEZE").update(FREEZE=1)
        r("F32_CNTL").update(HALT=1, TH1_RESET=1)
        r("QUEUE0_PREEMPT").write(0)
        self.gc.GRBM_SOFT_RESET.write(self.gc.GRBM_SOFT_RESET.encode(**{f"SOFT_RESET_SDMA{self.i}": 1}))
        self.gc.GRBM_SOFT_RESET.read()
        self.gc.GRBM_SOFT_RESET.write(0)
        self.gc.GRBM_SOFT_RESET.read()
        r("FREEZE").update(FREEZE=0)
        self.resume()


def vram(gpu, m, off, n):
    return gpu.dev.vram.read(m.vram.addr + off, n)


def u32(gpu, m, off=0):
    return struct.unpack("<I", vram(gpu, m, off, 4))[0]


def pattern(n, seed):
    """n bytes with a 251-byte period: a copy shifted by any page or dword offset shows."""
    return (bytes(range(251)) * (n // 251 + 2))[seed % 251:seed % 251 + n]


def test_write_and_fence_as_the_ring_tests_do(gpu):
    ring = Ring(gpu)
    wb = gpu.gmc.map_vram(4096)
    gpu.dev.vram.write32(wb.vram.addr, 0xCAFEDEAD)
    ring.emit(write(wb.va, 0xDEADBEEF))                          # sdma_v6_0_ring_test_ring
    assert u32(gpu, wb) == 0xDEADBEEF
    ring.emit(write(wb.va + 8, 1, 2, 3), fence(wb.va + 4, 42))
    assert u32(gpu, wb, 4) == 42 and vram(gpu, wb, 8, 12) == struct.pack("<3I", 1, 2, 3)
    assert ring.rptr() == ring.wptr and ring.idle()
    assert ring.r("QUEUE0_RB_RPTR").read() == ring.wptr
    assert not sim(gpu).errors, sim(gpu).errors


@pytest.mark.parametrize("n, src_off, dst_off", [(1, 0, 0), (3, 1, 5), (4097, 4095, 3), (3 * MiB + 17, 9, 4093),
                                                  (5 * MiB, 0, 0)])
def test_copy_vram_to_vram_any_size_and_alignment(gpu, n, src_off, dst_off):
    ring = Ring(gpu)
    src, dst = gpu.gmc.map_vram(n + 8192), gpu.gmc.map_vram(n + 8192)
    data = pattern(n, n)
    gpu.dev.vram.write(src.vram.addr + src_off, data)
    gpu.dev.vram.write(dst.vram.addr + dst_off - 1 if dst_off else dst.vram.addr + n, b"\x5a")
    ring.emit(copy(src.va + src_off, dst.va + dst_off, n))
    if n > 4 * MiB:     # past one 4 MiB slice the copy goes on after the doorbell, as the clock steps
        assert not ring.idle() and ring.rptr() == 0
        ring.wait_idle()
    assert vram(gpu, dst, dst_off, n) == data
    if dst_off:
        assert vram(gpu, dst, dst_off - 1, 1) == b"\x5a"                 # not a byte before
    assert vram(gpu, dst, dst_off + n, 1) in (b"\x00", b"\x5a")          # nor after
    assert ring.rptr() == ring.wptr and not sim(gpu).errors


def test_copy_between_host_and_vram(gpu):
    ring = Ring(gpu)
    n = MiB + 4099
    pages = (n + 8192 + 4095) & ~4095  # the GPU maps whole pages
    host_src, host_dst = gpu.dev.pci.alloc_dma(pages), gpu.dev.pci.alloc_dma(pages)
    hs, hd = gpu.gmc.map_system(host_src), gpu.gmc.map_system(host_dst)
    v = gpu.gmc.map_vram(n + 8192)
    data = pattern(n, 3)
    host_src.view[7:7 + n] = data
    ring.emit(copy(hs.va + 7, v.va + 4001, n), copy(v.va + 4001, hd.va + 1, n))
    assert vram(gpu, v, 4001, n) == data
    assert bytes(host_dst.view[1:1 + n]) == data and host_dst.view[0] == 0 and host_dst.view[n + 1] == 0
    ring.emit(fence(hd.va + n + 4095 & ~3, 7))                           # a fence in host memory
    assert struct.unpack_from("<I", host_dst.view, n + 4095 & ~3)[0] == 7
    assert not sim(gpu).errors


def test_constant_fill_sizes(gpu):
    ring = Ring(gpu)
    m = gpu.gmc.map_vram(3 * MiB)
    fill = dict(op=S.SDMA_OP_CONST_FILL, src_data_31_0=0xA1B2C3D4)
    ring.emit(pkt("CONSTANT_FILL", dst_addr_31_0=lo(m.va + 1), dst_addr_63_32=hi(m.va), count=2 * MiB + 2, **fill),
              pkt("CONSTANT_FILL", fillsize=2, dst_addr_31_0=lo(m.va + 2 * MiB + 4096),
                  dst_addr_63_32=hi(m.va), count=15, **fill))
    assert vram(gpu, m, 0, 1) == b"\0" and vram(gpu, m, 1, 2 * MiB + 3) == b"\xd4" * (2 * MiB + 3)
    assert vram(gpu, m, 2 * MiB + 4, 1) == b"\0"
    assert vram(gpu, m, 2 * MiB + 4096, 20) == struct.pack("<4I", *[0xA1B2C3D4] * 4) + b"\0" * 4
    assert not sim(gpu).errors


def test_timestamps_follow_the_clock_and_copies_take_time(gpu):
    ring = Ring(gpu)
    ts, src, dst = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(4 * MiB), gpu.gmc.map_vram(4 * MiB)
    ring.emit(timestamp(ts.va), copy(src.va, dst.va, 4 * MiB), timestamp(ts.va + 8),
              copy(src.va, dst.va, 1), timestamp(ts.va + 16))
    t0, t1, t2 = struct.unpack("<3Q", vram(gpu, ts, 0, 24))
    assert 0 < t0 < t1 < t2
    assert t1 - t0 >= 4 * MiB // (64 << 10) * 100       # more than 64 GB/s would be too fast at 100 MHz ticks
    gpu.dev.reg("GC").GRBM_STATUS.read()
    ring.emit(timestamp(ts.va + 24))
    assert struct.unpack("<Q", vram(gpu, ts, 24, 8))[0] > t2
    bad = timestamp(ts.va + 32)
    bad[1] |= 4                                          # WRITE_ADDR_31_3: bits 2:0 are not an address
    ring.emit(bad)
    assert sim(gpu).blocks["SDMA"].queues[0].hung and "not 8-byte aligned" in str(sim(gpu).errors[-1])


def test_poll_blocks_until_memory_matches_then_steps_or_a_doorbell_release_it(gpu):
    ring = Ring(gpu)
    host = gpu.dev.pci.alloc_dma(4096)
    h = gpu.gmc.map_system(host)
    out = gpu.gmc.map_vram(4096)
    ring.emit(poll_mem(h.va, 1, mask=0xFF), fence(out.va, 5))
    assert u32(gpu, out) == 0 and not ring.idle()                # blocked: busy, fence not written
    rptr = ring.rptr()
    struct.pack_into("<I", host.view, 0, 0x1200)                   # masked off: still no match
    for _ in range(10):
        ring.idle()
    assert u32(gpu, out) == 0 and ring.rptr() == rptr
    struct.pack_into("<I", host.view, 0, 0x1201)
    for _ in range(5):                                             # the driver waits on a register
        ring.idle()
    assert u32(gpu, out) == 5 and ring.idle()
    # a doorbell re-checks at once (no clock step needed), with FUNC >= this time
    ring.emit(poll_mem(h.va + 4, 3, func=5), fence(out.va, 6))
    assert u32(gpu, out) == 5
    struct.pack_into("<I", host.view, 4, 9)
    ring.emit(fence(out.va + 4, 7))
    assert u32(gpu, out) == 6 and u32(gpu, out, 4) == 7
    assert not sim(gpu).errors


def test_hdp_flush_register_poll_as_upstream_emits_it(gpu):
    ring = Ring(gpu, i=1)
    nbio = gpu.dev.reg("NBIF")
    done, req = nbio.BIF_BX_PF0_GPU_HDP_FLUSH_DONE, nbio.BIF_BX_PF0_GPU_HDP_FLUSH_REQ
    mask = done.defn.fields["SDMA0"].mask << 1     # ref_and_mask_sdma0 << ring->me; .addr: byte addresses (reg << 2)
    out = gpu.gmc.map_vram(4096)
    ring.emit(pkt("POLL_REGMEM", op=S.SDMA_OP_POLL_REGMEM, hdp_flush=1, func=3, addr_31_0=done.addr,
                  addr_63_32=req.addr, value=mask, mask=mask, retry_count=0xFFF, interval=10),
              fence(out.va, 1))
    assert u32(gpu, out) == 0 and not ring.idle()                # the done bit follows a step later
    for _ in range(12):
        ring.idle()
    assert u32(gpu, out) == 1 and done.read() & mask
    assert not sim(gpu).errors


def test_trap_posts_the_sdma_trap_iv(gpu):
    gpu.ih.poll()
    ring = Ring(gpu, i=1)
    ring.emit(pkt("TRAP", op=S.SDMA_OP_TRAP, int_context=0x1234))
    iv = [e for e in gpu.ih.poll() if e.src_id == IHIDS.GFX_11_0_0__SRCID__SDMA_TRAP]
    assert len(iv) == 1
    assert iv[0].client_id == IHIDS.SOC21_IH_CLIENTID_GFX and iv[0].src_data[0] == 0x1234
    assert (iv[0].ring_id & 0xF, iv[0].ring_id >> 4) == (0, 1)    # queue 0 of instance 1
    ring.r("CNTL").update(TRAP_ENABLE=0)                          # set_trap_irq_state(disable)
    ring.emit(pkt("TRAP", op=S.SDMA_OP_TRAP, int_context=1))
    assert gpu.ih.poll() == [] and ring.idle()


def test_indirect_buffer_and_nops(gpu):
    ring = Ring(gpu)
    ib, out = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(4096)
    body = write(out.va, 11, 12) + fence(out.va + 8, 13) + pkt("NOP", op=S.SDMA_OP_NOP)[:1]
    gpu.dev.vram.write(ib.vram.addr, struct.pack(f"<{len(body)}I", *body))
    nops = [pkt("NOP", op=S.SDMA_OP_NOP, count=1)[0], 0xFFFFFFFF]   # burst NOP: COUNT more dwords skipped
    ring.emit(nops, pkt("INDIRECT", op=S.SDMA_OP_INDIRECT, ib_base_31_0=lo(ib.va), ib_base_63_32=hi(ib.va),
                        ib_size=len(body)), fence(out.va + 12, 14))
    assert struct.unpack("<4I", vram(gpu, out, 0, 16)) == (11, 12, 13, 14)
    assert ring.rptr() == ring.wptr and not sim(gpu).errors
    nested = pkt("INDIRECT", op=S.SDMA_OP_INDIRECT, ib_base_31_0=lo(ib.va), ib_base_63_32=hi(ib.va), ib_size=6)
    gpu.dev.vram.write(ib.vram.addr, struct.pack("<6I", *nested))
    ring.emit(pkt("INDIRECT", op=S.SDMA_OP_INDIRECT, ib_base_31_0=lo(ib.va), ib_base_63_32=hi(ib.va), ib_size=6))
    assert "may not contain an INDIRECT" in str(sim(gpu).errors[-1])


def test_the_ring_wraps(gpu):
    ring = Ring(gpu, size=256)
    out = gpu.gmc.map_vram(4096)
    for k in range(40):                                            # 40 x 16 bytes: the 256-byte ring wraps
        ring.emit(fence(out.va + 4 * (k % 8), k))
    assert struct.unpack("<8I", vram(gpu, out, 0, 32)) == tuple(range(32, 40))
    assert ring.rptr() == ring.wptr == 40 * 16 and not sim(gpu).errors


def test_unknown_opcode_hangs_until_soft_reset(gpu):
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    ring.emit([3])                                                 # no SDMA_OP 3 exists
    at = ring.rptr()
    ring.emit(fence(out.va, 1))
    assert u32(gpu, out) == 0 and ring.rptr() == at and not ring.idle()
    assert "unknown opcode 3" in str(sim(gpu).errors[0]) and "SOFT_RESET_SDMA0" in str(sim(gpu).errors[0])
    for _ in range(20):                                            # time does not heal it
        ring.idle()
    ring.ring()
    assert u32(gpu, out) == 0
    ring.soft_reset()
    ring.emit(fence(out.va, 2))
    assert u32(gpu, out) == 2 and ring.idle()


@pytest.mark.parametrize("bad, why", [
    (lambda va: copy(va, va + 64, 1)[:1] + [1 << 30] + copy(va, va + 64, 1)[2:], "above the 30-bit count"),
    (lambda va: write(va + 2, 1), "not dword aligned"),
    (lambda va: fence(va + 1, 1), "not dword aligned"),
    (lambda va: pkt("COPY_LINEAR", op=S.SDMA_OP_COPY, sub_op=S.SDMA_SUBOP_COPY_TILED), "does not execute"),
    (lambda va: poll_mem(va, 0, func=7), "FUNC 7 is reserved"),
    (lambda va: poll_mem(va, 1, retry=3, interval=1), "no match after 3 retries"),
    (lambda va: pkt("ATOMIC", op=S.SDMA_OP_ATOMIC), "does not execute"),
])
def test_malformed_packets_hang(gpu, bad, why):
    ring = Ring(gpu)
    m = gpu.gmc.map_vram(4096)
    ring.emit(bad(m.va))
    for _ in range(10):
        ring.idle()
    assert sim(gpu).blocks["SDMA"].queues[0].hung and why in str(sim(gpu).errors[-1])
    assert ring.rptr() == 0 and not ring.idle()


def test_a_copy_from_an_unmapped_address_faults_and_hangs(gpu):
    """With the faults not redirected (set_fault_enable_default(false), amdgpu_vm_fault_stop=always) the
    SDMA engine stops at the copy."""
    ring = Ring(gpu)
    gpu.ih.poll()
    dst = gpu.gmc.map_vram(4096)
    gone = gpu.gmc.map_vram(8192)
    gpu.gmc.unmap(gone)
    cntl = gpu.dev.reg("GC").GCVM_L2_PROTECTION_FAULT_CNTL
    saved = cntl.read()
    cntl.write(saved & 3)       # every *_PROTECTION_FAULT_ENABLE_DEFAULT off
    try:
        ring.emit(copy(gone.va + 4096 + 12, dst.va, 16))
    finally:
        cntl.write(saved)
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address == gone.va + 4096 and "SDMA0" in str(fault) and not fault.write
    ivs = [e for e in gpu.ih.poll() if e.src_id == IHIDS.UTCL2_1_0__SRCID__FAULT]
    assert len(ivs) == 1 and ivs[0].client_id == IHIDS.SOC21_IH_CLIENTID_GFX
    assert "faulted" in str(sim(gpu).errors[-1]) and ring.rptr() == 0 and not ring.idle()
    ring.soft_reset()
    ring.emit(fence(dst.va, 3))
    assert u32(gpu, dst) == 3


def test_a_copy_from_an_unmapped_address_reads_the_default_page(gpu):
    """As the driver programs it (set_fault_enable_default(true)) the copy reads the default page, the
    engine carries on; the fault is latched and posted."""
    ring = Ring(gpu)
    gpu.ih.poll()
    dst = gpu.gmc.map_vram(4096)
    gone = gpu.gmc.map_vram(8192)
    gpu.gmc.unmap(gone)
    gpu.gmc.dummy_page.view[12:28] = b"D" * 16
    ring.emit(copy(gone.va + 4096 + 12, dst.va, 16) + fence(dst.va + 64, 5))
    assert gpu.dev.vram.read(dst.vram.addr, 16) == b"D" * 16 and u32(gpu, dst, 64) == 5 and ring.idle()
    fault = gpu.gmc.decode_fault("GC")
    assert fault is not None and fault.address == gone.va + 4096 and "SDMA0" in str(fault)
    assert [e for e in gpu.ih.poll() if e.src_id == IHIDS.UTCL2_1_0__SRCID__FAULT]


def test_nothing_runs_while_halted_or_disabled(gpu):
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    ring.r("F32_CNTL").update(HALT=1)
    ring.emit(fence(out.va, 1))
    for _ in range(5):
        ring.idle()
    assert u32(gpu, out) == 0 and ring.rptr() == 0
    ring.r("QUEUE0_RB_CNTL").update(RB_ENABLE=0)
    ring.r("F32_CNTL").update(HALT=0)
    ring.idle()
    assert u32(gpu, out) == 0
    ring.r("QUEUE0_RB_CNTL").update(RB_ENABLE=1)                  # both allow it: the pending work runs
    ring.idle()
    assert u32(gpu, out) == 1 and ring.rptr() == ring.wptr


def test_a_write_pointer_behind_the_read_pointer_hangs(gpu):
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    ring.emit(fence(out.va, 1))
    ring.wptr = 8                                                   # masked/backwards: not how SDMA v6 counts
    ring.ring()
    assert "behind the read pointer" in str(sim(gpu).errors[-1]) and not ring.idle()


def test_32bit_doorbell_and_register_write_pointers(gpu):
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    packet = fence(out.va, 1)
    gpu.dev.vram.write(ring.buf.vram.addr, struct.pack("<4I", *packet))
    ring.wptr = 16
    gpu.dev.vram.write(ring.wb.vram.addr + 64, struct.pack("<Q", ring.wptr))   # the shadow the F32 polls
    gpu.nbio.hdp_flush()   # the ring and the shadow are VRAM written through BAR0
    gpu.dev.pci.bar(2).write32(4 * ring.doorbell, ring.wptr)     # the upper half comes from the dword above
    assert u32(gpu, out) == 1
    ring.r("QUEUE0_DOORBELL").update(ENABLE=0)                    # use_doorbell false: RB_WPTR/_HI registers
    gpu.dev.vram.write(ring.buf.vram.addr + 16, struct.pack("<4I", *fence(out.va, 2)))
    gpu.nbio.hdp_flush()   # the ring is VRAM written through BAR0
    ring.r("QUEUE0_RB_WPTR").write(32)
    ring.r("QUEUE0_RB_WPTR_HI").write(0)
    ring.idle()
    assert u32(gpu, out) == 2 and ring.rptr() == 32 and not sim(gpu).errors


def test_a_blocked_poll_survives_save_and_load(gpu, tmp_path):
    from gpusim import persist
    ring = Ring(gpu)
    flag, out = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(4096)
    ring.emit(poll_mem(flag.va, 1), fence(out.va, 9))
    persist.save(sim(gpu), tmp_path / "gpu.state")
    dev = persist.load(tmp_path / "gpu.state")
    dev.vram.write32(flag.vram.addr, 1)     # the simulator's own memory: no HDP in the way
    dev.step(10)
    assert dev.vram.read32(out.vram.addr) == 9 and not dev.blocks["SDMA"].queues[0].poll
    assert u32(gpu, out) == 0                                      # the original device still waits


def test_with_the_asynchronous_clock_the_queue_runs_on_its_own(gpu):
    import time
    ring = Ring(gpu)
    flag, out = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(4096)
    sim(gpu).start_async()
    try:
        ring.emit(poll_mem(flag.va, 1), fence(out.va, 4))
        gpu.dev.vram.write32(flag.vram.addr, 1)
        gpu.nbio.hdp_flush()
        deadline = time.monotonic() + 5
        while u32(gpu, out) != 4 and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        sim(gpu).stop_async()
    assert u32(gpu, out) == 4 and not sim(gpu).errors


def test_a_copy_run_from_a_poll_retry_takes_time_without_stepping_the_clock_back(gpu):
    ring = Ring(gpu)
    flag, ts = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(4096)
    src, dst = gpu.gmc.map_vram(2 * MiB), gpu.gmc.map_vram(2 * MiB)
    ring.emit(poll_mem(flag.va, 1, interval=1), timestamp(ts.va), copy(src.va, dst.va, 2 * MiB), timestamp(ts.va + 8))
    gpu.dev.vram.write32(flag.vram.addr, 1)
    gpu.nbio.hdp_flush()
    before = sim(gpu).steps
    ring.idle()                                          # the retry runs inside this read's clock step
    assert sim(gpu).steps == before + 1
    t0, t1 = struct.unpack("<2Q", vram(gpu, ts, 0, 16))
    assert t1 - t0 >= 2 * MiB // (32 << 10) * 100
    ring.emit(timestamp(ts.va + 16))
    assert struct.unpack("<Q", vram(gpu, ts, 16, 8))[0] >= t1 and ring.idle()


def test_the_f32_reads_the_wptr_shadow_when_a_doorbell_wakes_it(gpu):
    """F32_WPTR_POLL_ENABLE (gfx_resume sets it): the write pointer comes from the shadow at
    RB_WPTR_POLL_ADDR, which sdma_v6_0_ring_set_wptr stores before ringing; a doorbell alone is not enough."""
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    gpu.dev.vram.write(ring.buf.vram.addr, struct.pack("<4I", *fence(out.va, 1)))
    gpu.nbio.hdp_flush()
    gpu.dev.pci.bar(2).write64(4 * ring.doorbell, 16)            # the shadow still says 0
    assert u32(gpu, out) == 0 and ring.r("QUEUE0_RB_WPTR").read() == 0
    gpu.dev.vram.write(ring.wb.vram.addr + 64, struct.pack("<Q", 16))
    gpu.nbio.hdp_flush()
    gpu.dev.pci.bar(2).write64(4 * ring.doorbell, 16)
    assert u32(gpu, out) == 1
    ring.r("QUEUE0_RB_CNTL").update(F32_WPTR_POLL_ENABLE=0)       # not polling: the doorbell's value counts
    gpu.dev.vram.write(ring.buf.vram.addr + 16, struct.pack("<4I", *fence(out.va, 2)))
    gpu.nbio.hdp_flush()
    gpu.dev.pci.bar(2).write64(4 * ring.doorbell, 32)
    assert u32(gpu, out) == 2 and not sim(gpu).errors


def test_minor_ptr_update_holds_the_pointers_until_it_clears(gpu):
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    ring.r("QUEUE0_MINOR_PTR_UPDATE").write(1)
    ring.emit(fence(out.va, 1))
    ring.idle()
    assert u32(gpu, out) == 0 and not ring.idle()                 # work pending, held
    ring.r("QUEUE0_MINOR_PTR_UPDATE").write(0)
    ring.idle()
    assert u32(gpu, out) == 1 and ring.idle()


@pytest.mark.parametrize("stop_first", [True, False])
def test_unhalting_an_enabled_ring_resumes_it_from_its_shadow(gpu, stop_first):
    """hw_fini halts after sdma_v6_0_gfx_stop; a ring left enabled is resumed at the next unhalt, reading
    its wptr shadow: freed memory there (here: unmapped) faults and hangs the queue."""
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    ring.emit(fence(out.va, 1))
    assert u32(gpu, out) == 1
    if stop_first:
        ring.r("QUEUE0_RB_CNTL").update(RB_ENABLE=0)
        ring.r("QUEUE0_IB_CNTL").update(IB_ENABLE=0)
    ring.r("F32_CNTL").update(HALT=1)
    gpu.gmc.unmap(ring.wb)                                         # the driver exits, its memory goes
    ring.r("F32_CNTL").update(HALT=0)
    idle = [ring.idle() for _ in range(3)][-1]
    errors = [str(e) for e in sim(gpu).errors]
    fault = gpu.gmc.decode_fault("GC")
    if stop_first:
        assert idle and not errors and fault is None
    else:
        # the shadow read faulted (redirected to the default page, as the driver programs faults) and what
        # came back is no valid write pointer: the queue hangs
        assert fault is not None and fault.address == ring.wb.va + 64 >> 12 << 12
        assert not idle and any("SDMA0 gfx ring hung" in e for e in errors)


def test_gcr_req_writes_gl2_back_as_sdma_v6_0_ring_emit_mem_sync_asks(gpu):
    """SDMA's GCR_REQ (sdma_v6_0_ring_emit_mem_sync) carries the GCR actions: a shader's store still dirty
    in GL2 reaches VRAM (and the host through BAR0) only with GL2_WB; GL2_INV alone keeps it."""
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    gl2 = sim(gpu).blocks["GL2"]
    gl2.store((False, out.vram.addr), 0, 16, b"from a shader")   # MTYPE NC: write-back
    assert vram(gpu, out, 16, 13) == bytes(13)
    ring.emit(pkt("GCR_REQ", op=S.SDMA_OP_GCR_REQ, gcr_control_15_0=1 << 14))          # GL2_INV only
    assert vram(gpu, out, 16, 13) == bytes(13) and gl2.dirty_bytes == 13
    ring.emit(pkt("GCR_REQ", op=S.SDMA_OP_GCR_REQ, gcr_control_15_0=1 << 15 | 1 << 14))  # GL2_WB | GL2_INV
    assert vram(gpu, out, 16, 13) == b"from a shader" and gl2.dirty_bytes == 0
    assert gl2.actions[-1].startswith("SDMA0 GCR_REQ: GL2_WB GL2_INV")
    assert sim(gpu).errors == [] and ring.idle()


def test_sdma_reads_through_gl2(gpu):
    """SDMA is a GL2 client: a copy sees a shader's store still dirty in GL2 (the host does not)."""
    ring = Ring(gpu)
    src, dst = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(4096)
    sim(gpu).blocks["GL2"].store((False, src.vram.addr), 0, 0, b"dirty")
    ring.emit(copy(src.va, dst.va, 5))
    assert vram(gpu, src, 0, 5) == bytes(5) and vram(gpu, dst, 0, 5) == b"dirty"


def test_a_frozen_engine_serves_nothing_until_unfrozen_or_soft_reset(gpu):
    """SDMA0_FREEZE.FREEZE stops the engine at a packet boundary (FROZEN reads 1; sdma_v5_x stop_queue
    polls for it); writing FREEZE 0 (restore_queue's "unfreeze") or the GRBM soft reset of the engine
    (sdma_v6_0_soft_reset sets FREEZE and restarts the engine after the reset without clearing it) lets the
    queued work run."""
    ring = Ring(gpu)
    out = gpu.gmc.map_vram(4096)
    ring.r("FREEZE").update(FREEZE=1)
    assert ring.r("FREEZE").decode()["FROZEN"] == 1
    ring.emit(fence(out.va, 1))
    for _ in range(5):
        ring.idle()
    assert u32(gpu, out) == 0 and ring.rptr() == 0
    ring.r("FREEZE").update(FREEZE=0)
    ring.idle()
    assert u32(gpu, out) == 1 and ring.r("FREEZE").decode()["FROZEN"] == 0
    ring.r("FREEZE").update(FREEZE=1)
    ring.emit(fence(out.va, 2))
    ring.idle()
    assert u32(gpu, out) == 1
    ring.r("QUEUE0_RB_CNTL").update(RB_ENABLE=0)                  # sdma_v6_0_soft_reset, FREEZE still set:
    ring.r("QUEUE0_IB_CNTL").update(IB_ENABLE=0)                  # the GRBM pulse alone clears it
    ring.r("F32_CNTL").update(HALT=1, TH1_RESET=1)
    gc = ring.gc
    gc.GRBM_SOFT_RESET.write(gc.GRBM_SOFT_RESET.encode(SOFT_RESET_SDMA0=1))
    gc.GRBM_SOFT_RESET.write(0)
    assert ring.r("FREEZE").read() == 0
    gpu.dev.vram.write(ring.wb.vram.addr + 64, bytes(8))          # a new ring: its wptr shadow zeroed
    ring.resume()
    ring.emit(fence(out.va + 4, 3))
    assert u32(gpu, out, 4) == 3, [str(e) for e in sim(gpu).errors]


def test_a_copy_past_one_slice_goes_on_after_the_doorbell_as_the_clock_steps(gpu):
    """SDMA runs asynchronously: a 12 MiB COPY_LINEAR moves 4 MiB per turn (SLICE_BYTES), the doorbell
    write returns after the first slice, a second doorbell moves nothing early, polls finish it."""
    ring = Ring(gpu)
    n = 12 * MiB
    ts, src, dst = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(n), gpu.gmc.map_vram(n)
    data = pattern(n, 5)
    gpu.dev.vram.write(src.vram.addr, data)
    ring.emit(timestamp(ts.va), copy(src.va, dst.va, n), timestamp(ts.va + 8))
    assert not ring.idle() and ring.rptr() == 12                 # past the timestamp (3 dwords), at the copy
    assert vram(gpu, dst, 0, 4 * MiB) == data[:4 * MiB] and vram(gpu, dst, 8 * MiB, 16) == b"\0" * 16
    ring.ring()
    assert vram(gpu, dst, 8 * MiB, 16) == b"\0" * 16             # not before its time
    polls = ring.wait_idle()
    assert polls >= 2 * 4 * MiB // (32 << 10) - 2                # the two later slices' transfer time
    assert vram(gpu, dst, 0, n) == data and ring.rptr() == ring.wptr and not sim(gpu).errors
    t0, t1 = struct.unpack("<2Q", vram(gpu, ts, 0, 16))
    assert t1 - t0 >= n // (32 << 10) * 100                      # 1 us per 32 KiB, 100 MHz ticks


def test_a_1gib_fill_at_an_unmapped_address_faults_at_once_and_a_soft_reset_stops_it(gpu):
    """A CONSTANT_FILL of 1 GiB (the 30-bit COUNT's most) at an unmapped address: the doorbell write returns
    after one slice (it used to run 1 GiB page by page inside it), the fault is posted at once, the engine
    is busy, and the soft reset that recovery does ends the fill: no slice runs after it."""
    import time
    ring = Ring(gpu)
    gpu.ih.poll()
    gone = gpu.gmc.map_vram(8192)
    gpu.gmc.unmap(gone)
    fill = pkt("CONSTANT_FILL", op=S.SDMA_OP_CONST_FILL, dst_addr_31_0=lo(gone.va), dst_addr_63_32=hi(gone.va),
               src_data_31_0=0x5A5A5A5A, count=(1 << 30) - 1)
    t = time.perf_counter()
    ring.emit(fill)
    assert time.perf_counter() - t < 20                          # one 4 MiB slice, not 1 GiB (minutes)
    assert not ring.idle() and ring.rptr() == 0
    ivs = [e for e in gpu.ih.poll() if e.src_id == IHIDS.UTCL2_1_0__SRCID__FAULT]
    assert ivs and gpu.gmc.decode_fault("GC").write
    sdma = sim(gpu).blocks["SDMA"]
    assert sdma.queues[0].xfer[1] == 4 * MiB
    ring.soft_reset()
    for _ in range(300):                                         # past when the next slice was due
        ring.idle()
    assert sdma.queues[0].xfer is None and ring.idle()
    assert not [e for e in gpu.ih.poll() if e.src_id == IHIDS.UTCL2_1_0__SRCID__FAULT]
    ring.emit(fence(ring.wb.va + 128, 9))
    assert u32(gpu, ring.wb, 128) == 9


def test_utcl1_page_addr_is_pa_takes_the_engines_addresses_as_physical(gpu):
    """SDMA0_UTCL1_PAGE.ADDR_IS_PA (0 at power-on; sdma_v6_0_gfx_resume keeps it clear): the engine's
    addresses are physical MC addresses (assumption from the field's name), so a ring at a GPU VA is fetched
    from nothing and the engine stops (what an inverted UTCL1_PAGE write does: tools/mutate.py's reg-flip).
    Cleared again and reset, the engine runs."""
    ring = Ring(gpu)
    wb = gpu.gmc.map_vram(4096)
    ring.emit(write(wb.va, 1))
    assert u32(gpu, wb) == 1
    page = ring.r("UTCL1_PAGE")
    page.update(ADDR_IS_PA=1)
    ring.emit(write(wb.va, 2))
    assert u32(gpu, wb) == 1 and not ring.idle()
    assert "ADDR_IS_PA" in sim(gpu).errors[-1].message, sim(gpu).errors[-1]
    page.update(ADDR_IS_PA=0)
    ring.soft_reset()
    ring.emit(write(wb.va, 3))
    assert u32(gpu, wb) == 3
