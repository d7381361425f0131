"""driverless: one command for the project's entry points (also `python -m driverless`).

    driverless info [--json]                       supported GPUs, firmware, tables      (python -m amdrv)
    driverless info --device am:sim [--cold] [--json]  boot a GPU and show it       (python -m amdrv info)
    driverless firmware status|verify|fetch|seed|inspect ... (status --json)  (python -m amdrv.firmware)
    driverless demo [--device SPEC]                the MLP + softmax demo     (python -m compiler_bridge.demo)
    driverless smi [watch|plot] [--json|--csv]     temperatures, power, clocks, activity (driverless-smi)

Each subcommand hands its arguments to the module named, so both spellings take the same options.
"""
from __future__ import annotations

import argparse
import sys

COMMANDS = {
    "info": "supported GPUs, firmware and tables; with --device, boot that GPU and show it (python -m amdrv)",
    "firmware": "the pinned firmware: status, verify, fetch, seed, inspect (python -m amdrv.firmware)",
    "demo": "boot a GPU and run the MLP + softmax demo (python -m compiler_bridge.demo)",
    "smi": "temperatures, power, clocks and activity of every AM GPU (driverless-smi, python -m amdrv.smi)",
}


def _info(argv: list[str]) -> int:
    from amdrv.__main__ import main
    # `driverless info --device X` is `python -m amdrv info --device X`; bare `driverless info` the report.
    booting = any(a == "--device" or a.startswith("--device=") or a == "--cold" for a in argv)
    return main((["info"] if booting else []) + argv)


def _firmware(argv: list[str]) -> int:
    from amdrv.firmware.__main__ import main
    return main(argv)


def _demo(argv: list[str]) -> int:
    from compiler_bridge.demo import main
    return main(argv)


def _smi(argv: list[str]) -> int:
    from amdrv.smi import main
    return main(argv)


RUN = {"info": _info, "firmware": _firmware, "demo": _demo, "smi": _smi}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="driverless", description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=list(COMMANDS), help="; ".join(f"{k}: {v}" for k, v in COMMANDS.items()))
    if not argv or argv[0] in ("-h", "--help"):
        ap.print_help()
        return 0 if argv else 2
    args = ap.parse_args(argv[:1])
    return RUN[args.command](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
