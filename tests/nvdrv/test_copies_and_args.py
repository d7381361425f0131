"""nvdrv: copies and graph replays name memory the copy engine and the kernel may reach (each of these once went
through silently: a replayed copy onto a smaller buffer faulted or wrote on into the next allocation, dev.copy into
a smaller buffer copied less, another GPU's buffer was used at an address that names something else here)."""
import struct

import numpy as np
import pytest

import hcq
from gpusim.nv.rm import SimProvider
from nvdrv import device as D
from nvdrv.device import NVHCQDevice
from tests.nvdrv.conftest import fake_cubin


def launches(dev):
    return dev.prov.rm.gpu.launches


def test_a_graph_copy_replayed_onto_a_smaller_buffer_is_refused(nvdev):
    src, big, small = nvdev.alloc(1 << 17), nvdev.alloc(1 << 17), nvdev.alloc(4096)
    g = nvdev.graph()
    g.copy(g.var("dst"), src, 1 << 17)
    g(dst=big, wait=True)
    with pytest.raises(hcq.HCQError, match="copy to .* the copy of 131072 bytes overruns it"):
        g(dst=small, wait=True)
    g(wait=True)                  # the refused replay changed nothing: dst is still big


def test_dev_copy_into_a_smaller_buffer_is_an_error_not_a_shorter_copy(nvdev):
    src, small = nvdev.alloc(1 << 17), nvdev.alloc(4096)
    with pytest.raises(hcq.HCQError, match="overruns it"):
        nvdev.copy(small, src)     # all of src, as hcq's copy says; it copied min(sizes) silently
    nvdev.copy(small, src, 4096)
    nvdev.copy(small, src, 0)
    with pytest.raises(hcq.HCQError, match="a byte count is positive"):
        nvdev.copy_queue().copy(small, src, -1)


def test_a_copy_of_4_gib_or_more_is_split_into_lines(nvdev, monkeypatch):
    monkeypatch.setattr(D, "COPY_LINE", 4096)      # the 32-bit LINE_LENGTH_IN, scaled down
    data = bytes(range(256)) * 48
    a, b, c = nvdev.alloc(len(data)), nvdev.alloc(len(data)), nvdev.alloc(len(data))
    nvdev.copyin(a, data)
    q = nvdev.copy_queue()
    i = q.copy(b, a, len(data))
    q.update_copy(i, dst=c)        # every line moves with the buffer
    q.signal(nvdev.timeline, nvdev.next_timeline())
    q.submit()
    nvdev.synchronize()
    assert nvdev.copyout(c) == data and nvdev.copyout(b) == bytes(len(data))


def test_another_gpus_buffers_and_programs_are_refused(nvdev, saxpy):
    other = NVHCQDevice("nv:sim", SimProvider(), "0")
    try:
        a, theirs = nvdev.alloc(4096), other.alloc(4096)
        with pytest.raises(hcq.ArgumentError, match=r"argument 1 .*is memory of nv:sim, and this kernel runs on"):
            saxpy(a, theirs, 1.0, 1, global_size=(1,), local_size=(1,))
        with pytest.raises(hcq.HCQError, match="own GPU's memory only"):
            nvdev.copy(a, theirs, 16)
        with pytest.raises(hcq.HCQError, match="was loaded on"):
            nvdev.compute_queue().exec(other.program(fake_cubin(), "saxpy"), [a, a, 1.0, 1])
    finally:
        other.close()


def test_graph_replays_convert_values_as_a_launch_does(nvdev, saxpy):
    a = nvdev.alloc(4096)
    g = nvdev.graph()
    g.exec(saxpy, a, a, g.var("alpha"), g.var("n"), global_size=(1,), local_size=(1,))
    g(alpha=1.5, n=-1, wait=True)     # untyped 4-byte parameters: a float's bits, a negative int's two's complement
    assert struct.unpack_from("<fI", launches(nvdev)[-1].cb0, 0x210 + 16) == (1.5, 0xFFFFFFFF)
    with pytest.raises(hcq.ArgumentError, match=r"argument 2 .*is a scalar"):
        g(alpha=a)


def test_copyin_takes_a_strided_array_in_its_logical_order(nvdev):
    a = np.arange(12, dtype=np.uint32).reshape(3, 4)
    b = nvdev.alloc(a.nbytes)
    nvdev.copyin(b, a.T)
    assert nvdev.copyout(b) == a.T.tobytes()
