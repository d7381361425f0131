"""The RM ioctl structures and numbers (nvdrv.rmapi) against the 580.105.08 headers."""
import ctypes

import pytest

from nvdrv import classes as C
from nvdrv import rmapi as R

# sizeof() of each structure as clang-15 computes it for x86-64 from the open-gpu-kernel-modules
# 580.105.08 headers (nvos.h, nv-ioctl.h, nv-unix-nvos-params-wrappers.h, alloc_channel.h, cl*.h, ctrl*.h,
# uvm_ioctl.h): a field missing or misaligned in nvdrv.rmapi changes one of these
HEADER_SIZES = {
    "NVOS00_PARAMETERS": 16, "NVOS02_PARAMETERS": 48, "nv_ioctl_nvos02_parameters_with_fd": 56,
    "NVOS21_PARAMETERS": 32, "NVOS64_PARAMETERS": 48, "NVOS33_PARAMETERS": 48, "nv_ioctl_nvos33_parameters_with_fd": 56,
    "NVOS34_PARAMETERS": 32, "NVOS46_PARAMETERS": 64, "NVOS47_PARAMETERS": 48, "NVOS54_PARAMETERS": 32,
    "nv_ioctl_rm_api_version_t": 72, "nv_ioctl_register_fd_t": 4, "NV_CHANNEL_ALLOC_PARAMS": 368,
    "NV_MEMORY_ALLOCATION_PARAMS": 128, "NV0080_ALLOC_PARAMETERS": 56, "NV2080_ALLOC_PARAMETERS": 4,
    "NV_VASPACE_ALLOCATION_PARAMETERS": 56, "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS": 20,
    "NV_GR_ALLOCATION_PARAMETERS": 16, "NVB0B5_ALLOCATION_PARAMETERS": 8, "NV_HOPPER_USERMODE_A_PARAMS": 2,
    "NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS": 384, "NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS": 32,
    "NV2080_CTRL_GPU_GET_GID_INFO_PARAMS": 268, "NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS": 3,
    "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS": 4, "UVM_INITIALIZE_PARAMS": 16,
    "UVM_REGISTER_GPU_PARAMS": 40,
}


@pytest.mark.parametrize("name", sorted(HEADER_SIZES))
def test_structure_sizes_match_the_headers(name):
    assert ctypes.sizeof(getattr(R, name)) == HEADER_SIZES[name]


def test_channel_alloc_field_offsets():
    """offsetof() from the same clang-15 build: the per-subdevice arrays and the memory descriptors."""
    S = R.NV_CHANNEL_ALLOC_PARAMS
    assert (S.userdOffset.offset, S.instanceMem.offset, S.tpcConfigID.offset) == (64, 144, 360)


def test_ioctl_numbers():
    """_IOWR('F', nr, size): what nvidia_ioctl decodes with _IOC_NR/_IOC_SIZE."""
    req = R.nv_iowr(R.NV_ESC_RM_ALLOC, ctypes.sizeof(R.NVOS21_PARAMETERS))
    assert req == 0xC020462B
    assert (R.ioc_nr(req), R.ioc_size(req), R.ioc_type(req)) == (0x2B, 32, ord("F"))
    assert R.nv_iowr(R.NV_ESC_CHECK_VERSION_STR, 72) == 0xC04846D2


def test_status_codes_decode_to_names():
    assert R.status_name(0x33) == "NV_ERR_INVALID_OBJECT_HANDLE"
    assert R.status_name(0x1F) == "NV_ERR_INVALID_ARGUMENT"
    assert R.status_name(0x1234) == "RM status 0x1234"
    e = R.RMError("NV_ESC_RM_ALLOC of HOPPER_COMPUTE_A", 0x22, "is the class on this GPU?")
    assert str(e) == "NV_ESC_RM_ALLOC of HOPPER_COMPUTE_A: NV_ERR_INVALID_CLASS (0x22); is the class on this GPU?"


def test_class_names():
    assert C.class_name(C.HOPPER_CHANNEL_GPFIFO_A) == "HOPPER_CHANNEL_GPFIFO_A"
    assert C.class_name(0xC9B0) == "class 0xc9b0"


def test_qmd_fields_fit_and_do_not_overlap():
    spans = sorted(C.QMD_FIELDS.values())
    assert all(hi < C.QMD_BYTES * 8 and lo <= hi for lo, hi in spans)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))


def test_nvdrv_never_imports_the_model_and_the_model_only_nvdrv_data():
    """nvdrv finds gpusim.nv through an entry point; gpusim.nv may use nvdrv's tables and the ioctl layer's
    interfaces (classes, rmapi, ioctl), never the driver's logic (device, pushbuf)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    for f in (root / "nvdrv").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] == "gpusim" for n in names), (f, names)
    for f in (root / "gpusim" / "nv").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nvdrv"):
                mods = [node.module] if node.module != "nvdrv" else [f"nvdrv.{a.name}" for a in node.names]
                assert all(m in ("nvdrv.classes", "nvdrv.rmapi", "nvdrv.ioctl") for m in mods), (f, mods)
