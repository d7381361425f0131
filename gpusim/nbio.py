"""NBIO 4.3 (the bus interface, BIF): memory size, index/data pairs, doorbell routing, HDP flush requests.

Facts (drivers/gpu/drm/amd):
- amdgpu_discovery.c reads VRAM size in MiB from mmRCC_CONFIG_MEMSIZE (0xde3), and VRAM before it knows
  anything else through mmMM_INDEX (0) / mmMM_INDEX_HI (6) / mmMM_DATA (1): amdgpu_device_mm_access writes
  pos | 0x80000000 to MM_INDEX (bit 31 MM_APER selects the framebuffer), pos >> 31 to MM_INDEX_HI. With
  MM_APER clear the pair reaches registers instead (MM_OFFSET is a byte address).
- nbio_v4_3.c: get_pcie_index/data_offset are BIF_BX_PF0_RSMU_INDEX/RSMU_DATA; soc21_pcie_rreg/wreg
  (amdgpu_device_indirect_rreg) put a byte address in the index and move the value through data. This is
  how registers beyond the 1 MiB BAR5 are reached. The BIF_BX0_PCIE_INDEX2/DATA2 pair works the same.
- nbio_v4_3.c enables the doorbell BAR with RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN.BIF_DOORBELL_APER_EN;
  doorbell writes while it is 0 go nowhere. It points the HDP flush remap page at
  rmmio_remap.reg_offset (BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL.ADDRESS, a byte offset in BAR5); hdp_v6_0.c
  flushes by writing 0 there. get_hdp_flush_req/done_offset: BIF_BX_PF0_GPU_HDP_FLUSH_REQ/DONE, whose
  per-client bits the CP and SDMA set and poll (the done bit follows the request once the flush is done).

Doorbell routing (the GDC "S2A" entries, S2A_DOORBELL_ENTRY_0..15_CTRL, nbio_4_3_0 headers): the BIF turns a
BAR2 doorbell write into a write to a GPU block; each entry has ENABLE, RANGE_OFFSET and RANGE_SIZE (dword
doorbell indices: nbio_v4_3_sdma_doorbell_range gets ring->doorbell_index, already << 1, and a size of
sdma_doorbell_range (20) per instance, so one entry covers SDMA0 at 0x200 and SDMA1 at 0x214;
ih_doorbell_range gets ih << 1 with size 2), AWADDR_31_28_VALUE (the destination block) and AWID (the client
there). Who listens where is read off the values upstream programs (an inference, no register spec):
  - AWADDR 3 / AWID 0xE: the SDMA engines (nbio_v4_3_sdma_doorbell_range, entry 2);
  - AWADDR 0 / AWID 0: the IH (nbio_v4_3_ih_doorbell_range, entry 1);
  - AWADDR 3 / AWID 3 or 6: the CP (nbio_v4_3_gc_doorbell_init: entries 0 and 3 = 0x30000007, 0x3000000D;
    AMD's GIM navi32 code writes the same values under "set CP doorbell range");
  - AWADDR 4 / 7: VCN0/1 (vcn_doorbell_range; not modeled, nobody listens).
A doorbell is routed by the enabled entry whose [RANGE_OFFSET, RANGE_OFFSET + RANGE_SIZE) holds its dword
index. RANGE_SIZE 0 claims no range (upstream's "off" for the SDMA/IH/VCN entries); the CP's entries,
programmed with size 0, are the default route: the CP gets the doorbells no sized entry claims and filters
them with its own CP_MEC_DOORBELL_RANGE (assumption: no public fact says how a size-0 entry decodes; older
NBIOs had no CP range either, and which of AWID 3 or 6 the MEC listens on is not public, so either entry
carries CP doorbells here). A doorbell no entry routes, or routed to an AWADDR/AWID no modeled client listens
on, is dropped and recorded in dev.errors. FENCE_ENABLE, 64BIT_SUPPORT_DIS and NEED_DEDUCT_RANGE_OFFSET are
not modeled (upstream writes them 0 on NBIO 4.3).

Self-ring aperture (nbio_v4_3_enable_doorbell_selfring_aperture: BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL
EN=1, MODE=1, SIZE=0, BASE_LOW/HIGH = the doorbell BAR's bus address, adev->doorbell.base): a write the GPU
itself makes to that bus address (an engine's DMA write, e.g. a CP or SDMA packet storing a wptr to the
doorbell BAR) stays inside the chip and rings the doorbell, as a host write to BAR2 would (the aperture
and routing rules above apply). Without it the write goes out to the bus like any other DMA. Assumptions:
SIZE 0 (what upstream writes) covers the whole doorbell BAR; MODE is not modeled; a self-ring write needs
no bus mastering since it never leaves the device.
"""
from __future__ import annotations

from gpusim.device import Block

MM_APER = 1 << 31
S2A_ENTRIES = 16
# (AWADDR_31_28_VALUE, AWID) -> the client listening there (see the module docstring for the sources)
S2A_CLIENTS = {(3, 0xE): "SDMA", (0, 0): "IH", (3, 3): "CP", (3, 6): "CP"}
DEFAULT_ROUTE_CLIENT = "CP"    # size-0 entries route the unclaimed doorbells to the CP only (assumption)


class NBIO(Block):
    name = "NBIO"

    def attach(self) -> None:
        self.on_write("NBIO", "BIF_BX_PF0_MM_DATA", self._mm_data_write)
        self.on_read("NBIO", "BIF_BX_PF0_MM_DATA", self._mm_data_read)
        self.on_write("NBIO", "BIF_BX_PF0_RSMU_DATA", self._rsmu_write)
        self.on_read("NBIO", "BIF_BX_PF0_RSMU_DATA", self._rsmu_read)
        self.on_write("NBIO", "BIF_BX0_PCIE_DATA2", self._pcie2_write)
        self.on_read("NBIO", "BIF_BX0_PCIE_DATA2", self._pcie2_read)
        self.on_write("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_REQ", self._hdp_flush_req)
        self.on_write("NBIO", "BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL", self._remap_hdp)
        for n in range(S2A_ENTRIES):
            self.on_write("NBIO", f"S2A_DOORBELL_ENTRY_{n}_CTRL", self._w_s2a)
        for r in ("CNTL", "BASE_LOW", "BASE_HIGH"):
            self.on_write("NBIO", f"BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_{r}", self._w_selfring)
        self.doorbell_clients: dict[str, list] = {}   # client name -> [fn(index, value)] set by engines
        self.doorbells: dict[int, int] = {}
        self._remap_addr = None
        self._routes = None
        self.selfring = None     # (first, end) bus addresses of the self-ring aperture, None: off, False: stale

    def reset(self) -> None:
        dev = self.dev
        self.set("NBIO", "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE", dev.vram.size >> 20)
        pci = dev.pci
        strap = pci.read(0x02, 2) | (1 << 28)  # device id, function enabled
        self.set("NBIO", "RCC_STRAP0_RCC_DEV0_EPF0_STRAP0", strap)
        self.set("NBIO", "BIF_BX0_BIF_FB_EN", 3)    # the VBIOS posted the card with FB access on
        self.doorbells = {}
        self._routes = None
        self.selfring = None
        self._set_remap(None)

    # -- index/data pairs --------------------------------------------------------------------------
    def _mm_target(self):
        idx = self.get("NBIO", "BIF_BX_PF0_MM_INDEX")
        hi = self.get("NBIO", "BIF_BX_PF0_MM_INDEX_HI")
        if idx & MM_APER:
            return "vram", (idx & ~MM_APER) | (hi << 31)
        return "reg", (idx & ~MM_APER) >> 2

    def _mm_data_read(self) -> int:
        kind, a = self._mm_target()
        if kind == "reg":
            gate = self.dev.gfx_gate    # GFXOFF: GC registers are unpowered (gpusim.smu)
            return 0xFFFFFFFF if gate is not None and gate.gc_access(a, None) else self.dev.regs.read(a)
        if a + 4 > self.dev.vram.size:
            self.error(f"MM_DATA read at VRAM {a:#x} is beyond the {self.dev.vram.size:#x}-byte VRAM")
            return 0
        return int.from_bytes(self.dev.vram.host_read(a, 4), "little")   # the host's side of the HDP

    def _mm_data_write(self, value: int) -> None:
        kind, a = self._mm_target()
        if kind == "reg":
            gate = self.dev.gfx_gate
            if gate is None or not gate.gc_access(a, value):
                self.dev.regs.write(a, value)
        elif a + 4 > self.dev.vram.size:
            self.error(f"MM_DATA write at VRAM {a:#x} is beyond the {self.dev.vram.size:#x}-byte VRAM")
        else:   # through the HDP, as BAR0 writes (hdp_v6_0's flush covers the MM_INDEX/MM_DATA path too)
            self.dev.vram.host_write(a, (value & 0xFFFFFFFF).to_bytes(4, "little"))
            self.dev.blocks["HDP"].host_write(4)

    def _rsmu_read(self) -> int:
        return self.dev.regs.read(self.get("NBIO", "BIF_BX_PF0_RSMU_INDEX") >> 2)

    def _rsmu_write(self, value: int) -> None:
        self.dev.regs.write(self.get("NBIO", "BIF_BX_PF0_RSMU_INDEX") >> 2, value)

    def _pcie2_read(self) -> int:
        return self.dev.regs.read(self.get("NBIO", "BIF_BX0_PCIE_INDEX2") >> 2)

    def _pcie2_write(self, value: int) -> None:
        self.dev.regs.write(self.get("NBIO", "BIF_BX0_PCIE_INDEX2") >> 2, value)

    # -- HDP flush -------------------------------------------------------------------------------------
    def _hdp_flush_req(self, value: int) -> None:
        # The done bits follow the request one step later, after the flush; CP/SDMA poll them.
        self.dev.schedule(1, self._hdp_flush_done, value)

    def _hdp_flush_done(self, value: int) -> None:
        self.dev.blocks["HDP"].flush("GPU_HDP_FLUSH_REQ")
        self.set("NBIO", "BIF_BX_PF0_GPU_HDP_FLUSH_DONE", value)

    def _remap_hdp(self, value: int) -> None:
        self._set_remap(value & 0x7FFFC)

    def _set_remap(self, byte_offset) -> None:
        regs = self.dev.regs
        if self._remap_addr is not None:
            regs.write_handlers.pop(self._remap_addr, None)
        self._remap_addr = None if byte_offset is None else byte_offset >> 2
        if self._remap_addr is not None:
            regs.write_handlers[self._remap_addr] = self._remap_flush

    def _remap_flush(self, value: int) -> None:
        self.dev.blocks["HDP"].flush("remap HDP_MEM_FLUSH_CNTL")

    # -- doorbells -----------------------------------------------------------------------------------
    @property
    def doorbell_enabled(self) -> bool:
        return bool(self.dev.field("NBIO", "RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", "BIF_DOORBELL_APER_EN"))

    def on_doorbell(self, client: str, fn) -> None:
        """Engine models listen as one of the S2A_CLIENTS ("CP", "SDMA", "IH"): fn(index, value) gets every
        doorbell the routing entries send that client, filters by its own registers and returns True when
        one of its queues took it. A 64-bit doorbell write arrives as one call with the 64-bit value, as
        one PCIe write would."""
        self.doorbell_clients.setdefault(client, []).append(fn)

    def _w_s2a(self, value: int) -> None:
        self._routes = None

    def _w_selfring(self, value: int) -> None:
        self.selfring = False      # decoded again at the next GPU write (the value is stored after this)

    def _selfring_range(self):
        if self.selfring is False:
            cntl = self.get("NBIO", "BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL")
            base = (self.get("NBIO", "BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_LOW")
                    | self.get("NBIO", "BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_HIGH") << 32)
            # DOORBELL_SELFRING_GPA_APER_EN
            self.selfring = (base, base + self.dev.pci.sizes[2]) if cntl & 1 else None
        return self.selfring

    def selfring_write(self, bus_addr: int, data) -> bool:
        """A DMA write of the GPU's own engines: True when the self-ring aperture took it as doorbells."""
        ap = self._selfring_range()
        if ap is None or not ap[0] <= bus_addr < ap[1]:
            return False
        off, data = bus_addr - ap[0], bytes(data)
        if len(data) == 8 and not off & 7:
            self.doorbell_write(off, int.from_bytes(data, "little"), 8)
        else:
            for k in range(0, len(data) - 3, 4):
                self.doorbell_write(off + k, int.from_bytes(data[k:k + 4], "little"))
        return True

    def routes(self) -> tuple[list, list]:
        """([(first, end, entry, awaddr, awid)] of the enabled sized entries, [(entry, awaddr, awid)] of the
        enabled size-0 ones), decoded once per change of the entries."""
        if self._routes is None:
            sized, default = [], []
            for n in range(S2A_ENTRIES):
                v = self.get("NBIO", f"S2A_DOORBELL_ENTRY_{n}_CTRL")
                if not v & 1:                                   # S2A_DOORBELL_PORTn_ENABLE
                    continue
                awid, offset, size, awaddr = (v >> 1) & 0x1F, (v >> 7) & 0x3FF, (v >> 17) & 0xFF, v >> 28
                if size:
                    sized.append((offset, offset + size, n, awaddr, awid))
                else:
                    default.append((n, awaddr, awid))
            self._routes = (sized, default)
        return self._routes

    def route(self, index: int) -> tuple[str | None, str]:
        """(the client a doorbell dword index reaches, or None and why not, in words)."""
        sized, default = self.routes()
        for first, end, n, awaddr, awid in sized:
            if first <= index < end:
                client = S2A_CLIENTS.get((awaddr, awid))
                where = f"S2A_DOORBELL_ENTRY_{n}_CTRL (AWADDR {awaddr:#x}, AWID {awid:#x})"
                return client, where if client else f"{where} leads to no modeled client"
        for n, awaddr, awid in default:
            if S2A_CLIENTS.get((awaddr, awid)) == DEFAULT_ROUTE_CLIENT:
                return DEFAULT_ROUTE_CLIENT, f"the CP's default route S2A_DOORBELL_ENTRY_{n}_CTRL"
        return None, "no enabled S2A_DOORBELL_ENTRY_n_CTRL covers it"

    def doorbell_write(self, offset: int, value: int, size: int = 4) -> None:
        if not self.doorbell_enabled:
            self.error(f"doorbell write {value:#x} at BAR2 offset {offset:#x} with the doorbell aperture "
                       f"disabled (RCC_DOORBELL_APER_EN): dropped")
            return
        index = offset >> 2
        for k in range(size // 4):
            self.doorbells[index + k] = (value >> (32 * k)) & 0xFFFFFFFF
        client, where = self.route(index)
        fns = self.doorbell_clients.get(client) if client else None
        if not fns:
            why = where if client is None else f"{where}: no {client} model listens"
            self.error(f"doorbell write {value:#x} at BAR2 dword {index:#x}: {why} (nbio_v4_3 "
                       f"gc_doorbell_init / sdma_doorbell_range / ih_doorbell_range program them): dropped")
            return
        smu = self.dev.blocks.get("SMU") if client in ("CP", "SDMA") else None
        wait = smu.wake() if smu is not None else 0
        if wait:   # GFX is off: the doorbell brings it back; its engine sees it once GFX is on (gpusim.smu)
            self.dev.schedule(wait, self._deliver, fns, index, value, client, where)
            return
        self._deliver(fns, index, value, client, where)

    def _deliver(self, fns, index: int, value: int, client: str, where: str) -> None:
        if not any([fn(index, value) for fn in fns]):
            self.error(f"doorbell write {value:#x} at BAR2 dword {index:#x}: routed by {where} to the {client}, "
                       f"where nothing listens on that doorbell: dropped")

    def doorbell_read(self, offset: int) -> int:
        return self.doorbells.get(offset >> 2, 0)
