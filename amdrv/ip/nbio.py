"""NBIO 4.3 with the SOC21 common block and HDP 6.0: what soc21_common_hw_init, nbio_v4_3.c and
hdp_v6_0.c do at init, the HDP flush, and the AM boot state kept in scratch registers.

    nbio = NBIO(dev)
    nbio.init()                    # bus mastering + memory decode, NBIO registers, HDP remap, doorbells
    nbio.hdp_flush()               # after the CPU wrote VRAM through BAR0, before an engine reads it
    nbio.write_state(1, clean=False); nbio.read_state()   # -> BootState(version, clean, boot region)

Facts (drivers/gpu/drm/amd/amdgpu):
- soc21_common_hw_init: nbio init_registers (NBIO 4.3.0: clear RCC_DEV0_EPF2_STRAP2's
  STRAP_NO_SOFT_RESET_DEV0_F2), remap_hdp_registers, then the doorbell aperture
  (RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN.BIF_DOORBELL_APER_EN) and the doorbell self-ring aperture
  (BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_*: EN=1, MODE=1, SIZE=0 at the doorbell BAR's bus address).
  Bus mastering is what amdgpu's pci_set_master does (ih_v6_0_irq_init); memory decode is the PCI core's.
- soc21_common_early_init: rmmio_remap.reg_offset = MMIO_REG_HOLE_OFFSET = 0x80000 - PAGE_SIZE; nbio_v4_3
  points BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL/REG_FLUSH_CNTL at reg_offset + KFD_MMIO_REMAP_HDP_MEM/
  REG_FLUSH_CNTL (0 and 4, uapi kfd_ioctl.h); hdp_v6_0_flush_hdp writes 0 to the MEM one.
- The engines' flush: BIF_BX_PF0_GPU_HDP_FLUSH_REQ/_DONE with per-client bits (nbio_v4_3_hdp_flush_reg:
  CP0..CP9, SDMA0, SDMA1); the engine writes its bit to REQ and waits for it in DONE.
- Registers past the 1 MiB register BAR (the S2A doorbell routing entries, base index 3; the straps,
  base 5) are reached as soc21_pcie_rreg/wreg do: byte address into BIF_BX_PF0_RSMU_INDEX, value through
  BIF_BX_PF0_RSMU_DATA. The read-backs amdgpu does after each write only flush PCIe posting; a read on
  the same path is ordered after the writes anyway, so they are left out (over USB each is a round trip).
- nbio_v4_3_ih_doorbell_range / sdma_doorbell_range / gc_doorbell_init program S2A_DOORBELL_ENTRY_1/2/0,3
  so the BIF routes those doorbells to the IH, SDMA and GC.

Boot state: BIF_BX0_DRIVER_SCRATCH_0..5 (5: the firmware-reserved VRAM size from the VBIOS, in pages), and
6..11 what a run records for the next (RECORD_REGS: the discovery key, SMU versions and top clock levels). They are NBIO (bus interface) registers, which stay powered and
programmed while the PCI function lives (a driver restart keeps them; GC's SCRATCH_REG* sit in the GFX
power domain, which GFXOFF turns off, and gfx_v11_0's ring test and SR-IOV's RLCG interface write
them), and the whole ASIC, BIF included, returns to its reset state on a mode1 reset (amdgpu restores
the PCI config space afterwards for that reason), so the state is gone exactly when the boot region
can no longer be trusted. BIOS_SCRATCH_* are the VBIOS's (atombios reads and writes them) and
FW_SCRATCH_* the firmware's; no upstream code touches DRIVER_SCRATCH_*, so nothing else clobbers them.

Small BAR: nothing here depends on BAR0's size; VRAM past the visible part is reached by dev.vram's
MM_INDEX/MM_DATA path, which HDP flushes cover too.
"""
from __future__ import annotations

from dataclasses import dataclass

from amdrv import regs
from amdrv.ip.base import IPBlock
from amdrv.poll import poll_reg

MMIO_REG_HOLE_OFFSET = 0x80000 - 0x1000         # soc21.c, with a 4 KiB PAGE_SIZE
KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL = 0            # uapi/linux/kfd_ioctl.h
KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL = 4
PCI_COMMAND, PCI_COMMAND_MEMORY, PCI_COMMAND_MASTER = 0x04, 0x2, 0x4
PCI_BASE_ADDRESS_2 = 0x18
DOORBELL_BAR = 2
# amdgpu_doorbell.h AMDGPU_NAVI10_DOORBELL_IH; soc21_init_doorbell_index; ih_v6_0 shifts it to dwords
DOORBELL_IH = 0x178 << 1
# amdgpu_doorbell.h AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0/1 (64-bit units; rings use index << 1 in dwords)
DOORBELL_SDMA_ENGINE = (0x100, 0x10A)
SDMA_DOORBELL_RANGE = 20    # soc21_init_doorbell_index: doorbell_index.sdma_doorbell_range (dwords per engine)
# nbio_v4_3_gc_doorbell_init's values for S2A_DOORBELL_ENTRY_0_CTRL and _3_CTRL
GC_DOORBELL_ENTRIES = {"S2A_DOORBELL_ENTRY_0_CTRL": 0x30000007, "S2A_DOORBELL_ENTRY_3_CTRL": 0x3000000D}
HDP_FLUSH_CLIENTS = tuple(f"CP{i}" for i in range(10)) + ("SDMA0", "SDMA1")

STATE_MAGIC = 0x414D  # "AM" in the top half of DRIVER_SCRATCH_0
STATE_REGS = ("BIF_BX0_DRIVER_SCRATCH_0", "BIF_BX0_DRIVER_SCRATCH_1", "BIF_BX0_DRIVER_SCRATCH_2",
              "BIF_BX0_DRIVER_SCRATCH_3", "BIF_BX0_DRIVER_SCRATCH_4", "BIF_BX0_DRIVER_SCRATCH_5")
CLEAN_EXIT = 1  # DRIVER_SCRATCH_1 bit 0
# What a run records for the next one (0: not recorded): the discovery key (64 bits of the sha256 amdrv.discovery
# keys its host cache by) in 6-7; the SMU firmware's version and driver interface version in 8-9; the top DPM
# level (MHz, 16 bits each) of each of smu.LOW_CLOCKS in 10-11, two a word.
RECORD_REGS = tuple(f"BIF_BX0_DRIVER_SCRATCH_{n}" for n in range(6, 12))
KEY_REGS = RECORD_REGS[:2]


class NBIOError(RuntimeError):
    """NBIO/HDP init or flush failed; the message names the device, the register and what to do."""


@dataclass(frozen=True)
class BootState:
    """What a previous AM run left in the scratch registers: its boot-state version, whether it ended
    with fini, the boot region it used (byte offsets; `boot_used` is how far its bump pointer got) and the
    firmware-reserved VRAM size it read from the VBIOS (bytes), so later boots need not read the ROM again."""
    version: int
    clean: bool
    boot_base: int
    boot_size: int
    boot_used: int
    fw_reserved: int = 0
    disc_key: int = 0               # the records (RECORD_REGS), 0 where none was made
    smu_version: int = 0
    smu_if_version: int = 0
    top_mhz: tuple[int, ...] = (0, 0, 0, 0)


class IndirectMMIO:
    """A register MMIO view that reaches past the register BAR through the RSMU index/data pair, as
    soc21_pcie_rreg/wreg do; addresses inside the BAR go straight to it."""

    def __init__(self, bar, index: regs.Register, data: regs.Register):
        self.bar, self.index, self.data, self.size = bar, index, data, bar.size

    def read32(self, addr: int) -> int:
        if addr + 4 <= self.size:
            return self.bar.read32(addr)
        self.index.write(addr)
        return self.data.read()

    def read32_many(self, addrs) -> list[int]:
        addrs = list(addrs)
        far = [i for i, a in enumerate(addrs) if a + 4 > self.size]
        if len(far) > 1:
            return [self.read32(a) for a in addrs]
        # one batch over a transport that batches (USB); one address past the BAR: its index written first (a
        # posted write, which the batch's reads follow), then the data register read among the others
        if far:
            self.index.write(addrs[far[0]])
        got = self.bar.read32_many([self.data.addr if i in far else a for i, a in enumerate(addrs)])
        return list(got)

    def write32(self, addr: int, value: int) -> None:
        if addr + 4 <= self.size:
            self.bar.write32(addr, value)
            return
        self.index.write(addr)
        self.data.write(value)


class NBIO(IPBlock):
    """The bus interface (NBIF 4.3) and the SOC's common block (soc21_common_hw_init/_fini). One instance per
    AMGPU, shared by the blocks that program doorbell ranges, HDP flushes and the IH control through it."""

    name = "nbio"

    def __init__(self, dev):
        self.dev = dev
        direct = dev.reg("NBIF")
        mmio = IndirectMMIO(dev.mmio, direct.BIF_BX_PF0_RSMU_INDEX, direct.BIF_BX_PF0_RSMU_DATA)
        self.regs = regs.IPBlock(direct.table, direct.bases, mmio, name=direct.name)
        self._mmio = mmio
        self.version = dev.disc.version_of("NBIF")
        self.sw_init()

    # ---------------------------------------------------------------- life cycle
    def hw_init(self, warm: bool = False) -> None:
        self.init()       # the same on a warm boot: the doorbell apertures fini turned off come back

    def hw_fini(self) -> None:
        self.fini()

    def init(self) -> None:
        """soc21_common_hw_init, with bus mastering and memory decode on first."""
        self.enable_bus_master()
        r = self.regs
        # the read-modify-writes' reads as one batch (one USB round trip): no write between changes them
        strap, aper = regs.read_all([r.RCC_DEV0_EPF2_STRAP2, r.RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN])
        if self.version == (4, 3, 0):
            r.RCC_DEV0_EPF2_STRAP2.update(strap, STRAP_NO_SOFT_RESET_DEV0_F2=0)
        r.BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL.write(MMIO_REG_HOLE_OFFSET + KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL)
        r.BIF_BX0_REMAP_HDP_REG_FLUSH_CNTL.write(MMIO_REG_HOLE_OFFSET + KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL)
        self.enable_doorbells(True, aper)

    def fini(self) -> None:
        """soc21_common_hw_fini: the doorbell aperture and the self-ring aperture off (the next boot's
        init turns them on again)."""
        self.enable_doorbells(False)

    def enable_bus_master(self) -> None:
        pci = self.dev.pci
        want = PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER
        cmd = pci.set_bus_master(True)
        if cmd is None or cmd & want != want:     # it wrote: read back whether the host let the bits stick
            cmd = pci.config_read(PCI_COMMAND, 2)
        if cmd & want != want:
            raise NBIOError(f"{self.dev.name}: the PCI command register reads {cmd:#06x} after enabling "
                            "memory decode and bus mastering; the host refused it (check that no other "
                            "driver holds the function and that the IOMMU/VFIO setup allows DMA)")

    def doorbell_bar_address(self) -> int:
        lo = self.dev.pci.config_read(PCI_BASE_ADDRESS_2, 4)
        hi = self.dev.pci.config_read(PCI_BASE_ADDRESS_2 + 4, 4) if lo & 0x4 else 0  # 64-bit BAR
        return (hi << 32) | (lo & ~0xF)

    def enable_doorbells(self, enable: bool, aper_en: int | None = None) -> None:
        """soc21_enable_doorbell_aperture: doorbell BAR decode and the self-ring aperture. aper_en:
        RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN read already (read_all), else it is read now."""
        r = self.regs
        r.RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN.update(aper_en, BIF_DOORBELL_APER_EN=int(enable))
        cntl = 0
        if enable:
            base = self.doorbell_bar_address()
            cntl = r.BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL.encode(
                DOORBELL_SELFRING_GPA_APER_EN=1, DOORBELL_SELFRING_GPA_APER_MODE=1, DOORBELL_SELFRING_GPA_APER_SIZE=0)
            r.BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_LOW.write(base & 0xFFFFFFFF)
            r.BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_BASE_HIGH.write(base >> 32)
        r.BIF_BX_PF0_DOORBELL_SELFRING_GPA_APER_CNTL.write(cntl)

    def ih_doorbell_range(self, index: int | None) -> None:
        """nbio_v4_3_ih_doorbell_range: route the IH's rptr doorbell (dword index; None turns it off)."""
        r = self.regs.S2A_DOORBELL_ENTRY_1_CTRL
        if index is None:
            r.update(S2A_DOORBELL_PORT1_RANGE_SIZE=0)
        else:
            r.update(S2A_DOORBELL_PORT1_ENABLE=1, S2A_DOORBELL_PORT1_AWID=0, S2A_DOORBELL_PORT1_RANGE_OFFSET=index,
                     S2A_DOORBELL_PORT1_RANGE_SIZE=2, S2A_DOORBELL_PORT1_AWADDR_31_28_VALUE=0)

    def sdma_doorbell_range(self, instance: int, index: int | None, size: int) -> None:
        """nbio_v4_3_sdma_doorbell_range: only instance 0 has an entry (S2A_DOORBELL_ENTRY_2) on NBIO 4.3."""
        if instance:
            return
        r = self.regs.S2A_DOORBELL_ENTRY_2_CTRL
        if index is None:
            r.update(S2A_DOORBELL_PORT2_RANGE_SIZE=0)
        else:
            r.update(S2A_DOORBELL_PORT2_ENABLE=1, S2A_DOORBELL_PORT2_AWID=0xE, S2A_DOORBELL_PORT2_RANGE_OFFSET=index,
                     S2A_DOORBELL_PORT2_RANGE_SIZE=size, S2A_DOORBELL_PORT2_AWADDR_31_28_VALUE=0x3)

    def gc_doorbell_init(self) -> None:
        """nbio_v4_3_gc_doorbell_init (gfx_v11_0_hw_init calls it)."""
        for name, value in GC_DOORBELL_ENTRIES.items():
            self.regs.reg(name).write(value)

    def ih_control(self, dummy_page_bus_address: int, ring_in_vram: bool) -> None:
        """nbio_v4_3_ih_control: the IH's dummy-read page; non-snooped requests for a ring in VRAM
        (the register's note: IH_REQ_NONSNOOP_EN=1 if the ring is in non-cacheable memory, e.g. VRAM)."""
        self.regs.BIF_BX0_INTERRUPT_CNTL2.write(dummy_page_bus_address >> 8)
        self.regs.BIF_BX0_INTERRUPT_CNTL.update(IH_DUMMY_RD_OVERRIDE=0, IH_REQ_NONSNOOP_EN=int(ring_in_vram))

    # ---------------------------------------------------------------- HDP
    def hdp_flush(self, client: str | None = None) -> None:
        """Flushes the host data path. Without a client, as hdp_v6_0_flush_hdp: a write of 0 to the
        remapped HDP_MEM_FLUSH_CNTL page. With one of HDP_FLUSH_CLIENTS, the engines' way: its bit to
        GPU_HDP_FLUSH_REQ, then wait for it in GPU_HDP_FLUSH_DONE."""
        if client is None:
            self.dev.mmio.write32(MMIO_REG_HOLE_OFFSET + KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL, 0)
            return
        req, done, mask = self.hdp_flush_request(client)
        req.write(mask)
        poll_reg(done, mask, mask, f"the HDP flush requested as {client}", device=self.dev.name, error=NBIOError)

    def hdp_flush_request(self, client: str) -> tuple[regs.Register, regs.Register, int]:
        """(GPU_HDP_FLUSH_REQ, GPU_HDP_FLUSH_DONE, the client's bit): what a CP or SDMA packet that
        flushes HDP writes and waits on (their dword addresses are .addr // 4)."""
        if client not in HDP_FLUSH_CLIENTS:
            raise NBIOError(f"{self.dev.name}: no HDP flush client {client!r}; NBIO 4.3 has "
                            f"{', '.join(HDP_FLUSH_CLIENTS)}")
        done = self.regs.BIF_BX_PF0_GPU_HDP_FLUSH_DONE
        return self.regs.BIF_BX_PF0_GPU_HDP_FLUSH_REQ, done, done.fields[client].mask

    # ---------------------------------------------------------------- boot state
    def read_state(self) -> BootState | None:
        """The boot state a previous AM run wrote, or None (never written, or reset since)."""
        v = self._mmio.read32_many([self.regs.reg(n).addr for n in STATE_REGS + RECORD_REGS])
        if v[0] >> 16 != STATE_MAGIC:
            return None
        return BootState(version=v[0] & 0xFFFF, clean=bool(v[1] & CLEAN_EXIT), boot_base=v[2] << 20,
                         boot_size=v[3] << 20, boot_used=v[4] << 12, fw_reserved=v[5] << 12,
                         disc_key=v[6] | v[7] << 32, smu_version=v[8], smu_if_version=v[9],
                         top_mhz=(v[10] & 0xFFFF, v[10] >> 16, v[11] & 0xFFFF, v[11] >> 16))

    def record(self, disc_key: int, smu_version: int, smu_if_version: int,
               top_mhz: tuple[int, ...] = (0, 0, 0, 0)) -> None:
        """What the next run may take from this one (RECORD_REGS) instead of asking the GPU again; 0 for what is
        not known. Trusted only as far as the boot state is (am.AMGPU._decide) or, the key, matched (device)."""
        if len(top_mhz) != 4 or not all(0 <= m <= 0xFFFF for m in top_mhz):
            raise NBIOError(f"{self.dev.name}: top DPM levels {top_mhz} are not four 16-bit MHz values")
        values = (disc_key & 0xFFFFFFFF, disc_key >> 32 & 0xFFFFFFFF, smu_version & 0xFFFFFFFF,
                  smu_if_version & 0xFFFFFFFF, top_mhz[0] | top_mhz[1] << 16, top_mhz[2] | top_mhz[3] << 16)
        for name, value in zip(RECORD_REGS, values):
            self.regs.reg(name).write(value)

    def recorded_fw_reserved(self, known: dict[int, int] | None = None) -> int:
        """The firmware-reserved VRAM size (bytes) a boot state holds, 0 without one; two reads, or none for
        the registers in `known` (address: value read at this open, nothing written since)."""
        known = known or {}
        magic_at, pages_at = (self.regs.reg(STATE_REGS[k]).addr for k in (0, 5))
        if magic_at in known and known[magic_at] >> 16 != STATE_MAGIC:
            return 0
        if magic_at not in known or pages_at not in known:
            known = dict(zip((magic_at, pages_at), self._mmio.read32_many([magic_at, pages_at])))
        return 0 if known[magic_at] >> 16 != STATE_MAGIC else known[pages_at] << 12

    def write_state(self, version: int, clean: bool) -> BootState:
        """Records version (16 bits), the clean-exit flag and the boot region of dev.mm."""
        if not 0 <= version <= 0xFFFF:
            raise NBIOError(f"{self.dev.name}: boot state version {version} does not fit 16 bits")
        mm = self.dev.mm
        state = BootState(version, clean, mm.boot_base, mm.boot_end - mm.boot_base, mm.boot_used,
                          self.dev.fw_reserved.size)
        values = (STATE_MAGIC << 16 | version, CLEAN_EXIT if clean else 0, state.boot_base >> 20,
                  state.boot_size >> 20, state.boot_used >> 12, state.fw_reserved >> 12)
        for name, value in zip(STATE_REGS, values):
            self.regs.reg(name).write(value)
        return state
