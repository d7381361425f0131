"""The backend-neutral layer: argument layouts from (offset, size, kind) entries (AMDHSA metadata through
amdrv.kernargs here, a cubin's parameter records for nvdrv), errors that name the kernel and parameter, the
backend registry."""
import struct

import numpy as np
import pytest

import hcq
from amdrv.kernargs import kernel_args
from hcq.api import ArgLayout, ArgumentError, Buffer, HCQDevice, HCQError, KernelArg, scalar_code

SAXPY = [  # what clang-15 writes for tests/rdna3/kernels/saxpy.cl
    {".address_space": "global", ".offset": 0, ".size": 8, ".type_name": "float*", ".value_kind": "global_buffer"},
    {".address_space": "global", ".offset": 8, ".size": 8, ".type_name": "float*", ".value_kind": "global_buffer"},
    {".offset": 16, ".size": 4, ".type_name": "float", ".value_kind": "by_value"},
    {".offset": 20, ".size": 4, ".type_name": "uint", ".value_kind": "by_value"},
]


class FakeDevice:
    name = "fake"


def buf(va, size=64):
    return Buffer(FakeDevice(), va, size)


def saxpy_layout():
    return ArgLayout("saxpy", kernel_args(SAXPY), 24)


def test_pack_matches_metadata_offsets():
    raw = saxpy_layout().pack([buf(0x1000), buf(0x2000), 2.5, 7])
    assert raw == struct.pack("<QQfI", 0x1000, 0x2000, 2.5, 7)


def test_pack_accepts_numpy_scalars_and_views():
    lay = saxpy_layout()
    b = buf(0x1000, 4096)
    raw = lay.pack([b.view(64), b, np.float32(1.5), np.uint32(3)])
    assert raw == struct.pack("<QQfI", 0x1040, 0x1000, 1.5, 3)


def test_padding_and_sub_dword_scalars():
    meta = [{".offset": 0, ".size": 1, ".type_name": "char", ".value_kind": "by_value"},
            {".offset": 8, ".size": 8, ".type_name": "ulong", ".value_kind": "by_value"},
            {".offset": 16, ".size": 2, ".type_name": "short", ".value_kind": "by_value"},
            {".offset": 24, ".size": 8, ".value_kind": "hidden_global_offset_x"}]
    lay = ArgLayout("k", kernel_args(meta), 32)
    assert lay.n == 3 and [a.what for a in lay.hidden] == ["hidden_global_offset_x"]
    assert lay.pack([-3, 1 << 40, -2])[:18] == struct.pack("<b7xQh", -3, 1 << 40, -2)


def test_wrong_count_names_kernel_and_parameters():
    with pytest.raises(ArgumentError, match=r"kernel saxpy takes 4 argument\(s\) \(arg0: float\*.*got 3"):
        saxpy_layout().pack([buf(0), buf(0), 1.0])


@pytest.mark.parametrize("args, words", [
    ((0x1000, "B", 1.0, 1), r"argument 0 \(arg0: float\*, 8 bytes\) is a pointer: pass a Buffer, not int"),
    (("A", "B", "x", 1), r"argument 2 \(arg2: float, 4 bytes\) needs a float that fits: 'x' does not"),
    (("A", "B", 1.0, -1), r"argument 3 \(arg3: uint, 4 bytes\) needs an integer that fits"),
    (("A", "B", 1.0, 1.5), r"argument 3 .* needs an integer"),
    (("A", "B", "A", 1), r"argument 2 \(arg2: float, 4 bytes\) is a scalar: pass a number, not a Buffer"),
    (("A", "B", 1.0, 1 << 32), r"argument 3 .* needs an integer that fits"),
])
def test_wrong_types_name_kernel_and_parameter(args, words):
    b = {"A": buf(0x1000), "B": buf(0x2000)}
    with pytest.raises(ArgumentError, match="kernel saxpy: " + words):
        saxpy_layout().pack([b.get(a, a) if isinstance(a, str) else a for a in args])


def test_unsupported_value_kind_is_named():
    with pytest.raises(HCQError, match="'img'.*value kind 'image'"):
        kernel_args([{".offset": 0, ".size": 8, ".value_kind": "image", ".name": "img"}])


def test_buffer_view_bounds():
    b = buf(0x1000, 100)
    assert b.view(10, 20).va == 0x100A and b.view(10).size == 90
    with pytest.raises(HCQError, match="outside a 100-byte buffer"):
        b.view(90, 20)


def test_unknown_backend_lists_installed():
    with pytest.raises(HCQError, match=r"no backend 'qcom'.*installed: .*am"):
        hcq.open("qcom:0")
    assert "am" in hcq.backends()


def test_hcq_imports_nothing_of_ours_but_pcie():
    import ast
    from pathlib import Path
    for f in Path(hcq.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for n in names:
                top = n.split(".")[0]
                assert top not in {"amdrv", "gpusim", "nvdrv", "qcomdrv", "tools", "compiler_bridge"}, (f, n)


def test_untyped_scalars_take_floats_and_negative_ints():
    """Code objects without .type_name (our own writer's): a float goes in as its IEEE bits, a negative
    int as two's complement; what still does not fit names the parameter."""
    meta = [{".offset": 0, ".size": 4, ".value_kind": "by_value", ".name": "alpha"},
            {".offset": 4, ".size": 4, ".value_kind": "by_value", ".name": "k"}]
    lay = ArgLayout("k", kernel_args(meta), 8)
    assert lay.pack([1.5, -2]) == struct.pack("<fi", 1.5, -2)
    with pytest.raises(ArgumentError, match=r"argument 1 \(k: scalar, 4 bytes\) needs an integer"):
        lay.pack([1.0, 1 << 33])


def test_untyped_parameters_take_buffers_or_numbers():
    """A cubin says only (offset, size) of each parameter: an 8-byte one takes a Buffer (its address) or an
    integer, a 4-byte one an int or a float (its IEEE bits); a Buffer in a 4-byte slot is refused by name."""
    lay = ArgLayout("saxpy", [KernelArg("p0", 0, 8, "untyped"), KernelArg("p1", 8, 8, "untyped"),
                              KernelArg("p2", 16, 4, "untyped"), KernelArg("p3", 20, 4, "untyped")], 24)
    assert [a.code for a in lay.explicit] == ["Q", "Q", "I", "I"]
    assert lay.pack([buf(0x1000), 0x2000, 2.5, 7]) == struct.pack("<QQfI", 0x1000, 0x2000, 2.5, 7)
    assert lay.values([buf(0x1000), buf(0x2000), 1, 2]) == [0x1000, 0x2000, 1, 2]
    with pytest.raises(ArgumentError, match=r"argument 2 \(p2: untyped, 4 bytes\) is a scalar: pass a number"):
        lay.pack([buf(0), buf(0), buf(0x10), 1])


def test_kernel_arg_entries_are_checked():
    assert KernelArg("n", 0, 4, "scalar", type_name="int").code == "i"
    assert KernelArg("p", 0, 8, "buffer").code == "Q"
    with pytest.raises(HCQError, match="'x': kind 'pointer' is not one of buffer, scalar, untyped, hidden"):
        KernelArg("x", 0, 8, "pointer")
    with pytest.raises(HCQError, match="'x': offset -4 and size 4"):
        KernelArg("x", -4, 4, "scalar")


@pytest.mark.parametrize("type_name, size, code", [("float", 4, "f"), ("const int", 4, "i"), ("unsigned long long", 8, "Q"),
                                                  ("float", 8, "Q"), ("struct S", 12, "12s"), ("", 2, "H")])
def test_scalar_code_from_c_type_names(type_name, size, code):
    assert scalar_code(type_name, size) == code


def test_backends_declare_their_timestamp_clock():
    """hcq assumes no GPU clock: a HCQDevice subclass that does not say timestamp_hz cannot be created."""
    names = [n for n in dir(HCQDevice) if getattr(getattr(HCQDevice, n), "__isabstractmethod__", False)]
    assert "timestamp_hz" in names

    no_clock = type("NoClock", (HCQDevice,), {n: (lambda *a, **k: None) for n in names if n != "timestamp_hz"})
    with pytest.raises(TypeError, match="timestamp_hz"):
        no_clock()
    from amdrv.hcq import AMHCQDevice
    assert AMHCQDevice.timestamp_hz == 100e6                     # soc21_get_xclk: the 100 MHz reference


def test_device_choice_questions_go_through_the_backend(monkeypatch, tmp_path):
    """hcq.find_real_device / hcq.device_facts: the compiler asks hcq, the AM backend answers (issue 12:
    compiler_bridge does not import amdrv.device_spec)."""
    from amdrv import device_spec
    monkeypatch.setattr(device_spec, "pick_real_gpu", lambda: (None, "0000:03:00.0 is bound to amdgpu"))
    assert hcq.find_real_device("am") == (None, "0000:03:00.0 is bound to amdgpu")
    assert hcq.find_real_device("nothing")[0] is None
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    facts = hcq.device_facts("am:sim:navi33")
    assert facts == {"persistent": True, "state": str(tmp_path / "sim" / "navi33.state")}, facts
    assert hcq.device_facts("c") == {"persistent": False, "state": None}
    assert hcq.device_facts("am:not-a-device")["persistent"] is False


def test_compiler_bridge_does_not_import_the_driver():
    """compiler_bridge reaches devices through hcq and the ISA through rdna3, never amdrv."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[2] / "compiler_bridge"
    bad = [f"{f.name}: {m}" for f in root.rglob("*.py")
           for m in re.findall(r"^\s*(?:from|import) (amdrv\S*)", f.read_text(), re.M)]
    assert not bad, bad


def test_rdna3_imports_nothing_of_ours_but_the_cache():
    """The ISA toolchain and wave executor (rdna3/) sit below every package that uses them: of ours they
    import only hcq.cache (the OpenCL code-object cache's root)."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "rdna3"
    ours = {"amdrv", "gpusim", "nvdrv", "pcie", "tools", "compiler_bridge", "driverless", "bench", "hcq"}
    bad = []
    for f in root.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{f.name}: {n}" for n in names
                    if n.split(".")[0] in ours and not n.startswith("hcq.cache")]
    assert not bad, bad


def test_the_old_name_hcq_device_still_works_with_a_warning():
    """hcq.Device became hcq.HCQDevice (issue 12: five classes were called Device); the documented old name
    stays as an alias that says so."""
    import hcq
    with pytest.warns(DeprecationWarning, match="hcq.HCQDevice"):
        assert hcq.Device is HCQDevice
    with pytest.raises(AttributeError, match="no attribute 'Devices'"):
        hcq.Devices  # noqa: B018


def test_raw_bytes_parameters_take_exactly_their_size():
    """A by-value struct (no scalar type: struct code "Ns") took bytes of any length: struct padded a short
    value with NULs and cut a long one, silently."""
    meta = [{".offset": 0, ".size": 12, ".value_kind": "by_value", ".name": "box", ".type_name": "struct box"},
            {".offset": 12, ".size": 4, ".value_kind": "by_value", ".name": "n", ".type_name": "int"}]
    lay = ArgLayout("k", kernel_args(meta), 16)
    assert lay.pack([bytes(range(12)), 5]) == bytes(range(12)) + struct.pack("<i", 5)
    for wrong in (bytes(8), bytes(16), 7):
        with pytest.raises(ArgumentError, match=r"argument 0 \(box: struct box, 12 bytes\) .*exactly 12 bytes"):
            lay.pack([wrong, 5])
        with pytest.raises(ArgumentError, match="exactly 12 bytes"):
            lay.values([wrong, 5])
        with pytest.raises(ArgumentError, match="exactly 12 bytes"):
            lay.arg_value(0, wrong)
