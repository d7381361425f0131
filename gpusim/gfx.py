"""GC 11.0.x at boot: the RLC autoload, the IMU, the CP's RS64 micro engines (MEC, ME, PFP), GRBM status
and soft resets. What the driver observes and programs in gfx_v11_0 hw_init with PSP front-door loading.

Facts (amdgpu/gfx_v11_0.c, imu_v11_0.c, amdgpu_psp.c, soc21.c; registers and fields from gc_11_0_0):
- psp_load_non_psp_fw sends every GFX firmware to the PSP, then AUTOLOAD_RLC ("start rlc autoload after psp
  received all the gfx firmware"); the RLC brings the engines up from there: the PSP gets one SDMA image and
  the autoload gives it to every instance. The IMU takes GFX out of reset on the way (imu_v11_0: the IMU core
  runs once GFX_IMU_CORE_CTRL.CRESET is 0, and GFX_IMU_GFX_RESET_CTRL reads 0x1f when its HARD/EA/UTCL2/SDMA/
  GRBM resets are released).
- gfx_v11_0_hw_init: "for gfx 11, rlc firmware loading relies on smu firmware is loaded firstly": an
  autoload started without the SMU firmware (LOAD_IP_FW SMU, which psp_hw_start sends first) never completes.
- gfx_v11_0_wait_for_rlc_autoload_complete polls until CP_STAT == 0 and RLC_RLCS_BOOTLOAD_STATUS.
  BOOTLOAD_COMPLETE == 1; gfx_v11_0_is_idle/wait_for_idle read GRBM_STATUS.GUI_ACTIVE; gfx_v11_0_cp_gfx_enable
  polls CP_STAT == 0 after (un)halting ME/PFP.
- gfx_v11_0_config_gfx_rs64 (PSP load with RS64 firmware; gfx_v11_0_config_mec_cache_rs64 does the same in
  the backdoor path): with soc21_grbm_select (GRBM_GFX_CNTL MEID/PIPEID) it writes each pipe's
  CP_{PFP,ME,MEC_RS64}_PRGRM_CNTR_START = ucode_start_addr_lo >> 2 | ucode_start_addr_hi << 30 and _HI =
  ucode_start_addr_hi >> 2 (gfx_firmware_header_v2_0: lo at +52, hi at +56), then pulses the pipe resets.
  Every load path programs it: a pipe starts executing there.
- gfx_v11_0_cp_compute_enable (RS64): CP_MEC_RS64_CNTL MEC_HALT, MEC_PIPE0..3_RESET, MEC_PIPE0..3_ACTIVE,
  MEC_INVALIDATE_ICACHE (set while halted). gfx_v11_0_cp_gfx_enable: CP_ME_CNTL ME_HALT/PFP_HALT.
  gfx_v11_0_config_mec_cache_rs64 etc.: CP_{MEC_DC,CPC_IC,ME_IC,PFP_IC}_OP_CNTL INVALIDATE_* then poll *_COMPLETE.
- gfx_v11_0_soft_reset: CP_VMID_RESET 0xfffffffe, GRBM_SOFT_RESET SOFT_RESET_{CP,GFX,CPF,CPC,CPG} set then
  cleared, CP_ME_CNTL = 0 and CP_MEC_RS64_CNTL = 0, then polls CP_VMID_RESET until it reads 0.
  sdma_v6_0_soft_reset pulses GRBM_SOFT_RESET.SOFT_RESET_SDMA0 << i; gfx_v11_0_rlc_reset SOFT_RESET_RLC.

Strictness: unhalting a micro engine (MEC_HALT or ME_HALT/PFP_HALT written 0) before the RLC autoload has
completed and the PSP has loaded that engine's firmware (RS64_MEC and its P0..P3 stacks; RS64_ME/PFP and
their P0/P1 stacks) is refused: the engine stays halted (the HALT bit reads back 1) and dev.errors says why.
A pipe that starts (unhalted, out of reset, active/not disabled) at a PRGRM_CNTR_START other than its
firmware's entry point hangs: it stays hung until its pipe reset, a CP soft reset or a mode1 reset, and
CP_STAT/GRBM_STATUS read busy while it is hung.

Power-on (gc_11_0_0_default.h): the IMU core in reset (GFX_IMU_CORE_CTRL 0x9), the micro engines halted with
their pipes out of reset (CP_MEC_RS64_CNTL 0x40000000, CP_ME_CNTL 0x15000000), RLC_CNTL.RLC_ENABLE_F32 1.

Simulator choices (no public fact): idle
GRBM_STATUS reads DB_CLEAN | CB_CLEAN; busy CP_STAT reads CP_BUSY and busy GRBM_STATUS adds GUI_ACTIVE |
CP_BUSY; cache operations and CP_VMID_RESET complete one and two clock steps after the write; the RLC
autoload takes AUTOLOAD_STEPS.

State for other models: `rlc_autoload_complete`, `mec_running`, `mec_pipes` (pipes executing their
firmware), `pipes_running(engine)`, `hung`, `banked(name, me, pipe)`, `set_busy(source, busy)`.
"""
from __future__ import annotations

import functools
import random
import struct
import zlib
from dataclasses import dataclass

from amdrv.autogen import psp as P
from gpusim.device import Block
from gpusim.fwcheck import fw_type_name

GC = "GC"
# Seeded latencies (clock steps, one per polled register read in the stepped mode), drawn per event from a
# generator seeded by the chip, so a run is deterministic:
# - AUTOLOAD_RLC to BOOTLOAD_COMPLETE: the RLC loads every engine. Longer than the ~30 register reads a
#   cold boot makes between AUTOLOAD_RLC and gfx_v11_0_wait_for_rlc_autoload_complete's first poll, so a
#   driver that does not wait for it fails (issue 17); the real figure is not public (assumption).
AUTOLOAD_MIN_STEPS, AUTOLOAD_STEPS = 48, 96      # drawn in [min, max]
# - MEC unhalt to its pipes serving queues: upstream waits udelay(50) after gfx_v11_0_cp_compute_enable
#   (one step is 1 us); while they start, CP_STAT/GRBM_STATUS read busy and HQD register writes to that
#   pipe are lost (assumption: the firmware initialises its queues as it starts).
MEC_START_STEPS = (25, 45)
CACHE_OP_STEPS = 1
VMID_RESET_STEPS = 2
IMU_RESETS_RELEASED = 0x1F     # GFX_IMU_GFX_RESET_CTRL: what imu_v11_0_wait_for_reset_status waits for
_START_LO, _START_HI = 52, 56  # gfx_firmware_header_v2_0.ucode_start_addr_lo/hi


@dataclass(frozen=True)
class MicroEngine:
    """One CP micro engine and the registers that run it."""
    name: str
    part: str                # firmware file part ("mec" -> gc_11_0_0_mec.bin) whose header gives the entry
    fw: tuple                # GFX_FW_TYPE_* the PSP must have loaded
    cntl: str
    halt: str
    pipes: int
    reset: str               # field name pattern, {} = pipe
    enable: str              # field pattern; the pipe runs when it reads 1 (ACTIVE) or 0 (DISABLE)
    enable_value: int
    me: int                  # GRBM_GFX_CNTL.MEID that banks its start registers
    start: str
    soft_resets: tuple       # GRBM_SOFT_RESET fields that reset it


def _types(*names: str) -> tuple:
    return tuple(getattr(P, "GFX_FW_TYPE_" + n) for n in names)


ENGINES = (
    MicroEngine("MEC", "mec", _types("RS64_MEC", "RS64_MEC_P0_STACK", "RS64_MEC_P1_STACK", "RS64_MEC_P2_STACK",
                                     "RS64_MEC_P3_STACK"),
                "CP_MEC_RS64_CNTL", "MEC_HALT", 4, "MEC_PIPE{}_RESET", "MEC_PIPE{}_ACTIVE", 1, 1,
                "CP_MEC_RS64_PRGRM_CNTR_START", ("SOFT_RESET_CP", "SOFT_RESET_CPC")),
    MicroEngine("ME", "me", _types("RS64_ME", "RS64_ME_P0_STACK", "RS64_ME_P1_STACK"),
                "CP_ME_CNTL", "ME_HALT", 2, "ME_PIPE{}_RESET", "ME_PIPE{}_DISABLE", 0, 0,
                "CP_ME_PRGRM_CNTR_START", ("SOFT_RESET_CP", "SOFT_RESET_CPG")),
    MicroEngine("PFP", "pfp", _types("RS64_PFP", "RS64_PFP_P0_STACK", "RS64_PFP_P1_STACK"),
                "CP_ME_CNTL", "PFP_HALT", 2, "PFP_PIPE{}_RESET", "PFP_PIPE{}_DISABLE", 0, 0,
                "CP_PFP_PRGRM_CNTR_START", ("SOFT_RESET_CP", "SOFT_RESET_CPF")),
)
BY_NAME = {e.name: e for e in ENGINES}

# cache-operation register -> (trigger field, completion field)
CACHE_OPS = {
    "CP_MEC_DC_OP_CNTL": ("INVALIDATE_DCACHE", "INVALIDATE_DCACHE_COMPLETE"),
    "CP_CPC_IC_OP_CNTL": ("INVALIDATE_CACHE", "INVALIDATE_CACHE_COMPLETE"),
    "CP_ME_IC_OP_CNTL": ("INVALIDATE_CACHE", "INVALIDATE_CACHE_COMPLETE"),
    "CP_PFP_IC_OP_CNTL": ("INVALIDATE_CACHE", "INVALIDATE_CACHE_COMPLETE"),
}


class GFX(Block):
    name = "GFX"

    def attach(self) -> None:
        for cntl in dict.fromkeys(e.cntl for e in ENGINES):
            self.on_write(GC, cntl, functools.partial(self._w_cntl, cntl))
        for e in ENGINES:
            for reg in (e.start, e.start + "_HI"):
                self.on_write(GC, reg, functools.partial(self._w_banked, reg))
                self.on_read(GC, reg, functools.partial(self._r_banked, reg))
        for reg in CACHE_OPS:
            self.on_write(GC, reg, functools.partial(self._w_cache_op, reg))
        self.on_read(GC, "CP_STAT", self._r_cp_stat)
        self.on_read(GC, "GRBM_STATUS", self._r_grbm_status)
        self.on_write(GC, "GRBM_SOFT_RESET", self._w_soft_reset)
        self.on_write(GC, "CP_VMID_RESET", self._w_vmid_reset)

    def reset(self) -> None:
        if not hasattr(self, "rng"):           # one stream per device: reset draws go on from where they were
            self.rng = random.Random(zlib.crc32(f"GFX {self.dev.chip}".encode()))
        self.starting: set[int] = set()        # MEC pipes whose firmware is starting (MEC_START_STEPS)
        self._start_gens: dict[int, int] = {}
        self.autoloading = False
        self.rlc_autoload_complete = False
        self.running: dict[str, set] = {e.name: set() for e in ENGINES}   # pipes executing their firmware
        self.hung: dict[str, set] = {e.name: set() for e in ENGINES}      # pipes that started at a wrong PC
        self.banks: dict[tuple, int] = {}      # (register, MEID, PIPEID) -> value
        self.busy: set[str] = set()
        self._entries: dict[str, tuple[int, int]] = {}
        # GFX_IMU_CORE_CTRL (CRESET, DRESET), CP_MEC_RS64_CNTL (MEC_HALT) and CP_ME_CNTL (ME/PFP/CE_HALT)
        # start at their power-on values (gc_11_0_0_default.h 0x9, 0x40000000, 0x15000000: the register
        # space's defaults): halted, pipes not held in reset

    # -- state for other models ----------------------------------------------------------------------
    @property
    def mec_pipes(self) -> frozenset:
        return frozenset(self.running["MEC"])

    @property
    def mec_running(self) -> bool:
        """The MEC executes its firmware on at least one pipe (compute queues can be served)."""
        return bool(self.running["MEC"])

    def pipes_running(self, engine: str) -> frozenset:
        return frozenset(self.running[engine])

    def banked(self, reg: str, me: int, pipe: int) -> int:
        """A GRBM_GFX_CNTL-banked register's value for one micro engine pipe."""
        return self.banks.get((reg, me, pipe), 0)

    def set_busy(self, source: str, busy: bool) -> None:
        """Engines report work in flight; CP_STAT and GRBM_STATUS read busy while any source is."""
        (self.busy.add if busy else self.busy.discard)(source)

    def is_busy(self) -> bool:
        return self.autoloading or bool(self.busy) or any(self.hung.values()) or bool(self.starting)

    def mec_starting(self, pipe: int) -> bool:
        """The MEC pipe was just started and its firmware does not serve queues yet (MEC_START_STEPS)."""
        return pipe in self.starting

    # -- RLC autoload (started by the PSP's AUTOLOAD_RLC) -------------------------------------------
    def start_autoload(self) -> None:
        if self.autoloading or self.rlc_autoload_complete:
            return
        self.autoloading = True
        t = self.dev.table(GC)
        self.set(GC, "GFX_IMU_CORE_CTRL", t["GFX_IMU_CORE_CTRL"].encode(self.get(GC, "GFX_IMU_CORE_CTRL"),
                                                                          CRESET=0))
        self.set(GC, "GFX_IMU_GFX_RESET_CTRL", IMU_RESETS_RELEASED)
        psp = self.dev.blocks.get("PSP")
        if psp is None or not psp.is_loaded(P.GFX_FW_TYPE_SMU):
            self.error("RLC autoload started with no SMU firmware loaded: the RLC waits for the SMU and never "
                       "completes (the CP stays busy until a mode1 reset)")
            return
        self.dev.schedule(self.rng.randint(AUTOLOAD_MIN_STEPS, AUTOLOAD_STEPS), self._autoload_done)

    def _autoload_done(self) -> None:
        self.autoloading = False
        self.rlc_autoload_complete = True
        t = self.dev.table(GC)
        self.set(GC, "RLC_CNTL", t["RLC_CNTL"].encode(self.get(GC, "RLC_CNTL"), RLC_ENABLE_F32=1))
        self.set(GC, "RLC_RLCS_BOOTLOAD_STATUS",
                 t["RLC_RLCS_BOOTLOAD_STATUS"].encode(self.get(GC, "RLC_RLCS_BOOTLOAD_STATUS"), BOOTLOAD_COMPLETE=1))

    # -- micro engines -------------------------------------------------------------------------------
    def missing(self, engine: str) -> list[str]:
        """Why an engine cannot run yet (empty when it can)."""
        e = BY_NAME[engine]
        why = [] if self.rlc_autoload_complete else ["the RLC autoload has not completed"]
        psp = self.dev.blocks.get("PSP")
        absent = [t for t in e.fw if psp is None or not psp.is_loaded(t)]
        if absent:
            why.append("the PSP has not loaded " + ", ".join(fw_type_name(t) for t in absent))
        return why

    def entry(self, engine: str) -> tuple[int, int]:
        """(PRGRM_CNTR_START, _HI) that start the engine at its firmware's ucode_start_addr."""
        e = BY_NAME[engine]
        if e.part not in self._entries:
            # the PSP's reader of the pinned files (the one the loads were checked against)
            _, data = self.dev.blocks["PSP"].firmware._file(e.part)
            lo, hi = struct.unpack_from("<II", data, _START_LO)[0], struct.unpack_from("<I", data, _START_HI)[0]
            self._entries[e.part] = ((lo >> 2 | hi << 30) & 0xFFFFFFFF, hi >> 2)
        return self._entries[e.part]

    def _soft_reset_held(self, e: MicroEngine) -> bool:
        v = self.dev.table(GC)["GRBM_SOFT_RESET"].decode(self.get(GC, "GRBM_SOFT_RESET"))
        return any(v[f] for f in e.soft_resets)

    def _w_cntl(self, cntl: str, value: int) -> int:
        reg = self.dev.table(GC)[cntl]
        old = reg.decode(self.get(GC, cntl))
        for e in ENGINES:
            if e.cntl != cntl or reg.decode(value)[e.halt] or not old[e.halt]:
                continue
            why = self.missing(e.name)
            if why:
                self.error(f"{cntl}.{e.halt} written 0 but {' and '.join(why)}: the {e.name} stays halted")
                value = reg.encode(value, **{e.halt: 1})
        for e in ENGINES:
            if e.cntl == cntl:
                self._update_pipes(e, reg.decode(value))
        return value

    def _update_pipes(self, e: MicroEngine, f: dict, restart: bool = False) -> None:
        held = self._soft_reset_held(e)
        for p in range(e.pipes):
            in_reset = held or f[e.reset.format(p)]
            runs = not (f[e.halt] or in_reset) and f[e.enable.format(p)] == e.enable_value
            if in_reset or restart:
                self.hung[e.name].discard(p)
                self.running[e.name].discard(p)
                if e.name == "MEC":
                    self.starting.discard(p)
            if restart and e.name == "MEC" and "CP" in self.dev.blocks:
                # a CP soft reset: the pipe's queues lose their state. A pipe reset or halt through
                # CP_MEC_RS64_CNTL leaves the HQDs as they are (issue 11 point 9: nothing upstream says
                # otherwise, and gfx_v11_0_hw_fini dequeues its queues before halting the MEC)
                self.dev.blocks["CP"].soft_reset(p)
            if not runs:
                self.running[e.name].discard(p)
                if e.name == "MEC":
                    self.starting.discard(p)
            elif p not in self.running[e.name] and p not in self.hung[e.name] and not (
                    e.name == "MEC" and p in self.starting):
                self._start_pipe(e, p)

    def _start_pipe(self, e: MicroEngine, p: int) -> None:
        pc = (self.banked(e.start, e.me, p), self.banked(e.start + "_HI", e.me, p))
        want = self.entry(e.name)
        if pc != want:
            self.error(f"{e.name} pipe {p} started at {e.start}/_HI {pc[0]:#x}/{pc[1]:#x}, but the firmware's "
                       f"entry point is {want[0]:#x}/{want[1]:#x} (ucode_start_addr of gc {e.part}): the pipe "
                       f"runs garbage and hangs")
            self.hung[e.name].add(p)
        elif e.name == "MEC":
            self.starting.add(p)
            gen = self._start_gens[p] = self._start_gens.get(p, 0) + 1
            self.dev.schedule(self.rng.randint(*MEC_START_STEPS), self._mec_pipe_ready, p, gen)
        else:
            self.running[e.name].add(p)

    def _mec_pipe_ready(self, p: int, gen: int) -> None:
        if p in self.starting and gen == self._start_gens.get(p):
            self.starting.discard(p)
            self.running["MEC"].add(p)     # queues with work run at the CP's next poll

    def _reevaluate(self, restart_engines=()) -> None:
        t = self.dev.table(GC)
        for e in ENGINES:
            self._update_pipes(e, t[e.cntl].decode(self.get(GC, e.cntl)), restart=e.name in restart_engines)

    # -- GRBM_GFX_CNTL banking ------------------------------------------------------------------------
    def _select(self) -> tuple[int, int]:
        f = self.dev.table(GC)["GRBM_GFX_CNTL"].decode(self.get(GC, "GRBM_GFX_CNTL"))
        return f["MEID"], f["PIPEID"]

    def _w_banked(self, reg: str, value: int) -> None:
        self.banks[(reg, *self._select())] = value

    def _r_banked(self, reg: str) -> int:
        return self.banks.get((reg, *self._select()), 0)

    # -- status ---------------------------------------------------------------------------------------
    def _r_cp_stat(self) -> int:
        return self.dev.table(GC)["CP_STAT"].encode(CP_BUSY=1) if self.is_busy() else 0

    def _r_grbm_status(self) -> int:
        reg = self.dev.table(GC)["GRBM_STATUS"]
        idle = reg.encode(DB_CLEAN=1, CB_CLEAN=1)
        return reg.encode(idle, GUI_ACTIVE=1, CP_BUSY=1) if self.is_busy() else idle

    # -- caches and resets ----------------------------------------------------------------------------
    def _w_cache_op(self, reg: str, value: int) -> int:
        r = self.dev.table(GC)[reg]
        trigger, done = CACHE_OPS[reg]
        if r.decode(value)[trigger]:
            self.dev.schedule(CACHE_OP_STEPS, functools.partial(self._cache_op_done, reg))
            return r.encode(value, **{done: 0})
        return value

    def _cache_op_done(self, reg: str) -> None:
        r = self.dev.table(GC)[reg]
        trigger, done = CACHE_OPS[reg]
        self.set(GC, reg, r.encode(self.get(GC, reg), **{trigger: 0, done: 1}))

    def _w_soft_reset(self, value: int) -> None:
        reg = self.dev.table(GC)["GRBM_SOFT_RESET"]
        rising = reg.decode(value & ~self.get(GC, "GRBM_SOFT_RESET"))
        self.set(GC, "GRBM_SOFT_RESET", value)   # engines see the new hold state below
        self._reevaluate(restart_engines={e.name for e in ENGINES if any(rising[f] for f in e.soft_resets)})
        sdma = self.dev.blocks.get("SDMA")
        for i in range(2):
            if rising[f"SOFT_RESET_SDMA{i}"] and sdma is not None:
                sdma.soft_reset(i)

    def _w_vmid_reset(self, value: int) -> None:
        if value:
            self.dev.schedule(VMID_RESET_STEPS, self._vmid_reset_done)

    def _vmid_reset_done(self) -> None:
        self.set(GC, "CP_VMID_RESET", 0)
