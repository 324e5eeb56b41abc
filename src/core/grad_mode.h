// Whether ops record autograd history on this thread (torch.no_grad / torch.enable_grad).
#pragma once

namespace headroom {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Ops run inside the scope record nothing: for evaluation, optimizer updates and kernels that
// write into parameters.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace headroom
