"""amdrv.ip.psp against the simulated PSP: the whole front-door load, a running sOS, corrupt payloads, timeouts."""
import dataclasses
import time

import pytest

import pcie
from amdrv.autogen import psp as P
from amdrv.device import AMDevice
from amdrv.ip.nbio import NBIO
from amdrv.ip.psp import PSP, PSPError, PSPTimeout
from gpusim.bus import HostBus

BUS = HostBus()  # this module's own simulated bus (slots of its own, not the device strings')


@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def open_dev(chip="navi31", fresh=True, **kw) -> AMDevice:
    dev = AMDevice(f"am:sim:{chip}", pcie.open_function("sim", chip, fresh=fresh, bus=BUS, **kw))
    # Stand-in for the GMC block: the FB location the VBIOS left (mmhub_v3_0_get_fb_location).
    dev.fb_base = (dev.reg("MMHUB").MMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24
    # soc21_common_hw_init comes first upstream: it points the HDP flush page the PSP's flushes write
    # at (without it the staged firmware never gets past the HDP)
    NBIO(dev).init()
    return dev


def wait_autoload(dev, timeout=1.0) -> bool:
    """What the GFX block does after the PSP: wait for RLC_RLCS_BOOTLOAD_STATUS.BOOTLOAD_COMPLETE."""
    reg, end = dev.reg("GC").RLC_RLCS_BOOTLOAD_STATUS, time.monotonic() + timeout
    while time.monotonic() < end:
        if reg.decode()["BOOTLOAD_COMPLETE"]:
            return True
    return False


@pytest.mark.parametrize("chip", ["navi31", "navi33"])
def test_full_load_reaches_rlc_autoload_complete(chip):
    dev = open_dev(chip)
    before = dev.pci.counters.snapshot()
    psp = PSP(dev)
    psp.init()
    reads = (dev.pci.counters - before).mmio_reads
    assert wait_autoload(dev)
    gpu = dev.pci.dev
    assert gpu.errors == []
    assert gpu.blocks["SMU"].running
    assert set(gpu.blocks["PSP"].loaded) >= gpu.blocks["PSP"].autoload_required()
    # upstream's order: TOC, SMU (pmfw-centralized) before the TMR, GFX firmware, autoload after RLC_G, RL last
    cmds = [(c, w.split(" ")[-1]) for c, w, _ in psp.log]
    assert cmds[:3] == [("LOAD_TOC", "TOC"), ("LOAD_IP_FW", "SMU"), ("SETUP_TMR", f"{psp.tmr.addr:#x}")]
    assert cmds[3] == ("LOAD_IP_FW", "SDMA_UCODE_TH0")
    rlc_g = cmds.index(("LOAD_IP_FW", "RLC_G"))
    assert cmds[rlc_g + 1][0] == "AUTOLOAD_RLC"   # named after the files it depends on (a refusal names them)
    assert psp.log[rlc_g + 1][1].endswith(f"gc_{dev.chip.ip_tag('gc')}_rlc.bin, sdma_{dev.chip.ip_tag('sdma')}.bin")
    assert cmds[rlc_g + 2:] == ([("LOAD_IP_FW", "RL")] if chip == "navi31" else [])   # Navi33's package has no RL
    assert all(status == 0 for *_, status in psp.log)
    assert psp.tmr_size == 0x1300000 and psp.tmr.addr % (1 << 20) == 0
    # Ring commands are waited for on the fence in memory: register reads are the bootloader's and the ring's
    # (polls while the bootloader starts and the ring is made: seeded delays of up to 48 and 16 steps).
    assert reads < 40 + 48 + 16, reads
    assert dev.mm.in_use() == 0   # the staging buffer went back to the heap
    dev.close()


def test_load_with_the_secure_os_already_running():
    first = open_dev()
    PSP(first).init()
    first.close()
    gpu = first.pci.dev
    bootloader_cmds = list(gpu.blocks["PSP"].bl_done)
    # as when the previous driver died after the sOS started and before it loaded the SMU firmware (the
    # only time the driver loads over a running sOS: a running SMU is reset first, and the PSP does not
    # load its firmware into a running SMU)
    gpu.blocks["SMU"].reset()
    dev = open_dev(fresh=False)            # a new driver instance finds the sOS running
    psp = PSP(dev)
    assert psp.sos_alive()
    psp.init()                             # no bootloader; the old ring is destroyed and a new one made
    assert gpu.blocks["PSP"].bl_done == bootloader_cmds
    assert gpu.errors == []
    assert wait_autoload(dev)
    dev.close()


def test_small_bar_load():
    dev = open_dev(small_bar=True)
    assert dev.vram.visible < dev.vram.size
    psp = PSP(dev)
    psp.init()
    assert dev.pci.dev.errors == [] and wait_autoload(dev)
    dev.close()


NAVI31_PIECES = (
    # the package's SPL is never sent on MP0 13 (TOS_SPL_TABLE stages the KDB), so its bytes do not matter
    [("psp_13_0_0_sos.bin", n) for n in ("KDB", "SYS_DRV", "SOS", "TOC", "RL")]
    + [("smu_13_0_0.bin", "SMU"), ("sdma_6_0_0.bin", "SDMA_UCODE_TH0"), ("sdma_6_0_0.bin", "SDMA_UCODE_TH1")]
    + [(f"gc_11_0_0_{k}.bin", f"RS64_{k.upper()}{s}") for k, n in (("pfp", 2), ("me", 2), ("mec", 4))
       for s in ["", *(f"_P{i}_STACK" for i in range(n))]]
    + [("gc_11_0_0_mes.bin", "CP_MES"), ("gc_11_0_0_mes.bin", "MES_STACK"),
       ("gc_11_0_0_mes1.bin", "CP_MES_KIQ"), ("gc_11_0_0_mes1.bin", "MES_KIQ_STACK"),
       ("gc_11_0_0_imu.bin", "IMU_I"), ("gc_11_0_0_imu.bin", "IMU_D")]
    + [("gc_11_0_0_rlc.bin", n) for n in ("RLC_G", "RLC_RESTORE_LIST_GPM_MEM", "RLC_RESTORE_LIST_SRM_MEM",
                                           "RLC_IRAM", "RLC_DRAM_BOOT", "RLC_P", "RLC_V")]
)


def corrupt(psp: PSP, file: str, name: str) -> None:
    """A flipped byte in one component of the parsed image the PSP loads from (the store's pins stop a
    corrupt file before it is parsed, so the test changes the parsed component)."""
    img = psp.image(file)
    comp = img.component(name)
    data = bytearray(comp.data)
    data[len(data) // 2] ^= 0x5A
    bad = dataclasses.replace(comp, data=bytes(data))
    psp.images[file] = dataclasses.replace(img, components=tuple(bad if c is comp else c for c in img.components))


@pytest.mark.parametrize("file,name", NAVI31_PIECES, ids=[f"{f.split('.')[0]}:{n}" for f, n in NAVI31_PIECES])
def test_each_corrupt_payload_gives_an_error_naming_the_firmware(file, name):
    dev = open_dev()
    psp = PSP(dev, timeout_s=0.5)
    corrupt(psp, file, name)
    with pytest.raises(PSPError) as e:
        psp.init()
    msg = str(e.value)
    assert not isinstance(e.value, PSPTimeout), msg
    assert msg.startswith("am:sim:navi31: PSP ") and f"{file} {name} failed" in msg, msg
    if name in ("KDB", "SYS_DRV", "SOS"):
        assert "bootloader" in msg and "C2PMSG_35 = 0x8000000" in msg, msg
    else:
        cmd = "LOAD_TOC" if name == "TOC" else "LOAD_IP_FW"
        assert f"{cmd} of {file} {name} failed: status 0xffff000f (TEE_ERROR_SECURITY" in msg, msg
    dev.close()


def test_the_error_for_the_briefs_example():
    dev = open_dev()
    psp = PSP(dev)
    corrupt(psp, "gc_11_0_0_mec.bin", "RS64_MEC_P0_STACK")
    with pytest.raises(PSPError, match=r"^am:sim:navi31: PSP LOAD_IP_FW of gc_11_0_0_mec\.bin RS64_MEC_P0_STACK "
                                       r"failed: status 0xffff000f \(TEE_ERROR_SECURITY: the signature check"):
        psp.init()
    # the loads before it went through; the stacks after it were never sent
    assert ("LOAD_IP_FW", "gc_11_0_0_mec.bin RS64_MEC", 0) in psp.log
    assert not dev.pci.dev.blocks["PSP"].is_loaded(P.GFX_FW_TYPE_RS64_MEC_P1_STACK)
    assert dev.mm.in_use() == 0
    dev.close()


def test_timeouts_name_the_register_and_what_was_awaited():
    dev = open_dev()
    psp = PSP(dev, timeout_s=0.05)
    psp._alloc_stage()
    with pytest.raises(PSPTimeout, match=r"waiting for the secure OS to be ready for ring creation \(C2PMSG_64 "
                                         r"bit 31\) \(MP0_SMN_C2PMSG_64 = 0x00000000\)"):
        psp.ring_create()                  # no sOS: nobody answers C2PMSG_64
    psp.bootloader()
    psp.ring_create()
    # a command whose fence never comes: the ring is destroyed behind the driver's back
    psp.ring_stop()
    with pytest.raises(PSPTimeout, match=r"waiting for LOAD_TOC of psp_13_0_0_sos.bin TOC: the fence at VRAM "
                                         r"0x[0-9a-f]+ holds 0, expected 1") as e:
        psp.load_toc()
    assert str(e.value).startswith(f"{dev.name}: PSP timeout") and isinstance(e.value, PSPError)
    dev.close()


# -- staging in DMA memory mapped through the GART (upstream's GTT fw_pri_bo) ---------------------------------

def open_dev_gmc(**kw):
    """A device with NBIO (bus mastering: the PSP reads DMA memory) and the GMC up (the VMID 0 page table
    and the MMHUB), as the boot has them before the PSP."""
    from amdrv.ip.gmc import GMC
    dev = AMDevice("am:sim:navi31", pcie.open_function("sim", "navi31", fresh=True, bus=BUS, **kw))
    gmc = GMC(dev)
    gmc.nbio.init()
    gmc.init()
    return dev, gmc


def test_dma_staging_loads_through_the_gart_at_a_1mib_aligned_mc_address():
    # amdgpu_psp.c psp_sw_init (6.1): fw_pri_bo is PSP_1_MEG, PSP_1_MEG aligned, in GTT unless SR-IOV; its MC
    # address >> 20 goes to C2PMSG_36 (psp_v13_0_bootloader_load_component) and, whole, to LOAD_TOC/LOAD_IP_FW.
    from amdrv.ip.gmc import SYSTEM_VA, SYSTEM_VA_SIZE
    dev, gmc = open_dev_gmc()
    psp = PSP(dev, gmc=gmc)
    assert psp.stage_in == "dma"
    staged = []
    real_stage = psp._stage
    psp._stage = lambda data: staged.append(real_stage(data)) or staged[-1]
    psp.init()
    assert psp.staging == "dma" and wait_autoload(dev)
    gpu = dev.pci.dev
    assert gpu.errors == []
    assert len(set(staged)) == 1 and len(staged) == 4 + len(psp.log) - 2   # bootloader 4, TOC, every LOAD_IP_FW
    mc = staged[0]
    assert mc % (1 << 20) == 0 and SYSTEM_VA <= mc < SYSTEM_VA + SYSTEM_VA_SIZE
    assert gpu.get("MP0", "MP0_SMN_C2PMSG_36") == mc >> 20      # the bootloader read it through the MMHUB
    assert psp.stage_mc is None and gmc.pt.mappings() == []     # unmapped and freed after the load
    assert dev.mm.in_use() == 0                                 # its page tables went back to the heap too
    dev.close()


@pytest.mark.parametrize("file,name", [("psp_13_0_0_sos.bin", "SYS_DRV"), ("psp_13_0_0_sos.bin", "TOC"),
                                       ("gc_11_0_0_mec.bin", "RS64_MEC_P1_STACK"), ("gc_11_0_0_rlc.bin", "RLC_G")])
def test_a_corrupt_payload_staged_through_dma_is_refused_naming_the_firmware(file, name):
    dev, gmc = open_dev_gmc()
    psp = PSP(dev, gmc=gmc, timeout_s=0.5)
    corrupt(psp, file, name)
    with pytest.raises(PSPError) as e:
        psp.init()
    msg = str(e.value)
    assert not isinstance(e.value, PSPTimeout), msg
    assert psp.staging == "dma" and f"{file} {name} failed" in msg, msg
    if name == "SYS_DRV":
        assert "bootloader" in msg and "C2PMSG_35 = 0x8000000" in msg, msg
    else:
        assert "status 0xffff000f (TEE_ERROR_SECURITY" in msg, msg
    assert any(f"{file} {name}" in str(err) or name in str(err) for err in dev.pci.dev.errors)
    assert gmc.pt.mappings() == [] and dev.mm.in_use() == 0    # the staging buffer was given back
    dev.close()


def test_the_tmr_stays_vram_the_psp_refuses_a_gart_address():
    # SETUP_TMR takes VRAM (psp_tmr_init allocates it in VRAM; virt_phy_addr carries its VRAM address): the
    # simulated PSP refuses a system page there, so only the firmware buffer moved to DMA memory.
    dev, gmc = open_dev_gmc()
    psp = PSP(dev, gmc=gmc)
    psp._alloc_stage()
    psp.bootloader()
    psp.ring_create()
    psp.tmr_size = psp.load_toc()
    psp.load_ip_fw(psp.smu_load())         # the TMR comes after the SMU firmware (pmfw-centralized)
    mc = psp.stage_mc
    with pytest.raises(PSPError, match=r"SETUP_TMR .* failed: status 0xffff0006 \(TEE_ERROR_BAD_PARAMETERS"):
        psp.submit(P.GFX_CMD_ID_SETUP_TMR, "at the staging buffer",
                   cmd_setup_tmr=dict(buf_phy_addr_lo=mc & 0xFFFFFFFF, buf_phy_addr_hi=mc >> 32,
                                      buf_size=psp.tmr_size))
    assert "is not VRAM" in str(dev.pci.dev.errors[-1])
    psp._free_stage()
    dev.close()


class _ShadowBuffer:
    """A non-coherent DMA buffer (as over USB): the view is a shadow, push() ranges are recorded."""
    coherent = False

    def __init__(self, size):
        self.size, self.pushes, self.device = size, [], bytearray(size)
        self._mem = bytearray(size)
        self.view = memoryview(self._mem)

    def push(self, offset=0, size=None):
        size = self.size - offset if size is None else size
        lo, hi = offset // 0x1000 * 0x1000, -(-(offset + size) // 0x1000) * 0x1000
        self.pushes.append((lo, hi))
        self.device[lo:hi] = self._mem[lo:hi]

    def free(self):
        self.freed = True


class _FakeGMC:
    def map_system(self, buf, size=None, *, align=0x1000):
        return type("M", (), {"va": 0x2000_0000_0000, "size": buf.size})()

    def unmap(self, m):
        pass


def test_dma_staging_pushes_only_the_pages_that_changed():
    dev = open_dev()
    buf = _ShadowBuffer(P.PSP_1_MEG)
    dev.pci.alloc_dma = lambda size, readback=False: buf
    psp = PSP(dev, gmc=_FakeGMC())
    psp._alloc_stage()
    a = bytes(range(256)) * 24                      # 6 KiB: pages 0-1
    assert psp._stage(a) == 0x2000_0000_0000
    assert buf.pushes == [(0, P.PSP_1_MEG)]          # the first stage zeroes the whole buffer
    assert bytes(buf.device[:len(a)]) == a and not any(buf.device[len(a):])
    buf.pushes.clear()
    psp._stage(a)
    assert buf.pushes == []                         # the same bytes again: nothing sent
    b = bytearray(a)
    b[5000] ^= 1
    psp._stage(bytes(b))
    assert buf.pushes == [(0x1000, 0x2000)]          # one byte of page 1 changed: page 1 only
    buf.pushes.clear()
    c = bytes(b[:100])                              # shorter: the rest of page 0 and page 1 zeroed behind it
    psp._stage(c)
    assert buf.pushes == [(0, 0x2000)]               # adjacent dirty pages: one push
    assert bytes(buf.device[:100]) == c and not any(buf.device[100:])
    buf.pushes.clear()
    d = bytes(0x3000) + b"\x01"                     # pages 0 and 3 differ, 1-2 are zero already
    psp._stage(d)
    assert buf.pushes == [(0, 0x1000), (0x3000, 0x4000)]
    assert bytes(buf.device[:len(d)]) == d and not any(buf.device[len(d):])
    psp._free_stage()
    assert buf.freed
    dev.close()


# -- each upstream step the simulated PSP enforces, shown by a driver that gets it wrong ----------------------

def test_tos_spl_table_staging_the_spl_component_is_refused(monkeypatch):
    """psp_v13_0_bootloader_load_spl stages the KDB (psp->kdb) for PSP_BL__LOAD_TOS_SPL_TABLE on MP0 13."""
    from amdrv.ip import psp as psp_mod
    wrong = tuple(("SPL", "SPL", c) if c == P.PSP_BL__LOAD_TOS_SPL_TABLE else e
                  for e in psp_mod.BOOTLOADER for c in [e[2]])
    monkeypatch.setattr(psp_mod, "BOOTLOADER", wrong)
    dev = open_dev()
    with pytest.raises(PSPError, match=r"bootloader LOAD_TOS_SPL_TABLE of psp_13_0_0_sos.bin SPL failed"):
        PSP(dev, timeout_s=0.5).init()
    assert "KDB component this command takes" in str(dev.pci.dev.errors[-1])
    dev.close()


def test_a_driver_that_does_not_wait_for_the_bootloader_fails(monkeypatch):
    """psp_v13_0_wait_for_bootloader before the first command: after power-on C2PMSG_35 is not ready yet."""
    real = PSP._wait

    def no_ready_wait(self, n, done, what, fail=None):
        if what.startswith("the bootloader to be ready"):
            return 0
        return real(self, n, done, what, fail)
    monkeypatch.setattr(PSP, "_wait", no_ready_wait)
    dev = open_dev()
    with pytest.raises(PSPError, match=r"bootloader LOAD_TOS_SPL_TABLE .* failed|KEY_DATABASE"):
        PSP(dev, timeout_s=0.5).init()
    assert any("before the bootloader was ready" in str(e) for e in dev.pci.dev.errors)
    dev.close()


def test_a_driver_that_does_not_poll_for_ring_creation_fails(monkeypatch):
    """psp_v13_0_ring_create: mdelay(20), then wait for bit 31 of C2PMSG_64; the PSP takes time to make it."""
    monkeypatch.setattr(PSP, "_ring_ctrl", lambda self, value, what: self.c2pmsg[64].write(value))
    dev = open_dev()
    with pytest.raises(PSPTimeout, match=r"waiting for LOAD_TOC"):
        PSP(dev, timeout_s=0.2).init()
    assert any("no ring created" in str(e) for e in dev.pci.dev.errors)
    dev.close()


def test_setup_tmr_before_the_smu_firmware_is_refused(monkeypatch):
    """amdgpu_psp.c psp_hw_start: pmfw_centralized_cstate_management (MP0 13.0.0) loads the SMU before the TMR."""
    real_load = PSP.load_ip_fw

    def tmr_first(self, ld):
        if ld.component.name == "SMU":
            self.setup_tmr()
        return real_load(self, ld)
    monkeypatch.setattr(PSP, "load_ip_fw", tmr_first)
    dev = open_dev()
    with pytest.raises(PSPError, match=r"SETUP_TMR of .* failed: status 0xffff0007 \(TEE_ERROR_BAD_STATE"):
        PSP(dev).init()
    dev.close()


def test_the_fence_wraps_past_zero():
    # Found by tools/fuzz/psp: a fence of 0xFFFFFFFF made the next command's frame fail to pack (a raw
    # ValueError). The u32 wraps to 1, not 0: the cleared fence page holds 0, so 0 would read as done.
    dev = open_dev()
    psp = PSP(dev)
    psp.init()
    psp._fence = 0xFFFFFFFF
    psp.autoload_rlc()              # acknowledged again by a booted PSP
    assert psp._fence == 1 and dev.vram.read32(psp.fence_addr) == 1
    dev.close()
