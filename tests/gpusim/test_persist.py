"""A device outlives its driver: reopened in the same process, or saved to a file for the next process."""
import subprocess
import sys
import textwrap

from amdrv.autogen import smu_13_0_0 as S
from gpusim import provider

CHILD = textwrap.dedent("""
    import sys
    from gpusim import provider
    f = provider.open_function("navi31", state=sys.argv[1])
    dev, bar = f.dev, f.bar(5)
    scratch = dev.reg_addr("NBIO", "BIF_BX0_BIOS_SCRATCH_3") * 4
    assert bar.read32(scratch) == 0xA11CE, hex(bar.read32(scratch))
    assert f.bar(0).read(123 << 20, 5) == b"hello"
    assert dev.blocks["SMU"].running and dev.blocks["SMU"].features
    bar.write32(scratch, 0xB0B)
    f.bar(0).write(123 << 20, b"world")
    f.close()
""")


def test_reopen_in_process_keeps_the_device(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    scratch = f.dev.reg_addr("GC", "SCRATCH_REG5") * 4
    f.bar(5).write32(scratch, 0x5EED)
    f.bar(0).write32(0x1000, 0xFEED)
    f.close()                                        # the driver goes away, the GPU stays powered
    g = provider.open_function("navi31", bus=sim_bus)
    assert g.dev is f.dev and g.bar(5).read32(scratch) == 0x5EED and g.bar(0).read32(0x1000) == 0xFEED
    h = provider.open_function("navi31", vram_size=1 << 30, bus=sim_bus, fresh=True)
    assert h.bar(5).read32(scratch) == 0                # a new power-on
    h.close()


def test_save_and_restore_across_processes(sim_bus, tmp_path):
    state = tmp_path / "gpu.state"
    f = provider.open_function("navi31", state=state, fresh=True, bus=sim_bus)   # full 24 GiB, sparse
    dev = f.dev
    f.bar(5).write32(dev.reg_addr("NBIO", "BIF_BX0_BIOS_SCRATCH_3") * 4, 0xA11CE)
    f.bar(0).write(123 << 20, b"hello")
    dev.blocks["SMU"].firmware_loaded()
    bar = f.bar(5)
    bar.write32(0x1629A * 4, 0)
    bar.write32(0x16282 * 4, S.PPSMC_MSG_EnableAllSmuFeatures)
    dev.step(5)
    f.close()
    assert state.stat().st_size < 8 << 20             # touched chunks only
    r = subprocess.run([sys.executable, "-c", CHILD, str(state)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    g = provider.open_function("navi31", state=state, bus=sim_bus)
    assert g.bar(5).read32(g.dev.reg_addr("NBIO", "BIF_BX0_BIOS_SCRATCH_3") * 4) == 0xB0B
    assert g.bar(0).read(123 << 20, 5) == b"world"
    g.close()


def test_state_file_of_another_kind_is_refused(sim_bus, tmp_path):
    bad = tmp_path / "x.state"
    bad.write_bytes(b"not a state")
    import pytest
    with pytest.raises(ValueError, match="not a gpusim device state"):
        provider.open_function("navi31", state=bad, bus=sim_bus)


def test_a_driver_dying_without_close_still_leaves_its_state(sim_bus, tmp_path):
    state = tmp_path / "crash.state"
    code = textwrap.dedent("""
        import sys
        from gpusim import provider
        f = provider.open_function("navi33", vram_size=1 << 30, state=sys.argv[1], fresh=True)
        f.bar(5).write32(f.dev.reg_addr("GC", "SCRATCH_REG1") * 4, 0xDEAD)
        raise SystemExit(3)          # no close()
    """)
    r = subprocess.run([sys.executable, "-c", code, str(state)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    f = provider.open_function("navi33", state=state, bus=sim_bus)
    assert f.bar(5).read32(f.dev.reg_addr("GC", "SCRATCH_REG1") * 4) == 0xDEAD
    f.close()


def test_a_file_saved_before_the_rename_of_device_to_simgpu_still_loads(tmp_path):
    """gpusim.device.Device became SimGPU (issue 12): a state file naming the old class still loads."""
    import pickle
    from gpusim import persist
    from gpusim.device import SimGPU
    dev = SimGPU("navi31", vram_size=64 << 20)
    raw = pickle.dumps(dev, protocol=pickle.HIGHEST_PROTOCOL)
    old = raw.replace(b"\x8c\x06SimGPU", b"\x8c\x06Device")     # SHORT_BINUNICODE of the class name
    assert old != raw
    path = tmp_path / "old.state"
    path.write_bytes(persist.MAGIC + old)
    assert type(persist.load(path)) is SimGPU


def test_a_device_that_ran_on_its_own_clock_can_be_saved(tmp_path):
    """start_async leaves its stop event behind after stop_async: it is runtime state, not the GPU's, and
    saving such a device failed (cannot pickle '_thread.lock')."""
    from gpusim import persist
    from gpusim.device import SimGPU
    dev = SimGPU("navi31", vram_size=64 << 20)
    dev.start_async()
    dev.stop_async()
    persist.save(dev, tmp_path / "ran.state")
    assert persist.load(tmp_path / "ran.state").chip == "navi31"


def test_a_state_saved_by_an_older_simulator_gives_way_to_a_fresh_gpu(sim_bus, tmp_path):
    """A state file from before a block was modelled (here: the VBIOS ROM) cannot be simulated on: the driver
    would read an empty ROM and blame the card. The provider warns and powers on a fresh GPU in its place."""
    import pytest
    from gpusim import persist
    state = tmp_path / "old.state"
    f = provider.open_function("navi31", state=state, fresh=True, bus=sim_bus)
    f.bar(5).write32(f.dev.reg_addr("GC", "SCRATCH_REG5") * 4, 0x5EED)
    f.close()
    dev = persist.load(state)
    del dev.blocks["VBIOS"]                          # as a state saved before gpusim.vbios existed
    persist.save(dev, state)
    with pytest.warns(UserWarning, match=r"older simulator \(no VBIOS block\); powering on a fresh navi31"):
        g = provider.open_function("navi31", state=state, bus=sim_bus)
    assert "VBIOS" in g.dev.blocks and g.bar(5).read32(g.dev.reg_addr("GC", "SCRATCH_REG5") * 4) == 0
    g.close()
    assert "VBIOS" in persist.load(state).blocks     # the fresh one is what the file keeps now
