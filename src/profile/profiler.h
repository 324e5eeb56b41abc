// Profiler: torch.profiler.profile for headroom. Over the steps its schedule marks active it
// keeps every thread's op scopes (core/record_function.h) and allocator events
// (memory/memory_observer.h), for a Chrome trace (chrome_trace.h) and a summary table
// (key_averages.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/record_function.h"
#include "memory/memory_observer.h"
#include "profile/schedule.h"

namespace headroom {

// An allocation or free seen while recording: a "[memory]" event.
struct MemoryRecord {
  MemoryUsageEvent usage;
  uint64_t thread_id = 0;
  int64_t time_ns = 0;  // record_clock_ns()
};

// A span of device work (a CUDA kernel, a copy) on one of its queues.
struct DeviceActivity {
  std::string name;
  Device device;
  uint64_t stream = 0;
  int64_t start_ns = 0;  // record_clock_ns(), converted from the device's clock
  int64_t end_ns = 0;
};

// Note [CUDA time in the profiler]
// headroom has no CUDA kernels yet (backend/cuda holds memory and tensor basics), so there is no
// device time to measure and none is shown: no "Self CUDA" / "CUDA total" columns, no kernel
// events. When kernels arrive, a DeviceActivitySource for CUDA supplies them: the launching code
// records a cudaEvent pair around each kernel while a source is started (as CUPTI's activity API
// does for torch's Kineto), and collect() synchronizes, reads cudaEventElapsedTime against a
// reference event taken at start(), and returns the spans. The profiler starts and stops its
// sources with recording and puts what they collect into the trace (cat "kernel", one row per
// stream); attributing kernel time to the CPU op that launched it (the table's CUDA columns)
// would then follow PyTorch's correlation ids.
class DeviceActivitySource {
 public:
  virtual ~DeviceActivitySource() = default;
  virtual void start() = 0;  // recording begins
  virtual void stop() = 0;   // recording ends
  // The spans finished since start(); called after stop().
  virtual std::vector<DeviceActivity> collect() = 0;
};

// Everything one profiler recorded.
struct ProfilerEvents {
  std::vector<RecordedFunction> functions;  // in the order the scopes ended
  std::vector<MemoryRecord> memory;         // in the order observers were told
  std::vector<DeviceActivity> device;       // from the DeviceActivitySource, if any
};

struct ProfilerOptions {
  // nullopt: every step records, from start() to stop() (torch's profile() without schedule).
  std::optional<ProfilerSchedule> schedule = std::nullopt;
  bool profile_memory = true;  // keep "[memory]" events (torch's profile_memory)
  // Optional (see Note [CUDA time in the profiler]): device work to add to the trace.
  std::shared_ptr<DeviceActivitySource> device_activity = nullptr;
};

// Usage, as torch's:
//   Profiler profiler({.schedule = ProfilerSchedule{.wait = 1, .warmup = 1, .active = 3}});
//   profiler.start();
//   for (...) { train_step(); profiler.step(); }
//   profiler.stop();
//   write_chrome_trace(profiler.events(), "trace.json");
// Each step is recorded whole as a "ProfilerStep#N" scope of the thread that calls step(). All
// active cycles go into one recording (torch hands each to on_trace_ready instead): with
// repeat 0 a long run keeps adding to it.
class Profiler final : private RecordFunctionObserver, private MemoryObserver {
 public:
  // ValueError naming the field for an invalid schedule.
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler() override;  // stops
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Step 0 begins; recording starts if the schedule says so. Error when already started.
  void start();
  // The current step ends and the next begins, recording or not as the schedule says.
  void step();
  // The current step ends; recording stops for good. No-op when not started.
  void stop();

  bool is_started() const { return started_; }
  int64_t step_num() const { return step_num_; }
  ProfilerAction current_action() const { return action_; }
  bool is_recording() const;

  // A copy of what has been recorded so far.
  ProfilerEvents events() const;

 private:
  ProfilerAction action_of(int64_t step) const;
  void set_recording(bool recording);
  void end_step();
  void on_function(const RecordedFunction& function) override;
  void on_memory_usage(const MemoryUsageEvent& event) override;

  ProfilerOptions options_;
  bool started_ = false;
  bool stopped_ = false;
  bool recording_ = false;
  int64_t step_num_ = 0;
  ProfilerAction action_ = ProfilerAction::none;
  int64_t step_start_ns_ = 0;

  mutable std::mutex mutex_;  // guards events_: observers call from any thread
  ProfilerEvents events_;
};

}  // namespace headroom
