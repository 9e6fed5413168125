// The CPU matrix product the GEMM and Winograd CPU kernels run (our own, not ATen's BLAS).
#pragma once

#include <ATen/core/Tensor.h>

namespace torchconv {

// c (M x N, unit column stride) = a b, or c += a b with `accumulate`; a (M x K) and b (K x N) are any
// strided 2-D views of float32 or float64 data of c's dtype; or a batch of such products, each operand
// 3-D with the batch first (one parallel region for the batch). Each element of c is summed by one thread
// in a fixed order (chunks of K in turn), so its bits do not depend on the thread count.
void matmul_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate);

}  // namespace torchconv
