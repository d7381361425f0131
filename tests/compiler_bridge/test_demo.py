"""The README's main job: the MLP + softmax demo on the simulated GPU; a second run boots warm."""
import os
import subprocess
import sys


def _demo(env):
    r = subprocess.run([sys.executable, "-m", "compiler_bridge.demo"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_demo_runs_twice_cold_then_warm(debian_firmware, tmp_path):
    env = dict(os.environ, DRIVERLESS_FIRMWARE_DIR=str(debian_firmware), DRIVERLESS_CACHE=str(tmp_path))
    env.pop("DEVICE", None)
    first = _demo(env)
    assert "using the simulated Navi31" in first and "boot: cold" in first
    assert "kernels: " in first and "(ok)" in first
    assert "GPU time per kernel, on the simulator's clock" in first   # not passed off as a card's timing
    assert (tmp_path / "sim" / "navi31.state").is_file()
    second = _demo(env)
    assert "boot: warm" in second and "(ok)" in second


def test_simulated_device_names():
    from compiler_bridge.demo import is_simulated
    assert all(map(is_simulated, ["am:sim", "am:sim:navi33", "am:sim:usb"]))
    assert not any(map(is_simulated, ["am", "am:0000:03:00.0", "c", "am:usb"]))
