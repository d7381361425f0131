"""Pinned AMD GPU firmware: the pins, where the files come from, and readers for their headers.

    from amdrv.firmware import FirmwareStore, parse
    img = parse("gc_11_0_0_mec.bin", FirmwareStore().read("gc_11_0_0_mec.bin"))
"""
from amdrv.firmware.headers import Component, FirmwareImage, parse
from amdrv.firmware.pins import PINS, TAG, files_for
from amdrv.firmware.store import FirmwareError, FirmwareStore

__all__ = ["PINS", "TAG", "Component", "FirmwareError", "FirmwareImage", "FirmwareStore", "files_for", "parse",
           "load"]


def load(name: str, store: FirmwareStore | None = None):
    """The parsed, verified pinned file `name` (fetched if needed)."""
    return parse(name, (store or FirmwareStore()).read(name))
