#include "common.h"
/* a 2D grid: out[x, y] = in[y, x] */
__kernel void transpose(__global int *out, __global const int *in, uint w, uint h) {
  uint x = gid(0), y = gid(1);
  if (x < w && y < h) out[x * h + y] = in[y * w + x];
}
