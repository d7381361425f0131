"""The project's mutation tool: how much of what the driver does does the simulator hold it to?

    python -m tools.mutate                           # everything: registers, packet fields, named steps
    python -m tools.mutate --kind regs -j 2          # register drops and corruptions only
    python -m tools.mutate --only 'reg-drop:GC.CP_HQD_PQ_BASE' 'step:*'   # by name (fnmatch patterns)
    python -m tools.mutate --list --kind packets     # the mutations, without running them
    python -m tools.mutate --json out.json           # every result, machine-readable

It runs one WORKLOAD in-process on the simulator (gpusim, through hcq.open("am:sim") on a simulated host bus
of its own, gpusim.bus.HostBus): a cold boot,
BAR0 copies, four clang-built OpenCL kernels (add, saxpy, an LDS reverse, words loaded at unaligned
addresses: SH_MEM_CONFIG's alignment mode), a kernel with generic pointers
into LDS and private memory (the SH_MEM_BASES apertures), SDMA copies (host to VRAM and back, VRAM to VRAM),
the second SDMA engine through the driver's own queue API with an indirect buffer, the timeline's value after
the copies, a host page remapped at the same VA (the TLB flush must cover it), a second compute queue of the
driver's own API taken down and set up again until the KIQ's ring has taken more than 2048 dwords (past the
power-on ring size and its own: the driver reads the rptr the CP reports), an out-of-bounds store that must fault and be reported, a CP-side fault (a signal written where nothing is
mapped), both queues hung (an unknown PM4 opcode, an SDMA wait never satisfied), recover() with a kernel
and SDMA copies after it, a kernel whose wave halts at an instruction gfx11 cannot decode (the hang report
names it from the SQ's wave state) and recover() with that wave resident, fini, a warm boot, more than a ring's worth of interrupts through the IH ring,
stores to the previous run's addresses (they must fault) and a kernel, then an exit without
fini and the cold boot behind a mode1 reset it leads to, with a kernel again, an overheat and cool-down (THM's
interrupts through the IH), fini; a fresh GPU whose cold boot dies in the PSP bootloader and the boot behind
the platform (PCI) reset that then needs, with a kernel and fini; the SMU firmware stopped after that fini
while the boot state still says clean (the next boot must be cold), with a kernel, the PSP fuzzer's frame whose
command buffer nothing maps (the PSP's read faults in the MMHUB: its default page) and fini; last, a second board whose
PSP reports no SCPM boots (the driver sends the SMU's allowed-features mask there), has an SDMA write fault
read from the IH ring through the AM driver's own API before hcq takes it, and runs a kernel; that board has
a small BAR (VRAM beyond 256 MiB through MM_INDEX/MM_DATA), and after its fini it boots warm once more. The
OUTCOME of a run is what a user of the driver can observe: per phase
the boot kind, the SMU firmware version the driver reports, what each boot that follows a run on the same GPU
cost as the GPU saw it (BootCost:
the SMU messages its mailbox answered, by name and count, the VBIOS ROM dwords read, the discovery bytes read
from VRAM: what the boot records exist to spare, a slower boot over USB), the hashes of the output buffers,
the exceptions raised (type and message with the numbers taken out), and whether the fault was reported. A mutation is CAUGHT when the outcome differs from the
unmutated baseline (an error, wrong data, a fault not reported, a boot of another kind, or a hang: no
outcome within --timeout seconds), SURVIVED when it is the same. The simulator's own error log
(gpusim's dev.errors) is not part of the outcome (no driver can read it), but new entries are shown next
to a surviving mutation: the model noticed and let it pass. Survivors are further marked EXPECTED (the
card would let them pass in this workload too, with the reason; a register drop also when every write the
baseline made to it is its published power-on value, gc_11_0_0_default.h) or CAUGHT_BY_TESTS (the simulator enforces
them and a named test shows it, in a case the workload does not reach; still counted as survivors).

Mutations:
- Registers (--kind regs): every register the driver writes during the baseline, named through the
  generated tables at the bases the simulated IP discovery declares. Host-originated writes only: BAR5
  `write32` (gpusim.provider.RegisterBAR), and the writes through the index/data pairs resolved to their
  target (BIF_BX_PF0_MM_INDEX/MM_DATA in register mode, BIF_BX_PF0_RSMU_INDEX/DATA,
  BIF_BX0_PCIE_INDEX2/DATA2). For each register: `reg-drop:` drops every host write to it, `reg-flip:`
  writes each value with all 32 bits inverted. Left out, as issue 11 counts: the address-range registers
  of invalidation engines 0-16 (the driver invalidates with engine 17 only) and the GDS/GWS/OA registers
  of VMIDs 1-15 (nothing the driver runs uses them). Counted apart by the same words, still mutated (APART:
  the summary gives the drop figure with and without them): the identity aperture of contexts 1-15, and
  CP_VMID_RESET and CP_ME_CNTL while what the driver writes concerns VMIDs 1-15 / the graphics ME alone.
- Packet fields (--kind packets): interception at the ring write, `amdrv.queue._Queue.submit`, the one
  place every PM4 and SDMA dword the driver emits passes (hcq's queues, the driver's own): the submitted
  dwords are split into packets (PM4 type-3 headers; SDMA headers by opcode) and each (engine, packet,
  dword) seen in the baseline becomes `pkt-zero:` (that dword 0 in every such packet) and `pkt-flip:`
  (all its bits inverted). SET_SH_REG values are keyed by the register they set, RELEASE_MEM by its
  DATA_SEL form, POLL_REGMEM by its HDP-flush form; NOP packets are left alone. Chosen over wrapping the
  builders in amdrv.pm4/sdma_packets because hcq copies prebuilt templates and patches them after the
  builder ran: only the ring sees the final dwords. What indirect buffers hold is not parsed (it never
  passes the ring): the workload's SDMA INDIRECT packets are mutated, the copies in their IBs are not.
- Named steps (--kind steps): the STEPS table below, one small monkeypatch of the driver each (skip a
  flush, a wait, a message, a reset; rewrite one packet bit). Add an entry to extend it; an entry whose
  target the driver no longer has is reported "n/a" instead of failing the run. The `step:usb-*` ones are
  driver steps that exist only behind the USB bridge: their runs add two USB phases at the end (the
  small-BAR board behind the stock UAS firmware, the first board behind the open one: open, a copy in, one
  kernel, a copy out, on the open firmware 1 MiB in and out, close) and are judged against a baseline of
  their own (two more runs, made only when such a step is selected); the other runs skip those phases.

Each mutation runs in a forked child (os.fork after the kernels are built and everything is imported)
with a fresh simulated GPU, -j workers at a time (default 2), results in a fixed order. Two baseline runs
come first; they must agree (the simulator is stepped and seeded, so the outcome is deterministic), and
the figure printed at the end is "registers caught X of Y (Z%)" over register drops. Firmware comes from
/lib/firmware/amdgpu (DRIVERLESS_TEST_FIRMWARE overrides) with a temporary cache, DRIVERLESS_OFFLINE=1,
as the tests run. docs/fidelity.md ("Mutation figures") has the last full run.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import hashlib
import json
import os
import pickle
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
KERNEL_DIR = ROOT / "tests" / "rdna3" / "kernels"     # the project's OpenCL corpus (and common.h)
FAULT_KERNELS = ROOT / "tests" / "hcq" / "kernels" / "faults.cl"
UNALIGNED_KERNELS = ROOT / "tests" / "hcq" / "kernels" / "unaligned.cl"    # SH_MEM_CONFIG.ALIGNMENT_MODE
KERNELS = ("add_f32", "saxpy", "local_reverse", "generic_lds_private")
CLANG = ["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-nogpulib",
         "-O2", "-c"]
DEFAULT_TIMEOUT = 30.0     # seconds per mutated run; longer is a hang (caught)
KERNEL_TIMEOUT = 2.0       # hcq waits inside the workload
N = 256                    # work-items per kernel (one workgroup)
SLOT = 0                   # the slot of the workload's own simulated bus (Workload.bus) its GPU sits in
SLOT_NO_SCPM = 1           # the second board (no SCPM) of the last phase, on the same bus
IDLE_STEPS = 2_000_000     # 2 s of simulated idle (1 us steps): GFX activity averaged over 0.25 s decays to ~0
BAD = (1 << 44) - (1 << 30)   # below the VRAM window: mapped by nothing
UNHOOKED = [False]         # set by the workload around submissions whose packets are not to be mutated

# left out of the register count, as issue 11 counts (see the module docstring)
EXCLUDE = (re.compile(r"(GC|MM)VM_INVALIDATE_ENG([0-9]|1[0-6])_ADDR_RANGE_(LO|HI)32$"),
           re.compile(r"GDS_(VMID([1-9]|1[0-5])_(BASE|SIZE)|GWS_VMID([1-9]|1[0-5])|OA_VMID([1-9]|1[0-5]))$"))
# Counted apart by the same words ("leaving out engines and VMIDs it never uses"), but still mutated, run and
# reported: the summary prints the drop figure both with and without them (summary(); apart_reason()).
APART = (
    (re.compile(r"(GC|MM)VM_L2_CONTEXT1_IDENTITY_APERTURE_(LOW|HIGH)_ADDR_(LO|HI)32$"),
     "the identity aperture of contexts 1-15 (the CONTEXT1 registers program VMIDs 1-15, as GCVM_CONTEXT1_CNTL + i "
     "in gfxhub_v3_0_setup_vmid_config; GCVM_L2_CNTL.CONTEXT1_IDENTITY_ACCESS_MODE; gfxhub_v3_0/mmhub_v3_0_"
     "disable_identity_aperture): the driver runs everything in VMID 0"),
    (re.compile(r"(GC|MM)VM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_(LO|HI)32$"),
     "the physical offset of that contexts 1-15 identity aperture (written beside it by *_disable_identity_"
     "aperture; no context 0 identity aperture exists in gc_11_0_0_sh_mask.h): the driver runs in VMID 0"),
    (re.compile(r"CP_VMID_RESET$"),
     "every value the driver writes requests VMIDs 1-15 alone (RESET_REQUEST bit 0, VMID 0, clear: "
     "gfx_v11_0_soft_reset's 0xfffffffe), and the driver runs in VMID 0"),
    (re.compile(r"CP_ME_CNTL$"),
     "every field concerns the graphics CE/PFP/ME (gc_11_0_0_sh_mask.h: no MEC field), engines this driver "
     "never runs"),
)


def apart_reason(name: str, values=None) -> str | None:
    """Why a written register (its name without the IP) is counted apart (APART), or None. values: what the
    baseline wrote to it (None where an old --json did not record them: the name decides); CP_VMID_RESET is
    apart only while every value leaves VMID 0 out and asks for some VMID; CP_ME_CNTL only while the generated
    table gives it no field outside CE/PFP/ME."""
    why = next((w for p, w in APART if p.match(name)), None)
    if why is None:
        return None
    if name == "CP_VMID_RESET" and values is not None and not all(v & 0xFFFF and not v & 1 for v in values):
        return None
    if name == "CP_ME_CNTL":
        from amdrv import regs as R
        from gpusim import discovery
        fields = R.load(discovery.layout("navi31").register_table("GC"))["CP_ME_CNTL"].fields
        if not all(f.startswith(("CE_", "PFP_", "ME_")) for f in fields):
            return None
    return why


# ====================================================================== environment and kernels
def setup_env(tmp: Path) -> None:
    """What tests/conftest.py gives every test: the real firmware, a private cache, no network."""
    fw = Path(os.environ.get("DRIVERLESS_TEST_FIRMWARE", "/lib/firmware/amdgpu"))
    if not (fw / "gc_11_0_0_mec.bin").is_file():
        raise SystemExit(f"mutate: real firmware not found in {fw} (Debian firmware-amd-graphics; "
                         "DRIVERLESS_TEST_FIRMWARE=<linux-firmware amdgpu dir> overrides)")
    os.environ["DRIVERLESS_FIRMWARE_DIR"] = str(fw)
    os.environ["DRIVERLESS_CACHE"] = str(tmp / "cache")
    os.environ["DRIVERLESS_LOCK_DIR"] = str(tmp / "locks")
    os.environ["DRIVERLESS_OFFLINE"] = "1"
    for k in ("DRIVERLESS_FIRMWARE_URL", "DRIVERLESS_COLD_BOOT"):
        os.environ.pop(k, None)
    (tmp / "locks").mkdir(exist_ok=True)


def build_kernels(tmp: Path) -> dict[str, bytes]:
    """{name: linked code object}: the corpus kernels and the faulting one, through clang-15/ld.lld-15."""
    if not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        raise SystemExit("mutate: clang-15 and ld.lld-15 are needed (make test installs them)")
    out = {}
    for src in [KERNEL_DIR / f"{k}.cl" for k in KERNELS] + [FAULT_KERNELS, UNALIGNED_KERNELS]:
        obj, so = tmp / f"{src.stem}.o", tmp / f"{src.stem}.so"
        for cmd in (CLANG + ["-I", str(KERNEL_DIR), str(src), "-o", str(obj)],
                    ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(f"mutate: {' '.join(cmd)} failed:\n{r.stderr}")
        out[src.stem] = so.read_bytes()
    return out


# ====================================================================== the workload
_NUM = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")


def norm(msg: str) -> str:
    """An error message with its numbers taken out: the class of the error, not this run's pointers."""
    return _NUM.sub("#", str(msg))[:240]


def _h(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()[:16]


class BootCost:
    """What the simulated GPU itself sees a boot cost, as a bus analyser would (counted on the simulator's side,
    never from what the driver says of itself): the messages its SMU mailbox answered (gpusim.smu.SMU._handle),
    the VBIOS ROM dwords read through SMUIO ROM_DATA (gpusim.vbios.VBIOS._r_data) and the IP discovery bytes
    the host read from VRAM (gpusim.device.VRAM.host_read in [VRAM size - 64 KiB, + 4 KiB): BAR0 and MM_DATA
    reads; a large BAR's direct mapping is not seen, and the driver reads the binary whole there anyway). The
    boot records (nbio.RECORD_REGS, DRIVER_SCRATCH_5) exist to spare exactly these on the next open: a lost
    record is a warm boot that asks again, which over USB is round trips a user waits for. No register
    counts and no timing: every dropped write changes those."""

    def __init__(self):
        self.messages: dict[str, int] = {}
        self.rom_dwords = self.discovery_bytes = 0

    def install(self) -> None:
        from amdrv.discovery import DISCOVERY_TMR_OFFSET, DISCOVERY_TMR_SIZE
        from gpusim import device, smu, vbios
        cost = self
        handle, r_data, host_read = smu.SMU._handle, vbios.VBIOS._r_data, device.VRAM.host_read

        def counted_handle(model, msg, p):
            name = smu._MSG_NAMES.get(msg, f"message {msg:#x}").removeprefix("PPSMC_MSG_")
            cost.messages[name] = cost.messages.get(name, 0) + 1
            return handle(model, msg, p)

        def counted_r_data(model):
            cost.rom_dwords += 1
            return r_data(model)

        def counted_host_read(vram, addr, n):
            lo = vram.size - DISCOVERY_TMR_OFFSET
            cost.discovery_bytes += max(0, min(addr + n, lo + DISCOVERY_TMR_SIZE) - max(addr, lo))
            return host_read(vram, addr, n)

        smu.SMU._handle, vbios.VBIOS._r_data = counted_handle, counted_r_data
        device.VRAM.host_read = counted_host_read

    def start(self) -> None:
        self.__init__()

    def __str__(self) -> str:
        msgs = ", ".join(f"{k} x{n}" for k, n in sorted(self.messages.items()))
        return (f"boot cost seen by the GPU: SMU messages {msgs or 'none'}; {self.rom_dwords} ROM dwords; "
                f"{self.discovery_bytes} discovery bytes")


COST = BootCost()   # the child's, installed by child_run


class Killed(BaseException):
    """The driver's process ends here (a BaseException: no except clause of the driver handles it)."""


class Workload:
    """Runs the phases in order into `outcome` ([phase, what] pairs); stops at the first unexpected error."""

    def __init__(self, kernels: dict[str, bytes], usb: bool = False):
        self.k = kernels
        self.usb = usb      # the USB phases too (run for the step:usb-* mutations only: usb_phases())
        self.outcome: list[list[str]] = []
        self.dev = None
        # A simulated host bus of the run's own (gpusim.bus.HostBus, as the tests' sim_bus fixture): its GPUs
        # are this workload's alone, whatever else the process opened on the default bus.
        from gpusim.bus import HostBus
        self.bus = HostBus()

    def note(self, phase: str, what: str) -> None:
        self.outcome.append([phase, what])

    def run(self) -> list[list[str]]:
        import numpy as np
        self.np = np
        self.rng = np.random.default_rng(11)
        phases = [("cold boot", self.cold_boot), ("bar0 copies and kernels", self.kernels),
                  ("generic pointers", self.generic), ("sdma copies", self.sdma),
                  ("sdma1 with an indirect buffer", self.sdma1),
                  ("remap at the same va", self.remap), ("a queue re-created many times", self.requeue),
                  ("fault", self.fault), ("cp fault", self.cp_fault), ("hang", self.hang), ("recover", self.recover),
                  ("sdma after recover", self.sdma), ("halted wave", self.halted_wave),
                  ("recover after halted wave", self.recover), ("fini", self.fini), ("warm boot", self.warm_boot),
                  ("ih ring wrap", self.ih_wrap), ("old addresses after warm boot", self.old_addresses),
                  ("warm kernel", self.one_kernel),
                  ("exit without fini", self.unclean), ("mode1 boot", self.mode1_boot),
                  ("mode1 kernel", self.one_kernel), ("thermal alert", self.thermal_alert), ("gfxoff", self.gfxoff),
                  ("final fini", self.fini), ("death in the bootloader", self.death_in_bootloader),
                  ("pci reset boot", self.pci_reset_boot), ("pci reset kernel", self.one_kernel),
                  ("pci reset fini", self.fini), ("firmware stopped boot", self.firmware_stopped_boot),
                  ("firmware stopped kernel", self.one_kernel),
                  ("psp fuzzer's unmapped command buffer", self.psp_unmapped_command),
                  ("firmware stopped fini", self.fini),
                  ("board without scpm", self.no_scpm), ("small bar warm boot", self.small_bar_warm_boot)]
        if self.usb:
            phases += [("usb stock firmware", functools.partial(self.usb_phase, firmware="stock")),
                       ("usb open firmware", functools.partial(self.usb_phase, firmware="open"))]
        for name, fn in phases:
            try:
                fn(name)
            except BaseException as e:   # noqa: BLE001 - everything the driver raises is an outcome
                if isinstance(e, KeyboardInterrupt):
                    raise
                tb, sim = e.__traceback__, False
                while tb is not None:   # an exception that passed through simulator code: labelled as such
                    sim = sim or f"{os.sep}gpusim{os.sep}" in tb.tb_frame.f_code.co_filename
                    tb = tb.tb_next
                where = " (raised inside the simulator)" if sim else ""
                self.note(name, f"error {type(e).__name__}{where}: {norm(e)}")
                break
        return self.outcome

    # ------------------------------------------------------------ phases
    def _open(self, phase: str, **kw) -> None:
        import hcq
        COST.start()
        self.dev = hcq.open("am:sim", bus=self.bus, slot=SLOT, **kw)
        self.dev.default_timeout = KERNEL_TIMEOUT
        self._booted(phase, self.dev.gpu, cost=not kw.get("fresh"))

    def _booted(self, phase: str, gpu, cost: bool) -> None:
        """What a user sees of a boot: its kind, the SMU's enabled features, the SMU firmware version the driver
        reports (AMGPU.firmware_versions, `python -m amdrv info`: a warm boot takes it from the boot records),
        and, for a boot that follows a run on the same GPU (cost=True), what it cost as the GPU saw it (BootCost,
        counted since COST.start()): what that run's records exist to spare. A fresh board's first boot has
        no records to go by, so its cost is left out: a driver that skips a read there (the VBIOS, say) boots
        faster, which a user cannot tell from right (step:vbios-reserved-ignored is judged by its own test)."""
        r = gpu.boot_report
        self.note(phase, f"{r.kind} boot{' after mode1 reset' if r.mode1_reset else ''}, "
                         f"SMU features {gpu.smu.enabled_features():#x}")
        self.note(phase, f"SMU firmware reports {gpu.smu.version_str()}, driver interface {gpu.smu.if_version:#x}")
        if cost:
            self.note(phase, str(COST))

    def cold_boot(self, phase: str) -> None:
        self._open(phase, fresh=True)

    def _f32(self, a):
        b = self.dev.alloc(a.nbytes)
        self.dev.copyin(b, a)
        return b

    def kernels(self, phase: str) -> None:
        np, dev = self.np, self.dev
        a, b = self.rng.random(N, np.float32), self.rng.random(N, np.float32)
        ba, bb, out = self._f32(a), self._f32(b), dev.alloc(4 * N)
        add = dev.program(self.k["add_f32"], "add_f32")
        t = add(out, ba, bb, N, global_size=(1,), local_size=(N,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "add " + _h(dev.copyout(out)))
        # its time from the GPU clock stamps the queue wrote around it (RELEASE_MEM DATA_SEL GPU_CLOCK)
        self.note(phase, "add took " + ("some time" if 0 < t < 1 else f"{t!r} s"))
        saxpy = dev.program(self.k["saxpy"], "saxpy")
        saxpy(out, ba, 3.0, N, global_size=(2,), local_size=(N // 2,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "saxpy " + _h(dev.copyout(out)))
        # into a 4 MiB buffer, 3 MiB in: mapped with 2 MiB pages (PDB0 entries) when it lands aligned
        big = dev.alloc(4 << 20)
        at = big.view(3 << 20, 4 * N)
        rev = dev.program(self.k["local_reverse"], "local_reverse")
        rev(at, bb, N, global_size=(1,), local_size=(N,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "local_reverse " + _h(dev.copyout(at)))
        # words loaded at byte offset 1: the bytes there under SH_MEM_CONFIG's UNALIGNED mode, the aligned
        # word below under the power-on DWORD mode (tests/hcq/test_am_sh_mem.py)
        src, words = self._f32(self.rng.integers(0, 256, 4 * N + 8, dtype=np.uint8)), dev.alloc(4 * N)
        una = dev.program(self.k["unaligned"], "unaligned_words")
        una(words, src, 1, global_size=(1,), local_size=(N,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "unaligned_words " + _h(dev.copyout(words)))
        # Addresses the warm boot's run must find unmapped (old_addresses): the end of a 64 MiB buffer, and
        # host memory mapped under a root-directory entry of its own (512 GiB apart) that the next run never
        # rewrites, so only gmc fini's cleared root keeps it from translating (tests/hcq/test_am_faults.py).
        old = dev.alloc(64 << 20)
        far = dev.gpu.gmc.map_system(dev.gpu.dev.pci.alloc_dma(4096), align=1 << 39)
        self.old_vas = (old.va + (64 << 20) - 4096, far.va)
        poke = self.poke = dev.program(self.k["faults"], "poke")
        for i, va in enumerate(self.old_vas):
            poke(va, 1 + i, global_size=(1,), local_size=(1,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "pokes done")

    def generic(self, phase: str) -> None:
        """generic_lds_private: flat loads through the LDS and the private aperture (SH_MEM_BASES of the
        dispatching VMID; tests/gpusim/test_cp.py), its private memory in the scratch buffer hcq sets up
        (amdrv/hcq/scratch.py: COMPUTE_TMPRING_SIZE and COMPUTE_DISPATCH_SCRATCH_BASE in the launch)."""
        np, dev = self.np, self.dev
        n = 64
        a = self.rng.integers(-1000, 1000, n).astype(np.int32)
        ba, out = self._f32(a), dev.alloc(4 * n)
        prog = dev.program(self.k["generic_lds_private"], "generic_lds_private")
        prog(out, ba, n, global_size=(1,), local_size=(n,), wait=True, timeout=KERNEL_TIMEOUT)
        got = np.frombuffer(dev.copyout(out), np.int32)
        i = np.arange(n)
        want = np.where(a & 1, a[(i + 1) % n] * 3, a[(i + (a & 15)) % n] + (a & 15))
        self.note(phase, f"generic_lds_private {'right' if np.array_equal(got, want) else 'wrong'} " + _h(got))

    def sdma(self, phase: str) -> None:
        np, dev = self.np, self.dev
        direct, dev.direct_max = dev.direct_max, 0    # copyin/copyout through SDMA and host memory
        try:
            # Every copy goes through the one staging buffer: each read-back follows a transfer of other
            # data, so a copy that moved nothing (or too little) cannot pass on what the staging held.
            d1, d2 = (self.rng.integers(0, 256, 20000, dtype=np.uint8).tobytes() for _ in range(2))
            x, y, z = dev.alloc(20480), dev.alloc(20480), dev.alloc(20480)
            dev.copyin(x, d1, offset=5)
            dev.copyin(z, d2)
            self.note(phase, "copyout " + _h(dev.copyout(x, len(d1), 5)))
            dev.copy(y.view(3), x.view(5, len(d1)))
            dev.synchronize()
            self.note(phase, "other " + _h(dev.copyout(z, len(d2))))
            self.note(phase, "copy " + _h(dev.copyout(y, len(d1), 3)))
            # what the copies' fences left in the timeline: the value last signalled (a user may read it)
            self.note(phase, "timeline " + ("at the last value signalled" if dev.timeline.value == dev.timeline_value
                                            else "elsewhere"))
        finally:
            dev.direct_max = direct

    def sdma1(self, phase: str) -> None:
        """The second SDMA engine through the driver's own queue API (amdrv.queue.SDMAQueue(gpu, engine=1):
        sdma_v6_0_gfx_resume for instance 1; hcq uses engine 0 only): a copy run from an indirect buffer
        (sdma_v6_0_ring_emit_ib; the ring's IB_CNTL.IB_ENABLE must be set) host to VRAM, one from the ring
        back, and a fence (tests/amdrv/test_queue.py)."""
        np, gpu = self.np, self.dev.gpu
        from amdrv import sdma_packets as S
        from amdrv.queue import Fence, HostBuffer, SDMAQueue
        q = SDMAQueue(gpu, engine=1, ring_size=4096)
        host, vram = HostBuffer(gpu, 5 * 4096), self.dev.alloc(8192)
        self.kept = [q, host]     # alive until the run ends: recover() and fini act on the queue deterministically
        data = self.rng.integers(0, 256, 6000, dtype=np.uint8).tobytes()
        host.view[4096:4096 + len(data)] = data
        ib = S.SDMABuilder()
        ib.copy(vram.va + 8, host.va + 4096, len(data))
        ib.nop((-len(ib)) % 8)
        host.view[0:4 * len(ib)] = ib.buf.tobytes()
        done = Fence(host, 5 * 4096 - 8)
        b = S.SDMABuilder()
        b.nop((2 - q.wptr) & 7)           # the INDIRECT packet ends on an 8-dword boundary (sdma_v6_0_ring_emit_ib)
        b.indirect(host.va, len(ib))
        b.copy(host.va + 3 * 4096 + 4, vram.va + 8, len(data))
        b.fence(done.va, 7)
        q.submit(b.buf)
        try:
            q.wait(done, 7, timeout_s=0.5, min_reads=300)
        except Exception as e:  # noqa: BLE001 - the queue's own error is the outcome
            self.note(phase, f"error {type(e).__name__}: {norm(e)}")
            return
        got = bytes(host.view[3 * 4096 + 4:3 * 4096 + 4 + len(data)])
        self.note(phase, f"fence {done.value}, data {'right' if got == data else 'wrong ' + _h(got)}")

    def remap(self, phase: str) -> None:
        """A host page unmapped and another mapped at the same VA (the VA allocator is first-fit), a store
        through each: the TLB flush after the unmap must cover the VA (engine 17's ADDR_RANGE,
        gfxhub_v3_0_program_invalidation), or the second store lands in the first page
        (tests/amdrv/test_gmc.py)."""
        gmc, pci = self.dev.gpu.gmc, self.dev.gpu.dev.pci
        pages = [pci.alloc_dma(4096), pci.alloc_dma(4096)]
        vas = []
        for i, page in enumerate(pages):
            m = gmc.map_system(page)
            vas.append(m.va)
            self.poke(m.va, 21 + i, global_size=(1,), local_size=(1,), wait=True, timeout=KERNEL_TIMEOUT)
            gmc.unmap(m)
        words = [struct.unpack_from("<I", page.view, 0)[0] for page in pages]
        self.note(phase, f"{'same' if vas[0] == vas[1] else 'another'} va, pages hold {words}")

    def fault(self, phase: str) -> None:
        import hcq
        poke, bad, dev = self.poke, BAD, self.dev
        try:
            poke(bad, 5, global_size=(1,), local_size=(1,), wait=True, timeout=KERNEL_TIMEOUT)
        except hcq.HCQFault as e:
            # whether the faulting launch still completed (its fence signalled: the fault answered with
            # the default page, as the driver programs it) or its queue stopped
            done = dev.timeline.value >= dev.timeline_value
            self.note(phase, f"fault reported: {norm(e).split(';')[0]}; "
                             f"{'the launch completed' if done else 'the launch did not complete'}")
            return
        except hcq.HCQTimeout as e:
            self.note(phase, f"no fault reported, a timeout: {norm(e)}")
            return
        self.note(phase, "no fault reported: the store completed")

    def _fault_or_timeout(self, phase: str, fn) -> None:
        import hcq
        try:
            fn()
        except hcq.HCQFault as e:
            self.note(phase, f"fault reported: {norm(e).split(';')[0]}; "
                             f"{'completed' if 'completed' in str(e) else 'stopped'}")
            return
        except hcq.HCQTimeout as e:
            self.note(phase, f"timeout: {norm(e)}")
            return
        self.note(phase, "no fault reported")

    def cp_fault(self, phase: str) -> None:
        """The CP's own write faulting (a signal where nothing is mapped): with CP_DEBUG's no-halt bit the
        write goes to the default page and the queue goes on (tests/hcq/test_am_faults.py)."""
        from hcq.api import Signal
        dev = self.dev
        bad = Signal(dev, BAD + 64, memoryview(bytearray(16)).cast("Q"))
        done = dev.new_signal(0)
        q = dev.compute_queue()
        q.signal(bad, 1)
        q.signal(done, 1)
        q.submit()
        self._fault_or_timeout(phase, lambda: done.wait(1, timeout=KERNEL_TIMEOUT))
        self.note(phase, f"signal after it {done.value}")

    def hang(self, phase: str) -> None:
        """Both queues hung before recover(): a PM4 packet the CP does not know (test_queue.py's
        test_recover_needs_the_grbm_soft_reset_of_the_cp) and an SDMA wait for a value never written."""
        from amdrv import pm4
        dev = self.dev
        never, done, sdone = dev.new_signal(0), dev.new_signal(0), dev.new_signal(0)
        q = dev.compute_queue()
        q.buf.extend((pm4.header(0x01, 0), 0))          # no such packet: the queue hangs
        q.signal(done, 1)
        c = dev.copy_queue()
        c.wait(never, 1)
        c.signal(sdone, 1)
        # These two submissions hang on purpose: mutating their packets would say nothing about the driver,
        # so the hooks pass them through unrecorded and unmutated.
        UNHOOKED[0] = True
        try:
            q.submit()
            c.submit()
        finally:
            UNHOOKED[0] = False
        self._fault_or_timeout(phase, lambda: done.wait(1, timeout=0.05))
        self.note(phase, f"signals {done.value} {sdone.value}")

    def requeue(self, phase: str) -> None:
        """A compute queue of the driver's own API (amdrv.queue.ComputeQueue, a second one beside hcq's) taken
        down and set up again until the KIQ's ring has taken more than 2048 dwords since the boot (each time
        UNMAP_QUEUES, then MAP_QUEUES, each with the SCRATCH_REG0 write the driver polls for; amdgpu_gfx_
        enable_kcq/disable_kcq), then a fence through it: the CP wraps the KIQ's ring where its
        CP_HQD_PQ_CONTROL.QUEUE_SIZE says (gfx_v11_0_kiq_init_register; the power-on 9 is 1024 dwords), so a
        KIQ whose size was not programmed reads its first packets again; and once the driver's 2048-dword ring
        may be full it reads the rptr the CP reports (CP_HQD_PQ_RPTR_REPORT_ADDR, unless NO_UPDATE_RPTR), so a
        KIQ with no report waits for room that never shows (tests/amdrv/test_queue.py). About 90 set-ups."""
        from amdrv import pm4
        from amdrv.queue import KIQ_RING_SIZE, ComputeQueue, Fence, HostBuffer, KIQ
        gpu = self.dev.gpu
        kiq = KIQ.of(gpu)
        q, host = ComputeQueue(gpu, pipe=1, queue=0), HostBuffer(gpu, 4096)
        self.kept += [q, host]    # alive until the run ends: recover() and fini act on it deterministically
        n = 0
        while kiq.wptr <= KIQ_RING_SIZE // 4 + 64:
            q.fini()
            q.init()
            n += 1
        done, b = Fence(host, 0), pm4.PM4()
        b.release_mem(done.va, 5)
        q.submit(b.buf)
        q.wait(done, 5, timeout_s=0.5, min_reads=300)
        self.note(phase, f"{n} re-creations (the KIQ's ring wrapped {kiq.wptr // kiq.ring_dw}x), fence {done.value}")

    def halted_wave(self, phase: str) -> None:
        """A kernel whose wave halts at an instruction gfx11 cannot decode: the driver reports it at once,
        naming the kernel and the instruction from what the SQ shows of its waves (SQ_IND_INDEX/DATA,
        gfx_v11_0_read_wave_data; tests/hcq/test_am_waves.py), and recover() must clear a queue with waves
        resident (gfx_v11_0_soft_reset)."""
        import hcq
        from rdna3 import assemble
        from rdna3.codeobj import KernelSpec, write_code_object
        dev = self.dev
        co = write_code_object([KernelSpec("illegal", bytes(4) + assemble("s_endpgm"), vgpr_count=8, sgpr_count=8)])
        prog = dev.program(co, "illegal")
        try:
            prog(global_size=(1,), local_size=(32,), wait=True, timeout=0.05)
            self.note(phase, "the kernel completed")
        except (hcq.HCQFault, hcq.HCQTimeout) as e:
            msg = str(e)
            at = msg.find("; SQ (")
            self.note(phase, f"{type(e).__name__}: " + (norm(msg[at + 2:]) if at >= 0 else "no wave named"))

    def recover(self, phase: str) -> None:
        dev = self.dev
        self.note(phase, "faults pending: " + norm(" | ".join(dev.recover())))
        ok = dev.alloc(4)
        self.poke(ok.va, 77, global_size=(1,), local_size=(1,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "poke after recover " + str(struct.unpack("<I", dev.copyout(ok))[0]))

    def ih_wrap(self, phase: str) -> None:
        """A ring's worth of interrupts and a little more, read in two halves: the IH learns what the driver
        read only through its rptr doorbell (ih_v6_0_set_rptr; routed by nbio_v4_3_ih_doorbell_range), else
        the ring overflows (tests/amdrv/test_doorbells.py). Right after the warm boot, before any poll rings the
        rptr doorbell, so that an IH_RB_RPTR that ih_v6_0_irq_init did not zero (the previous run's doorbells
        left it a few entries in) overflows too. The IVs are posted on the simulator's side, as
        another IP block would raise them (faults one by one would cost a launch each), each half as one
        burst (gpusim.ih.IH.post_many: every IV through the IH's post, the MMHUB's registers read once)."""
        from gpusim.device import IVEntry
        gpu = self.dev.gpu
        sim, half = gpu.dev.pci.dev, gpu.ih.size // 32 // 2 + 1
        seen = []
        for _ in range(2):
            sim.blocks["IH"].post_many(IVEntry(client_id=0, source_id=0, src_data=(k, 0, 0, 0)) for k in range(half))
            seen += [iv.src_data[0] for iv in gpu.ih.poll()]
        self.note(phase, f"{len(seen)} IVs read, {'in order' if seen == list(range(half)) * 2 else 'lost some'}, "
                         f"overflows {gpu.ih.overflows}")

    def old_addresses(self, phase: str) -> None:
        """The previous run's addresses are mapped by nothing after the warm boot (gmc fini cleared the root
        directory): a store there faults (tests/hcq/test_am_faults.py)."""
        poke = self.poke = self.dev.program(self.k["faults"], "poke")
        for va in self.old_vas:
            self._fault_or_timeout(phase, lambda: poke(va, 2, global_size=(1,), local_size=(1,), wait=True,
                                                       timeout=KERNEL_TIMEOUT))

    def fini(self, phase: str) -> None:
        self.dev.close()
        self.note(phase, "closed")

    def warm_boot(self, phase: str) -> None:
        self._open(phase)

    def one_kernel(self, phase: str) -> None:
        np, dev = self.np, self.dev
        a = self.rng.random(N, np.float32)
        ba, out = self._f32(a), dev.alloc(4 * N)
        add = dev.program(self.k["add_f32"], "add_f32")
        add(out, ba, ba, N, global_size=(1,), local_size=(N,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "add " + _h(dev.copyout(out)))

    def unclean(self, phase: str) -> None:
        self.dev.gpu.dev.close()     # the process "dies": no fini, the clean-exit flag stays clear
        self.note(phase, "dropped")

    def mode1_boot(self, phase: str) -> None:
        from amdrv.ip import smu
        # The driver sleeps SMU13_MODE1_RESET_WAIT_TIME (500 ms) touching nothing; the stepped simulator
        # does not move meanwhile, so the workload shortens it (every run alike).
        orig = smu.SMU.mode1_reset

        def quick(self_):
            self_.reset_wait_s = min(self_.reset_wait_s, 0.01)
            return orig(self_)
        smu.SMU.mode1_reset = quick
        try:
            self._open(phase)
        finally:
            smu.SMU.mode1_reset = orig

    def thermal_alert(self, phase: str) -> None:
        """The board overheats and cools down again: THM's digital thermal interrupt (gpusim/thm.py, raised
        on the simulator's side as the SMU model's thermal update would) reaches the driver through the IH only
        if the driver programmed THM_THERMAL_INT_CTRL/ENA (smu_v13_0_set_irq_state; tests/amdrv/test_smi.py)."""
        gpu = self.dev.gpu
        thm = gpu.dev.pci.dev.blocks["THM"]
        seen = []
        for hotspot_c in (130, 40):
            thm.observe(hotspot_c)
            seen += [w for w in map(gpu.smu.thermal_iv, gpu.ih.poll()) if w]
        self.note(phase, f"thermal interrupts: {' '.join(seen) or 'none'}")

    def gfxoff(self, phase: str) -> None:
        """GFX powers off while idle once the driver allows it (AllowGfxOff after the hcq device lets its boot
        request go, amdgpu_gfx_off_ctrl; the delay played at once here, with no timer thread), the next
        submission wakes it (the doorbell, no message), and an alloc's GC-hub TLB flush holds it on first
        (DisallowGfxOff); the simulated SMU counts GC accesses that reach an unpowered GC (tests/amdrv/test_smi.py
        does the same on the wall clock). GFX is held on again after, as the rest of the workload expects."""
        sim = self.dev.gpu.dev.pci.dev
        g, model = self.dev.gfxoff, sim.blocks["SMU"]
        g.delay_s = 3600                 # no AllowGfxOff from a timer thread: settle() sends it, deterministically
        g.release()
        sim.step(IDLE_STEPS)             # the host idles: the averaged activity decays on the simulated clock
        g.settle()
        self.note(phase, f"idle: GFX {model.gfx_power()}")
        exits = model.gfxoff_exits
        self.one_kernel(phase)
        self.dev.alloc(1 << 16)
        g.hold()
        self.note(phase, f"GFXOFF exits {model.gfxoff_exits - exits}, GC accesses while off {model.gc_off_accesses}")

    def death_in_bootloader(self, phase: str) -> None:
        """A fresh GPU whose cold boot dies while the PSP bootloader loads the KDB (no SMU firmware yet to reset
        the ASIC; tests/amdrv/test_boot_recovery.py): the next boot must reset it through the platform."""
        from amdrv.ip import psp
        real = psp.PSP._wait

        def dying(self_, n, done, what, *a, **kw):
            if "LOAD_KEY_DATABASE" in what and "to finish" in what:
                raise Killed(what)
            return real(self_, n, done, what, *a, **kw)
        psp.PSP._wait = dying
        try:
            self._open(phase, fresh=True)
            self.note(phase, "the boot did not die")
        except Killed:
            self.note(phase, "died in the bootloader")
        finally:
            psp.PSP._wait = real

    def pci_reset_boot(self, phase: str) -> None:
        """amdgpu_device_pci_reset before the cold boot (AMGPU.boot's platform reset)."""
        self._open(phase)
        self.note(phase, f"platform reset: {self.dev.gpu.boot_report.pci_reset or 'none'}")

    def firmware_stopped_boot(self, phase: str) -> None:
        """After a clean fini the PMFW stops (hung or unloaded) while the boot state in the scratch registers
        says the run ended cleanly: the next boot must see the dead SMU and boot cold (AMGPU._decide;
        tests/amdrv/test_boot.py::test_firmware_stopped_while_the_boot_state_survives_boots_cold)."""
        sim = self.bus.slots[SLOT]
        sim.blocks["SMU"].running = False               # nobody answers the mailbox any more
        sim.set("MP1", "MP1_SMN_C2PMSG_90", 0)          # the response register reads 0, as after a reset
        self._open(phase)
        self.note(phase, self.dev.gpu.boot_report.reason)

    def psp_unmapped_command(self, phase: str) -> None:
        """The PSP fuzzer's frame case "cmd unmapped" (tools/fuzz/psp.py, docs/fuzzing.md: a KM ring frame whose
        command buffer address nothing maps), sent as the fuzzer sends it through the driver's ring, then the
        fuzzer's recovery probe (the next command). The PSP (MP0) reads through the MMHUB (mmhub_client_ids_
        v3_0_0), whose fault setting (mmhub_v3_0_set_fault_enable_default, init_system_aperture_regs: the
        default page) answers the read with the dummy page, so the fence comes; the MMHUB's fault registers
        decide what the fuzzer reports (tests/amdrv/test_gmc.py: a lost default address reaches no memory)."""
        from amdrv.autogen import psp as P
        from tools.fuzz import psp as fuzz

        def no_reboot(reset=False):
            raise RuntimeError("the workload reboots no GPU for the PSP fuzzer's recovery")
        ring = fuzz.Ring(self.dev.gpu, timeout=0.2)
        top = (1 << 47) - 0x1000    # fuzz.make_case's unmapped MC address
        outcome, _ = fuzz.run_case(ring, {"cmd": fuzz._cmd(P.GFX_CMD_ID_AUTOLOAD_RLC),
                                          "frame": dict(cmd_buf_addr_lo=top & 0xFFFFFFFF, cmd_buf_addr_hi=top >> 32)})
        after, _ = fuzz.recover(ring, no_reboot)
        self.note(phase, f"{outcome}; {after}")

    def am_alone(self, phase: str, gpu) -> None:
        """The AM driver's own API before hcq takes the GPU (amdrv.queue, amdrv.ip.ih): on SDMA0, a copy run
        from an indirect buffer and a write where nothing is mapped, then the IH ring read for its fault. Until hcq moves it, the IH writes its write
        pointer back to the slot ih_v6_0_irq_init gives it (IH_RB_WPTR_ADDR_LO/HI), and the driver reads the
        ring up to that write-back (ih_v6_0_get_wptr): a lost address loses the IV, while the hub's latch
        still holds the fault (tests/amdrv/test_ih.py)."""
        from amdrv import sdma_packets as S
        from amdrv.queue import Fence, HostBuffer, SDMAQueue
        q, host = SDMAQueue(gpu, engine=0, ring_size=4096), HostBuffer(gpu, 3 * 4096)
        self.kept = [q, host]     # alive until the run ends: fini acts on the queue deterministically
        done = Fence(host, 0)
        data = self.rng.integers(0, 256, 3000, dtype=self.np.uint8).tobytes()
        host.view[4096:4096 + len(data)] = data
        ib = S.SDMABuilder()     # a copy from an indirect buffer: SDMA0's IB_CNTL.IB_ENABLE (hcq submits no IB)
        ib.copy(host.va + 8192 + 4, host.va + 4096, len(data))
        ib.nop((-len(ib)) % 8)
        host.view[64:64 + 4 * len(ib)] = ib.buf.tobytes()
        b = S.SDMABuilder()
        b.nop((2 - q.wptr) & 7)           # the INDIRECT packet ends on an 8-dword boundary (sdma_v6_0_ring_emit_ib)
        b.indirect(host.va + 64, len(ib))
        b.write(host.va + 16, 0x5A5A0001, 0x5A5A0002)   # a store that lands, read back below
        b.write(BAD, 1)
        b.fence(done.va, 1)
        q.submit(b.buf)
        ih_wptr, t_end, n = gpu.dev.reg("OSSSYS").IH_RB_WPTR.read, time.perf_counter() + 0.5, 0
        while done.value < 1 and (n < 300 or time.perf_counter() < t_end):
            ih_wptr()           # a register read: lets the stepped simulator run
            n += 1
        faults = [f for f in map(gpu.gmc.fault_from_iv, gpu.ih.poll()) if f is not None]
        latched = gpu.gmc.decode_fault("GC")          # fault_from_iv re-armed it for an IV's fault
        got = bytes(host.view[8192 + 4:8192 + 4 + len(data)])
        words = struct.unpack_from("<2I", host.view, 16)
        self.note(phase, f"AM alone: fence {done.value}, copy {'right' if got == data else 'wrong'}, words "
                         f"{'right' if words == (0x5A5A0001, 0x5A5A0002) else 'wrong'}, {len(faults)} "
                         f"fault(s) on the IH ring, {'one more' if latched else 'none'} latched")

    def no_scpm(self, phase: str) -> None:
        """A second board whose PSP runtime database reports no SCPM (gpusim board setting): the driver must
        send SetAllowedFeaturesMask itself, or the PMFW enables no feature (tests/amdrv/test_smu.py)."""
        from amdrv.am import AMGPU
        from amdrv.hcq import AMHCQDevice
        from pcie import open_function
        COST.start()
        gpu = AMGPU.open(open_function("sim", "navi31", fresh=True, bus=self.bus, slot=SLOT_NO_SCPM,
                                          scpm=False, small_bar=True))
        self._booted(phase, gpu, cost=False)
        self.am_alone(phase, gpu)
        self.dev = AMHCQDevice(gpu, "am:sim#no-scpm")
        self.dev.default_timeout = KERNEL_TIMEOUT
        self.one_kernel(phase)
        self.fini(phase)

    def usb_phase(self, phase: str, firmware: str) -> None:
        """The small-BAR board, left warm, behind the simulated ASM24xx bridge (gpusim.usb_bridge): hcq over the
        stock UAS firmware, then the open one (docs/usb.md): open, a copy in, one kernel, a copy out, close.
        Steps that exist only there are judged here: the MQD page pushed into the bridge SRAM before
        MAP_QUEUES (stock), the HDP flush after a push into a VRAM ring or kernarg arena (open)."""
        from amdrv.am import AMGPU
        from amdrv.hcq import AMHCQDevice
        from gpusim import usb_bridge
        from pcie.usb.transport import open_function
        os.environ["DRIVERLESS_PUBLISH_S"] = "0"     # no metrics thread: its SMU messages would race the workload
        # each firmware has a board (an enclosure) of its own: the small-BAR board behind the stock one, the first
        # board behind the open one (both left warm by a clean fini)
        slot = SLOT_NO_SCPM if firmware == "stock" else SLOT
        backend = usb_bridge.backend("navi31", bus=self.bus, slot=slot, firmware=firmware)
        dev = AMHCQDevice(AMGPU.open(open_function(backend=backend)), f"am:sim:usb#{firmware}")
        dev.default_timeout = KERNEL_TIMEOUT
        self.dev = dev
        self.note(phase, f"{dev.gpu.boot_report.kind} boot")
        np = self.np
        a = self.rng.random(N, np.float32)
        ba, out = self._f32(a), dev.alloc(4 * N)
        add = dev.program(self.k["add_f32"], "add_f32")
        add(out, ba, ba, N, global_size=(1,), local_size=(N,), wait=True, timeout=KERNEL_TIMEOUT)
        self.note(phase, "add " + _h(dev.copyout(out)))
        if firmware == "open":   # 1 MiB in and out: four chunks, each 256 KiB window used twice (amdrv.bridge_copy)
            data = self.rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
            big = dev.alloc(len(data))
            dev.copyin(big, data)
            self.note(phase, f"1 MiB copied in and out {'right' if dev.copyout(big) == data else 'wrong'}")
        dev.close()
        self.note(phase, "closed")

    def small_bar_warm_boot(self, phase: str) -> None:
        """The second board (a small BAR: VRAM beyond 256 MiB only through MM_INDEX/MM_DATA) opened again after
        its fini: a warm boot that takes the discovery binary from the host's cache by the key the last run
        recorded (DRIVER_SCRATCH_6/7: no discovery dword read from VRAM), the SMU firmware's versions and top
        clock levels from the records (no GetSmuVersion, no GetMaxDpmFreq) and the reserved VRAM size from
        DRIVER_SCRATCH_5 (no ROM read): its cost is noted as the GPU sees it (BootCost;
        tests/amdrv/test_usb_open_costs.py does the same over USB)."""
        from amdrv.am import AMGPU
        from pcie import open_function
        COST.start()
        gpu = AMGPU.open(open_function("sim", "navi31", bus=self.bus, slot=SLOT_NO_SCPM))
        self._booted(phase, gpu, cost=True)
        gpu.fini()
        self.note(phase, "closed")


# ====================================================================== interception
PM4_OPS = ("NOP", "SET_SH_REG", "DISPATCH_DIRECT", "ACQUIRE_MEM", "RELEASE_MEM", "WAIT_REG_MEM", "INDIRECT_BUFFER",
           "EVENT_WRITE", "COPY_DATA", "WRITE_DATA", "SET_RESOURCES", "MAP_QUEUES", "UNMAP_QUEUES", "SET_UCONFIG_REG")
PM4_FIELDS = {
    "ACQUIRE_MEM": ("COHER_CNTL", "COHER_SIZE", "COHER_SIZE_HI", "COHER_BASE", "COHER_BASE_HI", "POLL_INTERVAL",
                    "GCR_CNTL"),
    "RELEASE_MEM": ("EVENT_GCR", "DATA_INT_SEL", "ADDR_LO", "ADDR_HI", "DATA_LO", "DATA_HI", "INT_CTXID"),
    "WAIT_REG_MEM": ("FUNCTION_MEM_SPACE", "ADDR_LO", "ADDR_HI", "REFERENCE", "MASK", "POLL_INTERVAL"),
    "DISPATCH_DIRECT": ("DIM_X", "DIM_Y", "DIM_Z", "DISPATCH_INITIATOR"),
    "INDIRECT_BUFFER": ("IB_BASE_LO", "IB_BASE_HI", "IB_SIZE_VALID_VMID"),
    "EVENT_WRITE": ("EVENT",),
    "COPY_DATA": ("CONTROL", "SRC_LO", "SRC_HI", "DST_LO", "DST_HI"),
    "WRITE_DATA": ("CONTROL", "DST_LO", "DST_HI"),
}
SDMA_FIELDS = {
    "COPY_LINEAR": ("COUNT", "PARAMETER", "SRC_LO", "SRC_HI", "DST_LO", "DST_HI"),
    "INDIRECT": ("IB_BASE_LO", "IB_BASE_HI", "IB_SIZE", "CSA_ADDR_LO", "CSA_ADDR_HI"),
    "WRITE": ("DST_LO", "DST_HI", "COUNT"),
    "FENCE": ("ADDR_LO", "ADDR_HI", "DATA"),
    "TRAP": ("INT_CONTEXT",),
    "POLL_REGMEM": ("ADDR_LO", "ADDR_HI", "VALUE", "MASK", "INTERVAL_RETRY"),
    "POLL_REGMEM/HDP_FLUSH": ("DONE_ADDR", "REQ_ADDR", "VALUE", "MASK", "INTERVAL_RETRY"),
    "CONST_FILL": ("DST_LO", "DST_HI", "DATA", "COUNT"),
    "TIMESTAMP": ("ADDR_LO", "ADDR_HI"),
    "GCR_REQ": ("BASE_LO", "BASE_HI_GCR_15_0", "LIMIT_LO_GCR_18_16", "LIMIT_HI"),
}


@functools.lru_cache(maxsize=None)
def _pm4_names() -> dict[int, str]:
    from amdrv.autogen import pm4 as P
    return {getattr(P, f"PACKET3_{n}"): n for n in PM4_OPS if hasattr(P, f"PACKET3_{n}")}


@functools.lru_cache(maxsize=None)
def _sdma_ops() -> dict[int, str]:
    from amdrv.autogen import sdma6 as S
    names = {"NOP": "NOP", "COPY": "COPY", "WRITE": "WRITE", "FENCE": "FENCE", "TRAP": "TRAP",
             "POLL_REGMEM": "POLL_REGMEM", "CONST_FILL": "CONST_FILL", "TIMESTAMP": "TIMESTAMP",
             "GCR_REQ": "GCR_REQ", "INDIRECT": "INDIRECT"}
    return {getattr(S, f"SDMA_OP_{k}"): v for k, v in names.items() if hasattr(S, f"SDMA_OP_{k}")}


@dataclass
class Packet:
    name: str        # "RELEASE_MEM/DATA_64", "COPY_LINEAR", ...
    start: int       # dword index in the submission
    length: int
    keys: list       # per dword: its field key (str) or None (not mutated: NOP payload, data payloads)


def parse_pm4(dw, sh_name: Callable[[int], str]) -> list[Packet]:
    out, i, names = [], 0, _pm4_names()
    while i < len(dw):
        h = dw[i]
        if h >> 30 != 3:
            out.append(Packet(f"type{h >> 30}", i, 1, [None]))
            i += 1
            continue
        op, n = (h >> 8) & 0xFF, (h >> 16) & 0x3FFF
        name = names.get(op, f"op{op:#04x}")
        length = 1 if n == 0x3FFF else n + 2
        length = min(length, len(dw) - i)
        keys: list = [None] * length
        if name != "NOP":
            if name == "RELEASE_MEM" and length > 2:
                name += "/" + {0: "DATA_NONE", 1: "DATA_32", 2: "DATA_64", 3: "GPU_CLOCK"}.get((dw[i + 2] >> 29) & 7,
                                                                                         "DATA_SEL?")
            keys[0] = "HEADER"
            labels = PM4_FIELDS.get(name.split("/")[0], ())
            for j in range(1, length):
                if name == "SET_SH_REG":
                    keys[j] = "REG_OFFSET" if j == 1 else sh_name(dw[i + 1] + j - 2)
                else:
                    keys[j] = labels[j - 1] if j - 1 < len(labels) else ("DATA" if name == "WRITE_DATA" else f"dw{j}")
        out.append(Packet(name, i, length, keys))
        i += length
    return out


def parse_sdma(dw) -> list[Packet]:
    out, i, ops = [], 0, _sdma_ops()
    while i < len(dw):
        h = dw[i]
        op, sub = h & 0xFF, (h >> 8) & 0xFF
        name = ops.get(op, f"op{op:#04x}")
        length = {"NOP": 1 + ((h >> 16) & 0x3FFF), "COPY": 7, "FENCE": 4, "TRAP": 2, "POLL_REGMEM": 6,
                  "CONST_FILL": 5, "TIMESTAMP": 3, "GCR_REQ": 5, "INDIRECT": 6}.get(name)
        if name == "WRITE":
            length = 4 + (dw[i + 3] + 1 if i + 3 < len(dw) else 0)
        if name == "COPY":
            name = "COPY_LINEAR" if sub == 0 else f"COPY/sub{sub}"
        if name == "POLL_REGMEM" and (h >> 26) & 1:
            name = "POLL_REGMEM/HDP_FLUSH"
        if length is None:    # an opcode this parser does not know: the rest is left alone
            out.append(Packet(name, i, len(dw) - i, [None] * (len(dw) - i)))
            break
        length = min(length, len(dw) - i)
        keys: list = [None] * length
        if name != "NOP":
            keys[0] = "HEADER"
            labels = SDMA_FIELDS.get(name, ())
            for j in range(1, length):
                keys[j] = labels[j - 1] if j - 1 < len(labels) else ("DATA" if name == "WRITE" else f"dw{j}")
        out.append(Packet(name, i, length, keys))
        i += length
    return out


class Hooks:
    """The child's interception: records host register writes and packet fields, applies mutations.

    reg_mut: {dword address: "drop" | "flip"}; pkt_mut: {(engine, packet, field): "zero" | "flip"};
    reg_filters / pkt_filters: callables for named steps (see Ctx)."""

    def __init__(self):
        self.record = False
        self.reg_writes: dict[int, int] = {}         # dword address -> host writes
        self.reg_via: dict[int, str] = {}            # dword address -> index/data pair used, if any
        self.reg_not_power_on: set[int] = set()      # dword addresses written with other than their power-on value
        self.reg_values: dict[int, set] = {}         # dword address -> the distinct values written (up to 16)
        self.pkt_seen: dict[tuple, int] = {}
        self.reg_mut: dict[int, str] = {}
        self.pkt_mut: dict[tuple, str] = {}
        self.reg_filters: list[Callable] = []        # fn(dev, dword, value) -> value or None (drop)
        self.pkt_filters: list[Callable] = []        # fn(engine, Packet, dwords list) -> dwords list (or [] to drop)
        self.hits = 0
        self._pairs: dict[int, dict] = {}
        self._sh: dict[int, str] = {}

    # ------------------------------------------------------------ registers
    def pairs(self, dev) -> dict:
        p = self._pairs.get(id(dev))
        if p is None:
            a = lambda n: dev.reg_addr("NBIO", n)  # noqa: E731
            p = self._pairs[id(dev)] = {
                a("BIF_BX_PF0_MM_DATA"): ("MM", a("BIF_BX_PF0_MM_INDEX")),
                a("BIF_BX_PF0_RSMU_DATA"): ("RSMU", a("BIF_BX_PF0_RSMU_INDEX")),
                a("BIF_BX0_PCIE_DATA2"): ("PCIE2", a("BIF_BX0_PCIE_INDEX2")),
            }
        return p

    def install(self) -> None:
        from gpusim import provider
        from amdrv import queue
        hooks = self
        orig_write = provider.RegisterBAR.write32

        def write32(bar, offset, value):
            dev = bar.dev
            dw = target = offset >> 2
            pair = hooks.pairs(dev).get(dw)
            if pair is not None:
                idx = dev.regs.peek(pair[1])
                if pair[0] == "MM" and idx & (1 << 31):
                    target = dw            # MM_DATA into VRAM: counted as the data register itself
                else:
                    target = (idx & 0x7FFFFFFF) >> 2
            if hooks.record:
                hooks.reg_writes[target] = hooks.reg_writes.get(target, 0) + 1
                if target not in dev.power_on_published or value != dev.regs.defaults.get(target, 0):
                    hooks.reg_not_power_on.add(target)
                seen = hooks.reg_values.setdefault(target, set())
                if len(seen) < 16:
                    seen.add(value & 0xFFFFFFFF)
                if pair is not None and target != dw:
                    hooks.reg_via[target] = pair[0]
            mode = hooks.reg_mut.get(target)
            if mode is not None:
                hooks.hits += 1
                if mode == "drop":
                    bar.fn.counters.mmio_writes += 1
                    return
                value ^= 0xFFFFFFFF
            for f in hooks.reg_filters:
                value = f(dev, target, value)
                if value is None:
                    bar.fn.counters.mmio_writes += 1
                    return
            orig_write(bar, offset, value)

        provider.RegisterBAR.write32 = write32
        orig_submit = queue._Queue.submit

        def submit(q, dwords, *a, **kw):     # the rest (flush=, on the USB paths) passed through as it came
            if UNHOOKED[0]:
                return orig_submit(q, dwords, *a, **kw)
            engine = "PM4" if q.kind == "compute" else "SDMA"
            dw = [int(x) for x in (dwords if not isinstance(dwords, memoryview) else dwords.tolist())]
            pkts = parse_pm4(dw, functools.partial(hooks.sh_name, q)) if engine == "PM4" else parse_sdma(dw)
            out: list[int] = []
            for p in pkts:
                words = dw[p.start:p.start + p.length]
                for j, key in enumerate(p.keys):
                    if key is None:
                        continue
                    k = (engine, p.name, key)
                    if hooks.record:
                        hooks.pkt_seen[k] = hooks.pkt_seen.get(k, 0) + 1
                    mode = hooks.pkt_mut.get(k)
                    if mode is not None:
                        hooks.hits += 1
                        words[j] = 0 if mode == "zero" else words[j] ^ 0xFFFFFFFF
                for f in hooks.pkt_filters:
                    words = f(engine, p, words)
                out.extend(words)
            return orig_submit(q, array("I", out), *a, **kw)

        queue._Queue.submit = submit

    def sh_name(self, q, offset: int) -> str:
        n = self._sh.get(offset)
        if n is None:
            from amdrv.autogen import pm4 as P
            names = reg_names(q.gpu.dev.pci.dev)
            n = self._sh[offset] = names.get(offset + P.PACKET3_SET_SH_REG_START, (None, f"SH+{offset:#x}"))[1]
        return n


_NAMES: dict = {}


def reg_names(dev) -> dict[int, tuple[str, str]]:
    """{dword address: (ip, register name)} for every MMIO register of the device's discovered IPs."""
    key = dev.chip
    if key in _NAMES:
        return _NAMES[key]
    from amdrv import regs as R
    out: dict[int, tuple[str, str]] = {}
    seen = set()
    for e in dev.layout.ips:
        if e.table is None or (e.table, e.bases) in seen:
            continue
        seen.add((e.table, e.bases))
        t = R.load(e.table)
        for name in t.names():
            d = t[name]
            if d.base_idx is None or d.base_idx >= len(e.bases):
                continue
            ip = e.name
            if e.table.startswith("mp_"):
                ip = name.split("_")[0] if name.startswith(("MP0_", "MP1_")) else "MP"
            elif e.table.startswith("gc_") and name.startswith(("SDMA0_", "SDMA1_")):
                ip = "GC"
            out.setdefault(e.bases[d.base_idx] + d.offset, (ip, name))
    _NAMES[key] = out
    return out


def name_of(dev, dword: int) -> tuple[str, str]:
    n = reg_names(dev).get(dword)
    if n is not None:
        return n
    nb = dev.blocks.get("NBIO")
    if nb is not None and getattr(nb, "_remap_addr", None) == dword:
        return ("NBIO", "REMAP_HDP_MEM_FLUSH_CNTL_page")
    if nb is not None and getattr(nb, "_remap_addr", None) is not None and dword == nb._remap_addr + 1:
        return ("NBIO", "REMAP_HDP_REG_FLUSH_CNTL_page")
    return ("?", f"dword_{dword:#x}")


# ====================================================================== named steps
class Ctx:
    """What a step's apply(ctx) uses to patch the driver in the child (never undone: the child exits)."""

    def __init__(self, hooks: Hooks):
        self.hooks = hooks
        self.inside: dict[str, int] = {}

    def patch(self, obj, attr: str, make: Callable) -> None:
        """obj.attr = make(original); AttributeError (the driver changed) makes the step n/a."""
        orig = getattr(obj, attr)
        setattr(obj, attr, make(orig))

    def track(self, obj, attr: str, label: str | None = None) -> str:
        """Counts being inside obj.attr (ctx.inside[label] > 0 while it runs); returns the label."""
        label = label or f"{getattr(obj, '__name__', obj)}.{attr}"
        inside = self.inside
        inside.setdefault(label, 0)

        def make(orig):
            @functools.wraps(orig)
            def wrapper(*a, **kw):
                inside[label] += 1
                try:
                    return orig(*a, **kw)
                finally:
                    inside[label] -= 1
            return wrapper
        self.patch(obj, attr, make)
        return label

    def skip(self, obj, attr: str, when: Callable[..., bool] = lambda *a, **kw: True, result=None) -> None:
        """obj.attr does nothing (returns `result`) whenever when(*args) says so."""
        hooks = self.hooks

        def make(orig):
            @functools.wraps(orig)
            def wrapper(*a, **kw):
                if when(*a, **kw):
                    hooks.hits += 1
                    return result
                return orig(*a, **kw)
            return wrapper
        self.patch(obj, attr, make)

    def skip_inside(self, outer, outer_attr: str, inner, inner_attr: str) -> None:
        """inner.inner_attr does nothing while outer.outer_attr runs."""
        label = self.track(outer, outer_attr)
        self.skip(inner, inner_attr, lambda *a, **kw: self.inside[label] > 0)

    def drop_reg_inside(self, outer, outer_attr: str, ip: str, reg: str, mask: int | None = None) -> None:
        """Host writes to ip.reg made while outer.outer_attr runs are dropped (mask: only those that set
        any of these bits)."""
        label = self.track(outer, outer_attr)
        hooks = self.hooks

        def f(dev, dword, value):
            if self.inside[label] and dword == dev.reg_addr(ip, reg) and (mask is None or value & mask):
                hooks.hits += 1
                return None
            return value
        hooks.reg_filters.append(f)

    def set_fields(self, ip: str, reg: str, **fields: int) -> None:
        """Every host write to ip.reg has these fields replaced (e.g. ENABLE_L1_TLB=0)."""
        from amdrv import regs as R
        from gpusim import discovery
        have = R.load(discovery.layout("navi31").register_table(ip))[reg].fields   # KeyError: n/a
        missing = [f for f in fields if f not in have]
        if missing:
            raise KeyError(f"{ip} {reg} has no field {', '.join(missing)}")
        hooks = self.hooks

        def f(dev, dword, value):
            if dword == dev.reg_addr(ip, reg):
                new = dev.table(ip)[reg].encode(value, **fields)
                if new != value:
                    hooks.hits += 1
                return new
            return value
        hooks.reg_filters.append(f)

    def packets(self, fn: Callable) -> None:
        """fn(engine, Packet, words) -> words: rewrite (or drop, returning []) submitted packets."""
        hooks = self.hooks

        def counted(engine, p, words):
            new = fn(engine, p, words)
            if new != words:
                hooks.hits += 1
            return new
        hooks.pkt_filters.append(counted)


@dataclass(frozen=True)
class Step:
    name: str
    what: str        # the driver step, in words, and its upstream source
    apply: Callable  # apply(ctx)


def _pm4_bits(name: str) -> int:
    from amdrv.autogen import pm4 as P
    return getattr(P, name)


def _release_mem(fn):
    """A packet filter for RELEASE_MEM's dword 1 (event and GCR actions): fn(dw1) -> dw1."""
    def f(engine, p, words):
        if engine == "PM4" and p.name.startswith("RELEASE_MEM") and len(words) > 1:
            words = list(words)
            words[1] = fn(words[1])
        return words
    return f


def _set_field(value: int, field: str, v: int, width: int) -> int:
    """value with the PM4 field (shift from the generated nvd.h table, width given) set to v."""
    from amdrv.autogen import pm4 as P
    shift = P.FIELDS[field][0]
    mask = ((1 << width) - 1) << shift
    return (value & ~mask) | (v << shift & mask)


def _step_eop_unshifted(ctx: Ctx) -> None:
    from amdrv import queue

    def make(orig):
        def values(q):
            m = orig(q)
            m["cp_hqd_eop_base_addr_lo"], m["cp_hqd_eop_base_addr_hi"] = q.eop.va & 0xFFFFFFFF, q.eop.va >> 32
            ctx.hooks.hits += 1
            return m
        return values
    ctx.patch(queue.ComputeQueue, "_mqd_values", make)


def _step_no_mmhub_semaphore(ctx: Ctx) -> None:
    from amdrv.ip import gmc

    def make(orig):
        def init(self, *a, **kw):
            orig(self, *a, **kw)
            if not hasattr(self.hubs["MM"], "semaphore"):
                raise AttributeError("_Hub.semaphore")
            self.hubs["MM"].semaphore = False
            ctx.hooks.hits += 1
        return init
    ctx.patch(gmc.GMC, "__init__", make)


def _step_smu_msg(*names: str):
    def apply(ctx: Ctx) -> None:
        from amdrv.ip import smu
        from amdrv.autogen import smu_13_0_0 as S
        msgs = {getattr(S, f"PPSMC_MSG_{n}") for n in names}
        ctx.skip(smu.SMU, "send", lambda self, msg, *a, **kw: msg in msgs)
    return apply


def _step_psp_bootloader_ready(ctx: Ctx) -> None:
    from amdrv.ip import psp
    label = ctx.track(psp.PSP, "_bootloader_load")
    ctx.skip(psp.PSP, "_wait", lambda self, n, done, what, *a, **kw:
             ctx.inside[label] > 0 and n == 35 and "ready" in what and "finish" not in what)


def _step_tmr_before_smu(ctx: Ctx) -> None:
    """SETUP_TMR sent before the SMU firmware's LOAD_IP_FW (upstream: SMU firmware, then TMR)."""
    from amdrv.ip import psp
    state = {"tmr": False}

    def make_load(orig):
        def load_ip_fw(self, ld):
            if not state["tmr"]:
                state["tmr"] = True
                orig_setup(self)
                ctx.hooks.hits += 1
            return orig(self, ld)
        return load_ip_fw
    orig_setup = psp.PSP.setup_tmr
    ctx.patch(psp.PSP, "load_ip_fw", make_load)
    ctx.skip(psp.PSP, "setup_tmr", lambda self: state["tmr"])


def _step_no_config_restore(ctx: Ctx) -> None:
    from amdrv import am
    from gpusim import provider
    label = ctx.track(am.AMGPU, "_mode1_reset")
    ctx.skip(provider.SimFunction, "config_write", lambda *a, **kw: ctx.inside[label] > 0)


def _step_pagetable_level(ctx: Ctx) -> None:
    """Issue 17's source mutation: a 2 MiB fragment placed at the 1 GiB level (the map loop used to spin)."""
    from amdrv import pagetable
    ctx.patch(pagetable, "_level", lambda orig: lambda frag: pagetable.PDB1 if frag >= 9 else orig(frag))


def _step_warm_boot_trusts_flags(ctx: Ctx) -> None:
    """The warm-boot decision takes the boot state's clean flag alone: a stopped sOS/SMU is not looked at."""
    from amdrv import am

    def make(orig):
        def decide(self, state, force_cold):
            if state is not None and state.clean and self._firmware_alive() != (True, True, False):
                ctx.hooks.hits += 1
                self._firmware_alive = lambda: (True, True, False)
                try:
                    return orig(self, state, force_cold)
                finally:
                    del self._firmware_alive
            return orig(self, state, force_cold)
        return decide
    ctx.patch(am.AMGPU, "_decide", make)


def _drop_acquire(engine, p, words):
    return [] if engine == "PM4" and p.name == "ACQUIRE_MEM" else words


def _step_no_sh_mem_bases_vmid0(ctx: Ctx) -> None:
    from amdrv.ip import gfx

    def make(orig):
        def constants_init(self):
            orig(self)
            self.grbm_select(vmid=0)
            self.gc.SH_MEM_BASES.write(0)       # its reset value: as if never written
            self.grbm_select()
            ctx.hooks.hits += 1
        return constants_init
    ctx.patch(gfx.GFX, "constants_init", make)


def _step_usb_vram_push_unflushed(ctx: Ctx) -> None:
    """Open firmware: a push into a VRAM ring or kernarg arena (amdrv.placement.VRAMBuffer) without its HDP flush."""
    from amdrv import placement

    def make(orig):
        def push(self, offset=0, size=None, flush=True):
            if flush:
                ctx.hooks.hits += 1
            return orig(self, offset, size, flush=False)
        return push
    ctx.patch(placement.VRAMBuffer, "push", make)


def _step_usb_mqd_page_not_pushed(ctx: Ctx) -> None:
    """Stock firmware: a compute queue's MQD page (a host shadow of the bridge SRAM) written but not pushed before
    MAP_QUEUES (the KIQ's own MQD, set up by MMIO, is left alone)."""
    from amdrv.queue import KIQ, ComputeQueue

    def make(orig):
        def write_mqd(self):
            if self.mqd_host is None or isinstance(self, KIQ):
                return orig(self)
            dma, cls = self.mem.dma, type(self.mem.dma)
            push = cls.push

            def unpushed(buf, *a, **kw):
                if buf is dma:
                    ctx.hooks.hits += 1
                    return None
                return push(buf, *a, **kw)
            cls.push = unpushed
            try:
                return orig(self)
            finally:
                cls.push = push
        return write_mqd
    ctx.patch(ComputeQueue, "_write_mqd", make)


def _step_usb_copy_no_sentinel_wait(ctx: Ctx) -> None:
    """Open firmware: the copy-in descriptor's POLL_REGMEM on the window's sentinel (its last dword differing from
    the marker: the chunk has landed) replaced by a NOP of the same 6 dwords (amdrv.bridge_copy._in_desc)."""
    from amdrv import bridge_copy, sdma_packets

    def make(orig):
        def in_desc(self, *a, **kw):
            words = orig(self, *a, **kw)
            nop = sdma_packets.SDMABuilder()
            nop.nop(6)
            ctx.hooks.hits += 1
            return nop.buf.tobytes() + words[4 * 6:]
        return in_desc
    ctx.patch(bridge_copy.BridgeCopier, "_in_desc", make)


def _steps() -> list[Step]:
    from amdrv import am, hcq as amhcq, queue, vbios
    from amdrv.ip import gfx, gmc, nbio, sdma, smu
    rel = _release_mem
    return [
        Step("no-hdp-flush-before-tlb-invalidate", "HDP flush before a TLB invalidation after page tables were "
             "written through BAR0 (gmc_v11_0_flush_gpu_tlb)",
             lambda c: c.skip_inside(gmc.GMC, "flush_tlb", nbio.NBIO, "hdp_flush")),
        Step("no-hdp-flush-after-copyin", "HDP flush after hcq copyin through BAR0 (amdgpu flushes per IB: "
             "amdgpu_ib.c)",
             lambda c: c.skip_inside(amhcq.AMHCQDevice, "copyin", nbio.NBIO, "hdp_flush")),
        Step("no-hdp-flush-after-mqd", "HDP flush after writing the MQD/EOP through BAR0 (the KIQ's MAP_QUEUES "
             "reads the MQD)", lambda c: c.skip_inside(queue.ComputeQueue, "_write_mqd", nbio.NBIO, "hdp_flush")),
        Step("no-kiq-map-queues", "compute queues never mapped by the KIQ (amdgpu_gfx_enable_kcq: MAP_QUEUES)",
             lambda c: c.skip(queue.KIQ, "map")),
        Step("no-kiq-set-resources", "no SET_RESOURCES before the KIQ maps queues (amdgpu_gfx_enable_kcq)",
             lambda c: c.skip(queue.KIQ, "set_resources")),
        Step("no-hdp-flush-at-all", "every host HDP flush (hdp_v6_0_flush_hdp) skipped",
             lambda c: c.skip(nbio.NBIO, "hdp_flush")),
        Step("no-tlb-invalidate", "TLB invalidation after page-table updates (gmc_v11_0_flush_gpu_tlb)",
             lambda c: c.skip(gmc.GMC, "flush_tlb")),
        Step("no-acquire-mem", "ACQUIRE_MEM (I$, K$, GL1, GL2 invalidate) before a dispatch (gfx_v11_0_emit_mem_sync)",
             lambda c: c.packets(_drop_acquire)),
        Step("release-mem-no-gl2-wb", "RELEASE_MEM without GCR GL2_WB (gfx_v11_0_ring_emit_fence)",
             lambda c: c.packets(rel(lambda v: v & ~_pm4_bits("PACKET3_RELEASE_MEM_GCR_GL2_WB")))),
        Step("release-mem-no-gcr", "RELEASE_MEM with no cache actions at all (gfx_v11_0_ring_emit_fence)",
             lambda c: c.packets(rel(lambda v: v & 0xFFFF))),
        Step("release-mem-wrong-event", "RELEASE_MEM with BOTTOM_OF_PIPE_TS instead of CACHE_FLUSH_AND_INV_TS_EVENT",
             lambda c: c.packets(rel(lambda v: _set_field(v, "PACKET3_RELEASE_MEM_EVENT_TYPE", 0x28, 6)))),
        Step("release-mem-event-index-0", "RELEASE_MEM with EVENT_INDEX 0 instead of 5 (end of pipe)",
             lambda c: c.packets(rel(lambda v: _set_field(v, "PACKET3_RELEASE_MEM_EVENT_INDEX", 0, 4)))),
        Step("eop-base-not-shifted", "CP_HQD_EOP_BASE_ADDR without the >> 8 (gfx_v11_0_compute_mqd_init)",
             _step_eop_unshifted),
        Step("no-set-allowed-features-mask", "SMU SetAllowedFeaturesMaskHigh/Low skipped (smu_v13_0_set_allowed_mask)",
             _step_smu_msg("SetAllowedFeaturesMaskHigh", "SetAllowedFeaturesMaskLow")),
        Step("no-enable-all-smu-features", "SMU EnableAllSmuFeatures skipped (smu_cmn_feature_update_enable_state)",
             _step_smu_msg("EnableAllSmuFeatures")),
        Step("no-mmhub-invalidation-semaphore", "MMHUB invalidation without taking the engine semaphore "
             "(gmc_v11_0_use_invalidate_semaphore)", _step_no_mmhub_semaphore),
        Step("recover-no-grbm-soft-reset-cp", "recover without GRBM_SOFT_RESET of CP/GFX/CPF/CPC/CPG "
             "(gfx_v11_0_soft_reset)", lambda c: c.drop_reg_inside(gfx.GFX, "soft_reset", "GC", "GRBM_SOFT_RESET")),
        Step("recover-no-sdma-soft-reset", "recover without GRBM_SOFT_RESET of SDMA (sdma_v6_0_soft_reset)",
             lambda c: c.drop_reg_inside(sdma.SDMA, "soft_reset", "GC", "GRBM_SOFT_RESET")),
        Step("recover-no-hqd-dequeue", "recover without dequeuing the MEC queues (gfx_v11_0_soft_reset)",
             lambda c: c.drop_reg_inside(gfx.GFX, "soft_reset", "GC", "CP_HQD_DEQUEUE_REQUEST")),
        Step("no-psp-bootloader-ready-wait", "no wait for the PSP bootloader's ready bit (C2PMSG_35) before each "
             "component (psp_v13_0_wait_for_bootloader)", _step_psp_bootloader_ready),
        Step("no-rlc-autoload-wait", "no wait for RLC autoload (gfx_v11_0_wait_for_rlc_autoload_complete)",
             lambda c: c.skip(gfx.GFX, "wait_for_rlc_autoload")),
        Step("no-mec-start-wait", "no wait after unhalting the MEC (gfx_v11_0_cp_compute_enable: udelay(50))",
             lambda c: c.skip(gfx.GFX, "wait_mec_start")),
        Step("fini-no-hqd-dequeue", "fini leaves the compute HQDs active (gfx_v11_0_hw_fini unmaps the queues: "
             "amdgpu_gfx_disable_kcq's UNMAP_QUEUES)", lambda c: c.skip_inside(queue, "fini_queues", queue.KIQ, "unmap")),
        Step("no-sh-mem-bases-vmid0", "SH_MEM_BASES not written for VMID 0, as upstream (gfx_v11_0_constants_init; "
             "this driver dispatches in VMID 0)", _step_no_sh_mem_bases_vmid0),
        Step("setup-tmr-before-smu-fw", "SETUP_TMR before the SMU firmware load (psp_hw_start: SMU fw, then TMR)",
             _step_tmr_before_smu),
        Step("no-config-restore-after-mode1", "no PCI config-space restore after the mode1 reset "
             "(amdgpu_device_mode1_reset: pci_restore_state)", _step_no_config_restore),
        Step("no-gc-doorbell-init", "S2A doorbell routing for GC skipped (nbio_v4_3_gc_doorbell_init)",
             lambda c: c.skip(nbio.NBIO, "gc_doorbell_init")),
        Step("no-sdma-doorbell-range", "NBIO SDMA doorbell range skipped (nbio_v4_3_sdma_doorbell_range)",
             lambda c: c.skip(nbio.NBIO, "sdma_doorbell_range")),
        Step("no-ih-doorbell-range", "NBIO IH doorbell range skipped (nbio_v4_3_ih_doorbell_range)",
             lambda c: c.skip(nbio.NBIO, "ih_doorbell_range")),
        Step("no-sdma-fini", "SDMA left running at fini (sdma_v6_0_hw_fini)",
             lambda c: c.skip(sdma.SDMA, "fini")),
        Step("no-gfx-fini", "MEC left running at fini (gfx_v11_0_hw_fini)", lambda c: c.skip(gfx.GFX, "fini")),
        Step("no-gmc-fini", "root page directory not cleared at fini (AM warm-boot contract)",
             lambda c: c.skip(gmc.GMC, "fini")),
        Step("warm-boot-ignores-stopped-firmware", "a warm boot chosen from the boot state's clean flag without "
             "checking that the sOS runs and the SMU answers (AM's warm-boot rule; psp_v13_0_is_sos_alive, "
             "smu_v13_0_check_fw_status)", _step_warm_boot_trusts_flags),
        Step("no-mode1-reset", "cold boot over running firmware without the mode1 reset (amdgpu_device_mode1_reset)",
             lambda c: c.skip(am.AMGPU, "_mode1_reset")),
        Step("l1-tlb-off", "MX_L1_TLB_CNTL.ENABLE_L1_TLB 0 on both hubs (mmhub_v3_0_gart_disable turns GART off so)",
             lambda c: (c.set_fields("GC", "GCMC_VM_MX_L1_TLB_CNTL", ENABLE_L1_TLB=0),
                        c.set_fields("MMHUB", "MMMC_VM_MX_L1_TLB_CNTL", ENABLE_L1_TLB=0))),
        Step("l2-cache-off", "VM_L2_CNTL.ENABLE_L2_CACHE 0 on both hubs (mmhub_v3_0_gart_disable)",
             lambda c: (c.set_fields("GC", "GCVM_L2_CNTL", ENABLE_L2_CACHE=0),
                        c.set_fields("MMHUB", "MMVM_L2_CNTL", ENABLE_L2_CACHE=0))),
        Step("cp-halts-on-fault", "CP_DEBUG.CPG_UTCL1_ERROR_HALT_DISABLE left 0 (gfxhub_v3_0_set_fault_enable_default)",
             lambda c: c.set_fields("GC", "CP_DEBUG", CPG_UTCL1_ERROR_HALT_DISABLE=0)),
        Step("gl1c-fault-mode-0", "GL1C_UTCL0_CNTL1.RESP_FAULT_MODE 0 instead of 2 "
             "(gfxhub_v3_0_set_fault_enable_default)",
             lambda c: c.set_fields("GC", "GL1C_UTCL0_CNTL1", RESP_FAULT_MODE=0)),
        Step("no-fault-default-page", "GCVM_L2_PROTECTION_FAULT_CNTL without the *_ENABLE_DEFAULT bits (faults stop "
             "the client instead of going to the default page)",
             lambda c: c.set_fields("GC", "GCVM_L2_PROTECTION_FAULT_CNTL", **{
                 f"{k}_PROTECTION_FAULT_ENABLE_DEFAULT": 0 for k in (
                     "RANGE", "PDE0", "PDE1", "PDE2", "TRANSLATE_FURTHER", "NACK", "DUMMY_PAGE", "VALID", "READ",
                     "WRITE", "EXECUTE")})),
        Step("no-fault-interrupts", "GCVM_CONTEXT0_CNTL without the *_PROTECTION_FAULT_ENABLE_INTERRUPT bits",
             lambda c: c.set_fields("GC", "GCVM_CONTEXT0_CNTL", **{
                 f"{k}_PROTECTION_FAULT_ENABLE_INTERRUPT": 0 for k in (
                     "RANGE", "DUMMY_PAGE", "PDE0", "VALID", "READ", "WRITE", "EXECUTE")})),
        Step("no-allow-gfxoff", "AllowGfxOff never sent (amdgpu_gfx_off_ctrl -> smu_v13_0_gfx_off_control)",
             _step_smu_msg("AllowGfxOff")),
        Step("no-disallow-gfxoff", "DisallowGfxOff never sent before GC accesses (amdgpu_gfx_off_ctrl)",
             _step_smu_msg("DisallowGfxOff")),
        Step("no-thermal-alert", "THM interrupt programming skipped (smu_v13_0_set_irq_state: THM_THERMAL_INT_CTRL/ENA)",
             lambda c: c.skip(smu.SMU, "enable_thermal_alert")),
        Step("no-pci-reset", "no platform reset before booting a GPU whose previous run died before the firmware ran "
             "(amdgpu_device_pci_reset)", lambda c: c.skip(am.AMGPU, "_pci_reset")),
        Step("vbios-reserved-ignored", "the firmware-reserved VRAM taken as the fixed 64 KiB instead of the VBIOS "
             "firmwareinfo's fw_reserved_size_in_kb (amdgpu_ttm_reserve_tmr)",
             lambda c: c.skip(vbios, "read_fw_reserved", result=vbios.FirmwareReserved(64 << 10, "fixed"))),
        # USB-only driver steps (docs/usb.md), judged by the workload's USB phases (Workload.usb_phase)
        Step("usb-vram-push-without-hdp-flush", "open firmware: a ring or kernarg push into VRAM through BAR0 "
             "without the HDP flush after it (hdp_v6_0_flush_hdp; amdrv.placement.VRAMBuffer.push)",
             _step_usb_vram_push_unflushed),
        Step("usb-mqd-page-not-pushed", "stock firmware: a compute queue's MQD page not pushed into the bridge "
             "SRAM before MAP_QUEUES (amdrv.queue.ComputeQueue._write_mqd)", _step_usb_mqd_page_not_pushed),
        Step("usb-copy-without-sentinel-wait", "open firmware: a copy-in chunk copied without waiting for its "
             "window's sentinel to differ from the marker (amdrv.bridge_copy: POLL_REGMEM NE)",
             _step_usb_copy_no_sentinel_wait),
        Step("pagetable-2m-at-1g-level", "a 2 MiB fragment placed at the 1 GiB level (issue 17: the map loop spun "
             "forever; amdgpu_vm_ptes_update's level choice)", _step_pagetable_level),
    ]


# ====================================================================== mutations and the child
@dataclass
class Mutation:
    name: str
    kind: str                  # regs | packets | steps | baseline
    group: str = ""            # for the report: the block
    detail: str = ""
    reg: int | None = None     # dword address
    mode: str = ""
    pkt: tuple | None = None
    step: Step | None = None
    timeout: float | None = None   # overrides the run's --timeout for this one


@dataclass
class Result:
    mutation: str
    kind: str
    group: str
    status: str                # caught | survived | n/a | baseline
    how: str = ""              # caught: what differed first
    hits: int = 0
    seconds: float = 0.0
    sim_errors: list = field(default_factory=list)


def child_run(m: Mutation, kernels: dict[str, bytes], record: bool) -> dict:
    """In the forked child: hooks, the mutation, the workload. Returns a picklable dict."""
    hooks = Hooks()
    hooks.record = record
    hooks.install()
    COST.install()
    t0 = time.perf_counter()
    if m.kind == "regs":
        hooks.reg_mut[m.reg] = m.mode
    elif m.kind == "packets":
        hooks.pkt_mut[m.pkt] = m.mode
    elif m.kind == "steps":
        try:
            m.step.apply(Ctx(hooks))
        except (AttributeError, KeyError, ImportError) as e:
            return {"na": f"the driver has no such target any more: {type(e).__name__}: {e}"}
    # A cache of its own (the discovery copies, hcq's): every run starts as the first on this host, so what a
    # boot reads (BootCost) does not depend on which run stored a copy first.
    root = os.environ.get("DRIVERLESS_CACHE")
    if root:
        os.makedirs(root, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="cache-", dir=root)
    os.environ["DRIVERLESS_CACHE"] = cache
    # and a lock directory: two runs at once each open "their" simulated USB bridge under the same device name
    os.environ["DRIVERLESS_LOCK_DIR"] = os.path.join(cache, "locks")
    os.makedirs(os.environ["DRIVERLESS_LOCK_DIR"])
    w = Workload(kernels, usb=m.name.startswith(USB_STEPS) or m.name == "baseline-usb")
    try:
        outcome = w.run()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    dev = w.bus.slots.get(SLOT)
    errors = [f"{e.block}: {norm(e.message)}" for e in dev.errors] if dev is not None else []
    out = {"outcome": outcome, "hits": hooks.hits, "seconds": time.perf_counter() - t0, "errors": errors}
    if record:
        out["regs"] = {a: (name_of(dev, a), n, hooks.reg_via.get(a), a not in hooks.reg_not_power_on)
                       for a, n in hooks.reg_writes.items()}
        out["packets"] = dict(hooks.pkt_seen)
        out["reg_values"] = {a: sorted(v) for a, v in hooks.reg_values.items()}
    return out


def run_all(muts: list[Mutation], kernels: dict[str, bytes], jobs: int, timeout: float, record=False,
            progress: Callable | None = None) -> list[dict | None]:
    """Each mutation in a forked child, `jobs` at a time; None for a child that timed out (a hang),
    {"crash": ...} for one that died without a result. Results in the order of `muts`."""
    results: list = [None] * len(muts)
    todo = list(range(len(muts)))[::-1]
    running: dict[int, tuple] = {}     # fd -> (index, pid, start, chunks)
    done = 0
    while todo or running:
        while todo and len(running) < jobs:
            i = todo.pop()
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:   # the child
                code = 0
                try:
                    os.close(r)
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, 1)
                    os.dup2(devnull, 2)
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    data = pickle.dumps(child_run(muts[i], kernels, record))
                    with os.fdopen(w, "wb") as f:
                        f.write(data)
                except BaseException:  # noqa: BLE001
                    code = 1
                finally:
                    os._exit(code)
            os.close(w)
            running[r] = (i, pid, time.monotonic(), [])
        now = time.monotonic()
        limit = lambda i: muts[i].timeout or timeout  # noqa: E731
        wait = max(0.05, min(s + limit(i) for i, _, s, _ in running.values()) - now)
        ready, _, _ = select.select(list(running), [], [], wait)
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk:
                running[fd][3].append(chunk)
                continue
            i, pid, start, chunks = running.pop(fd)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            try:
                results[i] = pickle.loads(b"".join(chunks))
            except Exception:  # noqa: BLE001
                results[i] = {"crash": f"the child died without a result (status {status:#x})"}
            done += 1
            if progress:
                progress(done, len(muts), muts[i], results[i])
        now = time.monotonic()
        for fd, (i, pid, start, chunks) in list(running.items()):
            if now - start > limit(i):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(fd)
                del running[fd]
                results[i] = None
                done += 1
                if progress:
                    progress(done, len(muts), muts[i], None)
    return results


USB_STEPS = "step:usb-"      # the mutations whose runs add the USB phases (and are judged against their baseline)


def judge(m: Mutation, base: dict, r: dict | None, timeout: float) -> Result:
    res = Result(m.name, m.kind, m.group, "survived")
    if r is None:
        res.status, res.how = "caught", f"hang: no outcome within {m.timeout or timeout:g} s"
        return res
    if "na" in r:
        res.status, res.how = "n/a", r["na"]
        return res
    if "crash" in r:
        res.status, res.how = "caught", r["crash"]
        return res
    res.hits, res.seconds = r["hits"], r["seconds"]
    got, want = r["outcome"], base["usb_outcome" if m.name.startswith(USB_STEPS) else "outcome"]
    if got == want:
        why, test = expected(m.name), caught_by_test(m.name)
        if not why and m.mode == "drop" and m.reg is not None and _writes_power_on(base, m.reg):
            why = POWER_ON_WHY
        if why:
            res.how = f"expected: {why}"
        elif test:
            res.how = f"caught by {test}, not by the workload"
        res.sim_errors = [e for e in dict.fromkeys(r["errors"]) if e not in set(base["errors"])]
        if m.kind in ("regs", "packets", "steps") and not r["hits"]:
            res.how = "never applied (the mutated item did not occur)"
        return res
    res.status = "caught"
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            res.how = f"{g[0]}: {g[1]}" if g[0] == w[0] else f"{g[0]}: {g[1]} (baseline: {w[0]}: {w[1]})"
            break
    else:
        res.how = (f"{got[len(want)][0]}: {got[len(want)][1]}" if len(got) > len(want) else
                   f"stopped after {got[-1][0] if got else 'nothing'} (baseline goes on to {want[len(got)][0]})")
    return res


def warm_up(chip: str = "navi31") -> None:
    """Everything a run imports, and the register-name map, loaded before forking: children start warm."""
    import importlib
    import pkgutil
    for pkg in ("pcie", "hcq", "amdrv", "gpusim"):
        mod = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
            if ".usb" in info.name or info.name.endswith("__main__"):
                continue
            with contextlib.suppress(Exception):
                importlib.import_module(info.name)
    from gpusim import discovery

    class _Dev:
        pass
    d = _Dev()
    d.chip, d.layout = chip, discovery.layout(chip)
    reg_names(d)


# Survivors the hardware would let pass too in this workload, with the reason (its source, or "assumption"):
# reported as "expected", kept out of nothing (the figures count them), so a reader can tell a gap in the model
# from a field the card ignores here. A survivor the simulator enforces but only a dedicated test reaches does
# not belong here (CAUGHT_BY_TESTS below). Patterns are fnmatch over mutation names.
EXPECTED = {
    "reg-drop:THM.THM_THERMAL_INT_ENA": "its *_CLR bits only clear the detects latched in THM_THERMAL_INT_STATUS, "
    "which nothing reads: upstream never clears them after an alert either (smu_v13_0_irq_process decodes the "
    "source id alone) and still expects every later one, so a latched detect does not hold back the interrupt; "
    "delivery is THM_THERMAL_INT_CTRL's (masks, THERM_IH_HW_ENA: caught when dropped)",
    "reg-flip:THM.THM_THERMAL_INT_ENA": "the inverted value sets THERM_INTH/INTL/TRIGGER_SET and clears nothing; "
    "upstream never writes the *_SET bits and what they do is not public (assumption: nothing the driver sees, "
    "the model ignores them); the missing *_CLR is harmless as for the drop",
    "pkt-*:PM4.SET_SH_REG.COMPUTE_USER_DATA_[4-9]": "beyond the 4 user SGPRs the workload's kernels enable "
    "(COMPUTE_PGM_RSRC2.USER_SGPR; the SPI loads only that many, AMDGPUUsage)",
    "pkt-*:PM4.SET_SH_REG.COMPUTE_USER_DATA_1[0-5]": "beyond the 4 user SGPRs the kernels enable",
    "pkt-*:PM4.RELEASE_MEM/GPU_CLOCK.DATA_[LH][OI]": "DATA_SEL 3 writes the GPU clock; the data dwords are unused "
    "(nvd.h)",
    "pkt-*:PM4.RELEASE_MEM/DATA_32.DATA_HI": "DATA_SEL 1 sends the low 32 bits of the data alone (nvd.h "
    "DATA_SEL; gfx_v11_0_ring_emit_fence picks it for fences without AMDGPU_FENCE_FLAG_64BIT and still fills "
    "DATA_HI): the high dword is never written",
    "pkt-*:PM4.RELEASE_MEM/*.INT_CTXID": "the context id goes with an interrupt, and INT_SEL asks for none",
    "pkt-zero:PM4.SET_SH_REG.COMPUTE_START_[XYZ]": "the driver writes 0 already",
    "pkt-flip:PM4.SET_SH_REG.COMPUTE_START_[XYZ]": "the driver's DISPATCH_DIRECT sets COMPUTE_DISPATCH_INITIATOR."
    "FORCE_START_AT_000 (gc_11_0_0 field): the dispatch starts at workgroup (0,0,0) whatever COMPUTE_START_* hold",
    "pkt-*:PM4.SET_SH_REG.COMPUTE_RESOURCE_LIMITS": "occupancy and placement limits (WAVES_PER_SH, TG_PER_CU, "
    "LOCK_THRESHOLD, SIMD/CU group controls): they decide how many waves run at once and where, not what a "
    "kernel computes; the workload's kernels have no dependencies between workgroups (assumption: no value "
    "stops a dispatch, 0 being 'no limit' for WAVES_PER_SH)",
    "reg-drop:GC.CP_MEC_DOORBELL_RANGE_UPPER": "the power-on upper bound 0xFFC (gc_11_0_0_default.h) covers "
    "every doorbell the driver rings (up to 0x450): a dropped write passes on the card too",
    "reg-drop:GC.CP_HQD_EOP_CONTROL": "the power-on EOP_SIZE 6 (gc_11_0_0_default.h: 128 dwords) holds 16 of the "
    "8-dword end-of-pipe records, and the CP keeps at most entries - 1 events in flight (kfd_mqd_manager_v11.c): "
    "more RELEASE_MEMs than that wait for earlier events to retire (assumption: a full EOP buffer is flow "
    "control, so a smaller one changes when the CP goes on, not what it writes): a dropped write works on the "
    "card too, also for the workload's 17 launches queued without a wait between them (a size too small for one event "
    "hangs: tests/amdrv/test_queue.py::test_eop_size_must_be_programmed)",
    "reg-*:GC.SDMA[01]_FREEZE": "the freeze before sdma_v6_0_soft_reset's GRBM reset stops the engine at a packet "
    "boundary; the ring is disabled and the F32 halted by then, and the reset clears FREEZE (assumption: an "
    "engine reset without the freeze, or with other FREEZE bits, comes up the same)",
    "pkt-*:PM4.ACQUIRE_MEM.POLL_INTERVAL": "paces the CP's re-check only",
    "reg-*:GC.CP_HQD_EOP_BASE_ADDR*": "dropped or inverted: written by MMIO for the KIQ alone (the compute queues' EOP base comes "
    "from their MQD: step:eop-base-not-shifted is caught), and the KIQ signals no end of pipe: its batches end "
    "with a WRITE_DATA to SCRATCH_REG0 (gfx_v11_0_ring_test_ring for the KIQ), so its EOP buffer is never "
    "written (assumption: the KIQ's firmware uses it for nothing else)",
    "reg-*:GC.SCRATCH_REG0": "the 'not done' value written before each KIQ batch (gfx_v11_0_ring_test_ring's "
    "0xCAFEDEAD; inverted 0x35012152, dropped whatever the last batch left); the batch's own number, counted up per batch, differs from what the register holds in the "
    "workload, so the poll is not fooled without it (it would be only by a previous run's last number equal "
    "to the next one)",
    "reg-*:NBIO.BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_*": "the workload never rings a doorbell from the GPU, so "
    "the self-ring aperture (dropped, or inverted: EN 0) decides nothing there (it is modeled: tests/gpusim/test_nbio.py)",
    "reg-*:NBIO.BIF_BX0_INTERRUPT_CNTL": "the IH's dummy read stays on whether the write is dropped (power-on "
    "IH_DUMMY_RD_OVERRIDE 0, assumption: nbio_4_3_0 publishes no defaults; 0 = on without MSI, nbio_v4_3_ih_control) "
    "or inverted (OVERRIDE 1 with IH_DUMMY_RD_EN 1); IH_REQ_NONSNOOP_EN and the rest concern snooping and interrupt "
    "signalling, not where the IH writes (the page itself is caught: BIF_BX0_INTERRUPT_CNTL2)",
    "reg-flip:NBIO.BIF_BX0_DRIVER_SCRATCH_1[01]": "the driver's own record of each clock's top DPM level for the "
    "next warm boot's soft maximum, inverted: above the top level, which the SMU clamps a soft limit to "
    "(assumption, gpusim.smu _limit), and asked in the same messages (SetSoftMaxByFreq) as the right one; a wrong "
    "level recorded leaves the clock capped: tests/amdrv/test_usb_open_costs.py checks each soft maximum at its "
    "top (dropped, the warm boot asks GetMaxDpmFreq again: caught by the boot's cost, BootCost)",
    "reg-*:NBIO.RCC_DEV0_EPF2_STRAP2": "STRAP_NO_SOFT_RESET_DEV0_F2 (nbio_v4_3_init_registers clears it) concerns "
    "PCI function 2, which neither the driver nor the workload uses (assumption: it changes nothing for function 0)",
    "reg-*:NBIO.S2A_DOORBELL_ENTRY_[03]_CTRL": "nbio_v4_3_gc_doorbell_init's two GC entries (AWID 3 and 6); which one "
    "carries the MEC's doorbells is not public, so the model lets either route them (assumption); both lost are "
    "caught (step:no-gc-doorbell-init, tests/amdrv/test_doorbells.py)",
    "reg-*:OSSSYS.IH_MSI_STORM_CTRL": "DELAY spaces MSIs so the ISR is not called too often (ih_v6_0_irq_init's "
    "comment); the driver polls with MSI off, and the entries reach the ring either way",
    "reg-*:OSSSYS.IH_STORM_CLIENT_LIST_CNTL": "marks client 18 (VMC) MSI-storm capable for IH_MSI_STORM_CTRL "
    "(ih_v6_0_irq_init): MSI pacing only; the driver polls with MSI off",
    "reg-*:OSSSYS.IH_INT_FLOOD_CNTL": "interrupt flood control (FLOOD_CNTL_ENABLE, HIGHWATER) throttles interrupt "
    "signalling; the driver polls with MSI off (assumption: flood control does not drop ring entries; upstream "
    "says nothing more than enabling it)",
    "reg-flip:OSSSYS.IH_RB_RPTR": "inverted, the rptr reads 0x3fffc, on no entry boundary, so the IH's full check "
    "(the next wptr equal to rptr) never matches until the driver's first rptr doorbell puts a real value there; "
    "no batch of the workload fills the ring before that (assumption: the card compares the OFFSET bits as "
    "they are)",
    "reg-drop:OSSSYS.IH_RB_BASE_HI": "bits 47:40 of the ring's MC address are 0 (the FB sits below 1 TiB, "
    "MC_VM_FB_LOCATION_BASE), the value the register holds from power-on (assumption: osssys_6_0_0 publishes no "
    "defaults); inverted it is caught",
    "reg-*:NBIO.BIF_BX0_REMAP_HDP_REG_FLUSH_CNTL": "nothing writes the remapped HDP_REG flush page (hdp_v6_0 "
    "flushes through the MEM page only)",
    "reg-flip:GC.SDMA[01]_QUEUE0_PREEMPT": "IB_PREEMPT 1 preempts the indirect buffer the engine runs "
    "(sdma_v6_0_ring_preempt_ib); the write comes with the engine halted before its GRBM soft reset "
    "(sdma_v6_0_soft_reset), when no IB runs (assumption: the reset clears the request)",
    "reg-flip:GC.SDMA[01]_SEM_WAIT_FAIL_TIMER_CNTL": "the time the engine waits on a semaphore before failing it "
    "(sdma_v6_0_gfx_resume writes 0); the workload's SDMA queues use no semaphore packet",
    "reg-flip:GC.CP_MEC_DOORBELL_RANGE_UPPER": "inverted, the upper bound only grows (0x450 becomes 0xBAC within "
    "the field's 0xFFC mask): the range still covers every doorbell the driver rings (up to 0x450), on the card too",
    "reg-flip:GC.SH_MEM_BASES": "the apertures move to other 64 KiB-aligned places in the VA hole (SHARED_BASE "
    "0xDFFF, PRIVATE_BASE 0xEFFF << 48 for VMID 0), still apart and above every VA the driver maps; kernels take "
    "them from src_shared_base/src_private_base (AMDGPUUsage), so flat pointers follow (modeled: tests/gpusim/"
    "test_cp.py::test_flat_lds_and_private_follow_the_vmids_sh_mem_bases)",
    "pkt-zero:PM4.SET_SH_REG.COMPUTE_PGM_RSRC3": "the workload's kernel descriptors hold 0 there (clang-15 for "
    "gfx1100): the driver writes 0 already",
    "pkt-flip:PM4.SET_SH_REG.COMPUTE_PGM_RSRC3": "inverted: TRAP_ON_START/TRAP_ON_END ask for a trap into the "
    "runtime's trap handler (AMDGPUUsage, COMPUTE_PGM_RSRC3 gfx11), and the driver installs none "
    "(RSRC2.TRAP_PRESENT 0, no SQ_SHADER_TBA/TMA; assumption: the SQ takes no trap without one, as for s_trap); "
    "SHARED_VGPR_COUNT is for wave64 only, INST_PREF_SIZE sizes the instruction prefetch and IMAGE_OP concerns "
    "image instructions, which the kernels have none of: nothing a kernel computes changes",
    "reg-drop:GC.SDMA0_QUEUE0_RB_[RW]PTR_HI": "the driver zeroes what holds 0 (the 64-bit byte pointers never "
    "pass 4 GiB)",
    "reg-drop:GC.SDMA[01]_QUEUE0_MINOR_PTR_UPDATE": "the whole bracket dropped: the ring is disabled while its "
    "pointers are written (assumption: what MINOR_PTR_UPDATE holds back is read from sdma_v6_0_gfx_resume's "
    "comment; the clear alone dropped is caught: tests/amdrv/test_sdma_regs.py)",
    "reg-flip:NBIO.REMAP_HDP_MEM_FLUSH_CNTL_page": "any write to the remapped HDP_MEM_FLUSH_CNTL flushes "
    "(hdp_v6_0 writes 0; assumption: the value is not decoded)",
    # GC registers outside GMC whose drop the card lets pass in this workload (reg-gc, issue 11)
    "reg-flip:GC.CP_PQ_WPTR_POLL_CNTL": "inverted, EN is 1 (the driver writes it 0, as gfx_v11_0_kiq_init_register): "
    "the CP also reads each queue's write pointer from its poll address, where the driver writes it before every "
    "doorbell (amdrv.queue._Queue.submit, as amdgpu's wptr_cpu_addr before WDOORBELL64 in "
    "gfx_v11_0_ring_set_wptr_compute), so it reads what the doorbell carries (modeled: "
    "tests/gpusim/test_cp.py::test_write_pointer_polling); the inverted PERIOD paces the polling only",
    "reg-*:GC.CP_HQD_PQ_WPTR_POLL_ADDR*": "dropped or inverted (written by MMIO for the KIQ alone: the compute "
    "queues' comes with MAP_QUEUES): the driver turns write-pointer polling off (CP_PQ_WPTR_POLL_CNTL.EN "
    "0, as gfx_v11_0_kiq_init_register does) and rings each compute queue with a 64-bit doorbell carrying the "
    "write pointer (gfx_v11_0_ring_set_wptr_compute): the CP reads the poll address only while polling is on "
    "(modeled: tests/gpusim/test_cp.py::test_write_pointer_polling)",
    "reg-drop:GC.CP_ME_CNTL": "recover() writes the graphics ME/PFP halted (pulsing their pipe resets); they are "
    "halted from power-on (0x15000000, gc_11_0_0_default.h: ME/PFP/CE_HALT) and nothing in this driver, which "
    "runs no graphics ring, unhalts them",
    "reg-drop:GC.GRBM_CNTL": "READ_TIMEOUT (0xFF from gfx_v11_0_constants_init, 0x18 at power-on) bounds how long "
    "the GRBM waits for a block to answer a register read; every block the workload reads answers (assumption: "
    "only a read of a hung or powered-off block reaches either timeout)",
    "reg-drop:GC.GRBM_GFX_INDEX": "the driver selects SE 0/SA 0/instance 0 (0) to read wave state and broadcast "
    "(0xE0000000) after, as gfxhub_v3_0_set_fault_enable_default does before GL1C_UTCL0_CNTL1/SQG_CONFIG; the "
    "power-on value is that broadcast value (gc_11_0_0_default.h): its index fields are 0 and its broadcast "
    "bits name writes (*_BROADCAST_WRITES, gc_11_0_0_sh_mask.h), so reads go to SE 0/SA 0 too (assumption)",
    "reg-drop:GC.RLC_SRM_CNTL": "the save restore machine (gfx_v11_0_rlc_enable_srm, with the RLC's "
    "save_restore_list_srm firmware) restores the RLC's register list around GFX power gating. The workload's "
    "gfxoff phase powers GFX off and on mid-run, and the model keeps every GC register across GFXOFF (no save or "
    "restore is modelled), so SRM_ENABLE decides nothing there; what the SRM restores at a GFXOFF exit, and "
    "what GFXOFF does with it off, is not public (assumption: GC state survives GFXOFF without it; left at the "
    "power-on 0x2, SRM_ENABLE 0, by the drop)",
    "reg-drop:GC.SDMA[01]_UTCL1_CNTL": "RESP_MODE 3/REDO_DELAY 9 (sdma_v6_0_gfx_resume) set how the SDMA's UTCL1 "
    "answers and re-issues a translation that comes back for a retry; every SDMA access of the workload "
    "translates (assumption: the fields change nothing for a translation that succeeds)",
    "reg-drop:GC.SQG_CONFIG": "XNACK_INTR_MASK (gfxhub_v3_0_set_fault_enable_default: 'Disable SQ XNACK interrupt "
    "for all VMIDs') masks the SQ's interrupts for XNACK replays; gfx1100 has no XNACK (clang-15 refuses the "
    "target ID gfx1100:xnack+) and the workload's faults are answered with the default page "
    "(assumption: no SQ interrupt is raised for them)",
    "reg-flip:GC.SQG_CONFIG": "inverted (0xFFFF2000 to 0xDFFF): XNACK_INTR_MASK 0 unmasks the SQ's XNACK-replay "
    "interrupts, which gfx1100 never raises (no XNACK, as for the drop); the low fields are the SQ's instruction "
    "prefetch controls (GL1H_PREFETCH_PAGE, SQG_ICPFT_EN/CLR, gc_11_0_0_sh_mask.h): assumption: prefetching "
    "changes when instructions are fetched, not what a kernel computes",
    "reg-drop:GC.TCP_CNTL": "golden_settings_gc_11_0 sets bit 29, which gc_11_0_0_sh_mask.h does not name (TCP_CNTL "
    "has no public fields): assumption: a tuning or workaround bit with no effect on what a kernel computes",
    "reg-drop:GC.CP_VMID_RESET": "gfx_v11_0_soft_reset writes 0xFFFFFFFE: RESET_REQUEST for VMIDs 1-15 (bit 0, "
    "VMID 0, clear); every queue and wave of this driver runs in VMID 0, so there is nothing for it to reset, "
    "and the driver's wait for it to read 0 passes when it was never written",
    "reg-drop:GC.SPI_COMPUTE_QUEUE_RESET": "gfx_v11_0_soft_reset writes it for each queue right after "
    "CP_HQD_DEQUEUE_REQUEST 2 (RESET_WAVES), and the GRBM soft reset that follows includes SOFT_RESET_GFX: the "
    "halted wave resident at the workload's second recover is gone either way (assumption: the dequeue's wave "
    "reset and the GFX reset each clear the queue's waves, the SPI reset adding nothing the driver sees)",
    "reg-drop:GC.CP_SOFT_RESET_CNTL": "CMP_HQD_REG_RESET (gfx_v11_0_soft_reset) resets the compute HQD registers; "
    "recover() then writes every HQD register the CP uses for each queue it sets up again (gfx_v11_0_kiq_init_"
    "register's list, the pointers zeroed too), and the other HQDs were never activated (assumption: the bit "
    "resets HQD registers only)",
    # flips of GC registers (issue 11's uncaught flips, decided one by one; docs/fidelity.md "CP" and "NBIO ...")
    "reg-flip:GC.CP_HQD_PQ_WPTR_HI": "written 0 by MMIO for the KIQ alone (the compute queues' comes from their "
    "MQD), inverted 0xFFFFFFFF over a WPTR_LO of 0: a compute ring's write pointer is 64 bits and never masked "
    "(amdgpu_ring_init: ptr_mask all ones with support_64bit_ptrs), so the CP takes it modulo its ring and reads "
    "an empty one, and the first doorbell (WDOORBELL64, gfx_v11_0_ring_set_wptr_compute) replaces both halves "
    "(modeled: tests/gpusim/test_cp.py::test_the_write_pointer_counts_modulo_the_ring_and_the_doorbell_sets_both_"
    "halves)",
    "reg-flip:GC.CP_ME_CNTL": "recover()'s writes 0x143C0000/0x14000000 inverted unhalt the graphics ME and PFP but "
    "with both of their pipes disabled (PIPE0/1_DISABLE), then held in reset (PIPE0/1_RESET): a pipe starts only "
    "out of reset (gfx_v11_0_config_gfx_rs64 releases the resets to start them), so nothing runs, as with the "
    "halt (modeled: tests/gpusim/test_gfx.py::test_me_and_pfp_unhalted_with_their_pipes_held_in_reset_or_disabled_"
    "run_nothing; assumption: a disabled pipe runs nothing either, and the CE and *_STEP bits, for a CE gfx11 "
    "does not use and single-stepping, do nothing to held pipes); the driver runs no graphics ring",
    "reg-flip:GC.CP_VMID_RESET": "0xFFFFFFFE inverted is 0x1: a reset request for VMID 0 (RESET_REQUEST bit 0) "
    "with no PIPE0/1_QUEUES selected, made by gfx_v11_0_soft_reset's sequence after every MEC queue was dequeued "
    "with RESET_WAVES and before the GRBM soft reset of CP/GFX/CPF/CPC/CPG, after which every queue is set up "
    "again (assumption: what a VMID reset clears there, the GRBM reset and the set-up clear too); the request "
    "self-clears either way, which the driver polls for",
    "reg-flip:GC.SPI_COMPUTE_QUEUE_RESET": "1 inverted is 0xFFFFFFFE: RESET (bit 0, the register's only field in "
    "gc_11_0_0_sh_mask.h) clear, so no reset is requested, as with the drop (see its reason); the other 31 bits "
    "name nothing (assumption: they do nothing)",
    "reg-flip:GC.SDMA[01]_UTCL1_CNTL": "0x2C000689 (sdma_v6_0_gfx_resume: RESP_MODE 3, REDO_DELAY 9 over the "
    "power-on 0x2C000288) inverted: RESP_MODE 0, how the UTCL1 answers a translation that comes back for a retry "
    "(upstream: 'Set up RESP_MODE to non-copy addresses'), and the driver's VMID 0 faults are no-retry (CONTEXT0_"
    "CNTL.RETRY_PERMISSION_OR_INVALID_PAGE_FAULT 0); RD/WR_EXE_PERMS_CTRL set, and every page the driver maps "
    "is executable (amdrv.pagetable: READABLE | WRITEABLE | EXECUTABLE by default, no caller passes less), so "
    "an execute-permission check on reads and writes, whatever it checks, passes; the rest are delays "
    "(REDO_DELAY, PAGE_WAIT_DELAY, INVACK_DELAY), L2 request credits (REQL2_CREDIT 0x13, not 0) and forced "
    "invalidations (FORCE_INVALIDATION, FORCE_INVREQ_HEAVY: translations fetched again) (assumption: these "
    "change when an access completes, not where it goes)",
    "pkt-*:PM4.ACQUIRE_MEM.COHER_[SB][IA][ZS]E*": "gfx_v11_0_emit_mem_sync's GCR_CNTL asks for whole-cache "
    "actions (GLI_INV 1 'ALL', GL1_RANGE 0 and GL2_RANGE 0 'ALL': nvd.h), so the COHER_BASE/SIZE range limits "
    "none of them (assumption: with no graphics surface named in COHER_CNTL the range selects nothing else)",
    "pkt-*:PM4.ACQUIRE_MEM.COHER_CNTL": "on gfx10+ the cache actions are GCR_CNTL's (nvd.h); COHER_CNTL [30:0] "
    "names graphics surface-sync (CB/DB) actions and ENGINE_SEL (31) the graphics ME or PFP (assumption: on a "
    "compute queue, which writes through no CB/DB, the dword selects nothing)",
    "pkt-zero:PM4.RELEASE_MEM/DATA_64.DATA_HI": "the driver writes 0 already: the workload's fence values stay "
    "below 2^32 (a flipped DATA_HI is caught)",
    "pkt-zero:SDMA.INDIRECT.CSA_ADDR_*": "the driver writes 0 already, as upstream for VMID 0 or without mid-command-"
    "buffer preemption (sdma_v6_0_ring_emit_ib, amdgpu_sdma_get_csa_mc_addr)",
    "pkt-flip:SDMA.INDIRECT.CSA_ADDR_*": "the context save area is where the engine saves its state when it is "
    "preempted inside the IB (sdma_v6_0_ring_preempt_ib, MCBP); nothing preempts the workload's IBs (assumption: "
    "the engine reads or writes it at no other time)",
    "pkt-zero:SDMA.COPY_LINEAR.PARAMETER": "the driver writes 0 already (no endian swap, sdma_v6_0_emit_copy_"
    "buffer)",
    "step:no-gfx-fini": "the MEC left unhalted at fini has no queue to serve (fini unmapped every compute queue "
    "through the KIQ, as gfx_v11_0_hw_fini unmaps the KCQs before halting, and dequeued the KIQ) and the next "
    "boot resets its pipes before unhalting them (config_mec_rs64, as gfx_v11_0_config_gfx_rs64); assumption: "
    "an idle running MEC changes nothing a later driver sees (amdgpu resets a GPU whose firmware runs anyway: soc21_need_reset_on_init)",
    "step:release-mem-wrong-event": "BOTTOM_OF_PIPE_TS is an end-of-pipe TS event too; what CACHE_FLUSH_AND_INV_TS_EVENT "
    "adds is the CB/DB flush, which compute does not use (assumption; GL2 comes from the GCR bits)",
    # GMC hubs (docs/fidelity.md "GMC, faults and IH"). MMHUB power-on values: mmhub_2_3_0_default.h, the
    # nearest published MMHUB defaults (equal to gc_11_0_0_default.h's for these): assumption for MMHUB 3.0.x.
    "reg-*:*MC_VM_AGP_*": "AGP is reached only inside the system aperture (gfxhub_v2_1 widens LOW/HIGH to cover "
    "it for that) and the driver's aperture is exactly the FB: the power-on window (BOT/TOP/BASE 0, "
    "gc_11_0_0_default.h: [0, 16 MiB), what a dropped BOT or an inverted 0x00FFFFFF leaves), the disabled one "
    "(BOT 0xFFFFFF above TOP 0: BASE unused) and an inverted TOP ([0xFFFF_FF00_0000, top]) all lie outside it",
    "reg-*:*MC_VM_SYSTEM_APERTURE_DEFAULT_ADDR_*": "the system aperture's default page answers VMID 0 addresses "
    "inside the aperture but in neither the FB nor the AGP window; init_system_aperture_regs makes the aperture "
    "exactly the FB, so no access reaches it (the model honours it: tests/gpusim/test_gmc.py)",
    "reg-drop:GC.GCMC_VM_SYSTEM_APERTURE_HIGH_ADDR": "no GC-hub client of this driver takes a physical FB address "
    "(queues, kernels, SDMA run on VRAM_VA/SYSTEM_VA through the VMID 0 page table; upstream's kernel BOs use FB "
    "addresses, this driver's do not): the empty aperture HIGH 0 leaves changes no access (an inverted HIGH, "
    "which covers the VA windows, is caught; the MMHUB's, whose PSP/SMU/IH use FB addresses, is caught)",
    "reg-*:GC.GCMC_VM_SYSTEM_APERTURE_LOW_ADDR": "no GC-hub client of this driver takes a physical FB address: "
    "LOW 0 (dropped) widens the aperture below the FB, where it sends nothing; inverted it lies above HIGH "
    "(an empty aperture)",
    "reg-drop:MMHUB.MMMC_VM_SYSTEM_APERTURE_LOW_ADDR": "LOW at its power-on 0 (assumption, see above) widens the "
    "aperture to [0, FB end]: the PSP/SMU/IH FB addresses stay physical, the MMHUB's VA-window addresses lie above "
    "(both halves dropped is caught: tests/amdrv/test_gmc.py::test_without_the_system_aperture_the_fb_is_not_"
    "reached_physically)",
    "reg-*:*VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32": "LO32 at 0 (dropped: power-on; or inverted from 0xFFFFFFFF) "
    "leaves END at page 0xF_0000_0000 (HI32 0xF): above every VA the driver maps (the host window ends at page "
    "0x3_0000_0000); both halves dropped is caught (tests/amdrv/test_gmc.py::test_a_dropped_hub_write_leaves_"
    "engines_without_their_memory)",
    "reg-drop:MMHUB.MMVM_CONTEXT0_PAGE_TABLE_START_ADDR_*": "the driver writes 0, the power-on value (assumption, "
    "see above; GC's is the power-on rule's)",
    "reg-*:*VM_L2_CNTL2": "INVALIDATE_ALL_L1_TLBS/INVALIDATE_L2_CACHE at hub enable (init_cache_regs, modelled): the "
    "VMID 0 flush ending the same enable (gmc_v11_0_gart_enable) drops the same entries of the one context the "
    "driver uses; the other fields (INVALIDATE_CACHE_MODE, DISABLE_INVALIDATE_PER_DOMAIN, L2_PTE_CACHE_VMID_MODE, "
    "PDE_CACHE_EFFECTIVE_SIZE) shape invalidation and cache use, not which memory an access reaches (assumption)",
    "reg-*:*VM_L2_CNTL[35]": "L2 cache organisation (BANK_SELECT, BIGK/SMALLK fragment size, associativity, "
    "effective size): which entries the L2 keeps, not which memory an access reaches (assumption: no published "
    "effect on translation results)",
    "reg-*:*VM_L2_CNTL4": "VMC_TAP_PDE/PTE_REQUEST_PHYSICAL: upstream sets them only for a GPU connected to the CPU "
    "over xGMI (gfxhub_v1_0/mmhub_v1_7_init_cache_regs, gmc.xgmi.connected_to_cpu) and clears them on PCIe; the "
    "power-on 1 (0xC1) on a PCIe card is taken to reach the same tables (assumption: no published effect); the "
    "other fields are cache policy",
    "reg-*:*VM_L2_CONTEXT1_IDENTITY_APERTURE_*": "an aperture of contexts 1-15 (the register's name; "
    "L2_CNTL.CONTEXT1_IDENTITY_ACCESS_MODE): the driver runs everything in VMID 0, where the system aperture "
    "decides; upstream disables it (LOW above HIGH, disable_identity_aperture)",
    "reg-*:*VM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_*": "the offset of the contexts 1-15 identity aperture, which "
    "the driver never uses (VMID 0 only)",
    "reg-*:*VM_L2_PROTECTION_FAULT_CNTL2": "ACTIVE_PAGE_MIGRATION_PTE_READ_RETRY and the PRT/retry-fault interrupt "
    "controls: retry faults and page migration only; VMID 0 faults are no-retry (CONTEXT0_CNTL."
    "RETRY_PERMISSION_OR_INVALID_PAGE_FAULT 0, enable_system_domain), no PRT page is mapped",
    "reg-drop:MMHUB.MMVM_L2_PROTECTION_FAULT_CNTL": "the driver sets the ENABLE_DEFAULT bits, all set at power-on "
    "(0x3ffffffc; assumption, see above): the value written is the power-on value",
    "reg-drop:MMHUB.MMVM_L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32": "the dummy page's bus address is below 2^44: the "
    "driver writes 0, the power-on value (assumption, see above)",
    "reg-*:MMHUB.MMVM_L2_BANK_SELECT_RESERVED_CID2": "RESERVED_CACHE_PRIVATE_INVALIDATION invalidates the private "
    "(reserved) cache of the clients this register's RESERVED_READ/WRITE_CLIENT_ID and ENABLE name "
    "(gmc_v11_0_flush_vm_hub: 'additional private vm invalidation'); ENABLE is 0 at power-on (assumption, see "
    "above) and nobody sets it, so no client has a private cache to invalidate (an inverted write enables it for "
    "client id 0x1FF, which no MMHUB client has: mmhub_client_ids_v3_0_0)",
}


# A register drop is also expected, with no entry above, when every write the baseline made to the register
# is the register's power-on value as upstream publishes it (gc_11_0_0_default.h, through the generated
# table): the drop leaves the same value on a cold boot, and on a warm boot the previous run's (the same).
POWER_ON_WHY = ("every write is the register's power-on value (gc_11_0_0_default.h): the drop leaves the same "
                "value, on the card too")


def _writes_power_on(base: dict, addr: int) -> bool:
    entry = base["regs"].get(addr) or base["regs"].get(str(addr))
    return bool(entry and len(entry) > 3 and entry[3])


def expected(name: str) -> str | None:
    return next((why for pat, why in EXPECTED.items() if fnmatch.fnmatchcase(name, pat)), None)


# Survivors of the workload that the simulator DOES hold the driver to, shown by a dedicated test (named
# here) in a setting the workload does not reach. Not EXPECTED (the card would not let them pass there) and
# not caught: the figures count them as survivors; the report lists them apart, with the test.
CAUGHT_BY_TESTS = {
    "step:fini-no-hqd-dequeue": "tests/amdrv/test_queue.py::test_fini_dequeues_the_compute_queues (the workload's "
    "next boot maps its queue over the HQD left active, and the KIQ's firmware takes an active slot over: an "
    "assumption, gpusim.cp MAP_QUEUES)",
    "step:no-psp-bootloader-ready-wait": "tests/amdrv/test_psp.py::test_a_driver_that_does_not_wait_for_the_bootloader"
    "_fails (the PSP first after power-on; in the workload's boots NBIO, GMC and IH init read registers first, "
    "and the model's start-up delay, an assumption, has passed by then; no honest phase reaches it sooner: on a "
    "card the driver loads seconds after power-on, sleeps SMU13_MODE1_RESET_WAIT_TIME_IN_MS (500 ms, "
    "smu_v13_0_0_mode1_reset) after a mode1 reset and the PCI core waits after a platform reset, while "
    "psp_v13_0_wait_for_bootloader allows the bootloader 1 s)",
    "step:no-rlc-autoload-wait": "tests/amdrv/test_queue.py::test_cold_boot_needs_the_wait_for_the_rlc_autoload",
    "step:vbios-reserved-ignored": "tests/amdrv/test_vbios.py::test_a_driver_that_ignores_the_vbios_fails_where_the_"
    "firmware_keeps_more (the workload's board keeps 8 MiB, which the boot region below a fixed 64 KiB does not "
    "reach with what it uses: right on such a card too)",
}


def caught_by_test(name: str) -> str | None:
    return next((why for pat, why in CAUGHT_BY_TESTS.items() if fnmatch.fnmatchcase(name, pat)), None)


# ====================================================================== building the mutation lists
def _group(ip: str, name: str) -> str:
    head = name.split("_")[0]
    return f"{ip}/{head}"


def apart_registers(base: dict) -> dict[str, str]:
    """{"IP.NAME": reason} for the registers the baseline wrote that APART counts apart (apart_reason)."""
    values = base.get("reg_values", {})
    out = {}
    for addr, ((ip, name), *_) in base["regs"].items():
        why = apart_reason(name, values.get(addr))
        if why and not any(p.match(name) for p in EXCLUDE):
            out[f"{ip}.{name}"] = why
    return dict(sorted(out.items()))


def register_mutations(base: dict, modes=("drop", "flip")) -> tuple[list[Mutation], list[str]]:
    muts, excluded = [], []
    for addr, ((ip, name), n, via, *_) in sorted(base["regs"].items(), key=lambda kv: (kv[1][0], kv[0])):
        if any(p.match(name) for p in EXCLUDE):
            excluded.append(name)
            continue
        detail = f"{n} write(s){' via ' + via + ' index/data' if via else ''}, dword {addr:#x}"
        for mode in modes:
            muts.append(Mutation(f"reg-{mode}:{ip}.{name}", "regs", _group(ip, name), detail, reg=addr, mode=mode))
    return muts, excluded


def packet_mutations(base: dict, modes=("zero", "flip")) -> list[Mutation]:
    muts = []
    for key, n in sorted(base["packets"].items()):
        engine, pkt, fld = key
        for mode in modes:
            muts.append(Mutation(f"pkt-{mode}:{engine}.{pkt}.{fld}", "packets", f"{engine}/{pkt.split('/')[0]}",
                                 f"{n} packet(s)", pkt=key, mode=mode))
    return muts


def step_mutations() -> list[Mutation]:
    return [Mutation(f"step:{s.name}", "steps", "steps", s.what, step=s) for s in _steps()]


# ====================================================================== the report
def summary(results: list[Result], excluded: list[str], apart: dict[str, str] | None = None) -> list[str]:
    """The figures. Register drops are given twice: over every register left after issue 11's own exclusion
    (EXCLUDE), and also without the registers APART counts apart (`apart`: {"IP.NAME": reason}; None: decided
    from the names alone, as for a --json that did not record them)."""
    lines = []

    def fig(kind, prefix=""):
        rs = [r for r in results if r.kind == kind and r.mutation.startswith(prefix) and r.status != "n/a"]
        c = sum(r.status == "caught" for r in rs)
        return c, len(rs)

    drops = [r for r in results if r.kind == "regs" and r.mutation.startswith("reg-drop:")]
    if drops:
        regs = {r.mutation.split(":", 1)[1]: r.status == "caught" for r in drops}
        flips = {r.mutation.split(":", 1)[1]: r.status == "caught"
                 for r in results if r.mutation.startswith("reg-flip:")}
        c, n = sum(regs.values()), len(regs)
        lines.append(f"registers caught {c} of {n} ({100 * c / max(n, 1):.0f}%) by dropping their writes"
                     f" ({len(set(excluded))} left out: invalidation-engine ranges 0-16, GDS/GWS/OA of VMIDs 1-15)")
        if apart is None:
            apart = {k: w for k in regs if (w := apart_reason(k.split(".", 1)[1]))}
        rest = {k: v for k, v in regs.items() if k not in apart}
        c2, n2 = sum(rest.values()), len(rest)
        lines.append(f"registers caught {c2} of {n2} ({100 * c2 / max(n2, 1):.0f}%) by dropping their writes when "
                     f"also leaving out the {n - n2} that concern contexts 1-15 or the graphics ME alone (APART: "
                     f"identity aperture, CP_VMID_RESET, CP_ME_CNTL; still mutated and listed)")
        held = sum(r.status == "caught" or r.how.startswith(("expected", "caught by")) for r in drops)
        lines.append(f"register drops the simulator holds the driver to, or that the card lets pass too: {held} of "
                     f"{n} ({100 * held / max(n, 1):.0f}%): caught by the workload, caught by a dedicated test "
                     f"(CAUGHT_BY_TESTS) or expected (EXPECTED, the power-on rule)")
        if flips:
            cf = sum(flips.values())
            either = sum(regs.get(k, False) or flips.get(k, False) for k in set(regs) | set(flips))
            lines.append(f"registers caught {cf} of {len(flips)} ({100 * cf / max(len(flips), 1):.0f}%) by inverting "
                         f"their values; {either} of {len(set(regs) | set(flips))} by one or the other")
    for kind, label in (("packets", "packet-field mutations"), ("steps", "named steps")):
        c, n = fig(kind)
        if n:
            lines.append(f"{label} caught {c} of {n} ({100 * c / n:.0f}%)")
    surv = [r for r in results if r.status == "survived"]
    exp = sum(r.how.startswith("expected") for r in surv)
    by_test = sum(r.how.startswith("caught by") for r in surv)
    if surv:
        lines.append(f"survivors {len(surv)}: {exp} expected (the card ignores them here too), {by_test} caught by a "
                     f"dedicated test instead of the workload, {len(surv) - exp - by_test} not caught")
    return lines


def print_table(results: list[Result], out=sys.stdout) -> None:
    w = max([len(r.mutation) for r in results] + [10])
    for r in results:
        how = r.how
        if r.status == "survived" and r.sim_errors:
            how = (how + "; " if how else "") + "simulator logged: " + r.sim_errors[0]
        print(f"{r.mutation:<{w}}  {r.status:<8}  {how}"[:w + 200], file=out)


def survived_by_group(results: list[Result]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in results:
        if r.status == "survived":
            out.setdefault(r.group, []).append(r.mutation.split(":", 1)[1])
    return out


def markdown(results: list[Result], lines: list[str], jobs: int, seconds: float,
             apart: dict[str, str] | None = None) -> str:
    """The "Mutation figures" body for docs/fidelity.md: date, commit, figures, survivors by block."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
    except OSError:
        commit = "?"
    out = [f"Full run of {time.strftime('%Y-%m-%d', time.gmtime())} at commit {commit} (`python -m tools.mutate "
           f"-j {jobs}`, {len(results)} mutations, {seconds / 60:.0f} min):", ""]
    out += [f"- {x}" for x in lines]
    aside = ("expected", "caught by")
    surv = survived_by_group([r for r in results if not r.how.startswith(aside)])
    out += ["", "Survivors, by block (`reg-drop`/`reg-flip`: dropping / inverting every write to the register; "
            "`pkt-zero`/`pkt-flip`: that packet dword; `step`: the named driver step):", ""]
    modes: dict[str, list[str]] = {}
    for r in results:
        if r.status == "survived" and not r.how.startswith(aside):
            modes.setdefault(r.mutation.split(":", 1)[1], []).append(r.mutation.split(":", 1)[0])
    for g, names in sorted(surv.items()):
        items = []
        for n in dict.fromkeys(names):
            m = modes[n]
            both = len(m) == 2 or m[0] == "step"
            short = n.split(".", 1)[1] if "." in n and g != "steps" else n
            items.append(f"`{short}`" if both else f"`{short}` ({m[0].split('-', 1)[1]} only)")
        out.append(f"- {g}: {', '.join(items)}")
    logged = [r for r in results if r.status == "survived" and r.sim_errors]
    if logged:
        out += ["", "Survivors the simulator logged an error for (it noticed, and let the outcome stand):", ""]
        out += [f"- `{r.mutation}`: {r.sim_errors[0][:160]}" for r in logged]
    exp = [r.mutation for r in results if r.status == "survived" and r.how.startswith("expected")]
    if exp:
        out += ["", f"Expected survivors ({len(exp)}, `EXPECTED` in tools/mutate.py: the card ignores these here):", ""]
        first = [next((p for p in EXPECTED if fnmatch.fnmatchcase(n, p)), None) for n in exp]
        for pat, why in EXPECTED.items():
            k = first.count(pat)
            if k:
                out.append(f"- `{pat}` ({k}): {why}")
        auto = [n.split(":", 1)[1] for n, p in zip(exp, first) if p is None]
        if auto:
            out.append(f"- {', '.join(f'`{n}`' for n in auto)} ({len(auto)}, dropped): {POWER_ON_WHY}")
    by_test = [r for r in results if r.status == "survived" and r.how.startswith("caught by")]
    if by_test:
        out += ["", f"Survivors a dedicated test catches ({len(by_test)}, `CAUGHT_BY_TESTS` in tools/mutate.py: the "
                "simulator enforces them, the workload does not reach the case; counted as survivors above):", ""]
        out += [f"- `{r.mutation}`: {r.how.removeprefix('caught by ').removesuffix(', not by the workload')}"
                for r in by_test]
    if apart is None:
        apart = {k: w for r in results if r.mutation.startswith("reg-drop:")
                 for k in [r.mutation.split(":", 1)[1]] if (w := apart_reason(k.split(".", 1)[1]))}
    if apart:
        out += ["", f"Counted apart in the second register-drop figure ({len(apart)}, `APART` in tools/mutate.py: "
                "registers of contexts 1-15 or of the graphics ME, which the driver never uses; still mutated, "
                "their results above):", ""]
        for why in dict.fromkeys(apart.values()):
            names = [k for k, w in apart.items() if w == why]
            out.append(f"- {', '.join(f'`{n}`' for n in names)}: {why}")
    na = [r.mutation for r in results if r.status == "n/a"]
    if na:
        out += ["", "Not applicable (the driver no longer has the target): " + ", ".join(f"`{n}`" for n in na)]
    return "\n".join(out) + "\n"


# ====================================================================== API and CLI
class MutateError(RuntimeError):
    """The unmutated workload fails or is not deterministic: nothing can be measured against it."""


def _agreeing_pair(name: str, what: str, kernels: dict[str, bytes], jobs: int, timeout: float,
                   record: bool = False) -> dict:
    """Two unmutated runs of Mutation(name) (in parallel with jobs >= 2): they must finish, agree and not fail
    (`what` names the workload in the errors); returns the first."""
    b = Mutation(name, "baseline")
    r1, r2 = run_all([b, b], kernels, max(1, min(jobs, 2)), timeout, record=record)
    for r in (r1, r2):
        if r is None or "outcome" not in r:
            raise MutateError(f"the unmutated {what} did not finish: "
                              f"{'no outcome within %g s' % timeout if r is None else r.get('crash')}")
    if r1["outcome"] != r2["outcome"]:
        diff = [f"{x} != {y}" for x, y in zip(r1["outcome"], r2["outcome"]) if x != y]
        raise MutateError(f"two runs of the unmutated {what} disagree; it is not deterministic: " + "; ".join(diff[:3]))
    bad = [o for o in r1["outcome"] if o[1].startswith("error")]
    if bad:
        raise MutateError(f"the unmutated {what} fails: {bad[0][0]}: {bad[0][1]}")
    return r1


def baseline(kernels: dict[str, bytes], jobs: int = 2, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Two recorded unmutated runs; they must agree and must not fail."""
    return _agreeing_pair("baseline", "workload", kernels, jobs, timeout, record=True)


def usb_baseline(kernels: dict[str, bytes], jobs: int = 2, timeout: float = DEFAULT_TIMEOUT) -> list:
    """The outcome of two unmutated runs with the USB phases (they must agree and not fail): what the step:usb-*
    mutations are judged against. Run only when one of them is (run())."""
    return _agreeing_pair("baseline-usb", "workload with the USB phases", kernels, jobs, timeout)["outcome"]


def mutations(base: dict, kind: str = "all", only=None) -> tuple[list[Mutation], list[str]]:
    """The mutations of a kind ("regs", "packets", "steps", "all") for this baseline, filtered by
    fnmatch patterns; and the register names left out of the count."""
    muts: list[Mutation] = []
    excluded: list[str] = []
    if kind in ("regs", "all"):
        rm, excluded = register_mutations(base)
        muts += rm
    if kind in ("packets", "all"):
        muts += packet_mutations(base)
    if kind in ("steps", "all"):
        muts += step_mutations()
    if only:
        muts = [m for m in muts if any(fnmatch.fnmatchcase(m.name, p) for p in only)]
    return muts, excluded


def run(muts: list[Mutation], base: dict, kernels: dict[str, bytes], jobs: int = 2,
        timeout: float = DEFAULT_TIMEOUT, progress: Callable | None = None) -> list[Result]:
    if any(m.name.startswith(USB_STEPS) for m in muts) and "usb_outcome" not in base:
        base["usb_outcome"] = usb_baseline(kernels, jobs, timeout)
    raw = run_all(muts, kernels, jobs, timeout, progress=progress)
    return [judge(m, base, r, timeout) for m, r in zip(muts, raw)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.mutate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("regs", "packets", "steps", "all"), default="all")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="mutation names or fnmatch patterns")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per run; longer is a hang")
    ap.add_argument("--json", metavar="FILE", help="write every result (and the baseline) here")
    ap.add_argument("--list", action="store_true", help="list the mutations (after the baseline) and stop")
    ap.add_argument("--survived", action="store_true", help="print only the survivors, grouped by block")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--markdown", metavar="FILE", help="write the docs/fidelity.md 'Mutation figures' body here")
    ap.add_argument("--report", metavar="JSON", help="no run: table, figures and --markdown from an earlier --json")
    a = ap.parse_args(argv)
    if a.report:
        d = json.loads(Path(a.report).read_text())
        results = [Result(**r) for r in d["results"]]
        for r in results:   # EXPECTED and CAUGHT_BY_TESTS may have changed since
            if r.status == "survived" and (not r.how or r.how.startswith(("expected", "caught by"))):
                why, test = expected(r.mutation), caught_by_test(r.mutation)
                if not why and r.mutation in d.get("power_on_drops", ()):
                    why = POWER_ON_WHY
                r.how = f"expected: {why}" if why else f"caught by {test}, not by the workload" if test else ""
        print_table(results)
        lines = summary(results, d.get("excluded", []), d.get("apart")) + d["summary"][-1:]
        print("\n".join(lines))
        if a.markdown:
            secs = float(d["summary"][-1].split(" in ")[1].split(" s")[0]) if " in " in d["summary"][-1] else 0
            Path(a.markdown).write_text(markdown(results, lines[:-1], a.jobs, secs, d.get("apart")))
        return 0

    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        tmp = Path(tmp)
        setup_env(tmp)
        kernels = build_kernels(tmp)
        warm_up()
        t0 = time.perf_counter()
        try:
            base = baseline(kernels, a.jobs, a.timeout)
        except MutateError as e:
            print(f"mutate: {e}", file=sys.stderr)
            return 2
        if not a.quiet:
            print(f"baseline: {base['seconds']:.2f} s per workload run, {len(base['regs'])} registers written, "
                  f"{len(base['packets'])} packet fields seen", file=sys.stderr)
        muts, excluded = mutations(base, a.kind, a.only)
        if a.only:
            excluded = []
        if a.list:
            for m in muts:
                print(f"{m.name}  {m.detail}")
            return 0

        def progress(done, total, m, r):
            if not a.quiet:
                print(f"[{done}/{total}] {m.name}", file=sys.stderr, flush=True)
        try:
            results = run(muts, base, kernels, a.jobs, a.timeout, progress)
        except MutateError as e:
            print(f"mutate: {e}", file=sys.stderr)
            return 2
        elapsed = time.perf_counter() - t0

    if a.survived:
        for g, names in sorted(survived_by_group(results).items()):
            print(f"{g}: {', '.join(names)}")
    else:
        print_table(results)
    apart = apart_registers(base)
    lines = summary(results, excluded, apart)
    lines.append(f"{len(results)} mutations in {elapsed:.0f} s with -j {a.jobs}")
    print("\n".join(lines))
    if a.markdown:
        Path(a.markdown).write_text(markdown(results, lines[:-1], a.jobs, elapsed, apart))
    if a.json:
        Path(a.json).write_text(json.dumps({
            "baseline": base["outcome"], "baseline_seconds": base["seconds"], "summary": lines,
            "excluded": sorted(set(excluded)), "apart": apart,
            "power_on_drops": [f"reg-drop:{ip}.{name}" for (ip, name), _, _, *p in base["regs"].values() if p and p[0]],
            "results": [r.__dict__ for r in results],
            "survived_by_group": survived_by_group(results)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
