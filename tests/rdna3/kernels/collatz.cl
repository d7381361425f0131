#include "common.h"
/* a divergent loop: trip counts differ per lane */
__kernel void collatz(__global uint *out, __global const uint *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  uint x = a[i], steps = 0;
  while (x != 1 && steps < 1000) {
    x = (x & 1) ? 3 * x + 1 : x >> 1;
    steps++;
  }
  out[i] = steps;
}
