// Winograd on the CPU, as seed 003: U = G g G^T per filter, V = B^T d B on input tiles overlapping by
// 2, the element-wise stage as one GEMM per point (matmul.h, U packed once), Y = A^T M A per tile,
// with partial tiles at the right and bottom edges. Tiles are processed in chunks whose V and M fit
// the workspace limit. F(4x4, 3x3) (6x6 tiles, 36 points) when the variant is f4x4, and under auto
// for float32 calls of enough tiles (winograd_conv_variant); F(2x2, 3x3) otherwise. Both for the
// forward and grad_input (grad_weight is the GEMM algorithm's).
// The tile lanes pass GCC vector types between inline functions of this file only (internal linkage):
// the ABI note GCC gives for 32-byte vectors in the baseline build concerns calls across files.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <vector>

#include "../backward.h"
#include "../conv_shape.h"
#include "../plans.h"
#include "../variant.h"
#include "../weight_cache.h"
#include "../winograd_transforms.h"
#include "../workspace.h"
#include "gemm.h"
#include "matmul.h"
#include "reused_buffer.h"
#include "../precision.h"

namespace torchconv {
namespace {

// Tiles per task of the transforms; channels per task of the filter transform (its block of a unit's
// rows by these channels for every point stays within a core's L1).
constexpr int64_t kTileRun = 64;
constexpr int64_t kFilterRun = 16;

// A value of kCount neighbouring tiles at once, one a lane, for the transforms (winograd_transforms.h
// templates on the value type): each lane runs the scalar transform's operations in its order, so its
// bits are a tile's own, and a point's values of the neighbours are one vector of V or M.
template <typename T>
struct TileLanes {
  static constexpr int64_t kCount = 32 / sizeof(T);
  typedef T Vec __attribute__((vector_size(kCount * sizeof(T))));
  Vec v;
  TileLanes() = default;
  explicit TileLanes(double c) : v(T(c) - Vec{}) {}  // a broadcast: x - 0 is x for every x
  static TileLanes of(Vec x) {
    TileLanes r;
    r.v = x;
    return r;
  }
  friend TileLanes operator+(TileLanes a, TileLanes b) { return of(a.v + b.v); }
  friend TileLanes operator-(TileLanes a, TileLanes b) { return of(a.v - b.v); }
  friend TileLanes operator*(TileLanes a, TileLanes b) { return of(a.v * b.v); }
  friend TileLanes operator-(TileLanes a) { return of(-a.v); }
};

// Whether tiles [j, j + count) of a chunk are neighbours along one row of tiles of one image.
template <typename Place>
bool tiles_in_a_row(const Place* places, int64_t j, int64_t count, int64_t step) {
  const Place &first = places[j], &last = places[j + count - 1];
  return last.n == first.n && last.iy0 == first.iy0 && last.ix0 == first.ix0 + (count - 1) * step;
}

// 3x3 stride-1 convolution of x (N x Cin x H x W) with w (Kout x Cin/groups x 3 x 3). Padding may
// be negative (grad_input of a convolution padded by more than 2 reads a cropped grad_output), so
// the output extent Ho x Wo is given rather than derived. `cached_filters`, where given, is the
// caller's weight whose U the weight cache keeps (the forward's, where weight_transform_is_cached: a
// frozen weight, or inside inference mode; w is its contiguous view): U is then computed once, not
// every call.
template <typename Tile, typename T>
void winograd_conv(const at::Tensor& x, const at::Tensor& w, const T* bias, int64_t groups, int64_t pad_h,
                   int64_t pad_w, at::Tensor& y, const at::Tensor* cached_filters) {
  constexpr int kPoints = Tile::kPoints, kAlpha = Tile::kAlpha, kOut = Tile::kOutput;
  using Lanes = TileLanes<T>;
  constexpr int64_t kLanes = Lanes::kCount;
  // Which kLanes consecutive tiles of a chunk are transformed together: F(4x4)'s any (its 6x6
  // transforms' arithmetic outweighs moving each tile's values into and out of its lane, and most
  // tiles of planes under 8 tiles wide touch an edge or start a row); F(2x2)'s only neighbours along
  // one row inside the input (its 4x4 transforms are too short to pay for lanes gathered elsewhere).
  constexpr bool kLanesAnywhere = kPoints > 16;
  const int64_t N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Kout = w.size(0), Ho = y.size(2), Wo = y.size(3);
  const int64_t Cg = Cin / groups, Kg = Kout / groups;
  const int64_t th = winograd_tiles_of<Tile>(Ho), tw = winograd_tiles_of<Tile>(Wo), total = N * th * tw;
  const T* xp = x.const_data_ptr<T>();
  T* yp = y.mutable_data_ptr<T>();

  // U: for each group and point, the Kg x Cg matrix of the point's product, written as the product
  // packs it (matmul_packed_index: every chunk of tiles multiplies the same U, so it is packed once,
  // here, rather than by every chunk's product; rows past Kg written zero). A task transforms the
  // filters of one unit of kMatmulRows rows over a run of at most kFilterRun channels into a local
  // block, then copies each point's values, one contiguous run of U, at once: the points' matrices lie
  // a multiple of 4 KB apart for many shapes, so storing every transform's values straight into them
  // would keep as many lines of one L1 set in use as there are points.
  // A U the weight cache does not keep (a trainable weight's, grad_input's) lives for this call only,
  // in a ReusedBuffer; one the cache keeps is a tensor of its own.
  const std::array<int64_t, 4> u_sizes = matmul_packed_sizes(groups * kPoints, Kg, Cg);
  const int64_t units = u_sizes[1];
  auto transform_filters_into = [&](const at::Tensor& U) {
    const T* wp = w.const_data_ptr<T>();
    T* up = U.mutable_data_ptr<T>();
    const int64_t runs = (Cg + kFilterRun - 1) / kFilterRun;
    const int64_t point_step = units * Cg * kMatmulRows;  // from one point's matrix to the next
    at::parallel_for(0, groups * units * runs, 1, [&](int64_t begin, int64_t end) {
      T block[kPoints][kFilterRun * kMatmulRows];
      for (int64_t item = begin; item < end; ++item) {
        const int64_t g = item / (units * runs), unit = item / runs % units, c0 = item % runs * kFilterRun;
        const int64_t len = std::min(kFilterRun, Cg - c0), rows = std::min(kMatmulRows, Kg - unit * kMatmulRows);
        for (int64_t r = 0; r < kMatmulRows; ++r) {
          const T* filter = r < rows ? wp + ((g * Kg + unit * kMatmulRows + r) * Cg + c0) * 9 : nullptr;
          int64_t i = 0;
          // kLanes neighbouring channels of the filter transformed together, a channel a lane.
          for (; r < rows && i + kLanes <= len; i += kLanes) {
            Lanes d[9], u[kPoints];
            for (int t = 0; t < 9; ++t)
              for (int64_t l = 0; l < kLanes; ++l) d[t].v[l] = filter[(i + l) * 9 + t];
            Tile::filter(d, u);
            for (int e = 0; e < kPoints; ++e)
              for (int64_t l = 0; l < kLanes; ++l) block[e][(i + l) * kMatmulRows + r] = u[e].v[l];
          }
          for (; i < len; ++i) {
            T u[kPoints] = {};  // zero past Kg
            if (r < rows) Tile::filter(filter + i * 9, u);
            for (int e = 0; e < kPoints; ++e) block[e][i * kMatmulRows + r] = u[e];
          }
        }
        T* run = up + matmul_packed_index(Kg, Cg, g * kPoints, unit * kMatmulRows, c0);
        for (int e = 0; e < kPoints; ++e) std::copy_n(block[e], len * kMatmulRows, run + e * point_step);
      }
    });
    return U;
  };
  std::optional<ReusedBuffer<T>> call_u;
  at::Tensor U;
  if (cached_filters) {
    // Its layout depends on the groups as well as the tile: one weight may serve layers of different groups.
    U = cached_weight_transform(*cached_filters, [&] {
      return "cpu_winograd_u_packed/" + std::to_string(kOut) + "/" + std::to_string(groups);
    }, [&] { return transform_filters_into(new_workspace(u_sizes, x.options())); });
  } else {
    call_u.emplace(u_sizes, x.options());
    U = transform_filters_into(call_u->tensor());
  }

  // Where each tile of a chunk starts, decoded once per chunk rather than per channel and filter (three
  // 64-bit divisions an item cost more than its transform); counted in the workspace with V and M.
  struct TilePlace {
    int64_t n, iy0, ix0, oy0, ox0;
  };
  const int64_t bytes_per_tile = kPoints * (Cg + Kg) * int64_t(sizeof(T)) + int64_t(sizeof(TilePlace));
  const int64_t chunk = std::min(columns_per_chunk(total, bytes_per_tile),
                                 std::max<int64_t>(kTileRun, kCpuChunkCacheBytes / bytes_per_tile));
  std::vector<TilePlace> places(std::min(chunk, total));
  // V (points x Cg x nt) and M (points x Kg x nt) of every chunk, carved from two buffers sized for
  // the largest: no allocation per chunk.
  const at::Tensor v_buffer = new_workspace({kPoints * Cg * std::min(chunk, total)}, x.options());
  const at::Tensor m_buffer = new_workspace({kPoints * Kg * std::min(chunk, total)}, x.options());
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t0 = 0; t0 < total; t0 += chunk) {
      const int64_t nt = std::min(chunk, total - t0);
      for (int64_t j = 0, n = t0 / (th * tw), ty = (t0 / tw) % th, tx = t0 % tw; j < nt; ++j) {
        places[j] = {n, kOut * ty - pad_h, kOut * tx - pad_w, kOut * ty, kOut * tx};
        if (++tx == tw) {
          tx = 0;
          if (++ty == th) ty = 0, ++n;
        }
      }
      const at::Tensor V = v_buffer.narrow(0, 0, kPoints * Cg * nt).view({kPoints, Cg, nt});
      T* vp = V.mutable_data_ptr<T>();
      // Tasks of a channel (filter) and a run of kTileRun tiles: enough of them for many threads even
      // where a group has few channels.
      const int64_t runs = (nt + kTileRun - 1) / kTileRun;
      at::parallel_for(0, Cg * runs, 1, [&](int64_t begin, int64_t end) {
        // Tile `at`'s input values of channel c, zero outside the input, into lane `lane` of d (a
        // Lanes array) or into d itself (a T array: lane 0).
        auto gather = [&](const TilePlace& at, int64_t c, auto* d, int64_t lane) {
          auto put = [&](int e, T value) {
            if constexpr (std::is_same_v<std::remove_pointer_t<decltype(d)>, T>) d[e] = value;
            else d[e].v[lane] = value;
          };
          const T* plane = xp + (at.n * Cin + g * Cg + c) * H * W;
          if (at.iy0 >= 0 && at.iy0 + kAlpha <= H && at.ix0 >= 0 && at.ix0 + kAlpha <= W) {
            const T* src = plane + at.iy0 * W + at.ix0;  // a tile inside the input: no bounds tests
            for (int i = 0; i < kAlpha; ++i)
              for (int jj = 0; jj < kAlpha; ++jj) put(i * kAlpha + jj, src[i * W + jj]);
            return;
          }
          for (int i = 0; i < kAlpha; ++i) {
            const int64_t iy = at.iy0 + i;
            for (int jj = 0; jj < kAlpha; ++jj) {
              const int64_t ix = at.ix0 + jj;
              put(i * kAlpha + jj, (iy >= 0 && iy < H && ix >= 0 && ix < W) ? plane[iy * W + ix] : T(0));
            }
          }
        };
        for (int64_t item = begin; item < end; ++item) {
          const int64_t c = item / runs, j0 = item % runs * kTileRun;
          const int64_t j_end = std::min(nt, j0 + kTileRun);
          int64_t j = j0;
          while (j < j_end) {
            const TilePlace& at = places[j];
            const bool row_inside = at.iy0 >= 0 && at.iy0 + kAlpha <= H && at.ix0 >= 0 &&
                                    at.ix0 + (kLanes - 1) * kOut + kAlpha <= W;
            if (j + kLanes <= j_end &&
                (kLanesAnywhere || (tiles_in_a_row(places.data(), j, kLanes, kOut) && row_inside))) {
              // kLanes tiles transformed together, a tile a lane; each point's values of them are one
              // vector of V.
              Lanes d[kPoints], v[kPoints];
              for (int64_t t = 0; t < kLanes; ++t) gather(places[j + t], c, d, t);
              Tile::input(d, v);
              for (int e = 0; e < kPoints; ++e) std::memcpy(vp + (e * Cg + c) * nt + j, &v[e].v, sizeof(v[e].v));
              j += kLanes;
              continue;
            }
            T d[kPoints], v[kPoints];
            gather(at, c, d, 0);
            Tile::input(d, v);
            for (int e = 0; e < kPoints; ++e) vp[(e * Cg + c) * nt + j] = v[e];
            ++j;
          }
        }
      });
      // The element-wise stage: one (Kg x Cg) . (Cg x nt) product per point.
      at::Tensor M = m_buffer.narrow(0, 0, kPoints * Kg * nt).view({kPoints, Kg, nt});
      matmul_packed_into(M, U.narrow(0, g * kPoints, kPoints), V, false);
      const T* mp = M.const_data_ptr<T>();
      at::parallel_for(0, Kg * runs, 1, [&](int64_t begin, int64_t end) {
        // Tile `at`'s outputs of filter k plus bias b (out: kOut x kOut values), within the output.
        auto scatter = [&](const TilePlace& at, int64_t k, const T* out, T b) {
          T* plane = yp + (at.n * Kout + k) * Ho * Wo;
          const int rows = int(std::min<int64_t>(kOut, Ho - at.oy0)), cols = int(std::min<int64_t>(kOut, Wo - at.ox0));
          for (int i = 0; i < rows; ++i)
            for (int jj = 0; jj < cols; ++jj) plane[(at.oy0 + i) * Wo + at.ox0 + jj] = out[i * kOut + jj] + b;
        };
        for (int64_t item = begin; item < end; ++item) {
          const int64_t kg = item / runs, j0 = item % runs * kTileRun, k = g * Kg + kg;
          const T b = bias ? bias[k] : T(0);
          const int64_t j_end = std::min(nt, j0 + kTileRun);
          int64_t j = j0;
          while (j < j_end) {
            const TilePlace& at = places[j];
            const bool row_inside = at.oy0 + kOut <= Ho && at.ox0 + kLanes * kOut <= Wo;
            if (j + kLanes <= j_end &&
                (kLanesAnywhere || (tiles_in_a_row(places.data(), j, kLanes, kOut) && row_inside))) {
              // kLanes tiles at once: each point's values loaded as one vector.
              Lanes m[kPoints], out[kOut * kOut];
              for (int e = 0; e < kPoints; ++e) std::memcpy(&m[e].v, mp + (e * Kg + kg) * nt + j, sizeof(m[e].v));
              Tile::output(m, out);
              for (int64_t t = 0; t < kLanes; ++t) {
                T lane[kOut * kOut];
                for (int o = 0; o < kOut * kOut; ++o) lane[o] = out[o].v[t];
                scatter(places[j + t], k, lane, b);
              }
              j += kLanes;
              continue;
            }
            T m[kPoints], out[kOut * kOut];
            for (int e = 0; e < kPoints; ++e) m[e] = mp[(e * Kg + kg) * nt + j];
            Tile::output(m, out);
            scatter(at, k, out, b);
            ++j;
          }
        }
      });
    }
  }
}

// Where the auto variant runs a float32 call on F(4x4, 3x3): from this many F(4x4) tiles (all images).
// Per output it takes 36 / 64 of F(2x2)'s multiplications, but its U holds 36 points against 16:
// on few tiles the point products are bound by reading U (a value of it serves every tile of a
// chunk), and a U transformed in the call (a trainable weight's, grad_input's) costs 36 points'
// transforms, which fewer tiles do not repay. float64 keeps F(2x2), as on CUDA.
constexpr int64_t kF4x4MinTilesCachedFilters = 16;
constexpr int64_t kF4x4MinTiles = 48;

// The tile of the variant: F(4x4, 3x3) for f4x4 and for auto's float32 calls of enough tiles
// (above), F(2x2, 3x3) otherwise.
template <typename T>
void winograd_conv_variant(const at::Tensor& x, const at::Tensor& w, const T* bias, int64_t groups, int64_t pad_h,
                           int64_t pad_w, at::Tensor& y, const at::Tensor* filters) {
  const WinogradVariant variant = winograd_variant();
  const at::Tensor* cached_filters = filters && weight_transform_is_cached(*filters) ? filters : nullptr;
  bool f4x4 = variant == WinogradVariant::kF4x4;
  if (variant == WinogradVariant::kAuto && std::is_same_v<T, float>) {
    const int64_t tiles =
        x.size(0) * winograd_tiles_of<WinogradF4x4>(y.size(2)) * winograd_tiles_of<WinogradF4x4>(y.size(3));
    f4x4 = tiles >= (cached_filters ? kF4x4MinTilesCachedFilters : kF4x4MinTiles);
  }
  if (f4x4) {
    return winograd_conv<WinogradF4x4, T>(x, w, bias, groups, pad_h, pad_w, y, cached_filters);
  }
  winograd_conv<WinogradF2x2, T>(x, w, bias, groups, pad_h, pad_w, y, cached_filters);
}

at::Tensor conv2d_winograd_cpu(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, int64_t groups) {
  const ConvShape p = check_conv2d_forward("conv2d_winograd", input, weight, bias, stride, padding, dilation, groups);
  check_can_implement("conv2d_winograd", kWinograd, make_problem(p, input));
  auto x = input.contiguous();
  auto w = weight.contiguous();
  auto b = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto y = new_output({p.N, p.K, p.Ho, p.Wo}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_winograd_cpu", [&] {
    winograd_conv_variant<scalar_t>(x, w, b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, p.groups, p.pad_h,
                                    p.pad_w, y, &weight);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_winograd_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask) {
  auto grad_input = [&](const ConvShape& p) {
    // grad_input is a 3x3 stride-1 convolution of grad_output with the filters rotated by 180
    // degrees and C / K swapped within each group, padded by 2 - padding.
    const int64_t Kg = p.filters_per_group(), Cg = p.channels_per_group();
    auto w_rot = weight.view({p.groups, Kg, Cg, 3, 3}).transpose(1, 2).flip({3, 4}).reshape({p.C, Kg, 3, 3});
    auto gy = grad_output.contiguous();
    auto gx = new_output({p.N, p.C, p.H, p.W}, input.options());
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv2d_winograd_grad_input_cpu", [&] {
      winograd_conv_variant<scalar_t>(gy, w_rot.contiguous(), nullptr, p.groups, 2 - p.pad_h, 2 - p.pad_w, gx,
                                      nullptr);
    });
    return gx;
  };
  return conv2d_backward("conv2d_winograd_backward", kWinograd, grad_output, input, weight, stride, padding,
                         dilation, groups, output_mask, grad_input,
                         [&](const ConvShape& p) { return gemm_grad_weight_cpu(p, grad_output, input); });
}

}  // namespace

namespace {

// F(2x2,3x3)'s shape is the only limit: the CPU kernels index with 64-bit offsets.
std::string can_implement(const ConvProblem& problem) { return winograd_shape_reason(problem.shape); }

[[maybe_unused]] const bool kRegistered = register_plans(kWinograd, c10::DeviceType::CPU, {&can_implement, {}});

}  // namespace

TORCH_LIBRARY_IMPL(torchconv, CPU, m) {
  m.impl("conv2d_winograd", &any_precision_forward<kWinogradOp, &conv2d_winograd_cpu>);
  m.impl("conv2d_winograd_backward", &any_precision_backward<kWinogradBackwardOp, &conv2d_winograd_backward_cpu>);
}

}  // namespace torchconv
