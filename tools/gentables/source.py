"""Locates the amdgpu headers of Debian's linux-source-6.1 (a directory or the .tar.xz it ships)."""
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from hcq import cache as hcq_cache

DEFAULT_TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
AMD_SUBDIR = "drivers/gpu/drm/amd"


class HeaderTree:
    """The drivers/gpu/drm/amd directory of a kernel tree; `read("include/discovery.h")` gives text."""

    def __init__(self, amd_dir: Path, origin: str):
        self.amd_dir = Path(amd_dir)
        self.origin = origin  # what the generated files name as their source

    def path(self, rel: str) -> Path:
        p = self.amd_dir / rel
        if not p.is_file():
            raise FileNotFoundError(f"gentables: {rel} not found under {self.amd_dir}")
        return p

    def read(self, rel: str) -> str:
        return self.path(rel).read_text(errors="replace")


def _cache_dir() -> Path:
    return hcq_cache.subdir("linux-source-6.1")


def find_source() -> Path | None:
    """The kernel source to use: $LINUX_SRC (a tree or a tarball), else Debian's tarball if installed."""
    env = os.environ.get("LINUX_SRC")
    if env:
        return Path(env)
    return DEFAULT_TARBALL if DEFAULT_TARBALL.is_file() else None


def open_tree(src: Path | None = None) -> HeaderTree:
    """Opens a kernel tree; a tarball is unpacked once (only drivers/gpu/drm/amd) into the user cache."""
    src = Path(src) if src else find_source()
    if src is None:
        raise FileNotFoundError(
            "gentables: no kernel source; install Debian's linux-source-6.1 or set LINUX_SRC to a tree or tarball")
    if src.is_dir():
        amd = src / AMD_SUBDIR if (src / AMD_SUBDIR).is_dir() else src
        return HeaderTree(amd, f"{src.name}/{AMD_SUBDIR}")
    top = src.name.split(".tar")[0]
    dest = _cache_dir()
    stamp = dest / ".complete"
    key = f"{src.stat().st_size}:{src.stat().st_mtime_ns}"
    if not (stamp.is_file() and stamp.read_text() == key):
        prefix = f"{top}/{AMD_SUBDIR}/"
        dest.mkdir(parents=True, exist_ok=True)
        # GNU tar with xz reads the 138 MB tarball about twice as fast as tarfile and lzma in Python
        if not (shutil.which("tar") and shutil.which("xz") and subprocess.run(
                ["tar", "-xJf", str(src), "-C", str(dest), prefix.rstrip("/")], capture_output=True).returncode == 0):
            with tarfile.open(src) as tar:
                members = [m for m in tar if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
                extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(dest, members=members, **extra)
        stamp.write_text(key)
    return HeaderTree(dest / top / AMD_SUBDIR, f"{top}/{AMD_SUBDIR}")
