"""tools/fuzz/psp: a short run answers per psp_gfx_if.h and always recovers; the oracle's negatives."""
import pytest

from tools.fuzz import psp as fz


@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def test_a_short_run_has_only_expected_outcomes():
    tally = fz.run(seed=0, budget=60)
    assert tally.findings == [], tally.table()
    assert {g for g, _ in tally.counts} == set(fz.FAMILIES)
    outcomes = " | ".join(o for _, o in tally.counts)
    for expected in ("PSP_ERR_UNKNOWN_COMMAND", "TEE_ERROR_NOT_SUPPORTED", "driver PSPError", "ring re-created",
                     "no answer"):
        assert expected in outcomes, outcomes


def test_an_undefined_status_is_a_finding(monkeypatch):
    from gpusim import psp as sim_psp
    real = sim_psp.PSP._execute
    monkeypatch.setattr(sim_psp.PSP, "_execute", lambda self, cmd_id, cmd: (0x1234, 0, 0, 0) if cmd_id not in
                        fz.CMD_IDS else real(self, cmd_id, cmd))
    tally = fz.run(seed=0, budget=40)
    assert any(f.detail == "status 0x1234 is no psp_gfx_if.h or TEE status code" for f in tally.findings), \
        tally.table()


def test_an_undefined_command_acknowledged_is_a_finding(monkeypatch):
    from gpusim import psp as sim_psp
    real = sim_psp.PSP._execute
    monkeypatch.setattr(sim_psp.PSP, "_execute", lambda self, cmd_id, cmd: (0, 0, 0, 0) if cmd_id not in
                        fz.CMD_IDS else real(self, cmd_id, cmd))
    tally = fz.run(seed=0, budget=40)
    assert any("not PSP_ERR_UNKNOWN_COMMAND" in f.detail for f in tally.findings), tally.table()


def test_a_psp_nothing_recovers_is_reported_unrecoverable():
    # The recovery ladder's last rung: the next command fails at once, on a re-created ring and after a
    # reboot (here a PSP that times out everything).
    from types import SimpleNamespace

    from amdrv.ip.psp import PSPTimeout

    class DeadPSP:
        def submit(self, *a, **kw):
            raise PSPTimeout("PSP timeout")

        def ring_create(self, destroy_first=False):
            raise PSPTimeout("PSP timeout")
    gpu = SimpleNamespace(psp=DeadPSP(), dev=None)
    after, _ = fz.recover(fz.Ring(gpu, 0.1), lambda reset=False: gpu)
    assert after == "unrecoverable"


def test_the_command_prints_a_table(capsys):
    assert fz.main(["--budget", "10", "--seed", "1"]) == 0
    assert "PSP ring: 10 cases, 0 unexpected" in capsys.readouterr().out
