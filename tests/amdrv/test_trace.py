"""DRIVERLESS_TRACE=mmio (issue 12): every MMIO register access logged with its register name and value;
off, the driver holds the provider's BAR itself (nothing in the access path)."""
import re

import pytest

import hcq
from amdrv import trace

LINE = re.compile(r"^(\S+) ([RW]) (.+) @(0x[0-9a-f]+) = (0x[0-9a-f]{8})$")


@pytest.fixture
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def test_trace_to_a_file_names_every_register_with_its_value(firmware, monkeypatch, tmp_path):
    log = tmp_path / "mmio.log"
    monkeypatch.setenv("DRIVERLESS_TRACE", f"mmio:{log}")
    dev = hcq.open("am:sim", fresh=True)
    try:
        assert isinstance(dev.gpu.dev.mmio, trace.TracedMMIO)
        before = len(log.read_text().splitlines())
        dev.gpu.dev.reg("GC").GRBM_STATUS.read()        # one more access, as the driver makes them
        lines = log.read_text().splitlines()
    finally:
        dev.close()
    assert len(lines) == before + 1 and before > 100
    parsed = [LINE.match(l) for l in lines]
    assert all(parsed), [l for l, m in zip(lines, parsed) if not m][:3]
    assert all(m.group(3) != "?" for m in parsed), "an access the trace could not name"
    assert parsed[0].group(2, 3) == ("R", "NBIO RCC_CONFIG_MEMSIZE")          # the first access: VRAM size
    assert parsed[-1].group(2, 3) == ("R", "GC GRBM_STATUS")
    names = {m.group(3) for m in parsed}
    assert {"GC CP_MEC_RS64_PRGRM_CNTR_START", "GC GRBM_GFX_CNTL"} <= names   # compute firmware start, HQD select


def test_trace_to_stderr(firmware, monkeypatch, capfd):
    monkeypatch.setenv("DRIVERLESS_TRACE", "mmio")
    hcq.open("am:sim", fresh=True).close()
    err = capfd.readouterr().err.splitlines()
    assert sum(bool(LINE.match(l)) for l in err) > 100


def test_off_the_driver_holds_the_bar_itself(firmware, monkeypatch):
    monkeypatch.delenv("DRIVERLESS_TRACE", raising=False)
    dev = hcq.open("am:sim", fresh=True)
    try:
        assert not isinstance(dev.gpu.dev.mmio, trace.TracedMMIO)
        assert type(dev.gpu.dev.mmio).__module__.split(".")[0] != "amdrv"     # the provider's own BAR
    finally:
        dev.close()


@pytest.mark.parametrize("value, match", [("regs", "knows 'mmio'"), ("mmio:/nonexistent/dir/x.log", "cannot open")])
def test_a_bad_switch_is_a_clear_error_naming_the_device(firmware, monkeypatch, value, match):
    monkeypatch.setenv("DRIVERLESS_TRACE", value)
    with pytest.raises(trace.TraceError, match=rf"am:.*DRIVERLESS_TRACE={re.escape(repr(value))}.*{match}"):
        hcq.open("am:sim", fresh=True)
