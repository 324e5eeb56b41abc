// ObserverList: the registry behind the engine's observation hooks (op scopes, allocations),
// built so that a hot path asks "is anyone listening?" with one relaxed atomic load.
#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace headroom {

// Observers are called under the list's mutex, one at a time; remove() therefore waits for a
// call in progress, so an observer may be destroyed once it is removed. An observer must not
// add or remove observers of the same list from inside a call (the mutex is not recursive).
template <typename Observer>
class ObserverList {
 public:
  constexpr ObserverList() = default;
  ObserverList(const ObserverList&) = delete;
  ObserverList& operator=(const ObserverList&) = delete;

  // Relaxed: a call racing with add() or remove() may miss or see one event, no more.
  bool any() const { return count_.load(std::memory_order_relaxed) > 0; }

  void add(Observer* observer) {
    std::lock_guard<std::mutex> lock(mutex_);
    observers_.push_back(observer);
    count_.store(static_cast<int>(observers_.size()), std::memory_order_relaxed);
  }

  void remove(Observer* observer) {
    std::lock_guard<std::mutex> lock(mutex_);
    observers_.erase(std::remove(observers_.begin(), observers_.end(), observer), observers_.end());
    count_.store(static_cast<int>(observers_.size()), std::memory_order_relaxed);
  }

  template <typename F>
  void notify(F&& call) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Observer* observer : observers_) call(*observer);
  }

 private:
  std::atomic<int> count_{0};
  std::mutex mutex_;
  std::vector<Observer*> observers_;
};

}  // namespace headroom
