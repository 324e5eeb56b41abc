// The caching allocator's streams (Note [Streams and reuse]) over a fake device whose events the
// test completes by hand: reuse only on the allocating stream, blocks used on other streams held
// back until their events complete, the statistics meanwhile, empty_cache and the out-of-memory
// retry waiting for them, and the device-independent stream functions on the CPU.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory.h"
#include "memory/fake_queues.h"

namespace headroom {
namespace {

using fake_queues::FakeQueues;
using fake_queues::Queues;

constexpr int64_t MiB = 1024 * 1024;
constexpr StreamId kCompute = 1, kCopy = 2, kOther = 3;

struct Fixture {
  std::shared_ptr<Queues> queues = std::make_shared<Queues>();
  std::unique_ptr<CachingAllocator> allocator;

  explicit Fixture(size_t limit = 0)
      : allocator(std::make_unique<CachingAllocator>(std::make_unique<FakeQueues>(queues, kMeta),
                                                     AllocatorConfig{}, limit)) {}

  int64_t stat(const std::string& key) const {
    const auto m = allocator->stats().to_map();
    auto it = m.find(key);
    EXPECT_NE(it, m.end()) << key;
    return it == m.end() ? -1 : it->second;
  }
};

char* bytes(void* p) { return static_cast<char*>(p); }

TEST(CachingAllocatorStreams, FreedBlocksAreReusedOnlyOnTheirStream) {
  Fixture f;
  void* p = f.allocator->malloc(1000, kCompute);
  f.allocator->free(p);
  void* q = f.allocator->malloc(1000, kCopy);
  EXPECT_NE(q, p);
  EXPECT_EQ(f.stat("num_device_alloc"), 2);  // the copy stream's own segment
  void* r = f.allocator->malloc(1000, kCompute);
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.stat("num_device_alloc"), 2);
  const std::vector<SegmentInfo> segments = f.allocator->segments();
  ASSERT_EQ(segments.size(), 2u);
  for (const SegmentInfo& s : segments) {
    EXPECT_EQ(s.stream, s.address == reinterpret_cast<uintptr_t>(p) ? kCompute : kCopy);
  }
  f.allocator->free(q);
  f.allocator->free(r);
  EXPECT_EQ(f.queues->recorded, 0);  // no other stream used them: no events
}

TEST(CachingAllocatorStreams, RecordStreamHoldsTheBlockUntilItsEventCompletes) {
  Fixture f;
  void* p = f.allocator->malloc(1000, kCompute);
  f.allocator->record_stream(p, kCopy);
  f.allocator->record_stream(p, kCompute);  // the allocating stream: nothing to wait for
  f.allocator->free(p);
  EXPECT_EQ(f.queues->recorded, 1);
  EXPECT_EQ(f.queues->pending_on(kCopy), 1u);
  // Freed for the user, still active for the device (PyTorch's accounting).
  EXPECT_EQ(f.stat("allocated_bytes.all.current"), 0);
  EXPECT_EQ(f.stat("allocation.all.current"), 0);
  EXPECT_EQ(f.stat("active.all.current"), 1);
  EXPECT_EQ(f.stat("active_bytes.all.current"), 1024);
  EXPECT_EQ(f.stat("requested_bytes.all.current"), 1000);
  ASSERT_EQ(f.allocator->segments().size(), 1u);
  EXPECT_EQ(f.allocator->segments()[0].active_size, 1024u);
  EXPECT_EQ(f.allocator->segments()[0].allocated_size, 0u);

  // Not reusable yet: the next request on its stream gets the rest of the segment.
  void* q = f.allocator->malloc(1000, kCompute);
  EXPECT_EQ(q, bytes(p) + 1024);
  f.allocator->free(q);
  // A pending block is not merged with a freed neighbour.
  EXPECT_EQ(f.stat("inactive_split.all.current"), 1);
  EXPECT_EQ(f.stat("inactive_split_bytes.all.current"), 2 * MiB - 1024);

  f.queues->complete(kCopy);
  void* r = f.allocator->malloc(1000, kCompute);  // processes the event first
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.queues->destroyed, 1);
  EXPECT_EQ(f.stat("active.all.current"), 1);
  EXPECT_EQ(f.stat("active_bytes.all.current"), 1024);
  EXPECT_EQ(f.stat("num_device_alloc"), 1);
  f.allocator->free(r);
  EXPECT_EQ(f.stat("inactive_split.all.current"), 0);  // one whole free segment again
  EXPECT_EQ(f.stat("active_bytes.all.current"), 0);
  EXPECT_EQ(f.stat("requested_bytes.all.current"), 0);
}

TEST(CachingAllocatorStreams, EveryStreamThatUsedTheBlockMustComplete) {
  Fixture f;
  void* p = f.allocator->malloc(4096, kCompute);
  f.allocator->record_stream(p, kCopy);
  f.allocator->record_stream(p, kOther);
  f.allocator->record_stream(p, kOther);  // once per stream
  f.allocator->free(p);
  EXPECT_EQ(f.queues->recorded, 2);
  f.queues->complete(kOther);
  void* q = f.allocator->malloc(4096, kCompute);
  EXPECT_NE(q, p);
  EXPECT_EQ(f.queues->destroyed, 1);  // kOther's, processed; kCopy's still pending
  f.queues->complete(kCopy);
  void* r = f.allocator->malloc(4096, kCompute);
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.queues->destroyed, 2);
  f.allocator->free(q);
  f.allocator->free(r);
}

TEST(CachingAllocatorStreams, StreamsAreProcessedIndependently) {
  Fixture f;
  void* a = f.allocator->malloc(512, kCompute);
  void* b = f.allocator->malloc(512, kCompute);
  f.allocator->record_stream(a, kCopy);
  f.allocator->record_stream(b, kOther);
  f.allocator->free(a);
  f.allocator->free(b);
  f.queues->complete(kOther);  // kCopy's event, older, is still pending: no head-of-line wait
  void* c = f.allocator->malloc(512, kCompute);
  EXPECT_EQ(c, b);
  f.allocator->free(c);
  f.queues->complete(kCopy);
  void* d = f.allocator->malloc(512, kCompute);
  EXPECT_EQ(d, a);
  f.allocator->free(d);
}

TEST(CachingAllocatorStreams, EmptyCacheWaitsForPendingBlocks) {
  Fixture f;
  void* p = f.allocator->malloc(1000, kCompute);
  f.allocator->record_stream(p, kCopy);
  f.allocator->free(p);
  EXPECT_EQ(f.stat("reserved_bytes.all.current"), 2 * MiB);
  f.allocator->empty_cache();
  EXPECT_EQ(f.queues->synchronized, 1);
  EXPECT_EQ(f.queues->destroyed, 1);
  EXPECT_EQ(f.stat("reserved_bytes.all.current"), 0);
  EXPECT_EQ(f.stat("active_bytes.all.current"), 0);
  EXPECT_EQ(f.stat("segment.all.current"), 0);
  EXPECT_TRUE(f.allocator->segments().empty());
}

TEST(CachingAllocatorStreams, OutOfMemoryRetryWaitsForPendingBlocks) {
  // Room for one 12 MiB segment (a request >= 10 MiB gets a segment of its own size, unsplit).
  Fixture f(12 * MiB);
  void* p = f.allocator->malloc(12 * MiB, kCompute);
  f.allocator->record_stream(p, kCopy);
  f.allocator->free(p);
  void* q = f.allocator->malloc(12 * MiB, kCompute);  // pending p is waited for and released
  EXPECT_EQ(f.queues->synchronized, 1);
  EXPECT_EQ(f.stat("num_alloc_retries"), 1);
  EXPECT_EQ(f.stat("num_device_free"), 1);
  EXPECT_EQ(f.stat("num_ooms"), 0);
  EXPECT_EQ(f.stat("reserved_bytes.all.current"), 12 * MiB);
  EXPECT_EQ(f.stat("allocated_bytes.all.current"), 12 * MiB);
  f.allocator->free(q);
}

TEST(CachingAllocatorStreams, OutOfMemoryWhenBlocksStillInUse) {
  Fixture f(12 * MiB);
  void* p = f.allocator->malloc(12 * MiB, kCompute);
  f.allocator->record_stream(p, kCopy);
  EXPECT_THROW(f.allocator->malloc(12 * MiB, kCompute), OutOfMemoryError);
  f.allocator->free(p);
}

TEST(CachingAllocatorStreams, DevicesWithOneQueueCompleteEventsAtOnce) {
  // The default hooks (meta): the block is back at the next malloc.
  CachingAllocator a(make_meta_device_allocator());
  void* p = a.malloc(1000, 0);
  a.record_stream(p, 5);
  a.free(p);
  EXPECT_EQ(a.stats().active_bytes[0].current, 1024);
  EXPECT_EQ(a.stats().allocated_bytes[0].current, 0);
  void* q = a.malloc(1000, 0);
  EXPECT_EQ(q, p);
  a.free(q);
  EXPECT_EQ(a.stats().active_bytes[0].current, 0);
}

TEST(CachingAllocatorStreams, RecordStreamNeedsALiveBlock) {
  Fixture f;
  void* p = f.allocator->malloc(1000, kCompute);
  f.allocator->free(p);
  EXPECT_THROW(f.allocator->record_stream(p, kCopy), Error);
  f.allocator->record_stream(nullptr, kCopy);  // an empty tensor's storage: nothing to do
}

TEST(CachingAllocatorStreams, AllocateUsesTheCurrentStream) {
  Fixture f;
  f.queues->current = kCopy;
  void* p = f.allocator->allocate(1000);
  ASSERT_EQ(f.allocator->segments().size(), 1u);
  EXPECT_EQ(f.allocator->segments()[0].stream, kCopy);
  f.allocator->deallocate(p);
}

TEST(DeviceStreams, TheCpuHasOneQueue) {
  EXPECT_EQ(current_stream(kCPU), 0u);
  EXPECT_EQ(copy_stream(kCPU), 0u);
  {
    StreamGuard guard(kCPU, copy_stream(kCPU));
    EXPECT_EQ(current_stream(kCPU), 0u);
  }
  wait_stream(kCPU, 0, 0);
  // record_stream on a CPU tensor is accepted; its memory is reusable at the next allocation.
  Tensor t = Tensor::zeros({256});
  t.record_stream(0);
}

}  // namespace
}  // namespace headroom
