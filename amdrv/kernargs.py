"""AMDHSA kernel-argument metadata to hcq's backend-neutral argument entries.

A code object's `.args` (LLVM AMDGPUUsage, code object v4/v5 metadata: .offset, .size, .value_kind,
.type_name, .name) become hcq.KernelArg entries: global buffers are pointers, by-value parameters are
scalars typed from their C type name, and the hidden_* kinds (block counts, group sizes, grid dims,
offsets, the printf/hostcall/heap/queue pointers) are left for the AM backend to fill at each launch
(amdrv.hcq.launch._fill_hidden).
"""
from __future__ import annotations

from typing import Sequence

from hcq.api import HCQError, KernelArg, scalar_code


def kernel_args(meta_args: Sequence[dict]) -> list[KernelArg]:
    """KernelArgs from the .args entries of one kernel's AMDHSA metadata."""
    out = []
    for i, a in enumerate(meta_args):
        vk, size, off = a[".value_kind"], a[".size"], a[".offset"]
        tn = str(a.get(".type_name", "")).strip()
        name = a.get(".name") or f"arg{i}"
        if vk == "global_buffer":
            out.append(KernelArg(name, off, size, "buffer", "Q", type_name=tn))
        elif vk == "by_value":
            out.append(KernelArg(name, off, size, "scalar", scalar_code(tn, size), type_name=tn))
        elif vk.startswith("hidden_"):
            out.append(KernelArg(name, off, size, "hidden", what=vk, type_name=tn))
        else:
            raise HCQError(f"kernel parameter {name!r} (offset {off}) has value kind {vk!r}, which the AM "
                           "backend does not pass (global buffers and by-value scalars only)")
    return out
