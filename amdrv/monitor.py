"""What the process holding a GPU does for operators: lets GFX power off when it has been idle, and
publishes the GPU's metrics to a small read-only file that `driverless-smi` reads without touching
the GPU (amdrv.smi).

GFXOFF (amdgpu_gfx.c amdgpu_gfx_off_ctrl, smu_v13_0.c smu_v13_0_gfx_off_control): the driver keeps a
count of requests that GFX stay powered (any code about to touch GC registers holds one); when the
count drops to 0 it sends AllowGfxOff after a delay (GFX_OFF_DELAY_ENABLE, 100 ms upstream; here
`idle_s`, $DRIVERLESS_GFXOFF_DELAY_S), and DisallowGfxOff as soon as a request comes while GFX may be
off. Once allowed, the PMFW powers GFX off whenever it is idle and back on when work arrives through a
doorbell: upstream submits without DisallowGfxOff (gfx_v11_0_ring_set_wptr_compute only rings the
doorbell), so a submission needs no message.

The metrics file (`metrics_path`): JSON, rewritten atomically every `period_s` by a thread of the
holder, beside the device's lock file (pcie.lock: /run/lock/driverless-ADDRESS.lock.metrics.json for a
real GPU, CACHE/sim/CHIP.state.lock.metrics.json for a simulated one), mode 0644. It carries the
holder's pid, so a reader can tell a live holder from one that died (the file stays; the lock goes).
Over USB no thread runs (the delayed AllowGfxOff and the publisher's thread would send SMU messages beside
the holder's, and the link is one transaction stream): the holder publishes from its own waits instead, at
most every `period_s` (`Publisher(inline=True)`), so an idle USB holder's file ages and the tool says how
old it is. GFXOFF is not allowed after idle there (fini still allows it).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

from amdrv.ip.smu import SMUError, THERMAL_ALERT_C, THERMAL_CLEAR_C

log = logging.getLogger("amdrv.monitor")

GFXOFF_DELAY_ENV = "DRIVERLESS_GFXOFF_DELAY_S"
PUBLISH_ENV = "DRIVERLESS_PUBLISH_S"
GFXOFF_DELAY_S = 0.1          # GFX_OFF_DELAY_ENABLE (amdgpu_gfx.c)
PUBLISH_PERIOD_S = 0.5
SCHEMA = 1                    # of the metrics file and of `driverless-smi --json` (amdrv.smi)
DPM_CLOCKS = (("gfx", "gfxclk"), ("soc", "socclk"), ("mem", "uclk"), ("fclk", "fclk"))


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"${name}={text!r} is not a number of seconds") from None
    if value < 0:
        raise ValueError(f"${name}={text!r} must be 0 or more seconds")
    return value


def metrics_path(lock_path: str | Path) -> Path:
    """Where the holder of the device locked by `lock_path` publishes its metrics."""
    return Path(f"{lock_path}.metrics.json")


def lock_path_of(pci) -> Path | None:
    """The device lock file every pcie provider takes (pcie.lock.DeviceLock); None without one."""
    lock = getattr(pci, "_lock", None)
    return getattr(lock, "path", None)


class GfxOff:
    """amdgpu_gfx_off_ctrl for one GPU: `hold()`/`release()` requests that GFX stay powered (or use
    `with gfxoff.awake():`); released to 0, AllowGfxOff follows after `delay_s`."""

    def __init__(self, smu, delay_s: float | None = None):
        self.smu = smu
        self.delay_s = _env_seconds(GFXOFF_DELAY_ENV, GFXOFF_DELAY_S) if delay_s is None else delay_s
        self.requests = 1            # GFX is held on from boot until the driver lets it go (late init)
        self.allowed = False         # what the SMU was last told
        self.enabled = True
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.allow_count = 0         # how often GFXOFF was allowed (for reports and tests)

    def hold(self) -> None:
        with self._lock:
            if self.requests == 0:
                self._cancel()
                if self.allowed:
                    self.smu.gfx_off(False)
                    self.allowed = False
            self.requests += 1

    def release(self) -> None:
        with self._lock:
            if self.requests == 0:
                raise RuntimeError("GfxOff.release without hold (an imbalance, as upstream's WARN_ON_ONCE)")
            self.requests -= 1
            if self.requests == 0 and self.enabled and not self.allowed:
                self._cancel()
                self._timer = threading.Timer(self.delay_s, self._allow)
                self._timer.daemon = True
                self._timer.start()

    def awake(self):
        gfxoff = self

        class _Awake:
            def __enter__(self):
                gfxoff.hold()

            def __exit__(self, *exc):
                gfxoff.release()
        return _Awake()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _allow(self) -> None:
        with self._lock:
            self._timer = None
            if self.requests or self.allowed or not self.enabled:
                return
            try:
                self.smu.gfx_off(True)
            except SMUError as e:     # the SMU reset under us or hangs: GFX simply stays on
                log.warning("%s: AllowGfxOff failed: %s", self.smu.dev.name, e)
                return
            self.allowed = True
            self.allow_count += 1

    def settle(self) -> None:
        """Sends now the AllowGfxOff a pending delay would send later (a caller that plays time itself: the
        mutation workload, whose simulated GPU moves only when the driver touches it)."""
        with self._lock:
            pending = self._timer is not None
            self._cancel()
        if pending:
            self._allow()

    def stop(self) -> None:
        """For fini: no more AllowGfxOff; GFX held on (what it needs to be halted)."""
        self.hold()
        with self._lock:
            self.enabled = False
            self._cancel()


class ThermalAlert(RuntimeWarning):
    """The GPU crossed its thermal alert threshold (a THM interrupt); the driver throttled GFX."""


class ThermalState:
    """What the driver does with THM's digital thermal interrupts (smu_v13_0_irq_process).

    Above the alert threshold, upstream's software CTF work (smu_swctf_delayed_work_handler) powers the
    host off if the hotspot is still over software_shutdown_temp 50 ms later. A userspace driver does
    not shut the machine down: it holds GFXCLK at its lowest DPM level (SetSoftMaxByFreq) until THM
    says the GPU is back below the low threshold, on top of the PMFW's own throttling, and says so on the
    holder's next call (a ThermalAlert warning) and in the published metrics (driverless-smi)."""

    def __init__(self):
        self.alerts = 0
        self.throttled = False
        self.last: dict | None = None
        self._news: list[str] = []
        self._lock = threading.Lock()

    def handle(self, smu, iv) -> bool:
        """True if iv is a THM interrupt (acted upon), False for any other IV."""
        where = smu.thermal_iv(iv)
        if where is None:
            return False
        low, high = smu.thermal_range or (THERMAL_CLEAR_C, THERMAL_ALERT_C)
        with self._lock:
            self.last = {"time": time.time(), "crossed": where, "threshold_c": high if where == "above" else low}
            if where == "above":
                self.alerts += 1
                lowest = smu.dpm_levels("gfxclk").mhz[0]
                smu.set_soft_limits("gfxclk", max_mhz=lowest)
                self.throttled = True
                msg = (f"thermal alert: the GPU is above {high} C (THM interrupt); GFXCLK held at {lowest} MHz "
                       f"until it cools below {low} C; check its cooling (fan, airflow)")
            else:
                top = smu.dpm_levels("gfxclk").mhz[-1]
                if self.throttled:
                    smu.set_soft_limits("gfxclk", max_mhz=top)
                self.throttled = False
                msg = f"thermal alert cleared: the GPU is below {low} C again; GFXCLK back to {top} MHz"
            log.warning("%s: %s", smu.dev.name, msg)
            self._news.append(msg)
        return True

    def unreported(self) -> str:
        with self._lock:
            news, self._news = self._news, []
        return "; ".join(news)

    def published(self) -> dict | None:
        with self._lock:
            if not self.alerts:
                return None
            return {"alerts": self.alerts, "throttled": self.throttled, **(self.last or {})}


def snapshot(smu, dpm: dict | None = None, vram_used: int | None = None) -> dict:
    """A GPU's metrics through its SMU (amdrv.ip.smu.SMU) in the published (and `driverless-smi --json`)
    form. dpm: {key: (mhz, ...)} DPM levels per clock (read once by the caller; they do not change while
    the firmware runs)."""
    m = smu.metrics()
    limit = smu.power_limit()
    clocks = {"gfx": m.gfxclk_mhz, "soc": m.socclk_mhz, "mem": m.uclk_mhz, "fclk": m.fclk_mhz}
    level = {}
    for key, _ in DPM_CLOCKS:
        levels = (dpm or {}).get(key)
        if levels and clocks[key]:
            level[key] = min(range(len(levels)), key=lambda i: abs(levels[i] - clocks[key]))
        else:
            level[key] = None    # no table, or the clock is off (GFX powered off)
    return {
        "temperature_c": {"edge": m.edge_c, "hotspot": m.hotspot_c, "mem": m.mem_c},
        "power_w": {"board": m.board_power_w, "socket": m.socket_power_w, "limit": limit},
        "fan": {"pwm_pct": m.fan_pwm, "rpm": m.fan_rpm},
        "clocks_mhz": clocks,
        "dpm_level": level,
        "dpm_levels_mhz": {k: list(v) for k, v in (dpm or {}).items()},
        "activity_pct": {"gfx": m.gfx_activity, "mem": m.mem_activity},
        "vram_bytes": {"used": vram_used, "total": smu.dev.vram.size},
        "throttle": sorted(m.throttling),
        "energy_j": m.energy_accumulator,
    }


def dpm_tables(smu) -> dict:
    return {key: smu.dpm_levels(name).mhz for key, name in DPM_CLOCKS}


class Publisher:
    """The holder's thread that rewrites the metrics file every `period_s` (0 disables it)."""

    def __init__(self, gpu, path: Path, period_s: float | None = None, extra=None, inline: bool = False):
        self.gpu, self.path = gpu, Path(path)
        self.period_s = _env_seconds(PUBLISH_ENV, PUBLISH_PERIOD_S) if period_s is None else period_s
        self.extra = extra or (lambda: {})
        self._stop = threading.Event()
        self._dpm = None
        self.published = 0
        self.error: str | None = None
        self._thread = None
        self.inline = inline       # no thread: the holder calls tick() from its own calls (USB)
        self._next = 0.0
        if inline:
            self.tick()
        elif self.period_s > 0:
            self._thread = threading.Thread(target=self._run, name=f"metrics {gpu.dev.name}", daemon=True)
            self._thread.start()

    def publish_once(self) -> dict:
        gpu = self.gpu
        if self._dpm is None:
            self._dpm = dpm_tables(gpu.smu)
        data = {"schema": SCHEMA, "pid": os.getpid(), "time": time.time(), "period_s": self.period_s,
                "device": gpu.dev.name, "chip": gpu.dev.chip.name, "address": gpu.dev.pci.address,
                "boot": gpu.boot_report.kind if gpu.boot_report else None}
        data.update(snapshot(gpu.smu, self._dpm, gpu.dev.mm.in_use() + gpu.dev.mm.boot_used))
        data.update(self.extra())
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)     # readers see the old file or the new one, never half of one
        self.published += 1
        return data

    def _attempt(self) -> None:
        try:
            self.publish_once()
            self.error = None
        except Exception as e:    # the GPU went away or the SMU stopped answering: say so, keep trying
            if self.error != str(e):
                log.warning("%s: publishing metrics to %s failed: %s", self.gpu.dev.name, self.path, e)
            self.error = str(e)

    def tick(self) -> None:
        """Inline publishing: once `period_s` has passed since the last (0 turns it off)."""
        now = time.monotonic()
        if self.period_s > 0 and now >= self._next and not self._stop.is_set():
            self._next = now + self.period_s
            self._attempt()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._attempt()
            self._stop.wait(self.period_s)

    def stop(self, remove: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
