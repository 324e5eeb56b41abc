// Note [Inference memory]: weights and prefill by dry run, the KV cache by its layout.
#include "plan/inference_plan.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/grad_mode.h"
#include "train/progress.h"
#include "memory/device_memory.h"
#include "nn/model_presets.h"
#include "train/model_source.h"
#include "train/trainer.h"

namespace headroom {

namespace {

DType inference_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return DType::f32;
    case Precision::fp16:
      return DType::f16;
    case Precision::bf16:
    case Precision::pure_bf16:
      return DType::bf16;
  }
  return DType::f32;
}

// Bytes of K and V per token of one sequence, over all layers.
int64_t kv_bytes_per_token(const HfConfig& config, DType dtype) {
  const ModelDims d = model_dims(config);
  return 2 * d.layers * d.kv_heads * d.head_dim * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

InferencePlan plan_inference(const TrainingArguments& args, const PlanTarget& target) {
  const auto start = std::chrono::steady_clock::now();
  InferencePlan plan;
  plan.target = target;
  plan.model = args.model;
  const DType dtype = inference_dtype(training_precision(args).precision);
  plan.dtype = dtype_name(dtype);
  plan.batch = args.per_device_eval_batch_size;
  if (plan.batch < 1) {
    throw ValueError(str_cat("per_device_eval_batch_size: ", plan.batch, " is below 1"));
  }
  CachingAllocator& meta = caching_allocator(kMeta);
  meta.empty_cache();
  meta.set_memory_limit(0);
  meta.reset_peak_stats();
  {
    ModelAndTokenizer loaded =
        load_model_and_tokenizer(args.model, kMeta, static_cast<uint64_t>(args.seed));
    CausalLM& model = *loaded.model;
    const int64_t context = context_length(model.config());
    plan.context = args.max_seq_length.value_or(context);
    check_max_seq_length(model.config(), plan.context);
    model.to(dtype);
    model.eval();
    // headroom builds the model in fp32 and converts it; a server loads straight in the dtype
    // (HF's torch_dtype), so the build's cached fp32 segments are not part of serving.
    plan.load_peak_reserved_bytes = static_cast<int64_t>(max_memory_reserved(kMeta));
    meta.empty_cache();
    plan.num_parameters = model.num_parameters();
    for (const Tensor& p : model.parameters())
      plan.weight_bytes += static_cast<int64_t>(p.nbytes());
    const int64_t resident = static_cast<int64_t>(memory_allocated(kMeta));
    meta.reset_peak_stats();
    {
      NoGradGuard no_grad;
      const Tensor prompt = Tensor::empty({plan.batch, plan.context}, DType::i64, kMeta);
      const Tensor logits = model.forward(prompt);
    }
    plan.prefill_bytes = static_cast<int64_t>(max_memory_allocated(kMeta)) - resident;
    plan.prefill_peak_reserved_bytes = static_cast<int64_t>(max_memory_reserved(kMeta));
    plan.kv_cache_bytes = kv_bytes_per_token(model.config(), dtype) * plan.context * plan.batch;
  }
  meta.empty_cache();
  plan.required_bytes =
      plan.prefill_peak_reserved_bytes + plan.kv_cache_bytes + target.overhead_bytes;
  plan.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

nlohmann::ordered_json InferencePlan::to_json() const {
  return {
      {"mode", "inference"},
      {"target", target.description()},
      {"model", model},
      {"dtype", dtype},
      {"batch", batch},
      {"context", context},
      {"num_parameters", num_parameters},
      {"weight_bytes", weight_bytes},
      {"kv_cache_bytes", kv_cache_bytes},
      {"prefill_bytes", prefill_bytes},
      {"prefill_peak_reserved_bytes", prefill_peak_reserved_bytes},
      {"load_peak_reserved_bytes", load_peak_reserved_bytes},
      {"cuda_overhead_bytes", target.overhead_bytes},
      {"required_bytes", required_bytes},
      {"capacity_bytes", target.capacity_bytes > 0 ? nlohmann::ordered_json(target.capacity_bytes)
                                                   : nlohmann::ordered_json()},
      {"fits",
       target.capacity_bytes > 0 ? nlohmann::ordered_json(fits()) : nlohmann::ordered_json()},
      {"dry_run_seconds", seconds}};
}

std::string InferencePlan::format() const {
  std::string text;
  char line[256];
  auto add = [&](const char* name, int64_t bytes, const std::string& note) {
    std::snprintf(line, sizeof line, "  %-26s %14s   %s\n", name, format_bytes(bytes).c_str(),
                  note.c_str());
    text += line;
  };
  text += str_cat("inference plan: ", model, " in ", dtype, ", batch ", batch, " x context ",
                  context, " tokens, on ", target.description(), "\n");
  std::snprintf(line, sizeof line,
                "  %.2fM parameters; dry run of the prefill in %.2f s (Note [Inference memory])\n",
                static_cast<double>(num_parameters) / 1e6, seconds);
  text += line;
  add("weights", weight_bytes, "");
  add("KV cache", kv_cache_bytes, "2 x layers x kv_heads x head_dim x tokens x batch x bytes");
  add("prefill activations", prefill_bytes, "peak allocated above the weights");
  add("prefill peak reserved", prefill_peak_reserved_bytes, "weights + prefill + allocator slack");
  if (target.overhead_bytes > 0) {
    add("CUDA context+workspaces", target.overhead_bytes, target.overhead_source);
  }
  add("required", required_bytes, "");
  add("(model build peak)", load_peak_reserved_bytes,
      "built in fp32 and converted; not counted (load in the dtype to avoid it)");
  if (target.capacity_bytes > 0) {
    const int64_t spare = target.capacity_bytes - required_bytes;
    std::snprintf(line, sizeof line, "  %s in %s: %s %s\n", fits() ? "fits" : "does NOT fit",
                  format_bytes(target.capacity_bytes).c_str(),
                  format_bytes(spare < 0 ? -spare : spare).c_str(),
                  spare < 0 ? "short" : "to spare");
    text += line;
  }
  return text;
}

}  // namespace headroom
