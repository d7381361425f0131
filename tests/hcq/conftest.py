"""Fixtures: the OpenCL C kernel corpus of tests/amdrv/isa/kernels compiled once per session (clang-15 +
ld.lld-15, as tests/amdrv/isa/conftest.py does), and a freshly powered simulated GPU opened through hcq."""
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import hcq

KERNELS = Path(__file__).resolve().parents[1] / "amdrv" / "isa" / "kernels"
CLANG = ["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100",
         "-nogpulib", "-O2", "-c", "-I", str(KERNELS)]
USED = ("add_f32", "saxpy", "matmul_tiled", "reduce_sum", "atomics", "local_reverse", "grid3d", "private_array")


def _build(src: Path, out: Path) -> Path:
    obj, so = out / (src.stem + ".o"), out / (src.stem + ".so")
    for cmd in (CLANG + [str(src), "-o", str(obj)], ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return so


@pytest.fixture(scope="session")
def kernel_corpus(tmp_path_factory) -> dict[str, bytes]:
    """{kernel file stem: its linked code object}; skips when LLVM 15 is not installed."""
    if not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("clang-15 and ld.lld-15 are needed to build the kernel corpus")
    out = tmp_path_factory.mktemp("hcq_kernels")
    sources = [KERNELS / f"{s}.cl" for s in USED] + [Path(__file__).parent / "kernels" / "faults.cl"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        paths = list(pool.map(lambda s: _build(s, out), sources))
    return {s.stem: p.read_bytes() for s, p in zip(sources, paths)}


@pytest.fixture
def dev(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    d = hcq.open("am:sim", fresh=True)
    yield d
    d.close()
