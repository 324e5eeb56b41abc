// The MPI backend of Communicator, for CPU tensors, and the MPI library's start and end for the
// process (MPI_Init_thread once, MPI_Finalize at exit, MPI_Abort on a failed rank).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace headroom {

// Note [Reductions of bf16 and f16 over MPI]
// MPI has no bf16 or f16 datatype. Reductions widen each rank's values to f32 (exact), reduce the
// f32 buffers with MPI's own MPI_SUM / MPI_MAX, and round the result once to the tensor's dtype
// (avg: the f32 sum divided by world_size first). That is one rounding per element, where NCCL's
// native bf16 sum rounds after every addition; with 2 ranks both are the same. Copies (broadcast,
// all_gather) move the 16-bit words as they are.
class MpiCommunicator final : public Communicator {
 public:
  // The world of mpirun's ranks (MPI_COMM_WORLD duplicated, so that headroom's messages never
  // meet a caller's). Starts MPI when it has not started.
  MpiCommunicator();
  ~MpiCommunicator() override;

  std::string backend() const override { return "mpi"; }
  Device device() const override { return kCPU; }
  std::unique_ptr<CommWork> all_reduce_async(const Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<CommWork> reduce_async(const Tensor& tensor, int root, ReduceOp op) override;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  std::unique_ptr<CommWork> broadcast_async(const Tensor& tensor, int root) override;
  void barrier() override;
  double all_reduce_scalar(double value, ReduceOp op) override;

  // Raw bytes from `root` to every rank (NCCL's unique id).
  void broadcast_bytes(void* data, size_t size, int root);

 private:
  struct Handle;
  std::unique_ptr<Handle> handle_;
};

// MPI_Init_thread (MPI_THREAD_FUNNELED: only the thread that runs the trainer calls MPI) unless
// MPI has started; its MPI_Finalize runs at exit. Returns MPI_COMM_WORLD's size.
int start_mpi();
// Ends the whole job at once (MPI_Abort): the way out of a rank that failed, so that the others,
// possibly waiting in a collective, do not wait forever. Prints `reason` with the rank first.
[[noreturn]] void abort_mpi_job(const std::string& reason, int exit_code);
// Whether MPI has been started in this process (and not finalized).
bool mpi_started();

}  // namespace headroom
