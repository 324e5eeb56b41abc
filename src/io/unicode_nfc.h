// Unicode NFC (canonical decomposition, canonical ordering, canonical composition), the
// normaliser of Qwen2's tokenizer.json, so that its ids equal HF tokenizers' on any text.
#pragma once

#include <string>
#include <string_view>

namespace headroom {

// `text` in Normalization Form C (Unicode 14 tables from tools/gen_unicode_nfc.py). Bytes that
// are not valid UTF-8 pass through unchanged and end a run: nothing composes across them.
std::string nfc(std::string_view text);

}  // namespace headroom
