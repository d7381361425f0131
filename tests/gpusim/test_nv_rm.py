"""The model of the NVIDIA kernel module (gpusim.nv.rm) answers each escape as the open module's RM does,
driven here with raw ioctls: sizes, nodes, handles, classes, parameters, status codes, the version
handshake, REGISTER_FD and UVM."""
import ctypes
import errno

import pytest

from gpusim.nv.rm import SimProvider
from nvdrv import classes as C
from nvdrv import rmapi as R

S = R.STATUS


@pytest.fixture
def rm():
    prov = SimProvider()
    ctl = prov.open("/dev/nvidiactl")
    return prov, ctl


def esc(f, nr, p):
    f.ioctl(R.nv_iowr(nr, ctypes.sizeof(p)), p)
    return p


def alloc(ctl, root, parent, cls, params=None, new=0):
    p = R.NVOS21_PARAMETERS(hRoot=root, hObjectParent=parent, hObjectNew=new, hClass=cls)
    if params is not None:
        p.pAllocParms, p.paramsSize = ctypes.addressof(params), ctypes.sizeof(params)
    return esc(ctl, R.NV_ESC_RM_ALLOC, p)


def client_and_device(ctl):
    client = alloc(ctl, 0, 0, C.NV01_ROOT_CLIENT).hObjectNew
    dev = alloc(ctl, client, client, C.NV01_DEVICE_0, R.NV0080_ALLOC_PARAMETERS(hClientShare=client))
    assert dev.status == 0
    return client, dev.hObjectNew


def test_version_handshake(rm):
    """osapi.c RmPerformVersionCheck: strict match passes, a mismatch fails the ioctl (EINVAL) and returns
    RM's own version, relaxed compares up to the first '.', query answers the version."""
    _, ctl = rm
    ok = esc(ctl, R.NV_ESC_CHECK_VERSION_STR, R.nv_ioctl_rm_api_version_t(versionString=b"580.105.08"))
    assert ok.reply == R.NV_RM_API_VERSION_REPLY_RECOGNIZED
    bad = R.nv_ioctl_rm_api_version_t(versionString=b"570.86.15")
    with pytest.raises(OSError) as e:
        esc(ctl, R.NV_ESC_CHECK_VERSION_STR, bad)
    assert e.value.errno == errno.EINVAL and bad.versionString == b"580.105.08"
    esc(ctl, R.NV_ESC_CHECK_VERSION_STR, R.nv_ioctl_rm_api_version_t(cmd=R.NV_RM_API_VERSION_CMD_RELAXED,
                                                                       versionString=b"580.1"))
    q = esc(ctl, R.NV_ESC_CHECK_VERSION_STR, R.nv_ioctl_rm_api_version_t(cmd=R.NV_RM_API_VERSION_CMD_QUERY))
    assert q.versionString == b"580.105.08"


def test_wrong_structure_size_is_einval(rm):
    """escape.c: dataSize != sizeof(*pApi) -> NV_ERR_INVALID_ARGUMENT -> EINVAL from nvidia_ioctl."""
    _, ctl = rm
    small = (ctypes.c_uint8 * 28)()
    with pytest.raises(OSError) as e:
        ctl.ioctl(R.nv_iowr(R.NV_ESC_RM_ALLOC, 28), small)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        ctl.ioctl(0xC0104100, R.NVOS00_PARAMETERS())        # type 'A', not 'F'
    assert e.value.errno == errno.ENOTTY


def test_rm_alloc_on_the_device_node_is_refused(rm):
    """NV_CTL_DEVICE_ONLY: RM_ALLOC/FREE/CONTROL/MAP_MEMORY only on /dev/nvidiactl."""
    prov, _ = rm
    dev0 = prov.open("/dev/nvidia0")
    with pytest.raises(OSError) as e:
        alloc(dev0, 0, 0, C.NV01_ROOT_CLIENT)
    assert e.value.errno == errno.EINVAL


def test_handles_classes_and_parents(rm):
    _, ctl = rm
    client, dev = client_and_device(ctl)
    sub = alloc(ctl, client, dev, C.NV20_SUBDEVICE_0, R.NV2080_ALLOC_PARAMETERS())
    assert sub.status == 0
    assert alloc(ctl, 0xBAD, dev, C.NV20_SUBDEVICE_0).status == S["NV_ERR_INVALID_CLIENT"]
    assert alloc(ctl, client, 0xBAD, C.NV20_SUBDEVICE_0).status == S["NV_ERR_INVALID_OBJECT_HANDLE"]
    assert alloc(ctl, client, dev, 0xC9B0).status == S["NV_ERR_INVALID_CLASS"]                 # Blackwell's, not here
    assert alloc(ctl, client, client, C.NV20_SUBDEVICE_0).status == S["NV_ERR_INVALID_OBJECT_PARENT"]
    assert alloc(ctl, client, dev, C.NV20_SUBDEVICE_0, R.NV2080_ALLOC_PARAMETERS(),
                 new=sub.hObjectNew).status == S["NV_ERR_INSERT_DUPLICATE_NAME"]
    wrong = (ctypes.c_uint8 * 12)()
    p = R.NVOS21_PARAMETERS(hRoot=client, hObjectParent=dev, hClass=C.FERMI_VASPACE_A,
                            pAllocParms=ctypes.addressof(wrong), paramsSize=12)
    assert esc(ctl, R.NV_ESC_RM_ALLOC, p).status == S["NV_ERR_INVALID_ARGUMENT"]


def test_a_bad_parameter_pointer_is_an_error_not_a_crash(rm):
    """copy_from_user of an unmapped address: the model reads caller memory through /proc/self/mem."""
    _, ctl = rm
    client, dev = client_and_device(ctl)
    p = R.NVOS21_PARAMETERS(hRoot=client, hObjectParent=dev, hClass=C.FERMI_VASPACE_A, pAllocParms=0x10,
                            paramsSize=ctypes.sizeof(R.NV_VASPACE_ALLOCATION_PARAMETERS))
    assert esc(ctl, R.NV_ESC_RM_ALLOC, p).status == S["NV_ERR_INVALID_POINTER"]


def test_controls(rm):
    _, ctl = rm
    client, dev = client_and_device(ctl)
    sub = alloc(ctl, client, dev, C.NV20_SUBDEVICE_0, R.NV2080_ALLOC_PARAMETERS()).hObjectNew

    def control(obj, cmd, prm, size=None):
        p = R.NVOS54_PARAMETERS(hClient=client, hObject=obj, cmd=cmd, params=ctypes.addressof(prm),
                                paramsSize=size or ctypes.sizeof(prm))
        return esc(ctl, R.NV_ESC_RM_CONTROL, p).status

    gid = R.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(flags=R.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
    assert control(sub, R.NV2080_CTRL_CMD_GPU_GET_GID_INFO, gid) == 0 and gid.length == 16
    assert control(sub, R.NV2080_CTRL_CMD_GPU_GET_GID_INFO, gid, 12) == S["NV_ERR_INVALID_PARAM_STRUCT"]
    assert control(dev, R.NV2080_CTRL_CMD_GPU_GET_GID_INFO, gid) == S["NV_ERR_NOT_SUPPORTED"]   # a subdevice's
    assert control(sub, 0x20800199, gid) == S["NV_ERR_NOT_SUPPORTED"]
    ids = R.NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS()
    assert control(client, R.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, ids) == 0
    assert [g for g in ids.gpuIds if g != R.NV0000_CTRL_GPU_INVALID_ID] == [0x100]


def test_free_removes_the_subtree(rm):
    _, ctl = rm
    client, dev = client_and_device(ctl)
    sub = alloc(ctl, client, dev, C.NV20_SUBDEVICE_0, R.NV2080_ALLOC_PARAMETERS()).hObjectNew
    assert esc(ctl, R.NV_ESC_RM_FREE, R.NVOS00_PARAMETERS(hRoot=client, hObjectParent=client, hObjectOld=dev)).status == 0
    assert alloc(ctl, client, sub, C.HOPPER_USERMODE_A).status == S["NV_ERR_INVALID_OBJECT_HANDLE"]
    again = esc(ctl, R.NV_ESC_RM_FREE, R.NVOS00_PARAMETERS(hRoot=client, hObjectParent=client, hObjectOld=dev))
    assert again.status == S["NV_ERR_INVALID_OBJECT_HANDLE"]
    esc(ctl, R.NV_ESC_RM_FREE, R.NVOS00_PARAMETERS(hRoot=client, hObjectOld=client))
    assert alloc(ctl, client, client, C.NV01_DEVICE_0, R.NV0080_ALLOC_PARAMETERS()).status == S["NV_ERR_INVALID_CLIENT"]


def test_register_fd_rules(rm):
    """escape.c NV_ESC_REGISTER_FD: a ctl fd, not the file itself, once per file."""
    prov, ctl = rm
    dev0 = prov.open("/dev/nvidia0")
    esc(dev0, R.NV_ESC_REGISTER_FD, R.nv_ioctl_register_fd_t(ctl_fd=ctl.fileno()))
    for f, fd in ((dev0, ctl.fileno()), (prov.open("/dev/nvidia0"), dev0.fileno()), (ctl, ctl.fileno())):
        with pytest.raises(OSError) as e:
            esc(f, R.NV_ESC_REGISTER_FD, R.nv_ioctl_register_fd_t(ctl_fd=fd))
        assert e.value.errno == errno.EINVAL


def test_host_memory_must_be_whole_mapped_pages(rm):
    """NV01_MEMORY_SYSTEM_OS_DESCRIPTOR pins the caller's pages (os_lock_user_pages): unmapped ones fail."""
    from nvdrv.ioctl import host_memory
    prov, ctl = rm
    client, dev = client_and_device(ctl)
    dev0 = prov.open("/dev/nvidia0")

    def describe(addr, size):
        p = R.nv_ioctl_nvos02_parameters_with_fd(params=R.NVOS02_PARAMETERS(
            hRoot=client, hObjectParent=dev, hClass=C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, pMemory=addr, limit=size - 1))
        return esc(dev0, R.NV_ESC_RM_ALLOC_MEMORY, p).params.status

    m, addr = host_memory(8192)
    assert describe(addr, 8192) == 0
    assert describe(addr + 100, 4096) == S["NV_ERR_INVALID_ARGUMENT"]
    assert describe(0x1000, 4096) == S["NV_ERR_INVALID_ADDRESS"]
    with pytest.raises(OSError):     # an RM escape that needs the device node, sent to the ctl node
        p = R.nv_ioctl_nvos02_parameters_with_fd(params=R.NVOS02_PARAMETERS(hRoot=client, hObjectParent=dev,
                                                 hClass=C.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, pMemory=addr, limit=4095))
        esc(ctl, R.NV_ESC_RM_ALLOC_MEMORY, p)


def test_uvm_needs_initialize_first(rm):
    prov, ctl = rm
    client, _ = client_and_device(ctl)
    uvm = prov.open("/dev/nvidia-uvm")
    reg = R.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=ctl.fileno(), hClient=client)
    ctypes.memmove(reg.gpu_uuid.uuid, prov.rm.gpu.uuid, 16)
    uvm.ioctl(R.UVM_REGISTER_GPU, reg)
    assert reg.rmStatus == S["NV_ERR_ILLEGAL_ACTION"]
    uvm.ioctl(R.UVM_INITIALIZE, R.UVM_INITIALIZE_PARAMS())
    uvm.ioctl(R.UVM_REGISTER_GPU, reg)
    assert reg.rmStatus == 0
    reg.gpu_uuid.uuid[0] ^= 1
    uvm.ioctl(R.UVM_REGISTER_GPU, reg)
    assert reg.rmStatus == S["NV_ERR_INVALID_DEVICE"]


def test_unknown_node(rm):
    prov, _ = rm
    with pytest.raises(FileNotFoundError):
        prov.open("/dev/nvidia7")
