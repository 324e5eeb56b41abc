// Supervised fine-tuning data as TRL's SFTTrainer prepares it: rows of JSONL / JSON files in one
// of TRL's dataset formats, tokenised (through the chat template for conversations), labelled so
// that only what the options score counts, truncated, and dropped when nothing is left to score.
//
// Note [TRL's SFT preparation]
// trl/trainer/sft_trainer.py (_prepare_dataset, 1.16), row by row:
// - Format, from the first row (data_utils.is_conversational): a "prompt", "completion" or
//   "messages" value that is a list whose first item is an object with a "role" makes the data
//   conversational; "prompt" then makes it prompt / completion, else it is language modeling
//   (`dataset_text_field`, or "messages"). ShareGPT's "conversations" of {"from", "value"} is
//   converted to "messages" first (maybe_convert_to_chatml: human -> user, gpt -> assistant).
// - EOS, for data that is not conversational: the eos token's text appended to the text, or to
//   the completion, unless it already ends with it.
// - Tokens: text through the tokenizer with its special tokens (Llama 3's BOS); a conversation
//   rendered by the chat template and tokenised without them. A prompt / completion row
//   tokenises the prompt (conversations: with add_generation_prompt) and prompt + completion;
//   the completion starts where the two token lists part (common_prefix_length).
// - Labels: the ids, -100 where a mask says the token is not scored: the completion mask when
//   completion_only_loss (unset: on for prompt / completion data), the assistant mask (tokens
//   overlapping a {% generation %} span) when assistant_only_loss.
// - Truncation (not when packing: the packer cuts): the first max_length tokens; a row left
//   with no scored label is dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace headroom {

enum class SftFormat {
  language_modeling,                 // {"text": ...}
  prompt_completion,                 // {"prompt": "...", "completion": "..."}
  conversational,                    // {"messages": [{"role", "content"}, ...]}
  conversational_prompt_completion,  // {"prompt": [messages], "completion": [messages]}
};
const char* sft_format_name(SftFormat format);

// One row of a data file: the JSON object and where it came from.
struct SftRow {
  nlohmann::ordered_json value;
  std::string file;
  int64_t line = 0;  // JSONL: the line; JSON: the index in the list, from 1
};

// True when `path` is row data: a file ending in .jsonl or .json, or a directory whose files
// (walked as list_text_files walks) all are. A directory mixing them with plain text files is a
// ValueError naming one of each.
bool is_row_data(const std::string& path, const std::string& output_dir = "");

// The rows of `path`'s files in order: JSONL (an object per non-blank line) or JSON (a list of
// objects). ValueError "<file>:<line>: <problem>" for a row that is not an object, or a file
// that does not parse.
std::vector<SftRow> read_sft_rows(const std::string& path, const std::string& output_dir = "");

struct SftOptions {
  std::string dataset_text_field = "text";
  std::optional<bool> completion_only_loss = std::nullopt;  // unset: on for prompt / completion
  bool assistant_only_loss = false;
  std::optional<int64_t> max_length = 1024;             // unset: no truncation
  bool packing = false;                                 // no truncation here: the packer cuts
  std::optional<std::string> eos_token = std::nullopt;  // unset: the tokenizer's eos_token
};

// What conversations are rendered with.
struct SftChat {
  const ChatTemplate* chat_template = nullptr;  // null: conversational rows are refused
  // The template's special tokens (read_special_tokens of the model directory); their
  // "eos_token" is the default EOS text.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// One prepared example: labels are input_ids, -100 where not scored.
struct SftExample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
};

struct SftDataset {
  std::string source;
  SftFormat format = SftFormat::language_modeling;
  bool completion_only_loss = false;  // as resolved from the options and the format
  std::vector<SftExample> examples;
  std::vector<int64_t> rows;  // the row (0-based, over all files) of each example
  int64_t dropped = 0;        // rows left with nothing scored after truncation
};

// The format of `row` (Note [TRL's SFT preparation]); ValueError naming the row when it has
// none of the fields a format needs.
SftFormat detect_sft_format(const SftRow& row, const std::string& dataset_text_field);

// `rows` prepared as the Note says; every row must have the first row's format (a ValueError
// naming the file, line and field otherwise). A template that raises is a ValueError naming its
// message, the file and the line; so is an assistant-only loss with a row that has no assistant
// tokens (TRL's RuntimeError).
SftDataset prepare_sft_dataset(const std::vector<SftRow>& rows, const std::string& source,
                               const Tokenizer& tokenizer, const SftChat& chat,
                               const SftOptions& options);

}  // namespace headroom
