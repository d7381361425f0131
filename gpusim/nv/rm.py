"""The NVIDIA kernel module as nvdrv sees it, without a GPU: device nodes whose ioctls behave as the
open module's RM does (driver 580.105.08, the version nvdrv.rmapi's tables come from), in front of one
simulated H100 (gpusim.nv.gpu).

Each rule names its source: kernel-open/nvidia/nv.c nvidia_ioctl (escape numbers and sizes, XFER,
which node each escape needs, `rmStatus != NV_OK` -> EINVAL), src/nvidia/arch/nvalloc/unix/src/escape.c
RmIoctl (the size check of every RM escape, NV_CTL_DEVICE_ONLY / NV_ACTUAL_DEVICE_ONLY, REGISTER_FD's
rules), osapi.c RmPerformVersionCheck (the version handshake), resserv rs_server.c / rs_client.c /
rs_resource.c (handles: duplicates NV_ERR_INSERT_DUPLICATE_NAME, unknown ones NV_ERR_INVALID_OBJECT_HANDLE,
unknown classes NV_ERR_INVALID_CLASS, control commands NV_ERR_NOT_SUPPORTED and a wrong parameter size
NV_ERR_INVALID_PARAM_STRUCT). Where the public source does not settle a detail the comment says
"assumption". Parameters are read from and written to the caller's memory through /proc/self/mem, as
copy_from_user/copy_to_user do: a bad pointer is an error, not a crash.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os

from nvdrv import classes as C
from nvdrv import rmapi as R
from nvdrv.ioctl import Mapping, NVFile, Provider

from gpusim.nv.gpu import H100_VRAM, Channel, HopperGPU, Memory, VASpace

NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm")
GPU_ID = 0x100                   # what GET_PROBED_IDS reports for the board (assumption: any non-invalid id)
CLIENT_HANDLE_BASE = 0xC1D00000  # RM-generated client handles (assumption: the value is RM's business)
OBJECT_HANDLE_BASE = 0xCAF00000  # RM-generated object handles when hObjectNew is 0 (assumption)
VA_BASE, VA_LIMIT = 0x1000000000, 0x1_0000_0000_0000   # 49-bit VA space; RM-picked ranges start high (assumption)


class _Mem:
    """Caller memory through /proc/self/mem (EFAULT on a bad address, as copy_from_user)."""
    fd = -1

    @classmethod
    def _fd(cls) -> int:
        if cls.fd < 0:
            cls.fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
        return cls.fd

    @classmethod
    def read(cls, addr: int, n: int) -> bytes | None:
        if n == 0:
            return b""
        try:
            data = os.pread(cls._fd(), n, addr)
        except (OSError, OverflowError):
            return None
        return data if len(data) == n else None

    @classmethod
    def write(cls, addr: int, data: bytes) -> bool:
        try:
            return os.pwrite(cls._fd(), data, addr) == len(data)
        except (OSError, OverflowError):
            return False


class RmObject:
    def __init__(self, handle: int, cls: int, parent: RmObject | None, client: RmClient | None):
        self.handle, self.cls, self.parent, self.client = handle, cls, parent, client
        self.children: list[RmObject] = []
        self.mem: Memory | None = None          # memory classes
        self.vas: VASpace | None = None         # FERMI_VASPACE_A; NV50_MEMORY_VIRTUAL's space
        self.range: tuple[int, int] | None = None   # NV50_MEMORY_VIRTUAL: [base, end)
        self.next_va = 0
        self.channel: Channel | None = None
        self.scheduled = False                  # KEPLER_CHANNEL_GROUP_A
        self.dma_maps: list = []                # NVOS46 mappings made through this virtual object


class RmClient(RmObject):
    def __init__(self, handle: int):
        super().__init__(handle, C.NV01_ROOT_CLIENT, None, None)
        self.client = self
        self.objects: dict[int, RmObject] = {handle: self}


# class -> (allowed parent classes, parameter structure or None, whether no parameters are accepted)
ALLOC_RULES = {
    C.NV01_DEVICE_0: ((C.NV01_ROOT_CLIENT,), R.NV0080_ALLOC_PARAMETERS, False),
    C.NV20_SUBDEVICE_0: ((C.NV01_DEVICE_0,), R.NV2080_ALLOC_PARAMETERS, True),
    C.HOPPER_USERMODE_A: ((C.NV20_SUBDEVICE_0,), R.NV_HOPPER_USERMODE_A_PARAMS, True),
    C.FERMI_VASPACE_A: ((C.NV01_DEVICE_0,), R.NV_VASPACE_ALLOCATION_PARAMETERS, False),
    C.NV01_MEMORY_LOCAL_USER: ((C.NV01_DEVICE_0,), R.NV_MEMORY_ALLOCATION_PARAMS, False),
    C.NV50_MEMORY_VIRTUAL: ((C.NV01_DEVICE_0,), R.NV_MEMORY_ALLOCATION_PARAMS, False),
    C.KEPLER_CHANNEL_GROUP_A: ((C.NV01_DEVICE_0,), R.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, False),
    C.HOPPER_CHANNEL_GPFIFO_A: ((C.KEPLER_CHANNEL_GROUP_A,), R.NV_CHANNEL_ALLOC_PARAMS, False),
    C.HOPPER_COMPUTE_A: ((C.HOPPER_CHANNEL_GPFIFO_A,), R.NV_GR_ALLOCATION_PARAMETERS, True),
    C.HOPPER_DMA_COPY_A: ((C.HOPPER_CHANNEL_GPFIFO_A,), R.NVB0B5_ALLOCATION_PARAMETERS, True),
}
# control command -> the classes it is a method of (the command's upper 16 bits name its class family)
CONTROL_CLASSES = {
    R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS: (C.NV01_ROOT_CLIENT,),
    R.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2: (C.NV01_ROOT_CLIENT,),
    R.NV2080_CTRL_CMD_GPU_GET_GID_INFO: (C.NV20_SUBDEVICE_0,),
    R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: (C.KEPLER_CHANNEL_GROUP_A,),
    R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: (C.HOPPER_CHANNEL_GPFIFO_A,),
}


class RMError(Exception):
    def __init__(self, status: int):
        self.status = status


def _fail(name: str):
    raise RMError(R.STATUS[name])


class RM:
    """The resource manager: clients and their object trees, and the GPU they drive."""

    def __init__(self, version: str = R.RM_VERSION):
        self.version = version
        self.gpu = HopperGPU()
        self.clients: dict[int, RmClient] = {}
        self.files: dict[int, SimFile] = {}
        self._next_client = CLIENT_HANDLE_BASE
        self._next_object = OBJECT_HANDLE_BASE
        self._next_fd = 1000
        self._next_cid = 1
        self.vram_bytes = H100_VRAM

    # ------------------------------------------------------------------------------------- lookups
    def client(self, h: int) -> RmClient:
        c = self.clients.get(h)
        if c is None:
            _fail("NV_ERR_INVALID_CLIENT")
        return c

    def obj(self, client: RmClient, h: int, *classes: int) -> RmObject:
        o = client.objects.get(h)
        if o is None:
            _fail("NV_ERR_INVALID_OBJECT_HANDLE")
        if classes and o.cls not in classes:
            _fail("NV_ERR_INVALID_OBJECT_HANDLE")
        return o

    @staticmethod
    def device_of(o: RmObject) -> RmObject:
        while o is not None and o.cls != C.NV01_DEVICE_0:
            o = o.parent
        return o

    # ----------------------------------------------------------------------------------- NV_ESC_RM_ALLOC
    def alloc(self, p) -> None:
        """NVOS21/NVOS64: p.status is set; p.hObjectNew returned."""
        try:
            self._alloc(p)
            p.status = 0
        except RMError as e:
            p.status = e.status

    def _params(self, p, struct_type, optional: bool):
        if p.paramsSize == 0 and optional:
            return None
        if struct_type is None or p.paramsSize != ctypes.sizeof(struct_type):
            _fail("NV_ERR_INVALID_ARGUMENT")     # assumption: RM's class constructors reject the size this way
        raw = _Mem.read(p.pAllocParms, p.paramsSize)
        if raw is None:
            _fail("NV_ERR_INVALID_POINTER")      # assumption: a parameter pointer RM cannot copy in
        return struct_type.from_buffer_copy(raw)

    def _new_handle(self, client: RmClient, h: int) -> int:
        if h == 0:
            while self._next_object in client.objects:
                self._next_object += 1
            h = self._next_object
            self._next_object += 1
        elif h in client.objects:
            _fail("NV_ERR_INSERT_DUPLICATE_NAME")
        return h

    def _alloc(self, p) -> None:
        if p.hClass in (C.NV01_ROOT, C.NV01_ROOT_NON_PRIV, C.NV01_ROOT_CLIENT):   # escape.c: forced to _CLIENT
            h = p.hObjectNew
            if h == 0:
                h = self._next_client
                self._next_client += 1
            if h in self.clients:
                _fail("NV_ERR_INSERT_DUPLICATE_NAME")
            self.clients[h] = RmClient(h)
            p.hObjectNew = h
            return
        client = self.client(p.hRoot)
        rule = ALLOC_RULES.get(p.hClass)
        if rule is None:
            _fail("NV_ERR_INVALID_CLASS")
        parents, struct_type, optional = rule
        parent = self.obj(client, p.hObjectParent)
        if parent.cls not in parents:
            _fail("NV_ERR_INVALID_OBJECT_PARENT")     # assumption: resserv's parent-class check names it so
        params = self._params(p, struct_type, optional)
        h = self._new_handle(client, p.hObjectNew)
        o = RmObject(h, p.hClass, parent, client)
        getattr(self, f"_alloc_{C.class_name(p.hClass).lower()}")(client, o, params)
        parent.children.append(o)
        client.objects[h] = o
        p.hObjectNew = h
        if params is not None:
            _Mem.write(p.pAllocParms, bytes(params))     # parameters are in/out

    def _alloc_nv01_device_0(self, client, o, prm) -> None:
        if prm.deviceId != 0:
            _fail("NV_ERR_INVALID_ARGUMENT")     # one GPU: device instance 0 (GET_ID_INFO_V2 says so)

    def _alloc_nv20_subdevice_0(self, client, o, prm) -> None:
        if prm is not None and prm.subDeviceId != 0:
            _fail("NV_ERR_INVALID_ARGUMENT")

    def _alloc_hopper_usermode_a(self, client, o, prm) -> None:
        pass

    def _alloc_fermi_vaspace_a(self, client, o, prm) -> None:
        o.vas = VASpace()

    def _alloc_nv01_memory_local_user(self, client, o, prm) -> None:
        size = prm.size
        if size == 0:
            _fail("NV_ERR_INVALID_ARGUMENT")
        size = (size + 0xFFF) & ~0xFFF       # whole 4 KiB pages (assumption: RM rounds up)
        if self.gpu.vram_used + size > self.vram_bytes:
            _fail("NV_ERR_NO_MEMORY")
        backing = mmap.mmap(-1, size)
        o.mem = Memory(size, memoryview(backing), "vram", backing)
        prm.size, prm.offset, prm.limit = size, self.gpu.vram_used, self.gpu.vram_used + size - 1
        self.gpu.vram_used += size

    def _alloc_nv50_memory_virtual(self, client, o, prm) -> None:
        if not prm.flags & R.NVOS32_ALLOC_FLAGS_VIRTUAL:
            _fail("NV_ERR_INVALID_FLAGS")        # assumption: the virtual class wants the VIRTUAL flag
        vas = self.obj(client, prm.hVASpace, C.FERMI_VASPACE_A)
        if self.device_of(vas) is not self.device_of(o.parent):
            _fail("NV_ERR_INVALID_OBJECT_HANDLE")
        size = (prm.size + 0xFFFF) & ~0xFFFF
        if size == 0:
            _fail("NV_ERR_INVALID_ARGUMENT")
        if prm.flags & R.NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE:
            base = prm.offset
        else:
            taken = [x.range for x in client.objects.values() if x.range and x.vas is vas.vas]
            base = max([VA_BASE] + [e for _, e in taken])
        if base % 0x10000 or base + size > VA_LIMIT or any(b < base + size and base < e for b, e in
                                                           (x.range for x in client.objects.values()
                                                            if x.range and x.vas is vas.vas)):
            _fail("NV_ERR_INVALID_ARGUMENT")
        o.vas, o.range, o.next_va = vas.vas, (base, base + size), base
        prm.offset, prm.size, prm.limit = base, size, base + size - 1

    def _alloc_kepler_channel_group_a(self, client, o, prm) -> None:
        vas = self.obj(client, prm.hVASpace, C.FERMI_VASPACE_A)
        o.vas = vas.vas
        if prm.engineType not in (R.NV2080_ENGINE_TYPE_GRAPHICS, R.NV2080_ENGINE_TYPE_COPY0):
            _fail("NV_ERR_INVALID_ARGUMENT")     # the engines this model has

    def _alloc_hopper_channel_gpfifo_a(self, client, o, prm) -> None:
        tsg = o.parent
        n = prm.gpFifoEntries
        if n < 2 or n & (n - 1):
            _fail("NV_ERR_INVALID_ARGUMENT")     # assumption: RM wants a power-of-two ring (the host wraps GP_GET)
        if prm.hVASpace and prm.hVASpace != 0:
            vas = self.obj(client, prm.hVASpace, C.FERMI_VASPACE_A)
            if vas.vas is not tsg.vas:
                _fail("NV_ERR_INVALID_ARGUMENT")   # a TSG's channels share its VA space
        userd = self.obj(client, prm.hUserdMemory[0], C.NV01_MEMORY_LOCAL_USER, C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)
        uoff = prm.userdOffset[0]
        if uoff % 512 or uoff + C.USERD_BYTES > userd.mem.size:
            _fail("NV_ERR_INVALID_OFFSET")       # USERD is 512 bytes, 512-byte aligned (assumption: alignment)
        try:
            tsg.vas.find(prm.gpFifoOffset, n * C.GP_ENTRY_BYTES)
        except Exception:
            _fail("NV_ERR_INVALID_ADDRESS")      # the ring must be mapped in the channel's VA space (assumption)
        notifier = None
        if prm.hObjectError:
            err = self.obj(client, prm.hObjectError, C.NV01_MEMORY_LOCAL_USER, C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)
            notifier = (err.mem, 0)
        cid = self._next_cid
        self._next_cid += 1
        ch = Channel(cid, tsg.vas, prm.gpFifoOffset, n, userd.mem, uoff, notifier, tsg)
        ch.set_userd_word(C.USERD_GP_GET, 0)
        o.channel = ch
        self.gpu.channels[cid] = ch
        prm.cid = cid

    def _alloc_hopper_compute_a(self, client, o, prm) -> None:
        o.parent.channel.engines.add(C.HOPPER_COMPUTE_A)

    def _alloc_hopper_dma_copy_a(self, client, o, prm) -> None:
        if prm is not None and prm.version == R.NVB0B5_ALLOCATION_PARAMETERS_VERSION_1 and \
                prm.engineType != R.NV2080_ENGINE_TYPE_COPY0:
            _fail("NV_ERR_INVALID_ARGUMENT")     # this board's model has one copy engine
        o.parent.channel.engines.add(C.HOPPER_DMA_COPY_A)

    # -------------------------------------------------------------------------------- NV_ESC_RM_ALLOC_MEMORY
    def alloc_memory(self, p) -> None:
        """NVOS02: NV01_MEMORY_SYSTEM_OS_DESCRIPTOR describes (and pins) the caller's pages."""
        try:
            client = self.client(p.hRoot)
            parent = self.obj(client, p.hObjectParent)
            if p.hClass != C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
                _fail("NV_ERR_INVALID_CLASS")    # the model's RM takes OS descriptors only on this escape
            if parent.cls != C.NV01_DEVICE_0:
                _fail("NV_ERR_INVALID_OBJECT_PARENT")
            size = p.limit + 1
            if p.pMemory % mmap.PAGESIZE or size % mmap.PAGESIZE or size == 0:
                _fail("NV_ERR_INVALID_ARGUMENT")    # whole pages are pinned (assumption: RM rejects partial ones)
            for off in range(0, size, mmap.PAGESIZE):   # os_lock_user_pages: every page must be there
                if _Mem.read(p.pMemory + off, 1) is None:
                    _fail("NV_ERR_INVALID_ADDRESS")
            h = self._new_handle(client, p.hObjectNew)
            o = RmObject(h, p.hClass, parent, client)
            o.mem = Memory(size, memoryview((ctypes.c_char * size).from_address(p.pMemory)).cast("B"), "sysmem")
            parent.children.append(o)
            client.objects[h] = o
            p.hObjectNew, p.status = h, 0
        except RMError as e:
            p.status = e.status

    # ------------------------------------------------------------------------------------ NV_ESC_RM_FREE
    def free(self, p) -> None:
        try:
            client = self.client(p.hRoot)
            if p.hObjectOld == p.hRoot:
                for o in list(client.objects.values()):
                    self._release(o)
                del self.clients[p.hRoot]
            else:
                o = self.obj(client, p.hObjectOld)
                self._free_tree(client, o)
            p.status = 0
        except RMError as e:
            p.status = e.status

    def _free_tree(self, client: RmClient, o: RmObject) -> None:
        for c in list(o.children):
            self._free_tree(client, c)
        if o.parent is not None and o in o.parent.children:
            o.parent.children.remove(o)
        client.objects.pop(o.handle, None)
        self._release(o)

    def _release(self, o: RmObject) -> None:
        if o.mem is not None:
            o.mem.freed = True          # RM unmaps it from every VA space: GPU accesses fault from now on
            for c in self.clients.values():
                for v in c.objects.values():
                    if v.range:
                        for m in [m for m in v.dma_maps if m[2] is o.mem]:
                            v.vas.unmap(m[0])
                            v.dma_maps.remove(m)
        if o.range:
            for m in o.dma_maps:
                o.vas.unmap(m[0])
            o.dma_maps.clear()
        if o.channel is not None:
            o.channel.freed = True
            self.gpu.channels.pop(o.channel.cid, None)

    # -------------------------------------------------------------------------- NV_ESC_RM_MAP_MEMORY_DMA
    def map_dma(self, p) -> None:
        try:
            client = self.client(p.hClient)
            dev = self.obj(client, p.hDevice, C.NV01_DEVICE_0)
            virt = self.obj(client, p.hDma, C.NV50_MEMORY_VIRTUAL)
            mem = self.obj(client, p.hMemory, C.NV01_MEMORY_LOCAL_USER, C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)
            if self.device_of(virt) is not dev or self.device_of(mem) is not dev:
                _fail("NV_ERR_INVALID_DEVICE")
            length = p.length or mem.mem.size - p.offset
            if p.offset % mmap.PAGESIZE or p.offset + length > mem.mem.size or length <= 0:
                _fail("NV_ERR_INVALID_LIMIT")
            length = (length + 0xFFF) & ~0xFFF
            base, end = virt.range
            if p.flags & R.NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE:
                va = p.dmaOffset     # the absolute GPU VA, inside the virtual range (assumption: absolute)
            else:
                va = (virt.next_va + 0xFFFF) & ~0xFFFF
            if va % mmap.PAGESIZE or va < base or va + length > end:
                _fail("NV_ERR_INVALID_OFFSET")
            try:
                virt.vas.map(va, length, mem.mem, p.offset)
            except ValueError:
                _fail("NV_ERR_INVALID_OFFSET")   # assumption: an overlapping fixed mapping is refused so
            virt.dma_maps.append((va, length, mem.mem))
            virt.next_va = max(virt.next_va, va + length)
            p.dmaOffset, p.status = va, 0
        except RMError as e:
            p.status = e.status

    def unmap_dma(self, p) -> None:
        try:
            client = self.client(p.hClient)
            virt = self.obj(client, p.hDma, C.NV50_MEMORY_VIRTUAL)
            m = next((m for m in virt.dma_maps if m[0] == p.dmaOffset), None)
            if m is None:
                _fail("NV_ERR_INVALID_OFFSET")
            virt.vas.unmap(m[0])
            virt.dma_maps.remove(m)
            p.status = 0
        except RMError as e:
            p.status = e.status

    # ------------------------------------------------------------------------------ NV_ESC_RM_MAP_MEMORY
    def map_cpu(self, p, file: SimFile) -> None:
        try:
            client = self.client(p.hClient)
            self.obj(client, p.hDevice, C.NV01_DEVICE_0, C.NV20_SUBDEVICE_0)
            o = self.obj(client, p.hMemory, C.NV01_MEMORY_LOCAL_USER, C.HOPPER_USERMODE_A)
            size = C.USERMODE_MAP_BYTES if o.cls == C.HOPPER_USERMODE_A else o.mem.size
            if p.length == 0 or p.offset + p.length > size:
                _fail("NV_ERR_INVALID_LIMIT")
            if file is None or file.kind != "dev" or file.closed:
                _fail("NV_ERR_INVALID_ARGUMENT")    # rm_create_mmap_context needs an open /dev/nvidiaN fd
            file.context = (o, p.offset, p.length)
            p.pLinearAddress = 0x7F0000000000 + (id(file) & 0xFFFFFFF000)   # a cookie only mmap() uses
            p.status = 0
        except RMError as e:
            p.status = e.status

    # ---------------------------------------------------------------------------------- NV_ESC_RM_CONTROL
    def control(self, p) -> None:
        try:
            client = self.client(p.hClient)
            o = self.obj(client, p.hObject)
            kinds = CONTROL_CLASSES.get(p.cmd)
            if kinds is None or o.cls not in kinds:
                _fail("NV_ERR_NOT_SUPPORTED")       # rs_resource.c: no such exported method on the object
            st = R.CONTROL_PARAMS[p.cmd]
            if p.paramsSize != ctypes.sizeof(st):
                _fail("NV_ERR_INVALID_PARAM_STRUCT")   # rs_resource.c: "bad paramsize"
            raw = _Mem.read(p.params, p.paramsSize)
            if raw is None:
                _fail("NV_ERR_INVALID_POINTER")
            prm = st.from_buffer_copy(raw)
            self._control(p.cmd, o, prm)
            _Mem.write(p.params, bytes(prm))
            p.status = 0
        except RMError as e:
            p.status = e.status

    def _control(self, cmd: int, o: RmObject, prm) -> None:
        if cmd == R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS:
            for i in range(R.NV_MAX_DEVICES):
                prm.gpuIds[i] = prm.excludedGpuIds[i] = R.NV0000_CTRL_GPU_INVALID_ID
            prm.gpuIds[0] = GPU_ID
        elif cmd == R.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2:
            if prm.gpuId != GPU_ID:
                _fail("NV_ERR_INVALID_ARGUMENT")
            prm.deviceInstance = prm.subDeviceInstance = 0
        elif cmd == R.NV2080_CTRL_CMD_GPU_GET_GID_INFO:
            if prm.flags != R.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY:
                _fail("NV_ERR_NOT_SUPPORTED")      # the model answers the binary form only (assumption)
            prm.length = 16
            ctypes.memmove(prm.data, self.gpu.uuid, 16)
        elif cmd == R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
            o.scheduled = bool(prm.bEnable)
            if o.scheduled:
                self.gpu.run()
        elif cmd == R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN:
            prm.workSubmitToken = o.channel.cid


class SimFile(NVFile):
    """One open node of the model: "ctl" (/dev/nvidiactl), "dev" (/dev/nvidia0) or "uvm"."""

    def __init__(self, rm: RM, path: str):
        self.rm, self.path = rm, path
        self.kind = {"/dev/nvidiactl": "ctl", "/dev/nvidia-uvm": "uvm"}.get(path, "dev")
        self.fd = rm._next_fd
        rm._next_fd += 1
        rm.files[self.fd] = self
        self.ctl: SimFile | None = None        # REGISTER_FD
        self.context = None                    # NV_ESC_RM_MAP_MEMORY's mmap context
        self.uvm_initialized = False
        self.closed = False

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        self.closed = True
        self.rm.files.pop(self.fd, None)

    def _check_open(self) -> None:
        if self.closed:
            raise OSError(errno.EBADF, f"{self.path}: file closed")

    # ------------------------------------------------------------------------------------------ ioctl
    def ioctl(self, request: int, arg) -> None:
        self._check_open()
        if self.kind == "uvm":
            return self._uvm(request, arg)
        if R.ioc_type(request) != R.NV_IOCTL_MAGIC:
            raise OSError(errno.ENOTTY, f"{self.path}: ioctl {request:#x} is not an NVIDIA one (type 'F')")
        nr, size = R.ioc_nr(request), R.ioc_size(request)
        if size > ctypes.sizeof(arg):
            raise OSError(errno.EFAULT, f"{self.path}: ioctl says {size} bytes, the buffer has {ctypes.sizeof(arg)}")
        raw = bytearray(ctypes.string_at(ctypes.addressof(arg), size))     # copy_from_user
        ok = self._escape(nr, size, raw)
        ctypes.memmove(ctypes.addressof(arg), bytes(raw), size)            # copy_to_user
        if not ok:
            raise OSError(errno.EINVAL, f"{self.path}: escape {R.ESCAPE_NAMES.get(nr, hex(nr))} refused (EINVAL)")

    def _escape(self, nr: int, size: int, raw: bytearray) -> bool:
        """False where nvidia_ioctl returns -EINVAL (an RM status other than NV_OK from the escape layer)."""
        ctl = self.kind == "ctl"
        if nr == R.NV_ESC_CHECK_VERSION_STR:
            return ctl and size == ctypes.sizeof(R.nv_ioctl_rm_api_version_t) and self._version(raw)
        if nr == R.NV_ESC_REGISTER_FD:
            if size != ctypes.sizeof(R.nv_ioctl_register_fd_t):
                return False
            other = self.rm.files.get(R.nv_ioctl_register_fd_t.from_buffer(raw).ctl_fd)
            if other is None or other.kind != "ctl" or other is self or self.ctl is not None:
                return False                      # escape.c: a ctl fd, not itself, once
            self.ctl = other
            return True
        table = {
            R.NV_ESC_RM_ALLOC: ((R.NVOS21_PARAMETERS, R.NVOS64_PARAMETERS), True, self.rm.alloc),
            R.NV_ESC_RM_FREE: ((R.NVOS00_PARAMETERS,), True, self.rm.free),
            R.NV_ESC_RM_CONTROL: ((R.NVOS54_PARAMETERS,), True, self.rm.control),
            R.NV_ESC_RM_MAP_MEMORY_DMA: ((R.NVOS46_PARAMETERS,), True, self.rm.map_dma),
            R.NV_ESC_RM_UNMAP_MEMORY_DMA: ((R.NVOS47_PARAMETERS,), True, self.rm.unmap_dma),
            R.NV_ESC_RM_ALLOC_MEMORY: ((R.nv_ioctl_nvos02_parameters_with_fd,), False, None),
            R.NV_ESC_RM_MAP_MEMORY: ((R.nv_ioctl_nvos33_parameters_with_fd,), True, None),
        }
        if nr not in table:
            return False
        types, ctl_only, handler = table[nr]
        st = next((t for t in types if ctypes.sizeof(t) == size), None)
        if st is None or ctl_only != ctl:
            return False                          # escape.c: dataSize != sizeof(*pApi); NV_CTL/ACTUAL_DEVICE_ONLY
        p = st.from_buffer(raw)
        if nr == R.NV_ESC_RM_ALLOC_MEMORY:
            self.rm.alloc_memory(p.params)
        elif nr == R.NV_ESC_RM_MAP_MEMORY:
            self.rm.map_cpu(p.params, self.rm.files.get(p.fd))
        else:
            handler(p)
        return True

    def _version(self, raw: bytearray) -> bool:
        """osapi.c RmPerformVersionCheck: QUERY answers the version; STRICT compares the whole string,
        RELAXED up to the first '.'; a mismatch returns RM's version in versionString and fails."""
        p = R.nv_ioctl_rm_api_version_t.from_buffer(raw)
        p.reply = R.NV_RM_API_VERSION_REPLY_RECOGNIZED
        mine = self.rm.version.encode()
        if p.cmd == R.NV_RM_API_VERSION_CMD_QUERY:
            p.versionString = mine
            return True
        theirs = bytes(raw[8:8 + R.NV_RM_API_VERSION_STRING_LENGTH])
        for i in range(R.NV_RM_API_VERSION_STRING_LENGTH):
            a, b = theirs[i], mine[i] if i < len(mine) else 0
            if a != b:
                break
            if p.cmd == R.NV_RM_API_VERSION_CMD_RELAXED and a == ord("."):
                return True
            if a == 0:
                return True
        p.versionString = mine
        return False

    def _uvm(self, request: int, arg) -> None:
        """nvidia-uvm: UVM_INITIALIZE first (other calls fail with NV_ERR_ILLEGAL_ACTION before it,
        uvm_linux_ioctl.h), then UVM_REGISTER_GPU with the GPU's UUID and an RM client on a ctl fd."""
        if request == R.UVM_INITIALIZE:
            if ctypes.sizeof(arg) != ctypes.sizeof(R.UVM_INITIALIZE_PARAMS):
                raise OSError(errno.EINVAL, "UVM_INITIALIZE: wrong parameter size")
            arg.rmStatus = 0
            self.uvm_initialized = True
            return
        if request == R.UVM_REGISTER_GPU:
            if ctypes.sizeof(arg) != ctypes.sizeof(R.UVM_REGISTER_GPU_PARAMS):
                raise OSError(errno.EINVAL, "UVM_REGISTER_GPU: wrong parameter size")
            if not self.uvm_initialized:
                arg.rmStatus = R.STATUS["NV_ERR_ILLEGAL_ACTION"]
            elif bytes(arg.gpu_uuid.uuid) != self.rm.gpu.uuid:
                arg.rmStatus = R.STATUS["NV_ERR_INVALID_DEVICE"]      # assumption: UVM's code for an unknown UUID
            elif getattr(self.rm.files.get(arg.rmCtrlFd), "kind", None) != "ctl" or arg.hClient not in self.rm.clients:
                arg.rmStatus = R.STATUS["NV_ERR_INVALID_ARGUMENT"]
            else:
                arg.rmStatus = 0
            return
        raise OSError(errno.ENOTTY, f"{self.path}: UVM ioctl {request:#x} is not modelled")

    # ------------------------------------------------------------------------------------------- mmap
    def mmap(self, length: int, offset: int = 0) -> Mapping:
        self._check_open()
        if self.context is None:
            raise OSError(errno.EINVAL, f"{self.path}: mmap without an NV_ESC_RM_MAP_MEMORY context on this fd")
        o, off, n = self.context
        if length != n or offset != 0:
            raise OSError(errno.EINVAL, f"{self.path}: mmap of {length:#x} bytes at {offset:#x}; the context is "
                                        f"{n:#x} bytes")
        self.context = None
        if o.cls == C.HOPPER_USERMODE_A:
            return UsermodeMapping(self.rm.gpu, n)
        if o.mem.freed:
            raise OSError(errno.EINVAL, f"{self.path}: mmap of freed memory")
        return SimMapping(self.rm.gpu, o.mem.view[off:off + n])


class SimMapping(Mapping):
    """A CPU mapping of simulated VRAM. Reads go through the GPU first so a poll of USERD's GPGet (or
    of anything the engines write) sees their progress, as on hardware that runs on its own."""

    def __init__(self, gpu: HopperGPU, view: memoryview):
        super().__init__(view)
        self.gpu = gpu

    def read32(self, offset: int) -> int:
        self.gpu.run()
        return super().read32(offset)


class UsermodeMapping(Mapping):
    """HOPPER_USERMODE_A's page: a write of a work submit token at NOTIFY_CHANNEL_PENDING rings the
    doorbell; the rest of the page reads 0 (assumption: nothing else there is modelled)."""

    def __init__(self, gpu: HopperGPU, size: int):
        super().__init__(memoryview(bytearray(size)))
        self.gpu = gpu

    def write32(self, offset: int, value: int) -> None:
        if offset == C.USERMODE_NOTIFY_CHANNEL_PENDING:
            self.gpu.doorbell(value)
        else:
            super().write32(offset, value)


class SimProvider(Provider):
    """The `nv:sim` model: one RM and one simulated H100 per provider."""
    name = "sim"
    executes_kernels = False     # no SASS executor: launches are decoded, checked and recorded only

    def __init__(self, version: str = R.RM_VERSION):
        self.rm = RM(version)

    def open(self, path: str) -> NVFile:
        if path not in NODES:
            raise FileNotFoundError(errno.ENOENT, f"no such device node in the NVIDIA model: {path}", path)
        return SimFile(self.rm, path)

    def exists(self, path: str) -> bool:
        return path in NODES

    def module_version(self) -> str:
        return self.rm.version

