#include "common.h"
/* global atomic add with heavy address conflicts */
__kernel void histogram(volatile __global atomic_uint *bins, __global const uint *a, uint nbins, uint n) {
  uint i = gid(0);
  if (i < n)
    __opencl_atomic_fetch_add(&bins[a[i] % nbins], 1u, memory_order_relaxed, memory_scope_device);
}
