// The --deepspeed JSON file: zero_optimization.stage, offload_optimizer and offload_param, and the
// warning that names the keys headroom does not honour.
#include "fuzz_support.h"
#include "train/deepspeed_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_scratch_file(
      "ds_config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  headroom::fuzz::expect_typed_errors([&] {
    const headroom::DeepSpeedConfig config = headroom::read_deepspeed_config(path);
    (void)headroom::deepspeed_ignored_keys_warning(path, config);
  });
  return 0;
}
