"""One driver per simulated GPU in a process too, and nothing held after a failed open: a second
hcq.open of a GPU this process has open is refused with "busy, held by pid N" (the state file's lock for
am:sim, the slot for a GPU in this process only); an open whose setup fails after the boot releases the
device and its lock, so the next open works (and boots cold: the failed one never ran fini)."""
import os

import pytest

import hcq
from amdrv.hcq import AMHCQDevice
from pcie import PCIError


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def test_second_open_in_one_process_is_busy():
    first = hcq.open("am:sim")
    try:
        with pytest.raises(PCIError, match=f"busy, held by pid {os.getpid()} \\(this process"):
            hcq.open("am:sim")
    finally:
        first.close()
    hcq.open("am:sim").close()       # free again once closed


def test_second_open_of_a_slot_is_busy(sim_bus):
    first = hcq.open("am:sim", bus=sim_bus, fresh=True)
    try:
        with pytest.raises(PCIError, match=f"slot 0 .*busy, held by pid {os.getpid()}"):
            hcq.open("am:sim", bus=sim_bus)
    finally:
        first.close()
    again = hcq.open("am:sim", bus=sim_bus)
    assert again.gpu.boot_report.kind == "warm"
    again.close()


def test_setup_failing_after_the_boot_releases_the_device(monkeypatch):
    def no_memory(self):
        raise PCIError("sim: no DMA memory left (injected)")
    with monkeypatch.context() as m:
        m.setattr(AMHCQDevice, "_add_signal_page", no_memory)
        for _ in range(2):   # the second attempt is not told the device is busy
            with pytest.raises(PCIError, match="injected"):
                hcq.open("am:sim")
    dev = hcq.open("am:sim")
    rep = dev.gpu.boot_report
    assert rep.kind == "cold" and "did not finish" in rep.reason, rep
    dev.close()
