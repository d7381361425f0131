"""bench/launch.py runs and reports what it promises (one short run)."""
import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "launch.py"


def test_launch_bench_json(debian_firmware):
    env = dict(os.environ, DRIVERLESS_FIRMWARE_DIR=str(debian_firmware))
    r = subprocess.run([sys.executable, str(BENCH), "-n", "1", "--iters", "200", "--graph-kernels", "4", "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for name in ("fresh_queue", "program_call", "graph_replay"):
        assert out[name]["us_per_launch"] > 0
    assert out["graph_replay"]["graph_kernels"] == 4 and out["fresh_queue"]["target_us"] == 10
    assert out["doorbell_writes"] > 400  # every launch and replay rang the (no-op) doorbell
