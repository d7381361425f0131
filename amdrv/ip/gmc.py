"""GMC 11: the MMHUB 3.0.x and the GC hub (GFXHUB 3.0), the VMID 0 page table, TLB invalidation, faults.

    gmc = GMC(dev)             # allocates the root page directory in the boot region
    gmc.init()                 # MMHUB, as gmc_v11_0_hw_init; sets dev.fb_base
    gmc.init_gfxhub()          # GC hub, as gfx_v11_0_gfxhub_enable (after the RLC autoload powered GC)
    m = gmc.map_vram(1 << 20)  # GPUMapping(va, size, vram=Block): VRAM mapped for the engines
    m = gmc.map_system(buf)    # a pcie DMABuffer mapped (snooped, uncached); align= for its VA
    gmc.unmap(m)
    print(gmc.decode_fault("GC"))      # the latched protection fault, in words (None if none)

Facts (drivers/gpu/drm/amd/amdgpu: gmc_v11_0.c, gfxhub_v3_0.c, mmhub_v3_0.c, mmhub_v3_0_2.c, amdgpu_gmc.c):
- FB location: MMMC_VM_FB_LOCATION_BASE.FB_BASE << 24 is the MC address of VRAM offset 0 (vram_start;
  vram_end = vram_start + RCC_CONFIG_MEMSIZE - 1); MMMC_VM_FB_OFFSET << 24 is vram_base_offset, what
  page-table entries add to a VRAM offset (gmc_v11_0_vram_gtt_location, gmc_v11_0_get_vm_pde).
- gart_enable, per hub: context 0's PAGE_TABLE_BASE_ADDR (amdgpu_gmc_pd_addr), START/END (page
  numbers, >> 12 and >> 44); AGP off (BASE 0, TOP 0, BOT 0xFFFFFF); system aperture LOW/HIGH =
  vram_start/vram_end >> 18, its default page (a VRAM page, + vram_base_offset); the protection-fault
  default page (the host dummy page); L1 TLB (ENABLE_L1_TLB, SYSTEM_ACCESS_MODE 3, advanced driver
  model, MTYPE UC); L2 cache (L2_CNTL..5 with the default values of gc_11_0_0_default.h and mmhub_v3_0.c);
  context 0 enabled; the context-1 identity aperture disabled; the 18 invalidation engines' address
  ranges all-ones; then set_fault_enable_default(true) and a VMID 0 TLB flush. The GC hub also sets
  CP_DEBUG/GL1C_UTCL0_CNTL1/SQG_CONFIG there (no halt on UTCL1 errors, no XNACK interrupts).
- The vm_fault interrupt source (gmc_v11_0_late_init's amdgpu_irq_get) turns on every
  *_PROTECTION_FAULT_ENABLE_INTERRUPT bit of the contexts (amdgpu_gmc_set_vm_fault_masks); faults then
  arrive on the IH ring as SOC21_IH_CLIENTID_VMC (MMHUB) or SOC21_IH_CLIENTID_GFX/UTCL2 fault (GC hub),
  src_data[0..1] = the page address (gmc_v11_0_process_interrupt), vmid_src = the hub.
- gmc_v11_0_flush_vm_hub: invalidation engine 17 ("for GART"); the MMHUB takes the engine's semaphore
  first (a read of _SEM returning 1) and releases it after (write 0); the request is
  PER_VMID_INVALIDATE_REQ = 1 << vmid with INVALIDATE_L2_PTES, L2_PDE0/1/2 and L1_PTES (the legacy,
  full flush, flush type 0); _ACK is polled for the VMID's bit; the MMHUB then also sets
  RESERVED_CACHE_PRIVATE_INVALIDATION in VM_L2_BANK_SELECT_RESERVED_CID2. gmc_v11_0_flush_gpu_tlb
  flushes HDP before, since the tables were written by the CPU through BAR0.

Where the AM driver differs: amdgpu's VMID 0 is a flat GART table over a small range (PAGE_TABLE_DEPTH
0); the AM driver runs its engines in VMID 0 with the same four-level tables amdgpu gives VMIDs 1-15
(num_level 3, block size 9 -> PAGE_TABLE_BLOCK_SIZE 0, START 0, END max_pfn - 1 for 48 bits), rooted
in the boot region so a warm boot finds it at the same address. Over a transport whose DMA memory is not coherent
(USB), the tables below the root are in that DMA memory (pagetable.py), the root still in VRAM. Contexts 1-15 are left alone. VRAM is
mapped at VRAM_VA + its offset, host memory in a window from SYSTEM_VA; both lie outside the FB
aperture, which VMID 0 reaches physically through the system aperture.

Fault words: CID is the UTCL2 client (gfxhub_client_ids; mmhub_client_ids_v3_0_0/_v3_0_2 by CID and
RW). PERMISSION_FAULTS has no upstream definition; the bits are read as 1 = not valid, 2 = read,
4 = write, 8 = execute, the order of the CONTEXT_CNTL fault enables (VALID, READ, WRITE, EXECUTE) and
what amdgpu's fault logs show (0x3 for a read and 0x5 for a write of a missing page).
"""
from __future__ import annotations

import bisect
from contextlib import nullcontext
from dataclasses import dataclass

from amdrv import pagetable, placement, regs
from amdrv.autogen import ih as IHIDS
from amdrv.ip.base import IPBlock
from amdrv.ip.nbio import NBIO
from amdrv.poll import poll_reg
from amdrv.memory import PAGE, Block
from amdrv.pagetable import PageTable

VA_BITS = pagetable.VA_BITS
MAX_PFN = 1 << (VA_BITS - 12)        # amdgpu_vm_adjust_size(256 TB): vm_manager.max_pfn
GART_ENG = 17                        # gmc_v11_0_flush_vm_hub: "Use register 17 for GART"
N_ENGINES = 18
VRAM_VA = 1 << 44                    # VRAM offset x is at VRAM_VA + x
SYSTEM_VA, SYSTEM_VA_SIZE = 2 << 44, 1 << 44
MTYPE_UC = pagetable.MTYPE_UC
# GCVM_L2_CNTL3..5 defaults: gc_11_0_0_default.h; MMVM_: mmhub_v3_0.c's own #defines
L2_DEFAULTS = {"GC": (0x80120007, 0x000000C1, 0x00003FE0), "MM": (0x80100007, 0x000000C1, 0x00003FE0)}
FAULT_KINDS = ("RANGE", "DUMMY_PAGE", "PDE0", "VALID", "READ", "WRITE", "EXECUTE")
PERMISSION_WORDS = ((1, "page not valid"), (2, "no read permission"), (4, "no write permission"),
                    (8, "no execute permission"))
# a fault IV's ring_id (kfd_int_process_v11.c: prot_valid 0x08, prot_read 0x10, prot_write 0x20)
IV_PROTECTION_WORDS = ((0x08, "page not present"), (0x10, "no read permission"), (0x20, "no write permission"))
GFXHUB_CLIENTS = ("CB/DB", "Reserved", "GE1", "GE2", "CPF", "CPC", "CPG", "RLC", "TCP", "SQC (inst)",
                  "SQC (data)", "SQG", "Reserved", "SDMA0", "SDMA1", "GCR", "SDMA2", "SDMA3")
# mmhub_client_ids_v3_0_0 and _v3_0_2 (equal): {cid: (name on read, name on write)}
MMHUB_CLIENTS = {0: ("VMC", None), 2: (None, "DBGUNBIO"), 3: (None, "DCEDWB"), 4: ("DCEDMC", "DCEDMC"),
                 5: ("DCEVGA", "DCEVGA"), 6: ("MP0", "MP0"), 7: ("MP1", "MP1"), 8: ("MPIO", "MPIO"),
                 10: (None, "DBGU0"), 11: (None, "DBGU1"), 12: (None, "DBGU2"), 13: (None, "DBGU3"),
                 14: (None, "XDP"), 15: (None, "OSSSYS"), 16: ("HDP", "HDP"), 17: ("LSDMA", "LSDMA"),
                 18: ("JPEG", "JPEG"), 19: ("VCNU0", "VCNU0"), 20: (None, "VCN0"), 21: ("VSCH", "VSCH"),
                 22: ("VCNU1", "VCNU1"), 23: ("VCN1", "VCN1"), 52: ("VCN0", None)}


class GMCError(RuntimeError):
    """A GMC set-up or mapping problem; the message names the device, the hub and what to do."""


@dataclass(frozen=True)
class GPUMapping:
    """Memory the engines reach at va: VRAM (vram, the Block behind it) or host memory (dma)."""
    va: int
    size: int
    vram: Block | None = None
    dma: object | None = None

    def __repr__(self) -> str:
        what = repr(self.vram) if self.vram is not None else f"host DMA memory {self.dma!r}"
        return f"<GPU VA {self.va:#x}+{self.size:#x}: {what}>"


@dataclass(frozen=True)
class VMFault:
    """A protection fault: what the hub latched (status and address registers) and, when it came from the
    IH ring, what the IV said. status is None when the latch held nothing for this fault (a second fault
    only sets MORE_FAULTS on the first one's status): then only the IV's facts are known."""
    hub: str                       # "GC" or "MM"
    address: int                   # the faulting page's address
    vmid: int
    status: int | None             # the raw VM_L2_PROTECTION_FAULT_STATUS, when it is this fault's
    write: bool | None = None      # RW (None: not known)
    cid: int | None = None         # the UTCL2 client id
    client: str | None = None
    permission: int = 0            # PERMISSION_FAULTS bits
    mapping_error: bool = False
    walker_error: int = 0
    more_faults: bool = False
    atomic: bool = False
    iv_protection: int | None = None   # the IV's ring_id bits 0x08/0x10/0x20
    pasid: int | None = None
    timestamp: int | None = None

    @property
    def reasons(self) -> list[str]:
        out = [words for bit, words in PERMISSION_WORDS if self.permission & bit]
        if self.mapping_error:
            out.append("no mapping (outside the context's range, or a page directory entry is invalid)")
        if self.walker_error:
            out.append(f"page-table walker error {self.walker_error}")
        if not out and self.iv_protection:
            out = [words for bit, words in IV_PROTECTION_WORDS if self.iv_protection & bit]
        return out or ["no cause recorded"]

    def __str__(self) -> str:
        hub = "GC hub" if self.hub == "GC" else "MMHUB"
        kind = "atomic" if self.atomic else {True: "write", False: "read", None: "access"}[self.write]
        by = f" by {self.client} (client id {self.cid:#x})" if self.cid is not None else ""
        more = "; more faults followed" if self.more_faults else ""
        pasid = f", PASID {self.pasid}" if self.pasid else ""
        return (f"{hub} page fault at {self.address:#x} (VMID {self.vmid}{pasid}): {kind}{by}: "
                f"{', '.join(self.reasons)}{more}")


class _Hub:
    """One VM hub's registers: GC hub (GCVM_/GCMC_VM_ in GC) or MMHUB (MMVM_/MMMC_VM_)."""

    def __init__(self, name: str, block, prefix: str):
        self.name, self.regs = name, block
        self.vm, self.mc = f"{prefix}VM_", f"{prefix}MC_VM_"
        self.semaphore = name == "MM"       # gmc_v11_0_use_invalidate_semaphore: MMHUB only
        self.private_invalidation = name == "MM"  # mmhub_v3_0(_2)_init sets vm_l2_bank_select_reserved_cid2
        self.enabled = False

    def vmr(self, stem: str):
        return self.regs.reg(self.vm + stem)

    def mcr(self, stem: str):
        return self.regs.reg(self.mc + stem)


class _VASpace:
    """First-fit allocator of a virtual address window, page granular."""

    def __init__(self, base: int, size: int):
        self.starts, self.ends = [base], [base + size]

    def alloc(self, size: int, align: int = PAGE) -> int | None:
        """The lowest free start that is a multiple of align (a power of two) with size bytes free."""
        for i, (s, e) in enumerate(zip(self.starts, self.ends)):
            a = (s + align - 1) & ~(align - 1)
            if e - a >= size:
                tail = [(a + size, e)] if a + size < e else []
                head = [(s, a)] if s < a else []
                self.starts[i:i + 1] = [r[0] for r in head + tail]
                self.ends[i:i + 1] = [r[1] for r in head + tail]
                return a
        return None

    def release(self, va: int, size: int) -> None:
        i = bisect.bisect_left(self.starts, va)
        self.starts.insert(i, va)
        self.ends.insert(i, va + size)
        for j in (i, i - 1):  # merge with the next range, then the previous one
            if 0 <= j < len(self.starts) - 1 and self.ends[j] == self.starts[j + 1]:
                self.ends[j] = self.ends[j + 1]
                del self.starts[j + 1], self.ends[j + 1]


class GMC(IPBlock):
    name = "gmc"

    def __init__(self, dev, nbio: NBIO | None = None):
        self.dev = dev
        self.nbio = nbio or NBIO(dev)     # the GPU's one NBIO (AMGPU passes it)
        self.hubs = {"MM": _Hub("MM", dev.reg("MMHUB"), "MM"), "GC": _Hub("GC", dev.reg("GC"), "GC")}
        self.sw_init()
        self.pt: PageTable | None = None
        self.dummy_page = None    # host page for protection-fault defaults (amdgpu's dummy page)
        self.vram_base_offset = 0
        self._system_va = _VASpace(SYSTEM_VA, SYSTEM_VA_SIZE)
        # GC hub registers need GFX powered: once GFXOFF may be allowed, the holder sets this to its
        # amdrv.monitor.GfxOff.awake (amdgpu_gfx_off_ctrl around GC access; upstream invalidates the GC hub
        # through KIQ/MES packets, whose doorbell wakes GFX, which this driver does not use)
        self.gc_awake = nullcontext

    # ---------------------------------------------------------------- life cycle
    def sw_init(self) -> None:
        # Boot memory, so that both land at the same place on every boot of this layout.
        self.root = self.dev.mm.alloc_boot(PAGE, PAGE, tag="GMC VMID 0 root page directory")
        self.default_page = self.dev.mm.alloc_boot(PAGE, PAGE, tag="GMC system aperture default page")

    def hw_init(self, warm: bool = False) -> None:
        self.init(warm)

    def hw_fini(self) -> None:
        self.fini()

    def init(self, warm: bool = False) -> None:
        """gmc_v11_0_hw_init: the FB location, the VMID 0 page table, the MMHUB. warm: the previous run's
        fini cleared the root directory (`fini`), so it is not written again (4 KiB through BAR0)."""
        dev, mm = self.dev, self.hubs["MM"]
        # the FB location and offset the VBIOS set, read together (one round trip over USB): nothing writes them
        loc_base, loc_top, fb_offset = (mm.mcr(n) for n in ("FB_LOCATION_BASE", "FB_LOCATION_TOP", "FB_OFFSET"))
        base_v, top_v, offset_v = regs.read_all([loc_base, loc_top, fb_offset])
        fb_base = loc_base.decode(base_v)["FB_BASE"] << 24
        fb_top = loc_top.decode(top_v)["FB_TOP"] << 24 | 0xFFFFFF
        if fb_top < fb_base + dev.vram.size - 1:
            raise GMCError(f"{dev.name}: MMHUB FB location {fb_base:#x}..{fb_top:#x} does not cover the "
                           f"{dev.vram.size >> 20} MiB of VRAM; the VBIOS has not posted the card: power-cycle it")
        for lo, size, what in ((VRAM_VA, dev.vram.size, "VRAM"), (SYSTEM_VA, SYSTEM_VA_SIZE, "host memory")):
            if lo <= fb_top and fb_base < lo + size:
                raise GMCError(f"{dev.name}: the FB aperture {fb_base:#x}..{fb_top:#x} overlaps the {what} "
                               f"VA window at {lo:#x}; VMID 0 would reach VRAM physically there")
        dev.fb_base = fb_base
        self.vram_base_offset = fb_offset.decode(offset_v)["FB_OFFSET"] << 24
        if self.dummy_page is None:
            self.dummy_page = placement.scratch_page(dev.pci)
        if self.pt is None:  # a second init reprograms the registers and keeps the mappings
            # Where DMA memory is not coherent (the USB bridge's SRAM window, written by push), a table
            # written there costs a few commands where one through BAR0 costs thousands: the tables below
            # the root go there (SYSTEM PDEs, as amdgpu's page-table BOs in GTT). The root stays in VRAM.
            # On the open bridge firmware they stay in VRAM (amdrv.placement): 0xF0 streamed writes make a
            # table one round trip there too, and the SRAM is left to bulk copies.
            dma = None if self.dummy_page.coherent or placement.in_vram(dev.pci) else dev.pci.alloc_dma
            self.pt = PageTable(dev.mm, dev.vram.write, self.flush_tlb, vram_base_offset=self.vram_base_offset,
                                name=f"{dev.name} VMID 0", root=self.root, root_clear=warm, dma=dma)
        self._enable_hub(mm)

    def fini(self) -> None:
        """Leaves the VMID 0 root directory all-invalid in VRAM, for the next warm boot's init(warm=True)."""
        if self.pt is not None:
            self.pt.clear_root()

    def init_gfxhub(self) -> None:
        """gfx_v11_0_gfxhub_enable: the GC hub, once the RLC autoload has GC powered."""
        if self.pt is None:
            raise GMCError(f"{self.dev.name}: GC hub enabled before GMC.init() set up the page table")
        self._enable_hub(self.hubs["GC"])

    def _enable_hub(self, hub: _Hub) -> None:
        dev = self.dev
        vram_start, vram_end = dev.fb_base, dev.fb_base + dev.vram.size - 1
        base = self.pt.page_table_base
        # The read-modify-writes' reads first, as one batch (one round trip over USB): no write below changes them
        rmw = [hub.vmr(n) for n in ("L2_PROTECTION_FAULT_CNTL2", "L2_CNTL", "L2_CNTL2", "CONTEXT0_CNTL",
                                    "L2_PROTECTION_FAULT_CNTL")] + [hub.mcr("MX_L1_TLB_CNTL")]
        if hub.name == "GC":
            rmw.append(hub.regs.CP_DEBUG)
        old = dict(zip((r.name for r in rmw), regs.read_all(rmw)))
        hub.vmr("CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32").write(base & 0xFFFFFFFF)
        hub.vmr("CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32").write(base >> 32)
        hub.vmr("CONTEXT0_PAGE_TABLE_START_ADDR_LO32").write(0)
        hub.vmr("CONTEXT0_PAGE_TABLE_START_ADDR_HI32").write(0)
        hub.vmr("CONTEXT0_PAGE_TABLE_END_ADDR_LO32").write((MAX_PFN - 1) & 0xFFFFFFFF)
        hub.vmr("CONTEXT0_PAGE_TABLE_END_ADDR_HI32").write((MAX_PFN - 1) >> 32)
        # system aperture: AGP off, VRAM reached physically, default pages
        hub.mcr("AGP_BASE").write(0)
        hub.mcr("AGP_TOP").write(0)
        hub.mcr("AGP_BOT").write(0x00FFFFFF)
        hub.mcr("SYSTEM_APERTURE_LOW_ADDR").write(vram_start >> 18)
        hub.mcr("SYSTEM_APERTURE_HIGH_ADDR").write(vram_end >> 18)
        default = self.default_page.addr + self.vram_base_offset
        hub.mcr("SYSTEM_APERTURE_DEFAULT_ADDR_LSB").write((default >> 12) & 0xFFFFFFFF)
        hub.mcr("SYSTEM_APERTURE_DEFAULT_ADDR_MSB").write(default >> 44)
        dummy = self.dummy_page.bus_address(0)
        hub.vmr("L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32").write((dummy >> 12) & 0xFFFFFFFF)
        hub.vmr("L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32").write(dummy >> 44)
        hub.vmr("L2_PROTECTION_FAULT_CNTL2").update(old[hub.vm + "L2_PROTECTION_FAULT_CNTL2"],
                                                    ACTIVE_PAGE_MIGRATION_PTE_READ_RETRY=1)
        # L1 TLB and L2 cache
        hub.mcr("MX_L1_TLB_CNTL").update(old[hub.mc + "MX_L1_TLB_CNTL"], ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3, ENABLE_ADVANCED_DRIVER_MODEL=1,
                                         SYSTEM_APERTURE_UNMAPPED_ACCESS=0, ECO_BITS=0, MTYPE=MTYPE_UC)
        hub.vmr("L2_CNTL").update(old[hub.vm + "L2_CNTL"], ENABLE_L2_CACHE=1, ENABLE_L2_FRAGMENT_PROCESSING=0,
                                  ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY=1, L2_PDE0_CACHE_TAG_GENERATION_MODE=0,
                                  PDE_FAULT_CLASSIFICATION=0, CONTEXT1_IDENTITY_ACCESS_MODE=1,
                                  IDENTITY_MODE_FRAGMENT_SIZE=0)
        hub.vmr("L2_CNTL2").update(old[hub.vm + "L2_CNTL2"], INVALIDATE_ALL_L1_TLBS=1, INVALIDATE_L2_CACHE=1)
        cntl3, cntl4, cntl5 = L2_DEFAULTS[hub.name]
        hub.vmr("L2_CNTL3").write(cntl3, BANK_SELECT=9, L2_CACHE_BIGK_FRAGMENT_SIZE=6)
        hub.vmr("L2_CNTL4").write(cntl4, VMC_TAP_PDE_REQUEST_PHYSICAL=0, VMC_TAP_PTE_REQUEST_PHYSICAL=0)
        hub.vmr("L2_CNTL5").write(cntl5, L2_CACHE_SMALLK_FRAGMENT_SIZE=0)
        # context 0: four levels (see the module docstring), fault interrupts on
        interrupts = {f"{k}_PROTECTION_FAULT_ENABLE_INTERRUPT": 1 for k in FAULT_KINDS}
        hub.vmr("CONTEXT0_CNTL").update(old[hub.vm + "CONTEXT0_CNTL"], ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=3, PAGE_TABLE_BLOCK_SIZE=0,
                                        RETRY_PERMISSION_OR_INVALID_PAGE_FAULT=0, **interrupts)
        hub.vmr("L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_LO32").write(0xFFFFFFFF)
        hub.vmr("L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_HI32").write(0x0000000F)
        hub.vmr("L2_CONTEXT1_IDENTITY_APERTURE_HIGH_ADDR_LO32").write(0)
        hub.vmr("L2_CONTEXT1_IDENTITY_APERTURE_HIGH_ADDR_HI32").write(0)
        hub.vmr("L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_LO32").write(0)
        hub.vmr("L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_HI32").write(0)
        # All LO32s, then all HI32s: the same value back to back (over USB only the TLP's address changes).
        for eng in range(N_ENGINES):
            hub.vmr(f"INVALIDATE_ENG{eng}_ADDR_RANGE_LO32").write(0xFFFFFFFF)
        for eng in range(N_ENGINES):
            hub.vmr(f"INVALIDATE_ENG{eng}_ADDR_RANGE_HI32").write(0x1F)
        self.nbio.hdp_flush()
        self._set_fault_enable_default(hub, old)
        hub.enabled = True
        self._flush_hub(hub, 0)

    def _set_fault_enable_default(self, hub: _Hub, old: dict[str, int] | None = None) -> None:
        """gfxhub/mmhub_v3_0_set_fault_enable_default(true): faults answered with the default page. old: register
        values read already (by name), with nothing written to them since."""
        old = old or {}
        if hub.name == "GC":
            gc = hub.regs
            gc.CP_DEBUG.update(old.get("CP_DEBUG"), CPG_UTCL1_ERROR_HALT_DISABLE=1)
            gc.GRBM_GFX_INDEX.write(0xE0000000)  # regGRBM_GFX_INDEX_DEFAULT: broadcast
            # read after the broadcast select (they are per shader engine), together
            gl1c, sqg = regs.read_all([gc.GL1C_UTCL0_CNTL1, gc.SQG_CONFIG])
            gc.GL1C_UTCL0_CNTL1.update(gl1c, RESP_MODE=0, RESP_FAULT_MODE=2)
            gc.SQG_CONFIG.update(sqg, XNACK_INTR_MASK=0xFFFF)
        defaults = {f"{k}_PROTECTION_FAULT_ENABLE_DEFAULT": 1 for k in (
            "RANGE", "PDE0", "PDE1", "PDE2", "TRANSLATE_FURTHER", "NACK", "DUMMY_PAGE", "VALID", "READ", "WRITE",
            "EXECUTE")}
        hub.vmr("L2_PROTECTION_FAULT_CNTL").update(old.get(hub.vm + "L2_PROTECTION_FAULT_CNTL"), **defaults)

    # ---------------------------------------------------------------- TLB
    def flush_tlb(self, vmid: int = 0) -> None:
        """gmc_v11_0_flush_gpu_tlb on every enabled hub: HDP first (the CPU wrote the tables through
        BAR0), then the invalidation. The PageTable calls this after each map/unmap."""
        self.nbio.hdp_flush()
        for hub in self.hubs.values():
            if hub.enabled:
                with self.gc_awake() if hub.name == "GC" else nullcontext():
                    self._flush_hub(hub, vmid)

    def _flush_hub(self, hub: _Hub, vmid: int) -> None:
        """gmc_v11_0_flush_vm_hub with engine 17."""
        req = hub.vmr(f"INVALIDATE_ENG{GART_ENG}_REQ")
        sem = hub.vmr(f"INVALIDATE_ENG{GART_ENG}_SEM")
        ack = hub.vmr(f"INVALIDATE_ENG{GART_ENG}_ACK")
        value = req.encode(PER_VMID_INVALIDATE_REQ=1 << vmid, FLUSH_TYPE=0, INVALIDATE_L2_PTES=1,
                           INVALIDATE_L2_PDE0=1, INVALIDATE_L2_PDE1=1, INVALIDATE_L2_PDE2=1, INVALIDATE_L1_PTES=1,
                           CLEAR_PROTECTION_FAULT_STATUS_ADDR=0)
        if hub.semaphore:
            poll_reg(sem, 1, 1, f"the {hub.name} hub invalidation engine {GART_ENG} semaphore", device=self.dev.name,
                     error=GMCError)
        req.write(value)
        cid2 = hub.vmr("L2_BANK_SELECT_RESERVED_CID2") if hub.private_invalidation else None
        cid2_v = None
        try:
            want = 1 << vmid
            if cid2 is not None:     # the ack's first read and the private invalidation's read-modify-write read
                ack_v, cid2_v = regs.read_all([ack, cid2])      # as one batch (one USB round trip)
            if cid2 is None or ack_v & want != want:
                poll_reg(ack, want, want, f"the {hub.name} hub TLB invalidation ack of VMID {vmid}",
                         device=self.dev.name, error=GMCError)
        finally:
            if hub.semaphore:
                sem.write(0)
        if cid2 is not None:
            cid2.update(cid2_v, RESERVED_CACHE_PRIVATE_INVALIDATION=1)
            cid2.read()  # upstream reads back "to ensure invalidation is done"

    # ---------------------------------------------------------------- mappings
    def _need_pt(self) -> PageTable:
        if self.pt is None:
            raise GMCError(f"{self.dev.name}: map/unmap before GMC.init() set up the page table")
        return self.pt

    def map_vram(self, size: int, *, boot: bool = False, align: int | None = None, tag: str = "",
                 flags: int = pagetable.RWX, mtype: int | None = None) -> GPUMapping:
        """Allocates VRAM (the heap, or the boot region with boot=True) and maps it at VRAM_VA + its
        offset. Page sizes follow alignment, so 2 MiB-aligned blocks get 2 MiB pages."""
        pt = self._need_pt()
        mm = self.dev.mm
        block = mm.alloc_boot(size, align or PAGE, tag) if boot else mm.alloc(size, align, tag)
        try:
            pt.map(VRAM_VA + block.addr, block.addr, block.size, flags=flags, mtype=mtype)
        except BaseException:
            if not boot:
                mm.free(block)
            raise
        return GPUMapping(VRAM_VA + block.addr, block.size, vram=block)

    def map_system(self, buf, size: int | None = None, *, flags: int = pagetable.RWX,
                   align: int = PAGE) -> GPUMapping:
        """Maps a pcie DMABuffer (its first size bytes, whole pages) for the engines: system, snooped,
        uncached pages, one per 4 KiB page of the buffer (its pages need not be contiguous). align: of the
        VA (a power of two, at least 4 KiB), for a consumer that takes the address in coarser units (the
        PSP's firmware buffer: MC address >> 20)."""
        if align < PAGE or align & (align - 1):
            raise GMCError(f"{self.dev.name}: map_system alignment {align:#x} is not a power of two >= 4 KiB")
        pt = self._need_pt()
        size = buf.size if size is None else size
        size = (size + PAGE - 1) & ~(PAGE - 1)
        if not 0 < size <= buf.size:
            # the GPU maps whole pages: a last page only partly backed would let it reach host memory
            # that is not the buffer's
            raise GMCError(f"{self.dev.name}: cannot map {size:#x} bytes (whole 4 KiB pages) of a "
                           f"{buf.size:#x}-byte DMA buffer; allocate DMA memory in whole pages")
        va = self._system_va.alloc(size, align)
        if va is None:
            raise GMCError(f"{self.dev.name}: the {SYSTEM_VA_SIZE >> 40} TiB host-memory VA window is full; "
                           "unmap DMA buffers no longer used")
        try:
            if getattr(buf, "vram_block", None) is not None:     # amdrv.placement.VRAMBuffer: VRAM, uncached
                pt.map(va, buf.vram_block.addr, size, flags=flags, mtype=pagetable.MTYPE_UC)
            else:
                pt.map(va, [buf.bus_address(off) for off in range(0, size, PAGE)], size, system=True, flags=flags)
        except BaseException:
            self._system_va.release(va, size)
            raise
        return GPUMapping(va, size, dma=buf)

    def unmap(self, m: GPUMapping) -> None:
        """Unmaps (with the TLB flush) and frees the VRAM map_vram allocated (boot memory stays);
        a DMA buffer stays the caller's."""
        self._need_pt().unmap(m.va, m.size)
        if m.vram is not None:
            if not m.vram.boot:
                self.dev.mm.free(m.vram)
        else:
            self._system_va.release(m.va, m.size)

    def translate(self, va: int):
        """The driver's view of va (pagetable.Translation or None)."""
        return self._need_pt().translate(va)

    # ---------------------------------------------------------------- faults
    def decode_fault(self, hub: str = "GC", clear: bool = True) -> VMFault | None:
        """The hub's latched protection fault in words, or None when none is latched. clear re-arms the
        latch (VM_L2_PROTECTION_FAULT_CNTL bit 0, as gmc_v11_0_process_interrupt does)."""
        h = self._hub(hub)
        if h.name == "GC":
            with self.gc_awake():
                return self._decode_fault(h, clear)
        return self._decode_fault(h, clear)

    def _decode_fault(self, h: _Hub, clear: bool) -> VMFault | None:
        status = h.vmr("L2_PROTECTION_FAULT_STATUS").read()
        if not status:
            return None
        address = self._latched_address(h)
        if clear:
            self._clear_fault(h)
        return self._fault(h, status, address)

    def _latched_address(self, h: _Hub) -> int:
        lo = h.vmr("L2_PROTECTION_FAULT_ADDR_LO32").read()
        hi = h.vmr("L2_PROTECTION_FAULT_ADDR_HI32").read()
        return lo << 12 | (hi & 0xF) << 44

    def fault_from_iv(self, iv) -> VMFault | None:
        """The fault an IH entry (amdrv.ip.ih.IVEntry) reports, in words; None for an entry that is not a
        VM fault. The IV's vmid_src picks the hub (amdgpu's vmhub[vmid_src]); its status is read and the
        latch re-armed as gmc_v11_0_process_interrupt does, and used when it holds this IV's page."""
        gfx_fault = iv.client_id == IHIDS.SOC21_IH_CLIENTID_GFX and iv.src_id == IHIDS.UTCL2_1_0__SRCID__FAULT
        vmc_fault = iv.client_id == IHIDS.SOC21_IH_CLIENTID_VMC and iv.src_id == IHIDS.VMC_1_0__SRCID__VM_FAULT
        if not (gfx_fault or vmc_fault):
            return None
        h = self.hubs["MM" if iv.vmid_src else "GC"]
        with self.gc_awake() if h.name == "GC" else nullcontext():
            return self._fault_from_iv(h, iv)

    def _fault_from_iv(self, h: _Hub, iv) -> VMFault:
        status_reg = h.vmr("L2_PROTECTION_FAULT_STATUS")
        if h.name == "GC":
            status_reg.read()  # gmc_v11_0_process_interrupt: a dummy read lets the GC status settle
        status = status_reg.read()
        latched = self._latched_address(h) if status else None
        self._clear_fault(h)
        address = iv.src_data[0] << 12 | (iv.src_data[1] & 0xF) << 44
        facts = dict(iv_protection=iv.ring_id & 0x38, pasid=iv.pasid, timestamp=iv.timestamp)
        if latched != address:
            write = True if iv.ring_id & 0x20 else None
            return VMFault(h.name, address, iv.vmid, status=None, write=write, **facts)
        return self._fault(h, status, address, **facts)

    def _hub(self, name: str) -> _Hub:
        if name not in self.hubs:
            raise GMCError(f"{self.dev.name}: no hub {name!r}; the hubs are 'GC' and 'MM'")
        return self.hubs[name]

    def _clear_fault(self, h: _Hub) -> None:
        h.vmr("L2_PROTECTION_FAULT_CNTL").update(CLEAR_PROTECTION_FAULT_STATUS_ADDR=1)

    def _fault(self, h: _Hub, status: int, address: int, **iv) -> VMFault:
        f = h.vmr("L2_PROTECTION_FAULT_STATUS").decode(status)
        cid, write = f["CID"], bool(f["RW"])
        if h.name == "GC":
            client = GFXHUB_CLIENTS[cid] if cid < len(GFXHUB_CLIENTS) else "unknown"
        else:
            client = (MMHUB_CLIENTS.get(cid, (None, None))[write]) or "unknown"
        return VMFault(h.name, address, f["VMID"], status, write=write, cid=cid, client=client,
                       permission=f["PERMISSION_FAULTS"], mapping_error=bool(f["MAPPING_ERROR"]),
                       walker_error=f["WALKER_ERROR"], more_faults=bool(f["MORE_FAULTS"]), atomic=bool(f["ATOMIC"]),
                       **iv)
