"""The gfx11 (RDNA3) instruction set: opcode tables (generated), decoder, disassembler, assembler
and a typed program builder.

    decode(code, offset=0) -> Instruction      one instruction at a byte offset
    decode_all(code) -> list[Instruction]      every instruction of a code blob
    disassemble(code, arch="gfx1100") -> list[str]   LLVM syntax
    assemble(text, arch="gfx1100") -> bytes           LLVM syntax
"""
from rdna3.instruction import Instruction, Operand

__all__ = ["Instruction", "Operand", "decode", "decode_all", "disassemble", "assemble", "IsaError"]


def __getattr__(name):
    # Lazy so that importing the data model does not load the tables.
    if name in ("decode", "decode_all", "disassemble", "DecodeError"):
        from rdna3 import disasm
        return getattr(disasm, name)
    if name in ("assemble", "AsmError"):
        from rdna3 import asm
        return getattr(asm, name)
    if name == "IsaError":
        from rdna3.errors import IsaError
        return IsaError
    raise AttributeError(name)
