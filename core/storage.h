// core/storage.h — a reference-counted block of device memory that tensors view.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "multigrad/core/allocator.h"
#include "multigrad/core/device.h"

namespace mg {

class Storage {
 public:
  // Allocates nbytes on device (zero bytes allocates nothing and data() is null).
  Storage(size_t nbytes, const Device& device);
  // Uses memory from a specific allocator (e.g. pinned host memory, which is device cpu:0).
  Storage(size_t nbytes, const Device& device, Allocator& allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const {
    if (released_) [[unlikely]] throw_released();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }
  bool pinned() const { return pinned_; }

  // How many times the bytes were changed in place (copy_, an optimizer's update) since the
  // storage was made. Autograd compares it with its value when an op saved a tensor for
  // backward (PyTorch's version counter; views share it, as they share the bytes).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Frees the bytes while tensors still view the storage, and allocates them again (their values
  // undefined): ZeRO stage 3 keeps a unit's full parameters only around its forward and backward,
  // and the tensors autograd saved see the bytes when they are back (PyTorch's storage resize_(0)
  // under FSDP). Reading a released storage's data() is an error.
  void release();
  void restore();
  bool released() const { return released_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  bool pinned_ = false;
  std::atomic<uint64_t> version_{0};
  bool released_ = false;

  [[noreturn]] void throw_released() const;
};

}  // namespace mg
