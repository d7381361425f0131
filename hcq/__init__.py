"""hcq: the hardware-command-queue API every backend serves (docs/hcq.md).

    import hcq
    dev = hcq.open("am:sim")      # backend "am" through the driverless.hcq entry points
"""
from hcq.api import (ArgLayout, ArgumentError, Buffer, Graph, HCQDevice, HCQError, HCQFault, HCQTimeout, HWQueue,
                     KernelArg, Program, Signal, Var, scalar_code)
from hcq.registry import backends, device_facts, find_real_device, open

__all__ = ["ArgLayout", "ArgumentError", "Buffer", "Graph", "HCQDevice", "HCQError", "HCQFault", "HCQTimeout",
           "HWQueue", "KernelArg", "Program", "Signal", "Var", "backends", "device_facts", "find_real_device", "open",
           "scalar_code"]


def __getattr__(name: str):
    """hcq.Device, the old name of hcq.HCQDevice (docs/hcq.md used it): still there, with a warning."""
    if name == "Device":
        import warnings
        warnings.warn("hcq.Device is now hcq.HCQDevice; the old name goes in a later release",
                      DeprecationWarning, stacklevel=2)
        return HCQDevice
    raise AttributeError(f"module 'hcq' has no attribute {name!r}")
