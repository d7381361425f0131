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
rdna3.opencl (cached by source hash; ClangMissing when clang-15/ld.lld-15 are not installed).
"""
from __future__ import annotations

from compiler_bridge import ir
from compiler_bridge.codegen import c_dialect
from rdna3.opencl import compile_opencl
from compiler_bridge.runtime import register_codegen


def _header(k: ir.Kernel, local: int) -> list[str]:
    params = c_dialect.buffer_params(k, "__global {const}{t} *restrict b{i}")
    return [f"__kernel __attribute__((reqd_work_group_size({local}, 1, 1)))",
            f"void {k.name}({', '.join(params)}) {{",
            f"  int gid = (int)(__builtin_amdgcn_workgroup_id_x() * {local}u + __builtin_amdgcn_workitem_id_x());",
            f"  if (gid >= {k.size}) return;"]


OPENCL = c_dialect.Dialect(
    name="codegen_llvm", uint="uint",
    fn={"exp": "__builtin_expf", "log": "__builtin_logf", "sqrt": "__builtin_sqrtf", "fmax": "__builtin_fmaxf"},
    float_bits=lambda bits: f"__builtin_astype(0x{bits:08x}u, float)", header=_header)


def opencl_source(k: ir.Kernel) -> str:
    return c_dialect.source(k, OPENCL)


def generate(k: ir.Kernel):
    """(code object bytes, kernel name, (global_size, local_size)) as compiler_bridge.runtime takes them."""
    return compile_opencl(opencl_source(k)), k.name, ir.launch_dims(k)


register_codegen("llvm", generate)
