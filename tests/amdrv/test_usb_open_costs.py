"""What a warm boot and hcq's open cost through the simulated bridge (issue 16, docs/usb.md "Measured"), and
that each shortcut taken to cut them is still checked: a step left out fails a workload or the boot."""

import pytest

import pcie
from amdrv.am import AMGPU
from amdrv.queue import ComputeQueue

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from amdrv.usb.transport import open_function  # noqa: E402


@pytest.fixture
def warm_usb(sim_bus, debian_firmware, monkeypatch):
    """A GPU left by a clean AM run over simulated PCIe (small BAR: it fills the discovery cache too), then its
    bridge opened over UAS; yields (the USB function, the simulated bridge)."""
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv("DRIVERLESS_PUBLISH_S", "0")     # the driver's own round trips (amdrv.monitor)
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    backend = usb_bridge.backend("navi31", bus=sim_bus)
    f = open_function(backend=backend)
    yield f, backend.bridge
    if f.link is not None:
        f.close()


class _Probe:
    """A fence in the one SRAM page the host reads back: whether a queue runs a RELEASE_MEM."""

    def __init__(self, gpu):
        self.dma = gpu.dev.pci.alloc_dma(4096, readback=True)
        self.va, self.value = gpu.gmc.map_system(self.dma).va, 0

    def runs(self, q, polls: int = 100) -> bool:
        from amdrv import pm4
        self.value += 1
        b = pm4.PM4()
        b.release_mem(self.va, self.value)
        q.submit(b.buf)
        for _ in range(polls):
            self.dma.pull(0, 8)
            if int.from_bytes(self.dma.view[:8], "little") == self.value:
                return True
        return False


def test_hcq_open_costs_and_the_mqd_pages_live_in_the_bridge_sram(warm_usb):
    """Behind the stock firmware a compute queue's MQD and EOP buffer are one page of the bridge's SRAM (upstream
    keeps them in GTT: amdgpu_gfx_mqd_sw_init, gfx_v11_0_mec_init), pushed whole by one WRITE(16), instead of
    6 KiB through BAR0 (a TLP per dword): hcq's open went from 699 round trips over UAS to 96."""
    from amdrv.hcq import AMHCQDevice
    f, bridge = warm_usb
    gpu = AMGPU.open(f)
    c0 = f.counters.snapshot()
    dev = AMHCQDevice(gpu, "am:sim:usb")
    try:
        spent = f.counters - c0
        assert spent.round_trips <= 100, spent                 # 96 measured
        for q in (gpu.kiq, dev.compute):
            assert q.mqd_host is not None and q.mqd.vram is None and q.eop.vram is None
            assert q.eop.va == q.mqd.va + 2048 and q.eop.va % 256 == 0    # EOP base is programmed >> 8
            # the CP reads the MQD from the SRAM through the VMID 0 page tables: what the host pushed is there
            at = q.mqd_host.dma.bus_address(0) - 0x200000
            assert bytes(bridge.sram[at:at + 2048]) == bytes(q.mqd_host.view[:2048])
    finally:
        dev.close()


def test_a_compute_mqd_page_not_pushed_leaves_the_queue_dead(warm_usb, monkeypatch):
    """The MQD page is a host shadow of the SRAM: without its push the KIQ maps the queue from what the SRAM
    held (zeros here), an HQD with no ring and no doorbell, and work submitted to it never runs."""
    f, _ = warm_usb
    gpu = AMGPU.open(f)
    try:
        ComputeQueue(gpu)                                         # the KIQ is up, its MQD pushed
        probe = _Probe(gpu)
        write_mqd, push, inside = ComputeQueue._write_mqd, type(gpu.kiq.mqd_host.dma).push, []

        def unpushed(self):
            inside.append(self.mqd_host.dma)
            try:
                return write_mqd(self)
            finally:
                inside.pop()
        monkeypatch.setattr(ComputeQueue, "_write_mqd", unpushed)
        monkeypatch.setattr(type(gpu.kiq.mqd_host.dma), "push",
                            lambda self, *a, **k: None if inside and self is inside[-1] else push(self, *a, **k))
        q = ComputeQueue(gpu, pipe=1, queue=4)
        assert not probe.runs(q)
        monkeypatch.undo()
        q.init()                                                  # unmapped, written and pushed, mapped again
        assert probe.runs(q)
    finally:
        gpu.fini()
