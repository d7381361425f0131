"""CPU cost of a kernel launch through hcq on the NVIDIA backend, beside CUDA's own on the same GPU.

    python bench/nv_launch.py [--device nv|nv:sim] [-n RUNS] [--iters N] [--graph-kernels K] [--json]

What is timed (medians over RUNS runs of N launches each, microseconds per launch, submitting side):
  fresh_queue    a freshly built queue per launch: compute_queue(), exec (QMD and constant bank written
                 into a launch slot, SEND_PCAS methods), signal (a semaphore release), submit (commands
                 copied to the channel's area, a GPFIFO entry, GPPut, the doorbell write)
  program_call   prog(*args, global_size, local_size): the same through the Program convenience call
  graph_replay   per kernel of a K-kernel graph replayed with a new buffer and a new scalar for every kernel
  cuda_launch    cuLaunchKernel of the same cubin on a stream (libcuda through ctypes; a real GPU only)
  cuda_graph     per kernel of a K-kernel CUDA graph (stream capture) launched with cuGraphLaunch
On nv:sim the model's execution is excluded: the doorbell is a counting no-op that marks the channel's
entries consumed and the timeline reached, so only the driver's side is timed. On a GPU the launches run
(an empty-bodied kernel) and the device is synchronized between runs, outside the timing.
The kernel: `add(out, a, b, n)` compiled by NVRTC for sm_90 (nvdrv.nvrtc).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

import hcq  # noqa: E402
from bench.hcq_cases import launch_cases  # noqa: E402
from nvdrv import classes as C  # noqa: E402

SOURCE = r'''extern "C" __global__ void add(float *out, const float *a, const float *b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && n == 0xFFFFFFFFu) out[i] = a[i] + b[i];   /* never true: the launch cost, not the work */
}'''


class NoOpDoorbell:
    """Stands in for the usermode page on nv:sim: counts doorbell writes, marks the channel's entries
    consumed (GPGet = GPPut in USERD) and the device's timeline reached."""

    def __init__(self, dev):
        self.dev, self.writes = dev, 0

    def write32(self, offset: int, token: int) -> None:
        self.writes += 1
        for ch in (self.dev.compute, self.dev.copier):
            if ch.token == token:
                ch.userd.view.cast("B").cast("I")[(ch.userd_off + C.USERD_GP_GET) // 4] = ch.put
                ch.known_get = ch.put
        self.dev.timeline.mem[0] = self.dev.timeline_value


def per_launch_us(fn, iters: int, per: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / (iters * per) * 1e6


class Cuda:
    """The few driver-API calls the comparison needs, through ctypes (libcuda.so.1 of the installed driver)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.stream = ctypes.c_void_p()
        self.check(self.lib.cuStreamCreate(ctypes.byref(self.stream), 1), "cuStreamCreate")   # NON_BLOCKING

    @staticmethod
    def check(rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"CUDA {what} failed with CUresult {rc}")

    def function(self, cubin: bytes, name: str):
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
        return fn

    def alloc(self, n: int) -> ctypes.c_uint64:
        p = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc")
        return p

    def launcher(self, fn, args: list, grid, block):
        holders = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_uint32(a) for a in args]
        params = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.byref(h), ctypes.c_void_p) for h in holders])
        lib, stream = self.lib, self.stream

        def launch():
            lib.cuLaunchKernel(fn, *grid, *block, 0, stream, params, None)
        launch.keep = (holders, params)
        return launch

    def graph(self, launch, k: int):
        graph, exe = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuStreamBeginCapture_v2(self.stream, 0), "cuStreamBeginCapture")
        for _ in range(k):
            launch()
        self.check(self.lib.cuStreamEndCapture(self.stream, ctypes.byref(graph)), "cuStreamEndCapture")
        self.check(self.lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_uint64(0)),
                   "cuGraphInstantiate")
        lib, stream = self.lib, self.stream
        return lambda: lib.cuGraphLaunch(exe, stream)

    def sync(self) -> None:
        self.check(self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="nv:sim")
    ap.add_argument("-n", "--runs", type=int, default=7)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--graph-kernels", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from nvdrv import nvrtc
    if not nvrtc.available():
        print("bench/nv_launch.py: NVRTC is not installed (pip install nvidia-cuda-nvrtc-cu12)", file=sys.stderr)
        return 2
    cubin = nvrtc.compile_cuda(SOURCE, "add.cu")
    sim = args.device.split(":")[1:2] == ["sim"]
    dev = hcq.open(args.device)
    try:
        real_doorbell = dev.doorbell
        if sim:
            dev.doorbell = NoOpDoorbell(dev)
        prog = dev.program(cubin, "add")
        cases = {name: (fn, per, dev.synchronize)
                 for name, (fn, per) in launch_cases(dev, prog, args.graph_kernels).items()}
        if not sim:
            cu = Cuda()     # the same launches through CUDA's driver library: grid, block and sizes as hcq_cases
            n, g3, l3, k = 1024, (4, 1, 1), (256, 1, 1), args.graph_kernels
            fn = cu.function(cubin, "add")
            ptrs = [cu.alloc(4 * n) for _ in range(3)]
            launch = cu.launcher(fn, [*ptrs, n], g3, l3)
            cases["cuda_launch"] = (launch, 1, cu.sync)
            cases["cuda_graph"] = (cu.graph(launch, k), k, cu.sync)
        results = {}
        for name, (fn_, per, sync) in cases.items():
            per_launch_us(fn_, max(args.iters // 10, 1), per)   # warm-up
            sync()
            iters = args.iters if per == 1 else max(args.iters // per, 20)
            runs = []
            for _ in range(args.runs):
                runs.append(per_launch_us(fn_, iters, per))
                sync()
            results[name] = {"us_per_launch": statistics.median(runs), "runs": args.runs,
                             "launches_per_run": iters * per}
        results["graph_replay"]["graph_kernels"] = args.graph_kernels
        results["device"] = repr(dev)
        if sim:
            results["doorbell_writes"] = dev.doorbell.writes
    finally:
        dev.doorbell = real_doorbell
        dev.close()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"hcq launch CPU cost on {args.device}, submitting side (medians of {args.runs} runs): {results['device']}")
        for name in cases:
            r = results[name]
            extra = f" per kernel of {k}" if name in ("graph_replay", "cuda_graph") else ""
            print(f"  {name:13} {r['us_per_launch']:7.2f} us{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
