"""nvdrv: a timestamp is a semaphore release, which writes its 64-bit payload before the time; the payload must
be the value the signal has by then, or a timestamp after a signal rolls it back (it released the value the
signal had when the queue was built: 0, and a wait for the signalled value never returned)."""


def run(dev, q):
    q.signal(dev.timeline, dev.next_timeline())
    q.submit()
    dev.synchronize()


def test_a_timestamp_after_a_signal_keeps_the_signalled_value(nvdev):
    s = nvdev.new_signal()
    q = nvdev.compute_queue()
    i = q.signal(s, 5)
    q.timestamp(s)
    run(nvdev, q)
    assert s.value == 5 and s.timestamp_ticks > 0
    q.update_signal(i, value=9)        # a resubmission with another value: the timestamp follows it
    q.update_signal(len(q.cmds) - 1, value=nvdev.next_timeline())
    q.submit()
    nvdev.synchronize()
    assert s.value == 9


def test_a_timestamp_on_a_signal_this_queue_does_not_signal_keeps_its_value(nvdev):
    s = nvdev.new_signal(7)
    q = nvdev.copy_queue()
    q.timestamp(s)
    run(nvdev, q)
    assert s.value == 7 and s.timestamp_ticks > 0
