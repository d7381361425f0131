#include "common.h"
/* OpenCL 2.0 generic pointers: one pointer that is __local in some lanes and __global in others
   becomes flat_load/flat_store through the LDS aperture (read with s_getreg SH_MEM_BASES) */
__kernel void generic_ptr(__global int *out, __global int *a, uint n) {
  __local int t[256];
  uint l = lid(0), i = gid(0);
  t[l] = 1000 + (int)l;
  barrier_local();
  int *p = (i & 1) ? &t[l] : (int *)&a[i];
  int v = *p;
  *p = v + 1;
  barrier_local();
  if (i < n) out[i] = v + t[l];
}
