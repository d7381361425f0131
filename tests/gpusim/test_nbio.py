"""NBIO/HDP behaviour a driver relies on: doorbell aperture, HDP flushes, access counters, async clock."""
import time

import pytest

import pcie
from amdrv.autogen import smu_13_0_0 as S
from gpusim import board, provider
from gpusim.device import DMAError


def _open(bus, **kw):
    return provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=bus, **kw)


def _s2a(dev, n, **fields):
    """Writes S2A_DOORBELL_ENTRY_n_CTRL through the register space (handlers run)."""
    name = f"S2A_DOORBELL_ENTRY_{n}_CTRL"
    value = dev.table("NBIO")[name].encode(**{f"S2A_DOORBELL_PORT{n}_{k}": v for k, v in fields.items()})
    dev.regs.write(dev.reg_addr("NBIO", name), value)


def _listen(nbio, client):
    rung = []
    nbio.on_doorbell(client, lambda i, v: rung.append((i, v)))
    return rung


def test_doorbells_need_the_aperture_enabled(sim_bus):
    f = _open(sim_bus)
    dev, nbio = f.dev, f.dev.blocks["NBIO"]
    rung = _listen(nbio, "SDMA")
    _s2a(dev, 2, ENABLE=1, AWID=0xE, RANGE_OFFSET=0x10, RANGE_SIZE=16, AWADDR_31_28_VALUE=3)
    f.bar(2).write32(0x10 * 4, 7)
    assert rung == [] and "doorbell aperture disabled" in str(dev.errors[-1])
    en = dev.reg_addr("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN") * 4
    f.bar(5).write32(en, 1)                     # nbio_v4_3_enable_doorbell_aperture
    f.bar(2).write32(0x10 * 4, 7)
    f.bar(2).write32(0x40 * 4, 9)               # outside every routed range: stored, dropped, said so
    assert rung == [(0x10, 7)] and f.bar(2).read32(0x40 * 4) == 9
    assert "dword 0x40: no enabled S2A_DOORBELL_ENTRY_n_CTRL covers it" in str(dev.errors[-1])
    f.bar(2).write64(0x12 * 4, 0x1_0000_0002)   # a 64-bit write pointer: one ring, both halves
    assert rung[-1] == (0x12, 0x1_0000_0002) and len(rung) == 2
    assert f.bar(2).read64(0x12 * 4) == 0x1_0000_0002
    f.close()


def test_s2a_entries_route_each_doorbell_to_one_client(sim_bus):
    f = _open(sim_bus)
    dev, nbio = f.dev, f.dev.blocks["NBIO"]
    dev.set("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    sdma, ih, cp = _listen(nbio, "SDMA"), _listen(nbio, "IH"), _listen(nbio, "CP")

    def ring(index):
        n = len(dev.errors)
        sdma.clear(), ih.clear(), cp.clear()
        f.bar(2).write32(index * 4, 1)
        return ("SDMA" if sdma else "IH" if ih else "CP" if cp else
                str(dev.errors[-1]) if len(dev.errors) > n else None)

    assert "no enabled S2A" in ring(0x6)         # power-on: nothing routed, even the CP's doorbells
    # nbio_v4_3_sdma_doorbell_range(instance 0, 0x100 << 1, 20 * 2): SDMA0 at 0x200 and SDMA1 at 0x214
    _s2a(dev, 2, ENABLE=1, AWID=0xE, RANGE_OFFSET=0x200, RANGE_SIZE=40, AWADDR_31_28_VALUE=3)
    _s2a(dev, 1, ENABLE=1, AWID=0, RANGE_OFFSET=0x2F0, RANGE_SIZE=2, AWADDR_31_28_VALUE=0)   # IH
    assert ring(0x200) == ring(0x214) == ring(0x227) == "SDMA" and ring(0x2F0) == "IH"
    assert "no enabled S2A" in ring(0x228) and "no enabled S2A" in ring(0x6)
    # gc_doorbell_init's size-0 entries: the CP's default route for what no sized entry claims
    dev.regs.write(dev.reg_addr("NBIO", "S2A_DOORBELL_ENTRY_0_CTRL"), 0x30000007)
    assert ring(0x6) == ring(0x228) == "CP" and ring(0x200) == "SDMA" and ring(0x2F1) == "IH"
    dev.regs.write(dev.reg_addr("NBIO", "S2A_DOORBELL_ENTRY_0_CTRL"), 0)
    dev.regs.write(dev.reg_addr("NBIO", "S2A_DOORBELL_ENTRY_3_CTRL"), 0x3000000D)   # the other GC entry
    assert ring(0x6) == "CP"
    # upstream's "off" (RANGE_SIZE 0, ENABLE kept): the SDMA range is gone and its doorbells go the CP's way
    _s2a(dev, 2, ENABLE=1, AWID=0xE, RANGE_OFFSET=0x200, RANGE_SIZE=0, AWADDR_31_28_VALUE=3)
    assert ring(0x200) == "CP"
    # a wrong AWID or AWADDR sends the doorbell where nobody listens
    _s2a(dev, 2, ENABLE=1, AWID=0x3, RANGE_OFFSET=0x200, RANGE_SIZE=40, AWADDR_31_28_VALUE=0)
    assert "AWADDR 0x0, AWID 0x3) leads to no modeled client" in ring(0x200)
    _s2a(dev, 2, ENABLE=0, AWID=0xE, RANGE_OFFSET=0x200, RANGE_SIZE=40, AWADDR_31_28_VALUE=3)
    assert ring(0x200) == "CP"                   # a disabled entry claims nothing
    saved = [f.config_read(4 * i, 4) for i in range(16)]
    board.mode1_reset(dev)                       # the BIF is reset too: every entry back to 0
    for i in reversed(range(16)):                # the config space back (amdgpu_device_load_pci_state)
        f.config_write(4 * i, 4, saved[i])
    dev.set("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    assert "no enabled S2A" in ring(0x6)
    f.close()


def test_hdp_flush_through_the_remap_page_and_the_request_register(sim_bus):
    f = _open(sim_bus)
    dev, hdp, bar = f.dev, f.dev.blocks["HDP"], f.bar(5)
    f.bar(0).write32(0x2000, 1)
    assert hdp.unflushed_writes == 1
    remap = 0x80000 - 4096                       # MMIO_REG_HOLE_OFFSET, rmmio_remap.reg_offset
    bar.write32(remap, 0)                        # not remapped yet: plain storage
    assert hdp.flushes == 0
    bar.write32(dev.reg_addr("NBIO", "BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL") * 4, remap)
    bar.write32(remap, 0)                        # hdp_v6_0_flush_hdp
    assert hdp.flushes == 1 and hdp.unflushed_writes == 0
    req = dev.reg_addr("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_REQ") * 4
    done = dev.reg_addr("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_DONE") * 4
    bar.write32(req, 1 << 10)                    # SDMA0's bit
    assert [bar.read32(done) for _ in range(2)][-1] == 1 << 10 and hdp.flushes == 2
    f.close()


def test_counters_count_every_access(sim_bus):
    f = _open(sim_bus)
    before = f.counters.snapshot()
    f.bar(5).read32(0)
    f.bar(5).write32(0x100, 1)
    f.bar(0).read(0, 64)
    f.config_read(0, 2)
    d = f.counters - before
    assert (d.mmio_reads, d.mmio_writes, d.bulk_read_bytes, d.config_reads) == (1, 1, 64, 1)
    with pytest.raises(pcie.PCIError, match="naturally aligned"):
        f.config_read(0x11, 2)
    f.close()


def test_async_clock_answers_without_polling(sim_bus):
    f = _open(sim_bus, async_clock=True)
    f.dev.blocks["SMU"].firmware_loaded()
    bar = f.bar(5)
    bar.write32(0x1629A * 4, 0)
    bar.write32(0x16282 * 4, S.PPSMC_MSG_GetSmuVersion)
    deadline = time.monotonic() + 5
    while f.dev.regs.peek(0x1629A) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)                        # no MMIO: only the device's own clock advances
    assert f.dev.regs.peek(0x1629A) == S.PPSMC_Result_OK
    f.close()
    assert f.dev._thread is None


def test_a_gpu_write_to_the_doorbell_bar_rings_only_through_the_self_ring_aperture(sim_bus):
    """nbio_v4_3_enable_doorbell_selfring_aperture: with it, an engine's write to the doorbell BAR's bus
    address rings the doorbell inside the chip; without it the write goes out to the bus (nothing there)."""
    f = _open(sim_bus)
    dev, nbio = f.dev, f.dev.blocks["NBIO"]
    dev.pci.write(0x04, 2, dev.pci.command | 0x6)
    dev.set("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    _s2a(dev, 2, ENABLE=1, AWID=0xE, RANGE_OFFSET=0x200, RANGE_SIZE=40, AWADDR_31_28_VALUE=3)
    rung = _listen(nbio, "SDMA")
    bar2 = f.config_read(0x18, 4) & ~0xF | f.config_read(0x1C, 4) << 32
    with pytest.raises(DMAError):
        dev.dma_write(bar2 + 0x200 * 4, (5).to_bytes(8, "little"))
    assert rung == []
    w = lambda name, v: dev.regs.write(dev.reg_addr("NBIO", name), v)  # noqa: E731
    w("BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_LOW", bar2 & 0xFFFFFFFF)
    w("BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_HIGH", bar2 >> 32)
    w("BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL", 0x3)             # EN, MODE 1, SIZE 0
    dev.dma_write(bar2 + 0x200 * 4, (5).to_bytes(8, "little"))       # a 64-bit wptr: one doorbell
    dev.dma_write(bar2 + 0x214 * 4, (7).to_bytes(4, "little"))
    assert rung == [(0x200, 5), (0x214, 7)] and f.bar(2).read32(0x200 * 4) == 5
    w("BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL", 0)               # soc21_common_hw_fini
    with pytest.raises(DMAError):
        dev.dma_write(bar2 + 0x200 * 4, (6).to_bytes(8, "little"))
    assert len(rung) == 2
    f.close()


def test_the_hdp_flush_happens_only_where_the_remap_register_points(sim_bus):
    """nbio_v4_3_remap_hdp_registers: BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL.ADDRESS is the BAR5 byte offset
    where the flush page appears; moved, the old offset is plain storage again."""
    f = _open(sim_bus)
    dev, hdp, bar = f.dev, f.dev.blocks["HDP"], f.bar(5)
    remap = dev.reg_addr("NBIO", "BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL") * 4
    first, second = 0x80000 - 4096, 0x80000 - 8192
    bar.write32(remap, first)
    f.bar(0).write32(0x3000, 0x1234)
    bar.write32(second, 0)                       # not the remapped page: no flush, the engines see nothing yet
    assert hdp.flushes == 0 and dev.vram.read32(0x3000) == 0
    bar.write32(first, 0)
    assert hdp.flushes == 1 and dev.vram.read32(0x3000) == 0x1234
    bar.write32(remap, second)
    f.bar(0).write32(0x3000, 0x5678)
    bar.write32(first, 0)                        # the old page: storage now
    assert hdp.flushes == 1 and dev.vram.read32(0x3000) == 0x1234
    bar.write32(second, 0)
    assert hdp.flushes == 2 and dev.vram.read32(0x3000) == 0x5678
    f.close()
