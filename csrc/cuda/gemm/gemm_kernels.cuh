// Gemm on the GPU, device side: the tile configs, the launch descriptor (GatherConv), the tile loaders and the kernels: implicit and explicit GEMM, unroll, filter matrix, grad_weight and its slice sum.
// Included by gemm.cu, which holds the host side (launch, rule, limits, operators).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <type_traits>

#include "../../conv_shape.h"
#include "../../variant.h"
#include "../../weight_cache.h"
#include "../../workspace.h"
#include "../common/filter_relayout.cuh"
#include "../common/launch_map.cuh"
#include "../common/slice_sum.cuh"
#include "../common/tile_gemm.cuh"

namespace torchconv {
namespace cuda {
namespace {

// Tile configs (filters x columns per block, reduction steps per chunk, thread tile, blocks/SM).
// float, 16 reduction steps per chunk (8 measured 3-7% slower on every layer of the N = 32 suite:
// twice the barriers, waits and tap decodes per multiply-add):
//   large  128 x 128, 256 threads;
//   medium 64 x 128, 128 threads: groups with <= 64 filters, or too few large blocks to fill the GPU;
//   small  64 x 64, 64 threads: small grids (late layers, batch 1);
//   narrow 16 x 128, 4 x 4 per thread, 128 threads: <= 16 rows per group (grad_input of an RGB stem
//          has 3), where a 64-row tile would be 95% padding. Chunk sums (two-level summation):
//          such launches have long reductions onto few outputs (an RGB stem's grad_input sums
//          filters x taps per pixel), and the 16 extra registers are cheap at this thread tile.
using GemmLargeF32 = GemmTileConfig<1, 128, 128, 16, 8, 8, 2>;
using GemmMediumF32 = GemmTileConfig<1, 64, 128, 16, 8, 8, 4>;
using GemmSmallF32 = GemmTileConfig<1, 64, 64, 16, 8, 8, 6>;
using GemmNarrowF32 = GemmTileConfig<1, 16, 128, 16, 4, 4, 4, true>;
// grad_weight (rows = filters, columns = C/groups x R x S, reduction over N x Ho x Wo; the
// reduction is split across blocks, so a tile's size sets its padding, not the grid's parallelism):
//   large  128 x 128, 16 steps per chunk (each thread: 2 column cursors x 4 packed taps);
//   medium 64 x 128;
//   small  64 x 64 with 8 steps;
//   tall   128 x 32, 8 x 4 per thread: many filters on few taps (MobileNet's 24 -> 72 1x1);
//   wide   32 x 128, 4 x 8 per thread: few filters on many taps (144 -> 24).
// weight_grad_config (gemm.cu) picks by padded area.
using GemmWeightGradLargeF32 = GemmTileConfig<1, 128, 128, 16, 8, 8, 2>;
using GemmWeightGradMediumF32 = GemmTileConfig<1, 64, 128, 16, 8, 8, 3>;
using GemmWeightGradSmallF32 = GemmTileConfig<1, 64, 64, 8, 8, 8, 4>;
using GemmWeightGradTallF32 = GemmTileConfig<1, 128, 32, 16, 8, 4, 4>;
using GemmWeightGradWideF32 = GemmTileConfig<1, 32, 128, 16, 4, 8, 4>;
// double: 64 x 64, 4 x 4 per thread, 256 threads.
using GemmF64 = GemmTileConfig<1, 64, 64, 8, 4, 4, 2>;
// The weight matrix is padded for the widest filter tile and the reduction chunk, so that every
// config reads the same cached matrix.
constexpr int kWeightRowPad = 128;
constexpr int kReductionPad = 16;  // the deepest chunk

// The GEMM's view of a launch (common/launch_map.cuh): the columns are the map's positions over N
// images, the reduction runs over its reduced channels x taps, the rows are its destination
// channels. Forward and grad_weight use the forward map; grad_input one map per output phase (a
// stride-1 layer has one), whose taps step backwards through grad_output.
struct GatherConv : LaunchMap {
  bool dense_out;  // the columns are the output plane itself (out_s = 1, out_o = 0): vector stores
  int phase;       // grad_input phase index (iy mod s) * s + (ix mod s), -1 otherwise (its cached A is named by its taps)
  int channels;    // gathered channels per group (the reduction runs over channels x R x S)
  int outputs;     // GEMM rows per group (filters; grad_input: input channels)
  int reduction;   // channels * R * S
  int64_t src_plane, col_plane, out_plane, columns;
};

// Filter tap (r, s) and channel c of reduction index rho, with compile-time R, S where given (0: runtime).
template <int kR, int kS>
struct Tap {
  int c, r, s;
  Tap() = default;
  __device__ __forceinline__ Tap(const GatherConv& cv, int rho) {
    const int R = kR ? kR : cv.R, S = kS ? kS : cv.S;
    c = rho / (R * S);
    const int rs = rho - c * R * S;
    r = rs / S;
    s = rs - r * S;
  }
  __device__ __forceinline__ void next(const GatherConv& cv) {
    const int R = kR ? kR : cv.R, S = kS ? kS : cv.S;
    if (++s == S) {
      s = 0;
      if (++r == R) r = 0, ++c;
    }
  }
};

// A column decoded once: its image's offset in the source tensor (group's first channel) and the
// source position of its tap (0, 0). Column indices and offsets within one channel's plane fit 32
// bits (the plan's limits); offsets across channels and images are 64-bit.
struct Column {
  int64_t base;
  int y0, x0;
  bool valid;
};
__device__ __forceinline__ Column decode_column(const GatherConv& cv, int j, int g) {
  Column col;
  col.valid = j < cv.columns;
  if (!col.valid) j = 0;
  const int plane = int(cv.col_plane);
  const int n = j / plane, q = j - n * plane;
  const int y = q / cv.col_W, x = q - y * cv.col_W;
  col.base = (int64_t(n) * cv.src_C + int64_t(g) * cv.channels) * cv.src_plane;
  col.y0 = y * cv.col_sy + cv.col_oy, col.x0 = x * cv.col_sx + cv.col_ox;
  return col;
}

// Offset in the source of X^[rho][column] (rho decoded into `t`), or -1 where it is zero padding.
template <int kR, int kS>
__device__ __forceinline__ int64_t gather_offset(const GatherConv& cv, const Column& col, const Tap<kR, kS>& t) {
  const int iy = col.y0 + t.r * cv.tap_sy, ix = col.x0 + t.s * cv.tap_sx;
  if (!col.valid || t.c >= cv.channels || iy < 0 || iy >= cv.src_H || ix < 0 || ix >= cv.src_W) return -1;
  return col.base + int64_t(t.c) * cv.src_plane + int64_t(iy) * cv.src_W + ix;
}

// B operand, implicit, any number of taps (more than the tap mask's 32). Each thread owns one column
// of the tile (decoded once) and kRowsPerThread consecutive reduction steps of each chunk. Lanes run
// along columns: neighbouring output positions.
template <typename T, typename Cfg>
struct GatherTileLoader {
  static constexpr int kRowsPerThread = Cfg::kK * Cfg::kN / Cfg::kThreads;
  static_assert(kRowsPerThread >= 1 && Cfg::kK * Cfg::kN % Cfg::kThreads == 0, "whole rows per thread");
  const T* src;
  const GatherConv& cv;  // the kernel parameter: its fields stay constants
  Column col;
  int tile_col, row0;

  __device__ GatherTileLoader(const T* src_, const GatherConv& cv_, int g, int col0) : src(src_), cv(cv_) {
    tile_col = threadIdx.x % Cfg::kN;
    row0 = threadIdx.x / Cfg::kN * kRowsPerThread;
    col = decode_column(cv, col0 + tile_col, g);
  }
  __device__ void fetch(int chunk, T* tile) {
    Tap<0, 0> t(cv, chunk * Cfg::kK + row0);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int64_t off = gather_offset(cv, col, t);
      cp_async_or_zero(tile + (row0 + i) * Cfg::kLdB + tile_col, off >= 0 ? src + off : src, off >= 0);
      if (i + 1 < kRowsPerThread) t.next(cv);
    }
  }
  __device__ void store(T*) {}
};

// B operand, implicit, at most 32 taps (compile-time 1x1 or 3x3, or runtime with kR = kS = 0). A
// thread decodes its column once into a pointer and a bit mask of the taps that land inside the
// source (CUTLASS's "optimized" iterator idea); per element it is then a mask test, a channel bound
// and an add.
template <typename T, typename Cfg, int kR, int kS>
struct TapMaskTileLoader {
  static constexpr int kMaxTaps = 32;
  static_assert(kR * kS <= kMaxTaps, "the tap mask is 32 bits");
  static constexpr int kRowsPerThread = Cfg::kK * Cfg::kN / Cfg::kThreads;
  static_assert(kRowsPerThread >= 1 && Cfg::kK * Cfg::kN % Cfg::kThreads == 0, "whole rows per thread");
  const T* src;      // a valid address (the zero-fill source)
  const T* origin;   // this column's tap (0, 0) in the group's channel 0 (may lie outside the image)
  const GatherConv& cv;
  unsigned mask;     // bit r * kS + s: tap (r, s) lands inside the source; 0 for a column past the end
  int tap_dy, tap_dx;  // offset of one filter row / column step
  int tile_col, row0;

  __device__ TapMaskTileLoader(const T* src_, const GatherConv& cv_, int g, int col0) : src(src_), cv(cv_) {
    tile_col = threadIdx.x % Cfg::kN;
    row0 = threadIdx.x / Cfg::kN * kRowsPerThread;
    const Column col = decode_column(cv, col0 + tile_col, g);
    const int R = kR ? kR : cv.R, S = kS ? kS : cv.S;
    tap_dy = cv.tap_sy * cv.src_W, tap_dx = cv.tap_sx;
    unsigned rows = 0, cols = 0;
#pragma unroll
    for (int r = 0; r < (kR ? kR : kMaxTaps); ++r) {
      if (!kR && r >= R) break;
      const int iy = col.y0 + r * cv.tap_sy;
      rows |= unsigned(iy >= 0 && iy < cv.src_H) << r;
    }
#pragma unroll
    for (int s = 0; s < (kS ? kS : kMaxTaps); ++s) {
      if (!kS && s >= S) break;
      const int ix = col.x0 + s * cv.tap_sx;
      cols |= unsigned(ix >= 0 && ix < cv.src_W) << s;
    }
    mask = 0;
    for (int r = 0; r < R; ++r)
      for (int s = 0; s < S; ++s) mask |= ((rows >> r) & (cols >> s) & 1u) << (r * S + s);
    if (!col.valid) mask = 0;
    origin = src + col.base + (int64_t(col.y0) * cv.src_W + col.x0);
  }
  __device__ void fetch(int chunk, T* tile) {
    const int R = kR ? kR : cv.R, S = kS ? kS : cv.S, taps = R * S;
    const int rho0 = chunk * Cfg::kK + row0;
    int c = rho0 / taps, rs = rho0 - c * taps;
    int r = rs / S, s = rs - r * S;
    // The channel's plane is addressed in 64 bits (an image may hold 2^31 elements or more); a
    // tap's offset inside the plane fits 32.
    const T* plane = origin + int64_t(c) * cv.src_plane;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const bool ok = ((mask >> rs) & 1u) && c < cv.channels;
      const T* p = plane + (r * tap_dy + s * tap_dx);
      cp_async_or_zero(tile + (row0 + i) * Cfg::kLdB + tile_col, ok ? p : src, ok);
      if (i + 1 < kRowsPerThread) {
        ++rs;
        if (++s == S) {
          s = 0;
          if (++r == R) r = 0, rs = 0, ++c, plane += cv.src_plane;
        }
      }
    }
  }
  __device__ void store(T*) {}
};

// B operand of a 1x1, stride-1, unpadded layer: X^ is the input itself, [c][n, q]. Each thread copies
// 16-byte words (kPerWord consecutive positions of one image: the host checks that H*W is a multiple
// of kPerWord and the input is 16-byte aligned).
template <typename T, typename Cfg>
struct PointwiseTileLoader {
  static constexpr int kPerWord = 16 / sizeof(T);
  static constexpr int kWordsPerRow = Cfg::kN / kPerWord;
  static constexpr int kRowsPerPass = Cfg::kThreads / kWordsPerRow;
  static_assert(Cfg::kThreads % kWordsPerRow == 0 && Cfg::kK % kRowsPerPass == 0, "whole rows per pass");
  const T* src;
  const GatherConv& cv;
  const T* word;  // this thread's word in channel 0 of the group, or nullptr past the last column
  int word_col, row0;

  __device__ PointwiseTileLoader(const T* src_, const GatherConv& cv_, int g, int col0) : src(src_), cv(cv_) {
    word_col = threadIdx.x % kWordsPerRow * kPerWord;
    row0 = threadIdx.x / kWordsPerRow;
    const int64_t j = col0 + word_col;
    if (j < cv.columns) {
      const int64_t n = j / cv.col_plane, q = j - n * cv.col_plane;
      word = src + (n * cv.src_C + int64_t(g) * cv.channels) * cv.src_plane + q;
    } else {
      word = nullptr;
    }
  }
  __device__ void fetch(int chunk, T* tile) {
#pragma unroll
    for (int pass = 0; pass < Cfg::kK / kRowsPerPass; ++pass) {
      const int row = row0 + pass * kRowsPerPass;
      const int c = chunk * Cfg::kK + row;
      T* dst = tile + row * Cfg::kLdB + word_col;
      if (word != nullptr && c < cv.channels) {
        cp_async_16(dst, word + int64_t(c) * cv.src_plane);
      } else {
#pragma unroll
        for (int v = 0; v < kPerWord; ++v) dst[v] = T(0);
      }
    }
  }
  __device__ void store(T*) {}
};

// A operand read straight from the K x C/groups x R x S weight, for a weight whose re-laid matrix
// would be rebuilt on every call (a trained one: weight_cache.h), which would cost a kernel and an
// allocation per forward and per grad_input. Element (rho, m) of a group's A is
//   forward:                   w[g * outputs + m][rho]        (m_stride = reduction, rho_stride = 1)
//   grad_input of a 1x1 layer: w[g * reduction + rho][m]      (m_stride = 1, rho_stride = outputs)
// zero past the reduction and the rows. One element per copy, lanes along whichever index is
// contiguous in the weight; the weight is small and stays in L2 for the whole grid.
template <typename T, typename Cfg>
struct WeightTileLoader {
  static constexpr int kPerThread = Cfg::kK * Cfg::kM / Cfg::kThreads;
  static_assert(kPerThread >= 1 && Cfg::kK * Cfg::kM % Cfg::kThreads == 0 && Cfg::kThreads % Cfg::kM == 0 &&
                    Cfg::kThreads % Cfg::kK == 0,
                "whole elements per thread, a fixed step apart");
  const T* w;  // the group's first weight
  int outputs, reduction, m_stride, rho_stride, m0;

  __device__ void fetch(int chunk, T* tile) const {
    // A thread's elements lie on one line of the tile, a fixed step apart: walked with running
    // indices, so few registers stay live beside the mainloop's accumulators.
    const bool m_fastest = m_stride == 1;
    const int tid = int(threadIdx.x);
    const int kk = m_fastest ? tid / Cfg::kM : tid % Cfg::kK, m = m_fastest ? tid % Cfg::kM : tid / Cfg::kK;
    const int step_kk = m_fastest ? Cfg::kThreads / Cfg::kM : 0, step_m = m_fastest ? 0 : Cfg::kThreads / Cfg::kK;
    int rho = chunk * Cfg::kK + kk, row = m0 + m;
    const T* src = w + (row * m_stride + rho * rho_stride);
    const int step_src = step_kk * rho_stride + step_m * m_stride;
    T* dst = tile + kk * Cfg::kLdA + m;
    const int step_dst = step_kk * Cfg::kLdA + step_m;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const bool ok = rho < reduction && row < outputs;
      cp_async_or_zero(dst, ok ? src : w, ok);
      rho += step_kk, row += step_m, src += step_src, dst += step_dst;
    }
  }
  __device__ void store(T*) const {}
};

template <typename T>
struct GemmConvArgs {
  const T* src;   // gathered tensor (implicit) or the unrolled chunk [group][reduction_pad][cols_pad] (explicit)
  const T* a;     // weight matrix [group][reduction_pad][kWeightRowPad-padded rows], or the weight itself
                  // (kernels with kWeightA: WeightTileLoader, strides below)
  int a_m_stride, a_rho_stride;
  const T* bias;  // or nullptr
  T* out;
  GatherConv cv;
  int reduction_pad, rows_pad;
  int m_tiles, n_tiles;
  int64_t col_begin;  // first column of this launch (explicit chunks)
  int64_t cols_pad;   // explicit: row length of the unrolled chunk
  // Split reduction (small grids): split s sums reduction chunks [s * chunks_per_split, ...) into
  // partial + s * out_numel (no bias); the last split of a tile to finish (counted in
  // tile_counters) adds the slices in order and the bias.
  int splits, chunks_per_split;
  T* partial;
  int64_t out_numel;
  int* tile_counters;
};

// Where the run of kRun columns from column j0 lands: the offset of its image in the output and
// of each column in that image's output plane (clamped to the last column past the end).
template <int kRun>
__device__ __forceinline__ void output_run(const GatherConv& cv, int j0, int64_t (&image)[kRun], int (&pos)[kRun]) {
  const int plane = int(cv.col_plane);
#pragma unroll
  for (int v = 0; v < kRun; ++v) {
    const int j = min(j0 + v, int(cv.columns) - 1);
    const int n = j / plane, q = j - n * plane;
    image[v] = int64_t(n) * cv.out_C * cv.out_plane;
    if (cv.dense_out) {
      pos[v] = q;
    } else {
      const int y = q / cv.col_W, x = q - y * cv.col_W;
      pos[v] = (y * cv.out_sy + cv.out_oy) * cv.out_W + x * cv.out_sx + cv.out_ox;
    }
  }
}

// The last split of a split reduction to finish writes, for the thread's outputs, the sum of every
// split's slice in split order plus the bias: the same additions whichever split finishes last, so
// the result is deterministic. The slice loop is outermost so each step issues the thread's
// kThreadM x kThreadN / 2 loads of one half at once instead of waiting on them one by one.
template <typename T, typename Cfg>
__device__ __forceinline__ void sum_slices_tile(const GatherConv& cv, const T* partial, int64_t numel, int splits,
                                                T* out, const T* bias, int g, int m0, int col0) {
  const ThreadTile<Cfg> tt(threadIdx.x);
  constexpr int kRun = Cfg::kThreadN / 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j0 = col0 + tt.col(h * kRun);
    if (j0 >= cv.columns) continue;
    int64_t image[kRun];
    int pos[kRun];
    output_run<kRun>(cv, j0, image, pos);
    T sum[Cfg::kThreadM][kRun];
#pragma unroll
    for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
      for (int v = 0; v < kRun; ++v) sum[i][v] = T(0);
    for (int s = 0; s < splits; ++s) {
      const T* slice = partial + s * numel;
#pragma unroll
      for (int i = 0; i < Cfg::kThreadM; ++i) {
        const int m = min(m0 + tt.row(i), cv.outputs - 1);
        const int64_t channel = (int64_t(g) * cv.outputs + m) * cv.out_plane;
#pragma unroll
        for (int v = 0; v < kRun; ++v) sum[i][v] += __ldcg(slice + image[v] + channel + pos[v]);
      }
    }
#pragma unroll
    for (int i = 0; i < Cfg::kThreadM; ++i) {
      const int m = m0 + tt.row(i);
      if (m >= cv.outputs) continue;
      const T b = bias ? bias[g * cv.outputs + m] : T(0);
      const int64_t channel = (int64_t(g) * cv.outputs + m) * cv.out_plane;
#pragma unroll
      for (int v = 0; v < kRun; ++v)
        if (j0 + v < cv.columns) out[image[v] + channel + pos[v]] = sum[i][v] + b;
    }
  }
}

// Writes a thread's kThreadM x kThreadN outputs, plus the bias. Dense outputs (the columns are the
// output plane): each half of the thread's columns is a run of kThreadN / 2 consecutive columns, one
// vector store per row when the run lies in one image and is aligned. A phase of a strided
// grad_input writes every sh-th row and sw-th column: element stores at the mapped positions.
template <typename T, typename Cfg>
__device__ __forceinline__ void store_output_tile(const T (&acc)[Cfg::kThreadM][Cfg::kThreadN], const GatherConv& cv,
                                                  T* out, const T* bias, int g, int m0, int col0) {
  const ThreadTile<Cfg> tt(threadIdx.x);
  constexpr int kRun = Cfg::kThreadN / 2;
  constexpr bool kVector = kRun * sizeof(T) == 16;
  const int plane = int(cv.col_plane);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j0 = col0 + tt.col(h * kRun);
    if (j0 >= cv.columns) continue;
    int64_t image[kRun];
    int pos[kRun];
    output_run<kRun>(cv, j0, image, pos);
    const bool whole = kVector && cv.dense_out && j0 + kRun <= cv.columns && image[kRun - 1] == image[0] &&
                       (plane % kRun) == 0;
#pragma unroll
    for (int i = 0; i < Cfg::kThreadM; ++i) {
      const int m = m0 + tt.row(i);
      if (m >= cv.outputs) continue;
      const T b = bias ? bias[g * cv.outputs + m] : T(0);
      const int64_t channel = (int64_t(g) * cv.outputs + m) * cv.out_plane;
      if (whole) {
        T* dst = out + image[0] + channel + pos[0];
        if constexpr (sizeof(T) == 4) {
          *reinterpret_cast<float4*>(dst) = make_float4(acc[i][h * kRun] + b, acc[i][h * kRun + 1] + b,
                                                        acc[i][h * kRun + 2] + b, acc[i][h * kRun + 3] + b);
        } else {
          *reinterpret_cast<double2*>(dst) = make_double2(acc[i][h * kRun] + b, acc[i][h * kRun + 1] + b);
        }
      } else {
#pragma unroll
        for (int v = 0; v < kRun; ++v) {
          if (j0 + v >= cv.columns) continue;
          out[image[v] + channel + pos[v]] = acc[i][h * kRun + v] + b;
        }
      }
    }
  }
}

// A block's place in a grid of (row tile, column tile, group, split): row tiles fastest, so the
// blocks that gather the same columns run together and find them in L2.
struct BlockTile {
  int mt, nt, g, split;
};
__device__ __forceinline__ BlockTile block_tile(int m_tiles, int n_tiles, int groups) {
  int b = blockIdx.x;
  BlockTile t;
  t.mt = b % m_tiles, b /= m_tiles;
  t.nt = b % n_tiles, b /= n_tiles;
  t.g = b % groups, t.split = b / groups;
  return t;
}

// A loader that starts at reduction chunk `offset` (a split of the reduction).
template <typename Loader>
struct ChunkOffset {
  Loader inner;
  int offset;
  template <typename T>
  __device__ void fetch(int chunk, T* tile) {
    inner.fetch(chunk + offset, tile);
  }
  template <typename T>
  __device__ void store(T* tile) {
    inner.store(tile);
  }
};

template <typename T, typename Cfg, bool kWeightA, typename MakeLoaderB>
__device__ __forceinline__ void gemm_conv_block(const GemmConvArgs<T>& a, MakeLoaderB&& make_b) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const BlockTile bt = block_tile(a.m_tiles, a.n_tiles, a.cv.groups);
  const int mt = bt.mt, nt = bt.nt, g = bt.g, split = bt.split;
  const int m0 = mt * Cfg::kM;
  const int col0 = nt * Cfg::kN;
  const int chunk0 = split * a.chunks_per_split;
  const int chunks = min(a.chunks_per_split, a.reduction_pad / Cfg::kK - chunk0);
  ChunkOffset<decltype(make_b(g, col0))> lb{make_b(g, col0), chunk0};
  T acc[Cfg::kThreadM][Cfg::kThreadN];
  if constexpr (kWeightA) {
    ChunkOffset<WeightTileLoader<T, Cfg>> la{
        {a.a + int64_t(g) * a.cv.outputs * a.cv.reduction, a.cv.outputs, a.cv.reduction, a.a_m_stride,
         a.a_rho_stride, m0},
        chunk0};
    block_gemm<T, Cfg>(smem, la, lb, chunks, acc);
  } else {
    ChunkOffset<PaddedTileLoader<T, Cfg, Cfg::kM, Cfg::kLdA>> la{
        {a.a + int64_t(g) * a.reduction_pad * a.rows_pad, a.rows_pad, m0}, chunk0};
    block_gemm<T, Cfg>(smem, la, lb, chunks, acc);
  }
  if (a.splits == 1) {
    store_output_tile<T, Cfg>(acc, a.cv, a.out, a.bias, g, m0, int(a.col_begin) + col0);
    return;
  }
  // Split reduction: write this split's slice, then count the tile's finished splits; the last one
  // (after a fence, so the others' slices are visible) writes the sums and resets the counter for
  // the next launch on this stream.
  store_output_tile<T, Cfg>(acc, a.cv, a.partial + split * a.out_numel, nullptr, g, m0, int(a.col_begin) + col0);
  __threadfence();
  __shared__ bool last;
  __syncthreads();
  int* counter = a.tile_counters + (int64_t(g) * a.n_tiles + nt) * a.m_tiles + mt;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == a.splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  sum_slices_tile<T, Cfg>(a.cv, a.partial, a.out_numel, a.splits, a.out, a.bias, g, m0, int(a.col_begin) + col0);
  if (threadIdx.x == 0) *counter = 0;
}

template <typename T, typename Cfg, int kR, int kS, bool kWeightA>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) gemm_conv_tap_mask_kernel(const GemmConvArgs<T> a) {
  gemm_conv_block<T, Cfg, kWeightA>(
      a, [&](int g, int col0) { return TapMaskTileLoader<T, Cfg, kR, kS>(a.src, a.cv, g, col0); });
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) gemm_conv_gather_kernel(const GemmConvArgs<T> a) {
  gemm_conv_block<T, Cfg, false>(a, [&](int g, int col0) { return GatherTileLoader<T, Cfg>(a.src, a.cv, g, col0); });
}

template <typename T, typename Cfg, bool kWeightA>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) gemm_conv_pointwise_kernel(const GemmConvArgs<T> a) {
  gemm_conv_block<T, Cfg, kWeightA>(
      a, [&](int g, int col0) { return PointwiseTileLoader<T, Cfg>(a.src, a.cv, g, col0); });
}

// Explicit variant: B rows copied from the unrolled chunk [group][reduction_pad][cols_pad].
template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) gemm_conv_unrolled_kernel(const GemmConvArgs<T> a) {
  gemm_conv_block<T, Cfg, false>(a, [&](int g, int col0) {
    return PaddedTileLoader<T, Cfg, Cfg::kN, Cfg::kLdB>{a.src + int64_t(g) * a.reduction_pad * a.cols_pad, a.cols_pad,
                                                        int(col0)};
  });
}

// Explicit variant's unroll: X^ for columns [col_begin, col_begin + count) of every group into
// [group][reduction_pad][cols_pad], zero in the padding (rows past the reduction, columns past count).
template <typename T>
__global__ void gemm_unroll_kernel(const T* __restrict__ src, T* __restrict__ col, const GatherConv cv,
                                   int reduction_pad, int64_t cols_pad, int64_t col_begin, int64_t count) {
  const int64_t total = int64_t(cv.groups) * reduction_pad * cols_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % cols_pad;
    const int rho = int((i / cols_pad) % reduction_pad);
    const int g = int(i / (cols_pad * reduction_pad));
    T v = T(0);
    if (j < count && rho < cv.reduction) {
      const Column c = decode_column(cv, int(col_begin + j), g);
      const int64_t off = gather_offset(cv, c, Tap<0, 0>(cv, rho));
      if (off >= 0) v = src[off];
    }
    col[i] = v;
  }
}

// The grad_input of an RGB stem from its columns (stem_grad_input_by_columns, gemm.cu): the columns
// hold, for every output position (qy, qx) of an image, the gradient each (channel, tap) row of the
// filter sends back, cols[n][(c * R + r) * S + s][qy][qx]; input pixel (n, c, y, x) sums the rows of
// the taps whose output reads it, r then s ascending (the same sum every call).
struct StemColumns {
  int C, H, W, R, S, Ho, Wo;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int tap_step_h, tap_step_w;  // conv_shape.h: tap_step
};
// The taps of one axis that reach input position i (conv_shape.h: first_reaching_tap, then every
// tap_step-th), output position q0 = (i + pad - r0 * dil) / stride falling by tap_step * dil / stride a
// tap. Looping over these alone, not every tap with a modulo each, leaves a stride-2 7 x 7 stem a
// quarter of the iterations.
struct StemAxisTaps {
  int r0, q0, dq;  // r0 >= kernel: none; q0 < 0: none reaches an output
  __device__ StemAxisTaps(int i, int kernel, int stride, int pad, int dil, int tap_step) {
    const int r = first_reaching_tap(i + pad, kernel, stride, dil, tap_step);
    r0 = r < 0 ? kernel : r, q0 = r < 0 ? 0 : (i + pad - r * dil) / stride, dq = tap_step * dil / stride;
  }
};
// A thread sums one pixel (n, y, x) of every channel: the channels' taps are the same, so their loads
// go out together, C at a time (a thread a channel, one load at a time, kept too few bytes in flight
// to draw the memory's bandwidth).
constexpr int kStemColumnsMaxChannels = 4;
constexpr int kStemGatherThreads = 256;
// At most 32 registers a thread (8 blocks an SM, full occupancy): the loads in flight an SM grow with
// the warps that hold them.
template <typename T>
__global__ void __launch_bounds__(kStemGatherThreads, 8)
    stem_columns_to_grad_input_kernel(const T* __restrict__ cols, T* __restrict__ gx, const StemColumns sc,
                                      int64_t pixels) {
  const int64_t plane = int64_t(sc.Ho) * sc.Wo, rows_per_channel = int64_t(sc.R) * sc.S * plane;
  const int64_t image = int64_t(sc.H) * sc.W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < pixels; e += int64_t(gridDim.x) * blockDim.x) {
    const int x = int(e % sc.W);
    const int64_t rest = e / sc.W;
    const int y = int(rest % sc.H);
    const int64_t n = rest / sc.H;
    const T* rows = cols + n * sc.C * rows_per_channel;
    const StemAxisTaps ty(y, sc.R, sc.stride_h, sc.pad_h, sc.dil_h, sc.tap_step_h);
    const StemAxisTaps tx(x, sc.S, sc.stride_w, sc.pad_w, sc.dil_w, sc.tap_step_w);
    T sum[kStemColumnsMaxChannels] = {};
    // Output positions fall as the taps rise: skip those past the output's end, stop below its start.
    for (int r = ty.r0, qy = ty.q0; r < sc.R && qy >= 0; r += sc.tap_step_h, qy -= ty.dq) {
      if (qy >= sc.Ho) continue;
      const T* row = rows + int64_t(r) * sc.S * plane + int64_t(qy) * sc.Wo;
      for (int s = tx.r0, qx = tx.q0; s < sc.S && qx >= 0; s += sc.tap_step_w, qx -= tx.dq) {
        if (qx >= sc.Wo) continue;
        const T* at = row + int64_t(s) * plane + qx;
#pragma unroll
        for (int c = 0; c < kStemColumnsMaxChannels; ++c)
          if (c < sc.C) sum[c] += at[c * rows_per_channel];
      }
    }
    T* out = gx + n * sc.C * image + int64_t(y) * sc.W + x;
#pragma unroll
    for (int c = 0; c < kStemColumnsMaxChannels; ++c)
      if (c < sc.C) out[c * image] = sum[c];
  }
}

// A[group][rho][m]: the GEMM's A operand from a K x C/groups x Rw x Sw weight, zero-padded, over the
// launch's taps (i, j) < (R, S), filter tap (r0 + i * dr, s0 + j * ds):
//   forward:    m = filter k, rho = (c, i, j):  A = w[g*Kg + k][c][r][s]
//   transposed: m = channel c, rho = (k, i, j): A = w[g*Kg + k][c][r][s]   (grad_input)
struct WeightMatrixMap {
  int Rw, Sw;
  GatherConv cv;
  int reduction_pad, rows_pad;
  __device__ int64_t src(int64_t i) const {
    const int m = int(i % rows_pad);
    const int rho = int((i / rows_pad) % reduction_pad);
    const int64_t g = i / (int64_t(rows_pad) * reduction_pad);
    if (m >= cv.outputs || rho >= cv.reduction) return -1;
    const int taps = cv.R * cv.S;
    const int ch = rho / taps, tap = rho % taps;
    return weight_index(cv, Rw, Sw, g, ch, m, tap / cv.S, tap % cv.S);
  }
};

// ---- grad_weight ---------------------------------------------------------------------------------

// dW[group][filter][rho] = sum over columns j of gy[n][group*Kg + filter][q] * X^[rho][j]: rows are
// filters, columns are rho, the reduction runs over columns j in chunks of kK.
template <typename T>
struct WeightGradArgs {
  const T* x;
  const T* gy;
  T* partial;      // [split][group][k_pad][rho_pad], or nullptr with one split:
  T* weight_grad;  // then the kernel writes the gradient itself ([group * Kg][rho]), no slice sum
  GatherConv cv;
  int k_pad, rho_pad, m_tiles, n_tiles;
  int64_t columns_per_split;
};

// A column of the grad_weight reduction, stepped through the (n, y, x) grid without divisions: a
// block fetches its chunks in order, so each fetch moves a thread's columns on by kK positions
// (the divisions by Ho * Wo and Wo per fetch were a quarter of the loaders' instructions).
struct ColumnCursor {
  int j, n, y, x;
  __device__ void start(const GatherConv& cv, int j0) {
    j = j0;
    const int plane = int(cv.col_plane);
    n = j0 / plane;
    const int q = j0 - n * plane;
    y = q / cv.col_W, x = q - y * cv.col_W;
  }
  __device__ void advance(const GatherConv& cv, int step) {
    j += step, x += step;
    while (x >= cv.col_W) x -= cv.col_W, ++y;
    while (y >= cv.col_H) y -= cv.col_H, ++n;
  }
};

// A operand: gy for kK consecutive columns x kM filters. Lanes run along columns (coalesced rows of
// grad_output) and write down the tile's columns (the padded rows keep the banks distinct).
template <typename T, typename Cfg>
struct GradOutputColumnLoader {
  static constexpr int kPasses = Cfg::kK * Cfg::kM / Cfg::kThreads;
  static_assert(Cfg::kThreads % Cfg::kK == 0 && kPasses >= 1, "whole filters per pass");
  const T* gy;
  const GatherConv& cv;
  int col_end;
  int filter0;  // group's first filter + block's first
  int filters_end;
  ColumnCursor col;

  __device__ GradOutputColumnLoader(const T* gy_, const GatherConv& cv_, int begin, int end, int filter0_,
                                    int filters_end_)
      : gy(gy_), cv(cv_), col_end(end), filter0(filter0_), filters_end(filters_end_) {
    col.start(cv, begin + int(threadIdx.x % Cfg::kK));
  }
  __device__ void fetch(int /*chunk: fetched in order*/, T* tile) {
    const int kk = threadIdx.x % Cfg::kK;
    const bool col_ok = col.j < col_end;
    const T* src = gy + int64_t(col.n) * cv.out_C * cv.col_plane + col.y * cv.col_W + col.x;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int m = threadIdx.x / Cfg::kK + pass * (Cfg::kThreads / Cfg::kK);
      const int k = filter0 + m;
      const bool ok = col_ok && k < filters_end;
      cp_async_or_zero(tile + kk * Cfg::kLdA + m, ok ? src + int64_t(k) * cv.col_plane : gy, ok);
    }
    col.advance(cv, Cfg::kK);
  }
  __device__ void store(T*) {}
};

// B operand: X^ transposed, kK consecutive columns x kN reduction indices. Lanes run along 8
// columns; a thread owns kK / 8 columns (cursors) and kTaps fixed reduction indices, decoded once
// into the tap's offset in the image and its (row, column) displacement packed in 16-bit halves, so
// each element is two shifts, four compares and an add.
template <typename T, typename Cfg, int kR, int kS>
struct UnrolledTransposeLoader {
  static constexpr int kColumnLanes = 8;
  static constexpr int kColumns = Cfg::kK / kColumnLanes;  // columns per thread
  static constexpr int kTapGroups = Cfg::kThreads / kColumnLanes;
  static constexpr int kTaps = Cfg::kN / kTapGroups;  // reduction indices per thread
  static_assert(Cfg::kK % kColumnLanes == 0 && Cfg::kN % kTapGroups == 0 && kTaps >= 1, "whole taps per thread");
  static constexpr int kOutside = 0x7FFF;  // a displacement no image reaches: reduction padding
  const T* x;
  const GatherConv& cv;
  int col_end;
  int g;
  int64_t tap_offset[kTaps];  // c * H * W + dy * W + dx (64 bits: an image may hold 2^31 elements or more)
  int tap_shift[kTaps];   // dy << 16 | dx
  ColumnCursor cols[kColumns];

  __device__ UnrolledTransposeLoader(const T* x_, const GatherConv& cv_, int begin, int end, int g_, int rho0)
      : x(x_), cv(cv_), col_end(end), g(g_) {
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      const Tap<kR, kS> tap(cv, rho0 + threadIdx.x / kColumnLanes + t * kTapGroups);
      const int dy = tap.r * cv.tap_sy, dx = tap.s * cv.tap_sx;
      tap_offset[t] = int64_t(tap.c) * cv.src_plane + dy * cv.src_W + dx;
      tap_shift[t] = tap.c < cv.channels ? (dy << 16 | dx) : (kOutside << 16 | kOutside);
    }
#pragma unroll
    for (int c = 0; c < kColumns; ++c) cols[c].start(cv, begin + int(threadIdx.x % kColumnLanes) + c * kColumnLanes);
  }
  __device__ void fetch(int /*chunk: fetched in order*/, T* tile) {
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      const int kk = threadIdx.x % kColumnLanes + c * kColumnLanes;
      const ColumnCursor& col = cols[c];
      const bool col_ok = col.j < col_end;
      const int y0 = col.y * cv.col_sy + cv.col_oy, x0 = col.x * cv.col_sx + cv.col_ox;
      const T* origin = x + (int64_t(col.n) * cv.src_C + int64_t(g) * cv.channels) * cv.src_plane +
                        (int64_t(y0) * cv.src_W + x0);
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        const int n = threadIdx.x / kColumnLanes + t * kTapGroups;
        const int iy = y0 + (tap_shift[t] >> 16), ix = x0 + (tap_shift[t] & 0xFFFF);
        const bool ok = col_ok && iy >= 0 && iy < cv.src_H && ix >= 0 && ix < cv.src_W;
        cp_async_or_zero(tile + kk * Cfg::kLdB + n, ok ? origin + tap_offset[t] : x, ok);
      }
      cols[c].advance(cv, Cfg::kK);
    }
  }
  __device__ void store(T*) {}
};

template <typename T, typename Cfg, int kR, int kS>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) gemm_weight_grad_kernel(const WeightGradArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const BlockTile bt = block_tile(a.m_tiles, a.n_tiles, a.cv.groups);
  const int mt = bt.mt, nt = bt.nt, g = bt.g, split = bt.split;
  const int begin = int(split * a.columns_per_split);
  const int end = int(min(begin + a.columns_per_split, a.cv.columns));
  GradOutputColumnLoader<T, Cfg> la(a.gy, a.cv, begin, end, g * a.cv.outputs + mt * Cfg::kM, (g + 1) * a.cv.outputs);
  UnrolledTransposeLoader<T, Cfg, kR, kS> lb(a.x, a.cv, begin, end, g, nt * Cfg::kN);
  T acc[Cfg::kThreadM][Cfg::kThreadN];
  block_gemm<T, Cfg>(smem, la, lb, int(ceil_div(end - begin, Cfg::kK)), acc);
  const ThreadTile<Cfg> tt(threadIdx.x);
  // One split writes the gradient ([group * Kg][rho], bounded), more write their padded slices.
  const bool whole = a.weight_grad != nullptr;
  const int ld = whole ? a.cv.reduction : a.rho_pad;
  const int rows = whole ? a.cv.outputs : a.k_pad, cols = whole ? a.cv.reduction : a.rho_pad;
  T* out = whole ? a.weight_grad + int64_t(g) * a.cv.outputs * a.cv.reduction
                 : a.partial + (int64_t(split) * a.cv.groups + g) * a.k_pad * a.rho_pad;
#pragma unroll
  for (int i = 0; i < Cfg::kThreadM; ++i) {
    const int m = mt * Cfg::kM + tt.row(i);
#pragma unroll
    for (int j = 0; j < Cfg::kThreadN; ++j) {
      const int rho = nt * Cfg::kN + tt.col(j);
      if (m < rows && rho < cols) out[int64_t(m) * ld + rho] = acc[i][j];
    }
  }
}

// grad_weight's slices ([split][group][k_pad][rho_pad]) summed into the weight ([group * Kg][rho])
// by common/slice_sum.cuh, 8 lanes per weight from kFinishLanesMinSplits slices on: layers with few
// weights and many slices (a 64 x 64 1x1: 4096 weights, hundreds of slices) would otherwise leave
// a thread summing hundreds of values in sequence, while with few slices one thread per weight
// keeps every load in flight.
constexpr int kFinishLanesMinSplits = 64;
struct PaddedWeightSliceMap {
  int Kg, reduction, k_pad, rho_pad;
  __device__ int64_t src(int64_t i) const {
    const int rho = int(i % reduction);
    const int k = int((i / reduction) % Kg);
    const int64_t g = i / (int64_t(reduction) * Kg);
    return (g * k_pad + k) * rho_pad + rho;
  }
  __device__ int64_t dst(int64_t i) const { return i; }
};

// ---- host side ------------------------------------------------------------------------------------

}  // namespace
}  // namespace cuda
}  // namespace torchconv
