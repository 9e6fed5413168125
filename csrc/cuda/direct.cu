// Direct convolution on the GPU (seed 000): block tiling TX x TY x TZ over output columns, rows and
// channels, register tiling RX x RY x RK per thread, and input tiles (with their halo) and filter
// tiles staged in shared memory, kStageChannels input channels per barrier, double-buffered with
// cp.async. Zero padding happens in the tile loads, so the input is never copied. For square filters
// of size 1..13 with unit stride and dilation the filter loops are unrolled at compile time, each
// thread keeps a sliding window of an input row in registers, and input rows load in 16-byte pieces
// where the row length allows; every other shape runs the same kernel with run-time sizes.
//
// grad_input is itself a direct convolution of grad_output (filters rotated 180 degrees, C / K
// swapped), so it reuses the forward kernel; a strided layer runs one launch per output phase.
// grad_weight is a tiled kernel over filter x column tiles (a column is an input channel, or for
// layers with few channels a (channel, r, s) patch) that reduces slices of N x Ho x Wo in parallel;
// the slices are summed in a fixed order.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdlib>

#include "../conv_shape.h"
#include "../tuning.h"
#include "../workspace.h"
#include "launch.cuh"

namespace torchconv {
namespace cuda {
namespace {

// One direct-convolution launch. Padding may be negative (grad_input of a layer padded by more than
// the filter's reach), so the output extent is given, not derived. Output (oy, ox) is stored at row
// oy * out_sy + out_oy, column ox * out_sx + out_ox of an out_H x out_W plane: a strided layer's
// grad_input runs one launch per phase, each writing every stride-th pixel.
struct DirectArgs {
  const void* x;
  const void* w;
  const void* bias;
  void* y;
  int N, C, H, W;  // input
  int K, R, S;     // weight: K x C/groups x R x S
  int Ho, Wo;      // output extent
  int sh, sw, ph, pw, dh, dw;
  int groups;
  int out_H, out_W, out_sy, out_sx, out_oy, out_ox;
  // Set by the launcher. vec_input: input rows load in 16-byte pieces. col_shift: the column tiles
  // start col_shift outputs left of 0, so that every tile's first input column is 16-byte aligned
  // whatever the padding (the outputs left of 0 are computed and dropped).
  int vec_input, col_shift;
};

// The float configs (TX, TY, TZ, RX, RY, RK, blocks per SM, channels per barrier); each can be
// forced (TORCHCONV_DIRECT_TILE=<name> or torchconv._C.set_direct_tile) so it can be timed alone.
// Their names are kDirectTileNames (tuning.h), in this order.
//   wide:  64 x 16 outputs x 16 channels per block, two blocks per SM (128 registers).
//   small: 16 x 16 outputs x 32 channels, for small planes and grids short of the GPU, where wide's
//          64-column tiles would leave threads without outputs. Its thread tile is half of wide's,
//          so it stages 2 channels per barrier to keep the same work between barriers.
// (A third, wide with 4 channels per barrier, measured within 3% of wide everywhere, run 48: with
// two blocks per SM the other block already hides the barrier and the tile wait.)
using DirectWide = TileConfig<16, 8, 2, 4, 2, 8, 2, 1>;
using DirectSmall = TileConfig<8, 8, 4, 2, 2, 8, 2, 2>;
constexpr int kWide = 0, kSmall = 1;
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
  const int sh = kFixed ? 1 : a.sh, sw = kFixed ? 1 : a.sw;
  const int dh = kFixed ? 1 : a.dh, dw = kFixed ? 1 : a.dw;
  const TileGeometry<Cfg> geo(R, S, sh, sw, dh, dw);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const int channel_elems = geo.channel_elems(R, S), stage = geo.stage_elems(R, S);

  const int Cg = a.C / a.groups, Kg = a.K / a.groups;
  const int tiles_x = int(ceil_div(a.Wo + a.col_shift, Cfg::kTileW)), tiles_y = int(ceil_div(a.Ho, Cfg::kTileH));
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
  const int iy0 = oy0 * sh - a.ph, ix0 = ox0 * sw - a.pw;
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
      const bool inside = iy >= 0 && iy < a.H && ix >= 0 && ix < a.W;
      piece_src[j] = v >= kPieces ? -2 : inside ? iy * a.W + ix : -1;
    }
  }

  const int in_elems = geo.in_h * geo.in_w;
  const int rs = R * S;
  // Issues the asynchronous loads of channel c's input and filter tiles into the slot at s_in.
  auto load_channel = [&](int c, T* s_in) {
    T* s_w = s_in + geo.in_h * geo.pitch;
    const T* xc = x + (int64_t(n) * a.C + g * Cg + c) * a.H * a.W;
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
        const bool inside = iy >= 0 && iy < a.H && ix >= 0 && ix < a.W;
        cp_async_or_zero(s_in + r * geo.pitch + q, inside ? xc + int64_t(iy) * a.W + ix : xc, inside);
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
    T* yk = y + (int64_t(n) * a.K + k) * a.out_H * a.out_W + a.out_oy * a.out_W + a.out_ox;
#pragma unroll
    for (int ry = 0; ry < RY; ++ry) {
      const int oy = oy0 + ty * RY + ry;
      if (oy >= a.Ho) continue;
#pragma unroll
      for (int rx = 0; rx < RX; ++rx) {
        const int ox = ox0 + tx * RX + rx;
        if (ox >= 0 && ox < a.Wo) yk[int64_t(oy) * a.out_sy * a.out_W + ox * a.out_sx] = acc[ry][rx][rk] + b_k;
      }
    }
  }
}

// Blocks in config Cfg's grid for a launch.
template <typename Cfg>
int64_t grid_blocks(const DirectArgs& a) {
  return ceil_div(a.Wo + a.col_shift, Cfg::kTileW) * ceil_div(a.Ho, Cfg::kTileH) *
         ceil_div(a.K / a.groups, Cfg::kTileK) * int64_t(a.groups) * a.N;
}

template <typename T, typename Cfg, int KR, int KS>
void launch_direct(DirectArgs a) {
  constexpr int kVec = 16 / sizeof(T);
  // 16-byte input pieces need rows of whole pieces, an aligned input and planes addressable in 32 bits.
  a.vec_input = KR > 0 && a.W % kVec == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                int64_t(a.H) * a.W < (int64_t(1) << 31);
  a.col_shift = a.vec_input ? ((-a.pw) % kVec + kVec) % kVec : 0;
  const int64_t blocks = grid_blocks<Cfg>(a);
  if (blocks == 0) return;
  check_grid(blocks, "conv2d_direct");
  const TileGeometry<Cfg> geo(a.R, a.S, KR ? 1 : a.sh, KR ? 1 : a.sw, KR ? 1 : a.dh, KR ? 1 : a.dw);
  const size_t smem = geo.template smem_bytes<T>(a.R, a.S);
  auto kernel = direct_forward_kernel<T, Cfg, KR, KS>;
  ensure_dynamic_smem(kernel, smem, "conv2d_direct");
  kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether the filter loops of this layer are unrolled at compile time (square 1..13, odd, unit
// stride and dilation); every other layer runs the run-time-size path.
bool unrolled_filter(const DirectArgs& a) {
  const bool unit = a.sh == 1 && a.sw == 1 && a.dh == 1 && a.dw == 1;
  return unit && a.R == a.S && a.R % 2 == 1 && a.R <= 13;
}

// Launches config Cfg with the filter loops unrolled where the size is one of the compiled ones.
template <typename T, typename Cfg>
void launch_for_filter(const DirectArgs& a) {
  if (unrolled_filter(a)) {
    switch (a.R) {
      case 1: return launch_direct<T, Cfg, 1, 1>(a);
      case 3: return launch_direct<T, Cfg, 3, 3>(a);
      case 5: return launch_direct<T, Cfg, 5, 5>(a);
      case 7: return launch_direct<T, Cfg, 7, 7>(a);
      case 9: return launch_direct<T, Cfg, 9, 9>(a);
      case 11: return launch_direct<T, Cfg, 11, 11>(a);
      default: return launch_direct<T, Cfg, 13, 13>(a);
    }
  }
  launch_direct<T, Cfg, 0, 0>(a);
}

// The float config rule: the config with the larger estimated useful fraction of the GPU, where
//   useful = (outputs of the layer / outputs its tiles cover) x (blocks / block slots of the waves
//            the grid needs, at 2 blocks per SM) x (work per cycle when full),
// work per cycle: small 0.8; wide 1 with unrolled filters, 0.5 on the run-time path (its 4 strided
// columns per thread read shared memory with bank conflicts). The factors come from a sweep with
// every config forced over the resnet + yolo suites at N = 1 and 32 (benchmarks/notes-direct.md);
// on the H100 (run 51) the rule picks the faster config in 40 of 44 layers, and the worst miss
// costs 11% (Y13, N = 1).
template <typename Cfg>
double useful_fraction(const DirectArgs& a, double work_per_cycle) {
  const int64_t Kg = a.K / a.groups;
  const int64_t tx = ceil_div(a.Wo, Cfg::kTileW), ty = ceil_div(a.Ho, Cfg::kTileH), tk = ceil_div(Kg, Cfg::kTileK);
  const int64_t blocks = tx * ty * tk * a.groups * a.N;
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  const double covered = double(a.Wo) * a.Ho * Kg / (double(tx * Cfg::kTileW) * (ty * Cfg::kTileH) * (tk * Cfg::kTileK));
  const double filled = double(blocks) / double(ceil_div(blocks, slots) * slots);
  return covered * filled * work_per_cycle;
}

// Whether config Cfg's two stages fit the device's shared memory for this layer.
template <typename T, typename Cfg>
bool direct_tiles_fit(const DirectArgs& a) {
  const TileGeometry<Cfg> geo(a.R, a.S, a.sh, a.sw, a.dh, a.dw);
  return geo.template smem_bytes<T>(a.R, a.S) <= size_t(max_dynamic_smem());
}

int rule_direct_tile(const DirectArgs& a) {
  const double wide = useful_fraction<DirectWide>(a, unrolled_filter(a) ? 1.0 : 0.5);
  return useful_fraction<DirectSmall>(a, 0.8) > wide ? kSmall : kWide;
}

// Picks the tile config and the compile-time filter size: depthwise-like layers (one filter per
// group) take the one-channel tile, double its own register tile, float the forced config or
// rule_direct_tile's.
// `pass` (forward or grad_input) names the call for torchconv._C.last_choice().
template <typename T>
void run_direct(const DirectArgs& a, const char* pass) {
  const bool unit = a.sh == 1 && a.sw == 1 && a.dh == 1 && a.dw == 1;
  if (a.K / a.groups == 1) {
    record_last_choice(pass, "depthwise", 1);
    if (unit && a.R == 3 && a.S == 3) return launch_direct<T, DirectDepthwise, 3, 3>(a);
    return launch_direct<T, DirectDepthwise, 0, 0>(a);
  }
  if constexpr (std::is_same_v<T, double>) {
    record_last_choice(pass, "f64", 1);
    launch_for_filter<T, DirectWideF64>(a);
  } else {
    const int forced = forced_direct_tile();
    int config = forced >= 0 ? forced : rule_direct_tile(a);
    // small stages 2 channels of 32 filters, so filters of 21x21 and more fit only wide's tiles: the
    // rule then takes wide (a forced small raises the shared-memory error instead).
    if (forced < 0 && config == kSmall && !direct_tiles_fit<T, DirectSmall>(a)) config = kWide;
    record_last_choice(pass, kDirectTileNames[config], 1);
    if (config == kSmall) return launch_for_filter<T, DirectSmall>(a);
    launch_for_filter<T, DirectWide>(a);
  }
}

DirectArgs make_args(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& y, int sh, int sw,
                     int ph, int pw, int dh, int dw, int groups) {
  DirectArgs a;
  a.x = x.const_data_ptr();
  a.w = w.const_data_ptr();
  a.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  a.y = y.mutable_data_ptr();
  a.N = int(x.size(0)), a.C = int(x.size(1)), a.H = int(x.size(2)), a.W = int(x.size(3));
  a.K = int(w.size(0)), a.R = int(w.size(2)), a.S = int(w.size(3));
  a.Ho = int(y.size(2)), a.Wo = int(y.size(3));
  a.sh = sh, a.sw = sw, a.ph = ph, a.pw = pw, a.dh = dh, a.dw = dw, a.groups = groups;
  a.out_H = a.Ho, a.out_W = a.Wo, a.out_sy = a.out_sx = 1, a.out_oy = a.out_ox = 0;
  return a;
}

// grad_input of a strided layer whose phase grids would be short of the GPU: each thread gathers one
// input pixel (gather_grad_input in conv_shape.h, shared with the CPU kernel).
template <typename T>
__global__ void direct_grad_input_gather_kernel(const T* __restrict__ gy, const T* __restrict__ w, T* __restrict__ gx,
                                                const ConvShape p) {
  const int64_t total = p.N * p.C * p.H * p.W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ix = i % p.W, iy = (i / p.W) % p.H, c = (i / (p.W * p.H)) % p.C, n = i / (p.W * p.H * p.C);
    gx[i] = gather_grad_input(p, gy, w, n, c, iy, ix);
  }
}

// The taps of one grad_input phase along each axis (conv_shape.h: phase_axis): r = r0 + j * dr for
// j < taps_r, and likewise for s.
struct PhaseTaps {
  int r0, dr, taps_r, s0, ds, taps_s;
};

// grad_input runs as forward convolutions of grad_output (K channels in, C out), one per phase, with
// this filter: f[g * Cg + c][k][j][i] = w[g * Kg + k][c][r][s] over the phase's taps in reverse order
// (r = r0 + (taps_r - 1 - j) * dr), so the launch's taps step forward. Stride 1 has one phase with
// every tap: the filter rotated 180 degrees, C and K swapped within each group.
template <typename T>
__global__ void direct_phase_filter_kernel(const T* __restrict__ w, T* __restrict__ f, int groups, int Kg, int Cg,
                                           int R, int S, PhaseTaps m) {
  const int64_t total = int64_t(groups) * Cg * Kg * m.taps_r * m.taps_s;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = e;
    const int i = int(rest % m.taps_s);
    rest /= m.taps_s;
    const int j = int(rest % m.taps_r);
    rest /= m.taps_r;
    const int k = int(rest % Kg);
    rest /= Kg;
    const int c = int(rest % Cg);
    const int g = int(rest / Cg);
    const int r = m.r0 + (m.taps_r - 1 - j) * m.dr, s = m.s0 + (m.taps_s - 1 - i) * m.ds;
    f[e] = w[((int64_t(g) * Kg + k) * Cg + c) * R * S + r * S + s];
  }
}

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
  if (count >= V && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
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

at::Tensor conv2d_direct_cuda(const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_direct", input, weight, bias, stride, padding, dilation, groups);
  const c10::cuda::CUDAGuard guard(input.device());
  auto x = input.contiguous();
  auto w = weight.contiguous();
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  const DirectArgs a = make_args(x, w, b, y, int(p.stride_h), int(p.stride_w), int(p.pad_h), int(p.pad_w),
                                 int(p.dil_h), int(p.dil_w), int(p.groups));
  record_workspace_bytes(0);
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_cuda", [&] { run_direct<scalar_t>(a, "forward"); });
  return y;
}

// grad_input as forward launches of grad_output, one per output phase (iy mod sh, ix mod sw): phase
// pixels t receive gy[t + d0 + m * step] x w[r0 + m * dr] over the phase's taps m, which is a
// stride-1 convolution with the phase's taps reversed, dilation -step and padding -(d0 + (taps - 1) *
// step), stored to every sh-th row and sw-th column. A phase that no tap reaches (a 1x1 filter, or
// a stride larger than the filter) stays zero.
//
// Like every direct launch, a phase has no split over its reduction (K here), so phase grids short
// of the GPU leave SMs idle, where the gather has a thread per input pixel. Run 57 (phases for every
// strided layer) against the gather, per phase grid in the config with the most blocks: 4 to 49
// blocks (R1, R4, R5, R7, R10, R11 at N = 1) the gather won by 3-7x; 128 blocks and more (R4, R5,
// R7, R10, R11 at N = 32) the phases won by 1.3-5x, and R1 at N = 32 (1568 blocks of 3 useful
// channels in 32) tied. The rule: phases when the largest phase's grid has at least one block per
// two SMs (or as forced with torchconv._C.set_direct_grad_input).
template <typename T>
bool grad_input_by_phases(const ConvShape& p) {
  const int forced = forced_direct_grad_input();
  if (forced >= 0) return forced == 0;
  DirectArgs a{};
  a.N = int(p.N), a.K = int(p.C), a.groups = int(p.groups);
  a.Ho = int(ceil_div(p.H, p.stride_h)), a.Wo = int(ceil_div(p.W, p.stride_w));
  int64_t blocks;
  if (p.C / p.groups == 1) {
    blocks = grid_blocks<DirectDepthwise>(a);
  } else if constexpr (std::is_same_v<T, double>) {
    blocks = grid_blocks<DirectWideF64>(a);
  } else {
    blocks = grid_blocks<DirectSmall>(a);
  }
  return 2 * blocks >= sm_count();
}

template <typename T>
void direct_grad_input(const ConvShape& p, const at::Tensor& gy, const at::Tensor& weight, at::Tensor& gx) {
  const int sh = int(p.stride_h), sw = int(p.stride_w);
  const int64_t Kg = p.filters_per_group(), Cg = p.channels_per_group();
  if ((sh > 1 || sw > 1) && !grad_input_by_phases<T>(p)) {
    record_last_choice("grad_input", "gather", 1);
    auto w = weight.contiguous();
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(gx.numel(), threads), int64_t(sm_count()) * 32);
    direct_grad_input_gather_kernel<T><<<unsigned(blocks), threads, 0, current_stream()>>>(
        gy.const_data_ptr<T>(), w.const_data_ptr<T>(), gx.mutable_data_ptr<T>(), p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  bool any_empty = false;
  for (int py = 0; py < sh; ++py)
    for (int px = 0; px < sw; ++px)
      any_empty |= phase_axis(p.H, p.R, sh, p.pad_h, p.dil_h, py).taps == 0 ||
                   phase_axis(p.W, p.S, sw, p.pad_w, p.dil_w, px).taps == 0;
  if (any_empty || p.K == 0)
    C10_CUDA_CHECK(cudaMemsetAsync(gx.data_ptr(), 0, gx.numel() * gx.element_size(), current_stream()));
  if (p.K == 0) return;
  auto w = weight.contiguous();
  for (int py = 0; py < sh; ++py) {
    for (int px = 0; px < sw; ++px) {
      const PhaseAxis ay = phase_axis(p.H, p.R, sh, p.pad_h, p.dil_h, py);
      const PhaseAxis ax = phase_axis(p.W, p.S, sw, p.pad_w, p.dil_w, px);
      if (ay.count == 0 || ax.count == 0 || ay.taps == 0 || ax.taps == 0) continue;
      const PhaseTaps m{ay.r0, ay.dr, ay.taps, ax.r0, ax.dr, ax.taps};
      auto f = at::empty({p.C, Kg, ay.taps, ax.taps}, weight.options());
      direct_phase_filter_kernel<T><<<elementwise_blocks(f.numel(), 256), 256, 0, current_stream()>>>(
          w.const_data_ptr<T>(), f.mutable_data_ptr<T>(), int(p.groups), int(Kg), int(Cg), int(p.R), int(p.S), m);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      DirectArgs a = make_args(gy, f, at::Tensor(), gx, 1, 1, -(ay.d0 + (ay.taps - 1) * ay.step),
                               -(ax.d0 + (ax.taps - 1) * ax.step), -ay.step, -ax.step, int(p.groups));
      a.Ho = ay.count, a.Wo = ax.count;
      a.out_sy = sh, a.out_sx = sw, a.out_oy = py, a.out_ox = px;
      run_direct<T>(a, "grad_input");
    }
  }
}

at::Tensor direct_grad_input_cuda(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& weight) {
  auto gy = grad_output.contiguous();
  auto gx = new_output({p.N, p.C, p.H, p.W}, grad_output.options());
  if (gx.numel() == 0) return gx;
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "direct_grad_input_cuda", [&] { direct_grad_input<scalar_t>(p, gy, weight, gx); });
  return gx;
}

// out = sum over slices of partial[slice], in a fixed order (deterministic). A block is 32 elements
// x kSumLanes lanes: a warp reads 32 consecutive elements of one slice (coalesced), lane y adds
// slices y, y + kSumLanes, ..., and the lanes are added in lane order through shared memory, so
// layers with few weights and hundreds of slices still keep many loads in flight. A tap-major
// partial ([taps][K * Cg], taps > 1) is written back in weight order ([K * Cg][taps]).
constexpr int kSumLanes = 8;
template <typename T>
__global__ void __launch_bounds__(32 * kSumLanes) sum_weight_slices_kernel(const T* __restrict__ partial,
                                                                           T* __restrict__ out, int64_t numel,
                                                                           int slices, int taps) {
  __shared__ T lane_sums[kSumLanes][32];
  const int64_t e = blockIdx.x * int64_t(32) + threadIdx.x;
  T sum = T(0);
  if (e < numel)
    for (int s = threadIdx.y; s < slices; s += kSumLanes) sum += partial[s * numel + e];
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || e >= numel) return;
  T total = lane_sums[0][threadIdx.x];
#pragma unroll
  for (int y = 1; y < kSumLanes; ++y) total += lane_sums[y][threadIdx.x];
  const int64_t per_tap = numel / taps;
  out[(e % per_tap) * taps + e / per_tap] = total;
}

// The weight-shaped gradient from `partial` ([slices][numel], each slice in weight order, or tap-major
// over `taps` taps).
at::Tensor sum_slices(const at::Tensor& partial, const at::Tensor& weight, int taps) {
  if (partial.size(0) == 1 && taps == 1) return partial[0].view(weight.sizes());
  auto out = at::empty(weight.sizes(), weight.options());
  const int64_t numel = weight.numel();
  AT_DISPATCH_FLOATING_TYPES(partial.scalar_type(), "direct_sum_weight_slices", [&] {
    sum_weight_slices_kernel<scalar_t><<<unsigned(ceil_div(numel, 32)), dim3(32, kSumLanes), 0, current_stream()>>>(
        partial.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), numel, int(partial.size(0)), taps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

// Channels or patches for a layer's grad_weight: the columns' tile coverage, with patches counted
// at half (their input values are loaded once per tap, not once per filter row), and patches when a
// channels stage would not fit shared memory (strides of 13 and more along W).
template <typename T>
WeightGradColumns weight_grad_columns(const ConvShape& p, size_t channels_smem) {
  using Cfg = WeightGradConfig<T>;
  if (channels_smem > size_t(max_dynamic_smem())) return WeightGradColumns::kPatches;
  const int64_t Cg = p.channels_per_group(), patches = Cg * p.R * p.S;
  const int64_t patch_cols = std::min<int64_t>(Cfg::kTaps, ceil_div(patches, Cfg::TC)) * Cfg::TC;
  const double channels_cover = double(Cg) / double(ceil_div(Cg, int64_t(Cfg::TC)) * Cfg::TC);
  const double patches_cover = double(patches) / double(ceil_div(patches, patch_cols) * patch_cols);
  return patches_cover > 2 * channels_cover ? WeightGradColumns::kPatches : WeightGradColumns::kChannels;
}

// Enough slices of the stages that the grid fills every SM about four times at two blocks per SM,
// each slice at least 8 stages long, and the slices' partial sums within the workspace limit.
template <typename T>
at::Tensor direct_grad_weight_tiled(const ConvShape& p, const at::Tensor& gy, const at::Tensor& x,
                                    const at::Tensor& weight) {
  using Cfg = WeightGradConfig<T>;
  const int64_t Kg = p.filters_per_group(), Cg = p.channels_per_group();
  WeightGradArgs ch;  // the channels launch, to size its stage
  ch.taps = int(std::min<int64_t>(p.S, Cfg::kTaps));
  ch.tap_chunks = int(ceil_div(p.S, ch.taps));
  ch.x_rows = int((Cfg::TW - 1) * p.stride_w + (ch.taps - 1) * p.dil_w + 1);
  ch.x_pitch = Cfg::TC + Cfg::V;
  const auto columns = weight_grad_columns<T>(p, weight_grad_smem_bytes<T, WeightGradColumns::kChannels>(ch));
  const bool patches = columns == WeightGradColumns::kPatches;
  WeightGradArgs a = ch;
  int64_t blocks_per_slice;
  if (patches) {
    const int64_t cols = Cg * p.R * p.S;
    a.taps = int(std::min<int64_t>(Cfg::kTaps, ceil_div(cols, Cfg::TC)));
    a.tap_chunks = int(ceil_div(cols, int64_t(a.taps) * Cfg::TC));
    a.x_rows = Cfg::TW;
    a.x_pitch = a.taps * Cfg::TC + Cfg::V;
    blocks_per_slice = p.groups * ceil_div(Kg, Cfg::TK) * a.tap_chunks;
  } else {
    blocks_per_slice = p.groups * ceil_div(Kg, Cfg::TK) * ceil_div(Cg, Cfg::TC) * p.R * a.tap_chunks;
  }
  a.p = p;
  a.stages = p.N * p.Ho * ceil_div(p.Wo, Cfg::TW);
  if (a.stages == 0) return at::zeros_like(weight);  // an empty batch
  const int64_t numel = weight.numel();
  const int64_t by_limit = std::max<int64_t>(1, workspace_limit_bytes() / (numel * int64_t(sizeof(T))));
  int64_t slices = ceil_div(4 * 2 * int64_t(sm_count()), blocks_per_slice);
  slices = std::max<int64_t>(1, std::min({slices, ceil_div(a.stages, 8), by_limit, int64_t(65535)}));
  a.stages_per_slice = ceil_div(a.stages, slices);
  slices = ceil_div(a.stages, a.stages_per_slice);
  // One slice is written in weight order, in place; several channels slices go tap-major.
  a.tap_major = !patches && slices > 1;
  const int taps = a.tap_major ? int(p.R * p.S) : 1;
  const int64_t grid_x = patches ? blocks_per_slice : blocks_per_slice / (p.R * a.tap_chunks);
  check_grid(grid_x, "conv2d_direct_backward");
  auto partial = at::empty({slices, numel}, weight.options());
  record_workspace_bytes(slices > 1 ? partial.numel() * int64_t(sizeof(T)) : 0);
  record_last_choice("grad_weight", patches ? "patches" : "channels", int(slices));
  a.gy = gy.const_data_ptr(), a.x = x.const_data_ptr(), a.partial = partial.mutable_data_ptr();
  const dim3 grid(unsigned(grid_x), unsigned(slices), unsigned(patches ? 1 : p.R * a.tap_chunks));
  const auto launch = [&](auto kernel, size_t smem) {
    ensure_dynamic_smem(kernel, smem, "conv2d_direct_backward");
    kernel<<<grid, Cfg::kThreadsPerTap * a.taps, smem, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (patches)
    launch(direct_grad_weight_tiled_kernel<T, WeightGradColumns::kPatches>,
           weight_grad_smem_bytes<T, WeightGradColumns::kPatches>(a));
  else
    launch(direct_grad_weight_tiled_kernel<T, WeightGradColumns::kChannels>,
           weight_grad_smem_bytes<T, WeightGradColumns::kChannels>(a));
  return sum_slices(partial, weight, taps);
}

at::Tensor direct_grad_weight_cuda(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                   const at::Tensor& weight) {
  auto gy = grad_output.contiguous();
  auto x = input.contiguous();
  at::Tensor gw;
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "direct_grad_weight_cuda",
                             [&] { gw = direct_grad_weight_tiled<scalar_t>(p, gy, x, weight); });
  return gw;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_direct_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  const ConvShape p = check_conv2d_backward("conv2d_direct_backward", grad_output, input, weight, stride, padding,
                                            dilation, groups, output_mask);
  const c10::cuda::CUDAGuard guard(input.device());
  return {output_mask[0] ? direct_grad_input_cuda(p, grad_output, weight) : skipped_grad(input),
          output_mask[1] ? direct_grad_weight_cuda(p, grad_output, input, weight) : skipped_grad(input),
          output_mask[2] ? conv_bias_grad(grad_output) : skipped_grad(input)};
}

}  // namespace
}  // namespace cuda

TORCH_LIBRARY_IMPL(torchconv, CUDA, m) {
  m.impl("conv2d_direct", &cuda::conv2d_direct_cuda);
  m.impl("conv2d_direct_backward", &cuda::conv2d_direct_backward_cuda);
}

}  // namespace torchconv
