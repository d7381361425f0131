"""nvdrv on the model of the NVIDIA kernel module (gpusim.nv), with cubins described by hand: the model
cannot run SASS, so the kernel's code bytes do not matter here; what a launch carries (QMD, constant
bank 0) is checked from the model's record of it."""
from types import SimpleNamespace

import pytest

from gpusim.nv.rm import SimProvider
from nvdrv.device import NVHCQDevice

NO_SASS = "the NVIDIA model cannot execute SASS (gpusim.nv has no shader executor)"


def fake_cubin(name="saxpy", params=((0, 8), (8, 8), (16, 4), (20, 4)), shared=0, max_threads=None, frame=0):
    """What nvdrv.cubin reports for a kernel: parameters at c[0][0x210], as NVRTC places them for sm_90."""
    size = max((o + s for o, s in params), default=0)
    k = SimpleNamespace(name=name, code=bytes(range(256)), registers=24, barriers=1, shared_size=shared,
                        const0_size=0x210 + size, const0=bytes(0x210 + size), param_base=0x210, param_size=size,
                        params=params, max_threads=max_threads, frame_size=frame,
                        arg_entries=lambda: [(o, s, "untyped") for o, s in params])
    return SimpleNamespace(kernels={name: k}, kernel=lambda n: k, runs_on=lambda sm: sm == 90, arch="sm_90")


@pytest.fixture
def nvdev():
    """A device on a fresh model (one RM, one simulated H100)."""
    dev = NVHCQDevice("nv:sim", SimProvider(), "0")
    yield dev
    dev.close()


@pytest.fixture
def saxpy(nvdev):
    return nvdev.program(fake_cubin(), "saxpy")
