// The caching policy to the byte: rounding, pools, segment sizes, splitting, best-fit reuse,
// coalescing, peaks, retries, OOM and the capacity limit, on the meta and CPU devices. Every
// figure follows from PyTorch's CUDACachingAllocator rules (see caching_allocator.h).
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/allocator_test_support.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory.h"
#include "memory/memory_observer.h"

namespace headroom {
namespace {

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

using memory_test::stat;

// A fresh allocator with its own statistics, over fake (meta) or real (cpu) memory.
std::unique_ptr<CachingAllocator> make(AllocatorConfig config = {}, size_t limit = 0,
                                       bool real_memory = false) {
  return memory_test::make_test_allocator(config, limit, real_memory);
}

TEST(CachingAllocator, SizePolicy) {
  const AllocatorConfig c;
  EXPECT_EQ(CachingAllocator::round_size(1, c), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512, c), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513, c), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), size_t(2 * MiB));
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB), size_t(2 * MiB));
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB + 512), size_t(20 * MiB));
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), size_t(20 * MiB));
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), size_t(10 * MiB));
  EXPECT_EQ(CachingAllocator::segment_size(15 * MiB + 512), size_t(16 * MiB));
  AllocatorConfig p2 = AllocatorConfig::parse("roundup_power2_divisions:4");
  EXPECT_EQ(CachingAllocator::round_size(5000, p2), 5120u);  // 4096 + 1024
  EXPECT_EQ(CachingAllocator::round_size(1 * MiB + 1, p2), size_t(1 * MiB + 256 * KiB));
  EXPECT_EQ(CachingAllocator::round_size(4096, p2), 4096u);  // a power of two
  EXPECT_EQ(CachingAllocator::round_size(1500, p2), 1536u);  // below 512 * 4
}

TEST(CachingAllocator, SmallAllocationSplitsASmallSegment) {
  auto a = make();
  void* p = a->malloc(1, 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.current"), 512);
  EXPECT_EQ(stat(*a, "allocated_bytes.small_pool.current"), 512);
  EXPECT_EQ(stat(*a, "allocated_bytes.large_pool.current"), 0);
  EXPECT_EQ(stat(*a, "requested_bytes.all.current"), 1);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 2 * MiB);
  EXPECT_EQ(stat(*a, "segment.small_pool.current"), 1);
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 1);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.current"), 2 * MiB - 512);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 1);
  a->free(p);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "active.all.current"), 0);
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 0);  // coalesced back into one block
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 2 * MiB);  // cached, not returned
  // Reuse without a new segment.
  void* q = a->malloc(1000, 0);
  EXPECT_EQ(q, p);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.current"), 1024);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 1);
  EXPECT_EQ(stat(*a, "allocation.all.allocated"), 2);
  EXPECT_EQ(stat(*a, "allocation.all.freed"), 1);
  a->free(q);
}

TEST(CachingAllocator, LargePoolSegmentsAndSplitRule) {
  auto a = make();
  // 1 MiB + 1 -> 1 MiB + 512 in the large pool, carved from a 20 MiB segment (remainder > 1 MiB).
  void* p = a->malloc(1 * MiB + 1, 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.large_pool.current"), 1 * MiB + 512);
  EXPECT_EQ(stat(*a, "reserved_bytes.large_pool.current"), 20 * MiB);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.large_pool.current"), 19 * MiB - 512);
  // 15 MiB + 1 fits the cached 19 MiB - 512 remainder (best fit) and splits it again.
  void* q = a->malloc(15 * MiB + 1, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q), reinterpret_cast<uintptr_t>(p) + 1 * MiB + 512);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 1);
  EXPECT_EQ(stat(*a, "inactive_split.large_pool.current"), 1);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.large_pool.current"), 4 * MiB - 1024);
  // 3 MiB + 512 leaves 1 MiB - 1536 of the 4 MiB - 1024 block: not > 1 MiB, so no split and the
  // whole block is allocated.
  void* r = a->malloc(3 * MiB + 512, 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.large_pool.current"), 20 * MiB);
  EXPECT_EQ(stat(*a, "inactive_split.large_pool.current"), 0);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.large_pool.current"), 0);
  // 25 MiB + 1 -> a 26 MiB segment; its 1 MiB - 512 remainder is not split off either.
  void* s = a->malloc(25 * MiB + 1, 0);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 2);
  EXPECT_EQ(stat(*a, "allocated_bytes.large_pool.current"), 46 * MiB);
  EXPECT_EQ(stat(*a, "requested_bytes.large_pool.current"), 44 * MiB + 515);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 46 * MiB);
  EXPECT_EQ(stat(*a, "segment.large_pool.current"), 2);
  a->free(q);  // [p _ r] in the first segment
  EXPECT_EQ(stat(*a, "inactive_split.large_pool.current"), 1);
  a->free(p);
  a->free(r);
  a->free(s);
  EXPECT_EQ(stat(*a, "active_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "inactive_split.large_pool.current"), 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.peak"), 46 * MiB);
  EXPECT_EQ(stat(*a, "requested_bytes.all.freed"), 44 * MiB + 515);
}

TEST(CachingAllocator, BestFitPrefersTheSmallestCachedBlock) {
  auto a = make();
  void* big = a->malloc(12 * MiB, 0);    // 12 MiB segment
  void* small = a->malloc(11 * MiB, 0);  // 12 MiB segment (11 MiB rounds to 2 MiB multiple)
  a->free(big);
  a->free(small);
  void* p = a->malloc(10 * MiB, 0);  // fits both 12 MiB blocks; lowest address among equals
  EXPECT_TRUE(p == big || p == small);
  void* q = a->malloc(1 * MiB + 1, 0);  // the other 12 MiB block, split
  EXPECT_EQ(stat(*a, "num_device_alloc"), 2);
  a->free(p);
  a->free(q);
}

// Raw memory at falling addresses, as Linux's mmap hands them out top-down: each segment lies
// below the one before.
class FallingAddresses final : public DeviceAllocator {
 public:
  Device device() const override { return kMeta; }
  void* raw_alloc(size_t size) override {
    next_ -= (size + (2 * MiB - 1)) / (2 * MiB) * (2 * MiB);
    return reinterpret_cast<void*>(next_);
  }
  void raw_free(void*, size_t) noexcept override {}
  DeviceMemoryInfo memory_info() const override { return {}; }

 private:
  uintptr_t next_ = uintptr_t{1} << 44;
};

// Note [Ties between free blocks]: among equal free blocks the oldest segment wins, wherever
// the device put it, so rising (meta) and falling addresses make the same choices.
TEST(CachingAllocator, TiesGoToTheOldestSegmentWhateverItsAddress) {
  for (bool falling : {false, true}) {
    CachingAllocator a(falling ? std::unique_ptr<DeviceAllocator>(new FallingAddresses)
                               : make_meta_device_allocator(),
                       AllocatorConfig{}, 0);
    void* first = a.malloc(12 * MiB, 0);   // segment 0
    void* second = a.malloc(12 * MiB, 0);  // segment 1
    EXPECT_EQ(first < second, !falling);
    a.free(second);
    a.free(first);
    EXPECT_EQ(a.malloc(10 * MiB, 0), first) << (falling ? "falling" : "rising");
    EXPECT_EQ(a.malloc(10 * MiB, 0), second);
  }
}

TEST(CachingAllocator, CoalescingTracksInactiveSplitBlocks) {
  auto a = make();
  void* x = a->malloc(1000, 0);
  void* y = a->malloc(1000, 0);
  void* z = a->malloc(1000, 0);
  // [x y z | tail]: one inactive split block (the tail).
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 1);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.current"), 2 * MiB - 3 * 1024);
  a->free(y);  // [x _ z | tail]
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 2);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.current"), 2 * MiB - 2 * 1024);
  a->free(x);  // [_ _ z | tail]: x merges with y
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 2);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.current"), 2 * MiB - 1024);
  a->free(z);  // one whole free segment
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 0);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "inactive_split.all.peak"), 2);
  const auto segments = a->segments();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].blocks.size(), 1u);
  EXPECT_EQ(segments[0].total_size, size_t(2 * MiB));
}

TEST(CachingAllocator, PeaksAndResets) {
  auto a = make();
  void* p = a->malloc(4 * MiB, 0);
  void* q = a->malloc(4 * MiB, 0);
  a->free(p);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.peak"), 8 * MiB);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.current"), 4 * MiB);
  a->reset_peak_stats();
  EXPECT_EQ(stat(*a, "allocated_bytes.all.peak"), 4 * MiB);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.allocated"), 8 * MiB);
  a->reset_accumulated_stats();
  EXPECT_EQ(stat(*a, "allocated_bytes.all.allocated"), 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.freed"), 0);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.current"), 4 * MiB);
  a->free(q);
}

TEST(CachingAllocator, EmptyCacheReturnsOnlyWholeFreeSegments) {
  auto a = make();
  void* keep = a->malloc(1000, 0);  // pins its 2 MiB segment
  void* big = a->malloc(30 * MiB, 0);
  a->free(big);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 32 * MiB);
  a->empty_cache();
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 2 * MiB);
  EXPECT_EQ(stat(*a, "num_device_free"), 1);
  EXPECT_EQ(stat(*a, "segment.all.current"), 1);
  a->free(keep);
  a->empty_cache();
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.peak"), 32 * MiB);
}

TEST(CachingAllocator, FreesTheCacheAndRetriesBeforeOom) {
  auto a = make({}, 21 * MiB);
  void* p = a->malloc(1000, 0);
  a->free(p);  // a cached 2 MiB segment
  // A 20 MiB segment does not fit next to it under the 21 MiB limit: the cache is released
  // and the allocation retried.
  void* q = a->malloc(5 * MiB, 0);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(stat(*a, "num_alloc_retries"), 1);
  EXPECT_EQ(stat(*a, "num_device_free"), 1);
  EXPECT_EQ(stat(*a, "num_ooms"), 0);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 20 * MiB);
  a->free(q);
}

TEST(CachingAllocator, OomLeavesTheStatisticsConsistent) {
  auto a = make({}, 24 * MiB);
  void* p = a->malloc(16 * MiB, 0);
  const auto before = a->stats().to_map();
  try {
    a->malloc(9 * MiB, 0);  // needs a 20 MiB segment; 16 + 20 > 24
    FAIL() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("meta out of memory. Tried to allocate 9.00 MiB (a new 20.00 MiB segment)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("capacity limit is 24.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16.00 MiB is allocated by tensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0 bytes is reserved by headroom but unallocated"), std::string::npos)
        << msg;
    // What a user of the CLI can do about it (issue 19, defect 13).
    EXPECT_EQ(msg.find("memory_summary()"), std::string::npos) << msg;
    EXPECT_NE(msg.find("headroom plan"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--memory_snapshot"), std::string::npos) << msg;
  }
  auto after = a->stats().to_map();
  EXPECT_EQ(after["num_ooms"], 1);
  EXPECT_EQ(after["num_alloc_retries"], 1);
  EXPECT_EQ(after["num_sync_all_streams"], 1);
  for (const auto& [key, value] : before) {
    if (key == "num_ooms" || key == "num_alloc_retries" || key == "num_sync_all_streams") continue;
    EXPECT_EQ(after[key], value) << key;
  }
  // Still usable: a request that fits (a 2 MiB small segment) succeeds.
  void* q = a->malloc(1 * MiB, 0);
  a->free(q);
  a->free(p);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  auto a = make(AllocatorConfig::parse("max_split_size_mb:40"));
  EXPECT_EQ(stat(*a, "max_split_size"), 40 * MiB);
  void* p = a->malloc(50 * MiB, 0);
  EXPECT_EQ(stat(*a, "oversize_allocations.current"), 1);
  EXPECT_EQ(stat(*a, "oversize_segments.current"), 1);
  a->free(p);
  EXPECT_EQ(stat(*a, "oversize_allocations.current"), 0);
  // A small request does not take the cached oversize block.
  void* q = a->malloc(30 * MiB, 0);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 2);
  // An oversize request takes a cached block only if at most 20 MiB larger.
  void* r = a->malloc(45 * MiB, 0);
  EXPECT_EQ(r, p);
  a->free(r);
  void* s = a->malloc(41 * MiB, 0);
  EXPECT_EQ(s, p);
  a->free(s);
  a->free(q);
  EXPECT_EQ(stat(*a, "oversize_segments.current"), 1);
}

TEST(CachingAllocator, MaxSplitSizeReleasesOversizeBlocksBeforeFreeingAll) {
  auto a = make(AllocatorConfig::parse("max_split_size_mb:40"), 100 * MiB);
  void* small = a->malloc(1000, 0);
  a->free(small);  // a cached 2 MiB small segment
  void* p = a->malloc(90 * MiB, 0);
  a->free(p);  // a cached 90 MiB oversize segment
  // 50 MiB may not take the 90 MiB block (more than 20 MiB larger), 2 + 90 + 50 > 100: the
  // oversize block alone is released, the small segment stays, and no full retry is needed.
  void* q = a->malloc(50 * MiB, 0);
  EXPECT_EQ(stat(*a, "num_alloc_retries"), 0);
  EXPECT_EQ(stat(*a, "num_device_free"), 1);
  EXPECT_EQ(stat(*a, "reserved_bytes.small_pool.current"), 2 * MiB);
  EXPECT_EQ(stat(*a, "reserved_bytes.large_pool.current"), 50 * MiB);
  a->free(q);
  // As in PyTorch: when the released oversize blocks add up to less than the request, the
  // whole cache is released and the allocation retried.
  void* r = a->malloc(60 * MiB, 0);  // 50 MiB cached is too small; 2 + 50 + 60 > 100
  EXPECT_EQ(stat(*a, "num_alloc_retries"), 1);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 60 * MiB);
  a->free(r);
}

TEST(CachingAllocator, GarbageCollectionReturnsLongUnusedBlocks) {
  auto a = make(AllocatorConfig::parse("garbage_collection_threshold:0.5"), 100 * MiB);
  // The GC clock is the large pool's count of free-block searches.
  void* p = a->malloc(30 * MiB, 0);  // search 1
  a->free(p);                        // cached at clock 1
  void* q = a->malloc(35 * MiB, 0);  // search 2: 30 MiB is too small; a 36 MiB segment
  a->free(q);                        // cached at clock 2
  // Search 3 misses; 66 MiB reserved is over the 50 MiB threshold. Ages are 2 and 1, so only
  // the 30 MiB segment (older than the average 1.5) goes; that reclaims the 16 MiB needed.
  void* r = a->malloc(40 * MiB, 0);
  EXPECT_EQ(stat(*a, "num_device_free"), 1);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 76 * MiB);
  EXPECT_EQ(stat(*a, "num_alloc_retries"), 0);
  void* again = a->malloc(35 * MiB, 0);  // the 36 MiB segment survived and is reused
  EXPECT_EQ(again, q);
  a->free(again);
  a->free(r);
}

TEST(CachingAllocator, StreamsDoNotShareCachedBlocks) {
  auto a = make();
  void* p = a->malloc(1000, 1);
  a->free(p);
  void* q = a->malloc(1000, 2);
  EXPECT_EQ(stat(*a, "num_device_alloc"), 2);
  void* r = a->malloc(1000, 1);
  EXPECT_EQ(r, p);
  a->free(q);
  a->free(r);
}

TEST(CachingAllocator, ZeroBytesAndBadFrees) {
  auto a = make();
  EXPECT_EQ(a->malloc(0, 0), nullptr);
  EXPECT_EQ(stat(*a, "allocation.all.allocated"), 0);
  void* p = a->malloc(10, 0);
  a->free(p);
  EXPECT_THROW(a->free(p), Error);
  int local = 0;
  EXPECT_THROW(a->free(&local), Error);
  EXPECT_THROW(a->malloc(std::numeric_limits<size_t>::max() - 10, 0), OutOfMemoryError);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}, DType::f32, kMeta), ValueError);
}

TEST(CachingAllocator, RealCpuMemoryIsUsable) {
  auto a = make({}, 0, /*real_memory=*/true);
  auto* p = static_cast<unsigned char*>(a->malloc(3 * MiB, 0));
  for (int64_t i = 0; i < 3 * MiB; i += 4096) p[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  a->free(p);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 20 * MiB);
}

TEST(CachingAllocator, ConcurrentUseKeepsCountsExact) {
  auto a = make();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        void* p = a->malloc(static_cast<size_t>((i * 7919 + t) % (3 * MiB) + 1), 0);
        a->free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(stat(*a, "allocation.all.allocated"), 8000);
  EXPECT_EQ(stat(*a, "allocation.all.current"), 0);
  EXPECT_EQ(stat(*a, "allocated_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "requested_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "inactive_split.all.current"), 0);
}

TEST(CachingAllocator, ConfigParsing) {
  EXPECT_THROW(AllocatorConfig::parse("max_split_size_mb:20"), ValueError);
  EXPECT_THROW(AllocatorConfig::parse("garbage_collection_threshold:1.5"), ValueError);
  EXPECT_THROW(AllocatorConfig::parse("roundup_power2_divisions:3"), ValueError);
  EXPECT_THROW(AllocatorConfig::parse("expandable_segments:maybe"), ValueError);
  EXPECT_THROW(AllocatorConfig::parse("bogus:1"), ValueError);
  EXPECT_THROW(AllocatorConfig::parse("max_split_size_mb"), ValueError);
  const AllocatorConfig c =
      AllocatorConfig::parse(" max_split_size_mb:128, garbage_collection_threshold:0.6 ");
  EXPECT_EQ(c.max_split_size, size_t(128 * MiB));
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  EXPECT_EQ(c.str(), "max_split_size_mb:128,garbage_collection_threshold:0.6");
  try {
    AllocatorConfig::parse("max_split_size_mb:abc");
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("HEADROOM_ALLOC_CONF: max_split_size_mb"),
              std::string::npos);
  }
}

TEST(CachingAllocator, ByteSizes) {
  EXPECT_EQ(parse_byte_size("24GiB", "x"), size_t(24) << 30);
  EXPECT_EQ(parse_byte_size("24G", "x"), size_t(24) << 30);
  EXPECT_EQ(parse_byte_size("80GB", "x"), size_t(80'000'000'000));
  EXPECT_EQ(parse_byte_size("1.5 MiB", "x"), size_t(1536) * 1024);
  EXPECT_EQ(parse_byte_size("4096", "x"), 4096u);
  EXPECT_THROW(parse_byte_size("lots", "HEADROOM_MEMORY_LIMIT"), ValueError);
  EXPECT_THROW(parse_byte_size("12XB", "x"), ValueError);
  EXPECT_EQ(format_bytes(1024), "1024 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20 * MiB), "20.00 MiB");
  EXPECT_EQ(format_bytes(size_t(3) << 30), "3.00 GiB");
}

// Through tensors on the process-wide allocators, as a user reads them.
TEST(DeviceMemory, TensorsAndViewsThroughTheCpuAllocator) {
  const size_t base = memory_allocated(kCPU);
  reset_peak_memory_stats(kCPU);
  {
    Tensor a = Tensor::empty({1000, 1000});  // 4,000,000 B -> rounded to 512: 4,000,256
    EXPECT_EQ(memory_allocated(kCPU) - base, 4000256u);
    Tensor v = a.transpose(0, 1).narrow(0, 0, 10);  // a view: no new memory
    EXPECT_EQ(memory_allocated(kCPU) - base, 4000256u);
    Tensor b = Tensor::empty({10}, DType::bf16);  // 20 B -> 512 B, small pool
    EXPECT_EQ(memory_allocated(kCPU) - base, 4000256u + 512u);
  }
  EXPECT_EQ(memory_allocated(kCPU), base);
  EXPECT_EQ(max_memory_allocated(kCPU) - base, 4000256u + 512u);
  const auto stats = memory_stats(kCPU);
  EXPECT_TRUE(stats.count("allocated_bytes.all.current"));
  EXPECT_TRUE(stats.count("inactive_split_bytes.small_pool.freed"));
  EXPECT_EQ(stats.size(), 9u * 3 * 4 + 2 * 4 + 5 + 1);
}

TEST(DeviceMemory, MetaDeviceHonoursTheCapacityLimit) {
  empty_cache(kMeta);
  const size_t old_limit = memory_limit(kMeta);
  set_memory_limit(kMeta, memory_reserved(kMeta) + (size_t(80) << 30));
  Tensor a = Tensor::empty({size_t(60) << 30}, DType::u8, kMeta);
  EXPECT_THROW(Tensor::empty({size_t(30) << 30}, DType::u8, kMeta), OutOfMemoryError);
  Tensor b = Tensor::empty({size_t(10) << 30}, DType::u8, kMeta);
  set_memory_limit(kMeta, old_limit);
}

// Observers (the profiler's [memory] events) get each block's size and the totals after it,
// with the allocator's lock released: reading its statistics from the callback must not block.
TEST(CachingAllocator, ObserversSeeEachBlockAndTheTotalsAfterIt) {
  auto a = make();
  struct Seen final : MemoryObserver {
    explicit Seen(CachingAllocator& allocator) : allocator(allocator) {}
    void on_memory_usage(const MemoryUsageEvent& event) override {
      if (event.device != allocator.device()) return;  // the process's other allocators
      events.push_back(event);
      allocated_in_callback.push_back(allocator.stats().allocated_bytes[0].current);
    }
    CachingAllocator& allocator;
    std::vector<MemoryUsageEvent> events;
    std::vector<int64_t> allocated_in_callback;
  } seen(*a);
  void* before = a->malloc(100, 0);  // not observed
  memory_observers().add(&seen);
  void* p = a->malloc(1000, 0);
  void* q = a->malloc(3 * MiB, 0);
  a->free(p);
  memory_observers().remove(&seen);
  a->free(q);  // not observed
  a->free(before);
  ASSERT_EQ(seen.events.size(), 3u);
  const MemoryUsageEvent& alloc = seen.events[0];
  EXPECT_EQ(alloc.address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(alloc.bytes, 1024);  // the rounded block
  EXPECT_EQ(alloc.total_allocated, 512 + 1024);
  EXPECT_EQ(alloc.total_reserved, 2 * MiB);
  EXPECT_EQ(alloc.category, MemoryCategory::temporaries);
  EXPECT_EQ(seen.events[1].bytes, 3 * MiB);
  EXPECT_EQ(seen.events[1].total_reserved, 2 * MiB + 20 * MiB);  // a new large segment
  const MemoryUsageEvent& free = seen.events[2];
  EXPECT_EQ(free.address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(free.bytes, -1024);
  EXPECT_EQ(free.total_allocated, 512 + 3 * MiB);
  for (size_t i = 0; i < seen.events.size(); ++i) {
    EXPECT_EQ(seen.allocated_in_callback[i], seen.events[i].total_allocated) << i;
  }
  EXPECT_FALSE(memory_observers().any());
}

}  // namespace
}  // namespace headroom
