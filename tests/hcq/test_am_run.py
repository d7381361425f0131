"""The hcq contract on am:sim, end to end: clang-built OpenCL kernels through hcq match numpy; copies
(BAR0 and SDMA) of many sizes at unaligned offsets; ordering across the copy and compute queues; graph
replay with new inputs; hangs and faults become errors that recover() clears; timestamps; two GPUs."""
import struct

import numpy as np
import pytest

import hcq

RNG = np.random.default_rng(7)


def f32(dev, a):
    b = dev.alloc(max(a.nbytes, 4))
    dev.copyin(b, a)
    return b


def read(dev, buf, dtype, n=None):
    return np.frombuffer(dev.copyout(buf), dtype)[:n]


def test_add_saxpy_local_reverse(dev, kernel_corpus):
    n = 1000
    a, b = RNG.random(n, np.float32), RNG.random(n, np.float32)
    ba, bb, out = f32(dev, a), f32(dev, b), dev.alloc(4 * n)
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    seconds = add(out, ba, bb, n, global_size=(4,), local_size=(256,), wait=True)
    assert seconds > 0 and np.array_equal(read(dev, out, np.float32), a + b)
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    saxpy(out, ba, 3.0, n, global_size=(8,), local_size=(128,), wait=True)
    assert np.allclose(read(dev, out, np.float32), 3 * a + (a + b))
    rev = dev.program(kernel_corpus["local_reverse"], "local_reverse")
    rev(out, ba, n, global_size=(4,), local_size=(256,))  # wait=False: the copyout synchronizes
    got = read(dev, out, np.float32)
    want = np.concatenate([a, -np.ones(24, np.float32)]).reshape(4, 256)[:, ::-1].ravel()[:n]
    assert np.array_equal(got, want)


def test_matmul_tiled_2d(dev, kernel_corpus):
    m, k, n = 24, 20, 16
    A, B = RNG.random((m, k), np.float32), RNG.random((k, n), np.float32)
    C = dev.alloc(4 * m * n)
    mm = dev.program(kernel_corpus["matmul_tiled"], "matmul_tiled")
    mm(C, f32(dev, A), f32(dev, B), m, n, k, global_size=(2, 3, 1), local_size=(8, 8, 1), wait=True)
    assert np.allclose(read(dev, C, np.float32).reshape(m, n), A @ B, rtol=1e-5)


def test_reduce_sum_and_atomics(dev, kernel_corpus):
    n = 700
    a = RNG.integers(-1000, 1000, n, dtype=np.int32)
    ba = f32(dev, a)
    total, partial = dev.alloc(4), dev.alloc(4 * 3)
    dev.copyin(total, np.zeros(1, np.int32))
    red = dev.program(kernel_corpus["reduce_sum"], "reduce_sum")
    red(total, partial, ba, n, global_size=(3,), local_size=(256,), wait=True)
    assert read(dev, total, np.int32)[0] == a.sum()
    assert np.array_equal(read(dev, partial, np.int32), np.pad(a, (0, 68)).reshape(3, 256).sum(1))
    acc = dev.alloc(4 * 9)
    dev.copyin(acc, np.array([1 << 30, -(1 << 30), 0, -1, 0, 0, 0, 0, 0], np.int32))
    tickets = dev.alloc(4 * n)
    at = dev.program(kernel_corpus["atomics"], "atomics")
    at(acc, tickets, ba, n, global_size=(3,), local_size=(256,), wait=True)
    got = read(dev, acc, np.int32)
    assert got[0] == a.min() and got[1] == a.max() and got[4] == n
    assert np.array_equal(np.sort(read(dev, tickets, np.int32)), np.arange(n))


def test_grid3d_dispatch_packet_sizes(dev, kernel_corpus):
    nx, ny, nz = 6, 5, 3
    out = dev.alloc(8 * nx * ny * nz)
    g = dev.program(kernel_corpus["grid3d"], "grid3d")
    g(out, nx, ny, nz, global_size=(2, 3, 3), local_size=(3, 2, 1), wait=True)
    ids = read(dev, out, np.uint32).reshape(nz, ny, nx, 2)
    z, y, x = np.meshgrid(range(nz), range(ny), range(nx), indexing="ij")
    assert np.array_equal(ids[..., 0], (x % 3) | (y % 2) << 8)
    assert np.array_equal(ids[..., 1], (x // 3) | (y // 2) << 8 | z << 16)


@pytest.mark.parametrize("direct", [True, False], ids=["bar0", "sdma"])
def test_copies_sizes_and_unaligned_offsets(dev, direct):
    if not direct:
        dev.direct_max = 0
    big = dev.alloc((3 << 20) + 64)
    ref = bytearray(big.size)
    for size, off in ((1, 0), (1, 7), (3, 4093), (4096, 1), (65537, 3), (1 << 20, 12345), (3 << 20, 61)):
        data = RNG.integers(0, 256, size, dtype=np.uint8)
        dev.copyin(big, data, offset=off)
        ref[off:off + size] = data.tobytes()
        assert dev.copyout(big, size, off) == data.tobytes()
    assert dev.copyout(big) == bytes(ref)


def test_gpu_copy_within_device(dev):
    a, b = dev.alloc(100000), dev.alloc(100000)
    data = RNG.integers(0, 256, 99991, dtype=np.uint8).tobytes()
    dev.copyin(a, data)
    dev.copy(b.view(5), a.view(0, 99991))
    assert dev.copyout(b, 99991, 5) == data


def test_ordering_copy_kernel_copy_across_queues(dev, kernel_corpus):
    n = 512
    x = RNG.random(n, np.float32)
    host_in, dev_in, dev_out, host_out = f32(dev, x), dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
    dev.copyin(dev_out, np.zeros(n, np.float32))
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    s1, s2 = dev.new_signal(), dev.new_signal()
    c1, k, c2 = dev.copy_queue(), dev.compute_queue(), dev.copy_queue()
    c2.wait(s2, 1)
    c2.copy(host_out, dev_out, 4 * n)
    c2.signal(dev.timeline, dev.next_timeline())
    k.wait(s1, 1)
    k.exec(add, [dev_out, dev_in, dev_in, n], (2, 1, 1), (256, 1, 1))
    k.signal(s2, 1)
    c1.copy(dev_in, host_in, 4 * n)
    c1.signal(s1, 1)
    k.submit()    # first: it must wait for the copy behind it
    c1.submit()
    c2.submit()   # same SDMA ring as c1: it waits for the kernel
    dev.synchronize(timeout=5)
    assert np.array_equal(read(dev, host_out, np.float32), x + x)
    # the same queues again with new signal values and input, without rebuilding
    dev.copyin(host_in, np.ones(n, np.float32))
    c2.update_wait(0, value=2)
    k.update_wait(0, value=2)
    k.update_signal(2, value=2)
    c1.update_signal(1, value=2)
    c2.update_signal(2, value=dev.next_timeline())
    for q in (k, c1, c2):
        q.submit()
    dev.synchronize(timeout=5)
    assert np.array_equal(read(dev, host_out, np.float32), np.full(n, 2, np.float32))


def test_graph_replay_with_changed_inputs(dev, kernel_corpus):
    n = 256
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    y, out = dev.alloc(4 * n), dev.alloc(4 * n)
    xs = [RNG.random(n, np.float32) for _ in range(3)]
    bufs = [f32(dev, x) for x in xs]
    g = dev.graph()
    xv, alpha, init = g.var("x"), g.var("alpha"), g.var("init")
    g.copy(y, init, 4 * n)                                           # y = init
    g.exec(saxpy, y, xv, alpha, n, global_size=(1,), local_size=(256,))   # y += alpha * x
    g.exec(saxpy, y, xv, alpha, n, global_size=(1,), local_size=(256,))   # twice
    g.copy(out, y, 4 * n)
    for i, a, j in ((1, 2.0, 0), (2, 0.5, 0), (1, -1.0, 2)):
        g(x=bufs[i], alpha=a, init=bufs[j], wait=True)
        want = xs[j] + a * xs[i] + a * xs[i]
        assert np.allclose(read(dev, out, np.float32), want, rtol=1e-6)


def test_timestamps_monotonic(dev, kernel_corpus):
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    b = dev.alloc(4096)
    stamps, q = [], dev.compute_queue()
    sigs = [dev.new_signal() for _ in range(4)]
    for s in sigs:
        q.timestamp(s)
        q.exec(add, [b, b, b, 1024], (4, 1, 1), (256, 1, 1))
    q.signal(dev.timeline, dev.next_timeline())
    q.submit()
    dev.synchronize(timeout=5)
    stamps = [s.timestamp_ticks for s in sigs]
    assert all(0 < a < b for a, b in zip(stamps, stamps[1:]))
    times = [add(b, b, b, 1024, global_size=(4,), local_size=(256,), wait=True) for _ in range(3)]
    assert all(t > 0 for t in times)


def test_hang_times_out_then_recover(dev, kernel_corpus):
    # The simulated CP gives up on a dispatch after this many executor steps and hangs the queue; the
    # default (hundreds of thousands) is the right order for hardware-like behaviour but slow here.
    dev.gpu.dev.pci.dev.blocks["CP"].kernel_max_steps = 5000
    flag = dev.alloc(4)
    dev.copyin(flag, bytes(4))
    spin = dev.program(kernel_corpus["faults"], "spin")
    with pytest.raises(hcq.HCQTimeout, match=r"timeline did not reach \d+ .*compute queue ME1 pipe 0 queue 0: rptr"):
        spin(flag, global_size=(1,), local_size=(32,), wait=True, timeout=0.5)
    dev.recover()
    test_add_saxpy_local_reverse(dev, kernel_corpus)


def test_fault_is_decoded_then_recover(dev, kernel_corpus):
    poke = dev.program(kernel_corpus["faults"], "poke")
    bad = (1 << 44) - (1 << 30)   # below the VRAM window: mapped by nothing
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {bad:#x}.*write.*recover\(\)"):
        poke(bad, 5, global_size=(1,), local_size=(1,), wait=True, timeout=5)
    dev.recover()
    ok = dev.alloc(4)
    poke(ok.va, 77, global_size=(1,), local_size=(1,), wait=True)
    assert struct.unpack("<I", dev.copyout(ok))[0] == 77


def test_two_gpus_copy_between(sim_bus, dev, debian_firmware):
    other = hcq.open("am:sim", bus=sim_bus, slot=1)     # a second GPU on the same bus: one host memory
    try:
        assert other.gpu.dev.pci is not dev.gpu.dev.pci
        data = RNG.integers(0, 256, 300001, dtype=np.uint8).tobytes()
        a, b = dev.alloc(len(data)), other.alloc(len(data) + 3)
        dev.copyin(a, data)
        other.copy(b.view(3), a)
        assert other.copyout(b, len(data), 3) == data
        dev.copy(a.view(0, 1000), b.view(3, 1000))
        assert dev.copyout(a, 1000) == data[:1000]
    finally:
        other.close()


def test_copy_256mib_through_bar0(dev):
    """256 MiB at an unaligned offset, through the large BAR0 (about a second). The same size through
    SDMA is only planned (test_am_build.test_copy_planning_splits_256mib): the simulated SDMA moves
    about 10 MB/s, so executing it would take most of a minute."""
    n = 256 << 20
    data = np.arange(n // 4, dtype=np.uint32)
    b = dev.alloc(n + 8)
    dev.copyin(b, data, offset=5)
    assert np.array_equal(np.frombuffer(dev.copyout(b, n, 5), np.uint32), data)
    dev.free(b)


def test_graph_larger_than_the_ring(dev, kernel_corpus):
    """300 launches (about 20000 dwords of PM4, more than the 16384-dword ring) replay from an indirect
    buffer."""
    n = 32
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    x, y = RNG.random(n, np.float32), RNG.random(n, np.float32)
    bx, by = f32(dev, x), f32(dev, y)
    g = dev.graph()
    alpha = g.var("alpha")
    for _ in range(300):
        g.exec(saxpy, by, bx, alpha, n, global_size=(1,), local_size=(32,))
    g(alpha=0.25, wait=True)
    assert np.allclose(read(dev, by, np.float32), y + 75 * x, rtol=1e-4)
    g(alpha=-0.25, wait=True)
    assert np.allclose(read(dev, by, np.float32), y, atol=1e-3)


def test_host_and_uncached_buffers(dev, kernel_corpus):
    """A kernel reads host memory and writes uncached VRAM; the CPU sees host buffers without a copy."""
    n = 300
    a, b = RNG.random(n, np.float32), RNG.random(n, np.float32)
    ha, hb = dev.alloc(4 * n, host=True), dev.alloc(4 * n, host=True)
    out = dev.alloc(4 * n, uncached=True)
    dev.copyin(ha, a)
    dev.copyin(hb.view(8), b[2:])  # a view at an offset lands at that offset
    dev.copyin(hb, b[:2])
    assert ha.mem.dma is not None and out.mem.vram is not None
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    add(out, ha, hb, n, global_size=(2,), local_size=(256,), wait=True)
    assert np.array_equal(read(dev, out, np.float32), a + b)
    dev.copy(ha, out, 4 * n)  # the GPU writes host memory: the CPU reads it back as is
    dev.synchronize()
    assert np.array_equal(np.frombuffer(dev.copyout(ha), np.float32), a + b)
    for buf in (ha, hb, out):
        dev.free(buf)
    with pytest.raises(hcq.HCQError):
        dev.copyout(ha)


def _old_wrap(dev):
    """The arena's wrap as it was: it waited only for the launches of the lap before the last one."""
    fence = [0]

    def wrap():
        a = dev.arena
        a.push()
        if fence[0]:
            dev.timeline.wait(fence[0])
        fence[0], a.at = dev.timeline_value, 0
        return 0
    return wrap


@pytest.mark.parametrize("wrap", ["waits for the launches before", "waits for a lap earlier only"])
def test_the_kernarg_arena_wraps_onto_finished_launches_only(dev, kernel_corpus, monkeypatch, wrap):
    """The launch arena hands out slots round-robin: when it wraps, the launches that used the memory it is
    about to overwrite (the last lap's) must be done, their waves may still read their kernargs. Launches with
    their own alphas over two laps of a small arena, queued behind a wait the host releases later: waiting
    only for the lap before the last one lets a queued launch read a later launch's arguments."""
    import threading
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    ys, x = [dev.alloc(4 * 64) for _ in range(4)], f32(dev, np.ones(64, np.float32))
    for y in ys:
        dev.copyin(y, np.zeros(64, np.float32).tobytes())
    monkeypatch.setattr(dev.arena, "size", 24 * saxpy.handle.slot)
    if wrap != "waits for the launches before":
        monkeypatch.setattr(dev, "_wrap", _old_wrap(dev))
    gate, q = dev.new_signal(0), dev.compute_queue()
    q.wait(gate, 1)
    q.submit()
    release = threading.Timer(0.3, lambda: setattr(gate, "value", 1))
    release.start()
    for i in range(60):
        saxpy(ys[i % 4], x, float(i + 1), 64, global_size=(1,), local_size=(64,))
    release.join()
    dev.synchronize()
    ok = all(np.all(read(dev, y, np.float32) == sum(range(j + 1, 61, 4))) for j, y in enumerate(ys))
    assert ok == (wrap == "waits for the launches before")


@pytest.mark.parametrize("slots", ["the launch arena's end", "memory of its own", "the launch arena's round robin"])
def test_graph_kernargs_outlive_the_launch_arena(dev, kernel_corpus, monkeypatch, slots):
    """A graph's replays patch its launches' kernargs in place, so they are the graph's own: the launch arena's
    end taken out of its round robin, or memory of their own where that would leave the round robin under an
    eighth of the arena. Launches that wrap the round-robin arena do not overwrite them (in the round robin
    they did: the replay ran with another launch's alpha)."""
    n = 64
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    y, z, x = dev.alloc(4 * n), dev.alloc(4 * n), f32(dev, np.ones(n, np.float32))
    dev.copyin(y, np.zeros(n, np.float32).tobytes())
    size = dev.arena.size
    if slots == "the launch arena's round robin":
        monkeypatch.setattr(dev, "_kernarg_arena", lambda size: dev.arena)
    elif slots == "memory of its own":
        monkeypatch.setattr(dev.arena, "size", 16 * saxpy.handle.slot)
    g = dev.graph()
    g.exec(saxpy, y, x, g.var("alpha"), n, global_size=(1,), local_size=(64,))
    g(alpha=1.0, wait=True)
    arena = g.backend[-1]
    assert (arena.buf is dev.arena.buf) == (slots != "memory of its own")
    if slots == "the launch arena's end":
        assert dev.arena.size == size - saxpy.handle.slot and arena.size == size
    monkeypatch.setattr(dev.arena, "size", 8 * saxpy.handle.slot)
    for _ in range(12):                                # more than a lap of the launch arena
        saxpy(z, x, 0.0, n, global_size=(1,), local_size=(64,))
    dev.synchronize()
    g(wait=True)                                       # alpha stays 1.0
    assert np.all(read(dev, y, np.float32) == 2.0) == (slots != "the launch arena's round robin")


def _saxpy_queue(dev, saxpy, y, x, alpha, n=64):
    q = dev.compute_queue()
    q.exec(saxpy, [y, x, alpha, n], (1,), (64,))
    q.signal(dev.timeline, 0)                          # its value set at each submit (_resubmit)
    return q


def _resubmit(dev, q):
    """A built queue submitted (again): its signal patched to the device's next timeline value."""
    q.update_signal(len(q.cmds) - 1, value=dev.next_timeline())
    q.submit()
    dev.synchronize()


@pytest.mark.parametrize("when", ["resubmitted after the wrap", "first submitted after the wrap"])
def test_a_built_queue_keeps_its_kernargs_across_arena_wraps(dev, kernel_corpus, monkeypatch, when):
    """A queue built through the hcq API may be submitted any number of times, at any time: launches that
    wrap the round-robin arena meanwhile take its launch slot, so a submit finds its arguments gone and
    writes them into a fresh slot (before: the kernel ran with another launch's alpha, y = 1 instead of 2)."""
    n = 64
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    y, z, x = dev.alloc(4 * n), dev.alloc(4 * n), f32(dev, np.ones(n, np.float32))
    dev.copyin(y, np.zeros(n, np.float32).tobytes())
    monkeypatch.setattr(dev.arena, "size", 8 * saxpy.handle.slot)
    q = _saxpy_queue(dev, saxpy, y, x, 1.0)
    if when == "resubmitted after the wrap":
        _resubmit(dev, q)
    for _ in range(12):                                # more than a lap of the arena, another alpha
        saxpy(z, x, 0.0, n, global_size=(1,), local_size=(64,))
    dev.synchronize()
    _resubmit(dev, q)
    want = 2.0 if when == "resubmitted after the wrap" else 1.0
    assert np.all(read(dev, y, np.float32) == want)
    _resubmit(dev, q)                                  # and again, without a wrap between
    assert np.all(read(dev, y, np.float32) == want + 1)


def test_update_exec_after_the_wrap_leaves_other_launches_slots_alone(dev, kernel_corpus, monkeypatch):
    """update_exec on a built queue whose slot the round robin handed to a later launch writes a fresh slot,
    not the later launch's kernargs (queued behind a gate here, so it reads them after the update)."""
    n = 64
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    y, z, x = dev.alloc(4 * n), dev.alloc(4 * n), f32(dev, np.ones(n, np.float32))
    for b in (y, z):
        dev.copyin(b, np.zeros(n, np.float32).tobytes())
    monkeypatch.setattr(dev.arena, "size", 4 * saxpy.handle.slot)
    q = _saxpy_queue(dev, saxpy, y, x, 1.0)
    gate = dev.new_signal(0)
    g = dev.compute_queue()
    g.wait(gate, 1)
    for _ in range(4):                                 # a full lap: the last one takes q's slot back
        g.exec(saxpy, [z, x, 1.0, n], (1,), (64,))
    g.signal(dev.timeline, dev.next_timeline())
    g.submit()
    q.update_exec(0, args=[y, x, 5.0, n])              # the queued launches still to read their kernargs
    gate.value = 1
    dev.synchronize()
    assert np.all(read(dev, z, np.float32) == 4.0)
    _resubmit(dev, q)
    assert np.all(read(dev, y, np.float32) == 5.0)


def test_a_queue_whose_launches_outgrow_the_arena_is_refused(dev, kernel_corpus, monkeypatch):
    """A queue's launch slots are all live at its submit: more launches than the arena holds at once would
    overwrite the queue's own first ones; the submit says so (naming the device and what to do) instead."""
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    y, x = dev.alloc(4 * 64), f32(dev, np.ones(64, np.float32))
    monkeypatch.setattr(dev.arena, "size", 4 * saxpy.handle.slot)
    q = dev.compute_queue()
    for _ in range(5):
        q.exec(saxpy, [y, x, 1.0, 64], (1,), (64,))
    q.signal(dev.timeline, dev.next_timeline())
    with pytest.raises(hcq.HCQError, match=f"{dev.name}.*launch arena.*graph|{dev.name}.*launch arena.*split"):
        q.submit()
