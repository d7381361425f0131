#include "common.h"
/* a 3D grid: every work-item writes its packed ids */
__kernel void grid3d(__global uint *out, uint nx, uint ny, uint nz) {
  uint x = gid(0), y = gid(1), z = gid(2);
  if (x < nx && y < ny && z < nz) {
    uint idx = (z * ny + y) * nx + x;
    out[2 * idx + 0] = lid(0) | lid(1) << 8 | lid(2) << 16;
    out[2 * idx + 1] = group_id(0) | group_id(1) << 8 | group_id(2) << 16;
  }
}
