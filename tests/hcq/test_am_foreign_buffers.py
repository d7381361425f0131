"""What a queue, a launch or a graph replay names must be memory it may reach: a buffer with room for the copy
that names it, of the GPU the work runs on. Each of these once went through silently: a graph copy replayed onto
a smaller buffer wrote on into the next allocation; a buffer or program of another GPU was used at an address
that names something else on this one (both GPUs map VRAM at the same virtual window)."""
import numpy as np
import pytest

import hcq


def u32(dev, n, value):
    b = dev.alloc(4 * n)
    dev.copyin(b, np.full(n, value, np.uint32))
    return b


def words(dev, buf):
    return np.frombuffer(dev.copyout(buf), np.uint32)


def test_a_graph_copy_replayed_onto_a_smaller_buffer_is_refused(dev):
    src, big = u32(dev, 2048, 7), dev.alloc(8192)
    small, neighbour = dev.alloc(4096), u32(dev, 1024, 1)     # the next page after small
    assert neighbour.va == small.va + 4096
    g = dev.graph()
    g.copy(g.var("dst"), src, 8192)
    g(dst=big, wait=True)
    with pytest.raises(hcq.HCQError, match="copy to .* the copy of 8192 bytes overruns it"):
        g(dst=small, wait=True)
    assert (words(dev, neighbour) == 1).all()        # before: 7s, the copy's second page
    dev.copyin(big, bytes(8192))
    g(wait=True)                                      # the refused replay left the graph as it was: dst is big
    assert (words(dev, big) == 7).all()
    q = dev.copy_queue()
    i = q.copy(big, src, 8192)
    with pytest.raises(hcq.HCQError, match="overruns it"):
        q.update_copy(i, dst=small)


def test_a_graph_replay_checks_every_value_before_it_patches_any(dev, kernel_corpus):
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    a, b, out = [dev.alloc(4096) for _ in range(3)]
    dev.copyin(a, np.full(1024, 1.0, np.float32))
    dev.copyin(b, np.full(1024, 2.0, np.float32))
    g = dev.graph()
    g.exec(add, out, g.var("x"), b, g.var("n"), global_size=(4,), local_size=(256,))
    g(x=a, n=1024, wait=True)
    other = dev.alloc(4096)
    with pytest.raises(hcq.ArgumentError, match=r"argument 3 \(arg3: uint, 4 bytes\) needs an integer"):
        g(x=other, n="many")
    with pytest.raises(hcq.ArgumentError, match=r"argument 1 \(arg1: float\*, 8 bytes\) is a pointer: pass a Buffer"):
        g(x=5, n=1024)
    dev.copyin(out, bytes(4096))
    g(wait=True)                   # x is still a: neither refused replay patched x
    assert (np.frombuffer(dev.copyout(out), np.float32) == 3.0).all()


def test_buffers_and_programs_of_another_gpu_are_refused(dev, sim_bus, kernel_corpus):
    other = hcq.open("am:sim", bus=sim_bus, slot=1)
    try:
        add = dev.program(kernel_corpus["add_f32"], "add_f32")
        a, out = u32(dev, 1024, 0), dev.alloc(4096)
        theirs = other.alloc(4096)
        with pytest.raises(hcq.ArgumentError,
                           match=rf"argument 1 .*is memory of {other.name}, and this kernel runs on {dev.name}"):
            add(out, theirs, a, 1024, global_size=(4,), local_size=(256,))
        q = dev.compute_queue()
        with pytest.raises(hcq.ArgumentError, match="is memory of"):
            q.exec(add, [theirs, a, a, 1024], (4, 1, 1), (256, 1, 1))
        with pytest.raises(hcq.HCQError, match="was loaded on"):
            q.exec(other.program(kernel_corpus["add_f32"], "add_f32"), [out, a, a, 1024], (4, 1, 1), (256, 1, 1))
        c = dev.copy_queue()
        with pytest.raises(hcq.HCQError, match="reaches its own GPU's memory only"):
            c.copy(theirs, a, 4096)
        i = c.copy(out, a, 4096)
        with pytest.raises(hcq.HCQError, match="reaches its own GPU's memory only"):
            c.update_copy(i, src=theirs)
        g = dev.graph()
        g.exec(add, out, g.var("x"), a, 1024, global_size=(4,), local_size=(256,))
        g(x=a, wait=True)
        with pytest.raises(hcq.ArgumentError, match="is memory of"):
            g(x=theirs)
        dev.copy(theirs, a)            # between GPUs: dev.copy, through host memory both map
    finally:
        other.close()


def test_copy_byte_counts_are_checked(dev):
    a, b = dev.alloc(4096), dev.alloc(4096)
    with pytest.raises(hcq.HCQError, match=f"{dev.name}: copy of -4 bytes .* not negative"):
        dev.copy(a, b, -4)
    with pytest.raises(hcq.HCQError, match="a byte count is an integer"):
        dev.copy(a, b, 16.0)
    dev.copy(a, b, 0)                  # nothing to copy: as copyin of nothing
    with pytest.raises(hcq.HCQError, match=f"{dev.name}: copy of 0 bytes"):
        dev.copy_queue().copy(a, b, 0)


def test_copyin_takes_a_strided_array_in_its_logical_order(dev):
    """A transposed or sliced numpy array (not C-contiguous) went to a bare TypeError from memoryview's cast."""
    a = np.arange(12, dtype=np.uint32).reshape(3, 4)
    b = dev.alloc(a.nbytes)
    dev.copyin(b, a.T)
    assert (words(dev, b) == a.T.ravel()).all()
    dev.copyin(b, a.ravel()[::2], offset=4)
    assert (words(dev, b)[1:7] == a.ravel()[::2]).all()
