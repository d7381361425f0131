"""SDMA 6.0 boot: sdma_v6_0_start with PSP-loaded firmware, what is refused before the firmware and the RLC
autoload, the idle status upstream waits for, soft and mode1 resets. Registers are reached the way
sdma_v6_0_get_reg_offset computes them, so the model's SDMA1_* registers must sit where upstream writes."""
import importlib.util
from pathlib import Path

import pytest

from amdrv.chips import by_name
from gpusim import board, fwcheck

_spec = importlib.util.spec_from_file_location("gfx_boot_helpers", Path(__file__).with_name("test_gfx.py"))
gfx_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gfx_boot)

# sdma_v6_0.c
SDMA1_REG_OFFSET, HYP_DEC_START, HYP_DEC_END, SDMA1_HYP_DEC_REG_OFFSET = 0x600, 0x5880, 0x589A, 0x20


class SDMARegs:
    """RREG32/WREG32 of sdma_v6_0_get_reg_offset(adev, i, regSDMA0_*); every read steps the clock."""

    def __init__(self, dev):
        self.dev, self.t, self.gc = dev, dev.table("GC"), dev.layout.bases("GC")

    def addr(self, i, name):
        off = self.t["SDMA0_" + name].offset
        if HYP_DEC_START <= off <= HYP_DEC_END:
            return self.gc[1] + off + SDMA1_HYP_DEC_REG_OFFSET * i
        return self.gc[0] + off + (SDMA1_REG_OFFSET if i == 1 else 0)

    def r(self, i, name):
        self.dev.step()
        return self.dev.regs.read(self.addr(i, name))

    def w(self, i, name, value):
        self.dev.regs.write(self.addr(i, name), value)

    def f(self, i, name, field):
        return self.t["SDMA0_" + name].decode(self.r(i, name))[field]

    def update(self, i, name, **fields):
        self.w(i, name, self.t["SDMA0_" + name].encode(self.r(i, name), **fields))


def enable(s, on):
    """sdma_v6_0_enable (the gfx_stop part included when halting)."""
    for i in (0, 1):
        if not on:
            s.update(i, "QUEUE0_RB_CNTL", RB_ENABLE=0)
            s.update(i, "QUEUE0_IB_CNTL", IB_ENABLE=0)
        s.update(i, "F32_CNTL", HALT=int(not on))


def gfx_resume(s, ring=0x10000, rptr=0x20000, wptr=0x20100, doorbell=0x1A0):
    """sdma_v6_0_gfx_resume on bare metal: ring registers, UTCL1, unhalt, enable RB and IB."""
    for i in (0, 1):
        s.w(i, "SEM_WAIT_FAIL_TIMER_CNTL", 0)
        rb = s.t["SDMA0_QUEUE0_RB_CNTL"].encode(s.r(i, "QUEUE0_RB_CNTL"), RB_SIZE=10, RB_PRIV=1)
        s.w(i, "QUEUE0_RB_CNTL", rb)
        for reg in ("QUEUE0_RB_RPTR", "QUEUE0_RB_RPTR_HI", "QUEUE0_RB_WPTR", "QUEUE0_RB_WPTR_HI"):
            s.w(i, reg, 0)
        s.w(i, "QUEUE0_RB_WPTR_POLL_ADDR_LO", wptr)
        s.w(i, "QUEUE0_RB_WPTR_POLL_ADDR_HI", 0)
        s.w(i, "QUEUE0_RB_RPTR_ADDR_HI", 0)
        s.w(i, "QUEUE0_RB_RPTR_ADDR_LO", rptr)
        rb = s.t["SDMA0_QUEUE0_RB_CNTL"].encode(rb, RPTR_WRITEBACK_ENABLE=1, WPTR_POLL_ENABLE=0, F32_WPTR_POLL_ENABLE=1)
        s.w(i, "QUEUE0_RB_BASE", ring >> 8)
        s.w(i, "QUEUE0_RB_BASE_HI", ring >> 40)
        s.w(i, "QUEUE0_MINOR_PTR_UPDATE", 1)
        s.w(i, "QUEUE0_RB_WPTR", 0)
        s.w(i, "QUEUE0_RB_WPTR_HI", 0)
        s.update(i, "QUEUE0_DOORBELL", ENABLE=1)
        s.update(i, "QUEUE0_DOORBELL_OFFSET", OFFSET=doorbell + 0x10 * i)
        s.w(i, "QUEUE0_MINOR_PTR_UPDATE", 0)
        s.update(i, "UTCL1_CNTL", RESP_MODE=3, REDO_DELAY=9)
        page = s.r(i, "UTCL1_PAGE") & 0xFF0FFF
        s.w(i, "UTCL1_PAGE", page | s.t["SDMA0_UTCL1_PAGE"].encode(LLC_NOALLOC=1))   # policies DEFAULT (0)
        s.update(i, "F32_CNTL", HALT=0, TH1_RESET=0)
        s.w(i, "QUEUE0_RB_CNTL", s.t["SDMA0_QUEUE0_RB_CNTL"].encode(rb, RB_ENABLE=1))
        s.update(i, "QUEUE0_IB_CNTL", IB_ENABLE=1)


def start(s):
    """sdma_v6_0_start with PSP loading: unhalt, then the rings."""
    enable(s, True)
    gfx_resume(s)


def wait_for_idle(s, tries=20):
    """sdma_v6_0_wait_for_idle."""
    return any(s.r(0, "STATUS_REG") & s.r(1, "STATUS_REG") & 1 for _ in range(tries))


@pytest.fixture(scope="module")
def firmware(debian_firmware):
    return {c: fwcheck.PinnedFirmware(by_name(c), lambda n: (debian_firmware / n).read_bytes())
            for c in ("navi31", "navi33")}


def build(firmware, chip="navi31", boot=True, autoload=True):
    dev = board.build(chip, vram_size=512 << 20)
    dev.blocks["PSP"].firmware = firmware[chip]
    if boot:
        gfx_boot.psp_load_everything(dev, firmware[chip], autoload=autoload)
        if autoload:
            assert gfx_boot.wait_for_rlc_autoload_complete(gfx_boot.GC(dev)) is not None
        dev.errors.clear()
    return dev, SDMARegs(dev), dev.blocks["SDMA"]


def test_upstream_addresses_are_the_models_registers(firmware):
    dev, s, _ = build(firmware, boot=False)
    for name in ("F32_CNTL", "STATUS_REG", "UTCL1_CNTL", "QUEUE0_RB_CNTL"):
        assert s.addr(1, name) == dev.reg_addr("GC", "SDMA1_" + name), name


def test_power_on_halted_and_idle(firmware):
    dev, s, sdma = build(firmware, boot=False)
    assert all(s.f(i, "F32_CNTL", "HALT") == 1 for i in (0, 1))
    assert not sdma.running(0) and not sdma.running(1)
    assert wait_for_idle(s)
    assert s.r(0, "STATUS_REG") == 0x465EE557      # every *_IDLE / *_EMPTY bit gc_11_0_0 defines


def test_unhalt_before_any_firmware_is_refused(firmware):
    dev, s, sdma = build(firmware, boot=False)
    start(s)
    assert all(s.f(i, "F32_CNTL", "HALT") == 1 for i in (0, 1))
    assert s.f(1, "F32_CNTL", "TH1_RESET") == 0     # the rest of the write lands
    assert not sdma.running(0) and not sdma.running(1)
    msgs = [str(e) for e in dev.errors]
    assert any("SDMA1 stays halted" in m for m in msgs)
    assert "SDMA_UCODE_TH0, SDMA_UCODE_TH1" in msgs[0] and "RLC autoload has not completed" in msgs[0]


def test_unhalt_before_the_rlc_autoload_is_refused(firmware):
    dev, s, sdma = build(firmware, autoload=False)
    start(s)
    assert not sdma.running(0) and s.f(0, "F32_CNTL", "HALT") == 1
    assert "RLC autoload has not completed" in str(dev.errors[0]) and "PSP has not" not in str(dev.errors[0])


@pytest.mark.parametrize("chip", ["navi31", "navi33"])
def test_upstream_start_runs_both_engines(firmware, chip):
    dev, s, sdma = build(firmware, chip)
    start(s)
    assert all(sdma.running(i) and sdma.ctx_switch_running(i) for i in (0, 1))
    assert s.f(1, "UTCL1_CNTL", "RESP_MODE") == 3 and s.f(1, "UTCL1_CNTL", "REDO_DELAY") == 9
    assert s.f(0, "UTCL1_PAGE", "LLC_NOALLOC") == 1 and s.f(1, "QUEUE0_RB_CNTL", "RB_ENABLE") == 1
    assert wait_for_idle(s) and dev.errors == []
    sdma.set_busy(1, True)                          # work in flight (the queue model's report)
    assert s.f(1, "STATUS_REG", "IDLE") == 0 and not wait_for_idle(s, tries=3)
    sdma.set_busy(1, False)
    enable(s, False)                                # hw_fini
    assert not sdma.running(0) and not sdma.running(1) and dev.errors == []


def test_th1_reset_keeps_the_context_switch_thread_stopped(firmware):
    dev, s, sdma = build(firmware)
    s.update(0, "F32_CNTL", HALT=0, TH1_RESET=1)
    assert sdma.running(0) and not sdma.ctx_switch_running(0)


def test_upstream_soft_reset_keeps_the_firmware(firmware):
    dev, s, sdma = build(firmware)
    gc = gfx_boot.GC(dev)
    start(s)
    for i in (0, 1):                                # sdma_v6_0_soft_reset
        s.update(i, "QUEUE0_RB_CNTL", RB_ENABLE=0)
        s.update(i, "QUEUE0_IB_CNTL", IB_ENABLE=0)
        s.update(i, "FREEZE", FREEZE=1)
        s.update(i, "F32_CNTL", HALT=1, TH1_RESET=1)
        s.w(i, "QUEUE0_PREEMPT", 0)
        gc.w("GRBM_SOFT_RESET", gc.t["GRBM_SOFT_RESET"].encode(**{f"SOFT_RESET_SDMA{i}": 1}))
        gc.r("GRBM_SOFT_RESET")
        gc.w("GRBM_SOFT_RESET", 0)
        assert not sdma.running(i)
    start(s)
    assert sdma.running(0) and sdma.running(1) and dev.errors == []


def test_soft_reset_stops_a_running_engine(firmware):
    dev, s, sdma = build(firmware)
    gc = gfx_boot.GC(dev)
    start(s)
    gc.update("GRBM_SOFT_RESET", SOFT_RESET_SDMA1=1)
    assert sdma.running(0) and not sdma.running(1) and s.f(1, "F32_CNTL", "HALT") == 1


def test_mode1_reset_returns_to_halted_and_unloaded(firmware):
    dev, s, sdma = build(firmware)
    start(s)
    board.mode1_reset(dev)
    assert not sdma.running(0) and all(s.f(i, "F32_CNTL", "HALT") == 1 for i in (0, 1))
    start(s)
    assert not sdma.running(0) and "SDMA0 stays halted" in str(dev.errors[0])
