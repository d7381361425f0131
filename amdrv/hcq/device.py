"""AMHCQDevice: an AMGPU serving hcq (memory, copies, signals and waits, fault and hang reports, programs,
launches), and open_device, the `driverless.hcq` entry point's target."""
from __future__ import annotations

import threading
import time
import warnings
import weakref
from array import array

from amdrv import device_spec, irq, monitor, placement
from amdrv.am import AMGPU
from amdrv.memory import VRAMExhausted, fmt_size
from amdrv.pagetable import MTYPE_UC
from amdrv.queue import ComputeQueue, SDMAQueue
from rdna3 import opencl
from rdna3.codeobj import CodeObject, CodeObjectError
from pcie import open_function
from amdrv.kernargs import kernel_args
from amdrv.hcq.graph import GraphBuilder
from amdrv.hcq import scratch
from amdrv.hcq.launch import PACKET_BYTES, RingSlots, _Kernel, write_dispatch
from amdrv.hcq.queues import AMComputeQueue, AMCopyQueue
from hcq.api import ArgLayout, Buffer, HCQDevice, HCQError, HCQFault, HCQTimeout, Program, Signal, byte_count

# SQ wave state a driver reads when a queue stops (gfx_v11_0_read_wave_data; gc_11_0_0_offset.h ixSQ_WAVE_*,
# gc_11_0_0_sh_mask.h SQ_WAVE_STATUS/TRAPSTS fields); waits longer than WAVE_CHECK_AFTER look for a halted wave
IX_SQ_WAVE_STATUS, IX_SQ_WAVE_TRAPSTS, IX_SQ_WAVE_PC_LO, IX_SQ_WAVE_PC_HI, IX_SQ_WAVE_EXEC_LO = 0x102, 0x103, 0x108, 0x109, 0x27E
SQ_WAVE_STATUS_VALID, SQ_WAVE_STATUS_HALT, SQ_WAVE_TRAPSTS_ILLEGAL_INST = 1 << 16, 1 << 13, 1 << 11
WAVE_CHECK_AFTER = 0.25

PAGE = 4096
XCLK_HZ = 100e6
SIGNAL_BYTES = 16
ARENA_BYTES = 4 << 20
KERNARG_TAIL = 256         # compilers load kernargs in wide chunks that may run past the last one
SDMA_STAGING = 4 << 20
# Behind a USB bridge DMA memory is the bridge's 512 KiB SRAM and only its first page reads back (docs/usb.md,
# SRAM budget): a 64 KiB arena (its tail included), 8 KiB rings (upstream's size: amdgpu_ring_init's 1024
# dwords x 4 x amdgpu_sched_hw_submission 2) but a 32 KiB SDMA ring on the stock firmware (its copy-out program,
# bridge_copy.bounce_out, is ~22 KiB a submission), a 256 KiB copy-in staging on the stock firmware; copy-out bounced
# through the start of that page, the signals after it (the last SIGNAL_AREA bytes), so one read fetches a
# bounced piece and the fence that says it is there.
ARENA_BYTES_BRIDGE = (64 << 10) - PAGE
SDMA_STAGING_BRIDGE = 256 << 10
RING_BYTES_BRIDGE = 8 << 10
SDMA_RING_BYTES_STOCK_BRIDGE = 32 << 10
SIGNAL_AREA = 1024
BOUNCE = PAGE - SIGNAL_AREA


def _pages(nbytes: int) -> int:
    """DMA memory comes in whole pages: the GPU maps pages, so all of the last one must be ours."""
    return (max(nbytes, 1) + PAGE - 1) // PAGE * PAGE


def find_real_device() -> tuple[str | None, str]:
    """hcq.find_real_device("am"): the first AM-supported GPU, PCIe before USB (device_spec.pick_real_gpu)."""
    return device_spec.pick_real_gpu()


def device_facts(spec: str) -> dict:
    """hcq.device_facts for an am string: whether the GPU outlives the process, and its state file."""
    try:
        parsed = device_spec.parse(spec)
    except Exception:   # a string AM rejects says so when opened, with its own message
        return {"persistent": False, "state": None}
    state = parsed.options.get("state") or parsed.options.get("sim", {}).get("state")
    return {"persistent": parsed.persistent, "state": state}


def open_device(spec: str = "am:sim", **kwargs) -> AMHCQDevice:
    """Boots the GPU a device string names and wraps it. A simulated GPU (am:sim...) is kept in its state
    file (amdrv.device_spec.sim_state_path) across processes, as a real GPU stays powered. bus=, slot=N
    and fresh=True pick and power on a particular one in this process only (a simulated host bus the caller
    owns, gpusim.bus.HostBus; two GPUs on one bus are two slots), and state=PATH keeps it in that file
    instead; other kwargs go to AMGPU.open."""
    # `is not`, not `in (None, False)`: slot 0 equals False and is a slot like any other
    sim = {k: v for k in ("bus", "slot", "fresh", "state") if (v := kwargs.pop(k, None)) is not None and v is not False}
    slot = sim.get("slot")
    device = spec
    if sim:
        parsed = device_spec.parse(spec)
        if parsed.provider != "sim":
            raise HCQError(f"{spec}: bus=, slot=, fresh= and state= choose simulated GPUs only")
        device = open_function("sim", *parsed.args, **sim)
    gpu = AMGPU.open(device, **kwargs)
    try:
        return AMHCQDevice(gpu, spec if slot is None else f"{spec}#{slot}")
    except BaseException:
        # Setup after the boot failed (a USB fault, no DMA memory): release the device and its lock, so a
        # later open in this process is not told the device is busy. No fini: the link or the GPU may be what
        # failed; the clean-exit flag stays clear, so the next open boots cold.
        gpu.release()
        raise


class _Arena:
    """Launch slots in mapped host memory, handed out round-robin. Before the cursor wraps onto memory
    an earlier launch may still read, the device waits for the launches submitted so far (_wrap).
    Where DMA memory is not coherent (USB), [lo, hi) is what the host wrote since the last push.
    `lap` counts the cursor's returns to 0; `gen` changes whenever a slot handed out may have been handed out
    again (a wrap, a recover, the end taken for a graph), so a built queue re-checks its slots (holds) only then."""

    __slots__ = ("buf", "map", "mem", "va", "size", "at", "lo", "hi", "lap", "gen")

    def __init__(self, gpu, size: int):
        self.buf = placement.host_written(gpu, _pages(size + KERNARG_TAIL), "kernarg arena")
        self.map = gpu.gmc.map_system(self.buf)
        self.mem, self.va, self.size, self.at = self.buf.view, self.map.va, size, 0
        self.lo, self.hi = self.buf.size, 0
        self.lap = self.gen = 0

    def holds(self, off: int, end: int, lap: int) -> bool:
        """Whether the slot [off, end) handed out in lap `lap` may be submitted as it is: in the round robin
        still and of this lap (the next wrap waits for it once submitted; a slot of the last lap submitted now
        would be overwritten by this lap's cursor without a wait)."""
        return lap == self.lap and end <= self.size

    def restart(self) -> None:
        """The cursor back to 0 (a wrap, or a recover): slots of the last lap before it are handed out again."""
        self.at = 0
        self.lap += 1
        self.gen += 1

    def touch(self, lo: int, hi: int) -> None:
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    def push(self) -> None:
        if self.hi > self.lo:
            self.buf.push(self.lo, self.hi - self.lo)
            self.lo, self.hi = self.buf.size, 0

    def take_end(self, size: int) -> _Arena:
        """The round robin's last `size` bytes, taken out of it for good (a graph's slots, which its replays
        patch in place): an arena over them, the same memory and buffer, that never wraps."""
        part = object.__new__(_Arena)
        self.size -= size
        self.at = min(self.at, self.size)
        self.gen += 1
        part.buf, part.map, part.mem, part.va = self.buf, self.map, self.mem, self.va
        part.at, part.size, part.lo, part.hi = self.size, self.size + size, self.buf.size, 0
        part.lap = part.gen = 0
        return part


class _BridgeSignal(Signal):
    """A signal in DMA memory the host sees through a shadow (USB): reads fetch it, writes send it."""

    __slots__ = ("dma", "offset")

    @property
    def value(self) -> int:
        self.dma.pull(self.offset, 8)
        return self.mem[0]

    @value.setter
    def value(self, v: int) -> None:
        self.mem[0] = v
        self.dma.push(self.offset, 8)

class AMHCQDevice(GraphBuilder, HCQDevice):
    """An AMGPU serving hcq. `gpu` is the amdrv.am.AMGPU underneath."""

    timestamp_hz = XCLK_HZ

    def __init__(self, gpu: AMGPU, name: str):
        self.gpu, self.name = gpu, name
        self._closed = False
        self.chip = f"{gpu.dev.chip.name} {gpu.dev.chip.gfx_target}"
        self.gc = gpu.dev.reg("GC")
        self.vram = gpu.dev.vram
        self._signal_pages: list = []
        self._free_signals: list[Signal] = []
        self._host_keep: list = []   # host memory the GPU reads for the device's lifetime (graph IBs)
        self._add_signal_page()      # the first: where DMA memory reads back, if only some does (USB)
        self.coherent = self._signal_pages[0][0].coherent
        # The IH's write-pointer write-back in the first signal slot: a fence poll reads it with the fences,
        # so the fault check after each completed wait (_wait) costs no extra read while no IV came.
        ih_slot = self._free_signals.pop()
        gpu.ih.move_wptr_writeback(ih_slot.va, self._signal_pages[0][0], ih_slot.va - self._signal_pages[0][1].va)
        self.arena = _Arena(gpu, ARENA_BYTES if self.coherent else ARENA_BYTES_BRIDGE)
        self.staging_bytes = SDMA_STAGING if self.coherent else SDMA_STAGING_BRIDGE
        self._staging = None
        self._bridge = None
        ring = {} if self.coherent else {"ring_size": RING_BYTES_BRIDGE}
        stock = not self.coherent and not getattr(gpu.dev.pci, "sram_dma", False)
        self.compute = ComputeQueue(gpu, **ring)
        self.sdma = SDMAQueue(gpu, **({"ring_size": SDMA_RING_BYTES_STOCK_BRIDGE} if stock else ring))
        self.timeline = self.new_signal(0)
        self.timeline.name = f"{name} timeline"
        self.timeline_value = self.timeline_submitted = 0
        # where a launch's writes cost a round trip each (VRAM behind the open bridge firmware), its kernargs
        # ride in the ring, next to its PM4: one write (amdrv.hcq.launch.RingSlots)
        self._ring_slots = RingSlots(self, self.compute) if placement.in_vram(gpu.dev.pci) else None
        self._timing = (self.new_signal(), self.new_signal())
        # A compute queue with launches that signals no timeline value is followed at its submit by a signal of
        # this, the compute engine's alone (AMComputeQueue._launch_fence): the launch arena's wrap waits for it as
        # for the timeline, so such a queue's kernargs stay until it ran, and synchronize still waits only for the
        # timeline (a queue the host gates on a signal of its own does not hold up copyin). Made at first use (a
        # signal behind a USB bridge costs a write at open).
        self.launch_fence: Signal | None = None
        self.launch_fence_value = 0
        self._code_images: list = []     # (GPU address, size, CodeObject) of loaded programs: names a wave's PC
        self._scratch = None             # the scratch buffer of kernels with private memory (amdrv.hcq.scratch)
        self._buffers = weakref.WeakSet()   # live buffers (not views): a close marks them dead
        self._dropped: list = []             # (mapping, timeline value when dropped) of collected buffers
        # copyin/copyout up to this many bytes go through BAR0 when it reaches the buffer; larger ones by
        # SDMA. On the simulator (and on PCIe hosts writing write-combined BAR memory) the CPU copy wins
        # at every size; 0 sends every copy through SDMA.
        self.direct_max = 1 << 62
        # Idle power and operators (amdrv.monitor): GFX may power off once the driver lets it go, as
        # amdgpu's late init does; the metrics go to a file driverless-smi reads. Both send SMU messages
        # from threads of their own, so neither runs over USB (the link is one transaction stream) nor on
        # a GPU without a device lock (a simulated one opened by slot=/fresh=: tests, benchmarks, the
        # mutation tool), whose register traffic stays the driver's own and deterministic.
        self.gfxoff = monitor.GfxOff(gpu.smu)
        gpu.gmc.gc_awake = self.gfxoff.awake     # TLB flushes and fault reads of the GC hub: GFX powered
        # What a wait polls: an always-on register (the IH's write pointer, OSSSYS), never a GC one, which
        # GFXOFF powers off while work may still be on its way (the doorbell wakes GFX; upstream waits on
        # fences and interrupts and reads no GC register either)
        self._poll_reg = gpu.dev.reg("OSSSYS").IH_RB_WPTR.read
        # The IH ring has one reader at a time: waits (faults, thermal alerts) and the publisher's thread
        # (thermal alerts while the holder is idle); IVs the thread does not handle wait for the next call.
        self._ih_lock = threading.Lock()
        self._iv_backlog: list = []
        self.thermal = monitor.ThermalState()
        # Waits block on the GPU's interrupts where the transport delivers them (VFIO's MSI eventfd; the
        # simulator on its own clock), else poll; `wait_mode` says which and why (amdrv.irq)
        self.irq, self.wait_mode = None, ""
        self.enable_interrupts()
        lock = monitor.lock_path_of(gpu.dev.pci)
        self.publisher = None
        if lock is not None and self.coherent:
            self.gfxoff.release()
            self.publisher = monitor.Publisher(gpu, monitor.metrics_path(lock), extra=self._published)
        elif lock is not None:        # USB: published from this process's waits, no thread (amdrv.monitor)
            self.publisher = monitor.Publisher(gpu, monitor.metrics_path(lock), extra=self._published, inline=True)

    def enable_interrupts(self) -> str:
        """Asks the transport for the GPU's interrupts (amdrv.irq); where it has them, waits sleep on them from
        now on. Returns `wait_mode`. Opening asks once; a simulated GPU whose own clock starts later
        (gpusim's start_async) can ask again."""
        if self.irq is None:
            with self.gfxoff.awake():       # the sources are GC registers
                self.irq, self.wait_mode = irq.Interrupts.enable(self.gpu, self.compute, self.sdma)
        return self.wait_mode

    def _published(self) -> dict:
        with self._ih_lock:
            for iv in self.gpu.ih.poll():
                if not self.thermal.handle(self.gpu.smu, iv) and not irq.is_fence_interrupt(iv):
                    self._iv_backlog.append(iv)
        return {"gfxoff_allowed": self.gfxoff.allowed, "idle_s": self.gfxoff.delay_s,
                "thermal_alert": self.thermal.published()}

    def _ivs(self) -> list:
        with self._ih_lock:
            ivs, self._iv_backlog = self._iv_backlog + self.gpu.ih.poll(), []
        return ivs

    def describe(self) -> str:
        state = "closed" if self._closed else f"{self.gpu.boot_report.kind} boot" if self.gpu.boot_report else "open"
        return f"{self.chip} at {self.gpu.dev.pci.address}, {fmt_size(self.vram.size)} VRAM, {state}"

    # ------------------------------------------------------------------ memory
    def _open_check(self, what: str) -> None:
        if self._closed:
            raise HCQError(f"{self.name}: {what} on a closed device; open it again (hcq.open) for new work")

    def alloc(self, nbytes: int, *, host: bool = False, uncached: bool = False) -> Buffer:
        self._open_check("alloc")
        nbytes = byte_count(self.name, "alloc", nbytes)
        if self._dropped:
            self._reclaim()
        try:
            m = self._map(nbytes, host, uncached)
        except VRAMExhausted:
            if not self._dropped:
                raise
            self._reclaim(everything=True)   # buffers dropped while work that may use them was in flight
            m = self._map(nbytes, host, uncached)
        buf = Buffer(self, m.va, nbytes, m)
        self._buffers.add(buf)
        # A buffer nobody references any more gives its memory back (at the next alloc: the collector may
        # run inside a launch, where a TLB flush or a wait cannot)
        buf.finalizer = weakref.finalize(buf, _dropped, weakref.ref(self), m)
        return buf

    def _map(self, nbytes: int, host: bool, uncached: bool):
        if not host:
            return self.gpu.gmc.map_vram(nbytes, tag="hcq buffer", mtype=MTYPE_UC if uncached else None)
        try:  # system pages are mapped snooped and uncached (MTYPE UC) either way
            # the GPU writes host buffers: behind a bridge they must not share an SRAM slot with pushed ones
            dma = self.gpu.dev.pci.alloc_dma(_pages(nbytes), **({} if self.coherent else {"device_written": True}))
        except (MemoryError, OSError) as e:
            raise HCQError(f"{self.name}: no {fmt_size(nbytes)} of host memory for the GPU to reach ({e}); "
                           "allocate less, or VRAM (host=False)") from None
        try:
            return self.gpu.gmc.map_system(dma)
        except BaseException:
            dma.free()
            raise

    def _reclaim(self, everything: bool = False) -> None:
        """Unmaps and frees the memory of collected buffers whose last possible user has finished (the
        timeline reached the value it had when the buffer was dropped); everything=True waits for all."""
        if everything:
            self.synchronize()
        done, keep = self.timeline.value, []
        for m, when in self._dropped:
            if when <= done:
                self._unmap(m)
            else:
                keep.append((m, when))
        self._dropped = keep

    def _unmap(self, m) -> None:
        self.gpu.gmc.unmap(m)
        if m.dma is not None:
            m.dma.free()

    def free(self, buf: Buffer) -> None:
        if buf.device is not self:
            raise HCQError(f"{self.name}: {buf} belongs to {buf.device.name}")
        buf.live("free")    # a second free, or one after close
        if buf.base is not None:
            raise HCQError(f"{self.name}: {buf} is a view; free the buffer it views")
        self.synchronize()
        if buf.finalizer is not None:
            buf.finalizer.detach()
        self._unmap(buf.mem)
        self._buffers.discard(buf)
        buf.release("was freed")

    def _host_view(self, buf: Buffer, offset: int, n: int) -> memoryview | None:
        """The CPU's view of part of a host buffer (None for VRAM buffers)."""
        m = buf.mem
        if m is None or m.dma is None:
            return None
        at = buf.va - m.va + offset
        return m.dma.view[at:at + n]

    def _vram_offset(self, buf: Buffer) -> int:
        m = buf.mem
        if m is None or m.vram is None:
            raise HCQError(f"{self.name}: {buf} is not live VRAM of this device (freed, or another device's)")
        return m.vram.addr + (buf.va - m.va)

    def _direct(self, off: int, n: int) -> bool:
        return self.vram.direct is not None and off + n <= self.vram.visible and n <= self.direct_max

    def copyin(self, buf: Buffer, data, offset: int = 0) -> None:
        self._open_check("copyin")
        buf.live("copyin")
        mv = _bytes_of(data)
        n = mv.nbytes
        if offset < 0 or offset + n > buf.size:
            raise HCQError(f"{self.name}: copyin of {n} bytes at offset {offset} overruns {buf}")
        if not n:
            return
        self._sync_queues()  # a kernel in flight may still read the old contents
        if (host := self._host_view(buf, offset, n)) is not None:
            host[:] = mv
            buf.mem.dma.push(buf.va - buf.mem.va + offset, n)
            return
        if self._bridge_copies() is not None:   # the open USB bridge firmware: its SRAM DMA (amdrv.bridge_copy)
            self._bridge.copy_in(buf.va + offset, mv)
            return
        off = self._vram_offset(buf) + offset
        if self._direct(off, n):
            self.vram.write(off, mv)   # the mapped BAR0: a memcpy, counted as bulk bytes
            self.gpu.nbio.hdp_flush()  # CPU writes through BAR0 reach VRAM past the HDP before engines read
        else:
            self._sdma_through_staging(buf.va + offset, n, mv, None)

    def copyout(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        self._open_check("copyout")
        buf.live("copyout")
        n = buf.size - offset if size is None else size
        if offset < 0 or n < 0 or offset + n > buf.size:
            raise HCQError(f"{self.name}: copyout of {n} bytes at offset {offset} overruns {buf}")
        self._sync_queues()
        out = bytearray(n)
        if not self.coherent:   # host and VRAM buffers alike: by SDMA into the page that reads back
            if buf.mem is None:
                raise HCQError(f"{self.name}: {buf} is not live memory of this device (freed, or another device's)")
            if self._bridge_copies() is not None:
                self._bridge.copy_out(buf.va + offset, n, memoryview(out))
                return bytes(out)
            self._sdma_bounce(buf.va + offset, n, memoryview(out))
            return bytes(out)
        if (host := self._host_view(buf, offset, n)) is not None:
            return bytes(host)
        off = self._vram_offset(buf) + offset
        if self._direct(off, n):
            return self.vram.read(off, n)
        self._sdma_through_staging(buf.va + offset, n, None, memoryview(out))
        return bytes(out)

    def _behind_bridge_copy(self, q):
        """q's commands, behind a wait (on the GPU) for the bridge copier's last copy-in while the host has
        not seen it copied (amdrv.bridge_copy: copyin returns once its data are in the bridge's SRAM)."""
        gate = self._bridge.pending() if self._bridge is not None else None
        if gate is None:
            return q.buf
        w = type(q)(self)
        w.wait(*gate)
        return w.buf + q.buf

    def _sync_queues(self) -> None:
        """synchronize() but for the bridge copier, which copyin/copyout go through (or behind) in order."""
        super().synchronize()

    def synchronize(self, timeout: float | None = None) -> None:
        super().synchronize(timeout)
        gate = self._bridge.pending() if self._bridge is not None else None
        if gate is not None:     # the copier's last copy-in: read with the other signals (one poll)
            self._wait(*gate, self.default_timeout if timeout is None else timeout)

    def _bridge_copies(self):
        """The SRAM-DMA copier where the transport offers it (pcie.usb's open-firmware function), else None."""
        if self._bridge is None and getattr(self.gpu.dev.pci, "sram_dma", False):
            from amdrv.bridge_copy import BridgeCopier
            self._bridge = BridgeCopier(self)
        return self._bridge

    def _staging_map(self):
        if self._staging is None:
            dma = self.gpu.dev.pci.alloc_dma(self.staging_bytes)
            self._staging = (dma, self.gpu.gmc.map_system(dma))
        return self._staging

    def _sdma_copy(self, dst: int, src: int, n: int) -> None:
        """n bytes from GPU address src to dst by this device's SDMA queue; returns when they are there."""
        q = AMCopyQueue(self)
        q.copy_va(dst, src, n)
        q.signal(self.timeline, self.next_timeline())
        q.submit()
        self.synchronize()

    def _sdma_through_staging(self, va: int, n: int, src: memoryview | None, dst: memoryview | None) -> None:
        """copyin (src) or copyout (dst) in staging-sized pieces: host memory <-> VRAM by SDMA."""
        dma, m = self._staging_map()
        step = dma.size
        for at in range(0, n, step):
            k = min(step, n - at)
            if src is not None:
                dma.view[:k] = src[at:at + k]
                dma.push(0, k)
                self._sdma_copy(va + at, m.va, k)
            else:
                self._sdma_copy(m.va, va + at, k)
            if dst is not None:
                dst[at:at + k] = dma.view[:k]

    def _sdma_bounce(self, va: int, n: int, dst: memoryview) -> None:
        """copyout where only one page reads back (USB, stock firmware): SDMA copies pieces of the source to
        the start of that page, the host reading each as the next is allowed (amdrv.bridge_copy.bounce_out)."""
        from amdrv.bridge_copy import bounce_out
        bounce_out(self, va, n, dst)

    def copy(self, dst: Buffer, src: Buffer, nbytes: int | None = None) -> None:
        """GPU copy of nbytes (default: all of src) from src to dst, by SDMA; returns when done. Buffers of
        two GPUs are copied through host memory both GPUs map: the source GPU's SDMA writes it, the
        destination's reads it, the CPU touches none of the bytes."""
        self._open_check("copy")
        src.live("copy from")
        dst.live("copy to")
        n = src.size if nbytes is None else byte_count(self.name, "copy", nbytes, f" from {src} to {dst}", zero_ok=True)
        if n > src.size or n > dst.size:
            raise HCQError(f"{self.name}: copy of {n} bytes from {src} to {dst} overruns a buffer")
        if not n:
            return        # as copyin and copyout of nothing: no engine work
        if src.device is self and dst.device is self:    # both checked live just now
            self._sdma_copy(dst.va, src.va, n)
            return
        if self not in (src.device, dst.device) or not isinstance(src.device, AMHCQDevice) \
                or not isinstance(dst.device, AMHCQDevice):
            raise HCQError(f"{self.name}: copy from {src} to {dst}: neither is this device's, or one is not an AM GPU")
        a, b = src.device, dst.device
        if not (a.coherent and b.coherent):
            raise HCQError(f"{self.name}: copy from {src} to {dst}: a GPU behind a USB bridge reaches no host memory "
                           "another GPU can; copy with copyout() and copyin()")
        a.synchronize()
        b.synchronize()
        dma, m_a = a._staging_map()
        m_b = b.gpu.gmc.map_system(dma)  # the same host pages, in the destination GPU's address space
        try:
            for at in range(0, n, a.staging_bytes):
                k = min(a.staging_bytes, n - at)
                a._sdma_copy(m_a.va, src.va + at, k)
                b._sdma_copy(dst.va + at, m_b.va, k)
        finally:
            b.gpu.gmc.unmap(m_b)

    # ------------------------------------------------------------------ signals
    def _add_signal_page(self) -> None:
        first = not self._signal_pages
        if not first and not self.coherent:
            raise HCQError(f"{self.name}: out of signals: behind a USB bridge the host reads back one page of DMA "
                           f"memory, which holds {SIGNAL_AREA // SIGNAL_BYTES}; free graphs or signals you no "
                           "longer need")
        dma = placement.signal_page(self.gpu, first)
        m = self.gpu.gmc.map_system(dma)
        self._signal_pages.append((dma, m))
        q = dma.view.cast("Q")
        lowest = 0 if dma.coherent else BOUNCE // SIGNAL_BYTES
        for i in range(PAGE // SIGNAL_BYTES - 1, lowest - 1, -1):
            if dma.coherent:
                s = Signal(self, m.va + i * SIGNAL_BYTES, q[2 * i:2 * i + 2])
            else:
                s = _BridgeSignal(self, m.va + i * SIGNAL_BYTES, q[2 * i:2 * i + 2])
                s.dma, s.offset = dma, i * SIGNAL_BYTES
            self._free_signals.append(s)

    def new_signal(self, value: int = 0) -> Signal:
        self._open_check("new_signal")
        if not self._free_signals:
            self._add_signal_page()
        s = self._free_signals.pop()
        s.mem[0], s.mem[1] = value, 0
        if not self.coherent:
            s.dma.push(s.offset, SIGNAL_BYTES)
        return s

    def _wait(self, signal: Signal, value: int, timeout: float, pull_from: int = BOUNCE) -> None:
        self._open_check(f"wait on {signal.name}")
        t_end = time.perf_counter() + timeout
        if self.irq is not None:
            return self._wait_irq(signal, value, timeout, t_end)
        mem, poll = signal.mem, self._poll_reg
        if not self.coherent:  # one read of the signals in use (from pull_from on) per poll, no register read
            dma, end = self._signal_pages[0][0], PAGE - len(self._free_signals) * SIGNAL_BYTES
            poll = lambda: dma.pull(pull_from, end - pull_from)  # noqa: E731
        n, t_waves = 0, time.perf_counter() + WAVE_CHECK_AFTER
        while mem[0] < value:
            poll()  # coherent: a register read; on the simulator's stepped clock it lets the GPU run
            n += 1
            now = time.perf_counter()   # every poll: one poll may take long (a simulated GPU running a kernel)
            if n & 63 == 0 or now > t_end:
                self._check_faults()
                if now > t_waves:          # a halted wave never resumes: say so now, not at the timeout
                    t_waves = now + WAVE_CHECK_AFTER
                    if self._wave_halted():
                        raise HCQFault(self._hang_report(signal, value, timeout, "a shader wave halted"))
                if now > t_end:
                    raise HCQTimeout(self._hang_report(signal, value, timeout))
        # The hubs answer a faulting access with the default page (set_fault_enable_default): the kernel
        # or copy completes and signals; only the IH ring tells (gmc_v11_0_process_interrupt).
        self._check_faults(done=True)
        if self.publisher is not None and self.publisher.inline:
            self.publisher.tick()

    def _wait_irq(self, signal: Signal, value: int, timeout: float, t_end: float) -> None:
        """_wait blocked on the MSI eventfd (amdrv.irq): each interrupt, or every WAVE_CHECK_AFTER without
        one, the fence, the IH (faults, thermal alerts), the waves and the timeout are checked as a polled
        wait checks them. A fence found done with no interrupt since the last check is amdgpu's fence
        fallback: said once per wait (InterruptLost), and counted."""
        mem, waits = signal.mem, self.irq
        t_waves, woke, since = time.perf_counter() + WAVE_CHECK_AFTER, True, time.perf_counter()
        while mem[0] < value:
            now = time.perf_counter()
            woke = waits.wait(min(t_end, t_waves) - now)
            if mem[0] >= value:
                break
            self._check_faults()
            now = time.perf_counter()
            if now > t_waves:
                t_waves = now + WAVE_CHECK_AFTER
                if self._wave_halted():
                    raise HCQFault(self._hang_report(signal, value, timeout, "a shader wave halted"))
            if now > t_end:
                raise HCQTimeout(self._hang_report(signal, value, timeout))
            if woke:
                since = now
        if not woke and not waits.wait(irq.LATE_IRQ_S):   # found done by a periodic check, and no interrupt
            waits.fallbacks += 1
            warnings.warn(f"{self.name}: {signal.name} reached {value} with no interrupt in "
                          f"{time.perf_counter() - since:.2f} s (found by the fallback check): the interrupt "
                          "was lost or its source is off; waits take that long until it comes back",
                          irq.InterruptLost, stacklevel=3)
        self._check_faults(done=True)

    def _check_faults(self, done: bool = False) -> None:
        gmc = self.gpu.gmc
        for iv in self._ivs():
            if self.thermal.handle(self.gpu.smu, iv):
                continue
            fault = gmc.fault_from_iv(iv)
            if fault is not None:
                how = ("the work completed with the faulting accesses sent to the default page, so its results "
                       "are wrong" if done else "the queue that faulted stopped")
                raise HCQFault(f"{self.name}: {fault}; {how} ({self._queue_state()}); "
                               "call recover() before the next launch")
        news = self.thermal.unreported()
        if news:      # the driver's next call after a thermal interrupt says so
            warnings.warn(f"{self.name}: {news}", monitor.ThermalAlert, stacklevel=3)

    def _queue_state(self) -> str:
        with self.gfxoff.awake():       # HQD and SDMA registers are GC registers
            return "; ".join(f"{q.name}: {q.state()}"
                             for q in (self.compute, self.sdma))

    def _hang_report(self, signal: Signal, value: int, timeout: float, what: str = "") -> str:
        fault = self.gpu.gmc.decode_fault("GC")      # with GFX held on (gmc.gc_awake)
        f = f"; fault: {fault}" if fault else "; no VM fault latched"
        waves = self._wave_report()
        waited = f"did not reach {value}, {what} " if what else f"did not reach {value} within {timeout:g} s "
        return (f"{self.name}: {signal.name} {waited}(it reads {signal.value}): {self._queue_state()}{f}; {waves}; "
                f"call recover() to reset the engines")

    def _read_wave(self, slot: int, ix: int) -> int:
        """One ixSQ_WAVE_* register of a wave slot (gfx_v11_0.c wave_read_ind: SQ_IND_INDEX WAVE_ID | INDEX)."""
        self.gc.SQ_IND_INDEX.write(slot | ix << 16)
        return self.gc.SQ_IND_DATA.read()

    def _waves(self, slots: range) -> list[tuple]:
        """(slot, SQ_WAVE_STATUS, PC, SQ_WAVE_TRAPSTS, EXEC_LO) of the valid waves of SE 0, SA 0, WGP 0
        (selected through GRBM_GFX_INDEX as gfx_v11_0_select_se_sh does; broadcast again after)."""
        gc, out = self.gc, []
        with self.gfxoff.awake():       # GC registers: GFX must be powered (amdgpu_gfx_off_ctrl)
            gc.GRBM_GFX_INDEX.write(0)
            try:
                self._wave_slots(slots, out)
            finally:
                gc.GRBM_GFX_INDEX.write(0xE0000000)  # regGRBM_GFX_INDEX_DEFAULT: broadcast
        return out

    def _wave_slots(self, slots: range, out: list) -> None:
        for w in slots:
            st = self._read_wave(w, IX_SQ_WAVE_STATUS)
            if st & SQ_WAVE_STATUS_VALID:
                pc = self._read_wave(w, IX_SQ_WAVE_PC_LO) | self._read_wave(w, IX_SQ_WAVE_PC_HI) << 32
                out.append((w, st, pc, self._read_wave(w, IX_SQ_WAVE_TRAPSTS),
                            self._read_wave(w, IX_SQ_WAVE_EXEC_LO)))

    def _wave_halted(self) -> bool:
        return any(st & SQ_WAVE_STATUS_HALT for _, st, *_ in self._waves(range(1)))

    def _wave_report(self) -> str:
        """What the SQ shows of the waves still resident: where each stopped and why, named by kernel and
        instruction from the loaded code objects."""
        waves = self._waves(range(32))
        if not waves:
            return "no shader wave resident (SE0 SA0 WGP0)"
        out = []
        for w, st, pc, trap, ex in waves[:4]:
            state = "halted" if st & SQ_WAVE_STATUS_HALT else "running"
            why = ("illegal instruction (SQ_WAVE_TRAPSTS.ILLEGAL_INST)" if trap & SQ_WAVE_TRAPSTS_ILLEGAL_INST
                   else f"SQ_WAVE_TRAPSTS {trap:#x}" if trap else
                   "no exception in SQ_WAVE_TRAPSTS (a simulated GPU records why in its error log)"
                   if st & SQ_WAVE_STATUS_HALT else "")
            out.append(f"wave {w} {state} at PC {pc:#x} ({self._code_at(pc)}), EXEC {ex:#010x}"
                       + (f": {why}" if why else ""))
        more = f" and {len(waves) - 4} more" if len(waves) > 4 else ""
        return "SQ (SE0 SA0 WGP0): " + "; ".join(out) + more

    def _code_at(self, pc: int) -> str:
        """kernel+offset: instruction, for a PC inside a loaded program."""
        from rdna3 import decode
        # the newest first: an older entry may be a freed image whose addresses a newer program now uses
        for va, size, co in reversed(self._code_images):
            if va <= pc < va + size:
                off = pc - va
                for k in co.kernels.values():
                    if k.code_address <= off < k.code_address + len(k.code):
                        try:
                            text = str(decode(k.code, off - k.code_address))
                        except Exception as e:  # noqa: BLE001 - what the hardware could not decode either
                            text = f"undecodable ({e})"
                        return f"kernel {k.name}+{off - k.code_address:#x}: {text}"
                return f"code object at {va:#x}+{off:#x}"
        return "not in a loaded program"

    def recover(self) -> list[str]:
        """Resets the compute and copy engines and re-creates their queues (amdrv.queue.recover), drops
        what was in flight, and leaves the timeline at the last value handed out so synchronize()
        returns. Returns the faults that were pending, in words."""
        self._open_check("recover")
        with self.gfxoff.awake(), self._ih_lock:    # recover reads the IH ring itself: faults the
            backlog, self._iv_backlog = self._iv_backlog, []     # publisher's thread set aside first
            faults = [str(f) for f in map(self.gpu.gmc.fault_from_iv, backlog) if f is not None]
            faults += self.gpu.recover()
            if self.irq is not None:     # the reset's engines come back with their interrupts off
                self.irq.sources(True)
        self.timeline.value = self.timeline_submitted = self.timeline_value
        if self.launch_fence is not None:
            self.launch_fence.value = self.launch_fence_value
        self.arena.restart()
        if self._ring_slots is not None:
            self._ring_slots.reset()
        return faults

    # ------------------------------------------------------------------ programs
    def compile_opencl(self, source: str, opt: str = "-O2") -> bytes:
        """OpenCL C -> a code object for this GPU's gfx target, for program(code, kernel_name): clang-15
        with the shipped work-item header, cached under the cache root (rdna3.opencl)."""
        return opencl.compile_opencl(source, mcpu=self.gpu.dev.chip.gfx_target, opt=opt)

    def program(self, code_object, name: str) -> Program:
        self._open_check("program")
        try:
            co = code_object if isinstance(code_object, CodeObject) else CodeObject(bytes(code_object))
            kern = co.kernel(name)
        except CodeObjectError as e:
            raise HCQError(f"{self.name}: {e}") from None
        if not kern.descriptor.wave32:
            raise HCQError(f"{self.name}: kernel {name} is wave64; the AM HCQ backend launches wave32 kernels: build "
                           "it without -mwavefrontsize64 (gfx11 code is wave32 by default)")
        layout = ArgLayout(name, kernel_args(kern.metadata.get(".args", [])), kern.kernarg_size, device=self)
        units = scratch.wavesize_units(kern)
        if units:    # private memory: the device's scratch buffer, grown when this kernel needs more
            self._scratch = scratch.ring_for(self, self._scratch, units, name)
        image = self._load_image(co)
        self._code_images = [c for c in self._code_images if c[0] != image.va] + [(image.va, image.size, co)]
        try:
            k = _Kernel(self.gc, kern, image, layout, self._scratch if units else None)
        except BaseException:
            self.free(image)
            raise
        return Program(self, name, layout, k, k.group, kern.metadata.get(".max_flat_workgroup_size", 1024))

    def _load_image(self, co: CodeObject) -> Buffer:
        end = max(va + memsz for va, _, _, memsz in co.segments)
        buf = self.alloc(end)
        image = bytearray(end)
        for va, off, filesz, _ in co.segments:
            image[va:va + filesz] = co.data[off:off + filesz]
        self.copyin(buf, image)
        return buf

    # ------------------------------------------------------------------ queues
    def compute_queue(self) -> AMComputeQueue:
        return AMComputeQueue(self)

    def copy_queue(self) -> AMCopyQueue:
        return AMCopyQueue(self)

    def _write_launch(self, k: _Kernel, layout: ArgLayout, args, g, l_) -> int:
        """Writes the dispatch packet and kernargs into a new launch slot; returns the slot's GPU address.
        The hot path of every launch: locals only, one pack_into each for kernargs and packet."""
        a = self.arena
        at = a.at
        if at + k.slot > a.size:
            at = self._wrap()
        a.at = at + k.slot
        if at < a.lo:      # what to push where DMA memory is not coherent (USB)
            a.lo = at
        if at + k.slot > a.hi:
            a.hi = at + k.slot
        mem = a.mem
        layout.pack_into(mem, at + PACKET_BYTES, args)
        va = a.va + at
        write_dispatch(mem, at, k, va, g, l_)
        return va

    def _wrap(self) -> int:
        """The arena is full: start over at 0 once the launches that used that memory, the last lap's, are done
        (their waves read their kernargs while they run): the largest timeline value submitted, which every
        submitted launch's queue signals after it (AMComputeQueue._submit). A value taken for a queue not
        submitted yet is not waited for: that queue's slots are written again at its submit if this lap took them
        (_own_slots)."""
        a = self.arena
        a.push()
        self._launches_done()
        a.restart()
        return 0

    def _launches_done(self) -> None:
        """Waits for every launch submitted so far: the largest timeline value submitted, and the launch fence
        of queues with launches that signal no timeline value (AMComputeQueue._launch_fence)."""
        if self.timeline_submitted:
            self.timeline.wait(self.timeline_submitted)
        if self.launch_fence_value and self.launch_fence.mem[0] < self.launch_fence_value:
            self.launch_fence.wait(self.launch_fence_value)

    def _kernarg_arena(self, size: int) -> _Arena:
        """Launch slots of size bytes for one user (a graph, which patches them in place at each replay), kept
        for the device's lifetime as graph indirect buffers are: the launch arena's end while it keeps an
        eighth of its memory for the round robin (no new memory: the bridge's SRAM is scarce), once the
        launches that used that end are done; else memory of their own."""
        a = self.arena
        if a.size - size >= (ARENA_BYTES if self.coherent else ARENA_BYTES_BRIDGE) // 8:
            self._launches_done()
            return a.take_end(size)
        own = _Arena(self.gpu, size)
        self._host_keep.append((own.buf, own.map))
        return own

    def _launch(self, prog: Program, args, global_size, local_size, wait: bool, timeout) -> float | None:
        if self._closed:
            self._open_check(f"launch of {prog.name}")
        g, l_ = prog.check_sizes(global_size, local_size)
        if self._ring_slots is not None and self._ring_slots.fits(prog.handle):
            self._ring_launch(prog, args, g, l_, wait)
        else:
            q = AMComputeQueue(self)
            if wait:
                t0, t1 = self._timing
                q.timestamp(t0)
                q.exec(prog, args, g, l_)
                q.timestamp(t1)
            else:
                q.exec(prog, args, g, l_)
            q.signal(self.timeline, self.next_timeline())
            q._submit()
        if wait:
            self.timeline.wait(self.timeline_submitted, timeout)    # this launch's value, submitted last
            t0, t1 = self._timing
            return (t1.mem[1] - t0.mem[1]) / XCLK_HZ
        return None

    def _ring_launch(self, prog: Program, args, g, l_, wait: bool) -> None:
        """_launch with the launch's slot in the compute ring (RingSlots, the open bridge firmware): before the
        kernel the wait behind a bridge copy-in and the first timestamp, after it the second and the signal."""
        pre, post = AMComputeQueue(self), AMComputeQueue(self)
        gate = self._bridge.pending() if self._bridge is not None else None
        if gate is not None:
            pre.wait(*gate)
        if wait:
            pre.timestamp(self._timing[0])
            post.timestamp(self._timing[1])
        post.signal(self.timeline, self.timeline_value + 1)    # the value RingSlots.submit takes once packed
        self._ring_slots.submit(prog.handle, prog.layout, args, g, l_, pre.buf, post.buf)

    # ------------------------------------------------------------------ graphs (amdrv.hcq.graph builds and replays)
    def _host_copy(self, dwords: array) -> tuple[int, int]:
        """dwords copied into new host memory the GPU reaches: (GPU address, dword count), for an IB."""
        dma = placement.host_written(self.gpu, _pages(len(dwords) * 4), "graph indirect buffer")
        m = self.gpu.gmc.map_system(dma)
        dma.view[:len(dwords) * 4] = dwords.tobytes()
        dma.push()
        self._host_keep.append((dma, m))
        return m.va, len(dwords)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for buf in list(self._buffers):
            if buf.finalizer is not None:
                buf.finalizer.detach()
            buf.release(f"belonged to {self.name}, which was closed")
        self._buffers.clear()
        self._dropped.clear()    # the GPU's memory manager goes with the device
        if self.publisher is not None:
            self.publisher.stop()
        self.gfxoff.stop()                  # fini halts GFX: it must be powered, and stay so
        if self.irq is not None:
            self.irq.disable()
        self.gpu.ih.move_wptr_writeback()   # back to VRAM: the signal page goes with this device
        if self._bridge is not None:        # its windows are no longer the function's to take back
            self._bridge.detach()
        self.gpu.fini()


def _bytes_of(data) -> memoryview:
    """copyin's bytes of data: a bytes-like object as it is; a strided view (a transposed or sliced numpy array)
    in its logical, C order, as numpy's tobytes() gives them (a byte cast refuses anything not C-contiguous)."""
    if isinstance(data, (bytes, bytearray)):
        return memoryview(data)
    mv = memoryview(data)
    return mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())


def _dropped(dev_ref, mapping) -> None:
    """A buffer was collected: its memory is freed at the device's next alloc, once work submitted
    before the drop (which may still use it) is done. Runs in the garbage collector: no GPU access."""
    dev = dev_ref()
    if dev is not None and not dev._closed:
        dev._dropped.append((mapping, dev.timeline_submitted))
