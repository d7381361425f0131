"""Shared fixtures: an isolated firmware environment for every test, and the real firmware files."""
import os
from pathlib import Path

import pytest

DEBIAN_FIRMWARE = Path(os.environ.get("DRIVERLESS_TEST_FIRMWARE", "/lib/firmware/amdgpu"))


@pytest.fixture(autouse=True)
def _isolated_firmware_env(tmp_path_factory, monkeypatch):
    # Tests never touch the user's cache or the network unless they set these up themselves.
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("DRIVERLESS_OFFLINE", "1")
    monkeypatch.delenv("DRIVERLESS_FIRMWARE_DIR", raising=False)
    monkeypatch.delenv("DRIVERLESS_FIRMWARE_URL", raising=False)


@pytest.fixture(scope="session")
def debian_firmware() -> Path:
    """Debian's firmware-amd-graphics (linux-firmware 20230210); `make test` installs it."""
    if not (DEBIAN_FIRMWARE / "gc_11_0_0_mec.bin").is_file():
        pytest.fail(f"real firmware not found in {DEBIAN_FIRMWARE}: run `make test` (installs Debian's "
                    "firmware-amd-graphics) or set DRIVERLESS_TEST_FIRMWARE to a linux-firmware amdgpu/ dir")
    return DEBIAN_FIRMWARE
