"""Private (scratch) memory for hcq kernels on AM: what a kernel needs, and the device's scratch buffer.

gfx11 gives each wave its private memory as a slot of the buffer at COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI
(address bits 47:8), COMPUTE_TMPRING_SIZE.WAVESIZE bytes x 256 per slot (WAVESIZE is 15 bits, WAVES 12 bits:
gc_11_0_0_sh_mask.h; the 256-byte unit is gfx11's, Mesa's ac_get_scratch_tmpring_size shifts by 8 from GFX11
on, by 10 before). clang's gfx11 kernels reach it through the wave's architected flat scratch base, so they
ask for no private-segment-buffer or flat-scratch-init SGPRs.

Sizing, as the ROCm stack does: the buffer holds a slot for every wave that can hold scratch at once, the
discovery table's gc_max_scratch_slots_per_cu (amdgpu_discovery_get_gfx_info -> cu_info.
max_scratch_slots_per_cu, which kfd reports as the node's max_slots_scratch_cu) times the CUs (the table's
SE x SA x WGP x 2: the unharvested count, an upper bound). WAVES is programmed per shader engine (Mesa
divides the wave count by num_se from GFX11 on: 'WAVES is per SE'), while the buffer is sized for all of
them, so it is large enough whichever way the hardware counts.

One buffer per device, grown when a kernel needs a larger slot: every kernel using a buffer gets its
WAVESIZE (Mesa: WAVESIZE must stay constant while the GPU uses a scratch buffer; a larger one needs a new
buffer). A program keeps the buffer its launches name, so a grown-out buffer is freed once no program
refers to it (hcq's collected-buffer path, after the work that used it)."""
from __future__ import annotations

from dataclasses import dataclass

from hcq.api import Buffer, HCQError
from amdrv.memory import VRAMExhausted, fmt_size

WAVE_UNIT = 256          # COMPUTE_TMPRING_SIZE.WAVESIZE's unit on gfx11 (bytes per wave)
WAVESIZE_MAX = 0x7FFF    # COMPUTE_TMPRING_SIZE__WAVESIZE_MASK 0x07FFF000
WAVES_MAX = 0xFFF        # COMPUTE_TMPRING_SIZE__WAVES_MASK 0x00000FFF
WAVE_LANES = 32          # hcq launches wave32 kernels only


def wavesize_units(kern) -> int:
    """The WAVESIZE (256-byte units) kernel `kern` needs, 0 when it uses no private memory; a clear error
    for what this backend cannot set up."""
    kd = kern.descriptor
    user = {name for name, _, _ in kd.user_sgpr_layout()}
    asked = [n for n in ("private_segment_buffer", "flat_scratch_init") if n in user]
    if asked:
        raise HCQError(f"kernel {kern.name} asks for the {' and '.join(asked)} user SGPRs; gfx11 kernels "
                       "reach scratch through the wave's flat scratch base and the AM HCQ backend does not "
                       "provide them (build it for gfx11 with clang: it asks for neither)")
    private = kd.private_segment_fixed_size
    scratch_en = kd.rsrc2["enable_private_segment"]
    if kd.properties["uses_dynamic_stack"]:
        raise HCQError(f"kernel {kern.name} uses a dynamic stack (recursion, indirect calls or variable-size "
                       f"alloca): its private memory is not bounded by the {private} bytes per work-item the "
                       "descriptor gives, and the AM HCQ backend cannot size scratch for it; remove the "
                       "recursion/indirect calls")
    if not scratch_en:
        if private:
            raise HCQError(f"kernel {kern.name} declares {private} bytes of private memory per work-item but "
                           "COMPUTE_PGM_RSRC2.SCRATCH_EN is 0, so its waves would get no scratch; the code "
                           "object is inconsistent (rebuild it)")
        return 0
    units = max(1, -(-private * WAVE_LANES // WAVE_UNIT))
    if units > WAVESIZE_MAX:
        raise HCQError(f"kernel {kern.name} needs {private} bytes of private memory per work-item "
                       f"({fmt_size(private * WAVE_LANES)} per wave); COMPUTE_TMPRING_SIZE.WAVESIZE holds at "
                       f"most {WAVESIZE_MAX} x {WAVE_UNIT} bytes per wave ({WAVESIZE_MAX * WAVE_UNIT // WAVE_LANES}"
                       " bytes per work-item); use less private memory (smaller arrays, or global memory)")
    return units


def scratch_slots(gc_info) -> tuple[int, int]:
    """(slots for the whole GPU, shader engines) from the discovery table's GC info."""
    if gc_info is None:
        raise HCQError("the GPU's IP discovery has no GC info table: the number of scratch slots is unknown, "
                       "so kernels with private memory cannot run")
    se = gc_info.gc_num_se
    cus = se * gc_info.gc_num_sa_per_se * (gc_info.gc_num_wgp0_per_sa + gc_info.gc_num_wgp1_per_sa) * 2
    return cus * gc_info.gc_max_scratch_slots_per_cu, se


@dataclass
class ScratchRing:
    """A scratch buffer and the COMPUTE_TMPRING_SIZE a dispatch using it is programmed with."""
    buffer: Buffer
    wavesize: int      # 256-byte units per wave slot
    waves: int         # COMPUTE_TMPRING_SIZE.WAVES: slots per shader engine

    def tmpring_size(self, gc) -> int:
        return gc.COMPUTE_TMPRING_SIZE.encode(WAVES=self.waves, WAVESIZE=self.wavesize)


def ring_for(dev, ring: ScratchRing | None, units: int, name: str) -> ScratchRing:
    """The device's ring if its slots hold `units`, else a new, larger one (allocated in VRAM)."""
    if ring is not None and ring.wavesize >= units:
        return ring
    slots, se = scratch_slots(dev.gpu.dev.disc.gc)
    waves = min(slots // se, WAVES_MAX)
    size = slots * units * WAVE_UNIT
    try:
        buf = dev.alloc(size)
    except (VRAMExhausted, HCQError) as e:
        raise HCQError(f"kernel {name}: no {fmt_size(size)} of VRAM for its scratch buffer ({slots} wave slots "
                       f"of {units * WAVE_UNIT} bytes): {e}; use less private memory") from None
    return ScratchRing(buf, units, waves)
