#include "precision.h"

#include <atomic>
#include <string>

#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>

#include "weight_cache.h"

namespace torchconv {

bool tf32_enabled() { return at::globalContext().allowTF32CuDNN(); }

namespace {

constexpr std::array<const char*, 2> kTf32SourceReadsNames = {"rule", "rounded_copies"};
std::atomic<Tf32SourceReads> g_tf32_source_reads{Tf32SourceReads::kRule};

bool suggests_channels_last(const at::Tensor& t) {
  return t.dim() == 4 && t.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

// Whether PyTorch's CPU slow backend's copy of one group of channels_last `t` (its first `size`
// entries along `dim`, made contiguous in channels_last) reads as channels_last: the slice itself
// where it already is so, else a dense copy, which reads as NCHW where an image (a filter) of it is a
// single element -- one channel on a 1 x 1 plane has the strides of both layouts.
bool group_copy_reads_channels_last(const at::Tensor& t, int64_t dim, int64_t size) {
  const at::Tensor group = t.narrow(dim, 0, size);
  if (group.is_contiguous(at::MemoryFormat::ChannelsLast)) return suggests_channels_last(group);
  return group.numel() > 0 && group.size(1) * group.size(2) * group.size(3) > 1;
}

}  // namespace

void set_tf32_source_reads(const std::string& name) {
  std::string names;
  for (size_t i = 0; i < kTf32SourceReadsNames.size(); ++i) {
    if (name == kTf32SourceReadsNames[i]) {
      g_tf32_source_reads.store(Tf32SourceReads(i), std::memory_order_relaxed);
      return;
    }
    names += (i ? ", '" : "'") + std::string(kTf32SourceReadsNames[i]) + "'";
  }
  TORCH_CHECK_VALUE(false, "torchconv: tf32_source_reads must be one of ", names, ", got '", name, "'");
}

Tf32SourceReads tf32_source_reads() { return g_tf32_source_reads.load(std::memory_order_relaxed); }

std::string tf32_source_reads_name() { return kTf32SourceReadsNames[size_t(tf32_source_reads())]; }

at::MemoryFormat conv_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  // PyTorch's CUDA convolutions return float64 in NCHW whatever the layouts (cuDNN's rule,
  // cudnn_conv_suggest_memory_format); its CPU ones follow the layouts.
  if (input.is_cuda() && (input.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble))
    return at::MemoryFormat::Contiguous;
  bool input_counts = suggests_channels_last(input), weight_counts = suggests_channels_last(weight);
  // Its CPU float64 convolutions (the slow backend; float32 and bfloat16 take oneDNN, which keeps
  // the layouts) convolve a grouped layer a group at a time from copies of the group's input and
  // filters, each in its tensor's layout, and lay out the output by those copies.
  const int64_t per_group = weight.dim() == 4 ? weight.size(1) : 0;
  if ((input_counts || weight_counts) && !input.is_cuda() && input.scalar_type() == at::kDouble &&
      input.dim() == 4 && per_group > 0 && input.size(1) > per_group && input.size(1) % per_group == 0) {
    const int64_t groups = input.size(1) / per_group;
    input_counts = input_counts && group_copy_reads_channels_last(input, 1, per_group);
    weight_counts = weight_counts && weight.size(0) % groups == 0 &&
                    group_copy_reads_channels_last(weight, 0, weight.size(0) / groups);
  }
  return input_counts || weight_counts ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

at::Tensor as_output(const at::Tensor& t, at::ScalarType dtype, at::MemoryFormat format) {
  // The common case (the kernel wrote the caller's dtype and layout) returns without a dispatcher
  // call, under the condition at::Tensor::to uses to return its input: this runs for every output
  // of every call.
  if (!t.defined() || (t.scalar_type() == dtype && (t.dim() != 4 || t.suggest_memory_format() == format))) return t;
  if (t.dim() != 4) return t.to(dtype);
  return t.to(dtype, /*non_blocking=*/false, /*copy=*/false, format);
}

// Where the weight cache keeps transforms of it (frozen parameters, or inference mode), the float32
// copy is kept too, as a plain tensor without grad: the kernels' own caches (re-laid filters,
// Winograd's transformed filters) then key on the same tensor every call, instead of transforming a
// fresh copy that dies with the call (as autocast_weight in autograd.cpp). Elsewhere the copy is made
// for the call alone, and its callers run the kernel in a TransientWeightScope, so that the kernels'
// caches pass it by too.
at::Tensor widened_parameter(const at::Tensor& t) {
  if (!weight_transform_is_cached(t)) return t.to(at::kFloat);
  static const std::string kTag = "widened/float32";
  return cached_weight_transform(t, kTag, [&] {
    c10::InferenceMode plain_tensors(false);
    at::NoGradGuard no_grad;
    return t.to(at::kFloat);
  });
}
std::optional<at::Tensor> widened_parameter(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return t;
  return widened_parameter(*t);
}

at::Tensor forward_in_fp32(const char* op, ForwardKernel kernel, const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, int64_t groups) {
  const at::MemoryFormat format = conv_memory_format(input, weight);
  if (!is_reduced_float(input.scalar_type())) {
    at::Tensor y = kernel(input, weight, bias, stride, padding, dilation, groups);
    return as_output(y, y.scalar_type(), format);
  }
  // Checked in the caller's dtype first: widening must not hide a dtype mismatch.
  check_conv2d_forward(op, input, weight, bias, stride, padding, dilation, groups);
  const at::Tensor weight32 = widened_parameter(weight);
  const std::optional<at::Tensor> bias32 = widened_parameter(bias);
  const TransientWeightScope transient(!weight_transform_is_cached(weight));
  at::Tensor y = kernel(input.to(at::kFloat), weight32, bias32, stride, padding, dilation, groups);
  return as_output(y, input.scalar_type(), format);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_in_fp32(
    const char* op, BackwardKernel kernel, const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
    int64_t groups, std::array<bool, 3> output_mask) {
  const at::MemoryFormat format = conv_memory_format(input, weight);
  const at::ScalarType dtype = input.scalar_type();
  at::Tensor gx, gw, gb;
  if (!is_reduced_float(dtype)) {
    std::tie(gx, gw, gb) = kernel(grad_output, input, weight, stride, padding, dilation, groups, output_mask);
  } else {
    check_conv2d_backward(op, grad_output, input, weight, stride, padding, dilation, groups, output_mask);
    const at::Tensor weight32 = widened_parameter(weight);
    const TransientWeightScope transient(!weight_transform_is_cached(weight));
    std::tie(gx, gw, gb) = kernel(grad_output.to(at::kFloat), input.to(at::kFloat), weight32, stride, padding,
                                  dilation, groups, output_mask);
  }
  return {as_output(gx, dtype, format), as_output(gw, dtype, format), as_output(gb, dtype, format)};
}

}  // namespace torchconv
