"""A model of the NVIDIA kernel module and an H100 behind it, for nvdrv without a GPU (`nv:sim`).

It imports nvdrv's data modules only (classes, rmapi, the ioctl layer's interfaces), never its logic;
nvdrv finds it through the `driverless.nv` entry point `sim`.
"""
from gpusim.nv.rm import SimProvider


def open_provider(**kwargs) -> SimProvider:
    return SimProvider(**kwargs)
