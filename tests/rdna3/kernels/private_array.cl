#include "common.h"
/* a private array indexed at run time: clang keeps it in scratch (private segment) memory */
__kernel void private_array(__global int *out, __global const int *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  int t[64];
  for (int k = 0; k < 64; k++) t[k] = a[(i + k) % n] * k;
  uint j = (uint)a[i] & 63;
  out[i] = t[j] + t[(j * 7) & 63];
}
