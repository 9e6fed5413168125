// Autograd for every algorithm's operators, in C++ so that a forward call costs no Python beyond
// torchconv.conv2d itself (the Python register_autograd path added ~5 µs per forward and ~90 µs per
// training step of host time, which is most of a small layer's cost; docs/gemm.md).
//
// Each algorithm has a forward operator conv2d_<algo> and a backward operator
// conv2d_<algo>_backward returning (grad_input, grad_weight, grad_bias) under an output mask. The
// backward operator is differentiable too, written with the same two operators, so gradients of
// any order run on the algorithm's own kernels:
//   grad_input  = B_in(grad_out, weight)   linear in grad_out and in weight,
//   grad_weight = B_w(input, grad_out)     linear in input and in grad_out,
//   grad_bias   = sum(grad_out),
// and the adjoint of B_in / B_w with respect to grad_out is the forward convolution.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "autograd.h"
#include "plans.h"
#include "weight_cache.h"

namespace torchconv {
namespace {

using torch::autograd::variable_list;

using ForwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef,
                              at::IntArrayRef, at::IntArrayRef, int64_t);
using BackwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                   const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                                                                   at::IntArrayRef, int64_t, std::array<bool, 3>);

// The operator pair of one algorithm, looked up once.
struct ConvOperators {
  c10::TypedOperatorHandle<ForwardSig> forward;
  c10::TypedOperatorHandle<BackwardSig> backward;
};

const ConvOperators& operators(int64_t algo) {
  static const std::array<ConvOperators, kAlgorithmCount> table = [] {
    auto find = [](int i) {
      const std::string name = std::string("torchconv::conv2d_") + kAlgorithmNames[i];
      auto& d = c10::Dispatcher::singleton();
      return ConvOperators{d.findSchemaOrThrow(name.c_str(), "").typed<ForwardSig>(),
                           d.findSchemaOrThrow((name + "_backward").c_str(), "").typed<BackwardSig>()};
    };
    static_assert(kAlgorithmCount == 4, "one operator pair per algorithm");
    return std::array<ConvOperators, kAlgorithmCount>{find(0), find(1), find(2), find(3)};
  }();
  return table[algo];
}

// Stride, padding, dilation and groups, kept by a node for its backward.
struct ConvParams {
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;

  ConvParams(at::IntArrayRef s, at::IntArrayRef p, at::IntArrayRef d, int64_t g)
      : stride{s[0], s[1]}, padding{p[0], p[1]}, dilation{d[0], d[1]}, groups(g) {}
};

at::Tensor forward_op(int64_t algo, const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b,
                      const ConvParams& c) {
  return operators(algo).forward.call(x, w, b, c.stride, c.padding, c.dilation, c.groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(int64_t algo, const at::Tensor& gy, const at::Tensor& x,
                                                           const at::Tensor& w, const ConvParams& c,
                                                           std::array<bool, 3> mask) {
  return operators(algo).backward.call(gy, x, w, c.stride, c.padding, c.dilation, c.groups, mask);
}

// The graph nodes are hand-written torch::autograd::Nodes, as PyTorch's generated ones are, not
// torch::autograd::Function (CppNode): torch.func refuses a CppNode under its transforms, while a Node
// runs under grad, vjp and jacrev as any aten operator's does, with no Python at that level. A node
// holds what its backward needs as members: no saved_data map, no context object.
using torch::autograd::Node;
using torch::autograd::SavedVariable;

// Edge::function's pointer type: std::shared_ptr<Node> in older PyTorch, c10::intrusive_ptr<Node> in
// newer; a node is made as that type wants.
using NodePtr = decltype(torch::autograd::Edge::function);

template <class T, class... Args>
auto make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>)
    return std::make_shared<T>(std::forward<Args>(args)...);
  else
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
}

// The forward operator's node: gradients for (input, weight, bias) from the output's.
struct Conv2dNode final : Node {
  Conv2dNode(const at::Tensor& input, const at::Tensor& weight, const ConvParams& conv, int64_t algo, bool has_bias)
      : input_(input, /*is_output=*/false), weight_(weight, /*is_output=*/false), conv_(conv), algo_(algo),
        has_bias_(has_bias) {}

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::array<bool, 3> mask = {should_compute_output(0), should_compute_output(1),
                                      has_bias_ && should_compute_output(2)};
    variable_list out(3);
    if (!grads[0].defined() || !(mask[0] || mask[1] || mask[2])) return out;
    auto [gx, gw, gb] = backward_op(algo_, grads[0], input_.unpack(), weight_.unpack(), conv_, mask);
    if (mask[0]) out[0] = std::move(gx);
    if (mask[1]) out[1] = std::move(gw);
    if (mask[2]) out[2] = std::move(gb);
    return out;
  }

  std::string name() const override { return "torchconv::Conv2dBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input_.reset_data();
    weight_.reset_data();
  }

 private:
  SavedVariable input_, weight_;
  ConvParams conv_;
  int64_t algo_;
  bool has_bias_;
};

// The backward operator's node (gradients of gradients): gradients for (grad_output, input, weight)
// from those of (grad_input, grad_weight, grad_bias). A masked-off output is an empty tensor without
// history: its incoming gradient is undefined.
struct Conv2dBackwardNode final : Node {
  Conv2dBackwardNode(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                     const ConvParams& conv, int64_t algo)
      : grad_output_(grad_output, false), input_(input, false), weight_(weight, false), conv_(conv), algo_(algo) {}

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const at::Tensor grad_output = grad_output_.unpack(), input = input_.unpack(), weight = weight_.unpack();
    const at::Tensor &gg_input = grads[0], &gg_weight = grads[1], &gg_bias = grads[2];
    at::Tensor d_grad_output, d_input, d_weight;
    if (should_compute_output(0)) {
      auto add = [&](const at::Tensor& term) { d_grad_output = d_grad_output.defined() ? d_grad_output + term : term; };
      if (gg_input.defined()) add(forward_op(algo_, gg_input, weight, std::nullopt, conv_));
      if (gg_weight.defined()) add(forward_op(algo_, input, gg_weight, std::nullopt, conv_));
      if (gg_bias.defined()) add(gg_bias.view({1, -1, 1, 1}).expand_as(grad_output));
    }
    if (should_compute_output(1) && gg_weight.defined())
      d_input = std::get<0>(backward_op(algo_, grad_output, input, gg_weight, conv_, {true, false, false}));
    if (should_compute_output(2) && gg_input.defined())
      d_weight = std::get<1>(backward_op(algo_, grad_output, gg_input, weight, conv_, {false, true, false}));
    return {d_grad_output, d_input, d_weight};
  }

  std::string name() const override { return "torchconv::Conv2dBackwardBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    grad_output_.reset_data();
    input_.reset_data();
    weight_.reset_data();
  }

 private:
  SavedVariable grad_output_, input_, weight_;
  ConvParams conv_;
  int64_t algo_;
};

bool any_requires_grad(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// Forward-mode AD (torch.autograd.forward_ad's dual tensors). PyTorch has one forward level, 0. The
// autograd Function above has no tangent rule: it raises once an input requires grad, and the
// no-graph path would return the primal without a tangent, a wrong answer. So the Autograd kernels
// compute the tangent themselves, from the same operators: the forward is bilinear in (input,
// weight), B_in in (grad_output, weight), B_w in (input, grad_output). The primals and the tangent
// terms run with forward grads switched off (the inputs then read as their primals), through the
// dispatcher, so reverse mode still records them: gradients of tangents, and tangents of gradients.
constexpr uint64_t kForwardLevel = 0;

at::Tensor tangent_of(const at::Tensor& t) { return t.defined() ? t._fw_grad(kForwardLevel) : at::Tensor(); }

bool any_tangent(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    if (t->defined() && t->_fw_grad(kForwardLevel).defined()) return true;
  return false;
}

void accumulate(at::Tensor& sum, const at::Tensor& term) { sum = sum.defined() ? sum + term : term; }

at::Tensor conv2d_with_tangent(int64_t algo, const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, int64_t groups) {
  const at::Tensor d_input = tangent_of(input), d_weight = tangent_of(weight),
                   d_bias = bias.has_value() ? tangent_of(*bias) : at::Tensor();
  const auto& forward = operators(algo).forward;
  at::Tensor out, d_out;
  {
    c10::AutoFwGradMode primals(false);
    out = forward.call(input, weight, bias, stride, padding, dilation, groups);
    if (d_input.defined()) accumulate(d_out, forward.call(d_input, weight, std::nullopt, stride, padding, dilation, groups));
    if (d_weight.defined())
      accumulate(d_out, forward.call(input, d_weight, std::nullopt, stride, padding, dilation, groups));
    if (d_bias.defined()) accumulate(d_out, d_bias.view({1, -1, 1, 1}).expand_as(out));
  }
  if (d_out.defined()) out._set_fw_grad(d_out, kForwardLevel, /*is_inplace_op=*/false);
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward_with_tangent(
    int64_t algo, const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    std::array<bool, 3> mask) {
  const at::Tensor d_grad_output = tangent_of(grad_output), d_input = tangent_of(input), d_weight = tangent_of(weight);
  const auto& backward = operators(algo).backward;
  std::tuple<at::Tensor, at::Tensor, at::Tensor> out;
  std::array<at::Tensor, 3> d_out;
  {
    c10::AutoFwGradMode primals(false);
    out = backward.call(grad_output, input, weight, stride, padding, dilation, groups, mask);
    if (d_grad_output.defined()) {  // every output is linear in grad_output: one call for its three terms
      auto [a, b, c] = backward.call(d_grad_output, input, weight, stride, padding, dilation, groups, mask);
      d_out = {a, b, c};
    }
    if (mask[0] && d_weight.defined())
      accumulate(d_out[0], std::get<0>(backward.call(grad_output, input, d_weight, stride, padding, dilation, groups,
                                                     {true, false, false})));
    if (mask[1] && d_input.defined())
      accumulate(d_out[1], std::get<1>(backward.call(grad_output, d_input, weight, stride, padding, dilation, groups,
                                                     {false, true, false})));
  }
  // A masked-off output is an empty tensor, and carries no tangent.
  if (mask[0] && d_out[0].defined()) std::get<0>(out)._set_fw_grad(d_out[0], kForwardLevel, false);
  if (mask[1] && d_out[1].defined()) std::get<1>(out)._set_fw_grad(d_out[1], kForwardLevel, false);
  if (mask[2] && d_out[2].defined()) std::get<2>(out)._set_fw_grad(d_out[2], kForwardLevel, false);
  return out;
}

// The Autograd-key kernels: the backend kernel below autograd, then a graph node only where a gradient
// is tracked (inference and frozen layers get none, and save no tensors).
template <int kAlgo>
at::Tensor conv2d_autograd(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const at::Tensor none;
  const at::Tensor* bias_or_none = bias.has_value() ? &*bias : &none;
  if (any_tangent({&input, &weight, bias_or_none}))
    return conv2d_with_tangent(kAlgo, input, weight, bias, stride, padding, dilation, groups);
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    out = operators(kAlgo).forward.call(input, weight, bias, stride, padding, dilation, groups);
  }
  if (!at::GradMode::is_enabled() || !any_requires_grad({&input, &weight, bias_or_none})) return out;
  auto node = make_node<Conv2dNode>(input, weight, ConvParams(stride, padding, dilation, groups), kAlgo,
                                    bias.has_value());
  node->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
  torch::autograd::set_history(out, node);
  return out;
}

template <int kAlgo>
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  if (any_tangent({&grad_output, &input, &weight}))
    return conv2d_backward_with_tangent(kAlgo, grad_output, input, weight, stride, padding, dilation, groups,
                                        output_mask);
  std::tuple<at::Tensor, at::Tensor, at::Tensor> out;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    out = operators(kAlgo).backward.call(grad_output, input, weight, stride, padding, dilation, groups, output_mask);
  }
  if (!at::GradMode::is_enabled() || !any_requires_grad({&grad_output, &input, &weight})) return out;
  auto node = make_node<Conv2dBackwardNode>(grad_output, input, weight, ConvParams(stride, padding, dilation, groups),
                                            kAlgo);
  node->set_next_edges(torch::autograd::collect_next_edges(grad_output, input, weight));
  const std::array<const at::Tensor*, 3> outputs = {&std::get<0>(out), &std::get<1>(out), &std::get<2>(out)};
  for (int i = 0; i < 3; ++i) {
    if (output_mask[i])
      torch::autograd::set_history(*outputs[i], node);
    else
      node->add_input_metadata(Node::undefined_input());
  }
  return out;
}

template <int kAlgo>
void register_algorithm(torch::Library& m) {
  const std::string name = std::string("conv2d_") + kAlgorithmNames[kAlgo];
  m.impl(name.c_str(), TORCH_FN(conv2d_autograd<kAlgo>));
  m.impl((name + "_backward").c_str(), TORCH_FN(conv2d_backward_autograd<kAlgo>));
}

// A float32 weight (or bias) cast to the autocast dtype, kept across autocast regions where the
// weight cache may keep it: an inference forward (torch.inference_mode, or a weight that does not
// require grad). autocast's own cache lives for one region, and inside inference mode it returns an
// inference tensor, which the weight cache cannot key on: every forward would cast each weight again
// and re-lay the fresh copy (a cast kernel and a relayout kernel per layer). Here the copy is a plain
// tensor without grad, so the kernels' own weight caches (Wt, Winograd's filters) key on it too, and
// the cache recasts it after any in-place write to the float32 weight. Elsewhere (training, tracing
// with fake or functional tensors, the autocast cache switched off) autocast's cached_cast as for
// aten::conv2d.
at::Tensor autocast_weight(const at::Tensor& weight, at::ScalarType dtype, c10::DeviceType device) {
  const bool kept = weight.defined() && weight.scalar_type() == at::kFloat && weight.device().type() == device &&
                    !weight.is_inference() && (!weight.requires_grad() || c10::InferenceMode::is_enabled()) &&
                    // a dual weight's copy carries its tangent, whose writes no version counter shows
                    !weight._fw_grad(kForwardLevel).defined() &&
                    at::autocast::is_autocast_cache_enabled() &&
                    !weight.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
  if (!kept) return at::autocast::cached_cast(dtype, weight, device);
  // The two autocast dtypes' tags are built once, not per call (this is every AMP forward's path).
  static const std::string kHalfTag = "autocast/Half", kBFloat16Tag = "autocast/BFloat16";
  std::string other;
  const std::string& tag = dtype == at::kHalf       ? kHalfTag
                           : dtype == at::kBFloat16 ? kBFloat16Tag
                                                    : (other = std::string("autocast/") + c10::toString(dtype));
  return cached_weight_transform(weight, tag, [&] {
    c10::InferenceMode plain_tensors(false);
    at::NoGradGuard no_grad;
    return weight.to(dtype);
  });
}

std::optional<at::Tensor> autocast_weight(const std::optional<at::Tensor>& bias, at::ScalarType dtype,
                                          c10::DeviceType device) {
  if (!bias.has_value()) return bias;
  return autocast_weight(*bias, dtype, device);
}

// The Autocast-key kernels: inside torch.autocast the forward operators cast their floating
// inputs to the autocast dtype, as aten::conv2d does (its lower_precision_fp policy; float64 stays).
template <int kAlgo, c10::DeviceType kDevice>
at::Tensor conv2d_autocast(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  constexpr c10::DispatchKey kKey =
      kDevice == c10::DeviceType::CUDA ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  const at::ScalarType dtype = at::autocast::get_lower_precision_fp_from_device_type(kDevice);
  return operators(kAlgo).forward.call(at::autocast::cached_cast(dtype, input, kDevice),
                                       autocast_weight(weight, dtype, kDevice), autocast_weight(bias, dtype, kDevice),
                                       stride, padding, dilation, groups);
}

template <int kAlgo, c10::DeviceType kDevice>
void register_autocast(torch::Library& m) {
  m.impl((std::string("conv2d_") + kAlgorithmNames[kAlgo]).c_str(), TORCH_FN((conv2d_autocast<kAlgo, kDevice>)));
}

}  // namespace

at::Tensor call_conv2d(Algorithm algorithm, const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, int64_t groups) {
  return operators(algorithm).forward.call(input, weight, bias, stride, padding, dilation, groups);
}

TORCH_LIBRARY_IMPL(torchconv, AutocastCUDA, m) {
  register_autocast<0, c10::DeviceType::CUDA>(m);
  register_autocast<1, c10::DeviceType::CUDA>(m);
  register_autocast<2, c10::DeviceType::CUDA>(m);
  register_autocast<3, c10::DeviceType::CUDA>(m);
}

TORCH_LIBRARY_IMPL(torchconv, AutocastCPU, m) {
  register_autocast<0, c10::DeviceType::CPU>(m);
  register_autocast<1, c10::DeviceType::CPU>(m);
  register_autocast<2, c10::DeviceType::CPU>(m);
  register_autocast<3, c10::DeviceType::CPU>(m);
}

TORCH_LIBRARY_IMPL(torchconv, Autograd, m) {
  register_algorithm<0>(m);
  register_algorithm<1>(m);
  register_algorithm<2>(m);
  register_algorithm<3>(m);
}

}  // namespace torchconv
