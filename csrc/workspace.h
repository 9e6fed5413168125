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

// The CPU kernels' chunks (the GEMM's unrolled columns, Winograd's V and M) hold at most this many
// bytes besides, so what one step writes the next reads from a core's cache, not from memory
// (workspace-sized chunks were up to 2x slower; 1 MB ones made the products too small).
constexpr int64_t kCpuChunkCacheBytes = int64_t(4) << 20;

// Scratch bytes the last operator call in the process allocated (the benchmark reports it; backward
// operators run on autograd's threads, so this is not per thread).
void record_workspace_bytes(int64_t bytes);
int64_t last_workspace_bytes();

// Testing aid: the tensor-core GEMM's split reductions add their sums through a workspace and a
// finishing kernel even where the GPU holds the clusters that would add them in shared memory. That
// path is taken where it cannot (a GPU or partition of fewer SMs than the rule counted, a forced
// config whose clusters do not fit); on a whole Hopper GPU no rule-sized call reaches it.
void set_split_sums_through_workspace(bool on);
bool split_sums_through_workspace();

}  // namespace torchconv
