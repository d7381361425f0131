"""OpenCL C -> an AMDHSA code object for an RDNA3 GPU, through clang-15 and ld.lld-15, with an on-disk cache.

    compile_opencl(source, mcpu="gfx1100") -> bytes      the linked code object (ELF, ET_DYN)
    HEADER                                              the shipped header every source is built with

The pipeline: `clang-15 -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx1100 -nogpulib -O2
-include HEADER -c` (`opt=` picks another level), then `ld.lld-15 -shared`. No device library is linked
(-nogpulib), so the OpenCL work-item functions (`get_global_id` & co.) and `barrier` come from HEADER
(rdna3/include/driverless_cl.h), which reads them from the hardware and the dispatch packet; it is
force-included, so plain OpenCL C compiles unchanged. `dev.compile_opencl(source)` on an AM hcq device
picks the device's `mcpu`.

Results are cached by the sha256 of (source, header, mcpu, flags) in `kernels/` under the cache root
(`$DRIVERLESS_CACHE`, else `$XDG_CACHE_HOME/driverless`, else `~/.cache/driverless`: hcq.cache; one file
per code object, written atomically), and in memory for the process. A missing clang-15 or ld.lld-15
raises `ClangMissing` (a RuntimeError) naming the Debian packages to install; a compile error raises
`ClangError` with clang's diagnostics and the source.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from hcq import cache as hcq_cache

CLANG, LLD = "clang-15", "ld.lld-15"
FLAGS = ("-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-nogpulib")
HEADER = Path(__file__).parent / "include" / "driverless_cl.h"
OPT = "-O2"


class ClangError(RuntimeError):
    """clang-15 or ld.lld-15 rejected a generated source."""


class ClangMissing(ClangError):
    """clang-15 or ld.lld-15 is not installed."""


_memo: dict[str, bytes] = {}
stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0}


def cache_dir() -> Path:
    return hcq_cache.subdir("kernels")


_header: str | None = None   # HEADER's text, read once: it is part of every cache key


def _header_text() -> str:
    global _header
    if _header is None:
        _header = HEADER.read_text()
    return _header


def available() -> bool:
    return bool(shutil.which(CLANG) and shutil.which(LLD))


def _tools() -> tuple[str, str]:
    clang, lld = shutil.which(CLANG), shutil.which(LLD)
    if not clang or not lld:
        missing = " and ".join(t for t, p in ((CLANG, clang), (LLD, lld)) if not p)
        raise ClangMissing(f"compiling OpenCL C (the LLVM code generator, dev.compile_opencl) needs {missing} "
                           "on PATH (Debian: apt-get install clang-15 lld-15); the rdna3 generator needs neither")
    return clang, lld


def compile_opencl(source: str, mcpu: str = "gfx1100", use_cache: bool = True, opt: str = OPT) -> bytes:
    """`opt`: clang's optimisation level (-O0 .. -O3; the generator uses -O2)."""
    flags = (*FLAGS, opt, "-include", str(HEADER))
    key = hashlib.sha256("\0".join((source, _header_text(), mcpu, *FLAGS, opt)).encode()).hexdigest()
    return hcq_cache.compiled(cache_dir() / f"{key}.co", lambda: _build(source, flags, mcpu), _memo, stats,
                              use_cache)


def _build(source: str, flags: tuple, mcpu: str) -> bytes:
    clang, lld = _tools()
    with tempfile.TemporaryDirectory(prefix="driverless-cl-") as tmp:
        src, obj, so = Path(tmp, "k.cl"), Path(tmp, "k.o"), Path(tmp, "k.so")
        src.write_text(source)
        for cmd in ([clang, *flags, f"-mcpu={mcpu}", "-c", str(src), "-o", str(obj)],
                    [lld, "-shared", str(obj), "-o", str(so)]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                numbered = "\n".join(f"{i + 1:4d}  {l}" for i, l in enumerate(source.splitlines()))
                raise ClangError(f"{Path(cmd[0]).name} failed ({r.returncode}):\n{r.stderr.strip()}\n"
                                 f"source:\n{numbered}")
        return so.read_bytes()
