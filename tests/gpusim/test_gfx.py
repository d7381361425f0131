"""GC 11.0 boot: the RLC autoload the PSP starts, upstream's gfx_v11_0 hw_init waits and MEC/ME/PFP unhalt,
what is refused before the firmware is in, wrong entry points, soft and mode1 resets."""
import importlib.util
import pickle
from pathlib import Path

import pytest

from amdrv import structs
from amdrv.autogen import psp as P
from amdrv.autogen import ucode
from amdrv.chips import by_name
from gpusim import board, fwcheck, gfx as G, psp as PSPM

# The PSP driving helpers of test_psp.py (upstream's psp_v13_0 sequence by hand)
_spec = importlib.util.spec_from_file_location("psp_boot_helpers", Path(__file__).with_name("test_psp.py"))
psp_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(psp_boot)


class GC:
    """Register access as the driver does it: every read is a BAR read, which steps the stepped clock."""

    def __init__(self, dev):
        self.dev, self.t = dev, dev.table("GC")

    def r(self, name):
        self.dev.step()
        return self.dev.regs.read(self.dev.reg_addr("GC", name))

    def w(self, name, value):
        self.dev.regs.write(self.dev.reg_addr("GC", name), value)

    def f(self, name, field):
        return self.t[name].decode(self.r(name))[field]

    def update(self, name, **fields):
        self.w(name, self.t[name].encode(self.r(name), **fields))

    def grbm_select(self, me, pipe, queue=0, vmid=0):   # soc21_grbm_select
        self.w("GRBM_GFX_CNTL", self.t["GRBM_GFX_CNTL"].encode(PIPEID=pipe, MEID=me, VMID=vmid, QUEUEID=queue))


def wait_for_rlc_autoload_complete(gc, tries=100):
    """gfx_v11_0_wait_for_rlc_autoload_complete; the number of polls it took, None on timeout."""
    for i in range(tries):
        cp_status = gc.r("CP_STAT")
        bootload = gc.r("RLC_RLCS_BOOTLOAD_STATUS")
        if cp_status == 0 and gc.t["RLC_RLCS_BOOTLOAD_STATUS"].decode(bootload)["BOOTLOAD_COMPLETE"] == 1:
            return i
    return None


def start_addrs(fw, part):
    """(PRGRM_CNTR_START, _HI) as gfx_v11_0_config_gfx_rs64 computes them, from the generated header layout."""
    hdr = structs.get(ucode, "gfx_firmware_header_v2_0").unpack_from(fw._file(part)[1])
    lo, hi = hdr.ucode_start_addr_lo, hdr.ucode_start_addr_hi
    return (lo >> 2 | hi << 30) & 0xFFFFFFFF, hi >> 2


def config_gfx_rs64(gc, fw):
    """gfx_v11_0_config_gfx_rs64: per-pipe start addresses, then a pulse of the pipe resets."""
    for part, me, pipes, reg, cntl, reset in (
            ("pfp", 0, 2, "CP_PFP_PRGRM_CNTR_START", "CP_ME_CNTL", "PFP_PIPE{}_RESET"),
            ("me", 0, 2, "CP_ME_PRGRM_CNTR_START", "CP_ME_CNTL", "ME_PIPE{}_RESET"),
            ("mec", 1, 4, "CP_MEC_RS64_PRGRM_CNTR_START", "CP_MEC_RS64_CNTL", "MEC_PIPE{}_RESET")):
        start, start_hi = start_addrs(fw, part)
        for pipe in range(pipes):
            gc.grbm_select(me, pipe)
            gc.w(reg, start)
            gc.w(reg + "_HI", start_hi)
        gc.grbm_select(0, 0)
        gc.update(cntl, **{reset.format(p): 1 for p in range(pipes)})
        gc.update(cntl, **{reset.format(p): 0 for p in range(pipes)})


def cp_compute_enable(gc, enable):
    """gfx_v11_0_cp_compute_enable, RS64 branch."""
    on, off = int(enable), int(not enable)
    gc.update("CP_MEC_RS64_CNTL", MEC_INVALIDATE_ICACHE=off, MEC_HALT=off,
              **{f"MEC_PIPE{p}_RESET": off for p in range(4)}, **{f"MEC_PIPE{p}_ACTIVE": on for p in range(4)})
    if enable:
        udelay(gc, 50)


def udelay(gc, us):
    """Upstream's udelay: the simulated clock moves one step (1 us) per register read."""
    for _ in range(us):
        gc.r("GRBM_STATUS")


def cp_gfx_enable(gc, enable, tries=50):
    """gfx_v11_0_cp_gfx_enable: (un)halt ME and PFP, then wait for CP_STAT == 0."""
    gc.update("CP_ME_CNTL", ME_HALT=int(not enable), PFP_HALT=int(not enable))
    return any(gc.r("CP_STAT") == 0 for _ in range(tries))


def psp_load_everything(dev, fw, autoload=True):
    """psp_hw_start + psp_load_non_psp_fw (+ AUTOLOAD_RLC after RLC_G) with the real firmware."""
    drv = psp_boot.Driver(dev)
    drv.boot_sos(fw)
    assert drv.ring_create() == 0x80000000
    drv.toc_and_tmr(fw)
    for t in psp_boot.UPSTREAM_ORDER:
        if t in fw.ip_fw_pieces():
            assert drv.load(t, fw.ip_fw(t)) == 0, fwcheck.fw_type_name(t)
    if autoload:
        assert drv.submit(P.GFX_CMD_ID_AUTOLOAD_RLC)[0] == 0
    return drv


@pytest.fixture(scope="module")
def firmware(debian_firmware):
    def pinned(chip):
        return fwcheck.PinnedFirmware(by_name(chip), lambda n: (debian_firmware / n).read_bytes())
    return {c: pinned(c) for c in ("navi31", "navi33")}


def build(firmware, chip="navi31"):
    dev = board.build(chip, vram_size=512 << 20)
    dev.blocks["PSP"].firmware = firmware[chip]
    return dev, GC(dev), firmware[chip]


def test_power_on_everything_halted(firmware):
    dev, gc, _ = build(firmware)
    g = dev.blocks["GFX"]
    # the power-on values of gc_11_0_0_default.h: RLC_CNTL 0x1 (RLC_ENABLE_F32 reads 1 before anything
    # ran), GFX_IMU_CORE_CTRL 0x9, GFX_IMU_GFX_RESET_CTRL 0x10, CP_MEC_RS64_CNTL 0x40000000 (halted,
    # pipes not in reset), CP_ME_CNTL 0x15000000
    assert gc.r("RLC_RLCS_BOOTLOAD_STATUS") == 0 and gc.r("RLC_CNTL") == 0x1
    assert gc.r("GFX_IMU_CORE_CTRL") == 0x9 and gc.r("GFX_IMU_GFX_RESET_CTRL") == 0x10
    assert gc.r("CP_MEC_RS64_CNTL") == 0x40000000 and gc.r("CP_ME_CNTL") == 0x15000000
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 1
    assert gc.f("CP_ME_CNTL", "ME_HALT") == 1 and gc.f("CP_ME_CNTL", "PFP_HALT") == 1
    assert gc.r("CP_STAT") == 0 and gc.f("GRBM_STATUS", "GUI_ACTIVE") == 0
    assert not g.rlc_autoload_complete and not g.mec_running
    assert wait_for_rlc_autoload_complete(gc, tries=20) is None     # nothing has started it


def test_unhalt_before_any_firmware_is_refused(firmware):
    dev, gc, fw = build(firmware)
    config_gfx_rs64(gc, fw)
    cp_compute_enable(gc, True)
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 1                 # stays halted
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_PIPE0_ACTIVE") == 1         # the rest of the write lands
    assert not dev.blocks["GFX"].mec_running
    msg = str(dev.errors[-1])
    assert "MEC stays halted" in msg and "RLC autoload has not completed" in msg and "RS64_MEC_P3_STACK" in msg
    cp_gfx_enable(gc, True)
    assert gc.f("CP_ME_CNTL", "ME_HALT") == 1 and gc.f("CP_ME_CNTL", "PFP_HALT") == 1
    assert not dev.blocks["GFX"].pipes_running("ME")


def test_unhalt_with_firmware_loaded_but_no_autoload_is_refused(firmware):
    dev, gc, fw = build(firmware)
    psp_load_everything(dev, fw, autoload=False)
    dev.errors.clear()
    config_gfx_rs64(gc, fw)
    cp_compute_enable(gc, True)
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 1 and not dev.blocks["GFX"].mec_running
    assert "RLC autoload has not completed" in str(dev.errors[-1])
    assert "PSP has not loaded" not in str(dev.errors[-1])


def test_autoload_without_the_smu_firmware_never_completes(firmware):
    dev, gc, fw = build(firmware)
    drv = psp_boot.Driver(dev)
    drv.boot_sos(fw)
    drv.ring_create()
    toc = fw.sos_component(psp_boot.U.PSP_FW_TYPE_PSP_TOC)
    dev.vram.write(psp_boot.STAGE, toc)
    mc = psp_boot.FB_BASE + psp_boot.STAGE
    assert drv.submit(P.GFX_CMD_ID_LOAD_TOC, mc & 0xFFFFFFFF, mc >> 32, len(toc))[0] == 0
    # The PSP refuses SETUP_TMR before the SMU firmware (pmfw-centralized MP0 13.0.0, tests/gpusim/test_psp.py);
    # the TMR is put in place behind its back here to reach the RLC's own rule.
    assert drv.setup_tmr(psp_boot.TMR, 0x1300000) == PSPM.TEE_ERROR_BAD_STATE
    dev.blocks["PSP"].tmr = (psp_boot.FB_BASE + psp_boot.TMR, 0x1300000)
    for t in psp_boot.UPSTREAM_ORDER:
        assert drv.load(t, fw.ip_fw(t)) == 0
    assert drv.submit(P.GFX_CMD_ID_AUTOLOAD_RLC)[0] == 0
    assert wait_for_rlc_autoload_complete(gc, tries=50) is None
    assert gc.r("CP_STAT") != 0 and not dev.blocks["GFX"].rlc_autoload_complete
    assert "no SMU firmware" in str(dev.errors[-1])


@pytest.mark.parametrize("chip", ["navi31", "navi33"])
def test_upstream_hw_init(firmware, chip):
    dev, gc, fw = build(firmware, chip)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    # the RLC is at work: CP and GRBM read busy until it is done
    assert gc.r("CP_STAT") != 0 and gc.f("GRBM_STATUS", "GUI_ACTIVE") == 1
    assert gc.r("GFX_IMU_GFX_RESET_CTRL") & 0x1F == 0x1F and gc.f("GFX_IMU_CORE_CTRL", "CRESET") == 0
    polls = wait_for_rlc_autoload_complete(gc)
    assert polls is not None and polls > 0
    assert g.rlc_autoload_complete and dev.blocks["PSP"].rlc_autoload_complete
    assert gc.f("RLC_CNTL", "RLC_ENABLE_F32") == 1
    assert gc.f("GRBM_STATUS", "GUI_ACTIVE") == 0                    # gfx_v11_0_wait_for_idle
    config_gfx_rs64(gc, fw)
    cp_compute_enable(gc, True)
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 0
    assert g.mec_running and g.mec_pipes == {0, 1, 2, 3}
    assert cp_gfx_enable(gc, True)
    assert g.pipes_running("ME") == {0, 1} and g.pipes_running("PFP") == {0, 1}
    assert gc.r("CP_STAT") == 0 and gc.f("GRBM_STATUS", "GUI_ACTIVE") == 0
    assert dev.errors == []
    # the state survives a save/restore of the device
    again = pickle.loads(pickle.dumps(dev))
    assert again.blocks["GFX"].mec_pipes == {0, 1, 2, 3}
    # hw_fini: gfx_v11_0_cp_enable(false)
    assert cp_gfx_enable(gc, False)
    cp_compute_enable(gc, False)
    assert not g.mec_running and not g.pipes_running("ME") and dev.errors == []
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 1


def test_start_address_is_banked_per_pipe(firmware):
    dev, gc, fw = build(firmware)
    for pipe in range(4):
        gc.grbm_select(1, pipe)
        gc.w("CP_MEC_RS64_PRGRM_CNTR_START", 0x100 + pipe)
    gc.grbm_select(1, 2)
    assert gc.r("CP_MEC_RS64_PRGRM_CNTR_START") == 0x102
    gc.grbm_select(0, 2)                                             # ME 0 has its own bank
    assert gc.r("CP_MEC_RS64_PRGRM_CNTR_START") == 0
    assert dev.blocks["GFX"].banked("CP_MEC_RS64_PRGRM_CNTR_START", 1, 3) == 0x103


def test_mec_without_its_start_address_hangs(firmware):
    dev, gc, fw = build(firmware)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    assert wait_for_rlc_autoload_complete(gc) is not None
    start, start_hi = start_addrs(fw, "mec")
    assert (start, start_hi) == g.entry("MEC") and start != 0     # the simulator's reading agrees
    for pipe in (0, 1, 3):                                           # pipe 2 forgotten
        gc.grbm_select(1, pipe)
        gc.w("CP_MEC_RS64_PRGRM_CNTR_START", start)
        gc.w("CP_MEC_RS64_PRGRM_CNTR_START_HI", start_hi)
    gc.grbm_select(0, 0)
    cp_compute_enable(gc, True)
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 0                # unhalted, but pipe 2 runs garbage
    assert g.mec_pipes == {0, 1, 3} and g.hung["MEC"] == {2}
    assert "MEC pipe 2" in str(dev.errors[-1]) and "entry point" in str(dev.errors[-1])
    assert gc.r("CP_STAT") != 0 and gc.f("GRBM_STATUS", "GUI_ACTIVE") == 1   # a hung engine never idles
    # halting puts the pipes in reset, which clears the hang; with the address programmed it runs
    cp_compute_enable(gc, False)
    assert not g.hung["MEC"] and gc.r("CP_STAT") == 0
    gc.grbm_select(1, 2)
    gc.w("CP_MEC_RS64_PRGRM_CNTR_START", start)
    gc.w("CP_MEC_RS64_PRGRM_CNTR_START_HI", start_hi)
    gc.grbm_select(0, 0)
    cp_compute_enable(gc, True)
    assert g.mec_pipes == {0, 1, 2, 3}


def test_cache_invalidation_completes(firmware):
    dev, gc, _ = build(firmware)
    for reg, trigger, done in (("CP_CPC_IC_OP_CNTL", "INVALIDATE_CACHE", "INVALIDATE_CACHE_COMPLETE"),
                               ("CP_MEC_DC_OP_CNTL", "INVALIDATE_DCACHE", "INVALIDATE_DCACHE_COMPLETE")):
        gc.update(reg, **{trigger: 1})
        assert any(gc.f(reg, done) == 1 for _ in range(5)), reg
        assert gc.f(reg, trigger) == 0


def test_upstream_soft_reset(firmware):
    dev, gc, fw = build(firmware)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    wait_for_rlc_autoload_complete(gc)
    config_gfx_rs64(gc, fw)
    cp_compute_enable(gc, True)
    cp_gfx_enable(gc, True)
    assert g.mec_running
    # gfx_v11_0_soft_reset
    gc.w("CP_VMID_RESET", 0xFFFFFFFE)
    for _ in range(3):
        gc.r("CP_VMID_RESET")
    cp_bits = dict(SOFT_RESET_CP=1, SOFT_RESET_GFX=1, SOFT_RESET_CPF=1, SOFT_RESET_CPC=1, SOFT_RESET_CPG=1)
    gc.update("GRBM_SOFT_RESET", **cp_bits)
    assert not g.mec_running and not g.pipes_running("ME")          # held in reset
    gc.update("GRBM_SOFT_RESET", **{k: 0 for k in cp_bits})
    gc.update("CP_SOFT_RESET_CNTL", CMP_HQD_REG_RESET=1)
    gc.w("CP_ME_CNTL", 0)
    gc.w("CP_MEC_RS64_CNTL", 0)                                      # unhalted, no pipe active
    assert not g.mec_running and g.pipes_running("ME") == {0, 1}
    assert any(gc.r("CP_VMID_RESET") == 0 for _ in range(10))
    cp_compute_enable(gc, True)                                      # gfx_v11_0_cp_resume
    assert g.mec_pipes == {0, 1, 2, 3} and dev.errors == []


def test_soft_reset_held_keeps_pipes_stopped(firmware):
    dev, gc, fw = build(firmware)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    wait_for_rlc_autoload_complete(gc)
    config_gfx_rs64(gc, fw)
    gc.update("GRBM_SOFT_RESET", SOFT_RESET_CPC=1)
    cp_compute_enable(gc, True)
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 0 and not g.mec_running
    gc.update("GRBM_SOFT_RESET", SOFT_RESET_CPC=0)
    assert g.mec_pipes == frozenset() and gc.r("CP_STAT")             # starting: not at once
    udelay(gc, 50)
    assert g.mec_pipes == {0, 1, 2, 3}


def test_mode1_reset_returns_to_halted_and_unloaded(firmware):
    dev, gc, fw = build(firmware)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    wait_for_rlc_autoload_complete(gc)
    config_gfx_rs64(gc, fw)
    cp_compute_enable(gc, True)
    assert g.mec_running
    board.mode1_reset(dev)
    assert not g.mec_running and not g.rlc_autoload_complete and not dev.blocks["PSP"].loaded
    assert gc.r("RLC_RLCS_BOOTLOAD_STATUS") == 0 and gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 1
    gc.grbm_select(1, 0)
    assert gc.r("CP_MEC_RS64_PRGRM_CNTR_START") == 0
    gc.grbm_select(0, 0)
    config_gfx_rs64(gc, fw)
    cp_compute_enable(gc, True)
    assert gc.f("CP_MEC_RS64_CNTL", "MEC_HALT") == 1 and "RLC autoload" in str(dev.errors[-1])


def test_entry_point_offsets_match_the_header_layout():
    layout = structs.get(ucode, "gfx_firmware_header_v2_0")
    assert (layout.offset("ucode_start_addr_lo"), layout.offset("ucode_start_addr_hi")) == \
        (G._START_LO, G._START_HI)


def test_mec_pipes_are_not_ready_at_once_after_the_unhalt(firmware):
    """gfx_v11_0_cp_compute_enable waits udelay(50) after unhalting the MEC: until its pipes are up,
    CP_STAT reads busy and HQD register writes are lost (gpusim.gfx MEC_START_STEPS)."""
    dev, gc, fw = build(firmware)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    wait_for_rlc_autoload_complete(gc)
    config_gfx_rs64(gc, fw)
    gc.update("CP_MEC_RS64_CNTL", MEC_INVALIDATE_ICACHE=0, MEC_HALT=0, **{f"MEC_PIPE{p}_RESET": 0 for p in range(4)},
              **{f"MEC_PIPE{p}_ACTIVE": 1 for p in range(4)})
    assert g.mec_pipes == frozenset() and gc.r("CP_STAT")
    gc.grbm_select(1, 0, queue=0)
    gc.w("CP_HQD_PQ_BASE", 0x1234)
    assert gc.r("CP_HQD_PQ_BASE") == 0                                # lost
    assert any("still starting" in e.message for e in dev.errors)
    dev.errors.clear()
    steps = next(i for i in range(100) if gc.r("CP_STAT") == 0)
    assert 3 <= steps <= 50                                           # within upstream's 50 us
    gc.w("CP_HQD_PQ_BASE", 0x1234)
    assert gc.r("CP_HQD_PQ_BASE") == 0x1234 and g.mec_pipes == {0, 1, 2, 3} and not dev.errors
    gc.grbm_select(0, 0)


def test_rlc_autoload_takes_longer_than_the_boot_reads_before_its_poll(firmware):
    """Issue 17: the autoload must not be complete before the driver could look (AUTOLOAD_STEPS)."""
    from gpusim.gfx import AUTOLOAD_MIN_STEPS
    dev, gc, fw = build(firmware)
    psp_load_everything(dev, fw)
    start = dev.steps
    polls = wait_for_rlc_autoload_complete(gc)
    assert polls is not None and dev.steps - start >= AUTOLOAD_MIN_STEPS and polls >= 10



def test_me_and_pfp_unhalted_with_their_pipes_held_in_reset_or_disabled_run_nothing(firmware):
    """What tools/mutate.py's reg-flip:GC.CP_ME_CNTL leaves after recover() (an EXPECTED survivor): the driver
    keeps the graphics ME/PFP halted (it gives them no start address), and the inverted writes unhalt them with
    both pipes disabled (ME/PFP_PIPE0/1_DISABLE, 0xEBC3FFFF), then held in reset (0xEBFFFFFF): a pipe runs only
    unhalted, out of reset and enabled (gfx_v11_0_config_gfx_rs64 starts the pipes by releasing their resets),
    so nothing starts; upstream's CP_ME_CNTL = 0 starts them at their PRGRM_CNTR_START, here 0: a hang."""
    dev, gc, fw = build(firmware)
    g = dev.blocks["GFX"]
    psp_load_everything(dev, fw)
    assert wait_for_rlc_autoload_complete(gc) is not None
    for value in (~0x143C0000 & 0xFFFFFFFF, ~0x14000000 & 0xFFFFFFFF):   # recover()'s two writes, inverted
        gc.w("CP_ME_CNTL", value)
        assert gc.f("CP_ME_CNTL", "ME_HALT") == 0 and gc.f("CP_ME_CNTL", "PFP_HALT") == 0
        assert not g.pipes_running("ME") and not g.pipes_running("PFP") and gc.r("CP_STAT") == 0
    assert dev.errors == []
    gc.w("CP_ME_CNTL", 0)
    assert gc.r("CP_STAT") and "runs garbage" in dev.errors[-1].message
