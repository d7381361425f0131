"""One driver process per device: an flock on a per-device lock file that records the holder's pid.

flock is released by the kernel when the holder's file is closed, including when the process dies, so
a pid left in the file by a dead process never blocks anyone; it is only read to name a live holder.
"""
from __future__ import annotations

import errno
import fcntl
import os
import tempfile
import time
from pathlib import Path

from pcie.interface import PCIError


def default_lock_dir() -> Path:
    """$DRIVERLESS_LOCK_DIR if set, else /run/lock (shared by all users, cleared at boot), else
    $XDG_RUNTIME_DIR, else the temp dir."""
    for d in (os.environ.get("DRIVERLESS_LOCK_DIR"), "/run/lock", os.environ.get("XDG_RUNTIME_DIR"),
              tempfile.gettempdir()):
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return Path(d)
    raise PCIError("no writable directory for device lock files (/run/lock, $XDG_RUNTIME_DIR, /tmp)")


class DeviceLock:
    """Taken on construction; released by `release()`, by leaving a `with` block, or by process exit."""

    def __init__(self, address: str, directory: Path | None = None, *, path: Path | None = None):
        """address names the device in messages; the lock file is `path` when given (a simulated GPU's
        state file has its own, beside it), else DIRECTORY/driverless-ADDRESS.lock."""
        self.address = address
        self.path = Path(path) if path else Path(directory or default_lock_dir()) / f"driverless-{address}.lock"
        try:
            self._fd = self._open()
        except OSError as e:
            raise PCIError(f"device {address}: cannot open the lock file {self.path}: {e.strerror}; "
                           f"if another user created it, remove it or make it writable (chmod 666)") from None
        try:
            if os.fstat(self._fd).st_uid == os.geteuid():
                os.fchmod(self._fd, 0o666)  # the umask narrowed it; other users must be able to lock too
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = self._holder()
            os.close(self._fd)
            self._fd = -1
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise PCIError(f"device {address}: cannot lock {self.path}: {e.strerror}") from None
            who = f"pid {holder}" if holder else "an unknown process"
            if holder == os.getpid():
                who += " (this process: close the other PCIFunction first)"
            raise PCIError(f"device {address} busy, held by {who} (lock file {self.path})") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def _open(self) -> int:
        # O_CREAT only when the file is missing: in a sticky world-writable directory (/run/lock, /tmp)
        # fs.protected_regular refuses O_CREAT on another user's existing file, even a mode-666 one.
        while True:
            try:
                return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                pass
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileExistsError:
                continue  # another process created it between our two opens

    def _holder(self) -> int | None:
        # The holder writes its pid right after taking the lock; give it a moment if we came between.
        for _ in range(20):
            text = os.pread(self._fd, 32, 0).decode(errors="replace").strip()
            if text.isdigit():
                return int(text)
            time.sleep(0.005)
        return None

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)


def holder_pid(address: str, directory: Path | None = None, *, path: Path | None = None) -> int | None:
    """The pid of the process holding the lock DeviceLock(address, directory, path=path) would take, or None
    when nobody holds it (for tools that report who drives a device, e.g. a monitor). Never takes the lock:
    a shared try-lock fails exactly while a holder has it."""
    p = Path(path) if path else Path(directory or default_lock_dir()) / f"driverless-{address}.lock"
    try:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            for _ in range(20):   # the holder writes its pid right after taking the lock
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                if text.isdigit():
                    return int(text)
                time.sleep(0.005)
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
