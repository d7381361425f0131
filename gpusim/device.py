"""The simulated GPU's core: VRAM, the register space, DMA over the bus, interrupts and the clock.

Every hardware block model (NBIO, HDP, SMU, PSP, GMC, IH, ...) is a `Block` attached to one `SimGPU`.
The framework API for block authors:

    class PSP(Block):
        name = "PSP"
        def attach(self):                       # once, when the block joins the device
            self.on_write("MP0", "MP0_SMN_C2PMSG_64", self._ring_cmd)   # by name, bound methods only
            self.on_read("MP0", "MP0_SMN_C2PMSG_81", self._sos_alive)
        def reset(self):                        # power-on state; also after a mode1 reset
            self.set("MP0", "MP0_SMN_C2PMSG_35", 0x80000000)           # storage, no handlers run
        def step(self):                         # optional: one clock step of background work
            ...
        def _ring_cmd(self, value):             # runs before the value is stored;
            self.dev.schedule(10, self._done)   # return an int to store that instead (W1C etc.)
        def _sos_alive(self):                   # returns the value the driver reads
            return 0

Registers are named as in the generated tables (`amdrv.regs.load`), resolved through the bases the IP
discovery table declares for that IP instance (`SimGPU.reg_addr`), so a block and the driver can only
agree on an address if both follow the same upstream facts. Handlers must be bound methods (or
functools.partial of them) so a device pickles (gpusim.persist). Registers nobody handles are plain
storage: a read returns the last write; after power-on, the register's power-on value where upstream
publishes one (`<block>_default.h`, through the generated table's `power_on_values`: gc_11_0_0 only), else 0.
`dev.power_on_value(ip, name, inst)` gives it to blocks that keep banked copies (HQDs, SH_MEM per VMID).

- `dev.regs.read(dword)` / `write(dword, v)`: the whole register space (beyond what BAR5 maps, as the
  RSMU/PCIE index-data pairs reach it), with handlers; `peek`/`poke` bypass handlers.
- `dev.get(ip, name, inst=0)`, `dev.set(ip, name, value, inst=0)`: storage by name, no handlers.
- `dev.vram`: `read(addr, n)`, `write(addr, data)`, `read32/write32`, `view` (a memoryview of all VRAM).
- `dev.dma_read(bus_addr, n)`, `dev.dma_write(bus_addr, data)`: host memory through the bus. Raises
  `DMAError` (after recording it in `dev.errors`) when bus mastering is off or the address is not mapped:
  the caller decides what its engine does with a failed transfer (hang, error status).
- `dev.post_interrupt(IVEntry(...))`: hands an interrupt to the IH model (`dev.ih_sink`); counted as
  dropped when no IH model is attached. `dev.send_msi()`: the function's MSI message (the IH raises it
  after an IV); `dev.msi_sink` (the host side: the provider's eventfd) hears it, `dev.msis_sent` counts.
- `dev.schedule(steps, fn, *args)`: run fn after `steps` clock steps. `dev.schedule_poll(steps, key, fn, skip,
  *args)`: a look at something that only other events change (memory, a plain register); `dev.step(n)`
  skips the looks that would find nothing (`SimGPU.fast_forward`; tests/gpusim/test_clock.py shows the result is
  the same as running them). `dev.step(n)` advances; in the
  stepped mode (default, deterministic) a BAR5 read also steps once, so a driver polling a status
  register makes progress exactly as it would on hardware. `dev.start_async()` steps from a thread instead;
  every access takes `dev.lock`.
- `dev.error(block, message)`: records a hardware-visible failure (what a real GPU would log or drop).
- `dev.blocks[name]`: the attached blocks. Cross-block hooks: `blocks["NBIO"].on_doorbell(client, fn)`
  hands an engine ("CP", "SDMA", "IH") the BAR2 doorbell dwords the S2A routing entries send it (fn(index,
  value); only while the driver has enabled the doorbell aperture); `blocks["SMU"].firmware_loaded(version)` starts the SMU firmware (the PSP calls it);
  `blocks["SMU"].set_activity("gfx" | "mem", 0..1)` feeds the power model; `blocks["HDP"].unflushed_writes`
  counts BAR0 writes since the last HDP flush; `blocks["GMC"].mc_read/mc_write` reach MC addresses.
- Block state must pickle: keep bound methods, plain data and RegisterDef lookups, not lambdas or locks.
- gpusim.board.build assembles a board (BLOCKS lists the block modules); gpusim.board.mode1_reset puts it
  back to power-on.
"""
from __future__ import annotations

import ctypes
import functools
import heapq
import mmap
import os
import signal
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from amdrv import regs as regtables
from gpusim import discovery

MAP_NORESERVE = 0x4000  # Linux; not exported by the mmap module. A "24 GiB" VRAM must not be charged.
CHUNK = 2 << 20         # VRAM persistence granularity: only touched, non-zero chunks are saved


_PAGEMAP: list[tuple[int, int]] = []


def _pagemap() -> int:
    """/proc/self/pagemap, opened once per process (page flags stay readable without privileges)."""
    if not _PAGEMAP or _PAGEMAP[0][1] != os.getpid():
        _PAGEMAP[:] = [(os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC), os.getpid())]
    return _PAGEMAP[0][0]


class _CtrlC:
    """Ctrl-C while the main thread holds a device's lock waits for the lock's release (see WorkLock)."""
    depth = 0           # the main thread's nesting of WorkLock sections
    pending = False     # a SIGINT came inside one


def _on_sigint(signum, frame) -> None:
    if _CtrlC.depth:
        _CtrlC.pending = True
        return
    signal.default_int_handler(signum, frame)


def _defer_ctrl_c() -> None:
    """Installs _on_sigint where Python's own SIGINT handler is (a program's own handler is left alone)."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


class WorkLock:
    """`dev.lock`: a re-entrant lock, and the unit of the device's work a Ctrl-C cannot cut in two.

    Everything the device does runs under it (a register access and the handlers it triggers, a clock step
    and the events due in it, a save). On hardware a driver's Ctrl-C stops the driver, never the firmware
    half way through a command; here the device runs in the driver's thread, so a KeyboardInterrupt raised
    inside a PSP command would drop the command, and the exit handler would save that state (a bootloader
    that never answers again). So a SIGINT that comes while the main thread is inside waits, and is raised
    when the outermost section ends, with the device's state whole."""

    __slots__ = ("_lock",)

    def __init__(self):
        self._lock = threading.RLock()

    def __enter__(self):
        self._lock.acquire()
        if threading.get_ident() == _MAIN_IDENT:
            _CtrlC.depth += 1
        return self

    def __exit__(self, *exc) -> None:
        interrupted = False
        if threading.get_ident() == _MAIN_IDENT:
            _CtrlC.depth -= 1
            interrupted = _CtrlC.depth == 0 and _CtrlC.pending
        self._lock.release()
        if interrupted:
            _CtrlC.pending = False
            raise KeyboardInterrupt


_MAIN_IDENT = threading.main_thread().ident


class _Poll:
    """A poll in the event queue (SimGPU.schedule_poll): its look, its skip, the steps between looks, and the
    value of the device's `_quiet` when its poller last found nothing (equal to it now: nothing has happened
    since)."""
    __slots__ = ("fn", "skip", "period", "quiet")

    def __init__(self, fn, skip, period: int):
        self.fn, self.skip, self.period, self.quiet = fn, skip, period, -1

    def __getstate__(self):
        return (self.fn, self.skip, self.period)

    def __setstate__(self, state):
        self.fn, self.skip, self.period = state
        self.quiet = -1


class DMAError(Exception):
    """A device-initiated access to host memory that the bus refused."""


@dataclass
class SimError:
    step: int
    block: str
    message: str

    def __str__(self) -> str:
        return f"[step {self.step}] {self.block}: {self.message}"


@dataclass
class IVEntry:
    """What an interrupt source posts; the IH model encodes it as the IH v6 ring's 32-byte IV."""
    client_id: int
    source_id: int
    src_data: tuple = (0, 0, 0, 0)
    ring_id: int = 0
    vmid: int = 0
    vmid_src: int = 0
    pasid: int = 0
    node_id: int = 0
    timestamp: int = 0  # filled from the device clock when posted


class VRAM:
    """Device memory, sparse: a memfd the OS fills with pages on first touch, so a 24 GiB device costs
    what is touched. Two mappings of it: `view`, the memory itself as the GPU's engines reach it
    (read/write/read32/write32), and `host_view`, what the host sees through BAR0 and MM_DATA: a
    copy-on-write mapping of the same memory, so a host write lands in a private copy of its page and
    stays invisible to the engines until the HDP flush merges it (`host_flush`, gpusim.hdp). Pages the
    host did not write show the memory as the engines left it. Being a real mapping, `host_view` is what
    BAR0's `direct()` hands the driver, as a mapped PCIe BAR is."""

    def __init__(self, size: int):
        self.size = size
        self._fd = os.memfd_create("gpusim-vram", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size, flags=mmap.MAP_SHARED)
        self._host = mmap.mmap(self._fd, size, flags=mmap.MAP_PRIVATE | MAP_NORESERVE)
        weakref.finalize(self, os.close, self._fd)
        self.view = memoryview(self._map)
        self.host_view = memoryview(self._host)
        self._host_base = ctypes.addressof(ctypes.c_char.from_buffer(self._host))
        self.host_pending = 0      # host-written pages merged by the last flush, for tests
        self.writes = 0            # engine writes (SimGPU._fingerprint)
        self.protected: tuple[int, int] | None = None   # [first, end) no host write reaches (gpusim.vbios)
        self._refused = None

    def protect(self, span: tuple[int, int] | None, refused=None) -> None:
        """A range the host's writes never reach (the firmware-reserved top, gpusim.vbios): the HDP flush
        drops what the host wrote there and calls refused(what) once per flush that had some."""
        self.protected, self._refused = span, refused

    def is_protected(self, addr: int, n: int) -> bool:
        p = self.protected
        return p is not None and addr < p[1] and addr + n > p[0]

    def _check(self, addr: int, n: int) -> None:
        if addr < 0 or addr + n > self.size:
            raise IndexError(f"VRAM access of {n} bytes at {addr:#x} is outside the {self.size:#x}-byte VRAM")

    def read(self, addr: int, n: int) -> bytes:
        self._check(addr, n)
        return bytes(self.view[addr:addr + n])

    def write(self, addr: int, data) -> None:
        """An engine's write. Where the host has a write of its own pending in the page, the host's copy
        of the page takes the engine's bytes too, so BAR0 reads see them and the flush does not undo them
        (the host's pending bytes are then lost where both wrote: assumption, a race either way)."""
        n = len(data)
        self._check(addr, n)
        self.writes += 1
        self.view[addr:addr + n] = data
        if n:
            for page in self._host_pages(addr >> 12, ((addr + n - 1) >> 12) + 1):
                a, b = max(addr, page << 12), min(addr + n, (page + 1) << 12)
                self.host_view[a:b] = self.view[a:b]

    def read32(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, 4), "little")

    def write32(self, addr: int, value: int) -> None:
        self.write(addr, (value & 0xFFFFFFFF).to_bytes(4, "little"))

    # -- the host's side (BAR0, MM_DATA) ---------------------------------------------------------------
    def host_read(self, addr: int, n: int) -> bytes:
        self._check(addr, n)
        return bytes(self.host_view[addr:addr + n])

    def host_write(self, addr: int, data) -> None:
        n = len(data)
        self._check(addr, n)
        self.host_view[addr:addr + n] = data

    def _host_pages(self, first: int, end: int) -> list[int]:
        """Pages in [first, end) the host wrote since its last flush: private (anonymous) pages of the
        copy-on-write mapping, from /proc/self/pagemap (bit 63 present, bit 61 file page)."""
        raw = os.pread(_pagemap(), 8 * (end - first), ((self._host_base >> 12) + first) * 8)
        if end - first <= 4:
            return [first + i for i in range(end - first)
                    if raw[8 * i + 7] & 0xA0 == 0x80]   # bits 63 and 61 of each little-endian entry
        e = np.frombuffer(raw, np.uint64)
        anon = (e >> np.uint64(63)) & ~(e >> np.uint64(61)) & np.uint64(1)
        return (np.flatnonzero(anon) + first).tolist()

    def _extents(self):
        """Byte ranges of the memory anyone has touched (the memfd's data; holes are never-written VRAM)."""
        pos = 0
        while pos < self.size:
            try:
                start = os.lseek(self._fd, pos, os.SEEK_DATA)
            except OSError:
                return
            pos = os.lseek(self._fd, start, os.SEEK_HOLE)
            yield start, pos

    def host_flush(self, drop: bool = True) -> int:
        """Merges what the host wrote since the last flush into the memory: the bytes of each private page
        that differ from the memory. With drop, the private copies are released so the host sees the
        memory again (a flush from the engines' clock thread keeps them: the host may be writing them).
        Returns how many pages were merged."""
        merged = 0
        for start, end in self._extents():
            pages = self._host_pages(start >> 12, (end + 4095) >> 12)
            merged += len(pages)
            i = 0
            while i < len(pages):          # runs of consecutive pages: one compare and one madvise each
                j = i + 1
                while j < len(pages) and pages[j] == pages[j - 1] + 1:
                    j += 1
                a, b = pages[i] << 12, (pages[j - 1] + 1) << 12
                h = np.frombuffer(self.host_view[a:b], np.uint8)
                m = np.frombuffer(self._map, np.uint8, b - a, a)
                diff = h != m
                if self.is_protected(a, b - a):     # the host's bytes there never reach memory
                    lo, hi = max(a, self.protected[0]) - a, min(b, self.protected[1]) - a
                    if diff[lo:hi].any() and self._refused is not None:
                        first = a + lo + int(np.flatnonzero(diff[lo:hi])[0])
                        self._refused(f"a host write at VRAM {first:#x}")
                    diff[lo:hi] = False
                if diff.any():
                    m[diff] = h[diff]
                if drop:
                    self._host.madvise(mmap.MADV_DONTNEED, a, b - a)
                i = j
        self.host_pending = merged
        return merged

    def resident_bytes(self) -> int:
        return int(self._resident_pages().sum()) * mmap.PAGESIZE

    def _resident_pages(self) -> np.ndarray:
        """Pages per CHUNK the OS has materialized (mincore), so saving never reads untouched gigabytes.
        Where mincore is unavailable every page counts as touched."""
        page = mmap.PAGESIZE
        npages = (self.size + page - 1) // page
        vec = (ctypes.c_ubyte * npages)()
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
            if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(self.size), vec) != 0:
                raise OSError(ctypes.get_errno())
            pages = np.frombuffer(vec, dtype=np.uint8) & 1
        except (OSError, AttributeError):
            pages = np.ones(npages, dtype=np.uint8)
        return np.add.reduceat(pages.astype(np.int64), np.arange(0, npages, CHUNK // page))

    def chunks(self):
        """(chunk index, bytes) of every touched chunk that is not all zero."""
        for i in np.flatnonzero(self._resident_pages()).tolist():
            a = i * CHUNK
            mv = self.view[a:min(a + CHUNK, self.size)]
            if np.frombuffer(mv, dtype=np.uint8).any():
                yield i, bytes(mv)

    def __getstate__(self):
        self.host_flush()   # what the host wrote drains into the memory (assumption: the write buffer empties)
        return {"size": self.size, "chunks": dict(self.chunks())}

    def __setstate__(self, state):
        self.__init__(state["size"])
        for i, data in state["chunks"].items():
            self.write(i * CHUNK, data)


@functools.lru_cache(maxsize=None)
def _power_on_map(instances: tuple) -> tuple[dict[int, int], frozenset]:
    """For (register table, bases) of each IP instance: ({address: non-zero power-on value}, addresses
    with a published power-on value). Computed once per layout: a device is built often (tests)."""
    out: dict[int, int] = {}
    clash: set[int] = set()
    published: set[int] = set()
    for table, bases in dict.fromkeys(instances):
        t = regtables.load(table)
        values = t.power_on_values
        if values is None:
            continue
        for name in t.names():
            d = t[name]
            if d.base_idx >= len(bases):
                continue
            a = bases[d.base_idx] + d.offset
            published.add(a)
            value = values.get(name, 0)
            if not value:
                continue
            if out.get(a, value) != value:
                clash.add(a)
            out[a] = value
    for a in clash:
        del out[a]
    return out, frozenset(published)


class RegisterSpace:
    """All registers as dword addresses. Handlers are per address; everything else is storage."""

    def __init__(self):
        self.store: dict[int, int] = {}
        self.defaults: dict[int, int] = {}     # power-on values that are not 0 (SimGPU._power_on_values)
        self.read_handlers: dict[int, object] = {}
        self.write_handlers: dict[int, object] = {}
        self.writes = 0         # every write and poke: what a poll's no-change check watches (SimGPU._fingerprint)

    def read(self, addr: int) -> int:
        fn = self.read_handlers.get(addr)
        if fn is not None:
            return fn() & 0xFFFFFFFF
        v = self.store.get(addr)
        return self.defaults.get(addr, 0) if v is None else v

    def write(self, addr: int, value: int) -> None:
        value &= 0xFFFFFFFF
        self.writes += 1
        fn = self.write_handlers.get(addr)
        if fn is not None:
            stored = fn(value)
            if stored is not None:
                value = stored & 0xFFFFFFFF
        self.store[addr] = value

    def peek(self, addr: int) -> int:
        v = self.store.get(addr)
        return self.defaults.get(addr, 0) if v is None else v

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "defaults"}   # the owning SimGPU restores them

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("writes", 0)
        self.defaults = {}

    def poke(self, addr: int, value: int) -> None:
        self.writes += 1
        self.store[addr] = value & 0xFFFFFFFF


class Block:
    """A hardware block model. Subclasses set `name` and override attach/reset/step as needed."""
    name = "block"

    def __init__(self, dev: SimGPU):
        self.dev = dev

    def attach(self) -> None:
        """Registers handlers; runs once when the block joins the device."""

    def reset(self) -> None:
        """Puts the block in its power-on state; runs at power-on and after a mode1 reset."""

    # step(self) -> None may be defined by blocks that do background work each clock step.

    def on_read(self, ip: str, name: str, fn, inst: int = 0) -> None:
        self.dev.regs.read_handlers[self.dev.reg_addr(ip, name, inst)] = fn

    def on_write(self, ip: str, name: str, fn, inst: int = 0) -> None:
        self.dev.regs.write_handlers[self.dev.reg_addr(ip, name, inst)] = fn

    def get(self, ip: str, name: str, inst: int = 0) -> int:
        return self.dev.get(ip, name, inst)

    def set(self, ip: str, name: str, value: int, inst: int = 0) -> None:
        self.dev.set(ip, name, value, inst)

    def error(self, message: str) -> None:
        self.dev.error(self.name, message)


class SimGPU:
    """One simulated GPU. Assembled with its blocks by gpusim.board.build; reached by drivers only
    through gpusim.provider's PCIFunction."""

    STEP_NS = 1000  # simulated time per clock step

    def __init__(self, chip: str = "navi31", vram_size: int = 1 << 30, harvest: tuple = ()):
        self.chip = chip
        self.layout = discovery.layout(chip, harvest)
        self.vram = VRAM(vram_size)
        self.regs = RegisterSpace()
        self.blocks: dict[str, Block] = {}
        self.errors: list[SimError] = []
        self.gfx_gate = None    # the SMU while GFXOFF may be on: GC register accesses ask it (gpusim.smu)
        self.interrupts_dropped = 0
        self.ih_sink = None          # set by the IH model: fn(IVEntry)
        self.msis_sent = 0
        self.bus = None              # set when plugged into a gpusim.bus.Bus
        self.pci = None              # the config space (gpusim.pci.ConfigSpace), set by the board
        self.steps = 0
        self._events: list = []
        self._seq = 0
        self._poll_seq = 0
        self._quiet = 0
        self.polls_skipped = 0      # looks step(n) skipped (fast_forward): for tests and benchmarks
        self.interrupts_posted = 0
        self.dma_writes = 0
        self.stepped = True
        self._init_runtime()
        self.regs.defaults = self._power_on_values()

    def _power_on_values(self) -> dict[int, int]:
        """Dword address -> power-on value of every register of every modelled IP instance whose table
        has upstream defaults (gc_11_0_0_default.h: GC 11.0.0; Navi33's GC 11.0.2 uses the same table and
        values, an assumption). Registers sharing an address with different defaults take neither (0)."""
        return _power_on_map(tuple((e.table, e.bases) for e in self.layout.ips if e.table is not None))[0]

    @property
    def power_on_published(self) -> frozenset:
        """Addresses whose power-on value upstream publishes (0 included): the rest are 0 by assumption."""
        return _power_on_map(tuple((e.table, e.bases) for e in self.layout.ips if e.table is not None))[1]

    def power_on_value(self, ip: str, name: str, inst: int = 0) -> int:
        """A register's value after power-on or a mode1 reset (0 where upstream publishes none)."""
        return self.regs.defaults.get(self.reg_addr(ip, name, inst), 0)

    def _init_runtime(self) -> None:
        self.lock = WorkLock()
        _defer_ctrl_c()
        self._thread = None
        self._tables = {}
        self._addr_cache: dict[tuple, int] = {}
        self._steppers = [b for b in self.blocks.values() if hasattr(b, "step")]
        self.msi_sink = None    # the host's end of the MSI (gpusim.provider: an eventfd); not saved

    # -- blocks ---------------------------------------------------------------------------------
    def add(self, block: Block) -> Block:
        self.blocks[block.name] = block
        block.attach()
        block.reset()
        self._steppers = [b for b in self.blocks.values() if hasattr(b, "step")]
        return block

    def power_on_reset(self) -> None:
        """Every block back to its power-on state: register storage and pending work are lost. What
        survives in VRAM is not guaranteed by hardware (the simulator keeps it)."""
        with self.lock:
            self.regs.store.clear()
            self._events.clear()
            for b in self.blocks.values():
                b.reset()

    # -- registers --------------------------------------------------------------------------------
    def table(self, ip: str) -> regtables.RegisterTable:
        t = self._tables.get(ip)
        if t is None:
            t = self._tables[ip] = regtables.load(self.layout.register_table(ip))
        return t

    def reg_addr(self, ip: str, name: str, inst: int = 0) -> int:
        """Dword address of a register of one IP instance: bases[base_index] + offset, as amdgpu's
        SOC15_REG_OFFSET computes it from the discovered bases."""
        key = (ip, name, inst)
        a = self._addr_cache.get(key)
        if a is None:
            d = self.table(ip)[name]
            bases = self.layout.bases(ip, inst)
            if d.base_idx >= len(bases):
                raise LookupError(f"{self.chip} {ip}{inst}: {name} uses base index {d.base_idx} but "
                                  f"discovery declares {len(bases)} bases")
            a = self._addr_cache[key] = bases[d.base_idx] + d.offset
        return a

    def get(self, ip: str, name: str, inst: int = 0) -> int:
        a = self._addr_cache.get((ip, name, inst))     # reg_addr and RegisterSpace.peek, inlined: hot path
        if a is None:
            a = self.reg_addr(ip, name, inst)
        regs = self.regs
        v = regs.store.get(a)
        return regs.defaults.get(a, 0) if v is None else v

    def set(self, ip: str, name: str, value: int, inst: int = 0) -> None:
        self.regs.poke(self.reg_addr(ip, name, inst), value)

    def field(self, ip: str, name: str, field: str, inst: int = 0) -> int:
        """One field of a register's stored value."""
        f = self.table(ip)[name].fields[field]
        return (self.get(ip, name, inst) >> f.shift) & ((1 << f.width) - 1)

    # -- memory ---------------------------------------------------------------------------------
    @property
    def bus_master(self) -> bool:
        return bool(self.pci and self.pci.bus_master)

    def _dma_check(self, what: str, bus_addr: int, n: int) -> None:
        if not self.bus_master:
            self.error("BIF", f"DMA {what} of {n} bytes at bus address {bus_addr:#x} with bus mastering "
                              f"off (PCI command bit 2): the transfer did not happen")
            raise DMAError(f"{self.chip}: bus mastering is off; DMA {what} at {bus_addr:#x} refused")
        if self.bus is None:
            self.error("BIF", f"DMA {what} at {bus_addr:#x}: the device is not on a bus")
            raise DMAError(f"{self.chip}: not on a bus")

    def dma_read(self, bus_addr: int, n: int) -> bytes:
        self._dma_check("read", bus_addr, n)
        try:
            return self.bus.read(bus_addr, n)
        except DMAError as e:
            self.error("BIF", str(e))
            raise

    def dma_write(self, bus_addr: int, data) -> None:
        self.dma_writes += 1
        nbio = self.blocks.get("NBIO")
        if nbio is not None and nbio.selfring is not None and nbio.selfring_write(bus_addr, data):
            return   # the doorbell self-ring aperture (gpusim.nbio): it never reaches the bus
        self._dma_check("write", bus_addr, len(data))
        try:
            self.bus.write(bus_addr, data)
        except DMAError as e:
            self.error("BIF", str(e))
            raise

    # -- interrupts, errors -------------------------------------------------------------------------
    def post_interrupt(self, entry: IVEntry) -> None:
        entry.timestamp = entry.timestamp or self.steps * self.STEP_NS
        self.interrupts_posted += 1
        if self.ih_sink is None:
            self.interrupts_dropped += 1
            return
        self.ih_sink(entry)

    def send_msi(self) -> None:
        """The function's MSI: a memory write to the address the host gave the MSI capability, which only
        a function with MSI Enable and Bus Master Enable set sends (PCI Local Bus spec 6.8.1: MSI is a
        posted memory write; the command register's Bus Master Enable gates every upstream request)."""
        pci = self.pci
        if pci is None or not pci.msi_enabled or not pci.bus_master:
            return
        self.msis_sent += 1
        sink = self.msi_sink
        if sink is not None:
            sink()

    def error(self, block: str, message: str) -> None:
        self.errors.append(SimError(self.steps, block, message))

    # -- clock ----------------------------------------------------------------------------------
    # The event queue holds (due step, kind, order, seq, fn, args): kind 0 for plain events, in the order they
    # were scheduled; kind 1 for polls (schedule_poll), after the plain events due in the same step, in the
    # order of their pollers' keys. Polls have a place of their own so that skipping them (fast_forward) does
    # not change the order of anything else.
    fast_forward = True     # step(n) skips polls that would find nothing (a class-wide switch; tests set it)

    def schedule(self, steps: int, fn, *args) -> None:
        """Runs fn(*args) once `steps` clock steps have passed (0: at the next step)."""
        self._seq += 1
        heapq.heappush(self._events, (self.steps + max(steps, 0), 0, 0, self._seq, fn, args))

    def schedule_poll(self, steps: int, key: tuple, fn, skip, *args) -> None:
        """A poll: a block's look, `steps` (at least 1) from now and every `steps` after, at something it waits
        for (a word in memory, a register with no read handler) that changes only when something else happens.
        fn(*args) looks once and, when it finds nothing, schedules its next look with schedule_poll again (the
        same steps), changing nothing else but its own counters. skip(n, *args) does what n such looks would
        do without looking: it counts m <= n looks that found nothing (fewer where a retry limit makes a look
        act) and returns (m, the next look's args). `key` orders polls due in the same step (one key per
        poller, e.g. ("SDMA", 0)). With fast_forward, step(n) skips the looks of a poller that found nothing
        while nothing else has happened since: they would find the same nothing. The result is the same as
        running every look (tests/gpusim/test_clock.py)."""
        self._poll_seq += 1
        steps = max(steps, 1)
        heapq.heappush(self._events, (self.steps + steps, 1, key, self._poll_seq, _Poll(fn, skip, steps), args))

    def _fingerprint(self) -> tuple:
        """What moves when anything observable happens: registers written, events scheduled, errors recorded,
        interrupts posted, VRAM and host memory written."""
        return (self.regs.writes, self._seq, len(self.errors), self.interrupts_posted, self.vram.writes,
                self.dma_writes)

    def step(self, n: int = 1) -> None:
        with self.lock:
            if self._steppers:
                for _ in range(n):
                    self.steps += 1
                    self._run_due(self.steps, False)
                    for b in self._steppers:
                        b.step()
                return
            # Nothing works per step: jump from event to event (models that integrate over time, like the
            # SMU's thermals, read `now_ns`), so long waits cost nothing.
            end = self.steps + n
            self._run_due(end, self.fast_forward)
            self.steps = end

    def _run_due(self, end: int, skip: bool) -> None:
        """Runs the events due by step `end`, in order. With skip, the look of a poll whose poller found
        nothing, with nothing else run since (`_quiet`), is skipped (its skip()) as long as every event ahead
        of the look is such a poll too: then nothing has happened that the look could see. Stops before the
        first other event (which may change what the polls watch) and after step `end`."""
        events = self._events
        self._quiet += 1          # the host may have done anything since the last call
        while events and events[0][0] <= end:
            due, kind, key, seq, fn, args = heapq.heappop(events)
            if due > self.steps:
                self.steps = due
            if kind == 0:
                fn(*args)
                self._quiet += 1
                continue
            if skip and fn.quiet == self._quiet:
                quiet = self._quiet
                stop = min([(e[0], e[1], e[2]) for e in events if e[1] == 0 or e[4].quiet != quiet]
                           + [(end + 1, 0, 0)])
                # looks at due, due + period, ... ahead of `stop` in the queue's order
                last = stop[0] if (1, key) < stop[1:] else stop[0] - 1
                n = (last - due) // fn.period + 1 if last >= due else 0
                if n:
                    m, args = fn.skip(n, *args)
                    self.polls_skipped += m
                    due += m * fn.period
                    if m == n or due != self.steps:
                        self._poll_seq += 1
                        heapq.heappush(events, (due, 1, key, self._poll_seq, fn, args))
                        continue
            before, first = self._fingerprint(), self._poll_seq
            fn.fn(*args)
            again = [e for e in events if e[1] == 1 and e[3] > first] if self._poll_seq == first + 1 else ()
            if len(again) == 1 and again[0][2] == key and again[0][4].fn == fn.fn \
                    and self._fingerprint() == before:
                again[0][4].quiet = self._quiet       # it found nothing: its next looks may be skipped
            else:
                self._quiet += 1

    @property
    def now_ns(self) -> int:
        return self.steps * self.STEP_NS

    def start_async(self, period_s: float = 20e-6) -> None:
        """Steps from a background thread, like a device running on its own clock, so that races
        between the driver and the hardware show up. BAR accesses no longer step."""
        if self._thread:
            return
        self.stepped = False
        self._stop = threading.Event()

        def run():
            while not self._stop.is_set():
                self.step()
                time.sleep(period_s)
        self._thread = threading.Thread(target=run, name=f"gpusim-{self.chip}", daemon=True)
        self._thread.start()

    def driver_gone(self) -> None:
        """The driver closed the function and its DMA memory is freed (gpusim.provider): engines that run on
        their own meanwhile act on that now (a block's `driver_gone()`: SDMA's write-pointer polling)."""
        with self.lock:
            for b in list(self.blocks.values()):
                hook = getattr(b, "driver_gone", None)
                if hook is not None:
                    hook()

    def stop_async(self) -> None:
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.stepped = True

    def poll_tick(self) -> None:
        """Called by the register BAR on each read: in stepped mode a read is the driver waiting."""
        if self.stepped:
            self.step()

    # -- pickling (gpusim.persist) ----------------------------------------------------------------------
    def __getstate__(self):
        if self._thread:
            raise RuntimeError(f"{self.chip}: stop_async() before saving the device")
        s = dict(self.__dict__)
        for k in ("lock", "_thread", "_stop", "_tables", "_addr_cache", "_steppers", "bus", "msi_sink"):
            s.pop(k, None)
        return s

    def __setstate__(self, s):
        self.__dict__.update(s)
        self.__dict__.setdefault("gfx_gate", None)    # a state file saved before GFXOFF was modeled
        self.__dict__.setdefault("msis_sent", 0)
        for k in ("_poll_seq", "_quiet", "polls_skipped", "interrupts_posted", "dma_writes"):   # saved before polls
            self.__dict__.setdefault(k, 0)
        self._events = [e if len(e) == 6 else (e[0], 0, 0) + tuple(e[1:]) for e in self._events]
        heapq.heapify(self._events)
        self.bus = None
        self._init_runtime()
        self.regs.defaults = self._power_on_values()

