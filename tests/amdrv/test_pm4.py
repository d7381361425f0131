"""PM4 builder against the bit layouts of nvd.h and the packets gfx_v11_0.c emits, by hand."""
import pytest

from amdrv import pm4


def test_header_layout():
    # nvd.h PACKET3(op, n): 3 << 30 | (n & 0x3FFF) << 16 | (op & 0xFF) << 8
    assert pm4.header(0x76, 1) == 0xC0017600
    assert pm4.NOP_1DW == 0xFFFF1000  # PACKET3(PACKET3_NOP, 0x3FFF), amdgpu's one-dword compute nop
    with pytest.raises(ValueError, match="count"):
        pm4.header(0x10, 0x4000)


def test_acquire_mem_is_emit_mem_sync():
    b = pm4.PM4()
    at = b.acquire_mem()
    # gfx_v11_0_emit_mem_sync: GL2_INV(1<<14) GL2_WB(1<<15) GLM_INV(1<<5) GLM_WB(1<<4) GL1_INV(1<<9)
    # GLV_INV(1<<8) GLK_INV(1<<7) GLI_INV(1<<0) = 0xC3B1
    assert list(b.buf) == [0xC0065800, 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA, 0xC3B1]
    assert at == 7


def test_release_mem_fence_as_emit_fence():
    b = pm4.PM4()
    b.nop()
    at = b.release_mem(0x1_2345_6780, 0x1_0000_0007, data_sel=pm4.DATA_64, interrupt=True)
    # dword 1: SEQ(1<<22) GL2_WB(1<<21) GL2_INV(1<<20) GL2_US(1<<16) GL1_INV(1<<15) GLV_INV(1<<14)
    # GLM_INV(1<<13) GLM_WB(1<<12) | CACHE_POLICY(3)<<25 | EVENT CACHE_FLUSH_AND_INV_TS_EVENT 0x14 | INDEX 5<<8
    # dword 2: DATA_SEL(2) << 29 | INT_SEL(2) << 24
    assert list(b.buf[1:]) == [0xC0064900, 0x0671F514, 0x42000000, 0x23456780, 0x1, 0x7, 0x1, 0]
    assert at == 4 and b.buf[at + 2] == 7
    b.buf[at + 2] = 9  # patched in place
    assert b.buf[6] == 9
    c = pm4.PM4()
    c.release_mem(0x1000, data_sel=pm4.DATA_GPU_CLOCK)
    assert c.buf[2] == 3 << 29


def test_set_sh_reg_and_dispatch():
    b = pm4.PM4()
    at = b.set_sh_reg(0x20C, 0x11, 0x22)
    d = b.dispatch_direct(4, 2, 1, 1 | 1 << 15)
    assert list(b.buf) == [0xC0027600, 0x20C, 0x11, 0x22, 0xC0031500, 4, 2, 1, 0x8001]
    assert (at, d) == (2, 5)


def test_sh_offset_from_gc_bases():
    from amdrv import regs
    gc = regs.IPBlock(regs.load("gc_11_0_0"), bases=(0x1260, 0xA000), mmio=None, name="GC")
    # COMPUTE_PGM_LO is GC base 0 + 0x1bac = 0x2e0c; SET_SH_REG_START 0x2C00
    assert pm4.sh_offset(gc, "COMPUTE_PGM_LO") == 0x20C
    with pytest.raises(ValueError, match="not an SH register"):
        pm4.sh_offset(gc, "GRBM_STATUS")


def test_wait_write_ib_event_copy():
    b = pm4.PM4()
    w = b.wait_reg_mem(0x2_0000_0010, 5, function=pm4.WAIT_GE)
    # gfx_v11_0_wait_reg_mem: MEM_SPACE(1)<<4 | OPERATION 0 | FUNCTION | ENGINE 0
    assert list(b.buf) == [0xC0053C00, 0x15, 0x10, 0x2, 5, 0xFFFFFFFF, 4]
    assert w == 2
    b = pm4.PM4()
    wd = b.write_data(0x1000, 0xAA, 0xBB)
    # ENGINE_SEL(0) | DST_SEL(5) << 8 | WR_CONFIRM (1 << 20)
    assert list(b.buf) == [0xC0043700, 0x100500, 0x1000, 0, 0xAA, 0xBB]
    assert wd == 2
    b = pm4.PM4()
    b.indirect_buffer(0x3_0000_0100, 12)
    assert list(b.buf) == [0xC0023F00, 0x100, 3, 0x800000 | 12]
    with pytest.raises(ValueError, match="dword aligned"):
        b.indirect_buffer(0x102, 1)
    b = pm4.PM4()
    b.event_write(pm4.CS_PARTIAL_FLUSH, 4)
    b.copy_data(pm4.SEL_REGISTER, 0x1234, pm4.SEL_MEMORY, 0x5_0000_0008)
    assert list(b.buf) == [0xC0004600, 0x407, 0xC0044000, 0x100500, 0x1234, 0, 8, 5]


def test_nop_lengths():
    b = pm4.PM4()
    b.nop(1)
    b.nop(3)
    assert list(b.buf) == [0xFFFF1000, 0xC0011000, 0, 0]
