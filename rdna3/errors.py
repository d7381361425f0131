"""Errors of the ISA package; each names the instruction or word at fault."""


class IsaError(ValueError):
    """Base of the ISA errors."""


class DecodeError(IsaError):
    """Bytes that are not a gfx11 instruction of a supported format."""


class AsmError(IsaError):
    """Assembly text or a builder call that does not make a valid gfx11 instruction."""
