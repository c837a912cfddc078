// A test template of the tensor-map path (tests/tuner/gpu_test.cc, tuning_job_test.cc): y = x,
// each BOX_R x 32 tile of x read by one TMA load (ktune_tensor_map, mbarrier) and written back
// with ordinary stores. Blocks walk tiles blockIdx.x, + gridDim.x, ... (a persistent grid when
// the manifest sizes it by max_active_clusters); CLUSTER > 1 checks it runs in clusters of that
// size (a launch without the cluster attribute traps, i.e. crashes).
#include "ktune_common.cuh"
#include "ktune_tma.cuh"

template <int BOX_R, int CLUSTER>
__global__ void __launch_bounds__(128) ktune_tma_copy(const float* x, const __grid_constant__ ktune_tensor_map tmx,
                                                      float* y, int rows, int cols) {
  extern __shared__ __align__(128) unsigned char smem[];  // BOX_R rows of 128 B, then the barrier
  (void)x;  // read through tmx; the reference kernel reads it directly
  const unsigned raw = ktune_tma::smem_u32(smem);
  const unsigned pad = ((raw + 127u) & ~127u) - raw;
  const unsigned tile = raw + pad, bar = tile + BOX_R * 128;
  const float* s = reinterpret_cast<const float*>(smem + pad);
  if (CLUSTER > 1 && ktune_tma::cluster_nctarank() != CLUSTER) __trap();
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    ktune_tma::prefetch_tensormap(&tmx);
    ktune_tma::mbar_init(bar, 1);
    ktune_tma::fence_barrier_init();
  }
  __syncthreads();
  const int tiles_c = ktune_dev::ceil_div(cols, 32);
  const int tiles = ktune_dev::ceil_div(rows, BOX_R) * tiles_c;
  unsigned phase = 0;
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
    const int r0 = (t / tiles_c) * BOX_R, c0 = (t % tiles_c) * 32;
    if (tid == 0) {
      ktune_tma::mbar_arrive_expect_tx(bar, BOX_R * 128);
      ktune_tma::tma_load_2d(tile, &tmx, c0, r0, bar);
    }
    ktune_tma::mbar_wait(bar, phase);
    phase ^= 1;
    for (int i = tid; i < BOX_R * 32; i += 128) {
      const int r = r0 + i / 32, c = c0 + i % 32;
      if (r < rows && c < cols) y[static_cast<long long>(r) * cols + c] = s[i];
    }
    __syncthreads();  // the tile is refilled next
  }
}

__global__ void ktune_tma_copy_ref(const float* x, const ktune_tensor_map, float* y, int rows, int cols) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < static_cast<long long>(rows) * cols) y[i] = x[i];
}
