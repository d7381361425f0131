"""SDMA v6 packets (SDMA 6.0 queues), built into a flat dword array.

    from amdrv import sdma_packets as S
    b = S.SDMABuilder()                               # b.buf: array('I'), appended to
    at = b.copy(dst, src, nbytes)              # split at COPY_MAX_BYTES; returns each packet's index
    f = b.fence(addr, value)                   # returns the index of the value dword
    b.buf[f] = new_value                       # patched in place, resubmitted without rebuilding

Each method appends its packet(s) and returns the dword index (into `buf`) of the first patchable
field named in its docstring; addresses are stored low dword first.

Facts (sdma_v6_0_0_pkt_open.h through amdrv.autogen.sdma6, and sdma_v6_0.c):
- COPY LINEAR (op 1, sub-op 0): byte count - 1, a parameter dword 0, source lo/hi, destination lo/hi
  (sdma_v6_0_emit_copy_buffer); amdgpu's copy_max_bytes for SDMA 6 is 0x400000, so longer copies are
  split into packets of at most that.
- WRITE (op 2, sub-op 0 linear): destination lo/hi, dword count - 1, the dwords (sdma_v6_0_vm_write_pte).
- FENCE (op 5) with MTYPE 3 (uncached): address lo/hi, a 32-bit value (sdma_v6_0_ring_emit_fence; a
  64-bit value is two fences, high dword at +4).
- TRAP (op 6): the interrupt context dword.
- POLL_REGMEM (op 8): FUNC (bits 30:28: 0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >), MEM_POLL (bit 31),
  HDP_FLUSH (bit 26); address lo/hi, reference, mask, interval | retry count << 16. The HDP flush form
  (sdma_v6_0_ring_emit_hdp_flush) puts GPU_HDP_FLUSH_DONE's and GPU_HDP_FLUSH_REQ's byte addresses in
  the address dwords and the engine's bit as reference and mask, retry 0xfff, interval 10.
- TIMESTAMP (op 13): sub-op 2 GET_GLOBAL (or 1 GET), an 8-byte aligned address lo/hi.
- CONSTANT FILL (op 11): destination lo/hi, the 32-bit pattern, byte count - 1 (sdma_v6_0_emit_fill_buffer
  leaves FILLSIZE 0; fill_max_bytes 0x400000 too).
- GCR_REQ (op 17): sdma_v6_0_ring_emit_mem_sync: GL2 INV/WB, GLM INV, GL1/GLV/GLK INV, GLI_INV(1) over
  the whole range (base and limit 0), control bits 15:0 in dword 2 and 18:16 in dword 3.
- NOP (op 0): COUNT (bits 29:16) more NOP dwords follow (sdma_v6_0_ring_insert_nop's burst NOP).
"""
from __future__ import annotations

from array import array

from amdrv.autogen import sdma6 as S

COPY_MAX_BYTES = 0x400000   # sdma_v6_0_buffer_funcs.copy_max_bytes
FILL_MAX_BYTES = 0x400000   # .fill_max_bytes
WRITE_MAX_DWORDS = S.PACKETS["WRITE_UNTILED"][3]["count"][1] + 1

# POLL_REGMEM functions
POLL_ALWAYS, POLL_LT, POLL_LE, POLL_EQ, POLL_NE, POLL_GE, POLL_GT = range(7)


def _hdr(pkt: str, op: int, sub_op: int = 0, **fields: int) -> int:
    layout = S.PACKETS[pkt][0]
    v = op << layout["op"][0]
    if "sub_op" in layout:
        v |= sub_op << layout["sub_op"][0]
    for name, value in fields.items():
        shift, mask = layout[name]
        if value & ~mask:
            raise ValueError(f"SDMA {pkt} header field {name}={value} does not fit its mask {mask:#x}")
        v |= value << shift
    return v


_H_COPY = _hdr("COPY_LINEAR", S.SDMA_OP_COPY, S.SDMA_SUBOP_COPY_LINEAR)
_H_WRITE = _hdr("WRITE_UNTILED", S.SDMA_OP_WRITE, S.SDMA_SUBOP_WRITE_LINEAR)
_H_FENCE = _hdr("FENCE", S.SDMA_OP_FENCE, mtype=3)
_H_COND_EXE = _hdr("COND_EXE", S.SDMA_OP_COND_EXE)
_H_INDIRECT = _hdr("INDIRECT", S.SDMA_OP_INDIRECT)
_INDIRECT_VMID = S.PACKETS["INDIRECT"][0]["vmid"][0]
_H_TRAP = _hdr("TRAP", S.SDMA_OP_TRAP)
_H_FILL = _hdr("CONSTANT_FILL", S.SDMA_OP_CONST_FILL)
_H_GCR = _hdr("GCR_REQ", S.SDMA_OP_GCR_REQ)
_H_TS = {sub: _hdr("TIMESTAMP_GET_GLOBAL", S.SDMA_OP_TIMESTAMP, sub)
         for sub in (S.SDMA_SUBOP_TIMESTAMP_GET, S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL)}
_POLL = S.PACKETS["POLL_REGMEM"][0]
_NOP_COUNT = S.PACKETS["NOP"][0]["count"]
SDMA_GCR_GLI_INV_1 = 1  # sdma_v6_0_0_pkt_open.h SDMA_GCR_GLI_INV(x) = (x & 3) << 0
MEM_SYNC_GCR = (S.SDMA_GCR_GL2_INV | S.SDMA_GCR_GL2_WB | S.SDMA_GCR_GLM_INV | S.SDMA_GCR_GL1_INV
                | S.SDMA_GCR_GLV_INV | S.SDMA_GCR_GLK_INV | SDMA_GCR_GLI_INV_1)
_M32 = 0xFFFFFFFF


def poll_header(function: int = POLL_EQ, mem: bool = True, hdp_flush: bool = False) -> int:
    return (S.SDMA_OP_POLL_REGMEM | function << _POLL["func"][0] | int(mem) << _POLL["mem_poll"][0]
            | int(hdp_flush) << _POLL["hdp_flush"][0])


_H_POLL_MEM = {f: poll_header(f) for f in range(7)}


class SDMABuilder:
    """An SDMA command stream being built: `buf` (array('I')) grows as packets are appended."""

    __slots__ = ("buf",)

    def __init__(self, buf: array | None = None):
        self.buf = array("I") if buf is None else buf

    def __len__(self) -> int:
        return len(self.buf)

    def nop(self, ndw: int = 1) -> int:
        """ndw dwords of NOP (one burst NOP). Returns the index of the first."""
        at = len(self.buf)
        if ndw > 0:
            if ndw - 1 > _NOP_COUNT[1]:
                raise ValueError(f"SDMA NOP of {ndw} dwords: the burst count holds at most {_NOP_COUNT[1] + 1}")
            self.buf.extend(((ndw - 1) << _NOP_COUNT[0] | S.SDMA_OP_NOP,) + (0,) * (ndw - 1))
        return at

    def copy(self, dst: int, src: int, nbytes: int) -> list[int]:
        """Linear copy of nbytes, split into packets of at most COPY_MAX_BYTES. Returns each packet's
        index of its byte-count dword (source lo/hi at +2, destination lo/hi at +4)."""
        if nbytes <= 0:
            raise ValueError(f"SDMA copy of {nbytes} bytes")
        b, out = self.buf, []
        for off in range(0, nbytes, COPY_MAX_BYTES):
            n = min(COPY_MAX_BYTES, nbytes - off)
            s, d = src + off, dst + off
            b.extend((_H_COPY, n - 1, 0, s & _M32, s >> 32, d & _M32, d >> 32))
            out.append(len(b) - 6)
        return out

    def write(self, dst: int, *values: int) -> int:
        """Writes dwords at dst. Returns the index of the first data dword (address lo/hi at -3)."""
        if not 0 < len(values) <= WRITE_MAX_DWORDS:
            raise ValueError(f"SDMA WRITE of {len(values)} dwords (1..{WRITE_MAX_DWORDS})")
        b = self.buf
        b.extend((_H_WRITE, dst & _M32, dst >> 32, len(values) - 1) + values)
        return len(b) - len(values)

    def fence(self, addr: int, value: int, *, bits64: bool = False) -> int:
        """Writes value (32 bits, or 64 as two fences: high dword at addr + 4). Returns the index of the
        (low) value dword; with bits64 the high value dword is at +4."""
        b = self.buf
        b.extend((_H_FENCE, addr & _M32, addr >> 32, value & _M32))
        at = len(b) - 1
        if bits64:
            hi = addr + 4
            b.extend((_H_FENCE, hi & _M32, hi >> 32, value >> 32))
        return at

    def trap(self, context: int = 0) -> int:
        """An interrupt (SDMA trap) with the given context. Returns the index of the context dword."""
        b = self.buf
        b.extend((_H_TRAP, context))
        return len(b) - 1

    def cond_exe(self, addr: int, reference: int, ndw: int) -> int:
        """COND_EXE: the next ndw dwords run only if mem32[addr] == reference (sdma_v6_0's
        ring_init_cond_exec emits it with reference 1). Returns the index of its exec-count dword."""
        b = self.buf
        b.extend((_H_COND_EXE, addr & _M32, addr >> 32, reference & _M32, ndw))
        return len(b) - 1

    def indirect(self, base: int, ndw: int, vmid: int = 0) -> int:
        """INDIRECT: runs the IB of ndw dwords at base (32-byte aligned; sdma_v6_0_ring_emit_ib, which pads
        with NOPs so the packet ends on an 8-dword boundary: the caller places it). Returns its index."""
        b = self.buf
        b.extend((_H_INDIRECT | vmid << _INDIRECT_VMID, base & _M32, base >> 32, ndw, 0, 0))
        return len(b) - 6

    def poll_mem(self, addr: int, value: int, mask: int = _M32, function: int = POLL_GE,
                 interval: int = 10, retry: int = 0xFFF) -> int:
        """Blocks the queue until (mem32[addr] & mask) <function> value. Returns the index of the
        address's low dword; the reference is at +2."""
        b = self.buf
        b.extend((_H_POLL_MEM[function], addr & _M32, addr >> 32, value, mask, retry << 16 | interval))
        return len(b) - 5

    def hdp_flush(self, req_reg, done_reg, mask: int) -> int:
        """The HDP flush as sdma_v6_0_ring_emit_hdp_flush: req_reg/done_reg/mask as
        NBIO.hdp_flush_request("SDMA<n>") returns them. Returns the packet's index."""
        b = self.buf
        at = len(b)
        b.extend((poll_header(POLL_EQ, mem=False, hdp_flush=True), done_reg.addr, req_reg.addr, mask, mask,
                  0xFFF << 16 | 10))
        return at

    def timestamp(self, addr: int, global_clock: bool = True) -> int:
        """Writes the 64-bit GPU timestamp at addr (8-byte aligned). Returns the index of the address."""
        if addr & 7:
            raise ValueError(f"SDMA TIMESTAMP address {addr:#x} is not 8-byte aligned")
        sub = S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL if global_clock else S.SDMA_SUBOP_TIMESTAMP_GET
        b = self.buf
        b.extend((_H_TS[sub], addr & _M32, addr >> 32))
        return len(b) - 2

    def fill(self, dst: int, pattern: int, nbytes: int) -> list[int]:
        """Constant fill of nbytes with a 32-bit pattern, split at FILL_MAX_BYTES. Returns each packet's
        index of its destination's low dword (pattern at +2, byte count - 1 at +3)."""
        if nbytes <= 0:
            raise ValueError(f"SDMA fill of {nbytes} bytes")
        b, out = self.buf, []
        for off in range(0, nbytes, FILL_MAX_BYTES):
            n = min(FILL_MAX_BYTES, nbytes - off)
            d = dst + off
            b.extend((_H_FILL, d & _M32, d >> 32, pattern, n - 1))
            out.append(len(b) - 4)
        return out

    def gcr(self, gcr_cntl: int = MEM_SYNC_GCR) -> int:
        """Whole-range cache rinse as sdma_v6_0_ring_emit_mem_sync. Returns the packet's index."""
        b = self.buf
        at = len(b)
        b.extend((_H_GCR, 0, (gcr_cntl & 0xFFFF) << 16, gcr_cntl >> 16, 0))
        return at
