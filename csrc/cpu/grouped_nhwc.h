// The CPU direct algorithm's kernels for grouped layers along the channels (channels_last; plans.h:
// cpu_grouped). The tiles of csrc/cpu/direct.cpp walk a group's few channels and filters one plane
// row at a time, and on the short rows of late layers (7 or 14 wide) leave the vector lanes little to
// do; here a pixel's filters of one group are the vector, summed over the taps inside the input and
// the group's channels, so every pixel runs the same loop whatever the plane's size.
#pragma once

#include <ATen/core/Tensor.h>

#include "../conv_shape.h"

namespace torchconv {

// Whether the kernels below run a layer's forward and grad_weight (and, at stride 1, its grad_input
// as a forward), for an input in its layout.
bool grouped_nhwc_takes(const ConvShape& p, const at::Tensor& input);

// A grouped weight (K x Cg x R x S) laid as the kernels read it: per group, per tap, per channel, the
// group's filters contiguous (groups x R*S x Cg x Kg).
at::Tensor grouped_filters(const at::Tensor& weight, const ConvShape& p);

// y (N x K x Ho x Wo, channels_last) = the convolution of x (channels_last) with wg (grouped_filters)
// plus bias (may be undefined). float32 / float64.
void grouped_forward_nhwc(const ConvShape& p, const at::Tensor& x, const at::Tensor& wg, const at::Tensor& bias,
                          at::Tensor& y);

// A grouped weight laid for grad_input gathered along the channels: per group, per tap, per filter,
// the group's channels contiguous (groups x R*S x Kg x Cg).
at::Tensor grouped_grad_input_filters(const at::Tensor& weight, const ConvShape& p);

// gx (N x C x H x W, channels_last) = grad_input from gy (channels_last) and wt
// (grouped_grad_input_filters): each input pixel gathers the outputs its taps reach, any stride.
void grouped_grad_input_nhwc(const ConvShape& p, const at::Tensor& gy, const at::Tensor& wt, at::Tensor& gx);

// gw (K x Cg x R x S, contiguous) = grad_weight from gy and x (both channels_last).
void grouped_grad_weight_nhwc(const ConvShape& p, const at::Tensor& gy, const at::Tensor& x, at::Tensor& gw);

}  // namespace torchconv
