// Direct convolution on the CPU: seed 000's loop nest (Figure 3) over output tiles. Each task
// owns a tile of kTileK output channels x kTileRows output rows (the GPU kernel's Rz x Ry register
// tile) and accumulates it over input channels and filter taps, one filter value per channel of
// the tile at a time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "../backward.h"
#include "../conv_shape.h"
#include "../plans.h"
#include "../precision.h"
#include "../weight_cache.h"
#include "grouped_nhwc.h"
#include "isa.h"

namespace torchconv {
namespace {

constexpr int64_t kTileK = 4;
constexpr int64_t kTileRows = 4;

// The layers both depthwise forwards below take: one channel and one filter per group, 3x3, 5x5 or 7x7,
// stride 1 or 2 both ways, undilated.
bool depthwise_forward_shape(const ConvShape& p) {
  return p.channels_per_group() == 1 && p.filters_per_group() == 1 && p.R == p.S && (p.R == 3 || p.R == 5 || p.R == 7) &&
         p.stride_h == p.stride_w && (p.stride_h == 1 || p.stride_h == 2) && p.dil_h == 1 && p.dil_w == 1;
}

namespace portable {
#include "depthwise_kernels.h"
}  // namespace portable

#ifdef TORCHCONV_CPU_AVX2
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "depthwise_kernels.h"
}  // namespace avx2
#pragma GCC pop_options
#endif

// Calls fn(K, stride) with the filter size and stride of a depthwise_forward_shape layer as
// compile-time constants (std::integral_constant), for the kernels' template arguments.
template <typename Fn>
void with_depthwise_filter(const ConvShape& p, Fn&& fn) {
  auto with_stride = [&](auto k) {
    if (p.stride_h == 1) return fn(k, std::integral_constant<int, 1>());
    fn(k, std::integral_constant<int, 2>());
  };
  switch (p.R) {
    case 3: return with_stride(std::integral_constant<int, 3>());
    case 5: return with_stride(std::integral_constant<int, 5>());
    default: return with_stride(std::integral_constant<int, 7>());
  }
}

// The depthwise forward along rows, for the filters and strides it is written for; false elsewhere.
template <typename T>
bool depthwise_forward(const ConvShape& p, const T* x, const T* w, const T* bias, T* y) {
  if (!depthwise_forward_shape(p)) return false;
  with_depthwise_filter(p, [&](auto k, auto st) {
    auto kernel = TORCHCONV_CPU_KERNEL(depthwise_forward_rows, T, decltype(k)::value, decltype(st)::value);
    kernel(p, x, w, bias, y);
  });
  return true;
}

// Output rows up to this wide take the channels_last forward from NCHW data too: rows this short
// leave the row loops little to vectorize, and the two transposing copies cost less than they save
// (on 56-wide planes of 96 channels they cost five times the row kernel).
constexpr int64_t kDepthwiseNhwcMaxWidth = 14;

// Whether the channels_last depthwise forward runs the call: channels_last input, or small planes.
bool depthwise_nhwc_takes(const ConvShape& p, const at::Tensor& input) {
  if (!depthwise_forward_shape(p)) return false;
  return p.Wo <= kDepthwiseNhwcMaxWidth || channels_last_layout(input);
}

// A depthwise grad_weight from NCHW data goes along the channels (two transposing copies) on wider
// planes than the forward does: its tiles sum a filter tap over whole planes, one tap at a time, so
// they lose to the copies on planes up to 28 outputs wide, and at any width once the filter has 25
// taps or more (5x5, 7x7); 3x3 filters on wider planes keep the tiles, which the copies cost more than.
constexpr int64_t kDepthwiseGradWeightNhwcMaxWidth = 28;
constexpr int64_t kDepthwiseGradWeightNhwcMinTaps = 25;

bool depthwise_grad_weight_nhwc_takes(const ConvShape& p, const at::Tensor& input) {
  return depthwise_nhwc_takes(p, input) ||
         (depthwise_forward_shape(p) &&
          (p.Wo <= kDepthwiseGradWeightNhwcMaxWidth || p.R * p.S >= kDepthwiseGradWeightNhwcMinTaps));
}

template <typename T>
void direct_forward_kernel(const ConvShape& p, const T* x, const T* w, const T* bias, T* y) {
  if (depthwise_forward(p, x, w, bias, y)) return;
  const int64_t Cg = p.channels_per_group(), Kg = p.filters_per_group();
  const int64_t k_tiles = (Kg + kTileK - 1) / kTileK;
  const int64_t row_tiles = (p.Ho + kTileRows - 1) / kTileRows;
  const int64_t tasks = p.N * p.groups * k_tiles * row_tiles;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> acc(kTileK * kTileRows * p.Wo);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row_tile = task % row_tiles;
      const int64_t k_tile = (task / row_tiles) % k_tiles;
      const int64_t g = (task / (row_tiles * k_tiles)) % p.groups;
      const int64_t n = task / (row_tiles * k_tiles * p.groups);
      const int64_t k0 = g * Kg + k_tile * kTileK;
      const int64_t nk = std::min(kTileK, g * Kg + Kg - k0);
      const int64_t oy0 = row_tile * kTileRows;
      const int64_t nrows = std::min(kTileRows, p.Ho - oy0);
      auto at_acc = [&](int64_t kk, int64_t row) { return acc.data() + (kk * kTileRows + row) * p.Wo; };
      for (int64_t kk = 0; kk < nk; ++kk)
        for (int64_t row = 0; row < nrows; ++row)
          std::fill_n(at_acc(kk, row), p.Wo, bias ? bias[k0 + kk] : T(0));

      for (int64_t c = 0; c < Cg; ++c) {
        const T* xc = x + ((n * p.C + g * Cg + c) * p.H) * p.W;
        for (int64_t r = 0; r < p.R; ++r) {
          for (int64_t s = 0; s < p.S; ++s) {
            T wv[kTileK];
            for (int64_t kk = 0; kk < nk; ++kk) wv[kk] = w[(((k0 + kk) * Cg + c) * p.R + r) * p.S + s];
            const int64_t col_offset = s * p.dil_w - p.pad_w;
            const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
            for (int64_t row = 0; row < nrows; ++row) {
              const int64_t iy = input_coord(oy0 + row, r, p.stride_h, p.pad_h, p.dil_h);
              if (iy < 0 || iy >= p.H) continue;
              const T* xrow = xc + iy * p.W + col_offset;
              for (int64_t kk = 0; kk < nk; ++kk) {
                T* a = at_acc(kk, row);
                const T wk = wv[kk];
                for (int64_t ox = cols.lo; ox < cols.hi; ++ox) a[ox] += wk * xrow[ox * p.stride_w];
              }
            }
          }
        }
      }
      for (int64_t kk = 0; kk < nk; ++kk)
        for (int64_t row = 0; row < nrows; ++row)
          std::copy_n(at_acc(kk, row), p.Wo, y + ((n * p.K + k0 + kk) * p.Ho + oy0 + row) * p.Wo);
    }
  });
}

// grad_input: each task owns one input plane (n, c) and adds into it, filter by filter and tap by
// tap, the grad_output rows that read it -- the forward's inner loop transposed, a line's inside
// range found once (contiguous adds at stride 1) -- so no two tasks write the same pixel and the
// order of the sum is fixed.
template <typename T>
void direct_grad_input_kernel(const ConvShape& p, const T* gy, const T* w, T* gx) {
  const int64_t Cg = p.channels_per_group(), Kg = p.filters_per_group();
  at::parallel_for(0, p.N * p.C, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t n = nc / p.C, c = nc % p.C, g = c / Cg, cg = c % Cg;
      T* out = gx + nc * p.H * p.W;
      std::fill_n(out, p.H * p.W, T(0));
      for (int64_t k = g * Kg; k < (g + 1) * Kg; ++k) {
        const T* gyk = gy + (n * p.K + k) * p.Ho * p.Wo;
        for (int64_t r = 0; r < p.R; ++r) {
          for (int64_t s = 0; s < p.S; ++s) {
            const T wv = w[((k * Cg + cg) * p.R + r) * p.S + s];
            const int64_t col_offset = s * p.dil_w - p.pad_w;
            const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
            if (cols.lo >= cols.hi) continue;
            for (int64_t oy = 0; oy < p.Ho; ++oy) {
              const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
              if (iy < 0 || iy >= p.H) continue;
              T* orow = out + iy * p.W + col_offset + cols.lo * p.stride_w;  // the pixel of ox = cols.lo
              const T* grow = gyk + oy * p.Wo + cols.lo;
              const int64_t count = cols.hi - cols.lo;
              if (p.stride_w == 1) {
                for (int64_t i = 0; i < count; ++i) orow[i] += wv * grow[i];
              } else {
                for (int64_t i = 0; i < count; ++i) orow[i * p.stride_w] += wv * grow[i];
              }
            }
          }
        }
      }
    }
  });
}

// grad_weight reduces over N x Ho x Wo for every (k, c, r, s), in kLanes partial sums along each
// row (independent adds the compiler vectorizes at stride 1, where one running sum would wait on
// its own add every element), added in a fixed order at the end.
constexpr int kLanes = 8;

template <typename T>
void direct_grad_weight_kernel(const ConvShape& p, const T* gy, const T* x, T* gw) {
  const int64_t Cg = p.channels_per_group(), Kg = p.filters_per_group();
  at::parallel_for(0, p.K * Cg, 1, [&](int64_t begin, int64_t end) {
    for (int64_t kc = begin; kc < end; ++kc) {
      const int64_t k = kc / Cg, cg = kc % Cg, c = (k / Kg) * Cg + cg;
      for (int64_t r = 0; r < p.R; ++r) {
        for (int64_t s = 0; s < p.S; ++s) {
          const int64_t col_offset = s * p.dil_w - p.pad_w;
          const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
          T part[kLanes] = {};
          const int64_t count = std::max<int64_t>(cols.hi - cols.lo, 0), whole = count / kLanes * kLanes;
          const int64_t sw = p.stride_w;
          for (int64_t n = 0; n < p.N && count > 0; ++n) {
            for (int64_t oy = 0; oy < p.Ho; ++oy) {
              const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
              if (iy < 0 || iy >= p.H) continue;
              const T* g = gy + ((n * p.K + k) * p.Ho + oy) * p.Wo + cols.lo;
              const T* xrow = x + ((n * p.C + c) * p.H + iy) * p.W + col_offset + cols.lo * sw;  // ox = cols.lo
              int64_t i = 0;
              if (sw == 1) {
                for (; i < whole; i += kLanes)
                  for (int j = 0; j < kLanes; ++j) part[j] += g[i + j] * xrow[i + j];
              } else {
                for (; i < whole; i += kLanes)
                  for (int j = 0; j < kLanes; ++j) part[j] += g[i + j] * xrow[(i + j) * sw];
              }
              for (int j = 0; i < count; ++i, ++j) part[j] += g[i] * xrow[i * sw];
            }
          }
          for (int width = kLanes / 2; width > 0; width /= 2)
            for (int j = 0; j < width; ++j) part[j] += part[j + width];
          gw[(kc * p.R + r) * p.S + s] = part[0];
        }
      }
    }
  });
}

// A depthwise weight re-laid taps by channels (K x K x C), as the kernels along the channels read it:
// kept where the weight cache serves the weight (frozen weights, inference mode).
at::Tensor depthwise_taps_by_channels(const at::Tensor& weight, const ConvShape& p) {
  return cached_weight_transform(weight, "cpu/depthwise_nhwc",
                                 [&] { return weight.reshape({p.K, p.R * p.S}).t().contiguous(); });
}

at::Tensor conv2d_direct_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                             int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_direct", input, weight, bias, stride, padding, dilation, groups);
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  if (depthwise_nhwc_takes(p, input)) {
    const auto x = input.contiguous(at::MemoryFormat::ChannelsLast);
    const auto wt = depthwise_taps_by_channels(weight, p);
    auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options().memory_format(at::MemoryFormat::ChannelsLast));
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_cpu_nhwc", [&] {
      with_depthwise_filter(p, [&](auto k, auto st) {
        auto kernel =
            TORCHCONV_CPU_KERNEL(depthwise_forward_nhwc, scalar_t, decltype(k)::value, decltype(st)::value);
        kernel(p, x.const_data_ptr<scalar_t>(), wt.const_data_ptr<scalar_t>(),
               b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, y.mutable_data_ptr<scalar_t>());
      });
    });
    return y;
  }
  if (grouped_nhwc_takes(p, input)) {
    const auto x = input.contiguous(at::MemoryFormat::ChannelsLast);
    const auto wg = cached_weight_transform(weight, [&] { return "cpu/grouped_nhwc/" + std::to_string(p.groups); },
                                            [&] { return grouped_filters(weight, p); });
    auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options().memory_format(at::MemoryFormat::ChannelsLast));
    grouped_forward_nhwc(p, x, wg, b, y);
    return y;
  }
  auto x = input.contiguous();
  auto w = weight.contiguous();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_cpu", [&] {
    direct_forward_kernel<scalar_t>(p, x.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
                                    b.defined() ? b.const_data_ptr<scalar_t>() : nullptr,
                                    y.mutable_data_ptr<scalar_t>());
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_direct_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  at::Tensor gy_nhwc;  // grad_output in channels_last, for the kernels along the channels (made on first use)
  auto nhwc_grad_output = [&]() -> const at::Tensor& {
    if (!gy_nhwc.defined()) gy_nhwc = grad_output.contiguous(at::MemoryFormat::ChannelsLast);
    return gy_nhwc;
  };
  auto grad_input = [&](const ConvShape& p) {
    if (depthwise_forward_shape(p) && p.stride_h == 1 && p.pad_h < p.R && p.pad_w < p.S) {
      // A stride-1 depthwise layer's grad_input is its forward on grad_output with the filter turned
      // half a turn and the padding's complement: the depthwise forwards above run it.
      // (The turned filter is this call's alone: none of its transforms goes into the weight cache.)
      TransientWeightScope turned_filter(true);
      return conv2d_direct_cpu(grad_output, weight.flip({2, 3}), std::nullopt, stride,
                               {p.R - 1 - p.pad_h, p.S - 1 - p.pad_w}, dilation, groups);
    }
    if (depthwise_nhwc_takes(p, input)) {
      // The other depthwise layers (strided, or padded past the filter) whose forward runs along the
      // channels: their grad_input gathered along the channels too.
      const auto wt = depthwise_taps_by_channels(weight, p);
      auto gx = new_output({p.N, p.C, p.H, p.W}, input.options().memory_format(at::MemoryFormat::ChannelsLast));
      AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_grad_input_cpu_nhwc", [&] {
        with_depthwise_filter(p, [&](auto k, auto st) {
          auto kernel =
              TORCHCONV_CPU_KERNEL(depthwise_grad_input_nhwc, scalar_t, decltype(k)::value, decltype(st)::value);
          kernel(p, nhwc_grad_output().const_data_ptr<scalar_t>(), wt.const_data_ptr<scalar_t>(),
                 gx.mutable_data_ptr<scalar_t>());
        });
      });
      return gx;
    }
    const int64_t span_h = p.dil_h * (p.R - 1), span_w = p.dil_w * (p.S - 1);
    if (grouped_nhwc_takes(p, input) && p.stride_h == 1 && p.stride_w == 1 && p.pad_h <= span_h && p.pad_w <= span_w) {
      // So is a stride-1 grouped layer's, each group's filters turned half a turn and its channels and
      // filters swapped (C x Kg x R x S): the grouped forward along the channels runs it, on the
      // channels_last grad_output that grad_weight reads too.
      const auto turned = weight.reshape({p.groups, p.filters_per_group(), p.channels_per_group(), p.R, p.S})
                              .transpose(1, 2)
                              .flip({3, 4})
                              .reshape({p.C, p.filters_per_group(), p.R, p.S});
      TransientWeightScope turned_filters(true);
      return conv2d_direct_cpu(nhwc_grad_output(), turned, std::nullopt, stride,
                               {span_h - p.pad_h, span_w - p.pad_w}, dilation, groups);
    }
    if (grouped_nhwc_takes(p, input)) {
      // The other grouped layers the forward takes along the channels (strided, or padded past the
      // filter): each input pixel gathers the outputs its taps reach, a vector of its group's channels.
      const auto wt =
          cached_weight_transform(weight, [&] { return "cpu/grouped_nhwc_grad_input/" + std::to_string(p.groups); },
                                  [&] { return grouped_grad_input_filters(weight, p); });
      auto gx = new_output({p.N, p.C, p.H, p.W}, input.options().memory_format(at::MemoryFormat::ChannelsLast));
      grouped_grad_input_nhwc(p, nhwc_grad_output(), wt, gx);
      return gx;
    }
    auto gy = grad_output.contiguous();
    auto gx = new_output({p.N, p.C, p.H, p.W}, input.options());
    auto w = weight.contiguous();
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_grad_input_cpu", [&] {
      direct_grad_input_kernel<scalar_t>(p, gy.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
                                         gx.mutable_data_ptr<scalar_t>());
    });
    return gx;
  };
  auto grad_weight = [&](const ConvShape& p) {
    if (depthwise_grad_weight_nhwc_takes(p, input)) {
      const auto x = input.contiguous(at::MemoryFormat::ChannelsLast);
      const auto& gy = nhwc_grad_output();
      auto gw = new_output(weight.sizes(), weight.options());
      AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_grad_weight_cpu_nhwc", [&] {
        with_depthwise_filter(p, [&](auto k, auto st) {
          auto kernel =
              TORCHCONV_CPU_KERNEL(depthwise_grad_weight_nhwc, scalar_t, decltype(k)::value, decltype(st)::value);
          kernel(p, gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), gw.mutable_data_ptr<scalar_t>());
        });
      });
      return gw;
    }
    if (grouped_nhwc_takes(p, input)) {
      auto gw = new_output(weight.sizes(), weight.options());
      grouped_grad_weight_nhwc(p, nhwc_grad_output(), input.contiguous(at::MemoryFormat::ChannelsLast), gw);
      return gw;
    }
    auto gy = grad_output.contiguous();
    auto gw = new_output(weight.sizes(), weight.options());
    auto x = input.contiguous();
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_direct_grad_weight_cpu", [&] {
      direct_grad_weight_kernel<scalar_t>(p, gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                                          gw.mutable_data_ptr<scalar_t>());
    });
    return gw;
  };
  return conv2d_backward("conv2d_direct_backward", kDirect, grad_output, input, weight, stride, padding, dilation,
                         groups, output_mask, grad_input, grad_weight);
}

}  // namespace

namespace {

// The CPU kernels index with 64-bit offsets and take every shape PyTorch's conv2d takes.
std::string can_implement(const ConvProblem&) { return ""; }

[[maybe_unused]] const bool kRegistered = register_plans(kDirect, c10::DeviceType::CPU, {&can_implement, {}});

}  // namespace

TORCH_LIBRARY_IMPL(torchconv, CPU, m) {
  m.impl("conv2d_direct", &any_precision_forward<kDirectOp, &conv2d_direct_cpu>);
  m.impl("conv2d_direct_backward", &any_precision_backward<kDirectBackwardOp, &conv2d_direct_backward_cpu>);
}

}  // namespace torchconv
