// The NCCL backend of Communicator on the GPU (dist/nccl_communicator.h) in a one-rank job: MPI
// started as a singleton, as in a process outside mpirun, so every collective's result is its
// input. What this checks is NCCL's start through the MPI bootstrap, each operation and dtype,
// the order after the caller's stream (Note [NCCL work on the communication stream]) and the
// argument checks; the 2-rank results are the mpi tests' on the CPU backend, which shares the
// Communicator contract. Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_test_support.h"
#include "cuda/stream_blocker.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"
#include "memory/device_memory.h"

namespace headroom {
namespace {

const std::vector<float> kValues = {1.5f, -2.0f, 3.25f, 4.0f, -0.5f, 8.0f};

std::shared_ptr<Communicator> one_rank_nccl() {
  return make_nccl_communicator(std::make_shared<MpiCommunicator>(), kGpu);
}

Tensor on_gpu(DType dtype) {
  return Tensor::from_floats(kValues, {static_cast<int64_t>(kValues.size())}).to(dtype).to(kGpu);
}

std::vector<float> on_host(const Tensor& t) { return t.to(kCPU).to(DType::f32).to_float_vector(); }

TEST(CudaNccl, OneRankCollectivesGiveTheirInputInEveryDtype) {
  REQUIRE_GPU();
  const auto comm = one_rank_nccl();
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->device(), kGpu);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      const Tensor x = on_gpu(dtype);
      comm->all_reduce(x, op);
      EXPECT_EQ(on_host(x), kValues) << reduce_op_name(op);
      const Tensor y = on_gpu(dtype);
      comm->reduce_async(y, 0, op)->wait();
      EXPECT_EQ(on_host(y), kValues) << reduce_op_name(op);
    }
    const Tensor input = on_gpu(dtype);
    const Tensor gathered = Tensor::zeros(input.shape(), dtype, kGpu);
    comm->all_gather(input, gathered);
    EXPECT_EQ(on_host(gathered), kValues);
    const Tensor scattered = Tensor::zeros(input.shape(), dtype, kGpu);
    comm->reduce_scatter(input, scattered, ReduceOp::sum);
    EXPECT_EQ(on_host(scattered), kValues);
    const Tensor b = on_gpu(dtype);
    comm->broadcast(b, 0);
    EXPECT_EQ(on_host(b), kValues);
    const Tensor c = on_gpu(dtype);
    comm->broadcast_async(c, 0)->wait();  // the current stream waits for it
    EXPECT_EQ(on_host(c), kValues);
  }
  // i64 for broadcast and all_gather (the data loader's token counts, ZeRO's metadata).
  const Tensor ids = Tensor::from_ints({7, -3, 1 << 30}, {3}).to(kGpu);
  const Tensor all_ids = Tensor::zeros({3}, DType::i64, kGpu);
  comm->all_gather(ids, all_ids);
  EXPECT_EQ(all_ids.to(kCPU).to_int64_vector(), (std::vector<int64_t>{7, -3, 1 << 30}));
  comm->barrier();
  EXPECT_EQ(comm->all_reduce_scalar(2.5, ReduceOp::sum), 2.5);
}

// The collective reads its input only after the work queued before it on the caller's stream:
// here a fill held behind a blocked stream. Reading it at once would gather the zeros.
TEST(CudaNccl, RunsAfterTheCallersQueuedWork) {
  REQUIRE_GPU();
  const auto comm = one_rank_nccl();
  const Tensor input = Tensor::zeros({1 << 20}, DType::f32, kGpu);
  const Tensor output = Tensor::zeros({1 << 20}, DType::f32, kGpu);
  // NCCL sets up its buffers on the first collective; that happens here, not while the stream
  // is held (a device-wide synchronisation then would wait for the blocker forever).
  comm->all_reduce(output, ReduceOp::sum);
  synchronize_gpu();
  std::unique_ptr<CommWork> work;
  {
    StreamBlocker blocker(current_stream(kGpu));
    input.fill_(3.0);  // queued behind the blocker
    comm->all_reduce(input, ReduceOp::sum);
    // all_gather's wait() only orders the caller's stream: the host returns while it is blocked.
    comm->all_gather(input, output);
    work = comm->all_reduce_async(output, ReduceOp::max);
    EXPECT_FALSE(work->test()) << "the collective finished before the work it must follow";
    blocker.release();
  }
  work->wait();
  const std::vector<float> result = on_host(output);
  EXPECT_EQ(result.front(), 3.0f);
  EXPECT_EQ(result.back(), 3.0f);
  EXPECT_TRUE(work->test());
}

TEST(CudaNccl, RefusesTensorsItCannotReduce) {
  REQUIRE_GPU();
  const auto comm = one_rank_nccl();
  // A CPU tensor, an integer all-reduce, a strided view, a root outside the group, and an
  // all_gather output that is not world_size times the input.
  EXPECT_THROW(comm->all_reduce(Tensor::zeros({4}), ReduceOp::sum), ValueError);
  EXPECT_THROW(comm->all_reduce(Tensor::zeros({4}, DType::i64, kGpu), ReduceOp::sum), ValueError);
  EXPECT_THROW(
      comm->all_reduce(Tensor::zeros({4, 4}, DType::f32, kGpu).transpose(0, 1), ReduceOp::sum),
      ValueError);
  EXPECT_THROW(comm->broadcast(Tensor::zeros({4}, DType::f32, kGpu), 1), ValueError);
  EXPECT_THROW(
      comm->all_gather(Tensor::zeros({4}, DType::f32, kGpu), Tensor::zeros({8}, DType::f32, kGpu)),
      ValueError);
}

}  // namespace
}  // namespace headroom
