// evaluate_batches and `headroom eval`'s evaluate_file.
#include "train/evaluation.h"

#include <cmath>
#include <filesystem>
#include <memory>

#include "amp/autocast.h"
#include "core/error.h"
#include "nn/model_presets.h"
#include "io/safetensors.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "data/data_loader.h"
#include "data/packed_sequences.h"
#include "data/sft_examples.h"
#include "data/token_corpus.h"
#include "io/pretrained.h"
#include "peft/lora_model.h"
#include "train/checksums.h"
#include "train/model_source.h"
#include "train/sft_preparation.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

// A scalar's value for the log; NaN on the meta device, which has no values (a dry run).
double host_value(const Tensor& scalar) {
  count_skipped_host_read(scalar);
  return scalar.device().is_meta() ? NAN : scalar.item();
}

}  // namespace

EvalResult evaluate_batches(CausalLM& model, int64_t count,
                            const std::function<TokenBatch(int64_t)>& batch_at, Device device,
                            std::optional<DType> autocast_dtype) {
  EvalResult result;
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  double total = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const TokenBatch batch = batch_at(i);
    Autocast region(device.type, autocast_dtype, autocast_dtype.has_value());
    const SequenceBoundaries sequences =
        make_sequence_boundaries(batch.cu_seqlens, batch.input_ids.size(0), batch.input_ids.size(1),
                                 batch.input_ids.device());
    const double loss =
        host_value(model.loss(batch.input_ids, batch.targets, batch.target_count, sequences));
    // A batch's mean is over its scored targets, which weigh it (a window of plain text scores
    // every one); a batch with none adds nothing.
    const int64_t tokens = batch.target_count >= 0 ? batch.target_count : batch.targets.numel();
    if (tokens == 0) continue;
    total += loss * static_cast<double>(tokens);
    result.tokens += tokens;
  }
  model.train(was_training);
  result.loss = result.tokens > 0 ? total / static_cast<double>(result.tokens) : NAN;
  result.perplexity = std::exp(result.loss);
  return result;
}

EvalResult evaluate_file(const AdapterBaseRequest& request, const std::string& data,
                         int64_t max_seq_length, int64_t batch_size, const std::string& device,
                         const std::string& adapter, const SftRowOptions& rows) {
  if (batch_size < 1) throw ValueError(str_cat("batch_size: ", batch_size, " is below 1"));
  const Device target = resolve_device(device);
  const AdapterBase base = resolve_adapter_base(request, adapter);
  if (!base.preset) {
    // Training may start from a config alone (HF initialises the weights); scoring such a model
    // would report a random model's loss as this directory's, but for an adapter trained on
    // that draw (its record names the seed).
    const fs::path dir(base.model);
    const bool drawn = !adapter.empty() && read_adapter_base(adapter);
    if (!base.weights_loaded && !drawn) {
      throw ValueError(str_cat("model: directory '", base.model, "' has no weights (",
                               (dir / kSafetensorsWeightsName).string(), " or ",
                               kSafetensorsIndexName, " is missing): nothing to evaluate"));
    }
    verify_checkpoint_checksums(base.model);  // a checkpoint's files as they were saved
  }
  // An adapter checkpoint's files as they were saved, as a model checkpoint's.
  if (!adapter.empty()) verify_checkpoint_checksums(adapter);
  ModelAndTokenizer loaded = load_adapter_base(base, target);
  // Made as training made it (a bf16 frozen base, say), scored in fp32: the conversion is exact,
  // and the adapters then load in fp32 as training keeps them under autocast.
  loaded.model->to(DType::f32);
  if (!adapter.empty()) load_lora_adapter(*loaded.model, adapter, DType::f32);
  const int64_t context = context_length(loaded.model->config());
  const int64_t t = max_seq_length > 0 ? max_seq_length : context;
  check_max_seq_length(loaded.model->config(), t);
  std::shared_ptr<const ExampleSet> examples;
  if (is_row_data(data)) {
    // Each row an example, as training takes it (Note [TRL's SFT preparation]), padded.
    const std::string model_dir = fs::is_directory(base.model) ? base.model : "";
    const SftPreparation preparation(rows, model_dir, *loaded.tokenizer, t, /*packing=*/false);
    SftDataset dataset = preparation.prepare(read_sft_rows(data), data);
    if (dataset.examples.empty()) {
      throw ValueError(str_cat("data '", data, "': no row is left to score"));
    }
    examples = std::make_shared<const SftExamples>(
        std::move(dataset.examples),
        SftBatching{.pad_id = loaded.tokenizer->eos_token_id().value_or(0)});
  } else {
    // No token cache: eval writes nothing, and has no output_dir to put one in.
    const std::shared_ptr<const TokenCorpus> tokens = load_token_corpus(data, *loaded.tokenizer);
    // Consecutive, disjoint windows of T + 1 tokens, unlike training's sequences, which advance
    // by T (Note [Packing and the eval split]): this is what `headroom eval` specifies.
    const int64_t window = t + 1;
    PackedSequences windows(tokens, 0, tokens->size(), t, /*stride=*/window);
    if (windows.empty()) {
      throw ValueError(str_cat("data '", data, "': ", tokens->size(),
                               " tokens, fewer than one window of ", window,
                               " (max_seq_length + 1)"));
    }
    examples = std::make_shared<const WindowExamples>(std::move(windows));
  }
  const DataLoader loader(examples, {.batch_size = batch_size, .shuffle = false});
  auto batch_at = [&](int64_t index) {
    TokenBatch batch = loader.batch_at(0, index);
    if (!target.is_cpu()) {
      batch = {batch.input_ids.to(target), batch.targets.to(target), batch.target_count,
               std::move(batch.cu_seqlens), batch.varying_targets};
    }
    return batch;
  };
  return evaluate_batches(*loaded.model, loader.size(), batch_at, target, std::nullopt);
}

}  // namespace headroom
