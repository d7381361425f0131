#include "common.h"
/* DPP lane shuffles (__builtin_amdgcn_mov_dpp/update_dpp): row shifts, quad_perm, row_mirror,
   row_share with a row mask, bound_ctrl on and off */
__kernel void dpp_shuffle(__global int *out, __global const int *a, uint n) {
  uint i = gid(0);
  int x = i < n ? a[i] : 0;
  int r0 = __builtin_amdgcn_mov_dpp(x, 0x111, 0xf, 0xf, false);      /* row_shr:1, keep old where invalid */
  int r1 = __builtin_amdgcn_update_dpp(-7, x, 0x4e, 0xf, 0xf, true);  /* quad_perm [2,3,0,1] */
  int r2 = __builtin_amdgcn_update_dpp(-7, x, 0x140, 0xf, 0xf, true); /* row_mirror */
  int r3 = __builtin_amdgcn_update_dpp(-7, x, 0x101, 0xf, 0xf, true); /* row_shl:1, bound_ctrl: 0 fill */
  int r4 = __builtin_amdgcn_update_dpp(-7, x, 0x153, 0x5, 0xf, false); /* row_share:3, rows 0 and 2 only */
  if (i < n) { out[5*i] = r0; out[5*i+1] = r1; out[5*i+2] = r2; out[5*i+3] = r3; out[5*i+4] = r4 + x; }
}
