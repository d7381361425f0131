/* Short names the corpus kernels use, over the shipped OpenCL header (rdna3/include/driverless_cl.h:
   get_global_id & co. for clang-15 -nogpulib), so the corpus builds exactly as a user's kernel does. */
#include "../../../rdna3/include/driverless_cl.h"   /* relative to this file: no -I needed */

static inline uint lid(int d) { return (uint)get_local_id(d); }
static inline uint group_id(int d) { return (uint)get_group_id(d); }
static inline uint enqueued_local_size(int d) { return (uint)get_enqueued_local_size(d); }
static inline uint global_size(int d) { return (uint)get_global_size(d); }
static inline uint local_size(int d) { return (uint)get_local_size(d); }
static inline uint gid(int d) { return (uint)get_global_id(d); }
static inline void barrier_local(void) { barrier(CLK_LOCAL_MEM_FENCE); }
