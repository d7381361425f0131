"""The lazy graph and the scheduler: graph nodes -> a list of kernels (compiler_bridge.ir).

Graph nodes (`Node`): "buffer" (data: numpy until realized, then a device buffer), "const" (one value
broadcast to a shape), elementwise ops (the ir unary/binary/compare names, "where", "cast"), "reduce"
(arg (kind, axes); the output keeps the reduced axes as size 1), and movement ops, which are views:
"reshape", "permute", "expand", "slice" (per axis start, step, length; negative steps allowed) and "pad"
(per axis (before, after), and a fill value). Movement never copies: rendering a node at an output index
turns each movement op into index arithmetic on the way down to the loads (pad becomes a validity mask:
where(valid, x, fill), with the index clamped so the load stays in bounds).

Fusion rules. A kernel is rooted at a realized node and computes one element of it per work item by
rendering the graph below it, down to buffers and other realized nodes, which are loaded. So:
  1. Elementwise chains and movement ops never make a kernel of their own: `(a*b+c).relu()` is one
     kernel, as is any view, pad or concatenate of it.
  2. Elementwise producers are fused into a reduction (rendered inside its loop): `(a*b).sum(1)` and
     matmul (`(a[:, :, None] * b[None]).sum(1)`) are one kernel each.
  3. Elementwise consumers of a reduction are fused after its loop when they use each reduced value once
     per output element: `(x.sum(1) * 2).exp()` is one kernel.
  4. A reduce node is realized (its own kernel, stored to a buffer) when it reaches a consumer through a
     broadcasting expand or from inside another reduce's loop (recomputing it per broadcast element or
     per loop trip would multiply its cost), or when it has more than one consumer. Other nodes with
     several consumers are recomputed in each kernel that uses them (within one kernel, a value at the
     same index is computed once).
  5. (in Tensor, before scheduling) A reduction of >= 4096 elements into fewer than 256 outputs becomes
     two: partials over ~sqrt(length) rows padded with the identity, then their reduction, so a GPU gets
     ~sqrt(length) work items instead of a handful.
  Consequences: `x - x.max(1, keepdims=True)` is 2 kernels; a row softmax
  (`e = (x - x.max(1, keepdims)).exp(); e / e.sum(1, keepdims)`) is SOFTMAX_KERNELS = 3; an MLP layer
  `relu(x @ w + b)` feeding another matmul is 1 kernel for the first matmul, and bias + relu ride in the
  next matmul's loop; softmax(x @ w) is 1 + 3 kernels.

Index arithmetic is simplified while it is emitted (constant folding, x*1, x+0, and idiv/mod removed
where value ranges prove them trivial, and (a*c + b) // c -> a for 0 <= b < c), so contiguous views cost
no division at all.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

from compiler_bridge import ir

SOFTMAX_KERNELS = 3
MAX_NAME_OPS = 4   # kernel names list at most this many ops (Lowering.op_words)
_VIEW_OPS = ("buffer", "const", "reshape", "permute", "expand", "slice", "pad")
_DTYPE_WORD = {"float32": "f32", "int32": "i32", "bool": "bool"}


class Node:
    """One lazy value: op, sources, argument, shape and dtype ("float32", "int32" or "bool"). A "buffer"
    node holds `data` (numpy, before upload) and/or `buffer` (a runtime.DeviceBuffer); any node gets a
    buffer when it is realized, and from then on is read like a buffer node."""
    __slots__ = ("op", "srcs", "arg", "shape", "dtype", "data", "buffer", "__weakref__")

    def __init__(self, op: str, srcs: tuple = (), arg=None, shape: tuple = (), dtype: str = "float32", data=None):
        self.op, self.srcs, self.arg, self.shape, self.dtype = op, tuple(srcs), arg, tuple(shape), dtype
        self.data = data
        self.buffer = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def is_buffer(self) -> bool:
        return self.op == "buffer" or self.buffer is not None

    def __repr__(self) -> str:
        return f"<Node {self.op} {self.shape} {self.dtype}{' realized' if self.buffer is not None else ''}>"


@dataclass
class ScheduleItem:
    """One kernel: `kernel` writes `out` (its buffer parameter 0) and reads `inputs` (parameters 1..)."""
    kernel: ir.Kernel
    out: Node
    inputs: list[Node]


# ------------------------------------------------------------------------------------- realization
def _realize_set(roots: list[Node]) -> list[Node]:
    """The nodes to compute as kernels, dependencies first (fusion rule 4)."""
    realize: set[int] = {id(r) for r in roots if not r.is_buffer}
    nodes: dict[int, Node] = {id(r): r for r in roots}
    while True:
        consumers: dict[int, int] = {}
        seen_edges: set[tuple[int, int]] = set()
        visited: set[tuple[int, bool]] = set()
        changed = False

        def walk(n: Node, expanded: bool):
            nonlocal changed
            key = (id(n), expanded)
            if key in visited:
                return
            visited.add(key)
            for s in n.srcs:
                if (id(n), id(s)) not in seen_edges:
                    seen_edges.add((id(n), id(s)))
                    consumers[id(s)] = consumers.get(id(s), 0) + 1
                nodes[id(s)] = s
                if s.is_buffer:
                    continue
                if id(s) in realize:
                    continue
                grow = n.op == "expand" and any(a != b for a, b in zip(s.shape, n.shape))
                under = expanded or grow or n.op == "reduce"
                if s.op == "reduce" and under:
                    realize.add(id(s))
                    changed = True
                    continue
                walk(s, under)

        for rid in list(realize):
            walk(nodes[rid], False)
        for nid, c in consumers.items():
            n = nodes[nid]
            if c > 1 and n.op == "reduce" and not n.is_buffer and nid not in realize:
                realize.add(nid)
                changed = True
        if not changed:
            break
    order: list[Node] = []
    done: set[int] = set()

    def post(n: Node):
        if id(n) in done:
            return
        done.add(id(n))
        for s in n.srcs:
            if not s.is_buffer:
                post(s)
        if id(n) in realize:
            order.append(n)

    for r in roots:
        post(r)
    return order


def schedule(roots: list[Node]) -> list[ScheduleItem]:
    """The kernels that compute roots (in dependency order); realized nodes and buffers are inputs."""
    order = _realize_set(roots)
    pending = {id(n) for n in order}
    return [_lower(n, pending) for n in order]


# --------------------------------------------------------------------------------------- lowering
class _Emit:
    """ir.Builder with CSE, constant folding and value ranges for int32 index arithmetic."""

    def __init__(self):
        self.b = ir.Builder()
        self.cse: dict = {}
        self.rng: dict[int, tuple[int, int]] = {}
        self.defs: dict[int, tuple] = {}
        self.consts: dict[int, object] = {}

    def scope(self) -> dict:
        """What a reduce body must not leak: values it defines are out of scope after it."""
        return dict(self.cse)

    def restore(self, saved: dict) -> None:
        self.cse = saved

    def const(self, v, dtype: str) -> int:
        key = ("const", dtype, repr(v))
        if key not in self.cse:
            i = self.b.const(v, dtype)
            self.cse[key] = i
            self.consts[i] = self.b._stack[-1][-1].arg
            if dtype == "int32":
                self.rng[i] = (int(v), int(v))
        return self.cse[key]

    def op(self, name: str, *srcs: int, dtype: str | None = None) -> int:
        if all(s in self.consts for s in srcs) and name in ("add", "sub", "mul", "idiv", "mod", "max", "neg") \
                and self.b.dtypes[srcs[0]] == "int32":
            v = [int(self.consts[s]) for s in srcs]
            r = {"add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1], "mul": lambda: v[0] * v[1],
                 "idiv": lambda: int(v[0] / v[1]), "mod": lambda: int(math.fmod(v[0], v[1])),
                 "max": lambda: max(v), "neg": lambda: -v[0]}[name]()
            return self.const(r, "int32")
        if self.b.dtypes.get(srcs[0]) == "int32" and name in ("add", "sub", "mul", "idiv", "mod"):
            simple = self._simplify(name, *srcs)
            if simple is not None:
                return simple
        key = (name, dtype, srcs)
        if key in self.cse:
            return self.cse[key]
        if name in ir.COMPARE:
            i = self.b.compare(name, *srcs)
        elif name == "where":
            i = self.b.where(*srcs)
        elif name == "cast":
            i = self.b.cast(srcs[0], dtype)
        elif name in ir.UNARY:
            i = self.b.unary(name, *srcs)
        else:
            i = self.b.binary(name, *srcs)
        self.cse[key] = i
        self.defs[i] = (name, srcs)
        if self.b.dtypes[i] == "int32":
            self.rng[i] = self._range(name, srcs)
        return i

    def _range(self, name, srcs) -> tuple[int, int]:
        r = [self.rng.get(s, (-2**31, 2**31 - 1)) for s in srcs]
        if name == "add":
            return r[0][0] + r[1][0], r[0][1] + r[1][1]
        if name == "sub":
            return r[0][0] - r[1][1], r[0][1] - r[1][0]
        if name == "mul":
            c = [a * b for a in r[0] for b in r[1]]
            return min(c), max(c)
        if name == "idiv" and r[0][0] >= 0 and r[1][0] > 0:
            return r[0][0] // r[1][1], r[0][1] // r[1][0]
        if name == "mod" and r[0][0] >= 0 and r[1][0] > 0:
            return 0, min(r[0][1], r[1][1] - 1)
        if name == "max":
            return max(r[0][0], r[1][0]), max(r[0][1], r[1][1])
        if name == "where":
            return min(r[1][0], r[2][0]), max(r[1][1], r[2][1])
        return -2**31, 2**31 - 1

    def _simplify(self, name, a, b) -> int | None:
        cb = self.consts.get(b)
        ca = self.consts.get(a)
        if name in ("add", "sub") and cb == 0 or name == "mul" and cb == 1 or name == "idiv" and cb == 1:
            return a
        if name == "add" and ca == 0 or name == "mul" and ca == 1:
            return b
        if name == "mul" and (ca == 0 or cb == 0) or name == "mod" and cb == 1:
            return self.const(0, "int32")
        if name == "add":  # (x // c) * c + x % c -> x
            da, db = self.defs.get(a), self.defs.get(b)
            if da and db and da[0] == "mul" and db[0] == "mod":
                dq = self.defs.get(da[1][0])
                if dq and dq[0] == "idiv" and dq[1] == db[1] and da[1][1] == db[1][1]:
                    return db[1][0]
        if name in ("idiv", "mod") and cb is not None and cb > 0:
            lo, hi = self.rng.get(a, (-1, 0))
            if lo >= 0 and hi < cb:
                return a if name == "mod" else self.const(0, "int32")
            d = self.defs.get(a)
            if d and d[0] == "add":  # (x*cb + y) with 0 <= y < cb
                for x, y in (d[1], d[1][::-1]):
                    dx = self.defs.get(x)
                    ylo, yhi = self.rng.get(y, (-1, 0))
                    if dx and dx[0] == "mul" and self.consts.get(dx[1][1]) == cb and 0 <= ylo and yhi < cb \
                            and self.rng.get(dx[1][0], (-1, 0))[0] >= 0:
                        return dx[1][0] if name == "idiv" else y
            if d and d[0] == "mul" and self.consts.get(d[1][1]) == cb and self.rng.get(d[1][0], (-1, 0))[0] >= 0:
                return d[1][0] if name == "idiv" else self.const(0, "int32")
        return None


def _unflatten(e: _Emit, flat: int, shape) -> list[int]:
    idx, stride = [], math.prod(shape)
    for n in shape:
        stride //= n
        idx.append(e.op("mod", e.op("idiv", flat, e.const(stride, "int32")), e.const(n, "int32")))
    return idx


def _flatten(e: _Emit, idx, shape) -> int:
    flat = e.const(0, "int32")
    for i, n in zip(idx, shape):
        flat = e.op("add", e.op("mul", flat, e.const(n, "int32")), i)
    return flat


class _Lowering:
    def __init__(self, root: Node, pending: set[int]):
        self.e = _Emit()
        self.root = root
        self.pending = pending
        self.inputs: list[Node] = []
        self.memo: dict = {}

    def load(self, n: Node, idx) -> int:
        if n not in self.inputs:
            self.inputs.append(n)
        k = 1 + self.inputs.index(n)
        e = self.e
        flat = _flatten(e, idx, n.shape)
        key = ("load", k, flat)
        if key not in e.cse:
            e.cse[key] = e.b.load(k, flat, "float32" if n.dtype == "float32" else "int32")
        v = e.cse[key]
        return e.op("cmpne", v, e.const(0, "int32")) if n.dtype == "bool" else v

    def render(self, n: Node, idx: tuple[int, ...]) -> int:
        key = (id(n), idx)
        if key in self.memo:
            return self.memo[key]
        v = self._render(n, idx)
        self.memo[key] = v
        return v

    def _render(self, n: Node, idx) -> int:
        e = self.e
        if n is not self.root and (n.is_buffer or id(n) in self.pending):
            return self.load(n, idx)
        op = n.op
        if op == "const":
            return e.const(n.arg, n.dtype)
        if op in ir.UNARY + ir.BINARY + ir.COMPARE or op == "where":
            return e.op(op, *(self.render(s, idx) for s in n.srcs))
        if op == "cast":
            return e.op("cast", self.render(n.srcs[0], idx), dtype=n.dtype)
        if op == "reshape":
            src = n.srcs[0]
            kept = [i for i, s in zip(idx, n.shape) if s != 1]
            if [s for s in n.shape if s != 1] == [s for s in src.shape if s != 1]:
                it = iter(kept)
                zero = e.const(0, "int32")
                return self.render(src, tuple(next(it) if s != 1 else zero for s in src.shape))
            return self.render(src, tuple(_unflatten(e, _flatten(e, idx, n.shape), src.shape)))
        if op == "permute":
            inv = [0] * len(n.arg)
            for i, p in enumerate(n.arg):
                inv[p] = i
            return self.render(n.srcs[0], tuple(idx[inv[d]] for d in range(len(n.arg))))
        if op == "expand":
            src = n.srcs[0]
            zero = e.const(0, "int32")
            return self.render(src, tuple(zero if s == 1 and o != 1 else i for i, s, o in zip(idx, src.shape, n.shape)))
        if op == "slice":
            return self.render(n.srcs[0], tuple(
                e.op("add", e.op("mul", i, e.const(step, "int32")), e.const(start, "int32"))
                for i, (start, step, _) in zip(idx, n.arg)))
        if op == "pad":
            pads, fill = n.arg
            src = n.srcs[0]
            valid, sidx = None, []
            for i, (before, _), s in zip(idx, pads, src.shape):
                if before == 0 and e.rng[i][1] < s:
                    sidx.append(i)
                    continue
                j = e.op("sub", i, e.const(before, "int32"))
                ok = e.op("cmple", e.const(0, "int32"), j)
                ok2 = e.op("cmplt", j, e.const(s, "int32"))
                both = e.op("where", ok, ok2, e.const(False, "bool"))
                valid = both if valid is None else e.op("where", valid, both, e.const(False, "bool"))
                sidx.append(j)
            if valid is None:
                return self.render(src, tuple(sidx))
            zero = e.const(0, "int32")
            clamped = []
            for j in sidx:
                c = e.op("where", valid, j, zero)
                lo, hi = e.rng[j]
                e.rng[c] = (max(0, lo), max(0, hi))
                clamped.append(c)
            x = self.render(src, tuple(clamped))
            return e.op("where", valid, x, e.const(fill, n.dtype))
        if op == "reduce":
            kind, axes = n.arg
            src = n.srcs[0]
            lens = [src.shape[a] for a in axes]
            saved, memo = e.scope(), dict(self.memo)
            var = e.b.begin_reduce()
            e.rng[var] = (0, math.prod(lens) - 1)
            sub = iter(_unflatten(e, var, lens))
            sidx = tuple(next(sub) if d in axes else i for d, i in enumerate(idx))
            x = self.render(src, sidx)
            e.restore(saved)
            self.memo = memo
            return e.b.end_reduce(kind, math.prod(lens), x)
        raise ir.IRError(f"scheduler: cannot render node {n}")

    def op_words(self) -> str:
        """What the kernel computes, for its name: the graph's compute ops below the root, operands
        first, each once, at most MAX_NAME_OPS (a reduction says its kind: `sum`, `max`); `copy` for a
        kernel of views only. The name's hash keeps kernels with the same words apart."""
        words: list[str] = []
        seen: set[int] = set()

        def walk(n: Node) -> None:
            if id(n) in seen or n is not self.root and (n.is_buffer or id(n) in self.pending):
                return
            seen.add(id(n))
            for s in n.srcs:
                walk(s)
            word = n.arg[0] if n.op == "reduce" else n.op
            if n.op not in _VIEW_OPS and word not in words:
                words.append(word)

        walk(self.root)
        if len(words) > MAX_NAME_OPS:
            words = words[:MAX_NAME_OPS - 1] + words[-1:]   # keep the last: the op whose result is stored
        return "_".join(words) or "copy"

    def kernel(self) -> ScheduleItem:
        e, root = self.e, self.root
        gid = e.b.gid()
        e.rng[gid] = (0, root.size - 1)
        v = self.render(root, tuple(_unflatten(e, gid, root.shape)))
        if root.dtype == "bool":
            v = e.op("cast", v, dtype="int32")
        e.b.store(0, gid, v)
        bufs = [ir.BufParam("out", _buf_dtype(root.dtype), root.size, "w")]
        bufs += [ir.BufParam(f"in{i}", _buf_dtype(n.dtype), n.size, "r") for i, n in enumerate(self.inputs)]
        k = e.b.kernel("k", bufs, root.size)
        k = replace(k, body=_dce(_licm(k.body), set()))
        body = ir.format_kernel(k).split("\n", 1)[1]
        name = f"{self.op_words()}_{_DTYPE_WORD[root.dtype]}_{root.size}_{hashlib.sha256(body.encode()).hexdigest()[:12]}"
        return ScheduleItem(replace(k, name=name), root, self.inputs)


def _licm(body) -> tuple:
    """Ops in reduce bodies that do not depend on the loop move before the loop (loads included: a
    reduce runs at least once, and buffers read by a kernel are not written by it)."""
    out = []
    for op in body:
        if op.op == "reduce":
            inner = _licm(op.body)
            varying, stay = {op.arg.var}, []
            for o in inner:
                if o.op == "store" or o.op == "reduce" or any(s in varying for s in o.srcs):
                    varying.add(o.id)
                    stay.append(o)
                else:
                    out.append(o)
            op = replace(op, body=tuple(stay))
        out.append(op)
    return tuple(out)


def _dce(body, used: set[int]) -> tuple:
    """body without ops whose values nothing uses (index helpers the simplifier made redundant)."""
    keep = []
    for op in reversed(body):
        if op.op != "store" and op.id not in used:
            continue
        if op.op == "reduce":
            inner = set(used) | {op.arg.result}
            op = replace(op, body=_dce(op.body, inner))
            used |= inner
        used.update(op.srcs)
        keep.append(op)
    return tuple(reversed(keep))


def _buf_dtype(dtype: str) -> str:
    return "float32" if dtype == "float32" else "int32"


def _lower(n: Node, pending: set[int]) -> ScheduleItem:
    return _Lowering(n, pending).kernel()
