"""A stalled USB bridge (a bulk transfer that never completes wedges its firmware until a USB reset): the
transport resets the device (port reset, interface claimed again) before asking for a replug, so the next
open works without touching the cable; where the reset does not help, the error says replug."""
import pytest

from pcie.usb import link
from pcie.usb.link import TransferStalled
from pcie.usb.transport import open_function
from pcie.lock import DeviceLock



@pytest.fixture(autouse=True)
def _private_locks(tmp_path, monkeypatch):
    from pcie.usb import transport
    monkeypatch.setattr(transport, "DeviceLock", lambda address, directory=None: DeviceLock(address, tmp_path))


@pytest.fixture(params=["bot", "uas"])
def sim(sim_bus, request, monkeypatch):
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    monkeypatch.setenv("DRIVERLESS_USB_LINK", request.param)
    return usb_bridge.backend("navi31", fresh=True, bus=sim_bus, vram_size=1 << 30)


def stall(sim):
    f = open_function(backend=sim)
    sim.bridge.inject("stall", after=1)
    with pytest.raises(TransferStalled) as e:
        for _ in range(4):
            f.bar(5).read32(0)
    try:
        f.close()
    except TransferStalled:
        pass
    return str(e.value)


def test_a_stalled_bridge_is_reset_and_answers_again(sim):
    msg = stall(sim)
    assert "timed out" in msg and "the bridge was reset" in msg and "no replug needed" in msg, msg
    assert not sim.bridge.wedged
    f = open_function(backend=sim)            # the same enclosure, no replug
    assert (f.vendor_id, f.device_id) == (0x1002, 0x744C)
    f.close()


def test_without_the_reset_the_bridge_stays_wedged(sim, monkeypatch):
    monkeypatch.setattr(link, "_reset_after_stall", lambda lk: "the driver skipped the reset")
    msg = stall(sim)
    assert "unplug and replug the enclosure" in msg, msg
    assert sim.bridge.wedged
    with pytest.raises(TransferStalled):
        open_function(backend=sim)


def test_a_backend_that_cannot_reset_says_replug(sim, monkeypatch):
    def refuse(self, dev_handle):
        raise NotImplementedError("no reset on this platform")
    monkeypatch.setattr(type(sim), "reset_device", refuse)
    msg = stall(sim)
    assert "a USB reset of the bridge did not bring it back (no reset on this platform): unplug and replug" in msg
