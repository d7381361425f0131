"""GMC: gfx11 page tables (4 levels, 4K/2M/1G, fragments, system pages), TLB and invalidation, faults."""
import struct

import pytest

from amdrv.autogen import gmc as G
from amdrv.autogen import ih as IDS
from gpusim import board
from gpusim.bus import Bus, host_memory
from gpusim.device import DMAError
from gpusim.gmc import FB_BASE, HubRefused, VMFault

V, S, X, R, W = (G.AMDGPU_PTE_VALID, G.AMDGPU_PTE_SYSTEM, G.AMDGPU_PTE_EXECUTABLE, G.AMDGPU_PTE_READABLE,
                 G.AMDGPU_PTE_WRITEABLE)
RW = V | R | W
PDB2, PDB1, PDB0, PTB = 0x100000, 0x101000, 0x102000, 0x103000   # VRAM offsets of the tables
IH_RING = 4096


@pytest.fixture
def sim():
    dev = board.build("navi31", vram_size=512 << 20)
    bus = Bus()
    bus.plug(dev)
    mem = host_memory(2 << 20)
    (bus_base,) = bus.map_host(memoryview(mem))
    dev.pci.write(0x04, 2, dev.pci.command | 0x6)
    enable_hubs(dev)
    return dev, mem, bus_base


def enable_hubs(dev, stop_on_fault=True):
    """What gart_enable programs that these tests rely on: the L1 TLB (SYSTEM_ACCESS_MODE 3) and the L2 of
    both hubs; stop_on_fault clears the ENABLE_DEFAULT bits (set_fault_enable_default(false), as amdgpu does
    with amdgpu_vm_fault_stop=always), so a fault raises VMFault instead of taking the default page."""
    for ip, mc, vm in (("GC", "GCMC_VM_", "GCVM_"), ("MMHUB", "MMMC_VM_", "MMVM_")):
        t = dev.table(ip)
        reg(dev, ip, mc + "MX_L1_TLB_CNTL", t[mc + "MX_L1_TLB_CNTL"].encode(ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3))
        reg(dev, ip, vm + "L2_CNTL", reg(dev, ip, vm + "L2_CNTL") | 1)
        if stop_on_fault:
            reg(dev, ip, vm + "L2_PROTECTION_FAULT_CNTL", 0)
        for eng in range(18):   # program_invalidation: every engine's range is the whole address space
            reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_ADDR_RANGE_LO32", 0xFFFFFFFF)
            reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_ADDR_RANGE_HI32", 0x1F)


def reg(dev, ip, name, value=None):
    a = dev.reg_addr(ip, name)
    if value is None:
        return dev.regs.read(a)
    dev.regs.write(a, value)


def pte(dev, table, idx, value):
    dev.vram.write(table + idx * 8, struct.pack("<Q", value))


def setup_vmid(dev, vmid=1, hub="GC", depth=3, start=0, end=(1 << 36) - 1, base=PDB2, bs=0):
    vm = "GCVM_" if hub == "GC" else "MMVM_"
    ip = "GC" if hub == "GC" else "MMHUB"
    cntl = dev.table(ip)[f"{vm}CONTEXT{vmid}_CNTL"]
    ints = {f"{k}_PROTECTION_FAULT_ENABLE_INTERRUPT": 1 for k in ("RANGE", "PDE0", "VALID", "READ", "WRITE", "EXECUTE")}
    reg(dev, ip, f"{vm}CONTEXT{vmid}_CNTL", cntl.encode(ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=depth,
                                                         PAGE_TABLE_BLOCK_SIZE=bs, **ints))
    reg(dev, ip, f"{vm}CONTEXT{vmid}_PAGE_TABLE_BASE_ADDR_LO32", (base | V) & 0xFFFFFFFF)
    reg(dev, ip, f"{vm}CONTEXT{vmid}_PAGE_TABLE_BASE_ADDR_HI32", base >> 32)
    reg(dev, ip, f"{vm}CONTEXT{vmid}_PAGE_TABLE_START_ADDR_LO32", start & 0xFFFFFFFF)
    reg(dev, ip, f"{vm}CONTEXT{vmid}_PAGE_TABLE_START_ADDR_HI32", start >> 32)
    reg(dev, ip, f"{vm}CONTEXT{vmid}_PAGE_TABLE_END_ADDR_LO32", end & 0xFFFFFFFF)
    reg(dev, ip, f"{vm}CONTEXT{vmid}_PAGE_TABLE_END_ADDR_HI32", end >> 32)


def four_levels(dev):
    pte(dev, PDB2, 0, PDB1 | V)
    pte(dev, PDB1, 0, PDB0 | V)
    pte(dev, PDB0, 0, PTB | V)


def invalidate(dev, vmid, hub="GC", eng=17):
    vm, ip = ("GCVM_", "GC") if hub == "GC" else ("MMVM_", "MMHUB")
    req = dev.table(ip)[f"{vm}INVALIDATE_ENG{eng}_REQ"].encode(
        PER_VMID_INVALIDATE_REQ=1 << vmid, INVALIDATE_L2_PTES=1, INVALIDATE_L2_PDE0=1, INVALIDATE_L2_PDE1=1,
        INVALIDATE_L2_PDE2=1, INVALIDATE_L1_PTES=1)
    if hub == "MM":   # gmc_v11_0_flush_vm_hub takes the semaphore on the MMHUB
        assert reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_SEM") & 1
    reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_REQ", req)
    for _ in range(10):
        if reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_ACK") & (1 << vmid):
            break
        dev.step()   # what a BAR read does in the stepped mode
    else:
        raise AssertionError("no ACK")
    if hub == "MM":
        reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_SEM", 0)


def test_4k_2m_1g_pages(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev)
    four_levels(dev)
    pte(dev, PTB, 1, 0x200000 | RW)
    pte(dev, PDB0, 1, 0x400000 | G.AMDGPU_PDE_PTE | RW)             # 2 MiB page
    pte(dev, PDB1, 1, 0x4000_0000 | G.AMDGPU_PDE_PTE | V | R)       # 1 GiB page
    t = gmc.translate(1, 0x1234)
    assert (t.system, t.addr) == (False, 0x200234)
    assert gmc.translate(1, 0x200000 + 0x1F1234, write=True).addr == 0x400000 + 0x1F1234
    assert gmc.translate(1, 0x4000_0000 + 0x3FF1_2345).addr == 0x4000_0000 + 0x3FF1_2345
    with pytest.raises(VMFault, match="write fault"):
        gmc.translate(1, 0x4000_0000, write=True)


def test_read_write_through_vram_and_system_pages(sim):
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev)
    four_levels(dev)
    pte(dev, PTB, 0, 0x300000 | RW)
    pte(dev, PTB, 1, (bus + 0x10000) | S | RW)
    gmc.write(1, 0xFF0, b"A" * 32)     # crosses from a VRAM page into a system page
    assert dev.vram.read(0x300FF0, 16) == b"A" * 16 and bytes(mem[0x10000:0x10010]) == b"A" * 16
    assert gmc.read(1, 0xFF8, 16) == b"A" * 16
    dev.pci.write(0x04, 2, dev.pci.command & ~0x4)
    with pytest.raises(DMAError):
        gmc.read(1, 0x1000, 4)


def test_page_table_in_system_memory(sim):
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev, base=bus | S, depth=0, end=511)   # one flat table in host memory, as a GART
    struct.pack_into("<Q", mem, 8 * 5, 0x1234000 | RW)
    assert gmc.translate(1, 5 << 12 | 0x10).addr == 0x1234010


def test_stale_translation_until_invalidated(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev)
    four_levels(dev)
    pte(dev, PTB, 3, 0x500000 | RW)
    assert gmc.translate(1, 0x3000).addr == 0x500000
    pte(dev, PTB, 3, 0x600000 | RW)        # remapped without invalidation
    assert gmc.translate(1, 0x3000).addr == 0x500000
    pte(dev, PTB, 3, 0)                    # even unmapped, the cached translation serves
    assert gmc.translate(1, 0x3000).addr == 0x500000
    invalidate(dev, 2)                     # another VMID: no effect
    assert gmc.translate(1, 0x3000).addr == 0x500000
    pte(dev, PTB, 3, 0x600000 | RW)
    invalidate(dev, 1)
    assert gmc.translate(1, 0x3000).addr == 0x600000


def test_stale_directory_entry_until_pde_invalidation(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev)
    four_levels(dev)
    pte(dev, PTB, 0, 0x500000 | RW)
    assert gmc.translate(1, 0).addr == 0x500000
    new_ptb = 0x104000
    pte(dev, new_ptb, 1, 0x700000 | RW)
    pte(dev, PDB0, 0, new_ptb | V)          # point PDB0[0] at a new PTB
    pte(dev, PTB, 1, 0x600000 | RW)         # the old PTB still maps page 1 elsewhere
    assert gmc.translate(1, 0x1000).addr == 0x600000      # the cached PDB0 entry still names the old PTB
    ptes_only = dev.table("GC")["GCVM_INVALIDATE_ENG3_REQ"].encode(PER_VMID_INVALIDATE_REQ=2, INVALIDATE_L2_PTES=1,
                                                                  INVALIDATE_L1_PTES=1)
    reg(dev, "GC", "GCVM_INVALIDATE_ENG3_REQ", ptes_only)
    dev.step()
    assert gmc.translate(1, 0x1000).addr == 0x600000      # PTEs dropped, the PDE cache kept
    invalidate(dev, 1, eng=3)
    assert gmc.translate(1, 0x1000).addr == 0x700000


def test_ack_needs_a_clock_step_and_mmhub_semaphore(sim):
    dev, _, _ = sim
    ack = dev.reg_addr("GC", "GCVM_INVALIDATE_ENG17_ACK")
    req = dev.table("GC")["GCVM_INVALIDATE_ENG17_REQ"].encode(PER_VMID_INVALIDATE_REQ=1 << 4, INVALIDATE_L1_PTES=1)
    dev.regs.write(dev.reg_addr("GC", "GCVM_INVALIDATE_ENG17_REQ"), req)
    assert dev.regs.peek(ack) == 0
    dev.step()
    assert dev.regs.peek(ack) == 1 << 4
    sem = dev.reg_addr("MMHUB", "MMVM_INVALIDATE_ENG17_SEM")
    assert dev.regs.read(sem) == 1 and dev.regs.read(sem) == 0   # held: a second acquire fails
    dev.regs.write(sem, 0)
    assert dev.regs.read(sem) == 1


def test_mmhub_translation_and_invalidation(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev, vmid=2, hub="MM")
    four_levels(dev)
    pte(dev, PTB, 0, 0x700000 | RW)
    assert gmc.translate(2, 0x10, hub="MM").addr == 0x700010
    pte(dev, PTB, 0, 0x800000 | RW)
    invalidate(dev, 2, hub="GC")           # the other hub's TLB: still stale here
    assert gmc.translate(2, 0x10, hub="MM").addr == 0x700010
    invalidate(dev, 2, hub="MM")
    assert gmc.translate(2, 0x10, hub="MM").addr == 0x800010


def test_fragment_covers_its_aligned_block(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev)
    four_levels(dev)
    frag4 = 4 << 7                         # 64 KiB fragment
    for i in range(16, 32):
        pte(dev, PTB, i, (0x900000 + (i - 16) * 0x1000) | RW | frag4)
    assert gmc.translate(1, 16 << 12).addr == 0x900000
    walks = gmc.hubs["GC"].walks
    assert gmc.translate(1, (31 << 12) + 8).addr == 0x90F008
    assert gmc.hubs["GC"].walks == walks   # served from the fragment's cache entry
    # a PTE that lies about its fragment: the hardware trusts the fragment, not the neighbour's PTE
    pte(dev, PTB, 40, 0xA00000 | RW | frag4)
    pte(dev, PTB, 41, 0xB00000 | RW | frag4)
    assert gmc.translate(1, 40 << 12).addr == 0xA08000      # page 8 of the 64 KiB block at 0xA00000
    assert gmc.translate(1, 41 << 12).addr == 0xA09000      # PTE 41 (0xB00000) is never read


def status_fields(dev, hub="GC"):
    vm, ip = ("GCVM_", "GC") if hub == "GC" else ("MMVM_", "MMHUB")
    r = dev.table(ip)[f"{vm}L2_PROTECTION_FAULT_STATUS"]
    st = r.decode(reg(dev, ip, f"{vm}L2_PROTECTION_FAULT_STATUS"))
    addr = reg(dev, ip, f"{vm}L2_PROTECTION_FAULT_ADDR_LO32") << 12 | (
        reg(dev, ip, f"{vm}L2_PROTECTION_FAULT_ADDR_HI32") & 0xF) << 44
    return st, addr


def enable_ih(dev, bus):
    cntl = dev.table("OSSSYS")["IH_RB_CNTL"]
    reg(dev, "OSSSYS", "IH_RB_BASE", bus >> 8)
    reg(dev, "OSSSYS", "IH_RB_BASE_HI", 0)
    reg(dev, "OSSSYS", "IH_RB_CNTL", cntl.encode(MC_SPACE=2, RB_SIZE=10, WPTR_OVERFLOW_ENABLE=1, RB_ENABLE=1))


def test_fault_latches_registers_and_posts_iv(sim):
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    enable_ih(dev, bus)
    setup_vmid(dev, vmid=3)
    four_levels(dev)
    va = 0x7000
    with pytest.raises(VMFault) as e:
        gmc.translate(3, va + 0x123, write=True, client=0x55)
    assert e.value.kind == "valid"
    st, addr = status_fields(dev)
    assert (st["VMID"], st["RW"], st["PERMISSION_FAULTS"], st["CID"], st["MORE_FAULTS"]) == (3, 1, 1, 0x55, 0)
    assert addr == va
    dw = struct.unpack_from("<8I", mem, 0)
    assert dw[0] & 0xFF == IDS.SOC21_IH_CLIENTID_GFX and (dw[0] >> 8) & 0xFF == IDS.UTCL2_1_0__SRCID__FAULT
    assert (dw[0] >> 24) & 0xF == 3 and dw[0] >> 31 == 0
    assert (dw[4] << 12 | (dw[5] & 0xF) << 44) == va     # gmc_v11_0_process_interrupt's decoding
    assert (dw[0] >> 16) & 0xFF == 0x08     # kfd_int_process_v11.c: ring_id & 0x08 is prot_valid (not present)
    # a second fault keeps the first one's status and address, only MORE_FAULTS is added
    pte(dev, PTB, 9, 0xC00000 | V | R)
    with pytest.raises(VMFault, match="write fault"):
        gmc.translate(3, 9 << 12, write=True)
    st2, addr2 = status_fields(dev)
    assert addr2 == va and st2["MORE_FAULTS"] == 1 and st2["PERMISSION_FAULTS"] == 1
    # the driver clears: CLEAR_PROTECTION_FAULT_STATUS_ADDR
    reg(dev, "GC", "GCVM_L2_PROTECTION_FAULT_CNTL", reg(dev, "GC", "GCVM_L2_PROTECTION_FAULT_CNTL") | 1)
    assert status_fields(dev) == (dev.table("GC")["GCVM_L2_PROTECTION_FAULT_STATUS"].decode(0), 0)
    with pytest.raises(VMFault):
        gmc.translate(3, 9 << 12, write=True)
    st3, addr3 = status_fields(dev)
    assert st3["PERMISSION_FAULTS"] == 4 and st3["RW"] == 1 and addr3 == 9 << 12
    # each IV carries its own fault's protection in ring_id (prot_write 0x20), latched status or not
    assert [(struct.unpack_from("<I", mem, 32 * k)[0] >> 16) & 0xFF for k in range(3)] == [0x08, 0x20, 0x20]


def test_mmhub_fault_client_and_range(sim):
    dev, mem, bus = sim
    enable_ih(dev, bus)
    setup_vmid(dev, vmid=5, hub="MM", end=0xFFF)
    with pytest.raises(VMFault, match="range"):
        dev.blocks["GMC"].translate(5, 0x2000_0000, hub="MM")
    st, addr = status_fields(dev, "MM")
    assert st["MAPPING_ERROR"] == 1 and st["VMID"] == 5 and addr == 0x2000_0000
    dw = struct.unpack_from("<8I", mem, 0)
    assert dw[0] & 0xFF == IDS.SOC21_IH_CLIENTID_VMC and dw[0] >> 31 == 1
    assert (dw[0] >> 16) & 0xFF == 0x08   # out of range: not present (kfd_int_process_v11.c prot_valid)


def test_fault_without_interrupt_enable_posts_nothing(sim):
    dev, mem, bus = sim
    enable_ih(dev, bus)
    setup_vmid(dev, vmid=0, depth=0, end=0xFF)
    reg(dev, "GC", "GCVM_CONTEXT0_CNTL", 1)   # as gfxhub_v3_0_enable_system_domain: no interrupt bits
    with pytest.raises(VMFault):
        dev.blocks["GMC"].translate(0, 0x10_0000_0000)
    assert status_fields(dev)[1] == 0x10_0000_0000
    assert dev.blocks["IH"].delivered == 0


def test_mc_addresses_fb_agp_and_gart(sim):
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    dev.vram.write(0x1000, b"vram")
    with pytest.raises(VMFault, match="range"):   # outside the system aperture: the VMID 0 page table
        gmc.mc_read(FB_BASE + 0x1000, 4)
    reg(dev, "MMHUB", "MMMC_VM_SYSTEM_APERTURE_LOW_ADDR", 0x10 << 6)            # 0x10 << 24 ..
    reg(dev, "MMHUB", "MMMC_VM_SYSTEM_APERTURE_HIGH_ADDR", (FB_BASE + (512 << 20) - 1) >> 18)   # .. VRAM's end
    assert gmc.mc_read(FB_BASE + 0x1000, 4) == b"vram"      # the FB location the VBIOS left
    # AGP aperture onto host memory
    reg(dev, "MMHUB", "MMMC_VM_AGP_BOT", 0x10)
    reg(dev, "MMHUB", "MMMC_VM_AGP_TOP", 0x10)
    reg(dev, "MMHUB", "MMMC_VM_AGP_BASE", bus >> 24)
    mem[bus & 0xFFFFFF:(bus & 0xFFFFFF) + 3] = b"agp"
    assert gmc.mc_read((0x10 << 24) + (bus & 0xFFFFFF), 3) == b"agp"
    # inside the system aperture, in neither FB nor AGP: the system aperture's default page (VRAM physical)
    reg(dev, "MMHUB", "MMMC_VM_SYSTEM_APERTURE_DEFAULT_ADDR_LSB", 0x1)
    assert gmc.mc_read(0x7F_0000_0000, 4) == b"vram"
    # GART: context 0 of the MMHUB, a flat table, above the system aperture
    gart = 0x90_0000_0000
    setup_vmid(dev, vmid=0, hub="MM", depth=0, start=gart >> 12, end=(gart >> 12) + 511, base=0x200000)
    pte(dev, 0x200000, 2, 0x1000 | RW)
    assert gmc.mc_read(gart + 0x2000, 4) == b"vram"
    gmc.mc_write(gart + 0x2004, b"!!")
    assert dev.vram.read(0x1004, 2) == b"!!"


def test_vmid0_system_aperture(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    reg(dev, "GC", "GCMC_VM_SYSTEM_APERTURE_LOW_ADDR", FB_BASE >> 18)
    reg(dev, "GC", "GCMC_VM_SYSTEM_APERTURE_HIGH_ADDR", (FB_BASE + (512 << 20) - 1) >> 18)
    assert gmc.translate(0, FB_BASE + 0x4321).addr == 0x4321
    with pytest.raises(VMFault):       # outside the aperture and no context 0 page table
        gmc.translate(0, 0x1000)


def test_invalid_pde_faults(sim):
    dev, _, _ = sim
    setup_vmid(dev)
    pte(dev, PDB2, 0, PDB1)            # not valid
    with pytest.raises(VMFault) as e:
        dev.blocks["GMC"].translate(1, 0x1000)
    assert e.value.kind == "pde" and status_fields(dev)[0]["MAPPING_ERROR"] == 1


def test_power_on_fb_location(sim):
    dev, _, _ = sim
    for ip, p in (("GC", "GCMC_VM_"), ("MMHUB", "MMMC_VM_")):
        assert reg(dev, ip, p + "FB_LOCATION_BASE") << 24 == FB_BASE
        assert (reg(dev, ip, p + "FB_LOCATION_TOP") + 1) << 24 == FB_BASE + (512 << 20)


def test_two_levels_with_block_size(sim):
    dev, _, _ = sim
    setup_vmid(dev, vmid=7, depth=1, bs=1, base=PDB0)   # PDB0 -> PTB of 1024 entries (PAGE_TABLE_BLOCK_SIZE 1)
    pte(dev, PDB0, 1, PTB | V)
    pte(dev, PTB, 1000, 0x900000 | RW)
    assert dev.blocks["GMC"].translate(7, (1024 + 1000) << 12 | 0x88).addr == 0x900088


def test_mmhub_request_without_the_semaphore_loses_its_ack(sim):
    """gmc_v11_0_flush_vm_hub takes the MMHUB engine's semaphore because the ACK may be lost across a
    power-gating cycle otherwise: a request without it invalidates but never acks."""
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev, vmid=2, hub="MM")
    four_levels(dev)
    pte(dev, PTB, 1, 0xA00000 | RW)
    assert gmc.translate(2, 0x1000, hub="MM").addr == 0xA00000
    pte(dev, PTB, 1, 0xB00000 | RW)
    req = dev.table("MMHUB")["MMVM_INVALIDATE_ENG17_REQ"].encode(PER_VMID_INVALIDATE_REQ=1 << 2, INVALIDATE_L2_PTES=1)
    reg(dev, "MMHUB", "MMVM_INVALIDATE_ENG17_REQ", req)
    dev.step(3)
    assert reg(dev, "MMHUB", "MMVM_INVALIDATE_ENG17_ACK") == 0
    assert any("without holding MMVM_INVALIDATE_ENG17_SEM" in e.message for e in dev.errors)
    assert gmc.translate(2, 0x1000, hub="MM").addr == 0xB00000   # the invalidation itself happened
    invalidate(dev, 2, hub="MM")                                 # with the semaphore: acked


def redirect(dev, bus, system=True, hub="GC"):
    """set_fault_enable_default(true) and the default page of gfxhub_v3_0_init_system_aperture_regs."""
    vm, ip = ("GCVM_", "GC") if hub == "GC" else ("MMVM_", "MMHUB")
    reg(dev, ip, vm + "L2_PROTECTION_FAULT_CNTL", 0x3FFC)   # every *_ENABLE_DEFAULT bit
    reg(dev, ip, vm + "L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32", (bus >> 12) & 0xFFFFFFFF)
    reg(dev, ip, vm + "L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32", bus >> 44)
    cntl = reg(dev, ip, vm + "L2_CNTL")
    reg(dev, ip, vm + "L2_CNTL", cntl | 0x800 if system else cntl & ~0x800)   # ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY


def test_fault_redirected_to_the_default_page(sim):
    """"true redirects VM faults to the default page" (gfxhub_v3_0_set_fault_enable_default): reads return
    the default page, writes go there, the fault is still latched and posted."""
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    enable_ih(dev, bus)
    default = bus + 0x10000
    redirect(dev, default)
    setup_vmid(dev, vmid=3, end=0xFFFFF)
    four_levels(dev)
    mem[0x10000 + 0x20:0x10000 + 0x24] = b"dflt"
    assert gmc.read(3, 0x5020, 4) == b"dflt"
    gmc.write(3, 0x6030, b"here")
    assert bytes(mem[0x10030:0x10034]) == b"here"
    st, addr = status_fields(dev)
    assert addr == 0x5000 and st["RW"] == 0 and st["MORE_FAULTS"] == 1
    t = gmc.translate(3, 0x7000, write=True)
    assert t.fault is not None and t.fault.kind == "valid" and t.system and t.addr == default
    assert struct.unpack_from("<I", mem, 0)[0] & 0xFF == IDS.SOC21_IH_CLIENTID_GFX   # posted
    # each kind has its own enable: RANGE off -> an out-of-range access fails again
    reg(dev, "GC", "GCVM_L2_PROTECTION_FAULT_CNTL", 0x3FFC & ~(1 << 2))
    with pytest.raises(VMFault, match="range"):
        gmc.translate(3, 1 << 40)
    # the default page in VRAM (ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY 0): a VRAM physical address
    redirect(dev, 0x300000, system=False)
    dev.vram.write(0x300010, b"vram")
    assert gmc.read(3, 0x8010, 4) == b"vram"


def test_which_clients_halt_on_a_redirected_fault(sim):
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    redirect(dev, bus)
    setup_vmid(dev, vmid=3)
    four_levels(dev)
    # the CP (CPC, client 5) halts until CP_DEBUG.CPG_UTCL1_ERROR_HALT_DISABLE; power-on 0
    with pytest.raises(VMFault):
        gmc.read(3, 0x5000, 4, client=5)
    reg(dev, "GC", "CP_DEBUG", dev.table("GC")["CP_DEBUG"].encode(CPG_UTCL1_ERROR_HALT_DISABLE=1))
    gmc.read(3, 0x5000, 4, client=5)
    # shader clients (TCP 8) carry on only with GL1C_UTCL0_CNTL1.RESP_FAULT_MODE 2 ("SUCCESS")
    with pytest.raises(VMFault):
        gmc.read(3, 0x5000, 4, client=8)
    reg(dev, "GC", "GL1C_UTCL0_CNTL1", dev.table("GC")["GL1C_UTCL0_CNTL1"].encode(RESP_FAULT_MODE=2))
    gmc.read(3, 0x5000, 4, client=8)
    gmc.read(3, 0x5000, 4, client=13)    # SDMA0: no halt control upstream programs


def test_gl1c_utcl0_cntl1_is_one_register_per_shader_array(sim):
    """GRBM_GFX_INDEX decides which shader arrays a GL1C_UTCL0_CNTL1 write reaches (broadcast: all; an
    index: that SE/SA; an index naming none: lost); a shader access carries on after a redirected fault only
    when every SA answers SUCCESS (wave placement is not modelled)."""
    dev, mem, bus = sim
    gmc = dev.blocks["GMC"]
    redirect(dev, bus)
    setup_vmid(dev, vmid=3)
    four_levels(dev)
    t = dev.table("GC")
    success, index = t["GL1C_UTCL0_CNTL1"].encode(RESP_FAULT_MODE=2), t["GRBM_GFX_INDEX"]
    assert reg(dev, "GC", "GRBM_GFX_INDEX") == 0xE0000000          # power-on: broadcast
    reg(dev, "GC", "GRBM_GFX_INDEX", index.encode(SE_INDEX=1, SA_INDEX=1))
    reg(dev, "GC", "GL1C_UTCL0_CNTL1", success)                    # one SA only
    assert reg(dev, "GC", "GL1C_UTCL0_CNTL1") == success
    reg(dev, "GC", "GRBM_GFX_INDEX", 0)
    assert reg(dev, "GC", "GL1C_UTCL0_CNTL1") != success           # SE 0/SA 0 kept its power-on value
    with pytest.raises(VMFault):
        gmc.read(3, 0x5000, 4, client=8)
    reg(dev, "GC", "GRBM_GFX_INDEX", 0x1FFFFFFF)                   # SE/SA 0xFF, no broadcast: no such array
    reg(dev, "GC", "GL1C_UTCL0_CNTL1", success)
    assert "reaches no shader array" in dev.errors[-1].message
    with pytest.raises(VMFault):
        gmc.read(3, 0x5000, 4, client=8)
    reg(dev, "GC", "GRBM_GFX_INDEX", 0xE0000000)
    reg(dev, "GC", "GL1C_UTCL0_CNTL1", success)                    # broadcast: every SA
    gmc.read(3, 0x5000, 4, client=8)


def test_power_on_hub_state(sim):
    """gc_11_0_0_default.h: faults redirected (0x3ffffffc), L1 TLB on in PA-only mode, L2 off."""
    dev = board.build("navi31", vram_size=512 << 20)
    assert reg(dev, "GC", "GCVM_L2_PROTECTION_FAULT_CNTL") == 0x3FFFFFFC
    assert reg(dev, "GC", "GCMC_VM_MX_L1_TLB_CNTL") == 0x501 and reg(dev, "MMHUB", "MMMC_VM_MX_L1_TLB_CNTL") == 0x501
    assert reg(dev, "GC", "GCVM_L2_CNTL") & 1 == 0 and reg(dev, "MMHUB", "MMVM_L2_CNTL") & 1 == 0


@pytest.mark.parametrize("hub", ["GC", "MM"])
@pytest.mark.parametrize("off", ["L1", "L2"])
def test_l1_tlb_or_l2_off_translates_nothing(sim, hub, off):
    """mmhub_v3_0_gart_disable: ENABLE_L1_TLB and ENABLE_L2_CACHE cleared turn the GART off. No fault is
    latched (the L2 latches them); the access is refused. With the L2 off the physical path still works."""
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    ip, mc, vm = ("GC", "GCMC_VM_", "GCVM_") if hub == "GC" else ("MMHUB", "MMMC_VM_", "MMVM_")
    setup_vmid(dev, vmid=1, hub=hub)
    four_levels(dev)
    pte(dev, PTB, 1, 0xA00000 | RW)
    assert gmc.translate(1, 0x1000, hub=hub).addr == 0xA00000
    reg(dev, ip, mc + "SYSTEM_APERTURE_LOW_ADDR", FB_BASE >> 18)
    reg(dev, ip, mc + "SYSTEM_APERTURE_HIGH_ADDR", (FB_BASE + (512 << 20) - 1) >> 18)
    if off == "L1":
        reg(dev, ip, mc + "MX_L1_TLB_CNTL", reg(dev, ip, mc + "MX_L1_TLB_CNTL") & ~1)
    else:
        reg(dev, ip, vm + "L2_CNTL", reg(dev, ip, vm + "L2_CNTL") & ~1)
    gmc.invalidate(hub, 1)
    with pytest.raises(HubRefused, match="ENABLE_L1_TLB" if off == "L1" else "ENABLE_L2_CACHE"):
        gmc.translate(1, 0x1000, hub=hub)
    with pytest.raises(DMAError):      # HubRefused is a refused access to the engines
        gmc.read(1, 0x1000, 4, hub=hub)
    assert status_fields(dev, hub)[1] == 0
    if off == "L2":
        assert gmc.translate(0, FB_BASE + 0x1234, hub=hub).addr == 0x1234
    else:
        with pytest.raises(HubRefused):
            gmc.translate(0, FB_BASE + 0x1234, hub=hub)


def test_system_access_mode_pa_only_and_unmodelled(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    t = dev.table("GC")["GCMC_VM_MX_L1_TLB_CNTL"]
    reg(dev, "GC", "GCMC_VM_MX_L1_TLB_CNTL", t.encode(ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=0))
    assert gmc.translate(0, FB_BASE + 0x40).addr == 0x40          # physical without any system aperture
    with pytest.raises(HubRefused, match="neither"):
        gmc.translate(0, 1 << 44)                                   # no page table in PA-only mode
    reg(dev, "GC", "GCMC_VM_MX_L1_TLB_CNTL", t.encode(ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=1))
    with pytest.raises(HubRefused, match="not modelled"):
        gmc.translate(0, FB_BASE)


def test_page_table_start_and_end_bound_the_walk(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev, vmid=4, start=0x100, end=0x1FF)
    four_levels(dev)
    pte(dev, PTB, 1, 0xA00000 | RW)                      # index 1 = page start + 1
    assert gmc.translate(4, 0x101000).addr == 0xA00000
    for va in (0xFF000, 0x200000):
        with pytest.raises(VMFault, match="range"):
            gmc.translate(4, va)


def test_l2_cntl2_invalidates_every_vmid(sim):
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev, vmid=6)
    four_levels(dev)
    pte(dev, PTB, 1, 0xA00000 | RW)
    assert gmc.translate(6, 0x1000).addr == 0xA00000
    pte(dev, PTB, 1, 0xB00000 | RW)
    assert gmc.translate(6, 0x1000).addr == 0xA00000                 # cached
    reg(dev, "GC", "GCVM_L2_CNTL2", dev.table("GC")["GCVM_L2_CNTL2"].encode(INVALIDATE_ALL_L1_TLBS=1, INVALIDATE_L2_CACHE=1))
    assert gmc.translate(6, 0x1000).addr == 0xB00000


def set_engine_range(dev, lo32, hi32, hub="GC", eng=17):
    vm, ip = ("GCVM_", "GC") if hub == "GC" else ("MMVM_", "MMHUB")
    reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_ADDR_RANGE_LO32", lo32)
    reg(dev, ip, f"{vm}INVALIDATE_ENG{eng}_ADDR_RANGE_HI32", hi32)


@pytest.mark.parametrize("hub", ["GC", "MM"])
def test_an_engine_invalidates_only_its_address_range(sim, hub):
    """VM_INVALIDATE_ENGn_ADDR_RANGE (S_BIT, a page number; ATS encoding, assumption): the power-on 0 covers
    page 0 only, S 1 a naturally aligned block sized by the trailing ones, all ones everything (what
    program_invalidation writes). Translations outside the range stay cached, stale."""
    dev, _, _ = sim
    gmc = dev.blocks["GMC"]
    setup_vmid(dev, hub=hub)
    four_levels(dev)

    def remap_pages(phys):
        for page in (3, 4):
            pte(dev, PTB, page, phys + page * 0x1000 | RW)

    def seen():
        return [gmc.translate(1, page << 12, hub=hub).addr for page in (3, 4)]

    remap_pages(0x500000)
    assert seen() == [0x503000, 0x504000]        # now cached
    remap_pages(0x600000)
    set_engine_range(dev, 0, 0, hub)            # power-on (gc_11_0_0_default.h): page 0 only
    invalidate(dev, 1, hub)
    assert seen() == [0x503000, 0x504000]
    set_engine_range(dev, 4 << 1 | 1, 0, hub)   # S 1, page 4 (no trailing ones): pages 4 and 5
    invalidate(dev, 1, hub)
    assert seen() == [0x503000, 0x604000]
    set_engine_range(dev, 3 << 1, 0, hub)       # S 0: the one page 3
    invalidate(dev, 1, hub)
    assert seen() == [0x603000, 0x604000]
    remap_pages(0x700000)
    set_engine_range(dev, 0xFFFFFFFF, 0, hub)   # HI32 left 0: pages [0, 2^32), VAs below 16 TiB only
    invalidate(dev, 1, hub)
    assert seen() == [0x703000, 0x704000]
    # a 2 MiB page at 16 TiB (PDB2 entry 32) stays stale under that range, goes under the whole one
    pte(dev, PDB2, 32, PDB1 | V)
    va = 1 << 44
    pte(dev, PDB0, 0, 0x800000 | G.AMDGPU_PDE_PTE | RW)
    assert gmc.translate(1, va, hub=hub).addr == 0x800000
    pte(dev, PDB0, 0, 0xA00000 | G.AMDGPU_PDE_PTE | RW)
    invalidate(dev, 1, hub)
    assert gmc.translate(1, va, hub=hub).addr == 0x800000
    set_engine_range(dev, 0xFFFFFFFF, 0x1F, hub)
    invalidate(dev, 1, hub)
    assert gmc.translate(1, va, hub=hub).addr == 0xA00000
