// Division by a divisor fixed for a launch, as a multiply and a shift: the host makes the divisor,
// kernels split indices with it where an integer division's issue slots would count.
#pragma once

#include <cstdint>

namespace torchconv {
namespace cuda {

// Numerators below 2^31 by a fixed divisor d (round-up method): with s = ceil(log2 d) and
// m = ceil(2^(31 + s) / d) < 2^32, n / d = (n * m) >> (31 + s) for every such n.
struct FastDivisor {
  uint32_t d, m;
  int shift;
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return uint32_t((uint64_t(n) * m) >> shift); }
};
inline FastDivisor make_fast_divisor(uint32_t d) {
  int s = 0;
  while ((uint64_t(1) << s) < d) ++s;
  return {d, uint32_t(((uint64_t(1) << (31 + s)) + d - 1) / d), 31 + s};
}

}  // namespace cuda
}  // namespace torchconv
