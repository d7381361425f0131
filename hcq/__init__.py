"""hcq: the hardware-command-queue API every backend serves (docs/hcq.md).

    import hcq
    dev = hcq.open("am:sim")      # backend "am" through the driverless.hcq entry points
"""
from hcq.api import (ArgLayout, ArgumentError, Buffer, Device, Graph, HCQError, HCQFault, HCQTimeout, HWQueue,
                     KernelArg, Program, Signal, Var, scalar_code)
from hcq.registry import backends, device_facts, find_real_device, open

__all__ = ["ArgLayout", "ArgumentError", "Buffer", "Device", "Graph", "HCQError", "HCQFault", "HCQTimeout", "HWQueue",
           "KernelArg", "Program", "Signal", "Var", "backends", "device_facts", "find_real_device", "open",
           "scalar_code"]
