// The bytes behind one or more tensors (views share a Storage). Obtained from the device's
// allocator and returned to it when the last tensor using it goes away.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace headroom {

class Allocator;

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // From `allocator` rather than the device's own (pinned host memory for a CPU storage).
  Storage(size_t nbytes, Device device, Allocator& allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // On the meta device this is an address with no memory behind it: never dereference it.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Allocator* allocator() const { return allocator_; }

  // ZeRO-3 frees a parameter's memory between its uses and brings it back in place, as FSDP
  // resizes a flat parameter's storage to 0 and back: every tensor on this storage sees the new
  // memory (its contents undefined until written). The version is left alone: a refill is not
  // a change autograd must catch. release() on a released storage does nothing, as does
  // materialize() on a materialized one.
  void release();
  void materialize();
  bool materialized() const { return data_ != nullptr || nbytes_ == 0; }

  // Bumped by every in-place write through a tensor, so autograd can tell that a tensor it
  // saved for backward was changed after it was saved (see autograd/saved_tensor.h).
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  uint32_t version_ = 0;
};

}  // namespace headroom
