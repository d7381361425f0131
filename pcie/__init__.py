"""pcie: the memory-access abstraction every driver talks to hardware through.

A PCI function's config space, its BARs as MMIO views, and DMA-able host memory, with implementations
for Linux sysfs, VFIO, a remote shim, and the simulator (which plugs in as a provider, see `open`).
"""
from pcie.interface import (AccessCounters, BAR, DMABuffer, PCIError, PCIFunction, open_function,
                            providers)

__all__ = ["AccessCounters", "BAR", "DMABuffer", "PCIError", "PCIFunction", "open_function", "providers"]
