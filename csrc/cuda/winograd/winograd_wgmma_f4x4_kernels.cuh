// Winograd F(4x4, 3x3) on Hopper's wgmma, staged V (the `f4x4` variant of the channels_last calls
// that run TF32 tensor cores: float32 under PyTorch's TF32 switch, bfloat16): 36 points per 4x4
// output tile where F(2x2) takes 16 per 2x2, so a block of the same MMA tile and the same bytes per
// MMA does 1.78x more of the direct convolution's work per byte it takes in (docs/winograd.md,
// "F(4x4) on the staged path for bfloat16").
//
// Kernels before the reduction's: each pixel's largest |input| over the group's channels (the F(2x2)
// staged-V tiles' winograd_tc_pixel_max_kernel), each tile's bound of its largest |V| from its 6 x 6
// window of them, and the input transform, which writes V in float16 words under the tiles' scales
// (F16Carrier: TF32's precision) in the blocks' chunk runs; where x reads as 16-byte words one kernel
// takes the bounds and the transform. U comes from the float16 filter transform of the F(2x2) tiles
// (winograd_filter_transform_f16_kernel) in the same layout, 36 points a chunk.
//
// The reduction: a cluster of three blocks per 64 filters x 64 tiles output block, each block 12 of
// the 36 points (point rows 2 * rank and 2 * rank + 1), 3 a warpgroup, streaming its points' U and V
// by bulk copies through four stages (BulkStages, reduce_bulk: the staged-V F(2x2) clusters' loop) and
// reducing by m64n64k16 MMAs. The epilogue stages each block's M in its shared memory and applies the
// output transform's first step along its two point rows there (6 points a row to 4), and each block
// then finishes a third of the output block's tiles, reading the other 16 of each tile's 24 values
// from its partners' shared memory.
#pragma once

#include "winograd_wgmma_kernels.cuh"

namespace torchconv {
namespace cuda {

// The cluster's block (module comment). Its operands are the F(2x2) staged-V tiles' float16 words
// (WinogradWgmmaClusterVStagedLayout): core matrices of 8 rows x 8 channels, 48 KB a chunk of
// 16 channels for 12 points. M (12 points x 64 tiles x 64 filters, float32, [point][tile][filter]
// rows of kLdMt, stage_wgmma_points) takes the stages' space once the reduction is done.
struct WinogradWgmmaF4x4ClusterTile {
  using Tile = WinogradF4x4;
  static constexpr bool kWgmma = true, kVStaged = true, kWalks = false;
  static constexpr int kOperandBytes = 2, kProducts = 1;
  static constexpr int kVShare = 1, kUShare = 1, kCluster = 3;
  static constexpr int kM = 64, kN = 64, kK = 16, kSteps = 1, kKGroups = kK * kOperandBytes / 16;
  static constexpr int kThreads = 512, kMinBlocks = 1;
  static constexpr int kPoints = Tile::kPoints / kCluster;
  static constexpr int kWarpgroups = kThreads / 128, kPointsPerGroup = kPoints / kWarpgroups, kPointStep = 1;
  static __host__ __device__ constexpr int first_point(int group) { return group * kPointsPerGroup; }
  static constexpr int kVQuad = kN * 4, kVPoint = kKGroups * kVQuad, kUPointFloats = kKGroups * kM * 4;
  static constexpr int kUChunkFloats = Tile::kPoints * kUPointFloats, kVChunkFloats = Tile::kPoints * kVPoint;
  static constexpr int kUFloats = kPoints * kUPointFloats, kVFloats = kPoints * kVPoint;
  static constexpr int kStage = kUFloats + kVFloats, kStages = 4;
  static __host__ __device__ constexpr int u_stage_offset(int s) { return s * kStage; }
  static __host__ __device__ constexpr int v_stage_offset(int s) { return s * kStage + kUFloats; }
  static constexpr int kLdMt = kM + 4, kLdV = kN + 8;
  static constexpr int kMFloats = kPoints * kN * kLdMt;
  // The stages or M, then the mbarriers: a stage's copies landed (kStages), its readers done (kStages).
  static constexpr int kBarrierOffset = kStages * kStage > kMFloats ? kStages * kStage : kMFloats;
  static constexpr size_t kForwardSmemBytes = size_t(kBarrierOffset) * sizeof(float) + 2 * kStages * sizeof(uint64_t);
  static_assert(kPoints * kCluster == Tile::kPoints && kPointsPerGroup * kWarpgroups == kPoints, "whole point rows");
  static_assert(kBarrierOffset % 2 == 0 && kForwardSmemBytes <= 227 * 1024, "within an sm_90 block's shared memory");

  static __host__ __device__ constexpr int u_half(int kk, int m) {
    return WinogradWgmmaClusterVStagedLayout::operand_half(kk, m, kM);
  }
  static __host__ __device__ constexpr int v_half(int kk, int n) {
    return WinogradWgmmaClusterVStagedLayout::operand_half(kk, n, kN);
  }
};

// The largest sum of |B^T|'s entries along a row: |V| = |B^T d B| is at most its square times the
// largest |d| of the window.
TORCHCONV_HOST_DEVICE constexpr double f4x4_input_row_sum() {
  double most = 0;
  for (int i = 0; i < WinogradF4x4::kAlpha; ++i) {
    double sum = 0;
    for (int j = 0; j < WinogradF4x4::kAlpha; ++j) {
      const double c = WinogradF4x4::BT::c(i, j);
      sum += c < 0 ? -c : c;
    }
    most = sum > most ? sum : most;
  }
  return most;
}
constexpr float kF4x4VBoundFactor = float(f4x4_input_row_sum() * f4x4_input_row_sum());

// Each tile's bound of its largest |V| ([group][tile], a.v_max): kF4x4VBoundFactor times the largest
// |input| of its 6 x 6 window (the image's padding excluded) over the group's channels, from the
// pixels' maxima ([group][image][row][column], winograd_tc_pixel_max_kernel). Its scale puts the
// bound in [2^14, 2^15), so that every V of the tile, rounded to TF32, is a float16 (F16Carrier).
template <typename TIo>
__global__ void __launch_bounds__(256) winograd_tc_f4x4_tile_bound_kernel(const ForwardArgs<float, TIo> a,
                                                                         const float* __restrict__ pixel_max) {
  grid_dependency_wait();  // the pixels' maxima from the kernel before
  allow_dependents();
  const WinogradConv& cv = a.cv;
  const int64_t tiles = cv.tiles(), total = int64_t(cv.groups) * tiles;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int g = int(i / tiles);
    const TileCoord tc = tile_coord(cv, i - g * tiles);
    const int y0 = WinogradF4x4::kOutput * tc.ty + cv.col_oy, x0 = WinogradF4x4::kOutput * tc.tx + cv.col_ox;
    float most = 0.f;
#pragma unroll
    for (int r = 0; r < WinogradF4x4::kAlpha; ++r) {
      const int y = y0 + r;
      if (y < 0 || y >= cv.src_H) continue;
      const float* line = pixel_max + ((int64_t(g) * cv.N + tc.n) * cv.src_H + y) * cv.src_W;
#pragma unroll
      for (int q = 0; q < WinogradF4x4::kAlpha; ++q) {
        const int x = x0 + q;
        if (x >= 0 && x < cv.src_W) most = fmaxf(most, line[x]);
      }
    }
    const_cast<float*>(a.v_max)[i] = kF4x4VBoundFactor * most;
  }
}

// V for WinogradWgmmaF4x4ClusterTile of tile blocks a.p_tile0 .. a.p_tile0 + a.p_tiles, in float16
// under each tile's scale: [group][tile block][chunk][point][Cfg::v_half(channel, tile)], zero outside
// the image, the tiles and the channels; x channels_last. Each value rounds once, to float16 under the
// scale (TF32's 10 bits, ties to even), not first to TF32 as the F(2x2) tiles' V: no product reads
// it at TF32, so the second rounding would only cost instructions. A thread per (channel, tile) of a
// chunk, a warp's lanes 8 channels x 4 tiles, so that each of its stores fills 64 contiguous bytes of
// a point's core matrix (8 tiles x 8 channels) and each load reads 16 contiguous bytes a tile.
template <typename Cfg, typename TIo>
__global__ void __launch_bounds__(256) winograd_tc_f4x4_input_transform_kernel(const ForwardArgs<float, TIo> a,
                                                                              uint16_t* __restrict__ v) {
  using Tile = typename Cfg::Tile;
  constexpr int kRun = Cfg::kK * Cfg::kN;
  static_assert(Cfg::kK == 16 && kRun == 32 * 32, "two channel octets x 64 tiles a run");
  grid_dependency_wait();  // the tiles' bounds from the kernel before
  allow_dependents();
  const WinogradConv& cv = a.cv;
  const int chunks = a.reduction_pad / Cfg::kK;
  const int64_t total = int64_t(cv.groups) * a.p_tiles * chunks * kRun;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int w = int(i % kRun);
    const int64_t rest = i / kRun;  // (group, tile block, chunk)
    const int chunk = int(rest % chunks), pt = int((rest / chunks) % a.p_tiles), g = int(rest / chunks / a.p_tiles);
    const int lane = w % 32, warp = w / 32;  // a run's 32 warps: 2 channel octets x 16 tile quads
    const int kk = lane % 8 + 8 * (warp % 2), n = lane / 8 + 4 * (warp / 2);
    const int64_t p = int64_t(a.p_tile0 + pt) * Cfg::kN + n;
    const int c = chunk * Cfg::kK + kk;
    const bool live = p < cv.tiles() && c < cv.Cg();
    float d[Tile::kPoints], vv[Tile::kPoints];
    float bound = 0.f;
#pragma unroll
    for (int e = 0; e < Tile::kPoints; ++e) d[e] = 0.f;
    if (live) {
      const TileCoord tc = tile_coord(cv, p);
      const int y0 = Tile::kOutput * tc.ty + cv.col_oy, x0 = Tile::kOutput * tc.tx + cv.col_ox;
      const int64_t ch = int64_t(g) * cv.Cg() + c;
      const TIo* src = a.x + int64_t(tc.n) * cv.in_plane * cv.src_C + ch;
#pragma unroll
      for (int r = 0; r < Tile::kAlpha; ++r) {
        const int y = y0 + r;
        if (y < 0 || y >= cv.src_H) continue;
#pragma unroll
        for (int q = 0; q < Tile::kAlpha; ++q) {
          const int x = x0 + q;
          if (x >= 0 && x < cv.src_W)
            d[r * Tile::kAlpha + q] = io_to<float>(src[(int64_t(y) * cv.src_W + x) * cv.src_C]);
        }
      }
      bound = a.v_max[int64_t(g) * cv.tiles() + p];
    }
    Tile::input_by_lines(d, vv);  // as the words kernel's two steps: the same bits
    const F16Carrier::Scale scale(F16Carrier::exponent(bound));
    uint16_t* dst = v + ((int64_t(g) * a.p_tiles + pt) * chunks + chunk) * (2 * int64_t(Cfg::kVChunkFloats)) +
                    Cfg::v_half(kk, n);
#pragma unroll
    for (int e = 0; e < Tile::kPoints; ++e)
      dst[e * 2 * Cfg::kVPoint] = F16Carrier::half_bits(vv[e], scale);
  }
}

// winograd_tc_f4x4_input_transform_kernel's V, the same values at the same places, for channels_last
// x whose group channels are whole 16-byte words (x_reads_as_words), in input_by_lines' two steps. A
// block of six warps takes 8 tiles x 4 channel octets at a time (an item), a slot a lane (tile lane %
// 8, octet lane / 8, as the F(2x2) words kernel's lanes): first warp j loads column j of each slot's
// 6 x 6 window, 16 bytes a word, and combines its rows (column j of t = B^T d) into the slot's shared
// memory, beside the largest of the column's pixel maxima; then warp i combines row i of t along the
// columns (V = t B) and stores its 6 points under the tile's scale (its bound as
// winograd_tc_f4x4_tile_bound_kernel's, which one lane per tile writes for the epilogue), each tile's
// 8 channels one 16-byte word, so that a warp's store fills four 128-byte rows of core matrices and
// its load reads 8 pixels' 64 neighbouring bytes. The scalar kernel loads and stores a value a lane
// (a line per tile for 64 bytes), eight times the requests for the same bytes. The kernel is bound
// by its instructions and its loads' latency together, so each value costs as few as it can: the
// factored lines, and a pair of channels scaled and converted to float16 in one conversion (which
// rounds to TF32's 10 bits itself). Four blocks an SM (80 registers) hide more of the latency than
// three did (docs/winograd.md); a prefetch of the next item's column cost more than it hid.
constexpr int kF4x4WordsWarps = WinogradF4x4::kAlpha, kF4x4WordsOctets = 4;  // octets an item: lane / 8
constexpr int kF4x4WordsBlocksPerSm = 4;
template <typename Cfg, typename TIo>
__global__ void __launch_bounds__(kF4x4WordsWarps * 32, kF4x4WordsBlocksPerSm)
    winograd_tc_f4x4_input_transform_words_kernel(const ForwardArgs<float, TIo> a, const float* __restrict__ pixel_max,
                                                  uint32_t* __restrict__ v) {
  using Tile = typename Cfg::Tile;
  constexpr int kA = Tile::kAlpha, kRuns = Cfg::kN / 8;  // runs of 8 tiles a tile block
  constexpr int kVec = 16 / int(sizeof(TIo)), kWords = 8 / kVec;  // channels a word, words an octet
  // A slot's t, [row][column][channel], its stride 4 floats past a multiple of 32: a quarter warp's
  // 16-byte accesses (8 lanes, 8 slots) fall on distinct banks.
  constexpr int kSlotFloats = kA * kA * 8 + 4;
  static_assert(kA == kF4x4WordsWarps && Cfg::kK == 16, "a warp per column, then per row; two octets a chunk");
  static_assert(Cfg::v_half(0, 1) == 8 && Cfg::v_half(0, 8) == 64 && Cfg::v_half(8, 0) % 8 == 0,
                "a tile's octet: 16 neighbouring bytes, 8 tiles' a 128-byte row");
  __shared__ __align__(16) float slots[32 * kSlotFloats];
  __shared__ float column_max[8][kA];  // a run's tiles' largest pixel maxima, by window column
  grid_dependency_wait();  // the pixels' maxima from the kernel before
  allow_dependents();
  const WinogradConv& cv = a.cv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int octets = a.reduction_pad / 8, quads = (octets + kF4x4WordsOctets - 1) / kF4x4WordsOctets;
  const int64_t tiles = cv.tiles(), items = int64_t(cv.groups) * a.p_tiles * kRuns * quads;
  const int64_t row_step = int64_t(cv.src_W) * cv.src_C;
  float* slot = slots + lane * kSlotFloats;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int quad = int(item % quads);
    const int64_t rest = item / quads;  // (group, tile block, run)
    const int run = int(rest % kRuns), pt = int((rest / kRuns) % a.p_tiles), g = int(rest / kRuns / a.p_tiles);
    const int n = run * 8 + lane % 8, q = quad * kF4x4WordsOctets + lane / 8;
    const int64_t p = int64_t(a.p_tile0 + pt) * Cfg::kN + n;
    const bool live = p < tiles;
    const TileCoord tc = tile_coord(cv, live ? p : 0);
    const int y0 = Tile::kOutput * tc.ty + cv.col_oy, x0 = Tile::kOutput * tc.tx + cv.col_ox;
    {  // Column `warp` of the window: t[i][warp] = sum_k B^T[i][k] d[k][warp], 8 channels.
      const int x = x0 + warp;
      const bool column = live && x >= 0 && x < cv.src_W;
      const TIo* src = a.x + ((int64_t(tc.n) * cv.src_H + y0) * cv.src_W + x) * cv.src_C + int64_t(g) * cv.Cg() + q * 8;
      const float* maxima = pixel_max + (int64_t(g) * cv.N + tc.n) * cv.in_plane + int64_t(y0) * cv.src_W + x;
      uint4 raw[kA][kWords];
      float most = 0.f;
#pragma unroll
      for (int r = 0; r < kA; ++r) {
        const bool row = column && y0 + r >= 0 && y0 + r < cv.src_H;
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
          const bool inside = row && q * 8 + w * kVec < cv.Cg();
          raw[r][w] = inside ? __ldg(reinterpret_cast<const uint4*>(src + r * row_step + w * kVec))
                             : make_uint4(0, 0, 0, 0);
        }
        if (row) most = fmaxf(most, maxima[r * cv.src_W]);
      }
      if (lane < 8) column_max[lane][warp] = most;
      float t[kA][8];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        float d[kA], out[kA];
#pragma unroll
        for (int r = 0; r < kA; ++r) d[r] = io_to<float>(reinterpret_cast<const TIo*>(&raw[r][c / kVec])[c % kVec]);
        Tile::input_line(d, out);
#pragma unroll
        for (int i = 0; i < kA; ++i) t[i][c] = out[i];
      }
#pragma unroll
      for (int i = 0; i < kA; ++i) {
        float4* dst = reinterpret_cast<float4*>(slot + (i * kA + warp) * 8);
        dst[0] = make_float4(t[i][0], t[i][1], t[i][2], t[i][3]);
        dst[1] = make_float4(t[i][4], t[i][5], t[i][6], t[i][7]);
      }
    }
    __syncthreads();
    {  // Row `warp` of t along the columns: V[warp][j] = sum_k t[warp][k] B^T[j][k], points warp * 6 + j.
      float t[kA][8];
#pragma unroll
      for (int k = 0; k < kA; ++k) {
        const float4* src = reinterpret_cast<const float4*>(slot + (warp * kA + k) * 8);
        const float4 lo = src[0], hi = src[1];
        t[k][0] = lo.x, t[k][1] = lo.y, t[k][2] = lo.z, t[k][3] = lo.w;
        t[k][4] = hi.x, t[k][5] = hi.y, t[k][6] = hi.z, t[k][7] = hi.w;
      }
      float most = 0.f;
#pragma unroll
      for (int j = 0; j < kA; ++j) most = fmaxf(most, column_max[lane % 8][j]);
      const float bound = kF4x4VBoundFactor * most;
      if (live && quad == 0 && warp == 0 && lane < 8) const_cast<float*>(a.v_max)[int64_t(g) * tiles + p] = bound;
      const F16Carrier::Scale scale(F16Carrier::exponent(bound));
      uint32_t* dst = v + ((int64_t(g) * a.p_tiles + pt) * (octets / 2) + q / 2) * Cfg::kVChunkFloats +
                      Cfg::v_half(8 * (q % 2), n) / 2 + warp * kA * Cfg::kVPoint;
      uint32_t word[kA][4];  // [point j][channel pair]
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        float out[2][kA];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float line[kA];
#pragma unroll
          for (int k = 0; k < kA; ++k) line[k] = t[k][2 * h + e];
          Tile::input_line(line, out[e]);
        }
#pragma unroll
        for (int j = 0; j < kA; ++j) word[j][h] = F16Carrier::half2_bits(out[0][j], out[1][j], scale);
      }
      if (q < octets) {  // (the last quad of a reduction of 2 mod 4 octets has two)
#pragma unroll
        for (int j = 0; j < kA; ++j)
          *reinterpret_cast<uint4*>(dst + j * Cfg::kVPoint) = make_uint4(word[j][0], word[j][1], word[j][2], word[j][3]);
      }
    }
    __syncthreads();  // the slots free for the next item
  }
}

// The first step of the epilogue's output transform on the block's two point rows of M ([point][tile]
// [filter], stage_wgmma_points), in place: t[r][j] = sum_c m[r][c] A[c][j] (output_line along the
// row) into the places of the row's points 0 .. 3. The exchange then moves 4 values a (row, tile,
// filter) instead of 6. A thread per (row, tile, 4 filters) at a time, 16-byte words: a quarter
// warp's 8 neighbouring words of a tile row fall on distinct banks.
template <typename Cfg>
__device__ __forceinline__ void f4x4_row_step(float* m) {
  using Tile = typename Cfg::Tile;
  constexpr int kA = Tile::kAlpha, kQuads = Cfg::kM / 4, kPointFloats = Cfg::kN * Cfg::kLdMt;
  constexpr int kRows = Cfg::kPoints / kA, kItems = kRows * Cfg::kN * kQuads;
  static_assert(kRows * kA == Cfg::kPoints && kItems % Cfg::kThreads == 0, "whole rows, even splits");
#pragma unroll
  for (int i = 0; i < kItems / Cfg::kThreads; ++i) {
    const int item = i * Cfg::kThreads + int(threadIdx.x);
    const int quad = item % kQuads, n = (item / kQuads) % Cfg::kN, r = item / (kQuads * Cfg::kN);
    float* at = m + r * kA * kPointFloats + n * Cfg::kLdMt + 4 * quad;
    float4 w[kA];
#pragma unroll
    for (int c = 0; c < kA; ++c) w[c] = *reinterpret_cast<const float4*>(at + c * kPointFloats);
    float t[4][Tile::kOutput];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float line[kA];
#pragma unroll
      for (int c = 0; c < kA; ++c) line[c] = reinterpret_cast<const float*>(&w[c])[e];
      Tile::output_line(line, t[e]);
    }
#pragma unroll
    for (int j = 0; j < Tile::kOutput; ++j)
      *reinterpret_cast<float4*>(at + j * kPointFloats) = make_float4(t[0][j], t[1][j], t[2][j], t[3][j]);
  }
}

// The rest of the epilogue for the tiles of block kRank's third of the output block (tiles kRank,
// kRank + 3, ...): a thread's filter (lanes along the filters: neighbouring outputs) and its tiles,
// each one's 6 x 4 t (f4x4_row_step) from the three blocks' rows, 8 values from this block's shared
// memory and 16 from its partners', then down t's columns (output_line) to the 4 x 4 outputs. kRank
// a constant: the rows' places in t and which of them are local are known when compiling.
template <typename Cfg, typename TIo, int kRank>
__device__ __forceinline__ void f4x4_cluster_outputs(const ForwardArgs<float, TIo>& a, const float* m,
                                                     const BlockCoord& bc) {
  using Tile = typename Cfg::Tile;
  constexpr int kA = Tile::kAlpha, kO = Tile::kOutput, kRows = Cfg::kPoints / kA;
  constexpr int kPointFloats = Cfg::kN * Cfg::kLdMt, kSlots = Cfg::kThreads / Cfg::kM;
  const WinogradConv& cv = a.cv;
  const int f = threadIdx.x % Cfg::kM, slot = threadIdx.x / Cfg::kM;
  const int Kg = cv.Kg(), k = bc.kt * Cfg::kM + f;
  if (k >= Kg) return;
  const float* rows[Cfg::kCluster];
#pragma unroll
  for (int b = 0; b < Cfg::kCluster; ++b) rows[b] = b == kRank ? m : cluster_map_shared(m, unsigned(b));
  const int64_t tiles = cv.tiles();
  const F16Carrier::Unscale by_u(F16Carrier::exponent(a.u_max[int64_t(bc.g) * a.outputs_pad + k]));
  const float bias = a.bias ? io_to<float>(a.bias[int64_t(bc.g) * Kg + k]) : 0.f;
  const int64_t plane = int64_t(cv.out_H) * cv.out_W, col = cv.out_C, row = col * cv.out_W;
  const int64_t channel = int64_t(bc.g) * Kg + k;
  for (int n = kRank + Cfg::kCluster * slot; n < Cfg::kN; n += Cfg::kCluster * kSlots) {
    const int64_t p = int64_t(a.p_tile0 + bc.pt) * Cfg::kN + n;
    if (p >= tiles) break;
    float t[kA][kO];
#pragma unroll
    for (int b = 0; b < Cfg::kCluster; ++b)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int j = 0; j < kO; ++j) t[b * kRows + r][j] = rows[b][(r * kA + j) * kPointFloats + n * Cfg::kLdMt + f];
    float y[kO][kO];
#pragma unroll
    for (int j = 0; j < kO; ++j) {
      float line[kA], out[kO];
#pragma unroll
      for (int r = 0; r < kA; ++r) line[r] = t[r][j];
      Tile::output_line(line, out);
#pragma unroll
      for (int i = 0; i < kO; ++i) y[i][j] = out[i];
    }
    const F16Carrier::Unscale by_v(F16Carrier::exponent(a.v_max[int64_t(bc.g) * tiles + p]));
    const TileCoord tc = tile_coord(cv, p);
    const int oy = kO * tc.ty, ox = kO * tc.tx;
    TIo* out = a.y + (int64_t(tc.n) * plane + int64_t(oy) * cv.out_W + ox) * cv.out_C + channel;
    const int rows_in = cv.out_H - oy, cols_in = cv.out_W - ox;
#pragma unroll
    for (int i = 0; i < kO; ++i)
#pragma unroll
      for (int j = 0; j < kO; ++j)
        if (i < rows_in && j < cols_in) out[i * row + j * col] = io_from<TIo>(by_v(by_u(y[i][j])) + bias);
  }
}

// f4x4_cluster_outputs of the block of rank `rank`.
template <typename Cfg, typename TIo, int kRank = 0>
__device__ __forceinline__ void f4x4_cluster_outputs_of(int rank, const ForwardArgs<float, TIo>& a, const float* m,
                                                        const BlockCoord& bc) {
  if constexpr (kRank + 1 < Cfg::kCluster) {
    if (rank != kRank) return f4x4_cluster_outputs_of<Cfg, TIo, kRank + 1>(rank, a, m, bc);
  }
  f4x4_cluster_outputs<Cfg, TIo, kRank>(a, m, bc);
}

// The cluster kernel (WinogradWgmmaF4x4ClusterTile), launched in clusters of three consecutive blocks,
// a cluster per (group, filter block, tile block), filter blocks fastest. y channels_last, of TIo as
// the bias.
template <typename Cfg, typename TIo>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_wgmma_f4x4_cluster_forward_kernel(const ForwardArgs<float, TIo> a) {
  static_assert(kMmaProducts<TIo> == 1, "one TF32-precise product per point product");
  extern __shared__ __align__(16) float smem[];
  grid_dependency_wait();  // V and its tiles' bounds from the kernels before
  const int rank = int(cluster_block_rank());
  const ClusterPlace<Cfg> place(rank);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&bars[s], 1);
      mbarrier_init(&bars[Cfg::kStages + s], Cfg::kWarpgroups);
    }
    mbarrier_init_fence_cluster();
  }
  // The mbarriers exist before any copy or arrival reaches them.
  cluster_arrive_relaxed();
  cluster_wait_acquire();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  using Mmas = WgmmaPointMmas<Cfg>;
  typename Mmas::Accumulators acc;
  const Mmas mmas(smem);
  const int chunks = a.reduction_pad / Cfg::kK;
  const BlockCoord bc = block_coord(a.k_tiles, a.p_tiles, int(blockIdx.x / Cfg::kCluster));
  const float* u_block = TcUFetcher<Cfg>::block_run(a, bc.g, bc.kt) + rank * Cfg::kUFloats;
  const float* v_block =
      a.v + (int64_t(bc.g) * a.p_tiles + bc.pt) * chunks * Cfg::kVChunkFloats + rank * Cfg::kVFloats;
  Mmas::zero(acc);
  reduce_bulk<Cfg>(mmas, acc, u_block, v_block, BulkStages<Cfg>(smem, bars, place), chunks);
  wgmma_wait<0>();

  // Epilogue. M of the block's 12 points into its shared memory (the stages are free once every
  // warpgroup's MMAs are done), the transform's step along its point rows, then every block's rows
  // are visible to the cluster.
  __syncthreads();
  stage_wgmma_points<Cfg, true>(acc, smem, warp, lane);
  __syncthreads();
  f4x4_row_step<Cfg>(smem);
  cluster_arrive_release();
  cluster_wait_acquire();
  f4x4_cluster_outputs_of<Cfg, TIo>(rank, a, smem, bc);
  // No block leaves while its partners may still read its rows (the release: their loads performed).
  cluster_arrive_release();
  cluster_wait_acquire();
}

}  // namespace cuda
}  // namespace torchconv
