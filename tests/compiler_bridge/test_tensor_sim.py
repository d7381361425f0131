"""A representative part of the Tensor tests (test_tensor.py) on the simulated Navi31 with the LLVM code
generator (clang-15 -> gfx1100 code objects on the wave executor through hcq): movement (the transpose
whose v_mad_i32_i24 once hung the simulated GPU), matmul, integer division and casts, comparisons,
reductions and the MLP with softmax. The whole file runs there with DEVICE=am:sim CODEGEN=llvm."""
import importlib.util
import shutil
from pathlib import Path

import pytest

from compiler_bridge import runtime
from compiler_bridge.tensor import Tensor

_spec = importlib.util.spec_from_file_location("_tensor_tests_on_sim", Path(__file__).with_name("test_tensor.py"))
TT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TT)

CASES = {
    "movement": (TT.test_movement, ()),
    "matmul": (TT.test_matmul, ()),
    "int_and_bool": (TT.test_int_and_bool_arithmetic, ()),
    "compare_where_cast": (TT.test_comparisons_where_casts, ()),
    "reduce_axis1": (TT.test_reductions, (1, True)),
    "mlp_softmax": (TT.test_mlp_and_softmax, ()),
}


@pytest.fixture(scope="module")
def llvm_sim(debian_firmware):
    if "llvm" not in runtime.codegens() or not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("the llvm code generator needs clang-15 and ld.lld-15")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
        dev = runtime.open_device("am:sim", codegen="llvm", fresh=True)
        yield dev
        runtime.close_device("am:sim")


@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_programs_on_am_sim_with_llvm(name, llvm_sim, monkeypatch, tmp_path_factory):
    monkeypatch.setattr("compiler_bridge.codegen.c._cache_dir", lambda: tmp_path_factory.getbasetemp() / "c_cache")
    monkeypatch.setattr(TT, "T", lambda x: Tensor(x, device="am:sim"))
    before = len(runtime.launches)
    fn, args = CASES[name]
    fn(*args)
    runs = runtime.launches[before:]
    assert runs and all(r.device == "am:sim" for r in runs)
    assert llvm_sim.codegen == "llvm"
