// The `optim` option: builds an optimizer from its HF name and TrainingArguments-style options,
// over a model's parameters split into weight-decayed and not-decayed groups as HF Trainer does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// The fields of HF TrainingArguments an optimizer is built from, with their defaults.
struct OptimizerArguments {
  std::string optim = "adamw_torch";
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  // HF's `optim_args`: "key=value,key=value" extras for the chosen optimizer (e.g.
  // "momentum=0.9,nesterov=True" for sgd); a key the optimizer does not know is a ValueError.
  std::string optim_args = "";
  // From the precision recipe, for low-precision (pure bf16) parameters: Kahan-compensated
  // updates instead of stochastic rounding (AdamW's; a ValueError for the other optimizers),
  // and the rounding stream's seed.
  bool kahan_summation = false;
  uint64_t seed = 0;
};

// The optimizers `optim` names (HF's aliases map to one: adamw_torch_fused is adamw,
// adamw_bnb_8bit adamw_8bit, lion_32bit lion).
enum class OptimizerKind { adamw, adamw_bf16, adamw_8bit, sgd, lion, lion_8bit, adafactor, lomo };

// The names `optim` accepts, in the order --help lists them.
std::vector<std::string> optimizer_names();

// The optimizer an `optim` name means; ValueError "optim: unknown optimizer ..." listing the names.
OptimizerKind parse_optimizer_kind(const std::string& optim);

// The name HF's `optim` gives `kind` (its first spelling in optimizer_names()).
const char* optimizer_kind_name(OptimizerKind kind);

// Whether `kind` updates each parameter inside backward (LOMO) and keeps no gradients.
bool updates_in_backward(OptimizerKind kind);

// HF's optim_args parsed: "a=1,b=True" -> {a: "1", b: "True"}. ValueError for an entry without '='.
std::map<std::string, std::string> parse_optim_args(const std::string& optim_args);

// The optimizer `args.optim` over `named_params` (decay groups as weight_decay_param_groups).
// ValueError naming the option for an unknown name or a bad optim_args entry.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerArguments& args,
                                          const std::vector<NamedTensor>& named_params);

// The state tensors make_optimizer(args, ...)'s optimizer allocates for a parameter of `shape`
// and `param_dtype` once it has stepped (each optimizer's state_layout). Errors as
// make_optimizer's for a bad name or optim_args.
std::vector<StateTensor> optimizer_state_layout(const OptimizerArguments& args, const Shape& shape,
                                                DType param_dtype);

}  // namespace headroom
