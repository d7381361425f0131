"""The contract between drivers and whatever carries their memory accesses (docs/architecture.md, "The `pcie` contract").

Drivers only see these classes. Providers (sysfs, VFIO, USB bridge, TCP shim, the simulator) are found
by name through the `driverless.pcie` entry-point group, so no driver imports a provider's package:
`open_function("sim", "navi31")` loads the entry point named "sim" and calls it with the rest.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from importlib import metadata


class PCIError(Exception):
    """A PCI-level failure; the message names the function (bus address) and what to do."""


@dataclass
class AccessCounters:
    """What a function's accesses cost: MMIO reads/writes (each read is a round trip over USB/TCP),
    bulk bytes each way, config accesses, and round trips where the transport has them."""
    mmio_reads: int = 0
    mmio_writes: int = 0
    bulk_read_bytes: int = 0
    bulk_write_bytes: int = 0
    config_reads: int = 0
    config_writes: int = 0
    round_trips: int = 0

    def snapshot(self) -> AccessCounters:
        return AccessCounters(**vars(self))

    def __sub__(self, other: AccessCounters) -> AccessCounters:
        return AccessCounters(**{k: v - getattr(other, k) for k, v in vars(self).items()})


class BAR(abc.ABC):
    """One BAR as an MMIO view. Offsets are bytes from the BAR's start; 32/64-bit accesses are aligned."""
    index: int
    size: int

    @abc.abstractmethod
    def read32(self, offset: int) -> int: ...

    @abc.abstractmethod
    def write32(self, offset: int, value: int) -> None: ...

    def read64(self, offset: int) -> int:
        self._check(offset, 8, 8)  # hardware needs natural alignment; so does every transport here
        return self.read32(offset) | (self.read32(offset + 4) << 32)

    def write64(self, offset: int, value: int) -> None:
        self._check(offset, 8, 8)
        self.write32(offset, value & 0xFFFFFFFF)
        self.write32(offset + 4, value >> 32)

    def read32_many(self, offsets) -> list[int]:
        """32-bit reads of several registers, in order, none depending on another's value: a transport that
        batches (USB) sends them together, one round trip where each read alone would take one."""
        return [self.read32(o) for o in offsets]

    @abc.abstractmethod
    def read(self, offset: int, size: int) -> bytes: ...

    @abc.abstractmethod
    def write(self, offset: int, data: bytes) -> None: ...

    def direct(self) -> memoryview | None:
        """A memoryview of the BAR when it is truly mapped (PCIe, simulator), so hot paths can skip
        per-access overhead; None over transports where every access is a transaction (USB, TCP)."""
        return None

    def flush(self) -> None:
        """Completes posted writes the transport may batch; a read also flushes them first."""

    def _check(self, offset: int, size: int, align: int = 1) -> None:
        if offset < 0 or offset + size > self.size or offset % align:
            raise PCIError(f"BAR{self.index}: access of {size} bytes at {offset:#x} is outside the "
                           f"{self.size:#x}-byte BAR or misaligned")


class DMABuffer(abc.ABC):
    """Host memory the device can read and write: a host view and the bus addresses the device uses.

    Coherent buffers (PCIe, the simulator) are the memory the device reads: `push`/`pull` do nothing.
    Behind a USB bridge the view is a host shadow of the bridge's memory (`coherent` False): `push` sends
    the whole pages a byte range touches, `pull` reads a range back; code that shares memory with the
    device calls both at its ordering points, so it runs unchanged on every transport."""
    size: int
    coherent = True

    def push(self, offset: int = 0, size: int | None = None) -> None:
        """Makes host writes to [offset, offset + size) (default: all) visible to the device, in order with
        the function's posted writes: by the time a later BAR write (a doorbell) lands, or at the next
        `BAR.flush()` or read, whichever comes first."""

    def pull(self, offset: int = 0, size: int | None = None) -> None:
        """Makes device writes to [offset, offset + size) (default: all) visible in the view."""

    @property
    @abc.abstractmethod
    def view(self) -> memoryview: ...

    @abc.abstractmethod
    def bus_address(self, offset: int = 0) -> int:
        """The bus address of byte `offset`; pages may be discontiguous, so ask per page."""

    @abc.abstractmethod
    def free(self) -> None: ...


class PCIFunction(abc.ABC):
    """One PCI function: identity, config space, BARs, DMA memory, reset, and access counters."""

    def __init__(self, address: str):
        self.address = address            # "0000:03:00.0", or a provider-specific name ("sim0")
        self.counters = AccessCounters()  # every access path adds to these

    @property
    def vendor_id(self) -> int:
        return self.config_read(0x00, 2)

    @property
    def device_id(self) -> int:
        return self.config_read(0x02, 2)

    @abc.abstractmethod
    def config_read(self, offset: int, size: int) -> int: ...

    @abc.abstractmethod
    def config_write(self, offset: int, size: int, value: int) -> None: ...

    @abc.abstractmethod
    def bar(self, index: int) -> BAR: ...

    @abc.abstractmethod
    def alloc_dma(self, size: int, *, readback: bool = False) -> DMABuffer:
        """size bytes of DMA memory. readback=True: the host reads what the device writes there (signals,
        copy-out); transports whose read-back is limited (USB: one page) keep that memory for such buffers."""

    def reset_methods(self) -> tuple[str, ...]:
        """The PCI-level resets the platform offers for this function, as Linux's `reset_method` attribute
        names them ("flr", "pm", "bus", ...; "vfio" for VFIO_DEVICE_RESET): what `reset()` uses, in the
        order the kernel tries them (pci_reset_function). () when there is none: only a power cycle is left."""
        return ()

    def reset(self) -> None:
        """A PCI-level reset (pci_reset_function: the first of reset_methods() that works), with the config
        space saved before and restored after, as the kernel does."""
        raise PCIError(f"{self.address}: this transport has no function reset")

    # Why enable_msi() gives no eventfd on this transport: the driver polls, and says so.
    msi_unavailable = "this transport delivers no interrupts to userspace"

    def enable_msi(self) -> int | None:
        """Routes the function's MSI (vector 0) to an eventfd and returns it: readable (a nonzero count,
        read with os.eventfd_read) once the device has sent an interrupt since the last read. None where the
        transport cannot deliver interrupts (`msi_unavailable` says why); the driver then polls. VFIO does
        this with VFIO_DEVICE_SET_IRQS; the eventfd stays the function's until disable_msi() or close()."""
        return None

    def disable_msi(self) -> None:
        """Undoes enable_msi(): the device's MSI is disabled and the eventfd closed."""

    def close(self) -> None:
        """Unmaps BARs, frees DMA memory and releases the device lock."""

    def set_bus_master(self, enable: bool) -> int:
        """PCI_COMMAND's memory decode and bus mastering on, or bus mastering off; written only when that changes
        it, as Linux's __pci_set_master does. Returns the command register as read before."""
        cmd = self.config_read(0x04, 2)
        new = (cmd | 0x6) if enable else (cmd & ~0x4)
        if new != cmd:
            self.config_write(0x04, 2, new)
        return cmd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


ENTRY_POINT_GROUP = "driverless.pcie"


def providers() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def open_function(provider: str, *args, **kwargs) -> PCIFunction:
    """Opens a function through a named provider ("sysfs", "vfio", "sim", ...)."""
    eps = providers()
    if provider not in eps:
        raise PCIError(f"pcie: no provider {provider!r}; installed: {', '.join(sorted(eps)) or 'none'} "
                       f"(is the package installed with `pip install -e .`?)")
    return eps[provider].load()(*args, **kwargs)
