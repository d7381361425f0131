"""What the C-family GPU code generators share: codegen_llvm (OpenCL C for clang) and codegen_cuda (CUDA
C++ for NVRTC) render the kernel IR the same way and differ only in spelling.

Each SSA value is one C local (so no compiler contracts across statements), a reduce is a `for` loop
over its index with an accumulator set to the identity, integer add/sub/mul wrap modulo 2**32 through
unsigned arithmetic (no signed-overflow UB), and float constants are written as their bit patterns so
every float32 (NaN, inf, denormals, -0) survives exactly. A Dialect names what differs: the math
functions, the unsigned type, how a bit pattern becomes a float, and the kernel's opening lines.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Callable

from compiler_bridge import ir

CTYPE = {"float32": "float", "int32": "int", "bool": "bool"}
_BINOP = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "/", "mod": "%",
          "cmplt": "<", "cmple": "<=", "cmpeq": "==", "cmpne": "!="}
_QUIET_NAN = 0x7FC00000
_POS_INF = 0x7F800000


@dataclass(frozen=True)
class Dialect:
    name: str                                  # the generator's module, for comments and errors
    uint: str                                  # the 32-bit unsigned type's spelling
    fn: dict                                   # exp, log, sqrt, fmax -> the dialect's function name
    float_bits: Callable[[int], str]           # a float32 bit pattern -> an expression of that float
    header: Callable[[ir.Kernel, int], list]   # (kernel, local size) -> lines up to the body: the
                                               # signature, gid, and the early return for gid >= n


def float_lit(x: float, d: Dialect) -> str:
    bits = _QUIET_NAN if math.isnan(x) else struct.unpack("<I", struct.pack("<f", x))[0]
    return d.float_bits(bits)


def const(op: ir.Op, d: Dialect) -> str:
    if op.dtype == "float32":
        return float_lit(float(op.arg), d)
    if op.dtype == "bool":
        return "true" if op.arg else "false"
    v = (int(op.arg) + 2**31) % 2**32 - 2**31
    return f"({v})" if v != -2**31 else "(-2147483647 - 1)"


def expr(op: ir.Op, v, d: Dialect) -> str:
    o, t, u, f = op.op, op.dtype, d.uint, d.fn
    s = [v(x) for x in op.srcs]
    if o == "gid":
        return "gid"
    if o == "const":
        return const(op, d)
    if o == "param":
        return f"s{op.arg}"
    if o == "load":
        return f"b{op.arg}[{s[0]}]"
    if o == "neg":
        return f"(int)(0u - ({u}){s[0]})" if t == "int32" else f"(-{s[0]})"
    if o in ("exp", "log", "sqrt"):
        return f"{f[o]}({s[0]})"
    if o == "relu":
        return f"({s[0]} > 0 ? {s[0]} : 0)" if t == "int32" else f"{f['fmax']}({s[0]}, 0.0f)"
    if o == "sigmoid":
        return f"(1.0f / (1.0f + {f['exp']}(-{s[0]})))"
    if o == "tanh":
        return f"(1.0f - 2.0f / ({f['exp']}(2.0f * {s[0]}) + 1.0f))"
    if o in ("add", "sub", "mul") and t == "int32":
        return f"(int)(({u}){s[0]} {_BINOP[o]} ({u}){s[1]})"
    if o in _BINOP:
        return f"({s[0]} {_BINOP[o]} {s[1]})"
    if o == "max":
        return f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})" if t == "int32" else f"{f['fmax']}({s[0]}, {s[1]})"
    if o == "where":
        return f"({s[0]} ? {s[1]} : {s[2]})"
    if o == "cast":
        return f"({s[0]} != 0)" if t == "bool" else f"(({CTYPE[t]}){s[0]})"
    raise ir.IRError(f"{d.name}: kernel op {o!r} has no C rendering")


def source(k: ir.Kernel, d: Dialect) -> str:
    """The kernel's whole source in dialect d."""
    ir.validate(k)
    (_, _, _), (local, _, _) = ir.launch_dims(k)
    lines = [f"/* generated from kernel IR by compiler_bridge.{d.name} */", *d.header(k, local)]

    def v(x):
        return f"v{x}"

    def body(ops, ind):
        for op in ops:
            if op.op == "store":
                lines.append(f"{ind}b{op.arg}[{v(op.srcs[0])}] = {v(op.srcs[1])};")
            elif op.op == "reduce":
                r, t, acc, x = op.arg, CTYPE[op.dtype], f"v{op.id}", v(op.arg.result)
                if r.kind == "sum":
                    init = "0.0f" if op.dtype == "float32" else "0"
                else:
                    init = f"(-{d.float_bits(_POS_INF)})" if op.dtype == "float32" else "(-2147483647 - 1)"
                lines.append(f"{ind}{t} {acc} = {init};")
                lines.append(f"{ind}for (int v{r.var} = 0; v{r.var} < {r.length}; v{r.var}++) {{")
                body(op.body, ind + "  ")
                if r.kind == "sum" and op.dtype == "int32":
                    lines.append(f"{ind}  {acc} = (int)(({d.uint}){acc} + ({d.uint}){x});")
                elif r.kind == "sum":
                    lines.append(f"{ind}  {acc} = {acc} + {x};")
                elif op.dtype == "int32":
                    lines.append(f"{ind}  {acc} = {x} > {acc} ? {x} : {acc};")
                else:
                    lines.append(f"{ind}  {acc} = {d.fn['fmax']}({acc}, {x});")
                lines.append(f"{ind}}}")
            else:
                lines.append(f"{ind}{CTYPE[op.dtype]} v{op.id} = {expr(op, v, d)};")

    body(k.body, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"


def buffer_params(k: ir.Kernel, pointer: str) -> list[str]:
    """The parameters in IR order: buffers (`const` when read-only) through pointer, a format with
    {const} {t} {i}, then the scalars."""
    out = [pointer.format(const="const " if b.access == "r" else "", t=CTYPE[b.dtype], i=i)
           for i, b in enumerate(k.bufs)]
    return out + [f"{CTYPE[p.dtype]} s{i}" for i, p in enumerate(k.scalars)]
