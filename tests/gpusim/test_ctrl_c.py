"""Ctrl-C while the simulated device works in the driver's thread: the work finishes and the
KeyboardInterrupt comes after, so the device (and the state file the exit handler saves) never holds half a
command, as a real GPU's firmware does not stop when its driver is interrupted (gpusim.device.WorkLock)."""
import signal

import pytest

from amdrv.autogen import psp as P
from gpusim import persist, provider
from gpusim import psp as PSPM
from gpusim.psp import READY


@pytest.fixture
def fn(sim_bus, debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    # Python's own SIGINT handler, as in a program started from a terminal: a process started as a
    # background job of a non-interactive shell inherits SIGINT ignored, and then Ctrl-C raises nothing
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    f = provider.open_function("navi31", fresh=True, bus=sim_bus, vram_size=1 << 30)
    yield f
    f.close()
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_inside_a_bootloader_command_waits_for_its_end(fn, monkeypatch, tmp_path):
    dev = fn.dev
    c2p35 = 4 * dev.reg_addr("MP0", "MP0_SMN_C2PMSG_35")
    regs = fn.bar(5)
    while regs.read32(c2p35) != READY:
        pass
    real = PSPM.PSP._bl_execute

    def interrupted(self, cmd):
        signal.raise_signal(signal.SIGINT)   # the user presses Ctrl-C half way through the command
        return real(self, cmd)
    monkeypatch.setattr(PSPM.PSP, "_bl_execute", interrupted)
    regs.write32(4 * dev.reg_addr("MP0", "MP0_SMN_C2PMSG_36"), 0x7FFF00)
    regs.write32(c2p35, P.PSP_BL__LOAD_KEY_DATABASE)
    with pytest.raises(KeyboardInterrupt):
        for _ in range(20):
            regs.read32(c2p35)       # polls step the clock: the command runs inside one of these reads
    # the command ran to its end: its answer is there (a refusal: nothing was staged), nothing is lost
    assert dev.regs.peek(c2p35 // 4) & READY
    assert any("LOAD_KEY_DATABASE" in e.message for e in dev.errors)
    persist.save(dev, tmp_path / "gpu.state")       # what the exit handler would save: a whole command
    assert persist.load(tmp_path / "gpu.state").regs.peek(c2p35 // 4) & READY


def test_ctrl_c_outside_the_device_is_at_once(fn):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
