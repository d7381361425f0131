"""What a kernel launch writes: the program's precomputed PM4 template and its patch indices (_Kernel),
the hsa_kernel_dispatch_packet and the kernarg segment's hidden arguments (amdrv.hcq's docstring)."""
from __future__ import annotations

import struct
from array import array

from amdrv import pm4
from rdna3.codeobj import RSRC2
from hcq.api import ArgLayout, Buffer, HCQError

PACKET_BYTES = 64
_M32 = 0xFFFFFFFF

# hsa_kernel_dispatch_packet_t: header, setup, workgroup_size_x/y/z, reserved0, grid_size_x/y/z,
# private_segment_size, group_segment_size, kernel_object, kernarg_address, reserved2, completion_signal
_PACKET = struct.Struct("<HHHHHHIIIIIQQQQ")
_HSA_PACKET_TYPE_KERNEL_DISPATCH = 2
_LDS_GRANULE = 512
_LDS_SHIFT, _LDS_MASK = next((lo, (1 << w) - 1) for n, lo, w in RSRC2 if n == "granulated_lds_size")
_USER_SGPR_REGS = 16


class _Kernel:
    """What a launch needs of a loaded kernel, precomputed: the PM4 template and its patch indices."""

    __slots__ = ("template", "i_dp", "i_ka", "i_threads", "i_dispatch", "slot", "kd_va", "group", "private",
                 "hidden", "image", "scratch")

    def __init__(self, gc, kern, image: Buffer, layout: ArgLayout, scratch=None):
        kd = kern.descriptor
        self.image, self.group, self.private = image, kd.group_segment_fixed_size, kd.private_segment_fixed_size
        group = self.group
        user = {name: at for name, at, _ in kd.user_sgpr_layout()}
        self.scratch = scratch   # the program keeps the scratch buffer its launches name
        base = image.va
        self.kd_va = base + kern.descriptor_address
        entry = base + kern.code_address
        if entry & 0xFF:
            raise HCQError(f"kernel {kern.name}: code entry {entry:#x} is not 256-byte aligned (COMPUTE_PGM_LO "
                           "holds address bits 39:8); link the code object with lld")
        rsrc2 = kd.compute_pgm_rsrc2 & ~(_LDS_MASK << _LDS_SHIFT)
        rsrc2 |= min(-(-group // _LDS_GRANULE), _LDS_MASK) << _LDS_SHIFT
        initiator = gc.COMPUTE_DISPATCH_INITIATOR.encode(COMPUTE_SHADER_EN=1, FORCE_START_AT_000=1,
                                                         CS_W32_EN=int(kd.wave32))
        b = pm4.PM4()
        b.acquire_mem()
        b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_PGM_LO"), (entry >> 8) & _M32, entry >> 40)
        b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_PGM_RSRC1"), kd.compute_pgm_rsrc1, rsrc2)
        b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_PGM_RSRC3"), kd.compute_pgm_rsrc3)
        if scratch is None:
            b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_TMPRING_SIZE"), 0)
        else:   # private memory: the device's scratch buffer (amdrv.hcq.scratch), base as address >> 8
            sva = scratch.buffer.va
            b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_TMPRING_SIZE"), scratch.tmpring_size(gc))
            b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_DISPATCH_SCRATCH_BASE_LO"), (sva >> 8) & _M32, sva >> 40)
        i_user = b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_USER_DATA_0"), *(0,) * _USER_SGPR_REGS)
        b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_START_X"), 0, 0, 0)
        self.i_threads = b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_NUM_THREAD_X"), 1, 1, 1)
        b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_RESOURCE_LIMITS"), 0)
        self.i_dispatch = b.dispatch_direct(1, 1, 1, initiator)
        self.template = b.buf
        # the user SGPRs a launch patches (AMDGPUUsage order, as the descriptor enables them); the others
        # (queue ptr, dispatch id, private segment size) stay 0
        self.i_dp = i_user + user["dispatch_ptr"] if "dispatch_ptr" in user else -1
        self.i_ka = i_user + user["kernarg_segment_ptr"] if "kernarg_segment_ptr" in user else -1
        kernarg = max(kern.kernarg_size, 16)
        self.slot = PACKET_BYTES + (kernarg + 63) // 64 * 64
        self.hidden = _hidden_plan(layout)

def _hidden_plan(layout: ArgLayout):
    """[(offset in the kernarg segment, struct code, what)] for hidden arguments, or None."""
    if not layout.hidden:
        return None
    return [(a.offset, "<" + {1: "B", 2: "H", 4: "I", 8: "Q"}.get(a.size, f"{a.size}s"), a.what) for a in layout.hidden]


def grid_dims(g, l_) -> int:
    """The dimensions a launch uses (the packet's setup field, hidden_grid_dims): up to the last one with
    more than one workgroup or work-item."""
    return 3 if g[2] > 1 or l_[2] > 1 else 2 if g[1] > 1 or l_[1] > 1 else 1


def write_dispatch(mem, at: int, k: _Kernel, va: int, g, l_) -> None:
    """The hsa_kernel_dispatch_packet of the launch slot at `at` (GPU address va; its kernarg segment
    follows the packet): workgroup sizes, the grid in work-items; then the kernargs' hidden arguments."""
    gx, gy, gz = g
    lx, ly, lz = l_
    dims = grid_dims(g, l_)
    _PACKET.pack_into(mem, at, _HSA_PACKET_TYPE_KERNEL_DISPATCH, dims, lx, ly, lz, 0,
                      gx * lx, gy * ly, gz * lz, k.private, k.group, k.kd_va, va + PACKET_BYTES, 0, 0)
    if k.hidden:
        _fill_hidden(k.hidden, mem, at + PACKET_BYTES, g, l_, dims)


def _fill_hidden(plan, mem, base: int, g, l_, dims: int) -> None:
    """Code object v5's hidden_block_count/group_size/grid_dims get the launch's values; every other
    hidden argument is 0: remainders (global_size counts whole workgroups), global offsets, and the
    printf/hostcall/heap/queue pointers this backend does not provide."""
    for off, code, what in plan:
        if what.startswith("hidden_block_count_"):
            v = g["xyz".index(what[-1])]
        elif what.startswith("hidden_group_size_"):
            v = l_["xyz".index(what[-1])]
        elif what == "hidden_grid_dims":
            v = dims
        else:
            v = 0 if not code.endswith("s") else b""
        struct.pack_into(code, mem, base + off, v)

def _patch_exec(b: array, at: int, k: _Kernel, va: int, g, l_) -> None:
    """The launch's values into a copy of the program's template at `at`: dispatch and kernarg pointers
    (where the descriptor asks for them), work-group size, workgroup counts."""
    if k.i_dp >= 0:
        i = at + k.i_dp
        b[i] = va & _M32
        b[i + 1] = va >> 32
    if k.i_ka >= 0:
        i = at + k.i_ka
        ka = va + PACKET_BYTES
        b[i] = ka & _M32
        b[i + 1] = ka >> 32
    t = at + k.i_threads
    b[t], b[t + 1], b[t + 2] = l_
    t = at + k.i_dispatch
    b[t], b[t + 1], b[t + 2] = g
