// Stands in for the CUDA backend in a CPU-only build: asking for a cuda device says why it is
// not there instead of failing to link or reporting zero memory.
#include "core/error.h"
#include "memory/device_memory.h"

namespace headroom {
namespace {

std::unique_ptr<DeviceAllocator> no_cuda_device_allocator(int index) {
  throw NotImplementedError(str_cat("device cuda:", index,
                                    " is not available: this build of headroom has no CUDA "
                                    "backend (configure with HEADROOM_CUDA=ON where nvcc exists)"));
}

const bool kRegistered =
    (register_device_allocator(DeviceType::cuda, no_cuda_device_allocator), true);

}  // namespace
}  // namespace headroom
