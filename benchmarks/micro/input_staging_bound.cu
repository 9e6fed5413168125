// What staging the NCHW input in shared memory by tensor copies would cost the single wgmma block
// (`tf32-wgmma`, float32 NCHW forward): its patch reads replayed without PyTorch and without MMAs,
// on the real layers' inputs, grid (one block per SM walking the output blocks, filter blocks
// fastest) and chunks of 16 channels, in three modes:
//   copy   -- one thread issues each chunk's tensor copies into a ring of `buffers` buffers and
//             waits for them: the copy engine's rate alone;
//   staged -- the copies by a producer warp, and the 512 threads read their patches from the ring
//             (16 shared-memory loads), each warp freeing a buffer once it has read it;
//   staged-one-warp -- the same with no producer warp: thread 0 refills a buffer once every warp has
//             read it, about as the reverted try did (the last warp to read a buffer refilled it).
// Box shapes: `row32` -- the reverted try's three boxes of 16 tiles x 4 rows x 16 channels per chunk
// (32 consecutive tiles of one tile row); `2x16` -- one box of 2 tile rows x 16 tiles (6 rows x 40
// columns x 16 channels, 15 KB) per chunk, the design that fits beside the stages; `2x16c8` -- that
// box as two of 8 channels.
//
// Build and run on an sm_90a GPU (stand-alone, no PyTorch):
//   nvcc -std=c++17 -O3 -arch=sm_90a -Icsrc -o /tmp/input_staging_bound benchmarks/micro/input_staging_bound.cu
//   /tmp/input_staging_bound > input_staging_bound.json
// Timings are CUDA events around one launch, the median of 7 after 2 warm-ups; `us_per_chunk` is the
// time an SM spends per chunk (launch time x SMs / (blocks x chunks)); `tile_slots_per_tile` is the
// block shape's waste (32 tile slots per block over the tiles of the layer: 2 x 16 blocks leave slots
// empty where a tile row is not a multiple of 16 tiles).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/pipeline.cuh"
#include "check.h"

using namespace torchconv::cuda;

enum Mode { kCopy = 0, kStaged = 1, kStagedOneWarp = 2 };
enum Boxes { kRow32 = 0, k2x16 = 1, k2x16c8 = 2 };
constexpr const char* kModeNames[] = {"copy", "staged", "staged-one-warp"};
constexpr const char* kBoxNames[] = {"row32", "2x16", "2x16c8"};
constexpr int kThreads = 512, kMaxBuffers = 4;

struct Geometry {
  int N, C, H, W, k_tiles;  // input, and filter blocks of 64 (each reads the same input)
  int TH, TW;               // tiles (2x2 outputs, padding 1)
  int boxes;                // Boxes
  int box_floats;           // floats per chunk (all boxes)
  __host__ __device__ int tile_blocks() const {
    return boxes == kRow32 ? (N * TH * TW + 31) / 32 : N * ((TH + 1) / 2) * ((TW + 15) / 16);
  }
};

// The box origin (innermost first: x, y, channel, image) of box `i` of a chunk. x starts 16-byte
// aligned (4 floats before the first patch column's aligned position) as tensor copies need.
struct BoxOrigin {
  int x, y, n;
};
__device__ BoxOrigin box_origin(const Geometry& g, int tb, int i) {
  if (g.boxes == kRow32) {
    // 16-tile groups of the block's 32 consecutive tiles; a group's first tile names its box.
    const int t = tb * 32 + i * 16, per_image = g.TH * g.TW;
    const int n = min(t / per_image, g.N - 1), r = t % per_image;
    return {((r % g.TW) * 2 - 1) & ~3, (r / g.TW) * 2 - 1, n};
  }
  const int gx = (g.TW + 15) / 16, gy = (g.TH + 1) / 2;
  const int n = tb / (gx * gy), r = tb % (gx * gy);
  return {(r % gx) * 32 - 4, (r / gx) * 4 - 1, n};
}

__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(unsigned(__cvta_generic_to_shared(bar))) : "memory");
}

__global__ void __launch_bounds__(kThreads + 32, 1)
    staging_kernel(const __grid_constant__ CUtensorMap map, Geometry g, int mode,
                   int buffers, float* sink) {
  extern __shared__ __align__(1024) float smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kMaxBuffers * g.box_floats);
  uint64_t* empty = full + kMaxBuffers;
  const int chunks = g.C / 16, blocks = g.tile_blocks() * g.k_tiles;
  const int n_boxes = g.boxes == kRow32 ? 3 : (g.boxes == k2x16 ? 1 : 2);
  const int box_floats = g.box_floats / n_boxes;
  const int box_w = 40, box_h = g.boxes == kRow32 ? 4 : 6;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0)
    for (int b = 0; b < kMaxBuffers; ++b) {
      mbarrier_init(&full[b], 1);
      mbarrier_init(&empty[b], kThreads / 32);
    }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  // A thread's patch: channel of the chunk and tile of the block (the kernel's lane map: a warp
  // covers 4 channels x 8 tiles).
  const int ch = lane / 8 + 4 * (warp / 4), tile = lane % 8 + 8 * (warp % 4);
  float acc = 0.f;

  auto issue = [&](int step, int tb) {  // the copies of the walk's step-th chunk
    const int buf = step % buffers, chunk = step % chunks;
    mbarrier_arrive_expect_tx(&full[buf], g.box_floats * 4);
    for (int i = 0; i < n_boxes; ++i) {
      const int bi = g.boxes == k2x16c8 ? 0 : i;
      const BoxOrigin o = box_origin(g, tb, bi);
      const int c0 = chunk * 16 + (g.boxes == k2x16c8 ? i * 8 : 0);
      asm volatile(
          "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
          "%6}], [%2];\n" ::"r"(unsigned(__cvta_generic_to_shared(smem + buf * g.box_floats + i * box_floats))),
          "l"(reinterpret_cast<uint64_t>(&map)), "r"(unsigned(__cvta_generic_to_shared(&full[buf]))), "r"(o.x),
          "r"(o.y), "r"(c0), "r"(o.n)
          : "memory");
    }
  };
  // The walk as a flat list of (output block, chunk) steps; step s's tile block.
  const int my_blocks = (blocks - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  const int steps = my_blocks * chunks;
  auto tile_block_of = [&](int s) { return (int(blockIdx.x) + (s / chunks) * int(gridDim.x)) / g.k_tiles; };

  if (mode == kCopy) {
    if (threadIdx.x == 0)
      for (int s = 0; s < steps; ++s) {
        if (s >= buffers) mbarrier_wait(&full[s % buffers], ((s - buffers) / buffers) & 1);
        issue(s, tile_block_of(s));
      }
    if (threadIdx.x == 0)
      for (int s = steps > buffers ? steps - buffers : 0; s < steps; ++s) mbarrier_wait(&full[s % buffers], (s / buffers) & 1);
  } else {
    const bool producer_warp = mode == kStaged;
    if (warp == kThreads / 32) {  // the producer warp
      if (producer_warp && lane == 0)
        for (int s = 0; s < steps; ++s) {
          if (s >= buffers) mbarrier_wait(&empty[s % buffers], ((s - buffers) / buffers) & 1);
          issue(s, tile_block_of(s));
        }
    } else {
      if (!producer_warp && threadIdx.x == 0)
        for (int s = 0; s < min(buffers, steps); ++s) issue(s, tile_block_of(s));
      for (int s = 0; s < steps; ++s) {
        const int buf = s % buffers;
        mbarrier_wait(&full[buf], (s / buffers) & 1);
        // The patch in the box: its box, row and first column.
        int i = 0, row0, col0;
        if (g.boxes == kRow32) {
          i = tile / 16;
          row0 = 0, col0 = (tile % 16) * 2 + 3;  // approximately: the box starts up to 3 columns early
        } else {
          row0 = (tile / 16) * 2, col0 = (tile % 16) * 2 + 3;
        }
        const int c_in_box = g.boxes == k2x16c8 ? ch % 8 : ch, bi = g.boxes == k2x16c8 ? ch / 8 : i;
        const float* p = smem + buf * g.box_floats + bi * box_floats + (c_in_box * box_h + row0) * box_w + col0;
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc += p[r * box_w + q];
        __syncwarp();
        if (producer_warp) {
          if (lane == 0) arrive(&empty[buf]);
        } else {
          // Thread 0 refills a buffer with the step `buffers` later once every warp has read it.
          if (lane == 0) arrive(&empty[buf]);
          if (threadIdx.x == 0 && s + buffers < steps) {
            mbarrier_wait(&empty[buf], (s / buffers) & 1);
            issue(s + buffers, tile_block_of(s + buffers));
          }
        }
      }
    }
  }
  if (acc == 12345.f) sink[0] = acc;  // keeps the reads
}

PFN_cuTensorMapEncodeTiled_v12000 tiled_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess) std::exit(2);
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

int main() {
  struct Layer {
    const char* name;
    int C, K, HW;
  };
  const Layer layers[] = {{"Y2", 32, 64, 272}, {"Y4", 64, 128, 136}, {"Y8", 128, 256, 68}, {"R2", 64, 64, 56},
                          {"R6", 128, 128, 28}};
  const int N = 32;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const auto encode = tiled_encoder();
  CHECK(cudaFuncSetAttribute(staging_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  float* sink;
  CHECK(cudaMalloc(&sink, 4));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::printf("{\"gpu\": \"%s\", \"sms\": %d, \"N\": %d, \"rows\": [\n", prop.name, sms, N);
  bool first = true;
  for (const Layer& L : layers) {
    const size_t n_in = size_t(N) * L.C * L.HW * L.HW;
    float* x;
    CHECK(cudaMalloc(&x, n_in * 4));
    CHECK(cudaMemset(x, 0, n_in * 4));
    for (int boxes : {kRow32, k2x16, k2x16c8}) {
      Geometry g{N, L.C, L.HW, L.HW, L.K / 64, L.HW / 2, L.HW / 2, boxes, 0};
      const int box_h = boxes == kRow32 ? 4 : 6, box_c = boxes == k2x16c8 ? 8 : 16;
      const int n_boxes = boxes == kRow32 ? 3 : (boxes == k2x16 ? 1 : 2);
      g.box_floats = n_boxes * 40 * box_h * box_c;
      CUtensorMap map;
      cuuint64_t dims[4] = {cuuint64_t(L.HW), cuuint64_t(L.HW), cuuint64_t(L.C), cuuint64_t(N)};
      cuuint64_t strides[3] = {dims[0] * 4, dims[0] * dims[1] * 4, dims[0] * dims[1] * dims[2] * 4};
      cuuint32_t box[4] = {40, cuuint32_t(box_h), cuuint32_t(box_c), 1}, estr[4] = {1, 1, 1, 1};
      if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, x, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        std::fprintf(stderr, "encode failed for %s %s\n", L.name, kBoxNames[boxes]);
        continue;
      }
      const int blocks = g.tile_blocks() * g.k_tiles, grid = std::min(blocks, sms);
      const size_t smem = size_t(kMaxBuffers) * g.box_floats * 4 + 2 * kMaxBuffers * 8;
      for (int mode : {kCopy, kStaged, kStagedOneWarp})
        for (int buffers : {1, 2, 3}) {
          std::vector<float> ms;
          for (int it = 0; it < 9; ++it) {
            CHECK(cudaEventRecord(e0));
            staging_kernel<<<grid, kThreads + 32, smem>>>(map, g, mode, buffers, sink);
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            CHECK(cudaGetLastError());
            float t;
            CHECK(cudaEventElapsedTime(&t, e0, e1));
            if (it >= 2) ms.push_back(t);
          }
          std::sort(ms.begin(), ms.end());
          const double us = ms[ms.size() / 2] * 1e3;
          const double per_chunk = us * grid / (double(blocks) * (L.C / 16));
          std::printf("%s  {\"layer\": \"%s\", \"boxes\": \"%s\", \"mode\": \"%s\", \"buffers\": %d, \"us\": %.1f, "
                      "\"us_per_chunk\": %.3f, \"kb_per_chunk\": %.1f, \"tile_slots_per_tile\": %.3f}",
                      first ? "" : ",\n", L.name, kBoxNames[boxes], kModeNames[mode], buffers,
                      us, per_chunk, g.box_floats * 4 / 1024.0, g.tile_blocks() * 32.0 / (double(N) * g.TH * g.TW));
          first = false;
        }
    }
    CHECK(cudaFree(x));
  }
  std::printf("\n]}\n");
  return 0;
}
