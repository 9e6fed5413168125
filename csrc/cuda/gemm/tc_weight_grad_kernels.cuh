// grad_weight on tensor cores (float16 / bfloat16, mma.sync m16n8k16, FP32 accumulators), device
// side. In channels_last both operands run along the reduction:
//     dW[g][k][(tap, c)] = sum over output positions p of gy[p][g, k] * x[p through tap][g, c]
// so a chunk of kBK positions is kBK rows of filters (gy) and kBK rows of (tap, channel) columns
// (x, gathered), each row copied in 16-byte words; the MMAs read both tiles transposed (ldmatrix
// .trans). The positions are split across blocks so that the grid fills the GPU; each split writes
// FP32 partial sums, which tc_weight_grad_finish_kernel adds in a fixed order (bitwise repeatable)
// and writes in the weight's dtype and memory format.
#pragma once

#include <cstdint>

#include "../common/launch.cuh"
#include "../common/mma.cuh"

namespace torchconv {
namespace cuda {

template <int kBM_, int kBN_, int kBK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_>
struct TcWeightGradConfig : MmaWarpTiling<kBM_, kBN_, kWarpsM_, kWarpsN_, kMinBlocks_> {
  static constexpr int kBK = kBK_, kStages = kStages_;
  // Rows of filters / columns (2-byte elements) padded by 16 bytes: conflict-free ldmatrix.
  static constexpr int kRowBytesA = kBM_ * 2 + 16, kRowBytesB = kBN_ * 2 + 16;
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
};

template <typename T>
struct TcWeightGradArgs {
  const T* x;   // NHWC
  const T* gy;  // NHWC
  float* partial;  // [split][group][k_pad][n_pad]
  TcWeightGrad wg;
  int m_tiles, n_tiles;
};

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    tc_weight_grad_kernel(const __grid_constant__ TcWeightGradArgs<T> a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kWordsA = Cfg::kBM / 8, kWordsB = Cfg::kBN / 8;  // 16-byte words per row
  constexpr int kARows = Cfg::kBK * kWordsA / Cfg::kThreads, kBRows = Cfg::kBK * kWordsB / Cfg::kThreads;
  constexpr int kARowStep = Cfg::kThreads / kWordsA, kBRowStep = Cfg::kThreads / kWordsB;
  static_assert(kARows >= 1 && kBRows >= 1 && Cfg::kThreads % kWordsA == 0 && Cfg::kThreads % kWordsB == 0,
                "each pass copies whole rows");
  const TcWeightGrad& wg = a.wg;
  const int tid = threadIdx.x;

  int bid = blockIdx.x;
  const int n_tile = bid % a.n_tiles;
  bid /= a.n_tiles;
  const int m_tile = bid % a.m_tiles;
  bid /= a.m_tiles;
  const int g = bid % wg.groups;
  const int split = bid / wg.groups;
  const int m0 = m_tile * Cfg::kBM, n0 = n_tile * Cfg::kBN;
  const int64_t p_begin = int64_t(split) * wg.positions_per_split;
  const int64_t p_end = min(wg.positions, p_begin + wg.positions_per_split);
  const int chunks = int((p_end - p_begin + Cfg::kBK - 1) / Cfg::kBK);

  // A: filters m0 + 8 * word_a .. of grad_output rows; B: column n0 + 8 * word_b = (tap, channel).
  const int word_a = tid % kWordsA, row_a = tid / kWordsA;
  const int word_b = tid % kWordsB, row_b = tid / kWordsB;
  const bool filter_ok = m0 + word_a * 8 < wg.Kg;
  const T* gy_base = a.gy + int64_t(g) * wg.Kg + m0 + word_a * 8;
  const int n = n0 + word_b * 8;
  const bool column_ok = n < wg.cols;
  const int tap = column_ok ? n / wg.Cg : 0, c = column_ok ? n - tap * wg.Cg : 0;
  const int r = tap / wg.S, s = tap - r * wg.S;
  const int dy = r * wg.dil_h - wg.pad_h, dx = s * wg.dil_w - wg.pad_w;
  const T* x_base = a.x + int64_t(g) * wg.Cg + c;
  const int plane = wg.Ho * wg.Wo;

  auto stage_a = [&](int st) { return smem + st * Cfg::kStageBytes; };
  auto stage_b = [&](int st) { return smem + st * Cfg::kStageBytes + Cfg::kBK * Cfg::kRowBytesA; };
  auto fetch = [&](int chunk, int st) {
    const int64_t p0 = p_begin + int64_t(chunk) * Cfg::kBK;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const int row = row_a + i * kARowStep;
      const int64_t p = p0 + row;
      const bool ok = filter_ok && p < p_end;
      cp_async_16_or_zero(stage_a(st) + row * Cfg::kRowBytesA + word_a * 16, ok ? gy_base + p * wg.K : a.gy, ok);
    }
#pragma unroll
    for (int i = 0; i < kBRows; ++i) {
      const int row = row_b + i * kBRowStep;
      const int64_t p = p0 + row;
      bool ok = column_ok && p < p_end;
      const T* src = a.x;
      if (ok) {
        const int img = int(p / plane), q = int(p - int64_t(img) * plane);
        const int oy = q / wg.Wo, ox = q - oy * wg.Wo;
        const int iy = oy * wg.stride_h + dy, ix = ox * wg.stride_w + dx;
        ok = unsigned(iy) < unsigned(wg.H) && unsigned(ix) < unsigned(wg.W);
        src = x_base + ((int64_t(img) * wg.H + iy) * wg.W + ix) * wg.C;
      }
      cp_async_16_or_zero(stage_b(st) + row * Cfg::kRowBytesB + word_b * 16, ok ? src : a.x, ok);
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp % Cfg::kWarpsM, wn = warp / Cfg::kWarpsM;
  // ldmatrix.trans row addresses: A (stored [position][filter]) rows lane % 8 + (lane / 16) * 8,
  // filter offset ((lane / 8) % 2) * 8; B (stored [position][column]) rows lane % 8 +
  // ((lane / 8) % 2) * 8, column offset (lane / 16) * 8.
  const int a_off = (lane % 8 + (lane / 16) * 8) * Cfg::kRowBytesA + (wm * Cfg::kWarpM + ((lane / 8) % 2) * 8) * 2;
  const int b_off = (lane % 8 + ((lane / 8) % 2) * 8) * Cfg::kRowBytesB + (wn * Cfg::kWarpN + (lane / 16) * 8) * 2;

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
  cp_async_wait<0>();

  float* out = a.partial + ((int64_t(split) * wg.groups + g) * wg.k_pad + m0) * wg.n_pad + n0;
#pragma unroll
  for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNTiles; ++j) {
      const int row = wm * Cfg::kWarpM + i * 16 + lane / 4, col = wn * Cfg::kWarpN + j * 8 + (lane % 4) * 2;
      *reinterpret_cast<float2*>(out + int64_t(row) * wg.n_pad + col) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(out + int64_t(row + 8) * wg.n_pad + col) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

// gw[g * Kg + k][c][r][s] (through its strides: either memory format) = sum over splits, in order,
// of the partial sums of column (r * S + s) * Cg + c.
template <typename T>
__global__ void tc_weight_grad_finish_kernel(const float* __restrict__ partial, T* __restrict__ gw, TcWeightGrad wg,
                                             int splits, int64_t sk, int64_t sc, int64_t sr, int64_t ss) {
  const int64_t total = int64_t(wg.K) * wg.cols;
  const int64_t split_stride = int64_t(wg.groups) * wg.k_pad * wg.n_pad;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int col = int(e % wg.cols);
    const int k = int(e / wg.cols);
    const int g = k / wg.Kg, kk = k - g * wg.Kg;
    const int tap = col / wg.Cg, c = col - tap * wg.Cg;
    const int r = tap / wg.S, s = tap - r * wg.S;
    const float* src = partial + (int64_t(g) * wg.k_pad + kk) * wg.n_pad + col;
    float sum = 0.f;
    for (int i = 0; i < splits; ++i) sum += src[i * split_stride];
    gw[k * sk + c * sc + r * sr + s * ss] = from_float<T>(sum);
  }
}

}  // namespace cuda
}  // namespace torchconv
