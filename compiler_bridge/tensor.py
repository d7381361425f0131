"""Tensor: a lazy array in numpy's spirit. Operations build a graph (compiler_bridge.schedule); `.numpy()`
(or `.realize()`) schedules it into fused kernels and runs them on the tensor's device.

    a = Tensor(np.ones((3, 5), np.float32)); b = Tensor.full((5,), 2.0)
    ((a * b + 1).relu().sum(axis=1, keepdims=True)).numpy()

dtypes: float32, int32, bool (numpy float64/int64 inputs are narrowed). Promotion: bool < int32 < float32;
arithmetic on bools works in int32; `/` is always float32; comparisons give bool. Python scalars take
the other operand's dtype (a float scalar makes an int tensor float32).
"""
from __future__ import annotations

import math

import numpy as np

from compiler_bridge import runtime
from compiler_bridge.schedule import Node, schedule

_RANK = {"bool": 0, "int32": 1, "float32": 2}
SPLIT_LENGTH, SPLIT_OUTPUTS = 4096, 256  # reductions this long into fewer outputs run in two kernels


def _np_dtype(dt) -> str:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return "bool"
    if dt.kind in "iu":
        return "int32"
    if dt.kind == "f":
        return "float32"
    raise TypeError(f"Tensor: unsupported dtype {dt} (float32, int32 and bool are)")


def _broadcast_shape(*shapes) -> tuple:
    nd = max(len(s) for s in shapes)
    out = []
    for dims in zip(*((1,) * (nd - len(s)) + tuple(s) for s in shapes)):
        big = {d for d in dims if d != 1}
        if len(big) > 1:
            raise ValueError(f"Tensor: shapes {shapes} do not broadcast")
        out.append(big.pop() if big else 1)
    return tuple(out)


class Tensor:
    __array_priority__ = 100  # numpy scalars/arrays on the left defer to our operators

    def __init__(self, data, device: str | None = None, dtype: str | None = None):
        if isinstance(data, Node):
            self.node = data
        else:
            arr = np.asarray(data)
            dt = dtype or _np_dtype(arr.dtype)
            if dt == "int32":
                _check_int32(arr)
            arr = np.array(arr, {"float32": np.float32, "int32": np.int32, "bool": np.bool_}[dt], order="C")
            self.node = Node("buffer", shape=arr.shape, dtype=dt, data=arr)
        self.device = device or runtime.default_device()

    # ------------------------------------------------------------------------------------ creation
    @staticmethod
    def full(shape, value, dtype: str | None = None, device: str | None = None) -> Tensor:
        dtype = dtype or ("bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32")
        c = Node("const", arg=_coerce(value, dtype), shape=(), dtype=dtype)
        return Tensor(c, device).reshape((1,) * len(tuple(shape))).expand(tuple(shape)) if shape else Tensor(c, device)

    @staticmethod
    def zeros(shape, dtype="float32", device=None) -> Tensor:
        return Tensor.full(tuple(shape), 0, dtype, device)

    @staticmethod
    def ones(shape, dtype="float32", device=None) -> Tensor:
        return Tensor.full(tuple(shape), 1, dtype, device)

    # ---------------------------------------------------------------------------------- properties
    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self) -> str:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.node.size

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype} on {self.device}>"

    def _new(self, op, srcs, arg=None, shape=None, dtype=None) -> Tensor:
        return Tensor(Node(op, tuple(s.node for s in srcs), arg, self.shape if shape is None else shape,
                           dtype or self.dtype), self.device)

    # ----------------------------------------------------------------------------------- realize
    def schedule(self):
        """The kernels `.numpy()` would run (ScheduleItems), without running them."""
        return schedule([self.node])

    def realize(self) -> Tensor:
        """Computes the tensor on its device (its buffer stays there)."""
        realize(self)
        return self

    def numpy(self) -> np.ndarray:
        if self.size == 0:
            return np.zeros(self.shape, {"float32": np.float32, "int32": np.int32, "bool": np.bool_}[self.dtype])
        self.realize()
        n = self.node
        if n.buffer is None:  # a buffer node never run through a kernel
            return n.data.copy()
        out = n.buffer.numpy()
        return (out != 0 if self.dtype == "bool" else out).reshape(self.shape)

    # ------------------------------------------------------------------------------ elementwise
    def _operands(self, other, reverse=False):
        o = other if isinstance(other, Tensor) else Tensor.full((), other, _scalar_dtype(other, self.dtype),
                                                                 self.device)
        if o.device != self.device:
            raise ValueError(f"Tensor: operands on different devices ({self.device} and {o.device}); "
                             "read one back with .numpy() and make a Tensor on the other")
        dt = max(self.dtype, o.dtype, key=_RANK.get)
        shape = _broadcast_shape(self.shape, o.shape)
        a, b = self.cast(dt).broadcast_to(shape), o.cast(dt).broadcast_to(shape)
        return (b, a) if reverse else (a, b)

    def _binary(self, op, other, reverse=False, arith=True):
        a, b = self._operands(other, reverse)
        if arith and a.dtype == "bool":
            a, b = a.cast("int32"), b.cast("int32")
        if op == "div" and a.dtype != "float32":
            a, b = a.cast("float32"), b.cast("float32")
        return a._new(op, (a, b), dtype="bool" if op.startswith("cmp") else a.dtype)

    def _unary(self, op, float_only=True) -> Tensor:
        x = self.cast("float32") if float_only or self.dtype == "bool" else self
        return x._new(op, (x,))

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, True)
    def __neg__(self): return self._unary("neg", False)
    def __lt__(self, o): return self._binary("cmplt", o, arith=False)
    def __le__(self, o): return self._binary("cmple", o, arith=False)
    def __gt__(self, o): return self._binary("cmplt", o, True, arith=False)
    def __ge__(self, o): return self._binary("cmple", o, True, arith=False)
    def eq(self, o): return self._binary("cmpeq", o, arith=False)
    def ne(self, o): return self._binary("cmpne", o, arith=False)
    def __matmul__(self, o): return self.matmul(o)

    def maximum(self, o): return self._binary("max", o)
    def exp(self): return self._unary("exp")
    def log(self): return self._unary("log")
    def sqrt(self): return self._unary("sqrt")
    def sigmoid(self): return self._unary("sigmoid")
    def tanh(self): return self._unary("tanh")
    def relu(self): return self._unary("relu", False)

    def where(self, a, b) -> Tensor:
        """self (as bool) ? a : b, broadcasting all three."""
        a = a if isinstance(a, Tensor) else Tensor.full((), a, device=self.device)
        a, b = a._operands(b)
        shape = _broadcast_shape(self.shape, a.shape)
        c = self.cast("bool").broadcast_to(shape)
        a, b = a.broadcast_to(shape), b.broadcast_to(shape)
        return c._new("where", (c, a, b), dtype=a.dtype)

    def cast(self, dtype: str) -> Tensor:
        if dtype not in _RANK:
            raise TypeError(f"Tensor.cast: {dtype} is not float32, int32 or bool")
        return self if dtype == self.dtype else self._new("cast", (self,), dtype=dtype)

    # ------------------------------------------------------------------------------- reductions
    def _axes(self, axis) -> tuple:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        out = tuple(sorted({a % self.ndim if self.ndim else 0 for a in axes}))
        if any(not -self.ndim <= a < max(self.ndim, 1) for a in axes):
            raise ValueError(f"Tensor: axis {axis} out of range for shape {self.shape}")
        return out

    def _reduce(self, kind, axis, keepdims) -> Tensor:
        axes = self._axes(axis)
        x = self.cast("int32") if self.dtype == "bool" else self
        if x.ndim == 0:
            return x
        if any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"Tensor.{kind}: reduction over an empty axis of shape {x.shape}")
        kshape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        length = math.prod(x.shape[a] for a in axes)
        if length >= SPLIT_LENGTH and math.prod(kshape) < SPLIT_OUTPUTS:
            r = x._split_reduce(kind, axes, length).reshape(kshape)
        else:
            r = x._new("reduce", (x,), (kind, axes), kshape, x.dtype)
        return r if keepdims else r.reshape(tuple(s for d, s in enumerate(x.shape) if d not in axes))

    def _split_reduce(self, kind, axes, length) -> Tensor:
        """A long reduction into few outputs as two: partials over rows of ~sqrt(length), padded with the
        identity, then their reduction, so a GPU runs ~sqrt(length) work items instead of a handful."""
        keep = [d for d in range(self.ndim) if d not in axes]
        outer = tuple(self.shape[d] for d in keep)
        m = math.isqrt(length - 1) + 1
        k = -(-length // m)
        ident = 0 if kind == "sum" else (-math.inf if self.dtype == "float32" else -2**31)
        x = self.permute(keep + list(axes)).reshape(outer + (length,))
        x = x.pad([(0, 0)] * len(outer) + [(0, k * m - length)], ident).reshape(outer + (k, m))
        nd = len(outer)
        part = x._new("reduce", (x,), (kind, (nd + 1,)), outer + (k, 1), x.dtype)
        return part._new("reduce", (part,), (kind, (nd,)), outer + (1, 1), x.dtype)

    def sum(self, axis=None, keepdims=False): return self._reduce("sum", axis, keepdims)

    def max(self, axis=None, keepdims=False):
        r = self._reduce("max", axis, keepdims)
        return r.cast("bool") if self.dtype == "bool" else r

    def mean(self, axis=None, keepdims=False) -> Tensor:
        n = math.prod(self.shape[a] for a in self._axes(axis))
        return self.cast("float32").sum(axis, keepdims) * (1.0 / n)

    def softmax(self, axis=-1) -> Tensor:
        e = (self - self.max(axis, keepdims=True)).exp()
        return e / e.sum(axis, keepdims=True)

    # --------------------------------------------------------------------------------- movement
    def reshape(self, *shape) -> Tensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if shape.count(-1) > 1 or any(s < -1 for s in shape):
            raise ValueError(f"Tensor.reshape: {shape}: sizes are counts, and at most one may be -1 (inferred)")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0:
                raise ValueError(f"Tensor.reshape: the -1 in {shape} cannot be inferred next to a 0")
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"Tensor.reshape: {self.shape} ({self.size} elements) cannot become {shape}")
        return self if shape == self.shape else self._new("reshape", (self,), shape, shape)

    def permute(self, *order) -> Tensor:
        order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else tuple(order)
        order = tuple(o % self.ndim for o in order)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"Tensor.permute: {order} is not a permutation of {self.ndim} axes")
        return self._new("permute", (self,), order, tuple(self.shape[o] for o in order))

    def transpose(self, a=-2, b=-1) -> Tensor:
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> Tensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if len(shape) != self.ndim or any(s != o and s != 1 for s, o in zip(self.shape, shape)):
            raise ValueError(f"Tensor.expand: {self.shape} cannot expand to {shape}")
        return self if shape == self.shape else self._new("expand", (self,), shape, shape)

    def broadcast_to(self, shape) -> Tensor:
        shape = tuple(shape)
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
        return x.expand(shape)

    def __getitem__(self, key) -> Tensor:
        key = key if isinstance(key, tuple) else (key,)
        if Ellipsis in key:
            i = key.index(Ellipsis)
            n = self.ndim - (len(key) - 1 - key.count(None))
            key = key[:i] + (slice(None),) * n + key[i + 1:]
        spec, newshape, axis = [], [], 0
        if sum(k is not None for k in key) > self.ndim:
            raise IndexError(f"Tensor: {sum(k is not None for k in key)} indices for {self.ndim} axes {self.shape}")
        for k in key:
            if k is None:
                newshape.append(("new",))
                continue
            n = self.shape[axis]
            if isinstance(k, int):
                if not -n <= k < n:
                    raise IndexError(f"Tensor: index {k} out of range for axis {axis} of size {n}")
                spec.append((k % n, 1, 1))
                newshape.append(("drop",))
            elif isinstance(k, slice):
                r = range(*k.indices(n))
                spec.append((r.start if len(r) else 0, r.step, len(r)))
                newshape.append(("keep", len(r)))
            else:
                raise TypeError(f"Tensor: index {k!r} (ints, slices, None and ... are supported)")
            axis += 1
        for n in self.shape[axis:]:
            spec.append((0, 1, n))
            newshape.append(("keep", n))
        x = self
        if any(s != (0, 1, n) for s, n in zip(spec, self.shape)):
            x = self._new("slice", (self,), tuple(spec), tuple(s[2] for s in spec))
        return x.reshape(tuple(1 if e[0] == "new" else e[1] for e in newshape if e[0] != "drop"))

    def pad(self, pads, value=0) -> Tensor:
        """pads: one (before, after) per axis (non-negative), filled with value."""
        pads = tuple((int(a), int(b)) for a, b in pads)
        if len(pads) != self.ndim or any(a < 0 or b < 0 for a, b in pads):
            raise ValueError(f"Tensor.pad: {pads} for shape {self.shape}")
        if all(p == (0, 0) for p in pads):
            return self
        shape = tuple(s + a + b for s, (a, b) in zip(self.shape, pads))
        return self._new("pad", (self,), (pads, _coerce(value, self.dtype)), shape)

    @staticmethod
    def cat(tensors, axis=0) -> Tensor:
        """Concatenation: the sum of the parts, each padded to the whole (one kernel, no copies)."""
        ts = list(tensors)
        axis %= ts[0].ndim
        total = sum(t.shape[axis] for t in ts)
        dt = max((t.dtype for t in ts), key=_RANK.get)
        out, at = None, 0
        for t in ts:
            pads = [(0, 0)] * t.ndim
            pads[axis] = (at, total - at - t.shape[axis])
            at += t.shape[axis]
            p = t.cast("int32" if dt == "bool" else dt).pad(pads)
            out = p if out is None else out + p
        return out.cast(dt)

    def matmul(self, o: Tensor) -> Tensor:
        a, b = self, o
        if a.ndim == 1:
            return a.reshape(1, -1).matmul(b).reshape(b.shape[:-2] + b.shape[-1:])
        if b.ndim == 1:
            return a.matmul(b.reshape(-1, 1)).reshape(a.shape[:-1])
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"Tensor.matmul: {a.shape} @ {b.shape}")
        x = a.reshape(a.shape[:-1] + (1,) + a.shape[-1:])             # ... M 1 K
        y = b.transpose(-1, -2).reshape(b.shape[:-2] + (1,) + (b.shape[-1], b.shape[-2]))  # ... 1 N K
        return (x * y).sum(axis=-1)


def _scalar_dtype(v, other: str) -> str:
    kind = "bool" if isinstance(v, (bool, np.bool_)) else "int32" if isinstance(v, (int, np.integer)) else "float32"
    return max(kind, other, key=_RANK.get)


def _coerce(v, dtype):
    if dtype == "int32":
        _check_int32(np.asarray(v))
    return float(v) if dtype == "float32" else bool(v) if dtype == "bool" else int(v)


def _check_int32(arr: np.ndarray) -> None:
    """OverflowError unless every value of arr is an int32 as it is: the narrowing to int32 (the widest integer
    dtype here) would wrap an int64 or uint32 past it, and turn a NaN, an infinity or a float past it into
    whatever the conversion gives, silently."""
    if arr.dtype == np.int32 or arr.dtype.kind == "b" or arr.size == 0:
        return
    if arr.dtype.kind in "iu":
        if np.iinfo(arr.dtype).min >= -2**31 and np.iinfo(arr.dtype).max < 2**31:
            return
        bad = (arr < -2**31) | (arr > 2**31 - 1)
    elif arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(arr) | (arr <= -2**31 - 1) | (arr >= 2**31)
    else:
        return      # not a number: the conversion says so itself
    if bad.any():
        at = np.unravel_index(int(np.argmax(bad)), arr.shape) if arr.ndim else ()
        where = f" at index {tuple(map(int, at))} (one of {int(bad.sum())})" if arr.ndim else ""
        raise OverflowError(f"Tensor: {arr[at].item()!r}{where} does not fit int32, the widest integer dtype here "
                            f"({-2**31}..{2**31 - 1}); narrowing would change it silently: scale the values into that "
                            "range, or use float32")


def realize(*tensors: Tensor) -> None:
    """Computes several tensors of one device in one schedule, so what they share is computed once."""
    if len({t.device for t in tensors}) > 1:
        raise ValueError(f"realize: tensors on different devices {sorted({t.device for t in tensors})}")
    dev = runtime.get_device(tensors[0].device)
    items = schedule([t.node for t in tensors])
    _upload_inputs(dev, [t.node for t in tensors] + [n for it in items for n in it.inputs])
    for it in items:
        out = dev.alloc(it.out.size, it.kernel.bufs[0].dtype)
        dev.run(it.kernel, [out] + [n.buffer for n in it.inputs])
        it.out.buffer = out
        it.out.srcs = ()  # realized: the graph below it can go


def where(cond, a, b) -> Tensor:
    return cond.where(a, b)


def _upload_inputs(dev, nodes) -> None:
    for n in nodes:
        if n.op == "buffer" and n.buffer is None:
            data = n.data.astype(np.int32) if n.dtype == "bool" else n.data
            n.buffer = dev.upload(data)
