"""SDMA v6 builder against sdma_v6_0_0_pkt_open.h and what sdma_v6_0.c emits, by hand."""
import pytest

from amdrv import sdma_packets as S


def test_copy_linear_and_split():
    b = S.SDMABuilder()
    at = b.copy(0x2_0000_0000, 0x1_0000_0100, 0x10)
    # sdma_v6_0_emit_copy_buffer: OP(1) | SUB_OP(0); count - 1; 0; src lo/hi; dst lo/hi
    assert list(b.buf) == [0x1, 0xF, 0, 0x100, 1, 0, 2]
    assert at == [1]
    b = S.SDMABuilder()
    at = b.copy(0x1000, 0x0, S.COPY_MAX_BYTES * 2 + 8)
    assert len(b.buf) == 21 and at == [1, 8, 15]
    assert b.buf[15] == 7 and b.buf[17] == 2 * S.COPY_MAX_BYTES and b.buf[19] == 0x1000 + 2 * S.COPY_MAX_BYTES
    with pytest.raises(ValueError):
        b.copy(0, 0, 0)


def test_write_fence_trap():
    b = S.SDMABuilder()
    w = b.write(0x1_0000_0040, 7, 8, 9)
    # OP(2) | SUB_OP(0); dst lo/hi; ndw - 1; data
    assert list(b.buf) == [0x2, 0x40, 1, 2, 7, 8, 9] and w == 4
    b = S.SDMABuilder()
    f = b.fence(0x1_0000_0008, 0x5_0000_0003, bits64=True)
    # sdma_v6_0_ring_emit_fence: OP(5) | MTYPE(3) << 16; addr lo/hi; value; high half at addr + 4
    assert list(b.buf) == [0x30005, 0x8, 1, 3, 0x30005, 0xC, 1, 5] and f == 3
    b = S.SDMABuilder()
    b.trap(0x42)
    assert list(b.buf) == [0x6, 0x42]


def test_poll_and_hdp_flush():
    b = S.SDMABuilder()
    p = b.poll_mem(0x1_0000_0010, 4, function=S.POLL_GE)
    # FUNC(5) << 28 | MEM_POLL << 31 | OP(8); dw5 retry << 16 | interval
    assert list(b.buf) == [0xD0000008, 0x10, 1, 4, 0xFFFFFFFF, 0x0FFF000A] and p == 1

    class Reg:
        def __init__(self, addr):
            self.addr = addr
    b = S.SDMABuilder()
    b.hdp_flush(Reg(0x4C), Reg(0x50), 1 << 10)
    # sdma_v6_0_ring_emit_hdp_flush: OP(8) | HDP_FLUSH(1) << 26 | FUNC(3) << 28; done << 2; req << 2
    assert list(b.buf) == [0x34000008, 0x50, 0x4C, 0x400, 0x400, 0x0FFF000A]


def test_timestamp_fill_gcr_nop():
    b = S.SDMABuilder()
    b.timestamp(0x1_0000_0008)
    # OP(13) | SUB_OP(GET_GLOBAL 2) << 8
    assert list(b.buf) == [0x20D, 8, 1]
    with pytest.raises(ValueError, match="8-byte"):
        b.timestamp(0x4)
    b = S.SDMABuilder()
    b.fill(0x2_0000_0000, 0xDEADBEEF, 64)
    # sdma_v6_0_emit_fill_buffer: OP(11); dst lo/hi; data; bytes - 1
    assert list(b.buf) == [0xB, 0, 2, 0xDEADBEEF, 63]
    b = S.SDMABuilder()
    b.gcr()
    # sdma_v6_0_ring_emit_mem_sync: GL2_INV 0x4000 | GL2_WB 0x8000 | GLM_INV 0x20 | GL1_INV 0x200 |
    # GLV_INV 0x100 | GLK_INV 0x80 | GLI_INV(1) = 0xC3A1, in dword 2 bits 31:16
    assert list(b.buf) == [0x11, 0, 0xC3A10000, 0, 0]
    b = S.SDMABuilder()
    b.nop(3)
    assert list(b.buf) == [0x20000, 0, 0]
