// The host pools of offload, one per kind of memory (Note [The host pool]).
#include "memory/host_pool.h"

#include <array>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "memory/alloc_config.h"
#include "memory/memory_summary.h"

namespace headroom {
namespace {

enum PoolKind { kMetaPool, kPageablePool, kPinnedPool, kNumPools };

struct Pools {
  std::mutex mutex;
  std::array<std::unique_ptr<CachingAllocator>, kNumPools> pools;
  DeviceAllocatorFactory pinned = nullptr;
};

Pools& pools() {
  static Pools* p = new Pools;  // alive until exit: tensors may outlive static destructors
  return *p;
}

}  // namespace

Device host_pool_device(Device compute) { return compute.is_meta() ? kMeta : kCPU; }

CachingAllocator& host_pool(Device compute, bool pin_memory) {
  Pools& p = pools();
  std::lock_guard<std::mutex> lock(p.mutex);
  const PoolKind kind = compute.is_meta()                             ? kMetaPool
                        : compute.is_cuda() && pin_memory && p.pinned ? kPinnedPool
                                                                      : kPageablePool;
  std::unique_ptr<CachingAllocator>& pool = p.pools[kind];
  if (!pool) {
    std::unique_ptr<DeviceAllocator> memory = kind == kMetaPool     ? make_meta_device_allocator()
                                              : kind == kPinnedPool ? p.pinned(0)
                                                                    : make_cpu_device_allocator();
    pool = std::make_unique<CachingAllocator>(std::move(memory), AllocatorConfig::from_env(),
                                              /*memory_limit=*/0);
  }
  return *pool;
}

void register_pinned_host_memory(DeviceAllocatorFactory factory) {
  Pools& p = pools();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.pinned = factory;
}

std::map<std::string, int64_t> host_pool_stats(const CachingAllocator& pool) {
  return pool.stats().to_map();
}

std::string host_pool_summary(const CachingAllocator& pool, bool abbreviated) {
  return format_memory_summary(host_pool_stats(pool), str_cat("host pool (", pool.device(), ")"),
                               abbreviated);
}

}  // namespace headroom
