// The wgmma issue rates a fused tensor-core Winograd can count on: how many MACs per clock an SM's
// tensor cores sustain for the shapes its designs would issue, with nothing else running.
//
// What it answers. A fused F(2x2,3x3) block keeps all 16 points' accumulators in registers while it
// walks the channels, so its per-point tile (tiles x filters) is small: 64 x 32 per warpgroup in the
// fused wgmma tile (U as A from shared memory, V as B), or 64 tiles x 16-64 filters with V held in
// registers as A. Whether such small-N MMAs reach the dense peak, with both operands read from
// shared memory or one from registers, bounds every such design before its transforms are counted.
//
// Each block (one per SM) runs `warpgroups` warpgroups; each warpgroup issues, per iteration, its
// four k-steps of a 128-byte swizzled K-major row for each of `sets` accumulator sets (the points a
// warpgroup owns), commits, and keeps one group in flight (as a pipelined main loop does). A is the
// warpgroup's own 64-row tile (or its fragment in registers), B one N-row tile; values are small
// finite numbers of both signs. The clock is read on block 0 (clock64 against %globaltimer), so the
// rate is also given per clock and SM, against the dense peak per clock (bfloat16 2048, e4m3 4096,
// TF32 1024 MACs per clock and SM).
//
// Build and run on an sm_90a GPU (stand-alone, no PyTorch):
//   nvcc -std=c++17 -O3 -arch=sm_90a -Icsrc -o /tmp/wgmma_rate benchmarks/micro/wgmma_rate.cu
//   /tmp/wgmma_rate > wgmma_rate.json
// Each row is the median of 5 timed launches after one warm-up. The second table ("contention",
// contention_kernel below) measures the MMAs beside other shared-memory traffic.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/common/pipeline.cuh"
#include "cuda/common/wgmma.cuh"
#include "check.h"

using torchconv::cuda::wgmma_commit;
using torchconv::cuda::wgmma_descriptor;
using torchconv::cuda::wgmma_fence;
using torchconv::cuda::wgmma_wait;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define WGMMA_ASM(...) __trap()
#endif

// d (m64 x n per warpgroup, float32) += A (m64 x k) * B (k x n): A and B from shared memory (SS) or A
// from registers (RS, the mma.sync A-fragment layout of one k-step), one k-step per call.
template <int kN> struct Bf16SS;
template <int kN> struct Bf16RS;
template <int kN> struct E4m3SS;
template <int kN> struct E4m3RS;
template <int kN> struct Tf32SS;
// The accumulator operands of m64nN (N / 2 floats a thread), for the wrappers below.
#define ACC_OPS_8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define ACC_CONS_8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define ACC_OPS_16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define ACC_CONS_16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define ACC_OPS_32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ACC_CONS_32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define ACC_OPS_64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define ACC_CONS_64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define ACC_OPS_128 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define ACC_CONS_128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define WGMMA_PRELUDE "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\nwgmma.mma_async.sync.aligned.m64n"
// A and B from shared memory: the descriptors are operands IA and IB; MODES: the immediates after the
// A and B scales (16-bit types: both K-major).
#define WGMMA_SS(KIND, N, ACC, TYPES, MODES, IA, IB)                                                    \
  template <>                                                                                           \
  struct KIND<N> {                                                                                      \
    __device__ __forceinline__ static void run(float (&d)[ACC], uint64_t da, uint64_t db) {           \
      WGMMA_ASM(WGMMA_PRELUDE #N TYPES " {" ACC_OPS_##ACC "}, %" #IA ", %" #IB ", p, 1, 1" MODES ";\n}\n" \
                : ACC_CONS_##ACC                                                                        \
                : "l"(da), "l"(db));                                                                    \
    }                                                                                                   \
  };
// A from registers (operands IA to IA + 3, given as IA0..IA3), B's descriptor operand IB.
#define WGMMA_RS(KIND, N, ACC, TYPES, MODES, IA0, IA1, IA2, IA3, IB)                                         \
  template <>                                                                                               \
  struct KIND<N> {                                                                                          \
    __device__ __forceinline__ static void run(float (&d)[ACC], const uint32_t (&x)[4], uint64_t db) {     \
      WGMMA_ASM(WGMMA_PRELUDE #N TYPES " {" ACC_OPS_##ACC "}, {%" #IA0 ", %" #IA1 ", %" #IA2 ", %" #IA3       \
                "}, %" #IB ", p, 1, 1" MODES ";\n}\n"                                                       \
                : ACC_CONS_##ACC                                                                            \
                : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "l"(db));                                     \
    }                                                                                                       \
  };
#define BF16 "k16.f32.bf16.bf16"
#define E4M3 "k32.f32.e4m3.e4m3"
#define TF32 "k8.f32.tf32.tf32"
WGMMA_SS(Bf16SS, 16, 8, BF16, ", 0, 0", 8, 9)
WGMMA_SS(Bf16SS, 32, 16, BF16, ", 0, 0", 16, 17)
WGMMA_SS(Bf16SS, 64, 32, BF16, ", 0, 0", 32, 33)
WGMMA_SS(Bf16SS, 128, 64, BF16, ", 0, 0", 64, 65)
WGMMA_SS(Bf16SS, 256, 128, BF16, ", 0, 0", 128, 129)
WGMMA_RS(Bf16RS, 16, 8, BF16, ", 0", 8, 9, 10, 11, 12)
WGMMA_RS(Bf16RS, 32, 16, BF16, ", 0", 16, 17, 18, 19, 20)
WGMMA_RS(Bf16RS, 64, 32, BF16, ", 0", 32, 33, 34, 35, 36)
WGMMA_RS(Bf16RS, 128, 64, BF16, ", 0", 64, 65, 66, 67, 68)
WGMMA_RS(Bf16RS, 256, 128, BF16, ", 0", 128, 129, 130, 131, 132)
WGMMA_SS(E4m3SS, 16, 8, E4M3, "", 8, 9)
WGMMA_SS(E4m3SS, 32, 16, E4M3, "", 16, 17)
WGMMA_SS(E4m3SS, 64, 32, E4M3, "", 32, 33)
WGMMA_SS(E4m3SS, 128, 64, E4M3, "", 64, 65)
WGMMA_SS(E4m3SS, 256, 128, E4M3, "", 128, 129)
WGMMA_RS(E4m3RS, 16, 8, E4M3, "", 8, 9, 10, 11, 12)
WGMMA_RS(E4m3RS, 32, 16, E4M3, "", 16, 17, 18, 19, 20)
WGMMA_RS(E4m3RS, 64, 32, E4M3, "", 32, 33, 34, 35, 36)
WGMMA_RS(E4m3RS, 128, 64, E4M3, "", 64, 65, 66, 67, 68)
WGMMA_RS(E4m3RS, 256, 128, E4M3, "", 128, 129, 130, 131, 132)
WGMMA_SS(Tf32SS, 32, 16, TF32, "", 16, 17)
WGMMA_SS(Tf32SS, 64, 32, TF32, "", 32, 33)
WGMMA_SS(Tf32SS, 128, 64, TF32, "", 64, 65)

// The operand kinds: the MMA wrapper, whether A comes from registers, MACs per k-step and row, the
// dense peak in MACs per clock and SM, and a finite value pattern for a 32-bit word of operands.
enum Kind { kBf16SS, kBf16RS, kE4m3SS, kE4m3RS, kTf32SS };
constexpr const char* kKindNames[] = {"bf16-ss", "bf16-rs", "e4m3-ss", "e4m3-rs", "tf32-ss"};
constexpr int kKPerStep[] = {16, 16, 32, 32, 8};
constexpr int kPeakMacsPerClock[] = {2048, 2048, 4096, 4096, 1024};

__host__ __device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352d;
  x ^= x >> 15;
  x *= 0x846ca68b;
  return x ^ (x >> 16);
}

// Values of magnitude 2^-10 to 2^-9 (16-bit, TF32) or small e4m3 numbers, signs mixed: sums over a
// run stay finite.
__device__ inline uint32_t operand_word(Kind kind, uint32_t i) {
  const uint32_t h = hash32(i);
  switch (kind) {
    case kBf16SS:
    case kBf16RS: {
      const uint32_t lo = 0x3A80u | (h & 0x7Fu) | ((h >> 7) & 1u) << 15;
      const uint32_t hi = 0x3A80u | ((h >> 8) & 0x7Fu) | ((h >> 15) & 1u) << 15;
      return lo | hi << 16;
    }
    case kE4m3SS:
    case kE4m3RS:
      return (h & 0x2F2F2F2Fu) | 0x08080808u | (h & 0x80808080u);
    default:
      return 0x3A800000u | (h & 0x007FE000u) | (h & 0x80000000u);
  }
}

constexpr int kSteps = 4;  // k-steps per 128-byte row

// The measured loop of a warpgroup: per iteration, the four k-steps of its A tile (at a_addr, or its
// fragment in registers) against the B tile at b_addr into each of kSets accumulator sets, one
// commit group left in flight. Returns the accumulators' sum, which the caller keeps alive.
template <Kind kKind, int kN, int kSets>
__device__ __forceinline__ float mma_loop(unsigned a_addr, unsigned b_addr, int iters) {
  uint32_t a_frag[kSteps][4];
  for (int s = 0; s < kSteps; ++s)
    for (int e = 0; e < 4; ++e) a_frag[s][e] = operand_word(kKind, threadIdx.x * 16 + s * 4 + e);
  float acc[kSets][kN / 2];
  for (int s = 0; s < kSets; ++s)
    for (int j = 0; j < kN / 2; ++j) acc[s][j] = 0.f;
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint64_t da = wgmma_descriptor(a_addr + ks * 32), db = wgmma_descriptor(b_addr + ks * 32);
#pragma unroll
      for (int s = 0; s < kSets; ++s) {
        if constexpr (kKind == kBf16SS) Bf16SS<kN>::run(acc[s], da, db);
        if constexpr (kKind == kBf16RS) Bf16RS<kN>::run(acc[s], a_frag[ks], db);
        if constexpr (kKind == kE4m3SS) E4m3SS<kN>::run(acc[s], da, db);
        if constexpr (kKind == kE4m3RS) E4m3RS<kN>::run(acc[s], a_frag[ks], db);
        if constexpr (kKind == kTf32SS) Tf32SS<kN>::run(acc[s], da, db);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  float sum = 0.f;
  for (int s = 0; s < kSets; ++s)
    for (int j = 0; j < kN / 2; ++j) sum += acc[s][j];
  return sum;
}

template <Kind kKind, int kN, int kSets, int kThreads>
__global__ void __launch_bounds__(kThreads, 1) rate_kernel(int iters, float* sink, long long* clocks) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int warpgroups = kThreads / 128, wg = threadIdx.x / 128;
  const int a_bytes = 64 * 128, b_bytes = kN * 128;
  uint32_t* words = reinterpret_cast<uint32_t*>(smem);
  for (int i = threadIdx.x; i < (warpgroups * a_bytes + b_bytes) / 4; i += kThreads) words[i] = operand_word(kKind, i);
  __syncthreads();
  torchconv::cuda::fence_proxy_async_shared();
  const unsigned base = unsigned(__cvta_generic_to_shared(smem));
  long long c0 = 0, t0 = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    c0 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  }
  const float sum = mma_loop<kKind, kN, kSets>(base + wg * a_bytes, base + warpgroups * a_bytes, iters);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    clocks[0] = clock64() - c0;
    clocks[1] = t1 - t0;
  }
  if (sum == 1234.5f) sink[threadIdx.x] = sum;  // keeps the MMAs; never true for these operands
}

struct Row {
  Kind kind;
  int n, sets, threads;
  void (*kernel)(int, float*, long long*);
};

template <Kind kKind, int kN, int kSets, int kThreads>
Row row() {
  return {kKind, kN, kSets, kThreads, rate_kernel<kKind, kN, kSets, kThreads>};
}

// The shapes: N 16 to 256 for each kind, 1, 2 and 4 warpgroups per SM, the sets per warpgroup chosen
// so that 4 warpgroups' accumulators fit their registers (at most 64 per thread), 2 for N = 256.
template <Kind kKind>
void add_kind(std::vector<Row>& rows) {
  if constexpr (kKind != kTf32SS) {
    rows.push_back(row<kKind, 16, 4, 128>());
    rows.push_back(row<kKind, 16, 4, 256>());
    rows.push_back(row<kKind, 16, 4, 512>());
  }
  rows.push_back(row<kKind, 32, 4, 128>());
  rows.push_back(row<kKind, 32, 4, 256>());
  rows.push_back(row<kKind, 32, 4, 512>());
  rows.push_back(row<kKind, 64, 2, 128>());
  rows.push_back(row<kKind, 64, 2, 256>());
  rows.push_back(row<kKind, 64, 2, 512>());
  rows.push_back(row<kKind, 128, 1, 128>());
  rows.push_back(row<kKind, 128, 1, 256>());
  rows.push_back(row<kKind, 128, 1, 512>());
  if constexpr (kKind != kTf32SS) {
    rows.push_back(row<kKind, 256, 1, 128>());
    rows.push_back(row<kKind, 256, 1, 256>());
  }
}

// Shared-memory traffic beside the MMAs: `mma_warpgroups` warpgroups run the rate loop above while
// one more warpgroup streams 16-byte accesses through the SM's shared-memory / L1 data path until
// they finish -- shared loads (`lds`), shared stores (`sts`), global loads that hit in L1 (`ldg`,
// a 32 KB buffer), or bulk copies of that buffer from L2 into shared memory (`bulk`: one thread
// keeps four 8 KB copies in flight, as a tensor-copy producer would) -- or, with no MMAs, for a
// fixed number of clocks (`alone`). If the MMAs' operand
// reads and the other accesses share one data path, the bytes per clock of both add up to a constant.
enum Traffic { kLds, kSts, kLdg, kBulk };
constexpr const char* kTrafficNames[] = {"lds", "sts", "ldg", "bulk"};
constexpr int kBulkCopies = 4;  // copies of kTrafficBytes / kBulkCopies in flight
constexpr int kTrafficBytes = 32 * 1024;

template <Kind kKind, int kN, int kSets, int kMmaWarpgroups, Traffic kTraffic>
__global__ void __launch_bounds__(128 * (kMmaWarpgroups + 1), 1)
    contention_kernel(int iters, const uint4* global_buf, float* sink, long long* out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kThreads = 128 * (kMmaWarpgroups + 1);
  const int wg = threadIdx.x / 128;
  const int a_bytes = 64 * 128, b_bytes = kN * 128;
  const int mma_bytes = kMmaWarpgroups * a_bytes + b_bytes;
  uint32_t* words = reinterpret_cast<uint32_t*>(smem);
  for (int i = threadIdx.x; i < (mma_bytes + kTrafficBytes) / 4; i += kThreads) words[i] = operand_word(kKind, i);
  volatile int* done = reinterpret_cast<volatile int*>(smem + mma_bytes + kTrafficBytes);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + mma_bytes + kTrafficBytes + 16);
  if (threadIdx.x == 0) {
    *done = 0;
    for (int b = 0; b < kBulkCopies; ++b) torchconv::cuda::mbarrier_init(bars + b, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  torchconv::cuda::fence_proxy_async_shared();
  const long long c0 = clock64();
  if (wg < kMmaWarpgroups) {
    const unsigned base = unsigned(__cvta_generic_to_shared(smem));
    const float sum = mma_loop<kKind, kN, kSets>(base + wg * a_bytes, base + kMmaWarpgroups * a_bytes, iters);
    if (iters == 0)  // traffic alone: a fixed window
      while (clock64() - c0 < 4000000) {
      }
    if (sum == 1234.5f) sink[threadIdx.x] = sum;
    if (threadIdx.x == 0) {
      *done = 1;
      if (blockIdx.x == 0) out[0] = clock64() - c0;
    }
  } else {
    const int t = threadIdx.x - 128 * kMmaWarpgroups;
    const uint4* region = reinterpret_cast<const uint4*>(smem + mma_bytes);
    uint4* region_w = reinterpret_cast<uint4*>(smem + mma_bytes);
    uint4 x = make_uint4(t, 0, 0, 0);
    long long rounds = 0;
    if constexpr (kTraffic == kBulk) {
      constexpr unsigned kCopyBytes = kTrafficBytes / kBulkCopies;
      if (t == 0)
        while (*done == 0) {
          for (int b = 0; b < kBulkCopies; ++b) {
            torchconv::cuda::mbarrier_arrive_expect_tx(bars + b, kCopyBytes);
            torchconv::cuda::bulk_copy_to_shared(smem + mma_bytes + b * kCopyBytes,
                                                 reinterpret_cast<const uint8_t*>(global_buf) + b * kCopyBytes,
                                                 kCopyBytes, bars + b);
          }
          for (int b = 0; b < kBulkCopies; ++b) torchconv::cuda::mbarrier_wait(bars + b, unsigned(rounds & 1));
          ++rounds;
        }
    } else
    while (*done == 0) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int i = (t + 128 * k + 16 * int(rounds & 15)) & (kTrafficBytes / 16 - 1);
        if constexpr (kTraffic == kLds) {
          const uint4 v = region[i];
          x.x ^= v.x, x.y ^= v.y, x.z ^= v.z, x.w ^= v.w;
        }
        if constexpr (kTraffic == kSts) region_w[i] = x;
        if constexpr (kTraffic == kLdg) {
          const uint4 v = global_buf[i];
          x.x ^= v.x, x.y ^= v.y, x.z ^= v.z, x.w ^= v.w;
        }
      }
      ++rounds;
    }
    if ((x.x ^ x.y ^ x.z ^ x.w) == 0x12345u) sink[t] = 1.f;  // keeps the loads, all 16 bytes
    if (blockIdx.x == 0 && t == 0) {
      out[1] = clock64() - c0;
      out[2] = rounds * (kTraffic == kBulk ? kTrafficBytes : 128 * 8 * 16);
    }
  }
}

struct ContentionRow {
  Kind kind;
  int n, sets, mma_warpgroups, traffic;
  void (*kernel)(int, const uint4*, float*, long long*);
};

template <Kind kKind, int kN, int kSets>
void add_contention(std::vector<ContentionRow>& rows) {
  rows.push_back({kKind, kN, kSets, 2, kLds, contention_kernel<kKind, kN, kSets, 2, kLds>});
  rows.push_back({kKind, kN, kSets, 2, kSts, contention_kernel<kKind, kN, kSets, 2, kSts>});
  rows.push_back({kKind, kN, kSets, 2, kLdg, contention_kernel<kKind, kN, kSets, 2, kLdg>});
  rows.push_back({kKind, kN, kSets, 2, kBulk, contention_kernel<kKind, kN, kSets, 2, kBulk>});
}

// The MMAs' shared-memory operand bytes per MAC: A (SS only) and B, one k-step of 32 bytes a row.
double operand_bytes_per_mac(Kind kind, int n) {
  const double a = (kind == kBf16RS || kind == kE4m3RS) ? 0.0 : 64.0 * 32, b = n * 32.0;
  return (a + b) / (64.0 * n * kKPerStep[kind]);
}

void run_contention(int sms, const uint4* global_buf, float* sink, long long* out) {
  std::vector<ContentionRow> rows;
  add_contention<kBf16SS, 64, 2>(rows);
  add_contention<kBf16RS, 64, 2>(rows);
  add_contention<kBf16SS, 32, 4>(rows);
  std::printf("], \"contention\": [\n");
  bool first = true;
  for (const ContentionRow& r : rows) {
    const int smem = r.mma_warpgroups * 64 * 128 + r.n * 128 + kTrafficBytes + 16 + 8 * kBulkCopies;
    CHECK(cudaFuncSetAttribute(r.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const double macs_per_iter_block = double(r.mma_warpgroups) * kSteps * r.sets * 64.0 * r.n * kKPerStep[r.kind];
    const int iters = int(4e6 * kPeakMacsPerClock[r.kind] / macs_per_iter_block);  // about 4M clocks
    for (int alone = 1; alone >= 0; --alone) {
      const int it = alone ? 0 : iters;
      long long h[3] = {0, 0, 0};
      for (int rep = 0; rep < 3; ++rep) {  // the last of three launches (the first warms up)
        r.kernel<<<sms, 128 * (r.mma_warpgroups + 1), smem>>>(it, global_buf, sink, out);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
      }
      CHECK(cudaMemcpy(h, out, 24, cudaMemcpyDeviceToHost));
      const double mma_per_clock = alone ? 0.0 : macs_per_iter_block * it / double(h[0]);
      const double traffic_per_clock = double(h[2]) / double(h[1]);  // bytes moved by the traffic warpgroup
      const double operand_per_clock = mma_per_clock * operand_bytes_per_mac(r.kind, r.n);
      std::printf("%s  {\"kind\": \"%s\", \"n\": %d, \"sets\": %d, \"mma_warpgroups\": %d, \"traffic\": \"%s\", "
                  "\"mmas\": %s, \"mma_of_peak\": %.3f, \"mma_operand_bytes_per_clock\": %.1f, "
                  "\"traffic_bytes_per_clock\": %.1f, \"sum_bytes_per_clock\": %.1f}",
                  first ? "" : ",\n", kKindNames[r.kind], r.n, r.sets, r.mma_warpgroups, kTrafficNames[r.traffic],
                  alone ? "false" : "true", mma_per_clock / kPeakMacsPerClock[r.kind], operand_per_clock,
                  traffic_per_clock, operand_per_clock + traffic_per_clock);
      first = false;
    }
  }
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::vector<Row> rows;
  add_kind<kBf16SS>(rows);
  add_kind<kBf16RS>(rows);
  add_kind<kE4m3SS>(rows);
  add_kind<kE4m3RS>(rows);
  add_kind<kTf32SS>(rows);
  float* sink;
  long long* clocks;
  CHECK(cudaMalloc(&sink, 4096));
  CHECK(cudaMalloc(&clocks, 32));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::printf("{\"gpu\": \"%s\", \"sms\": %d, \"rows\": [\n", prop.name, sms);
  bool first = true;
  for (const Row& r : rows) {
    const int warpgroups = r.threads / 128;
    const int smem = warpgroups * 64 * 128 + r.n * 128;
    CHECK(cudaFuncSetAttribute(r.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // About 2 ms a launch at the peak rate.
    const double macs_per_iter = double(sms) * warpgroups * kSteps * r.sets * 64.0 * r.n * kKPerStep[r.kind];
    const int iters = std::max(64, int(2e-3 * 1.8e9 * sms * kPeakMacsPerClock[r.kind] / macs_per_iter));
    r.kernel<<<sms, r.threads, smem>>>(iters, sink, clocks);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    long long host_clocks[2] = {0, 0};
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaEventRecord(e0));
      r.kernel<<<sms, r.threads, smem>>>(iters, sink, clocks);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float t;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    CHECK(cudaMemcpy(host_clocks, clocks, 16, cudaMemcpyDeviceToHost));
    std::sort(ms.begin(), ms.end());
    const double t = ms[2] * 1e-3, macs = macs_per_iter * iters;
    const double mhz = host_clocks[1] > 0 ? 1e3 * double(host_clocks[0]) / double(host_clocks[1]) : 0.0;
    const double per_clock = macs / (t * mhz * 1e6) / sms;
    std::printf("%s  {\"kind\": \"%s\", \"n\": %d, \"sets\": %d, \"warpgroups\": %d, \"us\": %.1f, \"tflops\": %.1f, "
                "\"mhz\": %.0f, \"macs_per_clock_sm\": %.0f, \"of_peak\": %.3f}",
                first ? "" : ",\n", kKindNames[r.kind], r.n, r.sets, warpgroups, t * 1e6, 2.0 * macs / t * 1e-12, mhz,
                per_clock, per_clock / kPeakMacsPerClock[r.kind]);
    first = false;
  }
  uint4* global_buf;
  CHECK(cudaMalloc(&global_buf, kTrafficBytes));
  CHECK(cudaMemset(global_buf, 1, kTrafficBytes));
  std::printf("\n");
  run_contention(sms, global_buf, sink, clocks);
  std::printf("\n]}\n");
  return 0;
}
