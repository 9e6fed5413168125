// Winograd F(2x2, 3x3) with its 16 point GEMMs on tensor cores in TF32 (mma.sync m16n8k8, FP32
// accumulators): float32 NCHW convolutions while PyTorch's cuDNN TF32 switch is on.
//
// Fused like the CUDA-core fused kernel (winograd_kernels.cuh): a block computes all 16 points of a
// 32 filters x 32 tiles output block, so that its epilogue can run the output transform. Per chunk of
// 8 channels (one k-step of the MMA):
//   - U (16 points x 8 channels x 32 filters, the cached transformed filters) comes by cp.async;
//   - each thread owns one (channel, tile): it loads the 4x4 input patch into registers one chunk
//     ahead (the loads are in flight during the MMAs), transforms it in FP32 registers, rounds the
//     16 values to TF32 and stores them as V -- no trip of the raw patch through shared memory;
//   - warp w runs points 2w and 2w + 1: per point 2 x 4 m16n8 MMAs over the block's 32 x 32.
// U's fragments are rounded to TF32 as they are loaded (the cache holds the float32 U the IEEE
// kernels share). The output transform, the bias and the stores stay in FP32.
//
// Shared memory rows are 40 floats (32 + 8): a fragment load (lanes over 4 channels x 8 filters or
// tiles) then hits 32 distinct banks.
//
// Error: rounding U and V to TF32 keeps F(2x2) within 2x of a direct TF32 convolution's (cuDNN's)
// error on the suite layers (benchmarks/winograd_error.py); F(4x4)'s larger transforms would put it
// several times over, so it has no TF32 kernel.
#pragma once

#include "../common/mma.cuh"
#include "winograd_kernels.cuh"

namespace torchconv {
namespace cuda {

struct WinogradTcTile {
  static constexpr int kM = 32;  // filters per block
  static constexpr int kN = 32;  // tiles per block
  static constexpr int kK = 8;   // channels per chunk: one m16n8k8 step
  static constexpr int kThreads = 256, kMinBlocks = 2;
  static constexpr int kLd = 40;
  static constexpr int kOperandFloats = kWinogradPoints * kK * kLd;  // U or V of one stage
  static constexpr int kStageFloats = 2 * kOperandFloats;
  // Two stages; the epilogue's 16 x kM x kLd FP32 points reuse them.
  static constexpr size_t kSmemBytes = 2 * size_t(kStageFloats) * sizeof(float);
  static_assert(kWinogradPoints * kM * kLd <= 2 * kStageFloats, "the epilogue fits in the stages");
  static_assert(kThreads == 32 * kK && kN == 32, "a thread per (channel, tile) of a chunk; a warp per channel");
  static_assert(kThreads / 32 * 2 == kWinogradPoints, "each warp runs two points");
};

__global__ void __launch_bounds__(WinogradTcTile::kThreads, WinogradTcTile::kMinBlocks)
    winograd_tc_fused_forward_kernel(const ForwardArgs<float> a) {
  using Cfg = WinogradTcTile;
  constexpr int kLd = Cfg::kLd;
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const BlockCoord bc = block_coord(a.k_tiles, a.p_tiles);
  const int64_t p0 = int64_t(bc.pt) * Cfg::kN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto stage_u = [&](int s) { return smem + s * Cfg::kStageFloats; };
  auto stage_v = [&](int s) { return smem + s * Cfg::kStageFloats + Cfg::kOperandFloats; };

  // This thread's tile (p0 + lane) and its channel within a chunk (warp).
  const int64_t p = p0 + lane;
  const bool tile_ok = p < cv.tiles();
  const TileCoord tc = tile_coord(cv, tile_ok ? p : 0);
  const int iy0 = 2 * tc.ty + cv.col_oy, ix0 = 2 * tc.tx + cv.col_ox;
  const unsigned mask = tile_ok ? patch_mask(iy0, ix0, cv) : 0u;
  const int64_t origin =
      (int64_t(tc.n) * cv.src_C + int64_t(bc.g) * cv.Cg() + warp) * cv.in_plane + int64_t(iy0) * cv.src_W + ix0;

  auto load_patch = [&](int chunk, float (&d)[16]) {
    const unsigned m = chunk * Cfg::kK + warp < cv.Cg() ? mask : 0u;
    const float* src = a.x + origin + int64_t(chunk) * Cfg::kK * cv.in_plane;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        d[i * 4 + j] = ((m >> i) & (m >> (4 + j)) & 1u) ? __ldg(src + int64_t(i) * cv.src_W + j) : 0.f;
  };
  auto store_v = [&](const float (&d)[16], float* v_tile) {
    float v[16];
    winograd_input_transform<float>(d, v);
#pragma unroll
    for (int e = 0; e < 16; ++e) v_tile[(e * Cfg::kK + warp) * kLd + lane] = round_to_tf32(v[e]);
  };
  // U rows (channel r, point e) of 32 filters: 8 words each, 128 rows per chunk, 4 words per thread.
  const float* u_base = a.u + int64_t(bc.g) * a.reduction_pad * kWinogradPoints * a.outputs_pad + bc.kt * Cfg::kM;
  auto fetch_u = [&](int chunk, float* u_tile) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int idx = threadIdx.x + q * Cfg::kThreads;
      const int word = idx % 8, row = idx / 8;
      const int r = row / kWinogradPoints, e = row % kWinogradPoints;
      cp_async_16(u_tile + (e * Cfg::kK + r) * kLd + word * 4,
                  u_base + (int64_t(chunk * Cfg::kK + r) * kWinogradPoints + e) * a.outputs_pad + word * 4);
    }
  };

  const int g = lane / 4, t = lane % 4;
  float acc[2][2][4][4];
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[e][i][j][q] = 0.f;

  const int chunks = a.reduction_pad / Cfg::kK;
  float d[16];
  fetch_u(0, stage_u(0));
  cp_async_commit();
  load_patch(0, d);
  store_v(d, stage_v(0));
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int s = chunk & 1;
    cp_async_wait<0>();
    // Stage s is complete (U copied, V stored by every thread), and every warp is done with s ^ 1.
    __syncthreads();
    const bool more = chunk + 1 < chunks;
    if (more) {
      fetch_u(chunk + 1, stage_u(s ^ 1));
      cp_async_commit();
      load_patch(chunk + 1, d);
    }
    const float* u_tile = stage_u(s);
    const float* v_tile = stage_v(s);
#pragma unroll
    for (int pe = 0; pe < 2; ++pe) {
      const int e = warp * 2 + pe;
      const float* ua = u_tile + (e * Cfg::kK + t) * kLd + g;
      const float* vb = v_tile + (e * Cfg::kK + t) * kLd + g;
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        af[i][0] = to_tf32(__float_as_uint(ua[i * 16]));
        af[i][1] = to_tf32(__float_as_uint(ua[i * 16 + 8]));
        af[i][2] = to_tf32(__float_as_uint(ua[4 * kLd + i * 16]));
        af[i][3] = to_tf32(__float_as_uint(ua[4 * kLd + i * 16 + 8]));
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        bf[j][0] = __float_as_uint(vb[j * 8]);
        bf[j][1] = __float_as_uint(vb[4 * kLd + j * 8]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) WarpMma<float>::run(acc[pe][i][j], af[i], bf[j]);
    }
    if (more) store_v(d, stage_v(s ^ 1));
  }

  // Epilogue: the 16 x 32 x 32 points through shared memory ([point][filter][tile], rows of kLd), so
  // that each thread gathers the 16 points of one (filter, tile) for the output transform.
  __syncthreads();
#pragma unroll
  for (int pe = 0; pe < 2; ++pe) {
    float* m_tile = smem + (warp * 2 + pe) * Cfg::kM * kLd;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = i * 16 + g, col = j * 8 + 2 * t;
        *reinterpret_cast<float2*>(m_tile + row * kLd + col) = make_float2(acc[pe][i][j][0], acc[pe][i][j][1]);
        *reinterpret_cast<float2*>(m_tile + (row + 8) * kLd + col) = make_float2(acc[pe][i][j][2], acc[pe][i][j][3]);
      }
  }
  __syncthreads();
  const int Kg = cv.Kg();
  const int64_t tiles = cv.tiles();
  for (int q = threadIdx.x; q < Cfg::kM * Cfg::kN; q += Cfg::kThreads) {
    const int m = q / Cfg::kN, n = q % Cfg::kN;
    const int k = bc.kt * Cfg::kM + m;
    if (k >= Kg || p0 + n >= tiles) continue;
    write_output_tile(smem + m * kLd + n, int64_t(Cfg::kM) * kLd, cv, bc.g * Kg + k, p0 + n, a.bias, a.y);
  }
}

}  // namespace cuda
}  // namespace torchconv
