// A safetensors file: the header is validated on open, then every tensor is loaded (the shapes,
// dtypes and byte ranges the header claims are what the loader trusts).
#include "fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_scratch_file(
      "model.safetensors", {reinterpret_cast<const char*>(data), size});
  headroom::fuzz::expect_typed_errors([&] {
    const headroom::SafetensorsFile file(path);
    for (const std::string& name : file.names()) {
      (void)file.load(name, headroom::kMeta);
      (void)file.load(name).numel();
    }
  });
  return 0;
}
