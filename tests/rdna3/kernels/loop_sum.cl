#include "common.h"
/* a uniform loop: each work-item sums a row of m values */
__kernel void loop_sum(__global float *out, __global const float *a, uint m, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  float s = 0.0f;
  for (uint k = 0; k < m; k++) s += a[i * m + k];
  out[i] = s;
}
