"""The PCI-level resets the simulated platform offers (gpusim.provider.SimFunction.reset_methods/reset): no
FLR (the function's PCIe DevCap does not advertise it), a secondary bus reset that takes the whole ASIC
back to power-on, the config space saved and restored around it as pci_reset_function does. What a dead
driver leaves that only a reset clears: a bootloader half way through its stages, a held MMHUB
invalidation semaphore."""
import pytest

from amdrv.autogen import psp as P
from gpusim import pci, provider
from gpusim.psp import READY


@pytest.fixture
def fn(sim_bus, debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    f = provider.open_function("navi31", fresh=True, bus=sim_bus, vram_size=1 << 30)
    yield f
    f.close()


def reg(dev, ip, name, value=None):
    a = dev.reg_addr(ip, name)
    if value is None:
        dev.step()
        return dev.regs.read(a)
    dev.regs.write(a, value)


def test_no_flr_a_bus_reset(fn):
    devcap = fn.config_read(pci.CAP_EXP + provider.PCI_EXP_DEVCAP, 4)
    assert not devcap & provider.PCI_EXP_DEVCAP_FLR
    assert fn.reset_methods() == ("bus",)


def test_bus_reset_restarts_a_bootloader_left_half_way(fn):
    dev = fn.dev
    for _ in range(100):                   # the bootloader comes up after power-on
        if reg(dev, "MP0", "MP0_SMN_C2PMSG_35") == READY:
            break
    # A driver staged KDB in host memory that is gone now (its process died): the bootloader refuses it and
    # keeps the error; it expects KDB first and takes each stage once, so nothing a new driver sends helps.
    reg(dev, "MP0", "MP0_SMN_C2PMSG_36", 0x7FFF00)
    reg(dev, "MP0", "MP0_SMN_C2PMSG_35", P.PSP_BL__LOAD_KEY_DATABASE)
    for _ in range(10):
        v = reg(dev, "MP0", "MP0_SMN_C2PMSG_35")
    assert v & READY and v != READY
    fn.set_bus_master(True)
    command = fn.config_read(pci.COMMAND, 2)
    bar5 = fn.config_read(0x24, 4)
    fn.reset()
    assert reg(dev, "MP0", "MP0_SMN_C2PMSG_35") == 0          # the bootloader starts again from power-on
    for _ in range(100):
        if reg(dev, "MP0", "MP0_SMN_C2PMSG_35") == READY:
            break
    assert dev.blocks["PSP"].bl_done == [] and not dev.blocks["PSP"].sos_alive
    # the platform restored the config space: BARs decode again, bus mastering as it was
    assert fn.config_read(pci.COMMAND, 2) == command and fn.config_read(0x24, 4) == bar5
    seen = len(dev.errors)
    assert fn.bar(5).read32(4 * dev.reg_addr("MP0", "MP0_SMN_C2PMSG_35")) == READY
    assert not any("master abort" in e.message for e in dev.errors[seen:])


def test_bus_reset_frees_a_semaphore_a_dead_driver_held(fn):
    dev = fn.dev
    assert reg(dev, "MMHUB", "MMVM_INVALIDATE_ENG17_SEM") == 1     # acquired, never released: the driver died
    assert reg(dev, "MMHUB", "MMVM_INVALIDATE_ENG17_SEM") == 0     # every later acquire fails
    fn.reset()
    assert reg(dev, "MMHUB", "MMVM_INVALIDATE_ENG17_SEM") == 1


def test_a_closed_sim_function_frees_its_slot_an_open_one_does_not(sim_bus, fn):
    with pytest.raises(provider.PCIError, match=r"slot 0 .* busy, held by pid \d+ \(this process: close the "
                                                r"device opened on it first"):
        provider.open_function("navi31", bus=sim_bus)
    fn.close()
    again = provider.open_function("navi31", bus=sim_bus)
    assert again.dev is fn.dev
    again.close()
