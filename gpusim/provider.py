"""The simulator as a pcie provider: `pcie.open_function("sim", "navi31", ...)` lands here.

    open_function(spec="navi31", *, chip=None, vram_size=None, small_bar=False, state=None, bus=None,
                  slot=None, fresh=False, async_clock=False, harvest=()) -> SimFunction

spec or chip is "navi31" or "navi33". Devices sit in the slots of a simulated host bus (gpusim.bus.HostBus):
`bus`, one its caller owns (a test, a benchmark), or else the process's default bus (default_bus(), the
one the device strings am:sim... use); one device per slot (by default the slot already holding that chip,
else the first free one). Devices outlive the functions opened on them: opening a slot again gives a new
driver instance the same device, as it left it (fresh=True powers a new one on instead). With `state`, a
file path, the device is loaded from that file when it exists (the file wins over the device in memory)
and saved to it on close, so a new process finds it as the last left it. vram_size, small_bar, harvest
((hw_id, instance) pairs for the discovery harvest table), scpm, driver_scratch_survives_reset,
fw_reserved_kb and vbios_rom_offset (gpusim.board.build) apply when a device is powered on.
"""
from __future__ import annotations

import atexit
import os
import warnings
import weakref
from pathlib import Path

from pcie.interface import BAR, DMABuffer, PCIError, PCIFunction
from pcie.lock import DeviceLock
from gpusim import board, bus as sim_bus, pci, persist
from gpusim.bus import SEGMENT, HostBus, host_memory
from gpusim.device import SimGPU

PCI_EXP_DEVCAP, PCI_EXP_DEVCAP_FLR = 0x04, 1 << 28   # include/uapi/linux/pci_regs.h
BUS = HostBus()     # the process's default bus: the device strings' GPUs (am:sim...), and any open without bus=


def default_bus() -> HostBus:
    """The bus an open without `bus=` uses: the GPUs the device strings (am:sim...) name in this process."""
    return BUS


@atexit.register
def _save_on_exit() -> None:
    """A driver that dies without close() (an exception, sys.exit) leaves the GPU as it was, as hardware
    would: the state file gets it. Only SIGKILL loses what happened since the last save."""
    for host in list(sim_bus.LIVE):
        for slot, path in list(host.state_files.items()):
            dev = host.slots.get(slot)
            if dev is not None and path.parent.is_dir():
                dev.stop_async()
                persist.save(dev, path)


class _SimBAR(BAR):
    def __init__(self, fn: SimFunction, index: int):
        # A weak reference: a function dropped without close() is freed (and its slot with it) at once, not
        # when the cyclic garbage collector next runs.
        self.fn, self.dev, self.index = weakref.proxy(fn), fn.dev, index

    @property
    def size(self) -> int:
        return self.dev.pci.sizes[self.index]

    def _decode(self, offset: int, size: int, align: int) -> bool:
        self._check(offset, size, align)
        if not self.dev.pci.memory_enabled:
            self.dev.error("BIF", f"BAR{self.index} access at {offset:#x} with memory decode off "
                                  f"(PCI_COMMAND_MEMORY): master abort")
            return False
        if not self.dev.pci.assigned(self.index):
            self.dev.error("BIF", f"BAR{self.index} access at {offset:#x}: the BAR holds no address (reset by a "
                                  f"mode1 reset; the config space was not restored): master abort")
            return False
        return True


class RegisterBAR(_SimBAR):
    """BAR5: registers at byte offset 4 * dword address. Each read is a poll: in stepped mode it steps."""

    def read32(self, offset: int) -> int:
        c = self.fn.counters
        c.mmio_reads += 1
        if not self._decode(offset, 4, 4):
            return 0xFFFFFFFF
        with self.dev.lock:
            self.dev.poll_tick()
            gate = self.dev.gfx_gate        # GFXOFF may be on: GC registers are unpowered (gpusim.smu)
            if gate is not None and gate.gc_access(offset >> 2, None):
                return 0xFFFFFFFF
            return self.dev.regs.read(offset >> 2)

    def write32(self, offset: int, value: int) -> None:
        self.fn.counters.mmio_writes += 1
        if self._decode(offset, 4, 4):
            with self.dev.lock:
                gate = self.dev.gfx_gate
                if gate is not None and gate.gc_access(offset >> 2, value & 0xFFFFFFFF):
                    return
                self.dev.regs.write(offset >> 2, value)

    def read(self, offset: int, size: int) -> bytes:
        self._check(offset, size, 4)
        return b"".join(self.read32(offset + i).to_bytes(4, "little") for i in range(0, size, 4))

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data), 4)
        for i in range(0, len(data), 4):
            self.write32(offset + i, int.from_bytes(data[i:i + 4], "little"))


class VRAMBAR(_SimBAR):
    """BAR0: the first bar-size bytes of VRAM (all of it with a large BAR), as the host sees them: through
    the HDP, whose writes reach the engines only at the next HDP flush (gpusim.hdp). The host reads its
    own writes back before that (assumption: the HDP forwards a read from its pending writes; upstream's
    CPU-side users read back what they wrote without a flush)."""

    def _span(self, offset: int, size: int, align: int = 1) -> bool:
        if not self._decode(offset, size, align):
            return False
        if offset + size > self.dev.vram.size:
            raise PCIError(f"{self.fn.address} BAR0: {size} bytes at {offset:#x} lie beyond the "
                           f"{self.dev.vram.size:#x}-byte VRAM inside the {self.size:#x}-byte BAR")
        return True

    def read32(self, offset: int) -> int:
        self.fn.counters.mmio_reads += 1
        return int.from_bytes(self.dev.vram.host_read(offset, 4), "little") if self._span(offset, 4, 4) \
            else 0xFFFFFFFF

    def write32(self, offset: int, value: int) -> None:
        self.fn.counters.mmio_writes += 1
        if self._span(offset, 4, 4):
            self.dev.vram.host_write(offset, (value & 0xFFFFFFFF).to_bytes(4, "little"))
            self.dev.blocks["HDP"].host_write(4)

    def read(self, offset: int, size: int) -> bytes:
        self.fn.counters.bulk_read_bytes += size
        return self.dev.vram.host_read(offset, size) if self._span(offset, size) else b"\xff" * size

    def write(self, offset: int, data: bytes) -> None:
        self.fn.counters.bulk_write_bytes += len(data)
        if self._span(offset, len(data)):
            self.dev.vram.host_write(offset, data)
            self.dev.blocks["HDP"].host_write(len(data))

    def direct(self) -> memoryview:
        """The host's mapping of VRAM (gpusim.device.VRAM.host_view): writes into it wait in the HDP for
        the next flush like any other BAR0 write, although the simulator cannot count them."""
        return self.dev.vram.host_view[:min(self.size, self.dev.vram.size)]


class DoorbellBAR(_SimBAR):
    """BAR2: doorbells; writes go to the NBIO's routing (dropped while the aperture is disabled)."""

    def read32(self, offset: int) -> int:
        self.fn.counters.mmio_reads += 1
        if not self._decode(offset, 4, 4):
            return 0xFFFFFFFF
        return self.dev.blocks["NBIO"].doorbell_read(offset)

    def write32(self, offset: int, value: int) -> None:
        self.fn.counters.mmio_writes += 1
        if self._decode(offset, 4, 4):
            with self.dev.lock:
                self.dev.blocks["NBIO"].doorbell_write(offset, value & 0xFFFFFFFF)

    def write64(self, offset: int, value: int) -> None:
        # One posted 64-bit write: the engine sees both halves at once (64-bit queue write pointers).
        self.fn.counters.mmio_writes += 1
        if self._decode(offset, 8, 8):
            with self.dev.lock:
                self.dev.blocks["NBIO"].doorbell_write(offset, value & ((1 << 64) - 1), 8)

    def read(self, offset: int, size: int) -> bytes:
        return b"".join(self.read32(offset + i).to_bytes(4, "little") for i in range(0, size, 4))

    def write(self, offset: int, data: bytes) -> None:
        for i in range(0, len(data), 4):
            self.write32(offset + i, int.from_bytes(data[i:i + 4], "little"))


class SimDMABuffer(DMABuffer):
    def __init__(self, fn: SimFunction, size: int):
        self.size = size
        self._mem = host_memory(size)
        self._view = memoryview(self._mem)[:size]
        self._host = fn.host_bus
        self._bases = self._host.map_host(self._view)
        self._owner = fn._dma      # not the function itself: no reference cycle keeps a dropped function

    @property
    def view(self) -> memoryview:
        return self._view

    def bus_address(self, offset: int = 0) -> int:
        if not 0 <= offset < self.size:
            raise PCIError(f"DMA buffer of {self.size:#x} bytes has no byte {offset:#x}")
        return self._bases[offset // SEGMENT] + offset % SEGMENT

    def free(self) -> None:
        if self._bases:
            self._host.unmap_host(self._bases)
            self._bases = []
            self._owner.discard(self)


class SimFunction(PCIFunction):
    def __init__(self, dev: SimGPU, host_bus: HostBus, slot: int, state: Path | None,
                 lock: DeviceLock | None = None):
        super().__init__(f"0000:{0x03 + slot:02x}:00.0")
        self.dev, self.host_bus, self.slot, self.state, self._lock = dev, host_bus, slot, state, lock
        self._bars = {0: VRAMBAR(self, 0), 2: DoorbellBAR(self, 2), 5: RegisterBAR(self, 5)}
        self._dma: set[SimDMABuffer] = set()
        self.async_clock = False
        self.closed = False
        self._msi_fd: int | None = None

    def _config_check(self, offset: int, size: int) -> None:
        if size not in (1, 2, 4) or offset % size or not 0 <= offset <= 4096 - size:
            raise PCIError(f"{self.address}: config access of {size} bytes at {offset:#x} must be 1, 2 or 4 "
                           f"bytes, naturally aligned, inside the 4 KiB config space")

    def config_read(self, offset: int, size: int) -> int:
        self._config_check(offset, size)
        self.counters.config_reads += 1
        return self.dev.pci.read(offset, size)

    def config_write(self, offset: int, size: int, value: int) -> None:
        self._config_check(offset, size)
        self.counters.config_writes += 1
        with self.dev.lock:
            complaint = self.dev.pci.write(offset, size, value)
        if complaint:
            self.dev.error("PCI", complaint)

    def bar(self, index: int) -> BAR:
        if index not in self._bars:
            raise PCIError(f"{self.address}: BAR{index} is not a memory BAR of this GPU; it has "
                           f"BAR0 (VRAM), BAR2 (doorbells), BAR5 (registers)")
        return self._bars[index]

    def alloc_dma(self, size: int, *, readback: bool = False) -> DMABuffer:
        buf = SimDMABuffer(self, size)
        self._dma.add(buf)
        return buf

    @property
    def msi_unavailable(self) -> str:
        return ("the simulated GPU runs on the stepped clock (it moves only while the driver reads its "
                "registers), so nothing would wake a driver blocked on an interrupt; open it with "
                "async_clock=True for interrupts")

    def enable_msi(self) -> int | None:
        """As VFIO_DEVICE_SET_IRQS: MSI Enable set in the MSI capability (what pci_alloc_irq_vectors does for
        vfio-pci) and an eventfd the device's MSI writes signal. None on the stepped clock (msi_unavailable)."""
        if self.dev.stepped:
            return None
        if self._msi_fd is None:
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

            def signal(fd=fd):
                try:
                    os.eventfd_write(fd, 1)
                except OSError:     # closed by disable_msi while the device's clock thread sent one
                    pass
            with self.dev.lock:
                cfg = self.dev.pci
                cfg.write(pci.CAP_MSI + 2, 2, cfg.read(pci.CAP_MSI + 2, 2) | 1)
                self.dev.msi_sink = signal
            self._msi_fd = fd
        return self._msi_fd

    def disable_msi(self) -> None:
        fd, self._msi_fd = self._msi_fd, None
        if fd is None:
            return
        with self.dev.lock:
            cfg = self.dev.pci
            cfg.write(pci.CAP_MSI + 2, 2, cfg.read(pci.CAP_MSI + 2, 2) & ~1)
            self.dev.msi_sink = None
        os.close(fd)

    def reset_methods(self) -> tuple[str, ...]:
        """Linux offers FLR only when the function's PCIe Device Capabilities say so (pcie_has_flr:
        PCI_EXP_DEVCAP_FLR); this GPU's do not (gpusim.pci: DevCap 0; assumption, as retail Navi boards list
        FLReset-). The "bus" method (pci_reset_bus_function: a secondary bus reset through the port above
        the GPU, pci_parent_bus_reset) is there: the simulated GPU's functions are alone below their port."""
        flr = self.dev.pci.read(pci.CAP_EXP + PCI_EXP_DEVCAP, 4) & PCI_EXP_DEVCAP_FLR
        return ("flr", "bus") if flr else ("bus",)

    def reset(self) -> None:
        """What writing 1 to sysfs `reset` does (pci_reset_function): the config space saved, a secondary
        bus reset of the GPU, the config space restored (pci_dev_save_and_disable, pci_dev_restore).
        Assumption (not public): a hot reset from the port resets the whole ASIC as a mode1 reset does
        (gpusim.board.mode1_reset: every block, the PSP back to its bootloader, the SMU firmware stopped,
        the MMHUB's invalidation semaphores free); the PCIe base spec makes it a conventional reset of
        every function below the port, and what the on-chip firmware processors keep is not documented."""
        self.counters.config_writes += 1   # the port's bridge control write that asserts the reset
        with self.dev.lock:
            cfg = self.dev.pci
            saved = (bytes(cfg.space), dict(cfg.sizes), dict(cfg.addrs))
            board.mode1_reset(self.dev)
            cfg.space[:], cfg.sizes, cfg.addrs = saved[0], saved[1], saved[2]

    def close(self) -> None:
        held = self.host_bus.held
        if held.get(self.slot) is self:
            del held[self.slot]
        self.closed = True
        self.disable_msi()
        for buf in list(self._dma):
            buf.free()
        if self.async_clock or self.state is not None:
            self.dev.stop_async()   # the device keeps its state; its clock waits for the next user
        self.dev.driver_gone()      # what keeps running without a driver meets its freed memory
        if self.state is not None and self._lock is not None and self._lock.held:
            persist.save(self.dev, self.state)
            if self.host_bus.state_files.get(self.slot) == self.state:
                del self.host_bus.state_files[self.slot]
            self._lock.release()


def open_function(spec: str = "navi31", *, chip: str | None = None, vram_size: int | None = None,
                  small_bar: bool = False, state=None, bus: HostBus | None = None, slot: int | None = None,
                  fresh: bool = False, async_clock: bool = False, harvest: tuple = (), scpm: bool = True,
                  driver_scratch_survives_reset: bool = False, fw_reserved_kb: int | None = None,
                  vbios_rom_offset: int = 0) -> SimFunction:
    chip = chip or spec or "navi31"
    if chip not in board.VRAM_SIZE:
        raise PCIError(f"sim: unknown chip {chip!r}; the simulator models {', '.join(board.VRAM_SIZE)}")
    if bus is None:
        bus = BUS
    elif not isinstance(bus, HostBus):
        raise PCIError(f"sim: bus={bus!r} is not a simulated host bus; pass a gpusim.bus.HostBus() or leave it out")
    state = Path(state) if state else None
    if state is not None:
        _check_state_path(state)
    lock = _lock_state(state) if state is not None else None
    try:
        return _open(chip, vram_size, small_bar, state, lock, bus, slot, fresh, async_clock, harvest, scpm,
                     driver_scratch_survives_reset, fw_reserved_kb, vbios_rom_offset)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _check_state_path(state: Path) -> None:
    """A state file that could not be saved is refused at open, before the boot, not at close after it."""
    if state.is_dir():
        raise PCIError(f"sim: state={state} is a directory; pass the path of a file (created if missing)")
    if not state.parent.is_dir():
        raise PCIError(f"sim: state={state}: directory {state.parent} does not exist; create it or pass another path")
    if not os.access(state.parent, os.W_OK | os.X_OK):
        raise PCIError(f"sim: state={state}: directory {state.parent} is not writable, so the GPU could not be "
                       "saved there; pass another path")
    if state.exists() and not os.access(state, os.R_OK):
        raise PCIError(f"sim: state={state} is not readable; fix its permissions or pass another path")


def _lock_state(state: Path) -> DeviceLock:
    """One process drives a simulated GPU kept in a file, as one driver drives a real one (pcie.lock's
    flock, on STATE.lock beside the file: the file itself is replaced on every save). Assumption: the
    simulator's own rule; two processes loading one file would each save over the other's GPU."""
    try:
        return DeviceLock(f"simulated GPU with state file {state}", path=state.with_name(state.name + ".lock"))
    except PCIError as e:
        raise PCIError(f"sim: {e}; close that process or use another state file") from None


def _open(chip, vram_size, small_bar, state, lock, host: HostBus, slot, fresh, async_clock, harvest, scpm,
          driver_scratch_survives_reset, fw_reserved_kb=None, vbios_rom_offset=0) -> SimFunction:
    if slot is None:
        slot = host.pick_slot(chip)
    held = host.held.get(slot)
    if held is not None and not held.closed and not fresh:   # fresh: a new GPU in the slot, the old one unplugged
        raise PCIError(f"sim: the simulated GPU in slot {slot} ({held.dev.chip}, {held.address}) is busy, held by "
                       f"pid {os.getpid()} (this process: close the device opened on it first, or open another slot)")
    dev = None if fresh else host.slots.get(slot)
    if state is not None and state.exists() and not fresh:
        dev = persist.load(state)    # the file is what the last user (maybe another process) left
        missing = board.block_names() - set(dev.blocks)
        if missing:   # saved by an older simulator: that GPU cannot be modelled on; unplugged, a fresh one in its place
            warnings.warn(f"sim: {state} holds a GPU saved by an older simulator (no {', '.join(sorted(missing))} "
                          f"block); powering on a fresh {chip} in its place (the next boot is cold)", stacklevel=2)
            dev = None
    if dev is not None and dev.chip != chip:
        raise PCIError(f"sim: slot {slot} holds a {dev.chip}, not a {chip}; pass fresh=True or another slot")
    if dev is None:
        dev = board.build(chip, vram_size, small_bar, slot, harvest, scpm, driver_scratch_survives_reset,
                          fw_reserved_kb, vbios_rom_offset)
    old = host.slots.get(slot)
    if old is not None and old is not dev:
        old.stop_async()
        if old.bus is not None:
            old.bus.unplug(old)
    host.plug(dev)
    host.slots[slot] = dev
    if state is not None:
        host.state_files[slot] = state
    else:
        host.state_files.pop(slot, None)
    # A GPU kept in a state file is the one an operator watches (driverless-smi): its power model runs
    # on the wall clock, so temperatures and averages move in real time between and across processes.
    dev.wall_clock = state is not None
    fn = SimFunction(dev, host, slot, state, lock)
    host.held[slot] = fn
    if async_clock:
        dev.start_async()
        fn.async_clock = True
    return fn
