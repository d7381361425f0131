#include "common.h"
/* generic pointers into LDS and into private memory, chosen per lane: both become flat_load through
   the shared and private apertures (src_shared_base / src_private_base, i.e. SH_MEM_BASES) */
__kernel void generic_lds_private(__global int *out, __global const int *a, uint n) {
  __local int t[64];
  int p[16];
  uint l = lid(0), i = gid(0);
  t[l] = a[i] * 3;
  for (int k = 0; k < 16; k++) p[k] = a[(i + k) % n] + k;
  barrier_local();
  int *q = (a[i] & 1) ? (int *)&t[(l + 1) & 63] : (int *)&p[a[i] & 15];
  out[i] = *q;
}
