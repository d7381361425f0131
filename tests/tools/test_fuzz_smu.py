"""tools/fuzz/smu: every kind of id answered as the interface header defines, and the oracle's negatives."""
import pytest

from amdrv.autogen import smu_13_0_0 as S
from tools.fuzz import smu as fz

# one id of each kind: unnamed (below, at and far past the header's range), a getter, a setter with an
# effect (each effect costs a boot: the next message starts fresh), a clock message with range checks, a real message the simulator does not model, and the reset
IDS = [0, S.PPSMC_MSG_GetSmuVersion, S.PPSMC_MSG_SetPptLimit,
       S.PPSMC_MSG_GetDpmFreqByIndex, S.PPSMC_MSG_EnterBaco, S.PPSMC_MSG_Mode1Reset, S.PPSMC_Message_Count,
       0xFFFFFFFF]


@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


@pytest.fixture(scope="module")
def result(debian_firmware):
    import os
    os.environ["DRIVERLESS_FIRMWARE_DIR"] = str(debian_firmware)   # module scope: set before the fixture above
    try:
        return fz.run(seed=0, budget=None, only=IDS)
    finally:
        del os.environ["DRIVERLESS_FIRMWARE_DIR"]


def _responses(rows, msg):
    return {arg: resp for arg, resp, _, _ in next(r for r in rows if r.msg == msg).results}


def test_nothing_unexpected_and_every_pattern_sent(result):
    tally, rows = result
    assert tally.findings == [], tally.table()
    # the patterns, then one random argument per id (the default budget)
    assert tally.cases == len(IDS) * (len(fz.PATTERNS) + 1)
    assert all(len(r.results) == len(fz.PATTERNS) + 1 for r in rows)


def test_ids_the_header_does_not_name_are_unknown_commands(result):
    _, rows = result
    for msg in (0, S.PPSMC_Message_Count, 0xFFFFFFFF):
        assert set(_responses(rows, msg).values()) == {"UnknownCmd"}


def test_the_table_shows_values_echoes_effects_and_resets(result):
    _, rows = result
    table = fz.row_table(rows)
    assert "GetSmuVersion" in table and "0x4e4b00" in table                        # the firmware's version
    assert _responses(rows, S.PPSMC_MSG_SetPptLimit)[0] == "Failed"                  # 0 W is out of range
    assert _responses(rows, S.PPSMC_MSG_SetPptLimit)[1] == "OK"
    ppt = next(r for r in rows if r.msg == S.PPSMC_MSG_SetPptLimit)
    assert any(e == "ppt_w 355->1" for _, _, _, e in ppt.results)
    reset = next(r for r in rows if r.msg == S.PPSMC_MSG_Mode1Reset)
    assert all(v == "OK" and e.startswith("SMU stopped answering") for _, v, _, e in reset.results)
    assert _responses(rows, S.PPSMC_MSG_GetDpmFreqByIndex)[0xFF << 16] == "Failed"   # no PPCLK 0xFF


def test_a_real_gpu_gets_only_the_safe_list_without_dangerous(monkeypatch):
    # No GPU is opened: every message off the safe list is skipped before the target is touched.
    monkeypatch.setattr(fz.Target, "open", lambda self: pytest.fail("opened a GPU for a skipped message"))
    tally, rows = fz.run(0, None, device="am:0000:03:00.0", only=[S.PPSMC_MSG_Mode1Reset, 0xFFFFFFFF])
    assert tally.counts == {("not sent", "skipped: off the safe list"): 2 * (len(fz.PATTERNS) + 1)}
    assert fz.danger(S.PPSMC_MSG_Mode1Reset) == "resets the whole GPU"
    assert fz.danger(S.PPSMC_MSG_GetPptLimit) is None and fz.danger(0x4D).startswith("not in the interface")


def test_an_unknown_id_answered_ok_is_a_finding(monkeypatch):
    # The oracle's negative: a simulated SMU that acknowledges ids its header does not define is caught.
    from gpusim import smu as sim_smu
    real = sim_smu.SMU._handle
    monkeypatch.setattr(sim_smu.SMU, "_handle",
                        lambda self, msg, p: (S.PPSMC_Result_OK, None) if msg >= S.PPSMC_Message_Count
                        else real(self, msg, p))
    tally, _ = fz.run(0, None, only=[S.PPSMC_Message_Count])
    assert len(tally.findings) == len(fz.PATTERNS) + 1
    assert "not UnknownCmd" in tally.findings[0].detail


def test_a_simulator_crash_is_a_finding(monkeypatch):
    from gpusim import smu as sim_smu
    monkeypatch.setattr(sim_smu.SMU, "_msg_GetPptLimit", lambda self, p: 1 // 0)
    tally, _ = fz.run(0, 1, only=[S.PPSMC_MSG_GetSmuVersion])
    assert tally.findings and tally.findings[0].outcome == "raw ZeroDivisionError"
