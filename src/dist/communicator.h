// The collective operations data-parallel training needs (torch.distributed's names), over one
// group of ranks: an MPI backend for CPU tensors (dist/mpi_communicator.h) and an NCCL backend for
// CUDA tensors (dist/nccl_communicator.h).
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"
#include "dist/launch_environment.h"

namespace headroom {

enum class ReduceOp { sum, avg, max };

const char* reduce_op_name(ReduceOp op);

// An operation in flight: wait() returns once its result is in the output tensors (MPI) or is
// ordered before any later work on the caller's current stream (NCCL: the host does not wait).
// The tensors it names must stay alive until then.
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Moves the operation along without blocking (MPI progresses only inside its calls); whether
  // it has finished.
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// Every tensor must be contiguous, f32 / bf16 / f16 (i64 too for broadcast, all_gather and
// all_reduce's sum and max, which are exact in integers), on
// the communicator's device, with the same shape on every rank (ValueError naming the operation
// and argument otherwise). Every rank must call the same operations in the same order.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // "mpi" or "nccl".
  virtual std::string backend() const = 0;
  virtual Device device() const = 0;

  // In place: every rank's `tensor` becomes the element-wise reduction over the ranks (avg: the
  // sum divided by world_size).
  virtual std::unique_ptr<CommWork> all_reduce_async(const Tensor& tensor, ReduceOp op) = 0;
  void all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }
  // In place on rank `root`: its `tensor` becomes the element-wise reduction over the ranks; the
  // others' `tensor` only sends (left as it was). ZeRO-2 reduces each gradient to its owner.
  virtual std::unique_ptr<CommWork> reduce_async(const Tensor& tensor, int root, ReduceOp op) = 0;
  // `input` holds world_size equal chunks of output.numel() elements; rank r's `output` becomes
  // the reduction of every rank's chunk r.
  virtual void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  // `output` (world_size times input.numel() elements) becomes every rank's `input`, in rank order.
  virtual void all_gather(const Tensor& input, const Tensor& output) = 0;
  // Every rank's `tensor` becomes rank `root`'s (after wait(); ZeRO-3 prefetches with it).
  virtual std::unique_ptr<CommWork> broadcast_async(const Tensor& tensor, int root) = 0;
  void broadcast(const Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
  virtual void barrier() = 0;

  // A host double reduced over the ranks (a loss sum, a flag), over MPI in both backends (NCCL's
  // communicator asks its MPI bootstrap).
  virtual double all_reduce_scalar(double value, ReduceOp op) = 0;

 protected:
  Communicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  // The checks named above, for an operation on `tensor` called `what`.
  void check_tensor(const char* op, const char* what, const Tensor& tensor,
                    bool integers_allowed = false) const;
  // ValueError naming `op` when `root` is not a rank of this group.
  void check_root(const char* op, int root) const;
  // ValueError naming `op` unless `whole` holds world_size times `part`'s elements, in its dtype
  // (reduce_scatter's input and output, all_gather's output and input).
  void check_world_multiple(const char* op, const char* whole_name, const Tensor& whole,
                            const char* part_name, const Tensor& part) const;
  // all_reduce's checks: check_tensor's, with i64 for sum and max (ValueError for avg, which
  // integers cannot hold).
  void check_all_reduce(const Tensor& tensor, ReduceOp op) const;

 private:
  int rank_;
  int world_size_;
};

// The communicator a run on `device` uses in the job `env` describes: MPI for the CPU, NCCL
// (bootstrapped over MPI) for CUDA; nullptr for one process. The MPI library is started on the
// first call. ValueError when the launcher's world size differs from MPI's (a torchrun-style
// launch without mpirun) or for the meta device.
std::shared_ptr<Communicator> make_communicator(const LaunchEnvironment& env, Device device);

}  // namespace headroom
