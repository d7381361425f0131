"""Page faults end to end as the driver programs them (gfxhub_v3_0/mmhub_v3_0_set_fault_enable_default):
the faulting access goes to the default page, the kernel completes and signals, the fault is latched and
posted to the IH ring, and the driver finds it there after the fence (gmc_v11_0_process_interrupt). Each
test undoes or skips one driver step (the register put back to its power-on value, as if the driver had
never written it) and shows the outcome changes."""
import struct

import pytest

import hcq
from hcq.api import Signal

BAD = (1 << 44) - (1 << 30)   # below the VRAM window: mapped by nothing; offset 0 of the default page


def sim(dev):
    return dev.gpu.dev.pci.dev


def dummy(dev) -> memoryview:
    """The driver's default page for protection faults (host memory, amdgpu's dummy page)."""
    return dev.gpu.gmc.dummy_page.view


def test_without_the_check_after_the_fence_a_fault_goes_unnoticed(dev, kernel_corpus, monkeypatch):
    poke = dev.program(kernel_corpus["faults"], "poke")
    dummy(dev)[:4] = bytes(4)
    monkeypatch.setattr(type(dev), "_check_faults", lambda self, done=False: None)
    poke(BAD, 5, global_size=(1,), local_size=(1,), wait=True, timeout=5)      # the fence came: no error
    assert struct.unpack("<I", dummy(dev)[:4])[0] == 5                           # the store went to the default page
    assert dev.gpu.gmc.decode_fault("GC", clear=False).address == BAD          # only the hub and the IH know
    monkeypatch.undo()
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}.*write by TCP.*completed"):
        dev.synchronize()                                                        # the IV is still in the ring


def test_the_queue_runs_on_past_a_fault(dev, kernel_corpus):
    poke = dev.program(kernel_corpus["faults"], "poke")
    ok = dev.alloc(4)
    dev.copyin(ok, bytes(4))
    poke(BAD, 5, global_size=(1,), local_size=(1,))
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}.*completed with the faulting accesses"):
        poke(ok.va, 77, global_size=(1,), local_size=(1,), wait=True, timeout=5)
    assert struct.unpack("<I", dev.copyout(ok))[0] == 77      # no recover() needed: nothing stopped
    poke(ok.va, 78, global_size=(1,), local_size=(1,), wait=True, timeout=5)
    assert struct.unpack("<I", dev.copyout(ok))[0] == 78


def _hangs_on_fault(dev, kernel_corpus):
    sim(dev).blocks["CP"].kernel_max_steps = 5000
    poke = dev.program(kernel_corpus["faults"], "poke")
    ok = dev.alloc(4)
    dev.copyin(ok, bytes(4))
    dummy(dev)[:4] = bytes(4)
    poke(BAD, 5, global_size=(1,), local_size=(1,))
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}.*stopped"):
        poke(ok.va, 77, global_size=(1,), local_size=(1,), wait=True, timeout=2)
    dev.recover()
    assert struct.unpack("<I", dev.copyout(ok))[0] == 0 and struct.unpack("<I", dummy(dev)[:4])[0] == 0


def test_without_the_success_response_the_faulting_kernel_stops(dev, kernel_corpus):
    """GL1C_UTCL0_CNTL1.RESP_FAULT_MODE 2 (set_fault_enable_default) undone: the wave stops on the fault."""
    dev.gpu.dev.reg("GC").GL1C_UTCL0_CNTL1.update(RESP_FAULT_MODE=0)
    _hangs_on_fault(dev, kernel_corpus)


def test_without_the_default_address_the_access_fails(dev, kernel_corpus):
    """VM_L2_PROTECTION_FAULT_DEFAULT_ADDR at its power-on 0, a bus address nothing maps: the faulting
    store reaches no memory and the wave stops."""
    gc = dev.gpu.dev.reg("GC")
    gc.GCVM_L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32.write(0)
    gc.GCVM_L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32.write(0)
    sim(dev).errors.clear()
    _hangs_on_fault(dev, kernel_corpus)
    assert any("bus address 0x0: no host memory" in e.message for e in sim(dev).errors), sim(dev).errors


def test_without_the_default_page_in_system_memory_the_store_lands_in_vram(dev, kernel_corpus):
    """VM_L2_CNTL.ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY at its power-on 0: the dummy page's bus address
    is taken as a VRAM address, and the faulting store overwrites whatever VRAM is there."""
    dev.gpu.dev.reg("GC").GCVM_L2_CNTL.update(ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY=0)
    poke = dev.program(kernel_corpus["faults"], "poke")
    where = dev.gpu.gmc.dummy_page.bus_address(0)
    assert where + 4 <= dev.gpu.dev.vram.size
    dev.gpu.dev.vram.write(where, bytes(4))
    dummy(dev)[:4] = bytes(4)
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}.*completed"):
        poke(BAD, 5, global_size=(1,), local_size=(1,), wait=True, timeout=5)
    assert dev.gpu.dev.vram.read32(where) == 5 and struct.unpack("<I", dummy(dev)[:4])[0] == 0


def test_without_no_halt_on_fault_the_cp_stops(dev):
    """CP_DEBUG.CPG_UTCL1_ERROR_HALT_DISABLE ("NO halt CP when page fault") at its power-on 0: a signal
    written where nothing is mapped halts the CP, and the signal after it never comes. With it (as the
    driver programs) the write goes to the default page and the queue goes on."""
    bad = Signal(dev, BAD + 64, memoryview(bytearray(16)).cast("Q"))
    done = dev.new_signal(0)
    q = dev.compute_queue()
    q.signal(bad, 1)
    q.signal(done, 1)
    q.submit()
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}.*write by CPC.*completed"):
        done.wait(1, timeout=5)
    dev.gpu.dev.reg("GC").CP_DEBUG.update(CPG_UTCL1_ERROR_HALT_DISABLE=0)
    q = dev.compute_queue()
    q.signal(bad, 2)
    q.signal(done, 2)
    q.submit()
    with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}.*write by CPC.*stopped"):
        done.wait(2, timeout=2)
    assert done.value == 1
    dev.recover()


def test_with_the_ih_ring_off_the_driver_sees_nothing(dev, kernel_corpus):
    """The driver learns of faults from the IH ring, as amdgpu does: with the ring disabled no IV is
    written, the kernel completes on the default page, and the wait returns; only the hub's latch holds
    the fault (the ring's enable is what makes the fault visible)."""
    dev.gpu.dev.reg("OSSSYS").IH_RB_CNTL.update(RB_ENABLE=0)
    poke = dev.program(kernel_corpus["faults"], "poke")
    poke(BAD, 5, global_size=(1,), local_size=(1,), wait=True, timeout=5)
    assert dev.gpu.gmc.decode_fault("GC").address == BAD
    assert sim(dev).blocks["IH"].dropped >= 1


def test_a_previous_runs_address_faults_after_a_warm_boot(sim_bus, debian_firmware, kernel_corpus, monkeypatch):
    """Issue 17: after a clean exit the next open boots warm over a cleared root directory (gmc fini), so a
    virtual address of the previous run is mapped by nothing and a store there faults."""
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    d = hcq.open("am:sim", bus=sim_bus, fresh=True)
    old = d.alloc(64 << 20)
    va = old.va + (64 << 20) - 4096
    # host memory mapped under a root directory entry of its own (512 GiB apart), which the next run
    # never writes: only gmc fini's cleared root keeps it from translating after the warm boot
    far = d.gpu.gmc.map_system(d.gpu.dev.pci.alloc_dma(4096), align=1 << 39)
    poke = d.program(kernel_corpus["faults"], "poke")
    for where in (va, far.va):
        poke(where, 1, global_size=(1,), local_size=(1,), wait=True)   # mapped in this run
    d.close()
    d = hcq.open("am:sim", bus=sim_bus)
    try:
        assert d.gpu.boot_report.kind == "warm"
        poke = d.program(kernel_corpus["faults"], "poke")
        for where in (va, far.va):
            with pytest.raises(hcq.HCQFault, match=rf"page fault at {where:#x} \(VMID 0\): write by TCP"):
                poke(where, 2, global_size=(1,), local_size=(1,), wait=True, timeout=5)
            d.recover()
    finally:
        d.close()


def test_without_the_ih_pointer_reset_a_warm_boot_reports_the_previous_runs_fault(sim_bus, debian_firmware,
                                                                                   kernel_corpus, dropping_registers,
                                                                                   monkeypatch):
    """ih_v6_0_irq_init writes IH_RB_WPTR (and RPTR) 0 on every init: the IH keeps its write pointer across
    a warm boot (no reset in between), so without that write the new run reads the previous run's IVs again
    as if they were new."""
    from amdrv.ip.ih import IH

    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    for drop in (False, True):
        d = hcq.open("am:sim", bus=sim_bus, fresh=True)
        poke = d.program(kernel_corpus["faults"], "poke")
        with pytest.raises(hcq.HCQFault):
            poke(BAD, 1, global_size=(1,), local_size=(1,), wait=True, timeout=5)
        d.recover()
        d.close()
        if drop:
            monkeypatch.setattr(IH, "regs", property(lambda self: dropping_registers(self.dev.reg("OSSSYS"), ("IH_RB_WPTR",))))
        d = hcq.open("am:sim", bus=sim_bus)
        try:
            assert d.gpu.boot_report.kind == "warm"

            def work():
                ok = d.alloc(4)
                poke = d.program(kernel_corpus["faults"], "poke")   # uploads and waits
                poke(ok.va, 2, global_size=(1,), local_size=(1,), wait=True, timeout=5)
            if drop:
                with pytest.raises(hcq.HCQFault, match=rf"page fault at {BAD:#x}"):   # the old run's
                    work()
                d.recover()
            else:
                work()
        finally:
            d.close()


def test_without_the_broadcast_index_the_fault_response_reaches_no_shader_array(dev, kernel_corpus, monkeypatch):
    """gfxhub_v3_0_set_fault_enable_default sets GRBM_GFX_INDEX to broadcast "before programming
    GL1C_UTCL0_CNTL1": one register per shader array. A driver that selects an index instead (here the
    inverted broadcast value, SE/SA/instance 0xFF: no such array) sets no SA's SUCCESS response, and the
    faulting wave stops (the tool's reg-flip:GC.GRBM_GFX_INDEX)."""
    from amdrv import regs
    gc = dev.gpu.dev.reg("GC")
    gc.GL1C_UTCL0_CNTL1.update(RESP_FAULT_MODE=0)     # every SA back to its power-on response (broadcast index)
    real = regs.Register.write

    def write(reg, value=None, /, **fields):
        if reg.name == "GRBM_GFX_INDEX" and value == 0xE0000000:
            value ^= 0xFFFFFFFF
        return real(reg, value, **fields)
    monkeypatch.setattr(regs.Register, "write", write)
    dev.gpu.gmc._set_fault_enable_default(dev.gpu.gmc.hubs["GC"])
    monkeypatch.undo()
    assert any("reaches no shader array" in e.message for e in sim(dev).errors), sim(dev).errors[-3:]
    gc.GRBM_GFX_INDEX.write(0xE0000000)
    _hangs_on_fault(dev, kernel_corpus)
