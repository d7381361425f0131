"""GMC 11 (GC hub 11.0.0 and MMHUB 3.0.x): GPU virtual memory, its translation cache, faults.

Facts (gmc_v11_0.c, gfxhub_v3_0.c, mmhub_v3_0.c, amdgpu_vm.h, amdgpu_vm_pt.c, amdgpu_gmc.h; register
names and fields from the generated gc_11_0_0 and mmhub_3_0_x tables):
- MC address space of a hub: FB aperture [FB_LOCATION_BASE << 24, FB_LOCATION_TOP << 24 | 0xFFFFFF] is
  VRAM at offset addr - fb_base + (FB_OFFSET << 24) (FB_OFFSET is the PTE "vram_base_offset", 0 on a dGPU);
  the AGP aperture [AGP_BOT << 24, AGP_TOP << 24 | 0xFFFFFF] is host memory at addr - agp_bot +
  (AGP_BASE << 24); for VMID 0 the system aperture [SYSTEM_APERTURE_LOW_ADDR << 18, HIGH << 18 | 0x3FFFF]
  is reached physically. Everything else goes through the VMID's page table.
- VM_CONTEXTn_CNTL: ENABLE_CONTEXT, PAGE_TABLE_DEPTH (0 = a flat PTE table, as amdgpu's GART; 3 = the
  four levels PDB2/PDB1/PDB0/PTB), PAGE_TABLE_BLOCK_SIZE (extra index bits of the PTB; 512 << it
  entries), and the per-fault *_PROTECTION_FAULT_ENABLE_INTERRUPT bits. PAGE_TABLE_BASE_ADDR_LO32/HI32
  hold a PDE-format value (amdgpu_gmc_pd_addr): address bits 47:6, SYSTEM bit for a root in host memory.
  START/END_ADDR_LO32/HI32 are 4 KiB page numbers (HI32: bits 47:44); the walk indexes page - start.
- Entries (amdgpu_vm.h): VALID 0, SYSTEM 1, SNOOPED 2, TMZ 3, EXECUTABLE 4, READABLE 5, WRITEABLE 6,
  FRAG bits 11:7, address bits 47:12 (PDE: 47:6), MTYPE 50:48, PRT 51, PDE_PTE 54 (a PDB0 entry with it
  maps a 2 MiB page, a PDB1 entry a 1 GiB page). Addresses of VRAM pages and tables are physical
  (vram_base_offset + VRAM offset, gmc_v11_0_get_vm_pde); SYSTEM ones are bus addresses, reached by DMA
  (so bus mastering must be on).
- The fragment field promises that the 4 KiB << FRAG aligned block around the page is contiguous: the
  translation cache keeps one entry per such block, as the hardware's does, so a wrong FRAG is visible.
- Cached translations and directory entries stay in use until the invalidation engine is asked:
  VM_INVALIDATE_ENGn_REQ (PER_VMID_INVALIDATE_REQ bitmap) drops the VMIDs' translations with
  INVALIDATE_L1_PTES or INVALIDATE_L2_PTES and their cached PDB0/PDB1/PDB2 entries with INVALIDATE_L2_PDE0/1/2, and sets
  VM_INVALIDATE_ENGn_ACK.PER_VMID_INVALIDATE_ACK one clock step later; only entries inside the engine's
  VM_INVALIDATE_ENGn_ADDR_RANGE go (_engine_range; upstream programs the whole range on every engine).
  VM_INVALIDATE_ENGn_SEM reads 1 when it grants the semaphore (0 while held) and a write of 0 releases it
  (gmc_v11_0_flush_vm_hub). On the
  MMHUB a request made without holding the semaphore loses its ACK (upstream's reason for taking it there).
- Faults latch VM_L2_PROTECTION_FAULT_STATUS (VMID, RW, CID, PERMISSION_FAULTS, MAPPING_ERROR, MORE_FAULTS)
  and _ADDR_LO32/_HI32 (page number bits 43:12 / 47:44) unless a fault is already latched and
  VM_L2_PROTECTION_FAULT_CNTL.ALLOW_SUBSEQUENT_PROTECTION_FAULT_STATUS_ADDR_UPDATES is 0 (then only
  MORE_FAULTS is set). Writing CNTL.CLEAR_PROTECTION_FAULT_STATUS_ADDR=1 clears them. If the context's
  *_ENABLE_INTERRUPT bit for the fault is set an IV is posted: client SOC21_IH_CLIENTID_GFX (GC hub,
  UTCL2 fault src 0) or SOC21_IH_CLIENTID_VMC (MMHUB, VM_FAULT src 0, vmid_src 1), src_data[0] = page
  number bits 43:12, src_data[1] = bits 47:44 (gmc_v11_0_process_interrupt). The IV's ring_id carries
  the protection that failed, as amdkfd's kfd_int_process_v11.c reads it from these IVs: 0x08 not
  present (invalid PTE or PDE, out of range), 0x10 read, 0x20 write (execute has no bit there).
- Default page (gfxhub_v3_0/mmhub_v3_0_set_fault_enable_default: "true redirects VM faults to the default
  page"): when VM_L2_PROTECTION_FAULT_CNTL.<kind>_PROTECTION_FAULT_ENABLE_DEFAULT is set for the fault's kind
  (RANGE, PDE0/1/2 by the level of the invalid directory entry, VALID, READ, WRITE, EXECUTE), the fault is
  still latched and posted, but the access is answered with the page at VM_L2_PROTECTION_FAULT_DEFAULT_ADDR
  (PHYSICAL_PAGE_ADDR: a host bus page when VM_L2_CNTL.ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY, as
  gfxhub_v3_0_init_cache_regs sets it for amdgpu's dummy page; a VRAM physical page otherwise): reads return
  what is there, writes go there. Whether the client then carries on is the client's setting (client_halts):
  the CP halts on a UTCL1 error unless CP_DEBUG.CPG_UTCL1_ERROR_HALT_DISABLE ("NO halt CP when page
  fault"); shader accesses (TCP, SQC, SQG) carry on only with GL1C_UTCL0_CNTL1.RESP_FAULT_MODE 2 ("Error (no
  retry) respond mode: SUCCESS"), other modes are taken as an error the wave stops on (assumption); the other
  clients (SDMA, MMHUB clients) take the default page (assumption: upstream programs no halt control for
  them). With the bit clear the access fails (VMFault) and the client stops, which for the CP and SDMA
  is a hung queue (amdgpu_vm_fault_stop "always" programs this).
- GL1C_UTCL0_CNTL1 is one register per shader array (the GL1 cache is per SA): a write reaches the SEs and
  SAs GRBM_GFX_INDEX names, all of them with SE_/SA_BROADCAST_WRITES (gfxhub_v3_0_set_fault_enable_default
  sets the broadcast default "before programming GL1C_UTCL0_CNTL1 and SQG_CONFIG", which says the register
  is per instance); an index naming no SE or SA of the chip (gc_info gc_num_se, gc_num_sa_per_se) reaches
  none and the write is lost (assumption). A read returns the instance SE_INDEX/SA_INDEX name. Wave
  placement is not modelled, so a shader access carries on after a fault only when every SA has
  RESP_FAULT_MODE SUCCESS (assumption: on the card a wave may run on any SA).
- Power-on values (gc_11_0_0_default.h; MMHUB from mmhub_2_3_0_default.h, the nearest published MMHUB
  defaults, equal to GC's: assumption for 3.0.0): VM_L2_PROTECTION_FAULT_CNTL 0x3ffffffc (every
  ENABLE_DEFAULT bit set), MC_VM_MX_L1_TLB_CNTL 0x501 (L1 TLB on, SYSTEM_ACCESS_MODE 0), VM_L2_CNTL 0x80602
  (ENABLE_L2_CACHE 0, default page in VRAM), VM_L2_CNTL3/4/5 0x80120007/0xc1/0x3fe0.
- L1 TLB and L2 (mmhub_v3_0_gart_disable turns the GART off by clearing MC_VM_MX_L1_TLB_CNTL.ENABLE_L1_TLB
  and VM_L2_CNTL.ENABLE_L2_CACHE): with the L1 TLB off the hub services no request of its clients; with the
  L2 off no page table is walked, only the physical (system aperture) path works. Neither can latch a
  fault (the L2 does that): the request is refused (HubRefused, a DMAError: the engine stops). Assumption on
  what the client sees; r600's AGP mode (sid.h naming) runs with the L1 TLB on and the L2 off.
- VMID 0 physical path, MC_VM_MX_L1_TLB_CNTL.SYSTEM_ACCESS_MODE (sid.h: 0 PA_ONLY, 1 USE_SYS_MAP, 2 IN_SYS,
  3 NOT_IN_SYS): with 3 (what gfxhub/mmhub_v3_0_init_tlb_regs program) an address inside the system aperture
  [SYSTEM_APERTURE_LOW_ADDR << 18, HIGH << 18 | 0x3FFFF] is physical: FB aperture -> VRAM, AGP -> host,
  else the SYSTEM_APERTURE_DEFAULT_ADDR page (VRAM physical); outside it the VMID 0 page table is used. With
  0 every VMID 0 address is physical (outside FB and AGP nothing answers). Modes 1 and 2 are not modelled
  (refused, saying so). This holds for the physical clients too (PSP, SMU, IH with MC_SPACE 4, through
  mc_read/mc_write on the MMHUB).
"""
import functools
import struct
from dataclasses import dataclass

from amdrv.autogen import gmc as G
from amdrv.autogen import ih as IHIDS
from gpusim.device import Block, DMAError, IVEntry

PAGE = 4096
ADDR_MASK = 0x0000FFFFFFFFF000
PDE_ADDR_MASK = 0x0000FFFFFFFFFFC0
N_ENGINES = 18
FB_BASE = 0x80_0000_0000
N_VMIDS = 16
# VM_L2_PROTECTION_FAULT_STATUS.PERMISSION_FAULTS bits (which check failed) and the CONTEXTn_CNTL
# interrupt-enable field each fault kind is reported under.
PERM_VALID, PERM_READ, PERM_WRITE, PERM_EXECUTE = 1, 2, 4, 8
_KIND_ENABLE = {"range": "RANGE", "valid": "VALID", "read": "READ", "write": "WRITE", "execute": "EXECUTE",
                "pde": "PDE0"}
# Power-on values (gc_11_0_0_default.h regGCVM_L2_*_DEFAULT, regGCMC_VM_MX_L1_TLB_CNTL_DEFAULT; the MMHUB's
# from mmhub_2_3_0_default.h, equal: assumption for MMHUB 3.0.x, which publishes no default header)
POWER_ON = {"MC_VM_MX_L1_TLB_CNTL": 0x501, "VM_L2_CNTL": 0x80602, "VM_L2_CNTL3": 0x80120007, "VM_L2_CNTL4": 0xC1,
            "VM_L2_CNTL5": 0x3FE0, "VM_L2_PROTECTION_FAULT_CNTL": 0x3FFFFFFC}
# sid.h SYSTEM_ACCESS_MODE_PA_ONLY / _NOT_IN_SYS
ACCESS_PA_ONLY, ACCESS_NOT_IN_SYS = 0, 3
# gfxhub_client_ids: CPF, CPC, CPG (the CP's own fetches and writes) and TCP, SQC (inst), SQC (data), SQG
CP_CLIENTS, SHADER_CLIENTS = (4, 5, 6), (8, 9, 10, 11)
RESP_FAULT_MODE_SUCCESS = 2   # gfxhub_v3_0_set_fault_enable_default: "Error (no retry) respond mode: SUCCESS"
# IV ring_id bits of a fault (kfd_int_process_v11.c: prot_valid 0x08, prot_read 0x10, prot_write 0x20)
_KIND_RING_ID = {"range": 0x08, "pde": 0x08, "valid": 0x08, "read": 0x10, "write": 0x20, "execute": 0}


def _overlaps(begin: int, end: int, first: int, last: int) -> bool:
    """Whether the pages [begin, end) meet the pages [first, last]."""
    return begin <= last and first < end


class VMFault(Exception):
    """A translation the hub refused; the fault is already latched and (if enabled) posted to the IH."""

    def __init__(self, hub: str, vmid: int, va: int, kind: str, write: bool, level: int = 0):
        self.hub, self.vmid, self.va, self.kind, self.write = hub, vmid, va, kind, write
        self.level = level    # for "pde": the level of the invalid entry (1 = PDB0 ... 3 = PDB2)
        super().__init__(f"{hub} VMID {vmid}: {kind} fault on {'write' if write else 'read'} at {va:#x}")


class HubRefused(DMAError):
    """The hub serviced no translation (L1 TLB or L2 off, an unmodelled access mode, nothing behind a
    physical address): no fault is latched; the engine's access failed."""


@dataclass(frozen=True)
class Translation:
    system: bool      # True: host bus address; False: VRAM offset
    addr: int
    pte: int          # the entry that produced it (flags for the engines: MTYPE, SNOOPED, ...)
    fault: VMFault | None = None   # set when the access faulted and was answered with the default page


class Hub:
    """One VM hub's registers by name and its translation cache (plain state, so a device pickles)."""

    def __init__(self, name: str, ip: str, vm: str, mc: str, client_id: int, src_id: int, vmid_src: int):
        self.name, self.ip, self.vm, self.mc = name, ip, vm, mc
        self.client_id, self.src_id, self.vmid_src = client_id, src_id, vmid_src
        self.reset()

    def reset(self) -> None:
        # vmid -> {(shift, block number): (phys base of block, system, pte)}
        self.tlb: dict[int, dict[tuple[int, int], tuple[int, bool, int]]] = {v: {} for v in range(N_VMIDS)}
        self.tlb_shifts: dict[int, set[int]] = {v: set() for v in range(N_VMIDS)}
        # vmid -> {(level above the PTB, page >> level shift): directory entry}
        self.pde_cache: dict[int, dict[tuple[int, int], int]] = {v: {} for v in range(N_VMIDS)}
        self.sem_held = [False] * N_ENGINES
        self.walks = 0      # page-table walks done (cache misses), for tests and benchmarks


class _Hold:
    """GMC._holding's context manager (one per GMC, reused: entering it is on every physical access)."""

    def __init__(self, gmc):
        self.gmc, self.depth = gmc, 0

    def __enter__(self):
        if not self.depth:
            self.gmc._held = {}
        self.depth += 1

    def __exit__(self, *exc):
        self.depth -= 1
        if not self.depth:
            self.gmc._held = None


class GMC(Block):
    name = "GMC"
    _held: dict | None = None   # registers read once for the length of one mc_read/mc_write (_holding)

    def attach(self) -> None:
        self.hubs = {
            "GC": Hub("GC", "GC", "GCVM_", "GCMC_VM_", IHIDS.SOC21_IH_CLIENTID_GFX, IHIDS.UTCL2_1_0__SRCID__FAULT, 0),
            "MM": Hub("MM", "MMHUB", "MMVM_", "MMMC_VM_", IHIDS.SOC21_IH_CLIENTID_VMC,
                      IHIDS.VMC_1_0__SRCID__VM_FAULT, 1),
        }
        for hub in self.hubs.values():
            for eng in range(N_ENGINES):
                self.on_write(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_REQ", functools.partial(self._w_req, hub.name, eng))
                self.on_read(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_SEM", functools.partial(self._r_sem, hub.name, eng))
                self.on_write(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_SEM", functools.partial(self._w_sem, hub.name, eng))
            self.on_write(hub.ip, f"{hub.vm}L2_PROTECTION_FAULT_CNTL", functools.partial(self._w_fault_cntl, hub.name))
            self.on_write(hub.ip, f"{hub.vm}L2_CNTL2", functools.partial(self._w_l2_cntl2, hub.name))
        self.on_write("GC", "GL1C_UTCL0_CNTL1", self._w_gl1c)
        self.on_read("GC", "GL1C_UTCL0_CNTL1", self._r_gl1c)

    def reset(self) -> None:
        for hub in self.hubs.values():
            hub.reset()
            # What the VBIOS leaves programmed at power-on: VRAM at MC address FB_BASE (Navi3x amdgpu logs
            # "VRAM: ... 0x0000008000000000 - ..."), no FB offset (dGPU).
            self.set(hub.ip, hub.mc + "FB_LOCATION_BASE", FB_BASE >> 24)
            self.set(hub.ip, hub.mc + "FB_LOCATION_TOP", (FB_BASE + self.dev.vram.size - 1) >> 24)
            for stem, value in POWER_ON.items():
                name = (hub.mc + stem[len("MC_VM_"):]) if stem.startswith("MC_VM_") else hub.vm + stem[len("VM_"):]
                self.set(hub.ip, name, value)
        value = self.dev.power_on_value("GC", "GL1C_UTCL0_CNTL1")
        self.gl1c = {sa: value for sa in self._shader_arrays()}

    # -- GL1C_UTCL0_CNTL1, one per shader array (module docstring) ----------------------------------
    def _shader_arrays(self) -> list[tuple[int, int]]:
        info = self.dev.layout.gc_info
        return [(se, sa) for se in range(info["gc_num_se"]) for sa in range(info["gc_num_sa_per_se"])]

    def _gl1c_state(self) -> dict:
        gl1c = self.__dict__.get("gl1c")
        if gl1c is None:        # a GPU saved before the per-SA model: every SA holds the stored value
            v = self.dev.regs.peek(self.dev.reg_addr("GC", "GL1C_UTCL0_CNTL1"))
            gl1c = self.gl1c = {sa: v for sa in self._shader_arrays()}
        return gl1c

    def _gfx_index(self) -> dict:
        return self.dev.table("GC")["GRBM_GFX_INDEX"].decode(self.get("GC", "GRBM_GFX_INDEX"))

    def _w_gl1c(self, value: int):
        idx, gl1c = self._gfx_index(), self._gl1c_state()
        hit = [(se, sa) for se, sa in gl1c if (idx["SE_BROADCAST_WRITES"] or se == idx["SE_INDEX"])
               and (idx["SA_BROADCAST_WRITES"] or sa == idx["SA_INDEX"])]
        for k in hit:
            gl1c[k] = value
        if not hit:
            self.error(f"GL1C_UTCL0_CNTL1 write {value:#x} with GRBM_GFX_INDEX SE {idx['SE_INDEX']} SA "
                       f"{idx['SA_INDEX']} (no broadcast) reaches no shader array of the chip: lost")
        return None

    def _r_gl1c(self) -> int:
        idx = self._gfx_index()
        return self._gl1c_state().get((idx["SE_INDEX"], idx["SA_INDEX"]), 0)

    # -- register helpers ---------------------------------------------------------------------------
    def _reg(self, hub: Hub, name: str) -> int:
        held = self._held
        if held is None:
            return self.get(hub.ip, name)
        key = (hub.ip, name)
        if key not in held:
            held[key] = self.get(hub.ip, name)
        return held[key]

    def _holding(self):
        """For one physical client's access of many pages: the hub's registers cannot change in between,
        so each is read once (a 1 MiB firmware read walks 256 pages through the same apertures). Nested
        holds share the outermost one's values (a fault drops them: _fault)."""
        hold = self.__dict__.get("_hold")
        if hold is None:
            hold = self._hold = _Hold(self)
        return hold

    def _fld(self, hub: Hub, reg: str, field: str, value: int | None = None) -> int:
        fields = self.__dict__.get("_fields")
        if fields is None:
            fields = self._fields = {}       # (ip, register, field) -> (shift, mask): this chip's tables
        key = (hub.ip, reg, field)
        f = fields.get(key)
        if f is None:
            d = self.dev.table(hub.ip)[reg].fields[field]
            f = fields[key] = (d.shift, (1 << d.width) - 1)
        v = self._reg(hub, reg) if value is None else value
        return (v >> f[0]) & f[1]

    def _u64(self, hub: Hub, stem: str) -> int:
        return self._reg(hub, stem + "_LO32") | (self._reg(hub, stem + "_HI32") << 32)

    def _page_number(self, hub: Hub, stem: str) -> int:
        # LOGICAL_PAGE_NUMBER_LO32 and LOGICAL_PAGE_NUMBER_HI4: a 36-bit page number (48-bit addresses)
        return self._reg(hub, stem + "_LO32") | (self._reg(hub, stem + "_HI32") & 0xF) << 32

    # -- invalidation engine ------------------------------------------------------------------------
    def _w_req(self, hub_name: str, eng: int, value: int):
        hub = self.hubs[hub_name]
        self.set(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_ACK", 0)
        # gmc_v11_0_flush_vm_hub: the MMHUB "may lose gpuvm invalidate acknowledge state across power-gating
        # off cycle", which holding the engine's semaphore prevents. Modelled as its deterministic worst case:
        # a request without the semaphore invalidates, but its ACK is lost.
        ack = hub_name != "MM" or hub.sem_held[eng]
        if not ack:
            self.error(f"{hub.vm}INVALIDATE_ENG{eng}_REQ written without holding {hub.vm}INVALIDATE_ENG{eng}_SEM: "
                       "the MMHUB may power-gate and lose the ACK (gmc_v11_0_flush_vm_hub); it is lost")
        self.dev.schedule(1, functools.partial(self._complete_req, hub_name, eng), value, ack)
        return None

    def _complete_req(self, hub_name: str, eng: int, value: int, ack: bool = True) -> None:
        hub = self.hubs[hub_name]
        reg = f"{hub.vm}INVALIDATE_ENG{eng}_REQ"
        vmids = self._fld(hub, reg, "PER_VMID_INVALIDATE_REQ", value)
        ptes = self._fld(hub, reg, "INVALIDATE_L2_PTES", value) or self._fld(hub, reg, "INVALIDATE_L1_PTES", value)
        pde_levels = [n + 1 for n in range(3) if self._fld(hub, reg, f"INVALIDATE_L2_PDE{n}", value)]
        pages = self._engine_range(hub, eng)
        for v in range(N_VMIDS):
            if vmids >> v & 1:
                self.invalidate(hub_name, v, ptes=bool(ptes), pde_levels=pde_levels, pages=pages)
        if self._fld(hub, reg, "CLEAR_PROTECTION_FAULT_STATUS_ADDR", value):
            self._clear_fault(hub)
        if ack:
            self.set(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_ACK", vmids)

    def _engine_range(self, hub: Hub, eng: int) -> tuple[int, int]:
        """The logical pages [first, last] an engine's invalidations cover: VM_INVALIDATE_ENGn_ADDR_RANGE_LO32/
        HI32 (S_BIT, LOGI_PAGE_ADDR_RANGE_LO31/HI5: a 36-bit page number). Read as the PCIe ATS invalidation
        encoding the field names follow (assumption; upstream's program_invalidation writes the whole range,
        all ones with S set, to every engine before any flush): S 0 is the one 4 KiB page; S 1 a naturally
        aligned block of 2^(t + 1) pages, t the number of trailing ones of the page number (all ones: the
        whole space). The power-on value 0 (gc_11_0_0_default.h) covers page 0 only."""
        lo = self._reg(hub, f"{hub.vm}INVALIDATE_ENG{eng}_ADDR_RANGE_LO32")
        hi = self._reg(hub, f"{hub.vm}INVALIDATE_ENG{eng}_ADDR_RANGE_HI32")
        page = (lo >> 1) | (hi & 0x1F) << 31
        if not lo & 1:
            return page, page
        trailing = (~page & (page + 1)).bit_length() - 1     # ones below the lowest 0 bit
        size = 1 << (trailing + 1)
        first = page & ~(size - 1)
        return first, first + size - 1

    def _w_l2_cntl2(self, hub_name: str, value: int):
        """VM_L2_CNTL2.INVALIDATE_ALL_L1_TLBS / INVALIDATE_L2_CACHE (gfxhub_v3_0_init_cache_regs): every
        VMID's cached translations and directory entries go; the bits act on the write (assumption: they
        read back 0)."""
        hub = self.hubs[hub_name]
        if self._fld(hub, hub.vm + "L2_CNTL2", "INVALIDATE_ALL_L1_TLBS", value) or \
                self._fld(hub, hub.vm + "L2_CNTL2", "INVALIDATE_L2_CACHE", value):
            for v in range(N_VMIDS):
                self.invalidate(hub_name, v)
            return 0
        return None

    def _r_sem(self, hub_name: str, eng: int) -> int:
        hub = self.hubs[hub_name]
        if hub.sem_held[eng]:
            return 0
        hub.sem_held[eng] = True
        return 1

    def _w_sem(self, hub_name: str, eng: int, value: int):
        if not value & 1:
            self.hubs[hub_name].sem_held[eng] = False
        return None

    def invalidate(self, hub_name: str, vmid: int, ptes: bool = True, pde_levels=(1, 2, 3),
                   pages: tuple[int, int] | None = None) -> None:
        """Drops cached translations (ptes) and cached directory entries of the given levels (1 = PDB0);
        pages: only those overlapping the logical pages [first, last] (an engine's ADDR_RANGE), else all."""
        hub = self.hubs[hub_name]
        if pages is not None:
            # entries are kept by page relative to the context's PAGE_TABLE_START (what the walk indexes)
            start = self._page_number(hub, f"{hub.vm}CONTEXT{vmid}_PAGE_TABLE_START_ADDR")
            first, last = pages[0] - start, pages[1] - start
            if first <= 0 and last >= (1 << 36):
                pages = None
        if ptes:
            if pages is None:
                hub.tlb[vmid].clear()
                hub.tlb_shifts[vmid].clear()
            else:
                tlb = hub.tlb[vmid]
                for key in [k for k in tlb if _overlaps(k[1] << k[0] >> 12, (k[1] + 1) << k[0] >> 12, first, last)]:
                    del tlb[key]
        if pde_levels:
            cache = hub.pde_cache[vmid]
            bs = self._fld(hub, f"{hub.vm}CONTEXT{vmid}_CNTL", "PAGE_TABLE_BLOCK_SIZE")
            for key in [k for k in cache if k[0] in pde_levels]:
                shift = 9 * key[0] + bs   # pages below one entry of that level (as _walk keys them)
                if pages is None or _overlaps(key[1] << shift, (key[1] + 1) << shift, first, last):
                    del cache[key]

    # -- faults -------------------------------------------------------------------------------------
    def _w_fault_cntl(self, hub_name: str, value: int):
        if value & 1:   # CLEAR_PROTECTION_FAULT_STATUS_ADDR acts on the write and reads back 0
            self._clear_fault(self.hubs[hub_name])
            return value & ~1
        return None

    def _clear_fault(self, hub: Hub) -> None:
        for r in ("L2_PROTECTION_FAULT_STATUS", "L2_PROTECTION_FAULT_ADDR_LO32", "L2_PROTECTION_FAULT_ADDR_HI32"):
            self.set(hub.ip, hub.vm + r, 0)

    def _fault(self, hub: Hub, vmid: int, va: int, kind: str, write: bool, client: int, perm: int = 0,
               level: int = 0):
        self._held = None          # the latch is read and written here: no held values
        status_reg = hub.vm + "L2_PROTECTION_FAULT_STATUS"
        table = self.dev.table(hub.ip)
        status = self._reg(hub, status_reg)
        allow = self._fld(hub, hub.vm + "L2_PROTECTION_FAULT_CNTL", "ALLOW_SUBSEQUENT_PROTECTION_FAULT_STATUS_ADDR_UPDATES")
        if status and not allow:
            self.set(hub.ip, status_reg, status | table[status_reg].encode(MORE_FAULTS=1))
        else:
            more = 1 if status else 0
            self.set(hub.ip, status_reg, table[status_reg].encode(
                MORE_FAULTS=more, PERMISSION_FAULTS=perm, MAPPING_ERROR=int(kind in ("range", "pde")),
                CID=client & 0x1FF, RW=int(write), VMID=vmid))
            self.set(hub.ip, hub.vm + "L2_PROTECTION_FAULT_ADDR_LO32", (va >> 12) & 0xFFFFFFFF)
            self.set(hub.ip, hub.vm + "L2_PROTECTION_FAULT_ADDR_HI32", (va >> 44) & 0xF)
        cntl = f"{hub.vm}CONTEXT{vmid}_CNTL"
        if self._fld(hub, cntl, _KIND_ENABLE[kind] + "_PROTECTION_FAULT_ENABLE_INTERRUPT"):
            self.dev.post_interrupt(IVEntry(client_id=hub.client_id, source_id=hub.src_id, vmid=vmid,
                                            vmid_src=hub.vmid_src, ring_id=_KIND_RING_ID[kind],
                                            src_data=((va >> 12) & 0xFFFFFFFF, (va >> 44) & 0xF, 0, 0)))
        raise VMFault(hub.name, vmid, va, kind, write, level)

    def _default_page(self, h: Hub, f: VMFault) -> Translation | None:
        """The answer to a faulting access when VM_L2_PROTECTION_FAULT_CNTL redirects this kind of fault to
        the default page (set_fault_enable_default), else None."""
        kind = f"PDE{f.level - 1}" if f.kind == "pde" else _KIND_ENABLE[f.kind]
        if not self._fld(h, h.vm + "L2_PROTECTION_FAULT_CNTL", kind + "_PROTECTION_FAULT_ENABLE_DEFAULT"):
            return None
        page = self._page_number(h, h.vm + "L2_PROTECTION_FAULT_DEFAULT_ADDR")
        system = bool(self._fld(h, h.vm + "L2_CNTL", "ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY"))
        pte = G.AMDGPU_PTE_VALID | G.AMDGPU_PTE_READABLE | G.AMDGPU_PTE_WRITEABLE | (G.AMDGPU_PTE_SYSTEM if system else 0)
        return Translation(system, page << 12 | (f.va & (PAGE - 1)), pte, fault=f)

    def client_halts(self, hub: str, client: int) -> bool:
        """Whether a client stops on a fault the hub answered with the default page (module docstring)."""
        h = self.hubs[hub]
        if hub != "GC":
            return False
        if client in CP_CLIENTS:   # gfxhub_v3_0_set_fault_enable_default: "NO halt CP when page fault"
            return not self._fld(h, "CP_DEBUG", "CPG_UTCL1_ERROR_HALT_DISABLE")
        if client in SHADER_CLIENTS:   # any SA may hold the wave: every SA must answer SUCCESS
            return any(self._fld(h, "GL1C_UTCL0_CNTL1", "RESP_FAULT_MODE", v) != RESP_FAULT_MODE_SUCCESS
                       for v in self._gl1c_state().values())
        return False

    # -- memory behind an entry ---------------------------------------------------------------------
    def _phys_read(self, system: bool, addr: int, n: int) -> bytes:
        if system:
            return self.dev.dma_read(addr, n)
        return self.dev.vram.read(self._vram_offset(addr, n), n)

    def _phys_write(self, system: bool, addr: int, data: bytes) -> None:
        if system:
            self.dev.dma_write(addr, data)
        else:
            off = self._vram_offset(addr, len(data))
            if self.dev.vram.is_protected(off, len(data)):   # the firmware-reserved top (gpusim.vbios: assumption)
                self.error(f"an engine write at VRAM {off:#x} lies in the firmware-reserved VRAM: refused")
                raise HubRefused(f"physical VRAM address {addr:#x} (+{len(data):#x}) lies in the firmware-reserved "
                                 f"top of VRAM (VBIOS fw_reserved_size_in_kb)")
            self.dev.vram.write(off, data)

    def _vram_offset(self, addr: int, n: int) -> int:
        off = addr - self._fb_offset(self.hubs["MM"])
        if off < 0 or off + n > self.dev.vram.size:
            raise HubRefused(f"physical VRAM address {addr:#x} (+{n:#x}) is outside the "
                             f"{self.dev.vram.size >> 20} MiB of VRAM")
        return off

    def _fb_offset(self, hub: Hub) -> int:
        return (self._reg(hub, hub.mc + "FB_OFFSET") & 0xFFFFFF) << 24

    # -- translation --------------------------------------------------------------------------------
    def translate(self, vmid: int, va: int, write: bool = False, execute: bool = False, hub: str = "GC",
                  client: int = 0) -> Translation:
        """Where `va` of `vmid` lands: a VRAM offset or a host bus address. A fault is latched and posted
        (when enabled); then, if VM_L2_PROTECTION_FAULT_CNTL redirects it, the default page is returned with
        `fault` set, else VMFault is raised. HubRefused when the hub translates nothing (L1 TLB or L2 off).
        `client` is the UTCL2 client id (CID)."""
        h = self.hubs[hub]
        # mmhub_v3_0_gart_disable: the GART goes off by clearing ENABLE_L1_TLB and ENABLE_L2_CACHE
        if not self._fld(h, h.mc + "MX_L1_TLB_CNTL", "ENABLE_L1_TLB"):
            raise HubRefused(f"{h.name} hub: {h.mc}MX_L1_TLB_CNTL.ENABLE_L1_TLB is 0: the hub serves no request "
                             f"(VMID {vmid} address {va:#x})")
        if vmid == 0:
            phys = self._vmid0_physical(h, va)
            if phys is not None:
                return phys
        if not self._fld(h, h.vm + "L2_CNTL", "ENABLE_L2_CACHE"):
            raise HubRefused(f"{h.name} hub: {h.vm}L2_CNTL.ENABLE_L2_CACHE is 0: no page table is walked "
                             f"(VMID {vmid} address {va:#x})")
        try:
            return self._translate(h, vmid, va, write, execute, client)
        except VMFault as f:
            d = self._default_page(h, f)
            if d is None:
                raise
            return d

    def _translate(self, h: Hub, vmid: int, va: int, write: bool, execute: bool, client: int) -> Translation:
        cntl_reg = f"{h.vm}CONTEXT{vmid}_CNTL"
        cntl = self._reg(h, cntl_reg)
        start = self._page_number(h, f"{h.vm}CONTEXT{vmid}_PAGE_TABLE_START_ADDR")
        end = self._page_number(h, f"{h.vm}CONTEXT{vmid}_PAGE_TABLE_END_ADDR")
        page = va >> 12
        if not cntl & 1 or page < start or page > end:
            self._fault(h, vmid, va, "range", write, client)
        rel = (page - start) << 12 | (va & (PAGE - 1))
        hit = self._lookup(h, vmid, rel)
        if hit is None:
            hit = self._walk(h, vmid, va, rel, cntl_reg, write, client)
        phys, system, pte = hit
        perm = 0
        if write and not pte & G.AMDGPU_PTE_WRITEABLE:
            kind, perm = "write", PERM_WRITE
        elif execute and not pte & G.AMDGPU_PTE_EXECUTABLE:
            kind, perm = "execute", PERM_EXECUTE
        elif not write and not execute and not pte & G.AMDGPU_PTE_READABLE:
            kind, perm = "read", PERM_READ
        if perm:
            self._fault(h, vmid, va, kind, write, client, perm)
        return Translation(system, phys, pte)

    def _lookup(self, h: Hub, vmid: int, rel: int):
        tlb = h.tlb[vmid]
        for shift in h.tlb_shifts[vmid]:
            e = tlb.get((shift, rel >> shift))
            if e is not None:
                base, system, pte = e
                return base + (rel & ((1 << shift) - 1)), system, pte
        return None

    def _walk(self, h: Hub, vmid: int, va: int, rel: int, cntl_reg: str, write: bool, client: int):
        h.walks += 1
        depth = self._fld(h, cntl_reg, "PAGE_TABLE_DEPTH")
        bs = self._fld(h, cntl_reg, "PAGE_TABLE_BLOCK_SIZE")
        entry = self._u64(h, f"{h.vm}CONTEXT{vmid}_PAGE_TABLE_BASE_ADDR")
        page = rel >> 12
        # Level n above the PTB (1 = PDB0, 2 = PDB1, 3 = PDB2) indexes 9 bits at shift 9 * n + bs; the PTB has
        # 9 + bs bits; the root takes all the bits that are left.
        pde_cache = h.pde_cache[vmid]
        page_shift = 12
        for lvl in range(depth, -1, -1):
            shift = 9 * lvl + bs if lvl else 0
            key = (lvl, page >> shift)
            cached = pde_cache.get(key) if lvl else None
            if cached is not None:
                entry = cached
                continue
            width = 9 if lvl else 9 + bs
            idx = page >> shift if lvl == depth else (page >> shift) & ((1 << width) - 1)
            table = entry & PDE_ADDR_MASK
            entry = struct.unpack("<Q", self._phys_read(bool(entry & G.AMDGPU_PTE_SYSTEM), table + idx * 8, 8))[0]
            if not lvl:
                break
            if not entry & G.AMDGPU_PTE_VALID:
                self._fault(h, vmid, va, "pde", write, client, level=lvl)
            if entry & G.AMDGPU_PDE_PTE:   # a huge page: this directory entry is the PTE
                page_shift = 12 + shift
                break
            pde_cache[key] = entry   # the L2 PDE cache: kept until INVALIDATE_L2_PDE<lvl - 1>
        pte = entry
        if not pte & G.AMDGPU_PTE_VALID or pte & G.AMDGPU_PTE_PRT:
            self._fault(h, vmid, va, "valid", write, client, PERM_VALID)
        frag = (pte >> G.FIELDS["AMDGPU_PTE_FRAG"][0]) & 0x1F
        shift = max(page_shift, 12 + frag)
        block_base = (pte & ADDR_MASK) & ~((1 << shift) - 1)
        system = bool(pte & G.AMDGPU_PTE_SYSTEM)
        h.tlb[vmid][(shift, rel >> shift)] = (block_base, system, pte)
        h.tlb_shifts[vmid].add(shift)
        return block_base + (rel & ((1 << shift) - 1)), system, pte

    def _vmid0_physical(self, h: Hub, addr: int) -> Translation | None:
        """VMID 0's physical path (module docstring: SYSTEM_ACCESS_MODE, the system aperture); None when
        the address goes through the VMID 0 page table."""
        mode = self._fld(h, h.mc + "MX_L1_TLB_CNTL", "SYSTEM_ACCESS_MODE")
        if mode == ACCESS_NOT_IN_SYS:
            lo = (self._reg(h, h.mc + "SYSTEM_APERTURE_LOW_ADDR") & 0x3FFFFFFF) << 18
            hi = ((self._reg(h, h.mc + "SYSTEM_APERTURE_HIGH_ADDR") & 0x3FFFFFFF) << 18) | 0x3FFFF
            if not lo <= addr <= hi:
                return None
        elif mode != ACCESS_PA_ONLY:
            raise HubRefused(f"{h.name} hub: {h.mc}MX_L1_TLB_CNTL.SYSTEM_ACCESS_MODE {mode} is not modelled "
                             "(0 PA_ONLY and 3 NOT_IN_SYS are)")
        t = self.aperture(h, addr)
        if t is not None:
            return t
        if mode == ACCESS_PA_ONLY:
            raise HubRefused(f"{h.name} hub: physical address {addr:#x} (SYSTEM_ACCESS_MODE 0) is in neither the "
                             "FB nor the AGP aperture")
        # inside the system aperture, in neither: the system aperture's default page (VRAM physical)
        page = self._reg(h, h.mc + "SYSTEM_APERTURE_DEFAULT_ADDR_LSB") | (
            self._reg(h, h.mc + "SYSTEM_APERTURE_DEFAULT_ADDR_MSB") & 0xF) << 32
        return Translation(False, page << 12 | (addr & (PAGE - 1)), G.AMDGPU_PTE_VALID | G.AMDGPU_PTE_READABLE
                           | G.AMDGPU_PTE_WRITEABLE)

    def aperture(self, h: Hub, addr: int, system_aperture: bool = False) -> Translation | None:
        """Physical reach of an MC address: the FB aperture (VRAM) or AGP (host); None for neither.
        (system_aperture: ignored, kept for callers; the system aperture is _vmid0_physical's.)"""
        fb_base = (self._reg(h, h.mc + "FB_LOCATION_BASE") & 0xFFFFFF) << 24
        fb_top = ((self._reg(h, h.mc + "FB_LOCATION_TOP") & 0xFFFFFF) << 24) | 0xFFFFFF
        if fb_base <= addr <= fb_top:
            return Translation(False, addr - fb_base + self._fb_offset(h), G.AMDGPU_PTE_VALID
                               | G.AMDGPU_PTE_READABLE | G.AMDGPU_PTE_WRITEABLE | G.AMDGPU_PTE_EXECUTABLE)
        agp_bot = (self._reg(h, h.mc + "AGP_BOT") & 0xFFFFFF) << 24
        agp_top = ((self._reg(h, h.mc + "AGP_TOP") & 0xFFFFFF) << 24) | 0xFFFFFF
        if agp_bot <= addr <= agp_top:
            base = (self._reg(h, h.mc + "AGP_BASE") & 0xFFFFFF) << 24
            return Translation(True, addr - agp_bot + base, G.AMDGPU_PTE_VALID | G.AMDGPU_PTE_SYSTEM
                               | G.AMDGPU_PTE_READABLE | G.AMDGPU_PTE_WRITEABLE)
        return None

    # -- accesses by engines ------------------------------------------------------------------------
    def physical(self, hub: str, addr: int) -> Translation:
        """An address a client marks as physical (SDMA UTCL1_PAGE.ADDR_IS_PA): an MC address reached
        through the FB or AGP aperture, no page table walked (assumption: the field's name,
        gc_11_0_0_sh_mask.h; upstream never sets it). Anything else reaches nothing: HubRefused."""
        t = self.aperture(self.hubs[hub], addr)
        if t is None:
            raise HubRefused(f"{hub} hub: {addr:#x}, marked a physical address (ADDR_IS_PA), is in neither the FB "
                             "nor the AGP aperture")
        return t

    def _translate_for(self, vmid: int, va: int, write: bool, hub: str, client: int,
                       physical: bool = False) -> Translation:
        if physical:
            return self.physical(hub, va)
        t = self.translate(vmid, va, write=write, hub=hub, client=client)
        if t.fault is not None and self.client_halts(hub, client):
            raise t.fault
        return t

    def read(self, vmid: int, va: int, n: int, hub: str = "GC", client: int = 0, physical: bool = False) -> bytes:
        out = bytearray()
        while n:
            chunk = min(n, PAGE - (va & (PAGE - 1)))
            t = self._translate_for(vmid, va, False, hub, client, physical)
            data = self._phys_read(t.system, t.addr, chunk)
            if hub == "GC":     # the CP and SDMA see GL2's dirty lines (gpusim.gl2)
                data = self.dev.blocks["GL2"].coherent_read((t.system, t.addr & ~(PAGE - 1)),
                                                            t.addr & (PAGE - 1), data)
            out += data
            va, n = va + chunk, n - chunk
        return bytes(out)

    def write(self, vmid: int, va: int, data, hub: str = "GC", client: int = 0, physical: bool = False) -> None:
        data = bytes(data)
        while data:
            chunk = min(len(data), PAGE - (va & (PAGE - 1)))
            t = self._translate_for(vmid, va, True, hub, client, physical)
            if hub == "GC":     # through to memory, GL2's copies updated (gpusim.gl2)
                self.dev.blocks["GL2"].write_through((t.system, t.addr & ~(PAGE - 1)), t.addr & (PAGE - 1),
                                                     data[:chunk])
            else:
                self._phys_write(t.system, t.addr, data[:chunk])
            va, data = va + chunk, data[chunk:]

    # -- MC addresses of physical clients (PSP, SMU, IH in MC_SPACE 4): VMID 0 of the MMHUB, with its
    # system aperture (SYSTEM_ACCESS_MODE 3: physical inside it, the VMID 0 page table outside) -------------
    def mc_translate(self, addr: int, write: bool = False, client: int = 0) -> Translation:
        held = self._held
        if held is None:
            return self.translate(0, addr, write=write, hub="MM", client=client)
        # While the registers are held (_holding) nothing can change where a page lands but a fault (which
        # drops the held values, and with them these): a page translated once is not translated again.
        key = ("page", addr >> 12, write, client)
        hit = held.get(key)
        if hit is not None:
            return Translation(hit[0], hit[1] + (addr & (PAGE - 1)), hit[2])
        t = self.translate(0, addr, write=write, hub="MM", client=client)
        if t.fault is None and self._held is held:
            held[key] = (t.system, t.addr - (addr & (PAGE - 1)), t.pte)
        return t

    def mc_read(self, addr: int, n: int, client: int = 0) -> bytes:
        out = bytearray()
        with self._holding():
            while n:
                chunk = min(n, PAGE - (addr & (PAGE - 1)))
                t = self.mc_translate(addr, client=client)
                out += self._phys_read(t.system, t.addr, chunk)
                addr, n = addr + chunk, n - chunk
        return bytes(out)

    def mc_write(self, addr: int, data, client: int = 0) -> None:
        data = bytes(data)
        with self._holding():
            while data:
                chunk = min(len(data), PAGE - (addr & (PAGE - 1)))
                t = self.mc_translate(addr, write=True, client=client)
                self._phys_write(t.system, t.addr, data[:chunk])
                addr, data = addr + chunk, data[chunk:]
