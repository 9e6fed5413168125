// The direct algorithm's NHWC depthwise specialist, host side (kernels: depthwise_nhwc_kernels.cuh):
// channels_last depthwise and small-group layers in their own dtype (float32, float16, bfloat16),
// forward and grad_input, and grad_weight where a filter row's sums fit a thread's registers. direct.cu's operators route to it; its limits live here.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

#include "../../conv_shape.h"
#include "../../plans.h"

namespace torchconv {
namespace cuda {

// Whether the specialist takes the problem: channels_last; float32, float16 or bfloat16; groups of
// 1, 2 or 4 channels and as many filters (depthwise, and ResNeXt-like groups of 4 x 4); a multiple of
// 4 channels (the kernel's channel vectors); and no other direct config forced (set_config).
bool nhwc_depthwise_problem(const ConvProblem& problem);

// A cheap first look at a call's tensors, before any argument check: only calls that pass it can be
// ones the specialist takes, so every other call pays nothing for it.
bool may_be_nhwc_depthwise(const at::Tensor& input, const at::Tensor& weight, int64_t groups);

// `t` in channels_last with its channel vectors aligned: a copy only where it is not already. The
// functions below apply it to their tensor arguments; a caller passing one tensor to several of
// them converts it once first.
at::Tensor nhwc_source(const at::Tensor& t);

// The output (channels_last, the input's dtype) and grad_input (channels_last, grad_output's dtype)
// of a shape the specialist takes.
at::Tensor depthwise_nhwc_forward(const ConvShape& p, const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias);
at::Tensor depthwise_nhwc_grad_input(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& weight);

// Whether the specialist computes grad_weight too: filter rows of at most 12 taps depthwise, 6 in
// groups of 2, 3 in groups of 4 (the sums a thread keeps). Other shapes it takes compute grad_weight
// in the NCHW kernels.
bool nhwc_grad_weight_takes(const ConvShape& p);

// grad_weight (the weight's dtype) of a shape nhwc_grad_weight_takes, the slices of the reduction
// added in a fixed order.
at::Tensor depthwise_nhwc_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                      const at::Tensor& weight);

}  // namespace cuda
}  // namespace torchconv
