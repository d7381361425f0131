#include "common.h"
/* reverse each workgroup's slice through LDS */
__kernel void local_reverse(__global float *out, __global const float *a, uint n) {
  __local float tile[256];
  uint l = lid(0), ls = local_size(0), i = gid(0);
  tile[l] = i < n ? a[i] : -1.0f;
  barrier_local();
  if (i < n) out[i] = tile[ls - 1 - l];
}
