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

#include "core/device_activity.h"
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

// Note [CUDA time in the profiler]
// torch.profiler asks CUPTI's activity API for the kernels a step ran; headroom times what it
// launches itself. Every CUDA launch goes through a kernel-table entry (Kernel::operator(),
// backend/kernel_table.h) or a Tensor kernel (fill, copy, cast, accumulate: core/tensor.cpp), and
// while a DeviceActivitySource records, each of those calls is wrapped in a KernelLaunchTiming
// (core/device_activity.h): the CUDA backend's source (backend/cuda/kernel_timer.cpp) records a
// timing event before and after the call on the thread's current stream, with the call's name
// ("family.entry"), stream, host thread and host time. Nothing is read while the step runs;
// collect() synchronizes once when recording stops and converts each pair with
// cudaEventElapsedTime against a reference event completed at start(), whose host time is known,
// so device spans sit on the trace's clock to within microseconds. A call that launches several
// kernels (a GEMM with its workspace, a chunked loss) is one span covering them, and two
// consecutive spans on a stream include the launch gaps between kernels: the times are the
// calls', as torch's "CUDA total" of an op is its kernels'.
// The op a call belongs to is the innermost scope open on its launching thread at its host time,
// as a memory event's (key_averages.h): its "Self CUDA", while every enclosing scope's "CUDA
// total" includes it (PyTorch links kernels to ops through CUPTI's correlation ids instead). The
// calls appear as rows of their own in the table and, in the Chrome trace, as "kernel" events on a
// row per stream with a flow arrow from the launching thread. The cost while recording: two
// cudaEventRecord per call and one device synchronization per recording window; none otherwise.
// A CPU run has no source (make_device_activity_source returns null), so its profile is unchanged.

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
  // Optional (see Note [CUDA time in the profiler]): device work to record with the ops, e.g.
  // make_device_activity_source(device); started and collected with each recording window.
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
