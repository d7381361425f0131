"""PSP 13.0.0: the upstream boot sequence with the real payloads, and what the PSP refuses."""
import pickle
import struct

import pytest

from amdrv.autogen import psp as P
from amdrv.autogen import ucode as U
from amdrv.chips import NAVI31
from gpusim import board, fwcheck, psp as PSPM
from gpusim.device import Block
from gpusim.gmc import FB_BASE

FW_BUF, RING, CMD, FENCE, TMR, STAGE = 0x100000, 0x200000, 0x201000, 0x202000, 0x1000000, 0x400000


@pytest.fixture(scope="module")
def firmware(debian_firmware):
    return fwcheck.PinnedFirmware(NAVI31, lambda n: (debian_firmware / n).read_bytes())


class FakeSMU(Block):
    name = "SMU"

    def reset(self):
        self.loads = 0

    def firmware_loaded(self, version=None):
        self.loads += 1
        self.version = version


class Driver:
    """Upstream's sequence (psp_v13_0.c, amdgpu_psp.c) by hand, with every buffer in VRAM (FB aperture)."""

    def __init__(self, dev):
        self.dev, self.fence = dev, 0

    def w(self, reg, v):
        self.dev.regs.write(self.dev.reg_addr("MP0", reg), v)

    def r(self, reg):
        self.dev.step()    # a BAR read in the stepped mode
        return self.dev.regs.read(self.dev.reg_addr("MP0", reg))

    def wait(self, reg, mask, value, tries=100):
        for _ in range(tries):
            v = self.r(reg)
            if v & mask == value:
                return v
        return None

    def bootloader(self, cmd, data):
        assert self.wait("MP0_SMN_C2PMSG_35", 0x80000000, 0x80000000) is not None
        self.dev.vram.write(FW_BUF, bytes(1 << 20))            # psp_copy_fw: memset then memcpy
        self.dev.vram.write(FW_BUF, data)
        self.w("MP0_SMN_C2PMSG_36", (FB_BASE + FW_BUF) >> 20)
        self.w("MP0_SMN_C2PMSG_35", cmd)
        for _ in range(100):
            v = self.r("MP0_SMN_C2PMSG_35")
            if v & 0x80000000:
                return v
        raise AssertionError("bootloader never answered")

    def boot_sos(self, fw, spl=U.PSP_FW_TYPE_PSP_KDB):
        c = fw.sos_component
        for cmd, comp in ((P.PSP_BL__LOAD_KEY_DATABASE, c(U.PSP_FW_TYPE_PSP_KDB)),
                          (P.PSP_BL__LOAD_TOS_SPL_TABLE, c(spl)),
                          (P.PSP_BL__LOAD_SYSDRV, c(U.PSP_FW_TYPE_PSP_SYS_DRV)),
                          (P.PSP_BL__LOAD_SOSDRV, c(U.PSP_FW_TYPE_PSP_SOS))):
            assert self.bootloader(cmd, comp) == 0x80000000, cmd
        assert self.wait("MP0_SMN_C2PMSG_81", 0xFFFFFFFF, 0, tries=1) is None   # alive: non-zero

    def ring_create(self):
        if self.wait("MP0_SMN_C2PMSG_64", 0x80000000, 0x80000000) is None:
            return None
        self.w("MP0_SMN_C2PMSG_69", (FB_BASE + RING) & 0xFFFFFFFF)
        self.w("MP0_SMN_C2PMSG_70", (FB_BASE + RING) >> 32)
        self.w("MP0_SMN_C2PMSG_71", 0x1000)
        self.w("MP0_SMN_C2PMSG_64", P.PSP_RING_TYPE__KM << 16)
        return self.wait("MP0_SMN_C2PMSG_64", 0x8000FFFF, 0x80000000)

    def submit(self, cmd_id, *fields):
        buf = bytearray(1024)
        struct.pack_into("<I", buf, 8, cmd_id)
        struct.pack_into(f"<{len(fields)}I", buf, 28, *fields)
        self.dev.vram.write(CMD, bytes(buf))
        self.fence += 1
        wptr = self.r("MP0_SMN_C2PMSG_67")
        frame = struct.pack("<6I", (FB_BASE + CMD) & 0xFFFFFFFF, (FB_BASE + CMD) >> 32, 0,
                            (FB_BASE + FENCE) & 0xFFFFFFFF, (FB_BASE + FENCE) >> 32, self.fence)
        self.dev.vram.write(RING + (wptr % 1024) * 4, frame.ljust(64, b"\0"))
        self.w("MP0_SMN_C2PMSG_67", (wptr + 16) % 1024)
        assert self.dev.vram.read32(FENCE) == self.fence   # polling memory does not step the clock
        status, _, lo, hi, tmr_size = struct.unpack("<5I", self.dev.vram.read(CMD + 0x360, 20))
        return status, tmr_size

    def load(self, fw_type, data, declared_size=None):
        self.dev.vram.write(STAGE, data)
        mc = FB_BASE + STAGE
        return self.submit(P.GFX_CMD_ID_LOAD_IP_FW, mc & 0xFFFFFFFF, mc >> 32,
                           len(data) if declared_size is None else declared_size, fw_type)[0]

    def toc_and_tmr(self, fw):
        toc = fw.sos_component(U.PSP_FW_TYPE_PSP_TOC)
        self.dev.vram.write(STAGE, toc)
        status, tmr_size = self.submit(P.GFX_CMD_ID_LOAD_TOC, (FB_BASE + STAGE) & 0xFFFFFFFF,
                                       (FB_BASE + STAGE) >> 32, len(toc))
        assert (status, tmr_size) == (0, 0x1300000)
        assert self.load(P.GFX_FW_TYPE_SMU, fw.ip_fw(P.GFX_FW_TYPE_SMU)) == 0   # pmfw-centralized: before TMR
        assert self.setup_tmr(TMR, tmr_size) == 0

    def setup_tmr(self, vram_off, size):
        mc = FB_BASE + vram_off
        return self.submit(P.GFX_CMD_ID_SETUP_TMR, mc & 0xFFFFFFFF, mc >> 32, size, 2, vram_off, 0)[0]


# AMDGPU_UCODE_ID order, as psp_load_non_psp_fw walks adev->firmware.ucode[]
UPSTREAM_ORDER = [getattr(P, "GFX_FW_TYPE_" + n) for n in (
    "SDMA_UCODE_TH0", "SDMA_UCODE_TH1", "RS64_PFP", "RS64_ME", "RS64_MEC", "RS64_PFP_P0_STACK",
    "RS64_PFP_P1_STACK", "RS64_ME_P0_STACK", "RS64_ME_P1_STACK", "RS64_MEC_P0_STACK", "RS64_MEC_P1_STACK",
    "RS64_MEC_P2_STACK", "RS64_MEC_P3_STACK", "CP_MES", "MES_STACK", "CP_MES_KIQ", "MES_KIQ_STACK", "IMU_I",
    "IMU_D", "RLC_RESTORE_LIST_GPM_MEM", "RLC_RESTORE_LIST_SRM_MEM", "RLC_IRAM", "RLC_DRAM_BOOT", "RLC_P",
    "RLC_V", "RLC_G")]


@pytest.fixture
def sim(firmware):
    dev = board.build("navi31", vram_size=512 << 20)
    dev.add(FakeSMU(dev))
    dev.blocks["PSP"].firmware = firmware
    return dev, Driver(dev), firmware


def test_full_upstream_boot(sim):
    dev, drv, fw = sim
    psp = dev.blocks["PSP"]
    assert drv.r("MP0_SMN_C2PMSG_81") == 0 and not psp.sos_alive
    drv.boot_sos(fw)
    assert drv.ring_create() == 0x80000000
    drv.toc_and_tmr(fw)
    assert dev.blocks["SMU"].loads == 1
    assert dev.blocks["SMU"].version == 0x4E4B00    # smu_13_0_0.bin 78.75.0, as amdgpu logs it
    assert set(UPSTREAM_ORDER) == psp.autoload_required()
    for t in UPSTREAM_ORDER:
        assert drv.load(t, fw.ip_fw(t)) == 0, fwcheck.fw_type_name(t)
    assert drv.submit(P.GFX_CMD_ID_AUTOLOAD_RLC)[0] == 0
    assert not psp.rlc_autoload_complete            # takes some clock steps
    dev.step(PSPM.AUTOLOAD_STEPS)
    assert psp.rlc_autoload_complete and psp.is_loaded(P.GFX_FW_TYPE_RLC_G)
    # psp_rl_load: the register list from the sos package
    assert drv.load(P.GFX_FW_TYPE_REG_LIST, fw.sos_component(U.PSP_FW_TYPE_PSP_RL)) == 0
    assert dev.field("GC", "RLC_RLCS_BOOTLOAD_STATUS", "BOOTLOAD_COMPLETE") == 1
    assert dev.errors == []
    # TAs are not modeled: answered, not executed
    assert drv.submit(P.GFX_CMD_ID_LOAD_ASD)[0] == PSPM.TEE_ERROR_NOT_SUPPORTED
    # the state survives a save/restore of the device (firmware is found again through the store)
    again = pickle.loads(pickle.dumps(dev))
    assert again.blocks["PSP"].sos_alive and again.blocks["PSP"].rlc_autoload_complete


def test_spl_command_takes_the_kdb_not_the_spl_component(sim):
    """psp_v13_0_bootloader_load_spl (6.1 and later MP0 13 code) stages psp->kdb for TOS_SPL_TABLE."""
    dev, drv, fw = sim
    assert drv.bootloader(P.PSP_BL__LOAD_KEY_DATABASE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == 0x80000000
    spl = fw.sos_component(U.PSP_FW_TYPE_PSP_SPL)
    assert drv.bootloader(P.PSP_BL__LOAD_TOS_SPL_TABLE, spl) == 0x80000000 | PSPM.BL_ERR_PAYLOAD
    assert "KDB component this command takes" in str(dev.errors[-1])
    assert drv.bootloader(P.PSP_BL__LOAD_TOS_SPL_TABLE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == 0x80000000


def test_bootloader_is_not_ready_at_power_on_and_a_command_then_is_lost(sim):
    """psp_v13_0_wait_for_bootloader: C2PMSG_35 reads 0x80000000 only once the bootloader runs."""
    dev, drv, fw = sim
    assert drv.r("MP0_SMN_C2PMSG_35") == 0
    dev.vram.write(FW_BUF, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB))
    drv.w("MP0_SMN_C2PMSG_36", (FB_BASE + FW_BUF) >> 20)
    drv.w("MP0_SMN_C2PMSG_35", P.PSP_BL__LOAD_KEY_DATABASE)
    assert drv.wait("MP0_SMN_C2PMSG_35", 0xFFFFFFFF, 0x80000000) == 0x80000000   # the ready value, not an answer
    assert "before the bootloader was ready" in str(dev.errors[-1])
    assert dev.blocks["PSP"].bl_done == []
    # the driver that goes on as if the KDB were in sees the next step refused
    assert drv.bootloader(P.PSP_BL__LOAD_TOS_SPL_TABLE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == \
        0x80000000 | PSPM.BL_ERR_ORDER


def test_bootloader_ready_delay_is_seeded_and_deterministic(firmware):
    def ready_after():
        dev = board.build("navi31", vram_size=512 << 20)
        n = 0
        while Driver(dev).r("MP0_SMN_C2PMSG_35") != 0x80000000:
            n += 1
        return n
    first = ready_after()
    assert PSPM.BL_READY_STEPS[0] - 1 <= first <= PSPM.BL_READY_STEPS[1] and ready_after() == first


def test_ring_creation_takes_time(sim):
    """psp_v13_0_ring_create: mdelay(20), then polls C2PMSG_64 bit 31; one read right away sees it clear."""
    dev, drv, fw = sim
    drv.boot_sos(fw)
    assert drv.wait("MP0_SMN_C2PMSG_64", 0x80000000, 0x80000000) is not None
    drv.w("MP0_SMN_C2PMSG_69", (FB_BASE + RING) & 0xFFFFFFFF)
    drv.w("MP0_SMN_C2PMSG_70", (FB_BASE + RING) >> 32)
    drv.w("MP0_SMN_C2PMSG_71", 0x1000)
    drv.w("MP0_SMN_C2PMSG_64", P.PSP_RING_TYPE__KM << 16)
    assert not drv.r("MP0_SMN_C2PMSG_64") & 0x80000000
    assert dev.blocks["PSP"].ring is None
    assert drv.wait("MP0_SMN_C2PMSG_64", 0x8000FFFF, 0x80000000) is not None
    assert dev.blocks["PSP"].ring is not None
    drv.w("MP0_SMN_C2PMSG_64", P.GFX_CTRL_CMD_ID_DESTROY_RINGS)      # psp_v13_0_ring_stop: the same
    assert not drv.r("MP0_SMN_C2PMSG_64") & 0x80000000 and dev.blocks["PSP"].ring is not None
    assert drv.wait("MP0_SMN_C2PMSG_64", 0x8000FFFF, 0x80000000) is not None
    assert dev.blocks["PSP"].ring is None


def test_setup_tmr_only_after_the_smu_firmware(sim):
    """amdgpu_psp.c psp_hw_start: with pmfw_centralized_cstate_management (MP0 13.0.0/13.0.7) the SMU
    firmware is loaded before SETUP_TMR."""
    dev, drv, fw = sim
    drv.boot_sos(fw)
    assert drv.ring_create() == 0x80000000
    toc = fw.sos_component(U.PSP_FW_TYPE_PSP_TOC)
    dev.vram.write(STAGE, toc)
    assert drv.submit(P.GFX_CMD_ID_LOAD_TOC, (FB_BASE + STAGE) & 0xFFFFFFFF, (FB_BASE + STAGE) >> 32,
                      len(toc))[0] == 0
    assert drv.setup_tmr(TMR, 0x1300000) == PSPM.TEE_ERROR_BAD_STATE
    assert "before LOAD_IP_FW of the SMU firmware" in str(dev.errors[-1])
    assert drv.load(P.GFX_FW_TYPE_SMU, fw.ip_fw(P.GFX_FW_TYPE_SMU)) == 0
    assert drv.setup_tmr(TMR, 0x1300000) == 0


def test_bootloader_refuses_a_flipped_byte(sim):
    dev, drv, fw = sim
    assert drv.bootloader(P.PSP_BL__LOAD_KEY_DATABASE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == 0x80000000
    assert drv.bootloader(P.PSP_BL__LOAD_TOS_SPL_TABLE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == 0x80000000
    sys_drv = bytearray(fw.sos_component(U.PSP_FW_TYPE_PSP_SYS_DRV))
    sys_drv[1000] ^= 0x40
    assert drv.bootloader(P.PSP_BL__LOAD_SYSDRV, bytes(sys_drv)) == 0x80000000 | PSPM.BL_ERR_PAYLOAD
    assert "SYS_DRV" in str(dev.errors[-1])
    truncated = fw.sos_component(U.PSP_FW_TYPE_PSP_SYS_DRV)[:-16]
    assert drv.bootloader(P.PSP_BL__LOAD_SYSDRV, truncated) == 0x80000000 | PSPM.BL_ERR_PAYLOAD
    assert not dev.blocks["PSP"].sos_alive


def test_bootloader_order(sim):
    dev, drv, fw = sim
    sys_drv = fw.sos_component(U.PSP_FW_TYPE_PSP_SYS_DRV)
    assert drv.bootloader(P.PSP_BL__LOAD_SYSDRV, sys_drv) == 0x80000000 | PSPM.BL_ERR_ORDER
    assert "expects PSP_BL__LOAD_KEY_DATABASE" in str(dev.errors[-1])
    assert drv.bootloader(0x770000, b"") == 0x80000000 | PSPM.BL_ERR_COMMAND
    drv_ok = Driver(dev)
    assert drv_ok.bootloader(P.PSP_BL__LOAD_KEY_DATABASE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == 0x80000000
    # sOS without the SPL table and sys driver
    assert drv.bootloader(P.PSP_BL__LOAD_SOSDRV, fw.sos_component(U.PSP_FW_TYPE_PSP_SOS)) == \
        0x80000000 | PSPM.BL_ERR_ORDER
    assert not dev.blocks["PSP"].sos_alive


def test_no_ring_before_sos(sim):
    dev, drv, fw = sim
    assert drv.ring_create() is None                # C2PMSG_64 never says ready
    drv.w("MP0_SMN_C2PMSG_64", P.PSP_RING_TYPE__KM << 16)
    assert drv.wait("MP0_SMN_C2PMSG_64", 0x80000000, 0x80000000) is None
    assert any("no secure OS" in str(e) for e in dev.errors)


def test_load_ip_fw_refusals(sim):
    dev, drv, fw = sim
    drv.boot_sos(fw)
    drv.ring_create()
    mec = fw.ip_fw(P.GFX_FW_TYPE_RS64_MEC)
    toc = fw.sos_component(U.PSP_FW_TYPE_PSP_TOC)
    assert drv.load(P.GFX_FW_TYPE_RS64_MEC, mec) == PSPM.TEE_ERROR_BAD_STATE          # before LOAD_TOC
    assert drv.setup_tmr(TMR, 0x1300000) == PSPM.TEE_ERROR_BAD_STATE                  # before LOAD_TOC
    bad_toc = bytearray(toc)
    bad_toc[5] ^= 1
    dev.vram.write(STAGE, bytes(bad_toc))
    assert drv.submit(P.GFX_CMD_ID_LOAD_TOC, (FB_BASE + STAGE) & 0xFFFFFFFF, (FB_BASE + STAGE) >> 32,
                      len(toc))[0] == PSPM.TEE_ERROR_SECURITY
    dev.vram.write(STAGE, toc)
    assert drv.submit(P.GFX_CMD_ID_LOAD_TOC, (FB_BASE + STAGE) & 0xFFFFFFFF, (FB_BASE + STAGE) >> 32,
                      len(toc))[0] == 0
    assert drv.load(P.GFX_FW_TYPE_RS64_MEC, mec) == PSPM.TEE_ERROR_BAD_STATE          # before SETUP_TMR
    assert drv.load(P.GFX_FW_TYPE_SMU, fw.ip_fw(P.GFX_FW_TYPE_SMU)) == 0              # SMU, then the TMR
    assert drv.setup_tmr(TMR, 0x100000) == PSPM.TEE_ERROR_BAD_PARAMETERS              # too small
    assert drv.setup_tmr(TMR + 0x1000, 0x1300000) == PSPM.TEE_ERROR_BAD_PARAMETERS    # misaligned
    assert drv.setup_tmr(TMR, 0x1300000) == 0
    flipped = bytearray(mec)
    flipped[len(mec) // 2] ^= 0xFF
    assert drv.load(P.GFX_FW_TYPE_RS64_MEC, bytes(flipped)) == PSPM.TEE_ERROR_SECURITY
    assert "RS64_MEC" in str(dev.errors[-1]) and "gc_11_0_0_mec.bin" in str(dev.errors[-1])
    assert drv.load(P.GFX_FW_TYPE_RS64_MEC, mec[:-4]) == PSPM.TEE_ERROR_SECURITY      # truncated
    assert drv.load(P.GFX_FW_TYPE_RS64_MEC, mec, declared_size=len(mec) - 4) == PSPM.TEE_ERROR_SECURITY
    me = fw.ip_fw(P.GFX_FW_TYPE_RS64_ME)
    assert drv.load(P.GFX_FW_TYPE_RS64_PFP, me) == PSPM.TEE_ERROR_SECURITY            # wrong fw type
    assert drv.load(P.GFX_FW_TYPE_VCN, me) == PSPM.TEE_ERROR_NOT_SUPPORTED            # none on this chip
    assert drv.load(P.GFX_FW_TYPE_RS64_MEC, mec) == 0
    assert dev.blocks["PSP"].loaded == {P.GFX_FW_TYPE_SMU: 1, P.GFX_FW_TYPE_RS64_MEC: 1}


def test_a_new_ring_continues_at_the_write_pointer(sim):
    # psp_ring_cmd_submit takes the frame slot from C2PMSG_67; after DESTROY_RINGS and a new INIT (upstream's
    # suspend/resume) the register still holds the old write pointer, so the new ring is read from there.
    dev, drv, fw = sim
    drv.boot_sos(fw)
    drv.ring_create()
    drv.toc_and_tmr(fw)                              # three commands: C2PMSG_67 = 48
    drv.w("MP0_SMN_C2PMSG_64", P.GFX_CTRL_CMD_ID_DESTROY_RINGS)
    assert drv.wait("MP0_SMN_C2PMSG_64", 0x8000FFFF, 0x80000000) is not None
    dev.vram.write(RING, bytes(0x1000))              # a new ring with nothing in the slots before 48
    assert drv.ring_create() == 0x80000000
    assert drv.load(P.GFX_FW_TYPE_RLC_G, fw.ip_fw(P.GFX_FW_TYPE_RLC_G)) == 0
    assert dev.errors == []                          # the empty slots before the write pointer were not run


def test_a_write_pointer_inside_a_frame_runs_the_whole_frames_before_it(sim):
    # Found by tools/fuzz/psp: C2PMSG_67 written 8 dwords into a frame made the ring loop forever (the read
    # pointer moves by whole frames and never met it). Whole frames before it run; the partial one waits.
    dev, drv, fw = sim
    drv.boot_sos(fw)
    drv.ring_create()
    buf = bytearray(1024)
    struct.pack_into("<I", buf, 8, P.GFX_CMD_ID_DESTROY_TMR)
    dev.vram.write(CMD, bytes(buf))
    frame = struct.pack("<6I", (FB_BASE + CMD) & 0xFFFFFFFF, (FB_BASE + CMD) >> 32, 0,
                        (FB_BASE + FENCE) & 0xFFFFFFFF, (FB_BASE + FENCE) >> 32, 7)
    dev.vram.write(RING, frame.ljust(64, b"\0"))
    drv.w("MP0_SMN_C2PMSG_67", 16 + 8)                # one whole frame and half of the next
    assert dev.vram.read32(FENCE) == 7                 # the whole frame ran
    assert dev.blocks["PSP"].rptr == 16                # the partial one was not consumed
    assert any("inside a frame" in e.message for e in dev.errors)


def test_autoload_needs_every_gfx_firmware(sim):
    dev, drv, fw = sim
    drv.boot_sos(fw)
    drv.ring_create()
    drv.toc_and_tmr(fw)
    for t in UPSTREAM_ORDER:
        if t != P.GFX_FW_TYPE_IMU_D:
            assert drv.load(t, fw.ip_fw(t)) == 0
    assert drv.submit(P.GFX_CMD_ID_AUTOLOAD_RLC)[0] == PSPM.TEE_ERROR_BAD_STATE
    assert "IMU_D" in str(dev.errors[-1])
    dev.step(2 * PSPM.AUTOLOAD_STEPS)
    assert not dev.blocks["PSP"].rlc_autoload_complete
    assert drv.load(P.GFX_FW_TYPE_IMU_D, fw.ip_fw(P.GFX_FW_TYPE_IMU_D)) == 0
    assert drv.submit(P.GFX_CMD_ID_AUTOLOAD_RLC)[0] == 0
    dev.step(PSPM.AUTOLOAD_STEPS)
    assert dev.blocks["PSP"].rlc_autoload_complete


def test_navi33_boots_with_its_own_firmware(debian_firmware):
    from amdrv.chips import NAVI33
    fw = fwcheck.PinnedFirmware(NAVI33, lambda n: (debian_firmware / n).read_bytes())
    dev = board.build("navi33", vram_size=512 << 20)
    dev.blocks["PSP"].firmware = fw
    drv = Driver(dev)
    drv.boot_sos(fw)
    assert drv.ring_create() == 0x80000000
    drv.toc_and_tmr(fw)
    assert drv.load(P.GFX_FW_TYPE_RLC_G, fw.ip_fw(P.GFX_FW_TYPE_RLC_G)) == 0
    navi31_rlc = fwcheck.PinnedFirmware(NAVI31, lambda n: (debian_firmware / n).read_bytes())
    assert drv.load(P.GFX_FW_TYPE_RLC_G, navi31_rlc.ip_fw(P.GFX_FW_TYPE_RLC_G)) == PSPM.TEE_ERROR_SECURITY


def test_mode1_reset_returns_to_the_bootloader(sim):
    dev, drv, fw = sim
    drv.boot_sos(fw)
    board.mode1_reset(dev)
    psp = dev.blocks["PSP"]
    assert not psp.sos_alive and drv.r("MP0_SMN_C2PMSG_81") == 0
    assert drv.r("MP0_SMN_C2PMSG_35") == 0                   # the bootloader starts again, not at once
    assert drv.wait("MP0_SMN_C2PMSG_35", 0xFFFFFFFF, 0x80000000) == 0x80000000


def test_firmware_found_through_the_store(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    dev = board.build("navi31", vram_size=512 << 20)
    drv = Driver(dev)
    fw = dev.blocks["PSP"].firmware
    assert drv.bootloader(P.PSP_BL__LOAD_KEY_DATABASE, fw.sos_component(U.PSP_FW_TYPE_PSP_KDB)) == 0x80000000


def test_the_smu_firmware_is_not_loaded_into_a_running_smu(sim):
    """Assumption from psp_load_smu_fw (it never loads PMFW into a live MP1): a second LOAD_IP_FW of the SMU
    firmware while it runs is refused, TEE_ERROR_BAD_STATE, until a reset stops the SMU."""
    dev, drv, fw = sim
    drv.boot_sos(fw)
    drv.ring_create()
    drv.toc_and_tmr(fw)                              # the SMU firmware loaded once
    dev.blocks["SMU"].running = True                 # FakeSMU: what gpusim.smu does once it is loaded
    assert drv.load(P.GFX_FW_TYPE_SMU, fw.ip_fw(P.GFX_FW_TYPE_SMU)) == PSPM.TEE_ERROR_BAD_STATE
    assert "while the SMU firmware runs" in str(dev.errors[-1]) and dev.blocks["SMU"].loads == 1
    dev.blocks["SMU"].running = False
    assert drv.load(P.GFX_FW_TYPE_SMU, fw.ip_fw(P.GFX_FW_TYPE_SMU)) == 0
