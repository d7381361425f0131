#include "common.h"
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
/* packed (VOP3P) half2 and short2 math, with op_sel swizzles, negation and inline constants */
typedef half half2_t __attribute__((ext_vector_type(2)));
typedef short short2_t __attribute__((ext_vector_type(2)));
__kernel void packed_math(__global half2_t *out, __global const half2_t *a, __global const half2_t *b,
                     __global short2_t *so, __global const short2_t *sa, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  half2_t x = a[i], y = b[i];
  out[5 * i + 0] = x * y + x;
  out[5 * i + 1] = x - y.yx;
  out[5 * i + 2] = __builtin_elementwise_max(x, y);
  out[5 * i + 3] = x + (half2_t)(0.0h, 1.0h);     /* inline constants: only the low half is set */
  out[5 * i + 4] = x * (half2_t)(0.5h, 0.0h);
  so[2 * i] = sa[i] + sa[i].yx;
  so[2 * i + 1] = sa[i] * (short2_t)(3, -2);
}
