// A CPU-only build has no NCCL backend: a CUDA run cannot get here, but the message says why.
#include "dist/nccl_communicator.h"

#include "core/error.h"

namespace headroom {

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<MpiCommunicator>,
                                                     Device device) {
  throw NotImplementedError(str_cat("the NCCL communicator for ", device,
                                    " has no implementation in this build (built without CUDA)"));
}

}  // namespace headroom
