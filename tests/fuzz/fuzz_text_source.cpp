// --data files: the first byte picks plain text or JSONL, the rest is the file, read into
// documents (UTF-8 and binary checks, JSONL lines).
#include "data/text_source.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path =
      headroom::fuzz::write_scratch_file(data[0] % 2 == 0 ? "data.txt" : "data.jsonl",
                                         {reinterpret_cast<const char*>(data) + 1, size - 1});
  headroom::fuzz::expect_typed_errors([&] {
    size_t total = 0;
    for (const headroom::TextSourceFile& file : headroom::list_text_files(path)) {
      headroom::read_documents(file, [&](std::string&& text) { total += text.size(); });
    }
  });
  return 0;
}
