// Winograd on the GPU, device side: the tile configs, the launch descriptor (WinogradConv), the tile loaders and the kernels: fused, shallow, narrow and staged forward, the transforms, grad_weight and its slice sum.
// Included by winograd.cu, which holds the host side (launch, rule, limits, operators).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <cstdlib>
#include <type_traits>

#include "../../conv_shape.h"
#include "../../variant.h"
#include "../../weight_cache.h"
#include "../../winograd_transforms.h"
#include "../../workspace.h"
#include "../common/fast_divisor.cuh"
#include "../common/slice_sum.cuh"
#include "../common/launch_map.cuh"
#include "../common/mma.cuh"
#include "../common/tile_gemm.cuh"

namespace torchconv {
namespace cuda {
namespace {

// Tile configs. All 16 points of a (filters x tiles) block live in one block, 8 x 8 outputs per
// thread (F(2x2, 3x3); F(4x4, 3x3)'s staged GEMM below takes its 36 points in groups of 4).
// float, 32 filters x 32 tiles, 8 reduction steps per chunk: 256 threads, two blocks per SM (128
// registers each). (A 32 x 64 tile with 512 threads measured 4% slower over the suite on the H100.)
using WinogradTileF32 = GemmTileConfig<kWinogradPoints, 32, 32, 8, 8, 8, 2>;
// float, 4 reduction steps per chunk: layers with at most 4 input channels per group (an RGB stem),
// where an 8-step chunk would be mostly zero padding.
using WinogradTileF32Thin = GemmTileConfig<kWinogradPoints, 32, 32, 4, 8, 8, 2>;
// float, 64 filters x 32 tiles: 512 threads, one block per SM. The fused kernel transforms each input
// tile once per block of filters, so twice the filters per block halves that work per multiply-add.
using WinogradTileF32Tall = GemmTileConfig<kWinogradPoints, 64, 32, 8, 8, 8, 1>;
// float grad_weight with at most 8 channels per group (an RGB stem): 32 filters x 8 channels per
// block, 8 x 2 per thread (256 threads, three blocks per SM). The default's 32-channel tile would be
// 10/11 padding for C = 3, and the GEMM on padding was most of an RGB stem's grad_weight time.
using WinogradWeightGradNarrow = GemmTileConfig<kWinogradPoints, 32, 8, 8, 8, 2, 3>;
// double: 16 x 16 per block, 4 x 4 per thread (256 threads).
using WinogradTileF64 = GemmTileConfig<kWinogradPoints, 16, 16, 8, 4, 4, 2>;
// F(4x4, 3x3)'s staged GEMM: its 36 independent point GEMMs in nine blocks of 4 points (the staged
// variant needs no block to hold a whole tile's points), 32 filters x 64 tiles per block, 8 x 8 per
// thread: 128 threads, four blocks per SM. On the H100 blocks of few points won on every 3x3 suite
// layer over blocks of 12 (192 threads, 2 per SM): a block's barrier holds four warps, not six,
// while the others compute; and 64 tiles per block over 32 (docs/winograd.md).
using WinogradF4x4TileF32 = GemmTileConfig<4, 32, 64, 8, 8, 8, 4>;
using WinogradF4x4TileF64 = GemmTileConfig<12, 16, 16, 8, 4, 4, 2>;

// A 3x3 stride-1 launch (common/launch_map.cuh: the forward map, or stride-1 grad_input's with its
// taps reversed, whose filter the transforms rotate). The source offset may be positive (grad_input
// of a layer padded by more than 2 reads a cropped grad_output), so the output extent is given.
struct WinogradConv : LaunchMap {
  int tiles_h, tiles_w;  // output tiles per image (the last row / column may be partial)
  // Derived on the host, so kernels read them as constants instead of spending registers.
  int cg, kg;        // channels and filters per group
  int64_t in_plane;  // src_H * src_W
  // tile_coord's divisors: tiles per image and per tile row.
  FastDivisor per_image_div, tiles_w_div;

  TORCHCONV_HOST_DEVICE int Cg() const { return cg; }
  TORCHCONV_HOST_DEVICE int Kg() const { return kg; }
  TORCHCONV_HOST_DEVICE int64_t tiles() const { return int64_t(N) * tiles_h * tiles_w; }
};

// Image, tile row and tile column of tile p. Every fused kernel decodes tiles per block and per
// output tile; below 2^31 tiles (any layer but a huge one) by multiplies, not integer divisions.
struct TileCoord {
  int n, ty, tx;
};
__device__ __forceinline__ TileCoord tile_coord(const WinogradConv& cv, int64_t p) {
  const int per_image = cv.tiles_h * cv.tiles_w;
  int n, rem;
  if (p < (int64_t(1) << 31)) {
    n = int(cv.per_image_div.div(uint32_t(p)));
    rem = int(p) - n * per_image;
  } else {
    n = int(p / per_image), rem = int(p % per_image);
  }
  const int ty = int(cv.tiles_w_div.div(uint32_t(rem)));
  return {n, ty, rem - ty * cv.tiles_w};
}
// tc moved `step` tiles on (tile_coord's order), without a division: loaders that walk tiles.
__device__ __forceinline__ void advance_tile(const WinogradConv& cv, TileCoord& tc, int step) {
  tc.tx += step;
  while (tc.tx >= cv.tiles_w) {
    tc.tx -= cv.tiles_w;
    if (++tc.ty == cv.tiles_h) tc.ty = 0, ++tc.n;
  }
}

// A stored element (TIo: the call's dtype) as the compute type T, and back (rounded to nearest even):
// the identity where they agree, so float and double calls keep their bits.
template <typename T, typename TIo>
__device__ __forceinline__ T io_to(TIo v) {
  if constexpr (std::is_same_v<T, TIo>) return v;
  else return T(to_float(v));
}
template <typename TIo, typename T>
__device__ __forceinline__ TIo io_from(T v) {
  if constexpr (std::is_same_v<T, TIo>) return v;
  else return from_float<TIo>(float(v));
}

// The input patch (Tile::kAlpha square) at (iy0, ix0) of one plane, zero outside the image (the padding).
template <typename Tile = WinogradF2x2, typename TIo, typename T>
__device__ __forceinline__ void load_input_patch(const TIo* __restrict__ plane, const WinogradConv& cv, int iy0, int ix0,
                                                 bool valid, T (&d)[Tile::kPoints]) {
#pragma unroll
  for (int i = 0; i < Tile::kAlpha; ++i) {
    const int iy = iy0 + i;
    const bool row_ok = valid && iy >= 0 && iy < cv.src_H;
#pragma unroll
    for (int j = 0; j < Tile::kAlpha; ++j) {
      const int ix = ix0 + j;
      d[i * Tile::kAlpha + j] = (row_ok && ix >= 0 && ix < cv.src_W) ? io_to<T>(plane[int64_t(iy) * cv.src_W + ix]) : T(0);
    }
  }
}

// Writes the 16 points of one (reduction step, column) entry into a [16][kK][kLd] shared tile.
template <typename T, int kK, int kLd>
__device__ __forceinline__ void store_points(const T (&v)[16], T* tile, int kk, int col) {
#pragma unroll
  for (int e = 0; e < kWinogradPoints; ++e) tile[(e * kK + kk) * kLd + col] = v[e];
}

// The transform loaders stage raw patches in shared memory with cp.async (zero-filled outside the
// image or past the problem's end), laid out [value][pair] so neighbouring threads write neighbouring
// words. fetch() issues the copies for the next chunk before the math on the current one; store()
// then waits for the thread's own copies, transforms them and writes the GEMM tile. Each thread
// reads back only what it copied itself, so no barrier is needed in between, and the global loads
// overlap the math without holding registers (the 8 x 8 accumulator tile needs them).
template <typename T>
__device__ __forceinline__ void stage_copy(T* raw, int pairs, int pair, int value, const T* src, bool valid,
                                           const T* safe) {
  cp_async_or_zero(raw + value * pairs + pair, valid ? src : safe, valid);
}

// Calls f(pair, slot) for each (reduction step, column) pair of a chunk that this thread stages:
// pairs threadIdx.x, threadIdx.x + kThreads, ... below kPairs; `slot` counts them.
template <int kPairs, int kThreads, typename F>
__device__ __forceinline__ void for_each_pair(F&& f) {
#pragma unroll
  for (int slot = 0; slot < (kPairs + kThreads - 1) / kThreads; ++slot) {
    const int i = threadIdx.x + slot * kThreads;
    if (kPairs % kThreads == 0 || i < kPairs) f(i, slot);
  }
}

// Bit r: patch row r lies inside the image; bit 4 + s: patch column s does.
__device__ __forceinline__ unsigned patch_mask(int iy0, int ix0, const WinogradConv& cv) {
  unsigned mask = 0;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    mask |= unsigned(iy0 + r >= 0 && iy0 + r < cv.src_H) << r;
    mask |= unsigned(ix0 + r >= 0 && ix0 + r < cv.src_W) << (4 + r);
  }
  return mask;
}

// Tile p's 4x4 input patch, decoded once by the loaders that read it: the tile (tile 0 for a tile past
// the last, `live` false), the image row and column of the patch's top-left value (outside the image
// where the padding reaches), and which of its rows and columns lie inside (patch_mask; none for a
// tile past the last). `row0`: the patch from its row row0 on (a loader of some of its rows).
struct InputPatch {
  TileCoord tile;
  int iy0, ix0;
  unsigned mask;
  __device__ __forceinline__ InputPatch(const WinogradConv& cv, int64_t p, bool live, int row0 = 0)
      : tile(tile_coord(cv, live ? p : 0)),
        iy0(2 * tile.ty + cv.col_oy + row0),
        ix0(2 * tile.tx + cv.col_ox),
        mask(live ? patch_mask(iy0, ix0, cv) : 0u) {}
  // The offset of the top-left value (NHWC: of the patch's column `col`) at channel c (of all the
  // input's) in an NHWC or an NCHW input.
  __device__ __forceinline__ int64_t nhwc_offset(const WinogradConv& cv, int64_t c, int col = 0) const {
    return ((int64_t(tile.n) * cv.src_H + iy0) * cv.src_W + ix0 + col) * cv.src_C + c;
  }
  __device__ __forceinline__ int64_t nchw_offset(const WinogradConv& cv, int64_t c) const {
    return (int64_t(tile.n) * cv.src_C + c) * cv.in_plane + int64_t(iy0) * cv.src_W + ix0;
  }
};

// Stages the 4x4 input patch at `src` (rows cv.src_W apart) for pair `pair`, zero where `mask` says the
// value lies outside the image; a patch wholly inside takes copies without per-value predicates.
template <typename T>
__device__ __forceinline__ void stage_input_patch(T* raw, int pairs, int pair, const T* src, unsigned mask,
                                                  const WinogradConv& cv, const T* safe) {
  if (mask == 0xFFu) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int s = 0; s < 4; ++s) cp_async(raw + (r * 4 + s) * pairs + pair, src + r * cv.src_W + s);
    return;
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int s = 0; s < 4; ++s)
      stage_copy(raw, pairs, pair, r * 4 + s, src + r * cv.src_W + s, (mask >> r) & (mask >> (4 + s)) & 1u, safe);
}

// V = B^T d B of the patch staged for pair `pair`.
template <typename T>
__device__ __forceinline__ void transform_staged_patch(const T* raw, int pairs, int pair, T (&v)[16]) {
  T d[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) d[e] = raw[e * pairs + pair];
  winograd_input_transform<T>(d, v);
}

// Forward B operand: V = B^T d B of kN consecutive tiles for kK input channels per chunk. Each
// thread keeps the same tiles for the whole reduction, so it decodes them once into a patch origin
// and a bit mask of the patch rows and columns inside the image.
template <typename T, typename Cfg>
struct InputTileLoader {
  static constexpr int kPairs = Cfg::kK * Cfg::kN;
  static constexpr int kPerThread = (kPairs + Cfg::kThreads - 1) / Cfg::kThreads;
  static constexpr int kStageElems = 16 * kPairs;
  const T* x;
  T* raw;
  const WinogradConv& cv;  // the kernel parameter: its fields stay constants, not registers
  const T* origin[kPerThread];  // patch origin in the group's first channel (may lie outside the image)
  unsigned inside[kPerThread];  // bit i: patch row i is inside; bit 4 + j: column j; 0: no tile

  __device__ InputTileLoader(const T* x_, T* raw_, const WinogradConv& cv_, int g, int64_t p0)
      : x(x_), raw(raw_), cv(cv_) {
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) {
      const int i = threadIdx.x + q * Cfg::kThreads;
      const int64_t p = p0 + i % Cfg::kN;
      const bool ok = i < kPairs && p < cv.tiles();
      const InputPatch patch(cv, p, ok);
      inside[q] = patch.mask;
      origin[q] = x + patch.nchw_offset(cv, int64_t(g) * cv.Cg());
    }
  }
  __device__ void fetch(int chunk, T*) {
    for_each_pair<kPairs, Cfg::kThreads>([&](int i, int slot) {
      const int c = chunk * Cfg::kK + i / Cfg::kN;
      stage_input_patch(raw, kPairs, i, origin[slot] + c * cv.in_plane, c < cv.Cg() ? inside[slot] : 0u, cv, x);
    });
  }
  __device__ void store(T* tile) {
    cp_async_wait<0>();
    for_each_pair<kPairs, Cfg::kThreads>([&](int i, int /*slot*/) {
      T v[16];
      transform_staged_patch(raw, kPairs, i, v);
      store_points<T, Cfg::kK, Cfg::kLdB>(v, tile, i / Cfg::kN, i % Cfg::kN);
    });
  }
};

// grad_weight B operand: V of kN input channels for kK consecutive tiles per chunk (the reduction
// runs over tiles). Lanes run along tiles, so neighbouring threads read neighbouring patches.
template <typename T, typename Cfg>
struct InputByTileLoader {
  static constexpr int kPairs = Cfg::kK * Cfg::kN;
  static constexpr int kStageElems = 16 * kPairs;
  const T* x;
  T* raw;
  const WinogradConv& cv;  // the kernel parameter
  int64_t tile_begin, tile_end;
  int channel0;  // first channel of this block, all groups counted
  int channels_end;

  __device__ void fetch(int chunk, T*) {
    for_each_pair<kPairs, Cfg::kThreads>([&](int i, int /*slot*/) {
      const int64_t p = tile_begin + int64_t(chunk) * Cfg::kK + i % Cfg::kK;
      const int c = channel0 + i / Cfg::kK;
      const bool ok = p < tile_end && c < channels_end;
      const InputPatch patch(cv, p, ok);
      stage_input_patch(raw, kPairs, i, x + patch.nchw_offset(cv, ok ? c : 0), patch.mask, cv, x);
    });
  }
  __device__ void store(T* tile) {
    cp_async_wait<0>();
    for_each_pair<kPairs, Cfg::kThreads>([&](int i, int /*slot*/) {
      T v[16];
      transform_staged_patch(raw, kPairs, i, v);
      store_points<T, Cfg::kK, Cfg::kLdB>(v, tile, i % Cfg::kK, i / Cfg::kK);
    });
  }
};

// grad_weight A operand: dM = A dY A^T of kM filters for kK consecutive tiles per chunk. Output
// positions past Ho / Wo (a partial tile) were never produced, so their gradient is zero.
template <typename T, typename Cfg>
struct GradOutputTileLoader {
  static constexpr int kPairs = Cfg::kK * Cfg::kM;
  static constexpr int kStageElems = 4 * kPairs;
  const T* gy;
  T* raw;
  const WinogradConv& cv;  // the kernel parameter
  int64_t tile_begin, tile_end;
  int filter0;  // first filter of this block, all groups counted
  int filters_end;

  __device__ void fetch(int chunk, T*) {
    for_each_pair<kPairs, Cfg::kThreads>([&](int i, int /*slot*/) {
      const int64_t p = tile_begin + int64_t(chunk) * Cfg::kK + i % Cfg::kK;
      const int k = filter0 + i / Cfg::kK;
      const bool ok = p < tile_end && k < filters_end;
      const TileCoord t = tile_coord(cv, ok ? p : 0);
      const int oy = 2 * t.ty, ox = 2 * t.tx;
      const T* src = gy + ((int64_t(t.n) * cv.out_C + (ok ? k : 0)) * cv.out_H + oy) * cv.out_W + ox;
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b)
          stage_copy(raw, kPairs, i, a * 2 + b, src + a * cv.out_W + b, ok && oy + a < cv.out_H && ox + b < cv.out_W, gy);
    });
  }
  __device__ void store(T* tile) {
    cp_async_wait<0>();
    for_each_pair<kPairs, Cfg::kThreads>([&](int i, int /*slot*/) {
      T dy[4], dm[16];
#pragma unroll
      for (int e = 0; e < 4; ++e) dy[e] = raw[e * kPairs + i];
      winograd_output_transform_adjoint<T>(dy, dm);
      store_points<T, Cfg::kK, Cfg::kLdA>(dm, tile, i % Cfg::kK, i / Cfg::kK);
    });
  }
};

// Transformed filters U = G g G^T laid out [group][point group][reduction (padded)][kGroupPoints]
// [filter (padded)], zero in the padding, so the GEMM loads whole tiles with cp.async and no bounds
// checks. F(2x2) keeps its 16 points in one point group (every F(2x2) kernel reads U so); F(4x4)'s
// staged GEMM splits its 36 into groups that each run as a group of the batched GEMM. `rotated`
// builds grad_input's filters instead: rotated 180 degrees with C and K swapped within each group.
struct FilterLayout {
  int groups, Kg, Cg;  // of the forward weight
  bool rotated;
  int reduction, outputs;  // per group: (Cg, Kg), or (Kg, Cg) when rotated
  int reduction_pad, outputs_pad;
  // The weight's element strides: the transforms read it in place, in any layout (a channels_last
  // weight's taps a filter's channels apart), so a trainable weight is never copied first.
  WeightStrides w;
};

// U = G g G^T of filter pair (reduction r, output m) of group g in layout f: the 3x3 taps of the
// forward filter (k, c), reversed where f.rotated (grad_input), or zeros in the padding. TW: the
// weight's type (T, or bfloat16 or float16 for float arithmetic: the tensor-core tiles read 16-bit
// weights themselves, exact in float).
template <typename Tile, typename T, typename TW>
__device__ __forceinline__ void filter_points(const TW* __restrict__ w, const FilterLayout& f, int g, int r, int m,
                                              T (&uu)[Tile::kPoints]) {
  if (m < f.outputs && r < f.reduction) {
    const int k = f.rotated ? r : m, c = f.rotated ? m : r;
    const int64_t filter = int64_t(g) * f.Kg + k;
    T taps[9];
#pragma unroll
    for (int t = 0; t < 9; ++t) {
      const int tap = f.rotated ? 8 - t : t;
      const TW v = w[f.w.offset(filter, c, tap / 3, tap % 3)];
      if constexpr (std::is_same_v<T, TW>)
        taps[t] = v;
      else
        taps[t] = to_float(v);
    }
    Tile::filter(taps, uu);
  } else {
#pragma unroll
    for (int e = 0; e < Tile::kPoints; ++e) uu[e] = T(0);
  }
}

// Index i of a filter-transform launch over [group][reduction_pad][outputs_pad] (outputs fastest):
// its group g, reduction r and output m.
struct FilterPair {
  int g, r, m;
  __device__ __forceinline__ FilterPair(int64_t i, const FilterLayout& f)
      : g(int(i / (int64_t(f.outputs_pad) * f.reduction_pad))),
        r(int((i / f.outputs_pad) % f.reduction_pad)),
        m(int(i % f.outputs_pad)) {}
};

// The loop every filter-transform kernel runs: `body(p, uu)` for each (group, reduction, output) p of
// the launch (grid-stride over [group][reduction_pad][outputs_pad]), uu that filter's transformed
// points (zero in the padding); the kernels differ in where and how they store uu.
template <typename Tile, typename T, typename TW, typename Body>
__device__ __forceinline__ void for_each_filter(const TW* __restrict__ w, const FilterLayout& f, Body&& body) {
  const int64_t total = int64_t(f.groups) * f.reduction_pad * f.outputs_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const FilterPair p(i, f);
    T uu[Tile::kPoints];
    filter_points<Tile>(w, f, p.g, p.r, p.m, uu);
    body(p, uu);
  }
}

// TW: the weight's type (T, or bfloat16 or float16 for float U: a 16-bit call's weight read as it is).
template <typename Tile, typename T, int kGroupPoints, typename TW = T>
__global__ void winograd_filter_transform_kernel(const TW* __restrict__ w, T* __restrict__ u, const FilterLayout f) {
  static_assert(Tile::kPoints % kGroupPoints == 0, "point groups split the points evenly");
  constexpr int kPointGroups = Tile::kPoints / kGroupPoints;
  for_each_filter<Tile, T>(w, f, [&](const FilterPair& p, const T (&uu)[Tile::kPoints]) {
#pragma unroll
    for (int q = 0; q < kPointGroups; ++q) {
      T* dst = u + ((int64_t(p.g) * kPointGroups + q) * f.reduction_pad + p.r) * kGroupPoints * f.outputs_pad + p.m;
#pragma unroll
      for (int e = 0; e < kGroupPoints; ++e) dst[int64_t(e) * f.outputs_pad] = uu[q * kGroupPoints + e];
    }
  });
}

// T: the arithmetic's type (U and V's); TIo: the type of x, bias and y. They differ where the TF32
// tensor-core kernels read and write bfloat16 tensors natively (float arithmetic, TIo bfloat16).
template <typename T, typename TIo = T>
struct ForwardArgs {
  const TIo* x;
  const T* u;  // transformed filters, FilterLayout
  const TIo* bias;
  TIo* y;
  WinogradConv cv;
  int reduction_pad, outputs_pad;
  int k_tiles, p_tiles;
  // k_tiles and p_tiles as divisors (fused_args), for the persistent blocks' block_coord.
  FastDivisor k_tiles_div, p_tiles_div;
  // Kernels whose V is staged (WinogradWgmmaClusterVStagedLayout): V of tile blocks p_tile0 .. p_tile0
  // + p_tiles, transformed in a workspace (winograd_tc_input_transform_kernel). Elsewhere nullptr, 0.
  const T* v = nullptr;
  int p_tile0 = 0;
  // The staged-V tiles' float16 operands (F16Carrier): each filter's largest |U| ([group][outputs_pad]),
  // each tile's largest |V| ([group][tile]). Elsewhere nullptr.
  const float* u_max = nullptr;
  const float* v_max = nullptr;
};

// Blocks run filter tiles fastest, so the blocks that share an input tile run together and read it
// from L2 rather than DRAM.
struct BlockCoord {
  int kt, pt, g;
};
__device__ __forceinline__ BlockCoord block_coord(int k_tiles, int p_tiles, int b = blockIdx.x) {
  const int kt = b % k_tiles;
  b /= k_tiles;
  return {kt, b % p_tiles, b / p_tiles};
}
// The same by divisors made on the host: multiplies, not integer divisions, for a persistent block
// that decodes every output block it walks to.
__device__ __forceinline__ BlockCoord block_coord(const FastDivisor& k_tiles, const FastDivisor& p_tiles, int b) {
  const uint32_t q = k_tiles.div(uint32_t(b)), r = p_tiles.div(q);
  return {int(uint32_t(b) - q * k_tiles.d), int(q - r * p_tiles.d), int(r)};
}

// Shared-memory row stride of the epilogue's M tile: padded by one 16-byte word against conflicts.
template <typename T, typename Cfg>
constexpr int epilogue_ld() {
  return Cfg::kN + 16 / int(sizeof(T));
}
template <typename T, typename Cfg>
constexpr size_t fused_smem_bytes() {
  const size_t epilogue = size_t(kWinogradPoints) * Cfg::kM * epilogue_ld<T, Cfg>() * sizeof(T);
  const size_t mainloop =
      Cfg::template mainloop_smem_bytes<T>() + InputTileLoader<T, Cfg>::kStageElems * sizeof(T);
  return epilogue > mainloop ? epilogue : mainloop;
}
template <typename T, typename Cfg>
constexpr size_t weight_grad_smem_bytes() {
  return Cfg::template mainloop_smem_bytes<T>() +
         (GradOutputTileLoader<T, Cfg>::kStageElems + InputByTileLoader<T, Cfg>::kStageElems) * sizeof(T);
}

// Y = A^T M A + bias for one (filter, tile), M read from `m` with `stride` between points.
template <typename T>
__device__ __forceinline__ void write_output_tile(const T* m, int64_t stride, const WinogradConv& cv, int k, int64_t p,
                                                  const T* bias, T* y) {
  T mm[16], out[4];
#pragma unroll
  for (int e = 0; e < 16; ++e) mm[e] = m[e * stride];
  winograd_output_transform<T>(mm, out);
  const T b = bias ? bias[k] : T(0);
  const TileCoord t = tile_coord(cv, p);
  const int oy = 2 * t.ty, ox = 2 * t.tx;
  T* dst = y + ((int64_t(t.n) * cv.out_C + k) * cv.out_H + oy) * cv.out_W + ox;
  const bool right = ox + 1 < cv.out_W, below = oy + 1 < cv.out_H;
  dst[0] = out[0] + b;
  if (right) dst[1] = out[1] + b;
  if (below) {
    dst[cv.out_W] = out[2] + b;
    if (right) dst[cv.out_W + 1] = out[3] + b;
  }
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_fused_forward_kernel(const ForwardArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const BlockCoord bc = block_coord(a.k_tiles, a.p_tiles);
  const int64_t p0 = int64_t(bc.pt) * Cfg::kN;
  PaddedTileLoader<T, Cfg, Cfg::kM, Cfg::kLdA> la{a.u + int64_t(bc.g) * a.reduction_pad * kWinogradPoints * a.outputs_pad,
                                       a.outputs_pad, bc.kt * Cfg::kM};
  InputTileLoader<T, Cfg> lb(a.x, smem + Cfg::kTileA * 2 + Cfg::kTileB * 2, a.cv, bc.g, p0);
  T acc[Cfg::kThreadM][Cfg::kThreadN];
  block_gemm<T, Cfg>(smem, la, lb, a.reduction_pad / Cfg::kK, acc);

  // Epilogue: the block's 16 x kM x kN points go through shared memory so that each thread can
  // gather the 16 points of one (filter, tile) for the output transform.
  constexpr int kLd = epilogue_ld<T, Cfg>();
  const ThreadTile<Cfg> tt(threadIdx.x);
#pragma unroll
  for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kThreadN; ++j) smem[(tt.batch * Cfg::kM + tt.row(i)) * kLd + tt.col(j)] = acc[i][j];
  __syncthreads();
  const int Kg = a.cv.Kg();
  const int64_t tiles = a.cv.tiles();
  for (int q = threadIdx.x; q < Cfg::kM * Cfg::kN; q += Cfg::kThreads) {
    const int m = q / Cfg::kN, n = q % Cfg::kN;
    const int k = bc.kt * Cfg::kM + m;
    const int64_t p = p0 + n;
    if (k >= Kg || p >= tiles) continue;
    write_output_tile(smem + m * kLd + n, int64_t(Cfg::kM) * kLd, a.cv, bc.g * Kg + k, p, a.bias, a.y);
  }
}

// ---- shallow reduction (at most 4 channels per group) -----------------------------------------

// An RGB stem (C = 3) or the grad_input of a layer with few filters per group reduces over so few
// channels that a GEMM block is mostly padding and its epilogue's trip through shared memory costs
// more than the products (3x the layer's DRAM bound on the H100). Here each thread owns one
// tile: it transforms the tile's <= 4 input patches once into registers, then for each filter of
// its block forms the 16 products, runs the output transform and writes the 2x2 outputs. Lanes run
// along neighbouring tiles, so each warp writes two 256-byte rows per filter; the block's filters
// sit in shared memory and every lane reads the same word (a broadcast).
constexpr int kShallowThreads = 256;  // tiles per block
constexpr int kShallowFilters = 32;   // filters per block
constexpr int kShallowMaxReduction = 4;
// The filter layout's padding (FilterLayout rounds to these).
struct WinogradShallowTile {
  static constexpr int kK = kShallowMaxReduction, kM = kShallowFilters;
};

// T: the compute type (float, or double); TIo: the tensors' (T, bfloat16 or float16: the kernels
// read and write them themselves and compute in float32).
template <typename T, typename TIo = T>
struct ShallowArgs {
  const TIo* x;
  const T* u;  // transformed filters, FilterLayout of WinogradShallowTile
  const TIo* bias;
  TIo* y;
  WinogradConv cv;
  int reduction_pad, outputs_pad;
  int k_blocks, p_blocks;
};

template <typename T>
struct PairOf;
template <>
struct PairOf<float> {
  using type = float2;
};
template <>
struct PairOf<double> {
  using type = double2;
};

// Row `row` of a 2x2 output tile; one vector store when both columns exist and are aligned.
template <typename TIo, typename T>
__device__ __forceinline__ void write_output_row(TIo* dst, T left, T right, bool has_right, bool aligned) {
  if (has_right && aligned) {
    if constexpr (std::is_same_v<T, TIo>)
      *reinterpret_cast<typename PairOf<T>::type*>(dst) = {left, right};
    else
      store_pair<TIo>(dst, left, right);
  } else {
    dst[0] = io_from<TIo>(left);
    if (has_right) dst[1] = io_from<TIo>(right);
  }
}

template <typename T, typename TIo, int kReduction>
__global__ void __launch_bounds__(kShallowThreads, sizeof(T) == 4 ? 2 : 1)
    winograd_shallow_forward_kernel(const ShallowArgs<T, TIo> a) {
  __shared__ __align__(16) T us[kShallowFilters][kReduction][kWinogradPoints];
  const WinogradConv& cv = a.cv;
  const int kb = blockIdx.x % a.k_blocks;
  const int rest = blockIdx.x / a.k_blocks;
  const int pb = rest % a.p_blocks, g = rest / a.p_blocks;
  const int k0 = kb * kShallowFilters;
  const int filters = min(kShallowFilters, cv.Kg() - k0);

  // The block's filters, [filter][channel][point], from [group][channel][point][filter].
  const T* ug = a.u + int64_t(g) * a.reduction_pad * kWinogradPoints * a.outputs_pad + k0;
  for (int i = threadIdx.x; i < kShallowFilters * kReduction * kWinogradPoints; i += kShallowThreads) {
    const int k = i % kShallowFilters, ce = i / kShallowFilters;
    us[k][ce / kWinogradPoints][ce % kWinogradPoints] = ug[int64_t(ce) * a.outputs_pad + k];
  }

  const int64_t p = int64_t(pb) * kShallowThreads + threadIdx.x;
  const bool active = p < cv.tiles();
  const TileCoord t = tile_coord(cv, active ? p : 0);
  const int iy0 = 2 * t.ty + cv.col_oy, ix0 = 2 * t.tx + cv.col_ox;
  T v[kReduction][kWinogradPoints];
#pragma unroll
  for (int c = 0; c < kReduction; ++c) {
    const TIo* plane = a.x + (int64_t(t.n) * cv.src_C + int64_t(g) * cv.Cg() + c) * cv.in_plane;
    T d[16];
    load_input_patch(plane, cv, iy0, ix0, active && c < cv.Cg(), d);
    winograd_input_transform<T>(d, v[c]);
  }
  __syncthreads();
  if (!active) return;

  const int oy = 2 * t.ty, ox = 2 * t.tx;
  const bool has_right = ox + 1 < cv.out_W, has_below = oy + 1 < cv.out_H;
  const bool aligned = (cv.out_W % 2) == 0;  // ox is even, so the pair starts on a vector boundary
  const int k_first = g * cv.Kg() + k0;
  TIo* dst = a.y + ((int64_t(t.n) * cv.out_C + k_first) * cv.out_H + oy) * cv.out_W + ox;
  const int64_t out_plane = int64_t(cv.out_H) * cv.out_W;
#pragma unroll 2
  for (int k = 0; k < filters; ++k, dst += out_plane) {
    T m[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) m[e] = us[k][0][e] * v[0][e];
#pragma unroll
    for (int c = 1; c < kReduction; ++c)
#pragma unroll
      for (int e = 0; e < 16; ++e) m[e] += us[k][c][e] * v[c][e];
    T out[4];
    winograd_output_transform<T>(m, out);
    const T b = a.bias ? io_to<T>(a.bias[k_first + k]) : T(0);
    write_output_row(dst, out[0] + b, out[1] + b, has_right, aligned);
    if (has_below) write_output_row(dst + cv.out_W, out[2] + b, out[3] + b, has_right, aligned);
  }
}

// The shallow kernel on channels_last operands (x and y NHWC of TIo, computed in float32). A pixel's few channels sit
// together, and so do its outputs of the block's 32 filters, so here the lanes run along the filters
// rather than along tiles (whose outputs would be 4 bytes of a different pixel's 128 per lane). The
// block first transforms its kShallowNhwcTiles tiles' patches into shared memory, a thread per (tile,
// channel), so that neighbouring lanes read a pixel's neighbouring channels, and decodes each tile's
// output address once. Then each thread keeps its filter's U in registers and walks its warp's tiles:
// V read as broadcasts, the 16 products, the output transform, and the warp writes each output pixel's
// 32 filters as one 128-byte run.
constexpr int kShallowNhwcTiles = 128;  // tiles per block: 16 per warp
constexpr int kShallowNhwcLdV = kWinogradPoints + 4;  // a (tile, channel)'s V: 16-byte aligned, stores within 4 ways

// Three blocks per SM where the filters' U fits in 80 registers (at most 3 channels): the block's
// two phases (the patches' transform, then the products) then overlap across more blocks.
template <typename TIo, int kReduction>
__global__ void __launch_bounds__(kShallowThreads, kReduction <= 3 ? 3 : 2)
    winograd_shallow_nhwc_forward_kernel(const ShallowArgs<float, TIo> a) {
  static_assert(kShallowFilters == 32, "a lane per filter");
  __shared__ __align__(16) float vs[kShallowNhwcTiles][kReduction][kShallowNhwcLdV];
  __shared__ int64_t y_offset[kShallowNhwcTiles];  // the tile's output pixel (oy, ox), channel g * Kg
  __shared__ unsigned edges[kShallowNhwcTiles];    // bit 0: the tile exists; 1: its right column; 2: its lower row
  const WinogradConv& cv = a.cv;
  const int kb = blockIdx.x % a.k_blocks;
  const int rest = blockIdx.x / a.k_blocks;
  const int pb = rest % a.p_blocks, g = rest / a.p_blocks;
  const int64_t p0 = int64_t(pb) * kShallowNhwcTiles;

  for (int i = threadIdx.x; i < kShallowNhwcTiles * kReduction; i += kShallowThreads) {
    const int tl = i / kReduction, c = i % kReduction;
    const int64_t p = p0 + tl;
    const bool live = p < cv.tiles();
    const InputPatch patch(cv, p, live);
    const TileCoord& t = patch.tile;
    const unsigned mask = patch.mask;
    const TIo* src = a.x + patch.nhwc_offset(cv, int64_t(g) * kReduction + c);
    TIo raw[16];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        raw[r * 4 + q] = ldg_or_zero(src + (int64_t(r) * cv.src_W + q) * cv.src_C, (mask >> r) & (mask >> (4 + q)) & 1u);
    float d[16];
    widen_to_float(raw, d);
    winograd_input_transform<float>(d, vs[tl][c]);
    if (c == 0) {
      const int oy = 2 * t.ty, ox = 2 * t.tx;
      y_offset[tl] = ((int64_t(t.n) * cv.out_H + oy) * cv.out_W + ox) * cv.out_C + int64_t(g) * cv.Kg();
      edges[tl] = unsigned(live) | unsigned(ox + 1 < cv.out_W) << 1 | unsigned(oy + 1 < cv.out_H) << 2;
    }
  }
  __syncthreads();

  const int k = kb * kShallowFilters + int(threadIdx.x % 32);
  if (k >= cv.Kg()) return;
  float u[kReduction][kWinogradPoints];
  const float* ug = a.u + int64_t(g) * a.reduction_pad * kWinogradPoints * a.outputs_pad + k;
#pragma unroll
  for (int c = 0; c < kReduction; ++c)
#pragma unroll
    for (int e = 0; e < kWinogradPoints; ++e) u[c][e] = ug[int64_t(c * kWinogradPoints + e) * a.outputs_pad];
  const float b = a.bias ? to_float(a.bias[g * cv.Kg() + k]) : 0.f;
  const int64_t row_stride = int64_t(cv.out_W) * cv.out_C;
  for (int tl = int(threadIdx.x / 32); tl < kShallowNhwcTiles; tl += kShallowThreads / 32) {
    const unsigned ed = edges[tl];
    if (!(ed & 1u)) break;  // the block's tiles past the last one
    float m[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) m[e] = u[0][e] * vs[tl][0][e];
#pragma unroll
    for (int c = 1; c < kReduction; ++c)
#pragma unroll
      for (int e = 0; e < 16; ++e) m[e] += u[c][e] * vs[tl][c][e];
    float out[4];
    winograd_output_transform<float>(m, out);
    TIo* dst = a.y + y_offset[tl] + k;
    dst[0] = from_float<TIo>(out[0] + b);
    if (ed & 2u) dst[cv.out_C] = from_float<TIo>(out[1] + b);
    if (ed & 4u) {
      dst[row_stride] = from_float<TIo>(out[2] + b);
      if (ed & 2u) dst[row_stride + cv.out_C] = from_float<TIo>(out[3] + b);
    }
  }
}

// ---- narrow output (at most 4 filters per group) ----------------------------------------------

// The mirror case: few filters per group (grad_input of an RGB stem, whose "filters" are its 3 input
// channels; a 1-3 channel output head). A 32-filter GEMM tile would be mostly padding (an RGB
// stem's grad_input took 7x its DRAM bound). Each thread owns one tile and keeps the 16 products of each
// filter in registers while it walks the reduction: load the channel's patch (neighbouring lanes read
// overlapping patches, so L1 serves most of it), transform it, multiply-add into every filter's
// products. The filters of a run of channels sit in shared memory, read as broadcasts.
constexpr int kNarrowMaxOutputs = 4;
constexpr int kNarrowChannels = 64;  // reduction channels per shared-memory refill

template <typename T, typename TIo, int kOutputs>
__global__ void __launch_bounds__(kShallowThreads, sizeof(T) == 4 ? 2 : 1)
    winograd_narrow_forward_kernel(const ShallowArgs<T, TIo> a) {
  __shared__ __align__(16) T us[kNarrowChannels][kWinogradPoints][kOutputs];
  const WinogradConv& cv = a.cv;
  const int pb = blockIdx.x % a.p_blocks, g = blockIdx.x / a.p_blocks;
  const int64_t p = int64_t(pb) * kShallowThreads + threadIdx.x;
  const bool active = p < cv.tiles();
  const TileCoord t = tile_coord(cv, active ? p : 0);
  const int iy0 = 2 * t.ty + cv.col_oy, ix0 = 2 * t.tx + cv.col_ox;
  const TIo* plane = a.x + (int64_t(t.n) * cv.src_C + int64_t(g) * cv.Cg()) * cv.in_plane;
  const T* ug = a.u + int64_t(g) * a.reduction_pad * kWinogradPoints * a.outputs_pad;

  T m[kOutputs][kWinogradPoints];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o)
#pragma unroll
    for (int e = 0; e < kWinogradPoints; ++e) m[o][e] = T(0);
  for (int c0 = 0; c0 < cv.Cg(); c0 += kNarrowChannels) {
    const int count = min(kNarrowChannels, cv.Cg() - c0);
    __syncthreads();  // the previous run's filters are no longer read
    for (int i = threadIdx.x; i < count * kWinogradPoints * kOutputs; i += kShallowThreads) {
      const int o = i % kOutputs, ce = i / kOutputs;
      us[ce / kWinogradPoints][ce % kWinogradPoints][o] = ug[(int64_t(c0) * kWinogradPoints + ce) * a.outputs_pad + o];
    }
    __syncthreads();
    if (!active) continue;
    // Two channels in flight where the registers allow (with 3-4 filters they would spill).
#pragma unroll(kOutputs <= 2 ? 2 : 1)
    for (int c = 0; c < count; ++c) {
      T d[16], v[16];
      load_input_patch(plane + int64_t(c0 + c) * cv.in_plane, cv, iy0, ix0, true, d);
      winograd_input_transform<T>(d, v);
#pragma unroll
      for (int e = 0; e < kWinogradPoints; ++e)
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) m[o][e] += us[c][e][o] * v[e];
    }
  }
  if (!active) return;

  const int oy = 2 * t.ty, ox = 2 * t.tx;
  const bool has_right = ox + 1 < cv.out_W, has_below = oy + 1 < cv.out_H;
  const bool aligned = (cv.out_W % 2) == 0;
  const int k_first = g * cv.Kg();
  TIo* dst = a.y + ((int64_t(t.n) * cv.out_C + k_first) * cv.out_H + oy) * cv.out_W + ox;
  const int64_t out_plane = int64_t(cv.out_H) * cv.out_W;
#pragma unroll
  for (int o = 0; o < kOutputs; ++o, dst += out_plane) {
    T out[4];
    winograd_output_transform<T>(m[o], out);
    const T b = a.bias ? io_to<T>(a.bias[k_first + o]) : T(0);
    write_output_row(dst, out[0] + b, out[1] + b, has_right, aligned);
    if (has_below) write_output_row(dst + cv.out_W, out[2] + b, out[3] + b, has_right, aligned);
  }
}

// The narrow kernel on channels_last operands (x and y NHWC of TIo, computed in float32). One
// channel's patch is 16 scattered elements in NHWC, so here kNarrowNhwcLanes lanes share a tile: each
// takes kVec neighbouring channels of the 16 pixels per step (a word or two per pixel, so that a tile's
// lanes read a run of each pixel's channels), transforms them one channel at a time and multiplies
// them into its partial products of every filter; the lanes' partial outputs are then summed by
// shuffles and one lane writes the tile's outputs. The channels go to the lanes and are summed in
// the same order whatever TIo is, so a 16-bit call gives the float32 call's bits, rounded. The
// filters of a run of kNarrowChannels channels sit in shared memory, a row per channel, the rows of a
// step's j-th channels of the lanes consecutive and padded so that 8 lanes' 16-byte reads of a row
// fall in distinct banks. kVec = 1 where the channels do not come in aligned runs of 4 (host). A
// block walks tile groups a.p_blocks apart, so that where one run holds every channel (an RGB stem's
// grad_input) its filters are loaded once per block, not once per 32 tiles.
// Channel j of a load word of kWordChannels elements of TIo held as raw bits (Bits: their size), as
// float: j may vary at run time without indexing the word.
template <typename TIo, typename Bits>
__device__ __forceinline__ float word_channel(Bits w, int j) {
  auto of_bits = [](unsigned bits) {
    if constexpr (sizeof(TIo) == 4)
      return __uint_as_float(bits);
    else if constexpr (std::is_same_v<TIo, __half>)
      return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    else
      return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
  };
  if constexpr (sizeof(Bits) == 8) {
    if constexpr (sizeof(TIo) == 4) return of_bits(j ? w.y : w.x);
    else return of_bits(((j & 2) ? w.y : w.x) >> ((j & 1) * 16));
  } else {
    return of_bits(unsigned(w));
  }
}

constexpr int kNarrowNhwcLanes = 8;                                     // lanes per tile
constexpr int kNarrowNhwcTiles = kShallowThreads / kNarrowNhwcLanes;    // tiles per block
constexpr int kNarrowNhwcVec = 4;                                       // channels per lane and step

template <typename TIo, int kOutputs, int kVec>
__global__ void __launch_bounds__(kShallowThreads, 2)
    winograd_narrow_nhwc_forward_kernel(const ShallowArgs<float, TIo> a) {
  constexpr int kLanes = kNarrowNhwcLanes, kStep = kLanes * kVec;
  constexpr int kLdU = kOutputs * kWinogradPoints + 4;
  // A load word: kWordChannels neighbouring channels (8 bytes of them, or one element where kVec = 1),
  // kept as raw bits (word_channel).
  constexpr int kWordChannels = kVec == 1 ? 1 : 8 / int(sizeof(TIo));
  constexpr int kWords = kVec / kWordChannels;
  constexpr int kWordBytes = kWordChannels * int(sizeof(TIo));
  using Bits = std::conditional_t<kWordBytes == 8, uint2, std::conditional_t<kWordBytes == 4, unsigned, unsigned short>>;
  static_assert(kVec % kWordChannels == 0, "whole words per step");
  static_assert(kNarrowChannels % kStep == 0, "whole steps per refill");
  __shared__ __align__(16) float us[kNarrowChannels][kLdU];
  const WinogradConv& cv = a.cv;
  const int pb0 = blockIdx.x % a.p_blocks, g = blockIdx.x / a.p_blocks;
  const int sub = int(threadIdx.x) % kLanes;
  const int64_t tile_groups = (cv.tiles() + kNarrowNhwcTiles - 1) / kNarrowNhwcTiles;
  const int64_t x_col = cv.src_C, x_row = int64_t(cv.src_W) * cv.src_C;
  const float* ug = a.u + int64_t(g) * a.reduction_pad * kWinogradPoints * a.outputs_pad;
  // The filters of channels [c0, c0 + count) into shared memory.
  auto fill = [&](int c0, int count) {
    for (int i = threadIdx.x; i < count * kWinogradPoints * kOutputs; i += kShallowThreads) {
      const int o = i % kOutputs, ce = i / kOutputs;
      const int c = ce / kWinogradPoints, e = ce % kWinogradPoints;
      const int r = c % kStep;  // channel r of its step: lane r / kVec's (r % kVec)-th
      us[c - r + (r % kVec) * kLanes + r / kVec][o * kWinogradPoints + e] =
          ug[(int64_t(c0) * kWinogradPoints + ce) * a.outputs_pad + o];
    }
  };
  // With at most kNarrowChannels channels the filters stay resident while the block walks its tiles.
  const bool resident = cv.Cg() <= kNarrowChannels;
  if (resident) {
    fill(0, cv.Cg());
    __syncthreads();
  }
  for (int64_t pb = pb0; pb < tile_groups; pb += a.p_blocks) {
    const int64_t p = pb * kNarrowNhwcTiles + threadIdx.x / kLanes;
    const bool active = p < cv.tiles();
    const InputPatch patch(cv, p, active);
    const TileCoord& t = patch.tile;
    const unsigned mask = patch.mask;
    const TIo* src = a.x + patch.nhwc_offset(cv, int64_t(g) * cv.Cg());

    float m[kOutputs][kWinogradPoints];
#pragma unroll
    for (int o = 0; o < kOutputs; ++o)
#pragma unroll
      for (int e = 0; e < kWinogradPoints; ++e) m[o][e] = 0.f;
    for (int c0 = 0; c0 < cv.Cg(); c0 += kNarrowChannels) {
      const int count = min(kNarrowChannels, cv.Cg() - c0);
      if (!resident) {
        __syncthreads();  // the previous run's filters are no longer read
        fill(c0, count);
        __syncthreads();
      }
      for (int s0 = 0; s0 < count; s0 += kStep) {
        const int cl = s0 + sub * kVec;  // the lane's first channel of the step
        if (cl >= count) continue;       // (the host makes kVec divide the channels: whole runs)
        const TIo* base = src + c0 + cl;
#pragma unroll 1
        for (int wd = 0; wd < kWords; ++wd) {
          Bits w[16];
#pragma unroll
          for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const bool in = (mask >> r) & (mask >> (4 + q)) & 1u;
              w[r * 4 + q] =
                  in ? *reinterpret_cast<const Bits*>(base + r * x_row + q * x_col + wd * kWordChannels) : Bits{};
            }
#pragma unroll 1
          for (int j = 0; j < kWordChannels; ++j) {
            float d[16], v[16];
#pragma unroll
            for (int e = 0; e < 16; ++e) d[e] = word_channel<TIo>(w[e], j);
            winograd_input_transform<float>(d, v);
            const float* urow = us[s0 + (wd * kWordChannels + j) * kLanes + sub];
#pragma unroll
            for (int o = 0; o < kOutputs; ++o)
#pragma unroll
              for (int e4 = 0; e4 < 4; ++e4) {
                const float4 u4 = *reinterpret_cast<const float4*>(urow + o * kWinogradPoints + e4 * 4);
                m[o][e4 * 4 + 0] += u4.x * v[e4 * 4 + 0];
                m[o][e4 * 4 + 1] += u4.y * v[e4 * 4 + 1];
                m[o][e4 * 4 + 2] += u4.z * v[e4 * 4 + 2];
                m[o][e4 * 4 + 3] += u4.w * v[e4 * 4 + 3];
              }
          }
        }
      }
    }
    float out[kOutputs][4];
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) winograd_output_transform<float>(m[o], out[o]);
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2)
#pragma unroll
      for (int o = 0; o < kOutputs; ++o)
#pragma unroll
        for (int i = 0; i < 4; ++i) out[o][i] += __shfl_xor_sync(0xffffffffu, out[o][i], off);
    if (!active || sub != 0) continue;

    const int oy = 2 * t.ty, ox = 2 * t.tx;
    const bool has_right = ox + 1 < cv.out_W, has_below = oy + 1 < cv.out_H;
    const int k_first = g * cv.Kg();
    TIo* dst = a.y + ((int64_t(t.n) * cv.out_H + oy) * cv.out_W + ox) * cv.out_C + k_first;
    const int64_t row_stride = int64_t(cv.out_W) * cv.out_C;
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
      const float b = a.bias ? to_float(a.bias[k_first + o]) : 0.f;
      dst[o] = from_float<TIo>(out[o][0] + b);
      if (has_right) dst[cv.out_C + o] = from_float<TIo>(out[o][1] + b);
      if (has_below) {
        dst[row_stride + o] = from_float<TIo>(out[o][2] + b);
        if (has_right) dst[row_stride + cv.out_C + o] = from_float<TIo>(out[o][3] + b);
      }
    }
  }
}

// ---- grad_weight of a shallow reduction (at most 4 channels per group) ------------------------

// An RGB stem's grad_weight sums, over every 2x2 output tile, the products of its 16 dM points (one
// per filter) with the 16 V points of each of its few channels: a GEMM block would be mostly
// padding on the channels (the narrow IEEE tile's 8). Here a lane owns a filter of its block's 32 and
// keeps its kChannels x 16 sums in registers while its warp walks tiles. A block first stages a batch
// of tiles in shared memory, in float32: each tile's V (a thread per (tile, channel)) and its 2x2
// grad_output values of the block's filters (a thread per (tile, filter)), each load run along what
// is contiguous in the tensors' format (channels in NHWC, tiles in NCHW). Then each lane forms its
// filter's dM of a tile from the staged values, reads the tile's V as broadcasts and adds the
// products. A block sums one slice of the tiles into a dU slice of its own, which
// winograd_weight_grad_finish_kernel sums in slice order (so the result is deterministic). Operands of
// TIo (float, bfloat16 or float16) are read as they are and widened exactly; the sums are float32.
constexpr int kShallowWeightGradBatch = 64;                    // tiles staged per round
constexpr int kShallowWeightGradLdY = kShallowFilters * 4 + 4;  // a tile's 2x2 values of 32 filters: stores within 4 ways

template <typename TIo>
struct ShallowWeightGradArgs {
  const TIo* x;
  const TIo* gy;
  float* partial;  // [split][group][16][k_pad][Cg] (winograd_weight_grad_finish_kernel's slices)
  WinogradConv cv;  // the forward's
  int k_pad, k_blocks;
  int64_t tiles_per_split;
};

template <int kChannels>
struct ShallowWeightGradSmem {
  float v[kShallowWeightGradBatch][kChannels][kShallowNhwcLdV];
  float dy[kShallowWeightGradBatch][kShallowWeightGradLdY];
  int64_t x_offset[kShallowWeightGradBatch];  // the patch's first pixel (may lie in the padding), channel g * Cg
  int64_t y_offset[kShallowWeightGradBatch];  // the tile's grad_output pixel (oy, ox), filter g * Kg + k0
  unsigned x_mask[kShallowWeightGradBatch];   // patch_mask
  unsigned edges[kShallowWeightGradBatch];    // bit 0: the tile exists; 1: its right column; 2: its lower row
};

template <typename TIo, int kChannels, bool kNhwc>
__global__ void __launch_bounds__(kShallowThreads, 2)
    winograd_shallow_weight_grad_kernel(const ShallowWeightGradArgs<TIo> a) {
  static_assert(kShallowFilters == 32, "a lane per filter");
  constexpr int kBatch = kShallowWeightGradBatch;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<ShallowWeightGradSmem<kChannels>*>(smem_raw);
  const WinogradConv& cv = a.cv;
  const int kb = blockIdx.x % a.k_blocks;
  const int rest = blockIdx.x / a.k_blocks;
  const int g = rest % cv.groups, split = rest / cv.groups;
  const int Kg = cv.Kg(), k0 = kb * kShallowFilters;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tile_begin = int64_t(split) * a.tiles_per_split;
  const int64_t tile_end = min(tile_begin + a.tiles_per_split, cv.tiles());
  const int64_t out_plane = int64_t(cv.out_H) * cv.out_W;
  // Steps through the tensors in their format: a filter, a column and a row of grad_output; a
  // channel, a column and a row of the input.
  const int64_t y_k = kNhwc ? 1 : out_plane, y_col = kNhwc ? cv.out_C : 1, y_row = int64_t(cv.out_W) * y_col;
  const int64_t x_c = kNhwc ? 1 : cv.in_plane, x_col = kNhwc ? cv.src_C : 1, x_row = int64_t(cv.src_W) * x_col;

  float acc[kChannels][kWinogradPoints];
#pragma unroll
  for (int c = 0; c < kChannels; ++c)
#pragma unroll
    for (int e = 0; e < kWinogradPoints; ++e) acc[c][e] = 0.f;
  for (int64_t b0 = tile_begin; b0 < tile_end; b0 += kBatch) {
    const int count = int(min(int64_t(kBatch), tile_end - b0));
    __syncthreads();  // the previous batch is no longer read
    if (threadIdx.x < kBatch) {
      const int tl = threadIdx.x;
      const bool live = tl < count;
      const InputPatch patch(cv, b0 + tl, live);
      const TileCoord& t = patch.tile;
      const int oy = 2 * t.ty, ox = 2 * t.tx;
      sm.x_mask[tl] = patch.mask;
      const int64_t c0 = int64_t(g) * cv.Cg();
      sm.x_offset[tl] = kNhwc ? patch.nhwc_offset(cv, c0) : patch.nchw_offset(cv, c0);
      sm.y_offset[tl] = kNhwc ? ((int64_t(t.n) * cv.out_H + oy) * cv.out_W + ox) * cv.out_C + int64_t(g) * Kg + k0
                              : (int64_t(t.n) * cv.out_C + int64_t(g) * Kg + k0) * out_plane + int64_t(oy) * cv.out_W + ox;
      sm.edges[tl] = unsigned(live) | unsigned(ox + 1 < cv.out_W) << 1 | unsigned(oy + 1 < cv.out_H) << 2;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kBatch * kChannels; i += kShallowThreads) {
      const int tl = kNhwc ? i / kChannels : i % kBatch, c = kNhwc ? i % kChannels : i / kBatch;
      const unsigned mask = sm.x_mask[tl];
      const TIo* src = a.x + sm.x_offset[tl] + c * x_c;
      TIo raw[16];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          raw[r * 4 + q] = ldg_or_zero(src + r * x_row + q * x_col, (mask >> r) & (mask >> (4 + q)) & 1u);
      float d[16];
      widen_to_float(raw, d);
      winograd_input_transform<float>(d, sm.v[tl][c]);
    }
    // Every (tile, filter) item's four loads issued before any is used: the batch's loads in flight together.
    constexpr int kItems = kBatch * kShallowFilters / kShallowThreads;
    static_assert(kBatch * kShallowFilters % kShallowThreads == 0, "whole items per thread");
    TIo raw[kItems][4];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = int(threadIdx.x) + j * kShallowThreads;
      const int tl = kNhwc ? i / kShallowFilters : i % kBatch, k = kNhwc ? i % kShallowFilters : i / kBatch;
      const unsigned ed = k0 + k < Kg ? sm.edges[tl] : 0u;
      const TIo* src = a.gy + sm.y_offset[tl] + k * y_k;
      raw[j][0] = ldg_or_zero(src, ed & 1u);
      raw[j][1] = ldg_or_zero(src + y_col, (ed & 3u) == 3u);
      raw[j][2] = ldg_or_zero(src + y_row, (ed & 5u) == 5u);
      raw[j][3] = ldg_or_zero(src + y_row + y_col, ed == 7u);
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = int(threadIdx.x) + j * kShallowThreads;
      const int tl = kNhwc ? i / kShallowFilters : i % kBatch, k = kNhwc ? i % kShallowFilters : i / kBatch;
      float dy[4];
      widen_to_float(raw[j], dy);
      *reinterpret_cast<float4*>(&sm.dy[tl][k * 4]) = make_float4(dy[0], dy[1], dy[2], dy[3]);
    }
    __syncthreads();
    for (int tl = warp; tl < count; tl += kShallowThreads / 32) {
      const float4 y4 = *reinterpret_cast<const float4*>(&sm.dy[tl][lane * 4]);
      const float dy[4] = {y4.x, y4.y, y4.z, y4.w};
      float dm[16];
      winograd_output_transform_adjoint<float>(dy, dm);
#pragma unroll
      for (int c = 0; c < kChannels; ++c)
#pragma unroll
        for (int e4 = 0; e4 < 4; ++e4) {
          const float4 v = *reinterpret_cast<const float4*>(&sm.v[tl][c][e4 * 4]);
          acc[c][e4 * 4 + 0] += dm[e4 * 4 + 0] * v.x;
          acc[c][e4 * 4 + 1] += dm[e4 * 4 + 1] * v.y;
          acc[c][e4 * 4 + 2] += dm[e4 * 4 + 2] * v.z;
          acc[c][e4 * 4 + 3] += dm[e4 * 4 + 3] * v.w;
        }
    }
  }
  // The block's warps walked different tiles: their sums of a filter add up in warp order, a channel
  // at a time through the staged grad_output's space.
  constexpr int kWarps = kShallowThreads / 32;
  static_assert(sizeof(float) * kWarps * 32 * (kWinogradPoints + 1) <= sizeof(sm.dy), "the warps' sums fit");
  auto red = reinterpret_cast<float (*)[32][kWinogradPoints + 1]>(&sm.dy[0][0]);
  float* out = a.partial + (int64_t(split) * cv.groups + g) * kWinogradPoints * a.k_pad * kChannels;
#pragma unroll
  for (int c = 0; c < kChannels; ++c) {
    __syncthreads();  // the last batch's operands, or the previous channel's sums, are no longer read
#pragma unroll
    for (int e = 0; e < kWinogradPoints; ++e) red[warp][lane][e] = acc[c][e];
    __syncthreads();
    for (int i = threadIdx.x; i < 32 * kWinogradPoints; i += kShallowThreads) {
      const int kl = i % 32, e = i / 32;
      float sum = red[0][kl][e];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum += red[w][kl][e];
      if (k0 + kl < Kg) out[(int64_t(e) * a.k_pad + k0 + kl) * kChannels + c] = sum;
    }
  }
}

// ---- staged variant -------------------------------------------------------------------------

// V for tiles [tile0, tile0 + tiles_pad) laid out [group][point group][channel (padded)][kGroupPoints]
// [tiles_pad] (FilterLayout's point groups), zero in the padding.
template <typename Tile, typename T, int kGroupPoints>
__global__ void winograd_input_transform_kernel(const T* __restrict__ x, T* __restrict__ v, const WinogradConv cv,
                                                int64_t tile0, int64_t tile_count, int tiles_pad, int channels_pad) {
  constexpr int kPointGroups = Tile::kPoints / kGroupPoints;
  const int64_t total = int64_t(cv.groups) * channels_pad * tiles_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i % tiles_pad), c = int((i / tiles_pad) % channels_pad);
    const int g = int(i / (int64_t(tiles_pad) * channels_pad));
    const bool ok = j < tile_count && c < cv.Cg();
    const TileCoord t = tile_coord(cv, ok ? tile0 + j : 0);
    const T* plane = x + (int64_t(t.n) * cv.src_C + g * cv.Cg() + (ok ? c : 0)) * cv.in_plane;
    T d[Tile::kPoints], vv[Tile::kPoints];
    load_input_patch<Tile>(plane, cv, Tile::kOutput * t.ty + cv.col_oy, Tile::kOutput * t.tx + cv.col_ox, ok, d);
    Tile::input(d, vv);
#pragma unroll
    for (int q = 0; q < kPointGroups; ++q) {
      T* dst = v + ((int64_t(g) * kPointGroups + q) * channels_pad + c) * kGroupPoints * tiles_pad + j;
#pragma unroll
      for (int e = 0; e < kGroupPoints; ++e) dst[int64_t(e) * tiles_pad] = vv[q * kGroupPoints + e];
    }
  }
}

template <typename T>
struct StagedGemmArgs {
  const T* u;  // FilterLayout
  const T* v;  // [group][point group][channels_pad][kBatch][tiles_pad]
  T* m;        // [group][points][outputs_pad][tiles_pad]
  int reduction_pad, outputs_pad, tiles_pad;
  int k_tiles, p_tiles;
};

// A block of the batched GEMMs M[e] = U[e] V[e], one point group (Cfg::kBatch points) per block
// column: the block's "group" counts the convolution's groups times its point groups, which U, V
// and M lay out consecutively. Its coordinates and U and V loaders, for the IEEE kernel below and
// the tensor-core one (winograd_batched_gemm_mma_kernel in winograd_tc_kernels.cuh).
template <typename T, typename Cfg>
struct StagedGemmBlock {
  BlockCoord bc;
  PaddedTileLoader<T, Cfg, Cfg::kM, Cfg::kLdA> la;
  PaddedTileLoader<T, Cfg, Cfg::kN, Cfg::kLdB> lb;

  __device__ __forceinline__ explicit StagedGemmBlock(const StagedGemmArgs<T>& a)
      : bc(block_coord(a.k_tiles, a.p_tiles)),
        la{a.u + int64_t(bc.g) * a.reduction_pad * Cfg::kBatch * a.outputs_pad, a.outputs_pad, bc.kt * Cfg::kM},
        lb{a.v + int64_t(bc.g) * a.reduction_pad * Cfg::kBatch * a.tiles_pad, a.tiles_pad, bc.pt * Cfg::kN} {}
  // The block's tile of M for point `batch` of its group ([group][points][outputs_pad][tiles_pad]).
  __device__ __forceinline__ T* m_tile(const StagedGemmArgs<T>& a, int batch) const {
    return a.m + ((int64_t(bc.g) * Cfg::kBatch + batch) * a.outputs_pad + bc.kt * Cfg::kM) * a.tiles_pad +
           bc.pt * Cfg::kN;
  }
};

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) winograd_batched_gemm_kernel(const StagedGemmArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const StagedGemmBlock<T, Cfg> blk(a);
  T acc[Cfg::kThreadM][Cfg::kThreadN];
  block_gemm<T, Cfg>(smem, blk.la, blk.lb, a.reduction_pad / Cfg::kK, acc);
  const ThreadTile<Cfg> tt(threadIdx.x);
  T* out = blk.m_tile(a, tt.batch);
#pragma unroll
  for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kThreadN; ++j) out[int64_t(tt.row(i)) * a.tiles_pad + tt.col(j)] = acc[i][j];
}

// Y = A^T M A + bias, one thread per (filter, tile); M is [group][points][outputs_pad][tiles_pad].
template <typename Tile, typename T>
__global__ void winograd_output_transform_kernel(const T* __restrict__ m, const T* __restrict__ bias, T* __restrict__ y,
                                                 const WinogradConv cv, int64_t tile0, int64_t tile_count,
                                                 int tiles_pad, int outputs_pad) {
  constexpr int kOut = Tile::kOutput;
  const int Kg = cv.Kg();
  const int64_t total = int64_t(cv.out_C) * tile_count;
  const int64_t stride = int64_t(outputs_pad) * tiles_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % tile_count;
    const int k = int(i / tile_count), g = k / Kg, kg = k % Kg;
    const T* src = m + (int64_t(g) * Tile::kPoints * outputs_pad + kg) * tiles_pad + j;
    T mm[Tile::kPoints], out[kOut * kOut];
#pragma unroll
    for (int e = 0; e < Tile::kPoints; ++e) mm[e] = src[e * stride];
    Tile::output(mm, out);
    const T b = bias ? bias[k] : T(0);
    const TileCoord t = tile_coord(cv, tile0 + j);
    const int oy = kOut * t.ty, ox = kOut * t.tx;
    T* dst = y + ((int64_t(t.n) * cv.out_C + k) * cv.out_H + oy) * cv.out_W + ox;
#pragma unroll
    for (int r = 0; r < kOut; ++r) {
      if (oy + r >= cv.out_H) break;
#pragma unroll
      for (int c = 0; c < kOut; ++c)
        if (ox + c < cv.out_W) dst[int64_t(r) * cv.out_W + c] = out[r * kOut + c] + b;
    }
  }
}

// ---- grad_weight ----------------------------------------------------------------------------

template <typename T, typename TIo = T>  // as ForwardArgs
struct WeightGradArgs {
  const TIo* x;
  const TIo* gy;
  T* partial;  // [split][group][16][Kpad][Cpad]
  WinogradConv cv;
  int k_pad, c_pad;
  int k_tiles, c_tiles;
  int64_t tiles_per_split;
};

// A grad_weight block's filter tile, channel tile, group and slice of the tile reduction: filter
// tiles fastest, then channel tiles, groups and slices (every grad_weight kernel's grid).
struct WeightGradBlock {
  int kt, ct, g, split;
};
__device__ __forceinline__ WeightGradBlock weight_grad_block(int k_tiles, int c_tiles, int groups) {
  int b = blockIdx.x;
  const int kt = b % k_tiles;
  b /= k_tiles;
  const int ct = b % c_tiles;
  b /= c_tiles;
  return {kt, ct, b % groups, b / groups};
}

// A grad_weight block's place (weight_grad_block) and the tiles of its slice, [tile_begin, tile_end).
struct WeightGradSlice {
  int kt, ct, g, split;
  int64_t tile_begin, tile_end;
};
template <typename T, typename TIo>
__device__ __forceinline__ WeightGradSlice weight_grad_slice(const WeightGradArgs<T, TIo>& a) {
  const WeightGradBlock b = weight_grad_block(a.k_tiles, a.c_tiles, a.cv.groups);
  const int64_t tile_begin = b.split * a.tiles_per_split;
  return {b.kt, b.ct, b.g, b.split, tile_begin, min(tile_begin + a.tiles_per_split, a.cv.tiles())};
}

// Writes (or adds) a block's 16 x kM x kN accumulator tile to dU slice `slice` ([16][k_pad][c_pad]).
template <typename T, typename Cfg>
__device__ __forceinline__ void store_weight_grad_slice(const T (&acc)[Cfg::kThreadM][Cfg::kThreadN], T* partial,
                                                        int slice, int k_pad, int c_pad, int kt, int ct,
                                                        bool accumulate) {
  const ThreadTile<Cfg> tt(threadIdx.x);
  T* out = partial + ((int64_t(slice) * kWinogradPoints + tt.batch) * k_pad + kt * Cfg::kM) * c_pad + ct * Cfg::kN;
#pragma unroll
  for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kThreadN; ++j) {
      T* o = out + int64_t(tt.row(i)) * c_pad + tt.col(j);
      *o = accumulate ? *o + acc[i][j] : acc[i][j];
    }
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_weight_grad_kernel(const WeightGradArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const auto [kt, ct, g, split, tile_begin, tile_end] = weight_grad_slice(a);
  const int Kg = a.cv.Kg(), Cg = a.cv.Cg();
  T* const stage = smem + Cfg::kTileA * 2 + Cfg::kTileB * 2;
  GradOutputTileLoader<T, Cfg> la{a.gy, stage, a.cv, tile_begin, tile_end, g * Kg + kt * Cfg::kM, (g + 1) * Kg};
  InputByTileLoader<T, Cfg> lb{a.x, stage + GradOutputTileLoader<T, Cfg>::kStageElems, a.cv, tile_begin, tile_end,
                               g * Cg + ct * Cfg::kN, (g + 1) * Cg};
  const int chunks = int((tile_end - tile_begin + Cfg::kK - 1) / Cfg::kK);
  T acc[Cfg::kThreadM][Cfg::kThreadN];
  block_gemm<T, Cfg>(smem, la, lb, chunks, acc);
  store_weight_grad_slice<T, Cfg>(acc, a.partial, split * a.cv.groups + g, a.k_pad, a.c_pad, kt, ct, false);
}

// Staged grad_weight: the operands come transformed from a workspace, V^T as [group][tile][16][c_pad]
// and dM^T as [group][tile][16][k_pad] (tiles padded to a whole chunk with zeros), so both tile
// loaders are plain row copies; the tiles of the batch arrive in workspace-sized chunks and every
// chunk after the first adds to the slices (in stream order, so the sum stays deterministic).
template <typename T>
struct StagedWeightGradArgs {
  const T* vt;
  const T* dmt;
  T* partial;
  int groups, k_pad, c_pad, tiles_pad, tiles_per_split;
  int k_tiles, c_tiles;
  bool accumulate;
};

// A block of the staged grad_weight's GEMM dU[p] += dM^T[p]^T V^T[p] over the tiles of its split:
// its coordinates, its tile count and its dM^T and V^T loaders, for the IEEE kernel below and the
// tensor-core one (winograd_weight_grad_gemm_mma_kernel in winograd_tc_kernels.cuh).
template <typename T, typename Cfg>
struct StagedWeightGradBlock {
  WeightGradBlock wb;
  int tiles;  // of the block's split
  PaddedTileLoader<T, Cfg, Cfg::kM, Cfg::kLdA> la;
  PaddedTileLoader<T, Cfg, Cfg::kN, Cfg::kLdB> lb;

  __device__ __forceinline__ explicit StagedWeightGradBlock(const StagedWeightGradArgs<T>& a)
      : wb(weight_grad_block(a.k_tiles, a.c_tiles, a.groups)),
        tiles(min(a.tiles_per_split, a.tiles_pad - wb.split * a.tiles_per_split)),
        la{a.dmt + (int64_t(wb.g) * a.tiles_pad + wb.split * a.tiles_per_split) * kWinogradPoints * a.k_pad, a.k_pad,
           wb.kt * Cfg::kM},
        lb{a.vt + (int64_t(wb.g) * a.tiles_pad + wb.split * a.tiles_per_split) * kWinogradPoints * a.c_pad, a.c_pad,
           wb.ct * Cfg::kN} {}
  // The dU slice the block writes or adds to (store_weight_grad_slice's layout).
  __device__ __forceinline__ int slice(const StagedWeightGradArgs<T>& a) const { return wb.split * a.groups + wb.g; }
};

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_weight_grad_gemm_kernel(const StagedWeightGradArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const StagedWeightGradBlock<T, Cfg> blk(a);
  T acc[Cfg::kThreadM][Cfg::kThreadN];
  block_gemm<T, Cfg>(smem, blk.la, blk.lb, blk.tiles / Cfg::kK, acc);
  store_weight_grad_slice<T, Cfg>(acc, a.partial, blk.slice(a), a.k_pad, a.c_pad, blk.wb.kt, blk.wb.ct, a.accumulate);
}

// V^T for the staged grad_weight: one thread per (group, tile, channel), channels fastest so the
// 16 points are written coalesced.
template <typename T>
__global__ void winograd_input_transform_by_tile_kernel(const T* __restrict__ x, T* __restrict__ vt,
                                                        const WinogradConv cv, int64_t tile0, int64_t count,
                                                        int tiles_pad, int c_pad) {
  const int64_t total = int64_t(cv.groups) * tiles_pad * c_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % c_pad), j = int((i / c_pad) % tiles_pad), g = int(i / (int64_t(c_pad) * tiles_pad));
    const bool ok = j < count && c < cv.Cg();
    const TileCoord t = tile_coord(cv, ok ? tile0 + j : 0);
    const T* plane = x + (int64_t(t.n) * cv.src_C + g * cv.Cg() + (ok ? c : 0)) * cv.in_plane;
    T d[16], v[16];
    load_input_patch(plane, cv, 2 * t.ty + cv.col_oy, 2 * t.tx + cv.col_ox, ok, d);
    winograd_input_transform<T>(d, v);
    T* dst = vt + (int64_t(g) * tiles_pad + j) * kWinogradPoints * c_pad + c;
#pragma unroll
    for (int e = 0; e < 16; ++e) dst[int64_t(e) * c_pad] = v[e];
  }
}

// dM^T = (A dY A^T) for the staged grad_weight, one thread per (group, tile, filter).
template <typename T>
__global__ void winograd_grad_output_transform_kernel(const T* __restrict__ gy, T* __restrict__ dmt,
                                                      const WinogradConv cv, int64_t tile0, int64_t count,
                                                      int tiles_pad, int k_pad) {
  const int64_t total = int64_t(cv.groups) * tiles_pad * k_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(i % k_pad), j = int((i / k_pad) % tiles_pad), g = int(i / (int64_t(k_pad) * tiles_pad));
    const bool ok = j < count && k < cv.Kg();
    const TileCoord t = tile_coord(cv, ok ? tile0 + j : 0);
    const int oy = 2 * t.ty, ox = 2 * t.tx;
    const T* plane = gy + (int64_t(t.n) * cv.out_C + g * cv.Kg() + (ok ? k : 0)) * cv.out_H * cv.out_W;
    T dy[4], dm[16];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const bool in = ok && oy + a < cv.out_H && ox + b < cv.out_W;
        dy[a * 2 + b] = in ? plane[int64_t(oy + a) * cv.out_W + ox + b] : T(0);
      }
    winograd_output_transform_adjoint<T>(dy, dm);
    T* dst = dmt + (int64_t(g) * tiles_pad + j) * kWinogradPoints * k_pad + k;
#pragma unroll
    for (int e = 0; e < 16; ++e) dst[int64_t(e) * k_pad] = dm[e];
  }
}

// Sums dU's `slices` slices (`slice` elements apart, in slice order: the bits sum_slices_kernel's
// single lane gives) and maps it back to the filter: dg = G^T dU G. A warp takes 32 (filter, channel)
// pairs at a time, as 8 runs of 4 neighbouring channels of one filter: lane 8 q + j loads points
// 4 q .. 4 q + 3 of run j, a point's 4 channels as one 16-byte word where c_pad is a multiple of 4 (the
// tensor-core kernels' partial sums, whose padding columns hold zeros), element by element otherwise.
// Each lane so keeps 16 values a slice in flight: with 4 (a quarter of one pair's points) the warps
// the SMs hold kept too few bytes in flight to read the partial sums at the DRAM's pace. The points
// meet in shared memory ([point][pair]), where each lane then takes one pair's 16 points; for KCRS the
// warp's 288 values of gw are staged there too, for whole stores. gw is written in the weight's dtype
// (TOut, rounded to nearest even: the bits a cast of the T result gives) and layout: KCRS, where
// consecutive pairs' 9 values are consecutive, or KRSC (kKrsc, channels_last), where a tap's pairs
// are consecutive channels of one filter. run_div divides by the runs a filter has (ceil(Cg / 4)),
// kg_div by Kg. kSlicesInFlight: the slices whose loads a lane issues before adding them (in slice
// order, so the bits stay): where a layer has few pairs and many slices the grid holds fewer warps
// than the SMs do, and one slice's loads a lane left the DRAM idle between them; 1 elsewhere, where
// the registers of more would cost warps.
constexpr int kWeightGradFinishThreads = 256, kWeightGradFinishRuns = 8, kWeightGradFinishRun = 4;
template <typename T, typename TOut, bool kKrsc, int kSlicesInFlight>
__global__ void __launch_bounds__(kWeightGradFinishThreads)
    winograd_weight_grad_finish_kernel(const T* __restrict__ du, TOut* __restrict__ gw, int groups, int Kg, int Cg,
                                       FastDivisor run_div, FastDivisor kg_div, int k_pad, int c_pad, int slices,
                                       int64_t slice) {
  constexpr int kRuns = kWeightGradFinishRuns, kRun = kWeightGradFinishRun, kWarps = kWeightGradFinishThreads / 32;
  static_assert(kRuns * kRun == 32, "a pair per lane");
  grid_dependency_wait();  // dU's slices, from the kernel before (a programmatic dependent of it)
  struct alignas(kRun * sizeof(T)) Run {
    T v[kRun];
  };
  __shared__ Run points[kWarps][kWinogradPoints][kRuns];  // a warp's [point][pair]; then its staged gw
  static_assert(kWinogradPoints * kRuns * kRun >= 32 * 9, "the staged gw within a warp's points");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane / kRuns, j = lane % kRuns;
  const int runs_per_filter = int(run_div.d);
  const int64_t total = int64_t(groups) * Kg * runs_per_filter;  // runs
  const bool narrow = total < (int64_t(1) << 31);                // run_div takes numerators below 2^31
  const bool words = c_pad % kRun == 0 && aligned_to(du, sizeof(Run)) &&
                     slice % kRun == 0;
  const int64_t point_step = int64_t(k_pad) * c_pad;
  T* staged = points[warp][0][0].v;
  auto load_run = [&](const T* src, int c0) {
    Run v;
    if (words) {
      v = *reinterpret_cast<const Run*>(src);
    } else {
#pragma unroll
      for (int cc = 0; cc < kRun; ++cc) v.v[cc] = c0 + cc < c_pad ? src[cc] : T(0);
    }
    return v;
  };
  const int64_t step = int64_t(gridDim.x) * kWarps * kRuns;
  for (int64_t r0 = (int64_t(blockIdx.x) * kWarps + warp) * kRuns; r0 < total; r0 += step) {
    const int64_t r = r0 + j;
    int k = 0, c0 = 0;  // run r's filter (over all groups) and first channel
    if (r < total) {
      const int64_t rk = narrow ? int64_t(run_div.div(uint32_t(r))) : r / runs_per_filter;
      k = int(rk), c0 = kRun * int(r - rk * runs_per_filter);
      const int g = int(kg_div.div(uint32_t(k))), kg = k - g * Kg;
      const T* src = du + ((int64_t(g) * kWinogradPoints + 4 * q) * k_pad + kg) * c_pad + c0;
      Run sum[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[e] = load_run(src + e * point_step, c0);
      // Slices s .. s + n - 1 loaded, then added in slice order.
      auto add_slices = [&](int s, auto n) {
        constexpr int kN = decltype(n)::value;
        Run v[kN][4];
#pragma unroll
        for (int u = 0; u < kN; ++u)
#pragma unroll
          for (int e = 0; e < 4; ++e) v[u][e] = load_run(src + (s + u) * slice + e * point_step, c0);
#pragma unroll
        for (int u = 0; u < kN; ++u)
#pragma unroll
          for (int e = 0; e < 4; ++e)
#pragma unroll
            for (int cc = 0; cc < kRun; ++cc) sum[e].v[cc] += v[u][e].v[cc];
      };
      int s = 1;
      if constexpr (kSlicesInFlight > 1)
        for (; s + kSlicesInFlight <= slices; s += kSlicesInFlight)
          add_slices(s, std::integral_constant<int, kSlicesInFlight>{});
      for (; s < slices; ++s) add_slices(s, std::integral_constant<int, 1>{});
#pragma unroll
      for (int e = 0; e < 4; ++e) points[warp][4 * q + e][j] = sum[e];
    }
    __syncwarp();
    // This lane's pair: channel c0 + lane % 4 of run lane / 4, whose place that run's first lane found.
    const int run = lane / kRun;
    const int pk = __shfl_sync(0xffffffffu, k, run), pc = __shfl_sync(0xffffffffu, c0, run) + lane % kRun;
    const bool live = r0 + run < total && pc < Cg;
    T dg[9];
    if (live) {
      T du_pair[kWinogradPoints];
#pragma unroll
      for (int e = 0; e < kWinogradPoints; ++e) du_pair[e] = points[warp][e][run].v[lane % kRun];
      winograd_filter_transform_adjoint<T>(du_pair, dg);
    }
    __syncwarp();
    if constexpr (kKrsc) {
      if (live)
#pragma unroll
        for (int t = 0; t < 9; ++t) gw[(int64_t(pk) * 9 + t) * Cg + pc] = io_from<TOut>(dg[t]);
    } else if (Cg % kRun == 0) {
      // The warp's pairs are the consecutive (filter, channel) indices 4 r0 .. 4 r0 + 31: whole stores.
      if (live)
#pragma unroll
        for (int t = 0; t < 9; ++t) staged[lane * 9 + t] = dg[t];
      __syncwarp();
      const int n = int(min(int64_t(kRuns), total - r0)) * kRun * 9;
      TOut* out = gw + r0 * kRun * 9;
      for (int v = lane; v < n; v += 32) out[v] = io_from<TOut>(staged[v]);
    } else if (live) {
#pragma unroll
      for (int t = 0; t < 9; ++t) gw[(int64_t(pk) * Cg + pc) * 9 + t] = io_from<TOut>(dg[t]);
    }
    __syncwarp();
  }
}

// ---- host side ------------------------------------------------------------------------------

}  // namespace
}  // namespace cuda
}  // namespace torchconv
