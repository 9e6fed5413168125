// Unrolled GEMM on the GPU (seed 002): a convolution as the GEMM
//   Y[group][filter][column] = sum over rho of A[group][rho][filter] * X^[group][rho][column],
// rho = (c, r, s) over the C/groups x R x S filter taps and a column = one output position (n, oy, ox).
// X^ is the unrolled (im2col) matrix: X^[(c, r, s)][(n, oy, ox)] = x[n][c][oy*sh - ph + r*dh][ox*sw - pw + s*dw],
// zero in the padding. Two variants (torchconv.set_variant("gemm", ...)):
//   implicit (default) the GEMM's B-tile loader gathers X^ straight from the input, so the unrolled
//            matrix exists only as index math (seed 002's kernel fusion, its 37% cut); a 1x1 stride-1
//            unpadded layer is a plain GEMM and its loader copies 16-byte words of the input;
//   explicit an unroll kernel writes X^ for a chunk of columns into a workspace bounded by the
//            workspace limit, then the same GEMM reads it with row copies; chunks repeat until done.
// Both run the block GEMM of tile_gemm.cuh (kBatch = 1; 8 x 8 outputs per thread, double-buffered
// shared tiles), with the bias added where the outputs are written.
//
// Backward, on the same kernels:
//   grad_input is the transposed convolution: a GEMM with the filters as A[(k, r, s)][c] and the
//     "transposed gather" of grad_output as B: column (n, iy, ix) reads gy[n][k][oy][ox] with
//     oy = (iy + ph - r*dh) / sh where that division is exact. A strided layer runs it once per output
//     phase (iy mod sh, ix mod sw), each with only the taps whose division is exact, so no product is
//     a structural zero. Deterministic (no col2im scatter).
//   grad_weight[filter][rho] = sum over columns of gy[filter][column] * X^[rho][column]: a GEMM
//     reducing over N*Ho*Wo, split across blocks so the grid fills the GPU; the slices are summed in
//     a fixed order (a reduction too short to split writes the gradient directly).
// The A operand is the weight re-laid into a padded matrix, cached while the weight is unchanged;
// a weight trained this call is read in place where the kernel allows (reads_weight_in_place).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <type_traits>

#include "../../backward.h"
#include "../../conv_shape.h"
#include "../../plans.h"
#include "../../tuning.h"
#include "../../variant.h"
#include "../../weight_cache.h"
#include "../../workspace.h"
#include "../common/tile_gemm.cuh"
#include "../common/tensor_data.h"
#include "../common/weight_copy.cuh"
#include "../../precision.h"
#include "gemm_kernels.cuh"
#include "gemm_tc.h"

namespace torchconv {
namespace cuda {
namespace {

// A launch map as the GEMM runs it. `phase`: a strided grad_input's phase (-1 for the forward map and
// a stride-1 grad_input), whose cached weight matrix is named by the phase's taps (launch_taps_key).
GatherConv gemm_launch(const LaunchMap& map, int phase) {
  GatherConv cv{};
  static_cast<LaunchMap&>(cv) = map;
  cv.dense_out = map.out_sy == 1 && map.out_sx == 1 && map.out_oy == 0 && map.out_ox == 0 &&
                 map.col_H == map.out_H && map.col_W == map.out_W;
  cv.phase = phase;
  cv.channels = map.reduced_per_group(), cv.outputs = map.outputs_per_group();
  cv.reduction = cv.channels * cv.R * cv.S;
  cv.src_plane = int64_t(map.src_H) * map.src_W, cv.col_plane = int64_t(map.col_H) * map.col_W;
  cv.out_plane = int64_t(map.out_H) * map.out_W, cv.columns = map.N * cv.col_plane;
  return cv;
}

GatherConv forward_gather(const ConvShape& p) { return gemm_launch(forward_map(p), -1); }

// grad_input phase (py, px); a stride-1 layer's only phase is (0, 0).
GatherConv grad_input_gather(const ConvShape& p, int py, int px) {
  const bool strided = p.stride_h > 1 || p.stride_w > 1;
  return gemm_launch(grad_input_map(p, py, px), strided ? py * int(p.stride_w) + px : -1);
}

// Why the GEMM kernels cannot index `cv`, or "": columns (N x Ho x Wo), the padded reduction and
// positions within one channel's plane are 32-bit (offsets across channels and images are 64-bit),
// and a tap's offset along one axis is a 16-bit value.
std::string size_limit_reason(const GatherConv& cv) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  auto too_large = [](const std::string& what, int64_t n) {
    return "its kernels index with 32-bit offsets and " + what + " is " + std::to_string(n) + " (2^31 or more)";
  };
  if (cv.columns >= kLimit) return too_large("the number of output positions N x Ho x Wo", cv.columns);
  if (int64_t(cv.reduction) * kReductionPad >= kLimit)
    return too_large("the padded reduction C/groups x R x S x 16", int64_t(cv.reduction) * kReductionPad);
  if (cv.src_plane >= kLimit) return too_large("one channel's plane", cv.src_plane);
  if (cv.out_plane >= kLimit) return too_large("one output channel's plane", cv.out_plane);
  if (int64_t(std::abs(cv.tap_sy)) * (cv.R - 1) >= 0x7FFF || int64_t(std::abs(cv.tap_sx)) * (cv.S - 1) >= 0x7FFF)
    return "its tap offsets are 16-bit and the dilated filter spans more than 32766 pixels";
  return "";
}

// The A operand for `weight`, cached until the weight changes (frozen weights / inference mode).
template <typename T>
at::Tensor weight_matrix(const at::Tensor& weight, const GatherConv& cv, int& reduction_pad, int& rows_pad) {
  reduction_pad = round_up(cv.reduction, kReductionPad);
  rows_pad = round_up(cv.outputs, kWeightRowPad);
  const int rp = reduction_pad, mp = rows_pad;
  const auto tag = [&] {
    return std::string("gemm_a/") + (cv.transposed ? "transposed/" : "") +
           (cv.phase >= 0 ? launch_taps_key(cv) + "/" : "") + std::to_string(cv.groups);
  };
  return cached_weight_transform(weight, tag, [&] {
    auto w = contiguous_weight(weight);
    auto a = new_workspace({int64_t(cv.groups) * rp * mp}, weight.options());
    relayout_filter(w.const_data_ptr<T>(), a.mutable_data_ptr<T>(), a.numel(),
                    WeightMatrixMap{int(weight.size(2)), int(weight.size(3)), cv, rp, mp});
    return a;
  });
}

// The float forward configs' names, in the order with_gemm_config numbers them (1-based); each can
// be forced with torchconv.set_config("gemm", name) or TORCHCONV_GEMM_CONFIG.
constexpr const char* kConfigNames[] = {"large", "medium", "small", "narrow"};

// The config rule (float), from a sweep with every config forced over the N = 32 and N = 1 suites
// (docs/gemm.md): medium won or tied almost everywhere, 1x1 layers by up to 28%; large won only 3x3
// layers with >= 256 filters and a reduction of >= 1024 (by 5-7%) on grids of two waves or more;
// narrow where a group has <= 16 rows. And narrow for 1x1 launches of at most 256 rows whose medium
// grid is short of one block per SM (late layers of MobileNet / EfficientNet: 7x7 planes, squeeze-
// and-excitation's 1x1 planes) or whose rows medium would pad by half or more (24 rows): there the
// narrow grid's blocks beat splitting the reduction of a few medium ones
// (benchmarks/results/pass-times-*.md). A grid short of its waves then splits the reduction
// (gemm_splits).
template <typename T, typename F>
void with_gemm_config(const GatherConv& cv, const char* pass, F&& f) {
  if constexpr (std::is_same_v<T, double>) {
    record_last_choice(pass, "f64", 1);
    f(GemmF64{});
  } else {
    auto blocks = [&](auto cfg) {
      using Cfg = decltype(cfg);
      return ceil_div(cv.outputs, Cfg::kM) * ceil_div(cv.columns, Cfg::kN) * cv.groups;
    };
    const int64_t sms = sm_count();
    int pick = forced_config(kGemm) + 1;
    if (pick > int(std::size(kConfigNames))) pick = 0;  // a tensor-core config is forced: the rule here
    if (pick == 0) {
      const bool pointwise_narrow =
          cv.R == 1 && cv.S == 1 && cv.outputs <= 256 &&
          (blocks(GemmMediumF32{}) < sms ||
           2 * round_up(cv.outputs, GemmNarrowF32::kM) <= round_up(cv.outputs, GemmMediumF32::kM));
      if (cv.outputs <= GemmNarrowF32::kM || pointwise_narrow) pick = 4;
      else if (cv.outputs >= 256 && cv.reduction >= 1024 && blocks(GemmLargeF32{}) >= 2 * GemmLargeF32::kMinBlocks * sms)
        pick = 1;
      else pick = 2;
    }
    record_last_choice(pass, kConfigNames[pick - 1], 1);
    switch (pick) {
      case 1: return f(GemmLargeF32{});
      case 2: return f(GemmMediumF32{});
      case 4: return f(GemmNarrowF32{});
      default: return f(GemmSmallF32{});
    }
  }
}

// The pass a launch computes, for last_choice(): the transposed gather is grad_input.
const char* cv_pass(const GatherConv& cv) { return cv.transposed ? "grad_input" : "forward"; }

// The source planes are the column planes themselves (1x1, stride 1, no padding, either direction).
bool is_pointwise(const GatherConv& cv) {
  return cv.R == 1 && cv.S == 1 && cv.col_sy == 1 && cv.col_sx == 1 && cv.col_oy == 0 && cv.col_ox == 0 &&
         cv.src_H == cv.col_H && cv.src_W == cv.col_W && cv.dense_out;
}

// Reduction splits for a grid of `blocks` (the rule): none while the grid fills at least half of
// the GPU's block slots (blocks per SM x SMs); below that, enough splits to bring it to about one
// wave, with at least 8 chunks per split (fewer leave the blocks mostly pipeline fill) -- 16 once
// the grid already covers half the SMs: there a split only doubles the blocks per SM, which pays
// for the slice traffic and the sum kernel on a long reduction (288 chunks: 1.5x faster) but not on
// a short one (16 chunks: 20% slower) -- and the slices within the workspace limit. A
// wave-quantization model that also split grids of one to two waves lost: the slice traffic and the
// extra kernel cost more than the idle slots (10-15% slower), while grids short of the SMs gain up
// to 2x or more.
template <typename T, typename Cfg>
int gemm_splits(int64_t blocks, int chunks, int64_t out_bytes) {
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  if (2 * blocks >= slots) return 1;
  const int min_chunks_per_split = 2 * blocks >= sm_count() ? 16 : 8;
  const int64_t max_by_work = std::max(1, chunks / min_chunks_per_split);
  const int64_t max_by_memory = std::max<int64_t>(1, workspace_limit_bytes() / std::max<int64_t>(1, out_bytes));
  return int(std::max<int64_t>(1, std::min({slots / blocks, max_by_work, max_by_memory, int64_t(32)})));
}

// Per-tile counters of finished splits, one zeroed buffer per (device, stream): launches on one
// stream run in order and each leaves its counters at zero, so the buffer is zeroed only when it is
// created or grown. Never freed (it outlives static destruction order, like the weight cache).
int* split_tile_counters(int64_t tiles, c10::Device device) {
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();
  const auto key = std::make_pair(int(device.index()), current_stream());
  std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& buffer = (*buffers)[key];
  if (!buffer.defined() || buffer.numel() < tiles)
    buffer = at::zeros({std::max<int64_t>(tiles, 4096)}, at::TensorOptions().dtype(at::kInt).device(device));
  return buffer.mutable_data_ptr<int>();
}

template <typename T, typename Cfg, typename Kernel>
void launch_gemm(Kernel kernel, GemmConvArgs<T>& a, int64_t columns, at::Tensor* partial = nullptr,
                 const at::Tensor* out = nullptr) {
  a.m_tiles = int(ceil_div(a.cv.outputs, Cfg::kM));
  const int64_t n_tiles = ceil_div(columns, Cfg::kN);
  const int64_t blocks = int64_t(a.m_tiles) * n_tiles * a.cv.groups;
  a.n_tiles = int(n_tiles);
  const int chunks = a.reduction_pad / Cfg::kK;
  a.splits = 1, a.chunks_per_split = chunks, a.partial = nullptr, a.out_numel = 0, a.tile_counters = nullptr;
  if (partial != nullptr) {
    const int64_t out_bytes = out->numel() * int64_t(sizeof(T));
    const int splits = gemm_splits<T, Cfg>(blocks, chunks, out_bytes);
    if (splits > 1) {
      a.chunks_per_split = int(ceil_div(chunks, splits));
      a.splits = int(ceil_div(chunks, a.chunks_per_split));
      *partial = new_workspace({a.splits * out->numel()}, out->options());
      a.partial = partial->mutable_data_ptr<T>(), a.out_numel = out->numel();
      a.tile_counters = split_tile_counters(blocks, out->device());
      record_workspace_bytes(partial->numel() * int64_t(sizeof(T)));
      record_last_splits(cv_pass(a.cv), a.splits);
    }
  }
  check_grid(blocks * a.splits, "conv2d_gemm");
  constexpr size_t smem = Cfg::template mainloop_smem_bytes<T>();
  ensure_dynamic_smem(kernel, smem, "conv2d_gemm");
  kernel<<<unsigned(blocks * a.splits), Cfg::kThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The implicit GEMM's kernels, by the B operand's loader.
enum class ImplicitKernel { kPointwise, kTapMask1x1, kTapMask3x3, kTapMask, kGather };

ImplicitKernel implicit_kernel(const GatherConv& cv, bool aligned) {
  if (is_pointwise(cv) && aligned) return ImplicitKernel::kPointwise;
  if (cv.R == 1 && cv.S == 1) return ImplicitKernel::kTapMask1x1;
  if (cv.R == 3 && cv.S == 3) return ImplicitKernel::kTapMask3x3;
  return cv.R * cv.S <= 32 ? ImplicitKernel::kTapMask : ImplicitKernel::kGather;
}

// Whether the launch reads `weight` in place as its A operand (WeightTileLoader) instead of the
// re-laid matrix: float32, a weight whose matrix would not be cached (so it would be rebuilt this
// call), a forward or a 1x1 layer's grad_input (where A is the weight or its transpose, element for
// element), the 1x1 and 3x3 kernels (the layers trained most: pointwise convolutions and stems), and
// a weight indexable in 32 bits.
template <typename T>
bool reads_weight_in_place(const at::Tensor& weight, const GatherConv& cv, ImplicitKernel kernel) {
  const bool one_by_one = weight.size(2) == 1 && weight.size(3) == 1;
  return std::is_same_v<T, float> && kernel != ImplicitKernel::kTapMask && kernel != ImplicitKernel::kGather &&
         (!cv.transposed || one_by_one) && weight.numel() < (int64_t(1) << 31) &&
         !weight_transform_is_cached(weight);
}

template <typename T>
using GemmConvKernel = void (*)(const GemmConvArgs<T>);

template <typename T, typename Cfg, bool kWeightA>
GemmConvKernel<T> implicit_kernel_fn(ImplicitKernel kernel) {
  switch (kernel) {
    case ImplicitKernel::kPointwise: return gemm_conv_pointwise_kernel<T, Cfg, kWeightA>;
    case ImplicitKernel::kTapMask1x1: return gemm_conv_tap_mask_kernel<T, Cfg, 1, 1, kWeightA>;
    case ImplicitKernel::kTapMask3x3: return gemm_conv_tap_mask_kernel<T, Cfg, 3, 3, kWeightA>;
    default:
      if constexpr (kWeightA) {
        TORCH_CHECK(false, "torchconv.conv2d_gemm: internal error: no in-place weight operand for this kernel");
        return nullptr;
      } else {
        if (kernel == ImplicitKernel::kTapMask) return gemm_conv_tap_mask_kernel<T, Cfg, 0, 0, false>;
        return gemm_conv_gather_kernel<T, Cfg>;
      }
  }
}

// out = the convolution described by `cv` of `src` with the A operand of `weight` (+ bias).
// `stem_columns` (float; stem_grad_input_by_columns): read `weight` in place whatever
// reads_weight_in_place says (a view that the weight cache must not key on), and never split the
// reduction (its slices would come on top of the columns, which already hold the workspace).
template <typename T>
void gemm_conv(const at::Tensor& src, const at::Tensor& weight, const T* bias, const GatherConv& cv, at::Tensor& out,
               bool stem_columns = false) {
  const char* pass = cv_pass(cv);
  if (cv.columns == 0 || cv.outputs == 0) return record_workspace_bytes(0);
  GemmConvArgs<T> a;
  a.bias = bias, a.out = out.mutable_data_ptr<T>(), a.cv = cv;
  a.col_begin = 0, a.cols_pad = 0;
  const bool explicit_unroll = gemm_variant() == GemmVariant::kExplicit;
  constexpr int kPerWord = 16 / sizeof(T);
  const bool aligned = aligned_to(src.const_data_ptr<T>(), 16) && cv.src_plane % kPerWord == 0;
  const ImplicitKernel kernel = implicit_kernel(cv, aligned);
  TORCH_INTERNAL_ASSERT(!stem_columns || (std::is_same_v<T, float> && !explicit_unroll &&
                                          (kernel == ImplicitKernel::kPointwise || kernel == ImplicitKernel::kTapMask1x1)));
  const bool weight_a = !explicit_unroll && (stem_columns || reads_weight_in_place<T>(weight, cv, kernel));
  at::Tensor am;
  if (weight_a) {
    am = contiguous_weight(weight);
    a.reduction_pad = round_up(cv.reduction, kReductionPad), a.rows_pad = 0;
    a.a_m_stride = cv.transposed ? 1 : cv.reduction, a.a_rho_stride = cv.transposed ? cv.outputs : 1;
  } else {
    am = weight_matrix<T>(weight, cv, a.reduction_pad, a.rows_pad);
    a.a_m_stride = a.a_rho_stride = 0;
  }
  a.a = am.const_data_ptr<T>();
  with_gemm_config<T>(cv, pass, [&](auto cfg) {
    using Cfg = decltype(cfg);
    record_last_operand(pass, weight_a ? "weight" : "matrix");
    if (!explicit_unroll) {
      a.src = src.const_data_ptr<T>();
      record_workspace_bytes(0);
      // Split slices are output-sized: only for launches that write the whole output (not phases).
      at::Tensor partial;
      auto launch = [&](auto fn) {
        launch_gemm<T, Cfg>(fn, a, cv.columns, cv.dense_out && !stem_columns ? &partial : nullptr, &out);
      };
      if constexpr (std::is_same_v<T, float>)
        if (weight_a) return launch(implicit_kernel_fn<T, Cfg, true>(kernel));
      return launch(implicit_kernel_fn<T, Cfg, false>(kernel));
    }
    // Explicit: unroll chunks of columns (whole block tiles) that fit the workspace limit. One
    // tile of columns is the least the GEMM can consume: a limit below it is an error, not exceeded.
    const int64_t bytes_per_column = int64_t(cv.groups) * a.reduction_pad * int64_t(sizeof(T));
    TORCH_CHECK_VALUE(Cfg::kN * bytes_per_column <= workspace_limit_bytes(),
                      "torchconv.conv2d_gemm: the explicit variant unrolls at least one tile of ",
                      std::to_string(Cfg::kN), " columns (", std::to_string(Cfg::kN * bytes_per_column),
                      " bytes for this layer), more than the workspace limit of ",
                      std::to_string(workspace_limit_bytes()),
                      " bytes; raise it with torchconv.set_workspace_limit or use the implicit variant");
    int64_t chunk = columns_per_chunk(cv.columns, bytes_per_column);
    chunk = std::max<int64_t>(Cfg::kN, chunk / Cfg::kN * Cfg::kN);
    chunk = std::min<int64_t>(chunk, ceil_div(cv.columns, Cfg::kN) * Cfg::kN);
    at::Tensor col = new_workspace({int64_t(cv.groups) * a.reduction_pad * chunk}, src.options());
    record_workspace_bytes(col.numel() * int64_t(sizeof(T)));
    a.src = col.const_data_ptr<T>(), a.cols_pad = chunk;
    for (int64_t j0 = 0; j0 < cv.columns; j0 += chunk) {
      const int64_t count = std::min(chunk, cv.columns - j0);
      gemm_unroll_kernel<T><<<elementwise_blocks(col.numel(), 256), 256, 0, current_stream()>>>(
          src.const_data_ptr<T>(), col.mutable_data_ptr<T>(), cv, a.reduction_pad, chunk, j0, count);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      a.col_begin = j0;
      launch_gemm<T, Cfg>(gemm_conv_unrolled_kernel<T, Cfg>, a, count);
    }
  });
}

// Whether the float32 grad_input of `p` runs as stem_grad_input_by_columns: one group of at most 4
// channels (an RGB stem) and a filter of several taps, where each phase's GEMM would have 1-4 rows,
// padded to the narrow tile's 16; the implicit variant (the explicit one unrolls its B operand).
bool uses_stem_columns(const ConvShape& p) {
  return p.groups == 1 && p.C <= kStemColumnsMaxChannels && p.R * p.S > 1 && p.K > 0 && p.N > 0 && p.Ho * p.Wo > 0 &&
         gemm_variant() == GemmVariant::kImplicit;
}

// The float32 grad_input of an RGB stem (uses_stem_columns) as one GEMM with all of the filter's
// (channel, tap) rows -- C x R x S of them, 147 for a 7 x 7 stem, where the phases' GEMMs have C --
// and a gather: the columns cols = W^T gy are the grad_input of a 1 x 1 layer whose weight is W viewed
// as K x (C R S) x 1 x 1 (read in place), and each input pixel then sums its taps' columns
// (stem_columns_to_grad_input_kernel). The columns, C R S planes of Ho x Wo an image, are workspace
// made for as many images at a time as the limit holds, the GEMM's reduction unsplit (no slices on
// top of them). False, nothing launched, where one image's columns exceed it (the phases' GEMMs then
// run).
bool stem_grad_input_by_columns(const ConvShape& p, const at::Tensor& gy, const at::Tensor& weight, at::Tensor& gx) {
  const int64_t rows = p.C * p.R * p.S, plane = p.Ho * p.Wo;
  const int64_t image_bytes = rows * plane * int64_t(sizeof(float));
  const int64_t images = std::min(p.N, workspace_limit_bytes() / image_bytes);
  if (images == 0) return false;
  const at::Tensor w = contiguous_weight(weight).view({p.K, rows, 1, 1});
  at::Tensor cols = new_workspace({images, rows, p.Ho, p.Wo}, gy.options());
  ConvShape columns{};  // the 1 x 1 layer whose input gradient the columns are
  columns.C = rows, columns.H = p.Ho, columns.W = p.Wo, columns.K = p.K, columns.R = columns.S = 1;
  columns.Ho = p.Ho, columns.Wo = p.Wo, columns.stride_h = columns.stride_w = 1;
  columns.dil_h = columns.dil_w = 1, columns.groups = 1;
  const StemColumns sc{int(p.C), int(p.H), int(p.W), int(p.R), int(p.S), int(p.Ho), int(p.Wo),
                       int(p.stride_h), int(p.stride_w), int(p.pad_h), int(p.pad_w), int(p.dil_h), int(p.dil_w),
                       int(tap_step(p.stride_h, p.dil_h)), int(tap_step(p.stride_w, p.dil_w))};
  for (int64_t n0 = 0; n0 < p.N; n0 += images) {
    columns.N = std::min(images, p.N - n0);
    at::Tensor part = cols.narrow(0, 0, columns.N);
    gemm_conv<float>(gy.narrow(0, n0, columns.N), w, nullptr, grad_input_gather(columns, 0, 0), part, true);
    const int64_t pixels = columns.N * p.H * p.W;  // a thread a pixel, all its channels
    stem_columns_to_grad_input_kernel<float>
        <<<elementwise_blocks(pixels, kStemGatherThreads), kStemGatherThreads, 0, current_stream()>>>(
        part.const_data_ptr<float>(), gx.mutable_data_ptr<float>() + n0 * p.C * p.H * p.W, sc, pixels);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  record_workspace_bytes(cols.nbytes());
  return true;
}

// Column slices of the grad_weight reduction: enough that the grid fills the GPU about twice, at
// least 16 chunks per slice, and the slices within the workspace limit.
template <typename Cfg>
int64_t weight_grad_splits(int64_t columns, int64_t base_blocks, int64_t slice_bytes) {
  const int64_t max_by_work = std::max<int64_t>(1, columns / (16 * Cfg::kK));
  const int64_t max_by_memory = std::max<int64_t>(1, workspace_limit_bytes() / slice_bytes);
  const int64_t want = ceil_div(2 * int64_t(sm_count()) * Cfg::kMinBlocks, base_blocks);
  return std::max<int64_t>(1, std::min({want, max_by_work, max_by_memory}));
}

// The float grad_weight configs (gemm_kernels.cuh), in kWeightGradConfigNames' order.
enum class WeightGradConfig { kLarge, kMedium, kSmall, kTall, kWide };
constexpr const char* kWeightGradConfigNames[] = {"large", "medium", "small", "tall", "wide"};

// The grad_weight config for a group of `filters` x `taps` weights (taps = C/groups x R x S). The
// reduction is split across blocks whatever the tile, so the cost that differs is the padding: the
// padded area of the weight tiles, thin tiles (tall, wide) counted 15% dearer for their smaller
// thread tiles. Large only from 256 taps (below that it measured slower than medium or small at
// equal area, docs/gemm.md). The long-standing choice (large above 64
// filters, medium at most 64, small when the taps are at most 64 too) stays unless another tile
// cuts its cost by a fifth, so deep reductions with little padding (ResNet's) keep theirs.
WeightGradConfig weight_grad_config(int64_t filters, int64_t taps) {
  struct Tile { WeightGradConfig config; int64_t rows, cols; double weight; };
  const Tile tiles[] = {  // ties go to the first
      {WeightGradConfig::kMedium, GemmWeightGradMediumF32::kM, GemmWeightGradMediumF32::kN, 1.0},
      {WeightGradConfig::kSmall, GemmWeightGradSmallF32::kM, GemmWeightGradSmallF32::kN, 1.0},
      {WeightGradConfig::kTall, GemmWeightGradTallF32::kM, GemmWeightGradTallF32::kN, 1.15},
      {WeightGradConfig::kWide, GemmWeightGradWideF32::kM, GemmWeightGradWideF32::kN, 1.15},
      {WeightGradConfig::kLarge, GemmWeightGradLargeF32::kM, GemmWeightGradLargeF32::kN, 1.0},
  };
  auto usable = [&](const Tile& t) { return t.config != WeightGradConfig::kLarge || taps >= 256; };
  auto padded = [](int64_t n, int64_t tile) { return double((n + tile - 1) / tile * tile); };
  auto cost = [&](const Tile& t) { return padded(filters, t.rows) * padded(taps, t.cols) * t.weight; };
  const WeightGradConfig legacy = filters > 64 ? WeightGradConfig::kLarge
                                  : taps <= 64 ? WeightGradConfig::kSmall
                                               : WeightGradConfig::kMedium;
  const Tile* best = nullptr;
  const Tile* kept = nullptr;
  for (const Tile& t : tiles) {
    if (!usable(t)) continue;
    if (best == nullptr || cost(t) < cost(*best)) best = &t;
    if (t.config == legacy) kept = &t;
  }
  return kept != nullptr && cost(*kept) <= 1.25 * cost(*best) ? legacy : best->config;
}

// Calls f with the tile config `pick` names.
template <typename F>
void with_weight_grad_config(WeightGradConfig pick, F&& f) {
  switch (pick) {
    case WeightGradConfig::kLarge: return f(GemmWeightGradLargeF32{});
    case WeightGradConfig::kMedium: return f(GemmWeightGradMediumF32{});
    case WeightGradConfig::kSmall: return f(GemmWeightGradSmallF32{});
    case WeightGradConfig::kTall: return f(GemmWeightGradTallF32{});
    case WeightGradConfig::kWide: return f(GemmWeightGradWideF32{});
  }
}

template <typename T, typename Cfg>
at::Tensor gemm_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                            const char* config_name) {
  auto gy = grad_output.contiguous();
  auto x = input.contiguous();
  auto gw = new_output({p.K, p.channels_per_group(), p.R, p.S}, input.options());
  const GatherConv cv = forward_gather(p);
  if (gw.numel() == 0) return gw;
  if (cv.columns == 0) {
    gw.zero_();
    return gw;
  }
  WeightGradArgs<T> a;
  a.x = x.const_data_ptr<T>(), a.gy = gy.const_data_ptr<T>(), a.cv = cv, a.weight_grad = nullptr;
  a.k_pad = round_up(cv.outputs, Cfg::kM), a.rho_pad = round_up(cv.reduction, Cfg::kN);
  a.m_tiles = a.k_pad / Cfg::kM, a.n_tiles = a.rho_pad / Cfg::kN;
  const int64_t base_blocks = int64_t(a.m_tiles) * a.n_tiles * cv.groups;
  const int64_t slice_bytes = int64_t(cv.groups) * a.k_pad * a.rho_pad * int64_t(sizeof(T));
  int64_t splits = weight_grad_splits<Cfg>(cv.columns, base_blocks, slice_bytes);
  a.columns_per_split = round_up(int(ceil_div(cv.columns, splits)), Cfg::kK);
  splits = ceil_div(cv.columns, a.columns_per_split);
  // One split (short reductions: squeeze-and-excitation layers, small batches) writes the gradient
  // itself: no slices to allocate and no second kernel to sum them.
  at::Tensor partial;
  if (splits == 1) {
    a.weight_grad = gw.mutable_data_ptr<T>(), a.partial = nullptr;
  } else {
    partial = new_workspace({splits * slice_bytes / int64_t(sizeof(T))}, x.options());
    a.partial = partial.mutable_data_ptr<T>();
  }
  record_workspace_bytes(partial.defined() ? partial.numel() * int64_t(sizeof(T)) : 0);
  const int64_t blocks = base_blocks * splits;
  check_grid(blocks, "conv2d_gemm_backward");
  constexpr size_t smem = Cfg::template mainloop_smem_bytes<T>();
  auto launch = [&](auto kernel) {
    ensure_dynamic_smem(kernel, smem, "conv2d_gemm_backward");
    kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (cv.R == 1 && cv.S == 1) launch(gemm_weight_grad_kernel<T, Cfg, 1, 1>);
  else if (cv.R == 3 && cv.S == 3) launch(gemm_weight_grad_kernel<T, Cfg, 3, 3>);
  else launch(gemm_weight_grad_kernel<T, Cfg, 0, 0>);
  record_last_choice("grad_weight", config_name, int(splits));
  if (splits == 1) return gw;
  launch_sum_slices(partial.const_data_ptr<T>(), gw.mutable_data_ptr<T>(), gw.numel(), int(splits),
                    slice_bytes / int64_t(sizeof(T)),
                    PaddedWeightSliceMap{cv.outputs, cv.reduction, a.k_pad, a.rho_pad}, kFinishLanesMinSplits);
  return gw;
}

// The CUDA-core operators (float32 / float64, NCHW).
at::Tensor conv2d_gemm_fp_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                               at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                               int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_gemm", input, weight, bias, stride, padding, dilation, groups);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement("conv2d_gemm", kGemm, make_problem(p, input));
  auto x = input.contiguous();
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  const GatherConv cv = forward_gather(p);
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_gemm_cuda", [&] {
    if (cv.reduction == 0) {
      // No input channels: the output is the bias.
      if (b.defined()) y.copy_(b.view({1, p.K, 1, 1}).expand_as(y));
      else y.zero_();
      return record_workspace_bytes(0);
    }
    gemm_conv<scalar_t>(x, weight, b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, cv, y);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_gemm_backward_fp_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  auto grad_input = [&](const ConvShape& p) {
    auto gx = new_output({p.N, p.C, p.H, p.W}, input.options());
    auto gy = grad_output.contiguous();
    if (input.scalar_type() == at::kFloat && uses_stem_columns(p) && stem_grad_input_by_columns(p, gy, weight, gx))
      return gx;
    int64_t workspace = 0;
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_gemm_grad_input_cuda", [&] {
      // One stride-1 transposed gather per output phase (a stride-1 layer has one), each with only
      // the taps that reach it (a quarter of the work at stride 2); phases no tap reaches are zero.
      if (grad_input_has_unwritten_pixels(p)) zero_dense_output(gx);
      for (int py = 0; py < p.stride_h; ++py)
        for (int px = 0; px < p.stride_w; ++px) {
          const GatherConv cv = grad_input_gather(p, py, px);
          if (cv.empty() || cv.reduction == 0) continue;
          gemm_conv<scalar_t>(gy, weight, nullptr, cv, gx);
          workspace = std::max(workspace, last_workspace_bytes());
        }
    });
    record_workspace_bytes(workspace);
    return gx;
  };
  auto grad_weight = [&](const ConvShape& p) {
    at::Tensor gw;
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_gemm_grad_weight_cuda", [&] {
      if constexpr (std::is_same_v<scalar_t, double>) {
        gw = gemm_grad_weight<scalar_t, GemmF64>(p, grad_output, input, "f64");
      } else {
        const WeightGradConfig pick = weight_grad_config(p.filters_per_group(), p.channels_per_group() * p.R * p.S);
        with_weight_grad_config(pick, [&](auto cfg) {
          gw = gemm_grad_weight<scalar_t, decltype(cfg)>(p, grad_output, input, kWeightGradConfigNames[int(pick)]);
        });
      }
    });
    return gw;
  };
  return conv2d_backward("conv2d_gemm_backward", kGemm, grad_output, input, weight, stride, padding, dilation, groups,
                         output_mask, grad_input, grad_weight);
}

// The registered operators: tensor cores where the precision asks for them and the kernels take the
// shape (uses_tensor_cores, tc_unsupported_reason), else the CUDA-core kernels in float32 / float64.
at::Tensor conv2d_gemm_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (uses_tensor_cores(input.scalar_type())) {
    const ConvShape p = check_conv2d_forward("conv2d_gemm", input, weight, bias, stride, padding, dilation, groups);
    const c10::cuda::CUDAGuard guard(input.device());
    check_can_implement("conv2d_gemm", kGemm, make_problem(p, input));
    const bool channels_last = conv_memory_format(input, weight) == at::MemoryFormat::ChannelsLast;
    if (tc_unsupported_reason(p, input.scalar_type(), false, channels_last).empty())
      return tc_conv2d_forward(p, input, weight, bias);
  }
  return forward_in_fp32(kGemmOp, &conv2d_gemm_fp_cuda, input, weight, bias, stride, padding, dilation, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_gemm_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  const at::ScalarType dtype = input.scalar_type();
  if (!uses_tensor_cores(dtype))
    return backward_in_fp32(kGemmBackwardOp, &conv2d_gemm_backward_fp_cuda, grad_output, input, weight, stride,
                            padding, dilation, groups, output_mask);
  const ConvShape p = check_conv2d_backward("conv2d_gemm_backward", grad_output, input, weight, stride, padding,
                                            dilation, groups, output_mask);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement("conv2d_gemm_backward", kGemm, make_problem(p, input));
  // Each gradient on tensor cores where its kernel takes the shape; the rest (and grad_bias) on the
  // CUDA-core kernels in float32.
  const bool channels_last = conv_memory_format(input, weight) == at::MemoryFormat::ChannelsLast;
  const bool tc_input = output_mask[0] && tc_unsupported_reason(p, dtype, true, channels_last).empty();
  // 16-bit grad_weight of NCHW planes (tc_weight_grad_reads_planes) reads them as they are, as
  // grad_input does (tc_source): then grad_output needs no copy for either.
  const bool weight_reads_planes = tc_weight_grad_reads_planes(p, input, grad_output);
  const bool tc_weight =
      output_mask[1] &&
      tc_weight_grad_unsupported_reason(p, dtype, channels_last,
                                        tc_weight_grad_reads_nchw(p, input, grad_output) || weight_reads_planes)
          .empty();
  int64_t workspace = 0;
  at::Tensor gx, gw;
  // Both tensor-core gradients read a float16 / bfloat16 grad_output in channels_last: one copy of an
  // NCHW one by our transposing kernel serves both (none when it is channels_last already), but where
  // both read its NCHW planes as they are (a 1x1 layer of stride 1: weight_reads_planes, and
  // tc_source). float32's grad_input takes its own source (tc_source: a 1x1 layer's NCHW planes as
  // they are, else a copy rounded to TF32), and its grad_weight reads dense NCHW planes as they are
  // on Hopper (tc_weight_grad_reads_nchw).
  const at::Tensor gy_tc = tc_input && tc_weight && dtype != at::kFloat && !weight_reads_planes
                               ? tc_channels_last_source(grad_output)
                               : grad_output;
  if (tc_input) gx = tc_conv2d_grad_input(p, gy_tc, input, weight);
  if (tc_weight) {
    gw = tc_conv2d_grad_weight(p, gy_tc, input, weight);
    workspace = last_workspace_bytes();
  }
  at::Tensor gb;
  if (output_mask[2]) gb = conv_bias_grad(grad_output);  // summed in FP32 by at::sum
  if ((output_mask[0] && !tc_input) || (output_mask[1] && !tc_weight)) {
    // Only what the tensor cores could not take is widened (a copy of each operand).
    auto [fx, fw, unused] = backward_in_fp32(kGemmBackwardOp, &conv2d_gemm_backward_fp_cuda, grad_output, input,
                                             weight, stride, padding, dilation, groups,
                                             {output_mask[0] && !tc_input, output_mask[1] && !tc_weight, false});
    if (!tc_input) gx = fx;
    if (!tc_weight) gw = fw;
    workspace = std::max(workspace, last_workspace_bytes());
  }
  record_workspace_bytes(workspace);
  return masked_grads(gx, gw, gb, output_mask, input);
}

// The GEMM kernels' limits: the indexing of the forward gather and of grad_input's transposed
// gather (every phase of a strided layer is a part of it).
std::string can_implement(const ConvProblem& problem) {
  const std::string forward = size_limit_reason(forward_gather(problem.shape));
  return forward.empty() ? size_limit_reason(grad_input_gather(problem.shape, 0, 0)) : forward;
}

// The float configs, then the tensor-core ones (gemm_tc.h).
std::vector<std::string> config_names() {
  std::vector<std::string> names(std::begin(kConfigNames), std::end(kConfigNames));
  names.insert(names.end(), std::begin(kTcConfigNames), std::end(kTcConfigNames));
  names.insert(names.end(), std::begin(kWgmmaConfigNames), std::end(kWgmmaConfigNames));
  return names;
}

[[maybe_unused]] const bool kRegistered = register_plans(kGemm, c10::DeviceType::CUDA, {&can_implement, config_names()});

}  // namespace

int forced_tc_config() {
  const int forced = forced_config(kGemm) - int(std::size(kConfigNames));
  return forced >= 0 ? forced : -1;
}
}  // namespace cuda

TORCH_LIBRARY_IMPL(torchconv, CUDA, m) {
  m.impl("conv2d_gemm", &cuda::conv2d_gemm_cuda);
  m.impl("conv2d_gemm_backward", &cuda::conv2d_gemm_backward_cuda);
}

}  // namespace torchconv
