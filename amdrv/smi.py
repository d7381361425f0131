"""driverless-smi: temperatures, power, fan, clocks, activity and VRAM of every AM GPU it can reach.

    driverless-smi                      one-shot table of every GPU (simulated ones kept in the cache,
                                        AMD GPUs on the PCI bus)
    driverless-smi --json | --csv       the same for scripts (JSON schema: docs/smi.md, stable)
    driverless-smi watch [-n 1]         live view with history sparklines (rich; plain frames without it)
    driverless-smi plot -o out.png [--seconds 30] [--interval 0.5]
                                        power, temperatures, clocks and activity over an interval (matplotlib)
    --device SPEC (repeatable)          only these GPUs (am:sim, am:sim:navi33, am:0000:03:00.0, ...)
    --boot [--cold]                     a GPU nobody holds whose SMU firmware is not running is booted
                                        (then left warm with fini) instead of reported as cold

A GPU held by another AM process is never touched: its holder publishes metrics to a file beside the
device lock (amdrv.monitor) and the tool reads that. A GPU nobody holds is attached read-only: its boot
state, and the SMU's metrics when its firmware runs (the driver table set to the address a warm boot
uses); no engine is touched.

Exit status: 0 every GPU read; 1 bad arguments or an error; 2 no GPU found; 3 some GPU could not be read
(bound to amdgpu, held by a process that publishes nothing, boot failed): each says what to do.
"""
from __future__ import annotations

import argparse
import csv
import errno
import fcntl
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amdrv import chips, device_spec, monitor
from pcie import PCIError, discover
from pcie.lock import default_lock_dir

SCHEMA = monitor.SCHEMA
EXIT_OK, EXIT_ERROR, EXIT_NO_GPU, EXIT_UNREADABLE = 0, 1, 2, 3
STALE_AFTER_S = 3.0          # a published file older than this (or 5 periods) is reported as stale
METRIC_KEYS = ("temperature_c", "power_w", "fan", "clocks_mhz", "dpm_level", "dpm_levels_mhz", "activity_pct",
               "vram_bytes", "throttle", "energy_j")
CSV_COLUMNS = ("device", "chip", "address", "state", "holder_pid", "source", "age_s", "edge_c", "hotspot_c",
               "mem_c", "power_w", "power_limit_w", "fan_pct", "fan_rpm", "gfx_mhz", "soc_mhz", "mem_mhz",
               "fclk_mhz", "gfx_level", "soc_level", "mem_level", "gfx_activity_pct", "mem_activity_pct",
               "vram_used", "vram_total", "throttle", "thermal_alerts", "message")


@dataclass(frozen=True)
class Target:
    device: str              # the AM device string that opens it
    chip: str | None
    address: str | None      # PCI address, or the simulated GPU's state file
    transport: str           # sim, sysfs, vfio, usb, or the kernel driver holding it
    lock: Path | None        # the device lock file (pcie.lock)
    driver: str | None = None   # a kernel driver bound to it (not vfio-pci)


def targets(devices: list[str] | None = None, sysfs: Path = discover.SYSFS) -> list[Target]:
    """The GPUs to report: those named, else every simulated GPU kept in the cache and every supported
    AMD GPU on the PCI bus."""
    if devices:
        return [_target(d, sysfs) for d in devices]
    out = []
    sim_dir = device_spec.cache_root() / "sim"
    for state in sorted(sim_dir.glob("*.state")) if sim_dir.is_dir() else ():
        chip, usb = state.stem.removesuffix("-usb"), state.stem.endswith("-usb")
        if chip in {c.name for c in chips.SUPPORTED}:
            device = f"am:sim{'' if chip == 'navi31' else ':' + chip}{':usb' if usb else ''}"
            out.append(Target(device, chip, str(state), "usb" if usb else "sim",
                              _usb_holder_lock(device) if usb else Path(f"{state}.lock")))
    try:
        gpus = discover.find_amd_gpus(sysfs)
    except (OSError, PCIError):
        gpus = []
    for info in gpus:
        chip = chips.by_pci_id(info.device_id)
        if chip is None:
            continue
        driver = info.driver if info.driver not in (None, "vfio-pci") else None
        out.append(Target(f"am:{info.address}", chip.name, info.address, info.driver or "sysfs",
                          _real_lock(info.address), driver))
    out += usb_targets()
    return out


def usb_targets(backend=None) -> list[Target]:
    """Every ASM24xx USB-to-PCIe bridge (pcie.usb.link.find_bridges, what `am:usb` opens), by its USB path
    BUS-ADDR. What GPU sits behind one is known only once it is opened (the holder's metrics say). No
    libusb, or no permission to list devices: no USB targets."""
    try:
        from pcie.usb import link    # pyusb: imported only when USB is searched
        bridges = link.find_bridges(backend)
    except Exception:  # noqa: BLE001 - usb.core.NoBackendError, USBError: USB is not there for this user
        return []
    out = []
    for br in bridges:
        name = link.name_of(br)
        out.append(Target(f"am:usb:{name}", None, f"usb:{name}", "usb", _real_lock(f"usb:{name}")))
    return out


def _usb_holder_lock(device: str) -> Path | None:
    """The lock of the USB transport holding a simulated GPU behind the simulated bridge (`am:sim:usb`): its
    bridge's USB path is known only to the process that opened it, so the published metrics that name the
    device lead to it (the transport locks `usb:BUS-ADDR`, pcie.lock)."""
    try:
        lock_dir = default_lock_dir()
    except PCIError:
        return None
    for path in sorted(lock_dir.glob("driverless-usb:*.lock.metrics.json")):
        try:
            if json.loads(path.read_text()).get("device") == device:
                return path.with_name(path.name.removesuffix(".metrics.json"))
        except (OSError, ValueError):
            continue
    return None


def _real_lock(address: str) -> Path | None:
    try:
        return default_lock_dir() / f"driverless-{address}.lock"
    except PCIError:
        return None


def _target(text: str, sysfs: Path) -> Target:
    head, _, rest = text.strip().partition(":")
    kind = rest.split(":")[0].lower()
    if head.lower() == "am" and kind not in ("", "sim", "usb"):
        address = discover.normalize_address(rest)
        info = discover.read_info(address, sysfs)
        chip = chips.by_pci_id(info.device_id)
        driver = info.driver if info.driver not in (None, "vfio-pci") else None
        return Target(text, chip.name if chip else None, address, info.driver or "sysfs", _real_lock(address),
                      driver)
    spec = device_spec.parse(text, sysfs)
    if spec.provider == "sim":
        state = spec.options.get("state")
        return Target(text, spec.args[0], state, "sim", Path(f"{state}.lock") if state else None)
    if spec.provider == "usb" and str(spec.args[0]).startswith("sim"):
        state = spec.options.get("sim", {}).get("state")
        return Target(text, str(spec.args[0]).partition(":")[2] or "navi31", state, "usb", _usb_holder_lock(text))
    if spec.provider == "usb" and spec.args:
        return Target(text, None, f"usb:{spec.args[0]}", "usb", _real_lock(f"usb:{spec.args[0]}"))
    return Target(text, None, str(spec.args[0]) if spec.args else None, spec.provider, None)


def holder(lock: Path | None) -> tuple[bool, int | None]:
    """(someone holds the device lock, the pid written in it)."""
    if lock is None or not lock.exists():
        return False, None
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False, None
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        pid = int(text) if text.isdigit() else None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True, pid
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, pid
    finally:
        os.close(fd)


def _published(lock: Path | None) -> dict | None:
    if lock is None:
        return None
    try:
        return json.loads(monitor.metrics_path(lock).read_text())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _record(t: Target) -> dict:
    rec = {"device": t.device, "chip": t.chip, "name": chips.by_name(t.chip).products if t.chip else None,
           "address": t.address, "transport": t.transport, "state": None, "boot": None, "holder_pid": None,
           "source": None, "age_s": None, "gfxoff_allowed": None, "thermal_alert": None, "message": ""}
    rec.update({k: None for k in METRIC_KEYS})
    return rec


def read(t: Target, boot: bool = False, cold: bool = False) -> tuple[dict, bool]:
    """One GPU's record and whether it could be read."""
    rec = _record(t)
    if t.driver:
        rec["state"] = f"bound to {t.driver}"
        rec["message"] = (f"bound to the kernel driver {t.driver}: read it with that driver's tools (amd-smi, "
                          f"/sys/class/drm/card*/device/hwmon) or, to drive it with AM, unbind it: "
                          f"{discover.unbind_command(t.address, t.driver)}")
        return rec, False
    held, pid = holder(t.lock)
    pub = _published(t.lock)
    if held:
        rec["state"], rec["holder_pid"] = "held", pid
        if pub is None:
            rec["message"] = (f"held by pid {pid}, which publishes no metrics (with {monitor.PUBLISH_ENV}=0, "
                              f"or not through the hcq backend); it is not touched: stop that process to read "
                              f"the GPU")
            return rec, False
        if rec["chip"] is None and pub.get("chip") in {c.name for c in chips.SUPPORTED}:   # a USB bridge's GPU
            rec["chip"], rec["name"] = pub["chip"], chips.by_name(pub["chip"]).products
        if t.transport == "usb" and pub.get("address"):     # the USB path the holder opened
            rec["address"] = pub["address"]
        age = max(0.0, time.time() - pub.get("time", 0))
        rec.update({k: pub.get(k) for k in METRIC_KEYS})
        rec.update(source="published", age_s=round(age, 3), boot=pub.get("boot"),
                   gfxoff_allowed=pub.get("gfxoff_allowed"), thermal_alert=pub.get("thermal_alert"))
        if pub.get("pid") != pid:
            rec["message"] = (f"held by pid {pid}; the metrics file was written by pid {pub.get('pid')} "
                              f"(an earlier holder): it may be old")
        elif age > max(STALE_AFTER_S, 5 * pub.get("period_s", 0)):
            rec["message"] = (f"held by pid {pid}; its metrics are {age:.1f} s old (the holder is busy in a long "
                              f"call, or stopped)")
        return rec, True
    if pub is not None and not _pid_alive(pub.get("pid")) and pub.get("pid") != os.getpid():
        rec["message"] = (f"holder pid {pub.get('pid')} exited without closing the GPU (the next AM open "
                          f"boots it cold); ")
        rec["holder_pid"] = pub.get("pid")
    try:
        data = _attach(t, boot, cold)
    except Exception as e:   # a GPU that cannot be opened or read: say why, report the others
        rec["state"] = "unreachable"
        rec["message"] += f"cannot attach: {e}"
        return rec, False
    rec["message"] += data.pop("message", "")
    rec.update(data)
    return rec, True


def _attach(t: Target, boot: bool, cold: bool) -> dict:
    """Reads a GPU nobody holds: read-only unless `boot` (then booted, read, and left warm with fini)."""
    from amdrv.am import AMGPU, BOOT_STATE_VERSION
    from amdrv.device import AMDevice
    from amdrv.ip.gmc import GMC
    from amdrv.ip.ih import IH
    from amdrv.ip.nbio import NBIO
    from amdrv.ip.psp import PSP
    from amdrv.ip.smu import SMU

    spec = device_spec.parse(t.device)
    pci = spec.open()
    try:
        dev = AMDevice(t.device, pci)
        # The blocks that allocate boot memory, in the boot's order, so the SMU's driver table lands where a
        # warm boot puts it (amdrv.am.AMGPU._build_blocks); constructing them touches no register.
        nbio, gmc = NBIO(dev), GMC(dev)
        IH(dev)
        psp = PSP(dev, gmc=gmc)
        smu = SMU(dev)
        state = nbio.read_state()
        if state is None:
            kind = "not booted by AM"
        elif state.version != BOOT_STATE_VERSION:
            kind = f"left by an AM run of boot state version {state.version}"
        else:
            kind = "warm (left by fini)" if state.clean else "unclean (the last AM run did not finish)"
        alive = smu.resp_reg.read() != 0 and psp.sos_alive()
        if not alive:
            if not boot:
                return {"state": "cold", "boot": kind, "message": "SMU firmware not running: nothing to read "
                        "without booting it (driverless-smi --boot)"}
        else:
            dev.fb_base = gmc.hubs["MM"].mcr("FB_LOCATION_BASE").decode()["FB_BASE"] << 24
            smu.check_versions()
            smu.set_driver_table()
            data = monitor.snapshot(smu, monitor.dpm_tables(smu))
            data.update(state="idle", boot=kind, source="attached")
            return data
    finally:
        pci.close()
    gpu = AMGPU.open(t.device, cold=cold or None)
    try:
        data = monitor.snapshot(gpu.smu, monitor.dpm_tables(gpu.smu), gpu.dev.mm.in_use() + gpu.dev.mm.boot_used)
        data.update(state="idle", boot=f"{gpu.boot_report.kind} boot by driverless-smi", source="booted")
    finally:
        gpu.fini()
    return data


def collect(devices=None, boot=False, cold=False, sysfs: Path = discover.SYSFS) -> tuple[dict, int]:
    """The whole report (the --json document) and the exit status."""
    ts = targets(devices, sysfs)
    gpus, ok = [], True
    for t in ts:
        rec, good = read(t, boot, cold)
        gpus.append(rec)
        ok &= good
    doc = {"schema": SCHEMA, "time": time.time(), "gpus": gpus}
    if not ts:
        return doc, EXIT_NO_GPU
    return doc, EXIT_OK if ok else EXIT_UNREADABLE


# ------------------------------------------------------------------------------------------ rendering
def _v(x, unit: str = "", none: str = "-") -> str:
    return none if x is None else f"{x}{unit}"


def _get(rec: dict, key: str, sub: str):
    return (rec.get(key) or {}).get(sub)


def _clock(rec: dict, k: str) -> str:
    mhz, lv = _get(rec, "clocks_mhz", k), _get(rec, "dpm_level", k)
    if mhz is None:
        return f"{k} -"
    if mhz == 0:
        return f"{k} off"
    return f"{k} {mhz} MHz" + (f" L{lv}" if lv is not None else "")


def _state_line(rec: dict) -> str:
    st = rec["state"] or "-"
    if rec["state"] == "held":
        st = f"held by pid {rec['holder_pid']}" + (f", metrics {rec['age_s']:.1f} s old" if rec["age_s"] is not None
                                                    else "")
    if rec.get("boot"):
        st += f"; boot: {rec['boot']}"
    return st


def table(doc: dict) -> str:
    if not doc["gpus"]:
        return _no_gpu_text()
    lines = []
    for rec in doc["gpus"]:
        lines.append(f"{rec['device']}  {rec['chip'] or '?'} ({rec['name'] or 'unknown'})  {rec['address'] or ''}")
        lines.append(f"  state     {_state_line(rec)}")
        if rec["temperature_c"] is not None:
            t, p, f = rec["temperature_c"], rec["power_w"], rec["fan"]
            gfxoff = {True: "  GFXOFF allowed", False: "  GFXOFF disallowed"}.get(rec.get("gfxoff_allowed"), "")
            lines.append(f"  temp      edge {t['edge']} C  hotspot {t['hotspot']} C  mem {t['mem']} C"
                         f"    fan {f['pwm_pct']}% {f['rpm']} RPM")
            lines.append(f"  power     {p['board']} W / {p['limit']} W    activity gfx {rec['activity_pct']['gfx']}%"
                         f"  mem {rec['activity_pct']['mem']}%{gfxoff}")
            lines.append("  clocks    " + "  ".join(_clock(rec, k) for k in ("gfx", "soc", "mem", "fclk")))
            used, total = _get(rec, "vram_bytes", "used"), _get(rec, "vram_bytes", "total")
            lines.append(f"  vram      {_size(used)} / {_size(total)}    throttle "
                         f"{', '.join(rec['throttle']) if rec['throttle'] else 'none'}")
        if rec.get("thermal_alert"):
            ta = rec["thermal_alert"]
            when = time.strftime("%H:%M:%S", time.localtime(ta.get("time", 0)))
            lines.append(f"  thermal   {ta['alerts']} alert(s); last: {ta.get('crossed')} {ta.get('threshold_c')} C at "
                         f"{when}" + ("; GFXCLK held at its lowest level" if ta.get("throttled") else ""))
        if rec["message"]:
            lines.append(f"  note      {rec['message']}")
    return "\n".join(lines)


def _size(n) -> str:
    if n is None:
        return "-"
    from amdrv.memory import fmt_size
    return fmt_size(n)


def _no_gpu_text() -> str:
    return ("no AM GPU found: no simulated GPU in the cache (" + str(device_spec.cache_root() / "sim") +
            ") and no supported AMD GPU on the PCI bus; run `driverless demo` to create the simulated one, or "
            "pass --device am:sim")


def flat(rec: dict) -> dict:
    g = lambda k, s: _get(rec, k, s)  # noqa: E731
    return {
        "device": rec["device"], "chip": rec["chip"], "address": rec["address"], "state": rec["state"],
        "holder_pid": rec["holder_pid"], "source": rec["source"], "age_s": rec["age_s"],
        "edge_c": g("temperature_c", "edge"), "hotspot_c": g("temperature_c", "hotspot"),
        "mem_c": g("temperature_c", "mem"), "power_w": g("power_w", "board"), "power_limit_w": g("power_w", "limit"),
        "fan_pct": g("fan", "pwm_pct"), "fan_rpm": g("fan", "rpm"), "gfx_mhz": g("clocks_mhz", "gfx"),
        "soc_mhz": g("clocks_mhz", "soc"), "mem_mhz": g("clocks_mhz", "mem"), "fclk_mhz": g("clocks_mhz", "fclk"),
        "gfx_level": g("dpm_level", "gfx"), "soc_level": g("dpm_level", "soc"), "mem_level": g("dpm_level", "mem"),
        "gfx_activity_pct": g("activity_pct", "gfx"), "mem_activity_pct": g("activity_pct", "mem"),
        "vram_used": g("vram_bytes", "used"), "vram_total": g("vram_bytes", "total"),
        "throttle": " ".join(rec["throttle"] or []),
        "thermal_alerts": (rec.get("thermal_alert") or {}).get("alerts", 0), "message": rec["message"],
    }


def to_csv(doc: dict) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for rec in doc["gpus"]:
        w.writerow({k: "" if v is None else v for k, v in flat(rec).items()})
    return out.getvalue()


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values, lo: float | None = None, hi: float | None = None, width: int = 40) -> str:
    vals = [v for v in values if v is not None][-width:]
    if not vals:
        return ""
    lo = min(vals) if lo is None else lo
    hi = max(vals) if hi is None else hi
    span = (hi - lo) or 1
    return "".join(SPARK[min(len(SPARK) - 1, max(0, int((v - lo) / span * (len(SPARK) - 1) + 0.5)))] for v in vals)


SERIES = (("power W", "power_w", "board", 0, None), ("hotspot C", "temperature_c", "hotspot", 20, 110),
          ("gfx MHz", "clocks_mhz", "gfx", 0, None), ("gfx %", "activity_pct", "gfx", 0, 100))


def watch_frame(doc: dict, history: dict) -> str:
    lines = [time.strftime("driverless-smi  %H:%M:%S", time.localtime(doc["time"]))]
    for rec in doc["gpus"]:
        lines.append(table({"gpus": [rec]}))
        for label, key, sub, lo, hi in SERIES:
            vals = history.get((rec["device"], key, sub), [])
            lines.append(f"  {label:<9} {_v(vals[-1] if vals else None):>6} {sparkline(vals, lo, hi)}")
    return "\n".join(lines)


def _remember(doc: dict, history: dict, keep: int = 120) -> None:
    for rec in doc["gpus"]:
        for _, key, sub, _, _ in SERIES:
            h = history.setdefault((rec["device"], key, sub), [])
            h.append(_get(rec, key, sub))
            del h[:-keep]


def watch(args) -> int:
    history: dict = {}
    try:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text
    except ImportError:
        Live = None
    n, status = 0, EXIT_OK
    sample = lambda: collect(args.device, args.boot, args.cold, args.sysfs)  # noqa: E731
    try:
        if Live is not None and sys.stdout.isatty():
            with Live(console=Console(), auto_refresh=False) as live:
                while args.count is None or n < args.count:
                    doc, status = sample()
                    _remember(doc, history)
                    live.update(Text(watch_frame(doc, history)), refresh=True)
                    n += 1
                    if args.count is None or n < args.count:
                        time.sleep(args.interval)
        else:   # not a terminal, or rich missing: one plain frame per sample
            while args.count is None or n < args.count:
                doc, status = sample()
                _remember(doc, history)
                print(watch_frame(doc, history) + "\n", flush=True)
                n += 1
                if args.count is None or n < args.count:
                    time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    return status


def record(devices, seconds: float, interval: float, boot=False, cold=False,
           sysfs: Path = discover.SYSFS) -> list[dict]:
    samples, end = [], time.time() + seconds
    while True:
        doc, _ = collect(devices, boot, cold, sysfs)
        samples.append(doc)
        if time.time() + interval > end:
            return samples
        time.sleep(interval)


def plot(samples: list[dict], output: Path, device: str | None = None) -> Path:
    """A PNG of power, temperatures, clocks and activity of one GPU over the samples (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [(d["time"], next((r for r in d["gpus"] if device in (None, r["device"])), None)) for d in samples]
    recs = [(t, r) for t, r in recs if r is not None and r["temperature_c"] is not None]
    if not recs:
        raise ValueError(f"no metrics were read from {device or 'any GPU'} during the recording")
    t0 = recs[0][0]
    ts = [t - t0 for t, _ in recs]
    fig, axes = plt.subplots(4, 1, figsize=(7, 7), sharex=True, dpi=80)
    panels = (("power (W)", (("board", "power_w", "board"), ("limit", "power_w", "limit"))),
              ("temperature (C)", (("edge", "temperature_c", "edge"), ("hotspot", "temperature_c", "hotspot"),
                                   ("memory", "temperature_c", "mem"))),
              ("clock (MHz)", (("gfx", "clocks_mhz", "gfx"), ("soc", "clocks_mhz", "soc"),
                               ("mem", "clocks_mhz", "mem"))),
              ("activity (%)", (("gfx", "activity_pct", "gfx"), ("mem", "activity_pct", "mem"))))
    for ax, (title, lines) in zip(axes, panels):
        for label, key, sub in lines:
            ax.plot(ts, [_get(r, key, sub) for _, r in recs], label=label, linewidth=1.2)
        ax.set_ylabel(title, fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("seconds", fontsize=8)
    fig.suptitle(f"{recs[0][1]['device']} ({recs[0][1]['chip']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)
    return Path(output)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="driverless-smi", description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("view", nargs="?", choices=("table", "watch", "plot"), default="table")
    ap.add_argument("--device", action="append", help="an AM device string (repeatable); default: every GPU")
    fmt = ap.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the report as JSON (schema in docs/smi.md)")
    fmt.add_argument("--csv", action="store_true", help="one CSV row per GPU")
    ap.add_argument("--boot", action="store_true", help="boot a GPU nobody holds whose firmware is not running")
    ap.add_argument("--cold", action="store_true", help="with --boot: a cold boot even if it could be warm")
    ap.add_argument("-n", "--interval", type=float, default=1.0, help="watch/plot: seconds between samples")
    ap.add_argument("--count", type=int, help="watch: stop after this many samples")
    ap.add_argument("--seconds", type=float, default=30.0, help="plot: how long to record")
    ap.add_argument("-o", "--output", type=Path, default=Path("driverless-smi.png"), help="plot: the PNG to write")
    ap.add_argument("--sysfs", type=Path, default=discover.SYSFS, help=argparse.SUPPRESS)   # tests
    args = ap.parse_args(argv)
    if args.interval <= 0:
        ap.error("--interval must be more than 0 seconds")
    try:
        if args.view == "watch":
            return watch(args)
        if args.view == "plot":
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                print("driverless-smi plot needs matplotlib: pip install matplotlib (or pip install "
                      "'driverless[smi]')", file=sys.stderr)
                return EXIT_ERROR
            samples = record(args.device, args.seconds, args.interval, args.boot, args.cold, args.sysfs)
            out = plot(samples, args.output, args.device[0] if args.device else None)
            print(f"{out}: {len(samples)} samples over {samples[-1]['time'] - samples[0]['time']:.1f} s")
            return EXIT_OK
        doc, status = collect(args.device, args.boot, args.cold, args.sysfs)
    except (PCIError, ValueError) as e:
        print(f"driverless-smi: {e}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(doc, indent=2))
    elif args.csv:
        sys.stdout.write(to_csv(doc))
    else:
        print(table(doc))
    if status == EXIT_NO_GPU and (args.json or args.csv):
        print(_no_gpu_text(), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
