"""What a kernel launch writes: the program's precomputed PM4 template and its patch indices (_Kernel),
the hsa_kernel_dispatch_packet and the kernarg segment's hidden arguments (amdrv.hcq's docstring)."""
from __future__ import annotations

import struct
from array import array
from collections import deque

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


_SLOT_ALIGN_DW = PACKET_BYTES // 4   # the slot's dispatch packet 64-byte aligned (an AQL packet), kernargs at +64
_OTHER_DW = 40    # a launch's commands but its kernel's: a gate WAIT_REG_MEM (7), two timestamps and the signal
                  # (RELEASE_MEM, 8 each), the NOP's header


class RingSlots:
    """Launch slots in the compute ring itself, where a launch's writes cost a round trip each (the open bridge
    firmware: the ring and the arena are VRAM written by 0xF0 streamed writes, amdrv.placement): the dispatch
    packet and kernargs ride in the body of a PM4 NOP that the CP skips (PM4 type 3: count + 1 body dwords,
    pm4.py), just before the launch's PM4, so kernargs, PM4 and signal are one contiguous write, then the HDP
    flush and the doorbell: 2 round trips instead of 3 (docs/usb.md). The dispatch packet is 64-byte aligned
    (the NOP's body is padded to it) and the kernargs follow at +64, as in the arena (AMDGPUUsage: the kernarg
    segment 16-byte aligned at least). A launch never wraps: the ring's end is skipped with a NOP first
    (ComputeQueue.skip_to_start). The CP reading past a launch's packets says nothing about its waves, which read
    the kernargs while they run: the ring's dwords where an earlier launch's submission started are written
    again only once its timeline value is seen (`live`). A launch larger than half the ring goes to the arena."""

    __slots__ = ("dev", "ring", "live", "max_dw")

    def __init__(self, dev, ring):
        self.dev, self.ring = dev, ring
        self.live: deque = deque()        # (first dword, end dword: counted since set-up, timeline value)
        self.max_dw = ring.ring_dw // 2

    def fits(self, k: _Kernel) -> bool:
        """Whether a launch of k goes in the ring (else the arena): with its other commands (a gate wait, two
        timestamps, the signal: under _OTHER_DW) in half the ring at most."""
        return k.slot // 4 + len(k.template) + _OTHER_DW + _SLOT_ALIGN_DW <= self.max_dw

    def reset(self) -> None:
        """The ring was reset (recover): nothing in it is in flight any more."""
        self.live.clear()

    def submit(self, k: _Kernel, layout: ArgLayout, args, g, l_, pre: array, post: array) -> None:
        """Submits pre (dwords: a gate wait, a timestamp), the launch of k with its slot in the ring, then post
        (a timestamp, the signal of the device's next timeline value, taken once the kernargs are packed)."""
        ring = self.ring
        rdw, slot_dw = ring.ring_dw, k.slot // 4
        start = ring.wptr
        at = start % rdw
        after = len(k.template) + len(post)
        body, s, n = _nop_layout(at, len(pre), slot_dw, after)
        if at + n > rdw:                        # one piece: the ring's end skipped first
            start += rdw - at
            at = 0
            body, s, n = _nop_layout(0, len(pre), slot_dw, after)
        va = ring.ring_va + 4 * s
        slot = bytearray(k.slot)
        layout.pack_into(slot, PACKET_BYTES, args)
        write_dispatch(slot, 0, k, va, g, l_)
        lo = ring.wptr
        self._retire(lo, start + n)
        value = self.dev.next_timeline()
        if start != lo:
            ring.skip_to_start()
        b = array("I", pre)
        b.append(pm4.header(pm4.P.PACKET3_NOP, body - 1))
        pad = s - at - len(b)
        if pad:
            b.frombytes(bytes(4 * pad))
        b.frombytes(slot)
        i = len(b)
        b.extend(k.template)
        _patch_exec(b, i, k, va, g, l_)
        b.extend(post)
        ring.submit(b)
        self.dev.timeline_submitted = value
        self.live.append((lo, start + n, value))     # the skipped end with it: the CP reads it before the signal

    def before_write(self, n: int) -> None:
        """Another submission of n dwords is about to be written into the ring (a queue built through the hcq
        API: its kernargs in the arena): the launches whose slots it overwrites are done first."""
        if self.live:
            w = self.ring.wptr
            self._retire(w, w + n)

    def _retire(self, lo: int, hi: int) -> None:
        """Before the ring's dwords [lo, hi) (counted since set-up) are written: the launches submitted a lap
        earlier from there on are done (their waves may still read their kernargs otherwise). The timeline's
        last value seen answers without a read where it can; a value seen also tells the CP read past that
        submission, so the ring's room check needs no rptr read up to there."""
        live, limit, need, end = self.live, hi - self.ring.ring_dw, 0, 0
        while live and live[0][0] <= limit:    # <=: the room check wants the CP one dword past
            _, end, need = live.popleft()
        if need:
            tl = self.dev.timeline
            if tl.mem[0] < need:
                tl.wait(need)
            self.ring.consumed(end)


def _nop_layout(at: int, before: int, slot_dw: int, after: int) -> tuple[int, int, int]:
    """(NOP body dwords, ring dword of the slot, submission dwords) for a submission at ring dword `at`: `before`
    dwords, the NOP header, its body (padding to the slot's 64-byte alignment, then the slot), `after` dwords."""
    h = at + before
    s = (h + _SLOT_ALIGN_DW) & -_SLOT_ALIGN_DW
    body = s - h - 1 + slot_dw
    return body, s, before + 1 + body + after
