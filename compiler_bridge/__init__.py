"""compiler_bridge: the small tensor compiler (docs/compiler.md): lazy tensors, a scheduler that fuses
them into kernels of one small IR (compiler_bridge.ir), and code generators for hcq devices and the host.

    from compiler_bridge import Tensor
    Tensor(np.ones((3, 4))).softmax(-1).numpy()
"""
from compiler_bridge.tensor import Tensor, realize, where

__all__ = ["Tensor", "realize", "where"]
