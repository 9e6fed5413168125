// The GEMM's tensor-core path (gemm_tc.cu), as gemm.cu's operators call it.
#pragma once

#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "../../conv_shape.h"

namespace torchconv {
namespace cuda {

// The tensor-core tile configs torchconv.set_config("gemm", name) can force, listed after the float
// ones (gemm.cu registers all of them): mma.sync, then wgmma (sm_90a only). A forced tensor-core
// config runs the tensor-core forward and grad_input calls (grad_weight follows its kernel family:
// mma.sync for a tc-* config, wgmma for a wgmma-* one), and leaves the CUDA-core calls to their
// rule; a forced float config leaves the tensor-core calls to theirs. wgmma-tall is forced only, and
// the rule takes wgmma-ws only for short 16-bit reductions (gemm_tc.cu says why).
inline constexpr const char* kTcConfigNames[] = {"tc-large", "tc-medium", "tc-small"};
inline constexpr const char* kWgmmaConfigNames[] = {"wgmma-large", "wgmma-medium", "wgmma-small", "wgmma-tiny",
                                                    "wgmma-wide",  "wgmma-tall",   "wgmma-wide192", "wgmma-ws"};

// The forced tensor-core config (gemm.cu): an index into kTcConfigNames followed by
// kWgmmaConfigNames, or -1 when the tensor-core rule picks.
int forced_tc_config();

// Whether a call in `dtype` runs on tensor cores: float16 / bfloat16 always, float32 when PyTorch's
// cuDNN TF32 switch is on.
bool uses_tensor_cores(at::ScalarType dtype);

// "" when the tensor-core kernels run the forward (or the grad_input) of `p` in `dtype`, else why
// not -- a shape they cannot take, or an NCHW float32 layer that TF32 would not make faster
// (memory-bound on CUDA cores already: see tf32_pays in gemm_tc.cu) or the grad_input of an NCHW RGB
// stem (tf32_grad_input_keeps_ieee); the GEMM then computes the call
// on its CUDA-core kernels in float32. `channels_last`: the call's memory format (conv_memory_format).
std::string tc_unsupported_reason(const ConvShape& p, at::ScalarType dtype, bool grad_input, bool channels_last);

// Whether the TF32 grad_weight reads float32 input and grad_output as they are, in NCHW: on Hopper's
// wgmma (which reads TF32 operands K-major, and in NCHW both run along the positions), both dense
// NCHW, an image's padded input and the positions within 32-bit offsets.
bool tc_weight_grad_reads_nchw(const ConvShape& p, const at::Tensor& input, const at::Tensor& grad_output);

// Whether a 16-bit grad_weight reads its input and grad_output as NCHW planes as they are (Hopper):
// a 1x1 layer of stride 1 without padding, both dense NCHW, planes of whole 8-byte half-words (4
// positions) on 8-byte boundaries.
bool tc_weight_grad_reads_planes(const ConvShape& p, const at::Tensor& input, const at::Tensor& grad_output);

// "" when the tensor-core grad_weight kernel runs `p` in `dtype` (a dtype uses_tensor_cores takes),
// else why not: a float32 layer that TF32 would not make faster (tf32_pays, as the forward). Where the
// kernel reads NCHW planes as they are (`reads_nchw`, tc_weight_grad_reads_nchw) that is all; the
// other kernels copy 16-byte words, so channels (of a grouped layer) and filters per group must be
// whole words, and in NCHW the 1x1 layers of few channels stay IEEE FP32 (their copies into
// channels_last would cost more than the tensor cores save).
std::string tc_weight_grad_unsupported_reason(const ConvShape& p, at::ScalarType dtype, bool channels_last,
                                              bool reads_nchw);

// A float16 / bfloat16 `t` (N, C, H, W) in channels_last as the tensor-core kernels read it: itself
// where it is one already, else a copy by our transposing kernels (channels_last_padded without
// padding), for an operand that more than one pass reads.
at::Tensor tc_channels_last_source(const at::Tensor& t);

// The forward, grad_input and grad_weight of a checked shape, in conv_memory_format (inside the device guard).
at::Tensor tc_conv2d_forward(const ConvShape& p, const at::Tensor& input, const at::Tensor& weight,
                             const std::optional<at::Tensor>& bias);
at::Tensor tc_conv2d_grad_input(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight);
at::Tensor tc_conv2d_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                 const at::Tensor& weight);

}  // namespace cuda
}  // namespace torchconv
