"""The AM backend of hcq: `hcq.open("am:sim")` lands in `open_device`.

    dev = open_device("am:sim")                   # boots through AMGPU.open; slot=/fresh= pick a sim GPU
    buf = dev.alloc(1 << 20)                      # VRAM, mapped at gmc.VRAM_VA + its offset
    dev.copyin(buf, data); dev.copyout(buf)       # BAR0 directly when it reaches, else SDMA via host memory
    prog = dev.program(code_object, "saxpy")
    prog(y, x, 2.0, n, global_size=(n // 256,), local_size=(256,), wait=True)   # seconds of GPU time

Memory the CPU writes per launch lives in host memory the GPU reaches through the GMC (pcie DMA
buffers mapped with gmc.map_system): signals (16 bytes each: value, timestamp), and an arena of
launch slots (a 64-byte hsa_kernel_dispatch_packet, then the kernarg segment). Behind the open USB bridge
firmware, where each write into VRAM is a round trip, `prog(...)` puts its slot in the compute ring instead,
in a PM4 NOP's body just before its PM4 (launch.RingSlots). Code objects are loaded into VRAM whole, so the
descriptor and code keep their relative addresses.

A kernel launch is the program's precomputed PM4 template (ACQUIRE_MEM; SET_SH_REG of COMPUTE_PGM_LO/HI,
RSRC1/2/3, TMPRING_SIZE (and DISPATCH_SCRATCH_BASE_LO/HI for kernels with private memory: scratch.py),
USER_DATA_0..15, START_X..Z, NUM_THREAD_X..Z, RESOURCE_LIMITS; DISPATCH_DIRECT)
copied into the queue's dword array and patched at known indices: the user SGPRs the kernel descriptor
enables (AMDGPUUsage order: private segment buffer, dispatch ptr, queue ptr, kernarg segment ptr,
dispatch id, flat scratch init, private segment size), the work-group size and the workgroup counts.
COMPUTE_PGM_RSRC2.LDS_SIZE is filled from the group segment size (GFX11: 512-byte units, AMDGPUUsage),
as the CP firmware does for AQL dispatches; the dispatch packet carries workgroup sizes and the grid in
work-items (global_size * local_size), as the kernels read them through the dispatch pointer.

Timestamps are RELEASE_MEM writes of the GPU clock counter (DATA_SEL 3), 100 MHz on SOC21
(soc21_get_xclk: the reference clock).

The package: device.py (AMHCQDevice and open_device: memory, copies, signals, waits, reports, programs),
launch.py (the kernel's PM4 template, the dispatch packet, hidden arguments, slots in the ring), queues.py (the compute and
copy queues), graph.py (graph build and replay). The public names are re-exported here; the private ones a
test patches (the packet templates _C_*) are not, so a patch names the module that uses them.
"""
from amdrv.hcq.device import (ARENA_BYTES, ARENA_BYTES_BRIDGE, BOUNCE, KERNARG_TAIL, PAGE, SDMA_STAGING,
                              SDMA_STAGING_BRIDGE, SIGNAL_AREA, SIGNAL_BYTES, WAVE_CHECK_AFTER, XCLK_HZ, AMHCQDevice,
                              device_facts, find_real_device, open_device)
from amdrv.hcq.launch import _HSA_PACKET_TYPE_KERNEL_DISPATCH, _PACKET, PACKET_BYTES
from amdrv.hcq.queues import AMComputeQueue, AMCopyQueue

__all__ = ["ARENA_BYTES", "ARENA_BYTES_BRIDGE", "BOUNCE", "KERNARG_TAIL", "PACKET_BYTES", "PAGE", "SDMA_STAGING",
           "SDMA_STAGING_BRIDGE", "SIGNAL_AREA", "SIGNAL_BYTES", "WAVE_CHECK_AFTER", "XCLK_HZ", "AMComputeQueue",
           "AMCopyQueue", "AMHCQDevice", "device_facts", "find_real_device", "open_device"]
