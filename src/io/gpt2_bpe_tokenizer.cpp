// Gpt2BpeTokenizer: the two file readers, the added-token split, the GPT-2 pre-tokenizer as a
// hand-written scanner, the byte-to-character mapping, rank-ordered merging with a cache, and
// the SentencePiece-style normalizers, Metaspace, byte fallback and decoders.
#include "io/gpt2_bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/json_file.h"
#include "io/unicode_classes.h"
#include "io/unicode_nfc.h"

namespace headroom {

// Note [GPT-2 byte-level BPE]
// encode(text) follows HF tokenizers step by step, so that ids equal HF's for any text:
// 1. Added tokens (tokenizer.json's added_tokens, e.g. <|endoftext|>) are found first, leftmost
//    and longest first, anywhere in the text; they become their ids and split the text.
// 2. Each remaining segment gets a leading space if add_prefix_space, then is cut by GPT-2's
//    regex  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    (pretoken_end scans it by hand: alternatives in order, first match wins as in Oniguruma).
// 3. Each piece's bytes map to printable characters (bytes_to_unicode: 'Ġ' is the space), one
//    base token per byte, and adjacent tokens merge lowest rank first, leftmost first among
//    equal ranks (HF's word.rs priority queue, which gives GPT-2's encoder.py results).
// decode maps each token back to its bytes and joins them.
// Llama 3 and Qwen2 (transformers' TikTokenConverter and Qwen2Tokenizer) replace step 2's regex:
// their pre-tokenizer is a Split (Isolated) on the family's regex, then ByteLevel without its
// own; split_pretoken_end scans those regexes by hand as pretoken_end does GPT-2's. Qwen2 also
// NFC-normalises the text between added tokens. Step 1 is two passes, as in HF's
// AddedVocabulary: added tokens with normalized false are cut from the raw text first, then the
// rest is normalised and the normalized ones are cut from it (so of two overlapping tokens the
// one not normalised wins, with or without a normaliser).

// Note [SentencePiece-style BPE]
// Llama 2, Mistral, Gemma and Phi-3 ship tokenizer.json files converted from SentencePiece
// (transformers' LlamaConverter / GemmaConverter). Their vocabulary spells text as it is, with
// "▁" for the space, and encode(text) follows HF tokenizers 0.23:
// 1. Added tokens are cut as above; the normalizers run on each piece between them: Prepend
//    ("▁", only to a non-empty piece, so after every added token: Llama 2's legacy behaviour),
//    Replace (" " -> "▁", a plain string), NFC. A normalized added token is matched by its
//    content normalised the same way ("topic:" becomes "▁topic:" after Prepend).
// 2. The pre-tokenizer: none (the piece is one word), Split on a string with MergedWithPrevious
//    (Gemma's Split on " ", a no-op after its Replace), or Metaspace: spaces become "▁", a "▁" is
//    prepended unless the piece starts with one (prepend_scheme "always"; "first": only to the
//    piece that starts the text, at offset 0 of the original; "never"), and with split true each
//    "▁" starts a new word.
// 3. BPE starts from one symbol per character; a character not in the vocabulary becomes its
//    UTF-8 bytes as <0xNN> tokens (byte_fallback), else the unk token (consecutive ones fused
//    with fuse_unk), else nothing. Merges then go by rank as in byte-level BPE.
// decode maps ids to token strings (an added token to its content) and runs the decoders on the
// list: Replace "▁" -> " " per token; ByteFallback turns runs of <0xNN> into their text, or one
// U+FFFD per byte when the run is not valid UTF-8; Fuse joins the list; Strip drops up to
// `start` leading and `stop` trailing copies of a character per token; Metaspace turns "▁" into
// " ", dropping those of the first token unless prepend_scheme is "never". Without a decoder the
// tokens are joined by spaces.

namespace {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100 upwards in byte order, so every token is a printable string.
std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

const std::array<char32_t, 256>& byte_chars() {
  static const std::array<char32_t, 256> table = bytes_to_unicode();
  return table;
}

// The bytes a token string stands for: its characters through the inverse of bytes_to_unicode,
// or, when a character has no byte (an added token such as "<mask> "), its own UTF-8 bytes, as
// HF's ByteLevel decoder does.
std::string token_to_bytes(std::string_view token) {
  static const std::unordered_map<char32_t, char> inverse = [] {
    std::unordered_map<char32_t, char> m;
    for (int b = 0; b < 256; ++b) m[byte_chars()[b]] = static_cast<char>(b);
    return m;
  }();
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    const Utf8Char c = decode_utf8(token, pos);
    const auto it = inverse.find(c.code_point);
    if (it == inverse.end()) return std::string(token);
    bytes += it->second;
    pos += c.length;
  }
  return bytes;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

const json& member(const json& object, const char* name, const std::string& where,
                   const std::string& source) {
  if (!object.is_object() || !object.contains(name)) {
    throw ValueError(
        str_cat(source, ": ", where.empty() ? "" : where + ": ", "field '", name, "' is missing"));
  }
  return object[name];
}

bool optional_bool(const json& object, const char* name, bool fallback, const std::string& where,
                   const std::string& source) {
  if (!object.contains(name) || object[name].is_null()) return fallback;
  if (!object[name].is_boolean()) {
    throw ValueError(str_cat(source, ": field '", where, ".", name, "' is ",
                             describe_json(object[name]), ", expected true or false"));
  }
  return object[name].get<bool>();
}

int32_t token_id(const json& value, const std::string& field, const std::string& source) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    throw ValueError(str_cat(source, ": field '", field, "' is ", describe_json(value),
                             ", expected a token id (an integer >= 0)"));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

std::unordered_map<std::string, int32_t> read_vocab(const json& vocab, const std::string& field,
                                                    const std::string& source) {
  if (!vocab.is_object()) {
    throw ValueError(str_cat(source, ": field '", field, "' is ", describe_json(vocab),
                             ", expected an object of token: id"));
  }
  std::unordered_map<std::string, int32_t> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    out.emplace(token, token_id(id, str_cat(field, "[\"", token, "\"]"), source));
  }
  return out;
}

// One merge, "a b" (tokenizers before 0.20, merges.txt) or ["a", "b"].
std::pair<std::string, std::string> read_merge(const json& merge, size_t index,
                                               const std::string& source) {
  if (merge.is_string()) {
    const std::string& text = merge.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space != std::string::npos && space > 0 && space + 1 < text.size() &&
        text.find(' ', space + 1) == std::string::npos) {
      return {text.substr(0, space), text.substr(space + 1)};
    }
  } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
             merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  throw ValueError(str_cat(source, ": field 'model.merges[", index, "]' is ", describe_json(merge),
                           ", expected \"left right\" or [left, right]"));
}

void require_type(const json& component, const char* field, std::initializer_list<const char*> ok,
                  const std::string& source) {
  if (component.is_null()) return;
  const json& type = member(component, "type", field, source);
  std::string names;
  for (const char* name : ok) {
    if (type == name) return;
    names += str_cat(names.empty() ? "" : ", ", name);
  }
  throw NotImplementedError(str_cat(source, ": ", field, ".type ", describe_json(type),
                                    " is not supported (headroom's BPE reads ", names, " here)"));
}

// The regexes of the Split pre-tokenizers split_pretoken_end scans, as tokenizer.json spells them.
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A field whose value headroom does not implement.
[[noreturn]] void refuse(const std::string& source, const std::string& field, const json& value,
                         std::string_view why) {
  throw NotImplementedError(
      str_cat(source, ": ", field, " ", describe_json(value), " is not supported (", why, ")"));
}

// Calls fn(item, its field name) for each item of a Sequence component's list `key`.
template <typename Fn>
void for_each_in_sequence(const json& component, const char* key, const std::string& field,
                          const std::string& source, Fn fn) {
  const json& list = member(component, key, field, source);
  const std::string list_field = str_cat(field, ".", key);
  if (!list.is_array()) refuse(source, list_field, list, "expected an array");
  for (size_t i = 0; i < list.size(); ++i) fn(list[i], str_cat(list_field, "[", i, "]"));
}

// Llama 3's and Qwen2's pre-tokenizer: Sequence [Split (Isolated) on the family's regex,
// ByteLevel without regex or prefix space].
Gpt2BpeTokenizer::SplitRegex read_split_sequence(const json& pre, const std::string& source) {
  const json& list = member(pre, "pretokenizers", "pre_tokenizer", source);
  constexpr std::string_view kWant =
      "headroom implements [Split, ByteLevel] as Llama 3 and Qwen2 ship it";
  if (!list.is_array() || list.size() != 2) {
    refuse(source, "pre_tokenizer.pretokenizers", list, kWant);
  }
  const json& split = list[0];
  const std::string field = "pre_tokenizer.pretokenizers[0]";
  if (member(split, "type", field, source) != "Split") {
    refuse(source, field + ".type", split["type"], kWant);
  }
  const json& pattern = member(split, "pattern", field, source);
  const json* regex =
      pattern.is_object() && pattern.contains("Regex") ? &pattern["Regex"] : nullptr;
  Gpt2BpeTokenizer::SplitRegex out = Gpt2BpeTokenizer::SplitRegex::none;
  if (regex != nullptr && *regex == kLlama3Regex) out = Gpt2BpeTokenizer::SplitRegex::llama3;
  if (regex != nullptr && *regex == kQwen2Regex) out = Gpt2BpeTokenizer::SplitRegex::qwen2;
  if (out == Gpt2BpeTokenizer::SplitRegex::none) {
    refuse(source, field + ".pattern", pattern,
           "headroom implements the Split regexes of Llama 3 and Qwen2");
  }
  if (member(split, "behavior", field, source) != "Isolated") {
    refuse(source, field + ".behavior", split["behavior"], "only \"Isolated\"");
  }
  if (optional_bool(split, "invert", false, field, source)) {
    refuse(source, field + ".invert", split["invert"], "only false");
  }
  const json& byte_level = list[1];
  const std::string field1 = "pre_tokenizer.pretokenizers[1]";
  if (member(byte_level, "type", field1, source) != "ByteLevel") {
    refuse(source, field1 + ".type", byte_level["type"], kWant);
  }
  for (const char* flag : {"use_regex", "add_prefix_space"}) {
    if (optional_bool(byte_level, flag, true, field1, source)) {
      refuse(source, str_cat(field1, ".", flag), byte_level.value(flag, json(true)),
             "only false after a Split");
    }
  }
  return out;
}

// The ids of the post-processor's special tokens before and after the text: TemplateProcessing's
// single template (Llama 3's <|begin_of_text|> $A); ByteLevel adds none (its offsets only).
void read_post_processor(const json& post, const std::string& field, Gpt2BpeTokenizer::Spec& spec,
                         const std::string& source) {
  if (post.is_null()) return;
  const json& type = member(post, "type", field, source);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for_each_in_sequence(post, "processors", field, source, [&](const json& item, auto where) {
      read_post_processor(item, where, spec, source);
    });
    return;
  }
  if (type != "TemplateProcessing") {
    refuse(source, field + ".type", type,
           "headroom implements ByteLevel, TemplateProcessing and a Sequence of them");
  }
  const json& single = member(post, "single", field, source);
  const json& specials = member(post, "special_tokens", field, source);
  bool seen_text = false;
  for (size_t i = 0; single.is_array() && i < single.size(); ++i) {
    const json& piece = single[i];
    const std::string where = str_cat(field, ".single[", i, "]");
    if (piece.is_object() && piece.contains("Sequence") &&
        piece["Sequence"].value("id", "") == "A") {
      seen_text = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken")) {
      refuse(source, where, piece, "expected a SpecialToken or Sequence A");
    }
    const json& name = member(piece["SpecialToken"], "id", where + ".SpecialToken", source);
    if (!name.is_string() || !specials.contains(name.get<std::string>())) {
      throw ValueError(str_cat(source, ": ", where, ".SpecialToken.id ", describe_json(name),
                               " is not in ", field, ".special_tokens"));
    }
    const std::string special =
        str_cat(field, ".special_tokens[\"", name.get<std::string>(), "\"]");
    const json& ids = member(specials[name.get<std::string>()], "ids", special, source);
    if (!ids.is_array()) refuse(source, special + ".ids", ids, "expected an array of ids");
    for (const json& id : ids) {
      (seen_text ? spec.suffix_ids : spec.prefix_ids)
          .push_back(token_id(id, special + ".ids", source));
    }
  }
  if (!seen_text) refuse(source, field + ".single", single, "expected a template with Sequence A");
}

using NormalizerStep = Gpt2BpeTokenizer::NormalizerStep;
using DecoderStep = Gpt2BpeTokenizer::DecoderStep;

std::string string_field(const json& object, const char* name, const std::string& field,
                         const std::string& source) {
  const json& value = member(object, name, field, source);
  if (!value.is_string()) {
    throw ValueError(str_cat(source, ": field '", field, ".", name, "' is ", describe_json(value),
                             ", expected a string"));
  }
  return value.get<std::string>();
}

// A Rust `char` field (Metaspace's replacement, Strip's content): one character.
std::string char_field(const json& object, const char* name, const std::string& field,
                       const std::string& source) {
  std::string text = string_field(object, name, field, source);
  if (text.empty() || decode_utf8(text, 0).length != text.size() ||
      decode_utf8(text, 0).code_point == kInvalidCodePoint) {
    throw ValueError(str_cat(source, ": field '", field, ".", name, "' is \"", text,
                             "\", expected one character"));
  }
  return text;
}

size_t count_field(const json& object, const char* name, const std::string& field,
                   const std::string& source) {
  const json& value = member(object, name, field, source);
  if (!value.is_number_unsigned() || value.get<uint64_t>() > 1024) {
    throw ValueError(str_cat(source, ": field '", field, ".", name, "' is ", describe_json(value),
                             ", expected an integer in 0..1024"));
  }
  return value.get<size_t>();
}

// A Replace or Split pattern: {"String": text} (a Regex is refused: none of the families headroom
// reads has one there).
std::string string_pattern(const json& component, const std::string& field,
                           const std::string& source) {
  const json& pattern = member(component, "pattern", field, source);
  if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
      pattern["String"].get_ref<const std::string&>().empty()) {
    refuse(source, field + ".pattern", pattern, "headroom implements a non-empty String pattern");
  }
  return pattern["String"].get<std::string>();
}

// `text` with every `from` (non-overlapping, left to right) replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0;;) {
    const size_t found = text.find(from, pos);
    if (found == std::string_view::npos) {
      out.append(text.substr(pos));
      return out;
    }
    out.append(text.substr(pos, found - pos));
    out.append(to);
    pos = found + from.size();
  }
}

void read_normalizer(const json& normalizer, const std::string& field,
                     std::vector<NormalizerStep>& steps, const std::string& source) {
  if (normalizer.is_null()) return;
  const json& type = member(normalizer, "type", field, source);
  if (type == "Sequence") {
    for_each_in_sequence(
        normalizer, "normalizers", field, source,
        [&](const json& item, auto where) { read_normalizer(item, where, steps, source); });
  } else if (type == "NFC") {
    steps.push_back({NormalizerStep::Kind::nfc, "", ""});
  } else if (type == "Prepend") {
    steps.push_back(
        {NormalizerStep::Kind::prepend, string_field(normalizer, "prepend", field, source), ""});
  } else if (type == "Replace") {
    steps.push_back({NormalizerStep::Kind::replace, string_pattern(normalizer, field, source),
                     string_field(normalizer, "content", field, source)});
  } else {
    refuse(source, field + ".type", type,
           "headroom implements NFC, Prepend, Replace and a Sequence of them");
  }
}

// Metaspace, the pre-tokenizer or the decoder, as HF reads it: prepend_scheme defaults to
// "always"; an older file's add_prefix_space false means "never" and contradicts another scheme.
Gpt2BpeTokenizer::Metaspace read_metaspace(const json& metaspace, const std::string& field,
                                           const std::string& source) {
  using Scheme = Gpt2BpeTokenizer::PrependScheme;
  Gpt2BpeTokenizer::Metaspace out;
  out.replacement = char_field(metaspace, "replacement", field, source);
  const json scheme = metaspace.value("prepend_scheme", json("always"));
  if (scheme == "always") {
    out.prepend_scheme = Scheme::always;
  } else if (scheme == "first") {
    out.prepend_scheme = Scheme::first;
  } else if (scheme == "never") {
    out.prepend_scheme = Scheme::never;
  } else {
    throw ValueError(str_cat(source, ": field '", field, ".prepend_scheme' is ",
                             describe_json(scheme),
                             ", expected \"first\", \"always\" or \"never\""));
  }
  if (!optional_bool(metaspace, "add_prefix_space", true, field, source)) {
    if (out.prepend_scheme != Scheme::never) {
      throw ValueError(str_cat(source, ": field '", field,
                               ".add_prefix_space' false contradicts prepend_scheme ",
                               describe_json(scheme)));
    }
  }
  out.split = optional_bool(metaspace, "split", true, field, source);
  return out;
}

// Split on a plain string with MergedWithPrevious (Gemma's Split on " "): the string it cuts after.
std::string read_split_after(const json& split, const std::string& source) {
  const std::string text = string_pattern(split, "pre_tokenizer", source);
  if (member(split, "behavior", "pre_tokenizer", source) != "MergedWithPrevious") {
    refuse(source, "pre_tokenizer.behavior", split["behavior"],
           "a Split on a string: only \"MergedWithPrevious\"");
  }
  if (optional_bool(split, "invert", false, "pre_tokenizer", source)) {
    refuse(source, "pre_tokenizer.invert", split["invert"], "only false");
  }
  return text;
}

void read_decoder(const json& decoder, const std::string& field, std::vector<DecoderStep>& steps,
                  const std::string& source) {
  const json& type = member(decoder, "type", field, source);
  using Kind = DecoderStep::Kind;
  if (type == "Sequence") {
    for_each_in_sequence(decoder, "decoders", field, source, [&](const json& item, auto where) {
      read_decoder(item, where, steps, source);
    });
  } else if (type == "Replace") {
    steps.push_back({.kind = Kind::replace,
                     .text = string_pattern(decoder, field, source),
                     .replacement = string_field(decoder, "content", field, source)});
  } else if (type == "ByteFallback") {
    steps.push_back({.kind = Kind::byte_fallback});
  } else if (type == "Fuse") {
    steps.push_back({.kind = Kind::fuse});
  } else if (type == "Strip") {
    steps.push_back({.kind = Kind::strip,
                     .text = char_field(decoder, "content", field, source),
                     .start = count_field(decoder, "start", field, source),
                     .stop = count_field(decoder, "stop", field, source)});
  } else if (type == "Metaspace") {
    const Gpt2BpeTokenizer::Metaspace metaspace = read_metaspace(decoder, field, source);
    steps.push_back(
        {.kind = Kind::metaspace,
         .text = metaspace.replacement,
         .strip_first = metaspace.prepend_scheme != Gpt2BpeTokenizer::PrependScheme::never});
  } else {
    refuse(source, field + ".type", type,
           "a SentencePiece-style file's decoder: headroom implements Replace, ByteFallback, "
           "Fuse, Strip, Metaspace and a Sequence of them");
  }
}

// ByteFallback's decoder: a run of <0xNN> tokens becomes its text, or one U+FFFD per token when
// the bytes are not valid UTF-8. The two hex digits are read as Rust's u8::from_str_radix does
// ("+F" is 15 too).
std::vector<std::string> fallback_bytes_to_text(std::vector<std::string> tokens) {
  const auto byte_of = [](const std::string& t) -> std::optional<unsigned char> {
    if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return std::nullopt;
    const auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
      return -1;
    };
    const int high = t[3] == '+' ? 0 : hex(t[3]), low = hex(t[4]);
    if (high < 0 || low < 0) return std::nullopt;
    return static_cast<unsigned char>(high * 16 + low);
  };
  std::vector<std::string> out;
  std::string bytes;
  size_t count = 0;
  const auto flush = [&] {
    if (count == 0) return;
    bool valid = true;
    for (size_t pos = 0; pos < bytes.size() && valid;) {
      const Utf8Char c = decode_utf8(bytes, pos);
      valid = c.code_point != kInvalidCodePoint;
      pos += c.length;
    }
    if (valid) {
      out.push_back(bytes);
    } else {
      out.insert(out.end(), count, "\xEF\xBF\xBD");
    }
    bytes.clear();
    count = 0;
  };
  for (std::string& token : tokens) {
    if (const auto byte = byte_of(token)) {
      bytes += static_cast<char>(*byte);
      ++count;
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

// Strip's decoder on one token: up to `start` leading and `stop` trailing copies of `c`.
std::string strip_token(const std::string& token, const std::string& c, size_t start, size_t stop) {
  size_t begin = 0, end = token.size();
  for (size_t k = 0; k < start && end - begin >= c.size() && token.compare(begin, c.size(), c) == 0;
       ++k) {
    begin += c.size();
  }
  for (size_t k = 0;
       k < stop && end - begin >= c.size() && token.compare(end - c.size(), c.size(), c) == 0;
       ++k) {
    end -= c.size();
  }
  return token.substr(begin, end - begin);
}

// The eos_token of the tokenizer_config.json beside a tokenizer.json (Llama 3 has no
// <|endoftext|>: its end of text is <|end_of_text|>), as a string or an AddedToken object.
std::optional<std::string> config_eos_token(const std::string& tokenizer_json) {
  const std::string path =
      std::filesystem::path(tokenizer_json).replace_filename("tokenizer_config.json").string();
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  const json config = parse_json(read_text_file(path), path);
  if (!config.is_object() || !config.contains("eos_token") || config["eos_token"].is_null()) {
    return std::nullopt;
  }
  const json& eos = config["eos_token"];
  if (eos.is_string()) return eos.get<std::string>();
  if (eos.is_object() && eos.contains("content") && eos["content"].is_string()) {
    return eos["content"].get<std::string>();
  }
  throw ValueError(str_cat(path, ": field 'eos_token' is ", describe_json(eos),
                           ", expected a token or an object with its content"));
}

}  // namespace

// Merged pre-tokens, as HF's BPE cache: bounded, and it stops growing when full, as the frequent
// words come first. Open addressing over one slot array with the words and ids in two arenas, so
// that a lookup touches a few cache lines (a node-based map spent half the encode time here).
class Gpt2BpeTokenizer::WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;

  // Appends the ids of `word` and returns true when it is cached.
  bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& ids) {
    std::lock_guard lock(mutex_);
    for (size_t i = hash & kMask;; i = (i + 1) & kMask) {
      const Slot& slot = slots_[i];
      if (slot.hash == 0) return false;
      if (slot.hash == hash && slot.word_length == word.size() &&
          std::memcmp(words_.data() + slot.word_offset, word.data(), word.size()) == 0) {
        ids.insert(ids.end(), ids_.begin() + slot.ids_offset,
                   ids_.begin() + slot.ids_offset + slot.id_count);
        return true;
      }
    }
  }

  void insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
    std::lock_guard lock(mutex_);
    if (used_ == kMaxWords || ids.size() > kMaxWordBytes) return;
    size_t i = hash & kMask;
    for (; slots_[i].hash != 0; i = (i + 1) & kMask) {
      if (slots_[i].hash == hash && slots_[i].word_length == word.size() &&
          std::memcmp(words_.data() + slots_[i].word_offset, word.data(), word.size()) == 0) {
        return;  // another thread merged it meanwhile
      }
    }
    slots_[i] = {hash, static_cast<uint32_t>(words_.size()), static_cast<uint32_t>(ids_.size()),
                 static_cast<uint16_t>(word.size()), static_cast<uint16_t>(ids.size())};
    words_.append(word);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++used_;
  }

  // FNV-1a with a final mix (the low bits pick the slot), never 0, which marks an empty slot.
  static uint64_t hash(std::string_view word) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char c : word) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    h ^= h >> 29;
    return h | 1;
  }

 private:
  static constexpr size_t kSlots = 8192;  // half full at most
  static constexpr size_t kMaxWords = kSlots / 2;
  static constexpr size_t kMask = kSlots - 1;
  struct Slot {
    uint64_t hash = 0;
    uint32_t word_offset = 0, ids_offset = 0;
    uint16_t word_length = 0, id_count = 0;
  };
  std::mutex mutex_;
  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
  std::string words_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

struct Gpt2BpeTokenizer::Segment {
  std::string_view text;
  int32_t added_id;  // -1 for text to encode
};

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_tokenizer_json(const std::string& path) {
  const std::string bytes = read_text_file(path);
  const json root = parse_json(bytes, path);
  if (!root.is_object()) {
    throw ValueError(str_cat(path, ": is ", describe_json(root), ", expected an object"));
  }
  Spec spec;
  spec.source = path;
  spec.files = {{"tokenizer.json", path}};
  spec.fingerprint = tokenizer_fingerprint("gpt2_bpe", {bytes});

  const json& model = member(root, "model", "", path);
  const json& type = member(model, "type", "model", path);
  if (type != "BPE") {
    throw NotImplementedError(
        str_cat(path, ": model.type ", describe_json(type), " is not supported (only \"BPE\")"));
  }
  spec.vocab = read_vocab(member(model, "vocab", "model", path), "model.vocab", path);
  const json& merges = member(model, "merges", "model", path);
  if (!merges.is_array()) {
    throw ValueError(
        str_cat(path, ": field 'model.merges' is ", describe_json(merges), ", expected an array"));
  }
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) spec.merges.push_back(read_merge(merges[i], i, path));
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    spec.unk_token = model["unk_token"].get<std::string>();
  }
  spec.ignore_merges = optional_bool(model, "ignore_merges", false, "model", path);
  for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(unsupported) && !model[unsupported].is_null() && model[unsupported] != "") {
      throw NotImplementedError(str_cat(path, ": model.", unsupported, " ",
                                        describe_json(model[unsupported]), " is not supported"));
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0) {
    throw NotImplementedError(str_cat(path, ": model.dropout ", describe_json(model["dropout"]),
                                      " is not supported (BPE dropout is for training only)"));
  }
  spec.byte_fallback = optional_bool(model, "byte_fallback", false, "model", path);
  spec.fuse_unk = optional_bool(model, "fuse_unk", false, "model", path);

  if (root.contains("normalizer")) {
    read_normalizer(root["normalizer"], "normalizer", spec.normalizers, path);
  }
  // Byte-level when the pre-tokenizer is ByteLevel (alone or after a Split); otherwise the
  // vocabulary spells text as it is (see Note [SentencePiece-style BPE]).
  const json& pre = member(root, "pre_tokenizer", "", path);
  const json* pre_type = pre.is_null() ? nullptr : &member(pre, "type", "pre_tokenizer", path);
  if (pre_type == nullptr) {
    spec.byte_level = false;
  } else if (*pre_type == "Sequence") {
    spec.split_regex = read_split_sequence(pre, path);
  } else if (*pre_type == "Metaspace") {
    spec.byte_level = false;
    spec.metaspace = read_metaspace(pre, "pre_tokenizer", path);
  } else if (*pre_type == "Split") {
    spec.byte_level = false;
    spec.split_after = read_split_after(pre, path);
  } else {
    require_type(pre, "pre_tokenizer", {"ByteLevel", "Sequence", "Metaspace", "Split"}, path);
    spec.add_prefix_space = optional_bool(pre, "add_prefix_space", true, "pre_tokenizer", path);
    spec.use_regex = optional_bool(pre, "use_regex", true, "pre_tokenizer", path);
  }
  if (spec.byte_level && spec.byte_fallback) {
    throw NotImplementedError(str_cat(path,
                                      ": model.byte_fallback true is not supported with a "
                                      "ByteLevel pre-tokenizer (byte fallback belongs to "
                                      "SentencePiece-style files, without ByteLevel)"));
  }
  if (root.contains("decoder") && spec.byte_level) {
    require_type(root["decoder"], "decoder", {"ByteLevel"}, path);
  } else if (root.contains("decoder") && !root["decoder"].is_null()) {
    spec.decoders.emplace();
    read_decoder(root["decoder"], "decoder", *spec.decoders, path);
  }
  if (root.contains("post_processor")) {
    read_post_processor(root["post_processor"], "post_processor", spec, path);
  }

  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& added = root["added_tokens"];
    if (!added.is_array()) {
      throw ValueError(
          str_cat(path, ": field 'added_tokens' is ", describe_json(added), ", expected an array"));
    }
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string where = str_cat("added_tokens[", i, "]");
      const json& content = member(added[i], "content", where, path);
      if (!content.is_string() || content.get_ref<const std::string&>().empty()) {
        throw ValueError(str_cat(path, ": field '", where, ".content' is ", describe_json(content),
                                 ", expected a non-empty string"));
      }
      AddedToken token;
      token.content = content.get<std::string>();
      token.id = token_id(member(added[i], "id", where, path), where + ".id", path);
      token.single_word = optional_bool(added[i], "single_word", false, where, path);
      token.lstrip = optional_bool(added[i], "lstrip", false, where, path);
      token.rstrip = optional_bool(added[i], "rstrip", false, where, path);
      token.normalized = optional_bool(added[i], "normalized", false, where, path);
      spec.added_tokens.push_back(std::move(token));
    }
  }
  spec.eos_token = config_eos_token(path);
  if (spec.eos_token && !spec.vocab.contains(*spec.eos_token) &&
      std::none_of(spec.added_tokens.begin(), spec.added_tokens.end(),
                   [&](const AddedToken& t) { return t.content == *spec.eos_token; })) {
    throw ValueError(
        str_cat(std::filesystem::path(path).replace_filename("tokenizer_config.json").string(),
                ": eos_token \"", *spec.eos_token, "\" is not a token of ", path));
  }
  return std::make_unique<Gpt2BpeTokenizer>(std::move(spec));
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_vocab_and_merges(
    const std::string& vocab_path, const std::string& merges_path) {
  const std::string vocab_bytes = read_text_file(vocab_path);
  const std::string merges_bytes = read_text_file(merges_path);
  Spec spec;
  spec.source = str_cat(vocab_path, " + ", merges_path);
  spec.files = {{"vocab.json", vocab_path}, {"merges.txt", merges_path}};
  spec.fingerprint = tokenizer_fingerprint("gpt2_bpe", {vocab_bytes, merges_bytes});
  spec.vocab = read_vocab(parse_json(vocab_bytes, vocab_path), "(vocabulary)", vocab_path);
  std::istringstream lines(merges_bytes);
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      throw ValueError(str_cat(merges_path, ": line ", number, " is \"", line,
                               "\", expected two tokens separated by one space"));
    }
    spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  spec.add_prefix_space = false;
  if (const auto it = spec.vocab.find("<|endoftext|>"); it != spec.vocab.end()) {
    spec.added_tokens.push_back({.content = it->first, .id = it->second});
  }
  return std::make_unique<Gpt2BpeTokenizer>(std::move(spec));
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(Spec spec)
    : vocab_(std::move(spec.vocab)),
      added_tokens_(std::move(spec.added_tokens)),
      add_prefix_space_(spec.add_prefix_space),
      use_regex_(spec.use_regex),
      ignore_merges_(spec.ignore_merges),
      split_regex_(spec.split_regex),
      byte_level_(spec.byte_level),
      normalizers_(std::move(spec.normalizers)),
      metaspace_(std::move(spec.metaspace)),
      split_after_(std::move(spec.split_after)),
      byte_fallback_(spec.byte_fallback),
      fuse_unk_(spec.fuse_unk),
      decoders_(std::move(spec.decoders)),
      prefix_ids_(std::move(spec.prefix_ids)),
      suffix_ids_(std::move(spec.suffix_ids)),
      fingerprint_(std::move(spec.fingerprint)),
      files_(std::move(spec.files)) {
  const std::string& source = spec.source;
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab_) max_id = std::max(max_id, id);
  for (const AddedToken& t : added_tokens_) max_id = std::max(max_id, t.id);
  // Ids index tables: a few holes are fine, an id far past the token count is a corrupt file.
  const size_t tokens = vocab_.size() + added_tokens_.size();
  if (static_cast<size_t>(max_id) > 2 * tokens + 256) {
    throw ValueError(str_cat(source, ": token id ", max_id, " is far beyond the ", tokens,
                             " tokens of the vocabulary"));
  }
  token_bytes_.resize(static_cast<size_t>(max_id + 1));
  has_token_.assign(token_bytes_.size(), false);
  for (const auto& [token, id] : vocab_) {
    if (has_token_[id]) {
      throw ValueError(
          str_cat(source, ": token id ", id, " is given to two tokens, one is \"", token, "\""));
    }
    token_bytes_[id] = byte_level_ ? token_to_bytes(token) : token;
    has_token_[id] = true;
  }
  for (size_t i = 0; i < added_tokens_.size(); ++i) added_by_id_[added_tokens_[i].id] = i;
  for (const AddedToken& t : added_tokens_) {
    // HF matches a normalized token by its content normalised (Prepend makes "x" "▁x"), and
    // decodes it from that form too, so that the decoder inverts the normalisation.
    std::string pattern = t.normalized ? normalize(t.content) : t.content;
    added_patterns_.push_back(pattern.empty() ? t.content : std::move(pattern));
    const std::string& token = added_patterns_.back();
    token_bytes_[t.id] = byte_level_ ? token_to_bytes(token) : token;
    has_token_[t.id] = true;
  }
  for (const int32_t id : prefix_ids_) {
    if (id > max_id || !has_token_[id]) {
      throw ValueError(
          str_cat(source, ": post_processor's special token id ", id, " is not in the vocabulary"));
    }
  }
  for (const int32_t id : suffix_ids_) {
    if (id > max_id || !has_token_[id]) {
      throw ValueError(
          str_cat(source, ": post_processor's special token id ", id, " is not in the vocabulary"));
    }
  }

  for (int b = 0; b < 256; ++b) {
    // A one-byte word's token: its byte-level character's, or, spelled as it is, an ASCII
    // character's (a lone byte >= 0x80 is no character: byte fallback decides).
    std::string ch;
    if (byte_level_) {
      append_utf8(ch, byte_chars()[b]);
    } else if (b < 0x80) {
      ch = std::string(1, static_cast<char>(b));
    }
    const auto it = ch.empty() ? vocab_.end() : vocab_.find(ch);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto fallback = vocab_.find(name);
    fallback_ids_[b] = fallback == vocab_.end() ? -1 : fallback->second;
    if (fallback != vocab_.end()) fallback_bytes_[fallback->second] = static_cast<char>(b);
  }
  if (spec.unk_token) {
    const auto it = vocab_.find(*spec.unk_token);
    if (it == vocab_.end()) {
      throw ValueError(
          str_cat(source, ": unk_token \"", *spec.unk_token, "\" is not in the vocabulary"));
    }
    unk_id_ = it->second;
  }

  merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda below.
    const std::string& left = spec.merges[rank].first;
    const std::string& right = spec.merges[rank].second;
    const auto id_of = [&](const std::string& token) {
      const auto it = vocab_.find(token);
      if (it == vocab_.end()) {
        throw ValueError(str_cat(source, ": merge ", rank, " (\"", left, " ", right, "\") uses \"",
                                 token, "\", which is not in the vocabulary"));
      }
      return it->second;
    };
    const int32_t l = id_of(left), r = id_of(right), merged = id_of(left + right);
    // A repeated pair keeps its last rank: HF's BPE collects the merges into a map, where a
    // later entry replaces an earlier one.
    merges_.insert_or_assign(pair_key(l, r), Merge{static_cast<int32_t>(rank), merged});
  }

  for (const AddedToken& t : added_tokens_) has_added_in_pass_[t.normalized] = true;
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    added_by_first_byte_[static_cast<unsigned char>(added_patterns_[i][0])].push_back(i);
  }
  for (int b = 0; b < 256; ++b) {
    if (!added_by_first_byte_[b].empty()) added_first_bytes_ += static_cast<char>(b);
  }
  for (auto& candidates : added_by_first_byte_) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
      return added_patterns_[a].size() > added_patterns_[b].size();
    });
  }
  eos_token_id_ = token_to_id(spec.eos_token.value_or("<|endoftext|>"));
  for (auto& shard : cache_) shard = std::make_unique<WordCache>();
}

Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

std::optional<int32_t> Gpt2BpeTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  if (const auto it = vocab_.find(std::string(token)); it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::vector<Gpt2BpeTokenizer::Segment> Gpt2BpeTokenizer::split_on_added_tokens(
    std::string_view text, bool normalized_pass) const {
  std::vector<Segment> segments;
  if (!has_added_in_pass_[normalized_pass]) {
    segments.push_back({text, -1});
    return segments;
  }
  // The start of the character that ends just before `pos`.
  const auto char_before = [&](size_t pos) {
    do --pos;
    while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
    return pos;
  };
  const auto class_at = [&](size_t pos) { return char_class(decode_utf8(text, pos).code_point); };
  const auto word_char_at = [&](size_t pos) {
    return is_word_char(decode_utf8(text, pos).code_point);
  };
  size_t done = 0;  // text before this is in segments
  for (size_t pos = 0; pos < text.size();) {
    // Skip to the next byte that can start an added token (memchr when there is one such byte).
    pos = added_first_bytes_.size() == 1 ? text.find(added_first_bytes_[0], pos)
                                         : text.find_first_of(added_first_bytes_, pos);
    if (pos == std::string_view::npos) break;
    const std::vector<size_t>& candidates =
        added_by_first_byte_[static_cast<unsigned char>(text[pos])];
    const AddedToken* found = nullptr;
    size_t length = 0;
    for (size_t i : candidates) {
      if (added_tokens_[i].normalized != normalized_pass) continue;
      if (text.substr(pos).starts_with(added_patterns_[i])) {
        found = &added_tokens_[i];
        length = added_patterns_[i].size();
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, end = pos + length;
    pos = end;
    if (found->single_word && ((start > 0 && word_char_at(char_before(start))) ||
                               (end < text.size() && word_char_at(end)))) {
      // A word character just before or after: not a match (HF's single_word, whose test is
      // Rust regex's \w; see is_word_char).
      continue;
    }
    if (found->lstrip) {
      while (start > done && class_at(char_before(start)) == CharClass::whitespace) {
        start = char_before(start);
      }
    }
    if (found->rstrip) {
      while (end < text.size() && class_at(end) == CharClass::whitespace) {
        end += decode_utf8(text, end).length;
      }
      pos = end;
    }
    if (start > done) segments.push_back({text.substr(done, start - done), -1});
    segments.push_back({{}, found->id});
    done = end;
  }
  if (done < text.size()) segments.push_back({text.substr(done), -1});
  return segments;
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  encode_text(text, ids);
  return ids;
}

std::vector<int32_t> Gpt2BpeTokenizer::encode_with_special_tokens(std::string_view text) const {
  std::vector<int32_t> ids = prefix_ids_;
  ids.reserve(text.size() / 3 + 1 + prefix_ids_.size() + suffix_ids_.size());
  encode_text(text, ids);
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

void Gpt2BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  for (const Segment& segment : split_on_added_tokens(text, false)) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
      continue;
    }
    std::string normalized;
    if (!normalizers_.empty()) normalized = normalize(segment.text);
    const std::string_view source = normalizers_.empty() ? segment.text : normalized;
    // Metaspace's "first" is the piece at offset 0 of the text (HF's offsets_original).
    const bool segment_at_start = segment.text.data() == text.data();
    for (const Segment& piece : split_on_added_tokens(source, true)) {
      if (piece.added_id >= 0) {
        ids.push_back(piece.added_id);
      } else {
        encode_segment(piece.text, segment_at_start && piece.text.data() == source.data(), ids);
      }
    }
  }
}

std::string Gpt2BpeTokenizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const NormalizerStep& step : normalizers_) {
    switch (step.kind) {
      case NormalizerStep::Kind::nfc:
        out = nfc(out);
        break;
      case NormalizerStep::Kind::prepend:
        if (!out.empty()) out.insert(0, step.text);
        break;
      case NormalizerStep::Kind::replace:
        out = replace_all(out, step.text, step.replacement);
        break;
    }
  }
  return out;
}

void Gpt2BpeTokenizer::encode_metaspace(std::string_view segment, bool at_start,
                                        std::vector<int32_t>& ids) const {
  const std::string& mark = metaspace_->replacement;
  std::string text = replace_all(segment, " ", mark);
  const PrependScheme scheme = metaspace_->prepend_scheme;
  if (!text.starts_with(mark) &&
      (scheme == PrependScheme::always || (scheme == PrependScheme::first && at_start))) {
    text.insert(0, mark);
  }
  if (!metaspace_->split) {
    encode_word(text, ids);
    return;
  }
  // Each mark starts a word (MergedWithNext). A mark never starts inside another character.
  const std::string_view view = text;
  for (size_t begin = 0; begin < view.size();) {
    const size_t end = std::min(view.find(mark, begin + 1), view.size());
    encode_word(view.substr(begin, end - begin), ids);
    begin = end;
  }
}

void Gpt2BpeTokenizer::encode_segment(std::string_view segment, bool at_start,
                                      std::vector<int32_t>& ids) const {
  if (segment.empty()) return;  // HF drops empty pieces before the pre-tokenizer
  if (!byte_level_) {
    if (metaspace_) {
      encode_metaspace(segment, at_start, ids);
    } else if (split_after_) {
      for (size_t begin = 0; begin < segment.size();) {
        const size_t found = segment.find(*split_after_, begin);
        const size_t end =
            found == std::string_view::npos ? segment.size() : found + split_after_->size();
        encode_word(segment.substr(begin, end - begin), ids);
        begin = end;
      }
    } else {
      encode_word(segment, ids);
    }
    return;
  }
  std::string prefixed;
  if (add_prefix_space_ && !segment.starts_with(' ')) {
    prefixed = str_cat(" ", segment);
    segment = prefixed;
  }
  if (split_regex_ != SplitRegex::none) {
    for (size_t pos = 0; pos < segment.size();) {
      const size_t end = split_pretoken_end(split_regex_, segment, pos);
      encode_word(segment.substr(pos, end - pos), ids);
      pos = end;
    }
    return;
  }
  if (!use_regex_) {
    encode_word(segment, ids);
    return;
  }
  for (size_t pos = 0; pos < segment.size();) {
    const size_t end = pretoken_end(segment, pos);
    encode_word(segment.substr(pos, end - pos), ids);
    pos = end;
  }
}

size_t Gpt2BpeTokenizer::pretoken_end(std::string_view s, size_t i) {
  const size_t n = s.size();
  // 's|'t|'re|'ve|'m|'ll|'d (lowercase only, as the regex is case-sensitive)
  if (s[i] == '\'' && i + 1 < n) {
    const char c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
    if (i + 2 < n) {
      const char d = s[i + 2];
      if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
    }
  }
  // A run of one class: letters, numbers or other (not whitespace).
  const auto run_end = [&](size_t pos, CharClass cls) {
    while (pos < n) {
      const Utf8Char c = decode_utf8(s, pos);
      if (char_class(c.code_point) != cls) break;
      pos += c.length;
    }
    return pos;
  };
  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: an optional space, then a run of the class that
  // follows it.
  if (s[i] == ' ' && i + 1 < n) {
    const CharClass next = char_class(decode_utf8(s, i + 1).code_point);
    if (next != CharClass::whitespace) return run_end(i + 1, next);
  }
  const Utf8Char first = decode_utf8(s, i);
  const CharClass cls = char_class(first.code_point);
  if (cls != CharClass::whitespace) return run_end(i, cls);
  // `\s+(?!\S)|\s+`: the whitespace run, less its last character when a non-space follows and
  // the run has more than one (that character then starts the next piece, e.g. " word").
  size_t last = i, pos = i;
  while (pos < n) {
    const Utf8Char c = decode_utf8(s, pos);
    if (char_class(c.code_point) != CharClass::whitespace) break;
    last = pos;
    pos += c.length;
  }
  if (pos < n && last > i) return last;
  return pos;
}

size_t Gpt2BpeTokenizer::split_pretoken_end(SplitRegex regex, std::string_view s, size_t i) {
  const size_t n = s.size();
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): any case, and 'ſ' (U+017F), which Oniguruma folds to 's'.
  if (s[i] == '\'' && i + 1 < n) {
    const char c = static_cast<char>(s[i + 1] | 0x20);  // lower case for ASCII letters
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
    if (s.substr(i + 1, 2) == "\xC5\xBF") return i + 3;
    if (i + 2 < n) {
      const char d = static_cast<char>(s[i + 2] | 0x20);
      if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
    }
  }
  const auto class_at = [&](size_t pos) { return char_class(decode_utf8(s, pos).code_point); };
  const auto run_end = [&](size_t pos, CharClass cls) {
    while (pos < n) {
      const Utf8Char c = decode_utf8(s, pos);
      if (char_class(c.code_point) != cls) break;
      pos += c.length;
    }
    return pos;
  };
  const auto is_newline = [&](size_t pos) { return s[pos] == '\r' || s[pos] == '\n'; };
  const Utf8Char first = decode_utf8(s, i);
  const CharClass cls = char_class(first.code_point);
  // [^\r\n\p{L}\p{N}]?\p{L}+: a letter run, with one character before it that is none of those.
  if (cls == CharClass::letter) return run_end(i, CharClass::letter);
  if (cls != CharClass::number && !is_newline(i) && i + first.length < n &&
      class_at(i + first.length) == CharClass::letter) {
    return run_end(i + first.length, CharClass::letter);
  }
  // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2).
  if (cls == CharClass::number) {
    const int max_digits = regex == SplitRegex::llama3 ? 3 : 1;
    size_t pos = i;
    for (int k = 0; k < max_digits && pos < n; ++k) {
      const Utf8Char c = decode_utf8(s, pos);
      if (char_class(c.code_point) != CharClass::number) break;
      pos += c.length;
    }
    return pos;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t other = s[i] == ' ' ? i + 1 : i;
  if (other < n && class_at(other) == CharClass::other) {
    size_t pos = run_end(other, CharClass::other);
    while (pos < n && is_newline(pos)) ++pos;
    return pos;
  }
  // The rest start with whitespace. \s*[\r\n]+: the run up to its last CR or LF.
  size_t last = i, pos = i, after_newline = 0;
  while (pos < n) {
    const Utf8Char c = decode_utf8(s, pos);
    if (char_class(c.code_point) != CharClass::whitespace) break;
    last = pos;
    pos += c.length;
    if (is_newline(last)) after_newline = pos;
  }
  if (after_newline > 0) return after_newline;
  // \s+(?!\S)|\s+: the run, less its last character when a non-space follows and the run has
  // more than one.
  if (pos < n && last > i) return last;
  return pos;
}

void Gpt2BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.size() == 1 && byte_ids_[static_cast<unsigned char>(word[0])] >= 0) {
    ids.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (word.size() > WordCache::kMaxWordBytes) {
    bpe(word, ids);
    return;
  }
  const uint64_t hash = WordCache::hash(word);
  WordCache& shard = *cache_[hash >> 60];
  if (shard.find(word, hash, ids)) return;
  const size_t first = ids.size();
  bpe(word, ids);
  shard.insert(word, hash, std::span(ids).subspan(first));
}

void Gpt2BpeTokenizer::bpe(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    std::string token;
    if (byte_level_) {
      for (char b : word) append_utf8(token, byte_chars()[static_cast<unsigned char>(b)]);
    } else {
      token = word;
    }
    if (const auto it = vocab_.find(token); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> first_ids;
  if (byte_level_) {
    first_ids.reserve(word.size());
    for (char b : word) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(b)];
      // HF drops a character with no token unless there is an unk token.
      if (id >= 0 || unk_id_) first_ids.push_back(id >= 0 ? id : *unk_id_);
    }
  } else {
    initial_symbols(word, first_ids);
  }
  // A doubly linked list of symbols; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id, prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(first_ids.size());
  for (const int32_t id : first_ids) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank, pos, new_id;
    // std::push_heap keeps the largest on top: invert, so lowest rank, then leftmost, comes first.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> queue;
  const auto push = [&](int32_t pos) {
    const Symbol& a = symbols[pos];
    if (a.next < 0) return;
    if (const auto it = merges_.find(pair_key(a.id, symbols[a.next].id)); it != merges_.end()) {
      queue.push_back({it->second.rank, pos, it->second.new_id});
      std::push_heap(queue.begin(), queue.end());
    }
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push(pos);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Candidate top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    // Stale entry: one of the pair merged since it was queued.
    const auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.new_id;
    left.next = right.next;
    right.id = -1;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) ids.push_back(symbols[pos].id);
}

void Gpt2BpeTokenizer::initial_symbols(std::string_view word, std::vector<int32_t>& out) const {
  // HF's merge_word: an unknown character's unk waits for the next known one, so that fuse_unk
  // can join a run (byte fallback tokens do not flush it: they are added before it, as in HF).
  std::optional<int32_t> pending_unk;
  std::string ch;
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = decode_utf8(word, pos).length;
    ch.assign(word.substr(pos, length));
    pos += length;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) out.push_back(*pending_unk);
      pending_unk.reset();
      out.push_back(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char b) {
          return fallback_ids_[static_cast<unsigned char>(b)] >= 0;
        })) {
      for (const char b : ch) out.push_back(fallback_ids_[static_cast<unsigned char>(b)]);
      continue;
    }
    if (!unk_id_) continue;  // HF drops a character with no token unless there is an unk token
    if (pending_unk && !fuse_unk_) out.push_back(*pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk) out.push_back(*pending_unk);
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  std::vector<std::string> tokens;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !has_token_[id]) {
      throw ValueError(str_cat("gpt2_bpe tokenizer: token id ", id,
                               " is not in the vocabulary (size ", vocab_size(), ")"));
    }
    if (byte_level_) {
      bytes += token_bytes_[id];
    } else {
      tokens.push_back(token_bytes_[id]);
    }
  }
  return byte_level_ ? utf8_lossy(bytes) : decode_pieces(std::move(tokens));
}

std::vector<TokenOffsets> Gpt2BpeTokenizer::offsets(std::string_view text,
                                                    std::span<const int32_t> ids) const {
  std::vector<TokenPiece> pieces;
  pieces.reserve(ids.size());
  std::string space_marker = metaspace_ ? metaspace_->replacement : std::string();
  for (const NormalizerStep& step : normalizers_) {
    if (step.kind == NormalizerStep::Kind::replace && step.text == " ") {
      space_marker = step.replacement;
    }
  }
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !has_token_[id]) {
      throw ValueError(str_cat("gpt2_bpe tokenizer: token id ", id,
                               " is not in the vocabulary (size ", vocab_size(), ")"));
    }
    if (const auto added = added_by_id_.find(id); added != added_by_id_.end()) {
      const AddedToken& token = added_tokens_[added->second];
      pieces.push_back({token.content, token.lstrip, token.rstrip});
    } else if (byte_level_) {
      pieces.push_back({token_bytes_[id]});
    } else if (const auto byte = fallback_bytes_.find(id); byte != fallback_bytes_.end()) {
      pieces.push_back({std::string(1, byte->second)});
    } else {
      pieces.push_back({space_marker.empty() ? token_bytes_[id]
                                             : replace_all(token_bytes_[id], space_marker, " ")});
    }
  }
  return align_token_pieces(text, pieces, ids);
}

std::string Gpt2BpeTokenizer::decode_pieces(std::vector<std::string> tokens) const {
  const auto join = [](const std::vector<std::string>& parts, std::string_view separator) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += str_cat(i > 0 ? separator : "", parts[i]);
    return out;
  };
  if (!decoders_) return join(tokens, " ");
  for (const DecoderStep& step : *decoders_) {
    switch (step.kind) {
      case DecoderStep::Kind::replace:
        for (std::string& t : tokens) t = replace_all(t, step.text, step.replacement);
        break;
      case DecoderStep::Kind::byte_fallback:
        tokens = fallback_bytes_to_text(std::move(tokens));
        break;
      case DecoderStep::Kind::fuse:
        tokens = {join(tokens, "")};
        break;
      case DecoderStep::Kind::strip:
        for (std::string& t : tokens) t = strip_token(t, step.text, step.start, step.stop);
        break;
      case DecoderStep::Kind::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], step.text, i == 0 && step.strip_first ? "" : " ");
        }
        break;
    }
  }
  return join(tokens, "");
}

}  // namespace headroom
