"""The decoded form of one gfx11 (RDNA3) instruction, shared by the disassembler, the assembler's
builder and the wave executor.

An `Instruction` keeps both views of the machine word: `fields`, the raw bit fields of its format
(named as in the encoding tables of rdna3/opcodes_gfx11.py), and `operands`, the operands in
LLVM's assembly order (destinations first, then sources), each already classified. `mods` holds the
modifiers that are not operands (clamp, omod, op_sel, offsets, cache bits, waitcnt counters...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

# Operand kinds.
SGPR = "sgpr"        # s0..s105; index = register number, count = registers in the range
VGPR = "vgpr"        # v0..v255
TTMP = "ttmp"        # ttmp0..ttmp15 (encoded as 108..123)
SPECIAL = "special"  # vcc_lo/vcc_hi/vcc, exec_lo/exec_hi/exec, m0, null, scc, src_* ; see Operand.name
ICONST = "iconst"    # inline integer constant -16..64; value = the constant
FCONST = "fconst"    # inline float constant (0.5, 1.0, ..., 1/(2*pi)); value = its bits at operand width
LITERAL = "literal"  # 32-bit literal dword following the instruction; value = the bits the operand sees
IMM = "imm"          # an immediate field inside the instruction word (simm16, offsets, ...); value signed as LLVM prints it
LABEL = "label"      # a branch target: value = signed simm16 in dwords; `target` on Instruction is the byte address

REGISTER_KINDS = (SGPR, VGPR, TTMP)
CONSTANT_KINDS = (ICONST, FCONST, LITERAL)


@dataclass(frozen=True)
class Operand:
    """One operand. `code` is its raw encoding in the source/destination field where it has one
    (0..511 for 9-bit sources with VGPRs at 256+, 0..127 for scalar fields, 0..255 for VGPR-only
    fields), else -1."""
    kind: str
    index: int = 0          # register number (SGPR/VGPR/TTMP/SPECIAL base), or constant value
    count: int = 1          # registers covered (1 for 32-bit, 2 for 64-bit, ...)
    name: str = ""          # field name in the encoding: vdst, sdst, src0, vaddr, sbase, ...; for SPECIAL also `reg`
    reg: str = ""           # for SPECIAL: vcc_lo, vcc, exec_lo, exec, m0, null, scc, src_scc, ...
    value: int = 0          # constant/literal/immediate value (see kinds above)
    code: int = -1
    neg: bool = False       # as LLVM shows them; Instruction.mods has the raw bits
    abs: bool = False

    @property
    def is_reg(self) -> bool:
        return self.kind in REGISTER_KINDS or self.kind == SPECIAL

    @property
    def is_const(self) -> bool:
        return self.kind in CONSTANT_KINDS


@dataclass(frozen=True, eq=False)
class Instruction:
    """One decoded instruction.

    op: LLVM mnemonic without encoding suffix ("v_add_f32", "s_load_b128"); `enc_suffix` is "_e32",
        "_e64", "_dpp", "_e64_dpp" exactly as LLVM prints it ("" when LLVM prints none).
    fmt: SOP1 SOP2 SOPK SOPC SOPP SMEM VOP1 VOP2 VOP3 VOP3SD VOP3P VOPC VOPD DS FLAT GLOBAL SCRATCH MUBUF.
    opcode: the opcode number inside the format (VOP3 numbering for VOP3/VOP3SD).
    size: bytes, literal included.
    fields: raw bit fields of the encoding (name -> int), the literal under "literal" and the DPP dword
        under "dpp" when present.
    operands: in LLVM syntax order; destinations first (`ndst` of them), then sources.
    mods: clamp, omod, neg, abs (bit i = source i), op_sel, op_sel_hi, neg_hi, offset, glc, slc, dlc,
        DPP controls, ... (docs/isa.md lists them).
    vopd_y: for VOPD, the Y half as its own Instruction (fmt "VOPD"); this object is the X half.
    offset: byte offset of the instruction in the code it was decoded from.
    """
    op: str
    fmt: str
    opcode: int
    size: int
    fields: dict
    operands: tuple
    ndst: int = 0
    mods: dict = field(default_factory=dict)
    enc_suffix: str = ""
    vopd_y: Optional["Instruction"] = None
    offset: int = 0

    @property
    def dsts(self) -> tuple:
        return self.operands[:self.ndst]

    @property
    def srcs(self) -> tuple:
        return self.operands[self.ndst:]

    @property
    def literal(self) -> Optional[int]:
        return self.fields.get("literal")

    @property
    def target(self) -> Optional[int]:
        """Byte offset a branch goes to (SOPP branches), else None."""
        for o in self.operands:
            if o.kind == LABEL:
                return self.offset + 4 + 4 * o.value
        return None

    def __str__(self) -> str:
        from rdna3.disasm import format_instruction
        return format_instruction(self)
