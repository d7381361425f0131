"""NBIO/SOC21/HDP init against the simulator: bus mastering, doorbells, the HDP flush both ways, the
registers past the register BAR, and the boot state in scratch registers across a reopen and a reset."""
import pytest

import pcie
from amdrv.device import AMDevice
from amdrv.ip.nbio import NBIO, NBIOError
from gpusim import board



def fresh(bus, chip="navi31", **kw):
    fn = pcie.open_function("sim", chip, fresh=True, bus=bus, **kw)
    dev = AMDevice(f"am:sim:{chip}", fn)
    return dev, NBIO(dev), fn.dev


def test_init_enables_bus_mastering_doorbells_and_the_remap_page(sim_bus):
    dev, nbio, s = fresh(sim_bus)
    assert not s.pci.command & 0x4                      # bus mastering is off at power-on
    dev.pci.bar(2).write32(0x100, 1)
    assert any("doorbell aperture disabled" in e for e in map(str, s.errors))  # dropped before init
    nbio.init()
    assert s.pci.command & 0x6 == 0x6
    assert s.blocks["NBIO"].doorbell_enabled
    # soc21.c: MMIO_REG_HOLE_OFFSET 0x7F000 (+ KFD_MMIO_REMAP_HDP_MEM/REG_FLUSH_CNTL 0 and 4)
    assert s.get("NBIO", "BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL") == 0x7F000
    assert s.get("NBIO", "BIF_BX0_REMAP_HDP_REG_FLUSH_CNTL") == 0x7F004
    # the self-ring aperture points at the doorbell BAR's bus address (config BAR2)
    bar2 = dev.pci.config_read(0x18, 4) & ~0xF | dev.pci.config_read(0x1C, 4) << 32
    assert s.get("NBIO", "BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_LOW") | \
        s.get("NBIO", "BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_HIGH") << 32 == bar2
    dev.pci.bar(2).write32(0x100, 2)                     # through the aperture, but routed nowhere yet
    assert "no enabled S2A" in str(s.errors[-1]) and s.blocks["NBIO"].doorbell_read(0x100) == 2
    nbio.gc_doorbell_init()                              # the CP's routing entries
    dev.pci.bar(2).write32(0x100, 3)                     # reaches the CP now, which has no queue there
    assert "to the CP, where nothing listens" in str(s.errors[-1]) and s.blocks["NBIO"].doorbell_read(0x100) == 3
    nbio.fini()                                          # soc21_common_hw_fini: both apertures off
    assert not s.blocks["NBIO"].doorbell_enabled and s.get("NBIO", "BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL") == 0
    dev.pci.bar(2).write32(0x100, 4)
    assert "doorbell aperture disabled" in str(s.errors[-1])


def test_registers_past_the_bar_go_through_rsmu(sim_bus):
    dev, nbio, s = fresh(sim_bus)
    s.set("NBIO", "RCC_DEV0_EPF2_STRAP2", 0xFFFFFFFF)   # STRAP_NO_SOFT_RESET_DEV0_F2 set by "firmware"
    nbio.init()
    entry1 = nbio.regs.S2A_DOORBELL_ENTRY_1_CTRL
    assert entry1.addr >= dev.mmio.size                  # really beyond the 1 MiB register BAR
    nbio.ih_doorbell_range(0x2F0)
    v = s.get("NBIO", "S2A_DOORBELL_ENTRY_1_CTRL")
    f = entry1.decode(v)
    assert (f["S2A_DOORBELL_PORT1_ENABLE"], f["S2A_DOORBELL_PORT1_RANGE_OFFSET"], f["S2A_DOORBELL_PORT1_RANGE_SIZE"]) \
        == (1, 0x2F0, 2)
    assert entry1.read() == v
    strap = nbio.regs.RCC_DEV0_EPF2_STRAP2
    assert strap.decode(s.get("NBIO", "RCC_DEV0_EPF2_STRAP2"))["STRAP_NO_SOFT_RESET_DEV0_F2"] == 0
    nbio.gc_doorbell_init()
    assert s.get("NBIO", "S2A_DOORBELL_ENTRY_0_CTRL") == 0x30000007
    assert s.get("NBIO", "S2A_DOORBELL_ENTRY_3_CTRL") == 0x3000000D


def test_hdp_flush_through_the_remap_page_and_the_request_path(sim_bus):
    dev, nbio, s = fresh(sim_bus)
    nbio.init()
    hdp = s.blocks["HDP"]
    dev.pci.bar(0).write32(0x1000, 0xDEADBEEF)
    dev.pci.bar(0).write(0x2000, b"x" * 64)
    assert hdp.unflushed_writes > 0
    nbio.hdp_flush()
    assert hdp.unflushed_writes == 0 and hdp.last_flush_by == "remap HDP_MEM_FLUSH_CNTL"
    before = hdp.flushes
    nbio.hdp_flush("SDMA0")
    assert hdp.flushes == before + 1 and hdp.last_flush_by == "GPU_HDP_FLUSH_REQ"
    req, done, mask = nbio.hdp_flush_request("CP3")
    assert mask == 1 << 3 and done.name == "BIF_BX_PF0_GPU_HDP_FLUSH_DONE"
    with pytest.raises(NBIOError, match="no HDP flush client 'CP10'"):
        nbio.hdp_flush("CP10")


def test_an_hdp_flush_never_done_is_an_nbio_error_naming_the_client(sim_bus, monkeypatch):
    """The engines' HDP flush waits for the client's bit in GPU_HDP_FLUSH_DONE (nbio_v4_3_hdp_flush_reg):
    when it never comes the wait ends in NBIOError naming the device, register and client."""
    from amdrv import regs
    dev, nbio, s = fresh(sim_bus)
    nbio.init()
    orig = regs.Register.read
    monkeypatch.setattr(regs.Register, "read",
                        lambda r: 0 if r.name == "BIF_BX_PF0_GPU_HDP_FLUSH_DONE" else orig(r))
    with pytest.raises(NBIOError, match=rf"{dev.name}: .*GPU_HDP_FLUSH_DONE: .*the HDP flush requested as SDMA1 "
                                        r"\(read 0x00000000, want bits 0x\w+ = 0x\w+\)"):
        nbio.hdp_flush("SDMA1")


def test_hdp_flush_without_the_remap_does_not_flush(sim_bus):
    dev, nbio, s = fresh(sim_bus)
    dev.pci.bar(0).write32(0x1000, 1)
    nbio.hdp_flush()   # before init: the remap page is not programmed, so nothing is flushed
    assert s.blocks["HDP"].flushes == 0


def test_boot_state_survives_a_reopen_and_is_cleared_by_mode1_reset(sim_bus):
    dev, nbio, s = fresh(sim_bus)
    assert nbio.read_state() is None                    # power-on: no AM state
    dev.mm.alloc_boot(3 << 20, tag="something")
    written = nbio.write_state(7, clean=False)
    assert written.boot_base == dev.mm.boot_base and written.boot_used == 3 << 20
    assert nbio.read_state() == written
    nbio.write_state(7, clean=True)
    dev.close()
    # a new driver instance on the same GPU (not fresh) finds it
    dev2 = AMDevice("am:sim", pcie.open_function("sim", "navi31", bus=sim_bus))
    state = NBIO(dev2).read_state()
    assert state.version == 7 and state.clean and state.boot_base == dev2.mm.boot_base
    assert state.boot_size == dev2.mm.boot_end - dev2.mm.boot_base and state.boot_used == 3 << 20
    board.mode1_reset(dev.pci.dev)
    assert NBIO(dev2).read_state() is None
    with pytest.raises(NBIOError, match="does not fit 16 bits"):
        NBIO(dev2).write_state(1 << 16, clean=True)
