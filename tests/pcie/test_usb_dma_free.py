"""Freeing a DMA buffer behind the bridge gives its pages back to the table it took them from: the window
pages (stock firmware), the SRAM slots and the scratch pages (open firmware), and nothing else."""
import pytest

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from pcie.usb.transport import open_function  # noqa: E402


def test_each_buffer_kind_frees_its_own_pages(sim_bus):
    f = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware="open"))
    try:
        scratch_before, slots_before = f._scratch_used.count(True), f.sram_free_slots()
        s = f.alloc_dma(4096, scratch=True)
        d = f.alloc_dma(4096)
        assert f._scratch_used.count(True) == scratch_before + 1 and f.sram_free_slots() == slots_before - 1
        s.free()
        assert f._scratch_used.count(True) == scratch_before and f.sram_free_slots() == slots_before - 1
        d.free()
        assert f.sram_free_slots() == slots_before
    finally:
        f.close()
    g = open_function(backend=usb_bridge.backend("navi31", fresh=True, bus=sim_bus, firmware="stock"))
    try:
        before = g._window.count(True)
        w = g.alloc_dma(4096)
        assert g._window.count(True) == before + 1
        w.free()
        assert g._window.count(True) == before
    finally:
        g.close()
