// `headroom eval` on CLI11, with the same option spellings and value checks as `headroom train`.
#include "apps/eval_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/option_value.h"
#include "core/device.h"
#include "core/error.h"

namespace headroom {

CLI::App* add_eval_command(CLI::App& app, EvalOptions& o) {
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Loss and perplexity of a model on a text file (consecutive windows, no shuffling) or on "
      "rows of SFT data (their scored tokens)");
  auto last = CLI::MultiOptionPolicy::TakeLast;
  eval->add_option("--model", o.model,
                   "a preset or a model directory (config.json + weights); with --adapter, "
                   "default: the base its adapter_base.json records")
      ->multi_option_policy(last);
  eval->add_option("--data", o.data,
                   "a text file, a directory of them, or JSONL / JSON rows in TRL's formats")
      ->required()
      ->multi_option_policy(last);
  eval->add_option("--max_seq_length,--max-seq-length,--max_length,--max-length", o.max_seq_length,
                   "tokens per window (each window scores this many predictions), or the rows' "
                   "truncation length (default: the model's context length)")
      ->type_name("INT")
      ->multi_option_policy(last);
  eval->add_option("--per_device_eval_batch_size,--per-device-eval-batch-size",
                   o.per_device_eval_batch_size, "windows per batch")
      ->type_name("INT")
      ->capture_default_str()
      ->multi_option_policy(last);
  eval->add_option("--device", o.device,
                   "auto (cuda when present and its ops have CUDA kernels, else cpu), cpu, cuda, "
                   "cuda:N or meta")
      ->capture_default_str()
      ->multi_option_policy(last);
  eval->add_option("--adapter", o.adapter,
                   "a LoRA adapter directory (adapter_config.json + adapter_model.safetensors, as "
                   "PEFT saves it) applied to the model")
      ->multi_option_policy(last);
  add_adapter_base_options(*eval, o.base);
  eval->add_flag("--json", o.json, "print one JSON object instead of the line");
  eval->add_option("--dataset_text_field,--dataset-text-field", o.dataset_text_field,
                   "the field of language modeling rows")
      ->capture_default_str()
      ->multi_option_policy(last);
  eval->add_option("--chat_template_path,--chat-template-path,--chat_template,--chat-template",
                   o.chat_template_path,
                   "a Jinja file (or a model directory) whose chat template renders the "
                   "conversations, instead of the model's")
      ->multi_option_policy(last);
  eval->add_option("--completion_only_loss,--completion-only-loss", o.completion_only_loss,
                   "score only the completion of prompt / completion rows (default: true for them)")
      ->type_name("BOOL")
      ->multi_option_policy(last);
  eval->add_flag("--assistant_only_loss,--assistant-only-loss", o.assistant_only_loss,
                 "score only the assistant's tokens ({% generation %} in the chat template)");
  eval->add_option("--eos_token,--eos-token", o.eos_token,
                   "the text appended to rows that are not conversations (default: the "
                   "tokenizer's eos_token)")
      ->multi_option_policy(last);
  return eval;
}

std::string format_eval_result(const EvalResult& r, bool json) {
  if (json) {
    nlohmann::json out = nlohmann::json::object();
    out["loss"] = r.loss;
    out["perplexity"] = r.perplexity;
    out["tokens"] = r.tokens;
    return out.dump();
  }
  char line[128];
  std::snprintf(line, sizeof line, "loss: %.4f  perplexity: %.2f  tokens: %lld", r.loss,
                r.perplexity, static_cast<long long>(r.tokens));
  return line;
}

int run_eval(const EvalOptions& o) {
  // 0: the model's context length (evaluate_file).
  const int64_t length =
      o.max_seq_length.empty() ? 0 : parse_integer_value(o.max_seq_length, "--max_seq_length");
  if (!o.max_seq_length.empty() && length <= 0) {
    throw ValueError(str_cat("--max_seq_length: ", length, " is not positive"));
  }
  const int64_t batch =
      parse_integer_value(o.per_device_eval_batch_size, "--per_device_eval_batch_size");
  if (batch <= 0) {
    throw ValueError(str_cat("--per_device_eval_batch_size: ", batch, " is not positive"));
  }
  std::error_code ec;
  if (!std::filesystem::exists(o.data, ec)) {
    throw ValueError(str_cat("--data: '", o.data, "' does not exist"));
  }
  if (o.device != "auto") {
    try {
      Device::parse(o.device);
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--device: ", e.what()));
    }
  }
  if (!o.adapter.empty() && !std::filesystem::is_directory(o.adapter, ec)) {
    throw ValueError(str_cat("--adapter: '", o.adapter, "' is not a directory"));
  }
  SftRowOptions rows;
  rows.dataset_text_field = o.dataset_text_field;
  rows.chat_template_path = o.chat_template_path;
  if (!o.completion_only_loss.empty()) {
    rows.completion_only_loss = parse_bool_value(o.completion_only_loss, "--completion_only_loss");
  }
  rows.assistant_only_loss = o.assistant_only_loss;
  rows.eos_token = o.eos_token;
  if (!o.chat_template_path.empty() && !std::filesystem::exists(o.chat_template_path, ec)) {
    throw ValueError(str_cat("--chat_template_path: '", o.chat_template_path, "' does not exist"));
  }
  const EvalResult result = evaluate_file(adapter_base_request(o.model, o.base), o.data, length,
                                          batch, o.device, o.adapter, rows);
  std::printf("%s\n", format_eval_result(result, o.json).c_str());
  return 0;
}

}  // namespace headroom
