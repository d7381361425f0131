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
    # Each kernel takes microseconds of simulated time. A buffer freed by the garbage collector inside a
    # launch (the simulator runs the dispatch in the caller's thread) once made free() poll a queue that
    # could not progress, for seconds of simulated time and 30 s of wall time.
    gpu_us = [float(ln.split()[0]) for ln in first.splitlines() if ln.strip().endswith(tuple("0123456789abcdef"))
              and ln.strip().split()[1:2] == ["us"]]
    assert gpu_us and max(gpu_us) < 1000, first
    assert (tmp_path / "sim" / "navi31.state").is_file()
    second = _demo(env)
    assert "boot: warm" in second and "(ok)" in second


def test_simulated_device_names():
    from compiler_bridge.demo import is_simulated
    assert all(map(is_simulated, ["am:sim", "am:sim:navi33", "am:sim:usb"]))
    assert not any(map(is_simulated, ["am", "am:0000:03:00.0", "c", "am:usb"]))


def test_collected_buffers_are_freed_at_the_next_alloc_not_in_the_collector():
    import gc
    from compiler_bridge.runtime import HCQTensorDevice

    class Stub:  # an hcq device that records frees
        def __init__(self):
            self.n, self.freed = 0, []

        def alloc(self, nbytes):
            self.n += 1
            return self.n

        def free(self, handle):
            self.freed.append(handle)

    d = object.__new__(HCQTensorDevice)
    d.dev, d._dead, d._progs = Stub(), [], {}
    b = d.alloc(4, "float32")
    h = b.handle
    del b
    gc.collect()
    assert d.dev.freed == []      # the collector may run anywhere (inside a simulated dispatch): no free there
    d.alloc(4, "float32")
    assert d.dev.freed == [h]
