// The matrix product's kernel (matmul.h), included twice by matmul.cpp: for any x86-64 CPU and
// compiled for AVX2 and FMA, each copy in its own namespace, kVectorBytes set by the includer. No
// include guard, and no includes: the includer provides them.
//
// A task is a block of rows of one product's c by a panel of its columns. For each chunk of the depth it packs the
// panel of b (rows of the chunk, the panel's columns contiguous, zero past N) and, for each kRows rows,
// those rows of a (depth-major, zero past M); a micro-tile of kRows rows by two vectors of columns is
// then summed in registers over the chunk and added to c.

template <typename T>
struct MatmulTile {
  typedef T Vec __attribute__((vector_size(kVectorBytes)));
  static constexpr int64_t kLanes = kVectorBytes / sizeof(T);
  static constexpr int64_t kRows = 6, kCols = 2 * kLanes;
  static constexpr int64_t kDepth = 256, kPanel = 16 * kCols, kRowBlock = 240, kSerialWork = 1 << 16;
};

template <typename T>
void matmul_kernel(int64_t batch, int64_t M, int64_t N, int64_t K, const T* a, int64_t a_bs, int64_t a_rs,
                   int64_t a_cs, const T* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, T* c, int64_t c_bs,
                   int64_t ldc, bool accumulate) {
  using Tile = MatmulTile<T>;
  using Vec = typename Tile::Vec;
  constexpr int64_t kRows = Tile::kRows, kCols = Tile::kCols, kLanes = Tile::kLanes;
  constexpr int64_t kDepth = Tile::kDepth, kPanel = Tile::kPanel, kRowBlock = Tile::kRowBlock;
  constexpr int64_t kSerialWork = Tile::kSerialWork;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock, panels = (N + kPanel - 1) / kPanel;
  // Small products run on the calling thread: a parallel region costs more than they do.
  const int64_t tiles = row_blocks * panels, tasks = batch * tiles;
  const int64_t grain = batch * M * N * K < kSerialWork ? tasks : 1;
  const int64_t depth_max = std::min(kDepth, K), panel_max = (std::min(kPanel, N) + kCols - 1) / kCols * kCols;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    std::unique_ptr<T[]> bpack(new T[depth_max * panel_max]), apack(new T[depth_max * kRows]);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t item = task / tiles, tile = task % tiles;
      const T* a_item = a + item * a_bs;
      const T* b_item = b + item * b_bs;
      T* c_item = c + item * c_bs;
      const int64_t i_lo = tile / panels * kRowBlock, i_hi = std::min(M, i_lo + kRowBlock);
      const int64_t j_lo = tile % panels * kPanel, width = std::min(kPanel, N - j_lo);
      const int64_t padded = (width + kCols - 1) / kCols * kCols;
      for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kDepth) {
        const int64_t depth = std::min(kDepth, K - k0);
        for (int64_t k = 0; k < depth; ++k) {
          const T* src = b_item + (k0 + k) * b_rs + j_lo * b_cs;
          T* dst = bpack.get() + k * padded;
          if (b_cs == 1) {
            std::memcpy(dst, src, width * sizeof(T));
          } else {
            for (int64_t j = 0; j < width; ++j) dst[j] = src[j * b_cs];
          }
          for (int64_t j = width; j < padded; ++j) dst[j] = T(0);
        }
        const bool add = accumulate || k0 > 0;
        for (int64_t i0 = i_lo; i0 < i_hi; i0 += kRows) {
          const int64_t rows = std::min(kRows, i_hi - i0);
          for (int64_t k = 0; k < depth; ++k)
            for (int64_t r = 0; r < kRows; ++r)
              apack[k * kRows + r] = r < rows ? a_item[(i0 + r) * a_rs + (k0 + k) * a_cs] : T(0);
          for (int64_t j0 = 0; j0 < padded; j0 += kCols) {
            Vec acc[kRows][2] = {};
            const T* bp = bpack.get() + j0;
            const T* ap = apack.get();
            for (int64_t k = 0; k < depth; ++k, bp += padded, ap += kRows) {
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
            for (int64_t r = 0; r < rows; ++r) {
              T sums[kCols];
              std::memcpy(sums, &acc[r][0], sizeof(Vec));
              std::memcpy(sums + kLanes, &acc[r][1], sizeof(Vec));
              T* out = c_item + (i0 + r) * ldc + j_lo + j0;
              for (int64_t j = 0; j < cols; ++j) out[j] = add ? out[j] + sums[j] : sums[j];
            }
          }
        }
        if (K == 0) break;
      }
    }
  });
}
