"""The host reference device "c": kernel IR -> C -> a shared library (the system C compiler) -> ctypes.

Each kernel becomes `void NAME(T *b0, ..., S s0, ...)` whose loop runs the body for gid = 0 .. size-1,
so the launch rules of compiler_bridge.ir hold trivially. Compiled libraries are cached on disk by the
hash of their source (in `c/` under the cache root, hcq.cache) and in memory by kernel
name. Float code is built without -ffast-math and with -ffp-contract=off: this is the reference the GPU
generators are held against.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from hcq import cache as hcq_cache
from compiler_bridge import ir

_CTYPE = {"float32": "float", "int32": "int32_t", "bool": "int"}
_CC_FLAGS = ["-O1", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-std=c99"]
_NP = {"float32": np.float32, "int32": np.int32}


def _const(v, dtype: str) -> str:
    if dtype == "float32":
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return f"{float(np.float32(v)).hex()}f" if v != 0 else "0.0f"
    return str(int(v))


def _expr(op: ir.Op, a: list[str]) -> str:
    o, d = op.op, op.dtype
    if o == "gid":
        return "gid"
    if o == "const":
        return _const(op.arg, d)
    if o == "param":
        return f"s{op.arg}"
    if o == "load":
        return f"b{op.arg}[{a[0]}]"
    if o in ("add", "sub", "mul") and d == "int32":  # wrap modulo 2**32, as the IR says
        sym = {"add": "+", "sub": "-", "mul": "*"}[o]
        return f"(int32_t)((uint32_t){a[0]} {sym} (uint32_t){a[1]})"
    binops = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "/", "mod": "%",
              "cmplt": "<", "cmple": "<=", "cmpeq": "==", "cmpne": "!="}
    if o in binops:
        return f"({a[0]} {binops[o]} {a[1]})"
    if o == "max":
        return f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})"
    if o == "neg":
        return f"(int32_t)(0u - (uint32_t){a[0]})" if d == "int32" else f"(-{a[0]})"
    if o == "relu":
        return f"({a[0]} > 0 ? {a[0]} : 0)"
    if o in ("exp", "log", "sqrt", "tanh"):
        return f"{o}f({a[0]})"
    if o == "sigmoid":
        return f"(1.0f / (1.0f + expf(-{a[0]})))"
    if o == "where":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if o == "cast":
        return f"({a[0]} != 0)" if d == "bool" else f"({_CTYPE[d]}){a[0]}"
    raise ir.IRError(f"C backend: no rendering for op {o}")


def _body(body, lines: list[str], ind: str) -> None:
    for op in body:
        a = [f"v{s}" for s in op.srcs]
        if op.op == "store":
            lines.append(f"{ind}b{op.arg}[{a[0]}] = {a[1]};")
        elif op.op == "reduce":
            r, t = op.arg, _CTYPE[op.dtype]
            init = "0" if r.kind == "sum" else ("(-INFINITY)" if op.dtype == "float32" else "INT32_MIN")
            lines.append(f"{ind}{t} v{op.id} = {init};")
            lines.append(f"{ind}for (int32_t v{r.var} = 0; v{r.var} < {r.length}; v{r.var}++) {{")
            _body(op.body, lines, ind + "  ")
            x = f"v{r.result}"
            if r.kind == "sum":
                upd = f"(int32_t)((uint32_t)v{op.id} + (uint32_t){x})" if op.dtype == "int32" else f"v{op.id} + {x}"
            else:
                upd = f"({x} > v{op.id} ? {x} : v{op.id})"
            lines.append(f"{ind}  v{op.id} = {upd};")
            lines.append(f"{ind}}}")
        else:
            lines.append(f"{ind}{_CTYPE[op.dtype]} v{op.id} = {_expr(op, a)};")


def render(k: ir.Kernel) -> str:
    """The C source of kernel k."""
    ir.validate(k)
    params = [f"{'const ' if b.access == 'r' else ''}{_CTYPE[b.dtype]} *restrict b{i}" for i, b in enumerate(k.bufs)]
    params += [f"{_CTYPE[s.dtype]} s{i}" for i, s in enumerate(k.scalars)]
    lines = ["#include <math.h>", "#include <stdint.h>", "",
             f"void {k.name}({', '.join(params)}) {{",
             f"  for (int32_t gid = 0; gid < {k.size}; gid++) {{"]
    _body(k.body, lines, "    ")
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def _cache_dir() -> Path:
    return hcq_cache.subdir("c")


def compile_c(src: str) -> Path:
    """The path of a shared library built from src (cached by the source's hash)."""
    h = hashlib.sha256((src + " ".join(_CC_FLAGS)).encode()).hexdigest()[:20]
    d = _cache_dir()
    out = d / f"{h}.so"
    if out.exists():
        return out
    d.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        c = Path(tmp) / "k.c"
        c.write_text(src)
        so = Path(tmp) / "k.so"
        r = subprocess.run([cc, *_CC_FLAGS, "-o", str(so), str(c), "-lm"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"C backend: {cc} failed ({r.returncode}) on a generated kernel:\n{r.stderr}\n{src}")
        os.replace(so, out)  # atomic: a concurrent process sees a whole library or none
    return out


class CProgram:
    """A compiled kernel: call with one numpy array per buffer parameter, then the scalars."""

    def __init__(self, k: ir.Kernel):
        self.kernel = k
        self.source = render(k)
        self._lib = ctypes.CDLL(str(compile_c(self.source)))
        self._fn = getattr(self._lib, k.name)
        self._fn.restype = None
        self._fn.argtypes = ([ctypes.c_void_p] * len(k.bufs)
                             + [ctypes.c_float if s.dtype == "float32" else ctypes.c_int32 for s in k.scalars])

    def __call__(self, *args) -> None:
        k = self.kernel
        if len(args) != len(k.bufs) + len(k.scalars):
            raise TypeError(f"{k.name}: {len(k.bufs)} buffers and {len(k.scalars)} scalars, got {len(args)} args")
        ptrs = []
        for b, a in zip(k.bufs, args):
            ok = isinstance(a, np.ndarray) and a.dtype == _NP[b.dtype] and a.flags.c_contiguous
            if not (ok and a.size >= b.size):
                raise TypeError(f"{k.name}: buffer {b.name} needs a contiguous {b.dtype} array of >= {b.size} "
                                f"elements, got {getattr(a, 'dtype', type(a))} {getattr(a, 'shape', '')}")
            if b.access == "w" and not a.flags.writeable:
                raise TypeError(f"{k.name}: buffer {b.name} is written but the array is read-only")
            ptrs.append(a.ctypes.data)
        self._fn(*ptrs, *args[len(k.bufs):])
