// Direct convolution on the GPU (seed 000): block tiling TX x TY x TZ over output columns, rows and
// channels, register tiling RX x RY x RK per thread, and input tiles (with their halo) and filter
// tiles staged in shared memory, kStageChannels input channels per barrier, double-buffered with
// cp.async. Zero padding happens in the tile loads, so the input is never copied. For square filters
// of size 1..13 with unit stride and dilation the filter loops are unrolled at compile time, each
// thread keeps a sliding window of an input row in registers, and input rows load in 16-byte pieces
// where the row length allows; every other shape runs the same kernel with run-time sizes.
//
// grad_input is itself a direct convolution of grad_output (filters rotated 180 degrees, C / K
// swapped), so it reuses the forward kernel; a strided layer runs one launch per output phase.
// grad_weight is a tiled kernel over filter x column tiles (a column is an input channel, or for
// layers with few channels a (channel, r, s) patch) that reduces slices of N x Ho x Wo in parallel;
// the slices are summed in a fixed order.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <cstdlib>
#include <optional>

#include "../../backward.h"
#include "../../conv_shape.h"
#include "../../plans.h"
#include "../../tuning.h"
#include "../../variant.h"
#include "../../workspace.h"
#include "../common/launch.cuh"
#include "../common/tensor_data.h"
#include "../common/weight_copy.cuh"
#include "direct_kernels.cuh"
#include "depthwise_kernels.cuh"
#include "depthwise_nhwc.h"
#include "../../precision.h"

namespace torchconv {
namespace cuda {
namespace {

// ---- the depthwise / small-group specialist (depthwise_kernels.cuh) ----------------------------

constexpr const char* kForcedSpecialistReason =
    "the forced config 'depthwise' runs only depthwise and small-group launches (at most 16 channels and 16 "
    "filters per group, 64 pairs; plans.h: small_groups) whose plane and filter fit its shared-memory tiles";

constexpr const char* kForcedUnstagedReason =
    "the forced config 'depthwise-unstaged' runs only float32 small-group launches (plans.h: small_groups) of "
    "3x3, 5x5 or 7x7 filters at stride 1 or 2 (the same along H and W) with dilation 1";

constexpr const char* kForcedPlaneReason =
    "the forced config 'depthwise-plane' runs only float32 depthwise launches (one channel per group, any "
    "channel multiplier) at stride 1 with dilation 1 on planes 7 or 14 wide (RepLKNet's and MobileNet's last "
    "stages at 224 x 224) whose filter covers the "
    "plane's width or is centred and 7 wide";

at::Tensor sum_slices_target(const at::Tensor& weight, int64_t slices, int taps);
at::Tensor sum_slices(const at::Tensor& partial, at::Tensor out, const at::Tensor& weight, int taps);

// ---- grad_input of strided depthwise layers (depthwise_strided_grad_input_kernel) ----

// Whether the strided grad_input kernel takes layer p's grad_input (in float32): depthwise with one
// filter per channel, stride 2 along both axes, no dilation, a 3x3 or 5x5 filter, and planes and
// plane counts its 32-bit index arithmetic holds.
bool depthwise_strided_grad_input_takes(const ConvShape& p) {
  if (p.groups <= 0 || p.C != p.groups || p.K != p.groups) return false;
  if (p.stride_h != 2 || p.stride_w != 2 || p.dil_h != 1 || p.dil_w != 1 || p.R != p.S || (p.R != 3 && p.R != 5))
    return false;
  if (p.N <= 0 || p.H <= 0 || p.W <= 0 || p.Ho <= 0 || p.Wo <= 0) return false;
  const int64_t limit = int64_t(1) << 30;
  const int64_t per_plane = ceil_div(ceil_div(p.H, int64_t(2)), int64_t(kDwGradPairs)) * ceil_div(p.W, int64_t(2));
  return p.N * p.C < limit && per_plane < limit && p.H * p.W < limit && p.Ho * p.Wo < limit;
}

// One launch per run of planes whose threads number below 2^31.
template <int kR, int kPy, int kPx>
void launch_strided_grad_input_instance(DwStridedGradArgs a, int64_t planes) {
  const int64_t per_plane = int64_t(a.strips.d) * a.pairs.d;
  const int64_t planes_per_launch = std::max<int64_t>(1, ((int64_t(1) << 31) - kDwThreads) / per_plane);
  for (int64_t p0 = 0; p0 < planes; p0 += planes_per_launch) {
    a.plane0 = p0, a.plane_end = std::min(planes, p0 + planes_per_launch);
    const int64_t blocks = ceil_div((a.plane_end - p0) * per_plane, int64_t(kDwThreads));
    check_grid(blocks, "conv2d_direct_backward");
    depthwise_strided_grad_input_kernel<kR, kPy, kPx><<<unsigned(blocks), kDwThreads, 0, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

template <int kR>
void launch_strided_grad_input_r(const DwStridedGradArgs& a, int64_t planes, int py, int px) {
  if (py == 0 && px == 0) return launch_strided_grad_input_instance<kR, 0, 0>(a, planes);
  if (py == 0) return launch_strided_grad_input_instance<kR, 0, 1>(a, planes);
  if (px == 0) return launch_strided_grad_input_instance<kR, 1, 0>(a, planes);
  launch_strided_grad_input_instance<kR, 1, 1>(a, planes);
}

void launch_depthwise_strided_grad_input(const ConvShape& p, const at::Tensor& gy, const at::Tensor& w, at::Tensor& gx) {
  DwStridedGradArgs a{};
  a.gy = gy.const_data_ptr<float>(), a.w = w.const_data_ptr<float>(), a.gx = gx.mutable_data_ptr<float>();
  a.H = int(p.H), a.W = int(p.W), a.Ho = int(p.Ho), a.Wo = int(p.Wo);
  a.oy_first = ceil_div_int(int(p.pad_h - p.R + 1), 2), a.ox_first = ceil_div_int(int(p.pad_w - p.S + 1), 2);
  a.pairs = make_fast_divisor(uint32_t(ceil_div(p.W, int64_t(2))));
  a.strips = make_fast_divisor(uint32_t(ceil_div(ceil_div(p.H, int64_t(2)), int64_t(kDwGradPairs))));
  a.channels = make_fast_divisor(uint32_t(p.C));
  const int py = int(p.pad_h & 1), px = int(p.pad_w & 1);
  if (p.R == 3) return launch_strided_grad_input_r<3>(a, p.N * p.C, py, px);
  launch_strided_grad_input_r<5>(a, p.N * p.C, py, px);
}

// ---- the whole-plane forward (depthwise_plane_forward_kernel) ----

// The whole-plane forward's diagonal half-width for launch `a` (depthwise_plane_forward_kernel), or 0
// when it cannot run it. It takes float, one reduced channel per group, stride 1 and dilation 1, a
// destination that is the launch's grid, a plane of a compiled width whose output is as wide, and
// along W either a filter that covers the plane (every output column reads every input column:
// W - 1) or a centred filter of 7 columns (3); any filter height and padding along H. Centred 3- and
// 5-column filters ran slower than on the unstaged kernel (docs/depthwise.md) and are not compiled.
int plane_half(const DirectArgs& a, size_t elem) {
  if (elem != sizeof(float) || a.groups <= 0 || a.src_C != a.groups || a.N <= 0 || a.col_H <= 0) return 0;
  if (a.col_sy != 1 || a.col_sx != 1 || a.tap_sy != 1 || a.tap_sx != 1) return 0;
  if (a.out_sy != 1 || a.out_sx != 1 || a.out_oy != 0 || a.out_ox != 0 || a.out_H != a.col_H || a.out_W != a.col_W)
    return 0;
  const int W = a.src_W;
  if (a.col_W != W || (W != 7 && W != 14)) return 0;
  int half = 0;
  if (a.col_ox <= -(W - 1) && W - 1 - a.col_ox <= a.S - 1) half = W - 1;
  else if (a.S == 7 && a.col_ox == -3) half = 3;
  if (half == 0 || int64_t(a.src_H) * W > 4096) return 0;
  const size_t smem = size_t(plane_smem_floats(a.src_H, a.col_H, W, half, kDwPlaneWarps)) * sizeof(float);
  return smem <= size_t(max_dynamic_smem()) ? half : 0;
}

bool depthwise_plane_takes(const DirectArgs& a, size_t elem) { return plane_half(a, elem) > 0; }

template <int kW, int kHalf>
void launch_depthwise_plane_wh(const DirectArgs& a) {
  DwPlaneGrid grid{};
  grid.strips = int(ceil_div(a.col_H, plane_rows(kW)));
  grid.image_groups = int(ceil_div(a.N, 32));
  grid.tap_s0 = -kHalf - a.col_ox;
  const int64_t blocks = int64_t(a.out_C) * grid.image_groups;
  check_grid(blocks, "conv2d_direct");
  const int warps = std::min(kDwPlaneWarps, grid.strips);
  const size_t smem = size_t(plane_smem_floats(a.src_H, a.col_H, kW, kHalf, warps)) * sizeof(float);
  ensure_dynamic_smem(depthwise_plane_forward_kernel<kW, kHalf>, smem, "conv2d_direct");
  depthwise_plane_forward_kernel<kW, kHalf><<<unsigned(blocks), 32 * warps, smem, current_stream()>>>(a, grid);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int kW>
void launch_depthwise_plane_w(const DirectArgs& a, int half) {
  if (half == 3) return launch_depthwise_plane_wh<kW, 3>(a);
  launch_depthwise_plane_wh<kW, kW - 1>(a);
}

void launch_depthwise_plane(const DirectArgs& a) {
  const int half = plane_half(a, sizeof(float));
  if (a.src_W == 7) return launch_depthwise_plane_w<7>(a, half);
  launch_depthwise_plane_w<14>(a, half);
}

// Where the rule takes the whole-plane forward: at batches of 16 and more (a warp is 32 images of one
// channel; smaller batches leave most lanes idle, and the staged kernel's tiles then fill the warps),
// covering filters, and 7-column centred filters on 14-wide planes (faster there than the unstaged
// kernel: docs/depthwise.md). On 7-wide planes the unstaged kernel keeps centred filters.
bool depthwise_plane_pays(const DirectArgs& a) {
  const int half = plane_half(a, sizeof(float));
  return a.N >= 16 && (half == a.src_W - 1 || (half == 3 && a.src_W == 14));
}

// Output rows per thread of the unstaged forward: 8 for 5x5 and 7x7 filters at stride 1 (a strip of
// rows loads rows + R - 1 input rows, so taller strips load fewer per output where R is large), 4
// otherwise (measured with 2, 4 and 8 over the depthwise suite: docs/depthwise.md).
constexpr int unstaged_rows(int R, int stride) { return stride == 1 && R >= 5 ? 8 : 4; }

// Whether the unstaged forward (depthwise_unstaged_forward_kernel) can run launch `a`: float, small
// groups, a square filter of a compiled size, equal strides of 1 or 2, no dilation, and sizes its
// 32-bit index arithmetic holds.
bool depthwise_unstaged_takes(const DirectArgs& a, size_t elem) {
  if (elem != sizeof(float) || a.groups <= 0 || !small_groups(a.src_C / a.groups, a.out_C / a.groups)) return false;
  if (a.col_H <= 0 || a.col_W <= 0 || a.N <= 0) return false;
  const int64_t limit = int64_t(1) << 30;
  const int64_t per_plane = ceil_div(a.col_H, 4) * int64_t(a.col_W);  // at most: 4 or 8 rows per thread
  if (int64_t(a.N) * a.out_C >= limit || per_plane >= limit || int64_t(a.src_H) * a.src_W >= limit ||
      int64_t(a.out_H) * a.out_W >= limit)
    return false;
  const bool size = a.R == a.S && (a.R == 3 || a.R == 5 || a.R == 7);
  const bool stride = a.col_sy == a.col_sx && (a.col_sx == 1 || a.col_sx == 2);
  return size && stride && a.tap_sy == 1 && a.tap_sx == 1;
}

// Where the rule takes the unstaged forward over the staged specialist: up to 4 reduced channels per
// group (depthwise, channel multipliers, ResNeXt's groups of 4). It was faster on every such suite
// layer (docs/depthwise.md), by least on large planes with 7x7 filters, where the staged kernel's
// register window over a shared patch saves as many loads.
bool depthwise_unstaged_pays(const DirectArgs& a) { return a.src_C / a.groups <= 4; }

// Destination channels per thread of the unstaged forward: 4 for 3x3 filters where a group has a
// multiple of 4 (each input row is then loaded once for four filters), else 1. Larger filters would
// hold 4 x R x R filter values in registers.
int unstaged_filters_per_thread(const DirectArgs& a) {
  return a.R == 3 && (a.out_C / a.groups) % 4 == 0 ? 4 : 1;
}

// One launch per run of planes whose threads number below 2^31 (one launch but for huge batches).
template <int kR, int kStride, int kFilters>
void launch_depthwise_unstaged_rsf(const DirectArgs& a) {
  constexpr int kRY = unstaged_rows(kR, kStride);
  const int strips = int(ceil_div(a.col_H, kRY));
  const int64_t per_plane = int64_t(strips) * a.col_W, planes = int64_t(a.N) * (a.out_C / kFilters);
  const int64_t planes_per_launch = std::max<int64_t>(1, ((int64_t(1) << 31) - kDwThreads) / per_plane);
  DwUnstagedGrid grid{make_fast_divisor(uint32_t(a.col_W)), make_fast_divisor(uint32_t(strips)),
                      make_fast_divisor(uint32_t(a.out_C / kFilters)), make_fast_divisor(uint32_t(a.out_C / a.groups)),
                      a.src_C / a.groups, 0, 0};
  auto kernel = a.src_C / a.groups > 1 ? depthwise_unstaged_forward_kernel<kR, kStride, kRY, true, kFilters>
                                       : depthwise_unstaged_forward_kernel<kR, kStride, kRY, false, kFilters>;
  for (int64_t p0 = 0; p0 < planes; p0 += planes_per_launch) {
    grid.plane0 = p0, grid.plane_end = std::min(planes, p0 + planes_per_launch);
    const int64_t blocks = ceil_div((grid.plane_end - p0) * per_plane, int64_t(kDwThreads));
    check_grid(blocks, "conv2d_direct");
    kernel<<<unsigned(blocks), kDwThreads, 0, current_stream()>>>(a, grid);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

template <int kR, int kStride>
void launch_depthwise_unstaged_rs(const DirectArgs& a) {
  if constexpr (kR == 3) {
    if (unstaged_filters_per_thread(a) == 4) return launch_depthwise_unstaged_rsf<kR, kStride, 4>(a);
  }
  launch_depthwise_unstaged_rsf<kR, kStride, 1>(a);
}

template <int kR>
void launch_depthwise_unstaged_r(const DirectArgs& a) {
  if (a.col_sx == 1) return launch_depthwise_unstaged_rs<kR, 1>(a);
  launch_depthwise_unstaged_rs<kR, 2>(a);
}

void launch_depthwise_unstaged(const DirectArgs& a) {
  if (a.R == 3) return launch_depthwise_unstaged_r<3>(a);
  if (a.R == 5) return launch_depthwise_unstaged_r<5>(a);
  launch_depthwise_unstaged_r<7>(a);
}

// The window path (register sliding over column phases) needs unit dilation along W and at most
// kDwMaxPhases phases (stride along W).
bool window_path(const LaunchMap& m) { return m.tap_sx == 1 && m.col_sx <= kDwMaxPhases; }

size_t dw_smem_limit() { return std::min<size_t>(kDwSmemBudget, size_t(max_dynamic_smem())); }

// The forward geometry with `ry` output rows per thread, or nothing when one image's band of ry rows
// with its filter does not fit shared memory. Bands are as tall as kDwThreads threads allow (fewer
// when the patch would not fit the budget), and a block takes as many images as fill kDwThreads
// threads within the budget.
std::optional<DwForwardGeometry> depthwise_forward_geometry(const DirectArgs& a, size_t elem, int ry) {
  DwForwardGeometry geo{};
  geo.ry = ry;
  const bool window = window_path(a);
  geo.phases = window ? a.col_sx : 1;
  geo.tiles_x = int(ceil_div(a.col_W, kDwRX));
  const int taps_per_phase = int(ceil_div(a.S, geo.phases));
  geo.s_pad = round_up(taps_per_phase, kDwKC);
  geo.filter_elems = round_up(a.R * geo.phases * geo.s_pad, 4);
  // Columns of one phase the loops read: the window's reach in index space, else every product's.
  const int64_t width = window ? int64_t(geo.tiles_x) * kDwRX + geo.s_pad
                               : (int64_t(geo.tiles_x) * kDwRX - 1) * a.col_sx + int64_t(a.S - 1) * a.tap_sx + 1;
  if (width * geo.phases > (int64_t(1) << 20)) return std::nullopt;
  geo.phase_pitch = round_up(int(width), 4);
  geo.pitch = geo.phases * geo.phase_pitch;
  // Staged rows: the band's reach, clipped to the plane (the kernel stages rows inside it only).
  auto patch_h = [&](int tiles_y) {
    return std::min<int64_t>(int64_t(tiles_y * ry - 1) * a.col_sy + int64_t(a.R - 1) * a.tap_sy + 1, a.src_H);
  };
  auto bytes = [&](int images, int tiles_y) {
    return (size_t(geo.filter_elems) + size_t(images) * size_t(patch_h(tiles_y)) * size_t(geo.pitch)) * elem;
  };
  const int tiles_y_all = int(ceil_div(a.col_H, ry));
  int tiles_y = std::max(1, std::min(tiles_y_all, kDwThreads / geo.tiles_x));
  while (tiles_y > 1 && bytes(1, tiles_y) > dw_smem_limit()) --tiles_y;
  if (bytes(1, tiles_y) > size_t(max_dynamic_smem())) return std::nullopt;
  geo.bands = int(ceil_div(tiles_y_all, tiles_y));
  geo.tiles_y = int(ceil_div(tiles_y_all, geo.bands));
  geo.band_h = geo.tiles_y * ry;
  geo.patch_h = int(patch_h(geo.tiles_y));
  int images = std::max(1, std::min(a.N, kDwThreads / (geo.tiles_x * geo.tiles_y)));
  while (images > 1 && bytes(images, geo.tiles_y) > dw_smem_limit()) --images;
  geo.images = images;
  geo.image_groups = int(ceil_div(std::max(a.N, 1), images));
  return geo;
}

// The specialist's forward geometry for launch `a`, or nothing when it cannot run it: groups it does
// not take (plans.h: small_groups), a row of more than kDwThreads thread tiles, or a band that does
// not fit shared memory. Of 8 and 2 output rows per thread it takes the one whose blocks have the
// most threads (small planes: a 7x7 plane has one 8-row tile per column tile, four 2-row ones),
// the taller on a tie (less halo per output). The rows per thread change no load per
// multiply-add: a thread reloads its window per output row.
std::optional<DwForwardGeometry> depthwise_forward_geometry(const DirectArgs& a, size_t elem) {
  if (a.groups <= 0 || !small_groups(a.src_C / a.groups, a.out_C / a.groups)) return std::nullopt;
  if (a.col_H <= 0 || a.col_W <= 0 || a.R <= 0 || a.S <= 0) return std::nullopt;
  if (ceil_div(a.col_W, kDwRX) > kDwThreads) return std::nullopt;
  std::optional<DwForwardGeometry> best;
  int best_threads = 0;
  for (int ry : {8, 2}) {
    const auto geo = depthwise_forward_geometry(a, elem, ry);
    if (!geo) continue;
    const int threads = geo->images * geo->tiles_x * geo->tiles_y;
    if (threads > best_threads) best = geo, best_threads = threads;
  }
  return best;
}

// The kernel instance for a launch: rows per thread, and column phases (0: the dilated-column path).
template <typename T, int RY>
auto depthwise_forward_instance(const DirectArgs& a) {
  if (!window_path(a)) return depthwise_forward_kernel<T, RY, 0>;
  return a.col_sx == 1 ? depthwise_forward_kernel<T, RY, 1> : depthwise_forward_kernel<T, RY, 2>;
}

template <typename T, int RY>
void launch_depthwise_forward_rows(const DirectArgs& a, const DwForwardGeometry& geo, int64_t blocks) {
  const int threads = round_up(geo.images * geo.tiles_x * geo.tiles_y, 32);
  const size_t smem = (size_t(geo.filter_elems) + size_t(geo.images) * geo.patch_h * geo.pitch) * sizeof(T);
  auto kernel = depthwise_forward_instance<T, RY>(a);
  ensure_dynamic_smem(kernel, smem, "conv2d_direct");
  kernel<<<unsigned(blocks), threads, smem, current_stream()>>>(a, geo);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void launch_depthwise_forward(const DirectArgs& a, const DwForwardGeometry& geo) {
  const int64_t blocks = int64_t(a.out_C) * geo.bands * geo.image_groups;
  if (blocks == 0 || a.N == 0) return;
  check_grid(blocks, "conv2d_direct");
  if (geo.ry == 8) return launch_depthwise_forward_rows<T, 8>(a, geo, blocks);
  launch_depthwise_forward_rows<T, 2>(a, geo, blocks);
}

// Shared memory the grad_weight kernel's final sum takes: every pixel group's tap tiles, then the
// runs of groups (at most one element per thread, or one run when the tiles outnumber the threads).
size_t depthwise_reduce_elems(const DwWeightGradArgs& a) {
  const size_t elems = size_t(a.tap_tiles()) * kDwTR * kDwTS;
  return size_t(a.groups_per_tile) * elems + std::max(elems, size_t(kDwThreads));
}

// The specialist's grad_weight launch for layer p, or nothing when it cannot run it (groups it does
// not take, more than kDwThreads tap tiles, or a band of one output row
// beyond shared memory). Each split is a band of `images` images, enough that every pixel group
// has about eight chunks to add, and few enough that the partial sums fit the workspace limit.
std::optional<DwWeightGradArgs> depthwise_grad_weight_args(const ConvShape& p, size_t elem) {
  const LaunchMap m = forward_map(p);
  if (m.groups <= 0 || !small_groups(int(p.channels_per_group()), int(p.filters_per_group())) ||
      m.col_H <= 0 || m.col_W <= 0)
    return std::nullopt;
  DwWeightGradArgs a{};
  a.m = m;
  const bool window = window_path(m);
  a.phases = window ? m.col_sx : 1;
  a.tap_rows = int(ceil_div(p.R, kDwTR)), a.tap_cols = int(ceil_div(ceil_div(p.S, a.phases), kDwTS));
  if (int64_t(a.tap_rows) * a.phases * a.tap_cols > kDwThreads) return std::nullopt;
  a.groups_per_tile = kDwThreads / a.tap_tiles();
  a.chunks_x = int(ceil_div(m.col_W, kDwKC));
  a.gy_pitch = a.chunks_x * kDwKC;
  const int64_t width = window ? int64_t(a.chunks_x) * kDwKC + int64_t(a.tap_cols) * kDwTS
                               : (int64_t(a.chunks_x) * kDwKC - 1) * m.col_sx +
                                     (int64_t(a.tap_cols) * kDwTS - 1) * m.tap_sx + 1;
  if (width * a.phases > (int64_t(1) << 20)) return std::nullopt;
  a.phase_pitch = round_up(int(width), 4);
  a.pitch = a.phases * a.phase_pitch;
  auto patch_h = [&](int band_h) {
    return std::min<int64_t>(int64_t(band_h - 1) * m.col_sy + int64_t(m.R - 1) * m.tap_sy + 1, m.src_H);
  };
  const size_t reduce_bytes = depthwise_reduce_elems(a) * elem;
  auto stage_bytes = [&](int band_h) {
    return (size_t(round_up(int(patch_h(band_h) * a.pitch), 4)) + size_t(band_h) * a.gy_pitch) * elem;
  };
  auto bytes = [&](int band_h) { return std::max(stage_bytes(band_h), reduce_bytes); };
  int band_h = m.col_H;
  while (band_h > 1 && bytes(band_h) > dw_smem_limit()) band_h = (band_h + 1) / 2;
  if (bytes(band_h) > size_t(max_dynamic_smem())) return std::nullopt;
  a.bands = int(ceil_div(m.col_H, band_h));
  a.band_h = int(ceil_div(m.col_H, a.bands));
  a.patch_h = int(patch_h(a.band_h));
  const int64_t items = int64_t(a.band_h) * a.chunks_x;
  int64_t images = std::min<int64_t>(std::max(m.N, 1), ceil_div(8 * int64_t(a.groups_per_tile), items));
  const int64_t numel = int64_t(p.K) * p.channels_per_group() * p.R * p.S;
  auto splits = [&](int64_t imgs) { return a.bands * ceil_div(std::max(m.N, 1), imgs); };
  while (images < m.N && splits(images) * numel * int64_t(elem) > workspace_limit_bytes()) images *= 2;
  a.images = int(std::min<int64_t>(images, std::max(m.N, 1)));
  a.image_groups = int(ceil_div(std::max(m.N, 1), a.images));
  // Small planes have fewer chunks per image than pixel groups: stage several images at once (within
  // the budget) so that every group has about two chunks per barrier.
  const int64_t want = std::min<int64_t>(a.images, ceil_div(2 * int64_t(a.groups_per_tile), items));
  const int64_t fit = std::max<int64_t>(1, int64_t(dw_smem_limit() / stage_bytes(a.band_h)));
  a.stage_images = int(std::max<int64_t>(1, std::min(want, fit)));
  return a;
}

template <typename T>
at::Tensor depthwise_grad_weight(const DwWeightGradArgs& args, const at::Tensor& gy, const at::Tensor& x,
                                 const at::Tensor& weight) {
  DwWeightGradArgs a = args;
  const int splits = a.bands * a.image_groups;
  const int Cr = a.m.src_C / a.m.groups;
  auto partial = new_workspace({splits, weight.numel()}, weight.options());
  at::Tensor out = sum_slices_target(weight, splits, 1);
  record_workspace_bytes(splits > 1 ? partial.numel() * int64_t(sizeof(T)) : 0);
  record_last_choice("grad_weight", "depthwise", splits);
  a.x = x.const_data_ptr(), a.gy = gy.const_data_ptr(), a.partial = partial.mutable_data_ptr();
  const int64_t blocks = int64_t(splits) * a.m.out_C * Cr;
  check_grid(blocks, "conv2d_direct_backward");
  const int threads = round_up(a.tap_tiles() * a.groups_per_tile, 32);
  const size_t stage = size_t(a.stage_images) * (size_t(a.patch_elems()) + size_t(a.gband_elems())) * sizeof(T);
  const size_t reduce = depthwise_reduce_elems(a) * sizeof(T);
  const size_t smem = std::max(stage, reduce);
  auto kernel = !window_path(a.m)    ? depthwise_grad_weight_kernel<T, 0>
                : a.m.col_sx == 1 ? depthwise_grad_weight_kernel<T, 1>
                                  : depthwise_grad_weight_kernel<T, 2>;
  ensure_dynamic_smem(kernel, smem, "conv2d_direct_backward");
  kernel<<<unsigned(blocks), threads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return sum_slices(partial, out, weight, 1);
}

// Blocks in config Cfg's grid for a launch.
template <typename Cfg>
int64_t grid_blocks(const DirectArgs& a) {
  return ceil_div(a.col_W + a.col_shift, Cfg::kTileW) * ceil_div(a.col_H, Cfg::kTileH) *
         ceil_div(a.out_C / a.groups, Cfg::kTileK) * int64_t(a.groups) * a.N;
}

template <typename T, typename Cfg, int KR, int KS>
void launch_direct(DirectArgs a) {
  constexpr int kVec = 16 / sizeof(T);
  // 16-byte input pieces need rows of whole pieces, an aligned input and planes addressable in 32 bits.
  a.vec_input = KR > 0 && a.src_W % kVec == 0 && aligned_to(a.x, 16) &&
                int64_t(a.src_H) * a.src_W < (int64_t(1) << 31);
  a.col_shift = a.vec_input ? (a.col_ox % kVec + kVec) % kVec : 0;
  const int64_t blocks = grid_blocks<Cfg>(a);
  if (blocks == 0) return;
  check_grid(blocks, "conv2d_direct");
  const TileGeometry<Cfg> geo(a.R, a.S, KR ? 1 : a.col_sy, KR ? 1 : a.col_sx, KR ? 1 : a.tap_sy, KR ? 1 : a.tap_sx);
  const size_t smem = geo.template smem_bytes<T>(a.R, a.S);
  auto kernel = direct_forward_kernel<T, Cfg, KR, KS>;
  ensure_dynamic_smem(kernel, smem, "conv2d_direct");
  kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether the filter loops of this layer are unrolled at compile time (square 1..13, odd, unit
// stride and dilation); every other layer runs the run-time-size path.
bool unrolled_filter(const DirectArgs& a) {
  const bool unit = a.col_sy == 1 && a.col_sx == 1 && a.tap_sy == 1 && a.tap_sx == 1;
  return unit && a.R == a.S && a.R % 2 == 1 && a.R <= 13;
}

// Launches config Cfg with the filter loops unrolled where the size is one of the compiled ones.
template <typename T, typename Cfg>
void launch_for_filter(const DirectArgs& a) {
  if (unrolled_filter(a)) {
    switch (a.R) {
      case 1: return launch_direct<T, Cfg, 1, 1>(a);
      case 3: return launch_direct<T, Cfg, 3, 3>(a);
      case 5: return launch_direct<T, Cfg, 5, 5>(a);
      case 7: return launch_direct<T, Cfg, 7, 7>(a);
      case 9: return launch_direct<T, Cfg, 9, 9>(a);
      case 11: return launch_direct<T, Cfg, 11, 11>(a);
      default: return launch_direct<T, Cfg, 13, 13>(a);
    }
  }
  launch_direct<T, Cfg, 0, 0>(a);
}

// The float config rule: the config with the larger estimated useful fraction of the GPU, where
//   useful = (outputs of the layer / outputs its tiles cover) x (blocks / block slots of the waves
//            the grid needs, at 2 blocks per SM) x (work per cycle when full),
// work per cycle: small 0.8; wide 1 with unrolled filters, 0.5 on the run-time path (its 4 strided
// columns per thread read shared memory with bank conflicts). The factors come from a sweep with
// every config forced over the resnet + yolo suites at N = 1 and 32 (docs/direct.md); on the
// H100 the rule picked the faster config in 40 of 44 layers, the worst miss costing 11%.
template <typename Cfg>
double useful_fraction(const DirectArgs& a, double work_per_cycle) {
  const int64_t Kg = a.out_C / a.groups;
  const int64_t tx = ceil_div(a.col_W, Cfg::kTileW), ty = ceil_div(a.col_H, Cfg::kTileH), tk = ceil_div(Kg, Cfg::kTileK);
  const int64_t blocks = tx * ty * tk * a.groups * a.N;
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  const double covered = double(a.col_W) * a.col_H * Kg / (double(tx * Cfg::kTileW) * (ty * Cfg::kTileH) * (tk * Cfg::kTileK));
  const double filled = double(blocks) / double(ceil_div(blocks, slots) * slots);
  return covered * filled * work_per_cycle;
}

// Whether config Cfg's two stages fit the device's shared memory for this layer.
template <typename T, typename Cfg>
bool direct_tiles_fit(const DirectArgs& a) {
  const TileGeometry<Cfg> geo(a.R, a.S, a.col_sy, a.col_sx, a.tap_sy, a.tap_sx);
  return geo.template smem_bytes<T>(a.R, a.S) <= size_t(max_dynamic_smem());
}

int rule_direct_tile(const DirectArgs& a) {
  const double wide = useful_fraction<DirectWide>(a, unrolled_filter(a) ? 1.0 : 0.5);
  return useful_fraction<DirectSmall>(a, 0.8) > wide ? kSmall : kWide;
}

// The config a launch runs: the forced one, else the depthwise specialist wherever it can run the
// launch, the one-channel tile for other depthwise-like launches (one filter per group), double's own
// register tile, float rule_direct_tile's. -1 names the one-channel tile, -2 the double one.
template <typename T>
int direct_config(const DirectArgs& a) {
  const int forced = forced_config(kDirect);
  const bool unstaged = depthwise_unstaged_takes(a, sizeof(T)), plane = depthwise_plane_takes(a, sizeof(T));
  // A forced unstaged or whole-plane config runs the launches it takes, the rest (a strided layer's
  // grad_input phases, a channel multiplier's grad_input) on the staged specialist; can_implement
  // declines a forward it cannot take.
  if (forced == kDepthwiseUnstaged) return unstaged ? forced : kDepthwiseSpecialist;
  if (forced == kDepthwisePlane) return plane ? forced : kDepthwiseSpecialist;
  if (forced == kDepthwiseSpecialist) return forced;
  if (forced < 0 && plane && depthwise_plane_pays(a)) return kDepthwisePlane;
  if (forced < 0 && unstaged && depthwise_unstaged_pays(a)) return kDepthwiseUnstaged;
  if (forced < 0 && depthwise_forward_geometry(a, sizeof(T))) return kDepthwiseSpecialist;
  if (a.out_C / a.groups == 1) return -1;
  if constexpr (std::is_same_v<T, double>) {
    return -2;
  } else {
    if (forced >= 0) return forced;
    // small stages 2 channels of 32 filters, so filters of 21x21 and more fit only wide's tiles: the
    // rule then takes wide (a forced small raises the shared-memory error instead).
    const int config = rule_direct_tile(a);
    return config == kSmall && !direct_tiles_fit<T, DirectSmall>(a) ? kWide : config;
  }
}

// Whether the config direct_config picks can run this launch (its tiles fit shared memory).
template <typename T>
bool direct_config_fits(const DirectArgs& a) {
  switch (direct_config<T>(a)) {
    case kDepthwiseSpecialist: return depthwise_forward_geometry(a, sizeof(T)).has_value();
    case kDepthwiseUnstaged: return true;
    case kDepthwisePlane: return true;
    case -1: return direct_tiles_fit<T, DirectDepthwise>(a);
    case -2: return direct_tiles_fit<T, DirectWideF64>(a);
    case kSmall: return direct_tiles_fit<T, DirectSmall>(a);
    default: return direct_tiles_fit<T, DirectWide>(a);
  }
}

// Runs one launch in the config direct_config picks (with the filter loops unrolled where the size
// is one of the compiled ones). `pass` (forward or grad_input) names the call for last_choice().
template <typename T>
void run_direct(const DirectArgs& a, const char* pass) {
  const bool unit = a.col_sy == 1 && a.col_sx == 1 && a.tap_sy == 1 && a.tap_sx == 1;
  const int config = direct_config<T>(a);
  if (config == kDepthwiseUnstaged) {
    record_last_choice(pass, "depthwise-unstaged", 1);
    return launch_depthwise_unstaged(a);
  }
  if (config == kDepthwisePlane) {
    record_last_choice(pass, "depthwise-plane", 1);
    return launch_depthwise_plane(a);
  }
  if (config == kDepthwiseSpecialist) {
    const auto geo = depthwise_forward_geometry(a, sizeof(T));
    TORCH_CHECK_VALUE(geo.has_value(), "torchconv.conv2d_direct: ", kForcedSpecialistReason);
    record_last_choice(pass, "depthwise", 1);
    return launch_depthwise_forward<T>(a, *geo);
  }
  if (config == -1) {
    record_last_choice(pass, "depthwise-tile", 1);
    if (unit && a.R == 3 && a.S == 3) return launch_direct<T, DirectDepthwise, 3, 3>(a);
    return launch_direct<T, DirectDepthwise, 0, 0>(a);
  }
  if constexpr (std::is_same_v<T, double>) {
    record_last_choice(pass, "f64", 1);
    launch_for_filter<T, DirectWideF64>(a);
  } else {
    record_last_choice(pass, kTileNames[config], 1);
    if (config == kSmall) return launch_for_filter<T, DirectSmall>(a);
    launch_for_filter<T, DirectWide>(a);
  }
}

// A launch of `map` reading `x` and the filter `w` (out_C x reduced channels per group x R x S, the
// map's taps in order) into `y`.
DirectArgs direct_launch(const LaunchMap& map, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                         at::Tensor& y) {
  DirectArgs a{};
  static_cast<LaunchMap&>(a) = map;
  a.x = x.const_data_ptr();
  a.w = w.const_data_ptr();
  a.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  a.y = y.mutable_data_ptr();
  return a;
}

at::Tensor conv2d_direct_cuda(const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_direct", input, weight, bias, stride, padding, dilation, groups);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement("conv2d_direct", kDirect, make_problem(p, input));
  auto x = input.contiguous();
  auto w = contiguous_weight(weight);
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  const DirectArgs a = direct_launch(forward_map(p), x, w, b, y);
  record_workspace_bytes(0);
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_cuda", [&] { run_direct<scalar_t>(a, "forward"); });
  return y;
}

// grad_input as forward launches of grad_output, one per output phase (iy mod sh, ix mod sw): each
// phase's launch map (common/launch_map.cuh) with its taps reversed is a stride-1 convolution with
// positive dilation, stored to every sh-th row and sw-th column. A phase that no tap reaches (a 1x1
// filter, or a stride larger than the filter) stays zero.
//
// Like every direct launch, a phase has no split over its reduction (K here), so phase grids short
// of the GPU leave SMs idle, where the gather has a thread per input pixel. Measured per phase grid
// (in the config with the most blocks) over the strided suite layers: with 4 to 49 blocks (batch 1)
// the gather won by 3-7x; with 128 blocks and more (batch 32) the phases won by 1.3-5x. The rule:
// phases when the largest phase's grid has at least one block per two SMs (or as forced with torchconv.set_variant("direct", "phases" | "gather")).
template <typename T>
bool grad_input_by_phases(const ConvShape& p) {
  const DirectVariant variant = direct_variant();
  if (variant != DirectVariant::kAuto) return variant == DirectVariant::kPhases;
  DirectArgs a{};
  a.N = int(p.N), a.out_C = int(p.C), a.groups = int(p.groups);
  a.col_H = int(ceil_div(p.H, p.stride_h)), a.col_W = int(ceil_div(p.W, p.stride_w));
  int64_t blocks;
  if (p.C / p.groups == 1) {
    blocks = grid_blocks<DirectDepthwise>(a);
  } else if constexpr (std::is_same_v<T, double>) {
    blocks = grid_blocks<DirectWideF64>(a);
  } else {
    blocks = grid_blocks<DirectSmall>(a);
  }
  return 2 * blocks >= sm_count();
}

template <typename T>
void direct_grad_input(const ConvShape& p, const at::Tensor& gy, const at::Tensor& weight, at::Tensor& gx) {
  const int sh = int(p.stride_h), sw = int(p.stride_w);
  if constexpr (std::is_same_v<T, float>) {
    // Strided depthwise layers: every phase in one launch of the unstaged family, unless a config other
    // than it or a grad_input variant (phases / gather) is forced.
    const int forced = forced_config(kDirect);
    if ((forced < 0 || forced == kDepthwiseUnstaged) && direct_variant() == DirectVariant::kAuto &&
        depthwise_strided_grad_input_takes(p)) {
      record_last_choice("grad_input", "depthwise-unstaged", 1);
      return launch_depthwise_strided_grad_input(p, gy, contiguous_weight(weight), gx);
    }
  }
  if ((sh > 1 || sw > 1) && !grad_input_by_phases<T>(p)) {
    record_last_choice("grad_input", "gather", 1);
    auto w = contiguous_weight(weight);
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(gx.numel(), threads), int64_t(sm_count()) * 32);
    direct_grad_input_gather_kernel<T><<<unsigned(blocks), threads, 0, current_stream()>>>(
        gy.const_data_ptr<T>(), w.const_data_ptr<T>(), gx.mutable_data_ptr<T>(), p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  if (grad_input_has_unwritten_pixels(p)) zero_dense_output(gx);
  if (p.K == 0) return;
  auto w = contiguous_weight(weight);
  for (int py = 0; py < sh; ++py) {
    for (int px = 0; px < sw; ++px) {
      const LaunchMap phase = grad_input_map(p, py, px);
      if (phase.empty()) continue;
      const LaunchMap map = with_reversed_taps(phase);
      auto f = new_workspace({p.C, p.filters_per_group(), map.R, map.S}, weight.options());
      relayout_filter(w.const_data_ptr<T>(), f.mutable_data_ptr<T>(), f.numel(), PhaseFilterMap{int(p.R), int(p.S), map});
      run_direct<T>(direct_launch(map, gy, f, at::Tensor(), gx), "grad_input");
    }
  }
}

at::Tensor direct_grad_input_cuda(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& weight) {
  auto gy = grad_output.contiguous();
  auto gx = new_output({p.N, p.C, p.H, p.W}, grad_output.options());
  if (gx.numel() == 0) return gx;
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "direct_grad_input_cuda", [&] { direct_grad_input<scalar_t>(p, gy, weight, gx); });
  return gx;
}

// The gradient sum_slices writes for `slices` slices over `taps` taps, allocated before the kernel
// that writes the slices, so that the sum, a programmatic dependent, follows that kernel directly
// (an allocation between them could fill it: new_output under test); undefined where one slice in
// weight order is the gradient itself.
at::Tensor sum_slices_target(const at::Tensor& weight, int64_t slices, int taps) {
  return slices == 1 && taps == 1 ? at::Tensor() : new_output(weight.sizes(), weight.options());
}

// The weight-shaped gradient from `partial` ([slices][numel], each slice in weight order, or tap-major
// over `taps` taps) into `out` (sum_slices_target).
at::Tensor sum_slices(const at::Tensor& partial, at::Tensor out, const at::Tensor& weight, int taps) {
  if (!out.defined()) return partial[0].view(weight.sizes());
  const int64_t numel = weight.numel();
  AT_DISPATCH_FLOATING_TYPES(partial.scalar_type(), "direct_sum_weight_slices", [&] {
    launch_sum_slices(partial.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), numel,
                      int(partial.size(0)), numel, TapMajorSliceMap{numel / taps, taps}, /*many_slices=*/0);
  });
  return out;
}

// Channels or patches for a layer's grad_weight: the columns' tile coverage, with patches counted
// at half (their input values are loaded once per tap, not once per filter row), and patches when a
// channels stage would not fit shared memory (strides of 13 and more along W).
template <typename T>
WeightGradColumns weight_grad_columns(const ConvShape& p, size_t channels_smem) {
  using Cfg = WeightGradConfig<T>;
  if (channels_smem > size_t(max_dynamic_smem())) return WeightGradColumns::kPatches;
  const int64_t Cg = p.channels_per_group(), patches = Cg * p.R * p.S;
  const int64_t patch_cols = std::min<int64_t>(Cfg::kTaps, ceil_div(patches, Cfg::TC)) * Cfg::TC;
  const double channels_cover = double(Cg) / double(ceil_div(Cg, int64_t(Cfg::TC)) * Cfg::TC);
  const double patches_cover = double(patches) / double(ceil_div(patches, patch_cols) * patch_cols);
  return patches_cover > 2 * channels_cover ? WeightGradColumns::kPatches : WeightGradColumns::kChannels;
}

// Enough slices of the stages that the grid fills every SM about four times at two blocks per SM,
// each slice at least 8 stages long, and the slices' partial sums within the workspace limit.
template <typename T>
at::Tensor direct_grad_weight_tiled(const ConvShape& p, const at::Tensor& gy, const at::Tensor& x,
                                    const at::Tensor& weight) {
  using Cfg = WeightGradConfig<T>;
  const int64_t Kg = p.filters_per_group(), Cg = p.channels_per_group();
  WeightGradArgs ch;  // the channels launch, to size its stage
  ch.taps = int(std::min<int64_t>(p.S, Cfg::kTaps));
  ch.tap_chunks = int(ceil_div(p.S, ch.taps));
  ch.x_rows = int((Cfg::TW - 1) * p.stride_w + (ch.taps - 1) * p.dil_w + 1);
  ch.x_pitch = Cfg::TC + Cfg::V;
  const auto columns = weight_grad_columns<T>(p, weight_grad_smem_bytes<T, WeightGradColumns::kChannels>(ch));
  const bool patches = columns == WeightGradColumns::kPatches;
  WeightGradArgs a = ch;
  int64_t blocks_per_slice;
  if (patches) {
    const int64_t cols = Cg * p.R * p.S;
    a.taps = int(std::min<int64_t>(Cfg::kTaps, ceil_div(cols, Cfg::TC)));
    a.tap_chunks = int(ceil_div(cols, int64_t(a.taps) * Cfg::TC));
    a.x_rows = Cfg::TW;
    a.x_pitch = a.taps * Cfg::TC + Cfg::V;
    blocks_per_slice = p.groups * ceil_div(Kg, Cfg::TK) * a.tap_chunks;
  } else {
    blocks_per_slice = p.groups * ceil_div(Kg, Cfg::TK) * ceil_div(Cg, Cfg::TC) * p.R * a.tap_chunks;
  }
  a.p = p;
  a.stages = p.N * p.Ho * ceil_div(p.Wo, Cfg::TW);
  if (a.stages == 0) return at::zeros_like(weight);  // an empty batch
  const int64_t numel = weight.numel();
  const int64_t by_limit = std::max<int64_t>(1, workspace_limit_bytes() / (numel * int64_t(sizeof(T))));
  int64_t slices = ceil_div(4 * 2 * int64_t(sm_count()), blocks_per_slice);
  slices = std::max<int64_t>(1, std::min({slices, ceil_div(a.stages, 8), by_limit, int64_t(65535)}));
  a.stages_per_slice = ceil_div(a.stages, slices);
  slices = ceil_div(a.stages, a.stages_per_slice);
  // One slice is written in weight order, in place; several channels slices go tap-major.
  a.tap_major = !patches && slices > 1;
  const int taps = a.tap_major ? int(p.R * p.S) : 1;
  const int64_t grid_x = patches ? blocks_per_slice : blocks_per_slice / (p.R * a.tap_chunks);
  check_grid(grid_x, "conv2d_direct_backward");
  auto partial = new_workspace({slices, numel}, weight.options());
  at::Tensor out = sum_slices_target(weight, slices, taps);
  record_workspace_bytes(slices > 1 ? partial.numel() * int64_t(sizeof(T)) : 0);
  record_last_choice("grad_weight", patches ? "patches" : "channels", int(slices));
  a.gy = gy.const_data_ptr(), a.x = x.const_data_ptr(), a.partial = partial.mutable_data_ptr();
  const dim3 grid(unsigned(grid_x), unsigned(slices), unsigned(patches ? 1 : p.R * a.tap_chunks));
  const auto launch = [&](auto kernel, size_t smem) {
    ensure_dynamic_smem(kernel, smem, "conv2d_direct_backward");
    kernel<<<grid, Cfg::kThreadsPerTap * a.taps, smem, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (patches)
    launch(direct_grad_weight_tiled_kernel<T, WeightGradColumns::kPatches>,
           weight_grad_smem_bytes<T, WeightGradColumns::kPatches>(a));
  else
    launch(direct_grad_weight_tiled_kernel<T, WeightGradColumns::kChannels>,
           weight_grad_smem_bytes<T, WeightGradColumns::kChannels>(a));
  return sum_slices(partial, out, weight, taps);
}

at::Tensor direct_grad_weight_cuda(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                   const at::Tensor& weight) {
  auto gy = grad_output.contiguous();
  auto x = input.contiguous();
  at::Tensor gw;
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "direct_grad_weight_cuda", [&] {
    const int forced = forced_config(kDirect);
    const bool specialist =
        forced < 0 || forced == kDepthwiseSpecialist || forced == kDepthwiseUnstaged || forced == kDepthwisePlane;
    const auto dw = specialist ? depthwise_grad_weight_args(p, sizeof(scalar_t)) : std::nullopt;
    if (dw && p.N > 0) gw = depthwise_grad_weight<scalar_t>(*dw, gy, x, weight);
    else gw = direct_grad_weight_tiled<scalar_t>(p, gy, x, weight);
  });
  return gw;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_direct_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  return conv2d_backward(
      "conv2d_direct_backward", kDirect, grad_output, input, weight, stride, padding, dilation, groups, output_mask,
      [&](const ConvShape& p) { return direct_grad_input_cuda(p, grad_output, weight); },
      [&](const ConvShape& p) { return direct_grad_weight_cuda(p, grad_output, input, weight); });
}

// The direct kernel's limits: the forward launch's tiles (with their halo) must fit shared memory.
// Indexing is 64-bit (offsets are formed in int64), so tensor sizes set no limit.
std::string can_implement(const ConvProblem& problem) {
  if (nhwc_depthwise_problem(problem)) return "";  // the NHWC specialist has no tiles to fit
  const ConvShape& p = problem.shape;
  DirectArgs a{};
  static_cast<LaunchMap&>(a) = forward_map(p);
  a.groups = std::max(1, a.groups);
  const bool is_double = problem.dtype == at::kDouble;
  if (forced_config(kDirect) == kDepthwiseUnstaged && !depthwise_unstaged_takes(a, is_double ? 8 : 4))
    return kForcedUnstagedReason;
  if (forced_config(kDirect) == kDepthwisePlane && !depthwise_plane_takes(a, is_double ? 8 : 4))
    return kForcedPlaneReason;
  const int config = is_double ? direct_config<double>(a) : direct_config<float>(a);
  const bool fits = is_double ? direct_config_fits<double>(a) : direct_config_fits<float>(a);
  if (!fits && config == kDepthwiseSpecialist) return kForcedSpecialistReason;
  if (!fits)
    return "its input and filter tiles for a " + std::to_string(p.R) + "x" + std::to_string(p.S) +
           " filter (stride " + std::to_string(p.stride_w) + ", dilation " + std::to_string(p.dil_w) +
           ") do not fit the device's shared memory";
  return "";
}

[[maybe_unused]] const bool kRegistered = register_plans(kDirect, c10::DeviceType::CUDA,
                                        {&can_implement, {std::begin(kTileNames), std::end(kTileNames)}});

// The registered operators: a call the NHWC specialist takes runs it in its own dtype (grad_weight of
// the shapes nhwc_grad_weight_takes declines through the NCHW kernels in float32); every other call
// the NCHW kernels, float16 and bfloat16 widened to float32 (precision.h).
at::Tensor conv2d_direct_any_precision(const at::Tensor& input, const at::Tensor& weight,
                                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                       at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (may_be_nhwc_depthwise(input, weight, groups)) {
    const ConvShape p = check_conv2d_forward(kDirectOp, input, weight, bias, stride, padding, dilation, groups);
    const ConvProblem problem = make_problem(p, input);
    if (nhwc_depthwise_problem(problem)) {
      const c10::cuda::CUDAGuard guard(input.device());
      return depthwise_nhwc_forward(p, input, weight, bias);
    }
  }
  return forward_in_fp32(kDirectOp, &conv2d_direct_cuda, input, weight, bias, stride, padding, dilation, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_direct_backward_any_precision(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  if (may_be_nhwc_depthwise(input, weight, groups)) {
    const ConvShape p = check_conv2d_backward(kDirectBackwardOp, grad_output, input, weight, stride, padding,
                                              dilation, groups, output_mask);
    if (nhwc_depthwise_problem(make_problem(p, input))) {
      const c10::cuda::CUDAGuard guard(input.device());
      const bool nhwc_weight = output_mask[1] && nhwc_grad_weight_takes(p);
      // grad_output converted once for both gradients (a no-op when it is channels_last already).
      const at::Tensor gy = output_mask[0] || nhwc_weight ? nhwc_source(grad_output) : grad_output;
      int64_t workspace = 0;
      at::Tensor gx, gw, gb;
      if (output_mask[0]) gx = depthwise_nhwc_grad_input(p, gy, weight);
      if (nhwc_weight) {
        gw = depthwise_nhwc_grad_weight(p, gy, input, weight);
        workspace = last_workspace_bytes();
      } else if (output_mask[1]) {
        gw = std::get<1>(backward_in_fp32(kDirectBackwardOp, &conv2d_direct_backward_cuda, grad_output, input, weight,
                                          stride, padding, dilation, groups, {false, true, false}));
        workspace = last_workspace_bytes();
      }
      if (output_mask[2]) gb = conv_bias_grad(grad_output);  // summed in FP32 by at::sum
      record_workspace_bytes(workspace);
      return masked_grads(gx, gw, gb, output_mask, input);
    }
  }
  return backward_in_fp32(kDirectBackwardOp, &conv2d_direct_backward_cuda, grad_output, input, weight, stride,
                          padding, dilation, groups, output_mask);
}

}  // namespace
}  // namespace cuda

TORCH_LIBRARY_IMPL(torchconv, CUDA, m) {
  m.impl("conv2d_direct", &cuda::conv2d_direct_any_precision);
  m.impl("conv2d_direct_backward", &cuda::conv2d_direct_backward_any_precision);
}

}  // namespace torchconv
