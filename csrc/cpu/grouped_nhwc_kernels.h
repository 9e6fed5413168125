// The grouped kernels along the channels (grouped_nhwc.h), built twice by grouped_nhwc.cpp (isa_builds.h): once
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

// Calls block(k0, VectorTag<V>, count) over a group's Kg filters (grad_input: its channels): blocks of
// four wide vectors, then one block of two and one of one, one half vector, and single filters; count (a
// std::integral_constant) vectors of type V each.
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

// Where a tap of a filter meets the other side of the convolution: the forward's input coordinate of
// output o (inside or not), or grad_input's output coordinate of input i, -1 where the tap reads none
// (off the stride's grid or before the first output; past the last one the caller checks).
template <bool kGradInput>
inline int64_t tap_source(int64_t i, int64_t tap, int64_t stride, int64_t pad, int64_t dil) {
  if constexpr (!kGradInput) {
    return input_coord(i, tap, stride, pad, dil);
  } else {
    const int64_t t = i + pad - tap * dil;
    return t < 0 || t % stride != 0 ? -1 : t / stride;
  }
}

// The forward (kGradInput false; src x: N x H x W x C, wt: grouped_filters, dst y: N x Ho x Wo x K) and
// grad_input gathered (true; src gy: N x Ho x Wo x K, wt: grouped_grad_input_filters, dst gx: N x H x W x
// C): a task computes a row of dst, group by group (a group's filters stay in cache across the row).
// Each value is the bias (forward) plus its chains' sums over the taps that reach it, the group's
// source channels dealt to the chains in turn, a vector of the group's destination channels at a time.
template <typename T, bool kGradInput>
void grouped_gather_nhwc(const ConvShape& p, const T* src, const T* wt, const T* bias, T* dst) {
  const int64_t src_h = kGradInput ? p.Ho : p.H, src_w = kGradInput ? p.Wo : p.W;
  const int64_t dst_h = kGradInput ? p.H : p.Ho, dst_w = kGradInput ? p.W : p.Wo;
  const int64_t src_c = kGradInput ? p.K : p.C, dst_c = kGradInput ? p.C : p.K;
  const int64_t reduced = kGradInput ? p.filters_per_group() : p.channels_per_group();
  const int64_t vectors = kGradInput ? p.channels_per_group() : p.filters_per_group(), taps = p.R * p.S;
  at::parallel_for(0, p.N * dst_h, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / dst_h, oy = task % dst_h;
      for (int64_t g = 0; g < p.groups; ++g) {
        const T* wgroup = wt + g * taps * reduced * vectors;
        for (int64_t ox = 0; ox < dst_w; ++ox) {
          T* out = dst + ((n * dst_h + oy) * dst_w + ox) * dst_c + g * vectors;
          for_filter_vectors<T>(vectors, [&](int64_t k0, auto tag, auto count) {
            using V = typename decltype(tag)::type;
            constexpr int kCount = decltype(count)::value;
            constexpr int64_t kLanes = sizeof(V) / sizeof(T);
            V acc[kChains][kCount];
            for (int q = 0; q < kCount; ++q) {
              acc[0][q] = bias ? load_lanes<V>(bias + g * vectors + k0 + q * kLanes) : V{};
              for (int h = 1; h < kChains; ++h) acc[h][q] = V{};
            }
            for (int64_t r = 0; r < p.R; ++r) {
              const int64_t iy = tap_source<kGradInput>(oy, r, p.stride_h, p.pad_h, p.dil_h);
              if (iy < 0 || iy >= src_h) continue;
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t ix = tap_source<kGradInput>(ox, s, p.stride_w, p.pad_w, p.dil_w);
                if (ix < 0 || ix >= src_w) continue;
                const T* in = src + ((n * src_h + iy) * src_w + ix) * src_c + g * reduced;
                const T* w = wgroup + (r * p.S + s) * reduced * vectors + k0;
                int64_t c = 0;
                for (; c + kChains <= reduced; c += kChains)
                  for (int h = 0; h < kChains; ++h) {
                    const V a = splat<V>(in[c + h]);
                    for (int q = 0; q < kCount; ++q) acc[h][q] += a * load_lanes<V>(w + (c + h) * vectors + q * kLanes);
                  }
                for (int h = 0; c < reduced; ++c, ++h) {
                  const V a = splat<V>(in[c]);
                  for (int q = 0; q < kCount; ++q) acc[h][q] += a * load_lanes<V>(w + c * vectors + q * kLanes);
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
