"""The AM backend's hardware queues: PM4 commands for the MEC compute queue and SDMA commands for the
SDMA queue, built from prebuilt packet templates and patched in place by update_*."""
from __future__ import annotations

import struct
from array import array
from typing import TYPE_CHECKING

from amdrv import pm4, sdma_packets
from amdrv.hcq.launch import _M32, PACKET_BYTES, _patch_exec, write_dispatch
from hcq.api import Buffer, HCQError, HWQueue, Program, Signal, byte_count

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

    __slots__ = ("dev", "b", "buf", "cmds", "refs", "gen", "tl")
    builder = None    # the packet builder class: amdrv.pm4.PM4 or amdrv.sdma_packets.SDMABuilder

    def __init__(self, dev: AMHCQDevice):
        self.dev, self.b = dev, self.builder()
        self.buf = self.b.buf
        self.cmds: list[tuple] = []   # (kind, dword index[, slot address, program, args, sizes, arena, lap])
        self.refs: dict = {}          # command index -> the buffers it names: kept alive, checked at submit
        self.gen = None               # the launch arena's gen when its launch slots were last known its own
        self.tl = -1                  # index of the queue's last signal of the device's timeline (-1: none)

    def _add(self, kind: str, where) -> int:
        """Records a command the builder just wrote at `where` (what its builder returned); its index."""
        self.cmds.append((kind, where))
        return len(self.cmds) - 1

    def _cmd(self, index: int, kind: str) -> tuple:
        c = self.cmds[index]
        if c[0] != kind:
            raise HCQError(f"{self.dev.name}: command {index} is a {c[0]}, not a {kind}")
        return c

    def _retarget(self, index: int, signal: Signal) -> None:
        """update_signal moved signal command `index` to `signal`: which is the last timeline signal now."""
        if signal is self.dev.timeline:
            self.tl = max(self.tl, index)
        elif index == self.tl:
            tl = self.dev.timeline.va
            self.tl = max((n for n, c in enumerate(self.cmds) if c[0] == "signal" and self._signal_va(c[1]) == tl),
                          default=-1)

    def _timeline_end(self, value: int) -> tuple[int, bool]:
        """What submitting the queue does to the device's timeline: (the value it leaves there, whether the device
        appends a signal of a fresh value). `value` is that of the queue's last timeline signal. Waits for all
        submitted work wait for the largest value submitted (timeline_submitted), which is right only if the
        timeline is written in increasing order on each engine: a queue that would leave the timeline at or below
        a value submitted before it (an older value taken earlier, or the same queue resubmitted without a new
        one), or that runs commands after its timeline signal, gets a signal of a fresh value after its commands
        (its own value is still written: a wait for it is satisfied by the larger one too)."""
        dev = self.dev
        if self.tl == len(self.cmds) - 1 and value > dev.timeline_submitted:
            if value > dev.timeline_value:      # a value the queue chose itself: taken with it
                dev.timeline_value = value
            return value, False
        return dev.next_timeline(), True

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
        i = self._put("signal", _C_SIGNAL if self.dev.irq is None else _C_SIGNAL_INT, signal.va, value)
        if signal is self.dev.timeline:
            self.tl = i
        return i

    def _signal_va(self, i: int) -> int:
        return self.buf[i] | self.buf[i + 1] << 32

    def timestamp(self, signal: Signal) -> int:
        return self._put("timestamp", _C_STAMP, signal.va + 8, None)

    def memory_barrier(self) -> int:
        return self._add("barrier", self.b.acquire_mem())

    def exec(self, prog: Program, args, global_size=(1, 1, 1), local_size=(1, 1, 1)) -> int:
        k = prog.handle
        if prog.device is not self.dev:
            raise HCQError(f"{self.dev.name}: kernel {prog.name} was loaded on {prog.device.name}; its code and "
                           f"arguments are at that GPU's addresses: load it here too (dev.program)")
        g, l_ = global_size, local_size
        if len(g) != 3 or len(l_) != 3 or not 0 < l_[0] * l_[1] * l_[2] <= prog.max_local or min(g) < 1:
            g, l_ = prog.check_sizes(g, l_)
        args = tuple(args)      # kept: a submit after the arena wrapped writes them into a fresh slot
        dev = self.dev
        try:
            va = dev._write_launch(k, prog.layout, args, g, l_)
            b = self.buf
            at = len(b)
            b.extend(k.template)
            _patch_exec(b, at, k, va, g, l_)
        except (struct.error, TypeError, OverflowError):
            prog.check_sizes(global_size, local_size)  # says what does not fit
            raise
        a = dev.arena
        if self.gen is None:
            self.gen = a.gen
        self.cmds.append(("exec", at, va, prog, args, g, l_, a, a.lap))
        if prog.layout.buffer_index:
            self.refs[len(self.cmds) - 1] = args
        return len(self.cmds) - 1

    def indirect(self, ib: tuple[int, int]) -> int:
        """Runs ib = (GPU address, dword count) of commands from here (INDIRECT_BUFFER, VMID 0)."""
        return self._add("ib", self.b.indirect_buffer(ib[0], ib[1]))

    def kernarg_slot(self, index: int) -> tuple[memoryview, int]:
        """(memory, offset) of a launch's kernarg segment, for graphs that patch single arguments."""
        c = self._cmd(index, "exec")
        a = c[7]
        return a.mem, c[2] - a.va + PACKET_BYTES

    def update_signal(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        i = self._cmd(index, "signal")[1]
        b = self.buf
        if signal is not None:
            b[i], b[i + 1] = signal.va & _M32, signal.va >> 32
            self._retarget(index, signal)
        if value is not None:
            b[i + 2], b[i + 3] = value & _M32, value >> 32

    def update_exec(self, index: int, args=None, global_size=None, local_size=None) -> None:
        _, at, va, prog, old_args, g, l_, a, lap = self._cmd(index, "exec")
        k, off = prog.handle, va - a.va
        resize = global_size is not None or local_size is not None
        if resize:
            g, l_ = prog.check_sizes(global_size or g, local_size or l_)
        if args is not None:
            args = tuple(args)
            self.refs[index] = args
        else:
            args = old_args
        if a.holds(off, off + k.slot, lap):     # still the queue's slot: patched in place
            a.touch(off, off + k.slot)
            if args is not old_args:
                prog.layout.pack_into(a.mem, off + PACKET_BYTES, args)
            if resize:
                write_dispatch(a.mem, off, k, va, g, l_)
                _patch_exec(self.buf, at, k, va, g, l_)
        else:       # the round robin may have handed it to a later launch: the submit writes a fresh one
            self.gen = -1
        self.cmds[index] = ("exec", at, va, prog, args, g, l_, a, lap)

    def submit(self) -> None:
        dev = self.dev
        _submit_check(dev, self.refs)
        if self.gen != dev.arena.gen and self.gen is not None:
            self._own_slots()
        self._submit()

    def _own_slots(self) -> None:
        """Since the queue's launches were written the launch arena wrapped (or lost its end to a graph, or was
        reset): if a slot is no longer the queue's to submit (Arena.holds), all its launches get fresh slots of
        this lap, written again from their kept arguments (all, and in one lap, so that no write wraps onto
        another); a wrap needed for that waits for what was submitted before, not for this queue's signal."""
        dev, a = self.dev, self.dev.arena
        execs = [(n, c) for n, c in enumerate(self.cmds) if c[0] == "exec"]
        if all(c[7].holds(c[2] - c[7].va, c[2] - c[7].va + c[3].handle.slot, c[8]) for _, c in execs):
            self.gen = a.gen
            return
        need = sum(c[3].handle.slot for _, c in execs)
        if need > a.size:
            raise HCQError(f"{dev.name}: this compute queue's {len(execs)} launches need {need} bytes of launch "
                           f"slots at once, more than the launch arena holds ({a.size} bytes): split it into "
                           f"smaller queues, or record the launches as a graph (dev.graph()), whose slots are its own")
        if a.at + need > a.size:
            dev._wrap()     # what was submitted before: this queue's own value is not in timeline_submitted yet
        for n, (_, at, _, prog, args, g, l_, _, _) in execs:
            k = prog.handle
            va = dev._write_launch(k, prog.layout, args, g, l_)
            _patch_exec(self.buf, at, k, va, g, l_)
            self.cmds[n] = ("exec", at, va, prog, args, g, l_, a, a.lap)
        self.gen = a.gen

    def _submit(self) -> None:
        """submit() for a queue built just now by the device itself (its arguments were live when packed)."""
        dev = self.dev
        dev.arena.push()
        dwords = dev._behind_bridge_copy(self)
        tl = self.tl
        if tl >= 0:
            b, i = self.buf, self.cmds[tl][1]
            end, fresh = self._timeline_end(b[i + 2] | b[i + 3] << 32)
            if fresh:
                tail = AMComputeQueue(dev)
                tail.signal(dev.timeline, end)
                dwords = dwords + tail.buf
        elif self.gen is not None:          # launches, and no timeline signal
            dwords, fence = self._launch_fence(dwords)
        if dev._ring_slots is not None:     # launches with kernargs in the ring a lap back: done first
            dev._ring_slots.before_write(len(dwords))
        dev.compute.submit(dwords)
        if tl >= 0:
            if end > dev.timeline_submitted:
                dev.timeline_submitted = end
        elif self.gen is not None and fence:
            dev.launch_fence_value = fence

    def _launch_fence(self, dwords):
        """(dwords followed by a signal of the device's next launch fence value, that value): a queue whose
        launches no timeline signal follows still has them waited for before the launch arena hands their slots
        out again (AMHCQDevice._launches_done), as amdgpu_ib_schedule fences every submission whose memory the
        kernel reuses once the fence signals. The launch fence is the compute engine's alone, so its values are
        written in order."""
        dev = self.dev
        if dev.launch_fence is None:
            dev.launch_fence = dev.new_signal(0)
            dev.launch_fence.name = f"{dev.name} launch fence"
        fence = dev.launch_fence_value + 1
        tail = AMComputeQueue(dev)
        tail.signal(dev.launch_fence, fence)
        return dwords + tail.buf, fence


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
        if signal is self.dev.timeline:
            self.tl = i
        return i

    def _signal_va(self, i: int) -> int:
        return self.buf[i - 2] | self.buf[i - 1] << 32

    def timestamp(self, signal: Signal) -> int:
        return self._add("timestamp", self.b.timestamp(signal.va + 8))

    def memory_barrier(self) -> int:
        return self._add("barrier", self.b.gcr())

    def copy(self, dst: Buffer, src: Buffer, nbytes: int) -> int:
        nbytes = byte_count(self.dev.name, "copy", nbytes, f" from {src} to {dst}")
        self._fits(dst, "copy to", nbytes)
        self._fits(src, "copy from", nbytes)
        i = self.copy_va(dst.va, src.va, nbytes)
        self.refs[i] = (dst, src)
        return i

    def _fits(self, buf: Buffer, what: str, nbytes: int) -> Buffer:
        """buf, if a copy of nbytes may name it here: live, this device's (SDMA reaches this GPU's addresses
        only: another's buffer would name whatever this one maps there) and large enough; else HCQError."""
        buf.live(what)
        if buf.device is not self.dev:
            raise HCQError(f"{self.dev.name}: {what} {buf}: a copy queue reaches its own GPU's memory only; copy "
                           f"between GPUs with dev.copy(dst, src), which goes through host memory both map")
        if nbytes > buf.size:
            raise HCQError(f"{self.dev.name}: {what} {buf}: the copy of {nbytes} bytes overruns it")
        return buf

    def _copy_bytes(self, index: int) -> int:
        """The byte count of copy command index (its packets' counts, each stored minus one)."""
        return sum(self.buf[i] + 1 for i in self._cmd(index, "copy")[1])

    def check_copy(self, index: int, dst: Buffer | None = None, src: Buffer | None = None) -> None:
        """HCQError unless update_copy(index, dst, src) would name buffers the copy fits (graph replays check
        every value before they patch any)."""
        n = self._copy_bytes(index)
        for buf, what in ((dst, "copy to"), (src, "copy from")):
            if buf is not None:
                self._fits(buf, what, n)

    def copy_va(self, dst: int, src: int, nbytes: int) -> int:
        return self._add("copy", self.b.copy(dst, src, nbytes))

    def update_signal(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        i = self._cmd(index, "signal")[1]   # the low value dword; address at -2; high fence at +4
        b = self.buf
        if signal is not None:
            b[i - 2], b[i - 1] = signal.va & _M32, signal.va >> 32
            hi = signal.va + 4
            b[i + 2], b[i + 3] = hi & _M32, hi >> 32
            self._retarget(index, signal)
        if value is not None:
            b[i], b[i + 4] = value & _M32, value >> 32

    def update_copy(self, index: int, dst: Buffer | None = None, src: Buffer | None = None) -> None:
        b = self.buf
        self.check_copy(index, dst, src)     # a smaller buffer would let the copy run over into the next one
        old_dst, old_src = self.refs.get(index, (None, None))
        self.refs[index] = (dst if dst is not None else old_dst, src if src is not None else old_src)
        for n, i in enumerate(self._cmd(index, "copy")[1]):
            step = n * sdma_packets.COPY_MAX_BYTES
            for buf, at in ((src, i + 2), (dst, i + 4)):
                if buf is not None:
                    a = buf.va + step
                    b[at], b[at + 1] = a & _M32, a >> 32

    def submit(self) -> None:
        dev = self.dev
        _submit_check(dev, self.refs)
        dwords = dev._behind_bridge_copy(self)
        tl = self.tl
        if tl >= 0:
            b, i = self.buf, self.cmds[tl][1]
            end, fresh = self._timeline_end(b[i] | b[i + 4] << 32)
            if fresh:
                tail = AMCopyQueue(dev)
                tail.signal(dev.timeline, end)
                dwords = dwords + tail.buf
        dev.sdma.submit(dwords)
        if tl >= 0 and end > dev.timeline_submitted:
            dev.timeline_submitted = end
