"""NVRTC through ctypes: CUDA C++ source -> cubin for one SM, with an on-disk cache. Runs on the CPU, no GPU.

    compile_cuda(source, name="kernel.cu", arch="sm_90", options=()) -> bytes    the cubin (ELF)
    compile_ptx(source, ...) -> str                                               its PTX (not cached)
    available() -> bool          version() -> (major, minor)          supported_archs() -> ["sm_50", ...]

The library is the one in PyPI's NVRTC wheel (`nvidia-cuda-nvrtc-cu12`, a dependency of this project:
`nvidia/cuda_nvrtc/lib/libnvrtc.so.12` inside the installed package), else a system `libnvrtc.so` the
dynamic loader finds. Neither present: `NVRTCMissing` says what to install.

`arch` must be a real SM ("sm_90", "sm_90a"): only a real architecture yields a cubin (a "compute_XX" one
yields PTX only; NVRTC's documentation, nvrtcGetCUBIN). `options` are NVRTC's command-line options
(`--fmad=false`, `-DN=4`, ...); `--gpu-architecture` is added from `arch`. A compile error raises
`NVRTCError` with NVRTC's log and the numbered source.

Cubins are cached by the sha256 of (NVRTC version, name, arch, options, source) in
`$DRIVERLESS_CACHE/nvrtc/` (else `$XDG_CACHE_HOME/driverless/nvrtc/`, else `~/.cache/driverless/nvrtc/`;
the same root as the firmware and the simulated GPUs' state), one file per cubin written atomically, and in
memory for the process.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import importlib.util
import re
import threading
from pathlib import Path

from hcq import cache as hcq_cache

PIP_PACKAGE = "nvidia-cuda-nvrtc-cu12"
# NVRTC_SUCCESS is 0 (nvrtc.h, nvrtcResult); any other value is an error nvrtcGetErrorString names.
_SUCCESS = 0
_ARCH = re.compile(r"sm_(\d+)([af]?)$")


class NVRTCError(RuntimeError):
    """NVRTC refused a source or an option; the message has NVRTC's log and the numbered source."""


class NVRTCMissing(NVRTCError):
    """No NVRTC library could be loaded."""


_memo: dict[str, bytes] = {}
stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0}
_lib = None
_lib_lock = threading.Lock()


def cache_dir() -> Path:
    """$DRIVERLESS_CACHE/nvrtc, else $XDG_CACHE_HOME/driverless/nvrtc, else ~/.cache/driverless/nvrtc."""
    return hcq_cache.subdir("nvrtc")


def library_path() -> str | None:
    """The libnvrtc to load: the PyPI wheel's, else the system's; None when neither is installed."""
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        libs = sorted(Path(base, "lib").glob("libnvrtc.so.*"))
        # libnvrtc.so.12, not the libnvrtc.alt.so.12 variant or the builtins library beside it
        libs = [p for p in libs if re.fullmatch(r"libnvrtc\.so\.\d+", p.name)]
        if libs:
            return str(libs[-1])
    return ctypes.util.find_library("nvrtc")


def _load():
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if path is None:
            raise NVRTCMissing(f"NVRTC (the CUDA runtime compiler) is not installed: pip install {PIP_PACKAGE} "
                               "(a dependency of driverless; `make test` installs it), or install CUDA's "
                               "libnvrtc where the dynamic loader finds it")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise NVRTCMissing(f"NVRTC at {path} could not be loaded ({e}); reinstall {PIP_PACKAGE}") from None
        vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        pint = ctypes.POINTER(ctypes.c_int)
        for fn, args in (("nvrtcVersion", [pint, pint]),
                         ("nvrtcGetNumSupportedArchs", [pint]),
                         ("nvrtcGetSupportedArchs", [pint]),
                         ("nvrtcCreateProgram", [ctypes.POINTER(vp), cp, cp, ctypes.c_int,
                                                 ctypes.POINTER(cp), ctypes.POINTER(cp)]),
                         ("nvrtcCompileProgram", [vp, ctypes.c_int, ctypes.POINTER(cp)]),
                         ("nvrtcGetProgramLogSize", [vp, ctypes.POINTER(sz)]),
                         ("nvrtcGetProgramLog", [vp, ctypes.c_char_p]),
                         ("nvrtcGetCUBINSize", [vp, ctypes.POINTER(sz)]),
                         ("nvrtcGetPTXSize", [vp, ctypes.POINTER(sz)]),
                         ("nvrtcGetPTX", [vp, ctypes.c_char_p]),
                         ("nvrtcGetCUBIN", [vp, ctypes.c_char_p]),
                         ("nvrtcDestroyProgram", [ctypes.POINTER(vp)])):
            f = getattr(lib, fn)
            f.argtypes, f.restype = args, ctypes.c_int
        lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p
        lib.path = path
        _lib = lib
        return lib


def available() -> bool:
    try:
        _load()
        return True
    except NVRTCMissing:
        return False


def version() -> tuple[int, int]:
    lib = _load()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def supported_archs() -> list[str]:
    """The real architectures this NVRTC compiles for, as "sm_XX"."""
    lib = _load()
    n = ctypes.c_int()
    _check(lib, lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
    arr = (ctypes.c_int * n.value)()
    _check(lib, lib.nvrtcGetSupportedArchs(arr), "nvrtcGetSupportedArchs")
    return [f"sm_{a}" for a in arr]


def _check(lib, rc: int, what: str, log: str = "") -> None:
    if rc != _SUCCESS:
        name = lib.nvrtcGetErrorString(rc)
        raise NVRTCError(f"NVRTC {what} failed: {name.decode() if name else rc}" + (f"\n{log}" if log else ""))


def _numbered(source: str) -> str:
    return "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(source.splitlines()))


def _check_arch(arch: str) -> None:
    m = _ARCH.match(arch)
    if not m:
        raise NVRTCError(f"NVRTC: arch {arch!r} is not a real SM architecture such as 'sm_90' or 'sm_90a' "
                         "(a compute_XX target gives PTX, not a cubin)")
    if f"sm_{m.group(1)}" not in supported_archs():
        raise NVRTCError(f"NVRTC {'.'.join(map(str, version()))} does not compile for {arch}; it supports "
                         f"{', '.join(supported_archs())}")


def compile_cuda(source: str, name: str = "kernel.cu", arch: str = "sm_90", options=(),
                 use_cache: bool = True) -> bytes:
    """The cubin of `source` for `arch`. `name` is the program's file name in NVRTC's diagnostics."""
    options = tuple(options)
    if any(o.startswith(("--gpu-architecture", "-arch")) for o in options):
        raise NVRTCError(f"NVRTC options {options}: give the architecture as arch=, not as an option")
    lib = _load()
    ver = version()
    key = hashlib.sha256("\0".join((f"nvrtc{ver}", name, arch, *options, source)).encode()).hexdigest()
    def build() -> bytes:
        _check_arch(arch)
        return _compile(lib, source, name, arch, options)
    return hcq_cache.compiled(cache_dir() / f"{key}.cubin", build, _memo, stats, use_cache)


def compile_ptx(source: str, name: str = "kernel.cu", arch: str = "sm_90", options=()) -> str:
    """The PTX NVRTC makes of `source` on the way to the cubin (not cached): to read what the generated C++
    became (e.g. whether a multiply and an add were contracted into an fma)."""
    _check_arch(arch)
    return _compile(_load(), source, name, arch, tuple(options), ptx=True).decode()


def _compile(lib, source: str, name: str, arch: str, options: tuple, ptx: bool = False) -> bytes:
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}", *options]
        argv = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        log_text = log.value.decode(errors="replace").strip()
        if rc != _SUCCESS:
            why = lib.nvrtcGetErrorString(rc)
            raise NVRTCError(f"NVRTC could not compile {name} for {arch} ({why.decode() if why else rc}; "
                             f"options {' '.join(opts)}):\n{log_text}\nsource:\n{_numbered(source)}")
        what = "PTX" if ptx else "CUBIN"
        _check(lib, getattr(lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(size)), f"nvrtcGet{what}Size")
        if size.value == 0:
            raise NVRTCError(f"NVRTC produced no {what.lower()} for {name} ({arch}); log:\n{log_text}")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, getattr(lib, f"nvrtcGet{what}")(prog, buf), f"nvrtcGet{what}")
        return buf.value if ptx else buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
