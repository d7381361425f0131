#include "common.h"
__kernel void exp_log(__global float *out, __global const float *a, __global const float *b, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  out[4 * i + 0] = __builtin_expf(a[i]);
  out[4 * i + 1] = __builtin_logf(b[i]);
  out[4 * i + 2] = __builtin_exp2f(a[i]);
  out[4 * i + 3] = __builtin_log2f(b[i]);
}
