"""A simulated GPU kept in a state file is driven by one process at a time, as pcie.lock keeps one driver
per real GPU: a second open names the file and the holder's pid, and the GPU is free again at close."""
import os
import subprocess
import sys

import pytest

from pcie import PCIError

HOLD = """
import sys, time
from gpusim import provider
f = provider.open_function("navi31", state=sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
f.close()
"""


def test_a_second_process_is_refused_with_the_file_and_the_holder(sim_bus, tmp_path, debian_firmware, monkeypatch):
    from amdrv.am import AMGPU
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    state = tmp_path / "sim" / "navi31.state"
    state.parent.mkdir()
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(state)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(PCIError) as e:
            AMGPU.open("am:sim")        # the driver's entry point: the same file, refused before any access
        assert str(state) in str(e.value) and f"pid {child.pid}" in str(e.value)
    finally:
        child.communicate("\n", timeout=60)
    assert child.returncode == 0
    from gpusim import provider
    provider.open_function("navi31", state=state, bus=sim_bus).close()   # free again once the holder closed


def test_one_process_cannot_open_the_same_file_twice(sim_bus, tmp_path):
    from gpusim import provider
    state = tmp_path / "gpu.state"
    f = provider.open_function("navi31", state=state, bus=sim_bus, fresh=True)
    with pytest.raises(PCIError, match=r"busy, held by pid %d \(this process" % os.getpid()):
        provider.open_function("navi31", state=state, bus=sim_bus)
    f.close()
    g = provider.open_function("navi31", state=state, bus=sim_bus)
    assert state.is_file()
    g.close()
    g.close()   # a second close saves nothing and releases nothing twice
