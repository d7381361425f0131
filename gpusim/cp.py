"""The CP's compute queues (MEC hardware queue descriptors) and their PM4 packet processor.

Facts (amdgpu/gfx_v11_0.c, include/v11_structs.h, amdgpu/nvd.h, soc15d.h; gc_11_0_0 registers):
- A compute queue is an HQD: the CP_HQD_* / CP_MQD_* registers of one (ME, pipe, queue), selected with
  GRBM_GFX_CNTL MEID/PIPEID/QUEUEID (soc21_grbm_select). gfx11 has one MEC, ME 1 (ring->me = mec + 1),
  with 4 pipes of 8 queues. gfx_v11_0_kiq_init_register programs a queue directly: CP_HQD_EOP_BASE_ADDR/
  _HI/CONTROL, CP_HQD_PQ_DOORBELL_CONTROL (DOORBELL_OFFSET in dwords, DOORBELL_EN), CP_MQD_BASE_ADDR/_HI,
  CP_MQD_CONTROL, CP_HQD_PQ_BASE/_HI (ring address >> 8), CP_HQD_PQ_CONTROL (QUEUE_SIZE: 2^(QUEUE_SIZE+1)
  dwords; PRIV_STATE, KMD_QUEUE), CP_HQD_PQ_RPTR_REPORT_ADDR/_HI, CP_HQD_PQ_WPTR_POLL_ADDR/_HI,
  CP_MEC_DOORBELL_RANGE_LOWER/UPPER (byte offsets: (index * 2) << 2), CP_HQD_PQ_WPTR_LO/HI, CP_HQD_VMID,
  CP_HQD_PERSISTENT_STATE, then CP_HQD_ACTIVE = 1. To take a queue down it writes CP_HQD_DEQUEUE_REQUEST = 1
  and polls CP_HQD_ACTIVE until it reads 0 (hw_fini writes 2 to every queue).
- Compute rings are rung with a 64-bit doorbell carrying the write pointer in dwords (WDOORBELL64 of
  ring->wptr); the CP reports its read pointer (dwords within the ring) at the rptr report address.
- PM4 type-3 header: type 31:30 = 3, count 29:16 (body dwords - 1), opcode 15:8. PACKET3(NOP, 0x3FFF)
  is a one-dword NOP (amdgpu's ring padding). Packet bodies as gfx_v11_0.c emits them: SET_SH_REG
  (offset from PACKET3_SET_SH_REG_START, values), DISPATCH_DIRECT (x, y, z, COMPUTE_DISPATCH_INITIATOR),
  ACQUIRE_MEM (7 dwords), RELEASE_MEM (event, DATA_SEL 31:29 / INT_SEL 26:24 / DST_SEL 17:16, address
  lo/hi, data lo/hi, interrupt context), WAIT_REG_MEM (FUNCTION 2:0, MEM_SPACE 5:4, OPERATION 7:6, ENGINE;
  address lo/hi or register(s), reference, mask, poll interval), WRITE_DATA (DST_SEL 11:8: 0 register,
  1/2/5 memory; WR_ONE_ADDR; address lo/hi; data), INDIRECT_BUFFER (address lo/hi, control:
  IB_SIZE 19:0, CHAIN 20, VALID 23, VMID 27:24), EVENT_WRITE, COPY_DATA (SRC_SEL 3:0, DST_SEL 11:8,
  COUNT_SEL 16; source, destination).
- The CP EOP interrupt (RELEASE_MEM INT_SEL): client SOC21_IH_CLIENTID_GRBM_CP, src
  GFX_11_0_0__SRCID__CP_EOP_INTERRUPT, ring_id = queue << 4 | me << 2 | pipe (gfx_v11_0_eop_irq decodes it),
  src_data[0] the packet's interrupt context; sent only while the pipe's CP_ME1_PIPEn_INT_CNTL.
  TIME_STAMP_INT_ENABLE is set (gfx_v11_0_set_compute_eop_interrupt_state). RELEASE_MEM's DATA_SEL (0 none,
  1 32-bit low, 2 64-bit, 3 GPU clock counter), INT_SEL (1 interrupt only, 2 after write confirm, 3 data
  after write confirm, 4 unconditionally with ctxid) and DST_SEL (0 memory, 1 TC_L2) values are
  amdkfd/kfd_pm4_headers_ai.h's enums; WRITE_DATA's DST_SEL and WAIT_REG_MEM's fields are nvd.h's comments.
  COPY_DATA's SRC_SEL/DST_SEL beyond amdgpu's register -> memory (0 -> 5) use the PM4 numbering as the
  simulator reads it: 1/2 memory, 5 immediate, 9 GPU clock counter.

Strictness: a queue runs only while its MEC pipe runs its firmware (gpusim.gfx); a doorbell outside
CP_MEC_DOORBELL_RANGE does not reach the MEC. An unknown opcode, a packet of the wrong length, a
non-type-3 header, a fault on the ring, an IB or a packet's address, or a kernel that faults or does
not finish HANGS the queue: the read pointer stops at the packet, CP_STAT/GRBM_STATUS read busy, the
reason is in dev.errors; a hung queue ignores drain dequeue requests; a RESET_WAVES one takes it off its HQD
but leaves its pipe's firmware faulted (CP_STAT busy), and only the GRBM soft reset of the CP or a mode1 reset
clears that. HQD state survives a MEC halt or pipe reset; a dequeue takes DEQUEUE_STEPS and saves
the HQD registers to the MQD (CP_MQD_BASE_ADDR, v11_compute_mqd). RELEASE_MEM writes an end-of-pipe record
at CP_HQD_EOP_BASE_ADDR << 8. SH_MEM_CONFIG/SH_MEM_BASES are banked per GRBM_GFX_CNTL.VMID and give a
dispatch its flat LDS/private apertures and its alignment mode (gpusim.dispatch ALIGN_*).

Simulator choices: a rung queue runs at once, to completion or until it blocks or hangs (deterministic;
a driver polling a fence in memory sees it done); WAIT_REG_MEM that does not match blocks the queue and
is polled again every clock step (in the stepped mode it first lets up to WAIT_INLINE_STEPS steps pass,
the time a CP would spend polling, so an HDP flush request completes), every IDLE_POLL_STEPS once
IDLE_POLLS_FAST looks found nothing, and on every doorbell. With CP_PQ_WPTR_POLL_CNTL.EN the CP also reads
each queue's write pointer (u64, dwords) from CP_HQD_PQ_WPTR_POLL_ADDR at those polls. The looks are a poll
of the clock's (SimGPU.schedule_poll): while nothing else happens it skips those that would find nothing,
never one that runs a slice of a kernel or reads a register whose read acts (tests/gpusim/test_clock.py:
the same result as running each). An IB
of a privileged queue (PQ_CONTROL.PRIV_STATE) runs in the VMID of its control word, otherwise in the
queue's. The GPU clock counter (RELEASE_MEM DATA_SEL 3, COPY_DATA SRC_SEL 9) counts 100 MHz ticks of a
clock that is the device clock plus the work the CP did (PACKET_NS per packet, gpusim.dispatch.work_ns
per dispatch; in the stepped mode a dispatch also moves the device clock on by that time), so timestamps
are monotonic and a kernel takes time.

The KIQ (gfx_v11_0.c gfx11_kiq_*, nvd.h PACKET3_SET_RESOURCES/MAP_QUEUES/UNMAP_QUEUES, kfd_pm4_headers_ai.h
bit widths): the queue RLC_CP_SCHEDULERS.scheduler0 names (me << 5 | pipe << 3 | queue | 0x80,
gfx_v11_0_kiq_setting) runs the queue-management packets; on any other queue they hang it (assumption).
SET_RESOURCES gives its firmware the queue mask (bit pipe * 8 + queue); MAP_QUEUES (QUEUE_SEL 0, ENGINE_SEL 0
with ME 1, NUM_QUEUES 1, QUEUE_TYPE 0, a queue in the mask, not the KIQ's own slot; anything else hangs the
KIQ) reads the MQD (v11_compute_mqd) at the packet's address through the KIQ's page tables, past the HDP like
any engine read, so an MQD written through BAR0 without a flush loads stale; it loads the HQD registers from
it (cp_mqd_base_addr_lo on; the write-pointer poll address from the packet) and activates the queue. An
active slot is taken over, its old queue dropped unsaved (assumption). UNMAP_QUEUES (PREEMPT_QUEUES or
RESET_QUEUES, compute queues by doorbell offset) saves each queue's HQD registers to its MQD, as a dequeue
does, and deactivates it; a hung queue is never unmapped: the KIQ waits at the packet until a CP soft reset,
which also makes its firmware forget SET_RESOURCES. PREEMPT_QUEUES_NO_UNMAP, DISABLE_PROCESS_QUEUES, the
scheduler-chosen slots and MES are not modeled.
"""
from __future__ import annotations

import time

import functools

from amdrv import structs
from amdrv.autogen import ih as IHIDS
from amdrv.autogen import mqd_v11
from amdrv.autogen import pm4 as P
from gpusim.device import Block, DMAError, IVEntry
from gpusim.dispatch import DispatchFailed, dispatch_steps, work_ns
from gpusim.gmc import VMFault

GC = "GC"
MEC_ME = 1
N_PIPES, N_QUEUES = 4, 8
TIMESTAMP_NS = 10            # GPU clock counter tick (100 MHz)
PACKET_NS = 10
WAIT_INLINE_STEPS = 16
# The CP looks again at every clock step (a blocked WAIT_REG_MEM, the write-pointer poll) for its first
# IDLE_POLLS_FAST looks that find nothing, then every IDLE_POLL_STEPS (assumption: the firmware's poll
# interval is not public; simulator pacing)
IDLE_POLLS_FAST, IDLE_POLL_STEPS = 64, 16
PACKET_BUDGET = 100_000      # packets per run of a queue before others get a turn (an IB chained to itself)
KERNEL_MAX_STEPS = 500_000   # executor scheduler steps before a dispatch counts as hung
# Executor steps a dispatch runs per pass of its queue; a longer one stays in flight across the GPU's clock
# steps (a register read on the stepped clock), so the host's polls, their timeouts and the other queues go
# on while a long or hung kernel runs, as on hardware, where the CP does not block the host. Assumption: the
# slice is the simulator's own granularity (about 15 ms of wall time), not a hardware figure.
DISPATCH_SLICE_STEPS = 1_000
MAX_IB_DEPTH = 2
NOP_ONE_DWORD = 0x3FFF
# gfxhub_client_ids "CPC": the compute CP's own fetches and writes; on a fault it halts unless
# CP_DEBUG.CPG_UTCL1_ERROR_HALT_DISABLE (gpusim.gmc.GMC.client_halts)
CLIENT_CPC = 5
# A dequeue request completes (the HQD state saved to the MQD, CP_HQD_ACTIVE 0) this many clock steps
# after CP_HQD_DEQUEUE_REQUEST: upstream polls CP_HQD_ACTIVE for it (gfx_v11_0_kiq_init_register,
# amdgpu_amdkfd_gfx_v11 hqd_destroy); the number is an assumption.
DEQUEUE_STEPS = 4
RESET_WAVES_REQUEST = 2      # CP_HQD_DEQUEUE_REQUEST type (gfx_v11_0_soft_reset, amdkfd hqd_destroy wave reset)
# One end-of-pipe entry per RELEASE_MEM in the HQD's EOP buffer, 8 dwords (amdkfd kfd_mqd_manager_v11.c
# update_mqd: "0xFF EOP entries (= 0x7F8 dwords)"); the CP submits at most entries - 1 events and EOP_SIZE
# above 0xA is not clamped correctly by the hardware (same comment). What an entry holds is the
# firmware's own: the packet's dwords here (assumption). GFX11_MEC_HPD_SIZE (2048 bytes): 64 entries.
EOP_RECORD_BYTES = 32
EOP_SIZE_MAX = 0xA
COMPUTE_MQD = structs.get(mqd_v11, "v11_compute_mqd")


class Hang(Exception):
    """The packet processor stops: the queue is hung."""


class Queue:
    """One HQD: its banked registers and the packet processor's position."""

    # its last run stopped where running it again changes nothing while memory and plain registers stay as
    # they are (nothing complete to fetch, a WAIT_REG_MEM on memory or plain storage, an UNMAP_QUEUES of a hung
    # queue): the CP's looks may be skipped (CP._poll_skip). A class default: saved devices lack it.
    look_pure = False

    def __init__(self, me: int, pipe: int, queue: int):
        self.me, self.pipe, self.queue = me, pipe, queue
        self.regs: dict[str, int] = {}
        self.active = False
        self.rptr = 0            # dwords within the ring
        self.wptr = 0            # as last written (doorbell or CP_HQD_PQ_WPTR_LO/HI)
        self.hung: str | None = None
        self.waiting = False     # blocked in WAIT_REG_MEM
        self.wait_written = False
        self.ibs: list[list[int]] = []   # [vmid, address, size in dwords, position] per IB level
        self.sh: dict[str, int] = {}     # SH registers SET_SH_REG wrote (COMPUTE_*)
        self.dequeuing = False           # a CP_HQD_DEQUEUE_REQUEST is being served
        self.generation = 0              # bumped when the queue is (re)activated or reset
        self.eop_events = 0              # end-of-pipe records written to its EOP buffer
        self.dispatch = None             # the DISPATCH_DIRECT in flight (a gpusim.dispatch generator)

    def __getstate__(self):
        # A dispatch in flight is not saved (assumption): a loaded GPU runs that packet again from its start.
        return {**self.__dict__, "dispatch": None}

    @property
    def name(self) -> str:
        return f"compute queue me {self.me} pipe {self.pipe} queue {self.queue}"


class CP(Block):
    name = "CP"
    # state a saved device from before the KIQ model lacks (gpusim.persist pickles the blocks): reassigned,
    # never changed in place
    kiq_queue_mask = None
    faulted_pipes: dict[int, str] = {}

    def attach(self) -> None:
        t = self.dev.table(GC)
        self.hqd_names = [n for n in t.names() if n.startswith(("CP_HQD_", "CP_MQD_"))
                          and not n.startswith("CP_HQD_GFX")]
        for n in self.hqd_names:
            self.on_write(GC, n, functools.partial(self._w_hqd, n))
            self.on_read(GC, n, functools.partial(self._r_hqd, n))
        self.on_write(GC, "CP_PQ_WPTR_POLL_CNTL", self._w_wptr_poll_cntl)
        for n in ("SH_MEM_CONFIG", "SH_MEM_BASES"):
            self.on_write(GC, n, functools.partial(self._w_sh_mem, n))
            self.on_read(GC, n, functools.partial(self._r_sh_mem, n))
        # v11_compute_mqd field -> the HQD register the CP saves into it at a dequeue: the field named
        # as the register in lower case (cp_hqd_pq_base_lo/_hi: CP_HQD_PQ_BASE/_HI)
        self.mqd_regs = []
        for field in COMPUTE_MQD.fields:
            reg = field.upper()
            if reg not in t and reg.endswith("_LO"):
                reg = reg[:-3]
            if reg.startswith(("CP_HQD_", "CP_MQD_")) and reg in self.hqd_names:
                self.mqd_regs.append((COMPUTE_MQD.offset(field), reg))
        self.sh_names = {self.dev.reg_addr(GC, n): n for n in t.names() if n.startswith("COMPUTE_")}
        self.hqd_power_on = {n: v for n in self.hqd_names if (v := self.dev.power_on_value(GC, n))}
        self.kernel_max_steps = KERNEL_MAX_STEPS
        self.dev.blocks["NBIO"].on_doorbell("CP", self._doorbell)   # S2A routing: gpusim.nbio

    def reset(self) -> None:
        self.queues: dict[tuple[int, int, int], Queue] = {}
        self.sh_mem: dict[tuple[str, int], int] = {}     # (SH_MEM_CONFIG/BASES, VMID) -> value
        self.clock_ns = 0
        self._running = False
        self._again = False
        self._poll_at = None
        self._idle_polls = 0
        self._blocked_pure = False
        self.dispatches = 0
        self._busy = False
        self._in_event = False
        self.kiq_queue_mask = None   # SET_RESOURCES' QUEUE_MASK, None before the first (the KIQ firmware's)
        self.faulted_pipes = {}      # pipe -> why: a hung queue was reset off it; until a CP soft reset

    # -- the GPU clock --------------------------------------------------------------------------------
    def now_ns(self) -> int:
        return max(self.clock_ns, self.dev.now_ns)

    def advance(self, ns: int, device: bool = False) -> None:
        """The CP spent ns. With `device` (kernel work) the device clock catches up too, in the stepped
        mode, so other engines' timestamps and scheduled work see the time pass (not from inside a clock
        step: the clock never runs inside itself)."""
        self.clock_ns = self.now_ns() + ns
        if device and self.dev.stepped and not self._in_event:
            behind = -(-(self.clock_ns - self.dev.now_ns) // self.dev.STEP_NS)
            if behind > 0:
                self.dev.step(behind)

    def timestamp(self) -> int:
        return self.now_ns() // TIMESTAMP_NS

    # -- HQD registers, banked by GRBM_GFX_CNTL --------------------------------------------------------
    def _selected(self) -> Queue:
        f = self.dev.table(GC)["GRBM_GFX_CNTL"].decode(self.get(GC, "GRBM_GFX_CNTL"))
        key = (f["MEID"], f["PIPEID"], f["QUEUEID"])
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = Queue(*key)
            # each HQD's registers start at their power-on values (gc_11_0_0_default.h: e.g. CP_HQD_EOP_
            # CONTROL 6, CP_HQD_PQ_CONTROL 0x308509, CP_MQD_CONTROL 0x100)
            q.regs.update(self.hqd_power_on)
        return q

    def _f(self, q: Queue, reg: str, field: str) -> int:
        f = self.dev.table(GC)[reg].fields[field]     # one field, not the whole register decoded: hot path
        return (q.regs.get(reg, 0) >> f.shift) & ((1 << f.width) - 1)

    def _w_hqd(self, name: str, value: int):
        q = self._selected()
        gfx = self.dev.blocks.get("GFX")
        if q.me == MEC_ME and gfx is not None and gfx.mec_starting(q.pipe):
            # upstream waits udelay(50) after unhalting the MEC (gfx_v11_0_cp_compute_enable) before it
            # programs queues: the write is lost (assumption, gpusim.gfx MEC_START_STEPS)
            self.error(f"{name} of the {q.name} written while MEC pipe {q.pipe} is still starting (just "
                       f"unhalted): the write is lost")
            return q.regs.get(name, 0)
        q.regs[name] = value
        if name == "CP_HQD_ACTIVE":
            if q.hung:
                pass         # the pipe's firmware is stuck in this queue: only a CP soft reset frees it
            elif value & 1:
                self._activate(q)
            else:
                self._deactivate(q)
        elif name == "CP_HQD_DEQUEUE_REQUEST" and value & 0xF:
            self._dequeue_request(q, value & 0xF)
        elif name == "CP_HQD_PQ_RPTR":
            q.rptr = value & (self._ring_dwords(q) - 1)
        elif name in ("CP_HQD_PQ_WPTR_LO", "CP_HQD_PQ_WPTR_HI"):
            q.wptr = q.regs.get("CP_HQD_PQ_WPTR_LO", 0) | q.regs.get("CP_HQD_PQ_WPTR_HI", 0) << 32
            if q.active:
                self._kick()

    def _r_hqd(self, name: str) -> int:
        q = self._selected()
        if name == "CP_HQD_ACTIVE":
            return (q.regs.get(name, 0) & ~1) | int(q.active or bool(q.hung))
        if name == "CP_HQD_PQ_RPTR":
            return q.rptr
        return q.regs.get(name, 0)

    def _activate(self, q: Queue) -> None:
        if q.me != MEC_ME or q.pipe >= N_PIPES or q.queue >= N_QUEUES:
            self.error(f"CP_HQD_ACTIVE written 1 for ME {q.me} pipe {q.pipe} queue {q.queue}: gfx11's MEC is "
                       f"ME {MEC_ME} with {N_PIPES} pipes of {N_QUEUES} queues; nothing runs there")
            return
        q.active, q.hung, q.waiting, q.wait_written, q.ibs = True, None, False, False, []
        q.dequeuing, q.eop_events, q.dispatch = False, 0, None
        q.generation += 1
        # CP_HQD_PQ_RPTR is the live read pointer (it reads back as the CP moves it): a queue activated
        # without writing it (gfx_v11_0_kiq_init_register writes mqd->cp_hqd_pq_rptr) starts where this
        # HQD's previous queue stopped
        q.rptr = q.rptr & (self._ring_dwords(q) - 1)
        q.wptr = q.regs.get("CP_HQD_PQ_WPTR_LO", 0) | q.regs.get("CP_HQD_PQ_WPTR_HI", 0) << 32
        self._kick()

    def _deactivate(self, q: Queue) -> None:
        q.active, q.hung, q.waiting, q.wait_written, q.ibs = False, None, False, False, []
        q.dequeuing, q.dispatch = False, None
        q.generation += 1
        self._update_busy()

    def _dequeue_request(self, q: Queue, request: int = 1) -> None:
        """CP_HQD_DEQUEUE_REQUEST: the firmware takes the queue off the pipe, saves its HQD state to
        the MQD at CP_MQD_BASE_ADDR/_HI (in CP_MQD_CONTROL.VMID's address space) and clears
        CP_HQD_ACTIVE, DEQUEUE_STEPS later (amdkfd kfd_mqd_manager_v11.c get_wave_state reads the
        control-stack fields the CP saved there at preemption). A hung queue never answers a drain (1): its
        pipe's firmware is stuck in it (amdkfd kfd_device_queue_manager.c: a preemption that times out
        leaves "the cp ... in an unrecoverable state" and a GPU reset follows). A RESET_WAVES request (2)
        takes even a hung queue off, its waves reset and nothing saved: gfx_v11_0_soft_reset issues it to
        every queue and then polls CP_HQD_ACTIVE for 0 before the GRBM soft reset ("Failed to wait all
        pipes clean" otherwise), so upstream relies on it. The pipe's firmware stays faulted (CP_STAT busy)
        until that GRBM soft reset of the CP (assumption: what the reset is for)."""
        if q.hung and request == RESET_WAVES_REQUEST:
            if not q.dequeuing:
                q.dequeuing = True
                self.dev.schedule(DEQUEUE_STEPS, self._reset_waves_done, q, q.generation)
            return
        if q.hung:
            self.error(f"CP_HQD_DEQUEUE_REQUEST to the {q.name}, which is hung ({q.hung}): the request is "
                       f"never served and CP_HQD_ACTIVE stays 1 until a RESET_WAVES request or a CP soft reset "
                       f"(GRBM_SOFT_RESET CP/CPC)")
            return
        if not q.active or q.dequeuing:
            return
        q.dequeuing = True
        self.dev.schedule(DEQUEUE_STEPS, self._dequeue_done, q, q.generation)

    def _reset_waves_done(self, q: Queue, generation: int) -> None:
        if q.generation != generation or not q.hung:
            return
        self.faulted_pipes = {**self.faulted_pipes, q.pipe: f"the {q.name} hung ({q.hung}) and was reset off it"}
        self._deactivate(q)

    def _dequeue_done(self, q: Queue, generation: int) -> None:
        if q.generation != generation or not q.dequeuing or q.hung:
            return
        try:
            self._save_mqd(q, "MQD save at dequeue (CP_MQD_BASE_ADDR)")
        except Hang as e:
            self._hang(q, str(e))
            return
        self._deactivate(q)

    def _save_mqd(self, q: Queue, what: str) -> None:
        """The HQD registers (CP_HQD_PQ_RPTR the live read pointer, CP_HQD_ACTIVE 0) into the MQD at
        CP_MQD_BASE_ADDR/_HI in CP_MQD_CONTROL.VMID's address space. Raises Hang on a fault."""
        image = bytearray(COMPUTE_MQD.size)
        for off, reg in self.mqd_regs:
            v = q.rptr if reg == "CP_HQD_PQ_RPTR" else 0 if reg == "CP_HQD_ACTIVE" else q.regs.get(reg, 0)
            image[off:off + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")
        va = (q.regs.get("CP_MQD_BASE_ADDR", 0) & ~3) | (q.regs.get("CP_MQD_BASE_ADDR_HI", 0) & 0xFFFF) << 32
        vmid = self._f(q, "CP_MQD_CONTROL", "VMID")
        # only the HQD part (from cp_mqd_base_addr_lo on) is the CP's; the header and COMPUTE_* dwords
        # before it are the driver's (gfx_v11_0_compute_mqd_init)
        first = min(off for off, _ in self.mqd_regs)
        last = max(off for off, _ in self.mqd_regs) + 4
        self._write(vmid, va + first, bytes(image[first:last]), what)

    def soft_reset(self, pipe: int) -> None:
        """GRBM_SOFT_RESET of the CP (SOFT_RESET_CP/CPC, gfx_v11_0_soft_reset): the pipe's firmware
        restarts and its queues lose their state, hung ones included. A pipe reset or halt through
        CP_MEC_RS64_CNTL does not touch the HQDs: they stop being served and carry on once the pipe
        runs again (issue 11 point 9; upstream dequeues queues before halting, gfx_v11_0_hw_fini)."""
        for q in self.queues.values():
            if q.me == MEC_ME and q.pipe == pipe and (q.active or q.hung):
                self._deactivate(q)
        kiq = self.kiq()
        if kiq is not None and kiq[1] == pipe:
            self.kiq_queue_mask = None      # the KIQ's firmware restarts without its SET_RESOURCES
        if pipe in self.faulted_pipes:
            self.faulted_pipes = {p: why for p, why in self.faulted_pipes.items() if p != pipe}
            self._update_busy()

    def hqd_state(self) -> list[tuple[str, str]]:
        """(queue name, "active"/"hung: why") of every HQD that is not idle-inactive."""
        return [(q.name, f"hung: {q.hung}" if q.hung else "active") for q in self.queues.values()
                if q.active or q.hung]

    # -- SH_MEM_CONFIG / SH_MEM_BASES, banked per VMID by GRBM_GFX_CNTL.VMID (soc21_grbm_select) --------
    def _grbm_vmid(self) -> int:
        return self.dev.table(GC)["GRBM_GFX_CNTL"].decode(self.get(GC, "GRBM_GFX_CNTL"))["VMID"]

    def _w_sh_mem(self, name: str, value: int) -> None:
        self.sh_mem[(name, self._grbm_vmid())] = value

    def _r_sh_mem(self, name: str) -> int:
        return self.sh_mem.get((name, self._grbm_vmid()), self.dev.power_on_value(GC, name))

    def apertures(self, vmid: int) -> tuple[int, int]:
        """(shared, private) flat aperture bases a wave of `vmid` sees: SH_MEM_BASES SHARED_BASE/
        PRIVATE_BASE are bits 63:48 of each 4 GiB aperture (gmc_v11_0_early_init's shared/private
        aperture start and end; gfx_v11_0_constants_init writes start >> 48)."""
        f = self.dev.table(GC)["SH_MEM_BASES"].decode(self.sh_mem.get(("SH_MEM_BASES", vmid),
                                                                     self.dev.power_on_value(GC, "SH_MEM_BASES")))
        return f["SHARED_BASE"] << 48, f["PRIVATE_BASE"] << 48

    def alignment_mode(self, vmid: int) -> int:
        """SH_MEM_CONFIG.ALIGNMENT_MODE of `vmid` (gpusim.dispatch ALIGN_*): the power-on value's 0 is DWORD,
        under which a misaligned vector access drops its low address bits."""
        value = self.sh_mem.get(("SH_MEM_CONFIG", vmid), self.dev.power_on_value(GC, "SH_MEM_CONFIG"))
        return self.dev.table(GC)["SH_MEM_CONFIG"].decode(value)["ALIGNMENT_MODE"]

    # -- queue geometry --------------------------------------------------------------------------------
    def _ring_dwords(self, q: Queue) -> int:
        return 2 << self._f(q, "CP_HQD_PQ_CONTROL", "QUEUE_SIZE")

    def _ring_va(self, q: Queue) -> int:
        return (q.regs.get("CP_HQD_PQ_BASE", 0) | q.regs.get("CP_HQD_PQ_BASE_HI", 0) << 32) << 8

    def _vmid(self, q: Queue) -> int:
        return self._f(q, "CP_HQD_VMID", "VMID")

    # -- doorbells ---------------------------------------------------------------------------------------
    def _doorbell(self, index: int, value: int) -> bool:
        taken = False
        lo = self.dev.field(GC, "CP_MEC_DOORBELL_RANGE_LOWER", "DOORBELL_RANGE_LOWER") << 2
        hi = self.dev.field(GC, "CP_MEC_DOORBELL_RANGE_UPPER", "DOORBELL_RANGE_UPPER") << 2
        for q in self.queues.values():
            if not (q.active and self._f(q, "CP_HQD_PQ_DOORBELL_CONTROL", "DOORBELL_EN")
                    and self._f(q, "CP_HQD_PQ_DOORBELL_CONTROL", "DOORBELL_OFFSET") == index):
                continue
            if not self.dev.field(GC, "CP_PQ_STATUS", "DOORBELL_ENABLE"):
                # gfx_v11_0_kiq_init_register sets CP_PQ_STATUS.DOORBELL_ENABLE after the MEC doorbell
                # range; the field's name says what it gates (assumption: a doorbell is dropped, not held)
                self.error(f"doorbell {index} (byte {index * 4:#x}) of the {q.name} with "
                           "CP_PQ_STATUS.DOORBELL_ENABLE 0: the MEC ignores it")
                continue
            if not lo <= index * 4 <= hi:
                self.error(f"doorbell {index} (byte {index * 4:#x}) of the {q.name} is outside "
                           f"CP_MEC_DOORBELL_RANGE_LOWER/UPPER [{lo:#x}, {hi:#x}]: it does not reach the MEC")
                continue
            q.wptr = value
            q.regs["CP_HQD_PQ_WPTR_LO"], q.regs["CP_HQD_PQ_WPTR_HI"] = value & 0xFFFFFFFF, value >> 32
            taken = True
        self._idle_polls = 0
        self._kick()
        return taken

    # -- running -----------------------------------------------------------------------------------------
    def _runs(self, q: Queue) -> bool:
        gfx = self.dev.blocks.get("GFX")
        return (q.active and not q.hung and q.me == MEC_ME and gfx is not None
                and q.pipe in gfx.mec_pipes)

    def _pending(self, q: Queue) -> bool:
        return q.active and (q.waiting or bool(q.ibs) or q.rptr != q.wptr & (self._ring_dwords(q) - 1))

    def _kick(self) -> None:
        if self._running:
            self._again = True
            return
        self._running = True
        try:
            self._again = True
            while self._again:
                self._again = False
                if self._wptr_polling():
                    self._poll_wptrs()
                for q in list(self.queues.values()):
                    if self._runs(q) and self._pending(q):
                        self._run(q)
        finally:
            self._running = False
        self._update_busy()

    def _wptr_polling(self) -> bool:
        return bool(self.dev.field(GC, "CP_PQ_WPTR_POLL_CNTL", "EN"))

    def _w_wptr_poll_cntl(self, value: int) -> None:
        if self.dev.table(GC)["CP_PQ_WPTR_POLL_CNTL"].decode(value)["EN"] and self._poll_at is None:
            self._schedule_poll(1)

    def _schedule_poll(self, steps: int) -> None:
        """The CP's next look (_poll) `steps` from now. A poll of the clock's (SimGPU.schedule_poll): while
        nothing else happens the clock may skip looks that would find nothing (_poll_skip), with the same
        result as running them (tests/gpusim/test_clock.py)."""
        self._poll_at = self.dev.steps + steps
        self.dev.schedule_poll(steps, ("CP", 0), self._poll, self._poll_skip, steps)

    def _poll_wptrs(self) -> None:
        """CP_PQ_WPTR_POLL_CNTL.EN: the CP reads each running queue's write pointer (a u64 in dwords, as
        amdgpu keeps it at wptr_cpu_addr) from CP_HQD_PQ_WPTR_POLL_ADDR/_HI in the queue's VMID."""
        for q in self.queues.values():
            addr = (q.regs.get("CP_HQD_PQ_WPTR_POLL_ADDR", 0) & ~3) | (q.regs.get("CP_HQD_PQ_WPTR_POLL_ADDR_HI", 0)
                                                                     & 0xFFFF) << 32
            if addr and self._runs(q):
                try:
                    q.wptr = int.from_bytes(self._read(self._vmid(q), addr, 8, "write pointer poll"), "little")
                except Hang as e:
                    self._hang(q, str(e))

    def _poll(self, *_) -> None:
        self._poll_at = None
        self._idle_polls += 1
        self._in_event = True
        try:
            self._kick()
        finally:
            self._in_event = False

    def _update_busy(self) -> None:
        gfx = self.dev.blocks.get("GFX")
        busy = any(q.hung or self._pending(q) for q in self.queues.values())
        for q in self.queues.values():
            if gfx is not None:
                gfx.set_busy(q.name, bool(q.hung or self._pending(q)))
        if gfx is not None:
            gfx.set_busy("MEC pipe firmware fault", bool(self.faulted_pipes))
        busy = busy or bool(self.faulted_pipes)
        smu = self.dev.blocks.get("SMU")
        if smu is not None and busy != self._busy:
            smu.set_activity("gfx", 1.0 if busy else 0.0)
        self._busy = busy
        polled = self._wptr_polling() and any(q.active and not q.hung for q in self.queues.values())
        if (polled or any(not q.hung and self._pending(q) for q in self.queues.values())) and self._poll_at is None:
            self._schedule_poll(self._poll_period(self._idle_polls))

    @staticmethod
    def _poll_period(idle_polls: int) -> int:
        return 1 if idle_polls < IDLE_POLLS_FAST else IDLE_POLL_STEPS

    def _poll_skip(self, n: int, period: int):
        """What n of _poll's looks do when they would find nothing (SimGPU.schedule_poll: nothing else happened
        since the last look, which found nothing outside the CP): each counts an idle poll and schedules the next.
        A look acts, and none is skipped, where a queue it would run has a dispatch in flight or waits on a
        register that is not plain storage (its read may differ), or a ring still had packets to run; and
        the looks stop before the one whose idle count changes the period."""
        if self._running or not all(q.look_pure for q in self.queues.values() if self._runs(q) and self._pending(q)):
            return 0, (period,)
        m = n if period == IDLE_POLL_STEPS else max(0, min(n, IDLE_POLLS_FAST - 1 - self._idle_polls))
        self._idle_polls += m
        if self._poll_at is not None:
            self._poll_at += m * period
        return m, (period,)

    def _hang(self, q: Queue, why: str) -> None:
        q.hung = why
        q.waiting = False
        self.error(f"{q.name} hung at rptr {q.rptr:#x} (wptr {q.wptr:#x}): {why}; it stays hung (a dequeue "
                   f"request is not served) until a CP soft reset (GRBM_SOFT_RESET CP/CPC) or a mode1 reset")

    def _run(self, q: Queue) -> None:
        moved = False
        q.look_pure = False
        for _ in range(PACKET_BUDGET):
            try:
                pkt = self._next(q)
                if pkt is None:
                    q.look_pure = True
                    break
                frame, dwords = pkt
                self._blocked_pure = False      # set by a packet that blocks on what only others change
                status = self._execute(q, dwords)
            except Hang as e:
                self._hang(q, str(e))
                break
            if status is False:
                q.waiting = True
                q.look_pure = self._blocked_pure
                break
            q.waiting = q.wait_written = False
            moved = True
            self.advance(PACKET_NS)
            if frame is None:
                q.rptr = (q.rptr + len(dwords)) & (self._ring_dwords(q) - 1)
            else:
                frame[3] += len(dwords)
            if isinstance(status, tuple):        # INDIRECT_BUFFER: ([vmid, va, size, 0], chain)
                ib, chain = status
                if chain and q.ibs and frame is q.ibs[-1]:
                    q.ibs[-1] = ib
                elif len(q.ibs) >= MAX_IB_DEPTH:
                    self._hang(q, f"INDIRECT_BUFFER at {ib[1]:#x} nested deeper than {MAX_IB_DEPTH} levels")
                    break
                else:
                    q.ibs.append(ib)
        if moved:
            self._idle_polls = 0
            self._report_rptr(q)

    def _report_rptr(self, q: Queue) -> None:
        if self._f(q, "CP_HQD_PQ_CONTROL", "NO_UPDATE_RPTR"):
            return
        addr = (q.regs.get("CP_HQD_PQ_RPTR_REPORT_ADDR", 0) & ~3) | (q.regs.get("CP_HQD_PQ_RPTR_REPORT_ADDR_HI", 0)
                                                                     & 0xFFFF) << 32
        if addr:
            try:
                self._write(self._vmid(q), addr, q.rptr.to_bytes(4, "little"), "rptr report")
            except Hang as e:
                self._hang(q, str(e))

    # -- memory --------------------------------------------------------------------------------------
    def _read(self, vmid: int, va: int, n: int, what: str) -> bytes:
        try:
            return self.dev.blocks["GMC"].read(vmid, va, n, client=CLIENT_CPC)
        except (VMFault, DMAError) as e:
            raise Hang(f"{what}: {e}") from None

    def _write(self, vmid: int, va: int, data: bytes, what: str) -> None:
        try:
            self.dev.blocks["GMC"].write(vmid, va, data, client=CLIENT_CPC)
        except (VMFault, DMAError) as e:
            raise Hang(f"{what}: {e}") from None

    def _words(self, vmid: int, va: int, n: int, what: str) -> list[int]:
        raw = self._read(vmid, va, 4 * n, what)
        return [int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4)]

    # -- packet fetch ----------------------------------------------------------------------------------
    @staticmethod
    def _length(header: int, where: str) -> int:
        if header >> 30 != 3:
            raise Hang(f"type-{header >> 30} packet header {header:#010x} {where}: the MEC runs type-3 packets")
        count = (header >> 16) & 0x3FFF
        if (header >> 8) & 0xFF == P.PACKET3_NOP and count == NOP_ONE_DWORD:
            return 1
        return count + 2

    def _next(self, q: Queue):
        """(frame or None for the ring, dwords) of the next packet; None when there is nothing to run."""
        while q.ibs:
            frame = q.ibs[-1]
            vmid, va, size, pos = frame
            if pos >= size:
                q.ibs.pop()
                continue
            at = va + 4 * pos
            header = self._words(vmid, at, 1, f"IB fetch at {at:#x}")[0]
            n = self._length(header, f"in the IB at {va:#x} + {4 * pos:#x}")
            if pos + n > size:
                raise Hang(f"packet {header:#010x} at IB {va:#x} + {4 * pos:#x} runs past the IB's {size} dwords")
            return frame, self._words(vmid, at, n, f"IB fetch at {at:#x}")
        mask = self._ring_dwords(q) - 1
        wpos = q.wptr & mask
        if q.rptr == wpos:
            return None
        vmid, base = self._vmid(q), self._ring_va(q)
        header = self._words(vmid, base + 4 * q.rptr, 1, f"ring fetch at {base + 4 * q.rptr:#x}")[0]
        n = self._length(header, f"at ring offset {4 * q.rptr:#x}")
        if n > ((wpos - q.rptr) & mask):
            return None      # not all of it written yet
        first = min(n, mask + 1 - q.rptr)
        words = self._words(vmid, base + 4 * q.rptr, first, "ring fetch")
        if first < n:
            words += self._words(vmid, base, n - first, "ring fetch")
        return None, words

    # -- packets -----------------------------------------------------------------------------------------
    def _exec_vmid(self, q: Queue) -> int:
        return q.ibs[-1][0] if q.ibs else self._vmid(q)

    def _execute(self, q: Queue, words: list[int]):
        """True when done, False when blocked, ([vmid, va, size, 0], chain) for an INDIRECT_BUFFER."""
        header, body = words[0], words[1:]
        op = (header >> 8) & 0xFF
        handler = _HANDLERS.get(op)
        if handler is None:
            raise Hang(f"unknown PM4 opcode {op:#x} (header {header:#010x})")
        name, lengths = handler
        if lengths is not None and len(body) not in lengths:
            raise Hang(f"PACKET3_{name} with {len(body)} body dwords (header {header:#010x}); it takes "
                       f"{' or '.join(map(str, lengths))}")
        return getattr(self, "_p_" + name.lower())(q, body)

    def _p_nop(self, q, body):
        return True

    def _p_event_write(self, q, body):
        return True      # pipelines are drained: dispatches complete in order

    def _p_acquire_mem(self, q, body):
        # dword 7 is GCR_CNTL (gfx_v11_0_emit_mem_sync); the cache actions are gpusim.gl2's
        self.dev.blocks["GL2"].gcr(body[6], f"ACQUIRE_MEM on {q.name}")
        return True

    def _p_set_sh_reg(self, q, body):
        if len(body) < 2:
            raise Hang(f"PACKET3_SET_SH_REG with {len(body)} body dwords: it needs an offset and a value")
        start = P.PACKET3_SET_SH_REG_START + (body[0] & 0xFFFF)
        if start + len(body) - 1 >= P.PACKET3_SET_SH_REG_END:
            raise Hang(f"PACKET3_SET_SH_REG at register {start:#x} runs past SET_SH_REG_END")
        for i, v in enumerate(body[1:]):
            name = self.sh_names.get(start + i)
            q.sh[name if name is not None else f"{start + i:#x}"] = v
        return True

    def _set_regs(self, body, base, end, what):
        if len(body) < 2:
            raise Hang(f"PACKET3_{what} with {len(body)} body dwords: it needs an offset and a value")
        start = base + (body[0] & 0xFFFF)
        if start + len(body) - 1 >= end:
            raise Hang(f"PACKET3_{what} at register {start:#x} runs past its range's end {end:#x}")
        for i, v in enumerate(body[1:]):
            self.dev.regs.write(start + i, v)
        return True

    def _p_set_config_reg(self, q, body):
        return self._set_regs(body, P.PACKET3_SET_CONFIG_REG_START, P.PACKET3_SET_CONFIG_REG_END, "SET_CONFIG_REG")

    def _p_set_uconfig_reg(self, q, body):
        return self._set_regs(body, P.PACKET3_SET_UCONFIG_REG_START, P.PACKET3_SET_UCONFIG_REG_END,
                              "SET_UCONFIG_REG")

    def _p_dispatch_direct(self, q, body):
        if q.dispatch is None:
            self.dispatches += 1
            vmid = self._exec_vmid(q)
            q.dispatch = dispatch_steps(self.dev, q.sh, body[:3], body[3], vmid, self.kernel_max_steps,
                                        apertures=self.apertures(vmid), slice_steps=DISPATCH_SLICE_STEPS,
                                        alignment=self.alignment_mode(vmid))
        smu = self.dev.blocks.get("SMU")
        t0 = time.perf_counter()
        try:
            next(q.dispatch)
            return False     # still running: the queue waits here and the next pass runs the next slice
        except StopIteration as done:
            insts, _ = done.value
        except DispatchFailed as e:
            q.dispatch = None
            self._gpu_work(smu, work_ns(e.instructions))
            sq = self.dev.blocks.get("SQ")
            if sq is not None and e.waves:      # the stopped waves stay resident while the queue is hung
                sq.hold(q, e.waves)
            raise Hang(f"DISPATCH_DIRECT {tuple(body[:3])}: {e.why}") from None
        finally:
            if smu is not None:   # on the wall clock the executor's time is GFX busy time (gpusim.smu)
                smu.executor_ran(time.perf_counter() - t0)
        q.dispatch = None
        self._gpu_work(smu, work_ns(insts))
        return True

    def _gpu_work(self, smu, ns: int) -> None:
        """A dispatch's GPU time: the clocks advance by it, and on the simulated clock the SMU counts it
        as GFX busy time (AverageGfxActivity, gpusim.power)."""
        if smu is not None:
            smu.work_began()
        self.advance(ns, device=True)
        if smu is not None:
            smu.work_done()

    def _eop_record(self, q: Queue, body) -> None:
        """The CP queues each end-of-pipe event (RELEASE_MEM) in the HQD's EOP buffer at
        CP_HQD_EOP_BASE_ADDR/_HI << 8 (the driver writes the address >> 8, gfx_v11_0_compute_mqd_init),
        CP_HQD_EOP_CONTROL.EOP_SIZE giving its size (2^(EOP_SIZE+1) dwords), in the queue's VMID. A
        wrong or unmapped base faults and hangs the queue (issue 17). Record format: assumption
        (EOP_RECORD_BYTES)."""
        base = (q.regs.get("CP_HQD_EOP_BASE_ADDR", 0) | (q.regs.get("CP_HQD_EOP_BASE_ADDR_HI", 0) & 0xFF) << 32) << 8
        eop_size = self._f(q, "CP_HQD_EOP_CONTROL", "EOP_SIZE")
        slots = (4 << (eop_size + 1)) // EOP_RECORD_BYTES
        if eop_size > EOP_SIZE_MAX:
            raise Hang(f"CP_HQD_EOP_CONTROL.EOP_SIZE {eop_size:#x} > {EOP_SIZE_MAX:#x}: more EOP entries than the "
                       f"8-bit per-SE EOP done count, which the hardware does not clamp (kfd_mqd_manager_v11.c)")
        if slots < 2:
            raise Hang(f"CP_HQD_EOP_CONTROL.EOP_SIZE {eop_size}: an EOP buffer of {2 << eop_size} dwords holds "
                       f"{slots} entries of 8 dwords and the CP submits at most entries - 1 end-of-pipe events "
                       f"(kfd_mqd_manager_v11.c): it cannot submit this RELEASE_MEM")
        rec = b"".join((w & 0xFFFFFFFF).to_bytes(4, "little") for w in (body[0], body[1], body[2], body[3],
                                                                         body[4], body[5], body[6], q.eop_events))
        self._write(self._vmid(q), base + (q.eop_events % slots) * EOP_RECORD_BYTES, rec[:EOP_RECORD_BYTES],
                    "end-of-pipe record in the EOP buffer (CP_HQD_EOP_BASE_ADDR << 8)")
        q.eop_events += 1

    def _p_release_mem(self, q, body):
        sel = body[1]
        data_sel, int_sel, dst_sel = sel >> 29 & 7, sel >> 24 & 7, sel >> 16 & 3
        addr = body[2] | body[3] << 32
        self._eop_record(q, body)
        if dst_sel > 1:
            raise Hang(f"RELEASE_MEM DST_SEL {dst_sel}: not memory or TC_L2")
        event, index = body[0] & 0x3F, body[0] >> 8 & 0xF
        if event not in _RELEASE_EVENTS.get(index, ()):
            raise Hang(f"RELEASE_MEM event {event:#x} with EVENT_INDEX {index}: the CP signals a release only "
                       f"for an end-of-pipe *_TS event with index 5 or CS_DONE/PS_DONE with index 6 "
                       f"(gfx_v11_0_ring_emit_fence: CACHE_FLUSH_AND_INV_TS_EVENT, index 5)")
        self.dev.blocks["GL2"].release(body[0], f"RELEASE_MEM on {q.name}")   # caches before the data
        if data_sel == 1:
            self._write(self._exec_vmid(q), addr & ~3, body[4].to_bytes(4, "little"), "RELEASE_MEM")
        elif data_sel in (2, 3):
            value = body[4] | body[5] << 32 if data_sel == 2 else self.timestamp()
            self._write(self._exec_vmid(q), addr & ~7, value.to_bytes(8, "little"), "RELEASE_MEM")
        elif data_sel:
            raise Hang(f"RELEASE_MEM DATA_SEL {data_sel} is not modeled (0 none, 1/2 data, 3 GPU clock)")
        if int_sel > 4:
            raise Hang(f"RELEASE_MEM INT_SEL {int_sel} (interrupt on a data compare) is not modeled")
        if int_sel in (1, 2, 4) and self._eop_interrupt_enabled(q):   # 3: data after write confirm, no IV
            self.dev.post_interrupt(IVEntry(client_id=IHIDS.SOC21_IH_CLIENTID_GRBM_CP,
                                            source_id=IHIDS.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT,
                                            ring_id=q.queue << 4 | q.me << 2 | q.pipe,
                                            src_data=(body[6], 0, 0, 0)))
        return True

    def _eop_interrupt_enabled(self, q: Queue) -> bool:
        reg = f"CP_ME1_PIPE{q.pipe}_INT_CNTL"
        return bool(self.dev.field(GC, reg, "TIME_STAMP_INT_ENABLE"))

    def _p_wait_reg_mem(self, q, body):
        cntl, addr0, addr1, ref, mask = body[:5]
        function, mem_space, operation = cntl & 7, cntl >> 4 & 3, cntl >> 6 & 3
        if function == 7 or mem_space > 1 or operation > 1 or (mem_space and operation):
            raise Hang(f"WAIT_REG_MEM control {cntl:#x}: function {function}, mem_space {mem_space}, "
                       f"operation {operation} is not a valid combination")
        if operation == 1 and not q.wait_written:       # write addr0, then wait on addr1 (the HDP flush)
            self.dev.regs.write(addr0 & 0x3FFFF, ref)
            q.wait_written = True
        vmid = self._exec_vmid(q)

        def value():
            if mem_space:
                return self._words(vmid, (addr0 & ~3) | (addr1 & 0xFFFF) << 32, 1, "WAIT_REG_MEM")[0]
            return self.dev.regs.read((addr1 if operation == 1 else addr0) & 0x3FFFF)

        for i in range(WAIT_INLINE_STEPS + 1):
            if _compare(function, value() & mask, ref & mask):
                return True
            if not self.dev.stepped or self._in_event or i == WAIT_INLINE_STEPS or q.waiting:
                self._blocked_pure = bool(mem_space) or ((addr1 if operation == 1 else addr0) & 0x3FFFF) \
                    not in self.dev.regs.read_handlers
                return False
            self.dev.step()
        return False

    def _p_write_data(self, q, body):
        cntl, addr = body[0], body[1] | body[2] << 32
        dst, one = cntl >> 8 & 0xF, bool(cntl & P.WR_ONE_ADDR)
        data = body[3:]
        if dst == 0:
            for i, v in enumerate(data):
                self.dev.regs.write((body[1] + (0 if one else i)) & 0x3FFFF, v)
        elif dst in (1, 2, 5):
            if one:
                for v in data:
                    self._write(self._exec_vmid(q), addr & ~3, v.to_bytes(4, "little"), "WRITE_DATA")
            else:
                self._write(self._exec_vmid(q), addr & ~3, b"".join(v.to_bytes(4, "little") for v in data),
                            "WRITE_DATA")
        else:
            raise Hang(f"WRITE_DATA DST_SEL {dst} (GDS or reserved) is not modeled")
        return True

    def _p_copy_data(self, q, body):
        cntl = body[0]
        src_sel, dst_sel, wide = cntl & 0xF, cntl >> 8 & 0xF, bool(cntl >> 16 & 1)
        n = 2 if wide else 1
        vmid = self._exec_vmid(q)
        if src_sel == 0:
            words = [self.dev.regs.read((body[1] + i) & 0x3FFFF) for i in range(n)]
        elif src_sel in (1, 2):
            words = self._words(vmid, (body[1] & ~3) | body[2] << 32, n, "COPY_DATA source")
        elif src_sel == 5:
            words = [body[1], body[2]][:n]
        elif src_sel == 9:
            ts = self.timestamp()
            words = [ts & 0xFFFFFFFF, ts >> 32][:n]
        else:
            raise Hang(f"COPY_DATA SRC_SEL {src_sel} is not modeled")
        if dst_sel == 0:
            for i, v in enumerate(words):
                self.dev.regs.write((body[3] + i) & 0x3FFFF, v)
        elif dst_sel in (1, 2, 5):
            self._write(vmid, (body[3] & ~3) | body[4] << 32, b"".join(v.to_bytes(4, "little") for v in words),
                        "COPY_DATA destination")
        else:
            raise Hang(f"COPY_DATA DST_SEL {dst_sel} is not modeled")
        return True

    def _p_indirect_buffer(self, q, body):
        ctrl = body[2]
        if not ctrl & P.INDIRECT_BUFFER_VALID:
            raise Hang(f"INDIRECT_BUFFER control {ctrl:#x} without INDIRECT_BUFFER_VALID")
        va = (body[0] & ~3) | (body[1] & 0xFFFF) << 32
        privileged = self._f(q, "CP_HQD_PQ_CONTROL", "PRIV_STATE")
        vmid = (ctrl >> 24 & 0xF) if privileged else self._vmid(q)
        return [vmid, va, ctrl & 0xFFFFF, 0], bool(ctrl >> 20 & 1)


    # -- the KIQ: queue management packets (gfx_v11_0.c gfx11_kiq_*, nvd.h, amdkfd kfd_pm4_headers_ai.h) --
    def kiq(self) -> tuple[int, int, int] | None:
        """(me, pipe, queue) of the KIQ: RLC_CP_SCHEDULERS.scheduler0 = me << 5 | pipe << 3 | queue with
        0x80 set (gfx_v11_0_kiq_setting, "tell RLC which is KIQ queue"); None while bit 7 is clear."""
        v = self.get(GC, "RLC_CP_SCHEDULERS") & 0xFF
        return (v >> 5 & 3, v >> 3 & 3, v & 7) if v & 0x80 else None

    def _need_kiq(self, q: Queue, what: str) -> None:
        # Assumption: only the queue RLC_CP_SCHEDULERS names runs the scheduler packets (upstream sends them
        # on the KIQ ring alone); on any other queue the packet is not one the firmware serves: a hang
        if self.kiq() != (q.me, q.pipe, q.queue):
            raise Hang(f"PACKET3_{what} on the {q.name}, which is not the KIQ (RLC_CP_SCHEDULERS "
                       f"{self.get(GC, 'RLC_CP_SCHEDULERS'):#010x}: gfx_v11_0_kiq_setting names the KIQ there)")

    def _p_set_resources(self, q, body):
        """gfx11_kiq_set_resources: VMID_MASK 15:0, QUEUE_TYPE 31:29 (0: KIQ), QUEUE_MASK lo/hi (bit
        mec * 32 + pipe * 8 + queue, amdgpu_queue_mask_bit_to_set_resource_bit), GWS, OAC, GDS. The
        firmware keeps the queue mask: the queues it may map (assumption: a queue outside it is refused)."""
        self._need_kiq(q, "SET_RESOURCES")
        queue_type = body[0] >> 29
        if queue_type != 0:
            raise Hang(f"SET_RESOURCES QUEUE_TYPE {queue_type}: only the KIQ's (0) is modeled "
                       f"(kfd_pm4_headers_ai.h: 1 HIQ, 4 debug interface queue)")
        self.kiq_queue_mask = body[1] | body[2] << 32
        return True

    def _p_map_queues(self, q, body):
        """gfx11_kiq_map_queues: CONTROL (QUEUE_SEL 5:4, VMID 11:8, QUEUE 15:13, PIPE 17:16, ME 19:18,
        QUEUE_TYPE 23:21, ALLOC_FORMAT 25:24, ENGINE_SEL 28:26, NUM_QUEUES 31:29; widths up to the next
        field, kfd_pm4_headers_ai.h), CONTROL2 (DOORBELL_OFFSET 27:2), MQD address, wptr address. The
        firmware reads the MQD (v11_compute_mqd) through the KIQ's page tables, past the HDP like any engine
        read, loads the HQD registers from it and activates the queue, as gfx_v11_0_kiq_init_register does
        from the driver's side."""
        self._need_kiq(q, "MAP_QUEUES")
        c = body[0]
        sel, queue, pipe, me = c >> 4 & 3, c >> 13 & 7, c >> 16 & 3, c >> 18 & 3
        qtype, engine, num = c >> 21 & 7, c >> 26 & 7, c >> 29 & 7
        where = f"MAP_QUEUES (control {c:#010x}) on the {q.name}"
        if sel != 0:
            raise Hang(f"{where}: QUEUE_SEL {sel} lets the scheduler pick the slot (not modeled); the KIQ maps "
                       f"to the given me/pipe/queue with 0 (gfx11_kiq_map_queues)")
        if num != 1:
            raise Hang(f"{where}: NUM_QUEUES {num} (gfx11_kiq_map_queues: \"num_queues: must be 1\")")
        if engine != 0 or me != MEC_ME:
            raise Hang(f"{where}: ENGINE_SEL {engine} with ME {me}: a compute queue is ENGINE_SEL 0 on ME 1 "
                       f"(gfx11_kiq_map_queues; 4/ME 0 graphics and 5/ME 2 MES are not modeled)")
        if qtype != 0:
            raise Hang(f"{where}: QUEUE_TYPE {qtype}: only a normal compute queue (0) is modeled")
        if (me, pipe, queue) == (q.me, q.pipe, q.queue):
            raise Hang(f"{where}: maps the KIQ's own slot")
        if self.kiq_queue_mask is None or not self.kiq_queue_mask >> (pipe * N_QUEUES + queue) & 1:
            have = "no SET_RESOURCES since the KIQ started" if self.kiq_queue_mask is None else \
                f"SET_RESOURCES queue mask {self.kiq_queue_mask:#018x}"
            raise Hang(f"{where}: pipe {pipe} queue {queue} is not the firmware's to map ({have}; "
                       f"amdgpu_gfx_enable_kcq sends SET_RESOURCES with the queue mask first)")
        mqd_va = (body[2] & ~3) | (body[3] & 0xFFFF) << 32
        wptr_va = (body[4] & ~7) | (body[5] & 0xFFFF) << 32
        image = self._read(self._vmid(q), mqd_va, COMPUTE_MQD.size, f"{where}: MQD read at {mqd_va:#x}")
        key = (me, pipe, queue)
        t = self.queues.get(key)
        if t is None:
            t = self.queues[key] = Queue(*key)
        if t.hung:
            raise Hang(f"{where}: the {t.name} is hung ({t.hung}); only a CP soft reset frees it")
        # Assumption: a slot that is still active is taken over (its old queue dropped unsaved), as
        # kiq_init_register dequeues an active HQD before loading it; upstream unmaps first anyway
        self._deactivate(t)
        for off, reg in self.mqd_regs:
            if reg not in ("CP_HQD_ACTIVE", "CP_HQD_DEQUEUE_REQUEST"):
                t.regs[reg] = int.from_bytes(image[off:off + 4], "little")
        # the packet's write-pointer address is the one the firmware polls (assumption: it replaces the
        # MQD's cp_hqd_pq_wptr_poll_addr, which gfx_v11_0_compute_mqd_init fills with the same address)
        t.regs["CP_HQD_PQ_WPTR_POLL_ADDR"], t.regs["CP_HQD_PQ_WPTR_POLL_ADDR_HI"] = wptr_va & 0xFFFFFFFC, wptr_va >> 32
        t.regs["CP_HQD_ACTIVE"] = 1
        t.rptr = t.regs.get("CP_HQD_PQ_RPTR", 0)
        self._activate(t)
        return True

    def _p_unmap_queues(self, q, body):
        """gfx11_kiq_unmap_queues: CONTROL (ACTION 1:0, QUEUE_SEL 5:4, ENGINE_SEL 28:26, NUM_QUEUES
        31:29), then DOORBELL_OFFSET0..3 (27:2) of the queues. PREEMPT_QUEUES (0) and RESET_QUEUES (1,
        amdgpu_gfx_disable_kcq's) take each queue off its HQD with its state saved to its MQD, as a
        dequeue request does (amdkfd reads the saved MQD after a preemption; for a reset what is saved is
        an assumption). A hung queue is never taken off: the KIQ waits at the packet (the firmware of its
        pipe is stuck in it) until a CP soft reset."""
        self._need_kiq(q, "UNMAP_QUEUES")
        c = body[0]
        action, sel, engine, num = c & 3, c >> 4 & 3, c >> 26 & 7, c >> 29 & 7
        where = f"UNMAP_QUEUES (control {c:#010x}) on the {q.name}"
        if action > 1:
            raise Hang(f"{where}: ACTION {action} (2 DISABLE_PROCESS_QUEUES, 3 PREEMPT_QUEUES_NO_UNMAP) is not "
                       f"modeled; PREEMPT_QUEUES (0) and RESET_QUEUES (1) are")
        if sel != 0 or engine != 0:
            raise Hang(f"{where}: QUEUE_SEL {sel} / ENGINE_SEL {engine}: only compute queues named by doorbell "
                       f"(0 / 0, gfx11_kiq_unmap_queues) are modeled")
        if not 1 <= num <= 4:
            raise Hang(f"{where}: NUM_QUEUES {num}: the packet names 1 to 4 doorbells")
        targets = []
        for i in range(num):
            offset = body[1 + i] >> 2 & 0x3FFFFFF
            found = [t for t in self.queues.values() if (t.active or t.hung) and t.me == MEC_ME and
                     (t.me, t.pipe, t.queue) != (q.me, q.pipe, q.queue) and
                     self._f(t, "CP_HQD_PQ_DOORBELL_CONTROL", "DOORBELL_OFFSET") == offset]
            if not found:
                # assumption: the firmware finds nothing to take off and completes the packet
                self.error(f"{where}: no mapped compute queue has doorbell offset {offset}: nothing unmapped")
            targets += found
        if any(t.hung for t in targets):
            self._blocked_pure = True
            return False       # blocked: retried at each poll, never served while the queue is hung
        for t in targets:
            self._save_mqd(t, f"MQD save at UNMAP_QUEUES of the {t.name} (CP_MQD_BASE_ADDR)")
            self._deactivate(t)
        return True


# RELEASE_MEM replaced EVENT_WRITE_EOP/EOS (nvd.h 0x47/0x48): EVENT_INDEX 5 is an end-of-pipe release of a
# timestamp event, 6 an end-of-shader one (soc21_enum.h VGT_EVENT_TYPE values). Other pairs: assumption,
# the CP never signals them (the queue hangs at the packet).
_RELEASE_EVENTS = {
    5: frozenset((0x04, 0x14, 0x28, 0x29, 0x2B, 0x2D)),   # CACHE_FLUSH_TS, CACHE_FLUSH_AND_INV_TS_EVENT,
                                                          # BOTTOM_OF_PIPE_TS, FLUSH_SX_TS, FLUSH_AND_INV_DB/CB_DATA_TS
    6: frozenset((0x2F, 0x30)),                           # CS_DONE, PS_DONE
}


def _compare(function: int, value: int, ref: int) -> bool:
    return (True, value < ref, value <= ref, value == ref, value != ref, value >= ref, value > ref)[function]


# opcode -> (name, allowed body lengths or None for variable)
_HANDLERS = {
    P.PACKET3_NOP: ("NOP", None),
    P.PACKET3_SET_SH_REG: ("SET_SH_REG", None),
    P.PACKET3_SET_CONFIG_REG: ("SET_CONFIG_REG", None),
    P.PACKET3_SET_UCONFIG_REG: ("SET_UCONFIG_REG", None),
    P.PACKET3_DISPATCH_DIRECT: ("DISPATCH_DIRECT", (4,)),
    P.PACKET3_ACQUIRE_MEM: ("ACQUIRE_MEM", (7,)),
    P.PACKET3_RELEASE_MEM: ("RELEASE_MEM", (7,)),
    P.PACKET3_WAIT_REG_MEM: ("WAIT_REG_MEM", (6,)),
    P.PACKET3_WRITE_DATA: ("WRITE_DATA", tuple(range(4, 0x4000))),
    P.PACKET3_INDIRECT_BUFFER: ("INDIRECT_BUFFER", (3,)),
    P.PACKET3_EVENT_WRITE: ("EVENT_WRITE", (1, 3)),
    P.PACKET3_COPY_DATA: ("COPY_DATA", (5,)),
    P.PACKET3_SET_RESOURCES: ("SET_RESOURCES", (7,)),
    P.PACKET3_MAP_QUEUES: ("MAP_QUEUES", (6,)),
    P.PACKET3_UNMAP_QUEUES: ("UNMAP_QUEUES", (5,)),
}
