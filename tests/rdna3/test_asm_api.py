"""The decoded-instruction API, the builder's typing, and the errors for bad input."""
import pytest

from rdna3 import assemble, decode, decode_all, disassemble
from rdna3 import instruction as I
from rdna3.builder import Program, exec_lo, null, s, v, vcc_lo
from rdna3.errors import AsmError, DecodeError, IsaError


def test_decode_vop3_operands_and_modifiers():
    # llvm-mc-15: v_add_f32_e64 v0, -v1, |v2| clamp mul:2 -> [0x00,0x82,0x03,0xd5,0x01,0x05,0x02,0x28]
    inst = decode(bytes([0x00, 0x82, 0x03, 0xd5, 0x01, 0x05, 0x02, 0x28]))
    assert (inst.op, inst.enc_suffix, inst.fmt, inst.opcode, inst.size) == ("v_add_f32", "_e64", "VOP3", 259, 8)
    dst, a, b = inst.operands
    assert inst.ndst == 1 and inst.dsts == (dst,)
    assert (dst.kind, dst.index, dst.name) == (I.VGPR, 0, "vdst")
    assert (a.kind, a.index, a.code) == (I.VGPR, 1, 257)
    assert inst.mods["neg"] == 1 and inst.mods["abs"] == 2 and inst.mods["clamp"] == 1 and inst.mods["omod"] == 1
    assert str(inst) == "v_add_f32_e64 v0, -v1, |v2| clamp mul:2"


def test_decode_constants_literals_and_branch_target():
    code = assemble("""
        s_mov_b64 s[2:3], -5
        v_add_f16 v1, 0.5, v2
        v_mul_f32 v3, 0x40490fdb, v4
        loop: s_cbranch_scc1 loop
        v_add_f64 v[0:1], 1.0, v[2:3]
    """)
    smov, vadd, vmul, br, vf64 = decode_all(code)
    assert smov.operands[0].count == 2 and smov.operands[1].kind == I.ICONST and smov.operands[1].value == -5
    assert vadd.operands[1].kind == I.FCONST and vadd.operands[1].value == 0x3800
    assert vmul.operands[1].kind == I.LITERAL and vmul.literal == 0x40490FDB and vmul.size == 8
    assert br.operands[0].kind == I.LABEL and br.target == br.offset
    assert vf64.operands[1].value == 0x3FF0000000000000


def test_decode_vopd_has_both_halves():
    inst = decode(assemble("v_dual_mul_f32 v0, v1, v2 :: v_dual_add_f32 v3, v4, v5"))
    assert inst.fmt == "VOPD" and inst.op == "v_dual_mul_f32" and inst.vopd_y.op == "v_dual_add_f32"
    assert [o.index for o in inst.vopd_y.operands] == [3, 4, 5]


def test_assemble_labels_comments_and_specials():
    code = assemble("""
    ; a comment
    start:                      // another
        s_and_saveexec_b32 s2, vcc_lo
        v_cmp_gt_i32 vcc_lo, s2, v0
        s_cbranch_execz start
        s_mov_b32 m0, exec_lo
        s_endpgm
    """)
    assert disassemble(code) == ["s_and_saveexec_b32 s2, vcc_lo", "v_cmp_gt_i32_e32 vcc_lo, s2, v0",
                                 "s_cbranch_execz 65533", "s_mov_b32 m0, exec_lo", "s_endpgm"]


@pytest.mark.parametrize("text, msg", [
    ("v_frobnicate v0, v1", "unknown instruction 'v_frobnicate'"),
    ("v_add_f32 v0, v1", "v_add_f32"),
    ("s_mov_b32 s0, v1", "s_mov_b32: operand 2 (ssrc0): a VGPR cannot be a scalar source"),
    ("global_load_b64 v0, v1, s[0:1]", "global_load_b64: operand 1 (vdst): expected 2 registers"),
    ("s_load_b64 s[1:2], s[0:1], 0", "not aligned"),
    ("v_add_f32 v0, v1, v2 bogus", "modifier 'bogus'"),
    ("s_waitcnt vmcnt(99)", "vmcnt(99) exceeds 63"),
    ("s_branch nowhere", "undefined label 'nowhere'"),
    ("v_add_f32 v0, 0x12345678, 0x87654321", "only one literal"),
    ("v_mov_b32 v0, v1 clamp", "v_mov_b32: does not take the clamp modifier"),
    ("v_fmamk_f32 v0, 0x1234, 0x5678, v1", "only one literal"),
    (".globl foo", "directive '.globl' is not supported"),
    ("s_movrels_b32 s0, 5", "s_movrels_b32: operand 2 (ssrc0): takes a register, not the constant '5'"),
    ("v_swap_b32 v1, s2", "v_swap_b32: operand 2 (src0): expected a VGPR, got 's2'"),
    ("v_add_f32_dpp v0, s1, v2 row_shl:1", "the DPP source (src0) must be a VGPR"),
    ("v_add_f64_dpp v[0:1], v[2:3], v[4:5] row_shl:1", "has no DPP16 form"),
    ("buffer_load_b32 v1, v2, s[4:7], s3 offset:4", "the address operand and idxen/offen disagree"),
    ("ds_swizzle_b32 v1, v2 offset:swizzle(SWAP,40)", "bad swizzle"),
    ("s_waitcnt_depctr depctr_va_vdst(16)", "exceeds 15"),
])
def test_assembler_errors_name_the_problem(text, msg):
    with pytest.raises(AsmError, match=None) as e:
        assemble(text)
    assert msg in str(e.value)
    assert isinstance(e.value, IsaError)


@pytest.mark.parametrize("code, msg", [
    (bytes.fromhex("ffffffff"), "not an instruction of a supported gfx11 format"),
    (bytes.fromhex("0012007e"), "VOP1 opcode 9"),              # VOP1 op 9 is unassigned
    (bytes.fromhex("01050006"[:6]), "truncated"),
    (bytes.fromhex("ff040206"), "missing literal"),             # v_add_f32 with src0=literal, no dword
])
def test_undecodable_bytes_raise(code, msg):
    with pytest.raises(DecodeError) as e:
        decode_all(code)
    assert msg in str(e.value)


def test_builder_encodes_like_the_assembler():
    p = Program()
    p.s_load_b64(s[2:3], s[0:1], 0x10)
    p.s_waitcnt(lgkmcnt=0)
    p.label("top")
    p.v_add_f32(v[0], -v[1], abs(s[2]), clamp=True)
    p.v_cmp_gt_i32(vcc_lo, s[2], v[0])
    p.global_store_b32(v[2], v[0], s[2:3], offset=16, glc=True)
    p.vopd(("v_dual_mul_f32", v[0], v[1], v[2]), ("v_dual_add_f32", v[3], 2.0, v[5]))
    p.s_mov_b32(null, exec_lo)
    p.v_add_f32(v[0], v[1], v[2], row_shl=1, bound_ctrl=True)
    p.v_mov_b32(v[3], v[4], dpp8=[7, 6, 5, 4, 3, 2, 1, 0])
    p.buffer_load_b32(v[1], v[2], s[4:7], s[3], offen=True, offset=4)
    p.s_cbranch_scc1("top")
    p.s_endpgm()
    text = """s_load_b64 s[2:3], s[0:1], 0x10
        s_waitcnt lgkmcnt(0)
        top: v_add_f32 v0, -v1, |s2| clamp
        v_cmp_gt_i32 vcc_lo, s2, v0
        global_store_b32 v2, v0, s[2:3] offset:16 glc
        v_dual_mul_f32 v0, v1, v2 :: v_dual_add_f32 v3, 2.0, v5
        s_mov_b32 null, exec_lo
        v_add_f32_dpp v0, v1, v2 row_shl:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
        v_mov_b32_dpp v3, v4 dpp8:[7,6,5,4,3,2,1,0]
        buffer_load_b32 v1, v2, s[4:7], s3 offen offset:4
        s_cbranch_scc1 top
        s_endpgm"""
    assert p.assemble() == assemble(text)
    assert p.assemble() == p.assemble()


@pytest.mark.parametrize("call, msg", [
    (lambda p: p.v_add_f32(s[0], v[1], v[2]), "v_add_f32: operand 1 (vdst): expected a VGPR, got 's0'"),
    (lambda p: p.v_add_f64(v[0:1], v[2], v[4:5]), "v_add_f64: operand 2 (src0): expected 2 registers"),
    (lambda p: p.global_load_b128(v[0:1], v[2:3], "off"), "global_load_b128: operand 1 (vdst): expected 4"),
    (lambda p: p.ds_load_b32(v[0], s[1]), "ds_load_b32: operand 2 (addr): expected a VGPR"),
    (lambda p: p.s_mov_b64(s[0:1], v[0:1]), "s_mov_b64: operand 2 (ssrc0): a VGPR cannot be a scalar source"),
    (lambda p: p.v_mov_b32(v[0], v[1], clamp=True), "v_mov_b32: does not take the clamp modifier"),
    (lambda p: p.v_mov_b32(v[0], v[1], glc=True), "v_mov_b32: modifier 'glc' does not apply"),
    (lambda p: p.v_fake_op(v[0]), "unknown instruction 'v_fake_op'"),
    (lambda p: v[250:260], "outside v0..v255"),
])
def test_builder_type_errors_name_the_instruction(call, msg):
    with pytest.raises(AsmError) as e:
        call(Program())
    assert msg in str(e.value)


def test_unsupported_arch_is_refused():
    with pytest.raises(ValueError, match="gfx90a"):
        assemble("s_endpgm", arch="gfx90a")
    assert disassemble(assemble("s_endpgm", arch="gfx1102"), arch="gfx1102") == ["s_endpgm"]
