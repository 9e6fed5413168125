// Programmatic dependent launch (sm_90): a chain of kernels of one call whose next kernel is
// scheduled while the one before it finishes, so that the GPU does not sit idle between them for
// the launch of each. A kernel launched as a dependent (launch_with_attributes) may start before the
// kernel ahead of it in the stream has finished; it must call grid_dependency_wait before it reads
// anything that kernel (or any work before it) wrote, and it lets the kernel after it start early by
// allow_dependents. Where the kernel ahead was itself launched without the attribute, the work
// before that kernel had finished when it started, and a dependent starts only once every block of
// it has called allow_dependents or exited: what that work wrote may be read before the wait. A
// kernel launched without the attribute, or on a GPU before sm_90, waits as any launch does, and both
// calls do nothing.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include <c10/cuda/CUDAException.h>

#include "launch.cuh"

namespace torchconv {
namespace cuda {

// Waits until the grids ahead of this one in the stream have finished and their memory is visible.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next grid of the stream, if launched as a dependent, be scheduled once every block
// of this grid has called it (or exited). Called after grid_dependency_wait, so that whatever the
// next grid may read before its own wait -- nothing of this grid's -- is complete.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether the current device takes programmatic dependent launches (sm_90 and later); elsewhere a
// launch asks for none and the device calls above do nothing.
inline bool dependent_launches() { return device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9; }

// Launches kernel(args...) on `stream`, in clusters of `cluster` blocks where it holds more than one
// (an int: that many consecutive blocks of x), and as a programmatic dependent of the kernel before
// it where `dependent` (only kernels that call grid_dependency_wait before reading their inputs may be).
template <typename... Params, typename... Args>
void launch_with_attributes(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            dim3 cluster, bool dependent, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned count = 0;
  if (dependent) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count].val.clusterDim.x = cluster.x, attrs[count].val.clusterDim.y = cluster.y;
    attrs[count++].val.clusterDim.z = cluster.z;
  }
  config.attrs = attrs, config.numAttrs = count;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// Launches kernel(args...) on the current stream without shared memory, as a programmatic dependent of
// the kernel before it where the device takes them (the kernel calls grid_dependency_wait first).
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  launch_with_attributes(kernel, grid, block, 0, current_stream(), dim3(1), dependent_launches(),
                         std::forward<Args>(args)...);
}

// The clusters of `cluster` blocks of `kernel` (threads and dynamic shared memory as launched) that
// the GPU holds at once: the grid of a cluster kernel whose clusters walk its work (more clusters
// would wait for a free place and run their share after the others).
template <typename... Params>
int max_active_clusters(void (*kernel)(Params...), dim3 block, size_t smem, int cluster) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(cluster));
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(cluster), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  config.attrs = &attr, config.numAttrs = 1;
  int clusters = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  return clusters;
}

}  // namespace cuda
}  // namespace torchconv
