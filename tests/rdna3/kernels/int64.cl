#include "common.h"
__kernel void int64(__global ulong *out, __global const ulong *a, __global const ulong *b, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  ulong x = a[i], y = b[i];
  out[5 * i + 0] = x + y;
  out[5 * i + 1] = x * y;
  out[5 * i + 2] = (x << (y & 63)) | (x >> 7);
  out[5 * i + 3] = (long)x >> (y & 63);
  out[5 * i + 4] = x > y ? x - y : y ^ x;
}
