"""The CUDA code generator: kernel IR (compiler_bridge.ir) -> CUDA C++ -> NVRTC -> cubin for sm_90.

    cuda_source(kernel) -> str
    generate(kernel) -> (cubin_bytes, kernel_name, launch)     registered as "cuda"; the default on nv devices

The source is one `extern "C" __global__` function (no name mangling: the cubin's symbol is the IR
kernel's name) with `__launch_bounds__(L)`, the IR's parameters in order (`T *__restrict__` per buffer,
`const` for read-only ones, then `int`/`float` scalars), gid = blockIdx.x * L + threadIdx.x with L from
`ir.launch_dims`, and items with gid >= n returning before anything else. Each SSA value is one C++
local; a reduce is a `for` loop over its index with an accumulator initialised to the identity.

Float semantics: NVRTC is run with `--fmad=false` (its default contracts a*b+c into an FMA; the C
reference rounds each op), and with its defaults `-prec-div=true -prec-sqrt=true -ftz=false`, so + - * /
and sqrtf are IEEE round-to-nearest with denormals kept. exp/log are CUDA's `expf`/`logf` (2 and 1 ulp,
CUDA C Programming Guide, "Mathematical Functions"), sigmoid is 1/(1+expf(-x)) and tanh 1-2/(expf(2x)+1)
as in the llvm generator, max is `fmaxf` (a NaN operand yields the other). Integer add/sub/mul wrap
modulo 2**32 through unsigned arithmetic (no signed-overflow UB). Float-to-int casts truncate
(cvt.rzi: NaN gives 0, out of range saturates).

The cubin is for `ARCH` (sm_90: H100 and H200); compiles are cached by nvdrv.nvrtc (content hash).
Executing it needs an NVIDIA GPU: nv:sim (the ioctl model) cannot run SASS.
"""
from __future__ import annotations

import math
import struct

from compiler_bridge import ir
from compiler_bridge.runtime import register_codegen

ARCH = "sm_90"
OPTIONS = ("--fmad=false",)
CTYPE = {"float32": "float", "int32": "int", "bool": "bool"}
_BINOP = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "/", "mod": "%",
          "cmplt": "<", "cmple": "<=", "cmpeq": "==", "cmpne": "!="}


def _float_lit(x: float) -> str:
    # bit-exact: every float32 (NaN, inf, denormals, -0) as its bit pattern
    if math.isnan(x):
        bits = 0x7FC00000
    else:
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return f"__int_as_float(0x{bits:08x})"


def _const(op: ir.Op) -> str:
    if op.dtype == "float32":
        return _float_lit(float(op.arg))
    if op.dtype == "bool":
        return "true" if op.arg else "false"
    v = (int(op.arg) + 2**31) % 2**32 - 2**31
    return f"({v})" if v != -2**31 else "(-2147483647 - 1)"


def _expr(op: ir.Op, v) -> str:
    o, d = op.op, op.dtype
    s = [v(x) for x in op.srcs]
    if o == "gid":
        return "gid"
    if o == "const":
        return _const(op)
    if o == "param":
        return f"s{op.arg}"
    if o == "load":
        return f"b{op.arg}[{s[0]}]"
    if o == "neg":
        return f"(int)(0u - (unsigned){s[0]})" if d == "int32" else f"(-{s[0]})"
    if o in ("exp", "log", "sqrt"):
        return f"{o}f({s[0]})"
    if o == "relu":
        return f"({s[0]} > 0 ? {s[0]} : 0)" if d == "int32" else f"fmaxf({s[0]}, 0.0f)"
    if o == "sigmoid":
        return f"(1.0f / (1.0f + expf(-{s[0]})))"
    if o == "tanh":
        return f"(1.0f - 2.0f / (expf(2.0f * {s[0]}) + 1.0f))"
    if o in ("add", "sub", "mul") and d == "int32":
        return f"(int)((unsigned){s[0]} {_BINOP[o]} (unsigned){s[1]})"
    if o in _BINOP:
        return f"({s[0]} {_BINOP[o]} {s[1]})"
    if o == "max":
        return f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})" if d == "int32" else f"fmaxf({s[0]}, {s[1]})"
    if o == "where":
        return f"({s[0]} ? {s[1]} : {s[2]})"
    if o == "cast":
        return f"({s[0]} != 0)" if d == "bool" else f"(({CTYPE[d]}){s[0]})"
    raise ir.IRError(f"codegen_cuda: kernel op {o!r} has no CUDA C rendering")


def cuda_source(k: ir.Kernel) -> str:
    ir.validate(k)
    (_, _, _), (local, _, _) = ir.launch_dims(k)
    params = [f"{'const ' if b.access == 'r' else ''}{CTYPE[b.dtype]} *__restrict__ b{i}"
              for i, b in enumerate(k.bufs)]
    params += [f"{CTYPE[p.dtype]} s{i}" for i, p in enumerate(k.scalars)]
    lines = ["/* generated from kernel IR by compiler_bridge.codegen_cuda */",
             f'extern "C" __global__ void __launch_bounds__({local}) {k.name}({", ".join(params)}) {{',
             f"  int gid = (int)(blockIdx.x * {local}u + threadIdx.x);",
             f"  if (gid >= {k.size}) return;"]

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
                    init = "(-__int_as_float(0x7f800000))" if op.dtype == "float32" else "(-2147483647 - 1)"
                lines.append(f"{ind}{t} {acc} = {init};")
                lines.append(f"{ind}for (int v{r.var} = 0; v{r.var} < {r.length}; v{r.var}++) {{")
                body(op.body, ind + "  ")
                if r.kind == "sum" and op.dtype == "int32":
                    lines.append(f"{ind}  {acc} = (int)((unsigned){acc} + (unsigned){x});")
                elif r.kind == "sum":
                    lines.append(f"{ind}  {acc} = {acc} + {x};")
                elif op.dtype == "int32":
                    lines.append(f"{ind}  {acc} = {x} > {acc} ? {x} : {acc};")
                else:
                    lines.append(f"{ind}  {acc} = fmaxf({acc}, {x});")
                lines.append(f"{ind}}}")
            else:
                lines.append(f"{ind}{CTYPE[op.dtype]} v{op.id} = {_expr(op, v)};")

    body(k.body, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate(k: ir.Kernel, arch: str = ARCH):
    """(cubin bytes, kernel name, (global_size, local_size)) as compiler_bridge.runtime takes them."""
    from nvdrv.nvrtc import compile_cuda
    return compile_cuda(cuda_source(k), f"{k.name}.cu", arch, OPTIONS), k.name, ir.launch_dims(k)


register_codegen("cuda", generate)
