// Where thread-block clusters put their blocks: whether a launch of a few clusters, on a kernel that
// may hold two blocks an SM, gives every block an SM to itself.
//
// What it answers. The GEMM's split estimate (cluster_split_estimate, gemm_tc.cu) counts a split's
// blocks at the lone pace -- one block an SM -- only where its clusters are fewer than the GPU holds
// at one block an SM (the occupancy query with more than half an SM's shared memory a block). The
// small-batch sweep (docs/precision.md, "Small batches") found clusters of 5 and 6 slower than of 4
// where blocks x splits alone fitted the SMs; our reading was that a cluster's blocks share a GPC, so
// clusters of 5 or 6 leave each GPC's last SMs idle and the rest take two blocks an SM. This program
// prints, for each cluster size, the occupancy query's clusters at two and at one block an SM, and for
// launches of a given count of clusters (all resident at once: each block spins until every block has
// started), how many SMs the blocks used and the most blocks any SM held.
//
// Build and run on a Hopper GPU (stand-alone, no PyTorch):
//   nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/cluster_placement benchmarks/micro/cluster_placement.cu
//   /tmp/cluster_placement > benchmarks/results/cluster-placement-h200.json
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

constexpr int kThreads = 256;

// Each block records its SM, then waits until all `blocks` have started (so that the launch's
// placement is the one of all its clusters resident together) or a time limit passes (a launch whose
// blocks cannot all be resident records that in `timed_out`).
__global__ void placement_kernel(int* smid, unsigned* started, int blocks, int* timed_out) {
  extern __shared__ char smem[];
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid[blockIdx.x] = int(id);
    smem[0] = char(id);
    atomicAdd(started, 1u);
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (atomicAdd(started, 0u) < unsigned(blocks)) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > 200000000ull) {  // 200 ms
        atomicExch(timed_out, 1);
        break;
      }
    }
  }
  __syncthreads();
}

int main() {
  int device = 0, sms = 0, smem_sm = 0, smem_optin = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  CHECK(cudaFuncSetAttribute(placement_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin));
  // Two blocks an SM fit (a third does not); one block an SM (more than half the SM's memory).
  const size_t smem_two = size_t(smem_sm) / 3 + 1024, smem_one = size_t(smem_sm) / 2 + 1;

  // A launch of `blocks` blocks in clusters of `size`; `attr` must outlive the config.
  auto cluster_config = [&](cudaLaunchAttribute& attr, int blocks, int size, size_t smem) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(blocks));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(size), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    config.attrs = &attr, config.numAttrs = 1;
    return config;
  };
  auto query = [&](size_t smem, int size) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = cluster_config(attr, size, size, smem);
    int clusters = -1;
    if (cudaOccupancyMaxActiveClusters(&clusters, placement_kernel, &config) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return clusters;
  };

  int *smid = nullptr, *timed_out = nullptr;
  unsigned* started = nullptr;
  CHECK(cudaMalloc(&smid, sizeof(int) * 4096));
  CHECK(cudaMalloc(&started, sizeof(unsigned)));
  CHECK(cudaMalloc(&timed_out, sizeof(int)));

  std::printf("{\"gpu\": \"%s\", \"sms\": %d, \"smem_per_sm\": %d, \"capacity\": [", prop.name, sms, smem_sm);
  for (int size = 1; size <= 8; ++size)
    std::printf("%s{\"size\": %d, \"clusters_two_an_sm\": %d, \"clusters_one_an_sm\": %d}", size > 1 ? ", " : "",
                size, query(smem_two, size), query(smem_one, size));
  std::printf("],\n \"launches\": [");
  bool first = true;
  for (int size = 2; size <= 8; ++size) {
    const int lone = query(smem_one, size);
    // Counts around the lone capacity and the launches of the suite's small batches.
    std::vector<int> counts = {4, 12, 16, 20, 24, 26, 32, 40, lone - 1, lone, lone + 1};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (int clusters : counts) {
      const int blocks = clusters * size;
      if (clusters < 1 || blocks > 2 * sms || blocks > 4096) continue;
      CHECK(cudaMemset(started, 0, sizeof(unsigned)));
      CHECK(cudaMemset(timed_out, 0, sizeof(int)));
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t config = cluster_config(attr, blocks, size, smem_two);
      CHECK(cudaLaunchKernelEx(&config, placement_kernel, smid, started, blocks, timed_out));
      CHECK(cudaDeviceSynchronize());
      std::vector<int> ids(blocks);
      int late = 0;
      CHECK(cudaMemcpy(ids.data(), smid, sizeof(int) * blocks, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(&late, timed_out, sizeof(int), cudaMemcpyDeviceToHost));
      std::vector<int> per_sm(sms, 0);
      for (int id : ids) per_sm[id]++;
      const int used = int(std::count_if(per_sm.begin(), per_sm.end(), [](int n) { return n > 0; }));
      const int most = *std::max_element(per_sm.begin(), per_sm.end());
      const int shared = int(std::count_if(per_sm.begin(), per_sm.end(), [](int n) { return n > 1; }));
      std::printf("%s\n  {\"size\": %d, \"clusters\": %d, \"blocks\": %d, \"lone_capacity\": %d, \"sms_used\": %d, "
                  "\"sms_with_two\": %d, \"most_on_an_sm\": %d, \"not_all_resident\": %d}",
                  first ? "" : ",", size, clusters, blocks, lone, used, shared, most, late);
      first = false;
    }
  }
  std::printf("\n ]}\n");
  return 0;
}
