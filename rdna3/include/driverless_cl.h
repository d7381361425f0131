/* The OpenCL C work-item and synchronisation functions for kernels built with
   clang-15 -target amdgcn-amd-amdhsa -nogpulib, which links no device library: clang declares these
   (opencl-c-base.h) but nothing defines them. Here they read what the hardware hands each wave and the
   hsa_kernel_dispatch_packet behind the dispatch pointer (LLVM AMDGPUUsage, "Initial Kernel Execution
   State"; hsa.h for the packet layout). rdna3.opencl.compile_opencl force-includes this file, so
   plain OpenCL C needs no include line.

   Each is `extern inline` with gnu_inline and always_inline: inlined at every -O level and never
   emitted as a symbol of its own, so the code object holds only the kernels. */
#ifndef DRIVERLESS_CL_H
#define DRIVERLESS_CL_H

#define DRIVERLESS_CL_FN __attribute__((overloadable, always_inline, gnu_inline)) extern inline

/* hsa_kernel_dispatch_packet_t: u16 header, u16 setup (dimensions in bits 0..1), u16 workgroup_size_x/y/z,
   u16 reserved, u32 grid_size_x/y/z (in work-items) */
#define DRIVERLESS_PACKET_U16(i) (((__constant ushort *)__builtin_amdgcn_dispatch_ptr())[i])
#define DRIVERLESS_PACKET_U32(i) (((__constant uint *)__builtin_amdgcn_dispatch_ptr())[i])

DRIVERLESS_CL_FN uint get_work_dim(void) { return DRIVERLESS_PACKET_U16(1) & 3; }

/* The sums are done in 32 bits (grid sizes are u32 in the packet, so no id overflows them) and widened
   on return: 64-bit index arithmetic would cost a 64-bit multiply and compare in every kernel. */
DRIVERLESS_CL_FN uint driverless_local_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y()
       : d == 2 ? __builtin_amdgcn_workitem_id_z() : 0;
}
DRIVERLESS_CL_FN uint driverless_group_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y()
       : d == 2 ? __builtin_amdgcn_workgroup_id_z() : 0;
}
DRIVERLESS_CL_FN uint driverless_enqueued_local_size(uint d) { return d < 3 ? DRIVERLESS_PACKET_U16(2 + d) : 1; }
DRIVERLESS_CL_FN uint driverless_global_size(uint d) { return d < 3 ? DRIVERLESS_PACKET_U32(3 + d) : 1; }
/* OpenCL 2.0 non-uniform work-groups: the last one along a dimension may be partial. */
DRIVERLESS_CL_FN uint driverless_local_size(uint d) {
  uint e = driverless_enqueued_local_size(d), rest = driverless_global_size(d) - driverless_group_id(d) * e;
  return rest < e ? rest : e;
}
DRIVERLESS_CL_FN uint driverless_global_id(uint d) {
  return driverless_group_id(d) * driverless_enqueued_local_size(d) + driverless_local_id(d);
}

DRIVERLESS_CL_FN size_t get_local_id(uint d) { return driverless_local_id(d); }
DRIVERLESS_CL_FN size_t get_group_id(uint d) { return driverless_group_id(d); }
DRIVERLESS_CL_FN size_t get_enqueued_local_size(uint d) { return driverless_enqueued_local_size(d); }
DRIVERLESS_CL_FN size_t get_global_size(uint d) { return driverless_global_size(d); }
DRIVERLESS_CL_FN size_t get_global_offset(uint d) { return 0; }   /* the packet has no offsets */
DRIVERLESS_CL_FN size_t get_local_size(uint d) { return driverless_local_size(d); }
DRIVERLESS_CL_FN size_t get_num_groups(uint d) {
  uint e = driverless_enqueued_local_size(d);
  return (driverless_global_size(d) + e - 1) / e;
}
DRIVERLESS_CL_FN size_t get_global_id(uint d) { return driverless_global_id(d); }
DRIVERLESS_CL_FN size_t get_global_linear_id(void) {
  return driverless_global_id(0) + driverless_global_size(0) * (driverless_global_id(1)
         + driverless_global_size(1) * driverless_global_id(2));
}
DRIVERLESS_CL_FN size_t get_local_linear_id(void) {
  return driverless_local_id(0) + driverless_local_size(0) * (driverless_local_id(1)
         + driverless_local_size(1) * driverless_local_id(2));
}

/* barrier: every work-item of the group reaches it, with memory ordered at work-group scope (the fence
   pair around s_barrier is what LLVM's AMDGPU memory model asks for; AMDGPUUsage "Memory Model GFX11"). */
DRIVERLESS_CL_FN void barrier(cl_mem_fence_flags flags) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
DRIVERLESS_CL_FN void work_group_barrier(cl_mem_fence_flags flags) { barrier(flags); }

#endif
