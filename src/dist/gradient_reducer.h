// Data-parallel gradient averaging as torch DDP's Reducer does it: gradients gathered into
// buckets in reverse parameter order, each bucket all-reduced as soon as backward has produced
// all of its gradients, so that communication overlaps the rest of backward. With owners
// (ZeRO-2) each gradient is reduced to its owner rank only and the others drop it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace headroom {

struct GradientBucketOptions {
  int64_t bucket_cap_bytes = 25 << 20;       // DDP's bucket_cap_mb = 25
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

// Note [ZeRO-2 gradient reduction]
// Given each parameter's owner rank (ZeRO's partition, dist/zero_optimizer.h), the reducer
// keeps no gradient it does not own. A bucket's buffer is allocated when its first gradient
// arrives and laid out by owner (rank 0's parameters first, then rank 1's, ...); each arriving
// gradient is copied in, and a gradient this rank does not own is dropped at once, so the full
// gradients never exist together. A complete bucket is reduced (avg) to each owner, one reduce
// per owner's run of the buffer (DeepSpeed's stage 2 reduces bucket partitions to their ranks
// likewise; the shares are whole parameters, so the runs differ in length and a reduce, not an
// equal-chunk reduce_scatter, fits them). A bucket's reduction overlaps backward until the next
// bucket starts: then it is waited for, the owned averages copied into their .grad and the
// buffer freed, so at most two buffers exist and the peak is the same in every run (the plan's
// dry run allocates the same, see dist/meta_communicator.h). finish() completes the last.
// During accumulation (synchronisation off) gradients accumulate in full as DDP's do.
class GradientReducer {
 public:
  // Buckets of `params` (named, for messages; each must require grad and be on the communicator's
  // device). Without `owners`, each bucket's buffer is allocated once, as the gradients' memory
  // (DDP). With `owners` (one rank per parameter, the same on every rank), See Note [ZeRO-2
  // gradient reduction].
  GradientReducer(std::shared_ptr<Communicator> communicator,
                  std::vector<std::pair<std::string, Tensor>> params,
                  GradientBucketOptions options = {}, std::vector<int> owners = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Whether the next backward reduces (see the note). Starts on.
  void set_require_sync(bool require_sync) { require_sync_ = require_sync; }
  bool require_sync() const { return require_sync_; }

  // After a backward with synchronisation on: waits for every bucket and writes the averages into
  // the gradients (with owners: into the owned ones; the others are dropped). Error naming a
  // parameter that got no gradient in that backward (every rank must send every bucket). Does
  // nothing after a backward with synchronisation off.
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
    int64_t elements = 0;
    DType dtype = DType::f32;
    Tensor buffer;  // flat, the parameters' dtype (with owners: while reduced)
    // With owners: each rank's run of `buffer` (rank, first element, elements), ranks in order.
    std::vector<std::tuple<int, int64_t, int64_t>> owner_runs;
    size_t pending = 0;  // gradients still to come in this backward
    std::vector<std::unique_ptr<CommWork>> works;
  };

  bool sharded() const { return !owners_.empty(); }
  void on_gradient(size_t param);
  void launch_ready_buckets();
  void start_backward();
  // Waits for `bucket`'s reductions and copies the results into the .grad of its parameters
  // (with owners: the owned ones, then frees the buffer).
  void complete(Bucket& bucket);

  std::shared_ptr<Communicator> communicator_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<int> owners_;  // empty: DDP
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // per parameter: bucket, slot in it
  std::vector<int> hooks_;
  std::vector<bool> arrived_;  // per parameter, in the current backward
  bool require_sync_ = true;
  bool in_backward_ = false;  // a synchronised backward has delivered a gradient
  size_t next_bucket_ = 0;    // the next bucket to start
  double wait_seconds_ = 0.0;
};

}  // namespace headroom
