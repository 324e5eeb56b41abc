// The GPU table: datasheet peaks and nvidia-smi's memory.total for each card.
#include "plan/gpu_specs.h"

#include <cctype>
#include <string>

#include "core/error.h"

namespace headroom {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// See Note [CUDA overhead per GPU family]. Hopper's context is measured; the others' are not.
// The workspace is headroom's cuBLASLt workspace (backend/cuda/gemm.h), the same on every GPU.
constexpr int64_t kWorkspace = 32 * kMiB;
constexpr GpuFamily kHopper{"hopper", 544 * kMiB, kWorkspace};
constexpr GpuFamily kAda{"ada", 448 * kMiB, kWorkspace};
constexpr GpuFamily kAmpere{"ampere", 448 * kMiB, kWorkspace};
constexpr GpuFamily kTuringVolta{"turing/volta", 384 * kMiB, kWorkspace};

std::string normalised(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace

const std::vector<GpuSpec>& gpu_specs() {
  // memory: nvidia-smi's memory.total in MiB; rates: dense peaks from NVIDIA's datasheets
  // (16-bit tensor cores with fp32 accumulation, plain fp32, memory bandwidth); host link: the
  // card's PCIe generation at x16, per direction.
  static const std::vector<GpuSpec> specs = {
      {"H100-80GB", kHopper, 81559 * kMiB, 989.0, 67.0, 3.35, 64.0, true},
      {"H100-PCIe", kHopper, 81559 * kMiB, 756.0, 51.0, 2.0, 64.0, true},
      {"H200", kHopper, 143771 * kMiB, 989.0, 67.0, 4.8, 64.0, true},
      {"A100-80GB", kAmpere, 81920 * kMiB, 312.0, 19.5, 2.039, 32.0, true},
      {"A100-40GB", kAmpere, 40960 * kMiB, 312.0, 19.5, 1.555, 32.0, true},
      {"A10", kAmpere, 23028 * kMiB, 125.0, 31.2, 0.6, 32.0, true},
      {"RTX3090", kAmpere, 24576 * kMiB, 35.6, 35.6, 0.936, 32.0, true},
      {"L40S", kAda, 46068 * kMiB, 362.0, 91.6, 0.864, 32.0, true},
      {"L4", kAda, 23034 * kMiB, 121.0, 30.3, 0.3, 32.0, true},
      {"RTX4090", kAda, 24564 * kMiB, 165.2, 82.6, 1.008, 32.0, true},
      {"T4", kTuringVolta, 15360 * kMiB, 65.0, 8.1, 0.32, 16.0, false},
      {"V100-32GB", kTuringVolta, 32768 * kMiB, 125.0, 15.7, 0.9, 16.0, false},
  };
  return specs;
}

const GpuSpec& find_gpu_spec(std::string_view name) {
  const std::string wanted = normalised(name);
  std::string known;
  for (const GpuSpec& spec : gpu_specs()) {
    // "H100" alone is the first row of that model: the 80 GB SXM card.
    const std::string model = normalised(spec.name.substr(0, spec.name.find('-')));
    if (normalised(spec.name) == wanted || model == wanted) return spec;
    known += known.empty() ? spec.name : ", " + spec.name;
  }
  throw ValueError(str_cat("gpu: unknown GPU '", name, "' (known: ", known, ")"));
}

const GpuFamily& default_gpu_family() { return kHopper; }

}  // namespace headroom
