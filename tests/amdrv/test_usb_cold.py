"""A cold AM boot through the simulated ASM24xx bridge: the PSP stages firmware in the bridge's SRAM (DMA
memory mapped through the GART, as amdgpu's GTT fw_pri_bo), not through BAR0 TLPs.

Measured: UAS 3 176 round trips (the PSP step 2 570), Bulk-Only Transport 47 661 (39 061), with the page
tables below the VMID 0 root in the window too (before that: UAS 4 009 (3 403), BOT 60 973 (52 373); before
that, with the staging buffer in VRAM written through BAR0, 4 070 566 over BOT, 86 s in the simulator).
The bounds below are those numbers plus about 10 %.
"""
from __future__ import annotations

import dataclasses

import pytest

BOUNDS = {"uas": (3_150, 2_370), "bot": (46_600, 35_700)}   # (whole boot, PSP step): 3 046 (2 296), 45 234 (34 651)


@pytest.fixture
def bridge(sim_bus, debian_firmware, monkeypatch, tmp_path):
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    from pcie.usb.transport import open_function

    def open_fresh(link: str):
        monkeypatch.setenv("DRIVERLESS_USB_LINK", link)
        return open_function(backend=usb_bridge.backend("navi31", bus=sim_bus, fresh=True), lock_dir=tmp_path)
    return open_fresh


@pytest.mark.parametrize("link", ["uas", "bot"])
def test_cold_boot_through_the_bridge_stages_firmware_in_the_window(bridge, link):
    from amdrv.am import AMGPU
    from amdrv.ip.psp import PSP
    f = bridge(link)
    staged = []
    real_stage = PSP._stage

    def stage(self, data):
        staged.append(real_stage(self, data))
        return staged[-1]
    before = f.counters.snapshot()
    PSP._stage = stage
    try:
        gpu = AMGPU.open(f, cold=True)
    finally:
        PSP._stage = real_stage
    try:
        spent = f.counters - before
        psp_step = {s.name: s for s in gpu.boot_report.steps}["psp"]
        print(f"cold boot through the bridge ({link}): {spent.round_trips} round trips (PSP "
              f"{psp_step.round_trips}), {gpu.boot_report.seconds:.2f} s")
        assert gpu.boot_report.kind == "cold" and gpu.psp.staging == "dma"
        assert gpu.gfx.mec_ready() and gpu.sdma.ready()
        total, psp = BOUNDS[link]
        assert spent.round_trips <= total and psp_step.round_trips <= psp
        # every stage at one MC address, 1 MiB aligned (C2PMSG_36 takes it >> 20), not in the FB aperture
        assert len(set(staged)) == 1 and staged[0] % (1 << 20) == 0
        assert not gpu.dev.fb_base <= staged[0] < gpu.dev.fb_base + gpu.dev.vram.size
        assert spent.bulk_write_bytes < 64 << 10     # BAR0 writes: registers and tables, no firmware
    finally:
        gpu.fini()


def test_a_corrupt_firmware_through_the_window_is_refused_naming_it(bridge, monkeypatch):
    from amdrv.am import AMError, AMGPU
    from amdrv.ip.psp import PSP
    real_image = PSP.image

    def image(self, name):
        img = real_image(self, name)
        if name == "gc_11_0_0_mes.bin":
            comp = img.component("CP_MES")
            data = bytearray(comp.data)
            data[len(data) // 3] ^= 0x10
            bad = dataclasses.replace(comp, data=bytes(data))
            img = dataclasses.replace(img, components=tuple(bad if c is comp else c for c in img.components))
        return img
    monkeypatch.setattr(PSP, "image", image)
    f = bridge("uas")
    with pytest.raises(AMError, match=r"cold boot failed in psp: am:usb:[0-9-]+: PSP LOAD_IP_FW of "
                                      r"gc_11_0_0_mes\.bin CP_MES failed: status 0xffff000f "
                                      r"\(TEE_ERROR_SECURITY"):
        AMGPU.open(f, cold=True)
