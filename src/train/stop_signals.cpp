// The watcher thread of Note [Stop signals are taken by one thread].
#include "train/stop_signals.h"

#include <pthread.h>

#include <ctime>

#include "train/trainer.h"

namespace headroom {

StopSignalWatcher::StopSignalWatcher() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, &old_mask_);
  thread_ = std::thread([this] { watch(); });
}

StopSignalWatcher::~StopSignalWatcher() {
  done_.store(true);
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void StopSignalWatcher::watch() {
  bool requested = false;
  const timespec poll{0, 50'000'000};  // how soon the destructor's done_ is seen
  while (!done_.load()) {
    const int signal_number = sigtimedwait(&signals_, nullptr, &poll);
    if (signal_number <= 0) continue;  // timeout or EINTR
    if (!requested) {
      request_training_stop(signal_number);
      requested = true;
      continue;
    }
    // The second: the default action, on this thread, which alone unblocks it.
    std::signal(signal_number, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signal_number);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    pthread_kill(pthread_self(), signal_number);
  }
}

}  // namespace headroom
