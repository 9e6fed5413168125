// The two builds of a CPU kernels header (isa.h), included by a .cpp inside its own anonymous
// namespace after it defines TORCHCONV_ISA_KERNELS as the header's name: the header in namespace
// `portable` with 16-byte vectors for any x86-64 CPU, and in `avx2` with 32-byte vectors compiled for
// AVX2 and FMA; TORCHCONV_CPU_KERNEL picks one at run time. No include guard (each includer builds its
// own header) and no includes: the includer provides isa.h and what the kernels need.

namespace portable {
constexpr int kVectorBytes = 16;
#include TORCHCONV_ISA_KERNELS
}  // namespace portable

#ifdef TORCHCONV_CPU_AVX2
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int kVectorBytes = 32;
#include TORCHCONV_ISA_KERNELS
}  // namespace avx2
#pragma GCC pop_options
#endif

#undef TORCHCONV_ISA_KERNELS
