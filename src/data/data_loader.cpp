// DataLoader: batch assembly, the worker threads that run it ahead, and the saved position
// (see Note [DataLoader determinism]).
#include "data/data_loader.h"

#include <algorithm>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/error.h"
#include "data/permutation.h"
#include "core/json_file.h"

namespace headroom {

// Worker w of W assembles batches first + w, first + w + W, ... of the current epoch into its own
// queue of at most `prefetch` batches (PyTorch's round-robin); the consumer takes batch i from
// worker (i - first) % W, so batches come out in index order.
class DataLoader::WorkerPool {
 public:
  WorkerPool(const DataLoader& loader, int64_t num_workers, int64_t prefetch)
      : loader_(loader),
        prefetch_(static_cast<size_t>(prefetch)),
        slots_(static_cast<size_t>(num_workers)) {
    threads_.reserve(slots_.size());
    for (size_t w = 0; w < slots_.size(); ++w) threads_.emplace_back([this, w] { run(w); });
  }

  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  // Starts batches [first, end) of an epoch; whatever was assembled for an earlier job is dropped.
  void start(std::shared_ptr<const std::vector<int64_t>> order, int64_t first, int64_t end) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++generation_;
      order_ = std::move(order);
      first_ = first;
      end_ = end;
      for (size_t w = 0; w < slots_.size(); ++w) {
        slots_[w].ready.clear();
        slots_[w].next = first + static_cast<int64_t>(w);
      }
    }
    cv_.notify_all();
  }

  TokenBatch take(int64_t index) {
    Slot& slot =
        slots_[static_cast<size_t>((index - first_) % static_cast<int64_t>(slots_.size()))];
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !slot.ready.empty(); });
    Ready ready = std::move(slot.ready.front());
    slot.ready.pop_front();
    lock.unlock();
    cv_.notify_all();
    HEADROOM_CHECK(ready.index == index, "DataLoader worker queue out of order: expected batch ",
                   index, ", got ", ready.index);
    if (ready.error) std::rethrow_exception(ready.error);
    return std::move(ready.batch);
  }

 private:
  struct Ready {
    int64_t index = 0;
    TokenBatch batch;
    std::exception_ptr error;  // assembling failed; rethrown to the consumer at this index
  };
  struct Slot {
    std::deque<Ready> ready;
    int64_t next = 0;
  };

  void run(size_t w) {
    Slot& slot = slots_[w];
    const auto stride = static_cast<int64_t>(slots_.size());
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] {
        return stop_ || (generation_ > 0 && slot.next < end_ && slot.ready.size() < prefetch_);
      });
      if (stop_) return;
      const uint64_t generation = generation_;
      std::shared_ptr<const std::vector<int64_t>> order = order_;
      Ready ready;
      ready.index = slot.next;
      slot.next += stride;
      lock.unlock();
      try {
        ready.batch = loader_.assemble(order.get(), ready.index);
      } catch (...) {
        ready.error = std::current_exception();
      }
      lock.lock();
      if (generation != generation_) continue;  // start() replaced the job meanwhile
      slot.ready.push_back(std::move(ready));
      cv_.notify_all();
    }
  }

  const DataLoader& loader_;
  const size_t prefetch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t generation_ = 0;  // 0: no job yet
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t first_ = 0;
  int64_t end_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

nlohmann::json DataLoaderState::to_json() const {
  return {{"epoch", epoch}, {"batch_index", batch_index}, {"seed", seed}};
}

DataLoaderState DataLoaderState::from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    throw ValueError(str_cat(source, ": the data loader state is ", describe_json(json),
                             ", not an object with epoch, batch_index and seed"));
  }
  auto field = [&](const char* name) -> const nlohmann::json& {
    auto it = json.find(name);
    if (it == json.end()) {
      throw ValueError(str_cat(source, ": the data loader state has no \"", name, "\" field"));
    }
    if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
      throw ValueError(str_cat(source, ": data loader state \"", name, "\" is ", describe_json(*it),
                               ", not a non-negative integer"));
    }
    return *it;
  };
  auto int64_field = [&](const char* name) {
    const nlohmann::json& value = field(name);
    if (value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      throw ValueError(str_cat(source, ": data loader state \"", name, "\" is ",
                               describe_json(value), ", above the limit ", INT64_MAX));
    }
    return value.get<int64_t>();
  };
  DataLoaderState state;
  state.epoch = int64_field("epoch");
  state.batch_index = int64_field("batch_index");
  state.seed = field("seed").get<uint64_t>();
  return state;
}

TokenBatch WindowExamples::collate(std::span<const int64_t> indices) const {
  const auto rows = static_cast<int64_t>(indices.size());
  const int64_t t = windows_.seq_length();
  TokenBatch batch{Tensor::empty({rows, t}, DType::i64), Tensor::empty({rows, t}, DType::i64)};
  int64_t* inputs = batch.input_ids.data<int64_t>();
  int64_t* targets = batch.targets.data<int64_t>();
  std::vector<int64_t> sequence(static_cast<size_t>(t + 1));
  for (int64_t r = 0; r < rows; ++r) {
    windows_.copy_sequence(indices[static_cast<size_t>(r)], sequence.data());
    std::copy(sequence.begin(), sequence.end() - 1, inputs + r * t);
    std::copy(sequence.begin() + 1, sequence.end(), targets + r * t);
  }
  batch.target_count = static_cast<int64_t>(
      std::count_if(targets, targets + rows * t, [](int64_t id) { return id != -100; }));
  return batch;
}

DataLoader::DataLoader(PackedSequences data, DataLoaderOptions options,
                       std::optional<DataLoaderState> resume)
    : DataLoader(std::make_shared<const WindowExamples>(std::move(data)), options, resume) {}

DataLoader::DataLoader(std::shared_ptr<const ExampleSet> data, DataLoaderOptions options,
                       std::optional<DataLoaderState> resume)
    : data_(std::move(data)), options_(options) {
  if (options_.batch_size < 1) {
    throw ValueError(
        str_cat("DataLoader: batch_size is ", options_.batch_size, ", it must be at least 1"));
  }
  if (options_.num_workers < 0) {
    throw ValueError(str_cat("DataLoader: dataloader_num_workers is ", options_.num_workers,
                             ", it must be at least 0"));
  }
  if (options_.prefetch_factor) {
    if (options_.num_workers == 0) {
      throw ValueError(str_cat("DataLoader: dataloader_prefetch_factor is ",
                               *options_.prefetch_factor,
                               " but it can only be set with dataloader_num_workers > 0"));
    }
    if (*options_.prefetch_factor < 1) {
      throw ValueError(str_cat("DataLoader: dataloader_prefetch_factor is ",
                               *options_.prefetch_factor, ", it must be at least 1"));
    }
  }
  if (options_.persistent_workers && options_.num_workers == 0) {
    throw ValueError("DataLoader: dataloader_persistent_workers needs dataloader_num_workers > 0");
  }
  const int64_t n = data_->size();
  num_batches_ = options_.drop_last ? n / options_.batch_size
                                    : (n + options_.batch_size - 1) / options_.batch_size;
  if (resume) {
    if (resume->epoch < 0) {
      throw ValueError(
          str_cat("DataLoader: resume state epoch is ", resume->epoch, ", it must be at least 0"));
    }
    if (resume->batch_index < 0 || resume->batch_index > num_batches_) {
      throw ValueError(str_cat("DataLoader: resume state batch_index is ", resume->batch_index,
                               ", outside 0..", num_batches_, " (batches per epoch)"));
    }
    // The batches consumed, epoch * batches per epoch + batch_index, must stay far from int64's
    // end: a run counts on from there.
    constexpr int64_t kLimit = int64_t{1} << 62;
    if (num_batches_ > 0 && resume->epoch > (kLimit - resume->batch_index) / num_batches_) {
      throw ValueError(str_cat("DataLoader: resume state epoch is ", resume->epoch, ", above ",
                               (kLimit - resume->batch_index) / num_batches_, " (2^62 batches of ",
                               num_batches_, " per epoch)"));
    }
    epoch_ = resume->epoch;
    batch_index_ = resume->batch_index;
    options_.seed = resume->seed;
  }
}

DataLoader::~DataLoader() = default;

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch < 0) throw ValueError(str_cat("DataLoader: epoch is ", epoch, ", it must be >= 0"));
  epoch_ = epoch;
  batch_index_ = 0;
  workers_started_epoch_ = false;
}

const std::vector<int64_t>* DataLoader::order_for_epoch() {
  if (!options_.shuffle) return nullptr;
  if (order_epoch_ != epoch_) {
    order_ = std::make_shared<const std::vector<int64_t>>(
        epoch_permutation(data_->size(), options_.seed, epoch_));
    order_epoch_ = epoch_;
  }
  return order_.get();
}

std::optional<TokenBatch> DataLoader::next() {
  if (batch_index_ >= num_batches_) {
    ++epoch_;
    batch_index_ = 0;
    workers_started_epoch_ = false;
    if (!options_.persistent_workers) workers_.reset();  // PyTorch joins them at epoch end
    return std::nullopt;
  }
  // The position advances only once the batch is in hand, so a failed batch can be asked again.
  const std::vector<int64_t>* order = order_for_epoch();
  if (options_.num_workers == 0) {
    TokenBatch batch = assemble(order, batch_index_);
    ++batch_index_;
    return batch;
  }
  if (workers_ == nullptr) {
    workers_ = std::make_unique<WorkerPool>(*this, options_.num_workers,
                                            options_.prefetch_factor.value_or(2));
  }
  if (!workers_started_epoch_) {
    workers_->start(options_.shuffle ? order_ : nullptr, batch_index_, num_batches_);
    workers_started_epoch_ = true;
  }
  TokenBatch batch = workers_->take(batch_index_);
  ++batch_index_;
  return batch;
}

TokenBatch DataLoader::batch_at(int64_t epoch, int64_t index) const {
  if (epoch < 0) throw ValueError(str_cat("DataLoader: epoch is ", epoch, ", it must be >= 0"));
  if (!options_.shuffle) return assemble(nullptr, index);
  const std::vector<int64_t> order = epoch_permutation(data_->size(), options_.seed, epoch);
  return assemble(&order, index);
}

TokenBatch DataLoader::assemble(const std::vector<int64_t>* order, int64_t index) const {
  if (index < 0 || index >= num_batches_) {
    throw IndexError(str_cat("DataLoader: batch ", index, " is outside 0..", num_batches_ - 1));
  }
  const int64_t first = index * options_.batch_size;
  const int64_t rows = std::min(options_.batch_size, data_->size() - first);
  std::vector<int64_t> indices(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = first + r;
    indices[static_cast<size_t>(r)] = order ? (*order)[static_cast<size_t>(position)] : position;
  }
  TokenBatch batch = data_->collate(indices);
  if (options_.pin_memory && options_.pin_memory_device.is_cuda()) {
    batch.input_ids = batch.input_ids.pin_memory();
    batch.targets = batch.targets.pin_memory();
  }
  return batch;
}

}  // namespace headroom
