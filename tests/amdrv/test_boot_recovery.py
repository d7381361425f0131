"""A driver that dies before the firmware runs (no SMU to reset the ASIC, no sOS) leaves what only a reset
clears: the PSP bootloader half way through its stages, or the MMHUB invalidation semaphore held inside a
TLB flush. The next boot resets the GPU through the platform (a PCI reset: amdgpu_device_pci_reset) and
comes up; without that step, or on a platform with no PCI reset, it fails, and the error says power-cycle."""
import pytest

import pcie
from amdrv.am import AMError, AMGPU
from amdrv.ip.gmc import GMC
from amdrv.ip.psp import PSP
from amdrv.ip.smu import SMU
from gpusim import provider


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


class Killed(BaseException):
    """The driver's process ends here (a BaseException, so no except clause of the driver handles it)."""


def sim(bus, **kw):
    return pcie.open_function("sim", "navi31", bus=bus, vram_size=1 << 30, **kw)


def die_in_bootloader(m):
    real = PSP._wait

    def wait(self, index, ok, what, *args, **kw):
        if "LOAD_KEY_DATABASE" in what and "to finish" in what:
            raise Killed(what)
        return real(self, index, ok, what, *args, **kw)
    m.setattr(PSP, "_wait", wait)


def die_holding_the_semaphore(m):
    def flush(self, hub, vmid):
        if hub.semaphore:
            hub.vmr("INVALIDATE_ENG17_SEM").read()     # acquired
            raise Killed("inside the TLB flush")
    m.setattr(GMC, "_flush_hub", flush)


DEATHS = {"bootloader": die_in_bootloader, "semaphore": die_holding_the_semaphore}


def killed_cold_boot(monkeypatch, bus, death):
    with monkeypatch.context() as m:
        DEATHS[death](m)
        with pytest.raises(Killed):
            AMGPU.open(sim(bus, fresh=True))


@pytest.mark.parametrize("death", DEATHS)
def test_next_boot_resets_through_the_platform(sim_bus, monkeypatch, death):
    killed_cold_boot(monkeypatch, sim_bus, death)
    gpu = AMGPU.open(sim(sim_bus))
    rep = gpu.boot_report
    assert (rep.kind, rep.mode1_reset, rep.pci_reset) == ("cold", False, "bus"), rep
    assert rep.steps[0].name == "pci reset (bus)" and "after a PCI reset (bus)" in str(rep)
    assert gpu.gfx.mec_ready() and gpu.sdma.ready()
    gpu.fini()


@pytest.mark.parametrize("death", DEATHS)
def test_without_the_reset_the_gpu_stays_unbootable(sim_bus, monkeypatch, death):
    killed_cold_boot(monkeypatch, sim_bus, death)
    monkeypatch.setattr(AMGPU, "_pci_reset", lambda self: None)   # the driver omits the reset
    for _ in range(2):
        with pytest.raises(AMError, match="cold boot failed in (psp|gmc)"):
            AMGPU.open(sim(sim_bus))


def test_no_pci_reset_on_the_platform_says_power_cycle(sim_bus, monkeypatch):
    killed_cold_boot(monkeypatch, sim_bus, "bootloader")
    monkeypatch.setattr(provider.SimFunction, "reset_methods", lambda self: ())
    with pytest.raises(AMError, match=r"cold boot failed in psp: .*offers no PCI reset \(FLR or secondary bus "
                                      r"reset; pcie reset_methods\(\) is empty\): if this boot fails, power-cycle"):
        AMGPU.open(sim(sim_bus))


def test_a_clean_gpu_is_not_reset(sim_bus, monkeypatch):
    gpu = AMGPU.open(sim(sim_bus, fresh=True))   # from power-on: no boot state, nothing to reset
    assert gpu.boot_report.pci_reset == "" and not gpu.boot_report.mode1_reset
    gpu.fini()
    gpu = AMGPU.open(sim(sim_bus), cold=True)    # firmware running: the SMU's mode1 reset, as before
    assert gpu.boot_report.mode1_reset and gpu.boot_report.pci_reset == ""
    gpu.fini()


def test_died_inside_a_mode1_reset_before_the_config_restore(sim_bus, monkeypatch):
    """The mode1 reset clears the config space (BARs, memory decode); the driver restores what it saved. A
    process killed in between leaves a GPU that answers no register read, and nothing in the kernel
    restores it on the sysfs path: the saved state kept on disk (amdrv.pci_state.keep) is restored by the
    next open, which then boots cold behind a new mode1 reset."""
    from amdrv import pci_state
    AMGPU.open(sim(sim_bus, fresh=True)).fini()

    def killed(pci, state):
        raise Killed("before the config space restore")
    with monkeypatch.context() as m:
        m.setattr(pci_state, "restore", killed)
        with pytest.raises(Killed):
            AMGPU.open(sim(sim_bus), cold=True)
    gpu = AMGPU.open(sim(sim_bus))
    assert gpu.boot_report.kind == "cold" and gpu.gfx.mec_ready(), gpu.boot_report
    gpu.fini()
    with monkeypatch.context() as m:       # without the kept state the GPU stays off the bus
        m.setattr(pci_state, "restore", killed)
        with pytest.raises(Killed):
            AMGPU.open(sim(sim_bus), cold=True)
    monkeypatch.setattr(pci_state, "kept", lambda pci: None)
    with pytest.raises(Exception, match="RCC_CONFIG_MEMSIZE reads 0xffffffff"):
        AMGPU.open(sim(sim_bus))


def test_died_with_a_mode1_reset_in_flight(sim_bus, monkeypatch):
    """Killed right after sending Mode1Reset: the reset lands while the next process opens the GPU (after it
    restored the kept config space); discovery reads all ones, restores again and goes on (found by
    tools/fuzz/state.py, seed 2 cases 148 and 187)."""
    from amdrv.autogen.smu_13_0_0 import PPSMC_MSG_Mode1Reset
    from amdrv.ip.smu import SMU
    AMGPU.open(sim(sim_bus, fresh=True)).fini()
    real = SMU.send

    def send(self, msg, *args, **kw):
        if msg == PPSMC_MSG_Mode1Reset:
            self.resp_reg.write(0)
            self.msg_reg.write(msg)
            raise Killed("right after Mode1Reset")
        return real(self, msg, *args, **kw)
    with monkeypatch.context() as m:
        m.setattr(SMU, "send", send)
        with pytest.raises(Killed):
            AMGPU.open(sim(sim_bus), cold=True)
    gpu = AMGPU.open(sim(sim_bus))
    assert gpu.boot_report.kind == "cold" and gpu.gfx.mec_ready() and gpu.sdma.ready(), gpu.boot_report
    gpu.fini()


def die_with_the_smu_mailbox_cleared(m):
    def send(self, msg, arg=0, read_arg=False, gone=None):
        self.resp_reg.write(0)          # smu_cmn's order: the response cleared, then argument and message
        raise Killed(f"between clearing the SMU response and posting message {msg:#x}")
    m.setattr(SMU, "_send", send)


def killed_in_fini_with_the_mailbox_cleared(monkeypatch, bus):
    gpu = AMGPU.open(sim(bus, fresh=True))
    with monkeypatch.context() as m:
        die_with_the_smu_mailbox_cleared(m)
        with pytest.raises(Killed):
            gpu.fini()


def test_died_with_the_smu_mailbox_cleared(sim_bus, monkeypatch):
    # the SMU runs (MP1_FIRMWARE_FLAGS) but takes no message (smu_cmn_send_smc_msg_with_param refuses on a
    # cleared response): no mode1 reset through it, and the PSP will not load it again: a PCI reset
    killed_in_fini_with_the_mailbox_cleared(monkeypatch, sim_bus)
    gpu = AMGPU.open(sim(sim_bus))
    rep = gpu.boot_report
    assert (rep.kind, rep.mode1_reset, rep.pci_reset) == ("cold", False, "bus"), rep
    assert "mailbox was cleared" in rep.reason and "reset through the platform (bus)" in rep.reason
    assert gpu.gfx.mec_ready() and gpu.sdma.ready()
    gpu.fini()


def test_a_boot_that_trusts_the_cleared_response_register_fails(sim_bus, monkeypatch):
    # the old decision: response 0 read as "no SMU firmware", so the PSP was asked to load it over the running one
    killed_in_fini_with_the_mailbox_cleared(monkeypatch, sim_bus)
    monkeypatch.setattr(SMU, "mailbox_cleared", lambda self: False)
    with pytest.raises(AMError, match="cold boot failed in psp"):
        AMGPU.open(sim(sim_bus))


def test_with_the_mailbox_cleared_and_no_pci_reset_the_mode1_reset_is_posted_on_it(sim_bus, monkeypatch):
    # behind a USB bridge no platform reset exists (found by tools/fuzz/state --device am:sim:usb --seed 4,
    # cases 49 and 85): the mailbox stayed cleared through the wait, so the Mode1Reset is posted on it
    killed_in_fini_with_the_mailbox_cleared(monkeypatch, sim_bus)
    monkeypatch.setattr(provider.SimFunction, "reset_methods", lambda self: ())
    gpu = AMGPU.open(sim(sim_bus))
    rep = gpu.boot_report
    assert (rep.kind, rep.mode1_reset, rep.pci_reset) == ("cold", True, ""), rep
    assert "mode1 reset is posted on the cleared mailbox" in rep.reason
    assert gpu.gfx.mec_ready() and gpu.sdma.ready()
    gpu.fini()
