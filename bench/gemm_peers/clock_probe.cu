// The clock probe of peers.py (ClockProbe): its PTX there is `nvcc -arch=sm_90 -ptx` of this file
// (CUDA 13.0), tidied. Kept here so the PTX can be regenerated and read as C.
// One thread: the SM clock over a window of the GPU's own nanosecond timer.
extern "C" __global__ void ktune_clock_probe(unsigned long long* out, unsigned long long window_ns) {
  unsigned long long t, t0, t1, c0, c1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0)); } while (t0 == t);  // a tick's edge
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while (t1 - t0 < window_ns);
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1));
  out[0] = t1 - t0;
  out[1] = c1 - c0;
  out[2] = t0;
}
