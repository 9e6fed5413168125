// The CPU matrix product (matmul.h): the kernel of matmul_kernels.h built twice, for any x86-64 CPU and
// for AVX2 with FMA, the second run where the CPU has both (isa.h).
#include "matmul.h"

// The kernel passes GCC vector types between inline functions of this file only (internal linkage):
// the ABI note GCC gives for 32-byte vectors in the baseline build concerns calls across files.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "isa.h"

namespace torchconv {
namespace {

#define TORCHCONV_ISA_KERNELS "matmul_kernels.h"
#include "isa_builds.h"

}  // namespace

void matmul_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  const int64_t d = c.dim();
  TORCH_CHECK((d == 2 || d == 3) && a.dim() == d && b.dim() == d, "torchconv: matmul_into: 2-D or 3-D operands");
  const int64_t batch = d == 3 ? c.size(0) : 1, M = c.size(d - 2), N = c.size(d - 1), K = a.size(d - 1);
  TORCH_CHECK(a.size(d - 2) == M && b.size(d - 2) == K && b.size(d - 1) == N && (N <= 1 || c.stride(d - 1) == 1) &&
                  (d == 2 || (a.size(0) == batch && b.size(0) == batch)),
              "torchconv: matmul_into: shapes or strides do not fit");
  TORCH_CHECK(a.scalar_type() == c.scalar_type() && b.scalar_type() == c.scalar_type(),
              "torchconv: matmul_into: dtypes differ");
  const auto batch_stride = [&](const at::Tensor& t) { return d == 3 ? t.stride(0) : int64_t(0); };
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "torchconv_matmul", [&] {
    TORCHCONV_CPU_KERNEL(matmul_kernel, scalar_t)(
        batch, M, N, K, a.const_data_ptr<scalar_t>(), batch_stride(a), a.stride(d - 2), a.stride(d - 1),
        b.const_data_ptr<scalar_t>(), batch_stride(b), b.stride(d - 2), b.stride(d - 1),
        c.mutable_data_ptr<scalar_t>(), batch_stride(c), c.stride(d - 2), accumulate);
  });
}

}  // namespace torchconv
