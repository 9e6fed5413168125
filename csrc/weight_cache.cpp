#include "weight_cache.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

namespace torchconv {
namespace {

struct Entry {
  c10::weak_intrusive_ptr<c10::TensorImpl> owner;
  uint32_t version;
  const void* data;
  std::vector<int64_t> sizes, strides;
  at::Tensor value;
};

using Key = std::pair<const c10::TensorImpl*, std::string>;

// Bounded: a process that creates many short-lived weights (gradcheck, tuning) starts over if live
// entries alone exceed the bound. Dead ones (their weight freed) are dropped at every insert, so a
// freed weight's transform is held at most until the next one is computed.
constexpr size_t kMaxEntries = 512;

std::mutex g_mutex;
std::map<Key, Entry>& cache() {
  static auto* entries = new std::map<Key, Entry>();  // never destroyed: outlives static tensors
  return *entries;
}

bool matches(const Entry& e, const at::Tensor& w, uint32_t version) {
  if (e.owner.expired() || e.version != version || e.data != w.const_data_ptr()) return false;
  return w.sizes().equals(e.sizes) && w.strides().equals(e.strides);  // no allocation per look-up
}

void evict_dead(std::map<Key, Entry>& entries) {
  for (auto it = entries.begin(); it != entries.end();) it = it->second.owner.expired() ? entries.erase(it) : ++it;
  if (entries.size() >= kMaxEntries) entries.clear();
}

// Set while a TransientWeightScope that is transient lives on this thread.
thread_local bool t_transient_weights = false;

}  // namespace

bool weight_transform_is_cached(const at::Tensor& weight) {
  return !t_transient_weights && !weight.is_inference() &&
         (!weight.requires_grad() || c10::InferenceMode::is_enabled());
}

TransientWeightScope::TransientWeightScope(bool transient) : previous_(t_transient_weights) {
  t_transient_weights = previous_ || transient;
}
TransientWeightScope::~TransientWeightScope() { t_transient_weights = previous_; }

namespace detail {

at::Tensor cached_transform(const at::Tensor& weight, const std::string& tag,
                            const std::function<at::Tensor()>& compute) {
  c10::TensorImpl* impl = weight.unsafeGetTensorImpl();
  const uint32_t version = impl->version_counter().current_version();
  const Key key{impl, tag};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = cache().find(key);
    if (it != cache().end() && matches(it->second, weight, version)) return it->second.value;
  }
  at::Tensor value = compute();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& entries = cache();
  evict_dead(entries);
  entries.insert_or_assign(key, Entry{c10::weak_intrusive_ptr<c10::TensorImpl>(weight.getIntrusivePtr()), version,
                       weight.const_data_ptr(), weight.sizes().vec(), weight.strides().vec(), value});
  return value;
}

}  // namespace detail

int64_t weight_cache_size() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return int64_t(cache().size());
}

void clear_weight_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  cache().clear();
}

}  // namespace torchconv
