"""PM4 type-3 packets for the GC 11 MEC (compute queues), built into a flat dword array.

    from amdrv import pm4
    b = pm4.PM4()                                     # b.buf: array('I'), appended to
    b.acquire_mem()                                   # invalidate caches before a kernel (emit_mem_sync)
    b.set_sh_reg(pm4.sh_offset(gc, "COMPUTE_PGM_LO"), lo, hi)
    at = b.dispatch_direct(gx, gy, gz, initiator)     # returns the dword index of gx
    v = b.release_mem(addr, value)                    # returns the index of the data's low dword
    b.buf[v] = new_value & 0xFFFFFFFF                 # patched in place, resubmitted without rebuilding
    queue.submit(b.buf)

Every method appends one packet and returns the dword index (into `buf`) of its first patchable field,
named in its docstring; 64-bit values are stored low dword first at that index. Headers are precomputed
module constants, so a packet costs one tuple and one array extend.

Facts (drivers/gpu/drm/amd/amdgpu): the header is nvd.h's PACKET3(op, n) = 3 << 30 | n << 16 | op << 8
where n is the number of dwords after the header minus one (amdrv.autogen.pm4.MACROS['PACKET3']).
- SET_SH_REG: the register's dword offset minus PACKET3_SET_SH_REG_START (0x2C00), then the values
  (gfx_v9_0_do_edc_gpr_workarounds' dispatch; the offset is SOC15_REG_OFFSET: GC base + register).
- DISPATCH_DIRECT (n=3): x, y, z workgroups, COMPUTE_DISPATCH_INITIATOR (same source).
- ACQUIRE_MEM (n=6): CP_COHER_CNTL 0, CP_COHER_SIZE 0xffffffff, _HI 0xffffff, BASE 0, BASE_HI 0,
  POLL_INTERVAL 10, GCR_CNTL with GL2 INV/WB, GLM INV/WB, GL1/GLV/GLK INV and GLI_INV(1): exactly
  gfx_v11_0_emit_mem_sync.
- RELEASE_MEM (n=6): the GCR actions and event of gfx_v11_0_ring_emit_fence (SEQ, GL2 WB/INV/US, GL1,
  GLV, GLM INV/WB, CACHE_POLICY 3, CACHE_FLUSH_AND_INV_TS_EVENT (soc21_enum.h 0x14), EVENT_INDEX 5);
  DATA_SEL 1 = low 32 bits, 2 = 64 bits, 3 = the 64-bit GPU clock, 0 = none; INT_SEL 0 none,
  2 = interrupt once the write is confirmed; address, data lo/hi, and a context id dword.
- WAIT_REG_MEM (n=5): FUNCTION (0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >), MEM_SPACE 1 = memory,
  OPERATION 0, ENGINE 0 (me); address lo/hi, reference, mask, poll interval (gfx_v11_0_wait_reg_mem).
- WRITE_DATA (n = 2 + dwords): ENGINE_SEL 0, DST_SEL 5 (memory, async direct) or 0 (register),
  WR_CONFIRM; address lo/hi; data (gfx_v11_0_ring_emit_fence_kiq).
- INDIRECT_BUFFER (n=2): address lo/hi, INDIRECT_BUFFER_VALID | length in dwords | vmid << 24
  (gfx_v11_0_ring_emit_ib_compute).
- EVENT_WRITE (n=0): EVENT_TYPE | EVENT_INDEX << 8 (nvd.h; index 4 for CS_PARTIAL_FLUSH, soc21_enum 7).
- COPY_DATA (n=4): SRC_SEL in bits 3:0, DST_SEL in bits 11:8, WR_CONFIRM bit 20; source lo/hi,
  destination lo/hi (gfx_v11_0's register-to-memory copy: src 0 = register, dst 5 = memory).
- KIQ packets (gfx_v11_0.c gfx11_kiq_*, nvd.h): SET_RESOURCES (n=6): VMID_MASK 0, QUEUE_TYPE 0 (KIQ), queue
  mask lo/hi, GWS mask lo/hi, OAC mask, GDS heap: all 0 but the mask; MAP_QUEUES (n=5): QUEUE_SEL 0, VMID 0,
  QUEUE, PIPE, ME, QUEUE_TYPE 0 (normal compute), ALLOC_FORMAT 0, ENGINE_SEL 0 (compute), NUM_QUEUES 1;
  DOORBELL_OFFSET << 2; MQD address lo/hi; wptr address lo/hi; UNMAP_QUEUES (n=4): ACTION, QUEUE_SEL 0,
  ENGINE_SEL 0, NUM_QUEUES 1; DOORBELL_OFFSET0 << 2; three zero dwords (the fence form is
  PREEMPT_QUEUES_NO_UNMAP's).
- NOP: PACKET3(NOP, 0x3FFF) is a one-dword NOP (amdgpu's compute ring nop); longer ones carry n+1
  payload dwords.
"""
from __future__ import annotations

from array import array

from amdrv.autogen import pm4 as P

_TYPE3, _OP, _N = P.MACROS["PACKET3"][0], P.MACROS["PACKET3"][1][0][1], P.MACROS["PACKET3"][1][1][1]
MAX_COUNT = (1 << P.MACROS["PACKET3"][1][1][2]) - 1


def header(op: int, n: int) -> int:
    """PACKET3(op, n): n = dwords after the header minus one."""
    if not 0 <= n < MAX_COUNT:
        raise ValueError(f"PM4 packet {op:#x}: count {n} does not fit the header's 14-bit count")
    return _TYPE3 | n << _N | op << _OP


def _f(name: str, value: int) -> int:
    return value << P.FIELDS[name][0]


# soc21_enum.h VGT_EVENT_TYPE values used here
CACHE_FLUSH_AND_INV_TS_EVENT = 0x14
CS_PARTIAL_FLUSH = 0x07
BOTTOM_OF_PIPE_TS = 0x28

# WAIT_REG_MEM functions (nvd.h comment)
WAIT_ALWAYS, WAIT_LT, WAIT_LE, WAIT_EQ, WAIT_NE, WAIT_GE, WAIT_GT = range(7)
# RELEASE_MEM DATA_SEL / INT_SEL (nvd.h comments)
DATA_NONE, DATA_32, DATA_64, DATA_GPU_CLOCK = 0, 1, 2, 3
INT_NONE, INT_ON_CONFIRM = 0, 2
# WRITE_DATA / COPY_DATA selects (nvd.h WRITE_DATA_DST_SEL comment; gfx_v11_0's COPY_DATA)
SEL_REGISTER, SEL_MEMORY = 0, 5

NOP_1DW = _TYPE3 | MAX_COUNT << _N | P.PACKET3_NOP << _OP  # count 0x3FFF: header only

# gfx_v11_0_emit_mem_sync's GCR_CNTL
MEM_SYNC_GCR = (_f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_INV", 1) | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_WB", 1)
                | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_INV", 1) | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_WB", 1)
                | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_INV", 1) | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV", 1)
                | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV", 1) | _f("PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV", 1))
# gfx_v11_0_ring_emit_fence's cache actions and event (dword 1 of RELEASE_MEM)
RELEASE_GCR = (P.PACKET3_RELEASE_MEM_GCR_SEQ | P.PACKET3_RELEASE_MEM_GCR_GL2_WB | P.PACKET3_RELEASE_MEM_GCR_GL2_INV
               | P.PACKET3_RELEASE_MEM_GCR_GL2_US | P.PACKET3_RELEASE_MEM_GCR_GL1_INV
               | P.PACKET3_RELEASE_MEM_GCR_GLV_INV | P.PACKET3_RELEASE_MEM_GCR_GLM_INV
               | P.PACKET3_RELEASE_MEM_GCR_GLM_WB)
RELEASE_EVENT = (RELEASE_GCR | _f("PACKET3_RELEASE_MEM_CACHE_POLICY", 3)
                 | _f("PACKET3_RELEASE_MEM_EVENT_TYPE", CACHE_FLUSH_AND_INV_TS_EVENT)
                 | _f("PACKET3_RELEASE_MEM_EVENT_INDEX", 5))

_H_SET_SH = {n: header(P.PACKET3_SET_SH_REG, n) for n in range(1, 33)}
_H_DISPATCH = header(P.PACKET3_DISPATCH_DIRECT, 3)
_H_ACQUIRE = header(P.PACKET3_ACQUIRE_MEM, 6)
_H_RELEASE = header(P.PACKET3_RELEASE_MEM, 6)
_H_WAIT = header(P.PACKET3_WAIT_REG_MEM, 5)
_H_IB = header(P.PACKET3_INDIRECT_BUFFER, 2)
_H_EVENT = header(P.PACKET3_EVENT_WRITE, 0)
_H_COPY = header(P.PACKET3_COPY_DATA, 4)
_WAIT_MEM = _f("WAIT_REG_MEM_MEM_SPACE", 1) | _f("WAIT_REG_MEM_OPERATION", 0) | _f("WAIT_REG_MEM_ENGINE", 0)
_WRITE_MEM = _f("WRITE_DATA_ENGINE_SEL", 0) | _f("WRITE_DATA_DST_SEL", SEL_MEMORY) | P.WR_CONFIRM
_WRITE_REG = _f("WRITE_DATA_ENGINE_SEL", 0) | _f("WRITE_DATA_DST_SEL", SEL_REGISTER) | P.WR_CONFIRM
_DATA_SEL, _INT_SEL = P.FIELDS["PACKET3_RELEASE_MEM_DATA_SEL"][0], P.FIELDS["PACKET3_RELEASE_MEM_INT_SEL"][0]
_M32 = 0xFFFFFFFF


def sh_offset(gc, name: str) -> int:
    """SET_SH_REG's offset of a GC register (amdrv.regs.IPBlock bound to GC): its dword address minus
    PACKET3_SET_SH_REG_START. Raises ValueError for a register outside the SH range."""
    off = gc.reg(name).addr // 4 - P.PACKET3_SET_SH_REG_START
    if not 0 <= off < P.PACKET3_SET_SH_REG_END - P.PACKET3_SET_SH_REG_START:
        raise ValueError(f"{name} (dword {gc.reg(name).addr // 4:#x}) is not an SH register "
                         f"({P.PACKET3_SET_SH_REG_START:#x}..{P.PACKET3_SET_SH_REG_END:#x})")
    return off


class PM4:
    """A PM4 command stream being built: `buf` (array('I')) grows as packets are appended."""

    __slots__ = ("buf",)

    def __init__(self, buf: array | None = None):
        self.buf = array("I") if buf is None else buf

    def __len__(self) -> int:
        return len(self.buf)

    def nop(self, ndw: int = 1) -> int:
        """ndw dwords of NOP. Returns the index of the first."""
        at = len(self.buf)
        if ndw == 1:
            self.buf.append(NOP_1DW)
        elif ndw > 1:
            self.buf.extend((header(P.PACKET3_NOP, ndw - 2),) + (0,) * (ndw - 1))
        return at

    def set_sh_reg(self, offset: int, *values: int) -> int:
        """Consecutive SH registers from `offset` (see sh_offset). Returns the index of the first value."""
        b = self.buf
        b.extend((_H_SET_SH[len(values)], offset) + values)
        return len(b) - len(values)

    def dispatch_direct(self, x: int, y: int, z: int, initiator: int) -> int:
        """A dispatch of x*y*z workgroups. Returns the index of x."""
        b = self.buf
        b.extend((_H_DISPATCH, x, y, z, initiator))
        return len(b) - 4

    def acquire_mem(self, gcr_cntl: int = MEM_SYNC_GCR) -> int:
        """Full-range cache invalidation/writeback as gfx_v11_0_emit_mem_sync. Returns the index of GCR_CNTL."""
        b = self.buf
        b.extend((_H_ACQUIRE, 0, _M32, 0xFFFFFF, 0, 0, 0x0000000A, gcr_cntl))
        return len(b) - 1

    def release_mem(self, addr: int, value: int = 0, *, data_sel: int = DATA_32, interrupt: bool = False,
                    event: int = RELEASE_EVENT, ctx_id: int = 0) -> int:
        """End-of-pipe: caches written back and invalidated, then value (data_sel DATA_32/DATA_64), the
        GPU clock (DATA_GPU_CLOCK) or nothing (DATA_NONE) written to addr, and an interrupt once
        confirmed if asked. Returns the index of the address's low dword; the data follows at +2."""
        b = self.buf
        b.extend((_H_RELEASE, event, data_sel << _DATA_SEL | (INT_ON_CONFIRM if interrupt else 0) << _INT_SEL,
                  addr & _M32, addr >> 32, value & _M32, value >> 32, ctx_id))
        return len(b) - 5

    def wait_reg_mem(self, addr: int, value: int, mask: int = _M32, function: int = WAIT_GE,
                     interval: int = 4) -> int:
        """Blocks the queue until (mem32[addr] & mask) <function> value. Returns the index of the
        address's low dword; the reference value is at +2."""
        b = self.buf
        b.extend((_H_WAIT, _WAIT_MEM | function, addr & _M32, addr >> 32, value, mask, interval))
        return len(b) - 5

    def write_data(self, addr: int, *values: int) -> int:
        """Writes dwords to memory at addr. Returns the index of the address's low dword (data at +2)."""
        b = self.buf
        b.extend((header(P.PACKET3_WRITE_DATA, 2 + len(values)), _WRITE_MEM, addr & _M32, addr >> 32) + values)
        return len(b) - 2 - len(values)

    def write_reg(self, dword_addr: int, value: int) -> int:
        """WRITE_DATA to a register (its dword address). Returns the index of the value."""
        b = self.buf
        b.extend((header(P.PACKET3_WRITE_DATA, 3), _WRITE_REG, dword_addr, 0, value))
        return len(b) - 1

    def indirect_buffer(self, addr: int, ndw: int, vmid: int = 0) -> int:
        """Runs ndw dwords of commands at addr (dword aligned). Returns the index of the address."""
        if addr & 3:
            raise ValueError(f"INDIRECT_BUFFER at {addr:#x} is not dword aligned")
        b = self.buf
        b.extend((_H_IB, addr & _M32, addr >> 32, P.INDIRECT_BUFFER_VALID | ndw | vmid << 24))
        return len(b) - 3

    def event_write(self, event_type: int, event_index: int = 0) -> int:
        """EVENT_WRITE (e.g. CS_PARTIAL_FLUSH, index 4). Returns the index of the event dword."""
        b = self.buf
        b.extend((_H_EVENT, event_type | event_index << P.FIELDS["EVENT_INDEX"][0]))
        return len(b) - 1

    def copy_data(self, src_sel: int, src: int, dst_sel: int, dst: int, wr_confirm: bool = True) -> int:
        """COPY_DATA of one dword (SEL_REGISTER: a register's dword address; SEL_MEMORY: an address).
        Returns the index of the source's low dword (the destination's is at +2)."""
        b = self.buf
        b.extend((_H_COPY, src_sel | dst_sel << 8 | (1 << 20 if wr_confirm else 0),
                  src & _M32, src >> 32, dst & _M32, dst >> 32))
        return len(b) - 4


# ---------------------------------------------------------------- KIQ packets (module functions: rare)
def set_resources(queue_mask: int) -> list[int]:
    """gfx11_kiq_set_resources: the queues (bit pipe * 8 + queue of MEC 0) the KIQ's firmware may map."""
    return [header(P.PACKET3_SET_RESOURCES, 6), _f("PACKET3_SET_RESOURCES_VMID_MASK", 0)
            | _f("PACKET3_SET_RESOURCES_QUEUE_TYPE", 0), queue_mask & _M32, queue_mask >> 32 & _M32, 0, 0, 0, 0]


def map_queues(me: int, pipe: int, queue: int, doorbell: int, mqd_addr: int, wptr_addr: int) -> list[int]:
    """gfx11_kiq_map_queues for a compute queue (ENGINE_SEL 0 on ME 1)."""
    control = (_f("PACKET3_MAP_QUEUES_QUEUE_SEL", 0) | _f("PACKET3_MAP_QUEUES_VMID", 0)
               | _f("PACKET3_MAP_QUEUES_QUEUE", queue) | _f("PACKET3_MAP_QUEUES_PIPE", pipe)
               | _f("PACKET3_MAP_QUEUES_ME", me) | _f("PACKET3_MAP_QUEUES_QUEUE_TYPE", 0)
               | _f("PACKET3_MAP_QUEUES_ALLOC_FORMAT", 0) | _f("PACKET3_MAP_QUEUES_ENGINE_SEL", 0)
               | _f("PACKET3_MAP_QUEUES_NUM_QUEUES", 1))
    return [header(P.PACKET3_MAP_QUEUES, 5), control, _f("PACKET3_MAP_QUEUES_DOORBELL_OFFSET", doorbell),
            mqd_addr & _M32, mqd_addr >> 32, wptr_addr & _M32, wptr_addr >> 32]


def unmap_queues(action: int, doorbell: int) -> list[int]:
    """gfx11_kiq_unmap_queues of one compute queue (no fence: not PREEMPT_QUEUES_NO_UNMAP)."""
    control = (_f("PACKET3_UNMAP_QUEUES_ACTION", action) | _f("PACKET3_UNMAP_QUEUES_QUEUE_SEL", 0)
               | _f("PACKET3_UNMAP_QUEUES_ENGINE_SEL", 0) | _f("PACKET3_UNMAP_QUEUES_NUM_QUEUES", 1))
    return [header(P.PACKET3_UNMAP_QUEUES, 4), control, _f("PACKET3_UNMAP_QUEUES_DOORBELL_OFFSET0", doorbell), 0, 0, 0]
