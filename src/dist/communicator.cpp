// Communicator's shared checks and the choice of backend for a run's device.
#include "dist/communicator.h"

#include "core/error.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"

namespace headroom {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

void Communicator::check_tensor(const char* op, const char* what, const Tensor& tensor,
                                bool integers_allowed) const {
  if (!tensor.defined()) throw ValueError(str_cat(op, ": ", what, " is undefined"));
  const DType dtype = tensor.dtype();
  const bool floating = dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  if (!floating && !(integers_allowed && dtype == DType::i64)) {
    throw NotImplementedError(
        str_cat(op, ": ", what, " is ", dtype_name(dtype), "; ",
                integers_allowed ? "f32, bf16, f16 and i64" : "f32, bf16 and f16",
                " tensors are supported"));
  }
  if (!tensor.is_contiguous()) throw ValueError(str_cat(op, ": ", what, " is not contiguous"));
  if (tensor.device() != device()) {
    throw ValueError(str_cat(op, ": ", what, " is on ", tensor.device(), "; the ", backend(),
                             " communicator carries ", device(), " tensors"));
  }
}

void Communicator::check_all_reduce(const Tensor& tensor, ReduceOp op) const {
  check_tensor("all_reduce", "tensor", tensor, true);
  if (tensor.dtype() == DType::i64 && op == ReduceOp::avg) {
    throw ValueError("all_reduce: an i64 tensor is summed or maximized, not averaged");
  }
}

void Communicator::check_root(const char* op, int root) const {
  if (root < 0 || root >= world_size()) {
    throw ValueError(str_cat(op, ": root ", root, " is outside 0..", world_size() - 1));
  }
}

void Communicator::check_world_multiple(const char* op, const char* whole_name, const Tensor& whole,
                                        const char* part_name, const Tensor& part) const {
  if (whole.numel() == part.numel() * world_size() && whole.dtype() == part.dtype()) return;
  throw ValueError(str_cat(
      op, ": ", whole_name, " has ", whole.numel(), " ", dtype_name(whole.dtype()), " elements, ",
      part_name, " ", part.numel(), " ", dtype_name(part.dtype()), "; ", whole_name,
      " must hold world_size (", world_size(), ") times ", part_name, "'s, in the same dtype"));
}

std::shared_ptr<Communicator> make_communicator(const LaunchEnvironment& env, Device device) {
  if (!env.distributed()) return nullptr;
  if (device.is_meta()) {
    throw ValueError(
        str_cat("device meta: a dry run plans one rank; run it without ", env.launcher));
  }
  const int mpi_world = start_mpi();
  if (mpi_world != env.world_size) {
    throw ValueError(str_cat(env.launcher, "'s world size ", env.world_size, " differs from MPI's ",
                             mpi_world, ": launch the ranks with mpirun -np ", env.world_size));
  }
  auto mpi = std::make_shared<MpiCommunicator>();
  if (device.is_cpu()) return mpi;
  return make_nccl_communicator(std::move(mpi), device);
}

}  // namespace headroom
