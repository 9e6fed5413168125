// The forward operator of an algorithm called from C++ through the dispatcher -- autocast, autograd
// and the backend kernel, as a torch.ops call runs it -- for torchconv._C's eager entry (ops.cpp).
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

#include "plans.h"

namespace torchconv {

at::Tensor call_conv2d(Algorithm algorithm, const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, int64_t groups);

}  // namespace torchconv
