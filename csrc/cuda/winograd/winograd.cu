// Winograd F(2x2, 3x3) on the GPU (seed 003): Y = A^T [ (G g G^T) . (B^T d B) ] A, the element-wise
// stage run as 16 GEMMs M[e] = U[e] V[e] (e over the 16 points of a 4x4 tile), 2.25x fewer
// multiplications than a direct 3x3 convolution; and F(4x4, 3x3), 36 GEMMs on 6x6 tiles, 4x fewer.
//
// Three variants (torchconv.set_variant("winograd", ...); "auto", the default, picks per call):
//   fused  (default) one kernel per launch: the GEMM's B tiles are input tiles transformed in
//          registers on their way to shared memory, the block computes all 16 points of a
//          (32 filters x 32 tiles) output block, and its epilogue runs the output transform and adds
//          the bias. Nothing but the transformed filters touches memory between the stages.
//   staged seed 003's pipeline: an input-transform kernel writes V, the batched GEMM writes M, an
//          output-transform kernel writes Y; V and M live in a workspace bounded by the workspace
//          limit (the batch's tiles are processed in chunks). A float32 call under PyTorch's TF32
//          switch runs the batched GEMMs (forward, grad_input, grad_weight) on TF32 tensor cores; so
//          does a bfloat16 call.
//   f4x4   F(4x4, 3x3) through the staged pipeline, the 36 point GEMMs in blocks of a few points;
//          the forward and grad_input (grad_weight stays in F(2x2)'s domain). A float32 call under
//          PyTorch's TF32 switch, and a bfloat16 call, runs the point GEMMs on TF32 tensor cores
//          (with several times a direct TF32 convolution's error: only on request, never auto's
//          choice); channels_last ones on Hopper run a staged-V wgmma cluster instead
//          (winograd_wgmma_f4x4_kernels.cuh).
// All run the block GEMM of tile_gemm.cuh (kBatch = 16 points for F(2x2), 4 for F(4x4)). The
// transformed filters U are cached per weight (weight_cache.h), so inference pays the filter
// transform once.
//
// Backward: grad_input of a 3x3 stride-1 convolution is a 3x3 stride-1 convolution of grad_output with
// the filters rotated 180 degrees and C / K swapped, padded by 2 - padding: the same kernels with
// their own cached U. grad_weight stays in the Winograd domain:
//   dg = sum over tiles of G^T [ (A dY A^T) . (B^T d B) ] G,
// i.e. 16 GEMMs dU[e] = dM[e] V[e]^T reducing over the tiles, with both operands transformed on the
// fly; the tile reduction is split across blocks and the slices summed in a fixed order.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../../backward.h"
#include "../../conv_shape.h"
#include "../../plans.h"
#include "../../tuning.h"
#include "../../variant.h"
#include "../../weight_cache.h"
#include "../../winograd_transforms.h"
#include "../../workspace.h"
#include "../common/tensor_data.h"
#include "../common/tile_gemm.cuh"
#include "winograd_kernels.cuh"
#include "winograd_tc_kernels.cuh"
#include "winograd_wgmma_kernels.cuh"
#include "winograd_wgmma_f4x4_kernels.cuh"
#include "winograd_wgmma_weight_grad.cuh"
#include "../../precision.h"

namespace torchconv {
namespace cuda {
namespace {

// The float GEMM tile configs' names, in index order; each can be forced with
// torchconv.set_config("winograd", name) or TORCHCONV_WINOGRAD_CONFIG (tall applies to the fused
// variant only). A forced config also turns off the shallow and narrow kernels, so both can be timed.
// tf32 and tf32-tall are the tensor-core fused kernel's tiles (32 and 64 filters per block), tf32-wgmma
// the 64-filter block on Hopper's wgmma, tf32-wgmma-cluster its 64 x 64 output block split by points
// over a cluster of two blocks, tf32-wgmma-cluster-vbulk that cluster reading V transformed
// beforehand by a kernel of its own, its operands moved by bulk copies through stages
// (WinogradWgmmaClusterBulkConfig::kStages), and
// tf32-wgmma-cluster-uvmulticast clusters of two filter blocks x two tile blocks of it sharing V and
// U by multicast (all sm_90a only; grad_weight then runs its wgmma block, with dM and V staged under
// the two staged-V configs): forced, they
// take the fused and auto variants' calls that follow TF32, and other calls run the default.
constexpr const char* kConfigNames[] = {"default",
                                        "thin",
                                        "tall",
                                        "tf32",
                                        "tf32-tall",
                                        "tf32-wgmma",
                                        "tf32-wgmma-cluster",
                                        "tf32-wgmma-cluster-vbulk",
                                        "tf32-wgmma-cluster-uvmulticast"};
constexpr int kConfigThin = 1, kConfigTall = 2, kConfigTf32 = 3, kConfigTf32Tall = 4, kConfigTf32Wgmma = 5,
              kConfigTf32WgmmaCluster = 6, kConfigTf32WgmmaClusterVBulk = 7, kConfigTf32WgmmaClusterUVMulticast = 8;

// Calls f(Cfg{}) with the float tile config for a convolution (the documented rule):
//   thin  when it reduces over at most 4 channels per group (the staged variant, or the fused one
//         when a config is forced; otherwise such layers run the shallow kernel below);
//   tall  for the fused variant when C and K per group are both at least 64 and the 64-filter
//         blocks still fill the GPU at least 2.5 times (one block per SM). On the H100 tall won by
//         4-9% where its blocks fill the GPU, and lost where blocks are few (batch 1) or the
//         reduction is short (C = 32);
//   default otherwise.
// `pass` names the call for last_choice() ("<variant>:<config>").
template <typename T, typename F>
void with_tile_config(const WinogradConv& cv, bool staged, const char* pass, F&& f) {
  if constexpr (std::is_same_v<T, double>) {
    record_last_choice(pass, staged ? "staged:f64" : "fused:f64", 1);
    f(WinogradTileF64{});
  } else {
    const int forced = forced_config(kWinograd);
    if (forced == kConfigThin || (forced < 0 && cv.Cg() <= 4)) {
      record_last_choice(pass, staged ? "staged:thin" : "fused:thin", 1);
      return f(WinogradTileF32Thin{});
    }
    if (!staged) {
      using Tall = WinogradTileF32Tall;
      const int64_t tall_blocks = ceil_div(cv.Kg(), Tall::kM) * ceil_div(cv.tiles(), Tall::kN) * cv.groups;
      const bool tall = forced >= 0 ? forced == kConfigTall
                                    : cv.Cg() >= 64 && cv.Kg() >= 64 && 2 * tall_blocks >= 5 * int64_t(sm_count());
      if (tall) {
        record_last_choice(pass, "fused:tall", 1);
        return f(Tall{});
      }
    }
    record_last_choice(pass, staged ? "staged:default" : "fused:default", 1);
    f(WinogradTileF32{});
  }
}

template <typename Tile = WinogradF2x2>
WinogradConv winograd_launch(const LaunchMap& map) {
  TORCH_INTERNAL_ASSERT(map.unit() && map.R == 3 && map.S == 3, "torchconv: Winograd launch of a non-3x3 stride-1 map");
  WinogradConv cv{};
  static_cast<LaunchMap&>(cv) = map;
  cv.tiles_h = int(winograd_tiles_of<Tile>(map.out_H)), cv.tiles_w = int(winograd_tiles_of<Tile>(map.out_W));
  cv.cg = map.reduced_per_group(), cv.kg = map.outputs_per_group(), cv.in_plane = int64_t(map.src_H) * map.src_W;
  // (An empty map launches nothing; its divisors only need to exist.)
  cv.per_image_div = make_fast_divisor(std::max(1u, uint32_t(cv.tiles_h) * uint32_t(cv.tiles_w)));
  cv.tiles_w_div = make_fast_divisor(std::max(1u, uint32_t(cv.tiles_w)));
  return cv;
}

template <typename Cfg>
FilterLayout filter_layout(const at::Tensor& weight, int64_t groups, bool rotated) {
  FilterLayout f;
  f.groups = int(groups), f.Kg = int(weight.size(0) / groups), f.Cg = int(weight.size(1)), f.rotated = rotated;
  f.reduction = rotated ? f.Kg : f.Cg;
  f.outputs = rotated ? f.Cg : f.Kg;
  f.reduction_pad = round_up(f.reduction, Cfg::kK);
  f.outputs_pad = round_up(f.outputs, Cfg::kM);
  f.w = weight_strides(weight);
  return f;
}

// The weight cache's key of a transform `tag` of layout f.
std::string filter_cache_key(const std::string& tag, const FilterLayout& f) {
  return tag + "/" + (f.rotated ? "rotated/" : "") + std::to_string(f.groups) + "/" + std::to_string(f.reduction_pad) +
         "x" + std::to_string(f.outputs_pad);
}

// The element type behind the pointer with_weight_data passes.
template <typename Ptr>
using weight_data_t = std::remove_cv_t<std::remove_pointer_t<Ptr>>;

// fn(data) on the weight's data as the kernels read it: float, bfloat16 or float16 (the filter
// transforms of float32 U read a 16-bit call's weight themselves, where a float32 copy of it per call
// cost a launch and an allocation).
template <typename Fn>
void with_weight_data(const at::Tensor& weight, Fn&& fn) {
  switch (weight.scalar_type()) {
    case at::kFloat:
      return fn(kernel_data<float>(weight));
    case at::kBFloat16:
      return fn(kernel_data<__nv_bfloat16>(weight));
    case at::kHalf:
      return fn(kernel_data<__half>(weight));
    default:
      TORCH_CHECK(false, "winograd: filter transforms of a ", weight.scalar_type(), " weight");
  }
}

// U of F(m x m, 3 x 3) in point groups of kGroupPoints for `weight` (a thread per (reduction, output)
// pair of layout f), cached until the weight changes: U of T from a weight of T, or float U from a
// float32, bfloat16 or float16 weight read as it is (with_weight_data).
template <typename T, typename Tile = WinogradF2x2, int kGroupPoints = kWinogradPoints>
at::Tensor transformed_filters(const at::Tensor& weight, const FilterLayout& f) {
  const auto tag = [&] {
    return filter_cache_key("winograd_u/" + std::to_string(Tile::kOutput) + "/" + std::to_string(kGroupPoints), f);
  };
  return cached_weight_transform(weight, tag, [&] {
    at::Tensor u = new_workspace({int64_t(f.groups) * f.reduction_pad * Tile::kPoints * f.outputs_pad},
                                 weight.options().dtype(c10::CppTypeToScalarType<T>::value));
    const int64_t total = int64_t(f.groups) * f.reduction_pad * f.outputs_pad;
    auto launch = [&](const auto* data) {
      using TW = weight_data_t<decltype(data)>;
      winograd_filter_transform_kernel<Tile, T, kGroupPoints, TW>
          <<<elementwise_blocks(total, 256), 256, 0, current_stream()>>>(data, u.mutable_data_ptr<T>(), f);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if constexpr (std::is_same_v<T, float>)
      with_weight_data(weight, launch);
    else
      launch(weight.const_data_ptr<T>());
    return u;
  });
}

// A fused forward tile's cluster: its blocks (Cfg::kCluster) and the filter and tile blocks they
// cover (Cfg::kVShare, Cfg::kUShare: the grid's filter and tile blocks come in groups of as many, the
// last padded); a tile without a cluster, 1, 1 and 1.
template <typename Cfg, typename = void>
struct ClusterShape {
  static constexpr int blocks = 1, filter_blocks = 1, tile_blocks = 1;
};
template <typename Cfg>
struct ClusterShape<Cfg, std::void_t<decltype(Cfg::kCluster)>> {
  static constexpr int blocks = Cfg::kCluster, filter_blocks = Cfg::kVShare, tile_blocks = Cfg::kUShare;
};
template <typename Cfg>
constexpr int fused_cluster_blocks() {
  return ClusterShape<Cfg>::blocks;
}
// Whether Cfg's forward kernel is persistent (WinogradWgmmaTile): a grid of at most one block per SM
// walking all output blocks.
template <typename Cfg, typename = void>
struct PersistentBlocks : std::false_type {};
template <typename Cfg>
struct PersistentBlocks<Cfg, std::void_t<decltype(Cfg::kPersistent)>> : std::bool_constant<Cfg::kPersistent> {};
template <typename Cfg>
constexpr bool persistent_blocks() {
  return PersistentBlocks<Cfg>::value;
}

// Blocks of a fused forward launch over k_tiles filter blocks x p_tiles tile blocks x groups.
template <typename Cfg>
int64_t fused_blocks(int64_t k_tiles, int64_t p_tiles, int64_t groups) {
  using Shape = ClusterShape<Cfg>;
  return ceil_div(k_tiles, Shape::filter_blocks) * ceil_div(p_tiles, Shape::tile_blocks) * groups * Shape::blocks;
}

// The arguments of a fused forward launch over all of cv's tile blocks; x, bias and y of TIo.
template <typename T, typename Cfg, typename TIo>
ForwardArgs<T, TIo> fused_args(const at::Tensor& x, const at::Tensor& u, const FilterLayout& f, const TIo* bias,
                               const WinogradConv& cv, at::Tensor& y) {
  ForwardArgs<T, TIo> a;
  a.x = kernel_data<TIo>(x), a.u = u.const_data_ptr<T>(), a.bias = bias, a.y = mutable_kernel_data<TIo>(y);
  a.cv = cv, a.reduction_pad = f.reduction_pad, a.outputs_pad = f.outputs_pad;
  a.k_tiles = int(ceil_div(cv.Kg(), Cfg::kM));
  const int64_t p_tiles = ceil_div(cv.tiles(), Cfg::kN);
  check_grid(fused_blocks<Cfg>(a.k_tiles, p_tiles, cv.groups), "conv2d_winograd");
  a.p_tiles = int(p_tiles);
  a.k_tiles_div = make_fast_divisor(uint32_t(a.k_tiles)), a.p_tiles_div = make_fast_divisor(uint32_t(a.p_tiles));
  return a;
}

// The clusters of a walking cluster kernel the GPU holds at once (max_active_clusters), found once
// per kernel and device.
template <typename Kernel>
int64_t walking_clusters(Kernel kernel, int threads, size_t smem, int cluster) {
  static std::mutex mutex;
  static std::vector<std::tuple<const void*, int, int64_t>> found;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const void* key = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [k, d, n] : found)
    if (k == key && d == device) return n;
  const int64_t n = std::max(1, max_active_clusters(kernel, dim3(threads), smem, cluster));
  found.emplace_back(key, device, n);
  return n;
}

// One launch of a fused forward kernel over a's tile blocks: a block per (filter tile of Cfg::kM,
// tile block of Cfg::kN, group), filter tiles fastest (block_coord). `dependent`: a cluster kernel that
// waits for its operands from the kernel before it (launch_with_attributes).
template <typename T, typename Cfg, typename Kernel, typename TIo>
void launch_fused_blocks(Kernel kernel, size_t smem, const ForwardArgs<T, TIo>& a, bool dependent = false) {
  const int64_t blocks = fused_blocks<Cfg>(a.k_tiles, a.p_tiles, a.cv.groups);
  ensure_dynamic_smem(kernel, smem, "conv2d_winograd");
  if constexpr (fused_cluster_blocks<Cfg>() > 1) {
    // Clusters of consecutive blocks share one (filter block or Cfg::kVShare of them, tile block, group);
    // walking ones (Cfg::kWalks) take every grid's worth of those on, as many as the GPU holds.
    int64_t grid = blocks;
    if constexpr (Cfg::kWalks)
      grid = std::min(blocks, Cfg::kCluster * walking_clusters(kernel, Cfg::kThreads, smem, Cfg::kCluster));
    launch_with_attributes(kernel, dim3(unsigned(grid)), dim3(Cfg::kThreads), smem, current_stream(), Cfg::kCluster,
                           dependent, a);
  } else {
    // A persistent kernel's blocks walk the output blocks: at most one per SM (Cfg::kMinBlocks).
    const int64_t grid = persistent_blocks<Cfg>() ? std::min<int64_t>(blocks, sm_count() * Cfg::kMinBlocks) : blocks;
    kernel<<<unsigned(grid), Cfg::kThreads, smem, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

template <typename T, typename Cfg, typename Kernel, typename TIo>
void launch_fused(Kernel kernel, size_t smem, const at::Tensor& x, const at::Tensor& u, const FilterLayout& f,
                  const TIo* bias, const WinogradConv& cv, at::Tensor& y) {
  launch_fused_blocks<T, Cfg>(kernel, smem, fused_args<T, Cfg>(x, u, f, bias, cv, y));
  record_workspace_bytes(0);
}

template <typename T, typename Cfg>
void run_fused(const at::Tensor& x, const at::Tensor& u, const FilterLayout& f, const T* bias, const WinogradConv& cv,
               at::Tensor& y) {
  launch_fused<T, Cfg>(winograd_fused_forward_kernel<T, Cfg>, fused_smem_bytes<T, Cfg>(), x, u, f, bias, cv, y);
}

// The grid that walks the filter runs (group, filter block, chunk) of layout f: at least one block
// (a grad_input of no filters has no run, and its U no values).
template <typename Cfg>
unsigned filter_run_blocks(const FilterLayout& f) {
  const int64_t runs = int64_t(f.groups) * (f.outputs_pad / Cfg::kM) * (f.reduction_pad / Cfg::kK);
  return unsigned(std::clamp<int64_t>(runs, 1, int64_t(sm_count()) * 8));
}

// U for the tensor-core kernel of tile Cfg: its own layout (mma.sync fragments or wgmma core
// matrices), rounded to TF32 for kernels of one TF32 product, split into bfloat16 hi and lo parts
// for the three-product ones (kMmaProducts).
template <typename Cfg, int kProducts>
at::Tensor tc_transformed_filters(const at::Tensor& weight, const FilterLayout& f) {
  const auto tag = [&] {
    return filter_cache_key(std::string(Cfg::kWgmma ? "winograd_u_wgmma/" : "winograd_u_tf32/") +
                                (kProducts == 1 ? "" : "bf16-split/") + std::to_string(Cfg::kM) + "x" +
                                std::to_string(Cfg::kK),
                            f);
  };
  return cached_weight_transform(weight, tag, [&] {
    at::Tensor u = new_workspace({int64_t(f.groups) * f.reduction_pad * kWinogradPoints * f.outputs_pad},
                                 weight.options().dtype(at::kFloat));
    with_weight_data(weight, [&](const auto* data) {
      auto kernel = winograd_filter_transform_tc_kernel<Cfg, kProducts, weight_data_t<decltype(data)>>;
      constexpr size_t smem = filter_run_smem_bytes<Cfg>();
      ensure_dynamic_smem(kernel, smem, "conv2d_winograd");
      kernel<<<filter_run_blocks<Cfg>(f), 256, smem, current_stream()>>>(data, u.mutable_data_ptr<float>(), f);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return u;
  });
}

// U for the staged-V tiles: float16 words under a scale per filter (F16Carrier), then each filter's
// largest |U| ([group][outputs_pad]), in one cached tensor (float32 elements, two halves each); the
// points of Cfg::Tile (F(2x2)'s, or F(4x4)'s for WinogradWgmmaF4x4ClusterTile).
template <typename Cfg>
int64_t tc_filter_words_f16(const FilterLayout& f) {
  return int64_t(f.groups) * f.reduction_pad * Cfg::Tile::kPoints * f.outputs_pad / 2;
}
template <typename Cfg>
at::Tensor tc_transformed_filters_f16(const at::Tensor& weight, const FilterLayout& f) {
  static_assert(Cfg::kOperandBytes == 2, "float16 operands");
  const int64_t u_words = tc_filter_words_f16<Cfg>(f);
  const auto tag = [&] {
    return filter_cache_key(Cfg::Tile::kPoints == kWinogradPoints ? "winograd_u_wgmma_f16" : "winograd_u_wgmma_f16/f4x4", f);
  };
  return cached_weight_transform(
      weight, tag,
      [&] {
        at::Tensor u =
            new_workspace({u_words + int64_t(f.groups) * f.outputs_pad}, weight.options().dtype(at::kFloat));
        float* u_max = u.mutable_data_ptr<float>() + u_words;
        C10_CUDA_CHECK(cudaMemsetAsync(u_max, 0, size_t(f.groups) * f.outputs_pad * sizeof(float), current_stream()));
        auto* halves = reinterpret_cast<uint16_t*>(u.mutable_data_ptr<float>());
        with_weight_data(weight, [&](const auto* data) {
          using TW = weight_data_t<decltype(data)>;
          const unsigned grid = filter_run_blocks<Cfg>(f);
          winograd_filter_transform_f16_kernel<Cfg, true, TW>
              <<<grid, 256, Cfg::kM * sizeof(float), current_stream()>>>(data, halves, u_max, f);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
          auto write = winograd_filter_transform_f16_kernel<Cfg, false, TW>;
          constexpr size_t smem = filter_run_smem_bytes<Cfg>();
          ensure_dynamic_smem(write, smem, "conv2d_winograd");
          write<<<grid, 256, smem, current_stream()>>>(data, halves, u_max, f);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
        return u;
      });
}

// Chunks per thread of the staged-V input transform (the words kernel: quads of channel octets): as
// many as keep its threads at least a full wave of the GPU (each of its SMs holds 1024 of them), up
// to kTransformMaxChunks.
constexpr int kTransformMaxChunks = 4;
int transform_chunks_per_thread(int64_t positions, int64_t chunks) {
  int per = 1;
  while (per < kTransformMaxChunks && per < chunks && positions * ceil_div(chunks, int64_t(2 * per)) >= 1024 * int64_t(sm_count()))
    per *= 2;
  return per;
}

// channels_last pixels whose group channels are whole 16-byte words take
// winograd_tc_pixel_max_words_kernel: the fewest lanes a pixel (a power of two, up to a warp) that
// give each lane one word.
template <typename TIo, int kParts = 1>
void launch_pixel_max_words(const ForwardArgs<float, TIo>& a, float* pixel_max, int words, int64_t pixels) {
  if constexpr (kParts < 32) {
    if (kParts < words) return launch_pixel_max_words<TIo, 2 * kParts>(a, pixel_max, words, pixels);
  }
  launch_with_attributes(winograd_tc_pixel_max_words_kernel<TIo, kParts>,
                         dim3(elementwise_blocks(pixels * kParts, 256 * kPixelMaxUnroll)), dim3(256), 0,
                         current_stream(), 1, true, a, pixel_max);
}

// Whether a channels_last tensor of TIo at `data`, with `channels` channels a pixel taken `per_group`
// at a time, reads as whole 16-byte words: each pixel's group channels are whole words of a 16-byte
// aligned tensor (the words kernels load them 16 bytes a lane).
template <typename TIo>
bool channels_last_words(const TIo* data, int per_group, int channels) {
  constexpr int kVec = 16 / int(sizeof(TIo));
  return per_group % kVec == 0 && channels % kVec == 0 && aligned_to(data, 16);
}

// channels_last x whose pixels' group channels are whole 16-byte words: the words kernels (the
// pixels' maxima, the 16-bit input transform).
template <typename TIo>
bool x_reads_as_words(const ForwardArgs<float, TIo>& a, bool nhwc) {
  return nhwc && channels_last_words(a.x, a.cv.Cg(), a.cv.src_C);
}

template <typename TIo>
void launch_pixel_max(const ForwardArgs<float, TIo>& a, float* pixel_max, bool nhwc) {
  const int64_t pixels = int64_t(a.cv.groups) * a.cv.N * a.cv.in_plane;
  constexpr int kVec = 16 / int(sizeof(TIo));
  if (x_reads_as_words(a, nhwc)) return launch_pixel_max_words(a, pixel_max, a.cv.Cg() / kVec, pixels);
  if (nhwc) {
    launch_with_attributes(winograd_tc_pixel_max_kernel<true, TIo>, dim3(elementwise_blocks(pixels * 32, 256)), dim3(256),
                           0, current_stream(), 1, true, a, pixel_max);
  } else {
    const int warps = pixel_max_warps(a.cv.Cg());
    launch_with_attributes(winograd_tc_pixel_max_kernel<false, TIo>, dim3(elementwise_blocks(pixels, 32)),
                           dim3(32 * warps), 0, current_stream(), 1, true, a, pixel_max);
  }
}

// A staged-V tile's workspace, in one allocation: V of `slice` tile blocks of Cfg (as many of the
// call's as fit the workspace limit beside the maxima, at least one), Tile's points a chunk; then,
// for float16 words under scales (`scaled`), each pixel's largest |input| over the group's channels
// and each tile's bound of its |V| ([group][tile]), which the transform and the epilogue read.
struct StagedVWorkspace {
  at::Tensor v;
  int64_t slice = 0, bytes = 0;
  float* pixel_max = nullptr;
  float* tile_bound = nullptr;
};
template <typename Cfg, typename Tile>
StagedVWorkspace staged_v_workspace(const at::Tensor& x, const FilterLayout& f, const WinogradConv& cv,
                                    int64_t p_tiles, bool scaled) {
  const int64_t tile_block_bytes = int64_t(cv.groups) * f.reduction_pad * Cfg::kN * Tile::kPoints * Cfg::kOperandBytes;
  const int64_t pixels = scaled ? int64_t(cv.groups) * cv.N * cv.in_plane : 0;
  const int64_t tiles = scaled ? int64_t(cv.groups) * cv.tiles() : 0;
  const int64_t max_bytes = (pixels + tiles) * int64_t(sizeof(float));
  const int64_t room = std::max<int64_t>(workspace_limit_bytes() - max_bytes, 0);
  StagedVWorkspace ws;
  ws.slice = std::max<int64_t>(1, std::min(p_tiles, room / tile_block_bytes));
  ws.bytes = ws.slice * tile_block_bytes + max_bytes;
  ws.v = new_workspace({ws.slice * tile_block_bytes / 4 + pixels + tiles}, x.options().dtype(at::kFloat));
  if (scaled) {
    ws.pixel_max = ws.v.mutable_data_ptr<float>() + ws.slice * tile_block_bytes / 4;
    ws.tile_bound = ws.pixel_max + pixels;
  }
  return ws;
}

// A staged-V wgmma tile's launches: each pixel's largest |input| over the group's channels
// (winograd_tc_pixel_max_kernel, once; float16 words only), then winograd_tc_input_transform_kernel
// writes V of a slice of tile blocks into a workspace within the workspace limit (at least one tile
// block; the pixels' and tiles' maxima stay beside it), in float16 under the tiles' scales or, for
// float16 calls, split into bfloat16 halves, and the wgmma kernel reduces it. u: U in float16 with its
// filters' maxima (tc_transformed_filters_f16), or the single wgmma block's split cache.
template <typename Cfg, typename Kernel, typename TIo>
void run_tc_vstaged(Kernel kernel, const at::Tensor& x, const at::Tensor& u, const FilterLayout& f, const TIo* bias,
                    const WinogradConv& cv, at::Tensor& y, bool nhwc) {
  // Every staged-V tile of one operand format reads V in one layout (the bulk-copy tiles derive from it).
  using VLayout = typename Cfg::VLayout;
  constexpr bool kScaled = Cfg::kOperandBytes == 2;
  static_assert(kScaled == (Cfg::kProducts == 1), "float16 words for one product, the split's halves for three");
  ForwardArgs<float, TIo> a = fused_args<float, Cfg>(x, u, f, bias, cv, y);
  if constexpr (kScaled) a.u_max = u.const_data_ptr<float>() + tc_filter_words_f16<Cfg>(f);
  const int64_t p_tiles = a.p_tiles;
  StagedVWorkspace ws = staged_v_workspace<Cfg, WinogradF2x2>(x, f, cv, p_tiles, kScaled);
  const int64_t slice = ws.slice;
  float* pixel_max = ws.pixel_max;
  a.v = ws.v.const_data_ptr<float>();
  a.v_max = ws.tile_bound;
  // The kernels run as a chain of dependent launches (common/dependent_launch.cuh): each is
  // scheduled while the one before it finishes.
  const cudaStream_t stream = current_stream();
  if constexpr (kScaled) launch_pixel_max(a, pixel_max, nhwc);
  auto transform = nhwc ? winograd_tc_input_transform_kernel<VLayout, true, TIo>
                        : winograd_tc_input_transform_kernel<VLayout, false, TIo>;
  // 16-bit channels_last inputs of whole 16-byte words: a thread per (tile, octet of channels).
  bool by_words = false;
  decltype(transform) words_transform = nullptr;
  if constexpr (sizeof(TIo) == 2) {
    by_words = x_reads_as_words(a, nhwc);
    words_transform = winograd_tc_input_transform_words_kernel<VLayout, TIo>;
  }
  auto* words = reinterpret_cast<uint32_t*>(ws.v.mutable_data_ptr<float>());
  for (int64_t t0 = 0; t0 < p_tiles; t0 += slice) {
    a.p_tile0 = int(t0), a.p_tiles = int(std::min(slice, p_tiles - t0));
    a.p_tiles_div = make_fast_divisor(uint32_t(a.p_tiles));
    if (by_words) {
      // Threads of one quad of octets, and quads (kTransformOctetLanes octets a pass) to share out.
      const int64_t positions = int64_t(cv.groups) * a.p_tiles * Cfg::kN * kTransformOctetLanes;
      const int64_t quads = ceil_div(int64_t(f.reduction_pad / 8), int64_t(kTransformOctetLanes));
      const int per = transform_chunks_per_thread(positions, quads);
      launch_with_attributes(words_transform, dim3(elementwise_blocks(positions * ceil_div(quads, int64_t(per)), 256)),
                             dim3(256), 0, stream, 1, true, a, pixel_max, per, words);
    } else {
      const int64_t positions = int64_t(cv.groups) * a.p_tiles * Cfg::kK / 2 * Cfg::kN, chunks = f.reduction_pad / Cfg::kK;
      const int per = transform_chunks_per_thread(positions, chunks);
      const int64_t threads = positions * ceil_div(chunks, int64_t(per));
      launch_with_attributes(transform, dim3(elementwise_blocks(threads, 256)), dim3(256), 0, stream, 1, true, a,
                             pixel_max, per, words);
    }
    launch_fused_blocks<float, Cfg>(kernel, Cfg::kForwardSmemBytes, a, /*dependent=*/true);
  }
  record_workspace_bytes(ws.bytes);
}

// F(4x4, 3x3) on the staged-V wgmma cluster (WinogradWgmmaF4x4ClusterTile, winograd_wgmma_f4x4_kernels.cuh):
// each pixel's largest |input| over the group's channels, each tile's bound of its |V| (in the input
// transform where x reads as 16-byte words, else a kernel of its own), then per slice of tile blocks
// (V within the workspace limit, as run_tc_vstaged) the input transform and the clusters'
// reduction; x, bias and y of TIo (float under the TF32 switch, or bfloat16), channels_last
// (f4x4_tile).
template <typename TIo>
void run_tc_f4x4(const at::Tensor& x, const at::Tensor& weight, const TIo* bias, const WinogradConv& cv, at::Tensor& y,
                 bool nhwc) {
  using Cfg = WinogradWgmmaF4x4ClusterTile;
  TORCH_INTERNAL_ASSERT(nhwc, "winograd: the F(4x4) cluster runs channels_last calls");
  const FilterLayout f = filter_layout<Cfg>(weight, cv.groups, cv.transposed);
  const at::Tensor u = tc_transformed_filters_f16<Cfg>(weight, f);
  ForwardArgs<float, TIo> a = fused_args<float, Cfg>(x, u, f, bias, cv, y);
  a.u_max = u.const_data_ptr<float>() + tc_filter_words_f16<Cfg>(f);
  const int64_t p_tiles = a.p_tiles;
  StagedVWorkspace ws = staged_v_workspace<Cfg, typename Cfg::Tile>(x, f, cv, p_tiles, /*scaled=*/true);
  a.v = ws.v.const_data_ptr<float>();
  a.v_max = ws.tile_bound;
  // A chain of dependent launches, as run_tc_vstaged's.
  const cudaStream_t stream = current_stream();
  launch_pixel_max(a, ws.pixel_max, /*nhwc=*/true);
  // x of whole 16-byte words: a thread per (tile, octet of channels) and column, then row, of the
  // window, which takes its tiles' bounds from the pixels' maxima itself.
  const bool by_words = x_reads_as_words(a, /*nhwc=*/true);
  if (!by_words)
    launch_with_attributes(winograd_tc_f4x4_tile_bound_kernel<TIo>,
                           dim3(elementwise_blocks(int64_t(cv.groups) * cv.tiles(), 256)), dim3(256), 0, stream, 1,
                           true, a, static_cast<const float*>(ws.pixel_max));
  auto kernel = winograd_wgmma_f4x4_cluster_forward_kernel<Cfg, TIo>;
  auto* halves = reinterpret_cast<uint16_t*>(ws.v.mutable_data_ptr<float>());
  for (int64_t t0 = 0; t0 < p_tiles; t0 += ws.slice) {
    a.p_tile0 = int(t0), a.p_tiles = int(std::min(ws.slice, p_tiles - t0));
    a.p_tiles_div = make_fast_divisor(uint32_t(a.p_tiles));
    if (by_words) {
      const int64_t items = int64_t(cv.groups) * a.p_tiles * (Cfg::kN / 8) *
                            ceil_div(int64_t(f.reduction_pad / 8), int64_t(kF4x4WordsOctets));
      launch_with_attributes(winograd_tc_f4x4_input_transform_words_kernel<Cfg, TIo>,
                             dim3(elementwise_blocks(items, 1)), dim3(kF4x4WordsWarps * 32), 0, stream, 1, true, a,
                             static_cast<const float*>(ws.pixel_max), reinterpret_cast<uint32_t*>(halves));
    } else {
      const int64_t positions = int64_t(cv.groups) * a.p_tiles * (f.reduction_pad / Cfg::kK) * Cfg::kK * Cfg::kN;
      launch_with_attributes(winograd_tc_f4x4_input_transform_kernel<Cfg, TIo>,
                             dim3(elementwise_blocks(positions, 256)), dim3(256), 0, stream, 1, true, a, halves);
    }
    launch_fused_blocks<float, Cfg>(kernel, Cfg::kForwardSmemBytes, a, /*dependent=*/true);
  }
  record_workspace_bytes(ws.bytes);
}

// The chunks up to which channels_last calls of the single wgmma block place its stages as NCHW
// calls do (U apart, the walk's blocks of the same U starting with the chunks the stages hold:
// WinogradWgmmaStages<true>): with at most two chunks a block copies no U at all along such a walk.
// With more chunks the placement's barrier after the epilogue cost channels_last blocks more than
// the copies it saves (docs/winograd.md).
constexpr int kNhwcUApartMaxChunks = 2;

// Fused F(2x2) with the point GEMMs on tensor cores (winograd_tc_kernels.cuh); x and y channels_last
// where `nhwc`, x, bias and y of TIo (float, bfloat16 or float16: float16 on the mma.sync tiles and
// the single wgmma block), the weight float32.
template <typename Cfg, typename TIo>
void run_tc_fused(const at::Tensor& x, const at::Tensor& weight, const TIo* bias, const WinogradConv& cv,
                  at::Tensor& y, bool nhwc) {
  const FilterLayout f = filter_layout<Cfg>(weight, cv.groups, cv.transposed);
  void (*kernel)(ForwardArgs<float, TIo>);
  if constexpr (fused_cluster_blocks<Cfg>() > 1)
    kernel = nhwc ? winograd_wgmma_cluster_forward_kernel<Cfg, true, TIo>
                  : winograd_wgmma_cluster_forward_kernel<Cfg, false, TIo>;
  else if constexpr (Cfg::kWgmma) {
    if (!nhwc)
      kernel = winograd_wgmma_fused_forward_kernel<Cfg, false, TIo>;
    else if (f.reduction_pad / Cfg::kK <= kNhwcUApartMaxChunks)
      kernel = winograd_wgmma_fused_forward_kernel<Cfg, true, TIo, /*kUApart=*/true>;
    else
      kernel = winograd_wgmma_fused_forward_kernel<Cfg, true, TIo>;
  } else
    kernel = nhwc ? winograd_tc_fused_forward_kernel<Cfg, true, TIo>
                  : winograd_tc_fused_forward_kernel<Cfg, false, TIo>;
  // Every wgmma tile reads the single wgmma block's cache (the cluster tiles half of each chunk per
  // block).
  // (The staged-V tiles read its float16 counterpart, or for float16 calls its split cache.)
  using UTile = std::conditional_t<Cfg::kWgmma, WinogradWgmmaTile, Cfg>;
  if constexpr (Cfg::kVStaged) {
    if constexpr (Cfg::kProducts == 3)
      run_tc_vstaged<Cfg>(kernel, x, tc_transformed_filters<WinogradWgmmaTile, 3>(weight, f), f, bias, cv, y, nhwc);
    else
      run_tc_vstaged<Cfg>(kernel, x, tc_transformed_filters_f16<Cfg>(weight, f), f, bias, cv, y, nhwc);
  } else {
    const at::Tensor u = tc_transformed_filters<UTile, kMmaProducts<TIo>>(weight, f);
    launch_fused<float, Cfg>(kernel, Cfg::kForwardSmemBytes, x, u, f, bias, cv, y);
  }
}

// The tensor-core kernel's tile: 64 filters per block where a group has more than 32 filters, else
// 32 (one block holds them all). The 64-filter block halves the patch work per MMA, and its 16
// channels per chunk keep every thread loading and two MMA steps per barrier; it was the faster tile
// on every 3x3 suite layer (docs/winograd.md).
bool tc_tall(const WinogradConv& cv) { return cv.Kg() > WinogradTcTile::kM; }

// The tensor-core tiles, as tc_forward_tile and tc_grad_weight_tile name them.
constexpr int kTcIeee = -1, kTcTile = 0, kTcTileTall = 1, kTcTileWgmma = 2, kTcTileWgmmaCluster = 3,
              kTcTileWgmmaClusterVBulk = 4, kTcTileWgmmaClusterUVMulticast = 5;
// The f4x4 variant's tile on Hopper (run_tc_f4x4): no rule of the fused tiles names it.
constexpr int kTcTileWgmmaF4x4 = -2;
constexpr const char* kTcTileChoices[] = {"fused:tf32",
                                          "fused:tf32-tall",
                                          "fused:tf32-wgmma",
                                          "fused:tf32-wgmma-cluster",
                                          "fused:tf32-wgmma-cluster-vbulk",
                                          "fused:tf32-wgmma-cluster-uvmulticast"};
bool wgmma_tile(int tile) { return tile >= kTcTileWgmma && tile <= kTcTileWgmmaClusterUVMulticast; }

// A tile's name in last_choice for kernels of kProducts products per point product: float16's split
// operands (3xBF16) run the mma.sync tiles, named 3xbf16 and 3xbf16-tall, the single wgmma block,
// 3xbf16-wgmma, and the two-block staged-V cluster, 3xbf16-wgmma-cluster-vbulk.
template <int kProducts>
const char* tc_tile_choice(int tile) {
  if (tile == kTcTileWgmmaF4x4) return "f4x4:tf32-wgmma-cluster";
  if constexpr (kProducts == 3) {
    if (tile == kTcTileWgmmaClusterVBulk) return "fused:3xbf16-wgmma-cluster-vbulk";
    return tile == kTcTileWgmma ? "fused:3xbf16-wgmma" : tile == kTcTileTall ? "fused:3xbf16-tall" : "fused:3xbf16";
  }
  return kTcTileChoices[tile];
}

// The tile that calls of TIo run where the TF32 rule (tc_forward_tile) names `tile`. Split calls
// (float16) run the staged-V tiles as the two-block cluster on split V
// (WinogradWgmmaClusterVBulkSplitTile; the clusters of eight share float16 words only), and the
// single wgmma block (WinogradWgmmaStages' three products) where the rule names the fused cluster,
// which loads its own patches in TF32 words.
template <typename TIo>
int tile_for(int tile) {
  if (kMmaProducts<TIo> == 1 || !wgmma_tile(tile)) return tile;
  return tile == kTcTileWgmmaClusterVBulk || tile == kTcTileWgmmaClusterUVMulticast ? kTcTileWgmmaClusterVBulk
                                                                                     : kTcTileWgmma;
}
// The wgmma configs name the wgmma tiles in the same order (forced_tc_tile).
static_assert(kConfigTf32WgmmaCluster - kConfigTf32Wgmma == kTcTileWgmmaCluster - kTcTileWgmma &&
                  kConfigTf32WgmmaClusterVBulk - kConfigTf32Wgmma == kTcTileWgmmaClusterVBulk - kTcTileWgmma &&
                  kConfigTf32WgmmaClusterUVMulticast - kConfigTf32Wgmma ==
                      kTcTileWgmmaClusterUVMulticast - kTcTileWgmma &&
                  int(std::size(kTcTileChoices)) == kTcTileWgmmaClusterUVMulticast + 1,
              "wgmma configs and tiles in one order");

// The tensor-core tile of a call that runs them (point_gemms) as the variant and a forced config
// decide it: kTcIeee (the staged or F(4x4) variant -- which take tensor cores for their own batched
// GEMMs, winograd_conv, or for F(4x4)'s channels_last forward and grad_input the F(4x4) cluster,
// tc_forward_tile --, a forced IEEE tile config), the forced tile, or
// kTcTileByRule (the fused or auto variant, no forced config). A wgmma tile forced where wgmma cannot
// run is a ValueError.
constexpr int kTcTileByRule = kTcTileWgmmaClusterUVMulticast + 1;
int forced_tc_tile() {
  const WinogradVariant variant = winograd_variant();
  if (variant != WinogradVariant::kFused && variant != WinogradVariant::kAuto) return kTcIeee;
  const int forced = forced_config(kWinograd);
  if (forced >= kConfigTf32Wgmma && forced <= kConfigTf32WgmmaClusterUVMulticast) {
    TORCH_CHECK_VALUE(wgmma_device(), "torchconv.conv2d_winograd: config '", kConfigNames[forced],
                      "' (forced by set_config) runs on sm_90a GPUs (Hopper) only; this GPU or build runs tf32 and "
                      "tf32-tall");
    return kTcTileWgmma + (forced - kConfigTf32Wgmma);
  }
  if (forced == kConfigTf32 || forced == kConfigTf32Tall) return forced == kConfigTf32Tall ? kTcTileTall : kTcTile;
  return forced >= 0 ? kTcIeee : kTcTileByRule;
}

// The reduction (channels per group) from which calls without V staged take the fused wgmma cluster
// tile: it halves the shared-memory and L2 traffic of U per MMA, which pays where the reduction is
// long. With patches loaded in the kernel, each block loads 3 of a patch's 4 rows for its half of the
// points, 1.5 times the single block's patch loads, which weighs more where the reduction is short.
constexpr int kClusterMinReduction = 256;
// The reduction from which calls take the staged-V cluster tile where its grid is large enough
// (staged_v_fills): its per-block fixed costs (the mbarriers, the first chunk's wait, the exchange of
// partial outputs and the stores) weigh more where a block's reduction is short. With 128 channels
// (Y8: 256 filters, 68 x 68) it ran faster than the single wgmma block in both layouts, with 64 (Y4)
// slower (docs/winograd.md).
constexpr int kStagedMinReduction = 128;
// The outputs per group from which calls take a cluster tile. Up to this many are one or two
// 64-filter blocks: they share a staged V (written and read once, four times the input) too little
// to repay its round trip, and a single block's U traffic per MMA is small next to its patch loads
// (docs/winograd.md: a grad_input of 128 outputs over 256 channels ran faster on the single block
// than on the staged clusters of three stages, and on channels_last than on the fused cluster) --
// but for staged_words_two_blocks.
constexpr int kClusterMinOutputs = 129;
// Two whole filter blocks (128 outputs) over a long reduction (kClusterMinReduction) do repay a staged
// V where it travels in float16 words, whose clusters copy three chunks ahead (four stages), and the
// grid fills the GPU twice (Y8's grad_input, 128 outputs over 256 filters, 68 x 68, ran faster staged
// in both layouts; float16's split, three stages, did not; 128 over 128 channels and 64 over 128 did
// not either: docs/winograd.md).
constexpr int kStagedWordsMinOutputs = 128;

// Whether the staged-V clusters' grid is large enough for them. The transform kernel writes V (four
// times the input) once, and every filter block copies it as it is instead of loading its own
// patches. Forwards, NCHW and channels_last, take them where the grid fills at least half the GPU.
// grad_inputs only where it fills the GPU twice: a backward's host work between its launches leaves
// the GPU waiting on grids of a wave or two, and the staged chain's two more launches and its
// workspace add to that host time more than its kernels save (docs/winograd.md). The two-block
// clusters of tf32-wgmma-cluster-vbulk: with operands in float16 they outran the clusters of eight
// that share V and U by multicast on every layer measured, which wait for each other's blocks every
// chunk and fit fewer blocks on the GPU at once.
int64_t staged_v_blocks(const WinogradConv& cv) {
  using Cfg = WinogradWgmmaClusterVBulkTile;
  return fused_blocks<Cfg>(ceil_div(cv.Kg(), Cfg::kM), ceil_div(cv.tiles(), Cfg::kN), cv.groups);
}
bool staged_v_fills(const WinogradConv& cv) {
  const int64_t blocks = staged_v_blocks(cv), sms = sm_count();
  return cv.transposed ? blocks >= 2 * sms : 2 * blocks >= sms;
}
// Whether a call of two whole filter blocks takes the staged-V clusters (kStagedWordsMinOutputs):
// float16 words (not float16's split), a long reduction, a grid that fills the GPU twice.
bool staged_words_two_blocks(const WinogradConv& cv, bool split_operands) {
  return !split_operands && cv.Kg() >= kStagedWordsMinOutputs && cv.Cg() >= kClusterMinReduction &&
         staged_v_blocks(cv) >= 2 * int64_t(sm_count());
}

// The f4x4 variant's forward or grad_input on tensor cores: the staged-V F(4x4) cluster for
// channels_last calls of one TF32-precise product (float32 under the TF32 switch, bfloat16: F(4x4)'s
// error then about 1.6x a bfloat16 convolution's, docs/winograd.md) where the device has wgmma and no
// config is forced. NCHW calls (whose transform would read, and whose epilogue write, a value a lane
// from 32 planes), float16's split operands, a forced config and other GPUs keep the staged pipeline
// (winograd_conv), as do groups of fewer channels than a chunk's 16 (an RGB stem's 3, padded to 16,
// ran slower on the cluster than on the pipeline).
int f4x4_tile(const WinogradConv& cv, bool channels_last, bool split_operands) {
  return channels_last && !split_operands && cv.Cg() >= WinogradWgmmaF4x4ClusterTile::kK && wgmma_device() &&
                 forced_config(kWinograd) < 0
             ? kTcTileWgmmaF4x4
             : kTcIeee;
}

// Where auto runs bfloat16's channels_last forward and grad_input on the F(4x4) cluster (f4x4_tile):
// F(4x4) at TF32's precision keeps bfloat16's error within 2x a bfloat16 cuDNN convolution's (about
// 1.6x, docs/winograd.md), where float32's TF32 calls would take several times cuDNN's TF32 error and
// keep F(2x2). The cluster's block pays a fixed cost (its epilogue, which finishes each output block
// from its three blocks' M through distributed shared memory, and its pipeline's fill) that a deep
// reduction spreads; it holds an SM alone, so a grid of one or two waves leaves SMs idle in its last;
// and its staged V, 2.25x F(2x2)'s words a pixel, is read once per filter block. On the layers
// measured (docs/winograd.md, "The F(4x4) cluster under auto") it outran F(2x2)'s tiles from 256
// channels a group (16 chunks) on a grid that fills two thirds of the SMs, and from 64 channels with
// two filter blocks or more on a grid of four waves or more; not with one filter block, nor on fewer
// waves at 128 channels.
constexpr int kF4x4ClusterMinReduction = 64, kF4x4ClusterDeepReduction = 256;
constexpr int kF4x4ClusterMinOutputs = 128, kF4x4ClusterShallowMinWaves = 4;
bool prefer_f4x4_cluster(const WinogradConv& cv) {
  using Cfg = WinogradWgmmaF4x4ClusterTile;
  const int64_t tiles =
      int64_t(cv.N) * winograd_tiles_of<WinogradF4x4>(cv.out_H) * winograd_tiles_of<WinogradF4x4>(cv.out_W);
  const int64_t blocks =
      fused_blocks<Cfg>(ceil_div(int64_t(cv.Kg()), int64_t(Cfg::kM)), ceil_div(tiles, int64_t(Cfg::kN)), cv.groups);
  const int64_t sms = sm_count();  // one block an SM (Cfg::kMinBlocks)
  if (cv.Cg() >= kF4x4ClusterDeepReduction) return 3 * blocks >= 2 * sms;
  return cv.Cg() >= kF4x4ClusterMinReduction && cv.Kg() >= kF4x4ClusterMinOutputs &&
         blocks >= kF4x4ClusterShallowMinWaves * sms;
}

// A forward or grad_input on tensor cores (`channels_last`: the call's memory format;
// `split_operands`: float16's, three bfloat16 products; `bfloat16`: a bfloat16 call's): the
// tensor-core kernel's tile, by the rule on every layer but those of the shallow and narrow kernels
// (kTcIeee). Under auto, bfloat16's channels_last calls where prefer_f4x4_cluster the F(4x4)
// cluster. Elsewhere, where a group has more than 32 filters, a 64-filter block: where the device
// has wgmma, the single wgmma block below kClusterMinOutputs outputs (but staged_words_two_blocks)
// or kStagedMinReduction channels, the staged-V clusters from there where their grid fills the GPU
// enough (staged_v_fills), and below that channels_last calls of at least kClusterMinReduction
// channels the fused cluster, whose channel-run patch loads cost less than NCHW's; mma.sync's
// tf32-tall elsewhere. Whether a tile runs does not depend on the dtype (the F(4x4) cluster only
// replaces a tile), only which tile.
int tc_forward_tile(const WinogradConv& cv, bool channels_last, bool split_operands, bool bfloat16) {
  if (winograd_variant() == WinogradVariant::kF4x4) return f4x4_tile(cv, channels_last, split_operands);
  const int forced = forced_tc_tile();
  if (forced != kTcTileByRule) return forced;
  if (cv.Cg() <= kShallowMaxReduction || cv.Kg() <= kNarrowMaxOutputs) return kTcIeee;
  if (bfloat16 && winograd_variant() == WinogradVariant::kAuto && prefer_f4x4_cluster(cv) &&
      f4x4_tile(cv, channels_last, split_operands) == kTcTileWgmmaF4x4)
    return kTcTileWgmmaF4x4;
  if (!tc_tall(cv)) return kTcTile;
  if (!wgmma_device()) return kTcTileTall;
  if (cv.Cg() < kStagedMinReduction) return kTcTileWgmma;
  if (cv.Kg() < kClusterMinOutputs)
    return staged_words_two_blocks(cv, split_operands) ? kTcTileWgmmaClusterVBulk : kTcTileWgmma;
  if (staged_v_fills(cv)) return kTcTileWgmmaClusterVBulk;
  return channels_last && cv.Cg() >= kClusterMinReduction ? kTcTileWgmmaCluster : kTcTileWgmma;
}

// How a float32 call's point GEMMs run: on CUDA cores in IEEE FP32 (kIeee), or on tensor cores --
// TF32 products (kTf32: float32 calls under PyTorch's TF32 switch, bfloat16 calls widened) or three
// bfloat16 products of split operands (kSplitBf16: float16 calls widened, whose error a TF32 rounding
// of V would put at 2.5x cuDNN's). The tensor-core fused tiles take a call unless kIeee; the staged
// variant's GEMMs follow it; F(4x4)'s take kTf32 only (split, its error is not known to meet the bar).
enum class PointGemms { kIeee, kTf32, kSplitBf16 };
constexpr int mma_products(PointGemms g) { return g == PointGemms::kSplitBf16 ? 3 : 1; }

// The staged pipeline for F(m x m, 3 x 3) (cv's tiles are Tile's): input transform, batched GEMM
// over Tile::kPoints / Cfg::kBatch point groups per convolution group (on tensor cores unless
// kGemms is kIeee), output transform.
template <typename Tile, typename T, typename Cfg, PointGemms kGemms = PointGemms::kIeee>
void run_staged(const at::Tensor& x, const at::Tensor& u, const FilterLayout& f, const T* bias, const WinogradConv& cv,
                at::Tensor& y) {
  constexpr int kPointGroups = Tile::kPoints / Cfg::kBatch;
  static_assert(Tile::kPoints % Cfg::kBatch == 0, "the GEMM block takes whole point groups");
  const int64_t tiles = cv.tiles();
  // V and M per tile column; a chunk is a whole number of block tiles (at least one).
  const int64_t bytes_per_tile = int64_t(Tile::kPoints) * cv.groups * (f.reduction_pad + f.outputs_pad) * sizeof(T);
  int64_t chunk = columns_per_chunk(tiles, bytes_per_tile);
  if (chunk < tiles) chunk = std::max<int64_t>(Cfg::kN, chunk / Cfg::kN * Cfg::kN);
  chunk = std::min(chunk, tiles);
  const int64_t chunk_pad = ceil_div(chunk, Cfg::kN) * Cfg::kN;
  at::Tensor v = new_workspace({int64_t(cv.groups) * f.reduction_pad * Tile::kPoints * chunk_pad}, x.options());
  at::Tensor m = new_workspace({int64_t(cv.groups) * Tile::kPoints * f.outputs_pad * chunk_pad}, x.options());
  record_workspace_bytes((v.numel() + m.numel()) * int64_t(sizeof(T)));
  void (*gemm)(const StagedGemmArgs<T>) = nullptr;
  if constexpr (kGemms != PointGemms::kIeee) {
    static_assert(std::is_same_v<T, float>, "tensor-core GEMMs for float32 operands");
    gemm = winograd_batched_gemm_mma_kernel<Cfg, mma_products(kGemms)>;
  } else {
    gemm = winograd_batched_gemm_kernel<T, Cfg>;
  }
  constexpr size_t smem = Cfg::template mainloop_smem_bytes<T>();
  ensure_dynamic_smem(gemm, smem, "conv2d_winograd");
  for (int64_t t0 = 0; t0 < tiles; t0 += chunk) {
    const int64_t count = std::min<int64_t>(chunk, tiles - t0);
    const int tiles_pad = round_up(int(count), Cfg::kN);
    winograd_input_transform_kernel<Tile, T, Cfg::kBatch>
        <<<elementwise_blocks(int64_t(cv.groups) * f.reduction_pad * tiles_pad, 256), 256, 0, current_stream()>>>(
            x.const_data_ptr<T>(), v.mutable_data_ptr<T>(), cv, t0, count, tiles_pad, f.reduction_pad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    StagedGemmArgs<T> a;
    a.u = u.const_data_ptr<T>(), a.v = v.const_data_ptr<T>(), a.m = m.mutable_data_ptr<T>();
    a.reduction_pad = f.reduction_pad, a.outputs_pad = f.outputs_pad, a.tiles_pad = tiles_pad;
    a.k_tiles = f.outputs_pad / Cfg::kM, a.p_tiles = tiles_pad / Cfg::kN;
    const int64_t blocks = int64_t(a.k_tiles) * a.p_tiles * cv.groups * kPointGroups;
    check_grid(blocks, "conv2d_winograd");
    gemm<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    winograd_output_transform_kernel<Tile, T>
        <<<elementwise_blocks(int64_t(cv.out_C) * count, 256), 256, 0, current_stream()>>>(
            m.const_data_ptr<T>(), bias, y.mutable_data_ptr<T>(), cv, t0, count, tiles_pad, f.outputs_pad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// The staged pipeline of Tile with tile config Cfg, its filters transformed (and cached) in Cfg's
// layout. A tensor-core config lays U, V and M out as the IEEE config of the same blocks does, so
// both share U's cache entry.
template <typename Tile, typename T, typename Cfg, PointGemms kGemms = PointGemms::kIeee>
void run_staged_with(const at::Tensor& x, const at::Tensor& weight, const T* bias, const WinogradConv& cv,
                     at::Tensor& y) {
  const FilterLayout f = filter_layout<Cfg>(weight, cv.groups, cv.transposed);
  const at::Tensor u = transformed_filters<T, Tile, Cfg::kBatch>(weight, f);
  run_staged<Tile, T, Cfg, kGemms>(x, u, f, bias, cv, y);
}

// F(4x4, 3x3): its own tiles of x, its own filters (36 points in point groups), the staged pipeline;
// the point GEMMs on TF32 tensor cores where `tf32` (a float32 call of the f4x4 variant under
// PyTorch's TF32 switch).
template <typename T>
void run_f4x4(const at::Tensor& x, const at::Tensor& weight, const T* bias, const LaunchMap& map, at::Tensor& y,
              bool tf32) {
  const WinogradConv cv = winograd_launch<WinogradF4x4>(map);
  if constexpr (std::is_same_v<T, float>) {
    if (tf32)
      return run_staged_with<WinogradF4x4, float, WinogradF4x4TileTf32, PointGemms::kTf32>(x, weight, bias, cv, y);
  }
  using Cfg = std::conditional_t<std::is_same_v<T, double>, WinogradF4x4TileF64, WinogradF4x4TileF32>;
  run_staged_with<WinogradF4x4, T, Cfg>(x, weight, bias, cv, y);
}

template <typename T, typename TIo, int kReduction>
void launch_shallow(const ShallowArgs<T, TIo>& a, int64_t blocks) {
  winograd_shallow_forward_kernel<T, TIo, kReduction><<<unsigned(blocks), kShallowThreads, 0, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename TIo, int kReduction>
void launch_shallow_nhwc(const ShallowArgs<float, TIo>& a, int64_t blocks) {
  winograd_shallow_nhwc_forward_kernel<TIo, kReduction><<<unsigned(blocks), kShallowThreads, 0, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// T: the compute type, TIo: x's, y's and the bias's (T, or a 16-bit type computed in float). `nhwc`
// (float compute only): x and y are channels_last.
template <typename T, typename TIo = T>
void run_shallow(const at::Tensor& x, const at::Tensor& u, const FilterLayout& f, const TIo* bias,
                 const WinogradConv& cv, at::Tensor& y, bool nhwc) {
  ShallowArgs<T, TIo> a;
  a.x = kernel_data<TIo>(x), a.u = u.const_data_ptr<T>(), a.bias = bias, a.y = mutable_kernel_data<TIo>(y);
  a.cv = cv, a.reduction_pad = f.reduction_pad, a.outputs_pad = f.outputs_pad;
  a.k_blocks = int(ceil_div(cv.Kg(), kShallowFilters));
  const int64_t p_blocks = ceil_div(cv.tiles(), nhwc ? kShallowNhwcTiles : kShallowThreads);
  const int64_t blocks = int64_t(a.k_blocks) * p_blocks * cv.groups;
  check_grid(blocks, "conv2d_winograd");
  a.p_blocks = int(p_blocks);
  if constexpr (std::is_same_v<T, float>) {
    if (nhwc) {
      switch (cv.Cg()) {
        case 1: launch_shallow_nhwc<TIo, 1>(a, blocks); break;
        case 2: launch_shallow_nhwc<TIo, 2>(a, blocks); break;
        case 3: launch_shallow_nhwc<TIo, 3>(a, blocks); break;
        default: launch_shallow_nhwc<TIo, 4>(a, blocks); break;
      }
      return record_workspace_bytes(0);
    }
  }
  TORCH_INTERNAL_ASSERT(!nhwc, "winograd: the shallow kernel reads NHWC in float32 compute only");
  switch (cv.Cg()) {
    case 1: launch_shallow<T, TIo, 1>(a, blocks); break;
    case 2: launch_shallow<T, TIo, 2>(a, blocks); break;
    case 3: launch_shallow<T, TIo, 3>(a, blocks); break;
    default: launch_shallow<T, TIo, 4>(a, blocks); break;
  }
  record_workspace_bytes(0);
}

template <typename T, typename TIo, int kOutputs>
void launch_narrow(const ShallowArgs<T, TIo>& a, int64_t blocks) {
  winograd_narrow_forward_kernel<T, TIo, kOutputs><<<unsigned(blocks), kShallowThreads, 0, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename TIo, int kOutputs, int kVec>
void launch_narrow_nhwc(const ShallowArgs<float, TIo>& a, int64_t blocks) {
  winograd_narrow_nhwc_forward_kernel<TIo, kOutputs, kVec>
      <<<unsigned(blocks), kShallowThreads, 0, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
template <typename TIo, int kVec>
void launch_narrow_nhwc(const ShallowArgs<float, TIo>& a, int64_t blocks, int outputs) {
  switch (outputs) {
    case 1: return launch_narrow_nhwc<TIo, 1, kVec>(a, blocks);
    case 2: return launch_narrow_nhwc<TIo, 2, kVec>(a, blocks);
    case 3: return launch_narrow_nhwc<TIo, 3, kVec>(a, blocks);
    default: return launch_narrow_nhwc<TIo, 4, kVec>(a, blocks);
  }
}

// T and TIo as run_shallow's. `nhwc` (float compute only): x and y are channels_last, read by
// winograd_narrow_nhwc_forward_kernel -- kNarrowNhwcVec channels a lane and step where a group's
// channels come in aligned runs of them (whatever the dtype, so that a 16-bit call sums as the float32
// call does), else one.
template <typename T, typename TIo = T>
void run_narrow(const at::Tensor& x, const at::Tensor& u, const FilterLayout& f, const TIo* bias,
                const WinogradConv& cv, at::Tensor& y, bool nhwc = false) {
  ShallowArgs<T, TIo> a;
  a.x = kernel_data<TIo>(x), a.u = u.const_data_ptr<T>(), a.bias = bias, a.y = mutable_kernel_data<TIo>(y);
  a.cv = cv, a.reduction_pad = f.reduction_pad, a.outputs_pad = f.outputs_pad;
  a.k_blocks = 1;
  // The NHWC kernel's blocks walk its tile groups: two blocks per SM, or fewer where the groups are few.
  const int64_t p_blocks =
      nhwc ? std::min(ceil_div(cv.tiles(), kNarrowNhwcTiles), std::max<int64_t>(1, 2 * int64_t(sm_count()) / cv.groups))
           : ceil_div(cv.tiles(), kShallowThreads);
  const int64_t blocks = p_blocks * cv.groups;
  check_grid(blocks, "conv2d_winograd");
  a.p_blocks = int(p_blocks);
  if constexpr (std::is_same_v<T, float>) {
    if (nhwc) {
      const bool runs = cv.Cg() % kNarrowNhwcVec == 0 && cv.src_C % kNarrowNhwcVec == 0 &&
                        aligned_to(a.x, 8);
      if (runs)
        launch_narrow_nhwc<TIo, kNarrowNhwcVec>(a, blocks, cv.Kg());
      else
        launch_narrow_nhwc<TIo, 1>(a, blocks, cv.Kg());
      return record_workspace_bytes(0);
    }
  }
  TORCH_INTERNAL_ASSERT(!nhwc, "winograd: the narrow kernel reads NHWC in float32 compute only");
  switch (cv.Kg()) {
    case 1: launch_narrow<T, TIo, 1>(a, blocks); break;
    case 2: launch_narrow<T, TIo, 2>(a, blocks); break;
    case 3: launch_narrow<T, TIo, 3>(a, blocks); break;
    default: launch_narrow<T, TIo, 4>(a, blocks); break;
  }
  record_workspace_bytes(0);
}

// The "auto" rule. The fused kernel transforms each input tile once per block of 32 filters, so its
// transform work grows with K and costs about a third of its time at any size; the staged pipeline
// transforms once but writes and reads V and M, traffic per tile that grows with C + K while the
// GEMM work grows with C x K. Staged therefore wins once C K / (C + K) is large: on the H100 the
// crossover sat between C = 128, K = 256 (fused 20% faster) and C = K = 256 (a tie), and staged won
// the layers with 256-1024 channels by 9-25% (docs/winograd.md).
bool prefer_staged(const WinogradConv& cv) {
  const int64_t c = cv.Cg(), k = cv.Kg();
  return c * k >= 128 * (c + k);
}

// Where auto runs F(4x4, 3x3) instead of F(2x2) (float only; double keeps F(2x2)). F(4x4) does 1.78x
// fewer multiplications, and its staged V and M traffic per output is 0.56x F(2x2)'s, but it is three
// launches and two workspace allocations where fused F(2x2) is one launch, so small calls pay more
// host time than they save. Its GEMM saving grows with C K / (C + K) and with the pixels: on the H100
// (eager calls at N = 1 to 32, docs/winograd.md) it won every layer from C K / (C + K) = 85 up, the
// layers between 40 and 80 once (C K / (C + K) - 40) x N Ho Wo reached about 80000, and none below 40.
// Those runs used 32 x 32 GEMM blocks; the kept 32 x 64 block is faster, and with it F(4x4) also leads
// where C K / (C + K) is 32 (C = K = 64, ResNet's first stage) on large calls (on 56 x 56 planes from
// batch 16 on both the H100 and the H200; level on the H100 and behind on the H200 at batch 8; behind at
// batch 1), while at 21 (Y2) it trails at every size: from 30 up, calls of at least 40000 positions take
// F(4x4), a line between batch 8's 25088 and batch 16's 50176 on 56 x 56.
constexpr double kF4x4AlwaysFromRatio = 80;
constexpr double kF4x4ExcessRatioFrom = 40, kF4x4MinExcessRatioPixels = 80000;
constexpr double kF4x4LargeCallFromRatio = 30, kF4x4LargeCallMinPixels = 40000;
bool prefer_f4x4(const WinogradConv& cv) {
  const double c = cv.Cg(), k = cv.Kg();
  const double ratio = c * k / (c + k);
  const double pixels = double(cv.N) * cv.out_H * cv.out_W;
  return ratio >= kF4x4AlwaysFromRatio ||
         (ratio > kF4x4ExcessRatioFrom && (ratio - kF4x4ExcessRatioFrom) * pixels >= kF4x4MinExcessRatioPixels) ||
         (ratio >= kF4x4LargeCallFromRatio && pixels >= kF4x4LargeCallMinPixels);
}

// Whether winograd_conv runs the shallow kernel (one tile per thread) for an IEEE call of cv: at most
// kShallowMaxReduction channels per group under the fused or auto variant (auto's staged and F(4x4)
// rules never take such a layer), unless a float tile config is forced (so that both can be timed).
// Computing in float32 it reads and writes channels_last operands itself, of float or a 16-bit type;
// such a layer's grad_weight runs winograd_shallow_weight_grad_kernel the same way.
template <typename T>
bool runs_shallow(const WinogradConv& cv) {
  const WinogradVariant variant = winograd_variant();
  if (variant != WinogradVariant::kFused && variant != WinogradVariant::kAuto) return false;
  if (!std::is_same_v<T, double> && forced_config(kWinograd) >= 0) return false;
  return cv.Cg() >= 1 && cv.Cg() <= kShallowMaxReduction;
}

// Whether winograd_conv runs the narrow kernel (one tile per thread) for an IEEE call of cv: at most
// kNarrowMaxOutputs filters per group where the shallow kernel does not run, under the fused or auto
// variant (auto's staged and F(4x4) rules never take such a layer), unless a float tile config is forced.
// Computing in float32 it reads and writes channels_last operands itself (winograd_narrow_nhwc_forward_kernel).
template <typename T>
bool runs_narrow(const WinogradConv& cv) {
  const WinogradVariant variant = winograd_variant();
  if (variant != WinogradVariant::kFused && variant != WinogradVariant::kAuto) return false;
  if (!std::is_same_v<T, double> && forced_config(kWinograd) >= 0) return false;
  return !runs_shallow<T>(cv) && cv.Kg() >= 1 && cv.Kg() <= kNarrowMaxOutputs;
}

// Whether winograd_conv runs a one-tile-per-thread kernel (the shallow or the narrow one) for cv.
template <typename T>
bool runs_thread_tile(const WinogradConv& cv) {
  return runs_shallow<T>(cv) || runs_narrow<T>(cv);
}

// Whether grad_weight runs winograd_shallow_weight_grad_kernel (for float32 and 16-bit calls that no
// tensor-core tile takes): the layers of the shallow forward kernel.
bool runs_shallow_weight_grad(const ConvShape& p) { return runs_shallow<float>(winograd_launch(forward_map(p))); }

// A forward or grad_input of the shallow or narrow kernel (runs_thread_tile) computed in T (float:
// IEEE FP32, or double) on x, y and the bias of TIo (T, or for float bfloat16 or float16 -- the
// float32 call's arithmetic on the same values, so its bits rounded once). `weight` is of T, or for
// float of TIo too (the filter transform reads a 16-bit weight as it is). `nhwc` (float only): x and
// y are channels_last.
template <typename T, typename TIo = T>
void winograd_thread_tile_conv(const at::Tensor& x, const at::Tensor& weight, const TIo* bias, const WinogradConv& cv,
                               at::Tensor& y, bool nhwc) {
  if (cv.tiles() == 0 || cv.out_C == 0) return record_workspace_bytes(0);
  const char* pass = cv.transposed ? "grad_input" : "forward";
  const bool shallow = runs_shallow<T>(cv);
  TORCH_INTERNAL_ASSERT(shallow || runs_narrow<T>(cv),
                        "winograd: a layer of neither the shallow nor the narrow kernel");
  // grad_input: the reversed taps are the filter rotated.
  const FilterLayout f = filter_layout<WinogradShallowTile>(weight, cv.groups, cv.transposed);
  const at::Tensor u = transformed_filters<T>(weight, f);
  record_last_choice(pass, shallow ? "fused:shallow" : "fused:narrow", 1);
  if (nhwc) record_last_operand(pass, "nhwc");
  if (shallow) return run_shallow<T, TIo>(x, u, f, bias, cv, y, nhwc);
  run_narrow<T, TIo>(x, u, f, bias, cv, y, nhwc);
}

// A forward or grad_input (`map`) on the tensor-core tile `tile` (not kTcIeee; for split calls the
// single wgmma block or the two-block staged-V cluster among the wgmma tiles, tile_for; the f4x4
// variant's F(4x4) cluster, f4x4_tile): x, bias and y of TIo, the weight float32 or TIo (the filter
// transforms read either).
template <typename TIo>
void winograd_tc_conv(const at::Tensor& x, const at::Tensor& weight, const TIo* bias, const LaunchMap& map,
                      at::Tensor& y, int tile, bool nhwc) {
  const WinogradConv cv = tile == kTcTileWgmmaF4x4 ? winograd_launch<WinogradF4x4>(map) : winograd_launch(map);
  if (cv.tiles() == 0 || cv.out_C == 0) return record_workspace_bytes(0);
  const char* pass = cv.transposed ? "grad_input" : "forward";
  record_last_choice(pass, tc_tile_choice<kMmaProducts<TIo>>(tile), 1);
  if (nhwc) record_last_operand(pass, "nhwc");
  if constexpr (kMmaProducts<TIo> == 1) {
    if (tile == kTcTileWgmmaF4x4) return run_tc_f4x4(x, weight, bias, cv, y, nhwc);
    if (tile == kTcTileWgmma) return run_tc_fused<WinogradWgmmaTile>(x, weight, bias, cv, y, nhwc);
    if (tile == kTcTileWgmmaCluster) return run_tc_fused<WinogradWgmmaClusterTile>(x, weight, bias, cv, y, nhwc);
    if (tile == kTcTileWgmmaClusterVBulk)
      return run_tc_fused<WinogradWgmmaClusterVBulkTile>(x, weight, bias, cv, y, nhwc);
    if (tile == kTcTileWgmmaClusterUVMulticast)
      return run_tc_fused<WinogradWgmmaClusterUVMulticastTile>(x, weight, bias, cv, y, nhwc);
  } else {
    if (tile == kTcTileWgmma) return run_tc_fused<WinogradWgmmaTile>(x, weight, bias, cv, y, nhwc);
    if (tile == kTcTileWgmmaClusterVBulk)
      return run_tc_fused<WinogradWgmmaClusterVBulkSplitTile>(x, weight, bias, cv, y, nhwc);
    TORCH_INTERNAL_ASSERT(!wgmma_tile(tile) && tile != kTcTileWgmmaF4x4,
                          "winograd: split float16 operands (3xBF16) run no fused cluster tile");
  }
  if (tile == kTcTileTall) return run_tc_fused<WinogradTcTileTall>(x, weight, bias, cv, y, nhwc);
  return run_tc_fused<WinogradTcTile>(x, weight, bias, cv, y, nhwc);
}

// One 3x3 stride-1 convolution of x into y (whose size is given) with the filters of `weight`
// (rotated and C / K swapped for grad_input), transformed once per weight and tile config.
// `tc_tile`: the tensor-core tile of a float32 call that runs them (the caller's TcForwardPlan,
// winograd_tc_conv), else kTcIeee. The fused F(2x2) variant (auto's choice then, except for the layers
// the shallow and narrow kernels take) runs its point GEMMs on tensor cores, which outrun IEEE
// F(4x4)'s fewer multiplications on CUDA cores (docs/winograd.md). `gemms`: how the call's point
// GEMMs run (point_gemms); the staged and F(4x4) variants take tensor cores for theirs unless kIeee
// (F(4x4) in TF32 only, with several times cuDNN's TF32 error, which is why no rule chooses it). A
// forced IEEE tile config and the shallow and narrow kernels stay in IEEE FP32. `nhwc`: x and y are channels_last,
// which the tensor-core kernels and the shallow and narrow kernels (float) take (the callers copy to
// NCHW for the others: tc_forward_plan).
template <typename T>
void winograd_conv(const at::Tensor& x, const at::Tensor& weight, const T* bias, const LaunchMap& map,
                   at::Tensor& y, int tc_tile = kTcIeee, bool nhwc = false, PointGemms gemms = PointGemms::kIeee) {
  if constexpr (std::is_same_v<T, float>) {
    if (tc_tile != kTcIeee) {
      // A float32 tile runs TF32 products: only calls of kTf32 reach one (a widened float16 pass
      // takes no tile, as its 16-bit call took none).
      TORCH_INTERNAL_ASSERT(gemms == PointGemms::kTf32, "winograd: a tensor-core tile for a call without TF32");
      return winograd_tc_conv<float>(x, weight, bias, map, y, tc_tile, nhwc);
    }
  }
  const WinogradConv cv = winograd_launch(map);
  if (cv.tiles() == 0 || cv.out_C == 0) return record_workspace_bytes(0);
  const WinogradVariant variant = winograd_variant();
  const char* pass = cv.transposed ? "grad_input" : "forward";
  if (variant == WinogradVariant::kF4x4 ||
      (variant == WinogradVariant::kAuto && std::is_same_v<T, float> && forced_config(kWinograd) < 0 &&
       prefer_f4x4(cv))) {
    const bool tf32_gemms = gemms == PointGemms::kTf32 && variant == WinogradVariant::kF4x4;
    record_last_choice(pass, tf32_gemms ? "f4x4:staged-tf32" : "f4x4:staged", 1);
    return run_f4x4<T>(x, weight, bias, map, y, tf32_gemms);
  }
  const bool staged = variant == WinogradVariant::kStaged || (variant == WinogradVariant::kAuto && prefer_staged(cv));
  // A shallow reduction or a narrow output runs its own fused kernel, one tile per thread, unless a
  // GEMM tile config is forced (so that both can be timed).
  if (runs_thread_tile<T>(cv)) return winograd_thread_tile_conv<T>(x, weight, bias, cv, y, nhwc);
  const bool rotated = cv.transposed;  // grad_input: the reversed taps are the filter rotated
  TORCH_INTERNAL_ASSERT(!nhwc, "winograd: only the tensor-core, shallow and narrow kernels read NHWC");
  if constexpr (std::is_same_v<T, float>) {
    // The staged variant asked for by a call on tensor cores: its point GEMMs there (TF32: F(2x2)'s
    // TF32 error, as the fused tiles'; 3xBF16: about IEEE FP32's), unless an IEEE tile config is forced.
    if (gemms != PointGemms::kIeee && variant == WinogradVariant::kStaged && forced_config(kWinograd) < 0) {
      if (gemms == PointGemms::kTf32) {
        record_last_choice(pass, "staged:tf32", 1);
        return run_staged_with<WinogradF2x2, float, WinogradStagedTileMma, PointGemms::kTf32>(x, weight, bias, cv, y);
      }
      record_last_choice(pass, "staged:3xbf16", 1);
      return run_staged_with<WinogradF2x2, float, WinogradStagedTileMma, PointGemms::kSplitBf16>(x, weight, bias, cv,
                                                                                                y);
    }
  }
  with_tile_config<T>(cv, staged, pass, [&](auto cfg) {
    using Cfg = decltype(cfg);
    const FilterLayout f = filter_layout<Cfg>(weight, cv.groups, rotated);
    const at::Tensor u = transformed_filters<T>(weight, f);
    if (staged) return run_staged<WinogradF2x2, T, Cfg>(x, u, f, bias, cv, y);
    run_fused<T, Cfg>(x, u, f, bias, cv, y);
  });
}

// Slices the tile reduction is split into: the fewest whose grid fills the GPU at least twice and
// fills the waves it takes (wave_filling_splits: a block's slice is its whole work, so a last wave of
// a few blocks costs a whole slice's time), at least 8 chunks per slice, and the slices within the
// workspace limit (each costs a write and a read of 16 x K x C values).
template <typename Cfg>
int64_t weight_grad_splits(int64_t tiles, int64_t base_blocks, int64_t slice_bytes) {
  const int64_t max_by_work = std::max<int64_t>(1, tiles / (8 * Cfg::kK));
  const int64_t max_by_memory = std::max<int64_t>(1, workspace_limit_bytes() / slice_bytes);
  const int64_t slots = int64_t(sm_count()) * Cfg::kMinBlocks;
  return wave_filling_splits(base_blocks, slots, std::min(max_by_work, max_by_memory), ceil_div(2 * slots, base_blocks));
}

// Sums a grad_weight's slices (in a fixed order, so the result is deterministic) and maps dU back to
// the filter: gw = G^T dU G, written in gw's dtype (T's, or a 16-bit weight's) and layout (contiguous,
// or channels_last). Below kFinishSumMaxSlices slices the finishing kernel reads them all; from there
// sum_slices_kernel's lanes (8 an element, which keep many loads in flight) first sum them into slice 0.
// From kFinishManySlices on the finish keeps several slices' loads in flight a lane.
constexpr int kFinishSumMaxSlices = 64, kFinishManySlices = 8;
template <typename T>
void finish_grad_weight(at::Tensor& partial, int64_t splits, int64_t slice_elems, const WinogradConv& cv, int k_pad,
                        int c_pad, at::Tensor& gw) {
  int slices = int(splits);
  if (splits >= kFinishSumMaxSlices) {
    launch_sum_slices(partial.const_data_ptr<T>(), partial.mutable_data_ptr<T>(), slice_elems, int(splits),
                      slice_elems, IdentitySliceMap{}, /*many_slices=*/kFinishSumMaxSlices);  // into slice 0, in place
    slices = 1;
  }
  const bool krsc = !gw.is_contiguous();
  TORCH_INTERNAL_ASSERT(!krsc || gw.is_contiguous(at::MemoryFormat::ChannelsLast), "winograd: grad_weight's layout");
  auto launch = [&](auto out, auto krsc_tag) {
    using TOut = std::remove_pointer_t<decltype(out)>;
    const int runs_per_filter = int(ceil_div(cv.Cg(), kWeightGradFinishRun));
    const int64_t runs = int64_t(cv.groups) * cv.Kg() * runs_per_filter;
    auto run = [&](auto kernel) {
      const unsigned blocks = elementwise_blocks(runs * (32 / kWeightGradFinishRuns), kWeightGradFinishThreads);
      launch_dependent(kernel, dim3(blocks), dim3(kWeightGradFinishThreads), partial.const_data_ptr<T>(), out,
                       cv.groups, cv.Kg(), cv.Cg(), make_fast_divisor(uint32_t(runs_per_filter)),
                       make_fast_divisor(uint32_t(cv.Kg())), k_pad, c_pad, slices, slice_elems);
    };
    constexpr bool kKrsc = decltype(krsc_tag)::value;
    // Four slices' loads in flight a lane where there are many; float64's sums keep one.
    if constexpr (std::is_same_v<T, float>) {
      if (slices >= kFinishManySlices) return run(winograd_weight_grad_finish_kernel<T, TOut, kKrsc, 4>);
    }
    run(winograd_weight_grad_finish_kernel<T, TOut, kKrsc, 1>);
  };
  auto launch_in = [&](auto out) {
    // float64 weights reach here contiguous (their gradient is float64 KCRS): no KRSC kernel for them.
    if constexpr (std::is_same_v<T, double>) {
      TORCH_INTERNAL_ASSERT(!krsc, "winograd: a float64 grad_weight is written KCRS");
      launch(out, std::false_type{});
    } else {
      if (krsc) launch(out, std::true_type{});
      else launch(out, std::false_type{});
    }
  };
  if (gw.scalar_type() == c10::CppTypeToScalarType<T>::value) {
    launch_in(gw.mutable_data_ptr<T>());
  } else if constexpr (std::is_same_v<T, float>) {  // a 16-bit weight's gradient from float32 sums
    TORCH_INTERNAL_ASSERT(gw.scalar_type() == at::kBFloat16 || gw.scalar_type() == at::kHalf,
                          "winograd: grad_weight's dtype");
    if (gw.scalar_type() == at::kBFloat16) launch_in(mutable_kernel_data<__nv_bfloat16>(gw));
    else launch_in(mutable_kernel_data<__half>(gw));
  } else {
    TORCH_INTERNAL_ASSERT(false, "winograd: grad_weight's dtype");
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename Cfg>
at::Tensor winograd_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                int64_t* workspace, PointGemms gemms = PointGemms::kIeee) {
  auto gy = grad_output.contiguous();
  auto x = input.contiguous();
  auto gw = new_output({p.K, p.channels_per_group(), 3, 3}, input.options());
  const WinogradConv cv = winograd_launch(forward_map(p));
  const int Kg = cv.Kg(), Cg = cv.Cg();
  const int64_t tiles = cv.tiles();
  if (tiles == 0) {
    gw.zero_();
    return gw;
  }
  const int k_pad = round_up(Kg, Cfg::kM), c_pad = round_up(Cg, Cfg::kN);
  const int k_tiles = k_pad / Cfg::kM, c_tiles = c_pad / Cfg::kN;
  const int64_t base_blocks = int64_t(k_tiles) * c_tiles * cv.groups;
  const int64_t slice_bytes = base_blocks * Cfg::kM * Cfg::kN * kWinogradPoints * int64_t(sizeof(T));
  constexpr size_t gemm_smem = Cfg::template mainloop_smem_bytes<T>();
  // f4x4 leaves grad_weight in F(2x2)'s domain, with auto's choice between fused and staged.
  const WinogradVariant variant = winograd_variant();
  const bool staged = variant == WinogradVariant::kStaged ||
                      ((variant == WinogradVariant::kAuto || variant == WinogradVariant::kF4x4) && prefer_staged(cv));
  // The staged variant asked for by a call on tensor cores: its GEMM there, as the forward's, unless
  // an IEEE tile config is forced (the narrow blocks have no tensor-core GEMM).
  constexpr bool kHasMmaGemm = std::is_same_v<T, float> && std::is_same_v<Cfg, WinogradTileF32>;
  const bool mma_gemm =
      kHasMmaGemm && gemms != PointGemms::kIeee && variant == WinogradVariant::kStaged && forced_config(kWinograd) < 0;
  at::Tensor partial;
  int64_t splits = 0;
  if (!staged) {
    // Both operands transformed on the fly inside the GEMM.
    splits = weight_grad_splits<Cfg>(tiles, base_blocks, slice_bytes);
    WeightGradArgs<T> a;
    a.x = x.const_data_ptr<T>(), a.gy = gy.const_data_ptr<T>(), a.cv = cv;
    a.k_pad = k_pad, a.c_pad = c_pad, a.k_tiles = k_tiles, a.c_tiles = c_tiles;
    a.tiles_per_split = round_up(int(ceil_div(tiles, splits)), Cfg::kK);
    splits = ceil_div(tiles, a.tiles_per_split);
    partial = new_workspace({splits * slice_bytes / int64_t(sizeof(T))}, x.options());
    *workspace = partial.numel() * int64_t(sizeof(T));
    a.partial = partial.mutable_data_ptr<T>();
    const int64_t blocks = base_blocks * splits;
    check_grid(blocks, "conv2d_winograd_backward");
    constexpr size_t smem = weight_grad_smem_bytes<T, Cfg>();
    auto kernel = winograd_weight_grad_kernel<T, Cfg>;
    ensure_dynamic_smem(kernel, smem, "conv2d_winograd_backward");
    kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    // V^T and dM^T transformed once per tile into a workspace, in chunks of tiles that fit half the
    // limit (the slices get the other half).
    const int64_t bytes_per_tile = int64_t(kWinogradPoints) * cv.groups * (c_pad + k_pad) * int64_t(sizeof(T));
    int64_t chunk = columns_per_chunk(tiles, 2 * bytes_per_tile);
    if (chunk < tiles) chunk = std::max<int64_t>(Cfg::kK, chunk / Cfg::kK * Cfg::kK);
    chunk = std::min(chunk, tiles);
    const int64_t chunk_pad = ceil_div(chunk, Cfg::kK) * Cfg::kK;
    TORCH_CHECK_VALUE(chunk_pad < (int64_t(1) << 31), "torchconv.conv2d_winograd_backward: tile chunk too large");
    splits = weight_grad_splits<Cfg>(chunk_pad, base_blocks, 2 * slice_bytes);
    auto vt = new_workspace({int64_t(cv.groups) * chunk_pad * kWinogradPoints * c_pad}, x.options());
    auto dmt = new_workspace({int64_t(cv.groups) * chunk_pad * kWinogradPoints * k_pad}, x.options());
    partial = new_workspace({splits * slice_bytes / int64_t(sizeof(T))}, x.options());
    *workspace = (vt.numel() + dmt.numel() + partial.numel()) * int64_t(sizeof(T));
    auto kernel = winograd_weight_grad_gemm_kernel<T, Cfg>;
    size_t smem = gemm_smem;
    int threads = Cfg::kThreads;
    if constexpr (kHasMmaGemm) {
      if (mma_gemm) {
        kernel = gemms == PointGemms::kTf32 ? winograd_weight_grad_gemm_mma_kernel<WinogradStagedTileMma, 1>
                                            : winograd_weight_grad_gemm_mma_kernel<WinogradStagedTileMma, 3>;
        smem = WinogradStagedTileMma::mainloop_smem_bytes<float>();
        threads = WinogradStagedTileMma::kThreads;
      }
    }
    ensure_dynamic_smem(kernel, smem, "conv2d_winograd_backward");
    for (int64_t t0 = 0; t0 < tiles; t0 += chunk) {
      const int64_t count = std::min<int64_t>(chunk, tiles - t0);
      const int tiles_pad = round_up(int(count), Cfg::kK);
      winograd_input_transform_by_tile_kernel<T>
          <<<elementwise_blocks(int64_t(cv.groups) * tiles_pad * c_pad, 256), 256, 0, current_stream()>>>(
              x.const_data_ptr<T>(), vt.mutable_data_ptr<T>(), cv, t0, count, tiles_pad, c_pad);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      winograd_grad_output_transform_kernel<T>
          <<<elementwise_blocks(int64_t(cv.groups) * tiles_pad * k_pad, 256), 256, 0, current_stream()>>>(
              gy.const_data_ptr<T>(), dmt.mutable_data_ptr<T>(), cv, t0, count, tiles_pad, k_pad);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      StagedWeightGradArgs<T> a;
      a.vt = vt.const_data_ptr<T>(), a.dmt = dmt.const_data_ptr<T>(), a.partial = partial.mutable_data_ptr<T>();
      a.groups = cv.groups, a.k_pad = k_pad, a.c_pad = c_pad, a.tiles_pad = tiles_pad;
      a.k_tiles = k_tiles, a.c_tiles = c_tiles, a.accumulate = t0 > 0;
      a.tiles_per_split = round_up(int(ceil_div(tiles_pad, splits)), Cfg::kK);
      // The first chunk is the largest, so it writes every slice the later ones add to.
      const int64_t used = ceil_div(tiles_pad, a.tiles_per_split);
      const int64_t blocks = base_blocks * used;
      check_grid(blocks, "conv2d_winograd_backward");
      kernel<<<unsigned(blocks), threads, smem, current_stream()>>>(a);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      if (t0 == 0) splits = used;
    }
  }
  // (last_choice keeps the pointer: literals only)
  const char* config = std::is_same_v<T, double>         ? (staged ? "staged:f64" : "fused:f64")
                       : Cfg::kN < WinogradTileF32::kN ? (staged ? "staged:narrow" : "fused:narrow")
                       : mma_gemm && staged            ? (gemms == PointGemms::kTf32 ? "staged:tf32" : "staged:3xbf16")
                                                       : (staged ? "staged:default" : "fused:default");
  record_last_choice("grad_weight", config, int(splits));
  finish_grad_weight<T>(partial, splits, slice_bytes / int64_t(sizeof(T)), cv, k_pad, c_pad, gw);
  return gw;
}

// A grad_weight kernel's operands in the call's memory format, its result, its launch (the shallow
// kernel's and the tensor-core ones'). The result: float32 sums written (finish_grad_weight) in
// `gw_dtype` (float32, or the 16-bit weight's dtype) and `gw_format`.
struct WeightGradCall {
  at::Tensor gy, x, gw;
  WinogradConv cv;
};
WeightGradCall weight_grad_call(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input, bool nhwc,
                                at::ScalarType gw_dtype, at::MemoryFormat gw_format) {
  const at::MemoryFormat format = nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  return {grad_output.contiguous(format), input.contiguous(format),
          new_output({p.K, p.channels_per_group(), 3, 3}, input.options().dtype(gw_dtype).memory_format(gw_format)),
          winograd_launch(forward_map(p))};
}

template <typename TIo, int kChannels, bool kNhwc>
void launch_shallow_weight_grad(const ShallowWeightGradArgs<TIo>& a, int64_t blocks) {
  constexpr size_t smem = sizeof(ShallowWeightGradSmem<kChannels>);
  auto kernel = winograd_shallow_weight_grad_kernel<TIo, kChannels, kNhwc>;
  ensure_dynamic_smem(kernel, smem, "conv2d_winograd_backward");
  kernel<<<unsigned(blocks), kShallowThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
template <typename TIo, int kChannels>
void launch_shallow_weight_grad(const ShallowWeightGradArgs<TIo>& a, int64_t blocks, bool nhwc) {
  if (nhwc) return launch_shallow_weight_grad<TIo, kChannels, true>(a, blocks);
  launch_shallow_weight_grad<TIo, kChannels, false>(a, blocks);
}

// grad_weight of a layer of the shallow forward kernel (runs_shallow: at most 4 channels per group),
// winograd_shallow_weight_grad_kernel, on grad_output and input of TIo (float, bfloat16 or float16) in
// the call's memory format (`nhwc`), in IEEE FP32 whatever the dtype; the result in weight_grad_call's
// dtype and format. Slices: enough blocks for two per SM twice over, each at least 4 batches of tiles,
// within the workspace limit.
template <typename TIo>
at::Tensor winograd_shallow_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                        bool nhwc, int64_t* workspace, at::ScalarType gw_dtype,
                                        at::MemoryFormat gw_format) {
  auto [gy, x, gw, cv] = weight_grad_call(p, grad_output, input, nhwc, gw_dtype, gw_format);
  const int64_t tiles = cv.tiles();
  *workspace = 0;
  if (tiles == 0) {
    record_last_choice("grad_weight", "fused:shallow", 1);
    gw.zero_();
    return gw;
  }
  ShallowWeightGradArgs<TIo> a;
  a.x = kernel_data<TIo>(x), a.gy = kernel_data<TIo>(gy), a.cv = cv;
  a.k_blocks = int(ceil_div(cv.Kg(), kShallowFilters));
  a.k_pad = a.k_blocks * kShallowFilters;
  const int64_t base_blocks = int64_t(a.k_blocks) * cv.groups;
  const int64_t slice_elems = base_blocks * kShallowFilters * kWinogradPoints * cv.Cg();
  const int64_t max_by_work = std::max<int64_t>(1, tiles / (4 * kShallowWeightGradBatch));
  const int64_t max_by_memory = std::max<int64_t>(1, workspace_limit_bytes() / (slice_elems * int64_t(sizeof(float))));
  int64_t splits = std::clamp<int64_t>(ceil_div(4 * int64_t(sm_count()), base_blocks), 1,
                                       std::min(max_by_work, max_by_memory));
  a.tiles_per_split = ceil_div(tiles, splits);
  splits = ceil_div(tiles, a.tiles_per_split);
  at::Tensor partial = new_workspace({splits * slice_elems}, gw.options().dtype(at::kFloat));
  *workspace = partial.numel() * int64_t(sizeof(float));
  a.partial = partial.mutable_data_ptr<float>();
  const int64_t blocks = base_blocks * splits;
  check_grid(blocks, "conv2d_winograd_backward");
  switch (cv.Cg()) {
    case 1: launch_shallow_weight_grad<TIo, 1>(a, blocks, nhwc); break;
    case 2: launch_shallow_weight_grad<TIo, 2>(a, blocks, nhwc); break;
    case 3: launch_shallow_weight_grad<TIo, 3>(a, blocks, nhwc); break;
    default: launch_shallow_weight_grad<TIo, 4>(a, blocks, nhwc); break;
  }
  record_last_choice("grad_weight", "fused:shallow", int(splits));
  if (nhwc) record_last_operand("grad_weight", "nhwc");
  finish_grad_weight<float>(partial, splits, slice_elems, cv, a.k_pad, cv.Cg(), gw);
  return gw;
}

// grad_weight with its point GEMMs on tensor cores in TF32 (winograd_tc_weight_grad_kernel): the fused
// variant's decomposition and slices. grad_output and input of TIo (float, bfloat16 or float16); the
// result is float32.
template <typename Cfg, typename TIo>
at::Tensor winograd_tc_grad_weight(WeightGradCall& call, const char* config, bool nhwc, int64_t* workspace) {
  auto& [gy, x, gw, cv] = call;
  const int64_t tiles = cv.tiles();
  if (tiles == 0) {
    gw.zero_();
    return gw;
  }
  WeightGradArgs<float, TIo> a;
  a.x = kernel_data<TIo>(x), a.gy = kernel_data<TIo>(gy), a.cv = cv;
  a.k_pad = round_up(cv.Kg(), Cfg::kM), a.c_pad = round_up(cv.Cg(), Cfg::kN);
  a.k_tiles = a.k_pad / Cfg::kM, a.c_tiles = a.c_pad / Cfg::kN;
  const int64_t base_blocks = int64_t(a.k_tiles) * a.c_tiles * cv.groups;
  const int64_t slice_elems = base_blocks * Cfg::kM * Cfg::kN * kWinogradPoints;
  int64_t splits = weight_grad_splits<Cfg>(tiles, base_blocks, slice_elems * int64_t(sizeof(float)));
  a.tiles_per_split = round_up(int(ceil_div(tiles, splits)), Cfg::kK);
  splits = ceil_div(tiles, a.tiles_per_split);
  auto partial = new_workspace({splits * slice_elems}, gw.options().dtype(at::kFloat));
  *workspace = partial.numel() * int64_t(sizeof(float));
  a.partial = partial.mutable_data_ptr<float>();
  const int64_t blocks = base_blocks * splits;
  check_grid(blocks, "conv2d_winograd_backward");
  void (*kernel)(WeightGradArgs<float, TIo>);
  if constexpr (Cfg::kWgmma)
    kernel = nhwc ? winograd_wgmma_weight_grad_kernel<Cfg, true, TIo> : winograd_wgmma_weight_grad_kernel<Cfg, false, TIo>;
  else
    kernel = nhwc ? winograd_tc_weight_grad_kernel<Cfg, true, TIo> : winograd_tc_weight_grad_kernel<Cfg, false, TIo>;
  ensure_dynamic_smem(kernel, Cfg::kWeightGradSmemBytes, "conv2d_winograd_backward");
  kernel<<<unsigned(blocks), Cfg::kThreads, Cfg::kWeightGradSmemBytes, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  record_last_choice("grad_weight", config, int(splits));
  if (nhwc) record_last_operand("grad_weight", "nhwc");
  finish_grad_weight<float>(partial, splits, slice_elems, cv, a.k_pad, a.c_pad, gw);
  return gw;
}

// Each channel's largest |value| of t (N, C, H, W; channels_last where `nhwc`) into
// out[group][pad] (channel_max_nchw_kernel, channel_max_nhwc_kernel; out zeroed).
template <typename TIo>
void launch_channel_max(const at::Tensor& t, bool nhwc, int per_group, int pad, float* out) {
  const int64_t images = t.size(0), plane = t.size(2) * t.size(3);
  const int channels = int(t.size(1));
  if (images * plane == 0) return;
  const TIo* data = kernel_data<TIo>(t);
  if (nhwc) {
    constexpr int kVec = 16 / int(sizeof(TIo));
    const bool vectors = channels_last_words(data, channels, channels);
    const int lanes = vectors ? channels / kVec : channels;
    const int lane_blocks = ceil_div(lanes, kChannelMaxThreads);
    const int rows = kChannelMaxThreads / std::min(lanes, kChannelMaxThreads);
    // About eight blocks per SM in all, and at least 4 pixels a thread row (its loads all in flight at
    // once: fewer, longer rows left small tensors, such as a 7x7 layer's, on a few SMs' loads in turn).
    const int64_t pixels = images * plane;
    const int64_t blocks = std::clamp<int64_t>(ceil_div(pixels, int64_t(4) * rows),
                                               1, std::max<int64_t>(1, int64_t(8) * sm_count() / lane_blocks));
    const int64_t per_block = ceil_div(pixels, blocks);
    const dim3 grid(unsigned(ceil_div(pixels, per_block)), unsigned(lane_blocks));
    if (vectors)
      channel_max_nhwc_kernel<TIo, kVec><<<grid, kChannelMaxThreads, 0, current_stream()>>>(data, pixels, channels,
                                                                                            per_block, per_group, pad, out);
    else
      channel_max_nhwc_kernel<TIo, 1><<<grid, kChannelMaxThreads, 0, current_stream()>>>(data, pixels, channels,
                                                                                         per_block, per_group, pad, out);
  } else {
    const int64_t blocks = ceil_div(images * channels * ceil_div(plane, int64_t(kChannelMaxRun)), int64_t(256 / 32));
    check_grid(blocks, "conv2d_winograd_backward");
    channel_max_nchw_kernel<TIo><<<unsigned(blocks), 256, 0, current_stream()>>>(data, images, channels, plane,
                                                                                  per_group, pad, out);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Slices of the staged grad_weight (winograd_wgmma_grad_weight_staged): the count whose passes take
// the least estimated time under the default workspace limit. A pass's reduction runs its slices'
// blocks (base_blocks each) in waves, and a block's time is its chunks' operands through its SM's
// bulk copies (each block reads a chunk's dM and V runs of its point half; the wave's blocks share
// the DRAM bandwidth when they are many); a pass holds the slices whose operands fit beside all the
// partial sums, so a slice count whose passes leave most SMs idle (a few slices of few blocks per
// pass) or end in a wave of a few blocks costs whole block times. More slices also cost their partial
// sums' write and the finish's read. Estimated for the default limit whatever the limit set, so that
// a call's slices -- and so its bits -- do not depend on it (a limit too small for one slice beside
// the partial sums still adds slices, as the caller does); at least 8 chunks per slice.
template <typename Cfg>
int64_t staged_weight_grad_splits(int64_t tiles, int64_t base_blocks, int64_t slice_bytes, int64_t chunk_bytes,
                                  int64_t max_bytes) {
  // Rates of the bound counts in docs/winograd.md: bulk copies from L2 into one SM's shared memory
  // (about 42 B per clock), DRAM, a block's set-up and partial-sum store, a pass's two launches.
  constexpr double kSmBytesPerUs = 75e3, kDramBytesPerUs = 3.5e6, kBlockUs = 3.0, kPassUs = 4.0;
  const double block_chunk_us = double((Cfg::kUFloats + Cfg::kVFloats) * int64_t(sizeof(float))) / kSmBytesPerUs;
  const int64_t all_chunks = ceil_div(tiles, int64_t(Cfg::kK));
  const int64_t slots = int64_t(sm_count()) * Cfg::kMinBlocks;
  const int64_t cap = std::min<int64_t>(std::max<int64_t>(1, tiles / (8 * Cfg::kK)), 4 * slots);
  int64_t best = 0;
  double best_us = 0.0;
  for (int64_t s = 1; s <= cap; ++s) {
    const int64_t per = ceil_div(all_chunks, s), slices = ceil_div(all_chunks, per);
    if (slices != s) continue;  // the same slices as a smaller count
    const int64_t room = kDefaultWorkspaceLimitBytes - slices * slice_bytes - max_bytes;
    if (room < per * chunk_bytes) continue;  // one slice's operands do not fit beside the partial sums
    const int64_t per_pass = std::min(room / (per * chunk_bytes), slices);
    auto pass_us = [&](int64_t n) {
      const double waves = double(ceil_div(base_blocks * n, slots));
      return std::max(waves * (double(per) * block_chunk_us + kBlockUs), double(n * per * chunk_bytes) / kDramBytesPerUs);
    };
    const int64_t full_passes = slices / per_pass, rest = slices % per_pass;
    const double us = double(full_passes) * pass_us(per_pass) + (rest > 0 ? pass_us(rest) : 0.0) +
                      double(full_passes + (rest > 0)) * kPassUs + double(slices * slice_bytes) / kDramBytesPerUs;
    if (best == 0 || us < best_us) best = s, best_us = us;
  }
  return best > 0 ? best : weight_grad_splits<Cfg>(tiles, base_blocks, slice_bytes);
}

// Whether the staged grad_weight's 16-bit channels_last operands read as 16-byte words of 8 rows
// (winograd_wgmma_weight_grad_operand_tiles_kernel): x's and grad_output's.
template <typename TIo>
bool weight_grad_operands_read_as_words(const WeightGradArgs<float, TIo>& a, const WinogradConv& cv) {
  static_assert(sizeof(TIo) == 2, "8 rows a 16-byte word");
  return channels_last_words(a.x, cv.Cg(), cv.src_C) && channels_last_words(a.gy, cv.Kg(), cv.out_C);
}

// grad_weight with dM and V staged in a workspace and reduced by winograd_wgmma_weight_grad_staged_kernel
// (the wgmma tile's layers where staged_weight_grad says). Slices of the tiles by
// staged_weight_grad_splits, then more where one slice's operands and the partial sums would not fit
// the workspace limit; the slices run in passes of as many as fit, each pass transforming its chunks
// and reducing them into its slices' partial sums. Float16 words (one product): each filter's and
// channel's largest |value| first (launch_channel_max), so that every pass carries them under the
// same scales.
template <typename TIo>
at::Tensor winograd_wgmma_grad_weight_staged(WeightGradCall& call, bool nhwc, int64_t* workspace) {
  using Cfg = WinogradWgmmaWeightGradStagedTile<kMmaProducts<TIo>>;
  constexpr bool kHalves = Cfg::kOperandBytes == 2;
  auto& [gy, x, gw, cv] = call;
  const int64_t tiles = cv.tiles();
  if (tiles == 0) {
    gw.zero_();
    return gw;
  }
  StagedWeightGradPass<TIo> s;
  WeightGradArgs<float, TIo>& a = s.w;
  a.x = kernel_data<TIo>(x), a.gy = kernel_data<TIo>(gy), a.cv = cv;
  a.k_pad = round_up(cv.Kg(), Cfg::kM), a.c_pad = round_up(cv.Cg(), Cfg::kN);
  a.k_tiles = a.k_pad / Cfg::kM, a.c_tiles = a.c_pad / Cfg::kN;
  const int64_t all_chunks = ceil_div(tiles, int64_t(Cfg::kK));
  const int64_t base_blocks = int64_t(2) * a.k_tiles * a.c_tiles * cv.groups;  // x 2 point halves
  const int64_t slice_floats = int64_t(cv.groups) * kWinogradPoints * a.k_pad * a.c_pad;
  const int64_t slice_bytes = slice_floats * int64_t(sizeof(float));
  const int64_t chunk_floats = int64_t(cv.groups) * (a.k_tiles * Cfg::kUChunkFloats + a.c_tiles * Cfg::kVChunkFloats);
  const int64_t chunk_bytes = chunk_floats * int64_t(sizeof(float));
  const int64_t max_floats = kHalves ? int64_t(cv.groups) * (a.k_pad + a.c_pad) : 0;
  // A slice's operands and all the partial sums: more slices while that exceeds the limit and shrinks.
  auto bytes_for = [&](int64_t slices) { return ceil_div(all_chunks, slices) * chunk_bytes + slices * slice_bytes; };
  int64_t splits = staged_weight_grad_splits<Cfg>(tiles, base_blocks, slice_bytes, chunk_bytes,
                                                  max_floats * int64_t(sizeof(float)));
  while (bytes_for(splits) > workspace_limit_bytes() && splits < all_chunks && bytes_for(splits + 1) < bytes_for(splits))
    ++splits;
  const int64_t per_split = ceil_div(all_chunks, splits);
  splits = ceil_div(all_chunks, per_split);
  const int64_t room =
      std::max<int64_t>(workspace_limit_bytes() - splits * slice_bytes - max_floats * int64_t(sizeof(float)), 0);
  const int64_t slices_per_pass = std::clamp<int64_t>(room / (per_split * chunk_bytes), 1, splits);
  const int64_t pass_chunks = std::min(all_chunks, slices_per_pass * per_split);
  // The partial sums, then the pass's operands (dM, then V), then the maxima, in one allocation
  // (each part a whole number of 16-byte units: the bulk copies' alignment).
  auto ws = new_workspace({splits * slice_floats + pass_chunks * chunk_floats + max_floats},
                          gw.options().dtype(at::kFloat));
  *workspace = ws.numel() * int64_t(sizeof(float));
  a.partial = ws.mutable_data_ptr<float>();
  s.dm = a.partial + splits * slice_floats;
  s.v = s.dm + pass_chunks * cv.groups * a.k_tiles * Cfg::kUChunkFloats;
  s.dm_max = s.dm + pass_chunks * chunk_floats;
  s.v_max = s.dm_max + int64_t(cv.groups) * a.k_pad;
  s.chunks_per_split = int(per_split);
  const cudaStream_t stream = current_stream();
  auto items = [&](int64_t chunks) { return int64_t(cv.groups) * (a.k_tiles + a.c_tiles) * chunks * Cfg::kM * Cfg::kK; };
  if constexpr (kHalves) {
    C10_CUDA_CHECK(cudaMemsetAsync(s.dm_max, 0, size_t(max_floats) * sizeof(float), stream));
    launch_channel_max<TIo>(gy, nhwc, cv.Kg(), a.k_pad, s.dm_max);
    launch_channel_max<TIo>(x, nhwc, cv.Cg(), a.c_pad, s.v_max);
  }
  // channels_last float16 words: a thread per row and 8 tiles (winograd_wgmma_weight_grad_operand_rows_kernel),
  // from pixels copied into shared memory where x and grad_output read as 16-byte words
  // (winograd_wgmma_weight_grad_operand_tiles_kernel).
  const bool by_rows = nhwc && kHalves;
  bool by_tiles = false;
  auto transform = nhwc ? winograd_wgmma_weight_grad_operands_kernel<Cfg, true, TIo>
                        : winograd_wgmma_weight_grad_operands_kernel<Cfg, false, TIo>;
  decltype(transform) dm_tiles = nullptr, v_tiles = nullptr;  // (by_tiles)
  if constexpr (kHalves) {
    if (by_rows) transform = winograd_wgmma_weight_grad_operand_rows_kernel<Cfg, TIo>;
    if constexpr (sizeof(TIo) == 2) {
      by_tiles = by_rows && weight_grad_operands_read_as_words(a, cv);
      if (by_tiles) {
        dm_tiles = winograd_wgmma_weight_grad_operand_tiles_kernel<Cfg, TIo, true>;
        v_tiles = winograd_wgmma_weight_grad_operand_tiles_kernel<Cfg, TIo, false>;
        ensure_dynamic_smem(dm_tiles, OperandTileRuns<true>::kSmemBytes, "conv2d_winograd_backward");
        ensure_dynamic_smem(v_tiles, OperandTileRuns<false>::kSmemBytes, "conv2d_winograd_backward");
      }
    }
  }
  auto reduce = winograd_wgmma_weight_grad_staged_kernel<Cfg, TIo>;
  ensure_dynamic_smem(reduce, Cfg::kSmemBytes, "conv2d_winograd_backward");
  for (int64_t split0 = 0; split0 < splits; split0 += slices_per_pass) {
    const int64_t n = std::min(slices_per_pass, splits - split0);
    s.split0 = int(split0), s.chunk0 = split0 * per_split;
    s.chunks = int(std::min(n * per_split, all_chunks - s.chunk0));
    if (by_tiles) {
      // A block per run at a time, walking the runs: as many blocks as the SMs hold; dM's runs, then V's.
      const int64_t dm_runs = int64_t(cv.groups) * a.k_tiles * s.chunks;
      const int64_t v_runs = int64_t(cv.groups) * a.c_tiles * s.chunks;
      const int64_t sms = sm_count();
      dm_tiles<<<unsigned(std::min<int64_t>(dm_runs, sms * OperandTileRuns<true>::kBlocksPerSm)), kOperandTileThreads,
                 OperandTileRuns<true>::kSmemBytes, stream>>>(s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      v_tiles<<<unsigned(std::min<int64_t>(v_runs, sms * OperandTileRuns<false>::kBlocksPerSm)), kOperandTileThreads,
                OperandTileRuns<false>::kSmemBytes, stream>>>(s);
    } else {
      transform<<<elementwise_blocks(items(s.chunks) / (by_rows ? kOperandRowTiles : 1), 256), 256, 0, stream>>>(s);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t blocks = base_blocks * n;
    check_grid(blocks, "conv2d_winograd_backward");
    reduce<<<unsigned(blocks), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(s);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  record_last_choice("grad_weight", kMmaProducts<TIo> > 1 ? "staged:3xbf16-wgmma" : "staged:tf32-wgmma", int(splits));
  if (nhwc) record_last_operand("grad_weight", "nhwc");
  finish_grad_weight<float>(ws, splits, slice_floats, cv, a.k_pad, a.c_pad, gw);
  return gw;
}

// Whether the wgmma tile's grad_weight stages dM and V (winograd_wgmma_grad_weight_staged) rather
// than transforming them in the fused block, which transforms each dM once per 32 channels and each V
// once per 64 filters: from 128 filters and 128 channels per group where the point products' size,
// channels x filters x tiles per group, reaches kStagedWeightGradMinProducts: 3 x 2^24 for one product
// (float16 words; below, the staged passes' launches, the operands' round trip and the partial sums
// are a larger share than the fused block's repeated transforms), 2^19 for float16's split (TF32
// words, twice the bytes, but its fused block splits every operand it transforms) -- the layers where
// the staged grad_weight measured faster, docs/winograd.md. Forced: with the staged-V configs, whose
// forwards stage V.
template <int kProducts>
constexpr int64_t kStagedWeightGradMinProducts = kProducts == 1 ? int64_t(3) << 24 : int64_t(1) << 19;
template <typename TIo>
bool staged_weight_grad(const WinogradConv& cv) {
  const int forced = forced_config(kWinograd);
  if (forced >= 0) return forced == kConfigTf32WgmmaClusterVBulk || forced == kConfigTf32WgmmaClusterUVMulticast;
  return cv.Cg() >= 128 && cv.Kg() >= 128 &&
         int64_t(cv.Cg()) * cv.Kg() * cv.tiles() >= kStagedWeightGradMinProducts<kMmaProducts<TIo>>;
}

// grad_weight on tensor-core tile `tile` (kTcTile, kTcTileTall or kTcTileWgmma), as
// winograd_tc_grad_weight, or staged (staged_weight_grad); the result in gw_dtype and gw_format.
template <typename TIo>
at::Tensor run_tc_grad_weight(int tile, const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                              bool nhwc, int64_t* workspace, at::ScalarType gw_dtype, at::MemoryFormat gw_format) {
  const char* config = tc_tile_choice<kMmaProducts<TIo>>(tile);
  WeightGradCall call = weight_grad_call(p, grad_output, input, nhwc, gw_dtype, gw_format);
  if (tile == kTcTileWgmma && staged_weight_grad<TIo>(call.cv))
    return winograd_wgmma_grad_weight_staged<TIo>(call, nhwc, workspace);
  if (tile == kTcTileWgmma)
    return winograd_tc_grad_weight<WinogradWgmmaWeightGradConfig<kMmaProducts<TIo>>, TIo>(call, config, nhwc, workspace);
  if (tile == kTcTileTall) return winograd_tc_grad_weight<WinogradTcWeightGradTileTall, TIo>(call, config, nhwc, workspace);
  return winograd_tc_grad_weight<WinogradTcTile, TIo>(call, config, nhwc, workspace);
}

// grad_weight on tensor cores (point_gemms): the tensor-core kernel's tile (kTcTile:
// 32 filters, kTcTileTall: 64, kTcTileWgmma: 64 on wgmma; a forced wgmma tile runs kTcTileWgmma)
// where the forward's would run -- except the layers of the narrow IEEE tile (at most 8 channels per
// group, an RGB stem) and of at most 4 filters per group; kTcIeee: IEEE FP32. A 64-filter tile where
// a group has more than 32 filters (a patch's transform then serves twice the filters): on wgmma
// where the device has it (winograd_wgmma_weight_grad_kernel).
int tc_grad_weight_tile(const ConvShape& p) {
  const int forced = forced_tc_tile();
  if (wgmma_tile(forced)) return kTcTileWgmma;
  if (forced != kTcTileByRule) return forced;
  const int64_t Kg = p.K / p.groups, Cg = p.channels_per_group();
  if (Cg <= WinogradWeightGradNarrow::kN || Kg <= kNarrowMaxOutputs) return kTcIeee;
  if (Kg <= WinogradTcTile::kM) return kTcTile;
  return wgmma_device() ? kTcTileWgmma : kTcTileTall;
}

// The memory format of a float32 call's operands: channels_last where the call's format is
// (conv_memory_format) and the tensor-core kernels run it (they read NHWC natively); otherwise NCHW.
at::MemoryFormat operand_format(bool tensor_cores, const at::Tensor& input, const at::Tensor& weight) {
  return tensor_cores && conv_memory_format(input, weight) == at::MemoryFormat::ChannelsLast
             ? at::MemoryFormat::ChannelsLast
             : at::MemoryFormat::Contiguous;
}

// The tensor-core tile of a forward or grad_input call (`map`) and the memory format its operands
// take, decided once per call: kTcIeee unless `tensor_cores` (point_gemms); channels_last
// where the call's format is and its kernel reads it (a tensor-core tile, or the shallow and narrow
// kernels computing in float32), else NCHW.
struct TcForwardPlan {
  int tile = kTcIeee;
  at::MemoryFormat format = at::MemoryFormat::Contiguous;
  bool nhwc() const { return format == at::MemoryFormat::ChannelsLast; }
};

// Whether calls of dtype t split their operands into several products (kMmaProducts), for host code
// that holds the dtype only at run time.
bool splits_operands(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return kMmaProducts<__half> > 1;
    case at::kBFloat16:
      return kMmaProducts<__nv_bfloat16> > 1;
    default:
      return kMmaProducts<float> > 1;
  }
}

// `split_operands`: the call's point products are float16's split ones (a float16 call's, or a widened
// float16 pass's), which only some tiles run.
TcForwardPlan tc_forward_plan(bool tensor_cores, bool split_operands, const LaunchMap& map, const at::Tensor& input,
                              const at::Tensor& weight) {
  TcForwardPlan plan;
  const bool channels_last = conv_memory_format(input, weight) == at::MemoryFormat::ChannelsLast;
  const WinogradConv cv = winograd_launch(map);
  if (tensor_cores)
    plan.tile = tc_forward_tile(cv, channels_last, split_operands, input.scalar_type() == at::kBFloat16);
  const bool reads_nhwc = plan.tile != kTcIeee || (input.scalar_type() != at::kDouble &&
                                                    runs_thread_tile<float>(cv));
  if (channels_last && reads_nhwc) plan.format = at::MemoryFormat::ChannelsLast;
  return plan;
}

// Whose calls the float32 kernels below serve, which sets how their point GEMMs run (PointGemms):
// float32 calls (kFloat32: TF32 while PyTorch's TF32 switch is on, else IEEE FP32), and the 16-bit
// calls' passes that neither a tile nor a one-tile-per-thread kernel takes, which reach them widened
// (conv2d_winograd_16bit_cuda runs those on the 16-bit tensors itself). Those take tensor cores for
// the staged variant's GEMMs:
// bfloat16's TF32 (kWidenedBfloat16; F(4x4)'s too: bfloat16 values are exact in TF32, and TF32's
// rounding of U and V stays under bfloat16's output rounding, docs/winograd.md), float16's 3xBF16
// (kWidenedFloat16; TF32 rounding of V would cost float16 2.5x its error). The other passes reach
// the same IEEE kernels either way: the tiles' rules do not depend on the dtype, so a pass that no
// tile took in 16 bits takes none widened.
enum class CallerType { kFloat32, kWidenedBfloat16, kWidenedFloat16 };
template <CallerType kCaller>
PointGemms point_gemms(const at::Tensor& input) {
  if (input.scalar_type() != at::kFloat) return PointGemms::kIeee;
  if constexpr (kCaller == CallerType::kWidenedBfloat16) return PointGemms::kTf32;
  if constexpr (kCaller == CallerType::kWidenedFloat16) return PointGemms::kSplitBf16;
  return tf32_enabled() ? PointGemms::kTf32 : PointGemms::kIeee;
}
template <typename TIo>
constexpr CallerType kWidenedCaller =
    std::is_same_v<TIo, __nv_bfloat16> ? CallerType::kWidenedBfloat16 : CallerType::kWidenedFloat16;

template <CallerType kCaller>
at::Tensor conv2d_winograd_cuda(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_winograd", input, weight, bias, stride, padding, dilation, groups);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement("conv2d_winograd", kWinograd, make_problem(p, input));
  const PointGemms gemms = point_gemms<kCaller>(input);
  const LaunchMap map = forward_map(p);
  const TcForwardPlan plan =
      tc_forward_plan(gemms != PointGemms::kIeee, gemms == PointGemms::kSplitBf16, map, input, weight);
  auto x = input.contiguous(plan.format);
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options().memory_format(plan.format));
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_winograd_cuda", [&] {
    winograd_conv<scalar_t>(x, weight, b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, map, y, plan.tile,
                            plan.nhwc(), gemms);
  });
  return y;
}

// grad_output in the memory format a gradient's kernel reads, made at most once per backward call:
// grad_input and grad_weight that read it in the same format share one copy where its own layout is
// another.
class GradOutputIn {
 public:
  explicit GradOutputIn(const at::Tensor& grad_output) : grad_output_(grad_output) {}
  at::Tensor operator()(at::MemoryFormat format) {
    if (!made_.defined() || !made_.is_contiguous(format)) made_ = grad_output_.contiguous(format);
    return made_;
  }

 private:
  const at::Tensor& grad_output_;
  at::Tensor made_;
};

template <CallerType kCaller>
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_winograd_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  const PointGemms gemms = point_gemms<kCaller>(input);
  const bool tensor_cores = gemms != PointGemms::kIeee;
  GradOutputIn grad_output_in(grad_output);
  auto grad_input = [&](const ConvShape& p) {
    const LaunchMap map = with_reversed_taps(grad_input_map(p, 0, 0));
    const TcForwardPlan plan = tc_forward_plan(tensor_cores, gemms == PointGemms::kSplitBf16, map, input, weight);
    auto gx = new_output({p.N, p.C, p.H, p.W}, input.options().memory_format(plan.format));
    const at::Tensor gy = grad_output_in(plan.format);
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_winograd_grad_input_cuda", [&] {
      winograd_conv<scalar_t>(gy, weight, nullptr, map, gx, plan.tile, plan.nhwc(), gemms);
    });
    return gx;
  };
  auto grad_weight = [&](const ConvShape& p) {
    at::Tensor gw;
    int64_t bytes = 0;
    const int tc_tile = tensor_cores ? tc_grad_weight_tile(p) : kTcIeee;
    if (tc_tile == kTcIeee && input.scalar_type() == at::kFloat && runs_shallow_weight_grad(p)) {
      const at::MemoryFormat format = conv_memory_format(input, weight);
      gw = winograd_shallow_grad_weight<float>(p, grad_output_in(format), input,
                                               format == at::MemoryFormat::ChannelsLast, &bytes, at::kFloat, format);
      record_workspace_bytes(bytes);
      return gw;
    }
    const at::MemoryFormat format = operand_format(tc_tile != kTcIeee, input, weight);
    const bool nhwc = format == at::MemoryFormat::ChannelsLast;
    const at::Tensor gy = grad_output_in(format);
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_winograd_grad_weight_cuda", [&] {
      if constexpr (std::is_same_v<scalar_t, float>) {
        if (tc_tile != kTcIeee) {
          TORCH_INTERNAL_ASSERT(gemms == PointGemms::kTf32, "winograd: a tensor-core tile for a call without TF32");
          // Written in the call's format (the weight's, where it is channels_last), as the 16-bit calls'
          // gw: no copy into the weight's layout after it (as_output).
          gw = run_tc_grad_weight<float>(tc_tile, p, gy, input, nhwc, &bytes, at::kFloat, format);
          return;
        }
      }
      if constexpr (std::is_same_v<scalar_t, double>) {
        gw = winograd_grad_weight<scalar_t, WinogradTileF64>(p, gy, input, &bytes);
      } else if (p.channels_per_group() <= WinogradWeightGradNarrow::kN) {
        gw = winograd_grad_weight<scalar_t, WinogradWeightGradNarrow>(p, gy, input, &bytes);
      } else {
        gw = winograd_grad_weight<scalar_t, WinogradTileF32>(p, gy, input, &bytes, gemms);
      }
    });
    record_workspace_bytes(bytes);
    return gw;
  };
  return conv2d_backward("conv2d_winograd_backward", kWinograd, grad_output, input, weight, stride, padding,
                         dilation, groups, output_mask, grad_input, grad_weight);
}

// bfloat16 and float16 calls (TIo). Every pass that a tensor-core tile takes runs it on the 16-bit
// tensors: the tiles read and write them themselves, so neither the input, grad_output, weight nor
// the outputs are copied to float32 (the filter transforms read a 16-bit weight). bfloat16 runs one
// TF32 product per point product (its values are exact in TF32, and TF32's 10 bits keep the error
// under a bfloat16 convolution's, whose inputs and output keep 7); float16 three bfloat16 products of
// split operands, on the mma.sync tiles and the single wgmma block (kMmaProducts, tile_for). Either
// way whatever PyTorch's TF32 switch says: the switch governs float32.
// The layers of the one-tile-per-thread kernels (runs_shallow, runs_narrow: an RGB stem, its
// grad_input; the shallow grad_weight) run them on the 16-bit tensors too, in IEEE FP32 (the float32
// call's bits, rounded once). What neither takes -- the staged and F(4x4) variants, a forced IEEE
// config, grad_weight of 5-8 channels or of at most 4 filters per group -- runs widened to float32,
// pass by pass: in IEEE FP32, but for the staged variant's GEMMs, on tensor cores (bfloat16: TF32,
// F(4x4)'s too; float16: 3xBF16; kWidenedCaller).
template <typename TIo>
at::Tensor conv2d_winograd_16bit_cuda(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                      at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward(kWinogradOp, input, weight, bias, stride, padding, dilation, groups);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement(kWinogradOp, kWinograd, make_problem(p, input));
  const LaunchMap map = forward_map(p);
  const TcForwardPlan plan = tc_forward_plan(true, splits_operands(input.scalar_type()), map, input, weight);
  const WinogradConv cv = winograd_launch(map);
  const bool thread_tile = plan.tile == kTcIeee && runs_thread_tile<float>(cv);
  if (plan.tile == kTcIeee && !thread_tile)
    return forward_in_fp32(kWinogradOp, &conv2d_winograd_cuda<kWidenedCaller<TIo>>, input, weight, bias,
                           stride, padding, dilation, groups);
  const at::Tensor x = input.contiguous(plan.format);
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
  const TIo* bias_data = b.defined() ? kernel_data<TIo>(b) : nullptr;
  at::Tensor y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options().memory_format(plan.format));
  if (thread_tile)
    winograd_thread_tile_conv<float, TIo>(x, weight, bias_data, cv, y, plan.nhwc());
  else
    winograd_tc_conv<TIo>(x, weight, bias_data, map, y, tile_for<TIo>(plan.tile), plan.nhwc());
  return y;
}

template <typename TIo>
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_winograd_backward_16bit_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  const ConvShape p = check_conv2d_backward(kWinogradBackwardOp, grad_output, input, weight, stride, padding,
                                            dilation, groups, output_mask);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement(kWinogradBackwardOp, kWinograd, make_problem(p, input));
  const at::MemoryFormat format = conv_memory_format(input, weight);
  const LaunchMap input_map = with_reversed_taps(grad_input_map(p, 0, 0));
  const TcForwardPlan input_plan =
      tc_forward_plan(true, splits_operands(input.scalar_type()), input_map, input, weight);
  const WinogradConv input_cv = winograd_launch(input_map);
  const int weight_tile = tc_grad_weight_tile(p);
  // Each pass on the 16-bit tensors where a tensor-core tile or a one-tile-per-thread kernel takes it.
  const bool tc_input = output_mask[0] && input_plan.tile != kTcIeee;
  const bool thread_input =
      output_mask[0] && !tc_input && runs_thread_tile<float>(input_cv);
  const bool tc_weight = output_mask[1] && weight_tile != kTcIeee;
  const bool shallow_weight = output_mask[1] && !tc_weight && runs_shallow_weight_grad(p);
  int64_t workspace = 0;
  at::Tensor gx, gw, gb;
  GradOutputIn grad_output_in(grad_output);
  if (tc_input || thread_input) {
    record_workspace_bytes(0);
    gx = new_output({p.N, p.C, p.H, p.W}, input.options().memory_format(input_plan.format));
    if (tc_input)
      winograd_tc_conv<TIo>(grad_output_in(input_plan.format), weight, nullptr, input_map, gx,
                            tile_for<TIo>(input_plan.tile), input_plan.nhwc());
    else
      winograd_thread_tile_conv<float, TIo>(grad_output_in(input_plan.format), weight, nullptr, input_cv, gx,
                                            input_plan.nhwc());
    workspace = last_workspace_bytes();
  }
  if (tc_weight || shallow_weight) {
    int64_t bytes = 0;
    const bool nhwc = format == at::MemoryFormat::ChannelsLast;
    // Written in the weight's dtype and the call's format by the kernels' last step (finish_grad_weight).
    gw = tc_weight ? run_tc_grad_weight<TIo>(weight_tile, p, grad_output_in(format), input, nhwc, &bytes,
                                             input.scalar_type(), format)
                   : winograd_shallow_grad_weight<TIo>(p, grad_output_in(format), input, nhwc, &bytes,
                                                       input.scalar_type(), format);
    workspace = std::max(workspace, bytes);
  }
  if (output_mask[2]) gb = conv_bias_grad(grad_output);
  const bool widened_input = output_mask[0] && !tc_input && !thread_input;
  const bool widened_weight = output_mask[1] && !tc_weight && !shallow_weight;
  if (widened_input || widened_weight) {
    auto [fx, fw, unused] =
        backward_in_fp32(kWinogradBackwardOp, &conv2d_winograd_backward_cuda<kWidenedCaller<TIo>>, grad_output,
                         input, weight, stride, padding, dilation, groups, {widened_input, widened_weight, false});
    if (widened_input) gx = fx;
    if (widened_weight) gw = fw;
    workspace = std::max(workspace, last_workspace_bytes());
  }
  record_workspace_bytes(workspace);
  return masked_grads(gx, gw, gb, output_mask, input);
}

// Winograd's limits: F(2x2,3x3)'s shape, and the 2x2 tiles of the forward output and of grad_input
// (the input's extent) within a launch's 32-bit tile index.
std::string can_implement(const ConvProblem& problem) {
  const ConvShape& p = problem.shape;
  const std::string shape = winograd_shape_reason(p);
  if (!shape.empty()) return shape;
  auto tiles_of = [](int64_t h, int64_t w) { return winograd_tiles_of<WinogradF2x2>(h) * winograd_tiles_of<WinogradF2x2>(w); };
  const int64_t tiles = p.N * std::max(tiles_of(p.Ho, p.Wo), tiles_of(p.H, p.W));
  if (tiles >= (int64_t(1) << 31))
    return "its launches index 2x2 output tiles with 32-bit offsets and this layer has " + std::to_string(tiles) +
           " (2^31 or more)";
  return "";
}

[[maybe_unused]] const bool kRegistered = register_plans(
    kWinograd, c10::DeviceType::CUDA, {&can_implement, {std::begin(kConfigNames), std::end(kConfigNames)}});

}  // namespace
}  // namespace cuda

namespace {

using cuda::CallerType;

// The caller's dtype decides the kernels: bfloat16 and float16 calls their own entries (the
// tensor-core tiles on the 16-bit tensors themselves, the rest widened); float32 calls follow
// PyTorch's TF32 switch (cuda::point_gemms).
at::Tensor conv2d_winograd_forward(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (input.scalar_type() == at::kBFloat16)
    return cuda::conv2d_winograd_16bit_cuda<__nv_bfloat16>(input, weight, bias, stride, padding, dilation, groups);
  if (input.scalar_type() == at::kHalf)
    return cuda::conv2d_winograd_16bit_cuda<__half>(input, weight, bias, stride, padding, dilation, groups);
  return forward_in_fp32(kWinogradOp, &cuda::conv2d_winograd_cuda<CallerType::kFloat32>, input, weight, bias,
                         stride, padding, dilation, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_winograd_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  if (input.scalar_type() == at::kBFloat16)
    return cuda::conv2d_winograd_backward_16bit_cuda<__nv_bfloat16>(grad_output, input, weight, stride, padding,
                                                                    dilation, groups, output_mask);
  if (input.scalar_type() == at::kHalf)
    return cuda::conv2d_winograd_backward_16bit_cuda<__half>(grad_output, input, weight, stride, padding, dilation,
                                                             groups, output_mask);
  return backward_in_fp32(kWinogradBackwardOp, &cuda::conv2d_winograd_backward_cuda<CallerType::kFloat32>,
                          grad_output, input, weight, stride, padding, dilation, groups, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(torchconv, CUDA, m) {
  m.impl("conv2d_winograd", &conv2d_winograd_forward);
  m.impl("conv2d_winograd_backward", &conv2d_winograd_backward);
}

}  // namespace torchconv
