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
  bool tail = false;
  const char* operand = nullptr;
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

static int pass_slot(const char* pass) {
  return std::strcmp(pass, "forward") == 0 ? 0 : std::strcmp(pass, "grad_input") == 0 ? 1 : 2;
}

void record_last_choice(const char* pass, const char* config, int splits) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int slot = pass_slot(pass);
  if (slot == 0)
    for (auto& c : g_last) c = LastChoice{};
  g_last[slot] = {pass, config, splits};
}

void record_last_splits(const char* pass, int splits) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_last[pass_slot(pass)].splits = splits;
}

void record_last_tail_splits(const char* pass) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_last[pass_slot(pass)].tail = true;
}

void record_last_operand(const char* pass, const char* source) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_last[pass_slot(pass)].operand = source;
}

std::string last_choice() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string text;
  for (const auto& c : g_last) {
    if (c.pass == nullptr) continue;
    text += (text.empty() ? "" : " ") + std::string(c.pass) + ":" + c.config + "/splits=" + std::to_string(c.splits);
    if (c.tail) text += "/tail";
    if (c.operand != nullptr) text += std::string("/a=") + c.operand;
  }
  return text;
}

}  // namespace torchconv
