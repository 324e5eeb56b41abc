// A step's kernel census summed per family and launch (plan/step_kernels.h).
#include "plan/step_kernels.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace headroom {
namespace {

double peak_flops(FlopPrecision precision, const GpuSpec& gpu) {
  switch (precision) {
    case FlopPrecision::fp32:
      return gpu.fp32_tflops * 1e12;
    case FlopPrecision::sixteen_bit:
      return gpu.bf16_tflops * 1e12;
    case FlopPrecision::fp8:
      return 2.0 * gpu.bf16_tflops * 1e12;
    case FlopPrecision::none:
      break;
  }
  return 0.0;
}

bool is_transfer(const KernelLaunch& launch) {
  return std::string_view(launch.family) == "transfer";
}

const char* precision_name(FlopPrecision precision) {
  switch (precision) {
    case FlopPrecision::fp32:
      return "fp32";
    case FlopPrecision::sixteen_bit:
      return "16-bit";
    case FlopPrecision::fp8:
      return "fp8";
    case FlopPrecision::none:
      break;
  }
  return "";
}

void add(KernelRow& row, const KernelLaunch& launch, int64_t times, double seconds) {
  row.launches += times;
  row.bytes += times * launch.work.bytes;
  row.flops += static_cast<double>(times) * launch.work.flops;
  row.host_syncs += launch.host_sync ? times : 0;
  row.strided_copies += launch.strided_copy ? times : 0;
  row.seconds += static_cast<double>(times) * seconds;
}

nlohmann::ordered_json row_json(const KernelRow& row) {
  return {{"launches_per_step", row.launches},
          {"host_syncs_per_step", row.host_syncs},
          {"strided_copies_per_step", row.strided_copies},
          {"bytes_per_step", row.bytes},
          {"flops_per_step", row.flops},
          {"roofline_ms", row.seconds * 1e3}};
}

}  // namespace

StepCensus StepCensus::of(const KernelCensus& census, int64_t per_step) {
  StepCensus out;
  out.launches = census.launches();
  const std::vector<size_t>& starts = census.micro_batch_starts();
  const int64_t run = static_cast<int64_t>(starts.size());
  if (run > 0 && per_step > run) {
    out.repeat_begin = starts.back();
    out.repeat_end = std::max(census.micro_batches_end(), out.repeat_begin);
    out.repeats = per_step - run;
  }
  return out;
}

double roofline_seconds(const KernelLaunch& launch, const GpuSpec& gpu) {
  const double bytes = static_cast<double>(launch.work.bytes);
  if (is_transfer(launch)) return bytes / (gpu.host_link_gb_per_s * 1e9);
  const double peak = peak_flops(launch.work.precision, gpu);
  const double compute = peak > 0.0 ? launch.work.flops / peak : 0.0;
  return std::max(compute, bytes / (gpu.memory_tb_per_s * 1e12));
}

StepKernels summarize_step_kernels(const StepCensus& census, const GpuSpec& gpu) {
  StepKernels out;
  out.gpu = gpu.name;
  std::map<std::tuple<std::string_view, std::string_view, std::string_view, FlopPrecision>, size_t>
      row_of;
  std::map<std::string_view, size_t> family_of;
  for (size_t i = 0; i < census.launches.size(); ++i) {
    const KernelLaunch& launch = census.launches[i];
    if (launch.device.is_cpu()) continue;  // the host's work (Note [Step roofline])
    const int64_t times =
        1 + (i >= census.repeat_begin && i < census.repeat_end ? census.repeats : 0);
    const double seconds = roofline_seconds(launch, gpu);
    const auto key = std::tuple(std::string_view(launch.family), std::string_view(launch.entry),
                                std::string_view(launch.work.shape), launch.work.precision);
    auto [row, added] = row_of.try_emplace(key, out.rows.size());
    if (added) {
      KernelRow& row_added = out.rows.emplace_back();
      row_added.family = launch.family;
      row_added.entry = launch.entry;
      row_added.shape = launch.work.shape;
      row_added.precision = launch.work.precision;
    }
    add(out.rows[row->second], launch, times, seconds);
    auto [family, family_added] = family_of.try_emplace(launch.family, out.families.size());
    if (family_added) out.families.emplace_back().family = launch.family;
    add(out.families[family->second], launch, times, seconds);
    add(out.total, launch, times, seconds);
    if (!is_transfer(launch)) {
      out.launch_seconds += static_cast<double>(times) * std::max(0.0, kLaunchSeconds - seconds);
    }
  }
  return out;
}

nlohmann::ordered_json StepKernels::to_json() const {
  nlohmann::ordered_json out = {{"gpu", gpu}};
  out.update(row_json(total));
  out["launch_bound_ms"] = launch_seconds * 1e3;
  nlohmann::ordered_json by_family = nlohmann::ordered_json::object();
  for (const KernelRow& f : families) by_family[f.family] = row_json(f);
  out["families"] = std::move(by_family);
  return out;
}

std::string StepKernels::format(size_t top) const {
  std::string out;
  char line[256];
  // The name last: a GEMM's shape and epilogue make it long.
  auto print_row = [&](const std::string& name, const KernelRow& r) {
    std::snprintf(line, sizeof line, "  %9lld %10.3f %11.1f %11.3f %6lld %8lld  ",
                  static_cast<long long>(r.launches), r.bytes / 1e9, r.flops / 1e9, r.seconds * 1e3,
                  static_cast<long long>(r.host_syncs), static_cast<long long>(r.strided_copies));
    out += line + name + "\n";
  };
  std::snprintf(line, sizeof line,
                "kernels per step on %s (roofline per launch: max(FLOPs / peak, bytes / "
                "bandwidth)):\n",
                gpu.c_str());
  out += line;
  std::snprintf(line, sizeof line, "  %9s %10s %11s %11s %6s %8s  %s\n", "launches", "GB moved",
                "GFLOP", "roofline ms", "syncs", "strided", "family");
  out += line;
  std::vector<KernelRow> families_by_time = families;
  std::stable_sort(families_by_time.begin(), families_by_time.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.seconds > b.seconds; });
  for (const KernelRow& f : families_by_time) print_row(f.family, f);
  print_row("total", total);
  std::snprintf(line, sizeof line,
                "  launches shorter than %.0f us (the host's launch rate) add %.3f ms\n",
                kLaunchSeconds * 1e6, launch_seconds * 1e3);
  out += line;
  std::vector<KernelRow> by_time = rows;
  std::stable_sort(by_time.begin(), by_time.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.seconds > b.seconds; });
  if (by_time.size() > top) by_time.resize(top);
  if (by_time.empty()) return out;
  std::snprintf(line, sizeof line, "the %zu launches that take longest:\n", by_time.size());
  out += line;
  for (const KernelRow& r : by_time) {
    std::string name = r.family + "." + r.entry;
    if (!r.shape.empty()) name += " " + r.shape;
    if (r.precision != FlopPrecision::none) name += std::string(" ") + precision_name(r.precision);
    print_row(name, r);
  }
  return out;
}

}  // namespace headroom
