// The backward operator every algorithm and backend registers, written once: the argument checks,
// the plan's limits, the device guard, then each gradient the output mask asks for (masked-off ones
// come back empty), grad_bias as the sum of grad_output, and the call's workspace report.
#pragma once

#include <algorithm>
#include <array>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include "conv_shape.h"
#include "plans.h"
#include "workspace.h"

namespace torchconv {

// grad_input(p) and grad_weight(p) compute one gradient each for the checked shape p (inside the
// input's device guard) and may record their workspace; the call reports the larger of the two.
template <typename GradInput, typename GradWeight>
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(
    const char* op, Algorithm algorithm, const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
    int64_t groups, std::array<bool, 3> output_mask, GradInput&& grad_input, GradWeight&& grad_weight) {
  const ConvShape p =
      check_conv2d_backward(op, grad_output, input, weight, stride, padding, dilation, groups, output_mask);
  const c10::OptionalDeviceGuard guard(input.device());
  check_can_implement(op, algorithm, make_problem(p, input));
  int64_t workspace = 0;
  at::Tensor gx, gw, gb;
  if (output_mask[0]) {
    record_workspace_bytes(0);
    gx = grad_input(p);
    workspace = last_workspace_bytes();
  }
  if (output_mask[1]) {
    record_workspace_bytes(0);
    gw = grad_weight(p);
    workspace = std::max(workspace, last_workspace_bytes());
  }
  if (output_mask[2]) gb = conv_bias_grad(grad_output);
  record_workspace_bytes(workspace);
  return masked_grads(gx, gw, gb, output_mask, input);
}

}  // namespace torchconv
