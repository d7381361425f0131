"""The code generators: kernel IR -> a program a device runs (docs/compiler.md).

    rdna3      RDNA3 machine code of our own, through rdna3's assembler and code-object writer
    llvm       OpenCL C through clang-15 (AMDGPU)        cuda   CUDA C through NVRTC (NVIDIA)
    c          C for the host, the reference ("c" device) c_dialect: the C renderer llvm and cuda share
    samples    IR programs with inputs covering every op, for the generators' tests and bench/compile.py
"""
