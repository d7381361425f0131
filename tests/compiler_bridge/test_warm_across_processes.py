"""The same device string means the same simulated GPU in every entry point and every process: it is kept
in its state file (amdrv.device_spec.sim_state_path), so a run after a clean one boots warm whichever
entry point ran before, and what a run says about the next boot is true (issue 12)."""
import os
import subprocess
import sys

import pytest


def _run(env, *args, device_env=None):
    env = dict(env)
    if device_env:
        env["DEVICE"] = device_env
    r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture
def env(debian_firmware, tmp_path):
    e = dict(os.environ, DRIVERLESS_FIRMWARE_DIR=str(debian_firmware), DRIVERLESS_CACHE=str(tmp_path))
    e.pop("DEVICE", None)
    return e


def test_every_entry_point_finds_the_gpu_the_last_left(env, tmp_path):
    first = _run(env, "compiler_bridge.demo", device_env="am:sim")            # DEVICE=am:sim make demo
    assert "boot: cold" in first and "the next run boots warm" in first and "(ok)" in first
    assert (tmp_path / "sim" / "navi31.state").is_file()
    second = _run(env, "compiler_bridge.demo", "--device", "am:sim")         # demo --device am:sim
    assert "boot: warm" in second, second
    info = _run(env, "amdrv", "info", "--device", "am:sim")                   # python -m amdrv info
    assert "Boot: warm" in info and "the next open boots warm" in info, info
    after = _run(env, "compiler_bridge.demo")                                 # make demo (the default path)
    assert "boot: warm" in after and "did not finish" not in after, after    # info left it clean, no crash
    again = _run(env, "amdrv", "info", "--device", "am:sim")
    assert "Boot: warm" in again, again


def test_the_gpu_behind_the_simulated_usb_bridge_is_kept_too(env, tmp_path):
    first = _run(env, "compiler_bridge.demo", device_env="am:sim:usb")        # DEVICE=am:sim:usb make demo
    assert "boot: cold" in first and "the next run boots warm" in first and "(ok)" in first
    assert (tmp_path / "sim" / "navi31-usb.state").is_file()
    info = _run(env, "amdrv", "info", "--device", "am:sim:usb")
    assert "Boot: warm" in info, info


def test_device_strings_name_their_state_files(monkeypatch, tmp_path):
    from amdrv import device_spec
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    sim, n33, usb = (device_spec.parse(s) for s in ("am:sim", "am:sim:navi33", "am:sim:usb"))
    assert sim.options == {"state": str(tmp_path / "sim" / "navi31.state")}
    assert n33.options == {"state": str(tmp_path / "sim" / "navi33.state")}
    assert usb.options == {"sim": {"state": str(tmp_path / "sim" / "navi31-usb.state")}}
    assert sim.persistent and usb.persistent
    assert not device_spec.DeviceSpec("am:sim", "sim", ("navi31",)).persistent   # no file: nothing is kept


def test_the_demo_claims_a_warm_next_run_only_for_a_kept_gpu(monkeypatch):
    from amdrv import device_spec
    from compiler_bridge import demo
    assert demo.next_boot_warm("am:sim") and demo.next_boot_warm("am:sim:usb")
    assert not demo.next_boot_warm("c")
    monkeypatch.setattr(device_spec, "parse", lambda s, *a: device_spec.DeviceSpec(s, "sim", ("navi31",)))
    assert not demo.next_boot_warm("am:sim")


def test_an_unwritable_cache_keeps_nothing_and_says_so(env, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")                                    # the cache root cannot be a directory
    env = dict(env, DRIVERLESS_CACHE=str(blocker))
    out = _run(env, "amdrv", "info", "--device", "am:sim")
    assert "not kept: the next open boots cold" in out, out
    out = _run(env, "compiler_bridge.demo", "--device", "am:sim")
    assert "not kept: the next run boots cold" in out, out
