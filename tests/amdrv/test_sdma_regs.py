"""The SDMA queue registers sdma_v6_0_gfx_resume writes, from the driver's side: leave one out (or fini
without sdma_v6_0_gfx_stop) and the SDMA workload fails in the simulator, reported as a hung queue or a
failed boot. Registers whose loss has no effect in the model are listed in docs/fidelity.md."""
import pytest

import pcie
from amdrv import regs
from amdrv import sdma_packets as S
from amdrv.am import AMError, AMGPU
from amdrv.ip.sdma import SDMA
from amdrv.queue import Fence, HostBuffer, QueueError, SDMAQueue, recover
from gpusim.bus import HostBus

BUS = HostBus()  # this module's own simulated bus (slots of its own, not the device strings')


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def open_gpu(fresh=False):
    return AMGPU.open(pcie.open_function("sim", "navi31", fresh=fresh, bus=BUS, vram_size=512 << 20))


def drop(monkeypatch, name, when=lambda value: True):
    """Register writes (plain or read-modify-write) of `name` whose value satisfies `when` never happen."""
    write, update = regs.Register.write, regs.Register.update

    def w(self, value=None, /, **fields):
        if self.name == name and when(self.defn.encode(value or 0, **fields)):
            return value
        return write(self, value, **fields)

    def u(self, old=None, /, **fields):
        if self.name == name:
            mask, bits = self.defn.bits(**fields)
            if when(((self.read() if old is None else old) & ~mask) | bits):
                return bits
        return update(self, old, **fields)
    monkeypatch.setattr(regs.Register, "write", w)
    monkeypatch.setattr(regs.Register, "update", u)


def sdma_fence(gpu, value, timeout_s=5.0):
    """A fence through a new SDMA0 queue; QueueError unless it lands with exactly that value and no VM
    fault was reported meanwhile (the driver's own checks)."""
    host = HostBuffer(gpu, 4096)
    q = SDMAQueue(gpu)
    b = S.SDMABuilder()
    b.fence(host.va, value)
    q.submit(b.buf)
    fence = Fence(host, 0)
    q.wait(fence, value, timeout_s=timeout_s, min_reads=200)
    faults = q._faults()
    if fence.value != value or faults:
        raise q._error(f"the fence holds {fence.value:#x}, not {value:#x}", faults)


@pytest.mark.parametrize("name,when", [
    ("SDMA0_QUEUE0_RB_BASE", None), ("SDMA0_QUEUE0_RB_BASE_HI", None),
    ("SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_LO", None), ("SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_HI", None),
    ("SDMA0_QUEUE0_RB_RPTR_ADDR_LO", None), ("SDMA0_QUEUE0_RB_RPTR_ADDR_HI", None),
    ("SDMA0_QUEUE0_DOORBELL", None), ("SDMA0_QUEUE0_DOORBELL_OFFSET", None),
    ("SDMA0_QUEUE0_RB_CNTL", lambda v: v & 1),                 # the write that sets RB_ENABLE
    ("SDMA0_QUEUE0_MINOR_PTR_UPDATE", lambda v: v == 0),       # the bracket never closed
])
def test_a_dropped_queue_register_fails_the_sdma_workload(monkeypatch, name, when):
    gpu = open_gpu(fresh=True)                                 # the registers hold their power-on values
    try:
        drop(monkeypatch, name, when or (lambda v: True))      # in the queue's set-up (the boot writes none)
        with pytest.raises(QueueError, match="SDMA0 queue 0: (timed out|a VM fault|the fence holds|the fence .* but the work faulted)"):
            sdma_fence(gpu, 1, timeout_s=0.1)
    finally:
        gpu.dev.close()


@pytest.mark.parametrize("stop", [True, False])
def test_fini_stops_the_rings_so_the_next_boot_does_not_resume_them(monkeypatch, stop):
    """sdma_v6_0_hw_fini -> sdma_v6_0_enable(false) runs gfx_stop before halting. Left enabled with
    F32_WPTR_POLL_ENABLE, the ring is resumed at the next boot's unhalt and polls its wptr shadow in the
    previous run's freed memory: the engine faults and the warm boot fails."""
    if not stop:
        monkeypatch.setattr(SDMA, "gfx_stop", lambda self: None)
    gpu = open_gpu(fresh=True)
    sdma_fence(gpu, 1)
    gpu.fini()
    sim = gpu.dev.pci.dev
    assert sim.field("GC", "SDMA0_QUEUE0_RB_CNTL", "RB_ENABLE") == (0 if stop else 1)
    if stop:
        gpu = open_gpu()
        assert gpu.boot_report.kind == "warm"
        sdma_fence(gpu, 2)
        gpu.fini()
    else:
        with pytest.raises(AMError, match="warm boot failed in sdma: .*not idle"):
            open_gpu()
        assert any("SDMA0 gfx ring hung" in str(e) for e in sim.errors)


@pytest.mark.parametrize("name", ["SDMA0_QUEUE0_RB_RPTR", "SDMA0_QUEUE0_RB_WPTR"])
def test_pointers_not_zeroed_when_the_queue_is_set_up_again_after_recover(monkeypatch, name):
    """gfx_resume zeroes RB_RPTR and RB_WPTR: after recover() the registers still hold the old ring's
    pointers, and a queue set up over them runs from the wrong place."""
    gpu = open_gpu(fresh=True)
    try:
        host = HostBuffer(gpu, 4096)
        q = SDMAQueue(gpu)
        for v in range(1, 9):                                  # the old ring's pointers move on
            b = S.SDMABuilder()
            b.fence(host.va, v)
            q.submit(b.buf)
        q.wait(Fence(host, 0), 8)
        drop(monkeypatch, name)
        recover(gpu)                                           # sets up every queue again (gfx_resume)
        b = S.SDMABuilder()
        b.fence(host.va + 8, 1)
        with pytest.raises(QueueError, match="SDMA0 queue 0: timed out"):
            q.submit(b.buf)
            q.wait(Fence(host, 8), 1, timeout_s=0.1, min_reads=200)
    finally:
        gpu.dev.close()
