// The planner's accuracy grid: for each configuration, `headroom plan`'s dry run on the meta
// device predicts the peak allocated and reserved bytes that the real CPU run then measures.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "io/hf_config.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory.h"
#include "plan/dry_run.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;
using test_data::tiny_training_args;

struct GridCase {
  std::string name;
  std::string model;  // "gpt2", "llama", "gemma2" or "gemma3"
  int64_t width = 64;
  int64_t layers = 2;
  int64_t batch = 2;
  int64_t seq = 32;
  int64_t accumulation = 1;
  std::string precision = "fp32";
  std::string optim = "adamw_torch";
  std::string checkpointing;  // "" = none
  double dropout = 0.0;
  int64_t workers = 0;
  std::string lora_targets;  // "" = full fine-tuning; else --use_peft with these targets
  bool four_bit = false;     // QLoRA: --load_in_4bit, NF4 with double quantization
  std::string fp8_recipe;    // "" = no FP8; else --fp8 with this --fp8_recipe
  bool fp8_save_original_input = false;
};

TrainingArguments case_arguments(const GridCase& c, const fs::path& root) {
  fs::create_directories(root / "model");
  if (c.model == "gpt2") {
    GPT2Config config;
    config.vocab_size = 256;
    config.n_positions = std::max<int64_t>(64, c.seq);
    config.n_embd = c.width;
    config.n_layer = c.layers;
    config.n_head = 4;
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = c.dropout;
    config.bos_token_id = std::nullopt;
    config.eos_token_id = {};
    write_hf_config((root / "model").string(), config);
  } else if (c.model == "gemma2" || c.model == "gemma3") {
    // Gemma's block: both soft caps (Gemma 2), q / k norms and two RoPE bases (Gemma 3), a
    // window of 8 keys on the sliding layers, the tied head.
    LlamaConfig config;
    config.family =
        c.model == "gemma2" ? LlamaConfig::Family::gemma2 : LlamaConfig::Family::gemma3_text;
    config.vocab_size = 256;
    config.hidden_size = c.width;
    config.intermediate_size = c.width * 2;
    config.num_hidden_layers = c.layers;
    config.num_attention_heads = 4;
    config.num_key_value_heads = 2;
    config.head_dim = 32;
    config.hidden_act = "gelu_pytorch_tanh";
    config.max_position_embeddings = std::max<int64_t>(64, c.seq);
    config.tie_word_embeddings = true;
    config.pad_token_id = 0;
    config.bos_token_id = std::nullopt;
    config.eos_token_id = {};
    config.query_pre_attn_scalar = 24.0;
    config.sliding_window = 8;
    config.sliding_window_pattern = 2;
    if (c.model == "gemma2") {
      config.attn_logit_softcapping = 50.0;
      config.final_logit_softcapping = 30.0;
    } else {
      config.rope_theta = 1e6;
    }
    for (int64_t i = 0; i < c.layers; ++i) {
      config.layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    }
    write_hf_config((root / "model").string(), config);
  } else {
    LlamaConfig config;
    config.vocab_size = 256;
    config.hidden_size = c.width;
    config.intermediate_size = c.width * 8 / 3;
    config.num_hidden_layers = c.layers;
    config.num_attention_heads = 4;
    config.num_key_value_heads = 2;
    config.max_position_embeddings = std::max<int64_t>(64, c.seq);
    config.bos_token_id = std::nullopt;
    config.eos_token_id = {};
    write_hf_config((root / "model").string(), config);
  }
  std::string text;
  for (int i = 0; i < 40; ++i) text += test_data::kTinyText;
  std::ofstream((root / "data.txt").string()) << text;
  TrainingArguments args;
  args.model = (root / "model").string();
  args.data = (root / "data.txt").string();
  args.output_dir = (root / "out").string();
  args.device = "cpu";
  args.max_seq_length = c.seq;
  args.per_device_train_batch_size = c.batch;
  args.gradient_accumulation_steps = c.accumulation;
  args.max_steps = 2;
  args.precision = c.precision;
  args.optim = c.optim;
  args.gradient_checkpointing = !c.checkpointing.empty();
  if (!c.checkpointing.empty()) args.gradient_checkpointing_policy = c.checkpointing;
  args.dataloader_num_workers = c.workers;
  if (!c.lora_targets.empty()) {
    args.use_peft = true;
    args.lora_r = 8;
    args.lora_dropout = c.dropout;
    args.lora_target_modules = c.lora_targets == "default" ? "" : c.lora_targets;
    args.load_in_4bit = c.four_bit;
    args.bnb_4bit_quant_type = "nf4";
    args.bnb_4bit_use_double_quant = true;
  }
  if (!c.fp8_recipe.empty()) {
    args.fp8 = true;
    args.fp8_recipe = c.fp8_recipe;
    args.fp8_amax_history_len = 16;
    args.fp8_save_original_input = c.fp8_save_original_input;
  }
  args.logging_steps = 1;
  args.eval_strategy = "steps";
  args.per_device_eval_batch_size = 2;
  args.max_eval_samples = 4;  // two full eval batches
  args.save_strategy = "no";
  args.disable_tqdm = true;
  args.sample_max_new_tokens = 0;
  return args;
}

GridCase make_case(std::string name, std::string model) {
  GridCase c;
  c.name = std::move(name);
  c.model = std::move(model);
  return c;
}

// Every precision recipe, every optimizer, every checkpointing policy, accumulation, dropout,
// loader workers, and sizes whose tensors reach the large pool (over 1 MiB) and its 20 MiB
// segments and oversize blocks.
std::vector<GridCase> grid() {
  std::vector<GridCase> cases;
  auto add = [&](std::string name, std::string model, auto&& change) {
    GridCase c = make_case(std::move(name), std::move(model));
    change(c);
    cases.push_back(c);
  };
  auto same = [](GridCase&) {};
  add("gpt2_fp32_adamw", "gpt2", same);
  add("llama_fp32_adamw", "llama", same);
  add("gpt2_bf16_adamw", "gpt2", [](GridCase& c) { c.precision = "bf16"; });
  add("gpt2_fp16_adamw", "gpt2", [](GridCase& c) { c.precision = "fp16"; });
  add("llama_fp16_adamw", "llama", [](GridCase& c) { c.precision = "fp16"; });
  add("gpt2_pure_bf16", "gpt2", [](GridCase& c) { c.precision = "pure_bf16"; });
  add("llama_pure_bf16_kahan", "llama", [](GridCase& c) { c.precision = "pure_bf16+kahan"; });
  add("llama_pure_bf16_lion", "llama", [](GridCase& c) {
    c.precision = "pure_bf16";
    c.optim = "lion";
  });
  add("gpt2_adamw_bf16_states", "gpt2", [](GridCase& c) { c.optim = "adamw_bf16"; });
  add("llama_bf16_adamw_8bit", "llama", [](GridCase& c) {
    c.width = 128;
    c.precision = "bf16";
    c.optim = "adamw_8bit";
  });
  // bitsandbytes' 8-bit states of bf16 weights (issue 21), wide enough for 8-bit states.
  add("llama_pure_bf16_adamw_8bit", "llama", [](GridCase& c) {
    c.width = 128;
    c.precision = "pure_bf16";
    c.optim = "adamw_8bit";
  });
  add("gpt2_pure_bf16_lion_8bit", "gpt2", [](GridCase& c) {
    c.width = 128;
    c.precision = "pure_bf16";
    c.optim = "lion_8bit";
  });
  add("gpt2_sgd", "gpt2", [](GridCase& c) { c.optim = "sgd"; });
  add("gpt2_lion", "gpt2", [](GridCase& c) { c.optim = "lion"; });
  add("gpt2_adafactor", "gpt2", [](GridCase& c) { c.optim = "adafactor"; });
  add("llama_bf16_adafactor", "llama", [](GridCase& c) {
    c.precision = "bf16";
    c.optim = "adafactor";
  });
  add("gpt2_lomo", "gpt2", [](GridCase& c) { c.optim = "lomo"; });
  add("llama_bf16_lomo_full", "llama", [](GridCase& c) {
    c.precision = "bf16";
    c.optim = "lomo";
    c.checkpointing = "full";
  });
  add("gpt2_full", "gpt2", [](GridCase& c) {
    c.layers = 3;
    c.checkpointing = "full";
  });
  add("gpt2_every_2", "gpt2", [](GridCase& c) {
    c.layers = 4;
    c.checkpointing = "every_2";
  });
  add("llama_selective", "llama", [](GridCase& c) { c.checkpointing = "selective"; });
  add("gpt2_bf16_selective", "gpt2", [](GridCase& c) {
    c.precision = "bf16";
    c.checkpointing = "selective";
  });
  add("gpt2_accumulation_4", "gpt2", [](GridCase& c) { c.accumulation = 4; });
  add("llama_fp16_accumulation_3_full", "llama", [](GridCase& c) {
    c.precision = "fp16";
    c.accumulation = 3;
    c.checkpointing = "full";
  });
  add("gpt2_dropout_full", "gpt2", [](GridCase& c) {
    c.checkpointing = "full";
    c.dropout = 0.1;
  });
  add("gpt2_loader_workers", "gpt2", [](GridCase& c) { c.workers = 2; });
  add("gpt2_large_pool_fp32", "gpt2", [](GridCase& c) {
    c.width = 256;
    c.layers = 3;
    c.batch = 8;
    c.seq = 128;
  });
  add("llama_large_pool_bf16_every_2", "llama", [](GridCase& c) {
    c.width = 256;
    c.layers = 4;
    c.batch = 6;
    c.seq = 128;
    c.precision = "bf16";
    c.checkpointing = "every_2";
  });
  add("gpt2_large_pool_fp16", "gpt2", [](GridCase& c) {
    c.width = 128;
    c.layers = 4;
    c.batch = 6;
    c.seq = 256;
    c.precision = "fp16";
  });
  add("gpt2_large_pool_fp16_8bit_accumulation_2", "gpt2", [](GridCase& c) {
    c.width = 256;
    c.layers = 2;
    c.batch = 8;
    c.seq = 96;
    c.precision = "fp16";
    c.optim = "adamw_8bit";
    c.accumulation = 2;
  });
  // LoRA: a frozen base, adapters on some or all projections, lora_dropout on their input.
  add("gpt2_lora_fp32_adamw", "gpt2", [](GridCase& c) { c.lora_targets = "default"; });
  add("llama_lora_bf16_all_linear_selective", "llama", [](GridCase& c) {
    c.precision = "bf16";
    c.lora_targets = "all-linear";
    c.checkpointing = "selective";
    c.dropout = 0.1;
  });
  add("llama_lora_pure_bf16_full_ckpt_accumulation_2", "llama", [](GridCase& c) {
    c.precision = "pure_bf16";
    c.lora_targets = "q_proj,v_proj";
    c.checkpointing = "full";
    c.accumulation = 2;
  });
  add("gpt2_lora_fp16_adamw_8bit", "gpt2", [](GridCase& c) {
    c.precision = "fp16";
    c.optim = "adamw_8bit";
    c.lora_targets = "c_attn,c_fc";
  });
  // LoRA on lm_head (GPT-2's tied to wte): the logits are made whole then, as transformers does.
  add("gpt2_lora_head_bf16", "gpt2", [](GridCase& c) {
    c.precision = "bf16";
    c.lora_targets = "c_attn,lm_head";
  });
  add("llama_lora_head_only_fp32", "llama", [](GridCase& c) { c.lora_targets = "lm_head"; });
  // QLoRA: the adapters on a frozen NF4 base computing in bf16.
  add("llama_qlora_bf16_all_linear_every_2", "llama", [](GridCase& c) {
    c.width = 128;
    c.precision = "bf16";
    c.lora_targets = "all-linear";
    c.four_bit = true;
    c.checkpointing = "every_2";
  });
  // FP8 (Note [FP8 linear]): the FP8 inputs saved for backward, the per-step weight copies, the
  // scales and histories, the dequantized operands of the block recipes.
  add("gpt2_fp8_delayed", "gpt2", [](GridCase& c) { c.fp8_recipe = "delayed"; });
  add("llama_bf16_fp8_current_accumulation_2", "llama", [](GridCase& c) {
    c.precision = "bf16";
    c.fp8_recipe = "current";
    c.accumulation = 2;
  });
  add("gpt2_bf16_fp8_mxfp8_selective", "gpt2", [](GridCase& c) {
    c.precision = "bf16";
    c.fp8_recipe = "mxfp8";
    c.checkpointing = "selective";
  });
  add("llama_fp8_block_full", "llama", [](GridCase& c) {
    c.fp8_recipe = "block";
    c.checkpointing = "full";
  });
  add("gpt2_fp8_delayed_original_input", "gpt2", [](GridCase& c) {
    c.fp8_recipe = "delayed";
    c.fp8_save_original_input = true;
  });
  // Gemma 2 / 3 (their (1 + w) norms, GeGLU, soft caps in the attention kernels and the fused loss,
  // sliding and global layers): bf16 autocast with checkpoints, and QLoRA.
  add("gemma2_bf16_adamw_selective", "gemma2", [](GridCase& c) {
    c.layers = 3;
    c.precision = "bf16";
    c.checkpointing = "selective";
  });
  add("gemma3_qlora_bf16_all_linear_full", "gemma3", [](GridCase& c) {
    c.width = 128;
    c.precision = "bf16";
    c.lora_targets = "all-linear";
    c.four_bit = true;
    c.checkpointing = "full";
  });
  add("llama_large_pool_fp32_accumulation_4", "llama", [](GridCase& c) {
    c.width = 256;
    c.layers = 2;
    c.batch = 4;
    c.seq = 96;
    c.accumulation = 4;
  });
  return cases;
}

void PrintTo(const GridCase& c, std::ostream* out) { *out << c.name; }

// The real run's peaks as metrics.jsonl logs them: {allocated, reserved}; {0, 0} when training
// failed (the test then fails).
std::pair<int64_t, int64_t> train_and_measure(const TrainingArguments& args) {
  std::pair<int64_t, int64_t> peaks{0, 0};
  Trainer trainer(args);
  EXPECT_EQ(trainer.train(), 0);
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("peak_allocated_bytes")) {
      peaks = {entry["peak_allocated_bytes"].get<int64_t>(),
               entry["peak_reserved_bytes"].get<int64_t>()};
    }
  }
  return peaks;
}

// The worst relative errors over the cases run in this process, printed after the suite (run
// the whole grid in one process to see them: --gtest_filter='Configurations/DryRunGrid.*').
struct WorstErrors {
  double allocated = 0.0, reserved = 0.0;
  std::string allocated_case, reserved_case;
  int cases = 0;
};

class DryRunGrid : public testing::TestWithParam<GridCase> {
 public:
  static void TearDownTestSuite() {
    std::printf(
        "dry-run grid: %d configurations; worst |plan - run| / run: peak allocated %.4f%% "
        "(%s), peak reserved %.4f%% (%s)\n",
        worst_.cases, 100.0 * worst_.allocated, worst_.allocated_case.c_str(),
        100.0 * worst_.reserved, worst_.reserved_case.c_str());
  }

 protected:
  static void record(const std::string& name, int64_t plan_allocated, int64_t run_allocated,
                     int64_t plan_reserved, int64_t run_reserved) {
    auto error = [](int64_t plan, int64_t run) {
      return std::abs(static_cast<double>(plan - run)) / static_cast<double>(run);
    };
    ++worst_.cases;
    if (const double e = error(plan_allocated, run_allocated); e >= worst_.allocated) {
      worst_.allocated = e;
      worst_.allocated_case = name;
    }
    if (const double e = error(plan_reserved, run_reserved); e >= worst_.reserved) {
      worst_.reserved = e;
      worst_.reserved_case = name;
    }
  }

 private:
  static inline WorstErrors worst_;
};

// Note [A model's structure takes host memory]: a config of 1e9 layers never returned; its
// blocks' modules alone exceed any host, so it is refused before one is built.
TEST(DryRun, AModelDeeperThanTheHostCanHoldIsRefused) {
  TempDir tmp("dry_run_deep");
  TrainingArguments args = tiny_training_args(tmp.path());
  LlamaConfig config;
  config.vocab_size = 256;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_attention_heads = 4;
  config.num_hidden_layers = 1000000000;
  write_hf_config(args.model, config);
  const auto start = std::chrono::steady_clock::now();
  try {
    dry_run_training(args);
    ADD_FAILURE() << "1e9 layers were planned";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers: 1000000000 blocks"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// A plan's time does not grow with gradient_accumulation_steps (1e9 ran on for ever): two
// micro-batches a step stand for any number (DryRunOptions::max_micro_batches), and the step's
// tokens count them all.
TEST(DryRun, AnyAccumulationIsPlannedFromTwoMicroBatches) {
  TempDir tmp("dry_run_accumulation");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.gradient_accumulation_steps = 2;
  const DryRunResult two = dry_run_training(args);
  args.gradient_accumulation_steps = 1000000000;
  const auto start = std::chrono::steady_clock::now();
  const DryRunResult many = dry_run_training(args);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(many.peak_allocated_bytes, two.peak_allocated_bytes);
  EXPECT_EQ(many.peak_reserved_bytes, two.peak_reserved_bytes);
  EXPECT_EQ(many.tokens_per_step, two.tokens_per_step / 2 * 1000000000);
}

// Note [An incremental peak state]: a dry run's reserved-peak captures do work in proportion to
// the changes to the cache, so 4x the layers cost about 4x the segment updates; walking the whole
// cache at each capture (as before) grew with the square of the layers, worst with expandable
// segments. Counted, not timed.
TEST(DryRun, PeakCapturesGrowLinearlyWithLayers) {
  for (const bool expandable : {false, true}) {
    auto updates = [&](int64_t layers) {
      TempDir tmp("dry_run_linear");
      TrainingArguments args = tiny_training_args(tmp.path());
      args.expandable_segments = expandable;
      args.max_seq_length = 16;
      args.per_device_train_batch_size = 1;
      LlamaConfig config;
      config.vocab_size = 256;
      config.hidden_size = 32;
      config.intermediate_size = 64;
      config.num_attention_heads = 4;
      config.num_key_value_heads = 2;
      config.num_hidden_layers = layers;
      write_hf_config(args.model, config);
      const uint64_t before = caching_allocator(kMeta).peak_state_segment_updates();
      dry_run_training(args);
      return caching_allocator(kMeta).peak_state_segment_updates() - before;
    };
    const uint64_t small = updates(50);
    const uint64_t large = updates(200);
    EXPECT_GT(small, 0u);
    EXPECT_LE(static_cast<double>(large), 4.5 * static_cast<double>(small))
        << (expandable ? "expandable segments: " : "") << small
        << " segment updates for 50 layers, " << large << " for 200";
  }
}

// The real run trains 3 steps (the dry run 2: the third repeats the second) and evaluates after
// each; its figures are the ones metrics.jsonl logs.
TEST_P(DryRunGrid, PredictsTheRealRunsPeaks) {
  const GridCase& c = GetParam();
  TempDir tmp("dry_run_" + c.name);
  TrainingArguments args = case_arguments(c, tmp.path());
  const DryRunResult plan = dry_run_training(args, {.max_micro_batches = 0});  // all of them
  args.max_steps = 3;
  empty_cache(kCPU);  // as a fresh process: nothing cached by earlier tests
  const auto [measured_allocated, measured_reserved] = train_and_measure(args);
  ASSERT_GT(measured_reserved, 0) << "the run logged no peaks";
  std::printf(
      "%-44s allocated %10lld (plan) %10lld (run)  reserved %10lld %10lld\n", c.name.c_str(),
      static_cast<long long>(plan.peak_allocated_bytes), static_cast<long long>(measured_allocated),
      static_cast<long long>(plan.peak_reserved_bytes), static_cast<long long>(measured_reserved));
  record(c.name, plan.peak_allocated_bytes, measured_allocated, plan.peak_reserved_bytes,
         measured_reserved);
  if (c.workers > 0) {
    // The workers assemble batches ahead on their own threads: how many are ready at the peak
    // depends on timing, so the plan (all ready) is an upper bound within the batches' bytes.
    EXPECT_GE(plan.peak_allocated_bytes, measured_allocated);
    EXPECT_LE(plan.peak_allocated_bytes, measured_allocated * 101 / 100);
    EXPECT_GE(plan.peak_reserved_bytes, measured_reserved);
    EXPECT_LE(plan.peak_reserved_bytes, measured_reserved * 102 / 100);
  } else if (plan.loss_scaling) {
    // The other order on the CPU: a first step that overflows (forced, as the dry run forces
    // it; a real inf takes the same path from unscale_ on), then the usual steps.
    empty_cache(kCPU);
    {
      Trainer trainer(args);
      reset_peak_memory_stats(kCPU);
      trainer.step(/*assume_overflow=*/true);
      for (int i = 0; i < 2; ++i) trainer.step();
      trainer.evaluate();
      EXPECT_EQ(static_cast<int64_t>(max_memory_allocated(kCPU)),
                plan.first_step_skipped_peaks.allocated);
      EXPECT_EQ(static_cast<int64_t>(max_memory_reserved(kCPU)),
                plan.first_step_skipped_peaks.reserved);
    }
    // Note [Planning loss-scaled runs]: the run is one of the two dry runs, the plan the larger.
    const DryRunResult::Peaks run{measured_allocated, measured_reserved};
    auto same = [&](const DryRunResult::Peaks& p) {
      return p.allocated == run.allocated && p.reserved == run.reserved;
    };
    EXPECT_TRUE(same(plan.no_overflow_peaks) || same(plan.first_step_skipped_peaks))
        << "no overflow " << plan.no_overflow_peaks.to_json() << ", first step skipped "
        << plan.first_step_skipped_peaks.to_json();
    EXPECT_EQ(plan.peak_allocated_bytes,
              std::max(plan.no_overflow_peaks.allocated, plan.first_step_skipped_peaks.allocated));
    EXPECT_EQ(plan.peak_reserved_bytes,
              std::max(plan.no_overflow_peaks.reserved, plan.first_step_skipped_peaks.reserved));
    EXPECT_LE(plan.peak_allocated_bytes, measured_allocated * 101 / 100);
    // The two runs may differ by one small-pool segment, more than 2% of a tiny model's.
    EXPECT_LE(plan.peak_reserved_bytes,
              std::max<int64_t>(measured_reserved * 102 / 100,
                                measured_reserved + CachingAllocator::kSmallBuffer));
  } else {
    EXPECT_EQ(plan.peak_allocated_bytes, measured_allocated);
    EXPECT_EQ(plan.peak_reserved_bytes, measured_reserved);
  }
  if (c.accumulation > 2) {
    // The plans' shortcut (DryRunOptions::max_micro_batches, two micro-batches a step by
    // default) gives the same peaks as all of them.
    const DryRunResult capped = dry_run_training(args);
    EXPECT_EQ(capped.peak_allocated_bytes, plan.peak_allocated_bytes);
    EXPECT_EQ(capped.peak_reserved_bytes, plan.peak_reserved_bytes);
  }
  int64_t sum = plan.allocator_slack;
  for (int64_t bytes : plan.at_peak) sum += bytes;
  EXPECT_EQ(sum, plan.peak_reserved_bytes);
}

// Note [Expandable segments]: the same configurations with expandable segments on the CPU (as
// HEADROOM_ALLOC_CONF=expandable_segments:True, set on the allocator for the test) and in the
// dry run (--expandable_segments). The dry run reserves what the run reserves, to the byte.
// Prints the slack of both policies (the native one from the dry run, which the test above holds
// to the run's); this grid's models of a few MiB keep the slack of one 2 MiB page either way.
TEST_P(DryRunGrid, ExpandableSegmentsLeaveNoSlack) {
  const GridCase& c = GetParam();
  TempDir tmp("dry_run_expandable_" + c.name);
  TrainingArguments args = case_arguments(c, tmp.path());
  const DryRunResult native = dry_run_training(args);
  args.expandable_segments = true;
  const DryRunResult plan = dry_run_training(args);
  EXPECT_TRUE(plan.expandable_segments);
  // Blocks split down to 512 B, so no large-pool remainder of up to 1 MiB is allocated along.
  EXPECT_LE(plan.peak_allocated_bytes, native.peak_allocated_bytes);
  args.max_steps = 3;
  CachingAllocator& cpu = caching_allocator(kCPU);
  empty_cache(kCPU);
  cpu.set_expandable_segments(true);
  struct Restore {
    CachingAllocator& cpu;
    ~Restore() {
      cpu.empty_cache();
      cpu.set_expandable_segments(false);
    }
  } restore{cpu};
  const auto [measured_allocated, measured_reserved] = train_and_measure(args);
  ASSERT_GT(measured_reserved, 0) << "the run logged no peaks";
  auto percent = [](int64_t reserved, int64_t allocated) {
    return 100.0 * static_cast<double>(reserved - allocated) / static_cast<double>(reserved);
  };
  std::printf("%-44s slack of reserved: native %5.1f%% (%lld), expandable %5.1f%% (%lld)\n",
              c.name.c_str(), percent(native.peak_reserved_bytes, native.peak_allocated_bytes),
              static_cast<long long>(native.allocator_slack),
              percent(measured_reserved, measured_allocated),
              static_cast<long long>(measured_reserved - measured_allocated));
  if (c.workers > 0) {
    EXPECT_GE(plan.peak_reserved_bytes, measured_reserved);
  } else if (!plan.loss_scaling) {
    EXPECT_EQ(plan.peak_allocated_bytes, measured_allocated);
    EXPECT_EQ(plan.peak_reserved_bytes, measured_reserved);
  }
}

INSTANTIATE_TEST_SUITE_P(Configurations, DryRunGrid, testing::ValuesIn(grid()),
                         [](const testing::TestParamInfo<GridCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace headroom
