// SftPreparation: the options, chat template and special tokens SFT rows are prepared with.
#include "train/sft_preparation.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "train/training_arguments.h"

namespace headroom {

SftRowOptions sft_row_options(const TrainingArguments& args) {
  return {args.dataset_text_field, args.chat_template_path, args.completion_only_loss,
          args.assistant_only_loss, args.eos_token};
}

SftPreparation::SftPreparation(const SftRowOptions& options, const std::string& model_dir,
                               const Tokenizer& tokenizer, int64_t max_length, bool packing)
    : tokenizer_(tokenizer) {
  namespace fs = std::filesystem;
  if (!model_dir.empty()) chat_.special_tokens = read_special_tokens(model_dir);
  const std::string& override_path = options.chat_template_path;
  if (!override_path.empty() || !model_dir.empty()) {
    try {
      ChatTemplateSource source =
          fs::is_directory(override_path)
              ? load_chat_template(override_path)
              : load_chat_template(
                    model_dir, std::nullopt, false,
                    override_path.empty() ? std::nullopt : std::optional(override_path));
      chat_template_ =
          std::make_unique<ChatTemplate>(std::move(source.text), std::move(source.origin));
      chat_.chat_template = chat_template_.get();
    } catch (const ValueError& e) {
      // The model may have no template: only conversations need one, and they say so.
      if (!override_path.empty()) throw ValueError(str_cat("chat_template_path: ", e.what()));
    }
  }
  options_.dataset_text_field = options.dataset_text_field;
  options_.completion_only_loss = options.completion_only_loss;
  options_.assistant_only_loss = options.assistant_only_loss;
  options_.max_length = max_length;
  options_.packing = packing;
  if (!options.eos_token.empty()) {
    // TRL refuses an eos_token not in the vocabulary.
    if (tokenizer.encode(options.eos_token).size() != 1) {
      throw ValueError(str_cat("eos_token: '", options.eos_token,
                               "' is not one token of the model's tokenizer"));
    }
    options_.eos_token = options.eos_token;
  }
}

SftDataset SftPreparation::prepare(const std::vector<SftRow>& rows, const std::string& path) const {
  SftDataset dataset = prepare_sft_dataset(rows, path, tokenizer_, chat_, options_);
  if (dataset.dropped > 0) {
    std::fprintf(stderr,
                 "headroom: warning: data '%s': %lld of %zu rows had no scored token left after "
                 "truncation to max_length %lld and were dropped, as TRL drops them\n",
                 path.c_str(), static_cast<long long>(dataset.dropped), rows.size(),
                 static_cast<long long>(options_.max_length.value_or(0)));
  }
  return dataset;
}

}  // namespace headroom
