// Communicator over MPI: nonblocking all-reduce for overlapping backward, blocking others.
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom {

namespace {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(str_cat(call, " failed: ", std::string(text, static_cast<size_t>(length))));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int count_of(const char* op, const Tensor& tensor) {
  if (tensor.numel() > INT_MAX) {
    throw ValueError(
        str_cat(op, ": ", tensor.numel(), " elements, over MPI's count limit ", INT_MAX));
  }
  return static_cast<int>(tensor.numel());
}

// The MPI datatype that moves `dtype`'s elements as they are.
MPI_Datatype copy_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i64:
      return MPI_INT64_T;
    default:
      return MPI_UINT16_T;  // bf16 / f16 (check_tensor allows nothing else)
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// `values` (f32) divided by world_size for avg, then written into `out` in its dtype.
void finish_reduction(std::vector<float>& values, const Tensor& out, ReduceOp op, int world) {
  if (op == ReduceOp::avg) {
    const float divisor = static_cast<float>(world);
    for (float& v : values) v /= divisor;
  }
  out.storage()->bump_version();
  if (out.dtype() == DType::f32) {
    std::copy(values.begin(), values.end(), out.data<float>());
  } else {
    convert_from_f32(values.data(), out.data_ptr(), out.dtype(), values.size());
  }
}

// An f32 copy of `tensor` (bf16 / f16 widened; See Note [Reductions of bf16 and f16 over MPI]).
std::vector<float> as_f32(const Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.numel()));
  if (tensor.dtype() == DType::f32) {
    const float* data = tensor.data<float>();
    std::copy(data, data + values.size(), values.begin());
  } else {
    convert_to_f32(tensor.data_ptr(), tensor.dtype(), values.data(), values.size());
  }
  return values;
}

// A nonblocking reduction over f32 copies: to every rank (root < 0, MPI_Iallreduce) or to `root`
// alone (MPI_Ireduce; the other ranks only send).
class MpiReduction final : public CommWork {
 public:
  MpiReduction(MPI_Comm comm, const Tensor& tensor, ReduceOp op, int world, int rank, int root)
      : tensor_(tensor),
        op_(op),
        world_(world),
        receives_(root < 0 || rank == root),
        values_(as_f32(tensor)) {
    const char* what = root < 0 ? "all_reduce" : "reduce";
    if (root < 0) {
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, values_.data(), count_of(what, tensor), MPI_FLOAT,
                               mpi_op(op), comm, &request_),
                "MPI_Iallreduce");
    } else {
      check_mpi(MPI_Ireduce(receives_ ? MPI_IN_PLACE : values_.data(), values_.data(),
                            count_of(what, tensor), MPI_FLOAT, mpi_op(op), root, comm, &request_),
                "MPI_Ireduce");
    }
  }
  ~MpiReduction() override {
    // A work dropped unfinished (an exception between start and wait) must still complete
    // before its buffer goes.
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) finish();
    return done_;
  }
  void wait() override {
    if (done_) return;
    check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    finish();
  }

 private:
  void finish() {
    if (receives_) finish_reduction(values_, tensor_, op_, world_);
    done_ = true;
  }

  Tensor tensor_;
  ReduceOp op_;
  int world_;
  bool receives_;              // this rank's tensor gets the result
  std::vector<float> values_;  // f32 in every case: the tensor's values widened, or copied
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

// A nonblocking operation on the tensor's own memory (MPI_Ibcast, MPI_Iallreduce of i64 in
// place): the memory is MPI's until wait(). `start` begins it, filling the request.
class MpiInPlaceWork final : public CommWork {
 public:
  template <typename Start>
  MpiInPlaceWork(const Tensor& tensor, const Start& start) : tensor_(tensor) {
    start(&request_);
  }
  ~MpiInPlaceWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int flag = 1;
    if (request_ != MPI_REQUEST_NULL) {
      check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    }
    return flag != 0;
  }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) {
      check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    }
  }

 private:
  Tensor tensor_;  // kept alive while MPI writes into it
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
};

bool mpi_started() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int start_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    if (provided < MPI_THREAD_FUNNELED) {
      throw Error("MPI_Init_thread: this MPI library provides no MPI_THREAD_FUNNELED support");
    }
  }
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void abort_mpi_job(const std::string& reason, int exit_code) {
  int rank = 0;
  if (mpi_started()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "headroom: rank %d failed: %s; ending every rank of the job\n", rank,
               reason.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (mpi_started()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

namespace {

std::pair<int, int> world_position() {
  start_mpi();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return {rank, size};
}

}  // namespace

MpiCommunicator::MpiCommunicator()
    : Communicator(world_position().first, world_position().second),
      handle_(std::make_unique<Handle>()) {
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &handle_->comm), "MPI_Comm_dup");
}

MpiCommunicator::~MpiCommunicator() {
  if (mpi_started() && handle_->comm != MPI_COMM_NULL) MPI_Comm_free(&handle_->comm);
}

std::unique_ptr<CommWork> MpiCommunicator::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  if (tensor.dtype() == DType::i64) {
    tensor.storage()->bump_version();
    return std::make_unique<MpiInPlaceWork>(tensor, [&](MPI_Request* request) {
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of("all_reduce", tensor),
                               MPI_INT64_T, mpi_op(op), handle_->comm, request),
                "MPI_Iallreduce");
    });
  }
  return std::make_unique<MpiReduction>(handle_->comm, tensor, op, world_size(), rank(), -1);
}

std::unique_ptr<CommWork> MpiCommunicator::reduce_async(const Tensor& tensor, int root,
                                                        ReduceOp op) {
  check_tensor("reduce", "tensor", tensor);
  check_root("reduce", root);
  return std::make_unique<MpiReduction>(handle_->comm, tensor, op, world_size(), rank(), root);
}

void MpiCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  check_world_multiple("reduce_scatter", "input", input, "output", output);
  std::vector<float> in = as_f32(input);
  std::vector<float> out(static_cast<size_t>(output.numel()));
  check_mpi(MPI_Reduce_scatter_block(in.data(), out.data(), count_of("reduce_scatter", output),
                                     MPI_FLOAT, mpi_op(op), handle_->comm),
            "MPI_Reduce_scatter_block");
  finish_reduction(out, output, op, world_size());
}

void MpiCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  check_tensor("all_gather", "input", input, true);
  check_tensor("all_gather", "output", output, true);
  check_world_multiple("all_gather", "output", output, "input", input);
  output.storage()->bump_version();
  check_mpi(MPI_Allgather(input.data_ptr(), count_of("all_gather", input), copy_type(input.dtype()),
                          output.data_ptr(), count_of("all_gather", input),
                          copy_type(input.dtype()), handle_->comm),
            "MPI_Allgather");
}

std::unique_ptr<CommWork> MpiCommunicator::broadcast_async(const Tensor& tensor, int root) {
  check_tensor("broadcast", "tensor", tensor, true);
  check_root("broadcast", root);
  tensor.storage()->bump_version();
  return std::make_unique<MpiInPlaceWork>(tensor, [&](MPI_Request* request) {
    check_mpi(MPI_Ibcast(tensor.data_ptr(), count_of("broadcast", tensor),
                         copy_type(tensor.dtype()), root, handle_->comm, request),
              "MPI_Ibcast");
  });
}

void MpiCommunicator::broadcast_bytes(void* data, size_t size, int root) {
  if (size > INT_MAX)
    throw ValueError(str_cat("broadcast_bytes: ", size, " bytes, over ", INT_MAX));
  check_mpi(MPI_Bcast(data, static_cast<int>(size), MPI_BYTE, root, handle_->comm), "MPI_Bcast");
}

void MpiCommunicator::barrier() { check_mpi(MPI_Barrier(handle_->comm), "MPI_Barrier"); }

double MpiCommunicator::all_reduce_scalar(double value, ReduceOp op) {
  double result = 0.0;
  check_mpi(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, mpi_op(op), handle_->comm),
            "MPI_Allreduce");
  return op == ReduceOp::avg ? result / world_size() : result;
}

}  // namespace headroom
