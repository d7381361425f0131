#include "common.h"
#define T 8
/* C[M,N] = A[M,K] @ B[K,N] with T x T tiles staged in LDS; workgroups of up to T x T work-items.
   A partial workgroup at the matrix edge still fills whole tiles: each work-item loads a strided
   share of its tile row/column. */
__kernel void matmul_tiled(__global float *C, __global const float *A, __global const float *B,
                           uint M, uint N, uint K) {
  __local float As[T][T], Bs[T][T];
  uint tx = lid(0), ty = lid(1), lx = local_size(0), ly = local_size(1);
  uint col = gid(0), row = gid(1);
  float acc = 0.0f;
  for (uint t = 0; t < K; t += T) {
    for (uint k = tx; k < T; k += lx)
      As[ty][k] = (row < M && t + k < K) ? A[row * K + t + k] : 0.0f;
    for (uint k = ty; k < T; k += ly)
      Bs[k][tx] = (col < N && t + k < K) ? B[(t + k) * N + col] : 0.0f;
    barrier_local();
    for (uint k = 0; k < T; k++) acc += As[ty][k] * Bs[k][tx];
    barrier_local();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
