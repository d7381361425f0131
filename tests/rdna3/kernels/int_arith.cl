#include "common.h"
__kernel void int_arith(__global int *out, __global const int *a, __global const int *b, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  int x = a[i], y = b[i];
  uint ux = x, uy = y;
  out[10 * i + 0] = x + y;
  out[10 * i + 1] = x - y;
  out[10 * i + 2] = x * y;
  out[10 * i + 3] = (int)(((long)x * (long)y) >> 32);
  out[10 * i + 4] = (int)(((ulong)ux * (ulong)uy) >> 32);
  out[10 * i + 5] = (x << (uy & 31)) ^ (x >> (uy & 31));
  out[10 * i + 6] = (int)(ux >> (uy & 31)) | (x & y);
  out[10 * i + 7] = x < y ? x : y;
  out[10 * i + 8] = ux > uy ? ux : uy;
  out[10 * i + 9] = ~x + (x == y);
}
