// Upper bound on the scratch memory an algorithm may allocate for one call (im2col matrices,
// Winograd V/M tiles). Algorithms process the batch in chunks that fit.
#pragma once

#include <cstdint>

namespace torchconv {

constexpr int64_t kDefaultWorkspaceLimitBytes = int64_t(256) << 20;  // 256 MiB

int64_t workspace_limit_bytes();
void set_workspace_limit_bytes(int64_t bytes);

// Columns of bytes_per_column each that fit in the workspace limit: at least 1, at most total.
int64_t columns_per_chunk(int64_t total_columns, int64_t bytes_per_column);

// Scratch bytes the last operator call in the process allocated (the benchmark reports it; backward
// operators run on autograd's threads, so this is not per thread).
void record_workspace_bytes(int64_t bytes);
int64_t last_workspace_bytes();

}  // namespace torchconv
