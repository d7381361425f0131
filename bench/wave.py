"""Wave executor throughput: executed wave instructions per second on clang-built kernels.

    python bench/wave.py [-n RUNS] [--json]

Compiles two kernels of the test corpus with clang-15 (elementwise add over 256K floats; an 8x8-tiled
LDS matmul, 128x128x128), runs each on rdna3.wave RUNS times and reports medians. Needs clang-15
and ld.lld-15 (Debian packages; `make test` installs them).
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# run as a script, bench/ is sys.path[0]: replace it by the repo root, or bench/usb.py would shadow pyusb
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from rdna3.codeobj import CodeObject  # noqa: E402
from rdna3.wave import dispatch, pack_kernargs  # noqa: E402
from rdna3.wave_memory import FlatMemory  # noqa: E402

KERNELS = Path(__file__).resolve().parents[1] / "tests" / "rdna3" / "kernels"
CLANG = ["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100",
         "-nogpulib", "-O2", "-c"]


def build(stem: str, out: Path) -> CodeObject:
    obj, so = out / f"{stem}.o", out / f"{stem}.so"
    subprocess.run(CLANG + [str(KERNELS / f"{stem}.cl"), "-o", str(obj)], check=True)
    subprocess.run(["ld.lld-15", "-shared", str(obj), "-o", str(so)], check=True)
    return CodeObject.load(so)


def run(co: CodeObject, grid, block, args) -> tuple[float, int]:
    mem = FlatMemory()
    values = [mem.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    t0 = time.perf_counter()
    res = dispatch(co, None, mem, grid, block, pack_kernargs(co.kernel(), values))
    return time.perf_counter() - t0, res.instructions


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        print("bench/wave.py needs clang-15 and ld.lld-15 (apt install clang-15 lld-15)", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    f32, u32 = np.float32, np.uint32
    with tempfile.TemporaryDirectory() as tmp:
        add, mm = build("add_f32", Path(tmp)), build("matmul_tiled", Path(tmp))
    n, m = 1 << 18, 128
    cases = {
        "add_f32 256K": (add, (n,), (256,), lambda: [np.zeros(n, f32), rng.random(n, f32), rng.random(n, f32), u32(n)]),
        "matmul_tiled 128^3": (mm, (m, m), (8, 8), lambda: [np.zeros((m, m), f32), rng.random((m, m), f32),
                                                              rng.random((m, m), f32), u32(m), u32(m), u32(m)]),
    }
    results = {}
    for name, (co, grid, block, make) in cases.items():
        runs = [run(co, grid, block, make()) for _ in range(args.runs)]
        secs = statistics.median(t for t, _ in runs)
        insts = runs[0][1]
        results[name] = {"wave_instructions": insts, "seconds": secs, "wave_instructions_per_s": insts / secs}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"wave executor: medians of {args.runs} runs")
        for name, r in results.items():
            print(f"  {name:20} {r['wave_instructions']:9d} wave instructions  {r['seconds'] * 1e3:8.1f} ms  "
                  f"{r['wave_instructions_per_s'] / 1e6:6.2f} M/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
