"""A simulated GPU is stepped by whichever host thread touches it (a register read in the stepped mode): the
holder's metrics thread (amdrv.monitor) polls the SMU while the main thread waits on a kernel. A dispatch
the CP runs in slices must complete whichever thread resumes it (the wave executor once kept numpy's error
state across a slice's yield, and a context variable set in one thread cannot be reset from another)."""
import threading

import numpy as np

from gpusim import cp


def test_a_sliced_dispatch_resumed_from_another_thread_completes(dev, kernel_corpus, monkeypatch):
    monkeypatch.setattr(cp, "DISPATCH_SLICE_STEPS", 5)       # many slices
    n = 4096
    x = np.arange(n, dtype=np.float32)
    a, out = dev.alloc(x.nbytes), dev.alloc(x.nbytes)
    dev.copyin(a, x.tobytes())
    add = dev.program(kernel_corpus["add_f32"], "add_f32")
    status = dev.gc.GRBM_STATUS
    model = dev.gpu.dev.pci.dev.blocks["CP"]
    add(out, a, a, n, global_size=(16,), local_size=(256,))   # queued; this thread runs the first slice
    for _ in range(1000):             # this thread steps until the dispatch is part-way through
        if any(q.dispatch is not None for q in model.queues.values()):
            break
        status.read()
    assert any(q.dispatch is not None for q in model.queues.values())

    def finish():                                            # another thread steps the GPU to the end
        while any(q.dispatch is not None for q in model.queues.values()):
            status.read()
    t = threading.Thread(target=finish)
    t.start()
    t.join(60)
    dev.synchronize()
    assert np.array_equal(np.frombuffer(dev.copyout(out), np.float32), 2 * x)
    assert not [e for e in dev.gpu.dev.pci.dev.errors if "hung" in e.message]
