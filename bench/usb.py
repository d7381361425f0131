"""What the AM driver's USB transport costs, against the simulated ASM24xx bridge (gpusim.usb_bridge).

    python bench/usb.py [--kib N] [--rtt-us US] [--json]

Measured (counts are exact, from amdrv.usb's counters; the simulated bridge counts the same round trips):
  open               round trips to enumerate the bridges, size and place the BARs
  mmio_write/read    round trips per posted 32-bit register write (amortized, flushed) and per read
  to_vram/from_vram  copies through BAR0 as TLPs: round trips per MiB, payload efficiency (payload bytes
                     over all bytes on the wire: CBWs, CSWs, data phases) and the modeled throughput
  window_push/pull   the bridge's DMA window (4 KiB pages at bus 0x200000/0x820000): the same figures
Modeled throughput at 10 Gbit/s: wire bytes at 10 Gbit/s with 128b/132b coding plus one round-trip
latency (--rtt-us, default 100 us, an assumption, not a measurement) per SCSI command.
  warm_boot          round trips of an AM warm boot through the bridge (the GPU cold-booted and left by fini
                     over simulated PCIe first, small BAR), per boot step too (steps; "outside steps" is the
                     device open, mostly the IP discovery binary); needs the firmware (DRIVERLESS_FIRMWARE_DIR)
Not measured yet: round trips per kernel launch (hcq is not wired to the USB transport: docs/usb.md,
Driver transport), and real USB latency (no bridge attached to this machine).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# This file is named usb.py: drop its own folder from the path, or `import usb` (pyusb) would find it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from amdrv.usb.transport import open_function  # noqa: E402

LINE_RATE = 10e9 * 128 / 132 / 8   # bytes per second
BOOT_SLOT = 2


def _cost(fn, run, payload: int, rtt_s: float) -> dict:
    c0, l0 = fn.counters.snapshot(), fn.link.stats.snapshot()
    run()
    fn.flush()
    c, s = fn.counters - c0, fn.link.stats - l0
    wire = s.wire_out + s.wire_in
    seconds = wire / LINE_RATE + c.round_trips * rtt_s
    mib = payload / (1 << 20)
    return {"payload_bytes": payload, "round_trips": c.round_trips,
            "round_trips_per_mib": round(c.round_trips / mib) if payload else None,
            "wire_bytes": wire, "payload_efficiency": round(payload / wire, 4) if payload else None,
            "modeled_MBps_10G": round(payload / seconds / 1e6, 3) if payload else None}


def measure(kib: int, rtt_us: float) -> dict:
    try:
        from gpusim import usb_bridge
    except ImportError:
        raise SystemExit("bench/usb.py needs gpusim.usb_bridge (the simulated bridge)") from None
    fn = open_function(backend=usb_bridge.backend("navi31", fresh=True))
    rtt, n = rtt_us * 1e-6, kib * 1024
    out = {"bridge": "gpusim.usb_bridge (ASM2464PD stock firmware model), Bulk-Only Transport",
           "rtt_us_assumed": rtt_us, "open_round_trips": fn.counters.round_trips}
    regs, vram, data = fn.bar(5), fn.bar(0), os.urandom(n)
    scratch = 4 * 0xC040
    w = _cost(fn, lambda: [regs.write32(scratch, i * 0x01010101) for i in range(64)], 0, rtt)
    out["mmio_write_round_trips"] = w["round_trips"] / 64
    r = _cost(fn, lambda: [regs.read32(scratch) for _ in range(64)], 0, rtt)
    out["mmio_read_round_trips"] = r["round_trips"] / 64
    out["to_vram"] = _cost(fn, lambda: vram.write(0x100000, data), n, rtt)
    got = []
    out["from_vram"] = _cost(fn, lambda: got.append(vram.read(0x100000, n)), n, rtt)
    assert got[0] == data, "BAR0 copy came back different"
    buf = fn.alloc_dma(4096, readback=True)
    buf.view[:] = (data * 4)[:4096]
    out["window_push_4k"] = _cost(fn, buf.push, 4096, rtt)
    out["window_pull_4k"] = _cost(fn, buf.pull, 4096, rtt)
    fn.close()
    out["warm_boot"] = warm_boot()
    out["not_measured"] = ["launch_round_trips"]
    return out


def warm_boot() -> dict:
    import pcie
    from amdrv.am import AMGPU
    from amdrv.firmware import FirmwareError
    from gpusim import usb_bridge
    try:
        AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, slot=BOOT_SLOT)).fini()
    except FirmwareError as e:
        return {"skipped": f"no firmware: {e}"}
    fn = open_function(backend=usb_bridge.backend("navi31", slot=BOOT_SLOT))
    before = fn.counters.snapshot()
    gpu = AMGPU.open(fn)
    spent = fn.counters - before
    result = {"kind": gpu.boot_report.kind, "round_trips": spent.round_trips, "mmio_reads": spent.mmio_reads,
              "mmio_writes": spent.mmio_writes, "bulk_write_bytes": spent.bulk_write_bytes, "aim": 500,
              "steps": {s.name: s.round_trips for s in gpu.boot_report.steps}}
    # What no step counts: the device's open (the IP discovery binary, read through MM_INDEX/MM_DATA
    # beyond the 256 MiB BAR0 window) and the boot-state reads and writes around the steps.
    result["steps"]["outside steps"] = spent.round_trips - sum(result["steps"].values())
    gpu.fini()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kib", type=int, default=64, help="bytes copied each way through BAR0 (KiB)")
    ap.add_argument("--rtt-us", type=float, default=100.0, help="assumed round-trip latency per SCSI command")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    result = measure(args.kib, args.rtt_us)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for k, v in result.items():
        print(f"{k:24} {v}")


if __name__ == "__main__":
    main()
