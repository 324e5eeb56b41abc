// GOMP_SPINCOUNT for the `headroom` program, set by running the program again (see the Note).
#include "backend/cpu/openmp_spin.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace headroom::cpu {

// Note [OpenMP spin-waiting]
// An OpenMP thread with nothing to do (a worker between parallel regions, any thread at a
// region's closing barrier) spins before it sleeps on a futex. libgomp spins GOMP_SPINCOUNT
// times, 300000 unless set, meant as ~3 ms; but each spin is a PAUSE, 24 ns on the 2-core Zen 5
// machine (longer on Intel since Skylake), so 7 ms. Harmless while the process has its cores to
// itself; ruinous when other processes want them too. Then the scheduler at times puts both of
// our threads on one core and leaves them there while every core is busy, and each fork and join
// (~500 a step, oneDNN's included) waits out the spinning thread's 7 ms before the other one runs.
// Measured with `headroom train --model gpt2-tiny --bf16 --max_seq_length 256
// --per_device_train_batch_size 16` beside six looping compiles (other engineers' builds):
// stretches of ~5 s steps (825 tokens/s), mostly at the start, 55 s for 30 steps; both threads on
// one CPU in 62-83% of /proc samples during the slow steps, in none during most others; libgomp's
// spin loops 76% of the process's CPU time (perf). With 4000 spins (~0.1 ms) or 1000: no such
// stretch, 16-18 s; at 16 x 128 tokens, 0.35-0.6 s steps with both threads on one CPU in 96% of
// the samples. Alone on the machine 4000 spins are within 1% of 300000 (52k tokens/s at 16 x 256,
// 0.033 s a step at 16 x 128), as most gaps between regions are shorter; 1000 spins cost 3% at
// 16 x 256, not spinning at all (OMP_WAIT_POLICY=passive) 35% at 16 x 128.
//
// libgomp reads its environment once, in its constructor, which runs before main() and before
// any constructor of the program (a .preinit_array function runs earlier still, but before the C
// library has its environment, which then replaces whatever it set). So `headroom` sets
// GOMP_SPINCOUNT and execs itself once: same process id, same arguments, a few milliseconds.
// A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT stands (GOMP_SPINCOUNT=300000 restores libgomp's
// default). Under valgrind an exec'd program runs outside it unless --trace-children=yes, so
// there the program goes on with libgomp's default. The tests and benches are not restarted;
// spinning changes no result, only how long a result takes to come.

void restart_with_openmp_spin_count(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload && std::strstr(preload, "vgpreload")) return;  // valgrind's tool libraries
  // The program's own file: exec of /proc/self/exe itself would, under a tool that runs the
  // program in its own process image, start the tool.
  std::string path(4096, '\0');
  const ssize_t length = readlink("/proc/self/exe", path.data(), path.size());
  if (length <= 0 || static_cast<size_t>(length) >= path.size()) return;
  path.resize(static_cast<size_t>(length));
  if (setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 0) != 0) return;
  execv(path.c_str(), argv);
  unsetenv("GOMP_SPINCOUNT");  // exec failed: the environment says what libgomp runs with
}

}  // namespace headroom::cpu
