// The bytes behind one or more tensors (views share a Storage). Obtained from the device's
// allocator and returned to it when the last tensor using it goes away.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace headroom {

class Allocator;

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // On the meta device this is an address with no memory behind it: never dereference it.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
};

}  // namespace headroom
