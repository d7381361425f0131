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
"""
from __future__ import annotations

from gpusim.device import Block

MM_APER = 1 << 31


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
        self.doorbell_handlers: list = []   # (first dword index, last, fn(index, value)) set by engines
        self.doorbells: dict[int, int] = {}
        self._remap_addr = None

    def reset(self) -> None:
        dev = self.dev
        self.set("NBIO", "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE", dev.vram.size >> 20)
        pci = dev.pci
        strap = pci.read(0x02, 2) | (1 << 28)  # device id, function enabled
        self.set("NBIO", "RCC_STRAP0_RCC_DEV0_EPF0_STRAP0", strap)
        self.set("NBIO", "BIF_BX0_BIF_FB_EN", 3)    # the VBIOS posted the card with FB access on
        self.doorbells = {}
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
            return self.dev.regs.read(a)
        if a + 4 > self.dev.vram.size:
            self.error(f"MM_DATA read at VRAM {a:#x} is beyond the {self.dev.vram.size:#x}-byte VRAM")
            return 0
        return self.dev.vram.read32(a)

    def _mm_data_write(self, value: int) -> None:
        kind, a = self._mm_target()
        if kind == "reg":
            self.dev.regs.write(a, value)
        elif a + 4 > self.dev.vram.size:
            self.error(f"MM_DATA write at VRAM {a:#x} is beyond the {self.dev.vram.size:#x}-byte VRAM")
        else:
            self.dev.vram.write32(a, value)

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

    def on_doorbell(self, first: int, last: int, fn) -> None:
        """Routes doorbell dword indices first..last (inclusive) to fn(index, value) (engine models).
        A 64-bit doorbell write arrives as one call with the 64-bit value, as one PCIe write would."""
        self.doorbell_handlers.append((first, last, fn))

    def doorbell_write(self, offset: int, value: int, size: int = 4) -> None:
        if not self.doorbell_enabled:
            self.error(f"doorbell write {value:#x} at BAR2 offset {offset:#x} with the doorbell aperture "
                       f"disabled (RCC_DOORBELL_APER_EN): dropped")
            return
        index = offset >> 2
        for k in range(size // 4):
            self.doorbells[index + k] = (value >> (32 * k)) & 0xFFFFFFFF
        for first, last, fn in self.doorbell_handlers:
            if first <= index <= last:
                fn(index, value)

    def doorbell_read(self, offset: int) -> int:
        return self.doorbells.get(offset >> 2, 0)
