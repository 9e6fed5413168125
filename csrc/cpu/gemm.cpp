// Unrolled GEMM (seed 002) on the CPU: im2col of a chunk of output columns into a workspace
// bounded by the workspace limit, then one GEMM per group (matmul.h). Columns are the flattened
// (n, oy, ox) output positions, so a chunk may be smaller than one image. A 1x1, stride-1,
// unpadded convolution needs no unroll: the input already is the matrix.
#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../backward.h"
#include "../conv_shape.h"
#include "../plans.h"
#include "../weight_cache.h"
#include "../workspace.h"
#include "gemm.h"
#include "matmul.h"
#include "../precision.h"

namespace torchconv {
namespace {

bool is_pointwise(const ConvShape& p) {
  return p.R == 1 && p.S == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
}

// Unrolled-matrix row (c, r, s) of group g, column j <-> output position p0 + j, visited an output
// line (n, oy) at a time: fn(j, ox0, ox1, lo, hi, src) for the chunk's columns j .. j + (ox1 - ox0),
// positions ox0 .. ox1 of the line, whose inputs lie at src + (ox - lo) * stride_w for ox in
// [lo, hi) and are padding elsewhere (lo = hi where the whole line reads padding).
// A line's bounds are found once, so the inner loops are plain copies (stride 1) or strided gathers.
template <typename Fn>
void for_each_unrolled_line(const ConvShape& p, int64_t g, int64_t row, int64_t p0, int64_t ncols, Fn&& fn) {
  const int64_t s = row % p.S, r = (row / p.S) % p.R, c = row / (p.R * p.S);
  const int64_t plane = p.Ho * p.Wo;
  const int64_t offset_w = s * p.dil_w - p.pad_w;
  const OutputRange inside_w = valid_output_range(p.Wo, p.W, offset_w, p.stride_w);
  for (int64_t q = p0; q < p0 + ncols;) {
    const int64_t n = q / plane, oy = (q % plane) / p.Wo, ox0 = q % p.Wo;
    const int64_t ox1 = std::min(p.Wo, ox0 + (p0 + ncols - q));
    const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
    const bool inside_h = iy >= 0 && iy < p.H;
    const int64_t lo = inside_h ? std::clamp(inside_w.lo, ox0, ox1) : ox0;
    const int64_t hi = inside_h ? std::clamp(inside_w.hi, lo, ox1) : ox0;
    const int64_t src = lo < hi ? ((n * p.C + g * p.channels_per_group() + c) * p.H + iy) * p.W + offset_w +
                                      lo * p.stride_w
                                : 0;
    fn(q - p0, ox0, ox1, lo, hi, src);
    q += ox1 - ox0;
  }
}

template <typename T>
void im2col(const ConvShape& p, int64_t g, int64_t p0, int64_t ncols, const T* x, T* col) {
  const int64_t rows = p.channels_per_group() * p.R * p.S;
  const int64_t sw = p.stride_w;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for_each_unrolled_line(p, g, row, p0, ncols,
                             [&](int64_t j, int64_t ox0, int64_t ox1, int64_t lo, int64_t hi, int64_t src) {
        T* out = col + row * ncols + j;  // the column of ox0
        std::fill(out, out + (lo - ox0), T(0));
        T* inside = out + (lo - ox0);
        const T* in = x + src;
        if (sw == 1) {
          std::copy(in, in + (hi - lo), inside);
        } else {
          for (int64_t i = 0; i < hi - lo; ++i) inside[i] = in[i * sw];
        }
        std::fill(out + (hi - ox0), out + (ox1 - ox0), T(0));
      });
    }
  });
}

// Adjoint of im2col: adds every unrolled entry back into the input pixel it came from. Rows of one
// input channel are handled by one task, so no two tasks write the same pixel.
template <typename T>
void col2im_add(const ConvShape& p, int64_t g, int64_t p0, int64_t ncols, const T* col, T* gx) {
  const int64_t taps = p.R * p.S;
  const int64_t sw = p.stride_w;
  at::parallel_for(0, p.channels_per_group(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c)
      for (int64_t row = c * taps; row < (c + 1) * taps; ++row) {
        for_each_unrolled_line(p, g, row, p0, ncols,
                               [&](int64_t j, int64_t ox0, int64_t, int64_t lo, int64_t hi, int64_t src) {
          const T* in = col + row * ncols + j + (lo - ox0);
          T* out = gx + src;
          for (int64_t i = 0; i < hi - lo; ++i) out[i * sw] += in[i];
        });
      }
  });
}

// Calls fn(n, q0, len, j0) for each image n overlapping output columns [p0, p0 + ncols): its
// positions q0 .. q0 + len within the image are columns j0 .. j0 + len of the chunk.
template <typename Fn>
void for_each_image_segment(const ConvShape& p, int64_t p0, int64_t ncols, Fn&& fn) {
  const int64_t plane = p.Ho * p.Wo;
  for (int64_t q = p0; q < p0 + ncols;) {
    const int64_t n = q / plane, q0 = q % plane, len = std::min(plane - q0, p0 + ncols - q);
    fn(n, q0, len, q - p0);
    q += len;
  }
}

// Output-side matrices of group g, one an image: N x K_g x (Ho Wo), views of an N x K x Ho x Wo tensor.
at::Tensor output_blocks(const at::Tensor& t, const ConvShape& p, int64_t g) {
  const int64_t Kg = p.filters_per_group();
  return t.view({p.N, p.K, p.Ho * p.Wo}).narrow(1, g * Kg, Kg);
}

// Output-side matrix of group g for a column chunk: K_g x len of image n from position q0.
at::Tensor output_block(const at::Tensor& t, const ConvShape& p, int64_t g, int64_t n, int64_t q0, int64_t len) {
  return output_blocks(t, p, g).select(0, n).narrow(1, q0, len);
}

// Input-side matrices of group g for a pointwise convolution: N x C_g x (H W).
at::Tensor input_blocks(const at::Tensor& t, const ConvShape& p, int64_t g) {
  const int64_t Cg = p.channels_per_group();
  return t.view({p.N, p.C, p.H * p.W}).narrow(1, g * Cg, Cg);
}

// A matrix as the operand of every image's product (batch stride 0).
at::Tensor for_each_image(const at::Tensor& m, const ConvShape& p) {
  return m.unsqueeze(0).expand({p.N, m.size(0), m.size(1)});
}

at::Tensor weight_matrix(const at::Tensor& w, const ConvShape& p, int64_t g) {
  return w.view({p.groups, p.filters_per_group(), p.channels_per_group() * p.R * p.S}).select(0, g);
}

// Output columns of a call past which its products would pack the filters' rows more than once (an
// image each, or a panel of columns each): about the product's panel.
constexpr int64_t kPackOnceColumns = 256;

// The filters of every group as the products' left operand (weight_matrix, or its transpose for
// grad_input), packed once for all of a call's products (pack_matmul_rows; a group's serves every
// product of it). Kept in the weight cache where it serves the weight (frozen, inference mode);
// otherwise packed where the products would pack them more than once; undefined where not.
at::Tensor packed_filters(const at::Tensor& weight, const at::Tensor& w, const ConvShape& p, bool transposed) {
  const auto pack = [&] {
    const at::Tensor m = w.view({p.groups, p.filters_per_group(), p.channels_per_group() * p.R * p.S});
    return pack_matmul_rows(transposed ? m.transpose(1, 2) : m);
  };
  if (weight_transform_is_cached(weight)) {
    return cached_weight_transform(weight, [&] {
      return std::string(transposed ? "cpu_gemm_rows_t/" : "cpu_gemm_rows/") + std::to_string(p.groups);
    }, pack);
  }
  return p.N * p.Ho * p.Wo > kPackOnceColumns ? pack() : at::Tensor();
}

// c = the group's filters (or their transpose) times b: from `packed` where defined.
void filters_product(at::Tensor& c, const at::Tensor& packed, const at::Tensor& a, const at::Tensor& b, int64_t g) {
  if (packed.defined()) return matmul_packed_into(c, packed.narrow(0, g, 1), b, false);
  matmul_into(c, a, b, false);
}

// The column chunks of a call: how many columns a chunk unrolls (within the workspace limit and
// kCpuChunkCacheBytes, where the GEMM reads the unrolled matrix from cache, at least kMinChunkColumns
// of the latter), and one buffer, allocated at the first chunk for the largest, from which every
// chunk's unrolled matrix (C/groups*R*S rows x ncols) is carved: no allocation per chunk.
constexpr int64_t kMinChunkColumns = 256;

struct ColumnChunks {
  int64_t rows, total, size;
  at::TensorOptions options;
  at::Tensor buffer;

  ColumnChunks(const ConvShape& p, const at::TensorOptions& opts)
      : rows(p.channels_per_group() * p.R * p.S), total(p.N * p.Ho * p.Wo), options(opts) {
    const int64_t bytes_per_column = rows * int64_t(opts.dtype().itemsize());
    size = std::min(columns_per_chunk(total, bytes_per_column),
                    std::max(kMinChunkColumns, kCpuChunkCacheBytes / bytes_per_column));
  }

  at::Tensor columns(int64_t ncols) {
    if (!buffer.defined()) buffer = new_workspace({rows * std::min(size, total)}, options);
    return buffer.narrow(0, 0, rows * ncols).view({rows, ncols});
  }
};

at::Tensor conv2d_gemm_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_gemm", input, weight, bias, stride, padding, dilation, groups);
  auto x = input.contiguous();
  auto w = weight.contiguous();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  ColumnChunks chunks(p, input.options());
  const at::Tensor packed = packed_filters(weight, w, p, false);
  for (int64_t g = 0; g < p.groups; ++g) {
    const at::Tensor wg = weight_matrix(w, p, g);
    if (is_pointwise(p)) {
      at::Tensor out = output_blocks(y, p, g);
      filters_product(out, packed, for_each_image(wg, p), input_blocks(x, p, g), g);
      continue;
    }
    for (int64_t p0 = 0; p0 < chunks.total; p0 += chunks.size) {
      const int64_t ncols = std::min(chunks.size, chunks.total - p0);
      const at::Tensor col = chunks.columns(ncols);
      AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_gemm_cpu_im2col", [&] {
        im2col<scalar_t>(p, g, p0, ncols, x.const_data_ptr<scalar_t>(), col.mutable_data_ptr<scalar_t>());
      });
      // One GEMM per image the chunk touches, written in place: an image's K_g x len block of the
      // output is a matrix of row stride Ho * Wo, which the product takes as it is (no result copy).
      for_each_image_segment(p, p0, ncols, [&](int64_t n, int64_t q0, int64_t len, int64_t j0) {
        at::Tensor out = output_block(y, p, g, n, q0, len);
        filters_product(out, packed, wg, col.narrow(1, j0, len), g);
      });
    }
  }
  if (bias.has_value()) y.add_(bias->view({1, p.K, 1, 1}));
  return y;
}

}  // namespace

at::Tensor gemm_grad_weight_cpu(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& input) {
  auto x = input.contiguous();
  auto gy = grad_output.contiguous();
  auto gw = at::zeros({p.K, p.channels_per_group(), p.R, p.S}, input.options());
  ColumnChunks chunks(p, input.options());
  for (int64_t g = 0; g < p.groups; ++g) {
    at::Tensor gw_g = weight_matrix(gw, p, g);
    if (is_pointwise(p)) {
      for (int64_t n = 0; n < p.N; ++n)
        matmul_into(gw_g, output_blocks(gy, p, g).select(0, n), input_blocks(x, p, g).select(0, n).t(), true);
      continue;
    }
    for (int64_t p0 = 0; p0 < chunks.total; p0 += chunks.size) {
      const int64_t ncols = std::min(chunks.size, chunks.total - p0);
      const at::Tensor col = chunks.columns(ncols);
      AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "gemm_grad_weight_cpu", [&] {
        im2col<scalar_t>(p, g, p0, ncols, x.const_data_ptr<scalar_t>(), col.mutable_data_ptr<scalar_t>());
      });
      for_each_image_segment(p, p0, ncols, [&](int64_t n, int64_t q0, int64_t len, int64_t j0) {
        matmul_into(gw_g, output_block(gy, p, g, n, q0, len), col.narrow(1, j0, len).t(), true);
      });
    }
  }
  return gw;
}

namespace {

at::Tensor gemm_grad_input_cpu(const ConvShape& p, const at::Tensor& grad_output, const at::Tensor& weight) {
  auto gy = grad_output.contiguous();
  auto w = weight.contiguous();
  // A pointwise layer's products write every element of grad_input; col2im adds into it otherwise.
  auto gx = is_pointwise(p) ? new_output({p.N, p.C, p.H, p.W}, grad_output.options())
                            : at::zeros({p.N, p.C, p.H, p.W}, grad_output.options());
  ColumnChunks chunks(p, gy.options());
  const at::Tensor packed = packed_filters(weight, w, p, true);
  for (int64_t g = 0; g < p.groups; ++g) {
    const at::Tensor wg = weight_matrix(w, p, g);
    if (is_pointwise(p)) {
      at::Tensor out = input_blocks(gx, p, g);
      filters_product(out, packed, for_each_image(wg.t(), p), output_blocks(gy, p, g), g);
      continue;
    }
    for (int64_t p0 = 0; p0 < chunks.total; p0 += chunks.size) {
      const int64_t ncols = std::min(chunks.size, chunks.total - p0);
      const at::Tensor col = chunks.columns(ncols);
      for_each_image_segment(p, p0, ncols, [&](int64_t n, int64_t q0, int64_t len, int64_t j0) {
        at::Tensor cols = col.narrow(1, j0, len);
        filters_product(cols, packed, wg.t(), output_block(gy, p, g, n, q0, len), g);
      });
      AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "gemm_grad_input_cpu", [&] {
        col2im_add<scalar_t>(p, g, p0, ncols, col.const_data_ptr<scalar_t>(), gx.mutable_data_ptr<scalar_t>());
      });
    }
  }
  return gx;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_gemm_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  return conv2d_backward(
      "conv2d_gemm_backward", kGemm, grad_output, input, weight, stride, padding, dilation, groups, output_mask,
      [&](const ConvShape& p) { return gemm_grad_input_cpu(p, grad_output, weight); },
      [&](const ConvShape& p) { return gemm_grad_weight_cpu(p, grad_output, input); });
}

}  // namespace

namespace {

// The CPU kernels index with 64-bit offsets and take every shape PyTorch's conv2d takes.
std::string can_implement(const ConvProblem&) { return ""; }

[[maybe_unused]] const bool kRegistered = register_plans(kGemm, c10::DeviceType::CPU, {&can_implement, {}});

}  // namespace

TORCH_LIBRARY_IMPL(torchconv, CPU, m) {
  m.impl("conv2d_gemm", &any_precision_forward<kGemmOp, &conv2d_gemm_cpu>);
  m.impl("conv2d_gemm_backward", &any_precision_backward<kGemmBackwardOp, &conv2d_gemm_backward_cpu>);
}

}  // namespace torchconv
