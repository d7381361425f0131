"""Compile time per kernel: our RDNA3 generator against clang-15 (the LLVM generator), same IR programs.

    python bench/compile.py [-n RUNS] [--json]

For each kernel of compiler_bridge.codegen.samples (elementwise chains, unary math, reductions, a
softmax, a matmul, int32 index arithmetic, uniform arithmetic, register pressure), medians over RUNS
fresh compiles of the IR to a code object, in milliseconds:
  rdna3      codegen_rdna3: IR -> assembly text -> rdna3.assemble -> codeobj.write_code_object
             (the per-process memo bypassed)
  llvm       codegen_llvm: IR -> OpenCL C -> clang-15 -O2 -> ld.lld-15 (the cache bypassed: two
             processes per compile); absent when clang-15 is not installed
  ratio      llvm / rdna3 (how many times faster our generator is), measured in the same run
Also reported: machine code bytes of each (the kernel's code, s_endpgm and padding included) and the
wave instructions each executes for the sample's inputs on rdna3's wave executor (all waves summed);
and the demo's MLP + softmax end to end on am:sim per generator (Tensor to numpy: scheduling, launches,
the simulated GPU's execution, read-back), first run (compiling included) and the median of the rest.
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

from rdna3 import asm  # noqa: E402
from rdna3.codeobj import CodeObject, write_code_object  # noqa: E402
from rdna3 import opencl as codegen_clang  # noqa: E402
from compiler_bridge.codegen import llvm as codegen_llvm, rdna3 as codegen_rdna3  # noqa: E402
from compiler_bridge.codegen.samples import run_wave, samples  # noqa: E402


def _rdna3(k) -> bytes:
    return write_code_object([codegen_rdna3.kernel_spec(k, asm.assemble(codegen_rdna3.assembly(k)))])


def _llvm(k) -> bytes:
    return codegen_clang.compile_opencl(codegen_llvm.opencl_source(k), use_cache=False)


def _executed(s, co) -> int:
    st: dict = {}
    run_wave(s, co, s.kernel.name, codegen_rdna3.ir.launch_dims(s.kernel), st)
    return st["instructions"]


def _median_ms(fn, k, runs):
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn(k)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, out


def mlp_end_to_end(codegen: str, runs: int) -> dict:
    """The demo's MLP + softmax on a fresh am:sim through one generator: seconds, first and median."""
    import numpy as np
    from compiler_bridge import runtime
    from compiler_bridge.demo import BATCH, HIDDEN, IN, OUT, mlp_softmax
    from compiler_bridge.tensor import Tensor
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape, np.float32) for shape in ((BATCH, IN), (IN, HIDDEN), (HIDDEN,),
                                                                    (HIDDEN, OUT), (OUT,))]
    runtime.open_device("am:sim", codegen=codegen, fresh=True)
    times = []
    try:
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            mlp_softmax(*(Tensor(a, device="am:sim") for a in arrays))[1].numpy()
            times.append(time.perf_counter() - t0)
    finally:
        runtime.close_device("am:sim")
    return {"first_s": round(times[0], 4), "median_s": round(statistics.median(times[1:]), 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    have_clang = codegen_clang.available()
    rows = []
    for name, s in samples().items():
        k = s.kernel
        r_ms, r_co = _median_ms(_rdna3, k, a.runs)
        row = {"kernel": name, "ir_ops": sum(1 for _ in k.walk()), "rdna3_ms": round(r_ms, 3),
               "rdna3_code_bytes": len(CodeObject(r_co).kernel(k.name).code),
               "rdna3_wave_instructions": _executed(s, r_co)}
        if have_clang:
            l_ms, l_co = _median_ms(_llvm, k, a.runs)
            row.update(llvm_ms=round(l_ms, 3), llvm_code_bytes=len(CodeObject(l_co).kernel(k.name).code),
                       llvm_wave_instructions=_executed(s, l_co), ratio=round(l_ms / r_ms, 1))
        rows.append(row)
    summary = {"runs": a.runs, "clang": have_clang,
               "rdna3_median_ms": round(statistics.median(r["rdna3_ms"] for r in rows), 3)}
    if have_clang:
        summary["llvm_median_ms"] = round(statistics.median(r["llvm_ms"] for r in rows), 3)
    summary["mlp_am_sim"] = {c: mlp_end_to_end(c, a.runs) for c in ("rdna3", "llvm") if c == "rdna3" or have_clang}
    if a.json:
        print(json.dumps({"kernels": rows, **summary}))
        return 0
    print(f"compile time per kernel, median of {a.runs} (ms)" + ("" if have_clang else "; clang-15 not installed"))
    head = f"{'kernel':14} {'IR ops':>6} {'rdna3':>8} {'bytes':>6} {'instrs':>7}"
    print(head + (f" {'llvm':>8} {'bytes':>6} {'instrs':>7} {'llvm/rdna3':>10}" if have_clang else ""))
    for r in rows:
        line = (f"{r['kernel']:14} {r['ir_ops']:6d} {r['rdna3_ms']:8.2f} {r['rdna3_code_bytes']:6d}"
                f" {r['rdna3_wave_instructions']:7d}")
        if have_clang:
            line += (f" {r['llvm_ms']:8.2f} {r['llvm_code_bytes']:6d} {r['llvm_wave_instructions']:7d}"
                     f" {r['ratio']:10.1f}")
        print(line)
    print("median: rdna3 %.2f ms" % summary["rdna3_median_ms"]
          + (", llvm %.2f ms" % summary["llvm_median_ms"] if have_clang else ""))
    for c, m in summary["mlp_am_sim"].items():
        print(f"MLP + softmax on am:sim via {c}: first run {m['first_s'] * 1e3:.0f} ms (compiling included), "
              f"then median {m['median_s'] * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
