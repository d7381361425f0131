"""The life cycle every IP block follows, as amdgpu's struct amd_ip_funcs (include/amd_shared.h).

    class SDMA(IPBlock):
        name = "sdma"
        def hw_init(self, warm=False): ...   # the engines started (warm: after a previous run's fini)

AMGPU (amdrv.am) holds its blocks in amdgpu's order (`BLOCK_ORDER`) and drives them as amdgpu_device.c
does: `sw_init` of each while building them (amdgpu_device_ip_init's first loop), `hw_init` in order at
boot (amdgpu_device_ip_hw_init_phase1/2), `hw_fini` in reverse order at fini
(amdgpu_device_ip_fini_early), `soft_reset` in order on recovery (amdgpu_device_ip_soft_reset).
A block implements what it has to do; the rest are no-ops here.
"""
from __future__ import annotations

# amdgpu_discovery_set_ip_blocks for a bare-metal SOC21 part with PSP firmware loading: common (soc21,
# the NBIO side here), gmc, ih, psp, smu, (display, not driven), gfx, sdma, (multimedia and MES, not
# driven). The boot brings the blocks up in this order and fini takes them down in the reverse one.
BLOCK_ORDER = ("nbio", "gmc", "ih", "psp", "smu", "gfx", "sdma")


class IPBlock:
    """One IP block's life cycle (amd_ip_funcs). `name` is the block's name in BLOCK_ORDER and in a boot
    report's steps."""

    name = ""
    # False: a warm boot leaves the block as the previous run's fini left it and hw_init(warm=True) has
    # nothing to do, so the boot makes no step of it (the PSP: its secure OS runs on).
    runs_warm = True

    def sw_init(self) -> None:
        """The software side: what the block allocates from the boot region. Called by the constructor,
        so the blocks, built in BLOCK_ORDER, allocate at the same addresses on every boot."""

    def hw_init(self, warm: bool = False) -> None:
        """Brings the hardware up; warm: the previous AM run ended with fini and the firmware runs on."""
        raise NotImplementedError(f"{type(self).__name__}: no hw_init")

    def hw_fini(self) -> None:
        """Leaves the hardware idle for the next run (which may boot warm)."""

    def soft_reset(self) -> None:
        """Resets the block's engines after a hang without a reboot (blocks with engines)."""

    def wait_idle(self) -> None:
        """Waits until the block's engines are idle; raises the block's error if they stay busy."""
