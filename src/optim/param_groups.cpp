// Parameter groups: the weight-decay split of HF Trainer's get_decay_parameter_names.
#include "optim/param_groups.h"

namespace headroom {

namespace {
bool decays(const Tensor& param) { return param.ndim() >= 2; }
}  // namespace

std::vector<NamedTensor> unnamed_parameters(const std::vector<Tensor>& params) {
  std::vector<NamedTensor> named;
  named.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) named.emplace_back(std::to_string(i), params[i]);
  return named;
}

std::vector<std::string> decay_parameter_names(const std::vector<NamedTensor>& named_params) {
  std::vector<std::string> names;
  for (const auto& [name, param] : named_params) {
    if (decays(param)) names.push_back(name);
  }
  return names;
}

std::vector<ParamGroup> weight_decay_param_groups(const std::vector<NamedTensor>& named_params,
                                                  double weight_decay) {
  ParamGroup decayed{.weight_decay = weight_decay};
  ParamGroup not_decayed{.weight_decay = 0.0};
  for (const NamedTensor& named : named_params) {
    (decays(named.second) ? decayed : not_decayed).params.push_back(named);
  }
  std::vector<ParamGroup> groups;
  for (ParamGroup* group : {&decayed, &not_decayed}) {
    if (!group->params.empty()) groups.push_back(std::move(*group));
  }
  return groups;
}

}  // namespace headroom
