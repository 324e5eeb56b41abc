// The building blocks of GPT-2 and Llama as modules with HF's parameter names: Linear (either
// weight layout, or a frozen 4-bit weight as bitsandbytes' Linear4bit; either can hold an
// adapter), Embedding, LayerNorm, RMSNorm.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>

#include "nn/module.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "quant/fp8_linear.h"
#include "quant/quant_4bit.h"

namespace headroom {

// The seam through which peft/ adds a trainable branch to a projection (LoRA's
// B(A(dropout(x)))·s): the layer computes its own output, then hands x and that output to the
// adapter, which returns the sum.
class LinearAdapter : public Module {
 public:
  // x [..., in], base [..., out] (the base layer's output, handed over: an adapter may write
  // its branch into base's buffer when nothing else holds it) -> the layer's output.
  virtual Tensor forward(const Tensor& x, Tensor base) const = 0;
  // True when this adapter's forward reads x only as the input of projections that autocast
  // converts as the layer's own (LoRA without dropout): AdaptableLinear::input_dtype.
  virtual bool reads_input_as_projection() const { return false; }
};

// A projection that can hold an adapter: the Linear below, with a full-precision or a frozen
// 4-bit weight, ends its forward with with_adapter(x, base). peft/ finds the layers it wraps
// through this interface.
class AdaptableLinear : public Module {
 public:
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  // Where and in which dtype an adapter of this layer computes (a 4-bit base: its compute dtype).
  virtual Device device() const = 0;
  virtual DType compute_dtype() const = 0;
  // x [..., in] -> [..., out]: the layer's own output with the adapter's branch added.
  virtual Tensor forward(const Tensor& x) const = 0;
  // The dtype forward converts x to before anything reads it, now (autocast's region dtype for
  // a full-precision weight, with an adapter that reads x the same way), or nullopt when x is
  // read as it is. Whoever computes x may write it in that dtype directly: a norm before a
  // projection (ops/norm.h: out_dtype) rounds once, as the conversion would, with no tensor
  // in between.
  virtual std::optional<DType> input_dtype() const { return std::nullopt; }

  // Attaches `adapter` (its parameters named beside the layer's, e.g. "lora_A.weight"); one at
  // most.
  void set_adapter(std::unique_ptr<LinearAdapter> adapter);
  LinearAdapter* adapter() const { return adapter_; }
  // Detaches the adapter (after merging it into the weight); its parameters leave the tree.
  void remove_adapter();

 protected:
  // The layer's output: `base` (its own, for x) plus the adapter's branch when there is one.
  Tensor with_adapter(const Tensor& x, Tensor base) const {
    return adapter_ ? adapter_->forward(x, std::move(base)) : base;
  }

 private:
  LinearAdapter* adapter_ = nullptr;  // owned as a child module
};

// A linear layer. Its weight is a trainable parameter, or (QLoRA) a frozen 4-bit tensor in
// bitsandbytes' layout, [out, in] for either layout as transformers stores Conv1D weights, that
// forward multiplies through linear_4bit; the bias stays a parameter. See nn/linear_4bit.h. A
// full-precision layer may compute in FP8 (nn/linear_fp8.h).
class Linear : public AdaptableLinear {
 public:
  // Weight [out, in] (out_in, nn.Linear) or [in, out] (in_out, GPT-2's Conv1D); uninitialised.
  Linear(int64_t in, int64_t out, bool bias, WeightLayout layout, Device device);
  Tensor forward(const Tensor& x) const override;
  // Autocast's dtype for linear, unless the weight is FP8 (its op reads x as it is), 4-bit
  // with another compute dtype (linear_4bit converts x to that), or the adapter reads x
  // otherwise.
  std::optional<DType> input_dtype() const override;
  // Undefined for a 4-bit layer.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  WeightLayout layout() const { return layout_; }
  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  Device device() const override { return quant_ ? quant_->device() : weight_.device(); }
  // A 4-bit layer's compute dtype, else its weight's dtype.
  DType compute_dtype() const override { return quant_ ? compute_dtype_ : weight_.dtype(); }

  // Makes the weight a frozen 4-bit one computing in `compute_dtype`: `weight` has shape
  // [out, in]. The full-precision parameter is dropped (no longer a parameter, its memory freed
  // with the last reference). ValueError for another shape.
  void set_weight_4bit(Quant4bitWeight weight, DType compute_dtype);
  // The 4-bit weight, or null for a full-precision layer.
  const Quant4bitWeight* weight_4bit() const { return quant_.get(); }
  // Makes a 4-bit layer a full-precision one again, with `weight` (in the layer's layout) its
  // trainable parameter: a merge into a dequantized base. ValueError for another shape.
  void set_weight(Tensor weight);

  // Makes forward compute through fp8_linear with `state` (TE's te.Linear; see nn/linear_fp8.h),
  // or in full precision again with null. Not for a 4-bit layer (ValueError).
  void set_fp8(std::shared_ptr<Fp8LinearState> state);
  // The layer's FP8 state, or null.
  Fp8LinearState* fp8() const { return fp8_.get(); }

 protected:
  // bitsandbytes' state_dict entries of a 4-bit weight (weight, weight.absmax, ...).
  std::vector<std::pair<std::string, Tensor>> own_buffers() const override;

 private:
  Tensor weight_, bias_;
  WeightLayout layout_;
  int64_t in_, out_;
  std::shared_ptr<const Quant4bitWeight> quant_;
  DType compute_dtype_ = DType::f32;
  std::shared_ptr<Fp8LinearState> fp8_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Device device);
  // With the layer's id check (set_id_check; read_back by default), or the one given.
  Tensor forward(const Tensor& ids) const { return forward(ids, id_check_); }
  Tensor forward(const Tensor& ids, IdCheck check) const;
  // by_caller: whoever feeds this layer has checked every id on the host (the Trainer's batches
  // come from a TokenCorpus, whose ids lie in the tokenizer's vocabulary, which fits the model's):
  // no read-back, which on a GPU is a host sync a step (Note [Targets counted by the caller]).
  void set_id_check(IdCheck check) { id_check_ = check; }
  // nn.Embedding's padding_idx: the row that gets no gradient from the lookup (null: none).
  void set_padding_idx(std::optional<int64_t> row) { padding_idx_ = row; }
  const Tensor& weight() const { return weight_; }
  // NEFTune (transformers' neftune_post_forward_hook): in training mode only, the output
  // [..., T, d] gets uniform noise in [-m, m), m = alpha / sqrt(T * d), drawn from the default
  // generator. 0 (the default): none.
  void set_neftune_noise_alpha(double alpha) { neftune_noise_alpha_ = alpha; }
  double neftune_noise_alpha() const { return neftune_noise_alpha_; }

 private:
  Tensor weight_;
  double neftune_noise_alpha_ = 0.0;
  IdCheck id_check_ = IdCheck::read_back;
  std::optional<int64_t> padding_idx_;
};

// The output projection of a model whose lm_head shares the input embedding's weight (GPT-2,
// tie_word_embeddings): no parameter of its own, registered as "lm_head" so that an adapter can
// wrap it as PEFT wraps the tied nn.Linear. logits = x @ embedding.weight^T.
class TiedLinear : public AdaptableLinear {
 public:
  explicit TiedLinear(const Embedding& embedding) : embedding_(embedding) {}
  Tensor forward(const Tensor& x) const override;
  const Tensor& weight() const { return embedding_.weight(); }
  int64_t in_features() const override { return weight().size(1); }
  int64_t out_features() const override { return weight().size(0); }
  Device device() const override { return weight().device(); }
  DType compute_dtype() const override { return weight().dtype(); }

 private:
  const Embedding& embedding_;
};

// A causal LM's loss over its final hidden states h [B, T, D] through its output head `head`
// (weight [V, D]): the fused, chunked linear_cross_entropy, which never holds the logits; when
// the head holds an adapter (LoRA on lm_head), the head's forward and cross_entropy of its fp32
// logits, as transformers computes it (the adapter's branch is not in the fused op).
// `target_count`: as linear_cross_entropy's. logit_softcap: Gemma 2's final_logit_softcapping,
// c * tanh(logits / c) before the loss (null: none).
Tensor output_head_loss(const AdaptableLinear& head, const Tensor& weight, const Tensor& h,
                        const Tensor& targets, int64_t target_count = -1,
                        std::optional<double> logit_softcap = {});
// The logits of the same head: linear(h, weight), or the head's forward with its adapter; capped
// when logit_softcap is given.
Tensor output_head_logits(const AdaptableLinear& head, const Tensor& weight, const Tensor& h,
                          std::optional<double> logit_softcap = {});

// The one dtype that all of `projections` convert their input to (AdaptableLinear::input_dtype),
// or nullopt when one reads its input as it is or they differ.
std::optional<DType> common_input_dtype(std::initializer_list<const AdaptableLinear*> projections);

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, Device device);  // weight 1, bias 0
  // out_dtype: ops/norm.h's (the dtype of the projections it feeds: common_input_dtype).
  Tensor forward(const Tensor& x, std::optional<DType> out_dtype = std::nullopt) const;
  // The residual add before the norm and the norm as one op (ops/norm.h: add_layer_norm):
  // {residual + branch, its norm}; an undefined branch gives {residual, its norm}.
  ResidualNorm add_forward(const Tensor& residual, const Tensor& branch,
                           std::optional<DType> out_dtype = std::nullopt,
                           BranchDropout dropout = {}) const;

 private:
  Tensor weight_, bias_;
  double eps_;
};

// Llama's RMSNorm (weight initialised to 1), or with weight_offset 1 Gemma's, which scales by
// (1 + weight) and initialises its weight to 0 (ops/norm.h: rms_norm).
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, Device device, double weight_offset = 0.0);
  Tensor forward(const Tensor& x, std::optional<DType> out_dtype = std::nullopt) const;
  // As LayerNorm's (ops/norm.h: add_rms_norm).
  ResidualNorm add_forward(const Tensor& residual, const Tensor& branch,
                           std::optional<DType> out_dtype = std::nullopt) const;
  double weight_offset() const { return weight_offset_; }

 private:
  Tensor weight_;
  double eps_;
  double weight_offset_;
};

}  // namespace headroom
