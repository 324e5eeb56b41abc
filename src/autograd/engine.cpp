// The backward engine: dependency counting, a ready queue ordered by sequence number, gradient
// buffers per node. Single-threaded; the ops it runs use the CPU's threads themselves.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "autograd/accumulate_grad.h"
#include "autograd/node.h"
#include "core/autocast_mode.h"
#include "core/autograd_meta.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/record_function.h"

namespace headroom {

namespace {

// Adds `grad` into slot `i` of a node's input buffer.
void add_to_buffer(std::vector<Tensor>& buffer, uint32_t i, Tensor grad) {
  Tensor& slot = buffer.at(i);
  if (!slot.defined()) {
    slot = std::move(grad);
    return;
  }
  // Accumulate into whichever buffer we own alone, else into a fresh one; in the wider dtype
  // when a cast's consumers returned its gradient in both (BackwardContext::grad_dtype).
  const DType wide =
      dtype_size(grad.dtype()) > dtype_size(slot.dtype()) ? grad.dtype() : slot.dtype();
  if (slot.dtype() == wide && slot.storage().use_count() == 1 && slot.is_contiguous()) {
    slot.add_(grad);
  } else if (grad.dtype() == wide && grad.storage().use_count() == 1 && grad.is_contiguous()) {
    grad.add_(slot);
    slot = std::move(grad);
  } else {
    Tensor sum = slot.dtype() == wide ? slot.contiguous().clone() : slot.to(wide);
    sum.add_(grad);
    slot = std::move(sum);
  }
}

thread_local uint64_t current_task_id = 0;
thread_local uint64_t next_task_id = 1;

// Sets the thread's graph task id for the scope of one backward call (calls may nest).
class GraphTaskScope {
 public:
  GraphTaskScope() : previous_(current_task_id) { current_task_id = next_task_id++; }
  ~GraphTaskScope() { current_task_id = previous_; }
  GraphTaskScope(const GraphTaskScope&) = delete;
  GraphTaskScope& operator=(const GraphTaskScope&) = delete;

 private:
  uint64_t previous_;
};

struct ByReverseSequence {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

}  // namespace

uint64_t current_graph_task_id() { return current_task_id; }

namespace {

// What grad() collects: the gradient arriving at each input's AccumulateGrad node, which is not
// run (nor is any other AccumulateGrad).
struct Captures {
  std::unordered_map<const Node*, size_t> index;
  std::vector<Tensor> grads;
};

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs,
                  bool retain_graph, Captures* captures) {
  const char* caller = captures ? "grad" : "backward";
  if (roots.size() != grad_outputs.size()) {
    throw ValueError(
        str_cat(caller, ": ", roots.size(), " roots but ", grad_outputs.size(), " gradients"));
  }
  NoGradGuard no_grad;
  AutocastOffGuard autocast_off;
  GraphTaskScope task;
  std::vector<std::shared_ptr<Node>> keep_alive;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::pair<Edge, Tensor>> starts;
  for (size_t r = 0; r < roots.size(); ++r) {
    const Tensor& root = roots[r];
    if (!root.defined() || !root.requires_grad()) {
      throw Error(str_cat(caller, ": root ", r, " does not require grad and has no grad_fn"));
    }
    Tensor grad = grad_outputs[r];
    if (!grad.defined()) {
      if (root.numel() != 1) {
        throw Error(str_cat(caller,
                            ": grad can be implicitly created only for one-element "
                            "outputs; root ",
                            r, " has shape ", root.shape()));
      }
      grad = Tensor::ones(root.shape(), root.dtype(), root.device());
    } else if (grad.shape() != root.shape()) {
      throw ValueError(str_cat(caller, ": gradient shape ", grad.shape(), " for root ", r,
                               " of shape ", root.shape()));
    }
    Edge edge = gradient_edge(root);
    starts.emplace_back(std::move(edge), std::move(grad));
  }

  // Count, for every node reachable from the roots, how many edges lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  for (auto& [edge, grad] : starts) {
    keep_alive.push_back(edge.node);
    if (dependencies.emplace(edge.node.get(), 0).second) stack.push_back(edge.node.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& next : node->next_edges()) {
      if (!next.valid()) continue;
      auto [it, inserted] = dependencies.emplace(next.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(next.node.get());
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ByReverseSequence> ready;
  for (auto& [edge, grad] : starts) {
    Node* node = edge.node.get();
    auto [it, inserted] = buffers.try_emplace(node, node->num_outputs());
    add_to_buffer(it->second, edge.input_nr, std::move(grad));
  }
  for (auto& [edge, grad] : starts) {
    Node* node = edge.node.get();
    if (dependencies[node] == 0) {
      dependencies[node] = -1;  // queued
      ready.push(node);
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    // As PyTorch's trace: the engine's work on a node (its backward and handing the gradients
    // on), and within it the node's backward, named as the node.
    RecordFunction evaluate(RecordScope::backward_function);
    if (evaluate.is_active()) {
      evaluate.before(str_cat("autograd::engine::evaluate_function: ", node->name()), {});
    }
    std::vector<Tensor> inputs;
    if (auto it = buffers.find(node); it != buffers.end()) {
      inputs = std::move(it->second);
      buffers.erase(it);
    } else {
      inputs.resize(node->num_outputs());
    }
    if (captures && dynamic_cast<AccumulateGrad*>(node)) {
      if (auto it = captures->index.find(node); it != captures->index.end()) {
        captures->grads[it->second] = std::move(inputs.at(0));
      }
      continue;  // an AccumulateGrad has no edges to hand gradients on along
    }
    bool any_defined = false;
    for (const Tensor& t : inputs) any_defined = any_defined || t.defined();
    std::vector<Tensor> grads;
    node->set_retains_saved(retain_graph);
    const std::vector<Edge>& edges = node->next_edges();
    // The sums so far of the node's inputs' gradients, for a backward to add into (Note
    // [Partial gradients] in autograd/node.h).
    std::vector<Tensor> partial;
    if (any_defined) {
      for (size_t i = 0; i < edges.size(); ++i) {
        if (!edges[i].valid()) continue;
        auto it = buffers.find(edges[i].node.get());
        if (it == buffers.end()) continue;
        Tensor& slot = it->second.at(edges[i].input_nr);
        if (slot.defined() && slot.is_contiguous() && slot.storage().use_count() == 1) {
          partial.resize(edges.size());
          partial[i] = std::move(slot);
          slot = Tensor();
        }
      }
      RecordFunction record(RecordScope::backward_function);
      if (record.is_active()) record.before(node->name(), inputs);
      node->set_partial_gradients(partial.empty() ? nullptr : &partial);
      try {
        grads = node->apply(std::move(inputs));
      } catch (...) {
        node->set_partial_gradients(nullptr);
        throw;
      }
      node->set_partial_gradients(nullptr);
    }
    inputs.clear();
    if (!retain_graph) node->release_saved();

    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& next = edges[i];
      if (!next.valid()) continue;
      if (i < partial.size() && partial[i].defined()) {  // not taken: back into the sum
        auto [it, inserted] = buffers.try_emplace(next.node.get(), next.node->num_outputs());
        add_to_buffer(it->second, next.input_nr, std::move(partial[i]));
      }
      if (i < grads.size() && grads[i].defined()) {
        auto [it, inserted] = buffers.try_emplace(next.node.get(), next.node->num_outputs());
        add_to_buffer(it->second, next.input_nr, std::move(grads[i]));
      }
      if (--dependencies[next.node.get()] == 0) ready.push(next.node.get());
    }
  }
}

}  // namespace

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad_output}, retain_graph);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs,
              bool retain_graph) {
  run_backward(roots, grad_outputs, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs,
                         const std::vector<Tensor>& inputs, bool retain_graph) {
  Captures captures;
  captures.grads.resize(inputs.size());
  std::vector<std::shared_ptr<Node>> accumulators;  // alive for the call
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.defined() || !input.requires_grad() || !input.is_leaf()) {
      throw ValueError(str_cat("grad: input ", i, " is not a leaf that requires grad"));
    }
    accumulators.push_back(gradient_edge(input).node);
    captures.index.emplace(accumulators.back().get(), i);
  }
  run_backward(roots, grad_outputs, retain_graph, &captures);
  return std::move(captures.grads);
}

}  // namespace headroom
