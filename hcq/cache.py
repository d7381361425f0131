"""The one cache root every cache of the project lives under (docs/environment.md).

    root()          $DRIVERLESS_CACHE, else $XDG_CACHE_HOME/driverless, else ~/.cache/driverless
    subdir("c")     root()/c: each cache is a subfolder (firmware/, discovery/, sim/, kernels/, c/, nvrtc/, ...)

Nothing here creates directories: each cache makes its own folder when it first writes.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ENV_CACHE = "DRIVERLESS_CACHE"
# Variables earlier versions read for single caches, and the subfolder that cache now has. Setting one
# changes nothing; a line on stderr (once per process) says so and names the variable to use.
RETIRED = {"DRIVERLESS_CACHE_DIR": "kernels", "DRIVERLESS_C_CACHE": "c"}
_warned: set[str] = set()


def root() -> Path:
    base = os.environ.get(ENV_CACHE)
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "driverless")
    _warn_retired()
    return Path(base)


def subdir(name: str) -> Path:
    """The folder of one cache under the root."""
    return root() / name


def _warn_retired() -> None:
    for old, sub in RETIRED.items():
        if old in os.environ and old not in _warned:
            _warned.add(old)
            print(f"driverless: {old} is no longer read; every cache is under {ENV_CACHE} (this one in its "
                  f"{sub}/ folder): set {ENV_CACHE} instead", file=sys.stderr)


def compiled(path: Path, build, memo: dict, stats: dict, use_cache: bool = True) -> bytes:
    """A compiler's ELF output kept by content: `path` is its file in a cache folder, named by the hash of
    everything that decides the output. Served from `memo`, else from the file when it is still an ELF (a
    damaged file is rebuilt), else `build()` runs and the result is written atomically. `stats` counts
    memory_hits, disk_hits and compiles. A cache that cannot be written is not an error: the bytes are in
    hand."""
    key = path.name
    if use_cache and key in memo:
        stats["memory_hits"] += 1
        return memo[key]
    if use_cache and path.is_file():
        data = path.read_bytes()
        if data[:4] == b"\x7fELF":
            stats["disk_hits"] += 1
            memo[key] = data
            return data
    data = build()
    stats["compiles"] += 1
    memo[key] = data
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmpname = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmpname, path)
        except OSError:
            pass
    return data
