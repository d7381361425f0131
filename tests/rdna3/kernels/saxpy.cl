#include "common.h"
__kernel void saxpy(__global float *y, __global const float *x, float alpha, uint n) {
  uint i = gid(0);
  if (i < n) y[i] = alpha * x[i] + y[i];
}
