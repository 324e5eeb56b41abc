// The NCCL backend of Communicator, for CUDA tensors: one communicator per job, bootstrapped by
// broadcasting rank 0's ncclUniqueId over MPI. Built only with CUDA (dist/cuda/); a CPU-only
// build's make_nccl_communicator says so (dist/no_cuda/).
#pragma once

#include <memory>

#include "dist/communicator.h"
#include "dist/mpi_communicator.h"

namespace headroom {

// Note [NCCL work on the communication stream]
// Each operation runs on the communicator's own stream, after the caller's current stream has
// reached the point where the operation was asked for (an event), so that backward's kernels go
// on beside an all-reduce. The tensors are recorded as used on that stream (Note [Streams and
// reuse]); wait() makes the caller's current stream wait for the operation, and the host never
// waits. The blocking forms (reduce_scatter, all_gather, broadcast) are the same with wait()
// called at once.

// A communicator over every rank's GPU `device` (one GPU per local rank: device.index is the
// local rank), using `bootstrap` for the unique id and for host scalars. Error from NCCL naming
// the call; NotImplementedError in a build without CUDA.
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<MpiCommunicator> bootstrap,
                                                     Device device);

}  // namespace headroom
