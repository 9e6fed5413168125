// A channels_last weight (K x R x S x C in memory) as the contiguous K x C x R x S weight that the
// filter relayouts read, by a kernel of ours (a trainable weight pays the copy on every call, and the
// library's passes launch only their own kernels).
#pragma once

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include "launch.cuh"

namespace torchconv {
namespace cuda {

// A block's share of the copy: `channels` consecutive channels of one filter, all their taps, staged
// in shared memory so that the reads run along the channels (the source's contiguous dimension) and
// the writes along the run of channels x taps, which is contiguous in the destination.
// A unit is at most one round of loads a thread (kWeightCopyLoadsInFlight each, issued together) but
// for filters of more taps than a round holds.
constexpr int kWeightCopyThreads = 256;
// A thread holds a round's values and their addresses (about 60 registers): four blocks an SM.
constexpr int kWeightCopyBlocksPerSm = 4;
constexpr int kWeightCopyLoadsInFlight = 8;
constexpr int kWeightCopyTileElems = kWeightCopyThreads * kWeightCopyLoadsInFlight;
constexpr int kWeightCopyMaxTileBytes = 48 * 1024;  // without opting in to more dynamic shared memory

// One unit of the copy: `width` channels from c0 of filter k, all their taps (elems elements, element
// i = t * width + c in load order), and the (tap, channel) step of a thread's successive elements.
template <typename E>
struct WeightCopyUnit {
  const E* s;  // tap t, channel c at s[t * C + c]
  E* d;        // channel c, tap t at d[c * taps + t]
  int width, elems, step_t, step_c;

  __device__ __forceinline__ WeightCopyUnit(const E* src, E* dst, int64_t unit, int runs, int C, int taps,
                                            int channels) {
    const int64_t k = unit / runs;
    const int c0 = int(unit - k * runs) * channels;
    width = min(channels, C - c0), elems = width * taps;
    s = src + k * taps * C + c0;
    d = dst + (k * C + c0) * taps;
    // A thread's element steps by the block's threads, a known (tap, channel) step: two divisions a
    // unit, none an element (a division by a runtime width is some 20 instructions, as many as the
    // rest of an element's work).
    step_t = kWeightCopyThreads / width, step_c = kWeightCopyThreads - step_t * width;
  }
};

// A thread's loads of one round of unit u (elements base + j * kWeightCopyThreads), issued together
// so that their latencies overlap; (t, c) is the thread's element at `base`, and stays so (the stores
// step from it again rather than hold eight tile slots in registers).
template <typename E>
__device__ __forceinline__ void load_weight_copy_round(const WeightCopyUnit<E>& u, int base, int C, int t, int c,
                                                       E (&v)[kWeightCopyLoadsInFlight]) {
#pragma unroll
  for (int j = 0; j < kWeightCopyLoadsInFlight; ++j) {
    if (base + j * kWeightCopyThreads < u.elems) v[j] = u.s[int64_t(t) * C + c];
    t += u.step_t, c += u.step_c;
    if (c >= u.width) c -= u.width, ++t;
  }
}

// The round's values into the tile ([channel][tap]); (t, c) advances to the thread's next round.
template <typename E>
__device__ __forceinline__ void stage_weight_copy_round(const WeightCopyUnit<E>& u, E* tile, int base, int taps, int& t,
                                                        int& c, const E (&v)[kWeightCopyLoadsInFlight]) {
#pragma unroll
  for (int j = 0; j < kWeightCopyLoadsInFlight; ++j) {
    if (base + j * kWeightCopyThreads < u.elems) tile[c * taps + t] = v[j];
    t += u.step_t, c += u.step_c;
    if (c >= u.width) c -= u.width, ++t;
  }
}

// Bit copies: the element type is only its size (float32, float64, float16, bfloat16 alike). A block
// walks its units (the grid gives each block as many); the first round of its next unit's loads is
// issued before the current unit's stores, so that their latency runs under the stores.
template <typename E>
__global__ void __launch_bounds__(kWeightCopyThreads)
    channels_last_weight_to_contiguous_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t K, int C, int taps,
                                              int channels) {
  extern __shared__ __align__(16) unsigned char weight_copy_smem[];
  E* tile = reinterpret_cast<E*>(weight_copy_smem);  // [channel][tap]
  const int runs = (C + channels - 1) / channels;
  const int64_t units = K * runs;
  int64_t unit = blockIdx.x;
  if (unit >= units) return;
  constexpr int kRound = kWeightCopyThreads * kWeightCopyLoadsInFlight;
  WeightCopyUnit<E> u(src, dst, unit, runs, C, taps, channels);
  int t = int(threadIdx.x) / u.width, c = int(threadIdx.x) - t * u.width;
  E v[kWeightCopyLoadsInFlight];
  load_weight_copy_round(u, int(threadIdx.x), C, t, c, v);
  while (true) {
    stage_weight_copy_round(u, tile, int(threadIdx.x), taps, t, c, v);
    for (int base = int(threadIdx.x) + kRound; base < u.elems; base += kRound) {  // filters of over kRound taps
      load_weight_copy_round(u, base, C, t, c, v);
      stage_weight_copy_round(u, tile, base, taps, t, c, v);
    }
    __syncthreads();
    const int64_t next = unit + gridDim.x;
    E* const d = u.d;
    const int elems = u.elems;
    if (next < units) {
      u = WeightCopyUnit<E>(src, dst, next, runs, C, taps, channels);
      t = int(threadIdx.x) / u.width, c = int(threadIdx.x) - t * u.width;
      load_weight_copy_round(u, int(threadIdx.x), C, t, c, v);
    }
    for (int i = threadIdx.x; i < elems; i += kWeightCopyThreads) d[i] = tile[i];
    __syncthreads();
    if (next >= units) return;
    unit = next;
  }
}

// Whether `w` (K x C x R x S) is a dense channels_last weight the kernel copies: one channel's taps
// within the tile's shared memory (filters of up to about 78 x 78 taps at 8 bytes an element).
inline bool copies_channels_last_weight(const at::Tensor& w) {
  return w.dim() == 4 && !w.is_contiguous() && w.is_contiguous(at::MemoryFormat::ChannelsLast) &&
         w.size(2) * w.size(3) * int64_t(w.element_size()) <= kWeightCopyMaxTileBytes;
}

// dst (a contiguous weight of src's sizes and dtype) = src, on the current stream: a weight that
// copies_channels_last_weight takes by the kernel, any other by ATen's copy.
inline void copy_into_contiguous_weight(const at::Tensor& src, at::Tensor& dst) {
  TORCH_INTERNAL_ASSERT(dst.is_contiguous() && dst.sizes() == src.sizes() && dst.scalar_type() == src.scalar_type());
  if (!copies_channels_last_weight(src)) {
    dst.copy_(src);
    return;
  }
  if (src.numel() == 0) return;
  const int64_t K = src.size(0);
  const int C = int(src.size(1)), taps = int(src.size(2) * src.size(3));
  // Units of equal channel counts: a filter's channels in as few units as fit the tile, split evenly
  // (512 channels of 9 taps as 3 x 171, not 227 + 227 + 58).
  const int most = std::max(1, std::min(C, kWeightCopyTileElems / taps));
  const int runs = (C + most - 1) / most, channels = (C + runs - 1) / runs;
  const size_t smem = size_t(channels) * taps * src.element_size();
  // The blocks the SMs hold at once, each given as many units as the others (one fewer at most): no
  // tail wave of blocks that start after the rest have finished.
  const int64_t units = K * ((C + channels - 1) / channels);
  const int64_t resident = int64_t(sm_count()) * kWeightCopyBlocksPerSm;
  const int64_t per_block = (units + resident - 1) / resident;
  const unsigned blocks = unsigned((units + per_block - 1) / per_block);
  auto launch = [&](auto element) {
    using E = decltype(element);
    channels_last_weight_to_contiguous_kernel<E><<<blocks, kWeightCopyThreads, smem, current_stream()>>>(
        static_cast<const E*>(src.const_data_ptr()), static_cast<E*>(dst.mutable_data_ptr()), K, C, taps, channels);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  switch (src.element_size()) {
    case 2: return launch(uint16_t{});
    case 4: return launch(uint32_t{});
    case 8: return launch(uint64_t{});
    default: TORCH_INTERNAL_ASSERT(false, "a weight of ", src.element_size(), "-byte elements");
  }
}

// `weight` as a contiguous K x C x R x S tensor: itself where it is one, else a copy
// (copy_into_contiguous_weight).
inline at::Tensor contiguous_weight(const at::Tensor& weight) {
  if (weight.is_contiguous()) return weight;
  at::Tensor out = at::empty(weight.sizes(), weight.options().memory_format(at::MemoryFormat::Contiguous));
  copy_into_contiguous_weight(weight, out);
  return out;
}

}  // namespace cuda
}  // namespace torchconv
