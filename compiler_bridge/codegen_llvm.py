"""The LLVM code generator: kernel IR (compiler_bridge.ir) -> OpenCL C -> clang-15 -> AMDHSA code object.

    opencl_source(kernel) -> str
    generate(kernel) -> (code_object_bytes, kernel_name, launch)     registered as "llvm"

The source is one `__kernel` with the IR's parameters in order (`__global T *restrict` per buffer,
`const` for read-only ones, then `int`/`float` scalars). Work item ids come from the amdgcn builtins
(no device library is linked): gid = workgroup_id_x * L + workitem_id_x with L baked in from
`ir.launch_dims`, and items with gid >= n return before anything else. Each SSA value becomes one C
local; a reduce becomes a `for` loop over its index with an accumulator initialised to the identity.

Float semantics: + - * / are C's (clang contracts nothing across statements: every value is its own
statement), sqrt is `__builtin_sqrtf`, exp/log are `__builtin_expf`/`__builtin_logf`, which the AMDGPU
backend expands to v_exp_f32/v_log_f32 with a base change (relative error about 1e-6 plus the rounding
of the scaled argument), sigmoid is 1/(1+exp(-x)) and tanh is 1 - 2/(exp(2x)+1) (absolute error about
1e-7). max is `__builtin_fmaxf` (a NaN operand yields the other one). Compiling goes through
amdrv.isa.opencl (cached by source hash; ClangMissing when clang-15/ld.lld-15 are not installed).
"""
from __future__ import annotations

import math
import struct

from compiler_bridge import ir
from amdrv.isa.opencl import compile_opencl
from compiler_bridge.runtime import register_codegen

CTYPE = {"float32": "float", "int32": "int", "bool": "bool"}


def _float_lit(x: float) -> str:
    if math.isnan(x):
        return "(__builtin_nanf(\"\"))"
    if math.isinf(x):
        return "(__builtin_inff())" if x > 0 else "(-__builtin_inff())"
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return f"__builtin_astype(0x{bits:08x}u, float)"


def _const(op: ir.Op) -> str:
    if op.dtype == "float32":
        return _float_lit(float(op.arg))
    if op.dtype == "bool":
        return "true" if op.arg else "false"
    v = int(op.arg)
    v = (v + 2**31) % 2**32 - 2**31
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
        return f"(int)(0u - (uint){s[0]})" if d == "int32" else f"(-{s[0]})"
    if o == "exp":
        return f"__builtin_expf({s[0]})"
    if o == "log":
        return f"__builtin_logf({s[0]})"
    if o == "sqrt":
        return f"__builtin_sqrtf({s[0]})"
    if o == "relu":
        return f"({s[0]} > 0 ? {s[0]} : 0)" if d == "int32" else f"__builtin_fmaxf({s[0]}, 0.0f)"
    if o == "sigmoid":
        return f"(1.0f / (1.0f + __builtin_expf(-{s[0]})))"
    if o == "tanh":
        return f"(1.0f - 2.0f / (__builtin_expf(2.0f * {s[0]}) + 1.0f))"
    if o in ("add", "sub", "mul") and d == "int32":   # wrap modulo 2**32 without signed-overflow UB
        sym = {"add": "+", "sub": "-", "mul": "*"}[o]
        return f"(int)((uint){s[0]} {sym} (uint){s[1]})"
    if o in ("add", "sub", "mul", "div"):
        return f"({s[0]} {dict(add='+', sub='-', mul='*', div='/')[o]} {s[1]})"
    if o == "max":
        return f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})" if d == "int32" else f"__builtin_fmaxf({s[0]}, {s[1]})"
    if o == "idiv":
        return f"({s[0]} / {s[1]})"
    if o == "mod":
        return f"({s[0]} % {s[1]})"
    if o in ir.COMPARE:
        return f"({s[0]} {dict(cmplt='<', cmple='<=', cmpeq='==', cmpne='!=')[o]} {s[1]})"
    if o == "where":
        return f"({s[0]} ? {s[1]} : {s[2]})"
    if o == "cast":
        if d == "bool":
            return f"({s[0]} != 0)"
        return f"(({CTYPE[d]}){s[0]})"
    raise ir.IRError(f"codegen_llvm: no C for op {o!r}")


def opencl_source(k: ir.Kernel) -> str:
    ir.validate(k)
    (_, _, _), (local, _, _) = ir.launch_dims(k)
    params = []
    for i, b in enumerate(k.bufs):
        const = "const " if b.access == "r" else ""
        params.append(f"__global {const}{CTYPE[b.dtype]} *restrict b{i}")
    params += [f"{CTYPE[p.dtype]} s{i}" for i, p in enumerate(k.scalars)]
    lines = [f"/* generated from kernel IR by compiler_bridge.codegen_llvm */",
             f"__kernel __attribute__((reqd_work_group_size({local}, 1, 1)))",
             f"void {k.name}({', '.join(params)}) {{",
             f"  int gid = (int)(__builtin_amdgcn_workgroup_id_x() * {local}u + __builtin_amdgcn_workitem_id_x());",
             f"  if (gid >= {k.size}) return;"]

    def v(x):
        return f"v{x}"

    def body(ops, ind):
        for op in ops:
            if op.op == "store":
                lines.append(f"{ind}b{op.arg}[{v(op.srcs[0])}] = {v(op.srcs[1])};")
            elif op.op == "reduce":
                r, t = op.arg, CTYPE[op.dtype]
                if r.kind == "sum":
                    init = "0.0f" if op.dtype == "float32" else "0"
                else:
                    init = "(-__builtin_inff())" if op.dtype == "float32" else "(-2147483647 - 1)"
                lines.append(f"{ind}{t} v{op.id} = {init};")
                lines.append(f"{ind}for (int v{r.var} = 0; v{r.var} < {r.length}; v{r.var}++) {{")
                body(op.body, ind + "  ")
                acc, x = f"v{op.id}", v(r.result)
                if r.kind == "sum" and op.dtype == "int32":
                    lines.append(f"{ind}  {acc} = (int)((uint){acc} + (uint){x});")
                elif r.kind == "sum":
                    lines.append(f"{ind}  {acc} = {acc} + {x};")
                elif op.dtype == "int32":
                    lines.append(f"{ind}  {acc} = {x} > {acc} ? {x} : {acc};")
                else:
                    lines.append(f"{ind}  {acc} = __builtin_fmaxf({acc}, {x});")
                lines.append(f"{ind}}}")
            else:
                lines.append(f"{ind}{CTYPE[op.dtype]} v{op.id} = {_expr(op, v)};")

    body(k.body, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate(k: ir.Kernel):
    """(code object bytes, kernel name, (global_size, local_size)) as compiler_bridge.runtime takes them."""
    return compile_opencl(opencl_source(k)), k.name, ir.launch_dims(k)


register_codegen("llvm", generate)
