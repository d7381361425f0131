"""Generator of amdrv/isa/opcodes_gfx11.py and tests/amdrv/isa/corpus_gfx11.txt from LLVM's own
assembler and disassembler (llvm-mc-15, the oracle named in docs/isa.md).

    python -m tools.gen_isa            # rewrite the opcode tables and the test corpus
    python -m tools.gen_isa --check    # exit 1 if the committed files differ from a fresh run

How it learns the tables: for every format and every opcode number it builds probe machine words
whose register fields hold distinct, recognisable registers (v20, v30, s32, ...), disassembles all
probes in one llvm-mc process, and reads the mnemonic and the operand list back; an operand is tied
to its field by the register number it prints, its width by the range it prints (v[10:11] is two
registers). A second round of probes puts an inline constant (1/(2*pi)) and a literal in each
source field, and assembles the text "3.5" there, which tells 16-, 32- and 64-bit operands apart,
and integer 16-bit operands (which take no inline floats) from float ones.
"""
from __future__ import annotations

import argparse
import itertools
import re
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amdrv.isa.encoding import FORMATS, format_of, put_field  # noqa: E402

LLVM_MC = "llvm-mc-15"
OUT_TABLES = ROOT / "amdrv" / "isa" / "opcodes_gfx11.py"
OUT_CORPUS = ROOT / "tests" / "amdrv" / "isa" / "corpus_gfx11.txt"
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


def mc_assemble(lines: list[str]) -> list[bytes | None]:
    """Assembles each line separately (one process); None where llvm-mc reports an error."""
    r = subprocess.run([LLVM_MC, "-arch=amdgcn", f"-mcpu={MCPU}", "-show-encoding"],
                       input="".join(s + "\n" for s in lines), capture_output=True, text=True, check=False)
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"^<stdin>:(\d+):\d+: error", r.stderr, re.M)}
    encs = [bytes(int(x, 16) for x in m.group(1).split(","))
            for m in re.finditer(r"; encoding: \[([^\]]*)\]", r.stdout)]
    it = iter(encs)
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
              "data", "data0", "data1", "saddr", "vdstx", "vdsty", "srcx0", "srcy0", "vsrcx1", "vsrcy1")


def field_regs(fmt: str, fields: dict) -> dict:
    """(kind, first register) -> field name, for the register fields of a probe."""
    out = {}
    for name, v in fields.items():
        if name not in REG_FIELDS or v == 0:
            continue
        if name == "sbase":
            out[("s", 2 * v)] = name
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


def operand_specs(fmt: str, fields: dict, ops: list[str]) -> list | None:
    regs = field_regs(fmt, fields)
    specs = []
    for tok in ops:
        r = parse_reg(tok)
        if r and (r[0], r[1]) in regs:
            specs.append([regs[(r[0], r[1])], r[0], r[2]])
        elif re.fullmatch(r"0x[0-9a-f]+|-?\d+", tok):
            specs.append(["literal" if tok.startswith("0x") and fmt.startswith(("VOP", "SOP2", "SOP1")) else "imm",
                          "i", 1])
        else:
            specs.append(["=" + tok, "", 1])
    return specs


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
        return ["sdata", "imm", 1, "dec"] if tok == "16" else ["offset", "imm", 1, "hex"]
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
            mn, specs, mods = parsed[1] if kind == "VOPDY" else parsed[0]
            tables.setdefault(kind, {})[op] = (mn, specs, mods)
            has_lit = any(s[0] == "literal" for s in specs)
            for i, sp in enumerate(specs):
                if sp[0] in SRC_FIELDS:
                    probes.append((kind, op, i, encode(pf, dict(fields, **{sp[0]: 248})), "inv2pi"))
                    if not has_lit:
                        blob = encode(pf, dict(fields, **{sp[0]: 255})) + LIT_PROBE.to_bytes(4, "little")
                        probes.append((kind, op, i, blob, "lit"))
    # SOPP/SOPK immediates: LLVM prints some in hex always, some in decimal, some in decimal up to 64.
    for kind in ("SOPP", "SOPK"):
        for op, (fields, text, pf) in found[kind].items():
            if op in tables[kind] and any(sp[1] == "imm" for sp in tables[kind][op][1]):
                probes.append((kind, op, 0, encode(pf, dict(fields, simm16=5)), "small"))
    texts = mc_disassemble([p[3] for p in probes])
    seen: dict = {}
    for (kind, op, i, _, which), text in zip(probes, texts):
        if text is None:
            continue
        half = text.split(" :: ")[1 if kind == "VOPDY" else 0]
        _, ops, _ = split_text(half)
        if i < len(ops):
            seen.setdefault((kind, op, i), {})[which] = ops[i]
    for kind, ops in tables.items():
        for op, (mn, specs, mods) in ops.items():
            for i, sp in enumerate(specs):
                if sp[1] == "imm" and sp[3] == "hex" and seen.get((kind, op, i), {}).get("small") == "5":
                    sp[3] = "small"
                if sp[0] not in SRC_FIELDS:
                    continue
                got = seen.get((kind, op, i), {})
                inv, lit = got.get("inv2pi", ""), got.get("lit", "")
                if inv == "0.15915494309189532" or sp[2] == 2:
                    sp[3] = "64"
                elif inv == "0x3118":
                    sp[3] = "i16"
                elif lit == "0x5678":
                    sp[3] = "f16"
                elif kind == "VOP3P" and "f16" in mn and (sp[0] != "src2" or mn.startswith("v_pk_")):
                    sp[3] = "pk"
                else:
                    sp[3] = "32"
    return tables


def render_tables(tables: dict) -> str:
    lines = ['"""GENERATED by tools/gen_isa.py from llvm-mc-15 (-mcpu=gfx1100); do not edit.',
             "",
             "OPCODES[kind][opcode] = (mnemonic as LLVM prints it, operand specs, modifier names).",
             "A spec is (field, class, registers, type): class s/v for register fields (as printed),",
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
    return "\n".join(lines) + "\n"


def build() -> tuple[str, str]:
    tables = build_tables()
    return render_tables(tables), ""


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
