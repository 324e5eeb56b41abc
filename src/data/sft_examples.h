// Prepared SFT examples as a DataLoader batches them, as TRL's SFTTrainer does: one example a
// row, right-padded to the batch's longest (DataCollatorForLanguageModeling), or flattened into
// one row without padding (padding_free); or first packed into rows of max_length (packing, the
// "bfd", "bfd_split" or "wrapped" strategy of Note [TRL's packing]).
//
// Note [SFT batches]
// Targets are the labels shifted by one within each sequence: target t is label t + 1, and a
// sequence's last token has none (-100), so no sequence is scored against the next one's first
// token (TRL's collator sets label -100 where position_ids restart, and the model shifts).
// Padded: [B, T] with T the longest row, pad_id after each shorter row and -100 targets there;
// right padding under causal attention changes nothing the real tokens see, so no attention
// mask is needed. Padding-free: [1, total] with every sequence's start in cu_seqlens. A bfd
// packed row is several sequences, so packing with bfd or bfd_split is always padding-free (as
// TRL forces);
// a wrapped row is one sequence cut anywhere, padded unless padding_free.
#pragma once

#include <cstdint>
#include <vector>

#include "data/data_loader.h"
#include "data/sft_dataset.h"

namespace headroom {

enum class PackingStrategy { bfd, bfd_split, wrapped };
const char* packing_strategy_name(PackingStrategy strategy);  // TRL's: "bfd", "bfd_split", ...

struct SftBatching {
  bool packing = false;
  PackingStrategy packing_strategy = PackingStrategy::bfd;
  bool padding_free = false;
  int64_t max_length = 1024;  // the packed rows' length (packing only)
  int64_t pad_id = 0;         // the id padded rows carry after their tokens
};

// One sample of the set: the tokens of a row of the batch-to-be and their labels, with the
// lengths of the sequences in it (one, unless bfd packed several).
struct SftSample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
  std::vector<int64_t> seq_lengths;
};

class SftExamples final : public ExampleSet {
 public:
  // `examples` as they are, or packed per `batching` (taken, not copied); ValueError when
  // max_length < 1 with packing.
  SftExamples(std::vector<SftExample> examples, const SftBatching& batching);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  // Note [SFT batches]; varying_targets is set, target_count counted.
  TokenBatch collate(std::span<const int64_t> indices) const override;

  const SftSample& sample(int64_t index) const { return samples_[static_cast<size_t>(index)]; }
  bool padding_free() const { return padding_free_; }
  // The longest sample's tokens.
  int64_t longest() const { return longest_; }
  // The `count` longest samples (fewer when the set has fewer), longest first: the batch of
  // them is the largest a batch of `count` can be, padded or padding-free.
  std::vector<int64_t> longest_samples(int64_t count) const;

 private:
  std::vector<SftSample> samples_;
  bool padding_free_ = false;
  int64_t pad_id_ = 0;
  int64_t longest_ = 0;
};

}  // namespace headroom
