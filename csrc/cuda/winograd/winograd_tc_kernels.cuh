// Winograd F(2x2, 3x3) with its 16 point GEMMs on tensor cores in TF32 (mma.sync m16n8k8, FP32
// accumulators; float16 calls: bfloat16 m16n8k16 / m16n8k8 on split operands, chunk_mmas): float32
// convolutions while PyTorch's cuDNN TF32 switch is on, and bfloat16 and float16 ones -- the
// forward (and grad_input, the same kernel on the rotated filters) and grad_weight (at the end of
// the file). The kernels read and write their tensors' own type (TIo:
// float, bfloat16 or float16, whose values TF32 holds exactly), converting in registers as they load
// and store. float16 calls split each operand into two bfloat16 parts and run three bfloat16
// products per point product (kMmaProducts).
//
// Fused like the CUDA-core fused kernel (winograd_kernels.cuh): a block computes all 16 points of a
// kM filters x 32 tiles output block (kM = 32 or 64, WinogradTcConfig), so that its epilogue can run
// the output transform. Per chunk of kK channels (kK / 8 k-steps of the MMA):
//   - U (16 points x kK channels x kM filters) comes by cp.async from a cache of its own: rounded to
//     TF32 (or split into bfloat16 parts) once and stored in the order the MMAs read it, so a block's
//     chunk is one contiguous run and a thread's A fragment one 16-byte load (split: two);
//   - each thread of the first kK warps owns one (channel, tile): it loads the 4x4 input patch into
//     registers one chunk ahead (the loads are in flight during the MMAs; four row pointers and a
//     16-bit mask of the values inside the image, so that each load costs a bit test), transforms it
//     in FP32 registers, rounds the 16 values to TF32 and stores them as V -- no trip of the raw patch
//     through shared memory;
//   - each warp runs 16 / warps points: per point and k-step kM / 16 x 4 m16n8 MMAs over the block's
//     kM x 32.
// The output transform, the bias and the stores stay in FP32.
//
// V's shared-memory rows are padded by 8 floats (40): a B fragment load (lanes over 4 channels x 8
// tiles) then hits 32 distinct banks; so are grad_weight's dM rows (kM + 8).
//
// Error: rounding U and V to TF32 keeps F(2x2) within 2x of a direct TF32 convolution's (cuDNN's)
// error on the suite layers (benchmarks/winograd_error.py); F(4x4)'s larger transforms put it
// several times over, so its TF32 GEMM (winograd_batched_gemm_mma_kernel, at the end of the file,
// which also serves F(2x2)'s staged variant, beside its grad_weight's) runs only where a call asks
// for the f4x4 variant.
#pragma once

#include <type_traits>

#include "../common/mma.cuh"
#include "winograd_kernels.cuh"

namespace torchconv {
namespace cuda {

// MMA products per point product for tensors of type TIo. One TF32 product for float32 and
// bfloat16: one rounding of U and V to TF32 keeps the error within 2x of a direct convolution's at
// their precision. Three bfloat16 products for float16 (split_bf16x2: U and V as hi + lo, the hi hi,
// hi lo and lo hi products, "3xBF16"): float16 inputs keep TF32's 10 bits already, and V's entries,
// sums of four of them, rounded to 10 bits would put the error at about 2.5x cuDNN's float16 error;
// split, the point products keep 16 bits of each operand, and the error is the output's rounding to
// float16, as cuDNN's is. bfloat16 MMAs run at twice the TF32 rate, so the three cost one and a half
// TF32 products; bfloat16's exponent range is float32's, so no part overflows where float32 would
// not. The forward's U comes split from its cache (u_split_half); the other split operands are
// stored unrounded in shared memory and split in registers as the MMAs read them.
template <typename TIo>
inline constexpr int kMmaProducts = std::is_same_v<TIo, __half> ? 3 : 1;

// An operand value as a kernel running `kProducts` products stores it for its MMAs: rounded for the
// TF32 MMA (one product), or as it is (split at the MMA).
template <int kProducts>
__device__ __forceinline__ float tf32_operand(float v) {
  return kProducts == 1 ? __uint_as_float(tf32_bits_for_mma(v)) : v;
}

// Tile configs: kM filters x 32 tiles (grad_weight: channels) x 16 points per block, kK channels
// (grad_weight: tiles) per chunk, kK / 8 m16n8k8 steps; each warp runs 16 / warps points over all
// kM x 32. Every thread of the forward loads and transforms one (channel, tile) patch per chunk.
//   WinogradTcTile:     32 filters, 8 channels per chunk, 8 warps of two points, 2 blocks per SM;
//   WinogradTcTileTall: 64 filters, 16 channels per chunk, 16 warps of one point, 1 block per SM:
//                       each patch serves twice the filters, so the loads, transforms and roundings
//                       per MMA halve, and the epilogue's per-block costs spread over twice the MMAs;
//                       with 16 channels a chunk has a patch for every thread and two MMA steps per
//                       barrier, and the loads for the next chunk have two steps of MMAs to arrive in.
//   WinogradTcWeightGradTileTall: grad_weight's 64-filter block, 8 tiles per chunk (a grad_output
//                       tile per thread; 16 tiles per chunk, two per thread, measured slower).
template <int kM_, int kK_, int kThreads_, int kMinBlocks_>
struct WinogradTcConfig {
  static constexpr bool kWgmma = false, kVStaged = false;
  static constexpr int kM = kM_;  // filters per block
  static constexpr int kN = 32;   // tiles (grad_weight: channels) per block
  static constexpr int kK = kK_;  // channels (grad_weight: tiles) per chunk
  static constexpr int kSteps = kK / 8;
  // k-steps per bfloat16 MMA of the split products (kMmaProducts == 3): two (m16n8k16), or one
  // (m16n8k8) where a chunk has one.
  static constexpr int kSplitSteps = kSteps >= 2 ? 2 : 1;
  // The split U's lo half of an element, from its hi half (u_split_half).
  static constexpr int kUSplitLoHalves = 4 * kSplitSteps;
  static_assert(kSteps % kSplitSteps == 0, "whole m16n8k16 pairs of steps, or one step");
  static constexpr int kThreads = kThreads_, kMinBlocks = kMinBlocks_;
  static constexpr int kPointsPerWarp = kWinogradPoints * 32 / kThreads;
  static constexpr int kMTiles = kM / 16;
  // Shared-memory rows padded by 8 floats (grad_weight's dM: kM + 8, V: 40): a fragment load (lanes
  // over 4 channels x 8 filters or tiles) then hits 32 distinct banks. The forward's U needs no
  // padding: it is stored in fragment order (winograd_filter_transform_tc_kernel).
  static constexpr int kLdA = kM + 8, kLdV = kN + 8;
  // The forward's V of NHWC calls, tile-major ([point][tile][kLdVt]): kK + 4 words per row keep both
  // the loaders' stores (lanes along channels) and the B fragment loads (lanes over 8 tiles x 4
  // channels) within two ways of the banks.
  static constexpr int kLdVt = kK + 4;
  static constexpr int kUFloats = kWinogradPoints * kK * kM;  // the forward's U of a chunk (one run of the cache)
  static constexpr int kUChunkFloats = kUFloats;               // the cache's chunk: the block's U
  static constexpr int kDmFloats = kWinogradPoints * kK * kLdA, kVFloats = kWinogradPoints * kK * kLdV;
  static constexpr int kVtFloats = kWinogradPoints * kN * kLdVt;
  static constexpr int kForwardVFloats = kVFloats > kVtFloats ? kVFloats : kVtFloats;
  static constexpr int kForwardStage = kUFloats + kForwardVFloats, kWeightGradStage = kDmFloats + kVFloats;
  static constexpr int kEpilogueFilters = 32;  // per pass through shared memory (the forward's M)
  static constexpr int kLdMt = kEpilogueFilters + 4;  // NHWC epilogue: M as [point][tile][filter]
  static constexpr int kEpilogueFloats = kWinogradPoints * kEpilogueFilters * kLdV;
  static_assert(kWinogradPoints * kN * kLdMt <= kEpilogueFloats, "the NHWC epilogue fits the NCHW one's space");
  static constexpr size_t kForwardSmemBytes =
      (2 * kForwardStage > kEpilogueFloats ? 2 * kForwardStage : kEpilogueFloats) * sizeof(float);
  static constexpr size_t kWeightGradSmemBytes = 2 * size_t(kWeightGradStage) * sizeof(float);
  static_assert(kK % 8 == 0 && kThreads >= 32 * kK && kN == 32, "a thread per (channel, tile) of a chunk");
  static_assert(kPointsPerWarp >= 1 && kM % kEpilogueFilters == 0, "whole points per warp, whole passes");
  static_assert(kUFloats % (4 * kThreads) == 0, "U's 16-byte words split evenly");
  // The word of (channel kk of a chunk, filter m of the block) within a point's U: fragment order,
  // [step][16-filter tile][lane][4], lane l's four words its A fragment (filters l / 4 and l / 4 + 8,
  // channels l % 4 and l % 4 + 4 of the step).
  static __host__ __device__ constexpr int u_word(int kk, int m) {
    return (((kk / 8) * kMTiles + m / 16) * 32 + (m % 8) * 4 + kk % 4) * 4 + (m % 16) / 8 + 2 * ((kk % 8) / 4);
  }
  // The forward's split U (kMmaProducts == 3), in bfloat16 halves: the bfloat16 A fragments, hi then
  // lo, [kSplitSteps steps][16-filter tile][lane][hi: 2 kSplitSteps words, lo: as many]. The half of
  // the hi part of (channel kk, filter m); lo's is 4 kSplitSteps halves on. Word 2s + (m % 16) / 8 of
  // a part is step s's row g or g + 8 (m16n8k16's order), its low half channel kk % 4 of the step,
  // its high half kk % 4 + 4: chunk_mmas's permutation of k, so that a lane's fragments of a step
  // pair are two 16-byte loads, split once when the cache is filled.
  static __host__ __device__ constexpr int u_split_half(int kk, int m) {
    const int word = 2 * ((kk / 8) % kSplitSteps) + (m % 16) / 8, lane = (m % 8) * 4 + kk % 4;
    return (((kk / (8 * kSplitSteps)) * kMTiles + m / 16) * 32 + lane) * 8 * kSplitSteps + 2 * word + (kk % 8) / 4;
  }
};
using WinogradTcTile = WinogradTcConfig<32, 8, 256, 2>;
using WinogradTcTileTall = WinogradTcConfig<64, 16, 512, 1>;
using WinogradTcWeightGradTileTall = WinogradTcConfig<64, 8, 512, 1>;

// The shared memory of a block of the filter transforms by runs: one run (a chunk's 16 points).
template <typename Cfg>
constexpr size_t filter_run_smem_bytes() {
  return size_t(Cfg::kUChunkFloats) * sizeof(float);
}

// U for the forward kernels: [group][filter block of Cfg::kM][chunk of kK channels][point] and within
// a point in the order the MMAs read it (Cfg::u_word: mma.sync fragments, or wgmma's core matrices),
// so that a block's chunk is one contiguous run. Rounded to TF32 (kProducts == 1), or split into
// bfloat16 hi and lo parts (kProducts == 3, Cfg::u_split_half); zero beyond the filters and channels.
// TW: the weight's type (float, bfloat16 or float16). A block per run (grid-stride): its threads
// transform the run's kM x kK filter pairs into shared memory in that order -- channels fastest, or
// filters where rotated, so that a warp's tap loads are contiguous -- and the block then copies the
// run out in 16-byte words. Stored from each thread straight to global memory, the two- and four-byte
// words of one point fell a sector apart, a sector written per word.
template <typename Cfg, int kProducts, typename TW>
__global__ void __launch_bounds__(256) winograd_filter_transform_tc_kernel(const TW* __restrict__ w,
                                                                           float* __restrict__ u, const FilterLayout f) {
  static_assert(Cfg::kUChunkFloats == kWinogradPoints * Cfg::kK * Cfg::kM && Cfg::kUChunkFloats % 4 == 0,
                "a run holds the chunk's 16 points, in 16-byte words");
  extern __shared__ __align__(16) float run[];
  const int k_blocks = f.outputs_pad / Cfg::kM, chunks = f.reduction_pad / Cfg::kK;
  const int64_t runs = int64_t(f.groups) * k_blocks * chunks;
  for (int64_t b = blockIdx.x; b < runs; b += gridDim.x) {
    const int chunk = int(b % chunks), kb = int((b / chunks) % k_blocks), g = int(b / chunks / k_blocks);
    for (int i = threadIdx.x; i < Cfg::kM * Cfg::kK; i += blockDim.x) {
      const int kk = f.rotated ? i / Cfg::kM : i % Cfg::kK, m = f.rotated ? i % Cfg::kM : i / Cfg::kK;
      float uu[kWinogradPoints];
      filter_points<WinogradF2x2>(w, f, g, chunk * Cfg::kK + kk, kb * Cfg::kM + m, uu);
      if constexpr (kProducts == 1) {
        float* dst = run + Cfg::u_word(kk, m);
#pragma unroll
        for (int e = 0; e < kWinogradPoints; ++e) dst[e * Cfg::kK * Cfg::kM] = round_to_tf32(uu[e]);
      } else {
        uint16_t* dst = reinterpret_cast<uint16_t*>(run) + Cfg::u_split_half(kk, m);
#pragma unroll
        for (int e = 0; e < kWinogradPoints; ++e) {
          uint32_t hi, lo;  // low halves: uu[e]'s parts
          split_bf16x2(uu[e], 0.f, hi, lo);
          dst[2 * e * Cfg::kK * Cfg::kM] = uint16_t(hi);
          dst[2 * e * Cfg::kK * Cfg::kM + Cfg::kUSplitLoHalves] = uint16_t(lo);
        }
      }
    }
    __syncthreads();
    float4* out = reinterpret_cast<float4*>(u + b * Cfg::kUChunkFloats);
    const float4* in = reinterpret_cast<const float4*>(run);
    for (int i = threadIdx.x; i < Cfg::kUChunkFloats / 4; i += blockDim.x) out[i] = in[i];
    __syncthreads();  // the run's shared memory free for the next
  }
}

template <typename Cfg>
using TcAccumulators = float[Cfg::kPointsPerWarp][Cfg::kMTiles][4][4];

template <typename Cfg>
__device__ __forceinline__ void zero_accumulators(TcAccumulators<Cfg>& acc) {
#pragma unroll
  for (int e = 0; e < Cfg::kPointsPerWarp; ++e)
#pragma unroll
    for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[e][i][j][q] = 0.f;
}

// The A and B fragments of one k-step of point e for chunk_mmas: A's four words per 16-filter row i
// (rows g and g + 8 at k t and t + 4, g = lane / 4, t = lane % 4; where kLoadA), B's two per
// 8-column piece j (k t and t + 4 of column g), as the m16n8k8 TF32 MMA reads them.
template <typename Cfg, bool kFragmentOrderA, bool kTileMajorB, bool kLoadA = true>
__device__ __forceinline__ void load_step_fragments(uint32_t (&af)[Cfg::kMTiles][4], uint32_t (&bf)[4][2],
                                                    const float* a_tile, const float* b_tile, int e, int step,
                                                    int lane) {
  constexpr int kLdA = Cfg::kLdA, kLdV = Cfg::kLdV, kI = Cfg::kMTiles;
  const int g = lane / 4, t = lane % 4;
  const float* vb = kTileMajorB ? b_tile + (e * Cfg::kN + g) * Cfg::kLdVt + step * 8 + t
                                : b_tile + (e * Cfg::kK + step * 8 + t) * kLdV + g;
#pragma unroll
  for (int i = 0; i < (kLoadA ? kI : 0); ++i) {
    if constexpr (kFragmentOrderA) {
      const float* words = a_tile + (((e * Cfg::kSteps + step) * kI + i) * 32 + lane) * 4;
      const uint4 w = *reinterpret_cast<const uint4*>(words);
      af[i][0] = w.x, af[i][1] = w.y, af[i][2] = w.z, af[i][3] = w.w;
    } else {
      const float* ua = a_tile + (e * Cfg::kK + step * 8 + t) * kLdA + g;
      af[i][0] = __float_as_uint(ua[i * 16]);
      af[i][1] = __float_as_uint(ua[i * 16 + 8]);
      af[i][2] = __float_as_uint(ua[4 * kLdA + i * 16]);
      af[i][3] = __float_as_uint(ua[4 * kLdA + i * 16 + 8]);
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (kTileMajorB) {
      bf[j][0] = __float_as_uint(vb[j * 8 * Cfg::kLdVt]);
      bf[j][1] = __float_as_uint(vb[j * 8 * Cfg::kLdVt + 4]);
    } else {
      bf[j][0] = __float_as_uint(vb[j * 8]);
      bf[j][1] = __float_as_uint(vb[4 * kLdV + j * 8]);
    }
  }
}

// The MMAs of one chunk (kK / 8 k-steps): each warp runs its points over the block's kM x 32. B is
// [point][k][kLdV] with n along the rows, or tile-major [point][n][kLdVt] (kTileMajorB, the NHWC
// forward); A is the forward's U in fragment order (kFragmentOrderA) or grad_weight's dM as
// [point][k][kLdA] with m along the rows. Both hold TF32 bit patterns (kProducts == 1: one m16n8k8
// TF32 MMA per step), or, for three bfloat16 products (kProducts == 3), float32 values that the
// fragments split into bfloat16 hi and lo (split_bf16x2) -- but for the forward's U, which its cache
// holds split (Cfg::u_split_half).
//
// The split path feeds the TF32 fragments' words to the bfloat16 MMAs as they are: a thread's words
// at k t and t + 4 become its pair at bfloat16 k 2t and 2t + 1 (two steps' words fill m16n8k16's
// k 0-15: the second step's at 2t + 8 and 2t + 9). A and B take the same permutation of k, so the
// products' sum is the same; the shared-memory layouts and loads stay the TF32 kernels'. Two steps
// run as m16n8k16, an odd last step as m16n8k8.
template <typename Cfg, bool kFragmentOrderA, bool kTileMajorB = false, int kProducts = 1>
__device__ __forceinline__ void chunk_mmas(TcAccumulators<Cfg>& acc, const float* a_tile, const float* b_tile,
                                           int warp, int lane) {
  constexpr int kI = Cfg::kMTiles;
  static_assert(kProducts == 1 || kProducts == 3, "one TF32 product, or 3xBF16");
  if constexpr (kProducts == 1) {
#pragma unroll
    for (int step = 0; step < Cfg::kSteps; ++step)
#pragma unroll
      for (int pe = 0; pe < Cfg::kPointsPerWarp; ++pe) {
        uint32_t af[kI][4], bf[4][2];
        load_step_fragments<Cfg, kFragmentOrderA, kTileMajorB>(af, bf, a_tile, b_tile,
                                                               warp * Cfg::kPointsPerWarp + pe, step, lane);
#pragma unroll
        for (int i = 0; i < kI; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) WarpMma<float>::run(acc[pe][i][j], af[i], bf[j]);
      }
  } else {
    constexpr int kStepsPerMma = Cfg::kSplitSteps;
#pragma unroll
    for (int step = 0; step < Cfg::kSteps; step += kStepsPerMma)
#pragma unroll
      for (int pe = 0; pe < Cfg::kPointsPerWarp; ++pe) {
        const int e = warp * Cfg::kPointsPerWarp + pe;
        // bh / bl[j][s]: B's hi and lo words of step `step + s`; A's split one 16-filter row at a time
        // (fewer live registers), or read split (the forward's U, Cfg::u_split_half). The small
        // products join each accumulator before the large one.
        uint32_t bh[4][kStepsPerMma], bl[4][kStepsPerMma];
        uint32_t af[kStepsPerMma][kI][4];
#pragma unroll
        for (int s = 0; s < kStepsPerMma; ++s) {
          uint32_t bf[4][2];
          // The forward's U comes split (below): its TF32-order words are not loaded.
          load_step_fragments<Cfg, kFragmentOrderA, kTileMajorB, !kFragmentOrderA>(af[s], bf, a_tile, b_tile, e,
                                                                                   step + s, lane);
#pragma unroll
          for (int j = 0; j < 4; ++j)
            split_bf16x2(__uint_as_float(bf[j][0]), __uint_as_float(bf[j][1]), bh[j][s], bl[j][s]);
        }
#pragma unroll
        for (int i = 0; i < kI; ++i) {
          // Word 2s: row g, word 2s + 1: row g + 8 (m16n8k16's order; m16n8k8 takes words 0 and 1).
          uint32_t ah[2 * kStepsPerMma], al[2 * kStepsPerMma];
          if constexpr (kFragmentOrderA) {
            const uint32_t* words = reinterpret_cast<const uint32_t*>(a_tile) +
                                    (((e * (Cfg::kSteps / kStepsPerMma) + step / kStepsPerMma) * kI + i) * 32 + lane) *
                                        4 * kStepsPerMma;
            if constexpr (kStepsPerMma == 2) {
              const uint4 h = reinterpret_cast<const uint4*>(words)[0], l = reinterpret_cast<const uint4*>(words)[1];
              ah[0] = h.x, ah[1] = h.y, ah[2] = h.z, ah[3] = h.w;
              al[0] = l.x, al[1] = l.y, al[2] = l.z, al[3] = l.w;
            } else {
              const uint4 w = *reinterpret_cast<const uint4*>(words);
              ah[0] = w.x, ah[1] = w.y, al[0] = w.z, al[1] = w.w;
            }
          } else {
#pragma unroll
            for (int s = 0; s < kStepsPerMma; ++s)
#pragma unroll
              for (int r = 0; r < 2; ++r)
                split_bf16x2(__uint_as_float(af[s][i][r]), __uint_as_float(af[s][i][r + 2]), ah[2 * s + r],
                             al[2 * s + r]);
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if constexpr (kStepsPerMma == 2) {
              WarpMma<__nv_bfloat16>::run(acc[pe][i][j], al, bh[j]);
              WarpMma<__nv_bfloat16>::run(acc[pe][i][j], ah, bl[j]);
              WarpMma<__nv_bfloat16>::run(acc[pe][i][j], ah, bh[j]);
            } else {
              mma_bf16_m16n8k8(acc[pe][i][j], al, bh[j][0]);
              mma_bf16_m16n8k8(acc[pe][i][j], ah, bl[j][0]);
              mma_bf16_m16n8k8(acc[pe][i][j], ah, bh[j][0]);
            }
          }
        }
      }
  }
}

// The output transform from what an epilogue staged per (filter, tile): the 16 points of M, or
// (kStaged = 8) A^T M, whose first step the kernel applied before staging.
template <int kStaged>
__device__ __forceinline__ void finish_output_transform(const float (&mm)[kStaged], float (&out)[4]) {
  static_assert(kStaged == kWinogradPoints || kStaged == 8, "M or A^T M");
  if constexpr (kStaged == kWinogradPoints)
    winograd_output_transform<float>(mm, out);
  else
    winograd_output_rows<float>(mm, out);
}

// Stores one 16 x 8 accumulator fragment (rows row and row + 8, columns col and col + 1, in the
// mma.sync C layout that wgmma repeats) into an epilogue's M: [filter][tile] rows of kLd words, or
// tile-major [tile][filter] (kTileMajor, the NHWC epilogue).
template <bool kTileMajor, int kLd>
__device__ __forceinline__ void stage_fragment(float* m_tile, int row, int col, float c0, float c1, float c2,
                                               float c3) {
  if constexpr (kTileMajor) {
    m_tile[col * kLd + row] = c0;
    m_tile[(col + 1) * kLd + row] = c1;
    m_tile[col * kLd + row + 8] = c2;
    m_tile[(col + 1) * kLd + row + 8] = c3;
  } else {
    *reinterpret_cast<float2*>(m_tile + row * kLd + col) = make_float2(c0, c1);
    *reinterpret_cast<float2*>(m_tile + (row + 8) * kLd + col) = make_float2(c2, c3);
  }
}

// The points of one epilogue pass (filters pass * kEpilogueFilters on) from the mma.sync kernels'
// accumulators into M: [point][filter][tile] (rows of kLdV), or [point][tile][filter] (rows of kLdMt)
// where kTileMajor.
template <typename Cfg, bool kTileMajor>
__device__ __forceinline__ void stage_pass(const TcAccumulators<Cfg>& acc, int pass, float* m, int warp, int lane) {
  constexpr int kF = Cfg::kEpilogueFilters, kP = Cfg::kPointsPerWarp;
  constexpr int kLd = kTileMajor ? Cfg::kLdMt : Cfg::kLdV, kPoint = kTileMajor ? Cfg::kN * kLd : kF * kLd;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int pe = 0; pe < kP; ++pe)
#pragma unroll
    for (int i = 0; i < kF / 16; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float(&c)[4] = acc[pe][pass * (kF / 16) + i][j];
        stage_fragment<kTileMajor, kLd>(m + (warp * kP + pe) * kPoint, i * 16 + g, j * 8 + 2 * t, c[0], c[1], c[2],
                                        c[3]);
      }
}

// The forward's epilogue, in passes of Cfg::kEpilogueFilters filters: `stage(pass, smem)` puts their
// 16 points x kEpilogueFilters x 32 tiles into shared memory ([point][filter][tile], rows of kLdV),
// so that each thread gathers the 16 points of one (filter, tile) for the output transform. A
// thread's tile is the same in every pass (tile p0 + lane; filters warp, warp + kThreads / 32, ...),
// so its output address and edges are decoded once. kStaged = 8: `stage` puts A^T m instead (row h
// of it, column j at slice 4 h + j; winograd_output_column), which leaves its second step.
// kStagesFree: the caller's barrier has already ended every read of the stages (the persistent
// wgmma block's, before it starts the next block's copies), so the first pass needs none of its own.
template <typename Cfg, int kStaged = kWinogradPoints, bool kStagesFree = false, typename Stage, typename TIo>
__device__ __forceinline__ void tc_epilogue_nchw(Stage&& stage, float* smem, const ForwardArgs<float, TIo>& a,
                                                 const BlockCoord& bc, int64_t p0, int warp, int lane) {
  constexpr int kLdV = Cfg::kLdV, kF = Cfg::kEpilogueFilters;
  const WinogradConv& cv = a.cv;
  const int Kg = cv.Kg();
  const bool out_live = p0 + lane < cv.tiles();
  const TileCoord ot = tile_coord(cv, out_live ? p0 + lane : 0);
  const int oy = 2 * ot.ty, ox = 2 * ot.tx;
  const bool right = ox + 1 < cv.out_W, below = oy + 1 < cv.out_H;
  const bool pairs = right && cv.out_W % 2 == 0;  // (oy, ox) and its right neighbour: one store
  const int64_t out_plane = int64_t(cv.out_H) * cv.out_W;
  TIo* y_tile = a.y + (int64_t(ot.n) * cv.out_C + int64_t(bc.g) * Kg) * out_plane + int64_t(oy) * cv.out_W + ox;
#pragma unroll
  for (int pass = 0; pass < Cfg::kM / kF; ++pass) {
    if (pass > 0 || !kStagesFree) __syncthreads();  // the stages (or the previous pass) are no longer read
    stage(pass, smem);
    __syncthreads();
#pragma unroll
    for (int m = warp; m < kF; m += Cfg::kThreads / 32) {
      const int k = bc.kt * Cfg::kM + pass * kF + m;
      if (!out_live || k >= Kg) continue;
      float mm[kStaged], out[4];
#pragma unroll
      for (int e = 0; e < kStaged; ++e) mm[e] = smem[(e * kF + m) * kLdV + lane];
      finish_output_transform<kStaged>(mm, out);
      const float b = a.bias ? to_float(a.bias[bc.g * Kg + k]) : 0.f;
      TIo* dst = y_tile + k * out_plane;
#pragma unroll
      for (int r = 0; r < 2; ++r, dst += cv.out_W) {
        if (r == 1 && !below) break;
        if (pairs) {
          store_pair(dst, out[2 * r] + b, out[2 * r + 1] + b);
        } else {
          dst[0] = from_float<TIo>(out[2 * r] + b);
          if (right) dst[1] = from_float<TIo>(out[2 * r + 1] + b);
        }
      }
    }
  }
}

// The NHWC forward's epilogue: `stage(pass, smem)` puts M into shared memory as [point][tile][filter]
// (rows of kLdMt), lanes then run along the pass's filters, so a tile's four outputs are coalesced
// stores; each thread's tiles (warp, warp + kThreads / 32, ...) are decoded once. kStagesFree as in
// tc_epilogue_nchw.
template <typename Cfg, int kStaged = kWinogradPoints, bool kStagesFree = false, typename Stage, typename TIo>
__device__ __forceinline__ void tc_epilogue_nhwc(Stage&& stage, float* smem, const ForwardArgs<float, TIo>& a,
                                                 const BlockCoord& bc, int64_t p0, int warp, int lane) {
  constexpr int kLdMt = Cfg::kLdMt, kF = Cfg::kEpilogueFilters;
  constexpr int kWarps = Cfg::kThreads / 32, kTilesPerThread = Cfg::kN / kWarps;
  static_assert(Cfg::kN % kWarps == 0 && kF % 32 == 0, "whole tiles per warp, whole filters per lane");
  const WinogradConv& cv = a.cv;
  const int Kg = cv.Kg();
  const int64_t row_stride = int64_t(cv.out_W) * cv.out_C;
  // Neighbouring filters' outputs as one store where every pair starts aligned: an even filter count
  // per group and per pixel, y aligned to a pair. kF a multiple of 64: whole pairs per lane.
  constexpr bool kFilterPairs = kF % 64 == 0 && kLdMt % 2 == 0;
  const bool pairs = Kg % 2 == 0 && cv.out_C % 2 == 0 &&
                     aligned_to(a.y, 2 * sizeof(TIo));
  int64_t y_off[kTilesPerThread];
  unsigned edges[kTilesPerThread];  // bit 0: the tile exists; 1: its right column; 2: its lower row
#pragma unroll
  for (int r = 0; r < kTilesPerThread; ++r) {
    const int64_t p = p0 + warp + r * kWarps;
    const bool live = p < cv.tiles();
    const TileCoord ot = tile_coord(cv, live ? p : 0);
    const int oy = 2 * ot.ty, ox = 2 * ot.tx;
    y_off[r] = ((int64_t(ot.n) * cv.out_H + oy) * cv.out_W + ox) * cv.out_C + int64_t(bc.g) * Kg;
    edges[r] = unsigned(live) | unsigned(ox + 1 < cv.out_W) << 1 | unsigned(oy + 1 < cv.out_H) << 2;
  }
#pragma unroll
  for (int pass = 0; pass < Cfg::kM / kF; ++pass) {
    if (pass > 0 || !kStagesFree) __syncthreads();  // the stages (or the previous pass) are no longer read
    stage(pass, smem);
    __syncthreads();
    if (kFilterPairs && pairs) {
      // Filters 2 lane, 2 lane + 1: one 8-byte shared load a staged value and one store a pair.
#pragma unroll
      for (int f = 2 * lane; f < kF; f += 64) {
        const int k = bc.kt * Cfg::kM + pass * kF + f;
        if (k >= Kg) continue;  // Kg even: k + 1 < Kg with k
        const float b0 = a.bias ? to_float(a.bias[bc.g * Kg + k]) : 0.f;
        const float b1 = a.bias ? to_float(a.bias[bc.g * Kg + k + 1]) : 0.f;
#pragma unroll
        for (int r = 0; r < kTilesPerThread; ++r) {
          if (!(edges[r] & 1u)) continue;
          const int n = warp + r * kWarps;
          float m0[kStaged], m1[kStaged], o0[4], o1[4];
#pragma unroll
          for (int e = 0; e < kStaged; ++e) {
            const float2 v = *reinterpret_cast<const float2*>(smem + (e * Cfg::kN + n) * kLdMt + f);
            m0[e] = v.x, m1[e] = v.y;
          }
          finish_output_transform<kStaged>(m0, o0);
          finish_output_transform<kStaged>(m1, o1);
          TIo* dst = a.y + y_off[r] + k;
          store_pair(dst, o0[0] + b0, o1[0] + b1);
          if (edges[r] & 2u) store_pair(dst + cv.out_C, o0[1] + b0, o1[1] + b1);
          if (edges[r] & 4u) {
            store_pair(dst + row_stride, o0[2] + b0, o1[2] + b1);
            if (edges[r] & 2u) store_pair(dst + row_stride + cv.out_C, o0[3] + b0, o1[3] + b1);
          }
        }
      }
      continue;
    }
#pragma unroll
    for (int f = lane; f < kF; f += 32) {
      const int k = bc.kt * Cfg::kM + pass * kF + f;
      if (k >= Kg) continue;
      const float b = a.bias ? to_float(a.bias[bc.g * Kg + k]) : 0.f;
#pragma unroll
      for (int r = 0; r < kTilesPerThread; ++r) {
        if (!(edges[r] & 1u)) continue;
        const int n = warp + r * kWarps;
        float mm[kStaged], out[4];
#pragma unroll
        for (int e = 0; e < kStaged; ++e) mm[e] = smem[(e * Cfg::kN + n) * kLdMt + f];
        finish_output_transform<kStaged>(mm, out);
        TIo* dst = a.y + y_off[r] + k;
        dst[0] = from_float<TIo>(out[0] + b);
        if (edges[r] & 2u) dst[cv.out_C] = from_float<TIo>(out[1] + b);
        if (edges[r] & 4u) {
          dst[row_stride] = from_float<TIo>(out[2] + b);
          if (edges[r] & 2u) dst[row_stride + cv.out_C] = from_float<TIo>(out[3] + b);
        }
      }
    }
  }
}

// A forward loader thread's input patches: kRows rows (from row `row0` on) of the 4x4 patch of tile p
// at channel `ch` of every chunk of kK channels, NCHW or NHWC (kNhwc), loaded into registers. The
// patch origin and a mask of the values inside the image are decoded once, so that each load costs a
// bit test; the strides come from the kernel parameter (constants, not registers). The values come
// as TIo, for the caller to widen where it transforms them (ldg_or_zero).
//
// NCHW rows where W is even, x is aligned to a pair of elements and the patches start at odd
// columns (odd padding, as 3x3 layers' 1): values 1 and 2 of a row then lie at an even column, at a
// pair-aligned address, and inside the image or outside it together (W even), so they load as one
// word -- three loads per row against four, the same sectors in fewer L1 requests. Patches at even
// columns could load as two pairs, but a loader with both pairings was slower than none: the two
// cannot share aligned register pairs, so the compiler gave one of them registers of its own and
// moved its values into the patch's.
template <typename TIo, bool kNhwc, int kK, int kRows = 4>
struct TcPatchLoader {
  const WinogradConv* cv;  // the kernel parameter (a pointer, so that a persistent block can reassign its loader)
  const TIo* patch;
  int64_t nhwc_row_step;  // NHWC: a patch row's stride, W * C, multiplied once (unused for NCHW)
  int ch;
  unsigned inside;  // bit 4i + j: value (row0 + i, j) of the patch lies inside the image
  bool middle_pairs;  // NCHW rows as value 0, the pair 1-2, value 3; the same in every thread of the launch

  __device__ __forceinline__ TcPatchLoader(const ForwardArgs<float, TIo>& a, const BlockCoord& bc, int64_t p, bool live,
                                           int ch_, int row0 = 0)
      : cv(&a.cv), nhwc_row_step(int64_t(a.cv.src_W) * a.cv.src_C), ch(ch_) {
    const WinogradConv& cv = a.cv;
    const InputPatch origin(cv, p, live, row0);
    const unsigned rc = origin.mask;
    inside = 0;
#pragma unroll
    for (int i = 0; i < kRows; ++i) inside |= (rc >> i) & 1u ? ((rc >> 4) & 0xFu) << (i * 4) : 0u;
    const int64_t c0 = int64_t(bc.g) * cv.Cg() + ch;
    patch = a.x + (kNhwc ? origin.nhwc_offset(cv, c0) : origin.nchw_offset(cv, c0));
    // ix0's parity is col_ox's.
    middle_pairs = !kNhwc && cv.src_W % 2 == 0 && (cv.col_ox & 1) &&
                   aligned_to(a.x, 2 * sizeof(TIo));
  }

  // The same patch of the next channel.
  __device__ __forceinline__ TcPatchLoader next_channel() const {
    TcPatchLoader next = *this;
    next.patch += kNhwc ? 1 : cv->in_plane;
    ++next.ch;
    return next;
  }

  __device__ __forceinline__ void load(int chunk, TIo (&d)[4 * kRows]) const {
    const WinogradConv& cv = *this->cv;
    const unsigned m = chunk * kK + ch < cv.Cg() ? inside : 0u;
    const int64_t row_step = kNhwc ? nhwc_row_step : int64_t(cv.src_W);
    const int col_step = kNhwc ? cv.src_C : 1;
    const TIo* row = patch + chunk * (kNhwc ? int64_t(kK) : int64_t(kK) * cv.in_plane);
    if (!kNhwc && middle_pairs) {
#pragma unroll
      for (int i = 0; i < kRows; ++i, row += row_step) {
        const unsigned mi = m >> (i * 4);
        d[i * 4] = ldg_or_zero(row, mi & 1u);
        ldg_pair_or_zero(row + 1, (mi >> 1) & 1u, d[i * 4 + 1], d[i * 4 + 2]);
        d[i * 4 + 3] = ldg_or_zero(row + 3, (mi >> 3) & 1u);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRows; ++i, row += row_step)
#pragma unroll
        for (int j = 0; j < 4; ++j) d[i * 4 + j] = ldg_or_zero(row + j * col_step, (m >> (i * 4 + j)) & 1u);
    }
  }
};

// A loader lane's half of a 16-bit channels_last 4x4 input patch for two neighbouring channels:
// columns 2h and 2h + 1 of its four rows, channels c and c + 1 of every chunk of kK, each pixel's pair
// one 4-byte word where `words` (the group's channel count and x's even, x aligned to a pair), element
// by element otherwise; zero outside the image, the tile and the group's channels. The patch's other
// half is its partner lane's (half_patch_pair_transform). Against a lane per channel and whole
// patch, a chunk takes half the global loads and, where V's layout puts a point's two channels side
// by side, half the shared-memory stores, for the same bytes.
template <typename TIo, int kK>
struct TcHalfPatchPairLoader {
  static_assert(sizeof(TIo) == 2, "16-bit channels, a pair a word");
  using Word = uint32_t;
  const TIo* patch;  // pixel (0, 2h) of the patch, channel c of chunk 0
  int64_t row_step;  // W * C
  int col_step;      // C
  int c, cg;
  unsigned inside;  // bit 2i + j: pixel (i, 2h + j) of the patch lies inside the image
  bool words;

  __device__ __forceinline__ TcHalfPatchPairLoader(const ForwardArgs<float, TIo>& a, const BlockCoord& bc, int64_t p,
                                                   bool live, int c_, int h)
      : row_step(int64_t(a.cv.src_W) * a.cv.src_C), col_step(a.cv.src_C), c(c_), cg(a.cv.Cg()) {
    const WinogradConv& cv = a.cv;
    const InputPatch origin(cv, p, live);
    const unsigned rc = origin.mask;
    inside = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) inside |= ((rc >> i) & (rc >> (4 + 2 * h + j)) & 1u) << (2 * i + j);
    patch = a.x + origin.nhwc_offset(cv, int64_t(bc.g) * cg + c, 2 * h);
    words = cg % 2 == 0 && cv.src_C % 2 == 0 && aligned_to(a.x, sizeof(Word));
  }

  // w[i][j]: pixel (i, 2h + j)'s two channels.
  __device__ __forceinline__ void load(int chunk, Word (&w)[4][2]) const {
    const int c0 = chunk * kK + c;
    const TIo* base = patch + chunk * kK;
    if (words) {
      const unsigned m = c0 < cg ? inside : 0u;  // cg even: c0 + 1 < cg with c0
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          w[i][j] = (m >> (2 * i + j)) & 1u ? __ldg(reinterpret_cast<const Word*>(base + i * row_step + j * col_step))
                                            : Word{};
    } else {
      const bool ok0 = c0 < cg, ok1 = c0 + 1 < cg;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const TIo* q = base + i * row_step + j * col_step;
          const bool in = (inside >> (2 * i + j)) & 1u;
          const TIo e[2] = {ldg_or_zero(q, in && ok0), ldg_or_zero(q + 1, in && ok1)};
          memcpy(&w[i][j], e, sizeof(Word));
        }
    }
  }
};

// V = B^T d B at the points (i, 2h + j) of a channel pair's patch (v[channel][2i + j]), from this
// lane's columns 2h, 2h + 1 (w, TcHalfPatchPairLoader) and the one column of its partner's (lane ^
// partner, the other half) that its points need: column 2 for h = 0, column 1 for h = 1, which the
// partner sends as its raw words (the column B^T is then applied to three columns, one more than a
// lane owns, for four shuffles instead of eight). The same sums in the same order as
// winograd_input_transform (B^T down each column, then along the rows), so the same bits: with the
// lane's columns L0, L1 and the partner's R, the points are L0 - R and L1 + R (h = 0), R - L1 (h = 1).
template <typename TIo>
__device__ __forceinline__ void half_patch_pair_transform(const uint32_t (&w)[4][2], int h, int partner,
                                                          float (&v)[2][8]) {
  uint32_t theirs[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) theirs[i] = __shfl_xor_sync(0xffffffffu, h ? w[i][0] : w[i][1], partner);
  // B^T down a column: (d0 - d2, d1 + d2, d2 - d1, d1 - d3), both channels.
  auto down = [](float2 d0, float2 d1, float2 d2, float2 d3, float2 (&t)[4]) {
    t[0] = make_float2(d0.x - d2.x, d0.y - d2.y);
    t[1] = make_float2(d1.x + d2.x, d1.y + d2.y);
    t[2] = make_float2(d2.x - d1.x, d2.y - d1.y);
    t[3] = make_float2(d1.x - d3.x, d1.y - d3.y);
  };
  float2 l0[4], l1[4], r[4];
  down(widen_pair<TIo>(w[0][0]), widen_pair<TIo>(w[1][0]), widen_pair<TIo>(w[2][0]), widen_pair<TIo>(w[3][0]), l0);
  down(widen_pair<TIo>(w[0][1]), widen_pair<TIo>(w[1][1]), widen_pair<TIo>(w[2][1]), widen_pair<TIo>(w[3][1]), l1);
  down(widen_pair<TIo>(theirs[0]), widen_pair<TIo>(theirs[1]), widen_pair<TIo>(theirs[2]), widen_pair<TIo>(theirs[3]),
       r);
  const float s = h ? -1.f : 1.f;  // fmaf(s, x, y): one rounding of y + s x, the add's or the subtraction's bits
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[0][2 * i] = l0[i].x - r[i].x;
    v[1][2 * i] = l0[i].y - r[i].y;
    v[0][2 * i + 1] = fmaf(s, l1[i].x, r[i].x);
    v[1][2 * i + 1] = fmaf(s, l1[i].y, r[i].y);
  }
}

// A forward block's U: each chunk is one contiguous run of the cache (Cfg::kUFloats words, from word
// `offset` of the cache's chunk of Cfg::kUChunkFloats), copied as it is by cp.async, 16 bytes per
// thread and step.
template <typename Cfg>
struct TcUFetcher {
  const float* u_block;  // this thread's first word of the block's first chunk

  // Chunk 0 of the cache's run for filter block kt of group g.
  template <typename Args>
  static __device__ __forceinline__ const float* block_run(const Args& a, int g, int kt) {
    return a.u + (int64_t(g) * a.k_tiles + kt) * (a.reduction_pad / Cfg::kK) * Cfg::kUChunkFloats;
  }

  template <typename Args>
  __device__ __forceinline__ TcUFetcher(const Args& a, const BlockCoord& bc, int offset = 0)
      : u_block(block_run(a, bc.g, bc.kt) + offset + threadIdx.x * 4) {}

  __device__ __forceinline__ void fetch(int chunk, float* u_tile) const {
    const float* src = u_block + int64_t(chunk) * Cfg::kUChunkFloats;
#pragma unroll
    for (int q = 0; q < Cfg::kUFloats / 4 / Cfg::kThreads; ++q)
      cp_async_16(u_tile + (threadIdx.x + q * Cfg::kThreads) * 4, src + q * Cfg::kThreads * 4);
  }
};

// kNhwc: x and y are channels_last. The loaders' lanes then run along a chunk's channels (coalesced
// NHWC reads), V is stored tile-major, and the epilogue's lanes run along filters (coalesced NHWC
// stores). TIo: the type of x, bias and y; it sets the TF32 products per point product (U from the
// cache of the same kMmaProducts).
template <typename Cfg, bool kNhwc, typename TIo>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_tc_fused_forward_kernel(const ForwardArgs<float, TIo> a) {
  constexpr int kLdV = Cfg::kLdV, kLdVt = Cfg::kLdVt, kProducts = kMmaProducts<TIo>;
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const BlockCoord bc = block_coord(a.k_tiles, a.p_tiles);
  const int64_t p0 = int64_t(bc.pt) * Cfg::kN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto stage_u = [&](int s) { return smem + s * Cfg::kForwardStage; };
  auto stage_v = [&](int s) { return smem + s * Cfg::kForwardStage + Cfg::kUFloats; };

  // Threads of the first kK warps: this thread's channel within a chunk and tile within the block
  // (NCHW: a warp per channel, lanes along tiles; NHWC: lanes along channels, 32 / kK tiles per warp),
  // a whole patch a thread. 16-bit NHWC (kHalfPairs): lanes along the chunk's channel pairs, then the
  // patch's two column halves, 32 / kK tiles per warp, the half patch of a channel pair a thread
  // (TcHalfPatchPairLoader), which this block, bound by its loads and shared-memory stores, runs
  // faster; float32 NHWC, whose pairs are 8-byte words, ran slower that way (docs/winograd.md).
  constexpr bool kHalfPairs = kNhwc && sizeof(TIo) == 2;
  const bool loader = threadIdx.x < 32 * Cfg::kK;
  constexpr int kPairs = Cfg::kK / 2;  // kHalfPairs: a half's partner is kPairs lanes away
  const int half = kHalfPairs ? (lane / kPairs) % 2 : 0;
  const int ch = kHalfPairs ? 2 * (lane % kPairs) : kNhwc ? lane % Cfg::kK : warp;
  const int tl = kNhwc ? warp * (32 / Cfg::kK) + lane / Cfg::kK : lane;
  const bool live = loader && p0 + tl < cv.tiles();
  using Loader = std::conditional_t<kHalfPairs, TcHalfPatchPairLoader<TIo, Cfg::kK>, TcPatchLoader<TIo, kNhwc, Cfg::kK>>;
  using Raw = std::conditional_t<kHalfPairs, uint32_t[4][2], TIo[16]>;
  const Loader patch = [&] {
    if constexpr (kHalfPairs)
      return Loader(a, bc, p0 + tl, live, loader ? ch : 0, half);
    else
      return Loader(a, bc, p0 + tl, live, loader ? ch : 0);
  }();
  auto store_v = [&](const Raw& d, float* v_tile) {
    if constexpr (kHalfPairs) {
      // V tile-major ([point][tile][kLdVt]): the pair's two channels of a point side by side.
      float v[2][8];
      half_patch_pair_transform<TIo>(d, half, kPairs, v);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int e = 4 * i + 2 * half + j;
          *reinterpret_cast<float2*>(v_tile + (e * Cfg::kN + tl) * kLdVt + ch) =
              make_float2(tf32_operand<kProducts>(v[0][2 * i + j]), tf32_operand<kProducts>(v[1][2 * i + j]));
        }
    } else {
      float f[16], v[16];
      widen_to_float(d, f);
      winograd_input_transform<float>(f, v);
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        float* dst = kNhwc ? v_tile + (e * Cfg::kN + tl) * kLdVt + ch : v_tile + (e * Cfg::kK + ch) * kLdV + tl;
        *dst = tf32_operand<kProducts>(v[e]);
      }
    }
  };
  static_assert(kLdVt % 2 == 0 && Cfg::kUFloats % 2 == 0 && Cfg::kForwardStage % 2 == 0,
                "a channel pair's V one 8-byte store");
  const TcUFetcher<Cfg> u_chunks(a, bc);
  auto fetch_u = [&](int chunk, float* u_tile) { u_chunks.fetch(chunk, u_tile); };

  float acc[Cfg::kPointsPerWarp][Cfg::kMTiles][4][4];
  zero_accumulators<Cfg>(acc);

  const int chunks = a.reduction_pad / Cfg::kK;
  Raw d;
  fetch_u(0, stage_u(0));
  cp_async_commit();
  if (loader) {
    patch.load(0, d);
    store_v(d, stage_v(0));
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int s = chunk & 1;
    cp_async_wait<0>();
    // Stage s is complete (U copied, V stored by every thread), and every warp is done with s ^ 1.
    __syncthreads();
    const bool more = chunk + 1 < chunks;
    if (more) {
      fetch_u(chunk + 1, stage_u(s ^ 1));
      cp_async_commit();
      if (loader) patch.load(chunk + 1, d);
    }
    chunk_mmas<Cfg, true, kNhwc, kProducts>(acc, stage_u(s), stage_v(s), warp, lane);
    if (more && loader) store_v(d, stage_v(s ^ 1));
  }
  auto stage = [&](int pass, float* m) { stage_pass<Cfg, kNhwc>(acc, pass, m, warp, lane); };
  if constexpr (kNhwc)
    tc_epilogue_nhwc<Cfg>(stage, smem, a, bc, p0, warp, lane);
  else
    tc_epilogue_nchw<Cfg>(stage, smem, a, bc, p0, warp, lane);
}

// A tensor-core grad_weight thread's operands (winograd_tc_weight_grad_kernel,
// winograd_wgmma_weight_grad_kernel): per chunk, kFilters (filter, tile) 2x2 grad_output tiles --
// filters k, k + 32, ... -- and one (channel, tile) 4x4 input patch, all of one tile slot of the chunk,
// whose coordinates step by kStep tiles per chunk instead of dividing. kNhwc: x and grad_output are
// channels_last. Loaded as they are (ldg_or_zero), zero past the slice's tiles, the group's filters
// or its channels.
template <typename TIo, bool kNhwc, int kStep, int kFilters>
struct WeightGradSlotLoader {
  static constexpr int kFilterStep = 32;
  const WinogradConv& cv;
  int64_t p, tile_end;
  TileCoord tc;
  int64_t out_plane;
  bool k_ok[kFilters], c_ok;
  const TIo* gy_plane;  // filter k's plane (NCHW) or channel (NHWC) of grad_output
  const TIo* x_plane;   // the channel's of x
  int gy_col, x_col;    // strides of grad_output's and x's columns and rows
  int64_t gy_row, x_row;

  // Filter k, channel c (a patch loader where c_live), slot tile p0 of the slice ending at tile_end_.
  __device__ __forceinline__ WeightGradSlotLoader(const WeightGradArgs<float, TIo>& a, int grp, int k, int c,
                                                  bool c_live, int64_t p0, int64_t tile_end_)
      : cv(a.cv), p(p0), tile_end(tile_end_), out_plane(int64_t(a.cv.out_H) * a.cv.out_W) {
    const int Kg = cv.Kg(), Cg = cv.Cg();
#pragma unroll
    for (int f = 0; f < kFilters; ++f) k_ok[f] = k + f * kFilterStep < Kg;
    c_ok = c_live && c < Cg;
    const int64_t gy_channel = int64_t(grp) * Kg + (k_ok[0] ? k : 0), x_channel = int64_t(grp) * Cg + (c_ok ? c : 0);
    gy_plane = a.gy + (kNhwc ? gy_channel : gy_channel * out_plane);
    x_plane = a.x + (kNhwc ? x_channel : x_channel * cv.in_plane);
    gy_col = kNhwc ? cv.out_C : 1, x_col = kNhwc ? cv.src_C : 1;
    gy_row = int64_t(gy_col) * cv.out_W, x_row = int64_t(x_col) * cv.src_W;
    tc = tile_coord(cv, p);
  }

  __device__ __forceinline__ void next_tile() {
    p += kStep;
    advance_tile(cv, tc, kStep);
  }

  // dy[4 f ..]: filter k + 32 f's 2x2 tile; with `patch`, d: the channel's 4x4 patch. kWholeTiles:
  // tiles and patches wholly inside (all but a layer's edges) load without a predicate a value, whose
  // masks and zero fills were about a sixth of the fused wgmma grad_weight loop's instructions on
  // 16-bit channels_last tensors (docs/winograd.md, "Whole-tile loads for the fused grad_weight").
  template <bool kWholeTiles = false>
  __device__ __forceinline__ void load(TIo (&dy)[4 * kFilters], TIo (&d)[16], bool patch) const {
    const bool live = p < tile_end;
    const int oy = 2 * tc.ty, ox = 2 * tc.tx;
    const TIo* gsrc = gy_plane + int64_t(tc.n) * cv.out_C * out_plane + oy * gy_row + int64_t(ox) * gy_col;
    const bool right = ox + 1 < cv.out_W, below = oy + 1 < cv.out_H;
    bool whole_dy = kWholeTiles && live && right && below;
#pragma unroll
    for (int f = 0; f < kFilters; ++f) whole_dy = whole_dy && k_ok[f];
    if (whole_dy) {
#pragma unroll
      for (int f = 0; f < kFilters; ++f) {
        const TIo* src = gsrc + f * kFilterStep * (kNhwc ? 1 : out_plane);
        dy[4 * f] = __ldg(src);
        dy[4 * f + 1] = __ldg(src + gy_col);
        dy[4 * f + 2] = __ldg(src + gy_row);
        dy[4 * f + 3] = __ldg(src + gy_row + gy_col);
      }
    } else {
#pragma unroll
      for (int f = 0; f < kFilters; ++f) {
        const TIo* src = gsrc + (k_ok[f] ? f * kFilterStep * (kNhwc ? 1 : out_plane) : 0);
        const bool ok = live && k_ok[f];
        dy[4 * f] = ldg_or_zero(src, ok);
        dy[4 * f + 1] = ldg_or_zero(src + gy_col, ok && right);
        dy[4 * f + 2] = ldg_or_zero(src + gy_row, ok && below);
        dy[4 * f + 3] = ldg_or_zero(src + gy_row + gy_col, ok && right && below);
      }
    }
    if (patch) {
      const int iy0 = oy + cv.col_oy, ix0 = ox + cv.col_ox;
      const TIo* xsrc = x_plane + int64_t(tc.n) * cv.src_C * cv.in_plane + iy0 * x_row + int64_t(ix0) * x_col;
      if (kWholeTiles && live && c_ok && iy0 >= 0 && ix0 >= 0 && iy0 + 4 <= cv.src_H && ix0 + 4 <= cv.src_W) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) d[i * 4 + j] = __ldg(xsrc + i * x_row + j * x_col);
      } else {
        const unsigned rc = live && c_ok ? patch_mask(iy0, ix0, cv) : 0u;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            d[i * 4 + j] = ldg_or_zero(xsrc + i * x_row + j * x_col, (rc >> i) & (rc >> (4 + j)) & 1u);
      }
    }
  }
};

// grad_weight on tensor cores: dU = dM V^T per point, reducing over tiles (the FP32 kernel's
// decomposition, winograd_weight_grad_kernel: a block owns kM filters x 32 channels x 16 points of
// one slice of the tiles, and writes its dU to that slice). Per chunk of 8 tiles each thread loads
// one (filter, tile) 2x2 grad_output tile and, in the first 8 warps, one (channel, tile) 4x4 input
// patch into registers a chunk ahead, transforms them in FP32 (dM = A dY A^T, V = B^T d B) and stores
// them rounded to TF32 as the MMA's A and B. Each thread keeps one tile slot of the chunk and steps
// its tile coordinates by 8 tiles per chunk instead of dividing.
//
// Pair index bits: 0-2 and 6 up the row (filter or channel), 3-5 the tile within the chunk. A warp's
// 32 stores then cover 4 tiles x 8 rows, which land in 32 distinct banks with rows kLd = 8 (mod 32)
// words apart, as the fragment loads do.
__device__ __forceinline__ int pair_row(int i) { return (i & 7) | ((i >> 6) << 3); }
__device__ __forceinline__ int pair_tile(int i) { return (i >> 3) & 7; }

// kNhwc: x and grad_output are channels_last; a warp's 8 lanes of neighbouring rows then read 8
// contiguous values. TIo: the type of x and grad_output; it sets the TF32 products per point product.
template <typename Cfg, bool kNhwc, typename TIo>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_tc_weight_grad_kernel(const WeightGradArgs<float, TIo> a) {
  static_assert(Cfg::kK == 8 && Cfg::kM * Cfg::kK == Cfg::kThreads && Cfg::kN * Cfg::kK <= Cfg::kThreads,
                "a (filter, tile) per thread, a (channel, tile) per thread of the first 8 warps");
  constexpr int kLdA = Cfg::kLdA, kLdV = Cfg::kLdV, kProducts = kMmaProducts<TIo>;
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const auto [kt, ct, grp, split, tile_begin, tile_end] = weight_grad_slice(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto stage_a = [&](int s) { return smem + s * Cfg::kWeightGradStage; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kWeightGradStage + Cfg::kDmFloats; };

  const int row = pair_row(threadIdx.x), slot = pair_tile(threadIdx.x);
  const bool loader = threadIdx.x < Cfg::kN * Cfg::kK;
  WeightGradSlotLoader<TIo, kNhwc, Cfg::kK, 1> slot_loader(a, grp, kt * Cfg::kM + row, ct * Cfg::kN + row, loader,
                                                          tile_begin + slot, tile_end);
  TIo d[16], dy[4];  // widened in store (ldg_or_zero)
  auto next_tile = [&] { slot_loader.next_tile(); };
  auto load = [&] { slot_loader.load(dy, d, loader); };
  auto store = [&](float* a_tile, float* b_tile) {
    float m[16], f[16], g[4];
    widen_to_float(dy, g);
    winograd_output_transform_adjoint<float>(g, m);
#pragma unroll
    for (int e = 0; e < 16; ++e)
      a_tile[(e * Cfg::kK + slot) * kLdA + row] = tf32_operand<kProducts>(m[e]);
    if (loader) {
      widen_to_float(d, f);
      winograd_input_transform<float>(f, m);
#pragma unroll
      for (int e = 0; e < 16; ++e)
        b_tile[(e * Cfg::kK + slot) * kLdV + row] = tf32_operand<kProducts>(m[e]);
    }
  };

  float acc[Cfg::kPointsPerWarp][Cfg::kMTiles][4][4];
  zero_accumulators<Cfg>(acc);
  const int chunks = int((tile_end - tile_begin + Cfg::kK - 1) / Cfg::kK);
  load();
  store(stage_a(0), stage_b(0));
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int s = chunk & 1;
    // Stage s is stored by every thread, and every warp is done with s ^ 1.
    __syncthreads();
    const bool more = chunk + 1 < chunks;
    if (more) {
      next_tile();
      load();
    }
    chunk_mmas<Cfg, false, false, kProducts>(acc, stage_a(s), stage_b(s), warp, lane);
    if (more) store(stage_a(s ^ 1), stage_b(s ^ 1));
  }

  // dU straight from the accumulators into the slice ([16][k_pad][c_pad]; padding rows and columns
  // hold zeros, which the finishing kernel never reads).
  const int g = lane / 4, t = lane % 4;
  float* out = a.partial + ((int64_t(split) * cv.groups + grp) * kWinogradPoints * a.k_pad + kt * Cfg::kM) * a.c_pad +
               ct * Cfg::kN;
#pragma unroll
  for (int pe = 0; pe < Cfg::kPointsPerWarp; ++pe)
#pragma unroll
    for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float(&r)[4] = acc[pe][i][j];
        float* o = out + (int64_t(warp * Cfg::kPointsPerWarp + pe) * a.k_pad + i * 16 + g) * a.c_pad + j * 8 + 2 * t;
        *reinterpret_cast<float2*>(o) = make_float2(r[0], r[1]);
        *reinterpret_cast<float2*>(o + 8 * a.c_pad) = make_float2(r[2], r[3]);
      }
}

// The staged variants' point GEMMs on tensor cores, for their float32 calls while PyTorch's TF32
// switch is on and their bfloat16 calls (F(2x2)'s staged variant and F(4x4): TF32), and F(2x2)'s
// float16 calls (3xBF16): winograd_batched_gemm_kernel's operands, grid and M, in the layouts of the
// IEEE tile config of the same blocks and point groups (so both share U's cache entry), computed by
// mma.sync m16n8k8; likewise the staged grad_weight's GEMM (winograd_weight_grad_gemm_kernel's,
// WinogradStagedTileMma for WinogradTileF32). Warp w of a block computes point w of its
// point group over the block's kM filters x kN tiles, in (kM / 16) x (kN / 8) fragments. U and V are
// FP32 in the workspace and rounded to TF32 (or split) as a fragment reads them from shared memory;
// rows padded by 8 floats (kSkew) put each fragment load in 32 banks.
//   WinogradStagedTileMma:  F(2x2), WinogradTileF32's blocks: 16 points, 32 filters x 32 tiles, 16 warps,
//                           two blocks per SM;
//   WinogradF4x4TileTf32:   F(4x4), WinogradF4x4TileF32's blocks: 4 points, 32 filters x 64 tiles, 4 warps,
//                           four blocks per SM.
using WinogradStagedTileMma = GemmTileConfig<kWinogradPoints, 32, 32, 8, 8, 4, 2, false, 8>;
using WinogradF4x4TileTf32 = GemmTileConfig<4, 32, 64, 8, 8, 8, 4, false, 8>;
template <typename Mma, typename Ieee>
constexpr bool kSameGemmBlocks = Mma::kBatch == Ieee::kBatch && Mma::kM == Ieee::kM && Mma::kN == Ieee::kN &&
                                 Mma::kK == Ieee::kK && Mma::kThreads == 32 * Mma::kBatch;
static_assert(kSameGemmBlocks<WinogradStagedTileMma, WinogradTileF32> &&
                  kSameGemmBlocks<WinogradF4x4TileTf32, WinogradF4x4TileF32>,
              "the tensor-core GEMMs read the IEEE GEMMs' operands (the same blocks and point groups), a warp per point");

// The staged GEMMs' main loop on tensor cores: acc += A^T B over `chunks` reduction chunks, where the
// shared tiles are [point][k][filter or tile] (A: kM x k, B: k x kN) of FP32 values and warp w
// computes point w. acc[i][j] is the m16n8 fragment of rows i * 16 + (lane / 4) (+ 8) and columns
// j * 8 + 2 (lane % 4) (+ 1) of the warp's kM x kN tile. kProducts: 1, one m16n8k8 TF32 product per
// k-step (the values rounded as a fragment reads them); 3, "3xBF16" (float16 calls, whose error
// a TF32 rounding of V would put at 2.5x cuDNN's): each value split into bfloat16 hi and lo parts
// as a fragment reads it, three m16n8k8 bfloat16 products hi hi + hi lo + lo hi per k-step. The
// bfloat16 fragments take the TF32 fragment's words as they are: a lane's k rows t and t + 4 become
// the pair 2t, 2t + 1 of both A's and B's words, the same permutation of k in both.
template <typename Cfg, int kProducts>
struct StagedPointMmas {
  static_assert(kProducts == 1 || kProducts == 3, "TF32, or 3xBF16");
  static_assert(Cfg::kThreads == 32 * Cfg::kBatch, "a warp per point");
  static_assert(Cfg::kK % 8 == 0 && Cfg::kM % 16 == 0 && Cfg::kN % 8 == 0, "whole m16n8k8 fragments");
  static_assert(Cfg::kLdA % 32 == 8 && Cfg::kLdB % 32 == 8, "a fragment's four k rows in four bank quarters");
  static constexpr int kMTiles = Cfg::kM / 16, kNTiles = Cfg::kN / 8;
  using Acc = float[kMTiles][kNTiles][4];

  // One k-step of 8: lo / hi point at the lane's k rows t and t + 4 of A (column g of each 16-row
  // fragment) and of B (column g of each 8-column fragment).
  __device__ __forceinline__ static void k_step(Acc& acc, const float* a_lo, const float* a_hi, const float* b_lo,
                                                const float* b_hi) {
    if constexpr (kProducts == 1) {
      uint32_t af[kMTiles][4], bf[kNTiles][2];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        af[i][0] = tf32_bits_for_mma(a_lo[i * 16]), af[i][1] = tf32_bits_for_mma(a_lo[i * 16 + 8]);
        af[i][2] = tf32_bits_for_mma(a_hi[i * 16]), af[i][3] = tf32_bits_for_mma(a_hi[i * 16 + 8]);
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
        bf[j][0] = tf32_bits_for_mma(b_lo[j * 8]), bf[j][1] = tf32_bits_for_mma(b_hi[j * 8]);
#pragma unroll
      for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) WarpMma<float>::run(acc[i][j], af[i], bf[j]);
    } else {
      uint32_t a_big[kMTiles][2], a_small[kMTiles][2];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        split_bf16x2(a_lo[i * 16], a_hi[i * 16], a_big[i][0], a_small[i][0]);
        split_bf16x2(a_lo[i * 16 + 8], a_hi[i * 16 + 8], a_big[i][1], a_small[i][1]);
      }
      // B split fragment by fragment: its parts live only through their MMAs (the 64-register budget
      // of two 512-thread blocks per SM).
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        uint32_t b_big, b_small;
        split_bf16x2(b_lo[j * 8], b_hi[j * 8], b_big, b_small);
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          mma_bf16_m16n8k8(acc[i][j], a_big[i], b_big);
          mma_bf16_m16n8k8(acc[i][j], a_big[i], b_small);
          mma_bf16_m16n8k8(acc[i][j], a_small[i], b_big);
        }
      }
    }
  }

  template <typename LoaderA, typename LoaderB>
  __device__ __forceinline__ static void run(float* smem, LoaderA& la, LoaderB& lb, int chunks, Acc& acc) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
    pipelined_chunks<float, Cfg>(smem, la, lb, chunks, [&](const float* as, const float* bs) {
      const float* ap = as + warp * Cfg::kK * Cfg::kLdA + g;
      const float* bp = bs + warp * Cfg::kK * Cfg::kLdB + g;
#pragma unroll
      for (int k0 = 0; k0 < Cfg::kK; k0 += 8) {
        const float* a_lo = ap + (k0 + t) * Cfg::kLdA;
        const float* b_lo = bp + (k0 + t) * Cfg::kLdB;
        k_step(acc, a_lo, a_lo + 4 * Cfg::kLdA, b_lo, b_lo + 4 * Cfg::kLdB);
      }
    });
  }

  // Writes (or adds to) the warp's tile at `out` (its row 0, column 0; rows `ld` apart).
  __device__ __forceinline__ static void store(const Acc& acc, float* out, int64_t ld, bool accumulate) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float2* o = reinterpret_cast<float2*>(out + int64_t(i * 16 + g + 8 * h) * ld + j * 8 + 2 * t);
          float2 v = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
          if (accumulate) {
            const float2 before = *o;
            v.x += before.x, v.y += before.y;
          }
          *o = v;
        }
  }
};

template <typename Cfg, int kProducts>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_batched_gemm_mma_kernel(const StagedGemmArgs<float> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const StagedGemmBlock<float, Cfg> blk(a);
  using Mmas = StagedPointMmas<Cfg, kProducts>;
  typename Mmas::Acc acc;
  Mmas::run(reinterpret_cast<float*>(smem_raw), blk.la, blk.lb, a.reduction_pad / Cfg::kK, acc);
  Mmas::store(acc, blk.m_tile(a, threadIdx.x / 32), a.tiles_pad, false);  // a warp per point
}

// The staged grad_weight's GEMM (winograd_weight_grad_gemm_kernel's operands, grid and slices) on
// tensor cores (kProducts as StagedPointMmas'), for the staged variant's calls that take them:
// dU[p] += dM^T[p]^T V^T[p] over the tiles of the block's split, a warp per point.
template <typename Cfg, int kProducts>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_weight_grad_gemm_mma_kernel(const StagedWeightGradArgs<float> a) {
  static_assert(Cfg::kBatch == kWinogradPoints, "a block computes all 16 points of its filters and channels");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const StagedWeightGradBlock<float, Cfg> blk(a);
  using Mmas = StagedPointMmas<Cfg, kProducts>;
  typename Mmas::Acc acc;
  Mmas::run(reinterpret_cast<float*>(smem_raw), blk.la, blk.lb, blk.tiles / Cfg::kK, acc);
  // dU slices are [slice][16][k_pad][c_pad] (store_weight_grad_slice's layout), a warp per point.
  const int warp = threadIdx.x / 32;
  Mmas::store(acc,
              a.partial + ((int64_t(blk.slice(a)) * kWinogradPoints + warp) * a.k_pad + blk.wb.kt * Cfg::kM) * a.c_pad +
                  blk.wb.ct * Cfg::kN,
              a.c_pad, a.accumulate);
}

}  // namespace cuda
}  // namespace torchconv
