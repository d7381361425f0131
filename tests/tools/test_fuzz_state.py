"""The state fuzzer in CI with a small budget: seeded cases kill the driver (SIGKILL, the simulated GPU
saved as it stood) and a fresh process must compute correct results; one case kills a cold boot from
power-on inside the PSP bootloader stage, the finding that bricked the GPU before the PCI reset fallback."""
import json
import sys

import pytest

from tools.fuzz import common, state


@pytest.fixture(autouse=True)
def env(debian_firmware, monkeypatch, tmp_path):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    for name in ("DRIVERLESS_CACHE", "DRIVERLESS_LOCK_DIR"):   # the fuzzer points these at its own dir
        monkeypatch.setenv(name, str(tmp_path / name))


def run(tmp_path, *argv) -> dict:
    out = tmp_path / "out.json"
    code = state.main(["--json", str(out), "--dir", str(tmp_path / "run"), "--timeout", "60", *argv])
    data = json.loads(out.read_text())
    assert code == 0 and data["unexpected"] == [], data["unexpected"]
    return data


def counts(data) -> dict:
    return {(c["group"], c["outcome"]): c["count"] for c in data["counts"]}


def test_seeded_cases_recover(tmp_path, capsys):
    # --first: a long run goes in chunks on one --dir (cases 1 and 2 here)
    data = run(tmp_path, "--seed", "5", "--first", "1", "--budget", "2")
    assert data["cases"] == 2 and all(o.startswith("recovered: ") for _, o in counts(data))
    assert {c["example"].split(":")[0] for c in data["counts"]} <= {"case 1", "case 2"}
    assert "state fuzzer on am:sim, seed 5 (SIGKILL): 2 cases, 0 unexpected" in capsys.readouterr().out


def test_the_fuzzer_imports_what_the_verifier_had_loaded(monkeypatch):
    # so later forks compile no source (this host may write no bytecode cache); a module that fails to
    # import here is left to the child
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    state._import_what_children_import([{"event": "booted"},
                                        {"event": "correct", "modules": ["colorsys", "no_such_module_x"]}])
    assert "colorsys" in sys.modules and "no_such_module_x" not in sys.modules


def test_killed_inside_the_bootloader_from_power_on(tmp_path):
    # access 165 of a cold boot from power-on: the KDB bootloader command is in flight (tools/fuzz/state.py
    # found such points unbootable before the PCI reset fallback)
    data = run(tmp_path, "--sweep", "power-on", "--case", "164")
    assert counts(data) == {("killed in open", "recovered: cold after pci reset (bus)"): 1}


def test_plans_come_from_the_seed_alone():
    a = [state.make_plan(common.case_rng(3, i, "state"), usb=False) for i in range(20)]
    assert a == [state.make_plan(common.case_rng(3, i, "state"), usb=False) for i in range(20)]
    assert len({p.describe() for p in a}) > 10
    assert {p.phases[p.kill_phase] for p in a} >= {"open", "close"}
