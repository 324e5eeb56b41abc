// The Trainer's log entries: metrics.jsonl, the log line around the progress bar, callbacks.
#include "train/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "train/progress.h"

namespace headroom {

namespace fs = std::filesystem;

void Trainer::print_log_line(const std::string& line) {
  if (!is_main_process()) return;
  if (progress_) {
    progress_->print_line(line);
  } else {
    std::printf("%s\n", line.c_str());
  }
}

void Trainer::append_metrics(const nlohmann::ordered_json& entry) {
  log_history_.push_back(entry);
  if (!is_main_process()) return;  // every rank keeps the history; rank 0 writes it
  append_line((fs::path(args_.output_dir) / "metrics.jsonl").string(), entry.dump() + "\n");
  print_log_line(format_log_line(entry));
  for (const auto& callback : callbacks_) callback->on_log(*this, entry);
}

void Trainer::log_step(double loss, double grad_norm, double tokens_per_s) {
  nlohmann::ordered_json entry = {{"loss", loss}};
  entry["grad_norm"] =
      std::isnan(grad_norm) ? nlohmann::ordered_json() : nlohmann::ordered_json(grad_norm);
  entry["lr"] = optimizer_->lr();
  entry["epoch"] = epoch();
  entry["step"] = global_step_;
  entry["loss_scale"] = scaler_->get_scale();
  entry["tokens_per_s"] = tokens_per_s;
  if (fp8_) {
    // The logged step's values that FP8 clamped to its largest and flushed to zero.
    entry["fp8_overflow"] = fp8_counts_.first;
    entry["fp8_underflow"] = fp8_counts_.second;
  }
  entry["peak_allocated_bytes"] = static_cast<int64_t>(max_memory_allocated(config_.device));
  entry["peak_reserved_bytes"] = static_cast<int64_t>(max_memory_reserved(config_.device));
  if (const CachingAllocator* pool = host_pool_in_use()) {
    // Offload's host pool (Note [The host pool]), on a GPU or on the CPU.
    const DeviceStats host = pool->stats();
    entry["host_peak_allocated_bytes"] =
        host.allocated_bytes[static_cast<size_t>(StatType::all)].peak;
    entry["host_peak_reserved_bytes"] =
        host.reserved_bytes[static_cast<size_t>(StatType::all)].peak;
  } else if (!config_.device.is_cpu()) {
    // The host's share of a GPU run (pinned batches): the CPU's allocator.
    entry["host_peak_allocated_bytes"] = static_cast<int64_t>(max_memory_allocated(kCPU));
    entry["host_peak_reserved_bytes"] = static_cast<int64_t>(max_memory_reserved(kCPU));
  }
  append_metrics(entry);
}

}  // namespace headroom
