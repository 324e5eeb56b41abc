// `headroom merge`: a base model and a LoRA adapter written out as one plain HF model directory
// (PEFT's merge_and_unload followed by save_pretrained).
#pragma once

#include "apps/adapter_base_options.h"

#include <string>

namespace CLI {
class App;
}

namespace headroom {

struct MergeOptions {
  std::string model;
  std::string adapter;
  std::string output_dir;
  AdapterBaseOptions base;  // the base under the adapter (Note [The base of an adapter])
  std::string dtype;        // f32 / fp32, bf16, f16 / fp16; empty: the base's parameter dtype
};

CLI::App* add_merge_command(CLI::App& app, MergeOptions& options);
// Loads the model and the adapter, merges, casts to --dtype and writes config.json, the weights
// and the tokenizer's files into output_dir. ValueError naming the option or file at fault.
int run_merge(const MergeOptions& options);

}  // namespace headroom
