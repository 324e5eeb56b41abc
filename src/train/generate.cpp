// generate(): the forward pass over the trailing context, the last position's logits, one draw.
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "amp/autocast.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "nn/model_presets.h"

namespace headroom {

namespace {

int32_t pick_token(const std::vector<float>& logits, const GenerationOptions& options,
                   Generator& generator) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (options.temperature == 0.0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const int32_t k =
      options.top_k > 0 ? static_cast<int32_t>(std::min<int64_t>(options.top_k, vocab)) : vocab;
  // Ties keep the lower id first, so the candidates do not depend on the sort's internals.
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  const double top = logits[static_cast<size_t>(ids[0])];
  std::vector<double> weights(static_cast<size_t>(k));
  double total = 0.0;
  for (int32_t i = 0; i < k; ++i) {
    const double logit = logits[static_cast<size_t>(ids[static_cast<size_t>(i)])];
    weights[static_cast<size_t>(i)] = std::exp((logit - top) / options.temperature);
    total += weights[static_cast<size_t>(i)];
  }
  const PhiloxState state = generator.reserve(1);
  const double u = philox_uniform01(philox_block(state.seed, state.offset).word[0]) * total;
  double cumulative = 0.0;
  for (int32_t i = 0; i < k; ++i) {
    cumulative += weights[static_cast<size_t>(i)];
    if (u < cumulative) return ids[static_cast<size_t>(i)];
  }
  return ids[static_cast<size_t>(k - 1)];
}

}  // namespace

std::vector<int32_t> generate(CausalLM& model, const std::vector<int32_t>& prompt,
                              const GenerationOptions& options) {
  if (prompt.empty()) throw ValueError("generate: the prompt has no tokens");
  if (options.temperature < 0.0 || options.top_k < 0) {
    throw ValueError(str_cat("generate: temperature ", options.temperature, " and top_k ",
                             options.top_k, " must be >= 0"));
  }
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Generator generator(options.seed);
  const Device device = model.parameters().front().device();
  const int64_t context = context_length(model.config());
  std::vector<int32_t> ids = prompt;
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    if (options.stop && options.stop()) break;
    const size_t start = ids.size() > static_cast<size_t>(context) ? ids.size() - context : 0;
    const std::vector<int64_t> window(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.end());
    const int64_t t = static_cast<int64_t>(window.size());
    Tensor input = Tensor::from_ints(window, {1, t});
    if (!device.is_cpu()) input = input.to(device);
    std::vector<float> last;
    {
      Autocast region(device.type, options.autocast_dtype, options.autocast_dtype.has_value());
      last = model.forward(input).narrow(1, t - 1, 1).to_float_vector();
    }
    ids.push_back(pick_token(last, options, generator));
  }
  model.train(was_training);
  return ids;
}

}  // namespace headroom
