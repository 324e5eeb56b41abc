// The committed snapshot of an expandable-segments run (tests/fixtures/memory/, made by
// tools/check_memory_viz.py --regenerate, which also opens it with PyTorch's memory_viz code):
// decoded with exactly MemoryViz.js's opcodes, and its structure checked as memory_viz reads it,
// by replaying the trace against the segments.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"
#include "memory/memory_viz_decoder.h"

namespace headroom {
namespace {

using memory_test::MemoryVizDecoder;

PickleValue load_fixture() {
  const std::string path = str_cat(HEADROOM_FIXTURES_DIR, "/memory/expandable_snapshot.pickle");
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return MemoryVizDecoder(bytes.str()).decode();
}

TEST(MemoryVizFixture, ExpandableSnapshotHasPyTorchsStructure) {
  const PickleValue snapshot = load_fixture();
  ASSERT_EQ(snapshot.at("devices").size(), 1u);
  EXPECT_EQ(snapshot.at("devices").at(size_t{0}).as_string(), "cpu");
  EXPECT_EQ(snapshot.at("allocator_settings").at("cpu").at("HEADROOM_ALLOC_CONF").as_string(),
            "expandable_segments:True");

  // Segments: each a contiguous mapped range of an expandable segment, its blocks tiling it.
  const auto& segments = snapshot.at("segments").as_list();
  ASSERT_GE(segments.size(), 2u);  // the small pool's and the large pool's
  std::set<std::string> types;
  std::map<uint64_t, uint64_t> segment_ranges;  // address -> end
  std::map<uint64_t, uint64_t> live_blocks;     // address -> requested size
  for (const PickleValue& seg : segments) {
    for (const char* key :
         {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
          "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}) {
      EXPECT_NE(seg.find(key), nullptr) << key;
    }
    EXPECT_EQ(seg.at("device").as_int64(), 0);
    EXPECT_TRUE(seg.at("is_expandable").as_bool());
    types.insert(seg.at("segment_type").as_string());
    const uint64_t start = seg.at("address").as_uint64();
    const uint64_t end = start + seg.at("total_size").as_uint64();
    segment_ranges[start] = end;
    uint64_t address = start;
    uint64_t allocated = 0;
    for (const PickleValue& block : seg.at("blocks").as_list()) {
      EXPECT_EQ(block.at("address").as_uint64(), address);
      const std::string state = block.at("state").as_string();
      EXPECT_TRUE(state == "active_allocated" || state == "inactive") << state;
      if (state == "active_allocated") {
        allocated += block.at("size").as_uint64();
        live_blocks[address] = block.at("requested_size").as_uint64();
        EXPECT_FALSE(block.at("frames").as_list().empty());  // the demo's MemoryContext labels
      }
      address += block.at("size").as_uint64();
    }
    EXPECT_EQ(address, end);
    EXPECT_EQ(seg.at("allocated_size").as_uint64(), allocated);
  }
  EXPECT_EQ(types, (std::set<std::string>{"large", "small"}));

  // The trace from the first event: pages mapped and unmapped, blocks allocated and freed inside
  // mapped pages; what is mapped and live at its end is what the segments hold.
  ASSERT_EQ(snapshot.at("device_traces").size(), 1u);
  std::map<uint64_t, uint64_t> mapped;  // address -> end, merged on the fly
  auto inside = [&](uint64_t addr) {
    auto it = mapped.upper_bound(addr);
    return it != mapped.begin() && addr < std::prev(it)->second;
  };
  std::map<uint64_t, uint64_t> live;
  std::map<std::string, int> counts;
  for (const PickleValue& e : snapshot.at("device_traces").at(size_t{0}).as_list()) {
    const std::string action = e.at("action").as_string();
    ++counts[action];
    const uint64_t addr = e.at("addr").as_uint64(), size = e.at("size").as_uint64();
    EXPECT_TRUE(e.at("time_us").is_integer());
    if (action == "segment_map") {
      EXPECT_FALSE(inside(addr));
      mapped[addr] = addr + size;
    } else if (action == "segment_unmap") {
      auto it = std::prev(mapped.upper_bound(addr));
      ASSERT_LE(addr + size, it->second) << "unmapping what is not mapped";
      const uint64_t begin = it->first, end = it->second;
      mapped.erase(it);
      if (begin < addr) mapped[begin] = addr;
      if (addr + size < end) mapped[addr + size] = end;
    } else if (action == "alloc") {
      EXPECT_TRUE(inside(addr));
      EXPECT_TRUE(live.emplace(addr, size).second);
    } else if (action == "free_requested") {
      EXPECT_EQ(live.count(addr), 1u);
    } else if (action == "free_completed") {
      EXPECT_EQ(live.erase(addr), 1u);
    } else {
      ADD_FAILURE() << "unexpected action " << action;
    }
  }
  EXPECT_GT(counts["segment_map"], 1);
  EXPECT_GE(counts["segment_unmap"], 1);
  EXPECT_EQ(counts["segment_alloc"], 0);
  EXPECT_EQ(live, live_blocks);
  // Adjacent mapped ranges are one segment in the snapshot.
  std::map<uint64_t, uint64_t> merged;
  for (const auto& [begin, end] : mapped) {
    if (!merged.empty() && merged.rbegin()->second == begin) {
      merged.rbegin()->second = end;
    } else {
      merged[begin] = end;
    }
  }
  EXPECT_EQ(merged, segment_ranges);
}

}  // namespace
}  // namespace headroom
