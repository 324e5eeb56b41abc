// Backward: runs the recorded graph from the roots to the leaves.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace headroom {

// Note [Saved tensors are released after use]
// Each node is run once all gradients for its outputs have arrived, largest sequence number first
// (the reverse of the forward order). Right after a node has run, its saved tensors are released
// (unless retain_graph) and the gradients it consumed are dropped, so the memory held for the
// forward pass falls as backward proceeds. AccumulateGrad nodes run as soon as they are ready.

// Accumulates d(root)/d(leaf) into the .grad of every leaf that requires grad. `grad_output`
// defaults to 1 for a one-element root. Ops inside run in no-grad mode.
void backward(const Tensor& root, const Tensor& grad_output = Tensor(), bool retain_graph = false);

// Several roots at once, as torch.autograd.backward(tensors, grad_tensors).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs,
              bool retain_graph = false);

// d(roots)/d(inputs) for leaves that require grad, returned instead of accumulated, as
// torch.autograd.grad(roots, inputs, grad_outputs): no leaf's .grad changes and no
// post-accumulate-grad hook runs, those of the inputs included. An input the roots do not depend
// on gets an undefined tensor. Used by a backward that runs a graph of its own (the tiled MLP's
// recompute, Note [Tiled MLP]), whose parameter gradients its caller hands on once.
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

// The id of the backward call running on this thread (torch's _current_graph_task_id): each
// call gets a fresh one, so a saved-tensor hook can tell two backward passes through one
// retained graph apart (activation checkpointing recomputes once per pass). 0 outside backward.
uint64_t current_graph_task_id();

}  // namespace headroom
