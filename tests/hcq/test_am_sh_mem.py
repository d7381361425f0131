"""SH_MEM_CONFIG from the driver's side: gfx_v11_0_constants_init programs ALIGNMENT_MODE UNALIGNED for every
VMID (DEFAULT_SH_MEM_CONFIG), which clang's amdhsa code relies on (a dword load at any byte address); a
driver that leaves the power-on DWORD mode gets words read from the aligned address below (gpusim.dispatch)."""
from pathlib import Path

import numpy as np

import hcq

UNALIGNED_CL = Path(__file__).parent / "kernels" / "unaligned.cl"
N = 32


def _unaligned_words(dev, build_cl) -> list[int]:
    prog = dev.program(build_cl([UNALIGNED_CL])["unaligned"].read_bytes(), "unaligned_words")
    data = np.arange(4 * N + 8, dtype=np.uint8)
    src, out = dev.alloc(data.nbytes), dev.alloc(4 * N)
    dev.copyin(src, data.tobytes())
    prog(out, src, 1, global_size=(1,), local_size=(N,), wait=True, timeout=10)
    return list(np.frombuffer(dev.copyout(out), np.uint32))


def _at(offset: int) -> list[int]:
    data = np.arange(4 * N + 8, dtype=np.uint8).tobytes()
    return [int.from_bytes(data[offset + 4 * i:offset + 4 * i + 4], "little") for i in range(N)]


def test_a_kernel_reads_words_at_unaligned_addresses(dev, build_cl):
    assert _unaligned_words(dev, build_cl) == _at(1)


def test_a_driver_that_leaves_sh_mem_config_at_power_on_reads_the_wrong_words(debian_firmware, build_cl, monkeypatch,
                                                                              dropping_registers):
    from amdrv.ip.gfx import GFX
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    real = GFX.constants_init

    def without_sh_mem_config(self):
        gc, self.gc = self.gc, dropping_registers(self.gc, {"SH_MEM_CONFIG"})
        try:
            real(self)
        finally:
            self.gc = gc
    monkeypatch.setattr(GFX, "constants_init", without_sh_mem_config)
    dev = hcq.open("am:sim", fresh=True)
    try:
        assert _unaligned_words(dev, build_cl) == _at(0)       # DWORD mode: the low address bits dropped
    finally:
        dev.close()
