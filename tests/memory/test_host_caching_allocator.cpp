// The pinned host cache (memory/host_caching_allocator.h) over fake host memory whose events the
// test completes by hand: power-of-two reuse, blocks held back until the events of the streams
// that read them complete, empty_cache, statistics; and Tensor::pin_memory / is_pinned /
// record_stream with such an allocator installed, and without one.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/fake_queues.h"
#include "memory/host_caching_allocator.h"

namespace headroom {
namespace {

using fake_queues::FakePinnedAllocator;
using fake_queues::InstallPinned;
using fake_queues::Queues;

constexpr StreamId kCopy = 2, kOther = 3;

struct Fixture {
  std::shared_ptr<Queues> queues = std::make_shared<Queues>();
  FakePinnedAllocator allocator{queues};

  int64_t stat(const std::string& key) const {
    const auto m = allocator.stats().to_map();
    auto it = m.find(key);
    EXPECT_NE(it, m.end()) << key;
    return it == m.end() ? -1 : it->second;
  }
};

TEST(HostCachingAllocator, SizesRoundUpToPowersOfTwo) {
  EXPECT_EQ(HostCachingAllocator::round_size(1), 1u);
  EXPECT_EQ(HostCachingAllocator::round_size(3), 4u);
  EXPECT_EQ(HostCachingAllocator::round_size(4096), 4096u);
  EXPECT_EQ(HostCachingAllocator::round_size(5000), 8192u);
  Fixture f;
  EXPECT_EQ(f.allocator.allocate(0), nullptr);
  void* p = f.allocator.allocate(5000);
  EXPECT_EQ(f.stat("reserved_bytes.current"), 8192);
  EXPECT_EQ(f.stat("allocated_bytes.current"), 8192);
  f.allocator.deallocate(p);
  EXPECT_EQ(f.stat("allocated_bytes.current"), 0);
  EXPECT_EQ(f.stat("reserved_bytes.current"), 8192);  // cached
  void* q = f.allocator.allocate(6000);               // the same power of two: the cached block
  EXPECT_EQ(q, p);
  void* r = f.allocator.allocate(3000);  // another size: a block of its own
  EXPECT_NE(r, p);
  EXPECT_EQ(f.stat("num_host_alloc"), 2);
  EXPECT_EQ(f.stat("segment.current"), 2);
  EXPECT_EQ(f.stat("reserved_bytes.current"), 8192 + 4096);
  EXPECT_EQ(f.stat("allocation.current"), 2);
  EXPECT_EQ(f.stat("allocation.allocated"), 3);
  f.allocator.deallocate(q);
  f.allocator.deallocate(r);
  EXPECT_EQ(f.queues->recorded, 0);
}

TEST(HostCachingAllocator, CopiedBlocksWaitForTheirCopy) {
  Fixture f;
  void* p = f.allocator.allocate(100);
  std::vector<char> device(100);
  f.queues->current = kCopy;
  f.allocator.copy_to_device_async(device.data(), kCPU, static_cast<char*>(p) + 10, 50);
  f.allocator.deallocate(p);
  EXPECT_EQ(f.queues->recorded, 1);
  EXPECT_EQ(f.queues->pending_on(kCopy), 1u);
  EXPECT_EQ(f.stat("allocated_bytes.current"), 0);  // freed for the user
  void* q = f.allocator.allocate(100);
  EXPECT_NE(q, p);  // p's copy has not run
  f.queues->complete(kCopy);
  f.allocator.deallocate(q);
  void* r = f.allocator.allocate(100);  // both free now; p came back last
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.queues->destroyed, 1);
  void* s = f.allocator.allocate(100);
  EXPECT_EQ(s, q);
  f.allocator.deallocate(r);
  f.allocator.deallocate(s);
}

TEST(HostCachingAllocator, EventsCompleteOldestFirst) {
  Fixture f;
  void* a = f.allocator.allocate(64);
  void* b = f.allocator.allocate(64);
  f.allocator.record_stream(a, kCopy);
  f.allocator.record_stream(b, kOther);
  f.allocator.deallocate(a);
  f.allocator.deallocate(b);
  f.queues->complete(kOther);  // b's event is newer than a's, which still waits: both stay
  void* c = f.allocator.allocate(64);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  f.queues->complete(kCopy);
  f.allocator.deallocate(c);
  EXPECT_EQ(f.queues->destroyed, 0);
  void* d = f.allocator.allocate(64);
  EXPECT_EQ(f.queues->destroyed, 2);
  EXPECT_EQ(d, b);  // a, then b joined the free list after c
  f.allocator.deallocate(d);
}

TEST(HostCachingAllocator, EmptyCacheKeepsBlocksWaitingForEvents) {
  Fixture f;
  std::vector<char> device(1000);
  f.queues->current = kCopy;
  void* p = f.allocator.allocate(1000);
  f.allocator.copy_to_device_async(device.data(), kCPU, p, device.size());
  f.allocator.deallocate(p);
  f.allocator.deallocate(f.allocator.allocate(1000));
  f.allocator.empty_cache();
  EXPECT_EQ(f.stat("num_host_free"), 1);  // q only
  EXPECT_EQ(f.stat("reserved_bytes.current"), 1024);
  EXPECT_EQ(f.queues->synchronized, 0);
  f.queues->complete(kCopy);
  f.allocator.empty_cache();
  EXPECT_EQ(f.stat("num_host_free"), 2);
  EXPECT_EQ(f.stat("reserved_bytes.current"), 0);
  EXPECT_EQ(f.stat("segment.current"), 0);
}

TEST(HostCachingAllocator, RecordStreamNeedsLivePinnedMemory) {
  Fixture f;
  int on_the_stack = 0;
  EXPECT_THROW(f.allocator.record_stream(&on_the_stack, kCopy), Error);
  void* p = f.allocator.allocate(16);
  f.allocator.deallocate(p);
  EXPECT_THROW(f.allocator.record_stream(p, kCopy), Error);
}

TEST(PinMemory, CopiesIntoPinnedMemory) {
  Fixture f;
  InstallPinned install(&f.allocator);
  const Tensor t = Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_FALSE(t.is_pinned());
  {
    const Tensor pinned = t.pin_memory();
    EXPECT_TRUE(pinned.is_pinned());
    EXPECT_EQ(pinned.device(), kCPU);
    EXPECT_EQ(pinned.shape(), t.shape());
    EXPECT_EQ(pinned.to_float_vector(), t.to_float_vector());
    EXPECT_EQ(pinned.pin_memory().data_ptr(), pinned.data_ptr());  // pinned already
    EXPECT_TRUE(pinned.narrow(1, 1, 2).is_pinned());               // views share the storage
    EXPECT_EQ(f.stat("allocated_bytes.current"), 32);              // 24 bytes, rounded
    pinned.record_stream(kOther);
    // A strided view is copied, packed.
    EXPECT_EQ(t.transpose(0, 1).pin_memory().to_float_vector(),
              (std::vector<float>{1, 4, 2, 5, 3, 6}));
  }
  EXPECT_EQ(f.stat("allocated_bytes.current"), 0);
  EXPECT_EQ(f.queues->pending_on(kOther), 1u);  // the recorded use holds the block back
  // Without a GPU, non_blocking to the CPU or meta is the ordinary copy.
  const Tensor pinned = t.pin_memory();
  EXPECT_EQ(pinned.to(kCPU, /*non_blocking=*/true).data_ptr(), pinned.data_ptr());
  EXPECT_EQ(pinned.to(kMeta, /*non_blocking=*/true).device(), kMeta);
  EXPECT_THROW(Tensor::zeros({2}, DType::f32, kMeta).pin_memory(), ValueError);
}

TEST(PinMemory, RaisesWithoutABackendThatPins) {
  InstallPinned install(nullptr);
  const Tensor t = Tensor::zeros({4});
  EXPECT_THROW(t.pin_memory(), NotImplementedError);
  EXPECT_FALSE(t.is_pinned());
  EXPECT_FALSE(Tensor().is_pinned());
}

TEST(PinMemory, HostMemoryStatsReadTheInstalledAllocator) {
  Fixture f;
  InstallPinned install(&f.allocator);
  const Tensor pinned = Tensor::zeros({100}).pin_memory();
  const auto stats = host_memory_stats();
  EXPECT_EQ(stats.at("allocated_bytes.current"), 512);
  EXPECT_EQ(stats.at("num_host_alloc"), 1);
}

}  // namespace
}  // namespace headroom
