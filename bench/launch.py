"""CPU cost of a kernel launch through hcq on the AM backend, on the submitting side only.

    python bench/launch.py [-n RUNS] [--iters N] [--graph-kernels K] [--json]

What is timed (medians over RUNS runs of N launches each, microseconds per launch):
  fresh_queue    a freshly built queue per launch: compute_queue(), exec (dispatch packet and kernargs
                 written, the program's PM4 template copied and patched), signal, submit (ring copy,
                 write-pointer store, doorbell write)
  program_call   prog(*args, global_size, local_size): the same through the Program convenience call
  graph_replay   per kernel of a K-kernel graph replayed with a new buffer and a new scalar for every
                 kernel (two kernarg patches per kernel, then one submission for the whole graph)
The simulator's execution is excluded: the queues' doorbell is a counting no-op that reports the work as
consumed and done (the rptr write-back and the timeline signal are set to what was submitted), so
nothing runs and no wait spins. The kernel is an `s_endpgm` with add_f32's parameters (three buffers
and a uint) in a code object of our own writer, so no compiler is needed.
Targets (issue 5): <= 10 us per freshly built exec+signal queue, <= 1 us per kernel in graph replay.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# run as a script, bench/ is sys.path[0]: replace it by the repo root, or bench/usb.py would shadow pyusb
sys.path[0] = str(Path(__file__).resolve().parent.parent)

import hcq  # noqa: E402
from gpusim.bus import HostBus  # noqa: E402
from bench.hcq_cases import launch_cases  # noqa: E402
from rdna3 import assemble  # noqa: E402
from rdna3.codeobj import KernelArg, KernelSpec, write_code_object  # noqa: E402
from amdrv.firmware import FirmwareError  # noqa: E402

BUS = HostBus()  # the benchmark's own simulated bus (gpusim.bus), apart from the device strings' GPUs
TARGETS_US = {"fresh_queue": 10.0, "graph_replay": 1.0}


class NoOpDoorbell:
    """Stands in for BAR2 under one queue: counts doorbell writes and marks the work consumed (rptr
    write-back = the write pointer) and finished (the device's timeline = the last value handed out)."""

    def __init__(self, queue, dev):
        self.queue, self.dev, self.writes = queue, dev, 0

    def write64(self, offset: int, value: int) -> None:
        self.writes += 1
        self.queue.wb[0] = value
        self.dev.timeline.mem[0] = self.dev.timeline_value

    def flush(self) -> None:
        pass


def code_object() -> bytes:
    args = [KernelArg(0, 8, "global_buffer", "global", "out"), KernelArg(8, 8, "global_buffer", "global", "a"),
            KernelArg(16, 8, "global_buffer", "global", "b"), KernelArg(24, 4, "by_value", None, "n")]
    spec = KernelSpec("add_f32", assemble("s_endpgm"), args=args,
                      user_sgprs=("dispatch_ptr", "kernarg_segment_ptr"))
    return write_code_object([spec])


def per_launch_us(fn, iters: int, per: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / (iters * per) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=7)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--graph-kernels", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    dev = hcq.open("am:sim", bus=BUS, fresh=True)
    try:
        doorbells = [NoOpDoorbell(q, dev) for q in (dev.compute, dev.sdma)]
        for q, d in zip((dev.compute, dev.sdma), doorbells):
            q.doorbell = d
        prog = dev.program(code_object(), "add_f32")
        cases = launch_cases(dev, prog, args.graph_kernels)
        results = {}
        for name, (fn, per) in cases.items():
            per_launch_us(fn, max(args.iters // 10, 1), per)  # warm-up
            iters = args.iters if per == 1 else max(args.iters // per, 20)
            runs = [per_launch_us(fn, iters, per) for _ in range(args.runs)]
            results[name] = {"us_per_launch": statistics.median(runs), "runs": args.runs, "launches_per_run": iters * per}
        results["graph_replay"]["graph_kernels"] = args.graph_kernels
        for name, target in TARGETS_US.items():
            results[name]["target_us"] = target
            results[name]["meets_target"] = results[name]["us_per_launch"] <= target
        results["doorbell_writes"] = sum(d.writes for d in doorbells)
    finally:
        for q in (dev.compute, dev.sdma):
            q.doorbell = q.dev.pci.bar(2)
        dev.close()

    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"hcq launch CPU cost on am:sim, submitting side only (medians of {args.runs} runs)")
        for name in ("fresh_queue", "program_call", "graph_replay"):
            r = results[name]
            extra = f" per kernel of {r['graph_kernels']}" if name == "graph_replay" else ""
            target = f"  (target <= {r['target_us']:g} us: {'met' if r['meets_target'] else 'MISSED'})" \
                if "target_us" in r else ""
            print(f"  {name:13} {r['us_per_launch']:7.2f} us{extra}{target}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FirmwareError as e:  # the usual first-run problem: say how to get the firmware, no traceback
        sys.exit(f"{e}\n(or run `make demo` once: it seeds the cache from Debian's firmware-amd-graphics)")
