// A node of the autograd graph: the backward of one op. Edges point from a node to the nodes
// that produced its inputs, so the graph is the tape of the forward pass, read backwards.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace headroom {

class Node;

// Where the gradient for one input goes: output `input_nr` of `node` produced that input.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  // Nodes made later get larger sequence numbers; the engine runs ready nodes largest first,
  // which is the reverse of the forward order.
  Node();
  explicit Node(uint64_t sequence_nr) : sequence_nr_(sequence_nr) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // grad_outputs[i] is the gradient of output i, undefined where none flowed. Returns one
  // gradient per next edge (undefined where the input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // Drops what was saved for backward, once backward has used it (unless retain_graph).
  virtual void release_saved() {}

  // Whether what the node saved survives its apply (retain_graph); the engine sets it before
  // apply. When it does not, a backward may reuse saved buffers in place.
  void set_retains_saved(bool retains) { retains_saved_ = retains; }
  bool retains_saved() const { return retains_saved_; }
  // Note [Partial gradients]
  // An input used by several ops gets a gradient from each, which the engine sums in its buffer
  // (a kernel reading two and writing one buffer of the input's size per extra use: q, k and v
  // sharing a norm's output, a LoRA base and its A sharing x). Before apply, the engine hands
  // the node, per next edge, the sum so far when nothing else holds it (contiguous, its storage
  // held once); a backward whose GEMM can add into it takes it
  // (BackwardContext::take_partial_gradient) and returns it with its own gradient added, beta 1,
  // so no sum is launched. What is not taken goes back to the buffer. Null outside apply.
  void set_partial_gradients(std::vector<Tensor>* partial) { partial_gradients_ = partial; }
  std::vector<Tensor>* partial_gradients() const { return partial_gradients_; }

  uint64_t sequence_nr() const { return sequence_nr_; }
  uint32_t num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }

 protected:
  std::vector<Edge> next_edges_;
  uint32_t num_outputs_ = 1;
  bool retains_saved_ = true;
  std::vector<Tensor>* partial_gradients_ = nullptr;

 private:
  uint64_t sequence_nr_;
};

// The edge along which a gradient for `tensor` flows: its grad_fn, or for a leaf that requires
// grad its AccumulateGrad node (created on first use); invalid when it needs no gradient.
Edge gradient_edge(const Tensor& tensor);

// True when grad mode is on and any of the defined tensors requires grad.
bool any_requires_grad(const std::vector<Tensor>& tensors);

}  // namespace headroom
