"""The gfx11 corpus: every line assembles to the bytes llvm-mc-15 gives, disassembles to LLVM's text,
and reassembles to the same bytes; the corpus covers every opcode of the tables."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rdna3 import assemble, decode, disassemble
from rdna3 import instruction as I
from rdna3.disasm import mubuf_kind
from rdna3.encoding import NULL
from rdna3.opcodes_gfx11 import DPP_NAMES, OPCODES

CORPUS = Path(__file__).with_name("corpus_gfx11.txt")
LLVM_MC = shutil.which("llvm-mc-15")

# Where llvm-mc's assembler echo and its disassembler (and llvm-objdump) print the same bytes
# differently; our disassembler follows the disassembler, and these lines are checked by reassembly.
ECHO_DIFFERS = re.compile(r"^s_(buffer_)?load_\w+ .*, 0x0$|^s_atc_probe\w* .*, 0x0$|^s_(cbranch_\w+|branch|call_b64)"
                          r" .*-\d+$|"
                          r"^v_cmp\w* vcc_lo, vcc_lo, .*(quad_perm|row_|dpp8)")   # LLVM 15 echoes VOPC DPP's vcc twice
# LLVM prints the VOP3 forms of v_nop and v_pipeflush without _e64, so their text means the VOP1 form.
NO_ROUND_TRIP = {"v_nop", "v_pipeflush"}


def load():
    rows = []
    for line in CORPUS.read_text().splitlines():
        if line and not line.startswith("#"):
            text, canon, hexbytes = line.split("\t")
            rows.append((text, canon, bytes.fromhex(hexbytes)))
    return rows


ROWS = load()


def _report(bad, what):
    assert not bad, f"{len(bad)} corpus lines {what}, e.g.:\n" + "\n".join(map(str, bad[:15]))


def test_corpus_size_and_distinct():
    assert len(ROWS) >= 2000
    assert len({r[0] for r in ROWS}) == len(ROWS)
    assert len({r[2] for r in ROWS}) >= 2000


def test_assemble_matches_llvm_bytes():
    bad = []
    for text, _, want in ROWS:
        try:
            got = assemble(text)
        except Exception as e:  # noqa: BLE001 - reported below with the line
            got = f"{type(e).__name__}: {e}"
        if got != want:
            bad.append((text, want.hex(), got.hex() if isinstance(got, bytes) else got))
    _report(bad, "assemble differently from llvm-mc-15")


def test_disassemble_matches_llvm_text_and_reassembles():
    bad_text, bad_rt = [], []
    for _, canon, code in ROWS:
        lines = disassemble(code)
        assert len(lines) == 1, (canon, lines)
        if lines[0] != canon and not ECHO_DIFFERS.search(canon):
            bad_text.append((code.hex(), canon, lines[0]))
        if lines[0] not in NO_ROUND_TRIP and assemble(lines[0]) != code:
            bad_rt.append((code.hex(), lines[0]))
    _report(bad_text, "disassemble to other text than LLVM's")
    _report(bad_rt, "do not reassemble to their bytes")


def _kind(inst):
    f = inst.fields
    if inst.fmt == "MUBUF":
        kind = mubuf_kind(f)
        return kind if inst.opcode in OPCODES[kind] else "MUBUF"
    if inst.fmt in ("FLAT", "GLOBAL", "SCRATCH"):
        return (inst.fmt + ("_saddr" if f["saddr"] != NULL else "") + ("_sve" if f["sve"] else "")
                + ("_glc" if f["glc"] else ""))
    return "VOP3" if inst.fmt == "VOP3SD" else inst.fmt


def test_corpus_covers_every_opcode_and_operand_kind():
    seen, kinds, mods, dpp = set(), set(), set(), set()
    for _, canon, code in ROWS:
        inst = decode(code)
        if "dpp" in inst.fields:
            dpp.add((_kind(inst), inst.opcode, "dpp8" if "dpp8" in inst.mods else "dpp16"))
        if inst.fmt == "VOPD":
            seen |= {("VOPDX", inst.fields["opx"]), ("VOPDY", inst.fields["opy"])}
        else:
            seen.add((_kind(inst), inst.opcode))
        for o in inst.operands + (inst.vopd_y.operands if inst.vopd_y else ()):
            kinds.add(o.kind if o.kind != I.SPECIAL else o.reg)
            if o.kind in (I.SGPR, I.VGPR) and o.count > 1:
                kinds.add(o.kind + "_range")
        for k in ("clamp", "omod", "neg", "abs", "op_sel", "neg_hi", "glc", "slc", "dlc", "gds", "offset"):
            if inst.mods.get(k):
                mods.add(k)
    # LLVM 15 decodes two more opcodes as buffer_gl0_inv/buffer_gl1_inv than it assembles, and assembles
    # buffer_wbinvl1 to the opcode it decodes as buffer_gl0_inv: those have no corpus line.
    names = {}
    for k, ops in OPCODES.items():
        for op, e in ops.items():
            names.setdefault((k, e[0]), []).append(op)
    table = {(k, op) for k, ops in OPCODES.items() for op, e in ops.items()
             if len(names[(k, e[0])]) == 1 and e[0] != "buffer_wbinvl1"}
    dpp_table = {(k, op, form) for k, ops in DPP_NAMES.items() for op, forms in ops.items() for form in forms}
    # llvm-mc 15 decodes a few DPP forms its assembler refuses (v_fmac_f32_e64_dpp): the fuzz test has them
    assert len(dpp_table - dpp) <= 0.03 * len(dpp_table), f"DPP forms without a line: {sorted(dpp_table - dpp)}"
    assert table - seen == set(), f"opcodes without a corpus line: {sorted(table - seen)[:20]}"
    want_kinds = {I.SGPR, I.VGPR, I.TTMP, "sgpr_range", "vgpr_range", I.ICONST, I.FCONST, I.LITERAL, I.LABEL,
                  I.IMM, "vcc_lo", "vcc_hi", "vcc", "exec_lo", "exec_hi", "exec", "m0", "null", "off"}
    assert want_kinds - kinds == set()
    assert {"clamp", "omod", "neg", "abs", "op_sel", "neg_hi", "glc", "slc", "dlc", "gds", "offset"} <= mods


@pytest.mark.skipif(LLVM_MC is None, reason="llvm-mc-15 not installed (Debian llvm-15)")
@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1102"])
def test_corpus_bytes_are_llvm_mc_output(mcpu):
    """The expected bytes are LLVM's, not our own echo: re-run llvm-mc-15 over the corpus (one process).
    gfx1102 (Navi33) encodes every corpus line exactly as gfx1100 does."""
    texts = [r[0] for r in ROWS]
    r = subprocess.run([LLVM_MC, "-arch=amdgcn", f"-mcpu={mcpu}", "-show-encoding"],
                       input="\n".join(texts) + "\n", capture_output=True, text=True, timeout=120)
    assert "error" not in r.stderr, r.stderr[:2000]
    encs = [bytes(int(x, 16) for x in m.group(1).split(","))
            for m in re.finditer(r"; encoding: \[([^\]]*)\]", r.stdout)]
    assert len(encs) == len(ROWS)
    bad = [(t, e.hex(), w.hex()) for t, e, (_, _, w) in zip(texts, encs, ROWS) if e != w]
    _report(bad, "differ from what llvm-mc-15 gives now")


@pytest.mark.skipif(LLVM_MC is None, reason="llvm-mc-15 not installed (Debian llvm-15)")
def test_generated_files_are_fresh():
    """rdna3/opcodes_gfx11.py and the corpus are exactly what tools/gen_isa.py makes."""
    from tools import gen_isa
    tables, corpus = gen_isa.build()
    assert tables == gen_isa.OUT_TABLES.read_text(), "opcode tables are stale: run python -m tools.gen_isa"
    assert corpus == CORPUS.read_text(), "corpus is stale: run python -m tools.gen_isa"


def test_every_alias_has_corpus_lines_checked_against_llvm():
    """Each alias llvm-mc-15 accepts (found by tools/gen_isa.py's probes) has a corpus line, so it is held to
    llvm-mc's bytes above; the brief's example among them."""
    from rdna3.opcodes_gfx11 import ALIASES
    used = {text.split(" ", 1)[0] for text, _, _ in ROWS}
    assert len(ALIASES) > 150 and ALIASES["s_ff1_i32_b32"] == "s_ctz_i32_b32"
    assert ALIASES["ds_write2_b32"] == "ds_store_2addr_b32" and ALIASES["v_ffbh_u32"] == "v_clz_i32_u32"
    missing = [a for a in ALIASES if not any(u == a or u.startswith(a + "_") for u in used)]
    assert not missing, missing
    assert assemble("s_ff1_i32_b32 s1, s2") == assemble("s_ctz_i32_b32 s1, s2") == bytes.fromhex("020881be")
