// `headroom eval`: the loss and perplexity of a model on a text file, in consecutive windows of
// max_seq_length + 1 tokens, or on rows of SFT data over their scored tokens (train/evaluation.h
// evaluate_file), printed as one line or one JSON object.
#pragma once

#include "apps/adapter_base_options.h"

#include <cstdint>
#include <string>

#include "train/trainer.h"

namespace CLI {
class App;
}

namespace headroom {

struct EvalOptions {
  std::string model;
  std::string data;
  std::string max_seq_length;  // text, converted by option_value for one error style; empty:
                               // the model's context length
  std::string per_device_eval_batch_size = "8";
  std::string device = "auto";
  std::string adapter;      // a PEFT LoRA adapter directory applied to the model; empty: none
  AdapterBaseOptions base;  // the base under the adapter (Note [The base of an adapter])
  bool json = false;
  // Rows (JSONL / JSON) as `headroom train` prepares them, with TRL's option names.
  std::string dataset_text_field = "text";
  std::string chat_template_path;
  std::string completion_only_loss;  // "": on for prompt / completion rows; else a boolean
  bool assistant_only_loss = false;
  std::string eos_token;
};

CLI::App* add_eval_command(CLI::App& app, EvalOptions& options);
// ValueError naming the option for a missing data file, a non-positive length or batch, or an
// unknown device; then evaluate_file and the report on stdout.
int run_eval(const EvalOptions& options);

// "loss: 3.2145  perplexity: 24.89  tokens: 1024" (4 and 2 decimals), or with json
// {"loss": 3.2145..., "perplexity": 24.89..., "tokens": 1024} (full precision; an infinite
// perplexity is null, as JSON has no infinity).
std::string format_eval_result(const EvalResult& result, bool json);

}  // namespace headroom
