"""AMDevice.attach: identity from discovery, register blocks per instance, VRAM through BAR0 or indirectly."""
import pytest

import pcie
from amdrv.device import AMDevice


def test_attach_navi31_and_navi33():
    with AMDevice.attach("am:sim") as d:
        assert d.chip.name == "navi31" and d.disc.version_of("MP1") == (13, 0, 0)
        assert d.vram.visible == d.vram.size  # large BAR by default
        # gc_11_0_0_offset.h: regGRBM_STATUS 0x0da4, base index 0; GC's base 0 on Navi31 is 0x1260
        assert d.reg("GC").GRBM_STATUS.addr == (0x1260 + 0x0DA4) * 4
        assert d.reg("SDMA0").table is d.reg("GC").table
    with AMDevice.attach("am:sim:navi33") as d:
        assert d.chip.name == "navi33" and d.disc.version_of("GC") == (11, 0, 2)


@pytest.mark.parametrize("offset,size", [(0x10000000 - 6, 13), (0x10000000, 8), (0x5FFF0001, 7), (100 << 20, 4096)])
def test_small_bar_reaches_all_vram(sim_bus, offset, size):
    fn = pcie.open_function("sim", "navi31", small_bar=True, fresh=True, bus=sim_bus)
    d = AMDevice("am:sim(small-bar)", fn)
    assert d.vram.visible == 256 << 20 < d.vram.size
    data = bytes(range(1, size + 1)) if size < 256 else bytes(size)
    before = fn.counters.snapshot()
    d.vram.write(offset, data)
    assert d.vram.read(offset, size) == data
    fn.dev.blocks["HDP"].flush("test")              # past the HDP (gpusim.hdp)
    assert fn.dev.vram.read(offset, size) == data  # it really landed in VRAM
    if offset >= d.vram.visible:
        assert (fn.counters - before).mmio_writes > 0  # went through MM_INDEX/MM_DATA
    d.close()


def test_vram_bounds():
    with AMDevice.attach("am:sim") as d:
        with pytest.raises(pcie.PCIError, match="outside the"):
            d.vram.read(d.vram.size - 2, 4)


def test_mapped_vram_traffic_is_counted():
    with AMDevice.attach("am:sim") as d:
        before = d.pci.counters.snapshot()
        d.vram.write(1 << 20, bytes(4096))
        d.vram.read(1 << 20, 100)
        diff = d.pci.counters - before
        assert (diff.bulk_write_bytes, diff.bulk_read_bytes) == (4096, 100)
