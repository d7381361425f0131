"""GFX 11 (gfx_v11_0.c) brought up for compute, with firmware loaded by the PSP (front door).

With AMDGPU_FW_LOAD_PSP the PSP has placed every CP/RLC/IMU/MES image and started the RLC autoload;
gfx_v11_0_hw_init then:
  1. waits for the autoload: CP_STAT == 0 and RLC_RLCS_BOOTLOAD_STATUS.BOOTLOAD_COMPLETE
     (gfx_v11_0_wait_for_rlc_autoload_complete);
  2. reads GB_ADDR_CONFIG (get_gb_addr_config);
  3. points the RS64 MEC pipes at the firmware's start address and pulses their reset
     (the MEC part of gfx_v11_0_config_gfx_rs64: the PFP/ME graphics pipes are not used here), then
     enables the GC hub (gfx_v11_0_gfxhub_enable, through the GMC block);
  4. golden settings (golden_settings_gc_11_0, plus golden_settings_gc_11_0_1 on GC 11.0.1/11.0.4);
  5. constants: GRBM_CNTL.READ_TIMEOUT, SH_MEM_CONFIG/SH_MEM_BASES per VMID, no GDS/GWS/OA for
     VMIDs 1..15 (gfx_v11_0_constants_init, _init_compute_vmid, _init_gds_vmid); the GC doorbell
     routing (nbio gc_doorbell_init);
  6. RLC: the Save Restore Machine on (gfx_v11_0_rlc_resume's PSP branch); RLC_ENABLE_F32 is set by
     the autoload and set again here if it is not (gfx_v11_0_rlc_start), as the RLC must run for the CP;
  7. the MEC unhalted with its four pipes active (gfx_v11_0_cp_compute_enable).
The clear-state buffer (gfx_v11_0_init_csb) only serves the graphics ring, so it is not set up. `fini` halts
the MEC as gfx_v11_0_hw_fini does.

The block owns its queue registers; amdrv.queue keeps the rings, MQDs and the KIQ's packets and calls it:
`selected` (soc21_grbm_select under the device's GRBM lock), `kiq_setting` and `kiq_init_register`
(gfx_v11_0_kiq_setting, gfx_v11_0_kiq_init_register: the KIQ's HQD by MMIO), `hqd_dequeue`/`hqd_destroy`,
and `soft_reset` (gfx_v11_0_soft_reset's compute part, then the MEC restarted as cp_resume does).
"""
from __future__ import annotations

import contextlib
import time

from amdrv import regs
from amdrv.firmware import files_for, parse
from amdrv.ip.base import IPBlock
from amdrv.poll import USEC_TIMEOUT, poll

# gfx_v11_0.c: DEFAULT_SH_MEM_CONFIG = ADDRESS_MODE 64, ALIGNMENT_MODE UNALIGNED, INITIAL_INST_PREFETCH 3
SH_MEM_ADDRESS_MODE_64, SH_MEM_ALIGNMENT_MODE_UNALIGNED = 0, 3
# gmc_v11_0.c: the flat apertures the shaders of VMIDs 0..7 see (bits 63:48 go into SH_MEM_BASES)
SHARED_APERTURE_START, PRIVATE_APERTURE_START = 0x2000000000000000, 0x1000000000000000
# gfx_v11_0_init_compute_vmid: LDS_APP_BASE / SCRATCH_APP_BASE for the KFD (compute) VMIDs
LDS_APP_BASE, SCRATCH_APP_BASE = 0x1, 0x2
FIRST_COMPUTE_VMID, NUM_VMID = 8, 16  # amdgpu's vm_manager.first_kfd_vmid on gfx11, AMDGPU_NUM_VMID
MEC_PIPES = 4
MEC_QUEUES_PER_PIPE = 8                # gfx_v11_0: mec.num_queue_per_pipe
RESET_WAVES = 2                        # CP_HQD_DEQUEUE_REQUEST type (gfx_v11_0_soft_reset, hqd_destroy_v11)
KIQ_SCHEDULER_VALID = 0x80             # gfx_v11_0_kiq_setting: RLC_CP_SCHEDULERS |= 0x80 after the queue id
# amdgpu_doorbell.h AMDGPU_NAVI10_DOORBELL_* (64-bit doorbell units): the MEC's doorbell range
DOORBELL_KIQ, DOORBELL_MEC_RING0, DOORBELL_USERQUEUE_END = 0x000, 0x003, 0x08A
# golden_settings_gc_11_0 / _11_0_1: (register, and_mask, or_value) as soc15_program_register_sequence
GOLDEN_GC_11_0 = (("TCP_CNTL", 0x20000000, 0x20000000),)
GOLDEN_GC_11_0_1 = (
    ("CGTT_GS_NGG_CLK_CTRL", 0x9FFF8FFF, 0x00000010), ("CGTT_WD_CLK_CTRL", 0xFFFF8FFF, 0x00000010),
    ("CPF_GCR_CNTL", 0x0007FFFF, 0x0000C200), ("GL2C_CTRL3", 0xFFFF001B, 0x00F01988),
    ("PA_CL_ENHANCE", 0xF0FFFFFF, 0x00880007), ("PA_SC_ENHANCE_3", 0xFFFFFFFD, 0x00000008),
    ("PA_SC_VRS_SURFACE_CNTL_1", 0xFFF891FF, 0x55480100), ("TA_CNTL_AUX", 0xF7F7FFFF, 0x01030000),
    ("TCP_CNTL2", 0xFCFFFFFF, 0x0000000A))
AUTOLOAD_TIMEOUT_S = 0.1  # adev->usec_timeout (AMDGPU_MAX_USEC_TIMEOUT, 100 ms)
MEC_START_S = 50e-6       # gfx_v11_0_cp_compute_enable: udelay(50) after unhalting the MEC


class GFXError(RuntimeError):
    """GFX bring-up failed: names the device, the register and what was read."""


def program_golden(gc, sequence) -> None:
    """soc15_program_register_sequence: and_mask 0xffffffff writes or_value, else read-modify-write."""
    for name, and_mask, or_value in sequence:
        reg = gc.reg(name)
        if and_mask == 0xFFFFFFFF:
            reg.write(or_value)
        else:
            reg.write((reg.read() & ~and_mask) | or_value)


class GFX(IPBlock):
    """GC 11.0.x compute bring-up. `init()` is hw_init, `fini()` hw_fini; `mec_ready()` tells whether
    the MEC runs (firmware autoloaded, unhalted, pipes active and out of reset)."""

    name = "gfx"

    def __init__(self, dev, gmc, nbio):
        self.dev, self.gc, self.gmc, self.nbio = dev, dev.reg("GC"), gmc, nbio
        self.version = dev.disc.version_of("GC")
        self.sw_init()
        self.gb_addr_config = 0

    def sw_init(self) -> None:
        """The MEC firmware's start address, from its header (gfx_v11_0_init_microcode)."""
        mec = next(n for n in files_for(self.dev.chip) if n.endswith("_mec.bin"))
        hdr = parse(mec, self.dev.firmware.read(mec)).header
        self.mec_firmware = mec
        self.mec_start = (hdr["ucode_start_addr_lo"], hdr["ucode_start_addr_hi"])

    def _fail(self, what: str) -> GFXError:
        v = ".".join(map(str, self.version))
        return GFXError(f"{self.dev.name}: GFX (GC {v}): {what}")

    # ---------------------------------------------------------------- hw_init
    def hw_init(self, warm: bool = False) -> None:
        self.init(warm)

    def init(self, warm: bool = False) -> None:
        """warm: nothing reset GC since a cold boot programmed golden settings and constants (GC registers
        outlive the driver, and the driver never allows GFXOFF), so only the MEC start, the GC hub, the
        CP doorbell routing and the unhalt are done again."""
        gb = self.wait_for_rlc_autoload()
        self.gb_addr_config = self.gc.GB_ADDR_CONFIG.read() if gb is None else gb
        self.config_mec_rs64()
        self.gmc.init_gfxhub()
        if not warm:
            golden = GOLDEN_GC_11_0_1 + GOLDEN_GC_11_0 if self.version in ((11, 0, 1), (11, 0, 4)) else GOLDEN_GC_11_0
            program_golden(self.gc, golden)
            self.constants_init()
        # NBIO routing, not GC state: programmed on every boot, as every gfx_v11_0_hw_init does, so a warm
        # boot never depends on what the bus interface kept
        self.nbio.gc_doorbell_init()
        self.rlc_resume()
        self.cp_compute_enable(True)
        gc = self.gc
        # the MEC's state and GFX's busy bit as one batch (one round trip over USB); wait only if busy
        cntl, boot, status = regs.read_all([gc.CP_MEC_RS64_CNTL, gc.RLC_RLCS_BOOTLOAD_STATUS, gc.GRBM_STATUS])
        if not self.mec_ready(cntl, boot):
            raise self._fail(f"the MEC did not start: CP_MEC_RS64_CNTL reads {cntl:#010x} after unhalting it")
        if gc.GRBM_STATUS.decode(status)["GUI_ACTIVE"]:
            self.wait_idle()

    def wait_for_rlc_autoload(self, timeout_s: float = AUTOLOAD_TIMEOUT_S) -> int:
        """gfx_v11_0_wait_for_rlc_autoload_complete; returns GB_ADDR_CONFIG (get_gb_addr_config's read), read in
        each poll's batch behind the two status registers: the batch that sees the autoload complete read it
        after the completion (reads run in order), so it is the value a read after the wait would give."""
        gc = self.gc
        complete = gc.RLC_RLCS_BOOTLOAD_STATUS.defn.fields["BOOTLOAD_COMPLETE"].mask

        def read():     # one batch (one round trip over USB)
            return tuple(regs.read_all([gc.CP_STAT, gc.RLC_RLCS_BOOTLOAD_STATUS, gc.GB_ADDR_CONFIG]))

        ok, (cp_stat, status, gb_addr_config) = poll(read, lambda v: v[0] == 0 and v[1] & complete, timeout_s,
                                                     1000)
        if not ok:
            raise self._fail(f"RLC autoload did not complete: CP_STAT {cp_stat:#010x} (must be 0), "
                             f"RLC_RLCS_BOOTLOAD_STATUS {status:#010x} (BOOTLOAD_COMPLETE clear); the PSP "
                             "must have loaded every GFX firmware and run AUTOLOAD_RLC (cold boot again)")
        return gb_addr_config

    def grbm_select(self, me: int = 0, pipe: int = 0, queue: int = 0, vmid: int = 0) -> None:
        self.gc.GRBM_GFX_CNTL.write(PIPEID=pipe, MEID=me, VMID=vmid, QUEUEID=queue)

    def config_mec_rs64(self) -> None:
        lo, hi = self.mec_start
        for pipe in range(MEC_PIPES):
            self.grbm_select(me=1, pipe=pipe)
            self.gc.CP_MEC_RS64_PRGRM_CNTR_START.write(((lo >> 2) | (hi << 30)) & 0xFFFFFFFF)
            self.gc.CP_MEC_RS64_PRGRM_CNTR_START_HI.write(hi >> 2)
        self.grbm_select()
        resets = {f"MEC_PIPE{p}_RESET": 1 for p in range(MEC_PIPES)}
        cntl = self.gc.CP_MEC_RS64_CNTL
        value = cntl.update(**resets)
        cntl.write(value, **{k: 0 for k in resets})

    def constants_init(self) -> None:
        gc = self.gc
        gc.GRBM_CNTL.update(READ_TIMEOUT=0xFF)
        config = gc.SH_MEM_CONFIG.encode(ADDRESS_MODE=SH_MEM_ADDRESS_MODE_64,
                                         ALIGNMENT_MODE=SH_MEM_ALIGNMENT_MODE_UNALIGNED, INITIAL_INST_PREFETCH=3)
        bases = gc.SH_MEM_BASES.encode(PRIVATE_BASE=PRIVATE_APERTURE_START >> 48,
                                       SHARED_BASE=SHARED_APERTURE_START >> 48)
        compute_bases = gc.SH_MEM_BASES.encode(SHARED_BASE=LDS_APP_BASE, PRIVATE_BASE=SCRATCH_APP_BASE)
        for vmid in range(NUM_VMID):
            self.grbm_select(vmid=vmid)
            gc.SH_MEM_CONFIG.write(config)
            # Upstream skips VMID 0 (the kernel's VMID runs no shaders under amdgpu); this driver
            # dispatches in VMID 0, so its waves need the flat apertures too (issue 11 point 4).
            gc.SH_MEM_BASES.write(compute_bases if vmid >= FIRST_COMPUTE_VMID else bases)
        self.grbm_select()
        for vmid in range(1, NUM_VMID):  # firmware grants GDS/GWS/OA to the VMIDs that use them
            for name in (f"GDS_VMID{vmid}_BASE", f"GDS_VMID{vmid}_SIZE", f"GDS_GWS_VMID{vmid}",
                         f"GDS_OA_VMID{vmid}"):
                gc.reg(name).write(0)

    def rlc_resume(self) -> None:
        gc = self.gc
        srm, cntl = regs.read_all([gc.RLC_SRM_CNTL, gc.RLC_CNTL])     # one batch: the write below is another's
        gc.RLC_SRM_CNTL.update(srm, SRM_ENABLE=1, AUTO_INCR_ADDR=1)
        if not gc.RLC_CNTL.decode(cntl)["RLC_ENABLE_F32"]:
            gc.RLC_CNTL.update(cntl, RLC_ENABLE_F32=1)

    def cp_compute_enable(self, enable: bool) -> None:
        on, off = int(enable), int(not enable)
        fields = {"MEC_INVALIDATE_ICACHE": off, "MEC_HALT": off}
        for p in range(MEC_PIPES):
            fields[f"MEC_PIPE{p}_RESET"] = off
            fields[f"MEC_PIPE{p}_ACTIVE"] = on
        self.gc.CP_MEC_RS64_CNTL.update(**fields)
        if enable:
            self.wait_mec_start()

    def wait_mec_start(self) -> None:
        """Upstream's udelay(50) after the unhalt: the MEC's pipes are not ready at once. Waits the 50 us
        and, beyond them, until CP_STAT reads 0 (as gfx_v11_0_cp_gfx_enable does for the ME/PFP), so a
        clock that runs on register reads (the simulator) sees the time pass too."""
        t0 = time.perf_counter()
        ok, v = poll(self.gc.CP_STAT.read, lambda v: v == 0, AUTOLOAD_TIMEOUT_S, 1000)
        if not ok:
            lo, hi = self.mec_start
            raise self._fail(f"the MEC did not come up after unhalting it: CP_STAT reads {v:#010x} (its pipes "
                             f"start at the entry point of {self.mec_firmware}, ucode_start_addr_lo/hi "
                             f"{lo:#x}/{hi:#x}: a corrupt file starts them nowhere)")
        left = MEC_START_S - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)
    # ---------------------------------------------------------------- state
    def mec_ready(self, cntl: int | None = None, bootload: int | None = None) -> bool:
        """Whether the MEC runs; cntl, bootload: CP_MEC_RS64_CNTL and RLC_RLCS_BOOTLOAD_STATUS read already
        (both or neither), else both are read now, together."""
        if cntl is None:
            cntl, bootload = regs.read_all([self.gc.CP_MEC_RS64_CNTL, self.gc.RLC_RLCS_BOOTLOAD_STATUS])
        f = self.gc.CP_MEC_RS64_CNTL.decode(cntl)
        if f["MEC_HALT"] or f["MEC_INVALIDATE_ICACHE"]:
            return False
        if any(f[f"MEC_PIPE{p}_RESET"] or not f[f"MEC_PIPE{p}_ACTIVE"] for p in range(MEC_PIPES)):
            return False
        return bool(self.gc.RLC_RLCS_BOOTLOAD_STATUS.decode(bootload)["BOOTLOAD_COMPLETE"])

    def is_idle(self) -> bool:
        return not self.gc.GRBM_STATUS.decode()["GUI_ACTIVE"]

    def wait_idle(self, timeout_s: float = AUTOLOAD_TIMEOUT_S) -> None:
        gui_active = self.gc.GRBM_STATUS.defn.fields["GUI_ACTIVE"].mask
        ok, v = poll(self.gc.GRBM_STATUS.read, lambda v: not v & gui_active, timeout_s, 1000)
        if not ok:
            raise self._fail(f"GFX did not go idle: GRBM_STATUS {v:#010x} has GUI_ACTIVE set "
                             f"({timeout_s * 1e3:.0f} ms); a queue may be hung: boot cold (DRIVERLESS_COLD_BOOT=1)")

    # ---------------------------------------------------------------- queues (HQDs)
    @contextlib.contextmanager
    def selected(self, me: int, pipe: int, queue: int):
        """GRBM_GFX_CNTL selecting one queue's HQD registers, under the device's GRBM lock (amdgpu's
        srbm_mutex around soc21_grbm_select); back to ME0 pipe 0 queue 0 afterwards."""
        with self.dev.grbm_lock:
            self.grbm_select(me=me, pipe=pipe, queue=queue)
            try:
                yield self.gc
            finally:
                self.grbm_select()

    def kiq_setting(self, me: int, pipe: int, queue: int) -> None:
        """gfx_v11_0_kiq_setting: the KIQ's queue named to the RLC in RLC_CP_SCHEDULERS, then marked valid."""
        sched = self.gc.RLC_CP_SCHEDULERS.read() & 0xFFFFFF00 | me << 5 | pipe << 3 | queue
        self.gc.RLC_CP_SCHEDULERS.write(sched)
        self.gc.RLC_CP_SCHEDULERS.write(sched | KIQ_SCHEDULER_VALID)

    def kiq_init_register(self, name: str, m: dict[str, int]) -> None:
        """gfx_v11_0_kiq_init_register: the selected HQD programmed from MQD values m (a queue still active
        on it is dequeued first). `name` words the queue in errors."""
        gc = self.gc
        # CP_PQ_WPTR_POLL_CNTL (a read-modify-write) and CP_HQD_ACTIVE as one batch (one USB round trip): the
        # writes between them are to the HQD's EOP and doorbell registers, which do not change the active bit
        poll_cntl, active = regs.read_all([gc.CP_PQ_WPTR_POLL_CNTL, gc.CP_HQD_ACTIVE])
        gc.CP_PQ_WPTR_POLL_CNTL.update(poll_cntl, EN=0)
        gc.CP_HQD_EOP_BASE_ADDR.write(m["cp_hqd_eop_base_addr_lo"])
        gc.CP_HQD_EOP_BASE_ADDR_HI.write(m["cp_hqd_eop_base_addr_hi"])
        gc.CP_HQD_EOP_CONTROL.write(m["cp_hqd_eop_control"])
        gc.CP_HQD_PQ_DOORBELL_CONTROL.write(m["cp_hqd_pq_doorbell_control"])
        if active & 1:
            ok = self.hqd_dequeue(1)
            gc.CP_HQD_DEQUEUE_REQUEST.write(m["cp_hqd_dequeue_request"])
            if not ok:
                raise self._fail(f"{name}: the HQD did not dequeue (CP_HQD_ACTIVE stays 1 after "
                                 f"CP_HQD_DEQUEUE_REQUEST): the CP is stuck in it; a GFX soft reset "
                                 f"(gpu.recover()) or a cold boot (DRIVERLESS_COLD_BOOT=1) is needed")
        gc.CP_HQD_PQ_RPTR.write(m["cp_hqd_pq_rptr"])
        gc.CP_HQD_PQ_WPTR_LO.write(m["cp_hqd_pq_wptr_lo"])
        gc.CP_HQD_PQ_WPTR_HI.write(m["cp_hqd_pq_wptr_hi"])
        gc.CP_MQD_BASE_ADDR.write(m["cp_mqd_base_addr_lo"])
        gc.CP_MQD_BASE_ADDR_HI.write(m["cp_mqd_base_addr_hi"])
        gc.CP_MQD_CONTROL.write(m["cp_mqd_control"])
        gc.CP_HQD_PQ_BASE.write(m["cp_hqd_pq_base_lo"])
        gc.CP_HQD_PQ_BASE_HI.write(m["cp_hqd_pq_base_hi"])
        gc.CP_HQD_PQ_CONTROL.write(m["cp_hqd_pq_control"])
        gc.CP_HQD_PQ_RPTR_REPORT_ADDR.write(m["cp_hqd_pq_rptr_report_addr_lo"])
        gc.CP_HQD_PQ_RPTR_REPORT_ADDR_HI.write(m["cp_hqd_pq_rptr_report_addr_hi"])
        gc.CP_HQD_PQ_WPTR_POLL_ADDR.write(m["cp_hqd_pq_wptr_poll_addr_lo"])
        gc.CP_HQD_PQ_WPTR_POLL_ADDR_HI.write(m["cp_hqd_pq_wptr_poll_addr_hi"])
        gc.CP_MEC_DOORBELL_RANGE_LOWER.write((DOORBELL_KIQ * 2) << 2)
        gc.CP_MEC_DOORBELL_RANGE_UPPER.write((DOORBELL_USERQUEUE_END * 2) << 2)
        gc.CP_HQD_PQ_DOORBELL_CONTROL.write(m["cp_hqd_pq_doorbell_control"])
        gc.CP_HQD_PQ_WPTR_LO.write(m["cp_hqd_pq_wptr_lo"])
        gc.CP_HQD_PQ_WPTR_HI.write(m["cp_hqd_pq_wptr_hi"])
        gc.CP_HQD_VMID.write(m["cp_hqd_vmid"])
        gc.CP_HQD_PERSISTENT_STATE.write(m["cp_hqd_persistent_state"])
        gc.CP_HQD_ACTIVE.write(m["cp_hqd_active"])
        gc.CP_PQ_STATUS.update(DOORBELL_ENABLE=1)

    def hqd_dequeue(self, request: int) -> bool:
        """CP_HQD_DEQUEUE_REQUEST to the selected HQD; True once CP_HQD_ACTIVE clears."""
        gc = self.gc
        gc.CP_HQD_DEQUEUE_REQUEST.write(request)
        ok, _ = poll(gc.CP_HQD_ACTIVE.read, lambda v: not v & 1, USEC_TIMEOUT, 1000)
        return ok

    def hqd_destroy(self, me: int, pipe: int, queue: int, name: str) -> None:
        """amdgpu_amdkfd_gfx_v11 hqd_destroy: a queue still active on its HQD dequeued by MMIO (drain)."""
        with self.selected(me, pipe, queue) as gc:
            if gc.CP_HQD_ACTIVE.read() & 1:
                ok = self.hqd_dequeue(1)
                gc.CP_HQD_DEQUEUE_REQUEST.write(0)
                if not ok:
                    raise self._fail(f"{name}: the HQD did not dequeue at fini (CP_HQD_ACTIVE stays 1): the CP "
                                     "is stuck in it; the next boot must be cold")

    def hqd_registers(self, me: int, pipe: int, queue: int) -> dict[str, int]:
        """What an error report says of a queue's HQD: CP_HQD_ACTIVE, CP_HQD_PQ_RPTR, CP_HQD_PQ_WPTR."""
        with self.selected(me, pipe, queue) as gc:
            return {"active": gc.CP_HQD_ACTIVE.read() & 1, "rptr": gc.CP_HQD_PQ_RPTR.read(),
                    "wptr": gc.CP_HQD_PQ_WPTR_LO.read() | gc.CP_HQD_PQ_WPTR_HI.read() << 32}

    def hqd_rptr(self, me: int, pipe: int, queue: int) -> int:
        with self.selected(me, pipe, queue) as gc:
            return gc.CP_HQD_PQ_RPTR.read()

    # ---------------------------------------------------------------- soft_reset
    def soft_reset(self) -> None:
        """gfx_v11_0_soft_reset (its compute part) and the MEC restart of cp_resume: every MEC queue
        dequeued with RESET_WAVES and SPI_COMPUTE_QUEUE_RESET, CP_VMID_RESET, every queue polled inactive,
        GRBM_SOFT_RESET of CP/GFX/CPF/CPC/CPG pulsed, CP_SOFT_RESET_CNTL.CMP_HQD_REG_RESET, then the RS64
        MEC restarted as at boot. The queues (the KIQ first) are set up again by their owner."""
        gc = self.gc
        with self.dev.grbm_lock:
            for pipe in range(MEC_PIPES):
                for queue in range(MEC_QUEUES_PER_PIPE):
                    gc.GRBM_GFX_CNTL.write(PIPEID=pipe, MEID=1, QUEUEID=queue)
                    gc.CP_HQD_DEQUEUE_REQUEST.write(RESET_WAVES)
                    gc.SPI_COMPUTE_QUEUE_RESET.write(1)
            gc.GRBM_GFX_CNTL.write(0)
        gc.CP_VMID_RESET.write(0xFFFFFFFE)
        for _ in range(3):  # "to get sufficient time for GFX_HQD_ACTIVE reach 0"
            gc.CP_VMID_RESET.read()
        # "Failed to wait all pipes clean": upstream polls CP_HQD_ACTIVE for 0 before the GRBM reset (with whichever
        # queue the loops above left selected); here every MEC queue is polled, since the model keeps a queue that
        # was not dequeued active
        with self.dev.grbm_lock:
            try:
                for pipe in range(MEC_PIPES):
                    for queue in range(MEC_QUEUES_PER_PIPE):
                        gc.GRBM_GFX_CNTL.write(PIPEID=pipe, MEID=1, QUEUEID=queue)
                        ok, _ = poll(gc.CP_HQD_ACTIVE.read, lambda v: not v & 1, USEC_TIMEOUT, 1000)
                        if not ok:
                            raise self._fail(f"soft reset: ME1 pipe {pipe} queue {queue} stays active after "
                                             "CP_HQD_DEQUEUE_REQUEST (RESET_WAVES) and CP_VMID_RESET (\"Failed to "
                                             "wait all pipes clean\", gfx_v11_0_soft_reset); boot cold "
                                             "(DRIVERLESS_COLD_BOOT=1)")
            finally:
                gc.GRBM_GFX_CNTL.write(0)
        resets = dict(SOFT_RESET_CP=1, SOFT_RESET_GFX=1, SOFT_RESET_CPF=1, SOFT_RESET_CPC=1, SOFT_RESET_CPG=1)
        gc.GRBM_SOFT_RESET.update(**resets)
        gc.GRBM_SOFT_RESET.update(**{k: 0 for k in resets})
        gc.CP_SOFT_RESET_CNTL.update(CMP_HQD_REG_RESET=1)
        # Upstream writes CP_ME_CNTL = 0 here, which also unhalts the graphics ME/PFP. This driver runs
        # compute only and never gave them a start address, so keep them halted, their pipes pulsed through
        # reset; otherwise they run from address 0 and GRBM_STATUS reads busy forever.
        resets = {f"{e}_PIPE{p}_RESET": 1 for e in ("ME", "PFP") for p in (0, 1)}
        gc.CP_ME_CNTL.write(gc.CP_ME_CNTL.encode(ME_HALT=1, PFP_HALT=1, **resets))
        gc.CP_ME_CNTL.write(gc.CP_ME_CNTL.encode(ME_HALT=1, PFP_HALT=1))
        gc.CP_MEC_RS64_CNTL.write(0)
        ok, v = poll(gc.CP_VMID_RESET.read, lambda v: v == 0, USEC_TIMEOUT, 1000)
        if not ok:
            raise self._fail(f"soft reset: CP_VMID_RESET stays {v:#010x} (must clear); boot cold "
                             "(DRIVERLESS_COLD_BOOT=1)")
        self.config_mec_rs64()
        self.cp_compute_enable(True)
        if not self.mec_ready():
            raise self._fail(f"soft reset: the MEC did not restart (CP_MEC_RS64_CNTL "
                             f"{gc.CP_MEC_RS64_CNTL.read():#010x}); boot cold (DRIVERLESS_COLD_BOOT=1)")

    # ---------------------------------------------------------------- hw_fini
    def hw_fini(self) -> None:
        self.fini()

    def fini(self) -> None:
        self.cp_compute_enable(False)
