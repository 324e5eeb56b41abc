// How long an idle OpenMP thread spins before it sleeps: libgomp's default is milliseconds, which
// makes a training step 10-30x slower whenever other processes want the same cores. See
// Note [OpenMP spin-waiting] in openmp_spin.cpp.
#pragma once

namespace headroom::cpu {

// The GOMP_SPINCOUNT headroom runs libgomp with when the user has chosen no wait policy.
inline constexpr char kOpenMpSpinCount[] = "4000";

// When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, puts GOMP_SPINCOUNT=kOpenMpSpinCount in
// the environment and execs this program again with the same arguments, since libgomp reads its
// environment only once, before main(). Returns (doing nothing) when the user chose a policy,
// under valgrind, or when the exec fails. Call first thing in main(), before any other thread.
void restart_with_openmp_spin_count(char** argv);

}  // namespace headroom::cpu
