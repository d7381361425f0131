"""IH 6.0 (OSSSYS 6.0.0): interrupt ring 0, polled.

    ih = IH(dev)             # allocates the ring and its write-pointer page in the boot region
    ih.init()                # after NBIO and GMC init (the ring's MC address needs dev.fb_base)
    for iv in ih.poll():     # decoded IVEntry objects, oldest first
        print(iv, gmc.fault_from_iv(iv) or "")

Facts (drivers/gpu/drm/amd/amdgpu: ih_v6_0.c, amdgpu_ih.c, nbio_v4_3.c):
- ih_v6_0_irq_init: interrupts off (RB_ENABLE and ENABLE_INTR 0, RPTR/WPTR 0), nbio ih_control, then
  the ring: IH_RB_BASE = address >> 8 (bits 39:8), IH_RB_BASE_HI = bits 47:40; IH_RB_CNTL with MC_SPACE
  (2 = bus address, 4 = GPU address), WPTR_OVERFLOW_CLEAR 1, WPTR_OVERFLOW_ENABLE 1, RB_SIZE =
  log2(size in dwords), WPTR_WRITEBACK_ENABLE 1, MC_SNOOP 1, MC_RO 0, MC_VMID 0, RPTR_REARM = MSI on;
  IH_RB_WPTR_ADDR_LO/HI = the write-back address; WPTR and RPTR 0; IH_DOORBELL_RPTR (OFFSET = the
  doorbell, ENABLE); nbio ih_doorbell_range; IH_STORM_CLIENT_LIST_CNTL.CLIENT18_IS_STORM_CLIENT,
  IH_INT_FLOOD_CNTL.FLOOD_CNTL_ENABLE, IH_MSI_STORM_CTRL.DELAY 3; bus mastering; then interrupts on:
  RB_ENABLE with WPTR_OVERFLOW_CLEAR pulsed 0 -> 1 -> 0, and ENABLE_INTR. The ring is 256 KiB.
- The IV (amdgpu_ih_decode_iv_helper), 8 dwords: dw0 client_id 7:0, src_id 15:8, ring_id 23:16,
  vmid 27:24, vmid_src 31; dw1 timestamp 31:0; dw2 timestamp 47:32, timestamp_src 31; dw3 pasid 15:0,
  pasid_src 31; dw4..7 src_data[0..3].
- ih_v6_0_get_wptr: the write-back value unless it has RB_OVERFLOW; then IH_RB_WPTR; if that overflowed
  too, reading resumes at wptr + 32 (the oldest entry not overwritten) and WPTR_OVERFLOW_CLEAR is
  pulsed. amdgpu_ih_process walks rptr to wptr, then ih_v6_0_set_rptr rings the rptr doorbell.

The AM driver keeps the ring in VRAM (boot region) and gives the IH its MC address (MC_SPACE 4, reached
through the MMHUB's FB aperture): no page table is needed, and a warm boot finds it at the same place.
amdgpu uses a GTT ring; nbio_v4_3's note says IH_REQ_NONSNOOP_EN=1 for a ring in non-cacheable memory
such as VRAM, so that is set and MC_SNOOP is not. The ring is read when the driver asks (poll); where the
transport delivers MSI, amdrv.irq lets waits sleep until the IH's interrupt and sets RPTR_REARM then.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from amdrv import placement, regs
from amdrv.autogen import ih as IHIDS
from amdrv.ip.base import IPBlock
from amdrv.ip.nbio import DOORBELL_BAR, DOORBELL_IH, NBIO
from amdrv.memory import PAGE

IV_SIZE = 32
RING_SIZE = 256 << 10     # ih_v6_0_sw_init
MC_SPACE_GPU = 4
CLIENT_NAMES = {getattr(IHIDS, n): n[len("SOC21_IH_CLIENTID_"):] for n in IHIDS.ENUMS["soc21_ih_clientid"]
                if n != "SOC21_IH_CLIENTID_MAX"}
_GFX11_SOURCES = {v: n[len("GFX_11_0_0__SRCID__"):] for n, v in vars(IHIDS).items()
                  if n.startswith("GFX_11_0_0__SRCID__")}
SRC_NAMES = {  # by client: the source ids the gfx11 and VMC headers name (gfx_v11_0_sw_init registers the
    IHIDS.SOC21_IH_CLIENTID_GFX: _GFX11_SOURCES,     # CP's under GRBM_CP, SDMA's traps under GFX)
    IHIDS.SOC21_IH_CLIENTID_GRBM_CP: _GFX11_SOURCES,
    IHIDS.SOC21_IH_CLIENTID_VMC: {IHIDS.VMC_1_0__SRCID__VM_FAULT: "VM_FAULT"},
}


class IHError(RuntimeError):
    """The IH ring could not be set up or read; names the device and what to do."""


@dataclass(frozen=True)
class IVEntry:
    """One interrupt vector, decoded as amdgpu_ih_decode_iv_helper does."""
    client_id: int
    src_id: int
    ring_id: int
    vmid: int
    vmid_src: int
    timestamp: int
    timestamp_src: int
    pasid: int
    pasid_src: int
    src_data: tuple[int, int, int, int]

    @classmethod
    def decode(cls, raw: bytes) -> IVEntry:
        dw = struct.unpack("<8I", raw)
        return cls(client_id=dw[0] & 0xFF, src_id=(dw[0] >> 8) & 0xFF, ring_id=(dw[0] >> 16) & 0xFF,
                   vmid=(dw[0] >> 24) & 0xF, vmid_src=dw[0] >> 31, timestamp=dw[1] | (dw[2] & 0xFFFF) << 32,
                   timestamp_src=dw[2] >> 31, pasid=dw[3] & 0xFFFF, pasid_src=dw[3] >> 31, src_data=dw[4:8])

    @property
    def client(self) -> str:
        return CLIENT_NAMES.get(self.client_id, f"client {self.client_id}")

    @property
    def source(self) -> str:
        return SRC_NAMES.get(self.client_id, {}).get(self.src_id, f"source {self.src_id}")

    def __str__(self) -> str:
        data = " ".join(f"{d:#x}" for d in self.src_data)
        return (f"IV from {self.client} ({self.client_id}) {self.source} ({self.src_id}), ring {self.ring_id}, "
                f"VMID {self.vmid} ({'MMHUB' if self.vmid_src else 'GC hub'}), PASID {self.pasid}, "
                f"timestamp {self.timestamp}, data [{data}]")


class IH(IPBlock):
    name = "ih"

    def __init__(self, dev, ring_size: int = RING_SIZE, nbio: NBIO | None = None):
        if ring_size < IV_SIZE * 2 or ring_size & (ring_size - 1) or ring_size > RING_SIZE:
            # IH_RB_WPTR/RPTR.OFFSET hold byte offsets 17:2, so 256 KiB is the largest ring
            raise IHError(f"{dev.name}: IH ring size {ring_size:#x} must be a power of two from "
                          f"{2 * IV_SIZE} bytes to {RING_SIZE >> 10} KiB")
        self.dev, self.size, self.mask = dev, ring_size, ring_size - 1
        self.nbio = nbio or NBIO(dev)     # the GPU's one NBIO (AMGPU passes it)
        self.sw_init()
        self.rptr = 0
        self.overflows = 0      # times the IH overwrote entries before they were read
        self.dummy_page = None
        self.enabled = False
        self._wb = None         # (DMABuffer, offset) when the write-back is in host memory (move_wptr_writeback)

    @property
    def regs(self):
        return self.dev.reg("OSSSYS")

    def sw_init(self) -> None:
        # the ring, then one page for the write-pointer write-back
        self.block = self.dev.mm.alloc_boot(self.size + PAGE, PAGE, tag="IH ring 0")
        self.wptr_offset = self.block.addr + self.size

    def hw_init(self, warm: bool = False) -> None:
        self.init()       # the same on a warm boot: the ring starts empty

    def init(self) -> None:
        """ih_v6_0_irq_init for ring 0."""
        dev, r = self.dev, self.regs
        if dev.fb_base is None:
            raise IHError(f"{dev.name}: IH init before the GMC set the FB location (call GMC.init first)")
        # the read-modify-writes' reads as one batch (one USB round trip): no write before theirs changes them
        storm, flood, msi = r.IH_STORM_CLIENT_LIST_CNTL, r.IH_INT_FLOOD_CNTL, r.IH_MSI_STORM_CTRL
        rb_v, storm_v, flood_v, msi_v = regs.read_all([r.IH_RB_CNTL, storm, flood, msi])
        cntl = self._toggle(False, rb_v)
        if self.dummy_page is None:
            self.dummy_page = placement.scratch_page(dev.pci)
        self.nbio.ih_control(self.dummy_page.bus_address(0), ring_in_vram=True)
        dev.vram.write(self.wptr_offset, bytes(4))
        self._wb = None
        ring = dev.mc_address(self.block.addr)
        wb = dev.mc_address(self.wptr_offset)
        r.IH_RB_BASE.write(ring >> 8)
        r.IH_RB_BASE_HI.write((ring >> 40) & 0xFF)
        # IH_RB_CNTL holds what _toggle just wrote (a control register: the driver is its only writer), so that
        # value is modified, not a read-back (one USB round trip less each time)
        cntl = r.IH_RB_CNTL.update(cntl, MC_SPACE=MC_SPACE_GPU, WPTR_OVERFLOW_CLEAR=1, WPTR_OVERFLOW_ENABLE=1,
                                   RB_SIZE=(self.size // 4).bit_length() - 1, WPTR_WRITEBACK_ENABLE=1, MC_SNOOP=0,
                                   MC_RO=0, MC_VMID=0, RPTR_REARM=0)
        r.IH_RB_WPTR_ADDR_LO.write(wb & 0xFFFFFFFF)
        r.IH_RB_WPTR_ADDR_HI.write((wb >> 32) & 0xFFFF)
        r.IH_RB_WPTR.write(0)
        r.IH_RB_RPTR.write(0)
        self.rptr = 0
        r.IH_DOORBELL_RPTR.write(OFFSET=DOORBELL_IH, ENABLE=1)
        self.nbio.ih_doorbell_range(DOORBELL_IH)
        storm.update(storm_v, CLIENT18_IS_STORM_CLIENT=1)
        flood.update(flood_v, FLOOD_CNTL_ENABLE=1)
        msi.update(msi_v, DELAY=3)
        self.nbio.enable_bus_master()
        self._toggle(True, cntl)
        self.enabled = True

    def _toggle(self, enable: bool, old: int | None = None) -> int:
        """ih_v6_0_toggle_ring_interrupts for ring 0; old: IH_RB_CNTL as this driver last wrote it, else it is
        read now. Returns the value it leaves there."""
        cntl = self.regs.IH_RB_CNTL
        v = cntl.defn.encode(cntl.read() if old is None else old, RB_ENABLE=int(enable))
        if enable:
            v = cntl.write(v, WPTR_OVERFLOW_CLEAR=0)
            v = cntl.write(v, WPTR_OVERFLOW_CLEAR=1)
            v = cntl.defn.encode(v, WPTR_OVERFLOW_CLEAR=0)
        v = cntl.write(v, ENABLE_INTR=int(enable))
        if not enable:
            self.regs.IH_RB_RPTR.write(0)
            self.regs.IH_RB_WPTR.write(0)
            self.rptr = 0
        return v

    def move_wptr_writeback(self, mc_addr: int | None = None, dma=None, offset: int = 0) -> None:
        """Where the IH writes its write pointer (IH_RB_WPTR_ADDR_LO/HI): by default the page after the
        ring in VRAM; mc_addr (a VMID 0 address of `dma` + offset, mapped by the GMC) puts it in host memory,
        where amdgpu keeps it too (a wb slot in GTT, amdgpu_ih_ring_init), so a host polling that page for
        fences reads the IH's progress in the same read (over USB: no extra round trip). The slot gets the
        current write pointer first (pushed where DMA memory is not coherent)."""
        r = self.regs
        wptr = r.IH_RB_WPTR.read()
        if mc_addr is None:
            self.dev.vram.write32(self.wptr_offset, wptr)
            mc_addr, self._wb = self.dev.mc_address(self.wptr_offset), None
        else:
            dma.view[offset:offset + 4] = wptr.to_bytes(4, "little")
            if not dma.coherent:
                dma.push(offset, 4)
            self._wb = (dma, offset)
        r.IH_RB_WPTR_ADDR_LO.write(mc_addr & 0xFFFFFFFF)
        r.IH_RB_WPTR_ADDR_HI.write((mc_addr >> 32) & 0xFFFF)

    # ---------------------------------------------------------------- reading
    def _wptr(self) -> int:
        """ih_v6_0_get_wptr."""
        r = self.regs
        overflow = r.IH_RB_WPTR.fields["RB_OVERFLOW"].mask
        if self._wb is not None:   # host memory: as fresh as the caller's last pull where not coherent
            dma, off = self._wb
            wptr = int.from_bytes(dma.view[off:off + 4], "little")
        else:
            wptr = self.dev.vram.read32(self.wptr_offset)
        if wptr & overflow:
            wptr = r.IH_RB_WPTR.read()
            if wptr & overflow:
                wptr &= ~overflow
                self.rptr = (wptr + IV_SIZE) & self.mask  # the oldest entry not overwritten
                self.overflows += 1
                v = r.IH_RB_CNTL.update(WPTR_OVERFLOW_CLEAR=1)
                r.IH_RB_CNTL.write(v, WPTR_OVERFLOW_CLEAR=0)
        return wptr & self.mask

    def poll(self) -> list[IVEntry]:
        """The entries written since the last poll, oldest first (read in at most two bulk reads);
        then the read pointer goes back to the IH through its doorbell (ih_v6_0_set_rptr)."""
        if not self.enabled:
            raise IHError(f"{self.dev.name}: IH polled before IH.init() set up the ring")
        wptr = self._wptr()
        if wptr == self.rptr:
            return []
        if wptr % IV_SIZE:   # the IH writes whole IVs: another engine's write-back landed on the slot
            raise IHError(f"{self.dev.name}: IH: the write pointer {wptr:#x} read back is not on a {IV_SIZE}-byte "
                          "IV boundary, so something other than the IH wrote its write-back slot (another "
                          "engine's write-back address?); the interrupts since the last poll are lost: check "
                          "the engines' write-back addresses, then close and reopen the GPU")
        base = self.block.addr
        if wptr > self.rptr:
            raw = self.dev.vram.read(base + self.rptr, wptr - self.rptr)
        else:
            raw = self.dev.vram.read(base + self.rptr, self.size - self.rptr) + self.dev.vram.read(base, wptr)
        self.rptr = wptr
        self.dev.pci.bar(DOORBELL_BAR).write32(DOORBELL_IH * 4, self.rptr)
        return [IVEntry.decode(raw[i:i + IV_SIZE]) for i in range(0, len(raw), IV_SIZE)]
