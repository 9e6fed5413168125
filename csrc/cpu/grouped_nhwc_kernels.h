// The grouped kernels along the channels (grouped_nhwc.h), included twice by grouped_nhwc.cpp: once
// for any x86-64 CPU, once compiled for AVX2 and FMA (eight lanes and fused multiply-adds, where the
// baseline has four lanes and separate products and sums), each copy in its own namespace. No include
// guard, and no includes: the includer provides them, before its namespaces.

constexpr int64_t kGroupedFilterBlock = 16;

// Calls block(k0, len) over a group's Kg filters: whole blocks, then the rest in blocks of 8 and 4, all
// of a compile-time length (the compiler keeps their sums in vector registers; with a length known
// only at run time it keeps them in memory), then the last 1-3.
template <typename Block>
void for_filter_blocks(int64_t Kg, Block&& block) {
  int64_t k0 = 0;
  for (; k0 + kGroupedFilterBlock <= Kg; k0 += kGroupedFilterBlock)
    block(k0, std::integral_constant<int64_t, kGroupedFilterBlock>());
  if (k0 + 8 <= Kg) block(k0, std::integral_constant<int64_t, 8>()), k0 += 8;
  if (k0 + 4 <= Kg) block(k0, std::integral_constant<int64_t, 4>()), k0 += 4;
  if (k0 < Kg) block(k0, Kg - k0);
}

// x: N x H x W x C, wg: grouped_filters, y: N x Ho x Wo x K. A task computes an output row, group by
// group (a group's filters stay in cache across the row). Each output adds the bias, then the taps row
// by row, each tap's channels in order.
template <typename T>
void grouped_forward_nhwc(const ConvShape& p, const T* x, const T* wg, const T* bias, T* y) {
  const int64_t C = p.C, K = p.K, Cg = p.channels_per_group(), Kg = p.filters_per_group(), taps = p.R * p.S;
  at::parallel_for(0, p.N * p.Ho, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / p.Ho, oy = task % p.Ho;
      for (int64_t g = 0; g < p.groups; ++g) {
        const T* wgroup = wg + g * taps * Cg * Kg;
        for (int64_t ox = 0; ox < p.Wo; ++ox) {
          T* __restrict__ out = y + ((n * p.Ho + oy) * p.Wo + ox) * K + g * Kg;
          for_filter_blocks(Kg, [&](int64_t k0, auto len) {
            T acc[kGroupedFilterBlock];
            for (int64_t j = 0; j < len; ++j) acc[j] = bias ? bias[g * Kg + k0 + j] : T(0);
            for (int64_t r = 0; r < p.R; ++r) {
              const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
              if (iy < 0 || iy >= p.H) continue;
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t ix = input_coord(ox, s, p.stride_w, p.pad_w, p.dil_w);
                if (ix < 0 || ix >= p.W) continue;
                const T* __restrict__ in = x + ((n * p.H + iy) * p.W + ix) * C + g * Cg;
                const T* __restrict__ wt = wgroup + (r * p.S + s) * Cg * Kg + k0;
                for (int64_t c = 0; c < Cg; ++c) {
                  const T v = in[c];
                  const T* __restrict__ wc = wt + c * Kg;
                  for (int64_t j = 0; j < len; ++j) acc[j] += v * wc[j];
                }
              }
            }
            for (int64_t j = 0; j < len; ++j) out[k0 + j] = acc[j];
          });
        }
      }
    }
  });
}

// grad_weight of a grouped layer along the channels (gy: N x Ho x Wo x K, x: N x H x W x C, gwg laid as
// grouped_filters): for each group, tap and channel, the group's filters' sums as vectors of partial
// sums. The output rows are split into kGroupedWeightParts fixed parts, each summed
// into its own copy of the weight, and the parts added in order: the same bits whatever the number
// of threads.
constexpr int64_t kGroupedWeightParts = 8;

template <typename T>
void grouped_grad_weight_nhwc(const ConvShape& p, const T* gy, const T* x, T* gwg) {
  const int64_t C = p.C, K = p.K, Cg = p.channels_per_group(), Kg = p.filters_per_group(), taps = p.R * p.S;
  const int64_t numel = p.groups * taps * Cg * Kg, rows = p.N * p.Ho;
  const int64_t parts = std::max<int64_t>(1, std::min(rows, kGroupedWeightParts));
  std::vector<T> partial(parts * numel);
  // A task is a part and a group: each (tap, channel, block of filters) sums over all of the part's
  // rows in registers and is stored once.
  at::parallel_for(0, parts * p.groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t part = task / p.groups, g = task % p.groups;
      const int64_t row_lo = rows * part / parts, row_hi = rows * (part + 1) / parts;
      T* sums = partial.data() + part * numel + g * taps * Cg * Kg;
      for (int64_t r = 0; r < p.R; ++r) {
        for (int64_t s = 0; s < p.S; ++s) {
          const int64_t col_offset = s * p.dil_w - p.pad_w;
          const OutputRange cols = valid_output_range(p.Wo, p.W, col_offset, p.stride_w);
          for (int64_t c = 0; c < Cg; ++c) {
            T* dst = sums + ((r * p.S + s) * Cg + c) * Kg;
            for_filter_blocks(Kg, [&](int64_t k0, auto len) {
              T acc[kGroupedFilterBlock] = {};
              for (int64_t row = row_lo; row < row_hi; ++row) {
                const int64_t n = row / p.Ho, oy = row % p.Ho;
                const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
                if (iy < 0 || iy >= p.H) continue;
                // pixel ox * stride_w of this input row, at the group's channel c
                const T* xrow = x + ((n * p.H + iy) * p.W + col_offset) * C + g * Cg + c;
                const T* gyrow = gy + row * p.Wo * K + g * Kg + k0;
                for (int64_t ox = cols.lo; ox < cols.hi; ++ox) {
                  const T v = xrow[ox * p.stride_w * C];
                  const T* __restrict__ gk = gyrow + ox * K;
                  for (int64_t j = 0; j < len; ++j) acc[j] += v * gk[j];
                }
              }
              for (int64_t j = 0; j < len; ++j) dst[k0 + j] = acc[j];
            });
          }
        }
      }
    }
  });
  std::copy_n(partial.data(), numel, gwg);
  for (int64_t part = 1; part < parts; ++part)
    for (int64_t i = 0; i < numel; ++i) gwg[i] += partial[part * numel + i];
}
