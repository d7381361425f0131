"""BAR.read32_many through the simulated bridge: several register reads in one batch (each request followed by
its status and completion reads, or by its 0xF0 IN report), the same values as one read at a time, fewer round
trips, and the same errors when the GPU does not answer."""
import pytest

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from pcie.usb.transport import GPUNotAnswering, open_function  # noqa: E402

SCRATCH = 4 * 0xC040        # GC SCRATCH_REG0..7 (dword 0xC040 on): plain registers


@pytest.mark.parametrize("firmware, link, most", [("stock", "uas", 3), ("stock", "bot", None), ("open", None, 1)])
def test_batched_reads_equal_single_reads(sim_bus, monkeypatch, firmware, link, most):
    if link:
        monkeypatch.setenv("DRIVERLESS_USB_LINK", link)
    backend = usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware=firmware)
    f = open_function(backend=backend)
    try:
        regs = f.bar(5)
        offsets = [SCRATCH + 4 * i for i in range(8)]
        for i, o in enumerate(offsets):
            regs.write32(o, 0x01020304 * (i + 1) & 0xFFFFFFFF)
        single = [regs.read32(o) for o in offsets]
        c0 = f.counters.snapshot()
        batch = regs.read32_many(offsets)
        spent = f.counters - c0
        assert batch == single and spent.mmio_reads == 8
        if most is not None:
            assert spent.round_trips <= most, spent          # 8 one at a time: 8 round trips
        regs.write32(offsets[0], 0xDEADBEEF)                 # a write after the batch lands whole
        assert regs.read32(offsets[0]) == 0xDEADBEEF
        assert regs.read32_many([]) == []
    finally:
        f.close()


@pytest.mark.parametrize("firmware", ["stock", "open"])
def test_batched_reads_of_a_silent_gpu_fail_as_single_reads_do(sim_bus, firmware):
    """No completion for a read in the batch: it is sent again alone, with its retries, and the error is the one a
    single read gives (GPUNotAnswering), not a value."""
    backend = usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware=firmware)
    f = open_function(backend=backend)
    try:
        regs = f.bar(5)
        backend.bridge.inject("gpu_silent")
        with pytest.raises(GPUNotAnswering):
            regs.read32_many([SCRATCH, SCRATCH + 4])
        backend.bridge.heal()
        regs.write32(SCRATCH, 7)
        assert regs.read32_many([SCRATCH]) == [7]
    finally:
        f.close()


@pytest.mark.parametrize("firmware", ["stock", "open"])
def test_a_read_answered_unsupported_request_raises_naming_it(sim_bus, firmware):
    """With the GPU's memory decoding off, its BAR answers reads with an Unsupported Request completion: both
    firmwares' paths raise a BridgeError naming the status and the request, never a value."""
    from pcie.usb.link import BridgeError
    backend = usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware=firmware)
    f = open_function(backend=backend)
    try:
        regs = f.bar(5)
        cmd = f.config_read(4, 2)
        f.config_write(4, 2, cmd & ~0x2)                     # PCI_COMMAND.MEMORY off
        with pytest.raises(BridgeError, match=r"unsupported request \(UR\)"):
            regs.read32(SCRATCH)
        f.config_write(4, 2, cmd)
        regs.write32(SCRATCH, 0x5A5A5A5A)
        assert regs.read32(SCRATCH) == 0x5A5A5A5A
    finally:
        f.close()


def test_bus_mastering_is_written_only_when_it_changes(sim_bus):
    """set_bus_master writes PCI_COMMAND only when the bits change (Linux __pci_set_master): the IH's init
    calls it again on a GPU the NBIO's init already enabled, one config read then instead of a read, a write
    and the driver's read-back (two USB round trips). A host that does not let the bits stick is still caught
    by that read-back (amdrv.ip.nbio.NBIO.enable_bus_master)."""
    from types import SimpleNamespace
    from amdrv.ip.nbio import NBIO, NBIOError
    f = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus))
    nbio = SimpleNamespace(dev=SimpleNamespace(pci=f, name="usb-test"))
    try:
        f.config_write(4, 2, f.config_read(4, 2) & ~0x4)          # bus mastering off
        c0 = f.counters.snapshot()
        NBIO.enable_bus_master(nbio)
        spent = f.counters - c0
        assert (spent.config_reads, spent.config_writes) == (2, 1) and f.config_read(4, 2) & 0x6 == 0x6
        c0 = f.counters.snapshot()
        NBIO.enable_bus_master(nbio)
        spent = f.counters - c0
        assert (spent.config_reads, spent.config_writes, spent.round_trips) == (1, 0, 1)
        f.config_write(4, 2, f.config_read(4, 2) & ~0x4)
        real = f.config_write
        f.config_write = lambda off, size, value: None if off == 4 else real(off, size, value)   # a refusing host
        with pytest.raises(NBIOError, match="the host refused it"):
            NBIO.enable_bus_master(nbio)
    finally:
        f.close()
