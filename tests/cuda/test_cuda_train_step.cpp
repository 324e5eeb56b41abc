// The whole training step on cuda:0 against the CPU: a small GPT-2 and a small Llama, the same
// seed and batches, a few AdamW steps in fp32 and in bf16 autocast; the losses and parameters
// agree within stated tolerances, and the GPU's peak allocated bytes equal the planner's dry run
// of the same configuration (plan/dry_run.h, in the CUDA pattern). Skipped without a GPU.
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "cuda/cuda_test_support.h"
#include "memory/device_memory.h"
#include "ops/ops.h"
#include "plan/dry_run.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 3;

struct StepCase {
  std::string name;
  std::string model;      // "gpt2" or "llama"
  std::string precision;  // "fp32" or "bf16" (autocast, fp32 master weights)
  // Note [Train step tolerances]
  // Losses: relative difference per step. fp32: the devices' fp32 sums differ by a few ulps per
  // op, and three steps compound them through the updates. bf16: autocast's GEMMs round their
  // outputs to bf16, so a one-ulp difference (2^-8 relative) in some logits moves the loss by
  // about that much. Parameters: ||update_gpu - update_cpu|| / ||update_cpu|| over all
  // parameters, each device's update measured from its own initial weights (which agree to
  // 1e-6). A norm and not per element, because AdamW's first steps are near lr * sign(g): an
  // element whose gradient is within rounding of zero may step either way on either device,
  // which a norm weighs by its true (small) share.
  double loss_rtol;
  double update_rtol;
  // Further options: memory savers whose host pool is page-locked memory apart from the device
  // on a GPU, where on the CPU it is the compute device's own kind of memory.
  std::function<void(TrainingArguments&)> configure = nullptr;
  // FP8 runs compare only with their plan: Hopper's FP8 tensor cores accumulate in fewer bits
  // than the CPU's fp32 emulation, by more than these tolerances allow.
  bool against_cpu = true;
};

std::vector<StepCase> step_cases() {
  auto offload_params = [](TrainingArguments& a) { a.offload_params = true; };
  return {{"gpt2_fp32", "gpt2", "fp32", 1e-4, 1e-3},
          {"gpt2_bf16", "gpt2", "bf16", 1e-2, 5e-2},
          {"llama_fp32", "llama", "fp32", 1e-4, 1e-3},
          {"llama_bf16", "llama", "bf16", 1e-2, 5e-2},
          // Blocks loaded into the host pool and brought in one at a time.
          {"llama_bf16_offload_params", "llama", "bf16", 1e-2, 5e-2, offload_params},
          // The 4-bit base's blocks in the host pool too, LoRA adapters on every projection.
          {"llama_qlora_offload_params", "llama", "bf16", 1e-2, 5e-2,
           [](TrainingArguments& a) {
             a.offload_params = a.use_peft = a.load_in_4bit = true;
             a.lora_dropout = 0.0;
             a.lora_target_modules = "all-linear";
           }},
          // FP8 states made on the device while the blocks wait in the host pool.
          {"llama_fp8_offload_params", "llama", "bf16", 0.0, 0.0,
           [](TrainingArguments& a) {
             a.offload_params = true;
             a.fp8 = true;
           },
           false}};
}

// A model directory and the tiny text under `root`; GPT-2 with dropout (the GPU draws the CPU's
// Philox stream), Llama with GQA (4 query heads, 2 key / value heads) and rotary embeddings.
// Widths over 256 so that the kernels run more than one block per row.
TrainingArguments step_arguments(const StepCase& c, const fs::path& root) {
  TrainingArguments args = test_data::tiny_training_args(root);
  if (c.model == "gpt2") {
    GPT2Config config = test_data::tiny_text_gpt2();
    config.n_positions = 64;
    config.n_embd = 320;
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.1;
    config.bos_token_id = std::nullopt;
    config.eos_token_id = {};
    write_hf_config((root / "model").string(), config);
  } else {
    LlamaConfig config;
    config.vocab_size = 256;
    config.hidden_size = 320;
    config.intermediate_size = 864;
    config.num_hidden_layers = 2;
    config.num_attention_heads = 4;
    config.num_key_value_heads = 2;
    config.max_position_embeddings = 64;
    config.bos_token_id = std::nullopt;
    config.eos_token_id = {};
    write_hf_config((root / "model").string(), config);
  }
  std::string text;
  for (int i = 0; i < 40; ++i) text += test_data::kTinyText;
  std::ofstream((root / "data.txt").string()) << text;
  args.max_seq_length = 64;
  args.per_device_train_batch_size = 4;
  args.max_steps = kSteps;
  args.warmup_steps = 1;
  args.precision = c.precision;
  args.optim = "adamw_torch";
  args.save_strategy = "no";
  args.eval_strategy = "no";
  if (c.configure) c.configure(args);
  return args;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<Tensor> initial;  // on the CPU, f32
  std::vector<Tensor> final;
  int64_t peak_allocated = 0;  // from after the Trainer's construction, as the dry run counts
};

std::vector<Tensor> parameters_on_cpu(Trainer& trainer) {
  std::vector<Tensor> out;
  // clone(): on the CPU, to(kCPU) and to(f32) of an f32 parameter return the parameter itself,
  // which the optimizer then steps in place.
  for (const Tensor& p : trainer.model().parameters()) {
    out.push_back(p.to(kCPU).to(DType::f32).clone());
  }
  return out;
}

RunResult run_steps(TrainingArguments args, Device device) {
  args.device = device.str();
  RunResult result;
  const int64_t resident = static_cast<int64_t>(memory_allocated(device));
  Trainer trainer(args);
  result.initial = parameters_on_cpu(trainer);
  reset_peak_memory_stats(device);
  for (int i = 0; i < kSteps; ++i) result.losses.push_back(trainer.step().loss);
  synchronize_gpu();
  // Process-lifetime memory made before the Trainer (the GEMM workspace) is not the plan's.
  result.peak_allocated = static_cast<int64_t>(max_memory_allocated(device)) - resident;
  result.final = parameters_on_cpu(trainer);
  return result;
}

// A linear forward and backward in f32 and bf16 on the GPU, so that what its GEMMs keep for the
// process (cuBLASLt's workspace, as PyTorch keeps cuBLAS's) exists before the run is measured;
// the plan counts it in the CUDA overhead (Note [CUDA overhead per GPU family]).
void warm_up_gemms() {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Generator gen(1);
    Tensor x = Tensor::randn({8, 64}, DType::f32, kCPU, &gen).to(dtype).to(kGpu);
    Tensor w = Tensor::randn({32, 64}, DType::f32, kCPU, &gen).to(dtype).to(kGpu);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    backward(sum(linear(x, w)));
  }
  synchronize_gpu();
}

class CudaTrainStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(CudaTrainStep, MatchesTheCpuAndThePlan) {
  REQUIRE_GPU();
  const StepCase& c = GetParam();
  test_data::TempDir tmp("cuda_train_step_" + c.name);
  TrainingArguments args = step_arguments(c, tmp.path());
  warm_up_gemms();

  TrainingArguments planned = args;
  planned.device = kGpu.str();
  const DryRunResult plan = dry_run_training(planned, {.steps = kSteps, .include_eval = false});

  const RunResult gpu = run_steps(args, kGpu);
  const RunResult cpu = c.against_cpu ? run_steps(args, kCPU) : RunResult{};

  EXPECT_EQ(gpu.peak_allocated, plan.peak_allocated_bytes)
      << c.name << ": the GPU's peak allocated bytes against the dry run planned for it";

  for (double loss : gpu.losses) EXPECT_TRUE(std::isfinite(loss)) << c.name;
  if (!c.against_cpu) return;
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(gpu.losses[i])) << c.name << ": step " << i;
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], c.loss_rtol * std::abs(cpu.losses[i]))
        << c.name << ": loss of step " << i;
  }

  ASSERT_EQ(gpu.final.size(), cpu.final.size());
  double diff2 = 0.0, update2 = 0.0;
  for (size_t k = 0; k < cpu.final.size(); ++k) {
    // The same Philox draws; mean + std * z may round once more or less (a fused multiply-add).
    expect_close(gpu.initial[k], cpu.initial[k], {1e-6, 0.0},
                 c.name + ": initial parameter " + std::to_string(k));
    const std::vector<float> c0 = cpu.initial[k].to_float_vector();
    const std::vector<float> g0 = gpu.initial[k].to_float_vector();
    const std::vector<float> pc = cpu.final[k].to_float_vector();
    const std::vector<float> pg = gpu.final[k].to_float_vector();
    for (size_t i = 0; i < pc.size(); ++i) {
      const double dc = static_cast<double>(pc[i]) - c0[i];
      const double dg = static_cast<double>(pg[i]) - g0[i];
      diff2 += (dg - dc) * (dg - dc);
      update2 += dc * dc;
    }
  }
  ASSERT_GT(update2, 0.0) << c.name << ": the CPU's steps changed no parameter";
  EXPECT_LE(std::sqrt(diff2 / update2), c.update_rtol)
      << c.name << ": the parameter updates differ between the GPU and the CPU";
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTrainStep, ::testing::ValuesIn(step_cases()),
                         [](const ::testing::TestParamInfo<StepCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace headroom::testing
