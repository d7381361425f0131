"""Power-on register values: upstream's gc_11_0_0_default.h, generated into the gc_11_0_0 table
(tools/gentables/regs.py DEFAULTS), are what the simulated GPU's registers hold after power-on and after
a mode1 reset, in plain storage and in the blocks' banked copies (HQDs, SH_MEM per VMID). Blocks without a
published default header read 0 (an assumption the docs name)."""
import re
from pathlib import Path

import pytest

from amdrv import regs
from gpusim import board

HEADER = Path("/work/upstream/linux-source-6.1/drivers/gpu/drm/amd/include/asic_reg/gc/gc_11_0_0_default.h")


@pytest.fixture
def dev():
    return board.build("navi31", vram_size=512 << 20)


def select_hqd(dev, me=1, pipe=0, queue=0, vmid=0):
    t = dev.table("GC")
    dev.regs.write(dev.reg_addr("GC", "GRBM_GFX_CNTL"),
                   t["GRBM_GFX_CNTL"].encode(MEID=me, PIPEID=pipe, QUEUEID=queue, VMID=vmid))


def read(dev, name, ip="GC"):
    return dev.regs.read(dev.reg_addr(ip, name))


def test_the_table_holds_the_headers_non_zero_defaults():
    values = regs.load("gc_11_0_0").power_on_values
    assert len(values) == 1142 and 0 not in values.values()
    assert values["CP_HQD_EOP_CONTROL"] == 0x6 and values["CP_MEC_DOORBELL_RANGE_LOWER"] == 0x110
    assert "GCMC_VM_AGP_BOT" not in values            # 0: the header's AGP window is BOT = TOP = 0
    assert regs.load("mmhub_3_0_0").power_on_values is None    # no mmhub_3_0_0_default.h upstream
    if HEADER.is_file():   # against the header itself where the source tree is present
        pairs = dict(re.findall(r"#define reg(\w+)_DEFAULT\s+(0x[0-9a-fA-F]+)", HEADER.read_text()))
        table = regs.load("gc_11_0_0")
        assert {n: int(v, 16) for n, v in pairs.items() if int(v, 16) and n in table} == dict(values)


def test_registers_read_their_power_on_values(dev):
    assert read(dev, "CP_MEC_DOORBELL_RANGE_LOWER") == 0x110
    assert read(dev, "CP_MEC_DOORBELL_RANGE_UPPER") == 0xFFC
    assert read(dev, "SDMA0_QUEUE0_RB_CNTL") == 0x40800        # F32_WPTR_POLL_ENABLE set, ring off
    assert read(dev, "SDMA0_F32_CNTL") == 0x08084001           # HALT set
    assert read(dev, "CP_MEC_RS64_CNTL") == 0x40000000 and read(dev, "CP_ME_CNTL") == 0x15000000
    assert read(dev, "GCMC_VM_AGP_BOT") == 0 and read(dev, "GCMC_VM_AGP_TOP") == 0
    assert read(dev, "GRBM_GFX_INDEX") == 0xE0000000           # broadcast
    assert read(dev, "MMVM_L2_CNTL2", "MMHUB") == 0            # no published default: 0


def test_banked_copies_start_at_their_power_on_values(dev):
    for pipe, queue in ((0, 0), (2, 5)):
        select_hqd(dev, pipe=pipe, queue=queue)
        assert read(dev, "CP_HQD_EOP_CONTROL") == 0x6            # EOP_SIZE 6: 128 dwords
        assert read(dev, "CP_HQD_PQ_CONTROL") == 0x00308509
        assert read(dev, "CP_MQD_CONTROL") == 0x100              # PRIV_STATE
        assert read(dev, "CP_HQD_PERSISTENT_STATE") == 0x0BE05501
    for vmid in (0, 7):
        select_hqd(dev, vmid=vmid)
        assert read(dev, "SH_MEM_CONFIG") == 0xC000              # INITIAL_INST_PREFETCH 3
        assert read(dev, "SH_MEM_BASES") == 0


def test_a_mode1_reset_brings_the_power_on_values_back(dev):
    select_hqd(dev, pipe=1, queue=1)
    for name in ("CP_MEC_DOORBELL_RANGE_LOWER", "SDMA0_QUEUE0_RB_CNTL", "CP_HQD_EOP_CONTROL"):
        dev.regs.write(dev.reg_addr("GC", name), 0)
        assert read(dev, name) == 0
    board.mode1_reset(dev)
    select_hqd(dev, pipe=1, queue=1)
    assert read(dev, "CP_MEC_DOORBELL_RANGE_LOWER") == 0x110
    assert read(dev, "SDMA0_QUEUE0_RB_CNTL") == 0x40800
    assert read(dev, "CP_HQD_EOP_CONTROL") == 0x6


def test_pickled_devices_keep_the_power_on_values(dev):
    import pickle
    d2 = pickle.loads(pickle.dumps(dev))
    assert read(d2, "CP_MEC_DOORBELL_RANGE_LOWER") == 0x110
