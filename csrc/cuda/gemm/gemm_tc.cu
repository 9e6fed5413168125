// The GEMM's tensor-core path, host side (kernels: tc_kernels.cuh): float16 / bfloat16, and float32
// as TF32 when PyTorch's cuDNN TF32 switch is on. Forward and every grad_input phase run the same
// implicit-GEMM kernel on channels_last data; an NCHW input or grad_output is first copied to
// channels_last (the kernel's loads are 16-byte runs of channels) except for a 1x1 layer in TF32 on
// Hopper, where the wgmma kernel reads an NCHW float32 source itself (see tc_source); the output is
// written straight into the memory format PyTorch returns (conv_memory_format).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/SmallVector.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <iterator>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../../precision.h"
#include "../../tuning.h"
#include "../../weight_cache.h"
#include "../../workspace.h"
#include "../common/dependent_launch.cuh"
#include "../common/filter_relayout.cuh"
#include "../common/tensor_data.h"
#include "../common/weight_copy.cuh"
#include "gemm_tc.h"
#include "tc_kernels.cuh"
#include "tc_weight_grad_kernels.cuh"

namespace torchconv {
namespace cuda {
namespace {

// Tile configs (positions x destination channels, chunk bytes, warps, stages, blocks per SM):
//   large  128 x 128, 8 warps of 64 x 32;
//   medium 128 x 64, 4 warps of 64 x 32: groups with <= 64 destination channels;
//   small  64 x 64, 4 warps of 32 x 32: grids that would not fill the GPU with the larger tiles.
using TcLarge = TcTileConfig<128, 128, 64, 2, 4, 4, 2>;
using TcMedium = TcTileConfig<128, 64, 64, 2, 2, 4, 3>;
using TcSmall = TcTileConfig<64, 64, 64, 2, 2, 4, 4>;
// wgmma (float16 / bfloat16 / TF32 on sm_90a): positions x channels, stages, blocks per SM:
//   wide   128 x 256, 2 warpgroups, 4 stages (one block per SM): groups with > 128 destination
//          channels and grids of at least two waves -- the compute-bound layers: half the shared
//          memory traffic per MMA of large, and two chunks loading ahead of the MMAs (its tile
//          warp-specialized, without the per-chunk block barrier, was no faster: docs/precision.md);
//   large  128 x 128, 2 warpgroups, 3 stages (two blocks per SM);
//   medium 128 x 64, 2 warpgroups, 3 stages (three blocks per SM): groups with <= 64 destination
//          channels;
//   small  64 x 128, 1 warpgroup: forced only -- where its grid would fill a wave and large's would
//          not, large's blocks each run alone on an SM, at its pace, the busiest SM doing the same
//          multiply-adds over fewer bytes a multiply-add (docs/precision.md);
//   tiny   64 x 64, 1 warpgroup: grids that would not fill the GPU even with small tiles (late
//          layers: few positions, long reductions).
// The rule gives small and tiny at most two blocks per SM, so they spend the shared memory on stages
// instead (4 and 6: 2 and 4 chunks loading ahead of the MMAs): with so few blocks per SM the chunk
// loads' latency, not the MMAs, sets their pace.
using WgmmaWide = WgmmaTileConfig<128, 256, 4, 1>;
using WgmmaLarge = WgmmaTileConfig<128, 128, 3, 2>;
using WgmmaMedium = WgmmaTileConfig<128, 64, 3, 3>;
using WgmmaSmall = WgmmaTileConfig<64, 128, 4, 2>;
using WgmmaTiny = WgmmaTileConfig<64, 64, 6, 2>;
// Forced only (set_config):
//   tall   256 x 128, 2 warpgroups of two m64 x 128 MMAs, 4 stages (one block per SM): per MMA it
//          loads half the B bytes of large, the bytes per multiply-add of wide. On the layers with
//          65-128 destination channels it measured slower than large, whose two blocks per SM hide
//          more of the loads' latency: the rule does not pick it. Kept for A/B runs of the pipeline.
using WgmmaTall = WgmmaTileConfig<256, 128, 4, 1, 2>;
//   ws     128 x 64, warp-specialized and persistent (tc_conv_wgmma_ws_kernel): two consumer
//          warpgroups and a producer one, 3 stages and the epilogue's own shared memory (two blocks
//          per SM), a grid of at most two blocks per SM walking the tiles. channels_last sources
//          and 16-bit NCHW planes read as they are, float32 only by the im2col tensor copies. Ahead
//          of medium where a block's time is its prologue and epilogue (reductions of one or two
//          chunks: the next tile's loads run under the epilogue), behind it on longer reductions (so
//          was the same tile at three blocks per SM, medium's count of MMA warpgroups:
//          docs/precision.md): the rule takes it for the short 16-bit ones (four chunks only to at
//          most 64 filters) on grids of at least two tiles a block.
using WgmmaWs = WgmmaWsTileConfig<128, 64, 3, 2>;
//   wide192  192 x 256, 3 warpgroups, 4 stages (one block per SM): a chunk of 192 positions brings
//          56 KB for 1.5x wide's multiply-adds, 0.78x its bytes per multiply-add, and the tile runs
//          faster than wide on the long 16-bit 3x3 layers (what still holds both is their schedule,
//          not their copies: docs/precision.md). The rule's in wide's place for 16-bit layers of
//          several taps whose A comes by the tensor copies, over at least two waves of its tiles;
//          never split (its float32 sums would not fit its stages).
using WgmmaWide192 = WgmmaTileConfig<192, 256, 4, 1>;

// The wgmma configs in the order of kWgmmaConfigNames: a config's index there (its name for
// set_config and last_choice) is its place in this list, checked against the names at compile time.
using WgmmaConfigs =
    std::tuple<WgmmaLarge, WgmmaMedium, WgmmaSmall, WgmmaTiny, WgmmaWide, WgmmaTall, WgmmaWide192, WgmmaWs>;
template <typename Cfg, size_t... I>
constexpr int wgmma_index_of(std::index_sequence<I...>) {
  constexpr bool same[] = {std::is_same_v<Cfg, std::tuple_element_t<I, WgmmaConfigs>>...};
  for (size_t i = 0; i < sizeof...(I); ++i)
    if (same[i]) return int(i);
  return -1;
}
template <typename Cfg>
constexpr int kWgmmaIndex = wgmma_index_of<Cfg>(std::make_index_sequence<std::tuple_size_v<WgmmaConfigs>>{});
static_assert(std::tuple_size_v<WgmmaConfigs> == std::size(kWgmmaConfigNames) &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaLarge>]) == "wgmma-large" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaMedium>]) == "wgmma-medium" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaSmall>]) == "wgmma-small" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaTiny>]) == "wgmma-tiny" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaWide>]) == "wgmma-wide" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaTall>]) == "wgmma-tall" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaWs>]) == "wgmma-ws" &&
                  std::string_view(kWgmmaConfigNames[kWgmmaIndex<WgmmaWide192>]) == "wgmma-wide192",
              "WgmmaConfigs follows kWgmmaConfigNames");
// Each wgmma config's destination channels a tile (kBN), by its index.
template <size_t... I>
constexpr std::array<int, sizeof...(I)> wgmma_tile_cols(std::index_sequence<I...>) {
  return {std::tuple_element_t<I, WgmmaConfigs>::kBN...};
}
constexpr auto kWgmmaTileCols = wgmma_tile_cols(std::make_index_sequence<std::tuple_size_v<WgmmaConfigs>>{});
constexpr int kWtRowBytes = 128;  // Wt's taps hold their channels padded to the widest chunk
static_assert(kWtRowBytes == TcWeightMap::kRowWords * 16, "a Wt row is the map's row of 16-byte words");

int vector_elems(at::ScalarType dtype) { return dtype == at::kFloat ? 4 : 8; }

constexpr int kMmaSyncConfigs = int(std::size(kTcConfigNames));

// The forced wgmma config (an index into kWgmmaConfigNames), or -1.
int forced_wgmma_config() {
  const int forced = forced_tc_config();
  return forced >= kMmaSyncConfigs ? forced - kMmaSyncConfigs : -1;
}

// Whether this call's tensor-core kernels are the wgmma ones: on an sm_90a device unless a tc-*
// config is forced. A forced wgmma config where they cannot run is a ValueError.
bool runs_wgmma() {
  const int forced = forced_tc_config();
  if (!wgmma_device()) {
    TORCH_CHECK_VALUE(forced < kMmaSyncConfigs, "torchconv.conv2d_gemm: config '",
                      kWgmmaConfigNames[std::max(forced - kMmaSyncConfigs, 0)],
                      "' (forced by set_config) runs on sm_90a GPUs (Hopper) only; this GPU or build runs the tc-* configs");
    return false;
  }
  return forced < 0 || forced >= kMmaSyncConfigs;
}

TcConv tc_launch(const LaunchMap& map, at::ScalarType dtype, const at::Tensor& dst) {
  TcConv cv{};
  static_cast<LaunchMap&>(cv) = map;
  const int elem = dtype == at::kFloat ? 4 : 2;
  const int vec = 16 / elem;
  cv.reduced = map.reduced_per_group(), cv.outputs = map.outputs_per_group();
  // Up to 4 words of channels per tap pack several taps into a chunk (tap words a power of two,
  // so that taps never straddle a chunk of either kernel).
  const int words = std::max(1, (cv.reduced + vec - 1) / vec);
  cv.packed = words <= 4;
  cv.tap_shift = words <= 1 ? 0 : words <= 2 ? 1 : 2;
  cv.red_pad = cv.packed ? vec << cv.tap_shift : round_up(std::max(cv.reduced, 1), kWtRowBytes / elem);
  cv.wt_row = round_up(map.R * map.S * cv.red_pad, kWtRowBytes / elem);
  // Wt's destination channels are padded for the widest tile the rule may pick (wide: > 128
  // channels), or the forced one's.
  const int forced = forced_wgmma_config();
  const bool wide_wt = cv.outputs > 128 || (forced >= 0 && kWgmmaTileCols[forced] > 128);
  cv.n_pad = round_up(std::max(cv.outputs, 1), wide_wt ? 256 : 128);
  cv.wt_tiled = runs_wgmma();  // the wgmma kernels copy B tiles in bulk
  cv.col_plane = map.col_H * map.col_W;
  cv.rows = int64_t(map.N) * cv.col_plane;
  cv.src_image = int64_t(map.src_H) * map.src_W * map.src_C;
  cv.dst_sn = dst.stride(0), cv.dst_sc = dst.stride(1), cv.dst_sh = dst.stride(2), cv.dst_sw = dst.stride(3);
  return cv;
}

// Launches a Wt relayout of `words` 16-byte words as launch(element, index, value): the word's place
// decoded in 32-bit math where the words allow; float32 Wt stored rounded to TF32 (the kernels read it
// as is), 16-bit types copied as bits (zero is all-zero bits).
template <typename T, typename Launch>
void relayout_words(int64_t words, Launch&& launch) {
  if (words == 0) return;
  auto run = [&](auto elem, auto value) {
    if (words < (int64_t(1) << 31))
      launch(elem, uint32_t{}, value);
    else
      launch(elem, int64_t{}, value);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if constexpr (std::is_same_v<T, float>) {
    run(float{}, Tf32Rounding{});
  } else {
    run(uint16_t{}, SameValue{});
  }
}

// A forward's or a grad_input's Wt into `wt` by tc_weight_relayout_transpose_kernel, where it applies: a
// contiguous float32 weight of 2 to kTransposeTaps taps, the reduced channels whole words (not
// packed), on any grid: it gains on grids of 64 blocks of 32 x 32 and up and is level with the word
// kernel on grids of 2-32, where its few blocks finish as soon as the word kernel's many small ones
// (docs/precision.md, "The Wt relayout").
template <typename T>
bool relayout_by_transpose(const at::Tensor& weight, const TcWeightMap& map, const at::Tensor& wt) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    const TcConv& cv = map.cv;
    const int taps = int(weight.size(2) * weight.size(3));
    if (!weight.is_contiguous() || cv.packed || taps < 2 || taps > kTransposeTaps ||
        cv.groups > 65535)
      return false;
    const dim3 grid(unsigned(cv.n_pad / kTransposeRows), unsigned(cv.red_pad / kTransposeRows), unsigned(cv.groups));
    tc_weight_relayout_transpose_kernel<<<grid, 256, 0, current_stream()>>>(
        weight.const_data_ptr<float>(), static_cast<uint4*>(wt.mutable_data_ptr()), map, taps, int(weight.size(3)));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return true;
  }
}

// Wt of launch `cv`, cached until the weight changes. A grad_input launch's Wt holds the taps of its
// phase, named in the tag (launch_taps_key).
template <typename T>
at::Tensor tc_weight(const at::Tensor& weight, const TcConv& cv) {
  const auto tag = [&] {
    return std::string("gemm_tc/") + (cv.wt_tiled ? "tiled/" : "") +
           (cv.transposed ? "transposed/" + launch_taps_key(cv) + "/" : "") + "n" + std::to_string(cv.n_pad) + "/" +
           std::to_string(cv.groups);
  };
  return cached_weight_transform(weight, tag, [&] {
    auto wt = new_workspace({int64_t(cv.groups) * cv.n_pad * cv.wt_row}, weight.options());
    const TcWeightMap map{cv, weight_strides(weight)};
    const int64_t words = wt.numel() * int64_t(sizeof(T)) / 16;
    if (relayout_by_transpose<T>(weight, map, wt)) return wt;
    relayout_words<T>(words, [&](auto elem, auto index, auto value) {
      using E = decltype(elem);
      using I = decltype(index);
      tc_weight_relayout_kernel<E, I><<<elementwise_blocks(words, 256), 256, 0, current_stream()>>>(
          static_cast<const E*>(weight.const_data_ptr()), static_cast<uint4*>(wt.mutable_data_ptr()), I(words), map,
          value);
    });
    return wt;
  });
}

// Blocks of a grid of bm x bn tiles over `cv`.
int64_t tile_blocks(const TcConv& cv, int bm, int bn) {
  return ceil_div(cv.rows, bm) * ceil_div(cv.outputs, bn) * cv.groups;
}

// Chunks of `chunk_bytes` in the whole reduction of `cv` (elements of `elem` bytes).
int reduction_chunks(const TcConv& cv, int elem, int chunk_bytes) {
  if (cv.packed) return int(ceil_div((int64_t(cv.R) * cv.S * 16) << cv.tap_shift, chunk_bytes));
  return cv.R * cv.S * int(ceil_div(int64_t(std::max(cv.reduced, 1)) * elem, chunk_bytes));
}

// The splits of a tile launched as one cluster (at most kMaxClusterSplits, cluster.cuh). A cluster's
// blocks run in one GPC at once, so fewer clusters of `splits` blocks fit the GPU than its block slots
// divided by `splits`: the clusters of each size the current GPU holds at once (0: none fits) with
// `smem` bytes of dynamic shared memory a block, asked once per kernel, size and device for every
// cluster size, so that a rule weighing several split counts looks them up once. The entries are never
// changed or erased, so a reference outlives the lock.
using ClustersBySize = std::array<int, kMaxClusterSplits + 1>;
// Each thread first looks in a few entries of its own (the kernels its last calls asked for), so a
// model's calls take no lock on the host path; a miss takes the lock and the map.
template <typename Kernel>
const ClustersBySize& tc_active_clusters_by_size(Kernel kernel, int threads, size_t smem) {
  using Key = std::tuple<const void*, int, size_t>;
  static std::mutex mutex;
  static std::map<Key, ClustersBySize> known;
  struct Recent {
    Key key;
    const ClustersBySize* clusters;
  };
  constexpr int kRecent = 8;
  thread_local std::array<Recent, kRecent> recent{};
  thread_local int next = 0;
  const Key key{reinterpret_cast<const void*>(kernel), int(c10::cuda::current_device()), smem};
  for (const Recent& r : recent)
    if (r.clusters != nullptr && r.key == key) return *r.clusters;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(key);
  if (it == known.end()) {
    ClustersBySize clusters{};
    for (int size = 2; size <= kMaxClusterSplits; ++size)
      clusters[size] = max_active_clusters(kernel, dim3(threads), smem, size);
    it = known.emplace(key, clusters).first;
  }
  recent[next] = {key, &it->second};
  next = (next + 1) % kRecent;
  return it->second;
}
// The clusters of each size the current GPU holds with one block an SM (the kernel's blocks asking
// for more than half an SM's shared memory): fewer than tc_active_clusters_by_size's where a kernel
// runs two blocks an SM, since a cluster may put two of its blocks on one SM, and fewer than the SMs
// divided by the size, since a cluster's blocks share one GPC (clusters of 5 or 6 leave a GPC's last
// SMs idle).
template <typename Kernel>
const ClustersBySize& tc_lone_clusters_by_size(Kernel kernel, int threads, size_t smem) {
  const size_t lone_smem =
      std::max(smem, size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>()) / 2 + 1);
  ensure_dynamic_smem(kernel, lone_smem, "conv2d_gemm");  // the attribute is a maximum; launches keep their size
  return tc_active_clusters_by_size(kernel, threads, lone_smem);
}
// Whether `blocks` tiles split `splits` ways run as clusters (`clusters` of them held at once) in no
// more waves than their blocks alone would take in `slots` block slots: a partly empty last wave of
// clusters costs a whole wave of the kernel, more than the workspace's round trip.
inline bool clusters_in_waves(int64_t blocks, int clusters, int64_t splits, int64_t slots) {
  return clusters > 0 && ceil_div(blocks, int64_t(clusters)) <= ceil_div(blocks * splits, slots);
}
template <typename Kernel>
int tc_active_clusters(Kernel kernel, int threads, size_t smem, int splits) {
  return splits >= 2 && splits <= kMaxClusterSplits ? tc_active_clusters_by_size(kernel, threads, smem)[splits] : 0;
}

// A driver function by name at the CUDA 12.0 ABI, or null where the driver has none (the runtime's
// error is cleared, so a missing entry point never surfaces as a later call's error).
template <typename Fn>
Fn driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// The driver's tiled tensor-map encoder, looked up once (null where the driver has none).
PFN_cuTensorMapEncodeTiled_v12000 tiled_encoder() {
  static const auto encode = driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  return encode;
}

template <typename T>
constexpr CUtensorMapDataType tensor_map_type() {
  return std::is_same_v<T, float>    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                     : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// A tiled tensor map of `rank` dimensions over `base` into `map`, 128-byte swizzle (the stage layout of
// B); false where the driver has no encoder or refuses the map.
template <typename T>
bool encode_tiled_map(CUtensorMap& map, const T* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                      const cuuint32_t* box) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tiled_encoder();
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return encode != nullptr &&
         encode(&map, tensor_map_type<T>(), cuuint32_t(rank), const_cast<T*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// args.b_map for TcWeightSource::kWeightRows: the weight at args.wt as a 2-D map of its rows (group x
// filter) of wt_row elements, boxes of `rows` rows x 128 bytes.
template <typename T>
bool encode_weight_rows_map(TcConvArgs<T>& args, int rows) {
  const TcConv& cv = args.cv;
  const cuuint64_t dims[2] = {cuuint64_t(cv.wt_row), cuuint64_t(int64_t(cv.groups) * cv.outputs)};
  const cuuint64_t strides[1] = {cuuint64_t(cv.wt_row) * sizeof(T)};
  const cuuint32_t box[2] = {cuuint32_t(128 / sizeof(T)), cuuint32_t(rows)};
  return encode_tiled_map(args.b_map, args.wt, 2, dims, strides, box);
}

// args.b_map for TcWeightSource::kWeightColumns: the channels_last `weight` (filters, channels a group,
// R, S) as a 4-D map over a filter's channels, its taps' columns and rows, and the filters, boxes of
// 64 channels (128 bytes) x one tap x 64 filters -- 64 rows of the tile's channels, one a filter.
template <typename T>
bool encode_weight_columns_map(TcConvArgs<T>& args, const at::Tensor& weight) {
  const cuuint64_t channels = cuuint64_t(weight.size(1)), s = cuuint64_t(weight.size(3)),
                   r = cuuint64_t(weight.size(2));
  const cuuint64_t dims[4] = {channels, s, r, cuuint64_t(weight.size(0))};
  const cuuint64_t strides[3] = {channels * sizeof(T), s * channels * sizeof(T), r * s * channels * sizeof(T)};
  const cuuint32_t chunk = 128 / sizeof(T), box[4] = {chunk, 1, 1, chunk};
  return encode_tiled_map(args.b_map, kernel_data<T>(weight), 4, dims, strides, box);
}

// The launch's last fields: the config's chunking of the reduction (only chunks that hold channels
// run; Wt is padded for the widest one) and the divisors the kernels split indices by.
template <typename T, typename Cfg>
void set_config_fields(TcConv& cv) {
  cv.chunks_per_tap = int(ceil_div(int64_t(std::max(cv.reduced, 1)) * int64_t(sizeof(T)), Cfg::kBKBytes));
  cv.chunks = reduction_chunks(cv, int(sizeof(T)), Cfg::kBKBytes);
  cv.chunks_per_tap_div = make_fast_divisor(uint32_t(cv.chunks_per_tap));
  cv.s_div = make_fast_divisor(uint32_t(cv.S));
  cv.col_plane_div = make_fast_divisor(uint32_t(std::max(cv.col_plane, 1)));
  cv.col_w_div = make_fast_divisor(uint32_t(std::max(cv.col_W, 1)));
}

// A launch's fields that follow from its config: set_config_fields, and the grid's position and
// destination-channel tiles as the divisors TcBlock splits a block index by (checked against the grid
// limit before they become 32-bit). Returns the launch's tiles.
template <typename T, typename Cfg>
int64_t set_launch_fields(TcConvArgs<T>& args) {
  set_config_fields<T, Cfg>(args.cv);
  const int64_t m_tiles = ceil_div(args.cv.rows, Cfg::kBM), n_tiles = ceil_div(args.cv.outputs, Cfg::kBN);
  const int64_t tiles = m_tiles * n_tiles * args.cv.groups;
  check_grid(tiles, "conv2d_gemm");
  args.m_tiles = make_fast_divisor(uint32_t(m_tiles)), args.n_tiles = make_fast_divisor(uint32_t(n_tiles));
  // (A kWeightColumns map is the same for every config: tc_conv encoded it.)
  if (args.b_source == TcWeightSource::kWeightRows)
    TORCH_CHECK(encode_weight_rows_map(args, Cfg::kBN), "conv2d_gemm: internal error: the weight's tensor map");
  return tiles;
}

// `splits` > 1 (wgmma only): the reduction is split across blockIdx.y, and the splits of a tile add
// their sums as one cluster (tc_cluster_split_sums) or, where the GPU cannot hold the cluster (and
// under the testing aid split_sums_through_workspace), through a workspace summed by
// tc_split_finish_kernel: the same bits. `whole_tiles` > 0 (a multiple of `splits`, clusters
// that the GPU holds): only the tiles after the first `whole_tiles` split, as clusters; the first
// ones run whole, `splits` of them to a cluster (TcConvArgs::whole_clusters).
template <typename T, typename Cfg, typename Kernel>
void launch_tc(Kernel kernel, const TcConvArgs<T>& args_in, const char* pass, const char* name, int splits = 1,
               int64_t whole_tiles = 0) {
  TcConvArgs<T> args = args_in;
  TcConv& cv = args.cv;
  const int64_t blocks = set_launch_fields<T, Cfg>(args);
  args.chunks_per_split = int(ceil_div(cv.chunks, splits));
  splits = int(ceil_div(cv.chunks, args.chunks_per_split));  // none empty
  constexpr size_t smem = Cfg::template smem_bytes<T>();
  ensure_dynamic_smem(kernel, smem, "conv2d_gemm");
  record_last_choice(pass, name, splits);
  // (A launch the rule sized for another kernel, whose clusters this one cannot hold, splits every tile.)
  const bool clusters = !split_sums_through_workspace();
  if (clusters && whole_tiles > 0 && splits > 1 && whole_tiles % splits == 0 && whole_tiles < blocks &&
      tc_active_clusters(kernel, Cfg::kThreads, smem, splits) > 0) {
    record_last_tail_splits(pass);
    args.cluster_sums = true;
    args.whole_clusters = int(whole_tiles / splits);
    record_workspace_bytes(0);
    launch_with_attributes(kernel, dim3(unsigned(args.whole_clusters + blocks - whole_tiles), unsigned(splits)),
                           dim3(Cfg::kThreads), smem, current_stream(), dim3(1, unsigned(splits)), false, args);
    return;
  }
  // The splits add their sums as clusters where the clusters take no more waves than the blocks
  // would alone (the rule counted kMinBlocks per SM), else through the workspace and
  // tc_split_finish_kernel.
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  if (clusters && splits > 1 &&
      clusters_in_waves(blocks, tc_active_clusters(kernel, Cfg::kThreads, smem, splits), splits, slots)) {
    args.cluster_sums = true;
    record_workspace_bytes(0);
    launch_with_attributes(kernel, dim3(unsigned(blocks), unsigned(splits)), dim3(Cfg::kThreads), smem,
                           current_stream(), dim3(1, unsigned(splits)), false, args);
    return;
  }
  at::Tensor partial;
  if (splits > 1) {
    partial = new_workspace({int64_t(splits) * cv.rows * cv.groups * cv.outputs},
                            at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, c10::cuda::current_device()));
    record_workspace_bytes(partial.numel() * int64_t(sizeof(float)));
    args.partial = partial.mutable_data_ptr<float>();
  }
  kernel<<<dim3(unsigned(blocks), unsigned(splits)), Cfg::kThreads, smem, current_stream()>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (splits > 1) {
    const int64_t total = cv.rows * cv.groups * cv.outputs;
    launch_dependent(tc_split_finish_kernel<T>, dim3(elementwise_blocks(total, 256)), dim3(256), args.partial, splits,
                     args.bias, args.out, cv);
  }
}

// The config rule: the largest tile whose grid still fills the GPU; wgmma on Hopper, mma.sync
// otherwise. `nchw_source`: the source is float32 NCHW or 16-bit NCHW planes (wgmma only, see
// is_nchw_source and is_nchw_planes_source).
// Grids that would not fill the GPU even with small tiles split a long reduction across blocks
// instead of taking the tiny tile: the tiny tile's pace is set by its per-chunk work (wait, barrier,
// loads issued), while large (medium) tiles with the reduction split keep four times the MMAs per
// chunk. The splits fill whole waves (see wave_filling_splits), at least kMinChunksPerSplit chunks
// each, at most a cluster's worth (kMaxClusterSplits), the FP32 sums within the workspace limit (the
// workspace holds them where the GPU cannot launch the cluster); the tiny tile takes what cannot be
// split so.
constexpr int kMinChunksPerSplit = 8;

// The driver's im2col tensor-map encoder, looked up once (null where the driver has none).
PFN_cuTensorMapEncodeIm2col_v12000 im2col_encoder() {
  static const auto encode = driver_entry_point<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
  return encode;
}

// The im2col map's bounding box of launch `cv` (W, H): a traversal at the launch's strides from its
// lower corner to its upper one visits exactly the column grid (col_H x col_W starting pixels per
// image).
struct Im2colCorners {
  int lower[2], upper[2];
};
Im2colCorners im2col_corners(const TcConv& cv) {
  return {{cv.col_ox, cv.col_oy},
          {cv.col_ox + (cv.col_W - 1) * cv.col_sx - (cv.src_W - 1), cv.col_oy + (cv.col_H - 1) * cv.col_sy - (cv.src_H - 1)}};
}

// Whether the copy engine describes launch `cv` as an im2col map (tma_takes checks the rest): the
// driver encodes such maps, the corners of a 4-D map are 8-bit, its traversal strides at most 8, and a
// copy's tap offsets (the last tap's, (R - 1) x the tap step) 16-bit.
bool im2col_map_fits(const TcConv& cv) {
  const Im2colCorners box = im2col_corners(cv);
  for (int v : {box.lower[0], box.lower[1], box.upper[0], box.upper[1]})
    if (v < -128 || v > 127) return false;
  return im2col_encoder() != nullptr && cv.col_sx <= 8 && cv.col_sy <= 8 &&
         int64_t(cv.R - 1) * cv.tap_sy < 65536 && int64_t(cv.S - 1) * cv.tap_sx < 65536;
}

// `map`: the NHWC tensor `src` of launch `cv` as an im2col tensor map -- copies of `pixels` positions
// x 128 bytes of channels, 128-byte swizzle (the stage layout), over im2col_corners' box. False where
// the copy engine cannot describe the launch (im2col_map_fits; the callers check the rest) or the
// driver does not encode it.
template <typename T>
bool encode_im2col(CUtensorMap& map, const T* src, const TcConv& cv, int pixels) {
  const PFN_cuTensorMapEncodeIm2col_v12000 encode = im2col_encoder();
  if (!im2col_map_fits(cv)) return false;
  Im2colCorners box = im2col_corners(cv);
  const cuuint64_t e = sizeof(T);
  cuuint64_t dims[4] = {cuuint64_t(cv.src_C), cuuint64_t(cv.src_W), cuuint64_t(cv.src_H), cuuint64_t(cv.N)};
  cuuint64_t strides[3] = {dims[0] * e, dims[0] * dims[1] * e, dims[0] * dims[1] * dims[2] * e};
  cuuint32_t element_strides[4] = {1, cuuint32_t(cv.col_sx), cuuint32_t(cv.col_sy), 1};
  return encode(&map, tensor_map_type<T>(), 4, const_cast<T*>(src), dims, strides, box.lower, box.upper,
                cuuint32_t(128 / e), cuuint32_t(pixels), element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// args.a_map: the launch's NHWC source for TcIm2colLoader (tma_takes checked what encode_im2col does not).
template <typename T>
bool encode_im2col_map(TcConvArgs<T>& args, int pixels) {
  return encode_im2col(args.a_map, args.src, args.cv, pixels);
}

template <typename T, typename Cfg, bool kNchwSource, bool kTmaA = false>
void launch_wgmma(const TcConvArgs<T>& args, const char* pass, int splits = 1, int64_t whole_tiles = 0) {
  const char* name = kWgmmaConfigNames[kWgmmaIndex<Cfg>];
  if constexpr (kTmaA) {
    TcConvArgs<T> with_map = args;
    if (encode_im2col_map(with_map, Cfg::kBM)) {
      if constexpr (sizeof(T) == 2)
        if (args.b_source == TcWeightSource::kWeightColumns)
          return launch_tc<T, Cfg>(tc_conv_wgmma_kernel<T, Cfg, false, true, true>, with_map, pass, name, splits,
                                   whole_tiles);
      if constexpr (std::is_same_v<T, float>)
        if (args.a_raw)
          return launch_tc<T, Cfg>(tc_conv_wgmma_kernel<T, Cfg, false, true, false, true>, with_map, pass, name,
                                   splits, whole_tiles);
      return launch_tc<T, Cfg>(tc_conv_wgmma_kernel<T, Cfg, false, true>, with_map, pass, name, splits, whole_tiles);
    }
  }
  // (tc_conv reads a weight's columns only where A comes by the tensor copies.)
  TORCH_CHECK(args.b_source != TcWeightSource::kWeightColumns,
              "conv2d_gemm: internal error: the weight's columns without an im2col map");
  launch_tc<T, Cfg>(tc_conv_wgmma_kernel<T, Cfg, kNchwSource>, args, pass, kWgmmaConfigNames[kWgmmaIndex<Cfg>], splits,
                    whole_tiles);
}

// The warp-specialized tile (a grid of at most kMinBlocks blocks per SM walking the tiles) for launch
// `args` where it takes it -- a channels_last source, gathered (16-bit) or by im2col tensor copies,
// or 16-bit NCHW planes read as they are (an NCHW float32 source goes to the MMAs from registers,
// which this tile does not do) -- or false, launching nothing.
template <typename T, typename Cfg, bool kNchwSource, bool kTmaA>
bool try_launch_wgmma_ws(const TcConvArgs<T>& args_in, const char* pass) {
  if constexpr (kNchwSource && sizeof(T) != 2) {
    return false;
  } else {
    TcConvArgs<T> args = args_in;
    bool tma = false;
    if constexpr (kTmaA && !kNchwSource) tma = encode_im2col_map(args, Cfg::kBM);
    // A gathered float32 A, or one read as it is, would need rounding to TF32 (this tile's MMAs read A
    // from shared memory).
    if (sizeof(T) != 2 && (!tma || args.a_raw)) return false;
    const int64_t tiles = set_launch_fields<T, Cfg>(args);
    args.chunks_per_split = args.cv.chunks;
    constexpr size_t smem = Cfg::template smem_bytes<T>();
    const int64_t grid = std::min<int64_t>(tiles, int64_t(Cfg::kMinBlocks) * sm_count());
    record_last_choice(pass, kWgmmaConfigNames[kWgmmaIndex<Cfg>], 1);
    record_workspace_bytes(0);
    auto launch = [&](auto kernel) {
      ensure_dynamic_smem(kernel, smem, "conv2d_gemm");
      kernel<<<unsigned(grid), Cfg::kThreads, smem, current_stream()>>>(args);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const bool columns = args.b_source == TcWeightSource::kWeightColumns;
    TORCH_CHECK(tma || !columns, "conv2d_gemm: internal error: the weight's columns without an im2col map");
    if constexpr (kNchwSource) {
      launch(tc_conv_wgmma_ws_kernel<T, Cfg, false, false, true>);
    } else {
      if constexpr (sizeof(T) == 2)
        if (columns) return launch(tc_conv_wgmma_ws_kernel<T, Cfg, true, true>), true;
      if (tma) launch(tc_conv_wgmma_ws_kernel<T, Cfg, true>);
      else if constexpr (sizeof(T) == 2) launch(tc_conv_wgmma_ws_kernel<T, Cfg, false>);
    }
    return true;
  }
}

// The warp-specialized config forced: where it cannot take the launch, a ValueError naming it.
template <typename T, typename Cfg, bool kNchwSource, bool kTmaA>
void launch_wgmma_ws(const TcConvArgs<T>& args, const char* pass) {
  const bool launched = try_launch_wgmma_ws<T, Cfg, kNchwSource, kTmaA>(args, pass);
  TORCH_CHECK_VALUE(launched,
                    "torchconv.conv2d_gemm: the ", kWgmmaConfigNames[kWgmmaIndex<Cfg>],
                    " config takes float16 / bfloat16 sources (channels_last, or NCHW planes read as they are), "
                    "and float32 (TF32) ones only where A comes by im2col tensor copies; this launch's source is ",
                    kNchwSource ? "NCHW float32" : "float32 gathered by the threads",
                    " (set_config('gemm', '') for the rule)");
}

// The launch-time estimate behind the cluster splits of the 16-bit rule (run_wgmma): a launch's
// blocks are latency-bound, each taking about the same time per chunk whether one or two share an SM,
// so a launch takes its waves of blocks (of clusters, where split) times a block's chunks, plus a
// block's fixed cost in chunk-times (pipeline fill, epilogue, the clusters' exchange). A wide tile's
// chunk, twice large's multiply-adds at one block per SM, costs 7/8 of large's two blocks' chunks.
// Fitted to the bfloat16 and TF32 forward and grad_input of the resnet + yolo 3x3 layers with each
// config at 1-6 splits (docs/precision.md).
constexpr int kBlockFixedChunks = 20;
constexpr double kWideChunkCost = 0.875;
// Two refinements for 16-bit launches, from a sweep that timed the device's work alone (the earlier
// sweeps' small layers read the host path): a block of a tile that runs two an SM (large) alone on
// its SM -- a launch of at most one such block an SM -- takes its chunks at the SM's multiply-add
// pace, half a shared block's chunk-time, so its splits into clusters move no multiply-adds off the
// busiest SM; and a split's clusters then add their FP32 sums through distributed shared memory,
// kClusterExchangeChunks16 chunk-times (what the wide tile's clusters of two took beyond the unsplit
// large tile of the same multiply-adds an SM). TF32's lone blocks stay near their latency's pace
// and its estimate keeps the fit above (docs/precision.md).
constexpr double kLoneChunkCost16 = 0.5;
constexpr int kClusterExchangeChunks16 = 6;  // the wide tile's; a tile of half its FP32 sums half of it
// The estimate's splits hold at least 16 chunks: with fewer it misjudged the one case it was tried on
// (R7's forward, 18 chunks: 2 wide splits lost to the unsplit large and small tiles).
constexpr int kMinChunksPerClusterSplit = 16;
// But splits whose large blocks each have an SM to themselves hold at least 3: on grids of a few tiles
// (small batches) those blocks' chunks are nearly all of the launch's time, and splits down to 3-5
// chunks kept paying in 16-bit and TF32 alike (docs/precision.md).
constexpr int kMinChunksPerLoneSplit = 3;
// TF32 1x1 launches (from NCHW: A from planes into registers) have terms of their own, fitted to a
// sweep of R8, R11, Y9, Y13 and Y19 at batches 1-32, forward and grad_input, large and wide at 1-8
// splits (docs/precision.md): a block's fixed cost 6.5 chunk-times, a lone large block's chunk 0.65
// of a shared one's (its loads, not its latency, bound it), a wide block's chunk 0.85 and its fixed
// cost 8; the last wave's splits by the same terms. A channels_last source takes the same terms, so
// that the two give the same bits (test_tf32_1x1_nchw_source_gives_the_channels_last_bits). The
// estimate has no term for the tiny tile the rule falls back on, which ran up to 1.7x faster than
// the splits it would put ahead of it on the shortest reductions (2-8 chunks on 7-52 tiles): large
// splits are taken only where lone and at most kOneTap32LoneSplitMargin of the unsplit large launch
// (split large blocks two an SM lost to it, and lone ones put at 0.78-0.79), and wide splits hold at
// least kOneTap32WideMinChunks chunks (a wide block's fixed cost paid for one chunk lost to it too).
constexpr double kOneTap32FixedChunks = 6.5;
constexpr double kOneTap32LoneSplitMargin = 0.75;
constexpr int kOneTap32WideMinChunks = 2;
constexpr double kOneTap32LoneChunkCost = 0.65;
constexpr double kOneTap32WideChunkCost = 0.85;
constexpr double kOneTap32WideFixedChunks = 8.0 / kOneTap32WideChunkCost;  // in the wide tile's chunk-times

// Splits of the last wave's tiles only: at least this many chunks a split, and taken only where the
// estimate puts them this far ahead of the best other launch (their clusters' exchange of sums, which
// the estimate leaves out, costs a tile's FP32 sums through distributed shared memory).
constexpr int kMinChunksPerTailSplit = 4;
constexpr double kTailSplitMargin = 0.9;

struct SplitEstimate {
  int splits;
  double time;              // in chunk-times of a block
  int64_t whole_tiles = 0;  // > 0: the tiles after these split, the first run whole (launch_tc)
  bool lone = false;        // split, each block with an SM to itself (cluster_splits_by_waves)
};

// One split estimate's terms (cluster_splits_by_waves), in chunk-times of the tile's block: each fitted
// model (the conv launches' three in conv_split_terms, grad_weight's) is one of these.
struct SplitTerms {
  double fixed_chunks = 0.0;      // a block's fixed cost (pipeline fill, epilogue)
  int min_chunks = 1;             // the chunks a split holds at least
  double lone_chunk_cost = 1.0;   // a chunk of a block with an SM to itself (1: the latency's pace)
  int exchange_chunks = 0;        // a split launch's cost beyond its blocks (the clusters' exchange of sums)
  int lone_min_chunks = 0;        // the chunks a lone split holds at least (0: min_chunks)
  bool lone_splits_only = false;  // splits weighed only where lone, ...
  double split_margin = 1.0;      // ... and taken only at most this share of the unsplit launch's time
  double chunk_cost = 1.0;        // the tile's chunk in a large block's chunk-times (cluster_split_estimate)
};

// The split count, 1 or 2..kMaxClusterSplits as clusters of at least `terms.min_chunks` chunks each,
// that minimizes a launch's estimated time: its waves of blocks (of clusters, where split) times a
// block's chunks plus `terms.fixed_chunks`, and `terms.exchange_chunks` where split. A launch whose
// every block has an SM to itself takes its chunks at `terms.lone_chunk_cost` each, and its splits need
// only `terms.lone_min_chunks` chunks each: at most one block an SM unsplit, and split, fewer clusters
// than `lone_clusters` (the GPU's clusters of each size at one block an SM; null: none counted lone).
// Fewer, not as many: a launch that would fill every GPC's SMs exactly leaves no room for a placement
// short of the ideal (17 x 17 outputs of 1024 filters at batch 1, 24 clusters of 5, ran slower than in
// clusters of 4, as if not lone). Splits are counted only where the clusters take no more waves than
// the blocks alone (where the launches run them as clusters), and, `terms.lone_splits_only`, only lone
// ones, at most `terms.split_margin` of the unsplit launch's time. `clusters_by_size`: the GPU's active
// clusters of each size for the kernel. The times are in the tile's chunk-times (`terms.chunk_cost`
// not applied).
inline SplitEstimate cluster_splits_by_waves(int64_t blocks, int64_t chunks, int64_t slots,
                                             const ClustersBySize& clusters_by_size,
                                             const ClustersBySize* lone_clusters, const SplitTerms& terms) {
  const int64_t sms = sm_count();
  auto lone = [&](int64_t splits) {
    return splits == 1 ? blocks <= sms : lone_clusters != nullptr && blocks < (*lone_clusters)[splits];
  };
  auto time = [&](int64_t waves, int64_t splits) {
    const double pace = lone(splits) ? terms.lone_chunk_cost : 1.0;
    return double(waves) * (double(ceil_div(chunks, splits)) * pace + terms.fixed_chunks) +
           (splits > 1 ? terms.exchange_chunks : 0);
  };
  SplitEstimate best{1, time(ceil_div(blocks, slots), 1)};
  const double unsplit = best.time;
  for (int splits = 2; splits <= kMaxClusterSplits; ++splits) {
    if (terms.lone_splits_only && !lone(splits)) continue;
    const int least = lone(splits) && terms.lone_min_chunks > 0 ? terms.lone_min_chunks : terms.min_chunks;
    if (chunks < int64_t(splits) * least) continue;
    // The launches split a reduction into ceil(chunks / splits) chunks a split and drop empty splits,
    // so a count whose splits of that length need fewer (28 chunks in 8 splits of 4: 7) would launch
    // as the fewer, whose clusters may not fit the waves (then its sums would go through a workspace
    // the rule did not size); the fewer is weighed in its own turn.
    if (ceil_div(chunks, ceil_div(chunks, int64_t(splits))) != splits) continue;
    const int clusters = clusters_by_size[splits];
    if (!clusters_in_waves(blocks, clusters, splits, slots)) continue;
    const double t = time(ceil_div(blocks, int64_t(clusters)), splits);
    if (t < best.time && t <= terms.split_margin * unsplit) best = {splits, t, 0, lone(splits)};
  }
  return best;
}

// The best launch, by the estimate above, that splits only the tiles of the last wave: whole waves
// of clusters whose blocks each take a whole tile (`splits` tiles a cluster), then the rest of the
// tiles split `splits` ways, each a cluster, at least `min_chunks` chunks a split. A grid just over
// whole waves otherwise ends on a wave of a few blocks as long as a full one (a block's pace is its
// chunks' latency, not the SM's share). splits = 1 where no such launch exists.
inline SplitEstimate tail_splits_by_waves(int64_t blocks, int64_t chunks, const ClustersBySize& clusters_by_size,
                                          double fixed_chunks, int min_chunks) {
  SplitEstimate best{1, 0.0};
  for (int splits = 2; splits <= kMaxClusterSplits && chunks >= int64_t(splits) * min_chunks; ++splits) {
    if (ceil_div(chunks, ceil_div(chunks, int64_t(splits))) != splits) continue;  // as cluster_splits_by_waves
    const int64_t clusters = clusters_by_size[splits], per_wave = clusters * splits;
    if (clusters == 0 || blocks < per_wave) continue;
    const int64_t whole = blocks / per_wave * per_wave, rest = blocks - whole;
    if (rest == 0) continue;
    const double t = double(whole / per_wave) * (double(chunks) + fixed_chunks) +
                     double(ceil_div(rest, clusters)) * (double(ceil_div(chunks, int64_t(splits))) + fixed_chunks);
    if (best.splits == 1 || t < best.time) best = {splits, t, whole};
  }
  return best;
}

// The conv launches' split terms for config Cfg: TF32 1x1 launches by the kOneTap32 terms; the others
// by the first fit (kBlockFixedChunks, kWideChunkCost, at least kMinChunksPerClusterSplit chunks a split,
// kMinChunksPerLoneSplit for lone large blocks), with the 16-bit launches' lone chunk and clusters'
// exchange.
template <typename T, typename Cfg>
SplitTerms conv_split_terms(const TcConv& cv) {
  constexpr bool wide = Cfg::kBN == 256;
  constexpr bool shares_sm = Cfg::kMinBlocks > 1;  // a tile whose blocks may run lone, one an SM
  SplitTerms terms;
  if (sizeof(T) == 4 && cv.R * cv.S == 1) {
    terms.fixed_chunks = wide ? kOneTap32WideFixedChunks : kOneTap32FixedChunks;
    terms.chunk_cost = wide ? kOneTap32WideChunkCost : 1.0;
    terms.min_chunks = wide ? kOneTap32WideMinChunks : 1;
    if (shares_sm) {
      terms.lone_chunk_cost = kOneTap32LoneChunkCost;
      terms.lone_min_chunks = 1;
      terms.lone_splits_only = true;
      terms.split_margin = kOneTap32LoneSplitMargin;
    }
    return terms;
  }
  terms.fixed_chunks = kBlockFixedChunks;
  terms.chunk_cost = wide ? kWideChunkCost : 1.0;
  terms.min_chunks = kMinChunksPerClusterSplit;
  terms.lone_min_chunks = shares_sm ? kMinChunksPerLoneSplit : 0;
  if (sizeof(T) == 2) {
    terms.lone_chunk_cost = shares_sm ? kLoneChunkCost16 : 1.0;
    terms.exchange_chunks = kClusterExchangeChunks16 * Cfg::kBM * Cfg::kBN / (WgmmaWide::kBM * WgmmaWide::kBN);
  }
  return terms;
}

// The split count (1 or 2..kMaxClusterSplits as clusters, by conv_split_terms) that minimizes config
// Cfg's estimated time for `cv`, with that time in chunk-times of a large block; or, `with_tail`,
// splits of the last wave's tiles alone where those are ahead by kTailSplitMargin.
template <typename T, typename Cfg, typename Kernel>
SplitEstimate cluster_split_estimate(Kernel kernel, const TcConv& cv, bool with_tail) {
  const int64_t chunks = reduction_chunks(cv, int(sizeof(T)), Cfg::kBKBytes);
  const int64_t blocks = tile_blocks(cv, Cfg::kBM, Cfg::kBN);
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  const SplitTerms terms = conv_split_terms<T, Cfg>(cv);
  constexpr size_t smem = Cfg::template smem_bytes<T>();
  ensure_dynamic_smem(kernel, smem, "conv2d_gemm");  // before the occupancy query, as launch_tc
  const ClustersBySize& clusters_by_size = tc_active_clusters_by_size(kernel, Cfg::kThreads, smem);
  const ClustersBySize* lone_clusters =
      Cfg::kMinBlocks > 1 ? &tc_lone_clusters_by_size(kernel, Cfg::kThreads, smem) : nullptr;
  SplitEstimate best = cluster_splits_by_waves(blocks, chunks, slots, clusters_by_size, lone_clusters, terms);
  const SplitEstimate tail = with_tail ? tail_splits_by_waves(blocks, chunks, clusters_by_size, terms.fixed_chunks,
                                                              kMinChunksPerTailSplit)
                                       : SplitEstimate{1, 0.0};
  if (tail.splits >= 2 && tail.time < kTailSplitMargin * best.time) best = tail;
  best.time *= terms.chunk_cost;
  return best;
}

// The kernel launch_wgmma runs for config Cfg (with A by tensor copies where the map encodes).
template <typename T, typename Cfg, bool kNchwSource, bool kTmaA>
constexpr auto wgmma_kernel() {
  if constexpr (kTmaA) return tc_conv_wgmma_kernel<T, Cfg, false, true>;
  else return tc_conv_wgmma_kernel<T, Cfg, kNchwSource>;
}

template <typename T, bool kNchwSource, bool kTmaA = false>
void run_wgmma(const TcConvArgs<T>& args, const char* pass) {
  const TcConv& cv = args.cv;
  auto blocks = [&](int bm, int bn) { return tile_blocks(cv, bm, bn); };
  const int64_t sms = sm_count();
  switch (forced_wgmma_config()) {  // a config forced by set_config runs as named, unsplit
    case kWgmmaIndex<WgmmaLarge>: return launch_wgmma<T, WgmmaLarge, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaMedium>: return launch_wgmma<T, WgmmaMedium, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaSmall>: return launch_wgmma<T, WgmmaSmall, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaTiny>: return launch_wgmma<T, WgmmaTiny, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaWide>: return launch_wgmma<T, WgmmaWide, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaTall>: return launch_wgmma<T, WgmmaTall, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaWs>: return launch_wgmma_ws<T, WgmmaWs, kNchwSource, kTmaA>(args, pass);
    case kWgmmaIndex<WgmmaWide192>: return launch_wgmma<T, WgmmaWide192, kNchwSource, kTmaA>(args, pass);
    default: break;  // the rule
  }
  // 16-bit launches of at most two chunks and 256 destination channels, or of four chunks and 64
  // (1x1 layers of up to 128 channels, or 256 to 64 filters; an RGB stem's forward), ungrouped: a
  // block's time is its prologue and epilogue, which the warp-specialized tile runs under the next
  // tile's loads -- where its blocks walk at least two tiles each; with fewer, the tiles of medium's
  // three blocks per SM take fewer waves. Four chunks to 128 filters stay on the rule below. From NCHW
  // planes at most 128 destination channels: each 64-filter tile reads its planes again, and two
  // chunks to 256 channels over a large grid (Y9's grad_input) ran behind the large tile.
  const bool ws_walks = blocks(WgmmaWs::kBM, WgmmaWs::kBN) >= 2 * int64_t(WgmmaWs::kMinBlocks) * sms;
  const int ws_chunks = reduction_chunks(cv, int(sizeof(T)), WgmmaWs::kBKBytes);
  const int ws_max_outputs = kNchwSource ? 128 : 256;
  const bool ws_short = (ws_chunks <= 2 && cv.outputs <= ws_max_outputs) || (ws_chunks <= 4 && cv.outputs <= 64);
  if (sizeof(T) == 2 && cv.groups == 1 && ws_short && ws_walks &&
      try_launch_wgmma_ws<T, WgmmaWs, kNchwSource, kTmaA>(args, pass))
    return;
  const bool wide = cv.outputs > 64;
  const int chunks = reduction_chunks(cv, sizeof(T), WgmmaWide::kBKBytes);
  const bool one_tap = cv.R * cv.S == 1;
  const bool two_waves = blocks(128, 256) >= 2 * sms, one_wave_long = chunks >= 8 && blocks(128, 256) >= sms;
  // 16-bit 1x1 launches (A by the tensor copies) run slower in wide blocks than in large ones but from
  // two waves over at least 16 chunks (1024 channels): the rule below, and their last waves' splits.
  const bool wide_blocks_lose = one_tap && sizeof(T) == 2 && !(two_waves && chunks >= 16);
  // Launches of more than 64 destination channels split their reduction as clusters of the large or
  // wide tile where the estimate says the splits' shorter blocks more than pay for their extra waves:
  // grids of a few tiles (7 x 7 outputs of 512 channels), grids just over whole waves of tiles (17 x
  // 17 outputs of 512 or 1024 channels), these splitting only the last wave's tiles; TF32 1x1 launches
  // by terms of their own (kOneTap32*). Elsewhere, the rule below.
  if (wide) {
    SplitEstimate best =
        cluster_split_estimate<T, WgmmaLarge>(wgmma_kernel<T, WgmmaLarge, kNchwSource, kTmaA>(), cv, true);
    bool best_wide = false;
    // TF32 splits of the large tile whose blocks each keep an SM to themselves run ahead of the wide
    // tile's launches, which the estimate's wide chunk (fitted with large blocks two an SM) puts
    // ahead: a wide block's chunk, twice the TF32 multiply-adds, took 1.15-1.3x a lone large one's
    // (R9, R12 and Y18's grad_input at batch 1; docs/precision.md).
    const bool lone_tf32_splits = sizeof(T) == 4 && !one_tap && best.splits >= 2 && best.lone;
    if (cv.outputs > 128 && !lone_tf32_splits) {
      const SplitEstimate w = cluster_split_estimate<T, WgmmaWide>(
          wgmma_kernel<T, WgmmaWide, kNchwSource, kTmaA>(), cv, !wide_blocks_lose);
      if (w.time < best.time) best = w, best_wide = true;
    }
    if (best.splits >= 2 && best_wide)
      return launch_wgmma<T, WgmmaWide, kNchwSource, kTmaA>(args, pass, best.splits, best.whole_tiles);
    if (best.splits >= 2)
      return launch_wgmma<T, WgmmaLarge, kNchwSource, kTmaA>(args, pass, best.splits, best.whole_tiles);
  }
  // The wide tile: more than 128 destination channels and at least two waves of its tiles. With A
  // from NCHW planes into registers (1x1 TF32) it wins from one full wave on where the reduction has
  // at least 8 chunks (half the B bytes per MMA) and loses with shorter reductions even over two
  // waves: the store of the output tile is then a large part of a block's time, and large tiles, two
  // blocks per SM, overlap one block's stores with the other's loads. Gathered from channels_last
  // (1x1 TF32) it wins in both cases; by the tensor copies (16-bit 1x1) it loses up to 8 chunks
  // (512 channels) even over two waves. 16-bit NCHW planes (TcNchwPlanesLoader, not swept) take the
  // 16-bit rule.
  bool wide_tile = two_waves && !wide_blocks_lose;
  if (kNchwSource && sizeof(T) == 4)
    wide_tile = one_wave_long;
  else if (one_tap && sizeof(T) == 4)
    wide_tile = two_waves || one_wave_long;
  wide_tile = wide_tile && cv.outputs > 128;
  if (kTmaA && sizeof(T) == 2 && !one_tap && wide_tile && blocks(WgmmaWide192::kBM, WgmmaWide192::kBN) >= 2 * sms)
    return launch_wgmma<T, WgmmaWide192, kNchwSource, kTmaA>(args, pass);
  if (wide_tile) return launch_wgmma<T, WgmmaWide, kNchwSource, kTmaA>(args, pass);
  // Large tiles also where only small ones would fill a wave: each large block then has an SM to
  // itself and runs at its pace, the busiest SM doing the multiply-adds of small's two blocks over
  // fewer bytes a multiply-add (large ahead in 16-bit and TF32 alike: docs/precision.md).
  if (wide && blocks(64, 128) >= sms) return launch_wgmma<T, WgmmaLarge, kNchwSource, kTmaA>(args, pass);
  if (!wide && blocks(128, 64) >= sms) return launch_wgmma<T, WgmmaMedium, kNchwSource, kTmaA>(args, pass);
  {
    const int64_t base = wide ? blocks(128, 128) : blocks(128, 64);
    const int64_t per_sm = wide ? WgmmaLarge::kMinBlocks : WgmmaMedium::kMinBlocks;
    const int64_t split_bytes = std::max<int64_t>(cv.rows * cv.groups * cv.outputs * int64_t(sizeof(float)), 1);
    const int64_t cap = std::min({int64_t(reduction_chunks(cv, sizeof(T), WgmmaLarge::kBKBytes) / kMinChunksPerSplit),
                                  workspace_limit_bytes() / split_bytes, int64_t(kMaxClusterSplits)});
    const int splits = int(wave_filling_splits(base, per_sm * sms, cap));
    if (splits >= 2 && wide) return launch_wgmma<T, WgmmaLarge, kNchwSource, kTmaA>(args, pass, splits);
    if (splits >= 2) return launch_wgmma<T, WgmmaMedium, kNchwSource, kTmaA>(args, pass, splits);
  }
  return launch_wgmma<T, WgmmaTiny, kNchwSource, kTmaA>(args, pass);
}

template <typename T>
void run_tc(const TcConvArgs<T>& args, const char* pass, bool nchw_source, bool tma_source) {
  if (args.cv.wt_tiled) {  // runs_wgmma(), decided when Wt was laid out
    TORCH_CHECK(!nchw_source || args.cv.R * args.cv.S == 1,
                "conv2d_gemm: internal error: an NCHW source of a launch with several taps");
    if (nchw_source) return run_wgmma<T, true>(args, pass);
    if (tma_source) return run_wgmma<T, false, true>(args, pass);
    return run_wgmma<T, false>(args, pass);
  }
  TORCH_CHECK(!nchw_source, "conv2d_gemm: internal error: an NCHW source outside the wgmma kernel");
  const TcConv& cv = args.cv;
  auto blocks = [&](int bm, int bn) { return tile_blocks(cv, bm, bn); };
  const int64_t sms = sm_count();
  int pick = forced_tc_config();  // forced: an index into kTcConfigNames (runs_wgmma() was false)
  if (pick < 0) pick = cv.outputs > 64 && blocks(128, 128) >= sms ? 0 : blocks(128, 64) >= sms ? 1 : 2;
  if (pick == 0) return launch_tc<T, TcLarge>(tc_conv_kernel<T, TcLarge>, args, pass, kTcConfigNames[0]);
  if (pick == 1) return launch_tc<T, TcMedium>(tc_conv_kernel<T, TcMedium>, args, pass, kTcConfigNames[1]);
  return launch_tc<T, TcSmall>(tc_conv_kernel<T, TcSmall>, args, pass, kTcConfigNames[2]);
}

// Whether the kernels read `t` as NCHW: float32 contiguous on the wgmma kernel (a tensor contiguous in
// both formats reads the same either way). tc_source decides which sources stay NCHW.
bool is_nchw_source(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat && t.is_contiguous() && runs_wgmma();
}

// Whether the wgmma kernel reads a 16-bit NCHW source `t` as it is (TcNchwPlanesLoader), for a launch
// that reads its planes whole (`whole_planes`: reads_whole_planes): planes of whole 8-byte half-words
// on an 8-byte boundary, so that each copy is 4 positions of one image (8 where planes are whole
// 16-byte words on a 16-byte boundary: nchw_words). A 1x1 layer reads each element once, so a
// channels_last copy would double its traffic.
bool is_nchw_planes_source(const at::Tensor& t, bool whole_planes) {
  return whole_planes && is_reduced_float(t.scalar_type()) && t.dim() == 4 && t.is_contiguous() && runs_wgmma() &&
         t.size(2) * t.size(3) % 4 == 0 && aligned_to(t.const_data_ptr(), 8);
}

// Whether `source` (from channels_last_padded of `t`) is a copy: in float32, rounded to TF32.
bool is_copy(const at::Tensor& source, const at::Tensor& t) { return !source.is_same(t); }

// The source of a forward or grad_input as tc_source chose it: the tensor the kernels read, whether
// they read it as NCHW (a tensor contiguous in both formats reads the same either way, so the choice,
// not the tensor, says which loader runs), and whether it is a float32 copy rounded to TF32.
struct TcSource {
  at::Tensor tensor;
  bool nchw;
  bool rounded;
};

// Whether the wgmma kernel's float32 A tiles may go to the MMAs from registers, rounded to TF32 there
// (tc_conv_wgmma_tile's kRawA): not in the warp-specialized tile, whose MMAs read A from shared memory
// (forced), nor under the testing aid's rounded copies.
bool tf32_register_tiles() {
  return forced_wgmma_config() != kWgmmaIndex<WgmmaWs> && tf32_source_reads() != Tf32SourceReads::kRoundedCopies;
}

// Whether launch tiles of `src` go to the MMAs from registers, rounded there: a float32 channels_last
// source read as it is (tc_source copies it, rounded, where the register tiles do not run).
template <typename T>
bool reads_raw_a(const TcSource& src) {
  return std::is_same_v<T, float> && !src.nchw && !src.rounded;
}

// Whether the wgmma kernel's A tiles come by im2col tensor copies (TcIm2colLoader) for a launch whose
// source is not NCHW (tc_source's other sources are dense channels_last on a 16-byte boundary):
// chunks of one tap's channels (not packed) that stay within the group's channels, source offsets
// that grow with the taps. A float32 tile goes to the MMAs from registers, rounded to TF32 there,
// where tf32_register_tiles; otherwise the copies take only a source rounded when copied
// (`src_rounded`, tc_source). The map's corners, strides and tap offsets are checked when it is
// encoded (encode_im2col_map).
template <typename T>
bool tma_takes(const TcConv& cv, bool src_rounded) {
  const int chunk = 128 / int(sizeof(T));
  const bool rounds_a = !std::is_same_v<T, float> || src_rounded || tf32_register_tiles();
  return cv.wt_tiled && !cv.packed && rounds_a && (cv.groups == 1 || cv.reduced % chunk == 0) && cv.tap_sx >= 0 &&
         cv.tap_sy >= 0;
}

// Whether the launch's positions are the source's pixels in order through a single tap (a 1x1 layer
// with stride 1 and no padding, or the matching grad_input): an NCHW source is then read as whole
// planes (TcNchwLoader's 16-byte copies where a plane is a whole number of words).
bool reads_whole_planes(const TcConv& cv) {
  return cv.R == 1 && cv.S == 1 && cv.col_sy == 1 && cv.col_sx == 1 && cv.col_oy == 0 && cv.col_ox == 0 &&
         cv.col_H == cv.src_H && cv.col_W == cv.src_W;
}

// Whether a destination at `out` takes a quad of channels as one store (the cluster ends' dst_quads and
// gw_quads): channels adjacent (`channel_stride` 1), a group's `channels` and every other stride a
// multiple of 4, `out` aligned to 4 elements.
template <typename T>
bool quads_of_channels(const T* out, int64_t channel_stride, int64_t channels,
                       std::initializer_list<int64_t> other_strides) {
  bool quads = channel_stride == 1 && channels % 4 == 0 && aligned_to(out, 4 * sizeof(T));
  for (const int64_t stride : other_strides) quads = quads && stride % 4 == 0;
  return quads;
}

// Whether the grad_weight kernels' gw (a.gw, a.gw_strides, a.gw_channels) takes a quad of columns as
// one store: quads_of_channels, the strides of a filter's taps counting only where it has several
// (a 1x1 gradient's R and S strides are 1 in either format and never step).
template <typename T>
bool weight_grad_quads(const TcWeightGradArgs<T>& a) {
  const WeightStrides& ws = a.gw_strides;
  return quads_of_channels(a.gw, ws.c, a.gw_channels, {ws.k, a.wg.R > 1 ? ws.r : 0, a.wg.S > 1 ? ws.s : 0});
}

// The arguments of launch `cv` of `src` with Wt at `wt` into `dst` (+ bias where defined).
template <typename T>
TcConvArgs<T> tc_args(const TcConv& cv, const at::Tensor& src, const T* wt, const at::Tensor& bias, at::Tensor& dst) {
  TcConvArgs<T> args{};
  args.cv = cv;
  // A channels_last source may hold zero-padded channels (channels_last_padded): its own stride.
  args.cv.src_C = int(src.size(1));
  args.cv.src_image = int64_t(cv.src_H) * cv.src_W * args.cv.src_C;
  args.src = kernel_data<T>(src);
  args.wt = wt;
  args.bias = bias.defined() ? kernel_data<T>(bias) : nullptr;
  args.out = mutable_kernel_data<T>(dst);
  args.dst_quads =
      quads_of_channels(args.out, args.cv.dst_sc, args.cv.outputs, {args.cv.dst_sn, args.cv.dst_sh, args.cv.dst_sw});
  // 16-bit elements only: a float32 word holds 4 positions, so a warp's 16 channels x 2 words store
  // 32-byte runs where the element stores write 128-byte runs of one channel.
  const TcConv& c = args.cv;
  constexpr int vec = 16 / int(sizeof(T));
  args.dst_words = sizeof(T) == 2 && c.dst_sc != 1 && c.dst_sw == 1 && c.out_sx == 1 && c.out_ox == 0 && c.out_sy == 1 &&
                   c.out_oy == 0 && c.dst_sh == c.col_W && c.dst_sc == c.col_plane && c.col_plane % vec == 0 &&
                   c.dst_sn % vec == 0 && aligned_to(args.out, 16);
  return args;
}

// Where launch `cv`'s wgmma kernels take B from (TcWeightSource): a 16-bit channels_last `weight`
// ([filters][taps][channels] contiguous, or a 1x1 filter in either format) on a 16-byte boundary, whose
// group's reduced channels are whole 128-byte chunks, is read as it is -- by the forward as rows
// (they are Wt's rows), by a grad_input whose A comes by im2col tensor copies (`tma`) as columns
// (the tile's channels contiguous, where a group's channels are whole 16-byte words, the map's
// strides, and at least 64) -- else Wt, the relayout a trainable weight pays every call.
template <typename T>
TcWeightSource weight_source(const at::Tensor& weight, const TcConv& cv, bool tma) {
  constexpr int64_t chunk = 128 / int64_t(sizeof(T));
  constexpr TcWeightSource kWt = TcWeightSource::kWt;
  if (sizeof(T) != 2 || !cv.wt_tiled || cv.packed || cv.reduced % chunk != 0 || tiled_encoder() == nullptr ||
      weight.dim() != 4 || !aligned_to(weight.const_data_ptr(), 16))
    return kWt;
  // Element (k, c, r, s) at ((k R + r) S + s) C + c; a dimension of size 1 has any stride.
  const int64_t C = weight.size(1), R = weight.size(2), S = weight.size(3);
  const int64_t dense[4] = {R * S * C, 1, S * C, C};
  for (int d = 0; d < 4; ++d)
    if (weight.size(d) != 1 && weight.stride(d) != dense[d]) return kWt;
  if (!cv.transposed) {
    const bool in_order = cv.tap_r0 == 0 && cv.tap_dr == 1 && cv.tap_s0 == 0 && cv.tap_ds == 1;  // the filter's taps
    const bool rows = weight.size(0) == int64_t(cv.groups) * cv.outputs && C == cv.reduced && R == cv.R &&
                      S == cv.S && cv.wt_row == R * S * C;
    return in_order && rows ? TcWeightSource::kWeightRows : kWt;
  }
  // grad_input: the reduced channels are the filters, the destination channels the weight's C. A
  // group of fewer than 64 channels keeps Wt: each copy would read its 64 filters' rows of under 128
  // bytes, the rest of the box zero-filled, and the grad_input of 32 channels to 64 filters (3x3,
  // 272 x 272) ran a third slower that way than with the relayout.
  const bool columns = weight.size(0) == int64_t(cv.groups) * cv.reduced && C == cv.outputs && C % 8 == 0 &&
                       C >= chunk;
  return tma && columns && im2col_map_fits(cv) ? TcWeightSource::kWeightColumns : kWt;
}

// `dst` = the launch `map` of `src` (from tc_source) with `weight` (+ bias).
template <typename T>
void tc_conv(const TcSource& src, const at::Tensor& weight, const at::Tensor& bias, const LaunchMap& map,
             at::Tensor& dst) {
  const TcConv cv = tc_launch(map, src.tensor.scalar_type(), dst);
  TcConvArgs<T> args = tc_args<T>(cv, src.tensor, nullptr, bias, dst);
  const bool nchw = src.nchw;
  args.nchw_words = nchw && reads_whole_planes(args.cv) && args.cv.col_plane % (16 / int(sizeof(T))) == 0 &&
                    aligned_to(args.src, 16);
  const bool tma = !nchw && tma_takes<T>(args.cv, src.rounded);
  args.a_raw = reads_raw_a<T>(src);
  args.b_source = weight_source<T>(weight, args.cv, tma);
  if (args.b_source == TcWeightSource::kWeightColumns && !encode_weight_columns_map(args, weight))
    args.b_source = TcWeightSource::kWt;
  const at::Tensor wt = args.b_source == TcWeightSource::kWt ? tc_weight<T>(weight, cv) : weight;
  args.wt = kernel_data<T>(wt);
  run_tc<T>(args, map.transposed ? "grad_input" : "forward", nchw, tma);
}

// ---- A strided grad_input's phases in one launch ----------------------------------------------

// The Wt of every phase, re-laid by one launch into one tensor and cached as one entry named by every
// phase's taps; phase p's Wt starts at word maps.first_word[p].
template <typename T>
at::Tensor tc_phase_weights(const at::Tensor& weight, const TcConv* cvs, int phases, TcWeightPhaseMaps& maps) {
  maps = TcWeightPhaseMaps{};
  maps.phases = phases;
  const auto tag = [&] {
    std::string t = "gemm_tc/tiled/transposed/phases/n" + std::to_string(cvs[0].n_pad) + "/" + std::to_string(cvs[0].groups);
    for (int p = 0; p < phases; ++p) t += "/" + launch_taps_key(cvs[p]);
    return t;
  };
  int64_t words = 0;
  for (int p = 0; p < phases; ++p) {
    maps.map[p] = TcWeightMap{cvs[p], weight_strides(weight)};
    maps.first_word[p] = words;
    words += int64_t(cvs[p].groups) * cvs[p].n_pad * cvs[p].wt_row * int64_t(sizeof(T)) / 16;
  }
  maps.first_word[phases] = words;
  return cached_weight_transform(weight, tag, [&] {
    auto wt = new_workspace({words * 16 / int64_t(sizeof(T))}, weight.options());
    relayout_words<T>(words, [&](auto elem, auto index, auto value) {
      using E = decltype(elem);
      using I = decltype(index);
      tc_weight_relayout_phases_kernel<E, I><<<elementwise_blocks(words, 256), 256, 0, current_stream()>>>(
          static_cast<const E*>(weight.const_data_ptr()), static_cast<uint4*>(wt.mutable_data_ptr()), maps, value);
    });
    return wt;
  });
}

// Per-block overhead of the phases' split rule, in chunks: the pipeline's fill and the epilogue.
constexpr int64_t kPhaseBlockOverheadChunks = 2;

// The splits of the phases' launch: each phase's reduction cut into `splits` runs (gridDim.y), the
// count that minimizes the launch's estimated time in chunks -- the longer of its longest block and
// its blocks' chunks spread over the GPU's block slots, each block kPhaseBlockOverheadChunks more --
// at most kMaxClusterSplits (the splits add their sums as one cluster), each run at least
// kMinChunksPerSplit chunks of the longest phase. The phases' reductions differ (1, 2, 2 and 4 taps
// for a 3x3 layer of stride 2), so a split count that fills the GPU with the shorter phases' blocks
// still leaves the longest phase's blocks setting the time.
int64_t phase_splits(const int64_t* tiles, const int* chunks, int phases, int64_t slots) {
  int longest = 1;
  for (int p = 0; p < phases; ++p) longest = std::max(longest, chunks[p]);
  const int64_t cap = std::clamp<int64_t>(longest / kMinChunksPerSplit, 1, kMaxClusterSplits);
  int64_t best = 1;
  double best_time = 0.0;
  for (int64_t s = 1; s <= cap; ++s) {
    int64_t block_chunks = 0, work = 0;
    for (int p = 0; p < phases; ++p) {
      const int64_t per_split = ceil_div(int64_t(chunks[p]), s) + kPhaseBlockOverheadChunks;
      block_chunks = std::max(block_chunks, per_split);
      work += tiles[p] * s * per_split;
    }
    const double time = std::max(double(block_chunks), double(work) / double(slots));
    if (s == 1 || time < best_time) best = s, best_time = time;
  }
  return best;
}

// Launches `pa`'s phases (their TcConv set, the rest of their arguments but the tiling) as one grid of
// config Cfg: the phases ordered longest reduction first (the blocks that set the time start first).
template <typename T, typename Cfg, bool kTmaA>
void launch_tc_phases(TcPhaseArgs<T> pa) {
  const int phases = pa.phases;
  int64_t phase_tiles[kMaxGradInputPhases];
  for (int p = 0; p < phases; ++p) phase_tiles[p] = set_launch_fields<T, Cfg>(pa.phase[p]);
  int order[kMaxGradInputPhases];  // longest reduction first (an insertion sort: stable, no allocation)
  for (int p = 0; p < phases; ++p) {
    int i = p;
    for (; i > 0 && pa.phase[order[i - 1]].cv.chunks < pa.phase[p].cv.chunks; --i) order[i] = order[i - 1];
    order[i] = p;
  }
  const TcPhaseArgs<T> unsorted = pa;
  for (int p = 0; p < phases; ++p) pa.phase[p] = unsorted.phase[order[p]];
  int64_t tiles[kMaxGradInputPhases];
  int chunks[kMaxGradInputPhases];
  int64_t blocks = 0;
  for (int p = 0; p < phases; ++p) {
    tiles[p] = phase_tiles[order[p]];
    chunks[p] = pa.phase[p].cv.chunks;
    check_grid(blocks + tiles[p], "conv2d_gemm");
    pa.first_block[p] = int(blocks);
    blocks += tiles[p];
  }
  pa.first_block[phases] = int(blocks);
  auto kernel = tc_conv_wgmma_phases_kernel<T, Cfg, kTmaA>;
  if constexpr (kTmaA && sizeof(T) == 2)
    if (pa.phase[0].b_source == TcWeightSource::kWeightColumns) kernel = tc_conv_wgmma_phases_kernel<T, Cfg, true, true>;
  if constexpr (kTmaA && std::is_same_v<T, float>)
    if (pa.phase[0].a_raw) kernel = tc_conv_wgmma_phases_kernel<T, Cfg, true, false, true>;
  constexpr size_t smem = Cfg::template smem_bytes<T>();
  ensure_dynamic_smem(kernel, smem, "conv2d_gemm");
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  int splits = int(phase_splits(tiles, chunks, phases, slots));
  // As launch_tc: clusters only where they take no more waves than the blocks alone; otherwise unsplit.
  if (splits > 1 && !clusters_in_waves(blocks, tc_active_clusters(kernel, Cfg::kThreads, smem, splits), splits, slots))
    splits = 1;
  check_grid(blocks * splits, "conv2d_gemm");
  for (int p = 0; p < phases; ++p) {
    TcConvArgs<T>& a = pa.phase[p];
    a.chunks_per_split = int(ceil_div(a.cv.chunks, splits));
    a.cluster_sums = splits > 1;
  }
  record_last_choice("grad_input", kWgmmaConfigNames[kWgmmaIndex<Cfg>], splits);
  record_workspace_bytes(0);
  launch_with_attributes(kernel, dim3(unsigned(blocks), unsigned(splits)), dim3(Cfg::kThreads), smem,
                         current_stream(), dim3(1, unsigned(splits)), false, pa);
}

// The A tiles by im2col tensor copies where every phase's launch takes them (tma_takes) and the
// driver encodes every phase's map; gathered otherwise.
template <typename T, typename Cfg>
void run_tc_phases(TcPhaseArgs<T>& pa, bool src_rounded) {
  bool tma = true;
  for (int p = 0; p < pa.phases && tma; ++p)
    tma = tma_takes<T>(pa.phase[p].cv, src_rounded) && encode_im2col_map(pa.phase[p], Cfg::kBM);
  if (tma) return launch_tc_phases<T, Cfg, true>(pa);
  // (tc_conv_phases reads the weight's columns only where every phase's A comes by the tensor copies.)
  TORCH_CHECK(pa.phase[0].b_source != TcWeightSource::kWeightColumns,
              "conv2d_gemm: internal error: the weight's columns without an im2col map");
  launch_tc_phases<T, Cfg, false>(pa);
}

// The phases `maps` (2 to kMaxGradInputPhases launches of a strided grad_input, none empty) of `src`
// with `weight` into `dst` as one launch of the wgmma kernel. False, having launched nothing, where
// that kernel does not run, a config is forced (forced configs run as named, phase by phase) or the
// source is NCHW.
template <typename T>
bool tc_conv_phases(const TcSource& src, const at::Tensor& weight, const LaunchMap* maps, int phases,
                    at::Tensor& dst) {
  if (phases < 2 || phases > kMaxGradInputPhases || !runs_wgmma() || forced_wgmma_config() >= 0 || src.nchw)
    return false;
  const bool src_rounded = src.rounded;
  TcConv cvs[kMaxGradInputPhases];
  for (int p = 0; p < phases; ++p) cvs[p] = tc_launch(maps[p], src.tensor.scalar_type(), dst);
  TcPhaseArgs<T> pa{};
  pa.phases = phases;
  for (int p = 0; p < phases; ++p) {
    pa.phase[p] = tc_args<T>(cvs[p], src.tensor, nullptr, at::Tensor(), dst);
    pa.phase[p].a_raw = reads_raw_a<T>(src);
  }
  // Every phase reads the weight's columns at its own taps where each phase's launch would (one map
  // for all: the same weight), else every phase's Wt re-laid by one launch.
  bool columns = true;
  for (int p = 0; p < phases && columns; ++p)
    columns = weight_source<T>(weight, pa.phase[p].cv, tma_takes<T>(pa.phase[p].cv, src_rounded)) ==
              TcWeightSource::kWeightColumns;
  columns = columns && encode_weight_columns_map(pa.phase[0], weight);
  at::Tensor wt = weight;
  if (columns) {
    for (int p = 0; p < phases; ++p) {
      pa.phase[p].b_map = pa.phase[0].b_map;
      pa.phase[p].b_source = TcWeightSource::kWeightColumns;
      pa.phase[p].wt = kernel_data<T>(weight);
    }
  } else {
    TcWeightPhaseMaps wmaps;
    wt = tc_phase_weights<T>(weight, cvs, phases, wmaps);
    for (int p = 0; p < phases; ++p)
      pa.phase[p].wt = kernel_data<T>(wt) + wmaps.first_word[p] * (16 / int64_t(sizeof(T)));
  }
  // The config rule of run_wgmma over the phases' tiles together, without the small and tiny tiles:
  // the phases' splits fill the GPU instead.
  const TcConv& cv = cvs[0];
  int64_t wide_blocks = 0;
  for (int p = 0; p < phases; ++p) wide_blocks += tile_blocks(cvs[p], 128, 256);
  if (cv.outputs > 128 && wide_blocks >= 2 * int64_t(sm_count())) run_tc_phases<T, WgmmaWide>(pa, src_rounded);
  else if (cv.outputs > 64) run_tc_phases<T, WgmmaLarge>(pa, src_rounded);
  else run_tc_phases<T, WgmmaMedium>(pa, src_rounded);
  return true;
}

template <typename F>
void dispatch_tc(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kHalf: return f(__half{});
    case at::kBFloat16: return f(__nv_bfloat16{});
    default: return f(float{});
  }
}

// grad_weight tiles (filters x (tap, channel) columns, positions per chunk, warps, stages, blocks/SM):
//   large  128 x 128, 8 warps of 64 x 32;
//   medium 64 x 128, 4 warps of 64 x 32: groups with <= 64 filters.
using TcWeightGradLarge = TcWeightGradConfig<128, 128, 32, 2, 4, 4, 2>;
using TcWeightGradMedium = TcWeightGradConfig<64, 128, 32, 1, 4, 4, 3>;
// TF32 (4-byte elements; its fragments' loads read a warp tile's rows word by word, so a larger warp
// tile loads fewer bytes per MMA):
//   large  128 x 128, 4 warps of 64 x 64, 3 stages (two blocks per SM);
//   medium 64 x 128, 4 warps of 64 x 32: groups with <= 64 filters.
// On Hopper a tile's splits add their sums as one cluster where the clusters fit the blocks' waves.
using TcWeightGradTf32Large = TcWeightGradConfig<128, 128, 32, 2, 2, 3, 2, 4, true>;
using TcWeightGradTf32Medium = TcWeightGradConfig<64, 128, 32, 1, 4, 4, 2, 4, true>;
// wgmma (sm_90a; filters x columns, warpgroups across the columns, stages, blocks per SM):
//   wide    128 x 256: more than 64 filters per group and more than 128 columns (taps x channels
//           per group) -- even where 128 columns would pad less (a 3x3 layer of 128 channels has
//           1152), the wide tile's MMAs per byte loaded make it the faster of the two;
//   wide-n192  128 x 192: as wide, where 192-column tiles pad the columns less than 256-column ones
//           (a 3x3 layer of 64 channels: 576 columns in three tiles of 192, not of 256 with a
//           quarter of each MMA padding; 128 channels: 1152 in six, not 1280 in five);
//   large   128 x 128 (two blocks per SM): more than 64 filters, at most 128 columns;
//   narrow  64 x 128, two warpgroups of 64 columns (two blocks per SM): groups with <= 64 filters
//           (faster than 64 x 256 on the layers of 64 filters: two blocks per SM hide the loads).
using WgmmaWeightGradWide = WgmmaWeightGradConfig<128, 256, 1, 4, 1>;
using WgmmaWeightGradWideN192 = WgmmaWeightGradConfig<128, 192, 1, 4, 1>;
using WgmmaWeightGradLarge = WgmmaWeightGradConfig<128, 128, 1, 3, 2>;
using WgmmaWeightGradNarrow = WgmmaWeightGradConfig<64, 128, 2, 4, 2>;
// TF32 on wgmma from NCHW planes (sm_90a; filters x 128 columns, blocks per SM):
//   wgmma-nchw-wide   256 filters, four warpgroups: more than 128 filters per group (half the input
//                     loads per multiply-add of the 128-filter tile);
//   wgmma-nchw-large  128 filters, two warpgroups, two blocks per SM: 65 to 128 filters per group;
//   wgmma-nchw-narrow 64 filters, one warpgroup, three blocks per SM: at most 64.
// Each with 64 columns (`-n64`) where a group has at most 64 (taps x channels per group: the 1x1
// layers of few channels), whose 128-column tiles would be half padding: half the MMAs, and a
// quarter to a third fewer loads and stores per chunk.
using WgmmaNchwWeightGradWide = WgmmaNchwWeightGradConfig<256, 1>;
using WgmmaNchwWeightGradLarge = WgmmaNchwWeightGradConfig<128, 2>;
using WgmmaNchwWeightGradNarrow = WgmmaNchwWeightGradConfig<64, 3>;
using WgmmaNchwWeightGradWideN64 = WgmmaNchwWeightGradConfig<256, 1, 64>;
using WgmmaNchwWeightGradLargeN64 = WgmmaNchwWeightGradConfig<128, 2, 64>;
using WgmmaNchwWeightGradNarrowN64 = WgmmaNchwWeightGradConfig<64, 3, 64>;

// Splits from which grad_weight's finish shares each element's sum among a block's warps: with a
// hundred splits and more (1x1 layers of 64 channels at 56 x 56 and batch 32) one thread's serial
// loads set the finish's time; with a few tens (a 3x3 layer of 64 channels) the shared form's extra
// blocks cost more than its shorter runs save (docs/precision.md).
constexpr int64_t kFinishSharedSplits = 96;

// grad_weight's split estimate: the wave-filling rule's count weighed against the
// most splits the rule's waves hold and (float16 and bfloat16: `weigh_clusters`) against 1 to
// kMaxClusterSplits splits as clusters, by the forward's model (cluster_splits_by_waves) with
// grad_weight's constants. Its blocks too are latency-bound, a chunk taking about the same time in any
// wave, so a wave's time is its blocks' runs of chunks: a grid of a few tiles over long reductions (a
// 3x3 layer of 128 channels at 68 x 68 outputs: 12 tiles of 2312 chunks) gains from every split its
// waves still hold beyond the rule's 90%, a grid of many tiles (17 x 17 outputs of 1024 filters: 144
// wide tiles) pays a whole wave of blocks for the rule's wave-filling split, and splits beyond the
// clusters' waves pay the workspace: their partial sums written and read back, and the finish's
// launch. Fitted to a sweep of the bfloat16 channels_last grad_weight of the resnet + yolo layers of
// 7 x 7 to 136 x 136 outputs at 1-16 splits, as clusters and through the workspace; the TF32 kernel
// of NCHW planes takes the fullest count by the same constants and keeps the rule against the
// clusters' estimate (its sweep found the rule the fastest or within 3% of the counts 1-16;
// docs/precision.md), the TF32 mma.sync kernel (its sums as clusters on Hopper) weighs them as the
// 16-bit kernels do (Cfg::kWeighClusters).
constexpr int kWeightGradBlockFixedChunks = 8;
// The fewest chunks of positions a split sums. A grid of tiles that leaves most SMs idle unsplit (a
// deep 1x1 or 3x3 layer at batch 1-8: 512 filters x 256 columns at 7 x 7 outputs is 8 tiles of 13
// chunks) is a few blocks' chains of chunks, all latency: its splits may run down to a few chunks,
// and the estimate below weighs them against the workspace's cost.
constexpr int kMinChunksPerWeightGradSplit = 8;
constexpr int kMinChunksPerSmallGridWeightGradSplit = 3;
constexpr int kMinChunksPerWeightGradClusterSplit = 3;
// A wide grad_weight chunk takes ~1.2 µs where the threads gather its tiles, in which HBM (~3 TB/s)
// moves about 3.6 MB; ~0.63 µs where the tensor copies load them (kTensorCopies), about 1.9 MB. The
// gather's constant made the copies' workspace look cheaper than it is (a 34 x 34 layer of 512
// filters kept 7 splits through it, slower than 3 as clusters).
constexpr double kHbmBytesPerWeightGradChunk = 3.6e6;
constexpr double kHbmBytesPerWeightGradCopiesChunk = 1.9e6;
constexpr int kFinishFixedChunks = 3;
// The clusters replace the count through the workspace only where at least 2% faster: closer than
// that the sweep measured the rule as often ahead (with the gather, 3 splits as clusters of a 34 x 34
// layer of 512 filters, 1% faster by the estimate than the rule's 7 through the workspace, measured 3%
// slower).
constexpr double kWeightGradEstimateMargin = 0.98;
constexpr SplitTerms kWeightGradSplitTerms{kWeightGradBlockFixedChunks, kMinChunksPerWeightGradClusterSplit};

// `cap`: the most splits the positions and the workspace limit allow (the rule's bound);
// `clusters_by_size`: the kernel's (tc_active_clusters_by_size); `hbm_bytes_per_chunk`: the kernel's
// (kHbmBytesPerWeightGradChunk or, for the tensor copies, kHbmBytesPerWeightGradCopiesChunk).
template <typename Cfg>
int64_t weight_grad_split_estimate(const ClustersBySize& clusters_by_size, int64_t tiles, int64_t positions,
                                   int64_t rule_splits, int64_t cap, int64_t slice_bytes, bool weigh_clusters,
                                   double hbm_bytes_per_chunk) {
  const int64_t chunks = ceil_div(positions, int64_t(Cfg::kBK));
  const int64_t slots = int64_t(sm_count()) * Cfg::kMinBlocks;
  // A count's time: unsplit, as clusters where the launch runs its splits so, else through the workspace.
  auto time_of = [&](int64_t splits) {
    const double block = double(ceil_div(chunks, splits) + kWeightGradBlockFixedChunks);
    if (splits == 1) return double(ceil_div(tiles, slots)) * block;
    const int clusters = splits <= kMaxClusterSplits ? clusters_by_size[splits] : 0;
    if (clusters_in_waves(tiles, clusters, splits, slots)) return double(ceil_div(tiles, int64_t(clusters))) * block;
    return double(ceil_div(tiles * splits, slots)) * block +
           2.0 * double(splits * slice_bytes) / hbm_bytes_per_chunk + kFinishFixedChunks;
  };
  int64_t splits = rule_splits;
  double time = time_of(rule_splits);
  const int64_t fullest = std::min(cap, ceil_div(tiles * rule_splits, slots) * slots / tiles);
  if (fullest > rule_splits) {
    const double fullest_time = time_of(fullest);
    if (fullest_time < time) splits = fullest, time = fullest_time;
  }
  if (!weigh_clusters) return splits;
  const SplitEstimate best =
      cluster_splits_by_waves(tiles, chunks, slots, clusters_by_size, nullptr, kWeightGradSplitTerms);
  return best.time < kWeightGradEstimateMargin * time ? best.splits : splits;
}

// The tensor maps of the wgmma grad_weight kernel's tensor copies (kTensorCopies), where they describe
// the layer: 16-bit NHWC x and gy (a.x, a.gy set), a group's channels whole 64-channel blocks (a
// column block is one tap's channels), gy's rows whole 16-byte words, positions within 31 bits (the
// copies' coordinates), and x's im2col map over the output positions' grid encodable (as the
// forward's A: im2col_map_fits). False otherwise: the threads gather.
template <typename T>
bool encode_weight_grad_maps(TcWeightGradArgs<T>& a) {
  const TcWeightGrad& wg = a.wg;
  if (sizeof(T) != 2 || wg.Cg % 64 != 0 || wg.K % 8 != 0 || wg.positions > INT32_MAX ||
      !aligned_to(a.x, 16) || !aligned_to(a.gy, 16))
    return false;
  TcConv grid{};  // the output positions' grid over x and the filter's taps, as a forward launch's
  grid.N = wg.N, grid.src_C = wg.C, grid.src_H = wg.H, grid.src_W = wg.W;
  grid.col_H = wg.Ho, grid.col_W = wg.Wo, grid.col_sy = wg.stride_h, grid.col_sx = wg.stride_w;
  grid.col_oy = -wg.pad_h, grid.col_ox = -wg.pad_w;
  grid.R = wg.R, grid.S = wg.S, grid.tap_sy = wg.dil_h, grid.tap_sx = wg.dil_w;
  const cuuint64_t dims[2] = {cuuint64_t(wg.K), cuuint64_t(wg.positions)};
  const cuuint64_t strides[1] = {cuuint64_t(wg.K) * sizeof(T)};
  const cuuint32_t box[2] = {64, 64};
  return encode_tiled_map(a.gy_map, a.gy, 2, dims, strides, box) && encode_im2col(a.x_map, a.x, grid, 64);
}

// `copies_kernel` (or null): the kernel's form with tensor copies, run where encode_weight_grad_maps
// describes the layer.
template <typename T, typename Cfg, typename Kernel>
void tc_weight_grad(Kernel kernel, const ConvShape& p, const at::Tensor& x, const at::Tensor& gy, at::Tensor& gw,
                    const char* name, Kernel copies_kernel = nullptr) {
  TcWeightGradArgs<T> a{};
  TcWeightGrad& wg = a.wg;
  wg.N = int(p.N), wg.C = int(p.C), wg.H = int(p.H), wg.W = int(p.W), wg.K = int(p.K), wg.Ho = int(p.Ho);
  wg.Wo = int(p.Wo), wg.groups = int(p.groups), wg.R = int(p.R), wg.S = int(p.S);
  wg.stride_h = int(p.stride_h), wg.stride_w = int(p.stride_w), wg.pad_h = int(p.pad_h), wg.pad_w = int(p.pad_w);
  wg.dil_h = int(p.dil_h), wg.dil_w = int(p.dil_w);
  wg.Cg = int(p.channels_per_group()), wg.Kg = int(p.filters_per_group()), wg.cols = wg.R * wg.S * wg.Cg;
  wg.k_pad = round_up(wg.Kg, Cfg::kBM), wg.n_pad = round_up(wg.cols, Cfg::kBN);
  wg.positions = p.N * p.Ho * p.Wo;
  wg.plane_div = make_fast_divisor(uint32_t(std::max<int64_t>(1, p.Ho * p.Wo)));
  wg.wo_div = make_fast_divisor(uint32_t(std::max<int64_t>(1, p.Wo)));
  wg.cols_div = make_fast_divisor(uint32_t(std::max(1, wg.cols)));
  wg.kg_div = make_fast_divisor(uint32_t(std::max(1, wg.Kg)));
  wg.cg_div = make_fast_divisor(uint32_t(std::max(1, wg.Cg)));
  wg.s_div = make_fast_divisor(uint32_t(std::max(1, wg.S)));
  a.m_tiles = wg.k_pad / Cfg::kBM, a.n_tiles = wg.n_pad / Cfg::kBN;
  a.gw_channels = int(gw.size(1));
  TORCH_INTERNAL_ASSERT(a.gw_channels <= wg.Cg && gw.size(0) == wg.K);
  a.x = kernel_data<T>(x);
  a.gy = kernel_data<T>(gy);
  const bool copies = copies_kernel != nullptr && encode_weight_grad_maps(a);
  if (copies) kernel = copies_kernel;
  // Position splits: the waves filled, at least kMinChunksPerWeightGradSplit chunks each (where the
  // unsplit tiles leave most SMs idle, kMinChunksPerSmallGridWeightGradSplit), the partial sums within
  // the workspace limit; the most splits those waves hold where the estimate says so, and for the
  // 16-bit wgmma kernels another count as clusters.
  const int64_t base_blocks = int64_t(a.m_tiles) * a.n_tiles * wg.groups;
  const int64_t slice_bytes = int64_t(wg.groups) * wg.k_pad * wg.n_pad * int64_t(sizeof(float));
  const int64_t min_chunks = 2 * base_blocks < int64_t(sm_count()) ? kMinChunksPerSmallGridWeightGradSplit
                                                                   : kMinChunksPerWeightGradSplit;
  const int64_t by_work = std::max<int64_t>(1, wg.positions / (min_chunks * Cfg::kBK));
  const int64_t by_memory = std::max<int64_t>(1, workspace_limit_bytes() / slice_bytes);
  const int64_t cap = std::min(by_work, by_memory);
  const int64_t slots = int64_t(sm_count()) * Cfg::kMinBlocks;
  int64_t splits = wave_filling_splits(base_blocks, slots, cap);
  ensure_dynamic_smem(kernel, Cfg::kSmemBytes, "conv2d_gemm_backward");  // before the occupancy query
  // Whether a tile's splits may add their sums as one cluster (sm_90), and the kernel's cluster counts
  // (none where its sums go through the workspace only), looked up once a call for the estimate and
  // the launch.
  const bool cluster_sums = Cfg::kClusterSums && wgmma_device();
  static const ClustersBySize kNoClusters{};
  const ClustersBySize& clusters_by_size =
      cluster_sums ? tc_active_clusters_by_size(kernel, Cfg::kThreads, Cfg::kSmemBytes) : kNoClusters;
  splits = weight_grad_split_estimate<Cfg>(
      clusters_by_size, base_blocks, wg.positions, splits, cap, slice_bytes, cluster_sums && Cfg::kWeighClusters,
      copies ? kHbmBytesPerWeightGradCopiesChunk : kHbmBytesPerWeightGradChunk);
  wg.positions_per_split = round_up(int(ceil_div(wg.positions, splits)), Cfg::kBK);
  splits = ceil_div(wg.positions, wg.positions_per_split);
  a.plane_words = p.Ho * p.Wo % 8 == 0 && aligned_to(a.x, 16) && aligned_to(a.gy, 16);
  const int64_t blocks = base_blocks * splits;
  check_grid(blocks, "conv2d_gemm_backward");
  record_last_choice("grad_weight", name, int(splits));
  // The blocks write `target` (gw, or a channels_last copy of it) themselves: no workspace, no finish.
  auto blocks_write = [&](const at::Tensor& target) {
    a.blocks_write_gw = true;
    a.gw = mutable_kernel_data<T>(target);
    a.gw_strides = weight_strides(target);
    a.gw_quads = weight_grad_quads(a);
  };
  if (cluster_sums) {
    // The blocks write gw themselves: one block a tile where the positions are not split, the splits
    // of a tile as one cluster where the clusters take no more waves than the blocks alone.
    const int clusters = splits <= kMaxClusterSplits ? clusters_by_size[splits] : 0;
    if (splits == 1 || clusters_in_waves(base_blocks, clusters, splits, slots)) {
      // A tile's columns are one tap's channels (column = tap x channels + channel), which an NCHW
      // filter gradient of several taps holds R x S elements apart: the blocks' finish would store
      // every element on its own, a warp's store 32 sectors, about a cycle of the SM's store path an
      // element. Where a block finishes more elements than one transposing copy of gw costs (a few
      // microseconds, about kTargetFinishElements such stores), the blocks write a channels_last
      // target instead (quads of channels) and the copy gives gw its format. (The workspace's finish
      // kernel, many blocks of few elements each, stores into gw directly.)
      constexpr int64_t kTargetFinishElements = 4096;
      const int64_t finished_by_block = ceil_div(std::min<int64_t>(Cfg::kBM, wg.Kg), splits) * Cfg::kBN;
      const bool taps_apart = wg.R * wg.S > 1 && wg.Cg > 1 && finished_by_block > kTargetFinishElements &&
                              !gw.is_contiguous(at::MemoryFormat::ChannelsLast);
      at::Tensor target =
          taps_apart ? new_workspace(gw.sizes(), gw.options().memory_format(at::MemoryFormat::ChannelsLast)) : gw;
      blocks_write(target);
      record_workspace_bytes(taps_apart ? int64_t(target.nbytes()) : 0);
      launch_with_attributes(kernel, dim3(unsigned(base_blocks), unsigned(splits)), dim3(Cfg::kThreads),
                             Cfg::kSmemBytes, current_stream(), dim3(1, unsigned(splits)), false, a);
      if (taps_apart) copy_into_contiguous_weight(target, gw);
      return;
    }
  }
  // Without clusters (mma.sync kernels), one split: the blocks store their tiles' sums into gw
  // themselves (no workspace, no finish), where a tile row's columns lie together in gw --
  // channels_last, one tap, or one channel a tap; an NCHW gradient of several taps would take a store
  // an element (see taps_apart above).
  if (!cluster_sums && splits == 1 &&
      (gw.is_contiguous(at::MemoryFormat::ChannelsLast) || wg.R * wg.S == 1 || wg.Cg == 1)) {
    blocks_write(gw);
    record_workspace_bytes(0);
    kernel<<<unsigned(blocks), Cfg::kThreads, Cfg::kSmemBytes, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  auto partial = new_workspace({splits * slice_bytes / int64_t(sizeof(float))}, x.options().dtype(at::kFloat));
  record_workspace_bytes(partial.numel() * int64_t(sizeof(float)));
  a.partial = partial.mutable_data_ptr<float>();
  kernel<<<unsigned(blocks), Cfg::kThreads, Cfg::kSmemBytes, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // The finish: each run of 32 elements shared by a block's eight warps from kFinishSharedSplits
  // splits on, one warp a run below.
  auto finish = [&](auto warps_per_element) {
    constexpr int kWarpsPerElement = decltype(warps_per_element)::value;
    const int64_t warp_runs = ceil_div(int64_t(wg.K) * wg.cols, int64_t(32));
    const int64_t blocks = ceil_div(warp_runs, int64_t(kFinishThreads / 32 / kWarpsPerElement));
    const unsigned grid = unsigned(std::min<int64_t>(blocks, int64_t(sm_count()) * 16));
    launch_dependent(tc_weight_grad_finish_kernel<T, kWarpsPerElement>, dim3(grid), dim3(kFinishThreads), a.partial,
                     mutable_kernel_data<T>(gw), wg, int(splits), weight_strides(gw), a.gw_channels);
  };
  if (splits >= kFinishSharedSplits)
    finish(std::integral_constant<int, 8>{});
  else
    finish(std::integral_constant<int, 1>{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The grad_weight config rule for channels_last sources: wgmma on Hopper, mma.sync otherwise; TF32
// mma.sync on every GPU (wgmma reads TF32 operands K-major only, and in channels_last both of
// grad_weight's run along the positions, MN-major; NCHW planes are K-major: run_tc_weight_grad_nchw).
// `rounded`: x and gy are float32 copies rounded to TF32 when made (channels_last_padded). kPlanes
// (16-bit, wgmma): x and gy are NCHW planes as they are (tc_weight_grad_reads_planes).
template <typename T, bool kPlanes = false>
void run_tc_weight_grad(const ConvShape& p, const at::Tensor& x, const at::Tensor& gy, at::Tensor& gw, bool rounded) {
  const bool narrow = p.filters_per_group() <= 64;
  if constexpr (std::is_same_v<T, float>) {
    auto run = [&](auto cfg, const char* name) {
      using Cfg = decltype(cfg);
      tc_weight_grad<T, Cfg>(rounded ? tc_weight_grad_kernel<T, Cfg, true> : tc_weight_grad_kernel<T, Cfg, false>, p,
                             x, gy, gw, name);
    };
    return narrow ? run(TcWeightGradTf32Medium{}, "tc-medium") : run(TcWeightGradTf32Large{}, "tc-large");
  } else {
    if (runs_wgmma()) {
      // Channels_last sources: the tensor copies' kernel where its maps describe the layer.
      auto run = [&](auto cfg, const char* name) {
        using Cfg = decltype(cfg);
        if constexpr (kPlanes)
          return tc_weight_grad<T, Cfg>(tc_weight_grad_wgmma_kernel<T, Cfg, true>, p, x, gy, gw, name);
        else
          return tc_weight_grad<T, Cfg>(tc_weight_grad_wgmma_kernel<T, Cfg>, p, x, gy, gw, name,
                                        tc_weight_grad_wgmma_kernel<T, Cfg, false, true>);
      };
      if (narrow) return run(WgmmaWeightGradNarrow{}, "wgmma-narrow");
      const int cols = int(p.R * p.S * p.channels_per_group());
      if (cols > 128 && round_up(cols, 192) < round_up(cols, 256)) return run(WgmmaWeightGradWideN192{}, "wgmma-wide-n192");
      if (cols > 128) return run(WgmmaWeightGradWide{}, "wgmma-wide");
      return run(WgmmaWeightGradLarge{}, "wgmma-large");
    }
    if (narrow)
      return tc_weight_grad<T, TcWeightGradMedium>(tc_weight_grad_kernel<T, TcWeightGradMedium>, p, x, gy, gw,
                                                   "tc-medium");
    return tc_weight_grad<T, TcWeightGradLarge>(tc_weight_grad_kernel<T, TcWeightGradLarge>, p, x, gy, gw, "tc-large");
  }
}

// The TF32 grad_weight of NCHW planes (tc_weight_grad_nchw_tf32_kernel), by filters and columns per group.
void run_tc_weight_grad_nchw(const ConvShape& p, const at::Tensor& x, const at::Tensor& gy, at::Tensor& gw) {
  const int64_t filters = p.filters_per_group();
  auto run = [&](auto cfg, const char* name) {
    using Cfg = decltype(cfg);
    tc_weight_grad<float, Cfg>(tc_weight_grad_nchw_tf32_kernel<Cfg>, p, x, gy, gw, name);
  };
  if (p.channels_per_group() * p.R * p.S <= 64) {
    if (filters > 128) return run(WgmmaNchwWeightGradWideN64{}, "wgmma-nchw-wide-n64");
    if (filters > 64) return run(WgmmaNchwWeightGradLargeN64{}, "wgmma-nchw-large-n64");
    return run(WgmmaNchwWeightGradNarrowN64{}, "wgmma-nchw-narrow-n64");
  }
  if (filters > 128) return run(WgmmaNchwWeightGradWide{}, "wgmma-nchw-wide");
  if (filters > 64) return run(WgmmaNchwWeightGradLarge{}, "wgmma-nchw-large");
  return run(WgmmaNchwWeightGradNarrow{}, "wgmma-nchw-narrow");
}

// Whether the channels_last kernels read `t` as it is: dense channels_last with `channels` channels,
// its first element on a 16-byte boundary (their loads are 16-byte cp.async; a dense view that starts
// at an odd place in its storage is copied instead of faulting).
bool kernel_ready(const at::Tensor& t, int64_t channels) {
  return t.is_contiguous(at::MemoryFormat::ChannelsLast) && t.size(1) == channels &&
         aligned_to(t.const_data_ptr(), 16);
}

// `t` (N, C, H, W) in channels_last with its channels zero-padded to `channels`: the tensor-core
// kernels copy whole 16-byte words of channels, so an ungrouped layer whose channels are not a
// multiple of a word (an RGB stem) runs on a padded copy; the padding meets zero weights. An NCHW
// tensor is transposed through shared-memory tiles (ATen's copy of a permuted tensor is not tiled:
// one side of it is strided, and it ran far from the HBM bandwidth); other layouts (a tensor in
// neither format, a channels_last one off a 16-byte boundary) go through the strided padding kernel,
// padded or not: a pass launches only our kernels. A float32 copy (TF32 calls) holds the values
// rounded to TF32, so that the MMAs may read it as it is (tma_takes).
// `copy`: a copy even of a kernel-ready tensor (float32, for that rounding).
at::Tensor channels_last_padded(const at::Tensor& t, int64_t channels, bool copy = false) {
  if (kernel_ready(t, channels) && !copy) return t;
  // new_workspace is at::empty, which takes the memory format from the options.
  auto out = new_workspace({t.size(0), channels, t.size(2), t.size(3)},
                           t.options().memory_format(at::MemoryFormat::ChannelsLast));
  if (out.numel() == 0) return out;
  if (kernel_ready(t, channels) && t.scalar_type() == at::kFloat && t.numel() % 4 == 0) {  // copied to be rounded
    const int64_t words = t.numel() / 4;
    tc_round_tf32_kernel<<<elementwise_blocks(words, 256), 256, 0, current_stream()>>>(
        static_cast<const uint4*>(t.const_data_ptr()), static_cast<uint4*>(out.mutable_data_ptr()), words);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  const bool nchw = t.is_contiguous();
  const int64_t plane = t.size(2) * t.size(3), pixels = t.size(0) * plane;
  const int vec = 16 / int(t.element_size());
  auto launch = [&](auto elem, auto round) {
    using E = decltype(elem);
    constexpr bool kTf32 = decltype(round)::value;
    const E* src = static_cast<const E*>(t.const_data_ptr());
    E* dst = static_cast<E*>(out.mutable_data_ptr());
    if (nchw && channels == vec) {
      tc_nchw_to_nhwc_word_kernel<E, kTf32><<<elementwise_blocks(pixels, 256), 256, 0, current_stream()>>>(
          src, dst, pixels, plane, int(t.size(1)));
    } else if (nchw) {
      const int64_t tiles = t.size(0) * ceil_div(plane, kTransposePixels) * ceil_div(channels, 32);
      tc_nchw_to_nhwc_kernel<E, kTf32><<<elementwise_blocks(tiles * 256, 256), 256, 0, current_stream()>>>(
          src, dst, tiles, plane, int(t.size(1)), int(channels));
    } else {
      const int64_t total = pixels * channels / vec;
      tc_pad_channels_kernel<E, kTf32><<<elementwise_blocks(total, 256), 256, 0, current_stream()>>>(
          src, dst, pixels, int(t.size(1)), int(channels), int(t.size(2)), int(t.size(3)), t.stride(0), t.stride(1),
          t.stride(2), t.stride(3));
    }
  };
  if (t.element_size() == 2)
    launch(uint16_t{}, std::false_type{});
  else
    launch(uint32_t{}, std::true_type{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// Channels of the forward source: padded to a word for ungrouped layers.
int64_t padded_channels(const ConvShape& p, at::ScalarType dtype) {
  const int vec = vector_elems(dtype);
  return p.groups == 1 ? (p.C + vec - 1) / vec * vec : p.C;
}

// Whether the forward and grad_input launches of layer `p` read their sources' pixels in order
// through one tap (reads_whole_planes): a 1x1 layer of stride 1 without padding.
bool whole_planes(const ConvShape& p) {
  return p.R == 1 && p.S == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
}

// The source the kernels read for a layer of `taps` filter taps: a channels_last tensor as it is
// where kernel_ready; an NCHW float32 tensor as it is where the wgmma kernel runs and the layer is
// 1x1 (TcNchwLoader reads the planes itself, any channel count), and a 16-bit one where the launch
// reads its planes whole (`reads_planes`, is_nchw_planes_source); otherwise a channels_last copy with
// its channels zero-padded to `channels`. A 1x1 layer reads each element once, so a copy would
// double its traffic; a layer of several taps reads each element once per tap, and there one
// transposing pass costs less than reading the planes tap by tap. A float32 channels_last source is
// read as it is where the wgmma kernel runs: it rounds the tensor copies' tiles to TF32 in registers
// (TcConvArgs::a_raw), sparing the call a rounded copy; a source of several taps is copied, rounded,
// for the MMAs to read by descriptor, only where the register tiles do not run (the warp-specialized
// tile forced, whose MMAs read A from shared memory).
TcSource tc_source(const at::Tensor& t, int64_t channels, int64_t taps, bool reads_planes) {
  if (taps == 1 && (is_nchw_source(t) || is_nchw_planes_source(t, reads_planes))) return {t, true, false};
  const bool rounded_copy = taps > 1 && t.scalar_type() == at::kFloat && runs_wgmma() && !tf32_register_tiles();
  at::Tensor source = channels_last_padded(t, channels, rounded_copy);
  const bool copied = is_copy(source, t);
  return {std::move(source), false, copied};
}

}  // namespace

at::Tensor tc_channels_last_source(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(is_reduced_float(t.scalar_type()) && t.dim() == 4);
  return channels_last_padded(t, t.size(1));
}

bool uses_tensor_cores(at::ScalarType dtype) {
  return is_reduced_float(dtype) || (dtype == at::kFloat && tf32_enabled());
}

bool tc_weight_grad_reads_nchw(const ConvShape& p, const at::Tensor& input, const at::Tensor& grad_output) {
  // 32-bit offsets within an image: a position's first tap reaches (Ho - 1) stride + (Wo - 1) stride
  // elements into the padded plane, so the bound holds the padding rows and columns as well.
  return is_nchw_source(input) && is_nchw_source(grad_output) &&
         p.C * (p.H + 2 * p.pad_h) * (p.W + 2 * p.pad_w) <= INT32_MAX && p.N * p.Ho * p.Wo <= INT32_MAX;
}

// Whether a 16-bit grad_weight reads its input and grad_output as NCHW planes (the wgmma kernel's
// kPlanes): a 1x1 layer of stride 1 without padding whose planes are whole 8-byte half-words, where both
// operands already run along the positions (K-major) and channels_last copies would move each
// element three more times.
bool tc_weight_grad_reads_planes(const ConvShape& p, const at::Tensor& input, const at::Tensor& grad_output) {
  return whole_planes(p) && is_nchw_planes_source(input, true) && is_nchw_planes_source(grad_output, true);
}

at::Tensor tc_conv2d_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                 const at::Tensor& weight) {
  const at::MemoryFormat format = conv_memory_format(input, weight);
  auto gw = new_output({p.K, p.channels_per_group(), p.R, p.S}, weight.options().memory_format(format));
  if (gw.numel() == 0) return gw;
  if (p.N * p.Ho * p.Wo == 0) return gw.zero_();
  if (tc_weight_grad_reads_nchw(p, input, grad_output)) {
    run_tc_weight_grad_nchw(p, input, grad_output, gw);
    return gw;
  }
  if (tc_weight_grad_reads_planes(p, input, grad_output)) {
    dispatch_tc(input.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (sizeof(T) == 2) run_tc_weight_grad<T, true>(p, input, grad_output, gw, false);
    });
    return gw;
  }
  // An ungrouped layer with channels short of a word runs on zero-padded channels; the kernels store
  // only gw's own channels (TcWeightGradArgs::gw_channels), so the padded columns are never written.
  ConvShape padded = p;
  padded.C = padded_channels(p, input.scalar_type());
  const at::Tensor x = channels_last_padded(input, padded.C);
  const at::Tensor gy = channels_last_padded(grad_output, p.K);
  const bool rounded = is_copy(x, input) && is_copy(gy, grad_output);
  dispatch_tc(input.scalar_type(), [&](auto tag) { run_tc_weight_grad<decltype(tag)>(padded, x, gy, gw, rounded); });
  return gw;
}

// TF32 runs only where it can shorten the layer. An NCHW layer of at most kTf32MaxMacsPerByte
// multiply-adds per byte of its input and output (each moved once) is memory-bound even on CUDA
// cores: the FP32 ridge of an H100 is about 10.8 (32 T FFMA/s over ~3 TB/s), and the bound leaves a
// third of it for FP32 kernels that run below the FFMA peak. Tensor cores would not make such a layer
// faster, and IEEE FP32 keeps float32's error; cuDNN, allowed TF32, runs FP32 algorithms on such
// layers too (a strided 1x1 layer of 64 channels, an RGB stem on large planes). Channels_last calls
// keep TF32: the CUDA-core kernels read NCHW, and the copies there would cost more than the layer.
// The weight's bytes are left out so that a layer's precision does not depend on the batch size.
// Forward and grad_input do the same multiply-adds over the same bytes. Only the taps that read the
// input count: a padding tap adds a zero, so a small plane under a large filter (a 3x3 layer on 1 x 1
// planes has one tap in nine) is far more memory-bound than its filter size says, and cuDNN keeps
// such layers in FP32 as well.
constexpr double kTf32MaxMacsPerByte = 7.0;

// The (output, tap) pairs along one axis whose tap reads the input rather than its padding: output
// o's tap r reads o stride + r dilation - pad, which must lie in [0, in).
int64_t taps_within_input(int64_t in, int64_t out, int64_t taps, int64_t stride, int64_t pad, int64_t dilation) {
  int64_t pairs = 0;
  for (int64_t r = 0; r < taps; ++r) {
    const int64_t first = r * dilation - pad;  // output 0's input index
    const int64_t lo = first >= 0 ? 0 : (-first + stride - 1) / stride;
    const int64_t hi = first > in - 1 ? -1 : std::min(out - 1, (in - 1 - first) / stride);
    pairs += std::max<int64_t>(0, hi - lo + 1);
  }
  return pairs;
}

// A float32 layer's multiply-adds that read its input, per byte of its input and output, each moved once.
double macs_per_byte(const ConvShape& p) {
  const double bytes = 4.0 * (double(p.N) * p.C * p.H * p.W + double(p.N) * p.K * p.Ho * p.Wo);
  const double pairs = double(taps_within_input(p.H, p.Ho, p.R, p.stride_h, p.pad_h, p.dil_h)) *
                       double(taps_within_input(p.W, p.Wo, p.S, p.stride_w, p.pad_w, p.dil_w));
  return double(p.N) * p.K * p.channels_per_group() * pairs / bytes;
}

bool tf32_pays(const ConvShape& p, bool channels_last) {
  return channels_last || macs_per_byte(p) > kTf32MaxMacsPerByte;
}

// Without wgmma (or for NCHW tensors that are not dense), an NCHW layer's TF32 grad_weight first copies
// both its input and grad_output into channels_last (the mma.sync kernel reads 16-byte runs of filters
// and channels), where the IEEE FP32 kernel reads the planes as they are: about two more passes over
// those bytes at copy bandwidth, against the tensor cores' faster multiply-adds. Below kTf32GradWeightNchwMinMacsPerByte -- the 1x1 layers of few channels --
// the copies cost more than the tensor cores save, and the layer's grad_weight stays IEEE FP32.
constexpr double kTf32GradWeightNchwMinMacsPerByte = 16.0;

// With TF32 allowed, cuDNN computes the grad_input of an NCHW RGB stem in IEEE FP32 (its error is
// float32's, three orders below TF32's), so ours does too: an NCHW float32 layer with fewer channels
// per group than a float vector. Such a gradient reaches the images, which a model rarely asks for.
bool tf32_grad_input_keeps_ieee(const ConvShape& p, bool channels_last) {
  return !channels_last && p.channels_per_group() < vector_elems(at::kFloat);
}

std::string tc_unsupported_reason(const ConvShape& p, at::ScalarType dtype, bool grad_input, bool channels_last) {
  if (dtype == at::kFloat && !tf32_pays(p, channels_last))
    return "with TF32 allowed, an NCHW float32 layer of at most " + std::to_string(int(kTf32MaxMacsPerByte)) +
           " multiply-adds per byte moved is memory-bound on CUDA cores already: it runs in IEEE FP32";
  if (dtype == at::kFloat && grad_input && tf32_grad_input_keeps_ieee(p, channels_last))
    return "with TF32 allowed, the grad_input of an NCHW float32 layer of fewer than " +
           std::to_string(vector_elems(at::kFloat)) + " channels per group (an RGB stem) runs in IEEE FP32, as cuDNN's";
  const int vec = vector_elems(dtype);
  const int64_t reduced = grad_input ? p.filters_per_group() : p.channels_per_group();
  if (!grad_input && p.groups == 1) return "";  // ungrouped: channels padded to a word
  if (reduced % vec != 0)
    return "its tensor-core kernels copy 16-byte runs of channels and " +
           std::string(grad_input ? "filters" : "channels") + " per group (" + std::to_string(reduced) +
           ") are not a multiple of " + std::to_string(vec);
  return "";
}

std::string tc_weight_grad_unsupported_reason(const ConvShape& p, at::ScalarType dtype, bool channels_last,
                                              bool reads_nchw) {
  if (dtype == at::kFloat && !tf32_pays(p, channels_last))
    return tc_unsupported_reason(p, dtype, false, channels_last);
  if (reads_nchw) return "";  // no copies, and any filters and channels (four-byte loads)
  if (dtype == at::kFloat && !channels_last && macs_per_byte(p) <= kTf32GradWeightNchwMinMacsPerByte)
    return "with TF32 allowed, the grad_weight of an NCHW float32 layer of at most " +
           std::to_string(int(kTf32GradWeightNchwMinMacsPerByte)) +
           " multiply-adds per byte moved runs in IEEE FP32: its TF32 kernel's channels_last copies would cost more "
           "than its tensor cores save";
  const int vec = vector_elems(dtype);
  if ((p.groups > 1 && p.channels_per_group() % vec != 0) || p.filters_per_group() % vec != 0)
    return "its tensor-core grad_weight kernel copies 16-byte runs of channels and of filters, and channels (" +
           std::to_string(p.channels_per_group()) + ") or filters (" + std::to_string(p.filters_per_group()) +
           ") per group are not a multiple of " + std::to_string(vec) + " (ungrouped layers pad their channels)";
  return "";
}

at::Tensor tc_conv2d_forward(const ConvShape& p, const at::Tensor& input, const at::Tensor& weight,
                             const std::optional<at::Tensor>& bias) {
  const at::MemoryFormat format = conv_memory_format(input, weight);
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options().memory_format(format));
  record_workspace_bytes(0);
  if (y.numel() == 0) return y;
  const TcSource x =
      tc_source(input, padded_channels(p, input.scalar_type()), p.R * p.S, whole_planes(p));
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
  dispatch_tc(input.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    tc_conv<T>(x, weight, b, forward_map(p), y);
  });
  return y;
}

at::Tensor tc_conv2d_grad_input(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                const at::Tensor& weight) {
  const at::MemoryFormat format = conv_memory_format(input, weight);
  auto gx = new_output({p.N, p.C, p.H, p.W}, input.options().memory_format(format));
  if (gx.numel() == 0) return gx;
  const TcSource gy = tc_source(grad_output, p.K, p.R * p.S, whole_planes(p));
  // Pixels that no phase's launch writes are zeroed first, with the rest of gx, by one memset; the
  // phases that receive taps are launched.
  if (grad_input_has_unwritten_pixels(p)) zero_dense_output(gx);
  if (grad_input_has_no_terms(p)) return gx;
  c10::SmallVector<LaunchMap, kMaxGradInputPhases> maps;
  for (int py = 0; py < p.stride_h; ++py)
    for (int px = 0; px < p.stride_w; ++px) {
      // Taps reversed so that the source offset rises with the launch tap (grad_input_map's falls):
      // the im2col tensor copies take only such launches (tma_takes), and Wt holds the taps in the
      // same order.
      const LaunchMap map = with_reversed_taps(grad_input_map(p, py, px));
      if (!map.empty()) maps.push_back(map);
    }
  dispatch_tc(input.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    if (tc_conv_phases<T>(gy, weight, maps.data(), int(maps.size()), gx)) return;
    for (const LaunchMap& map : maps) tc_conv<T>(gy, weight, at::Tensor(), map, gx);
  });
  return gx;
}

}  // namespace cuda
}  // namespace torchconv
