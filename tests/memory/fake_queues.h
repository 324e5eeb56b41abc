// A fake device with streams and events that a test completes by hand, under the CachingAllocator
// and the HostCachingAllocator: what CUDA's cudaEventRecord / cudaEventQuery give them, on the
// CPU. Memory is real host memory, so pinned tensors over it can be read. And a pinned allocator
// over it, with a guard that installs one for a test.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "memory/device_allocator.h"
#include "memory/host_caching_allocator.h"

namespace headroom::fake_queues {

// What the test sees and steers; shared with the allocator that owns the FakeQueues.
struct Queues {
  std::map<EventId, StreamId> pending;  // recorded, not yet complete, not destroyed
  std::map<EventId, bool> live;         // recorded and not destroyed: complete?
  EventId next_event = 1;
  StreamId current = 0;
  int64_t recorded = 0;
  int64_t destroyed = 0;
  int64_t synchronized = 0;
  std::vector<std::pair<StreamId, EventId>> waits;

  // Completes the events recorded so far on `stream`, as if its queued work had run.
  void complete(StreamId stream) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second == stream) {
        live[it->first] = true;
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
  }
  void complete_event(EventId event) {
    pending.erase(event);
    live[event] = true;
  }
  size_t pending_on(StreamId stream) const {
    size_t n = 0;
    for (const auto& [event, s] : pending) n += s == stream;
    return n;
  }
};

class FakeQueues final : public DeviceAllocator {
 public:
  FakeQueues(std::shared_ptr<Queues> queues, Device device)
      : queues_(std::move(queues)), device_(device) {}

  Device device() const override { return device_; }
  void* raw_alloc(size_t size) override { return std::malloc(size); }
  void raw_free(void* ptr, size_t) noexcept override { std::free(ptr); }
  DeviceMemoryInfo memory_info() const override { return {}; }

  StreamId current_stream() const override { return queues_->current; }
  StreamId exchange_stream(StreamId stream) override {
    const StreamId previous = queues_->current;
    queues_->current = stream;
    return previous;
  }
  StreamId copy_stream() override { return 99; }

  EventId record_event(StreamId stream) override {
    const EventId event = queues_->next_event++;
    queues_->pending[event] = stream;
    queues_->live[event] = false;
    ++queues_->recorded;
    return event;
  }
  bool query_event(EventId event) override { return queues_->live.at(event); }
  void synchronize_event(EventId event) override {
    ++queues_->synchronized;
    queues_->complete_event(event);
  }
  void wait_event(StreamId stream, EventId event) override {
    queues_->waits.emplace_back(stream, event);
  }
  void destroy_event(EventId event) noexcept override {
    queues_->live.erase(event);
    queues_->pending.erase(event);
    ++queues_->destroyed;
  }

 private:
  std::shared_ptr<Queues> queues_;
  Device device_;
};

// The backend's part, faked: the "device" is host memory, the copy a memcpy.
class FakePinnedAllocator final : public HostCachingAllocator {
 public:
  explicit FakePinnedAllocator(std::shared_ptr<Queues> queues)
      : HostCachingAllocator(std::make_unique<FakeQueues>(queues, kCPU)),
        queues_(std::move(queues)) {}

  void copy_to_device_async(void* dst, Device, const void* src, size_t nbytes) override {
    std::memcpy(dst, src, nbytes);
    record_stream(const_cast<void*>(src), queues_->current);
  }

 private:
  std::shared_ptr<Queues> queues_;
};

// Installs a pinned allocator for the test's scope, then restores the build's own.
class InstallPinned {
 public:
  explicit InstallPinned(PinnedAllocator* allocator)
      : previous_(register_pinned_allocator(allocator)) {}
  ~InstallPinned() { register_pinned_allocator(previous_); }

 private:
  PinnedAllocator* previous_;
};

}  // namespace headroom::fake_queues
