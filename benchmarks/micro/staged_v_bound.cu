// What bounds the staged-V Winograd reduction (`tf32-wgmma-cluster-vbulk`, and the wide tile that was
// tried): the reduction's loop replayed on synthetic operands with the grid, block order, operand runs
// and pipeline of the real kernel, once as it is and once with either half taken out:
//   full  -- bulk copies into the stages, the warpgroups' wgmmas on them (the reduction itself);
//   copy  -- the same copies and mbarriers, no MMAs: the memory system's share;
//   mma   -- the same MMAs and loop, no copies: the tensor cores' and the loop's share.
// Also: the wgmma rate with its operands resident in shared memory (no mbarriers), the rate at
// which blocks of a cluster store into each other's shared memory (the wide tile's exchange), and
// the SMs' intake of bulk copies alone (`intake`): per SM against the number of SMs copying, the
// copies in flight, and multicast to the blocks of a cluster. And the same loop for F(4x4,3x3) on the
// staged path (12 of its 36 points a block, clusters of 3) beside F(2x2)'s on the same layers.
//
// Build and run on an sm_90a GPU (stand-alone, no PyTorch):
//   nvcc -std=c++17 -O3 -arch=sm_90a -Icsrc -o /tmp/staged_v_bound benchmarks/micro/staged_v_bound.cu
//   /tmp/staged_v_bound > staged_v_bound.json
// Timings are CUDA events around one launch, the median of 7 after 2 warm-ups.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "cuda/common/cluster.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/common/wgmma.cuh"
#include "check.h"

using namespace torchconv::cuda;

enum Mode { kFull = 0, kCopy = 1, kMma = 2 };

// A reduction block: kPoints points per warpgroup of 64 filters x kN tiles, 16 channels per chunk
// (two TF32 k-steps), 4 warpgroups. Its stage holds U (4 * kPoints tiles of 64 x 16) and V (the
// warpgroups' B tiles, kN x 16 each; warpgroups of one point share them in the wide layout).
// Tiles are K-major in core matrices of 8 rows x 16 bytes: [row group][channel quad][8 x 4 words].
// kHalf: the operands as float16 (two to a 4-byte word), one k16 step per chunk instead of two TF32
// k8 steps, core matrices of 8 rows x 8 channels: the same MMA work on half the bytes.
template <int kN, int kPoints, int kVTiles, int kStages, bool kHalf = false>
struct Shape {
  static constexpr int kUTileFloats = 64 * 16 / (kHalf ? 2 : 1), kVTileFloats = kN * 16 / (kHalf ? 2 : 1);
  static constexpr int kUFloats = 4 * kPoints * kUTileFloats, kVFloats = kVTiles * kVTileFloats;
  static constexpr int kStage = kUFloats + kVFloats;
  static constexpr size_t kSmem = size_t(kStages) * kStage * 4 + 2 * kStages * 8;
};

// The MMA's operand type: TF32, or 16-bit words (float16; bfloat16 at N = 32, which float16 has no
// wrapper for: the same rate and bytes).
template <bool kHalf, int kN>
using HalfOrTf32 = std::conditional_t<kHalf, std::conditional_t<kN == 32, __nv_bfloat16, __half>, float>;

// kVShare > 1: the blocks of kVShare consecutive filter blocks (same rank and tile block) share V,
// in clusters of ranks x kVShare blocks: each copies 1 / kVShare of every V chunk to all of them by
// multicast, and a stage is refilled once the warpgroups of all of them have read it (its empty
// mbarrier counts their arrivals). kRotate: chunk c's copies issued by lane 0 of warp c % kStages,
// not all by thread 0 (the intake table: one thread's copies into successive stages do not overlap).
// kWalk: a grid of the clusters that fit at once, each cluster taking every grid's worth of
// (filter blocks, tile block) items on, its stages' chunks counted over them all (the walking
// clusters' pipeline without their epilogue: the next item's chunks follow the last one's).
template <int kN, int kPoints, int kVTiles, int kStages, int kMode, int kSplit = 1, bool kHalf = false,
          int kVShare = 1, bool kRotate = false, bool kWalk = false>
__global__ void __launch_bounds__(512, 1)
    reduction_kernel(const float* __restrict__ u, const float* __restrict__ v, float* out, int filter_blocks,
                     int ranks, int chunks, int wrap, int tile_blocks) {
  using S = Shape<kN, kPoints, kVTiles, kStages, kHalf>;
  static_assert(kVShare == 1 || (kSplit == 1 && kMode != kMma), "shared V: whole runs, copies on");
  static_assert(!kRotate || kStages <= 16, "a warp for each stage");
  extern __shared__ __align__(1024) float smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * S::kStage);
  uint64_t* empty = full + kStages;
  // The real grid's order: cluster rank fastest, then filter blocks, then tile blocks.
  const int rank = blockIdx.x % ranks, fb = (blockIdx.x / ranks) % filter_blocks, tb = blockIdx.x / ranks / filter_blocks;
  const int run_chunks = wrap > 0 ? wrap : chunks;
  const float* u_run = u + (int64_t(fb) * ranks + rank) * run_chunks * S::kUFloats;
  const float* v_run = v + (int64_t(tb) * ranks + rank) * run_chunks * S::kVFloats;
  // Walking: this cluster's items (filter blocks kVShare at a time, tile block), its chunks over them.
  const int cluster = ranks * kVShare, cid = blockIdx.x / cluster, clusters = gridDim.x / cluster;
  const int fb_groups = filter_blocks / kVShare, items = fb_groups * tile_blocks;
  const int total = kWalk ? (cid < items ? chunks * ((items - cid + clusters - 1) / clusters) : 0) : chunks;
  auto runs_of = [&](int g, const float*& ur, const float*& vr, int& at) {
    if constexpr (!kWalk) {
      ur = u_run, vr = v_run, at = wrap > 0 ? g % wrap : g;
      return;
    }
    const int item = cid + (g / chunks) * clusters;
    const int f = (item % fb_groups) * kVShare + (blockIdx.x % cluster) / ranks, t = item / fb_groups;
    ur = u + (int64_t(f) * ranks + rank) * chunks * S::kUFloats;
    vr = v + (int64_t(t) * ranks + rank) * chunks * S::kVFloats;
    at = g % chunks;
  };
  // The blocks of this block's cluster that read its V: cluster ranks rank + ranks * j.
  const int share = (blockIdx.x % cluster) / ranks;
  uint16_t v_readers = 0;
  for (int j = 0; j < kVShare; ++j) v_readers |= uint16_t(1u << (rank + ranks * j));
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], 4 * kVShare);
    }
    if (kVShare > 1) mbarrier_init_fence_cluster();
  }
  // Operand values for the MMA-only mode (and the others' first fill): small, finite.
  for (int i = threadIdx.x; i < kStages * S::kStage; i += blockDim.x) smem[i] = 1.0f / 1024;
  fence_proxy_async_shared();
  __syncthreads();
  if (kVShare > 1) {  // the cluster's mbarriers are initialized before any copy or arrival reaches them
    cluster_arrive_release();
    cluster_wait_acquire();
  }

  const int group = __shfl_sync(0xFFFFFFFFu, int(threadIdx.x / 128), 0);
  const unsigned base = unsigned(__cvta_generic_to_shared(smem));
  // Warpgroup g: points g * kPoints + p of U; V tile (g * kPoints + p) % kVTiles.
  constexpr unsigned kRowStep = kHalf ? 256 : 512;  // 8 rows x 16 channels
  const uint64_t u0 = wgmma_descriptor_interleaved(base + 4 * group * kPoints * S::kUTileFloats, 128, kRowStep);
  const uint64_t v0 = wgmma_descriptor_interleaved(
      base + 4 * (S::kUFloats + ((group * kPoints) % kVTiles) * S::kVTileFloats), 128, kRowStep);
  float acc[kPoints][kN / 2];
#pragma unroll
  for (int p = 0; p < kPoints; ++p)
#pragma unroll
    for (int q = 0; q < kN / 2; ++q) acc[p][q] = 0.f;

  auto fetch = [&](int chunk) {
    const int s = chunk % kStages;
    const float *ur, *vr;
    int at;
    runs_of(chunk, ur, vr, at);
    mbarrier_arrive_expect_tx(&full[s], (S::kUFloats + S::kVFloats) * 4);
    // Each operand's run as kSplit copies; shared V as this block's piece to all its readers.
#pragma unroll
    for (int i = 0; i < kSplit; ++i) {
      constexpr int kU = S::kUFloats / kSplit, kV = S::kVFloats / kSplit;
      bulk_copy_to_shared(smem + s * S::kStage + i * kU, ur + int64_t(at) * S::kUFloats + i * kU, kU * 4, &full[s]);
      if constexpr (kVShare == 1)
        bulk_copy_to_shared(smem + s * S::kStage + S::kUFloats + i * kV, vr + int64_t(at) * S::kVFloats + i * kV,
                            kV * 4, &full[s]);
      else {
        constexpr int kPiece = S::kVFloats / kVShare;
        bulk_copy_to_shared_multicast(smem + s * S::kStage + S::kUFloats + share * kPiece,
                                      vr + int64_t(at) * S::kVFloats + share * kPiece, kPiece * 4, &full[s],
                                      v_readers);
      }
    }
  };
  auto copier = [&](int chunk) { return threadIdx.x == (kRotate ? 32u * unsigned(chunk % kStages) : 0u); };
  if (kMode != kMma)
    for (int c = 0; c < kStages - 1 && c < total; ++c)
      if (copier(c)) fetch(c);
  for (int chunk = 0; chunk < total; ++chunk) {
    const int s = chunk % kStages;
    if (kMode != kMma) mbarrier_wait(&full[s], unsigned(chunk / kStages) & 1u);
    if (kMode != kCopy) {
      const unsigned stage = unsigned(s) * (S::kStage / 4);
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < (kHalf ? 1 : 2); ++step)
#pragma unroll
        for (int p = 0; p < kPoints; ++p) {
          const uint64_t da = wgmma_descriptor_advance(u0, stage + (p * S::kUTileFloats) / 4 + 16 * step);
          const uint64_t db = wgmma_descriptor_advance(v0, stage + (p * S::kVTileFloats) / 4 + 16 * step);
          Wgmma<HalfOrTf32<kHalf, kN>, kN>::run(acc[p], da, db, 1);
        }
      wgmma_commit();
      wgmma_wait<1>();
    }
    if (kMode != kMma) {
      if (chunk > 0 && threadIdx.x % 128 == 0) {
        if constexpr (kVShare == 1)
          asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(
                           unsigned(__cvta_generic_to_shared(&empty[(chunk - 1) % kStages])))
                       : "memory");
        else
          for (int j = 0; j < kVShare; ++j)
            mbarrier_arrive_cluster(&empty[(chunk - 1) % kStages], unsigned(rank + ranks * j));
      }
      const int next = chunk + kStages - 1;
      if (copier(next) && next < total) {
        mbarrier_wait(&empty[next % kStages], unsigned(next / kStages - 1) & 1u);
        fetch(next);
      }
    }
    __syncwarp();
  }
  wgmma_wait<0>();
  if (kVShare > 1) {  // no block leaves while a partner's copies may still land in it
    __syncthreads();
    cluster_arrive_release();
    cluster_wait_acquire();
  }
  // Keeps the MMAs. (A sum of the accumulators here made ptxas serialize the full mode's MMAs, C7514.)
  if (threadIdx.x == 1u << 30) {
#pragma unroll
    for (int p = 0; p < kPoints; ++p)
#pragma unroll
      for (int q = 0; q < kN / 2; ++q) out[p * kN + q] = acc[p][q];
  }
}

// Each block of a cluster of kCluster stores `bytes_per_block` into the others' shared memory, block
// r's i-th pass to rank (r + 1 + i) % kCluster (the wide tile's staggered order), `reps` times, a
// cluster barrier after each.
template <int kCluster>
__global__ void __launch_bounds__(512, 1) dsmem_kernel(float* out, int float4s_per_peer, int reps) {
  extern __shared__ __align__(1024) float smem[];
  const unsigned r = cluster_block_rank();
  float4 val = make_float4(threadIdx.x, 1.f, 2.f, 3.f);
  for (int rep = 0; rep < reps; ++rep) {
    for (int i = 0; i < kCluster - 1; ++i) {
      const unsigned peer = (r + 1 + i) % kCluster;
      const unsigned remote = cluster_shared_address(smem + 4 * i * float4s_per_peer, peer);  // slot i: one sender
      for (int j = threadIdx.x; j < float4s_per_peer; j += blockDim.x) store_cluster_shared(remote + 16 * j, val);
    }
    cluster_arrive_release();
    cluster_wait_acquire();
    val.x += 1.f;
  }
  if (smem[threadIdx.x] == -1.f) out[blockIdx.x] = smem[threadIdx.x];
}

// The same exchange by the copy engine: per rep, thread 0 of each block expects (kCluster - 1) pieces
// on its own mbarrier, then issues one bulk copy of its piece from its shared memory into each
// peer's (cp.async.bulk.shared::cluster.shared::cta), and waits for its own pieces to land. kViaL2:
// instead a bulk copy of each piece to a global slot (shared -> global), a cluster barrier, and bulk
// copies of the block's incoming pieces from global back into shared memory.
template <int kCluster, bool kViaL2>
__global__ void __launch_bounds__(128, 1) bulk_exchange_kernel(float* slots, int piece_bytes, int reps) {
  extern __shared__ __align__(1024) float smem[];
  __shared__ uint64_t bar;
  const unsigned r = cluster_block_rank();
  const int cluster = blockIdx.x / kCluster;
  float* inbox = smem + (piece_bytes / 4);  // (kCluster - 1) slots after the outgoing piece
  if (threadIdx.x == 0) mbarrier_init(&bar, 1);
  mbarrier_init_fence_cluster();
  __syncthreads();
  cluster_arrive_release();
  cluster_wait_acquire();
  const unsigned bar_addr = unsigned(__cvta_generic_to_shared(&bar));
  const unsigned src = unsigned(__cvta_generic_to_shared(smem));
  for (int rep = 0; rep < reps; ++rep) {
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&bar, (kCluster - 1) * piece_bytes);
      for (int i = 0; i < kCluster - 1; ++i) {
        const unsigned peer = (r + 1 + i) % kCluster;
        if (!kViaL2) {
          const unsigned dst = cluster_shared_address(inbox + i * (piece_bytes / 4), peer);
          const unsigned peer_bar = cluster_shared_address(&bar, peer);
          asm volatile(
              "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                  dst),
              "r"(src), "r"(piece_bytes), "r"(peer_bar)
              : "memory");
        } else {
          float* slot = slots + (int64_t(cluster) * kCluster * kCluster + r * kCluster + peer) * (piece_bytes / 4);
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(slot), "r"(src),
                       "r"(piece_bytes)
                       : "memory");
        }
      }
      if (kViaL2) {
        asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group 0;\n" ::: "memory");
        asm volatile("fence.proxy.async.global;\n" ::: "memory");
      }
    }
    if (kViaL2) {
      cluster_arrive_release();
      cluster_wait_acquire();
      if (threadIdx.x == 0)
        for (int i = 0; i < kCluster - 1; ++i) {
          const unsigned sender = (r + kCluster - 1 - i) % kCluster;  // whose i-th pass came here
          const float* slot = slots + (int64_t(cluster) * kCluster * kCluster + sender * kCluster + r) * (piece_bytes / 4);
          bulk_copy_to_shared(inbox + i * (piece_bytes / 4), slot, piece_bytes, &bar);
        }
    }
    mbarrier_wait(&bar, unsigned(rep) & 1u);
    cluster_arrive_release();  // every block's pieces have landed before the next rep overwrites
    cluster_wait_acquire();
  }
}

// How an issuer counts a copy's bytes on its slot's mbarrier: before the copy (release semantics, as
// the kernels do), after it, or before it with relaxed semantics.
enum IntakeArrival { kExpectThenCopy = 0, kCopyThenExpect = 1, kRelaxedExpectThenCopy = 2 };

__device__ __forceinline__ void mbarrier_arrive_expect_tx_relaxed(uint64_t* bar, unsigned bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   unsigned(__cvta_generic_to_shared(bar))),
               "r"(bytes)
               : "memory");
}

struct IntakeArgs {
  const uint8_t* src;
  size_t span;
  int copies, depth;
  unsigned copy_bytes;
  int producers, pieces;
  bool sequential, one_thread;
  int arrival;           // IntakeArrival
  bool producer_lanes;   // the issuers are lanes 0, 8, 16, 24 of warp 0, not lane 0 of warps 0-3
  bool split_issue;      // every issuer takes part in every copy: issuer p its pieces p, p + producers, ...
  long long* cycles;
};

constexpr int kIntakeThreads = 288, kIntakeReleaseWarp = 8;  // up to 8 issuing warps

// The SMs' intake of bulk copies alone. One block per SM keeps `depth` copies of `copy_bytes` in
// flight in a ring of as many slots: `copies` copies from places of a source of `span` bytes
// (L2-resident when small), scattered, or one after another (`sequential`). Lane 0 of warps
// 0 .. producers - 1 (at most 8) issues them (warp p the copies p, p + producers, ...; depth is a
// multiple of producers, so each slot has one issuer), each copy as `pieces` bulk copies counted on
// its slot's mbarrier; lane 0 of warp 8 waits for each to land and frees its slot. kMulticast:
// clusters of kCluster blocks read the same sources, each block copying 1/kCluster of every copy to
// all of them (`.multicast::cluster`), so that each block still receives copy_bytes a copy while L2
// is read once per cluster; a slot is refilled once every block of the cluster has seen it land (an
// empty mbarrier a slot counting the cluster's arrivals). `one_thread`: thread 0 also waits for each copy
// and frees its slot between issuing copies. Each block's clocks, from start to its last copy
// landing, go to cycles[block].
template <int kCluster, bool kMulticast>
__global__ void __launch_bounds__(kIntakeThreads, 1) intake_kernel(IntakeArgs a) {
  extern __shared__ __align__(1024) uint8_t intake_smem[];
  const int depth = a.depth;
  uint64_t* full = reinterpret_cast<uint64_t*>(intake_smem + size_t(depth) * a.copy_bytes);
  uint64_t* empty = full + depth;
  const unsigned rank = kCluster > 1 ? cluster_block_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < depth; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], kCluster);
    }
    mbarrier_init_fence_cluster();
  }
  __syncthreads();
  if (kCluster > 1) {  // the cluster's mbarriers are initialized before any copy or arrival reaches them
    cluster_arrive_release();
    cluster_wait_acquire();
  }
  const long long c0 = clock64();
  const unsigned piece = kMulticast ? a.copy_bytes / kCluster : a.copy_bytes;  // what this block copies
  const unsigned sub = piece / unsigned(a.pieces);
  const size_t places = a.span / a.copy_bytes;
  const size_t reader = kMulticast ? blockIdx.x / kCluster : blockIdx.x;  // blocks that share sources
  auto issue = [&](int i, int p) {  // p: this issuer among split_issue's, else 0
    const int s = i % depth;
    if (i >= depth) mbarrier_wait(&empty[s], unsigned(i / depth - 1) & 1u);
    const bool counts = p == 0;  // the one issuer of a copy that counts its bytes
    if (counts && a.arrival == kExpectThenCopy) mbarrier_arrive_expect_tx(&full[s], a.copy_bytes);
    if (counts && a.arrival == kRelaxedExpectThenCopy) mbarrier_arrive_expect_tx_relaxed(&full[s], a.copy_bytes);
    const size_t place =
        a.sequential ? (reader * 131 + size_t(i)) % places : (reader * 7919 + size_t(i) * 131) % places;
    const uint8_t* from = a.src + place * a.copy_bytes + rank * piece;
    uint8_t* to = intake_smem + size_t(s) * a.copy_bytes + rank * piece;
    for (int q = p; q < a.pieces; q += a.split_issue ? a.producers : 1) {
      if constexpr (kMulticast)
        bulk_copy_to_shared_multicast(to + q * sub, from + q * sub, sub, &full[s], uint16_t((1u << kCluster) - 1));
      else
        bulk_copy_to_shared(to + q * sub, from + q * sub, sub, &full[s]);
    }
    if (counts && a.arrival == kCopyThenExpect) mbarrier_arrive_expect_tx(&full[s], a.copy_bytes);
  };
  auto release = [&](int j) {  // copy j has landed here: its slot is free for this block
    mbarrier_wait(&full[j % depth], unsigned(j / depth) & 1u);
    for (int r = 0; r < kCluster; ++r) mbarrier_arrive_cluster(&empty[j % depth], unsigned(r));
  };
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  if (a.one_thread) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < a.copies + depth; ++i) {
        if (i >= depth) release(i - depth);
        if (i < a.copies) issue(i, 0);
      }
      a.cycles[blockIdx.x] = clock64() - c0;
    }
  } else if (a.producer_lanes ? warp == 0 && lane % 8 == 0 && lane / 8 < a.producers
                              : lane == 0 && warp < a.producers) {
    const int p = a.producer_lanes ? lane / 8 : warp;
    if (a.split_issue)
      for (int i = 0; i < a.copies; ++i) issue(i, p);
    else
      for (int i = p; i < a.copies; i += a.producers) issue(i, 0);
  } else if (lane == 0 && warp == kIntakeReleaseWarp) {
    for (int j = 0; j < a.copies; ++j) release(j);
    a.cycles[blockIdx.x] = clock64() - c0;
  }
  __syncthreads();
  if (kCluster > 1) {  // no block leaves while a partner's copies may still land in it
    cluster_arrive_release();
    cluster_wait_acquire();
  }
}

static float median_ms(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Launch>
static float time_ms(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 9; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) t.push_back(ms);
  }
  return median_ms(t);
}

// A launch of `grid` blocks in clusters of `cluster` (its attribute lives beside the config).
struct ClusterLaunch {
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = {};
  ClusterLaunch(int grid, int threads, size_t smem, int cluster) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(cluster);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;  // cfg points at attr
};

static bool first_row = true;
static void row(const char* name, const char* layer, const char* mode, int blocks, int chunks, double bytes,
                double flops, float ms) {
  std::printf("%s    {\"kernel\": \"%s\", \"layer\": \"%s\", \"mode\": \"%s\", \"blocks\": %d, \"chunks\": %d, "
              "\"us\": %.1f, \"operand_gb\": %.3f, \"tb_per_s\": %.2f, \"mma_tflops\": %.1f}",
              first_row ? "" : ",\n", name, layer, mode, blocks, chunks, ms * 1e3, bytes / 1e9, bytes / ms / 1e9,
              flops / ms / 1e9);
  first_row = false;
}

// Sets `launch`'s grid to the clusters that fit the GPU at once (at most max_clusters) for kernel
// k, whose dynamic shared memory is launch's; returns their count.
template <typename Kernel>
static int one_wave(Kernel k, ClusterLaunch& launch, int cluster, int max_clusters) {
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(launch.cfg.dynamicSmemBytes)));
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int active = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&active, k, &launch.cfg));
  active = std::min(active, max_clusters);
  launch.cfg.gridDim = dim3(active * cluster);
  return active;
}

// Launched in clusters of `cluster` consecutive blocks, as the real kernels (the hardware places a
// cluster's blocks in one GPC); the blocks talk to each other only where they share V (kVShare).
template <int kN, int kPoints, int kVTiles, int kStages, int kMode, int kSplit = 1, bool kHalf = false,
          int kVShare = 1, bool kRotate = false, bool kWalk = false>
static void run_reduction(const char* name, const char* layer, const char* mode, const float* u, const float* v,
                          float* out, int filter_blocks, int tile_blocks, int ranks, int chunks, int cluster,
                          int wrap = 0) {
  using S = Shape<kN, kPoints, kVTiles, kStages, kHalf>;
  auto k = reduction_kernel<kN, kPoints, kVTiles, kStages, kMode, kSplit, kHalf, kVShare, kRotate, kWalk>;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kSmem)));
  const int blocks = filter_blocks * tile_blocks * ranks;  // the work's, walking or not
  ClusterLaunch launch(blocks, 512, S::kSmem, cluster);
  cudaLaunchConfig_t& cfg = launch.cfg;
  if (kWalk) one_wave(k, launch, cluster, blocks / cluster);
  const float ms = time_ms(
      [&] { CHECK(cudaLaunchKernelEx(&cfg, k, u, v, out, filter_blocks, ranks, chunks, wrap, tile_blocks)); });
  const double bytes = double(blocks) * chunks * S::kStage * 4;
  const double flops = double(blocks) * chunks * 4 * kPoints * 2 * (64.0 * kN * 8 * 2);
  row(name, layer, mode, int(cfg.gridDim.x), chunks, kMode == kMma ? 0.0 : bytes, kMode == kCopy ? 0.0 : flops, ms);
}

// The float16 words' shape (vbulk-f16) at kStages stages, V shared by kVShare filter blocks in
// clusters of 2 x kVShare, copies from the stages' warps (kRotate), walking (kWalk): its full
// (kFullRow) and copies-only (kCopyRow) rows.
template <int kStages, int kVShare, bool kRotate, bool kWalk = false, bool kFullRow = true, bool kCopyRow = true>
static void run_f16(const char* name, const char* layer, const float* u, const float* v, float* out, int fb, int tb,
                    int chunks) {
  constexpr int kCluster = 2 * kVShare;
  if constexpr (kFullRow)
    run_reduction<64, 2, 8, kStages, kFull, 1, true, kVShare, kRotate, kWalk>(name, layer, "full", u, v, out, fb, tb,
                                                                              2, chunks, kCluster);
  if constexpr (kCopyRow)
    run_reduction<64, 2, 8, kStages, kCopy, 1, true, kVShare, kRotate, kWalk>(name, layer, "copy", u, v, out, fb, tb,
                                                                              2, chunks, kCluster);
}

// F(4x4,3x3) on the staged path (`staged-f4x4-carrier` in benchmarks/winograd_half_bound.py): 12 of
// a tile's 36 points a block (3 a warpgroup, m64n64k16 each), 64 filters x 64 tiles, float16 words
// (48 KB a chunk), the 36 points on a cluster of 3, 4 stages, each chunk's copies from its stage's
// warp: its full and copies-only rows, walking (kWalk) or a block per item.
template <bool kWalk>
static void run_f4x4(const char* name, const char* layer, const float* u, const float* v, float* out, int fb, int tb,
                     int chunks) {
  run_reduction<64, 3, 12, 4, kFull, 1, true, 1, true, kWalk>(name, layer, "full", u, v, out, fb, tb, 3, chunks, 3);
  run_reduction<64, 3, 12, 4, kCopy, 1, true, 1, true, kWalk>(name, layer, "copy", u, v, out, fb, tb, 3, chunks, 3);
}

// The three modes, launched in clusters of `cluster` blocks (0: of `ranks`, as the staged-V clusters).
template <int kN, int kPoints, int kVTiles, int kStages, bool kHalf = false>
static void run_modes(const char* name, const char* layer, const float* u, const float* v, float* out, int fb,
                      int tb, int ranks, int chunks, int cluster = 0) {
  const int c = cluster > 0 ? cluster : ranks;
  run_reduction<kN, kPoints, kVTiles, kStages, kFull, 1, kHalf>(name, layer, "full", u, v, out, fb, tb, ranks, chunks, c);
  run_reduction<kN, kPoints, kVTiles, kStages, kCopy, 1, kHalf>(name, layer, "copy", u, v, out, fb, tb, ranks, chunks, c);
  run_reduction<kN, kPoints, kVTiles, kStages, kMma, 1, kHalf>(name, layer, "mma", u, v, out, fb, tb, ranks, chunks, c);
}

template <int kCluster>
static void run_dsmem(float* out, int bytes_per_block) {
  const int per_peer = bytes_per_block / 16 / (kCluster - 1);
  const size_t smem = size_t(kCluster - 1) * per_peer * 16;
  auto k = dsmem_kernel<kCluster>;
  const int reps = 100;
  ClusterLaunch launch(kCluster * 64, 512, smem, kCluster);
  cudaLaunchConfig_t& cfg = launch.cfg;
  const int active = one_wave(k, launch, kCluster, 1 << 30), blocks = active * kCluster;
  const float ms = time_ms([&] { CHECK(cudaLaunchKernelEx(&cfg, k, out, per_peer, reps)); });
  const double per_block = double(per_peer) * 16 * (kCluster - 1);
  std::printf(",\n    {\"kernel\": \"dsmem_store\", \"cluster\": %d, \"blocks\": %d, \"active_clusters\": %d, "
              "\"bytes_per_block_per_rep\": %.0f, \"us_per_rep\": %.2f, \"gb_per_s_per_block\": %.1f}",
              kCluster, blocks, active, per_block, ms * 1e3 / reps, per_block * reps / ms / 1e6);
}

template <int kCluster, bool kViaL2>
static void run_bulk_exchange(float* slots, int bytes_per_block) {
  const int piece = bytes_per_block / (kCluster - 1) / 16 * 16;
  const size_t smem = size_t(kCluster) * piece;
  auto k = bulk_exchange_kernel<kCluster, kViaL2>;
  const int reps = 100;
  ClusterLaunch launch(kCluster * 64, 128, smem, kCluster);
  cudaLaunchConfig_t& cfg = launch.cfg;
  const int blocks = one_wave(k, launch, kCluster, 132 / kCluster) * kCluster;  // one block per SM
  const float ms = time_ms([&] { CHECK(cudaLaunchKernelEx(&cfg, k, slots, piece, reps)); });
  const double per_block = double(piece) * (kCluster - 1);
  std::printf(",\n    {\"kernel\": \"%s\", \"cluster\": %d, \"blocks\": %d, \"bytes_per_block_per_rep\": %.0f, "
              "\"us_per_rep\": %.2f, \"gb_per_s_per_block\": %.1f}",
              kViaL2 ? "bulk_exchange_via_l2" : "bulk_exchange_dsmem", kCluster, blocks, per_block, ms * 1e3 / reps,
              per_block * reps / ms / 1e6);
}

// One intake row: `blocks` blocks (one per SM: the shared memory asked for leaves room for one) in
// clusters of kCluster (as many of them as run at once), as many copies each as move 32 MB into a
// block.
struct IntakeRow {
  int blocks, depth, copy_kb;
  int producers = 1, pieces = 1;
  bool sequential = false, one_thread = false;
  int arrival = kExpectThenCopy;
  bool producer_lanes = false, split_issue = false;
};

template <int kCluster, bool kMulticast>
static void run_intake(const uint8_t* src, size_t span, const char* source, IntakeRow row, long long* cycles) {
  IntakeArgs a{src, span, 0, row.depth, unsigned(row.copy_kb) * 1024, row.producers, row.pieces, row.sequential,
               row.one_thread, row.arrival, row.producer_lanes, row.split_issue, cycles};
  a.copies = (32 << 20) / int(a.copy_bytes);
  const size_t smem = std::max<size_t>(size_t(row.depth) * a.copy_bytes + 16 * size_t(row.depth), 160 * 1024);
  auto k = intake_kernel<kCluster, kMulticast>;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int blocks = row.blocks;
  ClusterLaunch launch(blocks, kIntakeThreads, smem, kCluster);
  cudaLaunchConfig_t& cfg = launch.cfg;
  if (kCluster > 1) blocks = one_wave(k, launch, kCluster, blocks / kCluster) * kCluster;  // all at once
  const float ms = time_ms([&] { CHECK(cudaLaunchKernelEx(&cfg, k, a)); });
  std::vector<long long> c(size_t(blocks), 0);
  CHECK(cudaMemcpy(c.data(), cycles, sizeof(long long) * size_t(blocks), cudaMemcpyDeviceToHost));
  double per_clock = 0.0;
  for (long long x : c) per_clock += double(a.copies) * a.copy_bytes / double(std::max(x, 1LL));
  per_clock /= blocks;
  const double delivered = double(blocks) * a.copies * a.copy_bytes;
  auto yes = [](bool b) { return b ? "true" : "false"; };
  std::printf(",\n    {\"kernel\": \"intake\", \"source\": \"%s\", \"blocks\": %d, \"cluster\": %d, "
              "\"multicast\": %s, \"producers\": %d, \"pieces\": %d, \"sequential\": %s, \"one_thread\": %s, "
              "\"arrival\": %d, \"producer_lanes\": %s, \"split_issue\": %s, \"depth\": %d, \"copy_kb\": %d, "
              "\"us\": %.1f, \"delivered_gb\": %.3f, \"delivered_tb_per_s\": %.2f, \"l2_read_tb_per_s\": %.2f, "
              "\"bytes_per_clock_sm\": %.1f}",
              source, blocks, kCluster, yes(kMulticast), row.producers, row.pieces, yes(row.sequential),
              yes(row.one_thread), row.arrival, yes(row.producer_lanes), yes(row.split_issue), row.depth,
              row.copy_kb, ms * 1e3, delivered / 1e9, delivered / ms / 1e9,
              delivered / (kMulticast ? kCluster : 1) / ms / 1e9, per_clock);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  // Y18 at N = 32: 1024 filters (16 blocks of 64), 2592 tiles (41 blocks of 64), 512 channels (32
  // chunks); Y12: 512 filters (8), 9248 tiles (145), 256 channels (16); Y8: 256 (4), 36992 (578), 8.
  // U per block run: 8 points x 64 x 16 x 4 B = 32 KB a chunk, V likewise.
  struct Layer {
    const char* name;
    int fb, tb, chunks, wide_fb, wide_tb;
  } layers[] = {{"Y18", 16, 41, 32, 8, 21}, {"Y12", 8, 145, 16, 4, 73}, {"Y8", 4, 578, 8, 2, 289}};
  size_t max_floats = 0;
  for (auto& l : layers) {
    max_floats = std::max(max_floats, size_t(l.fb) * 2 * l.chunks * 8192);
    max_floats = std::max(max_floats, size_t(l.tb) * 2 * l.chunks * 8192);
    max_floats = std::max(max_floats, size_t(l.wide_tb) * 8 * l.chunks * 4096);  // the wide runs of V
  }
  // F(4x4)'s tile blocks of 64 tiles at N = 32 (tiles of 4 x 4 outputs: Y18 800, Y12 2592, Y8 9248,
  // Y4 36992) and its U and V runs, 12 points x 64 x 16 float16 values (6144 floats) a chunk and rank.
  struct F4x4Layer {
    const char* name;
    int fb, tb, chunks;
  } f4x4_layers[] = {{"Y18", 16, 13, 32}, {"Y12", 8, 41, 16}, {"Y8", 4, 145, 8}, {"Y4", 2, 578, 4}};
  for (auto& l : f4x4_layers)
    max_floats = std::max(max_floats, size_t(std::max(l.fb, l.tb)) * 3 * l.chunks * 6144);
  // F(2x2)'s Y4 beside them: 147968 tiles (2312 blocks), 64 channels (4 chunks).
  constexpr int kY4TileBlocks = 2312, kY4Chunks = 4;
  max_floats = std::max(max_floats, size_t(kY4TileBlocks) * 2 * kY4Chunks * 8192);
  float *u, *v, *out;
  CHECK(cudaMalloc(&u, max_floats * 4));
  CHECK(cudaMalloc(&v, max_floats * 4));
  CHECK(cudaMalloc(&out, 1 << 20));
  CHECK(cudaMemset(u, 0, max_floats * 4));
  CHECK(cudaMemset(v, 0, max_floats * 4));
  std::printf("{\"device\": \"%s\", \"sms\": %d, \"clock_mhz\": %d, \"l2_mb\": %d,\n  \"rows\": [\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1000, int(prop.l2CacheSize >> 20));
  for (auto& l : layers) {
    // -vbulk: clusters of 2 (the rank is the point half), 2 points of m64n64k8 per warpgroup, 3 stages.
    run_modes<64, 2, 8, 3>("vbulk", l.name, u, v, out, l.fb, l.tb, 2, l.chunks);
    // The wide tile: clusters of 8 (2 points each), 128 filters x 128 tiles, each warpgroup one point
    // and one 64-filter half (m64n128k8, V tiles shared by two warpgroups), 4 stages.
    run_modes<128, 1, 2, 4>("wide", l.name, u, v, out, l.wide_fb, l.wide_tb, 8, l.chunks);
    // -vbulk with its operands as float16 (32 KB a chunk): what carrying TF32-rounded U and V in
    // float16 words (the same 10 significand bits, under power-of-two scales) would give the reduction.
    run_modes<64, 2, 8, 3, true>("vbulk-f16", l.name, u, v, out, l.fb, l.tb, 2, l.chunks);
  }
  // The float16 words' kernels as they run (four stages, clusters of 2), with each chunk's copies from
  // its stage's warp (`-rotate`), and with V shared by filter-block pairs in clusters of 4 (`vshare2`:
  // each block copies half of each V chunk to both; L2 reads 3/4 of the bytes delivered).
  for (auto& l : layers) {
    run_modes<64, 2, 8, 4, true>("vbulk-f16-4st", l.name, u, v, out, l.fb, l.tb, 2, l.chunks);
    run_f16<4, 1, true>("vbulk-f16-4st-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
    run_f16<4, 2, false>("vshare2-f16", l.name, u, v, out, l.fb, l.tb, l.chunks);
    run_f16<4, 2, true>("vshare2-f16-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
    // Walking (a wave of persistent clusters, each item's chunks after the last's): as the float16
    // words' clusters of 2 run, and with V shared in clusters of 4.
    run_f16<4, 1, true, true>("walk-f16-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
    run_f16<4, 2, true, true>("walk-vshare2-f16-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
    run_f16<4, 2, false, true, /*kFullRow=*/false>("walk-vshare2-f16", l.name, u, v, out, l.fb, l.tb, l.chunks);
    // Six stages (192 KB, more than fit beside the kernels' M): whether depth absorbs the pair's
    // lockstep.
    run_f16<6, 1, true, true, true, /*kCopyRow=*/false>("walk-f16-6st-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
    run_f16<6, 2, true, true>("walk-vshare2-f16-6st-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
  }
  // F(4x4) on the staged path against F(2x2)'s walking clusters of 2 on the same layers (Y4 added).
  run_f16<4, 1, true, true>("walk-f16-rotate", "Y4", u, v, out, 2, kY4TileBlocks, kY4Chunks);
  for (auto& l : f4x4_layers) {
    run_f4x4<false>("f4x4-f16-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
    run_f4x4<true>("walk-f4x4-f16-rotate", l.name, u, v, out, l.fb, l.tb, l.chunks);
  }
  // The MMAs alone at the wide shape and at the vbulk shape, with one wave of one block per SM and many
  // chunks (no copies, no mbarriers): the tensor cores' rate on operands in shared memory.
  // And the copies alone and with the MMAs where every block rereads its own 2 chunks (17 MB in all,
  // resident in L2): the rate at which the SMs take in L2 hits through this pipeline.
  const int sms = prop.multiProcessorCount;
  run_reduction<64, 2, 8, 3, kMma>("vbulk", "one-wave", "mma", u, v, out, sms, 1, 1, 512, 1);
  run_reduction<128, 1, 2, 4, kMma>("wide", "one-wave", "mma", u, v, out, sms, 1, 1, 512, 1);
  run_reduction<64, 2, 8, 3, kCopy>("vbulk", "one-wave-l2-resident", "copy", u, v, out, sms, 1, 1, 512, 1, 2);
  run_reduction<64, 2, 8, 3, kFull>("vbulk", "one-wave-l2-resident", "full", u, v, out, sms, 1, 1, 512, 1, 2);
  run_reduction<128, 1, 2, 4, kCopy>("wide", "one-wave-l2-resident", "copy", u, v, out, sms, 1, 1, 512, 1, 2);
  // More stages for the wide shape (chunks of 32 KB: 5 and 6 in flight), and vbulk's runs as 4 copies each.
  for (auto& l : layers) {
    run_reduction<128, 1, 2, 6, kCopy>("wide-6-stages", l.name, "copy",
        u, v, out, l.wide_fb, l.wide_tb, 8, l.chunks, 8);
    run_reduction<128, 1, 2, 6, kFull>("wide-6-stages", l.name, "full",
        u, v, out, l.wide_fb, l.wide_tb, 8, l.chunks, 8);
    run_reduction<64, 2, 8, 3, kCopy, 4>("vbulk-split-4", l.name, "copy", u, v, out, l.fb, l.tb, 2, l.chunks, 2);
  }
  run_reduction<128, 1, 2, 6, kCopy>("wide-6-stages", "one-wave-l2-resident", "copy", u, v, out, sms, 1, 1, 512, 1, 2);
  // The four-row cluster that was estimated and not built: 128 filters x 64 tiles x 4 points a block
  // (each warpgroup one point, two m64n64k8 for its filter halves), 48 KB a chunk, 4 stages, clusters
  // of 4. And the wide shape launched in clusters of 2 and without clusters (its blocks do not talk
  // here): what the eight-block clusters' placement costs the copies.
  for (auto& l : layers) {
    run_reduction<64, 2, 4, 4, kFull>("four-row", l.name, "full", u, v, out, l.wide_fb, l.tb, 4, l.chunks, 4);
    run_reduction<64, 2, 4, 4, kCopy>("four-row", l.name, "copy", u, v, out, l.wide_fb, l.tb, 4, l.chunks, 4);
    run_reduction<128, 1, 2, 4, kCopy>("wide-clusters-of-2", l.name, "copy", u, v, out, l.wide_fb, l.wide_tb, 8,
                                       l.chunks, 2);
    run_reduction<128, 1, 2, 4, kCopy>("wide-no-clusters", l.name, "copy", u, v, out, l.wide_fb, l.wide_tb, 8,
                                       l.chunks, 1);
  }
  // grad_weight's GEMM if dM and V were staged in a workspace (docs/winograd.md, "grad_weight with dM and V staged"):
  // dU = dM V^T per point, reducing over tiles, one block per (filter tile, channel tile, slice of the
  // tiles) as the fused wgmma grad_weight block. Here the "filter blocks" are the filter tiles, the
  // "tile blocks" the channel tiles and the ranks the slices (the fused block's slice counts at N = 32;
  // the 8-point shape's ranks are 2 point halves per slice); chunks of 16 tiles.
  //   gw-64x32: 64 filters x 32 channels x 16 points (4 m64n32k8 points a warpgroup), dM 64 KB and
  //     V 32 KB a chunk, 2 stages (what shared memory holds);
  //   gw-64x32-f16: the same in 16-bit words, 48 KB a chunk, 4 stages;
  //   gw-64x64x8: 64 filters x 64 channels x 8 points (the vbulk shape), 64 KB a chunk, 3 stages.
  struct GwLayer {
    const char* name;
    int k_tiles, c_tiles32, slices, chunks;
  } gw_layers[] = {{"Y18", 16, 16, 2, 81}, {"Y12", 8, 8, 6, 97}, {"Y8", 4, 4, 23, 101}};
  size_t gw_u_floats = 0, gw_v_floats = 0;
  for (auto& l : gw_layers) {
    gw_u_floats = std::max(gw_u_floats, size_t(l.k_tiles) * l.slices * l.chunks * 16384);
    gw_v_floats = std::max(gw_v_floats, size_t(l.c_tiles32) * l.slices * l.chunks * 8192);
  }
  float *gw_u, *gw_v;
  CHECK(cudaMalloc(&gw_u, gw_u_floats * 4));
  CHECK(cudaMalloc(&gw_v, gw_v_floats * 4));
  CHECK(cudaMemset(gw_u, 0, gw_u_floats * 4));
  CHECK(cudaMemset(gw_v, 0, gw_v_floats * 4));
  for (auto& l : gw_layers) {
    run_modes<32, 4, 16, 2>("gw-64x32", l.name, gw_u, gw_v, out, l.k_tiles, l.c_tiles32, l.slices, l.chunks, 1);
    run_modes<32, 4, 16, 4, true>("gw-64x32-f16", l.name, gw_u, gw_v, out, l.k_tiles, l.c_tiles32, l.slices,
                                  l.chunks, 1);
    run_modes<64, 2, 8, 3>("gw-64x64x8", l.name, gw_u, gw_v, out, l.k_tiles, l.c_tiles32 / 2, 2 * l.slices,
                           l.chunks, 1);
  }
  CHECK(cudaFree(gw_u));
  CHECK(cudaFree(gw_v));
  run_bulk_exchange<2, false>(u, 112 * 1024);
  run_bulk_exchange<8, false>(u, 112 * 1024);
  run_bulk_exchange<2, true>(u, 112 * 1024);
  run_bulk_exchange<8, true>(u, 112 * 1024);
  run_dsmem<2>(out, 112 * 1024);
  run_dsmem<4>(out, 112 * 1024);
  run_dsmem<8>(out, 112 * 1024);
  // The SMs' intake of bulk copies (intake_kernel), from a 16 MB source (L2-resident) and a 4 GB one:
  // per SM against the SMs copying (is about 42-50 B a clock an SM's limit or L2's share?), against
  // the copies in flight, and with each copy multicast to the 2 or 4 blocks of a cluster (does a block
  // take in more than it can alone?).
  {
    const size_t l2_span = size_t(16) << 20, dram_span = size_t(4) << 30;
    uint8_t* src;
    long long* cycles;
    CHECK(cudaMalloc(&src, dram_span));
    CHECK(cudaMemset(src, 1, dram_span));
    CHECK(cudaMalloc(&cycles, sizeof(long long) * 1024));
    const char* l2 = "l2";
    for (int blocks : {1, 2, 8, 33, 66, sms}) run_intake<1, false>(src, l2_span, l2, {blocks, 4, 16}, cycles);
    for (int depth : {2, 8, 12}) run_intake<1, false>(src, l2_span, l2, {sms, depth, 16}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 8, 4}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 4, 32}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 3, 64}, cycles);
    // Is a copy's time its issuer's, its slot's, or the SM's? Copies from several warps, a copy as
    // several pieces, one after another in the source, and the copying thread freeing the slots.
    for (int producers : {2, 4, 8}) run_intake<1, false>(src, l2_span, l2, {sms, 8, 16, producers}, cycles);
    for (int producers : {2, 4, 8}) run_intake<1, false>(src, l2_span, l2, {1, 8, 16, producers}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 8, 16, 1, 4}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 8, 16, 1, 1, true}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 8, 16, 4, 1, true}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 4, 16, 1, 1, false, true}, cycles);
    for (int arrival : {kCopyThenExpect, kRelaxedExpectThenCopy}) {
      run_intake<1, false>(src, l2_span, l2, {1, 8, 16, 1, 1, false, false, arrival}, cycles);
      run_intake<1, false>(src, l2_span, l2, {sms, 8, 16, 1, 1, false, false, arrival}, cycles);
    }
    run_intake<1, false>(src, l2_span, l2, {1, 8, 16, 4, 1, false, false, kExpectThenCopy, true}, cycles);
    run_intake<1, false>(src, l2_span, l2, {sms, 8, 16, 4, 1, false, false, kExpectThenCopy, true}, cycles);
    run_intake<1, false>(src, dram_span, "dram", {sms, 8, 16}, cycles);
    run_intake<1, false>(src, dram_span, "dram", {sms, 8, 16, 4}, cycles);
    run_intake<2, true>(src, l2_span, l2, {2, 4, 16}, cycles);
    run_intake<2, true>(src, l2_span, l2, {sms, 8, 16}, cycles);
    run_intake<2, true>(src, l2_span, l2, {sms, 8, 16, 4}, cycles);
    run_intake<2, true>(src, l2_span, l2, {sms, 8, 16, 8}, cycles);
    run_intake<4, true>(src, l2_span, l2, {sms / 4 * 4, 8, 16}, cycles);
    run_intake<4, true>(src, l2_span, l2, {sms / 4 * 4, 8, 16, 4}, cycles);
    run_intake<2, false>(src, l2_span, l2, {sms, 8, 16}, cycles);  // clusters, no multicast: placement alone
    // A staged chunk's copies (32 KB: U's and V's runs, 16 KB each, four stages): from one thread, as
    // the kernels issue them, and each piece from a lane of its own (split_issue), unicast and with
    // V and U multicast to clusters of 2 and 4.
    {
      const int e = kExpectThenCopy;
      run_intake<1, false>(src, l2_span, l2, {sms, 4, 32, 1, 2}, cycles);
      run_intake<1, false>(src, l2_span, l2, {sms, 4, 32, 2, 2, false, false, e, true, true}, cycles);
      run_intake<1, false>(src, l2_span, l2, {sms, 4, 32, 4, 4, false, false, e, true, true}, cycles);
      run_intake<2, true>(src, l2_span, l2, {sms, 4, 32, 1, 2}, cycles);
      run_intake<2, true>(src, l2_span, l2, {sms, 4, 32, 2, 2, false, false, e, true, true}, cycles);
      run_intake<2, true>(src, l2_span, l2, {sms, 4, 32, 4, 4, false, false, e, true, true}, cycles);
      run_intake<4, true>(src, l2_span, l2, {sms / 4 * 4, 4, 32, 1, 2}, cycles);
      run_intake<4, true>(src, l2_span, l2, {sms / 4 * 4, 4, 32, 4, 4, false, false, e, true, true}, cycles);
      // Stage s's copies from warp s of four: each issuer's copies go to one stage.
      run_intake<1, false>(src, l2_span, l2, {sms, 4, 32, 4, 2}, cycles);
      run_intake<2, true>(src, l2_span, l2, {sms, 4, 32, 4, 2}, cycles);
      run_intake<4, true>(src, l2_span, l2, {sms / 4 * 4, 4, 32, 4, 2}, cycles);
      run_intake<2, true>(src, l2_span, l2, {sms, 4, 32, 2, 2}, cycles);
    }
    CHECK(cudaFree(src));
    CHECK(cudaFree(cycles));
  }
  std::printf("\n  ]\n}\n");
  return 0;
}
