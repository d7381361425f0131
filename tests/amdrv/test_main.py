"""`python -m amdrv` (the README's main job until the boot exists) reports GPUs, firmware and tables."""
from amdrv.__main__ import main
from amdrv.firmware.__main__ import main as fw_main


def test_report_with_verified_firmware(debian_firmware, capsys):
    assert fw_main(["seed", str(debian_firmware)]) == 0
    assert main() == 0
    out = capsys.readouterr().out
    assert "navi31 (gfx1100)" in out and "navi33 (gfx1102)" in out
    # seeded from /lib/firmware: the report says they came from the cache, not that they were fetched
    assert "navi31: 11 files verified (size, sha256): 11 from the cache" in out
    assert "navi33: 11 files verified (size, sha256): 11 from the cache" in out and "fetched" not in out
    assert "MMHUB=mmhub_3_0_2" in out  # Navi33 binds its own MMHUB variant
    assert "5489 MMIO registers" in out  # gc_11_0_0_offset.h has 5489 regX/regX_BASE_IDX pairs


def test_report_offline_without_firmware_says_how_to_get_it(capsys):
    assert main() == 0
    out = capsys.readouterr().out
    assert "navi31: not ready" in out and "DRIVERLESS_FIRMWARE_DIR" in out


def test_report_names_the_override_directory(debian_firmware, monkeypatch, capsys):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    assert main() == 0
    out = capsys.readouterr().out
    assert f"navi31: 11 files verified (size, sha256): 11 from {debian_firmware} (DRIVERLESS_FIRMWARE_DIR)" in out
