"""Shared fixtures: an isolated firmware environment for every test, and the real firmware files."""
import fcntl
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

DEBIAN_FIRMWARE = Path(os.environ.get("DRIVERLESS_TEST_FIRMWARE", "/lib/firmware/amdgpu"))


@pytest.fixture(autouse=True)
def _isolated_firmware_env(tmp_path_factory, monkeypatch):
    # Tests never touch the user's cache or the network unless they set these up themselves.
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("DRIVERLESS_OFFLINE", "1")
    # Device locks per test: simulated devices of parallel test processes share names (the simulated
    # bridge in front of slot N is USB 1-(2 + N), 2-(2 + N) with the open firmware), and would otherwise hold each other's lock files.
    monkeypatch.setenv("DRIVERLESS_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
    monkeypatch.delenv("DRIVERLESS_FIRMWARE_DIR", raising=False)
    monkeypatch.delenv("DRIVERLESS_FIRMWARE_URL", raising=False)


@pytest.fixture
def sim_bus():
    """A simulated host bus of this test's own (gpusim.bus.HostBus): the GPUs it opens there
    (`pcie.open_function("sim", ..., bus=sim_bus)`, `hcq.open("am:sim", bus=sim_bus)`) are its alone, in
    slots from 0, and are unplugged (their clocks stopped) when it ends; no test picks slot numbers."""
    from gpusim.bus import HostBus
    bus = HostBus()
    yield bus
    bus.close()


@pytest.fixture(scope="session")
def debian_firmware() -> Path:
    """Debian's firmware-amd-graphics (linux-firmware 20230210); `make test` installs it."""
    if not (DEBIAN_FIRMWARE / "gc_11_0_0_mec.bin").is_file():
        pytest.fail(f"real firmware not found in {DEBIAN_FIRMWARE}: run `make test` (installs Debian's "
                    "firmware-amd-graphics) or set DRIVERLESS_TEST_FIRMWARE to a linux-firmware amdgpu/ dir")
    return DEBIAN_FIRMWARE


@pytest.fixture(scope="session")
def kernel_tree():
    """The amdgpu headers of linux-source-6.1 (a tools.gentables.source.HeaderTree), or None when there is
    no source: $LINUX_SRC, /tmp/lsrc/linux-source-6.1, or Debian's tarball. The tarball's amd/ part is
    unpacked once for every test session (it takes the whole 138 MB .xz, half a minute on a busy machine),
    into the system temp directory keyed by the tarball's size and mtime: never the user's cache, and not
    once per test as the per-test cache root would make it."""
    from tools.gentables import source
    for cand in (os.environ.get("LINUX_SRC"), "/tmp/lsrc/linux-source-6.1", str(source.DEFAULT_TARBALL)):
        if not (cand and Path(cand).exists()):
            continue
        try:
            if Path(cand).is_dir():
                return source.open_tree(Path(cand))
            shared = Path(tempfile.gettempdir()) / f"driverless-tests-{os.getuid()}"
            shared.mkdir(exist_ok=True)
            with open(shared / ".lock", "w") as lock:   # parallel workers: one unpacks, the others wait
                fcntl.flock(lock, fcntl.LOCK_EX)
                saved = os.environ.get("DRIVERLESS_CACHE")
                os.environ["DRIVERLESS_CACHE"] = str(shared)   # open_tree unpacks under the cache root
                try:
                    return source.open_tree(Path(cand))
                finally:
                    if saved is None:
                        os.environ.pop("DRIVERLESS_CACHE")
                    else:
                        os.environ["DRIVERLESS_CACHE"] = saved
        except Exception:  # noqa: BLE001 - any unusable tree means: the next candidate, else None
            continue
    return None


KERNELS = Path(__file__).parent / "rdna3" / "kernels"  # the OpenCL C corpus (and its common.h)
CLANG_CL = ["clang-15", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100",
            "-nogpulib", os.environ.get("DRIVERLESS_CL_OPT", "-O2"), "-c", "-I", str(KERNELS)]
# DRIVERLESS_CL_OPT=-O0 (or -O1, -O3) runs every test that builds OpenCL C at that level instead


@pytest.fixture(scope="session")
def build_cl(tmp_path_factory):
    """build_cl(sources) -> {stem: path of the linked code object}: OpenCL C through clang-15 and
    ld.lld-15, in parallel, each source once per session; skips when LLVM 15 is not installed."""
    if not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("clang-15 and ld.lld-15 are needed to build OpenCL kernels (make test installs them)")
    out, built = tmp_path_factory.mktemp("cl"), {}

    def one(src: Path) -> Path:
        obj, so = out / f"{src.stem}.o", out / f"{src.stem}.so"
        for cmd in (CLANG_CL + [str(src), "-o", str(obj)], ["ld.lld-15", "-shared", str(obj), "-o", str(so)]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
        return so

    def build(sources) -> dict[str, Path]:
        todo = [Path(s) for s in sources if Path(s).stem not in built]
        with ThreadPoolExecutor(max_workers=8) as pool:
            built.update(zip((s.stem for s in todo), pool.map(one, todo)))
        return {Path(s).stem: built[Path(s).stem] for s in sources}

    return build


class DroppedRegister:
    """A register (amdrv.regs bound register) whose writes are lost: the driver step left out."""

    def __init__(self, reg):
        self._reg = reg

    def write(self, *args, **kw):
        return 0

    def update(self, *args, **kw):
        return 0

    def __getattr__(self, name):
        return getattr(self._reg, name)


class DroppingRegisters:
    """A register block (amdrv.regs.IPBlock) whose registers named in `names` lose their writes."""

    def __init__(self, regs, names):
        self._regs, self._names = regs, names

    def __getattr__(self, name):
        r = getattr(self._regs, name)
        return DroppedRegister(r) if name in self._names else r


@pytest.fixture
def dropped_register():
    """The DroppedRegister class, for tests that leave a driver's register write out (mutation-style)."""
    return DroppedRegister


@pytest.fixture
def dropping_registers():
    """The DroppingRegisters class: a register block whose named registers lose their writes."""
    return DroppingRegisters
