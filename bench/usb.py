"""What the AM driver's USB transport costs, against the simulated ASM24xx bridge (gpusim.usb_bridge).

    python bench/usb.py [--kib N] [--mib M] [--rtt-us US] [--json]

Every figure is measured over both links the driver has (links.uas, links.bot; docs/usb.md, Driver
transport): UAS with bulk streams (16 commands per round trip) and Bulk-Only Transport (one per round trip).
Counts are exact, from amdrv.usb's counters (the simulated bridge counts the same round trips):
  open               round trips to enumerate the bridges, size and place the BARs
  mmio_write/read    round trips per posted 32-bit register write (amortized, flushed) and per read
  to_vram/from_vram  KIB KiB through BAR0 as one-dword TLPs: round trips per MiB, payload efficiency
                     (payload bytes over all bytes on the wire) and the modeled throughput
  window_push/pull   one 4 KiB page of the bridge's DMA window each way
  warm_boot          an AM warm boot through the bridge (the GPU cold-booted and left by fini over
                     simulated PCIe first, small BAR, which also fills the discovery cache), per boot step
                     (steps; "outside steps": the device open and the boot-state words); aim 500
  hcq                on that GPU, through hcq: open (queues, arena, signals, page tables), a kernel launch
                     (median round trips of prog(...) with wait=False: kernargs, ring dwords, doorbell;
                     aim 2) and a fence poll (round trips per poll), copyin/copyout of MIB MiB (through
                     the window and SDMA; copy-out bounced through the one page the host reads back):
                     round trips per MiB, payload efficiency, modeled throughput
Modeled throughput: wire bytes at 10 Gbit/s with 128b/132b coding plus one round-trip latency per round
trip (--rtt-us, default 100 us: an assumption, not a measurement; no bridge is attached to this machine).
The launch's kernel is an s_endpgm in a code object of our own writer, so no compiler is needed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

# This file is named usb.py: drop its own folder from the path, or `import usb` (pyusb) would find it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from amdrv.usb.transport import open_function  # noqa: E402

LINE_RATE = 10e9 * 128 / 132 / 8   # bytes per second
BOOT_SLOT = 2
LINKS = ("uas", "bot")


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


def transport(kib: int, rtt: float) -> dict:
    from gpusim import usb_bridge
    fn = open_function(backend=usb_bridge.backend("navi31", fresh=True))
    n = kib * 1024
    out = {"link": type(fn.link).__name__, "open_round_trips": fn.counters.round_trips}
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
    return out


def _code_object() -> bytes:
    from amdrv.isa import assemble
    from amdrv.isa.codeobj import KernelArg, KernelSpec, write_code_object
    args = [KernelArg(0, 8, "global_buffer", "global", "out"), KernelArg(8, 4, "by_value", None, "n")]
    return write_code_object([KernelSpec("nop", assemble("s_endpgm"), args=args,
                                         user_sgprs=("dispatch_ptr", "kernarg_segment_ptr"))])


def gpu_costs(mib: int, rtt: float, launches: int = 9) -> dict:
    import pcie
    from amdrv.am import AMGPU
    from amdrv.firmware import FirmwareError
    from amdrv.hcq import AMHCQDevice
    from gpusim import usb_bridge
    try:
        AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, slot=BOOT_SLOT)).fini()
    except FirmwareError as e:
        return {"skipped": f"no firmware: {e}"}
    fn = open_function(backend=usb_bridge.backend("navi31", slot=BOOT_SLOT))
    before = fn.counters.snapshot()
    gpu = AMGPU.open(fn)
    spent = fn.counters - before
    boot = {"kind": gpu.boot_report.kind, "round_trips": spent.round_trips, "mmio_reads": spent.mmio_reads,
            "mmio_writes": spent.mmio_writes, "bulk_write_bytes": spent.bulk_write_bytes, "aim": 500,
            "steps": {s.name: s.round_trips for s in gpu.boot_report.steps}}
    # What no step counts: the device's open (the discovery binary's header and harvest list, the rest
    # from the host cache) and the boot-state reads and writes around the steps.
    boot["steps"]["outside steps"] = spent.round_trips - sum(boot["steps"].values())
    c0 = fn.counters.snapshot()
    dev = AMHCQDevice(gpu, "am:sim:usb")
    out = {"open_round_trips": (fn.counters - c0).round_trips}
    try:
        prog = dev.program(_code_object(), "nop")
        buf = dev.alloc(4096)
        prog(buf, 1, global_size=(1,), local_size=(32,), wait=True)
        launch, poll = [], []
        for _ in range(launches):
            c0 = fn.counters.snapshot()
            prog(buf, 1, global_size=(1,), local_size=(32,))
            c1 = fn.counters.snapshot()
            dev.synchronize()
            launch.append((c1 - c0).round_trips)
            poll.append((fn.counters - c1).round_trips)
        out["launch_round_trips"] = statistics.median(launch)
        out["launch_aim"] = 2
        out["synchronize_round_trips"] = statistics.median(poll)
        n = mib << 20
        data, big = os.urandom(n), dev.alloc(n)
        out["copyin"] = _cost(fn, lambda: dev.copyin(big, data), n, rtt)
        got = []
        out["copyout"] = _cost(fn, lambda: got.append(dev.copyout(big)), n, rtt)
        assert got[0] == data, "copyout through hcq came back different"
    finally:
        dev.close()
    return {"warm_boot": boot, "hcq": out}


def measure(kib: int, mib: int, rtt_us: float) -> dict:
    try:
        import gpusim.usb_bridge  # noqa: F401
    except ImportError:
        raise SystemExit("bench/usb.py needs gpusim.usb_bridge (the simulated bridge)") from None
    rtt = rtt_us * 1e-6
    out = {"bridge": "gpusim.usb_bridge (ASM2464PD stock firmware model)", "rtt_us_assumed": rtt_us, "links": {}}
    saved = os.environ.get("DRIVERLESS_USB_LINK")
    try:
        for link in LINKS:
            os.environ["DRIVERLESS_USB_LINK"] = link
            out["links"][link] = transport(kib, rtt) | gpu_costs(mib, rtt)
    finally:
        if saved is None:
            os.environ.pop("DRIVERLESS_USB_LINK", None)
        else:
            os.environ["DRIVERLESS_USB_LINK"] = saved
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kib", type=int, default=64, help="bytes copied each way through BAR0 (KiB)")
    ap.add_argument("--mib", type=int, default=1, help="bytes copied each way through hcq (MiB)")
    ap.add_argument("--rtt-us", type=float, default=100.0, help="assumed latency per round trip (microseconds)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    result = measure(args.kib, args.mib, args.rtt_us)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"bridge: {result['bridge']}; {result['rtt_us_assumed']:g} us assumed per round trip")
    for link, r in result["links"].items():
        print(f"-- {link}")
        for k, v in r.items():
            print(f"  {k:24} {v}")


if __name__ == "__main__":
    main()
