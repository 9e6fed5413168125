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

namespace portable {
constexpr int kVectorBytes = 16;
#include "matmul_kernels.h"
}  // namespace portable

#ifdef TORCHCONV_CPU_AVX2
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int kVectorBytes = 32;
#include "matmul_kernels.h"
}  // namespace avx2
#pragma GCC pop_options
#endif

}  // namespace

void matmul_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2 && a.size(1) == b.size(0) && c.size(0) == a.size(0) &&
                  c.size(1) == b.size(1) && (c.size(1) <= 1 || c.stride(1) == 1),
              "torchconv: matmul_into: shapes or strides do not fit");
  TORCH_CHECK(a.scalar_type() == c.scalar_type() && b.scalar_type() == c.scalar_type(),
              "torchconv: matmul_into: dtypes differ");
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "torchconv_matmul", [&] {
    TORCHCONV_CPU_KERNEL(matmul_kernel, scalar_t)(c.size(0), c.size(1), a.size(1), a.const_data_ptr<scalar_t>(),
                                                  a.stride(0), a.stride(1), b.const_data_ptr<scalar_t>(),
                                                  b.stride(0), b.stride(1), c.mutable_data_ptr<scalar_t>(),
                                                  c.stride(0), accumulate);
  });
}

}  // namespace torchconv
