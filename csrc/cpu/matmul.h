// The CPU matrix product the GEMM and Winograd CPU kernels run (our own, not ATen's BLAS).
#pragma once

#include <array>

#include <ATen/core/Tensor.h>

namespace torchconv {

// c (M x N, unit column stride) = a b, or c += a b with `accumulate`; a (M x K) and b (K x N) are any
// strided 2-D views of float32 or float64 data of c's dtype; or a batch of such products, each operand
// 3-D with the batch first (one parallel region for the batch). Each element of c is summed by one thread
// in a fixed order (chunks of K in turn), so its bits do not depend on the thread count.
void matmul_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate);

// Rows of a per register tile: a's rows are packed kMatmulRows at a time, depth-major.
constexpr int64_t kMatmulRows = 6;

// The layout in which the product packs a's rows, for callers that write a in it once and multiply it
// with many b (Winograd's transformed filters against each chunk of tiles): item i of a batch of M x K
// a's as a contiguous batch x ceil(M / kMatmulRows) x K x kMatmulRows tensor, element (i, m, k) at
// matmul_packed_index, rows past M zero.
inline int64_t matmul_packed_index(int64_t M, int64_t K, int64_t i, int64_t m, int64_t k) {
  const int64_t units = (M + kMatmulRows - 1) / kMatmulRows;
  return ((i * units + m / kMatmulRows) * K + k) * kMatmulRows + m % kMatmulRows;
}

// The sizes of that tensor for a batch of `batch` M x K a's.
inline std::array<int64_t, 4> matmul_packed_sizes(int64_t batch, int64_t M, int64_t K) {
  return {batch, (M + kMatmulRows - 1) / kMatmulRows, K, kMatmulRows};
}

// a (M x K, or a batch of them) packed as matmul_packed_index lays it, by the product's own packing.
at::Tensor pack_matmul_rows(const at::Tensor& a);

// matmul_into with a given packed (an M x K a laid as matmul_packed_index says: a batch as c's, or one
// for every product of the batch): the same sums in the same order, so the same bits, without packing a
// again.
void matmul_packed_into(at::Tensor& c, const at::Tensor& a_packed, const at::Tensor& b, bool accumulate);

}  // namespace torchconv
