#include "common.h"
/* Hillis-Steele inclusive scan inside each workgroup, double-buffered in LDS */
__kernel void local_scan(__global int *out, __global const int *a, uint n) {
  __local int buf[2][256];
  uint l = lid(0), ls = local_size(0), i = gid(0);
  int cur = 0;
  buf[0][l] = i < n ? a[i] : 0;
  barrier_local();
  for (uint off = 1; off < ls; off <<= 1) {
    int v = buf[cur][l];
    if (l >= off) v += buf[cur][l - off];
    buf[1 - cur][l] = v;
    cur = 1 - cur;
    barrier_local();
  }
  if (i < n) out[i] = buf[cur][l];
}
