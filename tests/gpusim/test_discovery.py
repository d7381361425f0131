"""The IP discovery binary, read back with a minimal reader written from discovery.h by hand (struct
offsets counted from the header, not from the generated tables) and checked as amdgpu_discovery.c does."""
import struct

import pytest

from gpusim import provider

BINARY_SIGNATURE, IP_SIG, GC_ID, HARVEST_SIG = 0x28211407, 0x53445049, 0x4347, 0x56524148


def csum(b):
    return sum(b) & 0xFFFF


def parse(blob):
    """binary_header: u32 signature, u16 version_major, u16 version_minor, u16 binary_checksum,
    u16 binary_size, table_info table_list[6] at 12 (u16 offset, u16 checksum, u16 size, u16 padding)."""
    sig, vmaj, vmin, bsum, bsize = struct.unpack_from("<IHHHH", blob, 0)
    assert sig == BINARY_SIGNATURE
    assert csum(blob[10:bsize]) == bsum
    tables = [struct.unpack_from("<HHHH", blob, 12 + 8 * i) for i in range(6)]
    # ip_discovery_header: u32 signature, u16 version, u16 size, u32 id, u16 num_dies, die_info[16] at 14.
    off, tsum, _, _ = tables[0]
    isig, iver, isize, _, ndies = struct.unpack_from("<IHHIH", blob, off)
    assert isig == IP_SIG and csum(blob[off:off + isize]) == tsum
    ips = []
    for d in range(ndies):
        die_id, die_off = struct.unpack_from("<HH", blob, off + 14 + 4 * d)
        did, nips = struct.unpack_from("<HH", blob, die_off)
        assert did == d
        at = die_off + 4
        for _ in range(nips):
            # struct ip: u16 hw_id, u8 number_instance, u8 num_base_address, u8 major, minor, revision,
            # u8 harvest:4 reserved:4, u32 base_address[num_base_address]
            hw, inst, nb, maj, mnr, rev, hv = struct.unpack_from("<HBBBBBB", blob, at)
            bases = struct.unpack_from(f"<{nb}I", blob, at + 8)
            ips.append(dict(hw_id=hw, inst=inst, version=(maj, mnr, rev), harvest=hv & 0xF, bases=bases))
            at += 8 + 4 * nb
    assert at <= off + isize
    # gc_info: gpu_info_header (u32 table_id, u16 major, u16 minor, u32 size), then u32 fields.
    goff, gsum, _, _ = tables[1]
    gid, gmaj, gmin, gsize = struct.unpack_from("<IHHI", blob, goff)
    assert gid == GC_ID and csum(blob[goff:goff + gsize]) == gsum
    gc = dict(zip(("num_se", "wgp0_per_sa", "wgp1_per_sa", "rb_per_se"), struct.unpack_from("<4I", blob, goff + 12)))
    gc["sa_per_se"] = struct.unpack_from("<I", blob, goff + 76)[0]
    gc["version"] = (gmaj, gmin)
    gc["wave_size"] = struct.unpack_from("<I", blob, goff + 56)[0]
    # harvest_table: u32 signature, u32 version, harvest_info list[32] (u16 hw_id, u8 instance, u8 rsvd).
    hoff, hsum, _, _ = tables[2]
    assert struct.unpack_from("<I", blob, hoff)[0] == HARVEST_SIG and csum(blob[hoff:hoff + 136]) == hsum
    harvested = [struct.unpack_from("<HB", blob, hoff + 8 + 4 * i) for i in range(32)]
    return ips, gc, [h for h in harvested if h[0]]


def read_discovery(fn):
    """As amdgpu_discovery_read_binary_from_vram: VRAM size from mmRCC_CONFIG_MEMSIZE, 4 KiB at size-64K,
    through MM_INDEX/MM_DATA (works with any BAR size)."""
    regs = fn.bar(5)
    pos = (regs.read32(0xDE3 * 4) << 20) - (64 << 10)
    out = bytearray()
    for i in range(0, 4096, 4):
        regs.write32(0, ((pos + i) & 0xFFFFFFFF) | 0x80000000)
        regs.write32(6 * 4, (pos + i) >> 31)
        out += struct.pack("<I", regs.read32(4))
    return bytes(out)


@pytest.mark.parametrize("chip,gc,mp1,sdma,mmhub,se", [
    ("navi31", (11, 0, 0), (13, 0, 0), (6, 0, 0), (3, 0, 0), 6),
    ("navi33", (11, 0, 2), (13, 0, 7), (6, 0, 2), (3, 0, 2), 2),
])
def test_discovery_binary(sim_bus, chip, gc, mp1, sdma, mmhub, se):
    f = provider.open_function(chip, small_bar=True, vram_size=2 << 30, fresh=True, bus=sim_bus)
    ips, gcinfo, harvested = parse(read_discovery(f))
    by = {(ip["hw_id"], ip["inst"]): ip for ip in ips}
    assert by[(11, 0)]["version"] == gc and by[(11, 0)]["bases"] == (0x1260, 0xA000, 0x1C000, 0x2402C00)
    assert by[(1, 0)]["version"] == mp1 and by[(255, 0)]["version"] == mp1       # MP1, MP0
    assert by[(1, 0)]["bases"][0] == 0x16000
    assert by[(42, 0)]["version"] == sdma and by[(43, 0)]["version"] == sdma    # SDMA0, SDMA1
    assert by[(34, 0)]["version"] == mmhub
    nbio = by[(108, 0)]                                                         # NBIF
    assert nbio["version"] == (4, 3, 0)
    assert nbio["bases"][2] + 0xC3 == 0xDE3        # regRCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE, base index 2
    assert by[(40, 0)]["version"] == (6, 0, 0) and by[(41, 0)]["version"] == (6, 0, 0)   # OSSSYS, HDP
    assert all(ip["harvest"] == 0 for ip in ips) and harvested == []
    assert gcinfo["version"] == (1, 2) and gcinfo["num_se"] == se and gcinfo["sa_per_se"] == 2
    assert 2 * (gcinfo["wgp0_per_sa"] + gcinfo["wgp1_per_sa"]) * 2 * se == (96 if chip == "navi31" else 32)
    assert gcinfo["wave_size"] == 32
    f.close()


def test_registers_resolve_through_the_discovered_bases(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    dev = f.dev
    assert dev.reg_addr("NBIO", "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE") == 0xDE3
    assert dev.reg_addr("NBIO", "BIF_BX_PF0_MM_INDEX") == 0 and dev.reg_addr("NBIO", "BIF_BX_PF0_MM_DATA") == 1
    assert dev.reg_addr("MP1", "MP1_SMN_C2PMSG_90") == 0x16000 + 0x29A
    with pytest.raises(LookupError, match="no IP VCN"):
        dev.reg_addr("VCN", "X")
    f.close()


def test_corrupt_checksum_is_detectable(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus)
    at = f.dev.vram.size - (64 << 10) + 100
    f.dev.vram.write(at, bytes([f.dev.vram.read(at, 1)[0] ^ 1]))
    with pytest.raises(AssertionError):
        parse(read_discovery(f))
    f.close()


def test_harvest_table_lists_fused_off_blocks(sim_bus):
    f = provider.open_function("navi31", vram_size=1 << 30, fresh=True, bus=sim_bus, harvest=((12, 1), (150, 3)))
    _, _, harvested = parse(read_discovery(f))
    assert harvested == [(12, 1), (150, 3)]          # VCN instance 1, UMC instance 3
    f.close()
