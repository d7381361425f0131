#include "common.h"
/* returning atomics: min, max, and, or, xchg, cmpxchg; and a ticket counter */
__kernel void atomics(volatile __global atomic_int *acc, __global int *tickets, __global const int *a, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  int x = a[i];
  __opencl_atomic_fetch_min(&acc[0], x, memory_order_relaxed, memory_scope_device);
  __opencl_atomic_fetch_max(&acc[1], x, memory_order_relaxed, memory_scope_device);
  __opencl_atomic_fetch_or(&acc[2], 1 << (x & 31), memory_order_relaxed, memory_scope_device);
  __opencl_atomic_fetch_and(&acc[3], ~(1 << (i & 31)), memory_order_relaxed, memory_scope_device);
  tickets[i] = __opencl_atomic_fetch_add(&acc[4], 1, memory_order_relaxed, memory_scope_device);
  int expected = 0;
  __opencl_atomic_compare_exchange_strong(&acc[5 + (i & 3)], &expected, (int)i + 1,
                                          memory_order_relaxed, memory_order_relaxed, memory_scope_device);
}
