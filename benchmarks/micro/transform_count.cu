// The input transform's instructions per transformed value in the designs that
// benchmarks/winograd_half_bound.py counts, measured on their SASS instead of counted by hand: one
// 16-channel chunk of a thread's work, bfloat16 NHWC input, V = B^T d B exact in float32, then
// either (kSplit) V's split into a bfloat16 high part and a float8 e5m2 low part under a power-of-two
// scale, or (single) V under the tile's power-of-two scale rounded to float16 (11 significant bits,
// TF32's precision: the operand a bfloat16 call's single product needs).
//   ss8  -- `n64`: a thread transforms one (tile, 8 channels) patch for 8 points (point rows 0-1,
//           patch rows 0-2: 12 pixels, one 16-byte load each) and stores each point's 8 channels to
//           shared memory (16 bytes; split: and the low parts, 8 bytes);
//   rs   -- `rs`: a thread of the warpgroup owning point column j (here j = 1) builds its A
//           fragments for that column's 4 points: 2 tiles x 4 channels (two channel pairs, one
//           32-bit load per pixel) of the 8 pixels the column needs, as 16-bit pairs (split: and
//           the low parts as float8 quadruples), which the MMAs would read from registers.
// Interior tiles (no padding tests); the pixel offsets along a row are immediates (channels a
// template constant), rows a runtime stride. The kernels write their results to global memory only
// so that nothing is dead; `count` subtracts those stores and the launch's fixed instructions.
//
// Build and count (no GPU needed):
//   nvcc -std=c++17 -O3 -arch=sm_90a -cubin -o /tmp/transform_count.cubin benchmarks/micro/transform_count.cu
//   cuobjdump -sass /tmp/transform_count.cubin > /tmp/transform_count.sass
//   python benchmarks/micro/transform_count.py /tmp/transform_count.sass
#include <cstdint>

constexpr int kChannels = 128;  // NHWC row stride of a pixel, in elements
constexpr float kLowScale = 4096.f;  // 2^12, winograd_error.py's V_LO_FIXED_SCALE

__device__ __forceinline__ float lo_half(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_half(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// {a, b} rounded to a bfloat16 pair (a in the high half).
__device__ __forceinline__ uint32_t bf16x2(float a, float b) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(a), "f"(b));
  return d;
}
// {a, b} rounded to a float8 e5m2 pair (a in the high byte), saturating.
__device__ __forceinline__ uint32_t e5m2x2(float a, float b) {
  uint16_t d;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(a), "f"(b));
  return d;
}

// {a, b} rounded to a float16 pair (a in the high half).
__device__ __forceinline__ uint32_t f16x2(float a, float b) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(a), "f"(b));
  return d;
}

// A transformed pair (v0, v1) as the MMAs take it: split, its bfloat16 word and its low parts' e5m2
// pair; single, its float16 word under the tile's scale (lo unused).
template <bool kSplit>
__device__ __forceinline__ void operand_pair(float v0, float v1, float tile_scale, uint32_t& hi, uint32_t& lo) {
  if constexpr (kSplit) {
    hi = bf16x2(v1, v0);  // v0 in the low half: channel order in memory
    lo = e5m2x2((v1 - hi_half(hi)) * kLowScale, (v0 - lo_half(hi)) * kLowScale);
  } else {
    hi = f16x2(v1 * tile_scale, v0 * tile_scale);
    lo = 0;
  }
}

// ss8: x at the tile's patch origin and the thread's 8 channels; out stands in for shared memory.
template <bool kSplit>
__global__ void ss8_transform(const uint4* __restrict__ x, int row_words, float tile_scale, uint4* __restrict__ hi_out,
                              uint2* __restrict__ lo_out) {
  uint4 d[3][4];
#pragma unroll
  for (int r = 0; r < 3; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) d[r][c] = x[r * row_words + c * (kChannels / 8)];
  uint32_t hi[8][4], lo[8][4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {  // channel pairs
    float a[3][4][2];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint32_t word = reinterpret_cast<const uint32_t*>(&d[r][c])[w];
        a[r][c][0] = lo_half(word), a[r][c][1] = hi_half(word);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // B^T's rows 0 and 1 (d0 - d2, d1 + d2), then B along the columns.
      float t[2][4];
#pragma unroll
      for (int c = 0; c < 4; ++c) t[0][c] = a[0][c][h] - a[2][c][h], t[1][c] = a[1][c][h] + a[2][c][h];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        a[i][0][h] = t[i][0] - t[i][2], a[i][1][h] = t[i][1] + t[i][2];  // reuses a for V
        a[i][2][h] = t[i][2] - t[i][1], a[i][3][h] = t[i][1] - t[i][3];
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) operand_pair<kSplit>(a[i][j][0], a[i][j][1], tile_scale, hi[i * 4 + j][w], lo[i * 4 + j][w]);
  }
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    hi_out[p * 256] = make_uint4(hi[p][0], hi[p][1], hi[p][2], hi[p][3]);
    if constexpr (kSplit) lo_out[p * 256] = make_uint2(lo[p][0] | lo[p][1] << 16, lo[p][2] | lo[p][3] << 16);
  }
}

// rs: x at the thread's first tile's patch origin and its first channel pair; the second tile is
// `tile_words` on, the second pair 4 words (8 channels) on. Point column 1: patch columns 1 and 2.
template <bool kSplit>
__global__ void rs_transform(const uint32_t* __restrict__ x, int row_words, int tile_words, float tile_scale,
                             uint32_t* __restrict__ out) {
  uint32_t hi[4][4], lo[4][2];
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // (tile, channel pair): the fragment's 4 registers of a point
    const uint32_t* src = x + (q / 2) * tile_words + (q % 2) * 4;
    float e[4][2];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint32_t w1 = src[r * row_words + 1 * (kChannels / 2)], w2 = src[r * row_words + 2 * (kChannels / 2)];
      e[r][0] = lo_half(w1) + lo_half(w2), e[r][1] = hi_half(w1) + hi_half(w2);  // d B, column 1
    }
    float v[4][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      v[0][h] = e[0][h] - e[2][h], v[1][h] = e[1][h] + e[2][h], v[2][h] = e[2][h] - e[1][h], v[3][h] = e[1][h] - e[3][h];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t l;
      operand_pair<kSplit>(v[i][0], v[i][1], tile_scale, hi[i][q], l);
      // Two pairs' low parts make one 32-bit float8 word of the k32 fragment (the channel order
      // within a k-step is the kernel's to choose, as long as U's float8 copy follows it).
      if (q % 2 == 0) lo[i][q / 2] = l;
      else lo[i][q / 2] |= l << 16;
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int q = 0; q < 4; ++q) out[(i * 4 + q) * 256] = hi[i][q];
    if constexpr (kSplit)
#pragma unroll
      for (int q = 0; q < 2; ++q) out[(16 + i * 2 + q) * 256] = lo[i][q];
  }
}

template __global__ void ss8_transform<true>(const uint4*, int, float, uint4*, uint2*);
template __global__ void ss8_transform<false>(const uint4*, int, float, uint4*, uint2*);
template __global__ void rs_transform<true>(const uint32_t*, int, int, float, uint32_t*);
template __global__ void rs_transform<false>(const uint32_t*, int, int, float, uint32_t*);
