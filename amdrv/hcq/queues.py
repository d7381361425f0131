"""The AM backend's hardware queues: PM4 commands for the MEC compute queue and SDMA commands for the
SDMA queue, built from prebuilt packet templates and patched in place by update_*."""
from __future__ import annotations

import struct
from array import array
from typing import TYPE_CHECKING

from amdrv import pm4, sdma_packets
from amdrv.hcq.launch import _M32, _PACKET, PACKET_BYTES, _patch_exec, write_dispatch
from hcq.api import Buffer, HCQError, HWQueue, Program, Signal

if TYPE_CHECKING:
    from amdrv.hcq.device import AMHCQDevice


def _template(build) -> tuple[array, int]:
    """A packet built once by the amdrv.pm4/sdma_packets builder with placeholder values, and the index
    its builder returned: queues copy it and patch the values, which costs a fraction of building."""
    b = array("I")
    return b, build(b)


_C_WAIT = _template(lambda b: pm4.PM4(b).wait_reg_mem(0, 0))
_C_SIGNAL = _template(lambda b: pm4.PM4(b).release_mem(0, 0, data_sel=pm4.DATA_64))
# the same asking for the end-of-pipe interrupt, on a device that waits on interrupts (amdrv.irq)
_C_SIGNAL_INT = _template(lambda b: pm4.PM4(b).release_mem(0, 0, data_sel=pm4.DATA_64, interrupt=True))
_C_STAMP = _template(lambda b: pm4.PM4(b).release_mem(0, 0, data_sel=pm4.DATA_GPU_CLOCK))


class _AMQueue(HWQueue):
    """What the compute and copy queues share: a packet builder whose dword array is submitted, the
    commands by index for update_*, and the buffers each command names."""

    __slots__ = ("dev", "b", "buf", "cmds", "refs")
    builder = None    # the packet builder class: amdrv.pm4.PM4 or amdrv.sdma_packets.SDMABuilder

    def __init__(self, dev: AMHCQDevice):
        self.dev, self.b = dev, self.builder()
        self.buf = self.b.buf
        self.cmds: list[tuple] = []   # (kind, dword index[, launch slot address, program])
        self.refs: dict = {}          # command index -> the buffers it names: kept alive, checked at submit

    def _add(self, kind: str, where) -> int:
        """Records a command the builder just wrote at `where` (what its builder returned); its index."""
        self.cmds.append((kind, where))
        return len(self.cmds) - 1

    def _cmd(self, index: int, kind: str) -> tuple:
        c = self.cmds[index]
        if c[0] != kind:
            raise HCQError(f"{self.dev.name}: command {index} is a {c[0]}, not a {kind}")
        return c

    def update_wait(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        # WAIT_REG_MEM (PM4) and POLL_REGMEM (SDMA) alike: the address at the index their builders return,
        # low dword first, and the reference value after it
        i = self._cmd(index, "wait")[1]
        if signal is not None:
            self.buf[i], self.buf[i + 1] = signal.va & _M32, signal.va >> 32
        if value is not None:
            self.buf[i + 2] = value & _M32


class AMComputeQueue(_AMQueue):
    """PM4 commands for the device's MEC compute queue (amdrv.pm4), patched in place by update_*."""

    __slots__ = ()
    builder = pm4.PM4

    def _put(self, kind: str, template, va: int, value: int | None) -> int:
        b = self.buf
        t, rel = template
        i = len(b) + rel
        b.extend(t)
        b[i] = va & _M32
        b[i + 1] = va >> 32
        if value is not None:
            b[i + 2] = value & _M32
            if kind == "signal":
                b[i + 3] = value >> 32
        self.cmds.append((kind, i))     # _add inline: a launch records two or three of these
        return len(self.cmds) - 1

    def wait(self, signal: Signal, value: int) -> int:
        return self._put("wait", _C_WAIT, signal.va, value & _M32)

    def signal(self, signal: Signal, value: int) -> int:
        return self._put("signal", _C_SIGNAL if self.dev.irq is None else _C_SIGNAL_INT, signal.va, value)

    def timestamp(self, signal: Signal) -> int:
        return self._put("timestamp", _C_STAMP, signal.va + 8, None)

    def memory_barrier(self) -> int:
        return self._add("barrier", self.b.acquire_mem())

    def exec(self, prog: Program, args, global_size=(1, 1, 1), local_size=(1, 1, 1)) -> int:
        k = prog.handle
        g, l_ = global_size, local_size
        if len(g) != 3 or len(l_) != 3 or not 0 < l_[0] * l_[1] * l_[2] <= prog.max_local or min(g) < 1:
            g, l_ = prog.check_sizes(g, l_)
        try:
            va = self.dev._write_launch(k, prog.layout, args, g, l_)
            b = self.buf
            at = len(b)
            b.extend(k.template)
            _patch_exec(b, at, k, va, g, l_)
        except (struct.error, TypeError, OverflowError):
            prog.check_sizes(global_size, local_size)  # says what does not fit
            raise
        self.cmds.append(("exec", at, va, prog))
        if prog.layout.buffer_index:
            self.refs[len(self.cmds) - 1] = args
        return len(self.cmds) - 1

    def indirect(self, ib: tuple[int, int]) -> int:
        """Runs ib = (GPU address, dword count) of commands from here (INDIRECT_BUFFER, VMID 0)."""
        return self._add("ib", self.b.indirect_buffer(ib[0], ib[1]))

    def kernarg_slot(self, index: int) -> tuple[memoryview, int]:
        """(memory, offset) of a launch's kernarg segment, for graphs that patch single arguments."""
        kind, _, va, _ = self._cmd(index, "exec")
        a = self.dev.arena
        return a.mem, va - a.va + PACKET_BYTES

    def update_signal(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        i = self._cmd(index, "signal")[1]
        b = self.buf
        if signal is not None:
            b[i], b[i + 1] = signal.va & _M32, signal.va >> 32
        if value is not None:
            b[i + 2], b[i + 3] = value & _M32, value >> 32

    def update_exec(self, index: int, args=None, global_size=None, local_size=None) -> None:
        _, at, va, prog = self._cmd(index, "exec")
        a, k = self.dev.arena, prog.handle
        off = va - a.va
        a.touch(off, off + k.slot)
        if args is not None:
            prog.layout.pack_into(a.mem, off + PACKET_BYTES, args)
            self.refs[index] = args
        if global_size is not None or local_size is not None:
            p = _PACKET.unpack_from(a.mem, off)
            old_l = p[2:5]
            g, l_ = prog.check_sizes(global_size or tuple(n // m for n, m in zip(p[6:9], old_l)),
                                     local_size or old_l)
            write_dispatch(a.mem, off, k, va, g, l_)
            _patch_exec(self.buf, at, k, va, g, l_)

    def submit(self) -> None:
        _submit_check(self.dev, self.refs)
        self._submit()

    def _submit(self) -> None:
        """submit() for a queue built just now by the device itself (its arguments were live when packed)."""
        dev = self.dev
        dev.arena.push()
        dwords = dev._behind_bridge_copy(self)
        if dev._ring_slots is not None:     # launches with kernargs in the ring a lap back: done first
            dev._ring_slots.before_write(len(dwords))
        dev.compute.submit(dwords)


def _submit_check(dev: AMHCQDevice, refs: list) -> None:
    """A queue names no freed buffer and its device is open (the CPU cost of a launch: a few reads)."""
    if dev._closed:
        dev._open_check("submit")
    for named in refs.values():     # kernel arguments (numbers too) or a copy's (dst, src)
        for r in named:
            if type(r) is Buffer and r.gone is not None:
                r.live("submit of a queue that names it")


class AMCopyQueue(_AMQueue):
    """SDMA commands for the device's SDMA queue (amdrv.sdma_packets), patched in place by update_*."""

    __slots__ = ()
    builder = sdma_packets.SDMABuilder

    def wait(self, signal: Signal, value: int) -> int:
        return self._add("wait", self.b.poll_mem(signal.va, value & _M32))

    def signal(self, signal: Signal, value: int) -> int:
        i = self._add("signal", self.b.fence(signal.va, value, bits64=True))
        if self.dev.irq is not None:    # sdma_v6_0_ring_emit_fence: a TRAP after the fence (amdrv.irq)
            self.b.trap(0)
        return i

    def timestamp(self, signal: Signal) -> int:
        return self._add("timestamp", self.b.timestamp(signal.va + 8))

    def memory_barrier(self) -> int:
        return self._add("barrier", self.b.gcr())

    def copy(self, dst: Buffer, src: Buffer, nbytes: int) -> int:
        dst.live("copy to")
        src.live("copy from")
        if nbytes > dst.size or nbytes > src.size:
            raise HCQError(f"{self.dev.name}: copy of {nbytes} bytes from {src} to {dst} overruns a buffer")
        i = self.copy_va(dst.va, src.va, nbytes)
        self.refs[i] = (dst, src)
        return i

    def copy_va(self, dst: int, src: int, nbytes: int) -> int:
        return self._add("copy", self.b.copy(dst, src, nbytes))

    def update_signal(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        i = self._cmd(index, "signal")[1]   # the low value dword; address at -2; high fence at +4
        b = self.buf
        if signal is not None:
            b[i - 2], b[i - 1] = signal.va & _M32, signal.va >> 32
            hi = signal.va + 4
            b[i + 2], b[i + 3] = hi & _M32, hi >> 32
        if value is not None:
            b[i], b[i + 4] = value & _M32, value >> 32

    def update_copy(self, index: int, dst: Buffer | None = None, src: Buffer | None = None) -> None:
        b = self.buf
        old_dst, old_src = self.refs.get(index, (None, None))
        self.refs[index] = (dst.live("copy to") if dst is not None else old_dst,
                            src.live("copy from") if src is not None else old_src)
        for n, i in enumerate(self._cmd(index, "copy")[1]):
            step = n * sdma_packets.COPY_MAX_BYTES
            for buf, at in ((src, i + 2), (dst, i + 4)):
                if buf is not None:
                    a = buf.va + step
                    b[at], b[at + 1] = a & _M32, a >> 32

    def submit(self) -> None:
        _submit_check(self.dev, self.refs)
        self.dev.sdma.submit(self.dev._behind_bridge_copy(self))
