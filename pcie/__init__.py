"""pcie: the memory-access abstraction every driver talks to hardware through.

A PCI function's config space, its BARs as MMIO views, and DMA-able host memory, with implementations
for Linux sysfs, VFIO, a remote shim, and the simulator (which plugs in as a provider, see `open`).
"""
from pcie.discover import FunctionInfo, check_not_bound, find_amd_gpus, list_functions, pick_amd_gpu
from pcie.interface import (AccessCounters, BAR, DMABuffer, PCIError, PCIFunction, open_function,
                            providers)
from pcie.lock import DeviceLock

__all__ = ["AccessCounters", "BAR", "DMABuffer", "DeviceLock", "FunctionInfo", "PCIError", "PCIFunction",
           "check_not_bound", "find_amd_gpus", "list_functions", "open_function", "pick_amd_gpu", "providers"]
