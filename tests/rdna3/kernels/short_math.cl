#include "common.h"
typedef short short8_t __attribute__((ext_vector_type(8)));
/* 16-bit integer math on short8 vectors and 8-bit math on bytes */
__kernel void short_math(__global short8_t *out, __global const short8_t *a, __global const short8_t *b,
                         __global uchar *c, __global const uchar *d, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  short8_t x = a[i], y = b[i];
  out[2 * i] = x * y + (x >> 3) + (x > y ? x : y);
  out[2 * i + 1] = (x < y ? x : y) - (short8_t)(7) * y;
  c[i] = (uchar)(d[i] * 3 + d[i + 1]) ^ (uchar)i;
}
