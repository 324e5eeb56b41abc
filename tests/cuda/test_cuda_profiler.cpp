// The profiler's CUDA time on the GPU (Note [CUDA time in the profiler]): a few ops and their
// backward under a profiler with the CUDA backend's source give one span per kernel-table call and
// Tensor kernel the census counts, each with a positive duration, after its launch, on the
// current stream; the table gains its CUDA columns and the trace its stream row. Skipped without
// a GPU.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "core/device_activity.h"
#include "core/kernel_census.h"
#include "cuda/cuda_test_support.h"
#include "ops/ops.h"
#include "profile/chrome_trace.h"
#include "profile/key_averages.h"
#include "profile/profiler.h"

namespace headroom {
namespace {

Tensor gpu_param(const Shape& shape) {
  Tensor t = Tensor::randn(shape).to(kGpu);
  t.set_requires_grad(true);
  return t;
}

// The census's launch under the name the timer gives it, or "" for one it does not time.
std::string timed_name(const KernelLaunch& launch) {
  const std::string family = launch.family, entry = launch.entry;
  if (family == "transfer") return "";
  if (family == "copy" || family == "cast") return "tensor." + family;
  if (family == "tensor" && entry != "fill" && entry != "accumulate") return "";
  return family + "." + entry;
}

TEST(CudaProfiler, EveryKernelCallIsOneTimedSpan) {
  REQUIRE_GPU();
  const Tensor w = gpu_param({64, 32}), b = gpu_param({64});
  const Tensor gamma = gpu_param({64}), beta = gpu_param({64});
  const Tensor x = Tensor::randn({8, 32}).to(kGpu);
  std::shared_ptr<DeviceActivitySource> source = make_device_activity_source(kGpu);
  ASSERT_NE(source, nullptr) << "the CUDA backend registers no activity source";
  Profiler profiler({.device_activity = source});
  KernelCensus census;
  synchronize_gpu();
  profiler.start();
  {
    KernelCensusScope counting(census);
    backward(sum(gelu(layer_norm(linear(x, w, b), gamma, beta))));
  }
  profiler.stop();
  const int64_t stopped_ns = record_clock_ns();
  const ProfilerEvents events = profiler.events();

  std::vector<std::string> counted, timed;
  for (const KernelLaunch& launch : census.launches()) {
    if (!launch.device.is_cuda()) continue;
    if (std::string name = timed_name(launch); !name.empty()) counted.push_back(name);
  }
  std::set<uint64_t> streams;
  for (const DeviceActivity& d : events.device) {
    timed.push_back(d.name);
    EXPECT_EQ(d.device, kGpu) << d.name;
    EXPECT_GT(d.end_ns, d.start_ns) << d.name << ": no device time";
    // Device clock against host clock: within the reference's wake-up (tens of microseconds).
    EXPECT_GE(d.start_ns + 100'000, d.launch_ns) << d.name << " starts before its launch";
    EXPECT_LE(d.end_ns, stopped_ns + 100'000) << d.name << " ends after collect()";
    EXPECT_NE(d.correlation_id, 0u);
    streams.insert(d.stream);
  }
  EXPECT_EQ(timed, counted);
  EXPECT_GE(timed.size(), 8u);
  EXPECT_EQ(streams.size(), 1u) << "every op ran on the current stream";

  const std::vector<KeyAverage> averages = key_averages(events);
  bool linear_has_time = false;
  for (const KeyAverage& a : averages) {
    if (a.key == "linear" && a.device_type == DeviceType::cpu) {
      linear_has_time = a.cuda_time_total_us > 0.0;
    }
  }
  EXPECT_TRUE(linear_has_time);
  const std::string table = key_averages_table(averages, {.sort_by = "self_cuda_time_total"});
  EXPECT_NE(table.find("Self CUDA %"), std::string::npos) << table;
  EXPECT_NE(table.find("Self CUDA time total: "), std::string::npos) << table;

  int kernels = 0;
  for (const auto& e : chrome_trace(events).at("traceEvents")) {
    if (e.at("ph") == "X" && e.at("cat") == "kernel") ++kernels;
  }
  EXPECT_EQ(kernels, static_cast<int>(timed.size()));
}

TEST(CudaProfiler, RecordingWindowsAreCollectedApart) {
  REQUIRE_GPU();
  std::shared_ptr<DeviceActivitySource> source = make_device_activity_source(kGpu);
  ASSERT_NE(source, nullptr);
  Profiler profiler({.schedule = ProfilerSchedule{.wait = 0, .warmup = 1, .active = 1, .repeat = 2},
                     .device_activity = source});
  const Tensor t = Tensor::zeros({1024}).to(kGpu);
  profiler.start();
  for (int step = 0; step < 4; ++step) {
    t.fill_(static_cast<double>(step));  // one Tensor kernel a step; steps 1 and 3 record
    profiler.step();
  }
  profiler.stop();
  const ProfilerEvents events = profiler.events();
  ASSERT_EQ(events.device.size(), 2u);
  for (const DeviceActivity& d : events.device) {
    EXPECT_EQ(d.name, "tensor.fill");
    EXPECT_GT(d.end_ns, d.start_ns);
  }
  EXPECT_LT(events.device[0].end_ns, events.device[1].start_ns);
  EXPECT_FALSE(kernel_launch_timer_open());
}

}  // namespace
}  // namespace headroom
