"""The HDP model: host writes to VRAM (BAR0, its direct mapping, MM_DATA) reach the engines only after an
HDP flush (hdp_v6_0_flush_hdp's remap-page write, or BIF_BX_PF0_GPU_HDP_FLUSH_REQ), byte-exact."""
from gpusim import persist, provider

MMIO_REG_HOLE_OFFSET = 0x7F000      # soc21.c rmmio_remap.reg_offset; + KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL (0)


def open_fn(bus):
    return provider.open_function("navi31", fresh=True, bus=bus, vram_size=1 << 30)


def test_bar0_writes_wait_for_the_remap_page_flush(sim_bus):
    f = open_fn(sim_bus)
    dev, bar0, regs = f.dev, f.bar(0), f.bar(5)
    bar0.write(0x10000, b"host data")
    bar0.write32(0x10010, 0x12345678)
    assert bar0.read(0x10000, 9) == b"host data"                   # the host reads its own writes
    assert dev.vram.read(0x10000, 9) == bytes(9) and dev.vram.read32(0x10010) == 0   # the engines do not
    regs.write32(MMIO_REG_HOLE_OFFSET, 0)                           # no remap programmed yet: a plain register
    assert dev.vram.read(0x10000, 9) == bytes(9)
    regs.write32(dev.reg_addr("NBIO", "BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL") * 4, MMIO_REG_HOLE_OFFSET)
    regs.write32(MMIO_REG_HOLE_OFFSET, 0)                           # hdp_v6_0_flush_hdp
    assert dev.vram.read(0x10000, 9) == b"host data" and dev.vram.read32(0x10010) == 0x12345678
    assert dev.blocks["HDP"].last_flush_by.startswith("remap")
    f.close()


def test_direct_mapping_writes_wait_for_the_flush_request(sim_bus):
    f = open_fn(sim_bus)
    dev, view, regs = f.dev, f.bar(0).direct(), f.bar(5)
    view[0x2000:0x2004] = b"\x01\x02\x03\x04"                       # a memcpy the simulator never sees
    assert dev.vram.read(0x2000, 4) == bytes(4)
    req = dev.reg_addr("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_REQ") * 4
    done = dev.reg_addr("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_DONE") * 4
    regs.write32(req, 1 << 10)                                      # SDMA0's bit
    assert dev.vram.read(0x2000, 4) == bytes(4)                     # done one step later
    assert regs.read32(done) & (1 << 10)
    assert dev.vram.read(0x2000, 4) == b"\x01\x02\x03\x04"
    f.close()


def test_engine_writes_into_a_page_with_pending_host_bytes_are_kept(sim_bus):
    f = open_fn(sim_bus)
    dev, bar0 = f.dev, f.bar(0)
    bar0.write(0x3000, b"HH")                                       # pending in the HDP
    dev.vram.write(0x3002, b"GG")                                   # an engine writes the same page
    assert bar0.read(0x3000, 4) == b"HHGG"                          # the host sees both
    assert dev.vram.read(0x3000, 4) == b"\0\0GG"
    dev.blocks["HDP"].flush("test")
    assert dev.vram.read(0x3000, 4) == b"HHGG" == bar0.read(0x3000, 4)
    dev.vram.write(0x3000, b"gg")                                   # after the flush the host sees engines again
    assert bar0.read(0x3000, 4) == b"ggGG"
    f.close()


def test_saving_drains_the_hdp(sim_bus, tmp_path):
    f = open_fn(sim_bus)
    f.bar(0).write(0x5000, b"saved")
    persist.save(f.dev, tmp_path / "gpu.state")
    assert persist.load(tmp_path / "gpu.state").vram.read(0x5000, 5) == b"saved"
    f.close()
