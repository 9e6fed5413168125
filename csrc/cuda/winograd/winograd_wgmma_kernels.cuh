// Winograd F(2x2, 3x3) with its 16 point GEMMs on Hopper's warpgroup MMA (wgmma m64n32k8, TF32,
// FP32 accumulators): the forward (and grad_input, the same kernel on the rotated filters) of float32
// convolutions while PyTorch's cuDNN TF32 switch is on, and of bfloat16 ones, on sm_90a devices; x
// and y in their own type (TIo, as winograd_tc_kernels.cuh). The single block also runs float16
// calls, with three bfloat16 products of split operands (m64n32k16, WinogradWgmmaStages), as does the
// two-block staged-V cluster (WinogradWgmmaClusterVBulkSplitTile); the other cluster tiles run one
// TF32 product only.
//
// The block is the mma.sync kernel's 64-filter block (winograd_tc_kernels.cuh): 64 filters x 32
// tiles x 16 points, 16 channels per chunk, every thread loading, transforming and storing one
// (channel, tile) patch per chunk, U copied from its cache as one contiguous run. What changes is who
// reads the operands: each of the four warpgroups owns four points, and per point and k-step one
// wgmma reads U (64 filters x 8 channels) and V (32 tiles x 8 channels) from shared memory itself.
// The mma.sync kernel's warps loaded every A and B fragment into registers and waited for their
// MMAs; here a warpgroup issues its chunk's eight MMAs as one asynchronous group and goes on to copy
// the next chunk's U, store its V and load the patches of the chunk after.
//
// Both kernels pass each chunk's U and V through shared memory once per 64 x 32 block, and the
// patch loads run through the same L1: that data path, not the MMAs, is the busiest unit on the
// large layers (docs/winograd.md), which is why the asynchronous MMAs gain most where the reduction
// is long and little elsewhere.
//
// Operands are K-major without swizzle (wgmma_descriptor_interleaved): core matrices of 8 rows (filters
// or tiles) x 4 channels, 128 contiguous bytes each, [channel quad][row octet][row][channel]; the V
// stores of a loader warp fall in distinct banks (WinogradWgmmaTile::kVQuad). U comes in that order
// from its cache (winograd_filter_transform_tc_kernel with u_word).
//
// The second kernel (WinogradWgmmaClusterTile, below) splits a 64 x 64 output block's 16 points over
// a cluster of two blocks, which halves U's traffic per MMA at the cost of more patch loads. Its
// staged-V instances (WinogradWgmmaClusterBulkConfig) load no patches: a kernel of its own
// (winograd_tc_input_transform_kernel) transforms the input once into a workspace, and each block
// copies its half of a chunk's V as it copies U, by bulk copies.
#pragma once

#include "../common/cluster.cuh"
#include "../common/dependent_launch.cuh"
#include "../common/pipeline.cuh"
#include "../common/wgmma.cuh"
#include "winograd_tc_kernels.cuh"

namespace torchconv {
namespace cuda {

// The wgmma block: 64 filters x 32 tiles x 16 points, 16 channels per chunk (two k-steps), four
// warpgroups of four points, one block per SM (two stages of U and V take 196 KiB).
//
// Persistent: a grid of one block per SM, each block walking the output blocks b, b + gridDim.x, ...
// With one block per SM nothing else hides a block's first chunk (U copy and patch loads before any
// MMA) or its epilogue, so each block issues the next output block's first copies and loads before
// its epilogue, and they arrive while the epilogue runs. (It gained a few percent: the block's pace
// is set by the L1 / shared-memory data path of its chunks, docs/winograd.md.)
//
// Warpgroup g owns the points of column g of the 4 x 4 tile (points g, g + 4, g + 8, g + 12), so that
// it applies the output transform's first step (A^T m, down each column: winograd_output_column) to
// its own accumulators: the epilogue then stages 8 values per (filter, tile) instead of 16, in half
// the shared memory.
//
// Where the stages lie (WinogradWgmmaStages): channels_last blocks keep each stage's U and V together
// and stage their epilogue in stage 1, as the next block's first chunk fills stage 0. NCHW blocks
// keep U's two stages apart from V's and stage their epilogue over V's, so an output block's last
// two chunks of U outlive its epilogue: the walk's next block of the same group and filter block
// (WgmmaChunkOrder) runs its chunks in the opposite order and starts with those two, copying two
// chunks of U fewer (none where a block has at most two chunks). The price is a block barrier after
// the epilogue, which now shares space with the next block's first V. NCHW blocks were faster
// that way, most of it from the placement rather than the copies saved; channels_last blocks were
// slower where a block has many chunks and faster where it has at most two, so they take the NCHW
// placement there only (winograd_wgmma_fused_forward_kernel's kUApart; docs/winograd.md).
struct WinogradWgmmaTile {
  static constexpr bool kWgmma = true, kVStaged = false, kPersistent = true;
  static constexpr int kM = 64, kN = 32, kK = 16, kSteps = kK / 8;
  static constexpr int kThreads = 512, kMinBlocks = 1;
  static constexpr int kWarpgroups = kThreads / 128, kPointsPerGroup = kWinogradPoints / kWarpgroups;
  // Warpgroup g's points: g + kPointStep * pe (a column of the 4 x 4 tile).
  static constexpr int kPointStep = kWarpgroups;
  static __host__ __device__ constexpr int first_point(int group) { return group; }
  // V's channel quads (core matrix columns) are kN * 4 + 8 words apart rather than kN * 4: the NHWC
  // loaders' lanes run over 16 channels x 2 tiles, and the 8-word shift puts the four quads' stores
  // in distinct banks (the NCHW loaders' lanes cover one quad, 32 banks, either way).
  static constexpr int kVQuad = kN * 4 + 8, kVPoint = (kK / 4) * kVQuad;
  // Operands are TF32 words (WgmmaPointMmas; the staged-V cluster carries float16, below).
  static constexpr int kOperandBytes = 4, kUPointFloats = kK * kM;
  static constexpr int kUFloats = kWinogradPoints * kUPointFloats, kVFloats = kWinogradPoints * kVPoint;
  static constexpr int kUChunkFloats = kUFloats;  // the cache's chunk: the block's U
  static constexpr int kStage = kUFloats + kVFloats;
  // The epilogue stages all 64 filters in one pass: A^T M (8 values per filter and tile).
  static constexpr int kEpilogueFilters = kM, kStagedValues = 8;
  static constexpr int kLdV = kN + 8, kLdMt = kEpilogueFilters + 4;
  static constexpr int kEpilogueFloats = kStagedValues * (kM * kLdV > kN * kLdMt ? kM * kLdV : kN * kLdMt);
  // WinogradWgmmaStages<true>'s floats before its mbarriers: U's stages, then V's with the epilogue
  // over them. The launch takes that placement's size, the larger of the two.
  static constexpr int kUApartFloats = 2 * kUFloats + (kEpilogueFloats > 2 * kVFloats ? kEpilogueFloats : 2 * kVFloats);
  static constexpr size_t kForwardSmemBytes = kUApartFloats * sizeof(float) + 2 * sizeof(uint64_t);
  static_assert(kForwardSmemBytes <= 227 * 1024, "within an sm_90 block's shared memory");
  static_assert(kEpilogueFloats <= kStage, "the epilogue within a stage");
  static_assert(kThreads == kK * kN && kK == 16 && kN == 32, "a (channel, tile) patch per thread, the loaders' lanes");
  static_assert(kWinogradPoints % kWarpgroups == 0 && kUFloats % (4 * kThreads) == 0, "even splits");
  static_assert(kWarpgroups == 4 && kPointsPerGroup == 4, "a warpgroup per column of the 4 x 4 points");

  // The word of (channel kk of a chunk, row m) within a point's K-major operand, in core matrices:
  // the next core matrix along K (channel quad) is `quad` words on, the next 8 rows 32 words on;
  // k-step s starts at word 2 * s * quad.
  static __host__ __device__ constexpr int operand_word(int kk, int m, int quad) {
    return (kk / 4) * quad + (m / 8) * 32 + (m % 8) * 4 + kk % 4;
  }
  static __host__ __device__ constexpr int u_word(int kk, int m) { return operand_word(kk, m, kM * 4); }
  static __host__ __device__ constexpr int v_word(int kk, int n) { return operand_word(kk, n, kVQuad); }

  // MMA products per point product: one TF32 product, or three bfloat16 products of split operands
  // (float16 calls, kMmaProducts; WinogradWgmmaStages).
  static constexpr int kProducts = 1;
  // Split operands in bfloat16 halves (kProducts == 3): a chunk's 16 channels are one bfloat16 k-step,
  // core matrices of 8 rows x 8 channels, and its hi parts fill the space of the TF32 words' first
  // k-step, its lo parts that of the second. The three products then read them by the TF32 k-steps'
  // descriptors (WgmmaPointMmas::run), and a stage is the TF32 stage's size.
  static __host__ __device__ constexpr int split_half(int kk, int m, int quad) {
    return (kk / 8) * 2 * quad + (m / 8) * 64 + (m % 8) * 8 + kk % 8;
  }
  static __host__ __device__ constexpr int u_split_half(int kk, int m) { return split_half(kk, m, kM * 4); }
  static __host__ __device__ constexpr int v_split_half(int kk, int n) { return split_half(kk, n, kVQuad); }
  // An element's lo half, from its hi half: the second k-step's space, two core-matrix columns on.
  static constexpr int kUSplitLoHalves = 4 * kM * 4, kVSplitLoHalves = 4 * kVQuad;
};

// The single wgmma block's shared memory (WinogradWgmmaTile): kUApart, [U 0][U 1][V 0][V 1] with the
// epilogue from V 0 on; else [U 0][V 0][U 1][V 1] with the epilogue in stage 1. Then the mbarriers
// on which each stage's U copy lands (WgmmaUBulkCopies).
template <bool kUApart_, int kProducts_ = 1>
struct WinogradWgmmaStages : WinogradWgmmaTile {
  static constexpr bool kUApart = kUApart_;
  static constexpr int kProducts = kProducts_;
  static_assert(kProducts == 1 || kProducts == 3, "one TF32 product or three bfloat16 ones");
  // Stage s's U and V (WgmmaPointMmas), in floats from the start of shared memory.
  static __host__ __device__ constexpr int u_stage_offset(int s) { return s * (kUApart ? kUFloats : kStage); }
  static __host__ __device__ constexpr int v_stage_offset(int s) {
    return kUApart ? 2 * kUFloats + s * kVFloats : s * kStage + kUFloats;
  }
  static constexpr int kEpilogueOffset = kUApart ? 2 * kUFloats : kStage;
  static constexpr int kBarrierOffset = kUApart ? kUApartFloats : 2 * kStage;
  static_assert(kBarrierOffset % 2 == 0 && (kUFloats * sizeof(float)) % 16 == 0, "aligned barriers, a 16-byte copy size");
  static_assert(kBarrierOffset * sizeof(float) + 2 * sizeof(uint64_t) <= kForwardSmemBytes, "within the launch");
};

// The points of a wgmma kernel's accumulators (acc[pe]: point kPointsPerGroup * warpgroup + pe of the
// block's, rows 16 * (warp % 4) on) into the epilogue's M, as stage_pass does for the mma.sync kernels
// (one pass).
template <typename Cfg, bool kTileMajor>
__device__ __forceinline__ void stage_wgmma_points(const float (&acc)[Cfg::kPointsPerGroup][2 * Cfg::kN / 4],
                                                   float* m, int warp, int lane) {
  constexpr int kLd = kTileMajor ? Cfg::kLdMt : Cfg::kLdV, kPoint = kTileMajor ? Cfg::kN * kLd : Cfg::kM * kLd;
  const int row = 16 * (warp % 4) + lane / 4, t = lane % 4;
#pragma unroll
  for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
    for (int j = 0; j < Cfg::kN / 8; ++j) {
      const float* c = acc[pe] + 4 * j;
      stage_fragment<kTileMajor, kLd>(m + (Cfg::first_point(warp / 4) + pe * Cfg::kPointStep) * kPoint, row,
                                      j * 8 + 2 * t, c[0], c[1], c[2], c[3]);
    }
}

// The single wgmma block's accumulators (acc[i]: point (i, g) of warpgroup g's column g) into the
// epilogue's A^T M: each column's first transform step in registers (winograd_output_column), rows h
// = 0, 1 of column g staged at slice 4 h + g, as stage_wgmma_points lays out points.
template <typename Cfg, bool kTileMajor>
__device__ __forceinline__ void stage_wgmma_columns(const float (&acc)[Cfg::kPointsPerGroup][2 * Cfg::kN / 4],
                                                    float* m, int warp, int lane) {
  static_assert(Cfg::kPointStep == 4 && Cfg::kPointsPerGroup == 4 && Cfg::kStagedValues == 8, "a column per warpgroup");
  constexpr int kLd = kTileMajor ? Cfg::kLdMt : Cfg::kLdV, kSlice = kTileMajor ? Cfg::kN * kLd : Cfg::kM * kLd;
  const int row = 16 * (warp % 4) + lane / 4, t = lane % 4, g = warp / 4;
#pragma unroll
  for (int j = 0; j < Cfg::kN / 8; ++j) {
    float t0[4], t1[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      winograd_output_column(acc[0][4 * j + q], acc[1][4 * j + q], acc[2][4 * j + q], acc[3][4 * j + q], t0[q], t1[q]);
    stage_fragment<kTileMajor, kLd>(m + g * kSlice, row, j * 8 + 2 * t, t0[0], t0[1], t0[2], t0[3]);
    stage_fragment<kTileMajor, kLd>(m + (4 + g) * kSlice, row, j * 8 + 2 * t, t1[0], t1[1], t1[2], t1[3]);
  }
}

// The order of an output block's chunks in reduce_loaded: 0 .. chunks - 1, or reversed; the first
// `held` of them in that order find their U in their stage already (the walk's block before, of the
// same U, ended with them: WinogradWgmmaTile).
struct WgmmaChunkOrder {
  int chunks;
  bool reversed = false;
  int held = 0;
  __device__ __forceinline__ int chunk(int i) const { return reversed ? chunks - 1 - i : i; }
};

// What the wgmma kernels share (the forward's single and cluster blocks, and grad_weight's block,
// winograd_wgmma_weight_grad.cuh, whose dM takes U's place): their stages (U, then V, for the block's
// points in core matrices), their loaders' lanes, and a warpgroup's MMAs of its points with the
// reduction loop's wait for a stage. The descriptors of the
// warpgroup's first point in stage 0 are built once; every (stage, point, k-step) is a constant
// offset from them. With the warpgroup index broadcast from lane 0 the compiler knows it is
// warp-uniform and keeps the descriptors in uniform registers, rather than building each chunk's
// descriptors in every thread's registers.
template <typename Cfg>
struct WgmmaPointMmas {
  using Accumulators = float[Cfg::kPointsPerGroup][2 * Cfg::kN / 4];
  uint64_t u0, v0;

  // Stage s's U and V.
  static __device__ __forceinline__ float* stage_u(float* smem, int s) { return smem + Cfg::u_stage_offset(s); }
  static __device__ __forceinline__ float* stage_v(float* smem, int s) { return smem + Cfg::v_stage_offset(s); }

  // A loader thread's channel of a chunk and its (first) tile. NCHW: lanes over 4 channels x 8 tiles
  // (neighbouring tiles, neighbouring addresses), warps over the chunk's 4 channel quads x 4 tile
  // octets. NHWC: lanes over the chunk's 16 channels x 2 tiles (64 contiguous bytes per tile).
  template <bool kNhwc>
  static __device__ __forceinline__ int loader_channel(int warp, int lane) {
    return kNhwc ? lane % 16 : (warp % 4) * 4 + lane % 4;
  }
  template <bool kNhwc>
  static __device__ __forceinline__ int loader_tile(int warp, int lane) {
    return kNhwc ? warp * 2 + lane / 16 : (warp / 4) * 8 + lane / 4;
  }

  static __device__ __forceinline__ void zero(Accumulators& acc) {
#pragma unroll
    for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe)
#pragma unroll
      for (int q = 0; q < 2 * Cfg::kN / 4; ++q) acc[pe][q] = 0.f;
  }

  __device__ __forceinline__ WgmmaPointMmas(const float* smem) {
    const int group = __shfl_sync(0xFFFFFFFFu, int(threadIdx.x / 128), 0);
    const unsigned base = unsigned(__cvta_generic_to_shared(smem));
    const int e0 = Cfg::first_point(group);
    u0 = wgmma_descriptor_interleaved(base + 4 * (Cfg::u_stage_offset(0) + e0 * Cfg::kUPointFloats), 16 * Cfg::kM, 128);
    v0 = wgmma_descriptor_interleaved(base + 4 * (Cfg::v_stage_offset(0) + e0 * Cfg::kVPoint), 4 * Cfg::kVQuad, 128);
  }

  // The chunk's MMAs of the warpgroup's points from stage s, one asynchronous group. `accumulate`
  // false: each point's first MMA ignores acc (scale-d 0), so an output block's first chunk needs no
  // zeroed accumulators.
  __device__ __forceinline__ void run(Accumulators& acc, int s, bool accumulate = true) const {
    static_assert((Cfg::u_stage_offset(1) - Cfg::u_stage_offset(0)) % 4 == 0 &&
                      (Cfg::v_stage_offset(1) - Cfg::v_stage_offset(0)) % 4 == 0 && Cfg::kVQuad % 2 == 0,
                  "16-byte units");
    // Stage s from stage 0, in 16-byte units, as the offsets below.
    const unsigned u_stage = unsigned(s) * ((Cfg::u_stage_offset(1) - Cfg::u_stage_offset(0)) / 4);
    const unsigned v_stage = unsigned(s) * ((Cfg::v_stage_offset(1) - Cfg::v_stage_offset(0)) / 4);
    wgmma_fence();
    if constexpr (Cfg::kProducts == 3) {
      // Split operands: hi in the first TF32 k-step's space, lo in the second's. hi hi, hi lo and lo
      // hi, each one bfloat16 k-step over the chunk's 16 channels; the points inner, so that
      // consecutive MMAs accumulate into different registers.
      static_assert(Cfg::kSteps == 2 && Cfg::kOperandBytes == 4, "a 16-channel chunk in the TF32 words' space");
      constexpr unsigned kULo = 8 * Cfg::kM / 4, kVLo = 2 * Cfg::kVQuad / 4;  // the second k-step
#pragma unroll
      for (int product = 0; product < 3; ++product)
#pragma unroll
        for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe) {
          const int e = pe * Cfg::kPointStep;
          const uint64_t da = wgmma_descriptor_advance(u0, u_stage + e * Cfg::kUPointFloats / 4 + (product == 2 ? kULo : 0));
          const uint64_t db = wgmma_descriptor_advance(v0, v_stage + e * Cfg::kVPoint / 4 + (product == 1 ? kVLo : 0));
          Wgmma<__nv_bfloat16, Cfg::kN>::run(acc[pe], da, db, product > 0 || accumulate);
        }
    } else {
#pragma unroll
      for (int step = 0; step < Cfg::kSteps; ++step)
#pragma unroll
        for (int pe = 0; pe < Cfg::kPointsPerGroup; ++pe) {
          const int e = pe * Cfg::kPointStep;  // from the warpgroup's first point
          const uint64_t da = wgmma_descriptor_advance(u0, u_stage + (e * Cfg::kUPointFloats + 8 * step * Cfg::kM) / 4);
          const uint64_t db = wgmma_descriptor_advance(v0, v_stage + (e * Cfg::kVPoint + 2 * step * Cfg::kVQuad) / 4);
          Wgmma<std::conditional_t<Cfg::kOperandBytes == 2, __half, float>, Cfg::kN>::run(acc[pe], da, db,
                                                                                          step > 0 || accumulate);
        }
    }
    wgmma_commit();
  }

  // Once stage s is complete -- its U landed (u_chunks.wait, unless the stage held it already), this
  // thread's V stores made visible to the MMAs' proxy, this warpgroup's MMAs of the previous chunk
  // (stage s ^ 1) done, then every thread's -- the chunk's MMAs. After the barrier no warpgroup
  // reads stage s ^ 1 any more.
  template <typename UChunks>
  __device__ __forceinline__ void run_when_ready(Accumulators& acc, int s, const UChunks& u_chunks, bool u_held,
                                                 bool accumulate) const {
    if (!u_held) u_chunks.wait(s);
    fence_proxy_async_shared();
    wgmma_wait<0>();
    __syncthreads();
    run(acc, s, accumulate);
  }

  // The reduction of a block that loads its own patches, through two stages, its chunks in `order`;
  // chunk c's U and V in stage c % 2. On entry the U copy of the order's first chunk is issued
  // (u_chunks.fetch) unless the stage holds it, and that chunk's patches loaded; store_v(v) transforms
  // the patches last loaded and stores them as the V at v, load(chunk) loads a chunk's patches. They
  // are loaded two chunks ahead: those of the chunk after next are issued in an iteration and stored as
  // V in the next one, so a whole iteration (the MMAs run asynchronously, and issuing them takes no
  // time) covers their latency. The first chunk's MMAs overwrite acc (run's `accumulate`), so it
  // needs no zeroing. On return this warpgroup's MMAs may still run.
  template <typename UChunks, typename StoreV, typename LoadPatches>
  __device__ __forceinline__ void reduce_loaded(Accumulators& acc, float* smem, const WgmmaChunkOrder& order,
                                                const UChunks& u_chunks, StoreV&& store_v, LoadPatches&& load) const {
    const int chunks = order.chunks;
    store_v(stage_v(smem, order.chunk(0) & 1));
    if (chunks > 1) load(order.chunk(1));
    for (int i = 0; i < chunks; ++i) {
      const int s = order.chunk(i) & 1;
      run_when_ready(acc, s, u_chunks, i < order.held, /*accumulate=*/i > 0);
      if (i + 1 < chunks) {
        if (i + 1 >= order.held) u_chunks.fetch(order.chunk(i + 1), s ^ 1);
        store_v(stage_v(smem, s ^ 1));
        if (i + 2 < chunks) load(order.chunk(i + 2));
      }
    }
  }
};

// A chunk's U for reduce_loaded by every thread's cp.async (TcUFetcher) into stage s, one commit
// group per chunk: complete once the thread's copies have landed (the patch loads are not cp.async).
template <typename Cfg>
struct WgmmaUThreadCopies {
  struct Barriers {  // none: cp.async's commit groups
    __device__ __forceinline__ explicit Barriers(float*) {}
  };
  TcUFetcher<Cfg> fetcher;
  float* smem;
  template <typename Args>
  static __device__ __forceinline__ WgmmaUThreadCopies of_block(const Args& a, const BlockCoord& bc, float* smem,
                                                                Barriers&) {
    return {TcUFetcher<Cfg>(a, bc), smem};
  }
  __device__ __forceinline__ void fetch(int chunk, int s) const {
    fetcher.fetch(chunk, WgmmaPointMmas<Cfg>::stage_u(smem, s));
    cp_async_commit();
  }
  __device__ __forceinline__ void wait(int) const { cp_async_wait<0>(); }
};

// A chunk's U for reduce_loaded by one bulk copy into stage s (the cache holds a block's chunk as one
// contiguous run), issued by thread 0 and counted on the stage's mbarrier (full[s], count 1), which
// every thread waits for. The copy engine moves the run without the threads' 16-byte copies, whose
// global-load requests go through the L1 beside the patch loads. phases: bit s the parity of the
// phase of full[s] this thread waits for next; a stage is refilled only after a block barrier that
// follows every thread's wait for its previous fill, so no thread falls a phase behind.
template <typename Cfg>
struct WgmmaUBulkCopies {
  // The stages' mbarriers, and the phases this thread waits for next: one per block of the walk.
  struct Barriers {
    uint64_t* full;
    unsigned phases = 0;
    __device__ __forceinline__ explicit Barriers(float* smem)
        : full(reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset)) {
      if (threadIdx.x == 0) {
        mbarrier_init(&full[0], 1);
        mbarrier_init(&full[1], 1);
        mbarrier_init_fence_cluster();
      }
      __syncthreads();
    }
  };
  const float* run;  // chunk 0 of the block's run
  float* smem;
  Barriers& bars;
  static constexpr unsigned kBytes = Cfg::kUFloats * sizeof(float);
  template <typename Args>
  static __device__ __forceinline__ WgmmaUBulkCopies of_block(const Args& a, const BlockCoord& bc, float* smem,
                                                              Barriers& bars) {
    return {TcUFetcher<Cfg>::block_run(a, bc.g, bc.kt), smem, bars};
  }
  __device__ __forceinline__ void fetch(int chunk, int s) const {
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&bars.full[s], kBytes);
      bulk_copy_to_shared(WgmmaPointMmas<Cfg>::stage_u(smem, s), run + int64_t(chunk) * Cfg::kUChunkFloats, kBytes,
                          &bars.full[s]);
    }
  }
  __device__ __forceinline__ void wait(int s) const {
    mbarrier_wait(&bars.full[s], (bars.phases >> s) & 1u);
    bars.phases ^= 1u << s;
  }
};

// Float16 words for TF32-rounded operands (the staged-V tiles, WinogradWgmmaClusterVStagedLayout).
// float16 and TF32 keep the same 10 significand bits, so a value rounded to TF32 (as the TF32 MMA
// reads it) and scaled by a power of two into float16's normal range is the same value, and the
// MMA's products and FP32 sums are the TF32 kernel's, scaled. U is scaled per filter (its largest |U|
// over the reduction and the points lands in [2^14, 2^15)), V per tile (a bound of its largest |V|
// over the group's channels and the points lands there); the epilogue multiplies M back by both
// powers of two, exactly. Values more than 2^28 times smaller than their filter's largest |U| (their
// tile's bound) lose bits to float16's subnormals, and those more than 2^39 times smaller vanish:
// only there do the results depart from the TF32 kernel's.
struct F16Carrier {
  // The exponent e of the scale 2^-e for a filter's or tile's largest |value| (0 for 0, infinities
  // and NaNs: their results are not finite either way).
  static __device__ __forceinline__ int exponent(float max_abs) {
    if (!(max_abs > 0.f) || !(max_abs < __int_as_float(0x7f800000))) return 0;
    int x;
    frexpf(max_abs, &x);  // max_abs = f 2^x, f in [0.5, 1)
    return x - 15;
  }
  // The scale 2^-e as two normal floats (e as exponent() gives it, so -e lies in [-113, 163]): 2^-e
  // and 1 where 2^-e is a float, else 2^127 and the rest. Values under the scale are at most their
  // maximum, so the first product of one over 2^127 is exact, and v * first * second rounds once, as
  // ldexpf(v, -e) does, in two multiplications instead of ldexpf's range steps.
  struct Scale {
    float first, second;
    __device__ __forceinline__ explicit Scale(int e) {
      const int head = -e < 127 ? -e : 127;
      first = __int_as_float((127 + head) << 23);
      second = __int_as_float((127 - e - head) << 23);
    }
  };
  // v under the scale, in float32.
  static __device__ __forceinline__ float scaled(float v, const Scale& s) { return v * s.first * s.second; }
  // v under the scale, as float16 bits (rounded to its 10 bits, TF32's: the F(2x2) tiles' callers
  // round v to TF32 first, as their TF32 words do).
  static __device__ __forceinline__ uint16_t half_bits(float v, const Scale& s) {
    return __half_as_ushort(__float2half_rn(scaled(v, s)));
  }
  static __device__ __forceinline__ uint16_t half_bits(float v, int e) { return half_bits(v, Scale(e)); }
  // Two values under the scale, as half_bits' two halves of one word (lo in the low 16 bits): one
  // conversion of the pair.
  static __device__ __forceinline__ uint32_t half2_bits(float lo, float hi, const Scale& s) {
    const __half2 h = __floats2half2_rn(scaled(lo, s), scaled(hi, s));
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  // The way back: x 2^e for e as exponent() gives it ([-163, 113]), with ldexpf(x, e)'s bits in one
  // or two multiplications instead of ldexpf's range steps. Where 2^e is a normal float, x 2^e rounds
  // once. Below, x 2^(e + 126) is exact for |x| >= 2^-89 (a normal result), and 2^-126 times it then
  // rounds once; smaller x give 0 either way (|x 2^e| < 2^-216).
  struct Unscale {
    float first, second;
    __device__ __forceinline__ explicit Unscale(int e) {
      first = __int_as_float((127 + (e >= -126 ? e : e + 126)) << 23);
      second = e >= -126 ? 1.f : __int_as_float(1 << 23);
    }
    __device__ __forceinline__ float operator()(float x) const { return x * first * second; }
  };
  // The largest |value| of a filter or tile, gathered by atomicMax on the bits (non-negative floats
  // order as their bits do). fmaxf drops NaNs from it: a NaN stays a NaN in float16, and its
  // results are NaNs under any scale.
  static __device__ __forceinline__ void gather_max(const float* max_abs, float v) {
    atomicMax(reinterpret_cast<unsigned*>(const_cast<float*>(max_abs)), __float_as_uint(fabsf(v)));
  }
};

// U for the staged-V tiles in float16 (F16Carrier), in two launches over the cache: `max_abs` first
// (kMax: each filter's largest |U|, gathered into u_max, zeroed by the caller), then the scaled
// values, [group][filter block][chunk][point][u_half], the points of Cfg::Tile (F(2x2)'s 16, or
// F(4x4)'s 36). The cache tensor holds u_max after U. TW: the weight's type (float, bfloat16 or
// float16). A block per run of a (group, filter block, chunk), as winograd_filter_transform_tc_kernel:
// kMax, the run's filters' maxima meet in shared memory first (one atomic maximum a filter and run,
// where one a filter pair queued on each filter's address); else the run is written in shared memory
// and copied out in 16-byte words.
template <typename Cfg, bool kMax, typename TW>
__global__ void __launch_bounds__(256) winograd_filter_transform_f16_kernel(const TW* __restrict__ w,
                                                                            uint16_t* __restrict__ u,
                                                                            float* __restrict__ u_max,
                                                                            const FilterLayout f) {
  using Tile = typename Cfg::Tile;
  static_assert(Cfg::kOperandBytes == 2, "float16 operands");
  static_assert(Cfg::kUChunkFloats == Tile::kPoints * Cfg::kUPointFloats && 2 * Cfg::kUPointFloats == Cfg::kK * Cfg::kM,
                "a run holds the chunk's points of kK x kM halves");
  extern __shared__ __align__(16) float run[];  // kMax: the run's kM maxima; else its kUChunkFloats
  const int k_blocks = f.outputs_pad / Cfg::kM, chunks = f.reduction_pad / Cfg::kK;
  const int64_t runs = int64_t(f.groups) * k_blocks * chunks;
  for (int64_t b = blockIdx.x; b < runs; b += gridDim.x) {
    const int chunk = int(b % chunks), kb = int((b / chunks) % k_blocks), g = int(b / chunks / k_blocks);
    float* filter_max = u_max + int64_t(g) * f.outputs_pad + kb * Cfg::kM;
    if constexpr (kMax) {
      for (int m = threadIdx.x; m < Cfg::kM; m += blockDim.x) run[m] = 0.f;
      __syncthreads();
    }
    for (int i = threadIdx.x; i < Cfg::kM * Cfg::kK; i += blockDim.x) {
      const int kk = f.rotated ? i / Cfg::kM : i % Cfg::kK, m = f.rotated ? i % Cfg::kM : i / Cfg::kK;
      float uu[Tile::kPoints];
      filter_points<Tile>(w, f, g, chunk * Cfg::kK + kk, kb * Cfg::kM + m, uu);
      if constexpr (kMax) {
        float most = 0.f;
#pragma unroll
        for (int e = 0; e < Tile::kPoints; ++e) most = fmaxf(most, fabsf(round_to_tf32(uu[e])));
        if (most != 0.f) F16Carrier::gather_max(run + m, most);
      } else {
        const int ex = F16Carrier::exponent(filter_max[m]);
        uint16_t* dst = reinterpret_cast<uint16_t*>(run) + Cfg::u_half(kk, m);
#pragma unroll
        for (int e = 0; e < Tile::kPoints; ++e)
          dst[e * 2 * Cfg::kUPointFloats] = F16Carrier::half_bits(round_to_tf32(uu[e]), ex);
      }
    }
    __syncthreads();
    if constexpr (kMax) {
      for (int m = threadIdx.x; m < Cfg::kM; m += blockDim.x)
        if (run[m] != 0.f) F16Carrier::gather_max(filter_max + m, run[m]);
    } else {
      float4* out = reinterpret_cast<float4*>(u + b * (2 * Cfg::kUChunkFloats));
      const float4* in = reinterpret_cast<const float4*>(run);
      for (int i = threadIdx.x; i < Cfg::kUChunkFloats / 4; i += blockDim.x) out[i] = in[i];
    }
    __syncthreads();  // the run's shared memory free for the next
  }
}

// The staged-V tiles' scales for V (F16Carrier) come from a bound of each tile's largest |V|: a
// V value is a signed sum of at most four of its patch's inputs, so 4 x the largest |input| of the
// patch over the group's channels bounds it (and its TF32 rounding stays within the next power of
// two, which float16 holds). One launch before the transform finds the largest |input| of each pixel
// over the group's channels ([group][image][row][column]); the transform takes each tile's window of
// them (tile_v_bound). A pixel's channels are split over threads of one block whose maxima meet
// there, so the maxima need neither zeroing nor atomics, and layers of few pixels and many channels
// still fill the GPU: NCHW, a block takes 32 neighbouring pixels (a warp's lanes, one row of a
// channel plane a load) and its warps the channels in turn; channels_last, a warp takes a pixel, its
// lanes along the pixel's channels (one run of 32 channels a load).
constexpr int kPixelMaxThreads = 1024;
// The largest |src[j * step]| over j < count (0 for none; fmaxf drops NaNs). Eight loads at a time,
// each predicated on its own index, so that all eight are in flight before the first is used.
template <typename TIo>
__device__ __forceinline__ float largest_abs(const TIo* src, int count, int64_t step) {
  float most = 0.f;
  for (int j0 = 0; j0 < count; j0 += 8, src += 8 * step) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = j0 + j < count ? fabsf(to_float(src[j * step])) : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) most = fmaxf(most, v[j]);
  }
  return most;
}
// The NCHW kernel's warps per block: about 32 channels a thread (fewer threads with more loads each
// took longer: the block's barriers and its final reduction weigh more), one warp at least.
inline int pixel_max_warps(int channels) {
  const int warps = (channels + 31) / 32;
  return warps < 1 ? 1 : warps > kPixelMaxThreads / 32 ? kPixelMaxThreads / 32 : warps;
}
template <bool kNhwc, typename TIo>
__global__ void __launch_bounds__(kPixelMaxThreads) winograd_tc_pixel_max_kernel(const ForwardArgs<float, TIo> a,
                                                                                float* __restrict__ pixel_max) {
  grid_dependency_wait();  // x may come from the kernel before
  allow_dependents();
  const WinogradConv& cv = a.cv;
  const int Cg = cv.Cg(), warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t pixels = int64_t(cv.N) * cv.in_plane, total = int64_t(cv.groups) * pixels;
  if constexpr (kNhwc) {
    for (int64_t gp = int64_t(blockIdx.x) * warps + warp; gp < total; gp += int64_t(gridDim.x) * warps) {
      float most = largest_abs(a.x + (gp % pixels) * cv.src_C + (gp / pixels) * Cg + lane,
                               lane < Cg ? (Cg - 1 - lane) / 32 + 1 : 0, 32);
#pragma unroll
      for (int d = 16; d > 0; d /= 2) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, d));
      if (lane == 0) pixel_max[gp] = most;
    }
  } else {
    __shared__ float part[kPixelMaxThreads / 32][32];
    for (int64_t base = int64_t(blockIdx.x) * 32; base < total; base += int64_t(gridDim.x) * 32) {
      const int64_t gp = base + lane;
      float most = 0.f;
      if (gp < total) {
        const int64_t pix = gp % pixels, n = pix / cv.in_plane, yx = pix % cv.in_plane;
        const TIo* src = a.x + (n * cv.src_C + (gp / pixels) * Cg + warp) * cv.in_plane + yx;
        most = largest_abs(src, warp < Cg ? (Cg - 1 - warp) / warps + 1 : 0, int64_t(warps) * cv.in_plane);
      }
      part[warp][lane] = most;
      __syncthreads();
      if (warp == 0) {
        for (int w = 1; w < warps; ++w) most = fmaxf(most, part[w][lane]);
        if (gp < total) pixel_max[gp] = most;
      }
      __syncthreads();
    }
  }
}

// channels_last where each pixel's channels of a group are whole 16-byte words (C and the channels
// per group multiples of kVec = 16 / sizeof(TIo), x 16-byte aligned: launch_pixel_max): kParts
// neighbouring lanes (a power of two) take a pixel, each loading its words part, part + kParts, ...,
// and shuffles gather their maxima. A warp's 32 lanes cover 32 / kParts pixels, a 16-byte load a
// lane, where the kernel above loads 2 or 4 bytes a lane; and each thread takes kPixelMaxUnroll such
// slots a pass, their loads issued before the first is used.
constexpr int kPixelMaxUnroll = 4;
template <typename TIo, int kParts>
__global__ void __launch_bounds__(256) winograd_tc_pixel_max_words_kernel(const ForwardArgs<float, TIo> a,
                                                                         float* __restrict__ pixel_max) {
  constexpr int kVec = 16 / sizeof(TIo);
  static_assert(kParts >= 1 && kParts <= 32 && (kParts & (kParts - 1)) == 0, "a power of two of lanes a pixel");
  grid_dependency_wait();  // x may come from the kernel before
  allow_dependents();
  const WinogradConv& cv = a.cv;
  const int Cg = cv.Cg(), words = Cg / kVec;
  const int64_t pixels = int64_t(cv.N) * cv.in_plane, total = int64_t(cv.groups) * pixels;
  // Slots (pixel, part) in whole warps, so that every lane takes part in the shuffles: a warp's 32
  // slots are one aligned run (the stride is whole warps), past `slots` all together.
  const int64_t slots = (total * kParts + 31) / 32 * 32, stride = int64_t(gridDim.x) * blockDim.x;
  auto largest = [](const uint4& w, float most) {
    const TIo* v = reinterpret_cast<const TIo*>(&w);
#pragma unroll
    for (int e = 0; e < kVec; ++e) most = fmaxf(most, fabsf(to_float(v[e])));
    return most;
  };
  for (int64_t base = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; base < slots; base += kPixelMaxUnroll * stride) {
    const uint4* src[kPixelMaxUnroll];
    uint4 w[kPixelMaxUnroll];
#pragma unroll
    for (int u = 0; u < kPixelMaxUnroll; ++u) {  // each slot's first word, all loads in flight
      const int64_t slot = base + u * stride, gp = slot / kParts;
      const bool live = slot < slots && gp < total;
      src[u] = reinterpret_cast<const uint4*>(a.x + (live ? (gp % pixels) * cv.src_C + (gp / pixels) * Cg : 0));
      w[u] = live && slot % kParts < words ? __ldg(src[u] + slot % kParts) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kPixelMaxUnroll; ++u) {
      const int64_t slot = base + u * stride;
      if (slot >= slots) break;  // (the warp together)
      float most = largest(w[u], 0.f);
      if (slot / kParts < total)
        for (int j = int(slot % kParts) + kParts; j < words; j += kParts) most = largest(__ldg(src[u] + j), most);
#pragma unroll
      for (int d = 1; d < kParts; d *= 2) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, d));
      if (slot % kParts == 0 && slot / kParts < total) pixel_max[slot / kParts] = most;
    }
  }
}

// Tile p's bound of its largest |V|: 4 x the largest |input| of its patch window (the image's padding
// excluded) over the group's channels, from the pixels' maxima of group g. Four lanes kRowLanes apart
// (lanes l, l + kRowLanes, l + 2 kRowLanes, l + 3 kRowLanes of an aligned run) share the tile: each
// reads one row of the window (`row`) and shuffles gather the four, so that the bound costs each
// thread four loads, not sixteen. Every lane of the warp calls it.
template <int kRowLanes = 1>
__device__ __forceinline__ float tile_v_bound(const WinogradConv& cv, const float* __restrict__ pixel_max, int g,
                                              int64_t p, bool live, int row) {
  float most = 0.f;
  if (live) {
    const TileCoord tc = tile_coord(cv, p);
    const int y = 2 * tc.ty + cv.col_oy + row, ix0 = 2 * tc.tx + cv.col_ox;
    const float* line = pixel_max + ((int64_t(g) * cv.N + tc.n) * cv.src_H + y) * cv.src_W;
    if (y >= 0 && y < cv.src_H) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int x = ix0 + q;
        if (x >= 0 && x < cv.src_W) most = fmaxf(most, line[x]);
      }
    }
  }
  most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, kRowLanes));
  most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, 2 * kRowLanes));
  return 4.f * most;
}

// V for the staged-V wgmma blocks (Cfg::kVStaged) of tile blocks a.p_tile0 .. a.p_tile0 + a.p_tiles:
// in float16 under each tile's scale (F16Carrier, tile_v_bound), [group][tile block][chunk][point]
// [Cfg::v_half(channel, tile)]; or, for float16 calls (Cfg::kProducts 3), split into bfloat16 hi and
// lo parts at Cfg::v_split_half (no scale: bfloat16 keeps float32's exponents, and pixel_max is
// unused). Zero outside the image, the tiles and the channels -- each chunk's run is what a block's
// stage holds (the cluster tile's blocks each take the half of its points). Input and tile
// coordinates as the fused kernels' loaders decode them (TcPatchLoader). Each thread takes a pair of
// neighbouring channels of one tile, so that it stores both halves of each 4-byte word and a warp's
// lanes (4 pairs x 8 tiles) fill whole 128-byte core matrices of a point (the split: one of the hi
// parts, one of the lo parts); and `chunks_per_thread` consecutive chunks, decoding its position, its
// patches' origin and its tile's bound once for them all. The input is read once here, where the
// fused kernels load every patch once per filter block.
template <typename Cfg, bool kNhwc, typename TIo>
__global__ void __launch_bounds__(256) winograd_tc_input_transform_kernel(const ForwardArgs<float, TIo> a,
                                                                          const float* __restrict__ pixel_max,
                                                                          int chunks_per_thread,
                                                                          uint32_t* __restrict__ v) {
  constexpr bool kSplit = Cfg::kProducts == 3;
  static_assert(kMmaProducts<TIo> == Cfg::kProducts, "the call's products");
  static_assert(Cfg::kVStaged && Cfg::kOperandBytes == (kSplit ? 4 : 2), "float16 words, or the split's halves");
  constexpr int kQuad = Cfg::kN * 4, kRun = Cfg::kK * Cfg::kN;  // a point's values in a chunk
  constexpr int kRunThreads = kRun / 2;                            // a chunk's channel pairs x tiles
  constexpr int kPointWords = Cfg::kVPoint;                        // a point's run of a chunk, in words
  // Whole warps run each pass of the loop and w % 4 is the lane % 4 (tile_v_bound's shuffles); a
  // pair's two halves are one aligned word (8 channels of a row are 8 neighbours).
  static_assert(kRunThreads % 32 == 0, "runs of whole warps");
  constexpr auto pair_half = [](int kk, int n) {
    if constexpr (kSplit)
      return Cfg::v_split_half(kk, n);
    else
      return Cfg::v_half(kk, n);
  };
  static_assert(pair_half(1, 0) == 1 && pair_half(2, 0) == 2 && pair_half(0, 1) % 2 == 0, "channel pairs as words");
  static_assert(kPointWords * 2 == (kSplit ? 2 : 1) * kRun, "a point's halves: one or two per value");
  grid_dependency_wait();  // the pixels' maxima (or, split, x) from the kernels before
  allow_dependents();
  const int chunks = a.reduction_pad / Cfg::kK, spans = (chunks + chunks_per_thread - 1) / chunks_per_thread;
  const int64_t total = int64_t(a.cv.groups) * a.p_tiles * spans * kRunThreads;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int w = int(i % kRunThreads);
    const int64_t rest = i / kRunThreads;  // (group, tile block, span of chunks)
    const int span = int(rest % spans), pt = int((rest / spans) % a.p_tiles), g = int(rest / spans / a.p_tiles);
    const int kk = 2 * ((w / kQuad) * 4 + w % 4), n = (w % kQuad) / 4;
    const int64_t p = int64_t(a.p_tile0 + pt) * Cfg::kN + n;
    const bool live = p < a.cv.tiles();
    const TcPatchLoader<TIo, kNhwc, Cfg::kK> patch(a, BlockCoord{0, pt, g}, p, live, kk);
    const TcPatchLoader<TIo, kNhwc, Cfg::kK> patch_next = patch.next_channel();
    F16Carrier::Scale scale(0);
    if constexpr (!kSplit) {
      const float bound = tile_v_bound(a.cv, pixel_max, g, p, live, w % 4);
      // One lane per tile writes the bound the epilogue scales back by.
      if (live && span == 0 && kk == 0) const_cast<float*>(a.v_max)[int64_t(g) * a.cv.tiles() + p] = bound;
      scale = F16Carrier::Scale(F16Carrier::exponent(bound));
    }
    const int first = span * chunks_per_thread, last = min(first + chunks_per_thread, chunks);
    uint32_t* dst = v + ((int64_t(g) * a.p_tiles + pt) * chunks + first) * (kWinogradPoints * kPointWords) +
                    pair_half(kk, n) / 2;
    for (int chunk = first; chunk < last; ++chunk, dst += kWinogradPoints * kPointWords) {
      TIo d[16];
      float f[16], even[16], odd[16];
      patch.load(chunk, d);
      widen_to_float(d, f);
      winograd_input_transform<float>(f, even);
      patch_next.load(chunk, d);
      widen_to_float(d, f);
      winograd_input_transform<float>(f, odd);
#pragma unroll
      for (int e = 0; e < kWinogradPoints; ++e) {
        if constexpr (kSplit) {
          uint32_t hi, lo;
          split_bf16x2(even[e], odd[e], hi, lo);
          dst[e * kPointWords] = hi;
          dst[e * kPointWords + Cfg::kVSplitLoHalves / 2] = lo;
        } else {
          dst[e * kPointWords] = F16Carrier::half2_bits(round_to_tf32(even[e]), round_to_tf32(odd[e]), scale);
        }
      }
    }
  }
}

// winograd_tc_input_transform_kernel's V, the same values at the same places, for channels_last x
// whose group channels are whole 16-byte words (C and the channels per group multiples of 8, x
// 16-byte aligned: x_reads_as_words). A thread takes one tile and channel octets
// lane / 8, + 4, + 8, ... (`quads_per_thread` of them from its span's first): per octet 16 16-byte
// loads of its patch, eight channels transformed, each point's eight values one 16-byte store (the
// split: one of the hi parts, one of the lo parts). A warp's lanes are 8 neighbouring tiles (lane %
// 8) x 4 octets, so that each store of the warp is four whole 128-byte rows of core matrices, and
// each load reads 8 pixels' 64 neighbouring bytes: the kernel above loads a 2-byte value a lane
// (each load a line per tile for 64 bytes in all), so that its loads' L1 requests, not DRAM, set its
// pace.
constexpr int kTransformOctetLanes = 4;  // lanes of a tile: the octets a pass takes
template <typename Cfg, typename TIo>
__global__ void __launch_bounds__(256, 2) winograd_tc_input_transform_words_kernel(const ForwardArgs<float, TIo> a,
                                                                                const float* __restrict__ pixel_max,
                                                                                int quads_per_thread,
                                                                                uint32_t* __restrict__ v) {
  constexpr bool kSplit = Cfg::kProducts == 3;
  static_assert(kMmaProducts<TIo> == Cfg::kProducts && sizeof(TIo) == 2, "16-bit inputs, the call's products");
  static_assert(Cfg::kVStaged && Cfg::kOperandBytes == (kSplit ? 4 : 2) && Cfg::kK == 16, "two octets a chunk");
  constexpr auto octet_half = [](int q, int n) {  // channel 8 q of a chunk, tile n
    if constexpr (kSplit)
      return Cfg::v_split_half(8 * q, n);
    else
      return Cfg::v_half(8 * q, n);
  };
  static_assert(octet_half(0, 1) == 8 && octet_half(0, 8) == 64 && octet_half(1, 0) % 8 == 0,
                "a tile's octet: 16 neighbouring bytes, 8 tiles' a 128-byte row");
  constexpr int kPointWords = Cfg::kVPoint, kTileRuns = Cfg::kN / 8;  // runs of 8 tiles a tile block
  grid_dependency_wait();  // the pixels' maxima (or, split, x) from the kernels before
  allow_dependents();
  const WinogradConv& cv = a.cv;
  const int octets = a.reduction_pad / 8, chunks = a.reduction_pad / Cfg::kK;
  const int quads = (octets + kTransformOctetLanes - 1) / kTransformOctetLanes;
  const int spans = (quads + quads_per_thread - 1) / quads_per_thread;
  const int64_t total = int64_t(cv.groups) * a.p_tiles * kTileRuns * spans * 32;
  const int64_t row_step = int64_t(cv.src_W) * cv.src_C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int lane = int(i % 32), lane_octet = lane / 8;
    const int64_t rest = i / 32;  // (group, tile block, run of 8 tiles, span)
    const int span = int(rest % spans), run = int((rest / spans) % kTileRuns);
    const int pt = int((rest / spans / kTileRuns) % a.p_tiles), g = int(rest / spans / kTileRuns / a.p_tiles);
    const int n = run * 8 + lane % 8;
    const int64_t p = int64_t(a.p_tile0 + pt) * Cfg::kN + n;
    const bool live = p < cv.tiles();
    const InputPatch origin(cv, p, live);
    const unsigned rc = origin.mask;
    const TIo* patch = a.x + origin.nhwc_offset(cv, int64_t(g) * cv.Cg());
    F16Carrier::Scale scale(0);
    if constexpr (!kSplit) {
      const float bound = tile_v_bound<8>(cv, pixel_max, g, p, live, lane_octet);
      // One lane per tile writes the bound the epilogue scales back by.
      if (live && span == 0 && lane_octet == 0) const_cast<float*>(a.v_max)[int64_t(g) * cv.tiles() + p] = bound;
      scale = F16Carrier::Scale(F16Carrier::exponent(bound));
    }
    uint32_t* block_v = v + (int64_t(g) * a.p_tiles + pt) * chunks * (kWinogradPoints * kPointWords);
    const int first = span * quads_per_thread, last = min(first + quads_per_thread, quads);
    for (int quad = first; quad < last; ++quad) {
      const int q = quad * kTransformOctetLanes + lane_octet;
      if (q >= octets) continue;  // (the last quad of a reduction of 2 mod 4 octets)
      const bool channels = q * 8 < cv.Cg();
      uint4 raw[16];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool inside = channels && ((rc >> r) & (rc >> (4 + c)) & 1u);
          raw[r * 4 + c] = inside ? __ldg(reinterpret_cast<const uint4*>(patch + r * row_step + c * cv.src_C + q * 8))
                                  : make_uint4(0, 0, 0, 0);
        }
      uint32_t out[16][4], out_lo[kSplit ? 16 : 1][4];
#pragma unroll
      for (int pair = 0; pair < 4; ++pair) {
        float f[16], even[16], odd[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) f[e] = to_float(reinterpret_cast<const TIo*>(&raw[e])[2 * pair]);
        winograd_input_transform<float>(f, even);
#pragma unroll
        for (int e = 0; e < 16; ++e) f[e] = to_float(reinterpret_cast<const TIo*>(&raw[e])[2 * pair + 1]);
        winograd_input_transform<float>(f, odd);
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          if constexpr (kSplit) {
            split_bf16x2(even[e], odd[e], out[e][pair], out_lo[e][pair]);
          } else {
            out[e][pair] = F16Carrier::half2_bits(round_to_tf32(even[e]), round_to_tf32(odd[e]), scale);
          }
        }
      }
      uint32_t* dst = block_v + int64_t(q / 2) * (kWinogradPoints * kPointWords) + octet_half(q % 2, n) / 2;
#pragma unroll
      for (int e = 0; e < kWinogradPoints; ++e) {
        *reinterpret_cast<uint4*>(dst + e * kPointWords) = make_uint4(out[e][0], out[e][1], out[e][2], out[e][3]);
        if constexpr (kSplit)
          *reinterpret_cast<uint4*>(dst + e * kPointWords + Cfg::kVSplitLoHalves / 2) =
              make_uint4(out_lo[e][0], out_lo[e][1], out_lo[e][2], out_lo[e][3]);
      }
    }
  }
}

// kNhwc: x and y are channels_last (the loaders' addressing and the NHWC epilogue); V's layout is
// the same in both. TIo: the type of x, bias and y. Persistent (WinogradWgmmaTile): launched with at
// most one block per SM, block blockIdx.x computes output blocks blockIdx.x, + gridDim.x, ...
// kUApart: the stages' placement (WinogradWgmmaStages) -- NCHW blocks always, channels_last ones of
// few chunks (the launcher's choice).
template <typename Cfg, bool kNhwc, typename TIo, bool kUApart = !kNhwc>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_wgmma_fused_forward_kernel(const ForwardArgs<float, TIo> a) {
  static_assert(Cfg::kPersistent, "the output blocks walked by a grid of at most one block per SM");
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kProducts = kMmaProducts<TIo>;
  using Stages = WinogradWgmmaStages<kUApart, kProducts>;
  using Mmas = WgmmaPointMmas<Stages>;

  // This thread's (channel, tile) of a chunk, and its patches in output block bc.
  const int ch = Mmas::template loader_channel<kNhwc>(warp, lane), tl = Mmas::template loader_tile<kNhwc>(warp, lane);
  auto patch_of = [&](const BlockCoord& bc) {
    const int64_t p = int64_t(bc.pt) * Cfg::kN + tl;
    return TcPatchLoader<TIo, kNhwc, Cfg::kK>(a, bc, p, p < cv.tiles(), ch);
  };
  const int v_word = kProducts == 1 ? Cfg::v_word(ch, tl) : Cfg::v_split_half(ch, tl);
  auto store_v = [&](const TIo (&d)[16], float* v_tile) {
    float f[16], v[16];
    widen_to_float(d, f);
    winograd_input_transform<float>(f, v);
    if constexpr (kProducts == 1) {
#pragma unroll
      for (int e = 0; e < 16; ++e) v_tile[e * Cfg::kVPoint + v_word] = __uint_as_float(tf32_bits_for_mma(v[e]));
    } else {
      // hi and lo in bfloat16 (split_bf16x2), two points per split.
      uint16_t* h = reinterpret_cast<uint16_t*>(v_tile) + v_word;
#pragma unroll
      for (int e = 0; e < 16; e += 2) {
        uint32_t hi, lo;
        split_bf16x2(v[e], v[e + 1], hi, lo);
        h[2 * e * Cfg::kVPoint] = uint16_t(hi);
        h[2 * (e + 1) * Cfg::kVPoint] = uint16_t(hi >> 16);
        h[2 * e * Cfg::kVPoint + Cfg::kVSplitLoHalves] = uint16_t(lo);
        h[2 * (e + 1) * Cfg::kVPoint + Cfg::kVSplitLoHalves] = uint16_t(lo >> 16);
      }
    }
  };

  typename Mmas::Accumulators acc;
  const Mmas mmas(smem);
  const int chunks = a.reduction_pad / Cfg::kK;
  const int blocks = a.k_tiles * a.p_tiles * cv.groups;  // check_grid: within int

  // Output block bc's U chunks. NCHW blocks take them by bulk copies: their patch loads keep the L1
  // busy (docs/winograd.md), and the copy engine takes U's requests off it. channels_last blocks,
  // whose patch loads cost the L1 less, were slower with the bulk copies and keep the threads' copies.
  constexpr bool kUBulk = !kNhwc;
  using UCopies = std::conditional_t<kUBulk, WgmmaUBulkCopies<Stages>, WgmmaUThreadCopies<Stages>>;
  typename UCopies::Barriers u_bars(smem);
  auto u_chunks_of = [&](const BlockCoord& bc) { return UCopies::of_block(a, bc, smem, u_bars); };

  // The walk: where U's stages outlive the epilogue, a block whose U is that of the block before it
  // (the same group and filter block) runs its chunks in the other order, starting with the two whose
  // U the stages still hold.
  auto order_after = [&](const WgmmaChunkOrder& before, const BlockCoord& from, const BlockCoord& to) {
    const bool same_u = Stages::kUApart && from.g == to.g && from.kt == to.kt;
    return same_u ? WgmmaChunkOrder{chunks, !before.reversed, chunks < 2 ? chunks : 2} : WgmmaChunkOrder{chunks};
  };

  // An output block's first chunk: its U into its stage (unless held there), the patches into d
  // (stored as V once they have arrived, at the start of the block's reduction). The block's patch
  // loader is decoded here once and kept for its other chunks.
  TIo d[16];
  auto begin_block = [&](const BlockCoord& bc, const WgmmaChunkOrder& order) {
    if (order.held == 0) u_chunks_of(bc).fetch(order.chunk(0), order.chunk(0) & 1);
    const auto patch = patch_of(bc);
    patch.load(order.chunk(0), d);
    return patch;
  };
  BlockCoord bc = block_coord(a.k_tiles_div, a.p_tiles_div, blockIdx.x);  // the grid has at most `blocks` blocks
  WgmmaChunkOrder order{chunks};
  auto patch = begin_block(bc, order);
  for (int b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t p0 = int64_t(bc.pt) * Cfg::kN;
    mmas.reduce_loaded(
        acc, smem, order, u_chunks_of(bc), [&](float* v) { store_v(d, v); }, [&](int chunk) { patch.load(chunk, d); });
    wgmma_wait<0>();
    __syncthreads();  // every warpgroup's MMAs are done: both stages are free
    const bool more = b + int(gridDim.x) < blocks;
    const BlockCoord next = block_coord(a.k_tiles_div, a.p_tiles_div, more ? b + int(gridDim.x) : b);
    const WgmmaChunkOrder next_order = order_after(order, bc, next);
    if (more) patch = begin_block(next, next_order);
    // The barrier above frees the stages the epilogue takes (Stages): the next block's first chunk
    // fills U's stage 0 only, or finds its U held.
    auto stage = [&](int, float* m) { stage_wgmma_columns<Cfg, kNhwc>(acc, m, warp, lane); };
    float* m = smem + Stages::kEpilogueOffset;
    if constexpr (kNhwc)
      tc_epilogue_nhwc<Cfg, Cfg::kStagedValues, /*kStagesFree=*/true>(stage, m, a, bc, p0, warp, lane);
    else
      tc_epilogue_nchw<Cfg, Cfg::kStagedValues, /*kStagesFree=*/true>(stage, m, a, bc, p0, warp, lane);
    if (Stages::kUApart && more) __syncthreads();  // the epilogue's reads end before the next block's V stores
    bc = next;
    order = next_order;
  }
}

// The cluster block: the 16 points of a 64 filters x 64 tiles output block split over a cluster of
// two blocks, each owning 8 points (the point rows 2 * rank and 2 * rank + 1) for all 64 x 64. A
// block then streams only its points' U (half of each chunk of the cache), and each MMA is an
// m64n64k8 that reads 64 rows of V per 64 rows of U where the single block's m64n32k8 read 32: per
// chunk the shared-memory traffic (U and V written, then read by the MMAs) is two thirds and the U
// read from L2 half of WinogradWgmmaTile's for the same MMA work. A thread loads 3 of a patch's 4
// rows (those its point rows need) for two tiles per chunk. The output transform is linear in M, so
// each block applies it to its own two point rows and the partial outputs of the partner's 32 tiles
// go to the partner's shared memory once, after the reduction.
// kVStaged: V comes from the staged workspace (winograd_tc_input_transform_kernel) in this layout
// (WinogradWgmmaClusterVStagedLayout), each block copying its points' half of a chunk
// (WinogradWgmmaClusterBulkConfig), instead of from the block's own patch loads.
// kOperandBytes: U and V as TF32 words (4) or as float16 (2, staged V only): the TF32-rounded values
// under power-of-two scales (F16Carrier), half the bytes per chunk, one m64n64k16 step where TF32
// takes two m64n64k8. Core matrices stay 8 rows x 16 bytes: 8 channels of float16 where TF32 holds 4.
// (float16 calls' staged V takes the TF32 words' space for its split halves:
// WinogradWgmmaClusterVStagedSplitLayout.)
template <bool kVStaged_, int kOperandBytes_ = 4>
struct WinogradWgmmaClusterConfig {
  using Tile = WinogradF2x2;
  static constexpr bool kWgmma = true, kVStaged = kVStaged_;
  static constexpr int kOperandBytes = kOperandBytes_;
  static constexpr int kProducts = 1;  // one product per point product (WgmmaPointMmas::run)
  // Filter blocks and tile blocks per cluster (WinogradWgmmaClusterBulkConfig).
  static constexpr int kVShare = 1, kUShare = 1;
  static constexpr int kCluster = 2;
  // The partner's partial outputs counted on an mbarrier; the clusters walking their tile blocks
  // (WinogradWgmmaClusterBulkConfig).
  static constexpr bool kAsyncPartials = false, kWalks = false;
  static constexpr int kM = 64, kN = 64, kK = 16, kSteps = kK * kOperandBytes / 32;
  // Core matrices (16 bytes of channels) along a chunk's K.
  static constexpr int kKGroups = kK * kOperandBytes / 16;
  static_assert(kOperandBytes == 4 || (kOperandBytes == 2 && kVStaged), "float16 words for staged V only");
  static constexpr int kThreads = 512, kMinBlocks = 1;
  static constexpr int kPoints = kWinogradPoints / kCluster;  // per block: point rows 2 * rank, 2 * rank + 1
  static constexpr int kWarpgroups = kThreads / 128, kPointsPerGroup = kPoints / kWarpgroups;
  // Warpgroup g's points: the block's kPointsPerGroup * g on, consecutive (WgmmaPointMmas), of the
  // block's own rows (the point's index in the block's kPoints).
  static constexpr int kPointStep = 1;
  static __host__ __device__ constexpr int first_point(int group) { return group * kPointsPerGroup; }
  static constexpr int kPatchRows = 3;  // the input rows two adjacent point rows of B^T d read
  static constexpr int kTilesPerThread = kN * kK / kThreads;
  // V's core-matrix columns (channel quads, or octets of float16) kN * 4 + 8 words apart, as in
  // WinogradWgmmaTile (the NHWC loaders' banks), or unpadded where V is staged.
  static constexpr int kVQuad = kN * 4 + (kVStaged ? 0 : 8), kVPoint = kKGroups * kVQuad;
  static constexpr int kUPointFloats = kKGroups * kM * 4;
  // The cache's chunk: WinogradWgmmaTile's (TF32), or its float16 counterpart.
  static constexpr int kUChunkFloats = kWinogradPoints * kUPointFloats;
  static constexpr int kUFloats = kPoints * kUPointFloats, kVFloats = kPoints * kVPoint;
  static constexpr int kVChunkFloats = kWinogradPoints * kVPoint;  // the staged V's chunk: both blocks' points
  static constexpr int kStage = kUFloats + kVFloats;
  // Stage s: its U, then its V (WgmmaPointMmas), in floats from the start of shared memory.
  static __host__ __device__ constexpr int u_stage_offset(int s) { return s * kStage; }
  static __host__ __device__ constexpr int v_stage_offset(int s) { return s * kStage + kUFloats; }
  // The epilogue: the block's M as [point][filter][tile] (rows of kLdV, as
  // stage_wgmma_points names them) or, NHWC, [point][tile][filter]
  // (rows of kLdMt); then the partner's partial outputs, [filter][tile] or [tile][filter] of the
  // block's kN / 2 tiles, 4 values each, in space of their own (the partner may write them while this
  // block still reduces).
  static constexpr int kHalfTiles = kN / kCluster;
  static constexpr int kLdV = kN + 8, kLdMt = kM + 4;
  static constexpr int kMFloats = kPoints * (kM * kLdV > kN * kLdMt ? kM * kLdV : kN * kLdMt);
  static constexpr int kPartialOffset = 2 * kStage > kMFloats ? 2 * kStage : kMFloats;
  static constexpr int kPartialFloats = kM * kHalfTiles * 4;
  static constexpr size_t kForwardSmemBytes = size_t(kPartialOffset + kPartialFloats) * sizeof(float);
  static_assert(kK == 16 && kThreads == 512 && kTilesPerThread == 2 && kHalfTiles == 32, "the loaders' lanes");
  static_assert(kPointsPerGroup == 2 && kUFloats % (4 * kThreads) == 0, "even splits");

  // U is WinogradWgmmaTile's cache (its u_word), or in float16 its u_half: this block's points are
  // one half of each chunk.
  static __host__ __device__ constexpr int v_word(int kk, int n) {
    return WinogradWgmmaTile::operand_word(kk, n, kVQuad);
  }
  // The float16 operands' element of (channel kk of a chunk, row m) within a point: core matrices of
  // 8 rows x 8 channels, the next 8 channels `rows` x 8 halves on, the next 8 rows 64 halves on.
  static __host__ __device__ constexpr int operand_half(int kk, int m, int rows) {
    return (kk / 8) * rows * 8 + (m / 8) * 64 + (m % 8) * 8 + kk % 8;
  }
  static __host__ __device__ constexpr int u_half(int kk, int m) { return operand_half(kk, m, kM); }
  static __host__ __device__ constexpr int v_half(int kk, int n) { return operand_half(kk, n, kN); }
};
using WinogradWgmmaClusterTile = WinogradWgmmaClusterConfig<false>;
// The staged-V tiles' layout: float16 words (WinogradWgmmaClusterBulkConfig).
using WinogradWgmmaClusterVStagedLayout = WinogradWgmmaClusterConfig<true, 2>;
// float16 calls' staged V: split into bfloat16 hi and lo parts in the TF32 words' space
// (WinogradWgmmaTile::split_half with V's unpadded quads), three bfloat16 products per point
// product (WgmmaPointMmas::run), twice the bytes of the float16 words; U is the single block's split
// cache (its chunk holds all 16 points, u_split_half), no scales.
struct WinogradWgmmaClusterVStagedSplitLayout : WinogradWgmmaClusterConfig<true, 4> {
  static constexpr int kProducts = 3;
  static __host__ __device__ constexpr int v_split_half(int kk, int n) {
    return WinogradWgmmaTile::split_half(kk, n, kVQuad);
  }
  static constexpr int kVSplitLoHalves = 4 * kVQuad;
};

// The staged-V cluster with its operands moved by bulk copies through kStages stages: one thread of
// a block issues a chunk's copies (U's run and V's), counted on the stage's mbarrier, kStages - 1
// chunks ahead of the MMAs, and the warpgroups free a stage by arriving on a second mbarrier, so that no
// block barrier remains in the reduction. Larger clusters share operands by multicast: the cluster
// holds the point pairs of kVShare filter blocks x kUShare tile blocks (ClusterPlace); the blocks
// of one point half and tile block read the same V chunks, those of one point half and filter block
// the same U chunks, and each block copies its 1 / kVShare of V and 1 / kUShare of U to all the blocks
// that read them, so that V crosses from L2 once per kVShare filter blocks and U once per kUShare
// tile blocks.
// Layout: WinogradWgmmaClusterVStagedLayout (float16 words) or WinogradWgmmaClusterVStagedSplitLayout
// (float16 calls' split).
template <int kVShare_, int kUShare_ = 1, typename Layout = WinogradWgmmaClusterVStagedLayout>
struct WinogradWgmmaClusterBulkConfig : Layout {
  using VLayout = Layout;
  using Layout::kStage, Layout::kMFloats, Layout::kPartialFloats, Layout::kVFloats, Layout::kUFloats;
  static constexpr int kVShare = kVShare_, kUShare = kUShare_;
  static constexpr int kCluster = 2 * kVShare * kUShare;
  // Four stages of float16 words (32 KB each) fit in the epilogue's M, which shares their space, so
  // the fourth costs no shared memory and copies three chunks ahead; float16's split (64 KB a stage)
  // holds three.
  static constexpr int kStages = Layout::kOperandBytes == 2 ? 4 : 3;
  static_assert(Layout::kOperandBytes != 2 || kStages * kStage <= kMFloats, "the float16 words' stages within M");
  static constexpr int kPartialOffset = kStages * kStage > kMFloats ? kStages * kStage : kMFloats;
  // Then the mbarriers: a stage's copies landed (kStages), its readers done (kStages), and the
  // partner's partial outputs landed (kPartialsBarrier, two-block clusters: kAsyncPartials).
  static constexpr int kBarrierOffset = kPartialOffset + kPartialFloats;  // in floats, 8-byte aligned
  static constexpr int kPartialsBarrier = 2 * kStages;
  static constexpr bool kAsyncPartials = kCluster == 2;
  // Two-block clusters of float16 words walk their tile blocks (persistent, a grid of the clusters
  // that fit): the next block's first chunks are copied while this one's epilogue waits for its
  // partner, and the partner's partial outputs of the next block wait until this block has read the
  // last ones (kPartialsFreeBarrier, the partner's arrival). float16's split, whose chunks are twice
  // the bytes, gained nothing from the walk (docs/winograd.md) and launches a block per tile block.
  static constexpr bool kWalks = kCluster == 2 && Layout::kOperandBytes == 2;
  static constexpr int kPartialsFreeBarrier = 2 * kStages + 1;
  static constexpr size_t kForwardSmemBytes = size_t(kBarrierOffset) * sizeof(float) + (2 * kStages + 2) * sizeof(uint64_t);
  static_assert(kBarrierOffset % 2 == 0 && (kVFloats / kVShare) % 4 == 0 && (kUFloats / kUShare) % 4 == 0,
                "aligned barriers, 16-byte operand pieces");
  static_assert(kCluster <= 8, "a portable cluster");
};
using WinogradWgmmaClusterVBulkTile = WinogradWgmmaClusterBulkConfig<1>;
using WinogradWgmmaClusterUVMulticastTile = WinogradWgmmaClusterBulkConfig<2, 2>;
// float16 calls' tf32-wgmma-cluster-vbulk: the same blocks and stages on split operands.
using WinogradWgmmaClusterVBulkSplitTile = WinogradWgmmaClusterBulkConfig<1, 1, WinogradWgmmaClusterVStagedSplitLayout>;
static_assert(WinogradWgmmaClusterVBulkSplitTile::kForwardSmemBytes <= 227 * 1024, "within an sm_90 block's shared memory");

// A block's place in its cluster (cluster rank half + 2 * (fshare + kVShare * tshare)): its point half,
// and which of the cluster's filter blocks and tile blocks it computes. Clusters of one filter block
// and tile block (kVShare and kUShare 1: two blocks, or F(4x4)'s three) are the rank as the point
// part.
template <typename Cfg>
struct ClusterPlace {
  int half, fshare, tshare;
  __device__ __forceinline__ explicit ClusterPlace(int cluster_rank)
      : half(Cfg::kVShare * Cfg::kUShare > 1 ? cluster_rank % 2 : cluster_rank),
        fshare(Cfg::kVShare > 1 ? (cluster_rank / 2) % Cfg::kVShare : 0),
        tshare(Cfg::kUShare > 1 ? cluster_rank / (2 * Cfg::kVShare) : 0) {}
  __device__ __forceinline__ unsigned rank_of(int f, int t) const { return unsigned(half + 2 * (f + Cfg::kVShare * t)); }
};

// The blocks of the cluster that read one piece of an operand: the ranks of `mask`. A piece for them
// all is one multicast copy; a block's own piece alone, one bulk copy.
template <int kShare>
__device__ __forceinline__ void copy_piece(float* dst, const float* src, unsigned bytes, uint64_t* bar, uint16_t mask) {
  if constexpr (kShare == 1)
    bulk_copy_to_shared(dst, src, bytes, bar);
  else
    bulk_copy_to_shared_multicast(dst, src, bytes, bar, mask);
}

// The copies of a staged-V block's operands into its stages. Stage s's copies of the block's chunk g
// (counted over the tile blocks a walking block takes, kWalks) count on full[s] (phase g / kStages):
// the thread that copies the chunk expects all of U's and V's bytes, whichever blocks copy their
// pieces. A warpgroup, once its MMAs of chunk g are done, arrives on empty[g % kStages] of every
// block that copies into it (those of its point half that share its filter block or its tile block,
// itself included: 4 * (kUShare + kVShare - 1) arrivals per phase), and the thread that refills the
// stage in those same blocks waits for that phase first.
template <typename Cfg>
struct BulkStages {
  static constexpr int kS = Cfg::kStages, kVPiece = Cfg::kVFloats / Cfg::kVShare, kUPiece = Cfg::kUFloats / Cfg::kUShare;
  static constexpr unsigned kUBytes = Cfg::kUFloats * sizeof(float), kVBytes = Cfg::kVFloats * sizeof(float);
  float* smem;
  uint64_t* full;
  uint64_t* empty;
  ClusterPlace<Cfg> place;
  uint16_t v_readers = 0, u_readers = 0;  // the blocks that share this block's V chunks; its U chunks

  __device__ __forceinline__ BulkStages(float* smem_, uint64_t* bars, const ClusterPlace<Cfg>& place_)
      : smem(smem_), full(bars), empty(bars + kS), place(place_) {
#pragma unroll
    for (int j = 0; j < Cfg::kVShare; ++j) v_readers |= uint16_t(1u << place.rank_of(j, place.tshare));
#pragma unroll
    for (int j = 0; j < Cfg::kUShare; ++j) u_readers |= uint16_t(1u << place.rank_of(place.fshare, j));
  }
  // Chunk `chunk` of the runs from u_block and v_block into the stage of the block's chunk g.
  __device__ __forceinline__ void fetch(const float* u_block, const float* v_block, int chunk, int g) const {
    using Mmas = WgmmaPointMmas<Cfg>;
    const int s = g % kS;
    mbarrier_arrive_expect_tx(&full[s], kUBytes + kVBytes);  // every piece of U and V
    copy_piece<Cfg::kUShare>(Mmas::stage_u(smem, s) + place.tshare * kUPiece,
                             u_block + int64_t(chunk) * Cfg::kUChunkFloats + place.tshare * kUPiece,
                             kUPiece * sizeof(float), &full[s], u_readers);
    copy_piece<Cfg::kVShare>(Mmas::stage_v(smem, s) + place.fshare * kVPiece,
                             v_block + int64_t(chunk) * Cfg::kVChunkFloats + place.fshare * kVPiece,
                             kVPiece * sizeof(float), &full[s], v_readers);
  }
  // The same once the stage's chunk g - kS has been read (g < kS: parity 1 of a fresh mbarrier,
  // which has completed).
  __device__ __forceinline__ void refill(const float* u_block, const float* v_block, int chunk, int g) const {
    mbarrier_wait(&empty[g % kS], unsigned(g / kS - 1) & 1u);
    fetch(u_block, v_block, chunk, g);
  }
  // This warpgroup's MMAs of chunk g are done: its stage may be refilled (one thread a warpgroup).
  __device__ __forceinline__ void release(int g) const {
    uint64_t* freed = &empty[g % kS];
#pragma unroll
    for (int j = 0; j < Cfg::kUShare; ++j) mbarrier_arrive_cluster(freed, place.rank_of(place.fshare, j));
#pragma unroll
    for (int j = 0; j < Cfg::kVShare; ++j)
      if (j != place.fshare) mbarrier_arrive_cluster(freed, place.rank_of(j, place.tshare));
  }
};

// The reduction of a staged-V block (Cfg::kVStaged: a WinogradWgmmaClusterBulkConfig) at `place` in
// its cluster; u_block and v_block: chunk 0 of the block's U and V runs, its chunks the block's
// `first` on (BulkStages). The producer (thread 0) copies each chunk kStages - 1 chunks ahead of the
// MMAs -- the first ones itself where `prologue`, else the walk's tile block before copied them --
// and waits for the other blocks' warpgroups, so its warp reconverges before the next chunk's MMAs,
// which the warpgroup issues together. `release_last`: the last chunk's stage is released too, once
// the MMAs are done (a walking block refills it for its next tile block).
template <typename Cfg>
__device__ __forceinline__ void reduce_bulk(const WgmmaPointMmas<Cfg>& mmas,
                                            typename WgmmaPointMmas<Cfg>::Accumulators& acc, const float* u_block,
                                            const float* v_block, const BulkStages<Cfg>& stages, int chunks,
                                            int first = 0, bool prologue = true, bool release_last = false) {
  constexpr int kS = Cfg::kStages;
  const bool producer = threadIdx.x == 0;
  if (producer && prologue)
    for (int c = 0; c < kS - 1 && c < chunks; ++c) stages.fetch(u_block, v_block, c, first + c);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int g = first + chunk;
    mbarrier_wait(&stages.full[g % kS], unsigned(g / kS) & 1u);
    mmas.run(acc, g % kS);
    wgmma_wait<1>();  // this warpgroup's MMAs of chunk - 1 are done
    if (chunk > 0 && threadIdx.x % 128 == 0) stages.release(g - 1);
    const int next = chunk + kS - 1;
    if (producer && next < chunks) stages.refill(u_block, v_block, next, first + next);
    __syncwarp();
  }
  if (release_last) {
    wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) stages.release(first + chunks - 1);
  }
}

// The block's two rows of B^T d B (points 4 * i + j of row 2 * rank + i) from patch rows rank ..
// rank + 2: B^T's rows 0 and 1 read input rows 0-2, rows 2 and 3 input rows 1-3.
__device__ __forceinline__ void winograd_input_transform_rows(const float (&d)[12], int rank, float (&v)[8]) {
  float t[2][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float q0 = d[j], q1 = d[4 + j], q2 = d[8 + j];
    t[0][j] = rank == 0 ? q0 - q2 : q1 - q0;
    t[1][j] = rank == 0 ? q1 + q2 : q0 - q2;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float x0 = t[i][0], x1 = t[i][1], x2 = t[i][2], x3 = t[i][3];
    v[i * 4 + 0] = x0 - x2;
    v[i * 4 + 1] = x1 + x2;
    v[i * 4 + 2] = x2 - x1;
    v[i * 4 + 3] = x1 - x3;
  }
}

// The output transform A^T m A restricted to the block's point rows 2 * rank and 2 * rank + 1 (m: 8
// points): the two blocks' results add up to the whole transform. Only the first step (A^T m) sees
// the split; the second is winograd_output_rows.
__device__ __forceinline__ void winograd_output_transform_rows(const float (&m)[8], int rank, float (&y)[4]) {
  float t[8];  // the rows' part of A^T m, 2 x 4 row-major
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float a = m[j], b = m[4 + j];
    t[j] = rank == 0 ? a + b : a;
    t[4 + j] = rank == 0 ? b : -a - b;
  }
  winograd_output_rows<float>(t, y);
}

// The cluster kernel (WinogradWgmmaClusterTile and the bulk configs), launched in clusters of
// Cfg::kCluster consecutive blocks (ClusterPlace). kNhwc: x and y are channels_last. TIo: the type
// of x, bias and y.
template <typename Cfg, bool kNhwc, typename TIo>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    winograd_wgmma_cluster_forward_kernel(const ForwardArgs<float, TIo> a) {
  static_assert(kMmaProducts<TIo> == Cfg::kProducts && (Cfg::kProducts == 1 || Cfg::kVStaged),
                "the call's products: three only on staged split V");
  extern __shared__ __align__(16) float smem[];
  const WinogradConv& cv = a.cv;
  const int cluster_rank = int(cluster_block_rank());
  const ClusterPlace<Cfg> place(cluster_rank);
  const int rank = place.half;
  uint64_t* bars = nullptr;
  if constexpr (Cfg::kVStaged) {
    bars = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
    if (threadIdx.x == 0) {
      for (int s = 0; s < Cfg::kStages; ++s) {
        mbarrier_init(&bars[s], 1);
        mbarrier_init(&bars[Cfg::kStages + s], Cfg::kWarpgroups * (Cfg::kUShare + Cfg::kVShare - 1));
      }
      mbarrier_init(&bars[Cfg::kPartialsBarrier], 1);
      if constexpr (Cfg::kWalks) mbarrier_init(&bars[Cfg::kPartialsFreeBarrier], 1);
      mbarrier_init_fence_cluster();
    }
    // Every block's mbarriers exist before any copy or arrival reaches them: the fence publishes
    // them, so the arrival itself can be relaxed (a release would wait on a GPU-wide memory barrier).
    cluster_arrive_relaxed();
    cluster_wait_acquire();
    grid_dependency_wait();  // V and its tiles' bounds from the transform kernel before
  }
  cluster_arrive_relaxed();  // this block has started: waited for before the partner's shared memory is written
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  using Mmas = WgmmaPointMmas<Cfg>;
  typename Mmas::Accumulators acc;
  const Mmas mmas(smem);
  const int chunks = a.reduction_pad / Cfg::kK;

  // Epilogue of block bc from the accumulators: the walk's `iter`-th tile block of this cluster,
  // the `last` one; prefetch() (walking blocks) copies the next one's first chunks once M is read.
  auto epilogue = [&](const BlockCoord& bc, int iter, bool last, auto&& prefetch) {
    const int64_t p0 = int64_t(a.p_tile0 + bc.pt) * Cfg::kN;
    wgmma_wait<0>();

    // Epilogue. M of the block's 8 points into shared memory (the stages are free once every
    // warpgroup's MMAs are done).
    constexpr int kLd = kNhwc ? Cfg::kLdMt : Cfg::kLdV;
    __syncthreads();
    stage_wgmma_points<Cfg, kNhwc>(acc, smem, warp, lane);
    __syncthreads();
    // The partial output of (filter f, tile n of the block) over this block's points.
    auto partial = [&](int f, int n) {
      float m[8], y[4];
#pragma unroll
      for (int e = 0; e < 8; ++e) m[e] = kNhwc ? smem[(e * Cfg::kN + n) * kLd + f] : smem[(e * Cfg::kM + f) * kLd + n];
      winograd_output_transform_rows(m, rank, y);
      return make_float4(y[0], y[1], y[2], y[3]);
    };
    // A thread's (filter, tile) pairs of a half (kHalfTiles tiles): NCHW, lanes along the tiles and
    // warps over the filters; NHWC, lanes along the filters and warps over the tiles. Pair q's slot in
    // the partial outputs is the same in both blocks.
    constexpr int kPairs = Cfg::kM * Cfg::kHalfTiles / Cfg::kThreads;  // 4
    auto pair_filter = [&](int q) { return kNhwc ? lane + 32 * (q % 2) : warp + 16 * q; };
    auto pair_tile = [&](int q) { return kNhwc ? warp + 16 * (q / 2) : lane; };  // within the half
    auto pair_slot = [&](int q) {
      return kNhwc ? pair_tile(q) * Cfg::kM + pair_filter(q) : pair_filter(q) * Cfg::kHalfTiles + pair_tile(q);
    };
    // The partner's partial outputs: with V staged in two-block clusters, stores counted on the
    // receiver's mbarrier (kAsyncPartials), which it waits on; otherwise stores ordered by the cluster
    // barrier, which also keeps every block of a larger cluster alive until the others' arrivals on
    // its stages are over.
    constexpr bool kAsyncPartials = Cfg::kAsyncPartials;
    float* partials = smem + Cfg::kPartialOffset;
    if (iter == 0) cluster_wait_acquire();  // the partner has started: its partial outputs' space may be written
    // A walking block's partner has read this block's partial outputs of the tile block before.
    if constexpr (Cfg::kWalks)
      if (iter > 0) mbarrier_wait(bars + Cfg::kPartialsFreeBarrier, unsigned(iter - 1) & 1u);
    {
      const int other = rank ^ 1;
      const unsigned partner = unsigned(cluster_rank ^ 1), remote = cluster_shared_address(partials, partner);
      // The receiver's mbarrier, mapped once (mapa is volatile asm: the compiler would not hoist it).
      [[maybe_unused]] unsigned remote_bar = 0;
      if constexpr (kAsyncPartials) remote_bar = cluster_shared_address(bars + Cfg::kPartialsBarrier, partner);
#pragma unroll
      for (int q = 0; q < kPairs; ++q) {
        const float4 v = partial(pair_filter(q), other * Cfg::kHalfTiles + pair_tile(q));
        if constexpr (kAsyncPartials)
          store_cluster_shared_async(remote + 16 * pair_slot(q), v, remote_bar);
        else
          store_cluster_shared(remote + 16 * pair_slot(q), v);
      }
    }
    if constexpr (kAsyncPartials) {
      if (threadIdx.x == 0) mbarrier_arrive_expect_tx(bars + Cfg::kPartialsBarrier, Cfg::kPartialFloats * sizeof(float));
    } else {
      cluster_arrive_release();
    }

    // A thread's tiles among its pairs: NCHW one (its lane), NHWC two (warps w and w + 16). Their
    // coordinates and output offsets are decoded once, before the wait, and each pair adds its
    // filter's offset.
    constexpr int kOwnTiles = kNhwc ? 2 : 1;
    auto tile_slot = [](int q) { return kNhwc ? q / 2 : 0; };
    const int Kg = cv.Kg();
    const int64_t plane = int64_t(cv.out_H) * cv.out_W;
    int64_t tile_offset[kOwnTiles];
    bool tile_live[kOwnTiles], right[kOwnTiles], below[kOwnTiles];
#pragma unroll
    for (int t = 0; t < kOwnTiles; ++t) {
      const int64_t p = p0 + rank * Cfg::kHalfTiles + pair_tile(kNhwc ? 2 * t : 0);
      tile_live[t] = p < cv.tiles() && !(Cfg::kUShare > 1 && bc.pt >= a.p_tiles);
      const TileCoord ot = tile_coord(cv, tile_live[t] ? p : 0);
      const int oy = 2 * ot.ty, ox = 2 * ot.tx;
      right[t] = ox + 1 < cv.out_W, below[t] = oy + 1 < cv.out_H;
      tile_offset[t] = kNhwc ? ((int64_t(ot.n) * cv.out_H + oy) * cv.out_W + ox) * cv.out_C + int64_t(bc.g) * Kg
                             : int64_t(ot.n) * cv.out_C * plane + int64_t(oy) * cv.out_W + ox + int64_t(bc.g) * Kg * plane;
    }
    // While the partner's partial outputs come: this block's own, each pair's bias and (float16 words)
    // the largest |U| and |V| whose scales M comes back from, so that their loads' latency passes in
    // the wait.
    bool live[kPairs];
    float4 mine[kPairs];
    float bias[kPairs];
    [[maybe_unused]] float u_max[kPairs], v_max[kPairs];  // (float16 words)
#pragma unroll
    for (int q = 0; q < kPairs; ++q) {
      const int f = pair_filter(q), n = rank * Cfg::kHalfTiles + pair_tile(q);
      const int k = bc.kt * Cfg::kM + f;
      live[q] = tile_live[tile_slot(q)] && k < Kg;
      mine[q] = partial(f, n);
      bias[q] = live[q] && a.bias ? to_float(a.bias[bc.g * Kg + k]) : 0.f;
      if constexpr (Cfg::kOperandBytes == 2) {
        u_max[q] = live[q] ? a.u_max[int64_t(bc.g) * a.outputs_pad + k] : 0.f;
        v_max[q] = live[q] ? a.v_max[int64_t(bc.g) * cv.tiles() + p0 + n] : 0.f;
      }
    }
    // M is read: a walking block copies the next tile block's first chunks into the stages while the
    // partner's partial outputs come.
    if constexpr (Cfg::kWalks) {
      __syncthreads();
      prefetch();
    }
    // The partner's partial outputs of this block's tiles have landed.
    if constexpr (kAsyncPartials)
      mbarrier_wait(bars + Cfg::kPartialsBarrier, unsigned(iter) & 1u);
    else
      cluster_wait_acquire();

    const int64_t col = kNhwc ? cv.out_C : 1, row = col * cv.out_W;
#pragma unroll
    for (int q = 0; q < kPairs; ++q) {
      if (!live[q]) continue;
      const int t = tile_slot(q), k = bc.kt * Cfg::kM + pair_filter(q);
      const float4 theirs = *reinterpret_cast<const float4*>(partials + 4 * pair_slot(q));
      float out[4] = {mine[q].x + theirs.x, mine[q].y + theirs.y, mine[q].z + theirs.z, mine[q].w + theirs.w};
      if constexpr (Cfg::kOperandBytes == 2) {  // M back from the filter's and the tile's scales (F16Carrier)
        const F16Carrier::Unscale by_u(F16Carrier::exponent(u_max[q])), by_v(F16Carrier::exponent(v_max[q]));
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = by_v(by_u(out[e]));
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) out[e] += bias[q];
      TIo* dst = a.y + tile_offset[t] + (kNhwc ? int64_t(k) : int64_t(k) * plane);
      if (!kNhwc && right[t] && cv.out_W % 2 == 0) {  // each row of the tile one store
        store_pair(dst, out[0], out[1]);
        if (below[t]) store_pair(dst + row, out[2], out[3]);
        continue;
      }
      dst[0] = from_float<TIo>(out[0]);
      if (right[t]) dst[col] = from_float<TIo>(out[1]);
      if (below[t]) {
        dst[row] = from_float<TIo>(out[2]);
        if (right[t]) dst[row + col] = from_float<TIo>(out[3]);
      }
    }
    // Every thread has read the partner's partial outputs: it may send those of its next tile block.
    if constexpr (Cfg::kWalks) {
      if (!last) {
        __syncthreads();
        if (threadIdx.x == 0) mbarrier_arrive_cluster(bars + Cfg::kPartialsFreeBarrier, unsigned(cluster_rank ^ 1));
      }
    }

  };

  // Staged V: chunk 0 of this block's point half of the U and V runs of (group g, filter block kt,
  // tile block pt).
  auto runs = [&](int g, int kt, int pt, const float*& u_block, const float*& v_block) {
    u_block = TcUFetcher<Cfg>::block_run(a, g, kt) + rank * Cfg::kUFloats;
    v_block = a.v + (int64_t(g) * a.p_tiles + pt) * chunks * Cfg::kVChunkFloats + rank * Cfg::kVFloats;
  };
  if constexpr (Cfg::kWalks) {
    // The cluster's tile blocks: cluster blockIdx.x / 2 of the grid's, then every grid's worth on;
    // the stages' chunks counted over them all.
    static_assert(Cfg::kVStaged && Cfg::kVShare == 1 && Cfg::kUShare == 1, "two-block staged-V clusters");
    const BulkStages<Cfg> stages(smem, bars, place);
    const int clusters = int(gridDim.x) / Cfg::kCluster;
    const int64_t items = int64_t(a.k_tiles) * a.p_tiles * cv.groups;
    int iter = 0;
    for (int64_t item = blockIdx.x / Cfg::kCluster; item < items; item += clusters, ++iter) {
      const BlockCoord bc = block_coord(a.k_tiles_div, a.p_tiles_div, int(item));
      const float *u_block, *v_block;
      runs(bc.g, bc.kt, bc.pt, u_block, v_block);
      Mmas::zero(acc);
      const int first = iter * chunks;
      reduce_bulk<Cfg>(mmas, acc, u_block, v_block, stages, chunks, first, /*prologue=*/iter == 0,
                       /*release_last=*/true);
      const bool last = item + clusters >= items;
      // The next tile block's first kStages - 1 chunks: chunk c by lane 0 of warp c, so that no one
      // warp issues them all in turn while the block's last barrier of the epilogue waits for it.
      epilogue(bc, iter, last, [&] {
        const int c = threadIdx.x / 32;
        if (threadIdx.x % 32 != 0 || c >= Cfg::kStages - 1 || c >= chunks || last) return;
        const float *u_next, *v_next;
        const BlockCoord next = block_coord(a.k_tiles_div, a.p_tiles_div, int(item + clusters));
        runs(next.g, next.kt, next.pt, u_next, v_next);
        stages.refill(u_next, v_next, c, first + chunks + c);
      });
    }
  } else {
    BlockCoord bc = block_coord(int(ceil_div(a.k_tiles, Cfg::kVShare)), int(ceil_div(a.p_tiles, Cfg::kUShare)),
                                blockIdx.x / Cfg::kCluster);
    // Past the last filter (tile) block where kVShare (kUShare) does not divide their count.
    bc.kt = bc.kt * Cfg::kVShare + place.fshare;
    bc.pt = bc.pt * Cfg::kUShare + place.tshare;
    const int64_t p0 = int64_t(a.p_tile0 + bc.pt) * Cfg::kN;
    const WgmmaUThreadCopies<Cfg> u_chunks{TcUFetcher<Cfg>(a, bc, rank * Cfg::kUFloats), smem};

    Mmas::zero(acc);
    if constexpr (Cfg::kVStaged) {
      // A filter (tile) block past the last reads the last one's U (V), copies its pieces for the
      // others, and stores no outputs.
      const float *u_block, *v_block;
      runs(bc.g, bc.kt < a.k_tiles ? bc.kt : a.k_tiles - 1, bc.pt < a.p_tiles ? bc.pt : a.p_tiles - 1, u_block, v_block);
      reduce_bulk<Cfg>(mmas, acc, u_block, v_block, BulkStages<Cfg>(smem, bars, place), chunks);
    } else {
      // This thread's channel and tiles tl, tl + 32 of a chunk.
      const int ch = Mmas::template loader_channel<kNhwc>(warp, lane), tl = Mmas::template loader_tile<kNhwc>(warp, lane);
      using Loader = TcPatchLoader<TIo, kNhwc, Cfg::kK, Cfg::kPatchRows>;
      const Loader patch0(a, bc, p0 + tl, p0 + tl < cv.tiles(), ch, rank);
      const Loader patch1(a, bc, p0 + tl + 32, p0 + tl + 32 < cv.tiles(), ch, rank);
      const int v_word0 = Cfg::v_word(ch, tl), v_word1 = Cfg::v_word(ch, tl + 32);
      auto store_v = [&](const TIo (&d)[12], int word, float* v_tile) {
        float f[12], v[8];
        widen_to_float(d, f);
        winograd_input_transform_rows(f, rank, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) v_tile[e * Cfg::kVPoint + word] = __uint_as_float(tf32_bits_for_mma(v[e]));
      };

      TIo d0[12], d1[12];
      u_chunks.fetch(0, 0);
      patch0.load(0, d0);
      patch1.load(0, d1);
      mmas.reduce_loaded(
          acc, smem, WgmmaChunkOrder{chunks}, u_chunks,
          [&](float* v) {
            store_v(d0, v_word0, v);
            store_v(d1, v_word1, v);
          },
          [&](int chunk) {
            patch0.load(chunk, d0);
            patch1.load(chunk, d1);
          });
    }
    epilogue(bc, 0, true, [] {});
  }
}

}  // namespace cuda
}  // namespace torchconv
