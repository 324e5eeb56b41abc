// config.json of a model directory (GPT-2 or Llama fields, HF's defaults and checks).
#include "fuzz_support.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  headroom::fuzz::expect_typed_errors([&] {
    const headroom::HfConfig config = headroom::parse_hf_config(text, "config.json");
    (void)headroom::to_json(config);
  });
  return 0;
}
