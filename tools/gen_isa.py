"""Generator of rdna3/opcodes_gfx11.py and tests/rdna3/corpus_gfx11.txt from LLVM's own
assembler and disassembler (llvm-mc-15, the oracle named in docs/isa.md).

    python -m tools.gen_isa            # rewrite the opcode tables and the test corpus
    python -m tools.gen_isa --check    # exit 1 if the committed files differ from a fresh run

How it learns the tables: for every format and every opcode number it builds probe machine words
whose register fields hold distinct, recognisable registers (v20, v30, s32, ...), disassembles all
probes in one llvm-mc process, and reads the mnemonic and the operand list back; an operand is tied
to its field by the register number it prints, its width by the range it prints (v[10:11] is two
registers). A second round of probes puts an inline constant (1/(2*pi)), a literal, an SGPR and an
inline integer in each source field, and assembles the text "3.5" there, which tells 16-, 32- and
64-bit operands apart, integer 16-bit operands (which take no inline floats) from float ones, and
VGPR-only or register-only sources; it also sets each VOP3 modifier bit and MUBUF/SMEM cache bit
(which LLVM refuses for some opcodes), puts a DPP16/DPP8 word behind every VALU opcode (which of them
have DPP forms, and their names), and reads LLVM's hwreg/sendmsg names. The corpus round then writes
assembly lines from the tables and keeps llvm-mc's verdict, bytes and printed text; the VOP3/VOP3P
modifiers it accepts per opcode go back into the tables. docs/isa.md tells the whole story.
"""
from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rdna3.encoding import FORMATS, format_of, put_field  # noqa: E402

LLVM_MC = "llvm-mc-15"
OUT_TABLES = ROOT / "rdna3" / "opcodes_gfx11.py"
OUT_CORPUS = ROOT / "tests" / "rdna3" / "corpus_gfx11.txt"
MCPU = "gfx1100"

V = 256  # VGPR offset in 9-bit source fields

# Per format: opcode count, the probe value of each register field, and which fields may be left zero
# (the decoder rejects non-zero fields an opcode does not use).
PROBES = {
    "SOP2": (128, {"sdst": 8, "ssrc0": 32, "ssrc1": 64}, ()),
    "SOPK": (32, {"sdst": 8, "simm16": 0x1234}, ("sdst",)),
    "SOP1": (256, {"sdst": 8, "ssrc0": 32}, ("sdst", "ssrc0")),
    "SOPC": (128, {"ssrc0": 32, "ssrc1": 64}, ()),
    "SOPP": (128, {"simm16": 0x1234}, ("simm16",)),
    "SMEM": (256, {"sdata": 16, "sbase": 20, "offset": 0x40, "soffset": 0x7C}, ("sdata", "sbase", "offset")),
    "VOP1": (256, {"vdst": 10, "src0": V + 20}, ("vdst", "src0")),
    "VOP2": (64, {"vdst": 10, "src0": V + 20, "vsrc1": 30}, ()),
    "VOPC": (256, {"src0": V + 20, "vsrc1": 30}, ()),
    "VOP3": (1024, {"vdst": 10, "src0": V + 20, "src1": V + 30, "src2": V + 40}, ("src2", "src1", "src0", "vdst")),
    "VOP3P": (128, {"vdst": 10, "src0": V + 20, "src1": V + 30, "src2": V + 40, "op_sel_hi": 3, "op_sel_hi2": 1},
              ("src2", "src1")),
    "DS": (256, {"vdst": 10, "addr": 40, "data0": 20, "data1": 30, "offset0": 4, "offset1": 8},
           ("data1", "data0", "vdst", "addr", "offset0", "offset1")),
}
FLAT_PROBE = {"vdst": 10, "addr": 40, "data": 30, "offset": 0x10}
FLAT_ZERO = ("data", "vdst", "addr")
MUBUF_PROBE = {"vdata": 10, "vaddr": 40, "srsrc": 2, "soffset": 32, "offset": 0x10}
MUBUF_ZERO = ("vdata", "vaddr")
# VOPD: X ops probed with Y = v_dual_mov_b32 and Y ops with X = v_dual_mov_b32 (opx 8, opy 8).
VOPD_PROBE = {"vdstx": 10, "vdsty": 5, "srcx0": V + 20, "vsrcx1": 30, "srcy0": V + 21, "vsrcy1": 31}
VOPD_MOV = 8


def encode(fmt: str, fields: dict) -> bytes:
    size, (lo, width, value), layout = FORMATS[fmt]
    word = put_field(0, lo, width, value)
    for name, v in fields.items():
        flo, fwidth = layout[name]
        word = put_field(word, flo, fwidth, v, name)
    return word.to_bytes(size, "little")


def variants(base: dict, zeroable) -> list[dict]:
    """The probe with every subset of the zeroable fields cleared, fewest cleared first."""
    out = []
    for n in range(len(zeroable) + 1):
        for combo in itertools.combinations(zeroable, n):
            out.append({k: (0 if k in combo else v) for k, v in base.items()})
    return out


def hexline(data: bytes) -> str:
    return ",".join(f"0x{c:02x}" for c in data)


def mc_disassemble(blobs: list[bytes]) -> list[str | None]:
    """Disassembles each blob (see _mc_disassemble), in runs of at most 65,000 probes (marker numbers
    are 16 bits)."""
    out: list = []
    for i in range(0, len(blobs), 65000):
        out += _mc_disassemble(blobs[i:i + 65000])
    return out


def _mc_disassemble(blobs: list[bytes]) -> list[str | None]:
    """Disassembles each blob as the first instruction of its own line; None where LLVM rejects it.

    llvm-mc decodes all lines as one byte stream and, after a bad word, goes on 4 bytes later, so
    each probe is preceded by three copies of a marker `s_sethalt <probe number>`: the tail of a
    rejected probe can swallow at most two of them, and a survivor says where probe i starts.
    """
    marker = lambda i: (0xBF820000 | i).to_bytes(4, "little") * 3
    inp = "".join(hexline(marker(i)) + "\n" + hexline(b) + "\n" for i, b in enumerate(blobs))
    inp += hexline(marker(len(blobs))) + "\n"
    r = subprocess.run([LLVM_MC, "-arch=amdgcn", f"-mcpu={MCPU}", "--disassemble"],
                       input=inp, capture_output=True, text=True, check=False)
    bad = {int(m.group(1)) // 2 - 1 for m in re.finditer(r"^<stdin>:(\d+):1: warning", r.stderr, re.M)}
    first: dict[int, str] = {}
    cur = None
    for line in r.stdout.splitlines()[1:]:
        line = line.strip()
        m = re.fullmatch(r"s_sethalt (0x[0-9a-f]+|\d+)", line)
        if m:
            cur = int(m.group(1), 0)
        elif cur is not None and cur not in first:
            first[cur] = line
    return [None if i in bad else first.get(i) for i in range(len(blobs))]


def mc_assemble(lines: list[str], with_text: bool = False) -> list:
    """Assembles each line separately (one process); None where llvm-mc reports an error. With
    with_text, each accepted line gives (bytes, the text llvm-mc prints back)."""
    r = subprocess.run([LLVM_MC, "-arch=amdgcn", f"-mcpu={MCPU}", "-show-encoding"],
                       input="".join(s + "\n" for s in lines), capture_output=True, text=True, check=False)
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"^<stdin>:(\d+):\d+: error", r.stderr, re.M)}
    encs = [(bytes(int(x, 16) for x in m.group(2).split(",")), " ".join(m.group(1).split()))
            for m in re.finditer(r"^\s+(.*?)\s*; encoding: \[([^\]]*)\]", r.stdout, re.M)]
    it = iter(encs if with_text else [e[0] for e in encs])
    out = [None if i in bad else next(it) for i in range(len(lines))]
    if next(it, None) is not None:
        raise RuntimeError("llvm-mc output does not line up with its input")
    return out


# ---------------------------------------------------------------------------------------------
# Parsing LLVM's printed operands

def split_top(s: str, sep: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def split_text(text: str) -> tuple[str, list[str], list[str]]:
    """'v_x v1, v[2:3] offset:4 glc' -> ('v_x', ['v1', 'v[2:3]'], ['offset:4', 'glc'])."""
    mn, _, rest = text.partition(" ")
    ops = split_top(rest, ",")
    mods: list[str] = []
    if ops:
        last = split_top(ops[-1], " ")
        ops[-1] = last[0]
        mods = last[1:]
    return mn, ops, mods


REG_RE = re.compile(r"^([sv]|ttmp)(?:(\d+)|\[(\d+):(\d+)\])$")


def parse_reg(tok: str):
    m = REG_RE.match(tok.lstrip("-|").rstrip("|"))
    if not m:
        return None
    if m.group(2) is not None:
        return m.group(1), int(m.group(2)), 1
    lo, hi = int(m.group(3)), int(m.group(4))
    return m.group(1), lo, hi - lo + 1


REG_FIELDS = ("sdst", "ssrc0", "ssrc1", "sdata", "sbase", "vdst", "src0", "src1", "src2", "vsrc1", "addr",
              "data", "data0", "data1", "saddr", "vdstx", "vdsty", "srcx0", "srcy0", "vsrcx1", "vsrcy1",
              "vdata", "vaddr", "srsrc", "soffset")


def field_regs(fmt: str, fields: dict) -> dict:
    """(kind, first register) -> field name, for the register fields of a probe."""
    out = {}
    for name, v in fields.items():
        if name not in REG_FIELDS or v == 0:
            continue
        if name == "sbase":
            out[("s", 2 * v)] = name
        elif name == "srsrc":
            out[("s", 4 * v)] = name
        elif name == "soffset" and fmt == "SMEM":
            continue
        elif name == "vdsty":
            out[("v", (v << 1) | ((fields["vdstx"] & 1) ^ 1))] = name
        elif name.startswith("s") and not name.startswith("src"):
            out[("s", v)] = name
        elif v >= V:
            out[("v", v - V)] = name
        else:
            out[("v", v)] = name
            out[("s", v)] = name   # a VGPR field that holds an SGPR (v_readlane_b32's vdst, VOPC e64 sdst)
    return out


def discover() -> dict:
    """Round 1: fmt -> {opcode: (probe fields, text)} for every opcode LLVM decodes."""
    jobs = []  # (fmt, opcode, fields, probe format)
    for fmt, (count, base, zero) in PROBES.items():
        for op in range(count):
            for f in variants(base, zero):
                jobs.append((fmt, op, dict(f, op=op), fmt))
    for seg, name in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
        for saddr, sve in ((0x7C, 0), (32, 0), (0x7C, 1), (32, 1))[:1 if seg == 0 else 2 if seg == 2 else 4]:
            for glc in (0, 1):
                kind = name + ("_saddr" if saddr != 0x7C else "") + ("_sve" if sve else "") + ("_glc" if glc else "")
                for op in range(128):
                    for f in variants(dict(FLAT_PROBE, saddr=saddr, sve=sve, glc=glc), FLAT_ZERO):
                        jobs.append((kind, op, dict(f, op=op, seg=seg), "FLAT"))
    for idxen, offen, glc in itertools.product((0, 1), (0, 1), (0, 1)):
        kind = "MUBUF" + ("_idxen" if idxen else "") + ("_offen" if offen else "") + ("_glc" if glc else "")
        for op in range(256):
            for f in variants(MUBUF_PROBE, MUBUF_ZERO):
                jobs.append((kind, op, dict(f, op=op, idxen=idxen, offen=offen, glc=glc), "MUBUF"))
    for f in variants(VOPD_PROBE, ("vsrcx1", "vsrcy1")):
        for x in range(16):
            jobs.append(("VOPDX", x, dict(f, opx=x, opy=VOPD_MOV), "VOPD"))
        for y in range(32):
            jobs.append(("VOPDY", y, dict(f, opx=VOPD_MOV, opy=y), "VOPD"))
    blobs = [encode(pf, f) for _, _, f, pf in jobs]
    found: dict = {}
    for (fmt, op, f, pf), blob, text in zip(jobs, blobs, mc_disassemble(blobs)):
        if op in found.setdefault(fmt, {}) or text is None:
            continue
        if format_of(int.from_bytes(blob[:4], "little")) != pf:
            continue
        found[fmt][op] = (f, text, pf)
    return found


def cleared_fields(kind: str, fields: dict) -> tuple:
    """Fields a probe had to clear before LLVM decoded it: LLVM rejects the opcode with them non-zero."""
    if kind in PROBES:
        base, zero = PROBES[kind][1], PROBES[kind][2]
    elif kind.startswith(("FLAT", "GLOBAL", "SCRATCH")):
        base, zero = FLAT_PROBE, FLAT_ZERO
    elif kind.startswith("MUBUF"):
        base, zero = MUBUF_PROBE, MUBUF_ZERO
    else:
        return ()
    return tuple(sorted(k for k in zero if base[k] and fields[k] == 0))


SRC_FIELDS = ("src0", "src1", "src2", "ssrc0", "ssrc1", "srcx0", "srcy0")
LIT_PROBE = 0x12345678


def imm_spec(fmt: str, name: str, tok: str) -> list:
    """Spec of an operand printed as a number in a probe: which field it is and how it prints."""
    if fmt in ("SOPP", "SOPK") and tok.startswith("0xbf82"):
        return ["literal", "i", 1, "32"]        # s_setreg_imm32_b32's literal, taken from the marker
    if fmt in ("SOPP", "SOPK"):
        if name.startswith(("s_branch", "s_cbranch", "s_call")):
            return ["simm16", "label", 1, ""]
        return ["simm16", "imm", 1, "hex" if tok.startswith("0x") else "dec"]
    if fmt == "SMEM":
        return ["sdata", "imm", 1, "small"] if tok == "16" else ["offset", "imm", 1, "hex"]
    return ["literal", "i", 1, "32"]             # v_fmamk_f32 and friends


def spec_of(kind: str, fields: dict, text: str, pf: str):
    """(mnemonic, operand specs, modifier names) from a probe's text; VOPD gives X and Y halves."""
    halves = text.split(" :: ")
    out = []
    for half in halves:
        mn, ops, mods = split_text(half)
        regs = field_regs(pf, fields)
        specs = []
        for tok in ops:
            r = parse_reg(tok)
            if r and (r[0], r[1]) in regs:
                specs.append([regs[(r[0], r[1])], r[0], r[2], ""])
            elif re.fullmatch(r"0x[0-9a-f]+|-?\d+", tok):
                specs.append(imm_spec(pf, mn, tok))
            elif pf == "VOP3" and tok == "s0":
                specs.append(["sdst", "s", 1, ""])   # VOP3SD: the carry-out field, zero in the probe
            elif tok.startswith("sendmsg("):
                specs = None                          # s_sendmsg_rtn_*: message operand not modelled
                break
            elif tok.startswith("hwreg("):
                specs.append(["simm16", "hwreg", 1, ""])
            elif mn == "s_waitcnt":
                specs.append(["simm16", "waitcnt", 1, ""])
            elif mn == "s_delay_alu":
                specs.append(["simm16", "delay_alu", 1, ""])
            else:
                specs.append(["=" + tok, "fixed", 1, ""])
        if specs is None:
            return None
        if mn == "s_waitcnt":
            specs = [["simm16", "waitcnt", 1, ""]]
        if mn == "s_delay_alu":
            specs = [["simm16", "delay_alu", 1, ""]]
        mods = [m.split(":")[0] for m in mods]
        out.append((mn, specs, mods))
        if None in out:
            return None
    return out


MUST_BE_ZERO: dict = {}
DPP_NAMES: dict = {}
# DPP words of the probes: src0 = v20; quad_perm:[0,1,2,3] with all rows and banks; dpp8:[0,1,...,7]
DPP16_PROBE = (20 | 0xE4 << 8 | 0xFF << 24).to_bytes(4, "little")
DPP8_PROBE = (20 | sum(i << (8 + 3 * i) for i in range(8))).to_bytes(4, "little")


def build_tables() -> dict:
    """kind -> {opcode: (mnemonic, specs, mods)}, kinds being formats plus FLAT variants and VOPDX/Y."""
    found = discover()
    tables: dict = {}
    probes = []   # (kind, op, spec index, blob, which)
    for kind, ops in found.items():
        for op, (fields, text, pf) in ops.items():
            parsed = spec_of(kind, fields, text, pf)
            if parsed is None:
                continue
            if kind.startswith("MUBUF_") and not parsed[0][1]:
                continue      # operand-less (buffer_gl0_inv): one entry, under plain MUBUF
            mn, specs, mods = parsed[1] if kind == "VOPDY" else parsed[0]
            tables.setdefault(kind, {})[op] = (mn, specs, mods)
            zero = cleared_fields(kind, fields)
            if zero:
                MUST_BE_ZERO.setdefault(kind, {})[op] = zero
            has_lit = any(s[0] == "literal" for s in specs)
            for i, sp in enumerate(specs):
                if sp[0] in SRC_FIELDS:
                    probes.append((kind, op, i, encode(pf, dict(fields, **{sp[0]: 248})), "inv2pi"))
                    probes.append((kind, op, i, encode(pf, dict(fields, **{sp[0]: 20})), "sgpr"))
                    probes.append((kind, op, i, encode(pf, dict(fields, **{sp[0]: 129})), "one"))
                    # (an opcode with its own literal, v_fmamk_f32, shares it with the source)
                    blob = encode(pf, dict(fields, **{sp[0]: 255})) + LIT_PROBE.to_bytes(4, "little")
                    probes.append((kind, op, i, blob, "lit"))
    # VOP3 modifier bits: LLVM refuses some opcodes with them set, and ignores them on others.
    for op, (fields, text, pf) in found["VOP3"].items():
        if op not in tables["VOP3"]:
            continue
        sd = any(sp[0] == "sdst" for sp in tables["VOP3"][op][1])
        for bit in ("neg", "omod", "clamp") + (() if sd else ("abs",)):
            probes.append(("VOP3", op, 0, encode(pf, dict(fields, **{bit: 1})), "bit_" + bit))
    # MUBUF/SMEM cache and tfe bits: LLVM refuses dlc on buffer atomics and on s_dcache_inv, for two.
    for kind in [k for k in found if k.startswith("MUBUF") or k == "SMEM"]:
        for op, (fields, text, pf) in found[kind].items():
            if op in tables[kind] and (tables[kind][op][1] or kind == "SMEM"):
                for bit in (("glc", "dlc") if kind == "SMEM" else ("dlc", "slc", "tfe")):
                    probes.append((kind, op, 0, encode(pf, dict(fields, **{bit: 1})), "bit_" + bit))
    # DPP: which VALU opcodes LLVM decodes with src0 = DPP16 (250) or DPP8 (233), and the name it prints.
    for kind in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P"):
        for op, (fields, text, pf) in found[kind].items():
            if op not in tables[kind] or any(sp[0] == "literal" for sp in tables[kind][op][1]):
                continue
            if not any(sp[0] == "src0" for sp in tables[kind][op][1]):
                continue
            probes.append((kind, op, 0, encode(pf, dict(fields, src0=250)) + DPP16_PROBE, "dpp16"))
            probes.append((kind, op, 0, encode(pf, dict(fields, src0=233)) + DPP8_PROBE, "dpp8"))
    # SOPP/SOPK immediates: LLVM prints some in hex always, some in decimal, some in decimal up to 64.
    for kind in ("SOPP", "SOPK"):
        for op, (fields, text, pf) in found[kind].items():
            if op in tables[kind] and any(sp[1] == "imm" for sp in tables[kind][op][1]):
                probes.append((kind, op, 0, encode(pf, dict(fields, simm16=5)), "small"))
    texts = mc_disassemble([p[3] for p in probes])
    # "3.5" written in each source: the literal llvm-mc makes says how it reads float text.
    asm_jobs = []
    for kind, ops in tables.items():
        if kind in ("VOPDX", "VOPDY"):
            continue
        for op, (mn, specs, mods) in ops.items():
            base = [_default_operand(sp, mn) for sp in specs]
            for i, sp in enumerate(specs):
                if sp[0] in SRC_FIELDS and not any(x[0] == "literal" for x in specs):
                    line = mn + " " + ", ".join(base[:i] + ["3.5"] + base[i + 1:])
                    asm_jobs.append(((kind, op, i), line + (" glc" if kind.endswith("_glc") else "")))
    float_lits = {}
    for (key, _), enc in zip(asm_jobs, mc_assemble([j[1] for j in asm_jobs])):
        if enc is not None and len(enc) in (8, 12):
            float_lits[key] = int.from_bytes(enc[-4:], "little")
    seen: dict = {}
    for (kind, op, i, _, which), text in zip(probes, texts):
        if text is None:
            continue
        half = text.split(" :: ")[1 if kind == "VOPDY" else 0]
        _, ops, _ = split_text(half)
        if i < len(ops):
            seen.setdefault((kind, op, i), {})[which] = ops[i]
    for (kind, op, i, _, which), text in zip(probes, texts):
        # (LLVM 15 prints the VOP3 DPP forms of v_movrel*_b32 without their destination: left out)
        if which in ("dpp16", "dpp8") and text and ("quad_perm" in text or "dpp8:" in text) \
                and not text.split()[0].endswith(","):
            DPP_NAMES.setdefault(kind, {}).setdefault(op, {})[which] = text.split()[0]
        if which.startswith("bit_") and text is None:
            zero = MUST_BE_ZERO.setdefault(kind, {}).get(op, ())
            MUST_BE_ZERO[kind][op] = tuple(sorted(zero + (which[4:],)))
    for kind, ops in tables.items():
        for op, (mn, specs, mods) in ops.items():
            for i, sp in enumerate(specs):
                if sp[1] == "imm" and sp[3] == "hex" and seen.get((kind, op, i), {}).get("small") == "5":
                    sp[3] = "small"
                if sp[0] not in SRC_FIELDS:
                    continue
                got = seen.get((kind, op, i), {})
                if got.get("sgpr", "").lstrip("v[").startswith("20"):
                    sp[1] = "V"        # a VGPR-only source (v_swap_b32): LLVM reads the field's low 8 bits
                elif got.get("one", "").startswith("/*invalid"):
                    sp[1] = "R"        # a register-only source (s_movrels_b32, v_readfirstlane_b32)
                inv, lit = got.get("inv2pi", ""), got.get("lit", "")
                if inv == "0.15915494309189532" or sp[2] == 2:
                    sp[3] = "64"
                elif inv == "0x3118":
                    sp[3] = "i16"
                elif lit == "0x5678":
                    sp[3] = "f16"
                elif float_lits.get((kind, op, i)) == 0x4300:
                    sp[3] = "pk"       # 16-bit float halves, 32-bit literal (packed math)
                else:
                    sp[3] = "32"
    return tables


def symbolic_names() -> tuple[dict, dict]:
    """The hwreg and sendmsg names LLVM knows for gfx11, by id."""
    hw = [encode("SOPK", {"op": 17, "sdst": 3, "simm16": i | 31 << 11}) for i in range(64)]
    msg = [encode("SOPP", {"op": 54, "simm16": i}) for i in range(256)]
    texts = mc_disassemble(hw + msg)
    hwreg, sendmsg = {}, {}
    for i, t in enumerate(texts[:64]):
        m = t and re.search(r"hwreg\((HW_REG_\w+)\)", t)
        if m:
            hwreg[i] = m.group(1)
    for i, t in enumerate(texts[64:]):
        m = t and re.search(r"sendmsg\((MSG_\w+)\)", t)
        if m:
            sendmsg[i] = m.group(1)
    return hwreg, sendmsg


def render_tables(tables: dict) -> str:
    lines = ['"""GENERATED by tools/gen_isa.py from llvm-mc-15 (-mcpu=gfx1100); do not edit.',
             "",
             "OPCODES[kind][opcode] = (mnemonic as LLVM prints it, operand specs, modifier names); for",
             "VOP3/VOP3P the modifier names include those llvm-mc accepts: clamp, omod, neg, abs, op_sel.",
             "A spec is (field, class, registers, type): class s/v for register fields (as printed), V for a",
             "source that only takes VGPRs, R for a source that takes no constants,",
             "label/imm/hwreg/waitcnt/delay_alu for SOPP/SOPK/SMEM immediates, i for a literal, fixed for",
             "text printed as is (field '=text'); type is 32/64/f16/i16/pk for sources, the print style",
             "(hex/dec) for immediates. Kinds are the formats, FLAT/GLOBAL/SCRATCH by addressing mode",
             '(_saddr, _sve, _glc) and VOPDX/VOPDY for the two halves of VOPD."""', "", "OPCODES = {"]
    for kind in sorted(tables):
        lines.append(f"    {kind!r}: {{")
        for op in sorted(tables[kind]):
            mn, specs, mods = tables[kind][op]
            sp = tuple(tuple(x) for x in specs)
            lines.append(f"        {op}: ({mn!r}, {sp!r}, {tuple(mods)!r}),")
        lines.append("    },")
    lines.append("}")
    lines += ["", "# MUST_BE_ZERO[kind][opcode]: fields LLVM requires to be zero for that opcode", "MUST_BE_ZERO = {"]
    for kind in sorted(MUST_BE_ZERO):
        lines.append(f"    {kind!r}: {{" + ", ".join(f"{op}: {MUST_BE_ZERO[kind][op]!r}"
                                                  for op in sorted(MUST_BE_ZERO[kind])) + "},")
    lines.append("}")
    lines += ["", "# DPP_NAMES[kind][opcode]: the mnemonic LLVM prints for the dpp16/dpp8 forms an opcode has",
              "DPP_NAMES = {"]
    for kind in sorted(DPP_NAMES):
        lines.append(f"    {kind!r}: {{")
        for op in sorted(DPP_NAMES[kind]):
            lines.append(f"        {op}: {DPP_NAMES[kind][op]!r},")
        lines.append("    },")
    lines.append("}")
    hwreg, sendmsg = symbolic_names()
    lines += ["", "# hwreg(...) and sendmsg(...) names llvm-mc-15 prints for gfx1100, by id",
              f"HWREG = {hwreg!r}", f"SENDMSG = {sendmsg!r}"]
    lines += ["", "# ALIASES[name]: the table mnemonic of another name llvm-mc-15 assembles to the same bytes",
              "# (found by probing: tools/gen_isa.py ALIAS_RULES); suffixes (_e32, _e64, _dpp) carry over",
              "ALIASES = {"] + [f"    {a!r}: {c!r}," for a, c in sorted(ALIASES.items())] + ["}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The test corpus: assembly lines made from the tables, kept where llvm-mc accepts them, with the
# bytes llvm-mc gives and the text it prints back.

def _reg(prefix: str, base: int, count: int) -> str:
    if prefix == "s" and count > 1:
        base = (base + (1 if count == 2 else 3)) & ~(1 if count == 2 else 3)
    return f"{prefix}{base}" if count == 1 else f"{prefix}[{base}:{base + count - 1}]"


SRC_BASES = {"src0": 7, "src1": 12, "src2": 17, "ssrc0": 6, "ssrc1": 12, "srcx0": 20, "srcy0": 33}
VREG_BASES = {"vdst": 1, "vsrc1": 9, "addr": 3, "data": 6, "data0": 6, "data1": 9, "vdstx": 2, "vdsty": 5,
              "vsrcx1": 22, "vsrcy1": 35}
SREG_BASES = {"sdst": 2, "sdata": 4, "sbase": 8, "saddr": 10, "soffset": 3, "vdst": 20, "srsrc": 12}
VREG_BASES.update(vdata=6, vaddr=3)


def _src_choices(dtype: str, count: int, vgpr: bool) -> list[str]:
    out = []
    if vgpr:
        out.append(_reg("v", 40, count))
    out += [_reg("s", 24, count), "5", "-7", "64", "-16"]
    if dtype == "64":
        out += ["1.0", "-0.5", "0.15915494309189532", "0x40490000", "3.5", "vcc", "exec", "null"]
    elif dtype in ("f16", "i16", "pk"):
        out += ["1.0", "-4.0", "0.15915494", "0x1234", "3.5", "0x3c00"]
    else:
        out += ["1.0", "-2.0", "0.15915494", "0x12345678", "3.5", "-1.5e3", "0x3f800000", "m0"]
    if count == 1:
        out += ["vcc_lo", "exec_hi", "ttmp5", "null", "vcc_hi", "exec_lo"]
    return out


def _default_operand(sp, kind: str) -> str:
    field, cls, count, _ = sp
    if field.startswith("="):
        return field[1:]
    if field == "literal":
        return "0x4048f5c3" if "f16" not in kind else "0x4248"
    if cls == "label":
        return "12"
    if cls == "waitcnt":
        return "vmcnt(0) lgkmcnt(1)"
    if cls == "delay_alu":
        return "instid0(VALU_DEP_1) | instskip(NEXT) | instid1(SALU_CYCLE_1)"
    if cls == "hwreg":
        return "hwreg(HW_REG_MODE, 4, 8)"
    if cls == "imm":
        return "16" if field == "sdata" else "0x40" if field == "offset" else "3"
    if field in SRC_BASES:
        return _reg("v" if cls in ("v", "V", "R") else "s", SRC_BASES[field], count)
    if cls == "s":
        return _reg("s", SREG_BASES.get(field, 2), count)
    return _reg("v", VREG_BASES.get(field, 1), count)


MOD_CHOICES = {
    "VOP3": ["clamp", "mul:2", "mul:4", "div:2"],
    "DS1": ["offset:0", "offset:65535", "offset:4 gds"],
    "DS2": ["offset0:255 offset1:1", "offset1:7"],
    "FLAT": ["offset:4095", "glc", "slc", "dlc", "glc slc dlc"],
    "GLOBAL": ["offset:-4096", "offset:2047", "slc", "dlc", "slc dlc"],
    "SMEM": ["glc", "dlc", "glc dlc"],
    "MUBUF": ["offset:4095", "offset:1", "slc", "dlc", "tfe", "slc dlc tfe"],
}


def corpus_lines(tables: dict) -> tuple[list[str], dict]:
    """The corpus candidates, and for the lines that try a VOP3/VOP3P modifier, (kind, op, modifier)."""
    lines: list[str] = []
    probe_of: dict = {}
    for kind in sorted(tables):
        if kind in ("VOPDX", "VOPDY"):
            continue
        for op in sorted(tables[kind]):
            mn, specs, mods = tables[kind][op]
            base = [_default_operand(sp, mn) for sp in specs]

            def emit(ops, tail="", name=mn, tag=None):
                lines.append(name + (" " + ", ".join(ops) if ops else "") + (" " + tail if tail else ""))
                if tag:
                    probe_of.setdefault(lines[-1], (kind, op, tag))

            tail0 = ""
            if kind.startswith("MUBUF") and specs:
                tail0 = " ".join(w for w in ("idxen", "offen") if w in kind)
            if kind.endswith("_glc") and specs:
                tail0 = (tail0 + " glc").strip()
            emit(base, tail0)
            short = mn[:-4] if mn.endswith(("_e32", "_e64")) else None
            if short and mn.endswith("_e32"):
                emit(base, tail0, short)
            srcs = [i for i, sp in enumerate(specs) if sp[0] in SRC_FIELDS]
            for n, i in enumerate(srcs):
                sp = specs[i]
                choices = _src_choices(sp[3], sp[2], sp[0].startswith("src"))
                if sp[1] in ("R", "V"):
                    choices = [c for c in choices if not re.fullmatch(r"-?(0x[0-9a-f]+|[\d.e-]+)", c)]
                if n:
                    choices = choices[1:4] + choices[-5:-3]
                for c in choices:
                    emit(base[:i] + [c] + base[i + 1:], tail0)
            fmt = kind.split("_")[0]
            if kind in ("VOP3", "VOP3P"):
                vsrcs = [i for i, sp in enumerate(specs) if sp[0] in ("src0", "src1", "src2")]
                scal = [("s" + o[1:] if i in vsrcs and o.startswith("v") else o) for i, o in enumerate(base)]
                emit(scal)                                             # v_writelane_b32 takes SGPRs
                emit(base[:vsrcs[0] + 1] + scal[vsrcs[0] + 1:] if vsrcs else scal)   # v_permlane16_b32
                if kind == "VOP3":
                    for t in MOD_CHOICES["VOP3"]:
                        emit(base, t, tag="clamp" if t == "clamp" else "omod")
                    for i in vsrcs:
                        for pre in (("-", "|", "-|") if "sdst" not in [x[0] for x in specs] else ("-",)):
                            o = base[i]
                            emit(base[:i] + [pre + o + ("|" if "|" in pre else "")] + base[i + 1:],
                                 tag={"-": "neg", "|": "abs", "-|": None}[pre])
                    if vsrcs:
                        emit(base, "op_sel:[" + ",".join("1" if j % 2 == 0 else "0" for j in range(len(vsrcs) + 1)) + "]",
                             tag="op_sel")
                        emit(base, "op_sel:[" + ",".join("0" for _ in vsrcs) + ",1]", tag="op_sel")
                    if short:
                        i = vsrcs[0] if vsrcs else None
                        if i is not None:
                            emit(base[:i] + ["-" + base[i]] + base[i + 1:], "", short)
                else:
                    k = len(vsrcs)
                    # LLVM 15 accepts neg_lo/neg_hi on integer and bf16 packed ops but drops bits
                    floaty = "f16" in mn and "bf16" not in mn
                    for t in ("op_sel:[%s]" % ",".join("1" for _ in range(k)),
                              "op_sel_hi:[%s]" % ",".join("0" for _ in range(k)),
                              "neg_lo:[%s]" % ",".join(str(j % 2) for j in range(1, k + 1)),
                              "neg_hi:[%s]" % ",".join("1" for _ in range(k)), "clamp"):
                        if floaty or not t.startswith("neg"):
                            emit(base, t, tag="neg" if t.startswith("neg") else t.split(":")[0].replace("_hi", ""))
            elif fmt == "DS":
                for t in MOD_CHOICES["DS2" if "offset0" in mods else "DS1"]:
                    emit(base, t)
            elif fmt in ("FLAT", "GLOBAL", "SCRATCH"):
                for t in MOD_CHOICES["FLAT" if fmt == "FLAT" else "GLOBAL"]:
                    emit(base, (tail0 + " " + t).strip() if "glc" not in t or not tail0 else t)
            elif fmt == "MUBUF" and specs and kind in ("MUBUF", "MUBUF_glc"):
                for t in MOD_CHOICES["MUBUF"]:
                    if "dlc" in t and "atomic" in mn:
                        continue      # LLVM 15 drops dlc from buffer atomics without a word
                    emit(base, (tail0 + " " + t).strip())
                i = [sp[0] for sp in specs].index("soffset")
                for so in ("5", "null", "m0", "-1"):
                    emit(base[:i] + [so] + base[i + 1:], tail0)
            elif fmt == "SMEM" and specs and specs[-1][0] == "offset":
                for last in ("0x0", "null", "s5", "m0", "-0x10", "0xfffff"):
                    emit(base[:-1] + [last])
                emit(base[:-1] + ["s5"], "offset:0x100")
                for t in MOD_CHOICES["SMEM"]:
                    emit(base, t)
            elif fmt in ("SOPP", "SOPK"):
                for i, sp in enumerate(specs):
                    if sp[1] == "imm":
                        for v in ("0", "1", "64", "65", "0x7fff", "0xffff"):
                            emit(base[:i] + [v] + base[i + 1:])
                    elif sp[1] == "label":
                        for v in ("0", "-1", "0x7fff", "-32768"):
                            emit(base[:i] + [v] + base[i + 1:])
    lines += _dpp_lines(tables)
    lines += _special_lines(tables)
    seen, out = set(), []
    for ln in lines:
        if ln.startswith("buffer_wbinvl1"):
            continue   # llvm-mc 15 assembles it to the opcode its disassembler calls buffer_gl0_inv
        if ln not in seen:
            seen.add(ln)
            out.append(ln)
    return out, probe_of


DPP16_CHOICES = ["quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf", "row_shl:1 row_mask:0xa bank_mask:0x5 bound_ctrl:1 fi:1",
                 "row_shr:15", "row_ror:3", "row_mirror", "row_half_mirror", "row_share:5", "row_xmask:7"]
DPP8_CHOICES = ["dpp8:[7,6,5,4,3,2,1,0]", "dpp8:[0,0,1,1,2,2,3,3] fi:1"]


def _dpp_lines(tables: dict) -> list[str]:
    """Every opcode's DPP16 and DPP8 forms; the full set of controls on the first opcode of a kind."""
    out = []
    for kind in sorted(DPP_NAMES):
        for n, op in enumerate(sorted(DPP_NAMES[kind])):
            mn, specs, mods = tables[kind][op]
            ops = [_default_operand(sp, mn) for sp in specs]
            for form, choices in (("dpp16", DPP16_CHOICES), ("dpp8", DPP8_CHOICES)):
                if form not in DPP_NAMES[kind][op]:
                    continue
                name = DPP_NAMES[kind][op][form]
                last = max(i for i, sp in enumerate(specs) if sp[0] in ("src0", "src1", "src2"))
                scal = [("s" + o[1:] if i == last and i and o.startswith("v") else o) for i, o in enumerate(ops)]
                for t in (choices if n == 0 else choices[:1]):
                    out.append(f"{name} {', '.join(ops)} {t}")
                    out.append(f"{name} {', '.join(scal)} {t}")      # v_cndmask_b32_e64_dpp
            if n == 0 and kind in ("VOP1", "VOP2") and "dpp16" in DPP_NAMES[kind][op]:
                i = [sp[0] for sp in specs].index("src0")
                neg = ops[:i] + ["-|" + ops[i] + "|"] + ops[i + 1:]
                out.append(f"{DPP_NAMES[kind][op]['dpp16']} {', '.join(neg)} {DPP16_CHOICES[0]}")
    return out


def _special_lines(tables: dict) -> list[str]:
    out = []
    for w in ("vmcnt(0)", "expcnt(0)", "lgkmcnt(0)", "vmcnt(1) expcnt(2) lgkmcnt(3)", "vmcnt(63)",
              "vmcnt(0) & lgkmcnt(0)", "vmcnt(5), lgkmcnt(7)", "0", "0xfff7"):
        out.append(f"s_waitcnt {w}")
    ids = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1",
           "SALU_CYCLE_1", "SALU_CYCLE_3"]
    for a in ids:
        out.append(f"s_delay_alu instid0({a})")
        for skip in ("SAME", "NEXT", "SKIP_1", "SKIP_4"):
            out.append(f"s_delay_alu instid0({a}) | instskip({skip}) | instid1(VALU_DEP_2)")
    for name in ("HW_REG_MODE", "HW_REG_STATUS", "HW_REG_TRAPSTS", "HW_REG_HW_ID1", "HW_REG_HW_ID2",
                 "HW_REG_GPR_ALLOC", "HW_REG_LDS_ALLOC", "HW_REG_IB_STS", "HW_REG_SH_MEM_BASES",
                 "HW_REG_FLAT_SCR_LO", "HW_REG_FLAT_SCR_HI", "HW_REG_POPS_PACKER", "HW_REG_SHADER_CYCLES"):
        out.append(f"s_getreg_b32 s3, hwreg({name})")
        out.append(f"s_setreg_b32 hwreg({name}, 1, 7), s4")
    for msg in ("MSG_INTERRUPT", "MSG_DEALLOC_VGPRS", "MSG_GS_ALLOC_REQ", "MSG_HALT_WAVES",
                "MSG_ORDERED_PS_DONE", "MSG_STALL_WAVE_GEN", "MSG_HS_TESSFACTOR"):
        out.append(f"s_sendmsg sendmsg({msg})")
        out.append(f"s_sendmsghalt sendmsg({msg})")
    out += ["s_endpgm", "v_nop_e64", "v_pipeflush_e64"]
    for dc in ("depctr_va_vdst(0)", "depctr_va_vdst(0) depctr_vm_vsrc(3)", "depctr_sa_sdst(0)",
               "depctr_hold_cnt(0) depctr_va_sdst(2) depctr_va_ssrc(0) depctr_va_vcc(0)", "0xfff", "0xff9f"):
        out.append(f"s_waitcnt_depctr {dc}")
    for sw in ("QUAD_PERM,0,1,2,3", "QUAD_PERM,3,2,1,0", "SWAP,1", "SWAP,16", "REVERSE,4", "REVERSE,32",
               "BROADCAST,2,1", "BROADCAST,16,2", 'BITMASK_PERM,"00p00"', 'BITMASK_PERM,"pi01p"'):
        out.append(f"ds_swizzle_b32 v1, v3 offset:swizzle({sw})")
    xs = sorted({e[0] for e in tables["VOPDX"].values()})
    ys = sorted({e[0] for e in tables["VOPDY"].values()})
    xspecs = {e[0]: e[1] for e in tables["VOPDX"].values()}
    yspecs = {e[0]: e[1] for e in tables["VOPDY"].values()}
    for x in xs:
        for y in ys:
            xo = [_default_operand(sp, x) for sp in xspecs[x]]
            yo = [_default_operand(sp, y) for sp in yspecs[y]]
            out.append(f"{x} {', '.join(xo)} :: {y} {', '.join(yo)}")
        xo = [_default_operand(sp, x) for sp in xspecs[x]]
        for src in ("s3", "1.0", "0x12345678", "-3"):
            if src.startswith("0x") and any(sp[0] == "literal" for sp in xspecs[x]):
                continue   # LLVM 15 silently keeps only one of two different literals here
            xo2 = list(xo)
            xo2[1] = src
            out.append(f"{x} {', '.join(xo2)} :: v_dual_mov_b32 v7, v41")
    return out


# ---------------------------------------------------------------------------------------------
# Aliases: other names llvm-mc-15 accepts for a gfx11 instruction (mostly the gfx9/gfx10 names of the
# instructions gfx11 renamed). LLVM's AMDGPU .td files are not at hand, so candidate names are made
# from each table mnemonic by the renaming rules below (each rule undoes one gfx11 renaming, applied
# up to three at a time), and a candidate is an alias when llvm-mc assembles the canonical corpus
# line written with it to the same bytes.

ALIAS_RULES = [
    # memory widths and types: gfx10 dword/byte/short names
    (r"_b32$", "_dword"), (r"_b64$", "_dwordx2"), (r"_b96$", "_dwordx3"), (r"_b128$", "_dwordx4"),
    (r"_b256$", "_dwordx8"), (r"_b512$", "_dwordx16"), (r"load_u8$", "load_ubyte"), (r"load_i8$", "load_sbyte"),
    (r"load_u16$", "load_ushort"), (r"load_i16$", "load_sshort"), (r"store_b8$", "store_byte"),
    (r"store_b16$", "store_short"), (r"load_d16_u8$", "load_ubyte_d16"), (r"load_d16_i8$", "load_sbyte_d16"),
    (r"load_d16_hi_u8$", "load_ubyte_d16_hi"), (r"load_d16_hi_i8$", "load_sbyte_d16_hi"),
    (r"load_d16_b16$", "load_short_d16"), (r"load_d16_hi_b16$", "load_short_d16_hi"),
    (r"store_d16_hi_b8$", "store_byte_d16_hi"), (r"store_d16_hi_b16$", "store_short_d16_hi"),
    # LDS: read/write, read2/write2
    (r"^ds_load_", "ds_read_"), (r"^ds_store_", "ds_write_"), (r"^ds_load_2addr_stride64_", "ds_read2st64_"),
    (r"^ds_load_2addr_", "ds_read2_"), (r"^ds_store_2addr_stride64_", "ds_write2st64_"),
    (r"^ds_store_2addr_", "ds_write2_"), (r"^ds_storexchg_2addr_stride64_", "ds_wrxchg2st64_"),
    (r"^ds_storexchg_2addr_", "ds_wrxchg2_"), (r"^ds_storexchg_", "ds_wrxchg_"), (r"^ds_cmpstore_", "ds_cmpst_"),
    # atomics: untyped gfx10 names
    (r"atomic_(add|sub|inc|dec)_u32$", r"atomic_\1"), (r"atomic_(and|or|xor|swap|cmpswap)_b32$", r"atomic_\1"),
    (r"atomic_min_i32$", "atomic_smin"), (r"atomic_max_i32$", "atomic_smax"), (r"atomic_min_u32$", "atomic_umin"),
    (r"atomic_max_u32$", "atomic_umax"), (r"atomic_(add|sub|inc|dec)_u64$", r"atomic_\1_x2"),
    (r"atomic_(and|or|xor|swap|cmpswap)_b64$", r"atomic_\1_x2"), (r"atomic_min_i64$", "atomic_smin_x2"),
    (r"atomic_max_i64$", "atomic_smax_x2"), (r"atomic_min_u64$", "atomic_umin_x2"),
    (r"atomic_max_u64$", "atomic_umax_x2"), (r"atomic_cmpswap_f32$", "atomic_fcmpswap"),
    (r"atomic_min_f32$", "atomic_fmin"), (r"atomic_max_f32$", "atomic_fmax"),
    (r"atomic_cmpswap_f64$", "atomic_fcmpswap_x2"), (r"atomic_min_f64$", "atomic_fmin_x2"),
    (r"atomic_max_f64$", "atomic_fmax_x2"), (r"atomic_csub_u32$", "atomic_csub"),
    # scalar ALU renames
    (r"^s_ctz_i32_b32$", "s_ff1_i32_b32"), (r"^s_ctz_i32_b64$", "s_ff1_i32_b64"),
    (r"^s_clz_i32_u32$", "s_flbit_i32_b32"), (r"^s_clz_i32_u64$", "s_flbit_i32_b64"),
    (r"^s_cls_i32$", "s_flbit_i32"), (r"^s_cls_i32_i64$", "s_flbit_i32_i64"), (r"_and_not1_", "_andn2_"),
    (r"_or_not1_", "_orn2_"), (r"_and_not0_", "_andn1_"), (r"_or_not0_", "_orn1_"),
    (r"^s_set_inst_prefetch_distance$", "s_inst_prefetch"),
    # vector ALU renames
    (r"^v_clz_i32_u32$", "v_ffbh_u32"), (r"^v_ctz_i32_b32$", "v_ffbl_b32"), (r"^v_cls_i32$", "v_ffbh_i32"),
    (r"^v_cvt_floor_i32_f32$", "v_cvt_flr_i32_f32"), (r"^v_cvt_nearest_i32_f32$", "v_cvt_rpi_i32_f32"),
    (r"^v_cvt_pk_rtz_f16_f32$", "v_cvt_pkrtz_f16_f32"), (r"_dx9_zero_", "_legacy_"),
    (r"_nc_u32$", "_u32"), (r"_nc_i32$", "_i32"), (r"_nc_u16$", "_u16"), (r"_nc_i16$", "_i16"),
    (r"^v_add_co_ci_u32$", "v_addc_co_u32"), (r"^v_sub_co_ci_u32$", "v_subb_co_u32"),
    (r"^v_subrev_co_ci_u32$", "v_subbrev_co_u32"), (r"^v_add_co_ci_u32$", "v_addc_u32"),
    (r"^v_sub_co_ci_u32$", "v_subb_u32"), (r"^v_subrev_co_ci_u32$", "v_subbrev_u32"),
    (r"^v_add_co_u32$", "v_add_u32"), (r"^v_sub_co_u32$", "v_sub_u32"), (r"^v_subrev_co_u32$", "v_subrev_u32"),
    (r"^v_mul_lo_u32$", "v_mul_lo_i32"), (r"^v_cmp(x?)_t_", r"v_cmp\1_tru_"),
    (r"^v_(dot2|dot4|dot8)_", r"v_\1c_"),
]
ALIASES: dict[str, str] = {}        # filled by build_corpus, written by render_tables


def alias_candidates(mn: str, names: set) -> set[str]:
    out, frontier = set(), {mn}
    for _ in range(3):
        nxt = set()
        for m in frontier:
            for pat, rep in ALIAS_RULES:
                c = re.sub(pat, rep, m)
                if c != m and c not in names and c not in out:
                    nxt.add(c)
        out |= nxt
        frontier = nxt
    return out


def find_aliases(lines: list[str], results: list) -> list[tuple[str, str, bytes]]:
    """Corpus rows (alias line, llvm-mc's text, bytes) for every alias found, one per alias and canonical
    line form (suffix); ALIASES gets {alias: canonical mnemonic}."""
    names = set()
    first: dict = {}
    for ln, r in zip(lines, results):
        mn, _, rest = ln.partition(" ")
        base = re.sub(r"_(e32|e64|dpp)$", "", mn)
        names.add(base)
        if r is not None:
            first.setdefault((base, mn[len(base):]), (rest, r))
    probes, meta = [], []
    for (base, suffix), (rest, r) in sorted(first.items()):
        for cand in sorted(alias_candidates(base, names)):
            probes.append(f"{cand}{suffix} {rest}".rstrip())
            meta.append((cand, base, r))
    got = mc_assemble(probes, with_text=True)
    rows = []
    ALIASES.clear()
    for line, (cand, base, (want, text)), g in zip(probes, meta, got):
        if g is None or g[0] != want:
            continue
        if ALIASES.setdefault(cand, base) != base:
            raise RuntimeError(f"{cand} assembles as both {ALIASES[cand]} and {base}")
        rows.append((line, g[1], g[0]))
    return rows


def build_corpus(tables: dict) -> str:
    lines, probe_of = corpus_lines(tables)
    results = mc_assemble(lines, with_text=True)
    encs = [r[0] if r else None for r in results]
    # The VOP3/VOP3P modifiers llvm-mc accepted for an opcode are the ones the assembler allows.
    allowed: dict = {}
    for ln, enc in zip(lines, encs):
        if enc is not None and ln in probe_of:
            kind, op, tag = probe_of[ln]
            allowed.setdefault((kind, op), set()).add(tag)
    for kind in ("VOP3", "VOP3P"):
        for op, (mn, specs, mods) in tables[kind].items():
            tables[kind][op] = (mn, specs, list(mods) + sorted(allowed.get((kind, op), ())))
    canon = [r[1] if r else None for r in results]
    rows = ["# GENERATED by tools/gen_isa.py: gfx1100 assembly accepted by llvm-mc-15, the text it prints",
            "# back, and its encoding. Columns are tab-separated: input, llvm-mc's text, hex bytes."]
    for ln, enc, c in zip(lines, encs, canon):
        if enc is not None:
            rows.append(f"{ln}\t{c}\t{enc.hex()}")
    rows.append("# aliases: other names llvm-mc-15 accepts (tools/gen_isa.py ALIAS_RULES), on the line of their instruction")
    for ln, c, enc in find_aliases(lines, results):
        rows.append(f"{ln}\t{c}\t{enc.hex()}")
    return "\n".join(rows) + "\n"


def build() -> tuple[str, str]:
    tables = build_tables()
    corpus = build_corpus(tables)     # also records the modifiers each VOP3/VOP3P opcode takes
    return render_tables(tables), corpus


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args(argv)
    tables, corpus = build()
    texts = {OUT_TABLES: tables, OUT_CORPUS: corpus}
    if args.check:
        stale = [str(p) for p, t in texts.items() if not p.exists() or p.read_text() != t]
        if stale:
            print("gen_isa: stale:", ", ".join(stale))
            return 1
        return 0
    for p, t in texts.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(t)
        print(f"gen_isa: wrote {p.relative_to(ROOT)} ({len(t) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
