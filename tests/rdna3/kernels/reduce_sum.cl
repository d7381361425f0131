#include "common.h"
/* LDS tree reduction per workgroup, then one global atomic per workgroup */
__kernel void reduce_sum(volatile __global atomic_int *total, __global int *partial, __global const int *a, uint n) {
  __local int buf[256];
  uint l = lid(0), ls = local_size(0), i = gid(0);
  buf[l] = i < n ? a[i] : 0;
  barrier_local();
  /* a power-of-two tree over the enqueued size; slots past a partial group count as 0 */
  for (uint s = enqueued_local_size(0) / 2; s > 0; s >>= 1) {
    if (l < s && l + s < ls) buf[l] += buf[l + s];
    barrier_local();
  }
  if (l == 0) {
    partial[group_id(0)] = buf[0];
    __opencl_atomic_fetch_add(total, buf[0], memory_order_relaxed, memory_scope_device);
  }
}
