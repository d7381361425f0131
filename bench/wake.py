"""Wake latency and idle power of a held GPU (issue 14): what the first submission after idle costs, and the
board power after N seconds idle against a busy board.

    python bench/wake.py [-n RUNS] [--idle 0.25,0.5,1,2,4] [--json]

The GPU is a simulated Navi31 kept in a state file of the bench's own (a temporary directory: the user's
`am:sim` is not touched), held through hcq as a user's process holds `am:sim`: a device lock, GFXOFF allowed
after the driver's idle delay (amdrv.monitor.GfxOff), and the SMU model powering GFX off once it is idle.

What is timed (medians over RUNS runs):
  wake     one small kernel (s_endpgm, 64 workgroups) submitted and waited for once GFX is off (the doorbell
           wakes it: a GFXOFF exit), against the same kernel submitted while GFX is on (back to back). Reported
           on the simulator's clock (clock steps of 1 us from the doorbell to the fence, read inside the
           simulator: a bench may look, the driver never does) and in host time (the call's wall time).
           The added latency is the difference of the medians. DPM raises the clocks in the same step as the
           work arrives in the model (the PMFW's ramp is not public), so the added latency is the GFXOFF exit.
  idle     board power, GFXCLK and GFX activity from the SMU metrics table (what driverless-smi shows) after
           1.5 s of kernels back to back ("busy") and then after each idle interval.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# run as a script, bench/ is sys.path[0]: replace it by the repo root, or bench/usb.py would shadow pyusb
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from amdrv.firmware import FirmwareError  # noqa: E402

BUSY_S = 1.5
SAXPY = ("__kernel void saxpy(__global float *y, __global const float *x, float alpha, uint n) {"
         " uint i = get_global_id(0); if (i < n) y[i] = alpha * x[i] + y[i]; }")


def _sim_device(dev):
    return dev.gpu.dev.pci.dev      # the simulated GPU behind the hcq device's function (gpusim.provider)


def _until_off(dev, smu, timeout: float = 10.0) -> float:
    t0 = time.perf_counter()
    while not (dev.gfxoff.allowed and smu.gfx_power() == "off"):
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError("GFX did not power off while idle (GFXOFF never allowed?)")
        time.sleep(0.02)
    return time.perf_counter() - t0


def _timed(simdev, call) -> tuple[int, float]:
    s0, t0 = simdev.steps, time.perf_counter()
    call()
    return simdev.steps - s0, time.perf_counter() - t0


def measure(runs: int, idle_points: list[float], state: Path) -> dict:
    import numpy as np

    import pcie
    from amdrv import monitor
    from amdrv.am import AMGPU
    from amdrv.hcq import AMHCQDevice
    from bench.launch import code_object

    pcie.open_function("sim", "navi31", fresh=True, state=str(state)).close()     # powered on, kept there
    dev = AMHCQDevice(AMGPU.open(pcie.open_function("sim", "navi31", state=str(state))), "am:sim")
    try:
        simdev = _sim_device(dev)
        smu = simdev.blocks["SMU"]
        prog = dev.program(code_object(), "add_f32")
        buf = dev.alloc(4096)

        def small():
            prog(buf, buf, buf, 0, global_size=(64,), local_size=(32,), wait=True)
        small()
        warm, cold, exits = [], [], []
        for _ in range(runs):
            _until_off(dev, smu)
            e0 = smu.gfxoff_exits
            cold.append(_timed(simdev, small))
            exits.append(smu.gfxoff_exits - e0)
            warm.append(_timed(simdev, small))      # right after: GFX on, clocks up
        med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
        wake = {"runs": runs, "gfxoff_exits_per_wake": statistics.median(exits),
                "after_idle_sim_us": med(cold, 0), "gfx_on_sim_us": med(warm, 0),
                "added_sim_us": med(cold, 0) - med(warm, 0),
                "after_idle_host_ms": med(cold, 1) * 1e3, "gfx_on_host_ms": med(warm, 1) * 1e3,
                "added_host_ms": (med(cold, 1) - med(warm, 1)) * 1e3,
                "gfxoff_delay_s": dev.gfxoff.delay_s}

        n = 1 << 16
        x, y = dev.alloc(4 * n), dev.alloc(4 * n)
        dev.copyin(x, np.ones(n, np.float32))
        saxpy = dev.program(dev.compile_opencl(SAXPY), "saxpy")
        end = time.time() + BUSY_S
        while time.time() < end:
            saxpy(y, x, 2.0, n, global_size=(n // 256,), local_size=(256,), wait=True)

        def sample() -> dict:
            m = monitor.snapshot(dev.gpu.smu)
            return {"board_w": m["power_w"]["board"], "gfx_mhz": m["clocks_mhz"]["gfx"],
                    "gfx_activity_pct": m["activity_pct"]["gfx"], "gfxoff_allowed": dev.gfxoff.allowed}
        idle = {"busy": sample()}
        t_idle = time.perf_counter()
        for point in sorted(idle_points):
            time.sleep(max(0.0, t_idle + point - time.perf_counter()))
            idle[f"{point:g}s"] = sample()
    finally:
        dev.close()
    return {"wake": wake, "idle_power": idle}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("--idle", default="0.25,0.5,1,2,4", help="seconds idle at which to sample power")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    points = [float(p) for p in args.idle.split(",") if p]
    os.environ.setdefault("DRIVERLESS_PUBLISH_S", "0")     # no metrics file beside the bench's GPU
    with tempfile.TemporaryDirectory(prefix="driverless-wake-") as tmp:
        res = measure(args.runs, points, Path(tmp) / "navi31.state")
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    w = res["wake"]
    print(f"first submission after idle on am:sim (GFXOFF allowed after {w['gfxoff_delay_s']:g} s; "
          f"medians of {w['runs']} runs)")
    print(f"  simulator clock  after idle {w['after_idle_sim_us']:.0f} us, GFX on {w['gfx_on_sim_us']:.0f} us: "
          f"added {w['added_sim_us']:.0f} us (the GFXOFF exit)")
    print(f"  host time        after idle {w['after_idle_host_ms']:.2f} ms, GFX on {w['gfx_on_host_ms']:.2f} ms: "
          f"added {w['added_host_ms']:.2f} ms")
    print("board power (SMU metrics):")
    for k, v in res["idle_power"].items():
        label = "busy" if k == "busy" else f"idle {k}"
        gfx = "off" if v["gfx_mhz"] == 0 else f"{v['gfx_mhz']} MHz"
        print(f"  {label:10} {v['board_w']:4d} W  GFXCLK {gfx:9}  GFX activity {v['gfx_activity_pct']}%")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FirmwareError as e:  # the usual first-run problem: say how to get the firmware, no traceback
        sys.exit(f"{e}\n(or run `make demo` once: it seeds the cache from Debian's firmware-amd-graphics)")
