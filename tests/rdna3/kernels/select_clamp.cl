#include "common.h"
/* selects and clamps that become v_cndmask / v_med3 / v_max / v_min */
__kernel void select_clamp(__global int *outi, __global float *outf, __global const int *a,
                           __global const float *f, int lo, int hi, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  int x = a[i];
  outi[2 * i + 0] = x < lo ? lo : (x > hi ? hi : x);
  outi[2 * i + 1] = x < 0 ? -x : x;
  float y = f[i];
  outf[i] = __builtin_fminf(__builtin_fmaxf(y, -1.0f), 1.0f) + (y > 0.5f ? 2.0f : 0.25f);
}
