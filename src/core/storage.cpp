// Storage allocation through the device's registered allocator.
#include "core/storage.h"

#include "core/allocator.h"

namespace headroom {

Storage::Storage(size_t nbytes, Device device) : Storage(nbytes, device, allocator_for(device)) {}

Storage::Storage(size_t nbytes, Device device, Allocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator) {
  data_ = allocator_->allocate(nbytes);
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_);
}

void Storage::release() {
  if (data_) allocator_->deallocate(data_);
  data_ = nullptr;
}

void Storage::materialize() {
  if (!data_ && nbytes_ > 0) data_ = allocator_->allocate(nbytes_);
}

}  // namespace headroom
