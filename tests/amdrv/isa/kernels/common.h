/* Work-item functions for clang-15 -nogpulib: no device library is linked, so these read the
   hardware registers and the hsa_kernel_dispatch_packet directly (AMDGPUUsage, "Initial Kernel
   Execution State"). */
typedef unsigned int uint;
typedef unsigned long ulong;
typedef unsigned short ushort;
typedef unsigned char uchar;

static inline uint lid(int d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x()
       : d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z();
}
static inline uint group_id(int d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x()
       : d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z();
}
/* packet: u16 header, u16 setup, u16 workgroup_size_x/y/z, u16 reserved, u32 grid_size_x/y/z */
static inline uint enqueued_local_size(int d) {
  return ((__constant ushort *)__builtin_amdgcn_dispatch_ptr())[2 + d];
}
static inline uint global_size(int d) {
  return ((__constant uint *)__builtin_amdgcn_dispatch_ptr())[3 + d];
}
/* OpenCL 2.0 non-uniform workgroups: the last one along a dimension may be partial. */
static inline uint local_size(int d) {
  uint e = enqueued_local_size(d), rest = global_size(d) - group_id(d) * e;
  return rest < e ? rest : e;
}
static inline uint gid(int d) { return group_id(d) * enqueued_local_size(d) + lid(d); }
static inline void barrier_local(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
