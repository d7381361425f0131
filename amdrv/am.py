"""The AM life cycle (docs/architecture.md): open a GPU, boot it cold or warm, and leave it clean with `fini`.

    gpu = AMGPU.open("am:sim")          # or a pcie.PCIFunction; "am" picks the first free AMD GPU
    gpu.boot_report                      # BootReport(kind="cold", reason=..., seconds, mmio_reads, ...)
    gpu.gfx.mec_ready(), gpu.sdma.ready()
    gpu.recover()                        # after a hung or faulted queue: engines reset, queues re-created
    gpu.fini()                           # engines halted, clocks low, clean-exit flag set, device closed

What the GPU was left in decides the boot:
- The boot state (a version and a clean-exit flag the NBIO block keeps in scratch registers, which
  survive a driver restart but not a reset or power cycle) says a previous AM run of this boot-state
  version ended with `fini`, and the firmware is alive (sOS running and SMU answering): warm boot. The
  boot region allocations are replayed in the same order so every block finds its rings, tables and
  firmware where the last run left them; no firmware is loaded: NBIO, the MMHUB and the IH ring are
  programmed again, the SMU gets its driver table and clocks back, GFX (MEC start, GC hub, unhalt) and
  SDMA (unhalt) start. fini leaves the VMID 0 root page directory all-invalid, so the warm boot does not
  write it again (4 KiB through BAR0: 4 000 USB round trips).
- The boot state alone does not prove that nothing ran in between: whether BIF_BX0_DRIVER_SCRATCH_* survive a
  mode1 reset is not documented, and amdgpu resets a GPU whose sOS is alive when it loads
  (soc21_need_reset_on_init -> mode1, amdgpu_device_init), then loads its own firmware and state. So fini
  also leaves a token in GC's SCRATCH_REG7 (GC is reset with the ASIC by any mode1 reset; upstream gfx_v11
  uses only SCRATCH_REG0-3, for ring tests and SR-IOV register access), and a warm boot needs it back and
  no VM fault latched (GCVM_L2_PROTECTION_FAULT_STATUS), as tinygrad's AM driver checks GC scratch and the
  fault status.
- Anything else is a cold boot: untouched GPU, one left by amdgpu, or an AM run that died (the flag is
  cleared at the start of every boot, so a crash at any point leaves it clear). If the SMU firmware
  runs, the SMU resets the whole ASIC (mode1) first: the PSP cannot load firmware over running firmware.
  Then nbio -> gmc -> ih -> psp (full firmware load, RLC autoload) -> smu (features) -> gfx -> sdma.
DRIVERLESS_COLD_BOOT=1 forces a cold boot.

Real devices are opened through pcie's sysfs or vfio provider, which refuse a function a kernel driver
(amdgpu) holds, naming the unbind command, and take the per-device lock (a second process gets
"device busy, held by pid N").
"""
from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from amdrv import device_spec, pci_state, regs
from amdrv.device import AMDevice
from amdrv.firmware import FirmwareError, FirmwareStore, files_for, parse
from amdrv.ip.base import BLOCK_ORDER, IPBlock
from amdrv.ip.gfx import GFX
from amdrv.ip.gmc import GMC
from amdrv.ip.ih import IH
from amdrv.ip.nbio import NBIO
from amdrv.ip.psp import PSP
from amdrv.ip.sdma import SDMA
from amdrv.ip.smu import SMU
from pcie import PCIFunction, open_function
from pcie.discover import SYSFS

BOOT_STATE_VERSION = 4  # bump when the boot region layout or what a warm boot relies on changes
GC_TOKEN = 0x414D0000 | BOOT_STATE_VERSION   # "AM" and the version in GC SCRATCH_REG7, written by fini
COLD_ENV = "DRIVERLESS_COLD_BOOT"


class AMError(RuntimeError):
    """A boot or life-cycle failure: names the device, the step and what to do."""


@dataclass(frozen=True)
class BootStep:
    name: str
    seconds: float
    mmio_reads: int
    mmio_writes: int
    round_trips: int = 0   # transactions that wait for an answer (pcie.AccessCounters; USB: SCSI commands)


@dataclass(frozen=True)
class BootReport:
    kind: str            # "cold" or "warm"
    reason: str          # why this kind, in words
    mode1_reset: bool    # a cold boot that reset live firmware first
    seconds: float       # wall time of the boot (open to ready)
    mmio_reads: int
    mmio_writes: int
    steps: tuple[BootStep, ...]  # per block, in boot order
    pci_reset: str = ""  # a cold boot that reset the GPU through the platform first: the method (pcie reset_methods)

    def __str__(self) -> str:
        reset = ", after a mode1 reset" if self.mode1_reset else \
            f", after a PCI reset ({self.pci_reset})" if self.pci_reset else ""
        return (f"{self.kind} boot{reset} in {self.seconds * 1e3:.0f} ms, {self.mmio_reads} MMIO reads, "
                f"{self.mmio_writes} MMIO writes ({self.reason})")


class AMGPU:
    """One booted GPU: `dev` (amdrv.device.AMDevice) and its IP blocks nbio, gmc, ih, psp, smu, gfx, sdma."""

    def __init__(self, dev: AMDevice):
        self.dev = dev
        self.boot_report: BootReport | None = None
        self.kiq = None       # amdrv.queue.KIQ: set up with the first compute queue, taken down at fini
        # every amdrv.queue ring created on this GPU (weakly: a queue nobody holds is gone), for fini and recover
        self.queues: weakref.WeakSet = weakref.WeakSet()
        self._finished = False

    @classmethod
    def open(cls, device: str | PCIFunction = "am", *, cold: bool | None = None,
             firmware: FirmwareStore | None = None, sysfs: Path = SYSFS,
             lock_dir: Path | None = None) -> AMGPU:
        """Opens and boots a GPU. device: an AM device string (see amdrv.device_spec) or an open
        pcie.PCIFunction. cold=True forces a cold boot (as DRIVERLESS_COLD_BOOT=1 does); None decides
        from the GPU's state. sysfs and lock_dir: where real devices and their lock files are."""
        t0 = time.perf_counter()
        if isinstance(device, PCIFunction):
            pci, name = device, f"am:{device.address}"
        else:
            spec = device_spec.parse(device, sysfs)
            kwargs = {} if spec.provider == "sim" else {"root": sysfs, "lock_dir": lock_dir}
            pci, name = spec.open(**kwargs), spec.text   # am:sim: its state file (device_spec)
        try:
            gpu = cls(AMDevice(name, pci, firmware))
            if cold is None:
                cold = os.environ.get(COLD_ENV, "") not in ("", "0")
            gpu.boot(force_cold=cold, t0=t0)
        except BaseException:
            pci.close()
            raise
        return gpu

    # ---------------------------------------------------------------- boot
    def _build_blocks(self) -> None:
        """The blocks built in amdgpu's order (amdrv.ip.base.BLOCK_ORDER), each running its sw_init: what
        they allocate from the boot region (GMC's root directory and default page, the IH ring, the PSP's
        ring and TMR, the SMU's driver table) lands at the same addresses on every boot. One NBIO, shared."""
        dev = self.dev
        self.nbio = NBIO(dev)
        self.gmc = GMC(dev, self.nbio)
        self.ih = IH(dev, nbio=self.nbio)
        self.psp = PSP(dev, gmc=self.gmc)   # stages firmware in DMA memory the GMC maps (GTT upstream)
        self.smu = SMU(dev)
        self.gfx = GFX(dev, self.gmc, self.nbio)
        self.sdma = SDMA(dev, self.nbio)

    @property
    def blocks(self) -> tuple[IPBlock, ...]:
        """The IP blocks in amdgpu's order (amdgpu_discovery_set_ip_blocks): boot brings them up in it,
        recover soft-resets in it, fini takes them down in reverse."""
        return tuple(getattr(self, name) for name in BLOCK_ORDER)

    def _firmware_alive(self) -> tuple[bool, bool, bool]:
        """(the PSP's sOS runs, the SMU answers, the SMU runs with a mailbox a dead driver cleared). The
        SMU's response register is 0 from power-on or a reset until its firmware, loaded by the PSP, says it
        is ready for messages, and between a driver clearing it and the firmware answering that driver's
        message (amdrv.ip.smu.SMU.mailbox_cleared)."""
        sos_word, resp = regs.read_all([self.psp.c2pmsg[81], self.smu.resp_reg])   # one batch (one USB round trip)
        sos, answers = sos_word != 0, resp != 0      # as psp.sos_alive() and the SMU's response register
        self.smu.response_seen(resp)
        return sos, answers, not answers and self.smu.mailbox_cleared()

    def _decide(self, state, force_cold: bool) -> tuple[str, str, bool, bool]:
        """(kind, reason in words, whether a cold boot must reset the GPU through the SMU first, whether
        only a reset through the platform can: the SMU runs but takes no message).

        The reset needs the SMU running; the PSP needs it only once the SMU's firmware runs, since the
        PSP cannot load it twice. A run that died after the sOS started but before the SMU firmware was
        loaded leaves the sOS alone running: the PSP load carries on from it (no bootloader, a new ring)."""
        sos, smu, cleared = self._firmware_alive()
        mm = self.dev.mm
        cold_reason = None
        if cleared:     # no SMU message may be sent (not even the GFXOFF one the GC token needs)
            why = ("the SMU firmware runs (MP1_FIRMWARE_FLAGS) but its mailbox was cleared for a message that was "
                   "never posted, so upstream sends it no message (smu_cmn_send_smc_msg_with_param) and the PSP cannot "
                   "load it again")
            if state is not None and not state.clean:
                why = "the previous AM run did not finish (no fini: it crashed or was killed); " + why
            return "cold", why, False, True     # the boot resets through the platform, or else the SMU
        if force_cold:
            cold_reason = f"forced ({COLD_ENV}=1 or cold=True)"
        elif state is None:
            cold_reason = "no AM boot state: an untouched GPU, one left by amdgpu, or reset since"
        elif state.version != BOOT_STATE_VERSION:
            cold_reason = (f"the previous AM run used boot state version {state.version}, this driver "
                           f"{BOOT_STATE_VERSION}")
        elif not state.clean:
            cold_reason = "the previous AM run did not finish (no fini: it crashed or was killed)"
        elif not (sos and smu):
            down = " and ".join(w for w, up in (("the PSP's sOS", sos), ("the SMU", smu)) if not up)
            cold_reason = f"the previous AM run ended with fini but {down} no longer runs"
        elif (token := (gc_words := self._gc_token())[0]) != GC_TOKEN:
            cold_reason = (f"GC SCRATCH_REG7 reads {token:#x}, not the {GC_TOKEN:#x} fini left: the GPU was reset "
                           f"since (another driver, such as amdgpu, ran: it resets a GPU whose firmware is alive)")
        elif fault := gc_words[1]:
            cold_reason = f"a GPU VM fault is latched (GCVM_L2_PROTECTION_FAULT_STATUS {fault:#x})"
        elif (state.boot_base, state.boot_size) != (mm.boot_base, mm.boot_end - mm.boot_base):
            cold_reason = (f"the previous AM run's boot region ({state.boot_size:#x} bytes at "
                           f"{state.boot_base:#x}) is not this boot's")
        if cold_reason is None:
            return "warm", "the previous AM run ended with fini; the PSP's sOS runs and the SMU answers", False, False
        if sos and not smu:
            cold_reason += "; the sOS runs without SMU firmware, so the PSP load carries on from it"
        return "cold", cold_reason, smu, False

    def _gc_token(self) -> tuple[int, int]:
        """GC SCRATCH_REG7 and GCVM_L2_PROTECTION_FAULT_STATUS (one batch: one USB round trip), read with GFX
        powered: fini left GFXOFF allowed (the idle floor between runs), and GC registers are not reachable
        while GFX is off, so DisallowGfxOff first (amdgpu_gfx_off_ctrl(adev, false) before GC access); the boot
        keeps GFX on from here."""
        self.smu.gfx_off(False)
        gc = self.dev.reg("GC")
        token, fault = regs.read_all([gc.SCRATCH_REG7, gc.GCVM_L2_PROTECTION_FAULT_STATUS])
        return token, fault

    def boot(self, force_cold: bool = False, t0: float | None = None) -> BootReport:
        t0 = time.perf_counter() if t0 is None else t0
        dev = self.dev
        before = dev.pci.counters.snapshot()
        try:
            self._build_blocks()
        except FirmwareError:   # GFX reads the MEC header: name every missing file, not that one alone
            dev.firmware.read_all(files_for(dev.chip))
            raise
        state = self.nbio.read_state()
        kind, reason, mode1, platform_only = self._decide(state, force_cold)
        pci_reset, no_reset = "", ""
        if platform_only or (kind == "cold" and not mode1 and state is not None and not state.clean
                             and not self.psp.sos_alive()):
            # The previous run died before the PSP's sOS ran, with no SMU firmware to reset the ASIC (mode1):
            # the bootloader may be half way through its stages (it takes them once, in order) and a TLB
            # flush may hold an MMHUB invalidation semaphore. Or it died with the SMU's mailbox cleared, which
            # takes no message. Only a reset from the platform clears them.
            methods = dev.pci.reset_methods()
            pci_reset = methods[0] if methods else ""
            if platform_only and not pci_reset:
                # No reset through the platform (a GPU behind a USB bridge). The mailbox stayed cleared for the
                # whole wait, so no message is in flight: the mode1 reset is posted on it. Upstream would send
                # nothing and leave a GPU only a power cycle recovers.
                mode1 = True
                self.smu.take_cleared_mailbox()
                reason += (f"; {dev.pci.address} offers no PCI reset, so the mode1 reset is posted on the "
                           f"cleared mailbox")
            else:
                no_reset = "" if methods else (
                    f"; the previous AM run died before the firmware ran and {dev.pci.address} offers no PCI "
                    f"reset (FLR or secondary bus reset; pcie reset_methods() is empty): if this boot fails, "
                    f"power-cycle the GPU")
                reason += f"; reset through the platform ({pci_reset})" if pci_reset else ""
        if kind == "cold":  # the PSP loads every file: one error listing all that are missing, GPU untouched
            dev.firmware.read_all(files_for(dev.chip))
        # Cleared before anything else: dying anywhere from here on makes the next boot cold.
        self.nbio.write_state(BOOT_STATE_VERSION, clean=False)
        steps: list[BootStep] = []

        def step(name, fn):
            t, c = time.perf_counter(), dev.pci.counters.snapshot()
            try:
                fn()
            except AMError as e:
                if no_reset:
                    raise AMError(f"{e}{no_reset}") from e
                raise
            except FirmwareError as e:   # a file that does not parse stays a FirmwareError, with the device named
                raise FirmwareError(f"{dev.name}: {kind} boot failed in {name}: {e}") from e
            except Exception as e:
                raise AMError(f"{dev.name}: {kind} boot failed in {name}: {e}{no_reset}") from e
            d = dev.pci.counters - c
            steps.append(BootStep(name, time.perf_counter() - t, d.mmio_reads, d.mmio_writes, d.round_trips))

        if kind == "cold":
            if mode1:
                step("mode1 reset", self._mode1_reset)
            elif pci_reset:
                step(f"pci reset ({pci_reset})", self._pci_reset)
        warm = kind == "warm"
        self.smu.recorded = state if warm else None   # what the run that left the GPU recorded (nbio)
        for block in self.blocks:   # amdgpu_device_ip_hw_init_phase1/2: every block's hw_init, in order
            if warm and not block.runs_warm:
                continue            # the PSP: its sOS runs on with the firmware it loaded
            step(block.name, lambda b=block: b.hw_init(warm))
        if kind == "warm" and dev.mm.boot_used != state.boot_used:
            raise AMError(f"{dev.name}: this warm boot's boot allocations end at {dev.mm.boot_used:#x} bytes, the "
                          f"run that left the GPU used {state.boot_used:#x}: the layout changed without a new "
                          f"am.BOOT_STATE_VERSION; boot cold ({COLD_ENV}=1)")
        self.nbio.write_state(BOOT_STATE_VERSION, clean=False)  # the whole boot region, as used now
        self._record()
        pci_state.forget(dev.pci)   # a boot completed: no reset is left half done (amdrv.pci_state)
        used = dev.pci.counters - before
        self.boot_report = BootReport(kind, reason, mode1, time.perf_counter() - t0, used.mmio_reads,
                                      used.mmio_writes, tuple(steps), pci_reset)
        return self.boot_report

    def _mode1_reset(self) -> None:
        self.smu.mode1_reset()
        # The ASIC is at power-on: fresh blocks, and the boot allocations replayed from the start.
        self.dev.mm = self.dev.new_allocator()
        self._build_blocks()
        self.nbio.write_state(BOOT_STATE_VERSION, clean=False)  # the reset cleared the scratch registers

    def _pci_reset(self) -> None:
        """amdgpu_device_pci_reset (pci_reset_function: FLR where the function has it, else a secondary bus
        reset through the port above; the kernel saves and restores the config space and waits for the
        device to answer again, pci_dev_wait). The ASIC is then at power-on, as after a mode1 reset."""
        self.dev.pci.reset()
        self.dev.mm = self.dev.new_allocator()
        self._build_blocks()
        self.nbio.write_state(BOOT_STATE_VERSION, clean=False)  # the reset cleared the scratch registers

    def _record(self) -> None:
        """What the next run may take from this one instead of asking (nbio.NBIO.record)."""
        smu = self.smu
        self.nbio.record(self.dev.disc.key64, smu.version or 0, smu.if_version or 0, smu.top_mhz)

    def firmware_versions(self) -> list[str]:
        """What runs: the ucode version of each pinned file the PSP loads (TAs are not: compute needs
        none), and the versions the PSP's sOS and the SMU report."""
        lines = []
        for name in files_for(self.dev.chip):
            img = parse(name, self.dev.firmware.read(name))
            if img.kind != "ta":
                lines.append(f"{name}: {img.kind} ucode version {img.ucode_version:#x}")
        lines.append(f"PSP sOS reports version {self.psp.c2pmsg[81].read():#x}")
        if self.smu.version is not None:
            lines.append(f"SMU firmware reports {self.smu.version_str()}, driver interface "
                         f"{self.smu.if_version:#x}")
        return lines

    # ---------------------------------------------------------------- recover
    def recover(self) -> list[str]:
        """Resets the compute engines and SDMA after a hang or fault without a reboot: every block's
        soft_reset in order (amdgpu_device_ip_soft_reset; GFX and SDMA have engines to reset), latched VM
        faults cleared, the IH ring drained; then every queue created on this GPU is set up again with an
        empty ring (pending work is lost). Returns the faults that were pending, in words. Raises the
        block's error (GFXError, SDMAError) or QueueError when an engine does not come back (boot cold)."""
        from amdrv.queue import reset_queues
        faults = [str(f) for f in map(self.gmc.fault_from_iv, self.ih.poll()) if f is not None]
        for block in self.blocks:
            block.soft_reset()
        for hub in ("GC", "MM"):
            f = self.gmc.decode_fault(hub)
            if f is not None:
                faults.append(str(f))
        self.ih.poll()
        reset_queues(self)
        return faults

    # ---------------------------------------------------------------- fini
    def fini(self) -> None:
        """Leaves the GPU idle at low clocks with GFXOFF allowed and the clean-exit flag set, so the next
        open boots warm; then closes the device (and releases its lock). Idempotent. If GFX does not go idle (a hung
        queue) or a block fails, the error propagates with the flag left clear: the next boot is cold."""
        if self._finished:
            return
        try:
            self.gfx.wait_idle()
            from amdrv.queue import fini_queues
            fini_queues(self)     # gfx_v11_0_hw_fini unmaps the compute queues before halting the MEC
            for block in reversed(self.blocks):   # amdgpu_device_ip_fini_early: hw_fini in reverse order
                block.hw_fini()
            self._record()
            self.dev.reg("GC").SCRATCH_REG7.write(GC_TOKEN)
            # The last GC access is done: GFX may power off while the GPU waits for the next run, which
            # brings the board to its idle floor (amdgpu_gfx_off_ctrl(adev, true), as late init does).
            self.smu.gfx_off(True)
            self.nbio.write_state(BOOT_STATE_VERSION, clean=True)
        finally:
            self._finished = True
            self.dev.close()

    def release(self) -> None:
        """Closes the device (and releases its lock) without fini, after a failure that fini could not get
        past: the GPU is left as it is, its clean-exit flag clear, so the next open boots cold. A failure to
        close (a dropped link) is not raised: the caller is already handling the first failure."""
        if self._finished:
            return
        self._finished = True
        try:
            self.dev.close()
        except Exception:   # the transport releases its lock in its own finally
            pass

    def __enter__(self) -> AMGPU:
        return self

    def __exit__(self, *exc) -> None:
        self.fini()
