// The FP8 linear op, its per-layer state and the delayed-scaling updates (see fp8_linear.h).
#include "quant/fp8_linear.h"

#include "autograd/engine.h"
#include "autograd/function_node.h"
#include "backend/gemm_kernels.h"
#include "backend/reduction_kernels.h"
#include "core/autocast_mode.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

// The scales' slots of delayed scaling.
constexpr int64_t kInputSlot = 0, kWeightSlot = 1, kGradSlot = 0;

Fp8BlockShape block_shape(const Fp8Block& b) { return {b.rows, b.cols, b.e8m0}; }

Tensor slot(const Tensor& t, int64_t i) { return t.narrow(0, i, 1); }
// Slot i's amax: element 0 of its history row.
Tensor amax_slot(const Tensor& history, int64_t i) { return history.select(0, i).narrow(0, 0, 1); }

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

}  // namespace

// ---- the state

Fp8LinearState::Fp8LinearState(std::shared_ptr<const Fp8Context> context, Device device)
    : context_(std::move(context)) {
  const Fp8Recipe& recipe = context_->recipe;
  recipe.validate();
  const bool per_tensor =
      recipe.kind == Fp8RecipeKind::delayed || recipe.kind == Fp8RecipeKind::current;
  delayed_ = recipe.kind == Fp8RecipeKind::delayed;
  counts_ = Tensor::zeros({2}, DType::i64, device);
  if (!per_tensor) return;
  const int64_t length = delayed_ ? recipe.amax_history_len : 1;
  forward_history_ = Tensor::zeros({2, length}, DType::f32, device);
  forward_scale_ = Tensor::ones({2}, DType::f32, device);
  backward_history_ = Tensor::zeros({1, length}, DType::f32, device);
  backward_scale_ = Tensor::ones({1}, DType::f32, device);
  if (!delayed_) return;
  const float input_max = recipe.scaled_max(recipe.dtype(Fp8Role::input));
  const float weight_max = recipe.scaled_max(recipe.dtype(Fp8Role::weight));
  forward_scaled_max_ = Tensor::from_floats({input_max, weight_max}, {2}).to(device);
  forward_scale_inv_ = Tensor::ones({2}, DType::f32, device);
  forward_scale_used_ = Tensor::ones({2}, DType::f32, device);
  backward_scaled_max_ =
      Tensor::from_floats({recipe.scaled_max(recipe.dtype(Fp8Role::grad_output))}, {1}).to(device);
  backward_scale_inv_ = Tensor::ones({1}, DType::f32, device);
  scratch_amax_ = Tensor::zeros({1}, DType::f32, device);
}

Fp8Tensor Fp8LinearState::quantize(const Tensor& x, Fp8Role role, Fp8Pass pass) {
  const Fp8Recipe& recipe = context_->recipe;
  const DType dtype = recipe.dtype(role);
  const bool record = pass == Fp8Pass::train;
  const Tensor counts = record ? counts_ : Tensor();
  if (recipe.kind == Fp8RecipeKind::mxfp8 || recipe.kind == Fp8RecipeKind::block) {
    return fp8_quantize_blockwise(x, dtype, block_shape(recipe.block(role)), counts);
  }
  const bool backward = role == Fp8Role::grad_output;
  const int64_t i = backward ? kGradSlot : (role == Fp8Role::weight ? kWeightSlot : kInputSlot);
  const Tensor& history = backward ? backward_history_ : forward_history_;
  if (!delayed_) {
    return fp8_quantize_tensorwise(x, dtype, slot(backward ? backward_scale_ : forward_scale_, i),
                                   true, amax_slot(history, i), counts);
  }
  const Tensor& scale = pass == Fp8Pass::recompute && !backward
                            ? forward_scale_used_
                            : (backward ? backward_scale_ : forward_scale_);
  return fp8_quantize_tensorwise(x, dtype, slot(scale, i), false,
                                 record ? amax_slot(history, i) : scratch_amax_, counts);
}

Fp8Tensor Fp8LinearState::weight(const Tensor& weight, WeightLayout layout, Fp8Pass pass) {
  if (weight_.defined() && weight_step_ == context_->step && weight_data_ == weight.data_ptr()) {
    return weight_;
  }
  // [out, in] for the TN GEMM; a Conv1D weight is transposed once per step, as the 4-bit path.
  const Tensor w = layout == WeightLayout::out_in ? weight : weight.transpose(0, 1).contiguous();
  if (pass != Fp8Pass::train) return quantize(w, Fp8Role::weight, pass);
  weight_ = Fp8Tensor();  // the previous step's copy goes before the new one is made
  weight_ = quantize(w, Fp8Role::weight, pass);
  weight_step_ = context_->step;
  weight_data_ = weight.data_ptr();
  return weight_;
}

void Fp8LinearState::end_forward() {
  if (!delayed_) return;
  const Fp8Recipe& recipe = context_->recipe;
  forward_scale_used_.copy_(forward_scale_);
  need_kernel("fp8 end_forward", device(), &Fp8Kernels::delayed_scaling_update)(
      forward_history_, forward_scaled_max_, recipe.amax_compute_algo, forward_scale_,
      forward_scale_inv_);
}

void Fp8LinearState::end_backward() {
  if (!delayed_) return;
  need_kernel("fp8 end_backward", device(), &Fp8Kernels::delayed_scaling_update)(
      backward_history_, backward_scaled_max_, context_->recipe.amax_compute_algo, backward_scale_,
      backward_scale_inv_);
}

std::pair<int64_t, int64_t> Fp8LinearState::take_counts() {
  count_skipped_host_read(counts_);
  if (device().type == DeviceType::meta) return {0, 0};
  const std::vector<int64_t> c = counts_.to(kCPU).to_int64_vector();
  counts_.zero_();
  return {c[0], c[1]};
}

std::vector<std::pair<std::string, Tensor>> Fp8LinearState::resume_state() const {
  if (!delayed_) return {};
  return {{"forward_amax_history", forward_history_}, {"forward_scale", forward_scale_},
          {"forward_scale_inv", forward_scale_inv_},  {"backward_amax_history", backward_history_},
          {"backward_scale", backward_scale_},        {"backward_scale_inv", backward_scale_inv_}};
}

int64_t Fp8LinearState::state_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t :
       {&forward_history_, &forward_scaled_max_, &forward_scale_, &forward_scale_inv_,
        &forward_scale_used_, &backward_history_, &backward_scaled_max_, &backward_scale_,
        &backward_scale_inv_, &scratch_amax_, &counts_}) {
    if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  }
  return bytes;
}

Fp8Training::Fp8Training(const Fp8Recipe& recipe, bool save_original_input)
    : context_(std::make_shared<Fp8Context>()) {
  recipe.validate();
  context_->recipe = recipe;
  context_->save_original_input = save_original_input;
}

std::shared_ptr<Fp8LinearState> Fp8Training::new_layer(Device device) {
  layers_.push_back(std::make_shared<Fp8LinearState>(context_, device));
  return layers_.back();
}

void Fp8Training::end_forward() {
  for (const auto& layer : layers_) layer->end_forward();
}

void Fp8Training::end_backward() {
  for (const auto& layer : layers_) layer->end_backward();
}

void Fp8Training::next_step() { ++context_->step; }

std::pair<int64_t, int64_t> Fp8Training::take_counts() {
  std::pair<int64_t, int64_t> total{0, 0};
  for (const auto& layer : layers_) {
    const auto [overflow, underflow] = layer->take_counts();
    total.first += overflow;
    total.second += underflow;
  }
  return total;
}

std::vector<std::pair<std::string, Tensor>> Fp8Training::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const auto& [name, t] : layers_[i]->resume_state()) {
      tensors.emplace_back(str_cat("layers.", i, ".", name), t.to(kCPU));
    }
  }
  return tensors;
}

std::map<std::string, std::string> Fp8Training::state_metadata() const {
  return {{"fp8_recipe", recipe().describe()}, {"fp8_layers", std::to_string(layers_.size())}};
}

void Fp8Training::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  const auto field = [&](const char* key) {
    const auto it = metadata.find(key);
    if (it == metadata.end()) throw ValueError(str_cat("no '", key, "' metadata"));
    return it->second;
  };
  const std::map<std::string, std::string> expected = state_metadata();
  if (field("fp8_recipe") != expected.at("fp8_recipe")) {
    throw ValueError(str_cat("fp8_recipe: the checkpoint was trained with ", field("fp8_recipe"),
                             ", this run is ", expected.at("fp8_recipe"),
                             "; resume with the same FP8 options"));
  }
  if (field("fp8_layers") != expected.at("fp8_layers")) {
    throw ValueError(str_cat("fp8: the checkpoint holds ", field("fp8_layers"),
                             " FP8 layers' state, this model has ", expected.at("fp8_layers")));
  }
  std::map<std::string, const Tensor*> saved;
  for (const auto& [name, t] : tensors) saved[name] = &t;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const auto& [name, t] : layers_[i]->resume_state()) {
      const std::string key = str_cat("layers.", i, ".", name);
      const auto it = saved.find(key);
      if (it == saved.end()) throw ValueError(str_cat(key, ": missing"));
      if (it->second->shape() != t.shape() || it->second->dtype() != t.dtype()) {
        throw ValueError(str_cat(key, ": ", dtype_name(it->second->dtype()), " ",
                                 it->second->shape(), " where this run keeps ",
                                 dtype_name(t.dtype()), " ", t.shape()));
      }
      copies.emplace_back(t, it->second);
      saved.erase(it);
    }
  }
  if (!saved.empty()) throw ValueError(str_cat(saved.begin()->first, ": unexpected"));
  for (const auto& [dst, src] : copies) dst.copy_(*src);
}

// ---- the op

namespace {

bool fits_fp8_gemm(int64_t n, int64_t k) { return n % 16 == 0 && k % 16 == 0; }

// c = dequant(a) op(.) @ dequant(b) op(.) (+ bias), c fresh and contiguous [m, n]: the FP8 GEMM
// in its TN layout when both operands have one scale and the sizes fit (transposing an operand's
// bytes when its flag asks for the other layout), else the dequantized operands in the compute
// dtype (f32 for an f32 c) through the ordinary gemm. Every choice depends on shapes and the
// recipe only, so every device allocates the same.
void fp8_product(const char* op, const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b,
                 const Tensor& c, const Tensor& bias) {
  const int64_t k = trans_a ? a.data.size(0) : a.data.size(1);
  const int64_t n = c.size(1);
  if (c.numel() == 0) return;
  if (k == 0) {
    if (bias.defined()) {
      c.copy_(bias.expand(c.shape()));
    } else {
      c.zero_();
    }
    return;
  }
  const Device device = c.device();
  if (fp8_per_tensor(a.block) && fp8_per_tensor(b.block) && fits_fp8_gemm(n, k)) {
    const Fp8Tensor a_tn = trans_a ? fp8_transpose(a) : a;
    const Fp8Tensor b_tn = trans_b ? b : fp8_transpose(b);
    // cuBLASLt's FP8 kernels take no f32 bias: an f32 c gets it added in fp32 afterwards, as the
    // epilogue would (the CPU's sum, then + bias, rounds the same).
    const bool bias_after = bias.defined() && c.dtype() == DType::f32;
    need_kernel(op, device, &GemmKernels::gemm_fp8)(a_tn.data, a_tn.scales, b_tn.data, b_tn.scales,
                                                    c, bias_after ? Tensor() : bias);
    if (bias_after) c.add_(bias);
    return;
  }
  const DType compute = c.dtype();
  const Tensor ad = fp8_dequantize(a, compute), bd = fp8_dequantize(b, compute);
  need_kernel(op, device, &GemmKernels::gemm)(
      trans_a, trans_b, ad, bd, 1.0f, 0.0f, c,
      bias.defined() ? GemmEpilogue::bias : GemmEpilogue::none, bias);
}

struct Fp8LinearSaved {
  int x_slot = -1, x_scales_slot = -1, w_slot = -1, w_scales_slot = -1;
  bool original_input = false;
  Fp8BlockShape x_block, w_block;
  int64_t rows = 0, in = 0, out = 0;
  Shape x_shape;
  DType x_dtype = DType::f32, w_dtype = DType::f32, bias_dtype = DType::f32, compute = DType::f32;
  bool has_bias = false;
  WeightLayout layout = WeightLayout::out_in;
};

std::vector<Tensor> fp8_linear_backward(BackwardContext& ctx, Fp8LinearState& state,
                                        const Fp8LinearSaved& s) {
  const char* op = "fp8_linear backward";
  const Device device = ctx.grad_output().device();
  const Tensor g = as_dtype(ctx.grad_output(), s.compute).contiguous().view({s.rows, s.out});
  const bool need_x = ctx.needs_input_grad(0), need_w = ctx.needs_input_grad(1);
  Tensor gx, gw, gb;
  if (need_x || need_w) {
    const Fp8Tensor qg = state.quantize(g, Fp8Role::grad_output, Fp8Pass::train);
    if (need_x) {
      const Fp8Tensor qw{ctx.saved(static_cast<size_t>(s.w_slot)),
                         ctx.saved(static_cast<size_t>(s.w_scales_slot)), s.w_block};
      gx = Tensor::empty({s.rows, s.in}, s.compute, device);
      fp8_product(op, qg, false, qw, false, gx, Tensor());
      gx = as_dtype(gx, s.x_dtype).view(s.x_shape);
    }
    if (need_w) {
      Fp8Tensor qx;
      if (s.original_input) {
        const Tensor x = ctx.saved(static_cast<size_t>(s.x_slot)).reshape({s.rows, s.in});
        qx = state.quantize(x, Fp8Role::input, Fp8Pass::recompute);
      } else {
        qx = {ctx.saved(static_cast<size_t>(s.x_slot)),
              ctx.saved(static_cast<size_t>(s.x_scales_slot)), s.x_block};
      }
      const bool out_in = s.layout == WeightLayout::out_in;
      gw = Tensor::empty(out_in ? Shape{s.out, s.in} : Shape{s.in, s.out},
                         s.w_dtype == DType::f32 ? DType::f32 : s.compute, device);
      if (out_in) {
        fp8_product(op, qg, true, qx, false, gw, Tensor());
      } else {
        fp8_product(op, qx, true, qg, false, gw, Tensor());
      }
      gw = as_dtype(gw, s.w_dtype);
    }
  }
  if (s.has_bias && ctx.needs_input_grad(2)) {
    gb = Tensor::empty({s.out}, s.bias_dtype == DType::f32 ? DType::f32 : g.dtype(), device);
    need_kernel(op, device, &ReductionKernels::sum_middle)(g, 1, s.rows, s.out, 1.0, gb);
    gb = as_dtype(gb, s.bias_dtype);
  }
  return {gx, gw, gb};
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, WeightLayout layout,
                  const std::shared_ptr<Fp8LinearState>& layer_state) {
  Fp8LinearState& state = *layer_state;
  RecordFunction record("fp8_linear", x, weight, bias);
  check_floating("fp8_linear", "x", x);
  check_floating("fp8_linear", "weight", weight);
  check_same_device("fp8_linear", {x, weight, bias});
  HEADROOM_CHECK_VALUE(x.ndim() >= 1 && weight.ndim() == 2, "fp8_linear: x ", x.shape(),
                       " must be at least 1-D and weight ", weight.shape(), " 2-D");
  const bool out_in = layout == WeightLayout::out_in;
  const int64_t in = x.size(-1), out = out_in ? weight.size(0) : weight.size(1);
  HEADROOM_CHECK_VALUE((out_in ? weight.size(1) : weight.size(0)) == in, "fp8_linear: x has ", in,
                       " features but weight ", weight.shape(),
                       out_in ? " ([out, in])" : " ([in, out])", " expects another");
  HEADROOM_CHECK_VALUE(!bias.defined() || (bias.ndim() == 1 && bias.size(0) == out),
                       "fp8_linear: bias ", bias.shape(), " must be [", out, "]");
  HEADROOM_CHECK_VALUE(x.device() == state.device(), "fp8_linear: x on ", x.device(),
                       ", the layer's FP8 state on ", state.device());
  const Device device = x.device();
  const AutocastDeviceState autocast = AutocastMode::get(device.type);
  const DType compute = autocast.enabled ? autocast.dtype : x.dtype();
  const int64_t rows = in == 0 ? x.numel() : x.numel() / in;
  // Inside backward, a forward is activation checkpointing's recompute; outside autograd, an
  // evaluation (Note [FP8 linear]).
  const Fp8Pass pass = current_graph_task_id() != 0 ? Fp8Pass::recompute
                       : GradMode::is_enabled()     ? Fp8Pass::train
                                                    : Fp8Pass::evaluate;

  auto node = make_function_node("Fp8LinearBackward0", {x, weight, bias});
  const Tensor x2 = x.contiguous().view({rows, in});
  const Fp8Tensor qx = state.quantize(x2, Fp8Role::input, pass);
  const Fp8Tensor qw = state.weight(weight, layout, pass);
  Tensor y = Tensor::empty({rows, out}, compute, device);
  const Tensor b = bias.defined() ? as_dtype(bias, compute).contiguous() : Tensor();
  fp8_product("fp8_linear", qx, false, qw, true, y, b);
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = out;
  y = y.view(Shape(out_dims));
  if (node) {
    Fp8LinearSaved s;
    s.original_input = state.context().save_original_input;
    if (node->needs_input_grad(1)) {
      if (s.original_input) {
        s.x_slot = static_cast<int>(node->save(x));
      } else {
        s.x_slot = static_cast<int>(node->save(qx.data));
        s.x_scales_slot = static_cast<int>(node->save(qx.scales));
      }
    }
    if (node->needs_input_grad(0)) {
      s.w_slot = static_cast<int>(node->save(qw.data));
      s.w_scales_slot = static_cast<int>(node->save(qw.scales));
    }
    s.x_block = qx.block;
    s.w_block = qw.block;
    s.rows = rows, s.in = in, s.out = out;
    s.x_shape = x.shape();
    s.x_dtype = x.dtype();
    s.w_dtype = weight.dtype();
    s.has_bias = bias.defined();
    s.bias_dtype = s.has_bias ? bias.dtype() : DType::f32;
    s.compute = compute;
    s.layout = layout;
    node->set_backward([layer_state, s](BackwardContext& ctx) -> std::vector<Tensor> {
      return fp8_linear_backward(ctx, *layer_state, s);
    });
    node->set_outputs({y});
  }
  return y;
}

}  // namespace headroom
