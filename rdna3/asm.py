"""Assembler for gfx11 in LLVM's syntax: one instruction a line, `label:` lines, `;` and `//` comments.

    assemble(text, arch="gfx1100") -> bytes

Operand text is parsed into `Arg`s (registers, numbers, labels, symbolic immediates) and matched
against the operand specs of every table entry with that mnemonic; like llvm-mc, an unsuffixed VOP1,
VOP2 or VOPC mnemonic takes the 32-bit encoding when its operands allow and the VOP3 one otherwise.
The builder (rdna3/builder.py) feeds the same `encode_args` with typed Args.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, replace

from rdna3.disasm import ARCHS, DELAY_INSTID, DELAY_SKIP, HWREG_NAMES, SENDMSG_NAMES, SRC_FIELDS
from rdna3.encoding import (DEPCTR_FIELDS, EXEC_LO, FLOAT_CODES, FORMATS, INV_2PI_BITS, LITERAL, NULL, SPECIAL_SRC, TTMP_BASE,
                                VGPR_BASE, put_field)
from rdna3.errors import AsmError
from rdna3.opcodes_gfx11 import ALIASES, DPP_NAMES, OPCODES

SCALAR_NAMES = {"vcc_lo": (106, 1), "vcc_hi": (107, 1), "vcc": (106, 2), "exec_lo": (126, 1),
                "exec_hi": (127, 1), "exec": (126, 2), "m0": (125, 1), "null": (NULL, 0)}
SCALAR_NAMES.update({n: (c, 1) for c, n in SPECIAL_SRC.items()})
SCALAR_NAMES["scc"] = (253, 1)
WAITCNT_FIELDS = {"vmcnt": (10, 63), "expcnt": (0, 7), "lgkmcnt": (4, 63)}
FLAT_KINDS = ("FLAT", "GLOBAL", "SCRATCH")


@dataclass(frozen=True)
class Arg:
    """A parsed operand: kind is s/v/ttmp/special (registers), int, float, label, sym (text kept)."""
    kind: str
    index: int = 0
    count: int = 1
    value: float = 0
    text: str = ""
    neg: bool = False
    abs: bool = False


_REG = re.compile(r"^(s|v|ttmp)(?:(\d+)|\[(\d+):(\d+)\])$")
_NUM = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
_FLOAT = re.compile(r"^-?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)$")


def parse_arg(tok: str) -> Arg:
    t = tok.strip()
    neg = ab = False
    if t.startswith("-") and not _NUM.match(t) and not _FLOAT.match(t):
        neg, t = True, t[1:].strip()
    if t.startswith("neg(") and t.endswith(")"):
        neg, t = True, t[4:-1].strip()
    if t.startswith("|") and t.endswith("|") and len(t) > 2:
        ab, t = True, t[1:-1].strip()
    elif t.startswith("abs(") and t.endswith(")"):
        ab, t = True, t[4:-1].strip()
    m = _REG.match(t)
    if m:
        if m.group(2) is not None:
            return Arg(m.group(1), int(m.group(2)), 1, text=tok, neg=neg, abs=ab)
        lo, hi = int(m.group(3)), int(m.group(4))
        if hi < lo:
            raise AsmError(f"register range {t} runs backwards")
        return Arg(m.group(1), lo, hi - lo + 1, text=tok, neg=neg, abs=ab)
    if t in SCALAR_NAMES:
        return Arg("special", SCALAR_NAMES[t][0], SCALAR_NAMES[t][1], text=t, neg=neg, abs=ab)
    if t == "off":
        return Arg("off", text=t)
    if _NUM.match(t):
        return Arg("int", value=int(t, 0), text=t, neg=neg, abs=ab)
    if _FLOAT.match(t):
        return Arg("float", value=float(t), text=t, neg=neg, abs=ab)
    if re.fullmatch(r"[A-Za-z_.$][\w.$]*", t):
        return Arg("label", text=t)
    return Arg("sym", text=tok.strip())


def split_operands(rest: str) -> tuple[list[str], list[str]]:
    """'v1, v[2:3] offset:4 glc' -> (['v1', 'v[2:3]'], ['offset:4', 'glc'])."""
    parts, depth, cur = [], 0, ""
    for ch in rest:
        depth += ch in "([" 
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    mods: list[str] = []
    if parts:
        # modifiers follow the last operand, separated by spaces (not inside brackets or |...|)
        last, words, depth, cur, bars = parts[-1], [], 0, "", 0
        for ch in last:
            depth += ch in "(["
            depth -= ch in ")]"
            bars ^= ch == "|"
            if ch == " " and depth == 0 and not bars:
                if cur:
                    words.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            words.append(cur)
        i = 1
        while i < len(words) and not re.match(r"^[a-z_]+\d?(:|$)", words[i]):
            i += 1   # a symbolic operand with spaces, e.g. "vmcnt(0) lgkmcnt(0)"
        parts[-1] = " ".join(words[:i])
        mods = words[i:]
    return parts, mods


# ---------------------------------------------------------------------------------------------
# Constants

def _f16_bits(x: float) -> int | None:
    try:
        return struct.unpack("<H", struct.pack("<e", x))[0]
    except OverflowError:
        return None


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


_INLINE_FLOATS = {v: c for c, v in FLOAT_CODES.items()}


def _is_inv2pi(x: float, dtype: str) -> bool:
    if dtype == "64":
        return _f64_bits(x) == INV_2PI_BITS[64]
    if dtype in ("f16", "pk"):
        return _f16_bits(x) == INV_2PI_BITS[16]
    return _f32_bits(x) == INV_2PI_BITS[32]


def encode_constant(arg: Arg, dtype: str, allow_literal: bool, what: str) -> tuple[int, int | None]:
    """(source code, literal or None) for a number in a source field of this type."""
    if arg.kind == "int":
        v = int(arg.value)
        if -16 <= v <= 64:
            return (128 + v if v >= 0 else 192 - v), None
        if dtype in ("32",):
            for code, f in FLOAT_CODES.items():
                if (v & 0xFFFFFFFF) == _f32_bits(f):
                    return code, None
            if (v & 0xFFFFFFFF) == INV_2PI_BITS[32]:
                return 248, None
        if dtype in ("f16", "pk"):
            for code, f in FLOAT_CODES.items():
                if v == _f16_bits(f):
                    return code, None
            if v == INV_2PI_BITS[16]:
                return 248, None
        if not -(1 << 31) <= v < (1 << 32):
            raise AsmError(f"{what}: {arg.text} does not fit a 32-bit literal")
        lit = v & 0xFFFFFFFF
    else:
        x = float(arg.value)
        if dtype != "i16":
            if x in _INLINE_FLOATS and not (x == 0 and math.copysign(1, x) < 0):
                return _INLINE_FLOATS[x], None
            if _is_inv2pi(x, dtype):
                return 248, None
        if x == 0.0 and math.copysign(1, x) > 0:
            return 128, None
        if dtype in ("f16", "i16", "pk"):
            bits = _f16_bits(x)
            if bits is None:
                raise AsmError(f"{what}: {arg.text} does not fit a 16-bit float")
            lit = bits
        elif dtype == "64":
            bits = _f64_bits(x)
            if bits & 0xFFFFFFFF:
                raise AsmError(f"{what}: {arg.text} needs more than the 32 high bits a 64-bit literal keeps")
            lit = bits >> 32
        else:
            lit = _f32_bits(x)
    if not allow_literal:
        raise AsmError(f"{what}: {arg.text} is not an inline constant and this field takes no literal")
    return LITERAL, lit


def scalar_code(arg: Arg, count: int, what: str) -> int:
    if arg.kind == "s":
        if arg.index + arg.count - 1 > 105:
            raise AsmError(f"{what}: {arg.text} is beyond s105")
        code = arg.index
    elif arg.kind == "ttmp":
        code = TTMP_BASE + arg.index
    elif arg.kind == "special":
        code = arg.index
        if arg.count == 0:    # null stands for any width
            return code
    else:
        raise AsmError(f"{what}: expected a scalar register, got {arg.text!r}")
    if arg.count != count:
        raise AsmError(f"{what}: expected {count} scalar register{'s' if count > 1 else ''}, got {arg.text!r} "
                       f"({arg.count})")
    if count > 1 and arg.kind in ("s", "ttmp") and arg.index % (2 if count == 2 else 4):
        raise AsmError(f"{what}: {arg.text} is not aligned to {2 if count == 2 else 4} registers")
    return code


# ---------------------------------------------------------------------------------------------
# Symbolic immediates

def parse_waitcnt(text: str, what: str) -> int:
    if _NUM.match(text.strip()):
        return int(text, 0) & 0xFFFF
    v = 63 << 10 | 63 << 4 | 7   # every counter at its maximum: no wait
    for m in re.finditer(r"(\w+)\((\d+)\)", text):
        name, n = m.group(1), int(m.group(2))
        if name not in WAITCNT_FIELDS:
            raise AsmError(f"{what}: unknown counter {name!r} (vmcnt, expcnt, lgkmcnt)")
        lo, mx = WAITCNT_FIELDS[name]
        if n > mx:
            raise AsmError(f"{what}: {name}({n}) exceeds {mx}")
        v = v & ~(mx << lo) | n << lo
    if not re.fullmatch(r"(\s*\w+\(\d+\)\s*[&,]?)+", text):
        raise AsmError(f"{what}: cannot parse waitcnt {text!r}")
    return v


def parse_delay_alu(text: str, what: str) -> int:
    if _NUM.match(text.strip()):
        return int(text, 0)
    v = 0
    for part in text.split("|"):
        m = re.fullmatch(r"\s*(instid0|instskip|instid1)\((\w+)\)\s*", part)
        if not m:
            raise AsmError(f"{what}: cannot parse {part.strip()!r}")
        names = DELAY_SKIP if m.group(1) == "instskip" else DELAY_INSTID
        if m.group(2) not in names:
            raise AsmError(f"{what}: unknown {m.group(1)} value {m.group(2)!r}")
        n = names.index(m.group(2))
        v |= n << {"instid0": 0, "instskip": 4, "instid1": 7}[m.group(1)]
    return v


def parse_hwreg(text: str, what: str) -> int:
    m = re.fullmatch(r"hwreg\(\s*(\w+)\s*(?:,\s*(\d+)\s*,\s*(\d+)\s*)?\)", text.strip())
    if not m:
        raise AsmError(f"{what}: cannot parse {text!r} (hwreg(NAME[, offset, size]))")
    names = {n: i for i, n in HWREG_NAMES.items()}
    rid = names.get(m.group(1))
    if rid is None:
        if not m.group(1).isdigit():
            raise AsmError(f"{what}: unknown hardware register {m.group(1)!r}")
        rid = int(m.group(1))
    off = int(m.group(2) or 0)
    size = int(m.group(3) or 32)
    return rid | off << 6 | (size - 1) << 11


def parse_depctr(text: str, what: str) -> int:
    fields = {name: (lo, w) for name, lo, w in DEPCTR_FIELDS}
    v = sum(((1 << w) - 1) << lo for lo, w in fields.values())   # nothing waited for
    for tok in text.split():
        m = re.fullmatch(r"(\w+)\((\d+)\)", tok)
        if not m or m.group(1) not in fields:
            raise AsmError(f"{what}: unknown counter {tok!r} ({', '.join(fields)})")
        lo, w = fields[m.group(1)]
        n = int(m.group(2))
        if n >= 1 << w:
            raise AsmError(f"{what}: {tok} exceeds {(1 << w) - 1}")
        v = v & ~(((1 << w) - 1) << lo) | n << lo
    return v


def parse_swizzle(text: str, what: str) -> int:
    """swizzle(QUAD_PERM,a,b,c,d) | (SWAP,n) | (REVERSE,n) | (BROADCAST,group,lane) | (BITMASK_PERM,"01pi.")"""
    m = re.fullmatch(r'swizzle\((\w+)((?:,\s*(?:\d+|"[01pi]{5}"))*)\)', text.strip())
    if not m:
        raise AsmError(f"{what}: cannot parse {text!r}")
    mode, args = m.group(1), [a.strip() for a in m.group(2).split(",")[1:]]
    try:
        if mode == "QUAD_PERM" and len(args) == 4 and all(0 <= int(a) < 4 for a in args):
            return 0x8000 | sum(int(a) << (2 * i) for i, a in enumerate(args))
        if mode == "SWAP" and len(args) == 1 and 0 < int(args[0]) < 32:
            return 31 | int(args[0]) << 10
        if mode == "REVERSE" and len(args) == 1 and int(args[0]) in (2, 4, 8, 16, 32):
            return 31 | (int(args[0]) - 1) << 10
        if mode == "BROADCAST" and len(args) == 2 and int(args[0]) in (2, 4, 8, 16, 32) \
                and 0 <= int(args[1]) < int(args[0]):
            return (31 & ~(int(args[0]) - 1)) | int(args[1]) << 5
        if mode == "BITMASK_PERM" and len(args) == 1 and args[0].startswith('"'):
            and_m = or_m = xor_m = 0
            for c in args[0].strip('"'):
                and_m, or_m, xor_m = and_m << 1 | (c in "pi"), or_m << 1 | (c == "1"), xor_m << 1 | (c == "i")
            return and_m | or_m << 5 | xor_m << 10
    except ValueError:
        pass
    raise AsmError(f"{what}: bad swizzle {text!r}")


def parse_sendmsg(text: str, what: str) -> int:
    m = re.fullmatch(r"sendmsg\(\s*(\w+)\s*(?:,\s*(\d+)\s*,\s*(\d+)\s*)?\)", text.strip())
    if not m:
        raise AsmError(f"{what}: cannot parse {text!r}")
    names = {n: i for i, n in SENDMSG_NAMES.items()}
    rid = names.get(m.group(1), None)
    if rid is None:
        if not m.group(1).isdigit():
            raise AsmError(f"{what}: unknown message {m.group(1)!r}")
        rid = int(m.group(1))
    return rid


# ---------------------------------------------------------------------------------------------
# Candidate entries

def _build_index() -> dict:
    idx: dict = {}
    for kind, ops in OPCODES.items():
        for op, entry in ops.items():
            idx.setdefault(entry[0], []).append((kind, op, entry))
    return idx


INDEX = _build_index()


def canonical(mn: str) -> str:
    """The table mnemonic of an alias llvm-mc-15 accepts (s_ff1_i32_b32 -> s_ctz_i32_b32), suffix kept."""
    if mn in ALIASES:
        return ALIASES[mn]
    for suffix in ("_dpp", "_e32", "_e64"):
        if mn.endswith(suffix) and len(mn) > 4:
            base = canonical(mn[:-len(suffix)])
            if base != mn[:-len(suffix)]:
                return base + suffix
    return mn


def candidates(mn: str) -> list:
    """Table entries a mnemonic (or an alias of one) may mean, preferred first."""
    mn = canonical(mn)
    if mn.endswith("_dpp"):
        return candidates(mn[:-4])
    if mn.endswith(("_e32", "_e64")):
        # VOP3 forms LLVM prints without a suffix (v_nop) still take an explicit _e64
        extra = [c for c in INDEX.get(mn[:-4], []) if c[0] in ("VOP3", "VOP3P")] if mn.endswith("_e64") else []
        return INDEX.get(mn, []) + extra
    return INDEX.get(mn, []) + INDEX.get(mn + "_e32", []) + INDEX.get(mn + "_e64", [])


class _Enc:
    """Fields being filled for one candidate."""

    def __init__(self, mn: str):
        self.mn = mn
        self.fields: dict = {}
        self.literal: int | None = None
        self.labels: list = []   # (field, label name)
        self.dpp = False

    def set_literal(self, lit: int):
        if self.literal is not None and self.literal != lit:
            raise AsmError(f"{self.mn}: only one literal constant fits an instruction "
                           f"({self.literal:#x} and {lit:#x})")
        self.literal = lit


def _fill_operand(enc: _Enc, kind: str, sp, arg: Arg, pos: int, mods: dict):
    field, cls, count, dtype = sp
    what = f"{enc.mn}: operand {pos + 1} ({field})"
    if field.startswith("="):
        if arg.text != field[1:]:
            raise AsmError(f"{what}: expected {field[1:]!r}, got {arg.text!r}")
        return
    if (arg.neg or arg.abs) and field not in SRC_FIELDS:
        raise AsmError(f"{what}: neg/abs modifiers only apply to sources")
    if field == "literal":
        if arg.kind == "float":
            enc.set_literal(_f16_bits(arg.value) if "f16" in enc.mn else _f32_bits(arg.value))
        elif arg.kind == "int":
            enc.set_literal(int(arg.value) & 0xFFFFFFFF)
        else:
            raise AsmError(f"{what}: expected a literal constant, got {arg.text!r}")
        return
    if cls == "label":
        if arg.kind == "int":
            enc.fields[field] = int(arg.value) & 0xFFFF
        elif arg.kind == "label":
            enc.labels.append((field, arg.text))
            enc.fields[field] = 0
        else:
            raise AsmError(f"{what}: expected a label or offset, got {arg.text!r}")
        return
    if cls in ("imm", "hwreg", "waitcnt", "delay_alu"):
        if cls == "waitcnt":
            v = parse_waitcnt(arg.text, what)
        elif cls == "delay_alu":
            v = parse_delay_alu(arg.text, what)
        elif cls == "hwreg" and not arg.kind == "int":
            v = parse_hwreg(arg.text, what)
        elif arg.kind == "sym" and arg.text.startswith("sendmsg("):
            v = parse_sendmsg(arg.text, what)
        elif arg.kind == "sym" and arg.text.startswith("depctr_"):
            v = parse_depctr(arg.text, what)
        elif arg.kind == "int":
            v = int(arg.value)
        else:
            raise AsmError(f"{what}: expected an immediate, got {arg.text!r}")
        width = FORMATS[_layout_fmt(kind, ())][2][field][1]
        if field == "offset" and kind == "SMEM":
            if not -(1 << 20) <= v < (1 << 20):
                raise AsmError(f"{what}: offset {v} does not fit 21 signed bits")
        elif not -(1 << (width - 1)) <= v < (1 << width):
            raise AsmError(f"{what}: {v} does not fit {width} bits")
        enc.fields[field] = v & ((1 << width) - 1)
        return
    if field in SRC_FIELDS:
        i = ("src0", "src1", "src2").index(field) if field in ("src0", "src1", "src2") else 0
        if arg.neg:
            mods["neg"] = mods.get("neg", 0) | 1 << i
        if arg.abs:
            mods["abs"] = mods.get("abs", 0) | 1 << i
        wide = field.startswith("src")
        if arg.kind in ("int", "float") and cls not in ("V", "R"):
            code, lit = encode_constant(arg, dtype, True, what)
            if lit is not None:
                enc.set_literal(lit)
            enc.fields[field] = code
        elif cls == "V" and arg.kind != "v":
            raise AsmError(f"{what}: expected a VGPR, got {arg.text!r}")
        elif cls == "R" and arg.kind in ("int", "float"):
            raise AsmError(f"{what}: takes a register, not the constant {arg.text!r}")
        elif arg.kind == "v":
            if not wide:
                raise AsmError(f"{what}: a VGPR cannot be a scalar source")
            _check_count(what, arg, count)
            enc.fields[field] = VGPR_BASE + arg.index
        else:
            enc.fields[field] = scalar_code(arg, count, what)
        return
    if field == "sbase":
        enc.fields[field] = scalar_code(arg, count, what) // 2
        return
    if field == "srsrc":
        enc.fields[field] = scalar_code(arg, count, what) // 4
        return
    if field == "soffset" and kind.startswith("MUBUF") and arg.kind in ("int", "float"):
        enc.fields[field], lit = encode_constant(arg, "32", True, what)
        if lit is not None:
            enc.set_literal(lit)
        return
    if cls == "s" or field in ("sdst", "sdata", "saddr", "soffset"):
        enc.fields[field] = scalar_code(arg, count, what)
        return
    if arg.kind != "v":
        raise AsmError(f"{what}: expected a VGPR{' range of ' + str(count) if count > 1 else ''}, "
                       f"got {arg.text!r}")
    _check_count(what, arg, count)
    enc.fields[field] = arg.index


def _check_count(what: str, arg: Arg, count: int):
    if arg.count != count:
        raise AsmError(f"{what}: expected {count} register{'s' if count > 1 else ''}, got {arg.text!r} "
                       f"({arg.count})")
    if arg.index + count > 256:
        raise AsmError(f"{what}: {arg.text} is beyond v255")


def _layout_fmt(kind: str, specs) -> str:
    if kind.split("_")[0] in FLAT_KINDS:
        return "FLAT"
    if kind.startswith("MUBUF"):
        return "MUBUF"
    if kind in ("VOPDX", "VOPDY"):
        return "VOPD"
    if kind == "VOP3" and any(sp[0] == "sdst" for sp in specs):
        return "VOP3SD"
    return kind


def _bits(text: str, n: int, what: str) -> int:
    m = re.fullmatch(r"\[([01](?:,[01])*)\]", text.replace(" ", ""))
    if not m:
        raise AsmError(f"{what}: cannot parse {text!r} (expected [0,1,...])")
    bits = [int(b) for b in m.group(1).split(",")]
    if len(bits) != n:
        raise AsmError(f"{what}: expected {n} entries, got {len(bits)}")
    return sum(b << i for i, b in enumerate(bits))


def _apply_mods(enc: _Enc, kind: str, specs, mnmods, modtoks: list[str], srcmods: dict):
    fmt = _layout_fmt(kind, specs)
    f = enc.fields
    nsrc = sum(1 for sp in specs if sp[0] in ("src0", "src1", "src2"))
    what = enc.mn
    if fmt in ("VOP3", "VOP3SD", "VOP3P"):
        if fmt == "VOP3P" and (srcmods.get("neg") or srcmods.get("abs")) and not enc.mn.startswith("v_fma_mix"):
            raise AsmError(f"{what}: packed sources take neg_lo:[..]/neg_hi:[..], not -x or |x|")
        used = {"neg"} if srcmods.get("neg") else set()
        # v_fma_mix* keep |x| in the neg_hi bits
        used |= {("neg" if fmt == "VOP3P" else "abs")} if srcmods.get("abs") else set()
        for tok in modtoks:
            name = tok.split(":")[0]
            used.add({"mul": "omod", "div": "omod", "op_sel_hi": "op_sel", "neg_lo": "neg", "neg_hi": "neg"}
                     .get(name, name))
        for tag in sorted(used & {"clamp", "omod", "neg", "abs", "op_sel"} - set(mnmods)):
            raise AsmError(f"{what}: does not take the {tag} modifier")
    if fmt in ("VOP3", "VOP3SD") or fmt == "VOP3P":
        mix = enc.mn.startswith("v_fma_mix") or enc.dpp   # op_sel_hi defaults to 0 (DPP: as LLVM 15 does)
        if fmt == "VOP3P":
            f["op_sel_hi"], f["op_sel_hi2"] = (0, 0) if mix else (3, 1)
        if srcmods.get("neg"):
            f["neg"] = srcmods["neg"]
        if srcmods.get("abs"):
            if fmt == "VOP3SD":
                raise AsmError(f"{what}: abs does not apply (VOP3SD has no abs field)")
            if fmt == "VOP3P":
                f["neg_hi"] = srcmods["abs"]
            else:
                f["abs"] = srcmods["abs"]
    elif srcmods:
        raise AsmError(f"{what}: neg/abs need the VOP3 encoding")
    for tok in modtoks:
        name, _, val = tok.partition(":")
        try:
            if name == "clamp" and "clamp" in FORMATS[fmt][2]:
                f["clamp"] = 1
            elif name in ("mul", "div") and "omod" in FORMATS[fmt][2]:
                f["omod"] = {"mul:2": 1, "mul:4": 2, "div:2": 3}[tok]
            elif name == "op_sel" and fmt in ("VOP3", "VOP3SD"):
                b = _bits(val, nsrc + 1, f"{what} op_sel")
                f["op_sel"] = b & ((1 << nsrc) - 1) | (b >> nsrc & 1) << 3
            elif name == "op_sel" and fmt == "VOP3P":
                f["op_sel"] = _bits(val, nsrc, f"{what} op_sel")
            elif name == "op_sel_hi" and fmt == "VOP3P":
                b = _bits(val, nsrc, f"{what} op_sel_hi")
                f["op_sel_hi"], f["op_sel_hi2"] = b & 3, (b >> 2 & 1) if nsrc == 3 else (0 if mix else 1)
            elif name == "neg_lo" and fmt == "VOP3P":
                f["neg"] = _bits(val, nsrc, f"{what} neg_lo")
            elif name == "neg_hi" and fmt == "VOP3P":
                f["neg_hi"] = _bits(val, nsrc, f"{what} neg_hi")
            elif name == "offset" and fmt == "DS" and "offset" in mnmods:
                v = parse_swizzle(val, what) if val.startswith("swizzle(") else int(val, 0)
                if not 0 <= v < 0x10000:
                    raise AsmError(f"{what}: DS offset {v} does not fit 16 bits")
                f["offset0"], f["offset1"] = v & 0xFF, v >> 8
            elif name in ("offset0", "offset1") and fmt == "DS" and "offset0" in mnmods:
                v = int(val, 0)
                if not 0 <= v < 0x100:
                    raise AsmError(f"{what}: {name} {v} does not fit 8 bits")
                f[name] = v
            elif name == "gds" and fmt == "DS":
                f["gds"] = 1
            elif name == "offset" and fmt == "FLAT":
                v = int(val, 0)
                lo = 0 if kind.startswith("FLAT") else -0x1000
                if not lo <= v < 0x1000:
                    raise AsmError(f"{what}: offset {v} out of range [{lo}, 4095]")
                f["offset"] = v & 0x1FFF
            elif name in ("glc", "slc", "dlc", "tfe") and name in FORMATS[fmt][2] and not val:
                f[name] = 1
            elif name in ("idxen", "offen") and fmt == "MUBUF" and not val:
                pass     # checked against the address operand below
            elif name == "offset" and fmt == "MUBUF":
                v = int(val, 0)
                if not 0 <= v < 0x1000:
                    raise AsmError(f"{what}: offset {v} out of range [0, 4095]")
                f["offset"] = v
            elif name == "offset" and fmt == "SMEM":
                v = int(val, 0)
                f["offset"] = v & 0x1FFFFF
            else:
                raise AsmError(f"{what}: modifier {tok!r} does not apply to this instruction")
        except AsmError:
            raise
        except (KeyError, ValueError) as e:
            raise AsmError(f"{what}: bad modifier {tok!r}") from e
    if fmt == "MUBUF" and mnmods:
        for mode in ("idxen", "offen"):
            if (mode in kind) != (mode in [t.split(":")[0] for t in modtoks]):
                raise AsmError(f"{what}: the address operand and idxen/offen disagree (one VGPR takes offen or "
                               f"idxen, a pair takes both, off takes neither)")
    if fmt in ("FLAT", "MUBUF") and kind.endswith("_glc") != bool(f.get("glc")) and mnmods:
        raise AsmError(f"{what}: glc selects the returning form")


DPP_TOKENS = ("quad_perm", "row_shl", "row_shr", "row_ror", "row_mirror", "row_half_mirror", "row_share",
              "row_xmask", "row_mask", "bank_mask", "bound_ctrl", "fi", "dpp8")


def _dpp_word(mn: str, toks: list[str], src0: int) -> tuple[int, int]:
    """(src0 code, DPP dword) from DPP modifiers; src0 is the VGPR number."""
    vals = {}
    for t in toks:
        name, _, val = t.partition(":")
        vals[name] = val
    what = f"{mn}: DPP"
    try:
        if "dpp8" in vals:
            sel = [int(x) for x in vals["dpp8"].strip("[]").split(",")]
            if len(sel) != 8 or not all(0 <= x < 8 for x in sel) or set(vals) - {"dpp8", "fi"}:
                raise AsmError(f"{what}: dpp8 takes eight lane numbers 0..7 (and fi:1)")
            word = src0 | sum(x << (8 + 3 * i) for i, x in enumerate(sel))
            return (234 if vals.get("fi") == "1" else 233), word
        ctrl = None
        for name, base, lo, hi in (("row_shl", 0x100, 1, 15), ("row_shr", 0x110, 1, 15), ("row_ror", 0x120, 1, 15),
                                   ("row_share", 0x150, 0, 15), ("row_xmask", 0x160, 0, 15)):
            if name in vals:
                n = int(vals[name], 0)
                if not lo <= n <= hi:
                    raise AsmError(f"{what}: {name}:{n} is outside {lo}..{hi}")
                ctrl = base + n
        if "quad_perm" in vals:
            q = [int(x) for x in vals["quad_perm"].strip("[]").split(",")]
            if len(q) != 4 or not all(0 <= x < 4 for x in q):
                raise AsmError(f"{what}: quad_perm takes four lane numbers 0..3")
            ctrl = sum(x << (2 * i) for i, x in enumerate(q))
        if "row_mirror" in vals:
            ctrl = 0x140
        if "row_half_mirror" in vals:
            ctrl = 0x141
        if ctrl is None:
            raise AsmError(f"{what}: needs a control (quad_perm, row_shl, ..., or dpp8)")
        word = (src0 | ctrl << 8 | int(vals.get("fi", "0"), 0) << 18 | int("bound_ctrl" in vals) << 19
                | int(vals.get("bank_mask", "0xf"), 0) << 24 | int(vals.get("row_mask", "0xf"), 0) << 28)
        return 250, word
    except ValueError as e:
        raise AsmError(f"{what}: cannot parse {' '.join(toks)!r}") from e


def _try_entry(kind: str, op: int, entry, args: list[Arg], modtoks: list[str], mn: str) -> _Enc:
    emn, specs, mnmods = entry
    enc = _Enc(mn)
    srcmods: dict = {}
    fmt = _layout_fmt(kind, specs)
    specs = list(specs)
    args = list(args)
    dpp_toks = [t for t in modtoks if t.split(":")[0] in DPP_TOKENS]
    dpp_neg = dpp_abs = 0
    enc.dpp = bool(dpp_toks or mn.endswith("_dpp"))
    if enc.dpp:
        form = "dpp8" if any(t.startswith("dpp8") for t in dpp_toks) else "dpp16"
        if form not in DPP_NAMES.get(kind, {}).get(op, {}):
            raise AsmError(f"{mn}: {emn} has no {form.upper()} form")
        modtoks = [t for t in modtoks if t not in dpp_toks]
        if kind in ("VOP1", "VOP2", "VOPC"):   # their DPP word holds the neg/abs of src0 and src1
            for i, sp in enumerate(specs):
                if sp[0] in ("src0", "vsrc1") and (args[i].neg or args[i].abs) if i < len(args) else False:
                    bit = 0 if sp[0] == "src0" else 1
                    dpp_neg |= args[i].neg << bit
                    dpp_abs |= args[i].abs << bit
                    args[i] = replace(args[i], neg=False, abs=False)
    if emn == "s_endpgm" and not args:
        args = [Arg("int", value=0, text="0")]
    if len(specs) == 1 and specs[0][1] in ("waitcnt", "delay_alu") and len(args) > 1:
        args = [Arg("sym", text=" ".join(a.text for a in args))]   # "vmcnt(0), lgkmcnt(0)"
    if fmt == "SMEM" and specs and len(args) == len(specs) and specs[-1][0] == "offset":
        a = args[-1]
        if a.kind in ("s", "special", "ttmp") and a.text != "null" or a.text == "null":
            enc.fields["soffset"] = scalar_code(a, 1, f"{mn}: soffset") if a.text != "null" else NULL
            args = args[:-1]
            specs = specs[:-1]
        else:
            enc.fields["soffset"] = NULL
    if len(args) != len(specs):
        raise AsmError(f"{mn}: expected {len(specs)} operands, got {len(args)}")
    stage = 1
    try:
        for i, (sp, a) in enumerate(zip(specs, args)):
            stage = 2 + i
            _fill_operand(enc, kind, sp, a, i, srcmods)
        if kind in ("VOPDX", "VOPDY"):
            return enc
        stage = 100
        _apply_mods(enc, kind, specs, mnmods, modtoks, srcmods)
    except AsmError as e:
        e.stage = stage    # how far this candidate got: the furthest one has the most telling error
        raise
    enc.fields["op"] = op
    if dpp_toks or mn.endswith("_dpp"):
        src0 = enc.fields.get("src0", 0)
        if src0 < VGPR_BASE:
            raise AsmError(f"{mn}: the DPP source (src0) must be a VGPR")
        if enc.literal is not None:
            raise AsmError(f"{mn}: DPP takes no literal")
        if enc.fields.get("src1", VGPR_BASE) < VGPR_BASE and kind == "VOP3":
            raise AsmError(f"{mn}: src1 of a VOP3 DPP instruction must be a VGPR")
        enc.fields["src0"], word = _dpp_word(mn, dpp_toks, src0 - VGPR_BASE)
        if enc.fields["src0"] == 250:
            word |= (dpp_neg & 1) << 20 | (dpp_abs & 1) << 21 | (dpp_neg >> 1) << 22 | (dpp_abs >> 1) << 23
        elif dpp_neg or dpp_abs:
            raise AsmError(f"{mn}: dpp8 sources take no neg/abs in this encoding")
        enc.literal = word      # packed after the base word like a literal
    if kind == "VOP3" and emn.startswith("v_cmpx"):
        enc.fields["vdst"] = EXEC_LO   # v_cmpx writes EXEC; LLVM encodes it as the destination
    if fmt == "FLAT":
        parts = kind.split("_")
        enc.fields["seg"] = {"FLAT": 0, "SCRATCH": 1, "GLOBAL": 2}[parts[0]]
        enc.fields.setdefault("saddr", NULL)
        enc.fields["sve"] = int("sve" in parts)
    if fmt == "SMEM" and any(sp[0] == "offset" for sp in specs):
        enc.fields.setdefault("soffset", NULL)
    if fmt == "MUBUF":
        enc.fields.update(idxen=int("idxen" in kind), offen=int("offen" in kind), glc=int(kind.endswith("_glc")))
    return enc


def _pack(fmt: str, fields: dict, literal: int | None) -> bytes:
    size, (lo, width, value), layout = FORMATS[fmt]
    word = put_field(0, lo, width, value)
    for name, v in fields.items():
        flo, fwidth = layout[name]
        word = put_field(word, flo, fwidth, v, name)
    out = word.to_bytes(size, "little")
    if literal is not None:
        out += literal.to_bytes(4, "little")
    return out


@dataclass
class Encoded:
    """An encoded instruction whose label fields may still need the final addresses."""
    fmt: str
    fields: dict
    literal: int | None
    labels: list
    size: int
    line: int = 0


def encode_args(mn: str, args: list[Arg], modtoks: list[str]) -> Encoded:
    """Picks the first table entry of `mn` the operands fit; raises AsmError naming the mnemonic."""
    mn = canonical(mn)
    cands = candidates(mn)
    if not cands:
        raise AsmError(f"unknown instruction {mn!r} for gfx11")
    errors = []
    for kind, op, entry in cands:
        try:
            enc = _try_entry(kind, op, entry, args, modtoks, mn)
        except AsmError as e:
            errors.append((getattr(e, "stage", 0), len(errors), str(e)))
            continue
        fmt = _layout_fmt(kind, entry[1])
        size = FORMATS[fmt][0] + (4 if enc.literal is not None else 0)
        return Encoded(fmt, enc.fields, enc.literal, enc.labels, size)
    raise AsmError(max(errors)[2])


def encode_vopd(xmn: str, xargs: list[Arg], ymn: str, yargs: list[Arg]) -> Encoded:
    xs = [(op, e) for op, e in OPCODES["VOPDX"].items() if e[0] == xmn]
    ys = [(op, e) for op, e in OPCODES["VOPDY"].items() if e[0] == ymn]
    if not xs:
        raise AsmError(f"unknown VOPD X instruction {xmn!r}")
    if not ys:
        raise AsmError(f"unknown VOPD Y instruction {ymn!r}")
    ex = _try_entry("VOPDX", xs[0][0], xs[0][1], xargs, [], xmn)
    ey = _try_entry("VOPDY", ys[0][0], ys[0][1], yargs, [], ymn)
    fields = dict(ex.fields, **ey.fields, opx=xs[0][0], opy=ys[0][0])
    if ex.literal is not None and ey.literal is not None and ex.literal != ey.literal:
        raise AsmError(f"{xmn} :: {ymn}: the two halves need different literals")
    lit = ex.literal if ex.literal is not None else ey.literal
    vx, vy = fields["vdstx"], fields["vdsty"]
    if (vx & 1) == (vy & 1):
        raise AsmError(f"{xmn} :: {ymn}: vdstx (v{vx}) and vdsty (v{vy}) must be one even and one odd")
    fields["vdsty"] = vy >> 1
    return Encoded("VOPD", fields, lit, [], 8 + (4 if lit is not None else 0))


def parse_line(line: str) -> Encoded:
    if "::" in line:
        xs, ys = line.split("::", 1)
        xmn, _, xrest = xs.strip().partition(" ")
        ymn, _, yrest = ys.strip().partition(" ")
        xo, xm = split_operands(xrest)
        yo, ym = split_operands(yrest)
        if xm or ym:
            raise AsmError(f"{xmn} :: {ymn}: VOPD takes no modifiers ({' '.join(xm + ym)})")
        return encode_vopd(xmn, [parse_arg(t) for t in xo], ymn, [parse_arg(t) for t in yo])
    mn, _, rest = line.partition(" ")
    ops, mods = split_operands(rest)
    return encode_args(mn.strip(), [parse_arg(t) for t in ops], mods)


def _strip_comment(line: str) -> str:
    for c in (";", "//"):
        i = line.find(c)
        if i >= 0:
            line = line[:i]
    return line.strip()


def finish(items: list[Encoded], labels: dict) -> bytes:
    out = bytearray()
    for enc in items:
        for field, name in enc.labels:
            if name not in labels:
                raise AsmError(f"line {enc.line}: undefined label {name!r}")
            delta = labels[name] - (len(out) + 4)
            if delta % 4 or not -(1 << 17) <= delta < (1 << 17):
                raise AsmError(f"line {enc.line}: branch to {name!r} out of range or misaligned")
            enc.fields[field] = (delta // 4) & 0xFFFF
        out += _pack(enc.fmt, enc.fields, enc.literal)
    return bytes(out)


def assemble(text: str, arch: str = "gfx1100") -> bytes:
    """Assembles LLVM-syntax gfx11 code. Errors name the line and instruction."""
    if arch not in ARCHS:
        raise ValueError(f"assemble: unsupported arch {arch!r} (supported: {', '.join(ARCHS)})")
    items: list[Encoded] = []
    labels: dict = {}
    pc = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        while True:
            m = re.match(r"^([A-Za-z_.$][\w.$]*):\s*", line)
            if not m:
                break
            if m.group(1) in labels:
                raise AsmError(f"line {n}: label {m.group(1)!r} defined twice")
            labels[m.group(1)] = pc
            line = line[m.end():]
        if not line or line in (".text",):
            continue
        if line.startswith("."):
            raise AsmError(f"line {n}: directive {line.split()[0]!r} is not supported")
        try:
            enc = parse_line(line)
        except AsmError as e:
            raise AsmError(f"line {n}: {e}") from None
        enc.line = n
        items.append(enc)
        pc += enc.size
    return finish(items, labels)
