// core/storage.cpp — a Storage takes its bytes from an allocator and returns them when the
// last tensor viewing it goes away.
#include "core/storage.h"

namespace mg {

Storage::Storage(size_t nbytes, const Device& device) : Storage(nbytes, device, allocator_for(device)) {}

Storage::Storage(size_t nbytes, const Device& device, Allocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator), pinned_(&allocator == &pinned_allocator()) {
  if (nbytes > 0) data_ = allocator.allocate(nbytes);
}

Storage::~Storage() {
  if (data_ != nullptr) allocator_->deallocate(data_, nbytes_);
}

}  // namespace mg
