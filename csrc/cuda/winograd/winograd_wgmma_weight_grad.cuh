// grad_weight of Winograd F(2x2, 3x3) with its 16 point GEMMs on Hopper's warpgroup MMA: dU = dM V^T
// per point, reducing over tiles, for the calls that run the tensor-core tiles (TF32 for float32
// under PyTorch's TF32 switch and for bfloat16, three bfloat16 products of split operands for
// float16: kMmaProducts).
//
// The decomposition is the mma.sync kernel's (winograd_tc_weight_grad_kernel): a block owns 64
// filters x 32 channels x 16 points of one slice of the tiles and writes its dU to that slice, which
// the finishing kernel sums in a fixed order. What changes is the reduction: 16 tiles a chunk, the
// forward's single wgmma block turned around (WgmmaPointMmas: each of the four warpgroups owns a
// column of four points, and per point and k-step one wgmma reads dM (64 filters x 8 tiles) and V
// (32 channels x 8 tiles) from shared memory itself), so that a warpgroup issues its chunk's MMAs as
// one asynchronous group and goes on to store the next chunk's operands. The mma.sync kernel ran one
// 8-tile k-step per block barrier and loaded every fragment into registers.
#pragma once

#include "winograd_wgmma_kernels.cuh"

namespace torchconv {
namespace cuda {

// grad_weight's wgmma block: the forward single block's stages with U's space holding dM (64 filters,
// K-major by tile) and V's holding V (32 channels), kProducts as the call's (WinogradWgmmaStages);
// no epilogue space (dU goes from the accumulators to the slice).
template <int kProducts_>
struct WinogradWgmmaWeightGradConfig : WinogradWgmmaStages<true, kProducts_> {
  using Base = WinogradWgmmaStages<true, kProducts_>;
  static constexpr size_t kWeightGradSmemBytes = size_t(2 * (Base::kUFloats + Base::kVFloats)) * sizeof(float);
  static_assert(Base::v_stage_offset(1) + Base::kVFloats == 2 * (Base::kUFloats + Base::kVFloats), "two stages");
};

// A thread's operands of a chunk: two (filter, tile) grad_output tiles (filters row and row + 32) and
// one (channel, tile) input patch, all of one tile slot of the chunk. Pair index bits 0-2 and 7-9
// up the row (filter or channel), 3-6 the tile: a warp's stores then cover 8 rows x 4 tiles of one
// core matrix, 32 distinct banks, and its loads of channels_last operands read 8 neighbouring rows.
__device__ __forceinline__ int wgmma_weight_grad_row(int t) { return (t & 7) | ((t >> 7) << 3); }
__device__ __forceinline__ int wgmma_weight_grad_slot(int t) { return (t >> 3) & 15; }

// kNhwc: x and grad_output are channels_last. TIo: their type, which sets the products per point
// product (kMmaProducts, Cfg::kProducts).
template <typename Cfg, bool kNhwc, typename TIo>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_wgmma_weight_grad_kernel(const WeightGradArgs<float, TIo> a) {
  static_assert(Cfg::kM == 64 && Cfg::kN == 32 && Cfg::kK == 16 && Cfg::kThreads == 512,
                "two (filter, tile) pairs and a (channel, tile) pair per thread and chunk");
  constexpr int kProducts = Cfg::kProducts;
  static_assert(kProducts == kMmaProducts<TIo>, "the call's products");
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const auto [kt, ct, grp, split, tile_begin, tile_end] = weight_grad_slice(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  using Mmas = WgmmaPointMmas<Cfg>;

  const int row = wgmma_weight_grad_row(threadIdx.x), slot = wgmma_weight_grad_slot(threadIdx.x);
  WeightGradSlotLoader<TIo, kNhwc, Cfg::kK, 2> slot_loader(a, grp, kt * Cfg::kM + row, ct * Cfg::kN + row, true,
                                                          tile_begin + slot, tile_end);
  static_assert(decltype(slot_loader)::kFilterStep == Cfg::kM / 2, "filters row and row + 32");
  TIo dy[8], d[16];  // widened in store (ldg_or_zero)
  auto next_tile = [&] { slot_loader.next_tile(); };
  auto load = [&] { slot_loader.load(dy, d, true); };
  // A (row, slot) operand's 16 points into a stage's dM (quad: Cfg::kM * 4 words, points
  // kUPointFloats apart) or V (Cfg::kVQuad, kVPoint): rounded to TF32, or split into bfloat16 hi
  // and lo in the TF32 words' two k-steps (WinogradWgmmaTile::split_half).
  auto put = [&](float* stage, int r, int quad, int point_floats, const float (&m)[16]) {
    if constexpr (kProducts == 1) {
      float* dst = stage + WinogradWgmmaTile::operand_word(slot, r, quad);
#pragma unroll
      for (int e = 0; e < 16; ++e) dst[e * point_floats] = __uint_as_float(tf32_bits_for_mma(m[e]));
    } else {
      uint16_t* h = reinterpret_cast<uint16_t*>(stage) + WinogradWgmmaTile::split_half(slot, r, quad);
#pragma unroll
      for (int e = 0; e < 16; e += 2) {
        uint32_t hi, lo;
        split_bf16x2(m[e], m[e + 1], hi, lo);
        h[2 * e * point_floats] = uint16_t(hi);
        h[2 * (e + 1) * point_floats] = uint16_t(hi >> 16);
        h[2 * e * point_floats + 4 * quad] = uint16_t(lo);
        h[2 * (e + 1) * point_floats + 4 * quad] = uint16_t(lo >> 16);
      }
    }
  };
  auto store = [&](int s) {
    float m[16], f[16];
#pragma unroll
    for (int fi = 0; fi < 2; ++fi) {
      float g[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) g[q] = to_float(dy[4 * fi + q]);
      winograd_output_transform_adjoint<float>(g, m);
      put(Mmas::stage_u(smem, s), row + 32 * fi, Cfg::kM * 4, Cfg::kUPointFloats, m);
    }
    widen_to_float(d, f);
    winograd_input_transform<float>(f, m);
    put(Mmas::stage_v(smem, s), row, Cfg::kVQuad, Cfg::kVPoint, m);
  };

  typename Mmas::Accumulators acc;
  Mmas::zero(acc);
  const Mmas mmas(smem);
  const int chunks = int((tile_end - tile_begin + Cfg::kK - 1) / Cfg::kK);
  // Chunk i's operands in stage i % 2; each chunk's loads issued an iteration before its stores.
  load();
  store(0);
  if (chunks > 1) {
    next_tile();
    load();
  }
  for (int i = 0; i < chunks; ++i) {
    const int s = i & 1;
    // This thread's stores visible to the MMAs' proxy, this warpgroup's MMAs of chunk i - 1 done, then
    // every thread's: stage s is complete, and no warpgroup reads stage s ^ 1 any more.
    fence_proxy_async_shared();
    wgmma_wait<0>();
    __syncthreads();
    mmas.run(acc, s);
    if (i + 1 < chunks) {
      store(s ^ 1);
      if (i + 2 < chunks) {
        next_tile();
        load();
      }
    }
  }
  wgmma_wait<0>();

  // dU straight from the accumulators into the slice ([16][k_pad][c_pad]; padding rows and columns
  // hold zeros, which the finishing kernel never reads). acc[pe]: point g + 4 pe of warpgroup g, rows
  // (filters) 16 (warp % 4) + lane / 4 (+ 8), columns (channels) 8 j + 2 (lane % 4) (Wgmma).
  const int g = warp / 4, r0 = 16 * (warp % 4) + lane / 4, c0 = 2 * (lane % 4);
  float* out = a.partial + ((int64_t(split) * cv.groups + grp) * kWinogradPoints * a.k_pad + kt * Cfg::kM) * a.c_pad +
               ct * Cfg::kN;
#pragma unroll
  for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
    for (int j = 0; j < Cfg::kN / 8; ++j) {
      const float* r = acc[pe] + 4 * j;
      float* o = out + (int64_t(Cfg::first_point(g) + pe * Cfg::kPointStep) * a.k_pad + r0) * a.c_pad + 8 * j + c0;
      *reinterpret_cast<float2*>(o) = make_float2(r[0], r[1]);
      *reinterpret_cast<float2*>(o + 8 * a.c_pad) = make_float2(r[2], r[3]);
    }
}

}  // namespace cuda
}  // namespace torchconv
