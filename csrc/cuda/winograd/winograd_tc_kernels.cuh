// Winograd F(2x2, 3x3) with its 16 point GEMMs on tensor cores in TF32 (mma.sync m16n8k8, FP32
// accumulators): float32 NCHW convolutions while PyTorch's cuDNN TF32 switch is on.
//
// Fused like the CUDA-core fused kernel (winograd_kernels.cuh): a block computes all 16 points of a
// 32 filters x 32 tiles output block, so that its epilogue can run the output transform. Per chunk of
// 8 channels (one k-step of the MMA):
//   - U (16 points x 8 channels x 32 filters) comes by cp.async from a cache of its own: rounded to
//     TF32 once, and laid out so that a block's chunk is one contiguous 16 KB run;
//   - each thread owns one (channel, tile): it loads the 4x4 input patch into registers one chunk
//     ahead (the loads are in flight during the MMAs; four row pointers and a 16-bit mask of the
//     values inside the image, so that each load costs a bit test), transforms it in FP32 registers,
//     rounds the 16 values to TF32 and stores them as V -- no trip of the raw patch through shared
//     memory;
//   - warp w runs points 2w and 2w + 1: per point 2 x 4 m16n8 MMAs over the block's 32 x 32.
// The output transform, the bias and the stores stay in FP32.
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
  static constexpr int kChunkFloats = kWinogradPoints * kK * kM;      // U of one chunk in the cache
  static constexpr int kStageFloats = 2 * kOperandFloats;
  // Two stages; the epilogue's 16 x kM x kLd FP32 points reuse them.
  static constexpr size_t kSmemBytes = 2 * size_t(kStageFloats) * sizeof(float);
  static_assert(kWinogradPoints * kM * kLd <= 2 * kStageFloats, "the epilogue fits in the stages");
  static_assert(kThreads == 32 * kK && kN == 32, "a thread per (channel, tile) of a chunk; a warp per channel");
  static_assert(kThreads / 32 * 2 == kWinogradPoints, "each warp runs two points");
};

// U for the tensor-core kernel: [group][filter block of 32][chunk of 8 channels][point][channel]
// [filter], rounded to TF32, zero beyond the filters and channels.
__global__ void winograd_filter_transform_tc_kernel(const float* __restrict__ w, float* __restrict__ u,
                                                    const FilterLayout f) {
  using Cfg = WinogradTcTile;
  const int64_t total = int64_t(f.groups) * f.reduction_pad * f.outputs_pad;
  const int k_blocks = f.outputs_pad / Cfg::kM, chunks = f.reduction_pad / Cfg::kK;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int m = int(i % f.outputs_pad), r = int((i / f.outputs_pad) % f.reduction_pad);
    const int g = int(i / (int64_t(f.outputs_pad) * f.reduction_pad));
    float uu[kWinogradPoints];
    if (m < f.outputs && r < f.reduction) {
      const int k = f.rotated ? r : m, c = f.rotated ? m : r;
      const float* src = w + (int64_t(g * f.Kg + k) * f.Cg + c) * 9;
      float taps[9];
#pragma unroll
      for (int t = 0; t < 9; ++t) taps[t] = src[f.rotated ? 8 - t : t];
      WinogradF2x2::filter(taps, uu);
    } else {
#pragma unroll
      for (int e = 0; e < kWinogradPoints; ++e) uu[e] = 0.f;
    }
    float* dst = u + ((int64_t(g) * k_blocks + m / Cfg::kM) * chunks + r / Cfg::kK) * Cfg::kChunkFloats +
                 (r % Cfg::kK) * Cfg::kM + m % Cfg::kM;
#pragma unroll
    for (int e = 0; e < kWinogradPoints; ++e) dst[e * Cfg::kK * Cfg::kM] = round_to_tf32(uu[e]);
  }
}

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
  // Bit 4i + j: patch value (i, j) lies inside the image.
  const unsigned rc = tile_ok ? patch_mask(iy0, ix0, cv) : 0u;
  unsigned inside = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) inside |= ((rc >> i) & (rc >> (4 + j)) & 1u) << (i * 4 + j);
  const float* patch =
      a.x + (int64_t(tc.n) * cv.src_C + int64_t(bc.g) * cv.Cg() + warp) * cv.in_plane + int64_t(iy0) * cv.src_W + ix0;
  const int64_t chunk_step = int64_t(Cfg::kK) * cv.in_plane;

  auto load_patch = [&](int chunk, float (&d)[16]) {
    const unsigned m = chunk * Cfg::kK + warp < cv.Cg() ? inside : 0u;
    const float* row = patch + chunk * chunk_step;
#pragma unroll
    for (int i = 0; i < 4; ++i, row += cv.src_W)
#pragma unroll
      for (int j = 0; j < 4; ++j) d[i * 4 + j] = (m >> (i * 4 + j)) & 1u ? __ldg(row + j) : 0.f;
  };
  auto store_v = [&](const float (&d)[16], float* v_tile) {
    float v[16];
    winograd_input_transform<float>(d, v);
#pragma unroll
    for (int e = 0; e < 16; ++e) v_tile[(e * Cfg::kK + warp) * kLd + lane] = __uint_as_float(tf32_bits_for_mma(v[e]));
  };
  // U: the block's chunk is 16 points x 8 channels x 32 filters, contiguous in the cache (rows
  // (point e, channel r) of 8 16-byte words); 4 words per thread.
  const float* u_block = a.u + (int64_t(bc.g) * a.k_tiles + bc.kt) * (a.reduction_pad / Cfg::kK) * Cfg::kChunkFloats;
  auto fetch_u = [&](int chunk, float* u_tile) {
    const float* src = u_block + int64_t(chunk) * Cfg::kChunkFloats;
#pragma unroll
    for (int q = 0; q < Cfg::kChunkFloats / 4 / Cfg::kThreads; ++q) {
      const int word = threadIdx.x + q * Cfg::kThreads;
      const int row = word / 8;  // e * kK + r
      cp_async_16(u_tile + row * kLd + (word % 8) * 4, src + word * 4);
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
        af[i][0] = __float_as_uint(ua[i * 16]);
        af[i][1] = __float_as_uint(ua[i * 16 + 8]);
        af[i][2] = __float_as_uint(ua[4 * kLd + i * 16]);
        af[i][3] = __float_as_uint(ua[4 * kLd + i * 16 + 8]);
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
