// `headroom merge` on CLI11: load, merge the adapter into the weights, cast, save.
#include "apps/merge_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "nn/linear_4bit.h"
#include "peft/lora_model.h"
#include "train/adapter_base.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

// Note [Merge output]
// The merged model is written through a temporary directory renamed to --output_dir at the end
// (write_directory_atomically), and never where it is made from: an output that is the base or
// the adapter, contains one or lies inside one would replace or mix with the files being read
// (a second merge into the base would then apply the adapter twice). Paths are compared once
// resolved: absolute, symbolic links followed, "." and ".." and trailing slashes gone.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) p = fs::absolute(path);
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

// Whether `inner` is `outer` or lies inside it (both resolved).
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

void check_merge_output(const std::string& output_dir, const std::string& model,
                        const std::string& adapter) {
  const fs::path out = resolved(output_dir);
  std::error_code ec;
  const std::pair<const char*, const std::string*> inputs[] = {{"--model", &model},
                                                               {"--adapter", &adapter}};
  for (const auto& [option, value] : inputs) {
    if (!fs::is_directory(*value, ec)) continue;  // a preset: nothing on disk
    const fs::path in = resolved(*value);
    const char* relation = out == in         ? "is"
                           : within(out, in) ? "lies inside"
                           : within(in, out) ? "contains"
                                             : nullptr;
    if (!relation) continue;
    throw ValueError(str_cat("--output_dir: '", output_dir, "' ", relation, " ", option, " '",
                             *value, "' (resolved: ", out.string(), " and ", in.string(),
                             "); the merged model must go to a directory of its own"));
  }
}

}  // namespace

CLI::App* add_merge_command(CLI::App& app, MergeOptions& o) {
  CLI::App* merge = app.add_subcommand(
      "merge", "Merge a LoRA adapter into its base model and save a plain HF model directory");
  auto last = CLI::MultiOptionPolicy::TakeLast;
  merge
      ->add_option("--model", o.model,
                   "the base: a preset or a model directory (default: the one the adapter's "
                   "adapter_base.json records)")
      ->multi_option_policy(last);
  merge
      ->add_option("--adapter", o.adapter,
                   "the adapter directory (adapter_config.json + adapter_model.safetensors)")
      ->required()
      ->multi_option_policy(last);
  merge->add_option("--output_dir,--output-dir", o.output_dir, "where the merged model goes")
      ->required()
      ->multi_option_policy(last);
  merge
      ->add_option("--dtype", o.dtype,
                   "dtype of the saved weights: fp32, bf16 or fp16 (default: the base's)")
      ->multi_option_policy(last);
  add_adapter_base_options(*merge, o.base);
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
  const AdapterBase base = resolve_adapter_base(adapter_base_request(o.model, o.base), o.adapter);
  check_merge_output(o.output_dir, base.model, o.adapter);
  ModelAndTokenizer loaded = load_adapter_base(base, kCPU);
  CausalLM& model = *loaded.model;
  // Made as training made it, merged in fp32 (the conversion is exact; the adapters load as
  // fp32 then, as training keeps them under autocast); a 4-bit base is dequantized to fp32.
  model.to(DType::f32);
  dequantize_linears(model, DType::f32);
  load_lora_adapter(model, o.adapter, DType::f32);
  const int64_t merged = merge_lora(model);
  HfConfig config = model.config();
  if (dtype) {
    model.to(*dtype);
    std::visit([&](auto& c) { c.torch_dtype = *dtype; }, config);
  }
  // Note [Merge output]
  write_directory_atomically(o.output_dir, [&](const std::string& dir) {
    write_hf_config((fs::path(dir) / "config.json").string(), config);
    save_safetensors_checkpoint(dir, model.named_parameters(), kDefaultMaxShardBytes,
                                {{"format", "pt"}});
    save_tokenizer(*loaded.tokenizer, dir);
  });
  std::printf("merged %lld LoRA layers of %s into %s\n", static_cast<long long>(merged),
              o.adapter.c_str(), o.output_dir.c_str());
  return 0;
}

}  // namespace headroom
