#include "plans.h"

#include <array>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

namespace torchconv {
namespace {

using Backends = std::map<c10::DeviceType, AlgorithmPlans>;

std::array<Backends, kAlgorithmCount>& registry() {
  static auto* r = new std::array<Backends, kAlgorithmCount>();
  return *r;
}

std::string env_name(Algorithm algorithm) {
  std::string name = "TORCHCONV_";
  for (const char* c = kAlgorithmNames[algorithm]; *c; ++c) name += char(std::toupper(*c));
  return name + "_CONFIG";
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? "none" : s;
}

int config_index(Algorithm algorithm, const std::string& name, const std::string& what) {
  if (name.empty()) return -1;
  const auto names = configs(algorithm);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return int(i);
  TORCH_CHECK_VALUE(false, what, " must name a config of '", kAlgorithmNames[algorithm], "' (",
                    quoted_list(names), ") or be empty for the rule, got '", name, "'");
  return -1;
}

// Per algorithm: kUnread until the environment is read, kBadEnvironment while it names no config.
constexpr int kUnread = -2, kBadEnvironment = -3;
std::array<std::atomic<int>, kAlgorithmCount>& forced() {
  static auto* f = [] {
    auto* a = new std::array<std::atomic<int>, kAlgorithmCount>();
    for (auto& x : *a) x.store(kUnread);
    return a;
  }();
  return *f;
}

}  // namespace

ConvProblem make_problem(const ConvShape& shape, const at::Tensor& input) {
  return {shape,
          input.scalar_type(),
          input.dim() == 4 && input.suggest_memory_format() == at::MemoryFormat::ChannelsLast,
          input.device().type(),
          input.device().index(),
          false};
}

bool register_plans(Algorithm algorithm, c10::DeviceType backend, AlgorithmPlans plans) {
  registry()[algorithm][backend] = std::move(plans);
  return true;
}

Algorithm algorithm_from_name(const std::string& name, const char* what) {
  for (int i = 0; i < kAlgorithmCount; ++i)
    if (name == kAlgorithmNames[i]) return Algorithm(i);
  TORCH_CHECK_VALUE(false, what, " must be one of 'direct', 'csg', 'gemm', 'winograd', got '", name, "'");
  return kDirect;
}

std::string unsupported_reason(Algorithm algorithm, const ConvProblem& problem) {
  const Backends& backends = registry()[algorithm];
  auto it = backends.find(problem.device_type);
  if (it == backends.end() || it->second.can_implement == nullptr)
    return std::string("this build has no ") + c10::DeviceTypeName(problem.device_type, true) + " kernel for '" +
           kAlgorithmNames[algorithm] + "'";
  if (problem.dtype != at::kFloat && problem.dtype != at::kDouble && problem.dtype != at::kHalf &&
      problem.dtype != at::kBFloat16)
    return std::string("its kernels take float32, float64, float16 or bfloat16, not ") + c10::toString(problem.dtype);
  // Limits that depend on the device (shared memory per block) are read off the problem's device.
  const c10::OptionalDeviceGuard guard(problem.device_type == c10::DeviceType::CPU
                                           ? std::nullopt
                                           : std::optional<c10::Device>(c10::Device(problem.device_type,
                                                                                    problem.device_index)));
  return it->second.can_implement(problem);
}

void check_can_implement(const char* op, Algorithm algorithm, const ConvProblem& problem) {
  const std::string reason = unsupported_reason(algorithm, problem);
  TORCH_CHECK_VALUE(reason.empty(), "torchconv.", op, ": algorithm '", kAlgorithmNames[algorithm],
                    "' cannot compute this convolution: ", reason);
}

std::vector<std::string> configs(Algorithm algorithm) {
  const Backends& backends = registry()[algorithm];
  auto it = backends.find(c10::DeviceType::CUDA);
  return it == backends.end() ? std::vector<std::string>{} : it->second.configs;
}

int forced_config(Algorithm algorithm) {
  std::atomic<int>& slot = forced()[algorithm];
  int value = slot.load(std::memory_order_relaxed);
  if (value == kUnread) {
    const char* env = std::getenv(env_name(algorithm).c_str());
    value = -1;
    if (env != nullptr && *env != 0) {
      value = kBadEnvironment;
      for (const auto& name : configs(algorithm))
        if (name == env) value = config_index(algorithm, env, env_name(algorithm));
    }
    int expected = kUnread;
    slot.compare_exchange_strong(expected, value, std::memory_order_relaxed);
    value = slot.load(std::memory_order_relaxed);
  }
  if (value == kBadEnvironment) config_index(algorithm, std::getenv(env_name(algorithm).c_str()), env_name(algorithm));
  return value;
}

void set_forced_config(Algorithm algorithm, const std::string& name) {
  forced()[algorithm].store(config_index(algorithm, name, "torchconv.set_config's name"), std::memory_order_relaxed);
}

std::string forced_config_name(Algorithm algorithm) {
  const int index = forced_config(algorithm);
  return index < 0 ? "" : configs(algorithm)[index];
}

}  // namespace torchconv
