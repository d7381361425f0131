"""compiler_bridge: the small tensor compiler (docs/compiler.md): lazy tensors, a scheduler that fuses
them into kernels of one small IR (compiler_bridge.ir), and code generators for hcq devices and the host."""
