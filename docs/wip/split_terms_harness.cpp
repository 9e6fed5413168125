// Host-only check: the split estimates before and after the SplitTerms refactor (split-terms.patch)
// give the same decisions (splits, time bits, whole tiles, lone) over random shapes, occupancies and SM
// counts. old.inc / new.inc: extract_split_estimates.py's cuts of the two gemm_tc.cu files.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int g_sms = 132;
inline int sm_count() { return g_sms; }
constexpr int kMaxClusterSplits = 8;
using ClustersBySize = std::array<int, kMaxClusterSplits + 1>;
ClustersBySize g_active, g_lone;
struct TcConv { int R, S; int64_t rows; int outputs, groups; bool packed; int tap_shift; int reduced; };
int64_t tile_blocks(const TcConv& cv, int bm, int bn) { return ceil_div(cv.rows, bm) * ceil_div(cv.outputs, bn) * cv.groups; }
int reduction_chunks(const TcConv& cv, int elem, int chunk_bytes) {
  if (cv.packed) return int(ceil_div((int64_t(cv.R) * cv.S * 16) << cv.tap_shift, chunk_bytes));
  return cv.R * cv.S * int(ceil_div(int64_t(std::max(cv.reduced, 1)) * elem, chunk_bytes));
}
template <class K> const ClustersBySize& tc_active_clusters_by_size(K, int, size_t) { return g_active; }
template <class K> const ClustersBySize& tc_lone_clusters_by_size(K, int, size_t) { return g_lone; }
template <class K> void ensure_dynamic_smem(K, size_t, const char*) {}
inline bool clusters_in_waves(int64_t blocks, int clusters, int64_t splits, int64_t slots) {
  return clusters > 0 && ceil_div(blocks, int64_t(clusters)) <= ceil_div(blocks * splits, slots);
}
template <int BM, int BN, int MinBlocks> struct Cfg {
  static constexpr int kBM = BM, kBN = BN, kMinBlocks = MinBlocks, kBKBytes = 128, kThreads = 384, kBK = 64;
  template <class T> static constexpr size_t smem_bytes() { return 1000; }
};
using WgmmaWide = Cfg<128, 256, 1>;
using WgmmaLarge = Cfg<128, 128, 2>;
using WgmmaMedium = Cfg<128, 64, 3>;
struct Half { short x; };
namespace old_ {
#include "old.inc"
}
namespace new_ {
#include "new.inc"
}
int main() {
  std::mt19937_64 rng(113);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int sms_options[] = {132, 114, 78, 16};
  int64_t checked = 0, mismatches = 0, split_picks = 0, tail_picks = 0;
  auto same = [](const auto& a, const auto& b) {
    return a.splits == b.splits && std::memcmp(&a.time, &b.time, sizeof(double)) == 0 &&
           a.whole_tiles == b.whole_tiles && a.lone == b.lone;
  };
  for (int i = 0; i < 400000; ++i) {
    g_sms = sms_options[uni(0, 3)];
    for (int s = 2; s <= kMaxClusterSplits; ++s) {
      g_active[s] = uni(0, 9) == 0 ? 0 : int(uni(1, 2 * g_sms / s));
      g_lone[s] = uni(0, 9) == 0 ? 0 : int(uni(1, g_sms / s));
    }
    TcConv cv{};
    const int taps[] = {1, 1, 1, 9, 9, 4, 49, 2, 3, 25};
    const int rs = taps[uni(0, 9)];
    cv.R = rs, cv.S = 1;
    cv.rows = uni(0, 3) == 0 ? uni(1, 2000) : uni(1, 400000);
    cv.outputs = int(uni(1, 2048));
    cv.groups = uni(0, 7) == 0 ? int(uni(2, 8)) : 1;
    cv.reduced = int(uni(0, 4) == 0 ? uni(1, 64) : uni(1, 4096));
    cv.packed = uni(0, 19) == 0;
    cv.tap_shift = int(uni(0, 3));
    const bool tail = uni(0, 1);
#define CHECK(T, C)                                                                         \
  {                                                                                       \
    const auto a = old_::cluster_split_estimate<T, C>(0, cv, tail);                       \
    const auto b = new_::cluster_split_estimate<T, C>(0, cv, tail);                       \
    ++checked;                                                                            \
    split_picks += a.splits > 1;                                                          \
    tail_picks += a.whole_tiles > 0;                                                      \
    if (!same(a, b) && ++mismatches < 10)                                                 \
      std::printf("mismatch %s %s rs %d rows %lld out %d: %d %.17g | %d %.17g\n", #T, #C, rs, \
                  (long long)cv.rows, cv.outputs, a.splits, a.time, b.splits, b.time);    \
  }
    CHECK(float, WgmmaLarge) CHECK(float, WgmmaWide) CHECK(Half, WgmmaLarge) CHECK(Half, WgmmaWide)
    // grad_weight's estimate.
    const int64_t tiles = uni(1, 3000), positions = uni(1, 2000000), rule = uni(1, 64), cap = uni(rule, 256);
    const int64_t slice = uni(1, 1 << 22);
    const bool weigh = uni(0, 1);
    const double hbm = uni(0, 1) ? 3.6e6 : 1.9e6;
    const int64_t ga = old_::weight_grad_split_estimate<WgmmaLarge>(g_active, tiles, positions, rule, cap, slice, weigh, hbm);
    const int64_t gb = new_::weight_grad_split_estimate<WgmmaLarge>(g_active, tiles, positions, rule, cap, slice, weigh, hbm);
    ++checked;
    if (ga != gb && ++mismatches < 10) std::printf("gw mismatch %lld %lld\n", (long long)ga, (long long)gb);
  }
  std::printf("checked %lld estimates, %lld mismatches (%lld conv picks split, %lld of them last-wave)\n",
              (long long)checked, (long long)mismatches, (long long)split_picks, (long long)tail_picks);
  return mismatches != 0;
}
