// TRL's SFT dataset preparation (Note [TRL's SFT preparation]): rows, formats, tokens, labels.
#include "data/sft_dataset.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/json_file.h"
#include "data/text_source.h"

namespace headroom {

namespace {

namespace fs = std::filesystem;

bool is_row_file(const std::string& path) {
  const fs::path extension = fs::path(path).extension();
  return extension == ".jsonl" || extension == ".json";
}

std::string where(const SftRow& row) { return str_cat(row.file, ":", row.line); }

// data_utils.is_conversational: the first of the format keys the row has holds a list of
// objects with a "role".
bool is_conversational(const nlohmann::ordered_json& row) {
  for (const char* key : {"prompt", "completion", "messages"}) {
    const auto it = row.find(key);
    if (it == row.end()) continue;
    return it->is_array() && !it->empty() && (*it)[0].is_object() && (*it)[0].contains("role");
  }
  return false;
}

// maybe_convert_to_chatml: ShareGPT's {"from", "value"} turns as {"role", "content"}.
nlohmann::ordered_json chatml_messages(const nlohmann::ordered_json& conversations,
                                       const SftRow& row) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const auto& turn : conversations) {
    if (!turn.is_object() || !turn.contains("from") || !turn.contains("value")) {
      throw ValueError(str_cat(where(row), ": \"conversations\" holds ", describe_json(turn),
                               ", not an object with \"from\" and \"value\""));
    }
    const std::string from = turn["from"].is_string() ? turn["from"].get<std::string>() : "";
    const std::string role = from == "human" ? "user" : from == "gpt" ? "assistant" : from;
    messages.push_back({{"role", role}, {"content", turn["value"]}});
  }
  return messages;
}

const nlohmann::ordered_json& field(const SftRow& row, const std::string& name, SftFormat format) {
  const auto it = row.value.find(name);
  if (it == row.value.end() || it->is_null()) {
    throw ValueError(str_cat(where(row), ": the row has no \"", name, "\" field, which the ",
                             sft_format_name(format), " data of the first row needs"));
  }
  return *it;
}

const std::string& string_field(const SftRow& row, const std::string& name, SftFormat format) {
  const nlohmann::ordered_json& value = field(row, name, format);
  if (!value.is_string()) {
    throw ValueError(str_cat(where(row), ": \"", name, "\" is ", describe_json(value),
                             ", not a string (", sft_format_name(format), " data)"));
  }
  return value.get_ref<const std::string&>();
}

const nlohmann::ordered_json& messages_field(const SftRow& row, const std::string& name,
                                             SftFormat format) {
  const nlohmann::ordered_json& value = field(row, name, format);
  if (!value.is_array() || value.empty()) {
    throw ValueError(str_cat(where(row), ": \"", name, "\" is ", describe_json(value),
                             ", not a list of messages (", sft_format_name(format), " data)"));
  }
  for (const auto& message : value) {
    if (!message.is_object() || !message.contains("role")) {
      throw ValueError(str_cat(where(row), ": \"", name, "\" holds ", describe_json(message),
                               ", not a message with a \"role\""));
    }
  }
  return value;
}

int64_t common_prefix_length(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto [end_a, end_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return end_a - a.begin();
}

class Preparer {
 public:
  Preparer(const Tokenizer& tokenizer, const SftChat& chat, const SftOptions& options,
           SftFormat format)
      : tokenizer_(tokenizer), chat_(chat), options_(options), format_(format) {
    if (options.eos_token) {
      eos_ = *options.eos_token;
    } else if (const auto it = chat.special_tokens.find("eos_token");
               it != chat.special_tokens.end() && it->is_string()) {
      eos_ = it->get<std::string>();
    }
  }

  // TRL's tokenize_fn and build_labels for one row: input_ids and labels.
  SftExample prepare(const SftRow& source, bool completion_only_loss) const {
    // ShareGPT rows are converted into a copy; the others are read in place.
    std::optional<SftRow> converted;
    if (const auto it = source.value.find("conversations");
        it != source.value.end() && !source.value.contains("messages")) {
      converted = source;
      converted->value["messages"] = chatml_messages(*it, source);
      converted->value.erase("conversations");
    }
    const SftRow& row = converted ? *converted : source;
    std::vector<int32_t> ids;
    std::vector<uint8_t> completion_mask, assistant_mask;
    switch (format_) {
      case SftFormat::language_modeling: {
        if (row.value.contains("messages") && !row.value.contains(options_.dataset_text_field)) {
          throw ValueError(str_cat(where(row), ": the row is a conversation, but the first row ",
                                   "announced language modeling text (\"",
                                   options_.dataset_text_field, "\")"));
        }
        ids = tokenizer_.encode_with_special_tokens(
            with_eos(string_field(row, options_.dataset_text_field, format_)));
        break;
      }
      case SftFormat::prompt_completion: {
        const std::string& prompt = string_field(row, "prompt", format_);
        const std::string completion = with_eos(string_field(row, "completion", format_));
        const std::vector<int32_t> prompt_ids = tokenizer_.encode_with_special_tokens(prompt);
        ids = tokenizer_.encode_with_special_tokens(prompt + completion);
        mark_completion(prompt_ids, ids, completion_mask);
        break;
      }
      case SftFormat::conversational: {
        const nlohmann::ordered_json& messages = messages_field(row, "messages", format_);
        ids =
            render(row, messages, false, options_.assistant_only_loss ? &assistant_mask : nullptr);
        break;
      }
      case SftFormat::conversational_prompt_completion: {
        const nlohmann::ordered_json& prompt = messages_field(row, "prompt", format_);
        const nlohmann::ordered_json& completion = messages_field(row, "completion", format_);
        nlohmann::ordered_json both = prompt;
        for (const auto& message : completion) both.push_back(message);
        const std::vector<int32_t> prompt_ids = render(row, prompt, true, nullptr);
        ids = render(row, both, false, options_.assistant_only_loss ? &assistant_mask : nullptr);
        mark_completion(prompt_ids, ids, completion_mask);
        break;
      }
    }
    if (options_.assistant_only_loss &&
        std::find(assistant_mask.begin(), assistant_mask.end(), 1) == assistant_mask.end()) {
      throw ValueError(str_cat(
          where(row), ": assistant_only_loss, but the row has no assistant tokens: the chat ",
          "template marks none with {% generation %} (", chat_.chat_template->origin(), ")"));
    }
    SftExample example;
    example.input_ids.assign(ids.begin(), ids.end());
    example.labels = example.input_ids;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool outside_completion =
          completion_only_loss && !completion_mask.empty() && completion_mask[i] == 0;
      const bool outside_assistant = !assistant_mask.empty() && assistant_mask[i] == 0;
      if (outside_completion || outside_assistant) example.labels[i] = -100;
    }
    return example;
  }

 private:
  std::string with_eos(const std::string& text) const {
    if (eos_.empty() || text.ends_with(eos_)) return text;
    return text + eos_;
  }

  static void mark_completion(const std::vector<int32_t>& prompt_ids,
                              const std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
    const int64_t prompt_length = common_prefix_length(prompt_ids, ids);
    mask.assign(ids.size(), 1);
    std::fill(mask.begin(), mask.begin() + prompt_length, 0);
  }

  // apply_chat_template(messages, tokenize=True, return_assistant_tokens_mask=...): the template
  // rendered with the row's tools and chat_template_kwargs, tokenised without special tokens;
  // a token is the assistant's when it overlaps a generation span (transformers' rule).
  std::vector<int32_t> render(const SftRow& row, const nlohmann::ordered_json& messages,
                              bool add_generation_prompt, std::vector<uint8_t>* assistant) const {
    if (chat_.chat_template == nullptr) {
      throw ValueError(str_cat(where(row),
                               ": conversational data needs a chat template: the model has none "
                               "(give one with --chat_template FILE)"));
    }
    ChatTemplateInputs inputs;
    inputs.messages = messages;
    inputs.add_generation_prompt = add_generation_prompt;
    inputs.special_tokens = chat_.special_tokens;
    if (const auto tools = row.value.find("tools"); tools != row.value.end() && !tools->is_null()) {
      inputs.tools = tools->is_string() ? parse_ordered_json(tools->get_ref<const std::string&>(),
                                                             str_cat(where(row), ": \"tools\""))
                                        : *tools;
    }
    if (const auto kwargs = row.value.find("chat_template_kwargs");
        kwargs != row.value.end() && kwargs->is_object()) {
      inputs.kwargs = *kwargs;
    }
    ChatTemplateRendering rendering;
    try {
      rendering = apply_chat_template(*chat_.chat_template, inputs);
    } catch (const ChatTemplateRaised& raised) {
      throw ValueError(str_cat(where(row), ": the chat template raised: ", raised.message(), " (",
                               raised.origin(), ":", raised.line(), ")"));
    } catch (const ChatTemplateError& error) {
      throw ValueError(str_cat(where(row), ": ", error.what()));
    }
    std::vector<int32_t> ids = tokenizer_.encode(rendering.text);
    if (assistant != nullptr) {
      assistant->assign(ids.size(), 0);
      std::vector<std::pair<size_t, size_t>> spans = rendering.generation_spans;
      std::sort(spans.begin(), spans.end());
      const std::vector<TokenOffsets> offsets = tokenizer_.offsets(rendering.text, ids);
      size_t span = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        while (span < spans.size() && offsets[i].start >= spans[span].second) ++span;
        if (span == spans.size()) break;
        if (offsets[i].end > spans[span].first) (*assistant)[i] = 1;
      }
    }
    return ids;
  }

  const Tokenizer& tokenizer_;
  const SftChat& chat_;
  const SftOptions& options_;
  SftFormat format_;
  std::string eos_;  // appended to text that is not a conversation
};

}  // namespace

const char* sft_format_name(SftFormat format) {
  switch (format) {
    case SftFormat::language_modeling:
      return "language modeling";
    case SftFormat::prompt_completion:
      return "prompt / completion";
    case SftFormat::conversational:
      return "conversational";
    case SftFormat::conversational_prompt_completion:
      return "conversational prompt / completion";
  }
  return "?";
}

bool is_row_data(const std::string& path, const std::string& output_dir) {
  const std::vector<TextSourceFile> files = list_text_files(path, output_dir);
  const auto rows = std::find_if(files.begin(), files.end(),
                                 [](const TextSourceFile& f) { return is_row_file(f.path); });
  const auto text = std::find_if(files.begin(), files.end(),
                                 [](const TextSourceFile& f) { return !is_row_file(f.path); });
  if (rows != files.end() && text != files.end()) {
    throw ValueError(str_cat("data '", path, "' mixes rows (", rows->path, ") with plain text (",
                             text->path,
                             "): give a directory of .jsonl / .json files or one of text files"));
  }
  return rows != files.end();
}

std::vector<SftRow> read_sft_rows(const std::string& path, const std::string& output_dir) {
  std::vector<SftRow> rows;
  for (const TextSourceFile& file : list_text_files(path, output_dir)) {
    const std::string contents = read_text_file(file.path);
    const auto add = [&](nlohmann::ordered_json value, int64_t line) {
      SftRow row{std::move(value), file.path, line};
      if (!row.value.is_object()) {
        throw ValueError(
            str_cat(where(row), ": the row is ", describe_json(row.value), ", not an object"));
      }
      rows.push_back(std::move(row));
    };
    if (fs::path(file.path).extension() == ".json") {
      nlohmann::ordered_json list = parse_ordered_json(contents, file.path);
      if (!list.is_array()) {
        throw ValueError(
            str_cat(file.path, ": the file holds ", describe_json(list), ", not a list of rows"));
      }
      for (size_t i = 0; i < list.size(); ++i) add(std::move(list[i]), static_cast<int64_t>(i) + 1);
      continue;
    }
    for_each_jsonl_line(contents, [&](std::string_view line, int64_t number) {
      add(parse_ordered_json(line, str_cat(file.path, ":", number)), number);
    });
  }
  return rows;
}

SftFormat detect_sft_format(const SftRow& row, const std::string& dataset_text_field) {
  const nlohmann::ordered_json& value = row.value;
  if (value.contains("conversations") && !value.contains("messages")) {
    return SftFormat::conversational;
  }
  const bool conversational = is_conversational(value);
  if (value.contains("prompt")) {
    return conversational ? SftFormat::conversational_prompt_completion
                          : SftFormat::prompt_completion;
  }
  if (conversational || value.contains("messages")) return SftFormat::conversational;
  if (value.contains(dataset_text_field)) return SftFormat::language_modeling;
  throw ValueError(str_cat(where(row), ": the row has none of \"", dataset_text_field,
                           "\" (dataset_text_field), \"prompt\" / \"completion\", \"messages\" "
                           "or \"conversations\""));
}

SftDataset prepare_sft_dataset(const std::vector<SftRow>& rows, const std::string& source,
                               const Tokenizer& tokenizer, const SftChat& chat,
                               const SftOptions& options) {
  if (rows.empty()) throw ValueError(str_cat("data '", source, "' holds no rows"));
  if (options.max_length && *options.max_length < 1) {
    throw ValueError(str_cat("max_length: ", *options.max_length, " is below 1"));
  }
  SftDataset dataset;
  dataset.source = source;
  dataset.format = detect_sft_format(rows.front(), options.dataset_text_field);
  const bool conversational = dataset.format == SftFormat::conversational ||
                              dataset.format == SftFormat::conversational_prompt_completion;
  const bool prompt_completion = dataset.format == SftFormat::prompt_completion ||
                                 dataset.format == SftFormat::conversational_prompt_completion;
  if (options.assistant_only_loss && !conversational) {
    throw ValueError(str_cat("assistant_only_loss: data '", source, "' is ",
                             sft_format_name(dataset.format),
                             " data; only conversations have assistant turns"));
  }
  // TRL's default: "prompt" and "completion" in the first row.
  dataset.completion_only_loss = options.completion_only_loss.value_or(prompt_completion);
  const Preparer preparer(tokenizer, chat, options, dataset.format);
  for (size_t r = 0; r < rows.size(); ++r) {
    const SftFormat format = detect_sft_format(rows[r], options.dataset_text_field);
    if (format != dataset.format) {
      throw ValueError(str_cat(where(rows[r]), ": the row is ", sft_format_name(format),
                               " data, but the first row (", where(rows.front()), ") announced ",
                               sft_format_name(dataset.format)));
    }
    SftExample example = preparer.prepare(rows[r], dataset.completion_only_loss);
    if (options.max_length && !options.packing) {
      const auto keep = static_cast<size_t>(*options.max_length);
      if (example.input_ids.size() > keep) {
        example.input_ids.resize(keep);
        example.labels.resize(keep);
      }
      if (std::all_of(example.labels.begin(), example.labels.end(),
                      [](int64_t label) { return label == -100; })) {
        ++dataset.dropped;
        continue;
      }
    }
    dataset.examples.push_back(std::move(example));
    dataset.rows.push_back(static_cast<int64_t>(r));
  }
  return dataset;
}

}  // namespace headroom
