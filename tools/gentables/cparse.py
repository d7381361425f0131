"""A small C-header reader for the amdgpu headers: macros, enums, structs and unions.

It understands what those headers contain and nothing more: object- and function-like #defines,
#if/#ifdef/#ifndef/#elif/#else (little-endian x86-64 kernel build: __BIG_ENDIAN is not defined),
#pragma pack, integer constant expressions (with casts, sizeof and enum constants), enums with
implicit and explicit values, and struct/union definitions with fixed-width and plain C integer
types, arrays whose sizes are expressions, nested and anonymous structs/unions, bitfields,
flexible array members and __attribute__((packed)). Layout follows the x86-64 SysV ABI as GCC
applies it (natural alignment; bitfields never straddle a unit of their declared type unless packed).

Anything it cannot lay out (pointers, kernel types it has not seen) is reported, never guessed.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

__all__ = ["CError", "Header", "Record", "Field", "Scalar"]


class CError(Exception):
    """Something in a header that this reader cannot express."""


# ---------------------------------------------------------------- lexing

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|\d+\.\d*(?:[eE][-+]?\d+)?[fF]?|\d+[uUlL]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<op><<=|>>=|\.\.\.|->|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|\#\#|[-+*/%&|^~!<>=?:;,.(){}\[\]\#])
""", re.VERBOSE)


def tokenize(text: str) -> list[str]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise CError(f"cannot tokenize near {text[pos:pos + 30]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append(m.group())
    return out


def strip_comments(text: str) -> str:
    """Removes /* */ and // comments (keeping line structure) and joins continued lines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return re.sub(r"\\\n", " ", "".join(out))


def _int_literal(tok: str) -> int:
    t = tok.rstrip("uUlL")
    if t.startswith(("0x", "0X")):
        return int(t, 16)
    if len(t) > 1 and t.startswith("0") and t.isdigit():
        return int(t, 8)
    if not t.isdigit():
        raise CError(f"not an integer literal: {tok}")
    return int(t)


# ---------------------------------------------------------------- types

@dataclass(frozen=True)
class Scalar:
    name: str
    size: int
    signed: bool
    fmt: str  # struct module code

    @property
    def align(self) -> int:
        return self.size


_SCALARS = {}
for _names, _size, _signed, _fmt in [
    (("uint8_t", "u8", "__u8", "unsigned char", "bool", "_Bool", "uchar"), 1, False, "B"),
    (("int8_t", "s8", "__s8", "char", "signed char"), 1, True, "b"),
    (("uint16_t", "u16", "__u16", "__le16", "unsigned short", "unsigned short int", "ushort"), 2, False, "H"),
    (("int16_t", "s16", "__s16", "short", "short int", "signed short"), 2, True, "h"),
    (("uint32_t", "u32", "__u32", "__le32", "unsigned int", "unsigned", "uint", "unsigned long int"), 4, False, "I"),
    (("int32_t", "s32", "__s32", "int", "signed int", "signed"), 4, True, "i"),
    (("uint64_t", "u64", "__u64", "__le64", "unsigned long long", "unsigned long", "unsigned long long int",
      "size_t", "uintptr_t", "ulong"), 8, False, "Q"),
    (("int64_t", "s64", "__s64", "long long", "long", "long int", "long long int", "ssize_t"), 8, True, "q"),
    (("float",), 4, True, "f"),
    (("double",), 8, True, "d"),
]:
    for _n in _names:
        _SCALARS[_n] = Scalar(_n, _size, _signed, _fmt)
# words that may combine into a builtin type name
_TYPE_WORDS = {"unsigned", "signed", "char", "short", "int", "long", "float", "double", "_Bool"}
_QUALIFIERS = {"const", "volatile", "static", "extern", "inline", "register", "__iomem", "__user",
               "__force", "__rcu", "__bitwise"}
_PACKED_WORDS = {"__packed"}


@dataclass
class Member:
    name: str | None           # None: anonymous struct/union member
    type: object               # Scalar | Record | EnumRef | Unknown | Pointer
    dims: tuple = ()           # array dimensions; 0 marks a flexible array member
    bits: int | None = None    # bitfield width


@dataclass
class EnumRef:
    name: str


@dataclass
class Unknown:
    name: str


@dataclass
class Pointer:
    to: str


@dataclass
class Field:
    """One laid-out field: byte offset, scalar format or record name, array dims, bitfield position."""
    name: str
    offset: int
    type: object               # Scalar or Record
    dims: tuple = ()
    bits: tuple | None = None  # (shift, width, nbytes) read little-endian from offset


@dataclass
class Record:
    kind: str                  # "struct" | "union"
    name: str                  # tag, typedef name or synthesized parent.member
    members: list = field(default_factory=list)
    pack: int | None = None    # #pragma pack value in force (None: natural)
    packed: bool = False       # __attribute__((packed))
    source: str = ""
    _layout: tuple | None = None

    def layout(self, hdr: "Header") -> tuple:
        """Returns (size, align, [Field]); raises CError if any member cannot be laid out."""
        if self._layout is None:
            self._layout = _lay_out(self, hdr)
        return self._layout


def _cap(align: int, rec: Record) -> int:
    if rec.packed:
        return 1
    if rec.pack:
        return min(align, rec.pack)
    return align


def _resolve(t, hdr: "Header"):
    """Returns (size, align, Scalar|Record) of a member type."""
    if isinstance(t, Scalar):
        return t.size, t.align, t
    if isinstance(t, Record):
        size, align, _ = t.layout(hdr)
        return size, align, t
    if isinstance(t, EnumRef):
        vals = hdr.enums.get(t.name, {}).values()
        s = _SCALARS["int"] if any(v < 0 for v in vals) or not vals else _SCALARS["unsigned int"]
        if vals and max(vals) > 0xFFFFFFFF:
            raise CError(f"enum {t.name} does not fit 32 bits")
        return s.size, s.align, s
    if isinstance(t, Pointer):
        raise CError(f"pointer member ({t.to} *) has no device layout")
    raise CError(f"unknown type {t.name}")


def _lay_out(rec: Record, hdr: "Header") -> tuple:
    fields: list[Field] = []
    bitpos = 0            # struct: next free bit
    size = 0              # union: largest member
    max_align = 1
    for m in rec.members:
        msize, malign, mtype = _resolve(m.type, hdr)
        align = _cap(malign, rec)
        count = 1
        for d in m.dims:
            count *= d
        if m.bits is not None:
            if not isinstance(mtype, Scalar):
                raise CError(f"{rec.name}.{m.name}: bitfield of non-integer type")
            unit = msize * 8
            if m.bits > unit:
                raise CError(f"{rec.name}.{m.name}: bitfield wider than its type")
            start = 0 if rec.kind == "union" else bitpos
            if m.bits == 0:
                if rec.kind == "struct":
                    bitpos = -(-bitpos // unit) * unit
                continue
            natural = align == malign
            if natural and start // unit != (start + m.bits - 1) // unit:
                start = -(-start // unit) * unit
            if natural:
                off = (start // unit) * msize
                nbytes = msize
            else:
                off = start // 8
                nbytes = -(-((start % 8) + m.bits) // 8)
            if m.name is not None:
                fields.append(Field(m.name, off, mtype, (), (start - off * 8, m.bits, nbytes)))
            max_align = max(max_align, align)
            if rec.kind == "struct":
                bitpos = start + m.bits
            else:
                size = max(size, -(-m.bits // 8))
            continue
        off = 0
        if rec.kind == "struct":
            off = -(-(-(-bitpos // 8)) // align) * align
        total = msize * count
        if m.name is None:
            if not isinstance(mtype, Record):
                continue
            for f in mtype.layout(hdr)[2]:
                fields.append(Field(f.name, f.offset + off, f.type, f.dims, f.bits))
        else:
            fields.append(Field(m.name, off, mtype, tuple(m.dims)))
        max_align = max(max_align, align)
        if rec.kind == "struct":
            bitpos = (off + total) * 8
        else:
            size = max(size, total)
    if rec.kind == "struct":
        size = -(-bitpos // 8)
    size = -(-size // max_align) * max_align
    names = [f.name for f in fields]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CError(f"{rec.name}: duplicate member names {sorted(dup)}")
    return size, max_align, fields


# ---------------------------------------------------------------- macros and expressions

@dataclass
class Macro:
    name: str
    params: tuple | None       # None: object-like
    body: list                 # tokens
    source: str = ""


class _Expr:
    """Recursive-descent evaluator of C integer constant expressions over a token list."""

    _BINARY = [
        ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="),
        ("<<", ">>"), ("+", "-"), ("*", "/", "%"),
    ]

    def __init__(self, hdr: "Header", toks: list, depth: int = 0, args: dict | None = None):
        self.hdr = hdr
        self.toks = toks
        self.i = 0
        self.depth = depth
        self.args = args or {}

    def peek(self, k=0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self, want=None):
        t = self.peek()
        if t is None or (want is not None and t != want):
            raise CError(f"expected {want!r}, got {t!r} in {' '.join(map(str, self.toks))}")
        self.i += 1
        return t

    def run(self) -> int:
        v = self.cond()
        if self.peek() is not None:
            raise CError(f"trailing tokens {self.toks[self.i:]} in expression")
        return v

    def cond(self):
        c = self.binary(0)
        if self.peek() == "?":
            self.take()
            a = self.cond()
            self.take(":")
            b = self.cond()
            return a if c else b
        return c

    def binary(self, level):
        if level == len(self._BINARY):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.peek() in self._BINARY[level]:
            op = self.take()
            rhs = self.binary(level + 1)
            lhs = self._apply(op, lhs, rhs)
        return lhs

    @staticmethod
    def _apply(op, a, b):
        if op == "||": return int(bool(a) or bool(b))
        if op == "&&": return int(bool(a) and bool(b))
        if op == "|": return a | b
        if op == "^": return a ^ b
        if op == "&": return a & b
        if op == "==": return int(a == b)
        if op == "!=": return int(a != b)
        if op == "<": return int(a < b)
        if op == ">": return int(a > b)
        if op == "<=": return int(a <= b)
        if op == ">=": return int(a >= b)
        if op == "<<":
            if b < 0 or b > 127:
                raise CError(f"shift by {b}")
            return a << b
        if op == ">>": return a >> b
        if op == "+": return a + b
        if op == "-": return a - b
        if op == "*": return a * b
        if b == 0:
            raise CError("division by zero")
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if op == "/" else a - q * b

    def _type_name_at(self, k):
        """If tokens from k form a type name followed by ')', returns (type, end index)."""
        j = self.i + k
        words = []
        while j < len(self.toks) and self.toks[j] not in (")",):
            words.append(self.toks[j])
            j += 1
        if j >= len(self.toks):
            return None
        if not all(isinstance(w, str) for w in words):
            return None
        words = [w for w in words if w not in _QUALIFIERS]
        ptr = bool(words) and words[-1] == "*"
        words = [w for w in words if w != "*"]
        if not words:
            return None
        if words[0] in ("struct", "union", "enum") and len(words) == 2:
            return (words[0], words[1], ptr), j
        name = " ".join(words)
        if name in _SCALARS or (len(words) == 1 and words[0] in self.hdr.typedefs):
            return ("type", name, ptr), j
        return None

    def _sizeof(self, spec):
        kind, name, ptr = spec
        if ptr:
            return 8
        if kind in ("struct", "union"):
            rec = self.hdr.records.get(name)
            if rec is None:
                raise CError(f"sizeof({kind} {name}): not defined")
            return rec.layout(self.hdr)[0]
        if kind == "enum":
            return 4
        return _resolve(self.hdr.resolve_type_name(name), self.hdr)[0]

    def unary(self):
        t = self.peek()
        if t in ("-", "+", "~", "!"):
            self.take()
            v = self.unary()
            return {"-": -v, "+": v, "~": ~v, "!": int(not v)}[t]
        if t == "sizeof":
            self.take()
            if self.peek() == "(":
                spec = self._type_name_at(1)
                if spec:
                    self.i = spec[1] + 1
                    return self._sizeof(spec[0])
            raise CError("sizeof of an expression is not supported")
        if t == "(":
            spec = self._type_name_at(1)
            if spec:  # cast
                self.i = spec[1] + 1
                v = self.unary()
                kind, name, ptr = spec[0]
                if ptr or kind != "type":
                    return v
                s = _resolve(self.hdr.resolve_type_name(name), self.hdr)[2]
                if s.fmt in "fd":
                    raise CError("floating-point cast")
                v &= (1 << (8 * s.size)) - 1
                if s.signed and v >> (8 * s.size - 1):
                    v -= 1 << (8 * s.size)
                return v
            self.take("(")
            v = self.cond()
            self.take(")")
            return v
        return self.primary()

    def primary(self):
        t = self.take()
        if isinstance(t, int):
            return t
        if t[0].isdigit():
            return _int_literal(t)
        if t[0] == "'":
            body = t[1:-1]
            if len(body) == 1:
                return ord(body)
            raise CError(f"character literal {t}")
        if t == "defined":
            paren = self.peek() == "("
            if paren:
                self.take()
            name = self.take()
            if paren:
                self.take(")")
            return int(name in self.hdr.macros)
        if t in self.args:
            return self.args[t]
        return self.hdr.identifier_value(t, self)

    def call_args(self):
        """Reads '(' a, b, ... ')' and returns each argument's token list."""
        self.take("(")
        args, cur, depth = [], [], 0
        while True:
            t = self.take()
            if t == "(":
                depth += 1
            elif t == ")":
                if depth == 0:
                    args.append(cur)
                    return args
                depth -= 1
            elif t == "," and depth == 0:
                args.append(cur)
                cur = []
                continue
            cur.append(t)


# ---------------------------------------------------------------- the header model

class Header:
    """Everything read from one or more headers, in definition order."""

    PREDEFINED = {"__LITTLE_ENDIAN": "1234", "__KERNEL__": "1", "__linux__": "1", "__x86_64__": "1",
                  "CONFIG_64BIT": "1"}

    def __init__(self):
        self.macros: dict[str, Macro] = {}
        self.enums: dict[str, dict] = {}           # enum name -> {enumerator: value}
        self.enum_source: dict[str, str] = {}
        self.enumerators: dict[str, int] = {}
        self.records: dict[str, Record] = {}       # tag / synthesized name -> Record
        self.typedefs: dict[str, object] = {}      # typedef name -> type
        self.order: list[tuple] = []               # ("macro"|"enum"|"record"|"typedef", name, source)
        self.skipped: list[tuple] = []             # (name, reason)
        self._anon = 0
        for k, v in self.PREDEFINED.items():
            self.macros[k] = Macro(k, None, tokenize(v), "<predefined>")

    # ---- values
    def identifier_value(self, name: str, ev: _Expr) -> int:
        if name in self.enumerators:
            return self.enumerators[name]
        m = self.macros.get(name)
        if m is None:
            raise CError(f"undefined identifier {name}")
        if ev.depth > 40:
            raise CError(f"macro recursion through {name}")
        if m.params is None:
            return _Expr(self, m.body, ev.depth + 1, ev.args).run()
        if ev.peek() != "(":
            raise CError(f"function-like macro {name} used without arguments")
        args = ev.call_args()
        if len(args) == 1 and not args[0] and not m.params:
            args = []
        if len(args) != len(m.params):
            raise CError(f"{name} takes {len(m.params)} arguments, got {len(args)}")
        return _Expr(self, self.substitute(m, args), ev.depth + 1, ev.args).run()

    @staticmethod
    def substitute(m: Macro, args: list) -> list:
        """Token-level argument substitution, as the preprocessor does it (no re-parenthesizing)."""
        bind = dict(zip(m.params, args))
        out = []
        for t in m.body:
            if t in bind:
                out.extend(bind[t])
            elif t in ("#", "##"):
                raise CError(f"{m.name}: stringizing/pasting is not supported")
            else:
                out.append(t)
        return out

    def eval(self, toks, args: dict | None = None) -> int:
        return _Expr(self, list(toks), 0, args).run()

    def value(self, name: str) -> int:
        return self.eval([name])

    def resolve_type_name(self, name: str):
        seen = set()
        while name in self.typedefs and name not in seen:
            seen.add(name)
            t = self.typedefs[name]
            if isinstance(t, str):
                name = t
                continue
            return t
        if name in _SCALARS:
            return _SCALARS[name]
        return Unknown(name)

    # ---- function-like macros as bit fields
    def macro_field(self, name: str):
        """Expresses a function-like macro as bit fields of its arguments.

        Returns ((shift,) or (shift, width) for a one-argument macro that is just a (masked) shift,
        or (constant, ((param, shift, width-or-None), ...)) in general; raises CError when the
        macro is not an OR of shifted, masked arguments (checked on random probes).
        """
        m = self.macros[name]
        if not m.params:
            raise CError(f"{name} is not function-like")
        ones = (1 << 64) - 1

        def call(vals):
            return self.eval(self.substitute(m, [[v] for v in vals]))

        zero = [0] * len(m.params)
        const = call(zero)
        if const < 0:
            raise CError(f"{name}: negative result")
        specs = []
        for k, p in enumerate(m.params):
            probe = list(zero)
            probe[k] = ones
            r = call(probe)
            if r < 0 or r & const != const:
                raise CError(f"{name}: not an OR of fields")
            bits = r & ~const
            if bits == 0:
                raise CError(f"{name}: argument {p} does not reach the result")
            shift = (bits & -bits).bit_length() - 1
            run = bits >> shift
            width = run.bit_length()
            if run != (1 << width) - 1:
                raise CError(f"{name}: argument {p} is not a contiguous field")
            specs.append((p, shift, None if width >= 64 else width))
        rng = random.Random(name)
        for _ in range(16):
            vals = [rng.getrandbits(64) for _ in m.params]
            want = const
            for v, (_, shift, width) in zip(vals, specs):
                want |= (v if width is None else v & ((1 << width) - 1)) << shift
            if call(vals) != want:
                raise CError(f"{name}: arguments interact (not independent fields)")
        if len(specs) == 1 and const == 0:
            _, shift, width = specs[0]
            return (shift,) if width is None else (shift, width)
        return (const, tuple(specs))

    def macro_extractor(self, name: str) -> tuple:
        """Expresses a one-argument macro of the form ((x) >> shift) & mask as (shift, width)."""
        m = self.macros[name]
        if not m.params or len(m.params) != 1:
            raise CError(f"{name} is not a one-argument macro")

        def call(v):
            return self.eval(self.substitute(m, [[v]]))

        top = call((1 << 64) - 1)
        width = top.bit_length()
        if top <= 0 or top != (1 << width) - 1:
            raise CError(f"{name}: result is not a contiguous low field")
        shift = next((s for s in range(64) if call(1 << s)), None)
        if shift is None:
            raise CError(f"{name}: no input bit reaches the result")
        rng = random.Random(name)
        for _ in range(16):
            v = rng.getrandbits(64)
            if call(v) != (v >> shift) & ((1 << width) - 1):
                raise CError(f"{name}: not a shift-and-mask extractor")
        return (shift, width)

    # ---- reading
    def read(self, text: str, source: str, keep=lambda kind, name: True, records: bool = True) -> None:
        """Reads a header's text; later definitions of the same name replace earlier ones.

        records=False reads only macros and enums (for kernel-internal headers whose structs hold
        pointers, locks and lists and are of no use on the device side).
        """
        self._records_wanted = records
        code: list = []
        stack: list[list] = []     # [active, taken]
        pack_stack: list = []
        pack = None
        for line in strip_comments(text).split("\n"):
            s = line.strip()
            active = all(e[0] for e in stack)
            if s.startswith("#"):
                d = s[1:].strip()
                word = re.match(r"\w*", d).group()
                rest = d[len(word):].strip()
                if word in ("if", "ifdef", "ifndef"):
                    if not active:
                        stack.append([False, True])
                        continue
                    if word == "ifdef":
                        c = rest.split()[0] in self.macros
                    elif word == "ifndef":
                        c = rest.split()[0] not in self.macros
                    else:
                        c = self._pp_cond(rest)
                    stack.append([c, c])
                elif word == "elif":
                    e = stack[-1]
                    parent = all(x[0] for x in stack[:-1])
                    c = parent and not e[1] and self._pp_cond(rest)
                    e[0] = c
                    e[1] = e[1] or c
                elif word == "else":
                    e = stack[-1]
                    e[0] = not e[1]
                    e[1] = True
                elif word == "endif":
                    stack.pop()
                elif not active:
                    continue
                elif word == "define":
                    self._define(d[len("define"):], source, keep)
                elif word == "undef":
                    self.macros.pop(rest.split()[0], None)
                elif word == "pragma":
                    pm = re.match(r"pack\s*\(\s*(\w*)\s*(?:,\s*(\d+))?\s*\)", rest)
                    if pm:
                        arg, n = pm.group(1), pm.group(2)
                        if arg == "push":
                            pack_stack.append(pack)
                            pack = int(n) if n else pack
                        elif arg == "pop":
                            pack = pack_stack.pop() if pack_stack else None
                        else:
                            pack = int(arg) if arg else None
                        code.append(("pack", pack))
                continue
            if active and s:
                code.extend(tokenize(s))
        self._declarations(code, source, keep)

    def _pp_cond(self, expr: str) -> bool:
        toks = tokenize(expr)
        out = []
        i = 0
        while i < len(toks):  # resolve defined() before macro expansion; unknown names are 0
            t = toks[i]
            if t == "defined":
                paren = i + 1 < len(toks) and toks[i + 1] == "("
                name = toks[i + 2] if paren else toks[i + 1]
                out.append(str(int(name in self.macros)))
                i += 4 if paren else 2
                continue
            out.append(t)
            i += 1
        for j, t in enumerate(out):
            if re.match(r"[A-Za-z_]", t) and t not in self.macros and t not in self.enumerators:
                out[j] = "0"
        try:
            return bool(self.eval(out))
        except CError:
            return False

    def _define(self, rest: str, source: str, keep) -> None:
        m = re.match(r"\s*([A-Za-z_]\w*)(\([^)]*\))?", rest)
        if not m:
            return
        name = m.group(1)
        params = None
        if m.group(2) is not None:
            params = tuple(p.strip() for p in m.group(2)[1:-1].split(",") if p.strip())
        try:
            body = tokenize(rest[m.end():])
        except CError:
            body = ["<untokenizable>"]
        self.macros[name] = Macro(name, params, body, source)
        if keep("macro", name):
            self.order.append(("macro", name, source))

    # ---- declarations
    def _declarations(self, toks: list, source: str, keep) -> None:
        self._toks = toks
        self._src = source
        self._keep = keep
        self._pack = None
        i = 0
        n = len(toks)
        while i < n:
            t = toks[i]
            if isinstance(t, tuple):
                self._pack = t[1]
                i += 1
                continue
            if t == "typedef":
                if not self._records_wanted and toks[i + 1] != "enum":
                    i = self._skip_to_semicolon(i)
                    continue
                i = self._typedef(i + 1)
                continue
            if t in ("struct", "union", "enum"):
                j = self._skip_attrs(i + 1)
                if j < n and toks[j] == "{" or (j + 1 < n and toks[j + 1] == "{"):
                    if t != "enum" and not self._records_wanted:
                        i = self._skip_to_semicolon(i)
                        continue
                    typ, i = self._type_spec(i, None)
                    i = self._skip_to_semicolon(i)
                    continue
            if t == "{":
                i = self._skip_braces(i)
                continue
            i += 1

    def _skip_braces(self, i):
        depth = 0
        while i < len(self._toks):
            t = self._toks[i]
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return i

    def _skip_to_semicolon(self, i):
        depth = 0
        while i < len(self._toks):
            t = self._toks[i]
            if t in ("(", "{", "["):
                depth += 1
            elif t in (")", "}", "]"):
                depth -= 1
            elif t == ";" and depth == 0:
                return i + 1
            i += 1
        return i

    def _skip_attrs(self, i):
        """Skips __attribute__((...)) and friends; sets self._saw_packed when one says packed."""
        toks = self._toks
        while i < len(toks):
            t = toks[i]
            if t == "__attribute__" or t == "__aligned":
                j = i + 1
                depth = 0
                start = j
                while j < len(toks):
                    if toks[j] == "(":
                        depth += 1
                    elif toks[j] == ")":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                if "packed" in toks[start:j] or "__packed__" in toks[start:j]:
                    self._saw_packed = True
                i = j + 1
            elif t in _PACKED_WORDS:
                self._saw_packed = True
                i += 1
            elif t in _QUALIFIERS:
                i += 1
            else:
                return i
        return i

    def _typedef(self, i):
        typ, i = self._type_spec(i, None)
        # declarators: name, *name, name[N]; function pointer typedefs are skipped
        toks = self._toks
        while i < len(toks) and toks[i] != ";":
            i = self._skip_attrs(i)
            ptr = False
            while toks[i] == "*":
                ptr = True
                i += 1
            if toks[i] == "(":
                return self._skip_to_semicolon(i)
            name = toks[i]
            i += 1
            if i < len(toks) and toks[i] == "[":
                return self._skip_to_semicolon(i)
            t = Pointer(getattr(typ, "name", "?")) if ptr else typ
            self.typedefs[name] = t
            if isinstance(t, Record) and t.name.startswith("<anon"):
                self._rename_record(t.name, name)
                if self._keep("record", name):
                    self.order.append(("record", name, self._src))
            elif isinstance(t, EnumRef) and t.name.startswith("<anon"):
                old = t.name
                self.enums[name] = self.enums.pop(old)
                self.enum_source[name] = self.enum_source.pop(old)
                t.name = name
                self._rename_order("enum", old, name)
            elif self._keep("typedef", name):
                self.order.append(("typedef", name, self._src))
            i = self._skip_attrs(i)
            if toks[i] == ",":
                i += 1
        return i + 1

    def _rename_record(self, old, new, keep_self=False):
        """Renames a synthesized record and the tagless records nested in it (old.x -> new.x)."""
        if not keep_self:
            t = self.records.pop(old)
            t.name = new
            self.records[new] = t
        for rname in [r for r in self.records if r.startswith(old + ".")]:
            sub = self.records.pop(rname)
            sub.name = new + rname[len(old):]
            self.records[sub.name] = sub

    def _rename_order(self, kind, old, new):
        self.order = [(k, new if (k == kind and nm == old) else nm, s) for k, nm, s in self.order]

    def _type_spec(self, i, parent: str | None):
        """Parses a type specifier at i; returns (type, next index). Defines records/enums inline."""
        toks = self._toks
        i = self._skip_attrs(i)
        t = toks[i]
        if t in ("struct", "union"):
            self._saw_packed = False
            i = self._skip_attrs(i + 1)
            tag = None
            if toks[i] != "{":
                tag = toks[i]
                i += 1
            i = self._skip_attrs(i)
            if toks[i] != "{":
                rec = self.records.get(tag)
                return (rec if rec is not None else Unknown(f"{t} {tag}")), i
            name = tag
            if name is None:
                self._anon += 1
                name = f"<anon{self._anon}>"
            rec = Record(t, name, pack=self._pack, source=self._src)
            packed_before = self._saw_packed
            i = self._members(rec, i + 1)
            self._saw_packed = False
            i = self._skip_attrs(i)
            rec.packed = packed_before or self._saw_packed
            self.records[name] = rec
            if tag is not None and self._keep("record", name):
                self.order.append(("record", name, self._src))
            return rec, i
        if t == "enum":
            i += 1
            tag = None
            if toks[i] != "{":
                tag = toks[i]
                i += 1
            if toks[i] != "{":
                return EnumRef(tag), i
            name = tag
            if name is None:
                self._anon += 1
                name = f"<anon{self._anon}>"
            i = self._enum_body(name, i + 1)
            return EnumRef(name), i
        words = []
        while toks[i] in _TYPE_WORDS or toks[i] in _QUALIFIERS:
            if toks[i] in _TYPE_WORDS:
                words.append(toks[i])
            i += 1
        if words:
            key = " ".join(words)
            if key not in _SCALARS:
                raise CError(f"unknown builtin type {key}")
            return _SCALARS[key], i
        name = toks[i]
        return self.resolve_type_name(name), i + 1

    def _enum_body(self, name, i):
        toks = self._toks
        vals = {}
        nxt = 0
        while toks[i] != "}":
            ident = toks[i]
            i += 1
            if toks[i] == "=":
                j = i + 1
                depth = 0
                while not (depth == 0 and toks[j] in (",", "}")):
                    depth += toks[j] == "("
                    depth -= toks[j] == ")"
                    j += 1
                nxt = self.eval(toks[i + 1:j])
                i = j
            vals[ident] = nxt
            self.enumerators[ident] = nxt
            nxt += 1
            if toks[i] == ",":
                i += 1
        self.enums[name] = vals
        self.enum_source[name] = self._src
        if self._keep("enum", name):
            self.order.append(("enum", name, self._src))
        return i + 1

    def _members(self, rec: Record, i):
        toks = self._toks
        while toks[i] != "}":
            if isinstance(toks[i], tuple):
                i += 1
                continue
            typ, i = self._type_spec(i, rec.name)
            if toks[i] == ";":  # anonymous struct/union member
                if isinstance(typ, Record):
                    if typ.name.startswith("<anon"):  # its members are hoisted into rec
                        self._rename_record(typ.name, rec.name, keep_self=True)
                    rec.members.append(Member(None, typ))
                i += 1
                continue
            while True:
                i = self._skip_attrs(i)
                ptr = False
                while toks[i] == "*":
                    ptr = True
                    i = self._skip_attrs(i + 1)
                name = toks[i]
                i += 1
                dims = []
                while toks[i] == "[":
                    j = i + 1
                    depth = 0
                    while not (depth == 0 and toks[j] == "]"):
                        depth += toks[j] == "["
                        depth -= toks[j] == "]"
                        j += 1
                    dims.append(self.eval(toks[i + 1:j]) if j > i + 1 else 0)
                    i = j + 1
                bits = None
                if toks[i] == ":":
                    j = i + 1
                    while toks[j] not in (",", ";"):
                        j += 1
                    bits = self.eval(toks[i + 1:j])
                    i = j
                mtype = Pointer(getattr(typ, "name", "?")) if ptr else typ
                if isinstance(mtype, Record) and mtype.name.startswith("<anon"):
                    # a tagless struct/union with a declarator: name it after its parent
                    self._rename_record(mtype.name, f"{rec.name}.{name}")
                rec.members.append(Member(name, mtype, tuple(dims), bits))
                i = self._skip_attrs(i)
                if toks[i] == ",":
                    i += 1
                    continue
                break
            if toks[i] != ";":
                raise CError(f"{rec.name}: expected ';' after member, got {toks[i]!r}")
            i += 1
        return i + 1
