"""amdrv.poll: the shared register wait keeps amdgpu's usec_timeout semantics (a minimum number of reads
whatever the wall clock says), and a timeout raises the calling block's own error naming what it awaited."""
import pytest

from amdrv.poll import MIN_REG_READS, poll, poll_reg


class _Reg:
    """A register whose reads come from a list (the last value repeats), counting the reads."""
    name = "TEST_STATUS"

    class defn:
        block = "TESTHUB"

    def __init__(self, *values):
        self.values, self.reads = list(values), 0

    def read(self):
        self.reads += 1
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


class BlockError(RuntimeError):
    pass


def test_poll_reg_returns_the_value_at_the_first_match():
    r = _Reg(0, 0, 0x12, 0)
    assert poll_reg(r, 0x2, 0x2, "bit 1", device="am:test", error=BlockError) == 0x12
    assert r.reads == 3


def test_poll_reg_reads_a_minimum_whatever_the_clock_then_raises_the_callers_error():
    r = _Reg(0)
    with pytest.raises(BlockError, match=r"am:test: TESTHUB TEST_STATUS: timed out after 0 ms waiting for "
                                         r"the widget \(read 0x00000000, want bits 0x1 = 0x1\).*reset it"):
        poll_reg(r, 1, 1, "the widget", device="am:test", error=BlockError, timeout=0)
    assert r.reads == MIN_REG_READS
    r = _Reg(*[0] * (MIN_REG_READS - 1), 1)     # the last of the minimum reads still counts
    assert poll_reg(r, 1, 1, "the widget", device="am:test", error=BlockError, timeout=0) == 1


def test_poll_predicate_form_reports_instead_of_raising():
    r = _Reg(3)
    assert poll(r.read, lambda v: v == 0, 0, 5) == (False, 3) and r.reads == 5
    assert poll(_Reg(3, 0).read, lambda v: v == 0, 0, 5) == (True, 0)


def test_poll_interval_sleeps_between_reads_only(monkeypatch):
    """interval_s (the PSP's fence in VRAM): a sleep after each read that did not settle, none after the last."""
    import amdrv.poll as P
    sleeps = []
    monkeypatch.setattr(P.time, "sleep", sleeps.append)
    assert poll(_Reg(1, 1, 0).read, lambda v: v == 0, 10, 1, interval_s=5e-5) == (True, 0)
    assert sleeps == [5e-5, 5e-5]
    sleeps.clear()
    assert poll(_Reg(1).read, lambda v: v == 0, 0, 3, interval_s=5e-5) == (False, 1) and len(sleeps) == 2
