"""The README's main job: boot a GPU through AM, run a small MLP forward pass and a softmax, check them.

    python -m compiler_bridge.demo [--device SPEC]

Picks a real AMD GPU through AM when one is present and free, otherwise the simulated Navi31 (and says
so), whose state is kept in a file so that a second run finds the GPU as the first left it and boots warm,
as a real GPU would. Prints the device, the boot kind and time, the kernels launched with their GPU times
from timestamps (on am:sim the simulator's clock, which models the work: not a measurement of a card), and
the largest error against numpy (float64).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import hcq
from compiler_bridge import runtime
from compiler_bridge.tensor import Tensor

# the MLP: BATCH x IN -> HIDDEN (relu) -> OUT, then a row softmax
BATCH, IN, HIDDEN, OUT = 16, 48, 64, 10
TOLERANCE = 1e-4


def pick_device(requested: str | None) -> tuple[str, dict, str]:
    """(device string, open kwargs, why) for the demo. A simulated GPU is kept in its state file
    (hcq.device_facts), whichever way its string was chosen."""
    if requested:
        return requested, {}, "as asked"
    name = runtime.default_device()
    why = "from $DEVICE" if os.environ.get("DEVICE") else "a free AMD GPU found"
    if name == "am:sim" and not os.environ.get("DEVICE"):
        why = "no free AMD GPU found: using the simulated Navi31"
    return name, {}, why + _kept_in(name)


def _kept_in(name: str) -> str:
    state = hcq.device_facts(name)["state"]   # "c", or a string hcq rejects at open: None
    return f", kept in {state}" if state else ""


def next_boot_warm(name: str) -> bool:
    """True when the GPU outlives this process as fini leaves it (a real GPU, or a simulated one kept
    in a state file): only then may the demo say that the next run boots warm."""
    return hcq.device_facts(name)["persistent"]


def is_simulated(name: str) -> bool:
    """am:sim, am:sim:navi33, am:sim:usb: the GPU times are the simulator's, not a card's."""
    return "sim" in name.split(":")[1:2]


def mlp_softmax(x, w1, b1, w2, b2):
    h = (x @ w1 + b1).relu()
    logits = h @ w2 + b2
    e = (logits - logits.max(axis=1, keepdims=True)).exp()
    return h, e / e.sum(axis=1, keepdims=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", help="an hcq device string (am:sim, am:sim:navi33, am, am:0000:03:00.0) or c")
    args = ap.parse_args(argv)
    name, kwargs, why = pick_device(args.device)
    print(f"device: {name} ({why})")
    t0 = time.perf_counter()
    try:
        dev = runtime.open_device(name, **kwargs)
    except Exception as e:  # firmware missing, GPU busy, ...: one line with what to do
        print(f"could not open {name}: {e}", file=sys.stderr)
        return 2
    gpu = getattr(getattr(dev, "dev", None), "gpu", None)
    if gpu is not None:
        r = gpu.boot_report
        print(f"boot: {r.kind} in {r.seconds * 1e3:.0f} ms ({r.reason}); {r.mmio_reads} MMIO reads, "
              f"{r.mmio_writes} writes")
    else:
        print(f"opened in {(time.perf_counter() - t0) * 1e3:.0f} ms")

    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    x = rng.standard_normal((BATCH, IN), np.float32)
    w1 = rng.standard_normal((IN, HIDDEN), np.float32) / np.sqrt(IN)
    b1 = rng.standard_normal(HIDDEN, np.float32) * 0.1
    w2 = rng.standard_normal((HIDDEN, OUT), np.float32) / np.sqrt(HIDDEN)
    b2 = rng.standard_normal(OUT, np.float32) * 0.1

    first = len(runtime.launches)
    t1 = time.perf_counter()
    h, probs = mlp_softmax(*(Tensor(a, device=name) for a in (x, w1, b1, w2, b2)))
    try:
        got_h, got = h.numpy(), probs.numpy()
    except runtime.KernelsNotExecuted as e:     # nv:sim: launches are checked, not run
        print(f"cannot run the demo on {name}: {e}", file=sys.stderr)
        runtime.close_device(name)
        return 2
    wall = time.perf_counter() - t1
    ref_h, ref = (a.astype(np.float32) for a in mlp_softmax_np(x, w1, b1, w2, b2))
    err = max(float(np.max(np.abs(got_h - ref_h))), float(np.max(np.abs(got - ref))))

    ran = runtime.launches[first:]
    print(f"kernels: {len(ran)} launched for the MLP ({BATCH}x{IN} -> {HIDDEN} -> {OUT}) and softmax, "
          f"{wall * 1e3:.0f} ms wall (compiling included)")
    if any(k.seconds is not None for k in ran):
        print("  GPU time per kernel, " + ("on the simulator's clock (modeled time, not a measurement)"
                                           if is_simulated(name) else "from the GPU's timestamps"))
    for k in ran:
        t = f"{k.seconds * 1e6:8.1f} us" if k.seconds is not None else "       -"
        print(f"  {t}  {k.kernel}")
    print(f"largest error vs numpy (float64): {err:.2e} ({'ok' if err < TOLERANCE else 'TOO LARGE'})")
    runtime.close_device(name)
    if gpu is not None:
        print("fini: GPU left idle at low clocks; " + ("the next run boots warm" if next_boot_warm(name)
                                                        else "this simulated GPU is not kept: the next run boots cold"))
    return 0 if err < TOLERANCE else 1


def mlp_softmax_np(x, w1, b1, w2, b2):
    x, w1, b1, w2, b2 = (a.astype(np.float64) for a in (x, w1, b1, w2, b2))
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return h, e / e.sum(axis=1, keepdims=True)


if __name__ == "__main__":
    sys.exit(main())
