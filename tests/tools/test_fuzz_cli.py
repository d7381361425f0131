"""The fuzzers' command lines: a budget that runs nothing is refused, and a GPU that cannot boot for want of
firmware is said once (exit 2), not as a traceback (psp, packets) or as one 'unexpected outcome' per message,
each a fresh boot attempt (smu: 655 of them, 19 s, reported as findings)."""
import pytest

from tools.fuzz import packets, psp, smu, state


@pytest.mark.parametrize("main", [psp.main, smu.main, packets.main, state.main])
@pytest.mark.parametrize("budget", ["0", "-1", "lots"])
def test_a_budget_that_runs_nothing_is_refused(main, budget, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--budget", budget])
    assert e.value.code == 2 and "--budget" in capsys.readouterr().err


@pytest.mark.parametrize("main", [psp.main, smu.main, packets.main])
def test_missing_firmware_is_said_once(main, capsys):
    # tests/conftest.py: an empty cache, offline, no DRIVERLESS_FIRMWARE_DIR
    assert main(["--budget", "3"]) == 2
    out = capsys.readouterr()
    assert out.err.count("pinned file(s) not found and offline") == 1 and "Traceback" not in out.err + out.out
    assert "fuzz." in out.err.split(":")[0] and "DRIVERLESS_FIRMWARE_DIR" in out.err
