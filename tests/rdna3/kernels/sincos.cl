#include "common.h"
__kernel void sincos(__global float *out, __global const float *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  out[2 * i + 0] = __builtin_sinf(a[i]);
  out[2 * i + 1] = __builtin_cosf(a[i]);
}
