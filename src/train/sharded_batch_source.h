// One data-parallel rank's share of a training stream: of every world_size consecutive
// micro-batches, rank r takes the r-th, so that each rank reads a disjoint shard and the ranks'
// micro-batches of one accumulation step are those a single process would take in a row.
#pragma once

#include <memory>

#include "train/batch_source.h"

namespace headroom {

// Note [Data-parallel batches equal a single process's]
// With per-device batch B, accumulation A and W ranks, optimizer step s of rank r takes the
// stream's micro-batches s·A·W + a·W + r (a = 0..A-1). Over the ranks these are micro-batches
// s·A·W .. (s+1)·A·W - 1, exactly those of one process with accumulation A·W and batch B. Each
// rank's loss is divided by A and the gradients are averaged over W, so the step's gradient is
// the single process's sum of loss / (A·W) (to the order of summation), and its logged loss, the
// ranks' average, is the single process's. The stream's position (the inner source's state) is
// the same on every rank, so a checkpoint written by rank 0 resumes every rank. An epoch holds the
// inner source's batches_per_epoch / W steps' worth (the last batches_per_epoch % W micro-batches
// of an epoch are taken by the first ranks only as the next epoch begins: keep it a multiple of W
// for equality with one process across epochs).
class ShardedBatchSource final : public BatchSource {
 public:
  // ValueError when `inner` has fewer batches per epoch than world_size ranks.
  ShardedBatchSource(std::unique_ptr<BatchSource> inner, int rank, int world_size);

  TokenBatch next_batch() override;
  void skip_batch() override;
  int64_t batches_per_epoch() const override { return inner_->batches_per_epoch() / world_size_; }
  int64_t batches_consumed() const override { return inner_->batches_consumed() / world_size_; }
  // The whole held-out split: the trainer shards evaluation itself.
  int64_t eval_batch_count(int64_t batch_size) const override {
    return inner_->eval_batch_count(batch_size);
  }
  TokenBatch eval_batch(int64_t index, int64_t batch_size) const override {
    return inner_->eval_batch(index, batch_size);
  }
  nlohmann::json state_dict() const override { return inner_->state_dict(); }
  bool ids_checked() const override { return inner_->ids_checked(); }
  bool serves_rows() const override { return inner_->serves_rows(); }
  void load_state_dict(const nlohmann::json& state) override { inner_->load_state_dict(state); }

 private:
  std::unique_ptr<BatchSource> inner_;
  int rank_;
  int world_size_;
};

}  // namespace headroom
