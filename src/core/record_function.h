// RecordFunction: a scope around an op, an autograd node's backward or a phase of the training
// step, handed to observers (the profiler, profile/) when it ends, with its name, thread, times
// and input shapes: PyTorch's at::RecordFunction. With no observer installed a scope costs one
// relaxed atomic load, so every op can carry one.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/observer_list.h"

namespace headroom {

class Tensor;

// PyTorch's at::RecordScope, reduced to the kinds headroom records.
enum class RecordScope : uint8_t {
  function,           // an op of src/ops ("cpu_op" in a Chrome trace)
  backward_function,  // an autograd node's backward and the engine's work around it ("cpu_op")
  user_scope,         // a named phase: forward, backward, optimizer.step ("user_annotation")
};

// The clock of every recorded time (op scopes, allocation events): steady, in nanoseconds.
inline int64_t record_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The calling thread's id as the OS knows it (what a Chrome trace shows as tid).
uint64_t current_thread_id();

struct RecordedFunction {
  std::string name;
  RecordScope scope = RecordScope::function;
  uint64_t thread_id = 0;
  int64_t start_ns = 0;  // record_clock_ns()
  int64_t end_ns = 0;
  // One entry per tensor input, as PyTorch's "Input Dims" and "Input type"; an undefined input
  // (an absent bias) has no dims and the type "".
  std::vector<std::vector<int64_t>> input_dims;
  std::vector<std::string> input_types;
};

class RecordFunctionObserver {
 public:
  virtual ~RecordFunctionObserver() = default;
  // A scope that began while an observer was installed has ended. Called on the scope's thread
  // under the registry's lock (see ObserverList); it must not open scopes itself.
  virtual void on_function(const RecordedFunction& function) = 0;
};

namespace detail {
extern ObserverList<RecordFunctionObserver> g_record_function_observers;
}  // namespace detail

// The observers of every RecordFunction (add / remove); a scope asks any() when it starts.
inline ObserverList<RecordFunctionObserver>& record_function_observers() {
  return detail::g_record_function_observers;
}

// Note [An op re-entered by autocast is one event]
// An autocast op (linear, layer_norm, ...) casts its inputs and calls itself again with the casts.
// PyTorch's dispatcher records an op once, at its outermost call, with the casts as children;
// here the inner call's scope sees an open scope of the same op on its thread and stays inactive,
// so the trace and the summary count one call whose time includes the casts.
class RecordFunction {
 public:
  // A scope whose name is costly to make: active when an observer is installed, and then named by
  // before(). As PyTorch's `RecordFunction guard(scope); if (guard.isActive()) guard.before(...)`.
  explicit RecordFunction(RecordScope scope) noexcept
      : scope_(scope), active_(detail::g_record_function_observers.any()) {}

  // An op's scope, named `op`, with the shapes and dtypes of `inputs`.
  template <typename... Tensors>
  requires(std::same_as<Tensors, Tensor>&&...) explicit RecordFunction(const char* op,
                                                                       const Tensors&... inputs)
      : scope_(RecordScope::function), active_(detail::g_record_function_observers.any()) {
    if (active_) [[unlikely]] {
      if (begin(op)) {
        (add_input(inputs), ...);
        start_clock();  // after the shapes: their copying is the profiler's time, not the op's
      }
    }
  }

  // A named scope without inputs: a phase such as "forward".
  RecordFunction(RecordScope scope, std::string_view name)
      : scope_(scope), active_(detail::g_record_function_observers.any()) {
    if (active_ && begin(name)) [[unlikely]]
      start_clock();
  }

  ~RecordFunction() {
    if (state_) [[unlikely]]
      end();
  }
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

  bool is_active() const { return active_; }
  // Names an active scope made from a RecordScope alone and records its inputs; once.
  void before(std::string_view name, const std::vector<Tensor>& inputs);

 private:
  struct State;
  // False when the scope stays inactive (Note [An op re-entered by autocast is one event]).
  bool begin(std::string_view name);
  void add_input(const Tensor& input);
  void start_clock();
  void end();

  // The calling thread's innermost active scope; scopes end in reverse order of their start.
  static thread_local State* innermost_;

  RecordScope scope_;
  bool active_;
  State* state_ = nullptr;
};

}  // namespace headroom
