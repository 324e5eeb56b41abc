// Helpers of the caching allocator tests: a fresh allocator with its own statistics over fake
// (meta) or real (cpu) memory, and one memory_stats() key of it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "memory/caching_allocator.h"

namespace headroom::memory_test {

inline std::unique_ptr<CachingAllocator> make_test_allocator(AllocatorConfig config, size_t limit,
                                                             bool real_memory) {
  return std::make_unique<CachingAllocator>(
      real_memory ? make_cpu_device_allocator() : make_meta_device_allocator(), config, limit);
}

inline int64_t stat(const CachingAllocator& a, const std::string& key) {
  const auto m = a.stats().to_map();
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << key;
  return it == m.end() ? -1 : it->second;
}

}  // namespace headroom::memory_test
