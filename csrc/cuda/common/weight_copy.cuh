// A channels_last weight (K x R x S x C in memory) as the contiguous K x C x R x S weight that the
// filter relayouts read, by a kernel of ours (a trainable weight pays the copy on every call, and the
// library's passes launch only their own kernels).
#pragma once

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include "../../conv_shape.h"
#include "launch.cuh"

namespace torchconv {
namespace cuda {

// A block's share of the copy: `channels` consecutive channels of one filter, all their taps, staged
// in shared memory so that the reads run along the channels (the source's contiguous dimension) and
// the writes along the run of channels x taps, which is contiguous in the destination.
// A unit is at most one round of loads a thread (kWeightCopyLoadsInFlight each, issued together), so
// that a block waits for the memory once a unit; a weight of many filters still fills the SMs.
constexpr int kWeightCopyThreads = 256;
constexpr int kWeightCopyLoadsInFlight = 8;
constexpr int kWeightCopyTileElems = kWeightCopyThreads * kWeightCopyLoadsInFlight;
constexpr int kWeightCopyMaxTileBytes = 48 * 1024;  // without opting in to more dynamic shared memory

// Bit copies: the element type is only its size (float32, float64, float16, bfloat16 alike).
template <typename E>
__global__ void __launch_bounds__(kWeightCopyThreads)
    channels_last_weight_to_contiguous_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t K, int C, int taps,
                                              int channels) {
  extern __shared__ __align__(16) unsigned char weight_copy_smem[];
  E* tile = reinterpret_cast<E*>(weight_copy_smem);  // [channel][tap]
  const int runs = (C + channels - 1) / channels;
  for (int64_t unit = blockIdx.x; unit < K * runs; unit += gridDim.x) {
    const int64_t k = unit / runs;
    const int c0 = int(unit - k * runs) * channels;
    const int width = min(channels, C - c0), elems = width * taps;
    const E* s = src + k * taps * C + c0;  // tap t, channel c at s[t * C + c]
    E* d = dst + (k * C + c0) * taps;      // channel c, tap t at d[c * taps + t]
    // A thread's element i = t * width + c steps by the block's threads, a known (tap, channel) step:
    // two divisions a unit, none an element (a division by a runtime width is some 20 instructions,
    // as many as the rest of an element's work). Its loads are issued kWeightCopyLoadsInFlight
    // together before their stores, so that their latencies overlap (one round for a unit of at most
    // kWeightCopyTileElems elements).
    const int step_t = kWeightCopyThreads / width, step_c = kWeightCopyThreads - step_t * width;
    int t = int(threadIdx.x) / width, c = int(threadIdx.x) - t * width;
    for (int base = int(threadIdx.x); base < elems; base += kWeightCopyThreads * kWeightCopyLoadsInFlight) {
      E v[kWeightCopyLoadsInFlight];
      int at[kWeightCopyLoadsInFlight];
#pragma unroll
      for (int j = 0; j < kWeightCopyLoadsInFlight; ++j) {
        at[j] = c * taps + t;
        if (base + j * kWeightCopyThreads < elems) v[j] = s[int64_t(t) * C + c];
        t += step_t, c += step_c;
        if (c >= width) c -= width, ++t;
      }
#pragma unroll
      for (int j = 0; j < kWeightCopyLoadsInFlight; ++j)
        if (base + j * kWeightCopyThreads < elems) tile[at[j]] = v[j];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < elems; i += kWeightCopyThreads) d[i] = tile[i];
    __syncthreads();
  }
}

// The same copy by 16-byte words where a word holds kWord channels of one tap in the source and kWord
// consecutive elements of the run in the destination (C and every unit's channels multiples of a
// word, both tensors on 16-byte boundaries). A thread loads up to kWeightCopyWordsInFlight words of
// its unit at once (16 bytes each, where the element copy's eight loads hold 16 bytes of 16-bit
// elements) into the tile in the source's order ([tap][channel], rows kWord elements longer than the
// unit's channels so that the reads below spread over the banks), then assembles whole words of the
// run, element by element, and stores them. A unit is at most a round of those words, five a thread
// so that a filter of 512 channels x 3 x 3 taps is one unit at 32 bits as at 16 (1152 and 576 words):
// 512 such filters are one wave of blocks, the whole weight in flight at once.
constexpr int kWeightCopyWordsInFlight = 5;
constexpr int kWeightCopyUnitWords = kWeightCopyThreads * kWeightCopyWordsInFlight;
template <typename E>
__global__ void __launch_bounds__(kWeightCopyThreads)
    channels_last_weight_to_contiguous_words_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t K, int C,
                                                    int taps, int channels) {
  constexpr int kWord = 16 / int(sizeof(E));
  extern __shared__ __align__(16) unsigned char weight_copy_smem[];
  E* tile = reinterpret_cast<E*>(weight_copy_smem);  // [tap][channel], rows of ld elements
  const int ld = channels + kWord;
  const int runs = (C + channels - 1) / channels;
  for (int64_t unit = blockIdx.x; unit < K * runs; unit += gridDim.x) {
    const int64_t k = unit / runs;
    const int c0 = int(unit - k * runs) * channels;
    const int width = min(channels, C - c0), words_per_tap = width / kWord, words = words_per_tap * taps;
    const E* s = src + k * taps * C + c0;  // tap t, channel c at s[t * C + c]
    E* d = dst + (k * C + c0) * taps;      // channel c, tap t at d[c * taps + t]
    // Source word i = t * words_per_tap + w, a known (tap, word) step by the block's threads (as the
    // element copy's): all loads issued, then their stores into the tile.
    {
      const int step_t = kWeightCopyThreads / words_per_tap, step_w = kWeightCopyThreads - step_t * words_per_tap;
      int t = int(threadIdx.x) / words_per_tap, w = int(threadIdx.x) - t * words_per_tap;
      uint4 v[kWeightCopyWordsInFlight];
      int at[kWeightCopyWordsInFlight];
#pragma unroll
      for (int j = 0; j < kWeightCopyWordsInFlight; ++j) {
        at[j] = t * ld + w * kWord;
        if (int(threadIdx.x) + j * kWeightCopyThreads < words)
          v[j] = *reinterpret_cast<const uint4*>(s + int64_t(t) * C + w * kWord);
        t += step_t, w += step_w;
        if (w >= words_per_tap) w -= words_per_tap, ++t;
      }
#pragma unroll
      for (int j = 0; j < kWeightCopyWordsInFlight; ++j)
        if (int(threadIdx.x) + j * kWeightCopyThreads < words) *reinterpret_cast<uint4*>(tile + at[j]) = v[j];
    }
    __syncthreads();
    // Destination word j holds run elements j * kWord ..: channel c, tap t from (c, t) of its first,
    // stepped as the loads' by the block's threads.
    {
      constexpr int kStep = kWeightCopyThreads * kWord;
      const int step_c = kStep / taps, step_t = kStep - step_c * taps;
      int c = int(threadIdx.x) * kWord / taps, t = int(threadIdx.x) * kWord - c * taps;
      for (int j = threadIdx.x; j < words; j += kWeightCopyThreads) {
        union {
          uint4 u;
          E e[kWord];
        } out;
        int cc = c, tt = t;
#pragma unroll
        for (int i = 0; i < kWord; ++i) {
          out.e[i] = tile[tt * ld + cc];
          if (++tt == taps) tt = 0, ++cc;
        }
        reinterpret_cast<uint4*>(d)[j] = out.u;
        c += step_c, t += step_t;
        if (t >= taps) t -= taps, ++c;
      }
    }
    __syncthreads();
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
  const bool aligned = aligned_to(src.const_data_ptr(), 16) && aligned_to(dst.const_data_ptr(), 16);
  // Units of equal channel counts: a filter's `items` (channels, or words of them) in as few units of
  // at most `most` as there must be, split evenly (512 channels of 9 taps as 3 x 171, not 227 + 227 +
  // 58); the grid at most 16 blocks an SM, walking the units.
  auto even_share = [](int items, int most) {
    const int units = (items + most - 1) / most;
    return (items + units - 1) / units;
  };
  auto grid = [&](int channels) {
    return unsigned(std::min<int64_t>(K * ((C + channels - 1) / channels), int64_t(sm_count()) * 16));
  };
  auto launch = [&](auto element) {
    using E = decltype(element);
    constexpr int kWord = 16 / int(sizeof(E));
    const E* from = static_cast<const E*>(src.const_data_ptr());
    E* to = static_cast<E*>(dst.mutable_data_ptr());
    // By words where C is whole words, both tensors on 16-byte boundaries and a word of channels of
    // every tap fits a unit (whose tile then holds at most kWeightCopyUnitWords words and as many of
    // row padding: 40 KB).
    const int most_words = kWeightCopyUnitWords / taps;
    if (aligned && C % kWord == 0 && most_words >= 1) {
      const int channels = even_share(C / kWord, most_words) * kWord;
      const size_t smem = size_t(taps) * (channels + kWord) * sizeof(E);
      channels_last_weight_to_contiguous_words_kernel<E>
          <<<grid(channels), kWeightCopyThreads, smem, current_stream()>>>(from, to, K, C, taps, channels);
    } else {
      const int channels = even_share(C, std::max(1, std::min(C, kWeightCopyTileElems / taps)));
      const size_t smem = size_t(channels) * taps * sizeof(E);
      channels_last_weight_to_contiguous_kernel<E>
          <<<grid(channels), kWeightCopyThreads, smem, current_stream()>>>(from, to, K, C, taps, channels);
    }
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
  at::Tensor out = new_workspace(weight.sizes(), weight.options().memory_format(at::MemoryFormat::Contiguous));
  copy_into_contiguous_weight(weight, out);
  return out;
}

}  // namespace cuda
}  // namespace torchconv
