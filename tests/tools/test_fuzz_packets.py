"""tools/fuzz/packets: a short run of every kind finds nothing unexpected, and the oracle flags what it must (a
raw exception, a recovery that does not recover, a changed canary)."""
import pytest

import hcq
from tools.fuzz import packets as fz
from tools.fuzz.common import case_rng


@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


@pytest.fixture(scope="module")
def target(debian_firmware):
    import os
    old = os.environ.get("DRIVERLESS_FIRMWARE_DIR")
    os.environ["DRIVERLESS_FIRMWARE_DIR"] = str(debian_firmware)
    t = fz.Target("am:sim", timeout=0.3)
    yield t
    t.dev.close()
    if old is None:
        del os.environ["DRIVERLESS_FIRMWARE_DIR"]
    else:
        os.environ["DRIVERLESS_FIRMWARE_DIR"] = old


def test_a_short_run_has_only_expected_outcomes(target):
    tally = fz.run(seed=0, budget=8, timeout=0.3, target=target)
    assert tally.findings == [], tally.table()
    assert tally.cases == 8
    kinds = {k for k, _ in tally.counts}
    assert len(kinds) >= 3, tally.table()


@pytest.mark.parametrize("kind", fz.KINDS)
def test_each_kind_runs_one_case_and_the_correct_job_after_it(target, kind):
    outcome, text, why = fz.run_case(target, kind, case_rng(5, 0, kind))
    assert why is None, f"{outcome}: {text}"
    assert target.correct_job(0x5EED) is None


def test_cases_are_reproducible_from_seed_and_index(target):
    a = fz.pm4_random(target, case_rng(3, 9, "packets"))
    assert a == fz.pm4_random(target, case_rng(3, 9, "packets"))
    assert fz.wave_code(case_rng(3, 9, "w")) == fz.wave_code(case_rng(3, 9, "w"))


def test_a_raw_exception_is_a_finding(target, monkeypatch):
    def broken(self, dwords):
        raise IndexError("list index out of range")
    monkeypatch.setattr(type(target.dev.compute), "submit", broken)
    outcome, text, why = fz.run_case(target, "pm4-random", case_rng(0, 0, "x"))
    assert outcome == "crash" and why == "raw exception" and "IndexError: list index out of range" in text


def test_a_recover_that_does_not_recover_is_a_finding(target, monkeypatch):
    monkeypatch.setattr(hcq.HCQDevice, "recover", lambda self: [])
    monkeypatch.setattr(type(target.dev), "recover", lambda self: [])
    monkeypatch.setattr(fz, "sdma_random", lambda t, r: [107])     # an unknown SDMA opcode: the ring stops
    reopened = []
    monkeypatch.setattr(fz.Target, "open", lambda self: reopened.append(1))
    outcome, text, why = fz.run_case(target, "sdma-random", case_rng(0, 1, "x"))
    assert "reopened" in outcome and why.startswith("the correct job failed after recover()"), (outcome, why)
    assert reopened == [1]
    monkeypatch.undo()
    target.dev.recover()
    assert target.correct_job(7) is None


def test_a_changed_canary_is_a_finding(target, monkeypatch):
    real = fz.Target.correct_job

    def and_scribble(self, value):
        self.dev.copyin(self.canary, b"\xAA" * 64)     # as if a stream had written a buffer it never named
        return real(self, value)
    monkeypatch.setattr(fz.Target, "correct_job", and_scribble)
    outcome, text, why = fz.run_case(target, "sdma-mutated", case_rng(0, 2, "x"))
    assert why == "the canary buffer changed"
    monkeypatch.undo()
    assert target.dev.copyout(target.canary) == target.canary_data    # put back for the next case


def test_a_queue_that_stops_unrecorded_is_a_finding(target, monkeypatch):
    # the simulator records every stop in dev.errors; one it does not record (here: the record is dropped)
    monkeypatch.setattr(target.sim, "error", lambda block, msg: None)
    rng = case_rng(0, 3, "x")
    stream = [0xC0006D00, 0]             # an unknown PM4 opcode: the queue hangs
    monkeypatch.setattr(fz, "pm4_random", lambda t, r: stream)
    outcome, text, why = fz.run_case(target, "pm4-random", rng)
    assert outcome.startswith("hang") and why == "the queue stopped without the simulator recording why", (outcome, why)


def test_a_1gib_sdma_copy_to_an_unmapped_address_is_a_prompt_fault_and_recover_ends_it(target, monkeypatch):
    # the case the fuzzer once capped at 16 MiB: COPY_LINEAR's 30-bit COUNT at its most, from the scratch
    # buffer to an address nothing maps. The simulated SDMA moves it 4 MiB per turn on the clock, so the
    # doorbell returns, the driver's wait sees the fault the first slice posts, and recover() ends the copy.
    import time
    from amdrv.sdma_packets import SDMABuilder
    gone = 0x7F00_0000_0000
    stream = SDMABuilder()
    stream.copy(gone, target.scratch.va, 4)
    stream.buf[1] = (1 << 30) - 1
    monkeypatch.setattr(fz, "sdma_random", lambda t, r: stream.buf)
    t = time.perf_counter()
    outcome, text, why = fz.run_case(target, "sdma-random", case_rng(0, 4, "x"))
    assert time.perf_counter() - t < 60 and why is None, (outcome, why, text)
    assert outcome == "fault" and "SDMA0" in text and "write" in text, (outcome, text)
    assert target.sim.blocks["SDMA"].queues[0].xfer is None
