#include "common.h"
/* int<->float conversions and byte/short memory */
__kernel void convert(__global float *outf, __global int *outi, __global uchar *outb,
                      __global const uchar *b, __global const short *s, __global const float *f, uint n) {
  uint i = gid(0);
  if (i >= n) return;
  outf[2 * i + 0] = (float)b[i] + (float)s[i];
  outf[2 * i + 1] = (float)(uint)(b[i] * 1000003u);
  outi[2 * i + 0] = (int)f[i];
  outi[2 * i + 1] = (int)(uint)__builtin_fabsf(f[i]);
  outb[i] = (uchar)(b[i] + s[i]);
}
