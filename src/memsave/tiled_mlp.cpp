// The tiled MLP's forward over tiles and its backward that recomputes each tile (Note [Tiled
// MLP]).
#include "memsave/tiled_mlp.h"

#include <optional>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/function_node.h"
#include "autograd/saved_tensor.h"
#include "core/autocast_mode.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "memory/memory_category.h"
#include "memsave/checkpoint.h"
#include "ops/ops.h"

namespace headroom {

namespace {

// Automatic tiles are a multiple of this many tokens: the row blocks of oneDNN's sgemm (16 or 24
// rows) and of tensor-core GEMMs then fall where the untiled MLP's do, so its outputs are the
// same bit for bit, and no tile wastes a partial block.
constexpr int64_t kTileRows = 64;

struct GeneratorState {
  uint64_t seed = 0, offset = 0;
};

// What the backward needs besides x: the forward, the parameters, the states to repeat.
struct TiledForward {
  LayerForward forward;
  std::vector<Tensor> parameters;  // the trainable ones, the node's inputs 1..
  int64_t tile = 0;
  AutocastDeviceState autocast[kNumDeviceTypes];
  std::vector<GeneratorState> generators;  // before each tile
};

// Saved-tensor hooks that keep tensors as they are: the tiles' graphs are the backward's own,
// whatever hooks are in force around it.
SavedTensorsHooksGuard plain_saves() {
  return SavedTensorsHooksGuard(
      [](const Tensor& t) -> std::any { return t; },
      [](const std::any& packed) { return std::any_cast<Tensor>(packed); });
}

std::vector<Tensor> tiled_backward(const TiledForward& f, BackwardContext& ctx) {
  const Tensor x = ctx.saved(0);
  // The tiles' input gradients overwrite the rows of the output gradient each has consumed.
  Tensor grad = ctx.take_grad_output(0);
  if (!grad.is_contiguous() || grad.storage().use_count() != 1 || grad.dtype() != x.dtype()) {
    Tensor own = Tensor::empty(x.shape(), x.dtype(), x.device());
    own.copy_(grad);
    grad = std::move(own);
  }
  const int64_t tokens = x.numel() / x.size(-1), hidden = x.size(-1);
  const Tensor rows = reshape(x, {1, tokens, hidden});
  const Tensor grad_rows = reshape(grad, {1, tokens, hidden});
  const bool needs_x = ctx.needs_input_grad(0);
  std::vector<size_t> wanted;  // parameter indices whose gradients are wanted
  for (size_t i = 0; i < f.parameters.size(); ++i) {
    if (ctx.needs_input_grad(i + 1)) wanted.push_back(i);
  }
  std::vector<Tensor> sums(f.parameters.size());

  std::optional<Autocast> autocast[kNumDeviceTypes];
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    autocast[i].emplace(static_cast<DeviceType>(i), f.autocast[i].dtype, f.autocast[i].enabled,
                        f.autocast[i].cache_enabled);
  }
  CheckpointRegionsHidden no_regions;
  const SavedTensorsHooksGuard hooks = plain_saves();
  for (int64_t start = 0, t = 0; start < tokens; start += f.tile, ++t) {
    const int64_t n = std::min(f.tile, tokens - start);
    Tensor input = rows.narrow(1, start, n).detach();
    if (needs_x) input.set_requires_grad(true);
    Tensor out;
    {
      const GeneratorState& g = f.generators.at(static_cast<size_t>(t));
      DefaultGeneratorStateGuard generator(g.seed, g.offset);
      EnableGradGuard enable;
      MemoryCategoryScope category(MemoryCategory::activations);
      out = f.forward(input);
    }
    std::vector<Tensor> inputs;
    if (needs_x) inputs.push_back(input);
    for (size_t i : wanted) inputs.push_back(f.parameters[i]);
    Tensor grad_tile = grad_rows.narrow(1, start, n);
    std::vector<Tensor> grads = headroom::grad({out}, {grad_tile}, inputs);
    out = Tensor();
    size_t next = 0;
    if (needs_x) {
      if (grads[next].defined()) {
        grad_tile.copy_(grads[next]);
      } else {
        grad_tile.zero_();
      }
      ++next;
    }
    for (size_t i : wanted) {
      Tensor& g = grads[next++];
      if (!g.defined()) continue;
      if (!sums[i].defined()) {
        sums[i] = g.storage().use_count() == 1 && g.is_contiguous() ? std::move(g) : g.clone();
      } else {
        sums[i].add_(g);
      }
    }
  }
  std::vector<Tensor> result;
  result.push_back(needs_x ? std::move(grad) : Tensor());
  for (Tensor& s : sums) result.push_back(std::move(s));
  return result;
}

}  // namespace

int64_t mlp_tile_tokens(int64_t tokens, int64_t hidden, int64_t tile_tokens) {
  if (tile_tokens < 0) {
    throw ValueError(str_cat("tiled_mlp_tokens: ", tile_tokens, " is negative (0: automatic)"));
  }
  if (tokens <= 0) return 1;
  if (tile_tokens > 0) return tile_tokens;
  const int64_t tiles = (tokens + hidden - 1) / std::max<int64_t>(hidden, 1);
  if (tiles <= 1) return tokens;
  const int64_t tile = (tokens + tiles - 1) / tiles;
  return (tile + kTileRows - 1) / kTileRows * kTileRows;
}

Tensor tiled_mlp(const Module& module, const LayerForward& forward, const Tensor& x, int64_t tile) {
  const int64_t hidden = x.size(-1);
  const int64_t tokens = hidden == 0 ? 0 : x.numel() / hidden;
  if (tile <= 0) throw ValueError(str_cat("tiled_mlp: tile of ", tile, " tokens"));
  if (tokens <= tile) return forward(x);

  auto f = std::make_shared<TiledForward>();
  f->forward = forward;
  f->tile = tile;
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    f->autocast[i] = AutocastMode::get(static_cast<DeviceType>(i));
  }
  std::vector<Tensor> node_inputs = {x};
  for (const Tensor& p : module.parameters()) {
    if (p.requires_grad()) {
      f->parameters.push_back(p);
      node_inputs.push_back(p);
    }
  }
  // x is saved before the tiles run (Note [Tiled MLP]).
  std::shared_ptr<FunctionNode> node = make_function_node("TiledMlpBackward0", node_inputs);
  if (node) node->save(x);

  Tensor out;
  {
    NoGradGuard no_grad;
    CheckpointRegionsHidden no_regions;
    const Tensor rows = reshape(x, {1, tokens, hidden});
    Tensor out_rows;
    for (int64_t start = 0; start < tokens; start += tile) {
      f->generators.push_back({default_generator().seed(), default_generator().offset()});
      const Tensor y = forward(rows.narrow(1, start, std::min(tile, tokens - start)));
      if (!out.defined()) {
        if (y.ndim() != 3 || y.size(0) != 1 || y.size(2) != hidden) {
          throw ValueError(str_cat("tiled_mlp: the MLP maps a tile ", y.shape(),
                                   "; tiling needs [1, tokens, ", hidden, "]"));
        }
        MemoryCategoryScope category(MemoryCategory::activations);
        out = Tensor::empty(x.shape(), y.dtype(), y.device());
        out_rows = reshape(out, {1, tokens, hidden});
      }
      out_rows.narrow(1, start, y.size(1)).copy_(y);
    }
  }
  if (node) {
    node->set_backward([f](BackwardContext& ctx) { return tiled_backward(*f, ctx); });
    node->set_outputs({out});
  }
  return out;
}

void enable_tiled_mlp(CausalLM& model, int64_t tile_tokens) {
  mlp_tile_tokens(1, 1, tile_tokens);  // refuses a negative tile
  BlockRunners runners = model.block_runners();
  runners.mlp = [tile_tokens](const Module& module, const LayerForward& forward, const Tensor& x) {
    const int64_t hidden = x.size(-1);
    const int64_t tokens = hidden == 0 ? 0 : x.numel() / hidden;
    return tiled_mlp(module, forward, x, mlp_tile_tokens(tokens, hidden, tile_tokens));
  };
  model.set_block_runners(std::move(runners));
}

}  // namespace headroom
