// The unrolled-GEMM algorithm's CPU pieces that other algorithms reuse.
#pragma once

#include <ATen/core/Tensor.h>

#include "../conv_shape.h"

namespace torchconv {

// grad_weight = grad_out . unroll(input)^T, accumulated over workspace-bounded column chunks.
at::Tensor gemm_grad_weight_cpu(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input);

}  // namespace torchconv
