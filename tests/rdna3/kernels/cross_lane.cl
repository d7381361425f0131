#include "common.h"
/* wave-level operations: readfirstlane, ballot (a compare into an SGPR), mbcnt, ds_bpermute,
   ds_swizzle (xor mask and quad permute) */
__kernel void cross_lane(__global uint *out, __global const uint *a, uint n) {
  uint i = gid(0);
  uint x = i < n ? a[i] : 0;
  uint first = __builtin_amdgcn_readfirstlane(x);
  uint ballot = (uint)__builtin_amdgcn_uicmp(x & 1, 0u, 33 /* ICMP_NE */);
  uint rank = __builtin_amdgcn_mbcnt_lo(ballot, 0);
  uint rot = __builtin_amdgcn_ds_bpermute(((lid(0) + 1) & 31) << 2, x);
  uint swap = __builtin_amdgcn_ds_swizzle(x, 0x041F);   /* xor_mask 1: swap neighbours */
  uint quad = __builtin_amdgcn_ds_swizzle(x, 0x801B);   /* quad_perm 3,2,1,0 */
  if (i < n) {
    out[6 * i + 0] = first;
    out[6 * i + 1] = ballot;
    out[6 * i + 2] = rank;
    out[6 * i + 3] = rot;
    out[6 * i + 4] = swap;
    out[6 * i + 5] = quad;
  }
}
