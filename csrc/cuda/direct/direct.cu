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

#include "../../backward.h"
#include "../../conv_shape.h"
#include "../../plans.h"
#include "../../tuning.h"
#include "../../variant.h"
#include "../../workspace.h"
#include "../common/launch.cuh"
#include "direct_kernels.cuh"

namespace torchconv {
namespace cuda {
namespace {

// Blocks in config Cfg's grid for a launch.
template <typename Cfg>
int64_t grid_blocks(const DirectArgs& a) {
  return ceil_div(a.Wo + a.col_shift, Cfg::kTileW) * ceil_div(a.Ho, Cfg::kTileH) *
         ceil_div(a.K / a.groups, Cfg::kTileK) * int64_t(a.groups) * a.N;
}

template <typename T, typename Cfg, int KR, int KS>
void launch_direct(DirectArgs a) {
  constexpr int kVec = 16 / sizeof(T);
  // 16-byte input pieces need rows of whole pieces, an aligned input and planes addressable in 32 bits.
  a.vec_input = KR > 0 && a.W % kVec == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                int64_t(a.H) * a.W < (int64_t(1) << 31);
  a.col_shift = a.vec_input ? ((-a.pw) % kVec + kVec) % kVec : 0;
  const int64_t blocks = grid_blocks<Cfg>(a);
  if (blocks == 0) return;
  check_grid(blocks, "conv2d_direct");
  const TileGeometry<Cfg> geo(a.R, a.S, KR ? 1 : a.sh, KR ? 1 : a.sw, KR ? 1 : a.dh, KR ? 1 : a.dw);
  const size_t smem = geo.template smem_bytes<T>(a.R, a.S);
  auto kernel = direct_forward_kernel<T, Cfg, KR, KS>;
  ensure_dynamic_smem(kernel, smem, "conv2d_direct");
  kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether the filter loops of this layer are unrolled at compile time (square 1..13, odd, unit
// stride and dilation); every other layer runs the run-time-size path.
bool unrolled_filter(const DirectArgs& a) {
  const bool unit = a.sh == 1 && a.sw == 1 && a.dh == 1 && a.dw == 1;
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
  const int64_t Kg = a.K / a.groups;
  const int64_t tx = ceil_div(a.Wo, Cfg::kTileW), ty = ceil_div(a.Ho, Cfg::kTileH), tk = ceil_div(Kg, Cfg::kTileK);
  const int64_t blocks = tx * ty * tk * a.groups * a.N;
  const int64_t slots = int64_t(Cfg::kMinBlocks) * sm_count();
  const double covered = double(a.Wo) * a.Ho * Kg / (double(tx * Cfg::kTileW) * (ty * Cfg::kTileH) * (tk * Cfg::kTileK));
  const double filled = double(blocks) / double(ceil_div(blocks, slots) * slots);
  return covered * filled * work_per_cycle;
}

// Whether config Cfg's two stages fit the device's shared memory for this layer.
template <typename T, typename Cfg>
bool direct_tiles_fit(const DirectArgs& a) {
  const TileGeometry<Cfg> geo(a.R, a.S, a.sh, a.sw, a.dh, a.dw);
  return geo.template smem_bytes<T>(a.R, a.S) <= size_t(max_dynamic_smem());
}

int rule_direct_tile(const DirectArgs& a) {
  const double wide = useful_fraction<DirectWide>(a, unrolled_filter(a) ? 1.0 : 0.5);
  return useful_fraction<DirectSmall>(a, 0.8) > wide ? kSmall : kWide;
}

// Picks the tile config and the compile-time filter size: depthwise-like layers (one filter per
// group) take the one-channel tile, double its own register tile, float the forced config or
// rule_direct_tile's.
// `pass` (forward or grad_input) names the call for torchconv._C.last_choice().
// The config a launch runs: depthwise-like layers (one filter per group) take the one-channel tile,
// double its own register tile, float the forced config or rule_direct_tile's. -1 names the
// depthwise tile, -2 the double one.
template <typename T>
int direct_config(const DirectArgs& a) {
  if (a.K / a.groups == 1) return -1;
  if constexpr (std::is_same_v<T, double>) {
    return -2;
  } else {
    const int forced = forced_config(kDirect);
    if (forced >= 0) return forced;
    // small stages 2 channels of 32 filters, so filters of 21x21 and more fit only wide's tiles: the
    // rule then takes wide (a forced small raises the shared-memory error instead).
    const int config = rule_direct_tile(a);
    return config == kSmall && !direct_tiles_fit<T, DirectSmall>(a) ? kWide : config;
  }
}

// Whether the config direct_config picks fits the device's shared memory for this launch.
template <typename T>
bool direct_config_fits(const DirectArgs& a) {
  switch (direct_config<T>(a)) {
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
  const bool unit = a.sh == 1 && a.sw == 1 && a.dh == 1 && a.dw == 1;
  const int config = direct_config<T>(a);
  if (config == -1) {
    record_last_choice(pass, "depthwise", 1);
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

DirectArgs make_args(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& y, int sh, int sw,
                     int ph, int pw, int dh, int dw, int groups) {
  DirectArgs a;
  a.x = x.const_data_ptr();
  a.w = w.const_data_ptr();
  a.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  a.y = y.mutable_data_ptr();
  a.N = int(x.size(0)), a.C = int(x.size(1)), a.H = int(x.size(2)), a.W = int(x.size(3));
  a.K = int(w.size(0)), a.R = int(w.size(2)), a.S = int(w.size(3));
  a.Ho = int(y.size(2)), a.Wo = int(y.size(3));
  a.sh = sh, a.sw = sw, a.ph = ph, a.pw = pw, a.dh = dh, a.dw = dw, a.groups = groups;
  a.out_H = a.Ho, a.out_W = a.Wo, a.out_sy = a.out_sx = 1, a.out_oy = a.out_ox = 0;
  return a;
}

at::Tensor conv2d_direct_cuda(const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_direct", input, weight, bias, stride, padding, dilation, groups);
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement("conv2d_direct", kDirect, make_problem(p, input));
  auto x = input.contiguous();
  auto w = weight.contiguous();
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  const DirectArgs a = make_args(x, w, b, y, int(p.stride_h), int(p.stride_w), int(p.pad_h), int(p.pad_w),
                                 int(p.dil_h), int(p.dil_w), int(p.groups));
  record_workspace_bytes(0);
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_cuda", [&] { run_direct<scalar_t>(a, "forward"); });
  return y;
}

// grad_input as forward launches of grad_output, one per output phase (iy mod sh, ix mod sw): phase
// pixels t receive gy[t + d0 + m * step] x w[r0 + m * dr] over the phase's taps m, which is a
// stride-1 convolution with the phase's taps reversed, dilation -step and padding -(d0 + (taps - 1) *
// step), stored to every sh-th row and sw-th column. A phase that no tap reaches (a 1x1 filter, or
// a stride larger than the filter) stays zero.
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
  a.N = int(p.N), a.K = int(p.C), a.groups = int(p.groups);
  a.Ho = int(ceil_div(p.H, p.stride_h)), a.Wo = int(ceil_div(p.W, p.stride_w));
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
  const int64_t Kg = p.filters_per_group(), Cg = p.channels_per_group();
  if ((sh > 1 || sw > 1) && !grad_input_by_phases<T>(p)) {
    record_last_choice("grad_input", "gather", 1);
    auto w = weight.contiguous();
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(gx.numel(), threads), int64_t(sm_count()) * 32);
    direct_grad_input_gather_kernel<T><<<unsigned(blocks), threads, 0, current_stream()>>>(
        gy.const_data_ptr<T>(), w.const_data_ptr<T>(), gx.mutable_data_ptr<T>(), p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  bool any_empty = false;
  for (int py = 0; py < sh; ++py)
    for (int px = 0; px < sw; ++px)
      any_empty |= phase_axis(p.H, p.R, sh, p.pad_h, p.dil_h, py).taps == 0 ||
                   phase_axis(p.W, p.S, sw, p.pad_w, p.dil_w, px).taps == 0;
  if (any_empty || p.K == 0)
    C10_CUDA_CHECK(cudaMemsetAsync(gx.data_ptr(), 0, gx.numel() * gx.element_size(), current_stream()));
  if (p.K == 0) return;
  auto w = weight.contiguous();
  for (int py = 0; py < sh; ++py) {
    for (int px = 0; px < sw; ++px) {
      const PhaseAxis ay = phase_axis(p.H, p.R, sh, p.pad_h, p.dil_h, py);
      const PhaseAxis ax = phase_axis(p.W, p.S, sw, p.pad_w, p.dil_w, px);
      if (ay.count == 0 || ax.count == 0 || ay.taps == 0 || ax.taps == 0) continue;
      const PhaseTaps m{ay.r0, ay.dr, ay.taps, ax.r0, ax.dr, ax.taps};
      auto f = at::empty({p.C, Kg, ay.taps, ax.taps}, weight.options());
      relayout_filter(w.const_data_ptr<T>(), f.mutable_data_ptr<T>(), f.numel(),
                      PhaseFilterMap{int(Kg), int(Cg), int(p.R), int(p.S), m});
      DirectArgs a = make_args(gy, f, at::Tensor(), gx, 1, 1, -(ay.d0 + (ay.taps - 1) * ay.step),
                               -(ax.d0 + (ax.taps - 1) * ax.step), -ay.step, -ax.step, int(p.groups));
      a.Ho = ay.count, a.Wo = ax.count;
      a.out_sy = sh, a.out_sx = sw, a.out_oy = py, a.out_ox = px;
      run_direct<T>(a, "grad_input");
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

// The weight-shaped gradient from `partial` ([slices][numel], each slice in weight order, or tap-major
// over `taps` taps).
at::Tensor sum_slices(const at::Tensor& partial, const at::Tensor& weight, int taps) {
  if (partial.size(0) == 1 && taps == 1) return partial[0].view(weight.sizes());
  auto out = at::empty(weight.sizes(), weight.options());
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
  auto partial = at::empty({slices, numel}, weight.options());
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
  return sum_slices(partial, weight, taps);
}

at::Tensor direct_grad_weight_cuda(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                   const at::Tensor& weight) {
  auto gy = grad_output.contiguous();
  auto x = input.contiguous();
  at::Tensor gw;
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "direct_grad_weight_cuda",
                             [&] { gw = direct_grad_weight_tiled<scalar_t>(p, gy, x, weight); });
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
  const ConvShape& p = problem.shape;
  DirectArgs a{};
  a.N = int(p.N), a.C = int(p.C), a.H = int(p.H), a.W = int(p.W), a.K = int(p.K), a.R = int(p.R), a.S = int(p.S);
  a.Ho = int(p.Ho), a.Wo = int(p.Wo), a.sh = int(p.stride_h), a.sw = int(p.stride_w), a.ph = int(p.pad_h),
  a.pw = int(p.pad_w), a.dh = int(p.dil_h), a.dw = int(p.dil_w), a.groups = int(std::max<int64_t>(1, p.groups));
  const bool fits = problem.dtype == at::kDouble ? direct_config_fits<double>(a) : direct_config_fits<float>(a);
  if (!fits)
    return "its input and filter tiles for a " + std::to_string(p.R) + "x" + std::to_string(p.S) +
           " filter (stride " + std::to_string(p.stride_w) + ", dilation " + std::to_string(p.dil_w) +
           ") do not fit the device's shared memory";
  return "";
}

[[maybe_unused]] const bool kRegistered = register_plans(kDirect, c10::DeviceType::CUDA,
                                        {&can_implement, {std::begin(kTileNames), std::end(kTileNames)}});

}  // namespace
}  // namespace cuda

TORCH_LIBRARY_IMPL(torchconv, CUDA, m) {
  m.impl("conv2d_direct", &cuda::conv2d_direct_cuda);
  m.impl("conv2d_direct_backward", &cuda::conv2d_direct_backward_cuda);
}

}  // namespace torchconv
