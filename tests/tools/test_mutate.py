"""tools/mutate.py, the mutation tool: a quick subset in CI. The baseline workload is deterministic, a few
mutations that break boot or kernels today are caught (register drops, a packet field, named steps), a
mutation that changes nothing survives, and a run that spins is killed and reported as a hang. The full
run and its figures are in docs/fidelity.md ("Mutation figures")."""
import pytest

from tools import mutate as M

# caught today, each for a reason the hardware shares: the queue's ring address, the MEC doorbell window's
# lower bound (its power-on value 0x110, gc_11_0_0_default.h, is above the rings' doorbells),
# the PSP's bootloader command register, the dispatch's workgroup count, the SDMA copy's byte count; the
# PSP's command order (SMU firmware before SETUP_TMR), and issue 17's map-loop mutation (a clear error now)
MUST_CATCH = ["reg-drop:GC.CP_HQD_PQ_BASE", "reg-drop:GC.CP_MEC_DOORBELL_RANGE_LOWER",
              "reg-drop:MP0.MP0_SMN_C2PMSG_35", "pkt-zero:PM4.DISPATCH_DIRECT.DIM_X",
              "pkt-zero:SDMA.COPY_LINEAR.COUNT"]
STEPS = ["step:setup-tmr-before-smu-fw", "step:pagetable-2m-at-1g-level"]
# each caught by one of the workload's later phases: the generic-pointer kernel (SH_MEM_BASES), the CP's own
# fault (CP_DEBUG's no-halt bit), the hung queues before recover (the CP's GRBM soft reset), SDMA after
# recover (RB_WPTR zeroed), the IH ring wrap (its rptr doorbell), a previous run's address after the warm
# boot (gmc fini), the board without SCPM (the allowed-features mask), SDMA after a recovery without its GRBM
# soft reset (the engine stays frozen). The thermal and PCI-reset phases' steps (no-thermal-alert,
# no-pci-reset) are caught by the full run and by tests/amdrv/test_smi.py and test_boot_recovery.py. A warm
# boot decided from the clean flag alone is caught where the SMU stopped between runs (issue 17). Since the
# register-drop round of issue 11: a queue re-created until the KIQ's ring has taken more than 1024 dwords
# (CP_HQD_PQ_CONTROL, written by MMIO for the KIQ alone: the power-on ring size), a halted wave named from the
# SQ (SQ_IND_INDEX), SDMA1 running an indirect buffer (IB_CNTL.IB_ENABLE), the timeline's value after SDMA
# copies (a fence written with the wrong value), an SDMA fault read from the IH ring through the AM driver's
# own API before hcq moves the IH's write-pointer write-back (after a copy from an SDMA0 indirect buffer:
# SDMA0_QUEUE0_IB_CNTL is caught there, by the full run).
LATER_PHASES = ["reg-drop:GC.SH_MEM_BASES", "step:cp-halts-on-fault", "step:recover-no-grbm-soft-reset-cp",
                "reg-drop:GC.SDMA0_QUEUE0_RB_WPTR", "reg-drop:OSSSYS.IH_DOORBELL_RPTR", "step:no-gmc-fini",
                "step:no-set-allowed-features-mask", "step:recover-no-sdma-soft-reset",
                "step:warm-boot-ignores-stopped-firmware", "reg-drop:GC.CP_HQD_PQ_CONTROL",
                "reg-drop:GC.SQ_IND_INDEX", "reg-drop:GC.SDMA1_QUEUE0_IB_CNTL", "pkt-flip:SDMA.FENCE.DATA",
                "reg-drop:OSSSYS.IH_RB_WPTR_ADDR_LO"]


@pytest.fixture(scope="module")
def rig(tmp_path_factory, debian_firmware):
    if not M.shutil.which("clang-15"):
        pytest.skip("clang-15 and ld.lld-15 are needed to build OpenCL kernels (make test installs them)")
    mp = pytest.MonkeyPatch()   # module scope: set up before conftest's per-test environment, so set it here
    mp.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    mp.setenv("DRIVERLESS_CACHE", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("DRIVERLESS_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
    mp.setenv("DRIVERLESS_OFFLINE", "1")
    mp.delenv("DRIVERLESS_COLD_BOOT", raising=False)
    kernels = M.build_kernels(tmp_path_factory.mktemp("mutate"))
    M.warm_up()     # as the tool does before forking: each forked run starts with everything imported
    base = M.baseline(kernels, jobs=2)    # two runs; MutateError unless they agree
    yield kernels, base
    mp.undo()


@pytest.fixture(autouse=True)
def firmware(debian_firmware, monkeypatch):
    # conftest's per-test environment clears the firmware dir; the forked runs need it
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def seen_first(base, phase):
    return next(w for p, w in base["outcome"] if p == phase)


def test_baseline_is_deterministic_and_complete(rig):
    kernels, base = rig
    phases = [p for p, _ in base["outcome"]]
    assert phases[0] == "cold boot" and phases[-1] == "small bar warm boot" and "final fini" in phases
    out = dict((p, w) for p, w in base["outcome"])
    boots = [seen_first(base, p) for p in ("cold boot", "warm boot", "mode1 boot", "board without scpm")]
    assert [b.split(",")[0] for b in boots] == ["cold boot", "warm boot", "cold boot after mode1 reset", "cold boot"]
    assert not any(b.endswith("SMU features 0x0") for b in boots)     # DPM up on every boot
    assert out["fault"].startswith("fault reported") and out["recover"] == "poke after recover 77"
    seen = lambda phase: [w for p, w in base["outcome"] if p == phase]  # noqa: E731
    assert seen("generic pointers")[0].startswith("generic_lds_private right")
    assert seen("cp fault")[0].startswith("fault reported") and "write by CPC" in seen("cp fault")[0]
    assert seen("cp fault")[0].endswith("completed") and seen("cp fault")[1] == "signal after it 1"
    assert seen("hang")[0].startswith("timeout") and seen("hang")[1] == "signals 0 0"
    # past the KIQ's own 2048 dwords: the driver reads the rptr the CP reports (the CP_HQD_PQ_RPTR_REPORT_ADDR drop
    # and CP_HQD_PQ_CONTROL flip are caught there by the full run; tests/amdrv/test_queue.py has both alone)
    assert seen("a queue re-created many times")[0].endswith("re-creations (the KIQ's ring wrapped 1x), fence 5")
    assert seen("sdma1 with an indirect buffer") == ["fence 7, data right"]
    assert seen("sdma copies")[-1] == "timeline at the last value signalled"
    assert "halted at PC # (kernel illegal+#: undecodable" in seen("halted wave")[0]
    assert seen("recover after halted wave")[1] == "poke after recover 77"
    assert len(seen("sdma after recover")) == 4 and "in order, overflows 0" in out["ih ring wrap"]
    assert [w.split(":")[0] for w in seen("old addresses after warm boot")] == ["fault reported"] * 2
    assert out["board without scpm"] == "closed"
    assert "AM alone: fence 1, copy right, words right, 1 fault(s) on the IH ring, none latched" in seen("board without scpm")
    assert out["thermal alert"] == "thermal interrupts: above below"
    assert out["death in the bootloader"] == "died in the bootloader"
    assert seen("pci reset boot")[0] == "cold boot, SMU features 0x7ffffffffffff"
    assert seen("pci reset boot")[-1] == "platform reset: bus"
    assert seen("firmware stopped boot")[0].startswith("cold boot,")
    assert "the SMU no longer runs" in seen("firmware stopped boot")[-1]
    # the PSP's read faults in the MMHUB and its default page answers (the fault default address and control are
    # caught there by the full run; tests/amdrv/test_gmc.py has them alone)
    assert out["psp fuzzer's unmapped command buffer"] == "TEE_SUCCESS; next command ran"
    # what each boot that follows a run on the same GPU cost as the GPU saw it (BootCost): the warm boots take the
    # SMU versions, top clock levels, reserved-VRAM size and (small BAR) discovery key from that run's records
    cost = {p: [w for q, w in base["outcome"] if q == p and w.startswith("boot cost")]
            for p in ("cold boot", "warm boot", "mode1 boot", "board without scpm", "small bar warm boot")}
    assert cost["cold boot"] == cost["board without scpm"] == []
    assert "GetSmuVersion x1" in cost["mode1 boot"][0] and "Mode1Reset x1" in cost["mode1 boot"][0]
    for p in ("warm boot", "small bar warm boot"):
        assert "GetSmuVersion" not in cost[p][0] and "GetMaxDpmFreq" not in cost[p][0], cost[p]
        assert cost[p][0].endswith("; 0 ROM dwords; 0 discovery bytes"), cost[p]
    assert seen("warm boot")[1].startswith("SMU firmware reports ") and "interface 0x" in seen("warm boot")[1]
    names = {n for (_, n), *_ in base["regs"].values()}
    assert {"CP_HQD_PQ_BASE", "MMVM_INVALIDATE_ENG17_REQ", "S2A_DOORBELL_ENTRY_2_CTRL"} <= names
    # the index/data path is resolved to its target register
    assert any(via == "RSMU" for _, _, via, *_ in base["regs"].values())
    # whether every write is the register's published power-on value (gc_11_0_0_default.h)
    power_on = {n: p for (_, n), _, _, p in base["regs"].values()}
    assert power_on["CP_HQD_VMID"] and not power_on["CP_HQD_PQ_BASE"] and not power_on["MMVM_L2_CNTL"]
    muts, excluded = M.mutations(base, "regs")
    assert "GCVM_INVALIDATE_ENG3_ADDR_RANGE_LO32" in excluded and "GDS_OA_VMID15" in excluded
    assert not any("ENG3_ADDR_RANGE" in m.name or "GDS_VMID7" in m.name for m in muts)
    # counted apart (still mutated): CP_VMID_RESET as recover() writes it (0xfffffffe: VMIDs 1-15), CP_ME_CNTL
    apart = M.apart_registers(base)
    assert {"GC.CP_VMID_RESET", "GC.CP_ME_CNTL", "MMHUB.MMVM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_LO32"} <= set(apart)
    assert any(m.name == "reg-drop:GC.CP_VMID_RESET" for m in muts) and "GC.CP_HQD_PQ_BASE" not in apart
    assert any(k[:2] == ("PM4", "SET_SH_REG") and k[2] == "COMPUTE_PGM_LO" for k in base["packets"])


def _all_caught(rig, names):
    kernels, base = rig
    muts, _ = M.mutations(base, "all", names)
    assert sorted(m.name for m in muts) == sorted(names)
    results = M.run(muts, base, kernels, jobs=2)
    for r in results:
        assert r.status == "caught" and r.how and "FirmwareError" not in r.how, (r.mutation, r.status, r.how)


# two tests, each well inside the 120 s timeout on a loaded 2-core host (one took ~92 s alone)
def test_mutations_that_break_the_workload_are_caught(rig):
    _all_caught(rig, MUST_CATCH + STEPS)


def test_mutations_that_break_a_later_phase_are_caught(rig):
    _all_caught(rig, LATER_PHASES)


def test_a_lost_boot_record_is_caught_by_what_the_warm_boot_asks_again(rig):
    """The boot records (nbio.RECORD_REGS, DRIVER_SCRATCH_5) change no result, only what the next boot costs:
    dropped, the warm boot asks the SMU for its versions again, and the small-BAR board's warm boot reads the
    discovery header through MM_DATA again (BootCost counts both on the simulator's side)."""
    kernels, base = rig
    muts, _ = M.mutations(base, "regs", ["reg-drop:NBIO.BIF_BX0_DRIVER_SCRATCH_8",
                                         "reg-drop:NBIO.BIF_BX0_DRIVER_SCRATCH_6"])
    res = {r.mutation: r for r in M.run(muts, base, kernels, jobs=2)}
    versions, key = res["reg-drop:NBIO.BIF_BX0_DRIVER_SCRATCH_8"], res["reg-drop:NBIO.BIF_BX0_DRIVER_SCRATCH_6"]
    assert versions.status == "caught" and versions.how.startswith("warm boot: boot cost"), versions
    assert "GetDriverIfVersion x1" in versions.how and "GetSmuVersion x1" in versions.how, versions
    assert key.status == "caught" and key.how.startswith("small bar warm boot: boot cost"), key
    assert " 0 discovery bytes" not in key.how, key


def test_usb_only_steps_are_caught_by_the_usb_phases(rig):
    """The driver steps that exist only behind the USB bridge (docs/usb.md), judged by the workload's USB phases
    (run for the step:usb-* mutations alone, against a baseline of their own): the stock firmware's MQD page
    not pushed before MAP_QUEUES leaves the queue dead; on the open firmware a VRAM ring push without its HDP flush
    leaves the KIQ reading stale packets, and a copy-in chunk copied without its sentinel wait lands stale bytes
    (here the kernel's code: the wave halts)."""
    kernels, base = rig
    names = ["step:usb-mqd-page-not-pushed", "step:usb-vram-push-without-hdp-flush", "step:usb-copy-without-sentinel-wait"]
    muts, _ = M.mutations(base, "steps", names)
    # twice the tool's hang limit: these runs are the whole workload and the USB phases, on a loaded host
    res = {r.mutation: r for r in M.run(muts, base, kernels, jobs=2, timeout=2 * M.DEFAULT_TIMEOUT)}
    assert [p for p, _ in base["usb_outcome"][-8:]].count("usb open firmware") == 4
    mqd, hdp, sentinel = (res[n] for n in names)
    assert mqd.status == "caught" and mqd.how.startswith("usb stock firmware: error HCQTimeout"), mqd
    assert hdp.status == "caught" and hdp.how.startswith("usb open firmware: error"), hdp
    assert sentinel.status == "caught" and sentinel.how.startswith("usb open firmware: error"), sentinel


def test_a_harmless_mutation_survives_and_a_spin_is_a_hang(rig):
    kernels, base = rig
    noop = M.Mutation("step:noop", "steps", step=M.Step("noop", "changes nothing", lambda c: None))
    import amdrv.hcq

    def spin(c):
        c.patch(amdrv.hcq.AMHCQDevice, "program", lambda orig: lambda *a, **kw: [None for _ in iter(int, 1)])
    hang = M.Mutation("step:spin", "steps", step=M.Step("spin", "a driver loop that never ends", spin), timeout=3)
    gone = M.Mutation("step:gone", "steps", step=M.Step("gone", "a target the driver lost",
                                                        lambda c: c.skip(amdrv.hcq.AMHCQDevice, "no_such_method")))
    vmid = M.mutations(base, "regs", ["reg-drop:GC.CP_HQD_VMID"])[0]
    hang_r, noop_r, gone_r, vmid_r = M.run([hang, noop, gone] + vmid, base, kernels, jobs=2)
    assert noop_r.status == "survived", noop_r
    # the driver writes CP_HQD_VMID's power-on value 0: the drop survives, marked expected for that reason
    assert vmid_r.status == "survived" and vmid_r.how == "expected: " + M.POWER_ON_WHY, vmid_r
    assert hang_r.status == "caught" and hang_r.how.startswith("hang"), hang_r
    assert gone_r.status == "n/a" and "no such target" in gone_r.how, gone_r


def test_the_summary_counts_drops_held_or_expected():
    R = M.Result
    results = [R("reg-drop:GC.A", "regs", "GC/A", "caught", "boot: error"),
               R("reg-drop:GC.B", "regs", "GC/B", "survived", "expected: " + M.POWER_ON_WHY),
               R("reg-drop:GC.C", "regs", "GC/C", "survived", "caught by tests/x.py::t, not by the workload"),
               R("reg-drop:GC.D", "regs", "GC/D", "survived", "")]
    lines = M.summary(results, [])
    assert lines[0].startswith("registers caught 1 of 4 (25%)")
    assert lines[2].startswith("register drops the simulator holds the driver to, or that the card lets pass "
                               "too: 3 of 4 (75%)")


def test_the_summary_prints_the_drop_figure_with_and_without_the_registers_counted_apart():
    """Issue 11's exclusion (EXCLUDE, left out of both) and the registers of contexts 1-15 and the graphics ME
    (APART): both figures are printed, so the denominator never moves quietly."""
    R = M.Result
    results = [R("reg-drop:GC.A", "regs", "GC/A", "caught", "boot: error"),
               R("reg-drop:GC.GCVM_L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_LO32", "regs", "GC/GCVM", "survived", ""),
               R("reg-drop:GC.CP_ME_CNTL", "regs", "GC/CP", "survived", ""),
               R("reg-drop:GC.D", "regs", "GC/D", "survived", "")]
    lines = M.summary(results, ["GCVM_INVALIDATE_ENG3_ADDR_RANGE_LO32"])
    assert lines[0].startswith("registers caught 1 of 4 (25%) by dropping their writes (1 left out")
    assert lines[1].startswith("registers caught 1 of 2 (50%) by dropping their writes when also leaving out the 2 ")
    # CP_VMID_RESET is apart only while what the driver writes asks for VMIDs 1-15 alone
    assert M.apart_reason("CP_VMID_RESET", [0xFFFFFFFE]) and not M.apart_reason("CP_VMID_RESET", [0xFFFFFFFF])
    assert M.apart_reason("MMVM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_HI32") and not M.apart_reason("CP_MEC_CNTL")
