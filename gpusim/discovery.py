"""The IP discovery table: which IP blocks a chip has, their versions and register bases, and the binary
the firmware leaves at the end of VRAM for the driver to read.

The same `Layout` resolves the simulator's own register addresses (gpusim.device.SimGPU.reg_addr), so the
driver and the simulator can only meet on a register if the driver parsed this binary correctly.

Facts and their sources:
- Binary layout (discovery.h via amdrv.autogen.discovery): binary_header at 0 with a 16-bit byte-sum
  checksum over [offsetof(binary_checksum)+2, binary_size); table_list[IP_DISCOVERY] -> ip_discovery_header
  whose checksum covers `size` bytes; die_header then `struct ip` entries of 8 + 4*num_base_address bytes;
  table_list[GC] -> gc_info (checksum over header.size); table_list[HARVEST_INFO] -> harvest_table
  (checksum over sizeof(harvest_table)). amdgpu_discovery.c reads DISCOVERY_TMR_SIZE (4 KiB) from
  vram_size - DISCOVERY_TMR_OFFSET (64 KiB), vram_size from mmRCC_CONFIG_MEMSIZE (MiB).
- IP versions: amdrv.chips (what the chips' discovery tables report; upstream firmware names follow them),
  plus SMUIO 13.0.6 (amdgpu_discovery.c's SOC21 smuio case), THM following MP1 and ATHUB following MMHUB.
  Display, multimedia, DF and UMC blocks are not listed (nothing in the simulator models them).
- Register bases: the SOC21 family keeps the Navi2x aperture map of include/sienna_cichlid_ip_offset.h
  (GC 0x1260/0xA000/0x1C000/0x2402C00 is also umr's gfx11 table). Cross-checks: amdgpu_discovery.c's fixed
  mmRCC_CONFIG_MEMSIZE 0xde3 == NBIO base[2] 0xD20 + regRCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE 0xc3, and
  mmMM_INDEX 0 == NBIO base[0] + regBIF_BX_PF0_MM_INDEX 0. nbio_4_3_0 registers use base index 5, which
  Navi2x's NBIO lacks: 0x04040000, the sixth NBIF base public ip_discovery dumps of RDNA3/RDNA4 boards show.
- GC info: shader-engine/SA/WGP counts of the products (Navi31: 6 SE x 2 SA x 4 WGP = 96 CU; Navi33:
  2 x 2 x 4 = 32 CU); the cache and depth fields are representative values, not from a dump.
- Harvest: none (a full Navi31/Navi33) unless a board is built with `harvest`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from amdrv import chips, structs
from amdrv.autogen import discovery as D

TMR_OFFSET = 64 << 10   # DISCOVERY_TMR_OFFSET: the binary sits at vram_size - 64 KiB
TMR_SIZE = 4 << 10      # DISCOVERY_TMR_SIZE: what amdgpu reads

_GC = (0x00001260, 0x0000A000, 0x0001C000, 0x02402C00)
_MP = (0x00016000, 0x00DC0000, 0x00E00000, 0x00E40000, 0x0243FC00)
_NBIO = (0x00000000, 0x00000014, 0x00000D20, 0x00010400, 0x0241B000, 0x04040000)


@dataclass(frozen=True)
class IPEntry:
    name: str            # the simulator's name for the instance's block: "GC", "MP1", "NBIO", ...
    hw_id: int
    instance: int
    version: tuple
    bases: tuple
    table: str | None    # generated register table (amdrv.autogen.regs_<table>), None if not modeled
    harvest: int = 0


@dataclass(frozen=True)
class Layout:
    chip: str
    ips: tuple
    gc_info: dict = field(hash=False)
    harvest: tuple = ()  # (hw_id, instance) of harvested blocks

    def entry(self, name: str, inst: int = 0) -> IPEntry:
        for e in self.ips:
            if e.name == name and e.instance == inst:
                return e
        raise LookupError(f"{self.chip} has no IP {name} instance {inst}; it has "
                          f"{', '.join(sorted({e.name for e in self.ips}))}")

    def bases(self, name: str, inst: int = 0) -> tuple:
        return self.entry(name, inst).bases

    def register_table(self, name: str) -> str:
        t = self.entry(name).table
        if t is None:
            raise LookupError(f"{self.chip} {name}: no register table is modeled for this block")
        return t


def layout(chip: str, harvest: tuple = ()) -> Layout:
    c = chips.by_name(chip)
    v = c.ip
    navi31 = chip == "navi31"
    sdma_ver = v["sdma"]
    ips = [
        IPEntry("GC", D.GC_HWID, 0, v["gc"], _GC, "gc_11_0_0"),
        # SDMA registers live in the GC aperture on SOC21 (gc_11_0_0 holds regSDMA0_*/regSDMA1_*).
        IPEntry("SDMA0", D.SDMA0_HWID, 0, sdma_ver, _GC, "gc_11_0_0"),
        IPEntry("SDMA1", D.SDMA1_HWID, 0, sdma_ver, _GC, "gc_11_0_0"),
        IPEntry("MMHUB", D.MMHUB_HWID, 0, v["mmhub"], (0x0001A000, 0x02408800), f"mmhub_{c.ip_tag('mmhub')}"),
        IPEntry("ATHUB", D.ATHUB_HWID, 0, v["mmhub"], (0x00000C00, 0x02408C00), None),
        IPEntry("NBIO", D.NBIF_HWID, 0, v["nbio"], _NBIO, "nbio_4_3_0"),
        IPEntry("MP0", D.MP0_HWID, 0, v["mp0"], _MP, "mp_13_0_0"),
        IPEntry("MP1", D.MP1_HWID, 0, v["mp1"], _MP, "mp_13_0_0"),
        IPEntry("HDP", D.HDP_HWID, 0, v["hdp"], (0x00000F20, 0x0240A400), "hdp_6_0_0"),
        IPEntry("OSSSYS", D.OSSSYS_HWID, 0, v["osssys"], (0x000010A0, 0x0240A000), "osssys_6_0_0"),
        IPEntry("SMUIO", D.SMUIO_HWID, 0, (13, 0, 6), (0x00016800, 0x00016A00, 0x00440000, 0x02401000),
                "smuio_13_0_6"),   # smuio_v13_0_6.c: ROM_INDEX/ROM_DATA (gpusim.vbios)
        IPEntry("THM", D.THM_HWID, 0, v["mp1"], (0x00016600, 0x02400C00), "thm_13_0_2"),  # smu_v13_0.c includes it
    ]
    wgp_per_sa, se = (4, 6) if navi31 else (4, 2)
    gc_info = dict(
        gc_num_se=se, gc_num_wgp0_per_sa=wgp_per_sa, gc_num_wgp1_per_sa=0, gc_num_rb_per_se=4,
        gc_num_gl2c=16 if navi31 else 8, gc_num_gprs=1536, gc_num_max_gs_thds=32, gc_gs_table_depth=32,
        gc_gsprim_buff_depth=1792, gc_parameter_cache_depth=1024, gc_double_offchip_lds_buffer=1,
        gc_wave_size=32, gc_max_waves_per_simd=16, gc_max_scratch_slots_per_cu=32, gc_lds_size=64,
        gc_num_sc_per_se=2, gc_num_sa_per_se=2, gc_num_packer_per_sc=4, gc_num_gl2a=4 if navi31 else 2,
        gc_num_tcp_per_sa=2 * wgp_per_sa, gc_num_sdp_interface=16 if navi31 else 8,
        gc_num_tcps=se * 2 * 2 * wgp_per_sa, gc_num_tcp_per_wpg=2, gc_tcp_l1_size=16,
        gc_num_sqc_per_wgp=1, gc_l1_instruction_cache_size_per_sqc=32, gc_l1_data_cache_size_per_sqc=16,
        gc_gl1c_per_sa=1, gc_gl1c_size_per_instance=256, gc_gl2c_per_gpu=6144 if navi31 else 2048,
    )
    if len(harvest) > 32:
        raise ValueError(f"{chip}: the harvest table holds 32 entries, not {len(harvest)}")
    return Layout(chip, tuple(ips), gc_info, tuple(harvest))


def checksum(data) -> int:
    """amdgpu_discovery_calculate_checksum: the byte sum, truncated to 16 bits."""
    return sum(data) & 0xFFFF


def _align(n: int, a: int = 16) -> int:
    return (n + a - 1) // a * a


def build(lay: Layout) -> bytes:
    """The discovery binary for a layout (fits DISCOVERY_TMR_SIZE)."""
    bhdr = structs.get(D, "binary_header")
    ihdr = structs.get(D, "ip_discovery_header")
    dhdr = structs.get(D, "die_header")
    ip = structs.get(D, "ip")
    gci = structs.get(D, "gc_info_v1_2")
    harv = structs.get(D, "harvest_table")

    # IP discovery table: header, one die, its IPs.
    ip_off = _align(bhdr.size)
    die_off = ip_off + ihdr.size
    body = bytearray(dhdr.pack(die_id=0, num_ips=len(lay.ips)))
    for e in lay.ips:
        body += ip.pack(hw_id=e.hw_id, number_instance=e.instance, num_base_address=len(e.bases),
                        major=e.version[0], minor=e.version[1], revision=e.version[2], harvest=e.harvest)
        body += b"".join(b.to_bytes(4, "little") for b in e.bases)
    ip_size = ihdr.size + len(body)
    ip_table = ihdr.pack(signature=D.DISCOVERY_TABLE_SIGNATURE, version=1, size=ip_size, id=0,
                         num_dies=1, die_info=[dict(die_id=0, die_offset=die_off)]) + body

    gc_off = _align(ip_off + ip_size)
    gc_table = gci.pack(header=dict(table_id=D.GC_TABLE_ID, version_major=1, version_minor=2, size=gci.size),
                        **lay.gc_info)
    harv_off = _align(gc_off + len(gc_table))
    harv_table = harv.pack(header=dict(signature=D.HARVEST_TABLE_SIGNATURE, version=0),
                           list=[dict(hw_id=h, number_instance=i) for h, i in lay.harvest])
    total = harv_off + len(harv_table)
    if total > TMR_SIZE:
        raise ValueError(f"{lay.chip}: discovery binary of {total} bytes exceeds DISCOVERY_TMR_SIZE {TMR_SIZE}")

    out = bytearray(total)
    out[ip_off:ip_off + ip_size] = ip_table
    out[gc_off:gc_off + len(gc_table)] = gc_table
    out[harv_off:harv_off + len(harv_table)] = harv_table
    tables = [dict() for _ in range(D.TOTAL_TABLES)]
    tables[D.IP_DISCOVERY] = dict(offset=ip_off, checksum=checksum(ip_table), size=ip_size)
    tables[D.GC] = dict(offset=gc_off, checksum=checksum(gc_table), size=len(gc_table))
    tables[D.HARVEST_INFO] = dict(offset=harv_off, checksum=checksum(harv_table), size=len(harv_table))
    bhdr.pack_into(out, 0, binary_signature=D.BINARY_SIGNATURE, version_major=1, version_minor=0,
                   binary_size=total, table_list=tables)
    start = bhdr.offset("binary_checksum") + 2
    bhdr.pack_into(out, 0, binary_checksum=checksum(out[start:total]))
    return bytes(out)
