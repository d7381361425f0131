"""SDMA 6.0: the F32 engines' halt/reset state, their status register, and their gfx ring queue with its packets.

Facts (amdgpu/sdma_v6_0.c, amdgpu_psp.c, imu_v11_0.c; registers from gc_11_0_0, where gfx11's SDMA lives):
- sdma_v6_0_get_reg_offset: SDMA1's registers are SDMA0's + 0x600, except the HYP_DEC range
  (0x5880..0x589a, base index 1, SDMA0_F32_CNTL included) where they are + 0x20; gc_11_0_0's SDMA1_* names
  are exactly those addresses.
- sdma_v6_0_start with PSP loading: sdma_v6_0_enable(true) writes SDMA{i}_F32_CNTL.HALT = 0 on each instance;
  sdma_v6_0_gfx_resume programs the ring (QUEUE0_RB_*, DOORBELL, MINOR_PTR_UPDATE), UTCL1_CNTL (RESP_MODE,
  REDO_DELAY), UTCL1_PAGE (cache policies, LLC_NOALLOC), SEM_WAIT_FAIL_TIMER_CNTL, then unhalts again with
  HALT = 0 and TH1_RESET = 0. hw_fini / sdma_v6_0_enable(false) write HALT = 1. sdma_v6_0_soft_reset sets
  FREEZE, HALT | TH1_RESET, then pulses GRBM_SOFT_RESET.SOFT_RESET_SDMA0 << i and starts again without
  reloading firmware (the ucode survives a soft reset).
- sdma_v6_0_is_idle / wait_for_idle: SDMA{i}_STATUS_REG.IDLE.
- The firmware reaches the engines through the PSP and the RLC autoload: psp_load_non_psp_fw sends one SDMA
  image (SDMA_UCODE_TH0 and TH1; "PSP only receive one SDMA fw", the autoload gives it to every instance)
  before AUTOLOAD_RLC, and the IMU holds SDMA in reset until it releases GFX_IMU_GFX_RESET_CTRL.SDMA_RESETB.

Strictness: HALT written 0 before the PSP has loaded SDMA_UCODE_TH0 and TH1 and the RLC autoload has
completed is refused: the engine stays halted (HALT reads back 1) and dev.errors says why.

Power-on: every SDMA register at its gc_11_0_0_default.h value (the register space's defaults): F32_CNTL
0x08084001 (HALT set), QUEUE0_RB_CNTL 0x40800 (ring off, F32_WPTR_POLL_ENABLE set), QUEUE0_IB_CNTL 0x100,
UTCL1_CNTL/UTCL1_PAGE as the header says. A soft reset puts F32_CNTL back to its power-on value.

Simulator choices (no public fact): an idle engine's STATUS_REG has every
*_IDLE/*_EMPTY bit set (0x465EE557) and a busy one clears IDLE, RB_EMPTY, RB_CMD_IDLE, BLOCK_IDLE, EX_IDLE,
CONTEXT_EMPTY and PREV_CMD_IDLE. Direct ucode loads
(SDMA0_UCODE_* / BROADCAST_UCODE_*) are plain storage and load nothing.

The gfx ring (queue 0 of each engine; sdma_v6_0_gfx_resume, sdma_v6_0_ring_set_wptr, sdma_v6_0_0_pkt_open.h):
- QUEUE0_RB_BASE/_HI hold the ring's GPU virtual address >> 8 (bits 39:8, 63:40); RB_CNTL.RB_SIZE is log2 of
  its size in dwords, RB_ENABLE starts it, RB_VMID is the VMID its addresses are translated in (the GC hub,
  UTCL2 client SDMA0/SDMA1 = 13/14 of gfxhub_client_ids), RPTR_WRITEBACK_ENABLE writes the read pointer as a
  64-bit value to RB_RPTR_ADDR_HI/LO after each packet (sdma_v6_0_ring_get_rptr reads a u64 and shifts it).
- Read and write pointers are 64-bit byte counts that only grow (support_64bit_ptrs: upstream writes
  `ring->wptr << 2`, never masked); a packet sits at RB_BASE + (rptr mod ring size) and may wrap.
  RB_RPTR/_HI and RB_WPTR/_HI hold them. A wptr behind rptr, more than one ring ahead, or not a dword
  multiple hangs the queue.
- The doorbell: with QUEUE0_DOORBELL.ENABLE, a BAR2 write at the dword index DOORBELL_OFFSET.OFFSET holds
  (ring->doorbell_index, a dword index) carries the 64-bit wptr (WDOORBELL64: one 64-bit write; a 32-bit
  write there takes the upper half from the dword above). Without the doorbell, RB_WPTR/_HI register writes
  move it.
- MINOR_PTR_UPDATE: gfx_resume sets it before writing the pointers back ("before programing wptr to a less
  value, need set minor_ptr_update first") and clears it after; while it is set the engine acts on no
  pointer: writes (register or doorbell) are stored and take effect when it goes back to 0 (assumption: the
  bracket's purpose as upstream's comment gives it; the engine holds the queue meanwhile).
- F32_WPTR_POLL_ENABLE (RB_CNTL; gfx_resume sets it on bare metal too) with RB_WPTR_POLL_ADDR_HI/LO: the
  engine's firmware reads the write pointer from that 64-bit shadow in memory (sdma_v6_0_ring_set_wptr
  stores it there, atomic64_set, before ringing the doorbell). The model reads it, through the queue's
  VMID, when the firmware is woken with the ring enabled: by a doorbell, or by an unhalt (it resumes the
  queue), and takes it as the write pointer; a shadow that cannot be read hangs the queue. Assumption: the
  firmware's poll period and triggers are not public; gfx_resume enables the ring (and after a reset the
  shadow still holds the old ring's wptr) before the ring test rewrites it, so RB_ENABLE and wptr register
  writes do not read it. Upstream's sdma_v6_0_gfx_stop clears RB_ENABLE and IB_ENABLE before halting
  (hw_fini, soft reset), so a later unhalt does not resume a queue whose shadow was freed.
- Packets (header: op bits 7:0, sub_op 15:8): NOP (COUNT more dwords follow, burst NOP), COPY LINEAR (count =
  bytes - 1 in a 30-bit field, so up to 1 GiB per packet; any byte alignment. Upstream's copy_max_bytes and
  fill_max_bytes of 0x400000 are navi10's 22-bit field carried over, a driver limit, not v6's), WRITE LINEAR
  (COUNT = dwords - 1, dword-aligned destination), FENCE (32-bit value, dword-aligned), TRAP (an IV: client
  SOC21_IH_CLIENTID_GFX, source GFX_11_0_0__SRCID__SDMA_TRAP, ring_id = instance << 4 | queue, src_data[0] =
  INT_CONTEXT, as sdma_v6_0_process_trap_irq decodes it; only while SDMA{i}_CNTL.TRAP_ENABLE, set_trap_irq_state),
  POLL_REGMEM (memory with MEM_POLL or a register at byte address ADDR_LO; (value & mask) FUNC reference, FUNC 0 always,
  1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >; HDP_FLUSH writes the reference to the register at ADDR_HI (the NBIO flush
  request) and polls ADDR_LO (flush done), as sdma_v6_0_ring_emit_hdp_flush emits it), CONSTANT FILL (count =
  bytes - 1, FILLSIZE = log2 of the element taken from the data dword), TIMESTAMP (SET/GET/GET_GLOBAL, 8-byte
  aligned destination), COND_EXE (the next EXEC_COUNT dwords run only if the dword at ADDR equals REFERENCE),
  SRBM_WRITE (a register write; privileged: RB_PRIV or the INDIRECT's PRIV), GCR_REQ (its GCR_CONTROL's
  cache actions, gpusim.gl2, as sdma_v6_0_ring_emit_mem_sync asks them), INDIRECT (an IB of IB_SIZE dwords at a 32-byte aligned address in the header's VMID; needs
  IB_CNTL.IB_ENABLE; no IB inside an IB).

Strictness: an unknown opcode or sub-opcode, a packet the model does not execute (tiled/sub-window copies,
ATOMIC, PTEPDE, SEM, ...), bits set outside a count field, a misaligned address, a fault (the GMC latches it
and posts its IV) or a refused DMA hangs the queue: rptr stays at the packet, STATUS_REG reads busy, and
dev.errors names the engine, the packet and why, until a soft reset (GRBM_SOFT_RESET.SOFT_RESET_SDMA<i>) or
a mode1 reset. Nothing runs while the engine is halted or RB_ENABLE is clear; work written meanwhile runs
once both allow it.

Simulator choices (no public fact): the queue runs synchronously on the doorbell (in stepped mode) until it
is empty, blocked or hung, so a driver polling a fence in host memory makes progress; with the asynchronous
clock it runs at the next step. Copies and fills take one step per BYTES_PER_STEP (32 KiB per 1 us step,
about 32 GB/s), at least one: the engines' clock moves on by that, and in the stepped mode the device clock
catches up (not from inside a clock step, e.g. a poll retry: the clock never runs inside itself).
A copy or fill moves SLICE_BYTES (4 MiB) per turn: a longer one (COUNT allows 1 GiB) moves its next slice
when the previous slice's transfer time has passed on the device clock (the driver's polls step it), so the
doorbell write returns at once, STATUS_REG reads busy meanwhile, and a soft reset or a hang (a fault that
stops the engine) ends it between slices, as an engine that runs asynchronously would be stopped.
Assumption: the engine's own granularity is not public; 4 MiB is upstream's copy_max_bytes/fill_max_bytes
(sdma_v6_0.c), so every copy the kernel driver emits still runs whole in one turn. A FREEZE takes effect
between slices.
Timestamps count 100 MHz ticks of the largest of that clock, the device clock and the CP model's clock (the
GPU clock counter is one counter), so they only grow. A blocked POLL_REGMEM re-checks every max(1, INTERVAL)
steps and on every doorbell; RETRY_COUNT 0xfff (what upstream emits) retries forever, a smaller count
exhausted hangs the queue.
FREEZE (SDMA{i}_FREEZE.FREEZE): the engine stops at a packet boundary and serves nothing until FREEZE is
written 0 or the GRBM soft reset of that engine; FROZEN reads 1 while it is set. Sources: sdma_v5_0/v5_2
stop_queue (later upstream: set FREEZE, poll FROZEN, then halt) and restore_queue ("unfreeze": FREEZE 0
before the queue runs again); sdma_v6_0_soft_reset (6.1) sets FREEZE and never clears it, then restarts
the engines after SOFT_RESET_SDMA<i>, so that reset must clear it (assumption: what upstream implies).
The model freezes at once (it runs packets whole) and drops nothing that was queued.
WPTR_POLL_ENABLE (the SR-IOV register poll), queues 1..7, preemption and AQL mode are not modeled.

State for other models: `running(i)` (the control thread TH0 executes firmware), `ctx_switch_running(i)` (TH1
too), `set_busy(i, busy)`, `queues[i]` (QueueState: `hung`, `ib`, `poll`).
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from amdrv.autogen import ih as IHIDS
from amdrv.autogen import psp as P
from amdrv.autogen import sdma6 as S
from gpusim.device import Block, DMAError, IVEntry
from gpusim.fwcheck import fw_type_name
from gpusim.gmc import VMFault

GC = "GC"
INSTANCES = 2          # Navi31 and Navi33 both have SDMA0 and SDMA1
FIRMWARE = (P.GFX_FW_TYPE_SDMA_UCODE_TH0, P.GFX_FW_TYPE_SDMA_UCODE_TH1)
IDLE_FIELDS = ("IDLE", "REG_IDLE", "RB_EMPTY", "RB_CMD_IDLE", "IB_CMD_IDLE", "BLOCK_IDLE", "EX_IDLE",
               "MC_WR_IDLE", "SRBM_IDLE", "CONTEXT_EMPTY", "RB_MC_RREQ_IDLE", "IB_MC_RREQ_IDLE", "MC_RD_IDLE",
               "DELTA_RPTR_EMPTY", "MC_RD_NO_POLL_IDLE", "PREV_CMD_IDLE", "SEM_IDLE", "INT_IDLE")
BUSY_CLEARS = ("IDLE", "RB_EMPTY", "RB_CMD_IDLE", "BLOCK_IDLE", "EX_IDLE", "CONTEXT_EMPTY", "PREV_CMD_IDLE")
CLIENT_ID = (13, 14)          # gfxhub_client_ids: "SDMA0", "SDMA1" (the UTCL2 CID of a fault)
QUEUE = 0                     # the gfx ring is queue 0 (the trap IV's ring_id low nibble)
BYTES_PER_STEP = 32 << 10     # copy bandwidth: 32 KiB per 1 us clock step
SLICE_BYTES = 4 << 20         # a copy or fill moves at most this much per turn (module docstring)
TICK_NS = 10                  # timestamps count a 100 MHz reference clock
RETRY_FOREVER = 0xFFF
M64 = (1 << 64) - 1
POLL_FUNCS = {0: lambda v, r: True, 1: lambda v, r: v < r, 2: lambda v, r: v <= r, 3: lambda v, r: v == r,
              4: lambda v, r: v != r, 5: lambda v, r: v >= r, 6: lambda v, r: v > r}


def reg(i: int, name: str) -> str:
    """gc_11_0_0's name of an SDMA register of instance i: reg(1, "F32_CNTL") -> "SDMA1_F32_CNTL"."""
    return f"SDMA{i}_{name}"


def field(pkt: str, dw: int, name: str, value: int) -> int:
    shift, mask = S.PACKETS[pkt][dw][name]
    return (value >> shift) & mask


class Hang(Exception):
    """The packet stops the queue (why, in words)."""


@dataclass
class QueueState:
    """One engine's gfx ring beyond its registers: the IB being executed, a blocked poll, a hang."""
    hung: str | None = None
    ib: list | None = None       # [base VA, size in dwords, next dword, vmid, privileged]
    poll: list | None = None     # [where (rptr, IB position), retries so far]
    gen: int = 0                 # bumped on every block/reset so stale poll retries do nothing
    xfer: list | None = None     # a copy/fill under way: [where, bytes done, clock step its next slice is due]
    active: bool = False         # executing now (a clock step inside a copy must not re-enter)


class SDMA(Block):
    name = "SDMA"

    def attach(self) -> None:
        for i in range(INSTANCES):
            self.on_write(GC, reg(i, "F32_CNTL"), functools.partial(self._w_f32_cntl, i))
            self.on_write(GC, reg(i, "FREEZE"), functools.partial(self._w_freeze, i))
            self.on_read(GC, reg(i, "FREEZE"), functools.partial(self._r_freeze, i))
            self.on_read(GC, reg(i, "STATUS_REG"), functools.partial(self._r_status, i))
            self.on_write(GC, reg(i, "QUEUE0_RB_CNTL"), functools.partial(self._w_kick, i))
            for r in ("QUEUE0_RB_WPTR", "QUEUE0_RB_WPTR_HI"):
                self.on_write(GC, reg(i, r), functools.partial(self._w_wptr, i))
            self.on_write(GC, reg(i, "QUEUE0_MINOR_PTR_UPDATE"), functools.partial(self._w_minor, i))
        nbio = self.dev.blocks.get("NBIO")
        if nbio is not None:
            nbio.on_doorbell("SDMA", self.doorbell)   # what the S2A entries route to SDMA

    def reset(self) -> None:
        self.busy = [False] * INSTANCES
        self.queues = [QueueState() for _ in range(INSTANCES)]
        self.clock_ns = 0          # the device clock plus the transfer time the engines spent
        self._in_event = False     # running from a scheduled event, i.e. inside a clock step
        for i in range(INSTANCES):
            self._power_on(i)

    def _power_on(self, i: int) -> None:
        # gc_11_0_0_default.h: 0x08084001, HALT set
        self.set(GC, reg(i, "F32_CNTL"), self.dev.power_on_value(GC, reg(i, "F32_CNTL")))

    # -- state for other models ----------------------------------------------------------------------
    def _f32(self, i: int) -> dict:
        return self._fields(i, "F32_CNTL")

    def _fields(self, i: int, name: str) -> dict:
        return self.dev.table(GC)[reg(i, name)].decode(self.get(GC, reg(i, name)))

    def running(self, i: int) -> bool:
        """Instance i's control thread (TH0) executes its firmware: its queues can be served."""
        f = self._f32(i)
        return not (f["HALT"] or f["TH0_RESET"] or self.frozen(i))

    def frozen(self, i: int) -> bool:
        """SDMA{i}_FREEZE.FREEZE holds the engine (module docstring)."""
        return bool(self._fields(i, "FREEZE")["FREEZE"])

    def ctx_switch_running(self, i: int) -> bool:
        """The context-switch thread (TH1) runs too (upstream releases TH1_RESET when it unhalts)."""
        return self.running(i) and not self._f32(i)["TH1_RESET"]

    def set_busy(self, i: int, busy: bool) -> None:
        self.busy[i] = busy

    def missing(self) -> list[str]:
        """Why no SDMA engine can run yet (empty when they can)."""
        gfx, psp = self.dev.blocks.get("GFX"), self.dev.blocks.get("PSP")
        why = []
        absent = [t for t in FIRMWARE if psp is None or not psp.is_loaded(t)]
        if absent:
            why.append("the PSP has not loaded " + ", ".join(fw_type_name(t) for t in absent))
        if gfx is None or not gfx.rlc_autoload_complete:
            why.append("the RLC autoload has not completed (the IMU holds SDMA in reset)")
        return why

    def soft_reset(self, i: int) -> None:
        """GRBM_SOFT_RESET.SOFT_RESET_SDMA<i> (called by the GFX model): the engine stops and its queue
        forgets a hang, an IB and a poll; firmware and ring registers stay (upstream programs them again)."""
        self.busy[i] = False
        gen = self.queues[i].gen + 1
        self.queues[i] = QueueState(gen=gen)
        self._power_on(i)
        # the reset lets go of a freeze (sdma_v6_0_soft_reset restarts the engine without clearing it)
        self.set(GC, reg(i, "FREEZE"), self.dev.power_on_value(GC, reg(i, "FREEZE")))

    # -- registers ------------------------------------------------------------------------------------
    def _w_f32_cntl(self, i: int, value: int) -> int:
        r = self.dev.table(GC)[reg(i, "F32_CNTL")]
        if not r.decode(value)["HALT"] and self._f32(i)["HALT"]:
            why = self.missing()
            if why:
                self.error(f"{reg(i, 'F32_CNTL')}.HALT written 0 but {' and '.join(why)}: SDMA{i} stays halted")
                value = r.encode(value, HALT=1)
            else:
                # work written while halted runs now; a queue enabled at this moment is resumed, its
                # wptr read from the shadow (F32_WPTR_POLL_ENABLE)
                resume = bool(self._fields(i, "QUEUE0_RB_CNTL")["RB_ENABLE"])
                self.dev.schedule(0, self._event_kick, i, resume)
        return value

    def _w_freeze(self, i: int, value: int) -> int:
        r = self.dev.table(GC)[reg(i, "FREEZE")]
        if not r.decode(value)["FREEZE"] and self.frozen(i):
            self.dev.schedule(0, self._event_kick, i)       # unfrozen: queued work runs on
        return r.encode(value, FROZEN=0)                     # FROZEN is status, not stored

    def _r_freeze(self, i: int) -> int:
        r = self.dev.table(GC)[reg(i, "FREEZE")]
        v = self.get(GC, reg(i, "FREEZE"))
        return r.encode(v, FROZEN=int(self.frozen(i)))

    def _r_status(self, i: int) -> int:
        r = self.dev.table(GC)[reg(i, "STATUS_REG")]
        v = r.encode(**{f: 1 for f in IDLE_FIELDS})
        if self.busy[i] or self._has_work(i):
            v = r.encode(v, **{f: 0 for f in BUSY_CLEARS})
        return r.encode(v, INSIDE_IB=1) if self.queues[i].ib else v

    def _w_kick(self, i: int, value: int) -> None:
        self.dev.schedule(0, self._event_kick, i)

    def _w_wptr(self, i: int, value: int) -> None:
        self.dev.schedule(0, self._event_kick, i)    # held while MINOR_PTR_UPDATE is set (kick)

    def _w_minor(self, i: int, value: int) -> None:
        if not value & 1:                            # MINOR_PTR_UPDATE.ENABLE back to 0: the pointers count now
            self.dev.schedule(0, self._event_kick, i)

    def _minor_update(self, i: int) -> bool:
        return bool(self.get(GC, reg(i, "QUEUE0_MINOR_PTR_UPDATE")) & 1)

    def doorbell(self, index: int, value: int) -> bool:
        """A BAR2 doorbell write (NBIO routing); True when it was one of the gfx rings'."""
        for i in range(INSTANCES):
            if not self._fields(i, "QUEUE0_DOORBELL")["ENABLE"]:
                continue
            if self._fields(i, "QUEUE0_DOORBELL_OFFSET")["OFFSET"] != index:
                continue
            cells = self.dev.blocks["NBIO"].doorbells
            self._set_ptr(i, "WPTR", cells.get(index, 0) | cells.get(index + 1, 0) << 32)
            if self.dev.stepped:
                self.kick(i, poll_wptr=True)
            else:
                self.dev.schedule(0, self._event_kick, i, True)
            return True
        return False

    def driver_gone(self) -> None:
        """The driver's process closed the GPU with an engine's ring still enabled and F32_WPTR_POLL_ENABLE set:
        the firmware polls the write-pointer shadow on its own (the field's purpose, work without a
        doorbell; its period is not public: assumption, at least once while the GPU waits for the next
        driver), and the shadow is gone: through page tables the driver tore down (gmc fini) the read is a VM
        fault, latched for the next driver (who must then boot cold, amdrv.am), through live ones it reaches
        freed host memory and the queue hangs. sdma_v6_0_hw_fini stops the rings first (sdma_v6_0_gfx_stop)."""
        for i in range(INSTANCES):
            cntl = self._fields(i, "QUEUE0_RB_CNTL")
            if self.running(i) and cntl["RB_ENABLE"] and cntl["F32_WPTR_POLL_ENABLE"] and not self.queues[i].hung:
                addr = (self.get(GC, reg(i, "QUEUE0_RB_WPTR_POLL_ADDR_LO")) & ~3
                        | self.get(GC, reg(i, "QUEUE0_RB_WPTR_POLL_ADDR_HI")) << 32)
                try:
                    self._read(i, cntl["RB_VMID"], addr, 8, "write pointer poll (RB_WPTR_POLL_ADDR) with no driver")
                except Hang as e:
                    self._hang(i, str(e))

    # -- the ring ---------------------------------------------------------------------------------------
    def _poll_wptr(self, i: int, cntl: dict) -> None:
        """F32_WPTR_POLL_ENABLE: the write pointer from its 64-bit shadow at RB_WPTR_POLL_ADDR."""
        addr = (self.get(GC, reg(i, "QUEUE0_RB_WPTR_POLL_ADDR_LO")) & ~3
                | self.get(GC, reg(i, "QUEUE0_RB_WPTR_POLL_ADDR_HI")) << 32)
        raw = self._read(i, cntl["RB_VMID"], addr, 8, "write pointer poll (RB_WPTR_POLL_ADDR)")
        self._set_ptr(i, "WPTR", struct.unpack("<Q", raw)[0])

    def _ptr(self, i: int, which: str) -> int:
        return self.get(GC, reg(i, f"QUEUE0_RB_{which}")) | self.get(GC, reg(i, f"QUEUE0_RB_{which}_HI")) << 32

    def _set_ptr(self, i: int, which: str, value: int) -> None:
        self.set(GC, reg(i, f"QUEUE0_RB_{which}"), value & 0xFFFFFFFF)
        self.set(GC, reg(i, f"QUEUE0_RB_{which}_HI"), (value >> 32) & 0xFFFFFFFF)

    def _ring(self, i: int) -> tuple[int, int, dict]:
        cntl = self._fields(i, "QUEUE0_RB_CNTL")
        base_hi = self.get(GC, reg(i, "QUEUE0_RB_BASE_HI")) & 0xFFFFFF
        base = self.get(GC, reg(i, "QUEUE0_RB_BASE")) << 8 | base_hi << 40
        return base, 4 << cntl["RB_SIZE"], cntl

    def _pending(self, i: int) -> int:
        return (self._ptr(i, "WPTR") - self._ptr(i, "RPTR")) & M64

    def _has_work(self, i: int) -> bool:
        q = self.queues[i]
        if q.hung or q.ib or q.poll or q.xfer:
            return True
        return self.running(i) and bool(self._fields(i, "QUEUE0_RB_CNTL")["RB_ENABLE"]) and self._pending(i) != 0

    def _hang(self, i: int, why: str) -> None:
        q = self.queues[i]
        q.hung, q.poll = why, None
        q.gen += 1
        self.error(f"SDMA{i} gfx ring hung at rptr {self._ptr(i, 'RPTR'):#x}: {why}; the queue stays stopped "
                   f"until GRBM_SOFT_RESET.SOFT_RESET_SDMA{i} (sdma_v6_0_soft_reset) or a mode1 reset")

    def _event_kick(self, i: int, poll_wptr: bool = False) -> None:
        """A kick from a scheduled event: inside a clock step, which a transfer must not step again."""
        outer, self._in_event = self._in_event, True
        try:
            self.kick(i, poll_wptr)
        finally:
            self._in_event = outer

    def kick(self, i: int, poll_wptr: bool = False) -> None:
        """Runs instance i's gfx ring until it is empty, blocked or hung. poll_wptr: the firmware was woken
        (a doorbell, an unhalt) and, with F32_WPTR_POLL_ENABLE, first reads the write pointer's shadow."""
        q = self.queues[i]
        if q.active or q.hung or not self.running(i) or self._minor_update(i):
            return
        cntl = self._fields(i, "QUEUE0_RB_CNTL")
        if not cntl["RB_ENABLE"]:
            return
        q.active = True
        try:
            if poll_wptr and cntl["F32_WPTR_POLL_ENABLE"]:
                try:
                    self._poll_wptr(i, cntl)
                except Hang as e:
                    self._hang(i, str(e))
                    return
            while not q.hung and self.running(i):
                try:
                    if not self._step_packet(i):
                        break
                except Hang as e:
                    self._hang(i, str(e))
        finally:
            q.active = False

    def _step_packet(self, i: int) -> bool:
        """Executes one packet of the IB or the ring; False when there is nothing to do (empty, blocked)."""
        q = self.queues[i]
        base, size, cntl = self._ring(i)
        if q.ib is not None:
            ib_base, ib_size, pos, vmid, priv = q.ib
            if pos >= ib_size:
                q.ib = None
                self._retire(i, 6, cntl)        # the INDIRECT packet completes with its IB
                return True
            avail = ib_size - pos
            fetch = functools.partial(self._fetch_ib, i, ib_base + 4 * pos, vmid)
            return self._packet(i, fetch, avail, vmid, bool(priv), ("IB", ib_base, pos), in_ib=True)
        pending = self._pending(i)
        if pending == 0:
            return False
        rptr, wptr = self._ptr(i, "RPTR"), self._ptr(i, "WPTR")
        if pending > size:
            raise Hang(f"the write pointer {wptr:#x} is behind the read pointer {rptr:#x} or more than the "
                       f"{size:#x}-byte ring ahead of it (SDMA v6 pointers are 64-bit byte counts, never masked)")
        if pending & 3:
            raise Hang(f"the write pointer {wptr:#x} is not a whole number of dwords past the read pointer {rptr:#x}")
        fetch = functools.partial(self._fetch_ring, i, base, size, rptr, cntl["RB_VMID"])
        return self._packet(i, fetch, pending // 4, cntl["RB_VMID"], bool(cntl["RB_PRIV"]), ("RB", rptr), in_ib=False)

    def _fetch_ring(self, i: int, base: int, size: int, rptr: int, vmid: int, n: int) -> list[int]:
        out = bytearray()
        off = rptr % size
        while len(out) < 4 * n:
            chunk = min(4 * n - len(out), size - off)
            out += self._read(i, vmid, base + off, chunk, "ring")
            off = 0
        return list(struct.unpack(f"<{n}I", out))

    def _fetch_ib(self, i: int, va: int, vmid: int, n: int) -> list[int]:
        return list(struct.unpack(f"<{n}I", self._read(i, vmid, va, 4 * n, "IB")))

    def _retire(self, i: int, ndw: int, cntl: dict) -> None:
        """Moves rptr past a completed ring packet and writes it back."""
        rptr = (self._ptr(i, "RPTR") + 4 * ndw) & M64
        self._set_ptr(i, "RPTR", rptr)
        if cntl["RPTR_WRITEBACK_ENABLE"]:
            addr = (self.get(GC, reg(i, "QUEUE0_RB_RPTR_ADDR_LO")) & ~3
                    | self.get(GC, reg(i, "QUEUE0_RB_RPTR_ADDR_HI")) << 32)
            self._write(i, cntl["RB_VMID"], addr, struct.pack("<Q", rptr), "rptr writeback")

    # -- memory through the GC hub ------------------------------------------------------------------------
    def _physical(self, i: int) -> bool:
        """UTCL1_PAGE.ADDR_IS_PA (0 at power-on, gc_11_0_0_default.h; sdma_v6_0_gfx_resume keeps it): the
        engine's addresses are taken as physical MC addresses, its VMID's page table unused (assumption: the
        field's name; no upstream code sets it)."""
        f = self.dev.table(GC)[reg(i, "UTCL1_PAGE")].fields["ADDR_IS_PA"]
        return bool(self.get(GC, reg(i, "UTCL1_PAGE")) >> f.shift & 1)

    def _read(self, i: int, vmid: int, va: int, n: int, what: str) -> bytes:
        try:
            return self.dev.blocks["GMC"].read(vmid, va, n, hub="GC", client=CLIENT_ID[i], physical=self._physical(i))
        except VMFault as e:
            raise Hang(f"{what} read of {n} bytes at {va:#x} faulted ({e})") from None
        except (DMAError, IndexError) as e:
            raise Hang(f"{what} read of {n} bytes at {va:#x} failed: {e}") from None

    def _write(self, i: int, vmid: int, va: int, data: bytes, what: str) -> None:
        try:
            self.dev.blocks["GMC"].write(vmid, va, data, hub="GC", client=CLIENT_ID[i], physical=self._physical(i))
        except VMFault as e:
            raise Hang(f"{what} write of {len(data)} bytes at {va:#x} faulted ({e})") from None
        except (DMAError, IndexError) as e:
            raise Hang(f"{what} write of {len(data)} bytes at {va:#x} failed: {e}") from None

    def now_ns(self) -> int:
        """The GPU clock as the engines see it: the device clock, plus transfer time not yet stepped, and
        the CP's own lead (its work time), so timestamps of both engines only grow."""
        cp = self.dev.blocks.get("CP")
        return max(self.clock_ns, self.dev.now_ns, cp.now_ns() if cp is not None else 0)

    def _spend(self, nbytes: int) -> None:
        """The bandwidth model: a transfer of nbytes takes time. In the stepped mode the device clock steps
        by it (events due meanwhile run), except inside a clock step, which never runs inside itself."""
        self.clock_ns = self.now_ns() + max(1, -(-nbytes // BYTES_PER_STEP)) * self.dev.STEP_NS
        if self.dev.stepped and not self._in_event:
            behind = -(-(self.clock_ns - self.dev.now_ns) // self.dev.STEP_NS)
            if behind > 0:
                self.dev.step(behind)

    # -- packets -----------------------------------------------------------------------------------------
    def _packet(self, i: int, fetch, avail: int, vmid: int, priv: bool, where: tuple, in_ib: bool) -> bool:
        """Decodes and executes the packet at the current position; False if it is incomplete or blocks."""
        q = self.queues[i]
        header = fetch(1)[0]
        op, sub = header & 0xFF, (header >> 8) & 0xFF
        length = self._length(op, sub, header, fetch, avail)
        if length is None or length > avail:
            if in_ib:
                raise Hang(f"packet {header:#010x} (op {op}) runs past the end of its IB")
            return False    # the rest of the packet is not committed yet
        dws = fetch(length)
        name = OPS.get(op, ("op", None))[0]
        try:
            done = self._execute(i, op, sub, dws, vmid, priv, in_ib, where)
        except Hang as e:
            raise Hang(f"{name} packet {' '.join(f'{d:08x}' for d in dws[:8])}{' ...' if len(dws) > 8 else ''}"
                       f"{' in an IB' if in_ib else ''}: {e}") from None
        if not done:
            return False
        q.poll = None
        if in_ib:
            q.ib[2] += length
        elif op != S.SDMA_OP_INDIRECT:
            self._retire(i, length, self._ring(i)[2])
        return True

    def _length(self, op: int, sub: int, header: int, fetch, avail: int) -> int | None:
        if op == S.SDMA_OP_NOP:
            return 1 + field("NOP", 0, "count", header)
        if op == S.SDMA_OP_WRITE and sub == S.SDMA_SUBOP_WRITE_LINEAR:
            if avail < 4:
                return None
            return 5 + field("WRITE_UNTILED", 3, "count", fetch(4)[3])
        if op not in OPS:
            raise Hang(f"unknown opcode {op} in header {header:#010x} (sdma_v6_0_0_pkt_open.h defines no such SDMA_OP)")
        name, lengths = OPS[op]
        if sub not in lengths:
            raise Hang(f"{name} header {header:#010x} (sub-opcode {sub}): the model does not execute this packet")
        return lengths[sub]

    def _execute(self, i: int, op: int, sub: int, d: list[int], vmid: int, priv: bool, in_ib: bool,
                 where: tuple) -> bool:
        if op == S.SDMA_OP_NOP:
            return True
        if op == S.SDMA_OP_GCR_REQ:   # GCR_CONTROL 15:0 in dword 2's top half, 18:16 in dword 3 (sdma_v6_0_0_pkt_open.h)
            self.dev.blocks["GL2"].gcr((d[2] >> 16) | (d[3] & 7) << 16, f"SDMA{i} GCR_REQ")
            return True
        if op == S.SDMA_OP_COPY:
            if d[1] >> 30:
                raise Hang(f"COUNT dword {d[1]:#010x} has bits above the 30-bit count field set")
            if field("COPY_LINEAR", 0, "broadcast", d[0]):
                raise Hang("broadcast copies are not modeled")
            src, dst = d[3] | d[4] << 32, d[5] | d[6] << 32
            return self._transfer(i, where, d[1] + 1, lambda at, k: self._write(
                i, vmid, dst + at, self._read(i, vmid, src + at, k, "copy source"), "copy destination"))
        if op == S.SDMA_OP_WRITE:
            dst = d[1] | d[2] << 32
            if dst & 3:
                raise Hang(f"destination {dst:#x} is not dword aligned")
            self._write(i, vmid, dst, struct.pack(f"<{len(d) - 4}I", *d[4:]), "write destination")
            return True
        if op == S.SDMA_OP_FENCE:
            addr = d[1] | d[2] << 32
            if addr & 3:
                raise Hang(f"fence address {addr:#x} is not dword aligned")
            self._write(i, vmid, addr, struct.pack("<I", d[3]), "fence")
            return True
        if op == S.SDMA_OP_TRAP:
            if self._fields(i, "CNTL")["TRAP_ENABLE"]:
                self.dev.post_interrupt(IVEntry(client_id=IHIDS.SOC21_IH_CLIENTID_GFX,
                                                source_id=IHIDS.GFX_11_0_0__SRCID__SDMA_TRAP,
                                                ring_id=i << 4 | QUEUE,
                                                src_data=(field("TRAP", 1, "int_context", d[1]), 0, 0, 0)))
            return True
        if op == S.SDMA_OP_CONST_FILL:
            return self._fill(i, d, vmid, where)
        if op == S.SDMA_OP_TIMESTAMP:
            return self._timestamp(i, sub, d, vmid)
        if op == S.SDMA_OP_POLL_REGMEM:
            return self._poll(i, d, vmid, where)
        if op == S.SDMA_OP_COND_EXE:
            addr = d[1] | d[2] << 32
            if addr & 3:
                raise Hang(f"address {addr:#x} is not dword aligned")
            if struct.unpack("<I", self._read(i, vmid, addr, 4, "COND_EXE"))[0] != d[3]:
                self._skip(i, field("COND_EXE", 4, "exec_count", d[4]), in_ib)
            return True
        if op == S.SDMA_OP_SRBM_WRITE:
            if not priv:
                raise Hang("SRBM_WRITE from a queue or IB that is not privileged (RB_PRIV / INDIRECT PRIV)")
            if field("SRBM_WRITE", 0, "byte_en", d[0]) != 0xF:
                raise Hang("SRBM_WRITE with partial BYTE_EN is not modeled")
            self.dev.regs.write(field("SRBM_WRITE", 1, "addr", d[1]), d[2])
            return True
        if op == S.SDMA_OP_INDIRECT:
            return self._indirect(i, d, in_ib)
        raise AssertionError(op)

    def _skip(self, i: int, ndw: int, in_ib: bool) -> None:
        """COND_EXE's skip: the next ndw dwords are passed over (they must already be there)."""
        q = self.queues[i]
        if in_ib:
            q.ib[2] += ndw
            if q.ib[2] + 5 > q.ib[1]:
                raise Hang(f"EXEC_COUNT {ndw} runs past the end of the IB")
        else:
            if self._pending(i) < 4 * (5 + ndw):
                raise Hang(f"EXEC_COUNT {ndw} runs past the write pointer")
            self._set_ptr(i, "RPTR", self._ptr(i, "RPTR") + 4 * ndw)

    def _fill(self, i: int, d: list[int], vmid: int, where: tuple) -> bool:
        fill = field("CONSTANT_FILL", 0, "fillsize", d[0])
        if fill == 3:
            raise Hang("FILLSIZE 3 (8 bytes) but the packet carries one data dword")
        if d[4] >> 30:
            raise Hang(f"COUNT dword {d[4]:#010x} has bits above the 30-bit count field set")
        dst, n, elem = d[1] | d[2] << 32, d[4] + 1, 1 << fill
        if dst % elem or n % elem:
            raise Hang(f"FILLSIZE {fill} fills {elem}-byte elements but the destination {dst:#x} or the "
                       f"byte count {n} is not a multiple of {elem}")
        pattern = (d[3] & ((1 << 8 * elem) - 1)).to_bytes(elem, "little")
        return self._transfer(i, where, n, lambda at, k: self._write(i, vmid, dst + at, pattern * (k // elem),
                                                                     "fill destination"))

    def _transfer(self, i: int, where: tuple, n: int, move) -> bool:
        """Moves the n bytes of the copy or fill at `where` a slice at a time (move(offset, size)); True when
        all are moved. A slice that is not the last schedules the next one for when its transfer time is
        over (the driver's polls step the clock); a kick before then (a doorbell) moves nothing."""
        q = self.queues[i]
        done = 0
        if q.xfer is not None and q.xfer[0] == where:
            done = q.xfer[1]
            if self.dev.steps < q.xfer[2]:
                return False
        k = min(n - done, SLICE_BYTES)
        move(done, k)        # a fault that stops the engine (Hang) stops the copy here
        if done + k == n:
            q.xfer = None
            self._spend(k)
            return True
        steps = -(-k // BYTES_PER_STEP)
        q.xfer = [where, done + k, self.dev.steps + steps]
        q.gen += 1
        self.dev.schedule(steps, self._poll_retry, i, q.gen)
        return False

    def _timestamp(self, i: int, sub: int, d: list[int], vmid: int) -> bool:
        if sub == S.SDMA_SUBOP_TIMESTAMP_SET:
            return True     # the engine-local counter is not modeled separately: GET reads the global clock
        addr = d[1] | d[2] << 32
        if addr & 7:
            raise Hang(f"timestamp address {addr:#x} is not 8-byte aligned (WRITE_ADDR_31_3)")
        self._write(i, vmid, addr, struct.pack("<Q", self.now_ns() // TICK_NS), "timestamp")
        return True

    def _poll(self, i: int, d: list[int], vmid: int, where: tuple) -> bool:
        q = self.queues[i]
        func = field("POLL_REGMEM", 0, "func", d[0])
        mem, hdp = field("POLL_REGMEM", 0, "mem_poll", d[0]), field("POLL_REGMEM", 0, "hdp_flush", d[0])
        if func not in POLL_FUNCS:
            raise Hang(f"FUNC {func} is reserved (0..6 compare)")
        if mem and hdp:
            raise Hang("HDP_FLUSH with MEM_POLL: the flush request and done registers are register addresses")
        ref, mask = d[3], d[4]
        retries = field("POLL_REGMEM", 5, "retry_count", d[5])
        interval = field("POLL_REGMEM", 5, "interval", d[5])
        first = q.poll is None or q.poll[0] != where
        if first:
            q.poll = [where, 0]
            if hdp:
                self.dev.regs.write(d[2] >> 2, ref)    # the flush request; the done bits follow
        if mem:
            addr = d[1] | d[2] << 32
            if addr & 3:
                raise Hang(f"poll address {addr:#x} is not dword aligned")
            value = struct.unpack("<I", self._read(i, vmid, addr, 4, "poll"))[0]
        else:
            value = self.dev.regs.read(d[1] >> 2)
        if POLL_FUNCS[func](value & mask, ref):
            return True
        if not first:
            q.poll[1] += 1
        if retries != RETRY_FOREVER and q.poll[1] >= retries:
            raise Hang(f"no match after {retries} retries: {value:#x} & {mask:#x} vs {ref:#x} (FUNC {func})")
        q.gen += 1
        if mem or (d[1] >> 2) not in self.dev.regs.read_handlers:
            # memory, or a register that is plain storage: it changes only when something else happens, so the
            # clock may skip the retries while nothing does (SimGPU.schedule_poll)
            self.dev.schedule_poll(max(1, interval), ("SDMA", i), self._poll_retry, self._poll_skip, i, q.gen,
                                   retries, interval)
        else:
            self.dev.schedule(max(1, interval), self._poll_retry, i, q.gen)
        return False

    def _poll_retry(self, i: int, gen: int, *_) -> None:
        """A blocked poll's retry, or a copy's next slice: unless a reset or hang came since."""
        if self.queues[i].gen == gen:
            self._event_kick(i)

    def _poll_skip(self, n: int, i: int, gen: int, retries: int, interval: int):
        """What n of _poll_retry's looks do when the poll finds no match and nothing has changed since its last
        look (SimGPU.schedule_poll): each counts a retry and schedules the next; not the one that would reach
        RETRY_COUNT (it hangs the queue)."""
        q = self.queues[i]
        if q.gen != gen or q.poll is None:
            return 0, (i, gen, retries, interval)
        m = n if retries == RETRY_FOREVER else max(0, min(n, retries - 1 - q.poll[1]))
        q.poll[1] += m
        q.gen += m
        return m, (i, q.gen, retries, interval)

    def _indirect(self, i: int, d: list[int], in_ib: bool) -> bool:
        if in_ib:
            raise Hang("an IB may not contain an INDIRECT packet")
        if not self._fields(i, "QUEUE0_IB_CNTL")["IB_ENABLE"]:
            raise Hang(f"{reg(i, 'QUEUE0_IB_CNTL')}.IB_ENABLE is 0 (sdma_v6_0_gfx_resume sets it)")
        base = d[1] | d[2] << 32
        if base & 0x1F:
            raise Hang(f"IB base {base:#x} is not 32-byte aligned")
        if d[3] >> 20:
            raise Hang(f"IB_SIZE dword {d[3]:#010x} has bits above the 20-bit size field set")
        self.queues[i].ib = [base, d[3], 0, field("INDIRECT", 0, "vmid", d[0]), field("INDIRECT", 0, "priv", d[0])]
        return True


# opcode -> (name, {sub-opcode: length in dwords}) for the fixed-length packets the model executes; an
# empty dict: a real SDMA v6 packet the model does not execute (it hangs the queue, saying so).
OPS = {
    S.SDMA_OP_NOP: ("NOP", {}),               # 1 + COUNT dwords (_length)
    S.SDMA_OP_COPY: ("COPY", {S.SDMA_SUBOP_COPY_LINEAR: 7}),
    S.SDMA_OP_WRITE: ("WRITE", {}),           # WRITE LINEAR's length is in its dword 3 (_length)
    S.SDMA_OP_INDIRECT: ("INDIRECT", {0: 6}),
    S.SDMA_OP_FENCE: ("FENCE", {0: 4}),
    S.SDMA_OP_TRAP: ("TRAP", {0: 2}),
    S.SDMA_OP_SEM: ("SEM", {}),
    S.SDMA_OP_POLL_REGMEM: ("POLL_REGMEM", {0: 6}),
    S.SDMA_OP_COND_EXE: ("COND_EXE", {0: 5}),
    S.SDMA_OP_ATOMIC: ("ATOMIC", {}),
    S.SDMA_OP_CONST_FILL: ("CONSTANT_FILL", {0: 5}),
    S.SDMA_OP_PTEPDE: ("PTEPDE", {}),
    S.SDMA_OP_TIMESTAMP: ("TIMESTAMP", {S.SDMA_SUBOP_TIMESTAMP_SET: 3, S.SDMA_SUBOP_TIMESTAMP_GET: 3,
                                        S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL: 3}),
    S.SDMA_OP_SRBM_WRITE: ("SRBM_WRITE", {0: 3}),
    S.SDMA_OP_PRE_EXE: ("PRE_EXE", {}),
    S.SDMA_OP_GPUVM_INV: ("GPUVM_INV", {}),
    S.SDMA_OP_GCR_REQ: ("GCR_REQ", {0: 5}),
    S.SDMA_OP_DUMMY_TRAP: ("DUMMY_TRAP", {}),
}
