// The registry of allocation observers.
#include "memory/memory_observer.h"

namespace headroom::detail {

// Constant-initialised: allocations during static initialisation find it ready.
constinit ObserverList<MemoryObserver> g_memory_observers;

}  // namespace headroom::detail
