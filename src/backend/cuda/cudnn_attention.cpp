// cuDNN's SDPA graphs for the attention kernels (backend/cuda/cudnn_attention.h): eligibility,
// the graph cache, libcudnn opened with dlopen, and the calls. The only file that includes the
// cuDNN frontend: its functions reach libcudnn through the handle set here
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), and its JSON serialisation, which nothing here uses,
// is left out of the compile.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include "backend/cuda/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <link.h>

#include <array>
#include <atomic>
#include <bit>
#include <compare>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "core/error.h"

// The frontend's dynamic loading resolves every cuDNN function in this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace headroom::cuda {
namespace {

namespace fe = cudnn_frontend;

struct Library {
  void* handle = nullptr;
  std::string description;  // path and version, or why it could not be opened
};

// The soname of the cuDNN the build's headers are (CUDNN_MAJOR from cudnn_version.h).
std::string library_name() { return "libcudnn.so." + std::to_string(CUDNN_MAJOR); }

Library open_library() {
  const std::string name = library_name();
  Library lib;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    lib.description = str_cat("cannot open ", name, ": ", dlerror());
    return lib;
  }
  auto version = reinterpret_cast<size_t (*)()>(dlsym(handle, "cudnnGetVersion"));
  if (!version) {
    lib.description = str_cat(name, " has no cudnnGetVersion");
    dlclose(handle);
    return lib;
  }
  std::string path = name;
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) {
    path = map->l_name;
  }
  lib.handle = handle;  // open for the process
  lib.description = str_cat(path, ", cuDNN ", fe::detail::convert_version_to_str(version()));
  fe::cudnn_dlhandle = handle;
  return lib;
}

const Library& library() {
  static const Library lib = open_library();
  return lib;
}

constexpr int64_t kAlignment = 16;  // bytes: cuDNN's kernels load 16-byte rows
constexpr int64_t kStrideMultiple = 8;
constexpr int64_t kMaxHeadDim = 256;

bool aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlignment == 0;
}

// A [B, H, T, D] operand cuDNN can read or write in place: unit stride in D, the others multiples
// of 8 elements, 16-byte aligned.
bool in_place(const Tensor& t) {
  if (!aligned(t) || t.stride(3) != 1) return false;
  for (int dim = 0; dim < 3; ++dim) {
    if (t.stride(dim) % kStrideMultiple != 0) return false;
  }
  return true;
}

const char* problem_refusal(const Tensor& q, const Tensor& k, bool causal, int64_t window,
                            float softcap, const DropoutParams& dropout,
                            const AttentionSequences& sequences) {
  if (q.dtype() != DType::bf16 && q.dtype() != DType::f16) return "not bf16 or f16";
  if (dropout.p > 0.0f) return "dropout";
  if (softcap != 0.0f) return "softcap";
  if (sequences.packed()) return "packed sequences";
  if (window > 0 && !causal) return "a window without causal";
  const int64_t d = q.size(3);
  if (d % kStrideMultiple != 0 || d > kMaxHeadDim) return "head size";
  if (q.numel() == 0 || k.numel() == 0) return "empty";
  return nullptr;
}

// Variant-pack ids of the graphs' tensors.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kOut,
  kStats,
  kGradOut,
  kGradQ,
  kGradK,
  kGradV,
};

// The strides (dims 0..2) of each operand a graph reads or writes; zeros for those it does not.
enum Operand { kOpQ, kOpK, kOpV, kOpOut, kOpGradOut, kOpGradQ, kOpGradK, kOpGradV, kOperands };

struct GraphKey {
  int device = 0;
  bool backward = false;
  DType dtype = DType::bf16;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, dim = 0;
  bool causal = false;
  int64_t window = 0;
  uint32_t scale_bits = 0;
  std::array<int64_t, 3 * kOperands> strides{};
  auto operator<=>(const GraphKey&) const = default;
};

struct GraphEntry {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the problem
  int64_t workspace_bytes = 0;
  std::string refusal;
};

GraphKey key_of(bool backward, const Tensor& q, const Tensor& k, bool causal, int64_t window,
                float scale, std::initializer_list<std::pair<Operand, const Tensor*>> operands) {
  GraphKey key;
  key.device = q.device().index;
  key.backward = backward;
  key.dtype = q.dtype();
  key.batch = q.size(0);
  key.q_heads = q.size(1);
  key.kv_heads = k.size(1);
  key.q_len = q.size(2);
  key.kv_len = k.size(2);
  key.dim = q.size(3);
  key.causal = causal;
  key.window = window;
  key.scale_bits = std::bit_cast<uint32_t>(scale);
  for (const auto& [operand, t] : operands) {
    for (int dim = 0; dim < 3; ++dim) key.strides[3 * operand + dim] = t->stride(dim);
  }
  return key;
}

std::vector<int64_t> dims_of(const GraphKey& key, Operand operand) {
  const bool kv = operand == kOpK || operand == kOpV || operand == kOpGradK || operand == kOpGradV;
  return {key.batch, kv ? key.kv_heads : key.q_heads, kv ? key.kv_len : key.q_len, key.dim};
}

std::vector<int64_t> strides_of(const GraphKey& key, Operand operand) {
  const int64_t* s = &key.strides[3 * operand];
  return {s[0], s[1], s[2], 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> operand_tensor(fe::graph::Graph& graph,
                                                             const GraphKey& key, Operand operand,
                                                             const char* name, Uid uid) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(dims_of(key, operand))
                          .set_stride(strides_of(key, operand)));
}

// The lse / Stats tensor: f32 [B, Hq, T, 1], contiguous.
std::vector<int64_t> stats_dims(const GraphKey& key) {
  return {key.batch, key.q_heads, key.q_len, 1};
}
std::vector<int64_t> stats_strides(const GraphKey& key) {
  return {key.q_heads * key.q_len, key.q_len, 1, 1};
}

std::shared_ptr<fe::graph::Graph> new_graph(const GraphKey& key) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph
      ->set_io_data_type(key.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The mask of Note [Attention through cuDNN] on forward's or backward's options.
template <typename Options>
void set_mask(Options& options, const GraphKey& key) {
  if (!key.causal) return;
  options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
      .set_diagonal_band_right_bound(0);
  if (key.window > 0) options.set_diagonal_band_left_bound(static_cast<int>(key.window));
}

std::shared_ptr<fe::graph::Graph> forward_graph(const GraphKey& key, float scale) {
  auto graph = new_graph(key);
  auto q = operand_tensor(*graph, key, kOpQ, "q", kQ);
  auto k = operand_tensor(*graph, key, kOpK, "k", kK);
  auto v = operand_tensor(*graph, key, kOpV, "v", kV);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(true)
                     .set_attn_scale(scale);
  set_mask(options, key);
  auto [out, stats] = graph->sdpa(q, k, v, options);
  out->set_output(true)
      .set_uid(kOut)
      .set_dim(dims_of(key, kOpOut))
      .set_stride(strides_of(key, kOpOut));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dims(key))
      .set_stride(stats_strides(key));
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const GraphKey& key, float scale) {
  auto graph = new_graph(key);
  auto q = operand_tensor(*graph, key, kOpQ, "q", kQ);
  auto k = operand_tensor(*graph, key, kOpK, "k", kK);
  auto v = operand_tensor(*graph, key, kOpV, "v", kV);
  auto out = operand_tensor(*graph, key, kOpOut, "out", kOut);
  auto grad_out = operand_tensor(*graph, key, kOpGradOut, "grad_out", kGradOut);
  auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("lse")
                                 .set_uid(kStats)
                                 .set_dim(stats_dims(key))
                                 .set_stride(stats_strides(key))
                                 .set_data_type(fe::DataType_t::FLOAT));
  // Not set_deterministic_algorithm: it takes a B Hq T S workspace for dP.
  auto options =
      fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_attn_scale(scale);
  set_mask(options, key);
  auto [grad_q, grad_k, grad_v] = graph->sdpa_backward(q, k, v, out, grad_out, stats, options);
  const std::array<std::tuple<std::shared_ptr<fe::graph::Tensor_attributes>, Operand, Uid>, 3>
      outputs{{{grad_q, kOpGradQ, kGradQ}, {grad_k, kOpGradK, kGradK}, {grad_v, kOpGradV, kGradV}}};
  for (const auto& [tensor, operand, uid] : outputs) {
    tensor->set_output(true)
        .set_uid(uid)
        .set_dim(dims_of(key, operand))
        .set_stride(strides_of(key, operand));
  }
  return graph;
}

// What the calls share, under one lock: the graphs, a cuDNN handle per device, the statistics.
struct State {
  std::mutex mutex;
  std::map<GraphKey, GraphEntry> graphs;
  std::map<int, cudnnHandle_t> handles;
  CudnnAttentionStats stats;
};

State& state() {
  static State* s = new State;  // never destroyed: cuDNN handles outlive static destruction
  return *s;
}

std::atomic<bool> enabled{true};

cudnnHandle_t handle_for(State& s, int device) {
  auto it = s.handles.find(device);
  if (it != s.handles.end()) return it->second;
  DeviceGuard guard(device);
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t status = fe::detail::create_handle(&handle);
  if (status != CUDNN_STATUS_SUCCESS) {
    throw Error(
        str_cat("cudnnCreate failed on cuda:", device, ": ", fe::detail::get_error_string(status)));
  }
  s.handles.emplace(device, handle);
  return handle;
}

// The graph of `key`, built on first use; a build that fails leaves a refusal.
GraphEntry& entry_for(State& s, const GraphKey& key, float scale, cudnnHandle_t handle) {
  auto it = s.graphs.find(key);
  if (it != s.graphs.end()) return it->second;
  GraphEntry entry;
  try {
    auto graph = key.backward ? backward_graph(key, scale) : forward_graph(key, scale);
    auto status = graph->build(handle, {fe::HeurMode_t::A});
    int64_t workspace = 0;
    if (status.is_good()) status = graph->get_workspace_size(workspace);
    if (status.is_good()) {
      entry.graph = std::move(graph);
      entry.workspace_bytes = workspace;
    } else {
      entry.refusal = str_cat("cuDNN: ", status.get_message());
    }
  } catch (const std::exception& e) {  // the frontend throws where the library lacks a function
    entry.refusal = str_cat("cuDNN: ", e.what());
  }
  // Forward has no workspace to hand cuDNN (Note [Attention through cuDNN]).
  if (entry.graph && !key.backward && entry.workspace_bytes > 0) {
    entry.refusal =
        str_cat("cuDNN's forward plan needs ", entry.workspace_bytes, " bytes of workspace");
    entry.graph.reset();
  }
  return s.graphs.emplace(key, std::move(entry)).first->second;
}

bool decline(bool backward, const std::string& why) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++(backward ? s.stats.backward_declined : s.stats.forward_declined);
  s.stats.last_declined = why;
  return false;
}

// The library, or a decline with one warning per process when it cannot be opened.
bool library_ready() {
  const Library& lib = library();
  if (lib.handle) return true;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr,
                 "headroom: warning: cuDNN is not available (%s): attention runs on headroom's own "
                 "CUDA kernels\n",
                 lib.description.c_str());
  });
  return false;
}

// Runs entry's graph on the current stream; a failure turns the entry into a refusal.
bool execute(GraphEntry& entry, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack,
             void* workspace, std::string& why) {
  try {
    const cudnnStatus_t stream_status = fe::detail::set_stream(handle, current_stream());
    if (stream_status != CUDNN_STATUS_SUCCESS) {
      why = str_cat("cudnnSetStream: ", fe::detail::get_error_string(stream_status));
      return false;
    }
    auto status = entry.graph->execute(handle, pack, workspace);
    if (status.is_good()) return true;
    why = str_cat("cuDNN: ", status.get_message());
  } catch (const std::exception& e) {
    why = str_cat("cuDNN: ", e.what());
  }
  entry.graph.reset();
  entry.refusal = why;
  return false;
}

}  // namespace

const char* cudnn_attention_refusal(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, bool causal,
                                    int64_t window, float softcap, const DropoutParams& dropout,
                                    const AttentionSequences& sequences) {
  if (const char* why = problem_refusal(q, k, causal, window, softcap, dropout, sequences)) {
    return why;
  }
  for (const Tensor* t : {&q, &k, &v, &out}) {
    if (!in_place(*t)) return "strides or alignment";
  }
  if (!aligned(lse)) return "strides or alignment";
  return nullptr;
}

const char* cudnn_attention_backward_refusal(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& grad_out,
                                             const Tensor& lse, const Tensor& grad_q,
                                             const Tensor& grad_k, const Tensor& grad_v,
                                             bool causal, int64_t window, float softcap,
                                             const DropoutParams& dropout,
                                             const AttentionSequences& sequences) {
  if (const char* why =
          cudnn_attention_refusal(q, k, v, out, lse, causal, window, softcap, dropout, sequences)) {
    return why;
  }
  for (const Tensor* t : {&grad_out, &grad_q, &grad_k, &grad_v}) {
    if (!in_place(*t)) return "strides or alignment";
  }
  return nullptr;
}

bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                             int64_t window, float scale, float softcap,
                             const DropoutParams& dropout, const Tensor& out, const Tensor& lse,
                             const AttentionSequences& sequences) {
  if (!enabled.load()) return decline(false, "cuDNN attention is switched off");
  if (const char* why =
          cudnn_attention_refusal(q, k, v, out, lse, causal, window, softcap, dropout, sequences)) {
    return decline(false, why);
  }
  if (!library_ready()) return decline(false, library().description);
  const GraphKey key = key_of(false, q, k, causal, window, scale,
                              {{kOpQ, &q}, {kOpK, &k}, {kOpV, &v}, {kOpOut, &out}});
  State& s = state();
  std::string why;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    DeviceGuard guard(key.device);
    cudnnHandle_t handle = handle_for(s, key.device);
    GraphEntry& entry = entry_for(s, key, scale, handle);
    if (entry.graph) {
      std::unordered_map<int64_t, void*> pack{{kQ, q.data_ptr()},
                                              {kK, k.data_ptr()},
                                              {kV, v.data_ptr()},
                                              {kOut, out.data_ptr()},
                                              {kStats, lse.data_ptr()}};
      if (execute(entry, handle, pack, nullptr, why)) {
        ++s.stats.forward;
        return true;
      }
    } else {
      why = entry.refusal;
    }
  }
  return decline(false, why);
}

bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& grad_out, const Tensor& lse, bool causal,
                              int64_t window, float scale, float softcap,
                              const DropoutParams& dropout, const Tensor& delta,
                              const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                              const Tensor& grad_q_accum, const AttentionSequences& sequences) {
  if (!enabled.load()) return decline(true, "cuDNN attention is switched off");
  if (const char* why =
          cudnn_attention_backward_refusal(q, k, v, out, grad_out, lse, grad_q, grad_k, grad_v,
                                           causal, window, softcap, dropout, sequences)) {
    return decline(true, why);
  }
  // The workspace: grad_q_accum, and delta with it when they are the op's one allocation (Note
  // [Attention backward workspace]).
  if (!grad_q_accum.defined() || !aligned(grad_q_accum)) {
    return decline(true, "no aligned workspace");
  }
  int64_t workspace_bytes = static_cast<int64_t>(grad_q_accum.nbytes());
  const char* accum_end = static_cast<const char*>(grad_q_accum.data_ptr()) + workspace_bytes;
  if (delta.storage() == grad_q_accum.storage() && delta.data_ptr() == accum_end) {
    workspace_bytes += static_cast<int64_t>(delta.nbytes());
  }
  if (!library_ready()) return decline(true, library().description);
  const GraphKey key = key_of(true, q, k, causal, window, scale,
                              {{kOpQ, &q},
                               {kOpK, &k},
                               {kOpV, &v},
                               {kOpOut, &out},
                               {kOpGradOut, &grad_out},
                               {kOpGradQ, &grad_q},
                               {kOpGradK, &grad_k},
                               {kOpGradV, &grad_v}});
  State& s = state();
  std::string why;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    DeviceGuard guard(key.device);
    cudnnHandle_t handle = handle_for(s, key.device);
    GraphEntry& entry = entry_for(s, key, scale, handle);
    if (!entry.graph) {
      why = entry.refusal;
    } else if (entry.workspace_bytes > workspace_bytes) {
      why = str_cat("cuDNN's backward plan needs ", entry.workspace_bytes,
                    " bytes of workspace, the op hands it ", workspace_bytes);
    } else {
      std::unordered_map<int64_t, void*> pack{{kQ, q.data_ptr()},
                                              {kK, k.data_ptr()},
                                              {kV, v.data_ptr()},
                                              {kOut, out.data_ptr()},
                                              {kGradOut, grad_out.data_ptr()},
                                              {kStats, lse.data_ptr()},
                                              {kGradQ, grad_q.data_ptr()},
                                              {kGradK, grad_k.data_ptr()},
                                              {kGradV, grad_v.data_ptr()}};
      if (execute(entry, handle, pack, grad_q_accum.data_ptr(), why)) {
        ++s.stats.backward;
        return true;
      }
    }
  }
  return decline(true, why);
}

CudnnAttentionStats cudnn_attention_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void set_cudnn_attention_enabled(bool on) { enabled.store(on); }
bool cudnn_attention_enabled() { return enabled.load(); }

CudnnLibraryInfo cudnn_library_info() {
  const Library& lib = library();
  return {lib.handle != nullptr, lib.description};
}

}  // namespace headroom::cuda
