// core/storage.cpp — a Storage takes its bytes from an allocator and returns them when the
// last tensor viewing it goes away.
#include "multigrad/core/storage.h"

#include "multigrad/core/error.h"

namespace mg {

Storage::Storage(size_t nbytes, const Device& device) : Storage(nbytes, device, allocator_for(device)) {}

Storage::Storage(size_t nbytes, const Device& device, Allocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator), pinned_(&allocator == &pinned_allocator()) {
  if (nbytes > 0) data_ = allocator.allocate(nbytes);
}

void Storage::release() {
  if (released_) return;
  if (data_ != nullptr) allocator_->deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::restore() {
  if (!released_) return;
  if (nbytes_ > 0) data_ = allocator_->allocate(nbytes_);
  released_ = false;
}

void Storage::throw_released() const {
  MG_ERROR("a tensor's storage (", nbytes_, " bytes on ", device_, ") was released: ZeRO stage 3 keeps a unit's "
           "parameters only during its forward and backward (run the model through ZeroOptimizer::model(), or "
           "call gather_parameters() first)");
}

Storage::~Storage() {
  if (data_ != nullptr) allocator_->deallocate(data_, nbytes_);
}

}  // namespace mg
