// Hopper's asynchronous copies as PTX wrappers: the bulk copy (the copy engine moves a contiguous
// run of bytes into shared memory), the im2col tensor copy, and the shared-memory mbarrier that
// counts their bytes (a stage is ready once the phase that expected them completes). mbarriers exist
// from sm_80; waits on a phase's parity, transaction counts and the copies from sm_90 (older targets
// compile them to a trap: only the wgmma kernels use them).
#pragma once

#include <cstdint>

namespace torchconv {
namespace cuda {

// Before the first arrival: `count` arrivals complete each phase. Made visible to the other threads
// by a block barrier.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(unsigned(__cvta_generic_to_shared(bar))), "r"(count)
               : "memory");
}

// One arrival that also expects `bytes` more from asynchronous copies (complete_tx) in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   unsigned(__cvta_generic_to_shared(bar))),
               "r"(bytes)
               : "memory");
#endif
}

// A bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to this
// block's shared memory by the copy engine (sm_90): it writes through the async proxy, which the
// MMAs read through, and counts its bytes on `bar` when they have landed.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          unsigned(__cvta_generic_to_shared(dst))),
      "l"(src), "r"(bytes), "r"(unsigned(__cvta_generic_to_shared(bar)))
      : "memory");
#endif
}

// The bulk copy multicast (sm_90a, as the wgmma kernels that use it): the same `bytes` land at
// `dst`'s offset in the shared memory of every block of the cluster whose rank bit is set in
// `cta_mask`, each counting them on the mbarrier at `bar`'s offset in its own shared memory.
__device__ __forceinline__ void bulk_copy_to_shared_multicast(void* dst, const void* src, unsigned bytes,
                                                              uint64_t* bar, uint16_t cta_mask) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(unsigned(__cvta_generic_to_shared(dst))),
      "l"(src), "r"(bytes), "r"(unsigned(__cvta_generic_to_shared(bar))), "h"(cta_mask)
      : "memory");
#endif
}

// After mbarrier_init, before a cluster barrier: the initialized mbarriers become visible to the
// other blocks of the cluster (their copies and arrivals may target them once the barrier is passed).
__device__ __forceinline__ void mbarrier_init_fence_cluster() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival on the mbarrier at `bar`'s offset in the shared memory of the cluster's block `rank`
// (this block's own included). Its default semantics (release at CTA scope) suffice to say that this
// thread's reads of a stage are over where those reads were MMAs waited for (wgmma_wait): a
// cluster-scope release would add a GPU-wide memory barrier to every arrival.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(
          unsigned(__cvta_generic_to_shared(bar))),
      "r"(rank)
      : "memory");
#endif
}

// A tensor copy in im2col mode (sm_90): pixelsPerColumn pixels x channelsPerPixel channels (the
// tensor map `map`, a kernel parameter) of an NHWC tensor, starting at channel c of pixel (n, h, w)
// shifted by the filter tap's offsets (dw, dh), into `dst` in the map's swizzle; pixels outside the
// tensor are zero. The copy engine walks the map's bounding box, so a run of output positions that
// crosses rows and images is one copy. Its bytes are counted on `bar`.
__device__ __forceinline__ void tma_load_im2col(void* dst, const void* map, int c, int w, int h, int n, uint16_t dw,
                                                uint16_t dh, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2], {%7, %8};\n" ::"r"(unsigned(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(unsigned(__cvta_generic_to_shared(bar))), "r"(c), "r"(w), "r"(h),
      "r"(n), "h"(dw), "h"(dh)
      : "memory");
#endif
}

// A tiled tensor copy of a 2-D tensor map `map` (a kernel parameter): the box at element x of row y
// into `dst` in the map's swizzle, rows past the tensor zero; its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int x, int y, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          unsigned(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(unsigned(__cvta_generic_to_shared(bar))), "r"(x), "r"(y)
      : "memory");
#endif
}

// A tiled tensor copy of a 4-D tensor map `map` (a kernel parameter): the box at element (x, y, z, w)
// into `dst` in the map's swizzle, elements past the tensor zero; its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, int x, int y, int z, int w, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(
          unsigned(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(unsigned(__cvta_generic_to_shared(bar))), "r"(x), "r"(y), "r"(z), "r"(w)
      : "memory");
#endif
}

// One arrival (release at CTA scope) on this block's mbarrier `bar`.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(unsigned(__cvta_generic_to_shared(bar))) : "memory");
#endif
}

// An arrival on `bar` once every cp.async this thread has issued so far has landed, counted as one of
// the phase's expected arrivals (noinc: mbarrier_init counts such a thread).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(unsigned(__cvta_generic_to_shared(bar)))
               : "memory");
#endif
}

// A barrier of the first `threads` threads of the block (a multiple of 32) on hardware barrier `id`
// (1-15: __syncthreads takes 0), for kernels whose other warps take no part.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Waits (acquire) until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  const unsigned addr = unsigned(__cvta_generic_to_shared(bar));
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

}  // namespace cuda
}  // namespace torchconv
