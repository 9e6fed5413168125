// The plan registry: for each algorithm and backend, what it can compute (can_implement), its
// named tile configs, and one way to force a config. This is the only place an algorithm's limits
// are known: the operators check them before launching, and torchconv.candidate_algorithms /
// unsupported_reason ask them through torchconv._C.unsupported_reason, so Python keeps no
// geometry of its own.
//
// Each backend file registers its algorithm at load time (register_plans), e.g. cuda/csg/csg.cu:
// the shared-memory geometry and indexing limits of the CSG kernels live next to them.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "conv_shape.h"

namespace torchconv {

enum Algorithm : int { kDirect = 0, kCsg = 1, kGemm = 2, kWinograd = 3 };
constexpr const char* kAlgorithmNames[] = {"direct", "csg", "gemm", "winograd"};
constexpr int kAlgorithmCount = int(std::size(kAlgorithmNames));

// Everything besides the call's tensors that decides whether an algorithm can run it.
struct ConvProblem {
  ConvShape shape;
  c10::ScalarType dtype;
  bool channels_last;  // the input is laid out N, H, W, C
  c10::DeviceType device_type;
  c10::DeviceIndex device_index;
  // torch.use_deterministic_algorithms(True): algorithms whose results depend on the order of
  // atomic additions decline. The operators leave this false and raise PyTorch's own alert instead.
  bool deterministic;
};

// The problem of an operator call (deterministic = false, see above).
ConvProblem make_problem(const ConvShape& shape, const at::Tensor& input);

// One algorithm on one backend.
struct AlgorithmPlans {
  // "" when the algorithm can compute `problem`; otherwise why not, as a sentence a user can act on.
  std::string (*can_implement)(const ConvProblem& problem) = nullptr;
  // Named tile configs a rule picks from and set_config can force (empty: the backend has none).
  std::vector<std::string> configs;
};

// Called once per algorithm and backend from a static initializer of the backend's file.
bool register_plans(Algorithm algorithm, c10::DeviceType backend, AlgorithmPlans plans);

// The algorithm's index for its name; ValueError naming `what` for an unknown one.
Algorithm algorithm_from_name(const std::string& name, const char* what);

// "" when `algorithm` has a kernel for the problem's device type that can compute it, else why not.
std::string unsupported_reason(Algorithm algorithm, const ConvProblem& problem);

// Raises ValueError "torchconv.<op>: algorithm '<name>' cannot compute this convolution: <reason>".
void check_can_implement(const char* op, Algorithm algorithm, const ConvProblem& problem);

// Config names of `algorithm` (its CUDA kernels' tile configs; the CPU kernels have none).
std::vector<std::string> configs(Algorithm algorithm);

// The config forced for `algorithm` (an index into configs()), or -1 when its rule picks. Forced by
// torchconv.set_config(algorithm, name) or, at start-up, TORCHCONV_<ALGORITHM>_CONFIG=<name>; an
// unknown name in the environment raises ValueError at each call until set_config replaces it.
int forced_config(Algorithm algorithm);
void set_forced_config(Algorithm algorithm, const std::string& name);  // "" goes back to the rule
std::string forced_config_name(Algorithm algorithm);                   // "" when the rule picks

// Groups small enough for the direct algorithm's depthwise specialist (csrc/cuda/direct/
// depthwise_kernels.cuh): at most 16 reduced channels and 16 destination channels per group, and
// at most 64 pairs. Each of its blocks re-reads the group's input planes for every destination
// channel, so it is for depthwise (1 x 1), channel multipliers (1 x m, and m x 1 in grad_input) and
// ResNeXt-like groups (4 x 4); not for an RGB stem (3 x 64), whose filters share each input plane in
// the tiled kernels. The CUDA kernels and the auto rule (torchconv._C.small_groups) both ask this.
constexpr int kSmallGroupMaxReduced = 16, kSmallGroupMaxOutputs = 16, kSmallGroupMaxPairs = 64;
inline bool small_groups(int64_t reduced, int64_t outputs) {
  return reduced >= 1 && outputs >= 1 && reduced <= kSmallGroupMaxReduced && outputs <= kSmallGroupMaxOutputs &&
         reduced * outputs <= kSmallGroupMaxPairs;
}

// Grouped layers (not depthwise) whose channels and filters per group are few enough for the CPU
// direct algorithm's kernels along the channels (csrc/cpu/grouped_nhwc.h): on planes at most
// kCpuGroupedMaxWidth outputs wide, where a pixel's filters of a group as the vector beat the tiles'
// short rows and the GEMM's and Winograd's product a group; and channels_last inputs at any width
// with 8 to 16 filters and 4 to 16 channels a group (ResNeXt's and RegNet's 8 and 16 a group at 28 and
// 56 wide), which need no transposing copies there and beat the GEMM's, the Winograd's and the tiles'
// small products a group, forward and backward. The others ran faster elsewhere: wider NCHW planes,
// 24 or more a group, fewer filters a group (a vector mostly empty) and a channel multiplier. The CPU
// kernels and the auto rule (torchconv._C.cpu_grouped) both ask this.
constexpr int64_t kCpuGroupedMaxPerGroup = 64, kCpuGroupedMaxWidth = 14;
constexpr int64_t kCpuGroupedWideMinChannels = 4, kCpuGroupedWideMinFilters = 8, kCpuGroupedWideMaxPerGroup = 16;
inline bool cpu_grouped(int64_t groups, int64_t reduced, int64_t outputs, int64_t output_width, bool channels_last) {
  if (groups <= 1 || reduced < 1 || outputs < 1 || reduced * outputs <= 1) return false;
  if (output_width <= kCpuGroupedMaxWidth) {
    return reduced <= kCpuGroupedMaxPerGroup && outputs <= kCpuGroupedMaxPerGroup;
  }
  return channels_last && reduced >= kCpuGroupedWideMinChannels &&
         reduced <= kCpuGroupedWideMaxPerGroup && outputs >= kCpuGroupedWideMinFilters &&
         outputs <= kCpuGroupedWideMaxPerGroup;
}

}  // namespace torchconv
