// The matrix product's kernel (matmul.h), built twice by matmul.cpp through isa_builds.h: for any
// x86-64 CPU and compiled for AVX2 and FMA, each copy in its own namespace, kVectorBytes set by the
// includer. No include guard, and no includes: the includer provides them.
//
// A task is a block of rows of one product's c by a panel of its columns. For each chunk of the depth it
// packs the panel of b as micro-panels of two vectors of columns, each depth-major and contiguous (zero
// past N), so the register tile streams one from the cache line by line; and for each kRows rows, those
// rows of a (depth-major, zero past M). A micro-tile of kRows rows by two vectors of columns is then
// summed in registers over the chunk and added to c.

template <typename T>
struct MatmulTile {
  typedef T Vec __attribute__((vector_size(kVectorBytes)));
  static constexpr int64_t kLanes = kVectorBytes / sizeof(T);
  static constexpr int64_t kRows = kMatmulRows, kCols = 2 * kLanes;
  static constexpr int64_t kDepth = 256, kPanel = 16 * kCols, kRowBlock = 240, kSerialWork = 1 << 16;
  static constexpr int64_t kTasksPerThread = 4, kMinUnits = 4;
};

// Packs rows [i0, i0 + rows) of a, depth [k0, k0 + depth), depth-major (kRows a step; zero past rows).
template <typename T, int64_t kRows>
inline void pack_rows(T* dst, const T* a, int64_t a_rs, int64_t a_cs, int64_t i0, int64_t rows, int64_t k0,
                      int64_t depth) {
  const T* src = a + i0 * a_rs + k0 * a_cs;
  if (rows < kRows) std::fill(dst, dst + depth * kRows, T(0));
  if (a_rs == 1 && rows == kRows) {
    for (int64_t k = 0; k < depth; ++k)
      for (int64_t r = 0; r < kRows; ++r) dst[k * kRows + r] = src[k * a_cs + r];
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < depth; ++k) dst[k * kRows + r] = src[r * a_rs + k * a_cs];
  }
}

// Packs columns [j_lo, j_lo + width) of b, depth [k0, k0 + depth), as micro-panels of kCols columns each
// laid depth-major and contiguous (zero past width).
template <typename T, int64_t kCols>
inline void pack_panel(T* dst, const T* b, int64_t b_rs, int64_t b_cs, int64_t j_lo, int64_t width, int64_t k0,
                       int64_t depth) {
  const T* src = b + k0 * b_rs + j_lo * b_cs;
  const int64_t micro = (width + kCols - 1) / kCols;
  if (width % kCols) std::fill(dst + (micro - 1) * depth * kCols, dst + micro * depth * kCols, T(0));
  if (b_cs == 1) {
    for (int64_t p = 0; p < micro; ++p) {
      const int64_t cols = std::min(kCols, width - p * kCols);
      T* d = dst + p * depth * kCols;
      for (int64_t k = 0; k < depth; ++k) std::memcpy(d + k * kCols, src + k * b_rs + p * kCols, cols * sizeof(T));
    }
  } else {
    for (int64_t p = 0; p < micro; ++p) {
      const int64_t cols = std::min(kCols, width - p * kCols);
      T* d = dst + p * depth * kCols;
      const T* s = src + p * kCols * b_cs;
      for (int64_t k = 0; k < depth; ++k)
        for (int64_t j = 0; j < cols; ++j) d[k * kCols + j] = s[j * b_cs + k * b_rs];
    }
  }
}

// A batch of a's packed whole, as matmul_packed_index lays them (pack_rows over the whole depth, a
// task a unit of kRows rows).
template <typename T>
void matmul_pack_rows_kernel(int64_t batch, int64_t M, int64_t K, const T* a, int64_t a_bs, int64_t a_rs,
                             int64_t a_cs, T* dst) {
  constexpr int64_t kRows = MatmulTile<T>::kRows;
  const int64_t units = (M + kRows - 1) / kRows;
  at::parallel_for(0, batch * units, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t item = task / units, i0 = task % units * kRows;
      pack_rows<T, kRows>(dst + matmul_packed_index(M, K, item, i0, 0), a + item * a_bs, a_rs, a_cs, i0,
                          std::min(kRows, M - i0), 0, K);
    }
  });
}

// The calling thread's packing buffer of at least `count` elements, kept for its later products: a
// product's panel of b is up to 256 KB (512 in float64), which a fresh allocation each call would map
// from the system and fault in again.
template <typename T>
T* matmul_scratch(int64_t count) {
  thread_local std::vector<T> buffer;
  if (int64_t(buffer.size()) < count) buffer.resize(count);
  return buffer.data();
}

// c = a b (or c += a b) for a batch of products; `a_packed`, where given (a_pbs elements an item), is a
// packed whole (matmul_packed_index: a task's kRows rows over a chunk of depth are contiguous there, as
// pack_rows lays them), and a is not read.
template <typename T>
void matmul_kernel(int64_t batch, int64_t M, int64_t N, int64_t K, const T* a, int64_t a_bs, int64_t a_rs,
                   int64_t a_cs, const T* a_packed, int64_t a_pbs, const T* b, int64_t b_bs, int64_t b_rs,
                   int64_t b_cs, T* c, int64_t c_bs, int64_t ldc, bool accumulate) {
  using Tile = MatmulTile<T>;
  using Vec = typename Tile::Vec;
  constexpr int64_t kRows = Tile::kRows, kCols = Tile::kCols, kLanes = Tile::kLanes;
  constexpr int64_t kDepth = Tile::kDepth, kPanel = Tile::kPanel, kRowBlock = Tile::kRowBlock;
  constexpr int64_t kSerialWork = Tile::kSerialWork;
  // Tasks: the rows split into blocks of at most kRowBlock and the columns into panels of at most kPanel,
  // each in near-equal runs of whole micro-tiles, so the tasks weigh alike. Where there are fewer than
  // kTasksPerThread a thread and they do not divide evenly among the threads, the rows or the columns
  // split further until they do (at least kMinUnits micro-tiles a part): an extra row block packs its
  // panel of b once more (N K elements a product), an extra panel its rows of a (M K), so the shorter
  // side is split; either costs less than an idle thread. The split changes no element's sum, so the
  // bits do not depend on the thread count.
  const int64_t row_units = (M + kRows - 1) / kRows, col_units = (N + kCols - 1) / kCols;
  int64_t panels = (col_units + kPanel / kCols - 1) / (kPanel / kCols);
  int64_t row_blocks = (row_units + kRowBlock / kRows - 1) / (kRowBlock / kRows);
  const int64_t threads = at::get_num_threads();
  while (batch * panels * row_blocks < Tile::kTasksPerThread * threads && batch * panels * row_blocks % threads) {
    const bool more_panels = panels < col_units / Tile::kMinUnits, more_rows = row_blocks < row_units / Tile::kMinUnits;
    if (more_panels && (M <= N || !more_rows))
      ++panels;
    else if (more_rows)
      ++row_blocks;
    else
      break;
  }
  const int64_t tiles = row_blocks * panels, tasks = batch * tiles;
  const int64_t grain = batch * M * N * K < kSerialWork ? tasks : 1;
  const int64_t depth_max = std::min(kDepth, K), panel_max = (std::min(kPanel, N) + kCols - 1) / kCols * kCols;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    T* const bpack = matmul_scratch<T>(depth_max * panel_max + (a_packed ? 0 : depth_max * kRows));
    T* const apack = bpack + depth_max * panel_max;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t item = task / tiles, tile = task % tiles;
      const T* a_item = a_packed ? nullptr : a + item * a_bs;
      const T* b_item = b + item * b_bs;
      T* c_item = c + item * c_bs;
      const int64_t row_block = tile / panels, panel = tile % panels;
      const int64_t i_lo = row_units * row_block / row_blocks * kRows;
      const int64_t i_hi = std::min(M, row_units * (row_block + 1) / row_blocks * kRows);
      const int64_t j_lo = col_units * panel / panels * kCols;
      const int64_t width = std::min(N, col_units * (panel + 1) / panels * kCols) - j_lo;
      for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kDepth) {
        const int64_t depth = std::min(kDepth, K - k0);
        pack_panel<T, kCols>(bpack, b_item, b_rs, b_cs, j_lo, width, k0, depth);
        const bool add = accumulate || k0 > 0;
        for (int64_t i0 = i_lo; i0 < i_hi; i0 += kRows) {
          const int64_t rows = std::min(kRows, i_hi - i0);
          const T* a_rows = a_packed ? a_packed + item * a_pbs + matmul_packed_index(M, K, 0, i0, k0) : apack;
          if (!a_packed) pack_rows<T, kRows>(apack, a_item, a_rs, a_cs, i0, rows, k0, depth);
          for (int64_t j0 = 0; j0 < width; j0 += kCols) {
            Vec acc[kRows][2] = {};
            const T* bp = bpack + j0 * depth;
            const T* ap = a_rows;
            for (int64_t k = 0; k < depth; ++k, bp += kCols, ap += kRows) {
              Vec b0, b1;
              std::memcpy(&b0, bp, sizeof(Vec));
              std::memcpy(&b1, bp + kLanes, sizeof(Vec));
              for (int64_t r = 0; r < kRows; ++r) {
                const Vec s = ap[r] - Vec{};  // a broadcast: x - 0 is x for every x (0 + x is not, for -0)
                acc[r][0] += s * b0;
                acc[r][1] += s * b1;
              }
            }
            const int64_t cols = std::min(kCols, width - j0);
            T* out = c_item + i0 * ldc + j_lo + j0;
            if (cols == kCols) {
              for (int64_t r = 0; r < rows; ++r, out += ldc) {
                for (int64_t h = 0; h < 2; ++h) {
                  Vec v = acc[r][h];
                  if (add) {
                    Vec o;
                    std::memcpy(&o, out + h * kLanes, sizeof(Vec));
                    v = o + v;
                  }
                  std::memcpy(out + h * kLanes, &v, sizeof(Vec));
                }
              }
            } else {
              for (int64_t r = 0; r < rows; ++r, out += ldc) {
                T sums[kCols];
                std::memcpy(sums, &acc[r][0], sizeof(Vec));
                std::memcpy(sums + kLanes, &acc[r][1], sizeof(Vec));
                for (int64_t j = 0; j < cols; ++j) out[j] = add ? out[j] + sums[j] : sums[j];
              }
            }
          }
        }
        if (K == 0) break;
      }
    }
  });
}
