// The sum of a split reduction's slices, in a fixed order (deterministic), shared by the algorithms
// that split a reduction across blocks (direct's and the GEMM's grad_weight, Winograd's dU).
#pragma once

#include <algorithm>
#include <cstdint>

#include <c10/cuda/CUDAException.h>

#include "launch.cuh"

namespace torchconv {
namespace cuda {

constexpr int kSliceSumThreads = 256;

// out[map.dst(e)] = sum over slices s of partial[s * slice + map.src(e)], for e < count. kLanes
// threads share an element when there are many slices: lane l adds slices l, l + kLanes, ... and
// the lanes are added in lane order through shared memory, so layers with few elements and
// hundreds of slices still keep many loads in flight. A warp covers consecutive elements of one
// slice (coalesced where map.src is). The order of the additions depends only on the shapes.
// out may be partial itself (an in-place sum into slice 0) when map.dst(e) == map.src(e).
template <typename T, int kLanes, typename Map>
__global__ void __launch_bounds__(kSliceSumThreads) sum_slices_kernel(const T* partial, T* out, int64_t count,
                                                                      int slices, int64_t slice, Map map) {
  constexpr int kPerBlock = kSliceSumThreads / kLanes;
  __shared__ T lane_sums[kLanes > 1 ? kSliceSumThreads : 1];
  const int slot = threadIdx.x % kPerBlock, lane = threadIdx.x / kPerBlock;
  for (int64_t base = int64_t(blockIdx.x) * kPerBlock; base < count; base += int64_t(gridDim.x) * kPerBlock) {
    const int64_t e = base + slot;
    T sum = T(0);
    if (e < count) {
      const T* src = partial + map.src(e);
      for (int s = lane; s < slices; s += kLanes) sum += src[s * slice];
    }
    if constexpr (kLanes == 1) {
      if (e < count) out[map.dst(e)] = sum;
    } else {
      lane_sums[threadIdx.x] = sum;
      __syncthreads();
      if (lane == 0 && e < count) {
        T total = lane_sums[slot];
#pragma unroll
        for (int l = 1; l < kLanes; ++l) total += lane_sums[l * kPerBlock + slot];
        out[map.dst(e)] = total;
      }
      __syncthreads();
    }
  }
}

// Element e at the same place in every slice and in the output.
struct IdentitySliceMap {
  __device__ int64_t src(int64_t e) const { return e; }
  __device__ int64_t dst(int64_t e) const { return e; }
};

// Launches sum_slices_kernel with 8 lanes per element from `many_slices` slices on, one below.
template <typename T, typename Map>
void launch_sum_slices(const T* partial, T* out, int64_t count, int slices, int64_t slice, const Map& map,
                       int many_slices) {
  if (count == 0) return;
  if (slices >= many_slices) {
    constexpr int kLanes = 8;
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(count, kSliceSumThreads / kLanes), 65535));
    sum_slices_kernel<T, kLanes, Map><<<blocks, kSliceSumThreads, 0, current_stream()>>>(partial, out, count, slices,
                                                                                          slice, map);
  } else {
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(count, kSliceSumThreads), 65535));
    sum_slices_kernel<T, 1, Map><<<blocks, kSliceSumThreads, 0, current_stream()>>>(partial, out, count, slices, slice,
                                                                                     map);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace torchconv
