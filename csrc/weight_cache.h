// Tensors derived from a filter (Winograd's transformed filters, re-laid-out filters) cached per
// weight tensor and recomputed when the weight changes, so inference does not pay the transform on
// every call and training is never stale.
//
// The cache serves inference: weights that do not require grad (frozen or deployed models), and any
// weight inside torch.inference_mode(). A weight that requires grad outside inference mode (training,
// and plain torch.no_grad() evaluation of a trainable model) is transformed on every call. Grad mode
// cannot tell these apart inside an operator (autograd runs operator bodies under no_grad), and a
// trainable weight may be written through `weight.data`, which bypasses the version counter (gradcheck
// perturbs its inputs that way); recomputing is the only answer that is never stale. Writes through
// `.data` to a cached weight are, as for autograd's saved tensors, invisible: call
// torchconv.clear_weight_cache() after them.
#pragma once

#include <functional>
#include <string>
#include <type_traits>

#include <ATen/core/Tensor.h>

namespace torchconv {

// Whether cached_weight_transform keeps a transform of `weight` (else it recomputes it every call):
// kernels that can read the weight in its own layout do so when this is false.
bool weight_transform_is_cached(const at::Tensor& weight);

// While one that is `transient` lives on this thread, no weight's transform is cached: the kernels
// are handed a copy made for this call alone (forward_in_fp32 / backward_in_fp32 widening a 16-bit
// weight the cache does not serve, a trainable one). The copy, made below autograd, does not require
// grad, so it would pass for a frozen weight; a transform kept for it would only hold memory after the
// call, until the next insert drops it.
class TransientWeightScope {
 public:
  explicit TransientWeightScope(bool transient);
  ~TransientWeightScope();
  TransientWeightScope(const TransientWeightScope&) = delete;
  TransientWeightScope& operator=(const TransientWeightScope&) = delete;

 private:
  bool previous_;
};

namespace detail {
// cached_weight_transform's look-up and insert, for a weight the cache serves.
at::Tensor cached_transform(const at::Tensor& weight, const std::string& tag,
                            const std::function<at::Tensor()>& compute);
}  // namespace detail

// Returns compute() for `weight`, reusing the result of an earlier call with the same weight tensor
// and tag while the weight is unchanged: same TensorImpl (held weakly, so a freed weight's address
// cannot alias a new one), same version counter (bumped by every in-place write, e.g. an optimizer
// step), same data pointer, sizes and strides. Inference tensors have no version counter and are
// never cached (nor are trainable weights outside inference mode, see above).
// `tag` is a string, or a callable returning one; a callable is called only where the cache serves the
// weight, so a training step's call builds no tag string and wraps no std::function (the look-up
// costs it no host allocation).
template <typename Tag, typename Compute>
at::Tensor cached_weight_transform(const at::Tensor& weight, const Tag& tag, const Compute& compute) {
  if (!weight_transform_is_cached(weight)) return compute();
  if constexpr (std::is_invocable_v<const Tag&>) {
    return detail::cached_transform(weight, tag(), compute);
  } else {
    return detail::cached_transform(weight, tag, compute);
  }
}

// Entries currently held (tests and the benchmark read it).
int64_t weight_cache_size();
void clear_weight_cache();

}  // namespace torchconv
