#include "common.h"
/* divergent if/else-if/else chains */
__kernel void branch(__global float *out, __global const float *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  float x = a[i], r;
  if (x > 1.0f) {
    r = x * x;
    if (i & 1) r = -r;
  } else if (x < -1.0f) {
    r = 1.0f / x;
  } else {
    r = x + 100.0f;
  }
  out[i] = r;
}
