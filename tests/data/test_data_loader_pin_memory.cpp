// DataLoader's pin_memory: batches in pinned memory (a fake pinned allocator on the CPU) when the
// target is a GPU, from the calling thread and from workers, holding the same values; unpinned
// for the CPU or with pin_memory off.
#include <gtest/gtest.h>

#include "data/data_loader.h"
#include "data/data_test_helpers.h"
#include "memory/fake_queues.h"

namespace headroom {
namespace {

using data_test::counting_corpus;
using data_test::TempDir;
using fake_queues::FakePinnedAllocator;
using fake_queues::InstallPinned;
using fake_queues::Queues;

const Device kGpu{DeviceType::cuda, 0};

TEST(DataLoaderPinMemory, PinsBatchesForAGpu) {
  FakePinnedAllocator pinned(std::make_shared<Queues>());
  InstallPinned install(&pinned);
  TempDir dir;
  const PackedSequences data(counting_corpus(dir, 41), 0, 41, 4);
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(str_cat(workers, " workers"));
    DataLoader plain(data, {.batch_size = 4, .seed = 5, .num_workers = workers});
    DataLoader pinning(data, {.batch_size = 4,
                              .seed = 5,
                              .num_workers = workers,
                              .pin_memory = true,
                              .pin_memory_device = kGpu});
    DataLoader for_cpu(data, {.batch_size = 4,
                              .seed = 5,
                              .num_workers = workers,
                              .pin_memory = true,
                              .pin_memory_device = kCPU});
    while (auto expected = plain.next()) {
      const std::optional<TokenBatch> batch = pinning.next();
      const std::optional<TokenBatch> cpu_batch = for_cpu.next();
      ASSERT_TRUE(batch && cpu_batch);
      EXPECT_FALSE(expected->input_ids.is_pinned());
      EXPECT_TRUE(batch->input_ids.is_pinned());
      EXPECT_TRUE(batch->targets.is_pinned());
      EXPECT_FALSE(cpu_batch->input_ids.is_pinned());
      EXPECT_EQ(batch->input_ids.device(), kCPU);
      EXPECT_EQ(batch->input_ids.shape(), expected->input_ids.shape());
      EXPECT_EQ(batch->input_ids.to_int64_vector(), expected->input_ids.to_int64_vector());
      EXPECT_EQ(batch->targets.to_int64_vector(), expected->targets.to_int64_vector());
    }
  }
  EXPECT_EQ(pinned.stats().allocated_bytes.current, 0);
}

}  // namespace
}  // namespace headroom
