// Parameter groups shared by the optimizers: named parameters with per-group options, and the
// split into weight-decayed and not-decayed parameters that HF Trainer makes.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace headroom {

using NamedTensor = std::pair<std::string, Tensor>;

// As a dict in torch's optimizer param_groups: the parameters, and the options that differ from
// the optimizer's defaults (unset means the optimizer's value).
struct ParamGroup {
  std::vector<NamedTensor> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// Parameters given without names are named by their position: "0", "1", ...
std::vector<NamedTensor> unnamed_parameters(const std::vector<Tensor>& params);

// Names of the parameters with at least 2 dimensions (weights of linear layers and embeddings).
// These are the ones HF Trainer decays: it leaves out biases and LayerNorm / RMSNorm weights,
// which in the models headroom builds are exactly the 1-D parameters.
std::vector<std::string> decay_parameter_names(const std::vector<NamedTensor>& named_params);

template <typename Model>
auto decay_parameter_names(const Model& model)
    -> decltype(decay_parameter_names(model.named_parameters())) {
  return decay_parameter_names(model.named_parameters());
}

// The same through a pointer, as make_causal_lm returns the model.
template <typename ModelPtr>
auto decay_parameter_names(const ModelPtr& model)
    -> decltype(decay_parameter_names(model->named_parameters())) {
  return decay_parameter_names(model->named_parameters());
}

// Two groups as HF Trainer builds them: {decay_parameter_names, weight_decay} and {the rest, 0}.
// Order within each group follows `named_params`; an empty group is left out.
std::vector<ParamGroup> weight_decay_param_groups(const std::vector<NamedTensor>& named_params,
                                                  double weight_decay);

}  // namespace headroom
