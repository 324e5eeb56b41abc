// Data-parallel gradient averaging as torch DDP's Reducer does it: gradients gathered into
// buckets in reverse parameter order, each bucket all-reduced as soon as backward has produced
// all of its gradients, so that communication overlaps the rest of backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace headroom {

struct GradientBucketOptions {
  int64_t bucket_cap_bytes = 25 << 20;      // DDP's bucket_cap_mb = 25
  int64_t first_bucket_cap_bytes = 1 << 20;  // dist._DEFAULT_FIRST_BUCKET_BYTES: the first
                                             // bucket is small so that communication starts early
};

// Parameter indices (into the list given) per bucket, as torch's compute_bucket_assignment_by_size:
// parameters taken in reverse order, one bucket list per dtype; a bucket is closed once it
// reaches its limit (the first of each dtype first_bucket_cap_bytes, later ones bucket_cap_bytes),
// so a parameter larger than the limit has a bucket of its own.
std::vector<std::vector<size_t>> gradient_bucket_assignment(const std::vector<Tensor>& params,
                                                            const GradientBucketOptions& options);

// Every rank's `params` become rank `root`'s (DDP's start: the model as rank 0 made it).
void broadcast_parameters(Communicator& communicator, const std::vector<Tensor>& params,
                          int root = 0);

// Note [Gradient averaging during backward]
// The reducer registers a post-accumulate-grad hook on every parameter (Note [Post-accumulate-grad
// hooks]). With synchronisation on, a hook copies the parameter's gradient into its bucket; a
// bucket whose gradients are all in is all-reduced (avg) at once, buckets starting in order
// (bucket 0 first), as every rank must issue the same collectives in the same order. finish()
// waits for them all and copies the averaged values back into each .grad. With synchronisation
// off (DDP's no_sync(), the micro-batches of an accumulation before the last) the hooks do
// nothing and the gradients accumulate locally; the last micro-batch's backward then reduces the
// accumulated sums, so one all-reduce per optimizer step.
class GradientReducer {
 public:
  // Buckets of `params` (named, for messages; each must require grad and be on the communicator's
  // device), each bucket's buffer allocated once, as the gradients' memory.
  GradientReducer(std::shared_ptr<Communicator> communicator,
                  std::vector<std::pair<std::string, Tensor>> params,
                  GradientBucketOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Whether the next backward reduces (see the note). Starts on.
  void set_require_sync(bool require_sync) { require_sync_ = require_sync; }
  bool require_sync() const { return require_sync_; }

  // After a backward with synchronisation on: waits for every bucket and writes the averages into
  // the gradients. Error naming a parameter that got no gradient in that backward (every rank
  // must send every bucket). Does nothing after a backward with synchronisation off.
  void finish();

  size_t bucket_count() const { return buckets_.size(); }
  // The parameters (indices into the list given) of bucket `index`.
  const std::vector<size_t>& bucket_params(size_t index) const { return buckets_[index].params; }
  // Seconds spent in finish() (waiting for the last buckets, copying back) since construction.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // each parameter's first element in `buffer`
    Tensor buffer;                 // flat, the parameters' dtype
    size_t pending = 0;            // gradients still to come in this backward
    std::unique_ptr<CommWork> work;
  };

  void on_gradient(size_t param);
  void launch_ready_buckets();
  void start_backward();

  std::shared_ptr<Communicator> communicator_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // per parameter: bucket, slot in it
  std::vector<int> hooks_;
  std::vector<bool> arrived_;  // per parameter, in the current backward
  bool require_sync_ = true;
  bool in_backward_ = false;   // a synchronised backward has delivered a gradient
  size_t next_bucket_ = 0;     // the next bucket to start
  double wait_seconds_ = 0.0;
};

}  // namespace headroom
