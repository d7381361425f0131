"""NBIO/HDP behaviour a driver relies on: doorbell aperture, HDP flushes, access counters, async clock."""
import time

import pytest

import pcie
from amdrv.autogen import smu_13_0_0 as S
from gpusim import provider


def _open(slot=13, **kw):
    return provider.open_function("navi31", vram_size=1 << 30, fresh=True, slot=slot, **kw)


def test_doorbells_need_the_aperture_enabled():
    f = _open()
    dev, nbio = f.dev, f.dev.blocks["NBIO"]
    rung = []
    nbio.on_doorbell(0x10, 0x1F, lambda i, v: rung.append((i, v)))
    f.bar(2).write32(0x10 * 4, 7)
    assert rung == [] and "doorbell aperture disabled" in str(dev.errors[-1])
    en = dev.reg_addr("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN") * 4
    f.bar(5).write32(en, 1)                     # nbio_v4_3_enable_doorbell_aperture
    f.bar(2).write32(0x10 * 4, 7)
    f.bar(2).write32(0x40 * 4, 9)               # outside every routed range: stored, nobody rings
    assert rung == [(0x10, 7)] and f.bar(2).read32(0x40 * 4) == 9
    f.bar(2).write64(0x12 * 4, 0x1_0000_0002)   # a 64-bit write pointer: one ring, both halves
    assert rung[-1] == (0x12, 0x1_0000_0002) and len(rung) == 2
    assert f.bar(2).read64(0x12 * 4) == 0x1_0000_0002
    f.close()


def test_hdp_flush_through_the_remap_page_and_the_request_register():
    f = _open()
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


def test_counters_count_every_access():
    f = _open()
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


def test_async_clock_answers_without_polling():
    f = _open(async_clock=True)
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
