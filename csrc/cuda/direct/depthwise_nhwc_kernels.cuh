// The depthwise specialist over channels_last (NHWC) tensors, device side: one launch of a
// depthwise or small-group map (kG = 1, 2 or 4 channels and as many filters per group) -- the forward
// convolution or a phase of grad_input -- in float32, float16 or bfloat16, accumulating in FP32.
//
// In NHWC a pixel's channels are contiguous, so a thread owns a vector of 4 channels and a strip of
// kStrip output columns of one row; the threads of a warp hold consecutive vectors of a pixel, so
// every load is a contiguous run of one or a few pixels' channels. There is no shared memory: a
// thread's reuse is in registers, the block's in L1 and the neighbouring rows' in L2. The filter is
// re-laid in float32, so its taps cost loads and no conversions; a launch that follows the re-layout
// on the stream starts while it runs, and each thread waits for the filter only once its first inputs
// are loading (grid_dependency_wait).
//
// Three loops over a filter row whose source row is inside the image:
// - unrolled (filter widths 3, 5, 7 at stride 1 or 2, no dilation along W): the row's input columns
//   for the whole strip load at once, then every product runs from registers;
// - the column window (any width, stride and dilation 1 along W, which includes every grad_input
//   phase of an undilated layer): a window of 2 x kStrip input vectors slides along the row,
//   kStrip taps at a time, each tap one filter vector and kStrip x kVec multiply-adds; column taps
//   whose inputs all fall in the padding are skipped, so a large filter on a small plane runs only
//   the taps that read the image;
// - anything else: every product loads its input.
// Rows whose source row is padding are skipped in all three.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../common/dependent_launch.cuh"
#include "../common/launch_map.cuh"
#include "../common/mma.cuh"

namespace torchconv {
namespace cuda {

constexpr int kDwNhwcThreads = 128;

// Channels per thread: a vector of 4 (16 bytes of float32, 8 of float16 / bfloat16). Four rather
// than eight 16-bit channels keep a thread's registers to 4-wide columns, so the strips are as long
// as float32's and each loaded input and filter value serves as many multiply-adds.
constexpr int kDwNhwcVec = 4;
// Channels per group the kernels take (each group's channels lie inside one vector): 1, 2 or 4.
constexpr int kDwNhwcMaxGroup = 4;
// The column window's strips (output columns per thread).
constexpr int kDwNhwcShortStrip = 4, kDwNhwcLongStrip = 8;

// The strip of the unrolled instances (filter width kS, stride kSx, kG channels per group): as long
// as keeps a row's input columns within 64 FP32 registers (48 with groups, whose kG filter vectors
// per tap take registers too), and at most the long strip.
constexpr int dw_nhwc_unrolled_strip(int kS, int kSx, int kG) {
  const int strip = ((kG == 1 ? 64 : 48) / kDwNhwcVec - kS) / kSx + 1;
  return strip < kDwNhwcLongStrip ? strip : kDwNhwcLongStrip;
}

// A depthwise (or small-group: kG channels and kG filters per group) launch over NHWC tensors. The
// taps run forward (tap_sy, tap_sx > 0; grad_input maps come with_reversed_taps), and Wt holds
// them as [R][S][kG][C]: Wt[i][j][q][c] multiplies destination channel c by source channel
// c - c % kG + q of its group. Threads are numbered channel vector fastest, then strip, output row
// and image, so a warp's loads are runs of whole pixels' channels.
struct DwNhwcConv : LaunchMap {
  int vecs;         // channel vectors per pixel: src_C / kVec
  int strips;       // column strips per output row: col_W / kStrip, rounded up
  int64_t threads;  // N x col_H x strips x vecs
};

template <typename T>
struct DwNhwcArgs {
  const T* src;   // N x src_H x src_W x C
  const float* wt;  // R x S x kG x C, in float32 (DwNhwcFilterMap)
  const T* bias;  // C, or null
  T* dst;         // N x out_H x out_W x C
  DwNhwcConv cv;
};

// A vector of T as FP32 values, and back (rounded to nearest). The halves of a 32-bit word are
// converted from its bits, so the vector never needs an address (no local memory).
template <typename T>
__device__ __forceinline__ void unpack_word(unsigned word, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = __uint_as_float(word);
  } else {
    const float2 v = widen_pair<T>(word);
    f[0] = v.x, f[1] = v.y;
  }
}

template <typename T>
__device__ __forceinline__ unsigned pack_word(const float* f) {
  if constexpr (std::is_same_v<T, float>) {
    return __float_as_uint(f[0]);
  } else if constexpr (std::is_same_v<T, __half>) {
    return unsigned(__half_as_ushort(__float2half_rn(f[0]))) | (unsigned(__half_as_ushort(__float2half_rn(f[1]))) << 16);
  } else {
    return unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(f[0]))) |
           (unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(f[1]))) << 16);
  }
}

template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
  } else {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    unpack_word<T>(u.x, f), unpack_word<T>(u.y, f + 2);
  }
}

template <typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
  } else {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_word<T>(f), pack_word<T>(f + 2));
  }
}

// `row`'s vector at column `col`, or zeros outside 0 .. width - 1 (the padding).
template <typename T>
__device__ __forceinline__ void load_column(const T* row, int col, int width, int64_t pitch,
                                            float (&f)[kDwNhwcVec]) {
  if (col >= 0 && col < width) {
    load_vec(row + col * pitch, f);
  } else {
#pragma unroll
    for (int v = 0; v < kDwNhwcVec; ++v) f[v] = 0.f;
  }
}

// kVec FP32 filter values (Wt is re-laid in float32, so a tap costs loads and no conversions).
template <int kVec>
__device__ __forceinline__ void load_filter(const float* p, float (&w)[kVec]) {
#pragma unroll
  for (int q = 0; q < kVec / 4; ++q) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p) + q);
    w[4 * q] = f.x, w[4 * q + 1] = f.y, w[4 * q + 2] = f.z, w[4 * q + 3] = f.w;
  }
}

// A thread's place: image n, output row cy, first channel c0 of its vector, first output column cx0
// of its strip (channel vector fastest in the thread index).
struct DwNhwcThread {
  int n, cy, c0, cx0;
};

// False for the grid's threads past the last strip.
template <int kStrip>
__device__ __forceinline__ bool dw_nhwc_thread(const DwNhwcConv& cv, DwNhwcThread& th) {
  const int64_t t = int64_t(blockIdx.x) * kDwNhwcThreads + threadIdx.x;
  if (t >= cv.threads) return false;
  int vec, strip;
  if (cv.threads <= 0x7fffffff) {  // 32-bit division where the grid allows
    unsigned u = unsigned(t);
    vec = int(u % unsigned(cv.vecs)), u /= unsigned(cv.vecs);
    strip = int(u % unsigned(cv.strips)), u /= unsigned(cv.strips);
    th.cy = int(u % unsigned(cv.col_H)), th.n = int(u / unsigned(cv.col_H));
  } else {
    int64_t rest = t;
    vec = int(rest % cv.vecs), rest /= cv.vecs;
    strip = int(rest % cv.strips), rest /= cv.strips;
    th.cy = int(rest % cv.col_H), th.n = int(rest / cv.col_H);
  }
  th.c0 = vec * kDwNhwcVec, th.cx0 = strip * kStrip;
  return true;
}

// Adds the bias to a strip's sums and stores them (columns past the launch's width are not written).
template <typename T, int kStrip>
__device__ __forceinline__ void dw_nhwc_store_strip(const DwNhwcArgs<T>& a, int n, int cy, int cx0, int c0,
                                                    float (&acc)[kStrip][kDwNhwcVec]) {
  const DwNhwcConv& cv = a.cv;
  if (a.bias != nullptr) {
#pragma unroll
    for (int v = 0; v < kDwNhwcVec; ++v) {
      const float b = to_float(a.bias[c0 + v]);
#pragma unroll
      for (int j = 0; j < kStrip; ++j) acc[j][v] += b;
    }
  }
  const int64_t C = cv.src_C;
  const int oy = cy * cv.out_sy + cv.out_oy;
  T* drow = a.dst + (int64_t(n) * cv.out_H + oy) * cv.out_W * C + c0;
#pragma unroll
  for (int j = 0; j < kStrip; ++j)
    if (cx0 + j < cv.col_W) store_vec(drow + int64_t((cx0 + j) * cv.out_sx + cv.out_ox) * C, acc[j]);
}

// kS > 0: filter rows of kS taps, stride kSx along W (1 or 2) and no dilation along W, unrolled:
//   each row's (kStrip - 1) * kSx + kS input columns load at once, then the row's products run.
// kS = 0, kSx = 1: any filter width, stride and dilation 1 along W: the column window.
// kS = 0, kSx = 0: anything else; every product loads its input.
template <typename T, int kG, int kStrip, int kS, int kSx>
__global__ void __launch_bounds__(kDwNhwcThreads, 3) depthwise_nhwc_kernel(const __grid_constant__ DwNhwcArgs<T> a) {
  constexpr int kVec = kDwNhwcVec;
  static_assert(kVec % kG == 0, "a group's channels lie inside one vector");
  static_assert(kG == 1 || kS > 0 || kSx == 0, "groups run the unrolled or the per-product instances");
  const DwNhwcConv& cv = a.cv;
  DwNhwcThread th;
  if (!dw_nhwc_thread<kStrip>(cv, th)) return;
  const auto [n, cy, c0, cx0] = th;
  const int64_t C = cv.src_C;

  float acc[kStrip][kVec];
#pragma unroll
  for (int j = 0; j < kStrip; ++j)
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[j][v] = 0.f;

  // The filter rows whose source row is inside the image.
  const int iy0 = cy * cv.col_sy + cv.col_oy;
  const int i_lo = iy0 >= 0 ? 0 : (-iy0 + cv.tap_sy - 1) / cv.tap_sy;
  const int i_hi = iy0 >= cv.src_H ? 0 : min(cv.R, (cv.src_H - iy0 + cv.tap_sy - 1) / cv.tap_sy);
  for (int i = i_lo; i < i_hi; ++i) {
    const T* xrow = a.src + (int64_t(n) * cv.src_H + iy0 + i * cv.tap_sy) * cv.src_W * C + c0;
    const float* wrow = a.wt + int64_t(i) * cv.S * kG * C + c0;
    if constexpr (kS > 0) {
      constexpr int kCols = (kStrip - 1) * kSx + kS;
      const int ix0 = cx0 * kSx + cv.col_ox;
      float win[kCols][kVec];
#pragma unroll
      for (int k = 0; k < kCols; ++k) load_column(xrow, ix0 + k, cv.src_W, C, win[k]);
      grid_dependency_wait();  // the filter (launched after its re-layout: depthwise_nhwc.cu)
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int q = 0; q < kG; ++q) {
          float w[kVec];
          load_filter(wrow + (s * kG + q) * C, w);
#pragma unroll
          for (int j = 0; j < kStrip; ++j)
#pragma unroll
            for (int v = 0; v < kVec; ++v) acc[j][v] = fmaf(w[v], win[j * kSx + s][v - v % kG + q], acc[j][v]);
        }
    } else if constexpr (kSx == 1) {
      // Output j reads column ix0 + j + s through tap s; the taps some output reads the image with:
      const int ix0 = cx0 + cv.col_ox;
      const int s_lo = max(0, -ix0 - (kStrip - 1)), s_hi = min(cv.S, cv.src_W - ix0);
      // win[k] holds column ix0 + s0 + k while the taps s0 .. s0 + kStrip - 1 run.
      float win[2 * kStrip][kVec];
#pragma unroll
      for (int k = 0; k < kStrip; ++k) load_column(xrow, ix0 + s_lo + k, cv.src_W, C, win[k]);
      grid_dependency_wait();
      for (int s0 = s_lo; s0 < s_hi; s0 += kStrip) {
#pragma unroll
        for (int k = 0; k < kStrip; ++k)  // column s0 + kStrip + k serves taps s0 + k + 1 and later
          if (s0 + k + 1 < s_hi) load_column(xrow, ix0 + s0 + kStrip + k, cv.src_W, C, win[kStrip + k]);
#pragma unroll
        for (int u = 0; u < kStrip; ++u) {
          if (s0 + u < s_hi) {
            float w[kVec];
            load_filter(wrow + (s0 + u) * C, w);
#pragma unroll
            for (int j = 0; j < kStrip; ++j)
#pragma unroll
              for (int v = 0; v < kVec; ++v) acc[j][v] = fmaf(w[v], win[j + u][v], acc[j][v]);
          }
        }
#pragma unroll
        for (int k = 0; k < kStrip; ++k)
#pragma unroll
          for (int v = 0; v < kVec; ++v) win[k][v] = win[kStrip + k][v];
      }
    } else {
      const int ix0 = cx0 * cv.col_sx + cv.col_ox, span = (kStrip - 1) * cv.col_sx;
      grid_dependency_wait();
      for (int s = 0; s < cv.S; ++s) {
        const int ix = ix0 + s * cv.tap_sx;
        if (ix + span < 0 || ix >= cv.src_W) continue;
        float w[kG][kVec];
#pragma unroll
        for (int q = 0; q < kG; ++q) load_filter(wrow + (s * kG + q) * C, w[q]);
#pragma unroll
        for (int j = 0; j < kStrip; ++j) {
          float x[kVec];
          load_column(xrow, ix + j * cv.col_sx, cv.src_W, C, x);
#pragma unroll
          for (int q = 0; q < kG; ++q)
#pragma unroll
            for (int v = 0; v < kVec; ++v) acc[j][v] = fmaf(w[q][v], x[v - v % kG + q], acc[j][v]);
        }
      }
    }
  }

  dw_nhwc_store_strip<T, kStrip>(a, n, cy, cx0, c0, acc);
}

// The rows kernel's strip: 3x3 at stride 1 keeps the long strip (128 registers); at stride 2 the
// per-row kernel's strip of 7 would hold 3 x 15 input columns, 90 registers of raw words alone, so
// the strip is 2 (62 registers, a grid of many short threads); 5x5 rows hold 5 x 8 (stride 1) or
// 5 x 11 (stride 2) columns at a strip of 4.
constexpr int dw_nhwc_rows_strip(int kR, int kSx) { return kR == 3 ? (kSx == 1 ? kDwNhwcLongStrip : 2) : 4; }

// The raw bits of a channel vector (16 bytes of float32, 8 of float16 / bfloat16), widened where used.
template <typename T>
using DwNhwcRaw = std::conditional_t<std::is_same_v<T, float>, float4, uint2>;

template <typename T>
__device__ __forceinline__ DwNhwcRaw<T> load_raw(const T* row, int col, int width, int64_t pitch, bool row_inside) {
  if (row_inside && col >= 0 && col < width) return __ldg(reinterpret_cast<const DwNhwcRaw<T>*>(row + col * pitch));
  return DwNhwcRaw<T>{};
}

template <typename T>
__device__ __forceinline__ void widen_raw(const DwNhwcRaw<T>& r, float (&f)[kDwNhwcVec]) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = r.x, f[1] = r.y, f[2] = r.z, f[3] = r.w;
  } else {
    unpack_word<T>(r.x, f), unpack_word<T>(r.y, f + 2);
  }
}

// The raw bits of kVec channels: a DwNhwcRaw for 4, one 16-byte word for 8 16-bit channels.
template <typename T, int kVec>
using DwNhwcRawN = std::conditional_t<kVec == kDwNhwcVec, DwNhwcRaw<T>, uint4>;

template <typename T, int kVec>
__device__ __forceinline__ DwNhwcRawN<T, kVec> load_raw_n(const T* row, int col, int width, int64_t pitch) {
  if constexpr (kVec == kDwNhwcVec) {
    return load_raw(row, col, width, pitch, true);
  } else {
    static_assert(kVec == 8 && !std::is_same_v<T, float>, "8-channel vectors are 16-byte words of 16-bit values");
    if (col >= 0 && col < width) return __ldg(reinterpret_cast<const uint4*>(row + col * pitch));
    return uint4{};
  }
}

template <typename T, int kVec>
__device__ __forceinline__ void widen_raw_n(const DwNhwcRawN<T, kVec>& r, float (&f)[kVec]) {
  if constexpr (kVec == kDwNhwcVec) {
    widen_raw<T>(r, f);
  } else {
    unpack_word<T>(r.x, f), unpack_word<T>(r.y, f + 2), unpack_word<T>(r.z, f + 4), unpack_word<T>(r.w, f + 6);
  }
}

// Depthwise filters of kR x kS taps at stride kSx along W (1 or 2), no dilation along W: every
// filter row's input columns for the strip, (kStrip - 1) * kSx + kS vectors a row, load before any
// product runs, so a thread waits for its loads once rather than once per filter row (the loads of
// all kR rows are in flight together); rows and columns in the padding load zeros. The rows are held
// as loaded (16-bit words) and widened a row at a time, so 16-bit inputs take half the registers
// float32's would: the 16-bit instances use it (depthwise_nhwc.cu).
// With kG > 1 (groups of kG channels and kG filters) a tap is kG filter vectors, each multiplying the
// vector's source channels permuted within their group, as in the per-row kernel.
template <typename T, int kG, int kStrip, int kR, int kS, int kSx>
__global__ void __launch_bounds__(kDwNhwcThreads) depthwise_nhwc_rows_kernel(const __grid_constant__ DwNhwcArgs<T> a) {
  constexpr int kVec = kDwNhwcVec, kCols = (kStrip - 1) * kSx + kS;
  static_assert(kVec % kG == 0, "a group's channels lie inside one vector");
  const DwNhwcConv& cv = a.cv;
  DwNhwcThread th;
  if (!dw_nhwc_thread<kStrip>(cv, th)) return;
  const auto [n, cy, c0, cx0] = th;
  const int64_t C = cv.src_C;
  const int iy0 = cy * cv.col_sy + cv.col_oy, ix0 = cx0 * kSx + cv.col_ox;

  DwNhwcRaw<T> raw[kR][kCols];
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int iy = iy0 + i * cv.tap_sy;
    const bool inside = iy >= 0 && iy < cv.src_H;
    const T* xrow = a.src + (int64_t(n) * cv.src_H + (inside ? iy : 0)) * cv.src_W * C + c0;
#pragma unroll
    for (int k = 0; k < kCols; ++k) raw[i][k] = load_raw(xrow, ix0 + k, cv.src_W, C, inside);
  }
  grid_dependency_wait();  // the filter, with the inputs' loads in flight

  float acc[kStrip][kVec];
#pragma unroll
  for (int j = 0; j < kStrip; ++j)
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[j][v] = 0.f;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    float win[kCols][kVec];
#pragma unroll
    for (int k = 0; k < kCols; ++k) widen_raw<T>(raw[i][k], win[k]);
#pragma unroll
    for (int s = 0; s < kS; ++s)
#pragma unroll
      for (int q = 0; q < kG; ++q) {
        float w[kVec];
        load_filter(a.wt + ((i * kS + s) * kG + q) * C + c0, w);
#pragma unroll
        for (int j = 0; j < kStrip; ++j)
#pragma unroll
          for (int v = 0; v < kVec; ++v) acc[j][v] = fmaf(w[v], win[j * kSx + s][v - v % kG + q], acc[j][v]);
      }
  }
  dw_nhwc_store_strip<T, kStrip>(a, n, cy, cx0, c0, acc);
}

// The filters of up to kDwNhwcMaxLaunches launches of one layer (a forward's, or a strided
// grad_input's phases), one after the other, each laid [R][S][kG][C] as the kernels read it:
// Wt[i][j][q][c] = the weight element behind launch tap (i, j) between destination channel c and
// source channel c - c % kG + q (relayout_filter's map; the weight is K x C/groups x Rw x Sw with
// C/groups = K/groups = kG, read through its strides in any layout). One relayout kernel serves
// every phase; the launches differ only in their taps.
constexpr int kDwNhwcMaxLaunches = 16;

// The elements of launch `l`'s filter, R x S x kG x C.
inline int64_t dw_nhwc_filter_elements(const LaunchMap& l) {
  return int64_t(l.R) * l.S * l.reduced_per_group() * l.out_C;
}

struct DwNhwcFilterMap {
  struct Taps {
    int S, r0, dr, s0, ds;
  };
  WeightStrides w;
  LaunchMap m;  // the launches' shared fields: groups, channels, transposed
  int launches;
  int64_t end[kDwNhwcMaxLaunches];  // where launch l's filter ends
  Taps taps[kDwNhwcMaxLaunches];

  // Appends launch `l`'s taps (host side).
  void add(const LaunchMap& l) {
    taps[launches] = {l.S, l.tap_r0, l.tap_dr, l.tap_s0, l.tap_ds};
    end[launches] = (launches > 0 ? end[launches - 1] : 0) + dw_nhwc_filter_elements(l);
    ++launches;
  }
  __device__ int64_t src(int64_t e) const {
    int l = 0;
    while (l + 1 < launches && e >= end[l]) ++l;
    if (l > 0) e -= end[l - 1];
    LaunchMap ml = m;
    ml.S = taps[l].S, ml.tap_r0 = taps[l].r0, ml.tap_dr = taps[l].dr, ml.tap_s0 = taps[l].s0, ml.tap_ds = taps[l].ds;
    const int group = ml.reduced_per_group(), c = int(e % ml.out_C);
    const int64_t rest = e / ml.out_C;
    const int q = int(rest % group), tap = int(rest / group);
    return weight_offset(ml, w, c / group, q, c % group, tap / ml.S, tap % ml.S);
  }
};

// grad_weight over NHWC tensors of a depthwise or small-group layer (kG channels and kG filters per
// group): for destination channel c and source channel q of its group,
//   dW[c][q][r][s] = sum over n, oy, ox of gy[n][oy][ox][c] * x[n][iy][ix][c - c % kG + q],
// iy = oy * sh - ph + r * dh, ix = ox * sw - pw + s * dw. A thread owns a channel vector (kVec
// channels: 4, or 8 16-bit ones as one 16-byte word), a filter row r and a slice of the N x Ho output
// rows, and keeps the row's S x kG x kVec sums in registers (S x kG at most kDwNhwcGradSums). Each
// slice's sums go to partial[slice][r][s][q][c]; the slices are added in a fixed order afterwards
// (deterministic). A channel's sums run in the same order at either vector width.
constexpr int kDwNhwcGradSums = 12;

// The sliding grad_weight's run (output pixels whose loads issue together) for rows of kS taps at
// stride kSw, kG channels per group, and the blocks an SM its launch bounds ask for. The window's
// slots rotate over kS x kRun pixels a loop step, so a run costs registers for its raw words and
// code, not register moves. Measured per layer (docs/depthwise.md): at stride 1, 8 pixels for 16-bit
// depthwise rows of 5 or 7 taps, 4 for float32's and for 16-bit 3-tap rows, 2 for float32 3-tap
// rows, 4 for groups; at stride 2, 2 for depthwise rows of 3 or 5 taps (float32's 3-tap rows 1). The
// 3-tap and strided 3- or 5-tap depthwise instances ran faster asking for 5 blocks an SM (the same
// registers, scheduled otherwise); the others as they come. Vectors of 8 channels (rows of 5 or 7
// taps at stride 1, dw_nhwc_grad_weight_vector) load twice the bytes a word: 2 pixels a run.
constexpr int dw_nhwc_grad_weight_run(int kS, int kSw, int kG, bool float32, int kVec = kDwNhwcVec) {
  if (kVec != kDwNhwcVec) return 2;
  if (kSw == 2) return kG == 1 && kS <= 5 && !(float32 && kS == 3) ? 2 : 1;
  if (kG != 1) return 4;
  if (kS == 3) return float32 ? 2 : 4;
  return float32 ? 4 : 8;
}
// The channels a grad_weight thread owns: 8 for 16-bit depthwise rows of 5 or 7 taps at stride and
// dilation 1 along W over a multiple of 8 channels (half the loads and their addressing a product;
// measured faster on the 5- and 7-tap layers of small planes, docs/depthwise.md), 4 otherwise.
constexpr int dw_nhwc_grad_weight_vector(int S, int sw, int dw, int group, bool float32, int64_t C) {
  return !float32 && group == 1 && sw == 1 && dw == 1 && (S == 5 || S == 7) && C % 8 == 0 ? 8 : kDwNhwcVec;
}
constexpr int dw_nhwc_grad_weight_min_blocks(int kS, int kSw, int kG) {
  return kG == 1 && kS <= 5 && (kSw == 2 || kS == 3) ? 5 : 1;
}

struct DwNhwcWeightGrad {
  int N, C, H, W, Ho, Wo, R, S, sh, sw, ph, pw, dh, dw;
  int vecs, rows_per_slice, slices;
  int64_t threads;  // vecs x R x slices
};

template <typename T>
struct DwNhwcWeightGradArgs {
  const T* x;   // N x H x W x C
  const T* gy;  // N x Ho x Wo x C
  float* partial;
  DwNhwcWeightGrad g;
};

// kS > 0: filter rows of kS taps at stride kSw (1 or 2) and dilation 1 along W, whose inputs slide
// through a register window (kSw new input vectors per output pixel into the slots of columns no
// later pixel reads, the rest kept where they are); the new inputs and the gradients of kRun output
// pixels load (as raw words) before their products, so a thread waits on its loads once a run rather
// than once a pixel. kS = 0: any row of at most kDwNhwcGradSums / kG taps, each product loading its
// input.
template <typename T, int kG, int kS, int kSw = 1, int kRun = 1, int kVec = kDwNhwcVec>
__global__ void __launch_bounds__(kDwNhwcThreads, dw_nhwc_grad_weight_min_blocks(kS, kSw, kG))
    depthwise_nhwc_grad_weight_kernel(
    const __grid_constant__ DwNhwcWeightGradArgs<T> a) {
  constexpr int kTaps = kS > 0 ? kS : kDwNhwcGradSums / kG;
  static_assert(kDwNhwcVec % kG == 0 && kTaps * kG <= kDwNhwcGradSums, "sums a thread keeps");
  static_assert(kVec == kDwNhwcVec || kS > 0, "vectors of 8 channels only in the sliding window");
  const DwNhwcWeightGrad& g = a.g;
  const int64_t t = int64_t(blockIdx.x) * kDwNhwcThreads + threadIdx.x;
  if (t >= g.threads) return;
  const int vec = int(t % g.vecs);
  const int64_t rest = t / g.vecs;
  const int r = int(rest % g.R), slice = int(rest / g.R);
  const int64_t C = g.C;
  const int c0 = vec * kVec;
  float acc[kTaps][kG][kVec];
#pragma unroll
  for (int s = 0; s < kTaps; ++s)
#pragma unroll
    for (int q = 0; q < kG; ++q)
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[s][q][v] = 0.f;
  // acc[s][q] += d * x, with x's channels permuted within each group (source channel q).
  auto accumulate = [&](float (&sum)[kG][kVec], const float (&d)[kVec], const float (&x)[kVec]) {
#pragma unroll
    for (int q = 0; q < kG; ++q)
#pragma unroll
      for (int v = 0; v < kVec; ++v) sum[q][v] = fmaf(d[v], x[v - v % kG + q], sum[q][v]);
  };

  const int64_t rows = int64_t(g.N) * g.Ho, row0 = int64_t(slice) * g.rows_per_slice;
  const int64_t row1 = min(rows, row0 + g.rows_per_slice);
  for (int64_t row = row0; row < row1; ++row) {
    const int n = int(row / g.Ho), oy = int(row - int64_t(n) * g.Ho);
    const int iy = oy * g.sh - g.ph + r * g.dh;
    if (iy < 0 || iy >= g.H) continue;
    const T* gyrow = a.gy + row * g.Wo * C + c0;
    const T* xrow = a.x + (int64_t(n) * g.H + iy) * g.W * C + c0;
    if constexpr (kS > 0) {
      // Input column i (counted from -pw) sits in win[i % kS] while it is in the window, so the
      // window slides by which slots the products read, not by moving registers: output column ox
      // reads columns ox * kSw + s and loads the kNew columns past the kKept it shares with ox - 1,
      // into the slots of columns no later pixel reads. The loop takes kGroup pixels a step, a whole
      // period of the slots (kS pixels) and a whole number of runs, so every slot is a constant.
      static_assert(kSw == 1 || kSw == 2, "strides the window slides by");
      constexpr int kKept = kS > kSw ? kS - kSw : 0;
      constexpr int kNew = kS - kKept;  // input columns a pixel loads
      constexpr int kGroup = kS * kRun;
      float win[kS][kVec];
#pragma unroll
      for (int k = 0; k < kKept; ++k) {
        if constexpr (kVec == kDwNhwcVec) load_column(xrow, k - g.pw, g.W, C, win[k]);
        else widen_raw_n<T, kVec>(load_raw_n<T, kVec>(xrow, k - g.pw, g.W, C), win[k]);
      }
      for (int ox0 = 0; ox0 < g.Wo; ox0 += kGroup) {
#pragma unroll
        for (int j0 = 0; j0 < kGroup; j0 += kRun) {
          if (ox0 + j0 >= g.Wo) break;
          DwNhwcRawN<T, kVec> xr[kRun][kNew], dr[kRun];
#pragma unroll
          for (int j = 0; j < kRun; ++j) {
#pragma unroll
            for (int k = 0; k < kNew; ++k)
              xr[j][k] = load_raw_n<T, kVec>(xrow, (ox0 + j0 + j) * kSw - g.pw + kKept + k, g.W, C);
            dr[j] = load_raw_n<T, kVec>(gyrow, ox0 + j0 + j, g.Wo, C);
          }
#pragma unroll
          for (int j = 0; j < kRun; ++j) {
            if (kRun > 1 && ox0 + j0 + j >= g.Wo) break;
            const int first = (j0 + j) * kSw;  // the pixel's first column, relative to the group's
#pragma unroll
            for (int k = 0; k < kNew; ++k) widen_raw_n<T, kVec>(xr[j][k], win[(first + kKept + k) % kS]);
            float d[kVec];
            widen_raw_n<T, kVec>(dr[j], d);
#pragma unroll
            for (int s = 0; s < kS; ++s) accumulate(acc[s], d, win[(first + s) % kS]);
          }
        }
      }
    } else {
      for (int ox = 0; ox < g.Wo; ++ox) {
        float d[kDwNhwcVec];
        load_vec(gyrow + ox * C, d);
        const int ix0 = ox * g.sw - g.pw;
#pragma unroll
        for (int s = 0; s < kTaps; ++s) {
          const int ix = ix0 + s * g.dw;
          if (s < g.S && ix >= 0 && ix < g.W) {
            float x[kDwNhwcVec];
            load_vec(xrow + ix * C, x);
            accumulate(acc[s], d, x);
          }
        }
      }
    }
  }
  float* out = a.partial + ((int64_t(slice) * g.R + r) * g.S) * kG * C + c0;
#pragma unroll
  for (int s = 0; s < kTaps; ++s)
#pragma unroll
    for (int q = 0; q < kG; ++q)
#pragma unroll
      for (int v = 0; v < kVec; v += 4)
        if (s < g.S)
          *reinterpret_cast<float4*>(out + (s * kG + q) * C + v) =
              make_float4(acc[s][q][v], acc[s][q][v + 1], acc[s][q][v + 2], acc[s][q][v + 3]);
}

// A slice laid out [r][s][q][c] into the weight-ordered gradient (c, q, r, s): e walks the slice, so
// a warp's loads are consecutive channels (the stores, one an element, are the scattered side).
struct DwNhwcSliceMap {
  int taps, group, C;
  __device__ int64_t src(int64_t e) const { return e; }
  __device__ int64_t dst(int64_t e) const {
    const int64_t tap_q = e / C;
    const int c = int(e - tap_q * C), tap = int(tap_q / group), q = int(tap_q - int64_t(tap) * group);
    return (int64_t(c) * group + q) * taps + tap;
  }
};

}  // namespace cuda
}  // namespace torchconv
