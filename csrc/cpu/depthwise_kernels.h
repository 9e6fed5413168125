// The depthwise kernels of csrc/cpu/direct.cpp: the forwards along the rows (NCHW) and along the
// channels (channels_last), and grad_weight and the strided grad_input along the channels. Included
// twice there: once for any x86-64 CPU, once compiled for AVX2 (eight float lanes where the baseline
// has four), each copy in its own namespace (isa.h). No FMA: a product and a sum apart, as in the
// baseline build and the tiles, so both builds give the same bits. No include guard, and no includes:
// the includer provides them, before its namespaces.

constexpr int64_t kDepthwiseBandRows = 8;

// Depthwise forward (one channel and one filter per group) of a K x K filter at stride 1 or 2,
// undilated: a task computes a band of output rows of one plane. The columns whose taps all lie inside
// the input's row are one loop along the row that the compiler vectorizes: where every filter row is
// inside too, each output summed over all K x K taps at once and stored once (direct.cpp's tiles read and
// write every output back once per tap); in a row of the padding's border, one pass per filter row
// inside. The border columns sum the taps inside, the rows' and columns' ranges found once an output.
// Every output adds the bias first, then the taps row by row, skipping those outside: the tiles'
// order, so the results are the same to the bit.
template <typename T, int K, int kStride>
void depthwise_forward_rows(const ConvShape& p, const T* x, const T* w, const T* bias, T* y) {
  const int64_t bands = (p.Ho + kDepthwiseBandRows - 1) / kDepthwiseBandRows;
  // Output columns whose K taps all lie inside the row: ox * kStride - pad_w in [0, W - K].
  const OutputRange inside = valid_output_range(p.Wo, p.W - K + 1, -p.pad_w, kStride);
  at::parallel_for(0, p.N * p.C * bands, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t nc = task / bands, c = nc % p.C, oy0 = task % bands * kDepthwiseBandRows;
      const T* __restrict__ plane = x + nc * p.H * p.W;
      const T* __restrict__ wc = w + c * K * K;
      const T b = bias ? bias[c] : T(0);
      for (int64_t oy = oy0; oy < std::min(p.Ho, oy0 + kDepthwiseBandRows); ++oy) {
        T* __restrict__ out = y + (nc * p.Ho + oy) * p.Wo;
        const int64_t iy0 = oy * kStride - p.pad_h;  // the input row of filter row 0
        const int r_lo = int(std::max<int64_t>(0, -iy0)), r_hi = int(std::clamp<int64_t>(p.H - iy0, r_lo, K));
        const int64_t row = iy0 * p.W - p.pad_w;  // offset of filter row 0's input of ox = 0 (maybe outside)
        // One output of a border column: the taps of the rows and columns inside.
        auto bordered = [&](int64_t ox) {
          const int64_t ix0 = ox * kStride - p.pad_w;
          const int s_lo = int(std::max<int64_t>(0, -ix0)), s_hi = int(std::clamp<int64_t>(p.W - ix0, s_lo, K));
          T acc = b;
          for (int r = r_lo; r < r_hi; ++r)
            for (int s = s_lo; s < s_hi; ++s) acc += wc[r * K + s] * plane[row + r * p.W + ox * kStride + s];
          return acc;
        };
        for (int64_t ox = 0; ox < inside.lo; ++ox) out[ox] = bordered(ox);
        for (int64_t ox = inside.hi; ox < p.Wo; ++ox) out[ox] = bordered(ox);
        if (r_lo == 0 && r_hi == K) {
          for (int64_t ox = inside.lo; ox < inside.hi; ++ox) {
            T acc = b;
            TORCHCONV_UNROLL
            for (int r = 0; r < K; ++r)
              TORCHCONV_UNROLL
              for (int s = 0; s < K; ++s) acc += wc[r * K + s] * plane[row + r * p.W + ox * kStride + s];
            out[ox] = acc;
          }
          continue;
        }
        // A border row: a pass along the row for each filter row inside, adding to the sums in order.
        for (int64_t ox = inside.lo; ox < inside.hi; ++ox) out[ox] = b;
        for (int r = r_lo; r < r_hi && inside.lo < inside.hi; ++r) {
          const T* __restrict__ in = plane + (row + r * p.W + inside.lo * kStride);  // ox = inside.lo's
          const T* __restrict__ wr = wc + r * K;
          for (int64_t i = 0; i < inside.hi - inside.lo; ++i) {
            T acc = out[inside.lo + i];
            TORCHCONV_UNROLL
            for (int s = 0; s < K; ++s) acc += wr[s] * in[i * kStride + s];
            out[inside.lo + i] = acc;
          }
        }
      }
    }
  });
}

// The same depthwise forward on channels_last data (x: N x H x W x C, wt: K x K x C, y: N x Ho x Wo x C):
// a task computes an output row, each pixel's channels in blocks of kDepthwiseChannelBlock summed over
// the taps inside the input at once, the channels of a block being the vector. The loops along a row
// above are short on small planes (a 7x7 plane's five inside columns of a 3x3 filter), and there most
// outputs are border; along the channels every output's taps run the same vector loop. Same order of
// additions (bias, then the taps row by row), so the same bits as the tiles.
constexpr int64_t kDepthwiseChannelBlock = 16;

// block(c0, len) for each block of kDepthwiseChannelBlock of the C channels, in order: len a
// compile-time constant (std::integral_constant) for whole blocks, so their loops unroll into vectors,
// and C - c0 for the last, partial one.
template <typename Block>
inline void for_channel_blocks(int64_t C, Block&& block) {
  int64_t c0 = 0;
  for (; c0 + kDepthwiseChannelBlock <= C; c0 += kDepthwiseChannelBlock)
    block(c0, std::integral_constant<int64_t, kDepthwiseChannelBlock>());
  if (c0 < C) block(c0, C - c0);
}

template <typename T, int K, int kStride>
void depthwise_forward_nhwc(const ConvShape& p, const T* x, const T* wt, const T* bias, T* y) {
  const int64_t C = p.C;
  at::parallel_for(0, p.N * p.Ho, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / p.Ho, oy = task % p.Ho, iy0 = oy * kStride - p.pad_h;
      const int r_lo = int(std::max<int64_t>(0, -iy0)), r_hi = int(std::clamp<int64_t>(p.H - iy0, r_lo, K));
      for (int64_t ox = 0; ox < p.Wo; ++ox) {
        const int64_t ix0 = ox * kStride - p.pad_w;
        const int s_lo = int(std::max<int64_t>(0, -ix0)), s_hi = int(std::clamp<int64_t>(p.W - ix0, s_lo, K));
        const int64_t origin = ((n * p.H + iy0) * p.W + ix0) * C;  // tap (0, 0)'s channel 0, maybe outside
        T* __restrict__ out = y + ((n * p.Ho + oy) * p.Wo + ox) * C;
        auto block = [&](int64_t c0, auto len) {
          T acc[kDepthwiseChannelBlock];
          for (int64_t j = 0; j < len; ++j) acc[j] = bias ? bias[c0 + j] : T(0);
          for (int r = r_lo; r < r_hi; ++r)
            for (int s = s_lo; s < s_hi; ++s) {
              const T* __restrict__ in = x + (origin + (r * p.W + s) * C + c0);
              const T* __restrict__ ws = wt + (r * K + s) * C + c0;
              for (int64_t j = 0; j < len; ++j) acc[j] += ws[j] * in[j];
            }
          for (int64_t j = 0; j < len; ++j) out[c0 + j] = acc[j];
        };
        for_channel_blocks(C, block);
      }
    }
  });
}

// The parts of the output rows the depthwise grad_weight below sums apart, then adds in order: a fixed
// number whatever the thread count, so the same bits on any machine of the same build.
constexpr int64_t kDepthwiseGradWeightParts = 8;

// grad_weight of the depthwise layer above on channels_last data (gy: N x Ho x Wo x C, x: N x H x W x C,
// gw: C x K x K). A task takes a part of the output rows and a block of kDepthwiseChannelBlock
// channels, the vector: for each row, tap row inside and tap column, the products of the gradient and
// the input along the output columns that tap reads inside are summed in one vector of sums, then
// added to the part's sums of that tap (each part has its own, so the parts' tasks write apart).
template <typename T, int K, int kStride>
void depthwise_grad_weight_nhwc(const ConvShape& p, const T* gy, const T* x, T* gw) {
  const int64_t C = p.C, rows = p.N * p.Ho;
  const int64_t parts = std::max<int64_t>(1, std::min(kDepthwiseGradWeightParts, rows));  // one part of no rows: zeros
  const int64_t blocks = (C + kDepthwiseChannelBlock - 1) / kDepthwiseChannelBlock;
  std::vector<T> part_sums(size_t(parts * K * K * C), T(0));  // part, tap, channel
  at::parallel_for(0, parts * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t part = task / blocks, c0 = task % blocks * kDepthwiseChannelBlock;
      T* __restrict__ sums = part_sums.data() + part * K * K * C + c0;
      auto block = [&](auto len) {
        for (int64_t row = part * rows / parts; row < (part + 1) * rows / parts; ++row) {
          const int64_t n = row / p.Ho, oy = row % p.Ho, iy0 = oy * kStride - p.pad_h;
          const int r_lo = int(std::max<int64_t>(0, -iy0)), r_hi = int(std::clamp<int64_t>(p.H - iy0, r_lo, K));
          const T* __restrict__ g_row = gy + row * p.Wo * C + c0;
          for (int r = r_lo; r < r_hi; ++r) {
            const T* __restrict__ x_row = x + ((n * p.H + iy0 + r) * p.W) * C + c0;
            for (int s = 0; s < K; ++s) {
              // Output columns whose input column ox * kStride - pad_w + s lies inside the row.
              const OutputRange cols = valid_output_range(p.Wo, p.W, s - p.pad_w, kStride);
              T acc[kDepthwiseChannelBlock] = {};
              for (int64_t ox = cols.lo; ox < cols.hi; ++ox) {
                const T* __restrict__ g = g_row + ox * C;
                const T* __restrict__ in = x_row + (ox * kStride - p.pad_w + s) * C;
                for (int64_t j = 0; j < len; ++j) acc[j] += g[j] * in[j];
              }
              T* __restrict__ tap = sums + (r * K + s) * C;
              for (int64_t j = 0; j < len; ++j) tap[j] += acc[j];
            }
          }
        }
      };
      if (c0 + kDepthwiseChannelBlock <= C) {
        block(std::integral_constant<int64_t, kDepthwiseChannelBlock>());
      } else {
        block(C - c0);
      }
    }
  });
  at::parallel_for(0, C, 16, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c)
      for (int tap = 0; tap < K * K; ++tap) {
        T v = part_sums[size_t(tap * C + c)];
        for (int64_t part = 1; part < parts; ++part) v += part_sums[size_t((part * K * K + tap) * C + c)];
        gw[c * K * K + tap] = v;
      }
  });
}

// grad_input of a strided depthwise layer on channels_last data (gy: N x Ho x Wo x C, wt: K x K x C as
// the forward reads it, gx: N x H x W x C), gathered: a task an input row, each pixel's channels in
// blocks of kDepthwiseChannelBlock summed over the taps whose output lies on the stride's grid and
// inside the gradient, taps row by row. (At stride 1 the forward on the gradient runs it instead.)
template <typename T, int K, int kStride>
void depthwise_grad_input_nhwc(const ConvShape& p, const T* gy, const T* wt, T* gx) {
  const int64_t C = p.C;
  at::parallel_for(0, p.N * p.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / p.H, iy = task % p.H;
      for (int64_t ix = 0; ix < p.W; ++ix) {
        T* __restrict__ out = gx + ((n * p.H + iy) * p.W + ix) * C;
        auto block = [&](int64_t c0, auto len) {
          T acc[kDepthwiseChannelBlock] = {};
          for (int r = 0; r < K; ++r) {
            const int64_t oy_at = iy + p.pad_h - r;  // kStride * oy where this tap reads iy
            if (oy_at < 0 || oy_at % kStride != 0 || oy_at / kStride >= p.Ho) continue;
            for (int s = 0; s < K; ++s) {
              const int64_t ox_at = ix + p.pad_w - s;
              if (ox_at < 0 || ox_at % kStride != 0 || ox_at / kStride >= p.Wo) continue;
              const T* __restrict__ g = gy + ((n * p.Ho + oy_at / kStride) * p.Wo + ox_at / kStride) * C + c0;
              const T* __restrict__ ws = wt + (r * K + s) * C + c0;
              for (int64_t j = 0; j < len; ++j) acc[j] += ws[j] * g[j];
            }
          }
          for (int64_t j = 0; j < len; ++j) out[c0 + j] = acc[j];
        };
        for_channel_blocks(C, block);
      }
    }
  });
}
