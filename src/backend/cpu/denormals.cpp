// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) on every thread of the pool.
#include "backend/cpu/denormals.h"

#include <omp.h>
#include <xmmintrin.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace headroom::cpu {

void ensure_flush_denormal() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* setting = std::getenv("HEADROOM_FLUSH_DENORMAL");
    if (setting && std::strcmp(setting, "0") == 0) return;
    constexpr unsigned kFtzDaz = 0x8040;
    _mm_setcsr(_mm_getcsr() | kFtzDaz);
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | kFtzDaz);
  });
}

}  // namespace headroom::cpu
