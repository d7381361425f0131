"""IP discovery: which IP blocks a GPU has, their versions and register bases, read from VRAM.

The binary sits at VRAM size - 64 KiB (amdgpu_discovery.h DISCOVERY_TMR_OFFSET), VRAM size being
RCC_CONFIG_MEMSIZE (MiB) read before any base is known. Upstream (amdgpu_discovery.c, 6.1) reads
DISCOVERY_TMR_SIZE (4 KiB) from there and checks, in order: the binary signature, the byte-sum checksum
of the binary after its checksum field, then each table the header lists (IP discovery, GC, harvest,
VCN; MALL is listed but its check is disabled upstream) by its signature or id and byte-sum checksum.

    disc = read_discovery(read_vram, vram_size(bar5))
    disc.ips["GC", 0].version            # (11, 0, 0)
    gc = disc.ip_block("GC", 0, bar5)    # amdrv.regs.IPBlock bound to GC instance 0's bases

`read_vram(offset, size) -> bytes` is whatever reaches VRAM: the BAR0 view on a large-BAR device, or
MM_INDEX/MM_DATA indirect access on a small-BAR one.

Where each VRAM dword is costly (MM_INDEX, ~14 round trips a dword over USB), `read_discovery(...,
exact=True, cache=DiscoveryCache())` reads the binary header and the harvest table only, and takes the
rest from a host-side copy kept under a sha256 of those bytes (`<cache root>/discovery/<sha256>.bin`);
the copy is verified as a binary read from VRAM would be, and read from VRAM again if anything differs.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from amdrv import regs, structs
from amdrv.autogen import discovery as D

# amdgpu_discovery.h (not generated: the header holds nothing else the driver needs)
DISCOVERY_TMR_OFFSET = 64 << 10
DISCOVERY_TMR_SIZE = 4 << 10
# amdgpu_discovery.c: read through the fixed register aperture, before any IP base is known
RCC_CONFIG_MEMSIZE = 0xDE3

_BINARY_HEADER = structs.get(D, "binary_header")
_IP_HEADER = structs.get(D, "ip_discovery_header")
_DIE_HEADER = structs.get(D, "die_header")
_IP = structs.get(D, "ip")
_IP_V3 = structs.get(D, "ip_v3")
_GPU_INFO_HEADER = structs.get(D, "gpu_info_header")
_HARVEST_HEADER = structs.get(D, "harvest_info_header")
_HARVEST = structs.get(D, "harvest_table")
_HARVEST_ENTRY = structs.get(D, "harvest_info")
_VCN_HEADER = structs.get(D, "vcn_info_header")
# the byte sum covers the binary after binary_checksum, binary_size included
_SUMMED_FROM = _BINARY_HEADER.offset("binary_checksum") + 2
_IP_ENTRY_SIZE = _IP.size  # struct_size(ip, base_address, n) = 8 + 4 * n
_GC_INFO = {(1, 0): "gc_info_v1_0", (1, 1): "gc_info_v1_1", (1, 2): "gc_info_v1_2", (2, 0): "gc_info_v2_0"}
# the generated register table family of each block
_REG_FAMILY = {"GC": "gc", "MMHUB": "mmhub", "MP0": "mp", "MP1": "mp", "NBIF": "nbio", "OSSSYS": "osssys",
               "HDP": "hdp", "SMUIO": "smuio"}
# Blocks whose one header serves a whole IP generation: smu_v13_0.c includes thm_13_0_2 for every SMU 13
# part (THM's discovery version follows MP1: 13.0.0 on Navi31, 13.0.7 on Navi33).
_ONE_TABLE = {("THM", 13, 0): "thm_13_0_2"}
# gfx11 SDMA registers are in gc's header and sdma_v6_0.c addresses them with GC's bases
_IN_GC = {"SDMA0", "SDMA1", "SDMA2", "SDMA3"}


class DiscoveryError(Exception):
    """The IP discovery binary is missing, damaged, or describes something the driver cannot use."""


@dataclass(frozen=True)
class IPInfo:
    """One IP instance: version (major, minor, revision), register segment bases (dwords), and where
    it came from. `harvest` is the per-IP harvest nibble of tables before version 3; from version 3
    that byte holds sub_revision and variant (struct ip_v3)."""
    name: str
    hw_id: int
    instance: int
    version: tuple[int, int, int]
    bases: tuple[int, ...]
    die: int = 0
    harvest: int = 0
    sub_revision: int = 0
    variant: int = 0


@dataclass
class Discovery:
    """What the binary says: `ips[(name, instance)]` after harvesting, `gc` (the GC info table as its
    versioned struct, or None), `harvested` (the (name, instance) pairs the harvest table removed),
    `skipped` (entries upstream also ignores: instance or hw id out of range), and header versions."""
    version: tuple[int, int]
    table_version: int
    ips: dict[tuple[str, int], IPInfo]
    gc: structs.StructValue | None
    harvested: list[tuple[str, int]]
    skipped: list[str]
    num_dies: int
    from_cache: bool = field(default=False, compare=False)  # the body came from a DiscoveryCache copy
    key: str = field(default="", compare=False)    # sha256 of the binary header and harvest list (DiscoveryCache)
    recalled: bool = field(default=False, compare=False)    # found by the key a previous run recorded (recall)

    @property
    def key64(self) -> int:
        """The key's first 64 bits, what a run records for the next (amdrv.ip.nbio.KEY_REGS); 0 without a key."""
        return int(self.key[:16], 16) if self.key else 0

    def version_of(self, name: str, instance: int = 0) -> tuple[int, int, int]:
        return self._get(name, instance).version

    def _get(self, name: str, instance: int) -> IPInfo:
        ip = self.ips.get((name, instance))
        if ip is None:
            if (name, instance) in self.harvested:
                raise DiscoveryError(f"IP discovery: {name} instance {instance} is harvested (fused off) "
                                     "on this GPU")
            have = ", ".join(f"{n}#{i}" for n, i in sorted(self.ips))
            raise DiscoveryError(f"IP discovery lists no {name} instance {instance}; it lists: {have}")
        return ip

    def register_table(self, name: str, instance: int = 0) -> regs.RegisterTable:
        """The generated register table for a block's version: the exact one, else the nearest lower
        revision of the same major.minor (upstream uses gc_11_0_0 headers for gc 11.0.2, mp_13_0_0 for
        13.0.7)."""
        ip = self._get(name, instance)
        if name in _IN_GC:
            raise DiscoveryError(f"{name} registers are GC registers on gfx11 (sdma_v6_0.c reaches them "
                                 "through GC's bases): use the GC block")
        major, minor, rev = ip.version
        if (name, major, minor) in _ONE_TABLE:
            return regs.load(_ONE_TABLE[name, major, minor])
        family = _REG_FAMILY.get(name)
        if family is None:
            raise DiscoveryError(f"no register table family is known for IP block {name}")
        pattern = re.compile(rf"{family}_{major}_{minor}_(\d+)$")
        revs = sorted(int(m.group(1)) for b in regs.blocks() if (m := pattern.match(b)))
        fits = [r for r in revs if r <= rev]
        if not fits:
            raise DiscoveryError(f"{name} {major}.{minor}.{rev}: no generated register table fits "
                                 f"(have {', '.join(b for b in regs.blocks() if b.startswith(family + '_'))})")
        return regs.load(f"{family}_{major}_{minor}_{fits[-1]}")

    def ip_block(self, name: str, instance: int, mmio: regs.MMIO,
                 table: regs.RegisterTable | None = None) -> regs.IPBlock:
        """Registers of one IP instance bound to its discovered bases and an MMIO view."""
        ip = self._get(name, instance)
        label = name if instance == 0 else f"{name}.{instance}"
        return regs.IPBlock(table or self.register_table(name, instance), ip.bases, mmio, name=label)


def vram_size(mmio: regs.MMIO) -> int:
    """VRAM size in bytes from RCC_CONFIG_MEMSIZE (MiB), as amdgpu_discovery.c reads it."""
    mib = mmio.read32(RCC_CONFIG_MEMSIZE * 4)
    if mib in (0, 0xFFFFFFFF):
        raise DiscoveryError(f"RCC_CONFIG_MEMSIZE reads {mib:#x}: the GPU does not answer register reads "
                             "(powered down, in reset, or the register BAR is not the MMIO BAR)")
    return mib << 20


def read_discovery(read_vram: Callable[[int, int], bytes], vram_bytes: int, *, exact: bool = False,
                   cache: DiscoveryCache | None = None) -> Discovery:
    """Reads and parses the binary at vram_bytes - DISCOVERY_TMR_OFFSET: one read of
    DISCOVERY_TMR_SIZE as upstream, and a second one only when binary_size says it is longer.
    exact=True (where each VRAM dword read is costly: MM_INDEX, USB): the binary header first, then
    binary_size bytes only.
    cache (with exact=True only): after the binary header, the harvest table (where the header's table
    list puts it) is read up to the entry that ends its list (hw_id 0), in a few reads, and a copy
    stored under the sha256 of those bytes is used if it has that same header and harvest list and
    passes every check `parse` makes; else the rest is read from VRAM and, once it parses, stored. The harvest table is
    compared itself: the header's checksums are 16-bit byte sums, equal for two cards of one SKU that
    differ only in which instance is harvested. What the header's checksums cannot tell apart elsewhere
    in the binary (the unused harvest entries after the list's end included) is taken from the copy: the
    same header and harvest list are taken to be the same card model."""
    if cache is not None and not exact:
        raise ValueError("read_discovery: cache= needs exact=True (the non-exact read takes 4 KiB at once)")
    pos = vram_bytes - DISCOVERY_TMR_OFFSET
    if pos < 0:
        raise DiscoveryError(f"VRAM size {vram_bytes:#x} is smaller than the discovery offset")
    where = f"VRAM offset {pos:#x}"
    first = (_BINARY_HEADER.size + 3) & ~3 if exact else DISCOVERY_TMR_SIZE
    data = bytes(read_vram(pos, first))
    _check_signature(data, where)
    size = _BINARY_HEADER.unpack_from(data).binary_size
    lo = _harvest_at(data, size) if cache is not None else None
    if lo is None:
        if size > len(data):
            data += bytes(read_vram(pos + len(data), size - len(data)))
        disc = parse(data, where=where)
        disc.key = _key_of(data)
        return disc
    head, table = data, _read_harvest_list(read_vram, pos + lo) if lo < size else b""
    hi = lo + len(table)
    key = hashlib.sha256(head + table).hexdigest()
    disc = cache.load(key, head, lo, table)
    if disc is not None:
        disc.key = key
        return disc
    data = head + (bytes(read_vram(pos + len(head), lo - len(head))) if lo > len(head) else b"") + table
    if size > hi:
        data += bytes(read_vram(pos + hi, size - hi))
    disc = parse(data, where=where)
    disc.key = key
    cache.store(key, data[:size])
    return disc


def _key_of(data: bytes) -> str:
    """The cache key of a binary read whole: what read_discovery(exact=True, cache=...) reads first and hashes."""
    head = data[:(_BINARY_HEADER.size + 3) & ~3]
    size = _BINARY_HEADER.unpack_from(data).binary_size
    lo = _harvest_at(head, size)
    if lo is None:
        return ""
    table = _read_harvest_list(lambda at, n: data[at:at + n], lo) if lo < size else b""
    return hashlib.sha256(head + table).hexdigest()


def _harvest_at(head: bytes, size: int) -> int | None:
    """Where the harvest table starts per the binary header, after the header; `size` when it lists
    none; None when the header is not sane enough to go by (then the binary is read whole and `parse`
    says what is wrong)."""
    if size < len(head):
        return None
    info = _BINARY_HEADER.unpack_from(head).table_list[D.HARVEST_INFO]
    if not info.offset:
        return size
    if info.offset < len(head) or info.offset + _HARVEST.size > size:
        return None
    return info.offset


def _read_harvest_list(read_vram: Callable[[int, int], bytes], at: int) -> bytes:
    """The harvest table's header and its entries up to the read holding the first hw_id 0 (all 32
    entries if none is 0): all that `_apply_harvest` reads, and what the reads brought besides. Two
    entries in the first read, four in each later one (each read costs an MM_INDEX_HI write more)."""
    start, entry = _HARVEST.offset("list"), _HARVEST_ENTRY.size
    most = (_HARVEST.size - start) // entry
    out = bytes(read_vram(at, start + 2 * entry))
    seen = 0
    while True:
        n = (len(out) - start) // entry
        if any(not _HARVEST_ENTRY.unpack_from(out, start + i * entry).hw_id for i in range(seen, n)):
            return out
        if n >= most:
            return out
        seen = n
        out += bytes(read_vram(at + len(out), min(4, most - n) * entry))


class DiscoveryCache:
    """Host-side copies of discovery binaries: `<directory>/<sha256>.bin`, the key a sha256 of the binary
    header and harvest table read from VRAM. directory defaults to `discovery/` under the driver's cache
    root (DRIVERLESS_CACHE, else $XDG_CACHE_HOME/driverless: where amdrv.firmware.store keeps firmware).
    Nothing read back is trusted: a copy must match what was read and pass `parse`'s checks, or it is
    ignored (and replaced once the binary is read from VRAM). Writes are atomic (a temporary file, then
    os.replace); a directory that cannot be made or written means no cache, not an error.
    `hits`, `misses` count loads; `stored` counts copies written."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.hits = self.misses = self.stored = 0

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.bin"

    def load(self, key: str, head: bytes, harvest_at: int, harvest: bytes) -> Discovery | None:
        """The cached binary's Discovery if its copy has exactly this header and harvest table and
        parses; else None."""
        p = self.path(key)
        try:
            data = p.read_bytes()
        except OSError:
            data = None
        disc = None
        if (data is not None and len(data) == _BINARY_HEADER.unpack_from(head).binary_size
                and data[:len(head)] == head
                and data[harvest_at:harvest_at + len(harvest)] == harvest):
            try:
                disc = parse(data, where=f"{p} (cached copy)")
            except DiscoveryError:
                disc = None
        if disc is None:
            self.misses += 1
            return None
        self.hits += 1
        disc.from_cache = True
        return disc

    def recall(self, recorded: Callable[[Discovery], object], limit: int = 8) -> Discovery | None:
        """The cached binary a previous run on this board recorded the key of, with no VRAM read: for the
        `limit` newest copies that parse, `recorded(disc)` gives where (in registers, hashable) the record is,
        or None; only when every copy puts it at the same place is it read (reading a register another chip
        has elsewhere is not risked): `place.read()` returns the 64-bit key recorded there, or None. A key that
        names no copy is no hit."""
        try:
            files = sorted(self.directory.glob("*.bin"), key=lambda f: f.stat().st_mtime, reverse=True)[:limit]
        except OSError:
            return None
        found: dict[int, tuple[str, Discovery]] = {}
        addresses = set()
        for f in files:
            try:
                data = f.read_bytes()
                disc = parse(data, where=f"{f} (cached copy)")
            except (OSError, DiscoveryError):
                continue
            if len(data) != _BINARY_HEADER.unpack_from(data).binary_size or _key_of(data) != f.stem:
                continue
            disc.key = f.stem
            addresses.add(recorded(disc))
            found[disc.key64] = (f.stem, disc)
        if len(addresses) != 1 or None in addresses:
            return None
        key = addresses.pop().read()
        if key is None or key not in found:
            return None
        self.hits += 1
        disc = found[key][1]
        disc.from_cache = disc.recalled = True
        return disc

    def store(self, key: str, data: bytes) -> None:
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path(key))
            tmp = None
            self.stored += 1
        except OSError:
            pass  # read-only, full or missing: the binary was read from VRAM and is used as read
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def default_cache_dir() -> Path:
    """`discovery/` under the driver's cache root, the root amdrv.firmware.store.cache_dir() resolves
    (DRIVERLESS_CACHE, else $XDG_CACHE_HOME/driverless, else ~/.cache/driverless); that function names
    its firmware folder below it, <root>/firmware/<tag>/amdgpu."""
    from amdrv.firmware import store
    return store.cache_dir().parents[2] / "discovery"


def _check_signature(data: bytes, where: str) -> None:
    if len(data) < _BINARY_HEADER.size:
        raise DiscoveryError(f"IP discovery binary at {where} is truncated: {len(data)} bytes, the binary "
                             f"header alone is {_BINARY_HEADER.size}")
    sig = _BINARY_HEADER.unpack_from(data).binary_signature
    if sig != D.BINARY_SIGNATURE:
        raise DiscoveryError(f"no IP discovery binary at {where}: signature {sig:#010x}, expected "
                             f"{D.BINARY_SIGNATURE:#010x}; the GPU may not have finished its boot (try a "
                             "reset), VRAM reads may go to the wrong place, or it is not a supported GPU")


def _byte_sum(data: bytes) -> int:
    return sum(data) & 0xFFFF


def parse(data: bytes, where: str = "buffer") -> Discovery:
    """Verifies and parses a discovery binary (the bytes from its binary header on)."""
    data = bytes(data)
    _check_signature(data, where)
    bhdr = _BINARY_HEADER.unpack_from(data)
    if bhdr.binary_size > len(data) or bhdr.binary_size < _BINARY_HEADER.size:
        raise DiscoveryError(f"IP discovery binary at {where} is truncated or damaged: binary_size is "
                             f"{bhdr.binary_size} bytes, {len(data)} available")
    data = data[:bhdr.binary_size]
    got = _byte_sum(data[_SUMMED_FROM:])
    if got != bhdr.binary_checksum:
        raise DiscoveryError(f"IP discovery binary at {where} has a bad checksum: byte sum {got:#06x}, header "
                             f"says {bhdr.binary_checksum:#06x} (damaged binary or unreliable VRAM reads)")
    tables = bhdr.table_list

    def table(index: int, what: str, ident_name: str, ident_value: int, ident_field: str,
              size_of: Callable[[structs.StructValue], int], header: structs.Struct):
        info = tables[index]
        if not info.offset:
            return None
        _need(data, info.offset, header.size, what, where)
        hdr = header.unpack_from(data, info.offset)
        if hdr[ident_field] != ident_value:
            raise DiscoveryError(f"IP discovery {what} at {where}+{info.offset:#x}: {ident_field} "
                                 f"{hdr[ident_field]:#x}, expected {ident_value:#x} ({ident_name})")
        size = size_of(hdr)
        _need(data, info.offset, size, what, where)
        got = _byte_sum(data[info.offset:info.offset + size])
        if got != info.checksum:
            raise DiscoveryError(f"IP discovery {what} at {where}+{info.offset:#x} has a bad checksum: byte "
                                 f"sum {got:#06x} over {size} bytes, table list says {info.checksum:#06x}")
        return hdr

    ihdr = table(D.IP_DISCOVERY, "IP table", "DISCOVERY_TABLE_SIGNATURE", D.DISCOVERY_TABLE_SIGNATURE,
                 "signature", lambda h: h.size, _IP_HEADER)
    if ihdr is None:
        raise DiscoveryError(f"IP discovery binary at {where} has no IP discovery table")
    ghdr = table(D.GC, "GC table", "GC_TABLE_ID", D.GC_TABLE_ID, "table_id", lambda h: h.size,
                 _GPU_INFO_HEADER)
    hhdr = table(D.HARVEST_INFO, "harvest table", "HARVEST_TABLE_SIGNATURE", D.HARVEST_TABLE_SIGNATURE,
                 "signature", lambda h: _HARVEST.size, _HARVEST_HEADER)
    table(D.VCN_INFO, "VCN table", "VCN_INFO_TABLE_ID", D.VCN_INFO_TABLE_ID, "table_id",
          lambda h: h.size_bytes, _VCN_HEADER)

    ips, skipped = _parse_ips(data, ihdr, where)
    gc = None
    if ghdr is not None:
        # as amdgpu_discovery_get_gfx_info: v1.x reads the v1_2 fields from minor 2 on, v2.x is v2_0
        name = _GC_INFO.get((ghdr.version_major, min(ghdr.version_minor, 2) if ghdr.version_major == 1
                             else 0))
        if name is None:
            raise DiscoveryError(f"IP discovery at {where}: unhandled GC info table version "
                                 f"{ghdr.version_major}.{ghdr.version_minor}")
        gc_struct = structs.get(D, name)
        off = tables[D.GC].offset
        _need(data, off, gc_struct.size, f"GC table {name}", where)
        gc = gc_struct.unpack_from(data, off)
    harvested = []
    if hhdr is not None:
        harvested = _apply_harvest(ips, _HARVEST.unpack_from(data, tables[D.HARVEST_INFO].offset))
    return Discovery(version=(bhdr.version_major, bhdr.version_minor), table_version=ihdr.version, ips=ips,
                     gc=gc, harvested=harvested, skipped=skipped, num_dies=ihdr.num_dies)


def _need(data: bytes, offset: int, size: int, what: str, where: str) -> None:
    if offset + size > len(data):
        raise DiscoveryError(f"IP discovery {what} at {where}+{offset:#x} needs {size} bytes but the binary "
                             f"ends at {len(data):#x} (truncated or damaged binary)")


def _parse_ips(data: bytes, ihdr: structs.StructValue, where: str) -> tuple[dict, list[str]]:
    # 6.1 walks every entry as struct ip; struct ip_v3 has the same size and only names byte 7
    # differently (sub_revision/variant instead of harvest), so that byte is read by table version.
    entry = _IP_V3 if ihdr.version >= 3 else _IP
    ips: dict[tuple[str, int], IPInfo] = {}
    skipped = []
    if ihdr.num_dies > len(ihdr.die_info):
        raise DiscoveryError(f"IP discovery at {where}: {ihdr.num_dies} dies, the table has room for "
                             f"{len(ihdr.die_info)}")
    for die in range(ihdr.num_dies):
        off = ihdr.die_info[die].die_offset
        _need(data, off, _DIE_HEADER.size, f"die {die} header", where)
        dhdr = _DIE_HEADER.unpack_from(data, off)
        if dhdr.die_id != die:
            raise DiscoveryError(f"IP discovery at {where}: die header {die} says die id {dhdr.die_id}")
        off += _DIE_HEADER.size
        for _ in range(dhdr.num_ips):
            _need(data, off, _IP_ENTRY_SIZE, f"die {die} IP entry", where)
            e = entry.unpack_from(data, off)
            nbases = e.num_base_address
            _need(data, off, _IP_ENTRY_SIZE + 4 * nbases, f"die {die} IP entry base addresses", where)
            bases = _IP.unpack_flex(data, nbases, off)
            instance = e.instance_number if entry is _IP_V3 else e.number_instance
            name = D.HWID_NAMES.get(e.hw_id, f"HWID{e.hw_id}")
            off += _IP_ENTRY_SIZE + 4 * nbases
            # amdgpu_discovery_validate_ip: upstream logs these and walks on
            if instance >= D.HWIP_MAX_INSTANCE or e.hw_id >= D.HW_ID_MAX:
                skipped.append(f"die {die}: hw_id {e.hw_id} instance {instance} is out of range")
                continue
            extra = (dict(sub_revision=e.sub_revision, variant=e.variant) if entry is _IP_V3
                     else dict(harvest=e.harvest))
            # VCN's revision bits 7:6 say which of encode/decode is disabled; upstream masks them off
            revision = e.revision & 0x3F if e.hw_id == D.VCN_HWID else e.revision
            # a later entry for the same block and instance replaces the earlier one, as in reg_offset[]
            ips[name, instance] = IPInfo(name, e.hw_id, instance, (e.major, e.minor, revision),
                                         tuple(bases), die, **extra)
    return ips, skipped


def _apply_harvest(ips: dict, harvest: structs.StructValue) -> list[tuple[str, int]]:
    """Removes what the harvest table lists, as amdgpu_discovery_read_from_harvest_table reads it: the
    list ends at the first hw_id 0; a DMU entry harvests the display block as a whole."""
    harvested = []
    for item in harvest.list:
        if item.hw_id == 0:
            break
        name = D.HWID_NAMES.get(item.hw_id, f"HWID{item.hw_id}")
        gone = [k for k in ips if k[0] == name] if item.hw_id == D.DMU_HWID else [(name, item.number_instance)]
        for key in gone:
            if ips.pop(key, None) is not None:
                harvested.append(key)
    return harvested
