// The driver's tensor-map encoders (a tensor map describes a global tensor to Hopper's tensor copies),
// looked up once through the runtime, so that the extension links no driver library. Null where the
// driver has no such entry point; callers then take their kernels without tensor copies.
#pragma once

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace torchconv {
namespace cuda {

template <typename Fn>
Fn driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return Fn(nullptr);
  }
  return reinterpret_cast<Fn>(fn);
}

inline PFN_cuTensorMapEncodeIm2col_v12000 im2col_encoder() {
  static const auto encode = driver_entry_point<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
  return encode;
}

inline PFN_cuTensorMapEncodeTiled_v12000 tiled_encoder() {
  static const auto encode = driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  return encode;
}

}  // namespace cuda
}  // namespace torchconv
