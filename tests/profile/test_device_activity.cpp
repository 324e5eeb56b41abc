// Device time in the profiler without a GPU (Note [CUDA time in the profiler]): a stand-in source
// that times CPU launches through the same hook the CUDA source uses, so that every kernel-table
// call and Tensor kernel of a step is checked to give one span, named family.entry, owned by the
// op that launched it; the Chrome trace's stream rows and flow arrows; and a CPU run's profile
// without a source, unchanged.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "core/device_activity.h"
#include "core/error.h"
#include "core/kernel_census.h"
#include "ops/ops.h"
#include "profile/chrome_trace.h"
#include "profile/key_averages.h"
#include "profile/profiler.h"

namespace headroom {
namespace {

// Times launches on the CPU as the CUDA source times them on a GPU: a span from the call's start
// to its end, on "stream" 3, reported as cuda:0's so that the table treats it as device time.
class CpuLaunchTimer final : public DeviceActivitySource, public KernelLaunchTimer {
 public:
  void start() override {
    ++starts;
    exchange_kernel_launch_timer(this);
  }
  void stop() override { exchange_kernel_launch_timer(nullptr); }
  std::vector<DeviceActivity> collect() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(spans_, {});
  }
  int64_t launch_begins(const KernelLaunchInfo& info) override {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_TRUE(info.device.is_cpu()) << info.family << "." << info.entry;
    spans_.push_back({.name = str_cat(info.family, ".", info.entry),
                      .device = Device{DeviceType::cuda, 0},
                      .stream = 3,
                      .start_ns = record_clock_ns(),
                      .correlation_id = spans_.size() + 1,
                      .thread_id = info.thread_id,
                      .launch_ns = info.launch_ns});
    return static_cast<int64_t>(spans_.size() - 1);
  }
  void launch_ends(int64_t handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    spans_[static_cast<size_t>(handle)].end_ns = record_clock_ns() + 1;  // positive at any clock
  }
  int starts = 0;

 private:
  std::mutex mutex_;
  std::vector<DeviceActivity> spans_;
};

Tensor param(const Shape& shape) {
  Tensor t = Tensor::randn(shape);
  t.set_requires_grad(true);
  return t;
}

// The census's name of a launch the timer sees, or "" for one it does not time (transfers,
// draws): kernel-table calls keep family.entry; Tensor copies and casts are "tensor.copy" and
// "tensor.cast" there, "copy.copy" / "cast.copy" in the census.
std::string timed_name(const KernelLaunch& launch) {
  const std::string family = launch.family, entry = launch.entry;
  if (family == "transfer") return "";
  if (family == "copy" || family == "cast") return "tensor." + family;
  if (family == "tensor" && entry != "fill" && entry != "accumulate") return "";
  return family + "." + entry;
}

TEST(DeviceActivity, EveryKernelCallIsOneSpanOfTheOpThatLaunchedIt) {
  const Tensor w = param({16, 8}), b = param({16}), gamma = param({16}), beta = param({16});
  const Tensor x = Tensor::randn({4, 8});
  auto timer = std::make_shared<CpuLaunchTimer>();
  Profiler profiler({.device_activity = timer});
  KernelCensus census;
  profiler.start();
  {
    KernelCensusScope counting(census);
    backward(sum(layer_norm(linear(x, w, b), gamma, beta)));
  }
  profiler.stop();
  EXPECT_FALSE(kernel_launch_timer_open());
  const ProfilerEvents events = profiler.events();

  // The same calls, in the same order, as the census counted.
  std::vector<std::string> counted;
  for (const KernelLaunch& launch : census.launches()) {
    if (std::string name = timed_name(launch); !name.empty()) counted.push_back(name);
  }
  std::vector<std::string> timed;
  for (const DeviceActivity& d : events.device) {
    timed.push_back(d.name);
    EXPECT_GT(d.end_ns, d.start_ns) << d.name;
    EXPECT_EQ(d.thread_id, current_thread_id()) << d.name;
  }
  EXPECT_EQ(timed, counted);
  ASSERT_FALSE(timed.empty());

  // Each span belongs to the innermost scope open at its launch: the table's CPU entries hold
  // every span's time once as self time, and linear's GEMM is linear's.
  const std::vector<KeyAverage> averages = key_averages(events);
  double spans_us = 0.0, scopes_self_us = 0.0;
  std::set<std::string> span_rows;
  for (const KeyAverage& a : averages) {
    if (a.device_type == DeviceType::cpu) {
      scopes_self_us += a.self_cuda_time_total_us;
    } else {
      spans_us += a.self_cuda_time_total_us;
      span_rows.insert(a.key);
    }
  }
  // The same microseconds summed per scope and per span: doubles added in two orders.
  EXPECT_NEAR(scopes_self_us, spans_us, 1e-6);
  EXPECT_TRUE(span_rows.count("gemm.gemm") || span_rows.count("gemm.gemm_bias")) << "no GEMM row";
  for (const KeyAverage& a : averages) {
    if (a.key == "linear" && a.device_type == DeviceType::cpu) {
      EXPECT_GT(a.self_cuda_time_total_us, 0.0);
    }
  }
  const std::string table = key_averages_table(averages, {.sort_by = "self_cuda_time_total"});
  EXPECT_NE(table.find("Self CUDA %"), std::string::npos) << table;
  EXPECT_NE(table.find("Self CUDA time total: "), std::string::npos) << table;
}

TEST(DeviceActivity, NothingIsTimedOutsideRecording) {
  auto timer = std::make_shared<CpuLaunchTimer>();
  Profiler profiler({.schedule = ProfilerSchedule{.wait = 1, .warmup = 0, .active = 1},
                     .device_activity = timer});
  profiler.start();  // step 0 waits
  EXPECT_FALSE(kernel_launch_timer_open());
  Tensor::ones({4}).fill_(2.0);
  profiler.step();  // step 1 records
  EXPECT_TRUE(kernel_launch_timer_open());
  Tensor::ones({4}).fill_(3.0);
  profiler.step();
  EXPECT_FALSE(kernel_launch_timer_open());
  Tensor::ones({4}).fill_(4.0);
  profiler.stop();
  EXPECT_EQ(timer->starts, 1);
  const ProfilerEvents events = profiler.events();
  ASSERT_EQ(events.device.size(), 2u);  // ones' fill, then fill_
  for (const DeviceActivity& d : events.device) EXPECT_EQ(d.name, "tensor.fill");
}

TEST(DeviceActivity, ACpuRunHasNoSource) {
  EXPECT_EQ(make_device_activity_source(kCPU), nullptr);
  EXPECT_EQ(make_device_activity_source(kMeta), nullptr);
  EXPECT_FALSE(kernel_launch_timer_open());
}

RecordedFunction scope(const std::string& name, uint64_t thread, int64_t start_ns, int64_t end_ns) {
  RecordedFunction f;
  f.name = name;
  f.thread_id = thread;
  f.start_ns = start_ns;
  f.end_ns = end_ns;
  return f;
}

TEST(ChromeTrace, DeviceSpansOnARowPerStreamWithFlowsFromTheirLaunch) {
  ProfilerEvents events;
  events.functions.push_back(scope("linear", 11, 1'000, 9'000));
  const Device gpu{DeviceType::cuda, 0};
  events.device = {{.name = "gemm.gemm",
                    .device = gpu,
                    .stream = 7,
                    .start_ns = 5'000,
                    .end_ns = 8'500,
                    .correlation_id = 1,
                    .thread_id = 11,
                    .launch_ns = 2'000},
                   {.name = "tensor.copy",
                    .device = gpu,
                    .stream = 13,
                    .start_ns = 6'000,
                    .end_ns = 6'250,
                    .correlation_id = 2,
                    .thread_id = 11,
                    .launch_ns = 3'000},
                   {.name = "elementwise.add",
                    .device = gpu,
                    .stream = 7,
                    .start_ns = 8'600,
                    .end_ns = 8'700,
                    .correlation_id = 3,
                    .thread_id = 11,
                    .launch_ns = 4'000}};
  const nlohmann::ordered_json trace = chrome_trace(events);
  std::map<uint64_t, std::string> stream_names;
  std::map<uint64_t, std::vector<std::string>> kernels_of_stream;
  std::map<uint64_t, nlohmann::ordered_json> flow_starts, flow_ends;
  std::string gpu_name;
  for (const nlohmann::ordered_json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "thread_name") {
      stream_names[e.at("tid").get<uint64_t>()] = e.at("args").at("name");
    } else if (ph == "M" && e.at("name") == "process_name" && e.at("pid") == 0) {
      gpu_name = e.at("args").at("name");
    } else if (ph == "X" && e.at("cat") == "kernel") {
      EXPECT_EQ(e.at("pid"), 0);
      kernels_of_stream[e.at("tid").get<uint64_t>()].push_back(e.at("name"));
      EXPECT_EQ(e.at("args").at("stream"), e.at("tid"));
    } else if (ph == "s") {
      flow_starts[e.at("id").get<uint64_t>()] = e;
    } else if (ph == "f") {
      flow_ends[e.at("id").get<uint64_t>()] = e;
    }
  }
  EXPECT_EQ(gpu_name, "GPU 0");
  EXPECT_EQ(stream_names, (std::map<uint64_t, std::string>{{7, "stream 7"}, {13, "stream 13"}}));
  EXPECT_EQ(kernels_of_stream[7], (std::vector<std::string>{"gemm.gemm", "elementwise.add"}));
  EXPECT_EQ(kernels_of_stream[13], (std::vector<std::string>{"tensor.copy"}));
  ASSERT_EQ(flow_starts.size(), 3u);
  ASSERT_EQ(flow_ends.size(), 3u);
  // From the launching thread at the launch, inside linear, to the kernel's start on its stream.
  EXPECT_EQ(flow_starts[1].at("tid"), 11);
  EXPECT_DOUBLE_EQ(flow_starts[1].at("ts").get<double>(), 2.0);
  EXPECT_EQ(flow_starts[1].at("cat"), "ac2g");
  EXPECT_EQ(flow_ends[1].at("pid"), 0);
  EXPECT_EQ(flow_ends[1].at("tid"), 7);
  EXPECT_EQ(flow_ends[1].at("bp"), "e");
  EXPECT_DOUBLE_EQ(flow_ends[1].at("ts").get<double>(), 5.0);
  EXPECT_EQ(flow_ends[2].at("tid"), 13);
}

TEST(ChromeTrace, NoDeviceRowsWithoutDeviceActivity) {
  ProfilerEvents events;
  events.functions.push_back(scope("add", 1, 0, 10));
  const nlohmann::ordered_json trace = chrome_trace(events);
  ASSERT_EQ(trace.at("traceEvents").size(), 2u);  // the process's name and the op
  EXPECT_EQ(trace.at("traceEvents")[1].at("name"), "add");
}

}  // namespace
}  // namespace headroom
