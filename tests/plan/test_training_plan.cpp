// The plan around the dry run: GPU table and targets, the guides' formulas term by term, the
// step-time estimate against PaLM's FLOP count, the configuration search's promises, the
// inference plan's KV cache, and a 70B plan without weights.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "memory/device_memory.h"
#include "memory/memory_category.h"
#include "nn/model_presets.h"
#include "ops/ops.h"
#include "ops/op_support.h"
#include "plan/config_search.h"
#include "plan/inference_plan.h"
#include "plan/training_plan.h"

namespace headroom {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TrainingArguments preset_args(const std::string& model, int64_t batch, int64_t seq) {
  TrainingArguments args;
  args.model = model;
  args.device = "cpu";
  args.max_seq_length = seq;
  args.per_device_train_batch_size = batch;
  args.per_device_eval_batch_size = batch;
  args.max_steps = 2;
  return args;
}

TEST(GpuSpecs, NamesMatchLooselyAndUnknownOnesListTheKnown) {
  EXPECT_EQ(find_gpu_spec("H100-80GB").name, "H100-80GB");
  EXPECT_EQ(find_gpu_spec("h100").name, "H100-80GB");
  EXPECT_EQ(find_gpu_spec("rtx_4090").name, "RTX4090");
  EXPECT_EQ(find_gpu_spec("A100").name, "A100-80GB");
  EXPECT_EQ(find_gpu_spec("a100-40gb").name, "A100-40GB");
  EXPECT_FALSE(find_gpu_spec("T4").has_bf16);
  // The context measured on an H200 plus the cuBLASLt workspace (Note [CUDA overhead per GPU
  // family]); every family's workspace is headroom's 32 MiB.
  EXPECT_EQ(find_gpu_spec("H200").family.overhead_bytes(), (544 + 32) * (int64_t{1} << 20));
  EXPECT_EQ(find_gpu_spec("A100").family.workspace_bytes, 32 * (int64_t{1} << 20));
  try {
    find_gpu_spec("GTX480");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("GTX480"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("RTX4090"), std::string::npos);
  }
}

TEST(PlanTarget, GpuOptionsMakeACudaTargetWithItsOverhead) {
  const PlanTarget memory = plan_target("auto", "", "24GiB");
  EXPECT_TRUE(memory.device.is_cuda());
  EXPECT_EQ(memory.capacity_bytes, 24 * kGiB);
  EXPECT_EQ(memory.overhead_bytes, default_gpu_family().overhead_bytes());

  const PlanTarget card = plan_target("auto", "RTX4090", "");
  EXPECT_EQ(card.capacity_bytes, find_gpu_spec("RTX4090").memory_bytes);
  EXPECT_EQ(card.overhead_bytes, find_gpu_spec("RTX4090").family.overhead_bytes());
  EXPECT_EQ(plan_target("cuda:1", "RTX4090", "20GiB").capacity_bytes, 20 * kGiB);
  EXPECT_EQ(plan_target("cuda:1", "RTX4090", "20GiB").device.index, 1);

  const PlanTarget cpu = plan_target("cpu", "", "");
  EXPECT_TRUE(cpu.device.is_cpu());
  EXPECT_EQ(cpu.overhead_bytes, 0);
  EXPECT_EQ(cpu.capacity_bytes, 0);
  EXPECT_THROW(plan_target("meta", "", ""), ValueError);
  EXPECT_THROW(plan_target("cpu", "H100", ""), ValueError);
  EXPECT_THROW(plan_target("auto", "", "lots"), ValueError);
}

// Note [Formula memory] by hand for a GPT-2 shaped config.
TEST(FormulaMemory, FollowsTheGuidesTermByTerm) {
  GPT2Config config;
  config.vocab_size = 1000;
  config.n_embd = 64;
  config.n_layer = 3;
  config.n_head = 4;
  const std::vector<Shape> shapes = {{1000, 64}, {64, 192}, {192}, {64}};
  const int64_t n = 1000 * 64 + 64 * 192 + 192 + 64;
  TrainingArguments args = preset_args("gpt2", 2, 32);

  FormulaMemory f =
      formula_training_memory(config, args, precision_recipe(Precision::fp32), shapes);
  EXPECT_EQ(f.parameters, 4 * n);
  EXPECT_EQ(f.gradients, 4 * n);
  EXPECT_EQ(f.optimizer_states, 8 * n);
  const double s = 32, b = 2, h = 64, a = 4;
  const double layer = s * b * h * (34 + 5 * a * s / h);
  EXPECT_EQ(f.activations, static_cast<int64_t>(3 * layer * 2 + 4 * s * b * 1000));

  f = formula_training_memory(config, args, precision_recipe(Precision::bf16), shapes);
  EXPECT_EQ(f.parameters, 6 * n);
  EXPECT_EQ(f.activations, static_cast<int64_t>(3 * layer + 4 * s * b * 1000));

  args.gradient_checkpointing = true;
  args.gradient_checkpointing_policy = "every_2";  // blocks 0 and 2 keep only their input
  f = formula_training_memory(config, args, precision_recipe(Precision::bf16), shapes);
  EXPECT_EQ(f.activations, static_cast<int64_t>(2 * (2 * s * b * h) + layer + 4 * s * b * 1000));
  args.gradient_checkpointing_policy = "selective";
  f = formula_training_memory(config, args, precision_recipe(Precision::bf16), shapes);
  EXPECT_EQ(f.activations, static_cast<int64_t>(3 * 34 * s * b * h + 4 * s * b * 1000));

  f = formula_training_memory(config, args, precision_recipe(Precision::pure_bf16), shapes);
  EXPECT_EQ(f.parameters, 2 * n);
  EXPECT_EQ(f.gradients, 2 * n);
  EXPECT_EQ(f.optimizer_states, 4 * n);  // bf16 m and v

  args.optim = "adamw_8bit";  // the [192] and [64] vectors keep fp32 states
  f = formula_training_memory(config, args, precision_recipe(Precision::bf16), shapes);
  const int64_t big = 1000 * 64 + 64 * 192;
  EXPECT_EQ(f.optimizer_states,
            2 * big + 8 * ((1000 * 64 / 256) + (64 * 192 / 256)) + 8 * (192 + 64));
  args.optim = "lion_8bit";  // one state: codes and an absmax per 256, fp32 for the vectors
  f = formula_training_memory(config, args, precision_recipe(Precision::pure_bf16), shapes);
  EXPECT_EQ(f.optimizer_states, big + 4 * ((1000 * 64 / 256) + (64 * 192 / 256)) + 4 * (192 + 64));
  args.optim = "adafactor";
  f = formula_training_memory(config, args, precision_recipe(Precision::fp32), shapes);
  EXPECT_EQ(f.optimizer_states, 4 * (1000 + 64) + 4 * (64 + 192) + 4 * 192 + 4 * 64);
  args.optim = "lomo";
  f = formula_training_memory(config, args, precision_recipe(Precision::bf16), shapes);
  EXPECT_EQ(f.gradients, 0);
  EXPECT_EQ(f.optimizer_states, 0);
  args.optim = "sgd";
  EXPECT_EQ(formula_training_memory(config, args, precision_recipe(Precision::fp32), shapes)
                .optimizer_states,
            0);
  args.optim_args = "momentum=0.9";
  EXPECT_EQ(formula_training_memory(config, args, precision_recipe(Precision::fp32), shapes)
                .optimizer_states,
            4 * n);
}

// PaLM appendix B: 6N + 12 L d T FLOPs per token for forward and backward.
TEST(StepCost, CountsPalmFlopsAndRecompute) {
  const HfConfig config = model_preset("gpt2");
  TrainingArguments args = preset_args("gpt2", 8, 1024);
  args.gradient_accumulation_steps = 2;
  const int64_t n = 124439808;
  const GpuSpec& h100 = find_gpu_spec("H100");
  const double tokens = 8.0 * 1024 * 2;
  const StepKernels none;
  StepCost cost = estimate_step_cost(config, args, n, none, h100);
  EXPECT_DOUBLE_EQ(cost.model_flops, (6.0 * n + 12.0 * 12 * 768 * 1024) * tokens);
  EXPECT_EQ(cost.recompute_flops, 0.0);

  args.gradient_checkpointing = true;  // full: one more forward
  cost = estimate_step_cost(config, args, n, none, h100);
  EXPECT_DOUBLE_EQ(cost.recompute_flops, cost.model_flops / 3.0);
  args.gradient_checkpointing_policy = "selective";  // the attention core only
  cost = estimate_step_cost(config, args, n, none, h100);
  EXPECT_DOUBLE_EQ(cost.recompute_flops, 4.0 * 12 * 768 * 1024 * tokens);

  // A frozen base (LoRA): the matmuls' backward is dX only, 4N instead of 6N per token.
  args.gradient_checkpointing = false;
  args.use_peft = true;
  cost = estimate_step_cost(config, args, n, none, h100);
  EXPECT_DOUBLE_EQ(cost.model_flops, (4.0 * n + 12.0 * 12 * 768 * 1024) * tokens);
}

// The largest preset: 69B parameters planned on the meta device without memory behind them.
TEST(TrainingPlan, Llama70bPlansWithoutItsWeights) {
  TrainingArguments args = preset_args("llama-70b", 1, 4096);
  args.bf16 = true;
  args.gradient_checkpointing = true;
  const TrainingPlan plan = plan_training(args, plan_target("auto", "H100", ""));
  EXPECT_EQ(plan.dry.num_parameters, 68976648192);
  const int64_t n = plan.dry.num_parameters;
  // fp32 master weights, fp32 gradients and AdamW's m and v, at least.
  EXPECT_GE(plan.dry.peak_allocated_bytes, 16 * n - n);
  EXPECT_EQ(plan.dry.formula.optimizer_states, 8 * n);
  EXPECT_FALSE(plan.fits());
  EXPECT_EQ(plan.required_bytes,
            plan.dry.required_bytes() + find_gpu_spec("H100").family.overhead_bytes());
  EXPECT_EQ(memory_allocated(kMeta), 0u);  // nothing left behind
  const nlohmann::ordered_json json = plan.to_json();
  for (const char* key : {"peak_allocated_bytes", "peak_reserved_bytes", "breakdown",
                          "required_bytes", "fits", "formula", "step_time_estimate"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_FALSE(plan.format().empty());
}

// Issue 17: every op and optimizer has one code path, so a dry run allocates the same bytes
// whichever device it stands in for, and `headroom plan` prints the same peaks for --device cpu
// and for a GPU target; only the named per-family constants (the cuBLASLt workspace, the CUDA
// context: PlanTarget's overhead) are added to a GPU's requirement. With the CPU's old fp32
// copies, a bf16 plan for the CPU peaked above the GPU's.
TEST(TrainingPlan, CpuAndGpuTargetsPlanTheSamePeaks) {
  const DryRunOptions options{.include_eval = false};
  for (const char* recipe : {"fp32", "bf16", "fp16", "pure_bf16"}) {
    SCOPED_TRACE(recipe);
    TrainingArguments args = preset_args("gpt2-tiny", 4, 128);
    args.precision = recipe;
    const TrainingPlan cpu = plan_training(args, plan_target("cpu", "", ""), options);
    const TrainingPlan gpu = plan_training(args, plan_target("auto", "", "1GiB"), options);
    EXPECT_EQ(gpu.dry.parameter_bytes, cpu.dry.parameter_bytes);
    EXPECT_EQ(gpu.dry.peak_allocated_bytes, cpu.dry.peak_allocated_bytes);
    EXPECT_EQ(gpu.dry.peak_reserved_bytes, cpu.dry.peak_reserved_bytes);
    EXPECT_EQ(gpu.dry.at_peak, cpu.dry.at_peak);
  }
}

// --world_size: each ZeRO rank is dry-run as itself and the plan is the heaviest's (Note
// [Planning data-parallel ranks]); DDP's ranks are alike, so rank 0 alone. The heaviest rank's
// peak falls from stage to stage. (tests/mpi checks each rank's plan against a real 2-rank run.)
TEST(TrainingPlan, DataParallelPlansEachZeroRankAndKeepsTheHeaviest) {
  TrainingArguments args = preset_args("gpt2-tiny", 4, 128);
  PlanTarget target = plan_target("cpu", "", "");
  target.world_size = 4;
  const DryRunOptions options{.include_eval = false};
  int64_t previous = 0, load_peak_below_3 = 0;
  for (const int64_t stage : {0, 1, 2, 3}) {
    SCOPED_TRACE(stage);
    args.zero_stage = stage;
    const TrainingPlan plan = plan_training(args, target, options);
    EXPECT_EQ(plan.dry.world_size, 4);
    EXPECT_EQ(plan.dry.zero_stage, stage);
    ASSERT_EQ(plan.ranks.size(), stage == 0 ? 1u : 4u);
    for (const RankPeaks& r : plan.ranks) {
      EXPECT_LE(std::pair(r.required, r.peak_allocated),
                std::pair(plan.required_bytes, plan.dry.peak_allocated_bytes))
          << "rank " << r.rank;
    }
    EXPECT_EQ(plan.ranks[static_cast<size_t>(plan.dry.rank)].peak_allocated,
              plan.dry.peak_allocated_bytes);
    if (stage > 0) {
      EXPECT_LT(plan.dry.peak_allocated_bytes, previous);
    }
    previous = plan.dry.peak_allocated_bytes;
    // ZeRO-3 loads each rank's share of the blocks only (LoadOptions::keep_parameter).
    if (stage == 3) {
      EXPECT_LT(plan.dry.load_peak_allocated_bytes, load_peak_below_3);
    }
    load_peak_below_3 = plan.dry.load_peak_allocated_bytes;
    EXPECT_EQ(plan.to_json()["ranks"].size(), plan.ranks.size());
  }
  EXPECT_NE(plan_training(args, target, options).format().find("data parallel over 4 ranks"),
            std::string::npos);
  args.zero_stage = 4;
  EXPECT_THROW(plan_training(args, target, options), ValueError);
}

// Llama-7B in bf16 autocast on 8 ranks: under ZeRO-3 the blocks run without autocast's cast
// cache, which would hold a bf16 copy of every weight (12.5 GiB) until the forward ends, so the
// activations at the peak stay a fraction of that, and the rank needs less than half of ZeRO-2's.
TEST(TrainingPlan, Zero3UnderAutocastKeepsNoCastOfTheWholeModel) {
  TrainingArguments args = preset_args("llama-7b", 1, 2048);
  args.bf16 = true;
  args.gradient_checkpointing = true;
  PlanTarget target = plan_target("auto", "", "80GiB");
  target.world_size = 8;
  const DryRunOptions options{.include_eval = false};
  args.zero_stage = 3;
  const TrainingPlan zero3 = plan_training(args, target, options);
  EXPECT_LT(zero3.dry.at_peak[static_cast<size_t>(MemoryCategory::activations)], 1LL << 30);
  EXPECT_LT(zero3.dry.load_peak_allocated_bytes, 8LL << 30);  // the fp32 model is 25.1 GiB
  args.zero_stage = 2;
  const TrainingPlan zero2 = plan_training(args, target, options);
  EXPECT_LT(zero3.required_bytes, zero2.required_bytes / 2);
}

// With several ranks a split that does not fit as DDP is tried with ZeRO-1, then ZeRO-2, and
// the table keeps the first stage that fits.
TEST(ConfigurationSearch, TriesZeroStagesInTurn) {
  const TrainingArguments base = preset_args("gpt2-tiny", 1, 128);  // one split
  PlanTarget target = plan_target("auto", "", "1GiB");
  target.world_size = 2;
  const SearchSpace space{{"fp32"}, {"adamw_torch"}, {"none"}, {"full"}, {"native"}};
  TrainingArguments args = base;
  args.precision = "fp32";
  std::vector<int64_t> required;
  for (const int64_t stage : {0, 1, 2}) {
    args.zero_stage = stage;
    required.push_back(plan_training(args, target).required_bytes);
  }
  // The smallest need; the first stage that meets it is the one the search must keep (ZeRO-1
  // and ZeRO-2 may reserve alike: the allocator rounds segments to 2 MiB).
  target.capacity_bytes = *std::min_element(required.begin(), required.end());
  ASSERT_LT(target.capacity_bytes, required[0]);
  const int64_t first_fitting =
      std::find_if(required.begin(), required.end(),
                   [&](int64_t r) { return r <= target.capacity_bytes; }) -
      required.begin();
  const SearchResult result = search_configurations(base, target, space);
  ASSERT_EQ(result.fitting.size(), 1u) << result.format(5);
  EXPECT_EQ(result.fitting[0].dry.zero_stage, first_fitting);
  EXPECT_LE(result.fitting[0].required_bytes, target.capacity_bytes);
  EXPECT_EQ(result.to_json(5)["configurations"][0]["zero_stage"], first_fitting);
  target.capacity_bytes = required[0];
  EXPECT_EQ(search_configurations(base, target, space).fitting.at(0).dry.zero_stage, 0);
}

// The guides' last row, 70B on 8 x 80 GB: below ZeRO-3 every rank holds the whole model's
// parameters (128 GiB even in pure bf16), so full fine-tuning fits only at stage 3, which shards
// them (and loads each rank's share only); QLoRA fits each rank at stage 0. Limited to stages
// 0-2, the search says that only ZeRO-3 could fit full fine-tuning (offload does not help: the
// parameters themselves fill the GPU).
TEST(ConfigurationSearch, Llama70bOnEightGpusFitsFullFineTuningWithZero3) {
  TrainingArguments base = preset_args("llama-70b", 1, 4096);
  base.bf16 = true;
  base.gradient_checkpointing = true;
  PlanTarget target = plan_target("auto", "", "80GiB");
  target.world_size = 8;
  SearchSpace space{
      {"bf16", "pure_bf16"}, {"adamw_torch", "adafactor"}, {"full"}, {"full", "qlora:16"}};
  const SearchResult result = search_configurations(base, target, space);
  std::printf("%s", result.format(10).c_str());
  bool full = false, qlora = false, offloaded = false;
  for (const TrainingPlan& p : result.fitting) {
    offloaded = offloaded || p.args.offload_optimizer;
    EXPECT_LE(p.required_bytes, target.capacity_bytes);
    if (p.args.load_in_4bit) {
      qlora = true;
      EXPECT_EQ(p.dry.zero_stage, 0) << describe_configuration(p.args);
    } else {
      full = true;
      EXPECT_EQ(p.dry.zero_stage, 3) << describe_configuration(p.args);
      EXPECT_LT(p.dry.load_peak_allocated_bytes, target.capacity_bytes);
    }
  }
  EXPECT_TRUE(full) << result.format(10);
  EXPECT_TRUE(qlora) << result.format(10);
  // bf16 autocast's fp32 master weights and AdamW fit only with each rank's share of the
  // optimizer offloaded (ZeRO-Offload).
  EXPECT_TRUE(offloaded) << result.format(10);
  EXPECT_TRUE(result.notes.empty());
  EXPECT_NE(result.format(5).find("  zero  "), std::string::npos);

  space.adapters = {"full"};
  space.zero_stages = {0, 1, 2};
  const SearchResult below_3 = search_configurations(base, target, space);
  EXPECT_TRUE(below_3.fitting.empty()) << below_3.format(5);
  ASSERT_EQ(below_3.notes.size(), 1u);
  EXPECT_NE(below_3.notes[0].find("full: nothing fits"), std::string::npos) << below_3.notes[0];
  EXPECT_NE(below_3.notes[0].find("only sharding them, ZeRO-3, could fit it"), std::string::npos)
      << below_3.notes[0];
  EXPECT_THROW(search_configurations(base, target, {{}, {}, {}, {}, {}, {4}}), ValueError);
}

// Every row fits, each row's next micro-batch did not (or is the whole batch), and the rows
// come best first.
TEST(ConfigurationSearch, KeepsTheFittingSplitsBestFirst) {
  TrainingArguments base = preset_args("gpt2-tiny", 4, 128);
  base.gradient_accumulation_steps = 2;
  PlanTarget target = plan_target("auto", "RTX4090", "");
  // Room for some configurations only: between the smallest and largest needs.
  const SearchSpace space{{"bf16", "fp32"}, {"adamw_torch", "lomo"}, {"none", "full"}, {"full"}};
  target.capacity_bytes = int64_t{1} << 40;
  const SearchResult everything = search_configurations(base, target, space);
  ASSERT_EQ(everything.fitting.size(), 8u);  // 2 x 2 x 2, all fit in a TiB
  int64_t least = INT64_MAX, most = 0;
  for (const TrainingPlan& p : everything.fitting) {
    least = std::min(least, p.required_bytes);
    most = std::max(most, p.required_bytes);
    // With room for all, each row's fastest split is the whole batch at once.
    EXPECT_EQ(p.args.per_device_train_batch_size, 8);
  }
  target.capacity_bytes = (least + most) / 2;
  const SearchResult some = search_configurations(base, target, space);
  ASSERT_FALSE(some.fitting.empty());
  EXPECT_GT(some.rejected, 0);
  for (size_t i = 0; i < some.fitting.size(); ++i) {
    const TrainingPlan& p = some.fitting[i];
    EXPECT_LE(p.required_bytes, target.capacity_bytes);
    EXPECT_EQ(p.args.per_device_train_batch_size * p.args.gradient_accumulation_steps, 8);
    if (p.args.optim == "lomo") {
      EXPECT_EQ(p.args.gradient_accumulation_steps, 1);
    }
    if (i > 0) {
      EXPECT_GE(p.cost->seconds(), some.fitting[i - 1].cost->seconds());
    }
    // The next split up does not fit (rows stop at the first miss).
    if (p.args.per_device_train_batch_size < 8 && p.args.optim != "lomo") {
      TrainingArguments larger = p.args;
      larger.per_device_train_batch_size *= 2;
      larger.gradient_accumulation_steps /= 2;
      EXPECT_FALSE(
          plan_training(larger, target, {.include_eval = false, .max_micro_batches = 2}).fits());
    }
  }
  EXPECT_FALSE(some.format(5).empty());
  EXPECT_EQ(some.to_json(100)["configurations"].size(), some.fitting.size());
  target.capacity_bytes = 0;
  EXPECT_THROW(search_configurations(base, target, space), ValueError);
}

// Note [Expandable segments] in the search: a configuration the native allocator's cache makes
// too large is dry-run again with expandable segments, and fits there; the plan of one
// configuration measures the fix when its slack is over 10% (Note [Slack report]).
TEST(ConfigurationSearch, TriesExpandableSegmentsWhereTheCacheDoesNotFit) {
  // GPT-2 124M: tensors of the large pool, whose fixed segments leave remainders.
  TrainingArguments base = preset_args("gpt2", 8, 256);
  PlanTarget target = plan_target("auto", "RTX4090", "");
  const DryRunOptions options{.steps = 2, .include_eval = false, .max_micro_batches = 2};
  TrainingPlan native = plan_training(base, target, options);
  TrainingArguments grown_args = base;
  grown_args.expandable_segments = true;
  const TrainingPlan grown = plan_training(grown_args, target, options);
  EXPECT_TRUE(grown.dry.expandable_segments);
  // Every block splits when 512 B remain (PyTorch's should_split with expandable segments), so
  // no large-pool block carries an unsplit remainder of up to 1 MiB.
  EXPECT_LE(grown.dry.peak_allocated_bytes, native.dry.peak_allocated_bytes);
  ASSERT_GT(native.required_bytes, grown.required_bytes);
  target.capacity_bytes = (native.required_bytes + grown.required_bytes) / 2;
  const SearchSpace space{{"fp32"}, {"adamw_torch"}, {"none"}, {"full"}};
  const SearchResult found = search_configurations(base, target, space);
  ASSERT_EQ(found.fitting.size(), 1u);
  EXPECT_TRUE(found.fitting[0].args.expandable_segments);
  EXPECT_EQ(found.fitting[0].args.per_device_train_batch_size, 8);
  EXPECT_NE(found.format(5).find("expandable"), std::string::npos) << found.format(5);
  EXPECT_TRUE(found.to_json(5)["configurations"][0]["expandable_segments"].get<bool>());
  SearchSpace native_only = space;
  native_only.allocators = {"native"};
  const SearchResult without = search_configurations(base, target, native_only);
  EXPECT_TRUE(without.fitting.empty() || without.fitting[0].args.per_device_train_batch_size < 8);
  native_only.allocators = {"cudaMallocAsync"};
  EXPECT_THROW(search_configurations(base, target, native_only), ValueError);

  // The single plan: over 10% slack names the fix and measures it.
  if (slack_exceeds_threshold(native.dry.peak_allocated_bytes, native.dry.peak_reserved_bytes)) {
    plan_with_expandable_segments(native, options);
    ASSERT_TRUE(native.with_expandable_segments);
    EXPECT_EQ(native.with_expandable_segments->reserved, grown.dry.peak_reserved_bytes);
    EXPECT_NE(native.format().find("fix: expandable segments"), std::string::npos)
        << native.format();
    EXPECT_NE(native.format().find("with expandable segments the dry run reserves"),
              std::string::npos);
  }
}

// LoRA rows: the frozen base needs no gradients or optimizer states, so at a capacity between the
// two only the adapter fits; the default space searches full fine-tuning and two LoRA set-ups,
// each also on a 4-bit base (QLoRA).
TEST(ConfigurationSearch, FindsLoraWhereFullFineTuningDoesNotFit) {
  const TrainingArguments base = preset_args("llama-tiny", 2, 64);
  PlanTarget target = plan_target("auto", "RTX4090", "");
  target.capacity_bytes = int64_t{1} << 40;
  const SearchSpace both{{"fp32"}, {"adamw_torch"}, {"none"}, {"full", "lora:8"}};
  const SearchResult all = search_configurations(base, target, both);
  ASSERT_EQ(all.fitting.size(), 2u);
  const TrainingPlan& full = all.fitting[0].args.use_peft ? all.fitting[1] : all.fitting[0];
  const TrainingPlan& lora = all.fitting[0].args.use_peft ? all.fitting[0] : all.fitting[1];
  EXPECT_EQ(lora.args.lora_r, 8);
  EXPECT_LT(lora.required_bytes, full.required_bytes);
  target.capacity_bytes = (lora.required_bytes + full.required_bytes) / 2;
  const SearchResult some = search_configurations(base, target, both);
  // LoRA as it is; the full fine-tune only with its optimizer offloaded, which is slower.
  ASSERT_EQ(some.fitting.size(), 2u) << some.format(5);
  EXPECT_TRUE(some.fitting[0].args.use_peft);
  EXPECT_FALSE(some.fitting[0].args.offload_optimizer);
  EXPECT_FALSE(some.fitting[1].args.use_peft);
  EXPECT_TRUE(some.fitting[1].args.offload_optimizer);
  EXPECT_NE(some.format(5).find("lora r8 default"), std::string::npos) << some.format(5);
  EXPECT_EQ(some.to_json(5)["configurations"][0]["adapter"], "lora r8 default");
  EXPECT_EQ(some.to_json(5)["configurations"][1]["offload"], "optimizer");

  target.capacity_bytes = int64_t{1} << 40;
  const SearchResult defaults =
      search_configurations(base, target, {{"fp32"}, {"adamw_torch"}, {"none"}});
  std::set<std::string> adapters;
  for (const TrainingPlan& p : defaults.fitting) {
    adapters.insert(p.args.use_peft ? str_cat(p.args.load_in_4bit ? "q" : "", p.args.lora_r, ":",
                                              p.args.lora_target_modules)
                                    : "full");
  }
  EXPECT_EQ(adapters,
            (std::set<std::string>{"full", "16:", "16:all-linear", "q16:", "q16:all-linear"}));
  EXPECT_THROW(search_configurations(base, target, {{}, {}, {}, {"lora:0"}}), ValueError);
}

// Issue 21: bitsandbytes' 8-bit states of bf16 weights are searched. Full fine-tuning of
// Llama-7B in pure_bf16 on a 40 GB A100 (2048 tokens, full checkpointing): AdamW's bf16 states
// (4 B/param) do not fit beside the weights and gradients, adamw_8bit's (2 B/param) and
// lion_8bit's (1 B/param) do, and both are among the default optimizers.
TEST(ConfigurationSearch, FindsEightBitStatesOfBf16WeightsForLlama7B) {
  const TrainingArguments base = preset_args("llama-7b", 1, 2048);
  const PlanTarget target = plan_target("auto", "A100-40GB", "");
  const SearchResult found =
      search_configurations(base, target, {{"pure_bf16"}, {}, {"full"}, {"full"}});
  EXPECT_TRUE(found.unsupported.empty()) << found.format(20);
  std::map<std::string, int64_t> allocated;  // optim -> peak allocated bytes
  for (const TrainingPlan& p : found.fitting) {
    allocated[p.args.optim] = p.dry.peak_allocated_bytes;
    // 8-bit states fit on the device; AdamW's 16-bit ones only offloaded to the host.
    if (p.args.optim.ends_with("_8bit")) {
      EXPECT_FALSE(p.args.offload_optimizer) << p.args.optim;
    }
    if (p.args.optim == "adamw_torch") {
      EXPECT_TRUE(p.args.offload_optimizer);
    }
  }
  ASSERT_TRUE(allocated.contains("adamw_8bit")) << found.format(20);
  ASSERT_TRUE(allocated.contains("lion_8bit")) << found.format(20);
  // lion_8bit keeps one byte per parameter less: 6.28 GiB for 6738M parameters.
  EXPECT_GT(allocated["adamw_8bit"] - allocated["lion_8bit"], int64_t{6} << 30);
  EXPECT_NE(found.format(20).find("adamw_8bit"), std::string::npos);
}

// A 4-bit base's weights are buffers, not parameters: the dry run still counts them (for the
// step's FLOPs) and their bytes, which are under a quarter of the bf16 weights'. A shape whose
// weights outweigh its activations (on llama-tiny the two peaks are within a few KiB, and which
// is lower depends on where backward's buffers fall).
TEST(TrainingPlan, QloraCountsTheFourBitWeights) {
  TrainingArguments args = preset_args("llama-3.2-1b", 1, 64);
  args.bf16 = true;
  args.use_peft = true;
  args.lora_target_modules = "all-linear";
  const DryRunResult lora = dry_run_training(args);
  args.load_in_4bit = true;
  args.bnb_4bit_quant_type = "nf4";
  const DryRunResult qlora = dry_run_training(args);
  EXPECT_EQ(qlora.num_parameters, lora.num_parameters);
  EXPECT_LT(qlora.parameter_bytes, lora.parameter_bytes);
  EXPECT_LT(qlora.peak_allocated_bytes, lora.peak_allocated_bytes);
}

// LoRA under bf16 autocast makes the frozen projections in bf16 as it loads them: the load never
// holds the model in fp32 (it did when the model was built whole and then cast).
TEST(TrainingPlan, LoraUnderAutocastLoadsTheFrozenProjectionsInBf16) {
  TrainingArguments args = preset_args("llama-tiny", 2, 64);
  args.bf16 = true;
  const DryRunResult full = dry_run_training(args);  // every parameter an fp32 master weight
  args.use_peft = true;
  const DryRunResult lora = dry_run_training(args);
  EXPECT_LT(lora.load_peak_allocated_bytes, full.parameter_bytes);
  EXPECT_LT(lora.parameter_bytes, full.parameter_bytes * 3 / 4);
}

// --fp8: the plan dry-runs the same configuration without FP8 beside it (bf16 when the run's own
// recipe is fp32). Under bf16 autocast FP8 keeps the projections' inputs in one byte instead of
// two, so its activations at the peak are smaller.
TEST(TrainingPlan, Fp8IsShownAgainstBf16) {
  TrainingArguments args = preset_args("gpt2-tiny", 8, 128);
  args.fp8 = true;
  args.fp8_recipe = "current";
  TrainingPlan fp32_master = plan_training(args, plan_target("cpu", "", ""));
  plan_against_without_fp8(fp32_master);
  ASSERT_TRUE(fp32_master.without_fp8.has_value());
  EXPECT_EQ(fp32_master.without_fp8_args.precision, "bf16");
  args.bf16 = true;
  TrainingPlan plan = plan_training(args, plan_target("cpu", "", ""));
  plan_against_without_fp8(plan);
  ASSERT_TRUE(plan.without_fp8.has_value());
  EXPECT_TRUE(plan.without_fp8_args.bf16);
  EXPECT_FALSE(plan.without_fp8_args.fp8);
  const auto activations = static_cast<size_t>(MemoryCategory::activations);
  EXPECT_LT(plan.dry.at_peak[activations], plan.without_fp8->at_peak[activations]);
  EXPECT_NE(plan.format().find("FP8 against gpt2-tiny, bf16"), std::string::npos) << plan.format();
  EXPECT_EQ(plan.to_json()["without_fp8"]["peak_allocated_bytes"].get<int64_t>(),
            plan.without_fp8->peak_allocated_bytes);
  args.fp8 = false;
  TrainingPlan plain = plan_training(args, plan_target("cpu", "", ""));
  plan_against_without_fp8(plain);
  EXPECT_FALSE(plain.without_fp8.has_value());
}

// Note [Inference memory]: weights in the recipe's dtype and HF's KV cache layout.
TEST(InferencePlan, WeightsKvCacheAndPrefill) {
  TrainingArguments args = preset_args("llama-tiny", 3, 200);
  args.bf16 = true;
  const InferencePlan plan = plan_inference(args, plan_target("auto", "", "1GiB"));
  const auto config = std::get<LlamaConfig>(model_preset("llama-tiny"));
  EXPECT_EQ(plan.dtype, "bf16");
  EXPECT_EQ(plan.batch, 3);
  EXPECT_EQ(plan.context, 200);
  EXPECT_EQ(plan.weight_bytes, 2 * plan.num_parameters);
  EXPECT_EQ(plan.kv_cache_bytes, 2 * config.num_hidden_layers *
                                     config.effective_num_key_value_heads() *
                                     config.effective_head_dim() * 200 * 3 * 2);
  EXPECT_GT(plan.prefill_bytes, 3 * 200 * config.vocab_size * 2);  // the bf16 logits at least
  EXPECT_EQ(plan.required_bytes,
            plan.prefill_peak_reserved_bytes + plan.kv_cache_bytes + plan.target.overhead_bytes);
  EXPECT_TRUE(plan.fits());
  EXPECT_EQ(plan.to_json()["kv_cache_bytes"].get<int64_t>(), plan.kv_cache_bytes);
  // A rotary model plans past its context (ModelPresets.SequencesPastTheContextOnlyForRotary...);
  // no length is below one token.
  args.max_seq_length = 0;
  EXPECT_THROW(plan_inference(args, plan_target("cpu", "", "")), ValueError);
}

// The row: a full fine-tune of Llama-7B with AdamW at 2048 tokens fits a 24 GiB card only
// with the optimizer offloaded (pure bf16: 2 B/param of weights on the device, the rest on the
// host); the plan says how much host RAM that takes, and charges the host traffic.
TEST(ConfigurationSearch, OffloadsTheOptimizerWhereNothingElseFits) {
  TrainingArguments base;
  base.model = "llama-7b";
  base.max_seq_length = 2048;
  base.per_device_train_batch_size = 1;
  base.gradient_checkpointing = true;
  base.optim = "adamw_torch";
  const PlanTarget target = plan_target("auto", "", "24GiB");
  const SearchResult found =
      search_configurations(base, target, {{"pure_bf16"}, {"adamw_torch"}, {"full"}, {"full"}});
  ASSERT_EQ(found.fitting.size(), 1u) << found.format(5);
  const TrainingPlan& plan = found.fitting[0];
  EXPECT_TRUE(plan.args.offload_optimizer);
  EXPECT_FALSE(plan.args.offload_activations);  // the optimizer alone suffices
  EXPECT_LE(plan.required_bytes, target.capacity_bytes);
  // The host holds a copy of the bf16 weights, their gradients and AdamW's two bf16 moments.
  const int64_t weights = plan.dry.parameter_bytes;
  EXPECT_GE(plan.dry.host_peak_allocated_bytes, 4 * weights);
  EXPECT_LT(plan.dry.host_peak_allocated_bytes, 4 * weights + weights / 10);
  ASSERT_TRUE(plan.cost.has_value());
  EXPECT_GT(plan.cost->host_transfer_seconds, 0.0);
  EXPECT_GT(plan.cost->host_optimizer_seconds, 0.0);
  EXPECT_NE(found.format(5).find("optimizer ("), std::string::npos) << found.format(5);
  EXPECT_NE(plan.format().find("host RAM required"), std::string::npos) << plan.format();
}

}  // namespace
}  // namespace headroom
