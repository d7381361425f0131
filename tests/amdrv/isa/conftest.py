"""Compiles the OpenCL C kernel corpus once per test session (clang-15 + ld.lld-15)."""
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "kernels"
CLANG = ["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100",
         "-nogpulib", "-O2", "-c"]


def _build(src: Path, out: Path) -> Path:
    obj, so = out / (src.stem + ".o"), out / (src.stem + ".so")
    for cmd in (CLANG + [str(src), "-o", str(obj)], ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return so


@pytest.fixture(scope="session")
def kernel_corpus(tmp_path_factory) -> dict[str, Path]:
    """{kernel file stem: path of its linked code object}; skips when LLVM 15 is not installed."""
    if not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("clang-15 and ld.lld-15 are needed to build the kernel corpus")
    out = tmp_path_factory.mktemp("kernels")
    sources = sorted(KERNELS.glob("*.cl"))
    with ThreadPoolExecutor(max_workers=8) as pool:
        paths = list(pool.map(lambda s: _build(s, out), sources))
    return {s.stem: p for s, p in zip(sources, paths)}
