"""An AM device attached through pcie: the context every IP block of amdrv/ip works in.

`AMDevice.attach(spec)` opens the PCI function, reads the VRAM size and the IP discovery table, binds
register blocks per IP instance and sets up the VRAM allocator — it touches no engine, so it is what
every boot path starts from. IP blocks take the device and use:

    dev.reg("GC")           # amdrv.regs.IPBlock bound to GC instance 0 (dev.reg("SDMA0") -> GC's bases)
    dev.vram.read/write     # VRAM bytes at an offset, through BAR0 or indirectly (small BAR)
    dev.mm                  # the VRAMAllocator (boot region + heap)
    dev.mc_address(offset)  # the GPU's MC address of a VRAM offset, once the GMC has set the FB location
    dev.firmware            # the FirmwareStore; dev.chip the chips.Chip; dev.disc the Discovery
"""
from __future__ import annotations

import os
import threading
import time

from amdrv import chips, device_spec, discovery, pci_state, regs, trace, vbios
from amdrv.firmware import FirmwareStore
from amdrv.memory import VRAMAllocator
from pcie.interface import AccessCounters, BAR, PCIError, PCIFunction

# amdgpu_device.c amdgpu_device_mm_access: dword register addresses in the fixed aperture
MM_INDEX, MM_DATA, MM_INDEX_HI = 0x0, 0x1, 0x6
MM_APER = 0x80000000  # MM_INDEX bit 31 selects the VRAM aperture


class VRAM:
    """VRAM bytes by offset: BAR0 where it reaches, MM_INDEX/MM_DATA beyond it (small BAR)."""

    def __init__(self, bar0: BAR, mmio: BAR, size: int, counters: AccessCounters):
        self.bar0, self.mmio, self.size, self.counters = bar0, mmio, size, counters
        self.visible = min(bar0.size, size)  # the CPU-visible part through BAR0
        self.direct = bar0.direct()

    def _check(self, offset: int, n: int) -> None:
        if offset < 0 or offset + n > self.size:
            raise PCIError(f"VRAM access of {n} bytes at {offset:#x} is outside the {self.size:#x}-byte VRAM")

    def read(self, offset: int, n: int) -> bytes:
        self._check(offset, n)
        if offset + n <= self.visible:
            if self.direct is None:
                return self.bar0.read(offset, n)
            self.counters.bulk_read_bytes += n  # the mapped path bypasses the BAR's own counting
            return bytes(self.direct[offset:offset + n])
        head = max(0, self.visible - offset)
        out = bytearray(self.read(offset, head) if head else b"")
        pos, end = offset + head, offset + n
        start = pos & ~3
        hi = None
        for a in range(start, end, 4):
            out += self._indirect_read32(a, hi).to_bytes(4, "little")
            hi = a >> 31
        return bytes(out[pos - start:][:n - head]) if start != pos else bytes(out[:n])

    def write(self, offset: int, data: bytes) -> None:
        n = len(data)
        self._check(offset, n)
        if offset + n <= self.visible:
            if self.direct is not None:
                self.counters.bulk_write_bytes += n
                self.direct[offset:offset + n] = data
            else:
                self.bar0.write(offset, data)
            return
        head = max(0, self.visible - offset)
        if head:
            self.write(offset, data[:head])
        pos, rest = offset + head, memoryview(data)[head:]
        if pos % 4 or len(rest) % 4:  # read-modify-write the partial dwords at either end
            start, end = pos & ~3, (pos + len(rest) + 3) & ~3
            buf = bytearray(self.read(start, end - start))
            buf[pos - start:pos - start + len(rest)] = rest
            pos, rest = start, memoryview(buf)
        hi = None
        for i in range(0, len(rest), 4):
            self._indirect_write32(pos + i, int.from_bytes(rest[i:i + 4], "little"), hi)
            hi = (pos + i) >> 31

    def read32(self, offset: int) -> int:
        return int.from_bytes(self.read(offset, 4), "little")

    def write32(self, offset: int, value: int) -> None:
        self.write(offset, value.to_bytes(4, "little"))

    # hi: the MM_INDEX_HI value this access already wrote, if any; within one copy it is written only
    # when it changes, as amdgpu_device_mm_access does (a register write less per dword: 3 round trips
    # fewer over USB).
    def _indirect_read32(self, addr: int, hi: int | None = None) -> int:
        self.mmio.write32(MM_INDEX * 4, (addr & 0x7FFFFFFF) | MM_APER)
        if hi != addr >> 31:
            self.mmio.write32(MM_INDEX_HI * 4, addr >> 31)
        return self.mmio.read32(MM_DATA * 4)

    def _indirect_write32(self, addr: int, value: int, hi: int | None = None) -> None:
        self.mmio.write32(MM_INDEX * 4, (addr & 0x7FFFFFFF) | MM_APER)
        if hi != addr >> 31:
            self.mmio.write32(MM_INDEX_HI * 4, addr >> 31)
        self.mmio.write32(MM_DATA * 4, value)


class _RecordedKey:
    """Where a cached discovery binary puts the boot state's magic, firmware-reserved size and key words (NBIF
    registers, in the BAR): equal for every binary of one chip; read() reads the magic, and the rest only if it
    is there (a GPU no AM run left pays one read), keeping what it read for _firmware_reserved."""

    def __init__(self, dev: "AMDevice", addrs: tuple[int, ...]):
        self.dev, self.addrs = dev, addrs

    @classmethod
    def at(cls, disc, dev: "AMDevice") -> "_RecordedKey | None":
        from amdrv.ip.nbio import KEY_REGS, STATE_REGS
        blk = disc.ip_block("NBIF", 0, dev.mmio)
        addrs = tuple(blk.reg(n).addr for n in (STATE_REGS[0], STATE_REGS[5]) + KEY_REGS)
        return cls(dev, addrs) if all(a + 4 <= dev.mmio.size for a in addrs) else None

    def __hash__(self) -> int:
        return hash(self.addrs)

    def __eq__(self, other) -> bool:
        return isinstance(other, _RecordedKey) and other.addrs == self.addrs

    def read(self) -> int | None:
        from amdrv.ip.nbio import STATE_MAGIC
        magic = self.dev.mmio.read32(self.addrs[0])
        self.dev._early_words[self.addrs[0]] = magic
        if magic >> 16 != STATE_MAGIC:
            return None
        words = self.dev.mmio.read32_many(self.addrs[1:])
        self.dev._early_words.update(zip(self.addrs[1:], words))
        return words[1] | words[2] << 32


class AMDevice:
    """A GPU the AM driver holds: PCI function, registers, VRAM, discovery, allocator, firmware."""

    def __init__(self, name: str, pci: PCIFunction, firmware: FirmwareStore | None = None):
        self.name, self.pci = name, pci
        # DRIVERLESS_TRACE=mmio: every register access logged with its name (amdrv.trace); off: the BAR itself
        self.mmio = trace.wrap_mmio(pci.bar(5), os.environ.get(trace.ENV_TRACE), name,
                                    lambda: getattr(self, "_blocks", {}).values())
        # A process that died inside a reset leaves the config space it saved on disk (amdrv.pci_state):
        # restored here (only dwords that differ are written). Its reset may still land after that (a
        # Mode1Reset in flight when it died): the discovery that then reads all ones is retried once after
        # restoring again.
        saved = pci_state.kept(pci)
        self._blocks: dict[tuple[str, int], regs.IPBlock] = {}
        self._early_words: dict[int, int] = {}   # register reads made before discovery was known (_RecordedKey)
        for retry in (False, True):
            if saved is not None:
                pci_state.restore(pci, saved)
            try:
                vram_size = self._discover()
                # the firmware's reserved top of VRAM (amdgpu_ttm_reserve_tmr): the boot region goes below it
                self.fw_reserved = self._firmware_reserved()
                break
            except (discovery.DiscoveryError, vbios.VBIOSError):
                if saved is None or retry:
                    raise
                time.sleep(0.5)   # the reset's own time (SMU13_MODE1_RESET_WAIT_TIME_IN_MS), then restore
        self.chip = self._identify()
        self.mm = self.new_allocator()
        self.firmware = firmware or FirmwareStore()
        self.fb_base: int | None = None  # MC address of VRAM offset 0, set by the GMC block
        self.grbm_lock = threading.Lock()  # GRBM_GFX_CNTL queue selection (amdgpu's srbm_mutex): amdrv.queue

    def _discover(self) -> int:
        """VRAM size, the VRAM view and the IP discovery binary; returns the VRAM size."""
        vram_size = discovery.vram_size(self.mmio)
        self.vram = VRAM(self.pci.bar(0), self.mmio, vram_size, self.pci.counters)
        # Beyond the CPU-visible window every dword is three register accesses (MM_INDEX): read only
        # the binary's own size there, not all of DISCOVERY_TMR_SIZE, and only its binary header and
        # harvest table when the host keeps a copy of the rest (DiscoveryCache, in the driver's cache dir).
        exact = vram_size - discovery.DISCOVERY_TMR_OFFSET >= self.vram.visible
        cache = discovery.DiscoveryCache() if exact else None
        self.disc = (cache is not None and self._recall_discovery(cache)) or \
            discovery.read_discovery(self.vram.read, vram_size, exact=exact, cache=cache)
        return vram_size

    def _recall_discovery(self, cache: discovery.DiscoveryCache) -> discovery.Discovery | None:
        """The cached binary whose key an AM run on this board recorded in its boot state (amdrv.ip.nbio
        RECORD_REGS, with the state's magic): the scratch registers live on the board, so a key found there was
        this board's binary's (no other board's run wrote them; a power cycle clears them). Saves the header
        and harvest list reads (a dword a round trip over USB); None: read them (read_discovery)."""
        return cache.recall(lambda disc: _RecordedKey.at(disc, self))

    def _firmware_reserved(self) -> vbios.FirmwareReserved:
        """What an earlier AM run recorded from this board's VBIOS since the last reset (two scratch reads, none
        when the discovery recall read them), else the VBIOS itself (amdrv.vbios: 20 register accesses): a warm
        boot reads no ROM."""
        from amdrv.ip.nbio import NBIO
        recorded = NBIO(self).recorded_fw_reserved(known=self._early_words)
        if recorded and recorded < self.vram.size:
            return vbios.FirmwareReserved(recorded, "the VBIOS's fw_reserved_size_in_kb as an earlier AM run recorded "
                                                    "it (BIF_BX0_DRIVER_SCRATCH_5)")
        return vbios.read_fw_reserved(self)

    def new_allocator(self) -> VRAMAllocator:
        """A fresh allocator below the firmware-reserved top (at open, and after a reset)."""
        return VRAMAllocator(self.vram.size, visible=self.vram.visible, reserved_top=self.fw_reserved.size)

    @classmethod
    def attach(cls, spec: str = "am:sim", firmware: FirmwareStore | None = None) -> AMDevice:
        pci = device_spec.parse(spec).open()
        try:
            return cls(spec, pci, firmware)
        except BaseException:
            pci.close()
            raise

    def _identify(self) -> chips.Chip:
        gc = self.disc.version_of("GC")
        for chip in chips.SUPPORTED:
            if chip.ip["gc"] == gc:
                return chip
        known = ", ".join(f"{c.name} GC {'.'.join(map(str, c.ip['gc']))}" for c in chips.SUPPORTED)
        raise PCIError(f"{self.name}: GC {'.'.join(map(str, gc))} is not a supported GPU (supported: {known})")

    def reg(self, block: str, instance: int = 0) -> regs.IPBlock:
        key = (block, instance)
        if key not in self._blocks:
            name = "GC" if block.startswith("SDMA") else block  # gfx11 SDMA registers sit in GC's space
            self._blocks[key] = self.disc.ip_block(name, instance if name == block else 0, self.mmio)
        return self._blocks[key]

    def mc_address(self, vram_offset: int) -> int:
        if self.fb_base is None:
            raise PCIError(f"{self.name}: MC address asked before the GMC set the framebuffer location")
        return self.fb_base + vram_offset

    def close(self) -> None:
        self.pci.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
