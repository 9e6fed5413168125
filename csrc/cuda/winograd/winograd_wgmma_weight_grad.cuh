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

// An operand's 16 points, at row r and K index kk (a tile of the chunk) of a point's core matrices
// (`quad` words from one K quad to the next, points `point_floats` apart from `base`): rounded to
// TF32, or split into bfloat16 hi and lo in the TF32 words' two k-steps (WinogradWgmmaTile::split_half).
// `base` is a stage in shared memory or a staged operand run in global memory. Points whose bit is set
// in `exact` (one product only) are exact in TF32 already and are stored as they are.
template <int kProducts>
__device__ __forceinline__ void put_point_operands(float* base, int kk, int r, int quad, int point_floats,
                                                   const float (&m)[16], unsigned exact = 0) {
  if constexpr (kProducts == 1) {
    float* dst = base + WinogradWgmmaTile::operand_word(kk, r, quad);
#pragma unroll
    for (int e = 0; e < 16; ++e)
      dst[e * point_floats] = (exact >> e) & 1u ? m[e] : __uint_as_float(tf32_bits_for_mma(m[e]));
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(base) + WinogradWgmmaTile::split_half(kk, r, quad);
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
}

// dU straight from a block's accumulators into slice `split` of the partial sums
// ([split][group][16][k_pad][c_pad]; padding rows and columns hold zeros, which the finishing kernel
// never reads): filter tile kt, channel tile ct of Cfg's kM x kN, the block's points from
// `first_point` on. acc[pe]: point first_point(g) + pe * kPointStep of warpgroup g, rows (filters)
// 16 (warp % 4) + lane / 4 (+ 8), columns (channels) 8 j + 2 (lane % 4) (Wgmma).
template <typename Cfg>
__device__ __forceinline__ void store_weight_grad_points(const typename WgmmaPointMmas<Cfg>::Accumulators& acc,
                                                         float* partial, int64_t split, int groups, int grp, int kt,
                                                         int ct, int k_pad, int c_pad, int first_point) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = warp / 4, r0 = 16 * (warp % 4) + lane / 4, c0 = 2 * (lane % 4);
  float* out = partial + ((split * groups + grp) * kWinogradPoints * k_pad + kt * Cfg::kM) * c_pad + ct * Cfg::kN;
#pragma unroll
  for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
    for (int j = 0; j < Cfg::kN / 8; ++j) {
      const float* r = acc[pe] + 4 * j;
      const int point = first_point + Cfg::first_point(g) + pe * Cfg::kPointStep;
      float* o = out + (int64_t(point) * k_pad + r0) * c_pad + 8 * j + c0;
      *reinterpret_cast<float2*>(o) = make_float2(r[0], r[1]);
      *reinterpret_cast<float2*>(o + 8 * c_pad) = make_float2(r[2], r[3]);
    }
}

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
  using Mmas = WgmmaPointMmas<Cfg>;

  const int row = wgmma_weight_grad_row(threadIdx.x), slot = wgmma_weight_grad_slot(threadIdx.x);
  WeightGradSlotLoader<TIo, kNhwc, Cfg::kK, 2> slot_loader(a, grp, kt * Cfg::kM + row, ct * Cfg::kN + row, true,
                                                          tile_begin + slot, tile_end);
  static_assert(decltype(slot_loader)::kFilterStep == Cfg::kM / 2, "filters row and row + 32");
  TIo dy[8], d[16];  // widened in store (ldg_or_zero)
  auto next_tile = [&] { slot_loader.next_tile(); };
  // Whole-tile loads on channels_last tensors only: measured, they made the NCHW float32 block slower.
  auto load = [&] { slot_loader.template load</*kWholeTiles=*/kNhwc>(dy, d, true); };
  auto put = [&](float* stage, int r, int quad, int point_floats, const float (&m)[16], unsigned exact = 0) {
    put_point_operands<kProducts>(stage, slot, r, quad, point_floats, m, exact);
  };
  // dM's corners are grad_output values (negated or not): a 16-bit one is exact in TF32, so its
  // rounding for the MMA changes nothing the MMA reads.
  const unsigned dm_exact = sizeof(TIo) == 2 && kProducts == 1 ? 0x9009u : 0u;
  auto store = [&](int s) {
    float m[16], f[16];
#pragma unroll
    for (int fi = 0; fi < 2; ++fi) {
      float g[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) g[q] = to_float(dy[4 * fi + q]);
      winograd_output_transform_adjoint<float>(g, m);
      put(Mmas::stage_u(smem, s), row + 32 * fi, Cfg::kM * 4, Cfg::kUPointFloats, m, dm_exact);
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

  store_weight_grad_points<Cfg>(acc, a.partial, split, cv.groups, grp, kt, ct, a.k_pad, a.c_pad, 0);
}

// grad_weight with dM and V staged: both transformed once into a workspace
// (winograd_wgmma_weight_grad_operands_kernel), where the fused block above transforms each (filter,
// tile) dM once per channel block and each (channel, tile) V once per filter block -- 16 times each on
// a layer of 512 channels and 1024 filters. The reduction then streams them by bulk copies: a block
// owns 64 filters x 64 channels x 8 points (one point half: the point rows 2 h and 2 h + 1, as the
// forward's cluster block) of a slice of the tiles, two points per warpgroup, 16-tile chunks through
// kStages stages. Against the fused block's shape (64 x 32 x 16 points, which leaves room for two
// 96 KB stages) it moves two thirds of the bytes per MMA and keeps several chunks' copies in flight
// (docs/winograd.md, "grad_weight with dM and V staged": benchmarks/micro/staged_v_bound.cu's
// gw-64x64x8 rows).
// kOperandBytes: 4, TF32 words (one m64n64k8 product per k-step) or, for float16's three products,
// bfloat16 halves of the split in their space (kProducts 3); 2, the TF32-rounded values as float16
// words under power-of-two scales (F16Carrier: per filter for dM, per channel for V, over all the
// call's tiles), one m64n64k16 step per chunk: half the bytes through memory, L2 and the stages,
// and MMAs at the 16-bit rate, with the TF32 products' values.
template <int kProducts_, int kOperandBytes_ = 4>
struct WinogradWgmmaWeightGradStagedConfig : WinogradWgmmaClusterConfig</*kVStaged=*/true, kOperandBytes_> {
  // V unpadded: no thread stores into the stages.
  using Base = WinogradWgmmaClusterConfig<true, kOperandBytes_>;
  using Base::kStage, Base::kUFloats, Base::kVFloats, Base::kUChunkFloats, Base::kVChunkFloats;
  static constexpr int kProducts = kProducts_;
  static_assert(kProducts == 1 || kOperandBytes_ == 4, "split operands in the TF32 words' space");
  // About 192 KB of stages either way: float16 chunks are half the size, so twice as many in flight.
  static constexpr int kStages = kOperandBytes_ == 2 ? 6 : 3;
  static constexpr int kBarrierOffset = kStages * kStage;  // in floats: kStages mbarriers after the stages
  static constexpr size_t kSmemBytes = size_t(kBarrierOffset) * sizeof(float) + kStages * sizeof(uint64_t);
  static_assert(kUFloats == kVFloats && kUChunkFloats == 2 * kUFloats && kVChunkFloats == 2 * kVFloats,
                "a chunk's run holds both point halves");
  static_assert(kSmemBytes <= 227 * 1024, "within an sm_90 block's shared memory");
};

// The staged grad_weight's configs: float16 words (F16Carrier) for one product, TF32 words for the split.
template <int kProducts>
using WinogradWgmmaWeightGradStagedTile = WinogradWgmmaWeightGradStagedConfig<kProducts, kProducts == 1 ? 2 : 4>;

// The staged operands of one pass over chunks chunk0 .. chunk0 + chunks - 1 of the tiles (16 each):
// dm: [group][filter tile][chunk][16 points][u_word(tile, filter)], v: [group][channel tile][chunk]
// [16 points][v_word(tile, channel)] (Cfg's layouts, or u_half / v_half for float16 words: a chunk's
// run is what the two point halves' stages hold). The pass's slices are splits split0 .. of
// chunks_per_split chunks each. Float16 words: dm_max and v_max hold each filter's largest
// |grad_output| and each channel's largest |input| ([group][k_pad] and [group][c_pad], from
// launch_channel_max before the first pass), whose scales (weight_grad_carrier_exponent) every pass
// takes.
template <typename TIo>
struct StagedWeightGradPass {
  WeightGradArgs<float, TIo> w;  // x, grad_output, the partial sums, k_pad / c_pad, filter and channel tiles
  float* dm;
  float* v;
  float* dm_max;
  float* v_max;
  int64_t chunk0;
  int chunks, chunks_per_split, split0;
};

// The exponent of a staged grad_weight row's float16 scale (F16Carrier) from its channel's largest
// |value| m (launch_channel_max): a dM value (A dY A^T, A's rows at most two entries of +-1) and a V
// value (B^T d B, the same) are signed sums of at most four grad_output or input values, so 4 m
// bounds them, and their TF32 rounding stays within the next power of two, which float16 holds.
__device__ __forceinline__ int weight_grad_carrier_exponent(float channel_max) {
  return F16Carrier::exponent(4.f * channel_max);
}

// Each channel's largest |value| of t into out[(c / per_group) * pad + c % per_group]
// (F16Carrier::gather_max; out zeroed by the caller).
__device__ __forceinline__ void store_channel_max(float* out, int c, int per_group, int pad, float most) {
  if (most != 0.f) F16Carrier::gather_max(out + int64_t(c / per_group) * pad + c % per_group, most);
}

// NCHW ([images][channels][plane]): a warp per run of kChannelMaxRun values of one (image, channel)
// plane, one atomic maximum a run.
constexpr int kChannelMaxRun = 2048;
template <typename TIo>
__global__ void __launch_bounds__(256) channel_max_nchw_kernel(const TIo* __restrict__ t, int64_t images, int channels,
                                                               int64_t plane, int per_group, int pad, float* out) {
  const int64_t runs = (plane + kChannelMaxRun - 1) / kChannelMaxRun;
  const int64_t unit = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // whole warps: blockDim % 32 == 0
  if (unit >= images * channels * runs) return;
  const int64_t plane_index = unit / runs, v0 = (unit % runs) * kChannelMaxRun;
  const int v1 = int(min(int64_t(kChannelMaxRun), plane - v0));
  const TIo* src = t + plane_index * plane + v0;
  float most = 0.f;
#pragma unroll 8
  for (int v = threadIdx.x % 32; v < v1; v += 32) most = fmaxf(most, fabsf(to_float(src[v])));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) most = fmaxf(most, __shfl_xor_sync(0xFFFFFFFFu, most, o));
  if (threadIdx.x % 32 == 0) store_channel_max(out, int(plane_index % channels), per_group, pad, most);
}

// channels_last ([pixels][channels]): a thread owns kVec consecutive channels (one 16-byte load a
// pixel where kVec > 1: the caller checks channels % kVec and the alignment) of every rows-th pixel of
// its block's run; `lanes` threads cover a pixel's channels (or 256 of them: blockIdx.y picks which).
// A few blocks per SM, each reducing its rows in shared memory to one atomic maximum a channel: a
// block per handful of pixels, each with an atomic maximum a channel, queued the atomics of thousands
// of blocks on the same addresses.
constexpr int kChannelMaxThreads = 256;
template <typename TIo, int kVec>
__global__ void __launch_bounds__(kChannelMaxThreads)
    channel_max_nhwc_kernel(const TIo* __restrict__ t, int64_t pixels, int channels, int64_t pixels_per_block,
                            int per_group, int pad, float* out) {
  __shared__ float row_max[kChannelMaxThreads * kVec];
  const int vectors = channels / kVec, c0 = blockIdx.y * kChannelMaxThreads * kVec;
  const int lanes = min(vectors - int(blockIdx.y) * kChannelMaxThreads, kChannelMaxThreads);
  const int rows = kChannelMaxThreads / lanes, lane = threadIdx.x % lanes, row = threadIdx.x / lanes;
  const int64_t p0 = int64_t(blockIdx.x) * pixels_per_block, p1 = min(p0 + pixels_per_block, pixels);
  float most[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) most[e] = 0.f;
  if (row < rows) {
    const TIo* src = t + c0 + lane * kVec;
#pragma unroll 4
    for (int64_t p = p0 + row; p < p1; p += rows) {
      TIo v[kVec];
      if constexpr (kVec > 1)
        *reinterpret_cast<uint4*>(v) = __ldg(reinterpret_cast<const uint4*>(src + p * channels));
      else
        v[0] = src[p * channels];
#pragma unroll
      for (int e = 0; e < kVec; ++e) most[e] = fmaxf(most[e], fabsf(to_float(v[e])));
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) row_max[threadIdx.x * kVec + e] = most[e];
  __syncthreads();
  for (int i = threadIdx.x; i < lanes * kVec; i += kChannelMaxThreads) {
    float m = row_max[i];
    for (int r = 1; r < rows; ++r) m = fmaxf(m, row_max[r * lanes * kVec + i]);
    store_channel_max(out, c0 + i, per_group, pad, m);
  }
}

// An operand's 16 points at row r and K index kk as float16 words under its row's scale (F16Carrier):
// `half_point` halves from one point to the next, Cfg::operand_half's layout with `rows` rows.
__device__ __forceinline__ void put_point_halves(float* base, int kk, int r, int rows, int half_point,
                                                 const F16Carrier::Scale& scale, const float (&m)[16]) {
  uint16_t* h = reinterpret_cast<uint16_t*>(base) + WinogradWgmmaClusterVStagedLayout::operand_half(kk, r, rows);
#pragma unroll
  for (int e = 0; e < 16; ++e) h[e * half_point] = F16Carrier::half_bits(round_to_tf32(m[e]), scale);
}

// A staged grad_weight operand's 16 points: dM from a grad_output tile (A dy A^T's adjoint), or V
// from an input patch (B^T d B), in float32.
template <typename TIo>
__device__ __forceinline__ void staged_operand_transform(bool is_dm, const TIo (&dy)[4], const TIo (&d)[16],
                                                         float (&m)[16]) {
  if (is_dm) {
    float g[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) g[q] = to_float(dy[q]);
    winograd_output_transform_adjoint<float>(g, m);
  } else {
    float f[16];
    widen_to_float(d, f);
    winograd_input_transform<float>(f, m);
  }
}

// A staged grad_weight pass's run (group, row tile of 64 filters or channels, chunk of 16 tiles),
// from its index among the pass's dM runs or V runs, and the float16 words' scale of its row
// (F16Carrier; the row's channel maximum, [group][k_pad] or [group][c_pad]).
struct OperandRun {
  int64_t run;  // among the pass's dM runs or V runs
  int grp, rt, chunk;
};
template <typename TIo>
__device__ __forceinline__ OperandRun operand_run(const StagedWeightGradPass<TIo>& s, bool is_dm, int64_t run) {
  const int tiles_of_rows = is_dm ? s.w.k_tiles : s.w.c_tiles;
  return {run, int((run / s.chunks) / tiles_of_rows), int((run / s.chunks) % tiles_of_rows), int(run % s.chunks)};
}
template <typename Cfg, typename TIo>
__device__ __forceinline__ F16Carrier::Scale operand_row_scale(const StagedWeightGradPass<TIo>& s, bool is_dm,
                                                               const OperandRun& u, int row) {
  const float most = is_dm ? s.dm_max[int64_t(u.grp) * s.w.k_pad + u.rt * Cfg::kM + row]
                           : s.v_max[int64_t(u.grp) * s.w.c_pad + u.rt * Cfg::kN + row];
  return F16Carrier::Scale(weight_grad_carrier_exponent(most));
}
// Writes the pass's dM and V: one (filter, tile) 2x2 grad_output tile or one (channel, tile) input
// patch per thread and item, transformed in FP32 and stored as the MMAs read them
// (put_point_operands, put_point_halves). Within a 1024-item run of a (group, row tile, chunk) a
// warp's 32 lanes write one piece of each point: TF32 words, item bits 0-1 and 5-6 the tile, 2-4 and
// 7-9 the row, one core matrix (8 rows x 4 tiles, 128 contiguous bytes); float16 words, bits 0-2 and
// 8 the tile, 3-7 and 9 the row, half a core matrix (4 rows x 8 tiles, 64 contiguous bytes), and
// so for float16's split, whose hi and lo halves are two-byte stores too. Tiles
// past the image, filters and channels past the group's are zeros (the loader's masks).
template <typename Cfg, bool kNhwc, typename TIo>
__global__ void __launch_bounds__(256) winograd_wgmma_weight_grad_operands_kernel(const StagedWeightGradPass<TIo> s) {
  constexpr int kRun = Cfg::kM * Cfg::kK;
  static_assert(Cfg::kM == 64 && Cfg::kN == 64 && Cfg::kK == 16 && kRun == 1024, "64 rows x 16 tiles a run");
  const WeightGradArgs<float, TIo>& a = s.w;
  const WinogradConv& cv = a.cv;
  const int64_t dm_runs = int64_t(cv.groups) * a.k_tiles * s.chunks;
  const int64_t total = (dm_runs + int64_t(cv.groups) * a.c_tiles * s.chunks) * kRun;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int w = int(i % kRun);
    // Two-byte stores (float16 words, or the split's bfloat16 halves): lanes along 8 tiles of 4 rows.
    constexpr bool kHalves = Cfg::kOperandBytes == 2 || Cfg::kProducts == 3;
    const int kk = kHalves ? (w & 7) | ((w >> 8) & 1) << 3 : (w & 3) | ((w >> 5) & 3) << 2;
    const int row = kHalves ? ((w >> 3) & 31) | ((w >> 9) & 1) << 5 : ((w >> 2) & 7) | ((w >> 7) & 7) << 3;
    const bool is_dm = i / kRun < dm_runs;
    const OperandRun u = operand_run(s, is_dm, is_dm ? i / kRun : i / kRun - dm_runs);
    const int64_t run = u.run;
    const int rt = u.rt, grp = u.grp;
    const int64_t p = (s.chunk0 + u.chunk) * Cfg::kK + kk;
    // A dM item loads its filter's grad_output tile (the channel out of the loader's range); a V item
    // its channel's patch (the filter out of range).
    const int k = is_dm ? rt * Cfg::kM + row : cv.Kg(), c = is_dm ? 0 : rt * Cfg::kN + row;
    const WeightGradSlotLoader<TIo, kNhwc, Cfg::kK, 1> loader(a, grp, k, c, !is_dm, p, cv.tiles());
    TIo dy[4], d[16];
    loader.load(dy, d, !is_dm);
    float m[16];
    staged_operand_transform(is_dm, dy, d, m);
    if constexpr (Cfg::kOperandBytes == 2) {
      const F16Carrier::Scale scale = operand_row_scale<Cfg>(s, is_dm, u, row);
      if (is_dm)
        put_point_halves(s.dm + run * Cfg::kUChunkFloats, kk, row, Cfg::kM, 2 * Cfg::kUPointFloats, scale, m);
      else
        put_point_halves(s.v + run * Cfg::kVChunkFloats, kk, row, Cfg::kN, 2 * Cfg::kVPoint, scale, m);
    } else if (is_dm) {
      put_point_operands<Cfg::kProducts>(s.dm + run * Cfg::kUChunkFloats, kk, row, Cfg::kM * 4, Cfg::kUPointFloats, m);
    } else {
      put_point_operands<Cfg::kProducts>(s.v + run * Cfg::kVChunkFloats, kk, row, Cfg::kVQuad, Cfg::kVPoint, m);
    }
  }
}

constexpr int kOperandRowTiles = 8;  // a thread's tiles of a run: half its 16
// What the operand rows and operand tiles kernels share for a thread's row (filter or channel)
// and 8 tiles of a run: its 8 tiles' values of each point packed two halves a word, and each point's
// 8 halves as one 16-byte store (a core matrix's row).
// Tile t's 16 points (m) under the row's scale into words[point][t / 2], half t % 2.
__device__ __forceinline__ void pack_operand_tile(uint32_t (&words)[kWinogradPoints][kOperandRowTiles / 2], int t,
                                                  const float (&m)[16],
                                                  const F16Carrier::Scale& scale) {
#pragma unroll
  for (int e = 0; e < kWinogradPoints; ++e) {
    const uint32_t h = F16Carrier::half_bits(round_to_tf32(m[e]), scale);
    words[e][t / 2] = t % 2 == 0 ? h : words[e][t / 2] | h << 16;
  }
}
template <typename Cfg, typename TIo>
__device__ __forceinline__ void store_operand_row(const StagedWeightGradPass<TIo>& s, bool is_dm, const OperandRun& u,
                                                  int half, int row,
                                                  const uint32_t (&words)[kWinogradPoints][kOperandRowTiles / 2]) {
  const int rows = is_dm ? Cfg::kM : Cfg::kN;
  const int64_t half_point = is_dm ? 2 * Cfg::kUPointFloats : 2 * Cfg::kVPoint;
  float* run = is_dm ? s.dm + u.run * Cfg::kUChunkFloats : s.v + u.run * Cfg::kVChunkFloats;
  uint16_t* dst = reinterpret_cast<uint16_t*>(run) +
                  WinogradWgmmaClusterVStagedLayout::operand_half(kOperandRowTiles * half, row, rows);
#pragma unroll
  for (int e = 0; e < kWinogradPoints; ++e)
    *reinterpret_cast<uint4*>(dst + e * half_point) = make_uint4(words[e][0], words[e][1], words[e][2], words[e][3]);
}

// channels_last float16 words (Cfg::kOperandBytes == 2): the operands kernel's values with a thread
// per row (filter or channel) and 8 consecutive tiles of a run -- a warp 32 neighbouring rows, so that
// each of its loads is one run of a pixel's channels -- each point's 8 words written as one 16-byte
// store (a core matrix's row, operand_half). With a thread per (row, tile) a warp's load touched 8
// pixels and its stores were two bytes each; per item about 380 instructions, of which the run's
// decode, the tile's coordinates and the row's scale are now once per 8 tiles. The same values
// under the same scales, so the same bits.
template <typename Cfg, typename TIo>
__global__ void __launch_bounds__(256, 2) winograd_wgmma_weight_grad_operand_rows_kernel(const StagedWeightGradPass<TIo> s) {
  static_assert(Cfg::kOperandBytes == 2 && Cfg::kM == 64 && Cfg::kN == 64 && Cfg::kK == 2 * kOperandRowTiles,
                "64 rows x 16 tiles a run in float16 words: two 8-tile halves a row");
  constexpr int kRowItems = 2 * Cfg::kM;  // a run's rows x its two halves
  const WeightGradArgs<float, TIo>& a = s.w;
  const WinogradConv& cv = a.cv;
  const int64_t dm_runs = int64_t(cv.groups) * a.k_tiles * s.chunks;
  const int64_t total = (dm_runs + int64_t(cv.groups) * a.c_tiles * s.chunks) * kRowItems;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int row = int(i % Cfg::kM), half = int(i / Cfg::kM % 2);
    const bool is_dm = i / kRowItems < dm_runs;  // a warp's 32 items are one run's
    const OperandRun u = operand_run(s, is_dm, is_dm ? i / kRowItems : i / kRowItems - dm_runs);
    const int k = is_dm ? u.rt * Cfg::kM + row : cv.Kg(), c = is_dm ? 0 : u.rt * Cfg::kN + row;
    WeightGradSlotLoader<TIo, true, 1, 1> loader(a, u.grp, k, c, !is_dm,
                                                 (s.chunk0 + u.chunk) * Cfg::kK + kOperandRowTiles * half, cv.tiles());
    const F16Carrier::Scale scale = operand_row_scale<Cfg>(s, is_dm, u, row);
    uint32_t words[kWinogradPoints][kOperandRowTiles / 2];
#pragma unroll
    for (int t = 0; t < kOperandRowTiles; ++t) {
      TIo dy[4], d[16];
      loader.load(dy, d, !is_dm);
      float m[16];
      staged_operand_transform(is_dm, dy, d, m);
      pack_operand_tile(words, t, m, scale);
      loader.next_tile();
    }
    store_operand_row<Cfg>(s, is_dm, u, half, row, words);
  }
}

// The operand rows kernel's values where x and grad_output are channels_last 16-bit tensors whose
// rows of a run are whole 16-byte words (the group's channels and filters, and C and K, multiples of
// 8; both tensors 16-byte aligned: weight_grad_operands_read_as_words): a block per run at a time
// first copies the run's pixels -- each of its 16 tiles' 16 patch pixels (V) or 4 grad_output pixels
// (dM), the run's 64 rows of each, 128 bytes -- into shared memory by 16-byte cp.async copies (zeros
// where a pixel lies outside its image, a tile past the pass or a row past the group's), then each
// thread takes a row and 8 tiles as the rows kernel does, reading its values from shared memory. The
// rows kernel's loads are two bytes a lane, each an L2 round trip its thread waits for; here a run's
// loads are all in flight at once, the next run's while this one is transformed (two buffers). The
// same values under the same scales, so the same bits.
constexpr int kOperandTileThreads = 128;                    // a run's 64 rows x two 8-tile halves
constexpr int kOperandTileRunTiles = 2 * kOperandRowTiles;  // a run's tiles (Cfg::kK)
// dM runs (4 grad_output pixels a tile) and V runs (16 patch pixels) in launches of their own: a dM
// run's buffer is a quarter of a V run's, so that an SM holds four of its blocks (the registers'
// limit) where V's buffers allow three.
template <bool kDm>
struct OperandTileRuns {
  static constexpr int kPixels = kDm ? 4 : 16, kSide = kDm ? 2 : 4;  // a tile's pixels, kSide x kSide
  static constexpr int kBufferBytes = kOperandTileRunTiles * kPixels * 128;
  static constexpr int kSmemBytes = 2 * kBufferBytes;
  static constexpr int kBlocksPerSm = kDm ? 4 : 3;
};
template <typename Cfg, typename TIo, bool kDm>
__global__ void __launch_bounds__(kOperandTileThreads, OperandTileRuns<kDm>::kBlocksPerSm)
    winograd_wgmma_weight_grad_operand_tiles_kernel(const StagedWeightGradPass<TIo> s) {
  static_assert(sizeof(TIo) == 2 && Cfg::kOperandBytes == 2 && Cfg::kM == 64 && Cfg::kN == 64 &&
                    Cfg::kK == kOperandTileRunTiles,
                "64 rows of 16-bit values (8 words a pixel) x 16 tiles a run in float16 words");
  using Runs = OperandTileRuns<kDm>;
  constexpr int kWords = 8, kPixels = Runs::kPixels;  // 16-byte words of a pixel's 64 rows
  constexpr int kTileStep = kOperandTileThreads / (kWords * kPixels);  // tiles a pass of the copies
  extern __shared__ __align__(16) float smem[];
  const WeightGradArgs<float, TIo>& a = s.w;
  const WinogradConv& cv = a.cv;
  const int tiles_of_rows = kDm ? a.k_tiles : a.c_tiles;
  const int64_t runs = int64_t(cv.groups) * tiles_of_rows * s.chunks;
  const int t_id = threadIdx.x;
  // Copies run r's pixels into buffer `buf`, [tile][pixel][row]: thread t_id takes word t_id % 8 of
  // pixel (t_id / 8) % kPixels of tiles t_id / (8 kPixels), + kTileStep, ... (a warp's copies are 4
  // whole pixels, 512 contiguous bytes of the buffer).
  auto fetch = [&](int64_t r, int buf) {
    const OperandRun u = operand_run(s, kDm, r);
    const int word = t_id % kWords, pix = (t_id / kWords) % kPixels, i = pix / Runs::kSide, j = pix % Runs::kSide;
    const int rows = kDm ? cv.Kg() : cv.Cg();
    const bool row_ok = u.rt * Cfg::kM + kWords * word < rows;  // whole words: rows % 8 == 0
    const TIo* base = (kDm ? a.gy + int64_t(u.grp) * cv.Kg() : a.x + int64_t(u.grp) * cv.Cg()) + u.rt * Cfg::kM +
                      kWords * word;
    int t = t_id / (kWords * kPixels);
    int64_t p = (s.chunk0 + u.chunk) * Cfg::kK + t;
    TileCoord tc = tile_coord(cv, p < cv.tiles() ? p : 0);
    char* dst = reinterpret_cast<char*>(smem) + buf * Runs::kBufferBytes + (t * kPixels + pix) * 128 + word * 16;
    for (; t < kOperandTileRunTiles; t += kTileStep, p += kTileStep, dst += kTileStep * kPixels * 128) {
      bool ok = row_ok && p < cv.tiles();
      const TIo* src;
      if constexpr (kDm) {
        const int oy = 2 * tc.ty + i, ox = 2 * tc.tx + j;
        ok = ok && oy < cv.out_H && ox < cv.out_W;
        src = base + ((int64_t(tc.n) * cv.out_H + oy) * cv.out_W + ox) * cv.out_C;
      } else {
        const int iy = 2 * tc.ty + cv.col_oy + i, ix = 2 * tc.tx + cv.col_ox + j;
        ok = ok && iy >= 0 && iy < cv.src_H && ix >= 0 && ix < cv.src_W;
        src = base + ((int64_t(tc.n) * cv.src_H + iy) * cv.src_W + ix) * cv.src_C;
      }
      cp_async_16_or_zero(dst, ok ? src : base, ok);
      advance_tile(cv, tc, kTileStep);  // the next tile this thread copies
    }
  };
  const int row = t_id % Cfg::kM, half = t_id / Cfg::kM;
  int buf = 0;
  if (blockIdx.x < runs) fetch(blockIdx.x, 0);
  cp_async_commit();
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x, buf ^= 1) {
    if (r + gridDim.x < runs) fetch(r + gridDim.x, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // run r's copies (this thread's)
    __syncthreads();     // everyone's
    const OperandRun u = operand_run(s, kDm, r);
    const F16Carrier::Scale scale = operand_row_scale<Cfg>(s, kDm, u, row);
    const TIo* values =
        reinterpret_cast<const TIo*>(reinterpret_cast<const char*>(smem) + buf * Runs::kBufferBytes) + row;
    uint32_t words[kWinogradPoints][kOperandRowTiles / 2];
#pragma unroll
    for (int tt = 0; tt < kOperandRowTiles; ++tt) {
      const int t = kOperandRowTiles * half + tt;
      TIo dy[4], d[16];
      float m[16];
      if constexpr (kDm) {
#pragma unroll
        for (int q = 0; q < 4; ++q) dy[q] = values[(t * 4 + q) * Cfg::kM];
      } else {
#pragma unroll
        for (int q = 0; q < 16; ++q) d[q] = values[(t * 16 + q) * Cfg::kM];
      }
      staged_operand_transform(kDm, dy, d, m);
      pack_operand_tile(words, tt, m, scale);
    }
    __syncthreads();  // the buffer is read: the next iteration's copies may refill it
    store_operand_row<Cfg>(s, kDm, u, half, row, words);
  }
  cp_async_wait<0>();
}

// The reduction over the staged operands: a block per (point half, filter tile, channel tile, group,
// slice of the pass), point halves fastest, so that consecutive blocks read the same V runs. Chunk
// i's dM and V runs land in stage i % kStages by two bulk copies counted on its mbarrier, issued
// kStages - 1 chunks ahead by thread 0 once every warpgroup's MMAs of the chunk before have retired
// (the block barrier after wgmma_wait<1>); the first chunk's MMAs overwrite the accumulators.
template <typename Cfg, typename TIo>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    winograd_wgmma_weight_grad_staged_kernel(const StagedWeightGradPass<TIo> s) {
  static_assert(Cfg::kProducts == kMmaProducts<TIo>, "the call's products");
  extern __shared__ __align__(16) float smem[];
  const WeightGradArgs<float, TIo>& a = s.w;
  const int groups = a.cv.groups;
  int b = blockIdx.x;
  const int half = b % 2;
  b /= 2;
  const int kt = b % a.k_tiles;
  b /= a.k_tiles;
  const int ct = b % a.c_tiles;
  b /= a.c_tiles;
  const int grp = b % groups, split = b / groups;
  const int c0 = split * s.chunks_per_split, chunks = min(s.chunks_per_split, s.chunks - c0);
  const float* dm = s.dm + ((int64_t(grp) * a.k_tiles + kt) * s.chunks + c0) * Cfg::kUChunkFloats + half * Cfg::kUFloats;
  const float* v = s.v + ((int64_t(grp) * a.c_tiles + ct) * s.chunks + c0) * Cfg::kVChunkFloats + half * Cfg::kVFloats;
  using Mmas = WgmmaPointMmas<Cfg>;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int st = 0; st < Cfg::kStages; ++st) mbarrier_init(&full[st], 1);
    mbarrier_init_fence_cluster();
  }
  __syncthreads();
  auto fetch = [&](int i) {
    const int st = i % Cfg::kStages;
    mbarrier_arrive_expect_tx(&full[st], (Cfg::kUFloats + Cfg::kVFloats) * unsigned(sizeof(float)));
    bulk_copy_to_shared(Mmas::stage_u(smem, st), dm + int64_t(i) * Cfg::kUChunkFloats, Cfg::kUFloats * sizeof(float),
                        &full[st]);
    bulk_copy_to_shared(Mmas::stage_v(smem, st), v + int64_t(i) * Cfg::kVChunkFloats, Cfg::kVFloats * sizeof(float),
                        &full[st]);
  };
  if (threadIdx.x == 0)
    for (int i = 0; i < Cfg::kStages - 1 && i < chunks; ++i) fetch(i);
  typename Mmas::Accumulators acc;
  const Mmas mmas(smem);
  for (int i = 0; i < chunks; ++i) {
    mbarrier_wait(&full[i % Cfg::kStages], unsigned(i / Cfg::kStages) & 1u);
    mmas.run(acc, i % Cfg::kStages, /*accumulate=*/i > 0);
    wgmma_wait<1>();  // this warpgroup's MMAs of chunk i - 1 are done
    __syncthreads();  // every warpgroup's: the stage of chunk i - 1 is free
    if (threadIdx.x == 0 && i + Cfg::kStages - 1 < chunks) fetch(i + Cfg::kStages - 1);
  }
  wgmma_wait<0>();
  if constexpr (Cfg::kOperandBytes == 2) {
    // dU back from the filter's and the channel's scales (F16Carrier), at the accumulators' rows and
    // columns (store_weight_grad_points).
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = kt * Cfg::kM + 16 * (warp % 4) + lane / 4, c0 = ct * Cfg::kN + 2 * (lane % 4);
    const float* dm_max = s.dm_max + int64_t(grp) * a.k_pad;
    const float* v_max = s.v_max + int64_t(grp) * a.c_pad;
    const F16Carrier::Unscale by_row[2] = {F16Carrier::Unscale(weight_grad_carrier_exponent(dm_max[r0])),
                                           F16Carrier::Unscale(weight_grad_carrier_exponent(dm_max[r0 + 8]))};
#pragma unroll
    for (int j = 0; j < Cfg::kN / 8; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const F16Carrier::Unscale by_col(weight_grad_carrier_exponent(v_max[c0 + 8 * j + q]));
#pragma unroll
        for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
          for (int h = 0; h < 2; ++h) acc[pe][4 * j + 2 * h + q] = by_col(by_row[h](acc[pe][4 * j + 2 * h + q]));
      }
  }
  store_weight_grad_points<Cfg>(acc, a.partial, s.split0 + split, groups, grp, kt, ct, a.k_pad, a.c_pad,
                                half * Cfg::kPoints);
}

}  // namespace cuda
}  // namespace torchconv
