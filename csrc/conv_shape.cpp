#include "conv_shape.h"

#include <atomic>
#include <string>
#include <limits>

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

namespace torchconv {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

void check_pair(const char* algorithm, const char* name, at::IntArrayRef v, int64_t min_value) {
  TORCH_CHECK_VALUE(v.size() == 2, "torchconv.", algorithm, ": ", name, " must have 2 elements (h, w), got ",
                    num(int64_t(v.size())));
  for (int64_t x : v) {
    TORCH_CHECK_VALUE(x >= min_value, "torchconv.", algorithm, ": ", name, " must be ",
                      min_value == 0 ? "non-negative" : "positive", ", got ", shape_str(v));
  }
}

void check_float_tensor(const char* algorithm, const char* name, const at::Tensor& t, const at::Tensor& input) {
  TORCH_CHECK_TYPE(t.scalar_type() == input.scalar_type(), "torchconv.", algorithm, ": ", name,
                   " dtype (", t.scalar_type(), ") must match input dtype (", input.scalar_type(), ")");
  TORCH_CHECK_VALUE(t.device() == input.device(), "torchconv.", algorithm, ": ", name, " is on ", t.device(),
                    " but input is on ", input.device(), "; move both to the same device");
}

}  // namespace

ConvShape check_conv2d_forward(const char* algorithm, const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  TORCH_CHECK_VALUE(input.dim() == 4, "torchconv.", algorithm, ": input must be 4-D (N, C, H, W), got ",
                    num(input.dim()), "-D with shape ", shape_str(input.sizes()));
  TORCH_CHECK_VALUE(weight.dim() == 4, "torchconv.", algorithm,
                    ": weight must be 4-D (K, C / groups, R, S), got shape ", shape_str(weight.sizes()));
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
                   "torchconv.", algorithm, ": input dtype must be float32, float64, float16 or bfloat16, got ", dtype);
  check_float_tensor(algorithm, "weight", weight, input);
  check_pair(algorithm, "stride", stride, 1);
  check_pair(algorithm, "padding", padding, 0);
  check_pair(algorithm, "dilation", dilation, 1);
  TORCH_CHECK_VALUE(groups >= 1, "torchconv.", algorithm, ": groups must be positive, got ", num(groups));

  ConvShape p;
  p.N = input.size(0);
  p.C = input.size(1);
  p.H = input.size(2);
  p.W = input.size(3);
  p.K = weight.size(0);
  p.R = weight.size(2);
  p.S = weight.size(3);
  p.stride_h = stride[0];
  p.stride_w = stride[1];
  p.pad_h = padding[0];
  p.pad_w = padding[1];
  p.dil_h = dilation[0];
  p.dil_w = dilation[1];
  p.groups = groups;

  // PyTorch answers a zero-channel input with N x 0 x Ho x Wo whatever the filters (its empty-tensor shortcut),
  // where the sum over no channels would be the bias: refused, as PyTorch refuses zero filters.
  TORCH_CHECK_VALUE(p.C > 0, "torchconv.", algorithm, ": input must have at least one channel, got input of shape ",
                    shape_str(input.sizes()));
  // PyTorch computes no image of an empty plane (a padded one would hold padding only).
  TORCH_CHECK_VALUE(p.N == 0 || (p.H > 0 && p.W > 0), "torchconv.", algorithm,
                    ": input must have a non-empty plane (H, W > 0) unless the batch is empty, got input of shape ",
                    shape_str(input.sizes()));
  TORCH_CHECK_VALUE(p.C % groups == 0, "torchconv.", algorithm, ": input channels (", num(p.C),
                    ") must be divisible by groups (", num(groups), ")");
  TORCH_CHECK_VALUE(p.K % groups == 0, "torchconv.", algorithm, ": weight.size(0) (", num(p.K),
                    " output channels) must be divisible by groups (", num(groups), ")");
  TORCH_CHECK_VALUE(weight.size(1) == p.C / groups, "torchconv.", algorithm, ": weight of shape ",
                    shape_str(weight.sizes()), " expects ", num(weight.size(1) * groups), " input channels with groups=",
                    num(groups),
                    ", but input has ", num(p.C), " channels");
  TORCH_CHECK_VALUE(p.K > 0 && p.R > 0 && p.S > 0, "torchconv.", algorithm,
                    ": weight must have non-zero size, got ", shape_str(weight.sizes()));
  const int64_t span_h = p.dil_h * (p.R - 1) + 1;
  const int64_t span_w = p.dil_w * (p.S - 1) + 1;
  TORCH_CHECK_VALUE(p.H + 2 * p.pad_h >= span_h && p.W + 2 * p.pad_w >= span_w, "torchconv.", algorithm,
                    ": kernel of size (", num(span_h), ", ", num(span_w), ") after dilation is larger than the padded input (",
                    num(p.H + 2 * p.pad_h), ", ", num(p.W + 2 * p.pad_w), ")");
  if (bias.has_value()) {
    const at::Tensor& b = *bias;
    check_float_tensor(algorithm, "bias", b, input);
    TORCH_CHECK_VALUE(b.dim() == 1 && b.size(0) == p.K, "torchconv.", algorithm,
                      ": bias must be 1-D with weight.size(0) = ", num(p.K), " elements, got shape ", shape_str(b.sizes()));
  }
  p.Ho = conv_output_size(p.H, p.R, p.stride_h, p.pad_h, p.dil_h);
  p.Wo = conv_output_size(p.W, p.S, p.stride_w, p.pad_w, p.dil_w);
  return p;
}

ConvShape check_conv2d_backward(const char* algorithm, const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups, at::ArrayRef<bool> output_mask) {
  ConvShape p = check_conv2d_forward(algorithm, input, weight, std::nullopt, stride, padding, dilation, groups);
  check_float_tensor(algorithm, "grad_output", grad_output, input);
  TORCH_CHECK_VALUE(grad_output.dim() == 4 && grad_output.size(0) == p.N && grad_output.size(1) == p.K &&
                        grad_output.size(2) == p.Ho && grad_output.size(3) == p.Wo,
                    "torchconv.", algorithm, ": grad_output must have the output's shape ",
                    shape_str({p.N, p.K, p.Ho, p.Wo}), ", got ", shape_str(grad_output.sizes()));
  TORCH_CHECK_VALUE(output_mask.size() == 3, "torchconv.", algorithm, ": output_mask must have 3 elements");
  return p;
}

namespace {
std::atomic<bool> g_poison{false};
}

void set_poison_outputs(bool on) { g_poison.store(on, std::memory_order_relaxed); }
bool poison_outputs() { return g_poison.load(std::memory_order_relaxed); }

void poison_if_on(const at::Tensor& t) {
  if (poison_outputs()) t.fill_(std::numeric_limits<double>::quiet_NaN());
}

at::Tensor new_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty(sizes, options);
  poison_if_on(t);
  return t;
}

at::Tensor new_workspace(at::IntArrayRef sizes, const at::TensorOptions& options) { return new_output(sizes, options); }

at::Tensor skipped_grad(const at::Tensor& like) { return at::empty({0}, like.options()); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_grads(const at::Tensor& grad_input, const at::Tensor& grad_weight,
                                                            const at::Tensor& grad_bias,
                                                            const std::array<bool, 3>& output_mask,
                                                            const at::Tensor& like) {
  return {output_mask[0] ? grad_input : skipped_grad(like), output_mask[1] ? grad_weight : skipped_grad(like),
          output_mask[2] ? grad_bias : skipped_grad(like)};
}

at::Tensor conv_bias_grad(const at::Tensor& grad_output) { return grad_output.sum({0, 2, 3}); }

}  // namespace torchconv
