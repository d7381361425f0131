"""What a warm boot and hcq's open cost through the simulated bridge (issue 16, docs/usb.md "Measured"), and
that each shortcut taken to cut them is still checked: a step left out fails a workload or the boot."""

import pytest

import pcie
from amdrv.am import AMGPU
from amdrv.autogen.smu_13_0_0 import PPSMC_MSG_GetDriverIfVersion
from amdrv.queue import ComputeQueue

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from pcie.usb.transport import open_function  # noqa: E402


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
    6 KiB through BAR0 (a TLP per dword), in the ring's mapping (no TLB flush of its own): hcq's open went from
    699 round trips over UAS to 87, then 79 with the read-modify-writes' reads of an MQD, an SDMA queue's set-up
    and a KIQ register set-up read as one batch each."""
    from amdrv.hcq import AMHCQDevice
    f, bridge = warm_usb
    gpu = AMGPU.open(f)
    c0 = f.counters.snapshot()
    dev = AMHCQDevice(gpu, "am:sim:usb")
    try:
        spent = f.counters - c0
        assert spent.round_trips <= 82, spent                  # 79 measured
        for q in (gpu.kiq, dev.compute):
            assert q.mqd_host is not None and q.mqd.vram is None and q.eop.vram is None
            assert q.eop.va == q.mqd.va + 2048 and q.eop.va % 256 == 0    # EOP base is programmed >> 8
            assert q.mqd.va == q.mem.va + q.ring_size + 4096              # in the ring's mapping: no TLB flush more
            # the CP reads the MQD from the SRAM through the VMID 0 page tables: what the host pushed is there
            at = q.mem.dma.bus_address(q.ring_size + 4096) - 0x200000
            assert bytes(bridge.sram[at:at + 2048]) == bytes(q.mqd_host[:2048])
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
        write_mqd, push, inside = ComputeQueue._write_mqd, type(gpu.kiq.mem.dma).push, []

        def unpushed(self):
            inside.append(self.mem.dma)
            try:
                return write_mqd(self)
            finally:
                inside.pop()
        monkeypatch.setattr(ComputeQueue, "_write_mqd", unpushed)
        monkeypatch.setattr(type(gpu.kiq.mem.dma), "push",
                            lambda self, *a, **k: None if inside and self is inside[-1] else push(self, *a, **k))
        q = ComputeQueue(gpu, pipe=1, queue=4)
        assert not probe.runs(q)
        monkeypatch.undo()
        q.init()                                                  # unmapped, written and pushed, mapped again
        assert probe.runs(q)
    finally:
        gpu.fini()


def _records(sim_dev) -> list[int]:
    return [sim_dev.get("NBIO", f"BIF_BX0_DRIVER_SCRATCH_{n}") for n in range(6, 12)]


def test_a_warm_boot_takes_what_the_previous_run_recorded(warm_usb):
    """The run that left the GPU recorded its discovery key, the SMU firmware's versions and each clock's top DPM
    level (BIF_BX0_DRIVER_SCRATCH_6..11): the warm boot reads no discovery dword from VRAM, sends no version,
    driver-table or GetMaxDpmFreq message, and still ends with the versions the firmware reports and every soft
    maximum back at the clock's top level. 189 round trips over UAS before, 132 then, 118 now (independent reads
    batched: the boot's read-modify-writes, the liveness words, the polls' several registers)."""
    from amdrv.ip.smu import LOW_CLOCKS, clock_id
    f, bridge = warm_usb
    sim = bridge.dev
    smu = sim.blocks["SMU"]
    assert all(_records(sim))                                  # fini recorded all of them
    messages, c0 = smu.messages, f.counters.snapshot()
    gpu = AMGPU.open(f)
    try:
        spent = f.counters - c0
        assert gpu.boot_report.kind == "warm" and gpu.dev.disc.recalled
        assert spent.round_trips <= 121, spent                 # 118 measured
        # DisallowGfxOff, four SetSoftMaxByFreq: nothing asked that the record holds
        assert smu.messages - messages == 5
        assert (gpu.smu.version, gpu.smu.if_version) == (smu.version, gpu.smu.query(PPSMC_MSG_GetDriverIfVersion))
        for clk in LOW_CLOCKS:
            cid = clock_id(clk)
            assert smu.soft[cid][1] == smu.dpm[cid][0][-1]
    finally:
        gpu.fini()


def test_a_warm_boot_without_records_asks_the_gpu(warm_usb):
    """Records lost (a run of an older boot-state layout, or cleared): the warm boot reads the discovery header
    and harvest list and asks the SMU, with the same outcome; a key that names no cached binary is no hit."""
    from amdrv.ip.smu import LOW_CLOCKS, clock_id
    f, bridge = warm_usb
    sim = bridge.dev
    for n in range(6, 12):
        sim.set("NBIO", f"BIF_BX0_DRIVER_SCRATCH_{n}", 0x5A5A5A5A if n < 8 else 0)
    gpu = AMGPU.open(f)
    try:
        assert gpu.boot_report.kind == "warm"
        assert gpu.dev.disc.from_cache and not gpu.dev.disc.recalled     # the header read, the rest cached
        smu = sim.blocks["SMU"]
        assert (gpu.smu.version, gpu.smu.if_version) != (0, 0) and gpu.smu.version == smu.version
        for clk in LOW_CLOCKS:
            cid = clock_id(clk)
            assert smu.soft[cid][1] == smu.dpm[cid][0][-1]
        f.flush()                                                # the record is posted writes
        assert gpu.dev.disc.key64 == _records(sim)[0] | _records(sim)[1] << 32   # recorded again at the boot's end
    finally:
        gpu.fini()


def test_bar_writes_on_the_open_firmware_are_stream_writes(sim_bus):
    """On the open firmware a BAR write of whole dwords goes as one 0xF0 stream write (mode 1: the dwords on bulk
    OUT, written at increasing addresses), a round trip where one TLP a dword took 32 requests a round trip; the
    unaligned ends go as single TLPs with their byte enables, in order with the rest."""
    import os as _os
    f = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware="open"))
    try:
        vram = f.bar(0)
        vram.write(0x100000, bytes(16))
        data = _os.urandom(6001)
        c0 = f.counters.snapshot()
        vram.write(0x100003, data)
        f.flush()
        assert (f.counters - c0).round_trips == 1
        assert vram.read(0x100000, 3) == bytes(3) and vram.read(0x100003, len(data)) == data
        assert vram.read(0x100003 + len(data), 4) == bytes(4)   # nothing written past the end
    finally:
        f.close()


def test_hcq_open_on_the_open_firmware(sim_bus, debian_firmware, monkeypatch):
    """The warm boot and hcq's open on the open firmware: the MQDs and EOP buffers stay in VRAM (the CP writes EOP records, and a
    push of a neighbour in a shared SRAM slot would resend them), written by 0xF0 stream writes (64 round trips)."""
    from amdrv.hcq import AMHCQDevice
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv("DRIVERLESS_PUBLISH_S", "0")
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    f = open_function(backend=usb_bridge.backend("navi31", bus=sim_bus, firmware="open"))
    c0 = f.counters.snapshot()
    gpu = AMGPU.open(f)
    # the warm boot: 115 round trips before the run's records and batched reads (a hub's read-modify-write
    # reads as one batch), 67 then, 44 with every block's independent reads batched
    assert gpu.boot_report.kind == "warm" and (f.counters - c0).round_trips <= 47
    c0 = f.counters.snapshot()
    dev = AMHCQDevice(gpu, "am:sim:usb")
    try:
        assert (f.counters - c0).round_trips <= 67             # 64 measured (86 before the batched reads)
        assert dev.compute.mqd.vram is not None and dev.compute.mqd_host is None
        assert dev.copyout(dev.alloc(64)) is not None
    finally:
        dev.close()
