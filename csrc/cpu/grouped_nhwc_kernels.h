// The grouped kernels along the channels (grouped_nhwc.h), included twice by grouped_nhwc.cpp: once
// for any x86-64 CPU, once compiled for AVX2 and FMA (eight lanes and fused multiply-adds, where the
// baseline has four lanes and separate products and sums), each copy in its own namespace. No include
// guard, and no includes: the includer provides them, before its namespaces.
//
// The sums are GCC vector types (a register or half of one, or a scalar for the last filters), which the
// compiler keeps in registers: arrays of scalars summed in unrolled loops it kept there only while a
// block had one chain of sums, and a chain of dependent multiply-adds waits out each one's latency.
// So each block runs several chains (channels, or pixels, in turn), added at the end.

// kVectorBytes, set by the includer: a register's width in its target (16 on the baseline, 32 with
// AVX2; wider vector types than the target's registers come out of GCC through memory).
template <typename T>
struct Lanes {
  typedef T Wide __attribute__((vector_size(kVectorBytes)));
  typedef T Half __attribute__((vector_size(kVectorBytes / 2)));
};

template <typename V, typename T>
inline V load_lanes(const T* p) {
  if constexpr (std::is_same_v<V, T>) {
    return *p;
  } else {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
}

template <typename V, typename T>
inline void store_lanes(T* p, V v) {
  if constexpr (std::is_same_v<V, T>) {
    *p = v;
  } else {
    std::memcpy(p, &v, sizeof(V));
  }
}

template <typename V, typename T>
inline V splat(T s) {
  if constexpr (std::is_same_v<V, T>) {
    return s;
  } else {
    return V{} + s;
  }
}

// Chains of sums a block runs side by side (each multiply-add waits on the one before in its chain).
// Four chains for blocks of one or two vectors ran no faster than two.
constexpr int kChains = 2;

// The chains' sums of vector q, added in a fixed order.
template <typename V, int kCount>
inline V sum_chains(const V (&acc)[kChains][kCount], int q) {
  V total = acc[0][q];
  for (int h = 1; h < kChains; ++h) total += acc[h][q];
  return total;
}

template <typename V>
struct VectorTag {
  using type = V;
};

// Calls block(k0, VectorTag<V>, count) over a group's Kg filters: blocks of four wide vectors, then one
// block of two and one of one, one half vector, and single filters; count (a std::integral_constant)
// vectors of type V each.
template <typename T, typename Block>
void for_filter_vectors(int64_t Kg, Block&& block) {
  using Wide = typename Lanes<T>::Wide;
  using Half = typename Lanes<T>::Half;
  constexpr int64_t kWide = sizeof(Wide) / sizeof(T), kHalf = sizeof(Half) / sizeof(T);
  int64_t k0 = 0;
  for (; k0 + 4 * kWide <= Kg; k0 += 4 * kWide) block(k0, VectorTag<Wide>(), std::integral_constant<int, 4>());
  if (k0 + 2 * kWide <= Kg) block(k0, VectorTag<Wide>(), std::integral_constant<int, 2>()), k0 += 2 * kWide;
  if (k0 + kWide <= Kg) block(k0, VectorTag<Wide>(), std::integral_constant<int, 1>()), k0 += kWide;
  if (k0 + kHalf <= Kg) block(k0, VectorTag<Half>(), std::integral_constant<int, 1>()), k0 += kHalf;
  for (; k0 < Kg; ++k0) block(k0, VectorTag<T>(), std::integral_constant<int, 1>());
}

// x: N x H x W x C, wg: grouped_filters, y: N x Ho x Wo x K. A task computes an output row, group by
// group (a group's filters stay in cache across the row). Each output is the bias plus its chains'
// sums, the group's channels dealt to the chains in turn, tap by tap.
template <typename T>
void grouped_forward_nhwc(const ConvShape& p, const T* x, const T* wg, const T* bias, T* y) {
  const int64_t C = p.C, K = p.K, Cg = p.channels_per_group(), Kg = p.filters_per_group(), taps = p.R * p.S;
  at::parallel_for(0, p.N * p.Ho, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / p.Ho, oy = task % p.Ho;
      for (int64_t g = 0; g < p.groups; ++g) {
        const T* wgroup = wg + g * taps * Cg * Kg;
        for (int64_t ox = 0; ox < p.Wo; ++ox) {
          T* out = y + ((n * p.Ho + oy) * p.Wo + ox) * K + g * Kg;
          for_filter_vectors<T>(Kg, [&](int64_t k0, auto tag, auto count) {
            using V = typename decltype(tag)::type;
            constexpr int kCount = decltype(count)::value;
            constexpr int64_t kLanes = sizeof(V) / sizeof(T);
            V acc[kChains][kCount];
            for (int q = 0; q < kCount; ++q) {
              acc[0][q] = bias ? load_lanes<V>(bias + g * Kg + k0 + q * kLanes) : V{};
              for (int h = 1; h < kChains; ++h) acc[h][q] = V{};
            }
            for (int64_t r = 0; r < p.R; ++r) {
              const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
              if (iy < 0 || iy >= p.H) continue;
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t ix = input_coord(ox, s, p.stride_w, p.pad_w, p.dil_w);
                if (ix < 0 || ix >= p.W) continue;
                const T* in = x + ((n * p.H + iy) * p.W + ix) * C + g * Cg;
                const T* wt = wgroup + (r * p.S + s) * Cg * Kg + k0;
                int64_t c = 0;
                for (; c + kChains <= Cg; c += kChains)
                  for (int h = 0; h < kChains; ++h) {
                    const V a = splat<V>(in[c + h]);
                    for (int q = 0; q < kCount; ++q) acc[h][q] += a * load_lanes<V>(wt + (c + h) * Kg + q * kLanes);
                  }
                for (int h = 0; c < Cg; ++c, ++h) {
                  const V a = splat<V>(in[c]);
                  for (int q = 0; q < kCount; ++q) acc[h][q] += a * load_lanes<V>(wt + c * Kg + q * kLanes);
                }
              }
            }
            for (int q = 0; q < kCount; ++q) store_lanes(out + k0 + q * kLanes, sum_chains(acc, q));
          });
        }
      }
    }
  });
}

// grad_weight of a grouped layer along the channels (gy: N x Ho x Wo x K, x: N x H x W x C, gw: K x Cg x
// R x S): for each group, tap and channel, the group's filters' sums as vectors (a row's pixels dealt
// to the chains in turn). The output rows are split into kGroupedWeightParts fixed parts, each summed
// into its own copy of the weight (laid as grouped_filters), and the parts added in order into gw: the
// same bits whatever the number of threads.
constexpr int64_t kGroupedWeightParts = 8;

template <typename T>
void grouped_grad_weight_nhwc(const ConvShape& p, const T* gy, const T* x, T* gw) {
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
          const int64_t step = p.stride_w * C;
          for (int64_t c = 0; c < Cg; ++c) {
            T* dst = sums + ((r * p.S + s) * Cg + c) * Kg;
            for_filter_vectors<T>(Kg, [&](int64_t k0, auto tag, auto count) {
              using V = typename decltype(tag)::type;
              constexpr int kCount = decltype(count)::value;
              constexpr int64_t kLanes = sizeof(V) / sizeof(T);
              V acc[kChains][kCount];
              for (int h = 0; h < kChains; ++h)
                for (int q = 0; q < kCount; ++q) acc[h][q] = V{};
              for (int64_t row = row_lo; row < row_hi; ++row) {
                const int64_t n = row / p.Ho, oy = row % p.Ho;
                const int64_t iy = input_coord(oy, r, p.stride_h, p.pad_h, p.dil_h);
                if (iy < 0 || iy >= p.H) continue;
                // pixel ox * stride_w of this input row, at the group's channel c
                const T* xrow = x + ((n * p.H + iy) * p.W + col_offset) * C + g * Cg + c;
                const T* gyrow = gy + row * p.Wo * K + g * Kg + k0;
                int64_t ox = cols.lo;
                for (; ox + kChains <= cols.hi; ox += kChains)
                  for (int h = 0; h < kChains; ++h) {
                    const V a = splat<V>(xrow[(ox + h) * step]);
                    for (int q = 0; q < kCount; ++q) acc[h][q] += a * load_lanes<V>(gyrow + (ox + h) * K + q * kLanes);
                  }
                for (int h = 0; ox < cols.hi; ++ox, ++h) {
                  const V a = splat<V>(xrow[ox * step]);
                  for (int q = 0; q < kCount; ++q) acc[h][q] += a * load_lanes<V>(gyrow + ox * K + q * kLanes);
                }
              }
              for (int q = 0; q < kCount; ++q) store_lanes(dst + k0 + q * kLanes, sum_chains(acc, q));
            });
          }
        }
      }
    }
  });
  // Element (g, tap, c, k) of a part goes to gw[g * Kg + k][c][tap].
  at::parallel_for(0, p.groups * taps * Cg, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {  // row = (g * taps + tap) * Cg + c
      const int64_t c = row % Cg, tap = row / Cg % taps, g = row / (Cg * taps);
      for (int64_t k = 0; k < Kg; ++k) {
        T sum = partial[row * Kg + k];
        for (int64_t part = 1; part < parts; ++part) sum += partial[part * numel + row * Kg + k];
        gw[((g * Kg + k) * Cg + c) * taps + tap] = sum;
      }
    }
  });
}
