// SIGINT / SIGTERM during `headroom train`: the first asks the Trainer to stop after its step
// (request_training_stop), the second ends the process as the signal's default action does.
#pragma once

#include <atomic>
#include <csignal>
#include <thread>

namespace headroom {

// Note [Stop signals are taken by one thread]
// The signals are blocked in the thread that creates the watcher, and so in every thread it
// starts afterwards (OpenMP's pool, oneDNN's work, the loader's workers), and one watcher thread
// takes them with sigtimedwait. A signal handler would run on whichever thread the kernel picks,
// often an OpenMP worker in the middle of a oneDNN kernel: about one run in fifteen that was
// stopped that way died of heap corruption ("corrupted size vs. prev_size") in oneDNN's next
// free, none with the watcher (tests/apps/test_cli_signals.cpp). The watcher runs no kernels and
// touches only an atomic. Threads that existed before the watcher keep their mask; a signal that
// reaches one of them gets the default action.
class StopSignalWatcher {
 public:
  StopSignalWatcher();
  // Stops the watcher and restores the creating thread's signal mask.
  ~StopSignalWatcher();
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

 private:
  void watch();

  sigset_t signals_;
  sigset_t old_mask_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace headroom
