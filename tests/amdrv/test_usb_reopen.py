"""One enclosure opened again in the same process, with the same firmware or the other one (a user who flashes the
open firmware, or reopens with another backend): the bridge's SRAM keeps what the last run left there (the model
keeps an enclosure's SRAM while it is powered, gpusim.usb_bridge.open_bridge; a USB reset powers nothing off), so
the driver must not take the words it polls for the zeros of a fresh host shadow (amdrv.bridge_copy)."""
from __future__ import annotations

import numpy as np
import pytest

import pcie

usb_bridge = pytest.importorskip("gpusim.usb_bridge")
from amdrv import bridge_copy  # noqa: E402
from amdrv.am import AMGPU  # noqa: E402
from amdrv.hcq import AMHCQDevice  # noqa: E402
from pcie.usb.link import BridgeError  # noqa: E402
from pcie.usb.transport import open_function  # noqa: E402

RNG = np.random.default_rng(11)


@pytest.fixture
def board(sim_bus, debian_firmware, monkeypatch):
    """A small-BAR board left warm by a clean AM run over simulated PCIe; yields a function that opens hcq on it
    behind the simulated bridge with the given firmware."""
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv("DRIVERLESS_PUBLISH_S", "0")
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    opened = []

    def open_hcq(firmware: str) -> AMHCQDevice:
        backend = usb_bridge.backend("navi31", bus=sim_bus, firmware=firmware)
        dev = AMHCQDevice(AMGPU.open(open_function(backend=backend)), f"am:sim:usb#{firmware}")
        dev.default_timeout = 2.0
        dev.sim = backend.bridge.dev
        opened.append(dev)
        return dev
    yield open_hcq
    for d in opened:
        d.close()          # again: a no-op


def _round(dev, n: int = 6000) -> bool:
    """A copy in and back out (two pieces of the stock firmware's bounce); whether the bytes came back."""
    data = RNG.integers(0, 256, n, dtype=np.uint8).tobytes()
    buf = dev.alloc(n)
    dev.copyin(buf, data)
    return dev.copyout(buf) == data


def test_the_open_firmware_after_the_stock_one_and_after_itself(board):
    """Stock, then open, then open again on the same enclosure: the stock run leaves its bounce data where the
    open firmware's copier keeps its go word (the SRAM's first dword), the first open run leaves its last go
    there; each copy-out comes back right because the copier writes its first go whole."""
    dev = board("stock")
    assert _round(dev)
    dev.close()
    for _ in range(2):
        dev = board("open")
        assert dev.gpu.boot_report.kind == "warm" and _round(dev)
        dev.close()


def test_a_copier_that_assumes_a_zero_go_word_stalls_after_the_stock_firmware(board, monkeypatch):
    """The bug this guards against (it stalled tools/mutate.py's workload): a copier that takes the SRAM's first
    dword for 0 writes only the bytes of its go that differ from 0, so the stock run's data there make a go
    the GPU never sees: the copy-out's bulk IN never gets its release (TransferStalled)."""
    dev = board("stock")
    assert _round(dev)
    dev.close()
    real = bridge_copy.BridgeCopier.__init__

    def zero_go(self, d):
        real(self, d)
        self.go = 0
    monkeypatch.setattr(bridge_copy.BridgeCopier, "__init__", zero_go)
    dev = board("open")
    with pytest.raises(BridgeError, match="stalled"):
        _round(dev)


def _gpu_late_for_the_first_read(dev, monkeypatch):
    """The device's SDMA engine frozen (SDMA<n>_FREEZE, as a busy or slow engine) until the host's first read of
    the bounce page has been sent: that read sees what the page held before this copy."""
    f, eng = dev.gpu.dev.pci, dev.sdma.engine
    freeze = dev.gpu.dev.reg("SDMA0").reg(f"SDMA{eng}_FREEZE")
    freeze.update(FREEZE=1)
    f.flush()
    assert dev.sim.blocks["SDMA"].frozen(eng)
    real, calls = f.read_then_write, [0]

    def read_then_write(*a, **k):
        got = real(*a, **k)
        calls[0] += 1
        if calls[0] == 1:
            freeze.update(FREEZE=0)
        return got
    monkeypatch.setattr(f, "read_then_write", read_then_write)


def test_the_stock_bounce_takes_no_piece_of_the_last_run(board, monkeypatch):
    """The stock firmware's copy-out after a reopen, with the GPU late: the last run's done == start words and
    its piece still stand in the read-back page; written whole before the doorbell they cannot pass for a piece
    of this copy. Left as the last run put them (the host's shadow says 0), the copy returns the old bytes."""
    dev = board("stock")
    assert _round(dev)
    dev.close()
    dev = board("stock")
    data = RNG.integers(0, 256, 6000, dtype=np.uint8).tobytes()
    buf = dev.alloc(len(data))
    dev.copyin(buf, data)
    _gpu_late_for_the_first_read(dev, monkeypatch)
    assert dev.copyout(buf) == data
    dev.close()
    monkeypatch.setattr(bridge_copy, "_first_words", lambda fn, view, go: fn.queue_xdata(
        *bridge_copy._changed(view, bridge_copy.GO, go)))     # the shadow's bytes only, as before
    dev = board("stock")
    dev.copyin(buf := dev.alloc(len(data)), data)
    _gpu_late_for_the_first_read(dev, monkeypatch)
    assert dev.copyout(buf) != data
