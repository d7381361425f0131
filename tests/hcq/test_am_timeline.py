"""The device timeline's waits on am:sim wait for what was submitted, not for every value handed out
(HCQDevice.timeline_submitted): a value taken with next_timeline() and never submitted blocks nothing (before,
synchronize, copyin/copyout, the launch arena's wrap and a graph's build waited for it until HCQTimeout); a
value taken and submitted later is waited for from its submit on; a queue submitted with a value older than
work submitted before it still has its launches' kernargs kept until it ran (the device follows its signal with
one of a fresh value: the timeline is written in increasing order, so the largest value submitted is the last)."""
import threading

import numpy as np
import pytest

from amdrv.hcq.queues import AMComputeQueue

N = 64


def _setup(dev, kernel_corpus):
    saxpy = dev.program(kernel_corpus["saxpy"], "saxpy")
    x, y = dev.alloc(4 * N), dev.alloc(4 * N)
    dev.copyin(x, np.ones(N, np.float32))
    dev.copyin(y, np.zeros(N, np.float32))
    return saxpy, x, y


def _read(dev, buf):
    return np.frombuffer(dev.copyout(buf), np.float32)


def _after_a_value_never_submitted(dev, kernel_corpus, monkeypatch, wait: str) -> None:
    """A launch is submitted, then a value is taken and never submitted; `wait` (a call that waits for
    everything submitted) returns once the launch is done instead of waiting for that value until HCQTimeout
    (the default timeout shortened here, so the old rule fails in 2 s, not 10)."""
    saxpy, x, y = _setup(dev, kernel_corpus)
    monkeypatch.setattr(dev, "default_timeout", 2.0)
    saxpy(y, x, 3.0, N, global_size=(1,), local_size=(N,))
    launched = dev.timeline_value
    assert dev.timeline_submitted == launched          # what synchronize waits for from now on
    dev.next_timeline()                                # taken for a queue never submitted
    if wait == "synchronize":
        dev.synchronize()
        assert dev.timeline.value >= launched          # the launch was waited for
        assert np.all(_read(dev, y) == 3.0)
    elif wait == "copyin":
        dev.copyin(y, np.full(N, 7.0, np.float32))     # waits for the launch first (it may still read y)
        assert np.all(_read(dev, y) == 7.0)
    elif wait == "copyout":
        assert np.all(_read(dev, y) == 3.0)
        if not dev.coherent:                           # bounced through the read-back page: a fence of its own
            assert dev.timeline_submitted == dev.timeline_value > launched + 1
    elif wait == "the launch arena's wrap":
        monkeypatch.setattr(dev.arena, "size", 4 * saxpy.handle.slot)
        monkeypatch.setattr(dev.arena, "at", dev.arena.size)   # full: the next launch wraps, the value taken newest
        for _ in range(6):                             # and again a lap later
            saxpy(y, x, 1.0, N, global_size=(1,), local_size=(N,))
        assert np.all(_read(dev, y) == 9.0)
    else:                                              # a graph's build: its slots, the arena's end once free
        g = dev.graph()
        g.exec(saxpy, y, x, g.var("alpha"), N, global_size=(1,), local_size=(N,))
        g(alpha=2.0, wait=True)
        assert np.all(_read(dev, y) == 5.0)


@pytest.mark.parametrize("wait", ["synchronize", "copyin", "copyout", "the launch arena's wrap", "a graph's build"])
def test_a_value_taken_and_never_submitted_blocks_no_wait(dev, kernel_corpus, monkeypatch, wait):
    _after_a_value_never_submitted(dev, kernel_corpus, monkeypatch, wait)


def _gated_queue(dev, saxpy, y, x, alpha, value):
    """A launch of y += alpha * x queued behind a signal the host sets later, then a signal of `value` on the
    device's timeline; its launch slot is written now (at exec), so a wrap before it ran would overwrite it."""
    gate, q = dev.new_signal(0), dev.compute_queue()
    q.wait(gate, 1)
    q.exec(saxpy, [y, x, alpha, N], (1,), (N,))
    q.signal(dev.timeline, value)
    return gate, q


@pytest.mark.parametrize("fence", ["a fresh value after it", "none (the older value only)"])
def test_a_queue_submitted_with_an_older_value_keeps_its_kernargs(dev, kernel_corpus, monkeypatch, fence):
    """A queue signals v1, taken before launches submitted ahead of it took v2..v4: its signal writes the
    timeline back to v1 after v4. The device follows it with a signal of a fresh value, so the next wrap of the
    launch arena (onto this queue's slot, while it waits for its gate) waits for the queue. Without that fence
    the wrap waits for v4 only, which is already there, and the queue runs with the wrapping launch's kernargs
    (y stays 0; the wrapping launch's z gets both)."""
    saxpy, x, y = _setup(dev, kernel_corpus)
    z = dev.alloc(4 * N)
    dev.copyin(z, np.zeros(N, np.float32))
    if fence != "a fresh value after it":
        monkeypatch.setattr(AMComputeQueue, "_timeline_end", lambda q, value: (value, False))
    monkeypatch.setattr(dev.arena, "size", 4 * saxpy.handle.slot)
    monkeypatch.setattr(dev.arena, "at", dev.arena.size)       # the next slot starts a lap: the queue's, at 0
    v1 = dev.next_timeline()
    gate, q = _gated_queue(dev, saxpy, y, x, 1.0, v1)
    for _ in range(3):                                         # slots 1 to 3 of the lap, submitted before q
        saxpy(z, x, 0.0, N, global_size=(1,), local_size=(N,))
    q.submit()
    release = threading.Timer(0.3, lambda: setattr(gate, "value", 1))
    release.start()
    saxpy(z, x, 5.0, N, global_size=(1,), local_size=(N,))   # wraps onto q's slot
    release.join()
    dev.synchronize()
    ok = np.all(_read(dev, y) == 1.0) and np.all(_read(dev, z) == 5.0)
    assert ok == (fence == "a fresh value after it")


@pytest.mark.parametrize("submit", ["raises the mark", "leaves the mark"])
def test_a_value_taken_then_submitted_later_is_waited_for(dev, kernel_corpus, monkeypatch, submit):
    """A value taken, waited past while its queue was not submitted, is waited for once it is: synchronize after
    the submit returns only when the queue (released by the host a little later) has run."""
    saxpy, x, y = _setup(dev, kernel_corpus)
    if submit != "raises the mark":
        monkeypatch.setattr(AMComputeQueue, "_timeline_end", lambda q, value: (0, False))
    v1 = dev.next_timeline()
    gate, q = _gated_queue(dev, saxpy, y, x, 2.0, v1)
    dev.synchronize()                                          # nothing submitted to wait for
    q.submit()
    release = threading.Timer(0.2, lambda: setattr(gate, "value", 1))
    release.start()
    dev.synchronize()
    ran = dev.timeline.value >= v1
    release.join()
    assert ran == (submit == "raises the mark")
    dev.timeline.wait(v1)
    assert np.all(_read(dev, y) == 2.0)


def test_a_queue_resubmitted_without_a_new_value_is_waited_for(dev, kernel_corpus):
    """The same built queue submitted twice with the same timeline value: the second run would write a value the
    timeline already holds, so a wait for it could end before that run. The device follows the second submit with
    a fresh value, which synchronize waits for."""
    saxpy, x, y = _setup(dev, kernel_corpus)
    gate, q = _gated_queue(dev, saxpy, y, x, 1.0, dev.next_timeline())
    q.submit()
    gate.value = 1
    dev.synchronize()
    first = dev.timeline_submitted
    gate.value = 0                                             # the second run waits for the gate again
    q.update_wait(0, value=2)
    q.submit()
    assert dev.timeline_submitted > first
    release = threading.Timer(0.2, lambda: setattr(gate, "value", 2))
    release.start()
    dev.synchronize()
    after = _read(dev, y)                                      # the second run's result, if it ran
    release.join()
    assert np.all(after == 2.0)


def test_a_copy_queue_with_an_older_value_is_fenced_too(dev):
    """The SDMA queue follows the same rule: a copy queue signalling a value older than one submitted after it
    was taken gets a fresh value after its commands, and synchronize covers the copy."""
    a, b, c = dev.alloc(4096), dev.alloc(4096), dev.alloc(4096)
    dev.copyin(a, bytes(range(256)) * 16)
    old = dev.next_timeline()
    q = dev.copy_queue()
    q.copy(b, a, 4096)
    q.signal(dev.timeline, old)
    dev.copy(c, a, 4)                                          # a later value, submitted first
    q.submit()
    assert dev.timeline_submitted > old + 1
    dev.synchronize()
    assert dev.timeline.value == dev.timeline_submitted
    assert dev.copyout(b) == bytes(range(256)) * 16


@pytest.mark.parametrize("fence", ["the launch fence after it", "none"])
def test_a_queue_that_signals_no_timeline_value_keeps_its_kernargs(dev, kernel_corpus, monkeypatch, fence):
    """A compute queue with a launch that signals only a signal of its own (gated by the host here): the device
    follows it with a signal of its launch fence, which the launch arena's wrap waits for, so a launch that wraps
    onto its slot waits for it. Without that fence the wrap waited for the timeline only (the launches before
    the queue) and the queue ran with the wrapping launch's kernargs (y stays 0); synchronize still waits for
    the timeline only, so a copyin before the host releases the gate does not wait for the queue."""
    saxpy, x, y = _setup(dev, kernel_corpus)
    z = dev.alloc(4 * N)
    dev.copyin(z, np.zeros(N, np.float32))
    if fence == "none":
        monkeypatch.setattr(AMComputeQueue, "_launch_fence", lambda q, dwords: (dwords, 0))
    monkeypatch.setattr(dev.arena, "size", 4 * saxpy.handle.slot)
    monkeypatch.setattr(dev.arena, "at", dev.arena.size)       # the next slot starts a lap: the queue's, at 0
    gate, own, q = dev.new_signal(0), dev.new_signal(0), dev.compute_queue()
    q.wait(gate, 1)
    q.exec(saxpy, [y, x, 1.0, N], (1,), (N,))
    q.signal(own, 1)
    for _ in range(3):                                         # slots 1 to 3 of the lap, submitted before q
        saxpy(z, x, 0.0, N, global_size=(1,), local_size=(N,))
    q.submit()
    dev.copyin(x.view(0, 4), np.ones(1, np.float32))           # not held up by the gated queue
    release = threading.Timer(0.3, lambda: setattr(gate, "value", 1))
    release.start()
    saxpy(z, x, 5.0, N, global_size=(1,), local_size=(N,))   # wraps onto q's slot
    release.join()
    own.wait(1)
    dev.synchronize()
    ok = np.all(_read(dev, y) == 1.0) and np.all(_read(dev, z) == 5.0)
    assert ok == (fence == "the launch fence after it")
