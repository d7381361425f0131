/* Kernels that go wrong on purpose: one spins until a flag no one sets, one stores to an address it is given. */
__kernel void spin(volatile __global unsigned int *flag) {
  while (flag[0] == 0) {}
}
__kernel void poke(unsigned long addr, unsigned int v) {
  *(__global unsigned int *)addr = v;
}
