"""nvdrv through hcq on the model (nv:sim): bring-up, memory, copies, semaphores with timestamps, launches
(QMD and constant bank 0 as the model decodes them), graphs replayed by patching, faults and recovery;
and each driver step the model enforces, shown by skipping or corrupting it."""
import re
import struct

import numpy as np
import pytest

import hcq
from nvdrv import classes as C
from nvdrv import device as D
from nvdrv import pushbuf
from tests.nvdrv.conftest import NO_SASS, fake_cubin


def launches(dev):
    return dev.prov.rm.gpu.launches


def channel_error(dev, ch):
    """Why the model stopped a channel (the driver only sees the Xid; the model says more)."""
    return dev.prov.rm.gpu.channels[ch.token].error


def sim():
    """A device on a fresh model, without the entry points (they need a reinstall to be seen)."""
    from gpusim.nv.rm import SimProvider
    return D.NVHCQDevice("nv:sim", SimProvider(), "0")


def test_hcq_open_finds_the_backend_and_the_model():
    if "nv" not in hcq.backends():
        pytest.skip("the nv entry points are not installed in this environment: pip install -e . registers them")
    with hcq.open("nv:sim") as dev:
        assert isinstance(dev, D.NVHCQDevice) and dev.prov.name == "sim"


def test_open_by_device_string():
    with sim() as dev:
        assert isinstance(dev, D.NVHCQDevice) and dev.timestamp_hz == 1e9
        assert dev.uuid.startswith("GPU-") and "module 580.105.08" in repr(dev)
        assert dev.executes_kernels is False          # the model cannot run SASS; callers can tell
        uuid = dev.uuid
    assert "closed" in repr(dev)
    for bad in ("nv:sim:3", "nv:sim:GPU-00000000-0000-0000-0000-000000000000", "nv:foo", "nv:0:1:2"):
        with pytest.raises(hcq.HCQError, match="GPU 3 does not exist|no GPU with that UUID|not a GPU index|strings"):
            model_open(bad)
    model_open(f"nv:sim:{uuid}").close()


def model_open(spec):
    """open_device with the model provider given directly (no entry-point lookup)."""
    from gpusim.nv.rm import SimProvider
    orig = D.ioctl.provider
    D.ioctl.provider = lambda name=None: SimProvider() if name == "sim" else orig(name)
    try:
        return D.open_device(spec)
    finally:
        D.ioctl.provider = orig


def test_without_the_kernel_module_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(D.ioctl.KernelProvider, "exists", lambda self, path: False)
    with pytest.raises(hcq.HCQError) as e:
        D.open_device("nv")
    assert "no NVIDIA GPU or kernel module here (/dev/nvidiactl is missing)" in str(e.value)
    assert "nv:sim" in str(e.value) and "\n" not in str(e.value)


def test_version_mismatch_is_refused(monkeypatch):
    """The handshake sends the running module's version (/sys/module/nvidia/version); RM refuses another."""
    from gpusim.nv.rm import SimProvider
    prov = SimProvider()
    monkeypatch.setattr(prov, "module_version", lambda: "570.86.15")
    with pytest.raises(hcq.HCQError, match="refused version '570.86.15'; it runs '580.105.08'"):
        D.NVHCQDevice("nv:sim", prov, "0")


def test_copy_round_trip(nvdev):
    x = np.arange(300_000, dtype=np.float32)
    a, b = nvdev.alloc(x.nbytes), nvdev.alloc(x.nbytes)
    nvdev.copyin(a, x)
    nvdev.copy(b, a)
    assert np.array_equal(np.frombuffer(nvdev.copyout(b), np.float32), x)
    assert nvdev.copyout(b, 8, offset=4) == x[1:3].tobytes()
    h = nvdev.alloc(4096, host=True)
    nvdev.copy(h, a, 4096)
    assert h.mem.view[:4096] == x.tobytes()[:4096]    # host memory: the CPU reads what the copy engine wrote


def test_large_copyin_goes_through_staging_in_pieces(nvdev):
    data = np.random.default_rng(1).integers(0, 255, D.STAGING * 2 + 100, dtype=np.uint8)
    buf = nvdev.alloc(len(data))
    nvdev.copyin(buf, data)
    assert nvdev.copyout(buf) == data.tobytes()


def test_signals_carry_gpu_timestamps(nvdev):
    s1, s2 = nvdev.new_signal(), nvdev.new_signal()
    q = nvdev.copy_queue()
    q.timestamp(s1)
    q.signal(s2, 7)
    q.submit()
    s2.wait(7)
    assert s1.timestamp_ticks > 0 and s2.timestamp_ticks >= s1.timestamp_ticks
    assert s2.timestamp == s2.timestamp_ticks / 1e9


def test_compute_waits_for_copy(nvdev, saxpy):
    """Cross-engine order through a semaphore: the compute queue's acquire holds its launch until the copy
    queue's release, which is submitted later."""
    gate = nvdev.new_signal()
    a = nvdev.alloc(4096)
    cq = nvdev.compute_queue()
    cq.wait(gate, 1)
    cq.exec(saxpy, [a, a, 1.0, 4], (1, 1, 1), (4, 1, 1))
    cq.signal(nvdev.timeline, nvdev.next_timeline())
    cq.submit()
    n = len(launches(nvdev))
    for _ in range(5):
        nvdev.compute.gp_get()
    assert len(launches(nvdev)) == n                  # blocked
    xq = nvdev.copy_queue()
    xq.signal(gate, 1)
    xq.submit()
    nvdev.synchronize()
    assert len(launches(nvdev)) == n + 1


def test_launch_qmd_and_parameters(nvdev, saxpy):
    x, y = nvdev.alloc(4096), nvdev.alloc(4096)
    t = saxpy(y, x, 2.5, 1000, global_size=(4, 2, 1), local_size=(128, 2, 1), wait=True)
    assert t is not None and t >= 0
    L = launches(nvdev)[-1]
    assert (L.grid, L.block, L.registers) == ((4, 2, 1), (128, 2, 1), 24)
    assert struct.unpack_from("<QQfI", L.cb0, 0x210) == (y.va, x.va, 2.5, 1000)
    assert L.program_va == saxpy.handle.image.va
    pytest.skip(f"results: {NO_SASS}")


def test_update_exec_patches_arguments_and_sizes(nvdev, saxpy):
    x, y = nvdev.alloc(4096), nvdev.alloc(4096)
    q = nvdev.compute_queue()
    i = q.exec(saxpy, [x, y, 1.0, 1], (1, 1, 1), (32, 1, 1))
    q.update_exec(i, args=[y, x, 3.0, 2], global_size=(9, 1, 1))
    q.signal(nvdev.timeline, nvdev.next_timeline())
    q.submit()
    nvdev.synchronize()
    L = launches(nvdev)[-1]
    assert L.grid == (9, 1, 1) and L.block == (32, 1, 1)
    assert struct.unpack_from("<QQfI", L.cb0, 0x210) == (y.va, x.va, 3.0, 2)


def test_graph_of_100_kernels_replayed_by_patching(nvdev, saxpy):
    a, b, c = nvdev.alloc(4096), nvdev.alloc(4096), nvdev.alloc(4096)
    g = nvdev.graph()
    src = g.var("src")
    for i in range(100):
        g.exec(saxpy, b, src, float(i), 1024, global_size=(4,), local_size=(256,))
    g.copy(c, b, 4096)
    g(src=a, wait=True)
    n = len(launches(nvdev))
    g(src=c, wait=True)
    new = launches(nvdev)[n:]
    assert len(new) == 100
    assert [struct.unpack_from("<QQfI", L.cb0, 0x210) for L in new] == [(b.va, c.va, float(i), 1024) for i in range(100)]
    with pytest.raises(hcq.HCQError, match="no variable 'nope'"):
        g(nope=a)


def test_bad_sizes_and_arguments_are_named(nvdev, saxpy):
    a = nvdev.alloc(64)
    with pytest.raises(hcq.ArgumentError, match="local_size .* allows at most 1024"):
        saxpy(a, a, 1.0, 1, global_size=(1,), local_size=(1025,))
    with pytest.raises(hcq.ArgumentError, match=r"argument 3 \(arg3: untyped, 4 bytes\) is a scalar"):
        saxpy(a, a, 1.0, a, global_size=(1,), local_size=(1,))
    bounded = nvdev.program(fake_cubin("k", max_threads=(128, 1, 1)), "k")
    with pytest.raises(hcq.ArgumentError, match="at most 128"):
        bounded(a, a, 1.0, 1, global_size=(1,), local_size=(256,))
    with pytest.raises(hcq.HCQError, match="stack"):
        nvdev.program(fake_cubin("s", frame=16), "s")


def test_copy_to_freed_memory_faults_and_recovers(nvdev):
    """RM unmaps freed memory: the copy engine's write faults (Xid 31), the wait raises HCQFault with the
    Xid decoded, recover() makes new channels and the next copy runs."""
    a, b = nvdev.alloc(4096), nvdev.alloc(4096)
    stale = hcq.Buffer(nvdev, b.va, 4096)        # the address a freed buffer had (hcq refuses b itself)
    nvdev.free(b)
    with pytest.raises(hcq.HCQError, match="was freed"):
        nvdev.copy(b, a)
    q = nvdev.copy_queue()
    q.copy(stale, a, 4096)
    q.signal(nvdev.timeline, nvdev.next_timeline())
    q.submit()
    with pytest.raises(hcq.HCQFault, match=r"copy channel stopped with Xid 31 \(MMU fault"):
        nvdev.synchronize(2)
    assert nvdev.recover() == ["copy: Xid 31 (MMU fault (an address no mapping covers))"]
    c = nvdev.alloc(4096)
    nvdev.copyin(a, b"x" * 4096)
    nvdev.copy(c, a)
    assert nvdev.copyout(c) == b"x" * 4096


# ---------------------------------------------------------------- each driver step, skipped or corrupted
def test_without_scheduling_the_channel_group_nothing_runs(monkeypatch):
    """NVA06C_CTRL_CMD_GPFIFO_SCHEDULE enables the TSG; skipped, the first copy times out."""
    real = D.NVHCQDevice._control

    def skip(self, obj, cmd, params):
        if cmd != D.R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
            real(self, obj, cmd, params)
    monkeypatch.setattr(D.NVHCQDevice, "_control", skip)
    monkeypatch.setattr(D.NVHCQDevice, "default_timeout", 0.3)
    dev = sim()
    with pytest.raises(hcq.HCQTimeout, match="GPGet/GPPut"):
        dev.copyin(dev.alloc(4096), b"x" * 4096)


def test_without_the_doorbell_nothing_runs(monkeypatch):
    """The host fetches a channel's GPFIFO when its work submit token is written to NOTIFY_CHANNEL_PENDING."""
    dev = sim()
    dev.default_timeout = 0.3
    monkeypatch.setattr(dev.copier, "token", dev.copier.token + 40)     # a token no channel has
    with pytest.raises(hcq.HCQTimeout):
        dev.copyin(dev.alloc(4096), b"x" * 4096)


def test_gpput_must_be_written_before_the_doorbell(monkeypatch):
    dev = sim()
    dev.default_timeout = 0.3
    real = dev.copier.userd.write32
    monkeypatch.setattr(dev.copier.userd, "write32", lambda off, v: None if off == dev.copier.userd_off +
                        C.USERD_GP_PUT else real(off, v))
    with pytest.raises(hcq.HCQTimeout):
        dev.copyin(dev.alloc(4096), b"x" * 4096)


def test_without_set_object_engine_methods_fault(monkeypatch):
    """Engine methods go to the class SET_OBJECT bound to the subchannel; without it: Xid 13."""
    real = pushbuf.PushBuffer.methods

    def no_set_object(self, subc, method, *data):
        if method == C.NVC86F_SET_OBJECT and data == (C.HOPPER_DMA_COPY_A,):
            return real(self, subc, C.NVC86F_WFI, 0)
        return real(self, subc, method, *data)
    monkeypatch.setattr(pushbuf.PushBuffer, "methods", no_set_object)
    dev = sim()
    with pytest.raises(hcq.HCQFault, match="copy channel stopped with Xid 13"):
        dev.copyin(dev.alloc(4096), b"x" * 4096)


def test_without_the_shader_windows_a_launch_faults(monkeypatch):
    real = D.NVHCQDevice._make_channels

    def no_windows(self):
        push = D._Channel.push
        try:
            D._Channel.push = lambda ch, pb: None if any(w >> 13 & 7 == C.SUBCHANNEL_COMPUTE and (w & 0xFFF) << 2 ==
                                                           C.NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_A
                                                           for w in pb.words[:1]) else push(ch, pb)
            real(self)
        finally:
            D._Channel.push = push
    monkeypatch.setattr(D.NVHCQDevice, "_make_channels", no_windows)
    dev = sim()
    prog = dev.program(fake_cubin(), "saxpy")
    a = dev.alloc(64)
    with pytest.raises(hcq.HCQFault, match="compute channel stopped with Xid 13"):
        prog(a, a, 1.0, 1, global_size=(1,), local_size=(1,), wait=True)
    assert "SET_SHADER_SHARED_MEMORY_WINDOW" in str(channel_error(dev, dev.compute))


@pytest.mark.parametrize("field, value, words", [
    ("QMD_MAJOR_VERSION", 2, "version 2.0, HOPPER_COMPUTE_A takes QMD V03_00"),
    ("CONSTANT_BUFFER_VALID0", 0, "constant bank 0 .* is not valid"),
    ("CTA_THREAD_DIMENSION0", 0, "every dimension >= 1"),
    ("SHARED_MEMORY_SIZE", 240 * 1024, "SHARED_MEMORY_SIZE 245760 is more than"),
    ("PROGRAM_ADDRESS_UPPER", 0x1FFFF, "MMU fault"),
])
def test_qmd_fields_the_model_checks(monkeypatch, nvdev, field, value, words):
    """Each field corrupted in the QMD as a launch sends it (the program's template, then the per-launch
    patch): the compute channel stops with Xid 13 or 31 and the model says which field."""
    real = pushbuf.patch_qmd

    def corrupt(view, off, *a, **k):
        real(view, off, *a, **k)
        q = pushbuf.QMD()
        q.value = int.from_bytes(view[off:off + C.QMD_BYTES], "little")
        q.set(field, value)
        view[off:off + C.QMD_BYTES] = q.to_bytes()
    monkeypatch.setattr(pushbuf, "patch_qmd", corrupt)
    saxpy = nvdev.program(fake_cubin(), "saxpy")
    a = nvdev.alloc(64)
    with pytest.raises(hcq.HCQFault, match="compute channel stopped"):
        saxpy(a, a, 1.0, 1, global_size=(1,), local_size=(1,), wait=True)
    assert re.search(words, str(channel_error(nvdev, nvdev.compute)))


def test_qmd_template_and_patch_agree_with_a_full_build(nvdev, saxpy):
    """A launch's QMD (the program's template with grid, block and constant bank patched in) is byte for
    byte what build_qmd makes for that launch."""
    x = nvdev.alloc(4096)
    q = nvdev.compute_queue()
    i = q.exec(saxpy, [x, x, 1.0, 1], (70000, 3, 2), (8, 4, 2))
    _, _, (_, off, _, arena) = q.cmds[i]
    k = saxpy.handle
    full = pushbuf.build_qmd(k.image.va, (70000, 3, 2), (8, 4, 2), k.k.shared_size, k.k.registers,
                             arena.buf.va + off + C.QMD_BYTES, k.cb0_bytes, 1)
    assert bytes(arena.view[off:off + C.QMD_BYTES]) == full.to_bytes()


def test_release_without_timestamp_leaves_it_zero(monkeypatch, nvdev, saxpy):
    """SEM_EXECUTE RELEASE_TIMESTAMP writes the GPU time after the payload; without it the kernel time
    (two timestamps) is 0."""
    real = pushbuf.sem_release
    monkeypatch.setattr(pushbuf, "sem_release", lambda pb, sc, va, v, timestamp=True, wfi=True: real(pb, sc, va, v, False))
    a = nvdev.alloc(64)
    assert saxpy(a, a, 1.0, 1, global_size=(1,), local_size=(1,), wait=True) == 0


def test_semaphore_payload_is_64_bits(monkeypatch, nvdev):
    """PAYLOAD_SIZE_64BIT: a value past 2**32 reaches the signal whole; a 32-bit release would cut it."""
    s = nvdev.new_signal()
    q = nvdev.copy_queue()
    q.signal(s, (5 << 32) | 9)
    q.submit()
    s.wait((5 << 32) | 9, timeout=2)
    assert s.value == (5 << 32) | 9


SAXPY_CU = r'''
extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void __launch_bounds__(128) reduce(float *out, const float *x) {
    __shared__ float s[128];
    s[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x];
    __syncthreads();
    for (int k = 64; k > 0; k >>= 1) { if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k]; __syncthreads(); }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
'''


def test_an_nvrtc_cubin_loads_and_launches(nvdev):
    """A real cubin (NVRTC for sm_90, read by nvdrv.cubin): its code lands in VRAM, its parameters in
    constant bank 0 at the offset the cubin gives, its shared memory and launch bounds in the QMD."""
    from nvdrv import nvrtc
    if not nvrtc.available():
        pytest.skip("NVRTC (nvidia-cuda-nvrtc-cu12) is not installed")
    cub = nvrtc.compile_cuda(SAXPY_CU, "saxpy.cu")
    saxpy = nvdev.program(cub, "saxpy")
    x, y = nvdev.alloc(4096), nvdev.alloc(4096)
    saxpy(y, x, 0.5, 1024, global_size=(4,), local_size=(256,), wait=True)
    L = launches(nvdev)[-1]
    base = saxpy.handle.k.param_base
    assert struct.unpack_from("<QQfI", L.cb0, base) == (y.va, x.va, 0.5, 1024)
    assert nvdev.copyout(saxpy.handle.image, len(saxpy.handle.k.code)) == saxpy.handle.k.code
    red = nvdev.program(cub, "reduce")
    assert red.max_local == 128
    red(y, x, global_size=(8,), local_size=(128,), wait=True)
    L = launches(nvdev)[-1]
    assert L.shared_bytes >= 512 and L.grid == (8, 1, 1)
    with pytest.raises(hcq.ArgumentError, match="at most 128"):
        red(y, x, global_size=(8,), local_size=(256,))
    pytest.skip(f"results: {NO_SASS}")


def test_a_wait_never_met_times_out_with_the_pointers_and_recovers(nvdev):
    """An acquire nobody releases holds the channel: the wait names GPGet/GPPut after its timeout, and
    recover() makes channels that run again."""
    never = nvdev.new_signal()
    q = nvdev.copy_queue()
    q.wait(never, 1)
    q.signal(nvdev.timeline, nvdev.next_timeline())
    q.submit()
    with pytest.raises(hcq.HCQTimeout, match=r"copy \d+/\d+; dev.recover\(\)"):
        nvdev.synchronize(0.3)
    assert nvdev.recover() == []
    a = nvdev.alloc(4096)
    nvdev.copyin(a, b"y" * 4096)
    assert nvdev.copyout(a) == b"y" * 4096


def test_dead_buffers_are_refused(nvdev, saxpy):
    """hcq's dead-handle rule on this backend: a freed buffer (and its views) or one of a closed device is
    refused by name before anything reaches RM or the GPU."""
    a, b = nvdev.alloc(4096), nvdev.alloc(4096)
    v = b.view(64, 64)
    nvdev.free(b)
    for call in (lambda: nvdev.copyin(v, b"x"), lambda: nvdev.copyout(b), lambda: nvdev.free(b)):
        with pytest.raises(hcq.HCQError, match="was freed"):
            call()
    with pytest.raises(hcq.ArgumentError, match="was freed"):
        saxpy(a, b, 1.0, 1, global_size=(1,), local_size=(1,))
    nvdev.close()
    with pytest.raises(hcq.HCQError, match="closed device"):
        nvdev.copyout(a)


def test_the_gpfifo_ring_wraps(nvdev):
    """More submissions than the ring has entries: nvdrv reads GPGet when the ring looks full and goes on."""
    s = nvdev.new_signal()
    for i in range(1, D.GPFIFO_ENTRIES + 40):
        q = nvdev.copy_queue()
        q.signal(s, i)
        q.submit()
    s.wait(D.GPFIFO_ENTRIES + 39, timeout=5)
    assert nvdev.copier.put == (1 + D.GPFIFO_ENTRIES + 39) % D.GPFIFO_ENTRIES    # SET_OBJECT was the first


def test_synchronize_waits_for_what_was_submitted(nvdev, saxpy):
    """synchronize waits for the largest timeline value a submitted queue signals (timeline_submitted), not for
    a value taken and never submitted (before: HCQTimeout); a queue submitted later is waited for."""
    nvdev.next_timeline()                              # taken, never submitted
    nvdev.synchronize(timeout=1)
    a = nvdev.alloc(4096)
    q = nvdev.compute_queue()
    q.exec(saxpy, [a, a, 1.0, 4], (1, 1, 1), (4, 1, 1))
    v = nvdev.next_timeline()
    q.signal(nvdev.timeline, v)
    q.submit()
    assert nvdev.timeline_submitted == v
    nvdev.synchronize(timeout=5)
    assert nvdev.timeline.value >= v
