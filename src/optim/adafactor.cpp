// Adafactor: HF's option checks and step, with the factored statistics reduced in place so that
// a step needs no temporary of the parameter's size (only one of the column statistics' size);
// on a native device the same step runs in adafactor_update with no host read.
#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/adafactor_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/memory_category.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

void check_options(const AdafactorOptions& o) {
  // HF's two checks, with its messages, then the ranges HF leaves unchecked.
  if (o.lr.has_value() && o.relative_step) {
    throw ValueError("Adafactor: Cannot combine manual `lr` and `relative_step=True` options");
  }
  if (o.warmup_init && !o.relative_step) {
    throw ValueError("Adafactor: `warmup_init=True` requires `relative_step=True`");
  }
  if (!o.lr.has_value() && !o.relative_step) {
    throw ValueError("Adafactor: relative_step=False needs an lr");
  }
  if (o.lr.has_value() && !(*o.lr >= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid learning rate: ", *o.lr));
  }
  if (!(o.eps1 >= 0.0) || !(o.eps2 >= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid eps (", o.eps1, ", ", o.eps2,
                             "): both must be >= 0"));
  }
  if (!(o.clip_threshold > 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid clip_threshold: ", o.clip_threshold,
                             " (must be > 0)"));
  }
  if (!(o.decay_rate <= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid decay_rate: ", o.decay_rate,
                             " (must be <= 0, so that beta2 = 1 - t^decay_rate is in [0, 1))"));
  }
  if (o.beta1.has_value() && !(*o.beta1 >= 0.0 && *o.beta1 < 1.0)) {
    throw ValueError(str_cat("Adafactor: Invalid beta1: ", *o.beta1, " (must be in [0, 1))"));
  }
  if (!(o.weight_decay >= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid weight_decay value: ", o.weight_decay));
  }
}

// Note [Adafactor step]
// transformers.optimization.Adafactor.step() for one parameter, in fp32 as torch computes it:
//   RMS = ||p|| / sqrt(n);  lr_t = max(eps2, RMS) * rho  (or rho) where rho is lr, or
//   min(1e-2 or 1e-6 t, 1/sqrt(t)) with relative_step;  beta2t = 1 - t^decay_rate;  U = g*g + eps1
//   matrices [.., R, C]: row = beta2t row + (1-beta2t) mean_C(U), col = likewise mean_R(U),
//                        u = (rsqrt(row / mean_R(row)) * rsqrt(col)) * g
//   vectors:             v = beta2t v + (1-beta2t) U,  u = rsqrt(v) * g
//   u = (u / max(1, RMS(u) / clip_threshold)) * lr_t;  with beta1: m = b1 m + (1-b1) u, u = m
//   p = p - wd*lr_t*p (if wd != 0);  p = p - u
// The running averages and the decay are torch's add_ with alpha, which its AVX2 kernels fuse
// (fma). The update u is never stored: it is computed once to get its RMS and again to apply it,
// the same float operations both times; matrices need only rsqrt(col), of the column
// statistics' size.
struct AdafactorCoefficients {
  float beta2t, one_minus_beta2t;
  float eps1;
  float clip_threshold;
  float lr;
  float neg_decay;  // -weight_decay * lr_t
  bool decay;
  bool first_moment;
  float beta1, one_minus_beta1;
};

float rms_of(double sum_of_squares, int64_t n) {
  return static_cast<float>(std::sqrt(sum_of_squares)) /
         static_cast<float>(std::sqrt(static_cast<double>(n)));
}

double sum_of_squares(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

float mean_of(const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return sum / static_cast<float>(n);
}

// The last step of Note [Adafactor step] for one element, given u before clipping.
inline void apply_update(float* param, float* exp_avg, float u, float divisor,
                         const AdafactorCoefficients& c) {
  u = (u / divisor) * c.lr;
  if (c.first_moment) {
    u = std::fma(u, c.one_minus_beta1, *exp_avg * c.beta1);
    *exp_avg = u;
  }
  float p = *param;
  if (c.decay) p = std::fma(p, c.neg_decay, p);
  *param = p - u;
}

float clip_divisor(double update_sum_of_squares, int64_t n, const AdafactorCoefficients& c) {
  return std::max(1.0f, rms_of(update_sum_of_squares, n) / c.clip_threshold);
}

// A stack of `batch` [rows, cols] matrices; row [batch, rows], col and col_factor [batch, cols].
void adafactor_factored(float* param, const float* grad, float* exp_avg, float* row, float* col,
                        float* col_factor, int64_t batch, int64_t rows, int64_t cols,
                        const AdafactorCoefficients& c) {
  for (int64_t b = 0; b < batch; ++b) {
    const float* g = grad + b * rows * cols;
    float* row_b = row + b * rows;
    float* col_b = col + b * cols;
    float* col_sum = col_factor + b * cols;
    std::fill(col_sum, col_sum + cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float row_sum = 0.0f;
      for (int64_t j = 0; j < cols; ++j) {
        const float u = g[r * cols + j] * g[r * cols + j] + c.eps1;
        row_sum += u;
        col_sum[j] += u;
      }
      const float row_mean = row_sum / static_cast<float>(cols);
      row_b[r] = std::fma(row_mean, c.one_minus_beta2t, row_b[r] * c.beta2t);
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float col_mean = col_sum[j] / static_cast<float>(rows);
      col_b[j] = std::fma(col_mean, c.one_minus_beta2t, col_b[j] * c.beta2t);
      col_factor[b * cols + j] = 1.0f / std::sqrt(col_b[j]);
    }
  }
  // Two passes over u = (rsqrt(row / mean(row)) * rsqrt(col)) * g: its RMS, then the update.
  auto for_each_update = [&](auto&& fn) {
    for (int64_t b = 0; b < batch; ++b) {
      const float row_mean = mean_of(row + b * rows, rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float row_factor = 1.0f / std::sqrt(row[b * rows + r] / row_mean);
        const int64_t base = (b * rows + r) * cols;
        for (int64_t j = 0; j < cols; ++j) {
          fn(base + j, (row_factor * col_factor[b * cols + j]) * grad[base + j]);
        }
      }
    }
  };
  double update_sum_of_squares = 0.0;
  for_each_update([&](int64_t, float u) { update_sum_of_squares += static_cast<double>(u) * u; });
  const float divisor = clip_divisor(update_sum_of_squares, batch * rows * cols, c);
  for_each_update([&](int64_t i, float u) {
    apply_update(param + i, exp_avg != nullptr ? exp_avg + i : nullptr, u, divisor, c);
  });
}

void adafactor_unfactored(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                          int64_t n, const AdafactorCoefficients& c) {
  double update_sum_of_squares = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float u = grad[i] * grad[i] + c.eps1;
    exp_avg_sq[i] = std::fma(u, c.one_minus_beta2t, exp_avg_sq[i] * c.beta2t);
    const float update = (1.0f / std::sqrt(exp_avg_sq[i])) * grad[i];
    update_sum_of_squares += static_cast<double>(update) * update;
  }
  const float divisor = clip_divisor(update_sum_of_squares, n, c);
  for (int64_t i = 0; i < n; ++i) {
    const float update = (1.0f / std::sqrt(exp_avg_sq[i])) * grad[i];
    apply_update(param + i, exp_avg != nullptr ? exp_avg + i : nullptr, update, divisor, c);
  }
}

// HF's grad_shape[:-1] and grad_shape[:-2] + grad_shape[-1:].
Shape row_shape(const Shape& shape) {
  Shape row = shape;
  row.erase(shape.ndim() - 1);
  return row;
}

Shape col_shape(const Shape& shape) {
  Shape col = shape;
  col.erase(shape.ndim() - 2);
  return col;
}

// HF's rho: the group's lr, or the relative step at step t.
double step_rho(const AdafactorOptions& o, double group_lr, double t) {
  if (!o.relative_step) return group_lr;
  return std::min(o.warmup_init ? 1e-6 * t : 1e-2, 1.0 / std::sqrt(t));
}

// Reads the two doubles of AdafactorState::rms_lr.
std::pair<double, double> read_rms_lr(const Tensor& rms_lr) {
  const Tensor host = rms_lr.to(kCPU);
  double values[2];
  std::memcpy(values, host.data<int64_t>(), sizeof(values));
  return {values[0], values[1]};
}

}  // namespace

Adafactor::Adafactor(const std::vector<Tensor>& params, const AdafactorOptions& options)
    : Adafactor(numbered_params(params), options) {}

Adafactor::Adafactor(const std::vector<NamedTensor>& named_params,
                     const AdafactorOptions& options)
    : Adafactor(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

Adafactor::Adafactor(std::vector<ParamGroup> groups, const AdafactorOptions& options)
    : options_(options) {
  check_options(options_);
  set_param_groups(std::move(groups), options_.lr.value_or(0.0), options_.weight_decay);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

void Adafactor::step() {
  NoGradGuard no_grad;
  const AdafactorOptions& o = options_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [param_name, param] = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      AdafactorState& state = states_[g][i];
      const bool factored = param.ndim() >= 2;
      const Device device = param.device();
      if (state.step == 0) {
        MemoryCategoryScope states(MemoryCategory::optimizer_states);
        if (factored) {
          state.exp_avg_sq_row = Tensor::zeros(row_shape(param.shape()), DType::f32, device);
          state.exp_avg_sq_col = Tensor::zeros(col_shape(param.shape()), DType::f32, device);
        } else {
          state.exp_avg_sq = Tensor::zeros(param.shape(), DType::f32, device);
        }
        if (o.beta1) state.exp_avg = Tensor::zeros(param.shape(), DType::f32, device);
      }
      ++state.step;
      // rsqrt of the column statistics, for the two passes over the update.
      const Tensor col_factor =
          factored ? Tensor::empty(state.exp_avg_sq_col.shape(), DType::f32, device) : Tensor();
      const double t = static_cast<double>(state.step);
      const double rho = step_rho(o, *groups_[g].lr, t);
      const double beta2t = 1.0 - std::pow(t, o.decay_rate);
      const double weight_decay = *groups_[g].weight_decay;
      const OpRoute route = op_route("Adafactor", device);
      if (route.native) {
        // Note [Adafactor step] on the device: the RMS values and lr_t stay there.
        HEADROOM_CHECK(param.is_contiguous(), "Adafactor: parameter '", param_name,
                       "' is not contiguous");
        const int64_t n = param.numel();
        const int64_t cols = factored ? param.shape()[param.ndim() - 1] : 0;
        const int64_t rows = factored ? param.shape()[param.ndim() - 2] : 0;
        const int64_t batch = factored ? (rows * cols == 0 ? 0 : n / (rows * cols)) : 1;
        const Tensor scalars =
            Tensor::empty({adafactor_scalars(batch)}, DType::i64, device);
        state.rms_lr = scalars.narrow(0, kAdafactorRms, 2);
        const Tensor grad = floating_grad(param_name, param.grad());
        if (!route.kernels) continue;
        const AdafactorKernels::Coefficients c{
            .beta2t = static_cast<float>(beta2t),
            .one_minus_beta2t = static_cast<float>(1.0 - beta2t),
            .eps1 = static_cast<float>(o.eps1),
            .clip_threshold = static_cast<float>(o.clip_threshold),
            .rho = rho,
            .eps2 = o.eps2,
            .scale_parameter = o.scale_parameter,
            .weight_decay = weight_decay,
            .first_moment = o.beta1.has_value(),
            .beta1 = static_cast<float>(o.beta1.value_or(0.0)),
            .one_minus_beta1 = static_cast<float>(1.0 - o.beta1.value_or(0.0))};
        route.need(&AdafactorKernels::update)(
            param, grad, state.exp_avg, state.exp_avg_sq, state.exp_avg_sq_row,
            state.exp_avg_sq_col, col_factor, batch, rows, cols, scalars, c);
        continue;
      }
      if (!route.cpu) continue;
      const Tensor grad = f32_grad(param_name, param.grad());
      const Tensor value = f32_contiguous(param);  // the parameter itself when f32
      const int64_t n = param.numel();
      state.rms = rms_of(sum_of_squares(value.data<float>(), n), n);
      // HF's max(eps2, RMS) is the fp32 tensor RMS when that is larger, and lr_t then is fp32.
      double lr = rho;
      if (o.scale_parameter) {
        lr = state.rms > o.eps2 ? static_cast<double>(static_cast<float>(state.rms) *
                                                      static_cast<float>(rho))
                                : o.eps2 * rho;
      }
      state.lr = lr;
      const AdafactorCoefficients c{
          .beta2t = static_cast<float>(beta2t),
          .one_minus_beta2t = static_cast<float>(1.0 - beta2t),
          .eps1 = static_cast<float>(o.eps1),
          .clip_threshold = static_cast<float>(o.clip_threshold),
          .lr = static_cast<float>(lr),
          .neg_decay = static_cast<float>(-weight_decay * lr),
          .decay = weight_decay != 0.0,
          .first_moment = o.beta1.has_value(),
          .beta1 = static_cast<float>(o.beta1.value_or(0.0)),
          .one_minus_beta1 = static_cast<float>(1.0 - o.beta1.value_or(0.0))};
      float* exp_avg = state.exp_avg.defined() ? state.exp_avg.data<float>() : nullptr;
      if (factored) {
        const int64_t cols = param.shape()[param.ndim() - 1];
        const int64_t rows = param.shape()[param.ndim() - 2];
        adafactor_factored(value.data<float>(), grad.data<float>(), exp_avg,
                           state.exp_avg_sq_row.data<float>(), state.exp_avg_sq_col.data<float>(),
                           col_factor.data<float>(), n / (rows * cols), rows, cols, c);
      } else {
        adafactor_unfactored(value.data<float>(), grad.data<float>(), exp_avg,
                             state.exp_avg_sq.data<float>(), n, c);
      }
      if (value.storage() != param.storage()) param.copy_(value);
    }
  }
}

OptimizerStateDict Adafactor::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const AdafactorState& state = states_[g][i];
    if (state.step == 0) return;
    const bool on_device =
        state.rms_lr.defined() && state.rms_lr.device().type != DeviceType::meta;
    const auto [rms, lr] = on_device ? read_rms_lr(state.rms_lr)
                                     : std::pair<double, double>{state.rms, state.lr};
    per_param[key] = {{"step", state.step}, {"RMS", rms}, {"lr", lr}};
    for (const auto& [state_name, tensor] :
         {std::pair<const char*, const Tensor*>{"exp_avg_sq_row", &state.exp_avg_sq_row},
          {"exp_avg_sq_col", &state.exp_avg_sq_col},
          {"exp_avg_sq", &state.exp_avg_sq},
          {"exp_avg", &state.exp_avg}}) {
      if (tensor->defined()) {
        result.tensors.emplace_back(str_cat("state.", key, ".", state_name), *tensor);
      }
    }
  });
  result.meta["state"] = std::move(per_param);
  return result;
}

void Adafactor::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<AdafactorState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key,
                                  const Tensor& param, const nlohmann::json& entry) {
    AdafactorState& state = states[g][i];
    state.step = entry.at("step").get<int64_t>();
    state.rms = entry.at("RMS").get<double>();
    state.lr = entry.at("lr").get<double>();
    auto load = [&](const char* state_name, const Shape& shape) {
      return load_state_tensor(saved, str_cat("state.", key, ".", state_name), shape, DType::f32,
                               param.device());
    };
    if (param.ndim() >= 2) {
      state.exp_avg_sq_row = load("exp_avg_sq_row", row_shape(param.shape()));
      state.exp_avg_sq_col = load("exp_avg_sq_col", col_shape(param.shape()));
    } else {
      state.exp_avg_sq = load("exp_avg_sq", param.shape());
    }
    if (options_.beta1) state.exp_avg = load("exp_avg", param.shape());
  });
  states_ = std::move(states);
}

const AdafactorState& Adafactor::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("Adafactor::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
