"""IH 6.0 ring: registers as ih_v6_0.c programs them, IV entries as amdgpu_ih.c decodes them."""
import struct

import pytest

from amdrv.autogen import ih as IDS
from gpusim import board
from gpusim.bus import Bus, host_memory
from gpusim.device import IVEntry

RING = 4096


def make_sim():
    dev = board.build("navi31", vram_size=512 << 20)
    bus = Bus()
    bus.plug(dev)
    mem = host_memory(2 << 20)
    (bus_base,) = bus.map_host(memoryview(mem))
    dev.pci.write(0x04, 2, dev.pci.command | 0x6)   # memory decode + bus mastering
    return dev, mem, bus_base


@pytest.fixture
def sim():
    return make_sim()


def w(dev, name, value):
    dev.regs.write(dev.reg_addr("OSSSYS", name), value)


def r(dev, name):
    return dev.regs.read(dev.reg_addr("OSSSYS", name))


def enable(dev, ring_bus, wb_bus, overflow=True, size=RING, dummy_page=None):
    cntl = dev.table("OSSSYS")["IH_RB_CNTL"]
    # nbio_v4_3_ih_control: the dummy-read page (by default the page after the write-back slot)
    dev.set("NBIO", "BIF_BX0_INTERRUPT_CNTL2", (wb_bus + 4096 if dummy_page is None else dummy_page) >> 8)
    w(dev, "IH_RB_BASE", ring_bus >> 8)
    w(dev, "IH_RB_BASE_HI", (ring_bus >> 40) & 0xFF)
    w(dev, "IH_RB_CNTL", cntl.encode(MC_SPACE=2, WPTR_OVERFLOW_CLEAR=1, WPTR_OVERFLOW_ENABLE=int(overflow),
                                     RB_SIZE=(size // 4).bit_length() - 1, WPTR_WRITEBACK_ENABLE=1, MC_SNOOP=1,
                                     RB_ENABLE=1))
    w(dev, "IH_RB_WPTR_ADDR_LO", wb_bus & 0xFFFFFFFF)
    w(dev, "IH_RB_WPTR_ADDR_HI", (wb_bus >> 32) & 0xFFFF)
    w(dev, "IH_RB_WPTR", 0)
    w(dev, "IH_RB_RPTR", 0)


def faults_to_the_default_page(dev, page_bus):
    """The MMHUB's VMID 0 with the system aperture on (SYSTEM_ACCESS_MODE 3) but not yet placed, and a faulting
    access answered by the default page at page_bus (ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY): a write by MC
    address outside the aperture faults and lands there."""
    t = dev.table("MMHUB")
    dev.regs.write(dev.reg_addr("MMHUB", "MMMC_VM_MX_L1_TLB_CNTL"), t["MMMC_VM_MX_L1_TLB_CNTL"].encode(
        ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3))
    dev.regs.write(dev.reg_addr("MMHUB", "MMVM_L2_CNTL"), t["MMVM_L2_CNTL"].encode(
        ENABLE_L2_CACHE=1, ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY=1))
    dev.regs.write(dev.reg_addr("MMHUB", "MMVM_L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32"), page_bus >> 12)


def decode(dw):
    # amdgpu_ih_decode_iv_helper
    return dict(client_id=dw[0] & 0xFF, src_id=(dw[0] >> 8) & 0xFF, ring_id=(dw[0] >> 16) & 0xFF,
                vmid=(dw[0] >> 24) & 0xF, vmid_src=dw[0] >> 31, timestamp=dw[1] | (dw[2] & 0xFFFF) << 32,
                pasid=dw[3] & 0xFFFF, src_data=tuple(dw[4:8]))


def test_entry_layout_and_writeback(sim):
    dev, mem, bus = sim
    enable(dev, bus, bus + RING)
    dev.step(5)
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_GRBM_CP, IDS.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT,
                               src_data=(1, 2, 3, 4), ring_id=0x21, vmid=3))
    w(dev, "IH_VMID_3_LUT", 0x8001)
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_VMC, 0, vmid=3, vmid_src=1))
    wptr = struct.unpack_from("<I", mem, RING)[0]
    assert wptr == 64 and r(dev, "IH_RB_WPTR") == 64
    e = decode(struct.unpack_from("<8I", mem, 0))
    assert e == dict(client_id=20, src_id=181, ring_id=0x21, vmid=3, vmid_src=0, timestamp=5000, pasid=0,
                     src_data=(1, 2, 3, 4))
    e2 = decode(struct.unpack_from("<8I", mem, 32))
    assert (e2["client_id"], e2["vmid_src"]) == (18, 1)
    assert e2["pasid"] == 0   # the _MM lut was not written; the GFX one does not apply to MMHUB entries
    assert dev.blocks["IH"].delivered == 2


def test_disabled_ring_drops(sim):
    dev, mem, bus = sim
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_GRBM_CP, 181))
    assert dev.blocks["IH"].dropped == 1 and bytes(mem[:32]) == bytes(32)


def test_wrap_and_rptr(sim):
    dev, mem, bus = sim
    enable(dev, bus, bus + RING)
    n = RING // 32
    for i in range(n - 1):          # one slot stays free: full is wptr + 32 == rptr
        dev.post_interrupt(IVEntry(7, i))
    assert r(dev, "IH_RB_WPTR") == RING - 32
    w(dev, "IH_RB_RPTR", 10 * 32)   # the driver consumed ten
    for i in range(5):
        dev.post_interrupt(IVEntry(7, 200 + i))
    assert r(dev, "IH_RB_WPTR") & ~1 == 4 * 32            # wrapped to the start
    assert decode(struct.unpack_from("<8I", mem, 0))["src_id"] == 201
    assert r(dev, "IH_RB_WPTR") & 1 == 0


def test_overflow_flag_and_clear(sim):
    dev, mem, bus = sim
    enable(dev, bus, bus + RING)
    n = RING // 32
    for i in range(n + 3):
        dev.post_interrupt(IVEntry(7, i & 0xFF))
    wptr = r(dev, "IH_RB_WPTR")
    assert wptr & 1, "RB_OVERFLOW must be set"
    assert struct.unpack_from("<I", mem, RING)[0] & 1, "and visible in the writeback"
    # the driver's recovery: WPTR_OVERFLOW_CLEAR=1 then 0
    cntl = r(dev, "IH_RB_CNTL")
    w(dev, "IH_RB_CNTL", cntl | 1 << 31)
    w(dev, "IH_RB_CNTL", cntl & ~(1 << 31))
    assert r(dev, "IH_RB_WPTR") & 1 == 0


def test_no_overflow_enable_drops_when_full(sim):
    dev, mem, bus = sim
    enable(dev, bus, bus + RING, overflow=False)
    for i in range(RING // 32 + 2):
        dev.post_interrupt(IVEntry(7, i & 0xFF))
    assert dev.blocks["IH"].dropped == 3 and r(dev, "IH_RB_WPTR") == RING - 32


def test_bus_mastering_off_loses_entries(sim):
    dev, mem, bus = sim
    enable(dev, bus, bus + RING)
    dev.pci.write(0x04, 2, dev.pci.command & ~0x4)
    dev.post_interrupt(IVEntry(7, 1))
    assert dev.blocks["IH"].dropped == 1 and bytes(mem[:32]) == bytes(32)
    assert any("bus mastering" in str(e) for e in dev.errors)


def test_doorbell_rptr(sim):
    dev, mem, bus = sim
    enable(dev, bus, bus + RING)
    w(dev, "IH_DOORBELL_RPTR", 1 << 28 | 0x88)
    ih = dev.blocks["IH"]
    assert not ih.doorbell(0x10, 64)
    assert ih.doorbell(0x88, 64) and r(dev, "IH_RB_RPTR") == 64
    # through BAR2, once the driver has opened the doorbell aperture and routed the IH's doorbells
    nbio = dev.blocks["NBIO"]
    dev.set("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    nbio.doorbell_write(0x88 * 4, 80)
    assert r(dev, "IH_RB_RPTR") == 64 and "no enabled S2A" in str(dev.errors[-1])   # no routing entry
    entry = dev.table("NBIO")["S2A_DOORBELL_ENTRY_1_CTRL"]       # nbio_v4_3_ih_doorbell_range's values
    dev.regs.write(dev.reg_addr("NBIO", "S2A_DOORBELL_ENTRY_1_CTRL"), entry.encode(
        S2A_DOORBELL_PORT1_ENABLE=1, S2A_DOORBELL_PORT1_RANGE_OFFSET=0x88, S2A_DOORBELL_PORT1_RANGE_SIZE=2))
    nbio.doorbell_write(0x88 * 4, 96)
    assert r(dev, "IH_RB_RPTR") == 96
    nbio.doorbell_write(0x89 * 4, 128)
    assert r(dev, "IH_RB_RPTR") == 96


def test_mc_space_4_goes_through_the_mmhub_system_aperture(sim):
    """MC_SPACE 4 (ih_v6_0 for a ring that is not a bus address): the ring's MC address is a VMID 0 address
    of the MMHUB, physical only inside the system aperture (SYSTEM_ACCESS_MODE 3). Without the aperture the
    write goes through the page table: a fault (as OSSSYS, mmhub_client_ids_v3_0_0) answered with the
    default page, and the IV that fault raises is dropped rather than written through the same ring."""
    from gpusim.gmc import FB_BASE
    dev, mem, bus = sim
    faults_to_the_default_page(dev, bus + 0x10000)
    ring, wb = FB_BASE + 0x100000, FB_BASE + 0x100000 + RING
    cntl = dev.table("OSSSYS")["IH_RB_CNTL"]
    enable(dev, ring, wb, dummy_page=bus + 0x20000)   # the dummy page is a bus address whatever MC_SPACE
    w(dev, "IH_RB_CNTL", r(dev, "IH_RB_CNTL") & ~cntl.fields["MC_SPACE"].mask | 4 << cntl.fields["MC_SPACE"].shift)
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_GRBM_CP, 181, src_data=(7, 0, 0, 0)))
    assert dev.vram.read(0x100000, 32) == bytes(32)                     # not in VRAM
    assert struct.unpack_from("<I", mem, 0x10000 + 16)[0] == 7          # in the default page
    st = dev.table("MMHUB")["MMVM_L2_PROTECTION_FAULT_STATUS"].decode(
        dev.regs.read(dev.reg_addr("MMHUB", "MMVM_L2_PROTECTION_FAULT_STATUS")))
    assert st["CID"] == 15 and st["RW"] == 1
    # with the system aperture over VRAM the ring is VRAM
    dev.regs.write(dev.reg_addr("MMHUB", "MMMC_VM_SYSTEM_APERTURE_LOW_ADDR"), FB_BASE >> 18)
    dev.regs.write(dev.reg_addr("MMHUB", "MMMC_VM_SYSTEM_APERTURE_HIGH_ADDR"), (FB_BASE + (512 << 20) - 1) >> 18)
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_GRBM_CP, 181, src_data=(8, 0, 0, 0)))
    assert struct.unpack_from("<I", dev.vram.read(0x100000 + 32 + 16, 4))[0] == 8
    assert struct.unpack_from("<I", dev.vram.read(0x100000 + RING, 4))[0] == 64      # the write-back


@pytest.mark.parametrize("cntl, cntl2, announced", [
    (0, None, True),           # upstream: OVERRIDE 0, MSI off -> dummy read at a mapped page
    (0, 0, False),             # CNTL2 never written: the read at bus address 0 fails
    (0, 0xFFFFFFFF00, False),  # CNTL2 inverted
    (0b01, 0, True),           # OVERRIDE 1, IH_DUMMY_RD_EN 0: no dummy read, so no address needed
    (0b11, 0, False),          # OVERRIDE 1, IH_DUMMY_RD_EN 1: read at a bad address
])
def test_the_dummy_read_must_reach_a_mapped_page(sim, cntl, cntl2, announced):
    """nbio_v4_3_ih_control: INTERRUPT_CNTL2 names the page the BIF reads after each ring write (IH_DUMMY_RD_
    OVERRIDE 0: on without MSI); a failed read leaves the entry unannounced (assumption, gpusim/ih.py)."""
    dev, mem, bus = sim
    enable(dev, bus, bus + RING, dummy_page=cntl2)
    dev.set("NBIO", "BIF_BX0_INTERRUPT_CNTL", cntl)
    errors = len(dev.errors)
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_VMC, 0))
    assert struct.unpack_from("<I", mem, RING)[0] == (32 if announced else 0)
    assert (len(dev.errors) == errors) == announced
    if not announced:
        assert "dummy read" in str(dev.errors[-1])


def test_with_msi_enabled_there_is_no_dummy_read(sim):
    """IH_DUMMY_RD_OVERRIDE 0: "dummy read disabled with msi" (nbio_v4_3_ih_control's comment)."""
    from gpusim.pci import CAP_MSI
    dev, mem, bus = sim
    enable(dev, bus, bus + RING, dummy_page=0)
    dev.pci.write(CAP_MSI + 2, 2, dev.pci.read(CAP_MSI + 2, 2) | 1)
    dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_VMC, 0))
    assert struct.unpack_from("<I", mem, RING)[0] == 32


def test_msi_after_each_entry_only_with_enable_intr_msi_enable_and_bus_master(sim):
    """ih_v6_0_toggle_ring_interrupts: ENABLE_INTR tells the host; the MSI capability's MSI Enable and the
    command register's Bus Master Enable gate the MSI write (PCI spec); the ring fills regardless."""
    dev, mem, bus = sim
    enable(dev, bus, bus + RING)
    heard = []
    dev.msi_sink = lambda: heard.append(dev.blocks["IH"].wptr)
    cntl = dev.table("OSSSYS")["IH_RB_CNTL"]
    iv = lambda: dev.post_interrupt(IVEntry(IDS.SOC21_IH_CLIENTID_GRBM_CP, 181))  # noqa: E731
    iv()                                           # ENABLE_INTR 0: written, nobody told
    assert dev.blocks["IH"].delivered == 1 and heard == [] and dev.msis_sent == 0
    w(dev, "IH_RB_CNTL", r(dev, "IH_RB_CNTL") | cntl.encode(ENABLE_INTR=1))
    iv()                                           # MSI Enable clear (the function uses INTx): no MSI
    assert heard == []
    dev.pci.write(0xA2, 2, dev.pci.read(0xA2, 2) | 1)
    iv()
    assert heard == [96] and dev.msis_sent == 1    # after the third entry is in the ring: wptr past it
    dev.pci.write(0x04, 2, dev.pci.command & ~0x4)
    dev.send_msi()                                 # bus mastering off: no MSI write leaves the function
    assert heard == [96] and dev.msis_sent == 1


def test_sim_function_msi_eventfd_needs_the_async_clock():
    import os
    import pcie
    fn = pcie.open_function("sim", "navi31", fresh=True)
    try:
        assert fn.enable_msi() is None and "stepped clock" in fn.msi_unavailable
        assert not fn.dev.pci.msi_enabled
        fn.dev.start_async()
        fn.async_clock = True
        fd = fn.enable_msi()
        assert fd is not None and fn.enable_msi() == fd and fn.dev.pci.msi_enabled   # as vfio-pci enables it
        fn.dev.pci.write(0x04, 2, fn.dev.pci.command | 0x4)
        with pytest.raises(BlockingIOError):
            os.eventfd_read(fd)
        fn.dev.send_msi()
        fn.dev.send_msi()
        assert os.eventfd_read(fd) == 2
        fn.disable_msi()
        assert not fn.dev.pci.msi_enabled and fn.dev.msi_sink is None
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        fn.close()


def test_a_burst_posted_at_once_lands_as_posted_one_by_one():
    """IH.post_many (a burst raised in one clock step; tools/mutate.py's ring wrap) holds the MMHUB's registers
    for the burst: the ring, the write-back and the fault latch come out as with post_interrupt one by one,
    including a burst whose writes fault (MC_SPACE 4 outside the system aperture: each entry to the default
    page, the latch set by the first)."""
    from gpusim.gmc import FB_BASE
    outs = []
    for burst in (False, True):
        dev, mem, bus = make_sim()
        faults_to_the_default_page(dev, bus + 0x10000)
        enable(dev, bus, bus + RING)
        entries = lambda: [IVEntry(IDS.SOC21_IH_CLIENTID_GRBM_CP, 181, src_data=(k, 0, 0, 0))  # noqa: E731
                           for k in range(RING // 32 + 3)]         # past the end: the ring wraps (rptr 0: overflow)
        for mc_space in (2, 4):
            cntl = dev.table("OSSSYS")["IH_RB_CNTL"]
            if mc_space == 4:     # the same ring as an MC address: outside the aperture, so it faults
                w(dev, "IH_RB_BASE", (FB_BASE + 0x100000) >> 8)
                w(dev, "IH_RB_CNTL", r(dev, "IH_RB_CNTL") & ~cntl.fields["MC_SPACE"].mask
                  | 4 << cntl.fields["MC_SPACE"].shift)
            if burst:
                dev.blocks["IH"].post_many(entries())
            else:
                for e in entries():
                    dev.post_interrupt(e)
        outs.append((bytes(mem[:0x11000]), r(dev, "IH_RB_WPTR"), dev.blocks["IH"].delivered,
                     dev.regs.read(dev.reg_addr("MMHUB", "MMVM_L2_PROTECTION_FAULT_STATUS")), len(dev.errors)))
    assert outs[0] == outs[1]
    assert outs[0][2] == 2 * (RING // 32 + 3) and outs[0][3] != 0 and outs[0][1] & 1     # all written, overflowed
