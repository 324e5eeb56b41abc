// Communicator over NCCL for CUDA tensors (See Note [NCCL work on the communication stream]).
#include "dist/nccl_communicator.h"

#include <nccl.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_stream.h"
#include "core/error.h"

namespace headroom {

namespace {

void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  throw Error(str_cat(call, " failed: ", ncclGetErrorString(result)));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    default:
      return ncclInt64;  // check_tensor allows nothing else
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

// The operation's completion as an event on the communication stream.
class NcclWork final : public CommWork {
 public:
  NcclWork(int device, cudaStream_t stream) : event_(cuda::record_event(device, stream)) {}
  ~NcclWork() override { cuda::destroy_event(event_); }
  bool test() override { return cuda::query_event(event_); }
  void wait() override { cuda::wait_event(cuda::current_stream(), event_); }

 private:
  EventId event_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<MpiCommunicator> bootstrap, Device device)
      : Communicator(bootstrap->rank(), bootstrap->world_size()),
        bootstrap_(std::move(bootstrap)),
        device_(device) {
    cuda::DeviceGuard guard(device_.index);
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bootstrap_->broadcast_bytes(&id, sizeof(id), 0);
    check_nccl(ncclCommInitRank(&comm_, world_size(), id, rank()), "ncclCommInitRank");
    HEADROOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string backend() const override { return "nccl"; }
  Device device() const override { return device_; }

  std::unique_ptr<CommWork> all_reduce_async(const Tensor& tensor, ReduceOp op) override {
    check_all_reduce(tensor, op);
    return enqueue({tensor}, [&] {
      check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                               nccl_type(tensor.dtype()), nccl_op(op), comm_, stream_),
                 "ncclAllReduce");
    });
  }
  std::unique_ptr<CommWork> reduce_async(const Tensor& tensor, int root, ReduceOp op) override {
    check_tensor("reduce", "tensor", tensor);
    check_root("reduce", root);
    return enqueue({tensor}, [&] {
      check_nccl(ncclReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                            nccl_type(tensor.dtype()), nccl_op(op), root, comm_, stream_),
                 "ncclReduce");
    });
  }
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override {
    check_tensor("reduce_scatter", "input", input);
    check_tensor("reduce_scatter", "output", output);
    check_world_multiple("reduce_scatter", "input", input, "output", output);
    enqueue({input, output}, [&] {
      check_nccl(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                   nccl_type(input.dtype()), nccl_op(op), comm_, stream_),
                 "ncclReduceScatter");
    })->wait();
  }
  void all_gather(const Tensor& input, const Tensor& output) override {
    check_tensor("all_gather", "input", input, true);
    check_tensor("all_gather", "output", output, true);
    check_world_multiple("all_gather", "output", output, "input", input);
    enqueue({input, output}, [&] {
      check_nccl(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                               nccl_type(input.dtype()), comm_, stream_),
                 "ncclAllGather");
    })->wait();
  }
  std::unique_ptr<CommWork> broadcast_async(const Tensor& tensor, int root) override {
    check_tensor("broadcast", "tensor", tensor, true);
    check_root("broadcast", root);
    return enqueue({tensor}, [&] {
      check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                               nccl_type(tensor.dtype()), root, comm_, stream_),
                 "ncclBroadcast");
    });
  }
  void barrier() override {
    // Every GPU's queued work done, then the ranks' hosts meet.
    HEADROOM_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
    bootstrap_->barrier();
  }
  double all_reduce_scalar(double value, ReduceOp op) override {
    return bootstrap_->all_reduce_scalar(value, op);
  }

 private:
  template <typename Launch>
  std::unique_ptr<CommWork> enqueue(std::initializer_list<Tensor> tensors, const Launch& launch) {
    cuda::DeviceGuard guard(device_.index);
    // The communication stream starts where the caller's current stream stands now.
    const EventId ready = cuda::record_event(device_.index, cuda::current_stream());
    cuda::wait_event(stream_, ready);
    cuda::destroy_event(ready);
    launch();
    for (const Tensor& t : tensors) t.record_stream(cuda::stream_id(stream_));
    return std::make_unique<NcclWork>(device_.index, stream_);
  }

  std::shared_ptr<MpiCommunicator> bootstrap_;
  Device device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<MpiCommunicator> bootstrap,
                                                     Device device) {
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), device);
}

}  // namespace headroom
