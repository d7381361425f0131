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
