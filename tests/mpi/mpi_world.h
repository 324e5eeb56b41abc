// The multi-process tests' communicator: the one world of ranks mpirun started, shared by every
// test in the program; null in a single process.
#pragma once

#include <memory>

#include "dist/communicator.h"
#include "dist/launch_environment.h"

namespace headroom::test_mpi {

// Without mpirun there is one process and no other rank to exchange with; ctest -L mpi runs these
// tests under `mpirun -np 2`, where they do run.
inline constexpr const char* kNeedsTwoRanks = "one process: run under mpirun -np 2 (ctest -L mpi)";

inline std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> communicator = make_communicator(launch_environment(), kCPU);
  return communicator;
}

}  // namespace headroom::test_mpi
