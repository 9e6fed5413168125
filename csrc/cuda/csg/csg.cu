// C Split Globally (seed 001, chapters 4-8) on the GPU: the convolution for layers with too little
// parallel work in K, H and W to fill the GPU (batch-1 inference above all). The reduction over
// input channels is split across the grid; the splits add their partial sums into a zeroed output
// with atomicAdd (one split: plain stores).
//
// Forward block: kBK filters x kBH x kBW output pixels of one image over one channel slice.
//   - The 32 lanes of a warp own 32 x kTK filters and the same kTH x kTW pixels, so every input
//     element a warp reads is one shared-memory broadcast, reused by all its filters.
//   - Warps tile H and W; per channel the block stages its input patch (with halo, zero padding
//     filled by cp.async) and its filters re-laid [group][channel][tap][filter] -- the seed's
//     C, R, S, K order -- so a warp's filter loads are one contiguous run.
//   - Each thread keeps kTK x kTH x kTW sums in registers. For the common filter widths and strides
//     (compile-time kS, kSX) it holds one filter row (kS x kTK values) and slides over an input row
//     segment in registers; other shapes read the patch element by element.
//   - Several channels are staged per barrier, double-buffered.
//   - Sums go back through shared memory with the filter innermost so global stores run along rows.
// What the seed assumed away is handled: any K (lanes past K compute zeros and store nothing), any
// H and W (partial tiles), batch > 1, stride, padding, dilation, groups, bias (added by split 0).
//
// grad_input is a convolution whose reduction runs over K: the same kernel with the filters re-laid
// transposed and flipped. A strided layer runs once per output phase (iy mod s, ix mod s) with only
// the taps that reach it (conv_shape.h: phase_axis), written to every s-th pixel.
// grad_weight reduces over N x Ho x Wo: pixel tiles are split across the grid and the partial sums
// added with atomicAdd. Atomics make results order-dependent: under
// torch.use_deterministic_algorithms(True) these operators raise (PyTorch's alert).
//
// Tile shapes are named configs; the split and config come from a rule, or, with
// benchmark mode (torchconv.set_benchmark(True)), from timing the candidates once per shape (cached per shape, dtype
// and GPU).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../../backward.h"
#include "../../conv_shape.h"
#include "../../plans.h"
#include "../../tuning.h"
#include "../../weight_cache.h"
#include "../common/launch.cuh"
#include "../common/tensor_data.h"
#include "../common/weight_copy.cuh"
#include "../common/tile_gemm.cuh"
#include "csg_kernels.cuh"
#include "../../precision.h"

namespace torchconv {
namespace cuda {
namespace {

template <typename T>
at::Tensor filter_layout(const at::Tensor& weight, const CsgConv& cv) {
  const auto tag = [&] {
    return cv.transposed ? "csg/t/" + launch_taps_key(cv) + "/" + std::to_string(cv.groups)
                         : "csg/f/" + std::to_string(cv.groups);
  };
  return cached_weight_transform(weight, tag, [&] {
    auto w = contiguous_weight(weight);
    auto f = new_workspace({int64_t(cv.groups) * cv.Cg * cv.R * cv.S * cv.k_pad}, weight.options());
    relayout_filter(w.const_data_ptr<T>(), f.mutable_data_ptr<T>(), f.numel(),
                    CsgFilterMap{int(weight.size(2)), int(weight.size(3)), cv.k_pad, cv});
    return f;
  });
}

// ---- launch, rule and tuner -----------------------------------------------------------------

constexpr const char* kPassNames[] = {"forward", "grad_input"};
constexpr int kForward = 0, kGradInput = 1;

// A split: how many channel slices the reduction is cut into, and the tile config.
struct CsgPlan {
  int config;  // index into kConfigNames (float); ignored for double
  int splits;
};

// Shared memory for the staged channels: about 24 KiB per stage (two stages, so two or three
// blocks share an SM), at least one channel, at most 8 channels per barrier.
constexpr int kStageBytes = 24 * 1024;

template <typename T, typename Cfg>
struct CsgGeometry {
  int tiles_w, tiles_h, tiles_k, patch_w, pitch, patch_elems, per_channel;
  CsgGeometry(const CsgConv& cv) {
    tiles_w = int(ceil_div(cv.col_W, Cfg::kBW));
    tiles_h = int(ceil_div(cv.col_H, Cfg::kBH));
    tiles_k = int(ceil_div(cv.Kg, Cfg::kBK));
    patch_w = (Cfg::kBW - 1) * cv.col_sx + (cv.S - 1) * cv.tap_sx + 1;
    const int patch_h = (Cfg::kBH - 1) * cv.col_sy + (cv.R - 1) * cv.tap_sy + 1;
    pitch = round_up(patch_w, 4);
    patch_elems = patch_h * pitch;
    per_channel = patch_elems + cv.R * cv.S * Cfg::kBK;
  }
  int64_t base_blocks(const CsgConv& cv) const { return int64_t(tiles_w) * tiles_h * tiles_k * cv.groups * cv.N; }
};

// The rule: enough channel splits that the grid fills every SM about twice over at the config's
// occupancy, keeping at least 4 channels per split (each split's partial sums cost one atomic per
// output).
template <typename T, typename Cfg>
int rule_splits(const CsgConv& cv) {
  const CsgGeometry<T, Cfg> geo(cv);
  const int64_t target = 2 * int64_t(Cfg::kMinBlocks) * sm_count();
  const int64_t want = ceil_div(target, std::max<int64_t>(1, geo.base_blocks(cv)));
  const int64_t most = std::max(1, cv.Cg / 4);
  return int(std::max<int64_t>(1, std::min<int64_t>(want, most)));
}

// Dynamic shared memory of one launch: two stages, or the write-back tile if larger.
template <typename T, typename Cfg>
size_t csg_smem_bytes(const CsgGeometry<T, Cfg>& geo, int channels_per_stage) {
  const size_t epilogue = size_t(Cfg::kBH * Cfg::kBW) * (Cfg::kBK + 1);
  return std::max(2 * size_t(channels_per_stage) * geo.per_channel, epilogue) * sizeof(T);
}

template <typename T, typename Cfg>
int channels_per_stage(const CsgGeometry<T, Cfg>& geo, int channels_per_split) {
  const int fit = kStageBytes / int(geo.per_channel * sizeof(T));
  return std::max(1, std::min({fit, 8, channels_per_split}));
}

// Whether config Cfg's tiles for `cv` fit the device's shared memory (large or widely dilated
// filters may not; the tuner skips such configs).
template <typename T, typename Cfg>
bool csg_fits(const CsgConv& cv) {
  const CsgGeometry<T, Cfg> geo(cv);
  return csg_smem_bytes<T, Cfg>(geo, 1) <= size_t(max_dynamic_smem());
}

template <typename T, typename Cfg, int kS, int kSX>
void launch_csg_kernel(const CsgArgs<T>& a, int64_t blocks, size_t smem) {
  auto kernel = csg_conv_kernel<T, Cfg, kS, kSX>;
  ensure_dynamic_smem(kernel, smem, "conv2d_csg");
  kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Runs one launch of `cv` with config Cfg cut into `splits` channel slices. The output must be
// zeroed first when splits > 1 (the caller does it once for all phases).
template <typename T, typename Cfg>
void run_csg(const T* src, const T* filt, const T* bias, T* out, const CsgConv& cv, int splits) {
  const CsgGeometry<T, Cfg> geo(cv);
  CsgArgs<T> a;
  a.src = src, a.filt = filt, a.bias = bias, a.out = out, a.cv = cv;
  a.tiles_w = geo.tiles_w, a.tiles_h = geo.tiles_h, a.tiles_k = geo.tiles_k;
  a.channels_per_split = int(ceil_div(cv.Cg, splits));
  splits = int(ceil_div(cv.Cg, a.channels_per_split));
  a.atomic = splits > 1;
  a.channels_per_stage = channels_per_stage<T, Cfg>(geo, a.channels_per_split);
  a.patch_w = geo.patch_w, a.pitch = geo.pitch, a.patch_elems = geo.patch_elems;
  a.stage_elems = a.channels_per_stage * geo.per_channel;
  const size_t smem = csg_smem_bytes<T, Cfg>(geo, a.channels_per_stage);
  const int64_t blocks = geo.base_blocks(cv) * splits;
  check_grid(blocks, "conv2d_csg");
  if constexpr (std::is_same_v<T, float>) {
    if (cv.tap_sx == 1 && cv.S == 3 && cv.col_sx == 1) return launch_csg_kernel<T, Cfg, 3, 1>(a, blocks, smem);
    if (cv.tap_sx == 1 && cv.S == 3 && cv.col_sx == 2) return launch_csg_kernel<T, Cfg, 3, 2>(a, blocks, smem);
    if (cv.tap_sx == 1 && cv.S == 7 && cv.col_sx == 2) return launch_csg_kernel<T, Cfg, 7, 2>(a, blocks, smem);
    if (cv.S == 1 && cv.col_sx == 1) return launch_csg_kernel<T, Cfg, 1, 1>(a, blocks, smem);
  }
  launch_csg_kernel<T, Cfg, 0, 0>(a, blocks, smem);
}

template <typename T>
void run_plan(const T* src, const T* filt, const T* bias, T* out, const CsgConv& cv, const CsgPlan& plan) {
  if constexpr (std::is_same_v<T, double>) {
    run_csg<T, CsgF64>(src, filt, bias, out, cv, plan.splits);
  } else {
    switch (plan.config) {
      case 0: return run_csg<T, CsgWide>(src, filt, bias, out, cv, plan.splits);
      case 1: return run_csg<T, CsgMedium>(src, filt, bias, out, cv, plan.splits);
      default: return run_csg<T, CsgThin>(src, filt, bias, out, cv, plan.splits);
    }
  }
}

// Config rule (float): thin for at most 32 filters per group, else medium. With every candidate
// timed over the batch-1 suites, medium won 15 of 22 layers including every one with 64-512
// filters; wide won only three layers with 512-1024 channels, thin the layers with few filters.
template <typename T>
CsgPlan rule_plan(const CsgConv& cv) {
  if constexpr (std::is_same_v<T, double>) {
    return {0, rule_splits<T, CsgF64>(cv)};
  } else {
    switch (forced_config(kCsg)) {
      case 0: return {0, rule_splits<T, CsgWide>(cv)};
      case 1: return {1, rule_splits<T, CsgMedium>(cv)};
      case 2: return {2, rule_splits<T, CsgThin>(cv)};
      default: break;
    }
    if (cv.Kg <= 32) return {2, rule_splits<T, CsgThin>(cv)};
    return {1, rule_splits<T, CsgMedium>(cv)};
  }
}

// Candidates the tuner times: every float config, each at its rule's split and at 1/4, 1/2 and 2x it.
template <typename T>
std::vector<CsgPlan> candidate_plans(const CsgConv& cv) {
  std::vector<CsgPlan> plans;
  auto add = [&](int config, int base) {
    for (int s : {base / 4, base / 2, base, base * 2}) {
      s = std::max(1, std::min(s, cv.Cg));
      bool seen = false;
      for (const auto& p : plans) seen |= p.config == config && p.splits == s;
      if (!seen) plans.push_back({config, s});
    }
  };
  if constexpr (std::is_same_v<T, double>) {
    add(0, rule_splits<T, CsgF64>(cv));
  } else {
    if (csg_fits<T, CsgWide>(cv)) add(0, rule_splits<T, CsgWide>(cv));
    if (csg_fits<T, CsgMedium>(cv)) add(1, rule_splits<T, CsgMedium>(cv));
    if (csg_fits<T, CsgThin>(cv)) add(2, rule_splits<T, CsgThin>(cv));
  }
  return plans;
}

const char* config_name(const CsgPlan& plan, bool is_double) { return is_double ? "f64" : kConfigNames[plan.config]; }

std::string plan_name(const CsgPlan& plan, bool is_double) {
  return std::string(config_name(plan, is_double)) + "/splits=" + std::to_string(plan.splits);
}

std::string conv_key(const CsgConv& cv, bool is_double, const char* pass) {
  const int v[] = {cv.N,      cv.groups, cv.Cg,     cv.Kg,     cv.src_H,  cv.src_W,  cv.R,      cv.S,
                   cv.tap_sy, cv.tap_sx, cv.col_H,  cv.col_W,  cv.col_sy, cv.col_sx, cv.col_oy, cv.col_ox,
                   cv.out_sy, cv.out_sx};
  std::string key = std::string(pass) + (is_double ? "/f64/" : "/f32/") + device_name();
  for (int x : v) key += "," + std::to_string(x);
  return key;
}

// Tuned plans by shape: a fixed-size key, so the per-call look-up builds no strings.
using PlanKey = std::array<int, 20>;
PlanKey plan_key(const CsgConv& cv, bool is_double, int pass) {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return {cv.N,      cv.groups, cv.Cg,     cv.Kg,     cv.src_H,  cv.src_W,  cv.R,      cv.S,     cv.tap_sy, cv.tap_sx,
          cv.col_H,  cv.col_W,  cv.col_sy, cv.col_sx, cv.col_oy, cv.col_ox, cv.out_sy, int(is_double), pass, device};
}
std::mutex g_plans_mutex;
std::map<PlanKey, CsgPlan> g_plans;
int64_t g_plans_generation = 0;  // tuned_choices_generation() when g_plans was last valid

// Under g_plans_mutex: forgets the fast look-up once torchconv.clear_cache() has cleared the registry.
void drop_stale_plans() {
  const int64_t generation = tuned_choices_generation();
  if (generation != g_plans_generation) g_plans.clear(), g_plans_generation = generation;
}

// Times every candidate plan of `cv` (into a scratch output) and returns the fastest.
template <typename T>
CsgPlan tune_plan(const T* src, const T* filt, const at::Tensor& out, const CsgConv& cv) {
  CsgPlan best = rule_plan<T>(cv);
  float best_ms = -1;
  at::Tensor scratch = at::empty_like(out);
  T* out_ptr = scratch.mutable_data_ptr<T>();
  cudaEvent_t start, stop;
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&stop));
  for (const auto& p : candidate_plans<T>(cv)) {
    auto once = [&] {
      if (p.splits > 1) scratch.zero_();
      run_plan<T>(src, filt, nullptr, out_ptr, cv, p);
    };
    once();  // warm-up (and the shared-memory opt-in)
    C10_CUDA_CHECK(cudaEventRecord(start, current_stream()));
    constexpr int kReps = 3;
    for (int i = 0; i < kReps; ++i) once();
    C10_CUDA_CHECK(cudaEventRecord(stop, current_stream()));
    C10_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (best_ms < 0 || ms < best_ms) best_ms = ms, best = p;
  }
  C10_CUDA_CHECK(cudaEventDestroy(start));
  C10_CUDA_CHECK(cudaEventDestroy(stop));
  return best;
}

// Picks the plan for `cv`: with tuning on, the tuned one (timing the candidates the first time a
// shape is seen on this GPU; the registry in tuning.h also holds it by name), else the rule.
template <typename T>
CsgPlan choose_plan(const T* src, const T* filt, const at::Tensor& out, const CsgConv& cv, int pass) {
  constexpr bool is_double = std::is_same_v<T, double>;
  if (!tuning_enabled() || forced_config(kCsg) >= 0) return rule_plan<T>(cv);
  const PlanKey key = plan_key(cv, is_double, pass);
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);
    drop_stale_plans();
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return it->second;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) return rule_plan<T>(cv);  // no timing inside a graph
  const std::string name = conv_key(cv, is_double, kPassNames[pass]);
  CsgPlan plan{-1, 0};
  std::string known;
  if (tuned_choice(name, &known))
    for (const auto& p : candidate_plans<T>(cv))
      if (plan_name(p, is_double) == known) plan = p;
  if (plan.config < 0) {
    plan = tune_plan<T>(src, filt, out, cv);
    record_tuned_choice(name, plan_name(plan, is_double));
  }
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  drop_stale_plans();
  g_plans[key] = plan;
  return plan;
}

// Runs `cv` into `out` (zeroing it first when the plan splits and the caller has not), records the
// plan for the benchmark.
template <typename T>
void csg_conv(const T* src, const T* filt, const T* bias, at::Tensor& out, const CsgConv& cv, int pass, bool zeroed) {
  const CsgPlan plan = choose_plan<T>(src, filt, out, cv, pass);
  record_last_choice(kPassNames[pass], config_name(plan, std::is_same_v<T, double>), plan.splits);
  if (plan.splits > 1 && !zeroed) zero_dense_output(out);
  run_plan<T>(src, filt, bias, out.mutable_data_ptr<T>(), cv, plan);
}

CsgConv csg_launch(const LaunchMap& map) {
  CsgConv cv{};
  static_cast<LaunchMap&>(cv) = map;
  cv.Cg = map.reduced_per_group(), cv.Kg = map.outputs_per_group();
  cv.k_pad = round_up(cv.Kg, kFilterRowPad);
  return cv;
}

CsgConv forward_conv(const ConvShape& p) { return csg_launch(forward_map(p)); }

// grad_input phase (py, px) as a CSG launch: grad_output convolved with the phase's taps reversed,
// reducing over K, written to every stride-th pixel.
CsgConv grad_input_conv(const ConvShape& p, int py, int px) {
  return csg_launch(with_reversed_taps(grad_input_map(p, py, px)));
}

void alert_atomics(const char* what) {
  at::globalContext().alertNotDeterministic(what);
}

// ---- grad_weight ------------------------------------------------------------------------------

template <typename T, typename Cfg, int kS, int kSX>
void launch_weight_grad(CsgWeightGradArgs<T> a) {
  constexpr int kTaps = kS > 0 ? kS : 1;
  a.tap_groups = a.S / kTaps;
  a.patch_w = (Cfg::kBW - 1) * a.sw + (kTaps - 1) * a.dw + 1;
  a.chan_pitch = (Cfg::kBH * a.patch_w) | 1;  // odd: the 32 lanes' channels fall on 32 banks
  a.stage_elems = round_up(Cfg::kBK * Cfg::kBH * Cfg::kBW + Cfg::kBC * a.chan_pitch, 4);
  const size_t smem = 2 * size_t(a.stage_elems) * sizeof(T);
  a.tiles_w = int(ceil_div(a.Wo, Cfg::kBW)), a.tiles_h = int(ceil_div(a.Ho, Cfg::kBH));
  a.k_tiles = int(ceil_div(a.Kg, Cfg::kBK)), a.c_tiles = int(ceil_div(a.Cg, Cfg::kBC));
  a.pixel_tiles = int64_t(a.N) * a.tiles_w * a.tiles_h;
  const int64_t base = int64_t(a.c_tiles) * a.k_tiles * a.R * a.tap_groups * a.groups;
  // Pixel-tile runs: enough to fill every SM about twice at the config's occupancy.
  const int64_t target = 2 * int64_t(Cfg::kMinBlocks) * sm_count();
  int64_t splits = std::max<int64_t>(1, std::min<int64_t>(ceil_div(target, base), a.pixel_tiles));
  a.tiles_per_split = ceil_div(a.pixel_tiles, splits);
  splits = ceil_div(a.pixel_tiles, a.tiles_per_split);
  a.atomic = splits > 1;
  const int64_t blocks = base * splits;
  check_grid(blocks, "conv2d_csg_backward");
  auto kernel = csg_weight_grad_kernel<T, Cfg, kS, kSX>;
  ensure_dynamic_smem(kernel, smem, "conv2d_csg_backward");
  kernel<<<unsigned(blocks), Cfg::kThreads, smem, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  record_last_choice("grad_weight", "pixels", int(splits));
}

template <typename T>
void csg_weight_grad(const ConvShape& p, const at::Tensor& x, const at::Tensor& gy, at::Tensor& gw) {
  using Cfg = std::conditional_t<std::is_same_v<T, double>, CsgWeightGradF64, CsgWeightGradF32>;
  CsgWeightGradArgs<T> a{};
  a.x = x.const_data_ptr<T>(), a.gy = gy.const_data_ptr<T>(), a.gw = gw.mutable_data_ptr<T>();
  a.N = int(p.N), a.C = int(p.C), a.H = int(p.H), a.W = int(p.W), a.K = int(p.K), a.Ho = int(p.Ho), a.Wo = int(p.Wo);
  a.Cg = int(p.channels_per_group()), a.Kg = int(p.filters_per_group()), a.groups = int(p.groups);
  a.R = int(p.R), a.S = int(p.S), a.sh = int(p.stride_h), a.sw = int(p.stride_w), a.ph = int(p.pad_h),
  a.pw = int(p.pad_w), a.dh = int(p.dil_h), a.dw = int(p.dil_w);
  if (std::is_same_v<T, float> && a.dw == 1) {
    if (a.S == 3 && a.sw == 1) return launch_weight_grad<T, Cfg, 3, 1>(a);
    if (a.S == 3 && a.sw == 2) return launch_weight_grad<T, Cfg, 3, 2>(a);
    if (a.S == 7 && a.sw == 2) return launch_weight_grad<T, Cfg, 7, 2>(a);
  }
  launch_weight_grad<T, Cfg, 0, 0>(a);
}

// ---- operators --------------------------------------------------------------------------------

at::Tensor conv2d_csg_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_csg", input, weight, bias, stride, padding, dilation, groups);
  alert_atomics("torchconv.conv2d_csg (CUDA): channel splits add their partial sums with atomicAdd");
  const c10::cuda::CUDAGuard guard(input.device());
  check_can_implement("conv2d_csg", kCsg, make_problem(p, input));
  auto x = input.contiguous();
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  if (y.numel() == 0) return y;
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_csg_cuda", [&] {
    const CsgConv cv = forward_conv(p);
    if (cv.Cg == 0 || cv.R == 0 || cv.S == 0) {
      if (b.defined()) y.copy_(b.view({1, p.K, 1, 1}).expand_as(y));
      else y.zero_();
      return;
    }
    const at::Tensor f = filter_layout<scalar_t>(weight, cv);
    csg_conv<scalar_t>(x.const_data_ptr<scalar_t>(), f.const_data_ptr<scalar_t>(),
                       b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, y, cv, kForward, false);
  });
  return y;
}

// Whether the config the rule picks for `cv` fits the device's shared memory (large or widely
// dilated filters stage a large input patch per channel).
template <typename T>
bool rule_plan_fits(const CsgConv& cv) {
  if constexpr (std::is_same_v<T, double>) {
    return csg_fits<T, CsgF64>(cv);
  } else {
    switch (rule_plan<T>(cv).config) {
      case 0: return csg_fits<T, CsgWide>(cv);
      case 1: return csg_fits<T, CsgMedium>(cv);
      default: return csg_fits<T, CsgThin>(cv);
    }
  }
}

// grad_input = the transposed convolution of grad_output, CSG over K: one launch per output phase.
template <typename T>
void csg_grad_input(const ConvShape& p, const at::Tensor& gy, const at::Tensor& weight, at::Tensor& gx) {
  const int sh = int(p.stride_h), sw = int(p.stride_w);
  const bool phased = sh > 1 || sw > 1;
  // Zero once when any phase may use atomics or receive nothing; every plan then adds.
  bool zeroed = false;
  auto ensure_zeroed = [&] {
    if (!zeroed) zero_dense_output(gx), zeroed = true;
  };
  for (int py = 0; py < sh; ++py) {
    for (int px = 0; px < sw; ++px) {
      const CsgConv cv = grad_input_conv(p, py, px);
      if (cv.col_H <= 0 || cv.col_W <= 0) continue;
      if (cv.empty() || p.K == 0) {
        ensure_zeroed();
        continue;
      }
      const at::Tensor f = filter_layout<T>(weight, cv);
      if (phased) ensure_zeroed();
      csg_conv<T>(gy.const_data_ptr<T>(), f.const_data_ptr<T>(), nullptr, gx, cv, kGradInput, zeroed);
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_csg_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  alert_atomics("torchconv.conv2d_csg_backward (CUDA): reduction splits add their partial sums with atomicAdd");
  auto gy = grad_output.contiguous();
  auto grad_input = [&](const ConvShape& p) {
    auto gx = new_output(input.sizes(), input.options());
    if (gx.numel() > 0)
      AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_csg_grad_input_cuda",
                                 [&] { csg_grad_input<scalar_t>(p, gy, weight, gx); });
    return gx;
  };
  auto grad_weight = [&](const ConvShape& p) {
    auto gw = new_output(weight.sizes(), weight.options());
    if (gw.numel() == 0) return gw;
    if (gy.numel() == 0 || input.numel() == 0) return gw.zero_();
    auto x = input.contiguous();
    zero_dense_output(gw);
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_csg_grad_weight_cuda",
                               [&] { csg_weight_grad<scalar_t>(p, x, gy, gw); });
    return gw;
  };
  return conv2d_backward("conv2d_csg_backward", kCsg, grad_output, input, weight, stride, padding, dilation, groups,
                         output_mask, grad_input, grad_weight);
}

// The CSG kernels' limits (they address tensors with 64-bit offsets, so sizes set none): the staged
// input patch and filters of the rule's config (forward, and every grad_input phase) within shared
// memory, and no atomics under torch.use_deterministic_algorithms(True).
std::string can_implement(const ConvProblem& problem) {
  const ConvShape& p = problem.shape;
  if (problem.deterministic)
    return "CSG sums partial results with atomicAdd, whose order varies between runs, and "
           "torch.use_deterministic_algorithms(True) is set";
  const bool is_double = problem.dtype == at::kDouble;
  auto fits = [&](const CsgConv& cv) { return is_double ? rule_plan_fits<double>(cv) : rule_plan_fits<float>(cv); };
  bool ok = p.channels_per_group() == 0 || fits(forward_conv(p));
  for (int py = 0; ok && py < p.stride_h && p.filters_per_group() > 0; ++py)
    for (int px = 0; ok && px < p.stride_w; ++px) {
      const CsgConv cv = grad_input_conv(p, py, px);
      if (!cv.empty()) ok = fits(cv);
    }
  if (!ok)
    return "it stages a " + std::to_string(p.R) + "x" + std::to_string(p.S) + " filter's input patch (stride " +
           std::to_string(p.stride_w) + ", dilation " + std::to_string(p.dil_w) +
           ") per channel in shared memory, more than the device provides";
  return "";
}

[[maybe_unused]] const bool kRegistered = register_plans(
    kCsg, c10::DeviceType::CUDA, {&can_implement, {std::begin(kConfigNames), std::end(kConfigNames)}});

}  // namespace
}  // namespace cuda

TORCH_LIBRARY_IMPL(torchconv, CUDA, m) {
  m.impl("conv2d_csg", &any_precision_forward<kCsgOp, &cuda::conv2d_csg_cuda>);
  m.impl("conv2d_csg_backward", &any_precision_backward<kCsgBackwardOp, &cuda::conv2d_csg_backward_cuda>);
}

}  // namespace torchconv
