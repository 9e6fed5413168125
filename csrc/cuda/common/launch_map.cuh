// The affine index map of one launch, written once for every GPU algorithm: the forward convolution
// and each phase of a grad_input are the same kind of launch -- a grid of positions, each reading a
// window of a source tensor through some filter taps and writing one destination pixel -- and differ
// only in the numbers below. The descriptors of the algorithms (DirectArgs, CsgConv, GatherConv,
// WinogradConv) extend this one and add only their own launch state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "../../conv_shape.h"

namespace torchconv {
namespace cuda {

// Position (cy, cx) of a col_H x col_W grid per image reads, through launch tap (i, j) with
// i < R, j < S, source pixel
//     (cy * col_sy + col_oy + i * tap_sy,  cx * col_sx + col_ox + j * tap_sx)
// of an N x src_C x src_H x src_W tensor (zero outside it) times filter tap
//     (tap_r0 + i * tap_dr,  tap_s0 + j * tap_ds)
// and writes destination pixel (cy * out_sy + out_oy, cx * out_sx + out_ox) of an N x out_C x out_H
// x out_W tensor. `transposed`: the reduction runs over the filters and the destination channels are
// the weight's input channels (grad_input), so the weight's K and C/groups swap roles.
struct LaunchMap {
  int N, groups;
  int src_C, src_H, src_W;
  int col_H, col_W;
  int R, S;
  int col_sy, col_sx, col_oy, col_ox;
  int tap_sy, tap_sx;
  int tap_r0, tap_dr, tap_s0, tap_ds;
  int out_C, out_H, out_W;
  int out_sy, out_sx, out_oy, out_ox;
  bool transposed;

  // Channels reduced over per group, and destination channels per group.
  TORCHCONV_HOST_DEVICE int reduced_per_group() const { return src_C / groups; }
  TORCHCONV_HOST_DEVICE int outputs_per_group() const { return out_C / groups; }
  // Filter tap of launch tap i (rows) / j (columns).
  TORCHCONV_HOST_DEVICE int filter_r(int i) const { return tap_r0 + i * tap_dr; }
  TORCHCONV_HOST_DEVICE int filter_s(int j) const { return tap_s0 + j * tap_ds; }
  // Whether the launch writes nothing (a grad_input phase no tap reaches, or with no pixels).
  bool empty() const { return R <= 0 || S <= 0 || col_H <= 0 || col_W <= 0; }
  // Stride 1, dilation 1 and a dense destination: what the fixed-geometry kernels (Winograd) need.
  bool unit() const {
    return col_sy == 1 && col_sx == 1 && tap_sy == 1 && tap_sx == 1 && out_sy == 1 && out_sx == 1 && out_oy == 0 &&
           out_ox == 0;
  }
};

// Which filter taps a launch holds, in its order (launch tap (i, j) is filter tap (tap_r0 + i tap_dr,
// tap_s0 + j tap_ds)): besides the weight, what a filter re-laid for the launch depends on, and so
// part of its cache key. A strided grad_input phase's taps follow from the stride, padding and
// dilation, not from the phase's index alone: one weight used at two paddings has different taps in
// the same phase.
inline std::string launch_taps_key(const LaunchMap& m) {
  return "taps" + std::to_string(m.R) + "x" + std::to_string(m.S) + "@" + std::to_string(m.tap_r0) + "," +
         std::to_string(m.tap_dr) + "," + std::to_string(m.tap_s0) + "," + std::to_string(m.tap_ds);
}

// The forward convolution: input -> output, the filter's taps in order.
inline LaunchMap forward_map(const ConvShape& p) {
  LaunchMap m{};
  m.N = int(p.N), m.groups = int(p.groups);
  m.src_C = int(p.C), m.src_H = int(p.H), m.src_W = int(p.W);
  m.col_H = int(p.Ho), m.col_W = int(p.Wo);
  m.R = int(p.R), m.S = int(p.S);
  m.col_sy = int(p.stride_h), m.col_sx = int(p.stride_w), m.col_oy = -int(p.pad_h), m.col_ox = -int(p.pad_w);
  m.tap_sy = int(p.dil_h), m.tap_sx = int(p.dil_w);
  m.tap_r0 = m.tap_s0 = 0, m.tap_dr = m.tap_ds = 1;
  m.out_C = int(p.K), m.out_H = int(p.Ho), m.out_W = int(p.Wo);
  m.out_sy = m.out_sx = 1, m.out_oy = m.out_ox = 0;
  m.transposed = false;
  return m;
}

// grad_input phase (py, px): the input pixels (py + t * stride_h, px + u * stride_w), gathered from
// grad_output through the taps that reach them (conv_shape.h's PhaseAxis), with the source offset
// falling as the filter tap rises. A stride-1 layer has one phase, (0, 0), over every input pixel
// and every tap. The map is `empty()` when no tap reaches the phase.
inline LaunchMap grad_input_map(const ConvShape& p, int py, int px) {
  const PhaseAxis y = phase_axis(p.H, p.R, p.stride_h, p.pad_h, p.dil_h, py);
  const PhaseAxis x = phase_axis(p.W, p.S, p.stride_w, p.pad_w, p.dil_w, px);
  LaunchMap m{};
  m.N = int(p.N), m.groups = int(p.groups);
  m.src_C = int(p.K), m.src_H = int(p.Ho), m.src_W = int(p.Wo);
  m.col_H = y.count, m.col_W = x.count;
  m.R = y.taps, m.S = x.taps;
  m.col_sy = m.col_sx = 1, m.col_oy = y.d0, m.col_ox = x.d0;
  m.tap_sy = y.step, m.tap_sx = x.step;
  m.tap_r0 = y.r0, m.tap_dr = y.dr, m.tap_s0 = x.r0, m.tap_ds = x.dr;
  m.out_C = int(p.C), m.out_H = int(p.H), m.out_W = int(p.W);
  m.out_sy = int(p.stride_h), m.out_sx = int(p.stride_w), m.out_oy = py, m.out_ox = px;
  m.transposed = true;
  return m;
}

// Whether a grad_input has no term at all (an empty grad_output, or no filters): all of it is zero.
inline bool grad_input_has_no_terms(const ConvShape& p) { return p.Ho == 0 || p.Wo == 0 || p.K == 0; }

// Whether some pixels of a grad_input receive nothing from its phases' launches: a strided phase no
// filter tap reaches (grad_input_map's `empty()` where the phase has pixels), or nothing to gather
// at all (Ho, Wo or K zero). Such a grad_input is zeroed whole, once, before the launches write
// theirs. A phase is empty exactly when its row or its column axis has no tap, so the axes are
// checked apart.
inline bool grad_input_has_unwritten_pixels(const ConvShape& p) {
  if (grad_input_has_no_terms(p)) return true;
  for (int64_t py = 0; py < std::min(p.stride_h, p.H); ++py)
    if (phase_axis(p.H, p.R, p.stride_h, p.pad_h, p.dil_h, int(py)).taps <= 0) return true;
  for (int64_t px = 0; px < std::min(p.stride_w, p.W); ++px)
    if (phase_axis(p.W, p.S, p.stride_w, p.pad_w, p.dil_w, int(px)).taps <= 0) return true;
  return false;
}

// The same launch with its taps numbered backwards (launch tap i becomes R - 1 - i), so that the
// source offset rises with the launch tap: a forward convolution with positive dilation, which is the
// form the direct, CSG and Winograd kernels run (their re-laid filter holds the taps reversed).
inline LaunchMap with_reversed_taps(LaunchMap m) {
  m.col_oy += (m.R - 1) * m.tap_sy, m.col_ox += (m.S - 1) * m.tap_sx;
  m.tap_sy = -m.tap_sy, m.tap_sx = -m.tap_sx;
  m.tap_r0 += (m.R - 1) * m.tap_dr, m.tap_s0 += (m.S - 1) * m.tap_ds;
  m.tap_dr = -m.tap_dr, m.tap_ds = -m.tap_ds;
  return m;
}

// A weight's element strides, K x C/groups x Rw x Sw in any memory layout (a channels_last weight is
// read in place).
struct WeightStrides {
  int64_t k, c, r, s;
  // The element offset of `filter` (counted across groups), `channel`, at tap (i, j).
  TORCHCONV_HOST_DEVICE int64_t offset(int64_t filter, int64_t channel, int i, int j) const {
    return filter * k + channel * c + i * r + j * s;
  }
};

// A 4-d weight tensor's strides in the layout it has (host side: any tensor type with stride(d)).
template <typename Tensor>
inline WeightStrides weight_strides(const Tensor& weight) {
  return {weight.stride(0), weight.stride(1), weight.stride(2), weight.stride(3)};
}

// The strides of a contiguous weight of C/groups = Cg channels and Rw x Sw taps.
TORCHCONV_HOST_DEVICE WeightStrides contiguous_weight_strides(int Cg, int Rw, int Sw) {
  return {int64_t(Cg) * Rw * Sw, int64_t(Rw) * Sw, Sw, 1};
}

// The element offset of the weight behind launch tap (i, j) of reduced channel `red` and destination
// channel `dst` within group g.
TORCHCONV_HOST_DEVICE int64_t weight_offset(const LaunchMap& m, const WeightStrides& w, int64_t g, int red, int dst,
                                            int i, int j) {
  const int k = m.transposed ? red : dst, c = m.transposed ? dst : red;
  const int Kg = m.transposed ? m.reduced_per_group() : m.outputs_per_group();
  return w.offset(g * Kg + k, c, m.filter_r(i), m.filter_s(j));
}

// How far apart two consecutive reduced channels of one tap and destination lie.
TORCHCONV_HOST_DEVICE int64_t reduced_stride(const LaunchMap& m, const WeightStrides& w) {
  return m.transposed ? w.k : w.c;
}

// weight_offset of a contiguous weight K x C/groups x Rw x Sw.
TORCHCONV_HOST_DEVICE int64_t weight_index(const LaunchMap& m, int Rw, int Sw, int64_t g, int red, int dst, int i,
                                           int j) {
  const int Cg = m.transposed ? m.outputs_per_group() : m.reduced_per_group();
  return weight_offset(m, contiguous_weight_strides(Cg, Rw, Sw), g, red, dst, i, j);
}

}  // namespace cuda
}  // namespace torchconv
