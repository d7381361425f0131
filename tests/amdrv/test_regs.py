"""Generated register tables against values read by hand from the 6.1 headers, and register access
through IPBlock over a dict-backed MMIO."""
import pytest

from amdrv.regs import FieldError, IPBlock, RegisterNotFound, RegisterTable, load
from tools.gentables import regs as gen

GUI_ACTIVE = 1 << 31


class FakeMMIO:
    """A BAR as a dict of byte address -> dword; logs accesses so tests can see what was touched."""

    def __init__(self):
        self.mem: dict[int, int] = {}
        self.log: list[tuple] = []

    def read32(self, addr: int) -> int:
        self.log.append(("r", addr))
        return self.mem.get(addr, 0)

    def write32(self, addr: int, value: int) -> None:
        self.log.append(("w", addr, value))
        self.mem[addr] = value


# --- the tables, checked against the headers by hand ------------------------------------------------

@pytest.mark.parametrize("block,name,offset,base_idx", [
    # include/asic_reg/gc/gc_11_0_0_offset.h
    ("gc_11_0_0", "GRBM_STATUS", 0x0da4, 0),
    ("gc_11_0_0", "CP_MEC_CNTL", 0x0802, 1),
    ("gc_11_0_0", "RLC_CNTL", 0x4c00, 1),
    # include/asic_reg/mp/mp_13_0_0_offset.h: the PSP (MP0) and SMU (MP1) mailboxes
    ("mp_13_0_0", "MP0_SMN_C2PMSG_35", 0x0063, 0),
    ("mp_13_0_0", "MP1_SMN_C2PMSG_66", 0x0282, 0),
    ("mp_13_0_0", "MP1_SMN_C2PMSG_82", 0x0292, 0),
    ("mp_13_0_0", "MP1_SMN_C2PMSG_90", 0x029a, 0),
    # include/asic_reg/mmhub/mmhub_3_0_0_offset.h and mmhub_3_0_2_offset.h (Navi33 moved it)
    ("mmhub_3_0_0", "MMVM_CONTEXT0_CNTL", 0x0740, 0),
    ("mmhub_3_0_2", "MMVM_CONTEXT0_CNTL", 0x06c0, 0),
    ("mmhub_3_0_0", "MMMC_VM_FB_LOCATION_BASE", 0x08ec, 0),
    ("mmhub_3_0_2", "MMMC_VM_FB_LOCATION_BASE", 0x086c, 0),
    # include/asic_reg/nbio/nbio_4_3_0_offset.h
    ("nbio_4_3_0", "BIF_BX_PF0_GPU_HDP_FLUSH_REQ", 0x0106, 2),
    ("nbio_4_3_0", "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE", 0x00c3, 2),
    ("nbio_4_3_0", "S2A_DOORBELL_ENTRY_1_CTRL", 0x4f7641, 3),
    # include/asic_reg/oss/osssys_6_0_0_offset.h
    ("osssys_6_0_0", "IH_RB_CNTL", 0x0080, 0),
    # include/asic_reg/hdp/hdp_6_0_0_offset.h
    ("hdp_6_0_0", "HDP_MISC_CNTL", 0x00d3, 0),
    ("hdp_6_0_0", "HDP_MEM_POWER_CTRL", 0x00d4, 0),
])
def test_offsets_match_headers(block, name, offset, base_idx):
    d = load(block)[name]
    assert (d.offset, d.base_idx) == (offset, base_idx)


@pytest.mark.parametrize("block,reg,field,shift,mask", [
    # include/asic_reg/gc/gc_11_0_0_sh_mask.h
    ("gc_11_0_0", "GRBM_STATUS", "GUI_ACTIVE", 0x1f, 0x80000000),
    ("gc_11_0_0", "GRBM_STATUS", "CP_BUSY", 0x1d, 0x20000000),
    ("gc_11_0_0", "GRBM_STATUS", "ME0PIPE0_CMDFIFO_AVAIL", 0x0, 0x0000000F),
    ("gc_11_0_0", "CP_MEC_CNTL", "MEC_ME1_HALT", 0x1e, 0x40000000),
    ("gc_11_0_0", "CP_MEC_CNTL", "MEC_INVALIDATE_ICACHE", 0x1b, 0x08000000),
    # include/asic_reg/mp/mp_13_0_0_sh_mask.h
    ("mp_13_0_0", "MP0_SMN_C2PMSG_35", "CONTENT", 0x0, 0xFFFFFFFF),
    # include/asic_reg/mmhub/mmhub_3_0_0_sh_mask.h
    ("mmhub_3_0_0", "MMVM_CONTEXT0_CNTL", "PAGE_TABLE_DEPTH", 0x1, 0x00000006),
    ("mmhub_3_0_0", "MMVM_CONTEXT0_CNTL", "PAGE_TABLE_BLOCK_SIZE", 0x3, 0x00000078),
    # include/asic_reg/nbio/nbio_4_3_0_sh_mask.h
    ("nbio_4_3_0", "S2A_DOORBELL_ENTRY_1_CTRL", "S2A_DOORBELL_PORT1_AWID", 0x1, 0x0000003E),
    ("nbio_4_3_0", "S2A_DOORBELL_ENTRY_1_CTRL", "S2A_DOORBELL_PORT1_RANGE_OFFSET", 0x7, 0x0001FF80),
    # include/asic_reg/oss/osssys_6_0_0_sh_mask.h
    ("osssys_6_0_0", "IH_RB_CNTL", "RB_SIZE", 0x1, 0x0000003E),
    ("osssys_6_0_0", "IH_RB_CNTL", "WPTR_OVERFLOW_ENABLE", 0x10, 0x00010000),
    # include/asic_reg/hdp/hdp_6_0_0_sh_mask.h
    ("hdp_6_0_0", "HDP_MISC_CNTL", "MMHUB_EARLY_WRACK_ENABLE", 0x8, 0x00000100),
])
def test_fields_match_headers(block, reg, field, shift, mask):
    f = load(block)[reg].fields[field]
    assert (f.shift, f.mask) == (shift, mask)


def test_every_register_is_kept():
    # `grep -c '^#define reg' <block>_offset.h`, one fewer _BASE_IDX in gc (GFX_IMU_FUSESTRAP has none)
    counts = {"gc_11_0_0": (10977 + 1) // 2, "mp_13_0_0": 418 // 2, "mmhub_3_0_0": 1418 // 2,
              "mmhub_3_0_2": 1346 // 2, "nbio_4_3_0": 10586 // 2, "osssys_6_0_0": 232 // 2,
              "hdp_6_0_0": 178 // 2}
    assert {b: len(load(b)) for b in counts} == counts


def test_header_quirks_resolved_as_documented():
    gc, nbio = load("gc_11_0_0"), load("nbio_4_3_0")
    # regGFX_IMU_FUSESTRAP 0x4094 lacks _BASE_IDX; its addressBlock (gc_gfx_imu_gfx_imudec) is all 1
    assert (gc["GFX_IMU_FUSESTRAP"].offset, gc["GFX_IMU_FUSESTRAP"].base_idx) == (0x4094, 1)
    # mask 0x06000000 with shift 27 upstream; kept as the free bit 27, next to FORCE_MISS at bit 26
    assert gc["GL1C_UTCL0_CNTL1"].fields["FORCE_IN_ORDER"].mask == 0x08000000
    assert gc["GL1C_UTCL0_CNTL1"].fields["FORCE_MISS"].mask == 0x04000000
    # SQ_CONFIG DISABLE_SGPR_RD_KILL has a shift but no mask upstream
    assert "DISABLE_SGPR_RD_KILL" not in gc["SQ_CONFIG"].fields
    assert "DISABLE_END_CLAUSE_TX" in gc["SQ_CONFIG"].fields
    # a lone LC_RX_L0S_STANDBY_EN_MASK 0x00010000 at the end of nbio_4_3_0_sh_mask.h
    d = nbio["PCIE_LC_RXRECOVER_RXSTANDBY_CNTL"]
    assert (d.offset, d.base_idx, d.fields["LC_RX_L0S_STANDBY_EN"].mask) == (0x2890102, 5, 0x10000)
    # fields without a register offset are left out
    assert "CP_INT_STAT_DEBUG" not in gc


def test_non_mmio_registers():
    # gc_11_0_0_offset.h: ixSQ_WAVE_STATUS 0x0102 in addressBlock sqind; sh_mask: HALT mask 0x2000
    d = load("gc_11_0_0").non_mmio("SQ_WAVE_STATUS")
    assert (d.space, d.offset, d.fields["HALT"].mask) == ("ix:sqind", 0x102, 0x2000)
    # nbio_4_3_0_offset.h: cfgBIF_CFG_DEV0_EPF0_0_COMMAND 0xfffe10200004 (config space offset 4)
    d = load("nbio_4_3_0").non_mmio("BIF_CFG_DEV0_EPF0_0_COMMAND")
    assert (d.space, d.offset) == ("cfg:nbio_nbif0_bif_cfg_dev0_epf0_bifcfgdecp", 0xfffe10200004)
    # a name in both spaces: regRCC_DEV0_EPF0_VF10_RCC_DOORBELL_APER_EN 0x00c0, cfg... 0xd0503780
    nbio = load("nbio_4_3_0")
    assert nbio["RCC_DEV0_EPF0_VF10_RCC_DOORBELL_APER_EN"].offset == 0xc0
    assert nbio.non_mmio("RCC_DEV0_EPF0_VF10_RCC_DOORBELL_APER_EN").offset == 0xd0503780
    with pytest.raises(RegisterNotFound, match="ix:sqind"):
        load("gc_11_0_0")["SQ_WAVE_STATUS"]
    with pytest.raises(RegisterNotFound, match="GRBM_STATUS is an MMIO register"):
        load("gc_11_0_0").non_mmio("GRBM_STATUS")


# --- register access ---------------------------------------------------------------------------------

# Segment bases as IP discovery reports them; these are Navi10's (include/navi10_ip_offset.h)
GC_BASES = (0x1260, 0xA000)
MP_BASES = (0x16000,)


@pytest.fixture
def mmio():
    return FakeMMIO()


@pytest.fixture
def gc(mmio):
    return IPBlock(load("gc_11_0_0"), GC_BASES, mmio, name="GC")


def test_address_uses_the_register_base_index(gc):
    assert gc.GRBM_STATUS.addr == (0x1260 + 0x0da4) * 4 == 0x8010    # base index 0
    assert gc.CP_MEC_CNTL.addr == (0xA000 + 0x0802) * 4              # base index 1
    assert gc.reg("GRBM_STATUS") is gc.GRBM_STATUS


def test_mp_table_binds_to_two_instances(mmio):
    mp0 = IPBlock(load("mp_13_0_0"), MP_BASES, mmio, name="MP0")
    mp1 = IPBlock(load("mp_13_0_0"), [0x20000], mmio, name="MP1")
    assert mp0.MP0_SMN_C2PMSG_35.addr == (0x16000 + 0x63) * 4
    assert mp0.MP1_SMN_C2PMSG_66.addr == 0x58A08  # the SMU message register amdgpu pokes on Navi1x
    assert mp1.MP1_SMN_C2PMSG_66.addr == (0x20000 + 0x282) * 4


def test_write_by_fields_and_read_decode(gc, mmio):
    written = gc.CP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
    assert written == 0x50000000 == mmio.mem[gc.CP_MEC_CNTL.addr]
    d = gc.CP_MEC_CNTL.decode()
    assert d["MEC_ME1_HALT"] == 1 and d["MEC_ME2_HALT"] == 1 and d["MEC_ME1_STEP"] == 0
    gc.CP_MEC_CNTL.write(0xFFFFFFFF, MEC_ME1_HALT=0)
    assert mmio.mem[gc.CP_MEC_CNTL.addr] == 0xBFFFFFFF


def test_update_preserves_other_fields(gc, mmio):
    addr = gc.GRBM_STATUS.addr
    mmio.mem[addr] = GUI_ACTIVE | 0x5
    assert gc.GRBM_STATUS.update(ME0PIPE0_CMDFIFO_AVAIL=0xA) == GUI_ACTIVE | 0xA
    assert mmio.mem[addr] == GUI_ACTIVE | 0xA
    assert mmio.log == [("r", addr), ("w", addr, GUI_ACTIVE | 0xA)]


def test_decode_and_encode_without_io(gc, mmio):
    d = gc.GRBM_STATUS.decode(GUI_ACTIVE | (1 << 29) | 3)
    assert (d["GUI_ACTIVE"], d["CP_BUSY"], d["ME0PIPE0_CMDFIFO_AVAIL"], d["CB_BUSY"]) == (1, 1, 3, 0)
    # PAGE_TABLE_DEPTH at bits 1..2, PAGE_TABLE_BLOCK_SIZE at bits 3..6 (mmhub_3_0_0_sh_mask.h)
    mm = IPBlock(load("mmhub_3_0_0"), [0x1A000], mmio)
    assert mm.MMVM_CONTEXT0_CNTL.encode(ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=3, PAGE_TABLE_BLOCK_SIZE=9) \
        == 1 | 3 << 1 | 9 << 3
    assert mmio.log == []


def test_encode_overflow_names_register_field_width_value(gc, mmio):
    with pytest.raises(FieldError, match=r"CP_MEC_CNTL\.MEC_ME1_HALT is 1 bit\(s\) wide.*2 does not fit"):
        gc.CP_MEC_CNTL.write(MEC_ME1_HALT=2)
    with pytest.raises(FieldError, match="ME0PIPE0_CMDFIFO_AVAIL is 4 bit"):
        gc.GRBM_STATUS.encode(ME0PIPE0_CMDFIFO_AVAIL=16)
    with pytest.raises(FieldError, match="-1 does not fit"):
        gc.GRBM_STATUS.encode(GUI_ACTIVE=-1)
    assert gc.GRBM_STATUS.encode(ME0PIPE0_CMDFIFO_AVAIL=15) == 15
    assert mmio.log == []


def test_unknown_field_lists_the_valid_ones(gc, mmio):
    with pytest.raises(FieldError, match=r"GRBM_STATUS has no field 'GUI_ACTIV'.*GUI_ACTIVE"):
        gc.GRBM_STATUS.update(GUI_ACTIV=1)
    assert mmio.log == []  # nothing read or written before the error


def test_unknown_register_suggests_close_names(gc):
    with pytest.raises(RegisterNotFound, match=r"GC: gc_11_0_0 has no register 'GRBM_STATS'.*GRBM_STATUS"):
        gc.GRBM_STATS
    with pytest.raises(KeyError):
        gc.reg("NOT_A_REGISTER")
    assert not hasattr(gc, "NOT_A_REGISTER")


def test_base_index_beyond_discovered_bases(mmio):
    gc = IPBlock(load("gc_11_0_0"), [0x1260], mmio, name="GC")
    assert gc.GRBM_STATUS.addr == 0x8010
    with pytest.raises(LookupError, match="CP_MEC_CNTL uses base index 1 but .* 1 base"):
        gc.CP_MEC_CNTL


def test_write_rejects_values_wider_than_32_bits(gc):
    with pytest.raises(ValueError, match="32-bit"):
        gc.GRBM_STATUS.write(1 << 32)


def test_unknown_block():
    with pytest.raises(LookupError, match="gc_11_0_0"):
        load("gc_99_0_0")


# --- generator checks, on small synthetic headers ---------------------------------------------------

class FakeTree:
    origin = "fake"

    def __init__(self, offset: str, sh_mask: str):
        self.files = {"include/asic_reg/hdp/hdp_6_0_0_offset.h": offset,
                      "include/asic_reg/hdp/hdp_6_0_0_sh_mask.h": sh_mask}

    def read(self, rel: str) -> str:
        if rel not in self.files:      # as HeaderTree.read does
            raise FileNotFoundError(rel)
        return self.files[rel]


OFFSET = "// addressBlock: hdp_hdpdec\n#define regFOO 0x0010\n#define regFOO_BASE_IDX 0\n"


def _table(offset: str, sh_mask: str) -> RegisterTable:
    ns: dict = {}
    exec(gen.render("hdp_6_0_0", FakeTree(offset, sh_mask)), ns)
    return RegisterTable(type("M", (), ns))


def test_generator_round_trip():
    t = _table(OFFSET, "//FOO\n#define FOO__A__SHIFT 0x4\n#define FOO__A_MASK 0x000000F0L\n")
    assert (t["FOO"].offset, t["FOO"].fields["A"].shift, t["FOO"].fields["A"].width) == (0x10, 4, 4)


@pytest.mark.parametrize("offset,sh_mask,error", [
    (OFFSET, "#define FOO__A__SHIFT 0x4\n#define FOO__A_MASK 0x000000E0L\n", "not a contiguous field"),
    (OFFSET, "#define FOO__A__SHIFT 0x0\n#define FOO__A_MASK 0x5L\n", "not a contiguous field"),
    (OFFSET, "#define FOO__A__SHIFT 0x0\n#define FOO__A_MASK 0x3L\n"
             "#define FOO__B__SHIFT 0x1\n#define FOO__B_MASK 0x2L\n", "overlaps"),
    (OFFSET + "#define mmBAR 0x20\n", "", "no known prefix"),
    (OFFSET + "#define regFOO 0x20\n", "", "defined twice"),
])
def test_generator_rejects_bad_headers(offset, sh_mask, error):
    with pytest.raises(gen.HeaderError, match=error):
        gen.render("hdp_6_0_0", FakeTree(offset, sh_mask))
