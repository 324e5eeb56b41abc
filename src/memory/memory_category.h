// What a block of device memory holds, for the breakdown of a peak: every allocation is tagged
// with the calling thread's current category (a scope sets it) and may be re-tagged later (a
// gradient that autograd stole from backward's temporaries). CachingAllocator keeps the bytes
// per category now and at the moment of the peak, so the breakdown adds up to the peak exactly.
#pragma once

#include <array>
#include <cstdint>

namespace headroom {

enum class MemoryCategory : uint8_t {
  temporaries = 0,   // anything not tagged otherwise: backward's and the optimizer's work
                     // buffers, the data batch, loss scaling
  parameters,        // the model's weights (master weights in mixed precision)
  gradients,         // parameters' .grad
  optimizer_states,  // what the optimizer keeps between steps (moments, quantisation scales)
  activations,       // allocated by a forward pass or its recompute: what autograd saves for
                     // backward, the autocast casts of the weights included
};
inline constexpr int kNumMemoryCategories = 5;

// "temporaries", "parameters", "gradients", "optimizer_states", "activations".
const char* memory_category_name(MemoryCategory category);

using CategoryBytes = std::array<int64_t, kNumMemoryCategories>;

// The calling thread's category for new allocations (temporaries when no scope is open).
MemoryCategory current_memory_category();

// Sets the calling thread's category while it lives; scopes nest.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

}  // namespace headroom
