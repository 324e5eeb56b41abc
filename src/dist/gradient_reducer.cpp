// GradientReducer: DDP's bucketed, overlapped gradient all-reduce (See Note [Gradient averaging
// during backward]).
#include "dist/gradient_reducer.h"

#include <chrono>
#include <map>

#include "autograd/accumulate_grad.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"

namespace headroom {

std::vector<std::vector<size_t>> gradient_bucket_assignment(const std::vector<Tensor>& params,
                                                            const GradientBucketOptions& options) {
  if (options.bucket_cap_bytes < 1 || options.first_bucket_cap_bytes < 1) {
    throw ValueError(str_cat("bucket sizes: ", options.first_bucket_cap_bytes, " and ",
                             options.bucket_cap_bytes, " bytes; both must be positive"));
  }
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    bool first = true;  // still the first bucket of its dtype
  };
  std::map<DType, Open> open;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i = params.size(); i-- > 0;) {
    Open& bucket = open[params[i].dtype()];
    bucket.params.push_back(i);
    bucket.bytes += static_cast<int64_t>(params[i].nbytes());
    const int64_t limit = bucket.first ? options.first_bucket_cap_bytes : options.bucket_cap_bytes;
    if (bucket.bytes >= limit) {
      buckets.push_back(std::move(bucket.params));
      bucket = Open{.params = {}, .bytes = 0, .first = false};
    }
  }
  // The partly filled ones last, as torch appends them after the loop.
  for (auto& [dtype, bucket] : open) {
    if (!bucket.params.empty()) buckets.push_back(std::move(bucket.params));
  }
  return buckets;
}

void broadcast_parameters(Communicator& communicator, const std::vector<Tensor>& params, int root) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (p.is_contiguous()) {
      communicator.broadcast(p.detach(), root);
    } else {
      const Tensor packed = p.contiguous();
      communicator.broadcast(packed, root);
      p.detach().copy_(packed);
    }
  }
}

GradientReducer::GradientReducer(std::shared_ptr<Communicator> communicator,
                                 std::vector<std::pair<std::string, Tensor>> params,
                                 GradientBucketOptions options, std::vector<int> owners)
    : communicator_(std::move(communicator)),
      params_(std::move(params)),
      owners_(std::move(owners)) {
  std::vector<Tensor> tensors;
  for (const auto& [name, p] : params_) {
    if (!p.requires_grad()) {
      throw ValueError(str_cat("GradientReducer: parameter '", name, "' does not require grad"));
    }
    if (p.device() != communicator_->device()) {
      throw ValueError(str_cat("GradientReducer: parameter '", name, "' is on ", p.device(),
                               ", the communicator on ", communicator_->device()));
    }
    tensors.push_back(p);
  }
  if (sharded() && owners_.size() != params_.size()) {
    throw ValueError(str_cat("GradientReducer: ", owners_.size(), " owners for ", params_.size(),
                             " parameters"));
  }
  for (size_t i = 0; i < owners_.size(); ++i) {
    if (owners_[i] < 0 || owners_[i] >= communicator_->world_size()) {
      throw ValueError(str_cat("GradientReducer: parameter '", params_[i].first, "' has owner ",
                               owners_[i], ", outside 0..", communicator_->world_size() - 1));
    }
  }
  location_.resize(params_.size());
  // DDP lays a bucket out in its parameters' order; with owners, rank by rank.
  const int runs = sharded() ? communicator_->world_size() : 1;
  for (std::vector<size_t>& assigned : gradient_bucket_assignment(tensors, options)) {
    Bucket bucket;
    bucket.dtype = tensors[assigned.front()].dtype();
    bucket.offsets.resize(assigned.size());
    for (int owner = 0; owner < runs; ++owner) {
      const int64_t first = bucket.elements;
      for (size_t slot = 0; slot < assigned.size(); ++slot) {
        if (sharded() && owners_[assigned[slot]] != owner) continue;
        location_[assigned[slot]] = {buckets_.size(), slot};
        bucket.offsets[slot] = bucket.elements;
        bucket.elements += tensors[assigned[slot]].numel();
      }
      if (sharded() && bucket.elements > first) {
        bucket.owner_runs.emplace_back(owner, first, bucket.elements - first);
      }
    }
    if (!sharded()) {
      bucket.buffer = Tensor::empty({bucket.elements}, bucket.dtype, communicator_->device());
      tag_memory(bucket.buffer, MemoryCategory::gradients);
    }
    bucket.params = std::move(assigned);
    buckets_.push_back(std::move(bucket));
  }
  arrived_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(register_post_accumulate_grad_hook(
        params_[i].second, [this, i](const Tensor&) { on_gradient(i); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < hooks_.size(); ++i) {
    remove_post_accumulate_grad_hook(params_[i].second, hooks_[i]);
  }
}

void GradientReducer::start_backward() {
  in_backward_ = true;
  next_bucket_ = 0;
  arrived_.assign(params_.size(), false);
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.works.clear();
    if (sharded()) bucket.buffer = Tensor();  // left by a backward that failed
  }
}

void GradientReducer::on_gradient(size_t param) {
  if (!require_sync_) return;
  if (!in_backward_) start_backward();
  if (arrived_[param]) return;  // a second accumulation in one backward: reduced once, at the end
  arrived_[param] = true;
  const auto [index, slot] = location_[param];
  Bucket& bucket = buckets_[index];
  const Tensor& parameter = params_[param].second;
  NoGradGuard no_grad;
  if (!bucket.buffer.defined()) {
    // See Note [ZeRO-2 gradient reduction]: the bucket's first gradient.
    bucket.buffer = Tensor::empty({bucket.elements}, bucket.dtype, communicator_->device());
    tag_memory(bucket.buffer, MemoryCategory::gradients);
  }
  const Tensor grad = parameter.grad();
  bucket.buffer.narrow(0, bucket.offsets[slot], grad.numel()).copy_(grad.reshape({-1}));
  if (sharded() && owners_[param] != communicator_->rank()) parameter.set_grad(Tensor());
  --bucket.pending;
  launch_ready_buckets();
}

void GradientReducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_++];
    if (sharded()) {
      // One bucket in flight beside this one (Note [ZeRO-2 gradient reduction]).
      if (next_bucket_ >= 2) complete(buckets_[next_bucket_ - 2]);
      for (const auto& [owner, first, elements] : bucket.owner_runs) {
        bucket.works.push_back(communicator_->reduce_async(bucket.buffer.narrow(0, first, elements),
                                                           owner, ReduceOp::avg));
      }
    } else {
      bucket.works.push_back(communicator_->all_reduce_async(bucket.buffer, ReduceOp::avg));
    }
  }
  // MPI moves a nonblocking operation along only inside its calls.
  for (size_t i = 0; i < next_bucket_; ++i) {
    for (const auto& work : buckets_[i].works) work->test();
  }
}

void GradientReducer::complete(Bucket& bucket) {
  if (bucket.works.empty()) return;  // completed already
  for (const auto& work : bucket.works) work->wait();
  bucket.works.clear();
  NoGradGuard no_grad;
  for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
    const size_t param = bucket.params[slot];
    if (sharded() && owners_[param] != communicator_->rank()) continue;
    const Tensor grad = params_[param].second.grad();
    grad.copy_(bucket.buffer.narrow(0, bucket.offsets[slot], grad.numel()).view(grad.shape()));
  }
  if (sharded()) bucket.buffer = Tensor();
}

void GradientReducer::finish() {
  if (!require_sync_ || !in_backward_) return;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!arrived_[i]) {
      in_backward_ = false;
      throw Error(str_cat("data-parallel training: parameter '", params_[i].first,
                          "' got no gradient in this backward; every rank must reduce every "
                          "trainable parameter (freeze it, or make it take part in the loss)"));
    }
  }
  for (Bucket& bucket : buckets_) complete(bucket);
  in_backward_ = false;
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace headroom
