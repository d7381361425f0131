#include "common.h"
/* 64-bit index math: a strided gather with a 64-bit stride and base offset */
__kernel void addr64(__global float *out, __global const float *a, ulong stride, ulong base, uint n) {
  uint i = gid(0);
  if (i < n) out[i] = a[base + (ulong)i * stride] * 2.0f;
}
