"""Register polling shared by the IP blocks: amdgpu's usec_timeout loops, in one place.

    ok, v = poll(gc.CP_HQD_ACTIVE.read, lambda v: not v & 1, USEC_TIMEOUT, 1000)   # the caller words the error
    poll_reg(ack, 1 << vmid, 1 << vmid, "the TLB invalidation ack of VMID 3", device=dev.name, error=GMCError)

Both give up only once the timeout has passed AND a minimum number of reads was made: a simulator steps
its clock per read and a slow (or loaded) host may spend the whole timeout before the first read, so a
wall clock alone would report a hang that is not one. A timeout raises the calling block's own error
class (a TLB flush that never acknowledges is a GMC failure, not an NBIO one).
"""
from __future__ import annotations

import time

USEC_TIMEOUT = 0.1           # amdgpu's adev->usec_timeout (AMDGPU_MAX_USEC_TIMEOUT, 100000 us)
MIN_REG_READS = 17           # poll_reg: reads made before the wall clock may end the wait


def poll(read, done, timeout_s: float, min_reads: int = 100_000, interval_s: float = 0.0):
    """Reads until done(value): gives up once both timeout_s of wall time and min_reads reads have
    passed. Returns (ok, last value); the caller words its own error. interval_s: a sleep between reads
    (for what is not a register: a fence in memory the device writes)."""
    t0, n = time.perf_counter(), 0
    while True:
        v = read()
        n += 1
        if done(v):
            return True, v
        if n >= min_reads and time.perf_counter() - t0 >= timeout_s:
            return False, v
        if interval_s:
            time.sleep(interval_s)


def poll_reg(reg, mask: int, want: int, what: str, *, device: str, error: type[Exception],
             timeout: float = USEC_TIMEOUT, min_reads: int = MIN_REG_READS) -> int:
    """Polls reg until (value & mask) == want and returns the value; on timeout raises error naming the
    device, the register's block and name, the value read, what was awaited and what to do."""
    ok, v = poll(reg.read, lambda v: v & mask == want, timeout, min_reads)
    if ok:
        return v
    raise error(f"{device}: {reg.defn.block} {reg.name}: timed out after {timeout * 1e3:.0f} ms waiting for "
                f"{what} (read {v:#010x}, want bits {mask:#x} = {want:#x}); the GPU may be hung or powered off: "
                "reset it (a cold boot does a mode1 reset)")
