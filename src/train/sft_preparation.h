// What `headroom train` and `headroom eval` make of rows of SFT data: TRL's options, the chat
// template (the model directory's, or chat_template_path's) with the tokenizer's special tokens,
// and the rows prepared (data/sft_dataset.h) with a warning for those dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sft_dataset.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace headroom {

struct TrainingArguments;

// TRL's SFTConfig options that decide what a row becomes (TrainingArguments' fields of the same
// names; `headroom eval` takes them too).
struct SftRowOptions {
  std::string dataset_text_field = "text";
  std::string chat_template_path;  // a .jinja file or a directory with a template; "": the model's
  std::optional<bool> completion_only_loss = std::nullopt;
  bool assistant_only_loss = false;
  std::string eos_token;  // "": the tokenizer's
};
SftRowOptions sft_row_options(const TrainingArguments& args);

class SftPreparation {
 public:
  // `model_dir`: the model's directory ("" for a preset: no template, no special tokens).
  // `max_length`: the truncation length (packing: none here, the packer cuts). ValueError when
  // chat_template_path has no template, or eos_token is not one token of `tokenizer`.
  SftPreparation(const SftRowOptions& options, const std::string& model_dir,
                 const Tokenizer& tokenizer, int64_t max_length, bool packing);

  // `rows` of `path` prepared; a warning on stderr names the rows dropped by truncation.
  SftDataset prepare(const std::vector<SftRow>& rows, const std::string& path) const;

 private:
  const Tokenizer& tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  SftChat chat_;
  SftOptions options_;
};

}  // namespace headroom
