#include "common.h"
/* sub, mul, fma, min, max, abs, neg, floor, ceil, trunc, copysign */
__kernel void float_arith(__global float *out, __global const float *a, __global const float *b,
                          __global const float *c, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  float x = a[i], y = b[i], z = c[i];
  out[8 * i + 0] = x - y;
  out[8 * i + 1] = x * y;
  out[8 * i + 2] = __builtin_fmaf(x, y, z);
  out[8 * i + 3] = __builtin_fminf(x, y) + __builtin_fmaxf(y, z);
  out[8 * i + 4] = __builtin_fabsf(x) - (-z);
  out[8 * i + 5] = __builtin_floorf(x) + __builtin_ceilf(y);
  out[8 * i + 6] = __builtin_truncf(z) * __builtin_copysignf(1.5f, x);
  out[8 * i + 7] = x * y + z;
}
