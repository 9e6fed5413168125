// Direct on the GPU, device side: the tile configs, the launch descriptor (DirectArgs) and the kernels: forward (also every grad_input phase), the per-pixel grad_input gather, the phase-filter builder, the tiled grad_weight and its slice sum.
// Included by direct.cu, which holds the host side (launch, rule, limits, operators).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <cstdlib>

#include "../../conv_shape.h"
#include "../../tuning.h"
#include "../../workspace.h"
#include "../common/filter_relayout.cuh"
#include "../common/launch.cuh"
#include "../common/launch_map.cuh"
#include "../common/slice_sum.cuh"

namespace torchconv {
namespace cuda {
namespace {

// One direct-convolution launch (common/launch_map.cuh): the forward map, or one grad_input phase
// with its taps reversed, so tap steps are positive; the source offset may be positive (grad_input
// of a layer padded by more than the filter's reach), so the grid's extent is given, not derived.
struct DirectArgs : LaunchMap {
  const void* x;
  const void* w;
  const void* bias;
  void* y;
  // Set by the launcher. vec_input: input rows load in 16-byte pieces. col_shift: the column tiles
  // start col_shift outputs left of 0, so that every tile's first input column is 16-byte aligned
  // whatever the padding (the outputs left of 0 are computed and dropped).
  int vec_input, col_shift;
};

// The float configs (TX, TY, TZ, RX, RY, RK, blocks per SM, channels per barrier); each can be
// forced (torchconv.set_config("direct", name) or TORCHCONV_DIRECT_CONFIG) so it can be timed alone.
//   wide:  64 x 16 outputs x 16 channels per block, two blocks per SM (128 registers).
//   small: 16 x 16 outputs x 32 channels, for small planes and grids short of the GPU, where wide's
//          64-column tiles would leave threads without outputs. Its thread tile is half of wide's,
//          so it stages 2 channels per barrier to keep the same work between barriers.
// (A third, wide with 4 channels per barrier, measured within 3% of wide everywhere: with two blocks
// per SM the other block already hides the barrier and the tile wait.)
using DirectWide = TileConfig<16, 8, 2, 4, 2, 8, 2, 1>;
using DirectSmall = TileConfig<8, 8, 4, 2, 2, 8, 2, 2>;
//   depthwise: the specialist for launches reducing over at most 16 channels per group
//          (depthwise_kernels.cuh); the rule takes it for every such launch it can run.
//   depthwise-unstaged: its unstaged forward for depthwise launches of small square filters
//          (depthwise_unstaged_takes in direct.cu), which the rule takes first where it pays.
//   depthwise-plane: its whole-plane forward for depthwise launches whose filter covers the plane
//          (depthwise_plane_takes in direct.cu), which the rule takes first for batches of 16 and more.
constexpr int kWide = 0, kSmall = 1, kDepthwiseSpecialist = 2, kDepthwiseUnstaged = 3, kDepthwisePlane = 4;
constexpr const char* kTileNames[] = {"wide", "small", "depthwise", "depthwise-unstaged",
                                      "depthwise-plane"};  // the configs' names, in index order
using DirectWideF64 = TileConfig<16, 8, 2, 2, 2, 4>;   // double: half the registers per accumulator
using DirectDepthwise = TileConfig<32, 8, 1, 2, 2, 1>;  // one output channel per group

template <typename Cfg>
struct TileGeometry {
  int in_h, in_w, pitch;
  __host__ __device__ TileGeometry(int R, int S, int sh, int sw, int dh, int dw)
      : in_h((Cfg::kTileH - 1) * sh + (R - 1) * dh + 1),
        in_w((Cfg::kTileW - 1) * sw + (S - 1) * dw + 1),
        pitch(round_up(in_w, 4)) {}
  // One channel: the input tile (rows padded to `pitch`) followed by the filter tile [R * S][kTileK],
  // rounded to 16 bytes so every channel's input tile can take 16-byte copies.
  __host__ __device__ int channel_elems(int R, int S) const {
    return round_up(in_h * pitch + Cfg::kTileK * R * S, 4);
  }
  __host__ __device__ int stage_elems(int R, int S) const { return Cfg::kStageChannels * channel_elems(R, S); }
  // Two stages: the next channels' tiles load while the current ones are computed.
  template <typename T>
  __host__ __device__ size_t smem_bytes(int R, int S) const {
    return 2 * size_t(stage_elems(R, S)) * sizeof(T);
  }
};

// Loads RK consecutive filter values; 16-byte loads where the layout guarantees alignment.
template <typename T, int RK>
__device__ __forceinline__ void load_filter_values(const T* src, T (&dst)[RK]) {
  if constexpr (std::is_same_v<T, float> && RK % 4 == 0) {
#pragma unroll
    for (int i = 0; i < RK; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(src + i);
      dst[i] = v.x, dst[i + 1] = v.y, dst[i + 2] = v.z, dst[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < RK; ++i) dst[i] = src[i];
  }
}

// KR, KS > 0: compile-time filter size with unit stride and dilation. KR = KS = 0: anything.
template <typename T, typename Cfg, int KR, int KS>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) direct_forward_kernel(const DirectArgs a) {
  constexpr bool kFixed = KR > 0;
  constexpr int RX = Cfg::RX, RY = Cfg::RY, RK = Cfg::RK, kStageC = Cfg::kStageChannels;
  const int R = kFixed ? KR : a.R, S = kFixed ? KS : a.S;
  const int sh = kFixed ? 1 : a.col_sy, sw = kFixed ? 1 : a.col_sx;
  const int dh = kFixed ? 1 : a.tap_sy, dw = kFixed ? 1 : a.tap_sx;
  const TileGeometry<Cfg> geo(R, S, sh, sw, dh, dw);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const int channel_elems = geo.channel_elems(R, S), stage = geo.stage_elems(R, S);

  const int Cg = a.src_C / a.groups, Kg = a.out_C / a.groups;
  const int tiles_x = int(ceil_div(a.col_W + a.col_shift, Cfg::kTileW)), tiles_y = int(ceil_div(a.col_H, Cfg::kTileH));
  const int k_tiles = int(ceil_div(Kg, Cfg::kTileK));
  // Output-channel tiles vary fastest, so the blocks that read the same input tile run together and
  // share it through L2 instead of each fetching it from DRAM.
  int64_t b = blockIdx.x;
  const int k_tile = int(b % k_tiles);
  b /= k_tiles;
  const int tile_x = int(b % tiles_x);
  b /= tiles_x;
  const int tile_y = int(b % tiles_y);
  b /= tiles_y;
  const int g = int(b % a.groups);
  const int n = int(b / a.groups);

  const int ox0 = tile_x * Cfg::kTileW - a.col_shift, oy0 = tile_y * Cfg::kTileH, kg0 = k_tile * Cfg::kTileK;
  const int iy0 = oy0 * sh + a.col_oy, ix0 = ox0 * sw + a.col_ox;
  const int tid = threadIdx.x;
  const int tx = tid % Cfg::TX, ty = (tid / Cfg::TX) % Cfg::TY, tz = tid / (Cfg::TX * Cfg::TY);

  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  T acc[RY][RX][RK];
#pragma unroll
  for (int i = 0; i < RY; ++i)
#pragma unroll
    for (int j = 0; j < RX; ++j)
#pragma unroll
      for (int k = 0; k < RK; ++k) acc[i][j][k] = T(0);

  // 16-byte input loads (compile-time filter sizes): a thread's pieces sit at the same place in
  // every channel's tile, so their offsets in the input plane are worked out once. Piece v covers
  // tile columns kVec * (v % row_pieces) ..; it is wholly inside or wholly outside the image because
  // the tile starts on a multiple of kVec and the row length is one (the launcher checks).
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kInH = kFixed ? Cfg::kTileH + KR - 1 : 1;
  constexpr int kPitch = kFixed ? round_up(Cfg::kTileW + KS - 1, 4) : 4;
  constexpr int kRowPieces = kPitch / kVec, kPieces = kInH * kRowPieces;
  constexpr int kPieceIters = kFixed ? int(ceil_div(kPieces, Cfg::kThreads)) : 1;
  int piece_src[kPieceIters];  // offset in the input plane; -1: zero fill; -2: no piece
  if constexpr (kFixed) {
#pragma unroll
    for (int j = 0; j < kPieceIters; ++j) {
      const int v = tid + j * Cfg::kThreads;
      const int r = v / kRowPieces, iy = iy0 + r, ix = ix0 + (v - r * kRowPieces) * kVec;
      const bool inside = iy >= 0 && iy < a.src_H && ix >= 0 && ix < a.src_W;
      piece_src[j] = v >= kPieces ? -2 : inside ? iy * a.src_W + ix : -1;
    }
  }

  const int in_elems = geo.in_h * geo.in_w;
  const int rs = R * S;
  // Issues the asynchronous loads of channel c's input and filter tiles into the slot at s_in.
  auto load_channel = [&](int c, T* s_in) {
    T* s_w = s_in + geo.in_h * geo.pitch;
    const T* xc = x + (int64_t(n) * a.src_C + g * Cg + c) * a.src_H * a.src_W;
    if (kFixed && a.vec_input) {
#pragma unroll
      for (int j = 0; j < kPieceIters; ++j)
        if (piece_src[j] != -2)
          cp_async_16_or_zero(s_in + (tid + j * Cfg::kThreads) * kVec, xc + max(piece_src[j], 0), piece_src[j] >= 0);
    } else {
#pragma unroll 1
      for (int i = tid; i < in_elems; i += Cfg::kThreads) {
        const int r = i / geo.in_w, q = i - r * geo.in_w;
        const int iy = iy0 + r, ix = ix0 + q;
        const bool inside = iy >= 0 && iy < a.src_H && ix >= 0 && ix < a.src_W;
        cp_async_or_zero(s_in + r * geo.pitch + q, inside ? xc + int64_t(iy) * a.src_W + ix : xc, inside);
      }
    }
#pragma unroll 1
    for (int i = tid; i < Cfg::kTileK * rs; i += Cfg::kThreads) {
      const int kk = i / rs, t = i - kk * rs;
      const int kg = kg0 + kk;
      const T* src = w + (int64_t(g * Kg + min(kg, Kg - 1)) * Cg + c) * rs + t;
      cp_async_or_zero(s_w + t * Cfg::kTileK + kk, src, kg < Kg);
    }
  };
  const int num_stages = int(ceil_div(Cg, kStageC));
  auto load_stage = [&](int st, int buf) {
#pragma unroll 1
    for (int cc = 0; cc < kStageC && st * kStageC + cc < Cg; ++cc)
      load_channel(st * kStageC + cc, smem + buf * stage + cc * channel_elems);
    cp_async_commit();
  };

  load_stage(0, 0);
#pragma unroll 1
  for (int st = 0; st < num_stages; ++st) {
    if (st + 1 < num_stages) {
      load_stage(st + 1, (st + 1) & 1);
      cp_async_wait<1>();  // stage st's group is complete; st + 1's may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int channels = min(kStageC, Cg - st * kStageC);
#pragma unroll 1
    for (int cc = 0; cc < channels; ++cc) {
      const T* s_in = smem + (st & 1) * stage + cc * channel_elems;
      const T* s_w = s_in + geo.in_h * geo.pitch;
      if constexpr (kFixed) {
        // Unit stride: output column ox reads input columns ox .. ox + S - 1, so a thread's RX columns
        // share one register window of RX + S - 1 input values per row.
        constexpr int kWindow = RX + KS - 1;
#pragma unroll 1
        for (int r = 0; r < KR; ++r) {
          T in[RY][kWindow];
#pragma unroll
          for (int ry = 0; ry < RY; ++ry)
#pragma unroll
            for (int i = 0; i < kWindow; ++i) in[ry][i] = s_in[(ty * RY + ry + r) * kPitch + tx * RX + i];
#pragma unroll
          for (int s = 0; s < KS; ++s) {
            T f[RK];
            load_filter_values<T, RK>(s_w + (r * KS + s) * Cfg::kTileK + tz * RK, f);
#pragma unroll
            for (int ry = 0; ry < RY; ++ry)
#pragma unroll
              for (int rx = 0; rx < RX; ++rx)
#pragma unroll
                for (int rk = 0; rk < RK; ++rk) acc[ry][rx][rk] = fma(in[ry][rx + s], f[rk], acc[ry][rx][rk]);
          }
        }
      } else {
        for (int r = 0; r < R; ++r) {
          for (int s = 0; s < S; ++s) {
            T f[RK];
            load_filter_values<T, RK>(s_w + (r * S + s) * Cfg::kTileK + tz * RK, f);
#pragma unroll
            for (int ry = 0; ry < RY; ++ry)
#pragma unroll
              for (int rx = 0; rx < RX; ++rx) {
                const T v = s_in[((ty * RY + ry) * sh + r * dh) * geo.pitch + (tx * RX + rx) * sw + s * dw];
#pragma unroll
                for (int rk = 0; rk < RK; ++rk) acc[ry][rx][rk] = fma(v, f[rk], acc[ry][rx][rk]);
              }
          }
        }
      }
    }
    __syncthreads();
  }

  T* y = static_cast<T*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
#pragma unroll
  for (int rk = 0; rk < RK; ++rk) {
    const int kg = kg0 + tz * RK + rk;
    if (kg >= Kg) continue;
    const int k = g * Kg + kg;
    const T b_k = bias ? bias[k] : T(0);
    T* yk = y + (int64_t(n) * a.out_C + k) * a.out_H * a.out_W + a.out_oy * a.out_W + a.out_ox;
#pragma unroll
    for (int ry = 0; ry < RY; ++ry) {
      const int oy = oy0 + ty * RY + ry;
      if (oy >= a.col_H) continue;
#pragma unroll
      for (int rx = 0; rx < RX; ++rx) {
        const int ox = ox0 + tx * RX + rx;
        if (ox >= 0 && ox < a.col_W) yk[int64_t(oy) * a.out_sy * a.out_W + ox * a.out_sx] = acc[ry][rx][rk] + b_k;
      }
    }
  }
}

// grad_input of a strided layer whose phase grids would be short of the GPU: each thread gathers one
// input pixel (gather_grad_input in conv_shape.h).
template <typename T>
__global__ void direct_grad_input_gather_kernel(const T* __restrict__ gy, const T* __restrict__ w, T* __restrict__ gx,
                                                const ConvShape p) {
  const int64_t total = p.N * p.C * p.H * p.W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ix = i % p.W, iy = (i / p.W) % p.H, c = (i / (p.W * p.H)) % p.C, n = i / (p.W * p.H * p.C);
    gx[i] = gather_grad_input(p, gy, w, n, c, iy, ix);
  }
}

// grad_input runs as forward convolutions of grad_output (K channels in, C out), one per phase, with
// this filter: f[g * Cg + c][k][j][i] = the weight element behind launch tap (j, i) of the phase's
// map with reversed taps (common/launch_map.cuh), so the launch's taps step forward. Stride 1 has
// one phase with every tap: the filter rotated 180 degrees, C and K swapped within each group.
struct PhaseFilterMap {
  int Rw, Sw;
  LaunchMap m;
  __device__ int64_t src(int64_t e) const {
    const int Kg = m.reduced_per_group(), Cg = m.outputs_per_group();
    int64_t rest = e;
    const int i = int(rest % m.S);
    rest /= m.S;
    const int j = int(rest % m.R);
    rest /= m.R;
    const int k = int(rest % Kg);
    rest /= Kg;
    const int c = int(rest % Cg);
    const int64_t g = rest / Cg;
    return weight_index(m, Rw, Sw, g, k, c, j, i);
  }
};

// grad_weight, tiled: dW[k][c][r][s] = sum over n, oy, ox of gy[n][k][oy][ox] * x[n][c][iy][ix], a
// GEMM of filters x "columns" over the N x Ho x Wo pixels. A block owns TK filters x up to kTaps
// sub-tiles of TC columns and reduces over a slice of "stages" (one output row oy, TW output
// columns each). Per stage it copies the grad_output segment (TK x TW, stored pixel-major so a
// thread reads its filters as 16-byte vectors) and the columns' input values for those pixels (same
// layout), double-buffered with cp.async. Each thread keeps a (2 x V) filters x (2 x V) columns
// register tile of one sub-tile (V = 16 bytes of T): the halves sit TK / 2 apart, so a warp's vector
// reads of either tile cover consecutive 16-byte words without bank conflicts.
//
// What a column is (WeightGradColumns):
//   channels: one input channel, and the sub-tiles are up to kTaps taps of one filter row r. The
//             taps read the same staged input row at offsets of dw, so the row is loaded once for
//             all of them. The layer's choice when it has enough channels per group to fill TC.
//   patches:  one (channel, r, s) of the filter, so the stage is an im2col of the stage's pixels.
//             Loads are not shared between taps, but few channels per group (C = 3 first layers,
//             depthwise) fill the tile (3 x 3 x 3 = 27 columns of 64, against 3 of 64 channels),
//             and the stage is TW columns whatever the stride, so it always fits shared memory.
enum class WeightGradColumns { kChannels, kPatches };

template <typename T>
struct WeightGradConfig {
  static constexpr int V = 16 / int(sizeof(T));  // elements per 16-byte vector
  static constexpr int kThreadsK = 8, kThreadsC = 8, kTaps = 4, TW = 32;
  static constexpr int TK = kThreadsK * 2 * V, TC = kThreadsC * 2 * V;  // float: 64 x 64; double: 32 x 32
  static constexpr int kPitchK = TK + V;  // padded rows, still 16-byte aligned
  static constexpr int kThreadsPerTap = kThreadsK * kThreadsC;
};

struct WeightGradArgs {
  const void* gy;
  const void* x;
  // Channels with several slices: [slices][R * S][K][Cg], so a thread's V consecutive channels are
  // one 16-byte store (the slice sum puts them back in weight order); otherwise [slices][K][Cg][R][S].
  void* partial;
  ConvShape p;
  int taps;        // sub-tiles per block; blockDim = 64 * taps
  int tap_chunks;  // channels: ceil(S / taps); patches: column tiles of taps * TC
  int x_rows;      // staged input rows of x_pitch elements: channels: input columns; patches: TW
  int x_pitch;
  int tap_major;   // channels: the partial is [R * S][K][Cg]
  int64_t stages;  // N * Ho * segments
  int64_t stages_per_slice;
};

template <typename T>
__host__ __device__ int weight_grad_stage_elems(const WeightGradArgs& a) {
  using Cfg = WeightGradConfig<T>;
  return Cfg::TW * Cfg::kPitchK + a.x_rows * a.x_pitch;
}

// Shared memory of a launch: two stages, and for patches the column table (3 ints per column).
template <typename T, WeightGradColumns kColumns>
size_t weight_grad_smem_bytes(const WeightGradArgs& a) {
  const size_t table = kColumns == WeightGradColumns::kPatches ? 3 * sizeof(int) * a.taps * WeightGradConfig<T>::TC : 0;
  return 2 * size_t(weight_grad_stage_elems<T>(a)) * sizeof(T) + table;
}

// One 16-byte shared-memory read (the address is 16-byte aligned).
template <typename T, int V>
__device__ __forceinline__ void load_vector16(const T* src, T (&dst)[V]) {
  static_assert(V * sizeof(T) == 16, "16 bytes");
  if constexpr (std::is_same_v<T, float>) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
  } else {
    const double2 v = *reinterpret_cast<const double2*>(src);
    dst[0] = v.x, dst[1] = v.y;
  }
}

// Stores the first `count` of V consecutive values; one 16-byte store when all V go to an aligned
// address.
template <typename T, int V>
__device__ __forceinline__ void store_run(T* dst, const T (&v)[V], int count) {
  if (count >= V && aligned_to(dst, 16)) {
    if constexpr (std::is_same_v<T, float>) {
      *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      *reinterpret_cast<double2*>(dst) = make_double2(v[0], v[1]);
    }
    return;
  }
#pragma unroll
  for (int l = 0; l < V; ++l)
    if (l < count) dst[l] = v[l];
}

// Calls f(i, j, h, l) for each element acc[i][j][h][l] of a thread's (2 x V) x (2 x V) register
// tile, fully unrolled.
template <int V, typename F>
__device__ __forceinline__ void for_each_tile_element(F&& f) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int l = 0; l < V; ++l) f(i, j, h, l);
}

template <typename T, WeightGradColumns kColumns>
__global__ void __launch_bounds__(256, 2) direct_grad_weight_tiled_kernel(const WeightGradArgs a) {
  using Cfg = WeightGradConfig<T>;
  constexpr bool kPatches = kColumns == WeightGradColumns::kPatches;
  constexpr int V = Cfg::V, TK = Cfg::TK, TC = Cfg::TC, TW = Cfg::TW;
  const ConvShape& p = a.p;
  const int Kg = int(p.K / p.groups), Cg = int(p.C / p.groups);
  const int k_tiles = int(ceil_div(Kg, TK));
  const int col_tiles = kPatches ? a.tap_chunks : int(ceil_div(Cg, TC));
  int bx = blockIdx.x;
  const int col_tile = bx % col_tiles;
  bx /= col_tiles;
  const int k_tile = bx % k_tiles;
  const int g = bx / k_tiles;
  // channels: filter row r, taps s0 .. s0 + taps - 1 (blockIdx.z); patches: r = s0 = 0.
  const int r = kPatches ? 0 : blockIdx.z / a.tap_chunks, s0 = kPatches ? 0 : (blockIdx.z % a.tap_chunks) * a.taps;
  const int kt0 = k_tile * TK, ct0 = col_tile * (kPatches ? a.taps * TC : TC);
  const int tid = threadIdx.x, threads = blockDim.x;
  const int kq = tid % Cfg::kThreadsK, cq = (tid / Cfg::kThreadsK) % Cfg::kThreadsC, tap = tid / Cfg::kThreadsPerTap;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const int stage_elems = weight_grad_stage_elems<T>(a);
  const T* gy = static_cast<const T*>(a.gy);
  const T* x = static_cast<const T*>(a.x);
  const int segments = int(ceil_div(p.Wo, TW));
  const int sw = int(p.stride_w), dw = int(p.dil_w);
  // The channels pitch is a compile-time constant, so the unrolled loop's addresses are immediates.
  const int x_pitch = kPatches ? a.x_pitch : TC + V;

  // patches: each staged column's channel (-1 past the layer's columns) and row / column offsets.
  int* const col_c = reinterpret_cast<int*>(smem + 2 * stage_elems);
  int* const col_dy = col_c + a.taps * TC;
  int* const col_dx = col_dy + a.taps * TC;
  if constexpr (kPatches) {
    const int RS = int(p.R * p.S);
    for (int j = tid; j < a.taps * TC; j += threads) {
      const int J = ct0 + j, c = J / RS, t = J - c * RS;
      col_c[j] = J < Cg * RS ? c : -1;
      col_dy[j] = int((t / p.S) * p.dil_h);
      col_dx[j] = int((t % p.S) * dw);
    }
    __syncthreads();
  }

  // Copies stage `st` (output row and column segment) into buffer `buf`; zeros outside the tensors.
  auto load_stage = [&](int64_t st, int buf) {
    T* s_gy = smem + buf * stage_elems;
    T* s_x = s_gy + TW * Cfg::kPitchK;
    const int64_t row = st / segments;
    const int ox0 = int(st - row * segments) * TW;
    const int n = int(row / p.Ho), oy = int(row - int64_t(n) * p.Ho);
    const T* gy_row = gy + ((int64_t(n) * p.K + g * Kg + kt0) * p.Ho + oy) * p.Wo + ox0;
    for (int i = tid; i < TK * TW; i += threads) {
      const int kk = i / TW, ox = i % TW;
      const bool ok = kt0 + kk < Kg && ox0 + ox < p.Wo;
      cp_async_or_zero(s_gy + ox * Cfg::kPitchK + kk, ok ? gy_row + int64_t(kk) * p.Ho * p.Wo + ox : gy, ok);
    }
    const int iy0 = int(oy * p.stride_h - p.pad_h);
    if constexpr (kPatches) {
      // Column j of pixel ox reads x[c_j][iy0 + dy_j][ix0 + dx_j + ox * sw].
      const int ix0 = int(ox0 * p.stride_w - p.pad_w);
      const T* x_n = x + (int64_t(n) * p.C + g * Cg) * p.H * p.W;
      for (int i = tid; i < TW * a.taps * TC; i += threads) {
        const int j = i / TW, ox = i % TW;
        const int c = col_c[j], iy = iy0 + col_dy[j], ix = ix0 + col_dx[j] + ox * sw;
        const bool ok = c >= 0 && ox0 + ox < p.Wo && iy >= 0 && iy < p.H && ix >= 0 && ix < p.W;
        cp_async_or_zero(s_x + ox * x_pitch + j, ok ? x_n + (int64_t(c) * p.H + iy) * p.W + ix : x, ok);
      }
    } else {
      // The input row segment the block's taps read: x_rows columns from ix0, TC channels.
      const int iy = iy0 + int(r * p.dil_h);
      const int ix0 = int(ox0 * p.stride_w - p.pad_w) + s0 * dw;
      const bool row_ok = iy >= 0 && iy < p.H;
      const T* x_row = x + ((int64_t(n) * p.C + g * Cg + ct0) * p.H + (row_ok ? iy : 0)) * p.W;
      for (int i = tid; i < TC * a.x_rows; i += threads) {
        const int cc = i / a.x_rows, col = i - cc * a.x_rows;
        const int ix = ix0 + col;
        const bool ok = row_ok && ct0 + cc < Cg && ix >= 0 && ix < p.W;
        cp_async_or_zero(s_x + col * x_pitch + cc, ok ? x_row + int64_t(cc) * p.H * p.W + ix : x, ok);
      }
    }
    cp_async_commit();
  };

  T acc[2][V][2][V] = {};
  const int64_t first = blockIdx.y * a.stages_per_slice;
  const int64_t last = min(first + a.stages_per_slice, a.stages);
  const bool active = kPatches || (s0 + tap < p.S && tap < a.taps);
  load_stage(first, 0);
  for (int64_t st = first; st < last; ++st) {
    const int buf = int(st - first) & 1;
    if (st + 1 < last) {
      load_stage(st + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (active) {
      // Where this thread's columns sit in a staged pixel, and the step from one pixel to the next.
      const int x_offset = (kPatches ? tap * TC : tap * dw * x_pitch) + cq * V;
      const int x_step = kPatches ? x_pitch : sw * x_pitch;
      const T* s_gy = smem + buf * stage_elems + kq * V;
      const T* s_x = smem + buf * stage_elems + TW * Cfg::kPitchK + x_offset;
#pragma unroll 2
      for (int ox = 0; ox < TW; ++ox) {
        T gk[2][V], xc[2][V];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          load_vector16(s_gy + ox * Cfg::kPitchK + h * (TK / 2), gk[h]);
          load_vector16(s_x + ox * x_step + h * (TC / 2), xc[h]);
        }
        for_each_tile_element<V>(
            [&](int i, int j, int h, int l) { acc[i][j][h][l] = fma(gk[i][j], xc[h][l], acc[i][j][h][l]); });
      }
    }
    __syncthreads();
  }
  const int RS = int(p.R * p.S), columns = kPatches ? Cg * RS : Cg;  // columns per filter
  T* out = static_cast<T*>(a.partial) + blockIdx.y * p.K * Cg * RS;
  if (kPatches || a.tap_major) {
    // The layout keeps each filter's columns of a sub-tile together (patches: [K][Cg * R * S];
    // tap-major channels: [R * S][K][Cg]), so the tile leaves through shared memory, one sub-tile at
    // a time, as coalesced 16-byte stores of whole rows. (Vector stores straight from the registers
    // would pin the accumulators to aligned register quads for the whole loop, and it spills.)
    constexpr int kTilePitch = TC + V;
    T* const tile = smem;  // TK x kTilePitch: fits one stage's grad_output part
    for (int t = 0; t < a.taps; ++t) {
      if (tap == t && active) {
        for_each_tile_element<V>([&](int i, int j, int h, int l) {
          tile[(i * (TK / 2) + kq * V + j) * kTilePitch + h * (TC / 2) + cq * V + l] = acc[i][j][h][l];
        });
      }
      __syncthreads();
      const int c_base = ct0 + (kPatches ? t * TC : 0);
      T* const dst = kPatches ? out + c_base : out + (int64_t(r) * p.S + s0 + t) * p.K * Cg + c_base;
      if (kPatches || s0 + t < p.S) {
        for (int idx = tid; idx < TK * (TC / V); idx += threads) {
          const int row = idx / (TC / V), c = idx % (TC / V) * V;
          const int count = columns - (c_base + c);
          if (kt0 + row >= Kg || count <= 0) continue;
          T v[V];
          load_vector16(tile + row * kTilePitch + c, v);
          store_run(dst + (int64_t(g) * Kg + kt0 + row) * columns + c, v, count);
        }
      }
      __syncthreads();
    }
    return;
  }
  // One channels slice, written in weight order ([K][Cg][R][S]) where it is the gradient itself.
  if (!active) return;
  const int s = s0 + tap;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int kk = kt0 + i * (TK / 2) + kq * V + j;
      if (kk >= Kg) continue;
      const int64_t k = int64_t(g) * Kg + kk;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int l = 0; l < V; ++l) {
          const int cc = ct0 + h * (TC / 2) + cq * V + l;
          if (cc < Cg) out[(k * Cg + cc) * RS + r * p.S + s] = acc[i][j][h][l];
        }
    }
}

// A tap-major partial sum ([taps][K * Cg], taps > 1) goes back to weight order ([K * Cg][taps]) as
// its slices are summed (common/slice_sum.cuh).
struct TapMajorSliceMap {
  int64_t per_tap;
  int taps;
  __device__ int64_t src(int64_t e) const { return e; }
  __device__ int64_t dst(int64_t e) const { return (e % per_tap) * taps + e / per_tap; }
};

}  // namespace
}  // namespace cuda
}  // namespace torchconv
