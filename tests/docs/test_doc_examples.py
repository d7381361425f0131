"""The docs' first examples run as written (issue 12: a reader copies them first)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def first_python_block(doc: str) -> str:
    return re.search(r"```python\n(.*?)```", (ROOT / "docs" / doc).read_text(), re.S).group(1)


def run(code: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    # A fresh process: the simulator's bus and slots are per process, as a reader's would be.
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_simulator_md_first_example(tmp_path):
    r = run(first_python_block("simulator.md"), tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "gpu.state").is_file()   # saved at exit, as the page says


def test_compiler_md_first_example(tmp_path, debian_firmware):
    code = first_python_block("compiler.md")
    assert "len(y.schedule())" in code
    r = run(code + "\nimport numpy as np\nassert np.allclose(y.numpy().sum(-1), 1, atol=1e-5)\n", tmp_path,
            DEVICE="am:sim", DRIVERLESS_FIRMWARE_DIR=str(debian_firmware))
    assert r.returncode == 0, r.stderr


def test_hcq_md_first_example(tmp_path, debian_firmware):
    """hcq.md's first example: plain OpenCL C through dev.compile_opencl, run on am:sim."""
    from amdrv.isa import opencl
    if not opencl.available():
        pytest.skip("clang-15 and ld.lld-15 are needed")
    code = first_python_block("hcq.md")
    assert "dev.compile_opencl(" in code
    r = run(code + "\nassert np.array_equal(y, 2 * x), y[:8]\n", tmp_path, DRIVERLESS_FIRMWARE_DIR=str(debian_firmware))
    assert r.returncode == 0, r.stderr


def test_environment_md_lists_every_variable_read():
    # Every os.environ/getenv name in the packages (and the test config) has a row in docs/environment.md.
    doc = (ROOT / "docs" / "environment.md").read_text()
    pat = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["']([A-Z_][A-Z0-9_]*)["']""")
    const = re.compile(r"""^\s*[A-Z_]*ENV[A-Z_]*\s*=\s*["']([A-Z_][A-Z0-9_]*)["']""", re.M)
    ours = re.compile(r"""["'](DRIVERLESS_[A-Z0-9_]+)["']""")   # any of our names, however it is read
    names = set()
    for pkg in ("amdrv", "compiler_bridge", "hcq", "nvdrv", "pcie", "gpusim", "tools", "bench", "driverless"):
        for f in (ROOT / pkg).rglob("*.py"):
            text = f.read_text()
            names |= set(pat.findall(text)) | set(const.findall(text)) | set(ours.findall(text))
    names |= set(pat.findall((ROOT / "tests" / "conftest.py").read_text()))
    assert {"DEVICE", "DRIVERLESS_CACHE", "DRIVERLESS_COLD_BOOT", "DRIVERLESS_FIRMWARE_DIR"} <= names
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"docs/environment.md lacks {missing}"


def test_nv_md_first_example(tmp_path):
    """nv.md's example on the model (needs the nv entry points: a reinstall registers them; NVRTC)."""
    import hcq
    from nvdrv import nvrtc
    if "nv" not in hcq.backends() or not nvrtc.available():
        pytest.skip("needs the nv entry points (pip install -e .) and NVRTC (nvidia-cuda-nvrtc-cu12)")
    r = run(first_python_block("nv.md"), ROOT)
    assert r.returncode == 0, r.stderr
    assert "nv:sim: GH100 sm_90" in r.stdout
