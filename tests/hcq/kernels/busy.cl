/* A kernel that keeps the GPU busy for a while: n dependent multiply-adds (every work item the same). */
__kernel void busy(__global float *a, int n) {
  float x = a[0];
  for (int j = 0; j < n; j++) x = x * 1.0001f + 1.0f;
  a[0] = x;
}
