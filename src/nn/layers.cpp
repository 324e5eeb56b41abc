// Linear, Embedding, the tied output head, LayerNorm, RMSNorm.
#include "nn/layers.h"

#include <cmath>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/autocast.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/norm.h"
#include "quant/linear_4bit.h"

namespace headroom {

Linear::Linear(int64_t in, int64_t out, bool bias, WeightLayout layout, Device device)
    : layout_(layout), in_(in), out_(out) {
  register_parameter("weight", weight_,
                     Tensor::empty(layout == WeightLayout::out_in ? Shape{out, in} : Shape{in, out},
                                   DType::f32, device));
  if (bias) register_parameter("bias", bias_, Tensor::zeros({out}, DType::f32, device));
}

Tensor Linear::forward(const Tensor& x) const {
  if (quant_) return with_adapter(x, linear_4bit(x, *quant_, bias_, compute_dtype_));
  if (fp8_) return with_adapter(x, fp8_linear(x, weight_, bias_, layout_, fp8_));
  return with_adapter(x, linear(x, weight_, bias_, layout_));
}

std::optional<DType> Linear::input_dtype() const {
  if (fp8_) return std::nullopt;
  if (adapter() && !adapter()->reads_input_as_projection()) return std::nullopt;
  if (quant_) {
    // linear_4bit converts x to its compute dtype first (bitsandbytes' Linear4bit): when that is
    // autocast's dtype, the norm before it writes it directly, and the output stays in it, with
    // no cast either side of every 4-bit projection.
    const std::optional<DType> autocast = autocast_input_dtype("linear", quant_->device());
    return autocast == compute_dtype_ ? autocast : std::nullopt;
  }
  return autocast_input_dtype("linear", weight_.device());
}

void Linear::set_fp8(std::shared_ptr<Fp8LinearState> state) {
  if (state && quant_) throw ValueError("Linear: a 4-bit layer cannot compute in FP8");
  fp8_ = std::move(state);
}

void AdaptableLinear::set_adapter(std::unique_ptr<LinearAdapter> adapter) {
  if (adapter_) throw ValueError("Linear: an adapter is already attached");
  adapter_ = &register_child("", std::move(adapter));
}

void AdaptableLinear::remove_adapter() {
  if (adapter_) remove_child(adapter_);
  adapter_ = nullptr;
}

void Linear::set_weight_4bit(Quant4bitWeight weight, DType compute_dtype) {
  if (weight.shape != Shape{out_, in_}) {
    throw ValueError(str_cat("Linear: a 4-bit weight of shape ", weight.shape, " for a layer of ",
                             in_, " inputs and ", out_, " outputs (expected [", out_, ", ", in_,
                             "])"));
  }
  if (!quant_) unregister_parameter("weight");
  weight_ = Tensor();
  quant_ = std::make_shared<const Quant4bitWeight>(std::move(weight));
  compute_dtype_ = compute_dtype;
}

void Linear::set_weight(Tensor weight) {
  const Shape expected = layout_ == WeightLayout::out_in ? Shape{out_, in_} : Shape{in_, out_};
  if (weight.shape() != expected) {
    throw ValueError(str_cat("Linear: a weight of shape ", weight.shape(), " for a layer of ", in_,
                             " inputs and ", out_, " outputs (expected ", expected, ")"));
  }
  if (quant_) {
    quant_.reset();
    register_parameter("weight", weight_, std::move(weight));
  } else {
    weight_ = std::move(weight);
  }
}

std::vector<std::pair<std::string, Tensor>> Linear::own_buffers() const {
  if (!quant_) return {};
  return quant_4bit_state_dict("", *quant_);
}

Tensor TiedLinear::forward(const Tensor& x) const { return with_adapter(x, linear(x, weight())); }

Tensor output_head_loss(const AdaptableLinear& head, const Tensor& weight, const Tensor& h,
                        const Tensor& targets, int64_t target_count,
                        std::optional<double> logit_softcap) {
  if (!head.adapter()) {
    return linear_cross_entropy(h, weight, targets, -100, target_count, logit_softcap);
  }
  Tensor logits = head.forward(h);
  if (logits.dtype() != DType::f32) logits = cast(logits, DType::f32);
  if (logit_softcap) logits = softcap(logits, *logit_softcap);
  return cross_entropy(logits, targets, -100, target_count);
}

Tensor output_head_logits(const AdaptableLinear& head, const Tensor& weight, const Tensor& h,
                          std::optional<double> logit_softcap) {
  Tensor logits = head.adapter() ? head.forward(h) : linear(h, weight);
  return logit_softcap ? softcap(logits, *logit_softcap) : logits;
}

Embedding::Embedding(int64_t num, int64_t dim, Device device) {
  register_parameter("weight", weight_, Tensor::empty({num, dim}, DType::f32, device));
}

Tensor Embedding::forward(const Tensor& ids, IdCheck check) const {
  Tensor out = embedding(weight_, ids, check, padding_idx_);
  if (neftune_noise_alpha_ == 0.0 || !is_training()) return out;
  // HF: dims = output.size(1) * output.size(2), the padded length times the hidden size.
  const Shape& shape = out.shape();
  const int rank = shape.ndim();
  const double dims = static_cast<double>(shape[rank - 2] * shape[rank - 1]);
  const double magnitude = neftune_noise_alpha_ / std::sqrt(dims);
  Tensor noise = Tensor::empty(shape, out.dtype(), out.device());
  noise.uniform_(-magnitude, magnitude);
  return add(out, noise);
}

LayerNorm::LayerNorm(int64_t dim, double eps, Device device) : eps_(eps) {
  register_parameter("weight", weight_, Tensor::ones({dim}, DType::f32, device));
  register_parameter("bias", bias_, Tensor::zeros({dim}, DType::f32, device));
}

std::optional<DType> common_input_dtype(std::initializer_list<const AdaptableLinear*> projections) {
  std::optional<DType> common;
  for (const AdaptableLinear* p : projections) {
    const std::optional<DType> dtype = p->input_dtype();
    if (!dtype || (common && *common != *dtype)) return std::nullopt;
    common = dtype;
  }
  return common;
}

Tensor LayerNorm::forward(const Tensor& x, std::optional<DType> out_dtype) const {
  return layer_norm(x, weight_, bias_, eps_, out_dtype);
}

ResidualNorm LayerNorm::add_forward(const Tensor& residual, const Tensor& branch,
                                    std::optional<DType> out_dtype, BranchDropout dropout) const {
  return add_layer_norm(residual, branch, weight_, bias_, eps_, out_dtype, dropout);
}

RMSNorm::RMSNorm(int64_t dim, double eps, Device device, double weight_offset)
    : eps_(eps), weight_offset_(weight_offset) {
  register_parameter("weight", weight_,
                     weight_offset == 0.0 ? Tensor::ones({dim}, DType::f32, device)
                                          : Tensor::zeros({dim}, DType::f32, device));
}

Tensor RMSNorm::forward(const Tensor& x, std::optional<DType> out_dtype) const {
  return rms_norm(x, weight_, eps_, out_dtype, weight_offset_);
}

ResidualNorm RMSNorm::add_forward(const Tensor& residual, const Tensor& branch,
                                  std::optional<DType> out_dtype) const {
  return add_rms_norm(residual, branch, weight_, eps_, out_dtype, weight_offset_);
}

}  // namespace headroom
