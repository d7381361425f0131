"""The executor runs every instruction clang-15 emits for gfx1100 on the project's corpus (its OpenCL C
kernels and the compiler's LLVM path, -O0 and -O3 here, all of -O0..-O3 with DRIVERLESS_ISA_COVERAGE=all),
and each instruction added for it matches a reference computed here in Python integers/floats."""
import math
import os

import numpy as np
import pytest

from rdna3.codeobj import CodeObject, KernelArg, KernelSpec, write_code_object
from rdna3.wave import ExecError, dispatch, pack_kernargs
from rdna3.wave_memory import FlatMemory
from rdna3 import opencl as codegen_clang

u16, u32, i32, u64, f32 = np.uint16, np.uint32, np.int32, np.uint64, np.float32
needs_clang = pytest.mark.skipif(not codegen_clang.available(), reason="clang-15/ld.lld-15 not installed")
LEVELS = ["-O0", "-O1", "-O2", "-O3"] if os.environ.get("DRIVERLESS_ISA_COVERAGE") == "all" else ["-O0", "-O3"]


@pytest.fixture(scope="module")
def corpus():
    from tools import isa_coverage
    return isa_coverage.corpus()


@needs_clang
@pytest.mark.parametrize("level", LEVELS)
def test_every_instruction_clang_emits_is_executable(corpus, level):
    from tools import isa_coverage
    objs = isa_coverage.compile_corpus([level], jobs=4, sources=corpus)
    assert len(objs) == len(corpus) > 60
    missing, seen = {}, set()
    for (name, _), co in objs.items():
        gaps, mns = isa_coverage.executor_gaps(co, name, level)
        seen |= set(mns)
        for mn, f in gaps.items():
            missing.setdefault(mn, f"{f.where[0]}: {f.why}")
    assert not missing, missing
    # what was missing before: -O0's calls and clamp, -O3's 24-bit multiply-add (the CODEGEN=llvm transpose)
    want = {"-O0": {"s_swappc_b64", "s_setpc_b64", "v_maxmin_f32"}, "-O3": {"v_mad_i32_i24"}}.get(level, set())
    assert want <= seen and len(seen) > 150


def test_the_corpus_covers_its_sources(corpus):
    names = set(corpus)
    assert {"rdna3/transpose", "hcq/faults", "llvm/matmul", "tensor/transpose.0"} <= names
    assert all('#include' not in src for src in corpus.values())     # headers inlined: the cache key sees them


# ------------------------------------------------------------------------------------------------
# one VALU instruction over random lanes, against a Python reference


def run_valu(text, *inputs, lanes=256):
    """Runs `text` (an instruction writing v4 from v1, v2, v3) on `lanes` work-items whose v1..v3 are
    loaded from `inputs` (uint32 arrays of `lanes` values); returns v4 of every lane."""
    from rdna3 import assemble
    loads = "\n".join(f"global_load_b32 v{k + 1}, v10, s[6:7] offset:{4 * lanes * k}" for k in range(len(inputs)))
    code = assemble(f"""
        s_load_b128 s[4:7], s[0:1], 0x0
        v_lshlrev_b32 v10, 2, v0
        v_mov_b32 v4, 0
        s_waitcnt lgkmcnt(0)
        {loads}
        s_waitcnt vmcnt(0)
        {text}
        global_store_b32 v10, v4, s[4:5]
        s_endpgm
    """)
    spec = KernelSpec("t", code, args=[KernelArg(0, 8, "global_buffer", "global"), KernelArg(8, 8, "global_buffer", "global")])
    co = CodeObject(write_code_object([spec]))
    mem = FlatMemory()
    out = mem.upload(np.zeros(lanes, u32))
    src = mem.upload(np.concatenate([np.asarray(a, u32) for a in inputs]) if inputs else np.zeros(1, u32))
    dispatch(co, None, mem, (lanes,), (lanes,), pack_kernargs(co.kernel(), [out, src]))
    return mem.array(out, u32, lanes)


rng = np.random.default_rng(11)


def rand32(n=256):
    x = rng.integers(0, 2**32, n, dtype=u64).astype(u32)
    x[:8] = [0, 1, 0xFFFFFFFF, 0x7FFFFF, 0x800000, 0xFFFFFF, 0x80000000, 0xFF800000]
    return x


def sx(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def check(got, want):
    want = np.array([w & 0xFFFFFFFF for w in want], u32)
    bad = np.nonzero(got != want)[0]
    assert not bad.size, [(int(i), hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_v_mad_i32_i24():
    a, b, c = rand32(), rand32(), rand32()
    want = [sx(int(x), 24) * sx(int(y), 24) + int(z) for x, y, z in zip(a, b, c)]
    check(run_valu("v_mad_i32_i24 v4, v1, v2, v3", a, b, c), want)
    # the form clang-15 emits for a transposed index: an inline constant multiplier
    check(run_valu("v_mad_i32_i24 v4, v1, 6, v2", a, b), [sx(int(x), 24) * 6 + int(y) for x, y in zip(a, b)])


def test_v_mul_hi_i32_i24():
    a, b = rand32(), rand32()
    check(run_valu("v_mul_hi_i32_i24 v4, v1, v2", a, b), [(sx(int(x), 24) * sx(int(y), 24)) >> 32 for x, y in zip(a, b)])


def test_v_mad_i32_i16_with_op_sel():
    a, b, c = rand32(), rand32(), rand32()
    check(run_valu("v_mad_i32_i16 v4, v1, v2, v3", a, b, c),
          [sx(int(x), 16) * sx(int(y), 16) + int(z) for x, y, z in zip(a, b, c)])
    check(run_valu("v_mad_i32_i16 v4, v1, v2, v3 op_sel:[1,1,0,0]", a, b, c),
          [sx(int(x) >> 16, 16) * sx(int(y) >> 16, 16) + int(z) for x, y, z in zip(a, b, c)])


def _fmax(x, y):
    return y if math.isnan(x) else x if math.isnan(y) else max(x, y)


def _fmin(x, y):
    return y if math.isnan(x) else x if math.isnan(y) else min(x, y)


def _floats(n=256):
    x = rng.uniform(-4, 4, n).astype(f32)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5]
    return x


@pytest.mark.parametrize("op", ["maxmin", "minmax"])
def test_v_maxmin_minmax(op):
    a, b, c = _floats(), _floats()[::-1].copy(), rng.permutation(_floats())
    got = run_valu(f"v_{op}_f32 v4, v1, v2, v3", a.view(u32), b.view(u32), c.view(u32)).view(f32)
    outer, inner = (_fmin, _fmax) if op == "maxmin" else (_fmax, _fmin)
    want = np.array([outer(inner(float(x), float(y)), float(z)) for x, y, z in zip(a, b, c)], f32)
    np.testing.assert_array_equal(got, want)
    ia, ib, ic = rand32(), rand32(), rand32()
    for t, conv in (("i32", lambda v: sx(int(v), 32)), ("u32", int)):
        o, n = (min, max) if op == "maxmin" else (max, min)
        check(run_valu(f"v_{op}_{t} v4, v1, v2, v3", ia, ib, ic),
              [o(n(conv(x), conv(y)), conv(z)) for x, y, z in zip(ia, ib, ic)])
    h = lambda x: x.astype(np.float16).view(u16).astype(u32)  # noqa: E731
    got = run_valu(f"v_{op}_f16 v4, v1, v2, v3", h(a), h(b), h(c))
    want = np.array([outer(inner(float(np.float16(x)), float(np.float16(y))), float(np.float16(z)))
                     for x, y, z in zip(a, b, c)], np.float16)
    np.testing.assert_array_equal((got & 0xFFFF).astype(u16).view(np.float16), want)


def test_16_bit_min3_max3_and_logic():
    a, b, c = rand32(), rand32(), rand32()
    lo = lambda v: int(v) & 0xFFFF  # noqa: E731
    for op, f in (("min3_u16", lambda x, y, z: min(lo(x), lo(y), lo(z))),
                  ("max3_u16", lambda x, y, z: max(lo(x), lo(y), lo(z))),
                  ("min3_i16", lambda x, y, z: min(sx(lo(x), 16), sx(lo(y), 16), sx(lo(z), 16))),
                  ("max3_i16", lambda x, y, z: max(sx(lo(x), 16), sx(lo(y), 16), sx(lo(z), 16)))):
        got = run_valu(f"v_{op} v4, v1, v2, v3", a, b, c) & 0xFFFF
        check(got, [f(x, y, z) & 0xFFFF for x, y, z in zip(a, b, c)])
    for op, f in (("and_b16", lambda x, y: lo(x) & lo(y)), ("or_b16", lambda x, y: lo(x) | lo(y)),
                  ("xor_b16", lambda x, y: lo(x) ^ lo(y))):
        check(run_valu(f"v_{op} v4, v1, v2", a, b) & 0xFFFF, [f(x, y) for x, y in zip(a, b)])
    check(run_valu("v_not_b16 v4, v1", a) & 0xFFFF, [~lo(x) & 0xFFFF for x in a])
    check(run_valu("v_cvt_i32_i16 v4, v1", a), [sx(lo(x), 16) for x in a])
    check(run_valu("v_cvt_u32_u16 v4, v1", a), [lo(x) for x in a])


def test_float_to_int_rounding_conversions():
    x = rng.uniform(-5e9, 5e9, 256).astype(f32)
    x[:13] = [np.nan, np.inf, -np.inf, 2.5, -2.5, 0.5, -0.5, 1.49999, -0.0, 3e9, -3e9, 7.5, 0.49999997]
    clamp = lambda v: max(-2**31, min(2**31 - 1, v))  # noqa: E731
    ref = lambda f: [0 if math.isnan(v) else clamp(-2**31 if v == -math.inf else 2**31 - 1 if v == math.inf  # noqa: E731
                                                   else f(v)) for v in map(float, x)]
    check(run_valu("v_cvt_floor_i32_f32 v4, v1", x.view(u32)), ref(math.floor))
    # S0 + 0.5 rounds in f32 (0.49999997 + 0.5 is 1.0), then floor
    check(run_valu("v_cvt_nearest_i32_f32 v4, v1", x.view(u32)), ref(lambda v: math.floor(float(f32(v) + f32(0.5)))))


# ------------------------------------------------------------------------------------------------
# scalar ops and calls


def run_scalar(text, regs):
    """Runs `text` and returns the SGPRs `regs` as stored by one lane."""
    from rdna3 import assemble
    stores = "\n".join(f"v_mov_b32 v1, s{r}\nglobal_store_b32 v3, v1, s[4:5] offset:{4 * k}" for k, r in enumerate(regs))
    code = assemble(f"s_load_b64 s[4:5], s[0:1], 0x0\ns_waitcnt lgkmcnt(0)\n{text}\nv_mov_b32 v3, 0\n{stores}\ns_endpgm\n")
    co = CodeObject(write_code_object([KernelSpec("t", code, args=[KernelArg(0, 8, "global_buffer", "global")])]))
    mem = FlatMemory()
    out = mem.upload(np.zeros(len(regs), u32))
    dispatch(co, None, mem, (1,), (1,), pack_kernargs(co.kernel(), [out]))
    return [int(v) for v in mem.array(out, u32, len(regs))]


def test_scalar_ops_added_for_the_corpus():
    x64 = 0x0000_0100_0000_0000          # bit 40
    got = run_scalar(f"""
        s_mov_b32 s10, 0
        s_mov_b32 s11, 0x100
        s_ctz_i32_b64 s12, s[10:11]
        s_clz_i32_u64 s13, s[10:11]
        s_mov_b64 s[14:15], 0
        s_ctz_i32_b64 s16, s[14:15]
        s_bcnt0_i32_b32 s17, 0xff
        s_cls_i32 s18, 0xfff0
        s_mov_b32 s20, 1
        s_mov_b32 s21, 0x80000000
        s_brev_b64 s[22:23], s[20:21]
        s_bfm_b64 s[24:25], 36, 8
        s_mov_b32 s26, 0xf0
        s_bitset1_b32 s26, 1
        s_bitset0_b32 s26, 4
        s_mov_b64 s[28:29], 5
        s_cmp_eq_u32 1, 1
        s_cmov_b64 s[28:29], s[10:11]
        s_mov_b32 s30, 0x12345678
        s_pack_hl_b32_b16 s31, s30, s30
    """, [12, 13, 16, 17, 18, 22, 23, 24, 25, 26, 28, 29, 31])
    bfm = ((1 << 36) - 1) << 8
    assert got == [40, 23, 0xFFFFFFFF, 24, 16, 1, 0x80000000, bfm & 0xFFFFFFFF, bfm >> 32, 0xE2,
                   x64 & 0xFFFFFFFF, x64 >> 32, 0x56781234]


def test_calls_and_returns_through_sgpr_pairs():
    """s_getpc/s_swappc_b64 into a function, s_setpc_b64 back, s_call_b64; waves of one dispatch that
    jump to different addresses split and run both paths."""
    from rdna3 import assemble
    head = """
        s_load_b64 s[4:5], s[0:1], 0x0
        s_waitcnt lgkmcnt(0)
        v_lshlrev_b32 v3, 2, v0
        s_lshl_b32 s11, s2, 7
        v_add_nc_u32 v3, s11, v3
        v_mov_b32 v1, 0
        s_getpc_b64 s[8:9]
    """

    def body(off):
        return f"""
        s_add_u32 s8, s8, {off:#x}
        s_addc_u32 s9, s9, 0
        s_cmp_eq_u32 s2, 1
        s_cselect_b32 s10, 12, 0
        s_add_u32 s8, s8, s10
        s_addc_u32 s9, s9, 0
        s_swappc_b64 s[30:31], s[8:9]
        s_call_b64 s[30:31], plus7
        global_store_b32 v3, v1, s[4:5]
        s_endpgm
    twice:
        v_add_nc_u32 v1, 100, v1
        s_setpc_b64 s[30:31]
        v_add_nc_u32 v1, 1000, v1
        s_setpc_b64 s[30:31]
    plus7:
        v_add_nc_u32 v1, 7, v1
        s_setpc_b64 s[30:31]
    """
    # s_getpc_b64 gives the address after itself, where the body starts
    off = len(assemble(body(0x10).split("twice:")[0] + "plus7:\n"))
    assert off <= 64                       # an inline constant, as in the measuring pass
    code = assemble(head + body(off))
    co = CodeObject(write_code_object([KernelSpec("t", code, args=[KernelArg(0, 8, "global_buffer", "global")])]))
    mem = FlatMemory()
    out = mem.upload(np.zeros(96, u32))
    dispatch(co, None, mem, (96,), (32,), pack_kernargs(co.kernel(), [out]))
    # workgroup 1 (s2 = 1) jumps 12 bytes further: +1000 instead of +100
    assert mem.array(out, u32, 96).tolist() == [107] * 32 + [1007] * 32 + [107] * 32


def test_an_unimplemented_instruction_is_an_immediate_error_naming_it():
    from rdna3 import assemble
    code = assemble("v_mov_b32 v1, 0\nv_sad_u8 v1, v1, v1, v1\ns_endpgm\n")
    co = CodeObject(write_code_object([KernelSpec("needs_sad", code)]))
    with pytest.raises(ExecError, match=r"PC 0x[0-9a-f]+ \(needs_sad\+0x4\): v_sad_u8 v1, v1, v1, v1: "
                                        r"unsupported: no semantics for v_sad_u8") as e:
        dispatch(co, None, FlatMemory(), (32,), (32,), b"", max_steps=10**6)
    assert e.value.instructions == 1        # at once, after the one instruction before it


def test_a_valid_instruction_of_an_undecoded_format_is_a_model_gap_not_illegal(tmp_path):
    from rdna3 import assemble
    exp = bytes.fromhex("000000f8" "00000000")       # an EXP word (bits 31:26 = 111110): valid on hardware
    co = CodeObject(write_code_object([KernelSpec("exp", exp + assemble("s_endpgm"), vgpr_count=8, sgpr_count=8)]))
    with pytest.raises(ExecError, match=r"undecodable instruction") as e:
        dispatch(co, None, FlatMemory(), (32,), (32,), b"")
    assert e.value.kind == "unsupported"
    co = CodeObject(write_code_object([KernelSpec("bad", bytes(4) + assemble("s_endpgm"), vgpr_count=8, sgpr_count=8)]))
    with pytest.raises(ExecError, match=r"illegal instruction: VOP2 opcode 0") as e:
        dispatch(co, None, FlatMemory(), (32,), (32,), b"")
    assert e.value.kind == "illegal"


# ------------------------------------------------------------------------------------------------
# the corpus at other levels runs correctly, not only compiles: -O0 calls its helpers and keeps its
# stack in private memory


@needs_clang
@pytest.mark.parametrize("level", ["-O0", "-O3"])
def test_kernels_at_other_levels_match_numpy(corpus, level):
    from rdna3.opencl import compile_opencl
    co = CodeObject(compile_opencl(corpus["rdna3/transpose"], opt=level))
    w, h = 37, 11
    a = rng.integers(0, 2**31, (h, w)).astype(i32)
    mem = FlatMemory()
    out, src = mem.upload(np.zeros((w, h), i32)), mem.upload(a)
    dispatch(co, None, mem, (w, h), (16, 4), pack_kernargs(co.kernel(), [out, src, u32(w), u32(h)]))
    assert np.array_equal(mem.array(out, i32, w * h).reshape(w, h), a.T)
    co = CodeObject(compile_opencl(corpus["rdna3/select_clamp"], opt=level))
    n = 203
    x, f = rng.integers(-500, 500, n).astype(i32), rng.uniform(-2, 2, n).astype(f32)
    mem = FlatMemory()
    oi, of, pa, pf = mem.upload(np.zeros(2 * n, i32)), mem.upload(np.zeros(n, f32)), mem.upload(x), mem.upload(f)
    dispatch(co, None, mem, (n,), (64,), pack_kernargs(co.kernel(), [oi, of, pa, pf, i32(-100), i32(200), u32(n)]))
    o = mem.array(oi, i32, 2 * n).reshape(n, 2)
    assert np.array_equal(o[:, 0], np.clip(x, -100, 200)) and np.array_equal(o[:, 1], np.abs(x))
    assert np.array_equal(mem.array(of, f32, n), np.clip(f, -1, 1) + np.where(f > 0.5, f32(2), f32(0.25)))


@needs_clang
@pytest.mark.parametrize("level", ["-O0", "-O3"])
@pytest.mark.parametrize("name", ["matmul", "softmax", "int_ops"])
def test_llvm_codegen_at_other_levels_matches_the_c_reference(level, name, tmp_path_factory, monkeypatch):
    from compiler_bridge.codegen import llvm as L
    from compiler_bridge.codegen import samples as S
    from rdna3.opencl import compile_opencl
    monkeypatch.setattr("compiler_bridge.codegen.c._cache_dir", lambda: tmp_path_factory.getbasetemp() / "c_cache")
    samples = S.samples()
    s = samples[name]
    co = compile_opencl(L.opencl_source(s.kernel), opt=level)
    got, ref = S.run_wave(s, co, s.kernel.name, L.ir.launch_dims(s.kernel)), S.run_reference(s)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=2e-6, atol=1e-6)
