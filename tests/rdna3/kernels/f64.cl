#include "common.h"
__kernel void f64(__global double *out, __global const double *a, __global const double *b, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  double x = a[i], y = b[i];
  out[4 * i + 0] = x + y;
  out[4 * i + 1] = x * y;
  out[4 * i + 2] = __builtin_fma(x, y, x);
  out[4 * i + 3] = x / y;
}
