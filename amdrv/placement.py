"""Where the buffers the host writes and the engines read (rings, the kernarg arena, graph indirect buffers,
page tables below the root) live, per transport: the one placement policy (docs/usb.md, SRAM budget).

- PCIe, and a USB bridge on ASMedia's stock firmware: host DMA memory (`pci.alloc_dma`). Behind the stock
  bridge that is its SRAM: the host writes VRAM only one TLP per 0xE5-written dword there, while a window
  page goes out as one WRITE(16).
- A USB bridge on the open firmware (`pci.sram_dma`): VRAM, written through BAR0 by 0xF0 streamed posted writes
  (one round trip for up to 256 KiB, pcie.usb.transport) and made visible to the engines by an HDP flush
  (hdp_v6_0_flush_hdp, as amdgpu flushes before an engine reads what the CPU wrote). The bridge's 512 KiB SRAM
  is then left to the bulk copies' windows (amdrv.bridge_copy) and to host buffers.

    buf = placement.host_written(gpu, size)     # a DMABuffer-like: view, push(), coherent, free()
    m = gpu.gmc.map_system(buf)                 # maps it, VRAM pages where buf.vram_block is set
"""
from __future__ import annotations

from amdrv.memory import PAGE


def in_vram(pci) -> bool:
    """True where host-written engine buffers go to VRAM (the open bridge firmware), False for host DMA memory."""
    return bool(getattr(pci, "sram_dma", False))


def host_written(gpu, size: int, tag: str = "host-written"):
    """A buffer of size bytes (whole pages) the host fills and the engines read, placed by in_vram()."""
    size = (max(size, 1) + PAGE - 1) // PAGE * PAGE
    if in_vram(gpu.dev.pci):
        return VRAMBuffer(gpu, size, tag)
    return gpu.dev.pci.alloc_dma(size)


def signal_page(gpu, first: bool):
    """The page of signals a host polls (hcq): on the open firmware VRAM too (a poll is one 0xF0 streamed read
    of the signals in use, the host's writes 0xF0 writes), so the SRAM's slot 0 is left to the copy windows;
    elsewhere host DMA memory, the first page the one that reads back (readback=True: XDATA 0xF000 on the stock
    bridge)."""
    if in_vram(gpu.dev.pci):
        return VRAMBuffer(gpu, PAGE, "signals")
    return gpu.dev.pci.alloc_dma(PAGE, readback=first)


def scratch_page(pci):
    """amdgpu's dummy page (the IH's dummy reads, the hubs' default page for faulting accesses): host DMA
    memory; on the open firmware scratch pages of the SRAM that the copy windows may overwrite (nobody relies
    on their bytes; a faulting write lands there, and is reported by the fault it comes with)."""
    return pci.alloc_dma(PAGE, scratch=True) if in_vram(pci) else pci.alloc_dma(PAGE)


class VRAMBuffer:
    """VRAM standing in for host DMA memory: `view` is the host's copy, `push(offset, size)` writes the range
    through BAR0 and flushes the HDP (the engines read VRAM past the HDP only after a flush: gpusim.hdp), `pull`
    reads a range back. Not coherent, as the SRAM it replaces. `vram_block` is what GMC.map_system maps."""

    coherent = False

    def __init__(self, gpu, size: int, tag: str):
        self.gpu, self.size = gpu, size
        self.vram_block = gpu.dev.mm.alloc(size, PAGE, tag)
        self._shadow = bytearray(size)
        self.view = memoryview(self._shadow)     # not written yet: as the SRAM's, its first push sends it

    def bus_address(self, offset: int = 0) -> int:
        from pcie.interface import PCIError
        raise PCIError(f"{self.gpu.dev.name}: this buffer is VRAM at {self.vram_block.addr + offset:#x}, not host "
                       "memory on the bus (amdrv.placement): map it with gmc.map_system")

    def _range(self, offset: int, size: int | None) -> tuple[int, int]:
        size = self.size - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > self.size:
            from pcie.interface import PCIError
            raise PCIError(f"{self.gpu.dev.name}: range {offset:#x}+{size:#x} is outside the {self.size:#x}-byte "
                           f"VRAM buffer")
        return offset, size

    def push(self, offset: int = 0, size: int | None = None, flush: bool = True) -> None:
        """Writes the range through BAR0, then flushes the HDP (flush=False: the caller flushes before the
        engines may read it)."""
        offset, size = self._range(offset, size)
        if size:
            self.gpu.dev.vram.write(self.vram_block.addr + offset, bytes(self.view[offset:offset + size]))
            if flush:
                self.gpu.nbio.hdp_flush()

    def bus_address_bar0(self, offset: int = 0) -> int:
        """Where BAR0 shows byte `offset` of the buffer (for a host read of a word by a single TLP)."""
        vram = self.gpu.dev.vram
        at = self.vram_block.addr + offset
        if at + 4 > vram.visible:
            from pcie.interface import PCIError
            raise PCIError(f"{self.gpu.dev.name}: VRAM {at:#x} is beyond the {vram.visible:#x} bytes BAR0 shows")
        return vram.bar0.address + at

    def pull(self, offset: int = 0, size: int | None = None) -> None:
        offset, size = self._range(offset, size)
        if size:
            self.view[offset:offset + size] = self.gpu.dev.vram.read(self.vram_block.addr + offset, size)

    def free(self) -> None:
        if self.vram_block is not None:
            self.gpu.dev.mm.free(self.vram_block)
            self.vram_block = None
