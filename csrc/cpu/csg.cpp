// C Split Globally (seed 001) on the CPU. The reduction over input channels is split into chunks
// computed independently; each chunk's partial sums are then added into a zeroed output. On the GPU
// the adds are global atomics; here they are an explicit, fixed-order reduction over the chunks.
// Inside a chunk the loop order is the seed's: one filter value at a time (filter re-arranged
// C, R, S, K so consecutive output channels read consecutive filter values) applied to a tile of
// outputs over H and W.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../backward.h"
#include "../conv_shape.h"
#include "../plans.h"
#include "../precision.h"

namespace torchconv {
namespace {

// How many chunks to split a reduction of `length` into: enough to exercise the split on small
// problems, bounded so the partial buffers stay a small multiple of the output.
int64_t split_count(int64_t length) { return std::max<int64_t>(1, std::min<int64_t>(length, 4)); }

struct Chunk {
  int64_t begin, end;
};
Chunk chunk_of(int64_t length, int64_t splits, int64_t i) {
  const int64_t per = (length + splits - 1) / splits;
  return {std::min(length, i * per), std::min(length, (i + 1) * per)};
}

// Sums partial[s] over s into out (plus bias per channel when given), in split order.
template <typename T>
void reduce_partials(const T* partial, int64_t splits, int64_t numel, int64_t plane, int64_t channels,
                     const T* bias, T* out) {
  at::parallel_for(0, numel, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T v = bias ? bias[(i / plane) % channels] : T(0);
      for (int64_t s = 0; s < splits; ++s) v += partial[s * numel + i];
      out[i] = v;
    }
  });
}

// Forward: chunk `split` of the input channels of group g, image n, into partial[split].
template <typename T>
void csg_forward_kernel(const ConvShape& p, int64_t splits, const T* x, const T* w_crsk, T* partial) {
  const int64_t Cg = p.channels_per_group(), Kg = p.filters_per_group();
  const int64_t out_numel = p.N * p.K * p.Ho * p.Wo;
  at::parallel_for(0, splits * p.N * p.groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t g = task % p.groups, n = (task / p.groups) % p.N, split = task / (p.groups * p.N);
      const Chunk cs = chunk_of(Cg, splits, split);
      T* out = partial + split * out_numel + (n * p.K + g * Kg) * p.Ho * p.Wo;
      std::fill_n(out, Kg * p.Ho * p.Wo, T(0));
      for (int64_t c = cs.begin; c < cs.end; ++c) {
        const T* xc = x + (n * p.C + g * Cg + c) * p.H * p.W;
        for (int64_t r = 0; r < p.R; ++r) {
          for (int64_t s = 0; s < p.S; ++s) {
            const T* wv = w_crsk + (((g * Cg + c) * p.R + r) * p.S + s) * Kg;
            const int64_t col_offset = s * p.dil_w - p.pad_w;
            const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
            for (int64_t k = 0; k < Kg; ++k) {
              const T f = wv[k];
              T* ok = out + k * p.Ho * p.Wo;
              for (int64_t oy = 0; oy < p.Ho; ++oy) {
                const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
                if (iy < 0 || iy >= p.H) continue;
                const T* xrow = xc + iy * p.W + col_offset;
                T* orow = ok + oy * p.Wo;
                for (int64_t ox = cols.lo; ox < cols.hi; ++ox) orow[ox] += f * xrow[ox * p.stride_w];
              }
            }
          }
        }
      }
    }
  });
}

// grad_input: the reduction runs over output channels, split into chunks. Each output gradient
// scatters through one filter value into the input pixels its window read.
template <typename T>
void csg_grad_input_kernel(const ConvShape& p, int64_t splits, const T* gy, const T* w, T* partial) {
  const int64_t Cg = p.channels_per_group(), Kg = p.filters_per_group();
  const int64_t in_numel = p.N * p.C * p.H * p.W;
  at::parallel_for(0, splits * p.N * p.groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t g = task % p.groups, n = (task / p.groups) % p.N, split = task / (p.groups * p.N);
      const Chunk ks = chunk_of(Kg, splits, split);
      T* gx = partial + split * in_numel + (n * p.C + g * Cg) * p.H * p.W;
      std::fill_n(gx, Cg * p.H * p.W, T(0));
      for (int64_t kg = ks.begin; kg < ks.end; ++kg) {
        const int64_t k = g * Kg + kg;
        const T* g_k = gy + (n * p.K + k) * p.Ho * p.Wo;
        for (int64_t c = 0; c < Cg; ++c) {
          T* gx_c = gx + c * p.H * p.W;
          for (int64_t r = 0; r < p.R; ++r) {
            for (int64_t s = 0; s < p.S; ++s) {
              const T f = w[((k * Cg + c) * p.R + r) * p.S + s];
              const int64_t col_offset = s * p.dil_w - p.pad_w;
              const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
              for (int64_t oy = 0; oy < p.Ho; ++oy) {
                const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
                if (iy < 0 || iy >= p.H) continue;
                T* row = gx_c + iy * p.W + col_offset;
                const T* grow = g_k + oy * p.Wo;
                for (int64_t ox = cols.lo; ox < cols.hi; ++ox) row[ox * p.stride_w] += f * grow[ox];
              }
            }
          }
        }
      }
    }
  });
}

// grad_weight: the reduction over N x Ho x Wo is split over images.
template <typename T>
void csg_grad_weight_kernel(const ConvShape& p, int64_t splits, const T* gy, const T* x, T* partial) {
  const int64_t Cg = p.channels_per_group(), Kg = p.filters_per_group();
  const int64_t w_numel = p.K * Cg * p.R * p.S;
  at::parallel_for(0, splits * p.K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t k = task % p.K, split = task / p.K, g = k / Kg;
      const Chunk ns = chunk_of(p.N, splits, split);
      T* gw = partial + split * w_numel + k * Cg * p.R * p.S;
      for (int64_t c = 0; c < Cg; ++c) {
        for (int64_t r = 0; r < p.R; ++r) {
          for (int64_t s = 0; s < p.S; ++s) {
            const int64_t col_offset = s * p.dil_w - p.pad_w;
            const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
            T sum = 0;
            for (int64_t n = ns.begin; n < ns.end; ++n) {
              const T* g_k = gy + (n * p.K + k) * p.Ho * p.Wo;
              const T* xc = x + (n * p.C + g * Cg + c) * p.H * p.W;
              for (int64_t oy = 0; oy < p.Ho; ++oy) {
                const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
                if (iy < 0 || iy >= p.H) continue;
                const T* xrow = xc + iy * p.W + col_offset;
                const T* grow = g_k + oy * p.Wo;
                for (int64_t ox = cols.lo; ox < cols.hi; ++ox) sum += grow[ox] * xrow[ox * p.stride_w];
              }
            }
            gw[(c * p.R + r) * p.S + s] = sum;
          }
        }
      }
    }
  });
}

at::Tensor conv2d_csg_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_csg", input, weight, bias, stride, padding, dilation, groups);
  auto x = input.contiguous();
  // K x Cg x R x S  ->  (G x Cg) x R x S x Kg: a filter value and its neighbours along K are adjacent.
  auto w_crsk = weight.view({p.groups, p.filters_per_group(), p.channels_per_group(), p.R, p.S})
                    .permute({0, 2, 3, 4, 1})
                    .contiguous();
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  const int64_t splits = split_count(p.channels_per_group());
  auto partial = new_workspace({splits, p.N, p.K, p.Ho, p.Wo}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_csg_cpu", [&] {
    csg_forward_kernel<scalar_t>(p, splits, x.const_data_ptr<scalar_t>(), w_crsk.const_data_ptr<scalar_t>(),
                                 partial.mutable_data_ptr<scalar_t>());
    reduce_partials<scalar_t>(partial.const_data_ptr<scalar_t>(), splits, y.numel(), p.Ho * p.Wo, p.K,
                              b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, y.mutable_data_ptr<scalar_t>());
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_csg_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  auto gy = grad_output.contiguous();
  auto grad_input = [&](const ConvShape& p) {
    auto w = weight.contiguous();
    const int64_t splits = split_count(p.filters_per_group());
    auto partial = new_workspace({splits, p.N, p.C, p.H, p.W}, input.options());
    auto gx = new_output({p.N, p.C, p.H, p.W}, input.options());
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_csg_grad_input_cpu", [&] {
      csg_grad_input_kernel<scalar_t>(p, splits, gy.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
                                      partial.mutable_data_ptr<scalar_t>());
      reduce_partials<scalar_t>(partial.const_data_ptr<scalar_t>(), splits, gx.numel(), 1, 1, nullptr,
                                gx.mutable_data_ptr<scalar_t>());
    });
    return gx;
  };
  auto grad_weight = [&](const ConvShape& p) {
    auto x = input.contiguous();
    const int64_t splits = split_count(p.N);
    auto partial = new_workspace({splits, p.K, p.channels_per_group(), p.R, p.S}, input.options());
    auto gw = new_output(weight.sizes(), weight.options());
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_csg_grad_weight_cpu", [&] {
      csg_grad_weight_kernel<scalar_t>(p, splits, gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                                       partial.mutable_data_ptr<scalar_t>());
      reduce_partials<scalar_t>(partial.const_data_ptr<scalar_t>(), splits, gw.numel(), 1, 1, nullptr,
                                gw.mutable_data_ptr<scalar_t>());
    });
    return gw;
  };
  return conv2d_backward("conv2d_csg_backward", kCsg, grad_output, input, weight, stride, padding, dilation, groups,
                         output_mask, grad_input, grad_weight);
}

}  // namespace

namespace {

// The CPU kernels index with 64-bit offsets and take every shape PyTorch's conv2d takes.
std::string can_implement(const ConvProblem&) { return ""; }

[[maybe_unused]] const bool kRegistered = register_plans(kCsg, c10::DeviceType::CPU, {&can_implement, {}});

}  // namespace

TORCH_LIBRARY_IMPL(torchconv, CPU, m) {
  m.impl("conv2d_csg", &any_precision_forward<kCsgOp, &conv2d_csg_cpu>);
  m.impl("conv2d_csg_backward", &any_precision_backward<kCsgBackwardOp, &conv2d_csg_backward_cpu>);
}

}  // namespace torchconv
