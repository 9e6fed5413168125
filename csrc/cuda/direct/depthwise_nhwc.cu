// The direct algorithm's NHWC depthwise specialist, host side: which layers it takes, the kernel
// instance for a launch, the filter re-laid in float32, and the forward / grad_input launches.
#include "depthwise_nhwc.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "../../tuning.h"
#include "../../weight_cache.h"
#include "../../workspace.h"
#include "../common/dependent_launch.cuh"
#include "../common/launch.cuh"
#include "../common/launch_map.cuh"
#include "../common/filter_relayout.cuh"
#include "../common/slice_sum.cuh"
#include "../common/tensor_data.h"
#include "depthwise_nhwc_kernels.cuh"
#include "direct_kernels.cuh"

namespace torchconv {
namespace cuda {
at::Tensor nhwc_source(const at::Tensor& t) {
  at::Tensor c = t.contiguous(at::MemoryFormat::ChannelsLast);
  if (!aligned_to(c.const_data_ptr(), kDwNhwcVec * c.element_size()))
    c = c.clone(at::MemoryFormat::ChannelsLast);
  return c;
}

namespace {

// Channels per group the kernels take (a group lies inside one 4-channel vector).
bool is_group_size(int64_t g) { return g == 1 || g == 2 || g == kDwNhwcMaxGroup; }

}  // namespace

bool nhwc_depthwise_problem(const ConvProblem& problem) {
  const ConvShape& p = problem.shape;
  const int forced = forced_config(kDirect);
  if (!problem.channels_last || (forced >= 0 && forced != kDepthwiseSpecialist)) return false;
  if (problem.dtype != at::kFloat && problem.dtype != at::kHalf && problem.dtype != at::kBFloat16) return false;
  return p.groups > 1 && p.C == p.K && is_group_size(p.channels_per_group()) && p.C % kDwNhwcVec == 0;
}

bool may_be_nhwc_depthwise(const at::Tensor& input, const at::Tensor& weight, int64_t groups) {
  return input.is_cuda() && input.dim() == 4 && weight.dim() == 4 && groups > 1 && is_group_size(weight.size(1)) &&
         input.size(1) == weight.size(0) && input.size(1) == groups * weight.size(1) &&
         input.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

namespace {

// The kernel instance for a launch (depthwise_nhwc_kernels.cuh) with kG channels per group:
// - depthwise float16 / bfloat16, 3x3 and 5x5 at stride 1 or 2 (no dilation along W): the rows
//   kernel, every filter row's inputs loaded at once (dw_nhwc_rows_strip). Not float32: its raw
//   rows take twice the registers, and the per-row instance keeps pace with it there; not 7x7,
//   whose 7 rows of raw words leave too few threads an SM (docs/depthwise.md);
// - depthwise (kG = 1): filter widths 3, 5 and 7 at stride 1 or 2 (no dilation along W) unrolled
//   (dw_nhwc_unrolled_strip); any other width with stride and dilation 1 along W the column window,
//   whose long strip pays where rows of more than 7 taps amortize its loads;
// - groups of 4 (ResNeXt's grouped 3x3), float16 / bfloat16, 3x3 at stride 1: the rows kernel;
// - groups of 2 or 4: width 3 at stride 1 or 2 unrolled;
// - everything else the per-product loads with the short strip.
// Returns the kernel and its strip.
template <typename T, int kG>
std::pair<void (*)(DwNhwcArgs<T>), int> depthwise_nhwc_instance(const LaunchMap& m) {
  using Kernel = std::pair<void (*)(DwNhwcArgs<T>), int>;
  const auto unrolled = [](auto width, auto stride) -> Kernel {
    constexpr int kStrip = dw_nhwc_unrolled_strip(width(), stride(), kG);
    return {depthwise_nhwc_kernel<T, kG, kStrip, width(), stride()>, kStrip};
  };
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  const bool unrolled_stride = m.tap_sx == 1 && (m.col_sx == 1 || m.col_sx == 2), s2 = m.col_sx == 2;
  const auto rows = [](auto size, auto stride) -> Kernel {
    constexpr int kStrip = dw_nhwc_rows_strip(size(), stride());
    return {depthwise_nhwc_rows_kernel<T, kG, kStrip, size(), size(), stride()>, kStrip};
  };
  if constexpr (kG == 1 && !std::is_same_v<T, float>) {
    if (unrolled_stride && m.R == 3 && m.S == 3)
      return s2 ? rows(std::integral_constant<int, 3>{}, Two{}) : rows(std::integral_constant<int, 3>{}, One{});
    if (unrolled_stride && m.R == 5 && m.S == 5)
      return s2 ? rows(std::integral_constant<int, 5>{}, Two{}) : rows(std::integral_constant<int, 5>{}, One{});
  }
  if constexpr (kG == 4 && !std::is_same_v<T, float>) {
    if (m.tap_sx == 1 && m.col_sx == 1 && m.R == 3 && m.S == 3) return rows(std::integral_constant<int, 3>{}, One{});
  }
  if (unrolled_stride && m.S == 3)
    return s2 ? unrolled(std::integral_constant<int, 3>{}, Two{}) : unrolled(std::integral_constant<int, 3>{}, One{});
  if constexpr (kG == 1) {
    if (unrolled_stride && m.S == 5)
      return s2 ? unrolled(std::integral_constant<int, 5>{}, Two{}) : unrolled(std::integral_constant<int, 5>{}, One{});
    if (unrolled_stride && m.S == 7)
      return s2 ? unrolled(std::integral_constant<int, 7>{}, Two{}) : unrolled(std::integral_constant<int, 7>{}, One{});
    if (m.tap_sx == 1 && m.col_sx == 1) {
      if (m.S > 7) return {depthwise_nhwc_kernel<T, 1, kDwNhwcLongStrip, 0, 1>, kDwNhwcLongStrip};
      return {depthwise_nhwc_kernel<T, 1, kDwNhwcShortStrip, 0, 1>, kDwNhwcShortStrip};
    }
  }
  return {depthwise_nhwc_kernel<T, kG, kDwNhwcShortStrip, 0, 0>, kDwNhwcShortStrip};
}

// The filters of `count` launches of one layer (its forward, or a strided grad_input's phases with
// their taps reversed) as the kernels read them (DwNhwcFilterMap), in float32, one after the other
// in one tensor that one kernel re-lays from the weight in its own layout (no contiguous copy first):
// kept in the weight cache until the weight changes where the cache serves it (frozen weights,
// inference mode: weight_cache.h), so such calls launch the convolution alone; re-laid every call
// otherwise. `relaid` says whether this call launched the re-layout (the kernel just before the next
// launch on the stream).
template <typename scalar_t>
at::Tensor nhwc_filters(const at::Tensor& weight, const LaunchMap* launches, int count, bool& relaid) {
  TORCH_INTERNAL_ASSERT(count > 0 && count <= kDwNhwcMaxLaunches);
  const auto tag = [&] {
    std::string key = "depthwise_nhwc/";
    for (int l = 0; l < count; ++l) key += launch_taps_key(launches[l]) + ";";
    return key;
  };
  relaid = false;
  return cached_weight_transform(weight, tag, [&] {
    relaid = true;
    DwNhwcFilterMap map{};
    map.w = weight_strides(weight), map.m = launches[0];
    for (int l = 0; l < count; ++l) map.add(launches[l]);
    auto wt = new_workspace({map.end[count - 1]}, weight.options().dtype(at::kFloat));
    relayout_filter(weight.const_data_ptr<scalar_t>(), wt.mutable_data_ptr<float>(), wt.numel(), map);
    return wt;
  });
}

// One launch of `map` (taps stepping forward) from `src` into `dst`, both NHWC, with `wt` its filter
// (from nhwc_filters). `after_relayout`: the kernel just before it on the stream is the filter's
// re-layout, so on sm_90 it launches as a programmatic dependent of it (common/dependent_launch.cuh):
// its blocks start while the re-layout runs and load their inputs, which work before the re-layout
// wrote, and wait for the filter before its first filter load (the kernels' grid_dependency_wait).
template <typename scalar_t>
void launch_depthwise_nhwc(const LaunchMap& map, const at::Tensor& src, const float* wt, const at::Tensor& bias,
                           at::Tensor& dst, bool after_relayout) {
  using T = typename CudaElement<scalar_t>::type;
  DwNhwcArgs<T> a{};
  DwNhwcConv& cv = a.cv;
  static_cast<LaunchMap&>(cv) = map;
  const int group = map.reduced_per_group();
  const auto [kernel, strip] = group == 1   ? depthwise_nhwc_instance<T, 1>(map)
                               : group == 2 ? depthwise_nhwc_instance<T, 2>(map)
                                            : depthwise_nhwc_instance<T, kDwNhwcMaxGroup>(map);
  cv.vecs = map.src_C / kDwNhwcVec;
  cv.strips = int(ceil_div(map.col_W, strip));
  cv.threads = int64_t(map.N) * map.col_H * cv.strips * cv.vecs;
  if (cv.threads == 0) return;
  a.src = kernel_data<T>(src);
  a.wt = wt;
  a.bias = bias.defined() ? kernel_data<T>(bias) : nullptr;
  a.dst = mutable_kernel_data<T>(dst);
  const unsigned blocks = unsigned(ceil_div(cv.threads, kDwNhwcThreads));
  if (after_relayout && dependent_launches()) {
    launch_with_attributes(kernel, dim3(blocks), dim3(kDwNhwcThreads), 0, current_stream(), dim3(1), true, a);
    return;
  }
  kernel<<<blocks, kDwNhwcThreads, 0, current_stream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Calls f(scalar_t{}) for the specialist's dtypes (nhwc_depthwise_problem admits no other).
template <typename F>
void dispatch_nhwc_dtype(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kFloat: return f(float{});
    case at::kHalf: return f(c10::Half{});
    case at::kBFloat16: return f(c10::BFloat16{});
    default: TORCH_CHECK(false, "torchconv: the NHWC depthwise specialist has no ", dtype, " kernel");
  }
}

}  // namespace

at::Tensor depthwise_nhwc_forward(const ConvShape& p, const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias) {
  const at::Tensor x = nhwc_source(input);
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
  at::Tensor y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options().memory_format(at::MemoryFormat::ChannelsLast));
  record_workspace_bytes(0);
  record_last_choice("forward", "depthwise-nhwc", 1);
  dispatch_nhwc_dtype(input.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    const LaunchMap map = forward_map(p);
    if (y.numel() == 0) return;
    bool relaid = false;
    const at::Tensor wt = nhwc_filters<scalar_t>(weight, &map, 1, relaid);
    launch_depthwise_nhwc<scalar_t>(map, x, wt.const_data_ptr<float>(), b, y, relaid);
  });
  return y;
}

// grad_input: one launch per output phase (as direct_grad_input), each a depthwise NHWC launch of
// grad_output with the phase's taps reversed, their filters re-laid by one kernel (up to
// kDwNhwcMaxLaunches phases); phases no tap reaches stay zero.
at::Tensor depthwise_nhwc_grad_input(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& weight) {
  const at::Tensor gy = nhwc_source(grad_output);
  at::Tensor gx = new_output({p.N, p.C, p.H, p.W}, grad_output.options().memory_format(at::MemoryFormat::ChannelsLast));
  if (gx.numel() == 0) return gx;
  const int sh = int(p.stride_h), sw = int(p.stride_w);
  if (grad_input_has_unwritten_pixels(p)) zero_dense_output(gx);
  record_last_choice("grad_input", "depthwise-nhwc", 1);
  dispatch_nhwc_dtype(gy.scalar_type(), [&](auto element) {
    using scalar_t = decltype(element);
    LaunchMap phases[kDwNhwcMaxLaunches];
    int count = 0;
    const auto run = [&] {  // the phases gathered so far, their filters re-laid together
      if (count == 0) return;
      bool relaid = false;
      const at::Tensor wt = nhwc_filters<scalar_t>(weight, phases, count, relaid);
      const float* filter = wt.const_data_ptr<float>();
      for (int l = 0; l < count; ++l) {  // only the first follows the re-layout on the stream
        launch_depthwise_nhwc<scalar_t>(phases[l], gy, filter, at::Tensor(), gx, relaid && l == 0);
        filter += dw_nhwc_filter_elements(phases[l]);
      }
      count = 0;
    };
    for (int py = 0; py < sh; ++py)
      for (int px = 0; px < sw; ++px) {
        const LaunchMap phase = grad_input_map(p, py, px);
        if (phase.empty()) continue;
        phases[count++] = with_reversed_taps(phase);
        if (count == kDwNhwcMaxLaunches) run();
      }
    run();
  });
  return gx;
}

namespace {

// The grad_weight instance for kG channels per group: rows of 3 taps (and 5 or 7 depthwise) at stride
// 1 or 2 along W without dilation slide a register window over the row (at stride 2 each pixel keeps
// S - 2 of the last pixel's input columns); anything else loads every product's input.
template <typename T, int kG>
void (*depthwise_nhwc_grad_weight_instance(const DwNhwcWeightGrad& g))(DwNhwcWeightGradArgs<T>) {
  constexpr bool kFloat32 = std::is_same_v<T, float>;
  const auto window = [&](auto taps) -> void (*)(DwNhwcWeightGradArgs<T>) {
    if (g.sw == 2)
      return depthwise_nhwc_grad_weight_kernel<T, kG, taps(), 2, dw_nhwc_grad_weight_run(taps(), 2, kG, kFloat32)>;
    return depthwise_nhwc_grad_weight_kernel<T, kG, taps(), 1, dw_nhwc_grad_weight_run(taps(), 1, kG, kFloat32)>;
  };
  if (g.dw == 1 && (g.sw == 1 || g.sw == 2)) {
    if (g.S == 3) return window(std::integral_constant<int, 3>{});
    if constexpr (kG == 1) {
      if (g.S == 5) return window(std::integral_constant<int, 5>{});
      if (g.S == 7) return window(std::integral_constant<int, 7>{});
    }
  }
  return depthwise_nhwc_grad_weight_kernel<T, kG, 0>;
}

// The 8-channel instance (16-bit depthwise rows of 5 or 7 taps at stride 1: dw_nhwc_grad_weight_vector).
template <typename T>
void (*depthwise_nhwc_grad_weight_vec8_instance(const DwNhwcWeightGrad& g))(DwNhwcWeightGradArgs<T>) {
  constexpr int kRun = dw_nhwc_grad_weight_run(5, 1, 1, false, 8);
  if (g.S == 5) return depthwise_nhwc_grad_weight_kernel<T, 1, 5, 1, kRun, 8>;
  return depthwise_nhwc_grad_weight_kernel<T, 1, 7, 1, kRun, 8>;
}

}  // namespace

bool nhwc_grad_weight_takes(const ConvShape& p) {
  return p.channels_per_group() == p.filters_per_group() && p.S * p.channels_per_group() <= kDwNhwcGradSums;
}

// Slices of the N x Ho output rows: enough threads (4-channel vectors x filter rows x slices) for
// about 1024 per SM, and few enough slices that the partial sums fit the workspace limit; threads of
// 8-channel vectors (dw_nhwc_grad_weight_vector) take the same slices, so half as many threads. Their
// sum reads the slices in their own order and writes the weight's layout and dtype.
at::Tensor depthwise_nhwc_grad_weight(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input,
                                      const at::Tensor& weight) {
  DwNhwcWeightGrad g{};
  g.N = int(p.N), g.C = int(p.C), g.H = int(p.H), g.W = int(p.W), g.Ho = int(p.Ho), g.Wo = int(p.Wo);
  g.R = int(p.R), g.S = int(p.S), g.sh = int(p.stride_h), g.sw = int(p.stride_w), g.ph = int(p.pad_h);
  g.pw = int(p.pad_w), g.dh = int(p.dil_h), g.dw = int(p.dil_w);
  const int group = int(p.channels_per_group());
  const int64_t rows = int64_t(g.N) * g.Ho, taps = int64_t(g.R) * g.S;
  if (rows == 0 || g.Wo == 0) return at::zeros(weight.sizes(), weight.options());
  const at::Tensor x = nhwc_source(input), gy = nhwc_source(grad_output);
  // 8-channel vectors load 16-byte words, so both tensors must start on 16 bytes (nhwc_source aligns
  // them to a 4-channel vector only).
  const int vector = aligned_to(x.const_data_ptr(), 16) && aligned_to(gy.const_data_ptr(), 16)
                         ? dw_nhwc_grad_weight_vector(g.S, g.sw, g.dw, group, x.scalar_type() == at::kFloat, g.C)
                         : kDwNhwcVec;
  g.vecs = g.C / vector;
  const int64_t vecs4 = g.C / kDwNhwcVec;  // the slices are those of 4-channel threads at either width
  const int64_t target = int64_t(sm_count()) * 1024;
  int64_t per_slice = std::max<int64_t>(1, ceil_div(rows * vecs4 * g.R, target));
  const int64_t slice_elems = taps * group * g.C;
  // Where the slices' partial sums are at least 40% of the bytes of the input and gradient (small
  // planes, wide filters), half the slices save more in workspace traffic than half the threads cost
  // (never below a quarter of the target's threads).
  const int64_t data_bytes = (int64_t(g.N) * g.H * g.W + rows * g.Wo) * g.C * int64_t(input.element_size());
  if (vector == kDwNhwcVec && per_slice < rows &&
      ceil_div(rows, per_slice) * slice_elems * int64_t(sizeof(float)) * 5 >= data_bytes * 2 &&
      ceil_div(rows, 2 * per_slice) * vecs4 * g.R * 4 >= target)
    per_slice *= 2;
  while (per_slice < rows && ceil_div(rows, per_slice) * slice_elems * int64_t(sizeof(float)) > workspace_limit_bytes())
    per_slice *= 2;
  g.rows_per_slice = int(std::min(per_slice, rows));
  g.slices = int(ceil_div(rows, g.rows_per_slice));
  g.threads = int64_t(g.vecs) * g.R * g.slices;
  auto partial = new_workspace({g.slices, slice_elems}, weight.options().dtype(at::kFloat));
  // (Allocated before the slices' kernel: the sum, a programmatic dependent, follows it directly.)
  at::Tensor gw = new_output(weight.sizes(), weight.options().memory_format(at::MemoryFormat::Contiguous));
  record_workspace_bytes(g.slices > 1 ? partial.numel() * int64_t(sizeof(float)) : 0);
  record_last_choice("grad_weight", vector == kDwNhwcVec ? "depthwise-nhwc" : "depthwise-nhwc-vec8", g.slices);
  dispatch_nhwc_dtype(x.scalar_type(), [&](auto element) {
    using T = typename CudaElement<decltype(element)>::type;
    DwNhwcWeightGradArgs<T> a{kernel_data<T>(x), kernel_data<T>(gy), partial.mutable_data_ptr<float>(), g};
    auto kernel = group == 4   ? depthwise_nhwc_grad_weight_instance<T, 4>(g)
                  : group == 2 ? depthwise_nhwc_grad_weight_instance<T, 2>(g)
                               : depthwise_nhwc_grad_weight_instance<T, 1>(g);
    if constexpr (!std::is_same_v<T, float>) {
      if (vector != kDwNhwcVec) kernel = depthwise_nhwc_grad_weight_vec8_instance<T>(g);
    }
    kernel<<<unsigned(ceil_div(g.threads, kDwNhwcThreads)), kDwNhwcThreads, 0, current_stream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  dispatch_nhwc_dtype(gw.scalar_type(), [&](auto element) {
    using T = typename CudaElement<decltype(element)>::type;
    launch_sum_slices(partial.const_data_ptr<float>(), mutable_kernel_data<T>(gw), gw.numel(), g.slices, slice_elems,
                      DwNhwcSliceMap{int(taps), group, g.C}, /*many_slices=*/64, /*very_many_slices=*/256);
  });
  return gw;
}

}  // namespace cuda
}  // namespace torchconv
