"""The per-device lock across real processes."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pcie import PCIError
from pcie.lock import DeviceLock, default_lock_dir

ADDR = "0000:03:00.0"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def holder(lock_dir, then="sys.stdin.read()"):
    """A separate Python process that takes the lock, says "held", and waits on stdin."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from pcie.lock import DeviceLock
        lock = DeviceLock({ADDR!r}, Path({str(lock_dir)!r}))
        print("held", flush=True)
        {then}
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, cwd=REPO)
    assert p.stdout.readline() == "held\n"
    return p


def test_second_process_is_told_the_holders_pid(lock_dir):
    p = holder(lock_dir)
    try:
        with pytest.raises(PCIError) as e:
            DeviceLock(ADDR, lock_dir)
        assert f"device {ADDR} busy, held by pid {p.pid} " in str(e.value)
        assert str(lock_dir / f"driverless-{ADDR}.lock") in str(e.value)
    finally:
        p.communicate(timeout=5)
    # A clean exit released it.
    with DeviceLock(ADDR, lock_dir) as lock:
        assert lock.held
        assert (lock_dir / f"driverless-{ADDR}.lock").read_text() == f"{os.getpid()}\n"
    assert not lock.held


def test_killed_holder_releases_and_its_stale_pid_is_no_obstacle(lock_dir):
    p = holder(lock_dir)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=5)
    path = lock_dir / f"driverless-{ADDR}.lock"
    assert path.read_text() == f"{p.pid}\n"  # the dead process's pid is still written there
    lock = DeviceLock(ADDR, lock_dir)
    assert path.read_text() == f"{os.getpid()}\n"
    lock.release()


def test_stale_pid_of_a_live_unrelated_process(lock_dir):
    # A pid in the file proves nothing: only the flock counts.
    (lock_dir / f"driverless-{ADDR}.lock").write_text(f"{os.getppid()}\n")
    DeviceLock(ADDR, lock_dir).release()


def test_child_sees_the_parents_lock(lock_dir):
    lock = DeviceLock(ADDR, lock_dir)
    code = ("import sys; from pathlib import Path; from pcie.lock import DeviceLock\n"
            f"try: DeviceLock({ADDR!r}, Path({str(lock_dir)!r}))\n"
            "except Exception as e: print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=10)
    assert out.stdout.startswith(f"device {ADDR} busy, held by pid {os.getpid()} (lock file"), out
    lock.release()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=10)
    assert out.stdout == "" and out.returncode == 0, out


def test_same_process_twice(lock_dir):
    with DeviceLock(ADDR, lock_dir):
        with pytest.raises(PCIError, match=f"held by pid {os.getpid()} \\(this process"):
            DeviceLock(ADDR, lock_dir)
        with DeviceLock("0000:04:00.0", lock_dir):  # another device is independent
            pass


def test_lock_file_is_usable_by_other_users(lock_dir):
    old = os.umask(0o077)
    try:
        DeviceLock(ADDR, lock_dir).release()
    finally:
        os.umask(old)
    assert (lock_dir / f"driverless-{ADDR}.lock").stat().st_mode & 0o777 == 0o666


def test_unwritable_lock_dir(tmp_path):
    with pytest.raises(PCIError, match=f"device {ADDR}: cannot open the lock file"):
        DeviceLock(ADDR, tmp_path / "missing")


def test_default_dir_is_writable(tmp_path, monkeypatch):
    assert default_lock_dir() == Path(os.environ["DRIVERLESS_LOCK_DIR"])   # tests/conftest.py isolates locks
    monkeypatch.setenv("DRIVERLESS_LOCK_DIR", str(tmp_path))
    assert default_lock_dir() == tmp_path
    monkeypatch.delenv("DRIVERLESS_LOCK_DIR")
    d = default_lock_dir()
    assert os.access(d, os.W_OK)


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root (to run a second process as nobody) and /usr/bin/python3")
def test_another_user_takes_a_lock_root_left_behind(tmp_path):
    # A sticky world-writable directory like /run/lock; root's lock file must serve the next user.
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="driverless-locktest-", dir="/tmp"))
    try:
        shared.chmod(0o1777)
        with DeviceLock(ADDR, shared):
            pass
        code = ("import os; from pathlib import Path; from pcie.lock import DeviceLock\n"
                f"l = DeviceLock({ADDR!r}, Path({str(shared)!r})); print(open(l.path).read().strip())\n")
        out = subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, text=True, timeout=20, cwd="/",
                             env={"PYTHONPATH": REPO, "PATH": "/usr/bin:/bin"}, user=65534, group=65534)
        if "Permission denied" in out.stderr and "pcie" not in out.stderr:
            pytest.skip(f"nobody cannot run python from {REPO}: {out.stderr.strip()[-200:]}")
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) != os.getpid()
    finally:
        shutil.rmtree(shared)
