"""pcie.lock.holder_pid: who holds a device's lock, without taking it (for monitors such as the SMI tool)."""
import os
import subprocess
import sys
from pathlib import Path

from pcie.lock import DeviceLock, holder_pid

ROOT = Path(__file__).resolve().parents[2]


def test_holder_pid_names_the_holder_and_never_takes_the_lock(tmp_path):
    assert holder_pid("0000:03:00.0", tmp_path) is None           # no lock file yet
    lock = DeviceLock("0000:03:00.0", tmp_path)
    assert holder_pid("0000:03:00.0", tmp_path) == os.getpid()
    assert holder_pid("0000:03:00.0", tmp_path) == os.getpid()    # asking did not release it
    lock.release()
    assert holder_pid("0000:03:00.0", tmp_path) is None
    other = subprocess.Popen([sys.executable, "-c", "import sys; from pcie.lock import DeviceLock; "
                              f"l = DeviceLock('x', path={str(tmp_path / 'gpu.state.lock')!r}); print(1, flush=True); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert other.stdout.readline().strip() == "1"
        assert holder_pid("x", path=tmp_path / "gpu.state.lock") == other.pid
    finally:
        other.stdin.close()
        other.wait(timeout=30)
        other.stdout.close()
    assert holder_pid("x", path=tmp_path / "gpu.state.lock") is None
