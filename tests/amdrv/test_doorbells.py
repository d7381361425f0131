"""Doorbell routing from the driver's side: every S2A routing entry the driver relies on
(nbio_v4_3_gc_doorbell_init for the CP, nbio_v4_3_sdma_doorbell_range for SDMA, nbio_v4_3_ih_doorbell_range
for the IH rptr) is programmed on every boot kind (cold, warm, after a mode1 reset, after recover), and a
driver that skips one loses those doorbells: the simulator records them as dropped and the workload fails
(a queue that never runs is reported as hung; the IH overflows and loses interrupts)."""
import pytest

import pcie
from amdrv import pm4
from amdrv import sdma_packets as S
from amdrv.am import AMGPU
from amdrv.ip.ih import IH
from amdrv.ip.nbio import NBIO
from amdrv.queue import ComputeQueue, Fence, HostBuffer, QueueError, SDMAQueue, recover
from gpusim.device import IVEntry
from gpusim.bus import HostBus

BUS = HostBus()  # this module's own simulated bus (slots of its own, not the device strings')


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def open_gpu(fresh=False):
    return AMGPU.open(pcie.open_function("sim", "navi31", fresh=fresh, bus=BUS, vram_size=512 << 20))


def dropped(gpu) -> list[str]:
    return [str(e) for e in gpu.dev.pci.dev.errors if "dropped" in str(e)]


def workload(gpu, value: int, timeout_s: float = 5) -> None:
    """A fence through a compute queue and one through each SDMA engine's queue."""
    host = HostBuffer(gpu, 4096)
    try:
        q = ComputeQueue(gpu)
        b = pm4.PM4()
        b.release_mem(host.va, value, data_sel=pm4.DATA_64)
        q.submit(b.buf)
        q.wait(Fence(host, 0), value, timeout_s=timeout_s, min_reads=200)
        for e in gpu.sdma.engines:
            s = SDMAQueue(gpu, engine=e)
            b = S.SDMABuilder()
            b.fence(host.va + 8 * (e + 1), value)
            s.submit(b.buf)
            s.wait(Fence(host, 8 * (e + 1)), value, timeout_s=timeout_s, min_reads=200)
    finally:
        host.free()


# the compute side fails at its first doorbell, the KIQ's (SET_RESOURCES as it comes up)
@pytest.mark.parametrize("skip,failure", [("gc_doorbell_init", "KIQ .*SET_RESOURCES did not complete"),
                                          ("sdma_doorbell_range", "SDMA0 .*timed out")])
def test_a_skipped_routing_entry_loses_the_doorbells_and_the_queue_hangs(monkeypatch, skip, failure):
    monkeypatch.setattr(NBIO, skip, lambda self, *a, **k: None)
    gpu = open_gpu(fresh=True)
    try:
        with pytest.raises(QueueError, match=failure):
            workload(gpu, 1, timeout_s=0.1)
        assert any(why in e for e in dropped(gpu) for why in ("no enabled S2A_DOORBELL_ENTRY_n_CTRL covers it",
                                                               "nothing listens on that doorbell"))
    finally:
        gpu.dev.close()


def test_the_sdma_range_covers_both_engines(monkeypatch):
    """nbio_v4_3_sdma_doorbell_range has one entry for every instance: 20 dwords per engine; one engine's
    worth leaves SDMA1's doorbells (0x10A << 1) outside it."""
    real = NBIO.sdma_doorbell_range
    monkeypatch.setattr(NBIO, "sdma_doorbell_range", lambda self, i, index, size: real(self, i, index, size // 2))
    gpu = open_gpu(fresh=True)
    try:
        with pytest.raises(QueueError, match="SDMA1 .*timed out"):
            workload(gpu, 1, timeout_s=0.1)
    finally:
        gpu.dev.close()


def _post_faults(gpu, n):
    sim = gpu.dev.pci.dev
    for k in range(n):
        sim.post_interrupt(IVEntry(client_id=0, source_id=0, src_data=(k, 0, 0, 0)))


@pytest.mark.parametrize("routed", [True, False])
def test_without_the_ih_range_the_rptr_doorbell_is_lost_and_the_ring_overflows(monkeypatch, routed):
    """ih_v6_0_set_rptr rings the IH's doorbell; without nbio_v4_3_ih_doorbell_range the IH never learns
    what was read, so once a ring's worth of interrupts came in it overwrites entries not yet read."""
    if not routed:
        monkeypatch.setattr(NBIO, "ih_doorbell_range", lambda self, *a: None)
    gpu = open_gpu(fresh=True)
    try:
        gpu.ih = IH(gpu.dev, 4096)               # a small ring (128 entries), set up as at boot
        gpu.ih.init()
        per_ring = gpu.ih.size // 32
        seen, want = [], []
        for _ in range(3):                       # three half rings, read after each
            _post_faults(gpu, per_ring // 2)
            want += range(per_ring // 2)
            seen += [iv.src_data[0] for iv in gpu.ih.poll()]
        if routed:
            assert seen == want and gpu.ih.overflows == 0 and not dropped(gpu)
        else:
            assert gpu.ih.overflows > 0 and seen != want
            assert any("dword 0x2f0: routed by the CP's default route" in e for e in dropped(gpu))
    finally:
        gpu.dev.close()


def test_routing_is_programmed_on_every_boot_kind(monkeypatch):
    gpu = open_gpu(fresh=True)
    assert gpu.boot_report.kind == "cold"
    workload(gpu, 1)
    gpu.fini()
    # the bus interface lost its routing meanwhile (nothing a warm boot may rely on): all entries cleared
    sim = gpu.dev.pci.dev
    for n in range(16):
        sim.regs.write(sim.reg_addr("NBIO", f"S2A_DOORBELL_ENTRY_{n}_CTRL"), 0)
    gpu = open_gpu()
    assert gpu.boot_report.kind == "warm"
    workload(gpu, 2)
    # recover after a hung compute queue: routing still there, every queue works again
    q = ComputeQueue(gpu)
    q.submit([0xC0001000 | 0x7F << 8, 0])          # an opcode the CP does not know: hangs the queue
    recover(gpu)
    workload(gpu, 3)
    gpu.fini()
    monkeypatch.setenv("DRIVERLESS_COLD_BOOT", "1")  # a cold boot over live firmware: mode1 reset first
    gpu = open_gpu()
    assert (gpu.boot_report.kind, gpu.boot_report.mode1_reset) == ("cold", True)
    workload(gpu, 4)
    assert not dropped(gpu)
    gpu.fini()
