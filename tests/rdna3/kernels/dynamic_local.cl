#include "common.h"
/* a __local pointer argument: LDS sized at dispatch time, its offset passed as a kernel argument */
__kernel void dynamic_local(__global int *out, __global const int *a, __local int *tmp, uint n) {
  uint l = lid(0), ls = local_size(0), i = gid(0);
  tmp[l] = i < n ? a[i] : 0;
  barrier_local();
  int s = 0;
  for (uint k = 0; k <= l; k++) s += tmp[k] * (int)(k + 1);
  if (i < n) out[i] = s + (int)ls;
}
