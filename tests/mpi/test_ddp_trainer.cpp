// `headroom train`'s Trainer data-parallel on the ranks mpirun started: the same losses and final
// weights as one process with the ranks' micro-batches as accumulation steps (Note
// [Data-parallel batches equal a single process's]), and a resumed run equal to the
// uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "dist/communicator.h"
#include "dist/launch_environment.h"
#include "dist/zero_parameters.h"
#include "io/pretrained.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "memory/memory_category.h"
#include "mpi/mpi_world.h"
#include "plan/dry_run.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

using test_mpi::kNeedsTwoRanks;
using test_mpi::world;

// A directory every rank names alike (rank 0's pid in it), made by rank 0 with the tiny run's
// model and data, removed by rank 0 at the end.
class SharedRunDir {
 public:
  SharedRunDir(const std::string& name, double dropout, int64_t n_layer = 2) {
    const double pid =
        world()->all_reduce_scalar(world()->rank() == 0 ? ::getpid() : 0.0, ReduceOp::sum);
    path_ =
        fs::temp_directory_path() / str_cat("headroom_mpi_", name, "_", static_cast<int64_t>(pid));
    if (world()->rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    world()->barrier();
    // Each rank writes the fixture's files into its own corner, then all train on rank 0's.
    const fs::path own = path_ / str_cat("rank_", world()->rank());
    args_ = test_data::tiny_training_args(own, dropout, n_layer);
    world()->barrier();
    args_.model = (path_ / "rank_0" / "model").string();  // tiny_training_args' layout
    args_.data = (path_ / "rank_0" / "data.txt").string();
    args_.output_dir = (path_ / "out").string();
  }
  ~SharedRunDir() {
    world()->barrier();
    if (world()->rank() == 0) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }
  TrainingArguments args() const { return args_; }

 private:
  fs::path path_;
  TrainingArguments args_;
};

std::map<int64_t, double> step_losses(const Trainer& trainer, const std::string& key = "loss") {
  std::map<int64_t, double> losses;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains(key)) losses[entry["step"].get<int64_t>()] = entry[key].get<double>();
  }
  return losses;
}

// A W-rank run with batch 2 and accumulation A against one process with batch 2 and
// accumulation A·W: losses within `tolerance` relative, weights within `tolerance` of their size
// with 0.01 (half GPT-2's init std) as its floor.
void expect_ddp_matches_one_process(const std::string& precision, int64_t accumulation,
                                    double tolerance, const std::string& optim = "adamw_torch",
                                    int64_t zero_stage = 0, double max_grad_norm = 1.0,
                                    double weight_abs_tolerance = 0.0,
                                    const std::function<void(TrainingArguments&)>& adjust = {}) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir(str_cat("ddp_", precision, "_", accumulation, "_zero", zero_stage), 0.0);
  TrainingArguments args = dir.args();
  args.precision = precision;
  args.optim = optim;
  args.per_device_train_batch_size = 2;
  args.gradient_accumulation_steps = accumulation;
  args.save_strategy = "no";
  args.zero_stage = zero_stage;
  args.max_grad_norm = max_grad_norm;
  if (adjust) adjust(args);
  Trainer ddp(args, {}, world());
  ASSERT_EQ(ddp.train(), 0);

  TrainingArguments single = args;
  single.gradient_accumulation_steps = accumulation * world()->world_size();
  single.output_dir = (dir.path() / str_cat("single_", world()->rank())).string();
  Trainer one(single);
  ASSERT_EQ(one.train(), 0);

  const auto expected = step_losses(one), actual = step_losses(ddp);
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [step, loss] : expected) {
    EXPECT_NEAR(actual.at(step), loss, tolerance * std::abs(loss)) << "step " << step;
  }
  const auto expected_eval = step_losses(one, "eval_loss");
  const auto actual_eval = step_losses(ddp, "eval_loss");
  ASSERT_EQ(actual_eval.size(), expected_eval.size());
  if (args.eval_strategy != "no") {
    ASSERT_FALSE(expected_eval.empty());
  }
  for (const auto& [step, loss] : expected_eval) {
    EXPECT_NEAR(actual_eval.at(step), loss, tolerance * std::abs(loss)) << "eval at step " << step;
  }
  GatheredParameters whole(ddp.zero_parameters());  // ZeRO-3: every block on every rank
  const auto pa = ddp.model().parameters(), pe = one.model().parameters();
  ASSERT_EQ(pa.size(), pe.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].to_float_vector(), ve = pe[i].to_float_vector();
    for (size_t j = 0; j < va.size(); ++j) {
      ASSERT_NEAR(va[j], ve[j],
                  std::max(tolerance * std::max(std::abs(ve[j]), 0.01f), weight_abs_tolerance))
          << i << " " << j;
    }
  }
  // Rank 0 alone wrote the run's files.
  EXPECT_TRUE(fs::exists(dir.path() / "out" / "metrics.jsonl"));
}

// Rows score different numbers of targets per batch: with average_tokens_across_devices (HF's
// default) each rank's micro-batches weigh by their share of the targets scored on all ranks,
// so the step is one process's with the ranks' batches as its micro-batches.
TEST(DataParallelTrainer, RowsWeighByTheTargetsOfEveryRank) {
  // Run alone (not under mpirun) there is no second rank to weigh against.
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  for (const int64_t accumulation : {1, 2}) {
    expect_ddp_matches_one_process(
        "fp32", accumulation, 1e-6, "sgd", 0, 1.0, 0.0, [&](TrainingArguments& args) {
          const fs::path rows = fs::path(args.output_dir).parent_path() /
                                str_cat("rows_", world()->rank(), "_", accumulation, ".jsonl");
          std::ofstream out(rows);
          for (int i = 0; i < 24; ++i) {
            out << str_cat("{\"prompt\": \"q", i % 7, "? \", \"completion\": \"",
                           std::string(static_cast<size_t>(1 + (i * 5) % 9), 'a' + i % 3), "\"}\n");
          }
          args.data = rows.string();
          args.validation_split_percentage = 0.0;
        });
  }
}

// fp32: the ranks' averaged gradients are the single process's sum of halves to rounding.
TEST(DataParallelTrainer, Fp32MatchesOneProcessWithTheSameGlobalBatch) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6);
}
// With accumulation the order of summation differs (each rank's running sum of its micro-batches,
// then the average, against one running sum over all), and AdamW's first steps, g / (|g| + eps),
// turn that rounding of a near-zero gradient into a move of up to the learning rate (3.8e-7 seen
// on a bias): SGD, whose update is linear in the gradient, shows the gradients agree.
TEST(DataParallelTrainer, Fp32WithAccumulationMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 2, 1e-6, "sgd");
}
// bf16 autocast (fp32 master weights and gradients): bf16 matmuls see the same operands in both
// runs, so the same 1e-6.
TEST(DataParallelTrainer, Bf16MatchesOneProcessWithTheSameGlobalBatch) {
  expect_ddp_matches_one_process("bf16", 1, 1e-6);
}

// ZeRO-1: each rank updates its share of the parameters (its AdamW states only) and broadcasts
// them: without clipping, the same gradients make the same updates.
TEST(DataParallelTrainer, Zero1MatchesOneProcessWithTheSameGlobalBatch) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 1, 0.0);
}
// With clipping (max_grad_norm 1, active here) the norm is one process's to the bit (Note
// [Gradient norms over ranks]): a norm of the shares' norms, an ulp away, moved near-zero
// gradients' weights through AdamW's g / (|g| + eps).
TEST(DataParallelTrainer, Zero1WithClippingMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 1, 1.0);
}

// ZeRO-2: each rank gets its share's averaged gradients only (reduced to it, Note [ZeRO-2
// gradient reduction]), the same fp32 (a + b) / 2 that DDP's all-reduce gives it.
TEST(DataParallelTrainer, Zero2MatchesOneProcessWithTheSameGlobalBatch) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 2, 0.0);
}
// Clipping over the shares: as ZeRO-1's (Zero1WithClippingMatchesOneProcess).
TEST(DataParallelTrainer, Zero2WithClippingMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 2, 1.0);
}
// no_sync: the first micro-batch's gradients accumulate in full on every rank, the last one's
// backward reduces the sums to their owners (SGD: see Fp32WithAccumulationMatchesOneProcess).
TEST(DataParallelTrainer, Zero2WithAccumulationMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 2, 1e-6, "sgd", 2, 1.0);
}
// bf16 autocast keeps fp32 master weights and fp32 gradients, reduced in fp32: 1e-6 as fp32.
TEST(DataParallelTrainer, Zero2Bf16MatchesOneProcessWithTheSameGlobalBatch) {
  expect_ddp_matches_one_process("bf16", 1, 1e-6, "adamw_torch", 2, 0.0);
}
// pure bf16: the gradients are bf16. One process sums the two micro-batches' halves in bf16
// (round(round(a / 2) + round(b / 2))); the ranks' reduction rounds (a + b) / 2 once (Note
// [Reductions of bf16 and f16 over MPI]), so a gradient may differ by a bf16 ulp (2^-8 relative).
// Losses stay within 1e-2 relative. The weights are bf16 too: near 1 (the norms' gains) a bf16
// ulp is 2^-7, above an AdamW update (about the learning rate, 3e-3), so whether a step moves
// such a weight by an ulp is decided by the update's last bits, which that gradient ulp can flip:
// a weight may differ by an ulp per step, held to 4 ulps at 1 (2^-5) over the run's steps.
TEST(DataParallelTrainer, Zero2PureBf16MatchesOneProcessWithinBf16Rounding) {
  expect_ddp_matches_one_process("pure_bf16", 1, 1e-2, "adamw_torch", 2, 0.0, 0x1p-5);
}
// fp16 with loss scaling: found_inf is reduced over the ranks, each unscaling its share only.
// Losses within 1e-6. The gradients are fp32 (autocast's master weights) but flow back through
// fp16 activations, where one process's loss / 2 (its accumulation of the ranks' two
// micro-batches) moves small values into or out of fp16's subnormals (below 6.1e-5), which keep
// fewer bits; AdamW's first steps, g / (|g| + eps), carry that to the weights: 2.7e-5 at most
// seen (under 1% of the learning rate), the same with DDP (zero_stage 0), so weights are held
// to 1e-4. No clipping (see Zero1WithClippingMatchesOneProcess for what it adds).
TEST(DataParallelTrainer, Zero2Fp16MatchesOneProcess) {
  expect_ddp_matches_one_process("fp16", 1, 1e-6, "adamw_torch", 2, 0.0, 1e-4);
}

// ZeRO-3: each block's parameters live on their owners and are broadcast for every use; the
// gathered values are the owners' exactly, so the same gradients and updates as ZeRO-2's.
TEST(DataParallelTrainer, Zero3MatchesOneProcessWithTheSameGlobalBatch) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 3, 0.0);
}
// With checkpointing the blocks are gathered again for their recompute in backward.
TEST(DataParallelTrainer, Zero3WithCheckpointingMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 3, 0.0, 0.0,
                                 [](TrainingArguments& a) { a.gradient_checkpointing = true; });
}
// With the checkpoint inputs offloaded too (activation offload's hooks around these).
TEST(DataParallelTrainer, Zero3WithActivationOffloadMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 3, 0.0, 0.0,
                                 [](TrainingArguments& a) {
                                   a.gradient_checkpointing = true;
                                   a.offload_activations = true;
                                 });
}
// bf16 autocast with clipping: the clip's norm is one process's to the bit (Note [Gradient norms
// over ranks]), so the weights are too. A norm an ulp away (the shares' norms combined, as before)
// moved fp32 weights by ulps; one next to a bf16 rounding boundary then got other bf16 copies, and
// through the gradients' cancellations and AdamW's scale invariance a weight moved by 7.6e-5 here
// (an AVX2 CPU) and 4.17e-6 on a Zen 4: no bound from the rounding held on every CPU.
TEST(DataParallelTrainer, Zero3Bf16WithClippingMatchesOneProcess) {
  expect_ddp_matches_one_process("bf16", 1, 1e-6, "adamw_torch", 3, 1.0);
}
// pure bf16, and fp16 with loss scaling: the tolerances of ZeRO-2's tests, whose reasons hold
// (the gathered weights are the owners' bits).
TEST(DataParallelTrainer, Zero3PureBf16MatchesOneProcessWithinBf16Rounding) {
  expect_ddp_matches_one_process("pure_bf16", 1, 1e-2, "adamw_torch", 3, 0.0, 0x1p-5);
}
TEST(DataParallelTrainer, Zero3Fp16MatchesOneProcess) {
  expect_ddp_matches_one_process("fp16", 1, 1e-6, "adamw_torch", 3, 0.0, 1e-4);
}
// 8-bit AdamW states (bitsandbytes' blockwise quantization, per parameter): each owner keeps its
// share's, quantized as one process quantizes the same tensors.
TEST(DataParallelTrainer, Zero3EightBitAdamMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_8bit", 3, 0.0);
}
// FP8 (delayed scaling): each rank's amaxes are its own half-batch's, so a 2-rank run is not one
// process's, at any stage; sharding must not change it, so ZeRO-3's losses and weights equal
// ZeRO-2's exactly.
TEST(DataParallelTrainer, Zero3Fp8EqualsZero2Fp8) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("zero3_fp8", 0.0);
  TrainingArguments args = dir.args();
  args.precision = "bf16";
  args.fp8 = true;
  args.save_strategy = "no";
  args.max_grad_norm = 0.0;
  args.zero_stage = 2;
  Trainer zero2(args, {}, world());
  ASSERT_EQ(zero2.train(), 0);
  args.zero_stage = 3;
  args.output_dir = (dir.path() / "zero3").string();
  Trainer zero3(args, {}, world());
  ASSERT_EQ(zero3.train(), 0);
  const auto expected = step_losses(zero2), actual = step_losses(zero3);
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [step, loss] : expected) {
    EXPECT_EQ(actual.at(step), loss) << "step " << step;
  }
  GatheredParameters whole(zero3.zero_parameters());
  const auto pa = zero3.model().parameters(), pe = zero2.model().parameters();
  ASSERT_EQ(pa.size(), pe.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].to_float_vector(), pe[i].to_float_vector()) << i;
  }
}
// Accumulation: gradients accumulate in full on every rank (no_sync), the last micro-batch's
// backward reduces them to their owners (SGD: see Fp32WithAccumulationMatchesOneProcess).
TEST(DataParallelTrainer, Zero3WithAccumulationMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 2, 1e-6, "sgd", 3, 1.0);
}
// LoRA: the frozen base's block weights are sharded too (by their own partition), the adapters
// by the optimizer's.
TEST(DataParallelTrainer, Zero3LoraMatchesOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 3, 0.0, 0.0,
                                 [](TrainingArguments& a) {
                                   a.use_peft = true;
                                   a.lora_r = 4;
                                   a.lora_dropout = 0.0;  // the ranks draw other masks
                                   a.learning_rate = 1e-2;
                                 });
}

// Evaluation over 3 batches on 2 ranks: rank 1 scores one batch, rank 0 two, but under ZeRO-3
// each forward gathers the blocks with collectives, so rank 1 runs (and drops) a second.
TEST(DataParallelTrainer, Zero3EvaluatesUnevenShardsAsOneProcess) {
  expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", 3, 0.0, 0.0,
                                 [](TrainingArguments& a) {
                                   a.eval_strategy = "steps";
                                   a.eval_steps = 2;
                                   a.per_device_eval_batch_size = 1;
                                   a.max_eval_samples = 3;
                                 });
}

// Under ZeRO-3 rank 0 writes the whole model from host copies made a block at a time: no rank's
// device peak rises above its training steps' for the write, and the file holds every rank's
// share, as the gathered model.
TEST(DataParallelTrainer, Zero3WritesTheWholeModelFromHostCopies) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("zero3_save", 0.0, 6);
  TrainingArguments args = dir.args();
  args.save_strategy = "no";
  args.zero_stage = 3;
  empty_cache(kCPU);
  Trainer trainer(args, {}, world());
  ASSERT_EQ(trainer.train(), 0);
  int64_t trained = 0;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("peak_allocated_bytes")) trained = entry["peak_allocated_bytes"];
  }
  EXPECT_EQ(static_cast<int64_t>(max_memory_allocated(kCPU)), trained)
      << "rank " << world()->rank();
  EXPECT_EQ(host_pool_stats(host_pool(kCPU)).at("reserved_bytes.all.current"), 0);
  if (world()->rank() == 0) {
    const std::unique_ptr<CausalLM> saved = load_pretrained(args.output_dir);
    GatheredParameters whole(trainer.zero_parameters());
    const auto expected = trainer.model().named_parameters();
    const auto actual = saved->named_parameters();
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_EQ(actual[i].second.to_float_vector(), expected[i].second.to_float_vector())
          << expected[i].first;
    }
  } else {
    GatheredParameters whole(trainer.zero_parameters());  // rank 0's gather, matched
  }
}

// ZeRO-Offload: each rank's share of the optimizer on the host, its gradients moved there after
// the ranks have averaged them; the same losses and weights as one process offloading all.
TEST(DataParallelTrainer, OptimizerOffloadMatchesOneProcessAtEveryStage) {
  for (const int64_t stage : {0, 1, 2, 3}) {
    SCOPED_TRACE(stage);
    expect_ddp_matches_one_process("fp32", 1, 1e-6, "adamw_torch", stage, 0.0, 0.0,
                                   [](TrainingArguments& a) { a.offload_optimizer = true; });
  }
}
// With accumulation the device accumulates the gradients until the last micro-batch's reduction.
TEST(DataParallelTrainer, OptimizerOffloadWithAccumulationMatchesOneProcess) {
  expect_ddp_matches_one_process("bf16", 2, 1e-6, "sgd", 2, 1.0, 0.0,
                                 [](TrainingArguments& a) { a.offload_optimizer = true; });
}

// How often ZeRO-3 gathers each block: twice a step, FSDP's count, for the forward and for the
// backward (a block saves some parameters for backward in every precision: the norms' weights
// under autocast), a checkpoint's recompute sharing the backward's gather rather than adding a
// third; and once more for the model written at the end.
TEST(DataParallelTrainer, Zero3GathersEachBlockTwiceAStep) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("zero3_gathers", 0.0, 6);
  TrainingArguments args = dir.args();
  args.save_strategy = "no";
  args.zero_stage = 3;
  args.max_steps = 2;
  for (const std::string precision : {"fp32", "bf16"}) {
    for (const bool checkpointing : {false, true}) {
      args.precision = precision;
      args.gradient_checkpointing = checkpointing;
      Trainer trainer(args, {}, world());
      ASSERT_EQ(trainer.train(), 0);
      EXPECT_EQ(trainer.zero_parameters()->gather_count(), 2 * 2 * 6 + 6)
          << precision << (checkpointing ? " with" : " without") << " checkpointing";
    }
  }
}

// ZeRO-1 keeps about 1/W of the optimizer states on each rank: below DDP's by at least a third on
// 2 ranks (shares are whole parameters, so not exactly half), and the ranks' sum is DDP's.
TEST(DataParallelTrainer, Zero1ShardsTheOptimizerStates) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("zero1_memory", 0.0);
  TrainingArguments args = dir.args();
  args.save_strategy = "no";
  args.max_steps = 2;  // the states, made by the first step, are held through the second's peak
  // One trainer at a time: the breakdown is of the device's peak.
  const auto states = [&](std::optional<int64_t> zero_stage) {
    args.zero_stage = zero_stage;
    Trainer trainer(args, {}, world());
    EXPECT_EQ(trainer.train(), 0);
    return static_cast<double>(trainer.memory_breakdown().bytes(MemoryCategory::optimizer_states));
  };
  const double ddp = states(0), zero = states(1);
  EXPECT_LT(zero, ddp * 2.0 / 3.0);
  const double sum = world()->all_reduce_scalar(zero, ReduceOp::sum);
  // Each rank's states are whole tensors, each rounded up to the allocator's 512-byte blocks on
  // its own, so the shards' sum exceeds DDP's by up to a block per tensor: 2% here.
  EXPECT_NEAR(sum, ddp, 0.02 * ddp);
}

// This rank's peak allocated in a 2-step dry run of `args` and in a real 3-step run (its third
// step repeats the second, as the dry-run grid's in tests/plan), started with an empty cache as a
// fresh process would.
std::pair<int64_t, int64_t> planned_and_measured_peaks(const TrainingArguments& args,
                                                       DryRunResult* plan_out = nullptr) {
  TrainingArguments plan_args = args;
  plan_args.max_steps = 2;
  const DryRunResult plan =
      dry_run_training(plan_args, {.world_size = world()->world_size(), .rank = world()->rank()});
  TrainingArguments run_args = args;
  run_args.max_steps = 3;
  empty_cache(kCPU);
  Trainer trainer(run_args, {}, world());
  EXPECT_EQ(trainer.train(), 0);
  int64_t measured = 0;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("peak_allocated_bytes")) measured = entry["peak_allocated_bytes"];
  }
  if (plan_out) *plan_out = plan;
  return {plan.peak_allocated_bytes, measured};
}

// `headroom plan --world_size 2` dry-runs each rank as itself on the meta device (Note [A dry
// run's collectives]): every rank's peak allocated in the real run is its plan's to the byte, for
// DDP and ZeRO-1, -2 and -3, and it falls from stage to stage as ZeRO predicts.
TEST(DataParallelTrainer, EachRanksPeakEqualsItsPlanAndFallsWithTheStage) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  // Six blocks: ZeRO-3 holds two gathered at a time in backward (the one running, the one before
  // prefetched), so sharding shows only with more.
  SharedRunDir dir("rank_plan", 0.0, 6);
  TrainingArguments args = dir.args();
  args.save_strategy = "no";
  // The tiny model's 272 KiB of gradients would fill DDP's first 1 MiB bucket alone: buckets of
  // 32 KiB make it as a real model's, many buckets, so ZeRO-2's buffers are a few of them.
  args.ddp_bucket_cap_mb = 1.0 / 32;
  int64_t previous = 0, load_peak_below_3 = 0;
  for (const int64_t stage : {0, 1, 2, 3}) {
    args.zero_stage = stage;
    DryRunResult plan;
    const int64_t measured = planned_and_measured_peaks(args, &plan).second;
    std::printf("zero_stage %lld rank %d: peak allocated %lld (plan) %lld (run)\n",
                static_cast<long long>(stage), world()->rank(),
                static_cast<long long>(plan.peak_allocated_bytes),
                static_cast<long long>(measured));
    EXPECT_EQ(plan.peak_allocated_bytes, measured)
        << "zero_stage " << stage << ", rank " << world()->rank();
    if (stage > 0) {
      EXPECT_LT(measured, previous) << "zero_stage " << stage;
    }
    previous = measured;
    // ZeRO-3 loads each rank's share of the blocks only (LoadOptions::keep_parameter).
    if (stage == 3) {
      EXPECT_LT(plan.load_peak_allocated_bytes, load_peak_below_3) << "rank " << world()->rank();
    }
    load_peak_below_3 = plan.load_peak_allocated_bytes;
  }
}

// With the optimizer offloaded each rank's device peak is still its plan's to the byte, and below
// the same stage's without offload.
TEST(DataParallelTrainer, OffloadedRanksPeaksEqualTheirPlans) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("offload_plan", 0.0, 6);
  TrainingArguments args = dir.args();
  args.save_strategy = "no";
  args.ddp_bucket_cap_mb = 1.0 / 32;
  for (const int64_t stage : {0, 2, 3}) {
    args.zero_stage = stage;
    int64_t without = 0;
    for (const bool offload : {false, true}) {
      args.offload_optimizer = offload;
      const auto [planned, measured] = planned_and_measured_peaks(args);
      EXPECT_EQ(planned, measured)
          << "zero_stage " << stage << ", offload " << offload << ", rank " << world()->rank();
      if (offload) {
        EXPECT_LT(measured, without) << "zero_stage " << stage;
      }
      without = measured;
    }
  }
}

TEST(DataParallelTrainer, ZeroStageFromTheDeepSpeedConfig) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("zero_deepspeed", 0.0);
  TrainingArguments args = dir.args();
  const fs::path config = dir.path() / str_cat("ds_", world()->rank(), ".json");
  std::ofstream(config) << R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})";
  args.deepspeed = config.string();
  EXPECT_EQ(training_zero_stage(args), 1);
  args.zero_stage = 0;
  EXPECT_THROW(training_zero_stage(args), ValueError);
  args.zero_stage.reset();
  std::ofstream(config) << R"({"zero_optimization": {"stage": 2}})";
  EXPECT_EQ(training_zero_stage(args), 2);
  std::ofstream(config) << R"({"zero_optimization": {"stage": 3}})";
  EXPECT_EQ(training_zero_stage(args), 3);
  std::ofstream(config) << R"({"zero_optimization": {"stage": 4}})";
  EXPECT_THROW(training_zero_stage(args), ValueError);
  std::ofstream(config) << R"({"zero_optimization": {"stage": "one"}})";
  EXPECT_THROW(training_zero_stage(args), ValueError);
}

// Steps 3-4 of a 2-rank run resumed from its checkpoint-2 equal the uninterrupted run's, bit for
// bit (with ZeRO: each rank's optimizer shard resumed, Note [ZeRO checkpoints]).
void expect_resume_is_bit_identical(int64_t zero_stage, const fs::path& root,
                                    const TrainingArguments& args) {
  Trainer full(args, {}, world());
  ASSERT_EQ(full.train(), 0);
  ASSERT_TRUE(fs::exists(root / "out" / "checkpoint-2"));

  TrainingArguments resumed_args = args;
  resumed_args.output_dir = (root / "resumed").string();
  resumed_args.resume_from_checkpoint = (root / "out" / "checkpoint-2").string();
  Trainer resumed(resumed_args, {}, world());
  ASSERT_EQ(resumed.train(), 0);
  const auto expected = step_losses(full), actual = step_losses(resumed);
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [step, loss] : expected) {
    EXPECT_EQ(actual.at(step), loss) << "zero_stage " << zero_stage << ", step " << step;
  }
  GatheredParameters whole_resumed(resumed.zero_parameters());
  GatheredParameters whole_full(full.zero_parameters());
  const auto pa = resumed.model().parameters(), pe = full.model().parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].to_float_vector(), pe[i].to_float_vector()) << i;
  }
}

TEST(DataParallelTrainer, ResumeWithTheSameWorldSizeIsBitIdentical) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  SharedRunDir dir("ddp_resume", 0.1);  // dropout: the generator's state is resumed too
  TrainingArguments args = dir.args();
  args.per_device_train_batch_size = 2;
  expect_resume_is_bit_identical(0, dir.path(), args);
}

// FP8 delayed scaling: each rank's amaxes are its own micro-batches', so each rank writes its own
// fp8_state-rank-R-of-W.safetensors into the checkpoint and resumes from it, with DDP and ZeRO-2.
// A single process finds no state of its own there and is refused by name.
TEST(DataParallelTrainer, Fp8DelayedScalingResumesEachRanksHistory) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  for (const int64_t stage : {0, 2}) {
    SharedRunDir dir(str_cat("fp8_resume_", stage), 0.0);
    TrainingArguments args = dir.args();
    args.per_device_train_batch_size = 2;
    args.zero_stage = stage;
    args.fp8 = true;
    args.fp8_amax_history_len = 3;
    expect_resume_is_bit_identical(stage, dir.path(), args);
    const fs::path checkpoint = dir.path() / "out" / "checkpoint-2";
    for (int rank = 0; rank < world()->world_size(); ++rank) {
      EXPECT_TRUE(fs::exists(checkpoint / str_cat("fp8_state-rank-", rank, "-of-",
                                                  world()->world_size(), ".safetensors")));
    }
    if (stage == 0) {
      TrainingArguments single = args;
      single.output_dir = (dir.path() / str_cat("single_", world()->rank())).string();
      single.resume_from_checkpoint = checkpoint.string();
      try {
        Trainer(single).train();
        ADD_FAILURE() << "a 2-rank FP8 checkpoint resumed by one process";
      } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("another number of ranks"), std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(DataParallelTrainer, ZeroShardedCheckpointsResumeBitIdentically) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  // Stage 4 here: ZeRO-3 with its shares' optimizers offloaded.
  for (const int64_t stage : {1, 2, 3, 4}) {
    SharedRunDir dir(str_cat("zero_resume_", stage), 0.1);
    TrainingArguments args = dir.args();
    args.per_device_train_batch_size = 2;
    args.zero_stage = std::min<int64_t>(stage, 3);
    args.offload_optimizer = stage == 4;
    expect_resume_is_bit_identical(stage, dir.path(), args);
    // One shard per rank and the manifest; no unsharded optimizer file.
    const fs::path checkpoint = dir.path() / "out" / "checkpoint-2";
    EXPECT_TRUE(fs::exists(checkpoint / "zero_checkpoint.json"));
    EXPECT_FALSE(fs::exists(checkpoint / "optimizer.safetensors"));
    for (int rank = 0; rank < world()->world_size(); ++rank) {
      EXPECT_TRUE(fs::exists(checkpoint / str_cat("optimizer-rank-", rank, "-of-",
                                                  world()->world_size(), ".safetensors")));
    }
    // The model is written whole for HF (under ZeRO-3 gathered for the write).
    EXPECT_TRUE(fs::exists(dir.path() / "out" / "model.safetensors"));
    // Another world size is refused by name: here one process, each rank on its own.
    TrainingArguments single = args;
    single.output_dir = (dir.path() / str_cat("single_", world()->rank())).string();
    single.resume_from_checkpoint = checkpoint.string();
    try {
      Trainer(single).train();
      ADD_FAILURE() << "a ZeRO checkpoint resumed by one process";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("mpirun -np 2"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace headroom
