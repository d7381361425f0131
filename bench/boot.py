"""Cold and warm boot of a simulated GPU: wall time and MMIO reads/writes, medians over N runs.

    python bench/boot.py                      # navi31, 5 runs of each kind
    python bench/boot.py -n 9 --chip navi33 --small-bar --json

Kinds, each on the same simulated GPU slot:
  cold        a powered-on GPU nothing has touched (fresh=True)
  warm        reopened after the previous run's fini
  cold-reset  reopened after a run that exited without fini: cold boot behind a mode1 reset
Over USB every MMIO read is a round trip, so the counts matter more than the seconds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# run as a script, bench/ is sys.path[0]: replace it by the repo root, or bench/usb.py would shadow pyusb
sys.path[0] = str(Path(__file__).resolve().parent.parent)

import pcie  # noqa: E402
from gpusim.bus import HostBus  # noqa: E402
from amdrv.am import AMGPU  # noqa: E402
from amdrv.firmware import FirmwareError  # noqa: E402

BUS = HostBus()  # the benchmark's own simulated bus (gpusim.bus), apart from the device strings' GPUs


def one_round(chip: str, small_bar: bool) -> dict[str, dict]:
    out = {}
    gpu = AMGPU.open(pcie.open_function("sim", chip, small_bar=small_bar, fresh=True, bus=BUS))
    out["cold"] = gpu.boot_report
    gpu.fini()
    gpu = AMGPU.open(pcie.open_function("sim", chip, bus=BUS))
    out["warm"] = gpu.boot_report
    gpu.dev.close()  # dropped without fini, as a crash leaves it
    gpu = AMGPU.open(pcie.open_function("sim", chip, bus=BUS))
    out["cold-reset"] = gpu.boot_report
    gpu.fini()
    expect = {"cold": ("cold", False), "warm": ("warm", False), "cold-reset": ("cold", True)}
    for kind, rep in out.items():
        if (rep.kind, rep.mode1_reset) != expect[kind]:
            raise SystemExit(f"{kind}: booted {rep}")
    return {k: {"seconds": r.seconds, "mmio_reads": r.mmio_reads, "mmio_writes": r.mmio_writes}
            for k, r in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("--chip", default="navi31")
    ap.add_argument("--small-bar", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    rounds = [one_round(args.chip, args.small_bar) for _ in range(args.runs)]
    result = {"chip": args.chip, "small_bar": args.small_bar, "runs": args.runs, "boots": {}}
    for kind in rounds[0]:
        result["boots"][kind] = {m: statistics.median(r[kind][m] for r in rounds)
                                 for m in ("seconds", "mmio_reads", "mmio_writes")}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.chip}{' small-BAR' if args.small_bar else ''}: medians of {args.runs} runs (simulator)")
    print(f"  {'boot':11} {'ms':>8} {'MMIO reads':>11} {'MMIO writes':>12}")
    for kind, m in result["boots"].items():
        print(f"  {kind:11} {m['seconds'] * 1e3:8.1f} {m['mmio_reads']:11.0f} {m['mmio_writes']:12.0f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FirmwareError as e:  # the usual first-run problem: say how to get the firmware, no traceback
        sys.exit(f"{e}\n(or run `make demo` once: it seeds the cache from Debian's firmware-amd-graphics)")
