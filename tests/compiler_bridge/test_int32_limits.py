"""int32 is the widest integer here, and the kernels' indices are int32: values and sizes past it are refused
where they enter, instead of wrapping (an int64 2**40 became 0, a uint32 3e9 became -1294967296, `t + 2**33`
added 0, all without a word)."""
import numpy as np
import pytest

from compiler_bridge import ir
from compiler_bridge.tensor import Tensor


def T(x, **kw):
    return Tensor(x, device="c", **kw)


def test_integers_past_int32_are_refused_not_wrapped():
    with pytest.raises(OverflowError, match=r"1099511627776 at index \(1,\) \(one of 1\) does not fit int32"):
        T(np.array([5, 2**40]))
    with pytest.raises(OverflowError, match="3000000000 at index"):
        T([3_000_000_000])
    with pytest.raises(OverflowError, match="3000000000 at index"):
        T(np.array([3_000_000_000], np.uint32))
    with pytest.raises(OverflowError, match="1099511627776 does not fit int32"):
        Tensor.full((2,), 2**40, device="c")
    with pytest.raises(OverflowError, match="8589934592 does not fit int32"):
        T(np.array([1, 2], np.int32)) + 2**33
    with pytest.raises(OverflowError, match="nan at index"):
        T(np.array([1.0, np.nan]), dtype="int32")
    # what fits goes through as before
    assert (T(np.array([-2**31, 2**31 - 1], np.int64)).numpy() == [-2**31, 2**31 - 1]).all()
    assert (T(np.array([7], np.uint32)) + (2**31 - 8)).numpy().tolist() == [2**31 - 1]
    assert T(np.array([2.9, -2.9]), dtype="int32").numpy().tolist() == [2, -2]


def test_the_ir_refuses_what_int32_indices_cannot_reach():
    def kernel(size=16, buf=16, const=1, length=4):
        b = ir.Builder()
        i = b.gid()
        v = b.begin_reduce()
        b.end_reduce("sum", length, b.binary("add", b.load(0, v, "int32"), b.const(const, "int32")))
        b.store(1, i, b.load(0, i, "int32"))
        return ir.Kernel("k", (ir.BufParam("x", "int32", buf, "r"), ir.BufParam("y", "int32", size, "w")), (),
                         size, tuple(b._stack[0]))
    ir.validate(kernel())
    with pytest.raises(ir.IRError, match="size 2147483648 work items is more than int32 indices reach"):
        ir.validate(kernel(size=2**31))
    with pytest.raises(ir.IRError, match="buffer x of 2147483649 elements"):
        ir.validate(kernel(buf=2**31 + 1))
    with pytest.raises(ir.IRError, match="int32 constant 4294967296 is not an integer in int32's range"):
        ir.validate(kernel(const=2**32))
    with pytest.raises(ir.IRError, match="bad reduce"):
        ir.validate(kernel(length=2**31))


def test_the_rdna3_generator_refuses_buffers_its_32_bit_byte_offsets_cannot_reach():
    from compiler_bridge.codegen import rdna3

    def kernel(n):
        b = ir.Builder()
        i = b.gid()
        b.store(1, i, b.load(0, i, "float32"))
        return ir.Kernel("copy_k", (ir.BufParam("x", "float32", n, "r"), ir.BufParam("y", "float32", 16, "w")), (),
                         16, tuple(b._stack[0]))
    assert "global_load_b32" in rdna3.assembly(kernel(1 << 30))
    with pytest.raises(rdna3.CodegenError, match="buffer x has 1073741825 elements; .* 32-bit byte offset"):
        rdna3.assembly(kernel((1 << 30) + 1))
