// Precisions and memory formats of an operator call, decided once for every algorithm and backend.
//
// dtypes: float64 and float32 run natively everywhere; float16 and bfloat16 run natively on the
// GEMM's tensor-core kernels (CUDA) and on Winograd's TF32 tensor-core tiles (they read and write
// the 16-bit tensors, computing in TF32 -- float16 with its operands split into bfloat16 hi and lo
// parts, three bfloat16 products -- and FP32), and every other kernel computes them in float32
// (inputs widened, FP32 accumulation, the output rounded back to the input dtype). float32 follows
// PyTorch's cuDNN TF32 switch (torch.backends.cudnn.allow_tf32): on, the GEMM and Winograd's fused
// F(2x2) run TF32 tensor cores; off, and for every other kernel, IEEE FP32. Winograd's 16-bit calls
// run its tiles whatever the switch (csrc/cuda/winograd/winograd.cu: conv2d_winograd_16bit_cuda).
//
// Memory format: the outputs (and gradients) come back in the format PyTorch's convolution returns
// for the same input and weight: channels_last when either of them is, except float64 on CUDA, which
// PyTorch returns in NCHW, and grouped float64 layers on a CPU, laid out by PyTorch's copies of one
// group (conv_memory_format in precision.cpp).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "conv_shape.h"

namespace torchconv {

// float16 / bfloat16: the dtypes the CUDA-core kernels compute in float32.
inline bool is_reduced_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// PyTorch's cuDNN TF32 switch for convolutions (torch.backends.cudnn.allow_tf32), read per call.
bool tf32_enabled();

// Testing aid: how the tensor-core GEMM reads a float32 channels_last source (tc_source in
// cuda/gemm/gemm_tc.cu). kRule: as that rule decides (as it is, its tiles rounded to TF32 in the
// registers the MMAs take them from, wherever the wgmma kernel runs). kRoundedCopies: a source of
// several taps copied, rounded to TF32, for the MMAs to read by descriptor, and a 1x1 one gathered
// (rounding in shared memory) -- the paths where the tensor copies' tiles are not rounded in
// registers. So the register tiles can be compared with the other paths bit for bit, and timed
// against them in one process. Set by name ("rule", "rounded_copies"; a ValueError otherwise).
enum class Tf32SourceReads { kRule, kRoundedCopies };
void set_tf32_source_reads(const std::string& name);
std::string tf32_source_reads_name();
Tf32SourceReads tf32_source_reads();

// The memory format of a convolution's outputs for this input and weight.
at::MemoryFormat conv_memory_format(const at::Tensor& input, const at::Tensor& weight);

// `t` in dtype `dtype` and memory format `format` (4-D tensors; others only change dtype), without a
// copy where it already is.
at::Tensor as_output(const at::Tensor& t, at::ScalarType dtype, at::MemoryFormat format);

// A weight or bias in float32, for a kernel that computes a float16 / bfloat16 call in float32: the
// copy the weight cache keeps for a frozen parameter (weight_cache.h), else a fresh one.
at::Tensor widened_parameter(const at::Tensor& t);
std::optional<at::Tensor> widened_parameter(const std::optional<at::Tensor>& t);

using ForwardKernel = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                     at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t);
using BackwardKernel = std::tuple<at::Tensor, at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&,
                                                                         const at::Tensor&, at::IntArrayRef,
                                                                         at::IntArrayRef, at::IntArrayRef, int64_t,
                                                                         std::array<bool, 3>);

// A forward kernel that computes float32 / float64 in NCHW, run for any supported dtype and format:
// float16 / bfloat16 calls are checked as `op`, widened to float32 (the float32 copy of a weight
// that the weight cache serves, weight_cache.h, kept there), and the output rounded back; the output
// comes back in conv_memory_format.
at::Tensor forward_in_fp32(const char* op, ForwardKernel kernel, const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, int64_t groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_in_fp32(
    const char* op, BackwardKernel kernel, const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
    int64_t groups, std::array<bool, 3> output_mask);

// Operator names, as the registered forms below name them in errors.
inline constexpr char kDirectOp[] = "conv2d_direct", kDirectBackwardOp[] = "conv2d_direct_backward";
inline constexpr char kCsgOp[] = "conv2d_csg", kCsgBackwardOp[] = "conv2d_csg_backward";
inline constexpr char kGemmOp[] = "conv2d_gemm", kGemmBackwardOp[] = "conv2d_gemm_backward";
inline constexpr char kWinogradOp[] = "conv2d_winograd", kWinogradBackwardOp[] = "conv2d_winograd_backward";

// The registered form of a kernel: forward_in_fp32 / backward_in_fp32 with the operator's name.
template <const char* kOp, ForwardKernel kKernel>
at::Tensor any_precision_forward(const at::Tensor& input, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  return forward_in_fp32(kOp, kKernel, input, weight, bias, stride, padding, dilation, groups);
}
template <const char* kOp, BackwardKernel kKernel>
std::tuple<at::Tensor, at::Tensor, at::Tensor> any_precision_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  return backward_in_fp32(kOp, kKernel, grad_output, input, weight, stride, padding, dilation, groups, output_mask);
}

}  // namespace torchconv
