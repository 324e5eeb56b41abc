// The options of `headroom eval` and `headroom merge` that say which base to build under an
// adapter: --seed, --load_in_4bit and the bnb options, spelled as `headroom train` spells them
// and typed here once (train/adapter_base.h resolves them against the adapter's record).
#pragma once

#include <string>

#include "train/adapter_base.h"

namespace CLI {
class App;
}

namespace headroom {

// The options as text; empty: not given.
struct AdapterBaseOptions {
  std::string seed;
  std::string load_in_4bit;
  std::string bnb_4bit_quant_type;
  std::string bnb_4bit_use_double_quant;
  std::string bnb_4bit_compute_dtype;
  std::string bnb_4bit_quant_storage;
};

void add_adapter_base_options(CLI::App& command, AdapterBaseOptions& options);

// The request for base `model` (empty: the adapter's record's). ValueError naming the option for
// a value that does not parse.
AdapterBaseRequest adapter_base_request(const std::string& model,
                                        const AdapterBaseOptions& options);

}  // namespace headroom
