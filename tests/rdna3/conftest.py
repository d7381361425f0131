"""The OpenCL C kernel corpus, compiled once per test session (tests/conftest.py's build_cl)."""
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="session")
def kernel_corpus(build_cl) -> dict[str, Path]:
    """{kernel file stem: path of its linked code object}; skips when LLVM 15 is not installed."""
    return build_cl(sorted(KERNELS.glob("*.cl")))
