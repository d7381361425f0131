"""IH 6.0 (OSSSYS 6.0.0): the interrupt ring, ring 0 only.

Facts, from ih_v6_0.c and amdgpu_ih.c (register fields from the generated osssys_6_0_0 table):
- IH_RB_BASE holds bits 39:8 of the ring address, IH_RB_BASE_HI bits 47:40; IH_RB_CNTL.RB_SIZE is log2 of
  the ring size in dwords; MC_SPACE says what the addresses are: 2 = bus addresses (the driver's
  use_bus_addr ring in host memory, reached by DMA), 4 = GPU addresses through the MMHUB's VMID 0 (VRAM via
  the FB aperture, or GART). RB_ENABLE starts the ring.
- IH_RB_WPTR/IH_RB_RPTR are byte offsets (OFFSET field, bits 17:2); the IH writes 32-byte IV entries at
  wptr. With WPTR_WRITEBACK_ENABLE the IH_RB_WPTR value is also written to IH_RB_WPTR_ADDR_LO/HI after each
  entry; the driver reads the write pointer from there (ih_v6_0_get_wptr) and the register only on overflow.
- The ring is full when one more entry would make wptr equal rptr. With WPTR_OVERFLOW_ENABLE the IH keeps
  writing over the oldest entries and sets IH_RB_WPTR.RB_OVERFLOW, which stays set until the driver writes
  IH_RB_CNTL.WPTR_OVERFLOW_CLEAR=1 (then resumes at wptr + 32, as ih_v6_0_get_wptr does). Without it the
  entry is dropped (counted in `dropped`).
- IV entry (amdgpu_ih_decode_iv_helper): dw0 = client_id | src_id << 8 | ring_id << 16 | vmid << 24 |
  vmid_src << 31; dw1 = timestamp[31:0]; dw2 = timestamp[47:32] (| timestamp_src << 31); dw3 = pasid
  (| pasid_src << 31); dw4..7 = src_data[0..3]. The pasid of a VMID-tagged entry comes from IH_VMID_n_LUT.
- The dummy read (nbio_v4_3_ih_control: BIF_BX0_INTERRUPT_CNTL2 = the driver's dummy page bus address >> 8;
  INTERRUPT_CNTL.IH_DUMMY_RD_OVERRIDE 0 = "dummy read disabled with msi, enabled without msi", 1 = as
  IH_DUMMY_RD_EN says): the BIF reads that page after the IH's ring write (ALWAYS_SEND_INTPKT_AFTER_DUMMYRD_DIS
  names the order: the interrupt goes out after the dummy read) so the entry has reached memory before anyone
  is told. With MSI off (the AM driver polls; MSI enable in the PCI MSI capability) it is on. Assumption: a
  dummy read that fails (a bus address no DMA mapping covers: an IOMMU fault on the host) leaves the entry
  unannounced, i.e. the write-pointer write-back is not done (recorded in dev.errors).
- The interrupt (the MSI message, gpusim.device.send_msi) goes out after each entry is written and
  announced, while IH_RB_CNTL.ENABLE_INTR is set (ih_v6_0_toggle_ring_interrupts sets it with RB_ENABLE:
  the ring fills either way, only the host is not told). Assumptions: one MSI per entry, no coalescing
  (IH_MSI_STORM_CTRL.DELAY and IH_RB_CNTL.RPTR_REARM, which amdgpu sets when MSI is on, are stored but not
  modelled: how the IH paces or re-sends MSIs is not public).
- IH_DOORBELL_RPTR.ENABLE/OFFSET (a dword doorbell index: ih_v6_0 uses doorbell_index.ih << 1): the driver
  may move rptr through that doorbell; the IH listens to every BAR2 doorbell dword NBIO routes and takes the
  one IH_DOORBELL_RPTR names while it is enabled.
"""
import struct

from gpusim.device import Block, DMAError, IVEntry
from gpusim.pci import CAP_MSI

IV_SIZE = 32
MC_SPACE_BUS = 2
MC_SPACE_GPUVM0 = 4
MMHUB_CLIENT_OSSSYS = 15    # mmhub_client_ids_v3_0_0: the IH's writes fault as OSSSYS


def encode_iv(e: IVEntry) -> bytes:
    dw0 = ((e.client_id & 0xFF) | (e.source_id & 0xFF) << 8 | (e.ring_id & 0xFF) << 16
           | (e.vmid & 0xF) << 24 | (e.vmid_src & 1) << 31)
    ts = e.timestamp & ((1 << 48) - 1)
    src = (tuple(e.src_data) + (0, 0, 0, 0))[:4]
    return struct.pack("<8I", dw0, ts & 0xFFFFFFFF, ts >> 32, e.pasid & 0xFFFF, *(s & 0xFFFFFFFF for s in src))


class IH(Block):
    name = "IH"
    IP = "OSSSYS"

    def attach(self) -> None:
        self.on_write(self.IP, "IH_RB_CNTL", self._w_cntl)
        self.on_write(self.IP, "IH_RB_WPTR", self._w_wptr)
        self.on_read(self.IP, "IH_RB_WPTR", self._r_wptr)
        self.on_write(self.IP, "IH_RB_RPTR", self._w_rptr)
        self.dev.ih_sink = self.post
        nbio = self.dev.blocks.get("NBIO")
        if nbio is not None:
            nbio.on_doorbell("IH", self.doorbell)   # what the S2A entries route to the IH

    def reset(self) -> None:
        self.wptr = 0          # byte offset of the next entry
        self.overflow = False
        self.delivered = 0
        self.dropped = 0
        self._posting = False

    # -- registers --------------------------------------------------------------------------------
    def _field(self, value: int, name: str) -> int:
        fields = self.__dict__.get("_fields")
        if fields is None:
            fields = self._fields = {n: (f.shift, (1 << f.width) - 1)
                                     for n, f in self.dev.table(self.IP)["IH_RB_CNTL"].fields.items()}
        shift, mask = fields[name]
        return (value >> shift) & mask

    def _w_cntl(self, value: int):
        if self._field(value, "WPTR_OVERFLOW_CLEAR"):
            self.overflow = False
        return None

    def _w_wptr(self, value: int):
        self.wptr = value & self._offset_mask()
        self.overflow = False
        return None

    def _r_wptr(self) -> int:
        return self.wptr | (1 if self.overflow else 0)

    def _w_rptr(self, value: int):
        return value & self._offset_mask()

    def doorbell(self, index: int, value: int) -> bool:
        """A doorbell write; True when it was this ring's rptr doorbell (IH_DOORBELL_RPTR)."""
        db = self.get(self.IP, "IH_DOORBELL_RPTR")
        if not (db >> 28) & 1 or (db & ((1 << 26) - 1)) != index:
            return False
        self.set(self.IP, "IH_RB_RPTR", value & self._offset_mask())
        return True

    # -- ring ---------------------------------------------------------------------------------------
    def ring_size(self) -> int:
        return 4 << self._field(self.get(self.IP, "IH_RB_CNTL"), "RB_SIZE")

    def _offset_mask(self) -> int:
        return (self.ring_size() - 1) & 0x3FFFC

    def ring_base(self) -> int:
        return (self.get(self.IP, "IH_RB_BASE") << 8) | ((self.get(self.IP, "IH_RB_BASE_HI") & 0xFF) << 40)

    def _write_mem(self, mc_space: int, addr: int, data: bytes) -> None:
        if mc_space == MC_SPACE_BUS:
            self.dev.dma_write(addr, data)
        elif mc_space == MC_SPACE_GPUVM0:
            self.dev.blocks["GMC"].mc_write(addr, data, client=MMHUB_CLIENT_OSSSYS)
        else:
            raise DMAError(f"IH_RB_CNTL.MC_SPACE={mc_space} is not an address space the IH model knows "
                           f"(2 = bus, 4 = GPU VMID 0)")

    def _dummy_read_enabled(self) -> bool:
        cntl = self.get("NBIO", "BIF_BX0_INTERRUPT_CNTL")
        if cntl & 1:                            # IH_DUMMY_RD_OVERRIDE: IH_DUMMY_RD_EN decides
            return bool(cntl & 2)
        pci = self.dev.pci                      # else on unless MSI is enabled (MSI control bit 0)
        return not pci.read(CAP_MSI + 2, 2) & 1

    def _dummy_read(self) -> None:
        """BIF_BX0_INTERRUPT_CNTL/CNTL2 (see the module docstring); raises DMAError when the read fails."""
        if self._dummy_read_enabled():
            addr = self.get("NBIO", "BIF_BX0_INTERRUPT_CNTL2") << 8
            try:
                self.dev.dma_read(addr, 4)
            except DMAError as e:
                raise DMAError(f"the IH's dummy read at bus address {addr:#x} (BIF_BX0_INTERRUPT_CNTL2) failed, "
                               f"so the entry at wptr was not announced: {e}") from e

    def post(self, entry: IVEntry) -> None:
        """The device's interrupt sink: encodes `entry` and writes it into the ring."""
        if self._posting:   # the ring's own write faulted on the MMHUB: that IV has nowhere to go
            self.dropped += 1
            return
        self._posting = True
        try:
            self._post(entry)
        finally:
            self._posting = False

    def post_many(self, entries) -> None:
        """A burst of IVs raised together (another block's many events in one clock step): each through
        `post`, in order, as the device's interrupt sink would take them one by one. Nothing can write the
        MMHUB's registers between them (no host access, no clock step), so the GMC reads them once for the
        burst (GMC._holding; a fault in between drops the held values)."""
        stamp = self.dev.steps * self.dev.STEP_NS
        with self.dev.blocks["GMC"]._holding():
            for entry in entries:
                entry.timestamp = entry.timestamp or stamp
                self.post(entry)

    def _post(self, entry: IVEntry) -> None:
        cntl = self.get(self.IP, "IH_RB_CNTL")
        if not self._field(cntl, "RB_ENABLE"):
            self.dropped += 1
            return
        if entry.vmid and not entry.pasid:
            entry.pasid = self.get(self.IP, f"IH_VMID_{entry.vmid}_LUT{'_MM' if entry.vmid_src else ''}") & 0xFFFF
        size = self.ring_size()
        rptr = self.get(self.IP, "IH_RB_RPTR") & (size - 1)
        nxt = (self.wptr + IV_SIZE) & (size - 1)
        if nxt == rptr:
            if not self._field(cntl, "WPTR_OVERFLOW_ENABLE"):
                self.dropped += 1
                return
            self.overflow = True
        space = self._field(cntl, "MC_SPACE")
        try:
            self._write_mem(space, self.ring_base() + self.wptr, encode_iv(entry))
            self.wptr = nxt
            self._dummy_read()
            if self._field(cntl, "WPTR_WRITEBACK_ENABLE"):
                wb = (self.get(self.IP, "IH_RB_WPTR_ADDR_LO") & ~3) | (
                    (self.get(self.IP, "IH_RB_WPTR_ADDR_HI") & 0xFFFF) << 32)
                self._write_mem(space, wb, struct.pack("<I", self._r_wptr()))
        except (DMAError, IndexError) as e:
            self.dropped += 1
            self.error(f"IV entry (client {entry.client_id}, src {entry.source_id}) not written: {e}")
            return
        self.delivered += 1
        if self._field(cntl, "ENABLE_INTR"):
            self.dev.send_msi()
