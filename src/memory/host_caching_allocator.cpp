// The pinned host cache: power-of-two free lists and the events that hold freed blocks back,
// each step mirroring the function of the same name in PyTorch's CachingHostAllocator.
#include "memory/host_caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "memory/alloc_config.h"

namespace headroom {
namespace {

size_t size_index(size_t rounded_size) {
  return static_cast<size_t>(std::countr_zero(rounded_size));
}

}  // namespace

std::map<std::string, int64_t> HostStats::to_map() const {
  std::map<std::string, int64_t> out;
  auto add = [&](const std::string& name, const Stat& stat) {
    out[name + ".current"] = stat.current;
    out[name + ".peak"] = stat.peak;
    out[name + ".allocated"] = stat.allocated;
    out[name + ".freed"] = stat.freed;
  };
  add("allocation", allocation);
  add("segment", segment);
  add("allocated_bytes", allocated_bytes);
  add("reserved_bytes", reserved_bytes);
  out["num_host_alloc"] = num_host_alloc;
  out["num_host_free"] = num_host_free;
  return out;
}

HostCachingAllocator::HostCachingAllocator(std::unique_ptr<DeviceAllocator> host_memory)
    : host_memory_(std::move(host_memory)) {}

HostCachingAllocator::~HostCachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [event, block] : events_) {
    host_memory_->synchronize_event(event);
    host_memory_->destroy_event(event);
  }
  events_.clear();
  for (auto& [ptr, block] : blocks_) {
    host_memory_->raw_free(reinterpret_cast<void*>(ptr), block->size);
  }
}

size_t HostCachingAllocator::round_size(size_t nbytes) {
  return std::bit_ceil(std::max<size_t>(nbytes, 1));
}

void* HostCachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (nbytes > (size_t{1} << 62)) {
    throw OutOfMemoryError(str_cat("pinned host memory: cannot allocate ", format_bytes(nbytes)));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  const size_t size = round_size(nbytes);
  std::vector<Block*>& free_list = free_blocks_[size_index(size)];
  Block* block = nullptr;
  if (!free_list.empty()) {
    block = free_list.back();  // the most recently freed: likeliest still in cache
    free_list.pop_back();
  } else {
    void* ptr = host_memory_->raw_alloc(size);
    if (!ptr) {
      release_cached_blocks();
      ptr = host_memory_->raw_alloc(size);
    }
    if (!ptr) {
      const auto pinned = static_cast<size_t>(stats_.reserved_bytes.current);
      throw OutOfMemoryError(str_cat("pinned host memory: the driver could not pin ",
                                     format_bytes(size), " more (", format_bytes(pinned),
                                     " pinned by headroom)"));
    }
    auto owned = std::make_unique<Block>();
    owned->ptr = reinterpret_cast<uintptr_t>(ptr);
    owned->size = size;
    block = owned.get();
    blocks_.emplace(owned->ptr, std::move(owned));
    stats_.segment.increase(1);
    stats_.reserved_bytes.increase(static_cast<int64_t>(size));
    stats_.num_host_alloc += 1;
  }
  block->allocated = true;
  stats_.allocation.increase(1);
  stats_.allocated_bytes.increase(static_cast<int64_t>(size));
  return reinterpret_cast<void*>(block->ptr);
}

void HostCachingAllocator::deallocate(void* ptr) noexcept {
  if (!ptr) return;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end() || !it->second->allocated) {
      throw Error(str_cat("pinned host memory: pointer ", ptr,
                          " was not allocated here, or was freed twice"));
    }
    Block* block = it->second.get();
    block->allocated = false;
    stats_.allocation.decrease(1);
    stats_.allocated_bytes.decrease(static_cast<int64_t>(block->size));
    if (block->streams.empty()) {
      free_blocks_[size_index(block->size)].push_back(block);
      return;
    }
    for (StreamId stream : block->streams) {
      events_.emplace_front(host_memory_->record_event(stream), block);
      ++block->event_count;
    }
    block->streams.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom: %s\n", e.what());
    std::abort();
  }
}

void HostCachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = block_containing(ptr);
  if (!block || !block->allocated) {
    throw Error(str_cat("record_stream: pointer ", ptr, " is not in live pinned host memory"));
  }
  block->streams.insert(stream);
}

void HostCachingAllocator::process_events() {
  // Oldest first, stopping at the first event not yet complete (PyTorch's order).
  while (!events_.empty()) {
    const auto [event, block] = events_.back();
    if (!host_memory_->query_event(event)) return;
    host_memory_->destroy_event(event);
    events_.pop_back();
    if (--block->event_count == 0) free_blocks_[size_index(block->size)].push_back(block);
  }
}

HostCachingAllocator::Block* HostCachingAllocator::block_containing(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return nullptr;
  --it;
  Block* block = it->second.get();
  return address < block->ptr + block->size ? block : nullptr;
}

void HostCachingAllocator::release_cached_blocks() {
  process_events();
  for (std::vector<Block*>& free_list : free_blocks_) {
    for (Block* block : free_list) {
      host_memory_->raw_free(reinterpret_cast<void*>(block->ptr), block->size);
      stats_.segment.decrease(1);
      stats_.reserved_bytes.decrease(static_cast<int64_t>(block->size));
      stats_.num_host_free += 1;
      blocks_.erase(block->ptr);
    }
    free_list.clear();
  }
}

HostStats HostCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void HostCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_blocks();
}

std::map<std::string, int64_t> host_memory_stats() {
  auto* host = dynamic_cast<HostCachingAllocator*>(pinned_allocator());
  return host ? host->stats().to_map() : std::map<std::string, int64_t>{};
}

void host_empty_cache() {
  if (auto* host = dynamic_cast<HostCachingAllocator*>(pinned_allocator())) host->empty_cache();
}

}  // namespace headroom
