// The profiler's state machine (torch.profiler.profile's start / step / stop) and its observers.
#include "profile/profiler.h"

#include "core/error.h"

namespace headroom {

Profiler::Profiler(ProfilerOptions options) : options_(std::move(options)) {
  if (options_.schedule) options_.schedule->validate();
}

Profiler::~Profiler() { stop(); }

ProfilerAction Profiler::action_of(int64_t step) const {
  return options_.schedule ? options_.schedule->action(step) : ProfilerAction::record;
}

bool Profiler::is_recording() const { return recording_; }

void Profiler::start() {
  if (started_) throw Error("Profiler: start() called twice");
  started_ = true;
  step_num_ = 0;
  action_ = action_of(0);
  step_start_ns_ = record_clock_ns();
  set_recording(action_ == ProfilerAction::record || action_ == ProfilerAction::record_and_save);
}

void Profiler::step() {
  if (!started_ || stopped_) throw Error("Profiler: step() outside start() ... stop()");
  end_step();
  ++step_num_;
  action_ = action_of(step_num_);
  set_recording(action_ == ProfilerAction::record || action_ == ProfilerAction::record_and_save);
  step_start_ns_ = record_clock_ns();
}

void Profiler::stop() {
  if (!started_ || stopped_) return;
  end_step();
  set_recording(false);
  stopped_ = true;
  action_ = ProfilerAction::none;
}

void Profiler::end_step() {
  if (!recording_) return;
  RecordedFunction step;
  step.name = str_cat("ProfilerStep#", step_num_);
  step.scope = RecordScope::user_scope;
  step.thread_id = current_thread_id();
  step.start_ns = step_start_ns_;
  step.end_ns = record_clock_ns();
  std::lock_guard<std::mutex> lock(mutex_);
  events_.functions.push_back(std::move(step));
}

// Never called with mutex_ held: observers' calls take the registries' locks, then mutex_.
void Profiler::set_recording(bool recording) {
  if (recording == recording_) return;
  recording_ = recording;
  if (recording) {
    if (options_.device_activity) options_.device_activity->start();
    record_function_observers().add(this);
    if (options_.profile_memory) memory_observers().add(this);
  } else {
    record_function_observers().remove(this);
    if (options_.profile_memory) memory_observers().remove(this);
    if (options_.device_activity) {
      options_.device_activity->stop();
      std::vector<DeviceActivity> spans = options_.device_activity->collect();
      std::lock_guard<std::mutex> lock(mutex_);
      for (DeviceActivity& span : spans) events_.device.push_back(std::move(span));
    }
  }
}

void Profiler::on_function(const RecordedFunction& function) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.functions.push_back(function);
}

void Profiler::on_memory_usage(const MemoryUsageEvent& event) {
  const MemoryRecord record{event, current_thread_id(), record_clock_ns()};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.memory.push_back(record);
}

ProfilerEvents Profiler::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

}  // namespace headroom
