// make_optimizer: HF optim names to optimizers.
#include "optim/optimizer_factory.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/error.h"
#include "core/text_value.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw_8bit.h"
#include "optim/lion.h"
#include "optim/lion_8bit.h"
#include "optim/lomo.h"
#include "optim/sgd.h"

namespace headroom {

namespace {

// Every optim_args key must be consumed by the optimizer it names.
void check_no_extras(const std::string& optim, const std::map<std::string, std::string>& extras) {
  if (!extras.empty()) {
    throw ValueError(
        str_cat("optim_args: '", extras.begin()->first, "' is not an option of ", optim));
  }
}

// The Adam options HF passes from TrainingArguments: lr, betas, eps and weight_decay.
template <typename Options>
Options adam_options(const OptimizerArguments& args) {
  check_no_extras(args.optim, parse_optim_args(args.optim_args));
  Options options;
  options.lr = args.learning_rate;
  options.beta1 = args.adam_beta1;
  options.beta2 = args.adam_beta2;
  options.eps = args.adam_epsilon;
  options.weight_decay = args.weight_decay;
  return options;
}

AdamWOptions adamw_options(const OptimizerArguments& args, DType state_dtype) {
  AdamWOptions options = adam_options<AdamWOptions>(args);
  options.state_dtype = state_dtype;
  options.kahan_summation = args.kahan_summation;
  options.rounding_seed = args.seed ^ 0x5eedull;
  return options;
}

// Takes `key` out of `extras`, if present, and parses it: a number, or a Python bool.
std::optional<std::string> take(std::map<std::string, std::string>& extras,
                                const std::string& key) {
  const auto it = extras.find(key);
  if (it == extras.end()) return std::nullopt;
  std::string text = std::move(it->second);
  extras.erase(it);
  return text;
}

std::optional<double> take_number(const std::string& optim,
                                  std::map<std::string, std::string>& extras,
                                  const std::string& key) {
  const std::optional<std::string> text = take(extras, key);
  if (!text) return std::nullopt;
  const std::optional<double> value = whole_number<double>(*text);
  if (!value) {
    throw ValueError(str_cat("optim_args: ", key, "=", *text, " is not a number (", optim, ")"));
  }
  return value;
}

std::optional<bool> take_bool(const std::string& optim, std::map<std::string, std::string>& extras,
                              const std::string& key) {
  const std::optional<std::string> text = take(extras, key);
  if (!text) return std::nullopt;
  // HF reads optim_args booleans with strtobool: True/False and its other words.
  if (const std::optional<bool> value = bool_word(*text)) return value;
  throw ValueError(str_cat("optim_args: ", key, "=", *text, " is not True or False (", optim, ")"));
}

// HF's sgd: torch.optim.SGD with learning_rate; momentum 0 unless optim_args sets it.
SGDOptions sgd_options(const OptimizerArguments& args) {
  auto extras = parse_optim_args(args.optim_args);
  SGDOptions options;
  options.lr = args.learning_rate;
  options.weight_decay = args.weight_decay;
  options.momentum = take_number(args.optim, extras, "momentum").value_or(0.0);
  options.dampening = take_number(args.optim, extras, "dampening").value_or(0.0);
  options.nesterov = take_bool(args.optim, extras, "nesterov").value_or(false);
  check_no_extras(args.optim, extras);
  return options;
}

// HF's lion_32bit: betas from adam_beta1 / adam_beta2.
LionOptions lion_options(const OptimizerArguments& args) {
  check_no_extras(args.optim, parse_optim_args(args.optim_args));
  return LionOptions{.lr = args.learning_rate,
                     .beta1 = args.adam_beta1,
                     .beta2 = args.adam_beta2,
                     .weight_decay = args.weight_decay};
}

// HF's lion_8bit: bitsandbytes' Lion with optim_bits=8, betas from adam_beta1 / adam_beta2.
Lion8bitOptions lion_8bit_options(const OptimizerArguments& args) {
  check_no_extras(args.optim, parse_optim_args(args.optim_args));
  return Lion8bitOptions{.lr = args.learning_rate,
                         .beta1 = args.adam_beta1,
                         .beta2 = args.adam_beta2,
                         .weight_decay = args.weight_decay};
}

// HF Trainer's adafactor: scale_parameter and relative_step off, lr = learning_rate; optim_args
// may set HF's Adafactor options (relative_step=True drops the lr, as HF requires).
AdafactorOptions adafactor_options(const OptimizerArguments& args) {
  auto extras = parse_optim_args(args.optim_args);
  AdafactorOptions options;
  options.lr = args.learning_rate;
  options.weight_decay = args.weight_decay;
  options.scale_parameter = take_bool(args.optim, extras, "scale_parameter").value_or(false);
  options.relative_step = take_bool(args.optim, extras, "relative_step").value_or(false);
  options.warmup_init = take_bool(args.optim, extras, "warmup_init").value_or(false);
  if (options.relative_step) options.lr.reset();
  options.eps1 = take_number(args.optim, extras, "eps1").value_or(options.eps1);
  options.eps2 = take_number(args.optim, extras, "eps2").value_or(options.eps2);
  options.clip_threshold =
      take_number(args.optim, extras, "clip_threshold").value_or(options.clip_threshold);
  options.decay_rate = take_number(args.optim, extras, "decay_rate").value_or(options.decay_rate);
  options.beta1 = take_number(args.optim, extras, "beta1");
  check_no_extras(args.optim, extras);
  return options;
}

// HF's lomo: Lomo with learning_rate and weight_decay; clipping from optim_args.
LomoOptions lomo_options(const OptimizerArguments& args) {
  auto extras = parse_optim_args(args.optim_args);
  LomoOptions options{.lr = args.learning_rate, .weight_decay = args.weight_decay};
  options.clip_grad_norm = take_number(args.optim, extras, "clip_grad_norm");
  options.clip_grad_value = take_number(args.optim, extras, "clip_grad_value");
  check_no_extras(args.optim, extras);
  return options;
}

// The table of `optim` names: HF's spellings, aliases after the name they stand for.
struct NamedKind {
  const char* name;
  OptimizerKind kind;
};
constexpr NamedKind kOptimizerNames[] = {{"adamw_torch", OptimizerKind::adamw},
                                         {"adamw_torch_fused", OptimizerKind::adamw},
                                         {"adamw_bf16", OptimizerKind::adamw_bf16},
                                         {"adamw_8bit", OptimizerKind::adamw_8bit},
                                         {"adamw_bnb_8bit", OptimizerKind::adamw_8bit},
                                         {"sgd", OptimizerKind::sgd},
                                         {"lion", OptimizerKind::lion},
                                         {"lion_32bit", OptimizerKind::lion},
                                         {"lion_8bit", OptimizerKind::lion_8bit},
                                         {"adafactor", OptimizerKind::adafactor},
                                         {"lomo", OptimizerKind::lomo}};

}  // namespace

std::vector<std::string> optimizer_names() {
  // adamw_torch_fused is accepted but not listed: it is adamw_torch here.
  std::vector<std::string> names;
  for (const NamedKind& entry : kOptimizerNames) {
    if (std::string_view(entry.name) != "adamw_torch_fused") names.emplace_back(entry.name);
  }
  return names;
}

OptimizerKind parse_optimizer_kind(const std::string& optim) {
  for (const NamedKind& entry : kOptimizerNames) {
    if (optim == entry.name) return entry.kind;
  }
  std::string known;
  for (const std::string& name : optimizer_names()) known += (known.empty() ? "" : ", ") + name;
  throw ValueError(str_cat("optim: unknown optimizer '", optim, "' (one of ", known, ")"));
}

const char* optimizer_kind_name(OptimizerKind kind) {
  for (const NamedKind& entry : kOptimizerNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "?";
}

bool updates_in_backward(OptimizerKind kind) { return kind == OptimizerKind::lomo; }

std::map<std::string, std::string> parse_optim_args(const std::string& optim_args) {
  std::map<std::string, std::string> result;
  size_t start = 0;
  while (start < optim_args.size()) {
    size_t end = optim_args.find(',', start);
    if (end == std::string::npos) end = optim_args.size();
    const std::string entry = optim_args.substr(start, end - start);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ValueError(str_cat("optim_args: entry '", entry, "' is not key=value"));
    }
    auto trim = [](std::string text) {
      const size_t first = text.find_first_not_of(" \t");
      const size_t last = text.find_last_not_of(" \t");
      return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
    };
    result[trim(entry.substr(0, eq))] = trim(entry.substr(eq + 1));
    start = end + 1;
  }
  return result;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerArguments& args,
                                          const std::vector<NamedTensor>& named_params) {
  const OptimizerKind kind = parse_optimizer_kind(args.optim);
  std::vector<ParamGroup> groups = weight_decay_param_groups(named_params, args.weight_decay);
  if (args.kahan_summation && kind != OptimizerKind::adamw && kind != OptimizerKind::adamw_bf16) {
    // Note [Precision recipes]: the Kahan update is AdamW's; silently rounding instead would
    // hand back another recipe than the one asked for.
    throw ValueError(str_cat("optim ", args.optim,
                             " has no Kahan-compensated update (precision "
                             "pure_bf16+kahan is for adamw_torch; use pure_bf16 with ",
                             args.optim, ")"));
  }
  switch (kind) {
    case OptimizerKind::adamw:
      return std::make_unique<AdamW>(std::move(groups), adamw_options(args, DType::f32));
    case OptimizerKind::adamw_bf16:
      return std::make_unique<AdamW>(std::move(groups), adamw_options(args, DType::bf16));
    case OptimizerKind::adamw_8bit:  // bitsandbytes' AdamW8bit, as HF builds it
      return std::make_unique<AdamW8bit>(std::move(groups), adam_options<AdamW8bitOptions>(args));
    case OptimizerKind::sgd:
      return std::make_unique<SGD>(std::move(groups), sgd_options(args));
    case OptimizerKind::lion:
      return std::make_unique<Lion>(std::move(groups), lion_options(args));
    case OptimizerKind::lion_8bit:
      return std::make_unique<Lion8bit>(std::move(groups), lion_8bit_options(args));
    case OptimizerKind::adafactor:
      return std::make_unique<Adafactor>(std::move(groups), adafactor_options(args));
    case OptimizerKind::lomo:
      return std::make_unique<Lomo>(std::move(groups), lomo_options(args));
  }
  throw std::logic_error("make_optimizer: an OptimizerKind without a case");
}

std::vector<StateTensor> optimizer_state_layout(const OptimizerArguments& args, const Shape& shape,
                                                DType param_dtype) {
  switch (parse_optimizer_kind(args.optim)) {
    case OptimizerKind::adamw:
      return AdamW::state_layout(shape, param_dtype, adamw_options(args, DType::f32));
    case OptimizerKind::adamw_bf16:
      return AdamW::state_layout(shape, param_dtype, adamw_options(args, DType::bf16));
    case OptimizerKind::adamw_8bit:
      return AdamW8bit::state_layout(shape, adam_options<AdamW8bitOptions>(args));
    case OptimizerKind::sgd:
      return SGD::state_layout(shape, sgd_options(args));
    case OptimizerKind::lion:
      return Lion::state_layout(shape, lion_options(args));
    case OptimizerKind::lion_8bit:
      return Lion8bit::state_layout(shape, lion_8bit_options(args));
    case OptimizerKind::adafactor:
      return Adafactor::state_layout(shape, adafactor_options(args));
    case OptimizerKind::lomo:
      lomo_options(args);
      return {};  // updates in backward, keeps none
  }
  throw std::logic_error("optimizer_state_layout: an OptimizerKind without a case");
}

}  // namespace headroom
