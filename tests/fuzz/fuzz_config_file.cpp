// `headroom train --config FILE`: the first byte picks the format (TOML, JSON, YAML), the rest is
// the file; it is read and every option converted and checked as the CLI does.
#include "apps/train_command.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kNames[] = {"run.toml", "run.json", "run.yaml"};
  static const std::string text_path =
      headroom::fuzz::write_scratch_file("data.txt", "some text\n");
  const std::string path = headroom::fuzz::write_scratch_file(
      kNames[data[0] % 3], {reinterpret_cast<const char*>(data) + 1, size - 1});
  headroom::fuzz::expect_typed_errors([&] {
    (void)headroom::parse_train_arguments({"--data", text_path, "--config", path});
  });
  return 0;
}
