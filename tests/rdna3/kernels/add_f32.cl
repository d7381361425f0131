#include "common.h"
__kernel void add_f32(__global float *out, __global const float *a, __global const float *b, uint n) {
  uint i = gid(0);
  if (i < n) out[i] = a[i] + b[i];
}
