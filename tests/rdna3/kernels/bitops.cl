#include "common.h"
/* bit-counting and bit-field ops */
__kernel void bitops(__global uint *out, __global const uint *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  uint x = a[i];
  out[5 * i + 0] = __builtin_popcount(x);
  out[5 * i + 1] = x ? __builtin_clz(x) : 32;
  out[5 * i + 2] = x ? __builtin_ctz(x) : 32;
  out[5 * i + 3] = (x >> 5) & 0x3ff;
  out[5 * i + 4] = __builtin_bitreverse32(x) + __builtin_bswap32(x);
}
