// ktune_tma.cuh — the tensor-map (TMA) vocabulary of templates that take `tensor_map` arguments
// (docs/templates.md, "Tensor maps"): the kernel-side parameter type and PTX wrappers for the bulk
// tensor copies, their mbarriers and thread-block clusters. sm_90+.
//
// Header-free like ktune_common.cuh (NVRTC cannot include <cuda.h>, where CUtensorMap lives). The
// worker encodes each map with cuTensorMapEncodeTiled and passes its 128 bytes by value; a kernel
// takes it as `const __grid_constant__ ktune_tensor_map` and only ever uses its address (TMA
// instructions read the map from the parameter space). A separate header so that templates
// without tensor maps keep their hash (a template's hash covers every header it lists).
#pragma once

// The opaque 128-byte CUtensorMap, as a kernel parameter (64-byte alignment, as TMA requires).
struct alignas(64) ktune_tensor_map {
  unsigned long long opaque[16];
};

namespace ktune_tma {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes barrier initialisation visible to the async proxy (the TMA unit completes on them) and
// to the other CTAs of a cluster.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives on the barrier and raises its expected transaction count by `bytes`.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void prefetch_tensormap(const ktune_tensor_map* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}
// 2-D TMA load of the box at (x = innermost coordinate, y) into shared memory at dst; completes
// the box's bytes on the barrier's transaction count (out-of-bounds elements are filled as the
// map says and still counted).
__device__ __forceinline__ void tma_load_2d(unsigned dst, const ktune_tensor_map* map, int x, int y,
                                            unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// Multicast variant: the box lands at the same shared offset in every CTA of `mask` (cluster
// ranks) and completes the transaction on the barrier at the same offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const ktune_tensor_map* map, int x,
                                                      int y, unsigned bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}

// ---- TMA stores (shared -> global) ----
// Orders this thread's generic-proxy writes to shared memory before later async-proxy reads of it
// (a TMA store of what the thread just wrote): every writing thread fences, then the threads sync,
// then one thread issues the store.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// 2-D TMA store of the box at (x, y) from shared memory at src; elements outside the map's dims
// are not written. Completes asynchronously: commit_group / wait_group_read below.
__device__ __forceinline__ void tma_store_2d(const ktune_tensor_map* map, unsigned src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<unsigned long long>(map)),
               "r"(src), "r"(x), "r"(y)
               : "memory");
}
// Closes the bulk group of the stores this thread issued since the last commit.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed bulk groups still read their shared source
// (the source of the others may be overwritten; their global writes may still be in flight).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// ---- thread-block clusters ----
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_nctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
// Arrives on the barrier at the same shared offset in CTA `rank` of the cluster. Release at CTA
// scope, as a local arrive: a .release.cluster arrive costs a cluster-scope MEMBAR per call
// (bench/NOTES.md, TMA prototype, device run 2: 0.56x cuBLAS).
__device__ __forceinline__ void mbar_arrive_remote(unsigned bar, unsigned rank) {
  asm volatile(
      "{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; "
      "mbarrier.arrive.shared::cluster.b64 _, [ra]; }\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The shared-memory address of the same offset in CTA `rank` of the cluster (distributed shared
// memory), for ld_cluster_f4.
__device__ __forceinline__ unsigned cluster_map(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Volatile with a memory clobber: neither may move across a cluster_sync.
__device__ __forceinline__ float4 ld_cluster_f4(unsigned addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_f4(unsigned addr, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

}  // namespace ktune_tma
