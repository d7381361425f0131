#include "common.h"
__kernel void sqrt_rcp(__global float *out, __global const float *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  out[3 * i + 0] = __builtin_sqrtf(a[i]);
  out[3 * i + 1] = __builtin_amdgcn_rsqf(a[i]);
  out[3 * i + 2] = __builtin_amdgcn_rcpf(a[i]);
}
