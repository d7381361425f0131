#include "common.h"
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
/* half precision: fma, min/max, sqrt, and conversions to and from float */
__kernel void half_math(__global half *out, __global float *outf, __global const half *a,
                        __global const half *b, __global const half *c, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  half x = a[i], y = b[i], z = c[i];
  out[4 * i + 0] = x * y + z;
  out[4 * i + 1] = __builtin_fmaxf16(x, y) - __builtin_fminf16(y, z);
  out[4 * i + 2] = __builtin_sqrtf16(x);
  out[4 * i + 3] = (half)((float)x * 3.0f);
  outf[i] = (float)y + (float)z;
}
