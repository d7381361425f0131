"""The NVIDIA backend of hcq: an H100/H200 through the NVIDIA kernel module's RM ioctls (or its model).

    dev = hcq.open("nv")            # the first GPU; "nv:1", "nv:GPU-<uuid>"; "nv:sim" for the model
    prog = dev.program(cubin_bytes, "saxpy")       # NVRTC's cubin for sm_90 (nvdrv.nvrtc, nvdrv.cubin)
    prog(y, x, 2.0, n, global_size=(n // 256,), local_size=(256,), wait=True)

Bring-up, in the order RM needs it (nvdrv.rmapi for the structures, nvdrv.classes for the classes):
the version handshake on /dev/nvidiactl (NV_ESC_CHECK_VERSION_STR, strict, with the running module's
version), a root client, the GPU's device and subdevice, its UUID, the usermode doorbell page
(HOPPER_USERMODE_A mapped through NV_ESC_RM_MAP_MEMORY on a registered /dev/nvidiaN fd), a VA space
and one NV50_MEMORY_VIRTUAL range inside it that all memory is mapped into at addresses nvdrv picks
(NV_ESC_RM_MAP_MEMORY_DMA, DMA_OFFSET_FIXED), UVM registration of the GPU when /dev/nvidia-uvm is
there, then one channel group (TSG) with two GPFIFO channels: compute (HOPPER_COMPUTE_A) and copy
(HOPPER_DMA_COPY_A), their rings and USERD in CPU-mapped VRAM, an error notifier each in host memory,
their work submit tokens, and the TSG scheduled.

Memory: `alloc` is VRAM (NV01_MEMORY_LOCAL_USER); `host=True` is process memory described to RM
(NV01_MEMORY_SYSTEM_OS_DESCRIPTOR) that the CPU reads and writes directly. copyin/copyout go through
the copy engine and a host staging buffer. Signals are 16-byte host-memory semaphores: host
SEM_EXECUTE releases write the 64-bit value and, with RELEASE_TIMESTAMP, the GPU time in nanoseconds
(timestamp_hz = 1e9: the GPU's PTIMER counts ns) 8 bytes after it.

A launch is a QMD V03_00 and constant bank 0 (the cubin's const0 with the parameters at its param
base) in a host-memory launch slot, sent with SEND_PCAS_A + SEND_SIGNALING_PCAS2_B. Faults stop a
channel: RM writes its error notifier (the Xid), which a wait reads and raises as HCQFault; recover()
frees the channels and makes new ones.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import struct
import time
import weakref

from hcq.api import (ArgLayout, Buffer, HCQDevice, Graph, HCQError, HCQFault, HCQTimeout, HWQueue, KernelArg, Program,
                     Signal, Var, byte_count)
from nvdrv import classes as C
from nvdrv import ioctl, pushbuf
from nvdrv import rmapi as R
from nvdrv.rmapi import RMError

PAGE = 4096
BIG_PAGE = 64 << 10
VA_RANGE = 1 << 40                 # the NV50_MEMORY_VIRTUAL range nvdrv maps everything into
GPFIFO_ENTRIES = 1024
CMD_ARENA = 1 << 20                # per channel: pushbuffer segments (host memory)
LAUNCH_ARENA = 4 << 20             # compute launch slots: QMD + constant bank 0 (host memory)
STAGING = 4 << 20                  # copyin/copyout bounce buffer (host memory)
SIGNAL_BYTES = 16
COPY_LINE = 1 << 31                # bytes per LAUNCH_DMA line of a copy (LINE_LENGTH_IN: 32 bits, below 4 GiB)
TIMESTAMP_HZ = 1e9                 # semaphore timestamps are PTIMER nanoseconds
SM_VERSION = 90                    # H100 and H200 (GH100): compute capability 9.0
XID_NAMES = {13: "graphics engine exception (a bad method or QMD)", 31: "MMU fault (an address no mapping covers)",
             32: "PBDMA error (a malformed GPFIFO entry or method header)", 43: "channel reset (RC)"}
SHARED_WINDOW = 0x00FE_0000_0000   # where generic addresses see shared memory (assumption: any 4 GiB-aligned
LOCAL_WINDOW = 0x00FF_0000_0000    # window outside the VA range nvdrv maps memory in)


def _pages(n: int, align: int = PAGE) -> int:
    return max(align, (n + align - 1) // align * align)


class NVHCQDevice(HCQDevice):
    """One NVIDIA GPU serving hcq."""

    timestamp_hz = TIMESTAMP_HZ

    def __init__(self, spec: str, prov: ioctl.Provider, which: str):
        self.name, self.prov = spec, prov
        self.chip = "GH100 sm_90"
        self._closed = True
        self._files: list = []
        self._buffers = weakref.WeakSet()      # live buffers (not views): close() marks them dead
        try:
            self.ctl = self._open(ioctl.NVIDIACTL)
        except PermissionError as e:
            raise HCQError(f"{spec}: cannot open {ioctl.NVIDIACTL} ({e.strerror}): add yourself to the group that owns "
                           "/dev/nvidia* (usually 'video') or fix its mode (see docs/nv.md)") from None
        # the model (nv:sim) checks and records launches but has no SASS executor
        self.executes_kernels = bool(getattr(prov, "executes_kernels", True))
        self.module_version = prov.module_version()
        self._check_version()
        self.client = self._alloc(0, 0, C.NV01_ROOT_CLIENT, None)
        self.gpu_index, self.gpu_id, self.instance = self._pick_gpu(which)
        self.dev_fd = self._open_registered(ioctl.device_node(self.instance))
        self.device = self._alloc(self.client, self.client, C.NV01_DEVICE_0,
                                  R.NV0080_ALLOC_PARAMETERS(deviceId=self.instance, hClientShare=self.client,
                                                            vaMode=2))   # MULTIPLE_VASPACES (nvos.h)
        self.subdevice = self._alloc(self.client, self.device, C.NV20_SUBDEVICE_0, R.NV2080_ALLOC_PARAMETERS())
        self.uuid = self._uuid(self.subdevice)
        self.usermode_obj = self._alloc(self.client, self.subdevice, C.HOPPER_USERMODE_A, None)
        self.doorbell = self._cpu_map(self.usermode_obj, C.USERMODE_MAP_BYTES, self.subdevice)
        self.vaspace = self._alloc(self.client, self.device, C.FERMI_VASPACE_A, R.NV_VASPACE_ALLOCATION_PARAMETERS())
        vp = R.NV_MEMORY_ALLOCATION_PARAMS(owner=self.client, flags=R.NVOS32_ALLOC_FLAGS_VIRTUAL, size=VA_RANGE,
                                           hVASpace=self.vaspace)
        self.virtual = self._alloc(self.client, self.device, C.NV50_MEMORY_VIRTUAL, vp)
        self.va_base, self.va_end = vp.offset, vp.offset + VA_RANGE
        self._va_next, self._va_free = self.va_base, []
        self.uvm = self._register_uvm()
        self._closed = False
        self._signal_pages: list = []
        self._free_signals: list[Signal] = []
        self.timeline = self.new_signal()
        self.staging = self.alloc(STAGING, host=True)
        self.launch_arena = _Arena(self, LAUNCH_ARENA)
        self._make_channels()

    # ---------------------------------------------------------------------------------------- RM calls
    def _open(self, path: str):
        f = self.prov.open(path)
        self._files.append(f)
        return f

    def _escape(self, f, nr: int, p, what: str) -> None:
        try:
            f.ioctl(R.nv_iowr(nr, ctypes.sizeof(p)), p)
        except OSError as e:
            raise HCQError(f"{self.name}: {what}: the kernel module refused {R.ESCAPE_NAMES.get(nr, hex(nr))} "
                           f"({errno.errorcode.get(e.errno, e.errno)}): {e.strerror or e}") from None

    def _rm(self, p, what: str, hint: str = "") -> None:
        if p.status:
            raise HCQError(f"{self.name}: {RMError(what, p.status, hint)}")

    def _check_version(self) -> None:
        p = R.nv_ioctl_rm_api_version_t(cmd=R.NV_RM_API_VERSION_CMD_STRICT, versionString=self.module_version.encode())
        try:
            self.ctl.ioctl(R.nv_iowr(R.NV_ESC_CHECK_VERSION_STR, ctypes.sizeof(p)), p)
        except OSError:
            raise HCQError(f"{self.name}: the NVIDIA kernel module refused version {self.module_version!r}; it runs "
                           f"{p.versionString.decode(errors='replace')!r}. Reload the module or reboot so the loaded "
                           "module and /sys/module/nvidia/version agree") from None

    def _alloc(self, root: int, parent: int, cls: int, params) -> int:
        p = R.NVOS21_PARAMETERS(hRoot=root, hObjectParent=parent, hObjectNew=0, hClass=cls)
        if params is not None:
            p.pAllocParms, p.paramsSize = ctypes.addressof(params), ctypes.sizeof(params)
        self._escape(self.ctl, R.NV_ESC_RM_ALLOC, p, f"allocating {C.class_name(cls)}")
        self._rm(p, f"NV_ESC_RM_ALLOC of {C.class_name(cls)} under {parent:#x}")
        return p.hObjectNew

    def _free_object(self, handle: int, parent: int = 0) -> None:
        p = R.NVOS00_PARAMETERS(hRoot=self.client, hObjectParent=parent, hObjectOld=handle)
        self._escape(self.ctl, R.NV_ESC_RM_FREE, p, f"freeing {handle:#x}")
        self._rm(p, f"NV_ESC_RM_FREE of {handle:#x}")

    def _control(self, obj: int, cmd: int, params) -> None:
        p = R.NVOS54_PARAMETERS(hClient=self.client, hObject=obj, cmd=cmd, params=ctypes.addressof(params),
                                paramsSize=ctypes.sizeof(params))
        self._escape(self.ctl, R.NV_ESC_RM_CONTROL, p, f"control {cmd:#x}")
        self._rm(p, f"NV_ESC_RM_CONTROL {cmd:#x} on {obj:#x}")

    def _open_registered(self, path: str):
        try:
            f = self._open(path)
        except FileNotFoundError:
            raise HCQError(f"{self.name}: {path} is missing: the module created no node for this GPU (run "
                           "nvidia-modprobe or load the module with its udev rules)") from None
        p = R.nv_ioctl_register_fd_t(ctl_fd=self.ctl.fileno())
        self._escape(f, R.NV_ESC_REGISTER_FD, p, f"registering {path} with {ioctl.NVIDIACTL}")
        return f

    def _pick_gpu(self, which: str) -> tuple[int, int, int]:
        ids = R.NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS()
        self._control(self.client, R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, ids)
        gpus = [g for g in ids.gpuIds if g != R.NV0000_CTRL_GPU_INVALID_ID]
        if not gpus:
            raise HCQError(f"{self.name}: the NVIDIA module sees no GPU (GET_PROBED_IDS is empty)")
        infos = []
        for g in gpus:
            info = R.NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS(gpuId=g)
            self._control(self.client, R.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, info)
            infos.append((g, info.deviceInstance))
        if which.upper().startswith("GPU-"):
            self._want_uuid = which[4:].lower().replace("-", "")
            return 0, *infos[0]       # matched against the UUID once the subdevice exists (_uuid)
        i = int(which or 0)
        if not 0 <= i < len(infos):
            raise HCQError(f"{self.name}: GPU {i} does not exist; the module sees {len(infos)} GPU(s): nv:0.."
                           f"nv:{len(infos) - 1}")
        return i, *infos[i]

    def _uuid(self, subdevice: int) -> str:
        gid = R.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(flags=R.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
        self._control(subdevice, R.NV2080_CTRL_CMD_GPU_GET_GID_INFO, gid)
        raw = bytes(gid.data[:gid.length])
        h = raw.hex()
        uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        want = getattr(self, "_want_uuid", None)
        if want is not None and want != h:
            raise HCQError(f"{self.name}: no GPU with that UUID; GPU 0 is {uuid} (nv:0)")
        self.uuid_raw = raw
        return uuid

    def _cpu_map(self, mem: int, size: int, device: int | None = None) -> ioctl.Mapping:
        f = self._open_registered(ioctl.device_node(self.instance))
        p = R.nv_ioctl_nvos33_parameters_with_fd(
            params=R.NVOS33_PARAMETERS(hClient=self.client, hDevice=device or self.device, hMemory=mem, length=size),
            fd=f.fileno())
        self._escape(self.ctl, R.NV_ESC_RM_MAP_MEMORY, p, "mapping memory for the CPU")
        self._rm(p.params, f"NV_ESC_RM_MAP_MEMORY of {mem:#x}")
        try:
            return f.mmap(size)
        except OSError as e:
            raise HCQError(f"{self.name}: mmap of {size:#x} bytes of {mem:#x} failed: {e}") from None

    def _register_uvm(self) -> bool:
        if not self.prov.exists(ioctl.NVIDIA_UVM):
            return False      # the RM mapping path nvdrv uses does not need UVM; describe() says it is absent
        uvm = self._open(ioctl.NVIDIA_UVM)
        init = R.UVM_INITIALIZE_PARAMS()
        reg = R.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=self.ctl.fileno(), hClient=self.client)
        ctypes.memmove(reg.gpu_uuid.uuid, self.uuid_raw, 16)
        for req, p, what in ((R.UVM_INITIALIZE, init, "UVM_INITIALIZE"), (R.UVM_REGISTER_GPU, reg, "UVM_REGISTER_GPU")):
            try:
                uvm.ioctl(req, p)
            except OSError as e:
                raise HCQError(f"{self.name}: {what} on {ioctl.NVIDIA_UVM} failed: {e}") from None
            if p.rmStatus:
                raise HCQError(f"{self.name}: {RMError(what, p.rmStatus)}")
        return True

    # ---------------------------------------------------------------------------------------- memory
    def _va(self, size: int) -> int:
        for i, (va, n) in enumerate(self._va_free):
            if n >= size:
                self._va_free[i:i + 1] = [(va + size, n - size)] if n > size else []
                return va
        va, self._va_next = self._va_next, self._va_next + size
        if self._va_next > self.va_end:
            raise HCQError(f"{self.name}: out of GPU virtual addresses ({VA_RANGE >> 30} GiB range)")
        return va

    def _map_gpu(self, mem: int, size: int) -> int:
        va = self._va(size)
        p = R.NVOS46_PARAMETERS(hClient=self.client, hDevice=self.device, hDma=self.virtual, hMemory=mem, length=size,
                                flags=R.NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE, dmaOffset=va)
        self._escape(self.ctl, R.NV_ESC_RM_MAP_MEMORY_DMA, p, "mapping memory for the GPU")
        self._rm(p, f"NV_ESC_RM_MAP_MEMORY_DMA of {mem:#x} at {va:#x}")
        return p.dmaOffset

    def alloc(self, nbytes: int, *, host: bool = False, uncached: bool = False, cpu_map: bool = False) -> Buffer:
        self._check_open()
        if nbytes <= 0:
            raise HCQError(f"{self.name}: alloc of {nbytes} bytes: sizes are positive")
        size = _pages(nbytes, BIG_PAGE)
        if host:
            m, addr = ioctl.host_memory(size)
            p = R.nv_ioctl_nvos02_parameters_with_fd(params=R.NVOS02_PARAMETERS(
                hRoot=self.client, hObjectParent=self.device, hClass=C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                flags=R.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS | R.NVOS02_FLAGS_COHERENCY_CACHED, pMemory=addr,
                limit=size - 1), fd=-1)
            self._escape(self.dev_fd, R.NV_ESC_RM_ALLOC_MEMORY, p, f"describing {size:#x} bytes of host memory")
            self._rm(p.params, "NV_ESC_RM_ALLOC_MEMORY (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)")
            handle = p.params.hObjectNew
            va = self._map_gpu(handle, size)
            return self._track(Buffer(self, va, nbytes, _Mem(handle, size, m, memoryview(m))))
        prm = R.NV_MEMORY_ALLOCATION_PARAMS(owner=self.client, type=R.NVOS32_TYPE_IMAGE, size=size,
                                            flags=R.NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE, alignment=BIG_PAGE,
                                            attr2=R.NVOS32_ATTR2_GPU_CACHEABLE_NO if uncached else 0)
        handle = self._alloc(self.client, self.device, C.NV01_MEMORY_LOCAL_USER, prm)
        va = self._map_gpu(handle, size)
        cpu = self._cpu_map(handle, size) if cpu_map else None
        return self._track(Buffer(self, va, nbytes, _Mem(handle, size, None, cpu.view if cpu else None, cpu)))

    def _track(self, buf: Buffer) -> Buffer:
        self._buffers.add(buf)
        return buf

    def free(self, buf: Buffer) -> None:
        buf.live("free")
        if buf.base is not None:
            raise HCQError(f"{self.name}: free the buffer, not a view of it")
        self.synchronize()
        self._free_mem(buf)

    def _free_mem(self, buf: Buffer) -> None:
        self._free_object(buf.mem.handle, self.device)
        self._va_free.append((buf.va, buf.mem.size))
        buf.mem.handle = None
        buf.release("was freed")

    def _host_view(self, buf: Buffer) -> memoryview | None:
        return buf.mem.view if buf.mem is not None else None

    def copyin(self, buf: Buffer, data, offset: int = 0) -> None:
        src = memoryview(data)
        src = src.cast("B") if src.c_contiguous else memoryview(src.tobytes())   # a strided view: in C order
        self._bounds(buf, offset, len(src), "copyin")
        view = self._host_view(buf)
        self.synchronize()
        if view is not None:
            at = buf.offset + offset
            view[at:at + len(src)] = src
            return
        for at in range(0, len(src), STAGING):
            piece = src[at:at + STAGING]
            self.staging.mem.view[:len(piece)] = piece
            self.copy(buf.view(offset + at, len(piece)), self.staging, len(piece))

    def copyout(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        size = buf.size - offset if size is None else size
        self._bounds(buf, offset, size, "copyout")
        view = self._host_view(buf)
        self.synchronize()
        if view is not None:
            at = buf.offset + offset
            return bytes(view[at:at + size])
        out = bytearray(size)
        for at in range(0, size, STAGING):
            n = min(STAGING, size - at)
            self.copy(self.staging, buf.view(offset + at, n), n)
            out[at:at + n] = self.staging.mem.view[:n]
        return bytes(out)

    def _bounds(self, buf: Buffer, offset: int, n: int, what: str) -> None:
        buf.live(what)
        self._check_open()
        if buf.device is not self:
            raise HCQError(f"{self.name}: {what} of a buffer of {buf.device.name}")
        if offset < 0 or n < 0 or offset + n > buf.size:
            raise HCQError(f"{self.name}: {what} of {n} bytes at {offset} outside a {buf.size}-byte buffer")

    def copy(self, dst: Buffer, src: Buffer, nbytes: int | None = None) -> None:
        """Copies nbytes (default: all of src, as hcq.HCQDevice.copy says) by the copy engine; returns when done.
        A dst smaller than that is an error, not a shorter copy."""
        dst.live("copy"), src.live("copy")
        n = src.size if nbytes is None else nbytes
        if n == 0:
            return      # as a copyin or copyout of nothing
        q = self.copy_queue()
        q.copy(dst, src, n)
        q.signal(self.timeline, self.next_timeline())
        q.submit()
        self.synchronize()

    # --------------------------------------------------------------------------------------- signals
    def new_signal(self, value: int = 0) -> Signal:
        if not self._free_signals:
            page = self.alloc(PAGE, host=True)
            self._signal_pages.append(page)
            words = page.mem.view.cast("Q")
            for i in range(PAGE // SIGNAL_BYTES - 1, -1, -1):
                self._free_signals.append(Signal(self, page.va + i * SIGNAL_BYTES, words[2 * i:2 * i + 2]))
        s = self._free_signals.pop()
        s.value, s.mem[1] = value, 0
        return s

    # -------------------------------------------------------------------------------------- channels
    def _make_channels(self) -> None:
        self.tsg = self._alloc(self.client, self.device, C.KEPLER_CHANNEL_GROUP_A,
                               R.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(hVASpace=self.vaspace,
                                                                        engineType=R.NV2080_ENGINE_TYPE_GRAPHICS))
        self.compute = _Channel(self, "compute", C.HOPPER_COMPUTE_A, C.SUBCHANNEL_COMPUTE, R.NV_GR_ALLOCATION_PARAMETERS())
        self.copier = _Channel(self, "copy", C.HOPPER_DMA_COPY_A, C.SUBCHANNEL_COPY,
                               R.NVB0B5_ALLOCATION_PARAMETERS(version=R.NVB0B5_ALLOCATION_PARAMETERS_VERSION_1,
                                                              engineType=R.NV2080_ENGINE_TYPE_COPY0))
        self._control(self.tsg, R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, R.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=1))
        pb = pushbuf.PushBuffer()      # the compute channel's windows, once (SET_SHADER_*_WINDOW_A: upper, B: lower)
        pb.methods(C.SUBCHANNEL_COMPUTE, C.NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_A, SHARED_WINDOW >> 32,
                   SHARED_WINDOW & 0xFFFFFFFF)
        pb.methods(C.SUBCHANNEL_COMPUTE, C.NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_A, LOCAL_WINDOW >> 32,
                   LOCAL_WINDOW & 0xFFFFFFFF)
        self.compute.push(pb)

    def compute_queue(self) -> NVComputeQueue:
        return NVComputeQueue(self)

    def copy_queue(self) -> NVCopyQueue:
        return NVCopyQueue(self)

    def _wait(self, signal: Signal, value: int, timeout: float) -> None:
        t_end = time.perf_counter() + timeout
        mem, n = signal.mem, 0
        while mem[0] < value:
            # reading GPGet is the progress check a hang report needs; on the model it lets the engines run
            self.compute.gp_get(), self.copier.gp_get()
            n += 1
            if n & 15 == 0 or mem[0] < value and time.perf_counter() > t_end:
                self._check_faults()
                if mem[0] < value and time.perf_counter() > t_end:
                    raise HCQTimeout(f"{self.name}: {signal.name} at {signal.va:#x} is {mem[0]}, not {value}, after "
                                     f"{timeout:g} s; compute GPGet/GPPut {self.compute.gp_get()}/{self.compute.put}, "
                                     f"copy {self.copier.gp_get()}/{self.copier.put}; dev.recover() makes new channels")
        self._check_faults()

    def _check_faults(self) -> None:
        for ch in (self.compute, self.copier):
            xid = ch.notifier_xid()
            if xid:
                raise HCQFault(f"{self.name}: the {ch.what} channel stopped with Xid {xid} "
                               f"({XID_NAMES.get(xid, 'see NVIDIA Xid list')}); dev.recover() makes new channels")

    def recover(self) -> list[str]:
        """Frees the channel group (a channel RM stopped cannot run again) and makes new channels; the
        timeline is set to the last value handed out so synchronize() returns."""
        faults = []
        for ch in (self.compute, self.copier):
            xid = ch.notifier_xid()
            if xid:
                faults.append(f"{ch.what}: Xid {xid} ({XID_NAMES.get(xid, '?')})")
        self._free_object(self.tsg, self.device)
        self.timeline.value = self.timeline_submitted = self.timeline_value    # what was in flight is dropped
        self.compute.release(), self.copier.release()
        self.launch_arena.reset()
        self._make_channels()
        return faults

    # -------------------------------------------------------------------------------------- programs
    def program(self, code_object, name: str) -> Program:
        try:
            if hasattr(code_object, "kernels"):      # an nvdrv.cubin.Cubin already parsed
                cub = code_object
            else:
                from nvdrv.cubin import parse_cubin
                cub = parse_cubin(bytes(code_object), sm=SM_VERSION)
            k = cub.kernel(name)
        except ValueError as e:                      # nvdrv.cubin.CubinError
            raise HCQError(f"{self.name}: {e}") from None
        if hasattr(cub, "runs_on") and not cub.runs_on(SM_VERSION):
            raise HCQError(f"{self.name}: kernel {name} is built for {cub.arch}; this GPU is sm_{SM_VERSION}")
        if k.frame_size:
            raise HCQError(f"{self.name}: kernel {name} uses {k.frame_size} bytes of stack (local memory), which nvdrv "
                           "does not set up yet")
        args = [KernelArg(f"arg{i}", off, size, kind) for i, (off, size, kind) in enumerate(k.arg_entries())]
        layout = ArgLayout(name, args, k.param_size, device=self)
        image = self.alloc(len(k.code) + 256)
        self.copyin(image, k.code)
        max_local = 1024
        if k.max_threads:
            max_local = min(max_local, k.max_threads[0] * k.max_threads[1] * k.max_threads[2])
        return Program(self, name, layout, _Kernel(k, image, layout), k.shared_size, max_local)

    def _launch(self, prog: Program, args, global_size, local_size, wait: bool, timeout) -> float | None:
        g, l_ = prog.check_sizes(global_size, local_size)
        q = self.compute_queue()
        if wait:
            t0, t1 = self.new_signal(), self.new_signal()
            q.timestamp(t0)
        q.exec(prog, args, g, l_)
        if wait:
            q.timestamp(t1)
        q.signal(self.timeline, self.next_timeline())
        q.submit()
        if not wait:
            return None
        try:
            self.synchronize(timeout)
            return (t1.timestamp_ticks - t0.timestamp_ticks) / TIMESTAMP_HZ
        finally:
            self._free_signals += [t0, t1]

    # ---------------------------------------------------------------------------------------- graphs
    def _build_graph(self, graph: Graph, values: dict) -> None:
        """Runs of consecutive launches or copies, each one queue built once, chained by a graph signal;
        uses of each variable are recorded as patch points (kernel argument slots, copy addresses)."""
        sync = self.new_signal()
        runs: list[list] = []
        patches: dict[str, list] = {}
        slots = sum(C.QMD_BYTES + s[1].handle.cb0_bytes + 255 & ~255 for s in graph.steps if s[0] == "exec")
        arena = _Arena(self, _pages(slots)) if slots else None
        for step in graph.steps:
            compute = step[0] == "exec"
            if not runs or isinstance(runs[-1][0], NVComputeQueue) != compute:
                q = self.compute_queue() if compute else self.copy_queue()
                q.arena = arena
                runs.append([q, q.wait(sync, 0) if runs else -1])
            q = runs[-1][0]
            if compute:
                _, prog, args, g, l_ = step
                idx = q.exec(prog, [values[a.name] if isinstance(a, Var) else a for a in args], g, l_)
                for i, a in enumerate(args):
                    if isinstance(a, Var):
                        patches.setdefault(a.name, []).append((q, idx, i))
            else:
                _, dst, src, n = step
                idx = q.copy(*(values[x.name] if isinstance(x, Var) else x for x in (dst, src)), n)
                for x, fld in ((dst, "dst"), (src, "src")):
                    if isinstance(x, Var):
                        patches.setdefault(x.name, []).append((q, idx, fld))
        last = len(runs) - 1
        graph.backend = ([(q, w, q.signal(self.timeline if i == last else sync, 0)) for i, (q, w) in enumerate(runs)],
                         sync, patches)
        graph.fence = graph.seq = 0
        self._replay_graph(graph, {})

    def _replay_graph(self, graph: Graph, values: dict) -> None:
        if graph.fence:
            self.timeline.wait(graph.fence)     # launch slots are rewritten in place: the last replay must be done
        runs, sync, patches = graph.backend
        writes = []     # every value checked against every use before any is patched (a refused replay changes nothing)
        for name, v in values.items():
            if name not in patches:
                raise HCQError(f"{self.name}: the graph has no variable {name!r}; it has {sorted(patches)}")
            for q, idx, what in patches[name]:
                if isinstance(what, int):
                    writes.append((q, idx, what, q.arg_value(idx, what, v)))
                else:
                    q.check_copy(idx, **{what: v})
                    writes.append((q, idx, what, v))
        for q, idx, what, v in writes:
            if isinstance(what, int):
                q.update_arg(idx, what, v)
            else:
                q.update_copy(idx, **{what: v})
        self._submit_graph_runs(graph, runs)

    # ------------------------------------------------------------------------------------------ misc
    def _check_open(self) -> None:
        if self._closed:
            raise HCQError(f"{self.name}: device is closed")

    def describe(self) -> str:
        if self._closed:
            return f"{self.chip}, closed"
        return (f"{self.chip} {self.uuid}, module {self.module_version}"
                f"{'' if self.uvm else ', no nvidia-uvm'}{' (model)' if self.prov.name != 'kernel' else ''}")

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.synchronize(2.0)
        except HCQError:
            pass
        self._closed = True
        p = R.NVOS00_PARAMETERS(hRoot=self.client, hObjectParent=0, hObjectOld=self.client)
        try:
            self.ctl.ioctl(R.nv_iowr(R.NV_ESC_RM_FREE, ctypes.sizeof(p)), p)   # the whole client tree
        except OSError:
            pass
        for f in self._files:
            f.close()
        for b in list(self._buffers):
            b.release("belongs to a closed device")


class _Mem:
    """A buffer's RM memory: its handle, size, and the CPU view where there is one."""
    __slots__ = ("handle", "size", "keep", "view", "mapping")

    def __init__(self, handle, size, keep, view, mapping=None):
        self.handle, self.size, self.keep, self.view, self.mapping = handle, size, keep, view, mapping


class _Arena:
    """Host memory handed out in order and reused once the timeline has passed what used it."""

    def __init__(self, dev: NVHCQDevice, size: int):
        self.dev, self.size = dev, size
        self.buf = dev.alloc(size, host=True)
        self.view = self.buf.mem.view
        self.at, self.fence = 0, 0

    def take(self, n: int) -> int:
        n = (n + 255) & ~255
        if self.at + n > self.size:
            self.dev.timeline.wait(self.fence)   # everything before the wrap has run
            self.at = 0
        off, self.at = self.at, self.at + n
        self.fence = self.dev.timeline_value + 1
        return off

    def reset(self) -> None:
        self.at, self.fence = 0, 0


class _Channel:
    """One GPFIFO channel: its ring and USERD in CPU-mapped VRAM, a command arena in host memory, its
    engine object on a subchannel, its work submit token and error notifier."""

    def __init__(self, dev: NVHCQDevice, what: str, engine_cls: int, subchannel: int, engine_params):
        self.dev, self.what = dev, what
        ring_bytes = GPFIFO_ENTRIES * C.GP_ENTRY_BYTES
        self.area = dev.alloc(ring_bytes + C.USERD_BYTES, cpu_map=True)
        self.ring = self.area.mem.view[:ring_bytes].cast("I")
        self.userd_off = ring_bytes
        self.userd = self.area.mem.mapping
        self.notifier = dev.alloc(PAGE, host=True)
        self.cmds = dev.alloc(CMD_ARENA, host=True)
        self.cmd_at, self.put = 0, 0
        self.known_get = 0                 # GPGet as last read
        prm = R.NV_CHANNEL_ALLOC_PARAMS(hObjectError=self.notifier.mem.handle, gpFifoOffset=self.area.va,
                                        gpFifoEntries=GPFIFO_ENTRIES, hVASpace=dev.vaspace,
                                        engineType=R.NV2080_ENGINE_TYPE_GRAPHICS)
        prm.hUserdMemory[0], prm.userdOffset[0] = self.area.mem.handle, ring_bytes
        self.handle = dev._alloc(dev.client, dev.tsg, C.HOPPER_CHANNEL_GPFIFO_A, prm)
        dev._alloc(dev.client, self.handle, engine_cls, engine_params)
        tok = R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS()
        dev._control(self.handle, R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN, tok)
        self.token = tok.workSubmitToken
        pb = pushbuf.PushBuffer()
        pb.methods(subchannel, C.NVC86F_SET_OBJECT, engine_cls)
        self.push(pb)

    def gp_get(self) -> int:
        return self.userd.read32(self.userd_off + C.USERD_GP_GET)

    def notifier_xid(self) -> int:
        return struct.unpack_from("<I", self.notifier.mem.view, 8)[0]     # NvNotification.info32

    def push(self, pb: pushbuf.PushBuffer) -> None:
        """Copies the words into the command arena, adds a GPFIFO entry, moves GPPut and rings the doorbell."""
        n = len(pb.words) * 4
        if n > CMD_ARENA:
            raise HCQError(f"{self.dev.name}: {n} bytes of commands in one submission; the limit is {CMD_ARENA}")
        nxt = (self.put + 1) % GPFIFO_ENTRIES
        if nxt == self.known_get:          # the ring looks full: GPGet (a BAR1 read) is read only then
            self.known_get = self.gp_get()
        if self.cmd_at + n > CMD_ARENA or nxt == self.known_get:
            self._drain()
            self.cmd_at = 0
        off = self.cmd_at
        self.cmds.mem.view[off:off + n] = pb.words.tobytes()
        self.cmd_at = (off + n + 7) & ~7
        e0, e1 = pushbuf.gp_entry(self.cmds.va + off, len(pb.words))
        self.ring[2 * self.put], self.ring[2 * self.put + 1] = e0, e1
        self.put = nxt
        self.userd.write32(self.userd_off + C.USERD_GP_PUT, self.put)
        self.dev.doorbell.write32(C.USERMODE_NOTIFY_CHANNEL_PENDING, self.token)

    def _drain(self) -> None:
        t_end = time.perf_counter() + self.dev.default_timeout
        while (get := self.gp_get()) != self.put:
            self.dev._check_faults()
            if time.perf_counter() > t_end:
                raise HCQTimeout(f"{self.dev.name}: the {self.what} channel did not consume its GPFIFO (GPGet "
                                 f"{get}, GPPut {self.put}); dev.recover() makes new channels")
        self.known_get = get

    def release(self) -> None:
        for b in (self.area, self.notifier, self.cmds):     # RM freed the channel: nothing uses them now
            self.dev._free_mem(b)


class _Kernel:
    """A loaded kernel: its code in VRAM, its constant bank 0 image, its launch resources."""

    def __init__(self, k, image: Buffer, layout: ArgLayout):
        self.k, self.image, self.layout = k, image, layout
        self.cb0_bytes = max(k.const0_size, k.param_base + k.param_size)
        self.const0 = bytes(k.const0).ljust(self.cb0_bytes, b"\0")
        # the QMD built once; a launch copies it and patches grid, block and the constant bank's address
        self.qmd = pushbuf.build_qmd(image.va, (1, 1, 1), (1, 1, 1), k.shared_size, k.registers, 0, self.cb0_bytes,
                                     max(1, k.barriers)).to_bytes()


class _Queue(HWQueue):
    """Host methods shared by both engines: semaphores and barriers, built once and patched."""
    subchannel = 0

    def __init__(self, dev: NVHCQDevice):
        self.dev = dev
        self.pb = pushbuf.PushBuffer()
        self.cmds: list[tuple] = []      # per command: (kind, word index, extra)
        self.tl = -1                     # index of the queue's last signal of the device's timeline (-1: none)

    def _add(self, kind: str, i: int, extra=None) -> int:
        self.cmds.append((kind, i, extra))
        return len(self.cmds) - 1

    def wait(self, signal: Signal, value: int) -> int:
        return self._add("wait", pushbuf.sem_acquire(self.pb, self.subchannel, signal.va, value))

    def signal(self, signal: Signal, value: int) -> int:
        i = self._add("signal", pushbuf.sem_release(self.pb, self.subchannel, signal.va, value))
        if signal is self.dev.timeline:
            self.tl = i
        return i

    def timestamp(self, signal: Signal) -> int:
        """A release with timestamp writes its 64-bit payload too (the value word before the time): the value
        this queue's last signal command gave `signal` (kept in step by update_signal), else its value now.
        A timestamp after q.signal(s, 5) released s's value as it was at build time (0), undoing the signal."""
        last = next((n for n in range(len(self.cmds) - 1, -1, -1)
                     if self.cmds[n][0] == "signal" and self._sem_va(self.cmds[n][1]) == signal.va), None)
        value = signal.value if last is None else self._sem_value(self.cmds[last][1])
        return self._add("signal", pushbuf.sem_release(self.pb, self.subchannel, signal.va, value), ("after", last))

    def _sem_va(self, i: int) -> int:
        return self.pb.words[i] | self.pb.words[i + 1] << 32

    def _sem_value(self, i: int) -> int:
        return self.pb.words[i + 2] | self.pb.words[i + 3] << 32

    def memory_barrier(self) -> int:
        return self._add("barrier", self.pb.methods(self.subchannel, C.NVC86F_WFI, 1))

    def _cmd(self, index: int, kind: str) -> tuple:
        try:
            c = self.cmds[index]
        except IndexError:
            raise HCQError(f"{self.dev.name}: command {index} does not exist in this queue") from None
        if c[0] != kind:
            raise HCQError(f"{self.dev.name}: command {index} is a {c[0]}, not a {kind}")
        return c

    def update_signal(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        _, i, _ = self._cmd(index, "signal")
        if signal is not None:
            pushbuf.patch_address(self.pb.words, i, signal.va)
            if signal is self.dev.timeline:
                self.tl = max(self.tl, index)
            elif index == self.tl:
                w, tl = self.pb.words, self.dev.timeline.va
                self.tl = max((n for n, (kind, j, _) in enumerate(self.cmds)
                               if kind == "signal" and w[j] | w[j + 1] << 32 == tl), default=-1)
        if value is not None:
            pushbuf.patch_value(self.pb.words, i, value)
            for kind, j, extra in self.cmds:     # the timestamps that release this signal's value after it
                if extra == ("after", index) and self._sem_va(j) == self._sem_va(i):
                    pushbuf.patch_value(self.pb.words, j, value)

    def update_wait(self, index: int, signal: Signal | None = None, value: int | None = None) -> None:
        _, i, _ = self._cmd(index, "wait")
        if signal is not None:
            pushbuf.patch_address(self.pb.words, i, signal.va)
        if value is not None:
            pushbuf.patch_value(self.pb.words, i, value)

    def submit(self) -> None:
        dev = self.dev
        dev._check_open()
        self._prepare()
        self._channel().push(self.pb)
        if self.tl >= 0:    # what waits for everything submitted wait for (HCQDevice.timeline_submitted)
            w, i = self.pb.words, self.cmds[self.tl][1]
            v = w[i + 2] | w[i + 3] << 32
            if v > dev.timeline_submitted:
                dev.timeline_submitted = v
                dev.timeline_value = max(dev.timeline_value, v)

    def _prepare(self) -> None:
        pass


class NVComputeQueue(_Queue):
    subchannel = C.SUBCHANNEL_COMPUTE

    def _channel(self) -> _Channel:
        return self.dev.compute

    arena: _Arena | None = None      # launch slots: the device's arena, or a graph's own (never reused)

    def exec(self, prog: Program, args, global_size=(1, 1, 1), local_size=(1, 1, 1)) -> int:
        g, l_ = prog.check_sizes(global_size, local_size)
        if prog.device is not self.dev:
            raise HCQError(f"{self.dev.name}: kernel {prog.name} was loaded on {prog.device.name}; its code and "
                           "constants are at that GPU's addresses: load it here too (dev.program)")
        k: _Kernel = prog.handle
        arena = self.arena or self.dev.launch_arena
        off = arena.take(C.QMD_BYTES + k.cb0_bytes)
        qmd_va, cb0_off = arena.buf.va + off, off + C.QMD_BYTES
        view = arena.view
        view[cb0_off:cb0_off + k.cb0_bytes] = k.const0
        prog.layout.pack_into(view, cb0_off + k.k.param_base, args)
        view[off:off + C.QMD_BYTES] = k.qmd
        pushbuf.patch_qmd(view, off, g, l_, arena.buf.va + cb0_off)
        i = pushbuf.launch(self.pb, qmd_va)
        return self._add("exec", i, (prog, off, (g, l_), arena))

    def update_exec(self, index: int, args=None, global_size=None, local_size=None) -> None:
        kind, i, (prog, off, (g0, l0), arena) = self._cmd(index, "exec")
        view = arena.view
        if args is not None:
            prog.layout.pack_into(view, off + C.QMD_BYTES + prog.handle.k.param_base, args)
        if global_size is not None or local_size is not None:
            g, l_ = prog.check_sizes(global_size or g0, local_size or l0)
            pushbuf.patch_qmd(view, off, g, l_)
            self.cmds[index] = (kind, i, (prog, off, (g, l_), arena))

    def arg_value(self, index: int, arg: int, value):
        """What update_arg writes for value (ArgLayout.arg_value: a Buffer of this device, a number that fits)."""
        return self._cmd(index, "exec")[2][0].layout.arg_value(arg, value)

    def update_arg(self, index: int, arg: int, value) -> None:
        """One argument of a built launch (graph replays); ArgumentError if value does not fit it."""
        _, _, (prog, off, _, arena) = self._cmd(index, "exec")
        lay = prog.layout
        at = off + C.QMD_BYTES + prog.handle.k.param_base + lay.arg_offsets[arg]
        lay.arg_structs[arg].pack_into(arena.view, at, lay.arg_value(arg, value))


class NVCopyQueue(_Queue):
    subchannel = C.SUBCHANNEL_COPY

    def _channel(self) -> _Channel:
        return self.dev.copier

    def copy(self, dst: Buffer, src: Buffer, nbytes: int) -> int:
        nbytes = byte_count(self.dev.name, "copy", nbytes, f" from {src} to {dst}")
        self._fits(dst, "copy to", nbytes), self._fits(src, "copy from", nbytes)
        # one LAUNCH_DMA line moves less than 4 GiB (LINE_LENGTH_IN is 32 bits): larger copies are several lines
        lines = [pushbuf.copy(self.pb, dst.va + at, src.va + at, min(COPY_LINE, nbytes - at))
                 for at in range(0, nbytes, COPY_LINE)]
        return self._add("copy", lines[0], (lines, nbytes))

    def _fits(self, buf: Buffer, what: str, nbytes: int) -> None:
        """HCQError unless buf is live memory of this device with room for nbytes (the copy engine reaches this
        GPU's virtual addresses: another GPU's buffer would name whatever this one maps there)."""
        buf.live(what)
        if buf.device is not self.dev:
            raise HCQError(f"{self.dev.name}: {what} {buf}: a copy queue reaches its own GPU's memory only; copy "
                           "between NVIDIA GPUs through host memory (copyout, then copyin)")
        if nbytes > buf.size:
            raise HCQError(f"{self.dev.name}: {what} {buf}: the copy of {nbytes} bytes overruns it")

    def check_copy(self, index: int, dst: Buffer | None = None, src: Buffer | None = None) -> None:
        """HCQError unless update_copy(index, dst, src) names buffers the copy fits (a smaller one would let the
        copy engine write past it into the next allocation)."""
        n = self._cmd(index, "copy")[2][1]
        for buf, what in ((dst, "copy to"), (src, "copy from")):
            if buf is not None:
                self._fits(buf, what, n)

    def update_copy(self, index: int, dst: Buffer | None = None, src: Buffer | None = None) -> None:
        self.check_copy(index, dst, src)
        for k, i in enumerate(self._cmd(index, "copy")[2][0]):
            at = k * COPY_LINE
            pushbuf.patch_copy(self.pb.words, i, dst.va + at if dst is not None else None,
                               src.va + at if src is not None else None)


def open_device(spec: str = "nv", **kwargs) -> NVHCQDevice:
    """hcq.open's entry for "nv", "nv:N", "nv:GPU-<uuid>" (the kernel module) and "nv:sim" (the model)."""
    parts = [x.strip() for x in spec.split(":")]
    if parts[0].lower() != "nv" or len(parts) > 3 or kwargs:
        raise HCQError(f"{spec}: NVIDIA device strings are nv, nv:N, nv:GPU-<uuid> and nv:sim"
                       f"{'; no options are taken' if kwargs else ''}")
    rest = parts[1:]
    sim = bool(rest) and rest[0].lower() == "sim"
    sel = rest[1:] if sim else rest
    which = sel[0] if sel else "0"
    if not (which.isdigit() or which.upper().startswith("GPU-")):
        raise HCQError(f"{spec}: {which!r} is not a GPU index or a GPU-<uuid>")
    if sim:
        try:
            prov = ioctl.provider("sim")
        except LookupError as e:
            raise HCQError(f"{spec}: {e}") from None
    else:
        prov = ioctl.provider()
        if not prov.exists(ioctl.NVIDIACTL):
            raise HCQError(f"{spec}: no NVIDIA GPU or kernel module here ({ioctl.NVIDIACTL} is missing): install and load "
                           "the NVIDIA open kernel module, 580 series (modprobe nvidia nvidia-uvm), or use nv:sim")
    return NVHCQDevice(spec, prov, which)
