// --seed, --load_in_4bit and the bnb options of eval and merge, parsed into one request.
#include "apps/adapter_base_options.h"

#include <CLI/CLI.hpp>

#include "apps/option_value.h"
#include "core/error.h"
#include "quant/quant_4bit.h"

namespace headroom {

void add_adapter_base_options(CLI::App& command, AdapterBaseOptions& o) {
  auto last = CLI::MultiOptionPolicy::TakeLast;
  command
      .add_option("--seed", o.seed,
                  "seed of the base's initialisation (a preset, a directory without weights; "
                  "default: the adapter's record, else 42 as train)")
      ->type_name("INT")
      ->multi_option_policy(last);
  command
      .add_option("--load_in_4bit,--load-in-4bit", o.load_in_4bit,
                  "load the base's linear layers but lm_head in 4 bits, as QLoRA trains "
                  "(default: the adapter's record, else false)")
      ->expected(0, 1)
      ->default_str("true")  // what a bare --load_in_4bit reads as; unset when absent
      ->option_text("[BOOL]")
      ->multi_option_policy(last);
  command
      .add_option("--bnb_4bit_quant_type,--bnb-4bit-quant-type", o.bnb_4bit_quant_type,
                  "fp4 or nf4 (default: the record's, else fp4)")
      ->multi_option_policy(last);
  command
      .add_option("--bnb_4bit_use_double_quant,--bnb-4bit-use-double-quant",
                  o.bnb_4bit_use_double_quant,
                  "quantize the blocks' absmax too (default: the record's, else false)")
      ->type_name("BOOL")
      ->multi_option_policy(last);
  command
      .add_option("--bnb_4bit_compute_dtype,--bnb-4bit-compute-dtype", o.bnb_4bit_compute_dtype,
                  "float32, bfloat16 or float16 (default: the record's, else float32)")
      ->multi_option_policy(last);
  command
      .add_option("--bnb_4bit_quant_storage,--bnb-4bit-quant-storage", o.bnb_4bit_quant_storage,
                  "uint8, bfloat16, float16 or float32 (default: the record's, else uint8)")
      ->multi_option_policy(last);
}

namespace {

DType option_dtype(const std::string& text, const char* option) {
  try {
    return dtype_from_name(text);
  } catch (const ValueError& e) {
    throw ValueError(str_cat(option, ": ", e.what()));
  }
}

}  // namespace

AdapterBaseRequest adapter_base_request(const std::string& model, const AdapterBaseOptions& o) {
  AdapterBaseRequest request;
  request.model = model;
  if (!o.seed.empty()) {
    const int64_t seed = parse_integer_value(o.seed, "--seed");
    if (seed < 0) throw ValueError(str_cat("--seed: ", seed, " is negative"));
    request.seed = static_cast<uint64_t>(seed);
  }
  if (!o.load_in_4bit.empty()) {
    request.load_in_4bit = parse_bool_value(o.load_in_4bit, "--load_in_4bit");
  }
  if (!o.bnb_4bit_quant_type.empty()) {
    request.quant_type = parse_quant_4bit_type(o.bnb_4bit_quant_type, "--bnb_4bit_quant_type");
  }
  if (!o.bnb_4bit_use_double_quant.empty()) {
    request.double_quant =
        parse_bool_value(o.bnb_4bit_use_double_quant, "--bnb_4bit_use_double_quant");
  }
  if (!o.bnb_4bit_compute_dtype.empty()) {
    request.compute_dtype = option_dtype(o.bnb_4bit_compute_dtype, "--bnb_4bit_compute_dtype");
  }
  if (!o.bnb_4bit_quant_storage.empty()) {
    request.quant_storage = option_dtype(o.bnb_4bit_quant_storage, "--bnb_4bit_quant_storage");
  }
  return request;
}

}  // namespace headroom
