// tokenizer.model (a SentencePiece ModelProto): loaded, then used on a text and decoded.
#include "fuzz_support.h"
#include "io/sentencepiece_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_scratch_file(
      "tokenizer.model", {reinterpret_cast<const char*>(data), size});
  headroom::fuzz::expect_typed_errors([&] {
    const headroom::SentencePieceTokenizer tokenizer(path);
    (void)tokenizer.decode(tokenizer.encode("Hello wörld ² 12 \xff  abc\n"));
  });
  return 0;
}
