// The GEMM's tensor-core kernels, device side: an implicit GEMM over channels_last (NHWC) tensors on
// mma.sync (float16 / bfloat16: m16n8k16; float32 as TF32: m16n8k8), FP32 accumulators.
//
// One kernel runs any launch map (common/launch_map.cuh) -- the forward convolution and every
// output phase of grad_input -- as the GEMM
//     out[position][dst] = sum over taps (i, j) and reduced channels c of
//                          src[position's pixel through tap (i, j)][c] * Wt[dst][(i, j)][c]
// with rows = output positions (N x col_H x col_W), columns = destination channels of a group, and
// the reduction walking tap by tap through chunks of channels: in NHWC a chunk of one position is
// contiguous channels, so every tile row is copied with 16-byte cp.async and no im2col exists.
// Two main loops share the loader and the epilogue:
//   tc_conv_kernel        mma.sync (sm_80+): warps own 2-D warp tiles, fragments come through
//                         ldmatrix from rows padded by 16 bytes; float16, bfloat16 and TF32.
//   tc_conv_wgmma_kernel  wgmma (sm_90a): each warpgroup owns 64 rows x the whole tile width and the
//                         MMAs read the tiles from shared memory (128-byte swizzle) themselves;
//                         float16, bfloat16 and TF32. A float32 source of a 1x1 launch may also
//                         be NCHW (TcNchwLoader: A from registers), which spares the call its
//                         transposed copy. Its B tiles
//                         come in bulk copies from a Wt stored in the stage's swizzled layout
//                         (TcWtBulkLoader), or by tensor copies from a 16-bit weight as it is
//                         (TcWeightSource); its A tiles come by im2col tensor copies
//                         (TcIm2colLoader) where a chunk holds one tap's channels, else the
//                         threads gather them with cp.async.
// TF32 operands are rounded to nearest once: Wt when it is re-laid, a copied source when our copy
// kernels write it, a gathered A in shared memory by the thread that copied it, an NCHW A, or one the
// tensor copies bring from a source read as it is, in the registers it goes to the MMAs from (wgmma
// would otherwise read the float32 words unrounded).
// Wt is the filter re-laid once per weight ([group][dst][tap][c], zero-padded; cached for frozen
// weights). A kStages-deep cp.async ring keeps kStages - 1 chunks in flight behind the MMAs. The
// epilogue adds the bias in FP32, rounds once to T, and stages the tile in shared memory so that the
// stores are coalesced in either output format (16-byte vectors along channels for NHWC, runs along
// positions for NCHW).
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

// A block tile of kBM positions x kBN destination channels, kWarpsM x kWarpsN warps, reduction
// chunks of kBKBytes per row, kStages shared stages. Rows in shared memory are padded by 16 bytes:
// the 8 rows an ldmatrix reads then start in 8 different 16-byte bank groups.
template <int kBM_, int kBN_, int kBKBytes_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_>
struct TcTileConfig : MmaWarpTiling<kBM_, kBN_, kWarpsM_, kWarpsN_, kMinBlocks_> {
  static constexpr int kBKBytes = kBKBytes_, kStages = kStages_;
  static constexpr int kRowBytes = kBKBytes + 16;
  static constexpr int kStageBytes = (kBM_ + kBN_) * kRowBytes;
  static_assert(kBKBytes % 32 == 0, "a chunk is whole mma k-steps (32 bytes)");

  template <typename T>
  static constexpr size_t smem_bytes();
};

// The launch as the tensor-core kernel runs it: the map plus NHWC source strides, the reduction's
// chunking and the destination's strides (either format).
struct TcConv : LaunchMap {
  int reduced;         // reduced channels per group (C/groups forward, K/groups grad_input)
  int outputs;         // destination channels per group
  int red_pad;         // reduced channels per tap in Wt: 1, 2 or 4 16-byte words (packed), else whole widest chunks
  bool packed;         // a chunk holds several taps, each red_pad channels (1 << tap_shift words)
  int tap_shift;
  int wt_row;          // elements of Wt per destination channel: taps x red_pad, padded to the widest chunk
  int chunks_per_tap;  // chunks of the launched config that hold channels (not packed)
  int chunks;          // chunks of the whole reduction
  // By chunks_per_tap and S: a chunk's tap and the tap's row, split by multiplies in the loops (an
  // integer division's dependent chain sits on the loads' issue path, in the thread that issues the
  // tensor copies too); by col_plane and col_W: a row's position (position(), in the loaders and the
  // epilogues, for each row a thread stores) where the rows fit 31 bits.
  FastDivisor chunks_per_tap_div, s_div, col_plane_div, col_w_div;
  int n_pad;           // destination channels per group in Wt, padded to the widest tile
  bool wt_tiled;       // Wt in 128-byte-swizzled tiles of 64 rows x one chunk (wgmma kernels, see TcWtBulkLoader)
  int col_plane;       // col_H x col_W
  int64_t rows;        // N x col_H x col_W
  int64_t src_image;   // src_H x src_W x src_C (elements)
  int64_t dst_sn, dst_sc, dst_sh, dst_sw;  // destination strides (elements): image, channel, row, column

  // Row m (< rows) of the GEMM: its image and its place in the column grid.
  struct Position {
    int n, cy, cx;
  };
  __device__ __forceinline__ Position position(int64_t m) const {
    int n, q;
    if (rows <= INT32_MAX) {
      n = int(col_plane_div.div(uint32_t(m))), q = int(m) - n * col_plane;
    } else {
      n = int(m / col_plane), q = int(m - int64_t(n) * col_plane);
    }
    const int cy = int(col_w_div.div(uint32_t(q)));
    return {n, cy, q - cy * col_W};
  }
  // The destination element of a position's channel 0 (group 0).
  __device__ __forceinline__ int64_t dst_offset(const Position& p) const {
    return p.n * dst_sn + int64_t(p.cy * out_sy + out_oy) * dst_sh + int64_t(p.cx * out_sx + out_ox) * dst_sw;
  }
};

// The source of a wgmma launch's B tiles. kWt: Wt's pre-swizzled tiles, in bulk. The weight as it is,
// where its group's reduced channels are whole 128-byte chunks -- kWeightRows: a forward's
// [filters][taps][channels] weight, whose rows are Wt's rows (K-major B; a 2-D map of the rows);
// kWeightColumns: a grad_input's, whose reduced channels are the filters and destination channels
// the weight's contiguous channels, so that a chunk (one tap, 64 filters) is read as 64 rows of the
// tile's channels (MN-major B, WgmmaMnMajorB; a 4-D map over channels, taps' columns and rows,
// filters).
enum class TcWeightSource : uint8_t { kWt, kWeightRows, kWeightColumns };

template <typename T>
struct TcConvArgs {
  const T* src;   // NHWC (or NCHW, see TcNchwLoader)
  const T* wt;    // [groups][n_pad][wt_row]: [taps][red_pad], zero-padded
  const T* bias;  // may be null
  T* out;
  TcConv cv;
  // The grid's tiles of positions and of destination channels (TcBlock splits a block index by them).
  FastDivisor m_tiles, n_tiles;
  // A split reduction (wgmma kernel): blockIdx.y reduces chunks_per_split chunks. Its FP32 sums go
  // either to partial[blockIdx.y][row][group x outputs], which tc_split_finish_kernel adds, or, where
  // `cluster_sums`, to the splits of the tile launched as one cluster, which add them themselves
  // through distributed shared memory (no workspace, no second launch).
  float* partial;  // null and !cluster_sums: one split, the kernel's epilogue writes `out`
  bool cluster_sums;
  int chunks_per_split;
  // Splits of only the last wave's tiles (tc_conv_wgmma_kernel, cluster_sums): the first
  // `whole_clusters` clusters' blocks each take a whole tile (block blockIdx.x * gridDim.y +
  // blockIdx.y), the later clusters one tile each, split across blockIdx.y. 0: every cluster splits.
  int whole_clusters;
  // The source as an im2col tensor map (wgmma kernel with TcIm2colLoader; unused otherwise).
  CUtensorMap a_map;
  // Where B comes from (TcWtBulkLoader): Wt, or `wt` is the 16-bit weight itself, copied by the
  // tensor map `b_map` over it -- no relayout, no cached copy (TcWeightSource).
  CUtensorMap b_map;
  TcWeightSource b_source;
  // An NCHW source read as whole planes in position order, planes of whole 16-byte words of positions
  // on a 16-byte boundary: a copy a word (TcNchwLoader: else copies of a position; TcNchwPlanesLoader:
  // else two copies of half a word).
  bool nchw_words;
  // The destination's channels adjacent (NHWC) with every quad of a row's channels aligned to 4
  // elements: the cluster end stores a quad at once.
  bool dst_quads;
  // A 16-bit NCHW destination whose planes the rows fill in order, planes of whole 16-byte words on a
  // 16-byte boundary: the epilogue stores 16-byte words of positions.
  bool dst_words;
  // A float32 source read as it is by the tensor copies (host only: picks the kernel whose A goes to
  // the MMAs from registers, rounded there; a source our copy kernels rounded is read by descriptor).
  bool a_raw;
};

// Phases of a strided grad_input that one launch takes (tc_conv_wgmma_phases_kernel): stride 2 x 2,
// so that the kernel parameter, an argument set per phase, stays under 4 KB.
constexpr int kMaxGradInputPhases = 4;

// The phase whose range [first[p], first[p + 1]) holds `index` (first[0] = 0; the phases' Wt words or
// blocks, laid end to end).
template <typename I, typename F>
__device__ __forceinline__ int phase_of(I index, const F (&first)[kMaxGradInputPhases + 1], int phases) {
  int p = 0;
#pragma unroll
  for (int i = 1; i < kMaxGradInputPhases; ++i)
    if (i < phases && int64_t(index) >= int64_t(first[i])) p = i;
  return p;
}

// Wt[g][dst][tap * red_pad + c] = the weight element behind launch tap `tap` (common/launch_map.cuh),
// zero where dst, c or tap is padding. Tiled (cv.wt_tiled): [g][n_pad / 64][wt_row / a row's elements][64
// rows][128 bytes], 16-byte word w of a row stored at word w ^ (row % 8) -- the wgmma stage layout, so
// that a chunk's B tile is n / 64 contiguous 8 KB copies.
// The relayout runs for every call with a trainable weight (forward and each grad_input phase), so
// it works by 16-byte words of Wt: a word is kVec consecutive reduced channels of one tap and one
// destination (red_pad and the rows are whole words), its place is decoded once (in 32-bit math
// where Wt is small), and its elements lie one reduced_stride apart in the weight, read through the
// weight's own strides (a channels_last weight needs no contiguous copy).
struct TcWeightMap {
  TcConv cv;
  WeightStrides ws;

  static constexpr int kRowWords = 8, kTileWords = 64 * kRowWords;  // 16-byte words of a row, a tile

  // Group, destination row and first column of Wt word `word` (kVec elements a word).
  template <int kVec, typename I>
  __device__ __forceinline__ void place(I word, int64_t& g, int& dst, int& col) const {
    constexpr int kRowElems = kRowWords * kVec;
    if (cv.wt_tiled) {
      const int within = int(word % I(kTileWords));
      const I tile = word / I(kTileWords);
      const int row = within / kRowWords, logical = swizzled_word(row, within % kRowWords);
      const I col_tiles = I(cv.wt_row / kRowElems), row_tiles = I(cv.n_pad / 64);
      const int col_tile = int(tile % col_tiles);
      const I rest = tile / col_tiles;
      dst = int(rest % row_tiles) * 64 + row, g = int64_t(rest / row_tiles);
      col = col_tile * kRowElems + logical * kVec;
    } else {
      const I row_words = I(cv.wt_row / kVec);
      const I row = word / row_words;
      col = int(word - row * row_words) * kVec;
      dst = int(row % I(cv.n_pad)), g = int64_t(row / I(cv.n_pad));
    }
  }

  // The inverse of place: the word holding column `col` (a multiple of kVec) of destination row `dst`
  // in group g.
  template <int kVec>
  __device__ __forceinline__ int64_t word_of(int64_t g, int dst, int col) const {
    constexpr int kRowElems = kRowWords * kVec;
    if (!cv.wt_tiled) return ((g * cv.n_pad + dst) * cv.wt_row + col) / kVec;
    const int row = dst % 64, logical = (col % kRowElems) / kVec;
    const int64_t tile = (g * (cv.n_pad / 64) + dst / 64) * (cv.wt_row / kRowElems) + col / kRowElems;
    return tile * kTileWords + row * kRowWords + swizzled_word(row, logical);
  }
};

// Word `word` of Wt (E: the element's bits, uint16_t for the 16-bit types; float with Tf32Rounding
// stores TF32-rounded values that the kernels read as they are).
template <typename E, typename I, typename Value>
__device__ __forceinline__ uint4 tc_weight_word(const E* __restrict__ w, I word, const TcWeightMap& map, Value value) {
  constexpr int kVec = 16 / int(sizeof(E));
  const TcConv& cv = map.cv;
  int64_t g;
  int dst, col;
  map.place<kVec>(word, g, dst, col);
  const int tap = col / cv.red_pad, c0 = col - tap * cv.red_pad;
  union {
    uint4 word;
    E e[kVec];
  } out;
  if (dst < cv.outputs && tap < cv.R * cv.S && c0 < cv.reduced) {
    const int64_t step = reduced_stride(cv, map.ws);
    const E* src = w + weight_offset(cv, map.ws, g, c0, dst, tap / cv.S, tap % cv.S);
    const int n = min(kVec, cv.reduced - c0);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.e[i] = i < n ? value(__ldg(src + i * step)) : E(0);
  } else {
    out.word = make_uint4(0, 0, 0, 0);
  }
  return out.word;
}

// One thread per 16-byte word of Wt.
template <typename E, typename I, typename Value>
__global__ void tc_weight_relayout_kernel(const E* __restrict__ w, uint4* __restrict__ wt, I words, TcWeightMap map,
                                          Value value) {
  for (I word = I(blockIdx.x) * blockDim.x + threadIdx.x; word < words; word += I(gridDim.x) * blockDim.x)
    wt[word] = tc_weight_word(w, word, map, value);
}

// The Wt of every phase of a strided grad_input in one launch (the phases' launches differ in their
// taps): phase p's Wt is words [first_word[p], first_word[p + 1]) of `wt`.
struct TcWeightPhaseMaps {
  TcWeightMap map[kMaxGradInputPhases];
  int64_t first_word[kMaxGradInputPhases + 1];
  int phases;
};
static_assert(sizeof(TcWeightPhaseMaps) <= 4096, "a kernel parameter of at most 4 KB");

template <typename E, typename I, typename Value>
__global__ void tc_weight_relayout_phases_kernel(const E* __restrict__ w, uint4* __restrict__ wt,
                                                 const __grid_constant__ TcWeightPhaseMaps maps, Value value) {
  const I words = I(maps.first_word[maps.phases]);
  for (I word = I(blockIdx.x) * blockDim.x + threadIdx.x; word < words; word += I(gridDim.x) * blockDim.x) {
    const int p = phase_of(word, maps.first_word, maps.phases);
    wt[word] = tc_weight_word(w, I(word - I(maps.first_word[p])), maps.map[p], value);
  }
}

// Wt of a contiguous float32 weight (K x C/groups x R x S, at most kTransposeTaps taps), stored
// TF32-rounded, through shared memory. The word-per-thread relayouts above gather a word's four
// reduced channels apart (R x S elements for a forward's channels, C/groups x R x S for a grad_input's
// filters): each warp load touches a sector per element, and every tap's blocks read the same sectors
// again. Here a block copies 32 filters x 32 channels x every tap -- each filter's run of 32 x R x S
// contiguous elements -- into shared memory by coalesced loads, then writes the slab's words (four
// reduced channels of one tap and one destination) by coalesced 16-byte stores. Block (destination
// block of 32, reduced block of 32, g); the words, their zeros and their values are those of
// tc_weight_word. A forward's destinations are the slab's rows (filters), a grad_input's its channels
// (cv.transposed: the reduced channels are the filters, the taps flipped by the launch's filter_r/s).
constexpr int kTransposeTaps = 9;
constexpr int kTransposeRows = 32;  // filters and channels a block

// Four blocks an SM (at most 64 registers a thread), so that a wave holds 528 blocks: a 1024 x 512
// weight's 512 in one wave.
__global__ void __launch_bounds__(256, 4)
    tc_weight_relayout_transpose_kernel(const float* __restrict__ w, uint4* __restrict__ wt,
                                        const __grid_constant__ TcWeightMap map, int weight_taps, int weight_s) {
  constexpr int kRows = kTransposeRows, kThreads = 256, kWarps = kThreads / 32;
  const TcConv& cv = map.cv;
  __shared__ float slab[kRows * (kRows * kTransposeTaps + 1)];
  const int pitch = kRows * weight_taps + 1;  // odd: a warp's words of 4 rows x 8 words hit 32 banks
  const int64_t g = blockIdx.z;
  const int dst0 = int(blockIdx.x) * kRows, red0 = int(blockIdx.y) * kRows;
  // The weight's filters and channels a group, and the block's first of each.
  const int filters = cv.transposed ? cv.reduced : cv.outputs, channels = cv.transposed ? cv.outputs : cv.reduced;
  const int filter0 = cv.transposed ? red0 : dst0, channel0 = cv.transposed ? dst0 : red0;
  const int64_t filter_stride = int64_t(channels) * weight_taps;
  // Slab row f: filter filter0 + f's 32 x weight_taps contiguous elements from channel channel0 on,
  // zeros for filters and channels past the weight's (so the words' padding is zeros as it is read). A warp
  // copies whole rows, lane + 32 u of a row (u < weight_taps: the same test for the whole warp), the
  // channels' bound a product: the copy divides nothing (a divide or two per element made it
  // issue-bound, not memory-bound). The loads of two rows are issued before any is waited on.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int real = min(kRows, channels - channel0) * weight_taps;  // a row's elements of real channels
  constexpr int kRowsInFlight = 2;
  for (int f0 = warp * kRowsInFlight; f0 < kRows; f0 += kWarps * kRowsInFlight) {
    float v[kRowsInFlight][kTransposeTaps];
#pragma unroll
    for (int h = 0; h < kRowsInFlight; ++h) {
      const bool filter_real = filter0 + f0 + h < filters;
      const float* src = w + (g * filters + filter0 + f0 + h) * filter_stride + int64_t(channel0) * weight_taps;
#pragma unroll
      for (int u = 0; u < kTransposeTaps; ++u) {
        const int x = lane + 32 * u;
        v[h][u] = u < weight_taps && filter_real && x < real ? __ldg(src + x) : 0.f;
      }
    }
#pragma unroll
    for (int h = 0; h < kRowsInFlight; ++h)
#pragma unroll
      for (int u = 0; u < kTransposeTaps; ++u)
        if (u < weight_taps) slab[(f0 + h) * pitch + lane + 32 * u] = v[h][u];
  }
  __syncthreads();
  // A word a thread and tap: 32 destinations x 8 words of the block's 32 reduced channels. Thread t of
  // a row takes the channels whose word lands in the row's word slot t % 8 (the tiled layout's swizzle
  // undone), so that a row's eight threads store its 128 contiguous bytes.
  const int row = threadIdx.x / 8, dst = dst0 + row;
  const int red = 4 * (cv.wt_tiled ? swizzled_word(dst % 64, int(threadIdx.x % 8)) : int(threadIdx.x % 8));
  // A tap's columns are red_pad, whole rows of Wt, so the word of one thread moves by a fixed step
  // from tap to tap in either layout.
  const int64_t word0 = map.word_of<4>(g, dst, red0 + red);
  const int64_t tap_step = map.word_of<4>(g, dst, cv.red_pad + red0 + red) - word0;
  // Element v of the word: slab[row][(red + v) taps + t] for a forward, slab[red + v][row taps + t]
  // for a grad_input (the odd pitch keeps a warp's four rows x eight words on distinct banks at 9 taps).
  const float* slab_word = slab + (cv.transposed ? red * pitch + row * weight_taps : row * pitch + red * weight_taps);
  const int v_step = cv.transposed ? pitch : weight_taps;
  int tap = 0;
  for (int i = 0; i < cv.R; ++i) {
    for (int j = 0; j < cv.S; ++j, ++tap) {
      const int t = cv.filter_r(i) * weight_s + cv.filter_s(j);
      union {
        uint4 word;
        float e[4];
      } out;
#pragma unroll
      for (int v = 0; v < 4; ++v) out.e[v] = round_to_tf32(slab_word[v * v_step + t]);
      wt[word0 + tap * tap_step] = out.word;
    }
  }
}

// The block's place in the grid: destination-channel tiles fastest, so that the blocks sharing an
// input tile run together and read it from L2. The index is split by multiplies: a block's setup is
// a fair part of a short reduction's instructions (the 32-channel layers' five chunks).
struct TcBlock {
  int g, n0;
  int64_t m0;
  __device__ TcBlock(int bid, const FastDivisor& m_tiles, const FastDivisor& n_tiles, int bm, int bn) {
    const int rest = int(n_tiles.div(uint32_t(bid)));
    n0 = (bid - rest * int(n_tiles.d)) * bn;
    g = int(m_tiles.div(uint32_t(rest)));
    m0 = int64_t(rest - g * int(m_tiles.d)) * bm;
  }
};

// The element of a Wt row where chunk `chunk` of `chunk_elems` reduced channels starts.
__device__ __forceinline__ int wt_column(const TcConv& cv, int chunk, int chunk_elems) {
  if (cv.packed) return chunk * chunk_elems;
  const int tap = int(cv.chunks_per_tap_div.div(uint32_t(chunk)));
  return tap * cv.red_pad + (chunk - tap * cv.chunks_per_tap) * chunk_elems;
}

// The B tile loader: each thread copies 16-byte word `word` of kRows rows of Wt per chunk.
template <typename T, int kBN, int kBKBytes, int kThreads>
struct TcWtLoader {
  static constexpr int kChunk = kBKBytes / int(sizeof(T));  // reduced channels per chunk
  static constexpr int kVec = 16 / int(sizeof(T));
  static constexpr int kWordsPerRow = kBKBytes / 16;
  static constexpr int kRowsPerPass = kThreads / kWordsPerRow;
  static constexpr int kRows = kBN / kRowsPerPass;

  const T* base;
  int64_t row_step;
  int word, row0;

  __device__ TcWtLoader(const TcConvArgs<T>& a, const TcBlock& blk) : TcWtLoader(a, blk, threadIdx.x) {}
  // A loader of thread `tid` of the kThreads that load (a warp-specialized kernel's producers pass
  // their index among them). `tid` keeps its type: threadIdx.x's unsigned division is cheaper than
  // a signed one.
  template <typename Tid>
  __device__ TcWtLoader(const TcConvArgs<T>& a, const TcBlock& blk, Tid tid) {
    word = tid % kWordsPerRow, row0 = tid / kWordsPerRow;
    base = a.wt + (int64_t(blk.g) * a.cv.n_pad + blk.n0 + row0) * a.cv.wt_row + word * kVec;
    row_step = int64_t(kRowsPerPass) * a.cv.wt_row;
  }

  template <typename Offset>
  __device__ __forceinline__ void fetch(const TcConv& cv, int chunk, unsigned char* stage_b, Offset offset) {
    // (Here, not on the class: the wgmma kernels' gather of A holds one and copies B in bulk.)
    static_assert(kThreads % kWordsPerRow == 0 && kBN % kRowsPerPass == 0, "each pass of the block copies whole tile rows");
    const T* p = base + wt_column(cv, chunk, kChunk);
#pragma unroll
    for (int i = 0; i < kRows; ++i) cp_async_16(stage_b + offset(row0 + i * kRowsPerPass, word), p + i * row_step);
  }
};

// The B tile of the wgmma kernels from a tiled Wt: kBN / 64 bulk copies of 8 KB per chunk, issued
// by one thread, counted on the stage's mbarrier. The copy engine takes the place of kBN x 8
// cp.async per chunk, which, with the A gather, held the loads' pace below the MMAs'. From the
// weight itself (TcWeightSource): one tensor copy of the tile's rows, or, kColumns (the kernel's B
// MN-major), kBN / 64 of 64 columns.
template <typename T, int kBN, bool kColumns = false>
struct TcWtBulkLoader {
  static constexpr int kTileElems = 128 / int(sizeof(T));
  static constexpr unsigned kBytes = kBN * 128;
  static_assert(kBN % 64 == 0, "whole 64-row (or 64-column) blocks of B");
  const T* base;  // (group, first 64-row tile of the block), column tile 0
  int col_tiles;
  // The weight's map: kColumns, or b_source kWeightRows (else null). The map's first row of the tile
  // (kWeightRows) or of the group's filters (kColumns), and the tile's first channel (kColumns).
  const CUtensorMap* map;
  int row0, col0;

  __device__ TcWtBulkLoader(const TcConvArgs<T>& a, const TcBlock& blk) {
    col_tiles = a.cv.wt_row / kTileElems;
    base = a.wt + (int64_t(blk.g) * (a.cv.n_pad / 64) + blk.n0 / 64) * col_tiles * (64 * kTileElems);
    map = kColumns || a.b_source == TcWeightSource::kWeightRows ? &a.b_map : nullptr;
    // (Rows: a group's tile past its filters copies the next group's rows: they feed only the tile's
    // columns past the group's outputs, which the epilogue never stores. Columns: the channels past
    // the group's are past the map's first dimension, so zero.)
    row0 = kColumns ? blk.g * a.cv.reduced : blk.g * a.cv.outputs + blk.n0;
    col0 = blk.n0;
  }

  // Chunk `chunk` into `stage_b`, its bytes counted on `bar` (an arrival expecting them, and
  // `other_bytes` more that other copies of the stage count on it).
  __device__ __forceinline__ void fetch(const TcConv& cv, int chunk, unsigned char* stage_b, uint64_t* bar,
                                        unsigned other_bytes = 0) const {
    if constexpr (kColumns) {
      mbarrier_arrive_expect_tx(bar, kBytes + other_bytes);
      // The chunk's launch tap (i, j) and first filter; 64 filters x 64 channels a copy.
      const int tap = int(cv.chunks_per_tap_div.div(uint32_t(chunk)));
      const int k0 = (chunk - tap * cv.chunks_per_tap) * kTileElems;
      const int i = int(cv.s_div.div(uint32_t(tap))), j = tap - i * cv.S;
#pragma unroll
      for (int q = 0; q < kBN / 64; ++q)
        tma_load_4d(stage_b + q * 8192, map, col0 + q * 64, cv.filter_s(j), cv.filter_r(i), row0 + k0, bar);
      return;
    }
    const int col = wt_column(cv, chunk, kTileElems), col_tile = col / kTileElems;
    mbarrier_arrive_expect_tx(bar, kBytes + other_bytes);
    if (map != nullptr) return tma_load_2d(stage_b, map, col, row0, bar);
#pragma unroll
    for (int i = 0; i < kBN / 64; ++i)
      bulk_copy_to_shared(stage_b + i * 8192, base + (int64_t(i) * col_tiles + col_tile) * (64 * kTileElems), 8192, bar);
  }
};

// The tile loader of an NHWC source: each thread copies 16-byte word `word` of kARows rows of A
// (gathered positions) and its rows of B per chunk. A row's position is decoded once; per chunk it
// is a tap offset, two bounds tests and a zero-filling cp.async. `offset(row, word)` places a word
// in the stage. A chunk is kChunk channels of one tap, or, packed (layers with at most 64 bytes of
// channels: an RGB stem padded to a word, 16 or 32 channels), the channels of several consecutive taps.
template <typename T, int kBM, int kBN, int kBKBytes, int kThreads>
struct TcLoader {
  static constexpr int kVec = 16 / int(sizeof(T));
  static constexpr int kChunk = kBKBytes / int(sizeof(T));  // reduced channels per chunk
  static constexpr int kWordsPerRow = kBKBytes / 16;
  static constexpr int kRowsPerPass = kThreads / kWordsPerRow;
  static constexpr int kARows = kBM / kRowsPerPass;
  static_assert(kThreads % kWordsPerRow == 0 && kBM % kRowsPerPass == 0, "each pass of the block copies whole tile rows");

  const TcConv& cv;
  const T* src;
  const T* a_pixel[kARows];  // the row's position's pixel in the source (its group's channel 0)
  int a_y[kARows], a_x[kARows];
  TcWtLoader<T, kBN, kBKBytes, kThreads> wt;
  int word, row0;

  __device__ TcLoader(const TcConvArgs<T>& a, const TcBlock& blk) : TcLoader(a, blk, threadIdx.x) {}
  // A loader of thread `tid` of the kThreads that load (as TcWtLoader's).
  template <typename Tid>
  __device__ TcLoader(const TcConvArgs<T>& a, const TcBlock& blk, Tid tid) : cv(a.cv), src(a.src), wt(a, blk, tid) {
    word = tid % kWordsPerRow, row0 = tid / kWordsPerRow;
    decode_rows(a, blk);
  }

  __device__ __forceinline__ void decode_rows(const TcConvArgs<T>& a, const TcBlock& blk) {
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const int64_t m = blk.m0 + row0 + i * kRowsPerPass;
      if (m < cv.rows) {
        const TcConv::Position p = cv.position(m);
        a_y[i] = p.cy * cv.col_sy + cv.col_oy, a_x[i] = p.cx * cv.col_sx + cv.col_ox;
        a_pixel[i] = a.src + int64_t(p.n) * cv.src_image + int64_t(blk.g) * cv.reduced +
                     (int64_t(a_y[i]) * cv.src_W + a_x[i]) * cv.src_C;
      } else {
        a_pixel[i] = a.src, a_y[i] = -(1 << 30), a_x[i] = 0;  // never inside the source
      }
    }
  }

  template <typename Offset>
  __device__ __forceinline__ void fetch(int chunk, unsigned char* stage_a, unsigned char* stage_b, Offset offset) {
    fetch_a(chunk, stage_a, offset);
    wt.fetch(cv, chunk, stage_b, offset);
  }

  // The A tile only (the wgmma kernels copy B in bulk).
  template <typename Offset>
  __device__ __forceinline__ void fetch_a(int chunk, unsigned char* stage_a, Offset offset) {
    int tap, c;  // this word's tap and its first channel
    bool channel_ok;
    if (cv.packed) {
      tap = ((chunk * kWordsPerRow) >> cv.tap_shift) + (word >> cv.tap_shift);
      c = (word & ((1 << cv.tap_shift) - 1)) * kVec;
      channel_ok = tap < cv.R * cv.S && c < cv.reduced;
    } else {
      tap = int(cv.chunks_per_tap_div.div(uint32_t(chunk)));
      c = (chunk - tap * cv.chunks_per_tap) * kChunk + word * kVec;
      channel_ok = c < cv.reduced;
    }
    const int ti = int(cv.s_div.div(uint32_t(tap))), tj = tap - ti * cv.S;
    const int dy = ti * cv.tap_sy, dx = tj * cv.tap_sx;
    // The word's offset from every row's pixel: the rows' addresses are one add each.
    const int64_t tap_offset = (int64_t(dy) * cv.src_W + dx) * cv.src_C + c;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const int iy = a_y[i] + dy, ix = a_x[i] + dx;
      const bool ok = channel_ok && unsigned(iy) < unsigned(cv.src_H) && unsigned(ix) < unsigned(cv.src_W);
      cp_async_16_or_zero(stage_a + offset(row0 + i * kRowsPerPass, word), ok ? a_pixel[i] + tap_offset : src, ok);
    }
  }

  // TF32: rounds the A words this thread copied (its cp.async group complete).
  template <typename Offset>
  __device__ __forceinline__ void round_to_tf32(unsigned char* stage_a, Offset offset) const {
    static_assert(sizeof(T) == 4, "float32 tiles");
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      float4* v = reinterpret_cast<float4*>(stage_a + offset(row0 + i * kRowsPerPass, word));
      float4 x = *v;
      x.x = cuda::round_to_tf32(x.x), x.y = cuda::round_to_tf32(x.y);
      x.z = cuda::round_to_tf32(x.z), x.w = cuda::round_to_tf32(x.w);
      *v = x;
    }
  }
};

// The A tile of the wgmma kernel as one im2col tensor copy per chunk (TMA, sm_90), issued by one
// thread: a.a_map describes the NHWC source with the bounding box of the launch's column grid, so the
// block's kBM positions, across rows and images, are one copy from its first position's pixel; a
// chunk's tap is the copy's offset and its channels the copy's first channel. No thread touches A:
// a float32 source must hold TF32 values already (the channels_last copies are rounded when made).
// Chunks hold one tap's channels (not packed); channels past the tensor's are zero.
template <typename T>
struct TcIm2colLoader {
  static constexpr int kChunk = 128 / int(sizeof(T));
  int w, h, n, c0;

  __device__ TcIm2colLoader(const TcConvArgs<T>& a, const TcBlock& blk) {
    const TcConv::Position p = a.cv.position(blk.m0);
    n = p.n, h = p.cy * a.cv.col_sy + a.cv.col_oy, w = p.cx * a.cv.col_sx + a.cv.col_ox;
    c0 = blk.g * a.cv.reduced;
  }

  __device__ __forceinline__ void fetch(const TcConvArgs<T>& a, int chunk, unsigned char* stage_a, uint64_t* bar) const {
    const TcConv& cv = a.cv;
    const int tap = int(cv.chunks_per_tap_div.div(uint32_t(chunk)));
    const int c = c0 + (chunk - tap * cv.chunks_per_tap) * kChunk;
    const int ti = int(cv.s_div.div(uint32_t(tap))), tj = tap - ti * cv.S;
    tma_load_im2col(stage_a, &a.a_map, c, w, h, n, uint16_t(tj * cv.tap_sx), uint16_t(ti * cv.tap_sy), bar);
  }

  // float32 (TF32) from a source read as it is (TcConvArgs::a_raw): the copies write its words as they
  // are, and wgmma reads TF32 tiles from shared memory unrounded, so A goes to the MMAs from registers
  // (tc_conv_wgmma_tile's kRawA), each thread loading its fragments from the tile and rounding them to
  // nearest TF32 there -- the source needs no rounded copy. The tile is K-major: row r (a position)
  // holds 32 channels in 128 bytes, 16-byte word w at word w ^ (r % 8) (the 128-byte swizzle). A
  // k-step's fragments of a row block come by one ldmatrix.x4 (common/mma.cuh: lane l gets 32-bit word
  // (l / 4, l % 4) of each 8 x 16-byte matrix, the TF32 fragment's element): lanes 8i..8i+7 give the
  // rows of matrix i -- the warp's row lane % 16, word 2 ks + lane / 16 -- so that the four registers
  // are rows g and g + 8 at channels t and t + 4 (g = lane / 4, t = lane % 4), WgmmaRegA's order. A
  // matrix's 8 rows lie in the swizzle's 8 phases, 8 distinct bank groups, as do those of every row
  // block (64 rows, 8 KB on).
  struct FragmentPlaces {
    int row;    // this lane's ldmatrix row, in bytes
    int phase;  // its swizzle phase
    int word;   // its word of a k-step's two
  };
  // `warp_row`: the warp's first tile row.
  __device__ __forceinline__ static FragmentPlaces fragment_places(int warp_row) {
    const int lane = threadIdx.x % 32, ld_row = warp_row + lane % 16;
    return {ld_row * 128, ld_row % 8, lane / 16};
  }
  // The A fragment of k-step `ks` (8 channels: words 2 ks and 2 ks + 1 of a row) of row block r,
  // rounded to nearest TF32 for the MMA (tf32_bits_for_mma: it drops the low bits itself), in the
  // layout WgmmaRegA takes.
  __device__ __forceinline__ static void fragment(const unsigned char* stage_a, const FragmentPlaces& places, int r,
                                                  int ks, uint32_t (&f)[4]) {
    const int word = (2 * ks + places.word) ^ places.phase;
    ldmatrix_x4(f, smem_address(stage_a + places.row + r * 64 * 128 + (word << 4)));
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = tf32_bits_for_mma(__uint_as_float(f[e]));
  }
};

// The A tile of a float32 NCHW source (the TF32 wgmma kernels; gemm_tc.cu's tc_source sends only
// one-tap launches -- 1x1 layers -- here): in NCHW a channel's positions are contiguous, so the tile
// keeps the source's order -- channel-major, [32 channels][kBM positions] -- and is copied in runs
// along the planes. wgmma reads TF32 tiles from shared memory K-major only, so A goes to the MMAs
// from registers instead: each thread loads its fragments from the tile (fragment()) and rounds them
// to TF32 there.
// A thread copies one position (or 4) of kChunk / cols channels per chunk: its source pixel is
// fixed, so a copy is the channel's plane offset and one cp.async. 16-byte copies of 4 positions
// where the launch reads whole planes in position order and a plane is a whole number of 16-byte
// words (a.nchw_words); otherwise 4-byte copies (strides, padding, odd planes). Lanes run along
// positions either way. A chunk is channels chunk * 32 onwards, also where the chunk is packed (a
// single tap's channels, zero past cv.reduced, meet Wt's tap-0 columns).
// Layout: channel c's positions at c * kBM, 16-byte word w at word w ^ ((c % 4) * 2), so that a
// fragment load (lanes over 4 channels x 8 positions) hits 32 distinct banks and a run of words of
// one channel stays conflict-free.
template <int kBM, int kThreads>
struct TcNchwLoader {
  static constexpr int kChunk = 32;                      // float32 channels per chunk
  static constexpr int kWordCols = kThreads / (kBM / 4);  // channels per pass, word copies
  static constexpr int kElemCols = kThreads / kBM;        // channels per pass, element copies
  static_assert(kThreads % kBM == 0 && kChunk % kWordCols == 0 && kChunk % kElemCols == 0 && kBM % 32 == 0,
                "each pass copies whole channel rows of the tile");

  const float* src;
  const float* base;  // this thread's first position's pixel, channel 0 of the group
  int plane;          // a channel's plane: below 2^31 elements (the GEMM's bound)
  int reduced;
  int col0, pos;      // this thread's first channel and its (first) position in the tile
  bool inside;        // the position exists and its pixel is inside the source (not padding)
  bool words;

  __device__ TcNchwLoader(const TcConvArgs<float>& a, const TcBlock& blk)
      : src(a.src), base(a.src), reduced(a.cv.reduced), inside(false), words(a.nchw_words) {
    const TcConv& cv = a.cv;
    plane = cv.src_H * cv.src_W;
    const int per_col = words ? kBM / 4 : kBM;  // threads along one channel's row
    col0 = threadIdx.x / per_col;
    pos = (threadIdx.x % per_col) * (words ? 4 : 1);
    const int64_t m = blk.m0 + pos;
    if (m < cv.rows) {
      const TcConv::Position p = cv.position(m);
      const int y = p.cy * cv.col_sy + cv.col_oy, x = p.cx * cv.col_sx + cv.col_ox;
      inside = unsigned(y) < unsigned(cv.src_H) && unsigned(x) < unsigned(cv.src_W);
      if (inside)
        base = a.src + int64_t(p.n) * cv.src_image + int64_t(blk.g) * cv.reduced * plane + int64_t(y) * cv.src_W + x;
    }
  }

  // Byte offset of (channel c, position p) in the tile.
  __device__ __forceinline__ static int offset(int c, int p) {
    return c * kBM * 4 + (((p >> 2) ^ ((c & 3) << 1)) << 4) + (p & 3) * 4;
  }

  // The copies' and fragments' addresses run in every thread beside the MMAs, so they are fixed
  // before the loop where they can be: a copy's source is one multiply-add from the chunk's pointer
  // (opaque_pointer: not re-associated into a 64-bit sum per copy) and its channel test one compare
  // with an immediate; its place in the tile, and a fragment element's, a register plus an immediate
  // (the swizzle's phase, (channel % 4), repeats every 4 / kCols copies of a thread, and is the
  // thread's own in every fragment).
  template <int kCols>
  __device__ __forceinline__ void copy_chunk(int chunk, unsigned char* stage_a) const {
    constexpr int kCopies = kChunk / kCols, kPhases = kCols % 4 == 0 ? 1 : 4 / kCols;
    const int c0 = chunk * kChunk + col0;
    const float* p = opaque_pointer(base + int64_t(c0) * plane);
    const int channels_left = inside ? reduced - c0 : 0;  // copy i holds a channel where i kCols < this
    int places[kPhases];
#pragma unroll
    for (int ph = 0; ph < kPhases; ++ph) places[ph] = offset(col0 + ph * kCols, pos);
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const bool ok = i * kCols < channels_left;
      unsigned char* dst = stage_a + places[i % kPhases] + (i - i % kPhases) * kCols * kBM * 4;
      const float* from = ok ? p + int64_t(plane) * (i * kCols) : src;
      if constexpr (kCols == kWordCols)
        cp_async_16_or_zero(dst, from, ok);
      else
        cp_async_or_zero(reinterpret_cast<float*>(dst), from, ok);
    }
  }
  __device__ __forceinline__ void fetch_a(int chunk, unsigned char* stage_a) const {
    static_assert(kWordCols != kElemCols, "the copy forms differ by their channels per pass");
    if (words)
      copy_chunk<kWordCols>(chunk, stage_a);
    else
      copy_chunk<kElemCols>(chunk, stage_a);
  }

  // The places of a thread's fragment elements of k-step 0 for tile rows `row` and `row + 8` (row
  // = the warp's first row `warp_row` + lane / 4): channel threadIdx.x % 4 (+ 4), so the swizzle's
  // phase is the thread's; a row block 64 rows on is 256 bytes on (the swizzle acts on the word's low
  // 3 bits).
  struct FragmentPlaces {
    int row[2];
  };
  __device__ __forceinline__ static FragmentPlaces fragment_places(int warp_row) {
    const int c = threadIdx.x % 4, row = warp_row + threadIdx.x % 32 / 4;
    return {{offset(c, row), offset(c, row + 8)}};
  }
  // The A fragment of k-step `ks` (8 channels) of row block r (64 rows) for the rows of `places`,
  // rounded to TF32: the layout WgmmaRegA takes.
  __device__ __forceinline__ static void fragment(const unsigned char* stage_a, const FragmentPlaces& places, int r,
                                                  int ks, uint32_t (&f)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int at = places.row[e % 2] + r * 64 * 4 + (ks * 8 + 4 * (e / 2)) * kBM * 4;
      f[e] = to_tf32(__float_as_uint(*reinterpret_cast<const float*>(stage_a + at)));
    }
  }
};

// The A tile of a 16-bit NCHW source read as whole planes (a one-tap launch whose positions are the
// source's pixels in order, reads_whole_planes, a plane a whole number of 8-byte half-words): kept in
// the source's order, MN-major, which wgmma reads for 16-bit types (WgmmaMnMajorA) -- so the source
// needs no channels_last copy. Each m64 block of positions is 64 rows of 128 bytes, row c one
// channel's 64 positions, 16-byte word w at word w ^ (c % 8) (the 128-byte swizzle of
// wgmma_descriptor_mn_major); blocks 8 KB apart, as a K-major tile's 64-row blocks. A thread copies one
// 16-byte word (8 positions) of kChunk / kCols channels a chunk, its source pixels fixed: one copy
// where planes are whole words on a 16-byte boundary (a.nchw_words; a word never crosses images),
// else two 8-byte copies of 4 positions, each half inside one image. Lanes run along positions.
// Channels past cv.reduced and positions past the last are zeros.
template <typename T, int kBM, int kThreads>
struct TcNchwPlanesLoader {
  static constexpr int kChunk = 64;                      // 16-bit channels per chunk (128 bytes of K)
  static constexpr int kWordsPerRow = kBM / 8;           // 16-byte words of positions across the tile
  static constexpr int kCols = kThreads / kWordsPerRow;  // channels per pass
  static_assert(sizeof(T) == 2 && kThreads % kWordsPerRow == 0 && kChunk % kCols == 0 && kCols % 8 == 0,
                "whole channel rows per pass, each thread's rows in one swizzle phase");

  const T* src;
  const T* base;     // this thread's first position's pixel, channel 0 of the group
  const T* base_hi;  // half-words: its fifth position's (another image's where the word crosses one)
  int plane, reduced, col0, place;
  bool inside, inside_hi, words;

  // tid: the thread's index among the kThreads that load (a warp-specialized kernel's producers).
  __device__ TcNchwPlanesLoader(const TcConvArgs<T>& a, const TcBlock& blk, int tid = int(threadIdx.x))
      : src(a.src), base(a.src), base_hi(a.src), reduced(a.cv.reduced), inside(false), inside_hi(false),
        words(a.nchw_words) {
    const TcConv& cv = a.cv;
    plane = cv.src_H * cv.src_W;
    col0 = tid / kWordsPerRow;
    const int word = tid % kWordsPerRow;
    // m64 block word / 8, row col0 (the swizzle's phase is col0 % 8 for every row this thread copies).
    place = (word / 8) * 64 * 128 + swizzle128(col0, word % 8);
    auto pixel = [&](int64_t m) {
      const TcConv::Position p = cv.position(m);
      return a.src + int64_t(p.n) * cv.src_image + int64_t(blk.g) * cv.reduced * plane + int64_t(p.cy) * cv.src_W +
             p.cx;
    };
    const int64_t m = blk.m0 + word * 8;
    if (m < cv.rows) inside = true, base = pixel(m);
    if (!words && m + 4 < cv.rows) inside_hi = true, base_hi = pixel(m + 4);
  }

  __device__ __forceinline__ void fetch_a(int chunk, unsigned char* stage_a) const {
    const int c0 = chunk * kChunk + col0;
    const T* p = opaque_pointer(base + int64_t(c0) * plane);
    const int channels_left = inside ? reduced - c0 : 0;  // copy i holds a channel where i kCols < this
    if (words) {
#pragma unroll
      for (int i = 0; i < kChunk / kCols; ++i) {
        const bool ok = i * kCols < channels_left;
        cp_async_16_or_zero(stage_a + place + i * kCols * 128, ok ? p + int64_t(plane) * (i * kCols) : src, ok);
      }
      return;
    }
    const T* q = opaque_pointer(base_hi + int64_t(c0) * plane);
    const int channels_left_hi = inside_hi ? reduced - c0 : 0;
#pragma unroll
    for (int i = 0; i < kChunk / kCols; ++i) {
      const bool ok = i * kCols < channels_left, ok_hi = i * kCols < channels_left_hi;
      unsigned char* dst = stage_a + place + i * kCols * 128;
      cp_async_or_zero(reinterpret_cast<uint2*>(dst),
                       reinterpret_cast<const uint2*>(ok ? p + int64_t(plane) * (i * kCols) : src), ok);
      cp_async_or_zero(reinterpret_cast<uint2*>(dst + 8),
                       reinterpret_cast<const uint2*>(ok_hi ? q + int64_t(plane) * (i * kCols) : src), ok_hi);
    }
  }
};

struct BlockBarrier {
  __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// The epilogue: bias added in FP32, one rounding to T, the tile staged in shared memory [kBM][kLd],
// then stores coalesced for the destination's format.
template <typename T, int kBM, int kBN, int kThreads>
struct TcEpilogue {
  static constexpr int kVec = 16 / int(sizeof(T));
  static constexpr int kLd = kBN + kVec;
  static constexpr size_t kSmemBytes = size_t(kBM) * kLd * sizeof(T) + size_t(kBM) * sizeof(int64_t);
  // Rows `row` and `row + 8`, columns `col` and `col + 1` of the tile (an MMA C fragment).
  __device__ __forceinline__ static void stage(T* tile, const TcConvArgs<T>& a, const TcBlock& blk, int row, int col,
                                               const float (&v)[4]) {
    float b0 = 0.f, b1 = 0.f;
    if (a.bias != nullptr) {
      const int ch = blk.g * a.cv.outputs + blk.n0 + col;
      if (blk.n0 + col < a.cv.outputs) b0 = to_float(a.bias[ch]);
      if (blk.n0 + col + 1 < a.cv.outputs) b1 = to_float(a.bias[ch + 1]);
    }
    // A column pair in one store (col and kLd are even): half the shared-memory stores of the
    // epilogue; with 16-bit types a warp's stores then hit 32 distinct banks (rows kLd / 2 words
    // apart, 4 mod 32).
    store_pair(tile + row * kLd + col, v[0] + b0, v[1] + b1);
    store_pair(tile + (row + 8) * kLd + col, v[2] + b0, v[3] + b1);
  }

  // After stage() from every thread: write the tile out. Starts with a barrier: `sync`, a barrier of
  // the kThreads threads that stage (the block's, or a warp-specialized kernel's consumers').
  template <typename Sync = BlockBarrier>
  __device__ static void store(const TcConvArgs<T>& a, unsigned char* smem, const TcBlock& blk, Sync sync = {}) {
    const TcConv& cv = a.cv;
    const T* tile = reinterpret_cast<const T*>(smem);
    int64_t* row_offset = reinterpret_cast<int64_t*>(smem + size_t(kBM) * kLd * sizeof(T));
    const int tid = threadIdx.x;
    for (int r = tid; r < kBM; r += kThreads) {
      const int64_t m = blk.m0 + r;
      int64_t off = -1;
      if (m < cv.rows) off = cv.dst_offset(cv.position(m)) + int64_t(blk.g) * cv.outputs * cv.dst_sc;
      row_offset[r] = off;
    }
    sync();
    const int cols = min(kBN, cv.outputs - blk.n0);
    if (cv.dst_sc == 1 && cv.outputs % kVec == 0) {
      // channels_last: 16-byte words along the channels of each position.
      constexpr int kWords = kBN / kVec;
      for (int e = tid; e < kBM * kWords; e += kThreads) {
        const int r = e / kWords, w = e - r * kWords;
        if (row_offset[r] < 0 || w * kVec >= cols) continue;
        *reinterpret_cast<int4*>(a.out + row_offset[r] + blk.n0 + w * kVec) =
            *reinterpret_cast<const int4*>(tile + r * kLd + w * kVec);
      }
    } else if (cv.dst_sc == 1) {
      for (int e = tid; e < kBM * kBN; e += kThreads) {
        const int r = e / kBN, c = e - r * kBN;
        if (row_offset[r] >= 0 && c < cols) a.out[row_offset[r] + blk.n0 + c] = tile[r * kLd + c];
      }
    } else if (sizeof(T) == 2 && a.dst_words) {
      // NCHW planes of whole words, filled in order: a lane stores kVec positions of one channel as one
      // word (a word's rows are all inside or all past the last: the rows are whole words too); a warp
      // takes 16 channels x 2 words, reading the staged tile along channels.
      constexpr int kRowWords = kBM / kVec, kChannelBlocks = kBN / 16;
      static_assert(kBN % 16 == 0 && kRowWords % 2 == 0, "a warp's 16 channels x 2 words");
      for (int e = tid; e < kRowWords * kBN; e += kThreads) {
        const int item = e / 32, lane = e % 32;
        const int c = (item % kChannelBlocks) * 16 + lane % 16;
        const int r0 = ((item / kChannelBlocks) * 2 + lane / 16) * kVec;
        if (row_offset[r0] < 0 || c >= cols) continue;
        union {
          int4 word;
          T elems[kVec];
        } v;
#pragma unroll
        for (int i = 0; i < kVec; ++i) v.elems[i] = tile[(r0 + i) * kLd + c];
        *reinterpret_cast<int4*>(a.out + row_offset[r0] + int64_t(blk.n0 + c) * cv.dst_sc) = v.word;
      }
    } else {
      // NCHW: lanes along positions, which are consecutive in a channel's plane.
      for (int e = tid; e < kBM * kBN; e += kThreads) {
        const int c = e / kBM, r = e - c * kBM;
        if (row_offset[r] >= 0 && c < cols) a.out[row_offset[r] + int64_t(blk.n0 + c) * cv.dst_sc] = tile[r * kLd + c];
      }
    }
  }
};

template <int kBM, int kBN, int kBKBytes, int kWarpsM, int kWarpsN, int kStages, int kMinBlocks>
template <typename T>
constexpr size_t TcTileConfig<kBM, kBN, kBKBytes, kWarpsM, kWarpsN, kStages, kMinBlocks>::smem_bytes() {
  const size_t mainloop = size_t(kStages) * kStageBytes;
  const size_t epilogue = TcEpilogue<T, kBM, kBN, 32 * kWarpsM * kWarpsN>::kSmemBytes;
  return mainloop > epilogue ? mainloop : epilogue;
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) tc_conv_kernel(const __grid_constant__ TcConvArgs<T> a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const TcConv& cv = a.cv;
  const TcBlock blk(blockIdx.x, a.m_tiles, a.n_tiles, Cfg::kBM, Cfg::kBN);
  TcLoader<T, Cfg::kBM, Cfg::kBN, Cfg::kBKBytes, Cfg::kThreads> loader(a, blk);
  auto padded = [](int row, int word) { return row * Cfg::kRowBytes + word * 16; };
  auto stage_a = [&](int s) { return smem + s * Cfg::kStageBytes; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kStageBytes + Cfg::kBM * Cfg::kRowBytes; };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp % Cfg::kWarpsM, wn = warp / Cfg::kWarpsM;
  // ldmatrix row addresses (see common/mma.cuh): A rows lane % 16, byte column (lane / 16) * 16;
  // B rows lane % 8 + (lane / 16) * 8, byte column ((lane / 8) % 2) * 16.
  const int a_off = (wm * Cfg::kWarpM + lane % 16) * Cfg::kRowBytes + (lane / 16) * 16;
  const int b_off = (wn * Cfg::kWarpN + lane % 8 + (lane / 16) * 8) * Cfg::kRowBytes + ((lane / 8) % 2) * 16;

  float acc[Cfg::kMTiles][Cfg::kNTiles][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < cv.chunks) loader.fetch(s, stage_a(s), stage_b(s), padded);
    cp_async_commit();
  }
  for (int chunk = 0; chunk < cv.chunks; ++chunk) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    const int next = chunk + Cfg::kStages - 1;
    if (next < cv.chunks) loader.fetch(next, stage_a(next % Cfg::kStages), stage_b(next % Cfg::kStages), padded);
    cp_async_commit();
    const int s = chunk % Cfg::kStages;
    const unsigned sa = smem_address(stage_a(s) + a_off), sb = smem_address(stage_b(s) + b_off);
#pragma unroll
    for (int ks = 0; ks < Cfg::kBKBytes / 32; ++ks) {
      uint32_t af[Cfg::kMTiles][4], bf[Cfg::kNTiles][2];
#pragma unroll
      for (int i = 0; i < Cfg::kMTiles; ++i) ldmatrix_x4(af[i], sa + i * 16 * Cfg::kRowBytes + ks * 32);
#pragma unroll
      for (int j = 0; j < Cfg::kNTiles; j += 2) {
        uint32_t r[4];
        ldmatrix_x4(r, sb + j * 8 * Cfg::kRowBytes + ks * 32);
        bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
      if constexpr (WarpMma<T>::kTf32) {  // A rounded here; Wt is stored rounded
#pragma unroll
        for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) af[i][e] = to_tf32(af[i][e]);
      }
#pragma unroll
      for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kNTiles; ++j) WarpMma<T>::run(acc[i][j], af[i], bf[j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  using Epilogue = TcEpilogue<T, Cfg::kBM, Cfg::kBN, Cfg::kThreads>;
  T* tile = reinterpret_cast<T*>(smem);
#pragma unroll
  for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNTiles; ++j)
      Epilogue::stage(tile, a, blk, wm * Cfg::kWarpM + i * 16 + lane / 4, wn * Cfg::kWarpN + j * 8 + (lane % 4) * 2,
                      acc[i][j]);
  Epilogue::store(a, smem, blk);
}

// The wgmma tile: kBM positions, kBN destination channels, chunks of 128-byte rows, kStages stages;
// kBM / 64 / kMPerGroup warpgroups, each issuing kMPerGroup m64 x kBN MMAs per k-step (two: a tile of
// 256 positions on two warpgroups, which loads half the bytes of B per MMA of 128 x kBN tiles).
template <int kBM_, int kBN_, int kStages_, int kMinBlocks_, int kMPerGroup_ = 1>
struct WgmmaTileConfig {
  static constexpr int kBM = kBM_, kBN = kBN_, kStages = kStages_, kMPerGroup = kMPerGroup_;
  static constexpr int kWarpGroups = kBM / 64 / kMPerGroup, kThreads = 128 * kWarpGroups, kMinBlocks = kMinBlocks_;
  static constexpr int kBKBytes = 128;
  static constexpr int kStageBytes = (kBM + kBN) * 128;
  // Whether its launches may split the reduction across a cluster (tc_cluster_split_sums stages a
  // tile's float32 sums in the stages): tiles of at most wide's size; larger ones run whole.
  static constexpr bool kSplits = kBM * kBN <= 128 * 256;
  static_assert(kBM % (64 * kMPerGroup) == 0 && (kBN == 64 || kBN == 128 || kBN == 256),
                "whole m64 MMAs per warpgroup; n64, n128 or n256 MMAs");
  static_assert(kStages >= 3, "two chunks besides the one the MMAs read: one in flight, one loading");
  template <typename T>
  static constexpr size_t smem_bytes() {
    const size_t mainloop = size_t(kStages) * kStageBytes;
    const size_t epilogue = TcEpilogue<T, kBM, kBN, kThreads>::kSmemBytes;
    return (mainloop > epilogue ? mainloop : epilogue) + 1024;  // + alignment of the swizzled tiles
  }
};

// The end of a split reduction whose splits are one cluster (blockIdx.y = the block's rank): each
// block stages its FP32 sums in its own shared memory (the pipeline's stages, free once every MMA has
// completed), and block r then finishes its share of the tile's rows -- a contiguous run, so that an
// NCHW destination's rows are written in runs too -- adding the splits' sums in split order as
// tc_split_finish_kernel does (the same bits), with the bias once, rounded once to T.
template <typename T, typename Cfg, int kM>
__device__ __forceinline__ void tc_cluster_split_sums(const TcConvArgs<T>& a, const TcBlock& blk, unsigned char* smem,
                                                      const float (&acc)[kM][Cfg::kBN / 2]) {
  constexpr int kLd = Cfg::kBN + 8;  // floats a staged row: a half-warp's 8-byte stores cover the 32 banks once
  static_assert(size_t(Cfg::kBM) * kLd * sizeof(float) <= size_t(Cfg::kStages) * Cfg::kStageBytes,
                "the staged sums fit in the pipeline's stages");
  const TcConv& cv = a.cv;
  const int group = int(threadIdx.x) / 128;
  float* sums = reinterpret_cast<float*>(smem);
  __syncthreads();  // every warpgroup's MMAs, which read the stages, have completed
#pragma unroll
  for (int r = 0; r < kM; ++r) store_wgmma_accumulators<Cfg::kBN>(sums + (group * kM + r) * 64 * kLd, kLd, acc[r]);
  cluster_arrive_release();
  cluster_wait_acquire();
  const int splits = int(gridDim.y), rank = int(blockIdx.y);
  const int per = (Cfg::kBM + splits - 1) / splits, row0 = rank * per;
  const int rows = int(min(int64_t(min(per, Cfg::kBM - row0)), cv.rows - blk.m0 - row0));
  constexpr int kQuads = Cfg::kBN / 4;
  // The sums of row `row` (of this block's share), channels quad * 4 onwards, in split order, with
  // the bias; read along channels, as each split staged them, split s's at split_sums(s, offset).
  auto add_splits = [&](auto&& split_sums, int row, int quad, float (&sum)[4]) {
    float4 v[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < splits) v[s] = split_sums(s, (row0 + row) * kLd + quad * 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) sum[e] = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < splits) sum[0] += v[s].x, sum[1] += v[s].y, sum[2] += v[s].z, sum[3] += v[s].w;
    if (a.bias != nullptr)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (blk.n0 + quad * 4 + e < cv.outputs) sum[e] += to_float(a.bias[blk.g * cv.outputs + blk.n0 + quad * 4 + e]);
  };
  if (cv.dst_sc == 1) {  // NHWC: a row's channels adjacent, a warp's stores along them
    const float* part[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) part[s] = cluster_map_shared(sums, unsigned(s < splits ? s : rank));
    auto split_sums = [&](int s, int offset) { return *reinterpret_cast<const float4*>(part[s] + offset); };
    for (int item = threadIdx.x; item < rows * kQuads; item += Cfg::kThreads) {
      const int row = item / kQuads, quad = item % kQuads, n = blk.n0 + quad * 4;
      if (n >= cv.outputs) continue;
      float sum[4];
      add_splits(split_sums, row, quad, sum);
      T* o = a.out + cv.dst_offset(cv.position(blk.m0 + row0 + row)) + blk.g * cv.outputs + n;
      if (a.dst_quads) {  // n + 3 < outputs: outputs is a multiple of 4
        store_quad(o, sum);
        continue;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (n + e < cv.outputs) o[e] = from_float<T>(sum[e]);
    }
  } else {
    // NCHW: a channel's positions adjacent. Reading the splits' sums along positions would take a
    // 16-byte piece of another row of distributed shared memory per lane; instead each pass of
    // kPassRows rows reads them along channels, stages the rounded values channel by channel in this
    // block's stage bytes past its own sums (which the other blocks still read), and stores each
    // channel's run of positions.
    constexpr int kPassRows = 32, kPassLd = kPassRows + 1;  // T elements a staged channel
    static_assert(size_t(Cfg::kBM) * kLd * sizeof(float) + size_t(Cfg::kBN) * kPassLd * sizeof(T) <=
                      size_t(Cfg::kStages) * Cfg::kStageBytes && Cfg::kThreads % kPassRows == 0,
                  "a pass's channels fit past the staged sums; whole warps along a pass's positions");
    T* pass = reinterpret_cast<T*>(smem + size_t(Cfg::kBM) * kLd * sizeof(float));
    const int cols = min(Cfg::kBN, cv.outputs - blk.n0);
    // (Each load maps its own address: pointers to the splits' sums held across the passes would
    // spill in the tiles of three blocks an SM.)
    auto split_sums = [&](int s, int offset) {
      return *reinterpret_cast<const float4*>(cluster_map_shared(sums + offset, unsigned(s)));
    };
    for (int first = 0; first < rows; first += kPassRows) {
      const int pass_rows = min(kPassRows, rows - first);
      for (int item = threadIdx.x; item < pass_rows * kQuads; item += Cfg::kThreads) {
        const int row = item / kQuads, quad = item % kQuads;
        if (blk.n0 + quad * 4 >= cv.outputs) continue;
        float sum[4];
        add_splits(split_sums, first + row, quad, sum);
#pragma unroll
        for (int e = 0; e < 4; ++e) pass[(quad * 4 + e) * kPassLd + row] = from_float<T>(sum[e]);
      }
      __syncthreads();
      const int r = int(threadIdx.x) % kPassRows;
      if (r < pass_rows) {
        T* o = a.out + cv.dst_offset(cv.position(blk.m0 + row0 + first + r)) +
               int64_t(blk.g * cv.outputs + blk.n0) * cv.dst_sc;
        for (int c = int(threadIdx.x) / kPassRows; c < cols; c += Cfg::kThreads / kPassRows)
          o[int64_t(c) * cv.dst_sc] = pass[c * kPassLd + r];
      }
      __syncthreads();  // the next pass overwrites the staged channels
    }
  }
  // No block leaves while another may still read its shared memory.
  cluster_arrive_release();
  cluster_wait_acquire();
}

// One block's tile of launch `a`: tile `block` of its grid, `split` its share of a split reduction,
// or all of it where `whole`. kNchwSource: A from an NCHW source -- float32 (TcNchwLoader), to the
// MMAs from registers, or 16-bit whole planes (TcNchwPlanesLoader), MN-major from shared memory;
// kTmaA: A by im2col tensor copies (TcIm2colLoader); neither: A gathered from NHWC (TcLoader).
// kMnMajorB: B copied from the weight's columns (TcWeightSource::kWeightColumns), MN-major.
// kRawA: the tensor copies' float32 tiles are the source's words as they are (TcConvArgs::a_raw), so
// A goes to the MMAs from registers, rounded to TF32 there.
template <typename T, typename Cfg, bool kNchwSource, bool kTmaA, bool kMnMajorB = false, bool kRawA = false>
__device__ __forceinline__ void tc_conv_wgmma_tile(const TcConvArgs<T>& a, int block, int split, bool whole) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ uint64_t b_landed[Cfg::kStages];  // a stage's bulk (B) and tensor (A, kTmaA) copies arrived
  // The swizzle is a function of address bits 4-9: tiles start on 1024-byte boundaries.
  unsigned char* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  const unsigned smem_base = smem_address(smem);
  const TcConv& cv = a.cv;
  const TcBlock blk(block, a.m_tiles, a.n_tiles, Cfg::kBM, Cfg::kBN);
  static_assert(!kRawA || (kTmaA && std::is_same_v<T, float>), "raw A: float32 tiles of the tensor copies");
  // TF32 A from registers, rounded there: from an NCHW tile (TcNchwLoader) or a raw copied one (TcIm2colLoader).
  constexpr bool kRegA = (kNchwSource && std::is_same_v<T, float>) || kRawA;
  constexpr bool kMnMajorA = kNchwSource && sizeof(T) == 2;
  static_assert(!kMnMajorB || (sizeof(T) == 2 && !kNchwSource), "MN-major B: 16-bit, A K-major");
  using NchwLoader = std::conditional_t<kRegA, TcNchwLoader<Cfg::kBM, Cfg::kThreads>,
                                        TcNchwPlanesLoader<T, Cfg::kBM, Cfg::kThreads>>;
  using Loader = std::conditional_t<
      kTmaA, TcIm2colLoader<T>,
      std::conditional_t<kNchwSource, NchwLoader, TcLoader<T, Cfg::kBM, Cfg::kBN, Cfg::kBKBytes, Cfg::kThreads>>>;
  Loader loader(a, blk);
  const TcWtBulkLoader<T, Cfg::kBN, kMnMajorB> wt(a, blk);
  // This block's chunks: all of them, or its split's.
  const int first = whole ? 0 : split * a.chunks_per_split;
  const int count = whole ? cv.chunks : min(cv.chunks - first, a.chunks_per_split);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) mbarrier_init(&b_landed[s], 1);
  }
  __syncthreads();
  auto swizzled = [](int row, int word) { return swizzle128(row, word); };
  auto stage_a = [&](int s) { return smem + s * Cfg::kStageBytes; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kStageBytes + Cfg::kBM * 128; };
  // A chunk: A gathered by every thread and B in bulk by thread 0, or both copied by thread 0.
  auto fetch = [&](int local, int s) {
    if constexpr (kTmaA) {
      if (threadIdx.x == 0) {
        wt.fetch(cv, first + local, stage_b(s), &b_landed[s], Cfg::kBM * 128);
        loader.fetch(a, first + local, stage_a(s), &b_landed[s]);
      }
    } else {
      if constexpr (kNchwSource)
        loader.fetch_a(first + local, stage_a(s));
      else
        loader.fetch_a(first + local, stage_a(s), swizzled);
      if (threadIdx.x == 0) wt.fetch(cv, first + local, stage_b(s), &b_landed[s]);
    }
  };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;

  constexpr int kM = Cfg::kMPerGroup;
  // A thread's accumulators: kM row blocks of kBN / 2 floats (the C fragments of a 64 x kBN wgmma).
  constexpr int kAccRegisters = kM * (Cfg::kBN / 2);
  float acc[kM][Cfg::kBN / 2];
  static_assert(sizeof(acc) == 4 * kAccRegisters);
#pragma unroll
  for (int r = 0; r < kM; ++r)
#pragma unroll
    for (int i = 0; i < Cfg::kBN / 2; ++i) acc[r][i] = 0.f;
  // The warp's first row of the tile in accumulator row block r, and the row of its element pair h
  // (the C-fragment layout).
  auto warp_row = [&](int r) { return (group * kM + r) * 64 + (warp % 4) * 16; };
  auto tile_row = [&](int r, int h) { return warp_row(r) + lane / 4 + 8 * h; };

  // `ahead` chunks load ahead of the MMAs. A reduction of at most kStages chunks loads all of them at
  // once, each into a stage of its own that is never refilled: a block of few chunks (an RGB stem, a
  // 1x1 layer of few channels) then waits for memory once instead of once a chunk. Longer ones load
  // kStages - 2 ahead, and one chunk's MMAs stay in flight while the next chunk is waited for and its
  // successor's loads are issued: the stage refilled at chunk c held chunk c - 2, whose MMAs every
  // warpgroup has waited for before the barrier. Chunk c's copies are commit group
  // kStages - ahead + c (the prologue commits kStages groups, the empty ones first), so that chunk i
  // has landed once at most ahead - 1 groups are pending.
  const int ahead = count <= Cfg::kStages ? count : Cfg::kStages - 2;
  // kRegA: A goes to the MMAs from registers. Per k-step (a_frag[0][ks]): each k-step its own commit
  // group; the wait before a k-step's fragments are reloaded leaves the three later groups in flight,
  // so that the set it overwrites (the previous chunk's at that k-step) is no longer read, and by the
  // barrier of chunk c every group of chunk c - 2 has completed. Per chunk (kChunkFrags: the raw tiles
  // where a thread's registers hold two chunks' fragments beside its accumulators with at least
  // kSpareRegisters left for addresses and the loop's state; a tile that leaves fewer, 192 x 256 on
  // three warpgroups, would spill and keeps the per-k-step loop): a chunk's fragments are
  // loaded at once, so that their loads' latency is paid once a chunk rather than once a k-step, into
  // the set of chunk c - 2 (a_frag[c % 2]), one commit group a chunk as in the descriptor loop. The
  // loop then takes two chunks a trip, one per set, so that the set is known when compiling: a set
  // picked at run time lets the compiler fold the two into one, whose loads overwrite the registers
  // the previous chunk's MMAs are still reading.
  constexpr int kRegistersAThread = 65536 / (Cfg::kThreads * Cfg::kMinBlocks);
  constexpr int kThreadRegisters = kRegistersAThread < 255 ? kRegistersAThread : 255;
  constexpr int kSpareRegisters = 32;
  // A chunk's A fragments: its four k-steps' kM row blocks of four TF32 words each.
  constexpr int kChunkFragRegisters = 4 * kM * 4;
  constexpr bool kChunkFrags =
      kRawA && kThreadRegisters - kAccRegisters - 2 * kChunkFragRegisters >= kSpareRegisters;
  constexpr int kSets = kChunkFrags ? 2 : 1;
  uint32_t a_frag[kSets][kRegA ? 4 : 1][kM][4];
  static_assert(!kChunkFrags || sizeof(a_frag) == 4 * 2 * kChunkFragRegisters);
  if constexpr (kChunkFrags) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int r = 0; r < kM; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) a_frag[1][ks][r][e] = 0u;  // held before its first load
  }
  [[maybe_unused]] const auto frag_places = [&] {
    if constexpr (kRegA) return Loader::fragment_places(warp_row(0));
    else return 0;
  }();
#pragma unroll 1
  for (int g = ahead; g < Cfg::kStages; ++g) cp_async_commit();
#pragma unroll 1
  for (int c = 0; c < ahead; ++c) {
    fetch(c, c);
    cp_async_commit();
  }
  // Chunk i, its A fragments (kChunkFrags) in set `set`.
  auto chunk_step = [&](int i, auto set) {
    cp_async_wait_at_most<Cfg::kStages - 1>(ahead - 1);
    // TF32: the source is float32 (Wt was rounded when re-laid; a copied A source when copied).
    if constexpr (std::is_same_v<T, float> && !kTmaA && !kNchwSource)
      loader.round_to_tf32(stage_a(i % Cfg::kStages), swizzled);
    fence_proxy_async_shared();
    __syncthreads();
    const int next = i + ahead;
    if (next < count) fetch(next, next % Cfg::kStages);
    cp_async_commit();
    const int s = i % Cfg::kStages;
    mbarrier_wait(&b_landed[s], (i / Cfg::kStages) & 1);
    // The stage's descriptors once a chunk; a k-step's (and an A row block's) are these with the start
    // address moved on (16-byte units), one add each instead of a descriptor built per MMA.
    const unsigned sb = smem_base + s * Cfg::kStageBytes + Cfg::kBM * 128;
    const uint64_t db = kMnMajorB ? wgmma_descriptor_mn_major(sb, 64 * 128) : wgmma_descriptor(sb);
    // B's k-step: 32 bytes of its rows on, or (MN-major) 16 rows of filters (2 KB) on.
    constexpr unsigned kStepB = kMnMajorB ? 2048 / 16 : 2;
    if constexpr (kChunkFrags) {
      constexpr int kSet = decltype(set)::value;
      auto& frag = a_frag[kSet];
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < kM; ++r) loader.fragment(stage_a(s), frag_places, r, ks, frag[ks][r]);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < kM; ++r)
          WgmmaRegA<float, Cfg::kBN>::run(acc[r], frag[ks][r], wgmma_descriptor_advance(db, ks * 2), 1);
      wgmma_commit();
      // Chunk i - 1's MMAs are done, and with them the reads of the other set, which chunk i + 1 loads.
      wgmma_wait<1>();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < kM; ++r) hold_wgmma_operands(a_frag[1 - kSet][ks][r]);
    } else if constexpr (kRegA) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        wgmma_wait<3>();
#pragma unroll
        for (int r = 0; r < kM; ++r) loader.fragment(stage_a(s), frag_places, r, ks, a_frag[0][ks][r]);
        wgmma_fence();
#pragma unroll
        for (int r = 0; r < kM; ++r)
          WgmmaRegA<float, Cfg::kBN>::run(acc[r], a_frag[0][ks][r], wgmma_descriptor_advance(db, ks * 2), 1);
        wgmma_commit();
      }
    } else {
      const unsigned sa = smem_base + s * Cfg::kStageBytes + group * kM * 64 * 128;
      const uint64_t da = kMnMajorA ? wgmma_descriptor_mn_major(sa, 64 * 128) : wgmma_descriptor(sa);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < kM; ++r) {
          if constexpr (kMnMajorA)  // A's k-step: 16 rows of channels (2 KB) on
            WgmmaMnMajorA<T, Cfg::kBN>::run(acc[r], wgmma_descriptor_advance(da, (r * 64 * 128 + ks * 2048) / 16),
                                            wgmma_descriptor_advance(db, ks * 2), 1);
          else if constexpr (kMnMajorB)
            WgmmaMnMajorB<T, Cfg::kBN>::run(acc[r], wgmma_descriptor_advance(da, (r * 64 * 128 + ks * 32) / 16),
                                            wgmma_descriptor_advance(db, ks * kStepB), 1);
          else
            Wgmma<T, Cfg::kBN>::run(acc[r], wgmma_descriptor_advance(da, (r * 64 * 128 + ks * 32) / 16),
                                    wgmma_descriptor_advance(db, ks * 2), 1);
        }
      wgmma_commit();
      wgmma_wait<1>();
    }
  };
  if constexpr (kChunkFrags) {
    int i = 0;
    for (; i + 1 < count; i += 2) {
      chunk_step(i, std::integral_constant<int, 0>{});
      chunk_step(i + 1, std::integral_constant<int, 1>{});
    }
    if (i < count) chunk_step(i, std::integral_constant<int, 0>{});
  } else {
    for (int i = 0; i < count; ++i) chunk_step(i, std::integral_constant<int, 0>{});
  }
  wgmma_wait<0>();
  cp_async_wait<0>();

  if constexpr (Cfg::kSplits)
    if (a.cluster_sums && !whole) return tc_cluster_split_sums<T, Cfg>(a, blk, smem, acc);
  if (a.partial != nullptr) {
    // A split: the FP32 sums straight from the accumulators (a lane quad writes 32 contiguous bytes).
    const int64_t ld = int64_t(cv.groups) * cv.outputs;
    float* part = a.partial + int64_t(split) * cv.rows * ld + int64_t(blk.g) * cv.outputs + blk.n0;
#pragma unroll
    for (int r = 0; r < kM; ++r)
#pragma unroll
      for (int j = 0; j < Cfg::kBN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t m = blk.m0 + tile_row(r, h);
          const int col = j * 8 + (lane % 4) * 2;
          if (m >= cv.rows) continue;
          if (blk.n0 + col < cv.outputs) part[m * ld + col] = acc[r][4 * j + 2 * h];
          if (blk.n0 + col + 1 < cv.outputs) part[m * ld + col + 1] = acc[r][4 * j + 2 * h + 1];
        }
    return;
  }
  __syncthreads();

  using Epilogue = TcEpilogue<T, Cfg::kBM, Cfg::kBN, Cfg::kThreads>;
  T* tile = reinterpret_cast<T*>(smem);
#pragma unroll
  for (int r = 0; r < kM; ++r)
#pragma unroll
    for (int j = 0; j < Cfg::kBN / 8; ++j) {
      const float v[4] = {acc[r][4 * j], acc[r][4 * j + 1], acc[r][4 * j + 2], acc[r][4 * j + 3]};
      Epilogue::stage(tile, a, blk, tile_row(r, 0), j * 8 + (lane % 4) * 2, v);
    }
  Epilogue::store(a, smem, blk);
}

template <typename T, typename Cfg, bool kNchwSource = false, bool kTmaA = false, bool kMnMajorB = false,
          bool kRawA = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) tc_conv_wgmma_kernel(const __grid_constant__ TcConvArgs<T> a) {
  const int cluster = int(blockIdx.x), rank = int(blockIdx.y);
  const bool whole = cluster < a.whole_clusters;
  const int block = whole ? cluster * int(gridDim.y) + rank : a.whole_clusters * int(gridDim.y) + cluster - a.whole_clusters;
  tc_conv_wgmma_tile<T, Cfg, kNchwSource, kTmaA, kMnMajorB, kRawA>(a, block, rank, whole);
}

// The warp-specialized, persistent wgmma tile (`wgmma-ws`; the rule's for short 16-bit reductions,
// gemm_tc.cu): kBM / 64 consumer warpgroups issue the MMAs and the epilogue, and one producer
// warpgroup loads -- every producer thread gathers A (TcLoader, 16-bit) or copies it from 16-bit NCHW
// planes as they are (kPlanesA: TcNchwPlanesLoader, A MN-major), or one of them issues A's im2col
// tensor copy (kTmaA) -- with B in bulk either way. Each block walks tiles blockIdx.x, +
// gridDim.x, ..., its chunks one ring of kStages stages across tile boundaries: a stage is `full` once
// its copies have landed (the gather's threads arrive as their cp.async land, the bulk and tensor
// copies count bytes) and `empty` once every consumer thread's MMAs that read it have completed. No
// block-wide barrier after the start: the producer runs up to kStages chunks ahead of the MMAs, into
// the next tile while the consumers finish this one's epilogue (in shared memory of its own, past the
// stages). Float32 A must come by the tensor copies (already TF32): no thread rounds a gathered tile
// here.
template <int kBM_, int kBN_, int kStages_, int kMinBlocks_>
struct WgmmaWsTileConfig {
  static constexpr int kBM = kBM_, kBN = kBN_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kConsumerGroups = kBM / 64, kConsumerThreads = 128 * kConsumerGroups;
  static constexpr int kProducerThreads = 128, kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kBKBytes = 128;
  static constexpr int kStageBytes = (kBM + kBN) * 128;
  static_assert(kBM % 64 == 0 && (kBN == 64 || kBN == 128 || kBN == 256), "whole m64 MMAs per warpgroup");
  static_assert(kStages >= 2, "a stage loading while another is read");
  template <typename T>
  static constexpr size_t smem_bytes() {
    return size_t(kStages) * kStageBytes + TcEpilogue<T, kBM, kBN, kConsumerThreads>::kSmemBytes + 1024;
  }
};

template <int kThreads>
struct ConsumerBarrier {
  __device__ __forceinline__ void operator()() const { named_barrier_sync(1, kThreads); }
};

template <typename T, typename Cfg, bool kTmaA, bool kMnMajorB = false, bool kPlanesA = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) tc_conv_wgmma_ws_kernel(const __grid_constant__ TcConvArgs<T> a) {
  static_assert(kTmaA || sizeof(T) == 2, "a gathered float32 A would need rounding to TF32");
  static_assert(!kMnMajorB || sizeof(T) == 2, "MN-major B: 16-bit");
  static_assert(!kPlanesA || (!kTmaA && !kMnMajorB), "planes: A copied by the producers, B K-major");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ uint64_t full[Cfg::kStages], empty[Cfg::kStages];
  unsigned char* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  const unsigned smem_base = smem_address(smem);
  const TcConv& cv = a.cv;
  constexpr int kStages = Cfg::kStages, kConsumers = Cfg::kConsumerThreads;
  const int tiles = int(a.m_tiles.d) * int(a.n_tiles.d) * cv.groups;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], kTmaA ? 1 : Cfg::kProducerThreads + 1);
      mbarrier_init(&empty[s], kConsumers);
    }
  }
  __syncthreads();
  auto stage_a = [&](int s) { return smem + s * Cfg::kStageBytes; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kStageBytes + Cfg::kBM * 128; };

  if (int(threadIdx.x) >= kConsumers) {  // the producer warpgroup
    const int tid = int(threadIdx.x) - kConsumers;
    if (kTmaA && tid != 0) return;
    int it = 0;  // this block's chunk count so far: stage it % kStages, its (it / kStages)-th use
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const TcBlock blk(tile, a.m_tiles, a.n_tiles, Cfg::kBM, Cfg::kBN);
      const TcWtBulkLoader<T, Cfg::kBN, kMnMajorB> wt(a, blk);
      if constexpr (kTmaA) {
        const TcIm2colLoader<T> loader(a, blk);
        for (int c = 0; c < cv.chunks; ++c, ++it) {
          const int s = it % kStages;
          if (it >= kStages) mbarrier_wait(&empty[s], ((it / kStages) + 1) & 1);
          wt.fetch(cv, c, stage_b(s), &full[s], Cfg::kBM * 128);
          loader.fetch(a, c, stage_a(s), &full[s]);
        }
      } else if constexpr (kPlanesA) {
        const TcNchwPlanesLoader<T, Cfg::kBM, Cfg::kProducerThreads> loader(a, blk, tid);
        for (int c = 0; c < cv.chunks; ++c, ++it) {
          const int s = it % kStages;
          if (it >= kStages) mbarrier_wait(&empty[s], ((it / kStages) + 1) & 1);
          loader.fetch_a(c, stage_a(s));
          cp_async_mbarrier_arrive_noinc(&full[s]);
          if (tid == 0) wt.fetch(cv, c, stage_b(s), &full[s]);
        }
      } else {
        TcLoader<T, Cfg::kBM, Cfg::kBN, Cfg::kBKBytes, Cfg::kProducerThreads> loader(a, blk, tid);
        for (int c = 0; c < cv.chunks; ++c, ++it) {
          const int s = it % kStages;
          if (it >= kStages) mbarrier_wait(&empty[s], ((it / kStages) + 1) & 1);
          loader.fetch_a(c, stage_a(s), [](int row, int word) { return swizzle128(row, word); });
          cp_async_mbarrier_arrive_noinc(&full[s]);
          if (tid == 0) wt.fetch(cv, c, stage_b(s), &full[s]);
        }
      }
    }
    if constexpr (!kTmaA) cp_async_wait<0>();
    return;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;
  using Epilogue = TcEpilogue<T, Cfg::kBM, Cfg::kBN, kConsumers>;
  unsigned char* epilogue_smem = smem + size_t(kStages) * Cfg::kStageBytes;
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const TcBlock blk(tile, a.m_tiles, a.n_tiles, Cfg::kBM, Cfg::kBN);
    float acc[Cfg::kBN / 2];
#pragma unroll
    for (int i = 0; i < Cfg::kBN / 2; ++i) acc[i] = 0.f;
    for (int c = 0; c < cv.chunks; ++c, ++it) {
      const int s = it % kStages;
      mbarrier_wait(&full[s], (it / kStages) & 1);
      if constexpr (!kTmaA) fence_proxy_async_shared();  // the gather's cp.async wrote through the generic proxy
      const unsigned sb = smem_base + s * Cfg::kStageBytes + Cfg::kBM * 128;
      const uint64_t db = kMnMajorB ? wgmma_descriptor_mn_major(sb, 64 * 128) : wgmma_descriptor(sb);
      const unsigned sa = smem_base + s * Cfg::kStageBytes + group * 64 * 128;
      const uint64_t da = kPlanesA ? wgmma_descriptor_mn_major(sa, 64 * 128) : wgmma_descriptor(sa);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        if constexpr (kPlanesA)  // A's k-step: 16 rows of channels (2 KB) on
          WgmmaMnMajorA<T, Cfg::kBN>::run(acc, wgmma_descriptor_advance(da, ks * 2048 / 16),
                                          wgmma_descriptor_advance(db, ks * 2), 1);
        else if constexpr (kMnMajorB)  // B's k-step: 16 rows of filters (2 KB) on
          WgmmaMnMajorB<T, Cfg::kBN>::run(acc, wgmma_descriptor_advance(da, ks * 2),
                                          wgmma_descriptor_advance(db, ks * 2048 / 16), 1);
        else
          Wgmma<T, Cfg::kBN>::run(acc, wgmma_descriptor_advance(da, ks * 2), wgmma_descriptor_advance(db, ks * 2), 1);
      }
      wgmma_commit();
      // The previous chunk's MMAs have completed: its stage may be refilled.
      wgmma_wait<1>();
      if (c > 0) mbarrier_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
    mbarrier_arrive(&empty[(it - 1) % kStages]);
    // The previous tile's stores have read the staged tile before this one is staged over it.
    named_barrier_sync(1, kConsumers);
    T* staged = reinterpret_cast<T*>(epilogue_smem);
#pragma unroll
    for (int j = 0; j < Cfg::kBN / 8; ++j) {
      const float v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
      Epilogue::stage(staged, a, blk, group * 64 + (warp % 4) * 16 + lane / 4, j * 8 + (lane % 4) * 2, v);
    }
    Epilogue::store(a, epilogue_smem, blk, ConsumerBarrier<kConsumers>{});
  }
}

// The phases of a strided grad_input (each output phase a launch of its own taps, common/launch_map.cuh)
// as one grid: phase p's blocks are blockIdx.x in [first_block[p], first_block[p + 1]), every phase
// split blockIdx.y ways (gridDim.y, each phase its own chunks_per_split). One launch instead of one per
// phase: the phases' reductions differ (a 3x3 layer of stride 2 has 1, 2, 2 and 4 taps per phase),
// and, alone, each phase's grid is a fraction of a wave.
template <typename T>
struct TcPhaseArgs {
  TcConvArgs<T> phase[kMaxGradInputPhases];
  int first_block[kMaxGradInputPhases + 1];
  int phases;
};
static_assert(sizeof(TcPhaseArgs<float>) <= 4096, "a kernel parameter of at most 4 KB");

// kMnMajorB: every phase reads the weight's columns at its own taps (TcWeightSource::kWeightColumns);
// kRawA: a float32 source read as it is (tc_conv_wgmma_tile).
template <typename T, typename Cfg, bool kTmaA, bool kMnMajorB = false, bool kRawA = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) tc_conv_wgmma_phases_kernel(
    const __grid_constant__ TcPhaseArgs<T> pa) {
  const int p = phase_of(blockIdx.x, pa.first_block, pa.phases);
  tc_conv_wgmma_tile<T, Cfg, false, kTmaA, kMnMajorB, kRawA>(pa.phase[p], int(blockIdx.x) - pa.first_block[p],
                                                              int(blockIdx.y), false);
}

// The end of a split reduction: out = bias + the splits' FP32 sums added in split order
// (deterministic), rounded once to T, at the destination's place in either format. Launched as a
// programmatic dependent of the GEMM kernel: nothing is read or written before grid_dependency_wait.
template <typename T>
__global__ void tc_split_finish_kernel(const float* __restrict__ partial, int splits, const T* __restrict__ bias,
                                       T* __restrict__ out, const TcConv cv) {
  grid_dependency_wait();  // the splits' sums, from the kernel before
  const int64_t ld = int64_t(cv.groups) * cv.outputs, total = cv.rows * ld;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = e / ld;
    const int col = int(e - m * ld);
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += partial[s * total + e];
    if (bias != nullptr) sum += to_float(bias[col]);
    out[cv.dst_offset(cv.position(m)) + col * cv.dst_sc] = from_float<T>(sum);
  }
}

// The copies below write the channels_last source of the tensor-core kernels. E is the element's
// storage (2 or 4 bytes), so that a zero is all-zero bits. kTf32: the elements are float32 and are
// written rounded to TF32 (to nearest), so that a kernel may feed the copy to the MMAs as it is.
template <bool kTf32, typename E>
__device__ __forceinline__ E copied(E v) {
  if constexpr (kTf32) {
    static_assert(sizeof(E) == 4, "TF32 rounds float32 elements");
    return E(to_tf32(uint32_t(v)));
  } else {
    return v;
  }
}

// dst (N, H, W, channels) = src (N, C, H, W; any strides) with channels C..channels-1 zero: the
// padded source of an ungrouped layer whose channels are not whole 16-byte words (an RGB stem), or
// the copy of a source in neither format. A thread writes one 16-byte word of a pixel.
template <typename E, bool kTf32>
__global__ void tc_pad_channels_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t pixels, int C,
                                       int channels, int H, int W, int64_t sn, int64_t sc, int64_t sh, int64_t sw) {
  constexpr int kVec = 16 / int(sizeof(E));
  const int words = channels / kVec;
  const int64_t total = pixels * words;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e / words;
    const int word = int(e - p * words);
    const int64_t q = p / W;
    const int x = int(p - q * W), y = int(q % H);
    const E* s = src + (q / H) * sn + int64_t(y) * sh + int64_t(x) * sw;
    union {
      uint4 u;
      E v[kVec];
    } out;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = word * kVec + i;
      out.v[i] = c < C ? copied<kTf32>(s[int64_t(c) * sc]) : E(0);
    }
    *reinterpret_cast<uint4*>(dst + p * channels + word * kVec) = out.u;
  }
}

// dst = src rounded to TF32, both dense channels_last float32 of the same shape on 16-byte boundaries
// (`words` 16-byte words): the rounded copy of a source the kernels could read as it is.
__global__ void tc_round_tf32_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t words) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < words; e += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(src + e);
    dst[e] = make_uint4(to_tf32(v.x), to_tf32(v.y), to_tf32(v.z), to_tf32(v.w));
  }
}

// dst (N, H, W, channels; dense) = src (N, C, H, W; contiguous) with channels C..channels-1 zero: the
// channels_last copy of an NCHW source. A block moves tiles of 64 pixels x 32 channels through shared
// memory, so that its reads (a channel's consecutive pixels) and its writes (a pixel's consecutive
// channels) are both runs of 32 elements; each thread has 8 loads in flight.
constexpr int kTransposePixels = 64;  // pixels per tile
template <typename E, bool kTf32>
__global__ void __launch_bounds__(256) tc_nchw_to_nhwc_kernel(const E* __restrict__ src, E* __restrict__ dst,
                                                               int64_t tiles, int64_t plane, int C, int channels) {
  constexpr int kPixels = kTransposePixels;
  __shared__ E tile[32][kPixels + 1];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int channel_tiles = (channels + 31) / 32;
  const int64_t pixel_tiles = (plane + kPixels - 1) / kPixels;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t rest = t / channel_tiles;
    const int c0 = int(t - rest * channel_tiles) * 32;
    const int64_t n = rest / pixel_tiles, p0 = (rest - n * pixel_tiles) * kPixels;
    const E* s = src + n * C * plane;
    E* d = dst + n * plane * channels;
    E v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = c0 + ty + 8 * (j % 4);
      const int64_t p = p0 + tx + 32 * (j / 4);
      v[j] = c < C && p < plane ? copied<kTf32>(s[c * plane + p]) : E(0);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) tile[ty + 8 * (j % 4)][tx + 32 * (j / 4)] = v[j];
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t p = p0 + ty + 8 * j;
      const int c = c0 + tx;
      if (p < plane && c < channels) d[p * channels + c] = tile[tx][ty + 8 * j];
    }
    __syncthreads();
  }
}

// The same where `channels` is one 16-byte word (an RGB stem's padded channels): a thread per pixel
// reads its C channels, each a run of consecutive pixels across the warp, and writes one word.
template <typename E, bool kTf32>
__global__ void tc_nchw_to_nhwc_word_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t pixels,
                                            int64_t plane, int C) {
  constexpr int kVec = 16 / int(sizeof(E));
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < pixels; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / plane;
    const E* s = src + n * C * plane + (e - n * plane);
    union {
      uint4 u;
      E v[kVec];
    } out;
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.v[i] = i < C ? copied<kTf32>(s[i * plane]) : E(0);
    *reinterpret_cast<uint4*>(dst + e * kVec) = out.u;
  }
}

}  // namespace cuda
}  // namespace torchconv
