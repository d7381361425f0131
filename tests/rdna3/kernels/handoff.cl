#include "common.h"
/* inter-workgroup handoff: workgroup 0 spins until the last workgroup publishes a value, which
   needs the waves of different workgroups to make progress side by side */
__kernel void handoff(volatile __global atomic_int *flag, __global int *out, uint n) {
  uint g = group_id(0);
  uint last = (global_size(0) + enqueued_local_size(0) - 1) / enqueued_local_size(0) - 1;
  if (g == last && lid(0) == 0) {
    out[1] = 42;
    __opencl_atomic_store(flag, 1, memory_order_release, memory_scope_device);
  } else if (g == 0 && lid(0) == 0) {
    while (__opencl_atomic_load(flag, memory_order_acquire, memory_scope_device) == 0) {}
    out[0] = out[1] + 1;
  }
}
