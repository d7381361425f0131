"""A dispatch that stops is reported with what the SQ shows of its waves (SQ_IND_INDEX/SQ_IND_DATA, as
gfx_v11_0_read_wave_data reads them): a halted wave at once, naming the kernel and the instruction, not after
the timeout; an illegal instruction by SQ_WAVE_TRAPSTS.ILLEGAL_INST; a kernel that never ends by where its
waves are running."""
import time

import pytest

import hcq
from rdna3 import assemble
from rdna3.codeobj import KernelSpec, write_code_object


def _program(dev, name, code):
    return dev.program(write_code_object([KernelSpec(name, code, vgpr_count=8, sgpr_count=8)]), name)


def test_an_instruction_the_simulator_does_not_model_is_reported_at_once(dev):
    prog = _program(dev, "needs_sad", assemble("v_mov_b32 v1, 0\nv_sad_u8 v1, v1, v1, v1\ns_endpgm\n"))
    t0 = time.perf_counter()
    with pytest.raises(hcq.HCQFault, match=r"did not reach \d+, a shader wave halted .*stopped at PACKET3 DISPATCH_DIRECT"
                                           r".*no VM fault latched; "
                                           r"SQ \(SE0 SA0 WGP0\): wave 0 halted at PC 0x[0-9a-f]+ \(kernel needs_sad\+0x4: "
                                           r"v_sad_u8 v1, v1, v1, v1\), EXEC 0xffffffff: no exception in SQ_WAVE_TRAPSTS"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=30)
    assert time.perf_counter() - t0 < 10          # not the 30 s timeout
    # the simulator's own record names the same instruction
    sim = dev.gpu.dev.pci.dev
    assert any("v_sad_u8 v1, v1, v1, v1: unsupported: no semantics for v_sad_u8" in str(e) for e in sim.errors)
    dev.recover()
    assert "no shader wave resident" in dev._wave_report()      # the dequeue took the waves


def test_an_illegal_instruction_sets_trapsts(dev):
    prog = _program(dev, "illegal", bytes(4) + assemble("s_endpgm"))     # VOP2 opcode 0: no gfx11 instruction
    with pytest.raises(hcq.HCQFault, match=r"wave 0 halted at PC 0x[0-9a-f]+ \(kernel illegal\+0x0: undecodable .*\), EXEC 0xffffffff: "
                                           r"illegal instruction \(SQ_WAVE_TRAPSTS.ILLEGAL_INST\)"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=30)
    dev.recover()


def test_a_kernel_that_never_ends_times_out_naming_where_its_waves_run(dev, kernel_corpus):
    dev.gpu.dev.pci.dev.blocks["CP"].kernel_max_steps = 5000
    flag = dev.alloc(4)
    dev.copyin(flag, bytes(4))
    spin = dev.program(kernel_corpus["faults"], "spin")
    with pytest.raises(hcq.HCQTimeout, match=r"did not reach \d+ within 0.5 s .*wave 0 running at PC 0x[0-9a-f]+ "
                                             r"\(kernel spin\+0x[0-9a-f]+: s_\w+"):
        spin(flag, global_size=(1,), local_size=(32,), wait=True, timeout=0.5)
    dev.recover()


def test_a_driver_that_reads_no_wave_state_cannot_name_the_instruction(dev, monkeypatch):
    """Mutation: SQ_IND_INDEX written with the register number in the wave field reads nothing valid."""
    from amdrv import hcq as amhcq
    monkeypatch.setattr(amhcq.AMHCQDevice, "_read_wave", lambda self, slot, ix: (
        self.gc.SQ_IND_INDEX.write(ix), self.gc.SQ_IND_DATA.read())[1])
    prog = _program(dev, "needs_sad", assemble("v_sad_u8 v1, v1, v1, v1\ns_endpgm\n"))
    with pytest.raises(hcq.HCQTimeout, match="no shader wave resident"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=1)
    dev.recover()


def test_a_driver_that_never_writes_sq_ind_index_cannot_name_the_instruction(dev, monkeypatch, dropping_registers):
    """Mutation (tools/mutate reg-drop:GC.SQ_IND_INDEX): every SQ_IND_INDEX write lost, SQ_IND_DATA reads the
    register the index held (0: no ixSQ_WAVE_STATUS, so no wave looks valid)."""
    from amdrv import hcq as amhcq
    real = amhcq.AMHCQDevice._read_wave

    def read_wave(self, slot, ix):
        gc, self.gc = self.gc, dropping_registers(self.gc, {"SQ_IND_INDEX"})
        try:
            return real(self, slot, ix)
        finally:
            self.gc = gc
    monkeypatch.setattr(amhcq.AMHCQDevice, "_read_wave", read_wave)
    prog = _program(dev, "needs_sad", assemble("v_sad_u8 v1, v1, v1, v1\ns_endpgm\n"))
    with pytest.raises(hcq.HCQTimeout, match="no shader wave resident"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=1)
    dev.recover()


def test_a_halted_wave_is_named_from_the_program_loaded_last_where_a_freed_one_lay(dev):
    # found by tools/mutate.py's halted-wave phase: a program loaded inside the range of a freed, larger one
    # (at another start address) was reported as "code object at ...", the stale image being looked up first
    big = _program(dev, "big", assemble("s_nop 0\n" * 2048 + "s_endpgm"))
    dev.free(big.handle.image)
    del big
    pad = dev.alloc(4096)
    prog = _program(dev, "illegal", bytes(4) + assemble("s_endpgm"))
    old = [(va, size) for va, size, co in dev._code_images if "big" in co.kernels]
    assert old and old[0][0] < prog.handle.image.va < old[0][0] + old[0][1]     # the case this test is about
    with pytest.raises(hcq.HCQFault, match=r"wave 0 halted at PC 0x[0-9a-f]+ \(kernel illegal\+0x0: undecodable"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=30)
    dev.recover()
    dev.free(pad)


def test_a_later_hang_does_not_report_the_waves_of_a_kernel_before_recover(dev):
    # found by tools/fuzz/packets.py: after a halted wave and recover(), a queue stopped at an unknown PM4
    # opcode was reported as "a shader wave halted" at the old kernel's instruction
    prog = _program(dev, "illegal", bytes(4) + assemble("s_endpgm"))
    with pytest.raises(hcq.HCQFault, match="a shader wave halted"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=30)
    dev.recover()
    dev.compute.submit([0xC0006D00, 0])                    # PACKET3 opcode 0x6d: none the CP knows
    q = dev.compute_queue()
    q.signal(dev.timeline, dev.next_timeline())
    q.submit()
    with pytest.raises(hcq.HCQTimeout, match=r"within 0.5 s .*stopped at PACKET3 opcode 0x6d.*no shader wave resident"):
        dev.synchronize(timeout=0.5)
    dev.recover()


def test_a_store_whose_data_vgprs_lie_past_the_allocation_halts_naming_them(dev):
    # found by tools/fuzz/packets.py: the executor raised an IndexError for the data operand, which became the
    # stop's reason; every VGPR operand is checked against the allocation
    prog = _program(dev, "past", assemble("s_load_b64 s[2:3], s[0:1], 0x0\ns_waitcnt lgkmcnt(0)\n"
                                          "global_store_b128 v0, v[6:9], s[2:3]\ns_endpgm\n"))
    with pytest.raises(hcq.HCQFault, match=r"a shader wave halted .*global_store_b128 v0, v\[6:9\], s\[2:3\]"):
        prog(global_size=(1,), local_size=(32,), wait=True, timeout=30)
    sim = dev.gpu.dev.pci.dev
    assert any("v6 is beyond the kernel's 8 VGPRs" in str(e) for e in sim.errors)
    assert not any("IndexError" in str(e) for e in sim.errors)
    dev.recover()


def test_a_dispatch_of_millions_of_short_workgroups_lets_the_driver_time_out(dev):
    # found by tools/fuzz/packets.py (a corrupted DISPATCH_DIRECT grid): the simulator ran every workgroup
    # inside the doorbell write, since each batch ended below the slice budget; the budget now spans batches
    prog = _program(dev, "short", assemble("s_endpgm"))
    t0 = time.perf_counter()
    with pytest.raises(hcq.HCQTimeout, match=r"within 0.5 s"):
        prog(global_size=(1 << 20,), local_size=(32,), wait=True, timeout=0.5)
    assert time.perf_counter() - t0 < 10
    dev.recover()
