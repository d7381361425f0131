"""A Python builder for gfx11 programs with typed operands.

    from rdna3.builder import Program, s, v, vcc_lo, exec_lo, null, off
    p = Program()
    p.s_load_b64(s[2:3], s[0:1], 0x10)          # ranges are inclusive, as in LLVM's s[2:3]
    p.s_waitcnt(lgkmcnt=0)
    p.v_add_f32(v[0], -v[1], abs(s[2]), clamp=True)
    p.global_store_b32(v[2], v[0], s[2:3], offset=16)
    p.label("done")
    p.s_endpgm()
    code = p.assemble()

Every call encodes at once, so an SGPR where a VGPR is required, a range of the wrong width or an
unknown mnemonic raises AsmError there, naming the instruction; only label addresses wait for
`assemble()`. Modifiers are keywords: clamp, mul=2|4, div=2, op_sel/op_sel_hi/neg_lo/neg_hi=[...],
offset, offset0, offset1, glc, slc, dlc, gds, idxen, offen, tfe, and DPP's quad_perm=[...], row_shl=n
(row_shr, row_ror, row_share, row_xmask), row_mirror, row_half_mirror, row_mask, bank_mask,
bound_ctrl, fi, dpp8=[...]; s_waitcnt takes vmcnt/expcnt/lgkmcnt keywords.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from rdna3 import asm
from rdna3.asm import Arg, Encoded
from rdna3.errors import AsmError


@dataclass(frozen=True)
class Reg:
    """A register or register range (kind s, v, ttmp) or a named special register."""
    kind: str
    index: int
    count: int = 1
    name: str = ""
    neg: bool = False
    abs: bool = False

    def __neg__(self) -> "Reg":
        return replace(self, neg=not self.neg)

    def __abs__(self) -> "Reg":
        return replace(self, abs=True)

    def __str__(self) -> str:
        if self.name:
            t = self.name
        elif self.count == 1:
            t = f"{self.kind}{self.index}"
        else:
            t = f"{self.kind}[{self.index}:{self.index + self.count - 1}]"
        if self.abs:
            t = f"|{t}|"
        return "-" + t if self.neg else t

    def arg(self) -> Arg:
        plain = replace(self, neg=False, abs=False)
        a = asm.parse_arg(str(plain))
        return replace(a, neg=self.neg, abs=self.abs)


class RegFile:
    """`v[3]` is v3; `v[4:7]` is the four registers v4..v7 (inclusive, like LLVM's v[4:7])."""

    def __init__(self, kind: str, size: int):
        self.kind, self.size = kind, size

    def __getitem__(self, key) -> Reg:
        if isinstance(key, slice):
            if key.step is not None or key.start is None or key.stop is None:
                raise AsmError(f"{self.kind}[a:b] takes two bounds and no step")
            lo, hi = key.start, key.stop
        else:
            lo = hi = key
        if not (isinstance(lo, int) and isinstance(hi, int)) or not 0 <= lo <= hi < self.size:
            raise AsmError(f"{self.kind}[{key}] is outside {self.kind}0..{self.kind}{self.size - 1}")
        return Reg(self.kind, lo, hi - lo + 1)


s = RegFile("s", 106)
v = RegFile("v", 256)
ttmp = RegFile("ttmp", 16)
vcc_lo, vcc_hi, vcc = Reg("special", 106, 1, "vcc_lo"), Reg("special", 107, 1, "vcc_hi"), Reg("special", 106, 2, "vcc")
exec_lo, exec_hi = Reg("special", 126, 1, "exec_lo"), Reg("special", 127, 1, "exec_hi")
exec = Reg("special", 126, 2, "exec")  # noqa: A001 - LLVM's name for the 64-bit EXEC
m0, null, scc = Reg("special", 125, 1, "m0"), Reg("special", 124, 0, "null"), Reg("special", 253, 1, "src_scc")
off = "off"


def _arg(x, mn: str, pos: int) -> Arg:
    if isinstance(x, Reg):
        return x.arg()
    if isinstance(x, bool):
        raise AsmError(f"{mn}: operand {pos + 1} is a bool; pass an int or a register")
    if isinstance(x, int):
        return Arg("int", value=x, text=hex(x) if x > 64 else str(x))
    if isinstance(x, float):
        return Arg("float", value=x, text=repr(x))
    if isinstance(x, str):
        return asm.parse_arg(x)
    raise AsmError(f"{mn}: operand {pos + 1} has unsupported type {type(x).__name__}")


def _mod_tokens(mn: str, kw: dict) -> list[str]:
    toks = []
    for k, val in kw.items():
        if k in ("clamp", "glc", "slc", "dlc", "gds"):
            if val:
                toks.append(k)
        elif k in ("mul", "div"):
            toks.append(f"{k}:{val}")
        elif k in ("op_sel", "op_sel_hi", "neg_lo", "neg_hi"):
            toks.append(f"{k}:[{','.join(str(int(b)) for b in val)}]")
        elif k in ("offset", "offset0", "offset1", "row_shl", "row_shr", "row_ror", "row_share", "row_xmask",
                   "row_mask", "bank_mask", "fi", "bound_ctrl"):
            toks.append(f"{k}:{int(val)}")
        elif k in ("quad_perm", "dpp8"):
            toks.append(f"{k}:[{','.join(str(int(x)) for x in val)}]")
        elif k in ("row_mirror", "row_half_mirror", "idxen", "offen", "tfe"):
            if val:
                toks.append(k)
        else:
            raise AsmError(f"{mn}: unknown modifier {k!r}")
    return toks


class Program:
    """A sequence of instructions and labels, encoded as they are added."""

    def __init__(self):
        self.items: list[Encoded] = []
        self.labels: dict[str, int] = {}
        self.pc = 0

    def label(self, name: str) -> "Program":
        if name in self.labels:
            raise AsmError(f"label {name!r} defined twice")
        self.labels[name] = self.pc
        return self

    def emit(self, mnemonic: str, *operands, **mods) -> "Program":
        if mnemonic == "s_waitcnt" and not operands:
            cnt = " ".join(f"{k}({mods.pop(k)})" for k in ("vmcnt", "expcnt", "lgkmcnt") if k in mods)
            operands = (cnt or "0",)
        args = [_arg(x, mnemonic, i) for i, x in enumerate(operands)]
        enc = asm.encode_args(mnemonic, args, _mod_tokens(mnemonic, mods))
        self._add(enc)
        return self

    def vopd(self, x: tuple, y: tuple) -> "Program":
        """Dual issue: p.vopd(("v_dual_mul_f32", v[0], v[1], v[2]), ("v_dual_add_f32", v[3], v[4], v[5]))."""
        xa = [_arg(o, x[0], i) for i, o in enumerate(x[1:])]
        ya = [_arg(o, y[0], i) for i, o in enumerate(y[1:])]
        self._add(asm.encode_vopd(x[0], xa, y[0], ya))
        return self

    def _add(self, enc: Encoded):
        enc.line = len(self.items) + 1
        self.items.append(enc)
        self.pc += enc.size

    def __getattr__(self, name: str):
        if name.startswith(("s_", "v_", "ds_", "global_", "scratch_", "flat_", "buffer_")):
            return lambda *ops, **mods: self.emit(name, *ops, **mods)
        raise AttributeError(name)

    def disassemble(self) -> list[str]:
        from rdna3.disasm import disassemble
        return disassemble(self.assemble())

    def assemble(self) -> bytes:
        # finish() patches label fields in place; work on copies so assemble() can run twice
        items = [replace(e, fields=dict(e.fields)) for e in self.items]
        return asm.finish(items, self.labels)
