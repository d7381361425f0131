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
  VM_INVALIDATE_ENGn_ACK.PER_VMID_INVALIDATE_ACK one clock step later; VM_INVALIDATE_ENGn_SEM reads 1 when
  it grants the semaphore (0 while held) and a write of 0 releases it (gmc_v11_0_flush_vm_hub).
- Faults latch VM_L2_PROTECTION_FAULT_STATUS (VMID, RW, CID, PERMISSION_FAULTS, MAPPING_ERROR, MORE_FAULTS)
  and _ADDR_LO32/_HI32 (page number bits 43:12 / 47:44) unless a fault is already latched and
  VM_L2_PROTECTION_FAULT_CNTL.ALLOW_SUBSEQUENT_PROTECTION_FAULT_STATUS_ADDR_UPDATES is 0 (then only
  MORE_FAULTS is set). Writing CNTL.CLEAR_PROTECTION_FAULT_STATUS_ADDR=1 clears them. If the context's
  *_ENABLE_INTERRUPT bit for the fault is set an IV is posted: client SOC21_IH_CLIENTID_GFX (GC hub,
  UTCL2 fault src 0) or SOC21_IH_CLIENTID_VMC (MMHUB, VM_FAULT src 0, vmid_src 1), src_data[0] = page
  number bits 43:12, src_data[1] = bits 47:44 (gmc_v11_0_process_interrupt). The IV's ring_id carries
  the protection that failed, as amdkfd's kfd_int_process_v11.c reads it from these IVs: 0x08 not
  present (invalid PTE or PDE, out of range), 0x10 read, 0x20 write (execute has no bit there).
"""
import functools
import struct
from dataclasses import dataclass

from amdrv.autogen import gmc as G
from amdrv.autogen import ih as IHIDS
from gpusim.device import Block, IVEntry

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
# IV ring_id bits of a fault (kfd_int_process_v11.c: prot_valid 0x08, prot_read 0x10, prot_write 0x20)
_KIND_RING_ID = {"range": 0x08, "pde": 0x08, "valid": 0x08, "read": 0x10, "write": 0x20, "execute": 0}


class VMFault(Exception):
    """A translation the hub refused; the fault is already latched and (if enabled) posted to the IH."""

    def __init__(self, hub: str, vmid: int, va: int, kind: str, write: bool):
        self.hub, self.vmid, self.va, self.kind, self.write = hub, vmid, va, kind, write
        super().__init__(f"{hub} VMID {vmid}: {kind} fault on {'write' if write else 'read'} at {va:#x}")


@dataclass(frozen=True)
class Translation:
    system: bool      # True: host bus address; False: VRAM offset
    addr: int
    pte: int          # the entry that produced it (flags for the engines: MTYPE, SNOOPED, ...)


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

    def reset(self) -> None:
        for hub in self.hubs.values():
            hub.reset()
            # What the VBIOS leaves programmed at power-on: VRAM at MC address FB_BASE (Navi3x amdgpu logs
            # "VRAM: ... 0x0000008000000000 - ..."), no FB offset (dGPU).
            self.set(hub.ip, hub.mc + "FB_LOCATION_BASE", FB_BASE >> 24)
            self.set(hub.ip, hub.mc + "FB_LOCATION_TOP", (FB_BASE + self.dev.vram.size - 1) >> 24)
            # AGP off (BOT above TOP, as gfxhub_v3_0_init_system_aperture_regs disables it): an all-zero
            # register file would otherwise open a 16 MiB AGP window at MC address 0.
            self.set(hub.ip, hub.mc + "AGP_BOT", 0xFFFFFF)

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
        so each is read once (a 1 MiB firmware read walks 256 pages through the same apertures)."""
        gmc = self

        class Hold:
            def __enter__(self):
                gmc._held = {}

            def __exit__(self, *exc):
                gmc._held = None
        return Hold()

    def _fld(self, hub: Hub, reg: str, field: str, value: int | None = None) -> int:
        f = self.dev.table(hub.ip)[reg].fields[field]
        v = self._reg(hub, reg) if value is None else value
        return (v >> f.shift) & ((1 << f.width) - 1)

    def _u64(self, hub: Hub, stem: str) -> int:
        return self._reg(hub, stem + "_LO32") | (self._reg(hub, stem + "_HI32") << 32)

    def _page_number(self, hub: Hub, stem: str) -> int:
        # LOGICAL_PAGE_NUMBER_LO32 and LOGICAL_PAGE_NUMBER_HI4: a 36-bit page number (48-bit addresses)
        return self._reg(hub, stem + "_LO32") | (self._reg(hub, stem + "_HI32") & 0xF) << 32

    # -- invalidation engine ------------------------------------------------------------------------
    def _w_req(self, hub_name: str, eng: int, value: int):
        hub = self.hubs[hub_name]
        self.set(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_ACK", 0)
        self.dev.schedule(1, functools.partial(self._complete_req, hub_name, eng), value)
        return None

    def _complete_req(self, hub_name: str, eng: int, value: int) -> None:
        hub = self.hubs[hub_name]
        reg = f"{hub.vm}INVALIDATE_ENG{eng}_REQ"
        vmids = self._fld(hub, reg, "PER_VMID_INVALIDATE_REQ", value)
        ptes = self._fld(hub, reg, "INVALIDATE_L2_PTES", value) or self._fld(hub, reg, "INVALIDATE_L1_PTES", value)
        pde_levels = [n + 1 for n in range(3) if self._fld(hub, reg, f"INVALIDATE_L2_PDE{n}", value)]
        for v in range(N_VMIDS):
            if vmids >> v & 1:
                self.invalidate(hub_name, v, ptes=bool(ptes), pde_levels=pde_levels)
        if self._fld(hub, reg, "CLEAR_PROTECTION_FAULT_STATUS_ADDR", value):
            self._clear_fault(hub)
        self.set(hub.ip, f"{hub.vm}INVALIDATE_ENG{eng}_ACK", vmids)

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

    def invalidate(self, hub_name: str, vmid: int, ptes: bool = True, pde_levels=(1, 2, 3)) -> None:
        """Drops cached translations (ptes) and cached directory entries of the given levels (1 = PDB0)."""
        hub = self.hubs[hub_name]
        if ptes:
            hub.tlb[vmid].clear()
            hub.tlb_shifts[vmid].clear()
        if pde_levels:
            cache = hub.pde_cache[vmid]
            for key in [k for k in cache if k[0] in pde_levels]:
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

    def _fault(self, hub: Hub, vmid: int, va: int, kind: str, write: bool, client: int, perm: int = 0):
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
        raise VMFault(hub.name, vmid, va, kind, write)

    # -- memory behind an entry ---------------------------------------------------------------------
    def _phys_read(self, system: bool, addr: int, n: int) -> bytes:
        if system:
            return self.dev.dma_read(addr, n)
        return self.dev.vram.read(addr - self._fb_offset(self.hubs["MM"]), n)

    def _phys_write(self, system: bool, addr: int, data: bytes) -> None:
        if system:
            self.dev.dma_write(addr, data)
        else:
            self.dev.vram.write(addr - self._fb_offset(self.hubs["MM"]), data)

    def _fb_offset(self, hub: Hub) -> int:
        return (self._reg(hub, hub.mc + "FB_OFFSET") & 0xFFFFFF) << 24

    # -- translation --------------------------------------------------------------------------------
    def translate(self, vmid: int, va: int, write: bool = False, execute: bool = False, hub: str = "GC",
                  client: int = 0) -> Translation:
        """Where `va` of `vmid` lands: a VRAM offset or a host bus address. Raises VMFault (after latching
        the fault registers and posting the IV when enabled). `client` is the UTCL2 client id (CID)."""
        h = self.hubs[hub]
        if vmid == 0:
            phys = self.aperture(h, va, system_aperture=True)
            if phys is not None:
                return phys
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
                self._fault(h, vmid, va, "pde", write, client)
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

    def aperture(self, h: Hub, addr: int, system_aperture: bool) -> Translation | None:
        """Physical reach of an MC address: the FB aperture (VRAM) or AGP (host); None for the VM."""
        fb_base = (self._reg(h, h.mc + "FB_LOCATION_BASE") & 0xFFFFFF) << 24
        fb_top = ((self._reg(h, h.mc + "FB_LOCATION_TOP") & 0xFFFFFF) << 24) | 0xFFFFFF
        in_fb = fb_base <= addr <= fb_top
        if system_aperture:
            lo = (self._reg(h, h.mc + "SYSTEM_APERTURE_LOW_ADDR") & 0x3FFFFFFF) << 18
            hi = ((self._reg(h, h.mc + "SYSTEM_APERTURE_HIGH_ADDR") & 0x3FFFFFFF) << 18) | 0x3FFFF
            in_fb = in_fb and lo <= addr <= hi
        if in_fb:
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
    def read(self, vmid: int, va: int, n: int, hub: str = "GC", client: int = 0) -> bytes:
        out = bytearray()
        while n:
            chunk = min(n, PAGE - (va & (PAGE - 1)))
            t = self.translate(vmid, va, hub=hub, client=client)
            out += self._phys_read(t.system, t.addr, chunk)
            va, n = va + chunk, n - chunk
        return bytes(out)

    def write(self, vmid: int, va: int, data, hub: str = "GC", client: int = 0) -> None:
        data = bytes(data)
        while data:
            chunk = min(len(data), PAGE - (va & (PAGE - 1)))
            t = self.translate(vmid, va, write=True, hub=hub, client=client)
            self._phys_write(t.system, t.addr, data[:chunk])
            va, data = va + chunk, data[chunk:]

    # -- MC addresses of physical clients (PSP, IH in MC_SPACE 4): the MMHUB, FB aperture first ------
    def mc_translate(self, addr: int, write: bool = False) -> Translation:
        h = self.hubs["MM"]
        t = self.aperture(h, addr, system_aperture=False)
        return t if t is not None else self.translate(0, addr, write=write, hub="MM")

    def mc_read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        with self._holding():
            while n:
                chunk = min(n, PAGE - (addr & (PAGE - 1)))
                t = self.mc_translate(addr)
                out += self._phys_read(t.system, t.addr, chunk)
                addr, n = addr + chunk, n - chunk
        return bytes(out)

    def mc_write(self, addr: int, data) -> None:
        data = bytes(data)
        with self._holding():
            while data:
                chunk = min(len(data), PAGE - (addr & (PAGE - 1)))
                t = self.mc_translate(addr, write=True)
                self._phys_write(t.system, t.addr, data[:chunk])
                addr, data = addr + chunk, data[chunk:]
