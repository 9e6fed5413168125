// Launch helpers shared by the CUDA kernels: tile configurations, grid sizing, shared-memory
// opt-in and the post-launch error check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <map>
#include <string>
#include <utility>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

namespace torchconv {
namespace cuda {

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int round_up(int a, int b) { return (a + b - 1) / b * b; }

// Whether `p` lies on a `bytes` boundary: the vector loads and stores of `bytes` that a kernel takes
// only where its operands start on one, and the tensor copies' 16-byte starts.
__host__ __device__ __forceinline__ bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// A thread-block tile: TX x TY x TZ threads, each owning an RY x RX x RK register tile of
// (output rows) x (output columns) x (output channels). The block covers TY*RY rows, TX*RX columns
// and TZ*RK channels of the output.
// kMinBlocks is the occupancy target passed to __launch_bounds__ (it caps registers per thread);
// kStageChannels input channels are staged in shared memory per barrier.
template <int TX_, int TY_, int TZ_, int RX_, int RY_, int RK_, int kMinBlocks_ = 1, int kStageChannels_ = 1>
struct TileConfig {
  static constexpr int TX = TX_, TY = TY_, TZ = TZ_;
  static constexpr int RX = RX_, RY = RY_, RK = RK_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kStageChannels = kStageChannels_;
  static constexpr int kThreads = TX * TY * TZ;
  static constexpr int kTileW = TX * RX, kTileH = TY * RY, kTileK = TZ * RK;
};

// An attribute of the current device, queried once per device: the per-call path makes no driver
// query for grid sizing or shared-memory limits.
template <cudaDeviceAttr kAttr>
inline int device_attribute() {
  constexpr int kMaxDevices = 64;
  static int values[kMaxDevices] = {};
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) device = kMaxDevices - 1;
  if (values[device] == 0) {
    int value = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, kAttr, device));
    values[device] = value;
  }
  return values[device];
}

#if defined(TORCHCONV_WGMMA)
inline constexpr bool kWgmmaCompiled = true;  // setup.py built the sm_90a target
#else
inline constexpr bool kWgmmaCompiled = false;
#endif

// Whether the current device runs the wgmma kernels (compiled for sm_90a: compute capability 9.0).
inline bool wgmma_device() {
  if (!kWgmmaCompiled) return false;
  return device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
}

// Largest dynamic shared memory a block may opt in to; multiprocessors (grid sizing).
inline int max_dynamic_smem() { return device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(); }
inline int sm_count() { return device_attribute<cudaDevAttrMultiProcessorCount>(); }

// Allows `kernel` to use `bytes` of dynamic shared memory (over 48 KiB needs an opt-in per kernel
// and device); errors clearly when the device cannot provide it. The opt-in is remembered, so the
// per-call path makes no driver calls once a kernel has run at its size.
template <typename Kernel>
void ensure_dynamic_smem(Kernel kernel, size_t bytes, const char* what) {
  if (bytes <= 48 * 1024) return;
  int device = 0, limit = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  // The attribute is a maximum: remember the largest size set so far per (kernel, device).
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> granted;
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), device);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = granted.find(key);
  if (it != granted.end() && it->second >= bytes) return;
  limit = max_dynamic_smem();
  TORCH_CHECK_VALUE(bytes <= size_t(limit), "torchconv.", what, ": the tile for this filter size, stride and dilation "
                    "needs ", std::to_string(bytes), " bytes of shared memory, more than the device's ",
                    std::to_string(limit));
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  granted[key] = bytes;
}

// Name of the current device (keys of tuned choices), queried once per device.
inline const std::string& device_name() {
  constexpr int kMaxDevices = 64;
  static std::string names[kMaxDevices];
  static std::mutex mutex;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) device = kMaxDevices - 1;
  std::lock_guard<std::mutex> lock(mutex);
  if (names[device].empty()) {
    cudaDeviceProp prop;
    C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    names[device] = prop.name;
  }
  return names[device];
}

// Grid of a grid-stride elementwise kernel: enough blocks for `total` items, at most 16 per SM.
inline unsigned elementwise_blocks(int64_t total, int threads) {
  const int64_t want = ceil_div(total, threads), cap = int64_t(sm_count()) * 16;
  return unsigned(want < 1 ? 1 : want < cap ? want : cap);
}

// Splits of a reduction (or of the positions a grad_weight sums over) for a grid of `base` blocks
// (`slots` = SMs x blocks per SM): the fewest from `min_splits` on that fill the waves they take to
// within 90% (the blocks' work is equal, so a partial last wave idles the rest of the GPU), else the
// best filling; at most `cap`.
inline int64_t wave_filling_splits(int64_t base, int64_t slots, int64_t cap, int64_t min_splits = 1) {
  int64_t best = min_splits < 1 ? 1 : min_splits < cap ? min_splits : cap;
  double best_fill = 0.0;
  for (int64_t s = best; s <= cap; ++s) {
    const int64_t blocks = base * s;
    const double fill = double(blocks) / double(ceil_div(blocks, slots) * slots);
    if (fill >= 0.9) return s;
    if (fill > best_fill) best = s, best_fill = fill;
  }
  return best;
}

// A clear error instead of a launch failure for grids past CUDA's 2^31 - 1 blocks.
inline void check_grid(int64_t blocks, const char* what) {
  TORCH_CHECK_VALUE(blocks < (int64_t(1) << 31), "torchconv.", what, ": problem too large for one launch (",
                    std::to_string(blocks), " blocks)");
}

// Asynchronous global -> shared copy of one element (4 or 8 bytes) that writes zero instead when
// `valid` is false (the zero padding of a tile), so tile loads overlap the math on the previous tile.
template <typename T>
__device__ __forceinline__ void cp_async_or_zero(T* smem, const T* gmem, bool valid) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cp.async copies 4, 8 or 16 bytes");
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? int(sizeof(T)) : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(saddr), "l"(gmem), "n"(sizeof(T)),
               "r"(src_bytes));
}
// Unconditional variant for copies known to be in bounds (no zero-fill operand to compute).
template <typename T>
__device__ __forceinline__ void cp_async(T* smem, const T* gmem) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cp.async copies 4, 8 or 16 bytes");
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(saddr), "l"(gmem), "n"(sizeof(T)));
}
// 16-byte asynchronous global -> shared copy (both addresses 16-byte aligned).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem));
}
// 16-byte variant that writes zeros instead when `valid` is false (gmem must still be a valid address).
__device__ __forceinline__ void cp_async_16_or_zero(void* smem, const void* gmem, bool valid) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
// cp_async_wait<pending>() for a count known at run time, at most kMax.
template <int kMax>
__device__ __forceinline__ void cp_async_wait_at_most(int pending) {
  if constexpr (kMax > 0) {
    if (pending < kMax) return cp_async_wait_at_most<kMax - 1>(pending);
  }
  cp_async_wait<kMax>();
}

// `p` as a value the compiler cannot see through: addresses formed from it stay one multiply-add from
// the pointer (IMAD.WIDE) instead of being re-associated into 64-bit sums of its parts per address.
template <typename T>
__device__ __forceinline__ const T* opaque_pointer(const T* p) {
  asm("" : "+l"(p));
  return p;
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace cuda
}  // namespace torchconv
