// The grouped kernels along the channels (grouped_nhwc.h): the kernels of grouped_nhwc_kernels.h built
// twice, for any x86-64 CPU and for AVX2 with FMA, the second run where the CPU has both. The build
// targets the x86-64 baseline, whose four lanes and separate products and sums leave such a loop a
// quarter of an AVX2 core's multiply-adds.
#include "grouped_nhwc.h"

// The kernels pass GCC vector types between inline functions of this file only (internal linkage):
// the ABI note GCC gives for 32-byte vectors in the baseline build concerns calls across files (it
// comes at the end of the file, so the whole file ignores it).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../plans.h"
#include "isa.h"

namespace torchconv {
namespace {

#define TORCHCONV_ISA_KERNELS "grouped_nhwc_kernels.h"
#include "isa_builds.h"

}  // namespace

bool grouped_nhwc_takes(const ConvShape& p, const at::Tensor& input) {
  return cpu_grouped(p.groups, p.channels_per_group(), p.filters_per_group(), p.Wo, channels_last_layout(input));
}

at::Tensor grouped_filters(const at::Tensor& weight, const ConvShape& p) {
  return weight.reshape({p.groups, p.filters_per_group(), p.channels_per_group(), p.R * p.S})
      .permute({0, 3, 2, 1})
      .contiguous();
}

at::Tensor grouped_grad_input_filters(const at::Tensor& weight, const ConvShape& p) {
  return weight.reshape({p.groups, p.filters_per_group(), p.channels_per_group(), p.R * p.S})
      .permute({0, 3, 1, 2})
      .contiguous();
}

void grouped_forward_nhwc(const ConvShape& p, const at::Tensor& x, const at::Tensor& wg, const at::Tensor& bias,
                          at::Tensor& y) {
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv2d_direct_cpu_grouped", [&] {
    const scalar_t* b = bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr;
    TORCHCONV_CPU_KERNEL(grouped_gather_nhwc, scalar_t, false)(p, x.const_data_ptr<scalar_t>(),
                                                               wg.const_data_ptr<scalar_t>(), b,
                                                               y.mutable_data_ptr<scalar_t>());
  });
}

void grouped_grad_input_nhwc(const ConvShape& p, const at::Tensor& gy, const at::Tensor& wt, at::Tensor& gx) {
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "conv2d_direct_grad_input_cpu_grouped", [&] {
    TORCHCONV_CPU_KERNEL(grouped_gather_nhwc, scalar_t, true)(p, gy.const_data_ptr<scalar_t>(),
                                                              wt.const_data_ptr<scalar_t>(), nullptr,
                                                              gx.mutable_data_ptr<scalar_t>());
  });
}

void grouped_grad_weight_nhwc(const ConvShape& p, const at::Tensor& gy, const at::Tensor& x, at::Tensor& gw) {
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv2d_direct_grad_weight_cpu_grouped", [&] {
    TORCHCONV_CPU_KERNEL(grouped_grad_weight_nhwc, scalar_t)(p, gy.const_data_ptr<scalar_t>(),
                                                             x.const_data_ptr<scalar_t>(),
                                                             gw.mutable_data_ptr<scalar_t>());
  });
}

}  // namespace torchconv
