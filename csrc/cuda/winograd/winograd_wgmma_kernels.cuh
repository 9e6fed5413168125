// Winograd F(2x2, 3x3) with its 16 point GEMMs on Hopper's warpgroup MMA (wgmma m64n32k8, TF32,
// FP32 accumulators): the forward (and grad_input, the same kernel on the rotated filters) of float32
// convolutions while PyTorch's cuDNN TF32 switch is on, on sm_90a devices.
//
// The block is the mma.sync kernel's 64-filter block (winograd_tc_kernels.cuh): 64 filters x 32
// tiles x 16 points, 16 channels per chunk, every thread loading, transforming and storing one
// (channel, tile) patch per chunk, U copied from its cache as one contiguous run. What changes is who
// reads the operands: each of the four warpgroups owns four points, and per point and k-step one
// wgmma reads U (64 filters x 8 channels) and V (32 tiles x 8 channels) from shared memory itself.
// The mma.sync kernel's warps loaded every A and B fragment into registers and waited for their
// MMAs; here a warpgroup issues its chunk's eight MMAs as one asynchronous group and goes on to copy
// the next chunk's U, store its V and load the patches of the chunk after.
//
// Both kernels pass each chunk's U and V through shared memory once per 64 x 32 block, and the
// patch loads run through the same L1: that data path, not the MMAs, is the busiest unit on the
// large layers (docs/winograd.md), which is why the asynchronous MMAs gain most where the reduction
// is long and little elsewhere.
//
// Operands are K-major without swizzle (wgmma_descriptor_interleaved): core matrices of 8 rows (filters
// or tiles) x 4 channels, 128 contiguous bytes each, [channel quad][row octet][row][channel]; the V
// stores of a loader warp fall in distinct banks (WinogradWgmmaTile::kVQuad). U comes in that order
// from its cache (winograd_filter_transform_tc_kernel with u_word).
#pragma once

#include "../common/wgmma.cuh"
#include "winograd_tc_kernels.cuh"

namespace torchconv {
namespace cuda {

// The wgmma block: 64 filters x 32 tiles x 16 points, 16 channels per chunk (two k-steps), four
// warpgroups of four points, one block per SM (two stages of U and V take 192 KiB).
struct WinogradWgmmaTile {
  static constexpr bool kWgmma = true;
  static constexpr int kM = 64, kN = 32, kK = 16, kSteps = kK / 8;
  static constexpr int kThreads = 512, kMinBlocks = 1;
  static constexpr int kWarpgroups = kThreads / 128, kPointsPerGroup = kWinogradPoints / kWarpgroups;
  // V's channel quads (core matrix columns) are kN * 4 + 8 words apart rather than kN * 4: the NHWC
  // loaders' lanes run over 16 channels x 2 tiles, and the 8-word shift puts the four quads' stores
  // in distinct banks (the NCHW loaders' lanes cover one quad, 32 banks, either way).
  static constexpr int kVQuad = kN * 4 + 8, kVPoint = (kK / 4) * kVQuad;
  static constexpr int kUFloats = kWinogradPoints * kK * kM, kVFloats = kWinogradPoints * kVPoint;
  static constexpr int kStage = kUFloats + kVFloats;
  // The epilogue stages all 64 filters in one pass (the stages' space holds them).
  static constexpr int kEpilogueFilters = kM;
  static constexpr int kLdV = kN + 8, kLdMt = kEpilogueFilters + 4;
  static constexpr int kEpilogueFloats = kWinogradPoints * (kM * kLdV > kN * kLdMt ? kM * kLdV : kN * kLdMt);
  static constexpr size_t kForwardSmemBytes = (2 * kStage > kEpilogueFloats ? 2 * kStage : kEpilogueFloats) * sizeof(float);
  static_assert(kThreads == kK * kN && kK == 16 && kN == 32, "a (channel, tile) patch per thread, the loaders' lanes");
  static_assert(kWinogradPoints % kWarpgroups == 0 && kUFloats % (4 * kThreads) == 0, "even splits");

  // The word of (channel kk of a chunk, row m) within a point's K-major operand, in core matrices:
  // the next core matrix along K (channel quad) is `quad` words on, the next 8 rows 32 words on;
  // k-step s starts at word 2 * s * quad.
  static __host__ __device__ constexpr int operand_word(int kk, int m, int quad) {
    return (kk / 4) * quad + (m / 8) * 32 + (m % 8) * 4 + kk % 4;
  }
  static __host__ __device__ constexpr int u_word(int kk, int m) { return operand_word(kk, m, kM * 4); }
  static __host__ __device__ constexpr int v_word(int kk, int n) { return operand_word(kk, n, kVQuad); }
};

// The points of the wgmma kernel's accumulators (acc[pe]: point 4 * warpgroup + pe, rows 16 * (warp
// % 4) on) into the epilogue's M, as stage_pass does for the mma.sync kernels (one pass).
template <typename Cfg, bool kTileMajor>
__device__ __forceinline__ void stage_wgmma_points(const float (&acc)[Cfg::kPointsPerGroup][2 * Cfg::kN / 4],
                                                   float* m, int warp, int lane) {
  constexpr int kLd = kTileMajor ? Cfg::kLdMt : Cfg::kLdV, kPoint = kTileMajor ? Cfg::kN * kLd : Cfg::kM * kLd;
  const int row = 16 * (warp % 4) + lane / 4, t = lane % 4;
#pragma unroll
  for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
    for (int j = 0; j < Cfg::kN / 8; ++j) {
      const float* c = acc[pe] + 4 * j;
      stage_fragment<kTileMajor, kLd>(m + ((warp / 4) * Cfg::kPointsPerGroup + pe) * kPoint, row, j * 8 + 2 * t,
                                      c[0], c[1], c[2], c[3]);
    }
}

// kNhwc: x and y are channels_last (the loaders' addressing and the NHWC epilogue); V's layout is
// the same in both.
template <typename Cfg, bool kNhwc>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_wgmma_fused_forward_kernel(const ForwardArgs<float> a) {
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const BlockCoord bc = block_coord(a.k_tiles, a.p_tiles);
  const int64_t p0 = int64_t(bc.pt) * Cfg::kN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;
  auto stage_u = [&](int s) { return smem + s * Cfg::kStage; };
  auto stage_v = [&](int s) { return smem + s * Cfg::kStage + Cfg::kUFloats; };

  // This thread's (channel, tile) of a chunk. NCHW: lanes over 4 channels x 8 tiles (neighbouring
  // tiles, neighbouring addresses), warps over the chunk's 4 channel quads x 4 tile octets. NHWC:
  // lanes over the chunk's 16 channels x 2 tiles (64 contiguous bytes per tile).
  const int ch = kNhwc ? lane % 16 : (warp % 4) * 4 + lane % 4;
  const int tl = kNhwc ? warp * 2 + lane / 16 : (warp / 4) * 8 + lane / 4;
  const TcPatchLoader<kNhwc, Cfg::kK> patch(a, bc, p0 + tl, p0 + tl < cv.tiles(), ch);
  const int v_word = Cfg::v_word(ch, tl);
  auto store_v = [&](const float (&d)[16], float* v_tile) {
    float v[16];
    winograd_input_transform<float>(d, v);
#pragma unroll
    for (int e = 0; e < 16; ++e) v_tile[e * Cfg::kVPoint + v_word] = __uint_as_float(tf32_bits_for_mma(v[e]));
  };
  const TcUFetcher<Cfg> u_chunks(a, bc);
  auto fetch_u = [&](int chunk, float* u_tile) { u_chunks.fetch(chunk, u_tile); };

  float acc[Cfg::kPointsPerGroup][2 * Cfg::kN / 4];
#pragma unroll
  for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
    for (int q = 0; q < 2 * Cfg::kN / 4; ++q) acc[pe][q] = 0.f;
  // The chunk's MMAs of this warpgroup's points, one asynchronous group.
  auto chunk_mmas = [&](int s) {
    const unsigned u_addr = unsigned(__cvta_generic_to_shared(stage_u(s)));
    const unsigned v_addr = unsigned(__cvta_generic_to_shared(stage_v(s)));
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Cfg::kSteps; ++step)
#pragma unroll
      for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe) {
        const int e = group * Cfg::kPointsPerGroup + pe;
        const uint64_t da = wgmma_descriptor_interleaved(
            u_addr + 4 * (e * Cfg::kK * Cfg::kM + 8 * step * Cfg::kM), 16 * Cfg::kM, 128);
        const uint64_t db = wgmma_descriptor_interleaved(v_addr + 4 * (e * Cfg::kVPoint + 2 * step * Cfg::kVQuad),
                                                         4 * Cfg::kVQuad, 128);
        Wgmma<float, Cfg::kN>::run(acc[pe], da, db, 1);
      }
    wgmma_commit();
  };

  // The patches are loaded two chunks ahead: those of chunk + 2 are issued in iteration `chunk` and
  // stored as V in the next one, so a whole iteration (the MMAs run asynchronously, and issuing them
  // takes no time) covers their latency.
  const int chunks = a.reduction_pad / Cfg::kK;
  float d[16];
  fetch_u(0, stage_u(0));
  cp_async_commit();
  patch.load(0, d);
  store_v(d, stage_v(0));
  if (chunks > 1) patch.load(1, d);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int s = chunk & 1;
    cp_async_wait<0>();
    fence_proxy_async_shared();  // this thread's U copies and V stores, to the MMAs' proxy
    wgmma_wait<0>();             // this warpgroup's MMAs of the previous chunk (stage s ^ 1) are done
    // Stage s is complete, and no warpgroup reads s ^ 1 any more.
    __syncthreads();
    chunk_mmas(s);
    if (chunk + 1 < chunks) {
      fetch_u(chunk + 1, stage_u(s ^ 1));
      cp_async_commit();
      store_v(d, stage_v(s ^ 1));
      if (chunk + 2 < chunks) patch.load(chunk + 2, d);
    }
  }
  wgmma_wait<0>();
  auto stage = [&](int, float* m) { stage_wgmma_points<Cfg, kNhwc>(acc, m, warp, lane); };
  if constexpr (kNhwc)
    tc_epilogue_nhwc<Cfg>(stage, smem, a, bc, p0, warp, lane);
  else
    tc_epilogue_nchw<Cfg>(stage, smem, a, bc, p0, warp, lane);
}

}  // namespace cuda
}  // namespace torchconv
