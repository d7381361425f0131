#include "common.h"
__kernel void int_divrem(__global int *out, __global const int *a, __global const int *b, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  int x = a[i], y = b[i];
  out[4 * i + 0] = x / y;
  out[4 * i + 1] = x % y;
  out[4 * i + 2] = (int)((uint)x / (uint)y);
  out[4 * i + 3] = (int)((uint)x % (uint)y);
}
