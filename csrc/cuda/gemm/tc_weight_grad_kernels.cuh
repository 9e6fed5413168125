// grad_weight on tensor cores (float16 / bfloat16, and float32 as TF32; FP32 accumulators), device
// side: mma.sync (tc_weight_grad_kernel: m16n8k16, TF32 m16n8k8), and wgmma on sm_90a
// (tc_weight_grad_wgmma_kernel, 16-bit only; TF32 from NCHW planes, tc_weight_grad_nchw_tf32_kernel,
// at the end). In channels_last both operands run along the reduction:
//     dW[g][k][(tap, c)] = sum over output positions p of gy[p][g, k] * x[p through tap][g, c]
// so a chunk of kBK positions is kBK rows of filters (gy) and kBK rows of (tap, channel) columns
// (x, gathered), each row copied in 16-byte words; the MMAs read both tiles transposed (ldmatrix
// .trans; wgmma's MN-major operands, which wgmma has for 16-bit types only -- TF32 runs mma.sync, its
// fragments read by 8- and 4-byte shared loads). The positions are split across blocks so that the grid
// fills the GPU; each split writes FP32 partial sums, which tc_weight_grad_finish_kernel adds in a
// fixed order (bitwise repeatable) and writes in the weight's dtype and memory format.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "../common/cluster.cuh"
#include "../common/dependent_launch.cuh"
#include "../common/fast_divisor.cuh"
#include "../common/launch.cuh"
#include "../common/launch_map.cuh"
#include "../common/mma.cuh"
#include "../common/pipeline.cuh"
#include "../common/wgmma.cuh"

namespace torchconv {
namespace cuda {

// kElemBytes: 2 (float16 / bfloat16) or 4 (float32 read as TF32). kClusterSums: on sm_90 a tile's
// splits may add their sums as one cluster (tc_weight_grad_blocks_finish); otherwise they go through
// the workspace, and only a grid without splits writes gw from its blocks.
template <int kBM_, int kBN_, int kBK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_, int kElemBytes_ = 2,
          bool kClusterSums_ = false>
struct TcWeightGradConfig : MmaWarpTiling<kBM_, kBN_, kWarpsM_, kWarpsN_, kMinBlocks_> {
  static constexpr int kBK = kBK_, kStages = kStages_, kElemBytes = kElemBytes_;
  static constexpr bool kClusterSums = kClusterSums_;
  // Whether the split estimate weighs 1 to kMaxClusterSplits splits as clusters against the rule's
  // count (weight_grad_split_estimate): where the sums may take clusters at all.
  static constexpr bool kWeighClusters = kClusterSums_;
  // Rows of filters / columns padded by 16 bytes (2-byte elements: conflict-free ldmatrix) or 32
  // (4-byte: a row then starts 8 banks on from the one above, so the TF32 fragments' loads -- 4 rows
  // of a lane quad, 8 neighbouring words or word pairs -- meet distinct banks in each transaction).
  static constexpr int kRowPad = kElemBytes == 2 ? 16 : 32;
  static constexpr int kRowBytesA = kBM_ * kElemBytes + kRowPad, kRowBytesB = kBN_ * kElemBytes + kRowPad;
  static constexpr int kStageBytes = kBK * (kRowBytesA + kRowBytesB);
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes;
  static_assert(kBK % 16 == 0, "whole m16n8k16 k-steps");
};

struct TcWeightGrad {
  int N, C, H, W, K, Ho, Wo, groups, R, S;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int Cg, Kg, cols;          // channels and filters per group; columns = R x S x Cg
  int k_pad, n_pad;          // partial-sum tile rows and columns, padded to the block tile
  int64_t positions;         // N x Ho x Wo
  int64_t positions_per_split;
  FastDivisor plane_div, wo_div;  // by Ho x Wo and Wo: positions below 2^31 decoded by multiplies
  // by cols, Kg, Cg and S: the finish's elements (below 2^31) decoded by multiplies
  FastDivisor cols_div, kg_div, cg_div, s_div;
};

// Position p (image, then output row and column) of grad_output: by the fast divisors' multiplies
// where the positions fit 31 bits (the loads' address math runs once a chunk in every thread, beside
// the MMAs), else by divisions.
struct TcPosition {
  int img, oy, ox;
};
__device__ __forceinline__ TcPosition decode_position(const TcWeightGrad& wg, int64_t p) {
  const int plane = wg.Ho * wg.Wo;
  int img, q;
  if (wg.positions <= INT32_MAX) {
    img = int(wg.plane_div.div(uint32_t(p))), q = int(p) - img * plane;
  } else {
    img = int(p / plane), q = int(p - int64_t(img) * plane);
  }
  const int oy = int(wg.wo_div.div(uint32_t(q)));
  return {img, oy, q - oy * wg.Wo};
}

// Where column col = (r * S + s) * Cg + c of a filter's GEMM row (col below wg.cols) lies in that
// filter's gradient, through gw's strides (either memory format), and its channel c: the tap and
// channel by the fast divisors (columns below 2^31).
__device__ __forceinline__ int64_t weight_grad_column_offset(const TcWeightGrad& wg, const WeightStrides& strides,
                                                             int col, int& c) {
  const int tap = int(wg.cg_div.div(uint32_t(col)));
  c = col - tap * wg.Cg;
  const int r = int(wg.s_div.div(uint32_t(tap)));
  return strides.offset(0, c, r, tap - r * wg.S);
}

// gw's element of `filter` at column col of the GEMM's filter row = v, where the column is one of gw's
// (inside cols, its channel below the caller's `channels`).
template <typename T>
__device__ __forceinline__ void store_weight_grad_element(T* gw, const WeightStrides& strides, int channels,
                                                          const TcWeightGrad& wg, int64_t filter, int col, float v) {
  if (col >= wg.cols) return;
  int c;
  const int64_t offset = weight_grad_column_offset(wg, strides, col, c);
  if (c < channels) gw[filter * strides.k + offset] = from_float<T>(v);
}

template <typename T>
struct TcWeightGradArgs {
  const T* x;   // NHWC
  const T* gy;  // NHWC
  float* partial;  // [split][group][k_pad][n_pad]
  TcWeightGrad wg;
  int m_tiles, n_tiles;
  // Instead of `partial`: the blocks of a tile, one per split along blockIdx.y, are one cluster (or
  // one block: no split) and write gw themselves (tc_weight_grad_blocks_finish).
  bool blocks_write_gw;
  T* gw;
  WeightStrides gw_strides;  // gw's, in either memory format
  // gw's channels per group: wg.Cg, or fewer where the layer runs on zero-padded channels (an RGB
  // stem's), whose extra columns are not stored (gw is the caller's gradient, not a padded one).
  int gw_channels;
  // gw's channels adjacent, channels per group and every stride multiples of 4, gw aligned to 4
  // elements: a quad of columns (one tap's channels) is one store.
  bool gw_quads;
  // The planes kernel (kPlanes): planes of whole 16-byte words on 16-byte boundaries, a word of 8
  // positions one copy; otherwise planes of whole 8-byte half-words, a word two copies of 4 positions.
  bool plane_words;
  // The tensor copies' kernel (kTensorCopies): gy as a 2-D map (filters, positions), boxes of 64
  // filters x 64 positions, and x as an im2col map over the output positions' grid, boxes of 64
  // positions x 64 channels (encode_weight_grad_maps).
  CUtensorMap gy_map;
  CUtensorMap x_map;
};

// The block's place in the grid: column tiles fastest, then filter tiles, groups, position splits
// (the blocks that read the same positions run together); its positions and their chunks.
struct TcWeightGradBlock {
  int g, split, m0, n0, chunks;
  int64_t p_begin, p_end;
  template <typename T>
  __device__ TcWeightGradBlock(const TcWeightGradArgs<T>& a, int bm, int bn, int bk) {
    int bid = blockIdx.x;
    n0 = bid % a.n_tiles * bn;
    bid /= a.n_tiles;
    m0 = bid % a.m_tiles * bm;
    bid /= a.m_tiles;
    g = bid % a.wg.groups, split = bid / a.wg.groups + int(blockIdx.y);  // splits along x, or y (clusters)
    p_begin = int64_t(split) * a.wg.positions_per_split;
    p_end = min(a.wg.positions, p_begin + a.wg.positions_per_split);
    chunks = int((p_end - p_begin + bk - 1) / bk);
  }
};

// A thread's B words of a channels_last grad_weight chunk row (columns first + j step, j < kWords,
// each a (tap, channels) column), fixed before the loop: a word's offset from the row's input pixel
// (channel 0 of the group) and its tap's dy, dx, so that a copy is one add and two bounds tests.
// Columns past the tile's take a dy that is never inside the image.
template <int kWords>
struct WeightGradColumns {
  int dy[kWords], dx[kWords];
  int64_t offset[kWords];
  __device__ __forceinline__ WeightGradColumns(const TcWeightGrad& wg, int first, int step) {
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      const int n = first + j * step;
      if (n < wg.cols) {
        const int tap = n / wg.Cg, r = tap / wg.S;
        dy[j] = r * wg.dil_h - wg.pad_h, dx[j] = (tap - r * wg.S) * wg.dil_w - wg.pad_w;
        offset[j] = (int64_t(dy[j]) * wg.W + dx[j]) * wg.C + n - tap * wg.Cg;
      } else {
        dy[j] = -(1 << 29), dx[j] = 0, offset[j] = 0;
      }
    }
  }
  // Whether word j of the row whose pixel is (iy0, ix0) lies inside the image.
  __device__ __forceinline__ bool inside(const TcWeightGrad& wg, int iy0, int ix0, int j) const {
    return unsigned(iy0 + dy[j]) < unsigned(wg.H) && unsigned(ix0 + dx[j]) < unsigned(wg.W);
  }
};

// The TF32 fragments of tc_weight_grad_kernel. No ldmatrix transposes 4-byte elements, so each lane
// loads its fragment words from the position-major tiles itself, every load landing in the registers
// the MMA reads (no moves): A's rows permuted so that MMA rows g and g + 8 (g = lane / 4) of m-tile i
// hold the warp's neighbouring filters 16i + 2g and 16i + 2g + 1 -- one 8-byte load per k (position)
// -- and B's columns as they are, a 4-byte load each. Each word is rounded to TF32 in its register
// (tf32_bits_for_mma) unless both sources are copies rounded when made (kRounded); the caller's
// float32 tensors are not.
template <typename Cfg, bool kRounded>
struct Tf32WeightGradFragments {
  __device__ static uint32_t word(float v) { return kRounded ? __float_as_uint(v) : tf32_bits_for_mma(v); }

  static constexpr int kMTiles = Cfg::kMTiles, kNTiles = Cfg::kNTiles;

  // Lane (g, t)'s first words: row t, filter 2g (column g) of the warp's tile.
  __device__ static int a_offset(int wm, int lane) {
    return (lane % 4) * Cfg::kRowBytesA + (wm * Cfg::kWarpM + 2 * (lane / 4)) * 4;
  }
  __device__ static int b_offset(int wn, int lane) {
    return (lane % 4) * Cfg::kRowBytesB + (wn * Cfg::kWarpN + lane / 4) * 4;
  }
  // The fragments of k-step ks (positions 8 ks .. 8 ks + 7): rows t (a0, a1; b0) and t + 4 (a2, a3; b1).
  __device__ static void load(const unsigned char* sa, const unsigned char* sb, int ks, uint32_t (&af)[kMTiles][4],
                              uint32_t (&bf)[kNTiles][2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = ks * 8 + 4 * h;
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        const float2 v = *reinterpret_cast<const float2*>(sa + row * Cfg::kRowBytesA + i * 64);
        af[i][2 * h] = word(v.x), af[i][2 * h + 1] = word(v.y);
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
        bf[j][h] = word(*reinterpret_cast<const float*>(sb + row * Cfg::kRowBytesB + j * 32));
    }
  }
  // emit(row, col, v0, v1) for each pair of the warp's tile (wm, wn) (row and col from the block's
  // first filter and column): accumulator element e of tiles (i, j) is filter 16i + 2g + e / 2,
  // column 8j + 2t + e % 2.
  template <typename Emit>
  __device__ static void each_pair(const float (&acc)[kMTiles][kNTiles][4], int wm, int wn, int lane, Emit&& emit) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          emit(wm * Cfg::kWarpM + 16 * i + 2 * g + h, wn * Cfg::kWarpN + 8 * j + 2 * t, acc[i][j][2 * h],
               acc[i][j][2 * h + 1]);
  }
};

// The staged sums' row of floats: kBN + 8, so that a half-warp's 8-byte stores of an accumulator
// fragment (8 rows x 4 pairs of columns) cover the 32 banks once. (The TF32 mma.sync fragments'
// permuted rows, 2g + h, meet half the banks, each twice: a one-time cost of the end, not the loop.)
template <int kBN>
constexpr int kWeightGradSumsLd = kBN + 8;

// Writes block `rank`'s share of a tile's filters into gw from the FP32 sums of `splits` blocks, each
// staged as [kBM][kWeightGradSumsLd] floats in its shared memory at `sums` (splits > 1: the blocks of
// one cluster, read through distributed shared memory), added in split order as
// tc_weight_grad_finish_kernel does (the same bits), written once in gw's dtype and memory format: a
// thread a quad of columns, coalesced along a filter's row where gw's channels lie together.
template <typename T, int kBM, int kBN, int kThreads>
__device__ __forceinline__ void tc_weight_grad_store_staged_sums(const TcWeightGradArgs<T>& a,
                                                                 const TcWeightGradBlock& blk, const float* sums,
                                                                 int splits, int rank) {
  constexpr int kLd = kWeightGradSumsLd<kBN>, kQuads = kBN / 4;
  const TcWeightGrad& wg = a.wg;
  const int per = (kBM + splits - 1) / splits, row0 = rank * per;
  const int rows = min(min(per, kBM - row0), wg.Kg - blk.m0 - row0);
  // A thread finishes one quad of columns in every kRowStep-th row of the block's share, so the
  // quad's place in gw (its elements' taps and channels) is decoded once.
  // (kRowStep whole rows of quads a pass: with 48 quads, 16 of 256 threads have none.)
  static_assert(kThreads >= kQuads, "a pass finishes at least one row");
  constexpr int kRowStep = kThreads / kQuads;
  const int quad = int(threadIdx.x) % kQuads, col = blk.n0 + quad * 4;
  if (col < wg.cols && int(threadIdx.x) < kRowStep * kQuads) {
    int64_t offset[4];  // of element e in a filter's gradient (gw_quads: offset[0] starts the quad)
    bool stored[4];     // element e is a column of gw (not past the columns or in a padded channel)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int c;
      offset[e] = weight_grad_column_offset(wg, a.gw_strides, min(col + e, wg.cols - 1), c);
      stored[e] = col + e < wg.cols && c < a.gw_channels;
    }
    for (int row = int(threadIdx.x) / kQuads; row < rows; row += kRowStep) {
      // Split i's quad, mapped into its block's shared memory where needed (one mapa each: the
      // kernels that end here hold their registers for the MMAs' accumulators). All eight splits
      // unrolled: four at a time freed the TF32 mma.sync kernel's one spilled register but made its
      // one-split passes slower (docs/precision.md, "One split writes gw").
      const float* mine = sums + (row0 + row) * kLd + quad * 4;
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < kMaxClusterSplits; ++i)
        if (i < splits) {
          const float4 v = *reinterpret_cast<const float4*>(splits > 1 ? cluster_map_shared(mine, unsigned(i)) : mine);
          sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
        }
      T* filter = a.gw + (int64_t(blk.g) * wg.Kg + blk.m0 + row0 + row) * a.gw_strides.k;
      if (a.gw_quads) {  // col + 3 < cols, in one tap: cols, Cg and gw_channels are multiples of 4
        if (stored[0]) store_quad(filter + offset[0], sum);
        continue;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (stored[e]) filter[offset[e]] = from_float<T>(sum[e]);
    }
  }
}

// The end of grad_weight where the blocks write gw themselves (TcWeightGradArgs::blocks_write_gw): each
// block stages its FP32 sums of the tile in its pipeline's shared memory (`stage(sums, ld)`: its
// accumulators into [kBM][ld] floats), and block r of a tile's splits -- one cluster along blockIdx.y;
// a grid without splits, one block -- finishes a contiguous run of the tile's filters from every
// split's sums (tc_weight_grad_store_staged_sums): no workspace and no finish launch.
template <typename T, typename Cfg, typename Stage>
__device__ __forceinline__ void tc_weight_grad_blocks_finish(const TcWeightGradArgs<T>& a, const TcWeightGradBlock& blk,
                                                             unsigned char* smem, Stage&& stage) {
  constexpr int kLd = kWeightGradSumsLd<Cfg::kBN>;
  static_assert(size_t(Cfg::kBM) * kLd * sizeof(float) <= size_t(Cfg::kStages) * Cfg::kStageBytes,
                "the staged sums fit in the pipeline's stages (what a kernel keeps after them stays)");
  const int splits = int(gridDim.y);
  float* sums = reinterpret_cast<float*>(smem);
  __syncthreads();  // every warp's MMAs, which read the stages, have completed
  stage(sums, kLd);
  if (splits > 1) {
    cluster_arrive_release();
    cluster_wait_acquire();
  } else {
    __syncthreads();
  }
  tc_weight_grad_store_staged_sums<T, Cfg::kBM, Cfg::kBN, Cfg::kThreads>(a, blk, sums, splits, int(blockIdx.y));
  if (splits > 1) {  // no block leaves while another may still read its shared memory
    cluster_arrive_release();
    cluster_wait_acquire();
  }
}

// kRounded (TF32): x and gy are copies whose values were rounded to TF32 when made.
template <typename T, typename Cfg, bool kRounded = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    tc_weight_grad_kernel(const __grid_constant__ TcWeightGradArgs<T> a) {
  extern __shared__ __align__(128) unsigned char smem[];
  static_assert(sizeof(T) == Cfg::kElemBytes, "the config's element size");
  constexpr bool kTf32 = WarpMma<T>::kTf32;
  constexpr int kVec = 16 / int(sizeof(T));  // elements per 16-byte word
  constexpr int kWordsA = Cfg::kBM / kVec, kWordsB = Cfg::kBN / kVec;  // 16-byte words per row
  constexpr int kARows = Cfg::kBK * kWordsA / Cfg::kThreads, kARowStep = Cfg::kThreads / kWordsA;
  // B: kThreadsPerRow threads a row of the chunk, kBWords words each (one position decoded a thread).
  constexpr int kThreadsPerRow = Cfg::kThreads / Cfg::kBK, kBWords = kWordsB / kThreadsPerRow;
  static_assert(kARows >= 1 && kBWords >= 1 && Cfg::kThreads % kWordsA == 0 && Cfg::kThreads % Cfg::kBK == 0 &&
                    kWordsB % kThreadsPerRow == 0,
                "each pass copies whole rows");
  const TcWeightGrad& wg = a.wg;
  const int tid = threadIdx.x;

  const TcWeightGradBlock blk(a, Cfg::kBM, Cfg::kBN, Cfg::kBK);
  const int g = blk.g, split = blk.split, m0 = blk.m0, n0 = blk.n0, chunks = blk.chunks;
  const int split_positions = int(blk.p_end - blk.p_begin);

  // The copies' address arithmetic, fixed before the loop as in tc_weight_grad_wgmma_kernel. A:
  // filters m0 + kVec * word_a .. of grad_output rows row_a + i kARowStep, a_rows of the split's
  // positions from row_a on with a word to copy.
  const int word_a = tid % kWordsA, row_a = tid / kWordsA;
  const int a_rows = m0 + word_a * kVec < wg.Kg ? split_positions - row_a : 0;
  const T* gy_first = a.gy + (blk.p_begin + row_a) * wg.K + int64_t(g) * wg.Kg + m0 + word_a * kVec;
  const int64_t gy_chunk_step = int64_t(Cfg::kBK) * wg.K, gy_row_step = int64_t(kARowStep) * wg.K;
  const int a_place = row_a * Cfg::kRowBytesA + word_a * 16;
  // B: row row_b, words word_b0 + j kThreadsPerRow, each a (tap, kVec channels) column.
  const int row_b = tid / kThreadsPerRow, word_b0 = tid % kThreadsPerRow;
  const WeightGradColumns<kBWords> b_cols(wg, n0 + word_b0 * kVec, kThreadsPerRow * kVec);
  const int b_place = row_b * Cfg::kRowBytesB + word_b0 * 16;
  const T* x_group = a.x + int64_t(g) * wg.Cg;
  const int64_t image_elements = int64_t(wg.H) * wg.W * wg.C;

  auto stage_a = [&](int st) { return smem + st * Cfg::kStageBytes; };
  auto stage_b = [&](int st) { return smem + st * Cfg::kStageBytes + Cfg::kBK * Cfg::kRowBytesA; };
  auto fetch = [&](int chunk, int st) {
    const int r0 = chunk * Cfg::kBK;
    const T* gy_chunk = gy_first + chunk * gy_chunk_step;
    unsigned char* a_dst = stage_a(st) + a_place;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const bool ok = r0 + i * kARowStep < a_rows;
      cp_async_16_or_zero(a_dst + i * kARowStep * Cfg::kRowBytesA, ok ? gy_chunk + i * gy_row_step : a.gy, ok);
    }
    int iy0 = -(1 << 29), ix0 = 0;  // with any column's dy: never inside the image
    const T* x_pixel = a.x;
    if (r0 + row_b < split_positions) {
      const TcPosition pos = decode_position(wg, blk.p_begin + r0 + row_b);
      iy0 = pos.oy * wg.stride_h, ix0 = pos.ox * wg.stride_w;
      x_pixel = x_group + pos.img * image_elements + (int64_t(iy0) * wg.W + ix0) * wg.C;
    }
    unsigned char* b_dst = stage_b(st) + b_place;
#pragma unroll
    for (int j = 0; j < kBWords; ++j) {
      const bool ok = b_cols.inside(wg, iy0, ix0, j);
      cp_async_16_or_zero(b_dst + j * kThreadsPerRow * 16, ok ? x_pixel + b_cols.offset[j] : a.x, ok);
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp % Cfg::kWarpsM, wn = warp / Cfg::kWarpsM;
  // ldmatrix.trans row addresses: A (stored [position][filter]) rows lane % 8 + (lane / 16) * 8,
  // filter offset ((lane / 8) % 2) * 8; B (stored [position][column]) rows lane % 8 +
  // ((lane / 8) % 2) * 8, column offset (lane / 16) * 8. TF32: Tf32WeightGradFragments.
  using Tf32 = Tf32WeightGradFragments<Cfg, kRounded>;
  const int a_off = kTf32 ? Tf32::a_offset(wm, lane)
                          : (lane % 8 + (lane / 16) * 8) * Cfg::kRowBytesA +
                                (wm * Cfg::kWarpM + ((lane / 8) % 2) * 8) * 2;
  const int b_off = kTf32 ? Tf32::b_offset(wn, lane)
                          : (lane % 8 + ((lane / 8) % 2) * 8) * Cfg::kRowBytesB +
                                (wn * Cfg::kWarpN + (lane / 16) * 8) * 2;

  float acc[Cfg::kMTiles][Cfg::kNTiles][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int st = 0; st < Cfg::kStages - 1; ++st) {
    if (st < chunks) fetch(st, st);
    cp_async_commit();
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    const int next = chunk + Cfg::kStages - 1;
    if (next < chunks) fetch(next, next % Cfg::kStages);
    cp_async_commit();
    const int st = chunk % Cfg::kStages;
    if constexpr (kTf32) {
#pragma unroll
      for (int ks = 0; ks < Cfg::kBK / 8; ++ks) {
        uint32_t af[Cfg::kMTiles][4], bf[Cfg::kNTiles][2];
        Tf32::load(stage_a(st) + a_off, stage_b(st) + b_off, ks, af, bf);
#pragma unroll
        for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kNTiles; ++j) WarpMma<T>::run(acc[i][j], af[i], bf[j]);
      }
    } else {
      const unsigned sa = smem_address(stage_a(st) + a_off), sb = smem_address(stage_b(st) + b_off);
#pragma unroll
      for (int ks = 0; ks < Cfg::kBK / 16; ++ks) {
        uint32_t af[Cfg::kMTiles][4], bf[Cfg::kNTiles][2];
#pragma unroll
        for (int i = 0; i < Cfg::kMTiles; ++i) ldmatrix_x4_trans(af[i], sa + ks * 16 * Cfg::kRowBytesA + i * 32);
#pragma unroll
        for (int j = 0; j < Cfg::kNTiles; j += 2) {
          uint32_t q[4];
          ldmatrix_x4_trans(q, sb + ks * 16 * Cfg::kRowBytesB + j * 16);
          bf[j][0] = q[0], bf[j][1] = q[1], bf[j + 1][0] = q[2], bf[j + 1][1] = q[3];
        }
#pragma unroll
        for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kNTiles; ++j) WarpMma<T>::run(acc[i][j], af[i], bf[j]);
      }
    }
  }
  cp_async_wait<0>();

  // Each pair of accumulators (row, col), (row, col + 1) of the warp's tile, rows and columns from the
  // block's first filter and column.
  auto each_pair = [&](auto&& emit) {
    if constexpr (kTf32) {
      Tf32::each_pair(acc, wm, wn, lane, emit);
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kNTiles; ++j) {
          const int row = wm * Cfg::kWarpM + i * 16 + lane / 4, col = wn * Cfg::kWarpN + j * 8 + (lane % 4) * 2;
          emit(row, col, acc[i][j][0], acc[i][j][1]);
          emit(row + 8, col, acc[i][j][2], acc[i][j][3]);
        }
    }
  };
  if (a.blocks_write_gw) {
    // The blocks write gw: staged, then a quad of columns a thread along gw's rows (a fragment's own
    // pairs would be 8-byte pieces of 8 rows).
    tc_weight_grad_blocks_finish<T, Cfg>(a, blk, smem, [&](float* sums, int ld) {
      each_pair([&](int row, int col, float v0, float v1) {
        *reinterpret_cast<float2*>(sums + row * ld + col) = make_float2(v0, v1);
      });
    });
    return;
  }
  float* out = a.partial + ((int64_t(split) * wg.groups + g) * wg.k_pad + m0) * wg.n_pad + n0;
  each_pair([&](int row, int col, float v0, float v1) {
    *reinterpret_cast<float2*>(out + int64_t(row) * wg.n_pad + col) = make_float2(v0, v1);
  });
}

// The end of grad_weight in a wgmma kernel whose blocks write gw: its warpgroup's accumulators `acc`
// staged at (acc_row, acc_col) of the tile (tc_weight_grad_blocks_finish).
template <typename T, typename Cfg, int kAcc>
__device__ __forceinline__ void tc_weight_grad_wgmma_finish(const TcWeightGradArgs<T>& a, const TcWeightGradBlock& blk,
                                                            unsigned char* smem, const float (&acc)[kAcc],
                                                            int acc_row, int acc_col) {
  tc_weight_grad_blocks_finish<T, Cfg>(a, blk, smem, [&](float* sums, int ld) {
    store_wgmma_accumulators<2 * kAcc>(sums + acc_row * ld + acc_col, ld, acc);
  });
}

// The wgmma tile (sm_90a): kBM filters (64 or 128) x kBN columns (128, 192 or 256), kBK = 64 positions
// per chunk, kWarpGroupsN warpgroups across the columns (one per 64 filters down the rows), kStages
// shared stages. Both operands are stored MN-major, one position per 128-byte row: 64-element blocks
// of kBK swizzled rows (8 KB), A (gy) then B (x gathered).
template <int kBM_, int kBN_, int kWarpGroupsN_, int kStages_, int kMinBlocks_>
struct WgmmaWeightGradConfig {
  static constexpr int kBM = kBM_, kBN = kBN_, kBK = 64, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr bool kClusterSums = true;  // tc_weight_grad_wgmma_finish
  static constexpr bool kWeighClusters = true;  // weight_grad_split_estimate
  static constexpr int kWarpGroupsM = kBM / 64, kWarpGroupsN = kWarpGroupsN_;
  static constexpr int kThreads = 128 * kWarpGroupsM * kWarpGroupsN;
  static constexpr int kWarpGroupN = kBN / kWarpGroupsN;  // columns of one warpgroup's MMA
  static constexpr int kBlockBytes = kBK * 128;           // 64 filters or columns x kBK positions
  static constexpr int kStageBytes = (kBM + kBN) / 64 * kBlockBytes;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 1024;  // + alignment of the tiles
  static_assert(kBM % 64 == 0 && kBN % 64 == 0 && kWarpGroupN % 64 == 0, "whole 64-element blocks");
  static_assert(kStages >= 3, "two chunks besides the one the MMAs read: one in flight, one loading");
};

// grad_weight on wgmma: the reduction over positions is the MMAs' k, so both tiles are read
// MN-major (the transpose modes) straight from the rows the loads copy, one position per row. A's
// rows (gy) are kBM / 8 words of one position's filters, copied with a row per kWordsA threads' words;
// B's (x) are gathered, and each thread keeps one row of the chunk so that its position is decoded
// once per chunk. The copies' address arithmetic runs in every thread beside the MMAs of a loop that
// is latency-bound, so what can be is fixed before it: a thread's A rows lie a constant step apart
// in gy and its chunks another, its B words (fixed taps and channels) are offsets from the position's
// input pixel and two bounds tests each, and their shared-memory places are a register and immediates.
// kPlanes: x and gy are NCHW planes of a 1x1 layer of stride 1 without padding, planes of whole
// 8-byte half-words (tc_weight_grad_reads_planes). There a filter's gy and a channel's x each run along
// the positions, the K-major order: each tile row is one filter (A) or channel (B), 128 bytes of the
// chunk's 64 positions, swizzled, and the MMAs read both tiles K-major (Wgmma). A thread copies one
// 16-byte word of positions of rows a fixed step apart -- one copy where planes are whole words (a
// word then never crosses images), else two of 4 positions, each half in one image -- decoding its
// word's (halves') image once a chunk.
// kTensorCopies: where a group's channels are whole 64-channel blocks, both tiles come by tensor
// copies that thread 0 issues and the stage's mbarrier counts, no thread's gather: A's 64-filter
// blocks from a.gy_map (the chunk's 64 positions, 128-byte rows of filters: the gathered rows' layout),
// B's 64-column blocks from a.x_map, each block one tap's 64 channels, the 64 positions' pixels at the
// tap's offset -- the im2col copy of the forward's A. Past the tensor the copies are zeros: positions
// past the last (the last split's chunk), and a column block past the layer's columns is asked for at
// channel C, so that it is zeros too. The splits start on whole chunks (positions_per_split), so a
// chunk never reads the next split's positions.
template <typename T, typename Cfg, bool kPlanes = false, bool kTensorCopies = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    tc_weight_grad_wgmma_kernel(const __grid_constant__ TcWeightGradArgs<T> a) {
  static_assert(!(kPlanes && kTensorCopies), "NCHW planes or NHWC tensor copies");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ uint64_t landed[kTensorCopies ? Cfg::kStages : 1];  // a stage's tensor copies arrived
  unsigned char* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  constexpr int kWordsA = Cfg::kBM / 8, kThreadsPerRow = Cfg::kThreads / Cfg::kBK;
  constexpr int kARows = Cfg::kBK * kWordsA / Cfg::kThreads, kARowStep = Cfg::kThreads / kWordsA;
  constexpr int kBWords = Cfg::kBN / 8 / kThreadsPerRow;
  // A thread's B words w0 + j kThreadsPerRow take kPlaces places in a 64-element block, the same in each.
  constexpr int kPlaces = 8 / kThreadsPerRow;
  static_assert(Cfg::kThreads % kWordsA == 0 && kARows >= 1 && kBWords >= 1 && Cfg::kThreads % Cfg::kBK == 0,
                "each pass copies whole rows");
  static_assert(kARowStep % 8 == 0 && 8 % kThreadsPerRow == 0 && kBWords % kPlaces == 0,
                "rows a swizzle period apart, words a fixed set of places in each block");
  const TcWeightGrad& wg = a.wg;
  const int tid = threadIdx.x;

  const TcWeightGradBlock blk(a, Cfg::kBM, Cfg::kBN, Cfg::kBK);
  const int g = blk.g, split = blk.split, m0 = blk.m0, n0 = blk.n0, chunks = blk.chunks;
  const int split_positions = int(blk.p_end - blk.p_begin);

  auto stage_a = [&](int st) { return smem + st * Cfg::kStageBytes; };
  auto stage_b = [&](int st) { return smem + st * Cfg::kStageBytes + Cfg::kBM / 64 * Cfg::kBlockBytes; };
  // Word w (of the tile's row) of row `row`: its 64-element block, then the swizzled row.
  auto place = [](int row, int w) { return (w / 8) * Cfg::kBlockBytes + swizzle128(row, w % 8); };

  // A: word word_a (filters m0 + 8 word_a ..) of rows row_a + i kARowStep; a_rows of the split's
  // positions from row_a on have a word to copy (none where the word's filters are past the group's).
  const int word_a = tid % kWordsA, row_a = tid / kWordsA;
  const int a_rows = m0 + word_a * 8 < wg.Kg ? split_positions - row_a : 0;
  const T* gy_first = a.gy + (blk.p_begin + row_a) * wg.K + int64_t(g) * wg.Kg + m0 + word_a * 8;
  const int64_t gy_chunk_step = int64_t(Cfg::kBK) * wg.K, gy_row_step = int64_t(kARowStep) * wg.K;
  const int a_place = place(row_a, word_a);
  // B: row row_b, words word_b0 + j kThreadsPerRow, each a (tap, 8 channels) column.
  const int row_b = tid / kThreadsPerRow, word_b0 = tid % kThreadsPerRow;
  const WeightGradColumns<kBWords> b_cols(wg, n0 + word_b0 * 8, kThreadsPerRow * 8);
  int b_place[kPlaces];
#pragma unroll
  for (int j = 0; j < kPlaces; ++j) b_place[j] = place(row_b, word_b0 + j * kThreadsPerRow);
  const T* x_group = a.x + int64_t(g) * wg.Cg;
  const int64_t image_elements = int64_t(wg.H) * wg.W * wg.C;

  // kPlanes: word word_p (positions 8 word_p ..) of rows row_p + i kPlaneRowStep of both tiles.
  constexpr int kPlaneRowStep = Cfg::kThreads / 8;
  static_assert(Cfg::kBK == 64 && Cfg::kBM % kPlaneRowStep == 0 && Cfg::kBN % kPlaneRowStep == 0 &&
                    kPlaneRowStep % 8 == 0, "a chunk row is 8 words; whole passes of rows in one swizzle phase");
  const int word_p = tid % 8, row_p = tid / 8;
  const int p_place = swizzle128(row_p, word_p);
  auto fetch_planes = [&](int chunk, int st) {
    const int plane = wg.Ho * wg.Wo;
    // Position p (the first of 8 or 4 inside one image) in the rows of filter m0 + row_p (gy) and
    // channel n0 + row_p (x); false past the split's end (the pointers then unused).
    auto decode = [&](int64_t p, const T*& gy_p, const T*& x_p) {
      int64_t img = 0, q = 0;
      if (p < blk.p_end) {
        if (wg.positions <= INT32_MAX)
          img = wg.plane_div.div(uint32_t(p)), q = p - img * plane;
        else
          img = p / plane, q = p - img * plane;
      }
      gy_p = opaque_pointer(a.gy + (img * wg.K + int64_t(g) * wg.Kg + m0 + row_p) * plane + q);
      x_p = opaque_pointer(a.x + (img * wg.C + int64_t(g) * wg.Cg + n0 + row_p) * plane + q);
      return p < blk.p_end;
    };
    const int64_t p = blk.p_begin + int64_t(chunk) * Cfg::kBK + word_p * 8;
    // This thread's kRows rows of one operand (gy: filters, x: columns), `first` the operand's row
    // at the tile's top and `rows` its rows in all: the word (kWhole) or half-word at `src` (its first
    // row's), `half_offset` bytes into the word's place in `dst`; zero past the rows or the split's end.
    auto copy_rows = [&](auto rows_tag, auto whole_tag, const T* src, const T* base, unsigned char* dst,
                         int first, int rows, bool valid, int half_offset) {
      constexpr int kRows = decltype(rows_tag)::value;
      constexpr bool kWhole = decltype(whole_tag)::value;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const bool ok = valid && first + row_p + i * kPlaneRowStep < rows;
        const T* from = ok ? src + int64_t(plane) * (i * kPlaneRowStep) : base;
        unsigned char* to = dst + i * kPlaneRowStep * 128 + half_offset;
        if constexpr (kWhole)
          cp_async_16_or_zero(to, from, ok);
        else
          cp_async_or_zero(reinterpret_cast<uint2*>(to), reinterpret_cast<const uint2*>(from), ok);
      }
    };
    using RowsA = std::integral_constant<int, Cfg::kBM / kPlaneRowStep>;
    using RowsB = std::integral_constant<int, Cfg::kBN / kPlaneRowStep>;
    unsigned char* a_dst = stage_a(st) + p_place;
    unsigned char* b_dst = stage_b(st) + p_place;
    if (a.plane_words) {
      const T *gy_p, *x_p;
      const bool valid = decode(p, gy_p, x_p);
      copy_rows(RowsA{}, std::true_type{}, gy_p, a.gy, a_dst, m0, wg.Kg, valid, 0);
      copy_rows(RowsB{}, std::true_type{}, x_p, a.x, b_dst, n0, wg.cols, valid, 0);
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the word's halves: bytes 8 h of its 16 in the tile
      const T *gy_p, *x_p;
      const bool valid = decode(p + 4 * h, gy_p, x_p);
      copy_rows(RowsA{}, std::false_type{}, gy_p, a.gy, a_dst, m0, wg.Kg, valid, 8 * h);
      copy_rows(RowsB{}, std::false_type{}, x_p, a.x, b_dst, n0, wg.cols, valid, 8 * h);
    }
  };

  // kTensorCopies: B block j's first channel and tap offsets, fixed for the block.
  constexpr int kBBlocks = Cfg::kBN / 64;
  int copy_c[kBBlocks];
  uint16_t copy_dw[kBBlocks], copy_dh[kBBlocks];
  if constexpr (kTensorCopies) {
#pragma unroll
    for (int j = 0; j < kBBlocks; ++j) {
      const int col = n0 + 64 * j, tap = col / wg.Cg, r = tap / wg.S;
      copy_c[j] = col < wg.cols ? g * wg.Cg + (col - tap * wg.Cg) : wg.C;
      copy_dh[j] = uint16_t(col < wg.cols ? r * wg.dil_h : 0);
      copy_dw[j] = uint16_t(col < wg.cols ? (tap - r * wg.S) * wg.dil_w : 0);
    }
    if (tid == 0) {
#pragma unroll
      for (int st = 0; st < Cfg::kStages; ++st) mbarrier_init(&landed[st], 1);
    }
    __syncthreads();
  }
  auto fetch_copies = [&](int chunk, int st) {
    if (tid != 0) return;
    const int p = int(blk.p_begin) + chunk * Cfg::kBK;  // positions fit 31 bits (encode_weight_grad_maps)
    const TcPosition pos = decode_position(wg, p);
    const int h = pos.oy * wg.stride_h - wg.pad_h, w = pos.ox * wg.stride_w - wg.pad_w;
    uint64_t* bar = &landed[st];
    mbarrier_arrive_expect_tx(bar, (Cfg::kBM / 64 + kBBlocks) * Cfg::kBlockBytes);
#pragma unroll
    for (int i = 0; i < Cfg::kBM / 64; ++i)
      tma_load_2d(stage_a(st) + i * Cfg::kBlockBytes, &a.gy_map, g * wg.Kg + m0 + 64 * i, p, bar);
#pragma unroll
    for (int j = 0; j < kBBlocks; ++j)
      tma_load_im2col(stage_b(st) + j * Cfg::kBlockBytes, &a.x_map, copy_c[j], w, h, pos.img, copy_dw[j], copy_dh[j],
                      bar);
  };

  auto fetch = [&](int chunk, int st) {
    if constexpr (kTensorCopies) {
      fetch_copies(chunk, st);
      return;
    }
    const int r0 = chunk * Cfg::kBK;
    const T* gy_chunk = gy_first + chunk * gy_chunk_step;
    unsigned char* a_dst = stage_a(st) + a_place;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const bool ok = r0 + i * kARowStep < a_rows;
      cp_async_16_or_zero(a_dst + i * kARowStep * 128, ok ? gy_chunk + i * gy_row_step : a.gy, ok);
    }
    int iy0 = -(1 << 29), ix0 = 0;  // with any column's dy: never inside the image
    const T* x_pixel = a.x;
    if (r0 + row_b < split_positions) {
      const TcPosition pos = decode_position(wg, blk.p_begin + r0 + row_b);
      iy0 = pos.oy * wg.stride_h, ix0 = pos.ox * wg.stride_w;
      x_pixel = x_group + pos.img * image_elements + (int64_t(iy0) * wg.W + ix0) * wg.C;
    }
    unsigned char* b_stage = stage_b(st);
#pragma unroll
    for (int j = 0; j < kBWords; ++j) {
      const bool ok = b_cols.inside(wg, iy0, ix0, j);
      cp_async_16_or_zero(b_stage + b_place[j % kPlaces] + j / kPlaces * Cfg::kBlockBytes,
                          ok ? x_pixel + b_cols.offset[j] : a.x, ok);
    }
  };

  const int group = tid / 128;
  const int group_m = group % Cfg::kWarpGroupsM, group_n = group / Cfg::kWarpGroupsM;
  float acc[Cfg::kWarpGroupN / 2];
#pragma unroll
  for (int i = 0; i < Cfg::kWarpGroupN / 2; ++i) acc[i] = 0.f;

  // The forward wgmma kernel's pipeline: kStages - 2 chunks load ahead, one chunk's MMAs in flight.
#pragma unroll
  for (int st = 0; st < Cfg::kStages - 2; ++st) {
    if (st < chunks) {
      if constexpr (kPlanes) fetch_planes(st, st);
      else fetch(st, st);
    }
    cp_async_commit();
  }
  for (int i = 0; i < chunks; ++i) {
    cp_async_wait<Cfg::kStages - 3>();
    fence_proxy_async_shared();
    __syncthreads();
    const int next = i + Cfg::kStages - 2;
    if (next < chunks) {
      if constexpr (kPlanes) fetch_planes(next, next % Cfg::kStages);
      else fetch(next, next % Cfg::kStages);
    }
    cp_async_commit();
    const int st = i % Cfg::kStages;
    if constexpr (kTensorCopies) mbarrier_wait(&landed[st], (i / Cfg::kStages) & 1);
    if constexpr (kPlanes) {
      // Both tiles K-major: a k-step is 16 positions, 32 bytes on in every row.
      const unsigned sa = smem_address(stage_a(st) + group_m * 64 * 128);
      const unsigned sb = smem_address(stage_b(st) + group_n * Cfg::kWarpGroupN * 128);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < Cfg::kBK / 16; ++ks)
        Wgmma<T, Cfg::kWarpGroupN>::run(acc, wgmma_descriptor(sa + ks * 32), wgmma_descriptor(sb + ks * 32), 1);
      wgmma_commit();
      wgmma_wait<1>();
      continue;
    }
    const uint64_t da = wgmma_descriptor_mn_major(smem_address(stage_a(st) + group_m * Cfg::kBlockBytes),
                                                  Cfg::kBlockBytes);
    const uint64_t db = wgmma_descriptor_mn_major(
        smem_address(stage_b(st) + group_n * (Cfg::kWarpGroupN / 64) * Cfg::kBlockBytes), Cfg::kBlockBytes);
    wgmma_fence();
    // k-step ks: 16 positions (2 KB) further on in both tiles.
#pragma unroll
    for (int ks = 0; ks < Cfg::kBK / 16; ++ks)
      WgmmaMnMajor<T, Cfg::kWarpGroupN>::run(acc, wgmma_descriptor_advance(da, ks * 128),
                                             wgmma_descriptor_advance(db, ks * 128), 1);
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  cp_async_wait<0>();

  if (a.blocks_write_gw)
    return tc_weight_grad_wgmma_finish<T, Cfg>(a, blk, smem, acc, group_m * 64, group_n * Cfg::kWarpGroupN);
  // The FP32 sums straight from the accumulators.
  store_wgmma_accumulators<Cfg::kWarpGroupN>(
      a.partial + ((int64_t(split) * wg.groups + g) * wg.k_pad + m0 + group_m * 64) * wg.n_pad + n0 +
          group_n * Cfg::kWarpGroupN,
      wg.n_pad, acc);
}

// TF32 grad_weight of NCHW float32 tensors on wgmma (sm_90a). In NCHW both operands already run
// along the positions -- a filter's grad_output plane, a (tap, channel) column's shifted input plane
// -- which is the K-major order wgmma reads TF32 operands in, so the tiles are gathered from the planes
// as they are, with no channels_last copies: kBK = 32 positions a chunk, one 128-byte swizzled row per
// filter (A) or column (B). Lane l of every warp holds position l of the chunk, decoded once per
// chunk, and loads it for the warp's rows (warp + kWarps j): a row's 32 loads are 32 neighbouring
// positions (coalesced where they are neighbours in the plane) and its stores one 128-byte row
// (conflict-free). The loads go through registers, where each value is rounded to TF32 before it is
// stored (wgmma reads float32 words truncated); the loads of chunk i + 2 are in flight while the
// MMAs of chunks i and i - 1 run. Columns decode through a table of (offset, dy, dx) the block builds
// once. kWarpGroups warpgroups of 64 filters x kBN columns (64 where a layer has no more: 1x1 layers
// of few channels, whose 128-column tiles were half padding).
template <int kBM_, int kMinBlocks_, int kBN_ = 128>
struct WgmmaNchwWeightGradConfig {
  static constexpr int kBM = kBM_, kBN = kBN_, kBK = 32, kStages = 3, kMinBlocks = kMinBlocks_;
  static constexpr bool kClusterSums = true;  // tc_weight_grad_wgmma_finish
  // The split estimate keeps the rule's count (a sweep of TF32 from NCHW planes found it the fastest
  // or within 3% of the counts 1-16; docs/precision.md).
  static constexpr bool kWeighClusters = false;
  static constexpr int kWarpGroups = kBM / 64, kThreads = 128 * kWarpGroups, kWarps = kThreads / 32;
  static constexpr int kRowsA = kBM / kWarps, kRowsB = kBN / kWarps;  // rows a warp loads per chunk
  static constexpr int kTileBytesA = kBM * 128, kStageBytes = (kBM + kBN) * 128;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + kBN * sizeof(int4) + 1024;
  static_assert(kBM % 64 == 0 && kBK * 4 == 128, "one 128-byte row per filter or column");
};

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    tc_weight_grad_nchw_tf32_kernel(const __grid_constant__ TcWeightGradArgs<float> a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  int4* columns = reinterpret_cast<int4*>(smem + Cfg::kStages * Cfg::kStageBytes);
  const TcWeightGrad& wg = a.wg;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const TcWeightGradBlock blk(a, Cfg::kBM, Cfg::kBN, Cfg::kBK);
  const int g = blk.g, m0 = blk.m0, n0 = blk.n0, chunks = blk.chunks;
  const int plane = wg.Ho * wg.Wo, in_plane = wg.H * wg.W;

  // Column n0 + i: (offset of its channel's plane and tap from the position's input pixel, dy, dx);
  // columns past the layer's never fall inside the image.
  if (tid < Cfg::kBN) {
    const int n = n0 + tid;
    int4 e = make_int4(0, -(1 << 29), 0, 0);
    if (n < wg.cols) {
      const int tap = n / wg.Cg, c = n - tap * wg.Cg, r = tap / wg.S, s = tap - r * wg.S;
      const int dy = r * wg.dil_h - wg.pad_h, dx = s * wg.dil_w - wg.pad_w;
      e = make_int4((g * wg.Cg + c) * in_plane + dy * wg.W + dx, dy, dx, 0);
    }
    columns[tid] = e;
  }
  __syncthreads();

  // This thread's filters: m0 + warp + kWarps j for j below a_rows (those below Kg).
  const int a_row0 = m0 + warp;
  const int a_rows = a_row0 < wg.Kg ? (wg.Kg - a_row0 + Cfg::kWarps - 1) / Cfg::kWarps : 0;
  const float* gy_rows = a.gy + int64_t(g * wg.Kg + a_row0) * plane;
  const int64_t image_gy = int64_t(wg.K) * plane, image_x = int64_t(wg.C) * in_plane;

  // The loads' addresses run in every thread beside the MMAs, so each is one multiply-add from a
  // pointer of the chunk's position (opaque_pointer: not re-associated into a 64-bit sum per row): a
  // filter's row a multiple of the plane from gy_p, a column's element its table offset from x_p.
  // Positions in 32 bits (tc_weight_grad_reads_nchw bounds N Ho Wo below 2^31), unsigned so that a
  // last chunk's lanes past the end cannot wrap.
  const uint32_t p_lane = uint32_t(blk.p_begin) + lane, p_end = uint32_t(blk.p_end);
  float ra[Cfg::kRowsA], rb[Cfg::kRowsB];
  auto load = [&](int chunk) {
    const uint32_t p = p_lane + uint32_t(chunk * Cfg::kBK);
    const bool pos_ok = p < p_end;
    int img = 0, q = 0, oy = 0, ox = 0;
    if (pos_ok) {
      img = int(wg.plane_div.div(p)), q = int(p) - img * plane;
      oy = int(wg.wo_div.div(uint32_t(q))), ox = q - oy * wg.Wo;
    }
    const float* gy_p = opaque_pointer(gy_rows + img * image_gy + q);
    const int a_loaded = pos_ok ? a_rows : 0;
#pragma unroll
    for (int j = 0; j < Cfg::kRowsA; ++j)
      ra[j] = j < a_loaded ? __ldg(gy_p + int64_t(plane) * (j * Cfg::kWarps)) : 0.f;
    const int iy0 = pos_ok ? oy * wg.stride_h : -(1 << 29), ix0 = ox * wg.stride_w;
    const float* x_p = opaque_pointer(a.x + img * image_x + (pos_ok ? iy0 * wg.W + ix0 : 0));
#pragma unroll
    for (int j = 0; j < Cfg::kRowsB; ++j) {
      const int4 e = columns[warp + j * Cfg::kWarps];
      const bool ok = unsigned(iy0 + e.y) < unsigned(wg.H) && unsigned(ix0 + e.z) < unsigned(wg.W);
      rb[j] = ok ? __ldg(x_p + e.x) : 0.f;
    }
  };
  auto tile_a = [&](int st) { return smem + st * Cfg::kStageBytes; };
  auto tile_b = [&](int st) { return smem + st * Cfg::kStageBytes + Cfg::kTileBytesA; };
  // Element lane % 4 of word lane / 4 of row warp + kWarps j, swizzled: the rows' swizzle phases
  // (row % 8) repeat every kPhases rows of the thread, so each place is one of kPhases registers plus
  // an immediate.
  constexpr int kPhases = Cfg::kWarps % 8 == 0 ? 1 : 8 / Cfg::kWarps;
  static_assert(Cfg::kWarps % 8 == 0 || 8 % Cfg::kWarps == 0, "the rows' swizzle phases repeat");
  int places[kPhases];
#pragma unroll
  for (int ph = 0; ph < kPhases; ++ph) places[ph] = swizzle128(warp + ph * Cfg::kWarps, lane / 4) + (lane % 4) * 4;
  auto place = [&](int j) { return places[j % kPhases] + (j - j % kPhases) * Cfg::kWarps * 128; };
  auto store = [&](int st) {
    unsigned char* a_tile = tile_a(st);
    unsigned char* b_tile = tile_b(st);
#pragma unroll
    for (int j = 0; j < Cfg::kRowsA; ++j)
      *reinterpret_cast<uint32_t*>(a_tile + place(j)) = tf32_bits_for_mma(ra[j]);
#pragma unroll
    for (int j = 0; j < Cfg::kRowsB; ++j)
      *reinterpret_cast<uint32_t*>(b_tile + place(j)) = tf32_bits_for_mma(rb[j]);
  };

  const int group = warp / 4;
  // The first chunk's first MMA scales the accumulators by zero (no zeroing instructions: registers the
  // wgmma pipeline holds, defined by other instructions, would make ptxas serialize every wgmma). Every
  // split holds at least one chunk.
  float acc[Cfg::kBN / 2];
  if (chunks > 0) {
    load(0);
    store(0);
  }
  if (chunks > 1) load(1);
  for (int i = 0; i < chunks; ++i) {
    // Stage i % 3 stored (by every thread, through the generic proxy) and stage (i + 1) % 3 free:
    // its last reader, chunk i - 2's MMAs, was waited for by every warpgroup before this barrier.
    fence_proxy_async_shared();
    __syncthreads();
    const int st = i % Cfg::kStages;
    const uint64_t da = wgmma_descriptor(smem_address(tile_a(st) + group * 64 * 128));
    const uint64_t db = wgmma_descriptor(smem_address(tile_b(st)));
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Cfg::kBK / 8; ++ks)
      Wgmma<float, Cfg::kBN>::run(acc, wgmma_descriptor_advance(da, 2 * ks), wgmma_descriptor_advance(db, 2 * ks),
                             i > 0 || ks > 0);
    wgmma_commit();
    if (i + 1 < chunks) store((i + 1) % Cfg::kStages);
    if (i + 2 < chunks) load(i + 2);
    wgmma_wait<1>();
  }
  wgmma_wait<0>();

  if (a.blocks_write_gw) return tc_weight_grad_wgmma_finish<float, Cfg>(a, blk, smem, acc, group * 64, 0);
  store_wgmma_accumulators<Cfg::kBN>(
      a.partial + ((int64_t(blk.split) * wg.groups + g) * wg.k_pad + m0 + group * 64) * wg.n_pad + n0, wg.n_pad, acc);
}

// gw[g * Kg + k][c][r][s] (through its strides: either memory format) = the sum over splits of the
// partial sums of column (r * S + s) * Cg + c. A warp takes 32 consecutive elements; with
// kWarpsPerElement > 1 that many warps share them, warp j summing splits j, j + kWarpsPerElement, ...
// in order, and their sums join in warp order. One warp an element keeps the splits' own order. The
// shared form serves reductions of many splits over few elements (1x1 layers of few channels at
// large batch), where one thread's serial run of loads would set the kernel's time.
constexpr int kFinishThreads = 256;
template <typename T, int kWarpsPerElement>
__global__ void __launch_bounds__(kFinishThreads)
    tc_weight_grad_finish_kernel(const float* __restrict__ partial, T* __restrict__ gw, TcWeightGrad wg, int splits,
                                 WeightStrides gw_strides, int gw_channels) {
  constexpr int kWarps = kFinishThreads / 32, kRuns = kWarps / kWarpsPerElement;
  static_assert(kRuns * kWarpsPerElement == kWarps, "warps per element divide the block's");
  grid_dependency_wait();  // the splits' sums, from the kernel before (a programmatic dependent of it)
  __shared__ float sums[kWarpsPerElement > 1 ? kWarps : 1][32];
  const int64_t total = int64_t(wg.K) * wg.cols;
  const int64_t split_stride = int64_t(wg.groups) * wg.k_pad * wg.n_pad;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int run = warp / kWarpsPerElement, part = warp % kWarpsPerElement;
  const int64_t runs = ceil_div(total, int64_t(32));
  for (int64_t first = blockIdx.x * int64_t(kRuns); first < runs; first += int64_t(gridDim.x) * kRuns) {
    const int64_t e = (first + run) * 32 + lane;
    const bool ok = e < total;
    int col = 0, k = 0;
    float sum = 0.f;
    if (ok) {
      // The finish's pace is its instructions a run of 32 elements: 64-bit and 32-bit divisions
      // here took several times the loads' and stores' issue.
      if (total <= INT32_MAX)
        k = int(wg.cols_div.div(uint32_t(e))), col = int(e) - k * wg.cols;
      else
        col = int(e % wg.cols), k = int(e / wg.cols);
      const int g = int(wg.kg_div.div(uint32_t(k))), kk = k - g * wg.Kg;
      const float* src = partial + (int64_t(g) * wg.k_pad + kk) * wg.n_pad + col;
      // Unrolled so that several splits' loads are in flight; the sum's order stays the splits'.
#pragma unroll 8
      for (int i = part; i < splits; i += kWarpsPerElement) sum += src[i * split_stride];
    }
    if constexpr (kWarpsPerElement > 1) {
      sums[warp][lane] = sum;
      __syncthreads();
      if (part == 0) {
        sum = 0.f;
#pragma unroll
        for (int j = 0; j < kWarpsPerElement; ++j) sum += sums[warp + j][lane];
      }
      __syncthreads();
    }
    if (ok && part == 0) store_weight_grad_element(gw, gw_strides, gw_channels, wg, k, col, sum);
  }
}

}  // namespace cuda
}  // namespace torchconv
