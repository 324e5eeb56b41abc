// The communicator of a dry run: one rank of a data-parallel job on the meta device, with no
// other process behind it, so that the planner runs rank r's own training step (plan/dry_run.h).
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace headroom {

// Note [A dry run's collectives]
// A rank's memory depends on which collectives it calls (ZeRO's share, its buckets), not on
// what they carry, and neither real backend allocates from the device's allocator: MPI reduces
// host copies of the values (Note [Reductions of bf16 and f16 over MPI]), NCCL writes into the
// tensors it is given. So the meta communicator checks its arguments as they do and moves
// nothing: the trainer around it makes rank r's allocations, in rank r's order, and the dry run
// measures them. Host scalars are reduced as if every rank held this one's value (sum: the value
// times world_size), which is all a dry run can know.
class MetaCommunicator final : public Communicator {
 public:
  // Rank `rank` of `world_size` (ValueError unless 0 <= rank < world_size and world_size >= 1).
  MetaCommunicator(int rank, int world_size);

  std::string backend() const override { return "meta"; }
  Device device() const override { return kMeta; }
  std::unique_ptr<CommWork> all_reduce_async(const Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<CommWork> reduce_async(const Tensor& tensor, int root, ReduceOp op) override;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  std::unique_ptr<CommWork> broadcast_async(const Tensor& tensor, int root) override;
  void barrier() override {}
  double all_reduce_scalar(double value, ReduceOp op) override;
};

}  // namespace headroom
