"""The simulated H100's host and engines (gpusim.nv.gpu), driven with raw pushbuffer words on a channel
nvdrv set up: what the host refuses (Xid 32), what an engine refuses (Xid 13), what faults (Xid 31)."""
import struct

import pytest

from gpusim.nv.gpu import HopperGPU, decode_qmd
from gpusim.nv.rm import SimProvider
from nvdrv import classes as C
from nvdrv import pushbuf
from nvdrv.device import NVHCQDevice


@pytest.fixture
def dev():
    d = NVHCQDevice("nv:sim", SimProvider(), "0")
    yield d
    d.close()


def run_words(dev, ch, words):
    pb = pushbuf.PushBuffer()
    pb.words.extend(words)
    ch.push(pb)
    ch.gp_get()
    return dev.prov.rm.gpu.channels[ch.token]


def test_a_method_header_past_the_segment_is_a_pbdma_error(dev):
    model = run_words(dev, dev.copier, [pushbuf.header(C.SUBCHANNEL_COPY, C.NVC8B5_OFFSET_IN_UPPER, 4), 0])
    assert model.error.xid == 32 and "runs 4 data words past" in model.error.what
    assert struct.unpack_from("<I", dev.copier.notifier.mem.view, 8)[0] == 32     # NvNotification.info32


def test_an_unknown_opcode_is_a_pbdma_error(dev):
    model = run_words(dev, dev.copier, [6 << 29])
    assert model.error.xid == 32 and "opcode 6" in model.error.what


def test_a_method_the_copy_class_lacks_is_a_gr_exception(dev):
    model = run_words(dev, dev.copier, [pushbuf.header(C.SUBCHANNEL_COPY, 0x500 - 4, 1), 0])
    assert model.error.xid == 13 and "HOPPER_DMA_COPY_A method 0x4fc" in model.error.what


def test_set_object_needs_the_engine_object(dev):
    """SET_OBJECT of a class the channel has no RM object for (the compute class on the copy channel)."""
    model = run_words(dev, dev.copier, [pushbuf.header(2, C.NVC86F_SET_OBJECT, 1), C.HOPPER_COMPUTE_A])
    assert model.error.xid == 13 and "no such engine object" in model.error.what


def test_block_linear_and_physical_copies_are_refused(dev):
    a = dev.alloc(4096)
    pb = pushbuf.PushBuffer()
    pushbuf.copy(pb, a.va, a.va, 16)
    words = list(pb.words)
    words[-1] &= ~(C.LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH | C.LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH)
    model = run_words(dev, dev.copier, words)
    assert model.error.xid == 13 and "block-linear" in model.error.what


def test_semaphore_release_needs_an_aligned_address(dev):
    s = dev.new_signal()
    pb = pushbuf.PushBuffer()
    pushbuf.sem_release(pb, 0, s.va + 8, 1)
    model = run_words(dev, dev.copier, list(pb.words))
    assert model.error.xid == 32 and "16-byte aligned" in model.error.what


def test_an_acquire_resumes_where_it_stopped(dev):
    """A semaphore acquire that is not met holds the channel at that method; methods before it ran once
    and are not run again when it passes."""
    gate, out = dev.new_signal(), dev.new_signal()
    a = dev.alloc(4096)
    dev.copyin(a, b"\x01" * 4096)
    pb = pushbuf.PushBuffer()
    pushbuf.sem_release(pb, 0, out.va, 5)
    pushbuf.sem_acquire(pb, 0, gate.va, 1)
    pushbuf.sem_release(pb, 0, out.va, 6)
    run_words(dev, dev.copier, list(pb.words))
    assert out.value == 5
    out.value = 0                       # were the first release run again, this would become 5
    gate.value = 1
    dev.copier.gp_get()
    assert out.value == 6


def test_32_bit_acquire_is_circular():
    """ACQ_CIRC_GEQ with a 32-bit payload: the value has passed the payload when (value - payload) mod 2**32
    is below 2**31, so a counter that wrapped still passes."""
    gpu = HopperGPU()

    class Ch:
        sem = [0, 0, 0xFFFFFFF0, 0]

        class vas:
            @staticmethod
            def read(va, n):
                return struct.pack("<I", 5)
    assert gpu._sem_execute(Ch, C.SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ) is True
    Ch.sem = [0, 0, 6, 0]
    assert gpu._sem_execute(Ch, C.SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ) is False


def test_qmd_round_trip():
    q = pushbuf.build_qmd(0x1234_5678_9A00, (7, 8, 9), (32, 2, 1), 1000, 40, 0x10_0000_0100, 0x300, 2)
    d = decode_qmd(q.to_bytes())
    assert (d["CTA_RASTER_WIDTH"], d["CTA_RASTER_HEIGHT"], d["CTA_RASTER_DEPTH"]) == (7, 8, 9)
    assert (d["PROGRAM_ADDRESS_UPPER"] << 32 | d["PROGRAM_ADDRESS_LOWER"]) == 0x1234_5678_9A00
    assert d["SHARED_MEMORY_SIZE"] == 1024 and d["REGISTER_COUNT_V"] == 40 and d["BARRIER_COUNT"] == 2
    assert d["CONSTANT_BUFFER_SIZE_SHIFTED4_0"] << 4 == 0x300
