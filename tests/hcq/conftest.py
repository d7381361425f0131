"""Fixtures: kernels of tests/rdna3/kernels compiled once per session (tests/conftest.py's build_cl),
and a freshly powered simulated GPU opened through hcq."""
from pathlib import Path

import pytest

import hcq

KERNELS = Path(__file__).resolve().parents[1] / "rdna3" / "kernels"
USED = ("add_f32", "saxpy", "matmul_tiled", "reduce_sum", "atomics", "local_reverse", "grid3d", "private_array")


@pytest.fixture(scope="session")
def kernel_corpus(build_cl) -> dict[str, bytes]:
    """{kernel file stem: its linked code object}; skips when LLVM 15 is not installed."""
    sources = [KERNELS / f"{s}.cl" for s in USED] + [Path(__file__).parent / "kernels" / "faults.cl"]
    return {stem: path.read_bytes() for stem, path in build_cl(sources).items()}


@pytest.fixture
def dev(sim_bus, debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    d = hcq.open("am:sim", bus=sim_bus)       # slot 0 of the test's own bus (tests/conftest.py)
    yield d
    d.close()
