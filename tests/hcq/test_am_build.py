"""The AM backend's side of a launch, checked without executing: memory, program loading, the PM4 it
builds (user SGPRs as the kernel descriptor asks, LDS size, workgroup counts), the dispatch packet and
kernargs it writes, in-place updates, graph patch points, and copy planning."""
import struct

import numpy as np
import pytest

import hcq
from amdrv import pm4, sdma_packets
from amdrv.hcq import PACKET_BYTES, AMCopyQueue
from rdna3.codeobj import CodeObject


class CountingRing:
    """Takes submissions without running them."""

    def __init__(self):
        self.submitted = []

    def submit(self, buf):
        self.submitted.append(buf.tobytes())


@pytest.fixture
def offline(dev):
    dev.compute, dev.sdma = CountingRing(), CountingRing()
    return dev


def sh(dev, name):
    return pm4.sh_offset(dev.gc, name)


def find_set_sh(buf, offset):
    """The values a SET_SH_REG at `offset` writes (first one found)."""
    i = 0
    while i < len(buf):
        hdr = buf[i]
        n = (hdr >> 16) & 0x3FFF
        op = (hdr >> 8) & 0xFF
        if op == 0x76 and buf[i + 1] == offset:
            return list(buf[i + 2:i + 2 + n])
        i += n + 2
    raise AssertionError(f"no SET_SH_REG at {offset:#x}")


def test_copy_direct_roundtrip_and_bounds(dev):
    b = dev.alloc(10000)
    data = np.arange(2500, dtype=np.int32)
    dev.copyin(b, data)
    dev.copyin(b, b"\xAA\xBB\xCC", offset=4097)
    out = np.frombuffer(dev.copyout(b), np.int32)
    assert out[0] == 0 and out[-1] == 2499 and dev.copyout(b, 5, 4096) == bytes([0, 0xAA, 0xBB, 0xCC, 1])  # int 1025 at byte 4100
    with pytest.raises(hcq.HCQError, match="overruns"):
        dev.copyin(b, bytes(10), offset=9995)
    dev.free(b)
    with pytest.raises(hcq.HCQError, match="was freed"):
        dev.copyout(b)


def test_exec_pm4_user_sgprs_lds_and_packet(offline, kernel_corpus):
    dev = offline
    prog = dev.program(kernel_corpus["reduce_sum"], "reduce_sum")
    kern = CodeObject(kernel_corpus["reduce_sum"]).kernel("reduce_sum")
    total, partial, a = dev.alloc(4), dev.alloc(64), dev.alloc(4096)
    q = dev.compute_queue()
    idx = q.exec(prog, [total, partial, a, 1000], (4, 1, 1), (256, 1, 1))
    buf = q.buf
    user = find_set_sh(buf, sh(dev, "COMPUTE_USER_DATA_0"))
    layout = dict((n, at) for n, at, _ in kern.descriptor.user_sgpr_layout())
    packet_va = user[layout["dispatch_ptr"]] | user[layout["dispatch_ptr"] + 1] << 32
    kernarg_va = user[layout["kernarg_segment_ptr"]] | user[layout["kernarg_segment_ptr"] + 1] << 32
    assert kernarg_va == packet_va + PACKET_BYTES
    rsrc1, rsrc2 = find_set_sh(buf, sh(dev, "COMPUTE_PGM_RSRC1"))
    assert rsrc1 == kern.descriptor.compute_pgm_rsrc1
    assert (rsrc2 >> 15) & 0x1FF == 2  # 1024 bytes of LDS in 512-byte granules
    assert find_set_sh(buf, sh(dev, "COMPUTE_NUM_THREAD_X")) == [256, 1, 1]
    lo, hi = find_set_sh(buf, sh(dev, "COMPUTE_PGM_LO"))
    assert (lo << 8 | hi << 40) == prog.handle.image.va + kern.code_address
    mem, off = q.kernarg_slot(idx)
    assert struct.unpack_from("<QQQI", mem, off) == (total.va, partial.va, a.va, 1000)
    hdr = struct.unpack_from("<HHHHHHIII", mem, off - PACKET_BYTES)
    assert hdr[2:5] == (256, 1, 1) and hdr[6:9] == (1024, 1, 1)  # grid in work-items
    # resubmission with new values: no rebuild, same dwords except the ones patched
    before = list(buf)
    q.update_exec(idx, args=[total, partial, a, 7], global_size=(2, 1, 1))
    assert struct.unpack_from("<I", mem, off + 24)[0] == 7
    assert struct.unpack_from("<III", mem, off - PACKET_BYTES + 12) == (512, 1, 1)
    changed = [i for i, (x, y) in enumerate(zip(before, buf)) if x != y]
    assert len(changed) == 1 and buf[changed[0]] == 2  # DISPATCH_DIRECT's x


def test_signal_wait_update_in_place(offline):
    dev = offline
    s = dev.new_signal(5)
    assert s.value == 5
    q = dev.compute_queue()
    w, sig = q.wait(s, 3), q.signal(s, 9)
    q.update_wait(w, value=4)
    q.update_signal(sig, value=(1 << 40) | 2)
    assert q.buf[q.cmds[w][1] + 2] == 4
    assert (q.buf[q.cmds[sig][1] + 2], q.buf[q.cmds[sig][1] + 3]) == (2, 1 << 8)
    with pytest.raises(hcq.HCQError, match="command 0 is a wait, not a signal"):
        q.update_signal(w, value=1)


def test_copy_planning_splits_256mib(offline):
    """256 MiB through SDMA: planned as 64 linear-copy packets of 4 MiB with consecutive addresses (the
    plan only: executing 256 MiB on the simulator takes too long for the suite)."""
    dev = offline
    q = AMCopyQueue(dev)
    src, dst = 1 << 44, (1 << 44) + (1 << 30) + 3
    idx = q.copy_va(dst, src, 256 << 20)
    starts = q.cmds[idx][1]
    assert len(starts) == 64
    for n, i in enumerate(starts):
        assert q.buf[i] == sdma_packets.COPY_MAX_BYTES - 1
        assert q.buf[i + 2] | q.buf[i + 3] << 32 == src + n * sdma_packets.COPY_MAX_BYTES
        assert q.buf[i + 4] | q.buf[i + 5] << 32 == dst + n * sdma_packets.COPY_MAX_BYTES


def test_graph_replay_patches_only_variables(offline, kernel_corpus):
    dev = offline
    prog = dev.program(kernel_corpus["saxpy"], "saxpy")
    y, x1, x2 = dev.alloc(4096), dev.alloc(4096), dev.alloc(4096)
    g = dev.graph()
    xv, av = g.var("x"), g.var("alpha")
    for _ in range(3):
        g.exec(prog, y, xv, av, 1024, global_size=(4,), local_size=(256,))
    dev.timeline.value = 1 << 40  # nothing executes here: let replays see the previous one as done
    g(x=x1, alpha=2.0)
    runs, _, patches, _, _ = g.backend
    assert len(patches["x"]) == 3 and len(dev.compute.submitted) == 1
    g(x=x2, alpha=0.5)
    for mem, off, st, layout, i in patches["x"]:
        assert layout.is_buffer[i] and struct.unpack_from("<QQfI", mem, off - 8) == (y.va, x2.va, 0.5, 1024)
    # the launches sit in an indirect buffer: a replay submits a wait-free IB packet and a signal
    assert len(dev.compute.submitted[-1]) // 4 < 16
    with pytest.raises(hcq.HCQError, match="no variable 'z'"):
        g(z=1)


def test_program_errors_name_the_kernel(dev, kernel_corpus):
    with pytest.raises(hcq.HCQError, match="no kernel named 'nope'.*saxpy"):
        dev.program(kernel_corpus["saxpy"], "nope")
    prog = dev.program(kernel_corpus["saxpy"], "saxpy")
    with pytest.raises(hcq.ArgumentError, match="kernel saxpy takes 4"):
        prog(1, global_size=(1,), local_size=(1,))
    with pytest.raises(hcq.ArgumentError, match="at most 256 per workgroup"):
        prog(dev.alloc(4), dev.alloc(4), 1.0, 1, global_size=(1,), local_size=(512,))


def test_hidden_arguments_of_code_object_v5(offline):
    """Block counts, group sizes and grid dims get the launch's values; other hidden arguments 0."""
    from rdna3 import assemble
    from rdna3.codeobj import KernelArg, KernelSpec, write_code_object
    hidden = ["hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z", "hidden_group_size_x",
              "hidden_group_size_y", "hidden_group_size_z", "hidden_remainder_x", "hidden_global_offset_x",
              "hidden_grid_dims"]
    sizes = [4, 4, 4, 2, 2, 2, 2, 8, 2]
    args, at = [KernelArg(0, 8, "global_buffer", "global", "out")], 8
    for what, size in zip(hidden, sizes):
        at = (at + size - 1) // size * size
        args.append(KernelArg(at, size, what))
        at += size
    co = write_code_object([KernelSpec("k", assemble("s_endpgm"), args=args,
                                       user_sgprs=("dispatch_ptr", "kernarg_segment_ptr"))])
    dev = offline
    prog = dev.program(co, "k")
    out = dev.alloc(4)
    q = dev.compute_queue()
    mem, off = q.kernarg_slot(q.exec(prog, [out], (5, 3, 2), (16, 4, 1)))
    got = [struct.unpack_from("<" + {2: "H", 4: "I", 8: "Q"}[a.size], mem, off + a.offset)[0] for a in args[1:]]
    assert got == [5, 3, 2, 16, 4, 1, 0, 0, 3]
