// Tensors derived from a filter (Winograd's transformed filters, re-laid-out filters) cached per
// weight tensor and recomputed when the weight changes, so inference does not pay the transform on
// every call and training is never stale.
//
// The cache serves calls that autograd does not record for the weight: under torch.no_grad() or
// with a weight that does not require grad (inference, and backward passes). A recorded call
// (grad mode on, weight requires grad: a training forward) recomputes, which costs nothing extra
// there since an optimizer changes the weight every step, and keeps writes through `weight.data`
// (which bypass the version counter: gradcheck perturbs inputs that way) from ever being served
// stale. Writes through `.data` between inference calls are, as for autograd's saved tensors,
// invisible: call torchconv.clear_weight_cache() after them.
#pragma once

#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

namespace torchconv {

// Returns compute() for `weight`, reusing the result of an earlier call with the same weight tensor
// and `tag` while the weight is unchanged: same TensorImpl (held weakly, so a freed weight's address
// cannot alias a new one), same version counter (bumped by every in-place write, e.g. an optimizer
// step), same data pointer, sizes and strides. Inference tensors have no version counter and are
// never cached; nor are calls autograd records (see above).
at::Tensor cached_weight_transform(const at::Tensor& weight, const std::string& tag,
                                   const std::function<at::Tensor()>& compute);

// Entries currently held (tests and the benchmark read it).
int64_t weight_cache_size();
void clear_weight_cache();

}  // namespace torchconv
