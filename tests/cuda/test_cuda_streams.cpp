// Streams and transfers on the GPU: the caching allocator's pools per stream and record_stream
// (Note [Streams and reuse]), pinned host memory and non_blocking copies from it, and the data
// loader's batches copied on the copy stream (Note [Batches on the copy stream]). A stream is
// held busy by a host function that waits for the test, so "not yet complete" is certain rather
// than a race. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/tensor.h"
#include "data/packed_sequences.h"
#include "data/token_corpus.h"
#include "io/tokenizer.h"
#include "memory/device_memory.h"
#include "memory/host_caching_allocator.h"
#include "memory/host_pool.h"
#include "memsave/activation_offload.h"
#include "memsave/checkpoint_policy.h"
#include "nn/llama.h"
#include "autograd/engine.h"
#include "cuda/cuda_test_support.h"
#include "cuda/stream_blocker.h"
#include "train/data_loader_batch_source.h"

namespace headroom {
namespace {

constexpr int64_t k12MiBFloats = 3 << 20;  // a large-pool request with an unsplit segment

void synchronize(StreamId stream) {
  ASSERT_EQ(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)), cudaSuccess);
}

int64_t stat(const std::string& key) { return memory_stats(kGpu).at(key); }

TEST(CudaStreams, PoolsAreKeyedByStream) {
  REQUIRE_GPU();
  empty_cache(kGpu);
  const StreamId copy = copy_stream(kGpu);
  EXPECT_NE(copy, current_stream(kGpu));
  void* first = nullptr;
  {
    Tensor x = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
    first = x.data_ptr();
  }
  {
    StreamGuard guard(kGpu, copy);
    EXPECT_EQ(current_stream(kGpu), copy);
    Tensor y = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
    EXPECT_NE(y.data_ptr(), first);  // the cached block belongs to the default stream
  }
  EXPECT_NE(current_stream(kGpu), copy);
  Tensor z = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
  EXPECT_EQ(z.data_ptr(), first);
  bool found = false;
  for (const SegmentInfo& s : caching_allocator(kGpu).segments()) {
    if (s.total_size == size_t{12} << 20 && s.stream == copy) found = true;
  }
  EXPECT_TRUE(found) << "a 12 MiB segment of the copy stream";
}

TEST(CudaStreams, RecordStreamDefersReuseUntilTheStreamCatchesUp) {
  REQUIRE_GPU();
  empty_cache(kGpu);
  const StreamId copy = copy_stream(kGpu);
  const int64_t allocated_before = stat("allocated_bytes.all.current");
  const int64_t active_before = stat("active_bytes.all.current");
  void* first = nullptr;
  StreamBlocker blocker(copy);
  {
    Tensor x = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
    first = x.data_ptr();
    // A use of x on the copy stream, queued behind the blocker.
    ASSERT_EQ(cudaMemsetAsync(first, 0, x.nbytes(), reinterpret_cast<cudaStream_t>(copy)),
              cudaSuccess);
    x.record_stream(copy);
  }
  EXPECT_EQ(stat("allocated_bytes.all.current"), allocated_before);
  EXPECT_EQ(stat("active_bytes.all.current"), active_before + (int64_t{12} << 20));
  void* second = nullptr;
  {
    Tensor y = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
    second = y.data_ptr();
    EXPECT_NE(second, first);  // x's block waits for the copy stream
  }
  blocker.release();
  synchronize(copy);
  Tensor z = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
  EXPECT_EQ(z.data_ptr(), first);  // back in the pool; the older of two equal blocks
  EXPECT_EQ(stat("active_bytes.all.current"), active_before + (int64_t{12} << 20));
}

TEST(CudaStreams, EmptyCacheWaitsForPendingBlocks) {
  REQUIRE_GPU();
  empty_cache(kGpu);
  const StreamId copy = copy_stream(kGpu);
  const int64_t reserved_before = stat("reserved_bytes.all.current");
  StreamBlocker blocker(copy);
  {
    Tensor x = Tensor::empty({k12MiBFloats}, DType::f32, kGpu);
    x.record_stream(copy);
  }
  EXPECT_EQ(stat("reserved_bytes.all.current"), reserved_before + (int64_t{12} << 20));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    blocker.release();
  });
  empty_cache(kGpu);  // waits for the copy stream's event, then returns the segment
  releaser.join();
  EXPECT_EQ(stat("reserved_bytes.all.current"), reserved_before);
}

TEST(CudaStreams, NonBlockingCopiesFromPinnedMemory) {
  REQUIRE_GPU();
  Generator g(3);
  const Tensor x = Tensor::randn({(1 << 20) + 17}, DType::f32, kCPU, &g);
  const Tensor pinned = x.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_EQ(pinned.to_float_vector(), x.to_float_vector());
  // On the current (default) stream: a later synchronous read is ordered after it.
  EXPECT_EQ(pinned.to(kGpu, /*non_blocking=*/true).to(kCPU).to_float_vector(), x.to_float_vector());
  // On the copy stream, with the default stream waiting for it.
  const StreamId compute = current_stream(kGpu);
  Tensor on_gpu;
  {
    StreamGuard guard(kGpu, copy_stream(kGpu));
    on_gpu = pinned.to(kGpu, /*non_blocking=*/true);
  }
  wait_stream(kGpu, compute, copy_stream(kGpu));
  on_gpu.record_stream(compute);
  EXPECT_EQ(on_gpu.to(kCPU).to_float_vector(), x.to_float_vector());
  // bf16 and a view of pinned memory (contiguous, at an offset inside the block).
  const Tensor half = x.to(DType::bf16).pin_memory();
  EXPECT_EQ(half.narrow(0, 5, 1000).to(kGpu, true).to(kCPU).to_float_vector(),
            x.to(DType::bf16).narrow(0, 5, 1000).to_float_vector());
  const auto host = host_memory_stats();
  EXPECT_GE(host.at("allocated_bytes.current"), int64_t{4} << 20);
}

TEST(CudaStreams, PinnedBlocksWaitForTheirCopies) {
  REQUIRE_GPU();
  const StreamId copy = copy_stream(kGpu);
  const Tensor x = Tensor::arange(0, 3000, 1, DType::f32);  // 12000 B: a 16 KiB block
  StreamBlocker blocker(copy);
  void* first = nullptr;
  Tensor on_gpu;
  {
    StreamGuard guard(kGpu, copy);
    const Tensor pinned = x.pin_memory();
    first = pinned.data_ptr();
    on_gpu = pinned.to(kGpu, /*non_blocking=*/true);  // queued behind the blocker
  }
  {
    const Tensor again = x.pin_memory();
    EXPECT_NE(again.data_ptr(), first);  // the first block's copy has not run
  }
  blocker.release();
  synchronize(copy);
  const Tensor third = x.pin_memory();
  EXPECT_EQ(third.data_ptr(), first);  // released by its event, the last to join the free list
  wait_stream(kGpu, current_stream(kGpu), copy);
  EXPECT_EQ(on_gpu.to(kCPU).to_float_vector(), x.to_float_vector());
}

// A corpus of `n` known tokens in a temporary file.
std::shared_ptr<const TokenCorpus> counting_corpus(int64_t n) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / str_cat("headroom_cuda_streams_", n, ".txt");
  std::string text(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i)
    text[static_cast<size_t>(i)] = static_cast<char>(i % 127 + 1);  // ASCII: text
  std::ofstream(path, std::ios::binary) << text;
  auto corpus = load_token_corpus(path.string(), ByteTokenizer());
  std::filesystem::remove(path);
  return corpus;
}

TEST(CudaStreams, DataLoaderBatchesCrossOnTheCopyStream) {
  REQUIRE_GPU();
  std::shared_ptr<const TokenCorpus> corpus = counting_corpus(64 * 1024 + 1);
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(str_cat(workers, " workers"));
    const DataLoaderOptions options{
        .batch_size = 8, .seed = 7, .num_workers = workers, .pin_memory = true};
    DataLoaderBatchSource on_cpu(split_train_eval(corpus, 255, 0), options, std::nullopt, kCPU);
    DataLoaderBatchSource on_gpu(split_train_eval(corpus, 255, 0), options, std::nullopt, kGpu);
    const StreamId copy = copy_stream(kGpu);
    for (int step = 0; step < 2 * on_cpu.batches_per_epoch() + 3; ++step) {
      const TokenBatch expected = on_cpu.next_batch();
      const TokenBatch batch = on_gpu.next_batch();
      ASSERT_EQ(batch.input_ids.device(), kGpu);
      EXPECT_EQ(batch.input_ids.dtype(), DType::i64);
      // Read on the default stream, which waited for the copy.
      EXPECT_EQ(batch.input_ids.to(kCPU).to_int64_vector(), expected.input_ids.to_int64_vector());
      EXPECT_EQ(batch.targets.to(kCPU).to_int64_vector(), expected.targets.to_int64_vector());
      if (step == 0) {
        bool on_copy_stream = false;
        const auto address = reinterpret_cast<uintptr_t>(batch.input_ids.data_ptr());
        for (const SegmentInfo& s : caching_allocator(kGpu).segments()) {
          if (address >= s.address && address < s.address + s.total_size) {
            on_copy_stream = s.stream == copy;
          }
        }
        EXPECT_TRUE(on_copy_stream) << "the batch is allocated on the copy stream";
      }
    }
    EXPECT_EQ(on_gpu.batches_consumed(), on_cpu.batches_consumed());
  }
}

// Note [Offload on the copy stream]: with the copy stream held, a checkpointed forward with
// offloaded activations queues its copies to the pinned pool and returns (no host
// synchronisation waits for them); released, backward brings them back on the copy stream and
// the gradients equal those of the same run without offload. Not bit for bit: attention's
// backward adds dQ with atomicAdd, so its last bits vary from run to run with or without offload
// (rtol 1e-4 holds that; a tensor brought back wrong or late is off by its own magnitude).
TEST(CudaStreams, OffloadedActivationsCrossOnTheCopyStream) {
  REQUIRE_GPU();
  LlamaConfig config;
  config.vocab_size = 128, config.hidden_size = 256, config.intermediate_size = 512;
  config.num_hidden_layers = 3, config.num_attention_heads = 4, config.num_key_value_heads = 2;
  config.max_position_embeddings = 256;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 2 * 256; ++i) ids.push_back((i * 37 + 11) % 128);
  const Tensor input = Tensor::from_ints(ids, {2, 256}).to(kGpu);
  std::vector<Tensor> grads[2];
  for (int offload = 0; offload < 2; ++offload) {
    auto model = make_causal_lm(config, kGpu, /*seed=*/5);
    enable_gradient_checkpointing(*model);
    // Checkpoint inputs of 256 KiB: above the offload's 64 KiB floor.
    if (offload) enable_activation_offload(*model, kGpu, {.min_bytes = 1, .pin_memory = true});
    Tensor loss;
    {
      std::optional<StreamBlocker> held;
      if (offload) held.emplace(copy_stream(kGpu));
      loss = model->loss(input, input);  // returns while the copies wait on the held stream
      if (offload) {
        EXPECT_GT(host_pool(kGpu, true)
                      .stats()
                      .allocated_bytes[static_cast<size_t>(StatType::all)]
                      .current,
                  0);
      }
    }
    backward(loss);
    for (const Tensor& p : model->parameters()) {
      grads[offload].push_back(p.grad().to(kCPU));
    }
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    expect_close(grads[1][i], grads[0][i], {.rtol = 1e-4, .atol_fraction = 1e-5},
                 str_cat("gradient of parameter ", i));
  }
}

}  // namespace
}  // namespace headroom
