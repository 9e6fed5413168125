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
#include <vector>

#include "../conv_shape.h"
#include "isa.h"

namespace torchconv {
namespace {

#define TORCHCONV_ISA_KERNELS "matmul_kernels.h"
#include "isa_builds.h"

// c = a b (or +=) for operands as matmul_into takes them, a given either as a tensor or packed.
void run_matmul(at::Tensor& c, const at::Tensor* a, const at::Tensor* a_packed, const at::Tensor& b, bool accumulate) {
  const int64_t d = c.dim();
  TORCH_CHECK((d == 2 || d == 3) && b.dim() == d, "torchconv: matmul_into: 2-D or 3-D operands");
  const int64_t batch = d == 3 ? c.size(0) : 1, M = c.size(d - 2), N = c.size(d - 1), K = b.size(d - 2);
  TORCH_CHECK(b.size(d - 1) == N && (N <= 1 || c.stride(d - 1) == 1) && (d == 2 || b.size(0) == batch),
              "torchconv: matmul_into: shapes or strides do not fit");
  if (a) {
    TORCH_CHECK(a->dim() == d && a->size(d - 2) == M && a->size(d - 1) == K && (d == 2 || a->size(0) == batch),
                "torchconv: matmul_into: shapes or strides do not fit");
  } else {
    const auto sizes = matmul_packed_sizes(a_packed->dim() == 4 ? a_packed->size(0) : 0, M, K);
    TORCH_CHECK(a_packed->dim() == 4 && (sizes[0] == batch || sizes[0] == 1) && a_packed->is_contiguous() &&
                    a_packed->sizes() == at::IntArrayRef(sizes),
                "torchconv: matmul_packed_into: the packed rows do not fit the product");
  }
  const at::Tensor& a_any = a ? *a : *a_packed;
  TORCH_CHECK(a_any.scalar_type() == c.scalar_type() && b.scalar_type() == c.scalar_type(),
              "torchconv: matmul_into: dtypes differ");
  const auto batch_stride = [&](const at::Tensor& t) { return d == 3 ? t.stride(0) : int64_t(0); };
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "torchconv_matmul", [&] {
    const scalar_t* a_data = a ? a->const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* packed = a ? nullptr : a_packed->const_data_ptr<scalar_t>();
    const int64_t packed_stride = a || a_packed->size(0) == 1 ? 0 : a_packed->stride(0);
    TORCHCONV_CPU_KERNEL(matmul_kernel, scalar_t)(
        batch, M, N, K, a_data, a ? batch_stride(*a) : 0, a ? a->stride(d - 2) : 0, a ? a->stride(d - 1) : 0, packed,
        packed_stride, b.const_data_ptr<scalar_t>(), batch_stride(b), b.stride(d - 2), b.stride(d - 1),
        c.mutable_data_ptr<scalar_t>(), batch_stride(c), c.stride(d - 2), accumulate);
  });
}

}  // namespace

void matmul_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  run_matmul(c, &a, nullptr, b, accumulate);
}

void matmul_packed_into(at::Tensor& c, const at::Tensor& a_packed, const at::Tensor& b, bool accumulate) {
  run_matmul(c, nullptr, &a_packed, b, accumulate);
}

at::Tensor pack_matmul_rows(const at::Tensor& a) {
  const int64_t d = a.dim();
  TORCH_CHECK(d == 2 || d == 3, "torchconv: pack_matmul_rows: a 2-D or 3-D operand");
  const int64_t batch = d == 3 ? a.size(0) : 1, M = a.size(d - 2), K = a.size(d - 1);
  at::Tensor packed = new_workspace(matmul_packed_sizes(batch, M, K), a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "torchconv_pack_matmul_rows", [&] {
    TORCHCONV_CPU_KERNEL(matmul_pack_rows_kernel, scalar_t)(batch, M, K, a.const_data_ptr<scalar_t>(),
                                                            d == 3 ? a.stride(0) : 0, a.stride(d - 2),
                                                            a.stride(d - 1), packed.mutable_data_ptr<scalar_t>());
  });
  return packed;
}

}  // namespace torchconv
