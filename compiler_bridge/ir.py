"""The kernel IR: what the scheduler emits and every code generator (C, LLVM, RDNA3) consumes.

A `Kernel` is
    name     a C identifier, unique per distinct kernel (the scheduler derives it from a content hash)
    bufs     buffer parameters, `BufParam(name, dtype, size, access)`: dtype "float32" or "int32"
             (4-byte elements, little endian), size in elements, access "r" (only loaded) or "w" (only
             stored); a buffer is never both loaded and stored by one kernel, and distinct buffer
             parameters never alias
    scalars  scalar parameters, `ScalarParam(name, dtype)`, dtype "float32" or "int32"
    size     the number of work items n (>= 1)
    body     a tuple of `Op`s in SSA form, run once per work item

Launch. The launch is 1-D over n work items; work item i (0 <= i < n) sees `gid` == i. A code
generator picks a local (workgroup) size L (the C backend ignores it; GPU generators use
`launch_dims(kernel)`: L = min(64, n) rounded up to a multiple of 32, one wave32 or two), launches
ceil(n / L) workgroups of L items, and the items with gid >= n do nothing at all (they must not load or
store). Arguments, in order: one pointer per buffer parameter (the buffer's device address), then one
32-bit value per scalar parameter. Each work item runs the body once, top to bottom; there is no
communication between work items (no barriers, no atomics, no local memory): a store by one item is
never read by another in the same kernel, and no two items store to the same element.

Values. Every op except "store" defines one SSA value, named by its `id` (a non-negative int unique in
the kernel, nested bodies included), of dtype "float32", "int32" or "bool". An op may use only values
defined before it, in its own body or an enclosing one. Buffers never hold bool: the scheduler casts
bool to int32 (0/1) before storing and casts back after loading.

Ops (`Op(id, op, dtype, srcs, arg, body)`; srcs are value ids):
    gid                     int32, the work item index
    const    arg=value      a Python float/int/bool of the op's dtype (float consts may be inf/-inf/nan)
    param    arg=k          the k-th scalar parameter (its dtype)
    load     srcs=(idx,) arg=k    element idx of buffer k; the scheduler guarantees 0 <= idx < bufs[k].size
                            for every item that runs (masked reads are emitted as where(mask, idx, 0),
                            load, where(mask, x, 0)), so a load never needs bounds checks
    store    srcs=(idx, val) arg=k   buffer k element idx = val (val's dtype == the buffer's); id is -1,
                            dtype "void"
    unary    neg exp log sqrt relu sigmoid tanh   (float32; neg and relu also int32)
    binary   add sub mul max     (both srcs and result of one dtype, float32 or int32)
             div                 (float32 only)
             idiv mod            (int32 only; C semantics: idiv truncates toward zero, mod has the sign
                                  of the dividend; the scheduler emits them only with a non-negative
                                  dividend and a positive constant divisor, so generators may use
                                  unsigned or shift/mask forms; a divisor 0 is never emitted)
    compare  cmplt cmple cmpeq cmpne   srcs of one dtype (float32/int32/bool), result bool (IEEE: any
                                  comparison with NaN is false except cmpne, which is true)
    where    srcs=(cond, a, b)   cond bool, a and b of the result dtype: cond ? a : b (both evaluated;
                                  they have no side effects)
    cast     srcs=(x,)           to the op's dtype: float->int32 truncates toward zero (out of range or
                                  NaN: unspecified); int32->float32 rounds to nearest; bool->number gives
                                  0/1; number->bool is x != 0 (NaN -> true); same dtype: identity
    reduce   arg=Reduce(kind, length, var, result), body=(ops)
                                  kind "sum" or "max", length >= 1 (a Python int), var the id of the loop
                                  index (int32, 0..length-1; defined by the reduce itself, no op defines
                                  it), result the id of a value defined in body. The reduce's value is
                                  the sum (identity 0) or max (identity -inf, or INT32_MIN for int32) of
                                  result over var = 0, 1, ..., length-1; the op's dtype is the result's.
                                  Bodies may nest reduces. Values defined in a body are not visible after it.

Float rules. float32 throughout, no float64 intermediates are required. add/sub/mul/div and sqrt are
expected to be correctly rounded (as in C with -ffp-contract=off); generators may fuse a*b+c into an FMA
and use hardware approximations for exp, log, tanh, sigmoid and div within a relative error of 2e-6
(plus denormal flushing). Reductions: the C reference sums in index order; other generators may reorder.
max of a NaN and a number is unspecified. relu(x) = max(x, 0); sigmoid(x) = 1 / (1 + exp(-x)).
int32 add/sub/mul wrap modulo 2**32.

Stability: this IR is a contract between the scheduler and the generators; changes are additive only and
are listed here.  (changes: none yet)
"""
from __future__ import annotations

import operator

from dataclasses import dataclass
from typing import Iterator

DTYPES = ("float32", "int32", "bool")
INT32_MAX = 2**31 - 1
BUF_DTYPES = ("float32", "int32")
UNARY = ("neg", "exp", "log", "sqrt", "relu", "sigmoid", "tanh")
BINARY = ("add", "sub", "mul", "div", "max", "idiv", "mod")
COMPARE = ("cmplt", "cmple", "cmpeq", "cmpne")
OPS = ("gid", "const", "param", "load", "store", "where", "cast", "reduce") + UNARY + BINARY + COMPARE
FLOAT_ONLY = ("exp", "log", "sqrt", "sigmoid", "tanh", "div")
INT_ONLY = ("idiv", "mod")


class IRError(ValueError):
    """A kernel that breaks the IR's rules; the message names the kernel and the op."""


@dataclass(frozen=True)
class BufParam:
    name: str
    dtype: str
    size: int
    access: str  # "r" or "w"


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: str


@dataclass(frozen=True)
class Reduce:
    kind: str     # "sum" or "max"
    length: int
    var: int      # id of the loop index value
    result: int   # id of the value (in the body) that is reduced


@dataclass(frozen=True)
class Op:
    id: int
    op: str
    dtype: str
    srcs: tuple[int, ...] = ()
    arg: object = None
    body: tuple["Op", ...] = ()


@dataclass(frozen=True)
class Kernel:
    name: str
    bufs: tuple[BufParam, ...]
    scalars: tuple[ScalarParam, ...]
    size: int
    body: tuple[Op, ...]

    def walk(self) -> Iterator[Op]:
        """Every op, nested bodies included, in program order (a reduce before its body)."""
        return _walk(self.body)

    def __str__(self) -> str:
        return format_kernel(self)


def _walk(body) -> Iterator[Op]:
    for op in body:
        yield op
        if op.body:
            yield from _walk(op.body)


def launch_dims(kernel: Kernel, max_local: int = 64) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(workgroups, local size) for hcq's prog(global_size=..., local_size=...): L = min(max_local, n)
    rounded up to a multiple of 32 (whole wave32s), ceil(n / L) workgroups."""
    local = min(max_local, -(-kernel.size // 32) * 32)
    return (-(-kernel.size // local), 1, 1), (local, 1, 1)


# ----------------------------------------------------------------------------------------------- builder
class Builder:
    """Builds a kernel body op by op; each method returns the new value's id.

        b = Builder()
        i = b.gid(); x = b.load(0, i, "float32"); b.store(1, i, b.unary("exp", x))
        k = b.kernel("exp_k", bufs, n)
    """

    def __init__(self):
        self._next = 0
        self._stack: list[list[Op]] = [[]]
        self.dtypes: dict[int, str] = {}
        self._vars: list[int] = []

    def _emit(self, op: str, dtype: str, srcs=(), arg=None, body=(), new_id: int | None = None) -> int:
        vid = self._new() if new_id is None else new_id
        self._stack[-1].append(Op(vid, op, dtype, tuple(srcs), arg, tuple(body)))
        self.dtypes[vid] = dtype
        return vid

    def _new(self) -> int:
        self._next += 1
        return self._next - 1

    def gid(self) -> int:
        return self._emit("gid", "int32")

    def const(self, value, dtype: str) -> int:
        value = float(value) if dtype == "float32" else bool(value) if dtype == "bool" else int(value)
        return self._emit("const", dtype, arg=value)

    def param(self, k: int, dtype: str) -> int:
        return self._emit("param", dtype, arg=k)

    def load(self, buf: int, idx: int, dtype: str) -> int:
        return self._emit("load", dtype, (idx,), buf)

    def store(self, buf: int, idx: int, val: int) -> None:
        self._stack[-1].append(Op(-1, "store", "void", (idx, val), buf))

    def unary(self, op: str, x: int) -> int:
        return self._emit(op, self.dtypes[x], (x,))

    def binary(self, op: str, a: int, b: int) -> int:
        return self._emit(op, self.dtypes[a], (a, b))

    def compare(self, op: str, a: int, b: int) -> int:
        return self._emit(op, "bool", (a, b))

    def where(self, c: int, a: int, b: int) -> int:
        return self._emit("where", self.dtypes[a], (c, a, b))

    def cast(self, x: int, dtype: str) -> int:
        return x if self.dtypes[x] == dtype else self._emit("cast", dtype, (x,))

    def begin_reduce(self) -> int:
        """Opens a reduce body; returns the loop index id. Close it with end_reduce."""
        var = self._new()
        self.dtypes[var] = "int32"
        self._stack.append([])
        self._vars.append(var)
        return var

    def end_reduce(self, kind: str, length: int, result: int) -> int:
        body = self._stack.pop()
        var = self._vars.pop()
        return self._emit("reduce", self.dtypes[result], arg=Reduce(kind, int(length), var, result), body=body)

    def kernel(self, name: str, bufs, size: int, scalars=()) -> Kernel:
        assert len(self._stack) == 1, "unclosed reduce"
        k = Kernel(name, tuple(bufs), tuple(scalars), int(size), tuple(self._stack[0]))
        validate(k)
        return k


# ------------------------------------------------------------------------------------------- printer
def format_kernel(k: Kernel) -> str:
    lines = [f"kernel {k.name} size={k.size}"]
    for i, b in enumerate(k.bufs):
        lines.append(f"  buf{i} {b.name}: {b.dtype}[{b.size}] {b.access}")
    for i, s in enumerate(k.scalars):
        lines.append(f"  param{i} {s.name}: {s.dtype}")
    _format_body(k.body, lines, "  ")
    return "\n".join(lines)


def _format_body(body, lines, ind):
    for op in body:
        srcs = ", ".join(f"%{s}" for s in op.srcs)
        if op.op == "store":
            lines.append(f"{ind}store buf{op.arg}[%{op.srcs[0]}] = %{op.srcs[1]}")
        elif op.op == "reduce":
            r = op.arg
            lines.append(f"{ind}%{op.id}: {op.dtype} = reduce.{r.kind} %{r.var} < {r.length} {{")
            _format_body(op.body, lines, ind + "  ")
            lines.append(f"{ind}}} -> %{r.result}")
        elif op.op == "load":
            lines.append(f"{ind}%{op.id}: {op.dtype} = load buf{op.arg}[{srcs}]")
        else:
            arg = "" if op.arg is None else f" {op.arg!r}"
            lines.append(f"{ind}%{op.id}: {op.dtype} = {op.op}{arg}{' ' if srcs else ''}{srcs}")


# ----------------------------------------------------------------------------------------- validator
def _fits_int32(v) -> bool:
    try:
        return -INT32_MAX - 1 <= operator.index(v) <= INT32_MAX
    except TypeError:
        return False


def validate(k: Kernel) -> None:
    """Raises IRError when k breaks a rule in this module's docstring."""
    def err(msg, op=None):
        where = f" at {op.op} %{op.id}" if op is not None else ""
        raise IRError(f"kernel {k.name}{where}: {msg}")

    if not k.name.isidentifier():
        err("name is not an identifier")
    if k.size < 1:
        err(f"size {k.size} < 1")
    # gid, indices and loop counters are int32: past 2**31 - 1 they wrap, and loads and stores land elsewhere
    if k.size > INT32_MAX:
        err(f"size {k.size} work items is more than int32 indices reach ({INT32_MAX}); split the tensor")
    for b in k.bufs:
        if b.dtype not in BUF_DTYPES or b.access not in ("r", "w") or b.size < 1:
            err(f"bad buffer parameter {b}")
        if b.size > INT32_MAX + 1:
            err(f"buffer {b.name} of {b.size} elements is more than int32 indices reach ({INT32_MAX + 1}); split it")
    for s in k.scalars:
        if s.dtype not in BUF_DTYPES:
            err(f"bad scalar parameter {s}")
    seen: set[int] = set()

    def check(body, scope: dict[int, str]):
        scope = dict(scope)
        for op in body:
            if op.op not in OPS:
                err("unknown op", op)
            for s in op.srcs:
                if s not in scope:
                    err(f"uses %{s} before it is defined (or out of its scope)", op)
            sd = [scope[s] for s in op.srcs]
            if op.op == "store":
                if len(sd) != 2 or not 0 <= op.arg < len(k.bufs):
                    err("store needs (idx, val) and a buffer index", op)
                b = k.bufs[op.arg]
                if b.access != "w" or sd[0] != "int32" or sd[1] != b.dtype:
                    err(f"store to {b} with index {sd[0]} and value {sd[1]}", op)
                continue
            if op.id < 0 or op.id in seen:
                err("id is negative or defined twice", op)
            seen.add(op.id)
            if op.dtype not in DTYPES:
                err(f"bad dtype {op.dtype}", op)
            o, d = op.op, op.dtype
            if o == "gid" and d != "int32" or o == "param" and (not 0 <= op.arg < len(k.scalars)
                                                                  or k.scalars[op.arg].dtype != d):
                err("gid must be int32; param needs a scalar index and its dtype", op)
            elif o == "load":
                if len(sd) != 1 or sd[0] != "int32" or not 0 <= op.arg < len(k.bufs):
                    err("load needs one int32 index and a buffer index", op)
                b = k.bufs[op.arg]
                if b.access != "r" or b.dtype != d:
                    err(f"load from {b} as {d}", op)
            elif o in UNARY + BINARY:
                n = 1 if o in UNARY else 2
                if len(sd) != n or any(x != d for x in sd) or d == "bool":
                    err(f"operands {sd} for a {d} result", op)
                if o in FLOAT_ONLY and d != "float32" or o in INT_ONLY and d != "int32":
                    err(f"{o} is not defined for {d}", op)
            elif o in COMPARE:
                if len(sd) != 2 or sd[0] != sd[1] or d != "bool":
                    err(f"compare of {sd} to {d}", op)
            elif o == "where":
                if len(sd) != 3 or sd[0] != "bool" or sd[1] != d or sd[2] != d:
                    err(f"where of {sd} to {d}", op)
            elif o == "cast" and len(sd) != 1:
                err("cast takes one operand", op)
            elif o == "const" and d == "int32" and not _fits_int32(op.arg):
                err(f"int32 constant {op.arg!r} is not an integer in int32's range (generators would wrap it)", op)
            elif o == "reduce":
                r = op.arg
                if not isinstance(r, Reduce) or r.kind not in ("sum", "max") or not 1 <= r.length <= INT32_MAX:
                    err(f"bad reduce {r}", op)
                if r.var in seen or r.var in scope:
                    err("loop index id reused", op)
                seen.add(r.var)
                inner = check(op.body, {**scope, r.var: "int32"})
                if r.result not in inner or inner[r.result] != d or d == "bool":
                    err(f"result %{r.result} is not a {d} value of the body", op)
            scope[op.id] = d
        return scope

    check(k.body, {})
    if not any(op.op == "store" for op in k.walk()):
        err("stores nothing")
