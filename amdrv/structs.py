"""Codec over the struct descriptions generated into amdrv/autogen (little-endian throughout).

    from amdrv import structs
    from amdrv.autogen import ucode
    hdr = structs.get(ucode, "common_firmware_header")
    hdr.size, hdr.fields
    v = hdr.unpack_from(buf, offset=0)    # StructValue: v.ucode_version, v["crc32"], v.as_dict()
    raw = hdr.pack(ucode_version=3)       # missing fields are 0

Nested structs decode to StructValue, arrays to tuples (nested tuples for 2-D arrays), bitfields to
their values. A flexible array member (`x[]`) decodes to () in unpack_from; read its elements with
`unpack_flex(buf, count, offset)`. In a union every member is decoded from the same bytes; pack writes
the given members in declaration order (a later one overwrites an earlier one where they overlap).
"""
from __future__ import annotations


import struct as _struct
from types import ModuleType

__all__ = ["UnknownName", "Struct", "StructValue", "FieldInfo", "get", "enum", "enum_name"]

class UnknownName(KeyError):
    """An unknown struct, field or enum name (a KeyError whose message reads normally)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


_FMT_SIZE = {c: _struct.calcsize("<" + c) for c in "bBhHiIqQfd"}


class FieldInfo:
    """One field: name, byte offset, type (format char or Struct), dims, bits (shift, width, nbytes)."""

    __slots__ = ("name", "offset", "type", "dims", "bits", "size", "_codec")

    def __init__(self, name, offset, type_, dims, bits):
        self.name = name
        self.offset = offset
        self.type = type_
        self.dims = tuple(dims)
        self.bits = bits
        count = 1
        for d in self.dims:
            count *= d
        esize = type_.size if isinstance(type_, Struct) else _FMT_SIZE[type_]
        self.size = esize * count
        self._codec = None if isinstance(type_, Struct) else _struct.Struct(
            "<" + (str(count) if self.dims else "") + type_)

    @property
    def is_flexible(self) -> bool:
        return 0 in self.dims

    def __repr__(self):
        t = self.type.name if isinstance(self.type, Struct) else self.type
        extra = f" dims={self.dims}" if self.dims else ""
        extra += f" bits={self.bits}" if self.bits else ""
        return f"<field {self.name} @{self.offset} {t}{extra}>"


class StructValue:
    """Decoded struct: attribute and item access, as_dict(), equality with other StructValues."""

    __slots__ = ("_struct", "_values")

    def __init__(self, struct_: "Struct", values: dict):
        object.__setattr__(self, "_struct", struct_)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{self._struct.name} has no field {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError("StructValue is read-only; use Struct.pack(**changes) to build new bytes")

    def __getitem__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{self._struct.name} has no field {name!r}") from None

    def __contains__(self, name):
        return name in self._values

    def __iter__(self):
        return iter(self._values)

    def keys(self):
        return self._values.keys()

    def __eq__(self, other):
        if isinstance(other, StructValue):
            return self._struct is other._struct and self._values == other._values
        return NotImplemented

    def __hash__(self):
        return hash((self._struct.name, tuple(self._values.items())))

    def as_dict(self) -> dict:
        """Plain dict; nested structs become dicts, arrays stay tuples (of dicts for struct arrays)."""
        def conv(v):
            if isinstance(v, StructValue):
                return v.as_dict()
            if isinstance(v, tuple):
                return tuple(conv(x) for x in v)
            return v
        return {k: conv(v) for k, v in self._values.items()}

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{self._struct.name}({inner})"


class Struct:
    """A struct or union layout from an autogen module."""

    def __init__(self, name: str, size: int, align: int, kind: str, fields: list[FieldInfo], module: str):
        self.name = name
        self.size = size
        self.align = align
        self.kind = kind
        self.module = module
        self.field_info = {f.name: f for f in fields}
        self.fields = tuple(f.name for f in fields)
        flex = [f for f in fields if f.is_flexible]
        self.flex = flex[-1] if flex else None

    def __repr__(self):
        return f"<{self.kind} {self.name} size={self.size} from {self.module}>"

    def offset(self, name: str) -> int:
        return self._field(name).offset

    def field(self, name: str) -> FieldInfo:
        return self._field(name)

    def _field(self, name: str) -> FieldInfo:
        f = self.field_info.get(name)
        if f is None:
            close = _close(name, self.fields, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownName(f"{self.kind} {self.name} has no field {name!r}{hint}")
        return f

    # ---- decoding
    def _need(self, buf, offset: int, size: int, what: str) -> None:
        have = len(buf) - offset
        if offset < 0 or have < size:
            raise ValueError(f"{what}: needs {size} bytes at offset {offset}, buffer has {max(have, 0)} "
                             f"available ({len(buf)} total)")

    def unpack_from(self, buf, offset: int = 0) -> StructValue:
        self._need(buf, offset, self.size, f"{self.kind} {self.name} ({self.module})")
        return self._unpack(buf, offset)

    def unpack(self, buf) -> StructValue:
        return self.unpack_from(buf, 0)

    def _unpack(self, buf, offset: int) -> StructValue:
        vals = {}
        for f in self.field_info.values():
            vals[f.name] = self._get(f, buf, offset + f.offset)
        return StructValue(self, vals)

    def _get(self, f: FieldInfo, buf, at: int):
        if f.is_flexible:
            return ()
        if f.bits is not None:
            shift, width, nbytes = f.bits
            raw = int.from_bytes(bytes(buf[at:at + nbytes]), "little")
            v = (raw >> shift) & ((1 << width) - 1)
            if f.type in "bhiq" and v >> (width - 1):
                v -= 1 << width
            return v
        if isinstance(f.type, Struct):
            sub = f.type
            items = [sub._unpack(buf, at + i * sub.size) for i in range(self._count(f))]
        else:
            items = f._codec.unpack_from(buf, at)
            if not f.dims:
                return items[0]
        return self._shape(list(items), f.dims) if f.dims else items[0]

    @staticmethod
    def _count(f: FieldInfo) -> int:
        n = 1
        for d in f.dims:
            n *= d
        return n

    @staticmethod
    def _shape(flat: list, dims: tuple):
        if len(dims) == 1:
            return tuple(flat)
        step = len(flat) // dims[0]
        return tuple(Struct._shape(flat[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0]))

    def unpack_flex(self, buf, count: int, offset: int = 0) -> tuple:
        """Elements of the flexible array member (e.g. psp_fw_bin[count]) of a struct at offset."""
        f = self.flex
        if f is None:
            raise ValueError(f"{self.kind} {self.name} has no flexible array member")
        elem = f.type.size if isinstance(f.type, Struct) else _FMT_SIZE[f.type]
        at = offset + f.offset
        self._need(buf, at, elem * count, f"{self.name}.{f.name}[{count}]")
        if isinstance(f.type, Struct):
            return tuple(f.type._unpack(buf, at + i * elem) for i in range(count))
        return _struct.unpack_from(f"<{count}{f.type}", buf, at)

    # ---- encoding
    def pack(self, **values) -> bytes:
        buf = bytearray(self.size)
        self._pack_into(buf, 0, values)
        return bytes(buf)

    def pack_into(self, buf, offset: int = 0, **values) -> None:
        """Writes the given fields (others untouched) into buf at offset."""
        self._need(buf, offset, self.size, f"{self.kind} {self.name} ({self.module})")
        self._pack_into(buf, offset, values)

    def _pack_into(self, buf, offset: int, values, path: str | None = None) -> None:
        if isinstance(values, StructValue):
            values = values._values
        for name in values:
            if name not in self.field_info:
                try:
                    self._field(name)
                except UnknownName as e:
                    raise UnknownName(f"{path}: {e}" if path else str(e)) from None
        path = path or self.name
        for f in self.field_info.values():
            if f.name in values:
                self._put(f, buf, offset + f.offset, values[f.name], f"{path}.{f.name}")

    def _put(self, f: FieldInfo, buf, at: int, value, path: str) -> None:
        if f.is_flexible:
            if value not in ((), [], None):
                raise ValueError(f"{path}: flexible array member cannot be packed by pack(); "
                                 "append its elements yourself")
            return
        if f.bits is not None:
            shift, width, nbytes = f.bits
            v = _check_int(value, width, f.type in "bhiq", path)
            mask = ((1 << width) - 1) << shift
            raw = int.from_bytes(bytes(buf[at:at + nbytes]), "little")
            raw = (raw & ~mask) | ((v << shift) & mask)
            buf[at:at + nbytes] = raw.to_bytes(nbytes, "little")
            return
        if f.dims:
            flat = _flatten(value, f.dims, path)
            esize = f.type.size if isinstance(f.type, Struct) else _FMT_SIZE[f.type]
            for i, item in enumerate(flat):
                self._put_one(f.type, buf, at + i * esize, item, f"{path}[{i}]")
        else:
            self._put_one(f.type, buf, at, value, path)

    @staticmethod
    def _put_one(t, buf, at: int, value, path: str) -> None:
        if isinstance(t, Struct):
            if not isinstance(value, (dict, StructValue)):
                raise TypeError(f"{path}: expected a dict or StructValue for {t.name}, got {type(value).__name__}")
            t._pack_into(buf, at, value, path)
            return
        if t in "fd":
            _struct.pack_into("<" + t, buf, at, float(value))
            return
        size = _FMT_SIZE[t]
        v = _check_int(value, 8 * size, t in "bhiq", path)
        _struct.pack_into("<" + t, buf, at, v)


def _check_int(value, bits: int, signed: bool, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int.__index__(value)  # numpy integers and the like
        except TypeError:
            raise TypeError(f"{path}: expected an integer, got {type(value).__name__}") from None
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        kind = "signed" if signed else "unsigned"
        raise ValueError(f"{path}: value {value:#x} out of range for {bits}-bit {kind} field "
                         f"[{lo}, {hi}]")
    return value


def _flatten(value, dims: tuple, path: str) -> list:
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = list(value)
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{path}: expected a sequence of up to {dims[0]} items, got {type(value).__name__}")
    if len(value) > dims[0]:
        raise ValueError(f"{path}: {len(value)} items do not fit an array of {dims[0]}")
    if len(dims) == 1:
        return list(value)
    out = []
    for i, sub in enumerate(value):
        out.extend(_flatten(sub, dims[1:], f"{path}[{i}]"))
        stride = 1
        for d in dims[1:]:
            stride *= d
        out.extend([0] * (stride * (i + 1) - len(out)))
    return out


# ---------------------------------------------------------------- lookup

def _close(name, pool, n=3, cutoff=0.6):
    import difflib  # only on the error path: keeps `import amdrv.structs` cheap
    return difflib.get_close_matches(name, pool, n=n, cutoff=cutoff)


_CACHE: dict = {}


def _module_name(module) -> str:
    return getattr(module, "__name__", repr(module))


def get(module: ModuleType, name: str) -> Struct:
    """The Struct for STRUCTS[name] (or a typedef alias) of an autogen module."""
    key = (_module_name(module), name)
    s = _CACHE.get(key)
    if s is not None and s._source_table is module.STRUCTS:
        return s
    table = getattr(module, "STRUCTS", None)
    if table is None:
        raise TypeError(f"{_module_name(module)} is not a generated struct module (no STRUCTS)")
    real = getattr(module, "ALIASES", {}).get(name, name)
    if real not in table:
        skipped = getattr(module, "SKIPPED", {})
        if real in skipped:
            raise UnknownName(f"{_module_name(module)}: struct {name!r} has no device layout: {skipped[real]}")
        pool = list(table) + list(getattr(module, "ALIASES", {}))
        close = _close(name, pool, n=5, cutoff=0.5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise UnknownName(f"{_module_name(module)} has no struct {name!r}{hint}")
    size, align, kind, raw_fields = table[real]
    fields = []
    for spec in raw_fields:
        fname, off, t = spec[0], spec[1], spec[2]
        dims = spec[3] if len(spec) > 3 else ()
        bits = spec[4] if len(spec) > 4 else None
        ftype = get(module, t) if len(t) > 1 else t
        fields.append(FieldInfo(fname, off, ftype, dims, bits))
    s = Struct(real, size, align, kind, fields, _module_name(module))
    s._source_table = module.STRUCTS
    _CACHE[key] = s
    return s


def enum(module: ModuleType, name: str) -> dict:
    """{enumerator: value} of a generated enum, in declaration order."""
    enums = getattr(module, "ENUMS", {})
    if name not in enums:
        close = _close(name, list(enums), n=5, cutoff=0.5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise UnknownName(f"{_module_name(module)} has no enum {name!r}{hint}")
    return {k: getattr(module, k) for k in enums[name]}


def enum_name(module: ModuleType, enum_: str, value: int) -> str | None:
    """The first enumerator of enum_ with this value, or None."""
    for k, v in enum(module, enum_).items():
        if v == value:
            return k
    return None
