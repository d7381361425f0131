"""What the fuzzers share: the common arguments, a seeded generator per case, and the outcome tally that
prints the results table. A case is reproducible from (seed, case index) alone: `case_rng(seed, i)`."""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass, field


def add_common_args(ap: argparse.ArgumentParser, budget: int) -> None:
    ap.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    ap.add_argument("--budget", type=positive_count, default=budget, help=f"number of cases (default {budget})")
    ap.add_argument("--device", default="am:sim",
                    help="am:sim[:CHIP] (default am:sim, a fresh simulated GPU per case) or a real GPU's AM "
                         "device string (am:PCI-ADDRESS)")
    ap.add_argument("--json", metavar="FILE", help="also write every outcome count and finding as JSON")


def positive_count(text: str) -> int:
    """argparse type of --budget: a count of cases, at least 1 (0 or less ran nothing and reported success)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of cases") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not a positive number of cases")
    return n


def firmware_missing(prog: str, error: Exception) -> int:
    """What a fuzzer's main returns when the GPU under test cannot boot for want of the pinned firmware: the
    firmware store's message (which says where to get the files) once, exit status 2, no per-case noise."""
    print(f"{prog}: the GPU under test boots with the pinned firmware: {error}", file=sys.stderr)
    return 2


def case_rng(seed: int, index: int, salt: str = "") -> random.Random:
    """The generator of one case: the same (seed, index) gives the same case, whatever ran before it."""
    return random.Random(f"{salt}:{seed}:{index}")


def sim_chip(device: str) -> str | None:
    """'navi31' for am:sim, the chip of am:sim:CHIP; None for anything that is not a simulated GPU."""
    parts = device.split(":")
    if parts[:2] != ["am", "sim"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] not in ("", "usb") else "navi31"


_BUS = []


def sim_bus():
    """The fuzzers' own simulated host bus (gpusim.bus.HostBus, made on first use): the GPUs they power on
    stay apart from the device strings' (am:sim...) GPUs of the same process."""
    if not _BUS:
        from gpusim.bus import HostBus
        _BUS.append(HostBus())
    return _BUS[0]


@dataclass
class Finding:
    """An unexpected outcome: what to rerun it with and what happened."""
    seed: int
    index: int
    case: str
    outcome: str
    detail: str


@dataclass
class Tally:
    """Outcome counts per (group, outcome), one example each, and every unexpected outcome."""
    title: str
    counts: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    cases: int = 0

    def add(self, group: str, outcome: str, example: str = "", finding: Finding | None = None) -> None:
        self.cases += 1
        self.counts[(group, outcome)] += 1
        self.examples.setdefault((group, outcome), example)
        if finding is not None:
            self.findings.append(finding)

    def table(self, example_width: int = 90) -> str:
        rows = [("group", "outcome", "count", "example")]
        for (group, outcome), n in sorted(self.counts.items()):
            ex = " ".join(self.examples[(group, outcome)].split())
            rows.append((group, outcome, str(n), ex if len(ex) <= example_width else ex[:example_width - 3] + "..."))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"{self.title}: {self.cases} cases, {len(self.findings)} unexpected"]
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        for f in self.findings[:50]:
            lines.append(f"UNEXPECTED seed {f.seed} case {f.index} ({f.case}): {f.outcome}: {f.detail}")
        if len(self.findings) > 50:
            lines.append(f"... and {len(self.findings) - 50} more unexpected outcomes (--json has them all)")
        return "\n".join(lines)

    def write_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"title": self.title, "cases": self.cases,
                       "counts": [{"group": g, "outcome": o, "count": n, "example": self.examples[(g, o)]}
                                  for (g, o), n in sorted(self.counts.items())],
                       "unexpected": [vars(x) for x in self.findings]}, f, indent=2)
