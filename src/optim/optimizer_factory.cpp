// make_optimizer: HF optim names to optimizers.
#include "optim/optimizer_factory.h"

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/adamw_8bit.h"

namespace headroom {

namespace {

// Every optim_args key must be consumed by the optimizer it names.
void check_no_extras(const std::string& optim, const std::map<std::string, std::string>& extras) {
  if (!extras.empty()) {
    throw ValueError(str_cat("optim_args: '", extras.begin()->first, "' is not an option of ",
                             optim));
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

std::unique_ptr<Optimizer> make_adamw(const OptimizerArguments& args,
                                      std::vector<ParamGroup> groups, DType state_dtype) {
  AdamWOptions options = adam_options<AdamWOptions>(args);
  options.state_dtype = state_dtype;
  options.kahan_summation = args.kahan_summation;
  options.rounding_seed = args.seed ^ 0x5eedull;
  return std::make_unique<AdamW>(std::move(groups), options);
}

// bitsandbytes' AdamW8bit, as HF builds it for adamw_8bit and adamw_bnb_8bit.
std::unique_ptr<Optimizer> make_adamw_8bit(const OptimizerArguments& args,
                                           std::vector<ParamGroup> groups) {
  return std::make_unique<AdamW8bit>(std::move(groups), adam_options<AdamW8bitOptions>(args));
}

}  // namespace

std::vector<std::string> optimizer_names() {
  return {"adamw_torch", "adamw_bf16", "adamw_8bit", "adamw_bnb_8bit"};
}

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
  std::vector<ParamGroup> groups = weight_decay_param_groups(named_params, args.weight_decay);
  if (args.optim == "adamw_torch" || args.optim == "adamw_torch_fused") {
    return make_adamw(args, std::move(groups), DType::f32);
  }
  if (args.optim == "adamw_bf16") return make_adamw(args, std::move(groups), DType::bf16);
  if (args.optim == "adamw_8bit" || args.optim == "adamw_bnb_8bit") {
    return make_adamw_8bit(args, std::move(groups));
  }
  std::string known;
  for (const std::string& name : optimizer_names()) known += (known.empty() ? "" : ", ") + name;
  throw ValueError(str_cat("optim: unknown optimizer '", args.optim, "' (one of ", known, ")"));
}

}  // namespace headroom
