"""Devices that run scheduled kernels: "c" (the host reference, codegen/c.py) or any hcq device string.

    register_codegen("rdna3", fn)   # fn(kernel: ir.Kernel) -> (code_object_bytes, kernel_name, launch)
    dev = get_device("am:sim")      # opened once per process; buffers live on it until read back

`launch` is (global_size, local_size) as hcq's prog() takes them: workgroup counts and work items per
workgroup, 3-tuples (ir.launch_dims gives the IR's rule). The codegen is the one named by the CODEGEN
environment variable, else on an nv device "cuda", on an am device "rdna3" when registered, else "llvm".
Codegens register themselves when their module is imported; get_device imports the known codegen modules
that exist.

Default device (default_device()): $DEVICE (an hcq device string, or "c"); else a real AMD GPU through AM
when one is present and not driven by a kernel driver, on PCIe, else behind a USB bridge
(hcq.find_real_device("am"), which the AM backend answers); else "am:sim", after one line on stderr saying why no real GPU was
chosen. The search runs once per process.

Every launch is appended to `launches` (kernel name, device, GPU seconds or None) so callers and tests
can count kernels.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
import weakref
from dataclasses import dataclass

import numpy as np

from compiler_bridge import ir

_CODEGENS: dict[str, object] = {}
_CODEGEN_MODULES = ("compiler_bridge.codegen.rdna3", "compiler_bridge.codegen.llvm", "compiler_bridge.codegen.cuda")
# The generators a device runs, by the backend its string names (hcq's prefix), first registered wins.
_DEFAULT_CODEGENS = {"am": ("rdna3", "llvm"), "nv": ("cuda",)}
_DEVICES: dict[str, "TensorDevice"] = {}
_NP = {"float32": np.float32, "int32": np.int32}


@dataclass
class Launch:
    kernel: str
    device: str
    seconds: float | None


launches: list[Launch] = []


def register_codegen(name: str, fn) -> None:
    """fn(kernel_ir) -> (code_object_bytes, kernel_name, (global_size, local_size))."""
    _CODEGENS[name] = fn


def codegens() -> dict:
    _import_codegens()
    return dict(_CODEGENS)


def _import_codegens() -> None:
    for m in _CODEGEN_MODULES:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError as exc:
            if exc.name != m:
                raise


def default_codegen(spec: str) -> str | None:
    """The first registered generator for the backend `spec` names (nv: cuda; am and others: rdna3, else
    llvm)."""
    _import_codegens()
    backend = spec.split(":", 1)[0].lower()
    return next((c for c in _DEFAULT_CODEGENS.get(backend, _DEFAULT_CODEGENS["am"]) if c in _CODEGENS), None)


def default_device() -> str:
    env = os.environ.get("DEVICE")
    if env:
        return env
    return _real_or_sim()


@functools.lru_cache(maxsize=1)
def _real_or_sim() -> str:
    import hcq    # the AM backend knows which GPUs it can take
    try:
        name, why = hcq.find_real_device("am")
    except Exception as e:  # a search that fails is one more reason, not an error: the simulator serves
        name, why = None, f"the search failed: {e}"
    if name:
        return name
    print(f"driverless: no real GPU chosen ({why}); using the simulator am:sim (set DEVICE to choose)",
          file=sys.stderr)
    return "am:sim"


class KernelsNotExecuted(RuntimeError):
    """The device is a model of a driver interface that records launches but cannot execute kernels (nv:sim)."""


class DeviceBuffer:
    """`n` elements of dtype ("float32" or "int32") on a device; freed when garbage collected."""

    def __init__(self, device: "TensorDevice", handle, n: int, dtype: str):
        self.device, self.handle, self.n, self.dtype = device, handle, n, dtype

    def numpy(self) -> np.ndarray:
        return self.device.download(self)


class TensorDevice:
    """Where the tensor runtime keeps buffers and runs kernels: the host (C) or an hcq device."""
    name: str

    def upload(self, arr: np.ndarray) -> DeviceBuffer: ...
    def alloc(self, n: int, dtype: str) -> DeviceBuffer: ...
    def download(self, buf: DeviceBuffer) -> np.ndarray: ...
    def run(self, kernel: ir.Kernel, bufs: list[DeviceBuffer]) -> None: ...


class CTensorDevice(TensorDevice):
    """The host: buffers are numpy arrays, kernels are C (codegen/c.py)."""
    name = "c"

    def __init__(self):
        self._progs: dict[str, object] = {}

    def upload(self, arr):
        a = np.ascontiguousarray(arr).reshape(-1).copy()
        return DeviceBuffer(self, a, a.size, str(a.dtype))

    def alloc(self, n, dtype):
        return DeviceBuffer(self, np.empty(n, _NP[dtype]), n, dtype)

    def download(self, buf):
        return buf.handle.copy()

    def run(self, kernel, bufs):
        from compiler_bridge.codegen.c import CProgram
        prog = self._progs.get(kernel.name)
        if prog is None:
            prog = self._progs[kernel.name] = CProgram(kernel)
        prog(*(b.handle for b in bufs))
        launches.append(Launch(kernel.name, self.name, None))


class HCQTensorDevice(TensorDevice):
    """An hcq device; kernels through a registered codegen; programs cached by kernel name."""

    def __init__(self, spec: str, codegen: str | None = None, **open_kwargs):
        import hcq
        self.name = spec
        _import_codegens()
        self.codegen = codegen or os.environ.get("CODEGEN") or default_codegen(spec)
        if self.codegen not in _CODEGENS:
            raise RuntimeError(f"compiler_bridge: no code generator for {spec} (asked for {self.codegen!r}; "
                               f"registered: {sorted(_CODEGENS) or 'none'}); use DEVICE=c for the host")
        self.dev = hcq.open(spec, **open_kwargs)
        # An hcq device that records launches without running them (nv:sim: no SASS executor) says so with
        # executes_kernels = False; tensors there would read back memory no kernel wrote.
        self.executes_kernels = bool(getattr(self.dev, "executes_kernels", True))
        self._progs: dict[str, tuple] = {}
        # Buffers whose tensors were garbage collected, freed at the next alloc or launch. Not in the
        # finalizer: the collector can run anywhere, even inside the simulated GPU's doorbell handling of a
        # launch (same thread), where free's synchronize would poll a queue that cannot progress.
        self._dead: list = []

    def _reap(self):
        while self._dead:
            _free(self.dev, self._dead.pop())

    def _recovering(self, fn, *args, **kwargs):
        """fn(*args); after a hang or a fault the device is recovered (hcq recover(): the engines reset, what
        was in flight dropped, buffers kept) before the error goes up, so the next op runs instead of timing
        out behind the hung work."""
        import hcq
        try:
            return fn(*args, **kwargs)
        except (hcq.HCQTimeout, hcq.HCQFault) as e:
            faults = self.dev.recover()
            note = f"; {self.name} recovered{' (' + '; '.join(faults) + ')' if faults else ''}: later ops run"
            raise type(e)(f"{e}{note}") from e

    def upload(self, arr):
        a = np.ascontiguousarray(arr).reshape(-1)
        buf = self.alloc(a.size, str(a.dtype))
        self._recovering(self.dev.copyin, buf.handle, a.tobytes())
        return buf

    def alloc(self, n, dtype):
        self._reap()
        handle = self.dev.alloc(max(4 * n, 4))
        buf = DeviceBuffer(self, handle, n, dtype)
        weakref.finalize(buf, self._dead.append, handle)
        return buf

    def download(self, buf):
        return np.frombuffer(self._recovering(self.dev.copyout, buf.handle, 4 * buf.n), _NP[buf.dtype]).copy()

    def run(self, kernel, bufs):
        self._reap()
        entry = self._progs.get(kernel.name)
        if entry is None:
            code, name, launch = _CODEGENS[self.codegen](kernel)
            entry = self._progs[kernel.name] = (self.dev.program(code, name), launch)
        prog, (gsz, lsz) = entry
        secs = self._recovering(prog, *(b.handle for b in bufs), global_size=tuple(gsz), local_size=tuple(lsz),
                                wait=True)
        launches.append(Launch(kernel.name, self.name, secs))
        if not self.executes_kernels:
            # compiled, loaded and launched (the model checked and recorded the launch); only the run is missing
            raise KernelsNotExecuted(f"compiler_bridge: {self.name} does not execute kernels: kernel {kernel.name} was "
                                     "compiled, loaded and launched (the launch checked and recorded) but did not run, "
                                     "so its output is not computed; use a real GPU (DEVICE=nv, DEVICE=am), the "
                                     "simulated AMD GPU (am:sim) or the host (c)")

    def close(self):
        self.dev.close()


def _free(dev, handle):
    try:
        dev.free(handle)
    except Exception:  # the device was closed first: its memory went with it
        pass


def get_device(name: str | None = None) -> TensorDevice:
    """The device named (or the default), opened once per process."""
    name = name or default_device()
    if name not in _DEVICES:
        open_device(name)
    return _DEVICES[name]


def open_device(name: str, codegen: str | None = None, **open_kwargs) -> TensorDevice:
    """Opens (or reopens) the device that tensors naming `name` use; open_kwargs go to hcq.open
    (e.g. fresh=True for a newly powered simulated GPU)."""
    close_device(name)
    _DEVICES[name] = CTensorDevice() if name.lower() == "c" else HCQTensorDevice(name, codegen, **open_kwargs)
    return _DEVICES[name]


def close_device(name: str) -> None:
    """Closes the device opened for `name` (hcq fini); tensors still on it can no longer be read."""
    dev = _DEVICES.pop(name, None)
    if isinstance(dev, HCQTensorDevice):
        dev.close()
