"""The state fuzzer: kill the driver anywhere, then prove a fresh process gets correct results.

    DRIVERLESS_FIRMWARE_DIR=/lib/firmware/amdgpu python -m tools.fuzz.state --seed 1 --budget 1000
     python -m tools.fuzz.state --device am:sim:usb ...      # through the simulated USB bridge, its link dropped
    python -m tools.fuzz.state --case 17 --from-state F     # replay one case on the GPU state a finding kept
    python -m tools.fuzz.state --sweep power-on --budget 750  # every access of a cold boot from power-on

Each case runs two processes (forked from this one, so no import cost) on one simulated GPU kept in its
state file (am:sim, as every entry point keeps it: amdrv.device_spec):
1. the victim opens the GPU (a forced cold boot in some cases), loads a kernel, runs a random sequence of
   launches, copies (BAR0 and SDMA), graph builds and replays, and closes it (fini). At a point chosen by
   access count (MMIO, bulk BAR and config accesses, counted on its pcie.PCIFunction) in one of those
   phases, it dies: SIGKILL, with the simulated GPU saved as it stands at that access, as a real GPU stays
   powered and keeps its state when its driver dies (without the save, a SIGKILL would also roll the
   simulated GPU back to its last save). On am:sim:usb the bridge's USB link drops there instead
   (gpusim.usb_bridge "drop"): the victim must fail with a clear error and exit.
2. the verifier, a fresh process, opens the same GPU, and must compute correct results: a kernel launch,
   copies both ways through SDMA and BAR0, and a graph replay, checked against numpy. It then closes the
   GPU with fini, or exits without (a third of the cases), so the next victim starts warm or cold.

The kill point is reproducible from the seed: each case draws its plan (phases, the phase it dies in, the
access it dies at) from common.case_rng(seed, case, "state") only. A finding keeps the GPU state the case started
from (DIR/findings/case-N.state) and prints the command that replays it; the GPU is then powered off
(state deleted) so the run goes on. The table counts recoveries per phase the kill landed in, the boot
kind the verifier got (cold, cold after a mode1 or PCI reset, warm), and boot times.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.fuzz import common

OPS = ("launch", "copy", "graph")
# About how many counted accesses each phase takes (measured on am:sim, Navi31): the kill offset is drawn
# below this. A longer phase is not fully covered; a shorter one passes the kill on to the next phase.
# (am:sim: a cold boot with the hcq setup after it 900, 1010 behind a mode1 reset, a warm one 540; am:sim:usb:
# cold 16000, warm 2600.)
PHASE_ACCESSES = {"open": 1000, "program": 13, "launch": 26, "copy": 62, "graph": 74, "close": 180}
PHASE_ACCESSES_USB = {"open": 16000, "program": 45, "launch": 52, "copy": 96, "graph": 144, "close": 369}
_COUNTED = ("mmio_reads", "mmio_writes", "bulk_read_bytes", "bulk_write_bytes", "config_reads", "config_writes")
N = 256   # work-items of the check kernel


@dataclass(frozen=True)
class Plan:
    cold: bool                 # the victim forces a cold boot
    ops: tuple[str, ...]       # between "program" and "close"
    kill_phase: int            # index into phases
    kill_offset: int           # accesses into that phase
    verifier_fini: bool        # the verifier closes with fini (else exits without)

    @property
    def phases(self) -> tuple[str, ...]:
        return ("open", "program", *self.ops, "close")

    def describe(self) -> str:
        return (f"{'cold ' if self.cold else ''}{' '.join(self.phases)}; dies at access {self.kill_offset} of "
                f"{self.phases[self.kill_phase]}")


def make_plan(rng, usb: bool) -> Plan:
    ops = tuple(rng.choice(OPS) for _ in range(rng.randint(1, 3)))
    phases = ("open", "program", *ops, "close")
    # boot and fini hold most of the state the next boot depends on: half the kills land in them
    kill = rng.choice((0, 0, len(phases) - 1)) if rng.random() < 0.5 else rng.randrange(len(phases))
    est = (PHASE_ACCESSES_USB if usb else PHASE_ACCESSES)[phases[kill]]
    return Plan(cold=rng.random() < 0.25, ops=ops, kill_phase=kill, kill_offset=rng.randrange(1, est + 1),
                verifier_fini=rng.random() < 2 / 3)


# ------------------------------------------------------------------------------------ the check kernel
def check_kernel() -> bytes:
    """out[i] = a[i] * k + i over work-groups of 64: built with our assembler, so no LLVM is needed."""
    from rdna3 import assemble
    from rdna3.codeobj import KernelArg, KernelSpec, write_code_object
    code = assemble("""
        s_load_b128 s[4:7], s[0:1], 0x0
        s_load_b32 s8, s[0:1], 0x10
        s_lshl_b32 s9, s2, 6
        v_add_nc_u32 v1, s9, v0
        v_lshlrev_b32 v2, 2, v1
        s_waitcnt lgkmcnt(0)
        global_load_b32 v3, v2, s[6:7]
        s_waitcnt vmcnt(0)
        v_mul_lo_u32 v3, v3, s8
        v_add_nc_u32 v3, v3, v1
        global_store_b32 v2, v3, s[4:5]
        s_endpgm
    """, arch="gfx1100")
    args = [KernelArg(0, 8, "global_buffer", "global"), KernelArg(8, 8, "global_buffer", "global"),
            KernelArg(16, 4, "by_value")]
    return write_code_object([KernelSpec("axpi", code, args=args)])


def expected(a: np.ndarray, k: int) -> np.ndarray:
    return (a * np.uint32(k) + np.arange(len(a), dtype=np.uint32)).astype(np.uint32)


class Work:
    """The operations of a phase on an open hcq device, each checking its own results."""

    def __init__(self, dev, code: bytes, rng):
        self.dev, self.code, self.rng = dev, code, rng
        self.prog = None

    def data(self) -> np.ndarray:
        return np.frombuffer(self.rng.randbytes(4 * N), np.uint32).copy()

    def check(self, what: str, got: bytes, want: np.ndarray) -> None:
        g = np.frombuffer(got, np.uint32)
        if not np.array_equal(g, want):
            bad = int(np.flatnonzero(g != want)[0])
            raise AssertionError(f"{what}: word {bad} is {g[bad]:#x}, expected {want[bad]:#x}")

    def program(self) -> None:
        self.prog = self.dev.program(self.code, "axpi")

    def launch(self) -> None:
        a, k = self.data(), self.rng.randrange(1 << 16)
        src, out = self.dev.alloc(4 * N), self.dev.alloc(4 * N)
        self.dev.copyin(src, a)
        self.prog(out, src, k, global_size=(N // 64,), local_size=(64,), wait=True)
        self.check("kernel result", self.dev.copyout(out), expected(a, k))

    def copy(self) -> None:
        a = self.data()
        buf = self.dev.alloc(4 * N)
        direct = self.dev.direct_max
        try:
            self.dev.direct_max = 0 if self.rng.random() < 0.5 else direct   # SDMA, or BAR0 where it reaches
            self.dev.copyin(buf, a)
            self.check("copy round trip", self.dev.copyout(buf), a)
            other = self.dev.alloc(4 * N)
            self.dev.copy(other, buf)
            self.check("device copy", self.dev.copyout(other), a)
        finally:
            self.dev.direct_max = direct

    def graph(self) -> None:
        a, b, k = self.data(), self.data(), self.rng.randrange(1 << 16)
        sa, sb, out = self.dev.alloc(4 * N), self.dev.alloc(4 * N), self.dev.alloc(4 * N)
        self.dev.copyin(sa, a)
        self.dev.copyin(sb, b)
        g = self.dev.graph()
        x = g.var("x")
        g.exec(self.prog, out, x, k, global_size=(N // 64,), local_size=(64,))
        g(x=sa, wait=True)
        self.check("graph build", self.dev.copyout(out), expected(a, k))
        g(x=sb, wait=True)
        self.check("graph replay", self.dev.copyout(out), expected(b, k))


# ------------------------------------------------------------------------------------ in the children
class KillSwitch:
    """Counts the accesses of every pcie.PCIFunction this process opens; `fire` runs at access `at`."""

    def __init__(self):
        self.count, self.at, self.fire = 0, None, None

    def install(self) -> None:
        from pcie import interface
        switch, base = self, interface.AccessCounters

        class Counting(base):
            def __setattr__(self, name, value):
                if name in _COUNTED and value > getattr(self, name, value):
                    switch.count += 1
                    if switch.at is not None and switch.count >= switch.at:
                        switch.at = None
                        switch.fire()
                object.__setattr__(self, name, value)

        init = interface.PCIFunction.__init__

        def counted_init(fn, address):
            init(fn, address)
            fn.counters = Counting(**vars(fn.counters))

        interface.PCIFunction.__init__ = counted_init


def _send(fd: int, **msg) -> None:
    os.write(fd, (json.dumps(msg) + "\n").encode())


def _die_with_gpu_saved(fd: int, phase: str, switch: KillSwitch) -> None:
    """SIGKILL at this access, the simulated GPU saved as it stands (a real one keeps its state)."""
    from gpusim import provider
    _send(fd, event="killed", phase=phase, access=switch.count)
    provider._save_on_exit()     # every bus's GPUs kept in state files, as at a clean exit
    os.kill(os.getpid(), signal.SIGKILL)


def _drop_link(fd: int, phase: str, switch: KillSwitch) -> None:
    from gpusim import bus
    _send(fd, event="killed", phase=phase, access=switch.count)
    for host in list(bus.LIVE):          # every simulated bus's USB enclosures (gpusim.bus.HostBus)
        for bridge in host.enclosures.values():
            bridge.inject("drop")


def victim(fd: int, spec: str, plan: Plan, code: bytes, rng, usb: bool) -> None:
    import hcq
    switch = KillSwitch()
    switch.install()
    phase = "open"
    fire = _drop_link if usb else _die_with_gpu_saved
    switch.fire = lambda: fire(fd, phase, switch)

    def enter(i: int) -> None:
        nonlocal phase
        phase = plan.phases[i]
        if i == plan.kill_phase:
            switch.at = switch.count + plan.kill_offset

    try:
        enter(0)
        dev = hcq.open(spec, **({"cold": True} if plan.cold else {}))
        work = Work(dev, code, rng)
        _send(fd, event="booted", kind=dev.gpu.boot_report.kind, mode1=dev.gpu.boot_report.mode1_reset)
        for i, name in enumerate(plan.phases[1:], 1):
            enter(i)
            if name == "close":
                dev.close()
            else:
                getattr(work, name)()
        _send(fd, event="finished")
    except Exception as e:
        _send(fd, event="error", type=type(e).__name__, message=str(e)[:2000],
              where="".join(traceback.format_exception(e)[-3:])[:2000])


def verifier(fd: int, spec: str, plan: Plan, code: bytes, rng, usb: bool) -> None:
    import hcq
    try:
        t = time.perf_counter()
        dev = hcq.open(spec)
        rep = dev.gpu.boot_report
        _send(fd, event="booted", kind=rep.kind, mode1=rep.mode1_reset, pci_reset=rep.pci_reset,
              seconds=time.perf_counter() - t, reason=rep.reason)
        work = Work(dev, code, rng)
        work.program()
        work.launch()
        work.copy()
        work.graph()
        if plan.verifier_fini:
            dev.close()
        _send(fd, event="correct", modules=sorted(sys.modules))
    except Exception as e:
        _send(fd, event="error", type=type(e).__name__, message=str(e)[:2000],
              where="".join(traceback.format_exception(e)[-3:])[:2000])


def _child(target, timeout: float, *args) -> tuple[int | None, list[dict]]:
    """Runs target(fd, *args) in a forked child; (its wait status or None on timeout, its messages)."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:   # the child: run, then exit as a process does (the simulator's exit handler saves its GPUs)
        os.close(r)
        code = 0
        try:
            target(w, *args)
            from gpusim import provider
            provider._save_on_exit()
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    try:
        return _wait_child(pid, r, timeout)
    except BaseException:   # interrupted: the child goes too
        for step in (lambda: os.kill(pid, signal.SIGKILL), lambda: os.waitpid(pid, 0), lambda: os.close(r)):
            try:
                step()
            except OSError:
                pass
        raise


def _wait_child(pid: int, r: int, timeout: float) -> tuple[int | None, list[dict]]:
    out, deadline = b"", time.monotonic() + timeout
    os.set_blocking(r, False)
    status = None
    while True:
        try:
            chunk = os.read(r, 65536)
            if chunk:
                out += chunk
                continue
        except BlockingIOError:
            pass
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            try:
                while chunk := os.read(r, 65536):
                    out += chunk
            except BlockingIOError:
                pass
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.002)
    os.close(r)
    return status, [json.loads(line) for line in out.decode().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ the run
def _state_files(cache: Path) -> list[Path]:
    return sorted((cache / "sim").glob("*.state")) if (cache / "sim").is_dir() else []


def _boot_kind(booted: dict) -> str:
    return booted["kind"] + (" after mode1 reset" if booted["mode1"] else "") + \
        (f" after pci reset ({booted['pci_reset']})" if booted["pci_reset"] else "")


def run(args) -> tuple[common.Tally, dict[str, list[float]]]:
    """The cases; (the tally, boot seconds per boot kind the fresh process got)."""
    usb = args.device.endswith(":usb")
    work_dir = Path(args.dir or tempfile.mkdtemp(prefix="driverless-fuzz-state-"))
    cache, locks, findings = work_dir / "cache", work_dir / "locks", work_dir / "findings"
    for d in (cache, locks):
        d.mkdir(parents=True, exist_ok=True)
    os.environ["DRIVERLESS_CACHE"] = str(cache)
    os.environ["DRIVERLESS_LOCK_DIR"] = str(locks)
    os.environ.setdefault("DRIVERLESS_OFFLINE", "1")
    chip = common.sim_chip(args.device) or "navi31"
    _warm_up(chip, usb)
    code = check_kernel()
    tally = common.Tally(f"state fuzzer on {args.device}, seed {args.seed}"
                         + (" (USB link drops)" if usb else " (SIGKILL)"))
    boot_seconds: dict[str, list[float]] = {}
    cases = [args.case] if args.case is not None else range(args.first, args.first + args.budget)
    if args.from_state:
        state = cache / "sim" / f"{chip}{'-usb' if usb else ''}.state"
        state.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.from_state, state)
    try:
        for case in cases:
            rng = common.case_rng(args.seed, case, "state")
            plan = make_plan(rng, usb)
            if args.sweep:   # every access of a cold boot in turn: from power-on, or over running firmware (mode1)
                plan = Plan(cold=True, ops=("launch",), kill_phase=0, kill_offset=case * args.stride + 1,
                            verifier_fini=True)
                if args.sweep == "power-on":
                    for p in _state_files(cache):
                        p.unlink()
            kept = next((p.read_bytes() for p in _state_files(cache)), None)
            vstatus, vmsgs = _child(victim, args.timeout, args.device, plan, code, rng, usb)
            killed = next((m for m in vmsgs if m["event"] == "killed"), None)
            group = f"killed in {killed['phase']}" if killed else "kill point not reached"
            problem = _victim_problem(vstatus, vmsgs, killed, usb)
            outcome, example, outcome_reason = "victim failed", plan.describe(), ""
            if problem is None:
                status, msgs = _child(verifier, args.timeout, args.device, plan, code, rng, usb)
                _import_what_children_import(msgs)
                problem = _verifier_problem(status, msgs)
                booted = next((m for m in msgs if m["event"] == "booted"), None)
                outcome = "not recovered"
                if booted:
                    kind = _boot_kind(booted)
                    outcome = f"{'recovered' if problem is None else 'not recovered'}: {kind}"
                    example = f"case {case}: {plan.describe()}; next boot {booted['seconds'] * 1e3:.0f} ms"
                    outcome_reason = booted["reason"]
                    if problem is None:
                        boot_seconds.setdefault(kind, []).append(booted["seconds"])
            if args.verbose:
                print(f"case {case}: {plan.describe()}: {'killed at ' + killed['phase'] + ' access ' + str(killed['access']) if killed else 'not killed'}"
                      f": {problem or outcome}" + (f" ({outcome_reason})" if outcome_reason else ""), flush=True)
            finding = None
            if problem is not None:
                reproduce = f"python -m tools.fuzz.state --device {args.device} --seed {args.seed} --case {case}"
                reproduce += f" --sweep {args.sweep} --stride {args.stride}" if args.sweep else ""
                if kept is not None:
                    findings.mkdir(exist_ok=True)
                    keep = findings / f"case-{case}.state"
                    keep.write_bytes(kept)
                    reproduce += f" --from-state {keep}"
                finding = common.Finding(args.seed, case, plan.describe(), outcome, f"{problem}\nreproduce: {reproduce}")
                for p in _state_files(cache):   # power the GPU off so the next case starts from a good one
                    p.unlink()
            tally.add(group, outcome, example, finding)
    except KeyboardInterrupt:   # Ctrl-C or SIGTERM: the table of the cases run so far
        tally.title += f" (stopped after {tally.cases} of {len(cases)} cases)"
    return tally, boot_seconds


def _warm_up(chip: str, usb: bool) -> None:
    """What every child would otherwise do again after its fork, done once here: the imports (this host
    may write no bytecode cache, so each import compiles its source) and the simulator's power-on register
    map (memoised per layout; loading a saved GPU needs it). The children's work is unchanged."""
    import hcq  # noqa: F401
    import amdrv.hcq  # noqa: F401
    import gpusim.provider  # noqa: F401
    from gpusim import board, device
    if usb:
        import gpusim.usb_bridge  # noqa: F401
    device.SimGPU(chip, vram_size=board.VRAM_SIZE[chip])


def _import_what_children_import(msgs: list[dict]) -> None:
    """The verifier reports the modules it had loaded: import those here, so later forks inherit them."""
    done = next((m for m in msgs if m["event"] == "correct"), None)
    for name in (done or {}).get("modules", ()):
        if name not in sys.modules and name != "__main__":
            try:
                __import__(name)
            except Exception:   # noqa: BLE001 - a module that imports only in some context: the child does it
                pass


def _victim_problem(status, msgs, killed, usb: bool) -> str | None:
    err = next((m for m in msgs if m["event"] == "error"), None)
    if status is None:
        return "the victim hung (parent timeout)"
    if usb and killed:
        if err is None and not any(m["event"] == "finished" for m in msgs):
            return "the link dropped and the victim neither finished nor reported an error"
        if err is not None and not _clear_error(err):
            return f"after the link dropped: {err['type']}: {err['message']}\n{err['where']}"
        return None
    if killed:
        return None if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL else \
            f"the victim was to die but exited with status {status}"
    if err is not None:
        return f"the victim failed before its kill point: {err['type']}: {err['message']}\n{err['where']}"
    if not any(m["event"] == "finished" for m in msgs):
        return f"the victim stopped without a report (status {status})"
    return None


def _clear_error(err: dict) -> bool:
    """A link drop must surface as the driver's errors (hcq, pcie, the USB transport), naming the device."""
    return err["type"] in {"HCQError", "HCQTimeout", "HCQFault", "PCIError", "BridgeError", "BridgeNotFound",
                           "LinkDown", "GPUNotAnswering", "AMError", "USBLinkError", "BridgeGone"}


def _verifier_problem(status, msgs) -> str | None:
    if status is None:
        return "the fresh process hung (parent timeout)"
    err = next((m for m in msgs if m["event"] == "error"), None)
    if err is not None:
        return f"the fresh process failed: {err['type']}: {err['message']}\n{err['where']}"
    if not any(m["event"] == "correct" for m in msgs):
        return f"the fresh process stopped without a result (status {status})"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz.state", description=__doc__.split("\n\n")[0])
    common.add_common_args(p, budget=200)
    p.add_argument("--dir", help="where the GPU state, lock files and findings go (default: a new temp dir)")
    p.add_argument("--case", type=int, help="run this case of the seed only")
    p.add_argument("--first", type=int, default=0,
                   help="run cases FIRST .. FIRST+BUDGET-1 (a long run in chunks on one --dir: the GPU carries over)")
    p.add_argument("--from-state", help="start from this GPU state file (a finding's)")
    p.add_argument("--sweep", choices=("power-on", "mode1"),
                   help="case N kills a cold boot at its access N+1 (--stride), from a powered-on GPU or over running "
                        "firmware (the plan's other choices are not drawn)")
    p.add_argument("--stride", type=int, default=1, help="with --sweep: case N kills at access N * STRIDE + 1")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a child may take (default 120)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = p.parse_args(argv)
    if common.sim_chip(args.device) is None:
        p.error(f"--device {args.device}: the state fuzzer runs on simulated GPUs (am:sim[:CHIP][:usb]), whose "
                f"state it saves at the kill and powers off after a finding")
    if not os.environ.get("DRIVERLESS_FIRMWARE_DIR"):
        print("note: DRIVERLESS_FIRMWARE_DIR is not set; the firmware comes from the cache or the pinned URLs",
              file=sys.stderr)
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # a stopped run still prints its table
    tally, boot_seconds = run(args)
    print(tally.table())
    medians = {k: round(statistics.median(v) * 1e3, 1) for k, v in sorted(boot_seconds.items())}
    print("next boot after the kill, median ms: " + (", ".join(f"{k} {v} ({len(boot_seconds[k])})"
                                                                for k, v in medians.items()) or "none"))
    if args.json:
        tally.write_json(args.json)
        with open(args.json) as f:
            data = json.load(f)
        data["boot_ms_median"] = medians
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2)
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
