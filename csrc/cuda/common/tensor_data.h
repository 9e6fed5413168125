// A tensor's elements as the CUDA kernels name them, for the host code that fills kernel arguments.
//
// The kernels take __half and __nv_bfloat16 where ATen has at::Half and at::BFloat16 (the same bits).
// kernel_data reads the pointer through ATen's typed accessor of the matching type, so a tensor of
// another dtype is an error naming both types, never a reinterpretation of its bytes.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace torchconv {
namespace cuda {

// ATen's element type for a kernel element type, and back.
template <typename T>
struct AtElement {
  using type = T;
};
template <>
struct AtElement<__half> {
  using type = at::Half;
};
template <>
struct AtElement<__nv_bfloat16> {
  using type = at::BFloat16;
};

template <typename T>
struct CudaElement {
  using type = T;
};
template <>
struct CudaElement<at::Half> {
  using type = __half;
};
template <>
struct CudaElement<at::BFloat16> {
  using type = __nv_bfloat16;
};

template <typename T>
const T* kernel_data(const at::Tensor& t) {
  return reinterpret_cast<const T*>(t.const_data_ptr<typename AtElement<T>::type>());
}

// For outputs (ATen's mutable pointer).
template <typename T>
T* mutable_kernel_data(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.mutable_data_ptr<typename AtElement<T>::type>());
}

// Zeroes a dense output (NCHW or channels_last, as new_output makes them) by one memset on the
// current stream: one launch, and cheaper on the host than an ATen fill.
inline void zero_dense_output(at::Tensor& out) {
  TORCH_INTERNAL_ASSERT(out.is_non_overlapping_and_dense());
  C10_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.numel() * out.element_size(),
                                 c10::cuda::getCurrentCUDAStream().stream()));
}

}  // namespace cuda
}  // namespace torchconv
