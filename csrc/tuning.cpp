#include "tuning.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace torchconv {
namespace {
std::atomic<bool> g_tuning{false};
std::atomic<int64_t> g_generation{0};
std::mutex g_mutex;
std::map<std::string, std::string>& choices() {
  static auto* m = new std::map<std::string, std::string>();
  return *m;
}
struct LastChoice {
  const char* pass = nullptr;
  const char* config = "";
  int splits = 0;
};
// One slot per pass of the last call (forward, grad_input, grad_weight); a forward clears the
// others. Written and read under g_mutex.
constexpr int kPasses = 3;
LastChoice g_last[kPasses];
}  // namespace

bool tuning_enabled() { return g_tuning.load(std::memory_order_relaxed); }
void set_tuning_enabled(bool on) { g_tuning.store(on, std::memory_order_relaxed); }

bool tuned_choice(const std::string& key, std::string* choice) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = choices().find(key);
  if (it == choices().end()) return false;
  *choice = it->second;
  return true;
}

void record_tuned_choice(const std::string& key, const std::string& choice) {
  std::lock_guard<std::mutex> lock(g_mutex);
  choices()[key] = choice;
}

int64_t tuned_choice_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return int64_t(choices().size());
}

std::vector<std::pair<std::string, std::string>> tuned_choice_list() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {choices().begin(), choices().end()};
}

void clear_tuned_choices() {
  std::lock_guard<std::mutex> lock(g_mutex);
  choices().clear();
  g_generation.fetch_add(1, std::memory_order_relaxed);
}

int64_t tuned_choices_generation() { return g_generation.load(std::memory_order_relaxed); }

void record_last_choice(const char* pass, const char* config, int splits) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int slot = std::strcmp(pass, "forward") == 0 ? 0 : std::strcmp(pass, "grad_input") == 0 ? 1 : 2;
  if (slot == 0)
    for (auto& c : g_last) c = LastChoice{};
  g_last[slot] = {pass, config, splits};
}

std::string last_choice() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string text;
  for (const auto& c : g_last) {
    if (c.pass == nullptr) continue;
    text += (text.empty() ? "" : " ") + std::string(c.pass) + ":" + c.config + "/splits=" + std::to_string(c.splits);
  }
  return text;
}

namespace {
// The index of a tile config name, or -1.
int find_direct_tile(const std::string& name) {
  for (int i = 0; i < kDirectTileCount; ++i)
    if (name == kDirectTileNames[i]) return i;
  return -1;
}
// Like find_direct_tile, but an unknown non-empty name is a ValueError; `what` names the setting.
int direct_tile_index(const std::string& name, const char* what) {
  const int index = find_direct_tile(name);
  TORCH_CHECK_VALUE(index >= 0 || name.empty(), what, " must be wide or small (or empty for the rule), got '", name,
                    "'");
  return index;
}
// -2 marks a bad TORCHCONV_DIRECT_TILE: it raises at each direct call until set_direct_tile replaces it.
std::atomic<int>& forced_tile() {
  static std::atomic<int> forced{[] {
    const char* env = std::getenv("TORCHCONV_DIRECT_TILE");
    if (env == nullptr || *env == 0) return -1;
    const int index = find_direct_tile(env);
    return index >= 0 ? index : -2;
  }()};
  return forced;
}
}  // namespace

int forced_direct_tile() {
  const int forced = forced_tile().load(std::memory_order_relaxed);
  if (forced == -2) direct_tile_index(std::getenv("TORCHCONV_DIRECT_TILE"), "TORCHCONV_DIRECT_TILE");
  return forced;
}
void set_forced_direct_tile(const std::string& name) {
  forced_tile().store(direct_tile_index(name, "torchconv._C.set_direct_tile's name"), std::memory_order_relaxed);
}

namespace {
std::atomic<int> g_forced_grad_input{-1};
}
int forced_direct_grad_input() { return g_forced_grad_input.load(std::memory_order_relaxed); }
void set_forced_direct_grad_input(const std::string& name) {
  int index = -1;
  for (int i = 0; i < int(std::size(kDirectGradInputNames)); ++i)
    if (name == kDirectGradInputNames[i]) index = i;
  TORCH_CHECK_VALUE(index >= 0 || name.empty(),
                    "torchconv._C.set_direct_grad_input's name must be phases or gather (or empty for the rule), got '",
                    name, "'");
  g_forced_grad_input.store(index, std::memory_order_relaxed);
}

}  // namespace torchconv
