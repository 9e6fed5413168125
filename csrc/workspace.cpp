#include "workspace.h"

#include <algorithm>
#include <atomic>
#include <string>

#include <c10/util/Exception.h>

namespace torchconv {
namespace {
std::atomic<int64_t> g_workspace_limit{kDefaultWorkspaceLimitBytes};
// Process-wide, not per thread: autograd runs backward operators on its own device threads.
std::atomic<int64_t> g_last_workspace_bytes{0};
std::atomic<bool> g_split_sums_through_workspace{false};
}  // namespace

void set_split_sums_through_workspace(bool on) { g_split_sums_through_workspace.store(on, std::memory_order_relaxed); }
bool split_sums_through_workspace() { return g_split_sums_through_workspace.load(std::memory_order_relaxed); }

void record_workspace_bytes(int64_t bytes) { g_last_workspace_bytes.store(bytes, std::memory_order_relaxed); }
int64_t last_workspace_bytes() { return g_last_workspace_bytes.load(std::memory_order_relaxed); }

int64_t workspace_limit_bytes() { return g_workspace_limit.load(std::memory_order_relaxed); }

void set_workspace_limit_bytes(int64_t bytes) {
  TORCH_CHECK_VALUE(bytes > 0, "torchconv.set_workspace_limit: bytes must be positive, got ", std::to_string(bytes));
  g_workspace_limit.store(bytes, std::memory_order_relaxed);
}

int64_t columns_per_chunk(int64_t total_columns, int64_t bytes_per_column) {
  const int64_t fit = workspace_limit_bytes() / std::max<int64_t>(bytes_per_column, 1);
  return std::max<int64_t>(1, std::min(total_columns, fit));
}

}  // namespace torchconv
