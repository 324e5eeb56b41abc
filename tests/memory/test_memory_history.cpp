// The allocator's event history, context labels, and the memory_viz snapshot built from them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "memory/memory_snapshot.h"

namespace headroom {
namespace {

constexpr size_t MiB = 1024 * 1024;

// Turns recording on for one test and off again, whatever happens.
class Recording {
 public:
  explicit Recording(size_t entries) { record_memory_history(entries); }
  ~Recording() { record_memory_history(0); }
};

std::unique_ptr<CachingAllocator> make(size_t limit = 0) {
  return std::make_unique<CachingAllocator>(make_meta_device_allocator(), AllocatorConfig{}, limit);
}

using Action = TraceEntry::Action;

TEST(MemoryHistory, RecordsEventsWithTheirContext) {
  Recording on(100);
  auto a = make();
  void* p;
  {
    MemoryContext outer("forward");
    MemoryContext inner("block.0");
    p = a->malloc(1000, 0);
  }
  a->free(p);
  a->empty_cache();
  const auto trace = a->trace();
  ASSERT_EQ(trace.size(), 5u);
  const Action expected[] = {Action::segment_alloc, Action::alloc, Action::free_requested,
                             Action::free_completed, Action::segment_free};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(trace[i].action, expected[i]) << i;
  EXPECT_EQ(trace[0].size, 2 * MiB);
  EXPECT_EQ(trace[1].size, 1000u);  // requested bytes, as PyTorch records them
  EXPECT_EQ(trace[1].address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(trace[0].address, trace[1].address);
  ASSERT_TRUE(trace[1].context);
  EXPECT_EQ(*trace[1].context, (ContextLabels{"block.0", "forward"}));  // innermost first
  EXPECT_LE(trace[0].time_us, trace[4].time_us);
  EXPECT_GT(trace[0].time_us, 1'600'000'000'000'000);  // microseconds since the epoch
}

TEST(MemoryHistory, NothingIsRecordedWhenOff) {
  auto a = make();
  a->free(a->malloc(10, 0));
  EXPECT_TRUE(a->trace().empty());
}

TEST(MemoryHistory, KeepsTheNewestEntries) {
  Recording on(3);
  auto a = make();
  void* p = a->malloc(10, 0);  // segment_alloc, alloc
  a->free(p);                  // free_requested, free_completed
  void* q = a->malloc(20, 0);  // alloc
  const auto trace = a->trace();
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0].action, Action::free_requested);
  EXPECT_EQ(trace[1].action, Action::free_completed);
  EXPECT_EQ(trace[2].action, Action::alloc);
  EXPECT_EQ(trace[2].size, 20u);
  record_memory_history(5);  // growing keeps order
  a->free(q);
  const auto grown = a->trace();
  ASSERT_EQ(grown.size(), 5u);
  EXPECT_EQ(grown[0].action, Action::free_requested);
  EXPECT_EQ(grown[4].action, Action::free_completed);
}

TEST(MemoryHistory, RecordsOutOfMemory) {
  Recording on(100);
  auto a = make(4 * MiB);
  EXPECT_THROW(a->malloc(3 * MiB, 0), OutOfMemoryError);
  const auto trace = a->trace();
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.back().action, Action::oom);
  EXPECT_EQ(trace.back().size, 3 * MiB);
  EXPECT_EQ(trace.back().address, 0u);  // the meta device reports no free memory
}

TEST(MemorySnapshot, SegmentsAndBlocksInPyTorchsShape) {
  Recording on(100);
  auto a = make();
  void* p;
  {
    MemoryContext ctx("weights");
    p = a->malloc(1000, 0);
  }
  void* q = a->malloc(2000, 0);
  a->free(q);
  MemorySnapshot snapshot;
  snapshot.devices = {kMeta};
  snapshot.allocator_settings = {""};
  snapshot.memory_limits = {0};
  snapshot.segments = {a->segments()};
  snapshot.device_traces = {a->trace()};
  const PickleValue v = memory_snapshot_to_pickle(snapshot);
  const auto& segments = v.at("segments").as_list();
  ASSERT_EQ(segments.size(), 1u);
  const PickleValue& seg = segments[0];
  EXPECT_EQ(seg.at("device").as_int64(), 0);
  EXPECT_EQ(seg.at("total_size").as_uint64(), 2 * MiB);
  EXPECT_EQ(seg.at("allocated_size").as_uint64(), 1024u);
  EXPECT_EQ(seg.at("requested_size").as_uint64(), 1000u);
  EXPECT_EQ(seg.at("segment_type").as_string(), "small");
  const auto& blocks = seg.at("blocks").as_list();
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].at("state").as_string(), "active_allocated");
  EXPECT_EQ(blocks[0].at("size").as_uint64(), 1024u);
  EXPECT_EQ(blocks[0].at("frames").at(size_t{0}).at("name").as_string(), "weights");
  EXPECT_EQ(blocks[1].at("state").as_string(), "inactive");
  EXPECT_EQ(blocks[1].at("size").as_uint64(), 2 * MiB - 1024);
  const auto& trace = v.at("device_traces").at(size_t{0}).as_list();
  ASSERT_EQ(trace.size(), 5u);
  EXPECT_EQ(trace[0].at("action").as_string(), "segment_alloc");
  EXPECT_EQ(trace[1].at("addr").as_uint64(), reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(v.at("devices").at(size_t{0}).as_string(), "meta");
  a->free(p);
}

bool python3_on_path() { return std::system("command -v python3 >/dev/null 2>&1") == 0; }

TEST(MemorySnapshot, DumpLoadsWithPythonPickle) {
  Recording on(1000);
  Tensor keep;
  {
    MemoryContext ctx("demo");
    keep = Tensor::empty({1000, 300}, DType::f32, kMeta);
    Tensor tmp = Tensor::empty({64}, DType::bf16, kMeta);
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "headroom_test_snapshot";
  std::filesystem::remove_all(dir);
  const std::filesystem::path path = dir / "nested" / "snapshot.pickle";  // directories are created
  dump_memory_snapshot(path.string());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 3u);
  EXPECT_EQ(bytes.substr(0, 2), std::string("\x80\x04", 2));  // PROTO 4
  EXPECT_EQ(bytes.back(), '.');                               // STOP
  if (!python3_on_path()) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "python3 is not on PATH; the pickle's bytes were checked, pickle.load was not";
  }
  const std::string script =
      "import pickle,sys\n"
      "s = pickle.load(open(sys.argv[1], 'rb'))\n"
      "i = s['devices'].index('meta')\n"
      "segs = [g for g in s['segments'] if g['device'] == i]\n"
      "acts = [e['action'] for e in s['device_traces'][i]]\n"
      "demo = [e for e in s['device_traces'][i] if e['frames'] and e['frames'][0]['name'] == "
      "'demo']\n"
      "ok = all(set(g) >= "
      "{'address','total_size','allocated_size','blocks','segment_type','stream'} for g in segs)\n"
      "print(ok, 'alloc' in acts, 'free_completed' in acts, len(demo) > 0, "
      "sorted(s['allocator_settings']) == sorted(s['devices']))\n";
  const std::filesystem::path script_path =
      std::filesystem::temp_directory_path() / "headroom_test_snapshot.py";
  std::ofstream(script_path) << script;
  FILE* pipe =
      ::popen(("python3 '" + script_path.string() + "' '" + path.string() + "' 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ::pclose(pipe);
  EXPECT_EQ(out, "True True True True True\n");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(script_path);
}

}  // namespace
}  // namespace headroom
