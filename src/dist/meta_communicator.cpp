// MetaCommunicator: collectives that check their arguments and move nothing (See Note [A dry
// run's collectives]).
#include "dist/meta_communicator.h"

#include "core/error.h"

namespace headroom {

namespace {

// Meta tensors hold no values: an operation is done when it is asked for.
class DoneWork final : public CommWork {
 public:
  bool test() override { return true; }
  void wait() override {}
};

int checked_rank(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ValueError(str_cat("dry-run communicator: rank ", rank, " of world_size ", world_size,
                             "; the rank must be in 0..world_size-1"));
  }
  return rank;
}

}  // namespace

MetaCommunicator::MetaCommunicator(int rank, int world_size)
    : Communicator(checked_rank(rank, world_size), world_size) {}

std::unique_ptr<CommWork> MetaCommunicator::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<CommWork> MetaCommunicator::reduce_async(const Tensor& tensor, int root, ReduceOp) {
  check_tensor("reduce", "tensor", tensor);
  check_root("reduce", root);
  return std::make_unique<DoneWork>();
}

void MetaCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  check_world_multiple("reduce_scatter", "input", input, "output", output);
}

void MetaCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  check_tensor("all_gather", "input", input, true);
  check_tensor("all_gather", "output", output, true);
  check_world_multiple("all_gather", "output", output, "input", input);
}

std::unique_ptr<CommWork> MetaCommunicator::broadcast_async(const Tensor& tensor, int root) {
  check_tensor("broadcast", "tensor", tensor, true);
  check_root("broadcast", root);
  return std::make_unique<DoneWork>();
}

double MetaCommunicator::all_reduce_scalar(double value, ReduceOp op) {
  return op == ReduceOp::sum ? value * world_size() : value;
}

}  // namespace headroom
