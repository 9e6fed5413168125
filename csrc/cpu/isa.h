// The CPU kernels built twice (matmul.cpp and grouped_nhwc.cpp through isa_builds.h, direct.cpp's
// depthwise forward along the channels): for the x86-64 baseline the extension is compiled for, and for
// AVX2 (with FMA where the kernels allow it) in a `#pragma GCC target` region, the second run where the
// CPU has both.
#pragma once

#include <cstdlib>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TORCHCONV_CPU_AVX2 1
#endif

namespace torchconv {

// Whether the AVX2 builds run: the CPU has AVX2 and FMA, and TORCHCONV_CPU_BASELINE (read once) is
// unset; TORCHCONV_CPU_BASELINE=1 runs the baseline builds on any CPU, which the tests do.
inline bool cpu_runs_avx2() {
#ifdef TORCHCONV_CPU_AVX2
  static const bool runs = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           std::getenv("TORCHCONV_CPU_BASELINE") == nullptr;
  return runs;
#else
  return false;
#endif
}

}  // namespace torchconv

// The build of kernel template `name` that this CPU runs (a pointer to it, instantiated with the
// template arguments after the name): avx2::name where cpu_runs_avx2(), else portable::name -- the two
// namespaces the includer builds its kernels in.
#ifdef TORCHCONV_CPU_AVX2
#define TORCHCONV_CPU_KERNEL(name, ...) \
  (::torchconv::cpu_runs_avx2() ? &avx2::name<__VA_ARGS__> : &portable::name<__VA_ARGS__>)
#else
#define TORCHCONV_CPU_KERNEL(name, ...) (&portable::name<__VA_ARGS__>)
#endif
