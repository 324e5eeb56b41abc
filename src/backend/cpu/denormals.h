// Flush-to-zero for the CPU's fp32 arithmetic (torch.set_flush_denormal(True)). Subnormal
// values (below 1.2e-38) make x86 arithmetic up to 100x slower; training produces them late in
// a run (tiny attention probabilities, Adam second moments), which stalls every kernel that
// meets them. Flushing them changes no value a model can tell apart from zero.
#pragma once

namespace headroom::cpu {

// Sets FTZ and DAZ on the calling thread and every OpenMP thread, once per process, unless
// HEADROOM_FLUSH_DENORMAL=0. Threads created later inherit the setting from their creator.
void ensure_flush_denormal();

}  // namespace headroom::cpu
