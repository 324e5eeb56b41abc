// tokenizer.json (HF tokenizers' BPE, byte-level or SentencePiece-style with byte fallback):
// loaded, then used on a text that holds the special token, non-ASCII, "▁", runs of spaces and
// invalid UTF-8, and its ids decoded again.
#include "fuzz_support.h"
#include "io/gpt2_bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = headroom::fuzz::write_scratch_file(
      "tokenizer.json", {reinterpret_cast<const char*>(data), size});
  headroom::fuzz::expect_typed_errors([&] {
    const auto tokenizer = headroom::Gpt2BpeTokenizer::from_tokenizer_json(path);
    const std::vector<int32_t> ids =
        tokenizer->encode("Hello <|endoftext|> wörld ² 12 \xff  ab!_x\n▁中 <s>  ");
    (void)tokenizer->decode(ids);
  });
  return 0;
}
