"""The file-descriptor layer under nvdrv: the NVIDIA kernel module's device nodes, or a model of them.

    prov = ioctl.provider()          # real: /dev/nvidiactl, /dev/nvidia<N>, /dev/nvidia-uvm
    prov = ioctl.provider("sim")     # a model found through the `driverless.nv` entry points
    ctl = prov.open("/dev/nvidiactl")
    ctl.ioctl(rmapi.nv_iowr(rmapi.NV_ESC_RM_ALLOC, ctypes.sizeof(p)), p)   # p: a ctypes structure, updated
    m = dev_fd.mmap(length)          # after NV_ESC_RM_MAP_MEMORY on dev_fd: m.view, m.write32(...)

nvdrv never imports a model: a model is whatever package declares a provider in that group (the way
pcie providers are found), so the same driver code runs on the kernel module and on `nv:sim`.
Parameter structures carry user pointers (pAllocParms, params) exactly as for the kernel module, so
the caller keeps what they point at alive for the call.
"""
from __future__ import annotations

import abc
import ctypes
import errno
import fcntl
import mmap
import os
from importlib import metadata

ENTRY_POINT_GROUP = "driverless.nv"
NVIDIACTL = "/dev/nvidiactl"
NVIDIA_UVM = "/dev/nvidia-uvm"


def device_node(minor: int) -> str:
    return f"/dev/nvidia{minor}"


class Mapping:
    """A CPU mapping of GPU-visible memory or of a register page: `view` is a writable memoryview;
    write32/read32 are 32-bit accesses (the doorbell is written through write32)."""

    def __init__(self, view: memoryview, keep=None):
        self.view, self._keep = view, keep
        self._words = view.cast("B").cast("I") if len(view) % 4 == 0 else None

    def write32(self, offset: int, value: int) -> None:
        self._words[offset >> 2] = value

    def read32(self, offset: int) -> int:
        return self._words[offset >> 2]

    def close(self) -> None:
        if self._words is not None:
            self._words.release()
        self.view.release()
        if isinstance(self._keep, mmap.mmap):
            self._keep.close()


class NVFile(abc.ABC):
    """One open device node."""
    path: str

    @abc.abstractmethod
    def ioctl(self, request: int, arg) -> None:
        """Runs the ioctl with `arg` (a ctypes structure) in and out; OSError with the errno on failure."""

    @abc.abstractmethod
    def mmap(self, length: int, offset: int = 0) -> Mapping: ...

    @abc.abstractmethod
    def fileno(self) -> int: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class Provider(abc.ABC):
    name: str

    @abc.abstractmethod
    def open(self, path: str) -> NVFile:
        """Opens a device node; FileNotFoundError/PermissionError as os.open raises them."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    @abc.abstractmethod
    def module_version(self) -> str:
        """The kernel module's version string (e.g. "580.105.08")."""


# ------------------------------------------------------------------------------------- the kernel module
class _KernelFile(NVFile):
    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def ioctl(self, request: int, arg) -> None:
        fcntl.ioctl(self.fd, request, arg, True)

    def mmap(self, length: int, offset: int = 0) -> Mapping:
        m = mmap.mmap(self.fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        return Mapping(memoryview(m), m)

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class KernelProvider(Provider):
    """The NVIDIA kernel module's device nodes (open module, 580 series)."""
    name = "kernel"

    def open(self, path: str) -> NVFile:
        return _KernelFile(path)

    def module_version(self) -> str:
        """The running module's version (what NV_ESC_CHECK_VERSION_STR must be sent)."""
        with open("/sys/module/nvidia/version") as f:
            return f.read().strip()


def provider(name: str | None = None) -> Provider:
    """The kernel module (name None) or the model registered under `name` in `driverless.nv`."""
    if name is None:
        return KernelProvider()
    eps = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if name not in eps:
        raise LookupError(f"nvdrv: no NVIDIA model {name!r}; installed: {', '.join(sorted(eps)) or 'none'} "
                          "(is the package installed with `pip install -e .`?)")
    return eps[name].load()()


def address_of(obj) -> int:
    """The address of a ctypes object, for the pointer fields of RM parameter structures."""
    return ctypes.addressof(obj)


def host_memory(size: int) -> tuple[mmap.mmap, int]:
    """Anonymous, page-aligned process memory and its address (what RM describes with
    NV01_MEMORY_SYSTEM_OS_DESCRIPTOR and pins for the GPU)."""
    m = mmap.mmap(-1, size, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, mmap.PROT_READ | mmap.PROT_WRITE)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


EINVAL = errno.EINVAL
