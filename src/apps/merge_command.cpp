// `headroom merge` on CLI11: load, merge the adapter into the weights, cast, save.
#include "apps/merge_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "peft/lora_model.h"
#include "train/model_source.h"

namespace headroom {

CLI::App* add_merge_command(CLI::App& app, MergeOptions& o) {
  CLI::App* merge = app.add_subcommand(
      "merge", "Merge a LoRA adapter into its base model and save a plain HF model directory");
  auto last = CLI::MultiOptionPolicy::TakeLast;
  merge->add_option("--model", o.model, "the base: a preset or a model directory")
      ->required()
      ->multi_option_policy(last);
  merge->add_option("--adapter", o.adapter,
                    "the adapter directory (adapter_config.json + adapter_model.safetensors)")
      ->required()
      ->multi_option_policy(last);
  merge->add_option("--output_dir,--output-dir", o.output_dir, "where the merged model goes")
      ->required()
      ->multi_option_policy(last);
  merge->add_option("--dtype", o.dtype,
                    "dtype of the saved weights: fp32, bf16 or fp16 (default: the base's)")
      ->multi_option_policy(last);
  return merge;
}

int run_merge(const MergeOptions& o) {
  std::optional<DType> dtype;
  if (!o.dtype.empty()) {
    try {
      dtype = dtype_from_name(o.dtype);
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--dtype: ", e.what()));
    }
    if (*dtype != DType::f32 && *dtype != DType::bf16 && *dtype != DType::f16) {
      throw ValueError(str_cat("--dtype: '", o.dtype, "' (expected fp32, bf16 or fp16)"));
    }
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(o.adapter, ec)) {
    throw ValueError(str_cat("--adapter: '", o.adapter, "' is not a directory"));
  }
  ModelAndTokenizer loaded = load_model_and_tokenizer(o.model, kCPU, 0);
  CausalLM& model = *loaded.model;
  load_lora_adapter(model, o.adapter);
  const int64_t merged = merge_lora(model);
  HfConfig config = model.config();
  if (dtype) {
    model.to(*dtype);
    std::visit([&](auto& c) { c.torch_dtype = *dtype; }, config);
  }
  std::filesystem::create_directories(o.output_dir);
  write_hf_config((std::filesystem::path(o.output_dir) / "config.json").string(), config);
  save_safetensors_checkpoint(o.output_dir, model.named_parameters(), kDefaultMaxShardBytes,
                              {{"format", "pt"}});
  save_tokenizer(*loaded.tokenizer, o.output_dir);
  std::printf("merged %lld LoRA layers of %s into %s\n", static_cast<long long>(merged),
              o.adapter.c_str(), o.output_dir.c_str());
  return 0;
}

}  // namespace headroom
