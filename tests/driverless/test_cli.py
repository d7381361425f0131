"""The `driverless` console command: info, firmware, demo dispatch to the modules' own entry points; --json
output parses and says what the text says."""
import json
import re
from pathlib import Path

from amdrv.firmware import PINS
from driverless.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_declared_as_console_script():
    text = (ROOT / "pyproject.toml").read_text()   # (tomllib is 3.11+; the project supports 3.10)
    assert re.search(r'^\[project.scripts\]\ndriverless = "driverless.cli:main"$', text, re.M)
    assert '"driverless*"' in text and "cffi" not in text   # cffi was declared and never used


def test_help_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"driverless {c}" in out for c in ("info", "firmware", "demo"))
    assert main([]) == 2


def test_firmware_status_json(debian_firmware, capsys):
    assert main(["firmware", "status", "--json"]) == 1          # nothing cached: exit 1, as the text form
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] == 0 and data["total"] == len(PINS)
    assert {f["state"] for f in data["files"]} == {"missing"}
    assert main(["firmware", "seed", str(debian_firmware)]) == 0
    capsys.readouterr()
    assert main(["firmware", "status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] == data["total"] == len(PINS) and data["tag"] == "20230210"
    mec = next(f for f in data["files"] if f["name"] == "gc_11_0_0_mec.bin")
    assert mec["state"] == "verified" and mec["chips"] == ["navi31"] and mec["where"].startswith(data["cache"])


def test_info_report_json(debian_firmware, monkeypatch, capsys):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in data["chips"]] == ["navi31", "navi33"]
    assert data["chips"][0]["gfx_target"] == "gfx1100"
    fw = data["firmware"]["chips"]["navi31"]
    assert fw["ready"] and len(fw["files"]) == 11 and all("DRIVERLESS_FIRMWARE_DIR" in w for w in fw["files"].values())


def test_info_report_json_offline_without_firmware(capsys):
    assert main(["info", "--json"]) == 0
    fw = json.loads(capsys.readouterr().out)["firmware"]["chips"]["navi33"]
    assert not fw["ready"] and "not found and offline" in fw["error"]


def test_info_device_json_boots_and_leaves_it_warm(debian_firmware, monkeypatch, capsys):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    assert main(["info", "--device", "am:sim:navi33", "--cold", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chip"] == "navi33" and data["boot"]["kind"] == "cold"
    assert data["mec_ready"] and data["sdma_ready"] and "GC" in data["ip_blocks"]
    assert [s["name"] for s in data["boot"]["steps"]][-2:] == ["gfx", "sdma"] and data["fini"]
    assert sum(s["mmio_reads"] for s in data["boot"]["steps"]) <= data["boot"]["mmio_reads"]


def test_info_device_json_error(capsys):
    assert main(["info", "--device", "am:nonsense!", "--json"]) == 2
    assert "error" in json.loads(capsys.readouterr().out)


def test_demo_dispatches(monkeypatch):
    import compiler_bridge.demo as demo
    seen = []
    monkeypatch.setattr(demo, "main", lambda argv: seen.append(argv) or 0)
    assert main(["demo", "--device", "c"]) == 0 and seen == [["--device", "c"]]
