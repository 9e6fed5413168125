// The block-level tiled GEMM that the CUDA algorithms share (seed 002's joint register / shared
// memory tiling): a thread block computes kBatch independent kM x kN output tiles, streaming the
// reduction through shared memory in chunks of kK, double-buffered so the loads of chunk i + 1
// overlap the math on chunk i. Each thread owns a kThreadM x kThreadN register tile of one batch
// entry. Winograd runs its 16 element-wise GEMMs as kBatch = 16 in one block, so the block holds all
// 16 points of a tile of (filters x tiles) and the output transform can run in its epilogue.
//
// What feeds the tiles is a policy (a "loader"): a loader has
//   fetch(chunk, smem_tile)  start loading reduction chunk `chunk` for the idle stage (cp.async:
//                            straight into the tile, or into a staging area of the loader's own);
//   store(smem_tile)         called after the math on the current stage: finish the tile (wait for
//                            the thread's copies, transform staged data into the tile; nothing for
//                            plain cp.async loaders).
// Either way the loads of the next chunk overlap the math on this one without holding registers.
// Shared tiles are laid out [batch][kK][kLdA] for A and [batch][kK][kLdB] for B (reduction-major,
// rows of kM / kN padded by kSkew), so a thread's fragment is contiguous and read with 16-byte loads.
#pragma once

#include "launch.cuh"

namespace torchconv {
namespace cuda {

// kChunkSums: each reduction chunk is summed into fresh registers and then added to the accumulators
// (two-level summation), so an output's rounding error grows with about the square root of the chunk
// count plus the chunk length instead of the reduction length. It costs a second register tile and
// one add per output per chunk: configs with small thread tiles take it.
template <int kBatch_, int kM_, int kN_, int kK_, int kThreadM_, int kThreadN_, int kMinBlocks_,
          bool kChunkSums_ = false, int kSkew_ = 4>
struct GemmTileConfig {
  static constexpr int kBatch = kBatch_, kM = kM_, kN = kN_, kK = kK_;
  static constexpr int kThreadM = kThreadM_, kThreadN = kThreadN_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kChunkSums = kChunkSums_;
  static constexpr int kThreadsM = kM / kThreadM, kThreadsN = kN / kThreadN;
  static constexpr int kThreadsPerBatch = kThreadsM * kThreadsN;
  static constexpr int kThreads = kBatch * kThreadsPerBatch;
  // Shared rows are padded by kSkew elements (16 bytes or more, keeping 16-byte alignment): a loader
  // whose lanes write down a column of the tile (the grad_weight loaders) then hits distinct banks;
  // 8 floats put the rows of an m16n8k8 fragment's four k steps in four 8-bank quarters.
  static constexpr int kSkew = kSkew_;
  static constexpr int kLdA = kM + kSkew, kLdB = kN + kSkew;
  static constexpr int kTileA = kBatch * kK * kLdA;  // elements of one A stage
  static constexpr int kTileB = kBatch * kK * kLdB;
  static_assert(kM % kThreadM == 0 && kN % kThreadN == 0, "thread tiles must divide the block tile");
  static_assert(kThreadM % 2 == 0 && kThreadN % 2 == 0, "fragments are read as two halves");

  template <typename T>
  static constexpr size_t mainloop_smem_bytes() {
    return 2 * size_t(kTileA + kTileB) * sizeof(T);
  }
};

// A thread's place in the block tile. Its kThreadM rows are two runs of kThreadM / 2, one in each
// half of the tile (row = half * kM / 2 + tm * kThreadM / 2 + i): consecutive threads then read
// consecutive 16-byte words, so fragment loads are free of bank conflicts even when kThreadsM > 8.
template <typename Cfg>
struct ThreadTile {
  int batch, tm, tn;
  __device__ explicit ThreadTile(int tid) {
    batch = tid / Cfg::kThreadsPerBatch;
    const int r = tid % Cfg::kThreadsPerBatch;
    tm = r % Cfg::kThreadsM;
    tn = r / Cfg::kThreadsM;
  }
  __device__ int row(int i) const {
    constexpr int kHalf = Cfg::kThreadM / 2;
    return (i / kHalf) * (Cfg::kM / 2) + tm * kHalf + i % kHalf;
  }
  __device__ int col(int j) const {
    constexpr int kHalf = Cfg::kThreadN / 2;
    return (j / kHalf) * (Cfg::kN / 2) + tn * kHalf + j % kHalf;
  }
};

// Reads `count` consecutive elements from shared memory, in 16-byte words where the run allows.
template <typename T, int kCount>
__device__ __forceinline__ void load_fragment(const T* __restrict__ src, T (&dst)[kCount], int offset) {
  if constexpr ((kCount * sizeof(T)) % 16 == 0) {
    constexpr int kPerWord = 16 / sizeof(T);
#pragma unroll
    for (int v = 0; v < kCount / kPerWord; ++v) {
      if constexpr (sizeof(T) == 4) {
        const float4 w = reinterpret_cast<const float4*>(src)[v];
        dst[offset + 4 * v + 0] = w.x, dst[offset + 4 * v + 1] = w.y;
        dst[offset + 4 * v + 2] = w.z, dst[offset + 4 * v + 3] = w.w;
      } else {
        const double2 w = reinterpret_cast<const double2*>(src)[v];
        dst[offset + 2 * v + 0] = w.x, dst[offset + 2 * v + 1] = w.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kCount; ++i) dst[offset + i] = src[i];
  }
}

// Sized helper: the fragment buffer is kThreadM (or kThreadN) long; each half is read separately.
template <typename T, int kHalf, int kFull>
__device__ __forceinline__ void load_half(const T* __restrict__ src, T (&dst)[kFull], int offset) {
  T tmp[kHalf];
  load_fragment<T, kHalf>(src, tmp, 0);
#pragma unroll
  for (int i = 0; i < kHalf; ++i) dst[offset + i] = tmp[i];
}

// One reduction chunk from the shared tiles into the register accumulators.
template <typename T, typename Cfg>
__device__ __forceinline__ void gemm_chunk(const T* __restrict__ As, const T* __restrict__ Bs, const ThreadTile<Cfg>& tt,
                                           T (&acc)[Cfg::kThreadM][Cfg::kThreadN]) {
  constexpr int kHalfM = Cfg::kThreadM / 2, kHalfN = Cfg::kThreadN / 2;
  const T* a_base = As + tt.batch * Cfg::kK * Cfg::kLdA + tt.tm * kHalfM;
  const T* b_base = Bs + tt.batch * Cfg::kK * Cfg::kLdB + tt.tn * kHalfN;
#pragma unroll 2
  for (int kk = 0; kk < Cfg::kK; ++kk) {
    T a[Cfg::kThreadM], b[Cfg::kThreadN];
    load_half<T, kHalfM>(a_base + kk * Cfg::kLdA, a, 0);
    load_half<T, kHalfM>(a_base + kk * Cfg::kLdA + Cfg::kM / 2, a, kHalfM);
    load_half<T, kHalfN>(b_base + kk * Cfg::kLdB, b, 0);
    load_half<T, kHalfN>(b_base + kk * Cfg::kLdB + Cfg::kN / 2, b, kHalfN);
#pragma unroll
    for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kThreadN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
  }
}

// The main loop's pipeline over reduction chunks [0, num_chunks): `smem` holds two A stages then two
// B stages (Cfg::kTileA, Cfg::kTileB elements each); the loads of chunk c + 1 are in flight while
// math(a_stage, b_stage) runs on chunk c. Ends with a barrier, so the caller may reuse `smem`.
template <typename T, typename Cfg, typename LoaderA, typename LoaderB, typename ChunkMath>
__device__ __forceinline__ void pipelined_chunks(T* smem, LoaderA& la, LoaderB& lb, int num_chunks, ChunkMath&& math) {
  if (num_chunks <= 0) return;
  // Stage pointers by arithmetic, not arrays indexed at run time (those would live in local memory).
  T* const a0 = smem;
  T* const b0 = smem + 2 * Cfg::kTileA;

  la.fetch(0, a0);
  lb.fetch(0, b0);
  cp_async_commit();
  la.store(a0);
  lb.store(b0);
  cp_async_wait<0>();
  __syncthreads();
  for (int c = 0; c < num_chunks; ++c) {
    const int cur = c & 1;
    T* const a_cur = a0 + cur * Cfg::kTileA;
    T* const b_cur = b0 + cur * Cfg::kTileB;
    T* const a_next = a0 + (cur ^ 1) * Cfg::kTileA;
    T* const b_next = b0 + (cur ^ 1) * Cfg::kTileB;
    const bool has_next = c + 1 < num_chunks;
    if (has_next) {
      la.fetch(c + 1, a_next);
      lb.fetch(c + 1, b_next);
      cp_async_commit();
    }
    math(static_cast<const T*>(a_cur), static_cast<const T*>(b_cur));
    if (has_next) {
      la.store(a_next);
      lb.store(b_next);
      cp_async_wait<0>();
    }
    __syncthreads();
  }
}

// The main loop: acc += sum over chunks [0, num_chunks) of A_chunk^T B_chunk, per batch entry, each
// thread's register tile on CUDA cores (gemm_chunk).
template <typename T, typename Cfg, typename LoaderA, typename LoaderB>
__device__ __forceinline__ void block_gemm(T* smem, LoaderA& la, LoaderB& lb, int num_chunks,
                                           T (&acc)[Cfg::kThreadM][Cfg::kThreadN]) {
  const ThreadTile<Cfg> tt(threadIdx.x);
#pragma unroll
  for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kThreadN; ++j) acc[i][j] = T(0);
  pipelined_chunks<T, Cfg>(smem, la, lb, num_chunks, [&](const T* a_cur, const T* b_cur) {
    if constexpr (Cfg::kChunkSums) {
      T part[Cfg::kThreadM][Cfg::kThreadN];
#pragma unroll
      for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kThreadN; ++j) part[i][j] = T(0);
      gemm_chunk<T, Cfg>(a_cur, b_cur, tt, part);
#pragma unroll
      for (int i = 0; i < Cfg::kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kThreadN; ++j) acc[i][j] += part[i][j];
    } else {
      gemm_chunk<T, Cfg>(a_cur, b_cur, tt, acc);
    }
  });
}

// Copies rows of a zero-padded workspace laid out [reduction][batch][ld] into a shared tile
// [batch][kK][kLd], kCols elements from column `col0`: the cp.async loader for operands that an
// earlier kernel prepared (transformed filters, Winograd V). `ld` and `col0` are multiples of kCols
// and the workspace covers every chunk, so no bounds checks are needed.
template <typename T, typename Cfg, int kCols, int kLd>
struct PaddedTileLoader {
  const T* base;  // this block's group
  int64_t ld;     // elements per (reduction, batch) row
  int col0;

  __device__ void fetch(int chunk, T* tile) const {
    constexpr int kPerWord = 16 / sizeof(T);
    constexpr int kWordsPerRow = kCols / kPerWord;
    constexpr int kRows = Cfg::kK * Cfg::kBatch;  // (reduction step, batch) rows per chunk
    // Narrow tiles have fewer words per chunk than the block has threads: the rest sit out.
    constexpr int kThreadRows = Cfg::kThreads / kWordsPerRow;
    constexpr int kRowsPerPass = kThreadRows < kRows ? kThreadRows : kRows;
    static_assert(kCols % kPerWord == 0, "tile rows are copied in 16-byte words");
    static_assert(Cfg::kThreads % kWordsPerRow == 0 && kRows % kRowsPerPass == 0 && kRowsPerPass % Cfg::kBatch == 0,
                  "each pass of the block copies whole reduction steps");
    if (kThreadRows > kRows && threadIdx.x >= kRows * kWordsPerRow) return;
    // A thread copies the same word of rows row0, row0 + kRowsPerPass, ...: one base address per
    // chunk and constant strides, so the per-chunk index math is a few instructions.
    const unsigned tid = threadIdx.x;
    const unsigned row0 = tid / kWordsPerRow, word = tid % kWordsPerRow;
    const unsigned b = row0 % Cfg::kBatch, kk0 = row0 / Cfg::kBatch;
    const T* src = base + (int64_t(chunk) * kRows + row0) * ld + col0 + word * kPerWord;
    T* dst = tile + (b * Cfg::kK + kk0) * kLd + word * kPerWord;
#pragma unroll
    for (int pass = 0; pass < kRows / kRowsPerPass; ++pass)
      cp_async_16(dst + pass * (kRowsPerPass / Cfg::kBatch) * kLd, src + int64_t(pass) * kRowsPerPass * ld);
  }
  __device__ void store(T*) const {}
};

}  // namespace cuda
}  // namespace torchconv
