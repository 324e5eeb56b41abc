// Module: a tree of named parameters and submodules, with train / eval mode. Parameter names are
// the dotted paths HF uses ("transformer.h.0.attn.c_attn.weight"), so weight files map 1:1.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace headroom {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter below this module, depth first in registration order. A tensor registered
  // twice (tied weights) appears once, under its first name, as in torch.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // ValueError naming the parameter when there is none of that name.
  Tensor parameter(const std::string& name) const;
  // Elements over the unique parameters.
  int64_t num_parameters() const;

  // Tensors a module stores besides its parameters (a 4-bit weight and its quantization state),
  // with their dotted names, depth first: saved and loaded with the parameters, never trained.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // This module and every module below it with its dotted path ("" for this one), depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Every parameter slot below this module with its dotted name, depth first, each tensor once
  // (a tie under its first name): for code that changes, for a scope, the tensor a layer
  // computes with (parameter offload puts a device copy of a host-resident weight there).
  std::vector<std::pair<std::string, Tensor*>> named_parameter_slots();

  // Converts every floating parameter of the tree to `dtype` (as model.to(torch.bfloat16)): the
  // parameters become new leaves that require grad as before (a frozen one stays frozen), with
  // no gradient; ties stay tied. Under it
  // is "pure bf16" training (amp/precision.h). Optimizers built before hold the old tensors.
  // recurse false: this module's own parameters only (a Linear's weight and bias, not those of
  // an adapter it holds).
  void to(DType dtype, bool recurse = true);

  // Gives every parameter its real tensor, one at a time in named_parameters order: each slot
  // gets make(name, current) as a new leaf that requires grad (ties share one), unless make
  // returns an undefined tensor (it dropped the parameter itself, as a layer turned 4-bit does).
  // A model built on the meta device is so materialized with at most one tensor in flight.
  void materialize_parameters(
      const std::function<Tensor(const std::string& name, const Tensor& current)>& make);

  void train(bool mode = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Adds a submodule under `name` (for containers such as GPT-2's list of blocks "h"). An empty
  // name puts the child's parameters directly under this module's path (an adapter's lora_A
  // and lora_B sit beside the weight of the Linear it wraps, as PEFT names them).
  template <typename M>
  M& register_child(const std::string& name, std::unique_ptr<M> module) {
    return register_module(name, std::move(module));
  }

 protected:
  // This module's own buffers (named_buffers without the prefix); none by default.
  virtual std::vector<std::pair<std::string, Tensor>> own_buffers() const { return {}; }
  // Forgets the parameter `name` (a weight that became a frozen 4-bit buffer); its slot is left
  // as it is. ValueError when there is none.
  void unregister_parameter(const std::string& name);
  // Stores `value` in `slot` (a member of the module) as a parameter that requires grad. The
  // module keeps the slot's address, so to() can replace the tensor the layer computes with.
  void register_parameter(const std::string& name, Tensor& slot, const Tensor& value);
  // Drops the child `child` (and its parameters) from the tree.
  void remove_child(const Module* child);
  template <typename M>
  M& register_module(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(name, std::move(module));
    return ref;
  }

 private:
  // Every parameter slot of the tree with its dotted name, depth first, ties included.
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const;

  std::vector<std::pair<std::string, Tensor*>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace headroom
