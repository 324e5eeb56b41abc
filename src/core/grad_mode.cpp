// Thread-local grad mode, as PyTorch keeps it per thread.
#include "core/grad_mode.h"

namespace headroom {

namespace {
thread_local bool grad_enabled = true;
}

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

}  // namespace headroom
