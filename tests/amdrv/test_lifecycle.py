"""The IP-block life cycle (amdrv.ip.base, amd_ip_funcs): AMGPU builds, brings up, soft-resets and takes
down its blocks in amdgpu's order, the order docs/architecture.md documents, and they share one NBIO."""
import re
from pathlib import Path

import pytest

import pcie
from amdrv.am import AMGPU
from amdrv.ip.base import BLOCK_ORDER, IPBlock
from amdrv.ip.gfx import GFX
from amdrv.ip.gmc import GMC
from amdrv.ip.ih import IH
from amdrv.ip.nbio import NBIO
from amdrv.ip.psp import PSP
from amdrv.ip.sdma import SDMA
from amdrv.ip.smu import SMU
from amdrv.queue import ComputeQueue, SDMAQueue

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = (NBIO, GMC, IH, PSP, SMU, GFX, SDMA)


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def documented_order() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    m = re.search(r"amdgpu's order: ((?:`\w+`(?: → )?)+)", text)
    assert m, "docs/architecture.md names the IP blocks' order as \"amdgpu's order: `nbio` → ...\""
    return re.findall(r"`(\w+)`", m.group(1))


def test_the_documented_order_is_amdgpus():
    # amdgpu_discovery_set_ip_blocks: common, gmc, ih, psp, smu, (dce), gfx, sdma
    assert list(BLOCK_ORDER) == documented_order() == ["nbio", "gmc", "ih", "psp", "smu", "gfx", "sdma"]
    assert [cls.name for cls in BLOCKS] == list(BLOCK_ORDER)
    assert all(issubclass(cls, IPBlock) for cls in BLOCKS)


def test_boot_recover_and_fini_walk_the_blocks_in_order(sim_bus, monkeypatch):
    calls: list[tuple[str, str, object]] = []

    def recording(cls, method):
        orig = getattr(cls, method)

        def wrapper(self, *a, **kw):
            calls.append((method, self.name, a[0] if a else kw.get("warm")))
            return orig(self, *a, **kw)
        return wrapper
    for cls in BLOCKS:
        for method in ("sw_init", "hw_init", "hw_fini", "soft_reset"):
            monkeypatch.setattr(cls, method, recording(cls, method))

    build = AMGPU._build_blocks

    def building(self):   # the device's own look-ups (AMDevice, the VBIOS) make NBIO views before this
        calls.clear()
        build(self)
    monkeypatch.setattr(AMGPU, "_build_blocks", building)

    def made(method):
        return [(name, arg) for m, name, arg in calls if m == method]

    gpu = AMGPU.open(pcie.open_function("sim", "navi31", bus=sim_bus, fresh=True))
    order = documented_order()
    assert [n for n, _ in made("sw_init")] == order                   # built in order: the boot region's layout
    assert made("hw_init") == [(n, False) for n in order]             # cold: every block
    assert [s.name for s in gpu.boot_report.steps] == order
    # one NBIO, shared by the blocks that route doorbells, flush the HDP and control the IH through it
    assert gpu.gmc.nbio is gpu.nbio and gpu.ih.nbio is gpu.nbio and gpu.gfx.nbio is gpu.nbio
    assert gpu.sdma.nbio is gpu.nbio

    keep = (ComputeQueue(gpu), SDMAQueue(gpu))
    calls.clear()
    gpu.recover()
    assert [n for n, _ in made("soft_reset")] == order                # every block, in order (GFX, SDMA act)

    calls.clear()
    gpu.fini()
    assert [n for n, _ in made("hw_fini")] == order[::-1]             # amdgpu_device_ip_fini_early
    del keep

    calls.clear()
    gpu = AMGPU.open(pcie.open_function("sim", "navi31", bus=sim_bus))
    assert gpu.boot_report.kind == "warm"
    assert made("sw_init") == [(n, None) for n in order]
    warm = [n for n in order if n != "psp"]                           # the PSP's sOS runs on: no step
    assert made("hw_init") == [(n, True) for n in warm]
    assert [s.name for s in gpu.boot_report.steps] == warm
    gpu.fini()


def test_a_block_without_hw_init_says_so():
    class Half(IPBlock):
        name = "half"
    with pytest.raises(NotImplementedError, match="Half: no hw_init"):
        Half().hw_init()
    Half().hw_fini(), Half().soft_reset(), Half().wait_idle()        # the rest are no-ops
