/* Words read at a byte offset that need not be a multiple of 4. clang (amdhsa: unaligned-access-mode)
 * emits one global_load_b32 per word whatever the address, so the result depends on the dispatching VMID's
 * SH_MEM_CONFIG.ALIGNMENT_MODE: UNALIGNED (gfx_v11_0.c DEFAULT_SH_MEM_CONFIG) reads the 4 bytes at the
 * offset, the power-on DWORD mode reads the aligned word below it. */
#include "../../../rdna3/include/driverless_cl.h"   /* get_global_id for clang-15 -nogpulib */
__kernel void unaligned_words(__global uint *out, __global const uchar *in, uint offset) {
    uint i = (uint)get_global_id(0);
    out[i] = *(__global const uint *)(in + offset + 4 * i);
}
