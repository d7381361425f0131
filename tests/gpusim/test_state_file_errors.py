"""A simulated GPU's state file that is cut short, a state= path that could not be saved, and the
temporaries a process killed while saving leaves (issue 13 items 8, 9): clear errors naming the file,
at open, and no leftovers."""
import os
import subprocess
import sys

import pytest

from gpusim import persist, provider
from pcie import PCIError


def test_a_truncated_state_file_is_named_with_what_to_do(sim_bus, tmp_path):
    state = tmp_path / "gpu.state"
    provider.open_function("navi31", state=state, bus=sim_bus).close()
    data = state.read_bytes()
    for cut in (len(persist.MAGIC) + 10, len(data) // 2, len(data) - 1):
        state.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=rf"{state}: the simulated GPU saved there cannot be read .*cut short "
                                             "or damaged: delete it to power on a fresh device"):
            provider.open_function("navi31", state=state, bus=sim_bus)
    state.unlink()
    provider.open_function("navi31", state=state, bus=sim_bus).close()    # the advice works


@pytest.mark.parametrize("where, msg", [("missing/dir/gpu.state", "does not exist"),
                                        (".", "is a directory")])
def test_a_state_path_that_cannot_be_saved_is_refused_at_open(sim_bus, tmp_path, where, msg):
    with pytest.raises(PCIError, match=msg):
        provider.open_function("navi31", state=tmp_path / where, bus=sim_bus)


def test_temporaries_of_a_process_killed_while_saving_are_removed(sim_bus, tmp_path):
    state = tmp_path / "gpu.state"
    provider.open_function("navi31", state=state, bus=sim_bus).close()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"gpu.state.tmp{int(dead.stdout)}"       # a pid that has exited
    alive = tmp_path / f"gpu.state.tmp{os.getppid()}"            # a running process: maybe saving now
    for f in (stale, alive):
        f.write_bytes(b"half a pickle")
    fn = provider.open_function("navi31", state=state, bus=sim_bus)   # the open (load) removes the stale one
    assert not stale.exists() and alive.exists()
    stale.write_bytes(b"half a pickle")
    fn.close()                                                    # and so does the save
    assert not stale.exists() and alive.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.state", "gpu.state.lock", alive.name]
