// The direct algorithm's depthwise / small-group specialist, device side: a forward kernel (also
// every grad_input phase) and a grad_weight kernel for launches whose groups are small (plans.h:
// small_groups -- depthwise with any channel multiplier, grouped convolutions with few channels per
// group). Included by direct.cu, which picks it (docs/depthwise.md gives the bounds and the design).
//
// Unstaged forward: for small square filters on memory-bound layers, threads read the input through L1
// with no shared memory and no barrier (depthwise_unstaged_forward_kernel, below the staged kernel).
//
// Forward: a block owns one output channel, a band of output rows and a few images; it stages each
// reduced channel's zero-padded input patch and filter in shared memory, and every thread keeps a
// RY x kDwRX tile of outputs in registers. With unit dilation along W a thread slides a window of
// input values through registers kDwKC filter taps at a time (16-byte loads, no reload of the
// overlap), so a chunk costs two input loads per 32 multiply-adds; a stride along W runs the same
// window over each column phase (the patch is stored de-interleaved); a dilation along W reads each
// product's input from shared memory. Taps whose input rows or columns lie wholly in the
// padding are skipped, which is most taps of a large filter on a small plane.
//
// grad_weight: dW[k][c][r][s] = sum over n, oy, ox of gy[n][k][oy][ox] * x[n][c][iy(oy, r)][ix(ox, s)].
// A block owns one (filter, channel) pair and a run of images ("split"); each thread owns a
// kDwTR x kDwTS tile of taps and a share of the output pixels, slides the input through registers as
// the forward does, and the block sums its threads' tiles in a fixed order; the splits' partial sums
// are added in a fixed order by the shared slice sum, so the result is deterministic.
#pragma once

#include <cstdint>

#include "../common/fast_divisor.cuh"
#include "../common/launch.cuh"
#include "../common/launch_map.cuh"

namespace torchconv {
namespace cuda {
namespace {

constexpr int kDwThreads = 256;     // most threads per block
// forward: output columns per thread (rows per thread, 2, 4 or 8, are a template parameter the host
// picks per launch). Four columns put the 16-byte window loads of the eight lanes of a quarter-warp
// (consecutive column tiles) on distinct banks.
constexpr int kDwRX = 4;
constexpr int kDwKC = 8;            // filter taps per register chunk (forward), pixels per chunk (grad_weight)
constexpr int kDwTR = 4, kDwTS = 8;  // grad_weight: filter rows x columns per thread
constexpr size_t kDwSmemBudget = 64 * 1024;  // per block, so that three blocks share an SM
constexpr int kDwMaxPhases = 2;     // column phases the window path takes (strides 1 and 2 along W)

TORCHCONV_HOST_DEVICE int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
TORCHCONV_HOST_DEVICE int ceil_div_int(int a, int b) { return -floor_div(-a, b); }

// The forward launch's geometry, chosen on the host (depthwise_forward_geometry in direct.cu).
// A strided layer's patch rows are stored de-interleaved by column phase (column c at phase c mod
// stride, index c / stride), and the filter likewise (tap s in phase s mod stride): each phase is then
// a stride-1 convolution of its columns with its taps, which the register window runs.
struct DwForwardGeometry {
  int ry;                // output rows per thread
  int tiles_x, tiles_y;  // thread tiles across the plane and down a band
  int band_h, bands;     // output rows per band, bands per plane
  int images, image_groups;
  int phases;            // column phases: the stride along W on the window path, 1 otherwise
  int s_pad;             // taps per phase row, padded to whole chunks with zeros
  int patch_h;           // one image's input patch rows: the band's reach, clipped to the plane
  int phase_pitch;       // elements per phase of a patch row (a multiple of 16 bytes)
  int pitch;             // phases * phase_pitch
  int filter_elems;      // R * phases * s_pad, rounded to 16 bytes
};

// Valid taps along one axis for outputs o in [o0, o0 + count): taps t in [lo, hi] read
// o * step + origin + t * dil inside [0, len) for at least one o. Empty when lo > hi.
struct TapRange {
  int lo, hi;
};
__device__ __forceinline__ TapRange valid_taps(int o0, int count, int step, int origin, int dil, int len, int taps) {
  const int first = o0 * step + origin, last = (o0 + count - 1) * step + origin;
  TapRange t;
  t.lo = max(0, ceil_div_int(-last, dil));
  t.hi = min(taps - 1, floor_div(len - 1 - first, dil));
  return t;
}

// kN consecutive elements from a 16-byte-aligned shared-memory address, in 16-byte loads, into
// dst[0, kN) (a register array once inlined: every index is a compile-time constant).
template <typename T, int kN>
__device__ __forceinline__ void load_run(const T* __restrict__ src, T* dst) {
  constexpr int kPerWord = 16 / int(sizeof(T));
  static_assert(kN % kPerWord == 0, "whole 16-byte words");
#pragma unroll
  for (int v = 0; v < kN / kPerWord; ++v) {
    if constexpr (sizeof(T) == 4) {
      const float4 q = reinterpret_cast<const float4*>(src)[v];
      dst[4 * v + 0] = q.x, dst[4 * v + 1] = q.y, dst[4 * v + 2] = q.z, dst[4 * v + 3] = q.w;
    } else {
      const double2 q = reinterpret_cast<const double2*>(src)[v];
      dst[2 * v + 0] = q.x, dst[2 * v + 1] = q.y;
    }
  }
}

// Starts copying one plane's patch to dst with cp.async, de-interleaved by column phase when P > 1:
// element (row, p, i) of dst[rows][P][phase_pitch] is plane[iy0 + row][ix0 + i * P + p] (zero
// outside the plane). Wide patches take a warp per row, lanes along the source row (coalesced);
// narrow ones (a 7x7 plane) a flat loop, so every lane has work. Every copy is in flight at once;
// the caller commits and waits.
template <typename T, int P>
__device__ __forceinline__ void stage_patch(T* __restrict__ dst, const T* __restrict__ plane, int iy0, int ix0,
                                            int rows, int phase_pitch, int H, int W) {
  const int pitch = P * phase_pitch;
  if (pitch >= 32) {
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int row = warp; row < rows; row += warps) {
      const int iy = iy0 + row;
      const bool row_in = iy >= 0 && iy < H;
      const T* src = plane + int64_t(row_in ? iy : 0) * W;
      T* d = dst + row * pitch;
      for (int c = lane; c < pitch; c += 32) {
        const int ix = ix0 + c;
        const bool in = row_in && ix >= 0 && ix < W;
        cp_async_or_zero(d + (c % P) * phase_pitch + c / P, in ? src + ix : plane, in);
      }
    }
  } else {
    for (int e = threadIdx.x; e < rows * pitch; e += blockDim.x) {
      const int row = e / pitch, c = e - row * pitch;
      const int iy = iy0 + row, ix = ix0 + c;
      const bool in = iy >= 0 && iy < H && ix >= 0 && ix < W;
      cp_async_or_zero(dst + row * pitch + (c % P) * phase_pitch + c / P, in ? plane + int64_t(iy) * W + ix : plane,
                       in);
    }
  }
}

// As stage_patch, for `images` planes plane_stride elements apart into patches dst_stride apart. A
// block with many small planes (32 images of 7x7) stages them in one flat loop instead of a pass per
// image, most of whose threads would idle.
template <typename T, int P>
__device__ __forceinline__ void stage_patches(T* __restrict__ dst, int64_t dst_stride, const T* __restrict__ plane,
                                              int64_t plane_stride, int images, int iy0, int ix0, int rows,
                                              int phase_pitch, int H, int W) {
  const int pitch = P * phase_pitch, per_image = rows * pitch;
  if (images == 1 || pitch >= 64) {
    for (int im = 0; im < images; ++im)
      stage_patch<T, P>(dst + im * dst_stride, plane + im * plane_stride, iy0, ix0, rows, phase_pitch, H, W);
    return;
  }
  for (int e = threadIdx.x; e < images * per_image; e += blockDim.x) {
    const int im = e / per_image, rem = e - im * per_image;
    const int row = rem / pitch, c = rem - row * pitch;
    const int iy = iy0 + row, ix = ix0 + c;
    const bool in = iy >= 0 && iy < H && ix >= 0 && ix < W;
    const T* src = plane + im * plane_stride;
    cp_async_or_zero(dst + im * dst_stride + row * pitch + (c % P) * phase_pitch + c / P,
                     in ? src + int64_t(iy) * W + ix : src, in);
  }
}

__device__ __forceinline__ void finish_staging() {
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}

// kPhases 1 or 2: unit dilation along W and that stride along W (any stride and dilation along H),
// run by the register window over each column phase; 0: every product reads shared memory.
template <typename T, int RY, int kPhases>
__global__ void __launch_bounds__(kDwThreads) depthwise_forward_kernel(const DirectArgs a, const DwForwardGeometry geo) {
  extern __shared__ __align__(16) unsigned char dw_smem[];
  T* filt = reinterpret_cast<T*>(dw_smem);
  T* patches = filt + geo.filter_elems;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ y = static_cast<T*>(a.y);
  const int Cr = a.src_C / a.groups, Kg = a.out_C / a.groups;
  const int sy = a.col_sy, ty = a.tap_sy, sx = a.col_sx, tx = a.tap_sx;
  constexpr bool kWindow = kPhases > 0;
  constexpr int P = kWindow ? kPhases : 1;

  int64_t b = blockIdx.x;
  const int image_group = int(b % geo.image_groups);
  b /= geo.image_groups;
  const int band = int(b % geo.bands);
  const int k = int(b / geo.bands);
  const int g = k / Kg;
  const int n0 = image_group * geo.images;
  const int images = min(geo.images, a.N - n0);
  const int per_image = geo.tiles_x * geo.tiles_y;
  const int img = threadIdx.x / per_image, tile = threadIdx.x % per_image;
  const bool active = img < images;
  const int band_y0 = band * geo.band_h;
  const int oy0 = band_y0 + (tile / geo.tiles_x) * RY, ox0 = (tile % geo.tiles_x) * kDwRX;
  // The band reads input rows from iy_patch on; only those inside the plane are staged (the loops
  // skip padding rows), from iy_first on.
  const int iy_patch = band_y0 * sy + a.col_oy;
  const int iy_first = max(iy_patch, 0);
  const int staged_rows =
      max(0, min(iy_patch + (geo.band_h - 1) * sy + (a.R - 1) * ty + 1, a.src_H) - iy_first);
  const int patch_elems = geo.patch_h * geo.pitch;
  const TapRange rows = valid_taps(oy0, RY, sy, a.col_oy, ty, a.src_H, a.R);
  // Per column phase (window path) or for the whole row: the taps that reach the image, and the
  // first chunk to run, computed once (the loops below are per filter row and output row).
  TapRange cols[P];
  int phase_taps[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    phase_taps[p] = (a.S - p + P - 1) / P;
    cols[p] = kWindow ? valid_taps(ox0, kDwRX, P, a.col_ox + p, P, a.src_W, phase_taps[p])
                      : valid_taps(ox0, kDwRX, sx, a.col_ox, tx, a.src_W, a.S);
  }

  T acc[RY][kDwRX];
#pragma unroll
  for (int i = 0; i < RY; ++i)
#pragma unroll
    for (int j = 0; j < kDwRX; ++j) acc[i][j] = T(0);

  for (int c = 0; c < Cr; ++c) {
    __syncthreads();  // the previous channel's tiles are no longer read
    const T* wk = w + (int64_t(k) * Cr + c) * a.R * a.S;
    for (int e = threadIdx.x; e < a.R * P * geo.s_pad; e += blockDim.x) {
      const int q = e % geo.s_pad, rp = e / geo.s_pad, p = rp % P, r = rp / P;
      const int tap = q * P + p;
      filt[e] = tap < a.S ? wk[r * a.S + tap] : T(0);
    }
    const int64_t plane_elems = int64_t(a.src_H) * a.src_W;
    stage_patches<T, P>(patches, patch_elems, x + (int64_t(n0) * a.src_C + int64_t(g) * Cr + c) * plane_elems,
                        a.src_C * plane_elems, images, iy_first, a.col_ox, staged_rows, geo.phase_pitch, a.src_H,
                        a.src_W);
    finish_staging();
    if (!active || rows.lo > rows.hi) continue;
    const T* patch = patches + img * patch_elems;
    for (int r = rows.lo; r <= rows.hi; ++r) {
#pragma unroll
      for (int i = 0; i < RY; ++i) {
        const int iy = iy_patch + (oy0 - band_y0 + i) * sy + r * ty;
        if (iy < 0 || iy >= a.src_H) continue;  // a padding row
        const int prow = iy - iy_first;
        if constexpr (kWindow) {
          // Column phase p holds taps s = q * P + p; output column ox0 + j reads its index ox0 + j + q.
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const int taps = phase_taps[p];
            if (cols[p].lo > cols[p].hi) continue;
            const T* src = patch + prow * geo.pitch + p * geo.phase_pitch + ox0;
            const T* frow = filt + (r * P + p) * geo.s_pad;
            const int chunk_lo = cols[p].lo / kDwKC * kDwKC, chunk_end = cols[p].hi;
            // buf holds src[c0 .. c0 + kDwRX + kDwKC): output j of chunk c0 reads buf[j + t] for tap c0 + t.
            T buf[kDwRX + kDwKC];
            load_run<T, kDwRX>(src + chunk_lo, buf);
            for (int c0 = chunk_lo; c0 <= chunk_end; c0 += kDwKC) {
              load_run<T, kDwKC>(src + c0 + kDwRX, buf + kDwRX);
              T f[kDwKC];
              load_run<T, kDwKC>(frow + c0, f);
              // The last chunk's taps past the filter are zero in shared memory, but zero times an
              // Inf input is NaN: they are not multiplied at all, so non-finite outputs are PyTorch's.
              const int live = min(kDwKC, taps - c0);
#pragma unroll
              for (int t = 0; t < kDwKC; ++t)
                if (t < live)
#pragma unroll
                  for (int j = 0; j < kDwRX; ++j) acc[i][j] += f[t] * buf[j + t];
#pragma unroll
              for (int j = 0; j < kDwRX; ++j) buf[j] = buf[j + kDwKC];
            }
          }
        } else {
          const T* src = patch + prow * geo.pitch + ox0 * sx;
          const T* frow = filt + r * geo.s_pad;
          for (int s = cols[0].lo; s <= cols[0].hi; ++s) {
            const T f = frow[s];
#pragma unroll
            for (int j = 0; j < kDwRX; ++j) acc[i][j] += f * src[j * sx + s * tx];
          }
        }
      }
    }
  }
  if (!active) return;
  const T bias = a.bias ? static_cast<const T*>(a.bias)[k] : T(0);
  T* out = y + ((int64_t(n0) + img) * a.out_C + k) * a.out_H * a.out_W;
#pragma unroll
  for (int i = 0; i < RY; ++i) {
    const int oy = oy0 + i;
    if (oy >= a.col_H || oy >= band_y0 + geo.band_h) continue;
    T* orow = out + int64_t(oy * a.out_sy + a.out_oy) * a.out_W + a.out_ox;
#pragma unroll
    for (int j = 0; j < kDwRX; ++j)
      if (ox0 + j < a.col_W) orow[(ox0 + j) * a.out_sx] = acc[i][j] + bias;
  }
}

// The unstaged forward (also grad_input launches of the same form) for small-group launches of small
// square filters (kR x kR, kR = 3, 5 or 7) at stride 1 or 2 with unit dilation, in float: memory-bound
// layers, where the staged kernel's barrier per channel, zero-padded patch and per-element index
// arithmetic cost more than the reuse they buy. No shared memory: a thread owns kRY output rows of one
// column of one plane (image, destination channel), and threads are numbered column fastest, so a
// warp's loads of an input row are consecutive columns (coalesced) and the reuse between neighbouring
// threads' windows is served by L1 (a group's destination channels are neighbouring planes: their
// shared inputs come from L2). Per reduced channel, each input row the thread's outputs read is loaded
// once (kR values) and every output row that reads it takes its products from registers; rows in the
// padding are skipped, columns in the padding read as zero.

// The unstaged kernel splits each thread's index with FastDivisors (common/fast_divisor.cuh): the
// integer divisions they replace would cost more issue slots than a depthwise thread's multiply-adds.

// The unstaged launch's index split: thread t of the launch (below 2^31) is column t mod col_W of
// strip (t / col_W) mod strips of plane plane0 + t / (col_W * strips); plane = image * (out_C /
// kFilters) + filter block, and the block's kFilters destination channels k0 .. k0 + kFilters - 1 belong
// to group k0 / (out_C / groups).
struct DwUnstagedGrid {
  FastDivisor cols, strips, channels, group_filters;  // channels: out_C / kFilters
  int reduced;                // channels per group (src_C / groups)
  int64_t plane0, plane_end;  // this launch's planes
};

// kGrouped: more than one reduced channel per group (a run-time count); depthwise launches compile the
// channel loop away. kFilters: destination channels per thread (1, or 4 for 3x3 filters where a group
// has a multiple of 4): a thread then loads each input row once for all of them, where one filter per
// thread would load it once per filter (ResNeXt's groups of 4 x 4 read each input 4 times through L2).
template <int kR, int kStride, int kRY, bool kGrouped, int kFilters>
__global__ void __launch_bounds__(kDwThreads) depthwise_unstaged_forward_kernel(const DirectArgs a,
                                                                                  const DwUnstagedGrid grid) {
  constexpr int kInRows = (kRY - 1) * kStride + kR;
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t row_index = grid.cols.div(t), plane_index = grid.strips.div(row_index);
  const int ox = int(t - row_index * grid.cols.d);
  const int strip = int(row_index - plane_index * grid.strips.d);
  const int64_t plane = grid.plane0 + plane_index;
  if (plane >= grid.plane_end) return;
  // Planes, and the elements of one plane, number below 2^31 (depthwise_unstaged_takes).
  const uint32_t n = grid.channels.div(uint32_t(plane));
  const int k0 = int(uint32_t(plane) - n * grid.channels.d) * kFilters;
  const int g = int(grid.group_filters.div(uint32_t(k0)));
  const int Cr = kGrouped ? grid.reduced : 1;
  const int plane_elems = a.src_H * a.src_W;
  const float* __restrict__ xg = static_cast<const float*>(a.x) + (int64_t(n) * a.src_C + int64_t(g) * Cr) * plane_elems;
  const float* __restrict__ wk = static_cast<const float*>(a.w) + int64_t(k0) * Cr * kR * kR;
  const int oy0 = strip * kRY;
  const int iy0 = oy0 * kStride + a.col_oy, ix0 = ox * kStride + a.col_ox;
  bool col_in[kR];
#pragma unroll
  for (int s = 0; s < kR; ++s) col_in[s] = unsigned(ix0 + s) < unsigned(a.src_W);
  float acc[kFilters][kRY];
#pragma unroll
  for (int q = 0; q < kFilters; ++q)
#pragma unroll
    for (int i = 0; i < kRY; ++i) acc[q][i] = 0.f;
  for (int c = 0; c < Cr; ++c) {
    const float* __restrict__ xc = xg + int64_t(c) * plane_elems;
    float f[kFilters][kR][kR];
#pragma unroll
    for (int q = 0; q < kFilters; ++q)
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int s = 0; s < kR; ++s) f[q][r][s] = __ldg(wk + ((q * Cr + c) * kR + r) * kR + s);
#pragma unroll
    for (int j = 0; j < kInRows; ++j) {
      const int iy = iy0 + j;
      if (unsigned(iy) >= unsigned(a.src_H)) continue;  // a padding row, or past the plane
      const float* row = xc + (iy * a.src_W + ix0);
      float v[kR];
#pragma unroll
      for (int s = 0; s < kR; ++s) v[s] = col_in[s] ? __ldg(row + s) : 0.f;
#pragma unroll
      for (int i = 0; i < kRY; ++i) {
        const int r = j - i * kStride;  // the filter row that output row i applies to input row j
        if (r >= 0 && r < kR)
#pragma unroll
          for (int q = 0; q < kFilters; ++q)
#pragma unroll
            for (int s = 0; s < kR; ++s) acc[q][i] = fmaf(f[q][r][s], v[s], acc[q][i]);
      }
    }
  }
#pragma unroll
  for (int q = 0; q < kFilters; ++q) {
    const int k = k0 + q;
    const float bias = a.bias ? static_cast<const float*>(a.bias)[k] : 0.f;
    float* out = static_cast<float*>(a.y) + (int64_t(n) * a.out_C + k) * a.out_H * int64_t(a.out_W) +
                 (ox * a.out_sx + a.out_ox);
#pragma unroll
    for (int i = 0; i < kRY; ++i) {
      const int oy = oy0 + i;
      if (oy < a.col_H) out[(oy * a.out_sy + a.out_oy) * a.out_W] = acc[q][i] + bias;
    }
  }
}

// grad_input of a depthwise layer (one filter per channel) at stride 2 with a 3x3 or 5x5 filter and no
// dilation, every output phase in one launch. Run as one launch per phase on the staged kernel, each
// phase (2x2, 2x1, 1x2 and 1x1 taps of a 3x3 filter) re-read grad_output and paid a patch, a barrier
// and 8-tap chunks for one or two taps. Here a thread owns kDwGradPairs x 1 pairs of input rows and
// columns (a 2 kDwGradPairs x 2 block of grad_input) and gathers them from the (kDwGradPairs + R / 2)
// x (R / 2 + 1) grad_output values that reach it; which tap joins which pair is fixed by the parity of
// the padding (kPy, kPx), so every product is a compile-time register index and only real terms are
// multiplied. Threads are numbered column pair fastest: a warp's loads of a grad_output row are
// consecutive, and its stores of a grad_input row are 64 consecutive columns.
constexpr int kDwGradPairs = 2;  // input row pairs per thread

struct DwStridedGradArgs {
  const float* gy;
  const float* w;
  float* gx;
  int H, W, Ho, Wo;     // grad_input and grad_output planes
  int oy_first, ox_first;  // first grad_output row / column reaching row pair 0 / column pair 0: ceil((pad - R + 1) / 2)
  FastDivisor pairs, strips;  // column pairs ceil(W / 2); strips of kDwGradPairs row pairs
  FastDivisor channels;
  int64_t plane0, plane_end;  // this launch's planes (image x channel)
};

template <int kR, int kPy, int kPx>
__global__ void __launch_bounds__(kDwThreads) depthwise_strided_grad_input_kernel(const DwStridedGradArgs a) {
  constexpr int kM = kR / 2;
  // Row 2 a + dy of grad_input takes grad_output row a + oy_first + u through filter row
  // dy - 2 u + kP; likewise columns with kQ.
  constexpr int kP = 2 * kM - kPy, kQ = 2 * kM - kPx;
  constexpr int kRows = 2 * kDwGradPairs, kInRows = kDwGradPairs + kM;
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t row_index = a.pairs.div(t), plane_index = a.strips.div(row_index);
  const int b = int(t - row_index * a.pairs.d);
  const int strip = int(row_index - plane_index * a.strips.d);
  const int64_t plane = a.plane0 + plane_index;
  if (plane >= a.plane_end) return;
  const int c = int(uint32_t(plane) - a.channels.div(uint32_t(plane)) * a.channels.d);
  float f[kR][kR];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int s = 0; s < kR; ++s) f[r][s] = __ldg(a.w + (c * kR + r) * kR + s);
  const float* __restrict__ gy = a.gy + plane * int64_t(a.Ho) * a.Wo;
  const int pair0 = strip * kDwGradPairs;
  const int oy0 = pair0 + a.oy_first, ox0 = b + a.ox_first;
  bool col_in[kM + 1];
#pragma unroll
  for (int j = 0; j <= kM; ++j) col_in[j] = unsigned(ox0 + j) < unsigned(a.Wo);
  float acc[kRows][2];
#pragma unroll
  for (int i = 0; i < kRows; ++i) acc[i][0] = acc[i][1] = 0.f;
#pragma unroll
  for (int u = 0; u < kInRows; ++u) {
    const int oy = oy0 + u;
    if (unsigned(oy) >= unsigned(a.Ho)) continue;
    const float* row = gy + oy * a.Wo + ox0;
    float v[kM + 1];
#pragma unroll
    for (int j = 0; j <= kM; ++j) v[j] = col_in[j] ? __ldg(row + j) : 0.f;
#pragma unroll
    for (int dy = 0; dy < kRows; ++dy) {
      constexpr int kLast = kR - 1;
      const int r = dy - 2 * u + kP;
      if (r < 0 || r > kLast) continue;  // known at compile time once unrolled
#pragma unroll
      for (int dx = 0; dx < 2; ++dx)
#pragma unroll
        for (int j = 0; j <= kM; ++j) {
          const int s = dx - 2 * j + kQ;
          if (s >= 0 && s <= kLast) acc[dy][dx] = fmaf(v[j], f[r][s], acc[dy][dx]);
        }
    }
  }
  float* gx = a.gx + plane * int64_t(a.H) * a.W + 2 * b;
#pragma unroll
  for (int dy = 0; dy < kRows; ++dy) {
    const int iy = 2 * pair0 + dy;
    if (iy >= a.H) break;
    gx[iy * a.W] = acc[dy][0];
    if (2 * b + 1 < a.W) gx[iy * a.W + 1] = acc[dy][1];
  }
}

// The whole-plane forward (also grad_input launches of the same form): depthwise launches on planes 7
// or 14 columns wide (the last stages of 224 x 224 networks), at stride 1 without dilation, in float, where either the filter
// covers the plane -- every output reads every input pixel, as RepLKNet's 13x13 filters on 7x7 planes
// and 27x27 on 14x14 do -- or a centred filter of 7 columns ("same" padding along W). The staged
// kernel spends most of its issue slots on the first kind with a zero-padded patch per block, 16-tap
// chunks of a 13-tap row and per-lane tap ranges; the unstaged kernel reads the second kind's narrow
// rows with lanes spread over several planes and filters. Here a block is 32 images of one channel
// and a warp a strip of plane_rows(W) output rows of all 32, a lane per image: every lane runs the
// same filter rows and taps, so the filter loads are warp-uniform broadcasts and nothing diverges. The
// block stages the 32 planes (coalesced, each at an odd pitch so that the lanes' reads of their own
// planes fall on distinct banks) and the filter rows it needs, once. Each input row a strip reads is
// loaded once into registers and every output row of the strip takes its products from them: output
// column ox reads input column ix through tap ix - ox - col_ox, so a filter row is needed only as the
// 2 kHalf + 1 taps of the diagonals |ix - ox| <= kHalf that have one (kHalf = W - 1 for a covering
// filter, 3 for a centred 7-column one); staged row e serves input row iy and output row
// oy with e = iy - oy + col_H - 1, and rows whose filter row lies outside the filter are skipped. The
// plane width and kHalf are template parameters, so a row pair's products unroll into register
// indices. Only real terms are multiplied.
constexpr int kDwPlaneWarps = 8;    // most warps (strips) per block

// Output rows per thread: 4 on planes 7 wide, 2 on 14-wide ones, whose 4-row strips leave too
// few warps per SM to hide the latencies (measured: docs/depthwise.md).
TORCHCONV_HOST_DEVICE constexpr int plane_rows(int W) { return W <= 8 ? 4 : 2; }

TORCHCONV_HOST_DEVICE constexpr int plane_filter_pitch(int half) { return round_up(2 * half + 1, 4); }
// Elements per staged plane (H x W) and per staged output strip (plane_rows(W) x W), made odd so that
// the lanes' accesses to their own planes fall on distinct banks.
TORCHCONV_HOST_DEVICE constexpr int plane_pitch(int H, int W) { return H * W | 1; }
TORCHCONV_HOST_DEVICE constexpr int plane_strip_pitch(int W) { return plane_rows(W) * W | 1; }
// Shared memory of a block: the filter table, the 32 input planes, and per warp its 32 output strips
// (stored from there coalesced).
TORCHCONV_HOST_DEVICE constexpr int plane_smem_floats(int H, int Ho, int W, int half, int warps) {
  return (H + Ho - 1) * plane_filter_pitch(half) + 32 * plane_pitch(H, W) + warps * 32 * plane_strip_pitch(W);
}

struct DwPlaneGrid {
  int strips;           // ceil(col_H / plane_rows(W))
  int image_groups;     // ceil(N / 32)
  int tap_s0;           // filter tap of staged diagonal 0 (ix - ox = -kHalf)
};

// One strip's products: output rows oy0 .. oy0 + plane_rows(kW) - 1 (kFull) or those below Ho.
template <int kW, int kHalf, bool kFull>
__device__ __forceinline__ void plane_strip_products(const float* xs, const float* filt, const DirectArgs& a, int oy0,
                                                     float (&acc)[plane_rows(kW)][kW]) {
  constexpr int kPitch = plane_filter_pitch(kHalf), kRows = plane_rows(kW);
  const int H = a.src_H, Ho = a.col_H;
  // Input rows that reach the strip: iy = oy + col_oy + r for r in [0, R).
  const int iy_lo = max(0, oy0 + a.col_oy), iy_hi = min(H - 1, oy0 + kRows - 1 + a.col_oy + a.R - 1);
  for (int iy = iy_lo; iy <= iy_hi; ++iy) {
    float v[kW];
#pragma unroll
    for (int ix = 0; ix < kW; ++ix) v[ix] = xs[iy * kW + ix];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int oy = oy0 + i;
      if (!kFull && oy >= Ho) break;
      if (unsigned(iy - oy - a.col_oy) >= unsigned(a.R)) continue;  // no filter row joins them
      float f[kPitch];
      load_run<float, kPitch>(filt + (iy - oy + Ho - 1) * kPitch, f);
      // Output ox reads input ix through staged diagonal ix - ox + kHalf.
#pragma unroll
      for (int ix = 0; ix < kW; ++ix)
#pragma unroll
        for (int ox = 0; ox < kW; ++ox)
          if (ix - ox <= kHalf && ox - ix <= kHalf) acc[i][ox] = fmaf(v[ix], f[ix - ox + kHalf], acc[i][ox]);
    }
  }
}

template <int kW, int kHalf>
__global__ void __launch_bounds__(kDwPlaneWarps * 32, 2) depthwise_plane_forward_kernel(const DirectArgs a,
                                                                                        const DwPlaneGrid grid) {
  constexpr int kDiag = 2 * kHalf + 1, kPitch = plane_filter_pitch(kHalf), kStripPitch = plane_strip_pitch(kW);
  constexpr int kRows = plane_rows(kW);
  extern __shared__ __align__(16) unsigned char dw_smem[];
  const int H = a.src_H, Ho = a.col_H, pp = plane_pitch(H, kW);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* filt = reinterpret_cast<float*>(dw_smem);
  float* planes = filt + (H + Ho - 1) * kPitch;
  float* strips_out = planes + 32 * pp + warp * 32 * kStripPitch;
  const int k = blockIdx.x / grid.image_groups;
  const int n0 = (blockIdx.x - k * grid.image_groups) * 32;
  const int images = min(32, a.N - n0);
  const int g = k / (a.out_C / a.groups);
  // Stage this channel's filter table (row e: filter row e - (Ho - 1) - col_oy, zero where that is
  // outside the filter, which the products skip; taps tap_s0 .. tap_s0 + kDiag - 1) and the planes of
  // images n0 .. n0 + images - 1.
  const float* __restrict__ wk = static_cast<const float*>(a.w) + int64_t(k) * a.R * a.S;
  for (int e = threadIdx.x; e < (H + Ho - 1) * kPitch; e += blockDim.x) {
    const int row = e / kPitch, d = e - row * kPitch, r = row - (Ho - 1) - a.col_oy;
    filt[e] = d < kDiag && unsigned(r) < unsigned(a.R) ? wk[r * a.S + grid.tap_s0 + d] : 0.f;
  }
  const int plane_elems = H * kW;
  const float* __restrict__ x = static_cast<const float*>(a.x) + (int64_t(n0) * a.src_C + g) * plane_elems;
  for (int i = 0; i < images; ++i)
    for (int e = threadIdx.x; e < plane_elems; e += blockDim.x)
      cp_async_or_zero(planes + i * pp + e, x + int64_t(i) * a.src_C * plane_elems + e, true);
  finish_staging();
  // Lanes past the batch compute image 0's outputs again and store nothing.
  const float* xs = planes + (lane < images ? lane : 0) * pp;
  const float bias = a.bias ? static_cast<const float*>(a.bias)[k] : 0.f;
  // The output map is the identity (depthwise_plane_takes): plane (n, k) is Ho x kW contiguous floats.
  float* out = static_cast<float*>(a.y) + (int64_t(n0) * a.out_C + k) * Ho * kW;
  for (int strip = warp; strip < grid.strips; strip += warps) {
    const int oy0 = strip * kRows, rows = min(kRows, Ho - oy0);
    float acc[kRows][kW];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int j = 0; j < kW; ++j) acc[i][j] = 0.f;
    if (rows == kRows) plane_strip_products<kW, kHalf, true>(xs, filt, a, oy0, acc);
    else plane_strip_products<kW, kHalf, false>(xs, filt, a, oy0, acc);
    // Through shared memory, so that each image's strip (rows x kW consecutive floats) is stored by
    // consecutive lanes.
#pragma unroll
    for (int i = 0; i < kRows; ++i)
      if (i < rows)
#pragma unroll
        for (int ox = 0; ox < kW; ++ox) strips_out[lane * kStripPitch + i * kW + ox] = acc[i][ox] + bias;
    __syncwarp();
    const int count = rows * kW;
    for (int im = 0; im < images; ++im) {
      float* dst = out + int64_t(im) * a.out_C * Ho * kW + oy0 * kW;
      for (int j = lane; j < count; j += 32) dst[j] = strips_out[im * kStripPitch + j];
    }
    __syncwarp();
  }
}

// grad_weight launch: the forward map `m` (x -> y) of the layer, and its geometry. As in the
// forward, a strided layer's input patch is stored de-interleaved by column phase, and a thread's tap
// tile lies in one phase (taps s = p + phases * (u0 + j)), so its columns slide through registers.
struct DwWeightGradArgs {
  LaunchMap m;
  const void* x;
  const void* gy;
  void* partial;           // [splits][K][Cr][R][S]
  int tap_rows;            // thread tap tiles down the filter (kDwTR rows each)
  int phases;              // column phases: the stride along W on the window path, 1 otherwise
  int tap_cols;            // tap tiles per phase across the filter (kDwTS taps each)
  int groups_per_tile;     // pixel groups: threads = tap tiles x pixel groups
  int band_h, bands;       // output rows per band, bands per plane
  int images;              // images per split (a split is one band of `images` consecutive images)
  int image_groups;
  int chunks_x;            // kDwKC-pixel chunks per output row
  int patch_h, phase_pitch, pitch;  // input patch of one image's band (pitch = phases * phase_pitch)
  int gy_pitch;            // chunks_x * kDwKC
  int stage_images;        // images staged at once (small planes: enough that every pixel group has work)

  TORCHCONV_HOST_DEVICE int patch_elems() const { return round_up(patch_h * pitch, 4); }
  TORCHCONV_HOST_DEVICE int gband_elems() const { return band_h * gy_pitch; }

  TORCHCONV_HOST_DEVICE int tap_tiles() const { return tap_rows * phases * tap_cols; }
};

template <typename T, int kPhases>
__global__ void __launch_bounds__(kDwThreads) depthwise_grad_weight_kernel(const DwWeightGradArgs a) {
  extern __shared__ __align__(16) unsigned char dw_smem[];
  // stage_images input patches, then as many grad_output bands.
  T* patches = reinterpret_cast<T*>(dw_smem);
  T* gbands = patches + a.stage_images * a.patch_elems();
  const LaunchMap& m = a.m;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const T* __restrict__ gy = static_cast<const T*>(a.gy);
  const int Cr = m.src_C / m.groups, Kg = m.out_C / m.groups;
  const int sy = m.col_sy, ty = m.tap_sy, sx = m.col_sx, tx = m.tap_sx;
  constexpr bool kWindow = kPhases > 0;
  constexpr int P = kWindow ? kPhases : 1;

  // block -> (split, filter k, channel c); split -> (band, image group)
  int64_t b = blockIdx.x;
  const int c = int(b % Cr);
  b /= Cr;
  const int k = int(b % m.out_C);
  const int split = int(b / m.out_C);
  const int band = split % a.bands, image_group = split / a.bands;
  const int g = k / Kg;
  const int tap_tiles = a.tap_tiles();
  const int tile = threadIdx.x % tap_tiles, group = threadIdx.x / tap_tiles;
  const bool active = group < a.groups_per_tile;
  // Tile (row tile, phase, column tile): taps r0 + i and p + P * (u0 + j).
  const int r0 = (tile / (P * a.tap_cols)) * kDwTR;
  const int p = (tile / a.tap_cols) % P, u0 = (tile % a.tap_cols) * kDwTS;
  const int s_first = p + P * u0;
  const int band_y0 = band * a.band_h, band_rows = min(a.band_h, m.col_H - band_y0);
  const int iy_patch = band_y0 * sy + m.col_oy;
  const int iy_first = max(iy_patch, 0);  // rows inside the plane only, as in the forward
  const int staged_rows = max(0, min(iy_patch + (a.band_h - 1) * sy + (m.R - 1) * ty + 1, m.src_H) - iy_first);
  const int items = band_rows * a.chunks_x;

  T acc[kDwTR][kDwTS];
#pragma unroll
  for (int i = 0; i < kDwTR; ++i)
#pragma unroll
    for (int j = 0; j < kDwTS; ++j) acc[i][j] = T(0);

  const int n_first = image_group * a.images, n_end = min(m.N, n_first + a.images);
  const int64_t plane_elems = int64_t(m.src_H) * m.src_W, out_plane = int64_t(m.col_H) * m.col_W;
  for (int nb = n_first; nb < n_end; nb += a.stage_images) {
    const int batch = min(a.stage_images, n_end - nb);
    __syncthreads();
    stage_patches<T, P>(patches, a.patch_elems(), x + (int64_t(nb) * m.src_C + int64_t(g) * Cr + c) * plane_elems,
                        m.src_C * plane_elems, batch, iy_first, m.col_ox, staged_rows, a.phase_pitch, m.src_H,
                        m.src_W);
    // grad_output rows of the band, zero past the plane's last column.
    stage_patches<T, 1>(gbands, a.gband_elems(), gy + (int64_t(nb) * m.out_C + k) * out_plane + int64_t(band_y0) * m.col_W,
                        m.out_C * out_plane, batch, 0, 0, band_rows, a.gy_pitch, band_rows, m.col_W);
    finish_staging();
    if (!active || s_first >= m.S) continue;
    for (int item = group; item < batch * items; item += a.groups_per_tile) {
      const int im = item / items, it = item - im * items;
      const T* patch = patches + im * a.patch_elems();
      const T* gband = gbands + im * a.gband_elems();
      const int oy = it / a.chunks_x, ox0 = (it % a.chunks_x) * kDwKC;
      // Skip a chunk whose columns all lie in the padding for this thread's taps.
      const int first_col = ox0 * sx + m.col_ox + s_first * tx;
      const int last_col = (ox0 + kDwKC - 1) * sx + m.col_ox + (s_first + P * (kDwTS - 1)) * tx;
      if (last_col < 0 || first_col >= m.src_W) continue;
      T gv[kDwKC];
      load_run<T, kDwKC>(gband + oy * a.gy_pitch + ox0, gv);
      const int pixels = min(kDwKC, m.col_W - ox0);  // past the row: not multiplied (0 x Inf is NaN)
#pragma unroll
      for (int i = 0; i < kDwTR; ++i) {
        const int iy = iy_patch + oy * sy + (r0 + i) * ty;
        if (r0 + i >= m.R || iy < 0 || iy >= m.src_H) continue;
        const int prow = iy - iy_first;
        if constexpr (kWindow) {
          // Column (ox0 + q) * P + s of tap s = p + P * (u0 + j) is index ox0 + q + u0 + j of phase p.
          const T* src = patch + prow * a.pitch + p * a.phase_pitch + ox0 + u0;
          T buf[kDwKC + kDwTS];
          load_run<T, kDwKC + kDwTS>(src, buf);
#pragma unroll
          for (int q = 0; q < kDwKC; ++q)
            if (q < pixels)
#pragma unroll
              for (int j = 0; j < kDwTS; ++j) acc[i][j] += gv[q] * buf[q + j];
        } else {
          const T* src = patch + prow * a.pitch + ox0 * sx + s_first * tx;
#pragma unroll
          for (int q = 0; q < kDwKC; ++q)
            if (q < pixels)
#pragma unroll
              for (int j = 0; j < kDwTS; ++j) acc[i][j] += gv[q] * src[q * sx + j * tx];
        }
      }
    }
  }

  // Sum the pixel groups' tiles in a fixed order: each of `parts` threads per tap adds a run of
  // groups, then one thread per tap adds the runs.
  __syncthreads();
  constexpr int kTile = kDwTR * kDwTS;
  T* red = reinterpret_cast<T*>(dw_smem);  // [group][tile][kTile]
  const int elems = tap_tiles * kTile;
  if (active) {
#pragma unroll
    for (int i = 0; i < kDwTR; ++i)
#pragma unroll
      for (int j = 0; j < kDwTS; ++j) red[(group * tap_tiles + tile) * kTile + i * kDwTS + j] = acc[i][j];
  }
  __syncthreads();
  const int parts = max(1, min(a.groups_per_tile, int(blockDim.x) / elems));
  const int per_part = (a.groups_per_tile + parts - 1) / parts;
  T* runs = red + a.groups_per_tile * elems;  // [parts][elems]
  for (int e = threadIdx.x; e < elems * parts; e += blockDim.x) {
    const int elem = e % elems, part = e / elems;
    T sum = T(0);
    for (int q = part * per_part; q < min(a.groups_per_tile, (part + 1) * per_part); ++q) sum += red[q * elems + elem];
    runs[part * elems + elem] = sum;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.partial) + ((int64_t(split) * m.out_C + k) * Cr + c) * m.R * m.S;
  for (int elem = threadIdx.x; elem < elems; elem += blockDim.x) {
    const int t = elem / kTile, i = (elem % kTile) / kDwTS, j = elem % kDwTS;
    const int r = (t / (P * a.tap_cols)) * kDwTR + i;
    const int s = (t / a.tap_cols) % P + P * ((t % a.tap_cols) * kDwTS + j);
    if (r >= m.R || s >= m.S) continue;
    T sum = T(0);
    for (int part = 0; part < parts; ++part) sum += runs[part * elems + elem];
    out[r * m.S + s] = sum;
  }
}

}  // namespace
}  // namespace cuda
}  // namespace torchconv
