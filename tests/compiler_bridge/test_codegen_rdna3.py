"""The RDNA3 generator: IR programs become gfx1100 code of our own that matches the C reference on the
wave executor and on am:sim through hcq, agrees with the LLVM generator, disassembles, is accepted by
llvm-objdump-15, allocates registers by liveness, waits for loads before use, and fails clearly."""
import re
import shutil
import subprocess

import numpy as np
import pytest

import hcq
from rdna3 import disassemble
from rdna3.codeobj import CodeObject
from compiler_bridge.codegen import rdna3 as R
from compiler_bridge.codegen import samples as S
from compiler_bridge import ir, runtime

SAMPLES = S.samples()
needs_clang = pytest.mark.skipif(not shutil.which("clang-15") or not shutil.which("ld.lld-15"),
                                 reason="clang-15/ld.lld-15 not installed")


def assert_close(got, ref, what):
    for t, (g, r) in enumerate(zip(got, ref)):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=f"{what} output {t}")
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{what} output {t}")


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_matches_c_reference_on_wave_executor(name):
    s = SAMPLES[name]
    co, kname, launch = R.generate(s.kernel)
    assert kname == s.kernel.name and launch == ir.launch_dims(s.kernel)
    assert_close(S.run_wave(s, co, kname, launch), S.run_reference(s), f"rdna3 {name}")


@needs_clang
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_same_results_as_llvm_generator(name):
    from compiler_bridge.codegen import llvm as L
    s = SAMPLES[name]
    ours = S.run_wave(s, *R.generate(s.kernel))
    theirs = S.run_wave(s, *L.generate(s.kernel))
    assert_close(ours, theirs, f"rdna3 vs llvm {name}")


def test_runs_on_am_sim_through_hcq(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    dev = hcq.open("am:sim", fresh=True)
    try:
        for name in ("ew_chain", "softmax", "int_ops", "uniform"):
            s = SAMPLES[name]
            assert_close(S.run_hcq(dev, s, *R.generate(s.kernel)), S.run_reference(s), f"hcq rdna3 {name}")
    finally:
        dev.close()


def test_registered_and_default_on_am():
    gens = runtime.codegens()
    assert gens["rdna3"] is R.generate
    assert next(c for c in ("rdna3", "llvm") if c in gens) == "rdna3"


@pytest.fixture
def no_unroll(monkeypatch):
    monkeypatch.setattr(R, "UNROLL_LENGTH", 0)
    monkeypatch.setattr(R, "_memo", {})


def test_disassembles_and_descriptor_follows_code(no_unroll):
    s = SAMPLES["matmul"]
    co, name, _ = R.generate(s.kernel)
    k = CodeObject(co).kernel(name)
    text = disassemble(k.code)
    assert text[-1] == "s_endpgm"
    assert sum(t.startswith("global_load_b32") for t in text) == 2
    assert sum(t.startswith("global_store_b32") for t in text) == 1
    assert any(t.startswith("s_cbranch_scc1") for t in text)        # the reduce loop
    d = k.descriptor
    assert d.user_sgpr_layout() == [("kernarg_segment_ptr", 0, 2)] and d.wave32
    assert d.kernarg_size == 24 and [a.value_kind for a in k.args] == ["global_buffer"] * 3


@pytest.mark.skipif(not shutil.which("llvm-objdump-15"), reason="llvm-objdump-15 not installed")
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_llvm_objdump_accepts_code_object(tmp_path, sample):
    s = SAMPLES[sample]
    co, name, _ = R.generate(s.kernel)
    path = tmp_path / "k.co"
    path.write_bytes(co)
    r = subprocess.run(["llvm-objdump-15", "-d", "--mcpu=gfx1100", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower() and "error" not in r.stderr.lower(), r.stderr
    ours = [t.split()[0] for t in disassemble(CodeObject(co).kernel(name).code)]
    theirs = re.findall(r"^\s+(\w+)", r.stdout.split(f"<{name}>:")[1], re.M)
    theirs = [t for t in theirs if not t.startswith("s_code_end")]
    assert [t.removesuffix("_e32").removesuffix("_e64") for t in theirs[:len(ours)]] == \
        [t.removesuffix("_e32").removesuffix("_e64") for t in ours]


def _vgprs(k):
    return CodeObject(R.generate(k)[0]).kernel(k.name).metadata[".vgpr_count"]      # highest used + 1


def test_registers_are_reused_after_last_use():
    # 24 loads live at once need about 24 VGPRs beyond the fixed ones, not one per SSA value (~70)
    k = SAMPLES["pressure"].kernel
    n_values = sum(1 for op in k.walk() if op.id >= 0)
    assert n_values > 70
    assert 24 + 8 <= _vgprs(k) <= 24 + 8 + 2
    # a long chain of dependent ops needs only a few registers
    b = ir.Builder()
    i = b.gid()
    x = b.load(0, i, "float32")
    for _ in range(200):
        x = b.binary("add", b.binary("mul", x, b.const(0.5, "float32")), b.const(1.0, "float32"))
    b.store(1, i, x)
    k = b.kernel("chain", [ir.BufParam("x", "float32", 4, "r"), ir.BufParam("o", "float32", 4, "w")], 4)
    assert _vgprs(k) <= 12


def test_values_live_across_a_reduce_keep_their_registers():
    # x is defined before the loop and used inside it: a value defined in the body must not take its register
    b = ir.Builder()
    i = b.gid()
    x = b.load(0, i, "float32")
    j = b.begin_reduce()
    t = b.binary("mul", b.load(0, b.binary("add", i, j), "float32"), b.const(2.0, "float32"))
    r = b.end_reduce("sum", 3, b.binary("add", t, x))
    b.store(1, i, r)
    n = 5
    k = b.kernel("live_across", [ir.BufParam("x", "float32", n + 2, "r"), ir.BufParam("o", "float32", n, "w")], n)
    s = S.Sample(k, [np.arange(n + 2, dtype=np.float32) + 1])
    assert_close(S.run_wave(s, *R.generate(k)), S.run_reference(s), "live_across")


def test_waitcnt_before_every_use_of_a_load():
    for name, s in SAMPLES.items():
        lines = R.assembly(s.kernel).splitlines()
        inflight: list[str] = []          # destination registers of loads in flight, in issue order
        for line in lines:
            m = re.match(r"s_waitcnt vmcnt\((\d+)\)", line)
            if m:
                keep = int(m.group(1))
                inflight = inflight[len(inflight) - keep:] if keep else []
                continue
            ops = line.split(None, 1)
            srcs = ops[1].split(",") if len(ops) > 1 else []
            if line.startswith("global_load_b32"):
                srcs = srcs[1:]
            regs = {x.strip().lstrip("-") for x in srcs}
            if not line.startswith("global_load_b32") and line.split()[0] not in ("global_store_b32",):
                regs |= {srcs[0].strip()} if line.startswith(("v_fmac", "v_div_fmas")) else set()
            assert not regs & set(inflight), f"{name}: {line!r} reads a load still in flight"
            if line.startswith("global_load_b32"):
                inflight.append(ops[1].split(",")[0].strip())


def test_constant_division_magic_is_exact():
    rng = np.random.default_rng(1)
    xs = np.concatenate([np.arange(0, 4096), rng.integers(0, 2**31, 20000), [2**31 - 1, 2**31 - 2]]).astype(np.uint64)
    for d in list(range(3, 300)) + [641, 1000, 12345, 65537, 2**31 - 1]:
        if d & (d - 1) == 0:
            continue
        m, sh = R.magic(d)
        q = ((xs * np.uint64(m)) >> np.uint64(32)) >> np.uint64(sh)
        assert np.array_equal(q, xs // np.uint64(d)), d


def test_out_of_registers_is_a_clear_error():
    b = ir.Builder()
    i = b.gid()
    vals = [b.load(0, b.binary("add", i, b.const(t, "int32")), "float32") for t in range(260)]
    acc = vals[-1]
    for v in reversed(vals[:-1]):
        acc = b.binary("add", acc, v)
    b.store(1, i, acc)
    k = b.kernel("too_wide", [ir.BufParam("x", "float32", 300, "r"), ir.BufParam("o", "float32", 1, "w")], 1)
    with pytest.raises(R.RegisterSpill, match="kernel too_wide: out of VGPRs"):
        R.generate(k)


def test_non_constant_divisor_is_refused_by_name():
    b = ir.Builder()
    i = b.gid()
    b.store(0, i, b.binary("idiv", i, b.param(0, "int32")))
    k = b.kernel("vardiv", [ir.BufParam("o", "int32", 4, "w")], 4, [ir.ScalarParam("d", "int32")])
    with pytest.raises(R.CodegenError, match="kernel vardiv at idiv .*positive constant"):
        R.generate(k)


def test_compile_bench_reports_both_generators(debian_firmware):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "bench" / "compile.py"
    env = dict(os.environ, DRIVERLESS_FIRMWARE_DIR=str(debian_firmware))  # the MLP part boots am:sim
    r = subprocess.run([sys.executable, str(script), "-n", "1", "--json"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert {row["kernel"] for row in res["kernels"]} == set(SAMPLES)
    assert all(row["rdna3_ms"] > 0 and row["rdna3_code_bytes"] > 0 and row["rdna3_wave_instructions"] > 0
               for row in res["kernels"])
    if res["clang"]:
        assert all(row["llvm_ms"] > 0 and row["ratio"] > 0 for row in res["kernels"])
    assert res["mlp_am_sim"]["rdna3"]["median_s"] > 0


def test_exp_is_accurate_over_the_whole_range():
    n = 256
    b = ir.Builder()
    i = b.gid()
    b.store(1, i, b.unary("exp", b.load(0, i, "float32")))
    k = b.kernel("exp_range", [ir.BufParam("x", "float32", n, "r"), ir.BufParam("o", "float32", n, "w")], n)
    xs = np.linspace(-110, 95, n).astype(np.float32)
    xs[:7] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, 88.72]
    got = S.run_wave(S.Sample(k, [xs]), *R.generate(k))[0]
    with np.errstate(over="ignore"):
        exact = np.exp(xs.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, exact, rtol=5e-7, atol=0, equal_nan=True)   # denormal results included


def _loop_bodies(text):
    """{label: instructions between `label:` and the branch back to it}"""
    lines, out = text.splitlines(), {}
    for n, line in enumerate(lines):
        if line.startswith("s_cbranch_scc1 "):
            label = line.split()[1]
            start = lines.index(label + ":")
            out[label] = lines[start + 1:n]
    return out


def test_invariants_are_hoisted_and_duplicates_merged(no_unroll):
    k = SAMPLES["nested"].kernel
    plain, opt = R.assembly(k, opt=False), R.assembly(k)
    assert sum(l.startswith("global_load") for l in plain.splitlines()) == 3
    loops = _loop_bodies(opt)
    assert len(loops) == 2
    inner = min(loops.values(), key=len)
    outer = max(loops.values(), key=len)
    # inner loop: one load (x) and the index add; y[i] (loaded twice in the IR) once, before both loops
    assert sum(l.startswith("global_load") for l in inner) == 1
    assert sum(l.startswith("global_load") for l in opt.splitlines()) == 2
    assert not any("v_mul_lo_u32" in l for l in outer)               # i * J * K is outside both loops
    assert len(opt.splitlines()) < len(plain.splitlines())
    ref = S.run_reference(SAMPLES["nested"])
    assert_close(S.run_wave(SAMPLES["nested"], *R.generate(k)), ref, "nested")


@pytest.mark.parametrize("n", [1, 31, 32, 64, 65, 200])
def test_partial_and_many_workgroups(n):
    b = ir.Builder()
    i = b.gid()
    x = b.load(0, i, "float32")
    b.store(1, i, b.binary("add", x, b.cast(i, "float32")))
    k = b.kernel(f"sizes_{n}", [ir.BufParam("x", "float32", n, "r"), ir.BufParam("o", "float32", n, "w")], n)
    s = S.Sample(k, [np.arange(n, dtype=np.float32) * 0.5])
    co, name, launch = R.generate(k)
    assert launch == ir.launch_dims(k)
    assert_close(S.run_wave(s, co, name, launch), [np.arange(n, dtype=np.float32) * 1.5], f"n={n}")


def test_constant_index_offsets_fold_into_the_instruction():
    text = R.assembly(SAMPLES["pressure"].kernel).splitlines()
    loads = [l for l in text if l.startswith("global_load_b32")]
    assert len(loads) == 24 and sum("offset:" in l for l in loads) == 23
    assert max(int(l.rsplit("offset:", 1)[1]) for l in loads if "offset:" in l) == 4 * 23
    assert sum(l.startswith("v_lshlrev_b32 v2") for l in text) <= 2          # one shift for all 24 loads


def test_uniform_values_move_to_vgprs_when_sgprs_run_out():
    b = ir.Builder()
    i = b.gid()
    p = b.param(0, "int32")
    us = [b.binary("mul", p, b.const(t + 2, "int32")) for t in range(120)]      # 120 live uniform ints
    acc = i
    for u in reversed(us):
        acc = b.binary("add", b.binary("mul", acc, b.const(3, "int32")), u)
    b.store(0, i, acc)
    k = b.kernel("many_uniform", [ir.BufParam("o", "int32", 8, "w")], 8, [ir.ScalarParam("p", "int32")])
    s = S.Sample(k, [], (7,))
    assert_close(S.run_wave(s, *R.generate(k)), S.run_reference(s), "many_uniform")
    text = R.assembly(k)
    assert "s_mul_i32 s101" in text and "v_mul_lo_u32" in text


def test_items_past_n_touch_nothing():
    from rdna3.wave import dispatch, pack_kernargs
    from rdna3.wave_memory import FlatMemory
    n = 70                                   # two workgroups of 64: 58 idle items in the second
    b = ir.Builder()
    i = b.gid()
    b.store(1, i, b.load(0, i, "float32"))
    k = b.kernel("copy70", [ir.BufParam("x", "float32", n, "r"), ir.BufParam("o", "float32", n, "w")], n)
    co, name, ((gx, _, _), (lx, _, _)) = R.generate(k)
    assert gx * lx == 128
    mem = FlatMemory()
    x = np.arange(n, dtype=np.float32)
    px = mem.upload(x.tobytes())
    po = mem.upload(np.full(128, -7.0, np.float32).tobytes())
    code = CodeObject(co)
    dispatch(code, name, mem, (gx * lx,), (lx,), pack_kernargs(code.kernel(name), [px, po]))
    out = mem.array(po, np.float32, 128)
    assert np.array_equal(out[:n], x) and np.all(out[n:] == -7.0)


def test_short_reduces_are_unrolled_long_ones_loop():
    text = R.assembly(SAMPLES["row_sum_max"].kernel)            # two reduces of 7
    assert "s_cbranch_scc1" not in text
    loads = [l for l in text.splitlines() if l.startswith("global_load_b32")]
    assert len(loads) == 7 and sum("offset:" in l for l in loads) == 6   # one load per element, CSE'd
    rows, cols = 3, R.UNROLL_LENGTH + 1
    b = ir.Builder()
    i = b.gid()
    j = b.begin_reduce()
    idx = b.binary("add", b.binary("mul", i, b.const(cols, "int32")), j)
    r = b.end_reduce("sum", cols, b.load(0, idx, "float32"))
    b.store(1, i, r)
    k = b.kernel("long_row", [ir.BufParam("x", "float32", rows * cols, "r"),
                              ir.BufParam("o", "float32", rows, "w")], rows)
    assert R.assembly(k).count("s_cbranch_scc1") == 1
    s = S.Sample(k, [np.linspace(-1, 1, rows * cols).astype(np.float32)])
    assert_close(S.run_wave(s, *R.generate(k)), S.run_reference(s), "long_row")


def test_trans_results_are_waited_for_before_use():
    trans = ("v_exp_f32", "v_log_f32", "v_rcp_f32", "v_sqrt_f32")
    for name, s in SAMPLES.items():
        written: dict[str, int] = {}          # trans destination -> VALU instructions since
        for line in R.assembly(s.kernel).splitlines():
            parts = line.split(None, 1)
            if parts[0] == "s_waitcnt_depctr":
                written.clear()
                continue
            ops = [x.strip().lstrip("-") for x in parts[1].split(",")] if len(parts) > 1 else []
            assert not set(ops) & {r for r, n in written.items() if n < 5}, f"{name}: {line!r} reads a trans result"
            assert not (written and (line.endswith(":") or "branch" in parts[0])), f"{name}: {line!r}"
            if parts[0].startswith("v_"):
                written = {r: n + 1 for r, n in written.items()}
            if parts[0] in trans:
                written[ops[0]] = 0


def test_scalar_parameters_carry_their_c_types():
    from amdrv.kernargs import kernel_args
    s = SAMPLES["uniform"]
    meta = CodeObject(R.generate(s.kernel)[0]).kernel("uniform").metadata[".args"]
    assert [a[".type_name"] for a in meta] == ["float*", "float*", "int*", "int", "float"]
    assert [a.code for a in kernel_args(meta)] == ["Q", "Q", "Q", "i", "f"]     # hcq packs 11 and 0.75 as such
