"""Register access on top of the generated tables in amdrv/autogen/regs_<block>.py.

amdgpu addresses a register as byte (ip_base[base_index] + dword_offset) * 4 in the MMIO BAR. The
tables give offset and base index; the bases of each IP instance only come from IP discovery at run
time, so a table is bound to them here (IPBlock), never at generation:

    gc = IPBlock(load("gc_11_0_0"), bases=discovered_gc_bases, mmio=bar5, name="GC")
    if gc.GRBM_STATUS.decode()["GUI_ACTIVE"]: ...
    gc.CP_MEC_CNTL.update(MEC_ME1_HALT=1)        # read-modify-write of one field

One table serves several instances: MP0 (PSP) and MP1 (SMU) both use mp_13_0_0, each bound to its
own bases.
"""
from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple, Protocol

from amdrv import autogen


class MMIO(Protocol):
    """What register access needs from a BAR view: 32-bit reads and writes at byte addresses."""

    def read32(self, addr: int) -> int: ...

    def write32(self, addr: int, value: int) -> None: ...


class RegisterNotFound(KeyError, AttributeError):
    """No such register in a table. An AttributeError too, so hasattr/getattr on an IPBlock work."""

    def __str__(self) -> str:
        return str(self.args[0])


class FieldError(ValueError):
    """A field name a register does not have, or a value that does not fit its field."""


class Field(NamedTuple):
    shift: int
    width: int

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.shift


class RegisterDef:
    """One register of a table: where it is and its fields; encodes and decodes values (no I/O)."""

    __slots__ = ("name", "block", "offset", "base_idx", "space", "fields")

    def __init__(self, name: str, block: str, offset: int, base_idx: int | None, space: str,
                 fields: Mapping[str, Field]):
        self.name, self.block, self.offset, self.base_idx = name, block, offset, base_idx
        self.space = space  # "mmio", or the header's address space such as "ix:sqind"
        self.fields = fields

    def bits(self, **fields: int) -> tuple[int, int]:
        """(mask of the named fields, their values in place), checked before any I/O is done."""
        mask = bits = 0
        for fname, fval in fields.items():
            f = self.fields.get(fname)
            if f is None:
                raise FieldError(f"{self.block} {self.name} has no field {fname!r}; its fields: "
                                 f"{', '.join(self.fields) or '(none)'}")
            if not isinstance(fval, int) or fval < 0 or fval >> f.width:
                raise FieldError(f"{self.block} {self.name}.{fname} is {f.width} bit(s) wide "
                                 f"(0..{(1 << f.width) - 1}); {fval!r} does not fit")
            mask |= f.mask
            bits = (bits & ~f.mask) | (fval << f.shift)
        return mask, bits

    def encode(self, value: int = 0, /, **fields: int) -> int:
        """value with the named fields replaced."""
        mask, bits = self.bits(**fields)
        return (value & ~mask) | bits

    def decode(self, value: int) -> dict[str, int]:
        return {n: (value >> f.shift) & ((1 << f.width) - 1) for n, f in self.fields.items()}

    def __repr__(self) -> str:
        where = f"offset {self.offset:#x} base {self.base_idx}" if self.space == "mmio" else \
            f"{self.space} {self.offset:#x}"
        return f"<{self.block} {self.name} {where}, {len(self.fields)} fields>"


def _rows(text: str) -> tuple[list[str], dict[str, int]]:
    """Splits a four-column table string; name -> index of its row's first token. Values stay
    strings until asked for, so a table costs one split however many registers it has."""
    tokens = text.split()
    return tokens, dict(zip(tokens[0::4], range(0, len(tokens), 4)))


class RegisterTable:
    """The registers of one generated block module, looked up by name."""

    def __init__(self, module):
        self.block: str = module.BLOCK
        self._layouts = module.LAYOUTS.split("\n")
        self._spaces = module.SPACES
        self._regs, self._reg_rows = _rows(module.REGS)
        self._module = module  # NON_MMIO is split only when asked for: the driver rarely needs it
        self._defs: dict[str, RegisterDef] = {}
        self._parsed: dict[int, Mapping[str, Field]] = {}  # layouts are parsed on first use

    def _fields(self, layout: int) -> Mapping[str, Field]:
        out = self._parsed.get(layout)
        if out is None:
            fields = {}
            for tok in self._layouts[layout].split():
                name, shift, width = tok.split(":")
                fields[name] = Field(int(shift), int(width))
            out = self._parsed[layout] = MappingProxyType(fields)  # shared by every register using it
        return out

    def __getitem__(self, name: str) -> RegisterDef:
        d = self._defs.get(name)
        if d is None:
            i = self._reg_rows.get(name)
            if i is None:
                raise self._not_found(name)
            t = self._regs
            d = RegisterDef(name, self.block, int(t[i + 1], 16), int(t[i + 2]), "mmio",
                            self._fields(int(t[i + 3])))
            self._defs[name] = d
        return d

    @functools.cached_property
    def _non_mmio_rows(self) -> tuple[list[str], dict[str, int]]:
        return _rows(self._module.NON_MMIO)

    def non_mmio(self, name: str) -> RegisterDef:
        """A register outside the MMIO BAR (gc's ix index spaces, nbio's PCI config/SMN aliases)."""
        t, rows = self._non_mmio_rows
        i = rows.get(name)
        if i is None:
            if name in self._reg_rows:
                raise RegisterNotFound(f"{name} is an MMIO register of {self.block}; look it up with "
                                       f"table[{name!r}]")
            raise self._not_found(name)
        return RegisterDef(name, self.block, int(t[i + 2], 16), None, self._spaces[int(t[i + 1])],
                           self._fields(int(t[i + 3])))

    def __contains__(self, name: object) -> bool:
        return name in self._reg_rows

    @functools.cached_property
    def power_on_values(self) -> Mapping[str, int] | None:
        """Register name -> power-on value for every MMIO register whose value after reset is not 0, from
        upstream's `<block>_default.h` (tools/gentables/regs.py); None when upstream publishes no such
        header for the block (nothing is known about its power-on values)."""
        text = getattr(self._module, "DEFAULTS", None)
        if text is None:
            return None
        tokens = text.split()
        return MappingProxyType({n: int(v, 16) for n, v in zip(tokens[0::2], tokens[1::2])})

    def __len__(self) -> int:
        return len(self._reg_rows)

    def names(self) -> list[str]:
        """MMIO register names in header order."""
        return list(self._reg_rows)

    def _not_found(self, name: str) -> RegisterNotFound:
        other = self._non_mmio_rows[1]
        if name in other:
            d = self.non_mmio(name)
            return RegisterNotFound(f"{name} is not an MMIO register of {self.block}: it is at "
                                    f"{d.offset:#x} in {d.space}; look it up with RegisterTable.non_mmio")
        # difflib over all ~11k nbio names takes ~300 ms; names sharing half the words of the asked
        # one are enough to find a typo's intended name, at a few ms.
        names = dict.fromkeys([*self._reg_rows, *other])
        words = set(name.split("_"))
        near = [n for n in names if 2 * len(words.intersection(n.split("_"))) >= len(words)]
        close = difflib.get_close_matches(name, near or list(names), n=5)
        hint = f"; close names: {', '.join(close)}" if close else ""
        return RegisterNotFound(f"{self.block} has no register {name!r}{hint}")

    def __repr__(self) -> str:
        return f"<RegisterTable {self.block}: {len(self)} MMIO registers>"


def blocks() -> list[str]:
    """The register blocks that have a generated table."""
    return sorted(m.name[5:] for m in pkgutil.iter_modules(autogen.__path__) if m.name.startswith("regs_"))


@functools.lru_cache(maxsize=None)
def load(block: str) -> RegisterTable:
    """The table of a block such as "gc_11_0_0", imported once and shared."""
    if block not in blocks():
        raise LookupError(f"no register table for {block!r}; generated blocks: {', '.join(blocks())}")
    return RegisterTable(importlib.import_module(f"amdrv.autogen.regs_{block}"))


class Register:
    """A register bound to one IP instance's MMIO address."""

    __slots__ = ("defn", "addr", "mmio")

    def __init__(self, defn: RegisterDef, addr: int, mmio: MMIO):
        self.defn, self.addr, self.mmio = defn, addr, mmio

    @property
    def name(self) -> str:
        return self.defn.name

    @property
    def fields(self) -> Mapping[str, Field]:
        return self.defn.fields

    def read(self) -> int:
        return self.mmio.read32(self.addr)

    def write(self, value: int | None = None, /, **fields: int) -> int:
        """Writes value (0 if only fields are given) with the named fields replaced; returns it."""
        if value is None and not fields:
            raise TypeError(f"{self.name}.write() needs a value or fields")
        if value is not None and not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"{self.defn.block} {self.name}: {value:#x} is not a 32-bit value")
        value = self.defn.encode(value or 0, **fields)
        self.mmio.write32(self.addr, value)
        return value

    def update(self, old: int | None = None, /, **fields: int) -> int:
        """Read-modify-write: only the named fields change; returns the value written. old: the register's value,
        read already (read_all, with nothing written to it since), else it is read now."""
        if not fields:
            raise TypeError(f"{self.name}.update() needs at least one field")
        mask, bits = self.defn.bits(**fields)
        value = ((self.read() if old is None else old) & ~mask) | bits
        self.mmio.write32(self.addr, value)
        return value

    def encode(self, **fields: int) -> int:
        return self.defn.encode(0, **fields)

    def decode(self, value: int | None = None) -> dict[str, int]:
        """Field values of value, or of the register as read now."""
        return self.defn.decode(self.read() if value is None else value)

    def __repr__(self) -> str:
        return f"<{self.defn.block} {self.name} @ {self.addr:#x}>"


def read_all(registers) -> list[int]:
    """The registers' values, in order, read as one batch where they share an MMIO view that batches
    (BAR.read32_many: one USB round trip for several); for reads that depend on nothing written between them."""
    registers = list(registers)
    mmio = registers[0].mmio if registers else None
    if mmio is not None and all(r.mmio is mmio for r in registers) and hasattr(mmio, "read32_many"):
        return list(mmio.read32_many([r.addr for r in registers]))
    return [r.read() for r in registers]


class IPBlock:
    """A register table bound to one IP instance: its segment bases (dwords, from IP discovery) and
    the MMIO view. Registers are attributes (`blk.GRBM_STATUS`) or `blk.reg(name)`."""

    def __init__(self, table: RegisterTable, bases, mmio: MMIO, name: str | None = None):
        self.table, self.bases, self.mmio = table, tuple(bases), mmio
        self.name = name or table.block

    def reg(self, name: str) -> Register:
        r = self.__dict__.get(name)
        if isinstance(r, Register):
            return r
        try:
            d = self.table[name]
        except RegisterNotFound as e:
            raise RegisterNotFound(f"{self.name}: {e}") from None
        if d.base_idx >= len(self.bases):
            raise LookupError(f"{self.name} {name} uses base index {d.base_idx} but the block was bound "
                              f"to {len(self.bases)} base(s) {[hex(b) for b in self.bases]}; "
                              f"check what IP discovery reported")
        r = Register(d, (self.bases[d.base_idx] + d.offset) * 4, self.mmio)
        self.__dict__[name] = r  # later attribute access skips __getattr__
        return r

    def __getattr__(self, name: str) -> Register:
        if name.startswith("_"):  # copy/pickle probing before __init__ ran
            raise AttributeError(name)
        return self.reg(name)

    def __dir__(self):
        return [*super().__dir__(), *self.table.names()]

    def __repr__(self) -> str:
        return f"<IPBlock {self.name} ({self.table.block}) bases {[hex(b) for b in self.bases]}>"
