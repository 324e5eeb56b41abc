// vocab.json + merges.txt (GPT-2's original files): the input is vocab.json, a line
// "#merges", then merges.txt.
#include "fuzz_support.h"
#include "io/gpt2_bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [vocab, merges] =
      headroom::fuzz::split_input({reinterpret_cast<const char*>(data), size}, "\n#merges\n");
  const std::string vocab_path = headroom::fuzz::write_scratch_file("vocab.json", vocab);
  const std::string merges_path = headroom::fuzz::write_scratch_file("merges.txt", merges);
  headroom::fuzz::expect_typed_errors([&] {
    const auto tokenizer =
        headroom::Gpt2BpeTokenizer::from_vocab_and_merges(vocab_path, merges_path);
    (void)tokenizer->decode(tokenizer->encode("Hello wörld ² 12 \xff  abc"));
  });
  return 0;
}
