"""Decoder and disassembler for gfx11 machine code, printing LLVM's syntax (llvm-objdump-15)."""
from __future__ import annotations

import struct
from dataclasses import replace

from rdna3 import instruction as I
from rdna3.encoding import (DEPCTR_FIELDS, DEPCTR_RESERVED, FLAT_SEGMENTS, FLOAT_CODES, FORMATS, INV_2PI, INV_2PI_BITS, LITERAL, NULL,
                                SPECIAL_REG, SPECIAL_REG64, SPECIAL_SRC, TTMP_BASE, TTMP_COUNT, VGPR_BASE,
                                format_of, get_field)
from rdna3.errors import DecodeError
from rdna3.instruction import Instruction, Operand
from rdna3.opcodes_gfx11 import HWREG as HWREG_NAMES
from rdna3.opcodes_gfx11 import DPP_NAMES, MUST_BE_ZERO, OPCODES
from rdna3.opcodes_gfx11 import SENDMSG as SENDMSG_NAMES

DPP_CODES = {233: "DPP8", 234: "DPP8 with fetch-inactive", 250: "DPP16"}
SRC_FIELDS = ("src0", "src1", "src2", "ssrc0", "ssrc1", "srcx0", "srcy0")
ARCHS = ("gfx1100", "gfx1101", "gfx1102")

WAITCNT_MAX = {"vmcnt": 63, "expcnt": 7, "lgkmcnt": 63}
DELAY_INSTID = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1",
                "TRANS32_DEP_2", "TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2",
                "SALU_CYCLE_3"]
DELAY_SKIP = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]
FLOAT_NAMES = {0.5: "0.5", -0.5: "-0.5", 1.0: "1.0", -1.0: "-1.0", 2.0: "2.0", -2.0: "-2.0", 4.0: "4.0",
               -4.0: "-4.0"}


def _f16_bits(x: float) -> int:
    return struct.unpack("<H", struct.pack("<e", x))[0]


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def const_bits(code: int, dtype: str) -> int:
    """Bits an inline constant code gives an operand of this type."""
    width = 64 if dtype == "64" else 16 if dtype in ("f16", "i16", "pk") else 32
    if 128 <= code <= 208:
        v = code - 128 if code <= 192 else 192 - code
        return v & ((1 << width) - 1)
    if code == INV_2PI:
        return INV_2PI_BITS[width]
    f = FLOAT_CODES[code]
    return {16: _f16_bits, 32: _f32_bits, 64: _f64_bits}[width](f)


def src_operand(code: int, count: int, dtype: str, name: str, literal: int | None) -> Operand:
    """Classifies a source/destination field value (0..511 with VGPRs at 256)."""
    if count > 1 and (code <= 105 or TTMP_BASE <= code < TTMP_BASE + TTMP_COUNT):
        code &= ~1 if count == 2 else ~3   # the hardware ignores the low bits of a scalar range, as LLVM shows
    if code >= VGPR_BASE:
        if code - VGPR_BASE + count > 256:
            raise DecodeError(f"{name}: v{code - VGPR_BASE} + {count} registers runs past v255")
        return Operand(I.VGPR, code - VGPR_BASE, count, name, code=code)
    if code <= 105:
        if code + count > 106:
            raise DecodeError(f"{name}: s{code} + {count} registers runs past s105")
        return Operand(I.SGPR, code, count, name, code=code)
    if TTMP_BASE <= code < TTMP_BASE + TTMP_COUNT:
        if code + count > TTMP_BASE + TTMP_COUNT:
            raise DecodeError(f"{name}: ttmp{code - TTMP_BASE} + {count} registers runs past ttmp15")
        return Operand(I.TTMP, code - TTMP_BASE, count, name, code=code)
    if code in SPECIAL_REG and count >= 2 and code not in SPECIAL_REG64 and code != NULL:
        raise DecodeError(f"{name}: {SPECIAL_REG[code]} cannot hold a {count}-register operand")
    if code in SPECIAL_REG:
        reg = SPECIAL_REG64.get(code, SPECIAL_REG[code]) if count >= 2 else SPECIAL_REG[code]
        return Operand(I.SPECIAL, code, count, name, reg=reg, code=code)
    if 128 <= code <= 208:
        return Operand(I.ICONST, code, 1, name, value=code - 128 if code <= 192 else 192 - code, code=code)
    if code in FLOAT_CODES or code == INV_2PI:
        return Operand(I.FCONST, code, 1, name, value=const_bits(code, dtype), code=code)
    if code == LITERAL:
        return Operand(I.LITERAL, 0, 1, name, value=literal, code=code)
    if code in SPECIAL_SRC:
        return Operand(I.SPECIAL, code, count, name, reg=SPECIAL_SRC[code], code=code)
    if code in DPP_CODES:
        raise DecodeError(f"{DPP_CODES[code]} (source code {code} in {name}) is not supported")
    raise DecodeError(f"operand code {code} in field {name} is not a valid gfx11 source")


def _kind_and_fields(word: int, fmt: str, fields: dict) -> str:
    if fmt == "FLAT":
        seg = fields["seg"]
        if seg not in FLAT_SEGMENTS:
            raise DecodeError(f"FLAT segment {seg} is reserved")
        return (FLAT_SEGMENTS[seg] + ("_saddr" if fields["saddr"] != NULL else "")
                + ("_sve" if fields["sve"] else "") + ("_glc" if fields["glc"] else ""))
    if fmt == "MUBUF":
        return mubuf_kind(fields)
    return fmt


def mubuf_kind(f: dict) -> str:
    """MUBUF table kind: the addressing mode (idxen, offen) and glc (returning atomics) change operands."""
    return "MUBUF" + ("_idxen" if f["idxen"] else "") + ("_offen" if f["offen"] else "") + ("_glc" if f["glc"] else "")


def decode(code: bytes, offset: int = 0) -> Instruction:
    """Decodes the instruction at byte `offset`; raises DecodeError naming the offset and word."""
    if offset + 4 > len(code):
        raise DecodeError(f"truncated instruction at offset {offset:#x}")
    w0 = int.from_bytes(code[offset:offset + 4], "little")
    fmt = format_of(w0)
    if fmt is None:
        raise DecodeError(f"word {w0:#010x} at offset {offset:#x} is not an instruction of a supported "
                          f"gfx11 format (SOP*, SMEM, VOP*, DS, FLAT/GLOBAL/SCRATCH)")
    size, _, layout = FORMATS[fmt]
    if offset + size > len(code):
        raise DecodeError(f"truncated {fmt} instruction at offset {offset:#x}")
    word = int.from_bytes(code[offset:offset + size], "little")
    fields = {k: get_field(word, lo, w) for k, (lo, w) in layout.items()}
    kind = _kind_and_fields(word, fmt, fields)
    if fmt == "VOPD":
        entry_x = OPCODES["VOPDX"].get(fields["opx"])
        entry_y = OPCODES["VOPDY"].get(fields["opy"])
        if entry_x is None or entry_y is None:
            raise DecodeError(f"VOPD word {word:#018x} at offset {offset:#x}: unknown opx {fields['opx']} "
                              f"or opy {fields['opy']}")
        fields["vdsty"] = (fields["vdsty"] << 1) | ((fields["vdstx"] & 1) ^ 1)
        entries = [entry_x, entry_y]
    else:
        entry = OPCODES.get(kind, {}).get(fields["op"])
        if entry is None and fmt == "MUBUF" and not OPCODES["MUBUF"].get(fields["op"], (0, 1))[1]:
            kind, entry = "MUBUF", OPCODES["MUBUF"][fields["op"]]   # buffer_gl0_inv ignores the mode bits
        if entry is None:
            raise DecodeError(f"{kind} opcode {fields['op']} (word {word:#0{2 + 2 * size}x} at offset "
                              f"{offset:#x}) is not a gfx11 instruction LLVM knows")
        entries = [entry]
        if fmt == "VOP3" and any(s[0] == "sdst" for s in entry[1]):
            fmt = "VOP3SD"
            layout = FORMATS[fmt][2]
            fields = {k: get_field(word, lo, w) for k, (lo, w) in layout.items()}
        for f in MUST_BE_ZERO.get(kind, {}).get(fields["op"], ()):
            if fields[f]:
                raise DecodeError(f"{entry[0]} at offset {offset:#x}: field {f} must be 0 for this opcode, "
                                  f"is {fields[f]}")
    dpp = None
    if fmt in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD", "VOP3P") and fields["src0"] in DPP_CODES:
        dpp = "dpp8" if fields["src0"] != 250 else "dpp16"
        if dpp not in DPP_NAMES.get(kind, {}).get(fields["op"], {}):
            raise DecodeError(f"{entries[0][0]} at offset {offset:#x} has no {dpp.upper()} form")
        if offset + size + 4 > len(code):
            raise DecodeError(f"missing DPP dword after instruction at offset {offset:#x}")
        fields["dpp"] = int.from_bytes(code[offset + size:offset + size + 4], "little")
        size += 4
    needs_lit = any(s[0] == "literal" or (s[0] in SRC_FIELDS and fields[s[0]] == LITERAL)
                    for e in entries for s in e[1]) or fmt == "MUBUF" and fields["soffset"] == LITERAL
    if needs_lit:
        if offset + size + 4 > len(code):
            raise DecodeError(f"missing literal dword after instruction at offset {offset:#x}")
        fields["literal"] = int.from_bytes(code[offset + size:offset + size + 4], "little")
        size += 4
    insts = []
    for half, (mn, specs, mods) in enumerate(entries):
        operands, ndst = [], 0
        for sp in specs:
            operands.append(_operand(sp, fields, fmt))
        ndst = _count_dsts(fmt, mn, specs)
        m = _mods(fmt, kind, fields, mods, specs, mn)
        base = mn
        suffix = ""
        for sfx in ("_e32", "_e64"):
            if mn.endswith(sfx):
                base, suffix = mn[:-len(sfx)], sfx
        if dpp:
            m.update(_dpp_mods(dpp, fields, fmt))
            name = DPP_NAMES[kind][fields["op"]][dpp]
            suffix = name[len(base):]
        operands = _source_modifiers(operands, specs, m, fmt, mn, mods, bool(dpp))
        opfield = fields["opy" if half else "opx"] if fmt == "VOPD" else fields["op"]
        fmt_name = kind.split("_")[0] if fmt == "FLAT" else fmt
        insts.append(Instruction(base, fmt_name, opfield, size, fields, tuple(operands), ndst, m, suffix,
                                 offset=offset))
    if fmt == "VOPD":
        x = insts[0]
        return Instruction(x.op, x.fmt, x.opcode, size, fields, x.operands, x.ndst, x.mods, "",
                           vopd_y=insts[1], offset=offset)
    return insts[0]


def _source_modifiers(operands: list, specs, m: dict, fmt: str, mn: str, modnames, dpp: bool) -> list:
    """Copies the neg/abs bits of `mods` onto the source Operands they apply to, where LLVM shows them
    (VOP3 float ops, v_fma_mix*, VOP1/VOP2/VOPC DPP); packed VOP3P neg_lo/neg_hi stay in mods only."""
    mix = mn.startswith("v_fma_mix")
    if not (fmt in ("VOP3", "VOP3SD") and "neg" in modnames or mix or dpp and fmt in ("VOP1", "VOP2", "VOPC")):
        return operands
    order = ("src0", "src1", "src2") if fmt.startswith("VOP3") else ("src0", "vsrc1")
    neg, ab = m.get("neg", 0), m.get("neg_hi" if fmt == "VOP3P" else "abs", 0)
    out = []
    for sp, o in zip(specs, operands):
        if sp[0] in order:
            i = order.index(sp[0])
            o = replace(o, neg=bool(neg >> i & 1), abs=bool(ab >> i & 1))
        out.append(o)
    return out


def _dpp_mods(dpp: str, fields: dict, fmt: str) -> dict:
    """DPP controls; for VOP1/VOP2/VOPC the DPP word also holds the neg/abs bits of src0 and src1."""
    w = fields["dpp"]
    if dpp == "dpp8":
        return {"dpp8": tuple(w >> (8 + 3 * i) & 7 for i in range(8)), "fi": int(fields["src0"] == 234)}
    m = {"dpp_ctrl": w >> 8 & 0x1FF, "fi": w >> 18 & 1, "bound_ctrl": w >> 19 & 1, "bank_mask": w >> 24 & 15,
         "row_mask": w >> 28 & 15}
    if fmt in ("VOP1", "VOP2", "VOPC"):
        m["neg"] = (w >> 20 & 1) | (w >> 22 & 1) << 1
        m["abs"] = (w >> 21 & 1) | (w >> 23 & 1) << 1
    return m


def dpp_ctrl_text(c: int) -> str:
    if c < 0x100:
        return "quad_perm:[" + ",".join(str(c >> (2 * i) & 3) for i in range(4)) + "]"
    for base, name in ((0x100, "row_shl"), (0x110, "row_shr"), (0x120, "row_ror")):
        if base < c <= base + 15:
            return f"{name}:{c - base}"
    if c == 0x140:
        return "row_mirror"
    if c == 0x141:
        return "row_half_mirror"
    if 0x150 <= c <= 0x15F:
        return f"row_share:{c - 0x150}"
    if 0x160 <= c <= 0x16F:
        return f"row_xmask:{c - 0x160}"
    raise DecodeError(f"DPP control {c:#x} is reserved")


def _count_dsts(fmt: str, mn: str, specs) -> int:
    n = 0
    for sp in specs:
        f = sp[0]
        if f in ("vdst", "sdst", "vdstx", "vdsty") or (f == "=vcc_lo" and fmt == "VOPC"):
            n += 1
        elif fmt == "VOP2" and f == "=vcc_lo" and n == 1:
            n += 1      # v_add_co_ci_u32_e32's carry out; the trailing vcc_lo is its carry in
        elif fmt == "SMEM" and f == "sdata":
            n += 1
        else:
            break
    if fmt in ("SOPK",) and mn.startswith(("s_cmpk", "s_setreg", "s_waitcnt_")):
        return 0
    return n


def _operand(sp, fields: dict, fmt: str) -> Operand:
    name, cls, count, dtype = sp
    if name.startswith("="):
        reg = name[1:]
        if reg == "off":
            return Operand(I.SPECIAL, NULL, 1, "saddr", reg="off")
        return Operand(I.SPECIAL, 106, 1, "", reg=reg, code=106)
    if name == "literal":
        return Operand(I.LITERAL, 0, 1, "literal", value=fields["literal"], code=LITERAL)
    v = fields[name]
    if cls == "V":
        return Operand(I.VGPR, v & 0xFF, count, name, code=VGPR_BASE + (v & 0xFF))
    if cls == "label":
        return Operand(I.LABEL, 0, 1, name, value=v - 0x10000 if v & 0x8000 else v)
    if cls in ("imm", "hwreg", "waitcnt", "delay_alu"):
        if name == "offset" and fmt == "SMEM":
            v = v - (1 << 21) if v & (1 << 20) else v
        return Operand(I.IMM, 0, 1, name, value=v)
    if name == "src0" and "dpp" in fields:     # DPP: src0 is the VGPR in the DPP word
        return Operand(I.VGPR, fields["dpp"] & 0xFF, count, name, code=VGPR_BASE + (fields["dpp"] & 0xFF))
    if name == "src1" and "dpp" in fields and fmt in ("VOP3", "VOP3SD"):   # VOP3 DPP: src1 is a VGPR
        return Operand(I.VGPR, v & 0xFF, count, name, code=VGPR_BASE + (v & 0xFF))
    if name in SRC_FIELDS:
        o = src_operand(v, count, dtype, name, fields.get("literal"))
        if cls == "R" and o.is_const:
            raise DecodeError(f"{name} of this instruction takes registers only, not {o.kind} code {v}")
        return o
    if name == "sbase":
        return src_operand(2 * v, count, "32", name, None)
    if name == "srsrc":
        return src_operand(4 * v, count, "32", name, None)
    if name == "soffset" and fmt == "MUBUF":     # an SGPR or a constant
        return src_operand(v, 1, "32", name, fields.get("literal"))
    if cls == "s" or name in ("sdst", "sdata", "saddr", "soffset", "ssrc0", "ssrc1"):
        o = src_operand(v, count, dtype, name, None)
        if o.is_const:
            raise DecodeError(f"{name} holds code {v}, a constant where a scalar register is required")
        return o
    if v + count > 256:
        raise DecodeError(f"{name}: v{v} + {count} registers runs past v255")
    return Operand(I.VGPR, v, count, name, code=VGPR_BASE + v)


def _mods(fmt: str, kind: str, fields: dict, modnames, specs, mn: str) -> dict:
    m: dict = {}
    if fmt in ("VOP3", "VOP3SD", "VOP3P"):
        nsrc = sum(1 for s in specs if s[0] in ("src0", "src1", "src2"))
        m["nsrc"] = nsrc
        for k in ("clamp", "omod", "neg", "abs", "op_sel", "neg_hi"):
            if k in fields:
                m[k] = fields[k]
        if fmt == "VOP3P":
            m["op_sel_hi"] = fields["op_sel_hi"] | (fields["op_sel_hi2"] << 2)
    elif fmt == "DS":
        m.update(offset0=fields["offset0"], offset1=fields["offset1"], gds=fields["gds"],
                 two_offsets="offset0" in modnames)
    elif fmt == "FLAT":
        off = fields["offset"]
        if not kind.startswith("FLAT") and off & 0x1000:
            off -= 0x2000
        m.update(offset=off, glc=fields["glc"], slc=fields["slc"], dlc=fields["dlc"])
    elif fmt == "MUBUF":
        m.update({k: fields[k] for k in ("offset", "glc", "slc", "dlc", "tfe", "offen", "idxen")})
    elif fmt == "SMEM":
        off = fields["offset"]
        m.update(offset=off - (1 << 21) if off & (1 << 20) else off, glc=fields["glc"], dlc=fields["dlc"],
                 soffset=fields["soffset"])
    m["modnames"] = tuple(modnames)
    return m


def decode_all(code: bytes) -> list[Instruction]:
    out, off = [], 0
    while off < len(code):
        inst = decode(code, off)
        out.append(inst)
        off += inst.size
    return out


# ---------------------------------------------------------------------------------------------
# Printing

def reg_text(prefix: str, index: int, count: int) -> str:
    return f"{prefix}{index}" if count == 1 else f"{prefix}[{index}:{index + count - 1}]"


def _entry(inst: Instruction):
    f = inst.fields
    if inst.fmt == "VOPD":
        return OPCODES["VOPDX"][f["opx"]] if inst.vopd_y is not None else OPCODES["VOPDY"][f["opy"]]
    if inst.fmt in ("FLAT", "GLOBAL", "SCRATCH"):
        kind = (inst.fmt + ("_saddr" if f["saddr"] != NULL else "") + ("_sve" if f["sve"] else "")
                + ("_glc" if f["glc"] else ""))
        return OPCODES[kind][f["op"]]
    if inst.fmt == "MUBUF":
        return OPCODES[mubuf_kind(f)].get(f["op"]) or OPCODES["MUBUF"][f["op"]]
    return OPCODES["VOP3" if inst.fmt == "VOP3SD" else inst.fmt][f["op"]]


def operand_text(o: Operand, dtype: str = "32") -> str:
    if o.kind == I.VGPR:
        return reg_text("v", o.index, o.count)
    if o.kind == I.SGPR:
        return reg_text("s", o.index, o.count)
    if o.kind == I.TTMP:
        return reg_text("ttmp", o.index, o.count)
    if o.kind == I.SPECIAL:
        return o.reg
    if o.kind == I.ICONST:
        return str(o.value)
    if o.kind == I.FCONST:
        if dtype in ("i16", "pki16"):
            return f"0x{o.value:x}"
        if o.code == INV_2PI:
            return "0.15915494309189532" if dtype == "64" else "0.15915494"
        return FLOAT_NAMES[FLOAT_CODES[o.code]]
    if o.kind == I.LITERAL:
        return literal_text(o.value, dtype)
    if o.kind == I.LABEL:
        return str(o.value)
    return str(o.value)


_F32_NAMES = {_f32_bits(f): FLOAT_NAMES[f] for f in FLOAT_CODES.values()}
_F32_NAMES[INV_2PI_BITS[32]] = "0.15915494"
_F16_NAMES = {_f16_bits(f): FLOAT_NAMES[f] for f in FLOAT_CODES.values()}
_F16_NAMES[INV_2PI_BITS[16]] = "0.15915494"


def literal_text(v: int, dtype: str) -> str:
    """LLVM prints a literal by its value: one that equals an inline constant reads like it."""
    if dtype in ("f16", "i16"):
        v &= 0xFFFF
        sv = v - 0x10000 if v & 0x8000 else v
        if -16 <= sv <= 64:
            return str(sv)
        if dtype == "f16" and v in _F16_NAMES:
            return _F16_NAMES[v]
        return f"0x{v:x}"
    sv = v - (1 << 32) if v & 0x80000000 else v
    if dtype == "64":
        return str(v) if v <= 64 else f"0x{v:x}"
    if -16 <= sv <= 64:
        return str(sv)
    if dtype == "32" and v in _F32_NAMES:
        return _F32_NAMES[v]
    return f"0x{v:x}"


def _imm_text(sp, o: Operand, inst: Instruction) -> str:
    cls, style = sp[1], sp[3]
    v = o.value
    if cls == "waitcnt":
        cnt = {"vmcnt": v >> 10 & 63, "expcnt": v & 7, "lgkmcnt": v >> 4 & 63}
        show = [k for k in ("vmcnt", "expcnt", "lgkmcnt") if cnt[k] != WAITCNT_MAX[k]] or list(cnt)
        return " ".join(f"{k}({cnt[k]})" for k in show)
    if cls == "delay_alu":
        id0, skip, id1 = v & 15, v >> 4 & 7, v >> 7 & 15
        bad_id, bad_skip = "/* invalid instid value */", "/* invalid instskip value */"
        parts = []
        if id0:
            parts.append(f"instid0({DELAY_INSTID[id0] if id0 < len(DELAY_INSTID) else bad_id})")
        if skip:
            parts.append(f"instskip({DELAY_SKIP[skip] if skip < len(DELAY_SKIP) else bad_skip})")
        if id1:
            parts.append(f"instid1({DELAY_INSTID[id1] if id1 < len(DELAY_INSTID) else bad_id})")
        return " | ".join(parts) or "0"
    if cls == "hwreg":
        rid, off, size = v & 63, v >> 6 & 31, (v >> 11) + 1
        name = HWREG_NAMES.get(rid, str(rid))
        return f"hwreg({name})" if off == 0 and size == 32 else f"hwreg({name}, {off}, {size})"
    if o.name == "offset" and inst.fmt == "SMEM":
        return f"0x{v:x}" if v >= 0 else f"-0x{-v:x}"
    if inst.op == "s_waitcnt_depctr" and not v & DEPCTR_RESERVED:
        cnt = [(name, v >> lo & ((1 << w) - 1), (1 << w) - 1) for name, lo, w in DEPCTR_FIELDS]
        shown = [c for c in cnt if c[1] != c[2]] or cnt
        return " ".join(f"{name}({n})" for name, n, _ in shown)
    if inst.op in ("s_sendmsg", "s_sendmsghalt") and (v & 0xFF in SENDMSG_NAMES or v >> 8 == 0):
        # LLVM names a known message whatever the upper (operation/stream) bits hold
        return f"sendmsg({SENDMSG_NAMES[v & 0xFF]})" if v & 0xFF in SENDMSG_NAMES else f"sendmsg({v}, 0, 0)"
    if style == "hex" or (style == "small" and v > 64):
        return f"0x{v:x}"
    return str(v)


def swizzle_text(off: int) -> str:
    """ds_swizzle_b32's offset as LLVM writes it: swizzle(QUAD_PERM|SWAP|REVERSE|BROADCAST|BITMASK_PERM,...)."""
    if off & 0x8000:
        if off & 0x7F00:
            return str(off)
        return "swizzle(QUAD_PERM," + ",".join(str(off >> (2 * i) & 3) for i in range(4)) + ")"
    and_m, or_m, xor_m = off & 31, off >> 5 & 31, off >> 10 & 31
    if and_m == 31 and or_m == 0 and xor_m and xor_m & (xor_m - 1) == 0:
        return f"swizzle(SWAP,{xor_m})"
    if and_m == 31 and or_m == 0 and xor_m and (xor_m + 1) & xor_m == 0:
        return f"swizzle(REVERSE,{xor_m + 1})"
    for group in (2, 4, 8, 16, 32):
        if xor_m == 0 and and_m == 31 & ~(group - 1) and or_m < group:
            return f"swizzle(BROADCAST,{group},{or_m})"
    chars = []
    for bit in range(4, -1, -1):
        a, o, x = and_m >> bit & 1, or_m >> bit & 1, xor_m >> bit & 1
        # each bit of the source lane is ((lane & and) | or) ^ xor: a constant, the lane bit, or its inverse
        chars.append(str(o ^ x) if not a or o else "i" if x else "p")
    return 'swizzle(BITMASK_PERM,"' + "".join(chars) + '")'


def _bits_list(v: int, n: int) -> str:
    return "[" + ",".join(str(v >> i & 1) for i in range(n)) + "]"


def format_instruction(inst: Instruction) -> str:
    """LLVM's text for one instruction (single spaces, no encoding comment)."""
    if inst.fmt == "VOPD" and inst.vopd_y is not None:
        y = inst.vopd_y
        ytext = _format_one(y, OPCODES["VOPDY"][inst.fields["opy"]])
        return _format_one(inst, OPCODES["VOPDX"][inst.fields["opx"]]) + " :: " + ytext
    return _format_one(inst, _entry(inst))


def _format_one(inst: Instruction, entry) -> str:
    mn, specs, modnames = entry
    f, m = inst.fields, inst.mods
    dpp = "dpp" in f and inst.fmt != "VOPD"
    if dpp:
        mn = inst.op + inst.enc_suffix
    texts = []
    srcs = [sp[0] for sp in specs if sp[0] in ("src0", "src1", "src2")]
    for sp, o in zip(specs, inst.operands):
        if o.kind == I.IMM or o.kind == I.LABEL:
            if inst.fmt == "SMEM" and o.name == "offset" and (f["soffset"] != NULL or o.value == 0):
                # with an SGPR offset the immediate becomes a modifier; LLVM prints a zero one as null
                texts.append(operand_text(src_operand(f["soffset"], 1, "32", "soffset", None)))
                continue
            if inst.op == "s_endpgm" and o.value == 0:
                continue
            texts.append(_imm_text(sp, o, inst) if o.kind == I.IMM else str(o.value & 0xFFFF))
            continue
        # packed 16-bit integers print their literal whole, and inline floats as f16 bits
        t = operand_text(o, "pki16" if inst.fmt == "VOP3P" and sp[3] == "i16" else sp[3])
        if sp[0] in srcs and (inst.fmt in ("VOP3", "VOP3SD") or mn.startswith("v_fma_mix")) or \
                dpp and sp[0] in ("src0", "vsrc1"):
            i = srcs.index(sp[0]) if sp[0] in srcs else 1
            # LLVM hides them on 16-bit integer ops
            shown = inst.fmt == "VOP3P" or "neg" in modnames or dpp and inst.fmt in ("VOP1", "VOP2", "VOPC")
            has_abs = shown and (m.get("neg_hi" if inst.fmt == "VOP3P" else "abs", 0) >> i) & 1
            if has_abs:
                t = f"|{t}|"
            if shown and m.get("neg", 0) >> i & 1:
                # a minus sign before a constant would read as a negative constant
                t = f"neg({t})" if o.is_const and not has_abs else "-" + t
        texts.append(t)
    out = mn + (" " + ", ".join(texts) if texts else "")
    tail = []
    if inst.fmt == "SMEM":
        if f["soffset"] != NULL and m["offset"] and any(sp[0] == "offset" for sp in specs):
            o = m["offset"]
            tail.append(f"offset:0x{o:x}" if o >= 0 else f"offset:-0x{-o:x}")
        tail += [k for k in ("glc", "dlc") if m[k]]
    elif inst.fmt == "DS":
        if m["two_offsets"]:
            tail += [f"offset{i}:{m[f'offset{i}']}" for i in (0, 1) if m[f"offset{i}"]]
        elif m["offset0"] | m["offset1"] << 8:
            off = m["offset0"] | m["offset1"] << 8
            tail.append(f"offset:{swizzle_text(off) if mn == 'ds_swizzle_b32' else off}")
        if m["gds"]:
            tail.append("gds")
    elif inst.fmt in ("FLAT", "GLOBAL", "SCRATCH"):
        if m["offset"]:
            tail.append(f"offset:{m['offset']}")
        tail += [k for k in ("glc", "slc", "dlc") if m[k]]
    elif inst.fmt == "MUBUF" and specs:
        tail += [k for k in ("idxen", "offen") if m[k]]
        if m["offset"]:
            tail.append(f"offset:{m['offset']}")
        # LLVM shows no dlc or tfe on buffer atomics (it ignores those bits there)
        tail += [k for k in (("glc", "slc") if "_atomic_" in mn else ("glc", "slc", "dlc", "tfe")) if m[k]]
    elif inst.fmt in ("VOP3", "VOP3SD"):
        n = len(srcs)
        if m.get("op_sel") and "op_sel" in modnames:   # LLVM shows op_sel on 16-bit ops only
            tail.append("op_sel:" + _bits_list(m["op_sel"] & ((1 << n) - 1) | (m["op_sel"] >> 3 & 1) << n, n + 1))
        if m.get("clamp"):
            tail.append("clamp")
        if m.get("omod"):
            tail.append({1: "mul:2", 2: "mul:4", 3: "div:2"}[m["omod"]])
    elif inst.fmt == "VOP3P":
        n = len(srcs)
        mix = mn.startswith("v_fma_mix")
        if mix:
            m = dict(m, neg=0, neg_hi=0)     # printed on the operands
        has_sel = "op_sel" in modnames or mix        # wmma has none
        if has_sel and m["op_sel"] & ((1 << n) - 1):
            tail.append("op_sel:" + _bits_list(m["op_sel"], n))
        hi_default = 0 if mix or dpp else (1 << n) - 1    # LLVM 15: DPP forms default op_sel_hi to 0
        if has_sel and (m["op_sel_hi"] & ((1 << n) - 1)) != hi_default:
            tail.append("op_sel_hi:" + _bits_list(m["op_sel_hi"], n))
        if m["neg"] & ((1 << n) - 1):
            tail.append("neg_lo:" + _bits_list(m["neg"], n))
        if m["neg_hi"] & ((1 << n) - 1):
            tail.append("neg_hi:" + _bits_list(m["neg_hi"], n))
        if m.get("clamp"):
            tail.append("clamp")
    if dpp:
        if "dpp8" in m:
            tail.append("dpp8:[" + ",".join(map(str, m["dpp8"])) + "]")
        else:
            tail += [dpp_ctrl_text(m["dpp_ctrl"]), f"row_mask:0x{m['row_mask']:x}", f"bank_mask:0x{m['bank_mask']:x}"]
            if m["bound_ctrl"]:
                tail.append("bound_ctrl:1")
        if m["fi"]:
            tail.append("fi:1")
    return out + (" " + " ".join(tail) if tail else "")


def disassemble(code: bytes, arch: str = "gfx1100") -> list[str]:
    """One LLVM-syntax line per instruction. gfx1100, gfx1101 and gfx1102 share these encodings."""
    if arch not in ARCHS:
        raise ValueError(f"disassemble: unsupported arch {arch!r} (supported: {', '.join(ARCHS)})")
    return [format_instruction(i) for i in decode_all(code)]
