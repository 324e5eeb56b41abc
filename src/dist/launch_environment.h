// Where this process stands in a data-parallel job, as its launcher tells it: mpirun's
// OMPI_COMM_WORLD_* variables, or torchrun's RANK / WORLD_SIZE / LOCAL_RANK.
#pragma once

#include <string>

namespace headroom {

struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // this process's index on its node: its GPU (one GPU per local rank)
  int local_world_size = 1;  // processes on this node
  std::string launcher = "none";  // "mpirun", "torchrun" or "none" (one process)

  bool distributed() const { return world_size > 1; }
};

// Reads OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE when mpirun set them, else RANK /
// WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE, else one process. ValueError naming the variable
// for a value that is not an integer, or out of range (rank outside 0..world_size-1).
LaunchEnvironment launch_environment();

}  // namespace headroom
