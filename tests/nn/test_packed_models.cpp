// Packed batches through GPT-2 and Llama (nn/sequence_boundaries.h): the loss and every parameter
// gradient of sequences packed in rows equal those of the same sequences run one by one, with
// transformers' num_items_in_batch weighting (each sequence's summed loss over all scored
// targets); and the meta device's dry run of a packed step allocates what the CPU's does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/device_memory.h"
#include "nn/packed_batches.h"

namespace headroom {
namespace {

using namespace packed_test;

TEST(PackedModels, PaddingFreeBfdBatchEqualsSequencesOneByOne) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    expect_packed_equals_one_by_one(preset, bfd_packed(3));
  }
}

TEST(PackedModels, TwoPackedRowsEqualSequencesOneByOne) {
  const std::vector<TokenSequence> s = random_sequences({9, 23, 17, 15}, 256, 5);
  const Packed packed = two_rows({{s[0], s[1]}, {s[2], s[3]}});
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    expect_packed_equals_one_by_one(preset, packed);
  }
}

// A packed step (forward and backward) allocates on the meta device exactly what it allocates on
// the CPU: the dry run plans packed batches to the byte.
TEST(PackedModels, CpuAllocatesWhatTheDryRunAllocates) {
  const Packed packed = bfd_packed(4);
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    auto measure = [&](Device device) {
      const std::unique_ptr<CausalLM> model = make_causal_lm(*find_model_preset(preset), device, 1);
      const TokenBatch& b = packed.batch;
      const Tensor ids = b.input_ids.to(device), targets = b.targets.to(device);
      empty_cache(device);
      reset_peak_memory_stats(device);
      const auto before = static_cast<int64_t>(memory_allocated(device));
      {
        const SequenceBoundaries sequences =
            make_sequence_boundaries(b.cu_seqlens, ids.size(0), ids.size(1), device);
        backward(model->loss(ids, targets, b.target_count, sequences));
      }
      return std::pair(static_cast<int64_t>(max_memory_allocated(device)) - before,
                       static_cast<int64_t>(memory_allocated(device)) - before);
    };
    const auto [cpu_peak, cpu_held] = measure(kCPU);
    const auto [meta_peak, meta_held] = measure(kMeta);
    EXPECT_GT(cpu_peak, 0);
    EXPECT_EQ(cpu_peak, meta_peak);
    EXPECT_EQ(cpu_held, meta_held);
  }
}

}  // namespace
}  // namespace headroom
