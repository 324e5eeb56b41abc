// Gradient clipping: torch's checks here, the norms, the fp32 clip factor and the passes over the
// gradients in the device's gradient-check kernels (backend/grad_check_kernels.h), the same on
// every device, over the gradients as lists (one launch each), with one host read of the total
// norm.
#include "optim/clip_grad.h"

#include <cmath>

#include "backend/grad_check_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

bool clippable(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

// The defined gradients of `params`, checked: a dtype the kernels take, one device.
std::vector<Tensor> gradients_of(const char* op, const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) throw ValueError(str_cat(op, ": parameter ", i, " is undefined"));
    Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    if (!clippable(grad.dtype())) {
      throw NotImplementedError(str_cat(op, ": the gradient of parameter ", i, " is ",
                                        dtype_name(grad.dtype()),
                                        "; only f32, bf16 and f16 gradients are supported"));
    }
    grads.push_back(std::move(grad));
  }
  check_same_device(op, grads);
  return grads;
}

std::vector<Tensor> parameters_of(const Optimizer& optimizer) {
  std::vector<Tensor> params;
  for (const ParamGroup& group : optimizer.param_groups()) {
    for (const auto& [name, param] : group.params) params.push_back(param);
  }
  return params;
}

void check_norm_type(const char* op, double norm_type) {
  if (!(norm_type > 0.0)) {
    throw ValueError(str_cat(op, ": norm_type is ", norm_type,
                             "; it must be positive or inf (the 0-norm is not supported)"));
  }
}

// Note [Gradient norms without host reads]
// As torch's foreach path, with no host read per tensor, the same on every device: each
// gradient's partial sums go to one row of a device buffer (norm_partial), norm_combine folds
// them into the total norm of Note [Gradient norms in fp32] and the clip factor, both on the
// device (f32 [2]), and the gradients are scaled by that factor where it lies. The caller reads
// the total back once. On meta the two buffers are allocated and nothing is computed.
// Writes the partial sums of `grads` at rows first_row, first_row + 1, ... of `partials` (a
// strided gradient packed first), one call per list slice.
void write_norm_rows(const char* op, const std::vector<Tensor>& grads, double norm_type,
                     const Tensor& partials, int64_t first_row) {
  if (grads.empty()) return;
  const auto& norm_partial = need_kernel(op, partials.device(), &GradCheckKernels::norm_partial);
  std::vector<Tensor> packed;
  packed.reserve(grads.size());
  for (const Tensor& grad : grads) packed.push_back(grad.contiguous());
  for_each_list_slice(packed.size(), [&](size_t begin, size_t n) {
    norm_partial(TensorList(packed).subspan(begin, n), norm_type, partials,
                 first_row + static_cast<int64_t>(begin));
  });
}

// The total norm and clip factor of the first `count` rows of `partials` (f32 [2]).
Tensor combine_norms(const char* op, const Tensor& partials, int64_t count, double norm_type,
                     double max_norm, ClipRule rule) {
  const Tensor result = Tensor::empty({2}, DType::f32, partials.device());
  need_kernel(op, partials.device(), &GradCheckKernels::norm_combine)(partials, count, norm_type,
                                                                      max_norm, rule, result);
  return result;
}

Tensor device_norm(const char* op, const std::vector<Tensor>& grads, double norm_type,
                   double max_norm, ClipRule rule) {
  const auto count = static_cast<int64_t>(grads.size());
  const Tensor partials =
      Tensor::empty({count, kNormPartialBlocks}, DType::i64, grads.front().device());
  write_norm_rows(op, grads, norm_type, partials, 0);
  return combine_norms(op, partials, count, norm_type, max_norm, rule);
}

float read_total(const Tensor& result) {
  count_skipped_host_read(result);
  if (result.device().type == DeviceType::meta) return 0.0f;
  return result.to(kCPU).data<float>()[0];
}

// Runs kernel(list) over `grads` in place, one call per list slice (Note [Tensor lists]): on
// each gradient itself when it is contiguous, else on a packed copy that is written back.
template <typename Kernel>
void update_in_place(const std::vector<Tensor>& grads, const Kernel& kernel) {
  std::vector<Tensor> packed;
  packed.reserve(grads.size());
  for (const Tensor& grad : grads) {
    grad.storage()->bump_version();
    packed.push_back(grad.contiguous());
  }
  for_each_list_slice(
      packed.size(), [&](size_t begin, size_t n) { kernel(TensorList(packed).subspan(begin, n)); });
  for (size_t i = 0; i < grads.size(); ++i) {
    if (packed[i].storage() != grads[i].storage()) grads[i].copy_(packed[i]);
  }
}

void check_finite(float total, double norm_type) {
  if (std::isfinite(total)) return;
  throw Error(str_cat("clip_grad_norm_: the total norm of order ", norm_type,
                      " for gradients from `parameters` is non-finite (", total,
                      "), so it cannot be clipped. To disable this error and scale the "
                      "gradients by the non-finite norm anyway, set error_if_nonfinite=false"));
}

void check_max_norm(const char* op, double max_norm) {
  if (!(max_norm >= 0.0)) {
    throw ValueError(str_cat(op, ": max_norm is ", max_norm, "; it must not be negative"));
  }
}

// Scales `grads` in place by the factor in result[1].
void scale_by_result(const char* op, const std::vector<Tensor>& grads, const Tensor& result) {
  if (grads.empty()) return;
  const auto& scale = need_kernel(op, result.device(), &GradCheckKernels::scale_by_device_factor);
  update_in_place(grads, [&](TensorList list) { scale(list, result); });
}

// clip_grad_norm_'s work; with error_if_nonfinite the total is read (and checked) before any
// gradient changes.
Tensor clip_on_device(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite, float* total = nullptr) {
  constexpr const char* kOp = "clip_grad_norm_";
  check_max_norm(kOp, max_norm);
  check_norm_type(kOp, norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(kOp, params);
  if (grads.empty()) return Tensor();
  const Tensor result = device_norm(kOp, grads, norm_type, max_norm, ClipRule::torch);
  if (error_if_nonfinite) {
    *total = read_total(result);
    check_finite(*total, norm_type);
  }
  scale_by_result(kOp, grads, result);
  return result;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  float total = 0.0f;
  const Tensor result = clip_on_device(params, max_norm, norm_type, error_if_nonfinite, &total);
  if (!result.defined()) return 0.0;
  return error_if_nonfinite ? total : read_total(result);  // one read either way
}

Tensor clip_grad_norm_on_device(const Optimizer& optimizer, double max_norm, double norm_type) {
  return clip_on_device(parameters_of(optimizer), max_norm, norm_type, false);
}

Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm,
                                double norm_type) {
  return clip_on_device(params, max_norm, norm_type, false);
}

Tensor grad_norm_table(const std::vector<Tensor>& params, const std::vector<int64_t>& rows,
                       int64_t count, Device device, double norm_type) {
  constexpr const char* kOp = "clip_grad_norm_";
  check_norm_type(kOp, norm_type);
  HEADROOM_CHECK(rows.size() == params.size(), "grad_norm_table: ", rows.size(), " rows for ",
                 params.size(), " parameters");
  NoGradGuard no_grad;
  const Tensor table = Tensor::zeros({count, kNormPartialBlocks}, DType::i64, device);
  // One call per run of consecutive rows (a share's parameters interleave with the others').
  std::vector<Tensor> run;
  int64_t first_row = 0, last_row = -1;
  auto flush = [&] {
    write_norm_rows(kOp, run, norm_type, table, first_row);
    run.clear();
  };
  const std::vector<Tensor> grads = gradients_of(kOp, params);  // checked: dtypes, one device
  if (!grads.empty() && grads.front().device() != device) {
    throw ValueError(str_cat(kOp, ": the gradients are on ", grads.front().device(),
                             ", the norm table on ", device));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    HEADROOM_CHECK(rows[i] > last_row && rows[i] < count, "grad_norm_table: row ", rows[i],
                   " after ", last_row, " of ", count, " (rows increasing)");
    if (rows[i] != last_row + 1) flush();
    last_row = rows[i];
    if (run.empty()) first_row = rows[i];
    run.push_back(std::move(grad));
  }
  flush();
  return table;
}

Tensor clip_grad_norm_by_table(const Tensor& table, const std::vector<Tensor>& params,
                               double max_norm, double norm_type) {
  constexpr const char* kOp = "clip_grad_norm_";
  check_max_norm(kOp, max_norm);
  check_norm_type(kOp, norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(kOp, params);
  const Tensor result =
      combine_norms(kOp, table, table.size(0), norm_type, max_norm, ClipRule::torch);
  scale_by_result(kOp, grads, result);
  return result;
}

double clip_grad_norm_(const Optimizer& optimizer, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  return clip_grad_norm_(parameters_of(optimizer), max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  constexpr const char* kOp = "clip_grad_value_";
  if (!(clip_value >= 0.0)) {
    throw ValueError(str_cat(kOp, ": clip_value is ", clip_value, "; it must not be negative"));
  }
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(kOp, params);
  if (grads.empty()) return;
  // torch converts the bounds to the gradient's dtype; clamping in fp32 against the fp32 bounds
  // and rounding the result gives the same values, as rounding is monotonic.
  const float high = static_cast<float>(clip_value);
  const auto& clamp = need_kernel(kOp, grads.front().device(), &GradCheckKernels::clamp);
  update_in_place(grads, [&](TensorList list) { clamp(list, -high, high); });
}

void clip_grad_value_(const Optimizer& optimizer, double clip_value) {
  clip_grad_value_(parameters_of(optimizer), clip_value);
}

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  constexpr const char* kOp = "grad_norm";
  check_norm_type(kOp, norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(kOp, params);
  if (grads.empty()) return 0.0;
  return read_total(device_norm(kOp, grads, norm_type, 0.0, ClipRule::torch));
}

double grad_norm(const Optimizer& optimizer, double norm_type) {
  return grad_norm(parameters_of(optimizer), norm_type);
}

}  // namespace headroom
