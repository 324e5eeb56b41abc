// Throughput of the bulk dtype conversions (core/dtype_convert.h), scalar against AVX-512, one
// thread. GB/s counts bytes read plus bytes written. Usage: dtype_convert_bench [elements]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/dtype_convert.h"
#include "core/philox.h"

namespace {

using namespace headroom;

constexpr int kRepeats = 7;

// Median seconds of kRepeats runs after one warm-up run.
double median_seconds(const std::function<void()>& run) {
  run();
  std::vector<double> seconds;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + kRepeats / 2, seconds.end());
  return seconds[kRepeats / 2];
}

#if defined(__x86_64__)
enum class Register { ecx, edx };

// One CPUID feature bit: clang 14's __builtin_cpu_supports knows neither f16c nor avx512fp16.
bool cpuid_bit(unsigned leaf, unsigned subleaf, Register reg, int bit) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(leaf, subleaf, &eax, &ebx, &ecx, &edx)) return false;
  return (((reg == Register::ecx ? ecx : edx) >> bit) & 1u) != 0;
}
#endif

void print_cpu_features() {
  std::printf("CPU features:");
#if defined(__x86_64__)
  __builtin_cpu_init();
  const struct {
    const char* name;
    bool present;
  } features[] = {
      {"avx2", __builtin_cpu_supports("avx2") != 0},
      {"f16c", cpuid_bit(1, 0, Register::ecx, 29)},
      {"avx512f", __builtin_cpu_supports("avx512f") != 0},
      {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
      {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0},
      {"avx512fp16", cpuid_bit(7, 0, Register::edx, 23)},
  };
  for (const auto& f : features) std::printf(" %s%s", f.present ? "+" : "-", f.name);
#else
  std::printf(" (not x86-64)");
#endif
  std::printf("\nkernels: avx512 %s; default ISA %s (HEADROOM_CPU_ISA=%s)\n",
              cpu_isa_supported(CpuIsa::avx512) ? "usable" : "unusable",
              cpu_isa_name(cpu_isa_best()),
              std::getenv("HEADROOM_CPU_ISA") ? std::getenv("HEADROOM_CPU_ISA") : "unset");
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{16} << 20;
  print_cpu_features();

  // Activations-like data: normals with std 1, some large and tiny values in fp8's ranges.
  std::vector<float> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = philox_normal(1, 0, i, 0.0f, i % 64 == 0 ? 300.0f : 1.0f);
  std::vector<unsigned char> narrow(n * 2);
  std::vector<float> wide(n);

  std::vector<CpuIsa> isas = {CpuIsa::scalar};
  if (cpu_isa_supported(CpuIsa::avx512)) isas.push_back(CpuIsa::avx512);

  struct Row {
    std::string name;
    size_t bytes_per_element;
    std::function<void(CpuIsa)> run;
  };
  std::vector<Row> rows;
  // The memory-bandwidth ceiling: a plain copy moves 8 bytes per element.
  rows.push_back({"f32 -> f32 (memcpy)", 8, [&](CpuIsa isa) {
                    convert_from_f32(src.data(), wide.data(), DType::f32, n, Overflow::ieee, isa);
                  }});
  for (DType dtype : {DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2}) {
    const size_t bytes = 4 + dtype_size(dtype);
    rows.push_back({std::string("f32 -> ") + dtype_name(dtype), bytes, [&, dtype](CpuIsa isa) {
                      convert_from_f32(src.data(), narrow.data(), dtype, n, Overflow::ieee, isa);
                    }});
    if (dtype == DType::f8_e4m3fn || dtype == DType::f8_e5m2) {
      rows.push_back(
          {std::string("f32 -> ") + dtype_name(dtype) + " saturate", bytes, [&, dtype](CpuIsa isa) {
             convert_from_f32(src.data(), narrow.data(), dtype, n, Overflow::saturate, isa);
           }});
    }
    rows.push_back({std::string(dtype_name(dtype)) + " -> f32", bytes, [&, dtype](CpuIsa isa) {
                      convert_to_f32(narrow.data(), dtype, wide.data(), n, isa);
                    }});
  }
  for (DType dtype : {DType::bf16, DType::f16}) {
    rows.push_back(
        {std::string("f32 -> ") + dtype_name(dtype) + " stochastic", 6, [&, dtype](CpuIsa isa) {
           convert_from_f32_stochastic(src.data(), narrow.data(), dtype, n, PhiloxState{7, 0}, isa);
         }});
  }

  std::printf("\n%zu elements, 1 thread, median of %d; GB/s = (bytes read + written) / time\n\n", n,
              kRepeats);
  std::printf("%-26s %12s %12s %9s\n", "conversion", "scalar GB/s", "avx512 GB/s", "speedup");
  for (const Row& row : rows) {
    double gbps[2] = {0, 0};
    for (size_t k = 0; k < isas.size(); ++k) {
      const CpuIsa isa = isas[k];
      // Decoding rows read what the encoding row before them wrote.
      const double s = median_seconds([&] { row.run(isa); });
      gbps[k] = static_cast<double>(n * row.bytes_per_element) / s / 1e9;
    }
    if (isas.size() > 1) {
      std::printf("%-26s %12.2f %12.2f %8.1fx\n", row.name.c_str(), gbps[0], gbps[1],
                  gbps[1] / gbps[0]);
    } else {
      std::printf("%-26s %12.2f %12s %9s\n", row.name.c_str(), gbps[0], "-", "-");
    }
  }
  return 0;
}
