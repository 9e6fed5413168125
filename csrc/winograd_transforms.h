// Winograd transforms, shared by the CPU and CUDA kernels, and the shape check. F(2x2, 3x3) (seed 003):
// Y = A^T [ (G g G^T) . (B^T d B) ] A, written out with the shared sub-expressions so each transform is
// additions only (plus the halvings of G). F(4x4, 3x3) (the `f4x4` variant): the same identity on 6x6
// input tiles, its matrices applied by unrolled products whose zero and unit coefficients fold away.
// All arrays are row-major.
#pragma once

#include <c10/util/Exception.h>

#include "conv_shape.h"

namespace torchconv {

// The shapes F(2x2,3x3) computes; anything else is a clear error naming what is off.
// Why F(2x2,3x3) cannot compute this layer, or "" (CPU and CUDA kernels alike).
inline std::string winograd_shape_reason(const ConvShape& p) {
  if (p.R == 3 && p.S == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 && p.dil_w == 1) return "";
  return "Winograd F(2x2,3x3) needs a 3x3 kernel, stride 1 and dilation 1; got kernel " + shape_str({p.R, p.S}) +
         ", stride " + shape_str({p.stride_h, p.stride_w}) + ", dilation " + shape_str({p.dil_h, p.dil_w});
}

constexpr int kWinogradPoints = 16;  // F(2x2)'s alpha^2 element-wise products per tile

// U = G g G^T, G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
template <typename T>
TORCHCONV_HOST_DEVICE void winograd_filter_transform(const T g[9], T u[16]) {
  T t[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    const T a = g[j], b = g[3 + j], c = g[6 + j];
    t[0][j] = a;
    t[1][j] = T(0.5) * (a + b + c);
    t[2][j] = T(0.5) * (a - b + c);
    t[3][j] = c;
  }
  for (int i = 0; i < 4; ++i) {
    const T a = t[i][0], b = t[i][1], c = t[i][2];
    u[i * 4 + 0] = a;
    u[i * 4 + 1] = T(0.5) * (a + b + c);
    u[i * 4 + 2] = T(0.5) * (a - b + c);
    u[i * 4 + 3] = c;
  }
}

// V = B^T d B, B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
template <typename T>
TORCHCONV_HOST_DEVICE void winograd_input_transform(const T d[16], T v[16]) {
  T t[16];  // B^T d
  for (int j = 0; j < 4; ++j) {
    const T d0 = d[j], d1 = d[4 + j], d2 = d[8 + j], d3 = d[12 + j];
    t[j] = d0 - d2;
    t[4 + j] = d1 + d2;
    t[8 + j] = d2 - d1;
    t[12 + j] = d1 - d3;
  }
  for (int i = 0; i < 4; ++i) {
    const T x0 = t[i * 4], x1 = t[i * 4 + 1], x2 = t[i * 4 + 2], x3 = t[i * 4 + 3];
    v[i * 4 + 0] = x0 - x2;
    v[i * 4 + 1] = x1 + x2;
    v[i * 4 + 2] = x2 - x1;
    v[i * 4 + 3] = x1 - x3;
  }
}

// Y = A^T m A, A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], in two steps that a kernel may run apart (a
// warpgroup holding one column of m applies the first): column j of t = A^T m from column j of m
// (m0..m3 down the column), then y = t A from t (2 x 4, row-major). Split or not, the same sums in
// the same order.
template <typename T>
TORCHCONV_HOST_DEVICE void winograd_output_column(T m0, T m1, T m2, T m3, T& t0, T& t1) {
  t0 = m0 + m1 + m2;
  t1 = m1 - m2 - m3;
}
template <typename T>
TORCHCONV_HOST_DEVICE void winograd_output_rows(const T t[8], T y[4]) {
  for (int i = 0; i < 2; ++i) {
    y[i * 2 + 0] = t[i * 4] + t[i * 4 + 1] + t[i * 4 + 2];
    y[i * 2 + 1] = t[i * 4 + 1] - t[i * 4 + 2] - t[i * 4 + 3];
  }
}
template <typename T>
TORCHCONV_HOST_DEVICE void winograd_output_transform(const T m[16], T y[4]) {
  T t[8];  // A^T m
  for (int j = 0; j < 4; ++j) winograd_output_column(m[j], m[4 + j], m[8 + j], m[12 + j], t[j], t[4 + j]);
  winograd_output_rows(t, y);
}

// The adjoints of the output and filter transforms, for grad_weight in the Winograd domain:
// dM = A dY A^T (4x4 from a 2x2 grad_output tile) and dg = G^T dU G (3x3 from 4x4), so that
// dg = sum over tiles of G^T [ (A dY A^T) . (B^T d B) ] G is exactly the filter gradient.
template <typename T>
TORCHCONV_HOST_DEVICE void winograd_output_transform_adjoint(const T dy[4], T dm[16]) {
  T t[4][2];  // A dY
  for (int j = 0; j < 2; ++j) {
    const T a = dy[j], b = dy[2 + j];
    t[0][j] = a;
    t[1][j] = a + b;
    t[2][j] = a - b;
    t[3][j] = -b;
  }
  for (int i = 0; i < 4; ++i) {
    const T a = t[i][0], b = t[i][1];
    dm[i * 4 + 0] = a;
    dm[i * 4 + 1] = a + b;
    dm[i * 4 + 2] = a - b;
    dm[i * 4 + 3] = -b;
  }
}

template <typename T>
TORCHCONV_HOST_DEVICE void winograd_filter_transform_adjoint(const T du[16], T dg[9]) {
  T t[3][4];  // G^T dU
  for (int j = 0; j < 4; ++j) {
    const T u0 = du[j], u1 = du[4 + j], u2 = du[8 + j], u3 = du[12 + j];
    t[0][j] = u0 + T(0.5) * (u1 + u2);
    t[1][j] = T(0.5) * (u1 - u2);
    t[2][j] = T(0.5) * (u1 + u2) + u3;
  }
  for (int i = 0; i < 3; ++i) {
    const T u0 = t[i][0], u1 = t[i][1], u2 = t[i][2], u3 = t[i][3];
    dg[i * 3 + 0] = u0 + T(0.5) * (u1 + u2);
    dg[i * 3 + 1] = T(0.5) * (u1 - u2);
    dg[i * 3 + 2] = T(0.5) * (u1 + u2) + u3;
  }
}


// ---- tile policies: one type per F(m x m, 3 x 3), for the kernels written once for both ----------

// F(2x2, 3x3): the hand-written transforms above.
struct WinogradF2x2 {
  static constexpr int kAlpha = 4, kOutput = 2, kPoints = 16;
  template <typename T>
  TORCHCONV_HOST_DEVICE static void filter(const T g[9], T u[kPoints]) { winograd_filter_transform<T>(g, u); }
  template <typename T>
  TORCHCONV_HOST_DEVICE static void input(const T d[kPoints], T v[kPoints]) { winograd_input_transform<T>(d, v); }
  template <typename T>
  TORCHCONV_HOST_DEVICE static void output(const T m[kPoints], T y[kOutput * kOutput]) {
    winograd_output_transform<T>(m, y);
  }
};

// acc (+)= c * x for a coefficient known once the caller's loops are unrolled: zero terms vanish,
// unit ones become an addition or a subtraction, and the first term initialises the sum.
template <typename T>
TORCHCONV_HOST_DEVICE void accumulate_term(T& acc, bool& started, double c, T x) {
  if (c == 0.0) return;
  const T term = c == 1.0 ? x : c == -1.0 ? -x : T(c) * x;
  acc = started ? acc + term : term;
  started = true;
}

// out = M in M^T for a constant matrix M (kOut x kIn, coefficients Matrix::c(i, k)) and a square
// kIn x kIn `in`: each F(m x m) transform has this form (G g G^T, B^T d B, A^T m A).
template <int kOut, int kIn, typename Matrix, typename T>
TORCHCONV_HOST_DEVICE void transform_sandwich(const T* in, T* out) {
  T t[kOut][kIn];  // M in
  TORCHCONV_UNROLL
  for (int i = 0; i < kOut; ++i)
    TORCHCONV_UNROLL
    for (int j = 0; j < kIn; ++j) {
      bool started = false;
      TORCHCONV_UNROLL
      for (int k = 0; k < kIn; ++k) accumulate_term(t[i][j], started, Matrix::c(i, k), in[k * kIn + j]);
    }
  TORCHCONV_UNROLL
  for (int i = 0; i < kOut; ++i)
    TORCHCONV_UNROLL
    for (int j = 0; j < kOut; ++j) {
      bool started = false;
      TORCHCONV_UNROLL
      for (int k = 0; k < kIn; ++k) accumulate_term(out[i * kOut + j], started, Matrix::c(j, k), t[i][k]);
    }
}

// F(4x4, 3x3) at the points 0, 1, -1, 1/2, -2 and infinity: of the sets benchmarks/winograd_error.py
// compares (with +-2 or +-1/2 as the fourth and fifth points), the one with the lowest float32 error
// on every 3x3 suite layer, about 6-9x F(2x2)'s and under 3e-6. The Toom-Cook construction puts the
// points' normalisation in G (its thirds and fifteenths are the only inexact coefficients); B^T and
// A^T hold halves and powers of two.
struct WinogradF4x4 {
  static constexpr int kAlpha = 6, kOutput = 4, kPoints = 36;
  struct BT {  // 6 x 6
    TORCHCONV_HOST_DEVICE static constexpr double c(int i, int j) {
      constexpr double m[6][6] = {{1, -1.5, -2, 1.5, 1, 0},  {0, -1, 0.5, 2.5, 1, 0},   {0, 1, -2.5, 0.5, 1, 0},
                                  {0, -2, -1, 2, 1, 0},      {0, 0.5, -1, -0.5, 1, 0},  {0, 1, -1.5, -2, 1.5, 1}};
      return m[i][j];
    }
  };
  struct G {  // 6 x 3
    TORCHCONV_HOST_DEVICE static constexpr double c(int i, int j) {
      constexpr double m[6][3] = {{1, 0, 0},
                                  {1.0 / 3, 1.0 / 3, 1.0 / 3},
                                  {-1.0 / 3, 1.0 / 3, -1.0 / 3},
                                  {-16.0 / 15, -8.0 / 15, -4.0 / 15},
                                  {1.0 / 15, -2.0 / 15, 4.0 / 15},
                                  {0, 0, 1}};
      return m[i][j];
    }
  };
  struct AT {  // 4 x 6
    TORCHCONV_HOST_DEVICE static constexpr double c(int i, int j) {
      constexpr double m[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 0.5, -2, 0}, {0, 1, 1, 0.25, 4, 0}, {0, 1, -1, 0.125, -8, 1}};
      return m[i][j];
    }
  };

  template <typename T>
  TORCHCONV_HOST_DEVICE static void filter(const T g[9], T u[kPoints]) {  // U = G g G^T
    transform_sandwich<6, 3, G>(g, u);
  }
  template <typename T>
  TORCHCONV_HOST_DEVICE static void input(const T d[kPoints], T v[kPoints]) {  // V = B^T d B
    transform_sandwich<6, 6, BT>(d, v);
  }
  template <typename T>
  TORCHCONV_HOST_DEVICE static void output(const T m[kPoints], T y[kOutput * kOutput]) {  // Y = A^T m A
    transform_sandwich<4, 6, AT>(m, y);
  }
  // B^T applied to one line of 6 (6 values), for kernels that run V = B^T d B's two steps apart:
  // every row of B^T is a short combination of x = d3 - d1 and y = d4 - d2, so 16 additions and
  // multiply-adds where the rows' 26 terms take 22. The tensor-core kernels keep 10 bits of V
  // (float16 under a scale), so the order of the float32 sums does not show in their results; the
  // CPU and the IEEE kernels keep `input`'s.
  template <typename T>
  TORCHCONV_HOST_DEVICE static constexpr void input_line(const T d[kAlpha], T v[kAlpha]) {
    const T x = d[3] - d[1], y = d[4] - d[2];
    v[0] = (d[0] - d[2]) + (T(1.5) * x + y);
    v[1] = (x + y) + T(1.5) * (d[2] + d[3]);
    v[2] = (y - x) + T(1.5) * (d[3] - d[2]);
    v[3] = T(2) * x + y;
    v[4] = y - T(0.5) * x;
    v[5] = (d[5] - x) + (T(1.5) * y - d[3]);
  }
  // V = B^T d B by input_line: down each column of d ([row][column]), then along each row of the
  // result, as a kernel that runs the two steps in different threads does.
  template <typename T>
  TORCHCONV_HOST_DEVICE static constexpr void input_by_lines(const T d[kPoints], T v[kPoints]) {
    T t[kPoints] = {};
    TORCHCONV_UNROLL
    for (int j = 0; j < kAlpha; ++j) {
      T column[kAlpha] = {}, out[kAlpha] = {};
      TORCHCONV_UNROLL
      for (int i = 0; i < kAlpha; ++i) column[i] = d[i * kAlpha + j];
      input_line(column, out);
      TORCHCONV_UNROLL
      for (int i = 0; i < kAlpha; ++i) t[i * kAlpha + j] = out[i];
    }
    TORCHCONV_UNROLL
    for (int i = 0; i < kAlpha; ++i) input_line(t + i * kAlpha, v + i * kAlpha);
  }
  // A^T applied to one line of 6 (4 values), for a kernel that runs Y = A^T m A's two steps apart
  // (along m's rows, then down the columns of the result): A^T's rows at the points 1 and -1 share
  // m1 + m2 and m1 - m2, so 12 additions and multiply-adds where the rows' 21 terms take 17.
  template <typename T>
  TORCHCONV_HOST_DEVICE static constexpr void output_line(const T m[kAlpha], T y[kOutput]) {
    const T sum = m[1] + m[2], difference = m[1] - m[2];
    y[0] = m[0] + sum + (m[3] + m[4]);
    y[1] = difference + T(0.5) * m[3] - T(2) * m[4];
    y[2] = sum + T(0.25) * m[3] + T(4) * m[4];
    y[3] = difference + T(0.125) * m[3] - T(8) * m[4] + m[5];
  }
};

// Whether `line` (kIn values in, kOut out) applies Matrix (kOut x kIn): its image of each unit vector
// is Matrix's column.
template <typename Matrix, int kIn, int kOut, typename Line>
TORCHCONV_HOST_DEVICE constexpr bool line_applies(Line line) {
  for (int k = 0; k < kIn; ++k) {
    double in[kIn] = {}, out[kOut] = {};
    in[k] = 1;
    line(in, out);
    for (int i = 0; i < kOut; ++i)
      if (out[i] != Matrix::c(i, k)) return false;
  }
  return true;
}
static_assert(line_applies<WinogradF4x4::AT, WinogradF4x4::kAlpha, WinogradF4x4::kOutput>(
                  [](const double* m, double* y) { WinogradF4x4::output_line(m, y); }),
              "WinogradF4x4::output_line applies AT");
static_assert(line_applies<WinogradF4x4::BT, WinogradF4x4::kAlpha, WinogradF4x4::kAlpha>(
                  [](const double* d, double* v) { WinogradF4x4::input_line(d, v); }),
              "WinogradF4x4::input_line applies BT");

// Output tiles of edge Tile::kOutput along an output extent (the last one may be partial).
template <typename Tile>
TORCHCONV_HOST_DEVICE int64_t winograd_tiles_of(int64_t out_len) {
  return (out_len + Tile::kOutput - 1) / Tile::kOutput;
}

}  // namespace torchconv
