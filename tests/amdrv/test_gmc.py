"""GMC init and VMID 0 mappings against the simulator's GMC: its translation equals the driver's for VRAM
and host memory on both hubs, a change without invalidation stays stale until the driver's flush, the
hub registers follow gmc_v11_0/gfxhub_v3_0/mmhub_v3_0, faults are decoded in words; Navi33 and small BAR."""
import random

import pytest

import pcie
from amdrv import pagetable
from amdrv.device import AMDevice
from amdrv.ip.gmc import GMC, SYSTEM_VA, VRAM_VA, GMCError
from amdrv.ip.nbio import NBIO
from gpusim.gmc import HubRefused


def sim_fault(g, *args, **kw):
    """The simulator's answer to a faulting access on hubs the driver programmed: the default page, the
    fault latched and posted (set_fault_enable_default(true)); returns the fault."""
    t = g.translate(*args, **kw)
    assert t.fault is not None, t
    return t.fault

GiB = 1 << 30
MiB = 1 << 20


def boot(bus, chip="navi31", gfxhub=True, **kw):
    fn = pcie.open_function("sim", chip, fresh=True, bus=bus, **kw)
    dev = AMDevice(f"am:sim:{chip}", fn)
    nbio, gmc = NBIO(dev), GMC(dev)
    nbio.init()
    gmc.init()
    if gfxhub:
        gmc.init_gfxhub()
    return dev, gmc, fn.dev


def check_same(gmc, s, va, hubs=("GC", "MM")):
    mine = gmc.translate(va)
    for hub in hubs:
        t = s.blocks["GMC"].translate(0, va, hub=hub)
        assert (t.system, t.addr) == (mine.system, mine.addr), f"{hub} hub at {va:#x}"


@pytest.mark.parametrize("chip", ["navi31", "navi33"])
def test_vram_and_system_mappings_translate_as_mapped(sim_bus, chip):
    dev, gmc, s = boot(sim_bus, chip)
    assert dev.fb_base == 0x80_0000_0000 and dev.mc_address(0x1000) == 0x80_0000_1000
    assert not s.errors
    rng = random.Random(3)
    big = gmc.map_vram(5 * MiB, tag="big")            # 2 MiB pages and 4 KiB pages
    small = gmc.map_vram(12 << 10, boot=True, tag="ring")
    assert big.va == VRAM_VA + big.vram.addr and small.vram.boot
    for m in (big, small):
        for off in [0, m.size - 1] + [rng.randrange(m.size) for _ in range(20)]:
            check_same(gmc, s, m.va + off)
            assert gmc.translate(m.va + off).addr == m.vram.addr + off
    with pytest.raises(GMCError, match="whole 4 KiB pages"):  # a partly backed last page is refused
        gmc.map_system(dev.pci.alloc_dma(5 * 4096 + 123))
    buf = dev.pci.alloc_dma(6 * 4096)
    sysm = gmc.map_system(buf, 5 * 4096 + 123)  # a size inside the buffer rounds up to whole pages
    assert sysm.va >= SYSTEM_VA and sysm.size == 6 * 4096
    for off in (0, 4096, 4096 + 17, buf.size - 1):
        check_same(gmc, s, sysm.va + off)
        assert s.blocks["GMC"].translate(0, sysm.va + off, hub="GC").addr == buf.bus_address(off)
    # the engines' view: bytes written by the CPU are what the GPU reads through the mapping
    buf.view[4096:4100] = b"host"
    assert s.blocks["GMC"].read(0, sysm.va + 4096, 4) == b"host"
    dev.vram.write(big.vram.addr + 3 * MiB, b"vram")
    assert s.blocks["GMC"].read(0, big.va + 3 * MiB, 4) != b"vram"    # held in the HDP (hdp_v6_0)
    gmc.nbio.hdp_flush()
    assert s.blocks["GMC"].read(0, big.va + 3 * MiB, 4) == b"vram"
    # unmapped again: both hubs fault, and the VRAM and VA space come back
    for m in (big, sysm, small):
        gmc.unmap(m)
        sim_fault(s.blocks["GMC"], 0, m.va, hub="GC")
    assert gmc.pt.tables() == 1 and dev.mm.in_use() == 0     # boot memory (small) is never freed
    again = gmc.map_system(buf)
    assert again.va == sysm.va


def test_a_change_without_invalidation_stays_stale_until_the_flush(sim_bus):
    dev, gmc, s = boot(sim_bus)
    g = s.blocks["GMC"]
    a, b = dev.mm.alloc(4096), dev.mm.alloc(4096)
    va = VRAM_VA + (1 << 40)
    gmc.pt.map(va, a.addr, 4096)
    assert g.translate(0, va, hub="GC").addr == a.addr and g.translate(0, va, hub="MM").addr == a.addr
    flushes = []
    gmc.pt._invalidate = lambda: flushes.append(1)     # a driver that forgot the flush
    gmc.pt.unmap(va, 4096)
    gmc.pt.map(va, b.addr, 4096)
    assert len(flushes) == 2
    assert g.translate(0, va, hub="GC").addr == a.addr  # the TLB still holds the old page
    assert g.translate(0, va, hub="MM").addr == a.addr
    gmc.flush_tlb()
    assert g.translate(0, va, hub="GC").addr == b.addr and g.translate(0, va, hub="MM").addr == b.addr


def test_gc_hub_comes_up_with_init_gfxhub_and_is_flushed_only_then(sim_bus):
    dev, gmc, s = boot(sim_bus, gfxhub=False)
    g = s.blocks["GMC"]
    m = gmc.map_vram(4096)
    # GCVM_INVALIDATE_ENG17_REQ still holds its power-on value (gc_11_0_0_default.h 0x02f80000)
    assert s.get("GC", "GCVM_INVALIDATE_ENG17_REQ") == s.power_on_value("GC", "GCVM_INVALIDATE_ENG17_REQ")
    assert s.get("MMHUB", "MMVM_INVALIDATE_ENG17_REQ") != 0
    assert g.translate(0, m.va, hub="MM").addr == m.vram.addr
    assert not g.hubs["GC"].walks           # the GC hub was never used (its context is not set up)
    with pytest.raises(HubRefused, match="SYSTEM_ACCESS_MODE 0"):   # the GC hub's power-on L1 mode: PA only
        g.translate(0, m.va, hub="GC")
    gmc.init_gfxhub()
    assert g.translate(0, m.va, hub="GC").addr == m.vram.addr


def test_hub_registers_follow_upstream(sim_bus):
    dev, gmc, s = boot(sim_bus)
    root = gmc.pt.page_table_base
    for ip, vm, mc in (("GC", "GCVM_", "GCMC_VM_"), ("MMHUB", "MMVM_", "MMMC_VM_")):
        get = lambda name: s.get(ip, name)  # noqa: E731
        assert get(vm + "CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32") | get(vm + "CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32") << 32 == root
        assert (get(vm + "CONTEXT0_PAGE_TABLE_END_ADDR_LO32"), get(vm + "CONTEXT0_PAGE_TABLE_END_ADDR_HI32")) == \
            (0xFFFFFFFF, 0xF)
        cntl = dev.reg("GC" if ip == "GC" else "MMHUB").reg(vm + "CONTEXT0_CNTL").decode(get(vm + "CONTEXT0_CNTL"))
        assert cntl["ENABLE_CONTEXT"] == 1 and cntl["PAGE_TABLE_DEPTH"] == 3 and cntl["PAGE_TABLE_BLOCK_SIZE"] == 0
        assert cntl["PDE0_PROTECTION_FAULT_ENABLE_INTERRUPT"] == cntl["VALID_PROTECTION_FAULT_ENABLE_INTERRUPT"] == 1
        assert (get(mc + "AGP_BASE"), get(mc + "AGP_TOP"), get(mc + "AGP_BOT")) == (0, 0, 0xFFFFFF)
        assert get(mc + "SYSTEM_APERTURE_LOW_ADDR") == dev.fb_base >> 18
        assert get(mc + "SYSTEM_APERTURE_HIGH_ADDR") == (dev.fb_base + dev.vram.size - 1) >> 18
        assert get(vm + "INVALIDATE_ENG17_ADDR_RANGE_HI32") == 0x1F
        assert get(vm + "L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32") == gmc.dummy_page.bus_address(0) >> 12
    # the MMHUB took and gave back engine 17's semaphore; the GC hub never used it
    assert s.blocks["GMC"].hubs["MM"].sem_held == [False] * 18


@pytest.mark.parametrize("chip", ["navi31", "navi33"])
def test_fault_registers_decoded_in_words(sim_bus, chip):
    dev, gmc, s = boot(sim_bus, chip)
    g = s.blocks["GMC"]
    assert gmc.decode_fault("GC") is None
    ro = dev.mm.alloc(4096)
    va = VRAM_VA + ro.addr
    gmc.pt.map(va, ro.addr, 4096, flags=pagetable.READABLE)
    sim_fault(g, 0, va + 8, write=True, client=8)   # TCP writes a read-only page
    f = gmc.decode_fault("GC")
    assert (f.hub, f.address, f.vmid, f.write, f.client) == ("GC", va, 0, True, "TCP")
    assert "no write permission" in str(f) and f"{va:#x}" in str(f) and "write by TCP" in str(f)
    assert gmc.decode_fault("GC") is None              # cleared
    sim_fault(g, 0, 0x7000_0000_0000, hub="MM", client=6)   # MP0 reads an unmapped address
    f = gmc.decode_fault("MM")
    assert f.mapping_error and not f.write and f.client == "MP0"
    assert str(f).startswith("MMHUB page fault at 0x700000000000 (VMID 0): read by MP0") and "no mapping" in str(f)
    with pytest.raises(GMCError, match="no hub 'XX'"):
        gmc.decode_fault("XX")


def test_small_bar_boot_region_visible_and_vram_above_the_window_mapped(sim_bus):
    dev, gmc, s = boot(sim_bus, small_bar=True)
    assert gmc.root.addr + 4096 <= dev.vram.visible       # the boot region sits inside the 256 MiB BAR
    m = gmc.map_vram(2 * GiB)                              # only fits above the window: heap up there
    assert m.vram.addr >= dev.vram.visible
    check_same(gmc, s, m.va + 12345)
    assert s.blocks["GMC"].translate(0, m.va).pte & (1 << 54)   # huge pages (PDE_PTE)
    before = dev.pci.counters.snapshot()
    dev.vram.write(m.vram.addr + 4096, b"indirect")        # the CPU reaches it through MM_INDEX/MM_DATA
    assert (dev.pci.counters - before).mmio_writes == 5   # MM_INDEX, MM_DATA per dword; MM_INDEX_HI once
    assert s.blocks["GMC"].read(0, m.va + 4096, 8) != b"indirect"   # MM_DATA writes pass the HDP too
    gmc.nbio.hdp_flush()
    assert s.blocks["GMC"].read(0, m.va + 4096, 8) == b"indirect"


def test_map_before_init_is_an_error(sim_bus):
    fn = pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus)
    gmc = GMC(AMDevice("am:sim", fn))
    with pytest.raises(GMCError, match="before GMC.init"):
        gmc.map_vram(4096)


# ---------------------------------------------------------------- over the USB bridge: tables in its window



@pytest.fixture
def bridged(sim_bus, monkeypatch, tmp_path):
    """NBIO + GMC up on a simulated Navi31 behind the simulated ASM24xx bridge (UAS): DMA memory is the
    bridge's SRAM window, not coherent."""
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    from pcie.usb.transport import open_function
    monkeypatch.setenv("DRIVERLESS_USB_LINK", "uas")
    br = usb_bridge.open_bridge("navi31", bus=sim_bus, fresh=True)
    fn = open_function(backend=usb_bridge.backend(bridge=br), lock_dir=tmp_path)
    dev = AMDevice(f"am:{fn.address}", fn)
    nbio, gmc = NBIO(dev), GMC(dev)
    nbio.init()
    gmc.init()
    gmc.init_gfxhub()
    yield dev, gmc, br.fn.dev
    fn.close()


def test_plain_simulator_keeps_page_tables_in_vram(sim_bus):
    dev, gmc, s = boot(sim_bus)
    gmc.map_vram(4096)
    assert gmc.pt._dma is None and gmc.pt.tables(system=True) == 0 and gmc.pt.tables() == 4


def test_over_the_bridge_page_tables_live_in_the_window_and_translate(bridged):
    dev, gmc, s = bridged
    g = s.blocks["GMC"]
    window_pages = sum(dev.pci._window)
    assert gmc.pt.root.buf is None          # the root stays in VRAM, where the context registers point
    before = dev.pci.counters.snapshot()
    m = gmc.map_vram(8 << 10, tag="kernel data")
    spent = dev.pci.counters - before
    # PDB1, PDB0, PTB in the window (one WRITE(16) each); only the root's 8-byte entry goes through BAR0
    assert gmc.pt.tables(system=True) == 3 and sum(dev.pci._window) == window_pages + 3
    assert spent.bulk_write_bytes <= 64 and spent.round_trips < 40, spent
    pde = gmc.pt.root.entries[m.va >> 39]
    assert pde & 3 == 3 and not pde & 4      # VALID | SYSTEM, not SNOOPED (amdgpu_ttm_tt_pde_flags, USWC)
    dev.vram.write(m.vram.addr + 4096, b"through the window")
    gmc.nbio.hdp_flush()                   # past the HDP
    dev.pci.bar(0).flush()                 # posted writes out
    for hub in ("GC", "MM"):               # the simulated walker reads the PDB1/PDB0/PTB from the SRAM
        assert g.read(0, m.va + 4096, 18, hub=hub) == b"through the window"
        assert g.translate(0, m.va + 4096, hub=hub).addr == m.vram.addr + 4096
    buf = dev.pci.alloc_dma(2 * 4096)
    buf.view[4096:4100] = b"host"
    buf.push()
    sysm = gmc.map_system(buf)
    assert g.read(0, sysm.va + 4096, 4) == b"host"
    assert g.translate(0, sysm.va, hub="GC").addr == buf.bus_address(0)
    # unmap: the next access faults (entries pushed before the invalidation), the window pages come back
    gmc.unmap(m)
    gmc.unmap(sysm)
    for va in (m.va, sysm.va):
        sim_fault(g, 0, va, hub="GC")
    assert gmc.pt.tables() == 1 and sum(dev.pci._window) == window_pages + 2   # just buf
    buf.free()


def test_over_the_bridge_a_full_window_is_a_clear_error(bridged):
    dev, gmc, s = bridged
    hog = []
    while True:
        try:
            hog.append(dev.pci.alloc_dma(4096))
        except pcie.PCIError:
            break
    with pytest.raises(pagetable.PageTableError,
                       match=rf"^{dev.name} VMID 0: no DMA memory for a new level-1 page table .*free DMA "
                             r"buffers or unmap GPU mappings no longer used"):
        gmc.map_vram(4096)
    assert gmc.pt.tables() == 1 and dev.mm.in_use() == 0      # nothing left behind, the VRAM freed
    for b in hog[:3]:
        b.free()
    m = gmc.map_vram(4096)                                     # room again: it works
    dev.vram.write(m.vram.addr, b"ok")
    gmc.nbio.hdp_flush()                   # past the HDP
    dev.pci.bar(0).flush()                 # posted writes out
    assert s.blocks["GMC"].read(0, m.va, 2) == b"ok"
    for b in hog[3:]:
        b.free()


# ---------------------------------------------------------------- each hub register the driver writes matters

def drop_writes(monkeypatch, dropped_register, *names):
    from amdrv.ip import gmc as gmc_mod
    for meth, prefix in (("vmr", "vm"), ("mcr", "mc")):
        orig = getattr(gmc_mod._Hub, meth)

        def get(self, stem, _orig=orig, _prefix=prefix):
            r = _orig(self, stem)
            return dropped_register(r) if getattr(self, _prefix) + stem in names else r
        monkeypatch.setattr(gmc_mod._Hub, meth, get)


def engine_reads(s, hub, va, n=8):
    """What an engine of the hub reads at VMID 0 va (SDMA0 on the GC hub, MP0 on the MMHUB): the bytes, or
    the exception that stopped it."""
    from gpusim.device import DMAError
    from gpusim.gmc import VMFault
    try:
        return s.blocks["GMC"].read(0, va, n, hub=hub, client=13 if hub == "GC" else 6)
    except (DMAError, VMFault) as e:
        return e


@pytest.mark.parametrize("hub", ["GC", "MM"])
@pytest.mark.parametrize("names, why", [
    (("MC_VM_MX_L1_TLB_CNTL",), "SYSTEM_ACCESS_MODE 0"),                    # power-on: PA only, no VM
    (("VM_L2_CNTL",), "ENABLE_L2_CACHE is 0"),                              # power-on: L2 off
    (("VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32", "VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32"), "range"),
])
def test_a_dropped_hub_write_leaves_engines_without_their_memory(sim_bus, monkeypatch, dropped_register, hub, names,
                                                                 why):
    """gfxhub/mmhub_v3_0 gart_enable: the L1 TLB (ENABLE_L1_TLB, SYSTEM_ACCESS_MODE 3), the L2
    (ENABLE_L2_CACHE) and the context's END address must each be written for a mapped page to be reached."""
    prefix = {"GC": "GC", "MM": "MM"}[hub]
    full = tuple((prefix + "MC_VM_" + n[len("MC_VM_"):]) if n.startswith("MC_VM_") else (prefix + n) for n in names)
    drop_writes(monkeypatch, dropped_register, *full)
    dev, gmc, s = boot(sim_bus)
    m = gmc.map_vram(4096)
    dev.vram.write(m.vram.addr, b"mapped!!")
    gmc.nbio.hdp_flush()     # past the HDP
    got = engine_reads(s, hub, m.va)
    assert got != b"mapped!!"
    if isinstance(got, bytes):       # redirected to the default page: the fault says why
        f = gmc.decode_fault(hub)
        assert f is not None and f.mapping_error and f.address == m.va
    else:
        assert why in str(got)
    monkeypatch.undo()
    dev, gmc, s = boot(sim_bus)
    m = gmc.map_vram(4096)
    dev.vram.write(m.vram.addr, b"mapped!!")
    gmc.nbio.hdp_flush()     # past the HDP
    assert engine_reads(s, hub, m.va) == b"mapped!!"


@pytest.mark.parametrize("hub", ["GC", "MM"])
def test_without_the_system_aperture_the_fb_is_not_reached_physically(sim_bus, monkeypatch, dropped_register, hub):
    """SYSTEM_APERTURE_LOW/HIGH (power-on 0): VMID 0's MC addresses of VRAM (the IH ring, the PSP's
    buffers) are then looked up in the page table, where nothing maps them: the access faults to the
    default page."""
    p = "GCMC_VM_" if hub == "GC" else "MMMC_VM_"
    drop_writes(monkeypatch, dropped_register, p + "SYSTEM_APERTURE_LOW_ADDR", p + "SYSTEM_APERTURE_HIGH_ADDR")
    dev, gmc, s = boot(sim_bus)
    dev.vram.write(0x10000, b"physical")
    gmc.nbio.hdp_flush()     # past the HDP
    assert s.blocks["GMC"].read(0, dev.mc_address(0x10000), 8, hub=hub, client=6) != b"physical"
    assert gmc.decode_fault(hub).address == dev.mc_address(0x10000)
    monkeypatch.undo()
    dev, gmc, s = boot(sim_bus)
    dev.vram.write(0x10000, b"physical")
    gmc.nbio.hdp_flush()     # past the HDP
    assert s.blocks["GMC"].read(0, dev.mc_address(0x10000), 8, hub=hub, client=6) == b"physical"
    if hub == "MM":
        assert s.blocks["GMC"].mc_read(dev.mc_address(0x10000), 8) == b"physical"


def test_mmhub_flush_without_the_semaphore_is_never_acknowledged(sim_bus, monkeypatch):
    """gmc_v11_0_flush_vm_hub takes engine 17's semaphore on the MMHUB (gmc_v11_0_use_invalidate_semaphore):
    without it the ACK is lost (the power-gating case upstream's comment names) and the flush times out."""
    from amdrv.ip import gmc as gmc_mod
    orig = gmc_mod._Hub.__init__

    def no_sem(self, *a, **kw):
        orig(self, *a, **kw)
        self.semaphore = False
    monkeypatch.setattr(gmc_mod._Hub, "__init__", no_sem)
    with pytest.raises(GMCError, match="MM hub TLB invalidation ack"):
        boot(sim_bus)


@pytest.mark.parametrize("hub", ["GC", "MM"])
def test_a_tlb_flush_never_acknowledged_is_a_gmc_error_naming_hub_and_vmid(sim_bus, monkeypatch, hub):
    """gmc_v11_0_flush_vm_hub polls INVALIDATE_ENG17_ACK for the VMID's bit: when it never comes the flush
    fails as a GMC error (not the NBIO one the shared wait raised before) naming device, hub, register, VMID,
    and the semaphore taken on the MMHUB is released all the same."""
    from amdrv import regs
    from amdrv.ip.nbio import NBIOError
    dev, gmc, s = boot(sim_bus)
    orig, orig_all = regs.Register.read, regs.read_all
    ack = ("GC" if hub == "GC" else "MM") + "VM_INVALIDATE_ENG17_ACK"
    monkeypatch.setattr(regs.Register, "read", lambda r: 0 if r.name == ack else orig(r))
    monkeypatch.setattr(regs, "read_all", lambda rs: [0 if r.name == ack else v      # batched reads too
                                                      for r, v in zip(rs, orig_all(list(rs)))])
    with pytest.raises(GMCError, match=rf"{dev.name}: .*{ack}: .*the {hub} hub TLB invalidation ack of VMID 3 "
                                       r"\(read 0x00000000, want bits 0x8 = 0x8\).*reset it") as e:
        gmc.flush_tlb(3)
    assert not isinstance(e.value, NBIOError)
    monkeypatch.undo()
    gmc.flush_tlb(3)        # the semaphore was released (a read of it acquires): the next flush goes through


@pytest.mark.parametrize("hub", ["GC", "MM"])
def test_without_the_fault_default_address_a_fault_reaches_no_memory(sim_bus, monkeypatch, dropped_register, hub):
    """gfxhub/mmhub_v3_0_init_system_aperture_regs point VM_L2_PROTECTION_FAULT_DEFAULT_ADDR at the dummy
    page; left at its power-on 0, a faulting access (here an MMHUB client such as the PSP reading, or an
    SDMA read on the GC hub) goes to bus address 0, where nothing answers."""
    vm = "GCVM_" if hub == "GC" else "MMVM_"
    drop_writes(monkeypatch, dropped_register, vm + "L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32", vm + "L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32")
    dev, gmc, s = boot(sim_bus)
    got = engine_reads(s, hub, 0x7000_0000_0000)
    assert not isinstance(got, bytes) and "bus address 0x0" in str(got)
    monkeypatch.undo()
    dev, gmc, s = boot(sim_bus)
    gmc.dummy_page.view[:8] = b"dummy!!!"
    assert engine_reads(s, hub, 0x7000_0000_0000) == b"dummy!!!"
    assert gmc.decode_fault(hub).address == 0x7000_0000_0000


@pytest.mark.parametrize("hub", ["GC", "MM"])
@pytest.mark.parametrize("half", ["LO32", "HI32"])
def test_without_the_engine_range_a_remapped_page_reads_stale(sim_bus, monkeypatch, dropped_register, hub, half):
    """gfxhub/mmhub_v3_0_program_invalidation give every engine the whole address range (LO32 all ones, HI32
    0x1F). Either half left at its power-on 0 (gc_11_0_0_default.h) and engine 17's flushes miss the host
    window at SYSTEM_VA (one page at 0xF800_0000_0000, or the VAs below 16 TiB): a page unmapped and
    another mapped at the same VA still reads the old page."""
    drop_writes(monkeypatch, dropped_register, f"{hub}VM_INVALIDATE_ENG17_ADDR_RANGE_{half}")

    def remapped_reads():
        dev, gmc, s = boot(sim_bus)
        old, new = dev.pci.alloc_dma(4096), dev.pci.alloc_dma(4096)
        old.view[:8], new.view[:8] = b"old page", b"new page"
        m = gmc.map_system(old)
        assert engine_reads(s, hub, m.va) == b"old page"
        gmc.unmap(m)
        again = gmc.map_system(new)
        assert again.va == m.va
        return engine_reads(s, hub, m.va)

    assert remapped_reads() == b"old page"
    monkeypatch.undo()
    assert remapped_reads() == b"new page"


class InvertedRegister:
    """A register whose every write lands with all 32 bits inverted (tools/mutate.py's reg-flip)."""

    def __init__(self, reg):
        self._reg = reg

    def write(self, value=None, /, **fields):
        value = self._reg.defn.encode(value or 0, **fields) ^ 0xFFFFFFFF
        self._reg.mmio.write32(self._reg.addr, value)
        return value

    def update(self, old=None, /, **fields):     # old: the value read already (amdrv.regs.Register.update)
        return self.write(self._reg.read() if old is None else old, **fields)

    def __getattr__(self, name):
        return getattr(self._reg, name)


@pytest.mark.parametrize("name, why", [
    ("MMVM_L2_PROTECTION_FAULT_CNTL", "fault on read"),   # no ENABLE_DEFAULT bit: the client's access fails
    ("MMVM_L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32", "bus address"),   # a default page where nothing answers
    ("MMVM_L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32", "bus address"),
])
def test_an_inverted_mmhub_fault_setting_loses_the_default_page(sim_bus, monkeypatch, name, why):
    """mmhub_v3_0_set_fault_enable_default(true) and init_system_aperture_regs: an MMHUB client's fault (the
    PSP reading where nothing is mapped) is answered with the dummy page. Either written inverted and the
    access fails instead."""
    drop_writes(monkeypatch, InvertedRegister, name)
    dev, gmc, s = boot(sim_bus)
    got = engine_reads(s, "MM", 0x7000_0000_0000)
    assert not isinstance(got, bytes) and why in str(got)
    monkeypatch.undo()
    dev, gmc, s = boot(sim_bus)
    gmc.dummy_page.view[:8] = b"dummy!!!"
    assert engine_reads(s, "MM", 0x7000_0000_0000) == b"dummy!!!"
