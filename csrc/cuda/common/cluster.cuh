// Thread-block clusters (sm_90) as PTX wrappers: a block's rank in its cluster, the cluster barrier,
// and stores into (loads from) a partner block's shared memory (distributed shared memory). Older
// targets compile them to a trap: only kernels the host launches on sm_90 with a cluster dimension
// use them.
#pragma once

#include <cstdint>

namespace torchconv {
namespace cuda {

// The portable cluster size: the most blocks a cluster holds without opting into non-portable sizes
// (the GEMM's split reductions launch at most this many splits of a tile as one cluster).
constexpr int kMaxClusterSplits = 8;

__device__ __forceinline__ unsigned cluster_block_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
#else
  __trap();
  return 0;
#endif
}

// The cluster barrier in two halves: every thread of every block of the cluster arrives, then waits
// for all of them. `release` / `acquire` order this thread's shared-memory accesses of the cluster
// around it; the relaxed arrival orders nothing (a block announcing that it has started).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The shared::cluster address of `local` (a generic pointer into this block's shared memory) in the
// shared memory of the cluster's block `rank`.
__device__ __forceinline__ unsigned cluster_shared_address(const void* local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(unsigned(__cvta_generic_to_shared(local))), "r"(rank));
  return remote;
#else
  __trap();
  return 0;
#endif
}

__device__ __forceinline__ void store_cluster_shared(unsigned address, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
#else
  __trap();
#endif
}

// The same store counted on an mbarrier of the receiving block: 16 bytes of complete_tx on the
// mbarrier at `remote_bar` (a shared::cluster address in the same block as `address`). The receiver
// learns that the stores have landed by waiting on that mbarrier, with no cluster barrier, whose
// release would wait on a GPU-wide memory barrier.
__device__ __forceinline__ void store_cluster_shared_async(unsigned address, float4 v, unsigned remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   address),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_bar)
               : "memory");
#else
  __trap();
#endif
}

// `local` (a generic pointer into this block's shared memory) as a generic pointer to the same place
// in the shared memory of the cluster's block `rank`, formed once: loads through it and constant
// offsets from it need no address arithmetic each.
template <typename T>
__device__ __forceinline__ T* cluster_map_shared(T* local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t remote;
  asm("mapa.u64 %0, %1, %2;\n" : "=l"(remote) : "l"(reinterpret_cast<uint64_t>(local)), "r"(rank));
  return reinterpret_cast<T*>(remote);
#else
  __trap();
  return local;
#endif
}

}  // namespace cuda
}  // namespace torchconv
