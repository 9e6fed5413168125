// Csg on the GPU, device side: the tile configs, the launch descriptors (CsgConv, CsgArgs) and the kernels: forward / grad_input, the filter re-layout and grad_weight.
// Included by csg.cu, which holds the host side (launch, rule, limits, operators).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../../conv_shape.h"
#include "../../tuning.h"
#include "../../weight_cache.h"
#include "../common/filter_relayout.cuh"
#include "../common/launch.cuh"
#include "../common/launch_map.cuh"
#include "../common/tile_gemm.cuh"

namespace torchconv {
namespace cuda {
namespace {

// Forward / grad_input block tile: warps kWarpsH x kWarpsW over the pixels, 32 lanes x kTK filters
// each, kTH x kTW pixels per thread.
template <int kWarpsH_, int kWarpsW_, int kTK_, int kTH_, int kTW_, int kMinBlocks_>
struct CsgTileConfig {
  static constexpr int kWarpsH = kWarpsH_, kWarpsW = kWarpsW_;
  static constexpr int kTK = kTK_, kTH = kTH_, kTW = kTW_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarpsH * kWarpsW;
  static constexpr int kBK = 32 * kTK, kBH = kWarpsH * kTH, kBW = kWarpsW * kTW;
};

using CsgWide = CsgTileConfig<2, 2, 4, 4, 4, 3>;    // 128 filters x 8 x 8 pixels
using CsgMedium = CsgTileConfig<2, 2, 2, 4, 4, 4>;  // 64 filters x 8 x 8
using CsgThin = CsgTileConfig<2, 4, 1, 4, 4, 2>;    // 32 filters x 8 x 16 (few filters, large planes)
using CsgF64 = CsgTileConfig<2, 2, 2, 2, 4, 2>;     // double: 64 filters x 4 x 8
constexpr const char* kConfigNames[] = {"wide", "medium", "thin"};

// kN consecutive elements from a 16-byte-aligned shared-memory address: 16-byte loads, then the
// remainder (an input row segment: every lane of a warp reads the same one, a broadcast).
template <typename T, int kN>
__device__ __forceinline__ void load_aligned_run(const T* __restrict__ src, T (&dst)[kN]) {
  constexpr int kPerWord = 16 / sizeof(T), kWords = kN / kPerWord;
  T head[kWords * kPerWord > 0 ? kWords * kPerWord : 1];
  if constexpr (kWords > 0) load_fragment<T, kWords * kPerWord>(src, head, 0);
#pragma unroll
  for (int i = 0; i < kWords * kPerWord; ++i) dst[i] = head[i];
#pragma unroll
  for (int i = kWords * kPerWord; i < kN; ++i) dst[i] = src[i];
}

// The filter rows are padded to a multiple of the widest block so every config copies whole rows.
constexpr int kFilterRowPad = 128;

// One launch (common/launch_map.cuh): out[n][g*Kg + k][y*out_sy + out_oy][x*out_sx + out_ox] (+)=
// sum over the reduction channels c of group g and the taps (j, i) of
//   F[g][c][j][i][k] * src[n][g*Cg + c][y*col_sy + col_oy + j*tap_sy][x*col_sx + col_ox + i*tap_sx]
// for (y, x) in [0, col_H) x [0, col_W). Tap steps are positive (grad_input reverses its taps).
struct CsgConv : LaunchMap {
  int Cg;         // reduction channels per group
  int Kg, k_pad;  // outputs per group, filter row length
};

template <typename T>
struct CsgArgs {
  const T* src;
  const T* filt;
  const T* bias;
  T* out;
  CsgConv cv;
  int tiles_w, tiles_h, tiles_k;
  int channels_per_split, channels_per_stage;
  int patch_w, pitch, patch_elems, stage_elems;  // pitch: patch row stride (a multiple of 4)
  bool atomic;
};

template <typename T, typename Cfg, int kS, int kSX>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) csg_conv_kernel(const CsgArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const CsgConv& cv = a.cv;
  int b = blockIdx.x;
  const int tx = b % a.tiles_w;
  b /= a.tiles_w;
  const int ty = b % a.tiles_h;
  b /= a.tiles_h;
  const int tk = b % a.tiles_k;
  b /= a.tiles_k;
  const int g = b % cv.groups;
  b /= cv.groups;
  const int n = b % cv.N, split = b / cv.N;
  const int c_begin = split * a.channels_per_split;
  const int c_count = min(cv.Cg - c_begin, a.channels_per_split);
  const int k0 = tk * Cfg::kBK, y0 = ty * Cfg::kBH, x0 = tx * Cfg::kBW;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wy = warp / Cfg::kWarpsW, wx = warp % Cfg::kWarpsW;
  const int S = kS > 0 ? kS : cv.S;
  const int RS = cv.R * S;
  const int patch_h = (Cfg::kBH - 1) * cv.col_sy + (cv.R - 1) * cv.tap_sy + 1;
  const int patch_plane = patch_h * a.patch_w;
  const int iy0 = y0 * cv.col_sy + cv.col_oy, ix0 = x0 * cv.col_sx + cv.col_ox;
  const T* src = a.src + (int64_t(n) * cv.src_C + int64_t(g) * cv.Cg + c_begin) * cv.src_H * cv.src_W;
  const T* filt = a.filt + (int64_t(g) * cv.Cg + c_begin) * RS * cv.k_pad + k0;

  auto load_stage = [&](int stage, T* buf) {
    const int c0 = stage * a.channels_per_stage;
    const int cc = min(a.channels_per_stage, c_count - c0);
    for (int e = threadIdx.x; e < cc * patch_plane; e += Cfg::kThreads) {
      const int ch = e / patch_plane, rem = e - ch * patch_plane;
      const int py = rem / a.patch_w, px = rem - py * a.patch_w;
      const int iy = iy0 + py, ix = ix0 + px;
      const bool valid = unsigned(iy) < unsigned(cv.src_H) && unsigned(ix) < unsigned(cv.src_W);
      const T* from = valid ? src + (int64_t(c0 + ch) * cv.src_H + iy) * cv.src_W + ix : src;
      cp_async_or_zero(buf + ch * a.patch_elems + py * a.pitch + px, from, valid);
    }
    constexpr int kPerWord = 16 / sizeof(T), kRowWords = Cfg::kBK / kPerWord;
    T* fbuf = buf + a.channels_per_stage * a.patch_elems;
    const T* fsrc = filt + int64_t(c0) * RS * cv.k_pad;
    for (int e = threadIdx.x; e < cc * RS * kRowWords; e += Cfg::kThreads) {
      const int row = e / kRowWords, word = e - row * kRowWords;
      cp_async_16(fbuf + row * Cfg::kBK + word * kPerWord, fsrc + int64_t(row) * cv.k_pad + word * kPerWord);
    }
  };

  T acc[Cfg::kTK][Cfg::kTH][Cfg::kTW];
#pragma unroll
  for (int t = 0; t < Cfg::kTK; ++t)
#pragma unroll
    for (int h = 0; h < Cfg::kTH; ++h)
#pragma unroll
      for (int w = 0; w < Cfg::kTW; ++w) acc[t][h][w] = T(0);

  const int sx = kSX > 0 ? kSX : cv.col_sx;
  const int stages = int(ceil_div(c_count, a.channels_per_stage));
  load_stage(0, smem);
  cp_async_commit();
  for (int st = 0; st < stages; ++st) {
    const T* buf = smem + (st & 1) * a.stage_elems;
    if (st + 1 < stages) {
      load_stage(st + 1, smem + ((st + 1) & 1) * a.stage_elems);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int cc = min(a.channels_per_stage, c_count - st * a.channels_per_stage);
    const T* fbuf = buf + a.channels_per_stage * a.patch_elems;
    for (int ch = 0; ch < cc; ++ch) {
      const T* patch = buf + ch * a.patch_elems + wy * Cfg::kTH * cv.col_sy * a.pitch + wx * Cfg::kTW * sx;
      const T* frow = fbuf + ch * RS * Cfg::kBK + lane * Cfg::kTK;
      for (int r = 0; r < cv.R; ++r) {
        const T* prow = patch + r * cv.tap_sy * a.pitch;
        const T* fr = frow + r * S * Cfg::kBK;
        if constexpr (kS > 0) {
          // One filter row in registers; each input row segment is read once for all kS taps.
          constexpr int kSeg = (Cfg::kTW - 1) * kSX + kS;
          T f[kS][Cfg::kTK];
#pragma unroll
          for (int i = 0; i < kS; ++i) load_fragment<T, Cfg::kTK>(fr + i * Cfg::kBK, f[i], 0);
#pragma unroll
          for (int h = 0; h < Cfg::kTH; ++h) {
            T seg[kSeg];
            load_aligned_run<T, kSeg>(prow + h * cv.col_sy * a.pitch, seg);
#pragma unroll
            for (int i = 0; i < kS; ++i)
#pragma unroll
              for (int w = 0; w < Cfg::kTW; ++w)
#pragma unroll
                for (int t = 0; t < Cfg::kTK; ++t) acc[t][h][w] = fma(seg[w * kSX + i], f[i][t], acc[t][h][w]);
          }
        } else {
          for (int i = 0; i < S; ++i) {
            T f[Cfg::kTK];
            load_fragment<T, Cfg::kTK>(fr + i * Cfg::kBK, f, 0);
            const T* p = prow + i * cv.tap_sx;
#pragma unroll
            for (int h = 0; h < Cfg::kTH; ++h)
#pragma unroll
              for (int w = 0; w < Cfg::kTW; ++w) {
                const T v = p[h * cv.col_sy * a.pitch + w * cv.col_sx];
#pragma unroll
                for (int t = 0; t < Cfg::kTK; ++t) acc[t][h][w] = fma(v, f[t], acc[t][h][w]);
              }
          }
        }
      }
    }
    __syncthreads();
  }

  // Write-back through shared memory (the seed's): the block's sums go in pixel-major with the
  // filter innermost, padded by one word (the reads, 32 consecutive pixels of one filter, are free of
  // bank conflicts; the writes, once per block, conflict kTK-way), so the global stores and atomics
  // run along output rows instead of across 32 filter planes per instruction.
  constexpr int kPixels = Cfg::kBH * Cfg::kBW, kLd = Cfg::kBK + 1;
#pragma unroll
  for (int t = 0; t < Cfg::kTK; ++t)
#pragma unroll
    for (int h = 0; h < Cfg::kTH; ++h)
#pragma unroll
      for (int w = 0; w < Cfg::kTW; ++w)
        smem[((wy * Cfg::kTH + h) * Cfg::kBW + wx * Cfg::kTW + w) * kLd + lane * Cfg::kTK + t] = acc[t][h][w];
  __syncthreads();
  const bool with_bias = a.bias != nullptr && split == 0;
  T* out = a.out + (int64_t(n) * cv.out_C + int64_t(g) * cv.Kg) * cv.out_H * cv.out_W;
  for (int e = threadIdx.x; e < Cfg::kBK * kPixels; e += Cfg::kThreads) {
    const int kk = e / kPixels, pix = e - kk * kPixels;
    const int k = k0 + kk, y = y0 + pix / Cfg::kBW, x = x0 + pix % Cfg::kBW;
    if (k >= cv.Kg || y >= cv.col_H || x >= cv.col_W) continue;
    const T v = smem[pix * kLd + kk] + (with_bias ? a.bias[g * cv.Kg + k] : T(0));
    T* o = out + (int64_t(k) * cv.out_H + y * cv.out_sy + cv.out_oy) * cv.out_W + x * cv.out_sx + cv.out_ox;
    if (a.atomic) atomicAdd(o, v);
    else *o = v;
  }
}

// F[g][c][j][i][o] (o padded to k_pad with zeros) from the weight K x Cg x R x S: the launch's
// reduction channels c, taps (j, i) and destination channels o (common/launch_map.cuh says which
// weight element each is; grad_input's maps number the taps backwards so the launch's steps are
// positive).
struct CsgFilterMap {
  int R, S, k_pad;
  LaunchMap m;
  __device__ int64_t src(int64_t e) const {
    const int reduction = m.reduced_per_group(), outputs = m.outputs_per_group();
    int64_t rest = e;
    const int o = int(rest % k_pad);
    rest /= k_pad;
    const int i = int(rest % m.S);
    rest /= m.S;
    const int j = int(rest % m.R);
    rest /= m.R;
    const int c = int(rest % reduction);
    const int64_t g = rest / reduction;
    if (o >= outputs) return -1;
    return weight_index(m, R, S, g, c, o, j, i);
  }
};

// grad_weight block: kWarps x kTK filters x 32 input channels (one per lane) x one filter row's
// kS taps, summed over a run of kBH x kBW pixel tiles; the runs ("splits") cover N x Ho x Wo across
// the grid and add their partial sums with atomicAdd. Every lane reads the same grad_output values
// (broadcast) and its own channel's input row (an odd channel pitch keeps the 32 lanes on 32 banks).
template <int kWarps_, int kTK_, int kBH_, int kBW_, int kMinBlocks_>
struct CsgWeightGradConfig {
  static constexpr int kWarps = kWarps_, kTK = kTK_, kBH = kBH_, kBW = kBW_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps, kBK = kWarps * kTK, kBC = 32;
};
using CsgWeightGradF32 = CsgWeightGradConfig<4, 4, 4, 8, 4>;
using CsgWeightGradF64 = CsgWeightGradConfig<4, 2, 4, 8, 2>;

template <typename T>
struct CsgWeightGradArgs {
  const T* x;
  const T* gy;
  T* gw;
  int N, C, H, W, K, Ho, Wo, Cg, Kg, groups;
  int R, S, sh, sw, ph, pw, dh, dw;
  int tiles_w, tiles_h, k_tiles, c_tiles, tap_groups;
  int64_t pixel_tiles;
  int64_t tiles_per_split;
  int patch_w, chan_pitch, stage_elems;
  bool atomic;
};

template <typename T, typename Cfg, int kS, int kSX>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) csg_weight_grad_kernel(const CsgWeightGradArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  constexpr int kTaps = kS > 0 ? kS : 1;  // taps per block along S (runtime shapes: one tap)
  int b = blockIdx.x;
  const int ct = b % a.c_tiles;
  b /= a.c_tiles;
  const int kt = b % a.k_tiles;
  b /= a.k_tiles;
  const int tap_group = b % (a.R * a.tap_groups);
  b /= a.R * a.tap_groups;
  const int g = b % a.groups;
  const int split = b / a.groups;
  const int r = tap_group / a.tap_groups, s0 = (tap_group % a.tap_groups) * kTaps;
  const int c0 = ct * Cfg::kBC, k0 = kt * Cfg::kBK;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tile_begin = split * a.tiles_per_split;
  const int64_t tile_end = min(a.pixel_tiles, tile_begin + a.tiles_per_split);
  const int tiles_plane = a.tiles_w * a.tiles_h;
  const int sx = kSX > 0 ? kSX : a.sw;

  // Stage: grad_output [kBK][kBH][kBW], then the input rows [32 channels][kBH][patch_w] at
  // chan_pitch per channel.
  auto load_stage = [&](int64_t tile, T* buf) {
    const int n = int(tile / tiles_plane), rest = int(tile % tiles_plane);
    const int oy0 = (rest / a.tiles_w) * Cfg::kBH, ox0 = (rest % a.tiles_w) * Cfg::kBW;
    constexpr int kGy = Cfg::kBK * Cfg::kBH * Cfg::kBW;
    for (int e = threadIdx.x; e < kGy; e += Cfg::kThreads) {
      const int k = e / (Cfg::kBH * Cfg::kBW), yx = e % (Cfg::kBH * Cfg::kBW);
      const int oy = oy0 + yx / Cfg::kBW, ox = ox0 + yx % Cfg::kBW;
      const bool valid = k0 + k < a.Kg && oy < a.Ho && ox < a.Wo;
      const T* from = valid ? a.gy + ((int64_t(n) * a.K + g * a.Kg + k0 + k) * a.Ho + oy) * a.Wo + ox : a.gy;
      cp_async_or_zero(buf + e, from, valid);
    }
    T* xs = buf + kGy;
    const int row_elems = Cfg::kBH * a.patch_w;
    const int ix0 = ox0 * a.sw - a.pw + s0 * a.dw;
    for (int e = threadIdx.x; e < Cfg::kBC * row_elems; e += Cfg::kThreads) {
      const int c = e / row_elems, yx = e % row_elems;
      const int yy = yx / a.patch_w, xx = yx % a.patch_w;
      const int iy = (oy0 + yy) * a.sh - a.ph + r * a.dh, ix = ix0 + xx;
      const bool valid = c0 + c < a.Cg && unsigned(iy) < unsigned(a.H) && unsigned(ix) < unsigned(a.W);
      const T* from = valid ? a.x + ((int64_t(n) * a.C + g * a.Cg + c0 + c) * a.H + iy) * a.W + ix : a.x;
      cp_async_or_zero(xs + c * a.chan_pitch + yx, from, valid);
    }
  };

  T acc[Cfg::kTK][kTaps];
#pragma unroll
  for (int t = 0; t < Cfg::kTK; ++t)
#pragma unroll
    for (int i = 0; i < kTaps; ++i) acc[t][i] = T(0);

  if (tile_begin < tile_end) {
    load_stage(tile_begin, smem);
    cp_async_commit();
  }
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const T* buf = smem + ((tile - tile_begin) & 1) * a.stage_elems;
    if (tile + 1 < tile_end) {
      load_stage(tile + 1, smem + ((tile + 1 - tile_begin) & 1) * a.stage_elems);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* gys = buf + warp * Cfg::kTK * Cfg::kBH * Cfg::kBW;
    const T* xs = buf + Cfg::kBK * Cfg::kBH * Cfg::kBW + lane * a.chan_pitch;
#pragma unroll
    for (int yy = 0; yy < Cfg::kBH; ++yy) {
      T gv[Cfg::kTK][Cfg::kBW];
#pragma unroll
      for (int t = 0; t < Cfg::kTK; ++t)
        load_fragment<T, Cfg::kBW>(gys + (t * Cfg::kBH + yy) * Cfg::kBW, gv[t], 0);
      const T* xrow = xs + yy * a.patch_w;
      if constexpr (kS > 0 && kSX > 0) {
        constexpr int kSeg = (Cfg::kBW - 1) * kSX + kS;
        T seg[kSeg];
#pragma unroll
        for (int l = 0; l < kSeg; ++l) seg[l] = xrow[l];
#pragma unroll
        for (int i = 0; i < kS; ++i)
#pragma unroll
          for (int xx = 0; xx < Cfg::kBW; ++xx)
#pragma unroll
            for (int t = 0; t < Cfg::kTK; ++t) acc[t][i] = fma(gv[t][xx], seg[xx * kSX + i], acc[t][i]);
      } else {
#pragma unroll
        for (int xx = 0; xx < Cfg::kBW; ++xx) {
          const T v = xrow[xx * sx];
#pragma unroll
          for (int t = 0; t < Cfg::kTK; ++t) acc[t][0] = fma(gv[t][xx], v, acc[t][0]);
        }
      }
    }
    __syncthreads();
  }

  const int c = c0 + lane;
  if (c >= a.Cg) return;
#pragma unroll
  for (int t = 0; t < Cfg::kTK; ++t) {
    const int k = k0 + warp * Cfg::kTK + t;
    if (k >= a.Kg) continue;
    T* dst = a.gw + ((int64_t(g) * a.Kg + k) * a.Cg + c) * a.R * a.S + r * a.S + s0;
#pragma unroll
    for (int i = 0; i < kTaps; ++i) {
      if (a.atomic) atomicAdd(dst + i, acc[t][i]);
      else dst[i] = acc[t][i];
    }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace torchconv
