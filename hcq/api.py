"""The backend-neutral HCQ API: devices, buffers, signals, hardware queues, programs and graphs.

    dev = hcq.open("am:sim")
    a = dev.alloc(4096); dev.copyin(a, np.arange(1024, dtype=np.float32))
    prog = dev.program(code_object_bytes, "add_f32")
    seconds = prog(out, a, b, 1024, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
    dev.copyout(out)                                   # bytes

Backends (amdrv.hcq for AMD, nvdrv for NVIDIA) subclass HCQDevice and HWQueue; Buffer, Signal, Program,
ArgLayout and Graph are shared. Nothing here knows a code-object format or a GPU clock: each backend
turns its own kernel metadata into KernelArg entries (offset, size, kind) and declares timestamp_hz. Hot paths are written for CPU cost per launch: argument layouts are compiled once into one
struct.Struct per kernel, queues are built once and patched in place (the update_* methods), and a
graph replay writes only the values that changed.
"""
from __future__ import annotations

import abc
import operator
import struct
import weakref
from dataclasses import dataclass
from typing import Sequence


class HCQError(RuntimeError):
    """An HCQ failure; the message names the device, the queue or kernel, and what to do."""


class HCQTimeout(HCQError, TimeoutError):
    """A signal did not reach its value in time: the message names the queue, its read and write
    pointers and any fault the GPU reported; `device.recover()` makes the device usable again."""


class HCQFault(HCQError):
    """The GPU reported a memory fault while running a queue; the message has the decoded fault."""


class ArgumentError(HCQError, TypeError):
    """Kernel arguments that do not fit the kernel's parameters; names the kernel and parameter."""


# ------------------------------------------------------------------------------------------- args
# C scalar type names (OpenCL, HIP and CUDA spellings) to struct codes, for backends whose metadata names
# a parameter's type (scalar_code); metadata that gives only a size gets the unsigned code of that size.
_SCALAR_CODES = {
    "char": "b", "uchar": "B", "short": "h", "ushort": "H", "int": "i", "uint": "I", "long": "q",
    "ulong": "Q", "float": "f", "double": "d", "half": "e", "bool": "?", "size_t": "Q", "signed char": "b",
    "unsigned char": "B", "unsigned short": "H", "unsigned int": "I", "unsigned long": "Q",
    "long long": "q", "unsigned long long": "Q", "int8_t": "b", "uint8_t": "B", "int16_t": "h",
    "uint16_t": "H", "int32_t": "i", "uint32_t": "I", "int64_t": "q", "uint64_t": "Q",
}
_UNSIGNED_BY_SIZE = {1: "B", 2: "H", 4: "I", 8: "Q"}
KINDS = ("buffer", "scalar", "untyped", "hidden")


def byte_count(device: str, what: str, n, where: str = "", *, zero_ok: bool = False) -> int:
    """n as an int, or an HCQError naming the device and what was asked ("copy of -4 bytes from A to B"): byte
    counts are integers and positive (zero too where zero_ok: a copy of nothing)."""
    try:
        n = operator.index(n)
    except TypeError:
        raise HCQError(f"{device}: {what} of {n!r:.40} bytes{where}; a byte count is an integer") from None
    if n < 0 or not (n or zero_ok):
        rule = "not negative" if zero_ok else "positive"
        raise HCQError(f"{device}: {what} of {n} bytes{where}; a byte count is {rule}")
    return n


def scalar_code(type_name: str, size: int) -> str:
    """The struct code of a by-value parameter: from its C type name when that names a scalar of `size`
    bytes, else the unsigned integer of that size, else raw bytes ("Ns")."""
    code = _SCALAR_CODES.get(type_name.removeprefix("const ").strip())
    if code is None or struct.calcsize("<" + code) != size:
        code = _UNSIGNED_BY_SIZE.get(size, f"{size}s")
    return code


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter as a backend derives it from its own code-object metadata (amdrv: AMDHSA
    .args; nvdrv: the cubin's parameter records): a plain (offset, size, kind) entry. kind is
    "buffer" (a pointer: pass a Buffer), "scalar" (a number; code is its struct code, "Ns" for raw
    bytes), "untyped" (the metadata says only offset and size, as a cubin's does: a number of that size,
    or for 8 bytes also a Buffer, whose address goes in) or "hidden" (filled by the backend; `what` names it)."""
    name: str
    offset: int
    size: int
    kind: str
    code: str = ""
    what: str = ""
    type_name: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise HCQError(f"kernel parameter {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.offset < 0 or self.size <= 0:
            raise HCQError(f"kernel parameter {self.name!r}: offset {self.offset} and size {self.size} must be "
                           "a non-negative offset and a positive size")
        if not self.code and self.kind != "hidden":
            object.__setattr__(self, "code", "Q" if self.kind == "buffer" else scalar_code(self.type_name, self.size))


class ArgLayout:
    """How one kernel's explicit arguments land in its kernarg segment, compiled once: a single
    struct.Struct over all explicit parameters (padding included), so packing a launch's arguments
    is one pack_into. Hidden arguments are listed for the backend (hidden_fill)."""

    __slots__ = ("kernel", "args", "explicit", "hidden", "size", "struct", "start", "is_buffer", "n",
                 "buffer_index", "untyped_index", "arg_offsets", "arg_structs", "device", "bytes_sizes")

    def __init__(self, kernel: str, args: Sequence[KernelArg], size: int, device: HCQDevice | None = None):
        """device: the one whose kernels these are; a pointer argument must be a Buffer of it (another GPU's
        address would name whatever this GPU maps there). None (a layout on its own) takes any Buffer."""
        self.kernel, self.args, self.size, self.device = kernel, list(args), size, device
        self.explicit = [a for a in self.args if a.kind != "hidden"]
        self.hidden = [a for a in self.args if a.kind == "hidden"]
        self.n = len(self.explicit)
        fmt, at = "<", self.explicit[0].offset if self.explicit else 0
        self.start = at
        for a in sorted(self.explicit, key=lambda a: a.offset):
            if a.offset < at:
                raise HCQError(f"kernel {kernel}: parameter {a.name!r} at offset {a.offset} overlaps the one before")
            fmt += f"{a.offset - at}x" if a.offset > at else ""
            fmt += a.code
            at = a.offset + a.size
        if [a.offset for a in self.explicit] != sorted(a.offset for a in self.explicit):
            raise HCQError(f"kernel {kernel}: parameters are not in offset order")
        self.struct = struct.Struct(fmt)
        self.is_buffer = tuple(a.kind == "buffer" for a in self.explicit)
        self.buffer_index = tuple(i for i, b in enumerate(self.is_buffer) if b)
        # untyped parameters that can hold a pointer (8 bytes): a Buffer there is its address
        self.untyped_index = tuple(i for i, a in enumerate(self.explicit) if a.kind == "untyped" and a.size == 8)
        self.arg_offsets = tuple(a.offset for a in self.explicit)
        self.arg_structs = tuple(struct.Struct("<" + a.code) for a in self.explicit)
        # raw-bytes parameters (a by-value struct: "Ns"): struct pads a shorter value with NULs and cuts a longer
        # one, silently, so their lengths are checked before a pack
        self.bytes_sizes = tuple((i, a.size) for i, a in enumerate(self.explicit) if a.code.endswith("s"))

    def values(self, args: Sequence) -> list:
        """The struct values of args (buffers become their GPU addresses); raises ArgumentError."""
        if len(args) != self.n:
            raise self._count_error(args)
        try:
            vals = [self._va(a) if b else a for a, b in zip(args, self.is_buffer)]
        except AttributeError:
            raise self.diagnose(args) from None
        for i in self.untyped_index:
            if isinstance(vals[i], Buffer):
                vals[i] = self._va(vals[i])
        if None in vals or any(not isinstance(vals[i], (bytes, bytearray)) or len(vals[i]) != n
                               for i, n in self.bytes_sizes):    # a dead buffer's va; bytes not of their size
            raise self.diagnose(args)
        return vals

    def pack_into(self, view, offset: int, args: Sequence) -> None:
        """Writes the explicit arguments at view[offset + their offsets]."""
        if len(args) != self.n:
            raise self._count_error(args)
        vals, dev = list(args), self.device
        try:
            for i in self.buffer_index:
                b = vals[i]     # another device's buffer: None, which the pack refuses (then diagnose says why)
                vals[i] = b.va if b.device is dev or dev is None else None
            for i in self.untyped_index:
                if isinstance(vals[i], Buffer):
                    vals[i] = self._va(vals[i])
            for i, n in self.bytes_sizes:
                if len(vals[i]) != n:
                    raise struct.error(f"{len(vals[i])} bytes for a {n}-byte parameter")
            self.struct.pack_into(view, offset + self.start, *vals)
        except (AttributeError, struct.error, TypeError, OverflowError):
            vals = self._untyped(args)
            if vals is None:
                raise self.diagnose(args) from None
            self.struct.pack_into(view, offset + self.start, *vals)

    def _va(self, b: Buffer) -> int | None:
        """b's address, None (refused by the pack) when b is another device's."""
        return b.va if self.device is None or b.device is self.device else None

    def _untyped(self, args: Sequence) -> list | None:
        """Values for parameters the metadata gives no type name: a float becomes the bits of an IEEE
        float of the parameter's size, a negative int its two's complement. None if that does not help."""
        out = []
        for a, v in zip(self.explicit, args):
            if a.kind == "buffer" or isinstance(v, Buffer) and a.kind == "untyped" and a.size == 8:
                if not isinstance(v, Buffer) or (v := self._va(v)) is None:
                    return None
            else:
                v = _untyped_value(a, v)
            out.append(v)
        try:
            self.struct.pack(*out)
        except (struct.error, TypeError, OverflowError):
            return None
        if any(len(out[i]) != n for i, n in self.bytes_sizes):
            return None
        return out

    def pack(self, args: Sequence) -> bytes:
        out = bytearray(max(self.size, self.start + self.struct.size))
        self.pack_into(out, 0, args)
        return bytes(out)

    def _count_error(self, args) -> ArgumentError:
        names = ", ".join(f"{a.name}: {a.type_name or a.kind}" for a in self.explicit)
        return ArgumentError(f"kernel {self.kernel} takes {self.n} argument(s) ({names}), got {len(args)}")

    def diagnose(self, args: Sequence) -> ArgumentError:
        """The first argument that does not fit its parameter, in words (the slow path of pack_into)."""
        for i, v in zip(range(self.n), args):
            e = self._misfit(i, v)
            if e is not None:
                return e
        return ArgumentError(f"kernel {self.kernel}: arguments {args!r:.80} do not fit its parameters")

    def arg_value(self, i: int, v):
        """What arg_structs[i] (explicit parameter i) takes for v, as pack_into converts it (graph replays patch
        single arguments): a live Buffer of this device its address, a number that fits (an untyped parameter's
        float its bits); else ArgumentError naming the parameter."""
        e = self._misfit(i, v)
        if e is not None:
            raise e
        return self._va(v) if isinstance(v, Buffer) else _untyped_value(self.explicit[i], v)

    def diagnose_one(self, i: int, v) -> ArgumentError:
        """Why v does not fit explicit parameter i, in words (a caller that found it does not)."""
        return self._misfit(i, v) or ArgumentError(f"kernel {self.kernel}: argument {i}: {v!r:.40} does not fit")

    def _misfit(self, i: int, v) -> ArgumentError | None:
        """Why v does not fit explicit parameter i, or None."""
        a = self.explicit[i]
        where = f"kernel {self.kernel}: argument {i} ({a.name}: {a.type_name or a.kind}, {a.size} bytes)"
        if a.kind == "buffer" or isinstance(v, Buffer) and a.kind == "untyped" and a.size == 8:
            if not isinstance(v, Buffer):
                return ArgumentError(f"{where} is a pointer: pass a Buffer, not {type(v).__name__} {v!r:.40}")
            if v.gone is not None:
                return ArgumentError(f"{where}: {v!r} {v.gone}; allocate a new buffer")
            if self._va(v) is None:
                return ArgumentError(f"{where}: {v!r} is memory of {v.device.name}, and this kernel runs on "
                                     f"{self.device.name}, which would reach whatever it maps at that address; "
                                     f"copy the data over (dev.copy) or allocate it on {self.device.name}")
            return None
        if isinstance(v, Buffer):
            return ArgumentError(f"{where} is a scalar: pass a number, not a Buffer")
        if a.code.endswith("s"):
            if not isinstance(v, (bytes, bytearray)) or len(v) != a.size:
                return ArgumentError(f"{where} is passed as raw bytes: pass exactly {a.size} bytes (a packed "
                                     f"struct), not {type(v).__name__} {v!r:.40}")
            return None
        try:
            struct.pack("<" + a.code, _untyped_value(a, v))
        except (struct.error, TypeError, OverflowError) as e:
            kind = "a float" if a.code in "fde" else "bytes" if a.code.endswith("s") else "an integer"
            return ArgumentError(f"{where} needs {kind} that fits: {v!r:.40} does not ({e})")
        return None


def _untyped_value(a: KernelArg, v):
    if not a.type_name and a.code in "BHIQ":   # "untyped" parameters and by-value ones with no type name
        if isinstance(v, float) and a.size in (2, 4, 8):
            return int.from_bytes(struct.pack("<" + {2: "e", 4: "f", 8: "d"}[a.size], v), "little")
        if isinstance(v, int) and -(1 << (8 * a.size - 1)) <= v < 0:
            return v & ((1 << (8 * a.size)) - 1)
    return v


# ------------------------------------------------------------------------------------------ memory
class Buffer:
    """GPU memory: `va` is the address kernels and engines use, `size` its bytes. `view(offset, size)`
    is a buffer over part of it (same memory). Backends keep their handle in `mem`. Once freed (or its
    device closed) a buffer and its views are dead: `gone` says why, `va` is None, and every use is
    refused (`live()`), so a stale handle never reaches memory its address now names for someone else."""

    __slots__ = ("device", "va", "size", "offset", "base", "mem", "gone", "views", "finalizer", "__weakref__")

    def __init__(self, device: HCQDevice, va: int, size: int, mem=None, base: Buffer | None = None, offset: int = 0):
        self.device, self.va, self.size, self.mem = device, va, size, mem
        self.base, self.offset = base, offset
        self.gone: str | None = None
        self.views = self.finalizer = None      # views: a WeakSet of this buffer's views; finalizer: backend's

    def view(self, offset: int, size: int | None = None) -> Buffer:
        self.live("view")
        size = self.size - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > self.size:
            raise HCQError(f"{self.device.name}: view of {size} bytes at {offset} outside a {self.size}-byte buffer")
        root = self.base or self
        v = Buffer(self.device, self.va + offset, size, self.mem, root, self.offset + offset)
        if root.views is None:
            root.views = weakref.WeakSet()
        root.views.add(v)
        return v

    def live(self, what: str) -> Buffer:
        """self, or HCQError when the buffer was freed or its device closed (what: the refused use)."""
        if self.gone is not None:
            raise HCQError(f"{self.device.name}: {what}: {self!r} {self.gone}; allocate a new buffer")
        return self

    def release(self, why: str) -> None:
        """Marks this buffer and its views dead (the backend has freed the memory): why, e.g. "was freed"."""
        for b in [self, *(self.views or ())]:
            b.gone, b.va, b.mem = why, None, None

    def __repr__(self) -> str:
        chip = getattr(self.device, "chip", "")
        view = f", a view at +{self.offset:#x} of {_size(self.base.size)}" if self.base is not None else ""
        where = f"at va {self.va:#x}" if self.gone is None else "(dead)"
        return (f"<hcq.Buffer {_size(self.size)} ({self.size:#x} bytes) {where} on {self.device.name}"
                f"{f' ({chip})' if chip else ''}{view}>")


def _size(n: int) -> str:
    """4 KiB, 1.50 MiB, 100 B: sizes in reprs."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"


class Signal:
    """A 64-bit value and a 64-bit timestamp in device-visible memory that engines write (`signal`,
    `timestamp` commands) and wait on (`wait`). mem is a memoryview of the 16 bytes cast to 'Q'."""

    __slots__ = ("device", "va", "mem", "name")

    def __init__(self, device: HCQDevice, va: int, mem: memoryview, name: str = "signal"):
        self.device, self.va, self.mem, self.name = device, va, mem, name

    @property
    def value(self) -> int:
        return self.mem[0]

    @value.setter
    def value(self, v: int) -> None:
        self.mem[0] = v

    @property
    def timestamp_ticks(self) -> int:
        return self.mem[1]

    @property
    def timestamp(self) -> float:
        """The last timestamp written, in seconds of the GPU clock (the backend's HCQDevice.timestamp_hz)."""
        return self.mem[1] / self.device.timestamp_hz

    def wait(self, value: int, timeout: float | None = None) -> None:
        """Returns once value >= `value`; HCQTimeout after timeout seconds (the device's default if None).
        The device is asked even when the value is already there: work can complete and still have failed
        (an AMD GPU answers a page fault with a default page and signals), which only it can tell (HCQFault)."""
        self.device._wait(self, value, self.device.default_timeout if timeout is None else timeout)

    def __repr__(self) -> str:
        return f"<hcq.Signal {self.name} va={self.va:#x} value={self.mem[0]}>"


# ------------------------------------------------------------------------------------------ queues
class HWQueue(abc.ABC):
    """A command list for one engine, built once and submitted any number of times. Each builder
    returns the command's index; update_* patch a built command in place (signal values, kernel
    arguments and sizes, copy addresses) so a queue is resubmitted without rebuilding."""

    @abc.abstractmethod
    def wait(self, signal: Signal, value: int) -> int: ...

    @abc.abstractmethod
    def signal(self, signal: Signal, value: int) -> int: ...

    @abc.abstractmethod
    def timestamp(self, signal: Signal) -> int: ...

    @abc.abstractmethod
    def memory_barrier(self) -> int: ...

    def exec(self, prog: Program, args: Sequence, global_size=(1, 1, 1), local_size=(1, 1, 1)) -> int:
        raise HCQError(f"{type(self).__name__}: this engine does not run kernels; use a compute queue")

    def copy(self, dst: Buffer, src: Buffer, nbytes: int) -> int:
        raise HCQError(f"{type(self).__name__}: this engine does not copy; use a copy queue")

    @abc.abstractmethod
    def update_signal(self, index: int, signal: Signal | None = None, value: int | None = None) -> None: ...

    @abc.abstractmethod
    def update_wait(self, index: int, signal: Signal | None = None, value: int | None = None) -> None: ...

    def update_exec(self, index: int, args: Sequence | None = None, global_size=None, local_size=None) -> None:
        raise HCQError(f"{type(self).__name__}: command {index} is not a kernel launch")

    def update_copy(self, index: int, dst: Buffer | None = None, src: Buffer | None = None) -> None:
        raise HCQError(f"{type(self).__name__}: command {index} is not a copy")

    @abc.abstractmethod
    def submit(self) -> None:
        """Hands the commands to the engine (a ring write and a doorbell); returns at once."""


# ----------------------------------------------------------------------------------------- program
class Program:
    """A kernel loaded on a device. Call it with its arguments in parameter order (Buffers for
    pointers, numbers for scalars); global_size counts workgroups, local_size work-items per group.
    With wait=True it returns the kernel's time in seconds from GPU timestamps."""

    __slots__ = ("device", "name", "layout", "handle", "group_segment_size", "max_local")

    def __init__(self, device: HCQDevice, name: str, layout: ArgLayout, handle=None, group_segment_size: int = 0,
                 max_local: int = 1024):
        self.device, self.name, self.layout, self.handle = device, name, layout, handle
        self.group_segment_size, self.max_local = group_segment_size, max_local

    def __call__(self, *args, global_size=(1, 1, 1), local_size=(1, 1, 1), wait: bool = False,
                 timeout: float | None = None) -> float | None:
        return self.device._launch(self, args, global_size, local_size, wait, timeout)

    # work-items per dimension a launch can name: the AQL dispatch packet's grid_size_x/y/z are 32 bits
    # (hsa_kernel_dispatch_packet_t); a backend whose hardware counts otherwise overrides it
    MAX_GRID_ITEMS = (1 << 32) - 1

    def check_sizes(self, global_size, local_size) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(global_size, local_size) as 3 ints each, or ArgumentError. The fast path costs a launch little;
        anything unusual (numpy integers, floats, too many dimensions, counts past the limits) goes to
        _sizes, which normalizes or explains."""
        try:
            g = tuple(global_size) + (1,) * (3 - len(global_size))
            l_ = tuple(local_size) + (1,) * (3 - len(local_size))
            x, y, z = g[0] * l_[0], g[1] * l_[1], g[2] * l_[2]
        except (TypeError, ValueError, IndexError):
            return self._sizes(global_size, local_size)
        if (type(x + y + z) is not int or len(g) != 3 or len(l_) != 3 or min(g) < 1 or min(l_) < 1
                or l_[0] * l_[1] * l_[2] > self.max_local or max(x, y, z) > self.MAX_GRID_ITEMS):
            return self._sizes(global_size, local_size)
        return g, l_

    def _sizes(self, global_size, local_size) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        try:
            g = tuple(map(operator.index, global_size))
            l_ = tuple(map(operator.index, local_size))
        except TypeError:
            g = l_ = ()
        if not (0 < len(g) <= 3 and 0 < len(l_) <= 3) or min(g) < 1 or min(l_) < 1:
            raise ArgumentError(f"kernel {self.name}: global_size {global_size!r:.60} and local_size "
                                f"{local_size!r:.60} must be up to 3 positive integer counts (workgroups, "
                                "work-items per workgroup)")
        g, l_ = g + (1,) * (3 - len(g)), l_ + (1,) * (3 - len(l_))
        if l_[0] * l_[1] * l_[2] > self.max_local:
            raise ArgumentError(f"kernel {self.name}: local_size {l_} is {l_[0] * l_[1] * l_[2]} work-items; the "
                                f"kernel allows at most {self.max_local} per workgroup")
        for axis, n, m in zip("xyz", g, l_):
            if n * m > self.MAX_GRID_ITEMS:
                raise ArgumentError(f"kernel {self.name}: global_size {g} of local_size {l_} is {n * m} work-items "
                                    f"along {axis}; a launch holds at most {self.MAX_GRID_ITEMS} per dimension "
                                    "(split it into several launches)")
        return g, l_

    def __repr__(self) -> str:
        return f"<hcq.Program {self.name} on {self.device.name}>"


# ------------------------------------------------------------------------------------------ graph
class Var:
    """A placeholder in a graph capture, bound at replay: graph(name=value)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"hcq.Var({self.name!r})"


class Graph:
    """A sequence of launches and copies captured once and replayed with new buffers and values.

        g = dev.graph()
        x = g.var("x")
        g.exec(prog, out, x, 1024, global_size=(4,), local_size=(256,))
        g.copy(host, out, 4096)
        g(x=other_buffer)              # replay: only the kernarg slots that hold x are rewritten

    Replay cost is one struct write per use of each variable given, plus one submission for the
    whole graph. Arguments not given keep the value of the last replay (or the capture). Kernel
    launches and copies run in capture order; a replay waits for the previous one first."""

    def __init__(self, device: HCQDevice):
        self.device = device
        self.steps: list[tuple] = []       # ("exec", prog, args, g, l) | ("copy", dst, src, n)
        self.vars: dict[str, Var] = {}
        self.built = False
        self.backend = None                # the backend's built form (queues, patch points)
        self.fence = self.seq = 0          # backend bookkeeping: last replay's timeline value, sequence
        self.bound: dict = {}              # the value each variable has now (kept alive: the GPU reads them)
        self.held: tuple = ()              # the buffers the capture names, checked live at every replay

    def var(self, name: str) -> Var:
        return self.vars.setdefault(name, Var(name))

    def exec(self, prog: Program, *args, global_size=(1, 1, 1), local_size=(1, 1, 1)) -> None:
        self._capturing()
        for a in args:
            if isinstance(a, Buffer):
                a.live(f"graph capture of kernel {prog.name}")
        self.steps.append(("exec", prog, list(args), *prog.check_sizes(global_size, local_size)))

    def copy(self, dst, src, nbytes: int) -> None:
        self._capturing()
        for b in (dst, src):
            if isinstance(b, Buffer):
                b.live("graph capture of a copy")
        self.steps.append(("copy", dst, src, nbytes))

    def _capturing(self) -> None:
        if self.built:
            raise HCQError(f"{self.device.name}: graph already built; capture a new one")

    def build(self, **initial) -> None:
        """Builds the backend's command lists (HCQDevice._build_graph) with vars bound to `initial`."""
        missing = [n for n in self.vars if n not in initial]
        if missing:
            raise HCQError(f"{self.device.name}: graph variables {missing} need values on the first replay")
        self.held = tuple({id(b): b for step in self.steps for b in (step[2] if step[0] == "exec" else step[1:3])
                           if isinstance(b, Buffer)}.values())
        self._check_live(initial)
        self.device._build_graph(self, initial)
        self.bound = dict(initial)
        self.built = True

    def _check_live(self, values: dict) -> None:
        for b in (*self.held, *{**self.bound, **values}.values()):
            if isinstance(b, Buffer) and b.gone is not None:
                b.live("graph replay")

    def __call__(self, wait: bool = False, timeout: float | None = None, **values) -> None:
        if not self.built:
            self.build(**values)
        else:
            self._check_live(values)
            self.device._replay_graph(self, values)
            self.bound.update(values)
        if wait:
            self.device.synchronize(timeout)


# ----------------------------------------------------------------------------------------- device
class HCQDevice(abc.ABC):
    """One GPU. Subclasses provide memory, queues and the launch path; `timeline` is the device's
    signal every submission through the convenience calls (program calls, copies, graphs) bumps."""

    name: str
    chip: str = ""                 # what the backend calls the GPU (e.g. "navi31 gfx1100"), for reprs
    default_timeout: float = 10.0
    executes_kernels: bool = True  # False on a model that checks and records launches without running them

    @property
    @abc.abstractmethod
    def timestamp_hz(self) -> float:
        """Ticks per second of the clock the backend's timestamps count (Signal.timestamp divides by it):
        each backend declares its own (a class attribute will do), hcq assumes none."""

    def describe(self) -> str:
        """One line for repr: where the GPU is and what it has (backends add to it)."""
        return self.chip

    def __repr__(self) -> str:
        what = self.describe()
        return f"<{type(self).__module__.split('.')[0]}.{type(self).__name__} {self.name}{': ' + what if what else ''}>"
    timeline: Signal
    timeline_value: int = 0        # the newest value handed out (next_timeline)
    # The largest timeline value a submitted queue signals, last on its engine: what "everything submitted so
    # far" waits for (synchronize, copies, launch-slot reuse). A value taken and not submitted yet is not in it;
    # backends raise it at each submit (never above timeline_value: a larger value submitted is taken with it).
    timeline_submitted: int = 0

    @abc.abstractmethod
    def alloc(self, nbytes: int, *, host: bool = False, uncached: bool = False) -> Buffer:
        """Device memory (VRAM) by default; host=True: host memory the GPU reaches over the bus (the CPU
        reads and writes it directly); uncached=True: the GPU bypasses its caches for it (for memory
        another agent polls or writes while kernels run)."""

    @abc.abstractmethod
    def free(self, buf: Buffer) -> None: ...

    @abc.abstractmethod
    def copyin(self, buf: Buffer, data, offset: int = 0) -> None:
        """Writes a bytes-like object (numpy arrays included) into buf at offset; returns when done."""

    @abc.abstractmethod
    def copyout(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes: ...

    @abc.abstractmethod
    def copy(self, dst: Buffer, src: Buffer, nbytes: int | None = None) -> None:
        """GPU copy between buffers of this device, or between this device and another of the same
        backend; returns when done."""

    @abc.abstractmethod
    def program(self, code_object: bytes, name: str) -> Program: ...

    @abc.abstractmethod
    def new_signal(self, value: int = 0) -> Signal: ...

    @abc.abstractmethod
    def compute_queue(self) -> HWQueue: ...

    @abc.abstractmethod
    def copy_queue(self) -> HWQueue: ...

    @abc.abstractmethod
    def _wait(self, signal: Signal, value: int, timeout: float) -> None: ...

    @abc.abstractmethod
    def _launch(self, prog: Program, args, global_size, local_size, wait: bool, timeout) -> float | None: ...

    @abc.abstractmethod
    def _build_graph(self, graph: Graph, values: dict) -> None: ...

    @abc.abstractmethod
    def _replay_graph(self, graph: Graph, values: dict) -> None: ...

    def graph(self) -> Graph:
        return Graph(self)

    def next_timeline(self) -> int:
        """A new value for a queue to signal on `timeline`: waits for everything submitted count it once a queue
        that signals it is submitted (timeline_submitted), not before."""
        self.timeline_value += 1
        return self.timeline_value

    def _submit_graph_runs(self, graph: Graph, runs) -> None:
        """Resubmits a recorded graph's queue runs, chained: run i waits for graph.seq + i, signals the next,
        the last signals the device timeline. runs: (queue, wait index or -1, tail signal index)."""
        seq, last = graph.seq, len(runs) - 1
        for i, (q, wait_idx, tail_idx) in enumerate(runs):
            if wait_idx >= 0:
                q.update_wait(wait_idx, value=seq + i)
            q.update_signal(tail_idx, value=self.next_timeline() if i == last else seq + i + 1)
            q.submit()
        graph.seq = seq + last
        graph.fence = self.timeline_submitted    # the last run's value: its submit raised the mark to it

    def synchronize(self, timeout: float | None = None) -> None:
        """Waits until everything submitted through the timeline has finished (a value taken with
        next_timeline() and not submitted yet is not waited for)."""
        self.timeline.wait(self.timeline_submitted, timeout)

    def recover(self) -> None:
        """Makes the device usable after a hang or fault (the backend resets its engines)."""
        raise HCQError(f"{self.name}: this backend cannot recover")

    def close(self) -> None:
        """Releases the device."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
