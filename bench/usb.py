"""What the AM driver's USB transport costs, against the simulated ASM24xx bridge (gpusim.usb_bridge).

    python bench/usb.py [--kib N] [--sizes 1,16,256] [--links uas,bot,open] [--copyout-max-mib uas=16,bot=1]
                        [--rtt-us US] [--json]

Every figure is measured over each link the driver has (docs/usb.md, Driver transport): on the stock
firmware UAS with bulk streams (16 commands per round trip) and Bulk-Only Transport (one per round trip);
on the open firmware its vendor requests and SRAM DMA ("open").
Counts are exact, from pcie.usb's counters (the simulated bridge counts the same round trips):
  open               round trips to enumerate the bridges, size and place the BARs
  mmio_write/read    round trips per posted 32-bit register write (amortized, flushed) and per read
  to_vram/from_vram  KIB KiB through BAR0 as one-dword TLPs: round trips per MiB, payload efficiency
                     (payload bytes over all bytes on the wire) and the modeled throughput
  window_push/pull   one 4 KiB page of the bridge's DMA window each way
  warm_boot          an AM warm boot through the bridge (the GPU cold-booted and left by fini over
                     simulated PCIe first, small BAR, which also fills the discovery cache), per boot step
                     (steps; "outside steps": the device open and the boot-state words); aim 60
  hcq                on that GPU, through hcq: open (queues, arena, signals, page tables), a kernel launch
                     (median round trips of prog(...) with wait=False: kernargs, ring dwords, doorbell;
                     aim 2) and a fence poll (round trips per poll), copyin/copyout at each of --sizes
                     (stock: the window and SDMA, copy-out bounced through the one page the host reads
                     back; open: amdrv.bridge_copy's SRAM windows), after one small copy each way (the
                     open firmware's windows are mapped at the first copy): round trips per MiB, payload
                     efficiency, modeled throughput
Modeled throughput (gpusim.usb_bridge.LinkTiming): wire bytes at USB 3.2 Gen 2's bytes per 125 us
microframe plus one round-trip latency per round trip (--rtt-us, default 100 us: an assumption, not a
measurement; no bridge is attached to this machine). Copies also give estimated_MBps: the same with the
bytes moved no faster than the bridge's engine was measured to move them (ENGINE_BYTES_PER_S, sourced).
wall_s (and open_wall_s, launch_and_sync_wall_s, a median) is how long the simulation took on this machine, cpu_s
the process's CPU time for it (the better figure on a loaded machine): what the model costs to run, not what the
link would take.
The launch's kernel is an s_endpgm in a code object of our own writer, so no compiler is needed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

# This file is named usb.py: drop its own folder from the path, or `import usb` (pyusb) would find it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from pcie.usb.transport import open_function  # noqa: E402
from gpusim.bus import HostBus  # noqa: E402

LINKS = ("uas", "bot")


def _timing(rtt_s: float):
    from gpusim.usb_bridge import USB3_GEN2, LinkTiming
    return LinkTiming(USB3_GEN2.name, USB3_GEN2.bytes_per_microframe, rtt_s)


# What the bridge's own engines were measured to move (bytes per second), where a source gives a figure: the
# open firmware's SRAM DMA, "700 MB/s read+write on 10 Gbps USB3" (tinygrad asm2464pd-firmware README); the
# stock firmware's WRITE(16), "~100+ MB/s" (asm2464pd-firmware USBGPU.md, speed table). The estimate takes the
# slower of the link and the engine for the bytes, plus the round trips' latency.
ENGINE_BYTES_PER_S = {("open", "copyin"): 700e6, ("open", "copyout"): 700e6,
                      ("stock", "copyin"): 100e6}


def _estimate(cost: dict, rtt_s: float, engine: float | None) -> float | None:
    if not cost.get("payload_bytes"):
        return None
    t = _timing(rtt_s)
    link = cost["wire_bytes"] / t.bytes_per_microframe * 125e-6
    body = max(link, cost["payload_bytes"] / engine) if engine else link
    return round(cost["payload_bytes"] / (body + cost["round_trips"] * rtt_s) / 1e6, 3)


def _cost(fn, run, payload: int, rtt_s: float) -> dict:
    c0, l0 = fn.counters.snapshot(), fn.link.stats.snapshot()
    t0, p0 = time.perf_counter(), time.process_time()
    run()
    fn.flush()
    wall, cpu = time.perf_counter() - t0, time.process_time() - p0
    c, s = fn.counters - c0, fn.link.stats - l0
    wire = s.wire_out + s.wire_in
    mib = payload / (1 << 20)
    return {"payload_bytes": payload, "round_trips": c.round_trips,
            "round_trips_per_mib": round(c.round_trips / mib, 2) if payload else None,
            "wire_bytes": wire, "payload_efficiency": round(payload / wire, 4) if payload else None,
            "modeled_MBps_10G": round(_timing(rtt_s).mb_per_s(payload, wire, c.round_trips), 3) if payload else None,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def transport(kib: int, rtt: float, firmware: str = "stock") -> dict:
    from gpusim import usb_bridge
    fn = open_function(backend=usb_bridge.backend("navi31", fresh=True, firmware=firmware))
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
    from rdna3 import assemble
    from rdna3.codeobj import KernelArg, KernelSpec, write_code_object
    args = [KernelArg(0, 8, "global_buffer", "global", "out"), KernelArg(8, 4, "by_value", None, "n")]
    return write_code_object([KernelSpec("nop", assemble("s_endpgm"), args=args,
                                         user_sgprs=("dispatch_ptr", "kernarg_segment_ptr"))])


def gpu_costs(sizes: list[int], rtt: float, launches: int = 9, firmware: str = "stock",
              copyout_max_mib: int = 1 << 30) -> dict:
    import pcie
    from amdrv.am import AMGPU
    from amdrv.firmware import FirmwareError
    from amdrv.hcq import AMHCQDevice
    from gpusim import usb_bridge
    bus = HostBus()   # a simulated bus of this run's own (gpusim.bus): one GPU, first over PCIe, then in the enclosure
    try:
        AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=bus)).fini()
    except FirmwareError as e:
        return {"skipped": f"no firmware: {e}"}
    fn = open_function(backend=usb_bridge.backend("navi31", bus=bus, firmware=firmware))
    before, t0, p0 = fn.counters.snapshot(), time.perf_counter(), time.process_time()
    gpu = AMGPU.open(fn)
    spent, wall, cpu = fn.counters - before, time.perf_counter() - t0, time.process_time() - p0
    boot = {"kind": gpu.boot_report.kind, "round_trips": spent.round_trips, "mmio_reads": spent.mmio_reads,
            "mmio_writes": spent.mmio_writes, "bulk_write_bytes": spent.bulk_write_bytes, "aim": 60,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "steps": {s.name: s.round_trips for s in gpu.boot_report.steps}}
    # What no step counts: the device's open (the discovery binary's header and harvest list, the rest
    # from the host cache) and the boot-state reads and writes around the steps.
    boot["steps"]["outside steps"] = spent.round_trips - sum(boot["steps"].values())
    c0, t0 = fn.counters.snapshot(), time.perf_counter()
    os.environ.setdefault("DRIVERLESS_PUBLISH_S", "0")  # the driver's own traffic: no metrics publishing
    dev = AMHCQDevice(gpu, "am:sim:usb")
    out = {"open_round_trips": (fn.counters - c0).round_trips, "open_wall_s": round(time.perf_counter() - t0, 3)}
    try:
        prog = dev.program(_code_object(), "nop")
        buf = dev.alloc(4096)
        prog(buf, 1, global_size=(1,), local_size=(32,), wait=True)
        launch, poll, walls = [], [], []
        for _ in range(launches):
            c0, t0 = fn.counters.snapshot(), time.perf_counter()
            prog(buf, 1, global_size=(1,), local_size=(32,))
            c1 = fn.counters.snapshot()
            dev.synchronize()
            walls.append(time.perf_counter() - t0)
            launch.append((c1 - c0).round_trips)
            poll.append((fn.counters - c1).round_trips)
        out["launch_round_trips"] = statistics.median(launch)
        out["launch_and_sync_wall_s"] = round(statistics.median(walls), 4)
        out["launch_aim"] = 2
        out["synchronize_round_trips"] = statistics.median(poll)
        dev.copyin(buf, bytes(4096))                 # what a first copy sets up once (bridge_copy's windows)
        dev.copyout(buf)
        out["copies"] = {}
        for mib in sizes:
            n = mib << 20
            data, big = os.urandom(n), dev.alloc(n)
            row = out["copies"][f"{mib} MiB"] = {"copyin": _cost(fn, lambda: dev.copyin(big, data), n, rtt)}
            row["copyin"]["estimated_MBps"] = _estimate(row["copyin"], rtt, ENGINE_BYTES_PER_S.get((firmware, "copyin")))
            if mib > copyout_max_mib:
                row["copyout"] = {"skipped": f"over --copyout-max-mib {copyout_max_mib} (linear in size: see the "
                                             f"smaller sizes)"}
            else:
                got = []
                row["copyout"] = _cost(fn, lambda: got.append(dev.copyout(big)), n, rtt)
                row["copyout"]["estimated_MBps"] = _estimate(row["copyout"], rtt,
                                                             ENGINE_BYTES_PER_S.get((firmware, "copyout")))
                assert got[0] == data, "copyout through hcq came back different"
            dev.free(big)
    finally:
        dev.close()
    return {"warm_boot": boot, "hcq": out}


def measure(kib: int, sizes: list[int], rtt_us: float, links=LINKS, copyout_max_mib: dict | None = None) -> dict:
    try:
        from gpusim.usb_bridge import USB3_GEN2
    except ImportError:
        raise SystemExit("bench/usb.py needs gpusim.usb_bridge (the simulated bridge)") from None
    rtt = rtt_us * 1e-6
    out = {"bridge": "gpusim.usb_bridge (ASM2464PD: stock firmware over UAS and BOT; open firmware, "
                     "gpusim.usb_open_firmware)", "rtt_us_assumed": rtt_us,
           "link_bytes_per_microframe": USB3_GEN2.bytes_per_microframe, "links": {}}
    limits = copyout_max_mib or {}
    saved = os.environ.get("DRIVERLESS_USB_LINK")
    try:
        for link in links:
            firmware = "open" if link == "open" else "stock"
            if firmware == "stock":
                os.environ["DRIVERLESS_USB_LINK"] = link
            out["links"][link] = transport(kib, rtt, firmware) | gpu_costs(
                sizes, rtt, firmware=firmware, copyout_max_mib=limits.get(link, 1 << 30))
    finally:
        if saved is None:
            os.environ.pop("DRIVERLESS_USB_LINK", None)
        else:
            os.environ["DRIVERLESS_USB_LINK"] = saved
    return out


def _link_limits(text: str) -> dict:
    """--copyout-max-mib's LINK=MIB list, refused with the expected form rather than a traceback."""
    limits = {}
    for item in filter(None, text.split(",")):
        link, sep, mib = item.partition("=")
        if not sep or not mib.isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: expected LINK=MIB, e.g. uas=16,bot=1")
        limits[link] = int(mib)
    return limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kib", type=int, default=64, help="bytes copied each way through BAR0 (KiB)")
    ap.add_argument("--sizes", default="1,16,256", help="MiB copied each way through hcq, comma-separated")
    ap.add_argument("--links", default=",".join(LINKS + ("open",)),
                    help="uas, bot (the stock firmware's links) and open (the open firmware's vendor requests)")
    ap.add_argument("--copyout-max-mib", default="uas=16,bot=1", type=_link_limits,
                    help="largest copy-out measured per link, as LINK=MIB,... (the stock firmware's copy-out "
                         "reads 255 bytes a command: linear, and slow to simulate)")
    ap.add_argument("--rtt-us", type=float, default=100.0, help="assumed latency per round trip (microseconds)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    result = measure(args.kib, [int(x) for x in args.sizes.split(",")], args.rtt_us,
                     tuple(args.links.split(",")), args.copyout_max_mib)
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
