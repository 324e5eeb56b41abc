// Expandable segments (Note [Expandable segments]): the event sequences, statistics and snapshot
// segments of PyTorch's policy, on the meta device and on real CPU memory (mmap'd address space
// whose pages are committed and returned), and the slack report of Note [Slack report].
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "memory/allocator_test_support.h"
#include "memory/caching_allocator.h"
#include "memory/memory_snapshot.h"
#include "memory/memory_summary.h"

namespace headroom {
namespace {

constexpr size_t MiB = 1024 * 1024;
using Action = TraceEntry::Action;
using memory_test::stat;

class Recording {
 public:
  explicit Recording(size_t entries) { record_memory_history(entries); }
  ~Recording() { record_memory_history(0); }
};

AllocatorConfig expandable() { return AllocatorConfig::parse("expandable_segments:True"); }

std::unique_ptr<CachingAllocator> make(bool real_memory, AllocatorConfig config = expandable(),
                                       size_t limit = 0) {
  return memory_test::make_test_allocator(config, limit, real_memory);
}

// An event as the test expects it: action, offset from the segment's base, size.
struct Event {
  Action action;
  size_t offset;
  size_t size;
};

void expect_trace(const std::vector<TraceEntry>& trace, uintptr_t base,
                  const std::vector<Event>& expected) {
  ASSERT_EQ(trace.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_STREQ(trace_action_name(trace[i].action), trace_action_name(expected[i].action)) << i;
    EXPECT_EQ(trace[i].address - base, expected[i].offset)
        << i << " " << trace_action_name(trace[i].action);
    EXPECT_EQ(trace[i].size, expected[i].size) << i << " " << trace_action_name(trace[i].action);
  }
}

TEST(ExpandableSegments, ConfigParsesPyTorchsSpelling) {
  EXPECT_TRUE(AllocatorConfig::parse("expandable_segments:True").expandable_segments);
  EXPECT_FALSE(AllocatorConfig::parse("expandable_segments:False").expandable_segments);
  EXPECT_TRUE(AllocatorConfig::parse("max_split_size_mb:128, expandable_segments:True")
                  .expandable_segments);
  EXPECT_EQ(AllocatorConfig::parse("expandable_segments:True").str(), "expandable_segments:True");
  EXPECT_EQ(AllocatorConfig::parse("expandable_segments:False").str(), "");
  try {
    AllocatorConfig::parse("expandable_segments:yes", "PYTORCH_CUDA_ALLOC_CONF");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("PYTORCH_CUDA_ALLOC_CONF: expandable_segments is 'yes'"),
              std::string::npos)
        << e.what();
  }
}

// The large pool's 20 MiB pages: growth at the free tail, the lowest address first after an
// unmap, empty_cache unmapping whole free pages and finally the address space.
void large_pool_sequence(bool real_memory) {
  Recording on(100);
  auto a = make(real_memory);
  char* x = static_cast<char*>(a->malloc(30 * MiB, 0));  // maps pages 0-1
  const auto base = reinterpret_cast<uintptr_t>(x);
  EXPECT_EQ(stat(*a, "reserved_bytes.large_pool.current"), int64_t(40 * MiB));
  char* y = static_cast<char*>(a->malloc(12 * MiB, 0));  // the 10 MiB tail grows by page 2
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y), base + 30 * MiB);
  if (real_memory) {
    std::memset(x, 1, 30 * MiB);
    std::memset(y, 2, 12 * MiB);
  }
  a->free(x);
  a->empty_cache();  // page 0 is free whole; [20, 30) MiB shares page 1 with y
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), int64_t(40 * MiB));
  char* z = static_cast<char*>(a->malloc(20 * MiB, 0));  // maps page 0 again: the lowest fit
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z), base);
  if (real_memory) {
    EXPECT_EQ(z[0], 0) << "an unmapped page comes back as fresh memory";
    EXPECT_EQ(y[12 * MiB - 1], 2);
  }
  a->free(z);
  a->free(y);
  a->empty_cache();
  expect_trace(a->trace(), base,
               {{Action::segment_map, 0, 40 * MiB},
                {Action::alloc, 0, 30 * MiB},
                {Action::segment_map, 40 * MiB, 20 * MiB},
                {Action::alloc, 30 * MiB, 12 * MiB},
                {Action::free_requested, 0, 30 * MiB},
                {Action::free_completed, 0, 30 * MiB},
                {Action::segment_unmap, 0, 20 * MiB},
                {Action::segment_map, 0, 20 * MiB},
                {Action::alloc, 0, 20 * MiB},
                {Action::free_requested, 0, 20 * MiB},
                {Action::free_completed, 0, 20 * MiB},
                {Action::free_requested, 30 * MiB, 12 * MiB},
                {Action::free_completed, 30 * MiB, 12 * MiB},
                {Action::segment_unmap, 0, 60 * MiB}});
  // PyTorch's counts: pages are device allocations, not segments; no inactive split blocks.
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 0);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.peak"), int64_t(60 * MiB));
  EXPECT_EQ(stat(*a, "reserved_bytes.large_pool.allocated"), int64_t(80 * MiB));
  EXPECT_EQ(stat(*a, "reserved_bytes.large_pool.freed"), int64_t(80 * MiB));
  EXPECT_EQ(stat(*a, "allocated_bytes.all.peak"), int64_t(42 * MiB));
  EXPECT_EQ(stat(*a, "num_device_alloc"), 3);
  EXPECT_EQ(stat(*a, "num_device_free"), 2);
  EXPECT_EQ(stat(*a, "segment.all.peak"), 0);
  EXPECT_EQ(stat(*a, "inactive_split.all.peak"), 0);
  EXPECT_EQ(stat(*a, "inactive_split_bytes.all.peak"), 0);
  EXPECT_EQ(stat(*a, "active_bytes.all.current"), 0);
  EXPECT_TRUE(a->segments().empty());
}

TEST(ExpandableSegments, LargePoolEventsOnMeta) { large_pool_sequence(false); }
TEST(ExpandableSegments, LargePoolEventsOnCpuMemory) { large_pool_sequence(true); }

TEST(ExpandableSegments, SmallPoolGrowsInTwoMiBPages) {
  Recording on(100);
  auto a = make(true);
  void* p = a->malloc(1 * MiB, 0);
  void* q = a->malloc(1 * MiB, 0);  // the rest of the first page
  void* r = a->malloc(1000, 0);     // a second page
  const auto base = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q), base + 1 * MiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r), base + 2 * MiB);
  EXPECT_EQ(stat(*a, "reserved_bytes.small_pool.current"), int64_t(4 * MiB));
  EXPECT_EQ(stat(*a, "allocated_bytes.small_pool.current"), int64_t(2 * MiB + 1024));
  a->free(q);
  a->empty_cache();  // q's MiB shares page 0 with p: nothing to unmap
  EXPECT_EQ(stat(*a, "reserved_bytes.small_pool.current"), int64_t(4 * MiB));
  a->free(p);
  a->empty_cache();
  EXPECT_EQ(stat(*a, "reserved_bytes.small_pool.current"), int64_t(2 * MiB));
  a->free(r);
  a->empty_cache();
  expect_trace(a->trace(), base,
               {{Action::segment_map, 0, 2 * MiB},
                {Action::alloc, 0, 1 * MiB},
                {Action::alloc, 1 * MiB, 1 * MiB},
                {Action::segment_map, 2 * MiB, 2 * MiB},
                {Action::alloc, 2 * MiB, 1000},
                {Action::free_requested, 1 * MiB, 1 * MiB},
                {Action::free_completed, 1 * MiB, 1 * MiB},
                {Action::free_requested, 0, 1 * MiB},
                {Action::free_completed, 0, 1 * MiB},
                {Action::segment_unmap, 0, 2 * MiB},
                {Action::free_requested, 2 * MiB, 1000},
                {Action::free_completed, 2 * MiB, 1000},
                {Action::segment_unmap, 2 * MiB, 2 * MiB}});
}

// The case of PyTorch's Note [Expandable Segments]: sizes that creep up leave slivers in fixed
// segments; one growing segment tiles them.
TEST(ExpandableSegments, GrowingSizesReserveLessThanFixedSegments) {
  auto run = [](AllocatorConfig config) {
    auto a = make(false, config);
    for (size_t batch = 10; batch < 20; ++batch) {
      std::vector<void*> live;
      for (int layer = 0; layer < 4; ++layer) live.push_back(a->malloc(batch * 3 * MiB, 0));
      for (void* p : live) a->free(p);
    }
    return stat(*a, "reserved_bytes.all.peak");
  };
  const int64_t fixed = run(AllocatorConfig{});
  const int64_t growing = run(expandable());
  EXPECT_EQ(growing, int64_t(240 * MiB));  // 4 x 57 MiB = 228 MiB, in 20 MiB pages
  EXPECT_GT(fixed, growing + int64_t(200 * MiB));
}

TEST(ExpandableSegments, SnapshotShowsEachMappedRange) {
  Recording on(100);
  auto a = make(false);
  void* x = a->malloc(30 * MiB, 0);
  void* y = a->malloc(12 * MiB, 0);
  a->free(x);
  a->empty_cache();  // page 0 unmapped: the mapped range is now [20, 60) MiB
  const auto base = reinterpret_cast<uintptr_t>(x);
  const std::vector<SegmentInfo> segments = a->segments();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_TRUE(segments[0].is_expandable);
  EXPECT_TRUE(segments[0].is_large);
  EXPECT_EQ(segments[0].address, base + 20 * MiB);
  EXPECT_EQ(segments[0].total_size, 40 * MiB);
  EXPECT_EQ(segments[0].allocated_size, 12 * MiB);
  ASSERT_EQ(segments[0].blocks.size(), 3u);  // free [20, 30), y, free [42, 60)
  EXPECT_FALSE(segments[0].blocks[0].allocated);
  EXPECT_EQ(segments[0].blocks[0].size, 10 * MiB);
  EXPECT_TRUE(segments[0].blocks[1].allocated);
  EXPECT_EQ(segments[0].blocks[2].size, 18 * MiB);
  MemorySnapshot snapshot;
  snapshot.devices = {kMeta};
  snapshot.allocator_settings = {a->config().str()};
  snapshot.memory_limits = {0};
  snapshot.segments = {segments};
  snapshot.device_traces = {a->trace()};
  const PickleValue v = memory_snapshot_to_pickle(snapshot);
  EXPECT_TRUE(v.at("segments").at(size_t{0}).at("is_expandable").as_bool());
  const auto& trace = v.at("device_traces").at(size_t{0}).as_list();
  ASSERT_EQ(trace.size(), 7u);
  EXPECT_EQ(trace[0].at("action").as_string(), "segment_map");
  EXPECT_EQ(trace[6].at("action").as_string(), "segment_unmap");
  EXPECT_EQ(trace[6].at("addr").as_uint64(), base);
  EXPECT_EQ(trace[6].at("size").as_uint64(), 20 * MiB);
  EXPECT_EQ(v.at("allocator_settings").at("meta").at("HEADROOM_ALLOC_CONF").as_string(),
            "expandable_segments:True");
  a->free(y);
}

TEST(ExpandableSegments, SummaryCountsMappedPagesAsReserved) {
  auto a = make(false);
  void* x = a->malloc(30 * MiB, 0);
  const std::string summary = format_memory_summary(a->stats().to_map(), "meta", false);
  const size_t row = summary.find("GPU reserved memory");
  ASSERT_NE(row, std::string::npos) << summary;
  EXPECT_NE(summary.substr(row, summary.find('\n', row) - row).find("40960 KiB"), std::string::npos)
      << summary;
  a->free(x);
}

TEST(ExpandableSegments, CapacityLimitEndsTheMappingPageByPage) {
  auto a = make(false, expandable(), 50 * MiB);
  void* x = a->malloc(30 * MiB, 0);                        // 40 MiB mapped
  EXPECT_THROW(a->malloc(15 * MiB, 0), OutOfMemoryError);  // a third page would pass 50 MiB
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), int64_t(40 * MiB));
  EXPECT_EQ(stat(*a, "num_ooms"), 1);
  void* y = a->malloc(10 * MiB, 0);  // fits the mapped tail
  a->free(x);
  a->free(y);
}

TEST(ExpandableSegments, TurningItOffLeavesExpandableBlocksAlone) {
  auto a = make(false);
  void* x = a->malloc(30 * MiB, 0);
  a->set_expandable_segments(false);
  EXPECT_FALSE(a->config().expandable_segments);
  void* y = a->malloc(5 * MiB, 0);  // a fixed 20 MiB segment, not the 10 MiB free tail
  EXPECT_EQ(stat(*a, "segment.large_pool.current"), 1);
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), int64_t(60 * MiB));
  a->free(x);
  a->free(y);
  a->empty_cache();
  EXPECT_EQ(stat(*a, "reserved_bytes.all.current"), 0);
}

TEST(ExpandableSegments, RefusedWithoutVirtualMemory) {
  class PlainDevice final : public DeviceAllocator {
   public:
    Device device() const override { return kMeta; }
    void* raw_alloc(size_t) override { return nullptr; }
    void raw_free(void*, size_t) noexcept override {}
    DeviceMemoryInfo memory_info() const override { return {}; }
  };
  EXPECT_THROW(CachingAllocator(std::make_unique<PlainDevice>(), expandable(), 0),
               NotImplementedError);
}

// Note [Slack report]: a 3 MiB request takes a 20 MiB segment; a 19 MiB one cannot use the
// 17 MiB remainder and makes a second segment.
TEST(SlackReport, NamesTheStrandingAllocationAndTheFix) {
  auto a = make(false, AllocatorConfig{});
  void* x = a->malloc(3 * MiB, 0);
  void* y = a->malloc(19 * MiB, 0);
  const ReservedPeakState state = a->reserved_peak_state();
  EXPECT_EQ(state.reserved, int64_t(40 * MiB));
  EXPECT_EQ(state.allocated, int64_t(23 * MiB));  // y's 1 MiB remainder is no split: y is 20 MiB
  EXPECT_EQ(state.split_remainder_bytes, int64_t(17 * MiB));
  EXPECT_EQ(state.split_segments, 1);
  EXPECT_EQ(state.whole_free_segment_bytes, 0);
  EXPECT_EQ(state.request_bytes, int64_t(19 * MiB));
  EXPECT_EQ(state.added_bytes, int64_t(20 * MiB));
  ASSERT_EQ(state.stranding.size(), 1u);
  EXPECT_EQ(state.stranding[0].block_size, int64_t(3 * MiB));
  EXPECT_EQ(state.stranding[0].stranded_bytes, int64_t(17 * MiB));
  EXPECT_EQ(state.stranding[0].category, MemoryCategory::temporaries);
  const std::string report = format_slack_report(state, state.allocated, state.reserved);
  EXPECT_NE(report.find("allocator slack 17.00 MiB is 43% of the reserved peak"), std::string::npos)
      << report;
  EXPECT_NE(report.find("At the reserved peak 17.00 MiB of 40.00 MiB was free"), std::string::npos)
      << report;
  EXPECT_NE(report.find("17.00 MiB in split remainders of 1 segment,"), std::string::npos)
      << report;
  EXPECT_NE(report.find("request of 19.00 MiB, which added 20.00 MiB (the segment's rounding)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("temporaries blocks of 3.00 MiB hold 1 segment with 17.00 MiB free"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("fix: expandable segments"), std::string::npos) << report;
  EXPECT_TRUE(format_slack_report(state, 37 * MiB, 40 * MiB).empty());  // 7.5%: quiet
  a->free(x);
  a->free(y);

  auto b = make(false);
  x = b->malloc(3 * MiB, 0);
  y = b->malloc(19 * MiB, 0);  // into the same page's tail and one more page
  const ReservedPeakState grown = b->reserved_peak_state();
  EXPECT_EQ(grown.reserved, int64_t(40 * MiB));
  EXPECT_EQ(grown.allocated, int64_t(22 * MiB));
  EXPECT_EQ(grown.expandable_free_bytes, int64_t(18 * MiB));
  EXPECT_EQ(grown.split_remainder_bytes, 0);
  EXPECT_NE(format_slack_report(grown, grown.allocated, grown.reserved)
                .find("expandable segments are on"),
            std::string::npos);
  b->free(x);
  b->free(y);
}

TEST(SlackReport, WholeCachedSegmentsAndResets) {
  auto a = make(false, AllocatorConfig{});
  a->free(a->malloc(12 * MiB, 0));
  void* y = a->malloc(16 * MiB, 0);  // the cached 12 MiB segment is too small
  ReservedPeakState state = a->reserved_peak_state();
  EXPECT_EQ(state.whole_free_segments, 1);
  EXPECT_EQ(state.whole_free_segment_bytes, int64_t(12 * MiB));
  a->free(y);
  a->empty_cache();
  a->reset_peak_stats();  // the state is taken anew, at the reset
  state = a->reserved_peak_state();
  EXPECT_EQ(state.reserved, 0);
  EXPECT_EQ(state.request_bytes, 0);
}

}  // namespace
}  // namespace headroom
