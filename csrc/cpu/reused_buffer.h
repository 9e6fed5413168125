// A CPU kernel's buffer for the length of one call, reused by the calls after it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include <ATen/ATen.h>

#include "../conv_shape.h"
#include "../workspace.h"

namespace torchconv {

// `count` elements of T for the caller's scope, as a tensor of `sizes` (their product is `count`),
// not initialized (NaN while outputs are poisoned, as new_workspace's). They come from one
// process-wide buffer per T while no other call holds it and they
// fit the workspace limit: a transform many times the weight's size (a trainable Winograd call's U)
// freshly allocated each call is mapped from the system and page-faulted in again every time, which
// cost about as much as the transform. A call that finds the buffer held (another thread's) or needs
// more than the limit gets a tensor of its own. The buffer keeps its largest size until the process
// ends (at most the workspace limit at the time it grew).
template <typename T>
class ReusedBuffer {
 public:
  ReusedBuffer(at::IntArrayRef sizes, const at::TensorOptions& options) {
    int64_t count = 1;
    for (const int64_t s : sizes) count *= s;
    Slot& slot = shared_slot();
    {
      std::lock_guard<std::mutex> lock(slot.mutex);
      if (!slot.held && count * int64_t(sizeof(T)) <= workspace_limit_bytes()) {
        if (slot.capacity < count) {
          // The smaller one freed first; capacity stays 0 should the allocation throw.
          slot.data.reset(), slot.capacity = 0;
          slot.data.reset(new T[count]);
          slot.capacity = count;
        }
        slot.held = held_ = true;
        tensor_ = at::from_blob(slot.data.get(), sizes, options);
        poison_if_on(tensor_);
        return;
      }
    }
    tensor_ = new_workspace(sizes, options);
  }
  ~ReusedBuffer() {
    if (!held_) return;
    tensor_ = at::Tensor();
    Slot& slot = shared_slot();
    std::lock_guard<std::mutex> lock(slot.mutex);
    slot.held = false;
  }
  ReusedBuffer(const ReusedBuffer&) = delete;
  ReusedBuffer& operator=(const ReusedBuffer&) = delete;

  // Valid while this object lives.
  const at::Tensor& tensor() const { return tensor_; }

 private:
  struct Slot {
    std::mutex mutex;
    std::unique_ptr<T[]> data;
    int64_t capacity = 0;
    bool held = false;
  };
  static Slot& shared_slot() {
    static Slot slot;
    return slot;
  }

  at::Tensor tensor_;
  bool held_ = false;
};

}  // namespace torchconv
