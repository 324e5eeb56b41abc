// The profiler on real ops: op and backward scopes with their input shapes, "[memory]" events
// whose running totals are the allocator's, autocast's re-entered op counted once, nothing
// recorded (or observed) outside recording, and the Chrome trace's JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "io/io_test_helpers.h"
#include "memory/device_memory.h"
#include "ops/ops.h"
#include "profile/chrome_trace.h"
#include "profile/key_averages.h"
#include "profile/profiler.h"

namespace headroom {
namespace {

using io_test::TempDir;

Tensor param(const Shape& shape) {
  Tensor t = Tensor::randn(shape);
  t.set_requires_grad(true);
  return t;
}

// linear -> layer_norm -> sum, and its backward, on [4, 8] inputs.
void small_step(const Tensor& w, const Tensor& b, const Tensor& gamma, const Tensor& beta) {
  const Tensor x = Tensor::randn({4, 8});
  backward(sum(layer_norm(linear(x, w, b), gamma, beta)));
}

std::vector<const RecordedFunction*> named(const ProfilerEvents& events, const std::string& name) {
  std::vector<const RecordedFunction*> out;
  for (const RecordedFunction& f : events.functions) {
    if (f.name == name) out.push_back(&f);
  }
  return out;
}
// The pointers point into `events`: a temporary (profiler.events() returns a copy) would leave
// them dangling (issue 19, defect 15), so that call does not compile.
std::vector<const RecordedFunction*> named(ProfilerEvents&& events,
                                           const std::string& name) = delete;

TEST(Profiler, RecordsOpsBackwardNodesAndTheirInputShapes) {
  const Tensor w = param({16, 8}), b = param({16}), gamma = param({16}), beta = param({16});
  Profiler profiler;
  profiler.start();
  small_step(w, b, gamma, beta);
  profiler.stop();
  const ProfilerEvents events = profiler.events();

  const auto linear = named(events, "linear");
  ASSERT_EQ(linear.size(), 1u);
  EXPECT_EQ(linear[0]->scope, RecordScope::function);
  EXPECT_EQ(linear[0]->input_dims, (std::vector<std::vector<int64_t>>{{4, 8}, {16, 8}, {16}}));
  EXPECT_EQ(linear[0]->input_types, (std::vector<std::string>{"f32", "f32", "f32"}));
  EXPECT_EQ(linear[0]->thread_id, current_thread_id());
  EXPECT_LE(linear[0]->start_ns, linear[0]->end_ns);
  ASSERT_EQ(named(events, "layer_norm").size(), 1u);
  EXPECT_EQ(named(events, "layer_norm")[0]->input_dims,
            (std::vector<std::vector<int64_t>>{{4, 16}, {16}, {16}}));

  for (const char* node : {"LinearBackward0", "LayerNormBackward0", "SumBackward0"}) {
    const auto found = named(events, node);
    ASSERT_EQ(found.size(), 1u) << node;
    EXPECT_EQ(found[0]->scope, RecordScope::backward_function);
    // Inside the engine's scope of the same node.
    const auto engine = named(events, std::string("autograd::engine::evaluate_function: ") + node);
    ASSERT_EQ(engine.size(), 1u) << node;
    EXPECT_LE(engine[0]->start_ns, found[0]->start_ns);
    EXPECT_GE(engine[0]->end_ns, found[0]->end_ns);
  }
  EXPECT_EQ(named(events, "LinearBackward0")[0]->input_dims,
            (std::vector<std::vector<int64_t>>{{4, 16}}));  // the gradient of its output
  EXPECT_EQ(named(events, "AccumulateGrad").size(), 4u);
}

TEST(Profiler, MemoryEventsFollowTheAllocatorsTotals) {
  const Tensor w = param({16, 8}), b = param({16}), gamma = param({16}), beta = param({16});
  small_step(w, b, gamma, beta);  // the gradients exist: the profiled step only accumulates
  const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
  Profiler profiler;
  profiler.start();
  small_step(w, b, gamma, beta);
  profiler.stop();
  const int64_t after = static_cast<int64_t>(memory_allocated(kCPU));
  const ProfilerEvents events = profiler.events();

  ASSERT_FALSE(events.memory.empty());
  int64_t running = before, allocations = 0, frees = 0;
  for (const MemoryRecord& m : events.memory) {
    ASSERT_EQ(m.usage.device, kCPU);
    running += m.usage.bytes;
    EXPECT_EQ(m.usage.total_allocated, running);
    EXPECT_GE(m.usage.total_reserved, m.usage.total_allocated);
    EXPECT_NE(m.usage.address, 0u);
    EXPECT_EQ(m.thread_id, current_thread_id());
    EXPECT_EQ(m.usage.bytes % 512, 0);  // the allocator's rounded block sizes
    (m.usage.bytes > 0 ? allocations : frees) += 1;
  }
  EXPECT_EQ(running, after);
  EXPECT_GT(allocations, 0);
  EXPECT_GT(frees, 0);
  // Observed under the op that allocated: linear's output is its own.
  const KeyAverage* linear = nullptr;
  const std::vector<KeyAverage> averages = key_averages(events);
  for (const KeyAverage& a : averages) {
    if (a.key == "linear") linear = &a;
  }
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->self_cpu_memory_usage, 512);  // 4 x 16 floats, one 512-byte block
}

TEST(Profiler, AnOpReenteredByAutocastIsOneEventWithItsCasts) {
  const Tensor w = param({16, 8});
  const Tensor x = Tensor::randn({4, 8});
  Profiler profiler;
  profiler.start();
  {
    Autocast region(DeviceType::cpu, DType::bf16);
    linear(x, w);
  }
  profiler.stop();
  const ProfilerEvents events = profiler.events();
  const auto linear = named(events, "linear");
  ASSERT_EQ(linear.size(), 1u);  // Note [An op re-entered by autocast is one event]
  EXPECT_EQ(linear[0]->input_types, (std::vector<std::string>{"f32", "f32", ""}));
  const auto casts = named(events, "cast");
  ASSERT_EQ(casts.size(), 2u);
  for (const RecordedFunction* cast : casts) {
    EXPECT_GE(cast->start_ns, linear[0]->start_ns);
    EXPECT_LE(cast->end_ns, linear[0]->end_ns);
  }
}

TEST(Profiler, NothingIsObservedOutsideRecording) {
  EXPECT_FALSE(record_function_observers().any());
  EXPECT_FALSE(memory_observers().any());
  Profiler profiler({.schedule = ProfilerSchedule{.wait = 1, .active = 1, .repeat = 1}});
  profiler.start();  // step 0 waits
  EXPECT_FALSE(profiler.is_recording());
  EXPECT_FALSE(record_function_observers().any());
  add(Tensor::ones({3}), Tensor::ones({3}));
  profiler.step();  // step 1 records
  EXPECT_TRUE(record_function_observers().any());
  EXPECT_TRUE(memory_observers().any());
  mul(Tensor::ones({3}), Tensor::ones({3}));
  profiler.step();  // the schedule is over
  EXPECT_FALSE(record_function_observers().any());
  EXPECT_FALSE(memory_observers().any());
  sub(Tensor::ones({3}), Tensor::ones({3}));
  profiler.stop();
  std::vector<std::string> names;
  for (const RecordedFunction& f : profiler.events().functions) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mul", "ProfilerStep#1"}));
}

TEST(Profiler, ScopesOfOtherThreadsKeepTheirThread) {
  Profiler profiler;
  profiler.start();
  uint64_t worker_id = 0;
  std::thread worker([&] {
    worker_id = current_thread_id();
    add(Tensor::ones({3}), Tensor::ones({3}));
  });
  worker.join();
  profiler.stop();
  const ProfilerEvents events = profiler.events();
  const auto adds = named(events, "add");
  ASSERT_EQ(adds.size(), 1u);
  EXPECT_EQ(adds[0]->thread_id, worker_id);
  EXPECT_NE(worker_id, current_thread_id());
}

// A stand-in for the CUDA source of Note [CUDA time in the profiler].
class FakeKernels final : public DeviceActivitySource {
 public:
  void start() override { ++starts; }
  void stop() override { ++stops; }
  std::vector<DeviceActivity> collect() override {
    return {{.name = "gemm_kernel",
             .device = Device{DeviceType::cuda, 0},
             .stream = 7,
             .start_ns = 1'000'000,
             .end_ns = 1'250'500}};
  }
  int starts = 0, stops = 0;
};

TEST(ChromeTrace, IsJsonWithPyTorchsEventShapes) {
  const Tensor w = param({16, 8}), b = param({16}), gamma = param({16}), beta = param({16});
  auto kernels = std::make_shared<FakeKernels>();
  Profiler profiler({.device_activity = kernels});
  profiler.start();
  small_step(w, b, gamma, beta);
  profiler.step();
  profiler.stop();
  EXPECT_EQ(kernels->starts, 1);
  EXPECT_EQ(kernels->stops, 1);

  TempDir dir;
  const std::string path = dir.file("trace.json");
  write_chrome_trace(profiler.events(), path);
  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  double last_ts = -1.0;
  std::map<std::string, int> names;
  int memory = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M") continue;
    EXPECT_GE(e.at("ts").get<double>(), last_ts) << "events are in time order";
    last_ts = e.at("ts").get<double>();
    for (const char* key : {"name", "cat", "pid", "tid", "ts", "args"}) {
      EXPECT_TRUE(e.contains(key)) << key << " in " << e.dump();
    }
    if (ph == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      ++names[e.at("name")];
      if (e.at("name") == "linear") {
        EXPECT_EQ(e.at("cat"), "cpu_op");
        EXPECT_EQ(e.at("args").at("Input Dims"), nlohmann::json::parse("[[4,8],[16,8],[16]]"));
        EXPECT_EQ(e.at("args").at("Input type"), nlohmann::json::parse(R"(["f32","f32","f32"])"));
      }
      if (e.at("name") == "ProfilerStep#0") {
        EXPECT_EQ(e.at("cat"), "user_annotation");
      }
      if (e.at("name") == "gemm_kernel") {
        EXPECT_EQ(e.at("cat"), "kernel");
        EXPECT_EQ(e.at("tid"), 7);
        EXPECT_EQ(e.at("pid"), 0);
        EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 1000.0);
        EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 250.5);
      }
    } else {
      ASSERT_EQ(ph, "i") << e.dump();
      EXPECT_EQ(e.at("s"), "t");
      EXPECT_EQ(e.at("name"), "[memory]");
      const nlohmann::json& args = e.at("args");
      EXPECT_EQ(args.at("Device Type"), 0);  // c10::DeviceType::CPU
      EXPECT_EQ(args.at("Device Id"), -1);
      for (const char* key : {"Addr", "Bytes", "Total Allocated", "Total Reserved", "Category"}) {
        EXPECT_TRUE(args.contains(key)) << key;
      }
      ++memory;
    }
  }
  for (const char* name : {"linear", "layer_norm", "sum", "LinearBackward0", "LayerNormBackward0",
                           "ProfilerStep#0", "ProfilerStep#1", "gemm_kernel"}) {
    EXPECT_EQ(names[name], 1) << name;
  }
  EXPECT_GT(memory, 0);
}

TEST(ChromeTrace, WritingToAMissingDirectoryNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("absent/trace.json");
  try {
    write_chrome_trace({}, path);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace headroom
