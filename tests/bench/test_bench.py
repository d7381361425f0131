"""The benchmarks run and report what they promise (one quick run each)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script, debian_firmware, *args):
    env = dict(os.environ, DRIVERLESS_FIRMWARE_DIR=str(debian_firmware))
    r = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_boot_bench(debian_firmware):
    boots = _run("boot.py", debian_firmware, "-n", "1", "--json")["boots"]
    cold, warm = boots["cold"], boots["warm"]
    assert cold["mmio_reads"] > 0 and cold["seconds"] > 0
    assert warm["mmio_writes"] < cold["mmio_writes"]  # a warm boot redoes only part of the work


def test_wave_bench(debian_firmware):
    if not shutil.which("clang-15"):
        pytest.skip("clang-15 not installed")
    res = _run("wave.py", debian_firmware, "-n", "1", "--json")
    assert set(res) == {"add_f32 256K", "matmul_tiled 128^3"}
    assert all(r["wave_instructions"] > 0 and r["wave_instructions_per_s"] > 0 for r in res.values())


def test_nv_launch_bench():
    """bench/nv_launch.py on nv:sim reports the driver-side CPU cost per launch and per graph kernel."""
    import hcq
    from nvdrv import nvrtc
    if "nv" not in hcq.backends() or not nvrtc.available():
        pytest.skip("needs the nv entry points (pip install -e .) and NVRTC")
    r = subprocess.run([sys.executable, str(BENCH / "nv_launch.py"), "-n", "1", "--iters", "40", "--graph-kernels", "4",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert all(out[k]["us_per_launch"] > 0 for k in ("fresh_queue", "program_call", "graph_replay"))
    assert out["doorbell_writes"] > 0 and "cuda_launch" not in out     # CUDA's side needs a real GPU
