"""Kernels with private (scratch) memory through hcq on AM (amdrv.hcq.scratch): clang's private array runs
and gives the right result; without COMPUTE_DISPATCH_SCRATCH_BASE or COMPUTE_TMPRING_SIZE the workload
fails (a fault, a hang reported); kernels whose scratch cannot be set up are refused by name."""
import shutil
import subprocess

import numpy as np
import pytest

import hcq
from amdrv import pm4
from amdrv.hcq import scratch as hcq_scratch

N = 100


def _ref(a: np.ndarray) -> np.ndarray:
    """tests/rdna3/kernels/private_array.cl on the CPU."""
    n = len(a)
    i = np.arange(n)
    t = lambda j: a[(i + j) % n] * j      # noqa: E731  t[k] of each work-item
    j = a & 63
    return t(j) + t((j * 7) & 63)


def _run(dev, prog, a, timeout=None):
    buf_a, out = dev.alloc(a.nbytes), dev.alloc(a.nbytes)
    dev.copyin(buf_a, a)
    dev.copyin(out, np.full(len(a), -1, np.int32))
    kw = {} if timeout is None else {"timeout": timeout}
    prog(out, buf_a, len(a), global_size=(2,), local_size=(64,), wait=True, **kw)
    return np.frombuffer(dev.copyout(out), np.int32)[:len(a)]


def _sets(template, offset) -> list[int] | None:
    """The values the template's SET_SH_REG at `offset` writes, or None."""
    t, i = list(template), 0
    while i < len(t):
        header = t[i]
        count = ((header >> 16) & 0x3FFF) + 1
        if (header >> 8) & 0xFF == pm4.P.PACKET3_SET_SH_REG and t[i + 1] == offset:
            return t[i + 2:i + 1 + count]
        i += 1 + count
    return None


def test_the_private_array_kernel_uses_scratch_instructions(kernel_corpus, tmp_path):
    """clang-15 keeps the dynamically indexed array in scratch: the code has scratch_* accesses."""
    if not shutil.which("llvm-objdump-15"):
        pytest.skip("llvm-objdump-15 is needed")
    so = tmp_path / "k.so"
    so.write_bytes(kernel_corpus["private_array"])
    dis = subprocess.run(["llvm-objdump-15", "-d", "--mcpu=gfx1100", str(so)], capture_output=True,
                         text=True, check=True).stdout
    assert "scratch_store" in dis and "scratch_load" in dis


def test_a_private_array_kernel_runs_with_the_scratch_buffer(dev, kernel_corpus):
    a = np.random.default_rng(3).integers(-1000, 1000, N, dtype=np.int32)
    prog = dev.program(kernel_corpus["private_array"], "private_array")
    k = prog.handle
    ring = dev._scratch
    private = k.private
    assert private >= 256            # int t[64]
    units = -(-private * 32 // 256)
    slots, se = hcq_scratch.scratch_slots(dev.gpu.dev.disc.gc)
    assert slots == 96 * 32 and se == 6      # Navi31: 96 CUs x gc_max_scratch_slots_per_cu 32, 6 SEs
    assert (ring.wavesize, ring.waves) == (units, slots // se)
    assert ring.buffer.size == slots * units * 256
    ring_regs = dev.gc.COMPUTE_TMPRING_SIZE.decode(_sets(k.template, pm4.sh_offset(dev.gc, "COMPUTE_TMPRING_SIZE"))[0])
    assert (ring_regs["WAVES"], ring_regs["WAVESIZE"]) == (slots // se, units)
    base = _sets(k.template, pm4.sh_offset(dev.gc, "COMPUTE_DISPATCH_SCRATCH_BASE_LO"))
    assert base == [(ring.buffer.va >> 8) & 0xFFFFFFFF, ring.buffer.va >> 40]
    assert np.array_equal(_run(dev, prog, a), _ref(a))
    # the waves' private memory is in the buffer (the executor's own would leave it untouched)
    assert any(dev.copyout(ring.buffer, 32 * 256))
    # a kernel without private memory: its template sets no scratch base and TMPRING_SIZE 0 (launch cost
    # unchanged), and the device's buffer is shared by kernels that fit in its slots
    plain = dev.program(kernel_corpus["add_f32"], "add_f32").handle
    assert _sets(plain.template, pm4.sh_offset(dev.gc, "COMPUTE_DISPATCH_SCRATCH_BASE_LO")) is None
    assert _sets(plain.template, pm4.sh_offset(dev.gc, "COMPUTE_TMPRING_SIZE")) == [0]
    again = dev.program(kernel_corpus["private_array"], "private_array")
    assert again.handle.scratch is ring and dev._scratch is ring


def _without(monkeypatch, name):
    """dev.program builds templates without the SET_SH_REG of register `name`."""
    real = pm4.PM4.set_sh_reg

    def set_sh_reg(self, offset, *values):
        if offset == skip[0]:
            return 0
        return real(self, offset, *values)
    skip = [None]
    monkeypatch.setattr(pm4.PM4, "set_sh_reg", set_sh_reg)
    return lambda dev: skip.__setitem__(0, pm4.sh_offset(dev.gc, name))


def test_without_the_scratch_base_the_private_accesses_fault(dev, kernel_corpus, monkeypatch):
    _without(monkeypatch, "COMPUTE_DISPATCH_SCRATCH_BASE_LO")(dev)
    prog = dev.program(kernel_corpus["private_array"], "private_array")
    a = np.arange(N, dtype=np.int32)
    with pytest.raises(hcq.HCQFault, match=r"page fault"):
        _run(dev, prog, a)


def test_without_tmpring_size_the_dispatch_hangs(dev, kernel_corpus, monkeypatch):
    _without(monkeypatch, "COMPUTE_TMPRING_SIZE")(dev)
    prog = dev.program(kernel_corpus["private_array"], "private_array")
    with pytest.raises(hcq.HCQTimeout, match=r"did not reach .*stopped at PACKET3 DISPATCH_DIRECT"):
        _run(dev, prog, np.arange(N, dtype=np.int32), timeout=1.0)
    dev.recover()      # the hung queue reset, so the device closes


def _spec_kernel(private, dynamic=False, rsrc2_scratch=True):
    from rdna3 import assemble
    from rdna3.codeobj import KernelSpec, write_code_object

    class Spec(KernelSpec):
        def descriptor(self):
            kd = super().descriptor()
            if dynamic:
                kd.kernel_code_properties |= 1 << 11       # uses_dynamic_stack
            if not rsrc2_scratch:
                kd.compute_pgm_rsrc2 &= ~1                 # enable_private_segment (SCRATCH_EN)
            return kd
    return write_code_object([Spec("k", assemble("s_endpgm"), private_segment_size=private)])


def test_kernels_whose_scratch_cannot_be_set_up_are_refused_by_name(dev):
    used = dev.gpu.dev.mm.in_use()
    limit = hcq_scratch.WAVESIZE_MAX * 256 // 32
    with pytest.raises(hcq.HCQError, match=rf"kernel k needs {limit + 1} bytes of private memory per "
                                           rf"work-item.*WAVESIZE holds at most.*{limit} bytes per work-item"):
        dev.program(_spec_kernel(limit + 1), "k")
    with pytest.raises(hcq.HCQError, match=r"kernel k uses a dynamic stack"):
        dev.program(_spec_kernel(64, dynamic=True), "k")
    with pytest.raises(hcq.HCQError, match=r"kernel k declares 64 bytes of private memory.*SCRATCH_EN is 0"):
        dev.program(_spec_kernel(64, rsrc2_scratch=False), "k")
    # the largest slot fits WAVESIZE but not the simulated board's VRAM: a clear error, nothing left behind
    with pytest.raises(hcq.HCQError, match=r"kernel k: no .* of VRAM for its scratch buffer \(3072 wave slots"):
        dev.program(_spec_kernel(limit), "k")
    assert dev._scratch is None and dev.gpu.dev.mm.in_use() == used


def test_the_scratch_buffer_grows_for_a_larger_slot_and_old_programs_keep_theirs(dev, kernel_corpus):
    small = dev.program(_spec_kernel(64), "k")          # 64 x 32 bytes: WAVESIZE 8
    first = dev._scratch
    assert small.handle.scratch is first and first.wavesize == 8
    same = dev.program(_spec_kernel(32), "k")           # fits: the same buffer, its WAVESIZE (Mesa: constant)
    assert same.handle.scratch is first
    prog = dev.program(kernel_corpus["private_array"], "private_array")   # 260 bytes: WAVESIZE 33
    grown = dev._scratch
    assert grown is not first and grown.wavesize == 33 and prog.handle.scratch is grown
    assert small.handle.scratch is first and first.buffer.size == grown.buffer.size * 8 // 33
    a = np.arange(N, dtype=np.int32) * 37 % 1000
    assert np.array_equal(_run(dev, prog, a), _ref(a))
