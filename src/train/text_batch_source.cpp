// TextBatchSource: read, tokenize, pack, split, shuffle — the least a training run needs.
#include "train/text_batch_source.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/philox.h"
#include "io/json_file.h"
#include "train/training_arguments.h"

namespace headroom {

namespace {

void append_document(std::vector<int32_t>& tokens, const std::vector<int32_t>& document,
                     const Tokenizer& tokenizer) {
  if (document.empty()) return;
  if (!tokens.empty() && tokenizer.eos_token_id()) tokens.push_back(*tokenizer.eos_token_id());
  tokens.insert(tokens.end(), document.begin(), document.end());
}

void tokenize_file(const std::filesystem::path& path, const Tokenizer& tokenizer,
                   std::vector<int32_t>& tokens) {
  const std::string text = read_text_file(path.string());
  if (path.extension() != ".jsonl") {
    append_document(tokens, tokenizer.encode(text), tokenizer);
    return;
  }
  size_t start = 0;
  for (int64_t line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string source = str_cat(path.string(), ":", line_number);
    const nlohmann::json record = parse_json(line, source);
    if (!record.is_object() || !record.contains("text") || !record["text"].is_string()) {
      throw ValueError(str_cat(source, ": expected an object with a string \"text\", got ",
                               describe_json(record)));
    }
    append_document(tokens, tokenizer.encode(record["text"].get<std::string>()), tokenizer);
  }
}

Tensor ids_tensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols, Device device) {
  Tensor cpu = Tensor::from_ints(values, {rows, cols});
  return device.is_cpu() ? cpu : cpu.to(device);
}

}  // namespace

std::vector<int32_t> tokenize_data(const std::string& path, const Tokenizer& tokenizer) {
  namespace fs = std::filesystem;
  std::vector<int32_t> tokens;
  if (fs::is_directory(path)) {
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) tokenize_file(file, tokenizer, tokens);
  } else {
    if (!fs::exists(path)) throw ValueError(str_cat("data: '", path, "' does not exist"));
    tokenize_file(path, tokenizer, tokens);
  }
  if (tokens.empty()) throw ValueError(str_cat("data: '", path, "' holds no text"));
  return tokens;
}

TextBatchSource::TextBatchSource(std::vector<int32_t> tokens,
                                 const TextBatchSourceOptions& options)
    : tokens_(std::move(tokens)), options_(options) {
  if (options_.window < 2 || options_.batch_size < 1) {
    throw ValueError(str_cat("TextBatchSource: window ", options_.window, " (min 2) and batch ",
                             options_.batch_size, " (min 1)"));
  }
  if (options_.validation_split_percentage < 0.0 || options_.validation_split_percentage >= 100.0) {
    throw ValueError(str_cat("validation_split_percentage: ", options_.validation_split_percentage,
                             " is outside [0, 100)"));
  }
  const int64_t windows = static_cast<int64_t>(tokens_.size()) / options_.window;
  eval_windows_ = static_cast<int64_t>(windows * options_.validation_split_percentage / 100.0);
  if (eval_windows_ == 0 && options_.validation_split_percentage > 0.0 && windows >= 2) {
    eval_windows_ = 1;
  }
  train_windows_ = windows - eval_windows_;
  if (train_windows_ < 1 || (options_.drop_last && train_windows_ < options_.batch_size)) {
    throw ValueError(str_cat(options_.source_name, ": ", tokens_.size(), " tokens make ",
                             train_windows_, " training windows of ", options_.window,
                             " tokens (max_seq_length + 1), ", eval_windows_,
                             " held out; need at least ",
                             options_.drop_last ? options_.batch_size : 1));
  }
  order_ = epoch_order(0);
}

std::vector<int64_t> TextBatchSource::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(train_windows_));
  for (int64_t i = 0; i < train_windows_; ++i) order[static_cast<size_t>(i)] = i;
  const uint64_t base = static_cast<uint64_t>(epoch) << 32;
  for (int64_t i = train_windows_ - 1; i > 0; --i) {
    const Philox4x32Block block = philox_block(options_.seed, base + static_cast<uint64_t>(i));
    const uint64_t draw = (static_cast<uint64_t>(block.word[0]) << 32) | block.word[1];
    const int64_t j = static_cast<int64_t>(draw % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

int64_t TextBatchSource::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? train_windows_ / b : (train_windows_ + b - 1) / b;
}

TokenBatch TextBatchSource::make_batch(const std::vector<int64_t>& windows) const {
  const int64_t rows = static_cast<int64_t>(windows.size()), t = options_.window - 1;
  std::vector<int64_t> ids, labels;
  ids.reserve(static_cast<size_t>(rows * t));
  labels.reserve(static_cast<size_t>(rows * t));
  for (int64_t w : windows) {
    const int32_t* start = tokens_.data() + w * options_.window;
    ids.insert(ids.end(), start, start + t);
    labels.insert(labels.end(), start + 1, start + t + 1);
  }
  return {ids_tensor(ids, rows, t, options_.device), ids_tensor(labels, rows, t, options_.device)};
}

TokenBatch TextBatchSource::next_batch() {
  if (batch_in_epoch_ >= batches_per_epoch()) {
    ++epoch_;
    batch_in_epoch_ = 0;
    order_ = epoch_order(epoch_);
  }
  const int64_t first = batch_in_epoch_ * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, train_windows_ - first);
  std::vector<int64_t> windows(order_.begin() + first, order_.begin() + first + count);
  ++batch_in_epoch_;
  ++consumed_;
  return make_batch(windows);
}

int64_t TextBatchSource::eval_batch_count(int64_t batch_size) const {
  return (eval_windows_ + batch_size - 1) / batch_size;
}

TokenBatch TextBatchSource::eval_batch(int64_t index, int64_t batch_size) const {
  const int64_t first = index * batch_size;
  if (index < 0 || first >= eval_windows_) {
    throw IndexError(str_cat("eval_batch: batch ", index, " of ", eval_batch_count(batch_size)));
  }
  std::vector<int64_t> windows;
  for (int64_t w = first; w < std::min(first + batch_size, eval_windows_); ++w) {
    windows.push_back(train_windows_ + w);
  }
  return make_batch(windows);
}

nlohmann::json TextBatchSource::state_dict() const {
  return {{"epoch", epoch_},
          {"batch_in_epoch", batch_in_epoch_},
          {"batches_consumed", consumed_},
          {"seed", options_.seed},
          {"train_windows", train_windows_}};
}

void TextBatchSource::load_state_dict(const nlohmann::json& state) {
  auto get = [&](const char* key) -> int64_t {
    if (!state.is_object() || !state.contains(key) || !state[key].is_number_integer()) {
      throw ValueError(str_cat("data state: '", key, "' is missing or not an integer"));
    }
    return state[key].get<int64_t>();
  };
  if (static_cast<uint64_t>(get("seed")) != options_.seed) {
    throw ValueError(str_cat("data state: seed ", get("seed"), " differs from this run's ",
                             options_.seed));
  }
  if (get("train_windows") != train_windows_) {
    throw ValueError(str_cat("data state: train_windows ", get("train_windows"),
                             " differs from this run's ", train_windows_,
                             " (other data or max_seq_length)"));
  }
  const int64_t epoch = get("epoch"), batch = get("batch_in_epoch"),
                consumed = get("batches_consumed");
  if (epoch < 0 || batch < 0 || batch > batches_per_epoch() || consumed < 0) {
    throw ValueError(str_cat("data state: epoch ", epoch, " / batch_in_epoch ", batch,
                             " out of range (", batches_per_epoch(), " batches per epoch)"));
  }
  epoch_ = epoch;
  batch_in_epoch_ = batch;
  consumed_ = consumed;
  order_ = epoch_order(epoch_);
}

std::unique_ptr<BatchSource> make_text_batch_source(const TrainingArguments& args,
                                                    const Tokenizer& tokenizer, int64_t window,
                                                    Device device) {
  TextBatchSourceOptions options;
  options.window = window;
  options.batch_size = args.per_device_train_batch_size;
  options.validation_split_percentage = args.validation_split_percentage;
  options.seed = static_cast<uint64_t>(args.data_seed.value_or(args.seed));
  options.drop_last = args.dataloader_drop_last;
  options.device = device;
  options.source_name = str_cat("data '", args.data, "'");
  return std::make_unique<TextBatchSource>(tokenize_data(args.data, tokenizer), options);
}

}  // namespace headroom
