"""The AM life cycle on the simulator: cold boot (Navi31, Navi33, small BAR), warm boot after fini,
cold boot behind a mode1 reset after an unclean exit (in process and across processes through the
simulator's state file), forced cold boot, and the clear errors for a real device amdgpu holds or
another process has locked (fake sysfs trees)."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pcie
from amdrv.am import AMError, AMGPU, BOOT_STATE_VERSION

ROOT = Path(__file__).resolve().parents[2]
ADDR = "0000:03:00.0"


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def sim(chip="navi31", **kw):
    return pcie.open_function("sim", chip, **kw)


def check_running(gpu):
    assert gpu.gfx.mec_ready() and gpu.gfx.is_idle()
    assert gpu.sdma.ready()


@pytest.mark.parametrize("chip", ["navi31", "navi33"])
def test_cold_boot_then_warm_boot_after_fini(sim_bus, chip):
    gpu = AMGPU.open(sim(chip, bus=sim_bus, fresh=True))
    cold = gpu.boot_report
    assert (cold.kind, cold.mode1_reset) == ("cold", False), cold
    assert "no AM boot state" in cold.reason
    assert [s.name for s in cold.steps] == ["nbio", "gmc", "ih", "psp", "smu", "gfx", "sdma"]
    check_running(gpu)
    layout = gpu.dev.mm.boot_layout()
    assert layout  # the blocks put their firmware, rings and tables in the boot region
    gpu.fini()
    gpu.fini()  # idempotent

    gpu = AMGPU.open(sim(chip, bus=sim_bus))
    warm = gpu.boot_report
    assert warm.kind == "warm", warm
    assert "psp" not in [s.name for s in warm.steps]
    check_running(gpu)
    assert gpu.dev.mm.boot_layout() == layout  # found again where the cold boot put it
    # over USB each access is a round trip: a warm boot must be much cheaper
    assert warm.mmio_reads < cold.mmio_reads and warm.mmio_writes < cold.mmio_writes * 0.6
    gpu.fini()


def test_unclean_exit_leads_to_cold_boot_behind_mode1_reset(sim_bus):
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True))
    gpu.dev.close()  # dropped without fini: the clean-exit flag stays clear
    gpu = AMGPU.open(sim(bus=sim_bus))
    rep = gpu.boot_report
    assert (rep.kind, rep.mode1_reset) == ("cold", True), rep
    assert "did not finish" in rep.reason
    assert [s.name for s in rep.steps][:2] == ["mode1 reset", "nbio"]
    check_running(gpu)
    gpu.fini()


def test_forced_cold_boot_resets_live_firmware(sim_bus, monkeypatch):
    AMGPU.open(sim(bus=sim_bus, fresh=True)).fini()
    monkeypatch.setenv("DRIVERLESS_COLD_BOOT", "1")
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert (gpu.boot_report.kind, gpu.boot_report.mode1_reset) == ("cold", True)
    assert "forced" in gpu.boot_report.reason
    gpu.fini()


def test_unclean_exit_of_another_process(sim_bus, tmp_path):
    state = tmp_path / "gpu.state"
    script = textwrap.dedent(f"""
        import pcie
        from amdrv.am import AMGPU
        gpu = AMGPU.open(pcie.open_function("sim", "navi31", state={str(state)!r}, fresh=True,
                                            vram_size=1 << 30))
        assert gpu.boot_report.kind == "cold"
        print("booted", flush=True)
        # exits without fini: the simulator saves the GPU as the process leaves it
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "booted" in out.stdout, out.stderr
    gpu = AMGPU.open(sim(bus=sim_bus, state=state))
    rep = gpu.boot_report
    assert (rep.kind, rep.mode1_reset) == ("cold", True), rep
    check_running(gpu)
    gpu.fini()  # saved clean: the next process finds it warm
    gpu = AMGPU.open(sim(bus=sim_bus, state=state))
    assert gpu.boot_report.kind == "warm", gpu.boot_report
    gpu.fini()


def test_small_bar_cold_boot(sim_bus):
    gpu = AMGPU.open(sim(bus=sim_bus, small_bar=True, fresh=True))
    assert gpu.boot_report.kind == "cold"
    assert gpu.dev.vram.visible == 256 << 20 < gpu.dev.vram.size
    # the boot region sits inside the CPU-visible window: filling it costs no MM_INDEX/MM_DATA writes
    assert gpu.dev.mm.boot_end <= gpu.dev.vram.visible
    assert gpu.boot_report.mmio_writes < 1000  # 35k when the boot region lay above the window
    check_running(gpu)
    gpu.fini()


def test_boot_state_version_mismatch_boots_cold(sim_bus):
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True))
    gpu.fini()
    gpu = AMGPU.open(sim(bus=sim_bus))
    gpu.nbio.write_state(BOOT_STATE_VERSION + 1, clean=True)  # an older or newer driver's run
    gpu.dev.close()
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert gpu.boot_report.kind == "cold" and "version" in gpu.boot_report.reason
    gpu.fini()


# ------------------------------------------------------------------ real devices (fake sysfs)
def fake_gpu(root: Path, driver: str | None = None) -> None:
    d = root / "bus/pci/devices" / ADDR
    d.mkdir(parents=True)
    for name, value in (("vendor", "0x1002"), ("device", "0x744c"), ("class", "0x030000"),
                        ("revision", "0xc8")):
        (d / name).write_text(value + "\n")
    if driver:
        drv = root / "bus/pci/drivers" / driver
        drv.mkdir(parents=True)
        (d / "driver").symlink_to(os.path.relpath(drv, d))


def test_amdgpu_bound_names_the_unbind_command(tmp_path):
    fake_gpu(tmp_path, driver="amdgpu")
    with pytest.raises(pcie.PCIError, match=f"bound to amdgpu.*echo {ADDR} > /sys/bus/pci/drivers/amdgpu/unbind"):
        AMGPU.open("am:03:00.0", sysfs=tmp_path)
    with pytest.raises(pcie.PCIError, match="every AMD GPU is driven by a kernel driver.*amdgpu"):
        AMGPU.open("am", sysfs=tmp_path)


def test_second_process_gets_device_busy(tmp_path):
    fake_gpu(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from pcie.lock import DeviceLock; "
         f"lock = DeviceLock({ADDR!r}, Path({str(tmp_path)!r})); print('locked', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(pcie.PCIError, match=f"device {ADDR} busy, held by pid {holder.pid}"):
            AMGPU.open("am:03:00.0", sysfs=tmp_path, lock_dir=tmp_path)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_info_command_boots_prints_and_leaves_it_warm(capsys):
    from amdrv.__main__ import main
    assert main(["info", "--device", "am:sim"]) == 0  # cold, or warm if this process's Navi31 was left clean
    assert main(["info", "--device", "am:sim"]) == 0
    out = capsys.readouterr().out.split("am:sim: navi31")[-1]
    assert "Boot: warm in" in out and "MMIO:" in out and "reads" in out
    assert "GC 11.0.0" in out and "SDMA1 6.0.0" in out and "MP1 13.0.0" in out
    # "am:sim" is the Navi31 already on this process's simulated bus when there is one (an earlier test's,
    # maybe with less VRAM), else a new one with the board's 24 GiB: the size is the board's or that test's
    assert re.search(r"VRAM: \d+ GiB \(all through BAR0\)", out) and re.search(r"BAR0 VRAM \d+ GiB", out)
    assert "BAR5 registers 1 MiB" in out
    assert "gc_11_0_0_mec.bin: mec ucode version 0x1ee" in out and "SMU firmware reports 78.75.0" in out
    assert "GFX: MEC ready; SDMA: ready" in out and "fini:" in out
    assert main(["info", "--device", "am:sim", "--cold"]) == 0
    assert "Boot: cold after a mode1 reset" in capsys.readouterr().out


def test_info_command_errors_in_one_line(capsys):
    from amdrv.__main__ import main
    assert main(["info", "--device", "am:sim:navi99"]) == 2
    assert capsys.readouterr().err.startswith("error: 'am:sim:navi99': no simulated chip 'navi99'")


def test_died_after_the_sos_started_carries_on_from_it(sim_bus, monkeypatch):
    from amdrv.ip.psp import PSP

    def die(self, load):
        raise RuntimeError(f"killed before LOAD_IP_FW of {load.what}")

    with monkeypatch.context() as m:
        m.setattr(PSP, "load_ip_fw", die)  # the first LOAD_IP_FW is the SMU's
        with pytest.raises(AMError, match="cold boot failed in psp: killed before LOAD_IP_FW of smu_13_0_0.bin"):
            AMGPU.open(sim(bus=sim_bus, fresh=True))
    gpu = AMGPU.open(sim(bus=sim_bus))  # the sOS runs, no SMU firmware: no reset possible, none needed
    rep = gpu.boot_report
    assert (rep.kind, rep.mode1_reset) == ("cold", False), rep
    assert "did not finish" in rep.reason and "the sOS runs without SMU firmware" in rep.reason
    check_running(gpu)
    gpu.fini()


@pytest.mark.parametrize("boot,block,method,reset", [
    ("cold", "amdrv.ip.gmc.GMC", "init", False),        # before any firmware: nothing to reset
    ("cold", "amdrv.ip.smu.SMU", "init", True),         # SMU firmware running, features not enabled
    ("cold", "amdrv.ip.sdma.SDMA", "init", True),       # everything up but SDMA
    ("warm", "amdrv.ip.gfx.GFX", "init", True),         # a warm boot that dies half way
])
def test_dying_in_any_boot_step_leads_to_a_good_next_boot(sim_bus, monkeypatch, boot, block, method, reset):
    if boot == "warm":
        AMGPU.open(sim(bus=sim_bus, fresh=True)).fini()

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as m:
        m.setattr(f"{block}.{method}", killed)
        with pytest.raises(AMError, match=f"{boot} boot failed in .*: killed"):
            AMGPU.open(sim(bus=sim_bus, fresh=boot == "cold"))
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert (gpu.boot_report.kind, gpu.boot_report.mode1_reset) == ("cold", reset), gpu.boot_report
    check_running(gpu)
    gpu.fini()


def test_cold_and_warm_boot_on_a_board_without_scpm(sim_bus):
    """Without SCPM (the PSP runtime database says SCPM_DISABLE) the driver sends the allowed feature mask
    (smu_smc_hw_setup) and DPM comes up; with SCPM (the default board) it does not send it."""
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True, scpm=False))
    assert gpu.smu.scpm is False and gpu.smu.enabled_features() >> 1 & 1     # FEATURE_DPM_GFXCLK_BIT
    gpu.fini()
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert gpu.boot_report.kind == "warm"
    gpu.fini()


# -- warm-boot state vs. what another driver leaves (issue 11 point 6, issue 17 "warm boot") ------------------

def amdgpu_run(gpu_dev) -> None:
    """What loading and unloading amdgpu 6.1 leaves on the simulated board (a stand-in, not amdgpu): at load
    it resets a GPU whose sOS is alive (soc21_need_reset_on_init -> amdgpu_device_mode1_reset, config space
    saved and restored), loads the firmware through the PSP again (sOS running, SMU answering), and sets up
    GC its own way (gfx_v11_0_ring_test_ring writes SCRATCH_REG0); unloading leaves the firmware running.
    Whether AM's NBIO boot state survived the reset is the board's driver_scratch_survives_reset."""
    from gpusim import board
    rebar = [(off, gpu_dev.pci.read(off, 4)) for off in (0x208, 0x210)]   # the Resizable BAR controls
    saved = [gpu_dev.pci.read(4 * i, 4) for i in range(16)]
    board.mode1_reset(gpu_dev)
    for off, value in rebar:                              # pci_restore_state: rebar first, then the header
        gpu_dev.pci.write(off, 4, value)
    for i in reversed(range(16)):
        gpu_dev.pci.write(4 * i, 4, saved[i])
    psp, smu = gpu_dev.blocks["PSP"], gpu_dev.blocks["SMU"]
    gpu_dev.step(100)                                     # the bootloader comes up
    psp.bl_done, psp.sos_alive = [0x80000, 0x10000000, 0x10000, 0x20000], True   # KDB, SPL, SYSDRV, SOS
    gpu_dev.set("MP0", "MP0_SMN_C2PMSG_81", 1)
    gpu_dev.set("MP0", "MP0_SMN_C2PMSG_64", 0x80000000)
    smu.firmware_loaded()
    gpu_dev.set("GC", "SCRATCH_REG0", 0xDEADBEEF)


@pytest.mark.parametrize("survives", [False, True])
def test_am_fini_then_amdgpu_then_am_boots_cold(sim_bus, survives):
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True, driver_scratch_survives_reset=survives))
    gpu.fini()
    dev = sim_bus.slots[0]
    amdgpu_run(dev)
    gpu = AMGPU.open(sim(bus=sim_bus))
    report = gpu.boot_report
    assert (report.kind, report.mode1_reset) == ("cold", True), report
    want = "GC SCRATCH_REG7 reads 0x0" if survives else "no AM boot state"
    assert want in report.reason, report.reason
    check_running(gpu)
    gpu.fini()


def test_without_the_gc_token_a_surviving_boot_state_would_boot_warm_over_amdgpu(sim_bus, monkeypatch):
    """The GC token is what tells: with DRIVER_SCRATCH surviving the reset, the NBIO state alone says clean."""
    import amdrv.am as am
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True, driver_scratch_survives_reset=True))
    gpu.fini()
    amdgpu_run(sim_bus.slots[0])
    monkeypatch.setattr(am, "GC_TOKEN", 0)              # a driver that does not check GC
    try:
        gpu = AMGPU.open(sim(bus=sim_bus))
    except AMError:
        return                                          # it went warm and tripped over amdgpu's state
    assert gpu.boot_report.kind == "warm", gpu.boot_report   # or warm: over another driver's firmware and state
    gpu.fini()


@pytest.mark.parametrize("survives", [False, True])
def test_firmware_stopped_while_the_boot_state_survives_boots_cold(sim_bus, survives):
    """Issue 17: the scratch flags say clean, but the firmware no longer runs: the next boot is cold."""
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True, driver_scratch_survives_reset=survives))
    gpu.fini()
    dev = sim_bus.slots[0]
    dev.blocks["SMU"].running = False                   # the PMFW stopped (hung, or unloaded)
    dev.set("MP1", "MP1_SMN_C2PMSG_90", 0)
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert gpu.boot_report.kind == "cold" and "the SMU no longer runs" in gpu.boot_report.reason
    check_running(gpu)
    gpu.fini()


def test_a_latched_vm_fault_makes_the_next_boot_cold(sim_bus):
    gpu = AMGPU.open(sim(bus=sim_bus, fresh=True))
    gpu.fini()
    sim_bus.slots[0].set("GC", "GCVM_L2_PROTECTION_FAULT_STATUS", 0x1)
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert gpu.boot_report.kind == "cold" and "VM fault is latched" in gpu.boot_report.reason
    gpu.fini()
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert gpu.boot_report.kind == "warm"
    gpu.fini()


@pytest.mark.parametrize("present", ["gc_11_0_0_pfp.bin", "gc_11_0_0_mec.bin"])  # GFX reads the MEC's at build
def test_missing_firmware_is_one_error_listing_every_file(sim_bus, debian_firmware, tmp_path, present):
    # docs/firmware.md: offline with files missing, one FirmwareError lists them all (not the first the
    # PSP happens to load), raised before the boot touches the GPU.
    from amdrv.firmware import FirmwareError, FirmwareStore, files_for
    from amdrv import chips
    names = files_for(chips.NAVI31)
    have = tmp_path / "fw"
    have.mkdir()
    (have / present).write_bytes((debian_firmware / present).read_bytes())
    store = FirmwareStore(override=have, offline=True)
    with pytest.raises(FirmwareError) as e:
        AMGPU.open(sim(bus=sim_bus, fresh=True), firmware=store)
    first = str(e.value).splitlines()[0]
    assert f"{len(names) - 1} pinned file(s) not found and offline" in first
    assert all(n in first for n in names if n != present) and present not in first
    # Nothing was written: the GPU's boot state is as before (none), so the next boot with firmware is cold.
    gpu = AMGPU.open(sim(bus=sim_bus))
    assert gpu.boot_report.kind == "cold" and "no AM boot state" in gpu.boot_report.reason
    gpu.fini()
