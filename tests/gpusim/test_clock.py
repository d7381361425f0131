"""The clock's fast-forward (gpusim.device.SimGPU.step, schedule_poll): skipping the looks of polls that would
find nothing gives exactly what running every look gives (registers, memory, errors and their steps, the
timestamps the engines write, the retry counts), only faster. The same scripted SDMA work, then CP work, runs on
two identically booted GPUs, one with fast_forward off."""
import struct

import pytest

import pcie
from amdrv.am import AMGPU
from gpusim.bus import HostBus
from gpusim.device import SimGPU

from tests.gpusim.test_sdma_queue import Ring, copy, fence, poll_mem, timestamp, write


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def scripted(gpu, host):
    """Two SDMA engines polling host memory and each other's writes at different intervals, a copy whose slices
    are events of their own, a poll with a retry limit that runs out; the host acts between long clock runs."""
    dev = gpu.dev.pci.dev
    h = gpu.gmc.map_system(host)
    out, big = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(16 << 20)
    r0, r1 = Ring(gpu, 0), Ring(gpu, 1)
    r0.emit(timestamp(out.va), poll_mem(h.va, 1, interval=1), timestamp(out.va + 8),
            copy(big.va, big.va + (8 << 20), 8 << 20),           # two 4 MiB slices: plain events
            write(out.va + 64, 9), timestamp(out.va + 16), fence(out.va + 24, 5))
    r1.emit(poll_mem(out.va + 64, 9, interval=7), timestamp(out.va + 32),
            poll_mem(h.va + 4, 2, interval=3), timestamp(out.va + 40),
            poll_mem(h.va + 8, 3, retry=40, interval=2))      # never matched: hangs after its 40th retry
    dev.step(1000)
    struct.pack_into("<I", host.view, 0, 1)                   # releases engine 0
    dev.step(37)
    dev.step(5000)
    struct.pack_into("<I", host.view, 4, 2)                   # releases engine 1's second poll
    for _ in range(20):
        dev.step(13)
    dev.step(500)
    return dev, out


def state(dev, gpu, out):
    sdma = dev.blocks["SDMA"]
    events = sorted((e[0], e[1], e[2], getattr(e[4], "fn", e[4]).__name__, e[5]) for e in dev._events)
    return {"steps": dev.steps, "regs": dict(dev.regs.store),
            "errors": [(e.step, e.block, e.message) for e in dev.errors],
            "out": gpu.dev.vram.read(out.vram.addr, 128), "queues": [vars(q) for q in sdma.queues],
            "events": events, "interrupts": dev.interrupts_posted}


def scripted_cp(gpu, host):
    """Two compute queues with the CP's write-pointer poll on (CP_PQ_WPTR_POLL_CNTL.EN, the mutation run's
    inverted value): a WAIT_REG_MEM on host memory, one on the other queue's write, one on a plain register,
    packets picked up by the poll alone (no doorbell), a wait on a register whose read acts and a kernel in
    flight across looks (neither's looks are skipped). GPU clock timestamps (RELEASE_MEM DATA_SEL 3) record when each look acted."""
    from tests.gpusim.test_cp import INITIATOR, Queue, pkt3, release_mem, sh, upload, wait_mem, write_data
    from rdna3.asm import assemble
    from amdrv.autogen import pm4 as P
    dev, gc = gpu.dev.pci.dev, gpu.dev.reg("GC")
    h, out = gpu.gmc.map_system(host), gpu.gmc.map_vram(4096)

    def wait_reg(reg, ref):     # WAIT_REG_MEM MEM_SPACE 0, FUNCTION 3 (equal)
        return pkt3(P.PACKET3_WAIT_REG_MEM, 3, reg.addr // 4, 0, ref, 0xFFFFFFFF, 4)

    def ts(at):
        return release_mem(out.va + at, data_sel=3)
    cp, trace = dev.blocks["CP"], []

    def run(n):     # the clock, then the CP's idle-look count and next look (they set the look period)
        dev.step(n)
        trace.append((dev.steps, cp._idle_polls, cp._poll_at))
    q1, q2 = Queue(gpu, 0, 1, 40), Queue(gpu, 1, 1, 42)
    gc.CP_PQ_WPTR_POLL_CNTL.update(EN=1)
    try:
        q1.submit(ts(0) + wait_mem(h.va, 1) + ts(8) + write_data(out.va + 64, 9))
        q2.submit(wait_mem(out.va + 64, 9) + ts(16) + wait_reg(gc.SCRATCH_REG1, 5) + ts(24))
        run(1000)
        struct.pack_into("<I", host.view, 0, 1)               # releases q1, then q2 (its write)
        run(37)
        run(5000)
        q1.submit(ts(32), ring_doorbell=False)                  # reached by the write-pointer poll alone
        run(5000)
        gc.SCRATCH_REG1.write(5)                                # releases q2's register wait
        for _ in range(20):
            run(13)
        run(500)
        # SMUIO ROM_DATA from the ROM's start (gpusim.vbios: each read moves ROM_INDEX on, with auto-increase):
        # q2's wait for 0xffffffff (past the image's end if not before) ends after as many looks, skipped or not
        smuio = gpu.dev.reg("SMUIO")
        smuio.ROM_CNTL.update(ROM_INDEX_ADDRESS_AUTO_INCREASE=1)
        smuio.ROM_INDEX.write(dev.get("NBIO", "REGS_ROM_OFFSET_CTRL") << 17)
        skipped = dev.polls_skipped
        q2.submit(wait_reg(smuio.ROM_DATA, 0xFFFFFFFF) + ts(40))
        run(1000)
        acting = dev.polls_skipped - skipped                    # none skipped while q2 waits there
        run(8000)
        # a kernel of ~9000 executor steps, no store: in flight across looks, each running a slice of it
        # (gpusim.cp DISPATCH_SLICE_STEPS) with nothing written until its end: none may be skipped
        code = upload(gpu, assemble("s_mov_b32 s0, 3000\nloop:\ns_sub_u32 s0, s0, 1\ns_cmp_lg_u32 s0, 0\n"
                                    "s_cbranch_scc1 loop\ns_endpgm"))
        q1.submit(sh(gpu, "COMPUTE_PGM_LO", code.va >> 8, code.va >> 40) + sh(gpu, "COMPUTE_PGM_RSRC1", 0, 0)
                  + sh(gpu, "COMPUTE_NUM_THREAD_X", 32, 1, 1) + pkt3(P.PACKET3_DISPATCH_DIRECT, 1, 1, 1, INITIATOR)
                  + ts(48))
        run(4000)
        q2.dequeue()
        run(2000)
        q1.dequeue()
    finally:
        gc.CP_PQ_WPTR_POLL_CNTL.update(EN=0)
    return dev, out, acting, trace


def cp_state(dev, gpu, out):
    cp = dev.blocks["CP"]
    events = sorted((e[0], e[1], e[2], getattr(e[4], "fn", e[4]).__name__, e[5]) for e in dev._events)
    return {"steps": dev.steps, "regs": dict(dev.regs.store), "errors": [(e.step, e.block, e.message) for e in dev.errors],
            "out": gpu.dev.vram.read(out.vram.addr, 128), "events": events, "interrupts": dev.interrupts_posted,
            "queues": {k: vars(q) for k, q in cp.queues.items()}, "cp": (cp._idle_polls, cp._poll_at, cp.clock_ns)}


def test_fast_forward_is_exactly_stepping_every_look(monkeypatch):
    """The SDMA script, then the CP's (its looks: blocked waits, the write-pointer poll, gpusim.cp CP._poll) on
    the same GPU: skipping the looks that find nothing gives what running each gives (timestamps, registers,
    queue state, retry and idle-look counts); a CP wait on a register whose read acts skips nothing."""
    runs = {}
    for ff in (False, True):
        monkeypatch.setattr(SimGPU, "fast_forward", ff)
        bus = HostBus()     # each GPU in slot 0 of a bus of its own: the same bus addresses both times
        try:
            gpu = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=bus, vram_size=1 << 30))
            host = gpu.dev.pci.alloc_dma(4096)
            dev, out = scripted(gpu, host)
            sdma, sdma_skipped = state(dev, gpu, out), dev.polls_skipped
            dev, out, acting, trace = scripted_cp(gpu, gpu.dev.pci.alloc_dma(4096))
            cp = {**cp_state(dev, gpu, out), "trace": trace}
            runs[ff] = sdma, sdma_skipped, cp, dev.polls_skipped - sdma_skipped, acting
            gpu.dev.close()
        finally:
            bus.close()
    (slow, none, slow_cp, none_cp, _), (fast, skipped, fast_cp, skipped_cp, acting) = runs[False], runs[True]
    assert none == none_cp == 0 and skipped > 1000 and skipped_cp > 1000 and acting == 0   # most looks skipped
    ts = struct.unpack("<6Q", fast["out"][:48])
    assert 0 < ts[0] < ts[1] < ts[2] and ts[4] > ts[3] > 0      # the work happened, in order
    assert struct.unpack_from("<I", fast["out"], 24)[0] == 5
    assert any("no match after 40 retries" in e[2] for e in fast["errors"])
    ts = struct.unpack("<7Q", fast_cp["out"][:56])
    assert 0 < ts[0] < ts[1] < ts[2] < ts[4] < ts[3] < ts[5] < ts[6], ts
    assert struct.unpack_from("<I", fast_cp["out"], 64)[0] == 9
    for k in slow:
        assert fast[k] == slow[k], k
    for k in slow_cp:
        assert fast_cp[k] == slow_cp[k], k
