"""IH ring 0 against the simulator: set-up registers as ih_v6_0 programs them, IV decoding (checked on
raw dwords too), GMC faults delivered and decoded in words, the rptr doorbell, and ring overflow."""
import struct

import pytest

import pcie
from amdrv import pagetable
from amdrv.autogen import ih as IHIDS
from amdrv.device import AMDevice
from amdrv.ip.gmc import GMC, VRAM_VA
from amdrv.ip.ih import IH, IHError, IVEntry
from amdrv.ip.nbio import DOORBELL_IH, NBIO
from gpusim.device import IVEntry as SimIV


def sim_fault(g, *args, **kw):
    """The simulator's answer to a faulting access on hubs the driver programmed: the default page, the
    fault latched and posted (set_fault_enable_default(true)); returns the fault."""
    t = g.translate(*args, **kw)
    assert t.fault is not None, t
    return t.fault



def boot(bus, chip="navi31", ring_size=None):
    fn = pcie.open_function("sim", chip, fresh=True, bus=bus)
    dev = AMDevice(f"am:sim:{chip}", fn)
    nbio, gmc = NBIO(dev), GMC(dev)
    ih = IH(dev) if ring_size is None else IH(dev, ring_size)
    nbio.init()
    gmc.init()
    ih.init()
    gmc.init_gfxhub()
    return dev, gmc, ih, fn.dev


def test_decode_follows_amdgpu_ih_decode_iv_helper():
    raw = struct.pack("<8I", 0x8A05010A, 0x89ABCDEF, 0x80001234, 0x80000042, 1, 2, 3, 4)
    iv = IVEntry.decode(raw)
    assert (iv.client_id, iv.src_id, iv.ring_id, iv.vmid, iv.vmid_src) == (0x0A, 0x01, 0x05, 0xA, 1)
    assert iv.timestamp == 0x1234_89ABCDEF and iv.timestamp_src == 1
    assert (iv.pasid, iv.pasid_src, iv.src_data) == (0x42, 1, (1, 2, 3, 4))
    assert iv.client == "GFX" and iv.source == "UTCL2_DATA_POISONING"
    assert str(iv) == ("IV from GFX (10) UTCL2_DATA_POISONING (1), ring 5, VMID 10 (MMHUB), PASID 66, "
                       f"timestamp {0x1234_89ABCDEF}, data [0x1 0x2 0x3 0x4]")
    assert IVEntry.decode(struct.pack("<8I", 0x1234, 0, 0, 0, 0, 0, 0, 0)).source == "source 18"  # BIF, unnamed


def test_ring_registers_as_ih_v6_0_programs_them(sim_bus):
    dev, gmc, ih, s = boot(sim_bus)
    o = dev.reg("OSSSYS")
    ring = dev.mc_address(ih.block.addr)
    assert s.get("OSSSYS", "IH_RB_BASE") == (ring >> 8) & 0xFFFFFFFF
    assert s.get("OSSSYS", "IH_RB_BASE_HI") == ring >> 40
    cntl = o.IH_RB_CNTL.decode(s.get("OSSSYS", "IH_RB_CNTL"))
    assert cntl["RB_ENABLE"] == cntl["ENABLE_INTR"] == cntl["WPTR_WRITEBACK_ENABLE"] == cntl["WPTR_OVERFLOW_ENABLE"] == 1
    assert cntl["WPTR_OVERFLOW_CLEAR"] == 0 and cntl["MC_SPACE"] == 4
    assert 4 << cntl["RB_SIZE"] == 256 << 10 == s.blocks["IH"].ring_size()
    db = o.IH_DOORBELL_RPTR.decode(s.get("OSSSYS", "IH_DOORBELL_RPTR"))
    assert db == {"OFFSET": DOORBELL_IH, "ENABLE": 1}
    assert ih.poll() == []


def test_an_unmapped_access_is_reported_in_words(sim_bus):
    dev, gmc, ih, s = boot(sim_bus)
    g = s.blocks["GMC"]
    va = 0x5000_1234_5000
    sim_fault(g, 0, va + 0x10, write=True, client=8)    # TCP writes where nothing is mapped
    sim_fault(g, 0, 0x6000_0000_0000, hub="MM", client=6)  # MP0 reads through the MMHUB
    ivs = ih.poll()
    assert [(iv.client_id, iv.src_id, iv.vmid_src) for iv in ivs] == [
        (IHIDS.SOC21_IH_CLIENTID_GFX, IHIDS.UTCL2_1_0__SRCID__FAULT, 0),
        (IHIDS.SOC21_IH_CLIENTID_VMC, IHIDS.VMC_1_0__SRCID__VM_FAULT, 1)]
    assert ivs[1].timestamp >= ivs[0].timestamp > 0
    gc, mm = (gmc.fault_from_iv(iv) for iv in ivs)
    assert (gc.hub, gc.address, gc.vmid, gc.write, gc.client, gc.mapping_error) == ("GC", va, 0, True, "TCP", True)
    assert str(gc) == (f"GC hub page fault at {va:#x} (VMID 0): write by TCP (client id 0x8): no mapping "
                       "(outside the context's range, or a page directory entry is invalid)")
    assert (mm.hub, mm.address, mm.write, mm.client) == ("MM", 0x6000_0000_0000, False, "MP0")
    assert gmc.decode_fault("GC") is None and gmc.decode_fault("MM") is None   # handled: latches cleared
    # the rptr went back to the IH through its doorbell
    assert s.get("OSSSYS", "IH_RB_RPTR") == ih.rptr == 2 * 32
    assert ih.poll() == []


def test_a_second_fault_before_the_poll_is_described_by_its_iv(sim_bus):
    dev, gmc, ih, s = boot(sim_bus)
    g = s.blocks["GMC"]
    ro = dev.mm.alloc(4096)
    va_ro = VRAM_VA + ro.addr
    gmc.pt.map(va_ro, ro.addr, 4096, flags=pagetable.READABLE)
    sim_fault(g, 0, 0x5000_0000_0000, write=True, client=8)
    sim_fault(g, 0, va_ro, write=True, client=5)     # latched only as MORE_FAULTS on the first
    first, second = (gmc.fault_from_iv(iv) for iv in ih.poll())
    assert first.status and first.more_faults and first.client == "TCP" and first.address == 0x5000_0000_0000
    assert str(first).endswith("; more faults followed")
    assert second.status is None and second.address == va_ro and second.write
    assert str(second) == f"GC hub page fault at {va_ro:#x} (VMID 0): write: no write permission"
    assert first.iv_protection == 0x08 and second.iv_protection == 0x20


def test_a_mapped_access_raises_nothing_and_other_ivs_are_not_faults(sim_bus):
    dev, gmc, ih, s = boot(sim_bus, "navi33")
    m = gmc.map_vram(4096)
    s.blocks["GMC"].translate(0, m.va, hub="GC")
    s.post_interrupt(SimIV(client_id=IHIDS.SOC21_IH_CLIENTID_GRBM_CP,
                           source_id=IHIDS.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT, src_data=(7, 0, 0, 0)))
    (iv,) = ih.poll()
    assert iv.client == "GRBM_CP" and iv.src_data[0] == 7 and gmc.fault_from_iv(iv) is None
    assert m.va == VRAM_VA + m.vram.addr


def test_overflow_resumes_at_the_oldest_entry_not_overwritten(sim_bus):
    dev, gmc, ih, s = boot(sim_bus, ring_size=1024)                 # 32 entries
    g = s.blocks["GMC"]
    pages = [0x4000_0000_0000 + (k << 12) for k in range(40)]
    for va in pages:
        sim_fault(g, 0, va, hub="GC")
    ivs = ih.poll()
    assert ih.overflows == 1
    # ih_v6_0_get_wptr skips the slot at wptr (the IH may be writing it): entries 9..39 remain
    assert [gmc.fault_from_iv(iv).address for iv in ivs] == pages[9:]
    sim_fault(g, 0, 0x4100_0000_0000, hub="GC")
    (iv,) = ih.poll()                                        # the overflow was cleared: normal again
    assert gmc.fault_from_iv(iv).address == 0x4100_0000_0000 and ih.overflows == 1


def test_wrapping_reads_and_errors(sim_bus):
    dev, gmc, ih, s = boot(sim_bus, ring_size=256)                  # 8 entries
    g = s.blocks["GMC"]
    seen = []
    for k in range(20):                                    # read every 3 entries: the ring wraps
        sim_fault(g, 0, 0x4000_0000_0000 + (k << 12), hub="GC")
        if k % 3 == 2:
            seen += [iv.src_data[0] & 0xFF for iv in ih.poll()]
    seen += [iv.src_data[0] & 0xFF for iv in ih.poll()]
    assert seen == list(range(20)) and ih.overflows == 0
    with pytest.raises(IHError, match="power of two"):
        IH(dev, 3000)
    fn = pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus)
    early = IH(AMDevice("am:sim", fn))
    with pytest.raises(IHError, match="call GMC.init first"):
        early.init()
    with pytest.raises(IHError, match="polled before IH.init"):
        early.poll()


def test_a_write_pointer_off_an_iv_boundary_is_an_error_not_a_crash(sim_bus):
    """The IH advances its write pointer by whole 32-byte IVs (ih_v6_0_get_wptr masks it, amdgpu_ih_process
    bounds its loop); a value off that grid means another writer hit the slot: a clear IHError, not a
    struct.error from decoding a partial entry."""
    dev, gmc, ih, s = boot(sim_bus)
    dev.vram.write32(ih.wptr_offset, 0x24)
    with pytest.raises(IHError, match="not on a 32-byte IV boundary"):
        ih.poll()


@pytest.mark.parametrize("names", [("IH_RB_BASE",), ("IH_RB_CNTL",), ("IH_RB_WPTR_ADDR_LO",), ("IH_RB_WPTR_ADDR_HI",)])
def test_a_dropped_ring_register_loses_the_fault(sim_bus, monkeypatch, dropping_registers, names):
    """ih_v6_0_irq_init's ring base, control (RB_ENABLE, MC_SPACE, RB_SIZE, write-back) and write-back
    address each left at their power-on 0: the fault's IV never reaches the driver (the ring is off, or
    the entry or the write pointer land where nothing maps them and go to the default page)."""
    monkeypatch.setattr(IH, "regs", property(lambda self: dropping_registers(self.dev.reg("OSSSYS"), names)))
    dev, gmc, ih, s = boot(sim_bus)
    sim_fault(s.blocks["GMC"], 0, 0x5000_1234_5000, write=True, client=8)
    assert [iv for iv in ih.poll() if gmc.fault_from_iv(iv)] == []
    monkeypatch.undo()
    dev, gmc, ih, s = boot(sim_bus)
    sim_fault(s.blocks["GMC"], 0, 0x5000_1234_5000, write=True, client=8)
    assert [gmc.fault_from_iv(iv).address for iv in ih.poll()] == [0x5000_1234_5000]


@pytest.mark.parametrize("cntl_only", [True, False])
def test_without_the_dummy_read_page_no_fault_is_announced(sim_bus, monkeypatch, cntl_only):
    """nbio_v4_3_ih_control: the dummy-read page in BIF_BX0_INTERRUPT_CNTL2 (that write alone left out, or
    the whole call): the BIF's read after each ring write fails, so the IH never announces the fault's IV."""
    def without_cntl2(self, page, ring_in_vram):
        if cntl_only:
            self.regs.BIF_BX0_INTERRUPT_CNTL.update(IH_DUMMY_RD_OVERRIDE=0, IH_REQ_NONSNOOP_EN=int(ring_in_vram))
    monkeypatch.setattr(NBIO, "ih_control", without_cntl2)
    dev, gmc, ih, s = boot(sim_bus)
    sim_fault(s.blocks["GMC"], 0, 0x5000_1234_5000, write=True, client=8)
    assert ih.poll() == []
    assert any("dummy read" in str(e) for e in s.errors)
