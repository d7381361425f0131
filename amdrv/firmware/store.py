"""Where pinned firmware comes from: an override directory, the per-user cache, or the web.

Every byte handed to the driver has been checked against its pin (size and sha256) in this process:
a file is read once, verified, and the verified bytes are what callers get. Nothing is taken from
/lib/firmware unless a user names it (DRIVERLESS_FIRMWARE_DIR, or `python -m amdrv.firmware seed DIR`).
"""
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from amdrv.firmware.pins import DEFAULT_URLS, PINS, TAG, Pin
from hcq import cache as hcq_cache

ENV_DIR = "DRIVERLESS_FIRMWARE_DIR"   # offline override: a directory of the pinned files
ENV_URL = "DRIVERLESS_FIRMWARE_URL"   # a mirror: URL template with {name}, replaces the default URLs
ENV_OFFLINE = "DRIVERLESS_OFFLINE"    # "1": never touch the network


class FirmwareError(Exception):
    """A firmware file is missing, corrupt or unparseable; the message says which and what to do."""


def _how_to_supply(names: list[str]) -> str:
    return (
        f"Ways to supply them (linux-firmware tag {TAG}, directory amdgpu/):\n"
        f"  - go online: they are fetched into {cache_dir()} on first use;\n"
        f"  - set {ENV_DIR}=DIR to a directory holding them (Debian: apt install firmware-amd-graphics "
        f"from non-free-firmware, then {ENV_DIR}=/lib/firmware/amdgpu);\n"
        f"  - or copy them into the cache once: python -m amdrv.firmware seed DIR;\n"
        f"  - or set {ENV_URL}='https://mirror/path/{{name}}' to fetch from a mirror of linux-firmware.")


def cache_dir() -> Path:
    return hcq_cache.subdir("firmware") / TAG / "amdgpu"


def pin_of(name: str) -> Pin:
    try:
        return PINS[name]
    except KeyError:
        raise FirmwareError(f"firmware: {name} is not a pinned file; pinned: {', '.join(sorted(PINS))}") from None


def _wrong_size(pin: Pin, size: int, origin: str) -> FirmwareError:
    return FirmwareError(f"firmware: {pin.name} from {origin} is {size} bytes, the pin says {pin.size} "
                         f"(truncated or a different linux-firmware version than {TAG}); replace it")


def check(pin: Pin, data: bytes, origin: str) -> bytes:
    """Returns data if it is exactly the pinned file, else raises naming the file, where it came from and how."""
    if len(data) != pin.size:
        raise _wrong_size(pin, len(data), origin)
    digest = hashlib.sha256(data).hexdigest()
    if digest != pin.sha256:
        raise FirmwareError(f"firmware: {pin.name} from {origin} has sha256 {digest}, the pin says {pin.sha256} "
                            f"(corrupt or a different linux-firmware version than {TAG}); replace it")
    return data


def read_local(pin: Pin, path: Path, origin: str) -> bytes:
    """A local file's verified bytes. The size is checked before reading, so that a wrong file (a multi-GiB
    one dropped in the override directory) is refused without being read into memory; a file that cannot
    be read is a FirmwareError naming it, not a raw OSError."""
    try:
        size = path.stat().st_size
        if size != pin.size:
            raise _wrong_size(pin, size, origin)
        with path.open("rb") as f:
            data = f.read(pin.size + 1)   # never more than the pin allows, should it grow meanwhile
    except OSError as e:
        raise FirmwareError(f"firmware: {pin.name} from {origin} cannot be read: {e.strerror or e}; "
                            f"fix its permissions or replace it") from None
    return check(pin, data, origin)


def _override_path(directory: Path, name: str) -> Path | None:
    # Accept both a linux-firmware checkout (DIR/amdgpu/NAME) and its amdgpu directory (DIR/NAME).
    for p in (directory / name, directory / "amdgpu" / name):
        if p.is_file():
            return p
    return None


@dataclass
class Status:
    name: str
    state: str      # "verified", "missing" or "bad"
    where: str      # the path it was found at, or what is wrong


class FirmwareStore:
    """Resolves pinned firmware by name: override directory, then cache, then the web (unless offline)."""

    def __init__(self, override: str | Path | None = None, cache: Path | None = None,
                 urls: tuple[str, ...] | None = None, offline: bool | None = None, progress=None):
        override = override if override is not None else os.environ.get(ENV_DIR)
        self.override = Path(override) if override else None
        self.cache = Path(cache) if cache else cache_dir()
        env_url = os.environ.get(ENV_URL)
        self.urls = urls if urls is not None else ((env_url,) if env_url else DEFAULT_URLS)
        self.offline = offline if offline is not None else os.environ.get(ENV_OFFLINE) == "1"
        self.progress = progress if progress is not None else _Progress(sys.stderr)
        self._verified: dict[str, bytes] = {}   # what read_all handed out: read and hashed once per store
        if self.override is not None and not self.override.is_dir():
            raise FirmwareError(f"firmware: {ENV_DIR}={self.override} is not a directory")

    def _local(self, name: str) -> bytes | None:
        """Verified bytes from the override or the cache; None if neither has the file."""
        pin = pin_of(name)
        if self.override is not None and (p := _override_path(self.override, name)):
            return read_local(pin, p, str(p))
        p = self.cache / name
        if p.is_file():
            return read_local(pin, p, f"{p} (cache; delete it to fetch again)")
        return None

    def read(self, name: str) -> bytes:
        """The verified contents of one pinned file, fetching it if needed."""
        return self.read_all([name])[name]

    def read_all(self, names: list[str]) -> dict[str, bytes]:
        """Verified contents of several files; one error lists every file that could not be had."""
        out, missing = {}, []
        for name in names:
            data = self._verified.get(name) or self._local(name)
            if data is None:
                missing.append(name)
            else:
                out[name] = data
        if missing and not self.offline:
            for name in missing:
                try:
                    out[name] = self._fetch(pin_of(name))
                except FirmwareError as e:
                    # One failure (usually no network) means the rest would fail alike: stop and list all.
                    left = [n for n in missing if n not in out]
                    raise FirmwareError(f"firmware: {len(left)} pinned file(s) missing and not fetched: "
                                        + ", ".join(left) + f"\n  fetch failed: {e}\n"
                                        + _how_to_supply(left)) from None
            missing = []
        if missing:
            raise FirmwareError(f"firmware: {len(missing)} pinned file(s) not found and offline: "
                                + ", ".join(missing) + "\n" + _how_to_supply(missing))
        self._verified.update(out)
        return out

    def path(self, name: str) -> Path:
        """A path holding the verified file (the override's or the cache's); fetches it if needed."""
        self.read(name)
        if self.override is not None and (p := _override_path(self.override, name)):
            return p
        return self.cache / name

    def origin(self, name: str) -> str:
        """Where read() would take `name` from now, in words (nothing is read): the override directory, the
        cache (filled by an earlier download or by `seed`), or the web."""
        if self.override is not None and _override_path(self.override, name):
            return f"from {self.override} ({ENV_DIR})"
        if (self.cache / name).is_file():
            return "from the cache (downloaded or seeded earlier)"
        return "not available (offline)" if self.offline else "downloaded now"

    def _fetch(self, pin: Pin) -> bytes:
        errors = []
        for template in self.urls:
            url = template.format(name=pin.name)
            try:
                data = self._download(url, pin)
            except urllib.error.HTTPError as e:
                errors.append(f"{url}: HTTP {e.code} {e.reason}")
                continue
            except (urllib.error.URLError, OSError, ValueError) as e:
                errors.append(f"{url}: {getattr(e, 'reason', e)}")
                continue
            check(pin, data, url)
            self.store(pin.name, data)
            return data
        raise FirmwareError(f"{pin.name}: " + "; ".join(errors))

    def _download(self, url: str, pin: Pin) -> bytes:
        req = urllib.request.Request(url, headers={"User-Agent": "driverless-firmware-fetch"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            chunks, got = [], 0
            self.progress.start(pin.name, pin.size)
            while chunk := resp.read(1 << 16):
                got += len(chunk)
                if got > pin.size:  # never buffer more than the pinned file could be
                    raise ValueError(f"server sent more than the pinned {pin.size} bytes")
                chunks.append(chunk)
                self.progress.update(got)
            self.progress.done()
        return b"".join(chunks)

    def store(self, name: str, data: bytes) -> Path:
        """Verifies data against its pin and writes it into the cache atomically (safe across processes)."""
        check(pin_of(name), data, "the data to store")
        self.cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.cache, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.cache / name)
        except BaseException:
            os.unlink(tmp)
            raise
        return self.cache / name

    def status(self, names: list[str] | None = None) -> list[Status]:
        """Per-file state without touching the network."""
        out = []
        for name in names or sorted(PINS):
            try:
                data = self._local(name)
            except FirmwareError as e:
                out.append(Status(name, "bad", str(e)))
                continue
            if data is None:
                out.append(Status(name, "missing", "not in the override directory or the cache"))
            else:
                where = _override_path(self.override, name) if self.override else None
                out.append(Status(name, "verified", str(where or self.cache / name)))
        return out


class _Progress:
    """A one-line download display on a terminal; one line per file otherwise (logs, CI)."""

    def __init__(self, stream):
        self.stream, self.tty = stream, stream.isatty()

    def start(self, name: str, total: int):
        self.name, self.total = name, total
        if not self.tty:
            print(f"firmware: fetching {name} ({total} bytes)", file=self.stream)

    def update(self, got: int):
        if self.tty:
            pct = 100 * got // self.total
            print(f"\rfirmware: fetching {self.name} {got // 1024}/{self.total // 1024} KiB {pct}%",
                  end="", file=self.stream, flush=True)

    def done(self):
        if self.tty:
            print(file=self.stream)
