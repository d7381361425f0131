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

from compiler_bridge import ir
from compiler_bridge.codegen import c_dialect
from compiler_bridge.runtime import register_codegen

ARCH = "sm_90"
OPTIONS = ("--fmad=false",)


def _header(k: ir.Kernel, local: int) -> list[str]:
    params = c_dialect.buffer_params(k, "{const}{t} *__restrict__ b{i}")
    return [f'extern "C" __global__ void __launch_bounds__({local}) {k.name}({", ".join(params)}) {{',
            f"  int gid = (int)(blockIdx.x * {local}u + threadIdx.x);",
            f"  if (gid >= {k.size}) return;"]


CUDA = c_dialect.Dialect(
    name="codegen_cuda", uint="unsigned",
    fn={"exp": "expf", "log": "logf", "sqrt": "sqrtf", "fmax": "fmaxf"},
    float_bits=lambda bits: f"__int_as_float(0x{bits:08x})", header=_header)


def cuda_source(k: ir.Kernel) -> str:
    return c_dialect.source(k, CUDA)


def generate(k: ir.Kernel, arch: str = ARCH):
    """(cubin bytes, kernel name, (global_size, local_size)) as compiler_bridge.runtime takes them."""
    from nvdrv.nvrtc import compile_cuda
    return compile_cuda(cuda_source(k), f"{k.name}.cu", arch, OPTIONS), k.name, ir.launch_dims(k)


register_codegen("cuda", generate)
