// Shape of one 2-D convolution and the index math every algorithm and backend shares.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#if defined(__CUDACC__)
#define TORCHCONV_HOST_DEVICE __host__ __device__ __forceinline__
#define TORCHCONV_UNROLL _Pragma("unroll")
#else
#define TORCHCONV_HOST_DEVICE inline
#define TORCHCONV_UNROLL _Pragma("GCC unroll 8")
#endif

namespace torchconv {

// Everything a kernel needs to know about a convolution, with PyTorch's conv2d conventions:
// input N x C x H x W, weight K x (C / groups) x R x S, output N x K x Ho x Wo, symmetric zero padding.
struct ConvShape {
  int64_t N, C, H, W;
  int64_t K, R, S;
  int64_t Ho, Wo;
  int64_t stride_h, stride_w;
  int64_t pad_h, pad_w;
  int64_t dil_h, dil_w;
  int64_t groups;

  int64_t channels_per_group() const { return C / groups; }
  int64_t filters_per_group() const { return K / groups; }
  double flops() const { return 2.0 * N * K * channels_per_group() * R * S * Ho * Wo; }
};

// Output extent along one axis (PyTorch's conv2d formula).
TORCHCONV_HOST_DEVICE int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                                               int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// Input coordinate read by output coordinate `out` through filter tap `tap`.
TORCHCONV_HOST_DEVICE int64_t input_coord(int64_t out, int64_t tap, int64_t stride, int64_t pad, int64_t dilation) {
  return out * stride - pad + tap * dilation;
}

// Half-open range [lo, hi) of output coordinates o in [0, out_len) whose input coordinate
// o * stride + offset lies inside [0, in_len). Lets inner loops run without bounds checks.
struct OutputRange {
  int64_t lo, hi;
};
TORCHCONV_HOST_DEVICE OutputRange valid_output_range(int64_t out_len, int64_t in_len, int64_t offset,
                                                     int64_t stride) {
  // smallest o with o * stride + offset >= 0
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // largest o with o * stride + offset <= in_len - 1, plus one
  int64_t last = in_len - 1 - offset;
  int64_t hi = last < 0 ? 0 : last / stride + 1;
  if (hi > out_len) hi = out_len;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

// Along one axis of a strided convolution, the taps r whose output (v - r * dil) / stride is a whole
// number, for v = input position + pad, lie tap_step(stride, dil) = stride / gcd(stride, dil) apart;
// first_reaching_tap gives the first of them (-1: none), whose output is (v - r * dil) / stride exactly
// (negative where v < r * dil). Host and device: the phases of a strided grad_input (phase_axis) and
// the RGB stem's columns gather (gemm_kernels.cuh) count the same taps.
template <typename I>
TORCHCONV_HOST_DEVICE I tap_step(I stride, I dil) {
  I a = stride, b = dil;
  while (b != 0) {
    const I t = a % b;
    a = b, b = t;
  }
  return stride / a;
}
template <typename I>
TORCHCONV_HOST_DEVICE I first_reaching_tap(I v, I kernel, I stride, I dil, I step) {
  for (I r = 0; r < step && r < kernel; ++r)
    if (((v - r * dil) % stride + stride) % stride == 0) return r;
  return -1;
}

// One output phase of a strided grad_input along one axis: input positions i = phase + stride * t
// receive from taps r with (i + pad - r * dil) a multiple of the stride, i.e. r = r0, r0 + dr, ...
// with dr = stride / gcd(stride, dil), reading grad_output at t + d0 - (index) * (dr * dil / stride).
// The GEMM, CSG and direct kernels run a strided grad_input as one stride-1 launch per phase.
struct PhaseAxis {
  int count;     // positions t in the phase
  int taps;      // filter taps that reach them (0: the phase receives nothing)
  int r0, dr;    // first tap and tap step
  int d0, step;  // grad_output offset of tap 0 and its change per tap index
};
inline PhaseAxis phase_axis(int64_t in_len, int64_t kernel, int64_t stride, int64_t pad, int64_t dil, int phase) {
  PhaseAxis a{};
  a.count = phase < in_len ? int((in_len - phase + stride - 1) / stride) : 0;
  a.dr = int(tap_step(stride, dil));
  a.r0 = int(first_reaching_tap<int64_t>(phase + pad, kernel, stride, dil, a.dr));
  if (a.r0 < 0) return a;
  a.taps = int((kernel - 1 - a.r0) / a.dr + 1);
  a.d0 = int((phase + pad - a.r0 * dil) / stride);  // exact
  a.step = -int(a.dr * dil / stride);
  return a;
}

// grad_input at input pixel (n, c, iy, ix), gathered: the sum, over the output positions whose
// window read the pixel (oy = (iy + pad - r * dil) / stride where that division is exact) and the
// filters of its group, of grad_output x weight. The CUDA direct grad_input of a strided layer whose
// phase grids would be short of the GPU (elsewhere it runs as forward convolutions per phase).
template <typename T>
TORCHCONV_HOST_DEVICE T gather_grad_input(const ConvShape& p, const T* gy, const T* w, int64_t n, int64_t c,
                                          int64_t iy, int64_t ix) {
  const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
  const int64_t g = c / Cg, cg = c % Cg;
  T sum = 0;
  for (int64_t r = 0; r < p.R; ++r) {
    const int64_t ty = iy + p.pad_h - r * p.dil_h;
    if (ty < 0 || ty % p.stride_h != 0 || ty / p.stride_h >= p.Ho) continue;
    const int64_t oy = ty / p.stride_h;
    for (int64_t s = 0; s < p.S; ++s) {
      const int64_t tx = ix + p.pad_w - s * p.dil_w;
      if (tx < 0 || tx % p.stride_w != 0 || tx / p.stride_w >= p.Wo) continue;
      const int64_t ox = tx / p.stride_w;
      for (int64_t kg = 0; kg < Kg; ++kg) {
        const int64_t k = g * Kg + kg;
        sum += gy[((n * p.K + k) * p.Ho + oy) * p.Wo + ox] * w[((k * Cg + cg) * p.R + r) * p.S + s];
      }
    }
  }
  return sum;
}

// Whether a tensor's layout is channels_last and not also contiguous (the layout a CPU kernel along
// the channels reads without a copy; torchconv.tuning.memory_format answers the same in Python).
inline bool channels_last_layout(const at::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast) && !t.is_contiguous();
}

// "[a, b, c]". Numbers in error messages are formatted with std::to_string, never streamed: on the
// GPU image (extension built by GCC 13 against torch 2.11) `ostream << int64_t` inside this library
// crashed with SIGSEGV in the first check that failed (cuda-gdb showed
// std::basic_ostream::_M_insert<long> in our .so).
inline std::string shape_str(at::IntArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Validates PyTorch conv2d's arguments for `algorithm` and returns the shape. Errors are Python
// ValueError / TypeError naming the offending argument.
ConvShape check_conv2d_forward(const char* algorithm, const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// As above for the backward operators, and checks that grad_output has the forward output's shape.
ConvShape check_conv2d_backward(const char* algorithm, const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups, at::ArrayRef<bool> output_mask);

// Allocates an operator's output. While poisoning is on (tests turn it on), the tensor is filled
// with NaN first, so any element a kernel forgets to write shows up in the comparison.
at::Tensor new_output(at::IntArrayRef sizes, const at::TensorOptions& options);
// Allocates a kernel's workspace (partial sums, column chunks, packed or transformed operands),
// poisoned as new_output's tensors are, so a kernel that reads an element no kernel wrote fails too.
at::Tensor new_workspace(at::IntArrayRef sizes, const at::TensorOptions& options);
void set_poison_outputs(bool on);
bool poison_outputs();
// Fills `t` with NaN while poisoning is on (new_output's fill, for memory allocated otherwise).
void poison_if_on(const at::Tensor& t);

// Placeholder for a gradient the output mask did not ask for: an empty tensor (custom operators
// cannot return None); the Python autograd glue maps it back to None.
at::Tensor skipped_grad(const at::Tensor& like);

// A backward operator's result: the gradients the mask asks for, an empty tensor (skipped_grad)
// for each other one -- allocated only for those, since a training step of small layers is bound
// by host time, allocations included.
std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_grads(const at::Tensor& grad_input, const at::Tensor& grad_weight,
                                                            const at::Tensor& grad_bias,
                                                            const std::array<bool, 3>& output_mask,
                                                            const at::Tensor& like);

// grad_bias of any convolution: the sum of grad_output over N, Ho and Wo.
at::Tensor conv_bias_grad(const at::Tensor& grad_output);

}  // namespace torchconv
