// model.safetensors.index.json beside two small shards: the index is checked against the shards
// (missing shards, tensors in the wrong shard, paths that leave the directory).
#include <filesystem>

#include "core/tensor.h"
#include "fuzz_support.h"
#include "io/safetensors.h"

namespace {

// Two shards of two tensors each, written once.
const std::string& shard_dir() {
  static const std::string dir = [] {
    const std::string d =
        (std::filesystem::path(headroom::fuzz::scratch_dir()) / "sharded").string();
    std::filesystem::create_directories(d);
    using headroom::Tensor;
    headroom::save_safetensors(d + "/model-00001-of-00002.safetensors",
                               {{"a", Tensor::ones({2, 3})}, {"b", Tensor::zeros({4})}});
    headroom::save_safetensors(d + "/model-00002-of-00002.safetensors",
                               {{"c", Tensor::ones({1})}, {"d", Tensor::zeros({2, 2})}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string index = shard_dir() + "/model.safetensors.index.json";
  headroom::fuzz::write_scratch_file("sharded/model.safetensors.index.json",
                                     {reinterpret_cast<const char*>(data), size});
  headroom::fuzz::expect_typed_errors([&] {
    const headroom::SafetensorsCheckpoint checkpoint(index);
    for (const std::string& name : checkpoint.names()) (void)checkpoint.load(name);
  });
  return 0;
}
