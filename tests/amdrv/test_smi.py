"""driverless-smi and what the holder of a GPU does for it (amdrv.smi, amdrv.monitor), on simulated GPUs
kept in the test's cache: the table, JSON and CSV of an idle GPU nobody holds, of one held by this process
under load, and of one held by another process (then killed); idle power management (GFXOFF allowed after
the delay, GFX off and the board at its idle floor, back up on the next submission)."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import hcq
import pcie
from amdrv import device_spec, monitor, smi
from amdrv.am import AMGPU
from amdrv.autogen import smu_13_0_0 as S
from gpusim import power

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "rdna3" / "kernels"
RECORD_KEYS = {"device", "chip", "name", "address", "transport", "state", "boot", "holder_pid", "source", "age_s",
               "gfxoff_allowed", "thermal_alert", "message", "temperature_c", "power_w", "fan", "clocks_mhz", "dpm_level",
               "dpm_levels_mhz", "activity_pct", "vram_bytes", "throttle", "energy_j"}


@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware, tmp_path):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv(monitor.PUBLISH_ENV, "0")      # tests publish by hand: no thread racing the asserts


@pytest.fixture
def nosys(tmp_path):
    """An empty sysfs (no real GPU), and a simulated Navi31 just powered on in this test's cache (this
    process's bus keeps the previous test's device in its slot otherwise)."""
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    pcie.open_function("sim", "navi31", fresh=True, state=str(device_spec.sim_state_path("navi31"))).close()
    return tmp_path / "sys"


@pytest.fixture(scope="module")
def saxpy(build_cl):
    return build_cl([KERNELS / "saxpy.cl"])["saxpy"].read_bytes()


def _only(doc):
    assert len(doc["gpus"]) == 1, doc
    return doc["gpus"][0]


def test_no_gpu_exit_status_and_message(nosys, capsys):
    device_spec.sim_state_path("navi31").unlink()
    assert smi.main(["--sysfs", str(nosys)]) == smi.EXIT_NO_GPU
    out = capsys.readouterr().out
    assert "no AM GPU found" in out and "--device am:sim" in out
    assert smi.main(["--sysfs", str(nosys), "--json"]) == smi.EXIT_NO_GPU
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"schema": 1, "time": doc["time"], "gpus": []}


def test_cold_gpu_is_reported_without_booting_it(nosys):
    doc, status = smi.collect(["am:sim"], sysfs=nosys)
    rec = _only(doc)
    assert status == smi.EXIT_OK and rec["state"] == "cold" and rec["boot"] == "not booted by AM"
    assert "--boot" in rec["message"] and rec["temperature_c"] is None
    gpu = AMGPU.open("am:sim")
    assert gpu.boot_report.kind == "cold" and "no AM boot state" in gpu.boot_report.reason
    gpu.fini()


def test_idle_gpu_nobody_holds_is_attached_read_only(nosys, capsys):
    AMGPU.open("am:sim").fini()
    assert smi.main(["--sysfs", str(nosys), "--json"]) == smi.EXIT_OK     # found in the cache, no --device
    doc = json.loads(capsys.readouterr().out)
    rec = _only(doc)
    assert set(doc) == {"schema", "time", "gpus"} and doc["schema"] == smi.SCHEMA
    assert set(rec) == RECORD_KEYS                                       # the schema is stable
    assert (rec["device"], rec["chip"], rec["state"], rec["source"]) == ("am:sim", "navi31", "idle", "attached")
    assert rec["boot"] == "warm (left by fini)" and rec["holder_pid"] is None
    t = rec["temperature_c"]
    assert 20 < t["edge"] <= t["hotspot"] < 110 and rec["activity_pct"] == {"gfx": 0, "mem": 0}
    # fini left GFXOFF allowed: the GPU nobody holds idles at the calibrated floor, GFX off
    assert rec["power_w"]["limit"] == 355 and rec["power_w"]["board"] == power.IDLE_W["navi31"]
    assert rec["clocks_mhz"]["gfx"] == 0 and rec["dpm_level"]["gfx"] is None
    assert rec["dpm_levels_mhz"]["mem"] == [96, 456, 772, 1249] and rec["dpm_level"]["mem"] == 0
    assert rec["vram_bytes"] == {"used": None, "total": 24 << 30}
    # read-only: the next open still boots warm
    gpu = AMGPU.open("am:sim")
    assert gpu.boot_report.kind == "warm"
    gpu.fini()
    assert smi.main(["--sysfs", str(nosys)]) == 0
    text = capsys.readouterr().out
    assert "am:sim  navi31 (Radeon RX 7900 XTX" in text and "boot: warm (left by fini)" in text
    assert "power     " in text and "/ 355 W" in text and "clocks    gfx " in text
    assert smi.main(["--sysfs", str(nosys), "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(",") == list(smi.CSV_COLUMNS) and lines[1].startswith("am:sim,navi31,")
    assert len(lines) == 2


def test_boot_on_request(nosys):
    doc, _ = smi.collect(["am:sim"], boot=True, sysfs=nosys)
    rec = _only(doc)
    assert rec["source"] == "booted" and rec["boot"] == "cold boot by driverless-smi"
    assert rec["vram_bytes"]["used"] > 0 and rec["temperature_c"]["edge"] > 20
    doc, _ = smi.collect(["am:sim"], sysfs=nosys)        # left warm with fini
    assert _only(doc)["boot"] == "warm (left by fini)"


def _launch_busy(dev, saxpy, n=1 << 16):
    x = dev.alloc(4 * n)
    y = dev.alloc(4 * n)
    dev.copyin(x, np.ones(n, np.float32))
    prog = dev.program(saxpy, "saxpy")
    return lambda wait=False: prog(y, x, 2.0, n, global_size=(n // 256,), local_size=(256,), wait=wait)


def _busy_for(dev, run, seconds):
    """Kernels back to back in a thread for `seconds` (the simulator executes them in that thread)."""
    def loop():
        end = time.time() + seconds
        while time.time() < end:
            run(wait=True)
    t = threading.Thread(target=loop)
    t.start()
    return t


def test_held_gpu_under_load_is_read_from_what_its_holder_publishes(nosys, saxpy):
    dev = hcq.open("am:sim")
    try:
        pub = dev.publisher
        assert pub is not None and pub.period_s == 0 and pub.path.name == "navi31.state.lock.metrics.json"
        busy = _busy_for(dev, _launch_busy(dev, saxpy), 2.0)
        time.sleep(1.0)               # the board's power model runs on the wall clock (a kept GPU)
        pub.publish_once()
        busy.join()
        doc, status = smi.collect(["am:sim"], sysfs=nosys)
        rec = _only(doc)
        assert status == 0 and (rec["state"], rec["source"], rec["holder_pid"]) == ("held", "published", os.getpid())
        assert rec["activity_pct"]["gfx"] >= 20 and rec["clocks_mhz"]["gfx"] > 500
        assert rec["power_w"]["board"] > 60 and rec["vram_bytes"]["used"] >= 8 << 16
        assert oct(pub.path.stat().st_mode & 0o777) == "0o644"
    finally:
        dev.close()
    assert not pub.path.exists()                          # the holder removes its file when it closes


def test_idle_power_falls_after_the_delay_and_returns_on_submission(nosys, saxpy, monkeypatch):
    monkeypatch.setenv(monitor.GFXOFF_DELAY_ENV, "0.2")
    dev = hcq.open("am:sim")
    try:
        run = _launch_busy(dev, saxpy)
        run(wait=True)
        pub = dev.publisher
        model = dev.gpu.dev.pci.dev.blocks["SMU"]
        time.sleep(2.0)               # the delay passes: AllowGfxOff; the activity average decays to 0
        idle = pub.publish_once()
        assert dev.gfxoff.allowed and dev.gfxoff.allow_count == 1 and idle["gfxoff_allowed"]
        assert model.gfx_gated() and idle["clocks_mhz"]["gfx"] == 0 and idle["activity_pct"]["gfx"] == 0
        assert idle["power_w"]["board"] == power.IDLE_W["navi31"]        # the calibrated floor
        assert idle["dpm_level"]["soc"] == idle["dpm_level"]["mem"] == 0
        loop = _busy_for(dev, run, 1.5)  # a submission needs no message: the doorbell wakes GFX
        time.sleep(0.8)
        busy = pub.publish_once()
        loop.join()
        assert busy["clocks_mhz"]["gfx"] > 0 and busy["power_w"]["board"] > 60 and busy["activity_pct"]["gfx"] > 0
        assert dev.gfxoff.allowed     # still allowed: the PMFW gates GFX again when it idles
    finally:
        dev.close()


def test_without_allow_gfxoff_idle_power_stays_high(nosys, saxpy, monkeypatch):
    """The driver step that reaches the idle floor is AllowGfxOff: without it GFX leaks while idle."""
    monkeypatch.setenv(monitor.GFXOFF_DELAY_ENV, "0.05")
    monkeypatch.setattr(monitor.GfxOff, "_allow", lambda self: None)
    dev = hcq.open("am:sim")
    try:
        _launch_busy(dev, saxpy)(wait=True)
        time.sleep(2.0)
        idle = dev.publisher.publish_once()
        assert idle["power_w"]["board"] > power.IDLE_W["navi31"] + 10 and idle["clocks_mhz"]["gfx"] > 0
    finally:
        dev.close()


def test_gfxoff_requests_are_counted_as_upstream():
    sent = []

    class FakeSMU:
        def gfx_off(self, allow):
            sent.append(allow)

    g = monitor.GfxOff(FakeSMU(), delay_s=0.01)
    g.release()
    time.sleep(0.1)
    assert sent == [True] and g.allowed
    with g.awake():                   # register access: DisallowGfxOff first, at once
        assert sent == [True, False] and not g.allowed
        g.hold()
        g.release()                   # nested: still held
        time.sleep(0.05)
        assert sent == [True, False]
    time.sleep(0.1)
    assert sent == [True, False, True]
    g.stop()
    assert sent == [True, False, True, False] and g.requests == 1
    fresh = monitor.GfxOff(FakeSMU(), delay_s=10)
    fresh.release()                   # the boot's own request
    with pytest.raises(RuntimeError, match="without hold"):
        fresh.release()
    fresh.stop()


HOLDER = """
import sys, hcq
dev = hcq.open("am:sim")
print("ready", flush=True)
sys.stdin.readline()
dev.close()
"""


def test_gpu_held_by_another_process_then_killed(nosys, monkeypatch):
    monkeypatch.setenv(monitor.PUBLISH_ENV, "0.2")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        deadline = time.time() + 10
        while True:
            doc, status = smi.collect(["am:sim"], sysfs=nosys)
            rec = _only(doc)
            if rec["source"] == "published" or time.time() > deadline:
                break
            time.sleep(0.1)
        assert (rec["state"], rec["holder_pid"], rec["source"]) == ("held", proc.pid, "published"), rec
        assert rec["temperature_c"]["edge"] > 20 and rec["age_s"] < 3 and status == 0
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        doc, status = smi.collect(["am:sim"], sysfs=nosys)
        rec = _only(doc)
        assert rec["message"].startswith(f"holder pid {proc.pid} exited") and rec["holder_pid"] == proc.pid
        # a simulated GPU is saved when its process closes it or exits; SIGKILL loses the session, so the
        # state file shows the GPU as the holder found it (a real GPU would read "unclean")
        assert rec["boot"] in ("not booted by AM", "unclean (the last AM run did not finish)") and status == 0
        gpu = AMGPU.open("am:sim")                      # recoverable: the next open boots cold
        assert gpu.boot_report.kind == "cold"
        gpu.fini()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_plain_frames(nosys, capsys):
    AMGPU.open("am:sim").fini()
    assert smi.main(["watch", "--sysfs", str(nosys), "--count", "2", "-n", "0.05"]) == 0
    out = capsys.readouterr().out
    assert out.count("driverless-smi  ") == 2 and "power W" in out and "hotspot C" in out
    assert any(ch in out for ch in smi.SPARK)


def test_sparkline():
    assert smi.sparkline([0, 50, 100], 0, 100) == "▁▅█"
    assert smi.sparkline([None, 7]) == "▁" and smi.sparkline([]) == ""


def test_plot_png(nosys, tmp_path):
    pytest.importorskip("matplotlib")
    AMGPU.open("am:sim").fini()
    samples = smi.record(["am:sim"], 0.2, 0.1, sysfs=nosys)
    out = smi.plot(samples, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_what_to_install(nosys, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert smi.main(["plot", "--sysfs", str(nosys), "--device", "am:sim"]) == smi.EXIT_ERROR
    assert "pip install matplotlib" in capsys.readouterr().err


def _heat(model, hotspot_c):
    """A simulated cooling failure: the board's die temperature set so the hotspot reads hotspot_c."""
    model.pm.fan_stalled = hotspot_c > 100
    model.pm.temperature = hotspot_c - power.HOTSPOT_C_PER_W * model.pm.power_w


def test_overheat_raises_the_thermal_interrupt_and_the_driver_throttles(nosys, saxpy):
    dev = hcq.open("am:sim")
    try:
        model = dev.gpu.dev.pci.dev.blocks["SMU"]
        run = _launch_busy(dev, saxpy)
        pub = dev.publisher
        assert pub.publish_once()["thermal_alert"] is None
        _heat(model, 130)
        pub.publish_once()            # the SMU's thermal model moves: THM interrupts; the holder's thread acts
        data = pub.publish_once()
        assert data["thermal_alert"]["alerts"] == 1 and data["thermal_alert"]["throttled"]
        assert data["thermal_alert"]["crossed"] == "above" and data["thermal_alert"]["threshold_c"] == 118
        assert model.soft[S.PPCLK_GFXCLK][1] == 500                        # SetSoftMaxByFreq to the lowest
        with pytest.warns(monitor.ThermalAlert, match="above 118 C"):     # and the holder's next call says so
            run(wait=True)
        doc, _ = smi.collect(["am:sim"], sysfs=nosys)
        rec = _only(doc)
        assert rec["thermal_alert"]["alerts"] == 1 and "thermal   1 alert(s)" in smi.table(doc)
        _heat(model, 40)
        pub.publish_once()
        data = pub.publish_once()
        assert data["thermal_alert"]["crossed"] == "below" and not data["thermal_alert"]["throttled"]
        assert model.soft[S.PPCLK_GFXCLK][1] == 2500
        with pytest.warns(monitor.ThermalAlert, match="cleared"):
            run(wait=True)
    finally:
        dev.close()


def test_without_the_thermal_alert_enabled_an_overheat_goes_unnoticed(nosys, monkeypatch):
    """The driver step that makes the alert reach the IH is smu_v13_0_set_irq_state's THM programming."""
    from amdrv.ip.smu import SMU
    monkeypatch.setattr(SMU, "enable_thermal_alert", lambda self, *a, **k: None)
    dev = hcq.open("am:sim")
    try:
        model = dev.gpu.dev.pci.dev.blocks["SMU"]
        dev.publisher.publish_once()
        _heat(model, 130)
        dev.publisher.publish_once()
        assert dev.publisher.publish_once()["thermal_alert"] is None and model.soft[S.PPCLK_GFXCLK][1] == 2500
        assert dev.gpu.dev.pci.dev.blocks["THM"].alerts == 0
    finally:
        dev.close()


def test_fini_allows_gfxoff_and_a_warm_boot_disallows_it_before_gc(nosys, monkeypatch):
    from amdrv.ip.smu import SMU
    AMGPU.open("am:sim").fini()
    gpu = AMGPU.open("am:sim")
    model = gpu.dev.pci.dev.blocks["SMU"]
    assert gpu.boot_report.kind == "warm" and not model.gfxoff_allowed     # DisallowGfxOff before GC reads
    sent = []
    real = SMU.gfx_off
    monkeypatch.setattr(SMU, "gfx_off", lambda self, allow: (sent.append(allow), real(self, allow)))
    gpu.fini()
    assert sent == [True] and model.gfxoff_allowed and model.gfx_gated()
    # without fini's AllowGfxOff the GPU left idle stays above its floor
    monkeypatch.setattr(SMU, "gfx_off", lambda self, allow: real(self, allow) if not allow else None)
    AMGPU.open("am:sim").fini()
    rec = _only(smi.collect(["am:sim"], sysfs=nosys)[0])
    assert rec["power_w"]["board"] > power.IDLE_W["navi31"] + 10 and rec["clocks_mhz"]["gfx"] > 0


def _gfxoff_errors(gpu_dev) -> list[str]:
    return [str(e) for e in gpu_dev.pci.dev.errors if "(GFXOFF)" in str(e)]


def test_warm_boot_without_disallow_gfxoff_reads_an_unpowered_gc(nosys, monkeypatch):
    """fini leaves GFXOFF allowed and GFX off: the next boot must send DisallowGfxOff (and wait for its
    answer, which comes once GFX is back on) before it reads GC SCRATCH_REG7. Without it the read returns
    0xFFFFFFFF, the token does not match, and the warm GPU is needlessly booted cold."""
    AMGPU.open("am:sim").fini()
    gpu = AMGPU.open("am:sim")
    assert gpu.boot_report.kind == "warm" and not _gfxoff_errors(gpu.dev)
    assert gpu.dev.pci.dev.blocks["SMU"].gfxoff_exits >= 1       # the boot woke GFX (a GFXOFF exit)
    gpu.fini()
    monkeypatch.setattr(AMGPU, "_gc_token", lambda self: (self.dev.reg("GC").SCRATCH_REG7.read(), 0))  # (token, fault)
    gpu = AMGPU.open("am:sim")
    try:
        assert gpu.boot_report.kind == "cold" and "SCRATCH_REG7 reads 0xffffffff" in gpu.boot_report.reason
        assert any("SCRATCH_REG7 read while GFX is off" in e for e in _gfxoff_errors(gpu.dev))
    finally:
        gpu.fini()


def _idle_off(dev, model, timeout=5.0):
    """Until the holder allowed GFXOFF and GFX is off."""
    end = time.time() + timeout
    while not (dev.gfxoff.allowed and model.gfx_power() == "off"):
        assert time.time() < end, "GFX did not power off"
        time.sleep(0.05)


def test_work_after_idle_touches_no_gc_register_while_gfx_is_off(nosys, saxpy, monkeypatch):
    """Submission after idle: the doorbell wakes GFX (no message); the wait polls an always-on register;
    allocations flush the GC hub's TLB with GFX held on. Each of those steps, undone, reaches GC while
    GFX is off, which the simulator records (and answers with 0xFFFFFFFF / drops)."""
    monkeypatch.setenv(monitor.GFXOFF_DELAY_ENV, "0.05")
    dev = hcq.open("am:sim")
    try:
        model = dev.gpu.dev.pci.dev.blocks["SMU"]
        run = _launch_busy(dev, saxpy, n=1 << 10)
        run(wait=True)
        _idle_off(dev, model)
        exits = model.gfxoff_exits
        run(wait=True)                                  # the first submission after idle wakes GFX
        assert model.gfxoff_exits == exits + 1 and dev.gfxoff.allowed
        _idle_off(dev, model)
        dev.alloc(1 << 16)                              # a TLB flush of both hubs
        assert not _gfxoff_errors(dev.gpu.dev)
        # the wait's poll reading GC's GRBM_STATUS (what it did before) reads an unpowered GC during the exit
        monkeypatch.setattr(dev, "_poll_reg", dev.gc.GRBM_STATUS.read)
        _idle_off(dev, model)
        run(wait=True)
        assert any("GRBM_STATUS read while GFX is exiting" in e for e in _gfxoff_errors(dev.gpu.dev))
        dev.gpu.dev.pci.dev.errors.clear()
        # a TLB flush without GFX held on: the GC hub's invalidation request is lost
        monkeypatch.setattr(dev.gpu.gmc, "gc_awake", contextlib.nullcontext)
        _idle_off(dev, model)
        dev.alloc(1 << 16)
        assert any("GCVM_INVALIDATE_ENG17_REQ write" in e for e in _gfxoff_errors(dev.gpu.dev))
    finally:
        dev.close()


def test_recover_and_hang_reports_disallow_gfxoff_first(nosys, saxpy, monkeypatch):
    """recover() and the queue/wave reads hold GFX on (DisallowGfxOff, answered once GFX is on); a GfxOff
    whose hold sends nothing reads an unpowered GC."""
    from amdrv.ip.smu import SMU
    monkeypatch.setenv(monitor.GFXOFF_DELAY_ENV, "0.05")
    dev = hcq.open("am:sim")
    try:
        model = dev.gpu.dev.pci.dev.blocks["SMU"]
        _idle_off(dev, model)
        assert "rptr" in dev._queue_state() and dev.recover() == []
        assert not _gfxoff_errors(dev.gpu.dev)
        real = SMU.gfx_off
        monkeypatch.setattr(SMU, "gfx_off", lambda self, allow: real(self, allow) if allow else None)
        _idle_off(dev, model)
        dev._queue_state()
        assert any("CP_HQD_ACTIVE read while GFX is off" in e for e in _gfxoff_errors(dev.gpu.dev))
    finally:
        monkeypatch.undo()
        dev.gpu.smu.gfx_off(False)     # the broken hold above left the driver's bookkeeping wrong
        dev.close()


def test_usb_bridges_are_listed_by_usb_path_and_read_from_their_holder(nosys, monkeypatch, tmp_path):
    """Every USB-to-PCIe bridge the transport finds is a target (am:usb:BUS-ADDR, its USB path); a holder's
    metrics are found beside the transport's lock (usb:BUS-ADDR) and name the GPU behind it."""
    from types import SimpleNamespace

    from pcie.usb import link
    from pcie.lock import DeviceLock
    monkeypatch.setenv("DRIVERLESS_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(link, "find_bridges", lambda backend=None: [SimpleNamespace(bus=3, address=7)])
    usb = [t for t in smi.targets(sysfs=nosys) if t.transport == "usb"]
    assert usb == [smi.Target("am:usb:3-7", None, "usb:3-7", "usb", tmp_path / "driverless-usb:3-7.lock")]
    assert smi.targets(["am:usb:3-7"], sysfs=nosys) == usb
    lock = DeviceLock("usb:3-7", tmp_path)       # a holder: the transport's lock and its published metrics
    try:
        monitor.metrics_path(lock.path).write_text(json.dumps(
            {"schema": 1, "pid": os.getpid(), "time": time.time(), "period_s": 0.5, "device": "am:usb:3-7",
             "chip": "navi33", "address": "usb:3-7", "boot": "warm", "power_w": {"board": 9}}))
        rec, ok = smi.read(usb[0])
        assert ok and rec["state"] == "held" and rec["holder_pid"] == os.getpid() and rec["source"] == "published"
        assert rec["chip"] == "navi33" and "RX 7600" in rec["name"] and rec["address"] == "usb:3-7"
        assert rec["power_w"] == {"board": 9}
    finally:
        lock.release()
    monkeypatch.setattr(link, "find_bridges", lambda backend=None: (_ for _ in ()).throw(OSError("no libusb")))
    assert [t for t in smi.targets(sysfs=nosys) if t.transport == "usb"] == []


def test_usb_holder_publishes_from_its_waits(nosys, monkeypatch, tmp_path):
    """A GPU held over USB publishes its metrics from the holder's own waits (no thread beside the link's one
    transaction stream); driverless-smi finds them by the device string and reads them without touching it."""
    monkeypatch.setenv("DRIVERLESS_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv(monitor.PUBLISH_ENV, "0.2")
    state = str(device_spec.sim_state_path("navi31", usb=True))
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, state=state)).fini()
    dev = hcq.open("am:sim:usb")
    try:
        assert dev.publisher.inline and dev.publisher._thread is None and dev.publisher.published == 1
        time.sleep(0.25)
        dev.alloc(4096)
        dev.synchronize()                                       # a wait: published again
        assert dev.publisher.published == 2
        rec = next(r for r in smi.collect(sysfs=nosys)[0]["gpus"] if r["device"] == "am:sim:usb")
        assert (rec["state"], rec["source"], rec["holder_pid"]) == ("held", "published", os.getpid())
        assert rec["transport"] == "usb" and rec["address"].startswith("usb:") and rec["temperature_c"]["edge"] > 20
    finally:
        dev.close()
    assert not dev.publisher.path.exists()
    rec = next(r for r in smi.collect(sysfs=nosys)[0]["gpus"] if r["device"] == "am:sim:usb")
    assert (rec["state"], rec["source"]) == ("idle", "attached")
