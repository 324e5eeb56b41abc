// RecordFunction's slow path: what a scope does while an observer is installed.
#include "core/record_function.h"

#include <unistd.h>

#include "core/tensor.h"

namespace headroom {

namespace detail {
// Constant-initialised, so ops that run during static initialisation find it ready.
constinit ObserverList<RecordFunctionObserver> g_record_function_observers;
}  // namespace detail

struct RecordFunction::State {
  RecordedFunction function;
  State* parent = nullptr;  // the thread's enclosing active scope
};

thread_local RecordFunction::State* RecordFunction::innermost_ = nullptr;

uint64_t current_thread_id() {
  thread_local const uint64_t id = static_cast<uint64_t>(::gettid());
  return id;
}

bool RecordFunction::begin(std::string_view name) {
  if (scope_ == RecordScope::function && innermost_ &&
      innermost_->function.scope == RecordScope::function && innermost_->function.name == name) {
    return false;  // Note [An op re-entered by autocast is one event]
  }
  state_ = new State;
  state_->function.name = name;
  state_->function.scope = scope_;
  state_->function.thread_id = current_thread_id();
  state_->parent = innermost_;
  innermost_ = state_;
  return true;
}

void RecordFunction::start_clock() { state_->function.start_ns = record_clock_ns(); }

void RecordFunction::add_input(const Tensor& input) {
  RecordedFunction& f = state_->function;
  if (input.defined()) {
    f.input_dims.push_back(input.shape().to_vector());
    f.input_types.emplace_back(dtype_name(input.dtype()));
  } else {
    f.input_dims.emplace_back();
    f.input_types.emplace_back();
  }
}

void RecordFunction::before(std::string_view name, const std::vector<Tensor>& inputs) {
  if (!active_ || state_) return;
  if (!begin(name)) return;
  for (const Tensor& input : inputs) add_input(input);
  start_clock();
}

void RecordFunction::end() {
  state_->function.end_ns = record_clock_ns();
  innermost_ = state_->parent;
  detail::g_record_function_observers.notify(
      [&](RecordFunctionObserver& observer) { observer.on_function(state_->function); });
  delete state_;
  state_ = nullptr;
}

}  // namespace headroom
