// Filters re-laid for a launch -- one phase's taps of a strided grad_input, transposed, reversed,
// padded -- written once for every algorithm: each gives the layout as a map from an element of the
// re-laid filter to the weight element it holds.
#pragma once

#include <cstdint>

#include <c10/cuda/CUDAException.h>

#include "dependent_launch.cuh"
#include "launch.cuh"

namespace torchconv {
namespace cuda {

// Each element copied as it is.
struct SameValue {
  template <typename T>
  __device__ T operator()(T v) const {
    return v;
  }
};

// out[e] = value(w[map.src(e)]) (as U) for e < total, or zero where map.src(e) < 0 (padding).
// A kernel launched after it as a programmatic dependent may start at once: it reads nothing of the
// re-layout's before its grid_dependency_wait, and the re-layout itself was launched in stream order.
template <typename T, typename U, typename Map, typename Value>
__global__ void relayout_filter_kernel(const T* __restrict__ w, U* __restrict__ out, int64_t total, Map map, Value value) {
  allow_dependents();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t src = map.src(e);
    out[e] = src >= 0 ? static_cast<U>(value(w[src])) : U(0);
  }
}

// U may differ from T: the NHWC depthwise kernels take their filter in float32 whatever the dtype.
template <typename T, typename U, typename Map, typename Value = SameValue>
void relayout_filter(const T* w, U* out, int64_t total, const Map& map, Value value = Value{}) {
  if (total == 0) return;
  relayout_filter_kernel<T, U, Map, Value>
      <<<elementwise_blocks(total, 256), 256, 0, current_stream()>>>(w, out, total, map, value);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace torchconv
