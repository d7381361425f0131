"""The simulated Navi31 platform as a driver sees it through pcie: config space, BARs, indirect access,
sparse VRAM, DMA and bus mastering, the register framework."""
import struct

import pytest

import pcie
from gpusim import board, provider
from gpusim.device import Block, DMAError, IVEntry

MM_INDEX, MM_DATA, MM_INDEX_HI = 0x0, 0x1, 0x6   # amdgpu_discovery.c
RCC_CONFIG_MEMSIZE = 0xde3


@pytest.fixture
def fn(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    yield f
    f.close()


def test_entry_point_reaches_the_simulator(sim_bus):
    f = pcie.open_function("sim", "navi33", vram_size=1 << 30, fresh=True, bus=sim_bus)
    assert (f.vendor_id, f.device_id) == (0x1002, 0x7480)
    f.close()


def test_config_space_identity_and_bars(fn):
    assert (fn.vendor_id, fn.device_id) == (0x1002, 0x744C)
    assert fn.config_read(0x09, 1) == 0 and fn.config_read(0x0A, 2) == 0x0300   # class 0x030000
    bar0 = fn.config_read(0x10, 4)
    assert bar0 & 0xF == 0xC                      # 64-bit prefetchable memory
    assert fn.config_read(0x18, 4) & 0xF == 0xC
    assert fn.config_read(0x20, 4) & 1 == 1       # I/O
    assert fn.config_read(0x24, 4) & 0xF == 0     # 32-bit non-prefetchable
    # BAR sizing as the PCI spec does it: write all ones, read back the size mask.
    fn.config_write(0x24, 4, 0xFFFFFFFF)
    assert (~fn.config_read(0x24, 4) & 0xFFFFFFFF) + 1 == 1 << 20
    fn.config_write(0x10, 4, 0xFFFFFFFF)
    fn.config_write(0x14, 4, 0xFFFFFFFF)
    mask = fn.config_read(0x10, 4) | fn.config_read(0x14, 4) << 32
    assert ((~mask & ((1 << 64) - 1)) | 0xF) + 1 == 1 << 30
    assert fn.bar(0).size == 1 << 30 and fn.bar(2).size == 256 << 20 and fn.bar(5).size == 1 << 20
    with pytest.raises(pcie.PCIError, match="BAR4"):
        fn.bar(4)


def _find_ext_cap(fn, cap_id):
    at = 0x100
    while at:
        hdr = fn.config_read(at, 4)
        if hdr & 0xFFFF == cap_id:
            return at
        at = hdr >> 20
    return None


def test_resizable_bar_capability(sim_bus):
    f = provider.open_function("navi31", small_bar=True, fresh=True, bus=sim_bus)   # 24 GiB VRAM, 256 MiB BAR
    at = _find_ext_cap(f, 0x15)
    assert at == 0x200
    sizes = f.config_read(at + 4, 4) >> 4
    assert sizes & 1 << 8 and sizes & 1 << 15 and not sizes >> 16 and not sizes & 0xFF   # 256 MiB .. 32 GiB
    ctrl = f.config_read(at + 8, 4)
    assert ctrl & 7 == 0 and (ctrl >> 5) & 7 == 2 and (ctrl >> 8) & 0x3F == 8   # BAR0 of 2 entries, 256 MiB
    assert f.config_read(at + 16, 4) & 7 == 2 and (f.config_read(at + 16, 4) >> 8) & 0x3F == 1   # BAR2, 2 MiB
    assert f.config_read(at + 12, 4) >> 4 == 0x1FE                   # BAR2: 2 MiB .. 256 MiB
    assert f.bar(0).size == 256 << 20 and f.bar(2).size == 2 << 20
    # Resizing with memory decode on is refused, as the spec requires.
    f.config_write(at + 8, 4, (ctrl & ~0x3F00) | 15 << 8)
    assert f.bar(0).size == 256 << 20 and "memory decode" in str(f.dev.errors[-1])
    cmd = f.config_read(4, 2)
    f.config_write(4, 2, cmd & ~2)
    f.config_write(at + 8, 4, (ctrl & ~0x3F00) | 15 << 8)
    f.config_write(at + 16, 4, (f.config_read(at + 16, 4) & ~0x3F00) | 8 << 8)
    f.config_write(4, 2, cmd)
    assert f.bar(0).size == 32 << 30 and f.bar(2).size == 256 << 20
    f.config_write(at + 8, 4, (ctrl & ~0x3F00) | 20 << 8)      # 1 TiB: not offered
    assert "not supported" in str(f.dev.errors[-1]) and f.bar(0).size == 32 << 30
    f.close()


def test_small_bar_reaches_vram_through_mm_index(sim_bus):
    f = provider.open_function("navi31", small_bar=True, fresh=True, bus=sim_bus)
    bar0, regs = f.bar(0), f.bar(5)
    assert bar0.size == 256 << 20 and len(bar0.direct()) == 256 << 20
    size = regs.read32(RCC_CONFIG_MEMSIZE * 4) << 20
    assert size == 24 << 30
    pos = size - (64 << 10)                        # the discovery binary, far beyond BAR0
    regs.write32(MM_INDEX * 4, (pos & 0xFFFFFFFF) | 0x80000000)
    regs.write32(MM_INDEX_HI * 4, pos >> 31)
    assert regs.read32(MM_DATA * 4) == 0x28211407  # BINARY_SIGNATURE
    # writes there would be dropped (the firmware-reserved top, gpusim/vbios.py): write below it
    pos = size - (16 << 20)
    regs.write32(MM_INDEX * 4, (pos & 0xFFFFFFFF) | 0x80000000)
    regs.write32(MM_INDEX_HI * 4, pos >> 31)
    regs.write32(MM_DATA * 4, 0xDEADBEEF)
    assert regs.read32(MM_DATA * 4) == 0xDEADBEEF                # the host reads its own write back
    assert f.dev.vram.read32(pos) != 0xDEADBEEF                  # the engines do not see it before
    f.dev.blocks["HDP"].flush("test")                            # the HDP flush
    assert f.dev.vram.read32(pos) == 0xDEADBEEF
    with pytest.raises(pcie.PCIError):
        bar0.read32(256 << 20)
    f.close()


def test_indirect_register_access_through_rsmu_index(fn):
    dev = fn.dev
    regs = fn.bar(5)
    # A register far beyond BAR5 (nbio base 3 region) reached as soc21_pcie_rreg/wreg do.
    far = dev.reg_addr("NBIO", "S2A_DOORBELL_ENTRY_0_CTRL")
    assert far * 4 >= regs.size
    idx, data = dev.reg_addr("NBIO", "BIF_BX_PF0_RSMU_INDEX"), dev.reg_addr("NBIO", "BIF_BX_PF0_RSMU_DATA")
    regs.write32(idx * 4, far * 4)
    regs.write32(data * 4, 0x30000007)
    assert dev.regs.peek(far) == 0x30000007
    assert regs.read32(data * 4) == 0x30000007
    # MM_INDEX with MM_APER clear addresses registers too.
    regs.write32(MM_INDEX * 4, RCC_CONFIG_MEMSIZE * 4)
    assert regs.read32(MM_DATA * 4) == 1024


def test_sparse_vram_costs_what_is_touched(sim_bus):
    f = provider.open_function("navi31", fresh=True, bus=sim_bus)      # a full 24 GiB device
    assert f.dev.vram.size == 24 << 30 and f.bar(0).size == 32 << 30
    before = f.dev.vram.resident_bytes()
    assert before <= 64 << 10
    f.bar(0).write(12 << 30, b"\x01" * 8192)
    f.dev.blocks["HDP"].flush("test")
    assert f.dev.vram.resident_bytes() - before <= 3 * 4096
    assert [i for i, _ in f.dev.vram.chunks()] == [(12 << 30) // (2 << 20), (24 << 30) // (2 << 20) - 1]
    f.close()


def test_dma_needs_bus_mastering(fn):
    buf = fn.alloc_dma(3 << 20)
    buf.view[:4] = b"\x11\x22\x33\x44"
    dev = fn.dev
    assert not dev.bus_master
    with pytest.raises(DMAError, match="bus mastering"):
        dev.dma_read(buf.bus_address(0), 4)
    assert "bus mastering off" in str(dev.errors[-1])
    with pytest.raises(DMAError):
        dev.dma_write(buf.bus_address(0), b"\0" * 4)
    assert bytes(buf.view[:4]) == b"\x11\x22\x33\x44"          # nothing was written
    fn.set_bus_master(True)
    assert dev.dma_read(buf.bus_address(0), 4) == b"\x11\x22\x33\x44"
    # Pages are 2 MiB segments at non-contiguous bus addresses: a transfer must follow bus_address.
    assert buf.bus_address(2 << 20) != buf.bus_address(0) + (2 << 20)
    with pytest.raises(DMAError, match="no host memory"):              # runs past the segment
        dev.dma_write(buf.bus_address((2 << 20) - 2), b"abcd")
    assert bytes(buf.view[(2 << 20) - 2:(2 << 20)]) == b"ab"
    with pytest.raises(DMAError, match="no host memory"):
        dev.dma_read(buf.bus_address(0) + (2 << 20) + 8, 4)       # the gap after a segment
    freed = buf.bus_address(0)
    buf.free()
    with pytest.raises(DMAError):                   # the freed segment's own address, not a guess that
        dev.dma_read(freed, 4)                      # another test's live buffer in this process may own


class _Echo(Block):
    """A block as other models write them: handlers by register name, state, scheduled work."""
    name = "ECHO"

    def attach(self):
        self.on_write("MP0", "MP0_SMN_C2PMSG_64", self._cmd)
        self.on_read("MP0", "MP0_SMN_C2PMSG_65", self._status)

    def reset(self):
        self.done = 0

    def _cmd(self, value):
        self.dev.schedule(3, self._finish, value)
        return value | 0x80000000

    def _finish(self, value):
        self.done = value
        self.dev.post_interrupt(IVEntry(client_id=0x1E, source_id=0x20, src_data=(value,)))

    def _status(self):
        return self.done


def test_block_framework_by_name_and_stepped_clock(fn):
    dev = fn.dev
    echo = dev.add(_Echo(dev))
    regs = fn.bar(5)
    a64 = dev.reg_addr("MP0", "MP0_SMN_C2PMSG_64")
    assert a64 == 0x16000 + 0x80                          # MP0 base[0] + the table's offset
    regs.write32(a64 * 4, 0x42)
    assert dev.regs.peek(a64) == 0x80000042               # the handler chose what is stored
    status = dev.reg_addr("MP0", "MP0_SMN_C2PMSG_65") * 4
    seen = [regs.read32(status) for _ in range(4)]        # each read is a poll: the clock steps
    assert seen[:2] == [0, 0] and seen[-1] == 0x42
    assert echo.done == 0x42 and dev.interrupts_dropped + (dev.ih_sink is not None) >= 1
    # Unhandled registers are storage.
    scratch = dev.reg_addr("GC", "SCRATCH_REG3") * 4
    regs.write32(scratch, 0x1234)
    assert regs.read32(scratch) == 0x1234


def test_memory_decode_off_master_aborts(fn):
    fn.config_write(4, 2, 0)
    assert fn.bar(5).read32(0) == 0xFFFFFFFF
    assert "memory decode off" in str(fn.dev.errors[-1])


def test_two_gpus_on_one_bus(sim_bus):
    a = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    b = provider.open_function("navi33", vram_size=1 << 30, fresh=True, bus=sim_bus)
    assert a.address != b.address and a.dev.bus is b.dev.bus
    assert a.config_read(0x14, 4) != b.config_read(0x14, 4)      # BAR0 high dwords differ
    buf = a.alloc_dma(4096)
    b.set_bus_master(True)
    b.dev.dma_write(buf.bus_address(0), b"peer")              # one bus, one host memory
    assert bytes(buf.view[:4]) == b"peer"
    a.close()
    b.close()


def test_board_rejects_bad_sizes():
    with pytest.raises(ValueError, match="VRAM size"):
        board.build("navi31", vram_size=100 << 20)


def test_each_bus_has_its_own_slots(sim_bus):
    """A bus its owner holds: slot 0 there is not slot 0 of the default bus (the device strings') nor of
    another owner's bus; opening it again finds the same GPU, busy while held."""
    from gpusim.bus import HostBus
    a = pcie.open_function("sim", "navi31", vram_size=1 << 30, bus=sim_bus)
    other = HostBus()
    b = pcie.open_function("sim", "navi31", vram_size=1 << 30, bus=other)
    assert a.slot == b.slot == 0 and a.dev is not b.dev
    assert a.dev not in provider.default_bus().slots.values()
    with pytest.raises(provider.PCIError, match="slot 0 .* busy"):
        pcie.open_function("sim", "navi31", bus=sim_bus)
    a.close()
    again = pcie.open_function("sim", "navi31", bus=sim_bus)
    assert again.dev is a.dev
    buf = again.alloc_dma(4096)       # host memory is mapped on the function's own bus
    assert sim_bus.read(buf.bus_address(0), 4) == bytes(4)
    with pytest.raises(DMAError):
        other.read(buf.bus_address(0), 4)
    again.close()
    other.close()
    assert not other.slots and b.dev.bus is None


def test_a_dropped_function_frees_its_slot_without_the_garbage_collector(sim_bus):
    """No reference cycle keeps an unclosed function (its BARs, its DMA buffers) alive: dropping the last
    reference frees its slot at once (a docs example failed depending on when the cyclic GC ran)."""
    import gc
    fn = pcie.open_function("sim", "navi31", vram_size=1 << 30, bus=sim_bus)
    fn.bar(5).read32(0)
    fn.alloc_dma(4096)
    dev = fn.dev
    gc.disable()
    try:
        del fn
        again = pcie.open_function("sim", "navi31", bus=sim_bus)
    finally:
        gc.enable()
    assert again.dev is dev
    again.close()


def test_bus_must_be_a_simulated_host_bus():
    with pytest.raises(provider.PCIError, match="not a simulated host bus"):
        pcie.open_function("sim", "navi31", bus="pci0")
