// The sum of a split reduction's slices, in a fixed order (deterministic), shared by the algorithms
// that split a reduction across blocks (direct's and the GEMM's grad_weight, Winograd's dU). On sm_90
// the sum is a programmatic dependent of the kernel that wrote the slices (dependent_launch.cuh): it is
// launched as that kernel's blocks exit and waits for their writes, so the GPU does not idle between
// the two for the sum's launch. The kernels that write slices do not let it start earlier
// (allow_dependents): its blocks would then wait beside theirs, which slowed one depthwise grad_weight
// and gained nothing over this on the others (docs/depthwise.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <c10/cuda/CUDAException.h>

#include "dependent_launch.cuh"
#include "launch.cuh"
#include "mma.cuh"

namespace torchconv {
namespace cuda {

constexpr int kSliceSumThreads = 256;

// out[map.dst(e)] = sum over slices s of partial[s * slice + map.src(e)], for e < count, in Out
// (T, or the 16-bit weight's type for a float32 sum). kLanes threads share an element when there are
// many slices: lane l adds slices l, l + kLanes, ... and the lanes are added in lane order through
// shared memory, so layers with few elements and hundreds of slices still keep many loads in
// flight; each lane issues 4 slices' loads before adding them (the adds keep their order). A
// warp covers consecutive elements of one slice (coalesced where map.src is). The order of the
// additions depends only on the shapes and kLanes. out may be partial itself (an in-place sum into
// slice 0) when map.dst(e) == map.src(e). Nothing is read or written before grid_dependency_wait.
template <typename T, int kLanes, typename Map, typename Out = T>
__global__ void __launch_bounds__(kSliceSumThreads) sum_slices_kernel(const T* partial, Out* out, int64_t count,
                                                                      int slices, int64_t slice, Map map) {
  grid_dependency_wait();  // the slices, from the kernel before
  constexpr int kPerBlock = kSliceSumThreads / kLanes;
  __shared__ T lane_sums[kLanes > 1 ? kSliceSumThreads : 1];
  const int slot = threadIdx.x % kPerBlock, lane = threadIdx.x / kPerBlock;
  const auto store = [&](int64_t e, T v) {
    if constexpr (std::is_same_v<Out, T>) out[map.dst(e)] = v;
    else out[map.dst(e)] = from_float<Out>(v);
  };
  for (int64_t base = int64_t(blockIdx.x) * kPerBlock; base < count; base += int64_t(gridDim.x) * kPerBlock) {
    const int64_t e = base + slot;
    T sum = T(0);
    if (e < count) {
      const T* src = partial + map.src(e);
      int s = lane;
      for (; s + 3 * kLanes < slices; s += 4 * kLanes) {
        T v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = src[(s + j * kLanes) * slice];
#pragma unroll
        for (int j = 0; j < 4; ++j) sum += v[j];
      }
      for (; s < slices; s += kLanes) sum += src[s * slice];
    }
    if constexpr (kLanes == 1) {
      if (e < count) store(e, sum);
    } else {
      lane_sums[threadIdx.x] = sum;
      __syncthreads();
      if (lane == 0 && e < count) {
        T total = lane_sums[slot];
#pragma unroll
        for (int l = 1; l < kLanes; ++l) total += lane_sums[l * kPerBlock + slot];
        store(e, total);
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

// Launches sum_slices_kernel with 8 lanes per element from `many_slices` slices on, 32 from
// `very_many_slices` on (for few elements: 32 lanes keep 4 times the threads busy), one below; on sm_90
// as a programmatic dependent of the kernel before it on the stream.
template <typename T, typename Map, typename Out = T>
void launch_sum_slices(const T* partial, Out* out, int64_t count, int slices, int64_t slice, const Map& map,
                       int many_slices, int very_many_slices = std::numeric_limits<int>::max()) {
  if (count == 0) return;
  const auto launch = [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(count, kSliceSumThreads / kLanes), 65535));
    launch_dependent(sum_slices_kernel<T, kLanes, Map, Out>, dim3(blocks), dim3(kSliceSumThreads), partial, out, count,
                     slices, slice, map);
  };
  if (slices >= very_many_slices) launch(std::integral_constant<int, 32>{});
  else if (slices >= many_slices) launch(std::integral_constant<int, 8>{});
  else launch(std::integral_constant<int, 1>{});
}

}  // namespace cuda
}  // namespace torchconv
