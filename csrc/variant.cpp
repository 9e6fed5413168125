#include "variant.h"

#include <atomic>
#include <map>

#include <c10/util/Exception.h>

namespace torchconv {
namespace {

struct Choice {
  std::vector<std::string> names;
  std::atomic<int> index{0};
};

std::map<std::string, Choice>& table() {
  static auto* t = [] {
    auto* m = new std::map<std::string, Choice>();
    (*m)["direct"].names = {"auto", "phases", "gather"};
    (*m)["gemm"].names = {"implicit", "explicit"};
    (*m)["winograd"].names = {"auto", "fused", "staged", "f4x4"};
    return m;
  }();
  return *t;
}

Choice& choice(const std::string& algorithm) {
  auto it = table().find(algorithm);
  if (it == table().end()) {
    std::string known;
    for (const auto& kv : table()) known += (known.empty() ? "'" : ", '") + kv.first + "'";
    TORCH_CHECK_VALUE(false, "torchconv.set_variant: algorithm must be one with variants (", known, "), got '",
                      algorithm, "'");
  }
  return it->second;
}

}  // namespace

WinogradVariant winograd_variant() {
  return static_cast<WinogradVariant>(choice("winograd").index.load(std::memory_order_relaxed));
}

DirectVariant direct_variant() {
  return static_cast<DirectVariant>(choice("direct").index.load(std::memory_order_relaxed));
}

GemmVariant gemm_variant() {
  return static_cast<GemmVariant>(choice("gemm").index.load(std::memory_order_relaxed));
}

const std::vector<std::string>& variants(const std::string& algorithm) { return choice(algorithm).names; }

std::string get_variant(const std::string& algorithm) {
  Choice& c = choice(algorithm);
  return c.names[c.index.load(std::memory_order_relaxed)];
}

void set_variant(const std::string& algorithm, const std::string& name) {
  Choice& c = choice(algorithm);
  for (size_t i = 0; i < c.names.size(); ++i) {
    if (c.names[i] == name) {
      c.index.store(int(i), std::memory_order_relaxed);
      return;
    }
  }
  std::string known;
  for (const auto& n : c.names) known += (known.empty() ? "'" : ", '") + n + "'";
  TORCH_CHECK_VALUE(false, "torchconv.set_variant: variant must be one of ", known, " for '", algorithm, "', got '",
                    name, "'");
}

}  // namespace torchconv
