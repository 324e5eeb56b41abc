// The thread-local memory category that new allocations are tagged with.
#include "memory/memory_category.h"

namespace headroom {

namespace {

thread_local MemoryCategory t_category = MemoryCategory::temporaries;

}  // namespace

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::temporaries:
      return "temporaries";
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_states:
      return "optimizer_states";
    case MemoryCategory::activations:
      return "activations";
  }
  return "unknown";
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(t_category) {
  t_category = category;
}

MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }

}  // namespace headroom
