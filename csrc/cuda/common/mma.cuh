// Tensor-core building blocks (sm_80 and later): warp-level mma.sync and ldmatrix as PTX wrappers.
//
// Operands are handled in bytes: one mma k-step is 32 bytes of each operand row, i.e. 16 float16 /
// bfloat16 values (m16n8k16) or 8 TF32 values (m16n8k8). ldmatrix reads 8 x 16-byte rows per
// matrix and hands lane l the 32-bit word (l / 4, l % 4) of it, which is both the 16-bit pair and
// the TF32 element the fragments of the two shapes want, so one fragment loader serves all three
// types (the tf32 MMAs read 32-bit words and are fed after a round-to-nearest conversion).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace torchconv {
namespace cuda {

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-byte rows; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, each matrix transposed: lane l gets elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4)
// of its 8 x 8 b16 matrix -- a fragment of an operand stored with the reduction along the rows.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// float -> TF32 bits, rounded to nearest (ties away), as cuDNN and cuBLAS feed their TF32 MMAs.
__device__ __forceinline__ uint32_t to_tf32(uint32_t bits) {
  uint32_t out;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(out) : "f"(__uint_as_float(bits)));
  return out;
}

__device__ __forceinline__ float round_to_tf32(float v) { return __uint_as_float(to_tf32(__float_as_uint(v))); }

// to_tf32's rounding for an operand only a TF32 MMA reads: the MMA drops the low 13 bits itself, so
// half a TF32 unit added to the bit pattern is the whole rounding -- two instructions where
// cvt.rna.tf32.f32 takes three on sm_80 / sm_90 (it also clears the low bits). Infinities and NaNs
// pass unchanged (an addition could carry a NaN's payload into its sign).
__device__ __forceinline__ uint32_t tf32_bits_for_mma(float v) {
  const uint32_t bits = __float_as_uint(v);
  return fabsf(v) < __int_as_float(0x7f800000) ? bits + 0x1000u : bits;
}

// Two float32 values as two bfloat16 pairs: hi = (v0, v1) rounded to bfloat16, lo = the remainders
// (exact in float32) rounded to bfloat16; v0 in each word's low half, the MMA fragments' lower
// k index. bfloat16 keeps float32's exponent range, so neither part overflows or flushes where
// float32 would not, and hi + lo keeps 16 bits of each value: the three products hi hi + hi lo + lo hi
// ("3xBF16") leave about 2^-16 of the result, at twice the TF32 MMA rate.
__device__ __forceinline__ void split_bf16x2(float v0, float v1, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(hi) : "f"(v1), "f"(v0));
  const float r0 = v0 - __uint_as_float(hi << 16), r1 = v1 - __uint_as_float(hi & 0xffff0000u);
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(lo) : "f"(r1), "f"(r0));
}

// A float32 filter re-laid for the TF32 kernels is stored rounded once (relayout_filter's value).
struct Tf32Rounding {
  __device__ float operator()(float v) const { return round_to_tf32(v); }
};

// A block tile of kBM x kBN outputs over kWarpsM x kWarpsN warps, each warp owning kMTiles x kNTiles
// m16n8 accumulator fragments (the mma.sync kernels' shared geometry).
template <int kBM_, int kBN_, int kWarpsM_, int kWarpsN_, int kMinBlocks_>
struct MmaWarpTiling {
  static constexpr int kBM = kBM_, kBN = kBN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpM = kBM / kWarpsM, kWarpN = kBN / kWarpsN;
  static constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tiles are whole 16 x 16 pieces");
};

// The MMA of one k-step for element type T (float means TF32): d += a * b, FP32 accumulators.
template <typename T>
struct WarpMma;

template <>
struct WarpMma<__half> {
  static constexpr bool kTf32 = false;
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct WarpMma<__nv_bfloat16> {
  static constexpr bool kTf32 = false;
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// m16n8k8 in bfloat16 (half of WarpMma<__nv_bfloat16>'s reduction): a's two words are rows g and
// g + 8 at k 2 (l % 4) and 2 (l % 4) + 1, b's word rows k 2 (l % 4) and 2 (l % 4) + 1 of column g.
__device__ __forceinline__ void mma_bf16_m16n8k8(float (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b));
}

template <>
struct WarpMma<float> {
  static constexpr bool kTf32 = true;
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Conversions between the element types and float, for epilogues and the bias.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Two neighbouring 16-bit elements as the 4-byte word that holds them (the first in its low half),
// widened to floats.
template <typename T>
__device__ __forceinline__ float2 widen_pair(uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
  } else {
    static_assert(std::is_same_v<T, __half>, "bfloat16 or float16");
    __half2 h;
    memcpy(&h, &w, sizeof(w));
    return __half22float2(h);
  }
}

// An element read through the read-only cache where `ok`, else zero, in its own type. Callers widen
// it (widen_to_float) where they use it: the load's latency then overlaps the work in between, where
// a conversion next to the load would wait for it.
template <typename T>
__device__ __forceinline__ T ldg_or_zero(const T* p, bool ok) {
  return ok ? __ldg(p) : from_float<T>(0.f);
}
template <typename T, int N>
__device__ __forceinline__ void widen_to_float(const T (&in)[N], float (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(in[i]);
}
// Two neighbouring elements loaded as one word (8 bytes of float, 4 of a 16-bit type), or zeros
// where !ok; `p` is aligned to the pair. Widened where used, as ldg_or_zero.
template <typename T>
__device__ __forceinline__ void ldg_pair_or_zero(const T* p, bool ok, T& first, T& second) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "float or a 16-bit type");
  using Word = std::conditional_t<sizeof(T) == 4, uint2, unsigned>;
  Word w{};
  if (ok) w = __ldg(reinterpret_cast<const Word*>(p));
  T pair[2];
  memcpy(pair, &w, sizeof(w));
  first = pair[0];
  second = pair[1];
}
// Two neighbouring elements stored as one word (8 bytes of float, 4 of a 16-bit type); `dst` is
// aligned to the pair.
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float v0, float v1) {
  struct alignas(2 * sizeof(T)) Pair {
    T a, b;
  };
  *reinterpret_cast<Pair*>(dst) = Pair{from_float<T>(v0), from_float<T>(v1)};
}
// Four neighbouring elements stored as one word (16 bytes of float, 8 of a 16-bit type); `dst` is
// aligned to the quad.
template <typename T>
__device__ __forceinline__ void store_quad(T* dst, const float (&v)[4]) {
  struct alignas(4 * sizeof(T)) Quad {
    T e[4];
  };
  *reinterpret_cast<Quad*>(dst) = Quad{{from_float<T>(v[0]), from_float<T>(v[1]), from_float<T>(v[2]), from_float<T>(v[3])}};
}

}  // namespace cuda
}  // namespace torchconv
