"""The SQ's wave state through SQ_IND_INDEX/SQ_IND_DATA (gfx_v11_0.c wave_read_ind): what a stopped dispatch
leaves resident, as each kind of stop shows it, and gone once the queue's hang is cleared."""
import pytest

from rdna3.wave import ExecError
from gpusim import board
from gpusim.dispatch import stopped_waves
from gpusim.sq import IX_EXEC_LO, IX_MODE, IX_PC_HI, IX_PC_LO, IX_STATUS, IX_TRAPSTS


class _Q:
    hung = "DISPATCH_DIRECT: stopped"


@pytest.fixture(scope="module")
def dev():
    return board.build("navi31")


def ind(dev, wave, ix, auto=False):
    dev.regs.write(dev.reg_addr("GC", "SQ_IND_INDEX"), wave | ix << 16 | (1 << 11 if auto else 0))
    return dev.regs.read(dev.reg_addr("GC", "SQ_IND_DATA"))


@pytest.mark.parametrize("kind,halt,trapsts", [("illegal", 1, 1 << 11), ("unsupported", 1, 0), ("fault", 1, 0),
                                               ("running", 0, 0)])
def test_each_kind_of_stop_as_the_sq_shows_it(dev, kind, halt, trapsts):
    e = ExecError(0x7FFF_1234_5678, "v_x", "why", [3, 4], "k+0x8", kind, [0xFFFF, 0])
    q = _Q()
    dev.blocks["SQ"].hold(q, stopped_waves(e))
    st = ind(dev, 0, IX_STATUS)
    assert st >> 16 & 1 == 1 and st >> 13 & 1 == halt and st >> 9 & 1 == 0     # VALID, HALT, EXECZ
    assert ind(dev, 1, IX_STATUS) >> 9 & 1 == 1                                   # the second wave: EXEC 0
    assert ind(dev, 0, IX_TRAPSTS) == trapsts
    assert (ind(dev, 0, IX_PC_HI) << 32 | ind(dev, 0, IX_PC_LO)) == 0x7FFF_1234_5678
    assert ind(dev, 0, IX_EXEC_LO) == 0xFFFF
    assert ind(dev, 2, IX_STATUS) == 0                                            # no third wave
    q.hung = None                                                                  # dequeue / reset cleared the hang
    assert ind(dev, 0, IX_STATUS) == 0


def test_auto_increment_steps_the_register_index(dev):
    e = ExecError(0x1_0000_0040, "v_x", "why", [0], "k", "illegal", [1])
    dev.blocks["SQ"].hold(_Q(), stopped_waves(e))
    assert ind(dev, 0, IX_PC_LO, auto=True) == 0x40
    assert dev.regs.read(dev.reg_addr("GC", "SQ_IND_DATA")) == 1                # PC_HI, the next index
    board.mode1_reset(dev)
    assert ind(dev, 0, IX_STATUS) == 0                                            # a reset empties the SQ


def test_waves_do_not_come_back_when_the_queue_set_up_again_hangs_for_another_reason(dev):
    # found by tools/fuzz/packets.py: the waves of a kernel that stopped before a recover() were shown
    # again when the re-created queue later hung at an unknown PM4 opcode
    e = ExecError(0x1_0000_0040, "v_x", "why", [0], "k", "illegal", [1])
    q = _Q()
    q.generation = 1
    dev.blocks["SQ"].hold(q, stopped_waves(e))
    assert ind(dev, 0, IX_STATUS) >> 16 & 1 == 1
    q.hung, q.generation = None, 2            # reset and set up again (cp: _deactivate/_activate)
    q.hung = "unknown PM4 opcode 0x6d"        # a new hang, with no dispatch
    assert ind(dev, 0, IX_STATUS) == 0


def test_sq_wave_mode_reads_the_mode_each_stopped_wave_had(dev):
    """ixSQ_WAVE_MODE (gc_11_0_0_offset.h 0x101, read by gfx_v11_0_read_wave_data): the wave's MODE register as
    the executor held it when the wave stopped, here after the kernel changed its round mode and cleared IEEE."""
    import numpy as np
    from rdna3 import assemble
    from rdna3.wave import launch_regs
    from rdna3.wave_memory import FlatMemory
    code = assemble("s_round_mode 0x3\ns_setreg_imm32_b32 hwreg(HW_REG_MODE, 9, 1), 0\nv_sad_u8 v1, v1, v1, v1\n"
                    "s_endpgm")
    mem = FlatMemory()
    at = mem.upload(np.frombuffer(code.ljust(4096, b"\0"), np.uint8), 4096)     # fetched a page at a time
    rsrc1 = 1 | 0xF0 << 12 | 1 << 21 | 1 << 23          # clang-15's FLOAT_MODE 0xf0, DX10_CLAMP, IEEE_MODE
    with pytest.raises(ExecError) as e:
        launch_regs(at, mem, (64, 1, 1), (32, 1, 1), [], rsrc1, 0)
    assert e.value.modes == [0x1F3, 0x1F3]              # 0x3f0: round toward zero, IEEE cleared
    dev.blocks["SQ"].hold(_Q(), stopped_waves(e.value))
    assert ind(dev, 0, IX_MODE) == 0x1F3 and ind(dev, 1, IX_MODE) == 0x1F3 and ind(dev, 2, IX_MODE) == 0
