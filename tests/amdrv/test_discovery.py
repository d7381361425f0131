"""IP discovery over binaries built here from discovery.h's layout (through amdrv.structs), read back
through a VRAM-reading function as the driver reads them: signatures, checksums, truncation, harvest."""
import pytest

from amdrv import discovery, structs
from amdrv.autogen import discovery as D
from amdrv.discovery import DISCOVERY_TMR_OFFSET, DiscoveryError, parse, read_discovery

BH = structs.get(D, "binary_header")
IH = structs.get(D, "ip_discovery_header")
DH = structs.get(D, "die_header")
IP = structs.get(D, "ip")
GC = structs.get(D, "gc_info_v1_2")
HT = structs.get(D, "harvest_table")

# A made-up but Navi31-shaped IP list: (hw_id, instance, version, bases)
IPS = [
    (D.GC_HWID, 0, (11, 0, 0), (0x1260, 0xA000, 0x1C000, 0x2402C00)),
    (D.MMHUB_HWID, 0, (3, 0, 0), (0x1A000, 0x2408800)),
    (D.MP0_HWID, 0, (13, 0, 0), (0x16000, 0xDC0000, 0xE00000)),
    (D.MP1_HWID, 0, (13, 0, 0), (0x16000, 0xDC0000, 0xE00000)),
    (D.NBIF_HWID, 0, (4, 3, 0), (0x0, 0x14, 0xD20, 0x10400)),
    (D.OSSSYS_HWID, 0, (6, 0, 0), (0x10A0, 0x240A000)),
    (D.HDP_HWID, 0, (6, 0, 0), (0xF20, 0x240A400)),
    (D.SDMA0_HWID, 0, (6, 0, 0), (0x1260, 0xA000)),
    (D.SDMA1_HWID, 0, (6, 0, 0), (0x1260, 0xA000)),
    (D.VCN_HWID, 0, (4, 0, 0), (0x7800, 0x7E00)),
    (D.VCN_HWID, 1, (4, 0, 0), (0x7A00, 0x7F00)),
    (D.DMU_HWID, 0, (3, 2, 0), (0x12, 0xC0)),
    (D.UMC_HWID, 0, (8, 10, 0), (0x14000,)),
    (D.UMC_HWID, 1, (8, 10, 0), (0x54000,)),
]


def build(ips=IPS, *, table_version=2, gc=True, harvest=(), byte7=None, dies=None) -> bytearray:
    """A discovery binary as discovery.h lays it out, every checksum right."""
    dies = dies or [ips]
    out = bytearray(BH.size)
    out += bytes(-len(out) % 16)
    ip_off = len(out)
    body = bytearray()
    die_info = []
    at = ip_off + IH.size
    for die_id, die_ips in enumerate(dies):
        die_info.append({"die_id": die_id, "die_offset": at + len(body)})
        body += DH.pack(die_id=die_id, num_ips=len(die_ips))
        for hw_id, inst, (ma, mi, rev), bases in die_ips:
            entry = bytearray(IP.pack(hw_id=hw_id, number_instance=inst, num_base_address=len(bases),
                                      major=ma, minor=mi, revision=rev))
            if byte7 is not None:
                entry[7] = byte7
            body += entry + b"".join(b.to_bytes(4, "little") for b in bases)
    ip_size = IH.size + len(body)
    out += IH.pack(signature=D.DISCOVERY_TABLE_SIGNATURE, version=table_version, size=ip_size, id=0,
                   num_dies=len(dies), die_info=die_info) + body
    tables = [{"offset": ip_off, "checksum": sum(out[ip_off:]) & 0xFFFF, "size": ip_size}]
    tables += [{}] * (D.TOTAL_TABLES - 1)
    if gc:
        gc_off = len(out)
        out += GC.pack(header={"table_id": D.GC_TABLE_ID, "version_major": 1, "version_minor": 2,
                               "size": GC.size}, gc_num_se=6, gc_num_wgp0_per_sa=4, gc_num_sa_per_se=2,
                       gc_wave_size=32, gc_gl2c_per_gpu=96)
        tables[D.GC] = {"offset": gc_off, "checksum": sum(out[gc_off:]) & 0xFFFF, "size": GC.size}
    if harvest is not None:
        h_off = len(out)
        out += HT.pack(header={"signature": D.HARVEST_TABLE_SIGNATURE, "version": 1},
                       list=[{"hw_id": h, "number_instance": i} for h, i in harvest])
        tables[D.HARVEST_INFO] = {"offset": h_off, "checksum": sum(out[h_off:]) & 0xFFFF, "size": HT.size}
    BH.pack_into(out, 0, binary_signature=D.BINARY_SIGNATURE, version_major=1, version_minor=1,
                 binary_size=len(out), table_list=tables)
    return fix_checksum(out)


def fix_checksum(out: bytearray) -> bytearray:
    BH.pack_into(out, 0, binary_checksum=sum(out[10:BH.unpack_from(out).binary_size]) & 0xFFFF)
    return out


class VRAM:
    """VRAM as a sparse byte store with a read log (the driver must read where upstream reads)."""

    def __init__(self, size: int, blob: bytes, at: int | None = None):
        self.size, self.reads = size, []
        self.at = size - DISCOVERY_TMR_OFFSET if at is None else at
        self.blob = bytes(blob)

    def read(self, offset: int, size: int) -> bytes:
        assert 0 <= offset and offset + size <= self.size
        self.reads.append((offset, size))
        out = bytearray(size)
        lo, hi = max(offset, self.at), min(offset + size, self.at + len(self.blob))
        if lo < hi:
            out[lo - offset:hi - offset] = self.blob[lo - self.at:hi - self.at]
        return bytes(out)


def test_reads_at_vram_size_minus_64k_and_parses_everything():
    vram = VRAM(24 << 30, build())
    disc = read_discovery(vram.read, 24 << 30)
    assert vram.reads == [((24 << 30) - (64 << 10), 4096)]  # one read of DISCOVERY_TMR_SIZE
    assert disc.ips["GC", 0].version == (11, 0, 0)
    assert disc.ips["GC", 0].bases == (0x1260, 0xA000, 0x1C000, 0x2402C00)
    assert disc.ips["NBIF", 0].bases == (0x0, 0x14, 0xD20, 0x10400)
    assert disc.ips["MP1", 0].version == (13, 0, 0)
    assert disc.version_of("SDMA1") == (6, 0, 0)
    assert {k for k in disc.ips} == {(D.HWID_NAMES[h], i) for h, i, _, _ in IPS}
    assert disc.gc.gc_num_se == 6 and disc.gc.gc_gl2c_per_gpu == 96 and disc.gc.header.version_minor == 2
    assert disc.num_dies == 1 and disc.harvested == [] and disc.skipped == []


def test_long_binary_is_read_in_two_pieces():
    many = IPS + [(D.UMC_HWID, i, (8, 10, 0), tuple(range(120))) for i in range(2, 10)]
    blob = build(many)
    assert len(blob) > 4096
    vram = VRAM(8 << 30, blob)
    disc = read_discovery(vram.read, 8 << 30)
    assert len(vram.reads) == 2 and vram.reads[1] == (vram.at + 4096, len(blob) - 4096)
    assert disc.ips["UMC", 9].bases == tuple(range(120))


def test_harvest_table_removes_listed_instances():
    disc = parse(build(harvest=[(D.VCN_HWID, 1), (D.DMU_HWID, 0), (D.UMC_HWID, 1)]))
    assert ("UVD", 1) not in disc.ips and ("UVD", 0) in disc.ips  # VCN shares UVD's hw id
    assert ("DMU", 0) not in disc.ips and ("UMC", 1) not in disc.ips and ("UMC", 0) in disc.ips
    assert disc.harvested == [("UVD", 1), ("DMU", 0), ("UMC", 1)]
    with pytest.raises(DiscoveryError, match="harvested"):
        disc.ip_block("UVD", 1, mmio=None)


def test_harvest_list_ends_at_first_zero_hw_id():
    disc = parse(build(harvest=[(0, 0), (D.VCN_HWID, 0)]))
    assert disc.harvested == [] and ("UVD", 0) in disc.ips


def test_ip_block_binds_the_right_table_and_bases():
    class MMIO:
        def __init__(self):
            self.writes = []

        def read32(self, addr):
            return 0

        def write32(self, addr, value):
            self.writes.append((addr, value))

    disc = parse(build())
    mmio = MMIO()
    gc = disc.ip_block("GC", 0, mmio)
    assert gc.table.block == "gc_11_0_0" and gc.bases == disc.ips["GC", 0].bases
    d = gc.table["GRBM_STATUS"]
    assert gc.GRBM_STATUS.addr == (disc.ips["GC", 0].bases[d.base_idx] + d.offset) * 4
    assert disc.ip_block("MP1", 0, mmio).table.block == "mp_13_0_0"
    assert disc.ip_block("NBIF", 0, mmio).table.block == "nbio_4_3_0"
    with pytest.raises(DiscoveryError, match="no register table family"):
        disc.ip_block("UMC", 0, mmio)
    with pytest.raises(DiscoveryError, match="SDMA1 registers are GC registers on gfx11"):
        disc.ip_block("SDMA1", 0, mmio)
    with pytest.raises(DiscoveryError, match="lists no GC instance 1"):
        disc.ip_block("GC", 1, mmio)


def test_register_table_falls_back_to_lower_revision():
    navi33 = [(D.GC_HWID, 0, (11, 0, 2), (0x1260,)), (D.MP1_HWID, 0, (13, 0, 7), (0x16000,)),
              (D.MMHUB_HWID, 0, (3, 0, 2), (0x1A000,)), (D.HDP_HWID, 0, (5, 9, 0), (0xF20,))]
    disc = parse(build(navi33))
    assert disc.register_table("GC").block == "gc_11_0_0"
    assert disc.register_table("MP1").block == "mp_13_0_0"
    assert disc.register_table("MMHUB").block == "mmhub_3_0_2"
    with pytest.raises(DiscoveryError, match="HDP 5.9.0: no generated register table"):
        disc.register_table("HDP")


def test_table_version_3_reads_byte7_as_sub_revision_and_variant():
    v2 = parse(build(byte7=0x21, table_version=2)).ips["GC", 0]
    v3 = parse(build(byte7=0x21, table_version=3)).ips["GC", 0]
    assert (v2.harvest, v2.sub_revision, v2.variant) == (1, 0, 0)
    assert (v3.harvest, v3.sub_revision, v3.variant) == (0, 1, 2)


def test_vcn_capability_bits_are_not_part_of_its_revision():
    disc = parse(build([(D.VCN_HWID, 0, (4, 0, 0x82), (0x7800,)), (D.GC_HWID, 0, (11, 0, 0x82), (1,))]))
    assert disc.version_of("UVD") == (4, 0, 2) and disc.version_of("GC") == (11, 0, 0x82)


def test_out_of_range_entries_are_skipped_like_upstream():
    disc = parse(build(IPS + [(D.GC_HWID, D.HWIP_MAX_INSTANCE, (11, 0, 0), (1, 2)),
                              (D.HW_ID_MAX, 0, (1, 0, 0), (3,))]))
    assert len(disc.skipped) == 2 and ("GC", 0) in disc.ips
    assert disc.ips["GC", 0].bases == IPS[0][3]  # the skipped entry's bases were stepped over


def test_two_dies():
    disc = parse(build(dies=[IPS[:3], [(D.GC_HWID, 1, (11, 0, 0), (0x9000,))]]))
    assert disc.num_dies == 2 and disc.ips["GC", 1].die == 1 and disc.ips["GC", 1].bases == (0x9000,)


def test_no_gc_and_no_harvest_table():
    disc = parse(build(gc=False, harvest=None))
    assert disc.gc is None and disc.harvested == [] and ("GC", 0) in disc.ips


# ---------------------------------------------------------------- damaged binaries

def test_missing_binary_names_the_offset_and_signature():
    vram = VRAM(1 << 30, b"")
    with pytest.raises(DiscoveryError, match=r"no IP discovery binary at VRAM offset 0x3fff0000: signature "
                                             r"0x00000000, expected 0x28211407"):
        read_discovery(vram.read, 1 << 30)


def test_binary_elsewhere_is_not_found():
    vram = VRAM(1 << 30, build(), at=(1 << 30) - (32 << 10))
    with pytest.raises(DiscoveryError, match="signature"):
        read_discovery(vram.read, 1 << 30)


def test_bad_binary_checksum():
    blob = build()
    blob[-1] ^= 0x40
    with pytest.raises(DiscoveryError, match=r"bad checksum: byte sum 0x[0-9a-f]+, header says"):
        parse(blob)


def test_checksum_covers_binary_size_field():
    blob = build()
    BH.pack_into(blob, 0, binary_size=len(blob) - 4)  # shorter, but checksum not recomputed
    with pytest.raises(DiscoveryError, match="bad checksum"):
        parse(blob)


@pytest.mark.parametrize("damage,match", [
    (lambda b, ip, gc, hv: b.__setitem__(ip, 0), r"IP table .*signature 0x[0-9a-f]+, expected "
                                                     r"0x53445049 \(DISCOVERY_TABLE_SIGNATURE\)"),
    (lambda b, ip, gc, hv: b.__setitem__(ip + IH.size + 10, b[ip + IH.size + 10] ^ 1),
     r"IP table .* bad checksum: byte sum 0x[0-9a-f]+ over \d+ bytes"),
    (lambda b, ip, gc, hv: b.__setitem__(gc, 0x48), r"GC table .*table_id 0x4348, expected 0x4347"),
    (lambda b, ip, gc, hv: b.__setitem__(gc + 20, 1), r"GC table .* bad checksum"),
    (lambda b, ip, gc, hv: b.__setitem__(hv, 0), r"harvest table .*HARVEST_TABLE_SIGNATURE"),
    (lambda b, ip, gc, hv: b.__setitem__(hv + 8, 7), r"harvest table .* bad checksum"),
])
def test_damaged_tables(damage, match):
    blob = build(harvest=[(D.VCN_HWID, 1)])
    t = BH.unpack_from(blob).table_list
    damage(blob, t[D.IP_DISCOVERY].offset, t[D.GC].offset, t[D.HARVEST_INFO].offset)
    fix_checksum(blob)  # only the table's own check can catch it
    with pytest.raises(DiscoveryError, match=match):
        parse(blob)


@pytest.mark.parametrize("cut", [8, 40, 200, -30])
def test_truncated(cut):
    blob = build()
    with pytest.raises(DiscoveryError, match="truncated"):
        parse(blob[:cut])


def test_table_pointing_past_the_end_is_reported():
    blob = build()
    t = [dict(x.as_dict()) for x in BH.unpack_from(blob).table_list]
    t[D.GC]["offset"] = len(blob) - 4
    BH.pack_into(blob, 0, table_list=t)
    with pytest.raises(DiscoveryError, match=r"GC table .* needs 12 bytes but the binary ends"):
        parse(fix_checksum(blob))


def test_die_id_mismatch():
    blob = build()
    off = IH.unpack_from(blob, BH.unpack_from(blob).table_list[D.IP_DISCOVERY].offset).die_info[0].die_offset
    DH.pack_into(blob, off, die_id=3)
    t = [dict(x.as_dict()) for x in BH.unpack_from(blob).table_list]
    ip = t[D.IP_DISCOVERY]
    ip["checksum"] = sum(blob[ip["offset"]:ip["offset"] + ip["size"]]) & 0xFFFF
    BH.pack_into(blob, 0, table_list=t)
    with pytest.raises(DiscoveryError, match="die header 0 says die id 3"):
        parse(fix_checksum(blob))


def test_unhandled_gc_version():
    blob = build()
    t = [dict(x.as_dict()) for x in BH.unpack_from(blob).table_list]
    gc = t[D.GC]
    structs.get(D, "gpu_info_header").pack_into(blob, gc["offset"], version_major=3)
    gc["checksum"] = sum(blob[gc["offset"]:gc["offset"] + GC.size]) & 0xFFFF
    BH.pack_into(blob, 0, table_list=t)
    with pytest.raises(DiscoveryError, match="unhandled GC info table version 3.2"):
        parse(fix_checksum(blob))


def test_vram_size_from_memsize_register():
    class Regs:
        def __init__(self, v):
            self.v = v

        def read32(self, addr):
            assert addr == 0xDE3 * 4
            return self.v

    assert discovery.vram_size(Regs(24576)) == 24 << 30
    with pytest.raises(DiscoveryError, match="does not answer"):
        discovery.vram_size(Regs(0xFFFFFFFF))


# ---------------------------------------------------------------- the simulator's binaries

def indirect_reader(mmio):
    """VRAM through MM_INDEX/MM_INDEX_HI/MM_DATA (dwords 0x0, 0x6, 0x1 of the register BAR, as
    amdgpu_discovery.c defines them), the way a small-BAR driver must reach the end of VRAM."""
    def read(offset, size):
        out = bytearray()
        for pos in range(offset, offset + size, 4):
            mmio.write32(0x0 * 4, (pos & 0x7FFFFFFF) | 0x80000000)
            mmio.write32(0x6 * 4, pos >> 31)
            out += mmio.read32(0x1 * 4).to_bytes(4, "little")
        return bytes(out)
    return read


@pytest.mark.parametrize("chip,small_bar", [("navi31", False), ("navi33", False), ("navi31", True)])
def test_simulated_gpu_binary(sim_bus, chip, small_bar):
    import pcie
    from gpusim import discovery as simdisc

    with pcie.open_function("sim", chip, fresh=True, small_bar=small_bar, bus=sim_bus) as fn:
        regs = fn.bar(5)
        size = discovery.vram_size(regs)
        assert small_bar == (fn.bar(0).size < size)
        disc = read_discovery(indirect_reader(regs) if small_bar else fn.bar(0).read, size)
        lay = simdisc.layout(chip)
        names = {"NBIO": "NBIF"}  # the simulator's name for NBIF_HWID's block
        assert set(disc.ips) == {(names.get(e.name, e.name), e.instance) for e in lay.ips}
        for e in lay.ips:
            ip = disc.ips[names.get(e.name, e.name), e.instance]
            assert (ip.hw_id, ip.version, ip.bases) == (e.hw_id, tuple(e.version), tuple(e.bases))
            if e.table and not e.name.startswith("SDMA"):
                assert disc.register_table(ip.name).block == e.table
        assert {k: disc.gc[k] for k in lay.gc_info} == lay.gc_info
        assert disc.version_of("GC") == {"navi31": (11, 0, 0), "navi33": (11, 0, 2)}[chip]
        # registers bound from discovery reach the simulator's registers
        nbio = disc.ip_block("NBIF", 0, regs)
        assert nbio.RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE.read() == size >> 20


# ---------------------------------------------------------------- the host-side cache (exact=True, cache=)

HARVEST_AT = 8  # harvest_table: header (signature, version), then 32 harvest_info entries of 4 bytes


def harvest_offset(blob) -> int:
    return BH.unpack_from(blob).table_list[D.HARVEST_INFO].offset


def cached_read(blob, cache, size=24 << 30):
    vram = VRAM(size, blob)
    return read_discovery(vram.read, size, exact=True, cache=cache), vram


# entries read: two, then four a read until one has hw_id 0 (the list's end), 32 at most
@pytest.mark.parametrize("harvest,entries", [((), 2), ([(D.VCN_HWID, 1)], 2),
                                             ([(D.UMC_HWID, 1), (D.VCN_HWID, 1), (D.DMU_HWID, 0)], 6),
                                             ([(D.UMC_HWID, i) for i in range(6)], 10),
                                             ([(D.UMC_HWID, i) for i in range(32)], 32)])
def test_cache_second_read_takes_the_binary_header_and_harvest_list_only(tmp_path, harvest, entries):
    blob = build(harvest=harvest)
    cache = discovery.DiscoveryCache(tmp_path)
    first, vram = cached_read(blob, cache)
    assert vram.reads[0] == (vram.at, BH.size)                       # the header, then the harvest list
    assert sum(n for _, n in vram.reads) == len(blob)                # a miss reads each byte once
    assert not first.from_cache and (cache.misses, cache.stored) == (1, 1)
    (stored,) = tmp_path.iterdir()
    assert stored.read_bytes() == blob
    second, vram = cached_read(blob, cache)
    h = harvest_offset(blob)
    assert vram.reads[0] == (vram.at, BH.size) and vram.reads[1][0] == vram.at + h
    # the harvest header and its entries up to the read that holds the list's end (hw_id 0), nothing else
    assert sum(n for _, n in vram.reads[1:]) == HARVEST_AT + 4 * entries
    assert second.from_cache and cache.hits == 1 and cache.stored == 1
    assert second == first and second.harvested == first.harvested


def test_cache_is_under_the_driver_cache_dir_keyed_by_sha256_of_what_was_read(tmp_path, monkeypatch):
    import hashlib
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    cache = discovery.DiscoveryCache()
    assert cache.directory == tmp_path / "discovery"
    blob = build(harvest=[(D.VCN_HWID, 1)])
    cached_read(blob, cache)
    h = harvest_offset(blob)
    key = hashlib.sha256(blob[:BH.size] + blob[h:h + HARVEST_AT + 8]).hexdigest()
    assert [p.name for p in (tmp_path / "discovery").iterdir()] == [f"{key}.bin"]


def test_cache_changed_header_misses_and_reads_everything(tmp_path):
    cache = discovery.DiscoveryCache(tmp_path)
    cached_read(build(), cache)
    other = build([(D.GC_HWID, 0, (11, 0, 2), (0x1260, 0xA000, 0x1C000, 0x2402C00))] + IPS[1:])
    assert other[:BH.size] != build()[:BH.size]
    disc, vram = cached_read(other, cache)
    assert sum(n for _, n in vram.reads) == len(other) and not disc.from_cache
    assert disc.version_of("GC") == (11, 0, 2) and cache.stored == 2 and len(list(tmp_path.iterdir())) == 2


def test_cache_changed_harvest_table_with_the_same_checksums_misses(tmp_path):
    # Two cards of one SKU, each with one UMC and one VCN instance harvested, different ones: every
    # byte sum in the header is the same, so the binary headers are equal byte for byte.
    a = build(harvest=[(D.UMC_HWID, 0), (D.VCN_HWID, 1)])
    b = build(harvest=[(D.UMC_HWID, 1), (D.VCN_HWID, 0)])
    assert a[:BH.size] == b[:BH.size] and a != b
    cache = discovery.DiscoveryCache(tmp_path)
    cached_read(a, cache)
    disc, vram = cached_read(b, cache)
    assert sum(n for _, n in vram.reads) == len(b) and not disc.from_cache
    assert disc.harvested == [("UMC", 1), ("UVD", 0)] and ("UMC", 0) in disc.ips
    assert (cache.misses, cache.stored) == (2, 2)
    again, _ = cached_read(a, cache)                                 # both are kept, each under its own key
    assert again.from_cache and again.harvested == [("UMC", 0), ("UVD", 1)]


def _flip_body(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _same_binary_sum(data: bytes) -> bytes:
    # one unit moved from the IP table into the GC table: the binary's byte sum holds, the tables' do not
    t = BH.unpack_from(data).table_list
    out = bytearray(data)
    ip = next(i for i in range(t[D.IP_DISCOVERY].offset + IH.size, len(out)) if out[i])
    gc = next(i for i in range(t[D.GC].offset + 8, len(out)) if out[i] < 255)
    out[ip], out[gc] = out[ip] - 1, out[gc] + 1
    assert BH.unpack_from(out) == BH.unpack_from(data)
    return bytes(out)


@pytest.mark.parametrize("damage", [lambda d: b"", lambda d: d[:100], lambda d: d[:-1], lambda d: d + b"\0",
                                    _flip_body, _same_binary_sum, lambda d: b"\0" * len(d)],
                         ids=["empty", "short", "one byte short", "one byte long", "flipped",
                              "same binary sum", "zeros"])
def test_cache_corrupt_copy_is_ignored_and_replaced(tmp_path, damage):
    blob = build(harvest=[(D.VCN_HWID, 1)])
    cache = discovery.DiscoveryCache(tmp_path)
    first, _ = cached_read(blob, cache)
    (path,) = tmp_path.iterdir()
    path.write_bytes(damage(blob))
    disc, vram = cached_read(blob, cache)
    assert sum(n for _, n in vram.reads) == len(blob) and not disc.from_cache and disc == first
    assert path.read_bytes() == blob and cache.stored == 2
    assert [p.name for p in tmp_path.iterdir()] == [path.name]       # no temporary file left behind
    assert cached_read(blob, cache)[0].from_cache


def test_cache_directory_that_cannot_be_made_or_written_means_no_cache(tmp_path):
    (tmp_path / "file").write_bytes(b"not a directory")
    for where in (tmp_path / "file", tmp_path / "file" / "discovery"):
        cache = discovery.DiscoveryCache(where)
        blob = build()
        for _ in range(2):
            disc, vram = cached_read(blob, cache)
            assert sum(n for _, n in vram.reads) == len(blob) and not disc.from_cache
            assert disc.version_of("GC") == (11, 0, 0)
        assert cache.stored == 0 and cache.hits == 0


def test_cache_keeps_errors_and_stores_nothing_bad(tmp_path):
    cache = discovery.DiscoveryCache(tmp_path)
    bad = bytearray(build())
    bad[-1] ^= 1
    with pytest.raises(DiscoveryError, match="bad checksum"):
        cached_read(bad, cache)
    with pytest.raises(DiscoveryError, match="no IP discovery binary"):
        cached_read(b"\0" * 64, cache)
    for cut in (30, 100):           # binary_size shorter than the header; the harvest table past the end
        blob = build(harvest=[(D.VCN_HWID, 1)])
        BH.pack_into(blob, 0, binary_size=cut)
        with pytest.raises(DiscoveryError, match="truncated|needs|checksum"):
            cached_read(blob, cache)
    assert list(tmp_path.iterdir()) == [] and cache.stored == 0
    with pytest.raises(ValueError, match="exact"):
        read_discovery(VRAM(24 << 30, build()).read, 24 << 30, cache=cache)


def test_cache_without_a_harvest_table(tmp_path):
    blob = build(harvest=None)
    cache = discovery.DiscoveryCache(tmp_path)
    cached_read(blob, cache)
    disc, vram = cached_read(blob, cache)
    assert vram.reads == [(vram.at, BH.size)] and disc.from_cache and disc.harvested == []


def test_amdevice_caches_only_where_reading_is_costly(sim_bus, monkeypatch, tmp_path):
    from amdrv.device import AMDevice
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    import pcie
    with AMDevice("am:sim", pcie.open_function("sim", "navi31", fresh=True, bus=sim_bus)) as d:
        assert d.vram.visible == d.vram.size and not d.disc.from_cache   # large BAR: through BAR0, as before
    assert not (tmp_path / "discovery").exists()
    costs = []
    for _ in range(2):
        fn = pcie.open_function("sim", "navi31", small_bar=True, bus=sim_bus, fresh=not costs)
        with AMDevice("am:sim", fn) as d:                           # small BAR: MM_INDEX/MM_DATA
            costs.append((d.disc.from_cache, fn.counters.mmio_reads))
            assert d.chip.name == "navi31" and d.disc.version_of("MP1") == (13, 0, 0)
    assert [c for c, _ in costs] == [False, True] and len(list((tmp_path / "discovery").iterdir())) == 1
    assert costs[1][1] < costs[0][1] - 150                          # ~174 binary dwords -> 15 + 3


# measured round trips (first open: the binary read, filling the cache; second: from the cache) per link
# +125 BOT / +12 UAS round trips since the VBIOS read (amdrv/vbios.py: 11 reads and 9 writes when no boot state
# records the firmware-reserved size, as on these fresh GPUs)
BRIDGE_OPEN = {"bot": (2_555, 405), "uas": (191, 34)}
# +~11 UAS / +~24 BOT round trips since the MEC start wait (gfx_v11_0_cp_compute_enable udelay(50), gpusim.gfx
# MEC_START_STEPS: the simulated clock moves one step per round trip)
# uas 177 -> 186: fini leaves GFXOFF allowed, so a warm boot now pays the GFXOFF exit (DisallowGfxOff is
# answered once GFX is on again, gpusim.smu), about 9 polls of the SMU's response over the link
# +83 BOT / +3 UAS since the boot state records the firmware-reserved size (BIF_BX0_DRIVER_SCRATCH_5: two reads
# at open instead of the VBIOS, one more write per state update)
WARM_BOOT = {"bot": (4_171, 2_021), "uas": (346, 189)}


@pytest.mark.parametrize("link", ["bot", "uas"])
def test_amdevice_through_the_bridge_reads_the_binary_once(sim_bus, link, monkeypatch, tmp_path):
    """Through the simulated USB bridge: the first open reads the binary (filling the cache), a second
    open of the same GPU reads its binary header and harvest list only."""
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    from amdrv.device import AMDevice
    from pcie.usb.transport import open_function
    monkeypatch.setenv("DRIVERLESS_USB_LINK", link)
    spent = []
    for fresh in (True, False):
        f = open_function(backend=usb_bridge.backend("navi31", fresh=fresh, bus=sim_bus), lock_dir=tmp_path)
        before = f.counters.snapshot()
        with AMDevice("am:usb", f) as d:
            spent.append((d.disc.from_cache, (f.counters - before).round_trips))
            assert d.chip.name == "navi31"
    print(f"AMDevice open through the bridge ({link}): {spent} (from_cache, round trips)")
    (miss, first), (hit, second) = spent
    assert (miss, hit) == (False, True)
    want_first, want_second = BRIDGE_OPEN[link]
    assert second <= want_second * 1.05 and first - second >= (want_first - want_second) * 0.9


@pytest.mark.parametrize("link", ["bot", "uas"])
def test_warm_boot_through_the_bridge_fills_then_uses_the_cache(sim_bus, link, debian_firmware, monkeypatch, tmp_path):
    """A GPU left by a clean AM run boots warm through the bridge twice. The cold boot over simulated
    PCIe (small BAR: the binary read through MM_INDEX too) would fill the cache; it is emptied, so the
    first warm boot reads the binary (over BOT 4 062 round trips, 4 048 with no cache: the binary comes in
    more pieces) and the second reads only its binary header and harvest list."""
    usb_bridge = pytest.importorskip("gpusim.usb_bridge")
    import pcie
    from amdrv.am import AMGPU
    from pcie.usb.transport import open_function
    monkeypatch.setenv("DRIVERLESS_USB_LINK", link)
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path / "cache"))
    AMGPU.open(pcie.open_function("sim", "navi31", fresh=True, small_bar=True, bus=sim_bus)).fini()
    (copy,) = (tmp_path / "cache" / "discovery").iterdir()
    copy.unlink()
    spent = []
    for _ in range(2):
        f = open_function(backend=usb_bridge.backend("navi31", bus=sim_bus), lock_dir=tmp_path)
        before = f.counters.snapshot()
        gpu = AMGPU.open(f)
        try:
            assert gpu.boot_report.kind == "warm"
            spent.append((gpu.dev.disc.from_cache, (f.counters - before).round_trips))
        finally:
            gpu.fini()
    print(f"warm boots through the bridge ({link}): {spent} (from_cache, round trips)")
    (miss, first), (hit, second) = spent
    assert (miss, hit) == (False, True) and copy.is_file()
    want_first, want_second = WARM_BOOT[link]
    assert second <= want_second * 1.05 and first - second >= (want_first - want_second) * 0.9
