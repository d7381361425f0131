"""The one cache root every cache of the project lives under (docs/environment.md).

    root()          $DRIVERLESS_CACHE, else $XDG_CACHE_HOME/driverless, else ~/.cache/driverless
    subdir("c")     root()/c: each cache is a subfolder (firmware/, discovery/, sim/, kernels/, c/, nvrtc/, ...)

Nothing here creates directories: each cache makes its own folder when it first writes.
"""
from __future__ import annotations

import os
import sys
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
