"""The clock's fast-forward (gpusim.device.SimGPU.step, schedule_poll): skipping the looks of polls that would
find nothing gives exactly what running every look gives (registers, memory, errors and their steps, the
timestamps the engines write, the retry counts), only faster. The same scripted SDMA work runs on two
identically booted GPUs, one with fast_forward off."""
import struct

import pytest

import pcie
from amdrv.am import AMGPU
from gpusim.bus import HostBus
from gpusim.device import SimGPU

from tests.gpusim.test_sdma_queue import Ring, copy, fence, poll_mem, timestamp, write


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def scripted(gpu, host):
    """Two SDMA engines polling host memory and each other's writes at different intervals, a copy whose slices
    are events of their own, a poll with a retry limit that runs out; the host acts between long clock runs."""
    dev = gpu.dev.pci.dev
    h = gpu.gmc.map_system(host)
    out, big = gpu.gmc.map_vram(4096), gpu.gmc.map_vram(16 << 20)
    r0, r1 = Ring(gpu, 0), Ring(gpu, 1)
    r0.emit(timestamp(out.va), poll_mem(h.va, 1, interval=1), timestamp(out.va + 8),
            copy(big.va, big.va + (8 << 20), 8 << 20),           # two 4 MiB slices: plain events
            write(out.va + 64, 9), timestamp(out.va + 16), fence(out.va + 24, 5))
    r1.emit(poll_mem(out.va + 64, 9, interval=7), timestamp(out.va + 32),
            poll_mem(h.va + 4, 2, interval=3), timestamp(out.va + 40),
            poll_mem(h.va + 8, 3, retry=40, interval=2))      # never matched: hangs after its 40th retry
    dev.step(1000)
    struct.pack_into("<I", host.view, 0, 1)                   # releases engine 0
    dev.step(37)
    dev.step(5000)
    struct.pack_into("<I", host.view, 4, 2)                   # releases engine 1's second poll
    for _ in range(20):
        dev.step(13)
    dev.step(500)
    return dev, out


def state(dev, gpu, out):
    sdma = dev.blocks["SDMA"]
    events = sorted((e[0], e[1], e[2], getattr(e[4], "fn", e[4]).__name__, e[5]) for e in dev._events)
    return {"steps": dev.steps, "regs": dict(dev.regs.store),
            "errors": [(e.step, e.block, e.message) for e in dev.errors],
            "out": gpu.dev.vram.read(out.vram.addr, 128), "queues": [vars(q) for q in sdma.queues],
            "events": events, "interrupts": dev.interrupts_posted}


def test_fast_forward_is_exactly_stepping_every_look(monkeypatch):
    runs = {}
    for ff in (False, True):
        monkeypatch.setattr(SimGPU, "fast_forward", ff)
        bus = HostBus()     # each GPU in slot 0 of a bus of its own: the same bus addresses both times
        try:
            gpu = AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, bus=bus, vram_size=1 << 30))
            host = gpu.dev.pci.alloc_dma(4096)
            dev, out = scripted(gpu, host)
            runs[ff] = state(dev, gpu, out), dev.polls_skipped
            gpu.dev.close()
        finally:
            bus.close()
    (slow, none), (fast, skipped) = runs[False], runs[True]
    assert none == 0 and skipped > 1000                        # it did skip, most of the looks
    ts = struct.unpack("<6Q", fast["out"][:48])
    assert 0 < ts[0] < ts[1] < ts[2] and ts[4] > ts[3] > 0      # the work happened, in order
    assert struct.unpack_from("<I", fast["out"], 24)[0] == 5
    assert any("no match after 40 retries" in e[2] for e in fast["errors"])
    for k in slow:
        assert fast[k] == slow[k], k
